//! A deterministic discrete-event simulator that drives N Engines on
//! virtual time over a modelled network.
//!
//! Owns: virtual time, the event queue, the network model (per-link
//! latency and jitter, partitions, a per-message rule hook), the fault
//! schedule, the slot-memory model, and the metrics. Must not: read a clock
//! (wall time and memory are measured by the driver), or iterate a hash
//! map into a result.
//!
//! One seed determines everything: the network jitter, the random fault
//! picks and the leave stagger each get a PCG64 stream derived from it.
//! Events at the same virtual time run in the order they were scheduled.
//!
//! Heartbeats are not simulated write by write: every Engine runs in
//! [`HeartbeatMode::Modelled`](crate::HeartbeatMode) and the
//! [`slots`] model computes slot values when an observer's deadline fires.

mod queue;
mod report;
pub mod slots;
pub mod spec;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand::{RngCore, SeedableRng};
use rand_pcg::Pcg64;

pub use report::{FailureReport, KindTotals, SimReport, Totals};
pub use spec::{FaultKind, FaultSpec, parse_duration};

use crate::wire::{self, Kind, Message};
use crate::{
    Cause, ConfigError, Engine, EngineConfig, Event, Input, Output, Rank, Ring, Time,
    TransportErrorKind,
};
use queue::EventQueue;
use slots::SlotModel;

/// The modelled network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetModel {
    /// One-way latency of every link.
    pub latency: Duration,
    /// Uniform extra delay in `[0, jitter]` per message.
    pub jitter: Duration,
    /// When a write or send towards a dead process errors (in-band
    /// evidence), this long after it was issued; `None`: never.
    pub inband_latency: Option<Duration>,
}

impl Default for NetModel {
    fn default() -> Self {
        NetModel {
            latency: Duration::from_micros(2),
            jitter: Duration::from_nanos(500),
            inband_latency: Some(Duration::from_millis(3)),
        }
    }
}

/// A message about to enter the network, as seen by a [`Rule`].
#[derive(Clone, Copy, Debug)]
pub struct MessageMeta<'a> {
    pub at: Time,
    pub from: Rank,
    pub to: Rank,
    pub kind: Option<Kind>,
    pub bytes: &'a [u8],
}

/// What a [`Rule`] does with a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Deliver this much later than the link would.
    Delay(Duration),
    Drop,
}

/// A per-message hook (turmoil style): pass, delay or drop.
pub type Rule = Box<dyn FnMut(&MessageMeta<'_>) -> Verdict>;

/// A simulation: the job, its settings, the faults.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub ranks: u32,
    /// Ranks are placed on hosts in blocks: host(r) = ⌊r · hosts / ranks⌋.
    pub hosts: u32,
    pub engine: EngineConfig,
    pub net: NetModel,
    pub faults: Vec<FaultSpec>,
    pub seed: u64,
    /// Virtual run length. `None`: until every injected failure is known to
    /// every live rank, and at least a timeout and a check interval have
    /// passed after the last fault (bounded by a timeout per failure
    /// beyond that).
    pub duration: Option<Duration>,
    /// How long a leaving rank keeps running before closing (default: two periods).
    pub linger: Option<Duration>,
    /// Count notice copies per directed link (memory: one entry per link used).
    pub track_links: bool,
}

impl SimConfig {
    pub fn new(ranks: u32) -> SimConfig {
        SimConfig {
            ranks,
            hosts: (ranks / 8).max(1),
            // The simulated links come up at once: no connection set-up to
            // wait for, so the start-up grace is one timeout rather than
            // the runtime's `EngineConfig::DEFAULT_STARTUP_GRACE`.
            engine: EngineConfig {
                startup_grace: Some(EngineConfig::DEFAULT_TIMEOUT),
                ..EngineConfig::default()
            },
            net: NetModel::default(),
            faults: Vec::new(),
            seed: 1,
            duration: None,
            linger: None,
            track_links: false,
        }
    }
}

