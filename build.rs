//! Generates the C header `ffd.h` from `src/capi/mod.rs` with cbindgen.
//!
//! It is written to `$OUT_DIR/ffd.h` on every build of the C API; the
//! committed `include/ffd.h` is what C hosts compile against, and
//! `tests/capi.rs` fails while the two differ, so a change to the C API
//! without its header fails CI. `FFD_WRITE_HEADER=1 cargo build` also
//! writes `include/ffd.h` (never done implicitly: CI must not rewrite a
//! committed file behind the reviewer's back).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=src/capi/mod.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-env-changed=FFD_WRITE_HEADER");

    let dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml"))
        .unwrap_or_else(|e| panic!("cbindgen.toml: {e}"));
    let version = std::env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/capi/mod.rs"))
        .with_after_include(format!(
            "\n/** The version of ffd this header was generated for (see ffd_version()). */\n\
             #define FFD_VERSION \"{version}\"\n"
        ))
        .generate()
        .unwrap_or_else(|e| panic!("cbindgen could not generate ffd.h from src/capi/mod.rs: {e}"));
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
