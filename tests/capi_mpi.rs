//! The embedding case end to end: `examples/c/mpi_detect.c` and
//! `examples/c/mpi_agree.c` (the second section below), built with
//! `mpicc` against `ffd.pc`, runs as a 6-rank Open MPI job
//! (`mpirun --enable-recovery`); rank 3 raises SIGKILL at a time all ranks
//! agreed on, and every survivor's ffd must report it within timeout + 1 s,
//! then print its counters, finalize ffd and exit. Once with MPI_Allgather
//! as ffd's out-of-band collective, once (feature `pmix`) with no
//! collective, through the launcher's PMIx server.
//!
//! What Open MPI 4.1.4 does here (checked by hand with a plain MPI program
//! and by these tests): with `--enable-recovery` mpirun keeps the other
//! ranks running after one is killed, tells them nothing (no PMIx event),
//! and exits 0 once the survivors have exited, even when a survivor exits
//! non-zero; it prints one "PMIX ERROR: BAD-PARAM ... pmix_event_notification.c"
//! line per rank that exits without MPI_Finalize. Without the flag it kills
//! the job and exits 137. MPI_Finalize with a dead peer hung in about one
//! run in six, so the example skips it (`_exit` after `ffd_finalize`). So
//! the job's survival is judged from the ranks' own lines, not from
//! mpirun's exit status (which is asserted to be 0 all the same).
//!
//! Traffic stays on loopback: `FFD_DOMAIN=lo` for ffd, the shared-memory
//! BTL for MPI, and mpirun's own sockets on `lo`. The two jobs run one at a
//! time (a mutex): 2 cores, 12 ranks at once would only measure contention.

mod capi_support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use capi_support::{Child, clean_command, compile_c};

const RANKS: u32 = 6;
const VICTIM: u32 = 3;
const PERIOD: &str = "50ms";
const TIMEOUT_MS: f64 = 1000.0;
/// Bound on one job (about 5 s here).
const JOB_BOUND: Duration = Duration::from_secs(120);

static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

fn example() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile_c("mpicc", "examples/c/mpi_detect.c", "ffd", "mpi_detect"))
}

fn agree_example() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile_c("mpicc", "examples/c/mpi_agree.c", "ffd", "mpi_agree"))
}

/// `mpirun` for a 6-rank job of `exe` on loopback, with its own session
/// directory.
fn mpirun(exe: &PathBuf, session: &SessionDir) -> std::process::Command {
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
    .args(["--mca", "oob_tcp_if_include", "lo"])
    .args([
        "-x",
        "FFD_DOMAIN",
        "-x",
        "FFD_CORE",
        "-x",
        "FFD_PERIOD",
        "-x",
        "FFD_TIMEOUT",
    ])
    .args(["-np", &RANKS.to_string()])
    .arg(exe)
    .args(["--victim", &VICTIM.to_string()])
    .env("FFD_DOMAIN", "lo")
    .env("FFD_CORE", "none")
    .env("FFD_PERIOD", PERIOD)
    .env("FFD_TIMEOUT", format!("{TIMEOUT_MS}ms"));
    cmd
}

/// A directory of our own for one mpirun's session files, removed on drop:
/// concurrent mpiruns race to create the default `/tmp/ompi.<host>.<uid>`.
struct SessionDir(PathBuf);

