//! Primary partition: a declaration from silence is an *accusation* that a
//! majority of the live view must confirm before anyone raises `Failed`
//! (`FFD_QUORUM=majority`, `docs/design.md` §4.11).
//!
//! Owns: [`Engine::on_silence`], the one door every declaration from
//! silence goes through (timeouts, refusal runs, silent probes, the
//! node-local watcher's silences; not a local emitter the kernel shows
//! stopped, declared at once), and [`Engine::accuse_host`] for a host
//! found silent whole (one accusation, flag `SUSPECT_HOST`, refuted by any
//! rank of that host, declared in one notice); this rank's own
//! accusations (the direct probe of the suspect, the flood of `Suspect`,
//! the count of votes, confirmation, refutation, new rounds, giving up)
//! and its ballots in the accusations of others (the flood parent, the
//! subtree's votes, the vote it sends up); `Refute` and `Outcome`; the
//! exclusion of a side without a majority. Must not: declare except through
//! `membership::declare`, decide what is proof (the driver classifies), or
//! keep state for accusations beyond [`MAX_BALLOTS`] and its own.
//!
//! The flood of one round is forwarded once, over the broadcast overlay,
//! rooted at the accuser. Every rank remembers the rank it first heard it
//! from (its flood parent): those links form a tree rooted at the accuser
//! that spans exactly the ranks the flood reached, so counting up the tree
//! is exact and the other side of a partition is simply absent. A rank
//! votes (its subtree's count) once every overlay neighbour it forwarded
//! to has answered, by a vote (a child) or by its own copy of the flood
//! (not a child); after [`EngineConfig::vote_wait`] it sends what it has,
//! and an update whenever the count grows.
//!
//! [`EngineConfig::vote_wait`]: crate::EngineConfig::vote_wait

use std::sync::Arc;

use super::io::Event;
use super::trust::{LinkKey, link_key};
use super::{
    Cause, Confirmation, Engine, Exclusion, FabricSaid, FailureDetail, NO_RANK, Participation,
    Timer,
};
use crate::config::{QuorumMode, Rank, Time};
use crate::overlay::{Links, MAX_LINKS, levels};
use crate::wire::{
    self, Kind, Message, OutcomeVerdict, ProbeVerdict, SUSPECT_HOST, VOTE_COMPLETE, VOTE_TIEBREAK,
};

/// Ballots (accusations of others) a rank takes part in at once. A
/// partition of a large job can put many accusations under way together;
/// a new ballot takes the place of a spent one ([`Ballot::spend`]), and
/// beyond this a rank neither forwards nor votes (counted,
/// `QuorumStats::ballots_refused`), which can only cost a quorum, never make one.
pub(super) const MAX_BALLOTS: usize = 256;

/// One round's subtree as one rank sees it.
#[derive(Clone, Debug, Default)]
struct Subtree {
    /// The latest vote of each rank that chose this one as flood parent:
    /// (child, count, flags).
    children: Vec<(Rank, u32, u16)>,
    /// Overlay link slots (`LinkKey::Overlay`) this rank forwarded the
    /// flood to: only those ranks can be its children, so only their votes
    /// count.
    forwarded: u64,
    /// Of `forwarded`, the slots that have not answered yet.
    unresolved: u64,
}

