//! The modelled job: N Engines as actors, the messages in flight between
//! them, their slot pages, and every step the environment may take.
//!
//! Owns: the [`State`] of one job (Engines shared by `Arc` between the
//! states that did not change them, each with its fingerprint), the
//! [`Action`]s a state allows within the [`Bounds`], and [`Job::apply`],
//! which takes one of them and drives the Engines it concerns through the
//! crate's public API, as the simulator and the fuzz harness do. Must not:
//! judge what an Engine did (that is `props`, called from here with the
//! outputs of each call), or reach into an Engine's private state.
//!
//! The model is asynchronous. Each rank has a clock of its own, which
//! moves only when that rank's deadline fires ([`Action::Tick`]): no
//! message has a delivery time, so a timer may fire before any message in
//! flight arrives (a premature timeout), and messages are delivered in any
//! order across links, in order on each link (a per-sender queue,
//! delivered per receiver in send order: RDM over tcp keeps a connection's
//! order). Heartbeats are modelled ([`HeartbeatMode::Modelled`]): a live
//! emitter that reaches its observer has written a new beat by the
//! observer's next reading, unless a stall (a premature timeout) says it
//! has not. Faults: a crash (its copies still queued may be cut: a crash
//! in the middle of a fan-out), the loss or duplication of a copy, a
//! partition between two groups (copies across it wait; heartbeats do not
//! cross it) and its heal. A copy sent to a crashed rank fails at its
//! sender with proof (the peer's kernel refuses it), as the simulator's
//! dead processes do; so does a heartbeat write to a crashed observer.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ffd_protocol::liveness::{self, ProbeAnswer};
use ffd_protocol::wire::{self, JobKeys};
use ffd_protocol::{
    BcastKind, Engine, EngineConfig, EngineOptions, Evidence, FabricSaid, HeartbeatMode,
    InbandMode, Input, Output, Participation, QuorumMode, Rank, Readings, Ring, RingKind, Time,
    TransportErrorKind, View, slot_value,
};

use super::props::{self, Check};
use super::{Bounds, Log};

/// Every clock starts here, later than the fingerprint's horizon, so that
/// the start values `Time::ZERO` of some Engine fields read as ancient
/// from the first step (see `Engine::model_fingerprint`).
pub const START: Time = Time::from_nanos(1_000_000_000_000);

/// A copy in flight: its receiver and its sealed bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Packet {
    pub to: Rank,
    pub bytes: Arc<[u8]>,
}

/// Where a rank's heartbeats go (its last `HeartbeatStream`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stream {
    pub to: Rank,
    pub slot: u16,
    pub generation: u32,
    pub digest: u32,
}

/// One rank.
#[derive(Clone, Debug)]
pub struct Node {
    pub engine: Arc<Engine>,
    /// `engine.model_fingerprint(clock, ..)`, kept so that a state's hash
    /// costs nothing per Engine that did not change.
    pub fp: u64,
    /// This rank's time (not hashed: the fingerprint is relative to it).
    pub clock: Time,
    /// How far this rank's time advanced since the start, in the job's
    /// common time (the clock's origin may change when a state takes an
    /// equal Engine made at another time). Hashed only relative to the
    /// slowest rank's, and only when the skew is bounded.
    pub elapsed: Duration,
    /// Crashed: takes no step, sends and writes nothing more.
    pub crashed: bool,
    pub stream: Option<Stream>,
    /// The slots of this rank's slot page that were written, ascending.
    pub page: Vec<(u16, u64)>,
    /// `Input::Agree` calls this rank made.
    pub calls: u32,
}

/// A copy of a rank's slot page (the slots written), as its Engine reads
/// it at a deadline.
struct Page(Vec<(u16, u64)>);

impl Readings for Page {
    fn slot(&self, slot: u16) -> u64 {
        self.0
            .iter()
            .find(|(s, _)| *s == slot)
            .map_or(0, |&(_, v)| v)
    }
}

