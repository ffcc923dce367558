//! What a test needs from the machine beyond Rust: root, network
//! namespaces, `mpirun`, `oshrun`, PMIx, valgrind, a C compiler, a wheel's
//! venv.
//!
//! A test asks [`available`] first. Where the need is met it runs; where it
//! is not, it prints `SKIPPED: <test>: <why>` and returns, so a plain
//! `cargo test` passes on a machine without them. `ci/test` sets
//! `FFD_TEST_REQUIRE_ALL=1` after `ci/setup` installed everything: there a
//! missing prerequisite fails the test instead of skipping it, so CI never
//! passes by skipping.
//!
//! Shared by the top-level tests (`mod prereq;`) and the `ffd` command's
//! (`#[path = "../../tests/prereq/mod.rs"] mod prereq;`).

#![allow(dead_code)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The variable `ci/test` sets: every prerequisite must be there.
pub const REQUIRE_ALL: &str = "FFD_TEST_REQUIRE_ALL";

/// Whether `test` can run: every check passed. Otherwise prints why and
/// returns false, or panics when [`REQUIRE_ALL`] is `1`.
pub fn available(test: &str, checks: &[Result<(), String>]) -> bool {
    let missing: Vec<&str> = checks
        .iter()
        .filter_map(|c| c.as_ref().err().map(String::as_str))
        .collect();
    if missing.is_empty() {
        return true;
    }
    let why = missing.join("; ");
    if std::env::var(REQUIRE_ALL).is_ok_and(|v| v == "1") {
        panic!("{test} cannot run ({REQUIRE_ALL}=1): {why}");
    }
    // Straight to the process's stderr: the test harness captures
    // `eprintln!` of passing tests, and a skip must show.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {test}: {why} (ci/setup installs what the tests need)"
    );
    false
}

/// `name` is an executable on `PATH`.
pub fn command(name: &str) -> Result<(), String> {
    which(name)
        .map(|_| ())
        .ok_or_else(|| format!("`{name}` is not on PATH"))
}

/// The full path of `name` on `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// This process runs as root (effective uid 0).
pub fn root() -> Result<(), String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .unwrap_or("?");
    if euid == "0" {
        Ok(())
    } else {
        Err(format!("needs root (effective uid is {euid})"))
    }
}

/// Network namespaces can be made here: root, and `ip netns` answers.
pub fn netns() -> Result<(), String> {
    root()?;
    command("ip")?;
    let ok = Command::new("ip")
        .args(["netns", "list"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err("`ip netns list` fails: network namespaces are not available".into())
    }
}

/// `mpirun` of the system's Open MPI (Debian's openmpi-bin).
pub fn mpirun() -> Result<(), String> {
    command("mpirun").and_then(|()| command("mpicc"))
}

/// `oshrun` and `oshcc` of the system's Open MPI (Debian's openmpi-bin):
/// its OpenSHMEM, `oshmem`.
pub fn oshrun() -> Result<(), String> {
    command("oshrun").and_then(|()| command("oshcc"))
}

/// A C compiler and pkg-config.
pub fn c_toolchain() -> Result<(), String> {
    command("cc").and_then(|()| command("pkg-config"))
}

/// libfabric offers `provider` (on `domain`, e.g. `lo`). Any other error
/// of `fi_getinfo` is the test's to report: only a provider this
/// libfabric was built without is a missing prerequisite.
pub fn provider(provider: &str, domain: Option<&str>) -> Result<(), String> {
    use ffd::fabric::{FabricError, Info};
    match Info::query(provider, domain) {
        Err(e @ FabricError::ProviderUnavailable { .. }) => {
            Err(format!("libfabric does not offer `{provider}`: {e}"))
        }
        _ => Ok(()),
    }
}

/// The calling test's name (the harness names its thread after it).
pub fn this_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_owned()
}

/// The kernel gives pidfds (`pidfd_open`, Linux ≥ 5.3).
pub fn pidfd() -> Result<(), String> {
    ffd::node::pidfd_probe().map_err(|why| format!("no pidfd here ({why})"))
}

/// The kernel has exit words (`futex_waitv`, Linux ≥ 5.16).
pub fn exit_words() -> Result<(), String> {
    ffd::node::exit_word_probe().map_err(|why| format!("no exit words here ({why})"))
}
