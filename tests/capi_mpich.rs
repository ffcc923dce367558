//! The embedding job of `tests/capi_mpi.rs` (checks: `capi_support::mpi`)
//! under MPICH 5.0, the PyPI wheel `mpich` that `ci/setup` installs into
//! `target/venv/mpich` (skipped, saying so, without it), device ch4 with the
//! ofi netmod for every message (`MPIR_CVAR_CH4_NETMOD=ofi`,
//! `MPIR_CVAR_NOLOCAL=1`: no shared memory), so MPICH's allreduce and ffd's
//! heartbeats share one libfabric: the wheel's 2.5.1 (`lib/mpich`), which ffd
//! runs on (`-Wl,-rpath-link` and `LD_LIBRARY_PATH`; see `capi_ompi5.rs` for
//! why and for the other way, building against it).
//!
//! What Hydra 5.0.2 (mpiexec) does here, seen with strace and `-verbose`:
//! - without `-disable-auto-cleanup` it kills the whole job when a rank dies;
//! - with it, it still SIGKILLs every process of the job as soon as one of
//!   its processes ends *by a signal* (`WIFSIGNALED` in the proxy's wait
//!   loop, whatever the option says). Each rank therefore runs under
//!   `sh -c '...; exit $?'`, which turns the victim's SIGKILL into exit
//!   status 137 for Hydra; the victim itself still dies by SIGKILL;
//! - when a rank's PMI connection closes, it sends SIGUSR1 to the process
//!   group of every other rank (MPICH installs a handler in MPI_Init; the
//!   `sh` must not die of it: `trap : USR1`), and finally exits with the
//!   largest exit status, 137.

mod capi_support;

use std::path::Path;
use std::time::Instant;

use capi_support::detect::{JOB_BOUND, ffd_settings};
use capi_support::mpi::{Expect, RANKS, VICTIM, check_job, summary, venv};
use capi_support::{Child, clean_command, compile_c_with, pkg_config_flags};

#[test]
fn mpich_survivors_learn_of_a_killed_rank_with_ffd_running_on_the_wheels_libfabric() {
    let Some(venv) = venv("mpich", "mpiexec") else {
        return;
    };
    let bundled = venv.join("lib/mpich");
    let mut flags = pkg_config_flags("ffd");
    flags.push(format!("-Wl,-rpath-link,{}", bundled.display()));
    let exe = compile_c_with(
        venv.join("bin/mpicc"),
        "examples/c/mpi_detect.c",
        &flags,
        "mpi_detect_mpich",
    );

    let mut cmd = clean_command(venv.join("bin/mpiexec"));
    cmd.args(["-iface", "lo", "-disable-auto-cleanup"])
        .args(["-np", &RANKS.to_string()])
        .env("LD_LIBRARY_PATH", &bundled)
        .env("MPIR_CVAR_CH4_NETMOD", "ofi")
        .env("MPIR_CVAR_NOLOCAL", "1")
        .env("FI_TCP_IFACE", "lo")
        .envs(ffd_settings())
        .args(["sh", "-c", "trap : USR1; \"$0\" \"$@\"; exit $?"])
        .arg(&exe)
        .args(["--victim", &VICTIM.to_string()]);
    let start = Instant::now();
    let out = Child::start(cmd, "mpiexec (MPICH) mpi_detect").finish(JOB_BOUND);
    eprintln!("mpich: {:?}\n{}", start.elapsed(), out.stdout);
    let reports = check_job(
        &out,
        &Expect {
            oob: "mpi",
            libfabric: &Path::new(&bundled).join("libfabric.so.1"),
            exit_code: Some(137),
        },
    );
    eprintln!("mpich: {}", summary(&reports));
}
