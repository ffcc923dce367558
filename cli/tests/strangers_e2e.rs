//! `ffd run` is closed to other users (docs/design.md §5.4 "What the authentication stops"): its job runs
//! in a private network namespace, so another user of the host cannot reach
//! its ranks' fabric ports at all, and the streams that kill a rank of
//! libfabric 1.17 (`tests/provider_hostile_connection.rs`) never arrive.
//!
//! Root runs `ffd run -n 4`; while it runs, an unprivileged user (`nobody`,
//! through `setpriv`) opens a connection to every TCP port the agents
//! listen on and sends the rxm `conn_id` stream, the tcp ack stream, noise
//! and nothing. The run must end with every rank alive and no report. With
//! `--shared-network` and `FFD_LOCAL=off` (the ranks of one host then
//! talk over the fabric, so their port admits the host's address) the
//! same user's connection completes: the attack path is real. With
//! `--shared-network` alone it does not: a one-host job's messages go
//! through the host's segment and its port admits no address at all.

#[path = "../../tests/hostile/mod.rs"]
mod hostile;
#[path = "../../tests/prereq/mod.rs"]
mod prereq;

use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use hostile::{ACK_STREAM, CONN_ID_STREAM};

/// For the agents to listen (start-up is well under a second here).
const LISTEN_WITHIN: Duration = Duration::from_secs(20);
/// The job's length: long enough for the attack and a check.
const RUN_FOR: &str = "6s";

fn prerequisites(test: &str) -> bool {
    prereq::available(
        test,
        &[
            prereq::root(),
            prereq::command("setpriv"),
            prereq::command("bash"),
            prereq::command("timeout"),
        ],
    )
}

/// `\xNN` escapes of a hex string, for bash's `printf`.
fn escaped(hex: &str) -> String {
    (0..hex.len())
        .step_by(2)
        .map(|i| format!("\\x{}", &hex[i..i + 2]))
        .collect()
}

/// The pids whose parent is `parent`.
fn children(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let ppid = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .and_then(|p| p.trim().parse::<u32>().ok());
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}

/// Starts `ffd run -n 4` with `extra` options and `env`; returns it and
/// every agent's listening ports once all four listen. The caller reaps
/// it.
#[allow(clippy::zombie_processes)] // returned to the caller, which waits
fn start_job(extra: &[&str], env: &[(&str, &str)]) -> (Child, Vec<u16>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ffd"))
        .args(["run", "-n", "4", "--duration", RUN_FOR])
        .args(extra)
        .env("IPATH_NO_BACKTRACE", "1")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ffd run");
    let deadline = Instant::now() + LISTEN_WITHIN;
    loop {
        let agents = children(child.id());
        let ports: Vec<Vec<u16>> = agents
            .iter()
            .map(|&a| hostile::listening_ports(&a.to_string()))
            .collect();
        if agents.len() == 4 && ports.iter().all(|p| !p.is_empty()) {
            return (child, ports.concat());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the four agents did not listen within {LISTEN_WITHIN:?}: {ports:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// As `nobody`: connects to 127.0.0.1:`port` and sends `stream` (hex);
/// whether the connection was made (within 3 s: a SYN the source filter
/// drops is sent again after 1 s, and the connect would wait minutes).
fn attack_as_nobody(port: u16, stream: &str) -> bool {
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} || exit 7; printf '{}' >&3; sleep 0.2; exit 0",
        escaped(stream)
    );
    let status = Command::new("timeout")
        .args([
            "3",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "bash",
            "-c",
            &script,
        ])
        .stderr(Stdio::null())
        .status()
        .expect("setpriv bash");
    status.success()
}

#[test]
fn another_users_streams_do_not_reach_an_ffd_run_job() {
    if !prerequisites("another_users_streams_do_not_reach_an_ffd_run_job") {
        return;
    }
    let (child, ports) = start_job(&[], &[]);
    let noise: String = (0..4096u32)
        .map(|i| format!("{:02x}", (i.wrapping_mul(2_654_435_761) >> 13) as u8))
        .collect();
    let mut reached = Vec::new();
    for &port in &ports {
        for stream in [CONN_ID_STREAM, ACK_STREAM, noise.as_str(), ""] {
            if attack_as_nobody(port, stream) {
                reached.push(port);
            }
        }
    }
    let out = child.wait_with_output().expect("ffd run ends");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        reached.is_empty(),
        "nobody reached ports {reached:?} of the job\n{stdout}\n{stderr}"
    );
    assert!(
        out.status.success(),
        "the run failed ({:?})\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("false reports: none"), "{stdout}\n{stderr}");
    assert!(
        !stdout.contains("exited") && !stdout.contains("failed"),
        "a rank ended or was reported\n{stdout}\n{stderr}"
    );
}

#[test]
fn with_a_shared_network_a_one_host_job_still_admits_nobody() {
    if !prerequisites("with_a_shared_network_a_one_host_job_still_admits_nobody") {
        return;
    }
    let (mut child, ports) = start_job(&["--shared-network"], &[]);
    // Every port at once, each attempt bounded (3 s), well within the run.
    let attempts: Vec<_> = ports
        .iter()
        .map(|&port| thread::spawn(move || (port, attack_as_nobody(port, ""))))
        .collect();
    let reached: Vec<u16> = attempts
        .into_iter()
        .map(|t| t.join().expect("no panic"))
        .filter_map(|(port, reached)| reached.then_some(port))
        .collect();
    assert!(
        child.try_wait().expect("ffd run").is_none(),
        "the job ended before the attempts did"
    );
    let out = child.wait_with_output().expect("ffd run ends");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        reached.is_empty(),
        "nobody reached ports {reached:?} of a one-host job\n{stdout}"
    );
    assert!(out.status.success(), "the run failed\n{stdout}");
    assert!(stdout.contains("false reports: none"), "{stdout}");
}

#[test]
fn with_a_shared_network_another_user_reaches_the_port() {
    if !prerequisites("with_a_shared_network_another_user_reaches_the_port") {
        return;
    }
    // Without the host's mailboxes its ranks talk over the fabric, and
    // their port admits the host's address.
    let (mut child, ports) = start_job(&["--shared-network"], &[("FFD_LOCAL", "off")]);
    // Connect and send nothing: libfabric 1.17 would die of the streams.
    let reached = attack_as_nobody(ports[0], "");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        reached,
        "nobody reaches port {} of a shared-network job",
        ports[0]
    );
}