impl Node {
    fn slot(&self, slot: u16) -> u64 {
        self.page
            .iter()
            .find(|(s, _)| *s == slot)
            .map_or(0, |&(_, v)| v)
    }

    fn write(&mut self, slot: u16, value: u64) {
        match self.page.binary_search_by_key(&slot, |&(s, _)| s) {
            Ok(i) => self.page[i].1 = value,
            Err(i) => self.page.insert(i, (slot, value)),
        }
    }

    fn clear(&mut self, slot: u16) {
        self.page.retain(|&(s, _)| s != slot);
    }
}

/// How much of each bounded fault or call a path used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Used {
    pub crashes: u32,
    pub losses: u32,
    pub duplicates: u32,
    pub stalls: u32,
    pub partitions: u32,
    pub broadcasts: u32,
    pub leaves: u32,
    pub probes: u32,
}

/// What the properties remember of a path (ghost state).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ghost {
    /// Per rank, the sets of the views it raised, in order.
    pub views: Vec<Vec<Vec<Rank>>>,
    /// Per rank, its user agreements' decisions, in order: flags and view.
    pub decisions: Vec<Vec<(u64, View)>>,
    /// The side (holding rank 0) of the last partition, as a bit set.
    pub side: Option<u32>,
    /// The ranks some rank that had not crashed had declared when the
    /// partition began (out already, on either side), as a bit set.
    pub out_at_cut: u32,
    /// Properties broken on this path, a bit per [`props::Prop`].
    pub broken: u32,
}

/// One state of the job.
#[derive(Clone, Debug)]
pub struct State {
    pub nodes: Vec<Node>,
    /// Per sender, the copies it sent that are still in flight, in send
    /// order.
    pub outbox: Vec<Vec<Packet>>,
    /// The side of the partition holding rank 0, as a bit set; `None`: no
    /// partition now.
    pub cut: Option<u32>,
    pub used: Used,
    /// Whether the skew between clocks is bounded (then the leads are part
    /// of the state).
    pub skewed: bool,
    /// Shared between states until a step changes it.
    pub ghost: Arc<Ghost>,
    /// Steps taken to here (not hashed: breadth-first, a state is first
    /// reached by a shortest path).
    pub steps: u32,
    /// The steps taken to here, newest first (not hashed): the trace of a
    /// counterexample.
    pub path: Option<Arc<Step>>,
    /// How each broken property broke, in words (not hashed).
    pub why: [Option<Arc<str>>; props::Prop::ALL.len()],
}

impl Hash for State {
    fn hash<H: Hasher>(&self, h: &mut H) {
        for n in &self.nodes {
            (n.fp, n.crashed, n.stream, &n.page, n.calls).hash(h);
        }
        self.leads().hash(h);
        self.outbox.hash(h);
        self.cut.hash(h);
        self.used.hash(h);
        self.ghost.hash(h);
    }
}

impl PartialEq for State {
    fn eq(&self, other: &Self) -> bool {
        self.nodes.len() == other.nodes.len()
            && self.nodes.iter().zip(&other.nodes).all(|(a, b)| {
                (a.fp, a.crashed, a.stream, &a.page, a.calls)
                    == (b.fp, b.crashed, b.stream, &b.page, b.calls)
            })
            && self.leads() == other.leads()
            && self.outbox == other.outbox
            && self.cut == other.cut
            && self.used == other.used
            && self.ghost == other.ghost
    }
}

impl Eq for State {}

impl State {
    /// Whether `a` and `b` are on opposite sides of the partition.
    pub fn split(&self, a: Rank, b: Rank) -> bool {
        self.cut
            .is_some_and(|side| (side >> a & 1) != (side >> b & 1))
    }

    /// Nothing in flight that could still arrive.
    pub fn drained(&self) -> bool {
        self.outbox.iter().all(Vec::is_empty)
    }

