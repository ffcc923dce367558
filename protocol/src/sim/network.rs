//! The simulator's network model: link latency and jitter, partitions,
//! the per-message rule hook, and the error completions that a send or
//! write towards a dead process brings back (in-band evidence).
//!
//! Owns: [`NetModel`], the [`Rule`] hook and its [`Verdict`]s, the
//! partition cut, and the scheduling of deliveries and bounced errors.
//! Must not: decide what a rank does with a message (the Engine does), or
//! draw randomness from any stream but the network's.

use std::time::Duration;

use rand::RngCore;

use super::{Simulator, Status, What};
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
        self.queue
            .push(self.now + delay, What::Deliver { to, from, message });
    }

    /// A send or write towards a dead process: its error completion comes
    /// back to the sender after the in-band latency, as proof (the dead
    /// process's kernel answers).
    pub(super) fn bounce(&mut self, sender: Rank, dead: Rank, kind: TransportErrorKind) {
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
