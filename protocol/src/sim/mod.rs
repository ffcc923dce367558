//! A deterministic discrete-event simulator that drives N Engines on
//! virtual time over a modelled network.
//!
//! Owns: virtual time, the agenda of what happens next (`agenda`), the
//! per-rank simulator state, and the driving of the Engines (inputs in,
//! outputs carried out). The rest is in submodules, one concern each:
//! `network` (send times, per-link latency, jitter and FIFO order,
//! partitions, a per-message rule hook), `faults` (the fault schedule and
//! its effects), [`slots`] (the slot-memory model), `metrics` (what is
//! measured, and the report), `payload_log` (who delivered which payload,
//! in which order), `agreements` (what is recorded of agreements and
//! views) and [`spec`] (parsing `--fail`). Must not: read a clock (wall time and
//! memory are measured by the driver), or iterate a hash map into a
//! result.
//!
//! One seed determines everything: the network jitter, the random fault
//! picks and the leave stagger each get a PCG64 stream derived from it.
//! Events at the same virtual time run in the order they were scheduled.
//!
//! Heartbeats are not simulated write by write: every Engine runs in
//! [`HeartbeatMode::Modelled`](crate::HeartbeatMode) and the
//! [`slots`] model computes slot values when an observer's deadline fires.

mod agenda;
mod agreements;
mod faults;
mod metrics;
mod network;
mod payload_log;
mod report;
pub mod slots;
pub mod spec;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use rand::{RngCore, SeedableRng};
use rand_pcg::Pcg64;

pub use faults::MAX_LEAVE_ALL;
pub use network::{MessageMeta, NetModel, Rule, Verdict};
pub use report::{
    AgreementReport, FailureReport, KindTotals, PayloadReport, SimReport, Totals, ViewReport,
};
pub use spec::{FaultSpec, SimFaultKind, parse_duration};

use crate::ranks::fold_digest;
use crate::wire::{JobKeys, Kind, Sealed, seal_into};
use crate::{
    EmitterThread, Engine, EngineConfig, EngineConfigError, EngineOptions, Evidence, FabricSaid,
    HeartbeatMode, Hosts, Input, LocalBeat, Output, Rank, Readings, Ring, Time, TransportErrorKind,
};
use agenda::Agenda;
use agreements::{AgreeTrack, ViewTrack};
use faults::{Action, host_of};
use metrics::Track;
use network::cut_by;
use payload_log::PayloadLog;
use slots::SlotModel;

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
    /// Same-host watching (`docs/design.md` §4.12 "Hosts"): Engines with host
    /// groups, a ring of host leaders, local counters modelled as the time
    /// of each rank's last wake-up, and a crashed process's exit seen by
    /// every live rank of its host after `exit_latency`. (A whole host that
    /// fails sees no exit: nobody is left on it.)
    pub local: bool,
    /// How long a pidfd takes to wake a same-host watcher after an exit.
    pub exit_latency: Duration,
    /// Authenticate every message as on a fabric: a tag made and checked
    /// per copy, sequence numbers per link and the receivers' replay
    /// windows. Off by default: nobody forges in the simulator and no copy
    /// arrives twice or out of order on its link, so they change no outcome
    /// (test `authentication_on_or_off_the_report_is_the_same`), while the
    /// tags took a tenth of its time and the link state a cache miss per
    /// copy and a kilobyte per rank at 2^20. The codec and the source check
    /// run either way.
    pub authenticate: bool,
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
            local: false,
            exit_latency: SimConfig::DEFAULT_EXIT_LATENCY,
            authenticate: false,
        }
    }

    /// A pidfd wake-up measured on the project's machine (about 0.14 ms).
    pub const DEFAULT_EXIT_LATENCY: Duration = Duration::from_micros(150);
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
    Config(#[from] EngineConfigError),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Up,
    Hung,
    Crashed,
    /// Left and closed its endpoint.
    Closed,
}

