//! The detection jobs of the embedding tests, `examples/c/mpi_detect.c`
//! (`tests/capi_mpi.rs`, `capi_ompi5.rs`, `capi_mpich.rs`, through
//! [`super::mpi`]) and `examples/c/shmem_detect.c` (`tests/capi_shmem.rs`):
//! the settings every process gets, and the one parser of their lines with
//! the checks both jobs must pass. The two examples print the same lines
//! but for the word naming a process (`rank`, `PE`) and the kill line (in
//! an MPI_Allreduce round, or at a planned time); a [`Job`] says which.
//!
//! What a passing job shows, from the processes' own lines (launchers
//! differ in what they print and in their exit status, which each test
//! states): every process started ffd and loaded exactly one libfabric, the
//! expected file; the victim raised SIGKILL and printed nothing after it;
//! every survivor reported the victim, as the only failure (epoch 1),
//! declared by a survivor, no earlier than the kill and within timeout +
//! 1 s of it, and went on to print its counters and finalize ffd. With
//! `FFD_LOG=info`, ffd's start-up line naming both libfabric versions
//! appears for every process exactly when the loaded libfabric is not the
//! one of ffd's headers. In the allreduce form, the survivors had completed
//! within two rounds of the victim's and left the loop on ffd's report.
//!
//! This module starts no process and knows no launcher.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Output;

pub const PERIOD: &str = "50ms";
pub const TIMEOUT_MS: f64 = 1000.0;
/// Bound on one job (about 5 s here).
pub const JOB_BOUND: Duration = Duration::from_secs(120);

/// The `FFD_*` variables every process needs, for the launcher to pass on.
pub fn ffd_settings() -> Vec<(&'static str, String)> {
    vec![
        ("FFD_DOMAIN", "lo".to_owned()),
        ("FFD_CORE", "none".to_owned()),
        ("FFD_PERIOD", PERIOD.to_owned()),
        ("FFD_TIMEOUT", format!("{TIMEOUT_MS}ms")),
        ("FFD_LOG", "info".to_owned()),
    ]
}

/// The libfabric this test binary runs on: Debian's, for Debian's own MPI.
pub fn system_libfabric() -> PathBuf {
    let v = ffd::fabric::FabricVersions::of_this_process();
    PathBuf::from(v.path.expect("dladdr finds libfabric"))
}

pub fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// How the victim announces its SIGKILL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillLine {
    /// `raising SIGKILL in MPI_Allreduce round K (L ms after the planned
    /// time)`, and every survivor prints `left MPI_Allreduce after K
    /// rounds: ffd reported a failure (T ms after the kill)`.
    InAllreduceRound,
    /// `raising SIGKILL (L ms after the planned time)`.
    AtPlannedTime,
}

/// What one job must show.
pub struct Job<'a> {
    /// The word naming a process: `rank` or `PE` (its plural adds an s).
    pub word: &'a str,
    pub size: u32,
    pub victim: u32,
    /// The out-of-band path each process names: `mpi`, `pmix`, `shmem`.
    pub oob: &'a str,
    pub kill: KillLine,
    /// The libfabric file every process must have loaded (compared
    /// canonically).
    pub libfabric: &'a Path,
    /// The launcher's exit status, when it is meaningful.
    pub exit_code: Option<i32>,
}

/// One survivor's report of the victim: `cause C, declared by WORD D, H
/// hops, epoch 1, T ms after the kill` (T from the planned kill time).
#[derive(Debug, PartialEq)]
pub struct Report {
    pub cause: String,
    pub detector: u32,
    pub hops: u32,
    pub ms_after_kill: f64,
}

/// The victim's kill line.
#[derive(Debug, PartialEq)]
pub struct Kill {
    /// The MPI_Allreduce round it died in ([`KillLine::InAllreduceRound`]).
    pub round: Option<u64>,
    /// How late after the planned time it raised SIGKILL.
    pub late_ms: f64,
}

/// A job that passed every check.
#[derive(Debug)]
pub struct Checked {
    pub reports: BTreeMap<u32, Report>,
    pub kill: Kill,
}

