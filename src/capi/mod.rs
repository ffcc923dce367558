//! The C ABI: what an MPI or OpenSHMEM library written in C calls to embed
//! ffd (`include/ffd.h`, generated from this file by `build.rs` with
//! cbindgen; `libffd.so` and `libffd.a`).
//!
//! Owns: the exported `ffd_*` functions, their handles, result codes,
//! thread-local error messages and the conversion of events, stats and the
//! host's allgather to and from C. Must not: make detection decisions (the
//! runtime does), let a Rust panic unwind into C (every export runs inside
//! [`boundary`] or [`boundary_value`]), write an output parameter when a call
//! fails, or keep a pointer the host lent it past the call that lent it
//! (except the callback's `userdata`, which the host promises to keep alive
//! until `ffd_finalize` returns).
//!
//! The shape follows rustls-ffi: opaque handles with `_new`/`_free` pairs,
//! numbered result codes with `ffd_strerror`, callbacks taking `userdata`
//! first. Unlike rustls-ffi, a failing call also leaves a detailed message in
//! thread-local storage (`ffd_last_error_message`), because ffd's errors
//! name variables, values, ranks and libfabric texts that no code can carry.
//!
//! Everything `unsafe` in the crate outside `sys/` and `src/fabric/` is here:
//! dereferencing the host's pointers, calling its function pointers, and
//! declaring the callback's context sendable; each block says why it holds.
//!
//! Every doc comment below ends up in `include/ffd.h` as a Doxygen comment.

#![allow(non_camel_case_types)]

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::os::fd::AsRawFd;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use crate::bootstrap::tcp;
use crate::bootstrap::{self, Bootstrap, BootstrapError, HostAllgather};
use crate::config::{self, Config, ConfigError, ConfigWarning, Env, EnvPolicy, LogLevel};
use crate::protocol::{Cause, Event, Rank};
use crate::runtime::{Detector, DetectorError, DetectorEvent, StartError};

#[cfg(test)]
mod tests;

// The handle is shared between host threads: the detector must be `Sync`.
const _: fn() = || {
    fn shared_between_threads<T: Send + Sync>() {}
    shared_between_threads::<Detector>();
};

/// Result codes of the ffd C API. `FFD_OK` (0) is success, positive codes
/// are informational, negative codes are errors. Every failing call also
/// leaves a detailed message for the calling thread
/// (ffd_last_error_message()); ffd_strerror() gives the short text of a code.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ffd_result {
    /// Success.
    FFD_OK = 0,
    /// ffd_next_event(): no event is queued (not an error).
    FFD_NO_EVENT = 1,
    /// A required pointer argument (or the handle) is NULL.
    FFD_ERR_NULL = -1,
    /// An argument is out of range or malformed (unknown variable name, text
    /// that is not UTF-8, rank not below size, a call from the wrong thread).
    FFD_ERR_INVALID_ARGUMENT = -2,
    /// A setting's value is not accepted; the message names the variable,
    /// the value and the accepted form.
    FFD_ERR_CONFIG = -3,
    /// The address exchange at ffd_init() failed (the host's allgather
    /// returned non-zero, PMIx or the TCP rendezvous failed, ranks disagree
    /// on size, version or settings, no bootstrap available).
    FFD_ERR_BOOTSTRAP = -4,
    /// libfabric refused something (no such provider or domain, endpoint,
    /// memory registration); the message carries libfabric's error text.
    FFD_ERR_FABRIC = -5,
    /// The operating system refused something (threads, sockets, hwloc,
    /// pinning, the host name).
    FFD_ERR_SYSTEM = -6,
    /// The detector has stopped: this rank was excluded (declared failed by
    /// the others) or its progress thread ended.
    FFD_ERR_STOPPED = -7,
    /// ffd_broadcast(): the payload exceeds the limit (8 KiB).
    FFD_ERR_PAYLOAD_TOO_LARGE = -8,
    /// A bug inside ffd: a Rust panic was caught at the API boundary. The
    /// message says where; please report it.
    FFD_ERR_PANIC = -9,
}

use ffd_result::*;

impl ffd_result {
    const ALL: [ffd_result; 11] = [
        FFD_OK,
        FFD_NO_EVENT,
        FFD_ERR_NULL,
        FFD_ERR_INVALID_ARGUMENT,
        FFD_ERR_CONFIG,
        FFD_ERR_BOOTSTRAP,
        FFD_ERR_FABRIC,
        FFD_ERR_SYSTEM,
        FFD_ERR_STOPPED,
        FFD_ERR_PAYLOAD_TOO_LARGE,
        FFD_ERR_PANIC,
    ];

    fn text(self) -> &'static CStr {
        match self {
            FFD_OK => c"success",
            FFD_NO_EVENT => c"no event is queued",
            FFD_ERR_NULL => c"a required pointer argument is NULL",
            FFD_ERR_INVALID_ARGUMENT => c"invalid argument",
            FFD_ERR_CONFIG => c"a setting's value is not accepted",
            FFD_ERR_BOOTSTRAP => c"the address exchange (bootstrap) failed",
            FFD_ERR_FABRIC => c"libfabric error",
            FFD_ERR_SYSTEM => c"operating system error",
            FFD_ERR_STOPPED => c"the detector has stopped",
            FFD_ERR_PAYLOAD_TOO_LARGE => c"the payload is too large",
            FFD_ERR_PANIC => c"internal error (a panic was caught)",
        }
    }
}

/// What an event is about (ffd_event_t::kind).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ffd_event_kind {
    /// `rank` has failed (final: never withdrawn). `detector` declared it,
    /// `cause` says how this rank learned it, `hops` how far the news
    /// travelled.
    FFD_EVENT_FAILED = 1,
    /// `rank` left cleanly (its ffd_finalize()); not a failure, `epoch`
    /// unchanged.
    FFD_EVENT_LEFT = 2,
    /// The others declared *this* rank failed (`rank` is this rank,
    /// `detector` the rank that told it). Fail-stop: the detector stops and
    /// the host must stop using this process.
    FFD_EVENT_SELF_EXCLUDED = 3,
    /// `rank`, this rank's emitter, was silent for `stalled_ns` and then
    /// heartbeated again: a slow but live process. A warning, never a failure.
    FFD_EVENT_SLOW_EMITTER = 4,
    /// An application payload sent with ffd_broadcast() by `rank`, sequence
    /// number `seq`, bytes at `payload` (`payload_len` of them).
    FFD_EVENT_PAYLOAD = 5,
}

