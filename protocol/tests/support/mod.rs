//! The driver the protocol tests share: what a real driver (the library's
//! progress thread, the simulator) does around a sans-IO Engine, written
//! once, so that a test says only what it feeds an Engine and what it
//! expects back.
//!
//! The loop every helper here follows:
//!
//! 1. Build an Engine ([`Job::engine`], [`Job::checker`]); its first
//!    outputs (the first heartbeat) wait in its queue: [`drain`] them, or
//!    build it with [`drained`] when the test does not look at them.
//! 2. Feed it one input: a message ([`Job::deliver`] for a test peer's
//!    message, [`deliver_sealed`] and [`deliver_from`] for wire bytes
//!    already sealed, such as another Engine's `Output::Send`), or a timer
//!    ([`tick`], with the watched slot's reading).
//! 3. After every `handle` and `handle_timeout`, poll `poll_output` until
//!    it says `None` before the next input: each helper that feeds an
//!    input does, and returns what came out. Read the outputs with
//!    [`events`], [`failures`], [`sends_of`], and, decoded at their
//!    receiver, [`Job::sent`], [`Job::sent_kinds`], [`Job::sent_to`].
//! 4. Ask `next_deadline` when to wake it next: [`serve_deadlines`] and
//!    [`run_until`] wake it at each deadline in turn, as a driver's timer
//!    would, up to a time the test names, with `handle_timeout`
//!    ([`slot_reading`], or [`readings`] for the local counters too).
//!
//! What differs from file to file is a parameter: the job's keys (each file
//! its own [`Job`]), the configuration (from [`config`]), the ring, whether
//! the Engine models its heartbeats, how late it wakes, what its slot reads.
//!
//! The simulator's tests (`sim_*.rs`) share [`sim_config`] and
//! [`simulate`].
//!
//! Included by each test file as `mod support;`.

// Each test file is its own crate and uses part of this module: what one
// file does not call, another does, so an unused item here is not dead.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ffd_protocol::sim::{FaultSpec, SimConfig, SimReport, Simulator};
use ffd_protocol::wire::{self, Header, Message};
use ffd_protocol::{
    Cause, Engine, EngineConfig, EngineOptions, Event, HeartbeatMode, Hosts, Input, JobKeys, Kind,
    LocalBeat, Output, QuorumMode, Rank, Readings, Ring, SlotReading, Time,
};

/// `v` milliseconds.
pub fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// `v` milliseconds after the Engines started (every Engine here starts at
/// `Time::ZERO`).
pub fn at(v: u64) -> Time {
    Time::ZERO + ms(v)
}

/// `v` in ascending order: for comparing a set of ranks whose order is no
/// part of what a test checks (a flood's fan-out order, say).
pub fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort_unstable();
    v
}

/// Period 10 ms, timeout 100 ms (four checks per timeout: one every 25 ms),
/// silence confirmed by `quorum`, everything else the default. The one
/// setting every test file decides is the quorum: pass
/// `QuorumMode::default()` to keep the default; change the rest with
/// `EngineConfig { startup_grace: …, ..config(…) }`.
pub fn config(quorum: QuorumMode) -> EngineConfig {
    EngineConfig {
        period: ms(10),
        timeout: ms(100),
        quorum,
        ..EngineConfig::default()
    }
}

/// The sequence number of the next message a test peer sends: one counter
/// for every link of the test binary, so that each link's numbers increase
/// (a receiver drops a number it has seen, or one too far behind).
static NEXT_SEQ: AtomicU64 = AtomicU64::new(1);

/// A job's two keys as a test plays it: the job key every header carries
/// and the message key every tag is computed with. Each test file has its
/// own (`const JOB: Job = Job::new(KEY, …)`): its Engines are built with it,
/// its test peers seal with it, and what its Engines send is decoded with it.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    pub key: u64,
    pub message_key: [u8; 32],
}

impl Job {
    pub const fn new(key: u64, message_key: [u8; 32]) -> Job {
        Job { key, message_key }
    }

    pub fn keys(&self) -> JobKeys {
        JobKeys::new(self.key, self.message_key)
    }

    /// Rank `me` of `n`, on a ring by rank, started at `Time::ZERO`. Its
    /// first outputs wait to be polled.
    pub fn engine(&self, config: EngineConfig, n: u32, me: Rank) -> Engine {
        self.engine_on(config, Ring::by_rank(n), me)
    }

    /// Rank `me` on `ring`, started at `Time::ZERO`: for Engines that share
    /// one configuration and one ring (pass `Arc`s), or a ring not by rank.
    /// Its first outputs wait to be polled.
    pub fn engine_on(
        &self,
        config: impl Into<Arc<EngineConfig>>,
        ring: impl Into<Arc<Ring>>,
        me: Rank,
    ) -> Engine {
        self.engine_with(config, ring, me, EngineOptions::default())
    }

    /// Rank `me` on `ring`, built as `options` say, started at
    /// `Time::ZERO`. Its first outputs wait to be polled.
    pub fn engine_with(
        &self,
        config: impl Into<Arc<EngineConfig>>,
        ring: impl Into<Arc<Ring>>,
        me: Rank,
        options: EngineOptions,
    ) -> Engine {
        Engine::new(
            config.into(),
            ring.into(),
            me,
            self.keys(),
            Time::ZERO,
            options,
        )
        .expect("valid engine")
    }

