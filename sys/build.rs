//! Finds the system libfabric (>= 1.17), generates bindings for it, and
//! compiles C wrappers that export its `static inline` functions.
//!
//! Where libfabric is looked for, in order:
//! 1. `LIBFABRIC_INCLUDE_DIR` (the directory holding `rdma/fabric.h`) and
//!    optionally `LIBFABRIC_LIB_DIR` (holding `libfabric.so`), when set;
//! 2. pkg-config (`libfabric.pc`, honouring `PKG_CONFIG_PATH`).
//!
//! Dependents get the include directory as `DEP_FABRIC_INCLUDE`.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process;

use bindgen::callbacks::{IntKind, ParseCallbacks};

/// The oldest libfabric these bindings are written and tested against.
const MIN_VERSION: (u32, u32) = (1, 17);

fn main() {
    for var in ["LIBFABRIC_INCLUDE_DIR", "LIBFABRIC_LIB_DIR"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    println!("cargo::rerun-if-changed=wrapper.h");
    println!("cargo::rerun-if-changed=macros.c");
    println!("cargo::rerun-if-changed=build.rs");

    let include_dirs = match locate() {
        Ok(dirs) => dirs,
        Err(why) => fail(&why),
    };
    let primary = include_dirs
        .first()
        .cloned()
        .unwrap_or_else(|| PathBuf::from("/usr/include"));
    println!("cargo::metadata=include={}", primary.display());

    generate(&include_dirs);
}

/// Stops the build with one sentence that says what is wrong and what to do.
fn fail(why: &str) -> ! {
    let min = format!("{}.{}", MIN_VERSION.0, MIN_VERSION.1);
    let msg = format!(
        "libfabric >= {min} with headers is required but {why}: install `libfabric-dev` \
         (Debian/Ubuntu) or `libfabric-devel` (RHEL/Fedora), or point LIBFABRIC_INCLUDE_DIR \
         (the directory holding rdma/fabric.h) and LIBFABRIC_LIB_DIR (holding libfabric.so) \
         at your installation."
    );
    println!("cargo::error={msg}");
    eprintln!("error: {msg}");
    process::exit(1);
}

/// Finds the headers and emits the link flags. Returns the include dirs.
fn locate() -> Result<Vec<PathBuf>, String> {
    if let Some(inc) = env::var_os("LIBFABRIC_INCLUDE_DIR") {
        let inc = PathBuf::from(inc);
        let header = inc.join("rdma").join("fabric.h");
        let text = fs::read_to_string(&header).map_err(|e| {
            format!(
                "LIBFABRIC_INCLUDE_DIR={} has no readable rdma/fabric.h ({e})",
                inc.display()
            )
        })?;
        let found = header_version(&text).ok_or_else(|| {
            format!(
                "{} does not define FI_MAJOR_VERSION/FI_MINOR_VERSION",
                header.display()
            )
        })?;
        if found < MIN_VERSION {
            return Err(format!(
                "{} is version {}.{}",
                header.display(),
                found.0,
                found.1
            ));
        }
        if let Some(lib) = env::var_os("LIBFABRIC_LIB_DIR") {
            let lib = PathBuf::from(lib);
            println!("cargo::rustc-link-search=native={}", lib.display());
        }
        println!("cargo::rustc-link-lib=fabric");
        return Ok(vec![inc]);
    }

    let min = format!("{}.{}", MIN_VERSION.0, MIN_VERSION.1);
    match pkg_config::Config::new()
        .atleast_version(&min)
        .cargo_metadata(true)
        .probe("libfabric")
    {
        Ok(lib) => Ok(lib.include_paths),
        Err(e) => {
            // pkg-config's own report is several lines; keep the telling one
            // ("Package libfabric was not found ...", "Requested 'libfabric
            // >= 1.17' but version of libfabric is 1.15.1").
            let text = match &e {
                pkg_config::Error::Failure { output, .. }
                | pkg_config::Error::ProbeFailure { output, .. } => {
                    String::from_utf8_lossy(&output.stderr).into_owned()
                }
                other => other.to_string(),
            };
            let line = text
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("no output")
                .trim_end_matches('.')
                .to_owned();
            Err(format!("pkg-config did not find it ({line})"))
        }
    }
}

/// Reads `FI_MAJOR_VERSION`/`FI_MINOR_VERSION` from `rdma/fabric.h`.
fn header_version(text: &str) -> Option<(u32, u32)> {
    let mut major = None;
    let mut minor = None;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("#define") {
            continue;
        }
        match (words.next(), words.next()) {
            (Some("FI_MAJOR_VERSION"), Some(v)) => major = v.parse().ok(),
            (Some("FI_MINOR_VERSION"), Some(v)) => minor = v.parse().ok(),
            _ => {}
        }
    }
    Some((major?, minor?))
}

