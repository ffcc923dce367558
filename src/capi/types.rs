//! The C-visible types: result codes, events (kinds, causes, stop causes,
//! the struct), the detector's state, the stats struct, the embedder's
//! allgather and callback types, the two opaque handles, and the conversion
//! of a detector event and a state to C.
//!
//! Owns: the layout C sees (every `#[repr(C)]` item here is in
//! `include/ffd.h`, in this order). Must not: add, reorder or resize a
//! field or a variant (that changes the C ABI), or hold a pointer the embedder
//! lent past the call that lent it, except the callback's `userdata`.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};

use crate::config::ConfigBuilder;
use crate::protocol::{Cause, Rank};
use crate::runtime::{self, Detector, DetectorEvent, DetectorState, Event, StopCause};

/// The largest application payload (ffd_broadcast(), FFD_EVENT_PAYLOAD), in
/// bytes: a buffer of this size always fits an event's payload
/// (ffd_next_event()).
pub const FFD_MAX_PAYLOAD: usize = 8192;

const _: () = assert!(FFD_MAX_PAYLOAD == runtime::MAX_APP_PAYLOAD);

/// The most payloads queued for the progress thread and not yet sent:
/// ffd_broadcast() refuses one more with FFD_ERR_BUSY.
pub const FFD_MAX_QUEUED_BROADCASTS: usize = 128;