impl SessionDir {
    fn new(name: &str) -> SessionDir {
        let dir = std::env::temp_dir().join(format!("ffd-capi-mpi.{}.{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the session directory");
        SessionDir(dir)
    }
}

impl Drop for SessionDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One survivor's report of the victim.
#[derive(Debug)]
struct Report {
    cause: String,
    detector: u32,
    ms_after_kill: f64,
}

/// Runs the job and checks everything about it; returns the reports.
fn job(args: &[&str], oob: &str) -> BTreeMap<u32, Report> {
    let _serial = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let session = SessionDir::new(oob);
    let mut cmd = mpirun(example(), &session);
    cmd.args(args);
    let start = Instant::now();
    let out = Child::start(cmd, "mpirun mpi_detect").finish(JOB_BOUND);
    let text = out.text();
    eprintln!("{oob} job: {:?}\n{}", start.elapsed(), out.stdout);

    let mut up = Vec::new();
    let mut reports = BTreeMap::new();
    let mut stats = Vec::new();
    let mut finalized = Vec::new();
    let mut killed = false;
    for line in out.stdout.lines() {
        let (rank, rest) = line
            .strip_prefix("rank ")
            .and_then(|l| l.split_once(": "))
            .unwrap_or_else(|| panic!("unexpected line `{line}`\n{text}"));
        let rank: u32 = rank.parse().unwrap_or_else(|_| panic!("`{line}`"));
        if rank == VICTIM && killed {
            panic!("the victim printed after raising SIGKILL: `{line}`\n{text}");
        }
        if rest == format!("ffd up, {RANKS} ranks, oob {oob}") {
            up.push(rank);
        } else if rest.starts_with("raising SIGKILL") {
            assert_eq!(rank, VICTIM, "`{line}`");
            killed = true;
        } else if let Some(report) = rest.strip_prefix(&format!("rank {VICTIM} failed: ")) {
            // cause C, declared by rank D, H hops, epoch E, T ms after the kill
            let fields: Vec<&str> = report.split(", ").collect();
            let [cause, declared, _hops, epoch, after] = fields[..] else {
                panic!("`{line}`\n{text}");
            };
            let cause = cause.strip_prefix("cause ").expect("cause").to_owned();
            assert!(
                ["inband", "timeout", "notice"].contains(&cause.as_str()),
                "`{line}`"
            );
            assert_eq!(
                epoch, "epoch 1",
                "the victim is the only failure: `{line}`\n{text}"
            );
            let detector = declared
                .strip_prefix("declared by rank ")
                .and_then(|d| d.parse().ok())
                .unwrap_or_else(|| panic!("`{line}`"));
            let ms_after_kill: f64 = after
                .strip_suffix(" ms after the kill")
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("`{line}`"));
            let report = Report {
                cause,
                detector,
                ms_after_kill,
            };
            assert!(reports.insert(rank, report).is_none(), "twice: `{line}`");
        } else if rest.starts_with("stats: epoch 1,") {
            stats.push(rank);
        } else if rest == "finalized ffd (success), exiting" {
            finalized.push(rank);
        } else {
            // Another rank reported failed, a missed report, an error.
            panic!("unexpected line `{line}`\n{text}");
        }
    }
    up.sort_unstable();
    stats.sort_unstable();
    finalized.sort_unstable();
    let survivors: Vec<u32> = (0..RANKS).filter(|&r| r != VICTIM).collect();
    assert_eq!(
        up,
        (0..RANKS).collect::<Vec<_>>(),
        "every rank started ffd\n{text}"
    );
    assert!(killed, "the victim raised SIGKILL\n{text}");
    assert_eq!(
        reports.keys().copied().collect::<Vec<_>>(),
        survivors,
        "{text}"
    );
    for (rank, report) in &reports {
        assert!(
            (0.0..=TIMEOUT_MS + 1000.0).contains(&report.ms_after_kill),
            "rank {rank} learned of the kill {} ms after it (timeout {TIMEOUT_MS} ms)\n{text}",
            report.ms_after_kill
        );
        assert!(
            survivors.contains(&report.detector),
            "rank {rank}: declared by {}\n{text}",
            report.detector
        );
    }
    // The job survived: every survivor went on to print and finalize.
    assert_eq!(stats, survivors, "{text}");
    assert_eq!(finalized, survivors, "{text}");
    assert_eq!(out.status.code(), Some(0), "mpirun's exit status\n{text}");
    reports
}

