#!/usr/bin/env python3
"""What the simulator costs against a reference commit: wall time and peak
RSS of `ffd sim --ranks N --fail crash:R@500ms --seed 1`, this tree's build
and the reference's, run alternately (A B B A A B ...) on this machine, so that
the next change that makes the simulator slower or larger shows up.

The reference (default dee99d9, the end of the first batch) is built from
`git archive` of that commit in its own directory and target dir under
target/sim_cost/ (a shared target dir mixes builds), once; this tree's
build is `cargo build --release --bin ffd`. Wall time, CPU time and peak
RSS come from the kernel's accounting of each child (wait4), events from
the run's JSON report. Prints a table and the ratios (medians of wall and
CPU time, the largest peak RSS of each) and writes
target/bench/sim_cost.json with both commits.

    benches/sim_cost.py                  # N = 2^20, 3 pairs: about 5 min
    benches/sim_cost.py --quick          # N = 2^17, 3 pairs: about 30 s
    benches/sim_cost.py --ref COMMIT --ranks 262144 --pairs 5 --max-ratio 1.2

With --max-ratio R it exits 1 when either ratio (wall, peak RSS) is above R.
The machine is shared: run it when nothing else is heavy, and read the
ratios, not the absolute times.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, build, fmt, machine, table, write_json  # noqa: E402

DEFAULT_REF = "dee99d9"


def git(*args, cwd=ROOT):
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def build_reference(commit):
    """Builds `ffd` at `commit` in target/sim_cost/<hash>/ (its own source
    tree and target dir) unless already built; returns (hash, binary)."""
    full = git("rev-parse", "--verify", f"{commit}^{{commit}}")
    base = os.path.join(ROOT, "target", "sim_cost", full[:12])
    src = os.path.join(base, "src")
    binary = os.path.join(base, "target", "release", "ffd")
    stamp = os.path.join(base, "built")
    if os.path.exists(stamp) and os.path.exists(binary):
        return full, binary
    os.makedirs(src, exist_ok=True)
    archive = subprocess.run(
        ["git", "archive", "--format=tar", full], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
    print(f"building the reference {full[:12]} in {os.path.relpath(base, ROOT)} ...", flush=True)
    subprocess.run(
        ["cargo", "build", "--release", "--quiet", "--bin", "ffd"],
        cwd=src,
        env={**os.environ, "CARGO_TARGET_DIR": os.path.join(base, "target")},
        check=True,
    )
    with open(stamp, "w") as f:
        f.write(full + "\n")
    return full, binary


def this_tree():
    """This tree's commit, with `+dirty` if it has uncommitted changes."""
    head = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return head + ("+dirty" if dirty else "")