    /// Rank `me` on `ring` with host groups `hosts`, started at
    /// `Time::ZERO`; drive its timers with `handle_timeout` and
    /// [`readings`] that answer for its same-host emitter's counter. Its first
    /// outputs wait to be polled.
    pub fn engine_on_hosts(
        &self,
        config: impl Into<Arc<EngineConfig>>,
        ring: impl Into<Arc<Ring>>,
        hosts: Arc<Hosts>,
        me: Rank,
    ) -> Engine {
        let options = EngineOptions {
            hosts: Some(hosts),
            ..EngineOptions::default()
        };
        self.engine_with(config, ring, me, options)
    }

    /// [`Job::engine`] with modelled heartbeats
    /// ([`HeartbeatMode::Modelled`]): it writes no heartbeat, and its
    /// deadlines are slot checks only. Its first outputs wait to be polled.
    pub fn checker(&self, config: EngineConfig, n: u32, me: Rank) -> Engine {
        let options = EngineOptions {
            heartbeats: HeartbeatMode::Modelled,
            ..EngineOptions::default()
        };
        self.engine_with(config, Ring::by_rank(n), me, options)
    }

    /// `unsealed` (a test peer's message, from `wire::Encoder`) sealed for
    /// receiver `to` with a sequence number never used before.
    pub fn seal(&self, unsealed: &[u8], to: Rank) -> Vec<u8> {
        self.seal_numbered(unsealed, NEXT_SEQ.fetch_add(1, Ordering::Relaxed), to)
    }

    /// `unsealed` sealed for receiver `to` with the sequence number `seq`
    /// the test chooses (to test the replay window, or on a link whose
    /// numbers the test owns).
    pub fn seal_numbered(&self, unsealed: &[u8], seq: u64, to: Rank) -> Vec<u8> {
        wire::seal(unsealed, seq, to, &self.keys())
    }

    /// Hands `e` a test peer's message `unsealed`, sealed for it with a new
    /// sequence number, the sender not named by the fabric; panics if `e`
    /// refuses it. Returns every output it caused.
    pub fn deliver(&self, e: &mut Engine, now: Time, unsealed: impl AsRef<[u8]>) -> Vec<Output> {
        let bytes = self.seal(unsealed.as_ref(), e.me());
        deliver_sealed(e, now, &bytes)
    }

    /// Every send in `outs`, decoded at its receiver in a job of `n`:
    /// (receiver, header, message), in send order. Panics on bytes the
    /// receiver would reject.
    pub fn sent(&self, outs: &[Output], n: u32) -> Vec<(Rank, Header, Message<'static>)> {
        let keys = self.keys();
        outs.iter()
            .filter_map(|o| match o {
                Output::Send { to, message } => {
                    // A decoded message borrows its bytes: they live as
                    // long as the test, a few kilobytes at most, so that
                    // the message can outlive `outs`.
                    let bytes: &'static [u8] = Box::leak(message.to_vec().into_boxed_slice());
                    let (header, m) =
                        wire::decode(bytes, &keys, *to, n).expect("the Engine sends valid bytes");
                    Some((*to, header, m))
                }
                _ => None,
            })
            .collect()
    }

    /// (receiver, kind) of every send in `outs`, decoded at its receiver
    /// in a job of `n`, in send order.
    pub fn sent_kinds(&self, outs: &[Output], n: u32) -> Vec<(Rank, Kind)> {
        self.sent(outs, n)
            .into_iter()
            .map(|(to, header, _)| (to, header.kind))
            .collect()
    }

    /// The receivers of every send of `kind` in `outs` (decoded in a job of
    /// `n`), in send order; [`sorted`] for the set.
    pub fn sent_to(&self, outs: &[Output], n: u32, kind: Kind) -> Vec<Rank> {
        self.sent(outs, n)
            .into_iter()
            .filter(|(_, header, _)| header.kind == kind)
            .map(|(to, _, _)| to)
            .collect()
    }
}

/// Every output `e` has queued, polled until `poll_output` says `None` (as
/// a driver must after each input before the next); panics past a million,
/// so that an Engine that never stops outputting fails instead of hanging.
pub fn drain(e: &mut Engine) -> Vec<Output> {
    let mut outs = Vec::new();
    for _ in 0..1_000_000 {
        match e.poll_output() {
            Some(o) => outs.push(o),
            None => return outs,
        }
    }
    panic!("poll_output never returned None");
}

/// `e` with its queued outputs (the first heartbeat of a new Engine)
/// drained and dropped.
pub fn drained(mut e: Engine) -> Engine {
    drain(&mut e);
    e
}

/// Hands `e` wire bytes already sealed for it (another Engine's
/// `Output::Send`, or [`Job::seal`]'s), the sender not named by the fabric;
/// panics if `e` refuses them. Returns every output they caused.
pub fn deliver_sealed(e: &mut Engine, now: Time, bytes: &[u8]) -> Vec<Output> {
    e.handle(now, Input::Message { from: None, bytes })
        .expect("accepted");
    drain(e)
}