/// A simulation that cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    #[error("invalid value '{value}' for '--ranks <N>': at least 1 rank is needed")]
    NoRanks { value: u32 },
    #[error(
        "invalid value '{value}' for '--hosts <H>': must be between 1 and the number of ranks ({ranks})"
    )]
    Hosts { value: u32, ranks: u32 },
    #[error("invalid value '{spec}' for '--fail <SPEC>': {why}")]
    Fault { spec: String, why: String },
    #[error("invalid settings: {0}")]
    Config(#[from] ConfigError),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Up,
    Hung,
    Crashed,
    /// Left and closed its endpoint.
    Closed,
}

/// Per-rank simulator state, in one array: one cache miss per event.
#[derive(Clone, Copy, Debug)]
struct RankState {
    /// The deadline a `Timer` event is queued for (`NEVER`: none).
    deadline: Time,
    status: Status,
    flags: u8,
}

/// Largest job `leave:all` is simulated for (see `resolve`).
pub const MAX_LEAVE_ALL: u32 = 16_384;

const FAULTY: u8 = 1;
const EXCLUDED: u8 = 2;
const LEFT: u8 = 4;

#[derive(Clone, Debug)]
enum Action {
    Crash {
        ranks: Vec<Rank>,
        label: &'static str,
    },
    Hang(Rank),
    Resume(Rank),
    Partition(Vec<Rank>),
    Heal,
    Leave(Rank),
    LeaveAll,
    Broadcast(Rank),
    Glitch {
        rank: Rank,
        peer: Rank,
    },
}

enum What {
    Timer(Rank),
    Deliver {
        to: Rank,
        from: Rank,
        bytes: Arc<[u8]>,
    },
    Error {
        to: Rank,
        peer: Rank,
        kind: TransportErrorKind,
    },
    Action(u32),
    Leave(Rank),
    Close(Rank),
}

/// A message waiting for a stopped rank: (sender, bytes).
type Held = (Rank, Arc<[u8]>);

/// Per injected failure.
struct Track {
    rank: Rank,
    fault: &'static str,
    injected_at: Time,
    first_at: Option<Time>,
    detector: Option<Rank>,
    cause: Option<Cause>,
    learned: Vec<u64>,
    last_learned_at: Time,
    max_hops: u16,
    messages: u64,
    bytes: u64,
}

impl Track {
    fn has_learned(&self, r: Rank) -> bool {
        self.learned[(r / 64) as usize] & (1 << (r % 64)) != 0
    }
}

/// The simulator. Build with [`Simulator::new`], optionally set a rule,
/// then [`Simulator::run`].
pub struct Simulator {
    cfg: SimConfig,
    n: u32,
    ring: Arc<Ring>,
    engines: Vec<Engine>,
    state: Vec<RankState>,
    slots: SlotModel,
    queue: EventQueue<What>,
    /// Messages to stopped ranks, delivered when they resume.
    held: BTreeMap<Rank, Vec<Held>>,
    held_errors: BTreeMap<Rank, Vec<(Rank, TransportErrorKind)>>,
    /// The cut-off set of the current partition, sorted.
    partition: Option<Vec<Rank>>,
    net_rng: Pcg64,
    leave_rng: Pcg64,
    rule: Option<Rule>,
    actions: Vec<(Time, Action)>,
    tracks: Vec<Track>,
    track_of: BTreeMap<Rank, usize>,
    now: Time,
    // totals
    events: u64,
    /// Live ranks some live rank declared failed, and how many such reports.
    falsely_declared: std::collections::BTreeSet<Rank>,
    false_reports: u64,
    false_samples: Vec<(Rank, Rank, f64)>,
    reports_by_faulty: u64,
    self_excluded: Vec<Rank>,
    left_events: u64,
    slow_warnings: u64,
    payloads: u64,
    dropped: u64,
    by_kind: [KindTotals; Kind::COUNT + 1],
    link_notices: BTreeMap<(Rank, Rank), u32>,
    notice_cache: Option<(Arc<[u8]>, Vec<usize>)>,
    job_key: u64,
}

fn cut_by(partition: &Option<Vec<Rank>>, a: Rank, b: Rank) -> bool {
    match partition {
        None => false,
        Some(set) => set.binary_search(&a).is_ok() != set.binary_search(&b).is_ok(),
    }
}

