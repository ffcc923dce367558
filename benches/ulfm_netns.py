#!/usr/bin/env python3
"""Open MPI 5 ULFM across network namespaces, the peer of `ffd run
--netns H`: H namespaces ("hosts", benches/netns.py's bridge and veths),
each process in the UTS namespace of its own with hostname node<h>.
`mpirun` runs on host 0; PRRTE starts its daemon on every other host
through a launch agent that enters that host's namespaces in place of
ssh (`--prtemca plm_ssh_agent`); ranks talk TCP over the bridge (btl tcp
and self, PRRTE's out-of-band and PMIx on the bridge's subnet). Rank r
runs on host r mod H (`--map-by node`), as under `ffd run`.

What runs: benches/ulfm_detect.c for kill, SIGSTOP, a whole host's
ranks killed at once and a host cut off (its bridge-side veth down: no
reset; `cut` then kills its ranks and brings it back once the survivors
are done) (ULFM's own detector on, period and timeout as given),
benches/agreement_ulfm.c for MPIX_Comm_agree. Faults are sent from
here by PID (namespaces of the network and the hostname only: the PIDs
are this machine's).

Needs root, iproute2 and util-linux's `unshare`. Everything made here is
removed when the job ends, however it ends.

    benches/ulfm_netns.py [--hosts 4] [--ranks 16]   # a smoke run: one kill, one agreement
"""

import argparse
import json
import os
import shutil
import stat
import subprocess
import tempfile

import agreement as agreement_bench
import netns
import ulfm
from common import fmt, median, percentile, table

VENV = ulfm.VENV
MPIRUN = os.path.join(VENV, "bin", "mpirun")


def available():
    """None, or why ULFM cannot be run across namespaces here."""
    why = netns.available() or ulfm.available()
    if why:
        return why
    if shutil.which("unshare") is None:
        return "no `unshare` (util-linux)"
    return None


