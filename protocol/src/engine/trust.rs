//! Which received messages are believed, and how much work one may draw.
//!
//! Owns: the sequence numbers of each link ([`PeerLinks`]: the next one
//! to send a peer, the window of those received from it) and the sealing
//! of every copy that leaves ([`Sealing::seal`]); the checks every
//! received message passes before a handler sees it, in order: the codec
//! (cheap filters, then the tag, then the body), not from this rank
//! itself, the transport's source address against the header's sender,
//! the sender's replay window ([`Sealing::open`]); then the protocol's
//! trust rules ([`judge`]: a sender or notice origin in the failed set is
//! not believed; being named failed excludes this rank). Also the
//! per-peer limits that bound the work a single message can draw
//! ([`Limits`]): sync requests honoured ([`SyncLimit`]) and exclusion
//! replies ([`ExclusionReplies`]). The Engine's glue (counting a drop,
//! acting on a verdict, the dispatch by kind) is in `mod.rs`'s
//! `on_message`. Must not: change the failed or left sets (the handlers
//! and `membership` do), or keep state for ranks it never exchanged a
//! message with (memory stays O(peers), small enough for a simulator of
//! 2^20 ranks).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Rank, Time};
use crate::overlay::levels;
use crate::ranks::RankSet;
use crate::ring::Ring;
use crate::wire::{self, Header, JobKeys, Message, RejectReason, Sealed};

/// Width of a sender's replay window, in sequence numbers.
pub(super) const REPLAY_WINDOW: u64 = 64;

/// This rank's link with one peer: the next sequence number it sends the
/// peer, and the window of those received from it (the newest, and which
/// of the 64 before it, bit i: `newest_in - i`, were seen).
#[derive(Clone, Copy, Debug)]
struct LinkState {
    next_out: u64,
    newest_in: u64,
    seen_in: u64,
}

impl LinkState {
    const NEW: LinkState = LinkState {
        next_out: 1,
        newest_in: 0,
        seen_in: 0,
    };
}

/// Where a peer's link state lives: by overlay slot for the ranks at ring
/// offsets ±2^k (every rank a broadcast reaches this one from or sends to,
/// ring neighbours included), by rank for any other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LinkKey {
    /// `k` for the rank at offset +2^k, `levels + k` for −2^k.
    Overlay(u32),
    Other(Rank),
}

/// The key of `peer`'s link, seen from ring position `my_pos` of `ring`:
/// one subtraction and a power-of-two test, no search.
pub(super) fn link_key(ring: &Ring, my_pos: u32, peer: Rank) -> LinkKey {
    let n = ring.len();
    let d = (ring.position_of(peer) + n - my_pos) % n;
    if d != 0 && d.is_power_of_two() {
        LinkKey::Overlay(d.trailing_zeros())
    } else if d != 0 && (n - d).is_power_of_two() {
        LinkKey::Overlay(levels(n) + (n - d).trailing_zeros())
    } else {
        LinkKey::Other(peer)
    }
}

/// Sequence numbers per link, only for peers this rank exchanged messages
/// with. Numbering per link (not per sender) keeps the numbers a receiver
/// sees from one sender consecutive, so its 64-wide window absorbs any
/// reordering of up to 64 messages on that link, however many the sender
/// sends elsewhere meanwhile; the tag binds each copy to its receiver, so a
/// number can only be used where it was given.
///
/// Memory and speed (every message touches one on each side): the
/// overlay's links (2·⌈log2 N⌉, 40 at 2^20) sit in one table allocated at
/// the first message, 24 bytes each, found by their ring offset without a
/// search; other peers (exclusion replies, probes) in a small sorted list.
/// (The simulator's Engines keep none unless it authenticates:
/// `Sealing::next_seq`.)
#[derive(Clone, Debug, Default)]
pub(super) struct PeerLinks {
    overlay: Box<[LinkState]>,
    /// Sorted by rank; a boxed slice (16 bytes in the Engine's hot lines,
    /// not a Vec's 24): a new entry here is rare and may reallocate.
    others: Box<[(Rank, LinkState)]>,
}

impl PeerLinks {
    /// The link for `key` in a job of `n` ranks, made if new.
    fn state(&mut self, key: LinkKey, n: u32) -> &mut LinkState {
        match key {
            LinkKey::Overlay(slot) => {
                if self.overlay.is_empty() {
                    self.overlay = vec![LinkState::NEW; 2 * levels(n) as usize].into_boxed_slice();
                }
                &mut self.overlay[slot as usize]
            }
            LinkKey::Other(peer) => {
                let i = match self.others.binary_search_by_key(&peer, |&(r, _)| r) {
                    Ok(i) => i,
                    Err(i) => {
                        let mut others = std::mem::take(&mut self.others).into_vec();
                        others.insert(i, (peer, LinkState::NEW));
                        self.others = others.into_boxed_slice();
                        i
                    }
                };
                &mut self.others[i].1
            }
        }
    }

