//! The progress thread: drives one Engine with real time and the fabric.
//!
//! Owns: the detector's endpoint, slot region and Engine once started; the
//! per-peer bookkeeping of refused posts; delivery of events. Must not:
//! block on the host (callbacks are the host's promise), wait on anything
//! but the completion queue and the wake socket, or allocate per heartbeat.
//!
//! Each turn of the loop: take host commands; read the completion queue
//! (before any judgement, so heartbeats that landed are seen and errors are
//! evidence); if the Engine's deadline has come, read the slot it watches
//! and tick it; carry out its outputs; retry refused sends; then sleep on
//! the completion queue's wait object or the wake socket until the next
//! deadline (`FFD_PROGRESS=sleep`), or go round again (`spin`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::time::{Duration, Instant};

use crate::fabric::{
    AddressVector, Completion, CqError, Endpoint, FabricError, FailedOp, FiAddr, RemoteRegion,
};
use crate::protocol::{
    self, Engine, EngineConfig, Input, Output, Participation, Rank, Ring, Time, TransportErrorKind,
};

use super::log::Logger;
use super::stats::RuntimeCounters;
use super::{Callback, DetectorEvent, PublishedState, SlotRegion};

/// The largest application payload the runtime carries (`broadcast`).
/// A revoke or reinit order is a few bytes; this keeps buffers small.
pub(super) const MAX_APP_PAYLOAD: usize = 8 * 1024;

/// Send and receive buffers for a job of `ranks`: (count, bytes each).
/// A message is bounded by its rank lists, each at most a bitmap of
/// `ranks` bits (the encoder picks the smallest of deltas, ranges and
/// bitmap; a notice or sync carries a failed and a left list), or by a
/// payload of [`MAX_APP_PAYLOAD`]; every message of the protocol fits.
pub(super) fn message_buffers(ranks: u32) -> (usize, usize) {
    let lists = 2 * (ranks as usize).div_ceil(8) + 1024;
    let size = lists
        .max(MAX_APP_PAYLOAD + 1024)
        .max(16 * 1024)
        .next_multiple_of(4096);
    // Fewer buffers when each is large (jobs beyond ~250k ranks).
    let count = if size <= 64 * 1024 { 32 } else { 8 };
    (count, size)
}

/// The linking phase's warm-up message. It cannot be mistaken for a
/// protocol message (those start with the magic `FFDP` and a 28-byte
/// header) and never reaches the Engine.
const WARM_UP: &[u8] = b"FFDW";

/// How often the counters are published for [`super::Detector::stats`].
const PUBLISH_EVERY: Duration = Duration::from_millis(50);

/// While sends wait for a refused peer, retry this often.
const RETRY_EVERY: Duration = Duration::from_millis(1);

/// What the host asks of the progress thread.
#[derive(Debug)]
pub(super) enum Command {
    Broadcast(Vec<u8>),
    /// Announce a clean leave, linger, then stop.
    Leave,
    /// Stop now (after a leave that did not finish in time).
    Stop,
}

/// Everything [`Progress`] is made of, handed over by `Detector::start`.
pub(super) struct Parts {
    pub shared: Arc<PublishedState>,
    /// What the Engine is made of once every rank's link is up.
    pub seed: EngineSeed,
    pub endpoint: Endpoint,
    /// Kept open while the endpoint uses it.
    pub _av: AddressVector,
    pub slots: SlotRegion,
    /// `peers[r]`: rank r's slot region.
    pub peers: Vec<RemoteRegion>,
    pub started: Instant,
    pub commands: Receiver<Command>,
    pub wake: UnixStream,
    pub callback: Option<Callback>,
    /// The linking phase before the Engine starts.
    pub link: Link,
    pub spin: bool,
    pub eagain_limit: Duration,
    /// A refusal run on a link that never carried anything is connection
    /// set-up: it becomes evidence only after this long.
    pub connect_grace: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub logger: Logger,
}

