//! An embedded C job closed to strangers: `examples/c/mpi_detect.c` under
//! Debian's Open MPI (as `tests/capi_mpi.rs` runs it), its six ranks on
//! `FFD_DOMAIN=lo` with `FFD_LOCAL=off` (the path of a job across hosts),
//! rank 3 killed 6 s in. Before the kill, from 127.0.0.2 (outside the
//! job), a connection to every TCP port the ranks listen on with the rxm
//! `conn_id` stream, the tcp ack stream and a silent one: none may complete
//! its handshake (the source filter), and the job's checks must hold as in
//! `capi_mpi.rs`: every survivor reports rank 3, and only rank 3, within
//! the bound; a rank killed by the streams would be a second failure and
//! fail them.
//!
//! The same job as a one-host job (`FFD_LOCAL` as by default: its
//! same-host messages go through the host's segment) opens no fabric
//! endpoint: once every rank runs its progress thread, no rank listens on
//! any TCP port (docs/design.md §5.4 "What the authentication stops"), and the job's checks hold.

mod capi_support;
mod hostile;

use capi_support::prereq;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use capi_support::detect::{JOB_BOUND, ffd_settings, system_libfabric};
use capi_support::mpi::{Expect, RANKS, VICTIM, check_job};
use capi_support::{Child, ScratchDir, clean_command, compile_c};
use ffd::fabric::connect_within;
use hostile::{ACK_STREAM, CONN_ID_STREAM, STRANGER, unhex};

/// A dropped SYN is sent again after 1 s: no handshake within this means
/// it was dropped twice.
const DROPPED_WITHIN: Duration = Duration::from_millis(2500);
/// For the ranks to listen (start-up takes about a second here).
const LISTEN_WITHIN: Duration = Duration::from_secs(30);

/// The children of `pid` (every thread's).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Every descendant of this process named `name`.
/// Whether `pid` runs a progress thread (`ffd-progress-<rank>`): its
/// detector's start-up has opened whatever it opens.
fn progressing(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|t| {
        std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("ffd-progress-"))
    })
}

fn descendants_named(name: &str) -> Vec<u32> {
    let mut todo = children(std::process::id());
    let mut found = Vec::new();
    while let Some(pid) = todo.pop() {
        if comm(pid) == name {
            found.push(pid);
        }
        todo.extend(children(pid));
    }
    found
}

fn example() -> PathBuf {
    compile_c(
        "mpicc",
        "examples/c/mpi_detect.c",
        "ffd",
        "mpi_detect_strangers",
    )
}

#[test]
fn a_stranger_outside_an_embedded_c_job_never_reaches_its_ranks() {
    if !prereq::available(
        "a_stranger_outside_an_embedded_c_job_never_reaches_its_ranks",
        &[prereq::mpirun(), prereq::c_toolchain()],
    ) {
        return;
    }
    attack_job(Some("off"), &[STRANGER]);
}

#[test]
fn no_process_of_the_host_reaches_a_one_host_embedded_c_job() {
    if !prereq::available(
        "no_process_of_the_host_reaches_a_one_host_embedded_c_job",
        &[prereq::mpirun(), prereq::c_toolchain()],
    ) {
        return;
    }
    attack_job(None, &[]);
}