const _: () = assert!(FFD_MAX_QUEUED_BROADCASTS == runtime::MAX_QUEUED_BROADCASTS);

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
    /// ffd_next_event(): the next event's payload does not fit the buffer.
    /// The event is described (its `payload_len` is the size needed,
    /// `payload` is NULL) and stays first in line: call again with a buffer
    /// of at least `payload_len` bytes (FFD_MAX_PAYLOAD always fits a
    /// PAYLOAD; 4 × the job size a VIEW). ffd_agree(), ffd_agree_test(),
    /// ffd_agree_wait(): the decided failed set has more ranks than the
    /// buffer holds (see those functions).
    FFD_BUFFER_TOO_SMALL = 2,
    /// ffd_epoch(), ffd_failed_ranks(): the detector is no longer running
    /// (this rank was excluded, or its progress thread stopped; see
    /// ffd_state()). The outputs are written, with what it knew at its
    /// end: stale, no longer kept up to date.
    FFD_STALE = 3,
    /// A required pointer argument (or the handle) is NULL.
    FFD_ERR_NULL = -1,
    /// An argument is out of range or malformed (unknown variable name, text
    /// that is not UTF-8, rank not below size, a call from the wrong thread).
    FFD_ERR_INVALID_ARGUMENT = -2,
    /// A setting's value is not accepted; the message names the variable,
    /// the value and the accepted form.
    FFD_ERR_CONFIG = -3,
    /// The address exchange at ffd_init() failed (the embedder's allgather
    /// returned non-zero, PMIx or the TCP rendezvous failed, ranks disagree
    /// on size, version or settings, no bootstrap available).
    FFD_ERR_BOOTSTRAP = -4,
    /// libfabric refused something (no such provider or domain, endpoint,
    /// memory registration); the message carries libfabric's error text.
    FFD_ERR_FABRIC = -5,
    /// The operating system refused something (threads, sockets, hwloc,
    /// pinning, the host name).
    FFD_ERR_SYSTEM = -6,
    /// The detector is no longer running: this rank was excluded (declared
    /// failed by the others) or its progress thread stopped on an error or
    /// a panic (ffd_state() says which and why). ffd_is_alive() returns it
    /// rather than a stale answer.
    FFD_ERR_STOPPED = -7,
    /// ffd_broadcast(): the payload exceeds the limit (8 KiB).
    FFD_ERR_PAYLOAD_TOO_LARGE = -8,
    /// A bug inside ffd: a Rust panic was caught at the API boundary. The
    /// message says where; please report it.
    FFD_ERR_PANIC = -9,
    /// The handle belongs to another process: this process is a fork()ed
    /// child of the one that called ffd_init(), and holds only a copy of
    /// the handle (the detector's threads and fabric stayed with the
    /// parent). Every call on it returns this code (ffd_is_alive() too),
    /// and ffd_finalize() frees the copy at once, touching nothing of the
    /// parent's. A child that needs a detector calls ffd_init() anew.
    FFD_ERR_FORKED = -10,
    /// ffd_broadcast(): FFD_MAX_QUEUED_BROADCASTS payloads wait for the
    /// progress thread (the embedder broadcasts faster than it sends
    /// them). This payload was not sent; the queued ones are kept and go
    /// out in order. Retry later (after other work or a pause); never
    /// returned for anything but a broadcast.
    FFD_ERR_BUSY = -11,
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
    /// the embedder must stop using this process.
    FFD_EVENT_SELF_EXCLUDED = 3,
    /// `rank`, this rank's emitter, was silent for `stalled_ns` and then
    /// heartbeated again: a slow but live process. A warning, never a failure.
    FFD_EVENT_SLOW_EMITTER = 4,
    /// An application payload sent with ffd_broadcast() by `rank` (this
    /// rank's own too, unless FFD_DELIVER_OWN=no), sequence number `seq`
    /// (1, 2, ... per origin, delivered in that order, each once), bytes at
    /// `payload` (`payload_len` of them). If any live rank gets it, every
    /// live rank does, even when its origin died while sending it.
    FFD_EVENT_PAYLOAD = 5,
    /// The detector stopped on an error or a panic (`stop_cause` says
    /// which; ffd_state() gives the text): the last event. Nothing watches
    /// the job from this rank any more, the other ranks will declare it
    /// failed, and ffd_is_alive() returns FFD_ERR_STOPPED. `rank` is this
    /// rank. Call ffd_finalize() to free the handle.
    FFD_EVENT_STOPPED = 6,
    /// View `seq` was decided: the ranks out of the job (failed or left)
    /// are at `payload`, as `payload_len / 4` uint32_t in increasing order
    /// (native byte order; from ffd_next_event(), in the caller's buffer,
    /// which must then be aligned for uint32_t). Every live rank raises the
    /// same views in the same order (ids 1, 2, 3, ...), each after the
    /// FAILED and LEFT events of the ranks it names, so an embedder can shrink
    /// its communicator to the view without another round. `hops`: the
    /// agreement's longest message chain. ffd_view() gives the latest.
    FFD_EVENT_VIEW = 7,
    /// This rank's agreement number `seq` (its `seq`-th ffd_agree() or
    /// ffd_iagree(), from 1) has ended: its request's ffd_agree_test() now
    /// says done (decided, or FFD_ERR_STOPPED when this rank left or was
    /// excluded first). `hops` as for VIEW (0 when not decided).
    FFD_EVENT_AGREED = 8,
    /// Every rank of one host failed together (found silent in one
    /// timeout, none of them answering): `rank` is the host's lowest rank,
    /// `seq` the number of its ranks, `detector` the rank that declared
    /// them. Each rank is also reported by its own FAILED event, before
    /// this one.
    FFD_EVENT_HOST_FAILED = 9,
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
    /// The process exited, seen by this rank on the same host (a pidfd):
    /// proof of death.
    FFD_CAUSE_EXITED = 4,
}

/// What stopped a detector (ffd_event_t::stop_cause, ffd_state_t::stop_cause).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ffd_stop_cause {
    /// Not stopped (or not a STOPPED event).
    FFD_STOP_NONE = 0,
    /// Reading the completion queue failed (libfabric's text in ffd_state()).
    FFD_STOP_COMPLETION_QUEUE = 1,
    /// Waiting on the completion queue failed.
    FFD_STOP_WAIT = 2,
    /// The protocol engine refused to start.
    FFD_STOP_ENGINE = 3,
    /// A panic on the progress thread: a bug in ffd, please report it with
    /// the text from ffd_state().
    FFD_STOP_PANIC = 4,
}