pub(super) struct Progress {
    endpoint: Endpoint,
    slots: SlotRegion,
    /// Declared after the endpoint so it closes after it.
    _av: AddressVector,
    /// Readable when the host sent a command.
    wake: UnixStream,
    core: Core,
}

/// The progress thread's state apart from the endpoint, so completions can
/// be handled while the endpoint is borrowed for reading them.
struct Core {
    shared: Arc<PublishedState>,
    engine: Engine,
    peers: Vec<RemoteRegion>,
    started: Instant,
    commands: Receiver<Command>,
    callback: Option<Callback>,
    spin: bool,
    eagain_limit: Duration,
    connect_grace: Duration,
    linger: Duration,
    logger: Logger,
    counters: RuntimeCounters,
    /// Start of the current run of refused posts, per peer.
    refused_since: BTreeMap<Rank, Instant>,
    /// Peers an operation of ours completed to: their link is established.
    connected: BTreeSet<Rank>,
    /// Sends refused for now, in order.
    pending: VecDeque<(Rank, Arc<[u8]>)>,
    /// Where the last heartbeat went (attributes context-less write errors).
    last_write_target: Option<Rank>,
    /// Set by a leave: stop after this instant.
    leaving_until: Option<Instant>,
    stop: bool,
    last_publish: Instant,
}

/// The Engine's ingredients; it is built when the linking phase ends, so
/// its clock (start-up grace, first checks) starts when every rank is linked.
pub(super) struct EngineSeed {
    pub config: Arc<EngineConfig>,
    pub ring: Arc<Ring>,
    pub me: Rank,
    pub job_key: u64,
}

/// The linking phase: before any Engine judges anyone, each rank's
/// heartbeat link to its observer must carry a write. On `tcp;ofi_rxm`
/// connection set-up costs CPU on both sides and was seen to take over a
/// second with 32 ranks on 2 cores; judged meanwhile, live ranks would be
/// declared. The thread keeps progressing its completion queue (peers'
/// connections to it need that) until `Detector::start` has seen every
/// rank linked (a bootstrap barrier) and says go.
pub(super) struct Link {
    /// The observer and its slot region (none in a job of one).
    pub target: Option<(Rank, RemoteRegion)>,
    /// The broadcast neighbours: their links are set up now too, so the
    /// first notice wave does not pay a connection set-up per hop.
    pub warm: Vec<Rank>,
    /// Signalled once the write to the observer completed.
    pub linked: SyncSender<()>,
    /// Go (a unit) or give up (disconnected).
    pub go: Receiver<()>,
    /// How far linking has come, for `Detector::start` to report.
    pub progress: Arc<LinkProgress>,
}

/// How far the linking phase has come (written by the progress thread,
/// read by `Detector::start` while it waits).
#[derive(Debug, Default)]
pub(super) struct LinkProgress {
    /// The write to the observer completed (or there is no observer).
    pub observer: AtomicBool,
    /// Broadcast links whose warm-up send completed.
    pub warm: AtomicU32,
}

/// The progress thread's body: the linking phase, then the Engine's loop.
pub(super) fn run(parts: Parts) {
    let mut parts = parts;
    let Some(held) = link_phase(&mut parts) else {
        parts.shared.running.store(false, Ordering::Release);
        return;
    };
    let now =
        Time::from_nanos(u64::try_from(parts.started.elapsed().as_nanos()).unwrap_or(u64::MAX));
    let seed = &parts.seed;
    let engine = match Engine::new(
        Arc::clone(&seed.config),
        Arc::clone(&seed.ring),
        seed.me,
        seed.job_key,
        now,
    ) {
        Ok(e) => e,
        Err(e) => {
            parts
                .logger
                .error(format_args!("the protocol engine refused to start: {e}"));
            parts.shared.running.store(false, Ordering::Release);
            return;
        }
    };
    let mut progress = Progress::new(parts, engine);
    // Messages that arrived while linking (a faster rank's first notice).
    for bytes in held {
        let now = progress.core.now();
        let _ = progress.core.engine.handle(
            now,
            Input::Message {
                from: None,
                bytes: &bytes,
            },
        );
    }
    progress.run();
}

