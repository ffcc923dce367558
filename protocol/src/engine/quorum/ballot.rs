//! This rank's ballots in the accusations of others: the flood parent,
//! the forward-once of each round's flood, the subtree's votes and the
//! vote this rank sends up, the `Outcome` that closes a ballot, and what a
//! grown failed or left set ends. Methods of [`Quorum`]: they take `now`
//! and what they read of the Engine (a [`Cx`]), and push the [`Act`]s it
//! carries out.

use super::{Act, Cx, MAX_BALLOTS, Quorum, newer};
use crate::config::{Rank, Time};
use crate::wire::{self, Kind, OutcomeVerdict, VOTE_COMPLETE, VOTE_TIEBREAK};

/// One round's subtree as one rank sees it.
#[derive(Clone, Debug, Default)]
pub(super) struct Subtree {
    /// The latest vote of each rank that chose this one as flood parent:
    /// (child, count, flags).
    children: Vec<(Rank, u32, u16)>,
    /// Overlay link slots (`LinkKey::Overlay`) this rank forwarded the
    /// flood to: only those ranks can be its children, so only their votes
    /// count.
    forwarded: u64,
    /// Of `forwarded`, the slots that have not answered yet.
    pub(super) unresolved: u64,
}

impl Subtree {
    /// A subtree for a flood forwarded to the overlay slots `mask`.
    pub(super) fn forwarded_to(mask: u64) -> Self {
        Subtree {
            children: Vec::new(),
            forwarded: mask,
            unresolved: mask,
        }
    }

    /// This rank and its children's subtrees, at most `n` (the job's size:
    /// a vote above it does not decode, so a count above it, which only a
    /// faulty or forged child can cause, would lose the whole subtree's
    /// votes at the parent).
    pub(super) fn count(&self, n: u32) -> u32 {
        let count = self
            .children
            .iter()
            .fold(1u32, |c, &(_, k, _)| c.saturating_add(k));
        #[cfg(feature = "model-bugs")]
        if crate::model_bugs::on(crate::model_bugs::Bug::UncappedVotes) {
            return count;
        }
        count.min(n)
    }

    /// [`VOTE_TIEBREAK`] if this rank (`me_lowest`) or a child's subtree
    /// holds the lowest live rank; [`VOTE_COMPLETE`] once everyone it
    /// forwarded to answered and every child's subtree is complete.
    pub(super) fn flags(&self, me_lowest: bool) -> u16 {
        let mut tiebreak = me_lowest;
        let mut complete = self.unresolved == 0;
        for &(_, _, f) in &self.children {
            tiebreak |= f & VOTE_TIEBREAK != 0;
            complete &= f & VOTE_COMPLETE != 0;
        }
        (u16::from(tiebreak) * VOTE_TIEBREAK) | (u16::from(complete) * VOTE_COMPLETE)
    }

    /// Records the vote of `child` (whose overlay slot is `bit`); counts
    /// only grow. A vote from a rank the flood was not forwarded to is no
    /// child's: refused (false), never counted.
    pub(super) fn record(&mut self, child: Rank, bit: u64, count: u32, flags: u16) -> bool {
        #[cfg(feature = "model-bugs")]
        let refuse = bit & self.forwarded == 0
            && !crate::model_bugs::on(crate::model_bugs::Bug::UncappedVotes);
        #[cfg(not(feature = "model-bugs"))]
        let refuse = bit & self.forwarded == 0;
        if refuse {
            return false;
        }
        self.unresolved &= !bit;
        match self.children.iter_mut().find(|(c, _, _)| *c == child) {
            Some(entry) => *entry = (child, entry.1.max(count), flags | (entry.2 & VOTE_TIEBREAK)),
            None => self.children.push((child, count, flags)),
        }
        true
    }
}

/// This rank's part in another rank's accusation (its newest round).
#[derive(Clone, Debug)]
pub(super) struct Ballot {
    pub(super) accuser: Rank,
    pub(super) suspect: Rank,
    pub(super) nonce: u32,
    pub(super) parent: Rank,
    pub(super) tree: Subtree,
    /// A partial vote goes at this time if the subtree is not complete.
    pub(super) vote_due: Time,
    /// The last vote sent: (count, flags).
    pub(super) sent: Option<(u32, u16)>,
    /// The accusation ended (its `Outcome` came through here): the ballot
    /// is kept, inert, until it expires, so that straggling copies of the
    /// round's flood are recognised and not forwarded again (a flood
    /// forwarded once per round, however its copies and the outcome race).
    /// Also set when the ballot is [spent](Ballot::spent).
    pub(super) closed: bool,
    /// 1.5 timeouts after this rank joined the round; [`Time::NEVER`] once
    /// spent.
    pub(super) expires: Time,
}

impl Subtree {
    /// The ranks that voted here as this rank's children (feature `model`).
    #[cfg(feature = "model")]
    pub(super) fn child_ranks(&self) -> impl Iterator<Item = Rank> + '_ {
        self.children.iter().map(|c| c.0)
    }
}

