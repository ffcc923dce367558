//! Errors on their way to C: Rust errors to result codes, the calling
//! thread's last detailed message, the panic boundary every export runs
//! in, and the static texts (ffd_strerror(), ffd_last_error_message(),
//! ffd_version()).
//!
//! Owns: which code each error becomes, and the guarantee that no Rust
//! panic unwinds into C. Must not: lose a message (a failing call always
//! leaves one), or keep one across threads (messages are thread-local, as
//! errno).

use std::cell::RefCell;
use std::ffi::{CStr, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::ffd_result::{self, *};
use super::write_text;
use crate::bootstrap::BootstrapError;
use crate::config::ConfigError;
use crate::runtime::{AgreeError, DetectorError, StartError};

impl ffd_result {
    pub(super) const ALL: [ffd_result; 15] = [
        FFD_OK,
        FFD_NO_EVENT,
        FFD_BUFFER_TOO_SMALL,
        FFD_STALE,
        FFD_ERR_NULL,
        FFD_ERR_INVALID_ARGUMENT,
        FFD_ERR_CONFIG,
        FFD_ERR_BOOTSTRAP,
        FFD_ERR_FABRIC,
        FFD_ERR_SYSTEM,
        FFD_ERR_STOPPED,
        FFD_ERR_PAYLOAD_TOO_LARGE,
        FFD_ERR_PANIC,
        FFD_ERR_FORKED,
        FFD_ERR_BUSY,
    ];

    fn text(self) -> &'static CStr {
        match self {
            FFD_OK => c"success",
            FFD_NO_EVENT => c"no event is queued",
            FFD_BUFFER_TOO_SMALL => c"the output needs a larger buffer",
            FFD_STALE => c"the detector is no longer running: the answer is stale",
            FFD_ERR_NULL => c"a required pointer argument is NULL",
            FFD_ERR_INVALID_ARGUMENT => c"invalid argument",
            FFD_ERR_CONFIG => c"a setting's value is not accepted",
            FFD_ERR_BOOTSTRAP => c"the address exchange (bootstrap) failed",
            FFD_ERR_FABRIC => c"libfabric error",
            FFD_ERR_SYSTEM => c"operating system error",
            FFD_ERR_STOPPED => c"the detector has stopped (see ffd_state())",
            FFD_ERR_PAYLOAD_TOO_LARGE => c"the payload is too large",
            FFD_ERR_PANIC => c"internal error (a panic was caught)",
            FFD_ERR_FORKED => {
                c"the handle belongs to the parent process: a fork()ed child must call ffd_init anew"
            }
            FFD_ERR_BUSY => c"too many payloads queued for the progress thread: retry later",
        }
    }
}

/// An error on its way to C: the code and the detailed message.
#[derive(Debug)]
pub(super) struct Error {
    pub(super) code: ffd_result,
    pub(super) message: String,
}

impl Error {
    pub(super) fn new(code: ffd_result, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
        }
    }
    pub(super) fn null(what: &str) -> Error {
        Error::new(FFD_ERR_NULL, format!("{what} is NULL"))
    }
    pub(super) fn invalid(message: impl Into<String>) -> Error {
        Error::new(FFD_ERR_INVALID_ARGUMENT, message)
    }
    /// The handle is a fork()ed child's copy of the one process `pid` holds.
    pub(super) fn forked(pid: u32) -> Error {
        Error::new(
            FFD_ERR_FORKED,
            format!(
                "the handle belongs to process {pid}, which called ffd_init and runs the \
                 detector; this process ({}) is a fork()ed child of it and holds only a copy: \
                 call ffd_init anew here if this process needs a detector",
                std::process::id()
            ),
        )
    }
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Error {
        Error::new(FFD_ERR_CONFIG, e.to_string())
    }
}

impl From<BootstrapError> for Error {
    fn from(e: BootstrapError) -> Error {
        match e {
            BootstrapError::Config(e) => e.into(),
            e => Error::new(FFD_ERR_BOOTSTRAP, e.to_string()),
        }
    }
}

impl From<StartError> for Error {
    fn from(e: StartError) -> Error {
        use crate::runtime::placement::PlacementError;
        let code = match &e {
            StartError::Fabric(_) => FFD_ERR_FABRIC,
            StartError::Exchange(_) => FFD_ERR_BOOTSTRAP,
            StartError::Engine(_) | StartError::Placement(PlacementError::CpuNotAllowed { .. }) => {
                FFD_ERR_CONFIG
            }
            _ => FFD_ERR_SYSTEM,
        };
        Error::new(code, e.to_string())
    }
}

