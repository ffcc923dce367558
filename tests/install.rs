//! `ci/install PREFIX` as a C library's consumer meets it: the GNU layout
//! under a fresh prefix (libffd.so.X.Y.Z with its SONAME and links,
//! libffd.a, ffd.h, ffd.pc and ffd-static.pc pointing at the prefix,
//! bin/ffd); `examples/c/hello.c` built with `pkg-config` against the
//! prefix alone, shared and static, and run; the version agreeing in
//! Cargo.toml, the header, `ffd_version()`, the .pc files, the file names
//! and `ffd --version`; and the exported symbols being the committed list
//! `include/ffd.symbols`.
//!
//! One release build and install per test process (about 3 minutes from a
//! cold target directory on 2 cores, seconds when fresh).

mod capi_support;

use capi_support::prereq;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use capi_support::mpi::debian_preloaded;
use capi_support::{clean_command, compile_c_with, pkg_config_flags_in, repo, run};

/// Bound on `ci/install` (a cold release build of the library and the command).
const INSTALL_BOUND: Duration = Duration::from_secs(1800);
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The prefix, installed once per test process.
fn prefix() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let prefix = Path::new(env!("CARGO_TARGET_TMPDIR")).join("install-prefix");
        let _ = std::fs::remove_dir_all(&prefix);
        let mut cmd = Command::new(repo().join("ci/install"));
        cmd.arg(&prefix);
        if cfg!(feature = "pmix") {
            cmd.args(["--features", "pmix"]);
        }
        let out = run(cmd, "ci/install", INSTALL_BOUND);
        assert!(out.status.success(), "ci/install failed\n{}", out.text());
        assert_eq!(
            out.stdout.trim(),
            prefix.to_str().expect("a UTF-8 path"),
            "{}",
            out.text()
        );
        prefix
    })
}

fn text(cmd: Command, what: &str) -> String {
    let out = run(cmd, what, Duration::from_secs(60));
    assert!(out.status.success(), "{what}\n{}", out.text());
    out.stdout
}

fn readelf_dynamic(file: &Path) -> String {
    let mut cmd = Command::new("readelf");
    cmd.arg("-d").arg(file);
    text(cmd, "readelf -d")
}

#[test]
fn the_prefix_holds_the_gnu_layout() {
    if !prereq::available(
        "the_prefix_holds_the_gnu_layout",
        &[
            prereq::c_toolchain(),
            prereq::command("readelf"),
            prereq::command("nm"),
        ],
    ) {
        return;
    }
    let p = prefix();
    let link = |name: &str| {
        std::fs::read_link(p.join("lib").join(name))
            .unwrap_or_else(|e| panic!("lib/{name} is not a symbolic link: {e}"))
    };
    let file = format!("libffd.so.{VERSION}");
    let major = VERSION.split('.').next().expect("a major version");
    let soname = format!("libffd.so.{major}");
    assert_eq!(link(&soname), Path::new(&file));
    assert_eq!(link("libffd.so"), Path::new(&soname));
    let dynamic = readelf_dynamic(&p.join("lib").join(&file));
    assert!(
        dynamic.contains(&format!("Library soname: [{soname}]")),
        "{dynamic}"
    );
    for f in ["lib/libffd.a", "include/ffd.h", "bin/ffd"] {
        assert!(p.join(f).is_file(), "{f} is missing");
    }
    assert_eq!(
        std::fs::read_to_string(p.join("include/ffd.h")).expect("ffd.h"),
        std::fs::read_to_string(repo().join("include/ffd.h")).expect("include/ffd.h"),
        "the installed header is the committed one"
    );

    let pkgconfig = p.join("lib/pkgconfig");
    for package in ["ffd", "ffd-static"] {
        let pc = std::fs::read_to_string(pkgconfig.join(format!("{package}.pc")))
            .unwrap_or_else(|e| panic!("lib/pkgconfig/{package}.pc: {e}"));
        assert!(
            pc.starts_with(&format!("prefix={}\n", p.display())),
            "{package}.pc\n{pc}"
        );
        assert!(pc.contains(&format!("Version: {VERSION}\n")), "{pc}");
        let mut cmd = Command::new("pkg-config");
        cmd.env("PKG_CONFIG_PATH", &pkgconfig)
            .args(["--variable=libdir", package]);
        let libdir = text(cmd, "pkg-config --variable=libdir");
        assert_eq!(Path::new(libdir.trim()), p.join("lib"), "{package}");
    }

    let mut cmd = clean_command(p.join("bin/ffd"));
    cmd.env_remove("LD_LIBRARY_PATH").arg("--version");
    assert_eq!(text(cmd, "ffd --version").trim(), format!("ffd {VERSION}"));
}