/// How this rank learned of a failure (ffd_event_t::cause).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ffd_cause {
    /// Not a FAILED event.
    FFD_CAUSE_NONE = 0,
    /// This rank observed the failed rank and its heartbeats stopped for the
    /// timeout.
    FFD_CAUSE_TIMEOUT = 1,
    /// A transport error on this rank's heartbeat link (a crashed process is
    /// usually found this way, well before the timeout).
    FFD_CAUSE_INBAND = 2,
    /// Another rank's notice (the reliable broadcast) told this rank.
    FFD_CAUSE_NOTICE = 3,
}

/// One event, as the callback and ffd_next_event() see it. Fields that do
/// not apply to the kind are 0 (`payload` NULL).
///
/// Ownership of `payload`: the bytes belong to ffd. In a callback they are
/// valid until the callback returns; from ffd_next_event() they are valid
/// until the next ffd_next_event() or ffd_finalize() on the same handle.
/// Copy them to keep them.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ffd_event_t {
    pub kind: ffd_event_kind,
    /// The rank the event is about: the failed, departed or slow rank, the
    /// payload's origin, or this rank for SELF_EXCLUDED.
    pub rank: u32,
    /// FAILED: the rank that declared the failure (this rank for TIMEOUT and
    /// INBAND, the notice's origin for NOTICE). SELF_EXCLUDED: the rank that
    /// told this rank. Otherwise 0.
    pub detector: u32,
    /// FAILED: how this rank learned it. Otherwise FFD_CAUSE_NONE.
    pub cause: ffd_cause,
    /// FAILED: overlay hops the news travelled (0 when detected here).
    pub hops: u32,
    /// Failures known to this rank once this event was applied.
    pub epoch: u64,
    /// When this rank learned it, in ns since its ffd_init().
    pub time_ns: u64,
    /// SLOW_EMITTER: how long the emitter was silent, in ns.
    pub stalled_ns: u64,
    /// PAYLOAD: the sequence number of the payload from its origin.
    pub seq: u64,
    /// PAYLOAD: the bytes (see the ownership note above); NULL otherwise.
    pub payload: *const u8,
    /// PAYLOAD: the number of bytes at `payload`.
    pub payload_len: usize,
}

/// The main counters of a detector (ffd_stats()), as last published by its
/// progress thread (every 50 ms).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ffd_stats_t {
    /// Time since ffd_init(), in ns.
    pub uptime_ns: u64,
    /// Failures known to this rank when the counters were published (the
    /// live value is ffd_epoch()'s).
    pub epoch: u64,
    /// Heartbeat RDMA writes posted to this rank's observer.
    pub heartbeats_sent: u64,
    /// Heartbeat writes that completed.
    pub heartbeats_completed: u64,
    /// Posts refused by the provider (-FI_EAGAIN and kin).
    pub posts_refused: u64,
    /// Transport errors (error completions, failed posts) seen.
    pub transport_errors: u64,
    /// Peers declared unreachable after a run of refused posts.
    pub unreachable_verdicts: u64,
    /// Protocol messages sent and received over the fabric.
    pub messages_sent: u64,
    pub messages_received: u64,
    /// Messages dropped as malformed, foreign (wrong job key) or unsafe.
    pub messages_rejected: u64,
    /// Failure notices sent, received, and forwarded for others.
    pub notices_sent: u64,
    pub notices_received: u64,
    pub notices_forwarded: u64,
    /// Failures this rank learned, by cause.
    pub detections_timeout: u64,
    pub detections_inband: u64,
    pub detections_notice: u64,
    /// Clean departures this rank learned.
    pub departures_learned: u64,
    /// Times this rank re-attached the ring around a failed emitter.
    pub mendings: u64,
    /// Slow-emitter warnings (FFD_EVENT_SLOW_EMITTER).
    pub slow_emitter_warnings: u64,
    /// Application payloads delivered to this rank.
    pub payloads_delivered: u64,
    /// Events dropped because the queue (FFD_EVENT_QUEUE) was full; the
    /// failed set stays exact (re-read ffd_failed_ranks()).
    pub events_dropped: u64,
    /// Progress-thread wake-ups for a deadline, and the latest one past its
    /// deadline in ns: the jitter that causes false positives when it
    /// approaches the timeout.
    pub wakeups: u64,
    pub wakeup_late_max_ns: u64,
    /// The CPU the progress thread is pinned to, or -1 when unpinned.
    pub pinned_cpu: i64,
}

/// The host's fixed-length allgather: every rank contributes `len` bytes at
/// `mine` (the same `len` on every rank) and receives every rank's bytes in
/// `all` (`len * size` bytes), rank r's at offset `r * len`. Returns 0 on
/// success; any other value fails ffd_init() with FFD_ERR_BOOTSTRAP (the
/// message shows the value). Called on the thread that calls ffd_init(),
/// only during ffd_init(), a few times, the same number of times on every
/// rank. `mine` and `all` are valid only during the call.
pub type ffd_allgather_fn = Option<
    unsafe extern "C" fn(
        userdata: *mut c_void,
        mine: *const c_void,
        len: usize,
        all: *mut c_void,
    ) -> c_int,
>;

/// The host's out-of-band collective for ffd_init()'s address exchange, as
/// in UCC's OOB: an MPI library passes MPI_Allgather over MPI_COMM_WORLD
/// (`MPI_BYTE`, count `len`), an OpenSHMEM library shmem_fcollect or its
/// PMI. `rank` becomes this process's ffd rank, the rank every other call
/// and every event use; pass the MPI_COMM_WORLD rank (or the PE number).
/// ffd copies the struct: it need not outlive ffd_init().
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ffd_oob_t {
    /// This process's rank, 0 <= rank < size.
    pub rank: c_int,
    /// The number of ranks in the job.
    pub size: c_int,
    /// The allgather (see ffd_allgather_fn); must not be NULL.
    pub allgather: ffd_allgather_fn,
    /// Passed as the first argument of every `allgather` call.
    pub userdata: *mut c_void,
}

