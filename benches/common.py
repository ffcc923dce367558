"""Shared helpers of the ffd benchmarks: the release binary, running
`ffd run` with a JSON report, percentiles, tables, JSON output.

Every benchmark prints a table and writes JSON under target/bench/.
"""

import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "target", "bench")
FFD = os.path.join(ROOT, "target", "release", "ffd")


def build():
    """Builds the release binary (quietly) and returns its path."""
    subprocess.run(
        ["cargo", "build", "--release", "--quiet", "--bin", "ffd"],
        cwd=ROOT,
        check=True,
    )
    return FFD


def run_job(args, env=None, timeout=600, agent_args=()):
    """Runs `ffd run ARGS --json F [-- AGENT_ARGS]` and returns (report,
    seconds taken).

    `ffd run` reaps its agents on every path; `timeout` bounds the launcher.
    """
    with tempfile.TemporaryDirectory(prefix="ffd-bench-") as d:
        path = os.path.join(d, "report.json")
        t0 = time.monotonic()
        proc = subprocess.run(
            [FFD, "run", *args, "--json", path, *(["--", *agent_args] if agent_args else [])],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
            timeout=timeout,
            text=True,
        )
        took = time.monotonic() - t0
        if not os.path.exists(path):
            raise RuntimeError(f"ffd run {' '.join(args)} wrote no report: {proc.stderr[-2000:]}")
        with open(path) as f:
            return json.load(f), took


def percentile(values, q):
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))
    return s[k]


def median(values):
    return statistics.median(values) if values else None


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


# Every table a benchmark printed, in order: write_json keeps them in its
# JSON, so that benches/report.py renders the same table in the docs.
TABLES = []


def table(headers, rows):
    """Prints an aligned table (and keeps it for write_json)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    TABLES.append({"headers": cells[0], "rows": cells[1:]})
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for i, r in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def git(*args):
    """`git ARGS` in the repository, its output stripped; None outside one."""
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


# The commit a benchmark started on: a commit made while it runs must not
# become its stamp.
START_COMMIT = git("rev-parse", "--short=12", "HEAD")


def provenance(command=None):
    """What a benchmark's figures ran on: the commit it started on (and
    whether tracked files differed from it, or HEAD moved during the run),
    the date, the command and the machine. benches/report.py refuses a
    JSON without it."""
    dirty = git("status", "--porcelain", "--untracked-files=no")
    now = git("rev-parse", "--short=12", "HEAD")
    start = START_COMMIT or now
    return {
        "commit": start,
        "dirty": bool(dirty) or now != start,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": command or " ".join([os.path.relpath(os.path.abspath(sys.argv[0]), ROOT), *sys.argv[1:]]),
        "machine": machine(),
    }


def write_json(name, data):
    """Writes target/bench/NAME.json, stamped with its provenance and the
    tables printed so far (an object gets both keys; a list is wrapped as
    {"results": list})."""
    if not isinstance(data, dict):
        data = {"results": data}
    data = {"provenance": provenance(), "tables": list(TABLES), **data}
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, f"{name}.json")
    with open(path, "w") as f:
        json.dump(data, f, indent=2)
    print(f"\nwrote {os.path.relpath(path, ROOT)}")
    return path


def preempt_model():
    """The kernel's preemption model: the one in force where it can be
    read (debugfs, unless the kernel's lockdown hides it), else the one
    the boot line asks for, else the one it was built with; None if none
    can be read. Under `none` a thread woken on a core that is busy in
    the kernel (a dying process's memory teardown) runs only once that
    code yields: at a cond_resched() after the core's tick has marked it
    for rescheduling, or on its return to user space."""
    try:
        with open("/sys/kernel/debug/sched/preempt") as f:
            for word in f.read().split():
                if word.startswith("("):
                    return word.strip("()")
    except OSError:
        pass
    try:
        with open("/proc/cmdline") as f:
            for word in f.read().split():
                if word.startswith("preempt="):
                    return word.split("=", 1)[1] + " (boot)"
    except OSError:
        pass
    for path in ("/proc/config.gz", f"/boot/config-{os.uname().release}"):
        try:
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt") as f:
                lines = {line.strip() for line in f}
        except OSError:
            continue
        for model in ("RT", "NONE", "VOLUNTARY", "LAZY"):
            if f"CONFIG_PREEMPT_{model}=y" in lines:
                return model.lower() + " (built)"
        if "CONFIG_PREEMPT=y" in lines:
            return "full (built)"
    return None


def _spin_gaps(cpu, seconds, out):
    """One process's busy loop on `cpu`: the gaps between its clock reads
    over 100 µs, into `out` (max µs, total ms, count over 1 ms)."""
    os.sched_setaffinity(0, {cpu})
    os.nice(-20 if os.geteuid() == 0 else 0)
    clock = time.perf_counter
    start = last = clock()
    worst, lost, over_ms = 0.0, 0.0, 0
    while last - start < seconds:
        now = clock()
        gap = now - last
        if gap > 100e-6:
            lost += gap
            worst = max(worst, gap)
            over_ms += gap > 1e-3
        last = now
    out.put((cpu, round(worst * 1e6), round(lost * 1e3, 1), over_ms))


def cpu_gaps(seconds=2.0):
    """How much of its CPUs this machine loses while busy: a busy loop on
    every CPU at once, each measuring the gaps between its clock reads
    over 100 µs. Nothing of the guest runs then but this and the idle
    system's few threads, so most of the lost time is the host's: a VM
    whose vCPUs the host deschedules (and whose steal time it does not
    account) shows gaps of milliseconds. Every figure here in the
    millisecond range carries them. {cpu: (max gap µs, ms lost, gaps over
    1 ms)}."""
    import multiprocessing
    cpus = sorted(os.sched_getaffinity(0))
    out = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_spin_gaps, args=(c, seconds, out)) for c in cpus]
    for p in procs:
        p.start()
    got = {}
    for _ in procs:
        cpu, worst, lost, over_ms = out.get()
        got[cpu] = {"max_gap_us": worst, "lost_ms": lost, "gaps_over_1ms": over_ms}
    for p in procs:
        p.join()
    return got


def machine():
    """What the numbers were measured on."""
    return {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "uname": " ".join(os.uname()),
        "preempt": preempt_model(),
    }
