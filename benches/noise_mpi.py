#!/usr/bin/env python3
"""Noise inside an MPI application: an 8-byte ping-pong between 2 MPI
ranks (benches/mpi_pingpong.c) with ffd embedded in both ranks through the
C ABI (ffd_init with MPI_Allgather, as an MPI library would), against the
same program not starting ffd.

Two MPIs, each with its own build of the program:
  Debian Open MPI  mpicc/mpirun of openmpi-bin (shared-memory BTL vader),
                   libffd on Debian's libfabric.
  MPICH            the PyPI wheel in target/venv/mpich (`ci/setup`), its
                   default devices; ffd runs on the wheel's libfabric
                   (-Wl,-rpath-link and LD_LIBRARY_PATH, as tests/capi_mpich.rs).

Settings: none; ffd at period 1 ms and 10 ms with ffd's own ratio,
timeout 10 periods (10 ms / 100 ms is the default); and ffd at 1 ms with
a tight timeout of 5 periods; all under ffd's default FFD_SCHED=boost
(normal policy, lifted only to handle a same-host exit); 1 ms / 10 ms
again under FFD_SCHED=normal ("normal": never lifted), and both 1 ms
settings with the progress thread under SCHED_FIFO (`FFD_SCHED=fifo`,
"fifo": its wake-ups preempt the spinning ranks instead of waiting for a
scheduler tick) (FFD_DOMAIN=lo throughout). A round runs every (MPI, setting) once, in an order that
rotates every round, so drifts in the machine's load hit all alike. Each
run ping-pongs for --seconds; its figure is the mean one-way latency (µs)
over the whole run, which counts every interruption (the detector's and
anything else's). Its median batch (of 1000 round trips) is shown too: the
undisturbed latency, which a busy machine's other work moves far less.
The table gives, per MPI and setting, the medians over rounds and their
ratios to that MPI's none, and how many runs ended with ffd having
declared a live rank failed (a starved progress thread: the declared rank
then stops heartbeating, which changes what is measured).

    benches/noise_mpi.py [--quick] [--rounds 7] [--seconds 3] [--mpi openmpi,mpich]

--quick: 5 rounds of 1 s runs (about 2 minutes).
Writes target/bench/noise_mpi.json.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import local_support as ls
from common import OUT, ROOT, fmt, machine, median, table, write_json

SOURCE = os.path.join(ROOT, "benches", "mpi_pingpong.c")
MPICH = os.path.join(ROOT, "target", "venv", "mpich")
# (period ms, timeout ms, FFD_SCHED)
SETTINGS = [("none", None), ("1ms", (1, 10, "boost")), ("1ms/5ms", (1, 5, "boost")),
            ("1ms normal", (1, 10, "normal")), ("1ms fifo", (1, 10, "fifo")), ("1ms/5ms fifo", (1, 5, "fifo")),
            ("10ms", (10, 100, "boost"))]


def libffd():
    """ci/pkgconfig (release): the directory of ffd.pc."""
    out = subprocess.run([os.path.join(ROOT, "ci", "pkgconfig")], capture_output=True, text=True,
                         timeout=3600, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"ci/pkgconfig failed: {out.stderr[-3000:]}")
    return out.stdout.strip()


def ffd_flags(pcdir):
    out = subprocess.run(["pkg-config", "--cflags", "--libs", "ffd"], capture_output=True, text=True,
                         env={**os.environ, "PKG_CONFIG_PATH": pcdir}, timeout=60, check=True)
    return out.stdout.split()


def compile_with(mpicc, flags, name, env=None):
    exe = os.path.join(OUT, name)
    os.makedirs(OUT, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    subprocess.run([mpicc, "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", SOURCE, "-o", exe, *flags],
                   check=True, timeout=300, env={**base, **(env or {})})
    return exe


def ffd_env(timing):
    if timing is None:
        return {}
    period, timeout, sched = timing
    return {"FFD_DOMAIN": "lo", "FFD_PERIOD": f"{period}ms", "FFD_TIMEOUT": f"{timeout}ms", "FFD_SCHED": sched}


class OpenMPI:
    name = "Debian Open MPI"

    def __init__(self, flags):
        self.mpirun = shutil.which("mpirun")
        self.exe = compile_with(shutil.which("mpicc"), flags, "mpi_pingpong_ompi")
        self.version = subprocess.run([self.mpirun, "--version"], capture_output=True, text=True).stdout.split("\n")[0]

    def command(self, tmp, timing, seconds):
        env = ffd_env(timing)
        cmd = [self.mpirun, "--allow-run-as-root", "--mca", "btl", "self,vader", "--mca", "orte_tmpdir_base", tmp,
               "--mca", "oob_tcp_if_include", "lo"]
        for k in env:
            cmd += ["-x", k]
        cmd += ["-np", "2", self.exe, "--seconds", str(seconds)] + (["--ffd"] if timing else [])
        return cmd, env


class Mpich:
    name = "MPICH (PyPI wheel)"

    def __init__(self, flags):
        self.bundled = os.path.join(MPICH, "lib", "mpich")
        self.exe = compile_with(os.path.join(MPICH, "bin", "mpicc"), flags + [f"-Wl,-rpath-link,{self.bundled}"],
                                "mpi_pingpong_mpich")
        out = subprocess.run([os.path.join(MPICH, "bin", "mpichversion")], capture_output=True, text=True)
        self.version = " ".join(out.stdout.split()[:3]) if out.returncode == 0 else "mpich (wheel)"

    def command(self, tmp, timing, seconds):
        env = {**ffd_env(timing), "LD_LIBRARY_PATH": self.bundled, "FI_TCP_IFACE": "lo"}
        cmd = [os.path.join(MPICH, "bin", "mpiexec"), "-iface", "lo", "-np", "2", self.exe,
               "--seconds", str(seconds)] + (["--ffd"] if timing else [])
        return cmd, env


def one_run(mpi, timing, seconds):
    """µs one way (mean, median batch) of one ping-pong run, and the
    failures ffd knew at its end (> 0: a false report)."""
    with tempfile.TemporaryDirectory(prefix="ffd-bench-mpi-") as tmp:
        cmd, env = mpi.command(tmp, timing, seconds)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("FFD_", "OMPI_", "PMIX_", "LD_LIBRARY_PATH"))}
        proc = ls.spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**base, **env})
        try:
            out, _ = proc.communicate(timeout=seconds + 120)
        finally:
            ls.end(proc)
    m = re.search(r"pingpong: (\d+) round trips in ([\d.]+) s, ([\d.]+) us one way \(mean\), ([\d.]+) us"
                  r".*epoch (\d+)", out)
    if not m:
        raise RuntimeError(f"{mpi.name}: no result from {' '.join(cmd)}:\n{out[-3000:]}")
    return float(m[3]), float(m[4]), int(m[5])


def interrupted(signum, frame):
    raise KeyboardInterrupt


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="5 rounds of 1 s runs")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds (the median is over these)")
    p.add_argument("--seconds", type=float, default=3.0, help="ping-pong time of each run")
    p.add_argument("--mpi", default="openmpi,mpich", help="which MPIs: openmpi (Debian), mpich (wheel)")
    a = p.parse_args()
    if a.quick:
        a.rounds, a.seconds = 5, 1.0
    signal.signal(signal.SIGTERM, interrupted)
    flags = ffd_flags(libffd())
    mpis, notes = [], []
    for which in a.mpi.split(","):
        if which == "openmpi":
            if shutil.which("mpirun") and shutil.which("mpicc"):
                mpis.append(OpenMPI(flags))
            else:
                notes.append("Debian Open MPI not measured: no mpicc/mpirun (apt-get install openmpi-bin libopenmpi-dev)")
        elif which == "mpich":
            if os.path.exists(os.path.join(MPICH, "bin", "mpiexec")):
                mpis.append(Mpich(flags))
            else:
                notes.append(f"MPICH not measured: {os.path.relpath(MPICH, ROOT)} is missing (ci/setup)")
        else:
            p.error(f"--mpi: unknown `{which}` (openmpi, mpich)")
    if not mpis:
        sys.exit("noise_mpi.py: no MPI to measure: " + "; ".join(notes))
    runs = [(m, s) for m in mpis for s in SETTINGS]
    samples = {(m.name, s[0]): [] for m, s in runs}
    batches = {(m.name, s[0]): [] for m, s in runs}
    false = {(m.name, s[0]): 0 for m, s in runs}
    t0 = time.monotonic()
    load_start = os.getloadavg()
    try:
        for r in range(a.rounds):
            shift = r % len(runs)
            for mpi, (name, timing) in runs[shift:] + runs[:shift]:
                mean, med, epoch = one_run(mpi, timing, a.seconds)
                samples[(mpi.name, name)].append(mean)
                batches[(mpi.name, name)].append(med)
                false[(mpi.name, name)] += 1 if epoch else 0
                print(f"[{time.monotonic() - t0:5.0f} s, load {os.getloadavg()[0]:.1f}] round {r + 1}: "
                      f"{mpi.name:<18} {name:<7} {mean:.3f} µs one way"
                      f"{' (ffd declared a live rank failed)' if epoch else ''}", flush=True)
    finally:
        ls.end_started()
    load_end = os.getloadavg()
    rows, results = [], []
    for mpi in mpis:
        base = median(samples[(mpi.name, "none")])
        base_batch = median(batches[(mpi.name, "none")])
        for name, timing in SETTINGS:
            m = median(samples[(mpi.name, name)])
            mb = median(batches[(mpi.name, name)])
            results.append({"mpi": mpi.name, "version": mpi.version, "detector": name,
                            "period_ms": timing[0] if timing else None, "timeout_ms": timing[1] if timing else None,
                            "sched": timing[2] if timing else None,
                            "median_us": m, "ratio_to_none": m / base, "samples_us": samples[(mpi.name, name)],
                            "median_batch_us": mb, "batch_ratio_to_none": mb / base_batch,
                            "batch_samples_us": batches[(mpi.name, name)],
                            "runs_with_false_report": false[(mpi.name, name)]})
            rows.append([mpi.name, name, fmt(m, 3), fmt(m / base, 3), f"{100 * (m / base - 1):+.1f}%",
                         fmt(mb, 3), fmt(mb / base_batch, 3), false[(mpi.name, name)],
                         " ".join(f"{s:.2f}" for s in samples[(mpi.name, name)])])
    print()
    table(["MPI", "ffd", "median µs one way", "ratio to none", "change", "median-batch µs", "its ratio",
           "runs with a false report", "rounds (µs, mean of each)"], rows)
    took = time.monotonic() - t0
    print(f"({a.rounds} interleaved rounds of {a.seconds:g} s per run; took {took:.0f} s; "
          f"load average {load_start[0]:.1f} at start, {load_end[0]:.1f} at end)")
    for note in notes:
        print(note)
    write_json("noise_mpi", {"benchmark": "noise_mpi", "tool": "benches/mpi_pingpong.c, 8 B, 2 ranks",
                             "rounds": a.rounds, "seconds": a.seconds, "machine": machine(),
                             "load_start": load_start, "load_end": load_end, "notes": notes,
                             "results": results})


if __name__ == "__main__":
    ls.run_main(main)
