//! The Engine: one rank's protocol state machine, sans IO.
//!
//! Owns: observation of the emitter (slot checks, timeout, self-lag guard,
//! slow-emitter warnings, digest sync), heartbeats to the observer, mending,
//! in-band evidence, the failed and left sets, the broadcast of notices and
//! payloads, exclusion (fail-stop) and clean leave. Must not: read a clock,
//! block, do IO, or allocate on the heartbeat path.
//!
//! # Driving an Engine
//!
//! Drivers (the progress thread, the simulator, tests) follow one loop, in
//! the style of quinn-proto:
//!
//! 1. Hand in an input with [`Engine::handle`]`(now, input)`.
//! 2. Drain [`Engine::poll_output`] until it returns `None`, carrying out
//!    each output (an RDMA write, a message send, an event for the host).
//! 3. Sleep until [`Engine::next_deadline`] or until an input arrives.
//!    When the deadline is reached, first read the slot that
//!    [`Engine::watched_slot`] names and hand it in as
//!    [`Input::HeartbeatSlot`], then hand in [`Input::Tick`], both with the
//!    same `now`.
//!
//! Every input may produce outputs and may move the deadline, so steps 2
//! and 3 follow every `handle`. Spurious ticks are harmless: timers whose
//! deadline has not been reached are ignored.
//!
//! # Heartbeats, slots, digest, generation
//!
//! The emitter writes one aligned u64 into a slot of its observer's slot
//! page (512 slots, 4 KiB): high 32 bits = the 32-bit fold of the digest of
//! its failed ∪ left set (XOR of a mixed hash per rank), low 32 bits = a
//! beat counter that changes every period ([`slot_value`]). The observer
//! reads only the slot of the current *generation* (`generation mod 512`),
//! which it names in `ObserveMe`; a replaced emitter writing to an old slot
//! cannot keep it happy. An observer whose emitter's digest has differed
//! from its own for `sync_after` sends a `SyncRequest` with its sets; the
//! emitter merges them and replies with what the observer lacked; ranks
//! learned this way are re-broadcast as notices. At most one sync request
//! per timeout.
//!
//! With [`HeartbeatMode::Modelled`] (the simulator), the Engine does not
//! schedule a per-period beat: it emits [`Output::HeartbeatStream`] when
//! the target, slot or digest changes, and the driver models the slot's
//! value as a function of the emitter's state and time. An idle Engine then
//! wakes `checks_per_timeout` times per timeout and no more.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use super::config::{ConfigError, EngineConfig, InbandMode, Rank, Time};
use super::overlay::{Links, MAX_LINKS, Overlay};
use super::ranks::{RankList, RankSet, fold_digest};
use super::ring::Ring;
use super::wire::{self, Encoder, Kind, Message, ProbeVerdict, RejectReason, SLOTS};

/// "No rank" in fixed-size fields.
const NO_RANK: Rank = Rank::MAX;

/// The heartbeat value an emitter writes: digest fold in the high half,
/// beat counter in the low half. Counters start at 1, so a written slot is
/// never 0 (the page starts zeroed).
pub fn slot_value(digest: u32, counter: u32) -> u64 {
    (u64::from(digest) << 32) | u64::from(counter)
}

/// The digest fold carried by a slot value.
pub fn slot_digest(value: u64) -> u32 {
    (value >> 32) as u32
}

/// What a driver hands to [`Engine::handle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input<'a> {
    /// The deadline from [`Engine::next_deadline`] was reached. Hand in the
    /// watched slot's value first (same `now`).
    Tick,
    /// The current value of heartbeat slot `slot` (an index into the slot
    /// page, `0..512`) of this rank's slot page.
    HeartbeatSlot { slot: u16, value: u64 },
    /// An active message. `from` is the transport's idea of the sender if
    /// it has one; after validation the header's sender is authoritative.
    Message { from: Option<Rank>, bytes: &'a [u8] },
    /// A transport operation concerning `peer` failed.
    TransportError {
        peer: Rank,
        kind: TransportErrorKind,
    },
    /// Reliably broadcast an application payload to all live ranks.
    Broadcast(&'a [u8]),
    /// This rank is shutting down cleanly: tell the others, who mend around
    /// it and report `Event::Left` rather than a failure. Keep driving the
    /// Engine for a couple of periods (it keeps heartbeating and forwarding)
    /// before closing the endpoint.
    Leave,
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
}

/// What the Engine asks its driver to do. See [`Engine::poll_output`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Write `value` (8 bytes, aligned, one RDMA write) into slot `slot` of
    /// `to`'s slot page. ([`HeartbeatMode::Write`] only.)
    WriteHeartbeat { to: Rank, slot: u16, value: u64 },
    /// From now on this rank's heartbeats go to `to` at `slot` with digest
    /// fold `digest` (`to: None`: no more heartbeats).
    /// ([`HeartbeatMode::Modelled`] only.)
    HeartbeatStream {
        to: Option<Rank>,
        slot: u16,
        digest: u32,
    },
    /// Send an active message. The bytes are shared among the copies of one
    /// broadcast step.
    Send { to: Rank, bytes: Arc<[u8]> },
    /// Tell the host.
    Event(Event),
}

/// How a failure became known to this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum Cause {
    /// This rank's emitter's slot stood still for the timeout.
    Timeout,
    /// A transport error (or an unreachable verdict) on a ring link.
    InBand,
    /// A notice (or a sync exchange) from another rank.
    Notice,
}

impl Cause {
    pub const ALL: [Cause; 3] = [Cause::Timeout, Cause::InBand, Cause::Notice];

    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Timeout => "timeout",
            Cause::InBand => "inband",
            Cause::Notice => "notice",
        }
    }
}

/// Events for the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `rank` has failed (final: never withdrawn). `detector` declared it
    /// (this rank for Timeout/InBand; the notice's origin, or the sync peer,
    /// for Notice). `hops`: overlay hops the news travelled (0 if detected
    /// here).
    Failed {
        rank: Rank,
        detector: Rank,
        cause: Cause,
        hops: u16,
    },
    /// `rank` left cleanly.
    Left { rank: Rank },
    /// This rank was declared failed by others (`by` told us): it must stop
    /// participating. The Engine is inert from now on.
    SelfExcluded { by: Rank },
    /// The emitter's slot stood still for `stalled_for` and then moved
    /// again: a slow but live process (a warning, never a failure).
    SlowEmitter { rank: Rank, stalled_for: Duration },
    /// An application payload broadcast by `origin`.
    Payload {
        origin: Rank,
        seq: u64,
        bytes: Vec<u8>,
    },
}

