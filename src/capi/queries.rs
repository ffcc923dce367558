//! The questions an embedder asks a running detector: is this rank alive, the
//! epoch, the failed ranks, the detector's state, the next event and its
//! file descriptor, this rank and the job size, the counters; and
//! ffd_broadcast().
//!
//! Owns: the exports taking a `const ffd_t *`, callable from any thread at
//! once, and the rule that a stopped detector's answers say they are stale.
//! Must not: block on the progress thread (ffd_is_alive(), ffd_epoch(),
//! ffd_failed_ranks() and ffd_state() take no lock), write an output
//! parameter when the call fails, or hand out a pointer into memory ffd
//! may free or reuse (an event's payload is copied into the caller's
//! buffer).

use std::ffi::{c_char, c_int, c_void};
use std::os::fd::AsRawFd;

use super::ffd_result::{self, *};
use super::{
    Error, boundary, boundary_value, ffd_event_kind, ffd_event_t, ffd_state_t, ffd_stats_t, ffd_t,
    handle, to_c_event, to_c_state, write_text,
};
use crate::protocol::Cause;
use crate::runtime::{DetectorState, Liveness};

/// Whether `rank` is alive as far as this rank knows: 1 if it is neither
/// known failed nor known to have left, 0 if it failed, left, or is not
/// below the job size. A returned 0 is final. Once the detector is no
/// longer running (this rank was excluded, or its progress thread stopped
/// on an error or a panic) it returns FFD_ERR_STOPPED for every rank of
/// the job rather than a stale answer: test `== 1` for alive, `== 0` for
/// failed, `< 0` for "cannot say" (ffd_state() says why). In a fork()ed
/// child of the process that called ffd_init() it returns FFD_ERR_FORKED
/// for every rank (the child has only a copy of the parent's detector).
/// Lock-free; any thread.
///
/// @return 1, 0, FFD_ERR_STOPPED (negative) once the detector stopped,
/// FFD_ERR_FORKED (negative) in a fork()ed child, or FFD_ERR_NULL
/// (negative) when `h` is NULL.
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
            match h.detector.liveness(rank) {
                Liveness::Alive => Ok(1),
                Liveness::NotAlive => Ok(0),
                Liveness::Unknown => Err(Error::new(
                    FFD_ERR_STOPPED,
                    format!(
                        "rank {rank}: this detector no longer runs, so it cannot say ({})",
                        to_c_state(&h.detector.state()).1
                    ),
                )),
            }
        },
    )
}

/// Whether the other ranks declared this rank failed (it received
/// FFD_EVENT_SELF_EXCLUDED): 1 or 0. The embedder must then stop using this
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

/// The number of failures this rank knows of; never decreases (an embedder can
/// compare it with a value it saw before to learn cheaply that something
/// changed). Lock-free; any thread.
///
/// @param[out] out receives the epoch on success (FFD_OK or FFD_STALE).
/// @return FFD_OK; FFD_STALE (positive) once the detector is no longer
/// running: `*out` is then the count it knew at its end; FFD_ERR_NULL.
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
        Ok(fresh_or_stale(h))
    })
}

/// The time on the detector's clock now, in ns: the clock that events'
/// `time_ns` and the stats' `uptime_ns` count on. It starts inside
/// ffd_init(), after the address exchange, so an embedder that wants an
/// event on the wall clock reads this and `CLOCK_REALTIME` together: the
/// event happened at `realtime - now_ns + event.time_ns`. Any thread; also
/// after the detector has stopped.
///
/// @param[out] now_ns receives the time on success.
/// @return FFD_OK; FFD_ERR_NULL.
///
/// # Safety
/// `h` is NULL or a live handle; `now_ns` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_uptime(h: *const ffd_t, now_ns: *mut u64) -> ffd_result {
    boundary("ffd_uptime", || {
        // SAFETY: NULL or a live handle (contract).
        let h = unsafe { handle(h) }?;
        if now_ns.is_null() {
            return Err(Error::null("now_ns"));
        }
        let ns = u64::try_from(h.detector.started().elapsed().as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: non-NULL and valid for a write (contract).
        unsafe { *now_ns = ns };
        Ok(FFD_OK)
    })
}