fn host_of(r: Rank, hosts: u32, n: u32) -> u32 {
    ((u64::from(r) * u64::from(hosts)) / u64::from(n)) as u32
}

fn ms(t: Time) -> f64 {
    t.as_nanos() as f64 / 1e6
}

/// `k` distinct values of `0..n`, in the order drawn (Floyd's algorithm).
fn sample_distinct(rng: &mut Pcg64, n: u32, k: u32) -> Vec<Rank> {
    let mut chosen = std::collections::BTreeSet::new();
    let mut order = Vec::with_capacity(k as usize);
    for j in (n - k)..n {
        let t = (rng.next_u64() % (u64::from(j) + 1)) as u32;
        let pick = if chosen.contains(&t) { j } else { t };
        chosen.insert(pick);
        order.push(pick);
    }
    order
}

impl Simulator {
    pub fn new(cfg: SimConfig) -> Result<Simulator, SimError> {
        let n = cfg.ranks;
        if n == 0 {
            return Err(SimError::NoRanks { value: n });
        }
        if cfg.hosts == 0 || cfg.hosts > n {
            return Err(SimError::Hosts {
                value: cfg.hosts,
                ranks: n,
            });
        }
        cfg.engine.validate()?;
        let mut master = Pcg64::seed_from_u64(cfg.seed);
        let net_rng = Pcg64::seed_from_u64(master.next_u64());
        let mut fault_rng = Pcg64::seed_from_u64(master.next_u64());
        let leave_rng = Pcg64::seed_from_u64(master.next_u64());
        let ring_seed = master.next_u64();

        let hosts: Vec<u32> = (0..n).map(|r| host_of(r, cfg.hosts, n)).collect();
        let mut engine_cfg = cfg.engine.clone();
        if engine_cfg.ring_seed == 0 {
            engine_cfg.ring_seed = ring_seed;
        }
        let ring = Arc::new(Ring::new(engine_cfg.ring, &hosts, engine_cfg.ring_seed));
        drop(hosts);

        let actions = Self::resolve(&cfg, &ring, &mut fault_rng)?;
        let engine_cfg = Arc::new(engine_cfg);
        let job_key = cfg.seed ^ 0x6666_6464_5349_4D00;
        let mut engines = Vec::with_capacity(n as usize);
        for r in 0..n {
            let mut e = Engine::new(engine_cfg.clone(), ring.clone(), r, job_key, Time::ZERO)?;
            e.model_heartbeats();
            engines.push(e);
        }
        let slots = SlotModel::new(ring.clone(), cfg.engine.period);
        Ok(Simulator {
            n,
            ring,
            engines,
            state: vec![
                RankState {
                    deadline: Time::NEVER,
                    status: Status::Up,
                    flags: 0
                };
                n as usize
            ],
            slots,
            queue: EventQueue::default(),
            held: BTreeMap::new(),
            held_errors: BTreeMap::new(),
            partition: None,
            net_rng,
            leave_rng,
            rule: None,
            actions,
            tracks: Vec::new(),
            track_of: BTreeMap::new(),
            now: Time::ZERO,
            events: 0,
            falsely_declared: std::collections::BTreeSet::new(),
            false_reports: 0,
            false_samples: Vec::new(),
            reports_by_faulty: 0,
            self_excluded: Vec::new(),
            left_events: 0,
            slow_warnings: 0,
            payloads: 0,
            dropped: 0,
            by_kind: Default::default(),
            link_notices: BTreeMap::new(),
            notice_cache: None,
            job_key,
            cfg,
        })
    }

