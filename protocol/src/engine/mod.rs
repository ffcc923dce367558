//! The Engine: one rank's protocol state machine, sans IO.
//!
//! Owns: the `Engine` struct, its construction (`EngineOptions`) and
//! accessors, and the dispatch of inputs (`handle`, `handle_timeout`) and
//! of outputs (`poll_output`, `next_deadline`). The Engine is the glue:
//! its fields are the state every concern reads (this rank, the ring, the
//! failed and left sets, the output queues, the timers, the counters,
//! kept first, in the hot cache lines) and one sub-state machine per
//! concern that owns its own state. The largest, [`quorum::Quorum`]
//! (`quorum`) and `local::SameHost` (`local`), take `now` and what they
//! read of the others as arguments and return what to send and raise, in
//! the style of quinn-proto's path-MTU discovery, and so do `Beat`,
//! `Broadcast` and trust's `Sealing`, `judge` and `Limits` (their glue is
//! here, `on_message` for trust), `Payloads` and `Views` (their glue in
//! `membership`); `Watch` and `Health` keep their state in a type of
//! their own that the Engine's methods in `observation` and here drive
//! (`impl Engine` is in five files: this one, `membership`, `observation`,
//! `local/mod.rs`, `quorum/mod.rs`). The modules, one concern each: `io` (the types crossing the
//! boundary), `stats` (the counters), `timer` (the timer table),
//! `heartbeat` (this rank as an emitter: `Beat`), `observation` (watching
//! the emitter: `Watch`, with the suspect and the witness probe), `health`
//! (how far this rank trusts its own timing: `Health`), `membership` (the
//! failed and left sets: declaring, learning, leaving, self-exclusion;
//! the payloads' and the views' glue),
//! `broadcast` (fan-out of notices and payloads: `Broadcast`, `Fanout`),
//! `payloads` (all-or-none, per-origin FIFO delivery of application
//! payloads and their repair: `Payloads`), `trust` (sealing and checking
//! messages, the per-link sequence numbers and the rate limits:
//! `Sealing`, `judge`, `Limits`), `quorum` (the primary partition: silence
//! confirmed by a majority; `quorum/accusation.rs` this rank's own
//! accusations, `quorum/ballot.rs` its ballots in others'), `local`
//! (same-host watching with host groups: `SameHost` in
//! `local/same_host.rs`, the Engine's glue in `local/mod.rs`), `views` (view
//! changes and user agreements: `Views`) and, with the feature `model`
//! only, `model` (the hashing of the model checker's fingerprint, whose
//! text `Engine::model_fingerprint` writes here). Must not: read a
//! clock, block, do IO, or allocate on the heartbeat path.
//!
//! # Driving an Engine
//!
//! Drivers (the progress thread, the simulator, tests) follow one loop, in
//! the style of quinn-proto:
//!
//! 1. Hand in what happened, with the current `now` (never earlier than a
//!    previous one):
//!    - a message, a transport error, a broadcast or leave request:
//!      [`Engine::handle`]`(now, input)`;
//!    - the deadline from [`Engine::next_deadline`] was reached:
//!      [`Engine::handle_timeout`]`(now, &readings)`. The Engine reads
//!      ([`Readings`]) the slot of its slot page it watches (if it has an
//!      emitter) and its same-host emitter's counter (if it has one), takes
//!      them as this round's readings, and then runs its due timers, all at
//!      the same `now`.
//! 2. After either call (and after [`Engine::new`]), drain
//!    [`Engine::poll_output`] until it
//!    returns `None`, carrying out each output (an RDMA write, a message
//!    send, an event for the embedder).
//! 3. Re-read [`Engine::next_deadline`] and sleep until it or until an
//!    input arrives.
//!
//! Every input may produce outputs and may move the deadline, so steps 2
//! and 3 follow every call of step 1. Spurious timeouts are harmless:
//! timers whose deadline has not been reached are ignored.
//!
//! # Messages: sealed as they leave, checked as they arrive
//!
//! Every `Output::Send` is one copy for one receiver, sealed in
//! [`Engine::poll_output`] with the next sequence number of that link and a
//! tag over the receiver's rank and the message (`wire::Sealed`, keyed
//! BLAKE3 with the job's message key from [`JobKeys`]). A received message
//! passes `trust`: the codec checks the job key, then the tag, then the
//! body; then the transport's source (when it gives one) must be the
//! header's sender, and the sequence number must be new in that link's
//! 64-wide window. Anything else is dropped and counted by reason.
//!
//! # Heartbeats, slots, digest, generation
//!
//! The emitter writes one aligned u64 into a slot of its observer's slot
//! page (512 slots, 4 KiB) ([`slot_value`]): the generation its observer
//! named (16 bits), the 32-bit fold of its digest (XOR of a mixed hash per
//! rank of its failed ∪ left set and per origin of its payload high-water
//! marks) and a beat counter that changes every period (16 bits, never
//! 0). The observer reads only the slot of the
//! current *generation* (`generation mod 512`), which it names in
//! `ObserveMe`, and counts a value as a beat only if it carries that
//! generation: a replaced emitter, or a leftover of the mending 512
//! generations ago that used the same slot, cannot keep it happy. A
//! mending emits [`Output::ClearSlot`] for the new slot before the
//! `ObserveMe` that names it; the driver writes 0 there. An observer whose emitter's digest has differed
//! from its own for `sync_after` sends a `SyncRequest` with its sets and
//! its payload marks; the emitter merges the sets and replies with what
//! the observer lacked, ranks and payloads; ranks learned this way are
//! re-broadcast as notices, payloads forwarded as any other. At most one sync request
//! per timeout; one is honoured only from the emitter or the observer, once
//! per peer per timeout, and answered with at most `max_sync_ranks` ranks.
//!
//! With [`HeartbeatMode::Modelled`] (the simulator), the Engine does not
//! schedule a per-period beat: it emits [`Output::HeartbeatStream`] when
//! the target, slot or digest changes, and the driver models the slot's
//! value as a function of the emitter's state and time. An idle Engine then
//! wakes `checks_per_timeout` times per timeout and no more.