/// The failed ranks this rank knows of, in increasing order. Writes the
/// first `min(len, total)` of them to `buf` and the total count to `*n`;
/// if `*n > len` the list was cut: call again with a larger buffer (the
/// total may have grown meanwhile). `buf` may be NULL when `len` is 0, to
/// ask for the count. Lock-free; any thread.
///
/// @return FFD_OK; FFD_STALE (positive, outputs written) once the detector
/// is no longer running: the list is what it knew at its end; FFD_ERR_NULL
/// (`h`, `n`, or `buf` with a non-zero `len`).
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
        Ok(fresh_or_stale(h))
    })
}

/// FFD_OK while the detector runs, FFD_STALE once it no longer does.
/// Checked after the answer was read, so an answer read while the detector
/// ended is flagged too.
fn fresh_or_stale(h: &ffd_t) -> ffd_result {
    if h.detector.state() == DetectorState::Running {
        FFD_OK
    } else {
        FFD_STALE
    }
}

/// Takes the oldest queued event without blocking, and copies its payload
/// (FFD_EVENT_PAYLOAD's bytes, FFD_EVENT_VIEW's ranks; align the buffer
/// for uint32_t to read the ranks in place) into the caller's buffer: `out->payload` then points
/// to `buf` and `out->payload_len` says how many bytes were written. ffd
/// keeps no pointer into `buf` and none into its own memory is handed out.
/// A payload larger than `cap` is not taken: the call returns
/// FFD_BUFFER_TOO_SMALL with `*out` describing the event (`payload` NULL,
/// `payload_len` the size needed) and the event stays first in line for
/// the next call, from any thread. A buffer of FFD_MAX_PAYLOAD bytes
/// always fits a payload, one of 4 × the job size a view; `buf` may be
/// NULL when `cap` is 0 (then only payloads of 0 bytes and views naming
/// nobody are taken).
///
/// The queue holds FFD_EVENT_QUEUE events (1024 by default); when it
/// overflows, new events are dropped and counted
/// (ffd_stats_t::events_dropped), but the failed set stays exact. Any
/// thread; concurrent callers each get different events, in order.
///
/// @param[out] out receives the event (FFD_OK, FFD_BUFFER_TOO_SMALL).
/// @param buf where a payload is copied, `cap` bytes.
/// @return FFD_OK; FFD_NO_EVENT (positive) when none is queued;
/// FFD_BUFFER_TOO_SMALL (positive); FFD_ERR_NULL (`h`, `out`, or `buf`
/// with a non-zero `cap`).
///
/// # Safety
/// `h` is NULL or a live handle; `out` is NULL or valid for a write; `buf`
/// is NULL or valid for `cap` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_next_event(
    h: *const ffd_t,
    out: *mut ffd_event_t,
    buf: *mut c_void,
    cap: usize,
) -> ffd_result {
    boundary("ffd_next_event", || {
        // SAFETY: NULL or a live handle (contract).
        let h = unsafe { handle(h) }?;
        if out.is_null() {
            return Err(Error::null("out"));
        }
        if buf.is_null() && cap > 0 {
            return Err(Error::null("buf (with a non-zero cap)"));
        }
        let me = h.detector.rank();
        let fits = |event: &crate::runtime::DetectorEvent| {
            let c = to_c_event(event, me);
            if c.payload_len <= cap {
                Ok(())
            } else {
                Err(ffd_event_t {
                    payload: std::ptr::null(),
                    ..c
                })
            }
        };
        let c = match h.detector.try_next_event_if(fits) {
            None => return Ok(FFD_NO_EVENT),
            Some(Err(described)) => {
                // SAFETY: non-NULL and valid for a write (contract).
                unsafe { *out = described };
                return Ok(FFD_BUFFER_TOO_SMALL);
            }
            Some(Ok(event)) => {
                let mut c = to_c_event(&event, me);
                if matches!(
                    c.kind,
                    ffd_event_kind::FFD_EVENT_PAYLOAD | ffd_event_kind::FFD_EVENT_VIEW
                ) {
                    if c.payload_len > 0 {
                        // SAFETY: `buf` is valid for `cap` >= `payload_len`
                        // bytes (contract; checked by `fits`), and the event
                        // is our own allocation, so they do not overlap.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                c.payload,
                                buf.cast::<u8>(),
                                c.payload_len,
                            );
                        }
                    }
                    c.payload = buf.cast::<u8>().cast_const();
                }
                c
            }
        };
        // SAFETY: non-NULL and valid for a write (contract).
        unsafe { *out = c };
        Ok(FFD_OK)
    })
}

