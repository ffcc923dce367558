//! `ffd run --netns H` end to end: each emulated host a network and UTS
//! namespace with hostname `node<h>`, its ranks (r mod H = h) inside it
//! and talking over its link; and nothing of the job left once `ffd run`
//! has ended, whether the run completed, was interrupted by SIGINT, never
//! started, or the launcher was killed outright.
//!
//! "Nothing left": `ffd run -v` names each namespace it made as
//! `/proc/PID/ns/*` reads (`net:[INODE]`); after the launcher has exited no
//! process holds any of them (as its namespace or as an open descriptor),
//! nothing is named under `ip netns list`, and no link of the job is in this
//! namespace. The namespaces are anonymous, so with no holder the kernel
//! has freed them, and the veths and the bridge inside them.
//!
//! Needs root (or user namespaces) and iproute2: the prerequisite gate
//! skips it elsewhere, or fails it under `FFD_TEST_REQUIRE_ALL=1`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

// Its one-job lock and report checks; the launcher is driven here (for
// its lines while it runs), not through its run_job.
#[allow(dead_code)]
mod support;
use support::{ONE_JOB_AT_A_TIME, assert_all_learned, assert_no_false_reports, failure_of};

#[path = "../../tests/prereq/mod.rs"]
mod prereq;

fn can_run() -> bool {
    prereq::available(
        &prereq::this_test(),
        &[
            prereq::netns(),
            prereq::command("tc"),
            prereq::command("nsenter"),
        ],
    )
}

/// A line of `ffd run`, from stdout or stderr, as it came.
enum Out {
    Stdout(String),
    Stderr(String),
}

/// A running `ffd run`; killed and reaped on drop.
struct Launcher {
    child: Child,
    lines: mpsc::Receiver<Out>,
    seen: Vec<String>,
}

impl Launcher {
    fn start(args: &[&str]) -> Launcher {
        Launcher::start_as(None, args)
    }

    /// `ffd run ARGS`, as `user` (through `setpriv`) if given.
    fn start_as(user: Option<&str>, args: &[&str]) -> Launcher {
        let ffd = env!("CARGO_BIN_EXE_ffd");
        let mut command = match user {
            Some(user) => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid", user, "--regid", "nogroup", "--clear-groups", ffd]);
                c
            }
            None => Command::new(ffd),
        };
        let mut child = command
            .arg("run")
            .args(["--period", "10ms", "--timeout", "100ms", "-v"])
            .args(args)
            .env_remove("FFD_LOG")
            .env("FFD_STARTUP_GRACE", "300ms")
            .env("FFD_CORE", "none")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ffd run starts");
        let (tx, lines) = mpsc::channel();
        let pipe = |r: Box<dyn Read + Send>, wrap: fn(String) -> Out| {
            let tx = tx.clone();
            thread::spawn(move || {
                for line in BufReader::new(r).lines().map_while(Result::ok) {
                    let _ = tx.send(wrap(line));
                }
            });
        };
        pipe(Box::new(child.stdout.take().unwrap()), Out::Stdout);
        pipe(Box::new(child.stderr.take().unwrap()), Out::Stderr);
        Launcher {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    /// Reads lines until one on stdout contains `text`; panics after 90 s.
    fn wait_for(&mut self, text: &str) {
        self.wait_until(text, |l| l.iter().any(|l| l.contains(text)));
    }

    /// Reads lines until `done` holds of them all; panics after 90 s.
    fn wait_until(&mut self, what: &str, done: impl Fn(&[String]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(90);
        while !done(&self.seen) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(Out::Stdout(l) | Out::Stderr(l)) => self.seen.push(l),
                Err(_) => panic!("no {what} within 90 s:\n{}", self.seen.join("\n")),
            }
        }
    }