    /// Turns fault specs into concrete actions (random picks drawn here).
    fn resolve(
        cfg: &SimConfig,
        ring: &Ring,
        rng: &mut Pcg64,
    ) -> Result<Vec<(Time, Action)>, SimError> {
        let n = cfg.ranks;
        let mut out = Vec::new();
        for f in &cfg.faults {
            let bad = |why: String| SimError::Fault {
                spec: f.to_string(),
                why,
            };
            let rank = |r: Rank| {
                if r < n {
                    Ok(r)
                } else {
                    Err(bad(format!("rank {r} is outside 0..{n}")))
                }
            };
            let at = Time::ZERO + f.at;
            let action = match &f.kind {
                FaultKind::Crash(r) => Action::Crash {
                    ranks: vec![rank(*r)?],
                    label: "crash",
                },
                FaultKind::Hang(r) => Action::Hang(rank(*r)?),
                FaultKind::Resume(r) => Action::Resume(rank(*r)?),
                FaultKind::Random(k) => {
                    if *k > n {
                        return Err(bad(format!("cannot pick {k} of {n} ranks")));
                    }
                    Action::Crash {
                        ranks: sample_distinct(rng, n, *k),
                        label: "random",
                    }
                }
                FaultKind::Consecutive { first, count } => {
                    if *count > n {
                        return Err(bad(format!("cannot take {count} of {n} ranks")));
                    }
                    let p = ring.position_of(rank(*first)?);
                    Action::Crash {
                        ranks: (0..*count).map(|k| ring.rank_at(p + k)).collect(),
                        label: "consecutive",
                    }
                }
                FaultKind::Host(h) => {
                    if *h >= cfg.hosts {
                        return Err(bad(format!("host {h} is outside 0..{}", cfg.hosts)));
                    }
                    let ranks = (0..n).filter(|&r| host_of(r, cfg.hosts, n) == *h).collect();
                    Action::Crash {
                        ranks,
                        label: "host",
                    }
                }
                FaultKind::AllBut(r) => {
                    let keep = rank(*r)?;
                    Action::Crash {
                        ranks: (0..n).filter(|&x| x != keep).collect(),
                        label: "allbut",
                    }
                }
                FaultKind::Partition(rs) => {
                    let mut v = rs.iter().map(|&r| rank(r)).collect::<Result<Vec<_>, _>>()?;
                    v.sort_unstable();
                    v.dedup();
                    Action::Partition(v)
                }
                FaultKind::Heal => Action::Heal,
                FaultKind::Leave(r) => Action::Leave(rank(*r)?),
                FaultKind::LeaveAll => {
                    if n > MAX_LEAVE_ALL {
                        return Err(bad(format!(
                            "at most {MAX_LEAVE_ALL} ranks: every rank records every leave, so the simulator \
                             of all ranks needs O(N²) memory"
                        )));
                    }
                    Action::LeaveAll
                }
                FaultKind::Broadcast(r) => Action::Broadcast(rank(*r)?),
                FaultKind::Glitch { rank: r, peer } => Action::Glitch {
                    rank: rank(*r)?,
                    peer: rank(*peer)?,
                },
            };
            out.push((at, action));
        }
        Ok(out)
    }

    /// Installs the per-message rule hook.
    pub fn set_rule(&mut self, rule: Rule) {
        self.rule = Some(rule);
    }

    /// The Engine of `rank`, for inspection.
    pub fn engine(&self, rank: Rank) -> &Engine {
        &self.engines[rank as usize]
    }

    pub fn ring(&self) -> &Arc<Ring> {
        &self.ring
    }

    fn is_cut(&self, a: Rank, b: Rank) -> bool {
        cut_by(&self.partition, a, b)
    }

    fn jitter(&mut self) -> Duration {
        let j = self.cfg.net.jitter.as_nanos() as u64;
        if j == 0 {
            Duration::ZERO
        } else {
            Duration::from_nanos(self.net_rng.next_u64() % (j + 1))
        }
    }