    /// The next copy from `from` to `to`, if any (per-link order).
    fn head(&self, from: Rank, to: Rank) -> Option<usize> {
        self.outbox[from as usize].iter().position(|p| p.to == to)
    }

    /// Whether `r`'s clock runs: it has not crashed and has a deadline.
    fn running(&self, r: Rank) -> bool {
        let n = &self.nodes[r as usize];
        !n.crashed && n.engine.next_deadline().is_some()
    }

    /// The time of the slowest running rank other than `but`.
    fn slowest(&self, but: Rank) -> Option<Duration> {
        (0..self.nodes.len() as Rank)
            .filter(|&r| r != but && self.running(r))
            .map(|r| self.nodes[r as usize].elapsed)
            .min()
    }

    /// With the skew bounded, how far each running rank's time is ahead of
    /// the slowest's (part of the state: it bounds which rank may tick).
    fn leads(&self) -> Vec<u64> {
        if !self.skewed {
            return Vec::new();
        }
        let n = self.nodes.len() as Rank;
        let slowest = (0..n)
            .filter(|&r| self.running(r))
            .map(|r| self.nodes[r as usize].elapsed)
            .min()
            .unwrap_or_default();
        (0..n)
            .map(|r| match self.running(r) {
                true => (self.nodes[r as usize].elapsed - slowest).as_nanos() as u64,
                false => u64::MAX,
            })
            .collect()
    }

    /// Not crashed, and still a member: neither left nor excluded.
    pub fn active(&self, r: Rank) -> bool {
        let n = &self.nodes[r as usize];
        !n.crashed && n.engine.participation() == Participation::Active
    }
}

/// A step of a path, and the path before it.
#[derive(Debug)]
pub struct Step {
    pub action: Action,
    pub before: Option<Arc<Step>>,
}

impl State {
    /// The actions of the path to this state, in order.
    pub fn actions(&self) -> Vec<Action> {
        let mut out = Vec::with_capacity(self.steps as usize);
        let mut at = self.path.as_deref();
        while let Some(step) = at {
            out.push(step.action);
            at = step.before.as_deref();
        }
        out.reverse();
        out
    }
}

/// One step of the environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The next copy from `from` reaches `to` (or, `to` crashed, fails at
    /// `from` with proof).
    Deliver {
        from: Rank,
        to: Rank,
    },
    /// The next copy from `from` to `to` arrives and stays in flight too.
    Duplicate {
        from: Rank,
        to: Rank,
    },
    /// The next copy from `from` to `to` is lost.
    Lose {
        from: Rank,
        to: Rank,
    },
    /// `rank`'s deadline: its clock jumps to it, it reads its slot (a live
    /// emitter's new beat there if `beat`; a stall if one could have
    /// landed and did not) and runs its due timers.
    Tick {
        rank: Rank,
        beat: bool,
    },
    /// `rank`'s heartbeat write to its crashed observer fails with proof.
    WriteError {
        rank: Rank,
    },
    /// `rank` probes its emitter's liveness port: refused if the emitter
    /// crashed (and no cut hides its host), unanswered across a cut, and
    /// for a live emitter greeted (`greeted`) or not (it is stopped or
    /// slow: its kernel completes the handshake, nobody greets).
    Probe {
        rank: Rank,
        greeted: bool,
    },
    /// `rank` crashes; of its copies in flight the first `keep` had left.
    Crash {
        rank: Rank,
        keep: u32,
    },
    /// A partition: `side` (holding rank 0) is cut from the rest.
    Cut {
        side: u32,
    },
    Heal,
    /// `rank`'s host broadcasts a payload.
    Broadcast {
        rank: Rank,
    },
    /// `rank`'s host calls its next user agreement.
    Agree {
        rank: Rank,
    },
    /// `rank`'s host leaves.
    Leave {
        rank: Rank,
    },
}

