#!/usr/bin/env python3
"""Accuracy under load: the smallest timeout with zero false reports.

An 8-rank job runs for DURATION while a CPU hog spins on every core; the
period is timeout/5. Timeouts are tried from large to small; a setting
passes when no rank is reported failed (nothing is injected, so every
report is false). Also records the self-lag guard trips and the wake-up
lateness the detectors saw: the jitter that false positives come from.

    benches/accuracy.py [--duration 60s] [--timeouts 100,50,25,10,5] [--ranks 8]

Writes target/bench/accuracy.json.
"""

import argparse
import multiprocessing
import os

from common import build, machine, run_job, table, write_json


def hog(stop):
    x = 0
    while not stop.is_set():
        for _ in range(100000):
            x += 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", default="60s")
    p.add_argument("--timeouts", default="100,50,25,10,5")
    p.add_argument("--ranks", type=int, default=8)
    a = p.parse_args()
    build()
    results = []
    for t in [int(x) for x in a.timeouts.split(",")]:
        period_us = t * 1000 // 5
        stop = multiprocessing.Event()
        hogs = [multiprocessing.Process(target=hog, args=(stop,)) for _ in range(os.cpu_count() or 2)]
        for h in hogs:
            h.start()
        try:
            report, took = run_job(["-n", str(a.ranks), "--period", f"{period_us}us", "--timeout", f"{t}ms",
                                    "--duration", a.duration], timeout=3600)
        finally:
            stop.set()
            for h in hogs:
                h.join(timeout=10)
                if h.is_alive():
                    h.kill()
        false = report["false_reports"]
        stats = report["stats"].values()
        lag = sum(s["engine"]["self_lag_trips"] for s in stats)
        late_max = max((s["runtime"]["lateness"]["max_us"] for s in stats), default=0)
        slow = sum(s["engine"]["slow_emitter_warnings"] for s in stats)
        results.append({"timeout_ms": t, "period_us": period_us, "duration": a.duration,
                        "false_reports": len(false), "false_detail": false,
                        "self_lag_trips": lag, "slow_emitter_warnings": slow,
                        "max_wakeup_lateness_us": late_max, "ranks": a.ranks})
        print(f"timeout {t} ms (period {period_us} us): {len(false)} false reports, "
              f"{lag} lag-guard trips, {slow} slow-emitter warnings, max lateness {late_max} us", flush=True)
    passing = [r["timeout_ms"] for r in results if r["false_reports"] == 0]
    print()
    table(["timeout ms", "period us", "false reports", "lag trips", "slow warnings", "max lateness us"],
          [[r["timeout_ms"], r["period_us"], r["false_reports"], r["self_lag_trips"],
            r["slow_emitter_warnings"], r["max_wakeup_lateness_us"]] for r in results])
    smallest = min(passing) if passing else None
    print(f"\nsmallest timeout with zero false reports under a CPU hog on every core: {smallest} ms")
    write_json("accuracy", {"benchmark": "accuracy", "load": "CPU hog on every core",
                            "smallest_clean_timeout_ms": smallest, "machine": machine(), "results": results})


if __name__ == "__main__":
    main()