    /// The sequence number of the next message on link `key` (from 1), in
    /// a job of `n` ranks.
    pub(super) fn next_out(&mut self, key: LinkKey, n: u32) -> u64 {
        let link = self.state(key, n);
        let seq = link.next_out;
        link.next_out = seq + 1;
        seq
    }

    /// Admits sequence number `seq` received on link `key` (an
    /// authenticated sender) in a job of `n` ranks: true the first time,
    /// false for a number seen before or older than the window.
    pub(super) fn admit(&mut self, key: LinkKey, seq: u64, n: u32) -> bool {
        let link = self.state(key, n);
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
}

/// This rank's end of its authenticated links: the job key and the
/// message key every tag is checked with (shared: one copy for every
/// Engine of a simulator), and the sequence numbers per link (the next to
/// send, the replay window of those received). Kept in the Engine's hot
/// lines.
#[derive(Clone, Debug)]
pub(super) struct Sealing {
    pub(super) keys: Arc<JobKeys>,
    pub(super) links: PeerLinks,
}

impl Sealing {
    /// This rank's end of its links with `keys`, none used yet.
    pub(super) fn new(keys: Arc<JobKeys>) -> Sealing {
        Sealing {
            keys,
            links: PeerLinks::default(),
        }
    }

    /// Opens `bytes` received by `me` (at `my_pos` on `ring`), from the
    /// transport's source `from` if it gives one, in order: the codec
    /// checks the job key, then the tag, then the body; the sender must
    /// not be `me`, must be `from`, and the sequence number must be new in
    /// its link's window. The reason of the first check that fails
    /// otherwise.
    pub(super) fn open<'a>(
        &mut self,
        bytes: &'a [u8],
        from: Option<Rank>,
        me: Rank,
        ring: &Ring,
        my_pos: u32,
    ) -> Result<(Header, Message<'a>), RejectReason> {
        let n = ring.len();
        let (header, msg) = wire::decode(bytes, &self.keys, me, n)?;
        let sender = header.sender;
        if sender == me {
            return Err(RejectReason::FromSelf);
        }
        // Where the provider reports sources, the transport's idea of the
        // sender must be the header's; checked before the replay window so
        // that a copy raced in from another address cannot burn the
        // genuine message's sequence number.
        if from.is_some_and(|f| f != sender) {
            return Err(RejectReason::SourceMismatch);
        }
        // (Keys that authenticate nothing number nothing: `next_seq`.)
        if self.keys.authenticates() {
            let link = link_key(ring, my_pos, sender);
            if !self.links.admit(link, header.seq, n) {
                return Err(RejectReason::Replayed);
            }
        }
        Ok((header, msg))
    }

    /// The sequence number of the next copy to `to`, from the rank at
    /// `my_pos` on `ring`. Always 1 (and no link state) with keys that
    /// authenticate nothing (the simulator's, unless it authenticates):
    /// there every copy arrives once and in order on its link, so no
    /// window would ever refuse one, and the link state would cost a cache
    /// miss per copy and 2·⌈log2 N⌉ entries per rank.
    pub(super) fn next_seq(&mut self, ring: &Ring, my_pos: u32, to: Rank) -> u64 {
        if !self.keys.authenticates() {
            return 1;
        }
        let link = link_key(ring, my_pos, to);
        self.links.next_out(link, ring.len())
    }

    /// `message` (unsealed) sealed for `to` with the next sequence number
    /// of that link.
    pub(super) fn seal(&mut self, ring: &Ring, my_pos: u32, to: Rank, message: Sealed) -> Sealed {
        let seq = self.next_seq(ring, my_pos, to);
        message.sealed_as(seq, to, &self.keys)
    }

    /// A copy of the shared unsealed `bytes` sealed for `to` with the
    /// next sequence number of that link.
    pub(super) fn seal_copy(
        &mut self,
        ring: &Ring,
        my_pos: u32,
        to: Rank,
        bytes: Arc<[u8]>,
    ) -> Sealed {
        let seq = self.next_seq(ring, my_pos, to);
        Sealed::new(bytes, seq, to, &self.keys)
    }
}

/// The rate limits of answers this rank gives: exclusion replies and
/// sync requests honoured.
#[derive(Clone, Debug, Default)]
pub(super) struct Limits {
    /// Recent exclusion replies (bounded).
    exclusion_replies: ExclusionReplies,
    /// Recent sync requests honoured, per peer.
    sync_limit: SyncLimit,
}

impl Limits {
    /// Whether `to` (a rank in the failed set that still sends) may be
    /// answered with an exclusion notice at `now`: once per `every` per
    /// rank, at most [`ExclusionReplies::CAPACITY`] ranks remembered.
    /// Records the reply if so.
    pub(super) fn reply_exclusion(&mut self, to: Rank, now: Time, every: Duration) -> bool {
        self.exclusion_replies.admit(to, now, every)
    }

