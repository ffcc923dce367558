#!/usr/bin/env python3
"""kill -9 -> every survivor as the killed rank's memory grows: ffd beside
Open MPI 5 ULFM, in one run, on the same N, victims and memory.

A killed process is torn down by the kernel in the context of its last
thread: its memory is freed before its pidfd is readable and before its
parent can reap it (3-4 ms for a 46 MiB agent here, about 25 ms a GiB of
plain data). ffd's exit
words see the death at the start of that exit (the kernel walks the
robust-futex list before the address space goes, docs/design.md §4.12 "Hosts");
a pidfd (`FFD_LOCAL=pidfd`) and ULFM's daemon (which reaps the child and
tells everyone through PMIx) see it at the end. The teardown also holds
one of the machine's cores, non-preemptibly here: survivors' threads
woken onto that core wait for it. `benches/local_kill.py` kills ranks of
about 46 MiB; real ranks hold their data, which this benchmark models
with `ffd agent --memory` / `ulfm_detect --memory-mib` (every rank holds
that much written memory from before it is ready).

For each size in --memory (MiB per rank), rounds alternate the detectors
(ffd with FFD_LOCAL=auto, ffd with FFD_LOCAL=pidfd, ULFM; the order
rotates every round) on the same victims until each has --trials kills;
a job kills 2 ranks 1 s apart. Measures per kill (ms): detect = the
first rank to know; every survivor = the last live rank to know.

    benches/victim_memory.py [--n 8] [--memory 0,256,1024] [--trials 10]
                             [--period 10ms --timeout 100ms] [--skip ulfm]

N x the largest size must fit in memory (8 x 1 GiB by default; each job
runs alone). Writes target/bench/victim_memory.json.
"""

import argparse
import os
import signal
import time

import local_support as ls
import ulfm
from common import build, fmt, machine, table, write_json
from local_kill import ffd_job, ffd_samples, interrupted, ms, summarize, victims_for


def label(d):
    kind, mode = d
    return "ULFM (Open MPI 5)" if kind == "ulfm" else ls.mode_label(mode)


def measure(a, detectors, progress):
    rows = []
    for mib in a.memory:
        samples = {d: [] for d in detectors}
        false_reports = {d: 0 for d in detectors}
        for round_no in range(4 * a.trials):  # bound; normally trials / 2 rounds
            if all(len(samples[d]) >= a.trials for d in detectors):
                break
            k = min(2, a.trials - min(len(s) for s in samples.values()))
            victims = victims_for(a.n, max(1, k), round_no)
            order = detectors[round_no % len(detectors):] + detectors[:round_no % len(detectors)]
            for d in order:
                if len(samples[d]) >= a.trials:
                    continue
                if d[0] == "ffd":
                    faults = [x for i, v in enumerate(victims) for x in ("--kill", f"{v}@{1000 + 1000 * i}ms")]
                    agent_args = ["--memory", f"{mib}MiB"] if mib else []
                    report = ffd_job(a.n, faults, 1000 * len(victims) + 1500, a.period, a.timeout, d[1],
                                     agent_args=agent_args)
                    got = ffd_samples(report, "kill")
                    false_reports[d] += len(report["false_reports"])
                else:
                    got = ulfm.samples(ulfm.run_job(a.n, victims, "kill", ms(a.period), ms(a.timeout),
                                                    memory_mib=mib))
                samples[d] += got
                progress(f"{mib} MiB {label(d)}: " + ", ".join(
                    f"rank {s['rank']} every survivor {fmt(s['all_ms'], 2)} ms ({s['cause']})" for s in got))
        for d in detectors:
            rows.append({"memory_mib": mib, "detector": label(d), "ffd_local": d[1], "ranks": a.n,
                         "fault": "kill", "false_reports": false_reports[d], **summarize(samples[d]),
                         "samples": samples[d]})
    return rows


