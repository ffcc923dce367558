//! This rank's own accusations: beginning one (the direct probe of the
//! suspect, the flood of `Suspect`), the count of votes against a
//! majority of the live view, confirmation (held under strain),
//! refutation, new rounds, giving up, and the quorum timer's deadline.
//! Methods of [`Quorum`]: they take `now` and what they read of the
//! Engine (a [`Cx`]), and push the [`Act`]s it carries out.

use std::sync::Arc;

use super::ballot::{Ballot, Subtree};
use super::{Act, Cx, Quorum, confirmation};
use crate::config::{Rank, Time};
use crate::engine::{Cause, FabricSaid, FailureDetail, NO_RANK};
use crate::wire::{Kind, OutcomeVerdict, SUSPECT_HOST, VOTE_COMPLETE, VOTE_TIEBREAK};

/// An accusation of this rank's.
#[derive(Clone, Debug)]
pub(super) struct Accusation {
    /// The rank accused; of a whole host, its leader (lowest live rank).
    pub(super) suspect: Rank,
    /// A whole-host accusation: the host and the ranks of it this rank
    /// held live when it began (ascending, the suspect first); all are
    /// declared in one notice once confirmed. Empty for one rank.
    pub(super) host: Option<(u32, Vec<Rank>)>,
    /// The current round.
    pub(super) nonce: u32,
    /// The nonce of the direct probe of the suspect (its `ProbeAck`
    /// refutes).
    pub(super) probe_nonce: u32,
    pub(super) cause: Cause,
    pub(super) said: FabricSaid,
    pub(super) next_round: Time,
    pub(super) give_up: Time,
    /// When the count last grew (or the accusation began): a new round,
    /// and giving up, wait until the count has stood still for
    /// [`EngineConfig::accusation_stall`], so that an accusation whose
    /// votes are still coming in (an overloaded machine, where each hop of
    /// the vote tree waits for a late thread) is neither restarted from
    /// zero nor given up.
    ///
    /// [`EngineConfig::accusation_stall`]: crate::EngineConfig::accusation_stall
    pub(super) grew_at: Time,
    /// The highest count any round of it reached: growth is a count above
    /// it (a new round counts up from one again, which is no growth).
    pub(super) best: u32,
    pub(super) tree: Subtree,
    /// When it began.
    pub(super) began: Time,
    /// Since when the suspect has been silent here: its slot's last change
    /// if it is this rank's fabric emitter, its counter's if it is the
    /// local one, else when the accusation began.
    pub(super) silent_since: Time,
    /// A majority confirmed it while this rank's own timing was strained
    /// (own health above 1, or a wake-up later than `strain_lateness`
    /// since it began, this one included): it is
    /// declared only at this time, once the suspect has been silent for
    /// the ceiling of the stretched timeout (`health_max`·timeout),
    /// unless it answers first (Lifeguard's suspicion timeout).
    pub(super) held_until: Option<Time>,
    diag: Diag,
}

/// What this rank knew when it began an accusation, for the driver's log
/// only: its `Debug` is empty, so the model checker's fingerprint of an
/// Engine does not tell states apart by it.
#[derive(Clone, Copy)]
struct Diag {
    /// How late the wake-up that began it was, and the own health then.
    lateness: std::time::Duration,
    health: u32,
}

impl std::fmt::Debug for Diag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("_")
    }
}

/// Diagnostics of one accusation this rank confirmed, for the driver's
/// log ([`Engine::take_accusation_note`](crate::Engine::take_accusation_note)): how long the suspect had been
/// silent here, how late this rank's own wake-up was when it accused, its
/// own health then and at the confirmation, and how long the votes
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

impl Accusation {
    /// Whether `rank` is accused by it (the suspect, or a rank of the
    /// accused host).
    pub(super) fn covers(&self, rank: Rank) -> bool {
        self.suspect == rank || self.host.as_ref().is_some_and(|(_, m)| m.contains(&rank))
    }

    pub(super) fn flags(&self) -> u16 {
        if self.host.is_some() { SUSPECT_HOST } else { 0 }
    }
}

impl Quorum {
    /// Whether this rank has an accusation of `rank` under way.
    pub(in crate::engine) fn accusing(&self, rank: Rank) -> bool {
        self.open
            .as_ref()
            .is_some_and(|q| q.accusations.iter().any(|a| a.covers(rank)))
    }

    /// Whether `nonce` is the direct probe of an accusation covering
    /// `about`.
    pub(in crate::engine) fn probed(&self, about: Rank, nonce: u32) -> bool {
        self.open.as_ref().is_some_and(|q| {
            q.accusations
                .iter()
                .any(|a| a.covers(about) && a.probe_nonce == nonce)
        })
    }

