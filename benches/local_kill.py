#!/usr/bin/env python3
"""Crash and hang notification: injection -> every survivor knows, ffd
beside Open MPI 5 ULFM, in one run.

Same host (one machine, no emulated hosts), N in --sizes, faults kill -9
and SIGSTOP: for each (N, fault), rounds alternate the detectors (ffd in
each FFD_LOCAL mode this ffd supports, then ULFM; the order rotates every
round) on the same victims, until each has --trials faults. A job faults
up to min(5, N/4) victims, 1 s apart, the first 1 s after every rank is
ready.

  ffd   `ffd run -n N --kill/--stop R@T ... --json`; times from the agents'
        stamps (the instant each rank's detector learned it).
  ULFM  `mpirun --with-ft ulfm --mca mpi_ft_detector true` with the same
        period and timeout (mpi_ft_detector_period/_timeout) running
        benches/ulfm_detect.c: every rank waits on an MPI_Irecv(ANY_SOURCE)
        and MPIX_Comm_get_failed, polling every --poll-us, and prints
        CLOCK_REALTIME when it learns; this script SIGKILLs/SIGSTOPs the
        victim's PID and notes the time just before.

Measures per fault (ms): detect = first rank to know; every survivor = the
last live rank to know (the headline); propagate = the two's difference.

Across emulated hosts (ffd only; `ffd run --hosts H`, rank r on host
r mod H, a host's leader is its lowest rank): a kill -9 (victims both
leaders and not), a whole-host kill (every rank of a host at once:
`--kill-host` when ffd run has it, else one `--kill` per rank at the same
time; a trial = a host, its time = the last survivor to know every rank
of it), and a host cut off by a network namespace (agents in H namespaces
on a bridge, the host's veth taken down: no reset, timeouts only; needs
root, skipped otherwise).

FFD_LOCAL: when `ffd info` lists it, ffd runs once with FFD_LOCAL=auto
(label "ffd"), once with FFD_LOCAL=pidfd (same host only, where this ffd
accepts it) and once with FFD_LOCAL=off; before that setting exists, ffd
is the per-process fabric ring (label "ffd"). --sched runs each
same-host ffd mode once per FFD_SCHED given (default: boost, ffd's
default, unlabelled; others labelled "... FFD_SCHED=normal" or "...
FFD_SCHED=fifo").

    benches/local_kill.py [--quick] [--trials 10] [--sizes 8,32]
                          [--period 10ms --timeout 100ms] [--hosts 4]
                          [--poll-us 200] [--skip ulfm,hosts,netns]
                          [--sched boost,normal,fifo]

--quick: about 2 minutes (N = 8 only, 4 trials, fewer host trials).
Writes target/bench/local_kill.json (everything, with every sample) and
target/bench/ulfm_local.json (same-host rows with a "detector" label, for
benches/plot.py's ulfm.png).
"""

import argparse
import os
import signal
import time

import local_support as ls
import netns
import ulfm
from common import build, fmt, machine, median, percentile, run_job, table, write_json


def ms(text):
    """`10ms` / `1s` -> milliseconds."""
    text = text.strip()
    if text.endswith("ms"):
        return float(text[:-2])
    if text.endswith("s"):
        return float(text[:-1]) * 1000
    raise argparse.ArgumentTypeError(f"`{text}`: give a duration like 10ms or 1s")