    /// Waits for the exit (within 90 s) and reads every line left.
    fn finish(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(90);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "ffd run still running after 90 s:\n{}",
                self.seen.join("\n")
            );
            if let Ok(Out::Stdout(l) | Out::Stderr(l)) =
                self.lines.recv_timeout(Duration::from_millis(50))
            {
                self.seen.push(l);
            }
        };
        // The pipes close with the launcher (its agents are gone too).
        while let Ok(Out::Stdout(l) | Out::Stderr(l)) =
            self.lines.recv_timeout(Duration::from_secs(10))
        {
            self.seen.push(l);
        }
        status
    }

    fn text(&self) -> String {
        self.seen.join("\n")
    }

    /// The namespaces `-v` announced: `node<h>` (and `switch`) → ids.
    fn namespaces(&self) -> BTreeMap<String, Vec<String>> {
        let mut out = BTreeMap::new();
        for l in &self.seen {
            let Some(rest) = l.strip_prefix("ffd run: ") else {
                continue;
            };
            let name = if let Some(r) = rest.strip_prefix("host ") {
                r.split(':').next().unwrap().to_owned()
            } else if rest.starts_with("switch: ") {
                "switch".to_owned()
            } else {
                continue;
            };
            let ids: Vec<String> = rest
                .split_whitespace()
                .filter(|w| w.starts_with("net:[") || w.starts_with("uts:["))
                .map(|w| w.trim_end_matches(';').to_owned())
                .collect();
            out.insert(name, ids);
        }
        out
    }

    /// `rank R ready (pid P` lines: rank → pid.
    fn ready_pids(&self) -> BTreeMap<u32, i32> {
        let mut out = BTreeMap::new();
        for l in &self.seen {
            let Some((_, rest)) = l.split_once("rank ") else {
                continue;
            };
            let Some((rank, rest)) = rest.split_once(" ready (pid ") else {
                continue;
            };
            let pid = rest.split([',', ')']).next().unwrap();
            if let (Ok(r), Ok(p)) = (rank.parse(), pid.parse()) {
                out.insert(r, p);
            }
        }
        out
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every `/proc/*/ns/*` and `/proc/*/fd/*` link that names one of `ids`.
fn holders(ids: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    for p in procs.flatten() {
        let dir = p.path();
        if !p
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        for sub in ["ns", "fd"] {
            let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
                continue;
            };
            for e in entries.flatten() {
                if let Ok(target) = std::fs::read_link(e.path()) {
                    let target = target.to_string_lossy().into_owned();
                    if ids.contains(&target) {
                        found.push(format!("{} -> {target}", e.path().display()));
                    }
                }
            }
        }
    }
    found
}