/// The job and its bounds: a `stateright::Model`.
pub struct Job {
    pub bounds: Bounds,
    pub config: Arc<EngineConfig>,
    pub keys: Arc<JobKeys>,
    pub ring: Arc<Ring>,
    /// The fingerprint's horizon: longer than any span the Engine compares
    /// a past time with, far shorter than [`START`].
    pub horizon: Duration,
    /// What the run found so far (written by the property checks).
    pub found: Mutex<Found>,
    /// Every distinct Engine state met, by fingerprint, with the clock it
    /// was made at: the states of a run share one copy of each (a state
    /// that reaches it another way takes this one and its clock, which
    /// behave the same as its own).
    engines: Mutex<HashMap<u64, (Arc<Engine>, Time)>>,
    /// Every distinct copy in flight met.
    packets: Mutex<HashSet<Arc<[u8]>>>,
}

/// The first state found (fewest steps) breaking each property, and the
/// fewest steps found to each `sometimes` property.
#[derive(Default)]
pub struct Found {
    pub broken: [Option<State>; props::Prop::ALL.len()],
    pub reached: [Option<u32>; super::SOMETIMES.len()],
}

/// The configuration every modelled Engine runs: one check per timeout
/// (each check a possible verdict), no start-up grace (links are up at
/// once), the defaults otherwise (majority quorum, in-band proof declared
/// at once, BMG broadcast, payload repair and holds).
pub fn config() -> EngineConfig {
    EngineConfig {
        period: Duration::from_millis(1),
        timeout: Duration::from_millis(4),
        inband: InbandMode::Declare,
        quorum: QuorumMode::Majority,
        bcast: BcastKind::Bmg,
        ring: RingKind::Rank,
        checks_per_timeout: 1,
        startup_grace: Some(Duration::ZERO),
        max_payload: 16,
        ..EngineConfig::default()
    }
}

impl Job {
    pub fn new(bounds: Bounds) -> Job {
        let config = config();
        // The longest span the Engine compares a past time with is a
        // timeout stretched by the own health multiplier, at most
        // `health_max` timeouts (docs/design.md §4.3 "Timeout"; in the model every
        // deadline fires on time, so the multiplier stays 1).
        let horizon = config.timeout * (config.health_max + 1);
        Job {
            ring: Arc::new(Ring::by_rank(bounds.ranks)),
            keys: Arc::new(JobKeys::new(0x6D6F_6465_6C00_0001, [0x6D; 32])),
            config: Arc::new(config),
            horizon,
            bounds,
            found: Mutex::default(),
            engines: Mutex::default(),
            packets: Mutex::default(),
        }
    }

    pub fn n(&self) -> u32 {
        self.bounds.ranks
    }

    /// Whether `p` holds on the path to `s`; the first breach found (the
    /// fewest steps) is kept for the report.
    pub fn judge(&self, s: &State, p: props::Prop) -> bool {
        if props::holds(s, p) {
            return true;
        }
        let mut found = self.found.lock().expect("no checker thread panics");
        let first = &mut found.broken[p as usize];
        if first.as_ref().is_none_or(|f| s.steps < f.steps) {
            *first = Some(s.clone());
        }
        false
    }

    /// Whether `sometimes` property `i` holds in `s`; the fewest steps
    /// found to it are kept for the report.
    pub fn sometimes(&self, s: &State, i: usize) -> bool {
        if !super::SOMETIMES[i].1(s) {
            return false;
        }
        let mut found = self.found.lock().expect("no checker thread panics");
        let r = &mut found.reached[i];
        *r = Some(r.map_or(s.steps, |r| r.min(s.steps)));
        true
    }

