//! Application payloads: all-or-none, per-origin FIFO delivery, and their
//! repair by the digest sync (docs/design.md §4.9 "Payloads").
//!
//! Owns: the per-origin state of the origins that broadcast ([`Payloads`]:
//! the high-water mark, the payloads held until the gap before them
//! closes, the last payloads kept for repair), their fold into the digest
//! the heartbeat slots carry, the decisions on a received payload
//! ([`Payloads::receive`]: duplicate, not ours, held, next), the marks a
//! sync request carries and the payloads found for one
//! ([`Payloads::repair`]); the Engine's glue (this rank's own broadcasts,
//! delivery, forward-once, the counters) is in `membership`, beside the
//! other news. Must not: drop a payload because of
//! what this rank knows of its origin (a relay is a live, authenticated
//! sender: all-or-none needs every rank to deliver and forward what any
//! rank delivered), forget an origin's high-water mark (no eviction: a
//! late copy would be delivered twice), or hold more than the configured
//! bounds.
//!
//! Every rank forwards an origin's payloads in sequence order (it forwards
//! a payload when it delivers it) and every link is FIFO, so a copy of
//! `h + 1` arrives after the copy of `h` on the same link: a gap means a
//! loss (or reordering on the way), and the hold and the repair close it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::config::Rank;
use crate::wire::{self, Marks};

/// A payload that arrived ahead of a gap, held until the gap closes.
#[derive(Clone, Debug)]
struct Held {
    seq: u64,
    /// The rank it came from (not sent back when it is forwarded).
    from: Rank,
    /// The unsealed copy to forward, this rank as sender.
    forward: Arc<[u8]>,
}

/// What an origin needs beyond its mark: allocated once it has a payload
/// held or kept.
#[derive(Clone, Debug, Default)]
struct Kept {
    /// Ascending sequence numbers, all above the mark + 1; at most
    /// `EngineConfig::payload_hold`.
    held: Vec<Held>,
    /// The last delivered payloads, as forwarded (the last of them has the
    /// mark's sequence number); at most `EngineConfig::payload_retention`.
    retained: VecDeque<Arc<[u8]>>,
}

/// One origin that broadcast.
#[derive(Clone, Debug, Default)]
struct Origin {
    /// High-water mark: every payload of this origin up to it is delivered
    /// here, none after it.
    mark: u64,
    kept: Option<Box<Kept>>,
}

/// The payload state of one rank: an entry per origin that broadcast
/// anything this rank saw, never evicted (16 bytes and a map entry each,
/// plus the held and kept payloads, within their bounds).
#[derive(Clone, Debug, Default)]
pub(super) struct Payloads {
    origins: BTreeMap<Rank, Origin>,
    /// XOR of [`mark_hash`] over the origins: folded into the digest.
    digest: u64,
    /// The first origin the marks of the next sync request cover.
    cursor: Rank,
}

/// The digest term of an origin's high-water mark; 0 for a mark of 0, so
/// that an origin never heard of and one with nothing delivered agree.
fn mark_hash(origin: Rank, mark: u64) -> u64 {
    if mark == 0 {
        return 0;
    }
    let mut z = crate::ranks::rank_hash(origin) ^ mark.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    z = (z ^ (z >> 32)).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    z = (z ^ (z >> 32)).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    (z ^ (z >> 32)) | 1
}

impl Payloads {
    /// The fold of every origin's high-water mark into the digest.
    pub(super) fn digest(&self) -> u64 {
        self.digest
    }

    /// The high-water mark of `origin` (0: nothing delivered).
    pub(super) fn mark(&self, origin: Rank) -> u64 {
        self.origins.get(&origin).map_or(0, |o| o.mark)
    }

    /// Payloads of `origin` held ahead of a gap.
    pub(super) fn held(&self, origin: Rank) -> usize {
        self.origins
            .get(&origin)
            .and_then(|o| o.kept.as_ref())
            .map_or(0, |k| k.held.len())
    }