/// An event callback (ffd_config_set_callback()). It runs **on the
/// detector's progress thread**, once per event, before the event is queued
/// for ffd_next_event(). It must return quickly and never block (heartbeats
/// and detection wait while it runs), must not call ffd_finalize() (that
/// fails with FFD_ERR_INVALID_ARGUMENT) and must not throw C++ exceptions.
/// Other ffd calls (ffd_is_alive(), ffd_broadcast(), ...) are allowed.
/// `event` and its payload are valid only during the call.
pub type ffd_event_callback =
    Option<unsafe extern "C" fn(userdata: *mut c_void, event: *const ffd_event_t)>;

/// Settings for ffd_init(): the `FFD_*` variables (see `ffd info`) and an
/// optional event callback. Create with ffd_config_new() or
/// ffd_config_from_env(), free with ffd_config_free(). Not thread-safe:
/// one thread at a time per config. ffd_init() copies what it needs, so the
/// config may be freed right after it.
pub struct ffd_config_t {
    /// Variable name to value, applied over the defaults at ffd_init().
    /// Known names only, except unknown `FFD_*` names read from the
    /// environment (kept so that ffd_init() warns about them).
    vars: BTreeMap<String, String>,
    callback: Option<HostCallback>,
}

/// A running detector, from ffd_init() to ffd_finalize(). Every function
/// taking a `const ffd_t *` may be called from any thread, concurrently;
/// ffd_is_alive(), ffd_epoch() and ffd_failed_ranks() never take a lock.
pub struct ffd_t {
    detector: Detector,
    /// The event ffd_next_event() returned last: its payload stays valid
    /// until the next call.
    last_event: Mutex<Option<DetectorEvent>>,
}

/// The host's callback and its context, called on the progress thread.
#[derive(Clone, Copy)]
struct HostCallback {
    f: unsafe extern "C" fn(*mut c_void, *const ffd_event_t),
    userdata: *mut c_void,
}

impl HostCallback {
    fn call(&self, event: &ffd_event_t) {
        // SAFETY: the host's callback with its own userdata, callable from
        // this (progress) thread until ffd_finalize returns
        // (ffd_config_set_callback's contract); `event` and the payload it
        // points into outlive the call.
        unsafe { (self.f)(self.userdata, event) }
    }
}

// SAFETY: `userdata` is the host's pointer, used only as the first argument
// of the host's callback. ffd_config_set_callback() documents that the
// callback runs on ffd's progress thread with that pointer, so the host
// promised the pair may be used from another thread; ffd never dereferences it.
unsafe impl Send for HostCallback {}

/// An error on its way to C: the code and the detailed message.
#[derive(Debug)]
struct Error {
    code: ffd_result,
    message: String,
}

impl Error {
    fn new(code: ffd_result, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
        }
    }
    fn null(what: &str) -> Error {
        Error::new(FFD_ERR_NULL, format!("{what} is NULL"))
    }
    fn invalid(message: impl Into<String>) -> Error {
        Error::new(FFD_ERR_INVALID_ARGUMENT, message)
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

impl From<DetectorError> for Error {
    fn from(e: DetectorError) -> Error {
        let code = match e {
            DetectorError::Stopped => FFD_ERR_STOPPED,
            DetectorError::PayloadTooLarge { .. } => FFD_ERR_PAYLOAD_TOO_LARGE,
        };
        Error::new(code, e.to_string())
    }
}

thread_local! {
    /// The detailed message of this thread's last failed call.
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
    /// This thread is running a host event callback (it is a progress thread).
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

fn set_last_error(message: String) {
    // `try_with`: during thread teardown there is nowhere to keep it.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            *slot = message;
        }
    });
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Runs the body of an export that returns a result code: no panic crosses
/// into C, and a failure leaves `function: message` for the calling thread.
fn boundary(
    function: &'static str,
    body: impl FnOnce() -> Result<ffd_result, Error>,
) -> ffd_result {
    boundary_value(function, FFD_ERR_PANIC, |e| e.code, body)
}