    /// Every rank started at [`START`], its first outputs carried out.
    pub fn initial(&self) -> State {
        let n = self.n();
        let mut s = State {
            nodes: Vec::with_capacity(n as usize),
            outbox: vec![Vec::new(); n as usize],
            cut: None,
            used: Used::default(),
            skewed: self.bounds.skew.is_some(),
            ghost: Arc::new(Ghost {
                views: vec![Vec::new(); n as usize],
                decisions: vec![Vec::new(); n as usize],
                ..Ghost::default()
            }),
            steps: 0,
            path: None,
            why: Default::default(),
        };
        let mut fresh = Vec::new();
        for r in 0..n {
            let mut engine = Engine::new(
                self.config.clone(),
                self.ring.clone(),
                r,
                self.keys.clone(),
                START,
                EngineOptions {
                    heartbeats: HeartbeatMode::Modelled,
                    ..EngineOptions::default()
                },
            )
            .expect("the model's configuration is valid");
            let outputs: Vec<Output> = std::iter::from_fn(|| engine.poll_output()).collect();
            let fp = engine.model_fingerprint(START, self.horizon);
            let (engine, clock) = self.intern(fp, engine, START);
            s.nodes.push(Node {
                engine,
                fp,
                clock,
                elapsed: Duration::ZERO,
                crashed: false,
                stream: None,
                page: Vec::new(),
                calls: 0,
            });
            fresh.push(outputs);
        }
        let mut log = Log::off();
        for (r, outputs) in fresh.into_iter().enumerate() {
            let check = Check::before(&s, r as Rank);
            self.carry_out(&mut s, r as Rank, outputs, check, &mut log);
        }
        s
    }

    /// The one copy of the Engine state `fp` (this one if it is new),
    /// and the clock it goes with.
    fn intern(&self, fp: u64, engine: Engine, now: Time) -> (Arc<Engine>, Time) {
        let mut engines = self.engines.lock().expect("no checker thread panics");
        engines
            .entry(fp)
            .or_insert_with(|| (Arc::new(engine), now))
            .clone()
    }

    /// The one copy of `bytes` in flight.
    fn packet(&self, bytes: Vec<u8>) -> Arc<[u8]> {
        let mut packets = self.packets.lock().expect("no checker thread panics");
        if let Some(p) = packets.get(bytes.as_slice()) {
            return p.clone();
        }
        let p: Arc<[u8]> = bytes.into();
        packets.insert(p.clone());
        p
    }

    /// The steps `s` allows, in a fixed order.
    pub fn actions(&self, s: &State, out: &mut Vec<Action>) {
        let b = &self.bounds;
        let n = self.n();
        for from in 0..n {
            for to in 0..n {
                if s.head(from, to).is_none() || s.split(from, to) {
                    continue;
                }
                out.push(Action::Deliver { from, to });
                if s.used.duplicates < b.duplicates {
                    out.push(Action::Duplicate { from, to });
                }
                if s.used.losses < b.losses {
                    out.push(Action::Lose { from, to });
                }
            }
        }
        for rank in 0..n {
            let node = &s.nodes[rank as usize];
            let Some(deadline) = node.engine.next_deadline().filter(|_| !node.crashed) else {
                continue;
            };
            if let (Some(skew), Some(slowest)) = (b.skew, s.slowest(rank)) {
                let at = node.elapsed + deadline.saturating_since(node.clock);
                if at > slowest + self.config.timeout * skew {
                    continue;
                }
            }
            if self.beat_can_land(s, rank) {
                out.push(Action::Tick { rank, beat: true });
                if s.used.stalls < b.stalls {
                    out.push(Action::Tick { rank, beat: false });
                }
            } else {
                out.push(Action::Tick { rank, beat: false });
            }
        }
        for rank in 0..n {
            let node = &s.nodes[rank as usize];
            if !node.crashed
                && node.engine.participation() != Participation::Excluded
                && node
                    .stream
                    .is_some_and(|st| s.nodes[st.to as usize].crashed && !s.split(rank, st.to))
            {
                out.push(Action::WriteError { rank });
            }
        }
        for rank in 0..n {
            if s.used.probes >= b.probes || !s.active(rank) {
                continue;
            }
            let Some(e) = s.nodes[rank as usize]
                .engine
                .emitter()
                .filter(|&e| e != rank)
            else {
                continue;
            };
            if !s.nodes[e as usize].crashed && !s.split(rank, e) {
                out.push(Action::Probe {
                    rank,
                    greeted: true,
                });
            }
            out.push(Action::Probe {
                rank,
                greeted: false,
            });
        }
        for rank in 0..n {
            if !s.active(rank) {
                continue;
            }
            if s.used.broadcasts < b.broadcasts {
                out.push(Action::Broadcast { rank });
            }
            if s.nodes[rank as usize].calls < b.agreements {
                out.push(Action::Agree { rank });
            }
            if s.used.leaves < b.leaves {
                out.push(Action::Leave { rank });
            }
        }
        if s.used.crashes < b.faults {
            for rank in 0..n {
                let node = &s.nodes[rank as usize];
                if node.crashed || node.engine.participation() == Participation::Excluded {
                    continue;
                }
                let queued = s.outbox[rank as usize].len() as u32;
                for keep in (0..=queued).rev() {
                    out.push(Action::Crash { rank, keep });
                }
            }
        }
        match s.cut {
            Some(_) => out.push(Action::Heal),
            None if s.used.partitions < b.partitions => {
                // The sides holding rank 0, each proper and non-empty.
                for side in (1..(1u32 << n) - 1).filter(|m| m & 1 == 1) {
                    out.push(Action::Cut { side });
                }
            }
            None => {}
        }
    }