mod broadcast;
mod health;
mod heartbeat;
mod io;
mod local;
mod membership;
#[cfg(feature = "model")]
mod model;
mod observation;
mod payloads;
mod quorum;
mod stats;
mod timer;
mod trust;
mod views;

use std::collections::VecDeque;
use std::sync::Arc;

use super::config::{EngineConfig, EngineConfigError, Rank, Time};
use super::hosts::Hosts;
use super::overlay::Overlay;
use super::ranks::{RankSet, fold_digest};
use super::ring::Ring;
use super::wire::{Encoder, JobKeys, Kind, Message, Sealed, TAG_LEN};

use broadcast::{Broadcast, Fanout};
use health::{Health, HealthChange};
use heartbeat::{Beat, BeatOut};
pub use io::{
    AgreeAbort, Cause, Confirmation, EmitterThread, Event, Evidence, Exclusion, FabricSaid,
    FailureDetail, HandleError, HeartbeatMode, Input, LocalBeat, Output, Participation, Readings,
    SlotReading, TransportErrorKind, View, slot_digest, slot_generation, slot_value,
};
use local::SameHost;
use observation::Watch;
use payloads::Payloads;
pub use quorum::AccusationNote;
use quorum::Quorum;
pub use stats::{
    DropStats, HealthStats, HostStats, MessageStats, NoticeStats, ObservationStats, PayloadStats,
    QuorumStats, Stats, SyncStats, ViewStats,
};
use timer::{TIMERS, Timer, TimerTable};
#[cfg(test)]
use trust::PeerLinks;
use trust::{Limits, Sealing, Trust};
use views::Views;

/// "No rank" in fixed-size fields.
const NO_RANK: Rank = Rank::MAX;

