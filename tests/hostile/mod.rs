//! What the hostile-connection tests send, and where they send it: the
//! two libfabric streams that crash a rank of libfabric 1.13 to 2.6
//! (`docs/upstream/libfabric-rxm-conn-id.md`), fixed noise, and the TCP
//! ports a process listens on.
//!
//! Shared by the top-level tests (`mod hostile;`) and the `ffd` command's
//! (`#[path = "../../tests/hostile/mod.rs"] mod hostile;`).

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use ffd::runtime::{Detector, Event};

/// An address on this machine outside a job bound to 127.0.0.1.
pub const STRANGER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// A `tcp` connection request (`ofi_ctrl_hdr` version 3, 24 bytes of rxm
/// connect data: protocol versions, a port, eager limit, rx size and the
/// client's `conn_id`), then one tcp message (base header, op msg, 84
/// bytes) carrying an rxm eager packet whose `conn_id` is 0xda0003 and a
/// 4-byte payload.
pub const CONN_ID_STREAM: &str = "\
030000180000000000000000000000000000000000000000010000000000000001020403b78f0200\
004000000010000000000000536500000300000000001000540000000000000004000000000000000300\
da000000000000000000000000000000000000000000020000000000000004000000000000000000000000\
000000000000000000000046464457";

/// A connection request like the one above but from another claimed
/// peer (port and `conn_id` one higher: a second peer at the same address
/// would be refused as a duplicate before its message is read), then a
/// bare tcp base header: version 3, op msg, `op_data` 2 (an
/// acknowledgement), header and message size 16.
pub const ACK_STREAM: &str = "\
030000180000000000000000000000000000000000000000010000000000000001020403b88f0200\
0040000000100000000000005366000003000000020010001000000000000000";

/// The bytes of a hex string.
pub fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

/// 4 KiB of bytes from a fixed xorshift: random to a parser, the same on
/// every run.
pub fn noise() -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The TCP ports `pid` (a number, or `self`) listens on, in its own
/// network namespace: the sockets in state LISTEN of
/// `/proc/<pid>/net/tcp{,6}` whose inode is one of the process's open
/// files. Sorted, each once; empty if the process is gone.
pub fn listening_ports(pid: &str) -> Vec<u16> {
    let mut inodes = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for row in text.lines().skip(1) {
            let cols: Vec<&str> = row.split_whitespace().collect();
            if cols.len() > 9 && cols[3] == "0A" {
                let port = cols[1].rsplit(':').next().expect("address:port");
                inodes.push((
                    format!("socket:[{}]", cols[9]),
                    u16::from_str_radix(port, 16).expect("hex port"),
                ));
            }
        }
    }
    let mut ports = Vec::new();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return ports;
    };
    for fd in fds.flatten() {
        if let Ok(target) = std::fs::read_link(fd.path()) {
            let target = target.to_string_lossy().into_owned();
            ports.extend(inodes.iter().filter(|(i, _)| *i == target).map(|(_, p)| *p));
        }
    }
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// Whether every rank still runs and works after an attack: no failure,
/// leave or exclusion raised, an agreement of all decided within `within`
/// with nobody failed, heartbeats completed since `beats_before`.
pub fn ranks_work(
    detectors: &[Detector],
    beats_before: &[u64],
    within: Duration,
) -> Result<String, String> {
    for d in detectors {
        while let Some(e) = d.try_next_event() {
            let trouble = matches!(
                e.event,
                Event::Stopped(_)
                    | Event::Failed { .. }
                    | Event::HostFailed { .. }
                    | Event::Left { .. }
                    | Event::SelfExcluded { .. }
            );
            if trouble {
                return Err(format!("rank {} raised {:?}", d.rank(), e.event));
            }
        }
        if !d.is_running() || d.is_excluded() || !d.failed_ranks().is_empty() {
            return Err(format!(
                "rank {}: running {}, excluded {}, failed {:?}",
                d.rank(),
                d.is_running(),
                d.is_excluded(),
                d.failed_ranks()
            ));
        }
    }
    let requests: Vec<_> = detectors
        .iter()
        .map(|d| {
            d.iagree(u64::MAX)
                .map_err(|e| format!("rank {}: {e}", d.rank()))
        })
        .collect::<Result<_, _>>()?;
    let mut decided = Vec::new();
    for (d, request) in detectors.iter().zip(&requests) {
        match request.wait_timeout(within) {
            Some(Ok(a)) if a.view.failed.is_empty() && a.flags == u64::MAX => decided.push(a.seq),
            Some(Ok(a)) => return Err(format!("rank {} agreed on {a:?}", d.rank())),
            Some(Err(e)) => return Err(format!("rank {}: agreement failed: {e}", d.rank())),
            None => {
                return Err(format!("rank {}: no agreement within {within:?}", d.rank()));
            }
        }
    }
    let mut beats = Vec::new();
    for (d, before) in detectors.iter().zip(beats_before) {
        let now = d.stats().runtime.heartbeats.completed;
        if now <= *before {
            return Err(format!(
                "rank {}: no heartbeat completed since the attack began ({before})",
                d.rank()
            ));
        }
        beats.push(now - before);
    }
    Ok(format!(
        "agreements {decided:?}, heartbeats completed since the attack began {beats:?}"
    ))
}
