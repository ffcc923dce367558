//! The detector's life as the embedder sees it: running, left, excluded, or
//! stopped and why; whether embedder's callbacks may still start, and since when
//! one has been running.
//!
//! Owns: [`DetectorState`], [`StopReason`], [`Liveness`] and [`Lifecycle`],
//! the lock-free cell the progress thread publishes them in and the embedder
//! reads. Must not: block the progress thread (it writes atomics and a
//! `OnceLock`, never a lock the embedder can hold), or let a state go back to
//! running: the first end recorded is the one reported.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::protocol::Rank;

/// Where a detector is in its life ([`Detector::state`](super::Detector::state)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DetectorState {
    /// The progress thread watches the job: answers are live.
    Running,
    /// This rank left cleanly (its shutdown ran).
    Left,
    /// The others declared this rank failed (`by` told it): it no longer
    /// takes part and the embedder must stop using it (fail-stop).
    Excluded { by: Rank },
    /// The progress thread ended on an error or a panic: nothing watches
    /// the job any more, and the other ranks will declare this one failed.
    Stopped(StopReason),
    /// This process is a `fork()`ed child of process `pid`, which started
    /// the detector and runs it: the child holds a copy without the
    /// threads behind it. Its answers would be stale, so liveness is
    /// unknown, calls that act fail with `Forked`, and shutdown frees the
    /// copy at once, touching nothing of the parent's. A child that needs
    /// a detector starts its own.
    Forked { pid: u32 },
}

/// What ended a progress thread that stopped on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopCause {
    /// Reading the completion queue failed.
    CompletionQueue,
    /// Waiting on the completion queue's wait object (or the wake-up
    /// socket) failed.
    Wait,
    /// The protocol engine refused to start.
    Engine,
    /// A panic on the progress thread (a bug in ffd: please report it).
    Panic,
}

impl StopCause {
    pub const ALL: [StopCause; 4] = [
        StopCause::CompletionQueue,
        StopCause::Wait,
        StopCause::Engine,
        StopCause::Panic,
    ];

    /// A short name: `completion_queue`, `wait`, `engine`, `panic`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopCause::CompletionQueue => "completion_queue",
            StopCause::Wait => "wait",
            StopCause::Engine => "engine",
            StopCause::Panic => "panic",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            StopCause::CompletionQueue => "reading the completion queue failed",
            StopCause::Wait => "waiting on the completion queue failed",
            StopCause::Engine => "the protocol engine refused to start",
            StopCause::Panic => "the progress thread panicked",
        }
    }
}

/// Why the progress thread stopped: the cause and the error's own text
/// (libfabric's message, the panic's message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", cause.describe())]
pub struct StopReason {
    pub cause: StopCause,
    pub message: String,
}

impl StopReason {
    pub fn new(cause: StopCause, message: impl Into<String>) -> StopReason {
        StopReason {
            cause,
            message: message.into(),
        }
    }

    /// A panic's payload as a reason.
    pub(crate) fn panic(payload: &(dyn std::any::Any + Send)) -> StopReason {
        let text = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(no message)");
        StopReason::new(StopCause::Panic, text)
    }
}

/// What a detector can say about a rank ([`Detector::liveness`](super::Detector::liveness)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// Neither known failed nor known to have left, and the detector is
    /// running: alive as far as it knows.
    Alive,
    /// Known failed (final), known to have left, or not a rank of the job.
    NotAlive,
    /// The detector is no longer running (this rank was excluded, or its
    /// progress thread stopped): what it knew is stale, so it does not say.
    Unknown,
}

const RUNNING: u8 = 0;
const LEFT: u8 = 1;
const EXCLUDED: u8 = 2;
const STOPPED: u8 = 3;

/// The published life of one detector: the progress thread records its
/// end, the embedder reads it and closes callbacks. Lock-free on both sides.
#[derive(Debug, Default)]
pub(crate) struct Lifecycle {
    /// RUNNING, LEFT, EXCLUDED or STOPPED; leaves RUNNING once.
    state: AtomicU8,
    /// The rank that told this one it was excluded (read after EXCLUDED).
    excluded_by: AtomicU32,
    /// Set before the state becomes STOPPED.
    stop: OnceLock<StopReason>,
    /// The progress thread has ended.
    thread_ended: AtomicBool,
    /// Set when shutdown begins: no embedder's callback starts after it.
    callbacks_closed: AtomicBool,
    /// 0 while no embedder's callback runs; else 1 + the detector-clock ns at
    /// which the running one started.
    callback_since: AtomicU64,
}

impl Lifecycle {
    pub(crate) fn state(&self) -> DetectorState {
        match self.state.load(Ordering::Acquire) {
            RUNNING => DetectorState::Running,
            LEFT => DetectorState::Left,
            EXCLUDED => DetectorState::Excluded {
                by: self.excluded_by.load(Ordering::Relaxed),
            },
            _ => DetectorState::Stopped(self.stop.get().cloned().unwrap_or_else(|| {
                StopReason::new(StopCause::Panic, "the stop reason was not recorded")
            })),
        }
    }

