//! The runtime: the pinned progress thread that drives the protocol
//! [`Engine`](crate::protocol::Engine) with real time and the fabric, and
//! what the embedder reads from it (lock-free state, events, stats).
//!
//! Owns: the detector's own fabric resources (fabric, domain, endpoint,
//! address vector, completion queue, the one-page slot region), start-up
//! ([`startup`]: peer records and their exchange, ring, placement; `link`:
//! the linking phase), the progress thread, delivery of events, and the
//! detector's life ([`state`]). This file holds the embedder's API,
//! [`Detector`]. Must not: make protocol decisions (the Engine does),
//! block the progress thread on the embedder, allocate on the heartbeat path,
//! or let a embedder's callback run after [`Detector::shutdown`] returns.
//!
//! ```no_run
//! use ffd::bootstrap::tcp::TcpBootstrap;
//! use ffd::config::Config;
//! use ffd::runtime::Detector;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::from_env()?;
//! let mut bootstrap = TcpBootstrap::connect_from_env()?;
//! let detector = Detector::start(&config, &mut bootstrap)?;
//! while let Some(event) = detector.try_next_event() {
//!     println!("{event:?}");
//! }
//! assert!(detector.is_alive(detector.rank())); // false once it stopped
//! detector.shutdown();
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod agree;
mod commands;
mod delivery;
pub mod events;
pub mod evidence;
pub mod failed_bits;
mod host_agree;
mod link;
mod liveness;
mod local;
mod log;
mod mail;
pub mod placement;
mod progress;
pub mod startup;
pub mod state;
pub mod stats;
mod transport;

pub use transport::{NO_FABRIC_DOMAIN, NO_FABRIC_PROVIDER};

use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::bootstrap::Bootstrap;
use crate::config::Config;
use crate::fabric::{FabricError, MemoryRegion, SlotPage};
use crate::node::Owner;
use crate::protocol::{self, Rank};

pub use agree::{AgreeError, AgreeRequest, Agreement};
pub use commands::MAX_QUEUED_BROADCASTS;
pub use events::EventQueue;
pub use failed_bits::FailedBits;
pub use placement::Placement;
pub use progress::MAX_APP_PAYLOAD;
pub use state::{DetectorState, Liveness, StopCause, StopReason};
pub use stats::{LatenessHistogram, RuntimeCounters, StatsSnapshot};

use log::Logger;
use progress::Command;
use startup::ExchangeError;
use state::Lifecycle;

/// An event as the embedder receives it: what happened, when this rank
/// learned it, and the epoch after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetectorEvent {
    /// Time since the detector started.
    pub at: Duration,
    /// Count of failures known to this rank once this event was applied.
    pub epoch: u64,
    pub event: Event,
}

/// What happened: one level to match (`Event::Failed { rank, cause, .. }`).
/// Every variant but [`Event::Stopped`] is what the protocol raised
/// ([`protocol::Event`], whose variant of the same name documents it);
/// `Stopped` is the runtime's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `rank` failed (final: never withdrawn); see [`protocol::Event::Failed`].
    Failed {
        rank: Rank,
        detector: Rank,
        cause: protocol::Cause,
        hops: u16,
        detail: protocol::FailureDetail,
    },
    /// Every rank of host `host` failed together; follows their `Failed`
    /// events. See [`protocol::Event::HostFailed`].
    HostFailed { host: u32, ranks: Vec<Rank> },
    /// `rank` left cleanly.
    Left { rank: Rank },
    /// This rank must stop participating; see
    /// [`protocol::Event::SelfExcluded`].
    SelfExcluded { by: Rank, why: protocol::Exclusion },
    /// A slow but live emitter (a warning, never a failure).
    SlowEmitter { rank: Rank, stalled_for: Duration },
    /// An application payload; see [`protocol::Event::Payload`].
    Payload {
        origin: Rank,
        seq: u64,
        bytes: Vec<u8>,
    },
    /// View `id` was decided; see [`protocol::Event::ViewChange`].
    ViewChange {
        id: u64,
        failed: Vec<Rank>,
        hops: u16,
    },
    /// This rank's agreement `seq` was decided (its result is already in
    /// its request: [`Detector::iagree`]); see [`protocol::Event::Agreed`].
    Agreed {
        seq: u64,
        flags: u64,
        view: protocol::View,
        hops: u16,
    },
    /// This rank's agreement `seq` ends without a decision here.
    AgreeAborted {
        seq: u64,
        reason: protocol::AgreeAbort,
    },
    /// The progress thread stopped on an error or a panic (not a leave or
    /// an exclusion): the last event. From now on nothing watches the job
    /// from this rank, [`Detector::state`] says
    /// [`DetectorState::Stopped`], liveness answers are
    /// [`Liveness::Unknown`], and the other ranks will declare this one
    /// failed.
    Stopped(StopReason),
}