/// Returns the messages received meanwhile, or `None` when told to stop.
fn link_phase(parts: &mut Parts) -> Option<Vec<Vec<u8>>> {
    let mut held: Vec<Vec<u8>> = Vec::new();
    let mut observer_done = parts.link.target.is_none();
    let mut posted = false;
    // Broadcast neighbours still to warm up, and whether a send is posted.
    let mut warm: BTreeMap<Rank, bool> = parts.link.warm.iter().map(|&r| (r, false)).collect();
    let mut linked = false;
    // Bounded by Detector::start, which says go or drops the channel
    // within its own bounds.
    loop {
        match parts.link.go.try_recv() {
            Ok(()) => return Some(held),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => {}
        }
        if matches!(
            parts.commands.try_recv(),
            Ok(Command::Stop | Command::Leave)
        ) {
            return None;
        }
        for (&to, in_flight) in warm.iter_mut().filter(|(_, f)| !**f) {
            match parts
                .endpoint
                .try_send(FiAddr(u64::from(to)), WARM_UP, u64::from(to))
            {
                Ok(()) => *in_flight = true,
                Err(e) if e.is_refusal() => {}
                Err(e) => parts
                    .logger
                    .debug(format_args!("warming the link to rank {to}: {e}")),
            }
        }
        if let (false, false, Some((to, region))) =
            (observer_done, posted, parts.link.target.as_ref())
        {
            match parts
                .endpoint
                .try_write_u64(FiAddr(u64::from(*to)), region, 0, 0, u64::from(*to))
            {
                Ok(()) => posted = true,
                Err(e) if e.is_refusal() => {}
                Err(e) => parts
                    .logger
                    .debug(format_args!("linking to rank {to}: {e}")),
            }
        }
        let target = parts.link.target.as_ref().map(|(t, _)| u64::from(*t));
        let mut done = false;
        let mut write_failed = false;
        let waited = parts.endpoint.wait_or(
            Duration::from_millis(5),
            parts.wake.as_fd(),
            &mut |c| match c {
                Completion::Written { token } if Some(token) == target => done = true,
                Completion::Sent { token, .. } => {
                    if let Ok(peer) = Rank::try_from(token) {
                        warm.remove(&peer);
                    }
                }
                Completion::Failed(e) => match e.op {
                    // Try again next round (the peer may still be starting).
                    FailedOp::Send { token, .. } => {
                        if let Some(f) = Rank::try_from(token).ok().and_then(|p| warm.get_mut(&p)) {
                            *f = false;
                        }
                    }
                    _ => write_failed = true,
                },
                Completion::Received { bytes, .. } if bytes != WARM_UP => held.push(bytes.to_vec()),
                _ => {}
            },
        );
        if let Err(e) = waited {
            parts.logger.error(format_args!("linking: {e}"));
            return None;
        }
        let mut sink = [0u8; 64];
        while matches!((&parts.wake).read(&mut sink), Ok(n) if n > 0) {}
        observer_done |= done;
        if write_failed {
            posted = false;
        }
        let progress = &parts.link.progress;
        progress.observer.store(observer_done, Ordering::Relaxed);
        let warmed = parts.link.warm.len().saturating_sub(warm.len());
        progress
            .warm
            .store(u32::try_from(warmed).unwrap_or(u32::MAX), Ordering::Relaxed);
        if observer_done && warm.is_empty() && !linked {
            linked = true;
            let _ = parts.link.linked.try_send(());
        }
    }
}

