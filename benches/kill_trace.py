#!/usr/bin/env python3
"""Where the CPU goes between a same-host kill -9 and the last survivor
knowing: a scheduler trace of `ffd run -n N --kill V@1500ms`.

The targets: kill -9 -> every survivor p99 <= 1 ms at N = 8 and
<= 3 ms at N = 32 on this 2-core machine. Each survivor learns through
its own exit word (no message), so the time to the last one is the time
the cores take to run every survivor's threads once. This shows what
else held them: for each trial it traces `sched_switch` and
`signal_generate` (tracefs; root), takes the instant the launcher sent
SIGKILL as the kill, and the report's every-survivor time as the end of
the window, and splits each CPU's time in that window between

  victim     the killed agent's threads (its exit: the kernel frees its
             memory in the context of its last thread)
  progress   the survivors' progress threads (Engine, events)
  exits      the survivors' exit-word threads (woken by the kernel)
  agents     the survivors' other threads (`ffd agent`'s main thread,
             which prints each event as a JSON line)
  launcher   `ffd run` (one watcher thread per agent's output)
  idle, other

The thread roles come from the threads' names (`ffd-progress-R`,
`ffd-exits-R-0`) and from the process tree, read while the job runs.

    benches/kill_trace.py [--n 8,32] [--trials 5] [--period 10ms --timeout 100ms]

Writes target/bench/kill_trace.json.
"""

import argparse
import os
import re
import subprocess
import tempfile
import threading
import time
import json

from common import FFD, build, fmt, machine, median, table, write_json

TRACEFS = "/sys/kernel/tracing"
LINE = re.compile(r"^\s*(?P<comm>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<ts>\d+\.\d+): "
                  r"(?P<event>\w+): (?P<rest>.*)$")
SWITCH = re.compile(r"prev_pid=(?P<prev>\d+) .* ==> next_comm=(?P<comm>.+) next_pid=(?P<next>\d+)")
WAKEUP = re.compile(r"pid=(?P<pid>\d+) prio=\d+ target_cpu=(?P<cpu>\d+)")
SIGNAL = re.compile(r"sig=(?P<sig>\d+) .*comm=(?P<comm>.+) pid=(?P<pid>\d+) grp")
EVENTS = ("sched/sched_switch", "sched/sched_wakeup", "signal/signal_generate")
CATEGORIES = ["victim", "progress", "exits", "agents", "launcher", "idle", "other"]


def tracefs_unavailable():
    if os.geteuid() != 0:
        return "needs root (tracefs)"
    if not os.path.exists(f"{TRACEFS}/tracing_on"):
        subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not os.path.exists(f"{TRACEFS}/tracing_on"):
        return f"no tracefs at {TRACEFS} (mount -t tracefs nodev {TRACEFS} failed)"
    return None


def tw(name, value):
    with open(f"{TRACEFS}/{name}", "w") as f:
        f.write(value)


def start_trace():
    tw("tracing_on", "0")
    tw("trace", "")
    tw("buffer_size_kb", "32768")
    tw("set_event", "")
    for event in EVENTS:
        tw(f"events/{event}/enable", "1")
    tw("tracing_on", "1")


def stop_trace():
    tw("tracing_on", "0")
    with open(f"{TRACEFS}/trace") as f:
        text = f.read()
    for event in EVENTS:
        tw(f"events/{event}/enable", "0")
    tw("trace", "")
    return text


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def watch_roles(launcher, roles, stop):
    """tid -> role while the job runs: the launcher's threads, and for each
    agent (a child of the launcher) its threads by name."""
    while not stop.is_set():
        for task in os.listdir(f"/proc/{launcher}/task") if os.path.isdir(f"/proc/{launcher}/task") else []:
            roles.setdefault(int(task), ("launcher", None))
        children = (read(f"/proc/{launcher}/task/{launcher}/children") or "").split()
        for child in children:
            try:
                tasks = os.listdir(f"/proc/{child}/task")
            except OSError:
                continue
            comms = {int(task): (read(f"/proc/{child}/task/{task}/comm") or "").strip() for task in tasks}
            ranks = [int(m.group(1)) for c in comms.values() if (m := re.match(r"ffd-progress-(\d+)$", c))]
            if not ranks:
                continue
            for task, comm in comms.items():
                role = ("progress" if comm.startswith("ffd-progress-")
                        else "exits" if comm.startswith("ffd-exits-") else "agents")
                roles[task] = (role, ranks[0])
        time.sleep(0.05)


