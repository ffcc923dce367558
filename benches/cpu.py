#!/usr/bin/env python3
"""CPU that an idle detector costs each process, per heartbeat period.

An `ffd run -n N --hosts H` job with no faults, at period 1 ms and 10 ms
(timeout 10 periods, ffd's default ratio, or --timeout-periods K). Once every rank is ready and the start-up grace has
passed, each agent's CPU time is read from /proc/<pid>/stat (utime +
stime, what getrusage(RUSAGE_SELF) reports, all threads) at the start and
the end of --seconds, and divided by the periods in between: µs of CPU per
process per period, user and system. /proc/<pid>/task/*/schedstat (ns run
on a CPU) is read alongside, a finer cross-check of the same quantity.

Emulated hosts put rank r on host r mod H; a host's leader is its lowest
rank (r < H). When this ffd supports FFD_LOCAL (only leaders
heartbeat over the fabric), it runs with FFD_LOCAL=auto and =off and the
auto rows separate leaders from the other ranks; before that, every rank
is on the fabric ring and one row covers them all.

    benches/cpu.py [--quick] [--seconds 60] [--ranks 8] [--hosts 2] [--periods 1ms,10ms]
                   [--timeout-periods 10,5]

A rank that is not its host's leader wakes a few times per timeout
(2: `local_checks_per_timeout`, half of the protocol's fixed 4) to check its
same-host emitter and bump its own counter; a leader also every period for its fabric heartbeat. So the
non-leaders' cost per period falls with a longer timeout, the leaders'
hardly.

--quick: 15 s per setting (about 2 minutes in all).
Writes target/bench/cpu.json.
"""

import argparse
import glob
import os
import signal
import subprocess
import time

import local_support as ls
from common import FFD, build, fmt, machine, table, write_json

TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid):
    """(user s, system s, run ns from schedstat) of process `pid`."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14, 15 of proc(5)
    run_ns = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                run_ns += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that just ended
    return utime / TICK, stime / TICK, run_ns


def agents_of(launcher_pid, ranks, bound_s=120):
    """{rank: pid} of the agents `ffd run` started (its children, FFD_RANK
    from their environment), once all `ranks` are there."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        found = {}
        for path in glob.glob(f"/proc/{launcher_pid}/task/*/children"):
            try:
                with open(path) as f:
                    children = f.read().split()
            except FileNotFoundError:
                continue  # a launcher thread that ended meanwhile
            for pid in map(int, children):
                try:
                    with open(f"/proc/{pid}/environ", "rb") as e:
                        env = dict(kv.split(b"=", 1) for kv in e.read().split(b"\0") if b"=" in kv)
                except FileNotFoundError:
                    continue
                if b"FFD_RANK" in env:
                    found[int(env[b"FFD_RANK"])] = pid
        if len(found) == ranks:
            return found
        time.sleep(0.2)
    raise RuntimeError(f"ffd run (pid {launcher_pid}): {len(found)}/{ranks} agents found within {bound_s} s")