/// One rank's protocol state. Per-rank memory is O(failures + log N): the
/// ring and config are shared (`Arc`), the failed set is sparse.
///
/// `repr(C)`, hot fields first: a simulator touches a million of these in
/// random order, and a duplicate notice (the common message at large N)
/// reads only the first 320 bytes, 5 cache lines (test
/// `a_duplicate_notice_reads_only_the_first_five_cache_lines`; rustc's own
/// field order spreads the same fields over 8), plus the failed set's
/// heap once it holds more than 5 ranks, the sender's link state and its
/// ring position. `benches/engine_hot_path.sh` measured a duplicate notice
/// at 189–219 ns on a warm Engine (N = 2^10 … 2^20, 0–1000 other known
/// failures), of which about 105 ns is checking its tag (86–115 ns before
/// messages were authenticated), and a new notice at 1.4–5.8 µs, about
/// 0.11 µs per forwarded copy for its seal. Before authentication, a cold
/// Engine picked at random among 2^16 took 0.3–0.7 µs per duplicate
/// notice (N = 2^20, up to 100 known failures; 1.7–3.8 µs with 1000, whose
/// binary search misses too); on that shared 2-core machine the cold
/// figures varied too much between runs to tell this layout from rustc's.
///
/// With the feature `model` (the model checker's, never the library's) an
/// Engine is `Clone`, so that a checker can branch a job's state.
#[derive(Debug)]
#[cfg_attr(feature = "model", derive(Clone))]
#[repr(C)]
pub struct Engine {
    participation: Participation,
    /// Modelled mode: a `HeartbeatStream` is owed.
    stream_dirty: bool,
    me: Rank,
    /// `me`'s position on the ring.
    my_pos: u32,
    ring: Arc<Ring>,
    /// The keys every tag is checked with and the sequence numbers per
    /// link (`trust`).
    sealing: Sealing,
    failed: RankSet,
    left: RankSet,
    pending_write: Option<(Rank, u16, u64)>,
    /// Outputs in order; a `Send` in here is not sealed yet (sequence
    /// number 0, no tag): `poll_output` seals it.
    out: VecDeque<Output>,
    fanouts: VecDeque<Fanout>,
    /// Read by `next_deadline` after every input: in the hot lines.
    timers: TimerTable,
    stats: Stats,
    encoder: Encoder,
    config: Arc<EngineConfig>,
    /// The overlay and the leaves waiting for the next batch (`broadcast`).
    broadcast: Broadcast,
    /// The fabric emitter's slot, the suspect, the witness probe
    /// (`observation`).
    watch: Watch,
    health: Health,
    /// This rank's heartbeats (`heartbeat`).
    beat: Beat,
    /// Application payloads: per-origin marks, held and kept payloads.
    payloads: Payloads,
    /// Rate limits of exclusion replies and sync requests (`trust`).
    limits: Limits,
    /// The quorum sub-state machine: accusations, ballots, nonces, this
    /// rank's strained wake-ups.
    quorum: Quorum,
    /// Views and agreements (`views`), made at their first use.
    views: Option<Box<Views>>,
    /// Same-host watching (host groups): the groups, the same-host emitter's
    /// counter, leading, the host check, the board readers (`local`).
    same_host: SameHost,
}

/// How an Engine is built beyond its job (configuration, ring, rank,
/// keys): the choices fixed for its lifetime, all given at
/// [`Engine::new`], so none can come too late. The default: the
/// per-process ring, heartbeats written every period.
///
/// ```
/// # use std::sync::Arc;
/// # use ffd_protocol::{Engine, EngineConfig, EngineOptions, HeartbeatMode, JobKeys, Ring, Time};
/// let options = EngineOptions {
///     heartbeats: HeartbeatMode::Modelled,
///     ..EngineOptions::default()
/// };
/// let ring = Arc::new(Ring::by_rank(4));
/// let keys = JobKeys::new(7, [3; 32]);
/// let e = Engine::new(Arc::new(EngineConfig::default()), ring, 0, keys, Time::ZERO, options);
/// assert!(e.is_ok());
/// ```
#[derive(Clone, Debug, Default)]
pub struct EngineOptions {
    /// Host groups (`docs/design.md` §4.12 "Hosts"), describing the same N ranks
    /// as the ring: same-host ranks watch each other (exits through
    /// [`Input::Exited`], hangs through the counters the driver reads for
    /// [`Engine::handle_timeout`] ([`Readings::local_beat`])), and only each host's leader (its
    /// lowest live rank) heartbeats over the fabric, on the ring of hosts.
    /// Notices still travel over the ring, which orders every rank.
    /// `None`: the per-process ring (`FFD_LOCAL=off`).
    pub hosts: Option<Arc<Hosts>>,
    /// How heartbeats leave the Engine: [`HeartbeatMode::Write`] (the
    /// runtime), or [`HeartbeatMode::Modelled`] (simulators: no per-period
    /// beat timer, no `WriteHeartbeat`; a `HeartbeatStream` at the first
    /// poll and on each change).
    pub heartbeats: HeartbeatMode,
}

impl Engine {
    /// The Engine of rank `me` in a job on `ring` (N = `ring.len()`), with
    /// the job's keys (the job key agreed at bootstrap and the message key
    /// derived from the job's secret; a [`JobKeys`] or an `Arc` of one that
    /// several Engines share), started at `now`, built as `options` say.
    /// Heartbeats start at once; nobody is declared before `now +
    /// startup_grace + timeout`. Poll outputs after creating it.
    pub fn new(
        config: Arc<EngineConfig>,
        ring: Arc<Ring>,
        me: Rank,
        keys: impl Into<Arc<JobKeys>>,
        now: Time,
        options: EngineOptions,
    ) -> Result<Engine, EngineConfigError> {
        let EngineOptions { hosts, heartbeats } = options;
        if let Some(hosts) = &hosts {
            if hosts.ranks() != ring.len() {
                return Err(EngineConfigError::HostsMismatch {
                    hosts: hosts.ranks(),
                    ring: ring.len(),
                });
            }
        }
        let mut engine = Engine::build(config, ring, hosts, me, keys.into(), now)?;
        if heartbeats == HeartbeatMode::Modelled {
            engine.model_heartbeats();
        }
        Ok(engine)
    }