/// Where the detector is in its life: running, excluded (the others
/// declared this rank failed; `excluded_by` told it), or stopped on an
/// error or a panic (`stop_cause`), and why, as text: copied into `reason`
/// (`len` bytes, NUL-terminated, truncated to `len - 1` bytes), its full
/// length written to `*reason_len` unless that is NULL; "" while running.
/// `reason` may be NULL when `len` is 0. Lock-free; any thread.
///
/// @param[out] out receives the state on success.
/// @return FFD_OK or FFD_ERR_NULL (`h`, `out`, or `reason` with a non-zero
/// `len`).
///
/// # Safety
/// `h` is NULL or a live handle; `out` is NULL or valid for a write;
/// `reason` is NULL or valid for `len` bytes of writes; `reason_len` is
/// NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_state(
    h: *const ffd_t,
    out: *mut ffd_state_t,
    reason: *mut c_char,
    len: usize,
    reason_len: *mut usize,
) -> ffd_result {
    boundary("ffd_state", || {
        // SAFETY: NULL or a live handle (contract).
        let h = unsafe { handle(h) }?;
        if out.is_null() {
            return Err(Error::null("out"));
        }
        if reason.is_null() && len > 0 {
            return Err(Error::null("reason (with a non-zero len)"));
        }
        let (state, text) = to_c_state(&h.detector.state());
        // SAFETY: the pointers come with this function's own contract.
        unsafe { write_text(&text, reason, len, reason_len) }?;
        // SAFETY: non-NULL and valid for a write (contract).
        unsafe { *out = state };
        Ok(FFD_OK)
    })
}

/// A file descriptor that is readable while events are queued, for the
/// embedder's poll()/epoll loop; call ffd_next_event() until FFD_NO_EVENT when
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
/// receive FFD_EVENT_PAYLOAD, and so does this rank (its own event comes
/// first, before any copy leaves) unless FFD_DELIVER_OWN=no. All or none:
/// if any live rank gets it, every live rank does, even if this rank dies
/// while sending it. Each rank gets one origin's payloads once each, in
/// the order they were broadcast. Returns at once: the bytes are copied.
/// `bytes` may be NULL when `len` is 0. Any thread.
///
/// @return FFD_OK; FFD_ERR_NULL; FFD_ERR_PAYLOAD_TOO_LARGE (the message
/// gives the limit, FFD_MAX_PAYLOAD); FFD_ERR_STOPPED once this rank has
/// been excluded or its detector stopped; FFD_ERR_FORKED in a fork()ed
/// child (nothing is sent); FFD_ERR_BUSY when FFD_MAX_QUEUED_BROADCASTS
/// payloads wait for the progress thread: this one is not sent (the
/// queued ones are), retry later.
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
            heartbeats_sent: r.heartbeats.posted,
            heartbeats_completed: r.heartbeats.completed,
            posts_refused: r.transport.posts_refused,
            transport_errors: r.transport.errors,
            unreachable_verdicts: r.transport.unreachable_verdicts,
            messages_sent: r.messages.sends_completed,
            messages_received: r.messages.received,
            messages_rejected: e.drops.rejected.iter().sum(),
            notices_sent: e.notices_sent(),
            notices_received: e.notices_received(),
            notices_forwarded: e.notices.notices_forwarded,
            detections_timeout: e.detections_by(Cause::Timeout),
            detections_inband: e.detections_by(Cause::InBand),
            detections_notice: e.detections_by(Cause::Notice),
            departures_learned: e.notices.departures_learned,
            mendings: e.observation.mendings,
            slow_emitter_warnings: e.observation.slow_emitter_warnings,
            payloads_delivered: e.payloads.payloads_delivered,
            events_dropped: r.delivery.events_dropped,
            wakeups: r.lateness.total,
            wakeup_late_max_ns: r.lateness.max_us.saturating_mul(1000),
            pinned_cpu: h.detector.placement().cpu.map_or(-1, |c| c as i64),
            detections_exited: e.detections_by(Cause::Exited),
        };
        // SAFETY: non-NULL and valid for a write (contract).
        unsafe { *out = stats };
        Ok(FFD_OK)
    })
}