    /// Whether a live emitter that reaches `rank` heartbeats into the slot
    /// it watches.
    fn beat_can_land(&self, s: &State, rank: Rank) -> bool {
        let Some(slot) = s.nodes[rank as usize].engine.watched_slot() else {
            return false;
        };
        s.nodes.iter().enumerate().any(|(e, node)| {
            !node.crashed
                && node
                    .stream
                    .is_some_and(|st| st.to == rank && st.slot == slot && e as Rank != rank)
                && !s.split(e as Rank, rank)
        })
    }

    /// The state after `action` (which `actions` offered in `s`), logging
    /// what happened into `log` when it is on.
    pub fn apply(&self, s: &State, action: Action, log: &mut Log) -> State {
        let mut s = s.clone();
        s.steps += 1;
        s.path = Some(Arc::new(Step {
            action,
            before: s.path.take(),
        }));
        match action {
            Action::Deliver { from, to } => {
                let i = s.head(from, to).expect("offered: a copy is in flight");
                let p = s.outbox[from as usize].remove(i);
                self.deliver(&mut s, from, p, log);
            }
            Action::Duplicate { from, to } => {
                let i = s.head(from, to).expect("offered: a copy is in flight");
                let p = s.outbox[from as usize][i].clone();
                s.used.duplicates += 1;
                self.deliver(&mut s, from, p, log);
            }
            Action::Lose { from, to } => {
                let i = s.head(from, to).expect("offered: a copy is in flight");
                let p = s.outbox[from as usize].remove(i);
                s.used.losses += 1;
                log.note(|| format!("lost: {}", super::trace::message(self, from, &p)));
            }
            Action::Tick { rank, beat } => self.tick(&mut s, rank, beat, log),
            Action::WriteError { rank } => {
                let Some(st) = s.nodes[rank as usize].stream else {
                    return s;
                };
                let input = Input::TransportError {
                    peer: st.to,
                    kind: TransportErrorKind::HeartbeatWrite,
                    evidence: Evidence::Proof,
                    said: FabricSaid::DeadProcess,
                };
                self.call(&mut s, rank, log, |e, now| {
                    let _ = e.handle(now, input);
                });
            }
            Action::Probe { rank, greeted } => {
                s.used.probes += 1;
                let Some(e) = s.nodes[rank as usize].engine.emitter() else {
                    return s;
                };
                let answer = self.probe_answer(&s, rank, e, greeted);
                log.note(|| format!("rank {rank}'s probe of rank {e}: {answer:?}"));
                if let Some(evidence) = liveness::evidence(answer) {
                    let said = match answer {
                        ProbeAnswer::Refused => FabricSaid::ProbeRefused,
                        _ => FabricSaid::Nothing,
                    };
                    let input = Input::TransportError {
                        peer: e,
                        kind: TransportErrorKind::LivenessProbe,
                        evidence,
                        said,
                    };
                    self.call(&mut s, rank, log, |eng, now| {
                        let _ = eng.handle(now, input);
                    });
                }
            }
            Action::Crash { rank, keep } => {
                let node = &mut s.nodes[rank as usize];
                node.crashed = true;
                s.used.crashes += 1;
                let outbox = &mut s.outbox[rank as usize];
                let cut = outbox.len() - keep as usize;
                outbox.truncate(keep as usize);
                log.note(|| format!("{cut} queued copies of rank {rank} never left"));
            }
            Action::Cut { side } => {
                s.cut = Some(side);
                let out = (0..self.n())
                    .filter(|&r| s.nodes.iter().any(|m| !m.crashed && m.engine.is_failed(r)))
                    .fold(0, |m, r| m | 1 << r);
                let ghost = Arc::make_mut(&mut s.ghost);
                ghost.side = Some(side);
                ghost.out_at_cut = out;
                s.used.partitions += 1;
            }
            Action::Heal => s.cut = None,
            Action::Broadcast { rank } => {
                s.used.broadcasts += 1;
                let seq = s.nodes[rank as usize].engine.payload_mark(rank) + 1;
                let bytes = props::payload_bytes(rank, seq);
                self.call(&mut s, rank, log, |e, now| {
                    let _ = e.handle(now, Input::Broadcast(&bytes));
                });
            }
            Action::Agree { rank } => {
                s.nodes[rank as usize].calls += 1;
                let flags = props::agree_flags(rank);
                self.call(&mut s, rank, log, |e, now| {
                    let _ = e.handle(now, Input::Agree { flags });
                });
            }
            Action::Leave { rank } => {
                s.used.leaves += 1;
                self.call(&mut s, rank, log, |e, now| {
                    let _ = e.handle(now, Input::Leave);
                });
            }
        }
        props::after_step(self, &mut s);
        s
    }