    /// Runs to the end and reports. (The report's wall time and peak RSS
    /// are left at zero: the core reads no clock; a driver that measures
    /// them, as `ffd sim` does, fills them in.)
    pub fn run(&mut self) -> SimReport {
        let timeout = self.cfg.engine.timeout;
        for (i, (at, _)) in self.actions.iter().enumerate() {
            self.queue.push(*at, What::Action(i as u32));
        }
        for r in 0..self.n {
            self.after_handle(r);
        }
        let linger = self.linger();
        let last_fault = self
            .actions
            .iter()
            .map(|(at, a)| match a {
                Action::Leave(_) | Action::LeaveAll => *at + linger + self.cfg.engine.period,
                _ => *at,
            })
            .max()
            .unwrap_or(Time::ZERO);
        let warmed = Time::ZERO + self.cfg.engine.startup_grace() + timeout;
        let settle = last_fault.max(warmed) + timeout + self.cfg.engine.check_interval();
        let resolved_failures = self
            .actions
            .iter()
            .map(|(_, a)| match a {
                Action::Crash { ranks, .. } | Action::Partition(ranks) => ranks.len(),
                Action::Hang(_) => 1,
                _ => 0,
            })
            .sum::<usize>()
            .min(64) as u32;
        let end = match self.cfg.duration {
            Some(d) => Time::ZERO + d,
            None => settle + timeout * (resolved_failures + 2),
        };
        let mut next_probe = settle;
        let mut last = Time::ZERO;
        while let Some((at, what)) = self.queue.pop() {
            if at > end {
                last = end;
                break;
            }
            if self.cfg.duration.is_none() && at >= next_probe {
                if self.complete() {
                    last = at;
                    break;
                }
                next_probe = at + timeout / 4;
            }
            self.now = at;
            last = at;
            self.events += 1;
            self.dispatch(what);
        }
        self.report(last)
    }

    fn linger(&self) -> Duration {
        self.cfg.linger.unwrap_or(self.cfg.engine.period * 2)
    }

    fn dispatch(&mut self, what: What) {
        let now = self.now;
        match what {
            What::Timer(r) => {
                if self.state[r as usize].status != Status::Up
                    || self.state[r as usize].deadline != now
                {
                    return;
                }
                self.state[r as usize].deadline = Time::NEVER;
                self.tick(r);
            }
            What::Deliver { to, from, bytes } => {
                if self.is_cut(from, to) {
                    self.dropped += 1;
                    return;
                }
                match self.state[to as usize].status {
                    Status::Up => {
                        // Rejections are counted in the Engine's stats.
                        let _ = self.engines[to as usize].handle(
                            now,
                            Input::Message {
                                from: Some(from),
                                bytes: &bytes,
                            },
                        );
                        self.after_handle(to);
                    }
                    Status::Hung => self.held.entry(to).or_default().push((from, bytes)),
                    Status::Crashed | Status::Closed => {
                        self.bounce(from, to, TransportErrorKind::Send)
                    }
                }
            }
            What::Error { to, peer, kind } => match self.state[to as usize].status {
                Status::Up => {
                    let _ =
                        self.engines[to as usize].handle(now, Input::TransportError { peer, kind });
                    self.after_handle(to);
                }
                Status::Hung => self.held_errors.entry(to).or_default().push((peer, kind)),
                _ => {}
            },
            What::Action(i) => {
                let action = self.actions[i as usize].1.clone();
                self.apply(action);
            }
            What::Leave(r) => {
                if self.state[r as usize].status == Status::Up
                    && self.state[r as usize].flags & (EXCLUDED | LEFT) == 0
                {
                    self.state[r as usize].flags |= LEFT;
                    let _ = self.engines[r as usize].handle(now, Input::Leave);
                    self.after_handle(r);
                    self.queue.push(now + self.linger(), What::Close(r));
                }
            }
            What::Close(r) => {
                if self.state[r as usize].status == Status::Up {
                    self.state[r as usize].status = Status::Closed;
                    self.slots.stop(r, now);
                }
            }
        }
    }

    /// A send or write towards a dead process: its error completion comes
    /// back to the sender after the in-band latency.
    fn bounce(&mut self, sender: Rank, dead: Rank, kind: TransportErrorKind) {
        if let Some(d) = self.cfg.net.inband_latency {
            if matches!(
                self.state[sender as usize].status,
                Status::Up | Status::Hung
            ) {
                self.queue.push(
                    self.now + d,
                    What::Error {
                        to: sender,
                        peer: dead,
                        kind,
                    },
                );
            }
        }
    }

