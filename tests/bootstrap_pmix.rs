//! The PMIx bootstrap under the real launcher: Open MPI's `mpirun` starts
//! `examples/pmix_allgather` on 4 ranks, and this test checks what every
//! rank received against contributions it computes itself.
//!
//! The example is built by this test with the same cargo, features and
//! profile (`cargo build --example pmix_allgather`), so it is never stale.
//! Every child is bounded: `mpirun` gets SIGTERM (it ends its ranks), then
//! SIGKILL, if it outlives the bound or the test fails, and is always reaped.

#![cfg(feature = "pmix")]

mod prereq;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

const RANKS: u32 = 4;
const ROUNDS: u32 = 2;
/// Bound on one `mpirun` job (they take about a second here).
const JOB_BOUND: Duration = Duration::from_secs(60);
/// Bound on building the example (a link when the library is already built).
const BUILD_BOUND: Duration = Duration::from_secs(600);

/// What rank `rank` contributes to round `round`: the formula of
/// `examples/pmix_allgather.rs`, restated so the test does not trust it.
fn contribution(rank: u32, round: u32) -> Vec<u8> {
    let len = (rank * 5 + round * 3) as usize;
    (0..len)
        .map(|i| (rank * 31 + round * 7 + i as u32) as u8)
        .collect()
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A child process we started: its output arrives line by line on a
/// channel, a thread waits for it, and dropping the guard before it has
/// exited ends it (SIGTERM, then SIGKILL) and reaps it.
struct Job {
    pid: u32,
    what: String,
    lines: Receiver<String>,
    stderr: Receiver<String>,
    exited: Receiver<std::io::Result<ExitStatus>>,
    status: Option<ExitStatus>,
    stdin: Option<ChildStdin>,
}

impl Job {
    fn start(mut cmd: Command, what: &str) -> Job {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let pid = child.id();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let (line_tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (err_tx, stderr_rx) = mpsc::channel();
        thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            let _ = err_tx.send(text);
        });
        let (exit_tx, exited) = mpsc::channel();
        thread::spawn(move || {
            let _ = exit_tx.send(child.wait());
        });
        Job {
            pid,
            what: what.to_owned(),
            lines,
            stderr: stderr_rx,
            exited,
            status: None,
            stdin,
        }
    }

    /// The next line of standard output before `deadline`, or `None` at its end.
    fn next_line(&self, deadline: Instant) -> Option<String> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(left) {
            Ok(line) => Some(line),
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => {
                panic!("{} printed nothing more within its bound", self.what)
            }
        }
    }

    /// Closes the child's standard input.
    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Every remaining line, the exit status and standard error, all
    /// before `deadline` (or the test fails, and drop ends the child).
    fn finish(&mut self, deadline: Instant) -> (Vec<String>, ExitStatus, String) {
        let mut lines = Vec::new();
        while let Some(line) = self.next_line(deadline) {
            lines.push(line);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let status = match self.exited.recv_timeout(left) {
            Ok(status) => status.unwrap_or_else(|e| panic!("waiting for {}: {e}", self.what)),
            Err(_) => panic!("{} did not exit within its bound", self.what),
        };
        self.status = Some(status);
        let left = deadline.saturating_duration_since(Instant::now());
        let stderr = self.stderr.recv_timeout(left).unwrap_or_default();
        (lines, status, stderr)
    }

    fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([signal, &self.pid.to_string()])
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        self.stdin = None;
        if self.status.is_some() {
            return;
        }
        // Still running (a failed assertion, or a hang): mpirun forwards
        // SIGTERM to its ranks and exits; SIGKILL if it does not.
        for (signal, grace) in [("-TERM", 10), ("-KILL", 10)] {
            if let Ok(status) = self.exited.try_recv() {
                self.status = status.ok();
                return;
            }
            self.signal(signal);
            if let Ok(status) = self.exited.recv_timeout(Duration::from_secs(grace)) {
                self.status = status.ok();
                return;
            }
        }
        eprintln!("{} (pid {}) survived SIGKILL", self.what, self.pid);
    }
}