/// Per-rank simulator state, in one array that every event reads: 16
/// bytes per rank, small enough to stay in the cache at 2^17 ranks.
#[derive(Clone, Copy, Debug)]
struct SimRank {
    /// The deadline a `Timer` event is queued for (`NEVER`: none).
    deadline: Time,
    status: Status,
    flags: u8,
}

const FAULTY: u8 = 1;
const EXCLUDED: u8 = 2;
const LEFT: u8 = 4;
/// Crashed with its whole host (local watching): nothing bounces.
const LOST: u8 = 8;

enum What {
    Timer(Rank),
    Deliver {
        to: Rank,
        from: Rank,
        /// How long before its delivery the copy leaves its sender, in ns
        /// (`network::LONG_FLIGHT`: longer, and kept aside), so that the
        /// record stays at 40 bytes.
        flight_ns: u32,
        copy: InFlight,
    },
    Error {
        to: Rank,
        peer: Rank,
        kind: TransportErrorKind,
        evidence: Evidence,
    },
    /// `to`'s send to `peer` completed (`Input::Sent`).
    Sent {
        to: Rank,
        peer: Rank,
    },
    Action(u32),
    Leave(Rank),
    Close(Rank),
    /// `to`'s pidfd of same-host `rank` became readable.
    Exited {
        to: Rank,
        rank: Rank,
    },
    /// `to` read `detector`'s news of `failed` on its host's notice board.
    Board {
        to: Rank,
        failed: Arc<[Rank]>,
        detector: Rank,
    },
}

/// News read on a host's notice board: the failed ranks, their detector.
type BoardNews = (Arc<[Rank]>, Rank);

/// The input of a modelled transport error: an error from a dead process
/// is proof (`FabricSaid::DeadProcess`); anything else (a glitch) silence.
pub(super) fn transport_error(
    peer: Rank,
    kind: TransportErrorKind,
    evidence: Evidence,
) -> Input<'static> {
    let said = match evidence {
        Evidence::Proof => FabricSaid::DeadProcess,
        Evidence::Silence => FabricSaid::Nothing,
    };
    Input::TransportError {
        peer,
        kind,
        evidence,
        said,
    }
}

/// A copy in flight: the unsealed bytes (shared by the copies of one
/// broadcast step) and its sequence number. Not its tag, a function of
/// these, the receiver and the keys, made again on delivery: tens of
/// millions of copies are in flight at 2^20 ranks, and 16 bytes more each
/// made the agenda a third larger.
struct InFlight {
    unsealed: Arc<[u8]>,
    seq: u64,
}

/// A message waiting for a stopped rank: (sender, copy).
type Held = (Rank, InFlight);

/// The simulator's message key with [`SimConfig::authenticate`]: one fixed
/// key for every run (the tags are computed and checked as on a real
/// fabric; nobody forges here).
const SIM_MESSAGE_KEY: [u8; 32] = *b"ffd simulator message key, fixed";

