//! Shared by the C API tests (`tests/capi.rs`, `tests/install.rs`, the
//! MPI embedding tests `tests/capi_mpi.rs`, `capi_ompi5.rs`,
//! `capi_mpich.rs`, whose job lives in [`mpi`], and the OpenSHMEM one,
//! `tests/capi_shmem.rs`; the checks of both jobs' output live in
//! [`detect`]): building libffd's
//! pkg-config files with `ci/pkgconfig`, compiling C against them, and
//! running children with bounded waits.
//!
//! Every child is started here and reaped here: [`Child`] waits for it in
//! a thread and, if the test lets go of it before it exited (a failed
//! assertion, a hang past its bound), sends SIGTERM then SIGKILL to its
//! PID and reaps it.

#![allow(dead_code)]

#[path = "../prereq/mod.rs"]
pub mod prereq;

pub mod detect;
pub mod mpi;

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Bound on building libffd and its pkg-config files (a no-op when the
/// library is fresh, which it is after `cargo test` built it).
const BUILD_BOUND: Duration = Duration::from_secs(900);

/// A finished child: its exit status and everything it printed.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// Both streams, for assertion messages.
    pub fn text(&self) -> String {
        format!(
            "status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// A child process of ours with bounded waits.
pub struct Child {
    pid: u32,
    what: String,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
    exited: Receiver<std::io::Result<ExitStatus>>,
    done: bool,
}

impl Child {
    pub fn start(mut cmd: Command, what: &str) -> Child {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let pid = child.id();
        let reader = |mut stream: Box<dyn Read + Send>| {
            let (tx, rx) = mpsc::channel();
            thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = stream.read_to_end(&mut bytes);
                let _ = tx.send(String::from_utf8_lossy(&bytes).into_owned());
            });
            rx
        };
        let stdout = reader(Box::new(child.stdout.take().expect("piped stdout")));
        let stderr = reader(Box::new(child.stderr.take().expect("piped stderr")));
        let (tx, exited) = mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        Child {
            pid,
            what: what.to_owned(),
            stdout,
            stderr,
            exited,
            done: false,
        }
    }

    /// Waits for the exit and the output, all within `bound` (or the test
    /// fails, and the drop ends the child).
    pub fn finish(self, bound: Duration) -> Output {
        let what = self.what.clone();
        match self.finish_within(bound) {
            Ok(out) => out,
            Err(Unfinished { stdout, stderr }) => panic!(
                "{what} did not exit within {bound:?}; its output until SIGTERM:\n\
                 --- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
            ),
        }
    }

    /// Waits for the exit and the output, all within `bound`; past it, ends
    /// the child (mpirun forwards SIGTERM to its ranks; the drop follows
    /// with SIGKILL) and returns what it printed until then.
    pub fn finish_within(mut self, bound: Duration) -> Result<Output, Unfinished> {
        let deadline = Instant::now() + bound;
        let left = || deadline.saturating_duration_since(Instant::now());
        let status = match self.exited.recv_timeout(left()) {
            Ok(status) => status.unwrap_or_else(|e| panic!("waiting for {}: {e}", self.what)),
            Err(_) => {
                // The streams close once the job is gone.
                let _ = kill(Pid::from_raw(self.pid as i32), Signal::SIGTERM);
                if self.exited.recv_timeout(Duration::from_secs(10)).is_ok() {
                    self.done = true;
                }
                let grace = Duration::from_secs(5);
                let stdout = self.stdout.recv_timeout(grace).unwrap_or_default();
                let stderr = self.stderr.recv_timeout(grace).unwrap_or_default();
                return Err(Unfinished { stdout, stderr });
            }
        };
        self.done = true;
        // The streams close at exit, unless a grandchild holds them.
        let stdout = self.stdout.recv_timeout(left()).unwrap_or_default();
        let stderr = self.stderr.recv_timeout(left()).unwrap_or_default();
        Ok(Output {
            status,
            stdout,
            stderr,
        })
    }
}

/// What a child that did not exit in time printed until it was ended.
pub struct Unfinished {
    pub stdout: String,
    pub stderr: String,
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Still running: mpirun forwards SIGTERM to its ranks and exits.
        let pid = Pid::from_raw(self.pid as i32);
        for (signal, grace) in [(Signal::SIGTERM, 10), (Signal::SIGKILL, 10)] {
            if self.exited.try_recv().is_ok() {
                return;
            }
            let _ = kill(pid, signal);
            if self.exited.recv_timeout(Duration::from_secs(grace)).is_ok() {
                return;
            }
        }
        eprintln!("{} (pid {}) survived SIGKILL", self.what, self.pid);
    }
}

/// Runs `cmd` to completion within `bound`.
pub fn run(cmd: Command, what: &str, bound: Duration) -> Output {
    Child::start(cmd, what).finish(bound)
}

