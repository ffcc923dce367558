//! The simulator's network model: per-sender send times, link latency and
//! jitter, per-link FIFO delivery, connection set-up on a link's first
//! use, partitions, the per-message rule hook, the error completions that
//! a send or write towards a dead process brings back (in-band evidence),
//! and the send completions of `ObserveMe` (the only ones the Engine
//! reads).
//!
//! Owns: [`NetModel`], the [`Rule`] hook and its [`Verdict`]s, the
//! partition cut, the links set up during the run, and the scheduling of
//! deliveries, send completions and bounced errors.
//! Must not: decide what a rank does with a message (the Engine does), or
//! draw randomness from any stream but the network's.
//!
//! # Send times and order
//! A rank's copies leave one after another, one every `send_cost` (its
//! NIC, or the progress thread posting them): a fan-out of k copies takes
//! k · `send_cost`, and a copy due to leave after its sender crashed (or
//! closed its endpoint) never leaves. Delivery on each link (sender →
//! receiver) is FIFO, as on a connection: a copy is never delivered before
//! an earlier copy of the same link (jitter or a rule's delay on one copy
//! holds back the later ones of that link). With `send_cost` 0 and no
//! jitter, times are those of a network without either.

use std::time::Duration;

use rand::RngCore;

use super::{InFlight, Simulator, Status, What};
use crate::wire::{Kind, Sealed};
use crate::{Evidence, Rank, Time, TransportErrorKind};

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
    /// Connection set-up, as on `tcp;ofi_rxm`: the first message on a link
    /// that is not up waits this long for it (both ends must be running;
    /// a cold link to a rank that is not never comes up, and what is sent
    /// on it is lost). The links the runtime's link phase sets up before
    /// anyone judges — ring neighbours and broadcast overlay links — are
    /// up from the start. `None` (default): every link is up from the start.
    pub connect: Option<Duration>,
    /// Time between two copies leaving one rank (module docs).
    pub send_cost: Duration,
    /// The runtime's liveness port (`FFD_LIVENESS`, `crate::liveness`):
    /// when a rank's process dies on a host that lives, its observer's
    /// watch of the port ends and its probe is refused, `inband_latency`
    /// after the crash (the kernel's teardown and a round trip), whatever
    /// the next heartbeat write. A hung rank keeps its port (its kernel
    /// answers, nobody greets: no verdict), a lost host or a cut answers
    /// nothing. Off by default, so that the simulator's figures stay those
    /// of the fabric's own errors.
    pub liveness: bool,
}

impl NetModel {
    /// The default `send_cost`: about what posting one send costs a
    /// progress thread on `tcp;ofi_rxm`.
    pub const DEFAULT_SEND_COST: Duration = Duration::from_micros(1);
}

