#!/usr/bin/env python3
"""Renders the benchmarks' JSON (target/bench/*.json) into PNG plots.

    benches/plot.py [--in target/bench] [--out docs/img]

benches/report.py runs it on benches/results/ (the committed runs). Each
PNG carries the commit and date of its JSON, in a corner and in its
Comment.

Each plot is drawn when its JSON is there and skipped, with a message,
when it is not (run the benchmark first; docs/testing.md, "Benchmarks",
says how):

  detection.json   (benches/detection.py)
      detection_latency.png   detection latency by cause against N
                              (median, bar to p99, one line per cause)
      propagation_cdf.png     CDF of propagation (first detection to the
                              last live rank told), one curve per N
  sim_scale.json   (benches/sim_scale.sh)
      sim_scale.png           simulator: most hops and notice messages per
                              failure against N, BMG vs chord (one crash)
  noise.json       (benches/noise.py)
      noise.png               fi_pingpong µs per transfer without and with
                              detectors (median bar, every round a dot)
  accuracy.json    (benches/accuracy.py)
      accuracy.png            under a CPU hog: false reports and the kill's
                              detection time against the timeout
  agreement.json   (benches/agreement.py --one-job or --only-one-job)
      agreement_one_job.png   in one Open MPI job: ffd_agree and
                              MPIX_Comm_agree p50 and p99 against N
  ulfm*.json       (benches/local_kill.py writes ulfm_local.json)
      ulfm.png                ffd beside ULFM's own detector

The ULFM side-by-side expects one or more files target/bench/ulfm*.json,
each an object with "results": a list of rows

    {"detector": "ffd" | "ulfm" | any label,
     "ranks": N,
     "fault": "kill" | "stop",
     "detect_p50_ms": float, "detect_p99_ms": float,
     "propagate_p50_ms": float or null, "propagate_p99_ms": float or null}

(the fields of detection.json's rows, plus "detector"). When no row says
"ffd", the rows of detection.json (if there) are the ffd side. The plot puts
detection (median, bar to p99) against N for each detector and fault side by
side.

matplotlib comes from PyPI: when it cannot be imported, this script makes
the virtual environment target/venv/plot, installs matplotlib there and runs
itself again with that Python. ci/test does not need any of this.
"""

import argparse
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, "target", "venv", "plot")
MATPLOTLIB = "matplotlib==3.11.2"


def ensure_matplotlib():
    """Imports matplotlib, from target/venv/plot if need be (re-exec)."""
    try:
        import matplotlib  # noqa: F401
        return
    except ImportError:
        pass
    python = os.path.join(VENV, "bin", "python")
    # The venv's python is a link to the system's: tell them apart by prefix.
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        sys.exit(f"plot.py: matplotlib is not importable even in {VENV}; remove it and retry")
    if not os.path.exists(python):
        print(f"plot.py: installing {MATPLOTLIB} into {os.path.relpath(VENV, ROOT)}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([python, "-m", "pip", "install", "--quiet", MATPLOTLIB], check=True)
    os.execv(python, [python, os.path.abspath(__file__), *sys.argv[1:]])


def load(path):
    with open(path) as f:
        return json.load(f)


def log2_axis(ax, sizes):
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(n) for n in sizes])


# The provenance of the JSON being drawn (benches/common.py stamps it).
STAMP = {}


def save(fig, out, name, written):
    """Saves the figure with its JSON's commit and date in its corner and
    in the PNG's Comment (benches/report.py --check reads it there)."""
    path = os.path.join(out, name)
    stamp = f"{STAMP.get('commit') or 'unstamped'}{' (dirty)' if STAMP.get('dirty') else ''}, {STAMP.get('date', '?')}"
    fig.text(0.995, 0.005, stamp, ha="right", va="bottom", fontsize=6, color="gray")
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Comment": f"ffd commit {stamp}; {STAMP.get('command', '')}"})
    written.append(path)


CAUSE_STYLE = {"inband": ("tab:blue", "o"), "timeout": ("tab:orange", "s"), "notice": ("tab:green", "^")}