fn summary(reports: &BTreeMap<u32, Report>) -> String {
    reports
        .iter()
        .map(|(r, rep)| format!("rank {r}: {:.1} ms ({})", rep.ms_after_kill, rep.cause))
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn every_survivor_of_an_mpi_job_learns_of_a_killed_rank_through_mpi_allgather() {
    let reports = job(&[], "mpi");
    eprintln!("MPI_Allgather bootstrap: {}", summary(&reports));
}

#[cfg(feature = "pmix")]
#[test]
fn every_survivor_of_an_mpi_job_learns_of_a_killed_rank_through_pmix() {
    let reports = job(&["--pmix"], "pmix");
    eprintln!("PMIx bootstrap: {}", summary(&reports));
}

/// `examples/c/mpi_agree.c`: six ranks sum with `MPI_Iallreduce` in a
/// loop; rank 3 raises SIGKILL; each survivor leaves the loop once ffd
/// reports the failure, calls `ffd_agree`, and prints the decision and then
/// the view naming the victim. Every survivor must print the same
/// decision: the flags with exactly the survivors' bits cleared (rank r
/// clears bit r), and the failed set `[3]`; and the same view.
#[test]
fn the_survivors_of_a_kill_agree_on_the_failed_set_through_ffd_agree() {
    let _serial = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let session = SessionDir::new("agree");
    let cmd = mpirun(agree_example(), &session);
    let start = Instant::now();
    let out = Child::start(cmd, "mpirun mpi_agree").finish(JOB_BOUND);
    let text = out.text();
    eprintln!("agree job: {:?}\n{}", start.elapsed(), out.stdout);
    let survivors: Vec<u32> = (0..RANKS).filter(|&r| r != VICTIM).collect();
    let mut up = Vec::new();
    let mut left_loop = Vec::new();
    let mut agreed: BTreeMap<u32, String> = BTreeMap::new();
    let mut views: BTreeMap<u32, String> = BTreeMap::new();
    let mut finalized = Vec::new();
    let mut killed = false;
    for line in out.stdout.lines() {
        let (rank, rest) = line
            .strip_prefix("rank ")
            .and_then(|l| l.split_once(": "))
            .unwrap_or_else(|| panic!("unexpected line `{line}`\n{text}"));
        let rank: u32 = rank.parse().unwrap_or_else(|_| panic!("`{line}`"));
        if rest == format!("ffd up, {RANKS} ranks") {
            up.push(rank);
        } else if rest.starts_with("raising SIGKILL after ") {
            assert_eq!(rank, VICTIM, "`{line}`");
            killed = true;
        } else if rest.starts_with("left the allreduce loop after ") {
            assert!(
                rest.ends_with(&format!("rank {VICTIM} failed (epoch 1)")),
                "`{line}`\n{text}"
            );
            left_loop.push(rank);
        } else if let Some(decision) = rest.strip_prefix("agreed: ") {
            assert!(
                agreed.insert(rank, decision.to_owned()).is_none(),
                "`{line}`"
            );
        } else if rest.starts_with("view ") {
            assert!(views.insert(rank, rest.to_owned()).is_none(), "`{line}`");
        } else if rest == "finalized ffd (success), exiting" {
            finalized.push(rank);
        } else {
            panic!("unexpected line `{line}`\n{text}");
        }
    }
    up.sort_unstable();
    left_loop.sort_unstable();
    finalized.sort_unstable();
    assert_eq!(up, (0..RANKS).collect::<Vec<_>>(), "{text}");
    assert!(killed, "the victim raised SIGKILL\n{text}");
    assert_eq!(left_loop, survivors, "{text}");
    assert_eq!(
        agreed.keys().copied().collect::<Vec<_>>(),
        survivors,
        "{text}"
    );
    // Every survivor the same decision: the flags of the survivors' AND
    // (each cleared its own bit; the victim's stays set) and [3].
    let cleared = survivors.iter().fold(0u64, |a, &r| a | (1 << r));
    let flags = format!("flags {:#x}", !cleared);
    let first = agreed.values().next().unwrap().clone();
    assert!(
        first.starts_with(&flags) && first.ends_with(&format!("failed [{VICTIM}]")),
        "`{first}`, want {flags} and failed [{VICTIM}]\n{text}"
    );
    for (rank, decision) in &agreed {
        assert_eq!(*decision, first, "rank {rank} decided otherwise\n{text}");
    }
    assert_eq!(
        views.keys().copied().collect::<Vec<_>>(),
        survivors,
        "{text}"
    );
    for (rank, view) in &views {
        assert_eq!(
            *view,
            format!("view 1: failed [{VICTIM}]"),
            "rank {rank}\n{text}"
        );
    }
    assert_eq!(finalized, survivors, "{text}");
    assert_eq!(out.status.code(), Some(0), "mpirun's exit status\n{text}");
}