/// Like [`boundary`], for exports that return a value: `on_error` turns an
/// error into the returned value, `on_panic` is returned after a panic.
fn boundary_value<T>(
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

/// Copies `text` into the host's buffer `buf` of `len` bytes, NUL-terminated
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

// ---------------------------------------------------------------------------
// Result codes and messages

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

// ---------------------------------------------------------------------------
// Configuration

/// Checks one variable's value on its own: the parse and the range check of
/// its setting (the cross-check of timeout and period waits for ffd_init).
fn check_setting(name: &str, value: &str) -> Result<(), Error> {
    let Some(var) = config::variable(name) else {
        let suggestion = Env::from_pairs([(name, value)])
            .unknown_variables()
            .into_iter()
            .find_map(|w| match w {
                ConfigWarning::UnknownVariable { suggestion, .. } => suggestion,
                _ => None,
            });
        return Err(Error::invalid(match suggestion {
            Some(s) => format!("{name} is not an ffd variable (did you mean {s}?)"),
            None => format!("{name} is not an ffd variable (`ffd info` lists them)"),
        }));
    };
    let env = Env::from_pairs([(var.name, value)]);
    match var.name {
        config::var::BOOTSTRAP_TIMEOUT => {
            tcp::timeout_from_env(&env)?;
        }
        // Checked together when a TCP bootstrap is used.
        config::var::BOOTSTRAP | config::var::RANK | config::var::SIZE => {}
        _ => match Config::builder().build_with_env(&env, EnvPolicy::Override) {
            Ok(_) | Err(ConfigError::TimeoutNotAbovePeriod { .. }) => {}
            Err(e) => return Err(e.into()),
        },
    }
    Ok(())
}

impl ffd_config_t {
    fn new() -> ffd_config_t {
        ffd_config_t {
            vars: BTreeMap::new(),
            callback: None,
        }
    }

    /// The `FFD_*` variables of the process environment over this config's,
    /// each checked first; on error nothing changes.
    fn load_env(&mut self) -> Result<(), Error> {
        let env = Env::process();
        match Config::builder().build_with_env(&env, EnvPolicy::Override) {
            Ok(_) | Err(ConfigError::TimeoutNotAbovePeriod { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        tcp::timeout_from_env(&env)?;
        for (name, value) in env.iter() {
            self.vars.insert(name.to_owned(), value.to_owned());
        }
        Ok(())
    }

    fn env(&self) -> Env {
        Env::from_pairs(self.vars.iter().map(|(k, v)| (k.clone(), v.clone())))
    }

    /// The effective settings: defaults overridden by this config's variables.
    fn resolve(&self) -> Result<Config, Error> {
        Ok(Config::builder().build_with_env(&self.env(), EnvPolicy::Override)?)
    }
}

/// Creates a config holding the defaults (see `ffd info`); the environment
/// is not read (ffd_config_load_env() does that). Free it with
/// ffd_config_free().
///
/// @param[out] out receives the new config on success.
/// @return FFD_OK, or FFD_ERR_NULL.
///
/// # Safety
/// `out` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_new(out: *mut *mut ffd_config_t) -> ffd_result {
    boundary("ffd_config_new", || {
        if out.is_null() {
            return Err(Error::null("out"));
        }
        let cfg = Box::into_raw(Box::new(ffd_config_t::new()));
        // SAFETY: `out` is non-NULL and valid for a write (contract).
        unsafe { *out = cfg };
        Ok(FFD_OK)
    })
}

/// Creates a config from the process environment's `FFD_*` variables over
/// the defaults (as ffd_config_new() then ffd_config_load_env()). Later
/// ffd_config_set() calls override what the environment said; unknown
/// `FFD_*` names are kept and warned about by ffd_init().
///
/// @param[out] out receives the new config on success.
/// @return FFD_OK, FFD_ERR_NULL, or FFD_ERR_CONFIG when a variable's value
/// is not accepted (the message names it, its value and the accepted form).
///
/// # Safety
/// `out` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_from_env(out: *mut *mut ffd_config_t) -> ffd_result {
    boundary("ffd_config_from_env", || {
        if out.is_null() {
            return Err(Error::null("out"));
        }
        let mut cfg = ffd_config_t::new();
        cfg.load_env()?;
        // SAFETY: `out` is non-NULL and valid for a write (contract).
        unsafe { *out = Box::into_raw(Box::new(cfg)) };
        Ok(FFD_OK)
    })
}

/// Applies the process environment's `FFD_*` variables over what `cfg`
/// holds: call it after setting the host's own defaults with
/// ffd_config_set() to let users override them, as HPC users expect.
///
/// @return FFD_OK, FFD_ERR_NULL, or FFD_ERR_CONFIG (then `cfg` is unchanged).
///
/// # Safety
/// `cfg` is NULL or a live config not used by another thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_load_env(cfg: *mut ffd_config_t) -> ffd_result {
    boundary("ffd_config_load_env", || {
        // SAFETY: NULL or a live, unshared config (contract).
        let cfg = unsafe { cfg.as_mut() }.ok_or_else(|| Error::null("cfg"))?;
        cfg.load_env()?;
        Ok(FFD_OK)
    })
}

/// Sets one `FFD_*` variable, e.g. `ffd_config_set(cfg, "FFD_PERIOD",
/// "10ms")`, with the same syntax and checks as the environment variable.
/// `value` NULL removes the setting (back to the default). Checks that need
/// two settings (the timeout must exceed the period) happen in ffd_init().
/// The bootstrap variables (FFD_BOOTSTRAP, FFD_RANK, FFD_SIZE,
/// FFD_BOOTSTRAP_TIMEOUT) apply when ffd_init() gets no `oob`.
///
/// @return FFD_OK; FFD_ERR_NULL (`cfg` or `name`); FFD_ERR_INVALID_ARGUMENT
/// for a name that is not an ffd variable (the message suggests the closest
/// one) or text that is not UTF-8; FFD_ERR_CONFIG for a value that is not
/// accepted (the message names the variable, the value and the accepted
/// form). On error `cfg` is unchanged.
///
/// # Safety
/// `cfg` is NULL or a live config not used by another thread during the
/// call; `name` and `value` are NULL or NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_set(
    cfg: *mut ffd_config_t,
    name: *const c_char,
    value: *const c_char,
) -> ffd_result {
    boundary("ffd_config_set", || {
        // SAFETY: NULL or a live, unshared config (contract).
        let cfg = unsafe { cfg.as_mut() }.ok_or_else(|| Error::null("cfg"))?;
        // SAFETY: NULL or NUL-terminated, valid during the call (contract).
        let name = unsafe { str_arg(name, "name") }?;
        if value.is_null() {
            check_setting(name, "").or_else(|e| {
                if e.code == FFD_ERR_CONFIG {
                    Ok(())
                } else {
                    Err(e)
                }
            })?;
            cfg.vars.remove(name);
            return Ok(FFD_OK);
        }
        // SAFETY: non-NULL, NUL-terminated, valid during the call (contract).
        let value = unsafe { str_arg(value, "value") }?;
        check_setting(name, value)?;
        cfg.vars.insert(name.to_owned(), value.to_owned());
        Ok(FFD_OK)
    })
}

fn set_nanos(cfg: *mut ffd_config_t, var: &'static str, ns: u64) -> Result<ffd_result, Error> {
    // SAFETY: the callers pass their `cfg` argument under the same contract
    // (NULL or a live config, not used by another thread during the call).
    let cfg = unsafe { cfg.as_mut() }.ok_or_else(|| Error::null("cfg"))?;
    let value = format!("{ns}ns");
    check_setting(var, &value)?;
    cfg.vars.insert(var.to_owned(), value);
    Ok(FFD_OK)
}

/// Sets the heartbeat period (FFD_PERIOD) in nanoseconds; must be positive.
///
/// @return FFD_OK, FFD_ERR_NULL or FFD_ERR_CONFIG.
///
/// # Safety
/// As ffd_config_set().
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_set_period_ns(cfg: *mut ffd_config_t, ns: u64) -> ffd_result {
    boundary("ffd_config_set_period_ns", || {
        set_nanos(cfg, config::var::PERIOD, ns)
    })
}