    fn build(
        config: Arc<EngineConfig>,
        ring: Arc<Ring>,
        hosts: Option<Arc<Hosts>>,
        me: Rank,
        keys: Arc<JobKeys>,
        now: Time,
    ) -> Result<Engine, EngineConfigError> {
        config.validate()?;
        let n = ring.len();
        if n == 0 {
            return Err(EngineConfigError::EmptyRing);
        }
        if me >= n {
            return Err(EngineConfigError::RankOutOfRange { rank: me, size: n });
        }
        let none = |_| false;
        let (emitter, observer) = match &hosts {
            None => (ring.predecessors(me).next(), ring.successors(me).next()),
            Some(h) if h.is_leader(me, none) => {
                (h.fabric_emitter(me, none), h.fabric_observer(me, none))
            }
            Some(_) => (None, None),
        };
        let grace_end = now + config.startup_grace();
        let same_host = SameHost::new(hosts, me, grace_end);
        let mut timers = TimerTable::NONE;
        if same_host.local_emitter().is_some() {
            timers.set(
                Timer::LocalCheck,
                (now + config.local_check_interval()).min(grace_end),
            );
        }
        if emitter.is_some() {
            // Check from the start: an emitter never heard from has until
            // grace_end + timeout (changed_at below), but one whose beats
            // flow and then stop is judged by the plain timeout.
            timers.set(Timer::Check, (now + config.check_interval()).min(grace_end));
        }
        let mut engine = Engine {
            broadcast: Broadcast {
                overlay: Overlay::new(config.bcast, n),
                held: VecDeque::new(),
                pending_left: Vec::new(),
            },
            encoder: Encoder::new(keys.job_key(), me),
            my_pos: ring.position_of(me),
            sealing: Sealing::new(keys),
            me,
            participation: Participation::Active,
            failed: RankSet::new(),
            left: RankSet::new(),
            watch: Watch::new(emitter, grace_end),
            health: Health::default(),
            beat: Beat::new(observer),
            stream_dirty: false,
            timers,
            pending_write: None,
            out: VecDeque::new(),
            fanouts: VecDeque::new(),
            payloads: Payloads::default(),
            limits: Limits::default(),
            quorum: Quorum::default(),
            views: None,
            stats: Stats::default(),
            config,
            ring,
            same_host,
        };
        engine.write_beat_now(now);
        Ok(engine)
    }

    /// Switches a new Engine to [`HeartbeatMode::Modelled`]
    /// ([`EngineOptions::heartbeats`]): no per-period beat timer and no
    /// `WriteHeartbeat`; `HeartbeatStream` outputs instead (the first one
    /// at the first poll).
    fn model_heartbeats(&mut self) {
        self.beat.mode = HeartbeatMode::Modelled;
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
    /// The slot index (`0..512`) of this rank's slot page that
    /// [`Engine::handle_timeout`] reads; `None` when there is no emitter.
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
    /// Digest of the failed ∪ left set and of the payload high-water
    /// marks (its 32-bit fold travels in the heartbeat slot).
    pub fn digest(&self) -> u64 {
        self.failed.digest() ^ self.left.digest() ^ self.payloads.digest()
    }
    /// The high-water mark of `origin`'s payloads here: every payload of
    /// it up to this sequence number was delivered (or, for this rank's
    /// own, broadcast), none after it.
    pub fn payload_mark(&self, origin: Rank) -> u64 {
        self.payloads.mark(origin)
    }
    /// Payloads of `origin` held here until the gap before them closes.
    pub fn payloads_held(&self, origin: Rank) -> usize {
        self.payloads.held(origin)
    }
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    /// The host groups, if this Engine watches by hosts.
    pub fn hosts(&self) -> Option<&Arc<Hosts>> {
        self.same_host.hosts.as_ref()
    }
    /// This rank's own health multiplier, 1 ..= `health_max`: how many timeouts
    /// this rank currently waits before declaring its emitter, because its
    /// own wake-ups ran late (`docs/design.md` §4.3 "Timeout"). Drivers stretch their
    /// own timing verdicts (a run of refused posts) by the same factor.
    pub fn own_health(&self) -> u32 {
        self.health.multiplier()
    }

    /// The diagnostics of the latest accusation this rank confirmed, once
    /// (for the driver's log; `None` if none since the last call).
    pub fn take_accusation_note(&mut self) -> Option<AccusationNote> {
        self.quorum.take_note()
    }

    /// Reads what a timer step reads beyond the head lines (the watch, own
    /// health, the heartbeat and payload digest, the quorum's lateness, the
    /// same-host groups, the counters it bumps) and changes nothing: the
    /// simulator reads it for the event after the current one, so that
    /// these cache misses (a dozen lines across a 1.8 KiB Engine picked at
    /// random among a million) overlap with the current event's instead of
    /// following it (`sim::Simulator::warm`).
    #[cfg(feature = "sim")]
    pub(crate) fn timer_lines(&self) -> impl Sized + '_ {
        (
            (
                self.watch.emitter,
                self.watch.changed_at,
                self.watch.last_value,
                self.watch.host_watch.is_some(),
                self.watch.suspect.is_some(),
                self.watch.mismatch_since,
            ),
            (self.health.multiplier(), self.beat.observer),
            self.payloads.digest(),
            self.quorum.wakeup_lines(),
            self.same_host.hosts.is_some(),
            self.stats.health.max_lateness_ns,
            self.stats.observation.slot_checks,
        )
    }