/// Errors of [`Engine::handle`]. None of them changes protocol state (the
/// counters in [`Stats`] aside).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandleError {
    /// The message was dropped; counted in `Stats::rejected`.
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

/// How heartbeats leave the Engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeartbeatMode {
    /// Every period, an [`Output::WriteHeartbeat`] (the runtime).
    Write,
    /// An [`Output::HeartbeatStream`] on each change; the driver models the
    /// slot values (the simulator).
    Modelled,
}

/// Counters the runtime can read ([`Engine::stats`]). Plain integers.
/// (`repr(C)`: the counters touched by every message come first, next to
/// the Engine's other hot fields.)
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Stats {
    /// Messages received, indexed by [`Kind::index`].
    pub received: [u64; Kind::COUNT],
    /// Notices that named nothing new (not forwarded).
    pub duplicate_notices: u64,
    /// Messages sent, indexed by [`Kind::index`].
    pub sent: [u64; Kind::COUNT],
    pub bytes_sent: u64,
    pub heartbeats_written: u64,
    pub slot_checks: u64,
    /// Wake-ups that ran later than the lag guard: nobody declared.
    pub self_lag_trips: u64,
    /// The latest any timer fired past its deadline, in ns.
    pub max_lateness_ns: u64,
    /// Messages dropped at decoding, indexed by [`RejectReason::index`].
    pub rejected: [u64; RejectReason::COUNT],
    /// Messages from ranks in the failed set (answered with an exclusion).
    pub dropped_from_failed: u64,
    /// Notices and payloads whose origin is in the failed set.
    pub dropped_untrusted_origin: u64,
    pub notices_forwarded: u64,
    /// Failures this rank learned, indexed like [`Cause::ALL`].
    pub detections: [u64; 3],
    pub departures_learned: u64,
    pub mendings: u64,
    pub observe_me_accepted: u64,
    pub observe_me_stale: u64,
    pub observe_me_resent: u64,
    pub sync_requests_sent: u64,
    pub sync_requests_received: u64,
    pub sync_replies_sent: u64,
    pub ranks_learned_by_sync: u64,
    pub exclusions_sent: u64,
    pub slow_emitter_warnings: u64,
    pub transport_errors: u64,
    /// Transport errors that were not evidence (departed peer, non-ring
    /// peer, in-band off).
    pub transport_errors_ignored: u64,
    pub suspicions: u64,
    pub suspicions_cleared: u64,
    pub payloads_delivered: u64,
    pub payload_duplicates: u64,
    /// Transport-claimed sender differed from the header's.
    pub sender_mismatch: u64,
    /// Slot reads of a slot the Engine is not watching.
    pub stale_slot_reads: u64,
}