/// Sets the detection timeout (FFD_TIMEOUT) in nanoseconds; must exceed the
/// period (checked by ffd_init()).
///
/// @return FFD_OK, FFD_ERR_NULL or FFD_ERR_CONFIG.
///
/// # Safety
/// As ffd_config_set().
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_set_timeout_ns(cfg: *mut ffd_config_t, ns: u64) -> ffd_result {
    boundary("ffd_config_set_timeout_ns", || {
        set_nanos(cfg, config::var::TIMEOUT, ns)
    })
}

/// The effective value of variable `name` under `cfg` (its value, or the
/// default), in the form the variable accepts, e.g. "10ms". Copied as
/// ffd_last_error_message() does (NUL-terminated, truncated to `len - 1`,
/// full length in `*out_len`). Bootstrap variables give their set value or "".
///
/// @return FFD_OK; FFD_ERR_NULL; FFD_ERR_INVALID_ARGUMENT for an unknown
/// name; FFD_ERR_CONFIG when the settings together are not valid (timeout
/// not above the period).
///
/// # Safety
/// `cfg` is NULL or a live config not being modified during the call;
/// `name` is NULL or NUL-terminated; `buf` is NULL or valid for `len`
/// bytes; `out_len` is NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_get(
    cfg: *const ffd_config_t,
    name: *const c_char,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> ffd_result {
    boundary("ffd_config_get", || {
        // SAFETY: NULL or a live config (contract).
        let cfg = unsafe { cfg.as_ref() }.ok_or_else(|| Error::null("cfg"))?;
        // SAFETY: NULL or NUL-terminated, valid during the call (contract).
        let name = unsafe { str_arg(name, "name") }?;
        if config::variable(name).is_none() {
            return Err(Error::invalid(format!("{name} is not an ffd variable")));
        }
        let value = match cfg
            .resolve()?
            .settings()
            .into_iter()
            .find(|s| s.var == name)
        {
            Some(setting) => setting.value,
            None => cfg.vars.get(name).cloned().unwrap_or_default(),
        };
        // SAFETY: the pointers come with this function's own contract.
        unsafe { write_text(&value, buf, len, out_len) }?;
        Ok(FFD_OK)
    })
}

/// Registers the event callback (see ffd_event_callback): it sees every
/// event of the detector started with this config, from the first one on,
/// on the progress thread. `callback` NULL removes it. `userdata` is passed
/// back untouched and must stay valid until ffd_finalize() has returned.
/// Events are also queued for ffd_next_event() either way.
///
/// @return FFD_OK or FFD_ERR_NULL (`cfg`).
///
/// # Safety
/// `cfg` is NULL or a live config not used by another thread during the
/// call; `callback` is NULL or a function with that signature that stays
/// callable, with `userdata`, from another thread until ffd_finalize() of
/// every detector started with this config has returned.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_set_callback(
    cfg: *mut ffd_config_t,
    callback: ffd_event_callback,
    userdata: *mut c_void,
) -> ffd_result {
    boundary("ffd_config_set_callback", || {
        // SAFETY: NULL or a live, unshared config (contract).
        let cfg = unsafe { cfg.as_mut() }.ok_or_else(|| Error::null("cfg"))?;
        cfg.callback = callback.map(|f| HostCallback { f, userdata });
        Ok(FFD_OK)
    })
}

/// Frees a config. NULL is a no-op. Detectors started with it are not
/// affected.
///
/// # Safety
/// `cfg` is NULL or a config from ffd_config_new()/ffd_config_from_env()
/// not freed before and not used by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_free(cfg: *mut ffd_config_t) {
    boundary_value(
        "ffd_config_free",
        (),
        |_| (),
        || {
            if !cfg.is_null() {
                // SAFETY: a config from Box::into_raw in ffd_config_new or
                // ffd_config_from_env, freed once (contract).
                drop(unsafe { Box::from_raw(cfg) });
            }
            Ok(())
        },
    )
}

// ---------------------------------------------------------------------------
// Start and stop

/// The host's allgather as a [`Bootstrap`].
fn host_bootstrap(oob: &ffd_oob_t) -> Result<Box<dyn Bootstrap>, Error> {
    let Some(f) = oob.allgather else {
        return Err(Error::null("oob->allgather"));
    };
    if oob.size <= 0 || oob.rank < 0 || oob.rank >= oob.size {
        return Err(Error::invalid(format!(
            "oob->rank {} and oob->size {}: need 0 <= rank < size",
            oob.rank, oob.size
        )));
    }
    let userdata = oob.userdata;
    let bootstrap = HostAllgather::new(
        oob.rank as Rank,
        oob.size as u32,
        move |mine: &[u8], all: &mut [u8]| {
            // SAFETY: `f` is the host's allgather (ffd_oob_t's contract): it reads
            // `mine.len()` bytes at `mine` and writes `mine.len() * size` bytes
            // at `all`, which HostAllgather sized so; both live for the call.
            let rc = unsafe {
                f(
                    userdata,
                    mine.as_ptr().cast(),
                    mine.len(),
                    all.as_mut_ptr().cast(),
                )
            };
            if rc == 0 {
                Ok(())
            } else {
                Err(format!("the ffd_oob_t allgather callback returned {rc}"))
            }
        },
    )?;
    Ok(Box::new(bootstrap))
}