/// Builds hello.c against the installed `package` with flags from the
/// prefix's pkg-config files alone, runs it on loopback, checks its lines.
fn hello(package: &str, extra: &[String], name: &str) -> PathBuf {
    let p = prefix();
    let mut flags = pkg_config_flags_in(&p.join("lib/pkgconfig"), package);
    // The prefix lies inside the target directory; nothing else may.
    let build_tree = repo().to_str().expect("a UTF-8 path");
    let installed = p.to_str().expect("a UTF-8 path");
    assert!(
        !flags
            .iter()
            .any(|f| f.contains(build_tree) && !f.contains(installed)),
        "{package}: the flags name the build tree: {flags:?}"
    );
    flags.extend_from_slice(extra);
    let exe = compile_c_with("cc", "examples/c/hello.c", &flags, name);
    let mut cmd = clean_command(&exe);
    // Not cargo test's LD_LIBRARY_PATH, which holds the build tree.
    cmd.env_remove("LD_LIBRARY_PATH")
        .env("FFD_DOMAIN", "lo")
        .env("FFD_CORE", "none");
    let out = run(cmd, name, Duration::from_secs(60));
    assert!(out.status.success(), "{name}\n{}", out.text());
    assert_eq!(
        out.stdout,
        format!(
            "version: ffd_version() {VERSION}, FFD_VERSION {VERSION}\n\
             up: rank 0 of 1, alive 1, epoch 0\n\
             finalized: success\n"
        ),
        "{name}: ffd_version() and FFD_VERSION must both be Cargo's {VERSION}\n{}",
        out.text()
    );
    exe
}

fn ldd(exe: &Path) -> String {
    let mut cmd = Command::new("ldd");
    cmd.env_remove("LD_LIBRARY_PATH").arg(exe);
    text(cmd, "ldd")
}

#[test]
fn a_c_program_links_the_installed_shared_library() {
    if !prereq::available(
        "a_c_program_links_the_installed_shared_library",
        &[
            prereq::c_toolchain(),
            prereq::command("readelf"),
            prereq::command("nm"),
        ],
    ) {
        return;
    }
    let lib = prefix().join("lib");
    let exe = hello(
        "ffd",
        &[format!("-Wl,-rpath,{}", lib.display())],
        "hello_installed_shared",
    );
    let loaded = ldd(&exe);
    let major = VERSION.split('.').next().expect("a major version");
    let expected = format!("libffd.so.{major} => {}/libffd.so.{major} ", lib.display());
    assert!(loaded.contains(&expected), "want `{expected}`:\n{loaded}");
}

#[test]
fn a_c_program_links_the_installed_static_library() {
    if !prereq::available(
        "a_c_program_links_the_installed_static_library",
        &[
            prereq::c_toolchain(),
            prereq::command("readelf"),
            prereq::command("nm"),
        ],
    ) {
        return;
    }
    let exe = hello("ffd-static", &[], "hello_installed_static");
    let loaded = ldd(&exe);
    assert!(!loaded.contains("libffd"), "{loaded}");
}

#[test]
fn the_header_version_is_the_cargo_version() {
    if !prereq::available(
        "the_header_version_is_the_cargo_version",
        &[
            prereq::c_toolchain(),
            prereq::command("readelf"),
            prereq::command("nm"),
        ],
    ) {
        return;
    }
    let header = std::fs::read_to_string(repo().join("include/ffd.h")).expect("include/ffd.h");
    assert!(
        header.contains(&format!("#define FFD_VERSION \"{VERSION}\"\n")),
        "include/ffd.h does not define FFD_VERSION \"{VERSION}\""
    );
}

/// The dynamic symbols libffd.so defines, sorted.
fn exported_symbols(lib: &Path) -> Vec<String> {
    let mut cmd = Command::new("nm");
    cmd.args(["-D", "--defined-only"]).arg(lib);
    let mut names: Vec<String> = text(cmd, "nm -D")
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_owned))
        .collect();
    names.sort();
    names
}

#[test]
fn the_exported_symbols_are_the_committed_list() {
    if !prereq::available(
        "the_exported_symbols_are_the_committed_list",
        &[
            prereq::c_toolchain(),
            prereq::command("readelf"),
            prereq::command("nm"),
        ],
    ) {
        return;
    }
    let lib = prefix().join("lib/libffd.so");
    let exported = exported_symbols(&lib);
    let committed_text =
        std::fs::read_to_string(repo().join("include/ffd.symbols")).expect("include/ffd.symbols");
    let committed: Vec<String> = committed_text.lines().map(str::to_owned).collect();
    let added: Vec<&String> = exported.iter().filter(|s| !committed.contains(s)).collect();
    let removed: Vec<&String> = committed.iter().filter(|s| !exported.contains(s)).collect();
    assert!(
        added.is_empty() && removed.is_empty(),
        "libffd.so's exported symbols changed: added {added:?}, removed {removed:?}. \
         A change of the C ABI must be deliberate: if it is, update the list with \
         `nm -D --defined-only {} | awk '{{print $3}}' | sort > include/ffd.symbols` \
         (and the header, and the version)",
        lib.display()
    );
    // Every exported function is declared in the header, and nothing else is.
    let header = std::fs::read_to_string(repo().join("include/ffd.h")).expect("include/ffd.h");
    for name in &exported {
        assert!(
            header.contains(&format!(" {name}(")) || header.contains(&format!("*{name}(")),
            "{name} is exported but include/ffd.h does not declare it"
        );
    }
    assert!(exported.len() >= 20, "{exported:?}");
}