impl Default for NetModel {
    fn default() -> Self {
        NetModel {
            latency: Duration::from_micros(2),
            jitter: Duration::from_nanos(500),
            inband_latency: Some(Duration::from_millis(3)),
            liveness: false,
            send_cost: Self::DEFAULT_SEND_COST,
            connect: None,
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
    /// The sealed copy (its wire bytes: [`Sealed::to_vec`]).
    pub message: &'a Sealed,
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

/// A delivery record's `flight_ns` for a copy in flight 2^32 − 1 ns (4.3 s)
/// or longer: its departure is kept in `Simulator::long_flights`.
const LONG_FLIGHT: u32 = u32::MAX;

pub(super) fn cut_by(partition: &Option<Vec<Rank>>, a: Rank, b: Rank) -> bool {
    match partition {
        None => false,
        Some(set) => set.binary_search(&a).is_ok() != set.binary_search(&b).is_ok(),
    }
}

impl Simulator {
    pub(super) fn is_cut(&self, a: Rank, b: Rank) -> bool {
        cut_by(&self.partition, a, b)
    }

    pub(super) fn jitter(&mut self) -> Duration {
        let j = self.cfg.net.jitter.as_nanos() as u64;
        if j == 0 {
            Duration::ZERO
        } else {
            Duration::from_nanos(self.net_rng.next_u64() % (j + 1))
        }
    }

    pub(super) fn send(&mut self, from: Rank, to: Rank, message: Sealed) {
        let kind = message.kind();
        let k = &mut self.by_kind[kind.map_or(Kind::COUNT, Kind::index)];
        k.count += 1;
        k.bytes += message.len() as u64;
        if kind == Some(Kind::Notice) {
            self.attribute_notice(to, &message);
            if self.cfg.track_links {
                *self.link_notices.entry((from, to)).or_default() += 1;
            }
        }
        if self.is_cut(from, to) {
            // A cut resets nothing: on a link that was up, the sender's
            // stack takes the message and its send completes; the copy is
            // lost on the way.
            if kind == Some(Kind::ObserveMe) && self.link_is_up(from, to) {
                let delay = self.cfg.net.latency;
                self.queue
                    .push(self.now + delay, What::Sent { to: from, peer: to });
            }
            self.dropped += 1;
            return;
        }
        let mut delay = self.cfg.net.latency + self.jitter();
        match self.link_ready_in(from, to) {
            Some(wait) => delay += wait,
            None => {
                self.dropped += 1;
                return;
            }
        }
        if let Some(rule) = self.rule.as_mut() {
            match rule(&MessageMeta {
                at: self.now,
                from,
                to,
                kind,
                message: &message,
            }) {
                Verdict::Pass => {}
                Verdict::Delay(d) => delay += d,
                Verdict::Drop => {
                    self.dropped += 1;
                    return;
                }
            }
        }
        let departs = self.nic_free[from as usize].max(self.now);
        self.nic_free[from as usize] = departs + self.cfg.net.send_cost;
        let at = self.fifo(from, to, departs + delay);
        if kind == Some(Kind::ObserveMe) {
            // Transmit complete once it is on an up link, whatever the
            // receiver's state (as a TCP send to a freshly dead peer).
            self.queue.push(at, What::Sent { to: from, peer: to });
        }
        let (unsealed, seq) = message.into_parts();
        let flight_ns = match u32::try_from((at - departs).as_nanos()) {
            Ok(ns) if ns != LONG_FLIGHT => ns,
            _ => {
                self.long_flights
                    .entry((from, to))
                    .or_default()
                    .push_back(departs);
                LONG_FLIGHT
            }
        };
        self.queue.push(
            at,
            What::Deliver {
                to,
                from,
                flight_ns,
                copy: InFlight { unsealed, seq },
            },
        );
    }

    /// Whether per-link FIFO can hold a copy back: only with a rule (its
    /// delays), connection set-up (a copy waiting for its link) or jitter
    /// wider than `send_cost`. Otherwise a sender's copies leave at least
    /// `send_cost` apart and arrive within `jitter` of leaving, so on any
    /// link a copy never arrives before the one sent ahead of it (on a tie
    /// the agenda runs the earlier one first), and nothing needs to be
    /// remembered per link: this saves a random memory access per copy
    /// sent and delivered, and the lists (several hundred bytes per rank at
    /// 2^20 ranks, in the middle of a flood).
    fn fifo_can_bind(&self) -> bool {
        self.rule.is_some()
            || self.cfg.net.connect.is_some()
            || self.cfg.net.jitter > self.cfg.net.send_cost
    }

    /// The delivery time of a copy on link `from` → `to` due at `at`: no
    /// earlier than the copy before it on that link. Where the order holds
    /// by itself (`fifo_can_bind`) nothing is remembered; otherwise only
    /// links with a copy in flight are (a few per sender, each forgotten
    /// when its last copy arrives, `delivered`).
    fn fifo(&mut self, from: Rank, to: Rank, at: Time) -> Time {
        if !self.fifo_can_bind() {
            return at;
        }
        let now = self.now;
        if self.in_flight.is_empty() {
            self.in_flight = vec![Vec::new(); self.n as usize];
        }
        let in_flight = &mut self.in_flight[from as usize];
        in_flight.retain(|&(_, t)| t > now);
        match in_flight.iter_mut().find(|(r, _)| *r == to) {
            Some((_, last)) => {
                *last = (*last).max(at);
                *last
            }
            None => {
                in_flight.push((to, at));
                at
            }
        }
    }

    /// A copy on `from` → `to` arrives now: if it was the last one in
    /// flight on that link, the link is forgotten (and the sender's list
    /// freed once empty), so memory follows the copies in flight.
    pub(super) fn delivered(&mut self, from: Rank, to: Rank) {
        let now = self.now;
        let Some(in_flight) = self.in_flight.get_mut(from as usize) else {
            return;
        };
        if let Some(i) = in_flight.iter().position(|&(r, t)| r == to && t <= now) {
            in_flight.swap_remove(i);
            if in_flight.is_empty() {
                *in_flight = Vec::new();
            }
        }
    }

    /// `r` crashed or closed its endpoint now: the copies it had not sent
    /// yet never leave. Only a rank with such copies is remembered.
    pub(super) fn went_down(&mut self, r: Rank) {
        if self.nic_free[r as usize] > self.now {
            self.cut_off.insert(r, self.now);
        }
    }

    /// When the copy `from` → `to` delivered now left its sender, from its
    /// record's `flight_ns`.
    pub(super) fn departure(&mut self, from: Rank, to: Rank, flight_ns: u32) -> Time {
        if flight_ns == LONG_FLIGHT {
            if let Some(queue) = self.long_flights.get_mut(&(from, to)) {
                let departs = queue.pop_front();
                if queue.is_empty() {
                    self.long_flights.remove(&(from, to));
                }
                if let Some(departs) = departs {
                    return departs;
                }
            }
        }
        Time::from_nanos(self.now.as_nanos() - u64::from(flight_ns))
    }

    /// Whether a copy that `from` sent to leave at `departs` left: not if
    /// its sender crashed or closed before (`went_down`).
    pub(super) fn left_sender(&self, from: Rank, departs: Time) -> bool {
        self.cut_off.is_empty() || self.cut_off.get(&from).is_none_or(|&down| departs <= down)
    }

    /// How long a message from `a` to `b` waits for their link to come up
    /// (zero when it is up), or `None` when it never will (`b` is not
    /// running). Only with [`NetModel::connect`].
    fn link_ready_in(&mut self, a: Rank, b: Rank) -> Option<Duration> {
        let Some(connect) = self.cfg.net.connect else {
            return Some(Duration::ZERO);
        };
        if self.warm_from_start(a, b) {
            return Some(Duration::ZERO);
        }
        let key = (a.min(b), a.max(b));
        if let Some(&up) = self.links_up.get(&key) {
            return Some(up.saturating_since(self.now));
        }
        if self.state[b as usize].status != Status::Up {
            return None;
        }
        self.links_up.insert(key, self.now + connect);
        Some(connect)
    }

    /// Whether the link between `a` and `b` is up now (always, without
    /// [`NetModel::connect`]).
    fn link_is_up(&self, a: Rank, b: Rank) -> bool {
        self.cfg.net.connect.is_none()
            || self.warm_from_start(a, b)
            || self
                .links_up
                .get(&(a.min(b), a.max(b)))
                .is_some_and(|&up| up <= self.now)
    }

    /// Ring neighbours and broadcast overlay links: the runtime's link
    /// phase sets them up before anyone judges.
    fn warm_from_start(&self, a: Rank, b: Rank) -> bool {
        let ring = &self.ring;
        let (pa, pb) = (ring.position_of(a), ring.position_of(b));
        let n = ring.len();
        if (pa + 1) % n == pb || (pb + 1) % n == pa {
            return true;
        }
        crate::overlay::Overlay::new(self.cfg.engine.bcast, n)
            .neighbours(pa)
            .contains(&pb)
    }

    /// A send or write towards a dead process: its error completion comes
    /// back to the sender after the in-band latency, as proof (the dead
    /// process's kernel answers).
    pub(super) fn bounce(&mut self, sender: Rank, dead: Rank, kind: TransportErrorKind) {
        if self.state[dead as usize].flags & super::LOST != 0 {
            // Lost with its host: no kernel answers for it.
            return;
        }
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
                        evidence: Evidence::Proof,
                    },
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::sim::SimConfig;
    use crate::wire::{HEADER_LEN, JobKeys};

    /// A copy delayed beyond what a delivery record holds (4.3 s) keeps its
    /// departure aside, exactly: after its sender went down, a copy that
    /// had left is delivered and one that had not never leaves, whether
    /// its flight was long or short.
    #[test]
    fn long_flights_keep_their_departure() {
        let mut sim = Simulator::new(SimConfig::new(4)).unwrap();
        sim.set_rule(Box::new(|m| {
            if m.message.seq() <= 2 {
                Verdict::Delay(Duration::from_secs(5))
            } else {
                Verdict::Pass
            }
        }));
        let keys = JobKeys::new(1, [0; 32]);
        let copy = |seq, to| Sealed::new(Arc::from(vec![0u8; HEADER_LEN]), seq, to, &keys);
        // Rank 1's copies leave at 0, 1 µs and 2 µs (one per send_cost).
        sim.send(1, 2, copy(1, 2));
        sim.send(1, 2, copy(2, 2));
        sim.send(1, 3, copy(3, 3));
        assert_eq!(sim.long_flights[&(1, 2)].len(), 2);
        sim.went_down(1);
        let mut seen = Vec::new();
        while let Some((at, what)) = sim.queue.pop() {
            sim.now = at;
            if let What::Deliver {
                to,
                from,
                flight_ns,
                copy,
            } = what
            {
                let departs = sim.departure(from, to, flight_ns);
                seen.push((copy.seq, departs.as_nanos(), sim.left_sender(from, departs)));
            }
        }
        let cost = NetModel::DEFAULT_SEND_COST.as_nanos() as u64;
        assert_eq!(
            seen,
            vec![(3, 2 * cost, false), (1, 0, true), (2, cost, false)]
        );
        assert!(sim.long_flights.is_empty());
    }
}