impl Ballot {
    /// Expired with no `Outcome` seen: the accusation may still be
    /// counting this round, so the ballot is kept, closed and without its
    /// subtree, until a newer round replaces it, its accuser or suspect is
    /// gone, or a new ballot needs its place ([`MAX_BALLOTS`]). Forgotten,
    /// a straggling copy of the round made this rank join it again under a
    /// second flood parent, and its subtree was counted twice
    /// (`docs/design.md` §4.11 "Primary partition", "Spent ballots").
    pub(super) fn spend(&mut self) {
        self.closed = true;
        self.tree = Subtree::default();
        self.expires = Time::NEVER;
    }

    pub(super) fn spent(&self) -> bool {
        self.expires == Time::NEVER
    }
}

impl Quorum {
    /// Sends this rank's vote in `accuser`'s accusation of `suspect` if it
    /// is due (the subtree is complete, or the wait is over) and differs
    /// from the last one sent.
    pub(super) fn maybe_vote(&mut self, now: Time, accuser: Rank, suspect: Rank, cx: &mut Cx<'_>) {
        let me_lowest = cx.lowest_live() == cx.me;
        let n = cx.ring.len();
        let Some(b) = self.open.as_mut().and_then(|q| {
            q.ballots
                .iter_mut()
                .find(|b| b.accuser == accuser && b.suspect == suspect && !b.closed)
        }) else {
            return;
        };
        let count = b.tree.count(n);
        let flags = b.tree.flags(me_lowest);
        let due = flags & VOTE_COMPLETE != 0 || now >= b.vote_due;
        if !due || b.sent == Some((count, flags)) {
            return;
        }
        b.sent = Some((count, flags));
        let (parent, nonce) = (b.parent, b.nonce);
        cx.stats.quorum.votes_sent += 1;
        let m = cx.encoder.vote(accuser, nonce, count, flags);
        cx.send(parent, Kind::Vote, m);
    }

