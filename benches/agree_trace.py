#!/usr/bin/env python3
"""Where an agreement's time goes, hop by hop: `ffd run -n N --netns H`
(or `--hosts H`) with `--agree` and `FFD_LOG=debug`, whose agreement trace
lines (src/runtime/progress/trace.rs: CLOCK_MONOTONIC, one clock for every
namespace of the machine) are merged per agreement into

  wake     the last caller's call -> its progress thread taking it (the
           embedder's command waits for that thread to run)
  up       that take -> the first decision anywhere (the root's): the Ups
           of the last caller's path, one wake-up of a progress thread each
  down     the first decision -> the last rank decided: the Downs, every
           rank's progress thread woken once to take one and raise the event
  total    the last call -> the last rank decided (`ffd run`'s measure,
           at the progress threads' stamps)

and the gaps between consecutive receptions (any rank) during `down`: on
a machine with fewer cores than ranks, how fast the cores take the ranks'
wake-ups in turn; beside them, how long a rank's own thread takes from
reading its `AgreeDown` to raising the decision (`own`, median over the
ranks): the rest of a gap is other threads and processes.

    benches/agree_trace.py [--n 16] [--netns 4 | --hosts 4] [--agreements 10]
                           [--period 10ms --timeout 100ms]

Writes target/bench/agree_trace.json.
"""

import argparse
import re
import subprocess
import tempfile
import os

from common import FFD, build, fmt, median, table, write_json

LINE = re.compile(r"ffd\[(\d+)\] debug: agreement trace t=(\d+) (.*)$")


def parse(stderr):
    """{rank: [(t_us, words)]} from the trace lines."""
    out = {}
    for line in stderr.splitlines():
        m = LINE.search(line)
        if m:
            out.setdefault(int(m[1]), []).append((int(m[2]), m[3].split()))
    return out


def rounds(trace):
    """One row per agreement every rank took and decided."""
    rows = []
    seqs = sorted({int(w[1]) for lines in trace.values() for _, w in lines if w[0] == "call"})
    for seq in seqs:
        made, taken, decided, rx, got = {}, {}, {}, [], {}
        for r, lines in trace.items():
            for t, w in lines:
                if w[0] == "call" and int(w[1]) == seq:
                    taken[r], made[r] = t, t - int(w[3])
                elif w[0] == "decided" and int(w[1]) == seq:
                    decided[r] = t
            # This rank's last AgreeDown received before it decided.
            downs = [t for t, w in lines if w[0] == "agree_down" and w[1] == "from" and t <= decided.get(r, -1)]
            if downs and r in decided:
                got[r] = decided[r] - downs[-1]
        if len(decided) < len(trace) or len(made) < len(trace):
            continue
        last = max(made, key=made.get)
        first_decided, end = min(decided.values()), max(decided.values())
        for lines in trace.values():
            rx += [t for t, w in lines if w[0] == "agree_down" and w[1] == "from" and first_decided <= t <= end]
        rx.sort()
        gaps = [b - a for a, b in zip(rx, rx[1:])]
        rows.append({
            "seq": seq, "last_caller": last,
            "wake_us": taken[last] - made[last],
            "up_us": first_decided - taken[last],
            "down_us": end - first_decided,
            "total_us": end - made[last],
            "down_gap_median_us": median(gaps) if gaps else None,
            "own_median_us": median(list(got.values())) if got else None,
        })
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=16)
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--netns", type=int)
    where.add_argument("--hosts", type=int)
    ap.add_argument("--agreements", type=int, default=10)
    ap.add_argument("--period", default="10ms")
    ap.add_argument("--timeout", default="100ms")
    args = ap.parse_args()
    build()
    place = ["--hosts", str(args.hosts)] if args.hosts else ["--netns", str(args.netns or 4)]
    agree = sum((["--agree", f"{1000 + 300 * i}ms"] for i in range(args.agreements)), [])
    with tempfile.TemporaryDirectory(prefix="ffd-agree-trace-") as d:
        proc = subprocess.run(
            [FFD, "run", "-n", str(args.n), *place, "--period", args.period, "--timeout", args.timeout,
             *agree, "--json", os.path.join(d, "report.json")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600,
            env={**os.environ, "FFD_LOG": "debug"})
    rows = rounds(parse(proc.stderr))
    if not rows:
        raise SystemExit(f"no complete agreement in the trace: {proc.stderr[-2000:]}")
    cols = ["wake_us", "up_us", "down_us", "total_us", "down_gap_median_us", "own_median_us"]
    table(["seq", "last caller", "wake", "up", "down", "total", "down gap", "own"],
          [[r["seq"], r["last_caller"], *(fmt(r[c], 0) for c in cols)] for r in rows]
          + [["median", "", *(fmt(median([r[c] for r in rows if r[c] is not None]), 0) for c in cols)]])
    write_json("agree_trace", {
        "benchmark": "agreement trace: ffd run " + " ".join(["-n", str(args.n), *place]),
        "period": args.period, "timeout": args.timeout, "rounds": rows,
    })


if __name__ == "__main__":
    main()