/// `cause C, declared by WORD D, H hops, epoch 1, T ms after the kill`.
fn parse_report(job: &Job<'_>, report: &str, line: &str, text: &str) -> Report {
    let fields: Vec<&str> = report.split(", ").collect();
    let [cause, declared, hops, epoch, after] = fields[..] else {
        panic!("`{line}`\n{text}");
    };
    let cause = cause
        .strip_prefix("cause ")
        .unwrap_or_else(|| panic!("cause: `{line}`"))
        .to_owned();
    assert!(
        ["inband", "timeout", "notice", "exited"].contains(&cause.as_str()),
        "`{line}`"
    );
    assert_eq!(
        epoch, "epoch 1",
        "the victim is the only failure: `{line}`\n{text}"
    );
    fn number<'f>(field: &'f str, prefix: &str, suffix: &str) -> Option<&'f str> {
        field.strip_prefix(prefix)?.strip_suffix(suffix)
    }
    let declared_by = format!("declared by {} ", job.word);
    Report {
        cause,
        detector: number(declared, &declared_by, "")
            .and_then(|d| d.parse().ok())
            .unwrap_or_else(|| panic!("detector: `{line}`")),
        hops: number(hops, "", " hops")
            .and_then(|h| h.parse().ok())
            .unwrap_or_else(|| panic!("hops: `{line}`")),
        ms_after_kill: number(after, "", " ms after the kill")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("time: `{line}`")),
    }
}

/// `[in MPI_Allreduce round K ](L ms after the planned time)`, the rest of
/// the kill line after `raising SIGKILL `.
fn parse_kill(job: &Job<'_>, rest: &str, line: &str) -> Kill {
    let (round, late) = match job.kill {
        KillLine::InAllreduceRound => {
            let (round, late) = rest
                .strip_prefix("in MPI_Allreduce round ")
                .and_then(|r| r.split_once(' '))
                .unwrap_or_else(|| panic!("`{line}`"));
            let round: u64 = round.parse().unwrap_or_else(|_| panic!("`{line}`"));
            (Some(round), late)
        }
        KillLine::AtPlannedTime => (None, rest),
    };
    let late_ms = late
        .strip_prefix('(')
        .and_then(|l| l.strip_suffix(" ms after the planned time)"))
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("`{line}`"));
    Kill { round, late_ms }
}

/// Checks everything about a finished job (see the module's comment).
pub fn check_job(out: &Output, job: &Job<'_>) -> Checked {
    let text = out.text();
    let word = job.word;
    let victim = job.victim;
    let want_libfabric = canonical(job.libfabric);
    let mut up = Vec::new();
    let mut libfabrics: BTreeMap<u32, Vec<PathBuf>> = BTreeMap::new();
    let mut reports = BTreeMap::new();
    let mut left: BTreeMap<u32, u64> = BTreeMap::new();
    let mut stats = Vec::new();
    let mut finalized = Vec::new();
    let mut kill = None;
    let up_line = format!("ffd up, {} {word}s, oob {}", job.size, job.oob);
    let failed = format!("{word} {victim} failed: ");
    for line in out.stdout.lines() {
        let (who, rest) = line
            .strip_prefix(word)
            .and_then(|l| l.strip_prefix(' '))
            .and_then(|l| l.split_once(": "))
            .unwrap_or_else(|| panic!("unexpected line `{line}`\n{text}"));
        let who: u32 = who.parse().unwrap_or_else(|_| panic!("`{line}`"));
        if who == victim && kill.is_some() {
            panic!("the victim printed after raising SIGKILL: `{line}`\n{text}");
        }
        if rest == up_line {
            up.push(who);
        } else if let Some(path) = rest.strip_prefix("libfabric ") {
            libfabrics
                .entry(who)
                .or_default()
                .push(canonical(Path::new(path)));
        } else if let Some(how) = rest.strip_prefix("raising SIGKILL ") {
            assert_eq!(who, victim, "`{line}`");
            kill = Some(parse_kill(job, how, line));
        } else if let Some(how) = rest
            .strip_prefix("left MPI_Allreduce after ")
            .filter(|_| job.kill == KillLine::InAllreduceRound)
        {
            // K rounds: ffd reported a failure (T ms after the kill)
            let (rounds, why) = how
                .split_once(" rounds: ")
                .unwrap_or_else(|| panic!("`{line}`"));
            assert!(
                why.starts_with("ffd reported a failure"),
                "{word} {who} left the allreduce for another reason: `{line}`\n{text}"
            );
            let rounds = rounds.parse().unwrap_or_else(|_| panic!("`{line}`"));
            assert!(left.insert(who, rounds).is_none(), "twice: `{line}`");
        } else if let Some(report) = rest.strip_prefix(&failed) {
            let report = parse_report(job, report, line, &text);
            assert!(reports.insert(who, report).is_none(), "twice: `{line}`");
        } else if rest.starts_with("stats: epoch 1,") {
            stats.push(who);
        } else if rest == "finalized ffd (success), exiting" {
            finalized.push(who);
        } else {
            // Another process reported failed, a missed report, a wrong
            // sum, ffd stopped, an error.
            panic!("unexpected line `{line}`\n{text}");
        }
    }
    up.sort_unstable();
    stats.sort_unstable();
    finalized.sort_unstable();
    let all: Vec<u32> = (0..job.size).collect();
    let survivors: Vec<u32> = all.iter().copied().filter(|&p| p != victim).collect();
    assert_eq!(up, all, "every {word} started ffd\n{text}");

    // One libfabric per process, the expected one.
    for who in &all {
        assert_eq!(
            libfabrics.get(who).cloned().unwrap_or_default(),
            vec![want_libfabric.clone()],
            "{word} {who} must have loaded exactly {}\n{text}",
            want_libfabric.display()
        );
    }
    check_version_notes(out, &want_libfabric, &all, &text);

    let kill = kill.unwrap_or_else(|| panic!("the victim raised no SIGKILL\n{text}"));
    if let Some(round) = kill.round {
        // Everybody was in the allreduce loop when the victim died.
        assert!(
            round > 1,
            "the victim died before any allreduce completed\n{text}"
        );
        assert_eq!(
            left.keys().copied().collect::<Vec<_>>(),
            survivors,
            "every survivor left MPI_Allreduce on ffd's report\n{text}"
        );
        for (who, rounds) in &left {
            assert!(
                round.saturating_sub(2) <= *rounds && *rounds <= round,
                "{word} {who} completed {rounds} rounds, the victim died in round {round}\n{text}"
            );
        }
    }

    assert_eq!(
        reports.keys().copied().collect::<Vec<_>>(),
        survivors,
        "every survivor reported {word} {victim}\n{text}"
    );
    // Both times printed to 0.1 ms: a report can read up to 0.1 ms earlier
    // than the kill line, never before the planned time.
    let earliest = (kill.late_ms - 0.1).max(0.0);
    for (who, report) in &reports {
        assert!(
            (earliest..=TIMEOUT_MS + 1000.0).contains(&report.ms_after_kill),
            "{word} {who} learned of the kill {} ms after the planned time, SIGKILL was {} ms \
             after it (timeout {TIMEOUT_MS} ms)\n{text}",
            report.ms_after_kill,
            kill.late_ms
        );
        assert!(
            survivors.contains(&report.detector),
            "{word} {who}: declared by {}\n{text}",
            report.detector
        );
    }
    // The survivors went on: every one printed its counters and finalized.
    assert_eq!(stats, survivors, "{text}");
    assert_eq!(finalized, survivors, "{text}");
    if let Some(code) = job.exit_code {
        assert_eq!(
            out.status.code(),
            Some(code),
            "the launcher's exit status\n{text}"
        );
    }
    Checked { reports, kill }
}

