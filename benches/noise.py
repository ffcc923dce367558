#!/usr/bin/env python3
"""Noise: what a running detector costs an application's small messages.

fi_pingpong (tcp;ofi_rxm over lo, 64-byte messages) with no detector, and
with an 8-rank ffd job running on the same two cores at period 1 ms and
10 ms (timeout 5 periods). Runs are interleaved (none, 1ms, 10ms, none, ...)
so drifts in machine load hit every setting alike. Reports the median
µs/transfer per setting and its ratio to the no-detector median.

    benches/noise.py [--rounds 7] [--iterations 20000] [--ranks 8]

Writes target/bench/noise.json.
"""

import argparse
import os
import re
import signal
import subprocess
import time

from common import FFD, build, fmt, machine, median, table, write_json

SETTINGS = [("none", None), ("1ms", ("1ms", "5ms")), ("10ms", ("10ms", "50ms"))]


def pingpong(iterations, port):
    """One fi_pingpong run; returns µs per transfer (usec/xfer)."""
    base = ["fi_pingpong", "-p", "tcp", "-e", "rdm", "-d", "lo", "-I", str(iterations), "-S", "64",
            "-B", str(port)]
    server = subprocess.Popen(base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = ""
        for _ in range(50):  # the server needs a moment to listen: bounded retries
            time.sleep(0.1)
            client = subprocess.run(base[:-2] + ["-P", str(port), "127.0.0.1"], capture_output=True,
                                    text=True, timeout=120)
            out = client.stdout
            if client.returncode == 0:
                break
        for line in out.splitlines():
            if re.match(r"^64\s", line):
                return float(line.split()[6])
        raise RuntimeError(f"fi_pingpong gave no result: {out}{client.stderr}")
    finally:
        server.kill()
        server.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--iterations", type=int, default=20000)
    p.add_argument("--ranks", type=int, default=8)
    a = p.parse_args()
    build()
    samples = {name: [] for name, _ in SETTINGS}
    port = 47600
    for r in range(a.rounds):
        order = SETTINGS[r % 3:] + SETTINGS[:r % 3]
        for name, timing in order:
            job = None
            if timing:
                period, timeout = timing
                job = subprocess.Popen(
                    [FFD, "run", "-n", str(a.ranks), "--period", period, "--timeout", timeout,
                     "--duration", "600s"],
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                # Wait for the job's "all N ranks ready" line (bounded by the launcher).
                for line in job.stdout:
                    if "ranks ready" in line:
                        break
            try:
                port += 1
                us = pingpong(a.iterations, port)
            finally:
                if job:
                    job.send_signal(signal.SIGTERM)
                    job.wait(timeout=60)
            samples[name].append(us)
            print(f"round {r + 1}: {name:<5} {us:.2f} µs/xfer", flush=True)
    base = median(samples["none"])
    rows, results = [], []
    for name, timing in SETTINGS:
        m = median(samples[name])
        results.append({"detector": name, "period": timing[0] if timing else None,
                        "timeout": timing[1] if timing else None, "median_us": m,
                        "ratio_to_none": m / base, "samples_us": samples[name]})
        rows.append([name, timing[0] if timing else "-", fmt(m, 2), fmt(m / base, 3),
                     " ".join(f"{s:.1f}" for s in samples[name])])
    print()
    table(["detector", "period", "median µs/xfer", "ratio", "samples"], rows)
    write_json("noise", {"benchmark": "noise", "tool": "fi_pingpong -p tcp -e rdm -d lo -S 64",
                         "iterations": a.iterations, "ranks": a.ranks, "machine": machine(),
                         "results": results})


if __name__ == "__main__":
    main()
