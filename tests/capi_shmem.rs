//! The OpenSHMEM embedding case end to end under Debian's Open MPI 4.1.4
//! `oshmem`: `examples/c/shmem_detect.c`, built with `oshcc` against
//! `ffd.pc`, runs as a 4-PE job (`oshrun --enable-recovery`) whose PEs
//! start ffd with `shmem_fcollect64` over symmetric memory as its
//! out-of-band allgather; PE 2 raises SIGKILL at a time PE 0 broadcast, and
//! every survivor must report it, as the only failure, within timeout + 1 s
//! of the kill, and go on to print its counters, finalize ffd and exit.
//! Where this machine lets a process open pidfds the PEs, all on one host,
//! each see the exit themselves: cause `exited`, declared by the survivor
//! itself, 0 hops (design §4.12); elsewhere a survivor's watch or a notice
//! finds it.
//!
//! What `oshrun` (Open MPI's mpirun) needs here, found by hand with plain
//! OpenSHMEM programs and held to by this test:
//! - `--enable-recovery`, or it kills the job once a PE dies (exit 137).
//!   With it, the other PEs run on, nothing tells them, and oshrun exits 0
//!   once they have exited; it prints one "PMIX ERROR: BAD-PARAM ...
//!   pmix_event_notification.c" line per PE that exits without
//!   `shmem_finalize`. The example skips `shmem_finalize`, whose barrier
//!   never completes with a dead PE.
//! - The only SPML of Debian's build is `ucx` (libucx0, a dependency of
//!   libopenmpi3); `UCX_TLS=self,sm` keeps it on shared memory. Over those
//!   transports a put or atomic to a dead PE never completes (`shmem_quiet`
//!   spins), so the survivors make no OpenSHMEM call after the kill time.
//! - `--mca btl self,vader` and `--mca oob_tcp_if_include lo` keep Open
//!   MPI's own traffic on the host, `--oversubscribe --bind-to none` let 4
//!   PEs and their ffd threads share 2 cores; `FFD_DOMAIN=lo` keeps ffd's.
//!
//! Traffic stays on loopback and shared memory. The test runs one job at a
//! time (there is one test here).

mod capi_support;

use capi_support::prereq;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use capi_support::mpi::{JOB_BOUND, TIMEOUT_MS, ffd_settings, system_libfabric};
use capi_support::{Child, Output, ScratchDir, clean_command, compile_c};

const PES: u32 = 4;
const VICTIM: u32 = 2;

/// One survivor's report of the victim.
#[derive(Debug)]
struct Report {
    cause: String,
    detector: u32,
    hops: u32,
    ms_after_kill: f64,
}