/// ffd's start-up note naming both libfabric versions: on every process's
/// stderr exactly when the loaded libfabric is not the one ffd was built
/// against.
fn check_version_notes(out: &Output, want_libfabric: &Path, all: &[u32], text: &str) {
    let versions = ffd::fabric::FabricVersions::of_this_process();
    let built = ffd::fabric::version_text(versions.built);
    let notes: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains(" info: libfabric "))
        .collect();
    if canonical(&system_libfabric()) == want_libfabric {
        assert!(notes.is_empty(), "same libfabric, no note: {notes:?}");
        return;
    }
    // ffd[R] info: libfabric X loaded from PATH, ffd built against libfabric B
    let mut noted = Vec::new();
    for note in &notes {
        let parsed = note.strip_prefix("ffd[").and_then(|l| {
            let (who, rest) = l.split_once("] info: libfabric ")?;
            let (_loaded, rest) = rest.split_once(" loaded from ")?;
            let (path, b) = rest.split_once(", ffd built against libfabric ")?;
            Some((who.parse::<u32>().ok()?, PathBuf::from(path), b))
        });
        let Some((who, path, b)) = parsed else {
            panic!("unexpected note `{note}`\n{text}");
        };
        assert_eq!(canonical(&path), want_libfabric, "`{note}`");
        assert_eq!(b, built, "`{note}`");
        noted.push(who);
    }
    noted.sort_unstable();
    assert_eq!(
        noted, all,
        "every process's ffd names both libfabric versions once at start\n{text}"
    );
}

/// The parser and checks on made-up output of both forms: a passing job
/// passes, and each of one wrong field fails it.
#[cfg(test)]
mod tests {
    use super::*;

    use std::os::unix::process::ExitStatusExt;
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::process::ExitStatus;

    /// A 4-process job killing process 2 in the given form.
    fn job<'a>(word: &'a str, kill: KillLine, libfabric: &'a Path) -> Job<'a> {
        Job {
            word,
            size: 4,
            victim: 2,
            oob: "x",
            kill,
            libfabric,
            exit_code: Some(0),
        }
    }