def one_trial(n, victim, period, timeout):
    with tempfile.TemporaryDirectory(prefix="ffd-trace-") as d:
        report_path = os.path.join(d, "report.json")
        roles, stop = {}, threading.Event()
        start_trace()
        proc = subprocess.Popen([FFD, "run", "-n", str(n), "--period", period, "--timeout", timeout,
                                 "--kill", f"{victim}@1500ms", "--duration", "2500ms", "--json", report_path],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        watcher = threading.Thread(target=watch_roles, args=(proc.pid, roles, stop), daemon=True)
        watcher.start()
        try:
            proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            stop.set()
            watcher.join()
            text = stop_trace()
        with open(report_path) as f:
            report = json.load(f)
    failure = next(f for f in report["failures"] if f["fault"] == "kill")
    all_ms = failure["all_notified_at_ms"] - failure["injected_at_ms"]
    return analyse(text, roles, victim, all_ms) | {"all_ms": all_ms, "cause": failure["cause"]}


def analyse(text, roles, victim, all_ms):
    events = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            events.append((float(m.group("ts")), int(m.group("cpu")), m.group("event"), m.group("rest")))
    events.sort()
    kill = None
    for ts, _, event, rest in events:
        s = SIGNAL.search(rest) if event == "signal_generate" else None
        if s and s.group("sig") == "9" and roles.get(int(s.group("pid")), ("", None))[1] == victim:
            kill = ts
            break
    if kill is None:
        raise RuntimeError("no SIGKILL to the victim in the trace")
    end = kill + all_ms / 1000
    running = {}  # cpu -> (tid, since)
    spent = {}  # (cpu, category) -> seconds

    def category(tid):
        if tid == 0:
            return "idle"
        role, rank = roles.get(tid, ("other", None))
        if rank == victim:
            return "victim"
        return role

    by_thread = {}  # tid -> seconds in the window

    def account(cpu, tid, since, until):
        a, b = max(since, kill), min(until, end)
        if b > a:
            key = (cpu, category(tid))
            spent[key] = spent.get(key, 0.0) + (b - a)
            by_thread[tid] = by_thread.get(tid, 0.0) + (b - a)

    # Per survivor thread: when it was woken (and for which CPU) and when
    # it first ran after the kill, in ms after the kill.
    threads = {}
    for ts, cpu, event, rest in events:
        in_window = kill <= ts <= end + 0.005
        if event == "sched_wakeup" and in_window:
            w = WAKEUP.search(rest)
            tid = int(w.group("pid")) if w else None
            if tid in roles and roles[tid][1] != victim and roles[tid][0] in ("progress", "exits"):
                t = threads.setdefault(tid, {"role": roles[tid][0], "rank": roles[tid][1]})
                t.setdefault("woken_ms", round(1000 * (ts - kill), 3))
                t.setdefault("woken_for_cpu", int(w.group("cpu")))
        elif event == "sched_switch" and (s := SWITCH.search(rest)):
            prev, nxt = int(s.group("prev")), int(s.group("next"))
            if in_window and nxt in threads and "ran_ms" not in threads[nxt]:
                threads[nxt]["ran_ms"] = round(1000 * (ts - kill), 3)
                threads[nxt]["ran_on_cpu"] = cpu
            # Before a CPU's first switch nobody knows who ran on it.
            if cpu in running:
                account(cpu, prev, running[cpu][1], ts)
            running[cpu] = (nxt, ts)
    for cpu, (tid, since) in running.items():
        account(cpu, tid, since, end)
    cpus = sorted({cpu for cpu, _ in spent})
    busiest = sorted(by_thread.items(), key=lambda kv: -kv[1])[:6]
    return {"kill_ts": kill, "threads": sorted(threads.values(), key=lambda t: t.get("ran_ms", 1e9)),
            "busiest": [{"role": category(tid), "rank": roles.get(tid, (None, None))[1],
                         "ms": round(1000 * sec, 3)} for tid, sec in busiest],
            "per_cpu": {str(cpu): {c: 1000 * spent.get((cpu, c), 0.0) for c in CATEGORIES}
                                         for cpu in cpus}}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", default="8,32", help="job sizes, comma-separated")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--period", default="10ms")
    p.add_argument("--timeout", default="100ms")
    a = p.parse_args()
    why = tracefs_unavailable()
    if why:
        p.error(why)
    build()
    rows, results = [], []
    for n in [int(x) for x in a.n.split(",")]:
        trials = []
        for t in range(a.trials):
            victim = 1 + (t * (n - 1)) // a.trials
            r = one_trial(n, victim, a.period, a.timeout)
            r.update({"n": n, "victim": victim})
            trials.append(r)
            results.append(r)
            if r["all_ms"] > 1.5:
                print(f"N={n} victim {victim}: {r['all_ms']:.2f} ms; survivors' threads after the kill "
                      "(woken at ms for CPU, first ran at ms on CPU):")
                print("  busiest threads in the window: " + ", ".join(
                    f"{b['role']} of rank {b['rank']} {b['ms']} ms" for b in r["busiest"]))
                for th in r["threads"]:
                    print(f"  rank {th['rank']} {th['role']}: woken {th.get('woken_ms')} for cpu "
                          f"{th.get('woken_for_cpu')}, ran {th.get('ran_ms')} on cpu {th.get('ran_on_cpu')}")
            for cpu, split in r["per_cpu"].items():
                rows.append([n, victim, fmt(r["all_ms"], 2), r["cause"], cpu]
                            + [fmt(split[c], 2) for c in CATEGORIES])
        for c in CATEGORIES:
            total = [sum(x["per_cpu"][cpu][c] for cpu in x["per_cpu"]) for x in trials]
            print(f"N={n} {c}: median {fmt(median(total), 2)} ms of CPU in the window (both CPUs)")
    print()
    table(["N", "victim", "every survivor ms", "cause", "cpu"] + [f"{c} ms" for c in CATEGORIES], rows)
    print("(each CPU's time between the SIGKILL and the last survivor knowing, by whose threads ran)")
    write_json("kill_trace", {"benchmark": "kill_trace", "machine": machine(), "period": a.period,
                              "timeout": a.timeout, "results": results})


if __name__ == "__main__":
    main()
