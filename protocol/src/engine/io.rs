//! What crosses the Engine's boundary: the inputs a driver hands in, the
//! outputs and the embedder's events it gets back, the readings a driver hands a
//! timer step, the errors of `handle`, and the heartbeat slot value format
//! (the counters are `stats`).
//!
//! Owns: these types and their plain helpers. Must not: hold protocol
//! state or make a protocol decision (that is the Engine's job).

use std::time::Duration;

use crate::config::{Rank, Time};
use crate::wire::{RejectReason, Sealed};

/// The heartbeat value an emitter writes into its observer's slot:
///
/// ```text
/// bits 63..48  the observation generation (its low 16 bits), from ObserveMe
/// bits 47..16  the digest fold of the emitter's failed ∪ left set
/// bits 15..0   the beat counter, 1..=65535, changing every period
/// ```
///
/// The counter is never 0, so a written slot is never 0 (the page starts
/// zeroed, and a reassigned slot is cleared to 0). The observer counts a
/// value as a heartbeat only when it carries the generation it named in
/// `ObserveMe` ([`slot_generation`]): a leftover of an earlier generation
/// in the same slot (512 mendings ago) or a replaced emitter's write is
/// not one.
pub fn slot_value(generation: u32, digest: u32, counter: u16) -> u64 {
    (u64::from(generation as u16) << 48) | (u64::from(digest) << 16) | u64::from(counter)
}

/// The digest fold carried by a slot value.
pub fn slot_digest(value: u64) -> u32 {
    (value >> 16) as u32
}

/// The generation (low 16 bits) carried by a slot value.
pub fn slot_generation(value: u64) -> u16 {
    (value >> 48) as u16
}

/// What a driver reads for a timer step
/// ([`Engine::handle_timeout`](super::Engine::handle_timeout)): this rank's
/// slot page and, with host groups, the same-host ranks' counters in shared
/// memory. The Engine asks for one slot at most (the one it watches, if it
/// has an emitter) and one local counter at most (its same-host emitter's, if
/// it has one), each once per step, and takes the answers as that step's
/// readings. The runtime reads its registered slot page and the host's
/// segment; the simulator and the model checker model both; tests answer
/// what the test needs.
pub trait Readings {
    /// The value in slot `slot` (`0..512`) of this rank's slot page now.
    fn slot(&self, slot: u16) -> u64;
    /// What the driver sees of local rank `rank`'s counter now (`None`:
    /// never written). The default, `None` for every rank, suits an
    /// Engine without host groups; an Engine with a same-host emitter that
    /// reads `None` sees no local beat and declares it after the timeout.
    fn local_beat(&self, rank: Rank) -> Option<LocalBeat> {
        let _ = rank;
        None
    }
}

/// [`Readings`] in which the watched slot holds one value and no local
/// counter was ever written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotReading(pub u64);

impl Readings for SlotReading {
    fn slot(&self, _slot: u16) -> u64 {
        self.0
    }
}