    /// Whether a sync request from `peer` (this rank's emitter, observer
    /// or same-host neighbour) may be honoured at `now`: once per `every`
    /// per peer. Records it if so.
    pub(super) fn honour_sync(&mut self, peer: Rank, now: Time, every: Duration) -> bool {
        self.sync_limit.admit(peer, now, every)
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

/// What the trust rules say of an opened message from `sender`, in their
/// order: a rank in the failed set is answered with an exclusion and
/// otherwise ignored; a notice whose origin is in the failed set is never
/// trusted (not even about this rank); then being named failed by anyone
/// else means this rank is out: reports are final.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Trust {
    /// The sender is in the failed set: answer with an exclusion.
    FromFailed,
    /// A notice whose origin is in the failed set: drop it.
    UntrustedOrigin,
    /// The message names this rank failed: exclude this rank.
    NamesMe,
    /// Hand it to the handler of its kind.
    Believed,
}

/// The trust rules ([`Trust`]) applied to `msg` from `sender`, seen by
/// `me` with the failed set `failed`.
pub(super) fn judge(msg: &Message<'_>, sender: Rank, me: Rank, failed: &RankSet) -> Trust {
    if failed.contains(sender) {
        return Trust::FromFailed;
    }
    if let Message::Notice(n) = msg {
        if failed.contains(n.origin) {
            return Trust::UntrustedOrigin;
        }
    }
    let names_me = match msg {
        Message::Notice(n) => n.failed.contains(me),
        Message::SyncRequest { failed, .. } | Message::SyncReply { failed, .. } => {
            failed.contains(me)
        }
        // A participant's value, or a decision, naming this rank.
        Message::AgreeUp(up) => {
            up.value.failed.contains(me) || up.decided.is_some_and(|d| d.failed.contains(me))
        }
        Message::AgreeDown(down) => down.decision.failed.contains(me),
        _ => false,
    };
    if names_me {
        Trust::NamesMe
    } else {
        Trust::Believed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const N: u32 = 1 << 20;

    #[test]
    fn a_window_admits_each_number_once_and_nothing_older_than_64() {
        let mut w = PeerLinks::default();
        let (a, b, c) = (LinkKey::Overlay(3), LinkKey::Other(9), LinkKey::Overlay(0));
        assert!(w.admit(a, 100, N));
        assert!(!w.admit(a, 100, N), "the same number again");
        assert!(w.admit(a, 90, N), "late but inside the window");
        assert!(!w.admit(a, 90, N));
        assert!(w.admit(a, 101, N));
        assert!(!w.admit(a, 101 - 64, N), "older than the window");
        assert!(w.admit(a, 101 - 63, N));
        assert!(w.admit(a, 1_000, N), "a jump forward");
        assert!(!w.admit(a, 101, N), "now older than the window");
        assert!(w.admit(c, 1, N), "links are independent");
        assert!(w.admit(b, 5, N));
        assert!(!w.admit(c, 1, N) && !w.admit(b, 5, N) && !w.admit(a, 1_000, N));
        assert_eq!(w.overlay.len(), 40, "2 × log2 N overlay links, at once");
        assert_eq!(w.others.len(), 1);
        assert_eq!(std::mem::size_of::<LinkState>(), 24);
    }

    #[test]
    fn each_link_counts_its_own_messages_from_1() {
        let mut l = PeerLinks::default();
        let (five, two) = (LinkKey::Other(5), LinkKey::Overlay(1));
        assert_eq!(
            (l.next_out(five, N), l.next_out(five, N), l.next_out(two, N)),
            (1, 2, 1)
        );
        assert!(l.admit(five, 1, N), "sending and receiving are independent");
        assert_eq!(l.next_out(five, N), 3);
    }

    #[test]
    fn overlay_neighbours_have_slots_and_others_their_rank() {
        for n in [2u32, 3, 8, 12, 1000, 1 << 16] {
            let ring = Ring::by_rank(n);
            let levels = levels(n);
            for me in [0, n / 2, n - 1] {
                let mut slots = std::collections::BTreeMap::new();
                for k in 0..levels {
                    for peer in [(me + (1 << k)) % n, (me + n - (1 << k)) % n] {
                        if peer == me {
                            continue;
                        }
                        let LinkKey::Overlay(slot) = link_key(&ring, me, peer) else {
                            panic!("n={n}: {peer} is an overlay neighbour of {me}")
                        };
                        assert!(slot < 2 * levels);
                        // One peer, one slot; one slot, one peer.
                        assert_eq!(*slots.entry(slot).or_insert(peer), peer, "n={n}");
                    }
                }
                if n > 8 {
                    let far = (me + 3) % n;
                    assert_eq!(link_key(&ring, me, far), LinkKey::Other(far));
                }
                assert_eq!(link_key(&ring, me, me), LinkKey::Other(me));
            }
        }
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