    /// Whether the detector is still in [`DetectorState::Running`].
    pub(crate) fn is_running(&self) -> bool {
        self.state.load(Ordering::Acquire) == RUNNING
    }

    pub(crate) fn is_excluded(&self) -> bool {
        self.state.load(Ordering::Acquire) == EXCLUDED
    }

    /// Records the exclusion (told by `by`); false if the detector had
    /// already ended otherwise.
    pub(crate) fn excluded(&self, by: Rank) -> bool {
        self.excluded_by.store(by, Ordering::Relaxed);
        self.leave_running(EXCLUDED)
    }

    /// Records a clean leave; false if the detector had already ended.
    pub(crate) fn left(&self) -> bool {
        self.leave_running(LEFT)
    }

    /// Records a stop for `reason`; false if the detector had already
    /// ended otherwise (a leave or an exclusion is then what it reports).
    pub(crate) fn stopped(&self, reason: StopReason) -> bool {
        if self.state.load(Ordering::Acquire) != RUNNING {
            return false;
        }
        // Only the progress thread ends a detector, so the reason is set
        // once, before the state says STOPPED.
        let _ = self.stop.set(reason);
        self.leave_running(STOPPED)
    }

    fn leave_running(&self, to: u8) -> bool {
        self.state
            .compare_exchange(RUNNING, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    pub(crate) fn thread_ended(&self) {
        self.thread_ended.store(true, Ordering::Release);
    }

    /// Whether the progress thread is still running.
    pub(crate) fn thread_running(&self) -> bool {
        !self.thread_ended.load(Ordering::Acquire)
    }

    /// From now on no embedder's callback starts (the one running, if any, is the
    /// last).
    pub(crate) fn close_callbacks(&self) {
        self.callbacks_closed.store(true, Ordering::SeqCst);
    }

    /// Marks a embedder's callback as started at `at` (detector clock), unless
    /// callbacks are closed: then it must not run, and this returns false.
    pub(crate) fn callback_starts(&self, at: Duration) -> bool {
        let at = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX - 1);
        self.callback_since.store(at + 1, Ordering::SeqCst);
        if self.callbacks_closed.load(Ordering::SeqCst) {
            self.callback_since.store(0, Ordering::SeqCst);
            return false;
        }
        true
    }

    pub(crate) fn callback_returned(&self) {
        self.callback_since.store(0, Ordering::SeqCst);
    }

    /// How long the running embedder's callback has run, at `now` (detector
    /// clock), or `None` when none runs.
    pub(crate) fn callback_running_for(&self, now: Duration) -> Option<Duration> {
        match self.callback_since.load(Ordering::SeqCst) {
            0 => None,
            since => Some(now.saturating_sub(Duration::from_nanos(since - 1))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_end_is_the_one_reported() {
        let life = Lifecycle::default();
        assert_eq!(life.state(), DetectorState::Running);
        assert!(life.is_running());
        assert!(life.excluded(4));
        assert!(!life.stopped(StopReason::new(StopCause::Wait, "late")));
        assert!(!life.left());
        assert_eq!(life.state(), DetectorState::Excluded { by: 4 });
        assert!(life.is_excluded() && !life.is_running());

        let life = Lifecycle::default();
        let reason = StopReason::new(StopCause::CompletionQueue, "fi_cq_read failed");
        assert!(life.stopped(reason.clone()));
        assert!(!life.excluded(1));
        assert_eq!(life.state(), DetectorState::Stopped(reason));
    }

    #[test]
    fn a_closed_gate_lets_no_callback_start() {
        let life = Lifecycle::default();
        assert!(life.callback_starts(Duration::from_millis(5)));
        assert_eq!(
            life.callback_running_for(Duration::from_millis(8)),
            Some(Duration::from_millis(3))
        );
        life.callback_returned();
        assert_eq!(life.callback_running_for(Duration::from_millis(9)), None);
        life.close_callbacks();
        assert!(!life.callback_starts(Duration::from_millis(10)));
        assert_eq!(life.callback_running_for(Duration::from_millis(11)), None);
    }

    #[test]
    fn reasons_read_as_cause_and_message() {
        let reason = StopReason::new(StopCause::Panic, "index out of bounds");
        assert_eq!(
            reason.to_string(),
            "the progress thread panicked: index out of bounds"
        );
        let payload: Box<dyn std::any::Any + Send> = Box::new(String::from("boom"));
        assert_eq!(StopReason::panic(payload.as_ref()).message, "boom");
        let names: Vec<&str> = StopCause::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names, ["completion_queue", "wait", "engine", "panic"]);
    }
}
