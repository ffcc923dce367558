//! The progress thread: drives one Engine with real time and the fabric.
//!
//! Owns: the detector's transport (its endpoint, if any), slot region and Engine once started; the
//! per-peer bookkeeping of refused posts; how the thread ends (a leave, an
//! exclusion, or a stop with its reason, a panic included). Must not: block
//! on the embedder (callbacks are the embedder's promise), wait on anything but the
//! completion queue and the wake socket (or an epoll set holding it: the
//! exits', the liveness sockets'), allocate per heartbeat, or end
//! without publishing why (a panic anywhere on the thread is caught and
//! becomes [`StopCause::Panic`]).
//!
//! Each turn of the loop: take the embedder's commands (at most
//! `BROADCASTS_PER_TURN` broadcasts, `embedder.rs`: a flood of payloads waits
//! for the next turns, and the thread keeps beating); read the completion queue
//! (before any judgement, so heartbeats that landed are seen and errors are
//! evidence); if the Engine's deadline has come, read the slot it watches
//! and tick it; carry out its outputs; retry refused sends; then sleep on
//! the completion queue's wait object or the wake socket until the next
//! deadline (`FFD_PROGRESS=sleep`; no sleep while commands wait), or go
//! round again (`spin`).

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fabric::{Completion, FabricError, RemoteRegion, SlotPage};
use crate::protocol::{
    Engine, EngineConfig, EngineOptions, Input, JobKeys, LocalBeat, Output, Participation, Rank,
    Readings, Ring, Time, wire,
};

use super::AgreeError;
use super::commands::CommandReceiver;
use super::delivery::Delivery;
use super::link::{self, Linked, WARM_UP};
use super::liveness::{Answer, Liveness, LivenessParts};
use super::local::{LocalPlan, LocalWatching};
use super::log::Logger;
use super::state::{StopCause, StopReason};
use super::stats::RuntimeCounters;
use super::transport::{Slots, Transport};
use super::{Callback, PublishedState};
use crate::node::{Boost, monotonic_ns, thread_cpu_ns};

pub(super) use super::link::Link;

mod agree_poll;
mod cadence;
mod diagnosis;
mod embedder;
mod hold;
mod live;
mod mail;
mod sends;
mod trace;

use agree_poll::{agreement_poll, agreement_poll_every, poll_interval, polls_agreements};
use cadence::Cadence;
use diagnosis::Diagnosis;
use hold::HoldShare;
use sends::SendBook;

/// The largest application payload the runtime carries (`broadcast`).
/// A revoke or reinit order is a few bytes; this keeps buffers small.
pub const MAX_APP_PAYLOAD: usize = 8 * 1024;

/// Send and receive buffers for a job of `ranks`: (count, bytes each).
/// A message is bounded by its rank lists, each at most a bitmap of
/// `ranks` bits (the encoder picks the smallest of deltas, ranges and
/// bitmap; a notice or sync carries a failed and a left list, an
/// agreement's Up a value's and a decision's failed lists) and a sync
/// request's payload marks ([`wire::MAX_MARKS_LEN`]), or by a payload of
/// [`MAX_APP_PAYLOAD`]; every message of the protocol fits.
pub(super) fn message_buffers(ranks: u32) -> (usize, usize) {
    let lists = 2 * (ranks as usize).div_ceil(8) + wire::MAX_MARKS_LEN + 1024;
    let size = lists
        .max(MAX_APP_PAYLOAD + 1024)
        .max(16 * 1024)
        .next_multiple_of(4096);
    // Fewer buffers when each is large (jobs beyond ~250k ranks).
    let count = if size <= 64 * 1024 { 32 } else { 8 };
    (count, size)
}

/// How often the counters are published for [`super::Detector::stats`].
const PUBLISH_EVERY: Duration = Duration::from_millis(50);

/// While sends wait for a refused peer, retry this often.
const RETRY_EVERY: Duration = Duration::from_millis(1);

/// What the embedder asks of the progress thread.
#[derive(Debug)]
pub(super) enum Command {
    Broadcast(Vec<u8>),
    /// Start this rank's next user agreement (its request waits first in
    /// the book's `sent` list), called at that instant.
    Agree(u64, Instant),
    /// Announce a clean leave, linger, then stop.
    Leave,
    /// Stop now (after a leave that did not finish in time).
    Stop,
    /// Make the thread fail on purpose (tests only).
    #[cfg(any(test, feature = "fault-injection"))]
    Fault(super::Fault),
}