/// [`deliver_sealed`] from `from`, the sender the fabric names (a
/// connection's peer).
pub fn deliver_from(e: &mut Engine, now: Time, from: Rank, bytes: &[u8]) -> Vec<Output> {
    e.handle(
        now,
        Input::Message {
            from: Some(from),
            bytes,
        },
    )
    .expect("accepted");
    drain(e)
}

/// One timer step of `e` at `now` (`handle_timeout`), its watched slot
/// reading `value`: every output it caused.
pub fn tick(e: &mut Engine, now: Time, value: u64) -> Vec<Output> {
    e.handle_timeout(now, &SlotReading(value));
    drain(e)
}

/// A wake-up for [`serve_deadlines`] and [`run_until`]: `handle_timeout`,
/// the watched slot reading `slot(now)`. (An Engine with host groups also
/// reads its same-host emitter's counter: wake it with `handle_timeout` and
/// [`readings`] in a closure of its own.)
pub fn slot_reading(mut slot: impl FnMut(Time) -> u64) -> impl FnMut(&mut Engine, Time) {
    move |e, now| {
        let value = slot(now);
        e.handle_timeout(now, &SlotReading(value));
    }
}

/// A test's [`Readings`] for `handle_timeout`: slot `s` of the slot page
/// reads `slot(s)`, local rank `r`'s counter `local(r)`.
pub fn readings(
    slot: impl Fn(u16) -> u64,
    local: impl Fn(Rank) -> Option<LocalBeat>,
) -> impl Readings {
    struct From<S, L>(S, L);
    impl<S: Fn(u16) -> u64, L: Fn(Rank) -> Option<LocalBeat>> Readings for From<S, L> {
        fn slot(&self, slot: u16) -> u64 {
            (self.0)(slot)
        }
        fn local_beat(&self, rank: Rank) -> Option<LocalBeat> {
            (self.1)(rank)
        }
    }
    From(slot, local)
}

/// Serves `e`'s deadlines in order as a driver's timer would: at `late`
/// after each deadline (`Duration::ZERO`: on time) calls `wake(e, now)`
/// (a `handle_timeout`: [`slot_reading`]), drains, and hands `step` the
/// Engine, the wake-up time and the outputs. Returns the first `Some` of `step`;
/// `None` once `e` has no deadline or its next wake-up would be after
/// `until`. Panics after a million wake-ups (a deadline that never moves).
pub fn serve_deadlines<T>(
    e: &mut Engine,
    until: Time,
    late: Duration,
    mut wake: impl FnMut(&mut Engine, Time),
    mut step: impl FnMut(&Engine, Time, Vec<Output>) -> Option<T>,
) -> Option<T> {
    for _ in 0..1_000_000 {
        let now = e.next_deadline()? + late;
        if now > until {
            return None;
        }
        wake(e, now);
        let outs = drain(e);
        if let Some(found) = step(e, now, outs) {
            return Some(found);
        }
    }
    panic!("a million wake-ups before {until}");
}

/// Serves `e`'s deadlines on time up to `until` ([`serve_deadlines`]),
/// waking it with `wake`: everything it output.
pub fn run_until(e: &mut Engine, until: Time, wake: impl FnMut(&mut Engine, Time)) -> Vec<Output> {
    let mut outs = Vec::new();
    serve_deadlines(e, until, Duration::ZERO, wake, |_, _, step| {
        outs.extend(step);
        None::<()>
    });
    outs
}

/// The events among `outs`, in order.
pub fn events(outs: &[Output]) -> Vec<Event> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Event(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

/// (rank, cause) of every `Failed` event among `outs`, in order.
pub fn failures(outs: &[Output]) -> Vec<(Rank, Cause)> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Event(Event::Failed { rank, cause, .. }) => Some((*rank, *cause)),
            _ => None,
        })
        .collect()
}

/// (receiver, wire bytes) of every send of `kind` among `outs`, in order:
/// bytes to hand another Engine ([`deliver_sealed`]) or to decode.
pub fn sends_of(outs: &[Output], kind: Kind) -> Vec<(Rank, Vec<u8>)> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Send { to, message } if message.kind() == Some(kind) => {
                Some((*to, message.to_vec()))
            }
            _ => None,
        })
        .collect()
}

/// A simulation of `n` ranks with seed `seed` and the faults `faults`
/// (`FaultSpec` strings: "crash:5@300ms", …), the rest the simulator's
/// default: each `sim_*` file sets what it varies (hosts, quorum, …) on
/// top.
pub fn sim_config<S: AsRef<str>>(n: u32, faults: &[S], seed: u64) -> SimConfig {
    let mut cfg = SimConfig::new(n);
    cfg.seed = seed;
    cfg.faults = faults
        .iter()
        .map(|f| f.as_ref().parse::<FaultSpec>().expect("valid spec"))
        .collect();
    cfg
}

/// Runs the simulation `cfg` to its end: its report.
pub fn simulate(cfg: SimConfig) -> SimReport {
    Simulator::new(cfg).expect("valid simulation").run()
}