    /// The marks the next sync request carries: origins from the cursor
    /// on with a mark of at least 1, at most `cap` of them, and the range
    /// they cover; the cursor moves past it (back to 0 at the end), so a
    /// rank that knows more origins than one request carries covers them
    /// in turns.
    pub(super) fn next_marks(&mut self, cap: usize, n: u32) -> (Rank, Rank, Vec<(Rank, u64)>) {
        let from = if self.cursor < n { self.cursor } else { 0 };
        let mut marks = Vec::new();
        let mut to = n;
        for (&origin, o) in self.origins.range(from..) {
            if o.mark == 0 {
                continue;
            }
            if marks.len() == cap.max(1) {
                to = origin;
                break;
            }
            marks.push((origin, o.mark));
        }
        self.cursor = if to == n { 0 } else { to };
        (from, to, marks)
    }
}

/// What a received payload is to this rank ([`Payloads::receive`]).
#[derive(Debug)]
pub(super) enum Arrival {
    /// Delivered or held here already.
    Duplicate,
    /// Of this rank's own origin, with a number it never used.
    NotOurs,
    /// Later than the next of its origin: `held` if it is kept until the
    /// gap closes; `overflow` if the hold was full (its highest dropped to
    /// make room, or this one dropped if it is higher still).
    Later { held: bool, overflow: bool },
    /// The next of its origin: deliver it, as this unsealed copy to
    /// forward (this rank as sender).
    Next(Arc<[u8]>),
    /// A message that cannot be forwarded: nothing.
    Unforwardable,
}

/// What a sync request's marks get from here ([`Payloads::repair`]).
pub(super) struct Repair {
    /// The kept payloads to send, oldest first.
    pub(super) payloads: Vec<Arc<[u8]>>,
    /// Origins whose missing payloads are older than those kept here.
    pub(super) beyond: u64,
    /// The byte budget cut the list short.
    pub(super) cut: bool,
}

impl Payloads {
    /// A payload `seq` of `origin` from `sender` (`bytes`, the whole
    /// message, for forwarding), at rank `me`, holding at most `hold_cap`
    /// per origin: what it is. A later one is held here (bounded: beyond
    /// the bound the highest is dropped, the sync repair brings it again).
    pub(super) fn receive(
        &mut self,
        me: Rank,
        sender: Rank,
        (origin, seq): (Rank, u64),
        bytes: &[u8],
        hold_cap: usize,
    ) -> Arrival {
        let entry = self.origins.entry(origin).or_default();
        if seq <= entry.mark {
            return Arrival::Duplicate;
        }
        if origin == me {
            // Numbers this rank never used: not its payload.
            return Arrival::NotOurs;
        }
        if seq > entry.mark + 1 {
            let kept = entry.kept.get_or_insert_with(Box::default);
            let at = match kept.held.binary_search_by_key(&seq, |h| h.seq) {
                Ok(_) => return Arrival::Duplicate,
                Err(at) => at,
            };
            let overflow = kept.held.len() >= hold_cap;
            if overflow {
                if at >= kept.held.len() {
                    return Arrival::Later {
                        held: false,
                        overflow,
                    };
                }
                // Keep the lowest: they unblock first.
                kept.held.pop();
            }
            let Some(forward) = wire::forwarded(bytes, me) else {
                return Arrival::Later {
                    held: false,
                    overflow,
                };
            };
            kept.held.insert(
                at,
                Held {
                    seq,
                    from: sender,
                    forward: forward.into(),
                },
            );
            return Arrival::Later {
                held: true,
                overflow,
            };
        }
        match wire::forwarded(bytes, me) {
            Some(forward) => Arrival::Next(forward.into()),
            None => Arrival::Unforwardable,
        }
    }

    /// The held payload of `origin` that the mark now unblocks, if any:
    /// (its number, the rank it came from, the copy to forward).
    pub(super) fn next_held(&mut self, origin: Rank) -> Option<(u64, Rank, Arc<[u8]>)> {
        let next = self.mark(origin) + 1;
        let kept = self.origins.get_mut(&origin)?.kept.as_mut()?;
        if kept.held.first().is_none_or(|h| h.seq != next) {
            return None;
        }
        let h = kept.held.remove(0);
        Some((h.seq, h.from, h.forward))
    }