/// Gives each `FI_*` integer macro the C type it is used with, instead of
/// bindgen's guess from its value (which would make `FI_MSG` a `u32` and
/// `FI_SOURCE` a `u64`).
#[derive(Debug)]
struct MacroTypes;

impl ParseCallbacks for MacroTypes {
    fn int_macro(&self, name: &str, value: i64) -> Option<IntKind> {
        if !name.starts_with("FI_") {
            return None;
        }
        // A value beyond `int` is a 64-bit flag whatever its name says
        // (libfabric 2.x: FI_EXACT_DIRECTED_RECV, and FI_MR_DMABUF and
        // FI_MR_SINGLE_USE, flags of fi_mr_attr, not mr_mode bits).
        let fits_int = i32::try_from(value).is_ok();
        // Error numbers (fi_errno.h): compared with `int` and `ssize_t` returns.
        let errno = (name.starts_with("FI_E") && name != "FI_EVENT")
            || name == "FI_SUCCESS"
            || name == "FI_ERRNO_OFFSET";
        if errno && fits_int {
            return Some(IntKind::Int);
        }
        // mr_mode bits live in an `int` field (fi_domain_attr::mr_mode).
        if name.starts_with("FI_MR_") && fits_int {
            return Some(IntKind::Int);
        }
        if name.ends_with("_VERSION") {
            return Some(IntKind::U32);
        }
        // Everything else is a 64-bit flag word (caps, op flags) or a
        // 64-bit sentinel (FI_ADDR_UNSPEC, FI_KEY_NOTAVAIL).
        Some(IntKind::U64)
    }
}

fn generate(include_dirs: &[PathBuf]) {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let wrappers = out.join("fabric_static_fns");
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let header = manifest.join("wrapper.h");

    let mut builder = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .clang_args(include_dirs.iter().map(|d| format!("-I{}", d.display())))
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .parse_callbacks(Box::new(MacroTypes))
        // The API: functions, their structs, and the constants.
        .allowlist_function("fi_.*")
        .allowlist_type("fi_.*|fid.*")
        .allowlist_var("FI_.*")
        // libfabric's flag words are `#define`d u64 constants (typed by
        // MacroTypes), not enums; its enums are plain value sets (wait
        // object, CQ format, endpoint type, ...), so constants suit them.
        .default_enum_style(bindgen::EnumVariation::Consts)
        .translate_enum_integer_types(true)
        .size_t_is_usize(true)
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(true)
        .prepend_enum_name(false)
        .rust_target(bindgen::RustTarget::stable(85, 0).expect("a known Rust version"))
        .rust_edition(bindgen::RustEdition::Edition2024)
        .wrap_unsafe_ops(true)
        // The data path is `static inline`: export each through a C wrapper.
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers);
    if let Some(target) = env::var_os("TARGET") {
        builder = builder.clang_arg(format!("--target={}", target.to_string_lossy()));
    }
    let bindings = builder
        .generate()
        .unwrap_or_else(|e| fail(&format!("bindgen could not read its headers ({e})")));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs to OUT_DIR");

    compile_wrappers(&wrappers.with_extension("c"), &manifest, include_dirs);
}

fn compile_wrappers(c_file: &Path, manifest: &Path, include_dirs: &[PathBuf]) {
    let mut build = cc::Build::new();
    build
        .file(c_file)
        .file(manifest.join("macros.c"))
        .include(manifest)
        .warnings(false);
    for dir in include_dirs {
        build.include(dir);
    }
    build.compile("fabric_static_fns");
}