fn to_c_event(event: &DetectorEvent, me: Rank) -> ffd_event_t {
    let mut c = ffd_event_t {
        kind: ffd_event_kind::FFD_EVENT_FAILED,
        rank: 0,
        detector: 0,
        cause: ffd_cause::FFD_CAUSE_NONE,
        hops: 0,
        epoch: event.epoch,
        time_ns: u64::try_from(event.at.as_nanos()).unwrap_or(u64::MAX),
        stalled_ns: 0,
        seq: 0,
        payload: std::ptr::null(),
        payload_len: 0,
    };
    match &event.event {
        Event::Failed {
            rank,
            detector,
            cause,
            hops,
        } => {
            c.rank = *rank;
            c.detector = *detector;
            c.cause = match cause {
                Cause::Timeout => ffd_cause::FFD_CAUSE_TIMEOUT,
                Cause::InBand => ffd_cause::FFD_CAUSE_INBAND,
                Cause::Notice => ffd_cause::FFD_CAUSE_NOTICE,
            };
            c.hops = u32::from(*hops);
        }
        Event::Left { rank } => {
            c.kind = ffd_event_kind::FFD_EVENT_LEFT;
            c.rank = *rank;
        }
        Event::SelfExcluded { by } => {
            c.kind = ffd_event_kind::FFD_EVENT_SELF_EXCLUDED;
            c.rank = me;
            c.detector = *by;
        }
        Event::SlowEmitter { rank, stalled_for } => {
            c.kind = ffd_event_kind::FFD_EVENT_SLOW_EMITTER;
            c.rank = *rank;
            c.stalled_ns = u64::try_from(stalled_for.as_nanos()).unwrap_or(u64::MAX);
        }
        Event::Payload { origin, seq, bytes } => {
            c.kind = ffd_event_kind::FFD_EVENT_PAYLOAD;
            c.rank = *origin;
            c.seq = *seq;
            c.payload = bytes.as_ptr();
            c.payload_len = bytes.len();
        }
    }
    c
}

/// Starts this process's detector: opens its own libfabric endpoint,
/// exchanges addresses with every other rank, builds the observation ring,
/// starts the pinned progress thread, and returns once this rank's
/// heartbeat link is up (or the start-up grace has passed). **Collective**:
/// every rank of the job must call it, each once per detector.
///
/// Address exchange: through `oob` (the host's allgather, called on this
/// thread during the call) when it is not NULL. Otherwise through the
/// launcher: the TCP rendezvous named by FFD_BOOTSTRAP (with FFD_RANK,
/// FFD_SIZE) when that is set, in the config or the environment, else PMIx
/// when the process was started by mpirun/prterun/srun and the library was
/// built with the `pmix` feature (ranks are then PMIx ranks, the
/// MPI_COMM_WORLD ranks).
///
/// Settings: `cfg`, or the environment when `cfg` is NULL (as
/// ffd_config_from_env()). They are checked before any communication, so a
/// bad setting fails every rank the same way without a hang. `cfg` may be
/// freed right after the call. Warnings (unknown `FFD_*` names, a timeout
/// under three periods) go to stderr unless FFD_LOG is `off` or `error`.
///
/// @param oob the host's collective, or NULL.
/// @param cfg the settings and callback, or NULL.
/// @param[out] out receives the handle on success only.
/// @return FFD_OK; FFD_ERR_NULL (`out`, or `oob->allgather`);
/// FFD_ERR_INVALID_ARGUMENT (rank/size); FFD_ERR_CONFIG; FFD_ERR_BOOTSTRAP;
/// FFD_ERR_FABRIC; FFD_ERR_SYSTEM.
///
/// # Safety
/// `oob` is NULL or a valid ffd_oob_t whose allgather honours
/// ffd_allgather_fn's contract; `cfg` is NULL or a live config not used by
/// another thread during the call; `out` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_init(
    oob: *const ffd_oob_t,
    cfg: *const ffd_config_t,
    out: *mut *mut ffd_t,
) -> ffd_result {
    boundary("ffd_init", || {
        if out.is_null() {
            return Err(Error::null("out"));
        }
        // SAFETY: NULL or a live config (contract).
        let cfg = match unsafe { cfg.as_ref() } {
            Some(cfg) => Box::new(ffd_config_t {
                vars: cfg.vars.clone(),
                callback: cfg.callback,
            }),
            None => {
                let mut cfg = ffd_config_t::new();
                cfg.load_env()?;
                Box::new(cfg)
            }
        };
        let config = cfg.resolve()?;
        if config.log() >= LogLevel::Warn {
            for warning in config.warnings() {
                eprintln!("ffd: warning: {warning}");
            }
        }
        // SAFETY: NULL or a valid ffd_oob_t (contract); copied at once.
        let mut bootstrap = match unsafe { oob.as_ref() } {
            Some(oob) => host_bootstrap(oob)?,
            None => {
                // The environment, overridden by what the config sets.
                let env = Env::from_pairs(
                    Env::process()
                        .iter()
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .chain(cfg.vars.iter().map(|(k, v)| (k.clone(), v.clone()))),
                );
                bootstrap::from_env(&env)?
            }
        };
        let me = bootstrap.rank();
        let detector = match cfg.callback {
            Some(host) => {
                let callback = move |event: &DetectorEvent| {
                    let c = to_c_event(event, me);
                    IN_CALLBACK.set(true);
                    host.call(&c);
                    IN_CALLBACK.set(false);
                };
                Detector::start_with_callback(&config, bootstrap.as_mut(), Box::new(callback))
            }
            None => Detector::start(&config, bootstrap.as_mut()),
        }
        .map_err(|e| {
            let mut e = Error::from(e);
            e.message = format!("rank {me}: {}", e.message);
            e
        })?;
        // Give a launcher connection (PMIx reference) back at once.
        drop(bootstrap);
        let handle = Box::into_raw(Box::new(ffd_t {
            detector,
            last_event: Mutex::new(None),
        }));
        // SAFETY: `out` is non-NULL and valid for a write (contract).
        unsafe { *out = handle };
        Ok(FFD_OK)
    })
}