    /// `origin`'s payload `seq` (the one after its mark) is delivered:
    /// raises the mark (and the digest) and keeps `forward` for repair
    /// (at most `retention` per origin).
    pub(super) fn advance(
        &mut self,
        origin: Rank,
        seq: u64,
        forward: &Arc<[u8]>,
        retention: usize,
    ) {
        let entry = self.origins.entry(origin).or_default();
        debug_assert_eq!(seq, entry.mark + 1);
        self.digest ^= mark_hash(origin, entry.mark) ^ mark_hash(origin, seq);
        entry.mark = seq;
        if retention > 0 {
            let kept = entry.kept.get_or_insert_with(Box::default);
            if kept.retained.len() >= retention {
                kept.retained.pop_front();
            }
            kept.retained.push_back(forward.clone());
        } else if entry.kept.as_ref().is_some_and(|k| k.held.is_empty()) {
            entry.kept = None;
        }
    }

    /// A sync request's `marks`: the kept payloads after its mark of each
    /// origin they cover, oldest first, within `budget` bytes (at least
    /// one payload; the rest waits for the next request, which carries the
    /// raised marks). An origin whose missing payloads are older than
    /// those kept here cannot be repaired from here (`beyond`).
    pub(super) fn repair(&self, marks: Marks<'_>, budget: usize) -> Repair {
        let mut theirs = marks.iter().peekable();
        let mut out: Vec<Arc<[u8]>> = Vec::new();
        let (mut bytes, mut cut, mut beyond) = (0usize, false, 0u64);
        'origins: for (&origin, o) in self.origins.range(marks.from..marks.to) {
            while theirs.next_if(|&(t, _)| t < origin).is_some() {}
            let their = theirs.next_if(|&(t, _)| t == origin).map_or(0, |(_, m)| m);
            if their >= o.mark {
                continue;
            }
            let retained = o.kept.as_ref().map(|k| &k.retained);
            let kept = retained.map_or(0, |r| r.len() as u64);
            let oldest = o.mark + 1 - kept;
            if their + 1 < oldest {
                beyond += 1;
                continue;
            }
            let Some(retained) = retained else {
                continue;
            };
            for m in retained.iter().skip((their + 1 - oldest) as usize) {
                if !out.is_empty() && bytes + m.len() > budget {
                    cut = true;
                    break 'origins;
                }
                bytes += m.len();
                out.push(m.clone());
            }
        }
        Repair {
            payloads: out,
            beyond,
            cut,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_term_is_zero_only_for_nothing_delivered() {
        assert_eq!(mark_hash(3, 0), 0);
        let terms: std::collections::BTreeSet<u64> = (0..50)
            .flat_map(|o| (1..50).map(move |m| mark_hash(o, m)))
            .collect();
        assert_eq!(terms.len(), 50 * 49, "distinct terms");
        assert!(!terms.contains(&0));
    }

    #[test]
    fn marks_cover_origins_in_turns() {
        let mut p = Payloads::default();
        for o in [1, 4, 6, 9] {
            p.origins.insert(
                o,
                Origin {
                    mark: 2,
                    kept: None,
                },
            );
        }
        p.origins.insert(
            5,
            Origin {
                mark: 0,
                kept: None,
            },
        );
        assert_eq!(p.next_marks(2, 10), (0, 6, vec![(1, 2), (4, 2)]));
        assert_eq!(p.next_marks(2, 10), (6, 10, vec![(6, 2), (9, 2)]));
        assert_eq!(
            p.next_marks(8, 10),
            (0, 10, vec![(1, 2), (4, 2), (6, 2), (9, 2)])
        );
        assert_eq!(Payloads::default().next_marks(8, 10), (0, 10, vec![]));
    }
}