/// The example, built once per test process by the cargo that runs us.
fn example() -> &'static PathBuf {
    static EXAMPLE: OnceLock<PathBuf> = OnceLock::new();
    EXAMPLE.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(env!("CARGO_MANIFEST_DIR")).args([
            "build",
            "--example",
            "pmix_allgather",
            "--features",
            "pmix",
            "--message-format",
            "json-render-diagnostics",
        ]);
        if !cfg!(debug_assertions) {
            cmd.arg("--release");
        }
        let mut build = Job::start(cmd, "cargo build --example pmix_allgather");
        build.close_stdin();
        let (lines, status, stderr) = build.finish(Instant::now() + BUILD_BOUND);
        assert!(status.success(), "building the example failed:\n{stderr}");
        lines
            .iter()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|msg| msg["reason"] == "compiler-artifact")
            .filter(|msg| msg["target"]["name"] == "pmix_allgather")
            .find_map(|msg| msg["executable"].as_str().map(PathBuf::from))
            .expect("cargo reports the example's executable")
    })
}

/// A directory of our own for one `mpirun`'s session files, removed on drop.
///
/// Two `mpirun`s started at the same moment with the default session
/// directory race to create `/tmp/ompi.<host>.<uid>` and the loser fails
/// (`mkdir ... File exists`, orte_session_dir failed; seen here when the
/// tests of this file ran in parallel).
struct SessionDir(PathBuf);

impl SessionDir {
    fn new() -> SessionDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ffd-pmix-test.{}.{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create the session directory");
        SessionDir(dir)
    }
}

impl Drop for SessionDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `mpirun` for `RANKS` ranks of the example on this machine only, with its
/// session files under `session`.
fn mpirun(session: &SessionDir, extra: &[&str], args: &[&str], timeout: &str) -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.args(["--allow-run-as-root", "--oversubscribe"])
        .args(["--mca", "orte_tmpdir_base"])
        .arg(&session.0)
        .args(["-x", "FFD_BOOTSTRAP_TIMEOUT"])
        .args(extra)
        .args(["-np", &RANKS.to_string()])
        .arg(example())
        .args(args)
        .env("FFD_BOOTSTRAP_TIMEOUT", timeout);
    cmd
}