def run_once(binary, ranks, fail, seed):
    """One `ffd sim`: wall s, CPU s (user + system), peak RSS MiB, events."""
    with tempfile.TemporaryDirectory(prefix="ffd-sim-cost-") as d:
        path = os.path.join(d, "report.json")
        args = [binary, "sim", "--ranks", str(ranks), "--fail", fail, "--seed", str(seed)]
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [*args, "--quiet", "--json", path],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
        stderr = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0 or not os.path.exists(path):
            raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): {stderr[-2000:]}")
        with open(path) as f:
            report = json.load(f)
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "user_s": usage.ru_utime,
        "system_s": usage.ru_stime,
        # ru_maxrss is in KiB on Linux.
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "events": report["totals"]["events"],
        "missed_notifications": report["totals"]["missed_notifications"],
        "false_reports": report["totals"]["false_reports"],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ref", default=DEFAULT_REF, help=f"reference commit (default {DEFAULT_REF})")
    p.add_argument("--quick", action="store_true", help="N = 2^17 instead of 2^20")
    p.add_argument("--ranks", type=int, help="N (default 2^20, 2^17 with --quick)")
    p.add_argument("--pairs", type=int, default=3, help="alternating pairs of runs (default 3)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-ratio", type=float, help="exit 1 if a ratio is above this")
    p.add_argument("--name", default="sim_cost", help="JSON name under target/bench/")
    a = p.parse_args()
    ranks = a.ranks or (1 << 17 if a.quick else 1 << 20)
    # The command at 2^20 (crash:777777@500ms); the same rank mod N below.
    fail = f"crash:{777777 % ranks}@500ms"

    ref_commit, ref_bin = build_reference(a.ref)
    new_bin = build()
    new_commit = this_tree()
    builds = [("reference", ref_commit, ref_bin), ("this tree", new_commit, new_bin)]
    print(f"ffd sim --ranks {ranks} --fail {fail} --seed {a.seed}, {a.pairs} pairs, alternating")
    runs = {name: [] for name, _, _ in builds}
    for i in range(a.pairs):
        # A B, B A, A B, ...: each build follows each as often. A run
        # with huge pages spends twice the kernel time faulting them in
        # (zeroing) right after the reference's 4 KiB-page run as right
        # after another huge-page run (2^20, simcost3 branch, 2026-12-07: system
        # 7.9-8.5 s against 3.2-4.7 s, user time the same), so with
        # A B A B every run of this tree paid it.
        for name, _, binary in builds if i % 2 == 0 else builds[::-1]:
            r = run_once(binary, ranks, fail, a.seed)
            runs[name].append(r)
            print(
                f"  pair {i + 1} {name:9s}: wall {r['wall_s']:7.2f} s  cpu {r['cpu_s']:7.2f} s"
                f" (user {r['user_s']:6.2f}, system {r['system_s']:5.2f})"
                f"  peak RSS {r['peak_rss_mib']:7.0f} MiB  events {r['events']}",
                flush=True,
            )

    def summary(rs):
        return {
            "wall_s_median": statistics.median(r["wall_s"] for r in rs),
            "wall_s_min": min(r["wall_s"] for r in rs),
            "cpu_s_median": statistics.median(r["cpu_s"] for r in rs),
            "user_s_median": statistics.median(r["user_s"] for r in rs),
            "system_s_median": statistics.median(r["system_s"] for r in rs),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in rs),
            "events": rs[0]["events"],
        }

    ref, new = summary(runs["reference"]), summary(runs["this tree"])
    ratio = {
        "wall": new["wall_s_median"] / ref["wall_s_median"],
        "cpu": new["cpu_s_median"] / ref["cpu_s_median"],
        "user": new["user_s_median"] / ref["user_s_median"],
        "peak_rss": new["peak_rss_mib"] / ref["peak_rss_mib"],
        "events": new["events"] / ref["events"],
    }
    print()
    table(
        ["build", "commit", "wall s (median)", "wall s (min)", "cpu s", "peak RSS MiB", "events"],
        [
            [name, commit[:12] + ("+dirty" if commit.endswith("+dirty") else ""),
             fmt(s["wall_s_median"], 2), fmt(s["wall_s_min"], 2), fmt(s["cpu_s_median"], 2),
             fmt(s["peak_rss_mib"], 0), s["events"]]
            for (name, commit, _), s in zip(builds, (ref, new))
        ]
        + [["ratio", "this / ref", fmt(ratio["wall"], 2), "", fmt(ratio["cpu"], 2),
            fmt(ratio["peak_rss"], 2), fmt(ratio["events"], 3)]],
    )
    write_json(
        a.name,
        {
            "command": f"ffd sim --ranks {ranks} --fail {fail} --seed {a.seed}",
            "pairs": a.pairs,
            "reference": {"commit": ref_commit, "runs": runs["reference"], **ref},
            "this_tree": {"commit": new_commit, "runs": runs["this tree"], **new},
            "ratio": ratio,
            "machine": {**machine(), "loadavg": os.getloadavg()},
        },
    )
    if a.max_ratio is not None:
        over = [k for k in ("wall", "peak_rss") if ratio[k] > a.max_ratio]
        if over:
            print(f"above {a.max_ratio}x the reference: {', '.join(over)}")
            sys.exit(1)
        print(f"within {a.max_ratio}x the reference")


if __name__ == "__main__":
    main()
