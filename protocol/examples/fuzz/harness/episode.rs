//! One fuzz episode: a small job of Engines (2 to 33 ranks, a random
//! configuration) driven together on virtual time, every choice drawn from
//! one [`Dice`]. What one Engine sends is delivered to another, in order
//! or not, lost, duplicated, mutated, resealed after mutation, replayed,
//! or claimed from a wrong source; forged messages of every kind, sealed
//! with the job's key, arrive beside them; deadlines are served with slot
//! readings from a modelled slot page (or garbage); transport errors,
//! broadcasts, leaves and crashes happen; and some inputs go to the
//! decoder alone.
//!
//! Owns: the job (Engines, the network in flight, the slot pages, the
//! clock), the table of [`ACTIONS`] and the counting of each input.
//! Must not: judge outputs (that is `check`), or let its own memory grow
//! with the episode's length (the network and the replay pool are bounded).
//!
//! A new Engine input gets a row in [`ACTIONS`] (and, if it is a new kind
//! of input, one in `report::InputKind`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use ffd_protocol::ranks::fold_digest;
use ffd_protocol::wire::{self, JobKeys, SLOTS};
use ffd_protocol::{
    BcastKind, EmitterThread, Engine, EngineConfig, EngineOptions, Evidence, FabricSaid,
    HandleError, HeartbeatMode, Hosts, InbandMode, Input, LocalBeat, Output, QuorumMode, Rank,
    Readings, Ring, RingKind, Time, TransportErrorKind, slot_value,
};

use super::check::{Call, EngineCheck, Step, decode_round_trip};
use super::dice::Dice;
use super::generate::{self, View};
use super::mutate;
use super::report::{Column, InputKind, Tally};

/// A message in flight: the sealed bytes an Engine sent.
#[derive(Clone)]
struct Packet {
    from: Rank,
    to: Rank,
    bytes: Vec<u8>,
}

/// Bytes in flight at most; beyond, the oldest are lost (the network
/// drops them), so an episode's memory does not grow with its length.
const NET_BYTES: usize = 2 << 20;
/// Accepted copies kept for replays and as splice material.
const REPLAY_POOL: usize = 64;

/// One rank of the job.
struct Node {
    engine: Engine,
    check: EngineCheck,
    /// Crashed: gets no input, sends nothing, writes nothing.
    crashed: bool,
    /// This rank's slot page, written by its emitters' heartbeats.
    page: Vec<u64>,
    /// Modelled mode: where this rank's heartbeats go (observer, slot,
    /// generation, digest fold).
    stream: Option<(Rank, u16, u32, u32)>,
    /// Host groups: this rank's counter (its last wake-up).
    counter: Option<LocalBeat>,
}

/// One step of an episode.
pub struct Action {
    pub name: &'static str,
    pub weight: u32,
    pub run: fn(&mut Episode<'_>, &mut Dice),
}

/// What an episode does, in proportion to the weights.
pub const ACTIONS: &[Action] = &[
    Action {
        name: "tick",
        weight: 50,
        run: |ep, dice| ep.tick(dice),
    },
    Action {
        name: "message",
        weight: 500,
        run: |ep, dice| ep.message(dice),
    },
    Action {
        name: "decode",
        weight: 140,
        run: |ep, dice| ep.decode(dice),
    },
    Action {
        name: "transport_error",
        weight: 30,
        run: |ep, dice| ep.transport_error(dice),
    },
    Action {
        name: "sent",
        weight: 10,
        run: |ep, dice| ep.sent(dice),
    },
    Action {
        name: "broadcast",
        weight: 30,
        run: |ep, dice| ep.broadcast(dice),
    },
    Action {
        name: "drop",
        weight: 40,
        run: |ep, dice| ep.drop_packet(dice),
    },
    Action {
        name: "leave",
        weight: 2,
        run: |ep, dice| ep.leave(dice),
    },
    Action {
        name: "agree",
        weight: 10,
        run: |ep, dice| ep.agree(dice),
    },
    Action {
        name: "crash",
        weight: 2,
        run: |ep, dice| ep.crash(dice),
    },
];

pub struct Episode<'t> {
    n: u32,
    keys: Arc<JobKeys>,
    /// The same job key, another message key: a forger without the secret.
    outsider: JobKeys,
    config: Arc<EngineConfig>,
    modelled: bool,
    now: Time,
    nodes: Vec<Node>,
    net: VecDeque<Packet>,
    net_bytes: usize,
    accepted: VecDeque<Packet>,
    /// The newest sequence number each link (from, to) carried from its
    /// genuine sender.
    link_seq: BTreeMap<(Rank, Rank), u64>,
    /// The newest sequence number forged on each link (from, to).
    forged_seq: BTreeMap<(Rank, Rank), u64>,
    tally: &'t mut Tally,
    /// Stop once the tally counts this many inputs.
    limit: u64,
    /// Bytes of the payloads the Engines accepted to broadcast.
    payload_bytes: u64,
}

