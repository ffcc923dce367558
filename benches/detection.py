#!/usr/bin/env python3
"""Detection and propagation latency on loopback (tcp;ofi_rxm), versus N.

For N in 4, 8, 16, 32 and each fault (crash = kill -9, hang = SIGSTOP),
TRIALS injections: p50/p99 of (first detection - injection) and of
(last live rank notified - first detection). Several faults share one job
where N allows, spaced far enough apart (1 s) that they do not overlap.

    benches/detection.py [--trials 20] [--sizes 4,8,16,32] [--period 10ms --timeout 100ms]

Writes target/bench/detection.json.
"""

import argparse
import math

from common import build, fmt, machine, median, percentile, run_job, table, write_json


def trials_for(report, fault):
    out = []
    for f in report["failures"]:
        if f["fault"] != fault or f["detected_at_ms"] is None:
            continue
        detect = f["detected_at_ms"] - f["injected_at_ms"]
        spread = None
        if f["all_notified_at_ms"] is not None:
            spread = f["all_notified_at_ms"] - f["detected_at_ms"]
        out.append({"detect_ms": detect, "propagate_ms": spread, "cause": f["cause"]})
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--sizes", default="4,8,16,32")
    p.add_argument("--period", default="10ms")
    p.add_argument("--timeout", default="100ms")
    a = p.parse_args()
    build()
    results = []
    for n in [int(x) for x in a.sizes.split(",")]:
        per_job = max(1, min(5, n // 4))
        for fault in ["kill", "stop"]:
            samples, missed, false_reports, jobs, false_detail = [], 0, 0, 0, []
            while len(samples) + missed < a.trials:
                k = min(per_job, a.trials - len(samples) - missed)
                # Victims spread around the ring: ranks 1, 1+n/k, ...
                victims = sorted({(1 + i * n // k) % n for i in range(k)})
                args = ["-n", str(n), "--period", a.period, "--timeout", a.timeout]
                for i, v in enumerate(victims):
                    args += [f"--{fault}", f"{v}@{1000 + 1000 * i}ms"]
                args += ["--duration", f"{1000 * len(victims) + 1500}ms"]
                report, _ = run_job(args)
                jobs += 1
                got = trials_for(report, fault)
                samples += got
                missed += len(victims) - len(got)
                false_reports += len(report["false_reports"])
                if report["false_reports"]:
                    lag = {r: st["engine"]["self_lag_trips"] for r, st in report["stats"].items()}
                    false_detail.append({"faults": args, "false_reports": report["false_reports"],
                                         "self_lag_trips": lag})
            detect = [s["detect_ms"] for s in samples]
            spread = [s["propagate_ms"] for s in samples if s["propagate_ms"] is not None]
            causes = {}
            for s in samples:
                causes[s["cause"]] = causes.get(s["cause"], 0) + 1
            results.append({
                "ranks": n, "fault": fault, "trials": len(samples), "missed": missed,
                "jobs": jobs, "false_reports": false_reports, "false_detail": false_detail,
                "causes": causes,
                "detect_p50_ms": median(detect), "detect_p99_ms": percentile(detect, 99),
                "propagate_p50_ms": median(spread), "propagate_p99_ms": percentile(spread, 99),
                "log2_n": math.log2(n),
                "samples": samples,
            })
            r = results[-1]
            print(f"N={n:<3} {fault:<4} detect p50 {fmt(r['detect_p50_ms'])} ms p99 {fmt(r['detect_p99_ms'])} ms, "
                  f"propagate p50 {fmt(r['propagate_p50_ms'])} ms p99 {fmt(r['propagate_p99_ms'])} ms, causes {causes}", flush=True)
    print()
    table(
        ["N", "fault", "trials", "detect p50 ms", "detect p99 ms", "propagate p50 ms", "propagate p99 ms", "causes", "missed", "false"],
        [[r["ranks"], r["fault"], r["trials"], fmt(r["detect_p50_ms"]), fmt(r["detect_p99_ms"]),
          fmt(r["propagate_p50_ms"]), fmt(r["propagate_p99_ms"]),
          " ".join(f"{k}:{v}" for k, v in sorted(r["causes"].items())), r["missed"], r["false_reports"]]
         for r in results],
    )
    write_json("detection", {"benchmark": "detection", "provider": "tcp;ofi_rxm (lo)",
                             "period": a.period, "timeout": a.timeout, "machine": machine(), "results": results})


if __name__ == "__main__":
    main()