/// Everything [`Progress`] is made of, handed over by `Detector::start`.
pub(super) struct Parts {
    pub shared: Arc<PublishedState>,
    /// What the Engine is made of once every rank's link is up.
    pub seed: EngineSeed,
    /// The endpoint, or none in a one-host job (`transport.rs`).
    pub transport: Transport,
    pub slots: Slots,
    /// `peers[r]`: rank r's slot region (empty with no endpoint).
    pub peers: Vec<RemoteRegion>,
    pub started: Instant,
    pub commands: CommandReceiver,
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
    /// The liveness port and the peers' (`FFD_LIVENESS`; `None`: off).
    pub liveness: Option<LivenessParts>,
}

pub(super) struct Progress<'d> {
    transport: Transport,
    /// Readable when the embedder sent a command.
    wake: UnixStream,
    /// The epoll set of same-host pidfds and `wake` (a second fd of it),
    /// readable on a command or an exit: waited on instead of `wake`.
    exits_fd: Option<OwnedFd>,
    /// The liveness sockets' epoll set (which holds the wake fd above):
    /// waited on instead of it.
    live_fd: Option<OwnedFd>,
    core: Core<'d>,
}

/// The progress thread's state apart from the transport, so completions can
/// be handled while the transport is borrowed for reading them.
struct Core<'d> {
    shared: Arc<PublishedState>,
    engine: Engine,
    /// Same-host watching (`FFD_LOCAL`): the counters and the pidfds.
    local: Option<LocalWatching>,
    /// This host's mailboxes: same-host messages (`mail.rs`).
    mail: Option<super::mail::Mail>,
    /// This rank's slot page: the Engine reads one slot, and clears one
    /// when it reassigns it (`Output::ClearSlot`).
    slots: Slots,
    peers: Vec<RemoteRegion>,
    started: Instant,
    commands: CommandReceiver,
    /// The last turn left commands queued (it took its most broadcasts):
    /// the next one comes without a sleep.
    commands_left: bool,
    /// The embedder's callback and event queue; outlives a panic of the loop.
    delivery: &'d mut Delivery,
    spin: bool,
    eagain_limit: Duration,
    connect_grace: Duration,
    linger: Duration,
    logger: Logger,
    counters: RuntimeCounters,
    /// Refusal runs, refused sends waiting, links known to work.
    sends: SendBook,
    /// Set by a leave: stop after this instant.
    leaving_until: Option<Instant>,
    stop: bool,
    /// The loop failed: end with this reason.
    failed: Option<StopReason>,
    /// An injected completion-queue error, for the next read (tests only).
    #[cfg(any(test, feature = "fault-injection"))]
    inject_cq_error: bool,
    last_publish: Instant,
    /// No message handled since the last read of the queue began: the
    /// next one first reads the exit words (`LocalWatching::scan_exit_words`).
    exits_unscanned: bool,
    /// This turn began after the Engine's deadline, and its lateness is
    /// recorded ([`Core::note_wake_lateness`]).
    late_noted: bool,
    /// Since when an agreement or view change has been under way here
    /// (`None`: none is); see [`AGREEMENT_POLL`].
    agreeing_since: Option<Instant>,
    timeout: Duration,
    /// [`agreement_poll_every`] for this host.
    agreement_poll_every: Duration,
    /// Where an idle tick ends (`cadence.rs`).
    cadence: Cadence,
    /// The diagnosis ring for the log (`FFD_LOG=info`).
    diagnosis: Diagnosis,
    /// Whether the agreement hold may keep the thread real-time: not
    /// while it is busy (`hold.rs`).
    hold_share: HoldShare,
    /// The liveness port, the watch of the emitter's, the probe.
    liveness: Option<Liveness>,
    /// The liveness listener, kept open when its epoll set could not be
    /// made: its port was published.
    _kept_listener: Option<std::net::TcpListener>,
    answers: Vec<Answer>,
}

/// The Engine's ingredients; it is built when the linking phase ends, so
/// its clock (start-up grace, first checks) starts when every rank is linked.
pub(super) struct EngineSeed {
    pub config: Arc<EngineConfig>,
    pub ring: Arc<Ring>,
    pub me: Rank,
    /// The job key and the message key (start-up derives it from the
    /// job's secret).
    pub keys: JobKeys,
    /// Host groups and local watching (`None`: `FFD_LOCAL=off`).
    pub local: Option<LocalPlan>,
}

