//! The C ABI: what an MPI or OpenSHMEM library written in C calls to embed
//! ffd (`include/ffd.h`, generated from this module's files by `build.rs`
//! with cbindgen; `libffd.so` and `libffd.a`).
//!
//! Owns: the exported `ffd_*` functions, their handles, result codes,
//! thread-local error messages and the conversion of events, stats and the
//! embedder's allgather to and from C. Must not: make detection decisions (the
//! runtime does), let a Rust panic unwind into C (every export runs inside
//! [`boundary`] or [`boundary_value`]), write an output parameter when a call
//! fails, or keep a pointer the embedder lent it past the call that lent it
//! (except the callback's `userdata`, which the embedder promises to keep alive
//! until `ffd_finalize` returns).
//!
//! The shape follows rustls-ffi: opaque handles with `_new`/`_free` pairs,
//! numbered result codes with `ffd_strerror`, callbacks taking `userdata`
//! first. Unlike rustls-ffi, a failing call also leaves a detailed message in
//! thread-local storage (`ffd_last_error_message`), because ffd's errors
//! name variables, values, ranks and libfabric texts that no code can carry.
//!
//! Everything `unsafe` in the crate outside `sys/` and `src/fabric/` is here:
//! dereferencing the embedder's pointers, calling its function pointers, and
//! declaring the callback's context sendable; each block says why it holds.
//!
//! The parts, in the header's order:
//! - `types.rs`: the C-visible types (result codes, events, stats, the
//!   embedder's allgather and callback, the opaque handles);
//! - `error.rs`: errors to result codes, the thread-local last message,
//!   the panic boundary, ffd_strerror() and ffd_version();
//! - `config.rs`: ffd_config_t, a typed settings builder;
//! - `lifecycle.rs`: ffd_init() and ffd_finalize() (also in a fork()ed
//!   child, where the handle is a copy of the parent's);
//! - `queries.rs`: what a running detector is asked (ffd_is_alive() ...
//!   ffd_stats()) and ffd_broadcast();
//! - `agree.rs`: agreements (ffd_agree(), ffd_iagree() and its request)
//!   and the latest view (ffd_view()).
//!
//! Every doc comment of their exported items ends up in `include/ffd.h` as
//! a Doxygen comment.

#![allow(non_camel_case_types)]

use std::ffi::{CStr, c_char};

use crate::runtime::Detector;

mod agree;
mod config;
mod error;
mod lifecycle;
mod queries;
mod types;

#[cfg(test)]
mod tests;

pub use agree::*;
pub use config::*;
pub use error::*;
pub use lifecycle::*;
pub use queries::*;
pub use types::*;

use error::{Error, boundary, boundary_value};

// The handle is shared between the embedder's threads: the detector must be `Sync`.
const _: fn() = || {
    fn shared_between_threads<T: Send + Sync>() {}
    shared_between_threads::<Detector>();
};

/// The detector behind a handle argument, if it belongs to this process:
/// in a fork()ed child of the process that called ffd_init(), every call
/// on the handle fails with FFD_ERR_FORKED before it touches anything (a
/// lock another thread of the parent held at the fork stays held in the
/// child, and the descriptors are shared with the parent).
///
/// # Safety
/// `h` is NULL or a live handle from ffd_init(), not finalized during the call.
unsafe fn handle<'a>(h: *const ffd_t) -> Result<&'a ffd_t, Error> {
    // SAFETY: NULL or a live handle (contract); 'a ends with the export's call.
    let h = unsafe { h.as_ref() }.ok_or_else(|| Error::null("the handle"))?;
    match h.detector.forked_from() {
        None => Ok(h),
        Some(pid) => Err(Error::forked(pid)),
    }
}

/// A NUL-terminated UTF-8 argument.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays valid and
/// unchanged during the call.
unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str, Error> {
    if p.is_null() {
        return Err(Error::null(what));
    }
    // SAFETY: non-NULL, and by this function's contract NUL-terminated and
    // valid for the duration of the call, which bounds 'a at the call sites.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map_err(|_| Error::invalid(format!("{what} is not valid UTF-8")))
}

/// Copies `text` into the embedder's buffer `buf` of `len` bytes, NUL-terminated
/// and truncated on a character boundary to `len - 1` bytes; writes the full
/// length (without the NUL) to `out_len` when it is not NULL.
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes of writes; `out_len` is NULL or
/// valid for a write.
unsafe fn write_text(
    text: &str,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> Result<(), Error> {
    if len > 0 {
        if buf.is_null() {
            return Err(Error::null("buf (with a non-zero len)"));
        }
        let mut n = text.len().min(len - 1);
        while !text.is_char_boundary(n) {
            n -= 1;
        }
        // SAFETY: `buf` is valid for `len` bytes (contract) and n + 1 <= len;
        // `text` is a separate Rust allocation, so the ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    if !out_len.is_null() {
        // SAFETY: non-NULL and valid for a write (contract).
        unsafe { *out_len = text.len() };
    }
    Ok(())
}
