//! Which received messages are believed, and how much work one may draw.
//!
//! Owns: the sequence numbers of each link ([`PeerLinks`]: the next one
//! to send a peer, the window of those received from it), and the checks
//! every received message passes before a handler sees it, in order: the
//! codec (cheap filters, then the tag, then the body), not from this rank
//! itself, the transport's source address against the header's sender,
//! the sender's replay window; then
//! the protocol's trust rules (a sender or notice origin in the failed set
//! is not believed; being named failed excludes this rank). Also the
//! per-peer limits that bound the work a single message can draw: sync
//! requests ([`SyncLimit`]) and exclusion replies ([`ExclusionReplies`]).
//! Must not: change the failed or left sets (the handlers and `membership`
//! do), or keep state for ranks it never exchanged a message with (memory
//! stays O(peers), small enough for a simulator of 2^20 ranks).

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Engine, HandleError, Participation};
use crate::config::{Rank, Time};
use crate::overlay::levels;
use crate::wire::{self, Message, RejectReason};

/// Width of a sender's replay window, in sequence numbers.
pub(super) const REPLAY_WINDOW: u64 = 64;

/// This rank's link with one peer: the next sequence number it sends the
/// peer, and the window of those received from it (the newest, and which
/// of the 64 before it, bit i: `newest_in - i`, were seen). Packed to 28
/// bytes: a rank exchanges messages with about 2·log2 N peers over the
/// overlay (40 at 2^20), and the simulator holds a million ranks.
#[derive(Clone, Copy, Debug)]
#[repr(C, packed(4))]
struct PeerLink {
    peer: Rank,
    next_out: u64,
    newest_in: u64,
    seen_in: u64,
}

/// Sequence numbers per link, only for peers this rank exchanged messages
/// with, sorted by rank. Numbering per link (not per sender) keeps the
/// numbers a receiver sees from one sender consecutive, so its 64-wide
/// window absorbs any reordering of up to 64 messages on that link, however
/// many the sender sends elsewhere meanwhile; the tag binds each copy to
/// its receiver, so a number can only be used where it was given.
#[derive(Clone, Debug, Default)]
pub(super) struct PeerLinks {
    links: Vec<PeerLink>,
}

impl PeerLinks {
    /// The link with `peer`, made if new. The first one reserves room for
    /// the overlay's links in a job of `n` (2·⌈log2 n⌉, both directions,
    /// plus 2): a rank that hears of a failure talks to about that many
    /// peers, and one allocation of the right size leaves no holes behind
    /// (a million ranks growing their tables step by step left more freed
    /// memory than they used).
    fn link(&mut self, peer: Rank, n: u32) -> &mut PeerLink {
        let i = match self.links.binary_search_by_key(&peer, |l| l.peer) {
            Ok(i) => i,
            Err(i) => {
                if self.links.len() == self.links.capacity() {
                    let more = if self.links.is_empty() {
                        2 * levels(n) as usize + 2
                    } else {
                        self.links.len() / 4 + 4
                    };
                    self.links.reserve_exact(more);
                }
                self.links.insert(
                    i,
                    PeerLink {
                        peer,
                        next_out: 1,
                        newest_in: 0,
                        seen_in: 0,
                    },
                );
                i
            }
        };
        &mut self.links[i]
    }

    /// The sequence number of the next message to `peer` (from 1), in a
    /// job of `n` ranks.
    pub(super) fn next_out(&mut self, peer: Rank, n: u32) -> u64 {
        let link = self.link(peer, n);
        let seq = link.next_out;
        link.next_out = seq + 1;
        seq
    }

    /// Admits sequence number `seq` received from `peer` (an authenticated
    /// pair) in a job of `n` ranks: true the first time, false for a number
    /// seen before or older than the window.
    pub(super) fn admit(&mut self, peer: Rank, seq: u64, n: u32) -> bool {
        let link = self.link(peer, n);
        let (newest, seen) = (link.newest_in, link.seen_in);
        if seq > newest {
            let shift = seq - newest;
            link.seen_in = if shift >= REPLAY_WINDOW {
                1
            } else {
                (seen << shift) | 1
            };
            link.newest_in = seq;
            return true;
        }
        let age = newest - seq;
        if age >= REPLAY_WINDOW || seen & (1 << age) != 0 {
            return false;
        }
        link.seen_in = seen | (1 << age);
        true
    }