def plot_detection(plt, data, out, written):
    """Detection latency by cause against N, and the CDF of propagation."""
    rows = data["results"]
    sizes = sorted({r["ranks"] for r in rows})
    by_cause = {}
    for r in rows:
        for s in r["samples"]:
            by_cause.setdefault(s["cause"], {}).setdefault(r["ranks"], []).append(s["detect_ms"])

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for cause in sorted(by_cause):
        color, marker = CAUSE_STYLE.get(cause, ("tab:gray", "x"))
        ns = sorted(by_cause[cause])
        p50 = [percentile(by_cause[cause][n], 50) for n in ns]
        p99 = [percentile(by_cause[cause][n], 99) for n in ns]
        counts = sum(len(by_cause[cause][n]) for n in ns)
        ax.errorbar(ns, p50, yerr=[[0] * len(ns), [b - a for a, b in zip(p50, p99)]], color=color,
                    marker=marker, capsize=4, label=f"{cause} ({counts} faults)")
    log2_axis(ax, sizes)
    ax.set_xlabel("ranks N")
    ax.set_ylabel("injection → first detection (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Detection latency by cause (period {data['period']}, timeout {data['timeout']})\n"
                 "median, bar to p99; kill -9 → inband, SIGSTOP → timeout", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend()
    save(fig, out, "detection_latency.png", written)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for n in sizes:
        values = sorted(s["propagate_ms"] for r in rows if r["ranks"] == n
                        for s in r["samples"] if s["propagate_ms"] is not None)
        if not values:
            continue
        ys = [(i + 1) / len(values) for i in range(len(values))]
        ax.step(values, ys, where="post", label=f"N = {n} ({len(values)} faults)")
    ax.set_xlabel("first detection → last live rank told (ms)")
    ax.set_ylabel("fraction of faults")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    ax.set_title("Propagation of a failure notice over BMG (CDF), loopback tcp;ofi_rxm", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend()
    save(fig, out, "propagation_cdf.png", written)
    plt.close(fig)


def plot_sim_scale(plt, rows, out, written):
    """Hops and messages per failure against N, BMG vs chord (single crash)."""
    single = [r for r in rows if r["failures"] == 1 and r["fail"].startswith("crash")]
    fig, (hops, msgs) = plt.subplots(1, 2, figsize=(10, 4))
    for bcast, color in (("bmg", "tab:blue"), ("chord", "tab:red")):
        rs = sorted((r for r in single if r["bcast"] == bcast), key=lambda r: r["ranks"])
        if not rs:
            continue
        ns = [r["ranks"] for r in rs]
        hops.plot(ns, [r["max_hops"] for r in rs], marker="o", color=color, label=bcast)
        msgs.plot(ns, [r["messages_per_failure"] for r in rs], marker="o", color=color, label=bcast)
    sizes = sorted({r["ranks"] for r in single})
    for ax in (hops, msgs):
        log2_axis(ax, sizes)
        ax.set_xlabel("ranks N")
        ax.grid(True, alpha=0.3)
        ax.legend()
        for label in ax.get_xticklabels():
            label.set_rotation(45)
    hops.set_ylabel("most overlay hops to a live rank")
    hops.set_title("Hops (simulator, one crash)", fontsize=10)
    msgs.set_yscale("log")
    msgs.set_ylabel("notice messages per failure")
    msgs.set_title("Messages (simulator, one crash)", fontsize=10)
    save(fig, out, "sim_scale.png", written)
    plt.close(fig)


def plot_noise(plt, data, out, written):
    """Ping-pong latency without and with detectors."""
    rows = data["results"]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    names = [r["detector"] for r in rows]
    xs = list(range(len(rows)))
    ax.bar(xs, [r["median_us"] for r in rows], color="tab:gray", alpha=0.5, label="median")
    for x, r in zip(xs, rows):
        ax.scatter([x] * len(r["samples_us"]), r["samples_us"], color="black", s=12, zorder=3)
        ax.annotate(f"×{r['ratio_to_none']:.2f}", (x, r["median_us"]), ha="center", va="bottom",
                    xytext=(0, 3), textcoords="offset points")
    ax.set_xticks(xs)
    ax.set_xticklabels(["no detector" if n == "none" else f"period {n}" for n in names])
    # Log scale: a round disturbed by other work on the machine is a dot far
    # above the others without squashing them.
    ax.set_yscale("log")
    ax.set_ylabel("µs per transfer (log)")
    ax.set_title(f"Noise: {data['tool']}\nwith an {data['ranks']}-rank ffd job on the same cores "
                 f"(bars: medians, dots: rounds)", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    save(fig, out, "noise.png", written)
    plt.close(fig)


def plot_accuracy(plt, data, out, written):
    """False reports and the kill's detection against the timeout, under load."""
    rows = sorted(data["results"], key=lambda r: r["timeout_ms"])
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ts = [r["timeout_ms"] for r in rows]
    ax.plot(ts, [r["kill_detected_ms"] if r["kill_detected_ms"] is not None else float("nan") for r in rows],
            marker="o", label="kill detected after (ms)")
    ax.plot(ts, ts, linestyle=":", color="gray", label="timeout")
    for t, r in zip(ts, rows):
        ax.annotate(f"{r['false_reports']} false", (t, 0), ha="center", va="bottom", fontsize=8,
                    xytext=(0, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xticks(ts)
    ax.set_xticklabels([str(t) for t in ts])
    ax.set_xlabel("timeout (ms), period = timeout / 5")
    ax.set_ylabel("ms")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Accuracy under load ({data['load']})", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend()
    save(fig, out, "accuracy.png", written)
    plt.close(fig)


def plot_agreement_one_job(plt, one, out, written):
    """ffd_agree beside MPIX_Comm_agree in one job: p50 and p99 against N."""
    rows = sorted(one["results"], key=lambda r: r["ranks"])
    ns = [r["ranks"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for who, key, color in (("ffd_agree", "ffd", "tab:blue"), ("MPIX_Comm_agree", "ulfm", "tab:orange")):
        ax.plot(ns, [r[f"{key}_p50_us"] for r in rows], marker="o", color=color, label=f"{who} p50")
        ax.plot(ns, [r[f"{key}_p99_us"] for r in rows], marker="s", linestyle="--", color=color,
                label=f"{who} p99")
    log2_axis(ax, ns)
    # Log scale: p99 under oversubscription is far above p50.
    ax.set_yscale("log")
    ax.set_xlabel("ranks N")
    ax.set_ylabel("µs per agreement (largest over the ranks, log)")
    ax.set_title(f"Agreement in one Open MPI 5 ULFM job ({one['rounds']} rounds per N, alternating)",
                 fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend()
    save(fig, out, "agreement_one_job.png", written)
    plt.close(fig)


def plot_ulfm(plt, rows, out, written):
    """ffd beside ULFM: detection (median, bar to p99) against N."""
    faults = sorted({r["fault"] for r in rows})
    fig, axes = plt.subplots(1, len(faults), figsize=(5.2 * len(faults), 4), squeeze=False)
    for ax, fault in zip(axes[0], faults):
        for detector in sorted({r["detector"] for r in rows}):
            rs = sorted((r for r in rows if r["fault"] == fault and r["detector"] == detector),
                        key=lambda r: r["ranks"])
            if not rs:
                continue
            ns = [r["ranks"] for r in rs]
            p50 = [r["detect_p50_ms"] for r in rs]
            p99 = [r["detect_p99_ms"] for r in rs]
            ax.errorbar(ns, p50, yerr=[[0] * len(ns), [b - a for a, b in zip(p50, p99)]], marker="o",
                        capsize=4, label=detector)
        log2_axis(ax, sorted({r["ranks"] for r in rows if r["fault"] == fault}))
        ax.set_xlabel("ranks N")
        ax.set_ylabel("detection (ms)")
        ax.set_ylim(bottom=0)
        ax.set_title(f"{fault}: ffd and ULFM", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend()
    save(fig, out, "ulfm.png", written)
    plt.close(fig)


def percentile(values, q):
    """Nearest-rank percentile, as benches/common.py computes it."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))
    return s[k]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--in", dest="src", default=os.path.join(ROOT, "target", "bench"))
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    a = p.parse_args()
    ensure_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(a.out, exist_ok=True)
    written, skipped = [], []

    def source(name, bench):
        path = os.path.join(a.src, name)
        if os.path.exists(path):
            data = load(path)
            STAMP.clear()
            if isinstance(data, dict):
                STAMP.update(data.get("provenance") or {})
            return data
        skipped.append(f"{name} not found in {a.src}: run {bench}")
        return None

    data = source("detection.json", "benches/detection.py")
    if data:
        plot_detection(plt, data, a.out, written)
    data = source("sim_scale.json", "benches/sim_scale.sh")
    if data:
        plot_sim_scale(plt, data["results"] if isinstance(data, dict) else data, a.out, written)
    data = source("noise.json", "benches/noise.py")
    if data:
        plot_noise(plt, data, a.out, written)
    data = source("accuracy.json", "benches/accuracy.py")
    if data:
        plot_accuracy(plt, data, a.out, written)
    data = source("agreement.json", "benches/agreement.py --one-job")
    if data and data.get("one_job"):
        plot_agreement_one_job(plt, data["one_job"], a.out, written)
    elif data:
        skipped.append("agreement.json has no one_job: run benches/agreement.py --one-job")
    ulfm = sorted(glob.glob(os.path.join(a.src, "ulfm*.json")))
    if ulfm:
        rows = [r for path in ulfm for r in source(os.path.basename(path), "benches/local_kill.py")["results"]]
        detection = os.path.join(a.src, "detection.json")
        if not any(r["detector"] == "ffd" for r in rows) and os.path.exists(detection):
            rows += [dict(r, detector="ffd") for r in load(detection)["results"]]
        plot_ulfm(plt, rows, a.out, written)
    else:
        skipped.append(f"no ulfm*.json in {a.src}: the ULFM side-by-side needs one (schema: benches/plot.py --help)")

    for path in written:
        print(f"wrote {os.path.relpath(path, ROOT)}")
    for why in skipped:
        print(f"skipped: {why}", file=sys.stderr)
    if not written:
        sys.exit("plot.py: no benchmark JSON to plot")


if __name__ == "__main__":
    main()