impl From<protocol::Event> for Event {
    fn from(event: protocol::Event) -> Event {
        use protocol::Event as P;
        match event {
            P::Failed {
                rank,
                detector,
                cause,
                hops,
                detail,
            } => Event::Failed {
                rank,
                detector,
                cause,
                hops,
                detail,
            },
            P::HostFailed { host, ranks } => Event::HostFailed { host, ranks },
            P::Left { rank } => Event::Left { rank },
            P::SelfExcluded { by, why } => Event::SelfExcluded { by, why },
            P::SlowEmitter { rank, stalled_for } => Event::SlowEmitter { rank, stalled_for },
            P::Payload { origin, seq, bytes } => Event::Payload { origin, seq, bytes },
            P::ViewChange { id, failed, hops } => Event::ViewChange { id, failed, hops },
            P::Agreed {
                seq,
                flags,
                view,
                hops,
            } => Event::Agreed {
                seq,
                flags,
                view,
                hops,
            },
            P::AgreeAborted { seq, reason } => Event::AgreeAborted { seq, reason },
        }
    }
}

/// A embedder's callback. It runs **on the progress thread**, once per event: it
/// must return quickly (heartbeats wait while it runs); a panic in it is
/// caught and counted. No callback starts once [`Detector::shutdown`] (or
/// the drop) has begun, and the detector's shutdown waits for a running one
/// to return, however long it takes. Called from the callback itself,
/// shutdown cannot wait for it: it closes callbacks, asks the thread to
/// leave and returns; the thread ends once the callback returns.
pub type Callback = Box<dyn FnMut(&DetectorEvent) + Send + 'static>;

/// A fault the progress thread commits on purpose, for the tests of what the
/// embedder sees when the detector dies (`fault-injection` feature; never in a
/// production build).
#[cfg(any(test, feature = "fault-injection"))]
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Panic on the progress thread, outside any callback.
    Panic,
    /// Fail the next read of the completion queue.
    CompletionQueueError,
}

/// Why the detector could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Fabric(#[from] FabricError),
    #[error(transparent)]
    Exchange(#[from] ExchangeError),
    #[error(transparent)]
    Placement(#[from] placement::PlacementError),
    #[error("the protocol engine refused its configuration: {0}")]
    Engine(#[from] protocol::EngineConfigError),
    #[error("rank {rank}'s slot region ({len} bytes) is too small for the protocol's {need} slots")]
    SlotRegion { rank: Rank, len: u64, need: u64 },
    #[error(
        "the address vector gave rank {rank} the address {got}; ranks must be inserted in order"
    )]
    AddressOrder { rank: Rank, got: u64 },
    #[error("could not determine this host's name: {0}")]
    Hostname(std::io::Error),
    /// The job's secret could not be read (`FFD_SECRET_FILE`) or drawn.
    #[error(transparent)]
    Secret(#[from] crate::bootstrap::secret::SecretError),
    #[error("could not create the {what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
    /// The host's counter segment for same-host watching could not be
    /// made (`FFD_LOCAL=off` does without it).
    #[error("same-host watching: {0}")]
    Local(#[from] crate::node::SegmentError),
}

/// What the embedder asked for that could not be done.
#[derive(Debug, thiserror::Error)]
pub enum DetectorError {
    #[error("the detector has stopped (shut down, excluded, or its thread ended; see its state)")]
    Stopped,
    /// This process is a `fork()`ed child of the one that started the
    /// detector ([`DetectorState::Forked`]): the detector runs there.
    #[error(
        "this detector belongs to process {pid}, which started it; this process is a fork()ed \
         child of it and holds only a copy: start a detector of its own if it needs one"
    )]
    Forked { pid: u32 },
    #[error("payload of {len} bytes exceeds the {max}-byte limit")]
    PayloadTooLarge { len: usize, max: usize },
    /// [`Detector::broadcast`]: `queued` payloads
    /// ([`MAX_QUEUED_BROADCASTS`]) wait for the progress thread, which
    /// carries them out more slowly than the embedder broadcasts. This
    /// one was not sent; the queued ones are kept and go out in order.
    #[error(
        "{queued} payloads are queued for the progress thread, the limit; this one was not \
         sent (the queued ones will be): retry later"
    )]
    Busy { queued: usize },
}