    /// Peers with a link.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.links.len()
    }
}

/// Sync requests honoured lately: at most one per peer per timeout. Only
/// this rank's emitter and observer are honoured at all, so two entries
/// suffice.
#[derive(Clone, Copy, Debug)]
pub(super) struct SyncLimit([(Rank, Time); 2]);

impl Default for SyncLimit {
    fn default() -> Self {
        SyncLimit([(super::NO_RANK, Time::ZERO); 2])
    }
}

impl SyncLimit {
    /// Whether a request from `peer` at `now` may be honoured; records it
    /// if so.
    pub(super) fn admit(&mut self, peer: Rank, now: Time, every: Duration) -> bool {
        if let Some(e) = self.0.iter_mut().find(|(r, _)| *r == peer) {
            if now - e.1 < every {
                return false;
            }
            e.1 = now;
            return true;
        }
        let oldest = if self.0[0].1 <= self.0[1].1 { 0 } else { 1 };
        self.0[oldest] = (peer, now);
        true
    }
}

/// Ranks recently answered with an exclusion notice, at most
/// [`ExclusionReplies::CAPACITY`]: one reply per rank per timeout, and a
/// bounded memory of them.
#[derive(Clone, Debug, Default)]
pub(super) struct ExclusionReplies(BTreeMap<Rank, Time>);

impl ExclusionReplies {
    /// Ranks remembered at most. Each is a rank this one holds failed that
    /// still sends: more than a few at once is a crowd of stale processes,
    /// and the rest wait until the entries expire (one timeout).
    pub(super) const CAPACITY: usize = 64;

    /// Whether `to` may be answered at `now`; records it if so.
    pub(super) fn admit(&mut self, to: Rank, now: Time, every: Duration) -> bool {
        if let Some(&at) = self.0.get(&to) {
            if now - at < every {
                return false;
            }
        } else if self.0.len() >= Self::CAPACITY {
            self.0.retain(|_, at| now - *at < every);
            if self.0.len() >= Self::CAPACITY {
                return false;
            }
        }
        self.0.insert(to, now);
        true
    }
}

impl Engine {
    /// Decodes a message, applies the trust checks every kind shares, and
    /// hands it to the handler of its kind.
    pub(super) fn on_message(
        &mut self,
        now: Time,
        from: Option<Rank>,
        bytes: &[u8],
    ) -> Result<(), HandleError> {
        let (header, msg) = match wire::decode(bytes, &self.keys, self.me, self.ring.len()) {
            Ok(d) => d,
            Err(reason) => return Err(self.reject(reason)),
        };
        let sender = header.sender;
        if sender == self.me {
            return Err(self.reject(RejectReason::FromSelf));
        }
        // Where the provider reports sources, the transport's idea of the
        // sender must be the header's; checked before the replay window so
        // that a copy raced in from another address cannot burn the
        // genuine message's sequence number.
        if from.is_some_and(|f| f != sender) {
            return Err(self.reject(RejectReason::SourceMismatch));
        }
        if !self.links.admit(sender, header.seq, self.ring.len()) {
            return Err(self.reject(RejectReason::Replayed));
        }
        self.stats.received[header.kind.index()] += 1;
        if self.participation == Participation::Excluded {
            return Ok(());
        }
        // Trust order: a rank in our failed set is answered with an
        // exclusion and otherwise ignored; a notice whose origin is in our
        // failed set is never trusted (not even about us); then, being named
        // failed by anyone else means we are out: reports are final.
        if self.failed.contains(sender) {
            self.stats.dropped_from_failed += 1;
            self.reply_exclusion(now, sender);
            return Ok(());
        }
        if let Message::Notice(n) = &msg {
            if self.failed.contains(n.origin) {
                self.stats.dropped_untrusted_origin += 1;
                return Ok(());
            }
        }
        let names_me = match &msg {
            Message::Notice(n) => n.failed.contains(self.me),
            Message::SyncRequest { failed, .. } | Message::SyncReply { failed, .. } => {
                failed.contains(self.me)
            }
            _ => false,
        };
        if names_me {
            self.self_exclude(sender);
            return Ok(());
        }
        match msg {
            Message::Notice(notice) => self.on_notice(now, sender, notice, bytes),
            Message::ObserveMe { generation, slot } => {
                self.on_observe_me(now, sender, generation, slot)
            }
            Message::SyncRequest {
                digest,
                failed,
                left,
            } => self.on_sync_request(now, sender, digest, failed, left),
            Message::SyncReply { failed, left } => self.on_sync_reply(now, sender, failed, left),
            Message::Probe { nonce, about } => self.on_probe(now, sender, nonce, about),
            Message::ProbeAck {
                nonce,
                about,
                verdict,
            } => self.on_probe_ack(now, nonce, about, verdict),
            Message::Payload {
                origin,
                seq,
                hops: _,
                bytes: payload,
            } => self.on_payload(sender, origin, seq, payload, bytes),
        }
        Ok(())
    }