    /// When [`Engine::handle_timeout`] must next be called, `None` if never
    /// (e.g. excluded, or alone). Re-read after every `handle`,
    /// `handle_timeout` and output drain.
    pub fn next_deadline(&self) -> Option<Time> {
        if self.participation == Participation::Excluded {
            return None;
        }
        let t = self.timers.next();
        (t != Time::NEVER).then_some(t)
    }

    /// The next thing to do, or `None`. Drain after every `handle` and
    /// `handle_timeout` (and after `new`). The heartbeat write comes first
    /// and allocates nothing (`tests/engine_alloc.rs`).
    ///
    /// Every [`Output::Send`] is sealed here, as it leaves, for its
    /// receiver: the next sequence number of that link and the tag, per
    /// copy. Copies of a broadcast step leave lazily, so a copy never falls
    /// behind later messages to the same peer.
    pub fn poll_output(&mut self) -> Option<Output> {
        if let Some((to, slot, value)) = self.pending_write.take() {
            return Some(Output::WriteHeartbeat { to, slot, value });
        }
        if self.stream_dirty {
            self.stream_dirty = false;
            return Some(Output::HeartbeatStream {
                to: self.beat.observer,
                slot: self.beat.slot,
                generation: self.beat.generation,
                digest: fold_digest(self.digest()),
            });
        }
        if let Some(o) = self.out.pop_front() {
            return Some(match o {
                Output::Send { to, message } => Output::Send {
                    to,
                    message: self.sealing.seal(&self.ring, self.my_pos, to, message),
                },
                o => o,
            });
        }
        self.poll_fanout()
    }

    /// Queues a broadcast step of the unsealed `bytes` rooted at `root`,
    /// skipping `skip`, and the host's board readers if `board` (the news
    /// was posted on the board).
    fn fan_out(&mut self, kind: Kind, bytes: Arc<[u8]>, root: Rank, skip: &[Rank], board: bool) {
        if let Some(f) = self.broadcast_step(kind, bytes, root, skip, board) {
            push_lean(&mut self.fanouts, f);
        }
    }

    /// The broadcast step [`Self::fan_out`] queues, for a caller that
    /// queues it elsewhere; `None` if it has no target.
    fn broadcast_step(
        &self,
        kind: Kind,
        bytes: Arc<[u8]>,
        root: Rank,
        skip: &[Rank],
        board: bool,
    ) -> Option<Fanout> {
        let me = self.me;
        self.broadcast.step(kind, bytes, &self.ring, me, root, |r| {
            skip.contains(&r) || (board && self.same_host.reads_board(me, r))
        })
    }

    /// The next copy of the oldest broadcast step in progress, skipping
    /// targets known failed or left meanwhile, sealed with the next
    /// sequence number; `None` when all are sent.
    fn poll_fanout(&mut self) -> Option<Output> {
        while let Some(f) = self.fanouts.front_mut() {
            let (failed, left) = (&self.failed, &self.left);
            if let Some((to, kind, bytes)) = f.next_copy(|r| failed.contains(r) || left.contains(r))
            {
                if f.is_exclusion() {
                    self.stats.notices.exclusions_sent += 1;
                }
                self.stats.messages.sent[kind.index()] += 1;
                self.stats.messages.bytes_sent += (bytes.len() + TAG_LEN) as u64;
                let message = self.sealing.seal_copy(&self.ring, self.my_pos, to, bytes);
                return Some(Output::Send { to, message });
            }
            self.fanouts.pop_front();
        }
        None
    }