fn ip_out(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("ip runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Nothing of the job's namespaces, named or anonymous, is left.
fn assert_nothing_left(launcher: &Launcher, hosts: usize) {
    let named = launcher.namespaces();
    assert_eq!(
        named.len(),
        hosts + 1,
        "-v names the switch and every host:\n{}",
        launcher.text()
    );
    let ids: Vec<String> = named.values().flatten().cloned().collect();
    assert_eq!(ids.len(), 2 * hosts + 1, "{named:?}");
    // Freed asynchronously only in the kernel; the holders are gone at once.
    let held = holders(&ids);
    assert!(held.is_empty(), "still held after the job: {held:?}");
    let links = ip_out(&["-o", "link"]);
    for name in ["ffd-br", "ffd-h", "ffd0"] {
        assert!(!links.contains(name), "{name} in this namespace:\n{links}");
    }
    let netns = ip_out(&["netns", "list"]);
    assert!(!netns.contains("ffd"), "named namespaces: {netns}");
}

#[test]
fn hosts_are_namespaces_with_their_hostname_and_nothing_outlives_the_job() {
    if !can_run() || !prereq::available(&prereq::this_test(), &[prereq::pidfd()]) {
        return;
    }
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = std::env::temp_dir().join(format!("ffd-netns-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    // Three hosts: the two left hold a majority whatever the timing.
    let mut job = Launcher::start(&[
        "-n",
        "6",
        "--netns",
        "3",
        "--kill-host",
        "1@3s",
        "--duration",
        "4s",
        "--json",
        json.to_str().unwrap(),
    ]);
    job.wait_for("hosts (namespaces): node0: ranks 0, 3; node1: ranks 1, 4; node2: ranks 2, 5");
    // The ready lines come right after; every agent still runs until 3 s.
    job.wait_until("6 ready lines", |l| {
        l.iter().filter(|l| l.contains(" ready (pid ")).count() == 6
    });
    let named = job.namespaces();
    let pids = job.ready_pids();
    assert_eq!(pids.len(), 6, "{}", job.text());
    for (&rank, &pid) in &pids {
        let host = format!("node{}", rank % 3);
        let ns = |kind: &str| {
            std::fs::read_link(format!("/proc/{pid}/ns/{kind}"))
                .unwrap()
                .to_string_lossy()
                .into_owned()
        };
        assert_eq!(
            named[&host],
            [ns("net"), ns("uts")],
            "rank {rank} runs in {host}'s namespaces"
        );
        let hostname = Command::new("nsenter")
            .arg(format!("--uts=/proc/{pid}/ns/uts"))
            .arg("hostname")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&hostname.stdout).trim(), host);
    }
    assert_ne!(named["node0"], named["node1"]);
    assert_ne!(named["node1"], named["node2"]);
    // The check below sees the namespaces while they are held.
    let ids: Vec<String> = named.values().flatten().cloned().collect();
    assert!(holders(&ids).len() >= ids.len(), "{:?}", holders(&ids));
    let status = job.finish();
    assert!(status.success(), "{status}:\n{}", job.text());
    assert_nothing_left(&job, 3);

    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_no_false_reports(&report);
    for rank in [1, 4] {
        assert_eq!(failure_of(&report, rank)["fault"], "kill");
        assert_all_learned(&report, rank, &[0, 2, 3, 5]);
    }
    // The ranks talked over their host's link, not loopback, and each
    // watched its one host-mate (same hostname), nobody of another host.
    for rank in ["0", "2", "3", "5"] {
        let stats = &report["stats"][rank];
        assert_eq!(stats["domain"], "ffd0", "{report:#}");
        assert_eq!(stats["runtime"]["local"]["pidfds"], 1, "{stats:#}");
    }
}

#[test]
fn a_cut_host_is_found_by_its_silence_and_the_job_heals_and_ends_clean() {
    if !can_run() {
        return;
    }
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = std::env::temp_dir().join(format!("ffd-netns-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let mut job = Launcher::start(&[
        "-n",
        "6",
        "--netns",
        "3",
        "--cut-host",
        "1@1s",
        "--heal-host",
        "1@2s",
        "--duration",
        "3s",
        "--json",
        json.to_str().unwrap(),
    ]);
    let status = job.finish();
    assert!(status.success(), "{status}:\n{}", job.text());
    assert_nothing_left(&job, 3);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_no_false_reports(&report);
    for rank in [1, 4] {
        let f = failure_of(&report, rank);
        assert_eq!(f["fault"], "cut", "{f:#}");
        // No reset, no error completion: only the silence finds it.
        assert_eq!(f["cause"], "timeout", "{f:#}");
        assert_all_learned(&report, rank, &[0, 2, 3, 5]);
    }
    // Host 1 is the minority side: it stops.
    assert_eq!(report["self_excluded"], serde_json::json!([1, 4]));
}

#[test]
fn an_interrupted_job_leaves_nothing_behind() {
    if !can_run() {
        return;
    }
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut job = Launcher::start(&["-n", "4", "--netns", "2", "--duration", "60s"]);
    job.wait_for("all 4 ranks ready");
    kill(job.pid(), Signal::SIGINT).unwrap();
    let status = job.finish();
    assert_eq!(status.code(), Some(128 + 2), "{}", job.text());
    assert!(
        job.text().contains("interrupted by SIGINT"),
        "{}",
        job.text()
    );
    assert_nothing_left(&job, 2);
}

#[test]
fn a_failed_start_leaves_nothing_behind() {
    if !can_run() {
        return;
    }
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // Every agent refuses the option and exits before it is ready.
    let mut job = Launcher::start(&["-n", "4", "--netns", "2", "--", "--no-such-option"]);
    let status = job.finish();
    assert_eq!(status.code(), Some(1), "{}", job.text());
    assert!(job.text().contains("before it was ready"), "{}", job.text());
    assert_nothing_left(&job, 2);
}

/// Without root: `ffd run` makes a user namespace for itself, the hosts'
/// namespaces inside it, and `ip` keeps `CAP_NET_ADMIN` there; the job
/// runs as it does for root, and leaves nothing.
#[test]
fn a_user_without_root_gets_the_same_hosts_through_user_namespaces() {
    if !can_run()
        || !prereq::available(
            &prereq::this_test(),
            &[prereq::command("setpriv"), unprivileged_user_namespaces()],
        )
    {
        return;
    }
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut job = Launcher::start_as(
        Some("nobody"),
        &[
            "-n",
            "4",
            "--netns",
            "2",
            "--kill",
            "1@1s",
            "--duration",
            "2s",
        ],
    );
    let status = job.finish();
    assert!(status.success(), "{status}:\n{}", job.text());
    let text = job.text();
    assert!(
        text.contains("hosts (namespaces): node0: ranks 0, 2; node1: ranks 1, 3"),
        "{text}"
    );
    assert!(
        text.contains("view 1: rank 1 out (raised by 3 ranks, identical)"),
        "{text}"
    );
    assert!(text.contains("false reports: none"), "{text}");
    assert_nothing_left(&job, 2);
}

/// `nobody` may make a user namespace here (`unshare --user` as nobody).
fn unprivileged_user_namespaces() -> Result<(), String> {
    let ok = Command::new("setpriv")
        .args(["--reuid", "nobody", "--regid", "nogroup", "--clear-groups"])
        .args(["unshare", "--user", "--net", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err("an unprivileged user cannot make a user namespace here".into())
    }
}

/// Even SIGKILL, which no clean-up survives: the agents leave on the end
/// of their stdin, and with the last process gone the kernel frees the
/// anonymous namespaces.
#[test]
fn a_killed_launcher_leaves_nothing_once_its_agents_have_left() {
    if !can_run() {
        return;
    }
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut job = Launcher::start(&["-n", "4", "--netns", "2", "--duration", "60s"]);
    job.wait_for("all 4 ranks ready");
    let ids: Vec<String> = job.namespaces().values().flatten().cloned().collect();
    assert_eq!(ids.len(), 5, "{}", job.text());
    kill(job.pid(), Signal::SIGKILL).unwrap();
    let status = job.finish();
    assert_eq!(status.signal(), Some(9));
    // The agents' exit is theirs to make: poll for it, within a bound
    // far above their shutdown (a leave and an exit).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !holders(&ids).is_empty() {
        assert!(
            Instant::now() < deadline,
            "still held 30 s after the launcher died: {:?}",
            holders(&ids)
        );
        thread::sleep(Duration::from_millis(100));
    }
}