    fn tick(&mut self, r: Rank) {
        let now = self.now;
        let e = &mut self.engines[r as usize];
        if let Some(slot) = e.watched_slot() {
            let value = self.slots.read(r, slot, now);
            let _ = e.handle(now, Input::HeartbeatSlot { slot, value });
        }
        let _ = self.engines[r as usize].handle(now, Input::Tick);
        self.after_handle(r);
    }

    /// Carries out `r`'s outputs and reschedules its deadline.
    fn after_handle(&mut self, r: Rank) {
        let now = self.now;
        for _ in 0..1_000_000 {
            let Some(out) = self.engines[r as usize].poll_output() else {
                break;
            };
            match out {
                Output::WriteHeartbeat { .. } => {}
                Output::HeartbeatStream { to, slot, digest } => {
                    let partition = &self.partition;
                    let changed = self
                        .slots
                        .set_stream(r, to, slot, digest, now, |a, b| cut_by(partition, a, b));
                    if let (true, Some(t)) = (changed, to) {
                        if matches!(
                            self.state[t as usize].status,
                            Status::Crashed | Status::Closed
                        ) {
                            self.bounce(r, t, TransportErrorKind::HeartbeatWrite);
                        }
                    }
                }
                Output::Send { to, bytes } => self.send(r, to, bytes),
                Output::Event(ev) => self.on_event(r, ev),
            }
        }
        let next = self.engines[r as usize].next_deadline().map(|t| t.max(now));
        match next {
            Some(t) if t != self.state[r as usize].deadline => {
                self.state[r as usize].deadline = t;
                self.queue.push(t, What::Timer(r));
            }
            Some(_) => {}
            None => self.state[r as usize].deadline = Time::NEVER,
        }
    }

    fn send(&mut self, from: Rank, to: Rank, bytes: Arc<[u8]>) {
        let kind = wire::peek_kind(&bytes);
        let k = &mut self.by_kind[kind.map_or(Kind::COUNT, Kind::index)];
        k.count += 1;
        k.bytes += bytes.len() as u64;
        if kind == Some(Kind::Notice) {
            self.attribute_notice(&bytes);
            if self.cfg.track_links {
                *self.link_notices.entry((from, to)).or_default() += 1;
            }
        }
        if self.is_cut(from, to) {
            self.dropped += 1;
            return;
        }
        let mut delay = self.cfg.net.latency + self.jitter();
        if let Some(rule) = self.rule.as_mut() {
            match rule(&MessageMeta {
                at: self.now,
                from,
                to,
                kind,
                bytes: &bytes,
            }) {
                Verdict::Pass => {}
                Verdict::Delay(d) => delay += d,
                Verdict::Drop => {
                    self.dropped += 1;
                    return;
                }
            }
        }
        self.queue
            .push(self.now + delay, What::Deliver { to, from, bytes });
    }

    /// Counts a notice copy against every injected failure it names.
    fn attribute_notice(&mut self, bytes: &Arc<[u8]>) {
        if self.tracks.is_empty() {
            return;
        }
        let cached = matches!(&self.notice_cache, Some((b, _)) if Arc::ptr_eq(b, bytes));
        if !cached {
            let mut named = Vec::new();
            if let Ok((_, Message::Notice(n))) = wire::decode(bytes, self.job_key, self.n) {
                for r in n.failed.iter() {
                    if let Some(&i) = self.track_of.get(&r) {
                        named.push(i);
                    }
                }
            }
            self.notice_cache = Some((bytes.clone(), named));
        }
        if let Some((_, named)) = &self.notice_cache {
            for &i in named {
                self.tracks[i].messages += 1;
                self.tracks[i].bytes += bytes.len() as u64;
            }
        }
    }

    fn track(&mut self, r: Rank, label: &'static str) {
        self.state[r as usize].flags |= FAULTY;
        if self.track_of.contains_key(&r) {
            return;
        }
        self.track_of.insert(r, self.tracks.len());
        self.tracks.push(Track {
            rank: r,
            fault: label,
            injected_at: self.now,
            first_at: None,
            detector: None,
            cause: None,
            learned: vec![0; (self.n as usize).div_ceil(64)],
            last_learned_at: Time::ZERO,
            max_hops: 0,
            messages: 0,
            bytes: 0,
        });
        self.notice_cache = None;
    }