    /// Decodes a message (`Sealing::open`), applies the trust rules
    /// every kind shares (`trust::judge`), and hands it to the handler of
    /// its kind.
    fn on_message(
        &mut self,
        now: Time,
        from: Option<Rank>,
        bytes: &[u8],
    ) -> Result<(), HandleError> {
        let opened = self
            .sealing
            .open(bytes, from, self.me, &self.ring, self.my_pos);
        let (header, msg) = match opened {
            Ok(d) => d,
            Err(reason) => {
                self.stats.drops.rejected[reason.index()] += 1;
                return Err(HandleError::Rejected(reason));
            }
        };
        let sender = header.sender;
        self.stats.messages.received[header.kind.index()] += 1;
        if self.participation == Participation::Excluded {
            return Ok(());
        }
        match trust::judge(&msg, sender, self.me, &self.failed) {
            Trust::FromFailed => {
                self.stats.drops.dropped_from_failed += 1;
                self.reply_exclusion(now, sender);
                return Ok(());
            }
            Trust::UntrustedOrigin => {
                self.stats.drops.dropped_untrusted_origin += 1;
                return Ok(());
            }
            Trust::NamesMe => {
                self.self_exclude(sender, Exclusion::Named);
                return Ok(());
            }
            Trust::Believed => {}
        }
        match msg {
            Message::Notice(notice) => self.on_notice(now, sender, notice, bytes),
            Message::ObserveMe { generation, slot } => {
                self.on_observe_me(now, sender, generation, slot)
            }
            Message::SyncRequest {
                digest,
                failed,
                left,
                marks,
            } => self.on_sync_request(now, sender, digest, failed, left, marks),
            Message::SyncReply { failed, left } => self.on_sync_reply(now, sender, failed, left),
            Message::Probe { nonce, about } => self.on_probe(now, sender, nonce, about),
            Message::ProbeAck {
                nonce,
                about,
                verdict,
            } => self.on_probe_ack(now, sender, nonce, about, verdict),
            Message::Payload { origin, seq, .. } => self.on_payload(sender, origin, seq, bytes),
            m @ (Message::Suspect { .. }
            | Message::Vote { .. }
            | Message::Refute { .. }
            | Message::Outcome { .. }) => self.on_quorum_message(now, sender, m, bytes),
            Message::AgreeUp(up) => self.on_agree_up(now, sender, up),
            Message::AgreeDown(down) => self.on_agree_down(now, sender, down),
        }
        Ok(())
    }

    /// Hands an input to the Engine at time `now` (never earlier than a
    /// previous `now`). Then drain [`Engine::poll_output`] and re-read
    /// [`Engine::next_deadline`].
    pub fn handle(&mut self, now: Time, input: Input<'_>) -> Result<(), HandleError> {
        match input {
            Input::Message { from, bytes } => self.on_message(now, from, bytes),
            Input::TransportError {
                peer,
                kind,
                evidence,
                said,
            } => {
                self.on_transport_error(now, peer, kind, evidence, said);
                Ok(())
            }
            Input::Exited { rank, seen_by } => {
                self.on_exited(now, rank, seen_by);
                Ok(())
            }
            Input::BoardNotice { failed, detector } => {
                self.on_board_notice(now, failed, detector);
                Ok(())
            }
            Input::BoardReaders { ranks } => {
                self.same_host
                    .set_board_readers(self.me, self.ring.len(), ranks);
                Ok(())
            }
            Input::Sent { to } => {
                self.on_sent(now, to);
                Ok(())
            }
            Input::Broadcast(bytes) => self.on_broadcast(bytes),
            Input::Leave => self.on_leave(),
            Input::Agree { flags } => self.on_agree(now, flags),
        }
    }