/// The repository root.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding `ffd.pc` and `ffd-static.pc` for this test's
/// profile and features, written once per test process by `ci/pkgconfig`
/// (which builds the library with cargo: a no-op when it is fresh).
pub fn pkg_config_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let mut cmd = Command::new(repo().join("ci/pkgconfig"));
        if cfg!(debug_assertions) {
            cmd.arg("--debug");
        }
        if cfg!(feature = "pmix") {
            cmd.args(["--features", "pmix"]);
        }
        let out = run(cmd, "ci/pkgconfig", BUILD_BOUND);
        assert!(out.status.success(), "ci/pkgconfig failed\n{}", out.text());
        let dir = PathBuf::from(out.stdout.trim());
        assert!(dir.join("ffd.pc").is_file(), "{}", out.text());
        dir
    })
}

/// `pkg-config --cflags --libs <package>` against our .pc files, split.
pub fn pkg_config_flags(package: &str) -> Vec<String> {
    pkg_config_flags_in(pkg_config_dir(), package)
}

/// `pkg-config --cflags --libs <package>` with `PKG_CONFIG_PATH=dir`, split.
pub fn pkg_config_flags_in(dir: &Path, package: &str) -> Vec<String> {
    let mut cmd = Command::new("pkg-config");
    cmd.env("PKG_CONFIG_PATH", dir)
        .args(["--cflags", "--libs", package]);
    let out = run(cmd, "pkg-config", Duration::from_secs(60));
    assert!(
        out.status.success(),
        "pkg-config {package} in {}\n{}",
        dir.display(),
        out.text()
    );
    out.stdout.split_whitespace().map(str::to_owned).collect()
}

/// Compiles C `source` into `name` under this test target's scratch
/// directory with `compiler` and the flags of pkg-config `package`.
pub fn compile_c(compiler: &str, source: &str, package: &str, name: &str) -> PathBuf {
    compile_c_with(compiler, source, &pkg_config_flags(package), name)
}

/// Compiles C `source` (relative to the repository) into `name` under this
/// test target's scratch directory with `compiler` and `flags`.
pub fn compile_c_with(
    compiler: impl AsRef<OsStr>,
    source: &str,
    flags: &[String],
    name: &str,
) -> PathBuf {
    let compiler = compiler.as_ref();
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi");
    std::fs::create_dir_all(&out_dir).expect("create the scratch directory");
    let exe = out_dir.join(name);
    // Built under a name of its own, then renamed over `exe`: tests running
    // at once may build the same program, and one of them may be starting
    // it while another's compiler writes it (mpirun then could not execute
    // it, seen in a full ci/test). A rename leaves a running copy intact.
    static BUILDS: AtomicU64 = AtomicU64::new(0);
    let partial = out_dir.join(format!(
        ".{name}.{}.{}",
        std::process::id(),
        BUILDS.fetch_add(1, Ordering::Relaxed)
    ));
    let mut cmd = Command::new(compiler);
    // cargo test's LD_LIBRARY_PATH holds the build scripts' link directories
    // (e.g. Debian's PMIx): ld searches it before a library's RUNPATH, so it
    // would choose dependencies for the program that a plain build would not.
    cmd.env_remove("LD_LIBRARY_PATH");
    cmd.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-pthread"])
        .arg(repo().join(source))
        .arg("-o")
        .arg(&partial)
        .args(flags);
    let out = run(cmd, &compiler.to_string_lossy(), Duration::from_secs(300));
    assert!(
        out.status.success(),
        "{} {source} {flags:?} failed\n{}",
        compiler.to_string_lossy(),
        out.text()
    );
    std::fs::rename(&partial, &exe)
        .unwrap_or_else(|e| panic!("rename {} to {}: {e}", partial.display(), exe.display()));
    exe
}

/// Prefixes of the variables that steer ffd, libfabric, UCX and the MPI
/// and OpenSHMEM launchers and libraries.
const STEERING: [&str; 11] = [
    "FFD_",
    "PMIX_",
    "OMPI_",
    "PRTE_",
    "FI_",
    "MPIR_CVAR_",
    "HYDRA_",
    "LIBFABRIC_",
    "UCX_",
    "SHMEM_",
    "OSHMEM_",
];

/// A command without the variables of the test's own environment that
/// steer ffd, libfabric, UCX, MPI or OpenSHMEM ([`STEERING`]), so that
/// only what the test sets applies.
pub fn clean_command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for (name, _) in std::env::vars_os() {
        let n = name.to_string_lossy();
        if STEERING.iter().any(|p| n.starts_with(p)) {
            cmd.env_remove(&name);
        }
    }
    cmd
}

/// A directory of our own, removed on drop: e.g. one mpirun's session
/// files (concurrent mpiruns race to create the default
/// `/tmp/ompi.<host>.<uid>`).
pub struct ScratchDir(pub PathBuf);

impl ScratchDir {
    pub fn new(name: &str) -> ScratchDir {
        let dir = std::env::temp_dir().join(format!("ffd-test.{}.{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the scratch directory");
        ScratchDir(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