/// One event, as the callback and ffd_next_event() see it. Fields that do
/// not apply to the kind are 0 (`payload` NULL).
///
/// Ownership of `payload`: in a callback, the bytes belong to ffd and are
/// valid for the duration of the callback (copy them to keep them). From
/// ffd_next_event() they are in the caller's buffer (`payload` points into
/// it): ffd keeps no pointer to them.
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
    /// VIEW, AGREED: the longest chain of agreement messages behind it.
    pub hops: u32,
    /// Failures known to this rank once this event was applied.
    pub epoch: u64,
    /// When this rank learned it, in ns on the detector's clock, which
    /// starts inside ffd_init() after the address exchange (ffd_uptime()).
    pub time_ns: u64,
    /// SLOW_EMITTER: how long the emitter was silent, in ns.
    pub stalled_ns: u64,
    /// PAYLOAD: the sequence number of the payload from its origin. VIEW:
    /// the view's id. AGREED: the agreement's sequence number.
    pub seq: u64,
    /// PAYLOAD: the bytes; VIEW: the ranks out of the view, as uint32_t
    /// (see the ownership note above); NULL otherwise.
    pub payload: *const u8,
    /// PAYLOAD, VIEW: the number of bytes at `payload` (with
    /// FFD_BUFFER_TOO_SMALL: the number of bytes needed).
    pub payload_len: usize,
    /// STOPPED: what stopped the detector. Otherwise FFD_STOP_NONE.
    pub stop_cause: ffd_stop_cause,
}

/// Where a detector is in its life (ffd_state_t::state).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ffd_state_kind {
    /// The progress thread watches the job: answers are live.
    FFD_STATE_RUNNING = 0,
    /// This rank left cleanly (seen only while ffd_finalize() runs).
    FFD_STATE_LEFT = 1,
    /// The others declared this rank failed (FFD_EVENT_SELF_EXCLUDED): it
    /// no longer takes part and the embedder must stop using this process.
    FFD_STATE_EXCLUDED = 2,
    /// The progress thread stopped on an error or a panic
    /// (FFD_EVENT_STOPPED): nothing watches the job from this rank, and the
    /// other ranks will declare it failed.
    FFD_STATE_STOPPED = 3,
}

/// A detector's state (ffd_state()).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ffd_state_t {
    pub state: ffd_state_kind,
    /// STOPPED: what stopped it. Otherwise FFD_STOP_NONE.
    pub stop_cause: ffd_stop_cause,
    /// EXCLUDED: the rank that told this one. Otherwise 0.
    pub excluded_by: u32,
}

/// The main counters of a detector (ffd_stats()), as last published by its
/// progress thread (every 50 ms).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ffd_stats_t {
    /// The detector's clock when they were published, in ns (ffd_uptime()).
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
    /// Protocol message sends that completed, and messages received, over
    /// the fabric (Rust: `runtime.messages.sends_completed`, `.received`).
    pub messages_sent: u64,
    pub messages_received: u64,
    /// Messages dropped as malformed, foreign (wrong job key) or unsafe:
    /// the sum of the Engine's drops by reason (Rust: `engine.drops.rejected`).
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
    /// Failures this rank saw as a same-host process exit (FFD_CAUSE_EXITED).
    pub detections_exited: u64,
}

/// The embedder's fixed-length allgather: every rank contributes `len` bytes at
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

/// The embedder's out-of-band collective for ffd_init()'s address exchange, as
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
/// `event` and its payload are valid for the duration of the call.
///
/// No callback runs after ffd_finalize() returns: once ffd_finalize() has
/// begun no new callback starts, and if one is running ffd_finalize() waits
/// for it to return. A callback that never returns therefore keeps
/// ffd_finalize() from ever returning (it logs a warning every 5 s while it
/// waits).
pub type ffd_event_callback =
    Option<unsafe extern "C" fn(userdata: *mut c_void, event: *const ffd_event_t)>;