/// Leaves cleanly and frees the detector: tells the other ranks this rank
/// is going (they see FFD_EVENT_LEFT, not a failure), keeps the link up a
/// few periods so the notice gets out, stops the progress thread, releases
/// the fabric resources, and sets `*handle` to NULL. Bounded by the timeout
/// plus about 2 s even if a callback is stuck (such a callback is then
/// abandoned: the thread ends when it returns).
///
/// Takes the address of the handle so that a second call is safe: it finds
/// NULL and returns FFD_ERR_NULL. Copies of the pointer elsewhere dangle
/// after the call (using them is undefined behaviour, as after free()).
///
/// Must not race with any other call on the same handle, and must not be
/// called from an event callback (that returns FFD_ERR_INVALID_ARGUMENT).
///
/// @return FFD_OK; FFD_ERR_NULL when `handle` or `*handle` is NULL (already
/// finalized, or ffd_init() did not succeed); FFD_ERR_INVALID_ARGUMENT from
/// a callback.
///
/// # Safety
/// `handle` is NULL or valid for reads and writes, and `*handle` is NULL or
/// a handle from ffd_init() not finalized before, not in use by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_finalize(handle: *mut *mut ffd_t) -> ffd_result {
    boundary("ffd_finalize", || {
        if handle.is_null() {
            return Err(Error::null("the handle's address"));
        }
        if IN_CALLBACK.get() {
            return Err(Error::invalid(
                "called from an event callback (the progress thread); call it from a host thread",
            ));
        }
        // SAFETY: `handle` is non-NULL and valid for reads (contract).
        let h = unsafe { *handle };
        if h.is_null() {
            return Err(Error::null(
                "the handle (already finalized, or ffd_init did not succeed)",
            ));
        }
        // SAFETY: valid for writes (contract). NULL first, so that the
        // handle is gone for the caller even if shutting down panics.
        unsafe { *handle = std::ptr::null_mut() };
        // SAFETY: `h` came from Box::into_raw in ffd_init and is finalized
        // once: the caller's only copy of it is now NULL (contract).
        let h = unsafe { Box::from_raw(h) };
        let ffd_t { detector, .. } = *h;
        detector.shutdown();
        Ok(FFD_OK)
    })
}

// ---------------------------------------------------------------------------
// Queries

/// The detector behind a handle argument.
///
/// # Safety
/// `h` is NULL or a live handle from ffd_init(), not finalized during the call.
unsafe fn handle<'a>(h: *const ffd_t) -> Result<&'a ffd_t, Error> {
    // SAFETY: NULL or a live handle (contract); 'a ends with the export's call.
    unsafe { h.as_ref() }.ok_or_else(|| Error::null("the handle"))
}

/// Whether `rank` is alive as far as this rank knows: 1 if it is neither
/// known failed nor known to have left, 0 if it failed, left, or is not
/// below the job size (and 0 for this rank once it has been excluded).
/// Lock-free; any thread. A returned 0 is final.
///
/// @return 1, 0, or FFD_ERR_NULL (negative) when `h` is NULL.
///
/// # Safety
/// `h` is NULL or a live handle from ffd_init() (not finalized).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_is_alive(h: *const ffd_t, rank: u32) -> c_int {
    boundary_value(
        "ffd_is_alive",
        FFD_ERR_PANIC as c_int,
        |e| e.code as c_int,
        || {
            // SAFETY: NULL or a live handle (contract).
            let h = unsafe { handle(h) }?;
            Ok(c_int::from(h.detector.is_alive(rank)))
        },
    )
}

/// Whether the other ranks declared this rank failed (it received
/// FFD_EVENT_SELF_EXCLUDED): 1 or 0. The host must then stop using this
/// process (fail-stop). Lock-free; any thread.
///
/// @return 1, 0, or FFD_ERR_NULL (negative).
///
/// # Safety
/// `h` is NULL or a live handle from ffd_init() (not finalized).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_is_excluded(h: *const ffd_t) -> c_int {
    boundary_value(
        "ffd_is_excluded",
        FFD_ERR_PANIC as c_int,
        |e| e.code as c_int,
        || {
            // SAFETY: NULL or a live handle (contract).
            let h = unsafe { handle(h) }?;
            Ok(c_int::from(h.detector.is_excluded()))
        },
    )
}

/// This process's ffd rank (the rank given in ffd_oob_t, or the PMIx/TCP
/// bootstrap's) and the job size. Either output may be NULL. Any thread.
///
/// @return FFD_OK or FFD_ERR_NULL (`h`).
///
/// # Safety
/// `h` is NULL or a live handle; `rank` and `size` are NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_rank_size(
    h: *const ffd_t,
    rank: *mut u32,
    size: *mut u32,
) -> ffd_result {
    boundary("ffd_rank_size", || {
        // SAFETY: NULL or a live handle (contract).
        let h = unsafe { handle(h) }?;
        // SAFETY: each is NULL or valid for a write (contract).
        unsafe {
            if let Some(rank) = rank.as_mut() {
                *rank = h.detector.rank();
            }
            if let Some(size) = size.as_mut() {
                *size = h.detector.size();
            }
        }
        Ok(FFD_OK)
    })
}

/// The number of failures this rank knows of; never decreases (a host can
/// compare it with a value it saw before to learn cheaply that something
/// changed). Lock-free; any thread.
///
/// @param[out] out receives the epoch on success.
/// @return FFD_OK or FFD_ERR_NULL.
///
/// # Safety
/// `h` is NULL or a live handle; `out` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_epoch(h: *const ffd_t, out: *mut u64) -> ffd_result {
    boundary("ffd_epoch", || {
        // SAFETY: NULL or a live handle (contract).
        let h = unsafe { handle(h) }?;
        if out.is_null() {
            return Err(Error::null("out"));
        }
        // SAFETY: non-NULL and valid for a write (contract).
        unsafe { *out = h.detector.epoch() };
        Ok(FFD_OK)
    })
}

/// The failed ranks this rank knows of, in increasing order. Writes the
/// first `min(len, total)` of them to `buf` and the total count to `*n`;
/// if `*n > len` the list was cut: call again with a larger buffer (the
/// total may have grown meanwhile). `buf` may be NULL when `len` is 0, to
/// ask for the count. Lock-free; any thread.
///
/// @return FFD_OK or FFD_ERR_NULL (`h`, `n`, or `buf` with a non-zero `len`).
///
/// # Safety
/// `h` is NULL or a live handle; `buf` is NULL or valid for `len` writes of
/// uint32_t; `n` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_failed_ranks(
    h: *const ffd_t,
    buf: *mut u32,
    len: usize,
    n: *mut usize,
) -> ffd_result {
    boundary("ffd_failed_ranks", || {
        // SAFETY: NULL or a live handle (contract).
        let h = unsafe { handle(h) }?;
        if n.is_null() {
            return Err(Error::null("n"));
        }
        if buf.is_null() && len > 0 {
            return Err(Error::null("buf (with a non-zero len)"));
        }
        let failed = h.detector.failed_ranks();
        let copied = failed.len().min(len);
        if copied > 0 {
            // SAFETY: `buf` is valid for `len` >= `copied` u32 writes
            // (contract) and does not overlap the Vec we own.
            unsafe { std::ptr::copy_nonoverlapping(failed.as_ptr(), buf, copied) };
        }
        // SAFETY: non-NULL and valid for a write (contract).
        unsafe { *n = failed.len() };
        Ok(FFD_OK)
    })
}