class Cluster:
    """H namespaces on a bridge, and the scripts that enter them."""

    def __init__(self, hosts):
        self.net = netns.Net(hosts)
        self.hosts = hosts
        self.dir = None

    def addr(self, h):
        return self.net.host_addr(h)

    def subnet(self):
        return f"{self.net.root_addr().rsplit('.', 1)[0]}.0/24"

    def __enter__(self):
        try:
            self.net.create()
            self.dir = tempfile.mkdtemp(prefix="ffd-ulfm-netns-")
            cases = "\n".join(f"  {self.addr(h)}) ns={self.net.ns(h)}; name=node{h} ;;" for h in range(self.hosts))
            # PRRTE calls the agent as `agent HOST COMMAND...`; the command
            # is a shell line (environment set-up, then prted).
            self._script("agent", f"""#!/bin/sh
host=$1; shift
case "$host" in
{cases}
  *) echo "ulfm_netns agent: unknown host $host" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" unshare --uts /bin/sh -c "hostname $name && $*"
""")
            self._script("host0", f"""#!/bin/sh
exec ip netns exec {self.net.ns(0)} unshare --uts /bin/sh -c 'hostname node0 && exec "$@"' sh "$@"
""")
            return self
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc):
        self.close()

    def _script(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, stat.S_IRWXU)

    def close(self):
        self.net.close()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def prefix(self):
        """Before mpirun: into host 0's namespaces."""
        return [os.path.join(self.dir, "host0")]

    def mpirun_args(self, ranks):
        per_host = -(-ranks // self.hosts)
        hosts = ",".join(f"{self.addr(h)}:{per_host}" for h in range(self.hosts))
        return ["--host", hosts, "--map-by", "node",
                "--prtemca", "plm_ssh_agent", os.path.join(self.dir, "agent"),
                "--prtemca", "prte_if_include", self.subnet(),
                "--prtemca", "oob_tcp_if_include", self.subnet(),
                # Every host's slots are this machine's 2 cores: ranks that
                # spin without yielding starve the one that must answer
                # (an allreduce took 35 ms instead of 0.2).
                "--mca", "mpi_yield_when_idle", "true",
                "--mca", "btl", "tcp,self",
                "--mca", "btl_tcp_if_include", self.subnet(),
                "--mca", "oob_tcp_if_include", self.subnet()]


def faults(hosts, ranks, fault, victims, period_ms, timeout_ms, spacing_ms=1000):
    """ulfm.run_job across `hosts` namespaces: samples as ulfm.samples, one
    per victim (a tuple of ranks is faulted at once and gives one sample,
    its last rank's learned by every survivor). `fault` "cut" takes the
    host of each victim group (every rank of one host) off the bridge:
    its bridge-side veth down, no reset, as `ffd run --cut-host`."""
    with Cluster(hosts) as c:
        def cut(group, down):
            h = group[0] % hosts
            if any(r % hosts != h for r in group):
                raise ValueError(f"a cut takes one host's ranks, not {group}")
            netns.ip("link", "set", c.net.outer(h), "down" if down else "up")

        job = ulfm.run_job(ranks, victims, fault, period_ms, timeout_ms, spacing_ms=spacing_ms,
                           prefix=c.prefix(), mpirun_args=c.mpirun_args(ranks), cut=cut)
    out, by_rank = [], {s["rank"]: s for s in job}
    for v in victims:
        group = tuple(v) if isinstance(v, (tuple, list)) else (v,)
        per = ulfm.samples([by_rank[r] for r in group])
        missed = sum(p["missed"] for p in per)
        firsts = [p["detect_ms"] for p in per if p["detect_ms"] is not None]
        lasts = [p["all_ms"] for p in per]
        out.append({"ranks": list(group), "detect_ms": min(firsts) if firsts else None,
                    "all_ms": None if missed or None in lasts else max(lasts), "missed": missed})
    return out


def agreement(exe, hosts, ranks, rounds):
    """MPIX_Comm_agree (`exe`: benches/agreement_ulfm.c as
    agreement.ulfm_build() builds it) across `hosts` namespaces:
    {"latency_us": own call time, max over ranks; "last_call_us": last
    return - last call}."""
    with Cluster(hosts) as c:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PRTE_", "PMIX_"))}
        out = subprocess.run([*c.prefix(), MPIRUN, "--allow-run-as-root", "--with-ft", "ulfm", "--bind-to", "none",
                              *c.mpirun_args(ranks), "-np", str(ranks), exe, str(rounds)],
                             capture_output=True, text=True, timeout=600, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"MPIX_Comm_agree across {hosts} namespaces: exit {out.returncode}: "
                           f"{(out.stdout + out.stderr)[-3000:]}")
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1]
    return json.loads(line)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--ranks", type=int, default=16)
    p.add_argument("--rounds", type=int, default=20)
    a = p.parse_args()
    why = available()
    if why:
        raise SystemExit(f"ulfm_netns: {why}")
    ulfm.build()
    exe = agreement_bench.ulfm_build()
    kill = faults(a.hosts, a.ranks, "kill", [a.ranks - 1], 10, 100)
    host = faults(a.hosts, a.ranks, "kill", [tuple(range(1, a.ranks, a.hosts))], 10, 100)
    cut = faults(a.hosts, a.ranks, "cut", [tuple(range(1, a.ranks, a.hosts))], 10, 100)
    agree = agreement(exe, a.hosts, a.ranks, a.rounds)
    lc = [x / 1000 for x in agree["last_call_us"]]
    table(["measure", "ms"], [
        ["kill: every survivor knows", fmt(kill[0]["all_ms"])],
        ["host kill: every survivor knows", fmt(host[0]["all_ms"])],
        ["host cut: every survivor knows", fmt(cut[0]["all_ms"])],
        ["MPIX_Comm_agree last call -> all decided p50", fmt(median(lc), 3)],
        ["MPIX_Comm_agree last call -> all decided p99", fmt(percentile(lc, 99), 3)],
    ])


if __name__ == "__main__":
    main()