/// The state the progress thread publishes for the embedder: it writes it,
/// any thread reads it without a lock the progress thread can hold.
#[derive(Debug)]
struct PublishedState {
    me: Rank,
    failed: FailedBits,
    left: FailedBits,
    /// Running, left, excluded or stopped; the callback gate.
    life: Lifecycle,
    events: EventQueue<DetectorEvent>,
    /// Published with `try_lock` by the progress thread.
    stats: Mutex<StatsSnapshot>,
    /// Agreements in flight and the latest view (`agree`).
    agreements: agree::AgreeBook,
    /// A one-host job's agreements through the host's segment (`None`:
    /// by messages, `agreements`).
    host_agreement: Option<host_agree::HostAgreement>,
    /// The progress thread's lift (`FFD_SCHED=boost|fifo`), set by it once
    /// it runs under its policy: an agreement call lifts it to take the call.
    boost: std::sync::OnceLock<Arc<crate::node::Boost>>,
    logger: Logger,
}

/// One rank's failure detector: a pinned progress thread and the state the
/// embedder reads. Dropping it shuts it down cleanly (see [`Detector::shutdown`]),
/// with the same guarantee: no callback runs once the drop has returned.
pub struct Detector {
    /// The process that started it: a `fork()`ed child holds a copy of
    /// this struct but none of the threads behind it.
    owner: Owner,
    shared: Arc<PublishedState>,
    commands: commands::CommandSender,
    /// Writing a byte wakes the progress thread.
    wake: UnixStream,
    thread: Option<JoinHandle<()>>,
    /// Disconnects (or carries a unit) when the progress thread ends. In a
    /// mutex only so that `Detector` is `Sync` (the C ABI shares it between
    /// embedder's threads); only `stop` locks it.
    exited: Mutex<mpsc::Receiver<()>>,
    /// The origin of the detector's clock ([`DetectorEvent::at`], the
    /// stats' `uptime_ms`).
    started: Instant,
    size: u32,
    max_payload: usize,
    linger: Duration,
    placement: Placement,
    provider: String,
    domain: String,
}

impl std::fmt::Debug for Detector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detector")
            .field("rank", &self.shared.me)
            .field("size", &self.size)
            .field("provider", &self.provider)
            .field("epoch", &self.epoch())
            .finish_non_exhaustive()
    }
}

impl Detector {
    /// Starts the detector of this process: exchanges records through
    /// `bootstrap` (a collective: every rank of the job must call it),
    /// opens its own fabric endpoint unless every rank is on this host and
    /// reads its mailbox (then none: the host's segment carries
    /// everything, [`NO_FABRIC_PROVIDER`]), builds the ring, starts the
    /// progress thread, and returns once this rank's heartbeat link to its
    /// observer is up (or the start-up grace has passed).
    pub fn start(config: &Config, bootstrap: &mut dyn Bootstrap) -> Result<Detector, StartError> {
        startup::start(config, bootstrap, None)
    }

    /// Like [`start`](Self::start), with a callback that sees every event
    /// (on the progress thread, before the event is queued).
    pub fn start_with_callback(
        config: &Config,
        bootstrap: &mut dyn Bootstrap,
        callback: Callback,
    ) -> Result<Detector, StartError> {
        startup::start(config, bootstrap, Some(callback))
    }

    /// This process's rank.
    pub fn rank(&self) -> Rank {
        self.shared.me
    }

