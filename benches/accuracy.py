#!/usr/bin/env python3
"""Accuracy under load: the smallest timeout with zero false reports.

An 8-rank job runs for DURATION while a CPU hog spins on every core; the
period is timeout/5. Halfway through, one rank is killed: a setting
passes when no other rank is reported failed (false reports) AND the
killed rank is reported by every survivor. The second condition keeps a
setting honest: a detector that never judges (its lag guard tripping on
every wake-up) would otherwise look perfectly accurate. Also records the self-lag guard trips and the wake-up
lateness the detectors saw: the jitter that false positives come from.

    benches/accuracy.py [--duration 60s] [--timeouts 100,50,25,10,5] [--ranks 8]

Writes target/bench/accuracy.json.
"""

import argparse
import multiprocessing
import os

from common import build, machine, run_job, table, write_json


def parse_ms(text):
    units = {"ms": 1, "s": 1000}
    for u in ("ms", "s"):
        if text.endswith(u):
            return int(float(text[: -len(u)]) * units[u])
    raise ValueError(f"--duration {text}: use ms or s, e.g. 60s")


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
            half_ms = parse_ms(a.duration) // 2
            report, took = run_job(["-n", str(a.ranks), "--period", f"{period_us}us", "--timeout", f"{t}ms",
                                    "--kill", f"3@{half_ms}ms", "--duration", a.duration], timeout=3600)
        finally:
            stop.set()
            for h in hogs:
                h.join(timeout=10)
                if h.is_alive():
                    h.kill()
        false = report["false_reports"]
        kill = next((f for f in report["failures"] if f["rank"] == 3), None)
        detected_ms = None
        complete = False
        if kill and kill["detected_at_ms"] is not None:
            detected_ms = kill["detected_at_ms"] - kill["injected_at_ms"]
            complete = kill["all_notified_at_ms"] is not None
        stats = report["stats"].values()
        lag = sum(s["engine"]["self_lag_trips"] for s in stats)
        late_max = max((s["runtime"]["lateness"]["max_us"] for s in stats), default=0)
        slow = sum(s["engine"]["slow_emitter_warnings"] for s in stats)
        results.append({"timeout_ms": t, "period_us": period_us, "duration": a.duration,
                        "false_reports": len(false), "false_detail": false,
                        "self_lag_trips": lag, "slow_emitter_warnings": slow,
                        "max_wakeup_lateness_us": late_max, "ranks": a.ranks,
                        "kill_detected_ms": detected_ms, "kill_reported_by_all": complete,
                        "kill_cause": kill["cause"] if kill else None})
        print(f"timeout {t} ms (period {period_us} us): {len(false)} false reports, "
              f"kill detected after {detected_ms} ms ({'all' if complete else 'NOT all'} told), "
              f"{lag} lag-guard trips, {slow} slow-emitter warnings, max lateness {late_max} us", flush=True)
    passing = [r["timeout_ms"] for r in results if r["false_reports"] == 0 and r["kill_reported_by_all"]]
    print()
    table(["timeout ms", "period us", "false reports", "kill detected ms", "cause", "all told",
           "lag trips", "slow warnings", "max lateness us"],
          [[r["timeout_ms"], r["period_us"], r["false_reports"],
            "-" if r["kill_detected_ms"] is None else f"{r['kill_detected_ms']:.1f}",
            r["kill_cause"] or "-", "yes" if r["kill_reported_by_all"] else "no",
            r["self_lag_trips"], r["slow_emitter_warnings"], r["max_wakeup_lateness_us"]] for r in results])
    smallest = min(passing) if passing else None
    print(f"\nsmallest timeout with zero false reports and the kill reported by all, "
          f"under a CPU hog on every core: {smallest} ms")
    write_json("accuracy", {"benchmark": "accuracy", "load": "CPU hog on every core",
                            "smallest_clean_timeout_ms": smallest, "machine": machine(), "results": results})


if __name__ == "__main__":
    main()