/// A job configuration the library's settings would accept (positive
/// refinements, a timeout above the period).
fn config(dice: &mut Dice) -> EngineConfig {
    let period = Duration::from_micros(dice.pick(&[100, 1_000, 10_000]));
    let timeout = period * dice.pick(&[2, 3, 5, 10, 30]);
    let fraction = |dice: &mut Dice| -> Option<Duration> {
        dice.chance(25)
            .then(|| (timeout / dice.pick(&[1, 2, 3, 10])).max(Duration::from_micros(1)))
    };
    EngineConfig {
        period,
        timeout,
        inband: dice.pick(&[InbandMode::Declare, InbandMode::Suspect, InbandMode::Off]),
        quorum: dice.pick(&[QuorumMode::Majority, QuorumMode::Off]),
        bcast: dice.pick(&[BcastKind::Bmg, BcastKind::Chord]),
        ring: RingKind::Rank,
        ring_seed: 0,
        checks_per_timeout: dice.pick(&[1, 2, 4, 4, 16]),
        startup_grace: Some(dice.pick(&[Duration::ZERO, period, timeout])),
        lag_guard: fraction(dice),
        slow_emitter_after: fraction(dice),
        suspect_timeout: fraction(dice),
        sync_after: fraction(dice),
        leave_batch: fraction(dice),
        max_payload: dice.pick(&[0, 64, 1024, 1024, 65_536]),
        deliver_own: dice.chance(80),
        payload_hold: dice.pick(&[0, 1, 2, 64, 64]),
        payload_retention: dice.pick(&[0, 1, 2, 64, 64]),
        max_sync_payload_bytes: dice.pick(&[0, 100, 64 * 1024]),
        max_sync_ranks: dice.pick(&[0, 1, 2, 1024, 1024]),
        health_max: dice.pick(&[
            1,
            EngineConfig::DEFAULT_HEALTH_MAX,
            EngineConfig::MAX_HEALTH,
        ]),
        late_wakeup: fraction(dice),
    }
}