    /// The job size N.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The instant the detector's clock started: [`DetectorEvent::at`] and
    /// the stats' `uptime_ms` count from it, so an embedder can place an event
    /// on its own clocks (`started() + event.at`).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Whether `rank` is alive as far as this detector knows: true only
    /// for [`Liveness::Alive`]. Once the detector is no longer running
    /// (excluded, or stopped on an error or a panic) it is false for every
    /// rank, never a stale true: [`liveness`](Self::liveness) tells
    /// "unknown" from "not alive". Lock-free; any thread. Ranks outside
    /// `0..N` are not alive.
    pub fn is_alive(&self, rank: Rank) -> bool {
        self.liveness(rank) == Liveness::Alive
    }

    /// What this detector can say about `rank`: alive, not alive (failed,
    /// left, or not a rank of the job; final), or unknown because the
    /// detector is no longer running ([`state`](Self::state) says why),
    /// which includes a `fork()`ed child's copy of it
    /// ([`DetectorState::Forked`]: unknown for every rank, even one beyond
    /// the job). Lock-free; any thread.
    pub fn liveness(&self, rank: Rank) -> Liveness {
        if !self.owner.is_this_process() {
            return Liveness::Unknown;
        }
        if rank >= self.size {
            return Liveness::NotAlive;
        }
        if !self.shared.life.is_running() {
            return Liveness::Unknown;
        }
        if self.shared.failed.contains(rank) || self.shared.left.contains(rank) {
            Liveness::NotAlive
        } else {
            Liveness::Alive
        }
    }

    /// Whether `rank` left cleanly (shut its detector down). Lock-free. In
    /// a `fork()`ed child, what the parent knew at the fork.
    pub fn has_left(&self, rank: Rank) -> bool {
        self.shared.left.contains(rank)
    }

    /// Count of failures known to this rank; never decreases. Lock-free.
    /// Stale once the detector is no longer running
    /// ([`state`](Self::state)): it is then the count it knew at its end
    /// (in a `fork()`ed child, the count the parent knew at the fork).
    pub fn epoch(&self) -> u64 {
        self.shared.failed.epoch()
    }

    /// The failed ranks known to this rank, increasing. Lock-free. Stale
    /// once the detector is no longer running, as [`epoch`](Self::epoch).
    pub fn failed_ranks(&self) -> Vec<Rank> {
        self.shared.failed.ranks()
    }

    /// Whether the others declared this rank failed: it no longer takes
    /// part and the embedder must stop using it (fail-stop). False in a
    /// `fork()`ed child ([`DetectorState::Forked`]).
    pub fn is_excluded(&self) -> bool {
        self.owner.is_this_process() && self.shared.life.is_excluded()
    }

    /// Where the detector is in its life: running, left, excluded (and by
    /// whom), or stopped on an error or a panic (and why); in a `fork()`ed
    /// child of the process that started it, [`DetectorState::Forked`].
    /// Lock-free.
    pub fn state(&self) -> DetectorState {
        if !self.owner.is_this_process() {
            return DetectorState::Forked {
                pid: self.owner.pid(),
            };
        }
        self.shared.life.state()
    }

    /// Whether the progress thread is still running (it ends shortly after
    /// the state leaves [`DetectorState::Running`]); false in a `fork()`ed
    /// child, which has no progress thread.
    pub fn is_running(&self) -> bool {
        self.owner.is_this_process() && self.shared.life.thread_running()
    }

    /// In a `fork()`ed child of the process that started the detector, that
    /// process's pid (the state is then [`DetectorState::Forked`]); `None`
    /// in that process. Lock-free: one atomic load.
    pub fn forked_from(&self) -> Option<u32> {
        (!self.owner.is_this_process()).then(|| self.owner.pid())
    }

    /// `Err(Forked)` in a `fork()`ed child of the process that started the
    /// detector: then nothing of the detector may be touched but this
    /// process's own memory (no lock another thread of the parent may have
    /// held at the fork, no descriptor shared with the parent).
    fn owned_here(&self, checked: bool) -> Result<(), DetectorError> {
        let here = if checked {
            self.owner.is_this_process_checked()
        } else {
            self.owner.is_this_process()
        };
        if here {
            Ok(())
        } else {
            Err(DetectorError::Forked {
                pid: self.owner.pid(),
            })
        }
    }

    /// The next queued event, if any; never waits for the progress thread. Events that did not fit
    /// the queue (`FFD_EVENT_QUEUE`) are counted in the stats; the failed set
    /// stays exact, so re-read [`failed_ranks`](Self::failed_ranks) then.
    /// None in a `fork()`ed child (the queue's descriptor is the parent's).
    pub fn try_next_event(&self) -> Option<DetectorEvent> {
        self.owned_here(false).ok()?;
        self.shared.events.try_pop()
    }