/// Runs the job (`FFD_LOCAL` as `local` says, or its default), attacks
/// every TCP port its ranks listen on from each of `from`, and checks
/// that no handshake completed and the job's checks hold.
fn attack_job(local: Option<&str>, from: &[IpAddr]) {
    // One job at a time: the ranks are found by name among this test
    // process's descendants, which two jobs would share.
    static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_JOB
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let exe = example();
    let session = ScratchDir::new("strangers-mpi");
    let mut cmd = clean_command("mpirun");
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--enable-recovery",
    ])
    .args(["--bind-to", "none"])
    .args(["--mca", "orte_tmpdir_base"])
    .arg(&session.0)
    .args(["--mca", "btl", "self,vader"])
    .args(["--mca", "oob_tcp_if_include", "lo"]);
    let mut settings = ffd_settings();
    if let Some(local) = local {
        settings.push(("FFD_LOCAL", local.to_owned()));
    }
    for (name, value) in settings {
        cmd.args(["-x", name]).env(name, value);
    }
    cmd.args(["-np", &RANKS.to_string()])
        .arg(&exe)
        .args(["--victim", &VICTIM.to_string()])
        .args(["--kill-after", "6000"]);
    let job = Child::start(cmd, "mpirun mpi_detect");

    // Every rank listening (ffd's endpoint, and MPI's own sockets); a
    // one-host job (`from` empty): every rank seen past its detector's
    // start (its progress thread runs), and what each listened on then.
    let one_host = from.is_empty();
    let deadline = Instant::now() + LISTEN_WITHIN;
    let mut started: std::collections::BTreeMap<u32, Vec<u16>> = Default::default();
    let ports: Vec<u16> = loop {
        let ranks = descendants_named("mpi_detect_stra");
        let ports: Vec<Vec<u16>> = ranks
            .iter()
            .map(|&p| hostile::listening_ports(&p.to_string()))
            .collect();
        let ready = if one_host {
            for (&p, listens) in ranks.iter().zip(&ports) {
                if progressing(p) {
                    started.entry(p).or_default().extend(listens);
                }
            }
            started.len() == RANKS as usize
        } else {
            ranks.len() == RANKS as usize && ports.iter().all(|p| !p.is_empty())
        };
        if ready && one_host {
            break started.values().flatten().copied().collect();
        }
        if ready {
            break ports.concat();
        }
        assert!(
            Instant::now() < deadline,
            "the {RANKS} ranks were not all ready within {LISTEN_WITHIN:?}: {ranks:?} \
             {ports:?}, started {started:?}"
        );
        thread::sleep(Duration::from_millis(20));
    };
    assert!(
        !one_host || ports.is_empty(),
        "the ranks of a one-host job listen on TCP ports {ports:?}"
    );
    let attempts: Vec<_> = ports
        .iter()
        .flat_map(|&port| [CONN_ID_STREAM, ACK_STREAM, ""].map(move |s| (port, unhex(s))))
        .flat_map(|(port, bytes)| from.iter().map(move |&ip| (ip, port, bytes.clone())))
        .map(|(ip, port, bytes)| {
            thread::spawn(move || {
                let to = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
                let outcome = match connect_within(ip, to, DROPPED_WITHIN) {
                    // The SYN was dropped: the source filter.
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Ok(true),
                    // Refused or otherwise failed (a listener of MPI's
                    // start-up, closed since): nothing was parsed.
                    Err(_) => Ok(false),
                    Ok(mut conn) => {
                        use std::io::Write;
                        let _ = conn.write_all(&bytes);
                        Err(format!("port {port}: the handshake from {ip} completed"))
                    }
                };
                (port, outcome)
            })
        })
        .collect();
    let mut reached = Vec::new();
    let mut dropped = std::collections::BTreeSet::new();
    for attempt in attempts {
        match attempt.join().expect("no panic") {
            (_, Err(why)) => reached.push(why),
            (port, Ok(true)) => {
                dropped.insert(port);
            }
            (_, Ok(false)) => {}
        }
    }
    let out = job.finish(JOB_BOUND);
    let libfabric = system_libfabric();
    check_job(
        &out,
        &Expect {
            oob: "mpi",
            libfabric: &libfabric,
            exit_code: Some(0),
        },
    );
    // MPI's own listeners (Open MPI's tcp BTL is off: `self,vader`; its
    // out-of-band channel listens in mpirun, not in the ranks) would show
    // here as reached ports without the filter.
    assert!(
        reached.is_empty(),
        "reached from {from:?}: {reached:?}\n{}",
        out.stdout
    );
}