/// What a driver hands to [`Engine::handle`](super::Engine::handle). A
/// reached deadline is not an input: it goes to
/// [`Engine::handle_timeout`](super::Engine::handle_timeout), with the
/// [`Readings`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input<'a> {
    /// An active message. `from` is the transport's idea of the sender if
    /// it has one; after validation the header's sender is authoritative.
    Message { from: Option<Rank>, bytes: &'a [u8] },
    /// A transport operation concerning `peer` failed: which one, whether
    /// the driver takes it as proof of death or only as silence, and what
    /// the fabric said.
    TransportError {
        peer: Rank,
        kind: TransportErrorKind,
        evidence: Evidence,
        said: FabricSaid,
    },
    /// A process of this rank's host exited: `rank`'s (seen through its
    /// exit word or a pidfd by the driver). Proof of death: declared at
    /// once with [`Cause::Exited`]. `seen_by`: other ranks of the host the
    /// driver knows see this exit themselves (they wait on their own exit
    /// words for it): the rank that broadcasts the notice sends them no
    /// copy (empty: no such knowledge, every overlay target gets one).
    /// Only for Engines with host groups
    /// ([`EngineOptions::hosts`](super::EngineOptions::hosts)); ignored
    /// otherwise, and for ranks of other hosts.
    Exited { rank: Rank, seen_by: &'a [Rank] },
    /// Failures read from this host's notice board (`docs/design.md`
    /// §4.12 "Hosts"): `detector`'s news of `failed` (ascending), posted there by a
    /// rank of the host ([`Output::PostOnBoard`]). Learned like a
    /// notice's (cause `notice`) and forwarded in one notice to this
    /// rank's overlay links except the host's board readers, never posted
    /// again. Only for Engines with host groups.
    BoardNotice { failed: &'a [Rank], detector: Rank },
    /// The other ranks of this host that read its notice board, as the
    /// driver knows them now (it says so again when that changes): news
    /// this rank posts there is sent them no fabric copy. Empty (the
    /// start): every overlay target gets one. Ranks of other hosts are
    /// ignored.
    BoardReaders { ranks: &'a [Rank] },
    /// A message to `to` left this process: the transport completed its
    /// send, so the link to `to` is up. The Engine reads only the ones
    /// about an emitter it just mended to (its clock starts then, see
    /// `docs/design.md` §4.4 "Mending"); drivers may report every completed send.
    Sent { to: Rank },
    /// Reliably broadcast an application payload to all live ranks.
    Broadcast(&'a [u8]),
    /// This rank is shutting down cleanly: tell the others, who mend around
    /// it and report `Event::Left` rather than a failure. Keep driving the
    /// Engine for a couple of periods (it keeps heartbeating and forwarding)
    /// before closing the endpoint.
    Leave,
    /// Start (or queue) this rank's next user agreement with `flags`: a
    /// collective, every live rank must make the same calls in the same
    /// order. Its sequence number is
    /// [`Engine::agreements_called`](super::Engine::agreements_called)
    /// right after; its result comes as [`Event::Agreed`] (or
    /// [`Event::AgreeAborted`]). Non-blocking.
    Agree { flags: u64 },
}

/// Which transport operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportErrorKind {
    /// A heartbeat RDMA write completed in error.
    HeartbeatWrite,
    /// A message send completed in error.
    Send,
    /// The runtime's verdict that the peer cannot be reached (e.g. posts
    /// returned EAGAIN for longer than its bound).
    Unreachable,
    /// The runtime's liveness probe: a plain TCP connection to the peer's
    /// liveness port (`crate::liveness`).
    LivenessProbe,
}

/// What a transport error shows about the peer (`docs/design.md` §4.11 "Primary partition").
/// The driver classifies: the runtime by the error numbers it measured on
/// each provider, the simulator by whether the peer's process is dead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Evidence {
    /// The peer is dead: its kernel refused or reset the connection (its
    /// process exited). Declared at once, whatever `FFD_QUORUM` says.
    Proof,
    /// The peer may only be unreachable or slow: a refusal run, a timeout,
    /// anything unclassified. With `FFD_QUORUM=majority` a majority must
    /// confirm it first.
    Silence,
}

impl Evidence {
    pub fn as_str(self) -> &'static str {
        match self {
            Evidence::Proof => "proof",
            Evidence::Silence => "silence",
        }
    }
}

/// What the fabric said about a failed operation towards a peer, for the
/// embedder to read in [`FailureDetail`]. Numbers only: the runtime names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FabricSaid {
    /// An error completion: libfabric's error number (positive, an `FI_E*`
    /// value) and the provider's own errno (as the provider reported it).
    Completion { err: i32, prov_errno: i32 },
    /// The post itself failed with this (positive) error number.
    Post { err: i32 },
    /// Every post to the peer was refused (`-FI_EAGAIN`) for this long: the
    /// runtime's unreachable verdict.
    Refused { run: Duration },
    /// The simulator: an operation towards a process that is dead.
    DeadProcess,
    /// A liveness probe of the peer's port was refused by its kernel
    /// (`ECONNREFUSED`: nobody listens there; `crate::liveness`).
    ProbeRefused,
    /// Nothing more (a slot that stood still, a probe, a test).
    Nothing,
}

/// What the Engine asks its driver to do. See
/// [`Engine::poll_output`](super::Engine::poll_output).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Write `value` (8 bytes, aligned, one RDMA write) into slot `slot` of
    /// `to`'s slot page. ([`HeartbeatMode::Write`] only.)
    WriteHeartbeat { to: Rank, slot: u16, value: u64 },
    /// From now on this rank's heartbeats go to `to` at `slot`, for the
    /// observer's generation `generation`, with digest fold `digest` (`to:
    /// None`: no more heartbeats). ([`HeartbeatMode::Modelled`] only.)
    HeartbeatStream {
        to: Option<Rank>,
        slot: u16,
        generation: u32,
        digest: u32,
    },
    /// Write 0 into slot `slot` of this rank's own slot page, now: the slot
    /// was reassigned to a new generation (a mending), and nothing an
    /// earlier writer left there may be read as the new emitter's beat.
    /// Always comes before the `ObserveMe` that names the slot, so the
    /// driver that carries outputs out in order clears it before the new
    /// emitter can write.
    ClearSlot { slot: u16 },
    /// Send an active message: one sealed copy (its own sequence number and
    /// tag), whose unsealed bytes are shared among the copies of one
    /// broadcast step.
    Send { to: Rank, message: Sealed },
    /// Tell the embedder.
    Event(Event),
    /// Post on this host's notice board (shared memory) that `failed` are
    /// gone, `detector`'s news: every rank of the host that reads it learns
    /// them from there ([`Input::BoardNotice`]) and is sent no fabric
    /// copy. Only while the driver reports board readers
    /// ([`Input::BoardReaders`]); comes before the fabric copies.
    PostOnBoard { failed: Box<[Rank]>, detector: Rank },
}