    /// What `rank`'s probe of `e` gets: a crashed emitter's kernel refuses
    /// (unless a cut hides its host); a cut answers nothing; a live
    /// emitter greets if it runs (`greeted`), and answers nothing if it is
    /// stopped or slow.
    pub fn probe_answer(&self, s: &State, rank: Rank, e: Rank, greeted: bool) -> ProbeAnswer {
        if s.split(rank, e) {
            ProbeAnswer::NoAnswer
        } else if s.nodes[e as usize].crashed {
            ProbeAnswer::Refused
        } else if greeted {
            ProbeAnswer::Greeted
        } else {
            ProbeAnswer::NoAnswer
        }
    }

    /// Hands copy `p` from `from` to its receiver; to a crashed one it
    /// fails at the sender, with proof.
    fn deliver(&self, s: &mut State, from: Rank, p: Packet, log: &mut Log) {
        let to = p.to;
        log.note(|| format!("deliver {}", super::trace::message(self, from, &p)));
        if s.nodes[to as usize].crashed {
            if s.nodes[from as usize].crashed {
                return;
            }
            log.note(|| format!("rank {to} crashed: the send fails at rank {from} with proof"));
            let input = Input::TransportError {
                peer: to,
                kind: TransportErrorKind::Send,
                evidence: Evidence::Proof,
                said: FabricSaid::DeadProcess,
            };
            self.call(s, from, log, |e, now| {
                let _ = e.handle(now, input);
            });
            return;
        }
        self.call(s, to, log, |e, now| {
            let _ = e.handle(
                now,
                Input::Message {
                    from: Some(from),
                    bytes: &p.bytes,
                },
            );
        });
    }