/// What every rank of a job under an installed drop-in gets: ffd on `lo`,
/// unpinned, saying that it is up.
fn preloaded_settings() -> Vec<(&'static str, String)> {
    [
        ("FFD_DOMAIN", "lo"),
        ("FFD_CORE", "none"),
        ("FFD_LOG", "info"),
    ]
    .map(|(k, v)| (k, v.to_owned()))
    .to_vec()
}

/// With Debian's `mpicc` on PATH, plain `ci/install PREFIX` builds the MPI
/// drop-in: `lib/libffd_mpi.so` exports the three MPI functions it
/// intercepts and nothing else, finds the installed libffd through its
/// RUNPATH, and under `LD_PRELOAD` starts ffd inside a plain MPI program's
/// `MPI_Init` (default `abort`: Debian's Open MPI has no ULFM).
#[test]
fn the_mpi_drop_in_is_built_with_the_mpicc_on_path_and_starts_ffd_in_mpi_init() {
    if !prereq::available(
        "the_mpi_drop_in_is_built_with_the_mpicc_on_path_and_starts_ffd_in_mpi_init",
        &[
            prereq::c_toolchain(),
            prereq::command("readelf"),
            prereq::command("nm"),
            prereq::mpirun(),
        ],
    ) {
        return;
    }
    let lib = prefix().join("lib");
    let shim = lib.join("libffd_mpi.so");
    assert!(shim.is_file(), "ci/install built no lib/libffd_mpi.so");
    assert_eq!(
        exported_symbols(&shim),
        ["MPI_Finalize", "MPI_Init", "MPI_Init_thread"]
    );
    let dynamic = readelf_dynamic(&shim);
    let major = VERSION.split('.').next().expect("a major version");
    assert!(
        dynamic.contains(&format!("Shared library: [libffd.so.{major}]")),
        "{dynamic}"
    );
    assert!(
        dynamic.contains(&format!("{}", lib.display())) && dynamic.contains("runpath"),
        "{dynamic}"
    );

    let exe = compile_c_with("mpicc", "tests/c/dropin_hello.c", &[], "dropin_hello");
    let session = capi_support::ScratchDir::new("install-dropin");
    let cmd = debian_preloaded(
        "mpirun",
        &shim,
        &exe,
        2,
        &session.0,
        &preloaded_settings(),
        &[],
    );
    let out = run(cmd, "mpirun dropin_hello", Duration::from_secs(120));
    assert!(out.status.success(), "{}", out.text());
    for r in 0..2 {
        let up =
            format!("libffd_mpi[{r}] info: ffd up, 2 ranks; FFD_MPI_ON_FAILURE=abort (default)");
        assert!(out.stderr.contains(&up), "want `{up}`\n{}", out.text());
        assert!(
            out.stdout.contains(&format!("rank {r}: finalized")),
            "{}",
            out.text()
        );
    }
}

/// With Debian's `oshcc` on PATH, plain `ci/install PREFIX` also builds the
/// OpenSHMEM drop-in: `lib/libffd_shmem.so` exports the MPI and OpenSHMEM
/// entry points it intercepts and nothing else, and under `LD_PRELOAD`
/// starts ffd inside a plain OpenSHMEM program's `shmem_init`.
#[test]
fn the_openshmem_drop_in_is_built_with_the_oshcc_on_path_and_starts_ffd_in_shmem_init() {
    if !prereq::available(
        "the_openshmem_drop_in_is_built_with_the_oshcc_on_path_and_starts_ffd_in_shmem_init",
        &[
            prereq::c_toolchain(),
            prereq::command("nm"),
            prereq::oshrun(),
        ],
    ) {
        return;
    }
    let shim = prefix().join("lib").join("libffd_shmem.so");
    assert!(shim.is_file(), "ci/install built no lib/libffd_shmem.so");
    // Not `_end` (shim/ffd_shmem.map): preloaded, the shim's own would
    // stand for the program's in liboshmem and crash every PE.
    assert_eq!(
        exported_symbols(&shim),
        [
            "MPI_Finalize",
            "MPI_Init",
            "MPI_Init_thread",
            "shmem_finalize",
            "shmem_init",
            "shmem_init_thread",
            "start_pes"
        ]
    );
    let exe = compile_c_with(
        "oshcc",
        "tests/c/dropin_shmem_hello.c",
        &[],
        "dropin_shmem_hello",
    );
    let session = capi_support::ScratchDir::new("install-dropin-shmem");
    let cmd = debian_preloaded(
        "oshrun",
        &shim,
        &exe,
        2,
        &session.0,
        &preloaded_settings(),
        &["--mca", "osc", "^rdma", "-x", "UCX_TLS=self,sm"],
    );
    let out = run(cmd, "oshrun dropin_shmem_hello", Duration::from_secs(120));
    assert!(out.status.success(), "{}", out.text());
    for pe in 0..2 {
        let up = format!("libffd_mpi[{pe}] info: ffd up, 2 ranks;");
        assert!(out.stderr.contains(&up), "want `{up}`\n{}", out.text());
        assert!(
            out.stdout.contains(&format!("PE {pe}: finalized")),
            "{}",
            out.text()
        );
    }
}
