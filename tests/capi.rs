//! The C API from C: the committed header matches the build's, and
//! `tests/c/capi_test.c` (every function, error codes, a 3-thread job, a
//! fork()ed child of a process holding a detector) compiles against `include/ffd.h` with the flags of `ci/pkgconfig`'s
//! `ffd.pc` (libffd.so) and `ffd-static.pc` (libffd.a), and runs clean
//! under valgrind in both forms.
//!
//! Valgrind needs no suppression file here: with libfabric 1.17's tcp
//! provider, hwloc 2.9 and the pmix feature built in (PMIx is not
//! initialised by this test) it reports no error and no definite, indirect
//! or possible leak; the few blocks still reachable at exit belong to the
//! C runtime and libfabric's provider registry. The forked child is the
//! one exception, made by the test itself: it leaks what it inherited on
//! purpose (ffd_finalize() in a child must not release the parent's
//! objects), so it turns valgrind's leak check off before it exits, after
//! checking that valgrind counted no error in it.

mod capi_support;

use capi_support::prereq;

use std::time::Duration;

use capi_support::{Output, clean_command, compile_c, repo, run};

/// Bound on one run of the C test under valgrind (about 5 s here).
const RUN_BOUND: Duration = Duration::from_secs(180);

#[test]
fn the_committed_header_is_the_one_the_build_generates() {
    let generated = std::fs::read_to_string(concat!(env!("OUT_DIR"), "/ffd.h"))
        .expect("build.rs writes OUT_DIR/ffd.h");
    let committed =
        std::fs::read_to_string(repo().join("include/ffd.h")).expect("include/ffd.h is committed");
    if generated != committed {
        let first = generated
            .lines()
            .zip(committed.lines())
            .position(|(g, c)| g != c)
            .unwrap_or_else(|| generated.lines().count().min(committed.lines().count()));
        panic!(
            "include/ffd.h differs from what build.rs generates from src/capi/ \
             (first at line {}: generated `{}`, committed `{}`); \
             run `FFD_WRITE_HEADER=1 cargo build` and commit include/ffd.h",
            first + 1,
            generated.lines().nth(first).unwrap_or("<end>"),
            committed.lines().nth(first).unwrap_or("<end>"),
        );
    }
}

fn run_c_test_under_valgrind(package: &str, name: &str) -> Output {
    let exe = compile_c("cc", "tests/c/capi_test.c", package, name);
    let mut cmd = clean_command("valgrind");
    cmd.args([
        "--error-exitcode=99",
        "--leak-check=full",
        "--show-leak-kinds=definite,indirect,possible",
        "--errors-for-leak-kinds=definite,indirect,possible",
        "--num-callers=40",
    ])
    .arg(&exe);
    let out = run(cmd, "valgrind capi_test", RUN_BOUND);
    let text = out.text();
    assert!(
        !out.stdout.contains("not ok"),
        "{name}: a check failed\n{text}"
    );
    let last = out.stdout.lines().last().unwrap_or_default();
    let passed: u32 = last
        .strip_prefix("capi_test: all ")
        .and_then(|rest| rest.strip_suffix(" checks passed"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{name}: unexpected last line `{last}`\n{text}"));
    assert!(passed >= 190, "{name}: only {passed} checks ran\n{text}");
    assert!(
        out.stderr
            .contains("ERROR SUMMARY: 0 errors from 0 contexts"),
        "{name}: valgrind reported errors or leaks\n{text}"
    );
    assert_eq!(out.status.code(), Some(0), "{name}\n{text}");
    out
}

#[test]
fn the_c_test_passes_against_the_shared_library_under_valgrind() {
    if !capi_support::prereq::available(
        "the_c_test_passes_against_the_shared_library_under_valgrind",
        &[prereq::c_toolchain(), prereq::command("valgrind")],
    ) {
        return;
    }
    let out = run_c_test_under_valgrind("ffd", "capi_test_shared");
    // It really used libffd.so: the executable does not contain the API.
    let exe = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi/capi_test_shared");
    let size = std::fs::metadata(&exe).expect("the executable").len();
    assert!(
        size < 1 << 20,
        "{size} bytes: not dynamically linked?\n{}",
        out.text()
    );
}

#[test]
fn the_c_test_passes_against_the_static_library_under_valgrind() {
    if !capi_support::prereq::available(
        "the_c_test_passes_against_the_static_library_under_valgrind",
        &[prereq::c_toolchain(), prereq::command("valgrind")],
    ) {
        return;
    }
    let out = run_c_test_under_valgrind("ffd-static", "capi_test_static");
    let exe = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi/capi_test_static");
    let ldd = run(
        {
            let mut c = std::process::Command::new("ldd");
            c.arg(&exe);
            c
        },
        "ldd",
        Duration::from_secs(30),
    );
    assert!(
        !ldd.stdout.contains("libffd"),
        "the static build loads libffd.so\n{}\n{}",
        ldd.stdout,
        out.text()
    );
}

#[test]
fn the_header_compiles_as_pedantic_c99_and_as_cpp() {
    if !capi_support::prereq::available(
        "the_header_compiles_as_pedantic_c99_and_as_cpp",
        &[prereq::command("cc"), prereq::command("c++")],
    ) {
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi");
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let source = dir.join("header_only.c");
    std::fs::write(
        &source,
        "#include <ffd.h>\nint main(void) { return sizeof(ffd_event_t) > 0 ? 0 : FFD_OK; }\n",
    )
    .expect("write the source");
    let include = repo().join("include");
    for (compiler, std) in [("cc", "-std=c99"), ("g++", "-std=c++11")] {
        let mut cmd = std::process::Command::new(compiler);
        cmd.args([
            std,
            "-pedantic",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsyntax-only",
        ])
        .arg("-I")
        .arg(&include);
        if compiler == "g++" {
            cmd.args(["-x", "c++"]);
        }
        cmd.arg(&source);
        let out = run(cmd, compiler, Duration::from_secs(60));
        assert!(out.status.success(), "{compiler} {std}\n{}", out.text());
    }
}