/// What a driver saw of one local rank's counter in shared memory
/// (`docs/design.md` §4.12 "Hosts"): when that rank's progress thread last woke, in
/// this Engine's time, the digest fold of its failed ∪ left set then, and,
/// once the counter was a timeout old, what the kernel said of that thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalBeat {
    pub at: Time,
    pub digest: u32,
    pub thread: EmitterThread,
}

/// The kernel's state of a local rank's progress thread
/// (`/proc/<pid>/task/<tid>/stat`), which a driver reads only once that
/// rank's counter is a timeout old.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum EmitterThread {
    /// Not looked at (the counter is fresh), or not readable (another pid
    /// namespace, the process gone).
    #[default]
    Unknown,
    /// Runnable, waiting for a CPU that busier threads hold: starved, not
    /// hung. Judged by the ceiling, `health_max` timeouts.
    Runnable,
    /// Stopped by a signal (`SIGSTOP`, a job-control stop): hung, on the
    /// kernel's word. Declared at once when its counter reaches the limit
    /// (the timeout, stretched by the observer's health), without an
    /// accusation round ([`FailureDetail::Stopped`]).
    Stopped,
    /// Asleep, blocked in the kernel, or held by a tracer (whose own
    /// starvation may be the cause): judged by the limit, and under
    /// `FFD_QUORUM=majority` declared only once a majority confirms.
    Waiting,
}

/// How a failure became known to this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum Cause {
    /// This rank's emitter's slot (or its same-host emitter's counter) stood
    /// still for the timeout.
    Timeout,
    /// A transport error (or an unreachable verdict) on a ring link.
    InBand,
    /// A notice (or a sync exchange) from another rank.
    Notice,
    /// The process exited: seen on its own host through a pidfd (proof).
    Exited,
}

impl Cause {
    pub const ALL: [Cause; 4] = [Cause::Timeout, Cause::InBand, Cause::Notice, Cause::Exited];
    pub const COUNT: usize = Self::ALL.len();

    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Timeout => "timeout",
            Cause::InBand => "inband",
            Cause::Notice => "notice",
            Cause::Exited => "exited",
        }
    }
}

/// How the rank that raised a [`Event::Failed`] knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureDetail {
    /// Learned from another rank (a notice or a sync exchange), or from a
    /// probe's witness that already held it failed.
    Learned,
    /// Declared at once on proof of death (an in-band error classified as
    /// proof), with what the fabric said.
    Proof { said: FabricSaid },
    /// Declared from silence: the emitter's slot stood still for the
    /// timeout, or an in-band error classified as silence (`said`).
    /// `quorum`: the votes that confirmed it (`FFD_QUORUM=majority`);
    /// `None` when declared at once (`FFD_QUORUM=off`).
    Silence {
        said: FabricSaid,
        quorum: Option<Confirmation>,
    },
    /// Declared at once by its same-host observer: its counter in shared
    /// memory reached the limit while the kernel showed its progress
    /// thread stopped by a signal ([`EmitterThread::Stopped`]). A
    /// same-host observation that no partition can split and no
    /// starvation can fake, so no accusation round, whatever `FFD_QUORUM`.
    Stopped,
}

/// The majority that confirmed an accusation: `votes` ranks of the
/// accuser's side, of `live` ranks in its view (quorum: 2·votes > live, or
/// an exact half holding the lowest live rank: `tiebreak`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Confirmation {
    pub votes: u32,
    pub live: u32,
    pub tiebreak: bool,
}

/// Why this rank stopped participating ([`Event::SelfExcluded`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Exclusion {
    /// Another rank declared it failed (`by` told it): reports are final.
    Named,
    /// Its side of a partition holds no majority: an accusation (`by`'s:
    /// this rank's own, or one it voted in) found no quorum in time
    /// (`FFD_QUORUM=majority`).
    NoQuorum,
}

impl Exclusion {
    pub fn as_str(self) -> &'static str {
        match self {
            Exclusion::Named => "named",
            Exclusion::NoQuorum => "no_quorum",
        }
    }
}

