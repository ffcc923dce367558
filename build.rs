//! Generates the C header `ffd.h` from the C ABI's files (`src/capi/`) with
//! cbindgen.
//!
//! It is written to `$OUT_DIR/ffd.h` on every build of the C API; the
//! committed `include/ffd.h` is what C hosts compile against, and
//! `tests/capi.rs` fails while the two differ, so a change to the C API
//! without its header fails CI. `FFD_WRITE_HEADER=1 cargo build` also
//! writes `include/ffd.h` (never done implicitly: CI must not rewrite a
//! committed file behind the reviewer's back).

use std::path::PathBuf;

/// The files of `src/capi/` that declare C items, in the header's order
/// (cbindgen keeps the functions in source order).
const CAPI_FILES: [&str; 6] = [
    "types.rs",
    "error.rs",
    "config.rs",
    "lifecycle.rs",
    "queries.rs",
    "agree.rs",
];

/// The files of `src/capi/` that declare none: the module's root (helpers
/// and the list of parts) and the Rust tests.
const NOT_IN_HEADER: [&str; 2] = ["mod.rs", "tests.rs"];

fn main() {
    let dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let capi = dir.join("src/capi");
    // A new file must be listed above, or its exports would silently miss
    // the header.
    for entry in std::fs::read_dir(&capi).unwrap_or_else(|e| panic!("src/capi: {e}")) {
        let name = entry.expect("a directory entry").file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".rs")
            && !CAPI_FILES.contains(&&*name)
            && !NOT_IN_HEADER.contains(&&*name)
        {
            panic!("build.rs: add src/capi/{name} to CAPI_FILES (or NOT_IN_HEADER)");
        }
    }
    println!("cargo:rerun-if-changed=src/capi");
    for file in CAPI_FILES.iter().chain(&NOT_IN_HEADER) {
        println!("cargo:rerun-if-changed=src/capi/{file}");
    }
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-env-changed=FFD_WRITE_HEADER");

    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml"))
        .unwrap_or_else(|e| panic!("cbindgen.toml: {e}"));
    let version = std::env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    let mut builder = cbindgen::Builder::new().with_config(config);
    for file in CAPI_FILES {
        builder = builder.with_src(capi.join(file));
    }
    let bindings = builder
        .with_after_include(format!(
            "\n/** The version of ffd this header was generated for (see ffd_version()). */\n\
             #define FFD_VERSION \"{version}\"\n"
        ))
        .generate()
        .unwrap_or_else(|e| panic!("cbindgen could not generate ffd.h from src/capi: {e}"));
    bindings.write_to_file(out.join("ffd.h"));
    if std::env::var_os("FFD_WRITE_HEADER").is_some_and(|v| v == "1") {
        bindings.write_to_file(dir.join("include/ffd.h"));
    }

    // libffd.so's SONAME, which C programs record and the loader looks for:
    // libffd.so.<major> (ci/install adds the versioned file and the links;
    // ci/pkgconfig the libffd.so.<major> link in the build tree).
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets it");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libffd.so.{major}");

    // Built against another libfabric (sys/build.rs reads the same two
    // variables): libffd.so loads that one, by a RUNPATH, and no other.
    println!("cargo:rerun-if-env-changed=LIBFABRIC_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=LIBFABRIC_LIB_DIR");
    if let (Some(_), Some(lib)) = (
        std::env::var_os("LIBFABRIC_INCLUDE_DIR"),
        std::env::var_os("LIBFABRIC_LIB_DIR"),
    ) {
        let lib = std::fs::canonicalize(&lib).unwrap_or_else(|_| PathBuf::from(lib));
        println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,{}", lib.display());
    }
}