/// Takes the oldest queued event without blocking. The queue holds
/// FFD_EVENT_QUEUE events (1024 by default); when it overflows, new events
/// are dropped and counted (ffd_stats_t::events_dropped), but the failed set
/// stays exact. The event's payload, if any, stays valid until the next
/// ffd_next_event() or ffd_finalize() on this handle, from any thread.
/// Any thread; concurrent callers each get different events.
///
/// @param[out] out receives the event when the call returns FFD_OK.
/// @return FFD_OK; FFD_NO_EVENT (positive) when none is queued; FFD_ERR_NULL.
///
/// # Safety
/// `h` is NULL or a live handle; `out` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_next_event(h: *const ffd_t, out: *mut ffd_event_t) -> ffd_result {
    boundary("ffd_next_event", || {
        // SAFETY: NULL or a live handle (contract).
        let h = unsafe { handle(h) }?;
        if out.is_null() {
            return Err(Error::null("out"));
        }
        let mut last = h
            .last_event
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *last = h.detector.try_next_event();
        let Some(event) = last.as_ref() else {
            return Ok(FFD_NO_EVENT);
        };
        // The payload pointer refers to the Vec held in `last_event`, which
        // stays until the next call replaces it.
        let c = to_c_event(event, h.detector.rank());
        // SAFETY: non-NULL and valid for a write (contract).
        unsafe { *out = c };
        Ok(FFD_OK)
    })
}

/// A file descriptor that is readable while events are queued, for the
/// host's poll()/epoll loop; call ffd_next_event() until FFD_NO_EVENT when
/// it becomes readable (it may also be readable, spuriously, just after the
/// last event was taken). Owned by ffd: do not read, write or close it; it
/// is valid until ffd_finalize(). Any thread.
///
/// @return the descriptor (>= 0), or FFD_ERR_NULL (negative).
///
/// # Safety
/// `h` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_event_fd(h: *const ffd_t) -> c_int {
    boundary_value(
        "ffd_event_fd",
        FFD_ERR_PANIC as c_int,
        |e| e.code as c_int,
        || {
            // SAFETY: NULL or a live handle (contract).
            let h = unsafe { handle(h) }?;
            Ok(h.detector.event_fd().as_raw_fd())
        },
    )
}

/// Reliably broadcasts `len` bytes to every live rank over the same
/// fault-tolerant overlay as failure notices (e.g. a "revoke" order); they
/// receive FFD_EVENT_PAYLOAD (this rank does not). Returns at once: the
/// bytes are copied. `bytes` may be NULL when `len` is 0. Any thread.
///
/// @return FFD_OK; FFD_ERR_NULL; FFD_ERR_PAYLOAD_TOO_LARGE (the message
/// gives the limit, 8 KiB); FFD_ERR_STOPPED once this rank has
/// been excluded or its detector stopped.
///
/// # Safety
/// `h` is NULL or a live handle; `bytes` is NULL or valid for `len` reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_broadcast(
    h: *const ffd_t,
    bytes: *const c_void,
    len: usize,
) -> ffd_result {
    boundary("ffd_broadcast", || {
        // SAFETY: NULL or a live handle (contract).
        let h = unsafe { handle(h) }?;
        let payload: &[u8] = if len == 0 {
            &[]
        } else if bytes.is_null() {
            return Err(Error::null("bytes (with a non-zero len)"));
        } else {
            // SAFETY: non-NULL and valid for `len` reads during the call
            // (contract); copied by `broadcast` before it returns.
            unsafe { std::slice::from_raw_parts(bytes.cast::<u8>(), len) }
        };
        if h.detector.is_excluded() {
            return Err(DetectorError::Stopped.into());
        }
        h.detector.broadcast(payload)?;
        Ok(FFD_OK)
    })
}

/// The detector's main counters (see ffd_stats_t), as last published by
/// the progress thread (every 50 ms, so up to 50 ms old: compare its
/// `epoch` with ffd_epoch() to know whether it includes the latest
/// failure). Any thread; takes a lock the progress thread only
/// ever try-locks.
///
/// @param[out] out receives the counters on success.
/// @return FFD_OK or FFD_ERR_NULL.
///
/// # Safety
/// `h` is NULL or a live handle; `out` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_stats(h: *const ffd_t, out: *mut ffd_stats_t) -> ffd_result {
    boundary("ffd_stats", || {
        // SAFETY: NULL or a live handle (contract).
        let h = unsafe { handle(h) }?;
        if out.is_null() {
            return Err(Error::null("out"));
        }
        let s = h.detector.stats();
        let (r, e) = (&s.runtime, &s.engine);
        let stats = ffd_stats_t {
            uptime_ns: (s.uptime_ms * 1e6) as u64,
            epoch: s.epoch,
            heartbeats_sent: r.heartbeats_posted,
            heartbeats_completed: r.heartbeats_completed,
            posts_refused: r.posts_refused,
            transport_errors: r.transport_errors,
            unreachable_verdicts: r.unreachable_verdicts,
            messages_sent: r.messages_sent,
            messages_received: r.messages_received,
            messages_rejected: r.messages_rejected,
            notices_sent: e.notices_sent(),
            notices_received: e.notices_received(),
            notices_forwarded: e.notices_forwarded,
            detections_timeout: e.detections_by(Cause::Timeout),
            detections_inband: e.detections_by(Cause::InBand),
            detections_notice: e.detections_by(Cause::Notice),
            departures_learned: e.departures_learned,
            mendings: e.mendings,
            slow_emitter_warnings: e.slow_emitter_warnings,
            payloads_delivered: e.payloads_delivered,
            events_dropped: r.events_dropped,
            wakeups: r.lateness.total,
            wakeup_late_max_ns: r.lateness.max_us.saturating_mul(1000),
            pinned_cpu: h.detector.placement().cpu.map_or(-1, |c| c as i64),
        };
        // SAFETY: non-NULL and valid for a write (contract).
        unsafe { *out = stats };
        Ok(FFD_OK)
    })
}