/// The progress thread's body: the linking phase, then the Engine's loop,
/// then the end published: [`DetectorState`](super::DetectorState) and, for
/// a stop, the embedder's last event. A panic anywhere on the way (the Engine,
/// fabric handling, this loop) is caught here and ends it the same way.
pub(super) fn run(mut parts: Parts) {
    let shared = Arc::clone(&parts.shared);
    let mut delivery = Delivery::new(
        Arc::clone(&shared),
        parts.callback.take(),
        parts.started,
        parts.logger,
    );
    // The parts (transport, slots, Engine) are dropped inside, also when
    // unwinding: the fabric resources are closed before the embedder hears.
    let end = catch_unwind(AssertUnwindSafe(|| drive(parts, &mut delivery)))
        .unwrap_or_else(|payload| End::Stopped(StopReason::panic(payload.as_ref())));
    // However the loop ended (a panic, an early stop): no lift names this
    // thread from now on, and it runs the last callbacks at its policy.
    if let Some(boost) = shared.boost.get() {
        boost.retire();
        boost.hold(false);
        boost.lower();
    }
    let why = match &end {
        End::Left => AgreeError::Left,
        End::Excluded => AgreeError::Excluded,
        End::Stopped(reason) => AgreeError::Stopped(reason.to_string()),
    };
    match end {
        End::Left => {
            shared.life.left();
        }
        // Published when the exclusion was delivered.
        End::Excluded => {}
        End::Stopped(reason) => delivery.stopped(reason),
    }
    // Nothing answers agreements any more: every open one ends here.
    if let Some(host) = &shared.host_agreement {
        host.close(why.clone());
    }
    shared.agreements.close(why);
    shared.life.thread_ended();
}

/// How the progress thread ended.
enum End {
    /// Left cleanly, or told to stop (by the embedder, or by a failed start).
    Left,
    /// Declared failed by the others.
    Excluded,
    /// An error or a panic.
    Stopped(StopReason),
}