impl Stats {
    pub fn notices_sent(&self) -> u64 {
        self.sent[Kind::Notice.index()]
    }
    pub fn notices_received(&self) -> u64 {
        self.received[Kind::Notice.index()]
    }
    pub fn detections_by(&self, cause: Cause) -> u64 {
        self.detections[cause as usize]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timer {
    /// Next heartbeat write (Write mode).
    Beat = 0,
    /// Next check of the emitter's slot.
    Check = 1,
    /// A suspect's time to prove itself alive is up.
    Suspect = 2,
    /// Forward the leaves learned in this window.
    LeaveBatch = 3,
}

const TIMERS: [Timer; 4] = [Timer::Beat, Timer::Check, Timer::Suspect, Timer::LeaveBatch];

/// Deadlines indexed by [`Timer`]; `Time::NEVER` when unset. A fired timer
/// whose deadline has moved is simply not due: no cancel API.
#[derive(Clone, Copy, Debug)]
struct TimerTable([Time; 4]);

impl TimerTable {
    fn get(&self, t: Timer) -> Time {
        self.0[t as usize]
    }
    fn set(&mut self, t: Timer, at: Time) {
        self.0[t as usize] = at;
    }
    fn stop(&mut self, t: Timer) {
        self.0[t as usize] = Time::NEVER;
    }
    fn next(&self) -> Time {
        self.0.iter().copied().min().unwrap_or(Time::NEVER)
    }
}

/// This rank's observation of its emitter.
#[derive(Clone, Debug)]
struct Watch {
    emitter: Option<Rank>,
    generation: u32,
    slot: u16,
    /// Last value read from the slot (`None`: not read since mending).
    last_value: Option<u64>,
    /// When the slot was last seen to change (or the baseline restarted).
    /// May lie in the future during the start-up grace.
    changed_at: Time,
    /// The latest read that found the slot unchanged since `changed_at`.
    still_seen_at: Option<Time>,
    /// Mended and no beat seen yet: resend `ObserveMe` at each check.
    awaiting_first: bool,
    mismatch_since: Option<Time>,
    sync_not_before: Time,
    slow_warned_at: Option<Time>,
    /// `InbandMode::Suspect` evidence against the emitter: declare after
    /// `suspect_timeout` of stillness instead of the full timeout.
    hurry: bool,
}

/// This rank's heartbeats to its observer.
#[derive(Clone, Debug)]
struct Beat {
    observer: Option<Rank>,
    /// The observer's generation, from its `ObserveMe`.
    generation: u32,
    slot: u16,
    counter: u32,
}

/// A probe about our emitter, answered when its slot next moves.
#[derive(Clone, Copy, Debug)]
struct Witness {
    requester: Rank,
    nonce: u32,
    asked_at: Time,
}

#[derive(Clone, Copy, Debug)]
struct Suspect {
    rank: Rank,
    nonce: u32,
}

/// One broadcast step in progress: its targets in send order, sent lazily
/// so that a target learned failed meanwhile is skipped.
#[derive(Clone, Debug)]
struct Fanout {
    bytes: Arc<[u8]>,
    kind: Kind,
    targets: Box<[Rank]>,
    next: usize,
}

#[derive(Clone, Copy, Debug)]
struct DedupEntry {
    max_seq: u64,
    /// Bit i: sequence `max_seq - i` seen.
    window: u64,
    touched: u64,
}

/// Payload de-duplication by (origin, sequence): a 64-wide window per
/// origin, at most `cap` origins (least recently used evicted).
#[derive(Clone, Debug, Default)]
struct PayloadDedup {
    origins: BTreeMap<Rank, DedupEntry>,
    clock: u64,
}

impl PayloadDedup {
    /// Records (origin, seq); true if it was not seen before.
    fn first_sighting(&mut self, origin: Rank, seq: u64, cap: usize) -> bool {
        self.clock += 1;
        let clock = self.clock;
        if let Some(e) = self.origins.get_mut(&origin) {
            e.touched = clock;
            if seq > e.max_seq {
                let shift = seq - e.max_seq;
                e.window = if shift >= 64 {
                    1
                } else {
                    (e.window << shift) | 1
                };
                e.max_seq = seq;
                return true;
            }
            let age = e.max_seq - seq;
            if age >= 64 || e.window & (1 << age) != 0 {
                return false;
            }
            e.window |= 1 << age;
            return true;
        }
        if self.origins.len() >= cap.max(1) {
            let oldest = self
                .origins
                .iter()
                .min_by_key(|(_, e)| e.touched)
                .map(|(&r, _)| r);
            if let Some(r) = oldest {
                self.origins.remove(&r);
            }
        }
        self.origins.insert(
            origin,
            DedupEntry {
                max_seq: seq,
                window: 1,
                touched: clock,
            },
        );
        true
    }
}

/// The ranks of `list` (ascending) that are neither `me` nor in the sorted
/// sets `a` and `b`: binary searches for short lists, one merge walk for
/// long ones (batched leaves).
fn unknown_ranks(list: RankList<'_>, me: Rank, a: &[Rank], b: &[Rank]) -> Vec<Rank> {
    let k = list.len() as usize;
    if k * 16 < a.len() + b.len() {
        return list
            .iter()
            .filter(|r| *r != me && a.binary_search(r).is_err() && b.binary_search(r).is_err())
            .collect();
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    for r in list.iter() {
        while i < a.len() && a[i] < r {
            i += 1;
        }
        while j < b.len() && b[j] < r {
            j += 1;
        }
        if r != me && a.get(i) != Some(&r) && b.get(j) != Some(&r) {
            out.push(r);
        }
    }
    out
}

/// One rank's protocol state. Per-rank memory is O(failures + log N): the
/// ring and config are shared (`Arc`), the failed set is sparse.
///
/// (`repr(C)`, hot fields first: a simulator touches a million of these
/// in random order, and a duplicate notice should cost few cache lines.)
#[derive(Debug)]
#[repr(C)]
pub struct Engine {
    participation: Participation,
    mode: HeartbeatMode,
    /// Modelled mode: a `HeartbeatStream` is owed.
    stream_dirty: bool,
    me: Rank,
    encoder: Encoder,
    ring: Arc<Ring>,
    failed: RankSet,
    left: RankSet,
    timers: TimerTable,
    pending_write: Option<(Rank, u16, u64)>,
    out: VecDeque<Output>,
    fanouts: VecDeque<Fanout>,
    stats: Stats,
    config: Arc<EngineConfig>,
    overlay: Overlay,
    watch: Watch,
    beat: Beat,
    suspect: Option<Suspect>,
    witness: Option<Witness>,
    nonce: u32,
    next_payload_seq: u64,
    dedup: PayloadDedup,
    /// Leaves learned from others, not yet forwarded (see `leave_batch`).
    pending_left: Vec<Rank>,
    /// Recent exclusion replies (rank, when), for rate limiting.
    exclusion_replies: [(Rank, Time); 4],
}

impl Engine {
    /// The Engine of rank `me` in a job on `ring` (N = `ring.len()`), with
    /// the job key agreed at bootstrap, started at `now`. Heartbeats start at
    /// once; nobody is declared before `now + startup_grace + timeout`.
    /// Poll outputs after creating it.
    pub fn new(
        config: Arc<EngineConfig>,
        ring: Arc<Ring>,
        me: Rank,
        job_key: u64,
        now: Time,
    ) -> Result<Engine, ConfigError> {
        config.validate()?;
        let n = ring.len();
        if n == 0 {
            return Err(ConfigError::EmptyRing);
        }
        if me >= n {
            return Err(ConfigError::RankOutOfRange { rank: me, size: n });
        }
        let emitter = ring.predecessors(me).next();
        let observer = ring.successors(me).next();
        let grace_end = now + config.startup_grace();
        let mut timers = TimerTable([Time::NEVER; 4]);
        if emitter.is_some() {
            // Check from the start: an emitter never heard from has until
            // grace_end + timeout (changed_at below), but one whose beats
            // flow and then stop is judged by the plain timeout.
            timers.set(Timer::Check, (now + config.check_interval()).min(grace_end));
        }
        let mut engine = Engine {
            overlay: Overlay::new(config.bcast, n),
            encoder: Encoder::new(job_key, me),
            me,
            participation: Participation::Active,
            mode: HeartbeatMode::Write,
            failed: RankSet::new(),
            left: RankSet::new(),
            watch: Watch {
                emitter,
                generation: 0,
                slot: 0,
                last_value: None,
                changed_at: grace_end,
                still_seen_at: None,
                awaiting_first: false,
                mismatch_since: None,
                sync_not_before: Time::ZERO,
                slow_warned_at: None,
                hurry: false,
            },
            beat: Beat {
                observer,
                generation: 0,
                slot: 0,
                counter: 0,
            },
            stream_dirty: false,
            timers,
            suspect: None,
            witness: None,
            nonce: 0,
            pending_write: None,
            out: VecDeque::new(),
            fanouts: VecDeque::new(),
            next_payload_seq: 0,
            dedup: PayloadDedup::default(),
            pending_left: Vec::new(),
            exclusion_replies: [(NO_RANK, Time::ZERO); 4],
            stats: Stats::default(),
            config,
            ring,
        };
        engine.write_beat_now(now);
        Ok(engine)
    }

    /// Switches to [`HeartbeatMode::Modelled`]: no per-period beat timer and
    /// no `WriteHeartbeat`; `HeartbeatStream` outputs instead (the first one
    /// at the next poll). For simulators; call before the first poll.
    pub fn model_heartbeats(&mut self) {
        self.mode = HeartbeatMode::Modelled;
        self.timers.stop(Timer::Beat);
        self.pending_write = None;
        self.stream_dirty = true;
    }

    // ----- accessors -----

    pub fn me(&self) -> Rank {
        self.me
    }
    pub fn size(&self) -> u32 {
        self.ring.len()
    }
    pub fn ring(&self) -> &Arc<Ring> {
        &self.ring
    }
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }
    pub fn participation(&self) -> Participation {
        self.participation
    }
    /// The rank this rank observes (its nearest live predecessor, as far as
    /// it knows), if any.
    pub fn emitter(&self) -> Option<Rank> {
        self.watch.emitter
    }
    /// The rank this rank heartbeats to, if any.
    pub fn observer(&self) -> Option<Rank> {
        self.beat.observer
    }
    /// The slot index (`0..512`) of this rank's slot page the runtime must
    /// read before each tick; `None` when there is no emitter.
    pub fn watched_slot(&self) -> Option<u16> {
        self.watch.emitter.map(|_| self.watch.slot)
    }
    /// The observation generation (number of mendings so far).
    pub fn generation(&self) -> u32 {
        self.watch.generation
    }
    /// Where this rank's heartbeats go: (observer, slot).
    pub fn heartbeat_target(&self) -> Option<(Rank, u16)> {
        self.beat.observer.map(|o| (o, self.beat.slot))
    }
    /// The failed set, ascending.
    pub fn failed(&self) -> &[Rank] {
        self.failed.as_slice()
    }
    /// Ranks that left cleanly, ascending.
    pub fn left(&self) -> &[Rank] {
        self.left.as_slice()
    }
    /// Count of known failures: grows by one per failure, never shrinks.
    pub fn epoch(&self) -> u64 {
        self.failed.len() as u64
    }
    pub fn is_failed(&self, rank: Rank) -> bool {
        self.failed.contains(rank)
    }
    /// Failed or left.
    pub fn is_gone(&self, rank: Rank) -> bool {
        self.failed.contains(rank) || self.left.contains(rank)
    }
    /// Digest of the failed ∪ left set.
    pub fn digest(&self) -> u64 {
        self.failed.digest() ^ self.left.digest()
    }
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The earliest time the Engine must be ticked, `None` if it needs no
    /// tick (e.g. excluded, or alone). Call after every `handle`.
    pub fn next_deadline(&self) -> Option<Time> {
        if self.participation == Participation::Excluded {
            return None;
        }
        let t = self.timers.next();
        (t != Time::NEVER).then_some(t)
    }

    /// The next thing to do, or `None`. Drain after every `handle` (and
    /// after `new`). The heartbeat write comes first and allocates nothing.
    pub fn poll_output(&mut self) -> Option<Output> {
        if let Some((to, slot, value)) = self.pending_write.take() {
            return Some(Output::WriteHeartbeat { to, slot, value });
        }
        if self.stream_dirty {
            self.stream_dirty = false;
            return Some(Output::HeartbeatStream {
                to: self.beat.observer,
                slot: self.beat.slot,
                digest: fold_digest(self.digest()),
            });
        }
        if let Some(o) = self.out.pop_front() {
            return Some(o);
        }
        while let Some(f) = self.fanouts.front_mut() {
            while f.next < f.targets.len() {
                let to = f.targets[f.next];
                f.next += 1;
                if self.failed.contains(to) || self.left.contains(to) {
                    continue;
                }
                self.stats.sent[f.kind.index()] += 1;
                self.stats.bytes_sent += f.bytes.len() as u64;
                return Some(Output::Send {
                    to,
                    bytes: f.bytes.clone(),
                });
            }
            self.fanouts.pop_front();
        }
        None
    }

    /// Hands an input to the Engine at time `now` (never earlier than a
    /// previous `now`). Then drain [`Engine::poll_output`] and re-read
    /// [`Engine::next_deadline`].
    pub fn handle(&mut self, now: Time, input: Input<'_>) -> Result<(), HandleError> {
        match input {
            Input::Tick => {
                self.on_tick(now);
                Ok(())
            }
            Input::HeartbeatSlot { slot, value } => {
                self.on_slot(now, slot, value);
                Ok(())
            }
            Input::Message { from, bytes } => self.on_message(now, from, bytes),
            Input::TransportError { peer, kind } => {
                self.on_transport_error(now, peer, kind);
                Ok(())
            }
            Input::Broadcast(bytes) => self.on_broadcast(bytes),
            Input::Leave => self.on_leave(),
        }
    }

    // ----- helpers -----

    fn my_digest32(&self) -> u32 {
        fold_digest(self.digest())
    }

    fn push_event(&mut self, e: Event) {
        self.out.push_back(Output::Event(e));
    }

    fn send(&mut self, to: Rank, kind: Kind, bytes: Vec<u8>) {
        self.stats.sent[kind.index()] += 1;
        self.stats.bytes_sent += bytes.len() as u64;
        self.out.push_back(Output::Send {
            to,
            bytes: bytes.into(),
        });
    }

    /// Queues a broadcast step of `bytes` rooted at `root`, skipping `skip`.
    fn fan_out(&mut self, kind: Kind, bytes: Arc<[u8]>, root: Rank, skip: [Rank; 2]) {
        let mut buf: Links = [0; MAX_LINKS];
        let my_pos = self.ring.position_of(self.me);
        let len = self
            .overlay
            .send_order(my_pos, self.ring.position_of(root), &mut buf);
        let targets: Box<[Rank]> = buf[..len]
            .iter()
            .map(|&p| self.ring.rank_at(p))
            .filter(|r| !skip.contains(r) && *r != self.me)
            .collect();
        if !targets.is_empty() {
            self.fanouts.push_back(Fanout {
                bytes,
                kind,
                targets,
                next: 0,
            });
        }
    }

    fn write_beat_now(&mut self, now: Time) {
        match self.mode {
            HeartbeatMode::Write => {
                if let Some(o) = self.beat.observer {
                    self.beat.counter = self.beat.counter.wrapping_add(1).max(1);
                    self.pending_write = Some((
                        o,
                        self.beat.slot,
                        slot_value(self.my_digest32(), self.beat.counter),
                    ));
                    self.stats.heartbeats_written += 1;
                    self.timers.set(Timer::Beat, now + self.config.period);
                }
            }
            HeartbeatMode::Modelled => self.stream_dirty = true,
        }
    }

    /// Schedules the next slot check: one check interval away, or sooner if
    /// the emitter's time is up before that.
    fn schedule_check(&mut self, now: Time) {
        if self.watch.emitter.is_none() || self.participation != Participation::Active {
            self.timers.stop(Timer::Check);
            return;
        }
        let limit = if self.watch.hurry {
            self.config.suspect_timeout()
        } else {
            self.config.timeout
        };
        let expiry = self.watch.changed_at + limit;
        let next = (now + self.config.check_interval())
            .min(expiry)
            .max(now + Duration::from_nanos(1));
        self.timers.set(Timer::Check, next);
    }

    // ----- observation -----

    fn on_slot(&mut self, now: Time, slot: u16, value: u64) {
        let Some(emitter) = self.watch.emitter else {
            self.stats.stale_slot_reads += 1;
            return;
        };
        if slot != self.watch.slot || self.participation == Participation::Excluded {
            self.stats.stale_slot_reads += 1;
            return;
        }
        match self.watch.last_value {
            Some(v) if v == value => self.watch.still_seen_at = Some(now),
            None if value == 0 => self.watch.last_value = Some(0),
            previous => {
                // Slow, not dead: a read saw the slot standing still for a
                // while, and now it moved. (A long gap between our own reads
                // is our stall, not the emitter's: no read, no evidence.)
                if let (Some(_), Some(still), false) = (
                    previous,
                    self.watch.still_seen_at,
                    self.watch.awaiting_first,
                ) {
                    let stalled_for = still - self.watch.changed_at;
                    let quiet = self
                        .watch
                        .slow_warned_at
                        .is_none_or(|t| now - t >= self.config.timeout);
                    if stalled_for >= self.config.slow_emitter_after() && quiet {
                        self.watch.slow_warned_at = Some(now);
                        self.stats.slow_emitter_warnings += 1;
                        self.push_event(Event::SlowEmitter {
                            rank: emitter,
                            stalled_for,
                        });
                    }
                }
                if let Some(w) = self.witness.take() {
                    if previous.is_some() && now > w.asked_at {
                        let m = self
                            .encoder
                            .probe_ack(w.nonce, emitter, ProbeVerdict::Alive);
                        self.send(w.requester, Kind::ProbeAck, m);
                    } else {
                        self.witness = Some(w);
                    }
                }
                self.watch.last_value = Some(value);
                // The emitter is alive now. (Not max(changed_at, now): during
                // the start-up or post-mending grace changed_at lies in the
                // future, and keeping it would blind the observer for the
                // rest of the grace once heartbeats flow.)
                self.watch.changed_at = now;
                self.watch.still_seen_at = None;
                self.watch.awaiting_first = false;
                self.watch.hurry = false;
            }
        }
    }

    fn on_tick(&mut self, now: Time) {
        if self.participation == Participation::Excluded {
            return;
        }
        let earliest_due = TIMERS
            .iter()
            .map(|&t| self.timers.get(t))
            .filter(|&d| d <= now)
            .min();
        let Some(earliest_due) = earliest_due else {
            return;
        };
        let lateness = now - earliest_due;
        self.stats.max_lateness_ns = self.stats.max_lateness_ns.max(lateness.as_nanos() as u64);
        let lagging = lateness > self.config.lag_guard();
        if lagging {
            self.on_self_lag(now);
        }
        if self.timers.get(Timer::Beat) <= now {
            self.timers.stop(Timer::Beat);
            self.write_beat_now(now);
        }
        if self.timers.get(Timer::Suspect) <= now {
            self.timers.stop(Timer::Suspect);
            if let Some(s) = self.suspect {
                if lagging {
                    self.timers
                        .set(Timer::Suspect, now + self.config.suspect_timeout());
                } else {
                    self.suspect = None;
                    self.declare(now, s.rank, Cause::InBand);
                }
            }
        }
        if self.timers.get(Timer::Check) <= now {
            self.timers.stop(Timer::Check);
            self.check(now, lagging);
        }
        if self.timers.get(Timer::LeaveBatch) <= now {
            self.timers.stop(Timer::LeaveBatch);
            self.forward_leaves();
        }
    }

    /// Forwards the leaves learned since the last batch as one notice
    /// rooted here.
    fn forward_leaves(&mut self) {
        if self.pending_left.is_empty() || self.participation == Participation::Excluded {
            return;
        }
        let mut left = std::mem::take(&mut self.pending_left);
        left.sort_unstable();
        left.dedup();
        self.stats.notices_forwarded += 1;
        let m: Arc<[u8]> = self.encoder.notice(self.me, 0, &[], &left).into();
        self.fan_out(Kind::Notice, m, self.me, [NO_RANK, NO_RANK]);
    }

    /// This thread woke late by more than the lag guard: its own stall is not
    /// its emitter's failure. Declare nobody this round, restart the
    /// baseline (the emitter gets a full timeout from now), and check our
    /// own standing with our ring neighbours: if we were excluded while
    /// stopped, they answer with a notice naming us, well before our next
    /// chance to declare anyone.
    fn on_self_lag(&mut self, now: Time) {
        self.stats.self_lag_trips += 1;
        self.watch.changed_at = self.watch.changed_at.max(now);
        self.watch.still_seen_at = None;
        self.watch.mismatch_since = None;
        if self.participation != Participation::Active {
            return;
        }
        let mut asked = NO_RANK;
        for peer in [self.watch.emitter, self.beat.observer]
            .into_iter()
            .flatten()
        {
            if peer != asked {
                asked = peer;
                self.send_sync_request(peer);
            }
        }
    }

    fn check(&mut self, now: Time, lagging: bool) {
        self.stats.slot_checks += 1;
        if self.participation != Participation::Active {
            return;
        }
        let Some(emitter) = self.watch.emitter else {
            return;
        };
        if !lagging {
            let (limit, cause) = if self.watch.hurry {
                (self.config.suspect_timeout(), Cause::InBand)
            } else {
                (self.config.timeout, Cause::Timeout)
            };
            if now >= self.watch.changed_at && now - self.watch.changed_at >= limit {
                self.declare(now, emitter, cause);
                return;
            }
        }
        if self.watch.awaiting_first {
            self.stats.observe_me_resent += 1;
            let m = self
                .encoder
                .observe_me(self.watch.generation, self.watch.slot);
            self.send(emitter, Kind::ObserveMe, m);
        }
        match self.watch.last_value {
            Some(v) if v != 0 && slot_digest(v) != self.my_digest32() => {
                match self.watch.mismatch_since {
                    None => self.watch.mismatch_since = Some(now),
                    Some(since) => {
                        if now - since >= self.config.sync_after()
                            && now >= self.watch.sync_not_before
                        {
                            self.watch.sync_not_before = now + self.config.timeout;
                            self.send_sync_request(emitter);
                        }
                    }
                }
            }
            _ => self.watch.mismatch_since = None,
        }
        self.schedule_check(now);
    }

    fn send_sync_request(&mut self, peer: Rank) {
        self.stats.sync_requests_sent += 1;
        let m =
            self.encoder
                .sync_request(self.digest(), self.failed.as_slice(), self.left.as_slice());
        self.send(peer, Kind::SyncRequest, m);
    }

    // ----- failures, mending -----

    /// This rank declares `rank` failed: report, tell `rank` itself (if it
    /// is only stopped or cut off, it learns it is out as soon as it runs
    /// again), broadcast, mend.
    fn declare(&mut self, now: Time, rank: Rank, cause: Cause) {
        if rank == self.me || self.is_gone(rank) || self.participation != Participation::Active {
            return;
        }
        self.failed.insert(rank);
        self.stats.detections[cause as usize] += 1;
        self.push_event(Event::Failed {
            rank,
            detector: self.me,
            cause,
            hops: 0,
        });
        let m: Arc<[u8]> = self.encoder.notice(self.me, 0, &[rank], &[]).into();
        self.stats.exclusions_sent += 1;
        self.stats.sent[Kind::Notice.index()] += 1;
        self.stats.bytes_sent += m.len() as u64;
        self.out.push_back(Output::Send {
            to: rank,
            bytes: m.clone(),
        });
        self.fan_out(Kind::Notice, m, self.me, [rank, NO_RANK]);
        self.after_gone_changed(now);
    }

    /// Adds the listed ranks; returns the ones that were new. (Lists are
    /// ascending, so the new ones merge into the sets in one pass.)
    fn learn(
        &mut self,
        failed: RankList<'_>,
        left: RankList<'_>,
        detector: Rank,
        hops: u16,
    ) -> (Vec<Rank>, Vec<Rank>) {
        let new_failed = unknown_ranks(
            failed,
            self.me,
            self.failed.as_slice(),
            self.left.as_slice(),
        );
        self.failed.insert_sorted(&new_failed);
        let new_left = unknown_ranks(left, self.me, self.failed.as_slice(), self.left.as_slice());
        self.left.insert_sorted(&new_left);
        for &rank in &new_failed {
            self.stats.detections[Cause::Notice as usize] += 1;
            self.push_event(Event::Failed {
                rank,
                detector,
                cause: Cause::Notice,
                hops,
            });
        }
        for &rank in &new_left {
            self.stats.departures_learned += 1;
            self.push_event(Event::Left { rank });
        }
        (new_failed, new_left)
    }

    /// Reacts to a grown failed/left set: mend if the emitter is gone, stop
    /// heartbeats to a departed observer (its own observer will mend to us),
    /// drop a departed suspect, announce the new digest.
    fn after_gone_changed(&mut self, now: Time) {
        if self.mode == HeartbeatMode::Modelled && self.participation != Participation::Excluded {
            self.stream_dirty = true;
        }
        if let Some(o) = self.beat.observer {
            if self.is_gone(o) {
                self.beat.observer = None;
                self.pending_write = None;
            }
        }
        if let Some(s) = self.suspect {
            if self.is_gone(s.rank) {
                self.suspect = None;
                self.timers.stop(Timer::Suspect);
            }
        }
        if let Some(e) = self.watch.emitter {
            if self.is_gone(e) {
                self.mend(now);
            }
        }
    }

    /// The emitter is gone: observe the nearest predecessor not known
    /// failed or left, in a fresh slot, with a grace of one timeout. With
    /// nobody left, there is no emitter (and no error).
    fn mend(&mut self, now: Time) {
        let candidate = self.ring.predecessors(self.me).find(|&r| !self.is_gone(r));
        self.witness = None;
        self.watch.generation = self.watch.generation.wrapping_add(1);
        self.watch.slot = (self.watch.generation % u32::from(SLOTS)) as u16;
        self.watch.emitter = candidate;
        self.watch.last_value = None;
        self.watch.changed_at = now;
        self.watch.still_seen_at = None;
        self.watch.awaiting_first = true;
        self.watch.mismatch_since = None;
        self.watch.hurry = false;
        self.watch.slow_warned_at = None;
        if let Some(e) = candidate {
            if self.participation == Participation::Active {
                self.stats.mendings += 1;
                let m = self
                    .encoder
                    .observe_me(self.watch.generation, self.watch.slot);
                self.send(e, Kind::ObserveMe, m);
            }
        }
        self.schedule_check(now);
    }

    fn self_exclude(&mut self, by: Rank) {
        if self.participation == Participation::Excluded {
            return;
        }
        self.participation = Participation::Excluded;
        self.timers = TimerTable([Time::NEVER; 4]);
        self.fanouts.clear();
        self.pending_write = None;
        self.suspect = None;
        self.beat.observer = None;
        self.stream_dirty = self.mode == HeartbeatMode::Modelled;
        self.push_event(Event::SelfExcluded { by });
    }

    /// Answers a message from a rank in the failed set with a notice naming
    /// it (at most once per timeout per rank, 4 ranks remembered).
    fn reply_exclusion(&mut self, now: Time, to: Rank) {
        let timeout = self.config.timeout;
        if self
            .exclusion_replies
            .iter()
            .any(|&(r, t)| r == to && now - t < timeout)
        {
            return;
        }
        let slot = self
            .exclusion_replies
            .iter()
            .enumerate()
            .min_by_key(|(_, (_, t))| *t)
            .map_or(0, |(i, _)| i);
        self.exclusion_replies[slot] = (to, now);
        self.stats.exclusions_sent += 1;
        let m = self.encoder.notice(self.me, 0, &[to], &[]);
        self.send(to, Kind::Notice, m);
    }

    // ----- messages -----

    fn on_message(
        &mut self,
        now: Time,
        from: Option<Rank>,
        bytes: &[u8],
    ) -> Result<(), HandleError> {
        let (header, msg) = match wire::decode(bytes, self.encoder.job_key, self.ring.len()) {
            Ok(d) => d,
            Err(reason) => {
                self.stats.rejected[reason.index()] += 1;
                return Err(HandleError::Rejected(reason));
            }
        };
        let sender = header.sender;
        if sender == self.me {
            self.stats.rejected[RejectReason::FromSelf.index()] += 1;
            return Err(HandleError::Rejected(RejectReason::FromSelf));
        }
        if from.is_some_and(|f| f != sender) {
            self.stats.sender_mismatch += 1;
        }
        self.stats.received[header.kind.index()] += 1;
        if self.participation == Participation::Excluded {
            return Ok(());
        }
        // Trust order: a rank in our failed set is answered with an
        // exclusion and otherwise ignored; a notice whose origin is in our
        // failed set is never trusted (not even about us); then, being named
        // failed by anyone else means we are out: reports are final.
        if self.failed.contains(sender) {
            self.stats.dropped_from_failed += 1;
            self.reply_exclusion(now, sender);
            return Ok(());
        }
        if let Message::Notice(n) = &msg {
            if self.failed.contains(n.origin) {
                self.stats.dropped_untrusted_origin += 1;
                return Ok(());
            }
        }
        let names_me = match &msg {
            Message::Notice(n) => n.failed.contains(self.me),
            Message::SyncRequest { failed, .. } | Message::SyncReply { failed, .. } => {
                failed.contains(self.me)
            }
            _ => false,
        };
        if names_me {
            self.self_exclude(sender);
            return Ok(());
        }
        match msg {
            Message::Notice(n) => {
                let (nf, nl) = self.learn(n.failed, n.left, n.origin, n.hops.saturating_add(1));
                if nf.is_empty() && nl.is_empty() {
                    self.stats.duplicate_notices += 1;
                    return Ok(());
                }
                if !nf.is_empty() {
                    // Failures travel at once, as received (forward-once).
                    if let Some(fwd) = wire::forwarded(bytes, self.me) {
                        self.stats.notices_forwarded += 1;
                        self.fan_out(Kind::Notice, fwd.into(), n.origin, [sender, NO_RANK]);
                    }
                } else {
                    self.batch_leaves(now, &nl);
                }
                self.after_gone_changed(now);
            }
            Message::ObserveMe { generation, slot } => {
                self.on_observe_me(now, sender, generation, slot)
            }
            Message::SyncRequest {
                digest,
                failed,
                left,
            } => {
                self.stats.sync_requests_received += 1;
                let (nf, nl) = self.learn(failed, left, sender, 1);
                self.rebroadcast_learned(&nf, &nl, sender);
                if digest != self.digest() {
                    let (mut theirs, mut diff_f, mut diff_l) =
                        (failed.to_vec(), Vec::new(), Vec::new());
                    theirs.extend(left.iter());
                    theirs.sort_unstable();
                    for &r in self.failed.as_slice() {
                        if theirs.binary_search(&r).is_err() {
                            diff_f.push(r);
                        }
                    }
                    for &r in self.left.as_slice() {
                        if theirs.binary_search(&r).is_err() {
                            diff_l.push(r);
                        }
                    }
                    if !diff_f.is_empty() || !diff_l.is_empty() {
                        self.stats.sync_replies_sent += 1;
                        let m = self.encoder.sync_reply(&diff_f, &diff_l);
                        self.send(sender, Kind::SyncReply, m);
                    }
                }
                if !nf.is_empty() || !nl.is_empty() {
                    self.after_gone_changed(now);
                }
            }
            Message::SyncReply { failed, left } => {
                let (nf, nl) = self.learn(failed, left, sender, 1);
                self.rebroadcast_learned(&nf, &nl, sender);
                if !nf.is_empty() || !nl.is_empty() {
                    self.after_gone_changed(now);
                }
            }
            Message::Probe { nonce, about } => {
                let verdict = if about == self.me {
                    ProbeVerdict::Alive
                } else if self.failed.contains(about) {
                    ProbeVerdict::Dead
                } else if self.watch.emitter == Some(about) {
                    // We observe the suspect: vouch for it only on a beat
                    // written after this probe arrived (its error may be
                    // milliseconds old, our last beat older). Silence past
                    // the suspect timeout is reported at once.
                    let stale = now >= self.watch.changed_at
                        && now - self.watch.changed_at >= self.config.suspect_timeout();
                    if stale && self.watch.last_value.is_some() {
                        ProbeVerdict::Silent
                    } else {
                        self.witness = Some(Witness {
                            requester: sender,
                            nonce,
                            asked_at: now,
                        });
                        let soon = now + self.config.period;
                        if self.timers.get(Timer::Check) > soon {
                            self.timers.set(Timer::Check, soon);
                        }
                        return Ok(());
                    }
                } else {
                    ProbeVerdict::Unknown
                };
                let m = self.encoder.probe_ack(nonce, about, verdict);
                self.send(sender, Kind::ProbeAck, m);
            }
            Message::ProbeAck {
                nonce,
                about,
                verdict,
            } => {
                if let Some(s) = self.suspect {
                    if s.rank == about && s.nonce == nonce {
                        match verdict {
                            ProbeVerdict::Alive => {
                                self.stats.suspicions_cleared += 1;
                                self.suspect = None;
                                self.timers.stop(Timer::Suspect);
                            }
                            ProbeVerdict::Dead | ProbeVerdict::Silent => {
                                self.suspect = None;
                                self.timers.stop(Timer::Suspect);
                                self.declare(now, about, Cause::InBand);
                            }
                            ProbeVerdict::Unknown => {}
                        }
                    }
                }
            }
            Message::Payload {
                origin,
                seq,
                hops: _,
                bytes: payload,
            } => {
                if self.failed.contains(origin) {
                    self.stats.dropped_untrusted_origin += 1;
                    return Ok(());
                }
                if !self
                    .dedup
                    .first_sighting(origin, seq, self.config.payload_dedup_origins)
                {
                    self.stats.payload_duplicates += 1;
                    return Ok(());
                }
                self.stats.payloads_delivered += 1;
                self.push_event(Event::Payload {
                    origin,
                    seq,
                    bytes: payload.to_vec(),
                });
                if let Some(fwd) = wire::forwarded(bytes, self.me) {
                    self.fan_out(Kind::Payload, fwd.into(), origin, [sender, NO_RANK]);
                }
            }
        }
        Ok(())
    }

    /// Queues leaves learned from others for the next batch.
    fn batch_leaves(&mut self, now: Time, left: &[Rank]) {
        if left.is_empty() {
            return;
        }
        self.pending_left.extend_from_slice(left);
        if self.timers.get(Timer::LeaveBatch) == Time::NEVER {
            self.timers
                .set(Timer::LeaveBatch, now + self.config.leave_batch());
        }
    }

    /// Ranks learned from a sync exchange are new to this part of the
    /// overlay too: broadcast them as a notice originated here.
    fn rebroadcast_learned(&mut self, failed: &[Rank], left: &[Rank], peer: Rank) {
        if failed.is_empty() && left.is_empty() {
            return;
        }
        self.stats.ranks_learned_by_sync += (failed.len() + left.len()) as u64;
        let m: Arc<[u8]> = self.encoder.notice(self.me, 0, failed, left).into();
        self.fan_out(Kind::Notice, m, self.me, [peer, NO_RANK]);
    }

    /// A rank asks us to heartbeat into its slot. Accepted from our current
    /// observer with a generation at least as new, or from a rank farther
    /// along the ring than our current observer (which it must have found
    /// gone: observers only move outward, there is no rejoin), or when we
    /// have no live observer. A request from a rank *nearer* than our
    /// current observer is stale: that rank was skipped by the mending that
    /// gave us the current observer.
    fn on_observe_me(&mut self, now: Time, sender: Rank, generation: u32, slot: u16) {
        if self.left.contains(sender) {
            self.stats.observe_me_stale += 1;
            return;
        }
        let accept = match self.beat.observer {
            None => true,
            Some(o) if self.is_gone(o) => true,
            Some(o) if o == sender => generation >= self.beat.generation,
            Some(o) => self.ring.distance(self.me, sender) > self.ring.distance(self.me, o),
        };
        if !accept {
            self.stats.observe_me_stale += 1;
            return;
        }
        self.stats.observe_me_accepted += 1;
        self.beat.observer = Some(sender);
        self.beat.generation = generation;
        self.beat.slot = slot;
        self.write_beat_now(now);
    }

    // ----- in-band evidence -----

    /// Transport errors are evidence only on ring links: the emitter writes
    /// only to its observer, and the observer only sends to its emitter
    /// (`ObserveMe`, sync). An error towards our observer or emitter
    /// declares it (`Declare`), or starts a check (`Suspect`): a probe to
    /// the observer and to the observer's own observer, declared unless one
    /// answers "alive" within `suspect_timeout`; for the emitter, our own
    /// slot is the best witness, so it is declared if its slot stood still
    /// for `suspect_timeout`. Errors towards any other peer (a notice
    /// copy to a distant overlay neighbour) are counted and ignored: that
    /// peer's own observer decides within a timeout, and the broadcast's
    /// redundant links and the digest sync cover the lost copy. Errors
    /// concerning departed ranks are ignored.
    fn on_transport_error(&mut self, now: Time, peer: Rank, _kind: TransportErrorKind) {
        self.stats.transport_errors += 1;
        if self.participation != Participation::Active
            || peer == self.me
            || peer >= self.ring.len()
            || self.is_gone(peer)
            || self.config.inband == InbandMode::Off
        {
            self.stats.transport_errors_ignored += 1;
            return;
        }
        let is_observer = self.beat.observer == Some(peer);
        let is_emitter = self.watch.emitter == Some(peer);
        match self.config.inband {
            InbandMode::Declare if is_observer || is_emitter => {
                self.declare(now, peer, Cause::InBand)
            }
            InbandMode::Suspect if is_observer => self.start_suspect(now, peer),
            InbandMode::Suspect if is_emitter => {
                self.watch.hurry = true;
                self.schedule_check(now);
            }
            _ => self.stats.transport_errors_ignored += 1,
        }
    }

    fn start_suspect(&mut self, now: Time, rank: Rank) {
        if self.suspect.is_some_and(|s| s.rank == rank) {
            return;
        }
        self.stats.suspicions += 1;
        self.nonce = self.nonce.wrapping_add(1);
        self.suspect = Some(Suspect {
            rank,
            nonce: self.nonce,
        });
        let m = self.encoder.probe(self.nonce, rank);
        self.send(rank, Kind::Probe, m.clone());
        let witness = self.ring.successors(rank).find(|&r| !self.is_gone(r));
        if let Some(w) = witness.filter(|&w| w != self.me) {
            self.send(w, Kind::Probe, m);
        }
        self.timers
            .set(Timer::Suspect, now + self.config.suspect_timeout());
    }

    // ----- application requests -----

    fn on_broadcast(&mut self, payload: &[u8]) -> Result<(), HandleError> {
        if self.participation != Participation::Active {
            return Err(HandleError::NotActive);
        }
        if payload.len() > self.config.max_payload {
            return Err(HandleError::PayloadTooLarge {
                len: payload.len(),
                max: self.config.max_payload,
            });
        }
        self.next_payload_seq += 1;
        let seq = self.next_payload_seq;
        self.dedup
            .first_sighting(self.me, seq, self.config.payload_dedup_origins);
        let m: Arc<[u8]> = self.encoder.payload(self.me, seq, 0, payload).into();
        self.fan_out(Kind::Payload, m, self.me, [NO_RANK, NO_RANK]);
        Ok(())
    }

    /// Clean leave: a `Leave` notice straight to both ring neighbours (they
    /// are the ones who must mend) and over the overlay. From now on this
    /// rank declares nobody but keeps heartbeating, forwarding and
    /// answering until the driver stops it.
    fn on_leave(&mut self) -> Result<(), HandleError> {
        if self.participation != Participation::Active {
            return Err(HandleError::NotActive);
        }
        self.participation = Participation::Left;
        self.timers.stop(Timer::Check);
        self.timers.stop(Timer::Suspect);
        self.suspect = None;
        let m: Arc<[u8]> = self.encoder.notice(self.me, 0, &[], &[self.me]).into();
        let neighbours = [
            self.beat.observer.unwrap_or(NO_RANK),
            self.watch.emitter.unwrap_or(NO_RANK),
        ];
        let mut sent = NO_RANK;
        for n in neighbours {
            if n != NO_RANK && n != sent && !self.is_gone(n) {
                sent = n;
                self.stats.sent[Kind::Notice.index()] += 1;
                self.stats.bytes_sent += m.len() as u64;
                self.out.push_back(Output::Send {
                    to: n,
                    bytes: m.clone(),
                });
            }
        }
        self.fan_out(Kind::Notice, m, self.me, neighbours);
        Ok(())
    }
}