def victims_for(n, k, round_no):
    """k ranks spread around 1..n-1, shifted every round (never rank 0)."""
    return sorted({(round_no + i * (n - 1) // k) % (n - 1) + 1 for i in range(k)})


def ffd_samples(report, fault):
    """One sample per faulted rank of `fault` from an `ffd run` report."""
    out = []
    for f in report["failures"]:
        if f["fault"] != fault:
            continue
        inj = f["injected_at_ms"]
        det = f["detected_at_ms"]
        alln = f["all_notified_at_ms"]
        out.append({"rank": f["rank"], "detect_ms": None if det is None else det - inj,
                    "all_ms": None if alln is None else alln - inj,
                    "propagate_ms": None if alln is None or det is None else alln - det,
                    "cause": f["cause"] or "none", "missed": f["missed"]})
    return out


def summarize(samples):
    """p50/p99 of each measure; a sample some survivor never got counts as
    missed (and is left out of the percentiles)."""
    def col(key):
        return [s[key] for s in samples if s[key] is not None]
    causes = {}
    for s in samples:
        causes[s["cause"]] = causes.get(s["cause"], 0) + 1
    return {"trials": len(samples), "missed": sum(1 for s in samples if s["all_ms"] is None),
            "causes": causes,
            "detect_p50_ms": median(col("detect_ms")), "detect_p99_ms": percentile(col("detect_ms"), 99),
            "all_p50_ms": median(col("all_ms")), "all_p99_ms": percentile(col("all_ms"), 99),
            "propagate_p50_ms": median(col("propagate_ms")),
            "propagate_p99_ms": percentile(col("propagate_ms"), 99)}


def ffd_job(n, fault_args, duration_ms, period, timeout, mode, hosts=None, sched="boost", agent_args=()):
    args = ["-n", str(n), "--period", period, "--timeout", timeout, *fault_args,
            "--duration", f"{duration_ms}ms"]
    if hosts:
        args += ["--hosts", str(hosts)]
    env = ls.mode_env(mode)
    env["FFD_SCHED"] = sched
    report, _ = run_job(args, env=env, timeout=300, agent_args=agent_args)
    return report


def same_host(a, modes, with_ulfm, progress):
    """Interleaved ffd/ULFM rounds on one host; returns result rows."""
    rows = []
    period_ms, timeout_ms = ms(a.period), ms(a.timeout)
    detectors = [("ffd", m, s) for m in modes for s in a.sched] + ([("ulfm", None, None)] if with_ulfm else [])
    for n in a.sizes:
        per_job = max(1, min(5, n // 4))
        for fault in ["kill", "stop"]:
            samples = {d: [] for d in detectors}
            false_reports = {d: 0 for d in detectors}
            jobs = {d: 0 for d in detectors}
            for round_no in range(4 * a.trials):  # bound; normally trials / per_job rounds
                if all(len(samples[d]) >= a.trials for d in detectors):
                    break
                k = min(per_job, a.trials - min(len(s) for s in samples.values()))
                victims = victims_for(n, max(1, k), round_no)
                order = detectors[round_no % len(detectors):] + detectors[:round_no % len(detectors)]
                for d in order:
                    if len(samples[d]) >= a.trials:
                        continue
                    jobs[d] += 1
                    if d[0] == "ffd":
                        faults = [x for i, v in enumerate(victims) for x in (f"--{fault}", f"{v}@{1000 + 1000 * i}ms")]
                        report = ffd_job(n, faults, 1000 * len(victims) + 1500, a.period, a.timeout, d[1],
                                         sched=d[2])
                        got = ffd_samples(report, fault)
                        false_reports[d] += len(report["false_reports"])
                    else:
                        got = ulfm.samples(ulfm.run_job(n, victims, fault, period_ms, timeout_ms,
                                                        poll_us=a.poll_us))
                    samples[d] += got
                    progress(f"N={n} {fault} {label(d)}: " + ", ".join(
                        f"rank {s['rank']} every survivor {fmt(s['all_ms'], 2)} ms ({s['cause']})" for s in got))
            for d in detectors:
                rows.append({"scope": "same host", "detector": label(d), "ffd_local": d[1] if d[0] == "ffd" else None,
                             "ffd_sched": d[2],
                             "ranks": n, "hosts": 1, "fault": fault, "jobs": jobs[d],
                             "false_reports": false_reports[d], **summarize(samples[d]),
                             "log2_n": n.bit_length() - 1, "samples": samples[d]})
    return rows


def label(d):
    kind, mode, sched = d
    if kind == "ulfm":
        return "ULFM (Open MPI 5)"
    return ls.mode_label(mode) + ("" if sched == "boost" else f" FFD_SCHED={sched}")


def across_hosts(a, modes, kill_host, progress):
    """ffd with emulated hosts: kill -9, whole-host kill."""
    rows = []
    h = a.hosts
    for mode in modes:
        for n in a.sizes:
            if n < 2 * h:
                continue
            # kill -9 of single ranks, leaders and not.
            samples, jobs, false_reports = [], 0, 0
            per_job = max(1, min(5, n // 4))
            for round_no in range(4 * a.host_trials):
                if len(samples) >= a.host_trials:
                    break
                victims = victims_for(n, min(per_job, a.host_trials - len(samples)), round_no)
                faults = [x for i, v in enumerate(victims) for x in ("--kill", f"{v}@{1000 + 1000 * i}ms")]
                report = ffd_job(n, faults, 1000 * len(victims) + 1500, a.period, a.timeout, mode, hosts=h)
                jobs += 1
                false_reports += len(report["false_reports"])
                got = ffd_samples(report, "kill")
                for s in got:
                    s["leader"] = ls.is_leader(s["rank"], h)
                samples += got
                progress(f"N={n} H={h} kill {ls.mode_label(mode)}: " + ", ".join(
                    f"rank {s['rank']}{' (leader)' if s['leader'] else ''} {fmt(s['all_ms'], 2)} ms ({s['cause']})"
                    for s in got))
            rows.append({"scope": "emulated hosts", "detector": ls.mode_label(mode), "ffd_local": mode,
                         "ranks": n, "hosts": h, "fault": "kill", "jobs": jobs, "false_reports": false_reports,
                         **summarize(samples), "samples": samples})

            # Whole hosts: up to half of them per job, never host 0.
            samples, jobs, false_reports = [], 0, 0
            per_job = max(1, h // 2)
            for round_no in range(4 * a.host_trials):
                if len(samples) >= a.host_trials:
                    break
                count = min(per_job, a.host_trials - len(samples))
                doomed = [(round_no + i) % (h - 1) + 1 for i in range(count)]
                faults = []
                for i, host in enumerate(doomed):
                    at = f"{1000 + 1000 * i}ms"
                    if kill_host:
                        faults += ["--kill-host", f"{host}@{at}"]
                    else:
                        for r in ls.host_ranks(host, n, h):
                            faults += ["--kill", f"{r}@{at}"]
                report = ffd_job(n, faults, 1000 * len(doomed) + 1500, a.period, a.timeout, mode, hosts=h)
                jobs += 1
                false_reports += len(report["false_reports"])
                per_rank = {f["rank"]: f for f in report["failures"] if f["fault"] == "kill"}
                got = []
                for host in doomed:
                    fs = [per_rank.get(r) for r in ls.host_ranks(host, n, h)]
                    if any(f is None for f in fs):
                        raise RuntimeError(f"ffd run reported no failure for some rank of host {host}: {report['failures']}")
                    inj = min(f["injected_at_ms"] for f in fs)
                    dets = [f["detected_at_ms"] for f in fs if f["detected_at_ms"] is not None]
                    alls = [f["all_notified_at_ms"] for f in fs]
                    causes = sorted({f["cause"] or "none" for f in fs})
                    every = None if any(x is None for x in alls) else max(alls) - inj
                    got.append({"rank": host, "host": host, "detect_ms": min(dets) - inj if dets else None,
                                "all_ms": every,
                                "propagate_ms": None if every is None or not dets else every - (min(dets) - inj),
                                "cause": "+".join(causes), "missed": sum(f["missed"] for f in fs)})
                samples += got
                progress(f"N={n} H={h} whole-host kill {ls.mode_label(mode)}: " + ", ".join(
                    f"host {s['host']} {fmt(s['all_ms'], 2)} ms ({s['cause']})" for s in got))
            rows.append({"scope": "emulated hosts", "detector": ls.mode_label(mode), "ffd_local": mode,
                         "ranks": n, "hosts": h, "fault": "host kill", "kill_host_option": kill_host,
                         "jobs": jobs, "false_reports": false_reports, **summarize(samples), "samples": samples})
    return rows


def netns_cut(a, modes, progress):
    """A host's link taken down (network namespaces); ffd only."""
    rows = []
    n, h = a.netns_ranks, a.hosts
    for mode in modes:
        samples, false_reports = [], 0
        for trial in range(a.netns_trials):
            cut = trial % (h - 1) + 1
            job = netns.cut_job(n, h, cut, ms(a.period), ms(a.timeout), ls.mode_env(mode))
            inj = job["injected_ns"]
            want = len(job["survivors"]) * len(job["cut_ranks"])
            times = [t for t, _, _ in job["learned"].values()]
            detectors = {(f, d) for (s, f), (t, c, d) in job["learned"].items() if d == s}
            causes = sorted({c for (s, f), (t, c, d) in job["learned"].items() if d == s}) or ["notice"]
            every = (max(times) - inj) / 1e6 if len(job["learned"]) == want else None
            first = (min(times) - inj) / 1e6 if times else None
            samples.append({"rank": cut, "host": cut, "detect_ms": first, "all_ms": every,
                            "propagate_ms": None if every is None else every - first,
                            "cause": "+".join(causes), "missed": want - len(job["learned"]),
                            "detections": len(detectors)})
            false_reports += len(job["false"])
            progress(f"N={n} H={h} netns cut host {cut} {ls.mode_label(mode)}: every survivor "
                     f"{fmt(every, 2)} ms ({samples[-1]['cause']}), {len(job['false'])} false")
        rows.append({"scope": "emulated hosts (netns)", "detector": ls.mode_label(mode), "ffd_local": mode,
                     "ranks": n, "hosts": h, "fault": "netns cut", "jobs": a.netns_trials,
                     "false_reports": false_reports, **summarize(samples), "samples": samples})
    return rows


def print_tables(rows, timeout_ms):
    print()
    table(["scope", "N", "H", "fault", "detector", "trials", "detect p50", "detect p99", "every survivor p50",
           "every survivor p99", "propagate p50", "propagate p99", "causes", "missed", "false"],
          [[r["scope"], r["ranks"], r["hosts"], r["fault"], r["detector"], r["trials"],
            fmt(r["detect_p50_ms"], 2), fmt(r["detect_p99_ms"], 2), fmt(r["all_p50_ms"], 2),
            fmt(r["all_p99_ms"], 2), fmt(r["propagate_p50_ms"], 2), fmt(r["propagate_p99_ms"], 2),
            " ".join(f"{k}:{v}" for k, v in sorted(r["causes"].items())), r["missed"], r["false_reports"]]
           for r in rows])
    print("(ms; every survivor = injection -> the last live rank knows)")
    same = [r for r in rows if r["scope"] == "same host"]
    ratios = []
    for r in same:
        if r["detector"].startswith("ULFM"):
            continue
        u = next((x for x in same if x["detector"].startswith("ULFM") and x["ranks"] == r["ranks"]
                  and x["fault"] == r["fault"]), None)
        if u is None:
            continue

        def ratio(key):
            return None if r[key] is None or not u[key] else r[key] / u[key]
        ratios.append([r["ranks"], r["fault"], r["detector"], fmt(r["all_p50_ms"], 2), fmt(u["all_p50_ms"], 2),
                       fmt(ratio("all_p50_ms"), 2), fmt(r["all_p99_ms"], 2), fmt(u["all_p99_ms"], 2),
                       fmt(ratio("all_p99_ms"), 2)])
    if ratios:
        print()
        table(["N", "fault", "ffd", "ffd p50", "ULFM p50", "ratio p50", "ffd p99", "ULFM p99", "ratio p99"], ratios)
        print("(every survivor, ms; ratio = ffd / ULFM, the goal is <= 1)")
    print()
    targets = []
    for r in same:
        if r["detector"].startswith("ULFM"):
            continue
        if r["fault"] == "kill" and r["ranks"] in (8, 32):
            goal = 1.0 if r["ranks"] == 8 else 3.0
            targets.append([f"kill -9 every survivor p99, N={r['ranks']}", r["detector"], f"<= {goal:g}",
                            fmt(r["all_p99_ms"], 2), verdict(r["all_p99_ms"], goal)])
        if r["fault"] == "stop":
            goal = timeout_ms + 2
            targets.append([f"SIGSTOP every survivor p99, N={r['ranks']}", r["detector"], f"<= {goal:g}",
                            fmt(r["all_p99_ms"], 2), verdict(r["all_p99_ms"], goal)])
        if r["ranks"] == 32:
            targets.append([f"{r['fault']} propagation p99, N=32", r["detector"], "<= 3",
                            fmt(r["propagate_p99_ms"], 2), verdict(r["propagate_p99_ms"], 3.0)])
    if targets:
        table(["target", "detector", "goal ms", "measured ms", "met"], targets)


def interrupted(signum, frame):
    raise KeyboardInterrupt


def verdict(value, goal):
    return "-" if value is None else ("yes" if value <= goal else "no")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="about 2 minutes: N=8, 4 trials, 2 host trials, 1 netns cut")
    p.add_argument("--trials", type=int, default=10, help="faults per (N, fault, detector) on one host")
    p.add_argument("--sizes", default="8,32", help="comma-separated N")
    p.add_argument("--period", default="10ms")
    p.add_argument("--timeout", default="100ms")
    p.add_argument("--hosts", type=int, default=4, help="emulated hosts H for the cross-host faults")
    p.add_argument("--host-trials", type=int, default=10, help="faults per row across emulated hosts")
    p.add_argument("--netns-ranks", type=int, default=8, help="ranks of the network-namespace job")
    p.add_argument("--netns-trials", type=int, default=5, help="netns cuts per FFD_LOCAL mode")
    p.add_argument("--poll-us", type=int, default=200, help="ulfm_detect's sleep between MPI_Test polls")
    p.add_argument("--sched", default="boost",
                   help="FFD_SCHED of the same-host ffd jobs, comma-separated to run each: boost (the default), "
                        "normal, fifo")
    p.add_argument("--skip", default="", help="comma-separated parts to leave out: ulfm, hosts, netns")
    a = p.parse_args()
    if a.quick:
        a.sizes, a.trials, a.host_trials, a.netns_trials = "8", 4, 2, 1
    a.sizes = [int(x) for x in a.sizes.split(",")]
    a.sched = [x for x in a.sched.split(",") if x]
    if not a.sched or any(x not in ("boost", "normal", "fifo") for x in a.sched):
        p.error(f"--sched: `{','.join(a.sched)}`: use boost, normal or fifo, comma-separated")
    skip = {x for x in a.skip.split(",") if x}
    if a.hosts < 2:
        p.error("--hosts must be at least 2")

    # A SIGTERM ends the run like ^C: the finally below ends what was started.
    signal.signal(signal.SIGTERM, interrupted)
    t0 = time.monotonic()

    def progress(text):
        print(f"[{time.monotonic() - t0:6.1f} s, load {os.getloadavg()[0]:.1f}] {text}", flush=True)

    build()
    modes = ls.local_modes()
    kill_host = ls.has_kill_host()
    notes = []
    why = ulfm.available() if "ulfm" not in skip else "skipped (--skip)"
    if why is None:
        ulfm.build()
    else:
        notes.append(f"ULFM not measured: {why}")
    netns_why = netns.available() if "netns" not in skip else "skipped (--skip)"
    if netns_why:
        notes.append(f"netns cut not measured: {netns_why}")
    progress(f"ffd: {', '.join(ls.mode_description(m) for m in modes)}; whole-host kill by "
             f"{'--kill-host' if kill_host else 'one --kill per rank'}")
    load_start = os.getloadavg()
    rows = []
    try:
        rows += same_host(a, modes, why is None, progress)
        # Across hosts "pidfd" differs from "auto" only in a same-host kill.
        host_modes = [m for m in modes if m != "pidfd"]
        if "hosts" not in skip:
            rows += across_hosts(a, host_modes, kill_host, progress)
        if netns_why is None:
            rows += netns_cut(a, host_modes, progress)
    finally:
        ls.end_started()
    load_end = os.getloadavg()
    print_tables(rows, ms(a.timeout))
    for note in notes:
        print(note)
    took = time.monotonic() - t0
    print(f"took {took:.0f} s; load average at start {load_start[0]:.1f}, at end {load_end[0]:.1f}")
    meta = {"machine": machine(), "period": a.period, "timeout": a.timeout, "poll_us": a.poll_us,
            "ffd_modes": [ls.mode_description(m) for m in modes], "kill_host_option": kill_host,
            "sched": a.sched, "load_start": load_start, "load_end": load_end, "seconds": took, "notes": notes,
            "quick": a.quick}
    write_json("local_kill", {"benchmark": "local_kill", **meta, "results": rows})
    ulfm_rows = [{k: v for k, v in r.items() if k != "samples"} for r in rows if r["scope"] == "same host"]
    write_json("ulfm_local", {"benchmark": "local_kill (same host, ffd beside ULFM)", **meta,
                              "results": ulfm_rows})


if __name__ == "__main__":
    ls.run_main(main)