    /// Begins an accusation of `suspect` (of a whole host: its leader, and
    /// the host with its ranks held live), silent here since
    /// `silent_since`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn accuse(
        &mut self,
        now: Time,
        suspect: Rank,
        host: Option<(u32, Vec<Rank>)>,
        cause: Cause,
        said: FabricSaid,
        silent_since: Time,
        cx: &mut Cx<'_>,
    ) {
        cx.stats.quorum.accusations += 1;
        self.lateness_since_accusation = std::time::Duration::ZERO;
        let (nonce, probe_nonce) = (self.next_nonce(), self.next_nonce());
        let accusation = Accusation {
            suspect,
            host,
            nonce,
            probe_nonce,
            cause,
            said,
            next_round: now + cx.config.accusation_retry(),
            give_up: now + cx.config.accusation_give_up(),
            grew_at: now,
            best: 1,
            tree: Subtree::default(),
            began: now,
            silent_since,
            held_until: None,
            diag: Diag {
                lateness: self.last_lateness,
                health: cx.health,
            },
        };
        self.open().accusations.push(accusation);
        self.start_round(suspect, cx);
        self.check(now, cx);
        cx.acts.push(Act::Rearm);
    }

    /// Floods the current round of the accusation of `suspect`, and probes
    /// the suspect directly: if that send fails with proof (a crashed
    /// process), the suspect is declared at once, so a chain of crashed
    /// ranks is declared at in-band speed.
    pub(super) fn start_round(&mut self, suspect: Rank, cx: &mut Cx<'_>) {
        let host = self.open.as_ref().is_some_and(|q| {
            q.accusations
                .iter()
                .any(|a| a.suspect == suspect && a.host.is_some())
        });
        let mask = cx.flood_mask(cx.me, NO_RANK, suspect, host);
        let Some(q) = self.open.as_mut() else {
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
        let m: Arc<[u8]> = cx.encoder.suspect(cx.me, nonce, suspect, 0, flags).into();
        cx.fan_out(Kind::Suspect, m, cx.me, None);
        for r in probed {
            let probe = cx.encoder.probe(probe_nonce, r);
            cx.send(r, Kind::Probe, probe);
        }
    }

    /// Declares the suspects of accusations that reached a quorum: 2C > V,
    /// or 2C = V with the lowest live rank on this side. Under strain (a
    /// wake-up here later than `strain_lateness` since the accusation
    /// began, this one included, or a own health multiplier above one) a
    /// confirmed accusation is held until the suspect has been silent
    /// for `health_max` timeouts (the bound of §4.3 "Timeout"), so a suspect starved
    /// by the same overload can still answer (test
    /// `an_accuser_under_strain_holds_a_confirmed_accusation_until_the_ceiling`).
    pub(super) fn check(&mut self, now: Time, cx: &mut Cx<'_>) {
        let overdue = cx.overdue;
        if overdue > cx.config.lag_guard() {
            // Votes handled on a wake-up that came late (they are read
            // before the timers): declare nobody before the lag guard has
            // looked at this wake-up (the tick right after it).
            return;
        }
        let live = cx.live_view();
        let n = cx.ring.len();
        let me_lowest = cx.lowest_live() == cx.me;
        // This rank's own timing is strained: its own health is above 1,
        // or this wake-up is late (its votes are read before the tick that
        // would note it), or (checked per accusation) one since it began was.
        let strained = cx.health > 1 || overdue > cx.config.strain_lateness();
        let late_at = self.late_at;
        let ceiling = cx
            .config
            .timeout
            .saturating_mul(cx.config.health_max.max(1));
        let Some(q) = self.open.as_mut() else {
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
                confirmed.push((a.suspect, a.host.clone(), a.cause, a.said, votes));
                false
            } else {
                true
            }
        });
        cx.stats.quorum.confirmations_held += held;
        for mut note in notes {
            note.health_at_confirmation = cx.health;
            note.max_lateness_since = self.lateness_since_accusation;
            self.note = Some(note);
        }
        for (suspect, host, cause, said, votes) in confirmed {
            cx.stats.quorum.quorum_confirmations += 1;
            let quorum = Some(confirmation(votes, live));
            let detail = FailureDetail::Silence { said, quorum };
            cx.acts.push(Act::Declare {
                suspect,
                host,
                cause,
                detail,
            });
        }
    }

    /// The accusation of `suspect` is withdrawn: it answered, or its slot
    /// moved. Voters drop their ballot; an emitter gets a fresh timeout
    /// and is asked again to heartbeat here (the Engine's part of
    /// [`Act::Withdrawn`]).
    pub(super) fn withdraw(&mut self, suspect: Rank, cx: &mut Cx<'_>) {
        let Some(q) = self.open.as_mut() else {
            return;
        };
        let Some(i) = q.accusations.iter().position(|a| a.covers(suspect)) else {
            return;
        };
        let a = q.accusations.swap_remove(i);
        let suspect = a.suspect;
        cx.stats.quorum.refutations += 1;
        let m: Arc<[u8]> = cx
            .encoder
            .outcome(cx.me, a.nonce, suspect, 0, OutcomeVerdict::Withdrawn)
            .into();
        cx.fan_out(Kind::Outcome, m, cx.me, None);
        cx.acts.push(Act::Withdrawn(suspect));
        cx.acts.push(Act::Rearm);
    }

    /// No quorum in time: this rank's side of a partition holds no
    /// majority. Tell the voters of every accusation of this rank's (they
    /// are on this side too), then stop ([`Act::GiveUp`]).
    pub(super) fn give_up(&mut self, by: Rank, cx: &mut Cx<'_>) {
        if let Some(q) = self.open.take() {
            for a in &q.accusations {
                let m: Arc<[u8]> = cx
                    .encoder
                    .outcome(cx.me, a.nonce, a.suspect, 0, OutcomeVerdict::NoQuorum)
                    .into();
                cx.flood_now(Kind::Outcome, m, cx.me, NO_RANK);
            }
        }
        cx.acts.push(Act::GiveUp(by));
    }

    /// The quorum timer fired: new rounds, give-ups, partial votes,
    /// expired ballots. `lagging`: this thread woke late (it may have
    /// missed votes), so no accusation gives up on this wake-up.
    pub(super) fn tick(&mut self, now: Time, lagging: bool, cx: &mut Cx<'_>) {
        let retry = cx.config.accusation_retry();
        // Stretched like the timeouts while this rank's own wake-ups run
        // late (own health, docs/design.md §4.3 "Timeout"): its votes come late too.
        let stall = cx.config.accusation_stall().saturating_mul(cx.health);
        // While this rank's wake-ups run late (own health above 1) the
        // votes it lacks may be its own lateness (or its voters'), and
        // giving up would take its voters with it, a cascade on an
        // overloaded host (at N = 64 with CPU hogs on 2 cores
        // and a 20 ms timeout, one give-up excluded 24 live ranks). It
        // keeps its side until the health is back at 1: a stretched
        // timeout of on-time running per step.
        let stretched = cx.health > 1;
        // A job whose live ranks all share this host never gives up: its
        // accusations go on with new rounds until the votes come or the
        // suspect answers (test
        // a_one_host_job_never_excludes_itself_for_want_of_a_quorum).
        let one_host = cx.view_on_my_host();
        let Some(q) = self.open.as_mut() else {
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
            self.give_up(cx.me, cx);
            return;
        }
        for suspect in rounds {
            cx.stats.quorum.accusation_rounds += 1;
            let nonce = self.next_nonce();
            if let Some(a) = self
                .open
                .as_mut()
                .and_then(|q| q.accusations.iter_mut().find(|a| a.suspect == suspect))
            {
                a.nonce = nonce;
            }
            self.start_round(suspect, cx);
        }
        let due: Vec<(Rank, Rank)> = self.open.as_ref().map_or_else(Vec::new, |q| {
            q.ballots
                .iter()
                .filter(|b| !b.closed && now >= b.vote_due)
                .map(|b| (b.accuser, b.suspect))
                .collect()
        });
        for (accuser, suspect) in due {
            self.maybe_vote(now, accuser, suspect, cx);
        }
        if !lagging {
            // Held accusations whose hold is over, and confirmations
            // deferred from votes read on a late wake-up.
            self.check(now, cx);
        }
        cx.acts.push(Act::Rearm);
    }

    /// The earliest thing due, for the quorum timer (`Time::NEVER`: none;
    /// the state is freed once nothing is left). `recheck`: when a hold
    /// that ended on a wake-up that came late (its check deferred) is
    /// looked at again, a check interval on, never in the past (ci/fuzz's
    /// deadline_not_after_timeout found it: seeds 1, 3, 8 and 10 at 10^6
    /// inputs).
    pub(super) fn rearm(&mut self, now: Time, recheck: Time) -> Time {
        let Some(q) = self.open.as_ref() else {
            return Time::NEVER;
        };
        let mut next = Time::NEVER;
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
                self.open = None;
            }
        }
        next
    }
}