impl Subtree {
    /// A subtree for a flood forwarded to the overlay slots `mask`.
    fn forwarded_to(mask: u64) -> Self {
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
    fn count(&self, n: u32) -> u32 {
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
    fn flags(&self, me_lowest: bool) -> u16 {
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
    fn record(&mut self, child: Rank, bit: u64, count: u32, flags: u16) -> bool {
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

/// An accusation of this rank's.
#[derive(Clone, Debug)]
struct Accusation {
    /// The rank accused; of a whole host, its leader (lowest live rank).
    suspect: Rank,
    /// A whole-host accusation: the host and the ranks of it this rank
    /// held live when it began (ascending, the suspect first); all are
    /// declared in one notice once confirmed. Empty for one rank.
    host: Option<(u32, Vec<Rank>)>,
    /// The current round.
    nonce: u32,
    /// The nonce of the direct probe of the suspect (its `ProbeAck`
    /// refutes).
    probe_nonce: u32,
    cause: Cause,
    said: FabricSaid,
    next_round: Time,
    give_up: Time,
    /// When the count last grew (or the accusation began): a new round,
    /// and giving up, wait until the count has stood still for
    /// [`EngineConfig::accusation_stall`], so that an accusation whose
    /// votes are still coming in (an overloaded machine, where each hop of
    /// the vote tree waits for a late thread) is neither restarted from
    /// zero nor given up.
    ///
    /// [`EngineConfig::accusation_stall`]: crate::EngineConfig::accusation_stall
    grew_at: Time,
    /// The highest count any round of it reached: growth is a count above
    /// it (a new round counts up from one again, which is no growth).
    best: u32,
    tree: Subtree,
    /// When it began.
    began: Time,
    /// Since when the suspect has been silent here: its slot's last change
    /// if it is this rank's fabric emitter, its counter's if it is the
    /// local one, else when the accusation began.
    silent_since: Time,
    /// A majority confirmed it while this rank's own timing was strained
    /// (local health above 1, or a wake-up later than `strain_lateness`
    /// since it began, this one included): it is
    /// declared only at this time, once the suspect has been silent for
    /// the ceiling of the stretched timeout (`health_max`·timeout),
    /// unless it answers first (Lifeguard's suspicion timeout).
    held_until: Option<Time>,
    diag: Diag,
}

/// What this rank knew when it began an accusation, for the driver's log
/// only: its `Debug` is empty, so the model checker's fingerprint of an
/// Engine does not tell states apart by it.
#[derive(Clone, Copy)]
struct Diag {
    /// How late the wake-up that began it was, and the local health then.
    lateness: std::time::Duration,
    health: u32,
}

impl std::fmt::Debug for Diag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("_")
    }
}

/// Diagnostics of one accusation this rank confirmed, for the driver's
/// log ([`Engine::take_accusation_note`]): how long the suspect had been
/// silent here, how late this rank's own wake-up was when it accused, its
/// local health then and at the confirmation, and how long the votes
/// took. Not part of the protocol: nothing reads it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccusationNote {
    pub suspect: Rank,
    /// The suspect's slot had stood still this long when the accusation
    /// began (zero: not this rank's fabric emitter).
    pub still_for: std::time::Duration,
    /// The lateness of the wake-up that began the accusation.
    pub lateness: std::time::Duration,
    pub health_at_accusation: u32,
    pub health_at_confirmation: u32,
    /// From the accusation to its confirmation.
    pub voted_in: std::time::Duration,
    /// The largest lateness of this rank's wake-ups between the two.
    pub max_lateness_since: std::time::Duration,
}

/// This rank's part in another rank's accusation (its newest round).
#[derive(Clone, Debug)]
struct Ballot {
    accuser: Rank,
    suspect: Rank,
    nonce: u32,
    parent: Rank,
    tree: Subtree,
    /// A partial vote goes at this time if the subtree is not complete.
    vote_due: Time,
    /// The last vote sent: (count, flags).
    sent: Option<(u32, u16)>,
    /// The accusation ended (its `Outcome` came through here): the ballot
    /// is kept, inert, until it expires, so that straggling copies of the
    /// round's flood are recognised and not forwarded again (a flood
    /// forwarded once per round, however its copies and the outcome race).
    /// Also set when the ballot is [spent](Ballot::spent).
    closed: bool,
    /// 1.5 timeouts after this rank joined the round; [`Time::NEVER`] once
    /// spent.
    expires: Time,
}

impl Ballot {
    /// Expired with no `Outcome` seen: the accusation may still be
    /// counting this round, so the ballot is kept, closed and without its
    /// subtree, until a newer round replaces it, its accuser or suspect is
    /// gone, or a new ballot needs its place ([`MAX_BALLOTS`]). Forgotten,
    /// a straggling copy of the round made this rank join it again under a
    /// second flood parent, and its subtree was counted twice
    /// (`docs/design.md` §4.11, "Spent ballots").
    fn spend(&mut self) {
        self.closed = true;
        self.tree = Subtree::default();
        self.expires = Time::NEVER;
    }

    fn spent(&self) -> bool {
        self.expires == Time::NEVER
    }
}

/// The quorum state of a rank, made at its first use.
#[derive(Clone, Debug, Default)]
pub(super) struct Quorum {
    accusations: Vec<Accusation>,
    ballots: Vec<Ballot>,
    /// Another rank's accusation reached this one lately (until then): a
    /// partition or a multi-rank silence is under way.
    others_until: Time,
}

impl Accusation {
    /// Whether `rank` is accused by it (the suspect, or a rank of the
    /// accused host).
    fn covers(&self, rank: Rank) -> bool {
        self.suspect == rank || self.host.as_ref().is_some_and(|(_, m)| m.contains(&rank))
    }

    fn flags(&self) -> u16 {
        if self.host.is_some() { SUSPECT_HOST } else { 0 }
    }
}

/// `a` is a later round than `b` (nonces count up, wrapping).
fn newer(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

impl Engine {
    /// The one door of every declaration from silence (a timeout, a refusal
    /// run, a silent probe): with `FFD_QUORUM=off` a declaration at once;
    /// with `majority` an accusation of `rank`, declared only once a
    /// majority of the live view confirms it. Nothing if `rank` is gone,
    /// this rank does not participate, or it already accuses `rank`.
    pub(super) fn on_silence(&mut self, now: Time, rank: Rank, cause: Cause, said: FabricSaid) {
        if rank == self.me || self.is_gone(rank) || self.participation != Participation::Active {
            return;
        }
        match self.config.quorum {
            QuorumMode::Off => self.declare(
                now,
                rank,
                cause,
                FailureDetail::Silence { said, quorum: None },
            ),
            QuorumMode::Majority => self.accuse(now, rank, cause, said),
        }
    }

    /// Whether this rank has an accusation of `rank` under way.
    pub(super) fn accusing(&self, rank: Rank) -> bool {
        self.quorum
            .as_ref()
            .is_some_and(|q| q.accusations.iter().any(|a| a.covers(rank)))
    }

    /// A whole host found silent (its leader's timeout, then no answer to
    /// a probe of each of its `ranks`, ascending) under `majority`: one
    /// accusation of the host, flooded with [`SUSPECT_HOST`] (any rank of
    /// the host that hears it refutes), and once a majority confirms it
    /// every rank of the host is declared in one notice with a
    /// `HostFailed` event.
    pub(super) fn accuse_host(&mut self, now: Time, host: u32, ranks: &[Rank], cause: Cause) {
        let Some(&leader) = ranks.first() else {
            return;
        };
        if self.participation != Participation::Active
            || ranks.iter().any(|&r| r == self.me || self.accusing(r))
        {
            return;
        }
        self.begin_accusation(
            now,
            leader,
            Some((host, ranks.to_vec())),
            cause,
            FabricSaid::Nothing,
        );
    }

    /// Whether other ranks' accusations are under way here (a partition or
    /// a multi-rank silence): a freshly mended emitter then has
    /// [`first_beat_within`](crate::EngineConfig::first_beat_within) to
    /// write its first heartbeat.
    pub(super) fn silence_around(&self, now: Time) -> bool {
        self.config.quorum == QuorumMode::Majority
            && self.quorum.as_ref().is_some_and(|q| q.others_until > now)
    }

    fn quorum_state(&mut self) -> &mut Quorum {
        self.quorum.get_or_insert_with(Box::default)
    }

    fn next_nonce(&mut self) -> u32 {
        self.nonce = self.nonce.wrapping_add(1);
        self.nonce
    }

    /// Live ranks of this rank's view: N − failed − left.
    fn live_view(&self) -> u32 {
        self.ring.len() - (self.failed.len() + self.left.len()) as u32
    }

    /// Every live rank of the view shares this rank's host. Shared memory
    /// cannot be cut, so no silence among them is a partition: a quorum
    /// that does not come is late votes, never the evidence of a minority
    /// that a self-exclusion needs (`docs/design.md` §4.11).
    fn view_on_my_host(&self) -> bool {
        let Some(h) = &self.hosts else {
            return false;
        };
        let mine = h
            .members(h.host_of(self.me))
            .iter()
            .filter(|&&r| !self.is_gone(r))
            .count();
        mine as u32 == self.live_view()
    }

    fn lowest_live(&self) -> Rank {
        (0..self.ring.len())
            .find(|&r| !self.is_gone(r))
            .unwrap_or(NO_RANK)
    }

    /// The overlay slots of the ranks this rank forwards a flood rooted at
    /// `root` to, less `skip`, the suspect and ranks known gone.
    fn flood_mask(&self, root: Rank, skip: Rank, suspect: Rank, host: bool) -> u64 {
        let host_of_suspect = match (&self.hosts, host) {
            (Some(h), true) => Some(h.host_of(suspect)),
            _ => None,
        };
        let mut buf: Links = [0; MAX_LINKS];
        let len = self
            .overlay
            .send_order(self.my_pos, self.ring.position_of(root), &mut buf);
        let mut mask = 0u64;
        for &p in &buf[..len] {
            let r = self.ring.rank_at(p);
            if r == skip || r == suspect || r == self.me || self.is_gone(r) {
                continue;
            }
            if let (Some(h), Some(hosts)) = (host_of_suspect, &self.hosts) {
                if hosts.host_of(r) == h {
                    continue;
                }
            }
            if let LinkKey::Overlay(k) = link_key(&self.ring, self.my_pos, r) {
                mask |= 1 << k;
            }
        }
        mask
    }

    /// The overlay slot of `peer`, as a bit, if it is an overlay neighbour.
    fn slot_bit(&self, peer: Rank) -> u64 {
        match link_key(&self.ring, self.my_pos, peer) {
            LinkKey::Overlay(k) => 1 << k,
            LinkKey::Other(_) => 0,
        }
    }

    /// `mask` less the slots of neighbours now known gone.
    fn without_gone(&self, mask: u64) -> u64 {
        let n = self.ring.len();
        let l = levels(n);
        let mut out = mask;
        let mut bits = mask;
        while bits != 0 {
            let k = bits.trailing_zeros();
            bits &= bits - 1;
            let d = if k < l {
                1u64 << k
            } else {
                u64::from(n) - (1u64 << (k - l))
            };
            let pos = ((u64::from(self.my_pos) + d) % u64::from(n)) as u32;
            if self.is_gone(self.ring.rank_at(pos)) {
                out &= !(1 << k);
            }
        }
        out
    }

    /// Sends the flood `bytes` (rooted at `root`) to this rank's overlay
    /// targets at once, past the lazy fan-out: for a rank about to stop
    /// participating (its fan-outs are dropped).
    fn flood_now(&mut self, kind: Kind, bytes: Arc<[u8]>, root: Rank, skip: Rank) {
        let mut buf: Links = [0; MAX_LINKS];
        let len = self
            .overlay
            .send_order(self.my_pos, self.ring.position_of(root), &mut buf);
        for &p in &buf[..len] {
            let r = self.ring.rank_at(p);
            if r != skip && r != self.me && !self.is_gone(r) {
                self.send_shared(r, kind, bytes.clone());
            }
        }
    }

    // ----- this rank accuses -----

    fn accuse(&mut self, now: Time, suspect: Rank, cause: Cause, said: FabricSaid) {
        if self.accusing(suspect) {
            return;
        }
        self.begin_accusation(now, suspect, None, cause, said);
    }

    fn begin_accusation(
        &mut self,
        now: Time,
        suspect: Rank,
        host: Option<(u32, Vec<Rank>)>,
        cause: Cause,
        said: FabricSaid,
    ) {
        self.stats.quorum.accusations += 1;
        let silent_since = if self.watch.emitter == Some(suspect) {
            self.watch.changed_at.min(now)
        } else if self.local.emitter == Some(suspect) {
            // Judged from max(baseline, seen_at) (`local.rs`).
            self.local
                .seen_at
                .map_or(self.local.baseline, |t| t.max(self.local.baseline))
                .min(now)
        } else {
            now
        };
        self.lateness_since_accusation = std::time::Duration::ZERO;
        let (nonce, probe_nonce) = (self.next_nonce(), self.next_nonce());
        let accusation = Accusation {
            suspect,
            host,
            nonce,
            probe_nonce,
            cause,
            said,
            next_round: now + self.config.accusation_retry(),
            give_up: now + self.config.accusation_give_up(),
            grew_at: now,
            best: 1,
            tree: Subtree::default(),
            began: now,
            silent_since,
            held_until: None,
            diag: Diag {
                lateness: self.last_lateness,
                health: self.health.multiplier(),
            },
        };
        self.quorum_state().accusations.push(accusation);
        self.start_round(suspect);
        self.check_quorum(now);
        self.rearm_quorum(now);
    }

    /// Floods the current round of the accusation of `suspect`, and probes
    /// the suspect directly: if that send fails with proof (a crashed
    /// process), the suspect is declared at once, so a chain of crashed
    /// ranks is declared at in-band speed.
    fn start_round(&mut self, suspect: Rank) {
        let host = self.quorum.as_ref().is_some_and(|q| {
            q.accusations
                .iter()
                .any(|a| a.suspect == suspect && a.host.is_some())
        });
        let mask = self.flood_mask(self.me, NO_RANK, suspect, host);
        let Some(q) = self.quorum.as_mut() else {
            return;
        };
        let Some(a) = q.accusations.iter_mut().find(|a| a.suspect == suspect) else {
            return;
        };
        a.tree = Subtree::forwarded_to(mask);
        let (nonce, probe_nonce, flags) = (a.nonce, a.probe_nonce, a.flags());
        let probed = match &a.host {
            Some((_, members)) => members.clone(),
            None => vec![suspect],
        };
        let m: Arc<[u8]> = self
            .encoder
            .suspect(self.me, nonce, suspect, 0, flags)
            .into();
        self.fan_out(Kind::Suspect, m, self.me, &[], false);
        for r in probed {
            let probe = self.encoder.probe(probe_nonce, r);
            self.send(r, Kind::Probe, probe);
        }
    }

    /// How late this wake-up came: how long the earliest timer is overdue
    /// (messages are handled before the timers that tell).
    fn overdue(&self, now: Time) -> std::time::Duration {
        now.saturating_since(self.timers.next())
    }

    /// Declares the suspects of accusations that reached a quorum: 2C > V,
    /// or 2C = V with the lowest live rank on this side. Under strain (a
    /// wake-up here later than `strain_lateness` since the accusation
    /// began, this one included, or a local health multiplier above one) a
    /// confirmed accusation is held until the suspect has been silent
    /// for `health_max` timeouts (the bound of §4.3), so a suspect starved
    /// by the same overload can still answer (test
    /// `an_accuser_under_strain_holds_a_confirmed_accusation_until_the_ceiling`).
    fn check_quorum(&mut self, now: Time) {
        let overdue = self.overdue(now);
        if overdue > self.config.lag_guard() {
            // Votes handled on a wake-up that came late (they are read
            // before the timers): declare nobody before the lag guard has
            // looked at this wake-up (the tick right after it).
            return;
        }
        let live = self.live_view();
        let n = self.ring.len();
        let me_lowest = self.lowest_live() == self.me;
        // This rank's own timing is strained: its local health is above 1,
        // or this wake-up is late (its votes are read before the tick that
        // would note it), or (checked per accusation) one since it began was.
        let strained = self.health.multiplier() > 1 || overdue > self.config.strain_lateness();
        let late_at = self.late_at;
        let ceiling = self
            .config
            .timeout
            .saturating_mul(self.config.health_max.max(1));
        let Some(q) = self.quorum.as_mut() else {
            return;
        };
        let mut confirmed = Vec::new();
        let mut notes = Vec::new();
        let mut held = 0;
        q.accusations.retain_mut(|a| {
            let votes = a.tree.count(n);
            let tiebreak = a.tree.flags(me_lowest) & VOTE_TIEBREAK != 0;
            let twice = 2 * u64::from(votes);
            let quorum = twice > u64::from(live) || (twice == u64::from(live) && tiebreak);
            if quorum
                && a.held_until.is_none()
                && (strained || late_at.is_some_and(|t| t >= a.began))
            {
                a.held_until = Some(a.silent_since + ceiling);
                held += 1;
            }
            if quorum && a.held_until.is_some_and(|t| now < t) {
                return true;
            }
            if quorum {
                notes.push(AccusationNote {
                    suspect: a.suspect,
                    still_for: a.began.saturating_since(a.silent_since),
                    lateness: a.diag.lateness,
                    health_at_accusation: a.diag.health,
                    health_at_confirmation: 0,
                    voted_in: now.saturating_since(a.began),
                    max_lateness_since: std::time::Duration::ZERO,
                });
                confirmed.push((
                    a.suspect,
                    a.host.clone(),
                    a.cause,
                    a.said,
                    votes,
                    twice == u64::from(live),
                ));
                false
            } else {
                true
            }
        });
        self.stats.quorum.confirmations_held += held;
        for mut note in notes {
            note.health_at_confirmation = self.health.multiplier();
            note.max_lateness_since = self.lateness_since_accusation;
            self.accusation_note = Some(note);
        }
        for (suspect, host, cause, said, votes, tiebreak) in confirmed {
            self.stats.quorum.quorum_confirmations += 1;
            let quorum = Some(Confirmation {
                votes,
                live,
                tiebreak,
            });
            let detail = FailureDetail::Silence { said, quorum };
            match host {
                None => self.declare(now, suspect, cause, detail),
                Some((host, members)) => {
                    let ranks: Vec<Rank> =
                        members.into_iter().filter(|&r| !self.is_gone(r)).collect();
                    self.declare_now(now, &ranks, cause, detail, Some(&[]));
                    self.stats.hosts.hosts_declared += 1;
                    self.push_event(Event::HostFailed { host, ranks });
                }
            }
        }
    }

    /// The accusation of `suspect` is withdrawn: it answered, or its slot
    /// moved. Voters drop their ballot; an emitter gets a fresh timeout
    /// and is asked again to heartbeat here.
    fn withdraw(&mut self, now: Time, suspect: Rank) {
        let Some(q) = self.quorum.as_mut() else {
            return;
        };
        let Some(i) = q.accusations.iter().position(|a| a.covers(suspect)) else {
            return;
        };
        let a = q.accusations.swap_remove(i);
        let suspect = a.suspect;
        self.stats.quorum.refutations += 1;
        let m: Arc<[u8]> = self
            .encoder
            .outcome(self.me, a.nonce, suspect, 0, OutcomeVerdict::Withdrawn)
            .into();
        self.fan_out(Kind::Outcome, m, self.me, &[], false);
        if self.watch.emitter == Some(suspect) {
            self.watch.changed_at = now;
            self.watch.still_seen_at = None;
            let m = self
                .encoder
                .observe_me(self.watch.generation, self.watch.slot);
            self.send(suspect, Kind::ObserveMe, m);
            self.schedule_check(now);
        }
        if self.local.emitter == Some(suspect) {
            // The local emitter answered: a fresh timeout from now, until
            // a wake-up of its own since shows in its counter.
            self.restart_local_baseline(now);
            self.schedule_local_check(now);
        }
        self.rearm_quorum(now);
    }

    /// This rank woke later than the lag guard: its accusations of its own
    /// emitters (the fabric one, the local one) rest on its own sense of
    /// time, which just failed it, and are withdrawn like a refutation
    /// (the emitters get a fresh timeout from now). Without this, votes
    /// read on the late wake-up itself confirmed them before the guard
    /// ran (seen at N = 128 on 2 cores, one rank per emulated host: an
    /// accuser whose thread had slept 157 ms declared a live emitter
    /// that its starved thread had not heard for 100 ms).
    pub(super) fn quorum_self_lag(&mut self, now: Time) {
        for emitter in [self.watch.emitter, self.local.emitter]
            .into_iter()
            .flatten()
        {
            if self.accusing(emitter) {
                self.stats.quorum.withdrawn_on_self_lag += 1;
                self.withdraw(now, emitter);
            }
        }
    }

    /// The emitter's slot moved: an accusation of it is withdrawn.
    pub(super) fn quorum_emitter_alive(&mut self, now: Time, emitter: Rank) {
        if self.accusing(emitter) {
            self.withdraw(now, emitter);
        }
    }

    /// A `ProbeAck` from `sender`: the suspect itself answering an
    /// accusation's direct probe refutes it. Returns whether it was one.
    pub(super) fn quorum_probe_ack(
        &mut self,
        now: Time,
        sender: Rank,
        nonce: u32,
        about: Rank,
        verdict: ProbeVerdict,
    ) -> bool {
        let ours = self.quorum.as_ref().is_some_and(|q| {
            q.accusations
                .iter()
                .any(|a| a.covers(about) && a.probe_nonce == nonce)
        });
        if !ours {
            return false;
        }
        if sender == about && verdict == ProbeVerdict::Alive {
            self.withdraw(now, about);
        }
        true
    }

    /// No quorum in time: this rank's side of a partition holds no
    /// majority. Tell the voters of every accusation of this rank's (they
    /// are on this side too), then stop.
    fn give_up_quorum(&mut self, by: Rank) {
        if let Some(q) = self.quorum.take() {
            for a in &q.accusations {
                let m: Arc<[u8]> = self
                    .encoder
                    .outcome(self.me, a.nonce, a.suspect, 0, OutcomeVerdict::NoQuorum)
                    .into();
                self.flood_now(Kind::Outcome, m, self.me, NO_RANK);
            }
        }
        self.stats.quorum.no_quorum_exclusions += 1;
        self.self_exclude(by, Exclusion::NoQuorum);
    }

    // ----- timers -----

    /// The quorum timer fired: new rounds, give-ups, partial votes,
    /// expired ballots. `lagging`: this thread woke late (it may have
    /// missed votes), so no accusation gives up on this wake-up.
    pub(super) fn quorum_tick(&mut self, now: Time, lagging: bool) {
        if self.participation != Participation::Active {
            self.quorum = None;
            return;
        }
        let retry = self.config.accusation_retry();
        // Stretched like the timeouts while this rank's own wake-ups run
        // late (local health, docs/design.md §4.3): its votes come late too.
        let stall = self
            .config
            .accusation_stall()
            .saturating_mul(self.own_health());
        // While this rank's wake-ups run late (local health above 1) the
        // votes it lacks may be its own lateness (or its voters'), and
        // giving up would take its voters with it, a cascade on an
        // overloaded host (at N = 64 with CPU hogs on 2 cores
        // and a 20 ms timeout, one give-up excluded 24 live ranks). It
        // keeps its side until the health is back at 1: a stretched
        // timeout of on-time running per step.
        let stretched = self.own_health() > 1;
        // A job whose live ranks all share this host never gives up: its
        // accusations go on with new rounds until the votes come or the
        // suspect answers (test
        // a_one_host_job_never_excludes_itself_for_want_of_a_quorum).
        let one_host = self.view_on_my_host();
        let Some(q) = self.quorum.as_mut() else {
            return;
        };
        let mut rounds = Vec::new();
        let mut give_up = false;
        for a in &mut q.accusations {
            if a.held_until.is_some() {
                // Confirmed, held: no new round (which would count from
                // one again), no give-up; declared when the hold ends.
                continue;
            }
            let stalled = now.saturating_since(a.grew_at) >= stall;
            if now >= a.give_up {
                if lagging || stretched || !stalled || one_host {
                    a.give_up = now + retry;
                } else {
                    give_up = true;
                }
            }
            if now >= a.next_round {
                a.next_round = now + retry;
                if stalled && !give_up {
                    rounds.push(a.suspect);
                }
            }
        }
        #[cfg(feature = "model-bugs")]
        let forget = crate::model_bugs::on(crate::model_bugs::Bug::ForgottenBallots);
        #[cfg(not(feature = "model-bugs"))]
        let forget = false;
        for b in q.ballots.iter_mut() {
            if !b.closed && b.expires <= now && !forget {
                b.spend();
            }
        }
        q.ballots.retain(|b| b.expires > now);
        if give_up {
            self.give_up_quorum(self.me);
            return;
        }
        for suspect in rounds {
            self.stats.quorum.accusation_rounds += 1;
            let nonce = self.next_nonce();
            if let Some(a) = self
                .quorum
                .as_mut()
                .and_then(|q| q.accusations.iter_mut().find(|a| a.suspect == suspect))
            {
                a.nonce = nonce;
            }
            self.start_round(suspect);
        }
        let due: Vec<(Rank, Rank)> = self.quorum.as_ref().map_or_else(Vec::new, |q| {
            q.ballots
                .iter()
                .filter(|b| !b.closed && now >= b.vote_due)
                .map(|b| (b.accuser, b.suspect))
                .collect()
        });
        for (accuser, suspect) in due {
            self.maybe_vote(now, accuser, suspect);
        }
        if !lagging {
            // Held accusations whose hold is over, and confirmations
            // deferred from votes read on a late wake-up.
            self.check_quorum(now);
        }
        self.rearm_quorum(now);
    }

    /// Sets the quorum timer to the earliest thing due (freeing the state
    /// once nothing is left).
    fn rearm_quorum(&mut self, now: Time) {
        let Some(q) = self.quorum.as_ref() else {
            self.timers.stop(Timer::Quorum);
            return;
        };
        let mut next = Time::NEVER;
        // A hold that ended on a wake-up that came late (its check
        // deferred) is looked at again a check interval on, never in the
        // past (ci/fuzz's deadline_not_after_timeout found it: seeds 1, 3, 8
        // and 10 at 10^6 inputs).
        let recheck = now + self.config.check_interval();
        for a in &q.accusations {
            next = match a.held_until {
                Some(t) if t <= now => next.min(recheck),
                Some(t) => next.min(t),
                None => next.min(a.next_round).min(a.give_up),
            };
        }
        for b in &q.ballots {
            let complete_sent = b.sent.is_some_and(|(_, f)| f & VOTE_COMPLETE != 0);
            if !b.closed && !complete_sent && b.vote_due > now {
                next = next.min(b.vote_due);
            }
            next = next.min(b.expires);
        }
        if q.accusations.is_empty() && q.ballots.iter().all(Ballot::spent) {
            if q.others_until > now {
                next = q.others_until;
            } else if q.ballots.is_empty() {
                self.quorum = None;
            }
        }
        if next == Time::NEVER {
            self.timers.stop(Timer::Quorum);
        } else {
            self.timers.set(Timer::Quorum, next);
        }
    }

    // ----- this rank votes -----

    /// Sends this rank's vote in `accuser`'s accusation of `suspect` if it
    /// is due (the subtree is complete, or the wait is over) and differs
    /// from the last one sent.
    fn maybe_vote(&mut self, now: Time, accuser: Rank, suspect: Rank) {
        let me_lowest = self.lowest_live() == self.me;
        let n = self.ring.len();
        let Some(b) = self.quorum.as_mut().and_then(|q| {
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
        self.stats.quorum.votes_sent += 1;
        let m = self.encoder.vote(accuser, nonce, count, flags);
        self.send(parent, Kind::Vote, m);
    }

    /// A quorum message (already trusted by `on_message`); `bytes` is the
    /// whole message, for forwarding.
    pub(super) fn on_quorum_message(
        &mut self,
        now: Time,
        sender: Rank,
        msg: Message<'_>,
        bytes: &[u8],
    ) {
        if self.participation != Participation::Active {
            return;
        }
        match msg {
            Message::Suspect {
                accuser,
                nonce,
                suspect,
                flags,
                ..
            } => {
                let host = flags & SUSPECT_HOST != 0;
                self.on_suspect(now, sender, (accuser, nonce, suspect, host), bytes);
            }
            Message::Vote {
                accuser,
                nonce,
                count,
                flags,
            } => self.on_vote(now, sender, accuser, nonce, count, flags),
            // Only the suspect refutes, whatever round it answers.
            Message::Refute { accuser, nonce: _ }
                if accuser == self.me && self.accusing(sender) =>
            {
                self.withdraw(now, sender);
            }
            Message::Outcome {
                accuser,
                nonce,
                suspect,
                verdict,
                ..
            } => self.on_outcome(now, sender, (accuser, nonce, suspect), verdict, bytes),
            _ => {}
        }
    }

    /// `round`: the accuser, the round's nonce, the suspect, and whether
    /// the suspect's whole host is accused.
    fn on_suspect(
        &mut self,
        now: Time,
        sender: Rank,
        round: (Rank, u32, Rank, bool),
        bytes: &[u8],
    ) {
        let (accuser, nonce, suspect, host) = round;
        if self.is_gone(accuser) {
            self.stats.drops.dropped_untrusted_origin += 1;
            return;
        }
        if accuser == self.me && suspect == self.me {
            // Nobody accuses itself: a forgery or a bug, never answered.
            return;
        }
        let my_host_accused = host
            && self
                .hosts
                .as_ref()
                .is_some_and(|h| h.host_of(suspect) == h.host_of(self.me));
        if host && self.hosts.is_none() {
            // Host groups are agreed at start: a forgery or a bug.
            return;
        }
        if suspect == self.me || (my_host_accused && accuser != self.me) {
            // Reachable, so not silent: say so to the accuser.
            let m = self.encoder.refute(accuser, nonce);
            self.send(accuser, Kind::Refute, m);
            return;
        }
        if self.is_gone(suspect) {
            return;
        }
        let bit = self.slot_bit(sender);
        if accuser == self.me {
            // A copy of our own flood: that neighbour is no child.
            if let Some(a) = self.quorum.as_mut().and_then(|q| {
                q.accusations
                    .iter_mut()
                    .find(|a| a.suspect == suspect && a.nonce == nonce)
            }) {
                a.tree.unresolved &= !bit;
            }
            return;
        }
        let others_until = now + self.config.timeout;
        let q = self.quorum_state();
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
                self.maybe_vote(now, accuser, suspect);
                self.rearm_quorum(now);
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
                        self.stats.quorum.ballots_refused += 1;
                        return;
                    }
                }
            }
            None => {}
        }
        let mask = self.flood_mask(accuser, sender, suspect, host);
        let ballot = Ballot {
            accuser,
            suspect,
            nonce,
            parent: sender,
            tree: Subtree::forwarded_to(mask),
            vote_due: now + self.config.vote_wait(),
            sent: None,
            closed: false,
            expires: now + self.config.timeout + self.config.timeout / 2,
        };
        self.quorum_state().ballots.push(ballot);
        if let Some(fwd) = wire::forwarded(bytes, self.me) {
            self.fan_out(Kind::Suspect, fwd.into(), accuser, &[sender], false);
        }
        self.maybe_vote(now, accuser, suspect);
        self.rearm_quorum(now);
    }

    fn on_vote(
        &mut self,
        now: Time,
        sender: Rank,
        accuser: Rank,
        nonce: u32,
        count: u32,
        flags: u16,
    ) {
        let bit = self.slot_bit(sender);
        let n = self.ring.len();
        let Some(q) = self.quorum.as_mut() else {
            return;
        };
        if accuser == self.me {
            if let Some(a) = q.accusations.iter_mut().find(|a| a.nonce == nonce) {
                if !a.tree.record(sender, bit, count, flags) {
                    self.stats.drops.dropped_untrusted_origin += 1;
                    return;
                }
                let votes = a.tree.count(n);
                if votes > a.best {
                    a.best = votes;
                    a.grew_at = now;
                }
                self.check_quorum(now);
                self.rearm_quorum(now);
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
            self.stats.drops.dropped_untrusted_origin += 1;
            return;
        }
        let suspect = b.suspect;
        self.maybe_vote(now, accuser, suspect);
        self.rearm_quorum(now);
    }

    /// The accusation `(accuser, nonce, suspect)` ended (`nonce`: its last
    /// round).
    fn on_outcome(
        &mut self,
        now: Time,
        sender: Rank,
        (accuser, nonce, suspect): (Rank, u32, Rank),
        verdict: OutcomeVerdict,
        bytes: &[u8],
    ) {
        if self.is_gone(accuser) {
            return;
        }
        // Only ballot holders act and pass it on: they are exactly the
        // ranks the accusation's floods reached, connected through them.
        let Some(q) = self.quorum.as_mut() else {
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
        let Some(fwd) = wire::forwarded(bytes, self.me) else {
            return;
        };
        match verdict {
            OutcomeVerdict::Withdrawn => {
                self.fan_out(Kind::Outcome, fwd.into(), accuser, &[sender], false);
                self.rearm_quorum(now);
            }
            // A voter whose live view shares its host has no minority to
            // leave with the accuser (it knows more failures than the
            // accuser did): it passes the outcome on and stays.
            OutcomeVerdict::NoQuorum if self.view_on_my_host() => {
                self.fan_out(Kind::Outcome, fwd.into(), accuser, &[sender], false);
                self.rearm_quorum(now);
            }
            OutcomeVerdict::NoQuorum => {
                self.flood_now(Kind::Outcome, fwd.into(), accuser, sender);
                self.give_up_quorum(accuser);
            }
        }
    }

    // ----- the view changed -----

    /// The failed or left set grew: accusations and ballots about gone
    /// ranks (or by gone accusers) end, neighbours gone owe no answer, and
    /// a smaller view may now hold a quorum.
    pub(super) fn quorum_on_gone(&mut self, now: Time) {
        let Some(mut q) = self.quorum.take() else {
            return;
        };
        // A host accusation ends too once one of its ranks is gone: the
        // rest, if silent, are found again under the next leader.
        q.accusations.retain(|a| {
            !self.is_gone(a.suspect)
                && !a
                    .host
                    .as_ref()
                    .is_some_and(|(_, m)| m.iter().any(|&r| self.is_gone(r)))
        });
        q.ballots
            .retain(|b| !self.is_gone(b.accuser) && !self.is_gone(b.suspect));
        for a in &mut q.accusations {
            a.tree.unresolved = self.without_gone(a.tree.unresolved);
        }
        let mut voters = Vec::new();
        for b in q.ballots.iter_mut().filter(|b| !b.closed) {
            b.tree.unresolved = self.without_gone(b.tree.unresolved);
            voters.push((b.accuser, b.suspect));
        }
        self.quorum = Some(q);
        for (accuser, suspect) in voters {
            self.maybe_vote(now, accuser, suspect);
        }
        self.check_quorum(now);
        self.rearm_quorum(now);
    }
}

#[cfg(feature = "model")]
impl Engine {
    /// For the model checker only (feature `model`): the children this
    /// rank counts, as (accuser, round nonce, child): the votes recorded in
    /// the current round of each of its accusations and in each of its
    /// open ballots. In a tree of flood parents a rank is one rank's child
    /// per round (`docs/model-checking.md`, property `ballots`).
    pub fn model_flood_children(&self) -> Vec<(Rank, u32, Rank)> {
        let Some(q) = &self.quorum else {
            return Vec::new();
        };
        let mine = q
            .accusations
            .iter()
            .flat_map(|a| a.tree.children.iter().map(|c| (self.me, a.nonce, c.0)));
        let ballots = q.ballots.iter().filter(|b| !b.closed).flat_map(|b| {
            b.tree
                .children
                .iter()
                .map(move |c| (b.accuser, b.nonce, c.0))
        });
        mine.chain(ballots).collect()
    }
}