/// Runs one episode drawn from `dice`, counting into `tally`, until its
/// drawn length, the tally's `limit`, or the end of a tape. Returns its
/// payload allowance: the bytes of the payloads its Engines accepted to
/// broadcast, times the job's size (each Engine may keep a copy of each).
pub fn run(dice: &mut Dice, tally: &mut Tally, limit: u64) -> u64 {
    let n = dice.pick(&[2u32, 2, 3, 4, 5, 8, 8, 13, 16, 33]);
    let ring = match dice.below(3) {
        0 => Ring::by_rank(n),
        1 => Ring::shuffled(n, dice.u64()),
        _ => {
            let hosts: Vec<u8> = (0..n).map(|_| dice.below(4) as u8).collect();
            Ring::topology(&hosts)
        }
    };
    let mut config = config(dice);
    config.ring_seed = dice.u64();
    let keys = Arc::new(super::job_keys());
    let outsider = JobKeys::new(keys.job_key(), [0xA5; 32]);
    let steps = 50 + dice.below(3000);
    let modelled = dice.chance(15);
    // Host groups (same-host watching) in some episodes: ranks round-robin
    // over 1..=n hosts.
    let hosts = dice.chance(25).then(|| {
        let h = 1 + dice.below32(n);
        let ids: Vec<u32> = (0..n).map(|r| r % h).collect();
        Arc::new(Hosts::new(config.ring, &ids, config.ring_seed))
    });
    let config = Arc::new(config);
    let ring = Arc::new(ring);
    let mut ep = Episode {
        n,
        outsider,
        config: config.clone(),
        modelled,
        now: Time::ZERO,
        nodes: Vec::with_capacity(n as usize),
        net: VecDeque::new(),
        net_bytes: 0,
        accepted: VecDeque::new(),
        link_seq: BTreeMap::new(),
        forged_seq: BTreeMap::new(),
        tally,
        limit,
        keys: keys.clone(),
        payload_bytes: 0,
    };
    for r in 0..n {
        let options = EngineOptions {
            hosts: hosts.clone(),
            heartbeats: if modelled {
                HeartbeatMode::Modelled
            } else {
                HeartbeatMode::Write
            },
        };
        let made = Engine::new(
            config.clone(),
            ring.clone(),
            r,
            keys.clone(),
            Time::ZERO,
            options,
        );
        let Ok(engine) = made else {
            return 0;
        };
        let check = EngineCheck::new(&engine);
        ep.nodes.push(Node {
            engine,
            check,
            crashed: false,
            page: vec![0; usize::from(SLOTS)],
            stream: None,
            counter: None,
        });
    }
    // Outputs once every rank exists: a first heartbeat goes to a later one.
    for r in 0..n {
        ep.settle(r, Call::New, None);
    }
    let weights: Vec<u32> = ACTIONS.iter().map(|a| a.weight).collect();
    for _ in 0..steps {
        if ep.tally.inputs() >= ep.limit {
            break;
        }
        let action = &ACTIONS[dice.weighted(&weights)];
        if dice.exhausted() {
            break; // the end of a tape
        }
        (action.run)(&mut ep, dice);
    }
    for node in &ep.nodes {
        node.check.at_end(&node.engine, &mut ep.tally.violations);
    }
    ep.payload_bytes * u64::from(n)
}