impl Progress {
    fn new(parts: Parts, engine: Engine) -> Self {
        Progress {
            endpoint: parts.endpoint,
            slots: parts.slots,
            _av: parts._av,
            wake: parts.wake,
            core: Core {
                shared: parts.shared,
                engine,
                peers: parts.peers,
                started: parts.started,
                commands: parts.commands,
                callback: parts.callback,
                spin: parts.spin,
                eagain_limit: parts.eagain_limit,
                connect_grace: parts.connect_grace,
                linger: super::linger(parts.period, parts.timeout),
                logger: parts.logger,
                counters: RuntimeCounters::default(),
                refused_since: BTreeMap::new(),
                connected: BTreeSet::new(),
                pending: VecDeque::new(),
                last_write_target: None,
                leaving_until: None,
                stop: false,
                last_publish: parts.started,
            },
        }
    }

    /// Runs until the rank leaves, is excluded, or is told to stop.
    fn run(mut self) {
        let Progress {
            endpoint,
            slots,
            wake,
            core,
            ..
        } = &mut self;
        // Engine::new produced the first heartbeat.
        core.carry_out(endpoint);
        while !core.finished() {
            // Empty the wake socket first: a command sent after this point
            // writes a fresh byte, so the next wait returns at once.
            let mut sink = [0u8; 64];
            while matches!((&*wake).read(&mut sink), Ok(n) if n > 0) {}
            core.take_commands();
            if let Err(e) = endpoint.poll(usize::MAX, &mut |c| core.on_completion(c)) {
                core.logger
                    .error(format_args!("reading the completion queue: {e}"));
                break;
            }
            core.on_deadline(slots);
            core.carry_out(endpoint);
            core.retry_pending(endpoint);
            core.publish(false);
            if core.finished() {
                break;
            }
            if core.spin {
                std::hint::spin_loop();
                continue;
            }
            let timeout = core.sleep_for();
            if let Err(e) = endpoint.wait_or(timeout, wake.as_fd(), &mut |c| core.on_completion(c))
            {
                core.logger
                    .error(format_args!("waiting on the completion queue: {e}"));
                break;
            }
        }
        // What the last completions produced (the SelfExcluded event when
        // the exclusion notice arrived during the wait) still goes out.
        core.carry_out(endpoint);
        core.publish(true);
        core.shared.running.store(false, Ordering::Release);
    }
}

