//! Broadcast: fan-out of notices and payloads over the overlay.
//!
//! Owns: broadcast steps in progress ([`Fanout`], sent lazily so that a
//! target learned failed meanwhile is skipped), the handling and
//! forward-once of received notices, the batching of leaves learned from
//! others, and the re-broadcast of ranks learned by sync. Application
//! payloads use the same fan-out; their delivery order, de-duplication
//! and repair are `payloads`'. Must not: decide who failed (a notice's
//! news goes through `membership::learn`), or send a copy to a rank known
//! failed or left.

use std::sync::Arc;

use super::{Engine, Output, Participation, Timer};
use crate::config::{Rank, Time};
use crate::overlay::{Links, MAX_LINKS, Overlay};
use crate::wire::{self, Kind, Notice, Sealed, TAG_LEN};

/// Broadcast's own state beyond the steps in progress (which the Engine
/// keeps in its hot lines): the overlay, and the leaves learned from
/// others not yet forwarded (see `leave_batch`).
#[derive(Clone, Debug)]
pub(super) struct Broadcast {
    pub(super) overlay: Overlay,
    pub(super) pending_left: Vec<Rank>,
}

/// One broadcast step in progress: its targets in send order, sent lazily
/// (each copy sealed as it leaves) so that a target learned failed
/// meanwhile is skipped.
#[derive(Clone, Debug)]
pub(super) struct Fanout {
    /// The unsealed message, shared by the copies.
    bytes: Arc<[u8]>,
    kind: Kind,
    targets: Box<[Rank]>,
    next: usize,
}

impl Engine {
    /// Queues a broadcast step of the unsealed `bytes` rooted at `root`,
    /// skipping `skip`, and the host's board readers if `board` (the news
    /// was posted on the board).
    pub(super) fn fan_out(
        &mut self,
        kind: Kind,
        bytes: Arc<[u8]>,
        root: Rank,
        skip: &[Rank],
        board: bool,
    ) {
        let mut buf: Links = [0; MAX_LINKS];
        let my_pos = self.ring.position_of(self.me);
        let len = self
            .broadcast
            .overlay
            .send_order(my_pos, self.ring.position_of(root), &mut buf);
        let targets: Box<[Rank]> = buf[..len]
            .iter()
            .map(|&p| self.ring.rank_at(p))
            .filter(|&r| {
                !skip.contains(&r)
                    && r != self.me
                    && !(board && self.same_host.reads_board(self.me, r))
            })
            .collect();
        if !targets.is_empty() {
            self.fanouts.push_back(Fanout {
                bytes,
                kind,
                targets,
                next: 0,
            });
        }
    }

    /// The next copy of the oldest broadcast step in progress, skipping
    /// targets known failed or left meanwhile, sealed with the next
    /// sequence number; `None` when all are sent.
    pub(super) fn poll_fanout(&mut self) -> Option<Output> {
        while let Some(f) = self.fanouts.front_mut() {
            while f.next < f.targets.len() {
                let to = f.targets[f.next];
                f.next += 1;
                if self.failed.contains(to) || self.left.contains(to) {
                    continue;
                }
                self.stats.messages.sent[f.kind.index()] += 1;
                self.stats.messages.bytes_sent += (f.bytes.len() + TAG_LEN) as u64;
                let bytes = f.bytes.clone();
                let seq = self.next_seq(to);
                let message = Sealed::new(bytes, seq, to, &self.sealing.keys);
                return Some(Output::Send { to, message });
            }
            self.fanouts.pop_front();
        }
        None
    }

    /// A notice (already trusted by `on_message`): learn what is new.
    /// Nothing new: a duplicate, counted and dropped (the common case at
    /// large N). New failures travel on at once, as received
    /// (forward-once, `bytes` re-sent with this rank as sender, each copy
    /// sealed anew); news of leaves only waits for the next leave batch.
    pub(super) fn on_notice(&mut self, now: Time, sender: Rank, n: Notice<'_>, bytes: &[u8]) {
        let (nf, nl) = self.learn(n.failed, n.left, n.origin, n.hops.saturating_add(1));
        if nf.is_empty() && nl.is_empty() {
            self.stats.messages.duplicate_notices += 1;
            return;
        }
        if !nf.is_empty() {
            // Failures travel at once, as received (forward-once); the
            // host's board readers learn them from the board.
            let board = self.post_on_board(&nf, n.origin);
            if let Some(fwd) = wire::forwarded(bytes, self.me) {
                self.stats.notices.notices_forwarded += 1;
                self.fan_out(Kind::Notice, fwd.into(), n.origin, &[sender], board);
            }
        } else {
            self.batch_leaves(now, &nl);
        }
        self.after_gone_changed(now);
    }

    /// Queues leaves learned from others for the next batch.
    pub(super) fn batch_leaves(&mut self, now: Time, left: &[Rank]) {
        if left.is_empty() {
            return;
        }
        self.broadcast.pending_left.extend_from_slice(left);
        if self.timers.get(Timer::LeaveBatch) == Time::NEVER {
            self.timers
                .set(Timer::LeaveBatch, now + self.config.leave_batch());
        }
    }

    /// Forwards the leaves learned since the last batch as one notice
    /// rooted here.
    pub(super) fn forward_leaves(&mut self) {
        if self.broadcast.pending_left.is_empty() || self.participation == Participation::Excluded {
            return;
        }
        let mut left = std::mem::take(&mut self.broadcast.pending_left);
        left.sort_unstable();
        left.dedup();
        self.stats.notices.notices_forwarded += 1;
        let m: Arc<[u8]> = self.encoder.notice(self.me, 0, &[], &left).into();
        self.fan_out(Kind::Notice, m, self.me, &[], false);
    }

    /// Ranks learned from a sync exchange are new to this part of the
    /// overlay too: broadcast them as a notice originated here.
    pub(super) fn rebroadcast_learned(&mut self, failed: &[Rank], left: &[Rank], peer: Rank) {
        if failed.is_empty() && left.is_empty() {
            return;
        }
        self.stats.sync.ranks_learned_by_sync += (failed.len() + left.len()) as u64;
        let m: Arc<[u8]> = self.encoder.notice(self.me, 0, failed, left).into();
        self.fan_out(Kind::Notice, m, self.me, &[peer], false);
    }
}