    /// `rank`'s deadline fires.
    fn tick(&self, s: &mut State, rank: Rank, beat: bool, log: &mut Log) {
        let node = &s.nodes[rank as usize];
        let Some(deadline) = node.engine.next_deadline() else {
            return;
        };
        let now = node.clock.max(deadline);
        let node = &mut s.nodes[rank as usize];
        node.elapsed += now - node.clock;
        node.clock = now;
        if beat {
            let writers: Vec<Stream> = (0..self.n())
                .filter(|&e| e != rank && !s.nodes[e as usize].crashed && !s.split(e, rank))
                .filter_map(|e| s.nodes[e as usize].stream)
                .filter(|st| st.to == rank)
                .collect();
            let node = &mut s.nodes[rank as usize];
            for st in writers {
                // The beat counter moves (1 and 2 in turn: all a reader
                // compares is whether the value changed).
                let counter = if node.slot(st.slot) as u16 == 1 { 2 } else { 1 };
                node.write(st.slot, slot_value(st.generation, st.digest, counter));
            }
        } else if self.beat_can_land(s, rank) {
            s.used.stalls += 1;
            log.note(|| format!("rank {rank}'s emitter is live but its beat is late (a stall)"));
        }
        let page = Page(s.nodes[rank as usize].page.clone());
        log.note(|| format!("rank {rank}'s deadline at {}", since_start(now)));
        self.call(s, rank, log, |e, now| e.handle_timeout(now, &page));
    }

    /// Runs `f` on a copy of `rank`'s Engine at its clock, then carries its
    /// outputs out and checks them.
    fn call(&self, s: &mut State, rank: Rank, log: &mut Log, f: impl FnOnce(&mut Engine, Time)) {
        let check = Check::before(s, rank);
        let node = &s.nodes[rank as usize];
        let now = node.clock;
        let mut engine = Engine::clone(&node.engine);
        f(&mut engine, now);
        let outputs: Vec<Output> = std::iter::from_fn(|| engine.poll_output()).collect();
        let fp = engine.model_fingerprint(now, self.horizon);
        let (engine, clock) = self.intern(fp, engine, now);
        let node = &mut s.nodes[rank as usize];
        (node.fp, node.engine, node.clock) = (fp, engine, clock);
        self.carry_out(s, rank, outputs, check, log);
    }

    /// Carries out `rank`'s outputs: copies into its outbox, heartbeat
    /// streams and slot clears into the model, events to the checks.
    fn carry_out(
        &self,
        s: &mut State,
        rank: Rank,
        outputs: Vec<Output>,
        mut check: Check,
        log: &mut Log,
    ) {
        for o in outputs {
            match o {
                Output::Send { to, message } => {
                    let bytes = self.packet(message.to_vec());
                    check.sent(self, s, rank, to, &bytes);
                    if to < self.n() {
                        s.outbox[rank as usize].push(Packet { to, bytes });
                    }
                }
                Output::HeartbeatStream {
                    to,
                    slot,
                    generation,
                    digest,
                } => {
                    check.stream(s, rank, to);
                    s.nodes[rank as usize].stream = to.map(|to| Stream {
                        to,
                        slot,
                        generation,
                        digest,
                    });
                }
                Output::ClearSlot { slot } => s.nodes[rank as usize].clear(slot),
                Output::Event(e) => {
                    log.note(|| format!("rank {rank}: {}", super::trace::event(&e)));
                    check.event(self, s, rank, &e);
                }
                Output::WriteHeartbeat { .. } | Output::PostOnBoard { .. } => {
                    check.unexpected(s, rank, &o);
                }
            }
        }
        check.done(s, rank);
    }

    /// Decodes `p` as its receiver would (for traces).
    pub fn decode<'a>(
        &self,
        p: &'a Packet,
    ) -> Result<(wire::Header, wire::Message<'a>), ffd_protocol::RejectReason> {
        wire::decode(&p.bytes, &self.keys, p.to, self.n())
    }
}

/// `t` as milliseconds since [`START`].
pub fn since_start(t: Time) -> String {
    format!("{:.3} ms", (t - START).as_secs_f64() * 1e3)
}
