//! The OpenSHMEM embedding case end to end under Debian's Open MPI 4.1.4
//! `oshmem`: `examples/c/shmem_detect.c`, built with `oshcc` against
//! `ffd.pc`, runs as a 4-PE job (`oshrun --enable-recovery`) whose PEs
//! start ffd with `shmem_fcollect64` over symmetric memory as its
//! out-of-band allgather; PE 2 raises SIGKILL at a time PE 0 broadcast, and
//! every survivor must report it, as the only failure, within timeout + 1 s
//! of the kill, and go on to print its counters, finalize ffd and exit.
//! Where this machine lets a process open pidfds the PEs, all on one host,
//! each see the exit themselves: cause `exited`, declared by the survivor
//! itself, 0 hops (design §4.12 "Hosts"); elsewhere a survivor's watch or a notice
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
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use capi_support::detect::{
    self, Checked, JOB_BOUND, Job, KillLine, Report, ffd_settings, system_libfabric,
};
use capi_support::{Child, Output, ScratchDir, clean_command, compile_c};

const PES: u32 = 4;
const VICTIM: u32 = 2;

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

/// Checks everything about the finished job (`capi_support::detect`, and
/// with pidfds each survivor's own sight of the exit); returns each
/// survivor's report and how late the victim raised SIGKILL (ms after the
/// planned time, the origin of every report's time).
fn check_job(out: &Output) -> (BTreeMap<u32, Report>, f64) {
    let text = out.text();
    let libfabric = system_libfabric();
    let job = Job {
        word: "PE",
        size: PES,
        victim: VICTIM,
        oob: "shmem",
        kill: KillLine::AtPlannedTime,
        libfabric: &libfabric,
        exit_code: Some(0),
    };
    let Checked { reports, kill } = detect::check_job(out, &job);
    let pidfds = match ffd::node::pidfd_probe() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("no pidfd here ({why}): any cause will do");
            false
        }
    };
    if pidfds {
        for (pe, report) in &reports {
            assert!(
                report.cause == "exited" && report.detector == *pe && report.hops == 0,
                "PE {pe} saw the exit of a PE of its host itself: {report:?}\n{text}"
            );
        }
    }
    (reports, kill.late_ms)
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