/// Settings for ffd_init(): the `FFD_*` variables (see `ffd info`) and an
/// optional event callback. Create with ffd_config_new() or
/// ffd_config_from_env(), free with ffd_config_free(). Not thread-safe:
/// one thread at a time per config. ffd_init() copies what it needs, so the
/// config may be freed right after it.
#[derive(Clone)]
pub struct ffd_config_t {
    /// The settings, typed: ffd_config_set() parses and checks a value into
    /// it at once; ffd_init() builds the configuration from it.
    pub(super) settings: ConfigBuilder,
    /// The bootstrap variables (FFD_BOOTSTRAP, FFD_RANK, FFD_SIZE,
    /// FFD_BOOTSTRAP_TIMEOUT) as given, for the launcher bootstrap of an
    /// ffd_init() without `oob`.
    pub(super) bootstrap: BTreeMap<&'static str, String>,
    /// Unknown `FFD_*` names read from the environment, kept so that
    /// ffd_init() warns about them.
    pub(super) unknown: BTreeMap<String, String>,
    pub(super) callback: Option<HostCallback>,
}

/// An agreement in progress (ffd_iagree()), until ffd_agree_free(). It
/// keeps its result once known, so ffd_agree_test() may be called again
/// (with a larger buffer). Independent of the detector's handle: it may be
/// freed before or after ffd_finalize() (an agreement still open at
/// ffd_finalize() ends with FFD_ERR_STOPPED). One thread at a time per
/// request. In a fork()ed child of the process that asked for it,
/// ffd_agree_test() and ffd_agree_wait() return FFD_ERR_FORKED (nobody will
/// decide it there); ffd_agree_free() frees the child's copy.
pub struct ffd_agree_req_t {
    pub(super) request: crate::runtime::AgreeRequest,
}

/// A running detector, from ffd_init() to ffd_finalize(). Every function
/// taking a `const ffd_t *` may be called from any thread, concurrently;
/// ffd_is_alive(), ffd_epoch() and ffd_failed_ranks() never take a lock.
/// It belongs to the process that called ffd_init(): in a fork()ed child
/// every call on it returns FFD_ERR_FORKED (see ffd_finalize()).
pub struct ffd_t {
    pub(super) detector: Detector,
}

/// The embedder's callback and its context, called on the progress thread.
#[derive(Clone, Copy)]
pub(super) struct HostCallback {
    pub(super) f: unsafe extern "C" fn(*mut c_void, *const ffd_event_t),
    pub(super) userdata: *mut c_void,
}

impl HostCallback {
    pub(super) fn call(&self, event: &ffd_event_t) {
        // SAFETY: the embedder's callback with its own userdata, callable from
        // this (progress) thread until ffd_finalize returns
        // (ffd_config_set_callback's contract), which it does only once
        // this thread has ended; `event` and the payload it points into
        // outlive the call.
        unsafe { (self.f)(self.userdata, event) }
    }
}

// SAFETY: `userdata` is the embedder's pointer, used only as the first argument
// of the embedder's callback. ffd_config_set_callback() documents that the
// callback runs on ffd's progress thread with that pointer, so the embedder
// promised the pair may be used from another thread; ffd never dereferences it.
unsafe impl Send for HostCallback {}