#[test]
fn every_rank_gathers_every_contribution_under_mpirun() {
    if !prereq::available(
        "every_rank_gathers_every_contribution_under_mpirun",
        &[prereq::mpirun()],
    ) {
        return;
    }
    let start = Instant::now();
    // --nested: round 0 runs on a second PmixBootstrap that is finalized
    // before round 1 runs on the first, so round 1 also checks that
    // PMIx_Init/PMIx_Finalize are reference counted.
    let session = SessionDir::new();
    let mut job = Job::start(mpirun(&session, &[], &["--nested"], "20s"), "mpirun");
    job.close_stdin();
    let (lines, status, stderr) = job.finish(start + JOB_BOUND);
    let output = format!("stdout:\n{}\nstderr:\n{stderr}", lines.join("\n"));
    assert!(status.success(), "mpirun: {status}\n{output}");

    let expected: Vec<String> = (0..ROUNDS)
        .map(|round| {
            (0..RANKS)
                .map(|rank| {
                    let c = contribution(rank, round);
                    format!("{}:{:016x}", c.len(), fnv1a(&c))
                })
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    let mut seen = BTreeMap::new();
    for line in &lines {
        let fields: BTreeMap<&str, &str> = line
            .split_whitespace()
            .filter_map(|f| f.split_once('='))
            .collect();
        let (Some(rank), Some(size), Some(round), Some(got)) = (
            fields.get("rank"),
            fields.get("size"),
            fields.get("round"),
            fields.get("got"),
        ) else {
            panic!("unexpected line `{line}`\n{output}");
        };
        assert_eq!(*size, RANKS.to_string(), "`{line}`");
        let (rank, round): (u32, u32) = (rank.parse().unwrap(), round.parse().unwrap());
        assert!(rank < RANKS && round < ROUNDS, "`{line}`");
        assert_eq!(*got, expected[round as usize], "rank {rank} round {round}");
        assert!(seen.insert((rank, round), ()).is_none(), "twice: `{line}`");
    }
    assert_eq!(
        seen.len(),
        (RANKS * ROUNDS) as usize,
        "one line per rank and round\n{output}"
    );
    eprintln!("4-rank PMIx job: {:?}", start.elapsed());
}

#[test]
fn a_rank_that_never_reaches_the_fence_times_the_round_out() {
    if !prereq::available(
        "a_rank_that_never_reaches_the_fence_times_the_round_out",
        &[prereq::mpirun()],
    ) {
        return;
    }
    let start = Instant::now();
    let absent = RANKS - 1;
    // The absent rank reads its standard input (mpirun --stdin) until we
    // close it, which we do once every other rank has reported.
    let session = SessionDir::new();
    let mut job = Job::start(
        mpirun(
            &session,
            &["--stdin", &absent.to_string()],
            &["--absent", &absent.to_string()],
            "2s",
        ),
        "mpirun",
    );
    let deadline = start + JOB_BOUND;
    let mut errors = BTreeMap::new();
    let mut others = Vec::new();
    while errors.len() < absent as usize {
        let Some(line) = job.next_line(deadline) else {
            panic!("mpirun ended early: {others:?} {errors:?}");
        };
        match line
            .strip_prefix("rank=")
            .and_then(|rest| rest.split_once(" error after="))
        {
            Some((rank, rest)) => {
                let (ms, text) = rest.split_once(" ms: ").expect("`N ms: text`");
                errors.insert(
                    rank.parse::<u32>().unwrap(),
                    (ms.parse::<u64>().unwrap(), text.to_owned()),
                );
            }
            None => others.push(line),
        }
    }
    job.close_stdin();
    let (rest, status, stderr) = job.finish(deadline);
    others.extend(rest);
    assert!(status.success(), "mpirun: {status}\n{others:?}\n{stderr}");
    assert_eq!(others, [format!("rank={absent} absent")], "{stderr}");
    for rank in 0..absent {
        let (ms, text) = &errors[&rank];
        assert!(
            text.starts_with("timed out after 2s waiting for every rank of namespace")
                && text.contains("PMIx_Fence for `ffd.0`"),
            "rank {rank}: {text}"
        );
        // PMIx's timer, not ours, ended the wait: about 2 s, never hours.
        assert!((1500..15_000).contains(ms), "rank {rank} waited {ms} ms");
    }
    eprintln!("fence timeout job: {:?}", start.elapsed());
}

/// The example with every `PMIX_*` variable removed, plus `vars`.
fn outside_mpirun(vars: &[(&str, &str)]) -> (Vec<String>, ExitStatus, String) {
    let mut cmd = Command::new(example());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("PMIX_") {
            cmd.env_remove(name);
        }
    }
    cmd.envs(vars.iter().copied());
    let mut job = Job::start(cmd, "pmix_allgather outside mpirun");
    job.close_stdin();
    job.finish(Instant::now() + JOB_BOUND)
}

#[test]
fn init_outside_a_pmix_launch_is_a_clear_error() {
    let (lines, status, stderr) = outside_mpirun(&[]);
    assert_eq!(status.code(), Some(2), "{lines:?} {stderr}");
    assert_eq!(lines, ["available=false"]);
    assert!(
        stderr.contains(
            "the PMIx bootstrap cannot be used here: PMIX_NAMESPACE and PMIX_RANK not set"
        ),
        "{stderr}"
    );

    // Launch variables without a server behind them (a stale environment):
    // PMIx_Init fails at once, and the error names it.
    let (lines, status, stderr) =
        outside_mpirun(&[("PMIX_NAMESPACE", "ffd-test"), ("PMIX_RANK", "0")]);
    assert_eq!(status.code(), Some(2), "{lines:?} {stderr}");
    assert_eq!(lines, ["available=true"]);
    assert!(
        stderr.contains("PMIx_Init failed connecting to the launcher's PMIx server: UNREACHABLE"),
        "{stderr}"
    );
}