    fn crash(&mut self, r: Rank, label: &'static str) {
        if !matches!(self.state[r as usize].status, Status::Up | Status::Hung) {
            return;
        }
        let now = self.now;
        self.state[r as usize].status = Status::Crashed;
        self.slots.stop(r, now);
        self.held.remove(&r);
        self.held_errors.remove(&r);
        self.track(r, label);
        if let Some(d) = self.cfg.net.inband_latency {
            for (_, writer) in self.slots.writers_into(r) {
                if self.state[writer as usize].status == Status::Up {
                    let at = self.slots.next_write(writer, now) + d;
                    self.queue.push(
                        at,
                        What::Error {
                            to: writer,
                            peer: r,
                            kind: TransportErrorKind::HeartbeatWrite,
                        },
                    );
                }
            }
        }
    }

    fn apply(&mut self, action: Action) {
        let now = self.now;
        match action {
            Action::Crash { ranks, label } => {
                for r in ranks {
                    self.crash(r, label);
                }
            }
            Action::Hang(r) => {
                if self.state[r as usize].status == Status::Up {
                    self.state[r as usize].status = Status::Hung;
                    self.slots.stop(r, now);
                    self.track(r, "hang");
                }
            }
            Action::Resume(r) => {
                if self.state[r as usize].status == Status::Hung {
                    self.state[r as usize].status = Status::Up;
                    self.slots.resume(r);
                    // The progress thread wakes: its timers are long overdue.
                    self.state[r as usize].deadline = Time::NEVER;
                    self.tick(r);
                    for (from, bytes) in self.held.remove(&r).unwrap_or_default() {
                        if self.state[r as usize].status != Status::Up {
                            break;
                        }
                        let _ = self.engines[r as usize].handle(
                            now,
                            Input::Message {
                                from: Some(from),
                                bytes: &bytes,
                            },
                        );
                        self.after_handle(r);
                    }
                    for (peer, kind) in self.held_errors.remove(&r).unwrap_or_default() {
                        let _ = self.engines[r as usize]
                            .handle(now, Input::TransportError { peer, kind });
                        self.after_handle(r);
                    }
                    if let Some((t, _)) = self.slots.target(r) {
                        if matches!(
                            self.state[t as usize].status,
                            Status::Crashed | Status::Closed
                        ) {
                            self.bounce(r, t, TransportErrorKind::HeartbeatWrite);
                        }
                    }
                }
            }
            Action::Partition(ranks) => {
                for &r in &ranks {
                    self.track(r, "partition");
                }
                self.partition = Some(ranks.clone());
                let cut = |a: Rank, b: Rank| {
                    ranks.binary_search(&a).is_ok() != ranks.binary_search(&b).is_ok()
                };
                self.slots.cut(&ranks, now, cut);
            }
            Action::Heal => {
                self.partition = None;
                self.slots.heal();
            }
            Action::Leave(r) => self.queue.push(now, What::Leave(r)),
            Action::Glitch { rank, peer } => self.queue.push(
                now,
                What::Error {
                    to: rank,
                    peer,
                    kind: TransportErrorKind::HeartbeatWrite,
                },
            ),
            Action::Broadcast(r) => {
                if self.state[r as usize].status == Status::Up {
                    let payload = format!("payload from {r} at {now}");
                    let _ =
                        self.engines[r as usize].handle(now, Input::Broadcast(payload.as_bytes()));
                    self.after_handle(r);
                }
            }
            Action::LeaveAll => {
                let period = self.cfg.engine.period.as_nanos() as u64;
                for r in 0..self.n {
                    let stagger = Duration::from_nanos(self.leave_rng.next_u64() % period.max(1));
                    self.queue.push(now + stagger, What::Leave(r));
                }
            }
        }
    }