/// `event` as C sees it; `me` is this rank (the subject of SELF_EXCLUDED
/// and STOPPED). A payload's pointer points into `event`.
pub(super) fn to_c_event(event: &DetectorEvent, me: Rank) -> ffd_event_t {
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
        stop_cause: ffd_stop_cause::FFD_STOP_NONE,
    };
    match &event.event {
        Event::Stopped(reason) => {
            c.kind = ffd_event_kind::FFD_EVENT_STOPPED;
            c.rank = me;
            c.stop_cause = to_c_stop_cause(reason.cause);
        }
        Event::Failed {
            rank,
            detector,
            cause,
            hops,
            ..
        } => {
            c.rank = *rank;
            c.detector = *detector;
            c.cause = match cause {
                Cause::Timeout => ffd_cause::FFD_CAUSE_TIMEOUT,
                Cause::InBand => ffd_cause::FFD_CAUSE_INBAND,
                Cause::Notice => ffd_cause::FFD_CAUSE_NOTICE,
                Cause::Exited => ffd_cause::FFD_CAUSE_EXITED,
            };
            c.hops = u32::from(*hops);
        }
        Event::HostFailed { ranks, .. } => {
            c.kind = ffd_event_kind::FFD_EVENT_HOST_FAILED;
            c.rank = ranks.first().copied().unwrap_or(0);
            c.detector = me;
            c.seq = ranks.len() as u64;
        }
        Event::Left { rank } => {
            c.kind = ffd_event_kind::FFD_EVENT_LEFT;
            c.rank = *rank;
        }
        Event::SelfExcluded { by, .. } => {
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
        Event::ViewChange { id, failed, hops } => {
            c.kind = ffd_event_kind::FFD_EVENT_VIEW;
            c.seq = *id;
            c.hops = u32::from(*hops);
            // The ranks as uint32_t, aligned: `failed` is a Vec<u32>.
            c.payload = failed.as_ptr().cast::<u8>();
            c.payload_len = std::mem::size_of_val(failed.as_slice());
        }
        Event::Agreed { seq, hops, .. } => {
            c.kind = ffd_event_kind::FFD_EVENT_AGREED;
            c.seq = *seq;
            c.hops = u32::from(*hops);
        }
        Event::AgreeAborted { seq, .. } => {
            c.kind = ffd_event_kind::FFD_EVENT_AGREED;
            c.seq = *seq;
        }
    }
    c
}

fn to_c_stop_cause(cause: StopCause) -> ffd_stop_cause {
    match cause {
        StopCause::CompletionQueue => ffd_stop_cause::FFD_STOP_COMPLETION_QUEUE,
        StopCause::Wait => ffd_stop_cause::FFD_STOP_WAIT,
        StopCause::Engine => ffd_stop_cause::FFD_STOP_ENGINE,
        StopCause::Panic => ffd_stop_cause::FFD_STOP_PANIC,
    }
}

/// `state` as C sees it, and its text (empty while running).
pub(super) fn to_c_state(state: &DetectorState) -> (ffd_state_t, String) {
    let mut c = ffd_state_t {
        state: ffd_state_kind::FFD_STATE_RUNNING,
        stop_cause: ffd_stop_cause::FFD_STOP_NONE,
        excluded_by: 0,
    };
    let text = match state {
        DetectorState::Running => String::new(),
        DetectorState::Left => {
            c.state = ffd_state_kind::FFD_STATE_LEFT;
            "this rank left cleanly".to_owned()
        }
        DetectorState::Excluded { by } => {
            c.state = ffd_state_kind::FFD_STATE_EXCLUDED;
            c.excluded_by = *by;
            format!("the other ranks declared this rank failed (told by rank {by})")
        }
        DetectorState::Stopped(reason) => {
            c.state = ffd_state_kind::FFD_STATE_STOPPED;
            c.stop_cause = to_c_stop_cause(reason.cause);
            reason.to_string()
        }
        // The C calls on a forked child's handle fail with FFD_ERR_FORKED
        // before they ask for the state; should one ask, "not running" is
        // the truth for this process.
        DetectorState::Forked { pid } => {
            c.state = ffd_state_kind::FFD_STATE_STOPPED;
            format!("this process is a fork()ed child of process {pid}, which runs the detector")
        }
    };
    (c, text)
}