impl Episode<'_> {
    fn live(&self) -> Vec<Rank> {
        (0..self.n)
            .filter(|&r| !self.nodes[r as usize].crashed)
            .collect()
    }

    /// A live rank to give an input to (`None` when all crashed).
    fn target(&self, dice: &mut Dice) -> Option<Rank> {
        let live = self.live();
        (!live.is_empty()).then(|| dice.pick(&live))
    }

    fn view(&self, r: Rank) -> View<'_> {
        View::of(&self.nodes[r as usize].engine, self.keys.job_key())
    }

    /// A fresh sequence number for a message forged on link (from, to):
    /// the next after both the genuine sender's newest and the last
    /// forgery's, but at most 48 ahead of the genuine newest, so that the
    /// genuine messages that follow stay inside the receiver's 64-wide
    /// window (beyond, a number already used: the forgery is a replay).
    fn next_seq(&mut self, dice: &mut Dice, from: Rank, to: Rank) -> u64 {
        let genuine = self.link_seq.get(&(from, to)).copied().unwrap_or(0);
        let forged = self.forged_seq.entry((from, to)).or_insert(0);
        let next = genuine.max(*forged).saturating_add(1);
        let seq = if next <= genuine.saturating_add(48) {
            next
        } else {
            genuine.saturating_add(1 + dice.below(48))
        };
        *forged = (*forged).max(seq);
        seq
    }

    /// Drains `r`'s outputs after a call, checks them, and carries them
    /// out: sends into the network, heartbeat writes into slot pages.
    fn settle(&mut self, r: Rank, call: Call, deadline_before: Option<Time>) {
        let node = &mut self.nodes[r as usize];
        let outputs: Vec<Output> = std::iter::from_fn(|| node.engine.poll_output()).collect();
        let step = Step {
            call,
            now: self.now,
            deadline_before,
        };
        node.check.after(
            &node.engine,
            &self.keys,
            step,
            &outputs,
            &mut self.tally.violations,
        );
        for o in outputs {
            match o {
                Output::Send { to, message } if to < self.n && to != r => {
                    let s = self.link_seq.entry((r, to)).or_insert(0);
                    *s = (*s).max(message.seq());
                    self.tally.reached("send");
                    self.push(Packet {
                        from: r,
                        to,
                        bytes: message.to_vec(),
                    });
                }
                Output::WriteHeartbeat { to, slot, value } if to < self.n && slot < SLOTS => {
                    self.nodes[to as usize].page[usize::from(slot)] = value;
                }
                Output::ClearSlot { slot } if slot < SLOTS => {
                    self.nodes[r as usize].page[usize::from(slot)] = 0;
                }
                Output::HeartbeatStream {
                    to,
                    slot,
                    generation,
                    digest,
                } => {
                    self.nodes[r as usize].stream = to.map(|to| (to, slot, generation, digest));
                }
                Output::Event(e) => self.tally.event(&e),
                _ => {}
            }
        }
    }

    fn push(&mut self, p: Packet) {
        self.net_bytes += p.bytes.len();
        self.net.push_back(p);
        while self.net_bytes > NET_BYTES {
            let Some(old) = self.net.pop_front() else {
                break;
            };
            self.net_bytes -= old.bytes.len();
        }
    }

    fn take_packet(&mut self, dice: &mut Dice) -> Option<Packet> {
        if self.net.is_empty() {
            return None;
        }
        // In order mostly; else any packet (reordering).
        let i = if dice.chance(75) {
            0
        } else {
            dice.index(self.net.len())
        };
        let p = self.net.remove(i)?;
        self.net_bytes -= p.bytes.len();
        Some(p)
    }

    /// Material for mutations and splices: a packet in flight or an
    /// accepted copy, else nothing.
    fn sample(&self, dice: &mut Dice) -> Vec<u8> {
        let pools = [self.net.len(), self.accepted.len()];
        match dice.weighted(&pools.map(|l| l.min(1) as u32)) {
            0 if !self.net.is_empty() => self.net[dice.index(self.net.len())].bytes.clone(),
            1 if !self.accepted.is_empty() => {
                self.accepted[dice.index(self.accepted.len())].bytes.clone()
            }
            _ => Vec::new(),
        }
    }

    /// A message input drawn from the mix of `column`, for rank `to`
    /// unless it is a copy sealed for another rank (a genuine packet, a
    /// replay), which goes where it was sealed for.
    fn message_input(&mut self, dice: &mut Dice, to: Rank, column: Column) -> MessageInput {
        let kinds = InputKind::MESSAGES;
        let weights: Vec<u32> = kinds.iter().map(|k| k.weight(column)).collect();
        let kind = kinds[dice.weighted(&weights)];
        let keys = self.keys.clone();
        match kind {
            InputKind::Genuine | InputKind::WrongSource => {
                let p = match column {
                    Column::Engine => self.take_packet(dice),
                    Column::Decoder => {
                        (!self.net.is_empty()).then(|| self.net[dice.index(self.net.len())].clone())
                    }
                };
                let Some(p) = p else {
                    return self.forged(dice, to);
                };
                let from = if kind == InputKind::WrongSource && self.n > 1 {
                    Some((p.from + 1 + dice.below32(self.n - 1)) % self.n)
                } else {
                    source(dice, p.from)
                };
                MessageInput {
                    kind,
                    to: p.to,
                    from,
                    bytes: p.bytes,
                }
            }
            InputKind::Replayed => {
                if self.accepted.is_empty() {
                    return self.forged(dice, to);
                }
                let p = self.accepted[dice.index(self.accepted.len())].clone();
                MessageInput {
                    kind,
                    to: p.to,
                    from: Some(p.from),
                    bytes: p.bytes,
                }
            }
            InputKind::Mutated | InputKind::Resealed => {
                let mut bytes = if dice.chance(50) {
                    let view = self.view(to);
                    let f = generate::forge(dice, &view);
                    let next = 1 + dice.below(100);
                    let seq = mutate::seq(dice, next);
                    wire::seal(&f.unsealed, seq, to, &keys)
                } else {
                    self.sample(dice)
                };
                let other = self.sample(dice);
                let view = self.view(to);
                mutate::mutate(dice, &mut bytes, &view, &other);
                if kind == InputKind::Resealed {
                    let sender = header_sender(&bytes);
                    let next = if sender < self.n {
                        self.next_seq(dice, sender, to)
                    } else {
                        1
                    };
                    let seq = mutate::seq(dice, next);
                    mutate::reseal(&mut bytes, seq, to, &keys);
                }
                let from = source(dice, header_sender(&bytes));
                MessageInput {
                    kind,
                    to,
                    from,
                    bytes,
                }
            }
            InputKind::Unkeyed => {
                let view = self.view(to);
                let f = generate::forge(dice, &view);
                let seq = mutate::seq(dice, 1);
                let bytes = wire::seal(&f.unsealed, seq, to, &self.outsider);
                MessageInput {
                    kind,
                    to,
                    from: source(dice, f.sender),
                    bytes,
                }
            }
            InputKind::RandomBytes => {
                // Pure noise, or noise behind a valid header prefix (past
                // the cheap filters, stopped by the tag).
                let len = dice.pick(&[0, 1, 35, 36, 52, 53, 64, 200]);
                let mut bytes = dice.bytes(len);
                if dice.chance(50) {
                    let view = self.view(to);
                    let kind_byte = dice_kind(dice);
                    let sender = generate::sender(dice, &view);
                    let head = generate::hand_built(dice, &view, kind_byte, sender);
                    let k = head.len().min(bytes.len());
                    bytes[..k].copy_from_slice(&head[..k]);
                }
                MessageInput {
                    kind,
                    to,
                    from: None,
                    bytes,
                }
            }
            _ => self.forged(dice, to),
        }
    }

    /// A valid message of any kind for `to`, sealed with the job's key.
    fn forged(&mut self, dice: &mut Dice, to: Rank) -> MessageInput {
        let view = self.view(to);
        let f = generate::forge(dice, &view);
        let next = if f.sender < self.n {
            self.next_seq(dice, f.sender, to)
        } else {
            1
        };
        let seq = mutate::seq(dice, next);
        let bytes = wire::seal(&f.unsealed, seq, to, &self.keys);
        MessageInput {
            kind: InputKind::Forged,
            to,
            from: source(dice, f.sender),
            bytes,
        }
    }

    // ----- actions -----

    /// A message input for a live Engine.
    fn message(&mut self, dice: &mut Dice) {
        let Some(target) = self.target(dice) else {
            return;
        };
        if self.net.is_empty() && dice.chance(50) {
            // Nothing in flight: let time pass (and the protocol speak).
            return self.tick(dice);
        }
        let m = self.message_input(dice, target, Column::Engine);
        self.deliver(m);
    }

    /// Hands message `m` to its receiver, unless that crashed.
    fn deliver(&mut self, m: MessageInput) {
        let MessageInput {
            kind,
            to,
            from,
            bytes,
        } = m;
        if self.nodes[to as usize].crashed {
            return; // lost with its receiver
        }
        self.tally.input(Column::Engine, kind);
        let now = self.now;
        let node = &mut self.nodes[to as usize];
        let before = node.engine.next_deadline();
        let result = node.engine.handle(
            now,
            Input::Message {
                from,
                bytes: &bytes,
            },
        );
        self.tally.message_result(Column::Engine, &result);
        node.check.message_result(
            &self.keys,
            from,
            &bytes,
            &result,
            &mut self.tally.violations,
        );
        if result.is_ok() {
            if self.accepted.len() >= REPLAY_POOL {
                self.accepted.pop_front();
            }
            self.accepted.push_back(Packet {
                from: from.unwrap_or_else(|| header_sender(&bytes)),
                to,
                bytes,
            });
        }
        self.settle(to, Call::Handle, before);
    }

    /// An input for the decoder alone, at a live rank's place (or, for a
    /// copy of a genuine packet, at its receiver's).
    fn decode(&mut self, dice: &mut Dice) {
        let Some(target) = self.target(dice) else {
            return;
        };
        let m = self.message_input(dice, target, Column::Decoder);
        self.tally.last_decode = Some((m.to, self.n, m.bytes.clone()));
        self.tally.input(Column::Decoder, m.kind);
        let tally = &mut *self.tally;
        let result = decode_round_trip(&m.bytes, &self.keys, m.to, self.n, &mut tally.violations);
        tally.message_result(Column::Decoder, &result.map_err(HandleError::Rejected));
    }

    /// Advances the clock and serves the deadlines that fall due, in time
    /// order, each with a slot reading; sometimes late (a stalled driver),
    /// sometimes spuriously early.
    fn tick(&mut self, dice: &mut Dice) {
        let (period, timeout) = (self.config.period, self.config.timeout);
        let delta = match dice.below(10) {
            0..=4 => period / dice.pick(&[1, 2, 4]),
            5..=7 => period * dice.pick(&[2, 3]),
            8 => timeout,
            _ => timeout * dice.pick(&[2, 3]),
        };
        let mut until = self.now + delta;
        // The network carries what was sent meanwhile, in order.
        for _ in 0..self.n {
            if self.tally.inputs() >= self.limit {
                return;
            }
            let Some(p) = self.net.pop_front() else {
                break;
            };
            self.net_bytes -= p.bytes.len();
            let from = source(dice, p.from);
            self.deliver(MessageInput {
                kind: InputKind::Genuine,
                to: p.to,
                from,
                bytes: p.bytes,
            });
        }
        if dice.chance(5) {
            if let Some(r) = self.target(dice) {
                self.timeout(r, dice);
            }
        }
        for _ in 0..2 * self.n + 2 {
            if self.tally.inputs() >= self.limit {
                return;
            }
            let due = self
                .live()
                .into_iter()
                .filter_map(|r| Some((self.nodes[r as usize].engine.next_deadline()?, r)))
                .min();
            let Some((at, r)) = due.filter(|&(at, _)| at <= until) else {
                break;
            };
            let late = if dice.chance(5) {
                timeout * dice.pick(&[0, 1, 2]) / 2 + Duration::from_micros(dice.below(1000))
            } else {
                Duration::ZERO
            };
            self.now = self.now.max(at + late);
            until = until.max(self.now);
            self.timeout(r, dice);
        }
        self.now = self.now.max(until);
    }

    /// `handle_timeout` for rank `r` at the current time, with a slot
    /// reading: the modelled page mostly, else zero, garbage, a value of
    /// another generation.
    fn timeout(&mut self, r: Rank, dice: &mut Dice) {
        let now = self.now;
        let slot = self.nodes[r as usize].engine.watched_slot();
        let normal = slot.map_or(0, |s| self.slot_reading(r, s));
        let reading = match dice.below(25) {
            0 => 0,
            1 => dice.u64(),
            2 => slot_value(dice.u32(), dice.u32(), dice.u16()),
            3 => normal ^ (1 << (48 + dice.below(16))),
            4 => u64::MAX,
            _ => normal,
        };
        // The same-host emitter's counter: its last wake-up mostly, else none,
        // one from the future, garbage.
        let local = self.nodes[r as usize]
            .engine
            .local_emitter()
            .and_then(|e| self.nodes[e as usize].counter);
        let local = match dice.below(25) {
            0 => None,
            1 => Some(LocalBeat {
                at: now + Duration::from_micros(dice.below(1_000_000)),
                digest: dice.u32(),
                thread: [
                    EmitterThread::Unknown,
                    EmitterThread::Runnable,
                    EmitterThread::Stopped,
                    EmitterThread::Waiting,
                ][dice.below(4) as usize],
            }),
            2 => Some(LocalBeat {
                at: Time::from_nanos(dice.u64()),
                digest: dice.u32(),
                thread: if dice.below(4) == 0 {
                    EmitterThread::Stopped
                } else {
                    EmitterThread::Unknown
                },
            }),
            _ => local,
        };
        self.tally.input(Column::Engine, InputKind::Timeout);
        let engine = &mut self.nodes[r as usize].engine;
        let before = engine.next_deadline();
        engine.handle_timeout(
            now,
            &StepReadings {
                slot: reading,
                local,
            },
        );
        let digest = fold_digest(engine.digest());
        self.nodes[r as usize].counter = Some(LocalBeat {
            at: now,
            digest,
            thread: EmitterThread::Unknown,
        });
        self.tally.done();
        self.settle(r, Call::Timeout, before);
    }

    /// What rank `r` reads in its slot `slot`: the page, or in modelled
    /// mode the beat of a live emitter streaming there.
    fn slot_reading(&self, r: Rank, slot: u16) -> u64 {
        if self.modelled {
            let beats = self.now.as_nanos() / self.config.period.as_nanos().max(1) as u64;
            for (e, node) in self.nodes.iter().enumerate() {
                if let (false, Some((to, s, generation, digest))) = (node.crashed, node.stream) {
                    if to == r && s == slot && e as Rank != r {
                        return slot_value(generation, digest, (beats % 65_535 + 1) as u16);
                    }
                }
            }
        }
        self.nodes[r as usize].page[usize::from(slot)]
    }

    fn transport_error(&mut self, dice: &mut Dice) {
        let Some(r) = self.target(dice) else {
            return;
        };
        if dice.chance(20) {
            // A same-host exit (the pidfd of a crashed rank, mostly; any
            // rank, this one included, sometimes).
            let crashed: Vec<Rank> = (0..self.n)
                .filter(|&x| self.nodes[x as usize].crashed)
                .collect();
            let rank = match (crashed.is_empty(), dice.below(4)) {
                (false, 0..=2) => crashed[dice.below(crashed.len() as u64) as usize],
                _ => dice.below32(self.n + 1),
            };
            let _ = self.engine_call(r, InputKind::Exited, Input::Exited { rank, seen_by: &[] });
            return;
        }
        let view = self.view(r);
        let peer = match dice.below(4) {
            0 => view.observer.unwrap_or(0),
            1 => view.emitter.unwrap_or(0),
            _ => generate::rank(dice, &view),
        };
        let kind = dice.pick(&[
            TransportErrorKind::HeartbeatWrite,
            TransportErrorKind::Send,
            TransportErrorKind::Unreachable,
        ]);
        let evidence = dice.pick(&[Evidence::Proof, Evidence::Silence]);
        let said = match dice.below(5) {
            0 => FabricSaid::Completion {
                err: dice.u32() as i32,
                prov_errno: dice.u32() as i32,
            },
            1 => FabricSaid::Post {
                err: dice.u32() as i32,
            },
            2 => FabricSaid::Refused {
                run: Duration::from_micros(dice.below(1_000_000)),
            },
            3 => FabricSaid::DeadProcess,
            _ => FabricSaid::Nothing,
        };
        let _ = self.engine_call(
            r,
            InputKind::TransportError,
            Input::TransportError {
                peer,
                kind,
                evidence,
                said,
            },
        );
    }

    /// A send completion (a link confirmed), as the runtime reports it.
    fn sent(&mut self, dice: &mut Dice) {
        let Some(r) = self.target(dice) else {
            return;
        };
        let view = self.view(r);
        let to = match dice.below(3) {
            0 => view.emitter.unwrap_or(0),
            _ => generate::rank(dice, &view),
        };
        let _ = self.engine_call(r, InputKind::Sent, Input::Sent { to });
    }

    fn broadcast(&mut self, dice: &mut Dice) {
        let Some(r) = self.target(dice) else {
            return;
        };
        let max = self.config.max_payload;
        let len = dice.pick(&[0, 1, 17, 300, max, max + 1]);
        let bytes = dice.bytes(len);
        if self
            .engine_call(r, InputKind::Broadcast, Input::Broadcast(&bytes))
            .is_ok()
        {
            self.payload_bytes += bytes.len() as u64;
        }
    }

    fn leave(&mut self, dice: &mut Dice) {
        let Some(r) = self.target(dice) else {
            return;
        };
        if self.engine_call(r, InputKind::Leave, Input::Leave).is_ok() {
            self.nodes[r as usize].check.left_job();
        }
    }

    /// A rank calls a user agreement (the others may never call theirs:
    /// it then waits, as it would for a hung participant).
    fn agree(&mut self, dice: &mut Dice) {
        let Some(r) = self.target(dice) else {
            return;
        };
        let flags = if dice.chance(50) {
            u64::MAX
        } else {
            dice.u64()
        };
        // Counted before the call: its decision may come out of it.
        self.nodes[r as usize].check.agree_called(1);
        if self
            .engine_call(r, InputKind::Agree, Input::Agree { flags })
            .is_err()
        {
            self.nodes[r as usize].check.agree_called(-1);
        }
    }

    /// `handle(now, input)` for an input that is not a message.
    fn engine_call(
        &mut self,
        r: Rank,
        kind: InputKind,
        input: Input<'_>,
    ) -> Result<(), HandleError> {
        self.tally.input(Column::Engine, kind);
        let now = self.now;
        let engine = &mut self.nodes[r as usize].engine;
        let before = engine.next_deadline();
        let result = engine.handle(now, input);
        self.tally.refusal(&result);
        self.settle(r, Call::Handle, before);
        result
    }

    fn drop_packet(&mut self, dice: &mut Dice) {
        self.take_packet(dice);
    }

    /// A rank stops: no more inputs, heartbeats or messages from it. At
    /// least one rank stays.
    fn crash(&mut self, dice: &mut Dice) {
        let live = self.live();
        if live.len() > 1 {
            let r = dice.pick(&live);
            self.nodes[r as usize].crashed = true;
            self.tally.reached("crash");
        }
    }
}

/// A message input: its kind, receiver, transport source and bytes.
struct MessageInput {
    kind: InputKind,
    to: Rank,
    from: Option<Rank>,
    bytes: Vec<u8>,
}

/// The transport source of a message from `sender`: given mostly (as
/// providers with `FI_SOURCE` do), else none.
fn source(dice: &mut Dice, sender: Rank) -> Option<Rank> {
    dice.chance(70).then_some(sender)
}

/// Any kind byte, the known ones most often.
fn dice_kind(dice: &mut Dice) -> u8 {
    if dice.chance(80) {
        1 + dice.below(7) as u8
    } else {
        dice.u8()
    }
}

/// The sender field of a message, 0 if too short.
fn header_sender(bytes: &[u8]) -> Rank {
    bytes
        .get(16..20)
        .map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// One timer step's readings: the watched slot holds `slot`, the same-host
/// emitter's counter reads `local`.
struct StepReadings {
    slot: u64,
    local: Option<LocalBeat>,
}

impl Readings for StepReadings {
    fn slot(&self, _slot: u16) -> u64 {
        self.slot
    }
    fn local_beat(&self, _rank: Rank) -> Option<LocalBeat> {
        self.local
    }
}