def measure(ranks, hosts, period_ms, timeout_periods, seconds, mode):
    """One job; per-rank CPU over `seconds` after every rank is ready."""
    args = [FFD, "run", "-n", str(ranks), "--hosts", str(hosts), "--period", f"{period_ms:g}ms",
            "--timeout", f"{timeout_periods * period_ms:g}ms", "--duration", f"{seconds + 30}s"]
    env = {**{k: v for k, v in os.environ.items() if k != "FFD_LOCAL"}, **ls.mode_env(mode)}
    job = ls.spawn(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        for line in job.stdout:  # "all N ranks ready" (bounded by the launcher's own start-up bound)
            if "ranks ready" in line:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("ffd run: no ready line within 120 s")
        else:
            raise RuntimeError(f"ffd run ended before its ranks were ready (status {job.wait()})")
        pids = agents_of(job.pid, ranks)
        time.sleep(2.0)  # past the start-up grace (1 s)
        load0 = os.getloadavg()[0]
        t0 = time.monotonic()
        before = {r: cpu_of(p) for r, p in pids.items()}
        time.sleep(seconds)
        after = {r: cpu_of(p) for r, p in pids.items()}
        took = time.monotonic() - t0
        load1 = os.getloadavg()[0]
    finally:
        ls.end(job, grace=10)
    periods = took * 1000 / period_ms
    per_rank = {}
    for r in pids:
        user = after[r][0] - before[r][0]
        system = after[r][1] - before[r][1]
        run_ns = after[r][2] - before[r][2]
        per_rank[r] = {"pid": pids[r], "leader": ls.is_leader(r, hosts), "user_s": user, "system_s": system,
                       "us_per_period": (user + system) * 1e6 / periods,
                       "schedstat_us_per_period": run_ns / 1e3 / periods,
                       "core_percent": (user + system) * 100 / took}
    return {"seconds": took, "periods": periods, "load_start": load0, "load_end": load1, "ranks": per_rank}


def summary(per_rank, role):
    rs = [v for v in per_rank.values() if role == "all" or v["leader"] == (role == "leaders")]
    if not rs:
        return None
    us = [v["us_per_period"] for v in rs]
    return {"role": role, "processes": len(rs), "us_per_period_mean": sum(us) / len(us),
            "us_per_period_min": min(us), "us_per_period_max": max(us),
            "schedstat_us_per_period_mean": sum(v["schedstat_us_per_period"] for v in rs) / len(rs),
            "system_share": sum(v["system_s"] for v in rs) / max(1e-12, sum(v["user_s"] + v["system_s"] for v in rs)),
            "core_percent_mean": sum(v["core_percent"] for v in rs) / len(rs)}


def interrupted(signum, frame):
    raise KeyboardInterrupt


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="15 s per setting")
    p.add_argument("--seconds", type=float, default=60.0, help="measured interval per setting")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--hosts", type=int, default=2, help="emulated hosts (rank r on host r mod H)")
    p.add_argument("--periods", default="1ms,10ms", help="comma-separated heartbeat periods (ms)")
    p.add_argument("--timeout-periods", default="10", help="comma-separated timeouts, in periods")
    a = p.parse_args()
    if a.quick:
        a.seconds = 15.0
    periods = [float(x.strip().removesuffix("ms")) for x in a.periods.split(",")]
    ratios = [int(x) for x in a.timeout_periods.split(",")]
    signal.signal(signal.SIGTERM, interrupted)
    build()
    # "pidfd" differs from "auto" only in how an exit is seen, not in cost.
    modes = [m for m in ls.local_modes() if m != "pidfd"]
    t0 = time.monotonic()
    results, rows = [], []
    try:
        for period_ms, ratio, mode in ((pm, k, md) for pm in periods for k in ratios for md in modes):
            m = measure(a.ranks, a.hosts, period_ms, ratio, a.seconds, mode)
            # Leaders differ from the others only with host groups.
            roles = ["all", "leaders", "others"] if mode == "auto" else ["all"]
            for role in roles:
                s = summary(m["ranks"], role)
                if s is None:
                    continue
                rows.append([f"{period_ms:g}ms", f"{ratio * period_ms:g}ms", ls.mode_label(mode), role,
                             s["processes"], fmt(s["us_per_period_mean"], 2), fmt(s["us_per_period_min"], 2),
                             fmt(s["us_per_period_max"], 2), fmt(s["schedstat_us_per_period_mean"], 2),
                             f"{100 * s['system_share']:.0f}%", fmt(s["core_percent_mean"], 2),
                             f"{m['load_start']:.1f}-{m['load_end']:.1f}"])
                results.append({"period_ms": period_ms, "timeout_ms": ratio * period_ms, "ffd_local": mode,
                                "detector": ls.mode_label(mode),
                                **s, "load_start": m["load_start"], "load_end": m["load_end"]})
            results.append({"period_ms": period_ms, "timeout_ms": ratio * period_ms, "ffd_local": mode,
                            "role": "per rank",
                            "seconds": m["seconds"], "periods": m["periods"], "ranks": m["ranks"]})
            print(f"[{time.monotonic() - t0:5.0f} s] period {period_ms:g} ms, timeout {ratio * period_ms:g} ms, "
                  f"{ls.mode_label(mode)}: "
                  f"{fmt(summary(m['ranks'], 'all')['us_per_period_mean'], 2)} µs/period/process", flush=True)
    finally:
        ls.end_started()
    print()
    table(["period", "timeout", "ffd", "role", "processes", "µs/period mean", "min", "max", "schedstat µs/period",
           "system", "% of a core", "load"], rows)
    print(f"({a.ranks} ranks on {a.hosts} emulated hosts, {a.seconds:g} s per setting; "
          f"µs of CPU (utime+stime) per process per heartbeat period)")
    write_json("cpu", {"benchmark": "cpu", "ranks": a.ranks, "hosts": a.hosts, "seconds": a.seconds,
                       "ffd_modes": [ls.mode_description(m) for m in modes], "machine": machine(),
                       "results": results})


if __name__ == "__main__":
    ls.run_main(main)