    fn on_event(&mut self, reporter: Rank, ev: Event) {
        let now = self.now;
        match ev {
            Event::Failed {
                rank,
                detector,
                cause,
                hops,
            } => {
                let healthy_reporter =
                    self.state[reporter as usize].flags & (FAULTY | EXCLUDED) == 0;
                if let Some(&i) = self.track_of.get(&rank) {
                    let t = &mut self.tracks[i];
                    if t.first_at.is_none()
                        || (t.cause == Some(Cause::Notice) && cause != Cause::Notice)
                    {
                        t.first_at = t.first_at.or(Some(now));
                        t.detector = Some(detector);
                        t.cause = Some(cause);
                    }
                    let (w, b) = ((reporter / 64) as usize, reporter % 64);
                    if t.learned[w] & (1 << b) == 0 {
                        t.learned[w] |= 1 << b;
                        if healthy_reporter {
                            t.last_learned_at = t.last_learned_at.max(now);
                            t.max_hops = t.max_hops.max(hops);
                        }
                    }
                } else if healthy_reporter {
                    self.false_reports += 1;
                    self.falsely_declared.insert(rank);
                    if self.false_samples.len() < 32 {
                        self.false_samples.push((reporter, rank, ms(now)));
                    }
                } else {
                    self.reports_by_faulty += 1;
                }
            }
            Event::SelfExcluded { .. } => {
                self.state[reporter as usize].flags |= EXCLUDED;
                self.self_excluded.push(reporter);
                // The process stops participating: the slot model stops its beats.
                self.slots.stop(reporter, now);
            }
            Event::Left { .. } => self.left_events += 1,
            Event::SlowEmitter { .. } => self.slow_warnings += 1,
            Event::Payload { .. } => self.payloads += 1,
        }
    }

    /// A rank that should know every failure: never faulted, not excluded,
    /// not leaving, running.
    fn is_live(&self, r: Rank) -> bool {
        self.state[r as usize].flags == 0 && self.state[r as usize].status == Status::Up
    }

    fn missed(&self, t: &Track) -> u64 {
        (0..self.n)
            .filter(|&r| self.is_live(r) && !t.has_learned(r))
            .count() as u64
    }

    fn complete(&self) -> bool {
        self.tracks.iter().all(|t| self.missed(t) == 0)
    }

    fn report(&self, end: Time) -> SimReport {
        let mut failures = Vec::new();
        let mut missed_total = 0;
        for t in &self.tracks {
            let missed = self.missed(t);
            missed_total += missed;
            failures.push(FailureReport {
                rank: t.rank,
                fault: t.fault.to_owned(),
                injected_at_ms: ms(t.injected_at),
                cause: t.cause.map(|c| c.as_str().to_owned()),
                detector: t.detector,
                detected_at_ms: t.first_at.map(ms),
                all_notified_at_ms: (missed == 0 && t.first_at.is_some())
                    .then(|| ms(t.last_learned_at.max(t.first_at.unwrap_or(Time::ZERO)))),
                max_hops: t.max_hops,
                messages: t.messages,
                bytes: t.bytes,
                missed,
            });
        }
        let messages = self
            .by_kind
            .iter()
            .enumerate()
            .filter(|(_, v)| v.count > 0)
            .map(|(i, v)| {
                (
                    Kind::ALL
                        .get(i)
                        .map_or("unknown", |k| k.as_str())
                        .to_owned(),
                    v.clone(),
                )
            })
            .collect();
        SimReport {
            failures,
            totals: Totals {
                ranks: self.n,
                hosts: self.cfg.hosts,
                bcast: self.cfg.engine.bcast.as_str().to_owned(),
                seed: self.cfg.seed,
                false_reports: self.falsely_declared.len() as u64,
                false_report_events: self.false_reports,
                missed_notifications: missed_total,
                reports_by_faulty_ranks: self.reports_by_faulty,
                self_excluded: self.self_excluded.clone(),
                left_events: self.left_events,
                slow_emitter_warnings: self.slow_warnings,
                payloads_delivered: self.payloads,
                dropped_by_network: self.dropped,
                max_notices_per_link: self
                    .cfg
                    .track_links
                    .then(|| self.link_notices.values().copied().max().unwrap_or(0)),
                messages,
                events: self.events,
                virtual_end_ms: ms(end),
                wall_s: 0.0,
                peak_rss_mb: 0.0,
            },
            false_report_samples: self.false_samples.clone(),
        }
    }
}