impl From<AgreeError> for Error {
    fn from(e: AgreeError) -> Error {
        let code = match e {
            AgreeError::OnProgressThread => FFD_ERR_INVALID_ARGUMENT,
            AgreeError::Left | AgreeError::Excluded | AgreeError::Stopped(_) => FFD_ERR_STOPPED,
            AgreeError::Forked { .. } => FFD_ERR_FORKED,
        };
        Error::new(code, e.to_string())
    }
}

impl From<DetectorError> for Error {
    fn from(e: DetectorError) -> Error {
        let code = match e {
            DetectorError::Stopped => FFD_ERR_STOPPED,
            DetectorError::PayloadTooLarge { .. } => FFD_ERR_PAYLOAD_TOO_LARGE,
            DetectorError::Forked { .. } => FFD_ERR_FORKED,
            DetectorError::Busy { .. } => FFD_ERR_BUSY,
        };
        Error::new(code, e.to_string())
    }
}

thread_local! {
    /// The detailed message of this thread's last failed call.
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

pub(super) fn set_last_error(message: String) {
    // `try_with`: during thread teardown there is nowhere to keep it.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            *slot = message;
        }
    });
}

pub(super) fn panic_text(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Runs the body of an export that returns a result code: no panic crosses
/// into C, and a failure leaves `function: message` for the calling thread.
pub(super) fn boundary(
    function: &'static str,
    body: impl FnOnce() -> Result<ffd_result, Error>,
) -> ffd_result {
    boundary_value(function, FFD_ERR_PANIC, |e| e.code, body)
}

/// Like [`boundary`], for exports that return a value: `on_error` turns an
/// error into the returned value, `on_panic` is returned after a panic.
pub(super) fn boundary_value<T>(
    function: &'static str,
    on_panic: T,
    on_error: impl FnOnce(&Error) -> T,
    body: impl FnOnce() -> Result<T, Error>,
) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => value,
        Ok(Err(e)) => {
            set_last_error(format!("{function}: {}", e.message));
            on_error(&e)
        }
        Err(payload) => {
            set_last_error(format!(
                "{function}: internal error, please report it: panicked: {}",
                panic_text(payload.as_ref())
            ));
            on_panic
        }
    }
}

/// The short, static description of a result code ("unknown ffd result
/// code" for codes this version does not define). Never NULL; the string is
/// static: do not free it. Any thread.
#[unsafe(no_mangle)]
pub extern "C" fn ffd_strerror(code: c_int) -> *const c_char {
    ffd_result::ALL
        .iter()
        .find(|r| **r as c_int == code)
        .map_or(c"unknown ffd result code", |r| r.text())
        .as_ptr()
}

/// The detailed message of the calling thread's most recent failed ffd call
/// (e.g. `ffd_config_set: FFD_PERIOD=`10` has no unit; accepted: a number
/// with a unit ns|us|ms|s, e.g. `10ms``), or "" if none failed yet. Calls
/// that succeed leave it unchanged, as errno.
///
/// Copies it into `buf` (`len` bytes), NUL-terminated, truncated to
/// `len - 1` bytes if needed; `buf` may be NULL when `len` is 0. Writes the
/// message's full length (without the NUL) to `*out_len` unless `out_len`
/// is NULL, so a caller can size its buffer. Thread-local: any thread.
///
/// @return FFD_OK, or FFD_ERR_NULL if `buf` is NULL with a non-zero `len`.
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes; `out_len` is NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_last_error_message(
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> ffd_result {
    boundary("ffd_last_error_message", || {
        let text = LAST_ERROR.with(|m| m.borrow().clone());
        // SAFETY: the pointers come with this function's own contract.
        unsafe { write_text(&text, buf, len, out_len) }?;
        Ok(FFD_OK)
    })
}

/// The version of the library, e.g. "0.1.0" (the header's FFD_VERSION is
/// the version it was generated for). Static: do not free. Any thread.
#[unsafe(no_mangle)]
pub extern "C" fn ffd_version() -> *const c_char {
    const VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => panic!("the package version has no NUL inside"),
        };
    VERSION.as_ptr()
}