/// A view: its id (0: nobody gone; each view change adds one) and the
/// ranks out of it (failed or left), ascending.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct View {
    pub id: u64,
    pub failed: Vec<Rank>,
}

/// Why a user agreement of this rank ends without a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AgreeAbort {
    /// This rank left (`Input::Leave`) before it was decided here.
    Left,
    /// This rank was excluded (declared failed by others).
    Excluded,
}

impl AgreeAbort {
    pub fn as_str(self) -> &'static str {
        match self {
            AgreeAbort::Left => "left",
            AgreeAbort::Excluded => "excluded",
        }
    }
}

/// Events for the embedder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `rank` has failed (final: never withdrawn). `detector` declared it
    /// (this rank for Timeout/InBand; the notice's origin, or the sync peer,
    /// for Notice). `hops`: overlay hops the news travelled (0 if detected
    /// here). `detail`: the evidence behind this rank's own declaration
    /// (`Learned` for news from others).
    Failed {
        rank: Rank,
        detector: Rank,
        cause: Cause,
        hops: u16,
        detail: FailureDetail,
    },
    /// Every rank of host `host` (an index of
    /// [`Hosts`](crate::Hosts), numbered by lowest rank) failed together:
    /// this rank declared them in one notice after none of them answered
    /// (`docs/design.md` §4.12 "Hosts"). Follows their `Failed` events.
    HostFailed { host: u32, ranks: Vec<Rank> },
    /// `rank` left cleanly.
    Left { rank: Rank },
    /// This rank must stop participating: it was declared failed by others
    /// (`why` = `Named`, `by` told us), or its side of a partition holds no
    /// majority (`NoQuorum`, `by` made the accusation that found none). The
    /// Engine is inert from now on.
    SelfExcluded { by: Rank, why: Exclusion },
    /// The emitter's slot stood still for `stalled_for` and then moved
    /// again: a slow but live process (a warning, never a failure).
    SlowEmitter { rank: Rank, stalled_for: Duration },
    /// An application payload broadcast by `origin` (this rank's own too,
    /// unless `EngineConfig::deliver_own` is off). Every live rank delivers
    /// the same payloads of an origin, each once, in the origin's order
    /// (`seq` 1, 2, ...), whatever it knows of the origin.
    Payload {
        origin: Rank,
        seq: u64,
        bytes: Vec<u8>,
    },
    /// View `id` was decided: the ranks out of the job are `failed` (failed
    /// or left, ascending). Every live rank raises the same views in the
    /// same order (ids 1, 2, 3, …), each after the `Failed`/`Left` events
    /// of the ranks it names (`docs/design.md` §4.10 "Agreement and views"). `hops`: the longest
    /// chain of agreement messages behind this rank's decision.
    ViewChange {
        id: u64,
        failed: Vec<Rank>,
        hops: u16,
    },
    /// This rank's user agreement `seq` (the `seq`-th `Input::Agree`) was
    /// decided: `flags` is the AND of the participants' flags, and `view`
    /// the decided view: `view.failed` holds every rank that did not take
    /// part and every failure any participant knew when it joined, and
    /// `view.id` is the newest view any participant had raised (the set
    /// holds that view's). Every surviving participant gets the same.
    /// `hops`: the longest chain of agreement messages behind it.
    Agreed {
        seq: u64,
        flags: u64,
        view: View,
        hops: u16,
    },
    /// This rank's user agreement `seq` ends without a decision here:
    /// this rank left or was excluded first.
    AgreeAborted { seq: u64, reason: AgreeAbort },
}

/// Errors of [`Engine::handle`](super::Engine::handle). None of them changes
/// protocol state (the counters in [`Stats`](super::Stats) aside).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandleError {
    /// The message was dropped; counted in `DropStats::rejected`.
    #[error("message rejected: {}", .0.as_str())]
    Rejected(RejectReason),
    #[error("payload of {len} bytes exceeds the {max}-byte limit")]
    PayloadTooLarge { len: usize, max: usize },
    /// Broadcast or leave after this rank left or was excluded.
    #[error("this rank no longer participates")]
    NotActive,
}

/// Whether this rank still takes part in the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Participation {
    Active,
    /// Left cleanly: still heartbeats, forwards and answers; declares nobody.
    Left,
    /// Declared failed by others: inert.
    Excluded,
}

/// How heartbeats leave the Engine
/// ([`EngineOptions::heartbeats`](super::EngineOptions::heartbeats)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HeartbeatMode {
    /// Every period, an [`Output::WriteHeartbeat`] (the runtime).
    #[default]
    Write,
    /// An [`Output::HeartbeatStream`] on each change; the driver models the
    /// slot values (the simulator).
    Modelled,
}