    /// What a passing job of `job` prints.
    fn passing(job: &Job<'_>) -> String {
        let w = job.word;
        let lib = job.libfabric.display();
        let mut lines = Vec::new();
        for p in 0..job.size {
            lines.push(format!("{w} {p}: ffd up, 4 {w}s, oob x"));
            lines.push(format!("{w} {p}: libfabric {lib}"));
        }
        lines.push(match job.kill {
            KillLine::InAllreduceRound => {
                format!("{w} 2: raising SIGKILL in MPI_Allreduce round 9 (0.3 ms after the planned time)")
            }
            KillLine::AtPlannedTime => format!("{w} 2: raising SIGKILL (0.3 ms after the planned time)"),
        });
        for p in [0, 1, 3] {
            if job.kill == KillLine::InAllreduceRound {
                lines.push(format!(
                    "{w} {p}: left MPI_Allreduce after 8 rounds: ffd reported a failure (250.0 ms after the kill)"
                ));
            }
            lines.push(format!(
                "{w} {p}: {w} 2 failed: cause timeout, declared by {w} 1, 1 hops, epoch 1, 250.0 ms after the kill"
            ));
            lines.push(format!("{w} {p}: stats: epoch 1, heartbeats 40"));
            lines.push(format!("{w} {p}: finalized ffd (success), exiting"));
        }
        lines.join("\n") + "\n"
    }

    fn output(stdout: String) -> Output {
        Output {
            status: ExitStatus::from_raw(0),
            stdout,
            stderr: String::new(),
        }
    }

    /// `check_job` on `stdout`: the panic's message if it failed.
    fn failure(stdout: String, job: &Job<'_>) -> Option<String> {
        let out = output(stdout);
        let err = catch_unwind(AssertUnwindSafe(|| check_job(&out, job))).err()?;
        Some(
            err.downcast_ref::<String>()
                .cloned()
                .or_else(|| err.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default(),
        )
    }

    #[test]
    fn a_passing_job_of_either_form_passes_and_one_wrong_field_fails_it() {
        let lib = system_libfabric();
        for (word, kill) in [
            ("rank", KillLine::InAllreduceRound),
            ("PE", KillLine::AtPlannedTime),
        ] {
            let job = job(word, kill, &lib);
            let good = passing(&job);
            let checked = check_job(&output(good.clone()), &job);
            assert_eq!(checked.kill.late_ms, 0.3, "{word}");
            assert_eq!(
                checked.kill.round,
                (kill == KillLine::InAllreduceRound).then_some(9)
            );
            assert_eq!(
                checked.reports.get(&3),
                Some(&Report {
                    cause: "timeout".to_owned(),
                    detector: 1,
                    hops: 1,
                    ms_after_kill: 250.0
                }),
                "{word}"
            );
            let failed = format!("{word} 3: {word} 2 failed: ");
            let report = format!("{failed}cause timeout, declared by {word} 1, 1 hops, epoch 1, ");
            for (from, to, why) in [
                (
                    report.clone(),
                    report.replace("epoch 1", "epoch 2"),
                    "only failure",
                ),
                (
                    report.clone(),
                    report.replace("cause timeout", "cause none"),
                    "`",
                ),
                (
                    report.clone(),
                    report.replace(&format!("by {word} 1"), &format!("by {word} 2")),
                    "declared by 2",
                ),
                (
                    report.clone(),
                    report.replace(&format!("by {word}"), "by node"),
                    "detector",
                ),
                (report.clone(), report.replace("1 hops", "one hops"), "hops"),
                (
                    format!("{failed}cause timeout, declared by {word} 1, 1 hops, epoch 1, 250.0"),
                    format!("{failed}cause timeout, declared by {word} 1, 1 hops, epoch 1, 0.1"),
                    "learned of the kill",
                ),
                (
                    format!("{word} 3: stats: epoch 1"),
                    format!("{word} 3: stats: epoch 2"),
                    "unexpected line",
                ),
                (
                    "SIGKILL".to_owned(),
                    "SIGTERM".to_owned(),
                    "unexpected line",
                ),
            ] {
                let bad = good.replacen(&from, &to, 1);
                assert_ne!(bad, good, "{word}: `{from}` is in the output");
                let message = failure(bad, &job).unwrap_or_else(|| panic!("{word}: `{to}` passed"));
                assert!(
                    message.contains(why),
                    "{word}: `{to}` failed with {message}"
                );
            }
        }
        // Each form's lines fail the other's job.
        let rank = job("rank", KillLine::InAllreduceRound, &lib);
        let pe = job("PE", KillLine::AtPlannedTime, &lib);
        assert!(failure(passing(&rank), &pe).is_some());
        assert!(failure(passing(&pe), &rank).is_some());
        let shmem_kill_in_mpi =
            passing(&rank).replace("SIGKILL in MPI_Allreduce round 9 ", "SIGKILL ");
        assert!(failure(shmem_kill_in_mpi, &rank).is_some());
    }
}