/// `oshrun` for a 4-PE job of `exe` on loopback and shared memory, with its
/// own session directory.
fn oshrun(exe: &Path, session: &ScratchDir) -> Command {
    let mut cmd = clean_command("oshrun");
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
    .args(["-x", "UCX_TLS"])
    .env("UCX_TLS", "self,sm");
    for (name, value) in ffd_settings() {
        cmd.args(["-x", name]).env(name, value);
    }
    cmd.args(["-np", &PES.to_string()])
        .arg(exe)
        .args(["--victim", &VICTIM.to_string()]);
    cmd
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Checks everything about the finished job; returns each survivor's
/// report and how late the victim raised SIGKILL (ms after the planned
/// time, the origin of every report's time).
fn check_job(out: &Output) -> (BTreeMap<u32, Report>, f64) {
    let text = out.text();
    let want_libfabric = canonical(&system_libfabric());
    let mut up = Vec::new();
    let mut libfabrics: BTreeMap<u32, Vec<PathBuf>> = BTreeMap::new();
    let mut reports = BTreeMap::new();
    let mut stats = Vec::new();
    let mut finalized = Vec::new();
    let mut killed_late_ms = None;
    for line in out.stdout.lines() {
        let (pe, rest) = line
            .strip_prefix("PE ")
            .and_then(|l| l.split_once(": "))
            .unwrap_or_else(|| panic!("unexpected line `{line}`\n{text}"));
        let pe: u32 = pe.parse().unwrap_or_else(|_| panic!("`{line}`"));
        if pe == VICTIM && killed_late_ms.is_some() {
            panic!("the victim printed after raising SIGKILL: `{line}`\n{text}");
        }
        if rest == format!("ffd up, {PES} PEs, oob shmem") {
            up.push(pe);
        } else if let Some(path) = rest.strip_prefix("libfabric ") {
            libfabrics
                .entry(pe)
                .or_default()
                .push(canonical(Path::new(path)));
        } else if let Some(late) = rest.strip_prefix("raising SIGKILL (") {
            assert_eq!(pe, VICTIM, "`{line}`");
            let late: f64 = late
                .strip_suffix(" ms after the planned time)")
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("`{line}`"));
            killed_late_ms = Some(late);
        } else if let Some(report) = rest.strip_prefix(&format!("PE {VICTIM} failed: ")) {
            // cause C, declared by PE D, H hops, epoch E, T ms after the kill
            let fields: Vec<&str> = report.split(", ").collect();
            let [cause, declared, hops, epoch, after] = fields[..] else {
                panic!("`{line}`\n{text}");
            };
            assert_eq!(
                epoch, "epoch 1",
                "the victim is the only failure: `{line}`\n{text}"
            );
            let report = Report {
                cause: cause.strip_prefix("cause ").expect("cause").to_owned(),
                detector: declared
                    .strip_prefix("declared by PE ")
                    .and_then(|d| d.parse().ok())
                    .unwrap_or_else(|| panic!("`{line}`")),
                hops: hops
                    .strip_suffix(" hops")
                    .and_then(|h| h.parse().ok())
                    .unwrap_or_else(|| panic!("`{line}`")),
                ms_after_kill: after
                    .strip_suffix(" ms after the kill")
                    .and_then(|t| t.parse().ok())
                    .unwrap_or_else(|| panic!("`{line}`")),
            };
            assert!(reports.insert(pe, report).is_none(), "twice: `{line}`");
        } else if rest.starts_with("stats: epoch 1,") {
            stats.push(pe);
        } else if rest == "finalized ffd (success), exiting" {
            finalized.push(pe);
        } else {
            // Another PE reported failed, a missed report, ffd stopped, an error.
            panic!("unexpected line `{line}`\n{text}");
        }
    }
    up.sort_unstable();
    stats.sort_unstable();
    finalized.sort_unstable();
    let all: Vec<u32> = (0..PES).collect();
    let survivors: Vec<u32> = all.iter().copied().filter(|&p| p != VICTIM).collect();
    assert_eq!(up, all, "every PE started ffd\n{text}");
    // One libfabric per process, shared by Open MPI and ffd: the system's.
    for pe in &all {
        assert_eq!(
            libfabrics.get(pe).cloned().unwrap_or_default(),
            vec![want_libfabric.clone()],
            "PE {pe} must have loaded exactly {}\n{text}",
            want_libfabric.display()
        );
    }
    let killed_late_ms =
        killed_late_ms.unwrap_or_else(|| panic!("the victim raised no SIGKILL\n{text}"));

    assert_eq!(
        reports.keys().copied().collect::<Vec<_>>(),
        survivors,
        "every survivor reported PE {VICTIM}\n{text}"
    );
    let pidfds = match ffd::node::pidfd_probe() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("no pidfd here ({why}): any cause will do");
            false
        }
    };
    for (pe, report) in &reports {
        assert!(
            // Both printed to 0.1 ms: a report can read up to 0.1 ms early.
            (killed_late_ms - 0.1..=TIMEOUT_MS + 1000.0).contains(&report.ms_after_kill),
            "PE {pe} learned of the kill {} ms after the planned time, SIGKILL was {killed_late_ms} \
             ms after it (timeout {TIMEOUT_MS} ms)\n{text}",
            report.ms_after_kill
        );
        if pidfds {
            assert!(
                report.cause == "exited" && report.detector == *pe && report.hops == 0,
                "PE {pe} saw the exit of a PE of its host itself: {report:?}\n{text}"
            );
        } else {
            assert!(
                ["exited", "timeout", "inband", "notice"].contains(&report.cause.as_str())
                    && survivors.contains(&report.detector),
                "PE {pe}: {report:?}\n{text}"
            );
        }
    }
    // The survivors went on: every one printed its counters and finalized.
    assert_eq!(stats, survivors, "{text}");
    assert_eq!(finalized, survivors, "{text}");
    assert_eq!(out.status.code(), Some(0), "oshrun's exit status\n{text}");
    (reports, killed_late_ms)
}

#[test]
fn every_surviving_pe_of_an_openshmem_job_learns_of_a_killed_pe_through_shmem_fcollect() {
    let name =
        "every_surviving_pe_of_an_openshmem_job_learns_of_a_killed_pe_through_shmem_fcollect";
    if !prereq::available(name, &[prereq::oshrun(), prereq::c_toolchain()]) {
        return;
    }
    let exe = compile_c("oshcc", "examples/c/shmem_detect.c", "ffd", "shmem_detect");
    let session = ScratchDir::new("oshmem");
    let start = Instant::now();
    let out = Child::start(oshrun(&exe, &session), "oshrun shmem_detect").finish(JOB_BOUND);
    eprintln!("oshmem job: {:?}\n{}", start.elapsed(), out.stdout);
    let (reports, late) = check_job(&out);
    let summary: Vec<String> = reports
        .iter()
        .map(|(pe, r)| {
            format!(
                "PE {pe}: {:.1} ms after SIGKILL ({})",
                r.ms_after_kill - late,
                r.cause
            )
        })
        .collect();
    eprintln!("shmem_fcollect64 bootstrap: {}", summary.join(", "));
}