    /// `round`: the accuser, the round's nonce, the suspect, and whether
    /// the suspect's whole host is accused.
    pub(super) fn on_suspect(
        &mut self,
        now: Time,
        sender: Rank,
        round: (Rank, u32, Rank, bool),
        bytes: &[u8],
        cx: &mut Cx<'_>,
    ) {
        let (accuser, nonce, suspect, host) = round;
        if cx.is_gone(accuser) {
            cx.stats.drops.dropped_untrusted_origin += 1;
            return;
        }
        if accuser == cx.me && suspect == cx.me {
            // Nobody accuses itself: a forgery or a bug, never answered.
            return;
        }
        let my_host_accused = host
            && cx
                .hosts
                .is_some_and(|h| h.host_of(suspect) == h.host_of(cx.me));
        if host && cx.hosts.is_none() {
            // Host groups are agreed at start: a forgery or a bug.
            return;
        }
        if suspect == cx.me || (my_host_accused && accuser != cx.me) {
            // Reachable, so not silent: say so to the accuser.
            let m = cx.encoder.refute(accuser, nonce);
            cx.send(accuser, Kind::Refute, m);
            return;
        }
        if cx.is_gone(suspect) {
            return;
        }
        let bit = cx.slot_bit(sender);
        if accuser == cx.me {
            // A copy of our own flood: that neighbour is no child.
            if let Some(a) = self.open.as_mut().and_then(|q| {
                q.accusations
                    .iter_mut()
                    .find(|a| a.suspect == suspect && a.nonce == nonce)
            }) {
                a.tree.unresolved &= !bit;
            }
            return;
        }
        let others_until = now + cx.config.timeout;
        let q = self.open();
        q.others_until = q.others_until.max(others_until);
        let existing = q
            .ballots
            .iter()
            .position(|b| b.accuser == accuser && b.suspect == suspect);
        match existing {
            Some(i) if q.ballots[i].closed && !newer(nonce, q.ballots[i].nonce) => return,
            Some(i) if q.ballots[i].nonce == nonce => {
                // Another copy of a round we joined: not our child.
                q.ballots[i].tree.unresolved &= !bit;
                self.maybe_vote(now, accuser, suspect, cx);
                cx.acts.push(Act::Rearm);
                return;
            }
            Some(i) if !newer(nonce, q.ballots[i].nonce) => return,
            Some(i) => {
                q.ballots.swap_remove(i);
            }
            None if q.ballots.len() >= MAX_BALLOTS => {
                match q.ballots.iter().position(Ballot::spent) {
                    Some(i) => {
                        q.ballots.swap_remove(i);
                    }
                    None => {
                        cx.stats.quorum.ballots_refused += 1;
                        return;
                    }
                }
            }
            None => {}
        }
        let mask = cx.flood_mask(accuser, sender, suspect, host);
        let ballot = Ballot {
            accuser,
            suspect,
            nonce,
            parent: sender,
            tree: Subtree::forwarded_to(mask),
            vote_due: now + cx.config.vote_wait(),
            sent: None,
            closed: false,
            expires: now + cx.config.timeout + cx.config.timeout / 2,
        };
        self.open().ballots.push(ballot);
        if let Some(fwd) = wire::forwarded(bytes, cx.me) {
            cx.fan_out(Kind::Suspect, fwd.into(), accuser, Some(sender));
        }
        self.maybe_vote(now, accuser, suspect, cx);
        cx.acts.push(Act::Rearm);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_vote(
        &mut self,
        now: Time,
        sender: Rank,
        accuser: Rank,
        nonce: u32,
        count: u32,
        flags: u16,
        cx: &mut Cx<'_>,
    ) {
        let bit = cx.slot_bit(sender);
        let n = cx.ring.len();
        let Some(q) = self.open.as_mut() else {
            return;
        };
        if accuser == cx.me {
            if let Some(a) = q.accusations.iter_mut().find(|a| a.nonce == nonce) {
                if !a.tree.record(sender, bit, count, flags) {
                    cx.stats.drops.dropped_untrusted_origin += 1;
                    return;
                }
                let votes = a.tree.count(n);
                if votes > a.best {
                    a.best = votes;
                    a.grew_at = now;
                }
                self.check(now, cx);
                cx.acts.push(Act::Rearm);
            }
            return;
        }
        let Some(b) = q
            .ballots
            .iter_mut()
            .find(|b| b.accuser == accuser && b.nonce == nonce && !b.closed)
        else {
            return;
        };
        if !b.tree.record(sender, bit, count, flags) {
            cx.stats.drops.dropped_untrusted_origin += 1;
            return;
        }
        let suspect = b.suspect;
        self.maybe_vote(now, accuser, suspect, cx);
        cx.acts.push(Act::Rearm);
    }

    /// The accusation `(accuser, nonce, suspect)` ended (`nonce`: its last
    /// round).
    pub(super) fn on_outcome(
        &mut self,
        sender: Rank,
        (accuser, nonce, suspect): (Rank, u32, Rank),
        verdict: OutcomeVerdict,
        bytes: &[u8],
        cx: &mut Cx<'_>,
    ) {
        if cx.is_gone(accuser) {
            return;
        }
        // Only ballot holders act and pass it on: they are exactly the
        // ranks the accusation's floods reached, connected through them.
        let Some(q) = self.open.as_mut() else {
            return;
        };
        let Some(b) = q
            .ballots
            .iter_mut()
            .find(|b| b.accuser == accuser && b.suspect == suspect && !b.closed)
        else {
            return;
        };
        b.closed = true;
        if newer(nonce, b.nonce) {
            b.nonce = nonce;
        }
        let Some(fwd) = wire::forwarded(bytes, cx.me) else {
            return;
        };
        match verdict {
            OutcomeVerdict::Withdrawn => {
                cx.fan_out(Kind::Outcome, fwd.into(), accuser, Some(sender));
                cx.acts.push(Act::Rearm);
            }
            // A voter whose live view shares its host has no minority to
            // leave with the accuser (it knows more failures than the
            // accuser did): it passes the outcome on and stays.
            OutcomeVerdict::NoQuorum if cx.view_on_my_host() => {
                cx.fan_out(Kind::Outcome, fwd.into(), accuser, Some(sender));
                cx.acts.push(Act::Rearm);
            }
            OutcomeVerdict::NoQuorum => {
                cx.flood_now(Kind::Outcome, fwd.into(), accuser, sender);
                self.give_up(accuser, cx);
            }
        }
    }

    /// The failed or left set grew: accusations and ballots about gone
    /// ranks (or by gone accusers) end, neighbours gone owe no answer, and
    /// a smaller view may now hold a quorum.
    pub(super) fn on_gone(&mut self, now: Time, cx: &mut Cx<'_>) {
        let Some(mut q) = self.open.take() else {
            return;
        };
        // A host accusation ends too once one of its ranks is gone: the
        // rest, if silent, are found again under the next leader.
        q.accusations.retain(|a| {
            !cx.is_gone(a.suspect)
                && !a
                    .host
                    .as_ref()
                    .is_some_and(|(_, m)| m.iter().any(|&r| cx.is_gone(r)))
        });
        q.ballots
            .retain(|b| !cx.is_gone(b.accuser) && !cx.is_gone(b.suspect));
        for a in &mut q.accusations {
            a.tree.unresolved = cx.without_gone(a.tree.unresolved);
        }
        let mut voters = Vec::new();
        for b in q.ballots.iter_mut().filter(|b| !b.closed) {
            b.tree.unresolved = cx.without_gone(b.tree.unresolved);
            voters.push((b.accuser, b.suspect));
        }
        self.open = Some(q);
        for (accuser, suspect) in voters {
            self.maybe_vote(now, accuser, suspect, cx);
        }
        self.check(now, cx);
        cx.acts.push(Act::Rearm);
    }
}