    /// The deadline from [`Engine::next_deadline`] was reached (or the
    /// driver woke anyway): one step at `now`. If this rank has an emitter,
    /// the Engine first reads [`Readings::slot`] once, for the slot index
    /// (`0..512`) of this rank's slot page that it watches
    /// ([`Engine::watched_slot`]), and takes the value as this round's
    /// reading; if it has a same-host emitter (host groups,
    /// [`Engine::local_emitter`]), it reads [`Readings::local_beat`] once
    /// for it, that rank's counter in shared memory. Then it runs every
    /// timer that is due (heartbeat write, slot check, suspect, leave
    /// batch, quorum, local and host checks). Then drain
    /// [`Engine::poll_output`] and re-read [`Engine::next_deadline`].
    ///
    /// In [`HeartbeatMode::Write`] an idle rank's step allocates nothing,
    /// and neither does draining its `WriteHeartbeat`
    /// (`tests/engine_alloc.rs`); `benches/engine_hot_path.sh` measured the
    /// two at about 15 ns per step, 18 ns per heartbeat period, at every N
    /// (2^10 … 2^20) and known-failure count (0 … 1000).
    pub fn handle_timeout(&mut self, now: Time, readings: &(impl Readings + ?Sized)) {
        if let Some(slot) = self.watched_slot() {
            let value = readings.slot(slot);
            self.on_slot(now, slot, value);
        }
        if let Some(e) = self.same_host.local_emitter() {
            let beat = readings.local_beat(e);
            self.on_local_beat(now, beat);
        }
        self.on_tick(now);
    }

    /// Runs the timers due at `now`, in table order, after the self-lag
    /// guard has looked at how late the earliest of them is.
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
        self.stats.health.max_lateness_ns = self
            .stats
            .health
            .max_lateness_ns
            .max(lateness.as_nanos() as u64);
        self.note_wakeup(now, lateness);
        self.quorum
            .note_wakeup(now, lateness, self.config.strain_lateness());
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
            if let Some(s) = self.watch.suspect {
                if lagging {
                    self.timers.set(Timer::Suspect, now + self.suspect_limit());
                } else {
                    self.watch.suspect = None;
                    self.on_silence(now, s.rank, Cause::InBand, s.said);
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
        if self.timers.get(Timer::Quorum) <= now {
            self.timers.stop(Timer::Quorum);
            self.quorum_tick(now, lagging);
        }
        if self.timers.get(Timer::ViewBatch) <= now {
            self.timers.stop(Timer::ViewBatch);
            self.on_view_batch(now);
        }
        if self.timers.get(Timer::LocalCheck) <= now {
            self.timers.stop(Timer::LocalCheck);
            self.check_local(now, lagging);
        }
        if self.timers.get(Timer::HostCheck) <= now {
            self.timers.stop(Timer::HostCheck);
            self.resolve_host_check(now, lagging);
        }
        if self.timers.get(Timer::HeldCopies) <= now {
            self.timers.stop(Timer::HeldCopies);
            self.release_held_copies(now);
        }
    }

    // ----- helpers -----

    /// Own health: a late wake-up raises the multiplier, on-time running
    /// lowers it. (The check timer needs no rescheduling: a check that
    /// finds the stretched timeout not yet up schedules the next one, and
    /// one after a fall comes within a check interval.)
    fn note_wakeup(&mut self, now: Time, lateness: std::time::Duration) {
        match self.health.on_wakeup(now, lateness, &self.config) {
            HealthChange::Rose => {
                self.stats.health.health_rises += 1;
                self.stats.health.health_peak = self
                    .stats
                    .health
                    .health_peak
                    .max(u64::from(self.health.multiplier()));
            }
            HealthChange::Fell | HealthChange::Unchanged => {}
        }
    }

    /// Beats now: in write mode, parks the next `WriteHeartbeat` (polled
    /// first, no allocation) and schedules the next beat one period away;
    /// in modelled mode, owes a `HeartbeatStream` (`heartbeat`).
    fn write_beat_now(&mut self, now: Time) {
        let digest = self.my_digest32();
        match self.beat.beat(digest) {
            BeatOut::Write(to, slot, value) => {
                self.pending_write = Some((to, slot, value));
                self.stats.observation.heartbeats_written += 1;
                self.timers.set(Timer::Beat, now + self.config.period);
            }
            BeatOut::Stream => self.stream_dirty = true,
            BeatOut::Nothing => {}
        }
    }

    /// A rank asks us to heartbeat into its slot (`heartbeat`'s rule).
    fn on_observe_me(&mut self, now: Time, sender: Rank, generation: u32, slot: u16) {
        if self.left.contains(sender) {
            self.stats.observation.observe_me_stale += 1;
            return;
        }
        let current = self.beat.observer;
        let observer_gone = current.is_some_and(|o| self.is_gone(o));
        let farther = current.is_some_and(|o| {
            self.same_host
                .farther_observer(self.me, &self.ring, sender, o)
        });
        if !self
            .beat
            .observe_me(sender, generation, slot, observer_gone, farther)
        {
            self.stats.observation.observe_me_stale += 1;
            return;
        }
        self.stats.observation.observe_me_accepted += 1;
        self.write_beat_now(now);
    }

    fn my_digest32(&self) -> u32 {
        fold_digest(self.digest())
    }

    fn push_event(&mut self, e: Event) {
        self.queue_output(Output::Event(e));
    }

    /// Queues `o` behind the outputs not polled yet.
    fn queue_output(&mut self, o: Output) {
        push_lean(&mut self.out, o);
    }

    /// Queues `unsealed` for `to` (sealed by `poll_output`).
    fn send(&mut self, to: Rank, kind: Kind, unsealed: Vec<u8>) {
        self.send_shared(to, kind, unsealed.into());
    }

    /// Queues a copy of `unsealed`, shared with other copies, for `to`.
    fn send_shared(&mut self, to: Rank, kind: Kind, unsealed: Arc<[u8]>) {
        self.count_sent(kind, unsealed.len());
        self.queue_output(Output::Send {
            to,
            message: Sealed::unsealed(unsealed),
        });
    }

    /// Counts a message of `kind` whose unsealed bytes are `len` long.
    fn count_sent(&mut self, kind: Kind, len: usize) {
        self.stats.messages.sent[kind.index()] += 1;
        self.stats.messages.bytes_sent += (len + TAG_LEN) as u64;
    }
}

#[cfg(feature = "model")]
impl Engine {
    /// For the model checker only (feature `model`): the children this
    /// rank counts, as (accuser, round nonce, child): the votes recorded in
    /// the current round of each of its accusations and in each of its
    /// open ballots. In a tree of flood parents a rank is one rank's child
    /// per round (`docs/model-checking.md`, property `ballots`).
    pub fn model_flood_children(&self) -> Vec<(Rank, u32, Rank)> {
        self.quorum.model_flood_children(self.me)
    }

