//! The embedding case end to end under Debian's Open MPI 4.1:
//! `examples/c/mpi_detect.c`, built with `mpicc` against `ffd.pc`, runs as
//! a 6-rank job (`mpirun --enable-recovery`) whose ranks loop in
//! MPI_Allreduce; rank 3 raises SIGKILL in one round, and every survivor's
//! callback must report it within timeout + 1 s, every survivor must leave
//! the allreduce and go on to print its counters, finalize ffd and exit
//! (the checks: `capi_support::detect`). Once with MPI_Allgather as ffd's
//! out-of-band collective, once (feature `pmix`) with no collective,
//! through the launcher's PMIx server. The same job runs under the Open
//! MPI 5 and MPICH wheels in `capi_ompi5.rs` and `capi_mpich.rs`. Then the
//! recovery case, `examples/c/mpi_agree.c` (the last test): the survivors
//! of the kill call `ffd_agree` and must print the same decision and view.
//!
//! What Open MPI 4.1.4 does here (checked by hand with a plain MPI program
//! and by these tests): with `--enable-recovery` mpirun keeps the other
//! ranks running after one is killed, tells them nothing (no PMIx event; a
//! collective with the dead rank just never completes), and exits 0 once
//! the survivors have exited, even when a survivor exits non-zero; it
//! prints one "PMIX ERROR: BAD-PARAM ... pmix_event_notification.c" line
//! per rank that exits without MPI_Finalize. Without the flag it kills the
//! job and exits 137. MPI_Finalize with a dead peer hung in about one run
//! in six, so the example skips it (`_exit` after `ffd_finalize`). So the
//! job's survival is judged from the ranks' own lines, not from mpirun's
//! exit status (which is asserted to be 0 all the same).
//!
//! Traffic stays on loopback: `FFD_DOMAIN=lo` for ffd, the shared-memory
//! BTL for MPI, and mpirun's own sockets on `lo`. The jobs run one at a
//! time (a mutex): 2 cores, 12 ranks at once would only measure contention.

mod capi_support;

use capi_support::prereq;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use capi_support::detect::{JOB_BOUND, Report, ffd_settings, system_libfabric};
use capi_support::mpi::{Expect, RANKS, VICTIM, check_job, summary};
use capi_support::{Child, ScratchDir, clean_command, compile_c};

static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

fn example() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile_c("mpicc", "examples/c/mpi_detect.c", "ffd", "mpi_detect"))
}

fn agree_example() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile_c("mpicc", "examples/c/mpi_agree.c", "ffd", "mpi_agree"))
}

/// `mpirun` for a 6-rank job of `exe` on loopback (victim rank 3), with its
/// own session directory; the caller adds the example's other arguments.
fn mpirun(exe: &PathBuf, session: &ScratchDir) -> Command {
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
    for (name, value) in ffd_settings() {
        cmd.args(["-x", name]).env(name, value);
    }
    cmd.args(["-np", &RANKS.to_string()])
        .arg(exe)
        .args(["--victim", &VICTIM.to_string()]);
    cmd
}

/// Runs the job and checks everything about it; returns the reports.
fn job(args: &[&str], oob: &str) -> BTreeMap<u32, Report> {
    let _serial = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let session = ScratchDir::new(&format!("ompi4-{oob}"));
    let mut cmd = mpirun(example(), &session);
    cmd.args(args);
    let start = Instant::now();
    let out = Child::start(cmd, "mpirun mpi_detect").finish(JOB_BOUND);
    eprintln!("{oob} job: {:?}\n{}", start.elapsed(), out.stdout);
    let libfabric = system_libfabric();
    check_job(
        &out,
        &Expect {
            oob,
            libfabric: &libfabric,
            exit_code: Some(0),
        },
    )
}

#[test]
fn every_survivor_of_an_mpi_job_learns_of_a_killed_rank_through_mpi_allgather() {
    if !prereq::available(
        "every_survivor_of_an_mpi_job_learns_of_a_killed_rank_through_mpi_allgather",
        &[prereq::mpirun(), prereq::c_toolchain()],
    ) {
        return;
    }
    let reports = job(&[], "mpi");
    eprintln!("MPI_Allgather bootstrap: {}", summary(&reports));
}

#[cfg(feature = "pmix")]
#[test]
fn every_survivor_of_an_mpi_job_learns_of_a_killed_rank_through_pmix() {
    if !prereq::available(
        "every_survivor_of_an_mpi_job_learns_of_a_killed_rank_through_pmix",
        &[prereq::mpirun(), prereq::c_toolchain()],
    ) {
        return;
    }
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
    if !prereq::available(
        "the_survivors_of_a_kill_agree_on_the_failed_set_through_ffd_agree",
        &[prereq::mpirun(), prereq::c_toolchain()],
    ) {
        return;
    }
    let _serial = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let session = ScratchDir::new("ompi4-agree");
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
