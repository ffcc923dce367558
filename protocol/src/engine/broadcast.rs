//! Broadcast: fan-out of notices and payloads over the overlay.
//!
//! Owns: the overlay and a broadcast step's targets ([`Broadcast::step`]),
//! each step's copies in order ([`Fanout`], sent lazily so that a target
//! learned failed meanwhile is skipped: the Engine's `poll_fanout` seals
//! each as it leaves), and the leaves learned from others waiting for the
//! next batch. The news itself (a notice's forward-once, the leave batch,
//! ranks learned by sync) is `membership`'s. Application payloads use the
//! same fan-out; their delivery order, de-duplication and repair are
//! `payloads`'. Must not: decide who failed, or send a copy to a rank
//! known failed or left (but the declared ranks' own exclusion notices,
//! [`Fanout::exclusions`]).

use std::sync::Arc;

use crate::config::Rank;
use crate::overlay::{Links, MAX_LINKS, Overlay};
use crate::ring::Ring;
use crate::wire::Kind;

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
/// meanwhile is skipped; or the exclusion notices of ranks just declared
/// ([`Fanout::exclusions`]), queued behind the declaration's broadcast.
#[derive(Clone, Debug)]
pub(super) struct Fanout {
    /// The unsealed message, shared by the copies.
    bytes: Arc<[u8]>,
    kind: Kind,
    targets: Box<[Rank]>,
    next: usize,
    /// The targets are the declared ranks themselves: sent although gone.
    exclusion: bool,
}

impl Broadcast {
    /// A broadcast step of the unsealed `bytes` (of `kind`) by `me` on
    /// `ring`, rooted at `root`: its targets in send order, less `me` and
    /// the ranks `skipped` says; `None` if it has none.
    pub(super) fn step(
        &self,
        kind: Kind,
        bytes: Arc<[u8]>,
        ring: &Ring,
        me: Rank,
        root: Rank,
        skipped: impl Fn(Rank) -> bool,
    ) -> Option<Fanout> {
        let mut buf: Links = [0; MAX_LINKS];
        let my_pos = ring.position_of(me);
        let len = self
            .overlay
            .send_order(my_pos, ring.position_of(root), &mut buf);
        let targets: Box<[Rank]> = buf[..len]
            .iter()
            .map(|&p| ring.rank_at(p))
            .filter(|&r| r != me && !skipped(r))
            .collect();
        (!targets.is_empty()).then_some(Fanout {
            bytes,
            kind,
            targets,
            next: 0,
            exclusion: false,
        })
    }

    /// Queues leaves learned from others for the next batch.
    pub(super) fn batch_leaves(&mut self, left: &[Rank]) {
        self.pending_left.extend_from_slice(left);
    }

    /// The leaves learned since the last batch, ascending, once; `None` if
    /// there are none.
    pub(super) fn take_leaves(&mut self) -> Option<Vec<Rank>> {
        if self.pending_left.is_empty() {
            return None;
        }
        let mut left = std::mem::take(&mut self.pending_left);
        left.sort_unstable();
        left.dedup();
        Some(left)
    }
}

impl Fanout {
    /// The notice `bytes` that declared `ranks`, to each of them (a stopped
    /// rank that resumes finds it and stops): queued after the
    /// declaration's own broadcast step, so that the copies the survivors
    /// wait for leave first. A send to a dead process can cost the
    /// provider a reconnection refused (0.6 ms seen, `ffd run -n 8 --netns
    /// 8`), and nobody waits for this one.
    pub(super) fn exclusions(bytes: Arc<[u8]>, ranks: &[Rank]) -> Fanout {
        Fanout {
            bytes,
            kind: Kind::Notice,
            targets: ranks.into(),
            next: 0,
            exclusion: true,
        }
    }

    /// Whether this step is the exclusion notices of declared ranks.
    pub(super) fn is_exclusion(&self) -> bool {
        self.exclusion
    }

    /// The next target of this step that is not `gone`, with its kind and
    /// bytes; `None` once all are sent.
    pub(super) fn next_copy(
        &mut self,
        gone: impl Fn(Rank) -> bool,
    ) -> Option<(Rank, Kind, Arc<[u8]>)> {
        while self.next < self.targets.len() {
            let to = self.targets[self.next];
            self.next += 1;
            if gone(to) && !self.exclusion {
                continue;
            }
            return Some((to, self.kind, self.bytes.clone()));
        }
        None
    }
}