impl Core {
    fn now(&self) -> Time {
        Time::from_nanos(u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn finished(&self) -> bool {
        if self.stop || self.engine.participation() == Participation::Excluded {
            return true;
        }
        match self.leaving_until {
            Some(until) => Instant::now() >= until && self.pending.is_empty(),
            None => false,
        }
    }

    fn take_commands(&mut self) {
        loop {
            match self.commands.try_recv() {
                Ok(Command::Broadcast(bytes)) => {
                    let now = self.now();
                    if let Err(e) = self.engine.handle(now, Input::Broadcast(&bytes)) {
                        self.logger.warn(format_args!("broadcast refused: {e}"));
                    }
                }
                Ok(Command::Leave) => self.begin_leave(),
                Ok(Command::Stop) => self.stop = true,
                Err(TryRecvError::Empty) => break,
                // The Detector is gone without a word: leave cleanly.
                Err(TryRecvError::Disconnected) => {
                    self.begin_leave();
                    break;
                }
            }
        }
    }

    fn begin_leave(&mut self) {
        if self.leaving_until.is_none() {
            let now = self.now();
            let _ = self.engine.handle(now, Input::Leave);
            self.leaving_until = Some(Instant::now() + self.linger);
        }
    }

    /// The Engine's deadline has come: read the watched slot, then tick.
    fn on_deadline(&mut self, slots: &SlotRegion) {
        let Some(deadline) = self.engine.next_deadline() else {
            return;
        };
        let now = self.now();
        if now < deadline {
            return;
        }
        self.counters.lateness.record(now - deadline);
        self.engine
            .handle_timeout(now, |slot| slots.memory().read(usize::from(slot)));
    }

    fn on_completion(&mut self, completion: Completion<'_>) {
        let now = self.now();
        match completion {
            // A late neighbour's link warm-up: not for the Engine.
            Completion::Received { bytes, .. } if bytes == WARM_UP => {}
            Completion::Received { bytes, source } => {
                self.counters.messages_received += 1;
                let from = source.and_then(|a| Rank::try_from(a.0).ok());
                if let Err(e) = self.engine.handle(now, Input::Message { from, bytes }) {
                    self.counters.messages_rejected += 1;
                    self.logger.debug(format_args!("message dropped: {e}"));
                }
            }
            Completion::Sent { token, .. } => {
                self.counters.messages_sent += 1;
                self.link_works(token);
                // The Engine times a just-mended emitter from its link-up.
                if let Ok(to) = Rank::try_from(token) {
                    let _ = self.engine.handle(now, Input::Sent { to });
                }
            }
            Completion::Written { token } => {
                self.counters.heartbeats_completed += 1;
                self.link_works(token);
            }
            Completion::Failed(error) => self.on_error_completion(now, error),
        }
    }

    /// An operation to the peer named by `token` completed: its link is up.
    fn link_works(&mut self, token: u64) {
        if let Ok(peer) = Rank::try_from(token) {
            self.refused_since.remove(&peer);
            self.connected.insert(peer);
        }
    }

    fn on_error_completion(&mut self, now: Time, error: CqError) {
        let (peer, kind) = match error.op {
            FailedOp::Write { token } => (
                Rank::try_from(token).ok(),
                TransportErrorKind::HeartbeatWrite,
            ),
            FailedOp::Send { token, .. } => (Rank::try_from(token).ok(), TransportErrorKind::Send),
            FailedOp::Recv => {
                self.logger.warn(format_args!("receive failed: {error}"));
                return;
            }
            // No context (shm): a write can only have been a heartbeat, and
            // heartbeats go to one peer at a time.
            FailedOp::Unknown if error.is_rma_write() => {
                (self.last_write_target, TransportErrorKind::HeartbeatWrite)
            }
            FailedOp::Unknown => (None, TransportErrorKind::Send),
        };
        match peer {
            Some(peer) => {
                self.logger.info(format_args!(
                    "transport error on the link to rank {peer}: {error}"
                ));
                self.transport_error(now, peer, kind);
            }
            None => {
                self.counters.unattributed_errors += 1;
                self.logger
                    .debug(format_args!("error completion naming no peer: {error}"));
            }
        }
    }

    fn transport_error(&mut self, now: Time, peer: Rank, kind: TransportErrorKind) {
        self.counters.transport_errors += 1;
        self.refused_since.remove(&peer);
        let _ = self
            .engine
            .handle(now, Input::TransportError { peer, kind });
    }

    /// A post to `peer` was refused (`-FI_EAGAIN`/`-FI_ENOENT`): a run of
    /// refusals longer than the bound is a verdict against the peer.
    fn refused(&mut self, peer: Rank) {
        self.counters.posts_refused += 1;
        let now = Instant::now();
        let since = *self.refused_since.entry(peer).or_insert(now);
        let bound = self.refusal_bound(peer);
        if now.duration_since(since) > bound {
            self.counters.unreachable_verdicts += 1;
            self.logger.info(format_args!(
                "rank {peer} unreachable: posts refused for {:?}",
                now.duration_since(since)
            ));
            self.pending.retain(|(to, _)| *to != peer);
            let t = self.now();
            self.transport_error(t, peer, TransportErrorKind::Unreachable);
        }
    }

    /// How long a run of refused posts to `peer` may last before it is a
    /// verdict: `FFD_EAGAIN_LIMIT`, or start-up grace + timeout on a link
    /// that never carried anything (connection set-up), stretched like the
    /// Engine's own timeouts while this rank's wake-ups run late (its
    /// local health, `docs/design.md` §4.3): a refusal run is timing
    /// evidence too, and a starved rank drains its queues late.
    fn refusal_bound(&self, peer: Rank) -> Duration {
        let bound = if self.connected.contains(&peer) {
            self.eagain_limit
        } else {
            self.eagain_limit.max(self.connect_grace)
        };
        bound.saturating_mul(self.engine.local_health())
    }

    /// Carries out everything the Engine asked for.
    fn carry_out(&mut self, endpoint: &mut Endpoint) {
        while let Some(output) = self.engine.poll_output() {
            match output {
                Output::WriteHeartbeat { to, slot, value } => {
                    self.write_heartbeat(endpoint, to, slot, value);
                }
                Output::Send { to, bytes } => {
                    if self.pending.iter().any(|(p, _)| *p == to) {
                        // Keep per-peer order behind the refused ones.
                        self.pending.push_back((to, bytes));
                    } else {
                        self.send(endpoint, to, bytes);
                    }
                }
                Output::Event(event) => self.deliver(event),
                // Only in the simulator's modelled mode.
                Output::HeartbeatStream { .. } => {}
            }
        }
    }

    fn write_heartbeat(&mut self, endpoint: &mut Endpoint, to: Rank, slot: u16, value: u64) {
        let Some(region) = self.peers.get(to as usize) else {
            return;
        };
        self.last_write_target = Some(to);
        match endpoint.try_write_u64(
            FiAddr(u64::from(to)),
            region,
            usize::from(slot),
            value,
            u64::from(to),
        ) {
            Ok(()) => {
                self.counters.heartbeats_posted += 1;
            }
            // The next period brings the next beat; only the run is counted.
            Err(e) if e.is_refusal() => self.refused(to),
            Err(e) => {
                self.logger
                    .info(format_args!("heartbeat to rank {to} failed: {e}"));
                let now = self.now();
                self.transport_error(now, to, TransportErrorKind::HeartbeatWrite);
            }
        }
    }

    /// Tries a send; a refused one waits in `pending`. Returns whether the
    /// send left (or was abandoned as an error).
    fn send(&mut self, endpoint: &mut Endpoint, to: Rank, bytes: Arc<[u8]>) -> bool {
        match endpoint.try_send(FiAddr(u64::from(to)), &bytes, u64::from(to)) {
            Ok(()) => {
                self.refused_since.remove(&to);
                true
            }
            Err(e) if e.is_refusal() => {
                self.pending.push_back((to, bytes));
                self.refused(to);
                false
            }
            Err(FabricError::Invalid(why)) => {
                // Too large for a buffer (message_buffers says it cannot
                // be): a bug, not evidence against `to`.
                self.logger
                    .error(format_args!("message to rank {to} not sent: {why}"));
                true
            }
            Err(e) => {
                self.logger
                    .info(format_args!("send to rank {to} failed: {e}"));
                let now = self.now();
                self.transport_error(now, to, TransportErrorKind::Send);
                true
            }
        }
    }

    /// Retries refused sends in order; stops at the first peer still refusing.
    fn retry_pending(&mut self, endpoint: &mut Endpoint) {
        let mut round = std::mem::take(&mut self.pending);
        let mut blocked: Vec<Rank> = Vec::new();
        // Sends to ranks already declared failed stay queued too: the Engine
        // addresses them on purpose (the exclusion notice a stopped rank
        // must find when it resumes). Only a refusal verdict drops them.
        while let Some((to, bytes)) = round.pop_front() {
            if blocked.contains(&to) {
                self.pending.push_back((to, bytes));
                continue;
            }
            // `send` re-queues a refused message at the back of `pending`.
            if !self.send(endpoint, to, bytes) {
                blocked.push(to);
            }
        }
        // Outputs raised by transport errors during the retries.
        self.carry_out(endpoint);
    }

    fn deliver(&mut self, event: protocol::Event) {
        match &event {
            protocol::Event::Failed {
                rank,
                detector,
                cause,
                ..
            } => {
                self.shared.failed.insert(*rank);
                self.logger.info(format_args!(
                    "rank {rank} failed ({}, declared by rank {detector})",
                    cause.as_str()
                ));
            }
            protocol::Event::Left { rank } => {
                self.shared.left.insert(*rank);
            }
            protocol::Event::SelfExcluded { by } => {
                self.shared.excluded.store(true, Ordering::Release);
                self.logger.warn(format_args!(
                    "this rank was declared failed (told by rank {by}); it stops participating"
                ));
            }
            protocol::Event::SlowEmitter { rank, stalled_for } => {
                self.logger.info(format_args!(
                    "emitter {rank} is slow: its slot stood still for {stalled_for:?}"
                ));
            }
            protocol::Event::Payload { .. } => {}
        }
        let event = DetectorEvent {
            at: self.started.elapsed(),
            epoch: self.shared.failed.epoch(),
            event,
        };
        if let Some(callback) = self.callback.as_mut() {
            if catch_unwind(AssertUnwindSafe(|| callback(&event))).is_err() {
                self.counters.callback_panics += 1;
                self.logger
                    .error(format_args!("the host's event callback panicked"));
            }
        }
        if !self.shared.events.push(event) {
            self.counters.events_dropped += 1;
        }
    }

    /// How long to sleep: until the Engine's deadline, the end of a leave,
    /// the next retry of refused sends, or the next publication.
    fn sleep_for(&self) -> Duration {
        let now = self.now();
        let mut sleep = self
            .engine
            .next_deadline()
            .map_or(PUBLISH_EVERY, |d| d.saturating_since(now))
            .min(PUBLISH_EVERY);
        if let Some(until) = self.leaving_until {
            sleep = sleep.min(until.saturating_duration_since(Instant::now()));
        }
        if !self.pending.is_empty() {
            sleep = sleep.min(RETRY_EVERY);
        }
        sleep
    }

    /// Publishes the counters for `Detector::stats`, at most every
    /// [`PUBLISH_EVERY`] unless `now`; never waits for the lock.
    fn publish(&mut self, force: bool) {
        if !force && self.last_publish.elapsed() < PUBLISH_EVERY {
            return;
        }
        let Ok(mut snapshot) = self.shared.stats.try_lock() else {
            return;
        };
        self.last_publish = Instant::now();
        snapshot.uptime_ms = self.started.elapsed().as_secs_f64() * 1e3;
        snapshot.epoch = self.shared.failed.epoch();
        self.counters.events_dropped = self.shared.events.dropped();
        snapshot.runtime.clone_from(&self.counters);
        snapshot.engine.clone_from(self.engine.stats());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::wire::Encoder;

    /// The worst notice of a job (every other rank failed, as a list the
    /// encoder must send whole) and the largest payload fit the buffers.
    #[test]
    fn every_message_fits_the_buffers() {
        for ranks in [2u32, 1000, 65_536, 1 << 20] {
            let (_, size) = message_buffers(ranks);
            let enc = Encoder::new(1, 0);
            // Alternate ranks: the densest list that is not a range.
            let failed: Vec<Rank> = (1..ranks).step_by(2).collect();
            let left: Vec<Rank> = (2..ranks).step_by(2).collect();
            let notice = enc.notice(0, 0, &failed, &left);
            assert!(
                notice.len() <= size,
                "N={ranks}: notice {} > {size}",
                notice.len()
            );
            let sync = enc.sync_request(0, &failed, &left);
            assert!(
                sync.len() <= size,
                "N={ranks}: sync {} > {size}",
                sync.len()
            );
            let payload = enc.payload(0, 0, 0, &vec![7u8; MAX_APP_PAYLOAD]);
            assert!(
                payload.len() <= size,
                "N={ranks}: payload {} > {size}",
                payload.len()
            );
        }
    }
}
