"""What the ffd binary under test supports of same-host watching (issue
12), so that the benchmarks run unchanged before and after it lands.

- `FFD_LOCAL` (auto|off): supported when `ffd info` lists the setting.
  Without it every rank is on the fabric ring ("per-process ring"), and
  the benchmarks measure that.
- `ffd run --kill-host H@T`: used when `ffd run --help` lists it; else a
  whole-host kill is one `--kill R@T` per rank of the host, same T.

Emulated hosts (`ffd run --hosts H`): rank r runs as host r mod H
(FFD_HOSTNAME=node<r mod H>); a host's leader is its lowest rank, r = h.

Every benchmark process started through `spawn` is recorded so that an
error path can end exactly those (by PID) and reap them.
"""

import os
import signal
import subprocess
import sys
import time

from common import FFD

_started = []


def local_modes():
    """The FFD_LOCAL values to measure: ["auto", "pidfd", "off"] ("pidfd"
    only where this ffd accepts it: exit words came after it), or [None]
    when this ffd does not know the setting (before same-host watching)."""
    out = subprocess.run([FFD, "info"], capture_output=True, text=True, timeout=120).stdout
    if not any(line.split()[:1] == ["FFD_LOCAL"] for line in out.splitlines()):
        return [None]
    pidfd = subprocess.run([FFD, "info"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "FFD_LOCAL": "pidfd"}).returncode == 0
    return ["auto", "pidfd", "off"] if pidfd else ["auto", "off"]


def mode_label(mode):
    """How a row names the ffd it measured."""
    return {None: "ffd", "auto": "ffd", "pidfd": "ffd FFD_LOCAL=pidfd",
            "off": "ffd FFD_LOCAL=off"}[mode]


def mode_description(mode):
    return {
        None: "per-process fabric ring (this ffd has no FFD_LOCAL)",
        "auto": "FFD_LOCAL=auto: same-host watching (exit words, pidfds, counters), "
                "ring of host leaders",
        "pidfd": "FFD_LOCAL=pidfd: as auto, exits through pidfds only",
        "off": "FFD_LOCAL=off: per-process fabric ring",
    }[mode]


def mode_env(mode):
    return {} if mode is None else {"FFD_LOCAL": mode}


def has_kill_host():
    out = subprocess.run([FFD, "run", "--help"], capture_output=True, text=True, timeout=120).stdout
    return "--kill-host" in out


def host_of(rank, hosts):
    return rank % hosts


def host_ranks(host, ranks, hosts):
    return [r for r in range(ranks) if r % hosts == host]


def is_leader(rank, hosts):
    """Lowest rank of its emulated host (rank mod hosts == host)."""
    return rank < hosts


def spawn(args, **kwargs):
    """subprocess.Popen, remembered for `end_started` (in its own session,
    so that a terminal's ^C reaches this script only)."""
    proc = subprocess.Popen(args, start_new_session=True, **kwargs)
    _started.append(proc)
    return proc


def end(proc, grace=5.0):
    """SIGTERM, then SIGKILL after `grace` s, to this one process; reaps it."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        except ProcessLookupError:
            pass
    if proc in _started:
        _started.remove(proc)


def end_started():
    """Ends and reaps every process `spawn` started that is still there."""
    for proc in list(_started):
        end(proc, grace=2.0)


def kill_pid_if(pid, sig, name_part):
    """Sends `sig` to `pid` only if its command line still contains
    `name_part` (a process this benchmark started, not a reused PID)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if name_part.encode() not in f.read():
                return False
        os.kill(pid, sig)
        return True
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False


def sleep_until(deadline):
    """time.monotonic() deadline."""
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)


def run_main(main):
    """Runs a benchmark's `main`; on ^C (or a SIGTERM its main turned into
    one) ends exactly what it started, by PID, and exits 130."""
    try:
        main()
    except KeyboardInterrupt:
        end_started()
        sys.exit(130)