    /// The next queued event if `take` accepts it (`Some(Ok(event))`). One
    /// it refuses stays first in line, the event fd stays readable, and its
    /// error comes back (`Some(Err(_))`): for a consumer whose buffer may be
    /// too small for a payload. Never blocks on the progress thread. None
    /// in a `fork()`ed child, as [`try_next_event`](Self::try_next_event).
    pub fn try_next_event_if<R>(
        &self,
        take: impl FnOnce(&DetectorEvent) -> Result<(), R>,
    ) -> Option<Result<DetectorEvent, R>> {
        self.owned_here(false).ok()?;
        self.shared.events.try_pop_if(take)
    }

    /// A file descriptor that is readable while events are queued, for the
    /// embedder's poll/epoll loop. In a `fork()`ed child it is the parent's
    /// (inherited): readable when the parent has events; do not wait on it
    /// there ([`state`](Self::state) says [`DetectorState::Forked`]).
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.shared.events.as_fd()
    }

    /// Reliably broadcasts `payload` to every live rank (they receive
    /// [`protocol::Event::Payload`]; this rank too, unless
    /// `FFD_DELIVER_OWN=no`): all or none, in order per origin, once each
    /// (docs/design.md §4.9 "Payloads"); returns at once. [`DetectorError::Forked`]
    /// in a `fork()`ed child: nothing is sent. [`DetectorError::Busy`] when
    /// [`MAX_QUEUED_BROADCASTS`] payloads wait for the progress thread
    /// (broadcast faster than it carries them out): this one is not sent,
    /// the queued ones are; retry later (after a pause, or after other
    /// work), the same payload or a newer one.
    pub fn broadcast(&self, payload: &[u8]) -> Result<(), DetectorError> {
        self.owned_here(false)?;
        if payload.len() > self.max_payload {
            return Err(DetectorError::PayloadTooLarge {
                len: payload.len(),
                max: self.max_payload,
            });
        }
        if !self.shared.life.is_running() {
            return Err(DetectorError::Stopped);
        }
        self.command(Command::Broadcast(payload.to_vec()))
    }

    /// The counters as last published by the progress thread (at most a
    /// few periods old). All zero in a `fork()`ed child: the counters are
    /// the parent's, and their lock may have been held at the fork.
    pub fn stats(&self) -> StatsSnapshot {
        if self.owned_here(false).is_err() {
            return StatsSnapshot::default();
        }
        match self.shared.stats.lock() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Where the progress thread runs, and why.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// The libfabric provider and domain the detector opened;
    /// [`NO_FABRIC_PROVIDER`] and [`NO_FABRIC_DOMAIN`] in a one-host job,
    /// which opens none.
    pub fn fabric(&self) -> (&str, &str) {
        (&self.provider, &self.domain)
    }

    /// Leaves cleanly: tells the others this rank is going (they report
    /// [`protocol::Event::Left`], not a failure, and mend the ring around
    /// it), keeps the link up for a few periods so the notice is out, then
    /// stops the progress thread and waits for it to end.
    ///
    /// No embedder's callback starts once shutdown has begun (events still reach
    /// the queue), and none runs after it returns: if one is running, it
    /// waits for it to return, **however long that takes**: a callback that
    /// never returns keeps shutdown from returning. While it waits past the
    /// usual bound (the linger plus 2 s) it logs, every
    /// [`WAIT_NOTE_EVERY`], at the `warn` level:
    /// `ffd[R] warn: shutdown (ffd_finalize) is waiting for the event callback to return (running for 2.0s); it cannot return before the callback does`.
    /// Otherwise bounded by the linger plus 2 s. From the
    /// detector's own callback it cannot wait (see [`Callback`]).
    ///
    /// In a `fork()`ed child of the process that started the detector
    /// (the drop too) it returns at once and touches nothing of the
    /// parent's: no notice, no thread to wait for, no libfabric object
    /// closed, the host's segment neither written nor unmapped. What the
    /// copy inherited stays allocated in the child until it exits or
    /// execs: releasing it would act on objects the parent still uses.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        if self.owned_here(true).is_err() {
            // A fork()ed child: the progress thread, the exit-word threads
            // and everything they own (libfabric objects, the host's
            // segment, pidfds, the exit words) stayed with the parent, and
            // their memory here is an unused copy that no Drop ever runs
            // on: they are leaked, as they must be (closing the inherited
            // libfabric objects would tear down the parent's connections,
            // unmapping or unlinking the segment would be the parent's
            // business). Nothing is sent: the wake socket is shared with
            // the parent. The thread handle is forgotten, not dropped: in
            // a child glibc recycles the dead threads' descriptors, so
            // detaching it could detach a thread the child starts later.
            // What remains to drop here is this process's memory and its
            // copies of two descriptors (closing a copy leaves the parent's
            // open).
            std::mem::forget(thread);
            return;
        }
        // From here on no callback starts: one running now is the last.
        self.shared.life.close_callbacks();
        let _ = self.command(Command::Leave);
        if thread.thread().id() == std::thread::current().id() {
            // Called from this detector's own callback: the thread cannot
            // wait for itself. It leaves, and ends once the callback returns.
            return;
        }
        let exited = self
            .exited
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ended = |within| {
            !matches!(
                exited.recv_timeout(within),
                Err(mpsc::RecvTimeoutError::Timeout)
            )
        };
        if !ended(self.linger + Duration::from_secs(1)) {
            // The leave did not finish in time: stop without it.
            let _ = self.command(Command::Stop);
            let waiting_since = Instant::now();
            let mut wait = Duration::from_secs(1);
            while !ended(wait) {
                self.note_waiting(waiting_since);
                wait = WAIT_NOTE_EVERY;
            }
        }
        let _ = thread.join();
    }

    /// The line shutdown logs while it waits past its usual bound.
    fn note_waiting(&self, since: Instant) {
        match self
            .shared
            .life
            .callback_running_for(self.started.elapsed())
        {
            Some(running) => self.shared.logger.warn(format_args!(
                "shutdown (ffd_finalize) is waiting for the event callback to return \
                 (running for {:.1}s); it cannot return before the callback does",
                running.as_secs_f64()
            )),
            None => self.shared.logger.warn(format_args!(
                "shutdown (ffd_finalize) is waiting for the progress thread to end ({:.1}s so far)",
                since.elapsed().as_secs_f64()
            )),
        }
    }

    /// Makes the progress thread fail on purpose (`fault-injection`
    /// feature, for tests of what the embedder sees when the detector dies).
    #[cfg(any(test, feature = "fault-injection"))]
    #[doc(hidden)]
    pub fn inject_fault(&self, fault: Fault) -> Result<(), DetectorError> {
        self.command(Command::Fault(fault))
    }

    /// Wakes the progress thread (a byte on its wake socket).
    fn wake_progress(&self) {
        // WouldBlock means bytes are already waiting: the thread is awake.
        let _ = (&self.wake).write(&[1]);
    }

    fn command(&self, command: Command) -> Result<(), DetectorError> {
        self.queue_command(command)?;
        self.wake_progress();
        Ok(())
    }

    /// Queues `command` without waking the thread: the caller wakes it
    /// ([`Self::wake_progress`]) once it holds no lock the thread takes.
    /// `Busy` only for a broadcast (nothing else is refused for load).
    fn queue_command(&self, command: Command) -> Result<(), DetectorError> {
        self.owned_here(true)?;
        self.commands.send(command).map_err(|e| match e {
            commands::Refused::Disconnected => DetectorError::Stopped,
            commands::Refused::Busy { queued } => DetectorError::Busy { queued },
        })
    }
}

impl Drop for Detector {
    fn drop(&mut self) {
        self.stop();
    }
}

/// While shutdown waits past its usual bound (for a callback that does not
/// return), it logs this often.
pub const WAIT_NOTE_EVERY: Duration = Duration::from_secs(5);

/// How long a leaving rank keeps its endpoint open after announcing it:
/// long enough for the notice to be sent and for neighbours to mend.
fn linger(period: Duration, timeout: Duration) -> Duration {
    (period * 3).min(timeout).max(Duration::from_millis(5))
}

/// The slot region of this detector (the only remotely writable memory).
type SlotRegion = MemoryRegion<SlotPage>;