/// The simulator. Build with [`Simulator::new`], optionally set a rule,
/// then [`Simulator::run`].
pub struct Simulator {
    cfg: SimConfig,
    n: u32,
    ring: Arc<Ring>,
    engines: Vec<Engine>,
    state: Vec<SimRank>,
    /// Per rank, when its next copy can leave (`network`: one every
    /// `send_cost`); read only when it sends, so not in `state`, which
    /// every event reads and which stays small enough for the cache.
    nic_free: Vec<Time>,
    slots: SlotModel,
    queue: Agenda<What>,
    /// Messages to stopped ranks, delivered when they resume.
    held: BTreeMap<Rank, Vec<Held>>,
    held_errors: BTreeMap<Rank, Vec<(Rank, TransportErrorKind, Evidence)>>,
    /// Board news (rank, detector) for stopped ranks, read when they resume.
    held_board: BTreeMap<Rank, Vec<BoardNews>>,
    /// What each host's notice board holds: (host, failed rank).
    board: std::collections::BTreeSet<(u32, Rank)>,
    /// The cut-off set of the current partition, sorted.
    partition: Option<Vec<Rank>>,
    /// Per sender, the links with a copy in flight and the delivery time
    /// of the last one (per-link FIFO, `network`); empty (not one list per
    /// rank) until the first copy whose order needs it.
    in_flight: Vec<Vec<(Rank, Time)>>,
    /// Ranks that went down (crashed or closed) with copies still waiting
    /// to leave, and when (`network`): the few copies that never leave.
    cut_off: BTreeMap<Rank, Time>,
    /// Departure times of the copies in flight longer than
    /// `network::LONG_FLIGHT` (rule delays), per link (sender, receiver),
    /// in the order they arrive (FIFO on each link).
    long_flights: BTreeMap<(Rank, Rank), VecDeque<Time>>,
    /// Copies that never left: their sender crashed before their turn.
    never_left: u64,
    /// Links set up during the run (with `NetModel::connect`), by
    /// (lower rank, higher rank): when each is up.
    links_up: BTreeMap<(Rank, Rank), Time>,
    net_rng: Pcg64,
    leave_rng: Pcg64,
    rule: Option<Rule>,
    actions: Vec<(Time, Action)>,
    tracks: Vec<Track>,
    track_of: BTreeMap<Rank, usize>,
    now: Time,
    // totals
    events: u64,
    /// Ranks never faulted that some rank declared failed, and how many
    /// such reports.
    falsely_declared: std::collections::BTreeSet<Rank>,
    false_reports: u64,
    false_samples: Vec<(Rank, Rank, f64)>,
    /// `Failed` events raised by faulted ranks (about anyone).
    reports_by_faulty: u64,
    /// Of the false reports, those raised by faulted ranks.
    false_reports_by_faulty: u64,
    self_excluded: Vec<Rank>,
    /// When each excluded itself (virtual ms).
    self_excluded_at: Vec<f64>,
    /// Of those, the ranks that excluded themselves for want of a quorum.
    no_quorum_excluded: Vec<Rank>,
    left_events: u64,
    slow_warnings: u64,
    /// `HostFailed` events raised (by any rank).
    host_failed_events: u64,
    payloads: u64,
    payload_log: PayloadLog,
    dropped: u64,
    by_kind: [KindTotals; Kind::COUNT + 1],
    link_notices: BTreeMap<(Rank, Rank), u32>,
    /// The last notice attributed (a copy of it) and the tracks it names.
    notice_cache: Option<(Sealed, Vec<usize>)>,
    keys: Arc<JobKeys>,
    /// The wire bytes of the message being delivered.
    scratch: Vec<u8>,
    /// Host groups (`SimConfig::local`).
    hosts: Option<Arc<Hosts>>,
    /// Each rank's counter: its last wake-up and digest fold then (local
    /// watching only; empty otherwise).
    counters: Vec<Option<LocalBeat>>,
    /// `agree@T` faults so far (the sequence number of the latest).
    agree_calls: u64,
    /// Per user agreement (index `seq - 1`) and per view id (`id - 1`).
    agreements: Vec<AgreeTrack>,
    views: Vec<ViewTrack>,
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
        let keys = Arc::new(if cfg.authenticate {
            JobKeys::new(job_key, SIM_MESSAGE_KEY)
        } else {
            JobKeys::unauthenticated(job_key)
        });
        let groups = cfg.local.then(|| {
            Arc::new(Hosts::blocks(
                engine_cfg.ring,
                n,
                cfg.hosts,
                engine_cfg.ring_seed,
            ))
        });
        let mut engines = Vec::with_capacity(n as usize);
        for r in 0..n {
            let options = EngineOptions {
                hosts: groups.clone(),
                heartbeats: HeartbeatMode::Modelled,
            };
            let mut e = Engine::new(
                engine_cfg.clone(),
                ring.clone(),
                r,
                keys.clone(),
                Time::ZERO,
                options,
            )?;
            if let Some(h) = &groups {
                // Every rank of a host reads its notice board (the Engine
                // leaves itself out).
                let ranks = h.members(h.host_of(r));
                let _ = e.handle(Time::ZERO, Input::BoardReaders { ranks });
            }
            engines.push(e);
        }
        let counters = if cfg.local {
            vec![None; n as usize]
        } else {
            Vec::new()
        };
        let slots = SlotModel::new(ring.clone(), cfg.engine.period);
        Ok(Simulator {
            n,
            ring,
            engines,
            state: vec![
                SimRank {
                    deadline: Time::NEVER,
                    status: Status::Up,
                    flags: 0
                };
                n as usize
            ],
            nic_free: vec![Time::ZERO; n as usize],
            slots,
            queue: Agenda::default(),
            held: BTreeMap::new(),
            held_errors: BTreeMap::new(),
            held_board: BTreeMap::new(),
            board: std::collections::BTreeSet::new(),
            partition: None,
            in_flight: Vec::new(),
            cut_off: BTreeMap::new(),
            long_flights: BTreeMap::new(),
            never_left: 0,
            links_up: BTreeMap::new(),
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
            false_reports_by_faulty: 0,
            self_excluded: Vec::new(),
            self_excluded_at: Vec::new(),
            no_quorum_excluded: Vec::new(),
            left_events: 0,
            slow_warnings: 0,
            host_failed_events: 0,
            payloads: 0,
            payload_log: PayloadLog::default(),
            dropped: 0,
            by_kind: Default::default(),
            link_notices: BTreeMap::new(),
            notice_cache: None,
            keys,
            scratch: Vec::new(),
            hosts: groups,
            counters,
            agree_calls: 0,
            agreements: Vec::new(),
            views: Vec::new(),
            cfg,
        })
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
            if let Some(next) = self.queue.peek_due() {
                self.warm(next);
            }
            self.dispatch(what);
        }
        self.report(last)
    }

    /// Reads now what the event after this one will read first (its
    /// rank's record and the head of its Engine, a delivered copy's
    /// bytes), so that those cache misses overlap with this event's
    /// instead of following them: at 2^20 ranks the Engines and records
    /// span gigabytes read at random, and each event misses on each of
    /// them. Reads only: nothing is changed.
    fn warm(&self, next: &What) {
        let (rank, bytes, timer) = match next {
            What::Deliver { to, copy, .. } => (*to, copy.unsealed.first().copied(), false),
            What::Timer(r) => (*r, None, true),
            _ => return,
        };
        let (Some(state), Some(engine)) = (
            self.state.get(rank as usize),
            self.engines.get(rank as usize),
        ) else {
            return;
        };
        std::hint::black_box((
            state.status,
            engine.participation(),
            engine.failed().first().copied(),
            engine.next_deadline(),
            engine.stats().messages.duplicate_notices,
            bytes,
        ));
        if timer {
            // A timer step reads lines deeper in the Engine, and the slot
            // of its emitter.
            std::hint::black_box((engine.timer_lines(), self.slots.warm(rank)));
        }
    }

    pub(super) fn linger(&self) -> Duration {
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
            What::Deliver {
                to,
                from,
                flight_ns,
                copy,
            } => {
                self.delivered(from, to);
                let departs = self.departure(from, to, flight_ns);
                if !self.left_sender(from, departs) {
                    self.never_left += 1;
                    return;
                }
                if self.is_cut(from, to) {
                    self.dropped += 1;
                    return;
                }
                match self.state[to as usize].status {
                    Status::Up => {
                        self.deliver(to, from, &copy);
                        self.after_handle(to);
                    }
                    Status::Hung => self.held.entry(to).or_default().push((from, copy)),
                    Status::Crashed | Status::Closed => {
                        self.bounce(from, to, TransportErrorKind::Send)
                    }
                }
            }
            What::Error {
                to,
                peer,
                kind,
                evidence,
            } => match self.state[to as usize].status {
                Status::Up => {
                    let _ = self.engines[to as usize]
                        .handle(now, transport_error(peer, kind, evidence));
                    self.after_handle(to);
                }
                Status::Hung => self
                    .held_errors
                    .entry(to)
                    .or_default()
                    .push((peer, kind, evidence)),
                _ => {}
            },
            What::Sent { to, peer } => {
                // A stopped sender reads the completion when it resumes;
                // by then its first beat says as much.
                if self.state[to as usize].status == Status::Up {
                    let _ = self.engines[to as usize].handle(now, Input::Sent { to: peer });
                    self.after_handle(to);
                }
            }
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
                    self.went_down(r);
                    self.slots.stop(r, now);
                }
            }
            What::Board {
                to,
                failed,
                detector,
            } => match self.state[to as usize].status {
                Status::Up => {
                    let input = Input::BoardNotice {
                        failed: &failed,
                        detector,
                    };
                    let _ = self.engines[to as usize].handle(now, input);
                    self.after_handle(to);
                }
                Status::Hung => self
                    .held_board
                    .entry(to)
                    .or_default()
                    .push((failed, detector)),
                _ => {}
            },
            What::Exited { to, rank } => {
                // A stopped watcher learns it from the notices it finds;
                // every rank of the host still up sees the exit itself.
                if self.state[to as usize].status == Status::Up {
                    let seen_by: Vec<Rank> = self.hosts.as_ref().map_or(Vec::new(), |hosts| {
                        hosts
                            .members(hosts.host_of(rank))
                            .iter()
                            .copied()
                            .filter(|&w| {
                                w != rank && w != to && self.state[w as usize].status == Status::Up
                            })
                            .collect()
                    });
                    let _ = self.engines[to as usize].handle(
                        now,
                        Input::Exited {
                            rank,
                            seen_by: &seen_by,
                        },
                    );
                    self.after_handle(to);
                }
            }
        }
    }

    /// `r` posted on its host's notice board: what is new there (the
    /// board's bitmap only grows) every other rank of the host still
    /// running reads after the exit latency (the same futex wake-up), a
    /// stopped one when it resumes. A partition cuts ranks, not hosts: a
    /// cut between two ranks of one host cuts their board too, as if they
    /// were on two hosts.
    fn post_on_board(&mut self, r: Rank, failed: &[Rank], detector: Rank) {
        let Some(hosts) = self.hosts.clone() else {
            return;
        };
        let host = hosts.host_of(r);
        let new: Arc<[Rank]> = failed
            .iter()
            .copied()
            .filter(|&f| self.board.insert((host, f)))
            .collect();
        if new.is_empty() {
            return;
        }
        let at = self.now + self.cfg.exit_latency;
        for &to in hosts.members(host) {
            if to != r
                && matches!(self.state[to as usize].status, Status::Up | Status::Hung)
                && !self.is_cut(r, to)
            {
                let failed = Arc::clone(&new);
                self.queue.push(
                    at,
                    What::Board {
                        to,
                        failed,
                        detector,
                    },
                );
            }
        }
    }

    /// A process of a host crashed: every rank of its host still up sees
    /// the exit after the pidfd latency (local watching only).
    pub(super) fn announce_exit(&mut self, r: Rank) {
        let Some(hosts) = self.hosts.clone() else {
            return;
        };
        let at = self.now + self.cfg.exit_latency;
        for &to in hosts.members(hosts.host_of(r)) {
            if to != r && self.state[to as usize].status == Status::Up {
                self.queue.push(at, What::Exited { to, rank: r });
            }
        }
    }

    /// Fabric heartbeat streams running now (one RDMA write per period
    /// each in the runtime).
    fn heartbeat_streams(&self) -> u64 {
        (0..self.n)
            .filter(|&r| {
                self.state[r as usize].status == Status::Up && self.slots.target(r).is_some()
            })
            .count() as u64
    }

    /// Hands `copy`'s wire bytes, sealed for `to`, to `to`'s Engine, from
    /// `from` as the transport's source (rejections are counted in the
    /// Engine's stats).
    fn deliver(&mut self, to: Rank, from: Rank, copy: &InFlight) {
        self.scratch.clear();
        seal_into(&copy.unsealed, copy.seq, to, &self.keys, &mut self.scratch);
        let _ = self.engines[to as usize].handle(
            self.now,
            Input::Message {
                from: Some(from),
                bytes: &self.scratch,
            },
        );
    }

    pub(super) fn tick(&mut self, r: Rank) {
        let now = self.now;
        let readings = SimReadings {
            slots: &self.slots,
            counters: &self.counters,
            rank: r,
            now,
        };
        self.engines[r as usize].handle_timeout(now, &readings);
        if let Some(c) = self.counters.get_mut(r as usize) {
            // This rank woke: its counter says so.
            *c = Some(LocalBeat {
                at: now,
                digest: fold_digest(self.engines[r as usize].digest()),
                thread: EmitterThread::Unknown,
            });
        }
        self.after_handle(r);
    }

    /// Carries out `r`'s outputs and reschedules its deadline.
    pub(super) fn after_handle(&mut self, r: Rank) {
        let now = self.now;
        for _ in 0..1_000_000 {
            let Some(out) = self.engines[r as usize].poll_output() else {
                break;
            };
            match out {
                Output::WriteHeartbeat { .. } => {}
                Output::HeartbeatStream {
                    to,
                    slot,
                    generation,
                    digest,
                } => {
                    let partition = &self.partition;
                    let changed =
                        self.slots
                            .set_stream(r, (to, slot, generation), digest, now, |a, b| {
                                cut_by(partition, a, b)
                            });
                    if let (true, Some(t)) = (changed, to) {
                        if matches!(
                            self.state[t as usize].status,
                            Status::Crashed | Status::Closed
                        ) {
                            self.bounce(r, t, TransportErrorKind::HeartbeatWrite);
                        }
                    }
                }
                Output::ClearSlot { slot } => self.slots.clear(r, slot),
                Output::Send { to, message } => self.send(r, to, message),
                Output::PostOnBoard { failed, detector } => {
                    self.post_on_board(r, &failed, detector)
                }
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
}

/// What a rank of the simulator reads at a timer step: the modelled slot
/// page, and with host groups the same-host ranks' counters (each the time
/// that rank last woke and its digest then).
struct SimReadings<'a> {
    slots: &'a SlotModel,
    counters: &'a [Option<LocalBeat>],
    rank: Rank,
    now: Time,
}

impl Readings for SimReadings<'_> {
    fn slot(&self, slot: u16) -> u64 {
        self.slots.read(self.rank, slot, self.now)
    }
    fn local_beat(&self, rank: Rank) -> Option<LocalBeat> {
        self.counters.get(rank as usize).copied().flatten()
    }
}

#[cfg(test)]
mod tests {
    use std::mem::size_of;

    use super::*;

    /// What the simulator keeps per rank and per scheduled event, each
    /// multiplied by a million ranks or tens of millions of events at 2^20
    /// (`benches/sim_cost.py` measures the whole run). Printed with
    /// `--nocapture`; the simulator's own records are bounded here, so a
    /// field that grows them fails a test rather than only a benchmark.
    #[test]
    fn per_rank_and_per_event_records_stay_small() {
        let sizes = [
            ("Engine", size_of::<Engine>()),
            ("SimRank", size_of::<SimRank>()),
            ("What (an agenda entry is 8 bytes more)", size_of::<What>()),
            ("InFlight", size_of::<InFlight>()),
        ];
        for (name, size) in sizes {
            println!("{name}: {size} bytes");
        }
        assert!(size_of::<SimRank>() <= 16, "the per-rank record");
        assert!(size_of::<What>() <= 40, "the agenda's item");
    }
}
