//! The questions a host asks a running detector: is this rank alive, the
//! epoch, the failed ranks, the next event and its file descriptor, this
//! rank and the job size, the counters; and ffd_broadcast().
//!
//! Owns: the exports taking a `const ffd_t *`, callable from any thread at
//! once. Must not: block on the progress thread (ffd_is_alive(),
//! ffd_epoch() and ffd_failed_ranks() take no lock), or write an output
//! parameter when the call fails.

use std::ffi::{c_int, c_void};
use std::os::fd::AsRawFd;

use super::ffd_result::{self, *};
use super::{Error, boundary, boundary_value, ffd_event_t, ffd_stats_t, ffd_t, to_c_event};
use crate::protocol::Cause;
use crate::runtime::DetectorError;

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