    /// Counts a dropped message and says why.
    fn reject(&mut self, reason: RejectReason) -> HandleError {
        self.stats.rejected[reason.index()] += 1;
        HandleError::Rejected(reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const N: u32 = 1 << 20;

    #[test]
    fn a_window_admits_each_number_once_and_nothing_older_than_64() {
        let mut w = PeerLinks::default();
        assert!(w.admit(7, 100, N));
        assert!(!w.admit(7, 100, N), "the same number again");
        assert!(w.admit(7, 90, N), "late but inside the window");
        assert!(!w.admit(7, 90, N));
        assert!(w.admit(7, 101, N));
        assert!(!w.admit(7, 101 - 64, N), "older than the window");
        assert!(w.admit(7, 101 - 63, N));
        assert!(w.admit(7, 1_000, N), "a jump forward");
        assert!(!w.admit(7, 101, N), "now older than the window");
        assert!(w.admit(3, 1, N), "senders are independent");
        assert!(w.admit(9, 5, N));
        assert_eq!(w.len(), 3);
        assert!(!w.admit(3, 1, N) && !w.admit(9, 5, N) && !w.admit(7, 1_000, N));
        assert_eq!(std::mem::size_of::<PeerLink>(), 28);
    }

    #[test]
    fn each_link_counts_its_own_messages_from_1() {
        let mut l = PeerLinks::default();
        assert_eq!(
            (l.next_out(5, N), l.next_out(5, N), l.next_out(2, N)),
            (1, 2, 1)
        );
        assert!(l.admit(5, 1, N), "sending and receiving are independent");
        assert_eq!(l.next_out(5, N), 3);
        assert_eq!(l.len(), 2);
        assert_eq!(l.links.capacity(), 42, "room for the overlay at once");
    }

    #[test]
    fn sync_and_exclusion_limits_are_per_peer_per_period_and_bounded() {
        let t = |ms: u64| Time::from_nanos(ms * 1_000_000);
        let every = Duration::from_millis(100);
        let mut s = SyncLimit::default();
        assert!(s.admit(1, t(10), every));
        assert!(!s.admit(1, t(50), every));
        assert!(s.admit(2, t(60), every));
        assert!(s.admit(1, t(110), every));
        let mut x = ExclusionReplies::default();
        for r in 0..ExclusionReplies::CAPACITY as Rank {
            assert!(x.admit(r, t(1), every));
        }
        assert!(!x.admit(0, t(2), every), "once per timeout");
        assert!(!x.admit(999, t(2), every), "memory full");
        assert!(x.admit(999, t(200), every), "expired entries make room");
        assert!(x.0.len() <= ExclusionReplies::CAPACITY);
    }
}