fn drive(mut parts: Parts, delivery: &mut Delivery) -> End {
    let held = match link::link_phase(&mut parts) {
        Linked::Go(held) => held,
        Linked::Abandoned => return End::Left,
        Linked::Failed(reason) => return End::Stopped(reason),
    };
    let elapsed = u64::try_from(parts.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let now = Time::from_nanos(elapsed);
    // After the barrier every local rank has its segment: open it.
    let mut fallback = Vec::new();
    let local = match parts.seed.local.take() {
        None => None,
        Some(plan) => {
            let hosts = Arc::clone(&plan.hosts);
            fallback.clone_from(&plan.fallback);
            let origin = monotonic_ns().saturating_sub(elapsed);
            match LocalWatching::start(
                plan,
                parts.seed.me,
                parts.wake.as_fd(),
                (origin, parts.seed.config.timeout),
                parts.shared.boost.get().cloned(),
                &mut fallback,
            ) {
                Ok(w) => {
                    if let (Some(host), Some(segment)) = (&parts.shared.host_agreement, w.segment())
                    {
                        host.set_segment(Arc::clone(segment));
                    }
                    Some((hosts, w))
                }
                Err(why) => {
                    return End::Stopped(StopReason::new(
                        StopCause::Engine,
                        format!("same-host watching could not start: {why}"),
                    ));
                }
            }
        }
    };
    let seed = &parts.seed;
    let options = EngineOptions {
        hosts: local.as_ref().map(|(hosts, _)| Arc::clone(hosts)),
        ..EngineOptions::default()
    };
    let engine = Engine::new(
        Arc::clone(&seed.config),
        Arc::clone(&seed.ring),
        seed.me,
        seed.keys.clone(),
        now,
        options,
    );
    let engine = match engine {
        Ok(e) => e,
        Err(e) => return End::Stopped(StopReason::new(StopCause::Engine, e.to_string())),
    };
    let mut progress = Progress::new(parts, engine, local.map(|(_, w)| w), delivery);
    if let Some(w) = &progress.core.local {
        progress.core.counters.local.pidfds = w.pidfds() as u64;
        progress.core.counters.local.exit_words = w.exit_words().0 as u64;
        progress.core.counters.local.fallback = fallback.join("; ");
    }
    let core = &mut progress.core;
    core.counters.link.messages_held = held.messages.len() as u64;
    core.counters.link.dropped_foreign = held.dropped_foreign;
    core.counters.link.dropped_over_cap = held.dropped_over_cap;
    // Messages that arrived while linking (a faster rank's first notice).
    for (from, bytes) in held.messages {
        core.on_message(from, &bytes);
    }
    progress.run()
}

/// The time since `started`, as the Engine counts it.
fn elapsed(started: Instant) -> Time {
    Time::from_nanos(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

impl<'d> Progress<'d> {
    fn new(
        parts: Parts,
        engine: Engine,
        local: Option<LocalWatching>,
        delivery: &'d mut Delivery,
    ) -> Self {
        let exits_fd = local
            .as_ref()
            .and_then(LocalWatching::wait_fd)
            .and_then(|fd| fd.try_clone_to_owned().ok());
        let mut kept_listener = None;
        let liveness = parts.liveness.and_then(|l| {
            let wake = exits_fd.as_ref().map_or(parts.wake.as_fd(), AsFd::as_fd);
            let listener = l.listener.try_clone();
            match Liveness::new(l, wake) {
                Ok(l) => Some(l),
                Err(e) => {
                    // The port is published: it stays open while this rank
                    // runs (a closed one would be refused, proof of death).
                    kept_listener = listener.ok();
                    parts
                        .logger
                        .warn(format_args!("no liveness watch (its epoll set: {e})"));
                    None
                }
            }
        });
        let live_fd = liveness
            .as_ref()
            .and_then(|l| l.wait_fd().try_clone_to_owned().ok());
        let agreement_poll_every = agreement_poll_every(
            engine
                .hosts()
                .map_or(1, |h| h.members(h.host_of(engine.me())).len()),
            std::thread::available_parallelism().map_or(1, usize::from),
        );
        let config = engine.config();
        let tick = config.local_check_interval().min(PUBLISH_EVERY);
        let cadence = Cadence::new(tick, config.check_interval(), config.strain_lateness());
        Progress {
            transport: parts.transport,
            wake: parts.wake,
            exits_fd,
            live_fd,
            core: Core {
                shared: parts.shared,
                engine,
                mail: local.as_ref().and_then(LocalWatching::mail),
                local,
                slots: parts.slots,
                peers: parts.peers,
                started: parts.started,
                commands: parts.commands,
                commands_left: false,
                delivery,
                spin: parts.spin,
                eagain_limit: parts.eagain_limit,
                connect_grace: parts.connect_grace,
                linger: super::linger(parts.period, parts.timeout),
                agreeing_since: None,
                timeout: parts.timeout,
                agreement_poll_every,
                cadence,
                logger: parts.logger,
                counters: RuntimeCounters::default(),
                sends: SendBook::default(),
                leaving_until: None,
                stop: false,
                failed: None,
                #[cfg(any(test, feature = "fault-injection"))]
                inject_cq_error: false,
                last_publish: parts.started,
                exits_unscanned: true,
                late_noted: false,
                diagnosis: Diagnosis::new(&parts.logger, parts.timeout),
                hold_share: HoldShare::default(),
                liveness,
                _kept_listener: kept_listener,
                answers: Vec::new(),
            },
        }
    }

    /// Runs until the rank leaves, is excluded, is told to stop, or the
    /// completion queue fails; says which.
    fn run(mut self) -> End {
        let Progress {
            transport,
            wake,
            exits_fd,
            live_fd,
            core,
            ..
        } = &mut self;
        // Engine::new produced the first heartbeat.
        core.carry_out(transport);
        // Whether the wake socket (and the exits' epoll set that holds it),
        // and the completion queue, may be readable: `false` only after a
        // wait that timed out on them (and read the queue just before), so
        // a plain heartbeat wake-up reads neither again.
        let mut woken = true;
        // Whether the liveness sockets may have an event: see below.
        let mut live = true;
        let mut queue = true;
        while !core.finished() {
            // Lifts counted before the exits are taken: a later one is
            // for an exit not taken yet (see the lowering below).
            let lifts_seen = core.boost().map_or(0, |b| b.lifts());
            if woken {
                // Empty the wake socket first: a command sent after this
                // point writes a fresh byte, so the next wait returns at once.
                let mut sink = [0u8; 64];
                while matches!((&*wake).read(&mut sink), Ok(n) if n > 0) {}
            }
            let started = core.started;
            core.diagnosis.begin_turn(|| elapsed(started));
            core.note_wake_lateness();
            core.mail_awake();
            core.take_commands();
            core.drive_host_agreement();
            core.refresh_board_readers();
            // Exits first: proof, and what the queue's messages may be
            // notices of.
            if woken {
                core.take_exits();
            }
            core.take_liveness(live);
            core.exits_unscanned = true;
            let polled = match core.take_injected_cq_error() {
                Some(e) => Err(e),
                None if queue => transport.poll(usize::MAX, &mut |c| core.on_completion(c)),
                None => Ok(0),
            };
            if let Err(e) = polled {
                core.failed = Some(StopReason::new(StopCause::CompletionQueue, e.to_string()));
                break;
            }
            core.read_mail();
            core.diagnosis.mark(0, || elapsed(started));
            core.on_deadline();
            core.diagnosis.mark(1, || elapsed(started));
            core.carry_out(transport);
            core.rewatch();
            core.bump();
            core.retry_pending(transport);
            core.publish(false);
            let next_deadline = core.engine.next_deadline();
            core.diagnosis.end_turn(|| elapsed(started), next_deadline);
            if core.finished() {
                break;
            }
            // An agreement under way: its messages wake the thread ahead
            // of the host's normal threads (design §6 "Runtime"). Then
            // what lifted the thread is handled: back to its policy (unless
            // held) and CPU, before it sleeps or goes round.
            // A busy thread is not held: at `SCHED_FIFO` it would keep
            // its CPU from the other ranks' threads there (`hold.rs`).
            let agreeing = core.agreeing();
            if let Some(boost) = core.shared.boost.get() {
                let hold = agreeing
                    && (!boost.raises_policy()
                        || core.hold_share.admits(monotonic_ns(), thread_cpu_ns));
                boost.hold(hold);
                boost.lower_unless_lifted_since(lifts_seen);
            }
            // Mail posted since the read: no sleep, no read of the queue.
            if core.spin || core.mail_waits() {
                std::hint::spin_loop();
                (queue, woken, live) = (core.spin, core.spin, core.spin);
                continue;
            }
            let timeout = core.sleep_for(agreeing);
            // With pidfds, their epoll set (which holds the wake socket
            // too); with a liveness port, its set (which holds that one).
            let wake_fd = live_fd
                .as_ref()
                .or(exits_fd.as_ref())
                .map_or(wake.as_fd(), AsFd::as_fd);
            core.exits_unscanned = true;
            match transport.wait_or(timeout, wake_fd, &mut |c| core.on_completion(c)) {
                Ok(waited) => {
                    (queue, woken) = (waited.queue, waited.woken);
                    // A wait that returned on completions already queued
                    // says `woken` without looking: the liveness sockets
                    // are then read only if a check interval passed since
                    // their last read (their fd stays readable, so a real
                    // wait returns for them at once), which keeps a turn
                    // per heartbeat completion free of their system call.
                    live = waited.woken && (waited.completions == 0 || core.liveness_overdue());
                }
                Err(e) => {
                    core.failed = Some(StopReason::new(StopCause::Wait, e.to_string()));
                    break;
                }
            }
        }
        // The end is no exit's handling nor an agreement's: not lifted
        // (`run` retires the lift once the loop has ended).
        if let Some(boost) = core.boost() {
            boost.hold(false);
            boost.lower();
        }
        // What the last completions produced (the SelfExcluded event when
        // the exclusion notice arrived during the wait) still goes out.
        core.carry_out(transport);
        core.publish(true);
        if let Some(reason) = core.failed.take() {
            End::Stopped(reason)
        } else if core.engine.participation() == Participation::Excluded {
            End::Excluded
        } else {
            End::Left
        }
    }
}

impl Core<'_> {
    fn now(&self) -> Time {
        elapsed(self.started)
    }

    fn finished(&self) -> bool {
        if self.stop || self.engine.participation() == Participation::Excluded {
            return true;
        }
        // After the linger, only sends to ranks still in the job hold the
        // end (they go until sent or judged unreachable); one to a rank
        // failed or left meanwhile is no reason to stay.
        match self.leaving_until {
            Some(until) => {
                Instant::now() >= until && !self.sends.waits_for_any(|r| !self.engine.is_gone(r))
            }
            None => false,
        }
    }

    /// Drives this rank's one-host agreements one step (if no caller
    /// waits on them), raises their results for the embedder and hands the Engine what
    /// a decision named that this rank did not learn in a timeout.
    fn drive_host_agreement(&mut self) {
        let Some(host) = &self.shared.host_agreement else {
            return;
        };
        // Only a round nobody may be driving: a caller that finds the
        // lock held by a descheduled progress thread would wait for it.
        if host.is_unattended() {
            self.shared.drive_host_agreement(false);
        }
        let news = host.take_news();
        for learn in news.learn {
            let now = self.now();
            let _ = self.engine.handle(
                now,
                Input::BoardNotice {
                    failed: &learn.failed,
                    detector: learn.detector,
                },
            );
        }
        for agreed in news.agreed {
            let event = crate::protocol::Event::Agreed {
                seq: agreed.seq,
                flags: agreed.flags,
                view: agreed.view,
                hops: agreed.hops,
            };
            trace::event(&self.logger, &event);
            self.delivery.protocol_event(event);
        }
    }

    /// Carries out an injected fault (tests only): a panic here, on the
    /// progress thread outside any callback, or a completion-queue error at
    /// the next read.
    #[cfg(any(test, feature = "fault-injection"))]
    fn inject(&mut self, fault: super::Fault) {
        match fault {
            super::Fault::Panic => panic!("injected fault: a panic on the progress thread"),
            super::Fault::CompletionQueueError => self.inject_cq_error = true,
        }
    }

    /// The injected completion-queue error, once (never without the
    /// `fault-injection` feature).
    fn take_injected_cq_error(&mut self) -> Option<FabricError> {
        #[cfg(any(test, feature = "fault-injection"))]
        if std::mem::take(&mut self.inject_cq_error) {
            return Some(FabricError::Invalid(
                "injected fault: a completion-queue error".into(),
            ));
        }
        None
    }

    fn begin_leave(&mut self) {
        if self.leaving_until.is_none() {
            if let Some(l) = self.liveness.as_mut() {
                l.leave();
            }
            let now = self.now();
            let _ = self.engine.handle(now, Input::Leave);
            self.leaving_until = Some(Instant::now() + self.linger);
        }
    }

    /// How late this turn began after the Engine's deadline, recorded
    /// before anything of the turn reaches the Engine: a thread whose CPU
    /// was taken from it for a timeout, and whose first message then is
    /// the notice that excludes it, still shows the stall in its stats
    /// (an excluded Engine has no deadline left for [`Self::on_deadline`]).
    fn note_wake_lateness(&mut self) {
        self.late_noted = false;
        let Some(deadline) = self.engine.next_deadline() else {
            return;
        };
        let now = self.now();
        if now >= deadline {
            self.counters.lateness.record(now - deadline);
            self.late_noted = true;
        }
    }

    /// The Engine's deadline has come: read the watched slot and the same-host
    /// emitter's counter, then tick. Its lateness is recorded unless the
    /// turn began late already ([`Self::note_wake_lateness`]).
    fn on_deadline(&mut self) {
        let Some(deadline) = self.engine.next_deadline() else {
            return;
        };
        let now = self.now();
        if now < deadline {
            return;
        }
        if !std::mem::take(&mut self.late_noted) {
            self.counters.lateness.record(now - deadline);
        }
        let readings = DeadlineReadings {
            slots: self.slots.memory(),
            local: self.local.as_ref(),
        };
        self.engine.handle_timeout(now, &readings);
    }

    /// Same-host processes that exited since the last look: proof, to the
    /// Engine at once.
    fn take_exits(&mut self) {
        if let Some(local) = self.local.as_mut() {
            let now = elapsed(self.started);
            let n = local.take_exits(&mut self.engine, now);
            self.counters.local.exits_seen += n as u64;
            self.counters.local.exit_words_seen = local.exit_words().1;
            if let Some(why) = local.take_exit_words_broken() {
                self.logger.warn(format_args!(
                    "exit words stopped ({why}): same-host exits are found by pidfds \
                     and counters only"
                ));
                let fallback = &mut self.counters.local.fallback;
                if !fallback.is_empty() {
                    fallback.push_str("; ");
                }
                fallback.push_str(&format!("exit words stopped: {why}"));
            }
        }
    }

    /// Which ranks of the host read its notice board, for the Engine's
    /// fan-outs (`LocalWatching::refresh_board_readers`: at most once per
    /// quarter timeout; the Engine hears only changes).
    fn refresh_board_readers(&mut self) {
        if self.local.is_none() {
            return;
        }
        let now = self.now();
        if let Some(local) = self.local.as_mut() {
            local.refresh_board_readers(&mut self.engine, now);
        }
    }

    /// This thread woke: its counter in the host's segment says so (one
    /// plain store, no syscall of its own).
    fn bump(&self) {
        if let Some(local) = &self.local {
            local.bump(self.engine.digest());
        }
    }

    fn on_completion(&mut self, completion: Completion<'_>) {
        let now = self.now();
        match completion {
            // A late neighbour's link warm-up: not for the Engine.
            Completion::Received { bytes, .. } if bytes == WARM_UP => {}
            Completion::Received { bytes, source } => {
                trace::message(&self.logger, "from", source.map(|a| a.0), bytes);
                self.on_message(source.and_then(|a| Rank::try_from(a.0).ok()), bytes);
            }
            Completion::Sent { token, .. } => {
                self.counters.messages.sends_completed += 1;
                self.link_works(token);
                // The Engine times a just-mended emitter from its link-up.
                if let Ok(to) = Rank::try_from(token) {
                    let _ = self.engine.handle(now, Input::Sent { to });
                }
            }
            Completion::Written { token } => {
                self.counters.heartbeats.completed += 1;
                self.link_works(token);
            }
            Completion::Failed(error) => self.on_error_completion(now, error),
        }
    }

    /// A message for the Engine, `from` the transport's sender if known.
    fn on_message(&mut self, from: Option<Rank>, bytes: &[u8]) {
        self.counters.messages.received += 1;
        let now = self.now();
        if std::mem::take(&mut self.exits_unscanned) {
            if let Some(local) = self.local.as_mut() {
                local.scan_exit_words(&mut self.engine, now);
            }
        }
        if let Err(e) = self.engine.handle(now, Input::Message { from, bytes }) {
            self.logger.debug(format_args!("message dropped: {e}"));
        }
    }

    /// Carries out everything the Engine asked for.
    fn carry_out(&mut self, transport: &mut Transport) {
        while let Some(output) = self.engine.poll_output() {
            match output {
                Output::WriteHeartbeat { to, slot, value } => {
                    self.write_heartbeat(transport, to, slot, value);
                }
                // Before the ObserveMe that names the slot goes out.
                Output::ClearSlot { slot } => self.slots.memory().store(usize::from(slot), 0),
                Output::Send { to, message } => {
                    let bytes: Arc<[u8]> = message.to_vec().into();
                    trace::message(&self.logger, "to", Some(u64::from(to)), &bytes);
                    if self.sends.waits_for(to) {
                        // Keep per-peer order behind the refused ones.
                        self.sends.queue(to, bytes);
                    } else {
                        self.send(transport, to, bytes);
                    }
                }
                // An agreement's result reaches its request before the
                // embedder hears of it.
                Output::Event(event) => {
                    trace::event(&self.logger, &event);
                    let started = self.started;
                    self.diagnosis
                        .log(&self.logger, || elapsed(started), &event, &mut self.engine);
                    self.shared.agreements.on_event(&event);
                    self.delivery.protocol_event(event);
                }
                // Only in the simulator's modelled mode.
                Output::HeartbeatStream { .. } => {}
                // Before the fabric copies to the ranks that do not read it.
                Output::PostOnBoard { failed, detector } => {
                    if let Some(local) = &self.local {
                        local.post(&failed, detector);
                    }
                }
            }
        }
    }

    /// Whether an agreement or a view change is under way here: one the
    /// Engine has not settled, or a one-host round nobody waits on.
    fn agreeing(&self) -> bool {
        !self.engine.agreements_settled() || self.unattended()
    }

    /// A one-host round is open here that no caller drives.
    fn unattended(&self) -> bool {
        self.shared
            .host_agreement
            .as_ref()
            .is_some_and(|h| h.is_unattended())
    }

    /// The progress thread's lift (`FFD_SCHED=boost|fifo`): lowered before
    /// each sleep after an exit-word thread or an agreement call lifted
    /// it, held while an agreement is under way.
    fn boost(&self) -> Option<&Arc<Boost>> {
        self.shared.boost.get()
    }

    /// How long to sleep: until the Engine's deadline, the end of a leave,
    /// the next retry of refused sends, or the next publication; not at
    /// all while commands wait;
    /// `agreeing`: [`Core::agreeing`] this turn.
    fn sleep_for(&mut self, agreeing: bool) -> Duration {
        let now = self.now();
        let mut sleep = self
            .engine
            .next_deadline()
            .map_or(PUBLISH_EVERY, |d| d.saturating_since(now))
            .min(PUBLISH_EVERY);
        let ticked = sleep;
        // The linger's end, while it is ahead: once past, refused sends
        // that still hold the end are retried at their own pace (a wait
        // of zero here was a spin until their verdict).
        if let Some(left) = self
            .leaving_until
            .map(|until| until.saturating_duration_since(Instant::now()))
            .filter(|left| !left.is_zero())
        {
            sleep = sleep.min(left);
        }
        if self.sends.is_waiting() {
            sleep = sleep.min(RETRY_EVERY);
        }
        if let Some(at) = self.liveness.as_ref().and_then(Liveness::deadline) {
            sleep = sleep.min(at.saturating_duration_since(Instant::now()));
        }
        // Commands wait (a turn took its most broadcasts): the next turn
        // at once, after a look at the completion queue and the wake
        // socket (a wait of zero), not on a spin.
        if self.commands_left {
            sleep = Duration::ZERO;
        }
        if !agreeing {
            self.agreeing_since = None;
        } else {
            let started = *self.agreeing_since.get_or_insert_with(Instant::now);
            let engine = &self.engine;
            let fabric = polls_agreements(engine.hosts(), engine.me(), self.mail.is_some(), |r| {
                engine.is_gone(r)
            });
            let every = poll_interval(self.unattended(), fabric, self.agreement_poll_every);
            let cap = every.and_then(|every| {
                agreement_poll(Some(started), Instant::now(), self.timeout, every)
            });
            if let Some(cap) = cap {
                sleep = sleep.min(cap);
            }
        }
        // A plain tick of an idle rank ends on the host's grid.
        let plain = sleep == ticked
            && !self.commands_left
            && self.agreeing_since.is_none()
            && self.local.is_some();
        if let Some(extended) = self.cadence.extend(monotonic_ns(), sleep, plain) {
            self.counters.local.grid_ticks += 1;
            sleep = extended;
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
        self.counters.delivery.events_dropped = self.shared.events.dropped();
        self.counters.commands.broadcasts_refused_busy = self.commands.refused_busy();
        self.counters.delivery.callback_panics = self.delivery.callback_panics;
        self.counters.local.boost_lifts = self.boost().map_or(0, |b| b.lifts());
        self.counters.local.boost_holds = self.boost().map_or(0, |b| b.holds());
        self.counters.local.busy_releases = self.hold_share.releases();
        snapshot.runtime.clone_from(&self.counters);
        snapshot.engine.clone_from(self.engine.stats());
    }
}

/// What the progress thread reads when the Engine's deadline comes: its
/// registered slot page, and with host groups the same-host ranks' counters in
/// the host's segment.
struct DeadlineReadings<'a> {
    slots: &'a SlotPage,
    local: Option<&'a LocalWatching>,
}

impl Readings for DeadlineReadings<'_> {
    fn slot(&self, slot: u16) -> u64 {
        self.slots.read(usize::from(slot))
    }
    fn local_beat(&self, rank: Rank) -> Option<LocalBeat> {
        self.local.and_then(|l| l.read(rank))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::agreement::Value;

    use crate::protocol::wire::{AgreementId, Encoder, MAX_MARKS, TAG_LEN};

    /// The worst notice of a job (every other rank failed, as a list the
    /// encoder must send whole), the worst sync request (those lists and
    /// the most, longest payload marks) and the largest payload fit the
    /// buffers.
    #[test]
    fn every_message_fits_the_buffers() {
        for ranks in [2u32, 1000, 65_536, 1 << 20] {
            let (_, size) = message_buffers(ranks);
            let enc = Encoder::new(1, 0);
            // Alternate ranks: the densest list that is not a range.
            let failed: Vec<Rank> = (1..ranks).step_by(2).collect();
            let left: Vec<Rank> = (2..ranks).step_by(2).collect();
            let notice = enc.notice(0, 0, &failed, &left).len() + TAG_LEN;
            assert!(notice <= size, "N={ranks}: notice {notice} > {size}");
            // The most marks, each as long as a mark gets.
            let marks: Vec<(Rank, u64)> = (0..MAX_MARKS as Rank)
                .map(|i| (i * (ranks / MAX_MARKS as Rank).max(1), u64::MAX))
                .filter(|&(o, _)| o < ranks)
                .collect();
            let sync = enc
                .sync_request_with_marks(0, &failed, &left, 0, ranks, &marks)
                .len()
                + TAG_LEN;
            assert!(sync <= size, "N={ranks}: sync {sync} > {size}");
            let payload = enc.payload(0, 0, 0, &vec![7u8; MAX_APP_PAYLOAD]).len() + TAG_LEN;
            assert!(payload <= size, "N={ranks}: payload {payload} > {size}");
            // An agreement's Up: its value and a decision, each a failed
            // list as dense as can be.
            let value = Value::new(u64::MAX, &failed).with_view(u64::MAX);
            let decided = Value::new(0, &left).with_view(1);
            let id = AgreementId::User(u64::MAX);
            let up = enc.agree_up(id, u16::MAX, 0, &value, Some(&decided)).len() + TAG_LEN;
            assert!(up <= size, "N={ranks}: agree_up {up} > {size}");
            let down = enc.agree_down(id, u16::MAX, 0, &value).len() + TAG_LEN;
            assert!(down <= size, "N={ranks}: agree_down {down} > {size}");
        }
    }
}
