//! `ffd run` is closed to other users (docs/design.md §5.4 "What the authentication stops"): a one-host
//! job (every rank on this host, `FFD_LOCAL=auto` with `futex_waitv`)
//! opens no fabric endpoint, so no agent owns a listening TCP socket at
//! all, in its private network namespace or with `--shared-network`, run
//! by root or by another user, and the streams that kill a rank of
//! libfabric 1.17 (`tests/provider_hostile_connection.rs`) have nowhere
//! to go. The launcher's only listener is its rendezvous (ffd's own
//! authenticated parser, `src/bootstrap/tcp`), during start-up.
//!
//! With `--shared-network` and `FFD_LOCAL=off` (the ranks of one host then
//! talk over the fabric, so their port admits the host's address) another
//! user's connection completes: the attack path is real where the fabric
//! is used.

#[path = "../../tests/hostile/mod.rs"]
mod hostile;
#[path = "../../tests/prereq/mod.rs"]
mod prereq;

use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

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

/// Whether `pid` runs a progress thread (`ffd-progress-<rank>`): its
/// start-up has opened whatever it opens.
fn progressing(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|t| {
        std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("ffd-progress-"))
    })
}

/// Starts `ffd run -n 4` with `extra` options and `env` (as `program`,
/// under `wrap`, e.g. `setpriv`), and returns it with its agents' pids
/// once all four run their progress thread and, with `listening`, listen
/// on a TCP port. The caller reaps it.
#[allow(clippy::zombie_processes)] // returned to the caller, which waits
fn start_job_as(
    wrap: &[&str],
    program: &std::path::Path,
    extra: &[&str],
    env: &[(&str, &str)],
    listening: bool,
) -> (Child, Vec<u32>) {
    let mut command = match wrap.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(program);
            c
        }
        None => Command::new(program),
    };
    let mut child = command
        .args(["run", "-n", "4", "--duration", RUN_FOR])
        .args(extra)
        .env("IPATH_NO_BACKTRACE", "1")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ffd run");
    let launcher = child.id();
    let deadline = Instant::now() + LISTEN_WITHIN;
    loop {
        // Under `setpriv` the launcher is its child (it execs: the same pid).
        let agents = children(launcher);
        let ready = agents.len() == 4
            && agents.iter().all(|&a| progressing(a))
            && (!listening
                || agents
                    .iter()
                    .all(|&a| !hostile::listening_ports(&a.to_string()).is_empty()));
        if ready {
            return (child, agents);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output();
            panic!("the four agents did not start within {LISTEN_WITHIN:?}: {agents:?} {out:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn start_job(extra: &[&str], env: &[(&str, &str)], listening: bool) -> (Child, Vec<u32>) {
    let ffd = std::path::Path::new(env!("CARGO_BIN_EXE_ffd"));
    start_job_as(&[], ffd, extra, env, listening)
}

/// Every TCP port the agents listen on, sampled every 20 ms until the
/// launcher `child` ends; then its output.
fn ports_until_the_end(child: Child, agents: &[u32]) -> (Vec<u16>, std::process::Output) {
    let mut seen = Vec::new();
    let mut child = child;
    while child.try_wait().expect("ffd run").is_none() {
        for a in agents {
            seen.extend(hostile::listening_ports(&a.to_string()));
        }
        thread::sleep(Duration::from_millis(20));
    }
    seen.sort_unstable();
    seen.dedup();
    (seen, child.wait_with_output().expect("ffd run ends"))
}

/// The run ended well: status 0, every rank alive, no false report.
fn ended_well(out: &std::process::Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
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
fn an_ffd_run_job_listens_on_no_tcp_port() {
    if !prerequisites("an_ffd_run_job_listens_on_no_tcp_port") {
        return;
    }
    let (child, agents) = start_job(&[], &[], false);
    let (ports, out) = ports_until_the_end(child, &agents);
    assert_eq!(ports, Vec::<u16>::new(), "the agents listen on TCP ports");
    ended_well(&out);
}

#[test]
fn with_a_shared_network_a_one_host_job_still_listens_on_no_tcp_port() {
    if !prerequisites("with_a_shared_network_a_one_host_job_still_listens_on_no_tcp_port") {
        return;
    }
    let (child, agents) = start_job(&["--shared-network"], &[], false);
    let (ports, out) = ports_until_the_end(child, &agents);
    assert_eq!(
        ports,
        Vec::<u16>::new(),
        "the agents of a one-host job listen on TCP ports of the host"
    );
    ended_well(&out);
}

/// A job run by a user who may not attach a socket filter
/// (`kernel.unprivileged_bpf_disabled` here, `nobody`): with the fabric its
/// ports would listen unfiltered, for anyone on the host to reach; a
/// one-host job has none, and the run ends with every rank alive.
#[test]
fn a_one_host_job_of_another_user_listens_on_no_tcp_port() {
    if !prerequisites("a_one_host_job_of_another_user_listens_on_no_tcp_port") {
        return;
    }
    // A copy `nobody` can run, whatever the target directory's modes.
    let dir = std::env::temp_dir().join(format!("ffd-strangers-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let ffd = dir.join("ffd");
    std::fs::copy(env!("CARGO_BIN_EXE_ffd"), &ffd).expect("copy ffd");
    for path in [&dir, &ffd] {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
    }
    let wrap = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    let tmp = std::env::temp_dir();
    let env = [("TMPDIR", tmp.to_str().expect("utf-8 temp dir"))];
    let (child, agents) = start_job_as(&wrap, &ffd, &["--shared-network"], &env, false);
    let (ports, out) = ports_until_the_end(child, &agents);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        ports,
        Vec::<u16>::new(),
        "the agents of another user's one-host job listen on TCP ports"
    );
    ended_well(&out);
}

#[test]
fn with_a_shared_network_another_user_reaches_the_port() {
    if !prerequisites("with_a_shared_network_another_user_reaches_the_port") {
        return;
    }
    // Without the host's mailboxes its ranks talk over the fabric, and
    // their port admits the host's address.
    let (mut child, agents) = start_job(&["--shared-network"], &[("FFD_LOCAL", "off")], true);
    let ports = hostile::listening_ports(&agents[0].to_string());
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
