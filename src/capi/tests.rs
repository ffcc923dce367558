//! The C ABI driven from Rust: the panic boundary, result codes and
//! messages, configuration errors, and a job of threads standing in for
//! ranks whose address exchange is an `extern "C"` allgather over a shared
//! buffer, as an MPI library's `MPI_Allgather` would be.
//!
//! These tests live inside `src/capi` because they call the exports through
//! raw pointers (`unsafe`), which the crate allows only at the C boundary.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::error::{panic_text, set_last_error};
use super::ffd_result::*;
use super::*;
use crate::bootstrap::BootstrapError;
use crate::config::{self, ConfigError};
use crate::runtime::{DetectorError, StartError};

fn last_error() -> String {
    let mut buf = [0 as c_char; 1024];
    let mut n = 0usize;
    // SAFETY: `buf` is valid for its length, `n` for a write.
    let rc = unsafe { ffd_last_error_message(buf.as_mut_ptr(), buf.len(), &mut n) };
    assert_eq!(rc, FFD_OK);
    // SAFETY: ffd_last_error_message NUL-terminates within the buffer.
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(n, text.len(), "the full length of an untruncated message");
    text
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// A config with loopback settings for the thread jobs.
fn loopback_config() -> *mut ffd_config_t {
    let mut cfg = ptr::null_mut();
    // SAFETY: `cfg` is valid for a write.
    assert_eq!(unsafe { ffd_config_new(&mut cfg) }, FFD_OK);
    for (name, value) in [
        ("FFD_PROVIDER", "tcp"),
        ("FFD_DOMAIN", "lo"),
        ("FFD_CORE", "none"),
        ("FFD_STARTUP_GRACE", "200ms"),
        ("FFD_LOG", "error"),
        // Threads of one process stand in for the ranks: one pid, one
        // host; every rank on the fabric ring, as these tests expect
        // (same-host watching is tested with processes, cli/tests).
        ("FFD_LOCAL", "off"),
    ] {
        let (name, value) = (c(name), c(value));
        // SAFETY: a live config and NUL-terminated strings.
        let rc = unsafe { ffd_config_set(cfg, name.as_ptr(), value.as_ptr()) };
        assert_eq!(rc, FFD_OK, "{}", last_error());
    }
    // SAFETY: a live config.
    unsafe {
        assert_eq!(ffd_config_set_period_ns(cfg, 10_000_000), FFD_OK);
        assert_eq!(ffd_config_set_timeout_ns(cfg, 200_000_000), FFD_OK);
    }
    cfg
}

#[test]
fn a_panic_becomes_a_code_and_a_message() {
    let rc = boundary("ffd_test", || panic!("boom {}", 42));
    assert_eq!(rc, FFD_ERR_PANIC);
    let text = last_error();
    assert!(
        text.starts_with("ffd_test: internal error") && text.ends_with("panicked: boom 42"),
        "{text}"
    );
    let v = boundary_value(
        "ffd_value",
        -7,
        |_| -1,
        || -> Result<i32, Error> { panic!("static") },
    );
    assert_eq!(v, -7);
    assert!(last_error().ends_with("panicked: static"));
}

#[test]
fn every_code_has_its_own_text_and_unknown_codes_are_named() {
    let mut seen = std::collections::BTreeSet::new();
    for code in ffd_result::ALL {
        // SAFETY: ffd_strerror returns a static NUL-terminated string.
        let text = unsafe { CStr::from_ptr(ffd_strerror(code as c_int)) };
        assert!(seen.insert(text.to_owned()), "{code:?} shares its text");
    }
    // SAFETY: as above.
    let unknown = unsafe { CStr::from_ptr(ffd_strerror(-1000)) };
    assert_eq!(unknown, c"unknown ffd result code");
    // SAFETY: as above.
    let version = unsafe { CStr::from_ptr(ffd_version()) };
    assert_eq!(version.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
}

#[test]
fn the_last_message_is_truncated_on_a_character_boundary() {
    set_last_error("période: é".to_owned()); // 'é' is 2 bytes
    let mut buf = [0x55 as c_char; 3];
    let mut n = 0usize;
    // SAFETY: `buf` is valid for 3 bytes.
    assert_eq!(
        unsafe { ffd_last_error_message(buf.as_mut_ptr(), 3, &mut n) },
        FFD_OK
    );
    // "p" + "é" would need 3 bytes + NUL: only "p" fits.
    assert_eq!(buf[..2], [b'p' as c_char, 0]);
    assert_eq!(n, "période: é".len());
    // len 0 with NULL: only the length.
    n = 0;
    // SAFETY: NULL with len 0 is allowed; `n` is valid.
    assert_eq!(
        unsafe { ffd_last_error_message(ptr::null_mut(), 0, &mut n) },
        FFD_OK
    );
    assert_eq!(n, "période: é".len());
    // SAFETY: NULL with a non-zero len is refused, not written.
    assert_eq!(
        unsafe { ffd_last_error_message(ptr::null_mut(), 4, &mut n) },
        FFD_ERR_NULL
    );
}

#[test]
fn config_errors_name_the_variable_value_and_accepted_form() {
    let cfg = loopback_config();
    let set = |name: &str, value: &str| {
        let (name, value) = (c(name), c(value));
        // SAFETY: a live config and NUL-terminated strings.
        unsafe { ffd_config_set(cfg, name.as_ptr(), value.as_ptr()) }
    };
    assert_eq!(set("FFD_PERIOD", "10"), FFD_ERR_CONFIG);
    let text = last_error();
    assert_eq!(
        text,
        "ffd_config_set: FFD_PERIOD=`10` has no unit; accepted: a number with a unit ns|us|ms|s, e.g. `10ms`"
    );
    assert_eq!(set("FFD_INBAND", "sometimes"), FFD_ERR_CONFIG);
    assert!(last_error().contains("FFD_INBAND=`sometimes`"));
    assert_eq!(set("FFD_BOOTSTRAP_TIMEOUT", "forever"), FFD_ERR_CONFIG);
    assert!(last_error().contains("FFD_BOOTSTRAP_TIMEOUT=`forever`"));
    assert_eq!(set("FFD_PERIDO", "10ms"), FFD_ERR_INVALID_ARGUMENT);
    assert_eq!(
        last_error(),
        "ffd_config_set: FFD_PERIDO is not an ffd variable (did you mean FFD_PERIOD?)"
    );
    // SAFETY: zero is refused by the parser's range check.
    assert_eq!(unsafe { ffd_config_set_period_ns(cfg, 0) }, FFD_ERR_CONFIG);
    assert!(
        last_error().contains("must be positive"),
        "{}",
        last_error()
    );

    // The failed sets changed nothing: the value is still 10ms.
    let get = |name: &str| {
        let name = c(name);
        let mut buf = [0 as c_char; 64];
        let mut n = 0;
        // SAFETY: a live config, a NUL-terminated name, a 64-byte buffer.
        let rc = unsafe { ffd_config_get(cfg, name.as_ptr(), buf.as_mut_ptr(), 64, &mut n) };
        (rc, {
            // SAFETY: NUL-terminated by ffd_config_get.
            unsafe { CStr::from_ptr(buf.as_ptr()) }
                .to_str()
                .unwrap()
                .to_owned()
        })
    };
    assert_eq!(get("FFD_PERIOD"), (FFD_OK, "10ms".to_owned()));
    assert_eq!(get("FFD_TIMEOUT"), (FFD_OK, "200ms".to_owned()));
    assert_eq!(get("FFD_RING"), (FFD_OK, "topology".to_owned()));

    // A timeout at or below the period is accepted by set, refused by get
    // and init, which see both.
    assert_eq!(set("FFD_TIMEOUT", "5ms"), FFD_OK);
    assert_eq!(get("FFD_PERIOD").0, FFD_ERR_CONFIG);
    assert!(last_error().contains("the timeout must exceed the period"));
    let calls = AtomicU32::new(0);
    let oob = ffd_oob_t {
        rank: 0,
        size: 1,
        allgather: Some(counting_allgather),
        userdata: ptr::from_ref(&calls).cast_mut().cast(),
    };
    let mut h = ptr::null_mut();
    // SAFETY: valid oob and config, `h` valid for a write.
    assert_eq!(unsafe { ffd_init(&oob, cfg, &mut h) }, FFD_ERR_CONFIG);
    assert!(h.is_null(), "no output on failure");
    assert_eq!(
        calls.load(Ordering::Relaxed),
        0,
        "settings fail before any collective"
    );

    // NULL value: back to the default.
    let name = c("FFD_TIMEOUT");
    // SAFETY: a live config, a NUL-terminated name, NULL value.
    assert_eq!(
        unsafe { ffd_config_set(cfg, name.as_ptr(), ptr::null()) },
        FFD_OK
    );
    assert_eq!(get("FFD_TIMEOUT"), (FFD_OK, "100ms".to_owned()));

    // NULLs.
    // SAFETY: NULL config and arguments are refused before use.
    unsafe {
        assert_eq!(
            ffd_config_set(ptr::null_mut(), name.as_ptr(), name.as_ptr()),
            FFD_ERR_NULL
        );
        assert_eq!(
            ffd_config_set(cfg, ptr::null(), name.as_ptr()),
            FFD_ERR_NULL
        );
        assert_eq!(ffd_config_new(ptr::null_mut()), FFD_ERR_NULL);
        assert_eq!(ffd_config_from_env(ptr::null_mut()), FFD_ERR_NULL);
        assert_eq!(ffd_config_load_env(ptr::null_mut()), FFD_ERR_NULL);
        assert_eq!(
            ffd_config_set_callback(ptr::null_mut(), None, ptr::null_mut()),
            FFD_ERR_NULL
        );
        ffd_config_free(ptr::null_mut());
        ffd_config_free(cfg);
    }
}

#[test]
fn typed_settings_keep_the_variable_names_in_messages_and_bootstrap_variables_as_given() {
    let mut cfg = ptr::null_mut();
    // SAFETY: `cfg` is valid for a write.
    assert_eq!(unsafe { ffd_config_new(&mut cfg) }, FFD_OK);
    let set = |name: &str, value: Option<&str>| {
        let name = c(name);
        let value = value.map(c);
        let value = value.as_ref().map_or(ptr::null(), |v| v.as_ptr());
        // SAFETY: a live config, a NUL-terminated name, NULL or a NUL-terminated value.
        unsafe { ffd_config_set(cfg, name.as_ptr(), value) }
    };
    let get = |name: &str| {
        let name = c(name);
        let mut buf = [0 as c_char; 64];
        // SAFETY: a live config, a NUL-terminated name, a 64-byte buffer.
        let rc =
            unsafe { ffd_config_get(cfg, name.as_ptr(), buf.as_mut_ptr(), 64, ptr::null_mut()) };
        // SAFETY: NUL-terminated by ffd_config_get (or untouched zeros).
        let text = unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_str()
            .unwrap()
            .to_owned();
        (rc, text)
    };

    // Typed values are shown in the variables' form.
    // SAFETY: a live config.
    assert_eq!(unsafe { ffd_config_set_period_ns(cfg, 2_000_000) }, FFD_OK);
    assert_eq!(get("FFD_PERIOD"), (FFD_OK, "2ms".to_owned()));
    assert_eq!(set("FFD_EAGAIN_LIMIT", Some("timeout")), FFD_OK);
    assert_eq!(
        get("FFD_EAGAIN_LIMIT"),
        (FFD_OK, "timeout (100ms)".to_owned())
    );

    // The cross-check names both variables, whichever setter set them.
    assert_eq!(set("FFD_TIMEOUT", Some("2ms")), FFD_OK);
    assert_eq!(get("FFD_RING").0, FFD_ERR_CONFIG);
    assert_eq!(
        last_error(),
        "ffd_config_get: the timeout must exceed the period: FFD_TIMEOUT=`2ms` is not above FFD_PERIOD=`2ms`"
    );
    // SAFETY: a live config.
    assert_eq!(unsafe { ffd_config_set_timeout_ns(cfg, 0) }, FFD_ERR_CONFIG);
    assert_eq!(
        last_error(),
        "ffd_config_set_timeout_ns: FFD_TIMEOUT=`0ns` must be positive; accepted: a number with a unit ns|us|ms|s, e.g. `10ms`"
    );
    assert_eq!(set("FFD_TIMEOUT", None), FFD_OK);
    assert_eq!(get("FFD_TIMEOUT"), (FFD_OK, "100ms".to_owned()));

    // Bootstrap variables are kept as given (checked when read, except the
    // timeout, checked at once).
    assert_eq!(get("FFD_BOOTSTRAP"), (FFD_OK, String::new()));
    assert_eq!(set("FFD_BOOTSTRAP", Some("127.0.0.1:5000")), FFD_OK);
    assert_eq!(get("FFD_BOOTSTRAP"), (FFD_OK, "127.0.0.1:5000".to_owned()));
    assert_eq!(set("FFD_BOOTSTRAP_TIMEOUT", Some("0s")), FFD_ERR_CONFIG);
    assert!(
        last_error().contains("FFD_BOOTSTRAP_TIMEOUT=`0s` must be positive"),
        "{}",
        last_error()
    );
    assert_eq!(set("FFD_BOOTSTRAP", None), FFD_OK);
    assert_eq!(get("FFD_BOOTSTRAP"), (FFD_OK, String::new()));
    assert_eq!(set("FFD_NOPE", None), FFD_ERR_INVALID_ARGUMENT);
    // SAFETY: a live config, freed once.
    unsafe { ffd_config_free(cfg) };
}

/// Counts its calls (userdata: an AtomicU32) and fails with 3.
unsafe extern "C" fn counting_allgather(
    userdata: *mut c_void,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
) -> c_int {
    // SAFETY: the tests pass a live AtomicU32 as userdata.
    let calls = unsafe { &*userdata.cast::<AtomicU32>() };
    calls.fetch_add(1, Ordering::Relaxed);
    3
}

#[test]
fn a_failing_host_allgather_is_a_bootstrap_error_naming_it() {
    let cfg = loopback_config();
    let calls = AtomicU32::new(0);
    let mut oob = ffd_oob_t {
        rank: 0,
        size: 1,
        allgather: Some(counting_allgather),
        userdata: ptr::from_ref(&calls).cast_mut().cast(),
    };
    let mut h = ptr::null_mut();
    // SAFETY: valid oob and config, `h` valid for a write.
    assert_eq!(unsafe { ffd_init(&oob, cfg, &mut h) }, FFD_ERR_BOOTSTRAP);
    assert!(h.is_null());
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    let text = last_error();
    assert!(
        text.starts_with("ffd_init: rank 0: ")
            && text.ends_with(
                "the embedder's allgather failed: the ffd_oob_t allgather callback returned 3"
            ),
        "{text}"
    );

    oob.rank = 1; // not below size
    // SAFETY: as above.
    assert_eq!(
        unsafe { ffd_init(&oob, cfg, &mut h) },
        FFD_ERR_INVALID_ARGUMENT
    );
    assert!(last_error().contains("oob->rank 1 and oob->size 1"));
    oob.rank = 0;
    oob.allgather = None;
    // SAFETY: as above.
    assert_eq!(unsafe { ffd_init(&oob, cfg, &mut h) }, FFD_ERR_NULL);
    assert_eq!(last_error(), "ffd_init: oob->allgather is NULL");
    // SAFETY: NULL out is refused before anything else.
    assert_eq!(
        unsafe { ffd_init(&oob, cfg, ptr::null_mut()) },
        FFD_ERR_NULL
    );
    assert!(h.is_null());
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    // SAFETY: a live config.
    unsafe { ffd_config_free(cfg) };
}

#[test]
fn calls_on_a_null_handle_fail_with_ffd_err_null() {
    let mut ev = std::mem::MaybeUninit::<ffd_event_t>::uninit();
    let mut st = ffd_stats_t::default();
    let (mut epoch, mut n) = (7u64, 7usize);
    let mut h: *mut ffd_t = ptr::null_mut();
    // SAFETY: every call gets a NULL handle, refused before any use.
    unsafe {
        assert_eq!(ffd_is_alive(ptr::null(), 0), FFD_ERR_NULL as c_int);
        assert_eq!(ffd_is_excluded(ptr::null()), FFD_ERR_NULL as c_int);
        assert_eq!(ffd_event_fd(ptr::null()), FFD_ERR_NULL as c_int);
        assert_eq!(ffd_epoch(ptr::null(), &mut epoch), FFD_ERR_NULL);
        assert_eq!(ffd_uptime(ptr::null(), &mut epoch), FFD_ERR_NULL);
        assert_eq!(
            ffd_failed_ranks(ptr::null(), ptr::null_mut(), 0, &mut n),
            FFD_ERR_NULL
        );
        assert_eq!(
            ffd_next_event(ptr::null(), ev.as_mut_ptr(), ptr::null_mut(), 0),
            FFD_ERR_NULL
        );
        let mut st8 = ffd_state_t {
            state: ffd_state_kind::FFD_STATE_RUNNING,
            stop_cause: ffd_stop_cause::FFD_STOP_NONE,
            excluded_by: 7,
        };
        assert_eq!(
            ffd_state(ptr::null(), &mut st8, ptr::null_mut(), 0, ptr::null_mut()),
            FFD_ERR_NULL
        );
        assert_eq!(st8.excluded_by, 7, "no output on failure");
        assert_eq!(ffd_broadcast(ptr::null(), ptr::null(), 0), FFD_ERR_NULL);
        assert_eq!(ffd_stats(ptr::null(), &mut st), FFD_ERR_NULL);
        assert_eq!(
            ffd_rank_size(ptr::null(), ptr::null_mut(), ptr::null_mut()),
            FFD_ERR_NULL
        );
        assert_eq!(ffd_finalize(ptr::null_mut()), FFD_ERR_NULL);
        assert_eq!(ffd_finalize(&mut h), FFD_ERR_NULL);
    }
    assert_eq!((epoch, n), (7, 7), "no output on failure");
    assert!(last_error().contains("already finalized"));
}

/// A barrier whose wait gives up (returns false) after `BARRIER_BOUND`, so
/// that one failed thread cannot hang the others.
struct Barrier {
    n: usize,
    state: Mutex<(usize, u64)>,
    cv: Condvar,
}

const BARRIER_BOUND: Duration = Duration::from_secs(30);

impl Barrier {
    fn new(n: usize) -> Barrier {
        Barrier {
            n,
            state: Mutex::new((0, 0)),
            cv: Condvar::new(),
        }
    }

    #[must_use]
    fn try_wait(&self) -> bool {
        let mut state = self.state.lock().unwrap();
        let generation = state.1;
        state.0 += 1;
        if state.0 == self.n {
            *state = (0, generation + 1);
            self.cv.notify_all();
            return true;
        }
        let (state, _) = self
            .cv
            .wait_timeout_while(state, BARRIER_BOUND, |s| s.1 == generation)
            .unwrap();
        state.1 != generation
    }

    fn wait(&self) {
        assert!(
            self.try_wait(),
            "the other ranks did not reach the barrier within {BARRIER_BOUND:?}"
        );
    }
}

/// The ranks of an in-process job: one slot per rank and a barrier.
struct Group {
    barrier: Barrier,
    slots: Mutex<Vec<Vec<u8>>>,
}

struct RankCtx {
    rank: usize,
    group: Arc<Group>,
}

/// An `MPI_Allgather` stand-in over the shared slots.
unsafe extern "C" fn shared_allgather(
    userdata: *mut c_void,
    mine: *const c_void,
    len: usize,
    all: *mut c_void,
) -> c_int {
    // SAFETY: the test passes its RankCtx, alive during ffd_init.
    let ctx = unsafe { &*userdata.cast::<RankCtx>() };
    // SAFETY: ffd passes `len` readable bytes at `mine`.
    let mine = unsafe { std::slice::from_raw_parts(mine.cast::<u8>(), len) };
    // Nobody writes this round until everybody has read the last one.
    if !ctx.group.barrier.try_wait() {
        return 2;
    }
    ctx.group.slots.lock().unwrap()[ctx.rank] = mine.to_vec();
    if !ctx.group.barrier.try_wait() {
        return 2;
    }
    let slots = ctx.group.slots.lock().unwrap();
    for (r, slot) in slots.iter().enumerate() {
        if slot.len() != len {
            return 1;
        }
        // SAFETY: ffd passes `len * size` writable bytes at `all`.
        unsafe { ptr::copy_nonoverlapping(slot.as_ptr(), all.cast::<u8>().add(r * len), len) };
    }
    0
}

/// What a rank's callback saw (userdata of `record_event`).
#[derive(Default)]
struct Seen {
    payloads: Mutex<Vec<(u32, Vec<u8>)>>,
    left: Mutex<Vec<u32>>,
    /// The rank's handle, to try ffd_finalize from inside the callback.
    handle: AtomicPtr<ffd_t>,
    finalize_in_callback: AtomicUsize,
}

unsafe extern "C" fn record_event(userdata: *mut c_void, event: *const ffd_event_t) {
    // SAFETY: the test's Seen outlives every detector using it; ffd passes
    // a valid event whose payload is readable during the call.
    let (seen, event) = unsafe { (&*userdata.cast::<Seen>(), &*event) };
    match event.kind {
        ffd_event_kind::FFD_EVENT_PAYLOAD => {
            // SAFETY: `payload_len` bytes at `payload`, valid during the call.
            let bytes = unsafe { std::slice::from_raw_parts(event.payload, event.payload_len) };
            seen.payloads
                .lock()
                .unwrap()
                .push((event.rank, bytes.to_vec()));
            let mut h = seen.handle.load(Ordering::Acquire);
            // SAFETY: refused before the handle is touched (progress thread).
            let rc = unsafe { ffd_finalize(&mut h) };
            if rc == FFD_ERR_INVALID_ARGUMENT && !h.is_null() {
                seen.finalize_in_callback.fetch_add(1, Ordering::Relaxed);
            }
        }
        ffd_event_kind::FFD_EVENT_LEFT => seen.left.lock().unwrap().push(event.rank),
        _ => {}
    }
}

/// Waits (bounded, on the event fd) for an event matching `pred`; returns
/// it with its payload (copied out of the caller's buffer).
pub(super) fn wait_event(
    h: *const ffd_t,
    within: Duration,
    pred: impl Fn(&ffd_event_t) -> bool,
) -> Option<(ffd_event_t, Vec<u8>)> {
    let deadline = Instant::now() + within;
    // SAFETY: a live handle.
    let fd = unsafe { ffd_event_fd(h) };
    assert!(fd >= 0);
    let mut buf = vec![0u8; FFD_MAX_PAYLOAD];
    loop {
        let mut ev = std::mem::MaybeUninit::<ffd_event_t>::uninit();
        // SAFETY: a live handle, `ev` valid for a write, `buf` for its length.
        match unsafe { ffd_next_event(h, ev.as_mut_ptr(), buf.as_mut_ptr().cast(), buf.len()) } {
            FFD_OK => {
                // SAFETY: written by ffd_next_event on FFD_OK.
                let ev = unsafe { ev.assume_init() };
                if pred(&ev) {
                    let payload = if ev.payload.is_null() {
                        Vec::new()
                    } else {
                        assert_eq!(ev.payload, buf.as_ptr(), "the payload is in our buffer");
                        buf[..ev.payload_len].to_vec()
                    };
                    return Some((ev, payload));
                }
                continue;
            }
            FFD_NO_EVENT => {}
            other => panic!("ffd_next_event: {other:?}"),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().min(1000) as libc::c_int;
        // SAFETY: one valid pollfd for the duration of the call; the fd is
        // ffd's, valid until finalize, and only polled.
        let _ = unsafe { libc::poll(&mut pfd, 1, ms) };
    }
}

#[test]
fn threads_standing_in_for_ranks_start_broadcast_and_leave_through_the_c_abi() {
    const N: usize = 4;
    let group = Arc::new(Group {
        barrier: Barrier::new(N),
        slots: Mutex::new(vec![Vec::new(); N]),
    });
    let seen: Arc<Vec<Seen>> = Arc::new((0..N).map(|_| Seen::default()).collect());
    // After start-up every rank waits here; then ranks 0 and 1 broadcast.
    let started = Arc::new(Barrier::new(N));
    let threads: Vec<_> = (0..N)
        .map(|rank| {
            let (group, seen, started) =
                (Arc::clone(&group), Arc::clone(&seen), Arc::clone(&started));
            thread::spawn(move || {
                let cfg = loopback_config();
                if rank == 1 {
                    let (name, no) = (c("FFD_DELIVER_OWN"), c("no"));
                    // SAFETY: a live config and NUL-terminated strings.
                    let rc = unsafe { ffd_config_set(cfg, name.as_ptr(), no.as_ptr()) };
                    assert_eq!(rc, FFD_OK);
                }
                let mine = &seen[rank];
                // SAFETY: a live config; `mine` outlives the detector.
                let rc = unsafe {
                    ffd_config_set_callback(
                        cfg,
                        Some(record_event),
                        ptr::from_ref(mine).cast_mut().cast(),
                    )
                };
                assert_eq!(rc, FFD_OK);
                let ctx = RankCtx { rank, group };
                let oob = ffd_oob_t {
                    rank: rank as c_int,
                    size: N as c_int,
                    allgather: Some(shared_allgather),
                    userdata: ptr::from_ref(&ctx).cast_mut().cast(),
                };
                let mut h = ptr::null_mut();
                // SAFETY: valid oob (ctx lives through the call) and config.
                let rc = unsafe { ffd_init(&oob, cfg, &mut h) };
                assert_eq!(rc, FFD_OK, "rank {rank}: {}", last_error());
                // SAFETY: the config is not needed after init.
                unsafe { ffd_config_free(cfg) };
                mine.handle.store(h, Ordering::Release);
                let (mut r, mut size) = (0, 0);
                // SAFETY: a live handle, outputs valid.
                assert_eq!(unsafe { ffd_rank_size(h, &mut r, &mut size) }, FFD_OK);
                assert_eq!((r, size), (rank as u32, N as u32));
                started.wait();

                // Rank 0 broadcasts: every rank gets it, rank 0 too. Rank 1,
                // which set FFD_DELIVER_OWN=no, broadcasts as well: the
                // others get it, rank 1 does not.
                if rank == 0 {
                    let too_big = vec![0u8; 1 << 20];
                    // SAFETY: a live handle and a readable buffer.
                    unsafe {
                        assert_eq!(
                            ffd_broadcast(h, too_big.as_ptr().cast(), too_big.len()),
                            FFD_ERR_PAYLOAD_TOO_LARGE
                        );
                        assert_eq!(ffd_broadcast(h, ptr::null(), 5), FFD_ERR_NULL);
                        assert_eq!(ffd_broadcast(h, b"revoke".as_ptr().cast(), 6), FFD_OK);
                    }
                } else if rank == 1 {
                    // SAFETY: a live handle and a readable buffer.
                    let rc = unsafe { ffd_broadcast(h, b"quiet".as_ptr().cast(), 5) };
                    assert_eq!(rc, FFD_OK);
                }
                let mut want = vec![(0, b"revoke".to_vec())];
                if rank != 1 {
                    want.push((1, b"quiet".to_vec()));
                }
                let payload = |e: &ffd_event_t| e.kind == ffd_event_kind::FFD_EVENT_PAYLOAD;
                let mut got: Vec<(u32, Vec<u8>)> = (0..want.len())
                    .map(|_| {
                        let (ev, bytes) = wait_event(h, Duration::from_secs(10), payload)
                            .unwrap_or_else(|| panic!("rank {rank}: a payload missing"));
                        assert_eq!(ev.payload_len, bytes.len());
                        (ev.rank, bytes)
                    })
                    .collect();
                got.sort();
                assert_eq!(got, want, "rank {rank}");
                // Once the others have rank 1's payload, its own event would
                // have been queued before its copies left: there is none.
                started.wait();
                if rank == 1 {
                    assert!(
                        wait_event(h, Duration::ZERO, payload).is_none(),
                        "rank 1 delivered its own payload"
                    );
                }
                let mut called = mine.payloads.lock().unwrap().clone();
                called.sort();
                assert_eq!(called, want, "rank {rank}: the callback saw them too");
                assert_eq!(
                    mine.finalize_in_callback.load(Ordering::Relaxed),
                    want.len()
                );
                let (mut epoch, mut n) = (9, 9);
                let mut buf = [u32::MAX; 4];
                // SAFETY: a live handle and valid outputs.
                unsafe {
                    for r in 0..N as u32 {
                        assert_eq!(ffd_is_alive(h, r), 1, "rank {rank} about {r}");
                    }
                    assert_eq!(ffd_is_alive(h, N as u32), 0, "beyond the job");
                    assert_eq!(ffd_is_excluded(h), 0);
                    assert_eq!(ffd_epoch(h, &mut epoch), FFD_OK);
                    assert_eq!(
                        ffd_failed_ranks(h, buf.as_mut_ptr(), buf.len(), &mut n),
                        FFD_OK
                    );
                    assert_eq!(
                        ffd_failed_ranks(h, ptr::null_mut(), 1, &mut n),
                        FFD_ERR_NULL
                    );
                }
                assert_eq!((epoch, n, buf), (0, 0, [u32::MAX; 4]));
                let mut state = ffd_state_t {
                    state: ffd_state_kind::FFD_STATE_STOPPED,
                    stop_cause: ffd_stop_cause::FFD_STOP_PANIC,
                    excluded_by: 9,
                };
                let mut text = [0x55 as c_char; 8];
                let mut text_len = 9;
                // SAFETY: a live handle and valid outputs.
                let rc = unsafe {
                    ffd_state(h, &mut state, text.as_mut_ptr(), text.len(), &mut text_len)
                };
                assert_eq!(rc, FFD_OK);
                assert_eq!(
                    (
                        state.state,
                        state.stop_cause,
                        state.excluded_by,
                        text[0],
                        text_len
                    ),
                    (
                        ffd_state_kind::FFD_STATE_RUNNING,
                        ffd_stop_cause::FFD_STOP_NONE,
                        0,
                        0,
                        0
                    )
                );
                started.wait();

                // Rank N-1 leaves; the others learn it as a departure.
                if rank == N - 1 {
                    // SAFETY: our live handle, not used by anyone else now.
                    assert_eq!(unsafe { ffd_finalize(&mut h) }, FFD_OK);
                    assert!(h.is_null());
                    // SAFETY: the handle variable is NULL: refused.
                    assert_eq!(unsafe { ffd_finalize(&mut h) }, FFD_ERR_NULL);
                } else {
                    let leaver = (N - 1) as u32;
                    let (left, _) = wait_event(h, Duration::from_secs(10), |e| {
                        e.kind == ffd_event_kind::FFD_EVENT_LEFT && e.rank == leaver
                    })
                    .unwrap_or_else(|| panic!("rank {rank}: no departure"));
                    let (mut now_ns, mut later_ns) = (0, 0);
                    // SAFETY: a live handle and valid outputs.
                    unsafe {
                        assert_eq!(ffd_is_alive(h, leaver), 0);
                        assert_eq!(ffd_epoch(h, &mut epoch), FFD_OK);
                        assert_eq!(ffd_uptime(h, &mut now_ns), FFD_OK);
                        assert_eq!(ffd_uptime(h, ptr::null_mut()), FFD_ERR_NULL);
                        assert_eq!(ffd_uptime(h, &mut later_ns), FFD_OK);
                    }
                    assert_eq!(epoch, 0, "a departure is no failure");
                    // Events are stamped on the clock ffd_uptime reads.
                    assert!(
                        0 < left.time_ns && left.time_ns <= now_ns && now_ns <= later_ns,
                        "departure at {} ns, then {now_ns} and {later_ns} ns",
                        left.time_ns
                    );
                    // The counters are published every 50 ms: poll (bounded)
                    // until they include the departure.
                    let mut st = ffd_stats_t::default();
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while st.departures_learned == 0 && Instant::now() < deadline {
                        // SAFETY: a live handle and a valid output.
                        assert_eq!(unsafe { ffd_stats(h, &mut st) }, FFD_OK);
                        thread::sleep(Duration::from_millis(10));
                    }
                    // SAFETY: a live handle and a valid output.
                    assert_eq!(unsafe { ffd_uptime(h, &mut later_ns) }, FFD_OK);
                    assert!(
                        st.departures_learned == 1
                            && st.heartbeats_sent > 0
                            && st.uptime_ns > 0
                            && st.uptime_ns <= later_ns
                            && st.epoch == 0
                            && st.pinned_cpu == -1,
                        "{st:?}"
                    );
                    assert_eq!(*mine.left.lock().unwrap(), [leaver]);
                }
                started.wait();
                if !h.is_null() {
                    // SAFETY: our live handle.
                    assert_eq!(unsafe { ffd_finalize(&mut h) }, FFD_OK);
                }
            })
        })
        .collect();
    let mut failures = Vec::new();
    for (rank, t) in threads.into_iter().enumerate() {
        if let Err(e) = t.join() {
            failures.push(format!("rank {rank}: {}", panic_text(e.as_ref())));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

#[test]
fn errors_map_to_their_codes() {
    let code = |e: Error| e.code;
    assert_eq!(code(DetectorError::Stopped.into()), FFD_ERR_STOPPED);
    assert_eq!(
        code(DetectorError::PayloadTooLarge { len: 9, max: 8 }.into()),
        FFD_ERR_PAYLOAD_TOO_LARGE
    );
    let busy: Error = DetectorError::Busy {
        queued: FFD_MAX_QUEUED_BROADCASTS,
    }
    .into();
    assert_eq!(busy.code, FFD_ERR_BUSY);
    assert!(
        busy.message.contains("128 payloads are queued") && busy.message.ends_with("retry later"),
        "{}",
        busy.message
    );
    assert_eq!(
        code(BootstrapError::Embedder("x".into()).into()),
        FFD_ERR_BOOTSTRAP
    );
    // A bootstrap variable's bad value is a settings error, not a bootstrap one.
    let missing = ConfigError::Missing {
        var: config::var::RANK,
        accepted: "",
    };
    assert_eq!(code(BootstrapError::Config(missing).into()), FFD_ERR_CONFIG);
    let start = StartError::Hostname(std::io::Error::other("no name"));
    assert_eq!(code(start.into()), FFD_ERR_SYSTEM);
    let start = StartError::Exchange(BootstrapError::Invalid("x".into()).into());
    assert_eq!(code(start.into()), FFD_ERR_BOOTSTRAP);
}

mod agree;
mod fork;
mod lifetimes;