    /// A fingerprint of everything this Engine's future behaviour depends
    /// on, seen from its driver's time `now`: two Engines of the same job
    /// with the same fingerprint at their own `now` answer the same inputs
    /// at the same offsets from it alike.
    ///
    /// Left out: the counters ([`Stats`](Stats), which no decision
    /// reads), what every Engine of the job shares (ring, config, keys,
    /// overlay, hosts), and without host groups the same-host watch,
    /// which nothing reads then. Times are taken relative to `now`, and one more
    /// than `horizon` in the past counts as ancient (all alike): the
    /// checker passes a horizon longer than any span the Engine compares a
    /// past time with (a few timeouts), and starts its clocks later than
    /// that, so `Time::ZERO` (the start values of some fields) is ancient
    /// from the first step. So an Engine that only ticks over, its emitter
    /// beating, comes back to a state it had.
    pub fn model_fingerprint(&self, now: Time, horizon: std::time::Duration) -> u64 {
        use std::fmt::Write;
        let Engine {
            participation,
            stream_dirty,
            me,
            my_pos: _,
            ring: _,
            sealing,
            failed,
            left,
            pending_write,
            out,
            fanouts,
            stats: _,
            timers,
            encoder: _,
            config: _,
            broadcast,
            watch,
            health,
            beat,
            payloads,
            limits,
            quorum,
            views,
            same_host,
        } = self;
        model::fingerprint(now, horizon, |text| {
            // Debug output is deterministic: the Engine keeps ordered
            // containers only.
            let _ = write!(
                text,
                "{participation:?}|{stream_dirty}|{me}|{:?}|{failed:?}|{left:?}|\
                 {pending_write:?}|{out:?}|{fanouts:?}|{timers:?}|{watch:?}|{health:?}|\
                 {beat:?}|{payloads:?}|{:?}|{:?}|{limits:?}|{:?}|{views:?}",
                sealing.links,
                broadcast.held,
                broadcast.pending_left,
                quorum.model_state()
            );
            // Same-host watching: without host groups nothing reads these
            // (its emitter stays `None`), and its baseline, set at start,
            // would only tell the clock.
            if same_host.hosts.is_some() {
                let _ = write!(text, "|{}", same_host.model_state());
            }
        })
    }
}

/// `queue.push_back(item)`, the queue's first buffer sized for one item
/// rather than four: most Engines only ever hold one output or broadcast
/// step at a time (the first failure's event, its forwarding), and a
/// simulator keeps a million of them, each buffer for good (at 2^20 ranks
/// the rooms for four took 290 MiB more at the flood's peak). A second
/// item grows it as usual.
fn push_lean<T>(queue: &mut VecDeque<T>, item: T) {
    if queue.capacity() == 0 {
        queue.reserve_exact(1);
    }
    queue.push_back(item);
}

#[cfg(test)]
mod layout_tests;
