//! Broadcast: fan-out of notices and payloads over the overlay.
//!
//! Owns: the overlay and a broadcast step's targets ([`Broadcast::step`]),
//! each step's copies in order ([`Fanout`], sent lazily so that a target
//! learned failed meanwhile is skipped: the Engine's `poll_fanout` seals
//! each as it leaves), the steps held for a period because another rank
//! reaches their targets first ([`Covered`]; the Engine's glue at the
//! end: hold and release), and the leaves learned from others waiting for
//! the next batch. The news itself (a notice's forward-once, the leave
//! batch, ranks learned by sync) is `membership`'s. Application payloads use the
//! same fan-out; their delivery order, de-duplication and repair are
//! `payloads`'. Must not: decide who failed, or send a copy to a rank
//! known failed or left (but the declared ranks' own exclusion notices,
//! [`Fanout::exclusions`]).

use std::collections::VecDeque;
use std::sync::Arc;

use super::{Engine, Timer, push_lean};
use crate::config::{Rank, Time};
use crate::overlay::{Links, MAX_LINKS, Overlay};
use crate::ring::Ring;
use crate::wire::Kind;

/// Broadcast's own state beyond the steps in progress (which the Engine
/// keeps in its hot lines): the overlay, the held steps, and the leaves
/// learned from others not yet forwarded (see `leave_batch`).
#[derive(Clone, Debug)]
pub(super) struct Broadcast {
    pub(super) overlay: Overlay,
    /// Steps held until the instant beside each, oldest first, and who
    /// covers their targets meanwhile (`Engine::hold_copies`).
    pub(super) held: VecDeque<(Time, Covered, Fanout)>,
    pub(super) pending_left: Vec<Rank>,
}

/// Who reaches the targets of a held step before it leaves: its copies
/// only wake ranks that know already, unless that rank failed first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Covered {
    /// The rank that posted the news on this host's board, which sent its
    /// own copies to other hosts as it posted (`Engine::on_board_notice`).
    ByBoardPoster,
    /// The notice's origin, which sent it to every one of its overlay
    /// links (`Engine::forward_failures`).
    ByOrigin,
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

    /// `origin`'s overlay links on `ring` as ring positions, and how many
    /// (the targets of every broadcast step `origin` roots).
    pub(super) fn links_of(&self, ring: &Ring, origin: Rank) -> (Links, usize) {
        let mut buf: Links = [0; MAX_LINKS];
        let pos = ring.position_of(origin);
        let len = self.overlay.send_order(pos, pos, &mut buf);
        (buf, len)
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

    /// Moves the targets not yet sent that `covered` admits into a step of
    /// their own (the same bytes, in send order); `None` if none are.
    pub(super) fn split_off(&mut self, covered: impl Fn(Rank) -> bool) -> Option<Fanout> {
        let (split, kept): (Vec<Rank>, Vec<Rank>) =
            self.targets[self.next..].iter().partition(|&&r| covered(r));
        if split.is_empty() {
            return None;
        }
        self.targets = kept.into();
        self.next = 0;
        Some(Fanout {
            bytes: self.bytes.clone(),
            kind: self.kind,
            targets: split.into(),
            next: 0,
            exclusion: self.exclusion,
        })
    }

    /// Whether every target of this step was sent (or skipped).
    pub(super) fn is_done(&self) -> bool {
        self.next >= self.targets.len()
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

// ----- the Engine's glue: held steps -----

impl Engine {
    /// Holds broadcast step `step` for a period
    /// ([`EngineConfig::board_forward_delay`]): `by` reaches its targets
    /// first.
    ///
    /// [`EngineConfig::board_forward_delay`]: crate::config::EngineConfig::board_forward_delay
    pub(super) fn hold_copies(&mut self, now: Time, by: Covered, step: Fanout) {
        let due = now + self.config.board_forward_delay();
        push_lean(&mut self.broadcast.held, (due, by, step));
        if self.timers.get(Timer::HeldCopies) == Time::NEVER {
            self.timers.set(Timer::HeldCopies, due);
        }
    }

    /// The held steps that are due go out (in the order they were held; a
    /// target gone meanwhile is skipped as for any step); the timer then
    /// waits for the next. A rank that left still sends them, as it still
    /// forwards; an excluded one holds nothing (`self_exclude`). An
    /// emptied queue gives its room back: most ranks hold news once, and a
    /// simulator keeps a million of them.
    pub(super) fn release_held_copies(&mut self, now: Time) {
        let held = &mut self.broadcast.held;
        while held.front().is_some_and(|&(due, ..)| due <= now) {
            let Some((_, by, step)) = held.pop_front() else {
                break;
            };
            match by {
                Covered::ByBoardPoster => self.stats.hosts.board_forwards_released += 1,
                Covered::ByOrigin => self.stats.notices.origin_copies_released += 1,
            }
            push_lean(&mut self.fanouts, step);
        }
        match self.broadcast.held.front() {
            Some(&(due, ..)) => self.timers.set(Timer::HeldCopies, due),
            None => self.broadcast.held = VecDeque::new(),
        }
    }
}
