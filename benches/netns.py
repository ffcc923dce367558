"""A host cut off the network without a reset, for ffd: H network
namespaces ("hosts") joined by a bridge, an `ffd rendezvous` on the bridge
and one `ffd agent` per rank inside its host's namespace (rank r on host
r mod H, FFD_HOSTNAME=node<h>, as `ffd run --hosts H`). Taking one host's
veth down drops its packets silently, so only a timeout can find it.

Needs root and iproute2 (as cli/tests/partition_netns.rs). Everything made
here (namespaces, veths, the bridge; the rendezvous's secret) is removed when the job
ends, however it ends.
"""

import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from common import FFD
from local_support import end, spawn


def available():
    """None, or why namespaces cannot be made here."""
    if os.geteuid() != 0:
        return "not root: network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` (iproute2)"
    return None


def ip(*args):
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()}")


def kill_in(ns):
    """SIGKILL every process in namespace `ns` (`ip netns pids`)."""
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30)
    for pid in out.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ValueError, ProcessLookupError):
            pass


class Net:
    """`hosts` namespaces on a bridge; `close()` removes them."""

    def __init__(self, hosts):
        pid = os.getpid()
        self.tag = f"fb{pid % 10000}"
        self.subnet = pid % 250 + 1
        self.hosts = hosts
        self.made = []  # ("link", name) or ("netns", name), in creation order

    def ns(self, h):
        return f"{self.tag}n{h}"

    def outer(self, h):
        return f"{self.tag}o{h}"

    def inner(self, h):
        return f"{self.tag}i{h}"

    def bridge(self):
        return f"{self.tag}br"

    def root_addr(self):
        return f"10.214.{self.subnet}.1"

    def host_addr(self, h):
        return f"10.214.{self.subnet}.{10 + h}"

    def create(self):
        br = self.bridge()
        ip("link", "add", br, "type", "bridge")
        self.made.append(("link", br))
        ip("addr", "add", f"{self.root_addr()}/24", "dev", br)
        ip("link", "set", br, "up")
        for h in range(self.hosts):
            ns, outer, inner = self.ns(h), self.outer(h), self.inner(h)
            ip("netns", "add", ns)
            self.made.append(("netns", ns))
            ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            self.made.append(("link", outer))
            ip("link", "set", inner, "netns", ns)
            ip("link", "set", outer, "master", br, "up")
            ip("netns", "exec", ns, "ip", "addr", "add", f"{self.host_addr(h)}/24", "dev", inner)
            ip("netns", "exec", ns, "ip", "link", "set", inner, "up")
            ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
        return self

    def close(self):
        # Whatever still runs in these namespaces was started in them by
        # this bench (a cut host's daemons never hear that their job
        # ended): it goes with them, or it outlives the namespace.
        for kind, name in self.made:
            if kind == "netns":
                kill_in(name)
        for kind, name in reversed(self.made):
            try:
                ip(kind, "del", name)
            except RuntimeError:
                pass  # a veth goes with its namespace
        self.made.clear()


def _reader(rank, stream, lines):
    for line in stream:
        try:
            lines.put((rank, json.loads(line)))
        except ValueError:
            pass


def cut_job(ranks, hosts, cut, period_ms, timeout_ms, env_extra, settle_s=1.0):
    """One job: every rank ready, `settle_s` later host `cut` loses its link.
    Returns {"injected_ns", "learned": {(survivor, failed): (unix_ns, cause, detector)},
    "survivors", "cut_ranks", "false": [(reporter, rank)]}."""
    net = Net(hosts)
    agents, rendezvous = [], None
    errors = tempfile.TemporaryFile(mode="w+")  # the rendezvous's stderr
    try:
        net.create()
        # Without --secret-file the rendezvous writes a fresh secret in a
        # private directory of its own, says where, and removes it when it ends.
        rendezvous = spawn([FFD, "rendezvous", "-n", str(ranks), "--listen", f"{net.root_addr()}:0"],
                           stdout=subprocess.PIPE, stderr=errors, text=True)
        first = rendezvous.stdout.readline().strip()
        second = rendezvous.stdout.readline().strip()
        if not first.startswith("FFD_BOOTSTRAP=") or not second.startswith("FFD_SECRET_FILE="):
            end(rendezvous)
            errors.seek(0)
            raise RuntimeError(f"ffd rendezvous printed {first!r} {second!r}: {errors.read()[-2000:]}")
        secret = second.split("=", 1)[1]
        lines = queue.Queue()
        base = {k: v for k, v in os.environ.items() if not k.startswith("FFD_")}
        for r in range(ranks):
            h = r % hosts
            env = {**base, "FFD_BOOTSTRAP": first.split("=", 1)[1], "FFD_RANK": str(r),
                   "FFD_SIZE": str(ranks), "FFD_SECRET_FILE": secret, "FFD_DOMAIN": net.inner(h),
                   "FFD_HOSTNAME": f"node{h}", "FFD_PERIOD": f"{period_ms:g}ms", "FFD_TIMEOUT": f"{timeout_ms:g}ms",
                   **env_extra}
            a = spawn(["ip", "netns", "exec", net.ns(h), FFD, "agent", "--stdin-control"], env=env,
                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            agents.append(a)
            threading.Thread(target=_reader, args=(r, a.stdout, lines), daemon=True).start()
        ready, deadline = set(), time.monotonic() + 120
        while len(ready) < ranks:
            try:
                rank, ev = lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"netns job: {len(ready)}/{ranks} agents ready within 120 s") from None
            if ev.get("event") == "ready":
                ready.add(rank)
        time.sleep(settle_s)
        cut_ranks = [r for r in range(ranks) if r % hosts == cut]
        survivors = [r for r in range(ranks) if r % hosts != cut]
        injected = time.time_ns()
        ip("link", "set", net.outer(cut), "down")
        learned, false = {}, []
        deadline = time.monotonic() + (len(cut_ranks) + 2) * timeout_ms / 1000 + 5
        while len(learned) < len(survivors) * len(cut_ranks) and time.monotonic() < deadline:
            try:
                rank, ev = lines.get(timeout=max(0.05, deadline - time.monotonic()))
            except queue.Empty:
                break
            if ev.get("event") != "failed" or rank not in survivors:
                continue
            if ev["rank"] in cut_ranks:
                learned.setdefault((rank, ev["rank"]),
                                   (int(ev["unix_ms"] * 1e6), ev.get("cause"), ev.get("detector")))
            else:
                false.append((rank, ev["rank"]))
        return {"injected_ns": injected, "learned": learned, "survivors": survivors,
                "cut_ranks": cut_ranks, "false": false}
    finally:
        for a in agents:
            end(a, grace=2.0)
        if rendezvous is not None:
            end(rendezvous, grace=2.0)
        net.close()
        errors.close()