def print_tables(rows):
    print()
    table(["MiB a rank", "detector", "trials", "detect p50", "detect p99", "every survivor p50",
           "every survivor p99", "causes", "missed", "false"],
          [[r["memory_mib"], r["detector"], r["trials"], fmt(r["detect_p50_ms"], 2), fmt(r["detect_p99_ms"], 2),
            fmt(r["all_p50_ms"], 2), fmt(r["all_p99_ms"], 2),
            " ".join(f"{k}:{v}" for k, v in sorted(r["causes"].items())), r["missed"], r["false_reports"]]
           for r in rows])
    print("(ms, kill -9 -> the first / the last live rank knows)")
    ratios = []
    for r in rows:
        if r["detector"].startswith("ULFM"):
            continue
        u = next((x for x in rows if x["detector"].startswith("ULFM") and x["memory_mib"] == r["memory_mib"]), None)
        if u is None:
            continue

        def ratio(key):
            return None if r[key] is None or not u[key] else r[key] / u[key]
        ratios.append([r["memory_mib"], r["detector"], fmt(r["all_p50_ms"], 2), fmt(u["all_p50_ms"], 2),
                       fmt(ratio("all_p50_ms"), 2), fmt(r["all_p99_ms"], 2), fmt(u["all_p99_ms"], 2),
                       fmt(ratio("all_p99_ms"), 2)])
    if ratios:
        print()
        table(["MiB a rank", "ffd", "ffd p50", "ULFM p50", "ratio p50", "ffd p99", "ULFM p99", "ratio p99"], ratios)
        print("(every survivor, ms; ratio = ffd / ULFM)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=8, help="ranks of each job (one host)")
    p.add_argument("--memory", default="0,256,1024", help="comma-separated MiB every rank holds")
    p.add_argument("--trials", type=int, default=10, help="kills per (size, detector)")
    p.add_argument("--period", default="10ms")
    p.add_argument("--timeout", default="100ms")
    p.add_argument("--skip", default="", help="`ulfm` to leave ULFM out")
    a = p.parse_args()
    try:
        a.memory = [int(x) for x in a.memory.split(",") if x]
    except ValueError:
        p.error(f"--memory: `{a.memory}`: give whole MiB, comma-separated (e.g. 0,256,1024)")
    if not a.memory or any(x < 0 for x in a.memory):
        p.error("--memory: give at least one size, none negative")
    if a.n < 3:
        p.error("--n must be at least 3 (2 victims and a survivor)")
    need = a.n * (max(a.memory) + 64) * (1 << 20)  # an agent holds ~46 MiB of its own
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    if need > 0.8 * have:
        p.error(f"--n {a.n} x {max(a.memory)} MiB needs {need >> 20} MiB; {have >> 20} MiB is free")

    signal.signal(signal.SIGTERM, interrupted)
    t0 = time.monotonic()

    def progress(text):
        print(f"[{time.monotonic() - t0:6.1f} s, load {os.getloadavg()[0]:.1f}] {text}", flush=True)

    build()
    modes = [m for m in ls.local_modes() if m in ("auto", "pidfd", None)]
    detectors = [("ffd", m) for m in modes]
    notes = []
    why = ulfm.available() if "ulfm" not in a.skip.split(",") else "skipped (--skip)"
    if why is None:
        ulfm.build()
        detectors.append(("ulfm", None))
    else:
        notes.append(f"ULFM not measured: {why}")
    load_start = os.getloadavg()
    try:
        rows = measure(a, detectors, progress)
    finally:
        ls.end_started()
    load_end = os.getloadavg()
    print_tables(rows)
    for note in notes:
        print(note)
    took = time.monotonic() - t0
    print(f"took {took:.0f} s; load average at start {load_start[0]:.1f}, at end {load_end[0]:.1f}")
    write_json("victim_memory", {"benchmark": "victim_memory", "machine": machine(), "ranks": a.n,
                                 "period": a.period, "timeout": a.timeout, "memory_mib": a.memory,
                                 "notes": notes, "load_start": load_start, "load_end": load_end,
                                 "seconds": took, "results": rows})


if __name__ == "__main__":
    ls.run_main(main)
