//! Watching the emitter: this rank as an observer.
//!
//! Owns: the reading of the watched slot, the periodic checks and the
//! timeout (stretched by the own health multiplier, `health`), the
//! self-lag guard, slow-emitter warnings, the digest sync
//! (`SyncRequest`/`SyncReply`), in-band evidence (transport errors, the
//! suspect and its probes, `Probe`/`ProbeAck`) and mending to a new
//! emitter, whose clock starts when its link is confirmed. These are the
//! rules of watching a neighbour, whatever the watching topology: they
//! hold for the per-process ring and are meant for any other watcher set
//! built on the Engine. Must not: change the failed or left sets except through
//! `membership` (`declare`, `learn`), allocate while reading a slot or
//! checking an idle emitter, or send anything but to ring neighbours and
//! probe witnesses.

use std::time::Duration;

use super::{
    Cause, Engine, Event, Evidence, FabricSaid, FailureDetail, NO_RANK, Output, Participation,
    Timer, TransportErrorKind, slot_digest, slot_generation,
};
use crate::config::{InbandMode, QuorumMode, Rank, Time};
use crate::ranks::RankList;
use crate::wire::{Kind, MAX_MARKS, Marks, ProbeVerdict, SLOTS};

/// This rank's observation of its emitter.
#[derive(Clone, Debug)]
pub(super) struct Watch {
    pub(super) emitter: Option<Rank>,
    pub(super) generation: u32,
    pub(super) slot: u16,
    /// Last value read from the slot (`None`: not read since mending).
    pub(super) last_value: Option<u64>,
    /// When the slot was last seen to change (or the baseline restarted).
    /// May lie in the future during the start-up grace.
    pub(super) changed_at: Time,
    /// The latest read that found the slot unchanged since `changed_at`.
    pub(super) still_seen_at: Option<Time>,
    /// Mended and no beat seen yet: resend `ObserveMe` at each check.
    pub(super) awaiting_first: bool,
    /// Mended and the link to the new emitter not yet confirmed (no send
    /// to it completed, no beat seen): `changed_at` lies a link grace in
    /// the future until then.
    pub(super) awaiting_link: bool,
    /// Mended to the next rank of a host whose previous emitter is gone:
    /// that host is watched closely for a while ([`HostWatch`]).
    pub(super) host_watch: Option<HostWatch>,
    pub(super) mismatch_since: Option<Time>,
    pub(super) sync_not_before: Time,
    pub(super) slow_warned_at: Option<Time>,
    /// `InbandMode::Suspect` evidence against the emitter: declare after
    /// `suspect_timeout` of stillness instead of the full timeout.
    pub(super) hurry: bool,
    /// A ring neighbour suspected after a transport error, being probed.
    pub(super) suspect: Option<Suspect>,
    /// A probe about the emitter, answered when its slot next moves.
    pub(super) witness: Option<Witness>,
}

impl Watch {
    /// The watch of `emitter` (if any) at start: generation 0, slot 0,
    /// nothing read yet, judged from `grace_end` (the end of the start-up
    /// grace) on.
    pub(super) fn new(emitter: Option<Rank>, grace_end: Time) -> Watch {
        Watch {
            emitter,
            generation: 0,
            slot: 0,
            last_value: None,
            changed_at: grace_end,
            still_seen_at: None,
            awaiting_first: false,
            awaiting_link: false,
            host_watch: None,
            mismatch_since: None,
            sync_not_before: Time::ZERO,
            slow_warned_at: None,
            hurry: false,
            suspect: None,
            witness: None,
        }
    }
}

/// The close watch of a host this rank just mended into, its previous
/// emitter gone: until `until` (a timeout after the mending), a quarter
/// timeout without a beat of the new emitter (counted from the later of
/// `from`, its last beat and its link coming up) checks the rest of that
/// host again ([`Engine::check_rest_of_host`]). Its processes may be
/// dying one after another (a host's whole job killed), the new emitter
/// among them after it answered the check made at the mending, with
/// nobody left on the host to see it exit: without this the observer
/// would wait out a timeout of silence, or the link grace (the start-up
/// grace, 1 s by default) if the new link never came up, before the
/// check that declares the rest.
#[derive(Clone, Copy, Debug)]
pub(super) struct HostWatch {
    pub(super) mended_at: Time,
    pub(super) from: Time,
    pub(super) until: Time,
}

/// A probe about our emitter, answered when its slot next moves.
#[derive(Clone, Copy, Debug)]
pub(super) struct Witness {
    pub(super) requester: Rank,
    pub(super) nonce: u32,
    pub(super) asked_at: Time,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Suspect {
    pub(super) rank: Rank,
    pub(super) nonce: u32,
    /// What the fabric said when the suspicion began.
    pub(super) said: FabricSaid,
}

/// [`Engine::next_check`] with the check interval `every` (a same-host
/// counter's is `EngineConfig::local_check_interval`).
pub(super) fn next_check_within(now: Time, expiry: Time, every: Duration) -> Time {
    let interval = now + every;
    let expiry = if expiry > now { expiry } else { interval };
    interval.min(expiry).max(now + Duration::from_nanos(1))
}

impl Engine {
    /// How long the emitter's slot may stand still before it is declared,
    /// and the cause it is declared with: the timeout, or the suspect
    /// timeout after in-band evidence (`FFD_INBAND=suspect`), or
    /// `first_beat_within` for a freshly mended emitter while other
    /// accusations are under way (`FFD_QUORUM=majority` only: a chain of
    /// cut-off ranks is declared in an eighth of a timeout per link) and
    /// this rank's own wake-ups keep time (own health 1); otherwise
    /// stretched by the own health multiplier.
    ///
    /// Why only at health 1: the eighth assumes the new emitter writes
    /// its first beat as soon as `ObserveMe` arrives. On an overloaded
    /// host, which a late wake-up here betrays, a live emitter's thread
    /// waits its turn like this one's, misses the eighth, and the
    /// majority (whose votes count reachability) confirms it: at N = 32
    /// with CPU hogs on 2 cores and a 10 ms timeout one false accusation
    /// dragged 18 mended emitters after it, one after another.
    /// A rank running late keeps the mend rate limit instead: the next
    /// emitter has a full stretched timeout from its link-up.
    pub(super) fn stillness_limit(&self, now: Time) -> (Duration, Cause) {
        if self.watch.hurry {
            (self.suspect_limit(), Cause::InBand)
        } else if self.watch.awaiting_first
            && self.health.multiplier() == 1
            && self.silence_around(now)
        {
            (self.config.first_beat_within(), Cause::Timeout)
        } else {
            (self.health.stretch(self.config.timeout), Cause::Timeout)
        }
    }

    /// The suspect timeout, stretched by the own health multiplier.
    pub(super) fn suspect_limit(&self) -> Duration {
        self.health.stretch(self.config.suspect_timeout())
    }

    /// Schedules the next slot check: one check interval away, or sooner if
    /// the emitter's time is up before that (once it is up and an
    /// accusation is under way: the check interval).
    pub(super) fn schedule_check(&mut self, now: Time) {
        if self.watch.emitter.is_none() || self.participation != Participation::Active {
            self.timers.stop(Timer::Check);
            return;
        }
        let (limit, cause) = self.stillness_limit(now);
        let mut next = self.next_check(now, self.watch.changed_at + limit);
        if let Some(at) = self.host_precheck_at(limit, cause).filter(|&at| at > now) {
            next = next.min(at);
        }
        // (Not while a check runs: its end schedules the next check.)
        if let Some(at) = self
            .host_recheck_due(now)
            .filter(|_| self.same_host.check.is_none())
        {
            next = next.min(at.max(now + Duration::from_nanos(1)));
        }
        self.timers.set(Timer::Check, next);
    }

    /// When to check an emitter whose time is up at `expiry`: one check
    /// interval away, or at `expiry` if sooner; once it is past (an
    /// accusation is under way), one check interval away.
    pub(super) fn next_check(&self, now: Time, expiry: Time) -> Time {
        next_check_within(now, expiry, self.config.check_interval())
    }

    pub(super) fn on_slot(&mut self, now: Time, slot: u16, value: u64) {
        let Some(emitter) = self.watch.emitter else {
            self.stats.observation.stale_slot_reads += 1;
            return;
        };
        if slot != self.watch.slot || self.participation == Participation::Excluded {
            self.stats.observation.stale_slot_reads += 1;
            return;
        }
        // Only a value of the generation we named in ObserveMe is a beat of
        // our emitter's. Another one (a leftover of the mending 512
        // generations ago that shared this slot, a write of a replaced
        // emitter) reads as no change at all: as 0 before the first beat,
        // as the last beat after it.
        let value = if value != 0 && slot_generation(value) != self.watch.generation as u16 {
            self.stats.observation.foreign_slot_values += 1;
            self.watch.last_value.unwrap_or(0)
        } else {
            value
        };
        match self.watch.last_value {
            Some(v) if v == value => self.watch.still_seen_at = Some(now),
            None if value == 0 => self.watch.last_value = Some(0),
            previous => {
                // Slow, not dead: a read saw the slot standing still for a
                // while, and now it moved. (A long gap between our own reads
                // is our stall, not the emitter's: no read, no evidence.)
                if let (Some(_), Some(still), false) = (
                    previous,
                    self.watch.still_seen_at,
                    self.watch.awaiting_first,
                ) {
                    let stalled_for = still - self.watch.changed_at;
                    let quiet = self
                        .watch
                        .slow_warned_at
                        .is_none_or(|t| now - t >= self.config.timeout);
                    if stalled_for >= self.config.slow_emitter_after() && quiet {
                        self.watch.slow_warned_at = Some(now);
                        self.stats.observation.slow_emitter_warnings += 1;
                        self.push_event(Event::SlowEmitter {
                            rank: emitter,
                            stalled_for,
                        });
                    }
                }
                if let Some(w) = self.watch.witness.take() {
                    if previous.is_some() && now > w.asked_at {
                        let m = self
                            .encoder
                            .probe_ack(w.nonce, emitter, ProbeVerdict::Alive);
                        self.send(w.requester, Kind::ProbeAck, m);
                    } else {
                        self.watch.witness = Some(w);
                    }
                }
                self.watch.last_value = Some(value);
                // The emitter is alive now. (Not max(changed_at, now): during
                // the start-up or post-mending grace changed_at lies in the
                // future, and keeping it would blind the observer for the
                // rest of the grace once heartbeats flow.)
                self.watch.changed_at = now;
                self.watch.still_seen_at = None;
                self.watch.awaiting_first = false;
                self.watch.awaiting_link = false;
                self.watch.hurry = false;
                self.quorum_emitter_alive(now, emitter);
            }
        }
    }

    /// A send to `to` completed. If `to` is the emitter this rank just
    /// mended to and its link was not yet confirmed, its timeout starts
    /// now: a connection set-up slower than the timeout (as on
    /// `tcp;ofi_rxm` under load) is not the new emitter's silence. This is
    /// the mend rate limit: having declared one emitter, a rank gives the
    /// next a full timeout from the moment it is linked, so one late rank
    /// cannot drag its cold neighbours after it.
    pub(super) fn on_sent(&mut self, now: Time, to: Rank) {
        if !self.watch.awaiting_link || self.watch.emitter != Some(to) {
            return;
        }
        self.stats.observation.mend_links_confirmed += 1;
        self.watch.awaiting_link = false;
        self.watch.changed_at = now;
        self.watch.still_seen_at = None;
        self.schedule_check(now);
    }

    /// This thread woke late by more than the lag guard: its own stall is not
    /// its emitter's failure. Declare nobody this round, restart the
    /// baseline (the emitter gets a full timeout from now), and check our
    /// own standing with our ring neighbours: if we were excluded while
    /// stopped, they answer with a notice naming us, well before our next
    /// chance to declare anyone.
    pub(super) fn on_self_lag(&mut self, now: Time) {
        self.stats.health.self_lag_trips += 1;
        self.watch.changed_at = self.watch.changed_at.max(now);
        self.watch.still_seen_at = None;
        self.watch.mismatch_since = None;
        self.local_self_lag(now);
        if self.participation != Participation::Active {
            return;
        }
        self.quorum_self_lag(now);
        let mut asked = NO_RANK;
        for peer in [self.watch.emitter, self.beat.observer]
            .into_iter()
            .flatten()
        {
            if peer != asked {
                asked = peer;
                self.send_sync_request(peer);
            }
        }
    }

    pub(super) fn check(&mut self, now: Time, lagging: bool) {
        self.stats.observation.slot_checks += 1;
        if self.participation != Participation::Active {
            return;
        }
        let Some(emitter) = self.watch.emitter else {
            return;
        };
        if !lagging {
            let (limit, cause) = self.stillness_limit(now);
            if now >= self.watch.changed_at && now - self.watch.changed_at >= limit {
                self.on_silent_emitter(now, emitter, cause);
                // Declared (and mended), or excluded: nothing more to check
                // here. Accused: keep reading the slot meanwhile.
                if self.watch.emitter != Some(emitter)
                    || self.participation != Participation::Active
                {
                    return;
                }
            } else if self
                .host_precheck_at(limit, cause)
                .is_some_and(|at| now >= at)
            {
                self.begin_silent_host_check(now, emitter);
            }
        }
        self.recheck_host(now, emitter, lagging);
        if self.watch.awaiting_first {
            self.stats.observation.observe_me_resent += 1;
            let m = self
                .encoder
                .observe_me(self.watch.generation, self.watch.slot);
            self.send(emitter, Kind::ObserveMe, m);
        }
        match self.watch.last_value {
            Some(v) if v != 0 && slot_digest(v) != self.my_digest32() => {
                match self.watch.mismatch_since {
                    None => self.watch.mismatch_since = Some(now),
                    Some(since) => {
                        if now - since >= self.config.sync_after()
                            && now >= self.watch.sync_not_before
                        {
                            self.watch.sync_not_before = now + self.config.timeout;
                            self.send_sync_request(emitter);
                        }
                    }
                }
            }
            _ => self.watch.mismatch_since = None,
        }
        self.schedule_check(now);
    }

    pub(super) fn send_sync_request(&mut self, peer: Rank) {
        self.stats.sync.sync_requests_sent += 1;
        let cap = self.config.max_sync_ranks.min(MAX_MARKS);
        let (from, to, marks) = self.payloads.next_marks(cap, self.ring.len());
        let m = self.encoder.sync_request_with_marks(
            self.digest(),
            self.failed.as_slice(),
            self.left.as_slice(),
            from,
            to,
            &marks,
        );
        self.send(peer, Kind::SyncRequest, m);
    }

    /// A neighbour sends its failed and left sets and its payload marks
    /// (its digest differed from ours, or it woke from a stall): merge the
    /// sets, re-broadcast what was new to us, and reply with what it
    /// lacked: ranks in a `SyncReply`, payloads as `Payload` messages
    /// (`payloads::repair_payloads`). Honoured only from our current
    /// emitter or observer (the only ranks that ever ask us), at most once
    /// per peer per timeout; the reply carries at most `max_sync_ranks`
    /// ranks and `max_sync_payload_bytes` of payloads (the rest waits for
    /// its next request), so the work one request draws is bounded.
    pub(super) fn on_sync_request(
        &mut self,
        now: Time,
        sender: Rank,
        digest: u64,
        failed: RankList<'_>,
        left: RankList<'_>,
        marks: Marks<'_>,
    ) {
        let neighbour = self.watch.emitter == Some(sender)
            || self.beat.observer == Some(sender)
            || self
                .same_host
                .is_local_neighbour(self.me, sender, |r| self.is_gone(r));
        if !neighbour || !self.limits.honour_sync(sender, now, self.config.timeout) {
            self.stats.sync.sync_requests_refused += 1;
            return;
        }
        self.stats.sync.sync_requests_received += 1;
        let (nf, nl) = self.learn(failed, left, sender, 1);
        self.rebroadcast_learned(&nf, &nl, sender);
        if digest != self.digest() {
            let (mut theirs, mut diff_f, mut diff_l) = (failed.to_vec(), Vec::new(), Vec::new());
            theirs.extend(left.iter());
            theirs.sort_unstable();
            let mut room = self.config.max_sync_ranks;
            let mut cut = false;
            for (mine, diff) in [
                (self.failed.as_slice(), &mut diff_f),
                (self.left.as_slice(), &mut diff_l),
            ] {
                for &r in mine {
                    if theirs.binary_search(&r).is_err() {
                        if room == 0 {
                            cut = true;
                            break;
                        }
                        room -= 1;
                        diff.push(r);
                    }
                }
            }
            if cut {
                self.stats.sync.sync_replies_truncated += 1;
            }
            if !diff_f.is_empty() || !diff_l.is_empty() {
                self.stats.sync.sync_replies_sent += 1;
                let m = self.encoder.sync_reply(&diff_f, &diff_l);
                self.send(sender, Kind::SyncReply, m);
            }
            self.repair_payloads(sender, marks);
        }
        if !nf.is_empty() || !nl.is_empty() {
            self.after_gone_changed(now);
        }
    }

    /// What our sync request's peer knew and we did not: merge and
    /// re-broadcast it.
    pub(super) fn on_sync_reply(
        &mut self,
        now: Time,
        sender: Rank,
        failed: RankList<'_>,
        left: RankList<'_>,
    ) {
        let (nf, nl) = self.learn(failed, left, sender, 1);
        self.rebroadcast_learned(&nf, &nl, sender);
        if !nf.is_empty() || !nl.is_empty() {
            self.after_gone_changed(now);
        }
    }

    /// Another rank suspects `about` and asks what we know. About us:
    /// alive. About a failed rank: dead. About our emitter: our slot is the
    /// witness (see the comment below). Otherwise: unknown.
    pub(super) fn on_probe(&mut self, now: Time, sender: Rank, nonce: u32, about: Rank) {
        let verdict = if about == self.me {
            ProbeVerdict::Alive
        } else if self.failed.contains(about) {
            ProbeVerdict::Dead
        } else if self.watch.emitter == Some(about) {
            // We observe the suspect: vouch for it only on a beat
            // written after this probe arrived (its error may be
            // milliseconds old, our last beat older). Silence past
            // the suspect timeout is reported at once.
            let stale =
                now >= self.watch.changed_at && now - self.watch.changed_at >= self.suspect_limit();
            if stale && self.watch.last_value.is_some() {
                ProbeVerdict::Silent
            } else {
                self.watch.witness = Some(Witness {
                    requester: sender,
                    nonce,
                    asked_at: now,
                });
                let soon = now + self.config.period;
                if self.timers.get(Timer::Check) > soon {
                    self.timers.set(Timer::Check, soon);
                }
                return;
            }
        } else {
            ProbeVerdict::Unknown
        };
        let m = self.encoder.probe_ack(nonce, about, verdict);
        self.send(sender, Kind::ProbeAck, m);
    }

    /// An answer about our suspect (stale answers, with another nonce or
    /// about another rank, are ignored): alive clears it, dead declares it
    /// (the witness holds it failed), silent is silence, unknown waits for
    /// the suspect timer. The suspect's answer to an accusation's direct
    /// probe goes to `quorum`.
    pub(super) fn on_probe_ack(
        &mut self,
        now: Time,
        sender: Rank,
        nonce: u32,
        about: Rank,
        verdict: ProbeVerdict,
    ) {
        if self.quorum_probe_ack(now, sender, nonce, about, verdict) {
            return;
        }
        if verdict == ProbeVerdict::Alive && self.on_host_check_ack(now, nonce, about) {
            return;
        }
        if let Some(s) = self.watch.suspect {
            if s.rank == about && s.nonce == nonce {
                match verdict {
                    ProbeVerdict::Alive => {
                        self.stats.observation.suspicions_cleared += 1;
                        self.watch.suspect = None;
                        self.timers.stop(Timer::Suspect);
                    }
                    ProbeVerdict::Dead => {
                        self.watch.suspect = None;
                        self.timers.stop(Timer::Suspect);
                        self.declare(now, about, Cause::InBand, FailureDetail::Learned);
                    }
                    ProbeVerdict::Silent => {
                        self.watch.suspect = None;
                        self.timers.stop(Timer::Suspect);
                        self.on_silence(now, about, Cause::InBand, s.said);
                    }
                    ProbeVerdict::Unknown => {}
                }
            }
        }
    }

    /// The emitter is gone: observe the nearest predecessor not known
    /// failed or left, in a fresh slot. Its timeout starts when its link is
    /// confirmed (a send to it completes, see [`Engine::on_sent`], or its
    /// first beat lands), at the latest a link grace from now: on a warm
    /// link that is at once, and the new emitter has one timeout. With
    /// nobody left, there is no emitter (and no error).
    pub(super) fn mend(&mut self, now: Time) {
        let previous = self.watch.emitter;
        let candidate = self
            .same_host
            .emitter_candidate(self.me, &self.ring, |r| self.is_gone(r));
        self.watch.witness = None;
        self.watch.generation = self.watch.generation.wrapping_add(1);
        self.watch.slot = (self.watch.generation % u32::from(SLOTS)) as u16;
        self.watch.emitter = candidate;
        self.watch.last_value = None;
        self.watch.changed_at = now + self.config.link_grace();
        self.watch.still_seen_at = None;
        self.watch.awaiting_first = true;
        self.watch.awaiting_link = true;
        self.watch.host_watch = None;
        self.watch.mismatch_since = None;
        self.watch.hurry = false;
        self.watch.slow_warned_at = None;
        if let Some(e) = candidate {
            // Cleared before the ObserveMe that names it leaves, so nothing
            // written there earlier is read in this generation.
            self.queue_output(Output::ClearSlot {
                slot: self.watch.slot,
            });
            if self.participation == Participation::Active {
                self.stats.observation.mendings += 1;
                let m = self
                    .encoder
                    .observe_me(self.watch.generation, self.watch.slot);
                self.send(e, Kind::ObserveMe, m);
            }
        }
        self.schedule_check(now);
        // The emitter failed and its host's next rank takes over: the rest
        // of that host may have gone with it.
        if let (Some(p), Some(e), Some(h)) = (previous, candidate, self.same_host.hosts.clone()) {
            if self.is_gone(p) && h.host_of(p) == h.host_of(e) {
                self.check_rest_of_host(now, p);
                if h.host_of(e) != h.host_of(self.me) {
                    self.watch.host_watch = Some(HostWatch {
                        mended_at: now,
                        from: now,
                        until: now + self.health.stretch(self.config.timeout),
                    });
                    self.schedule_check(now);
                }
            }
        }
    }

    /// When the close watch of the emitter's host ([`HostWatch`]) next
    /// re-checks it, if the emitter stays still until then; `None` when
    /// no watch runs or it ends first.
    fn host_recheck_due(&self, now: Time) -> Option<Time> {
        let w = self.watch.host_watch?;
        let due = w.from.max(self.last_stir(now)) + self.health.stretch(self.config.timeout) / 4;
        (due < w.until).then_some(due)
    }

    /// The emitter's last sign of life (a beat, its link coming up) if it
    /// lies in the past; `Time::ZERO` while a mended emitter's baseline
    /// still lies a link grace ahead.
    fn last_stir(&self, now: Time) -> Time {
        if self.watch.changed_at <= now {
            self.watch.changed_at
        } else {
            Time::ZERO
        }
    }

    /// The close watch's re-check, when due ([`HostWatch`]): a check of
    /// the host that gives no verdict if any rank of it answers, or the
    /// emitter beats or its link comes up before the window closes; one
    /// that does not answer is one silent host, through the quorum, or,
    /// without one (`FFD_QUORUM=off`, nobody to refute a stalled host),
    /// only once the emitter has been still for its whole limit since the
    /// mending or its last sign of life. Not on a late wake-up of this
    /// rank's own, nor while another check runs; the next is a quarter
    /// timeout after this one's window at the earliest.
    fn recheck_host(&mut self, now: Time, emitter: Rank, lagging: bool) {
        let Some(w) = self.watch.host_watch else {
            return;
        };
        if now >= w.until {
            self.watch.host_watch = None;
            return;
        }
        let due = self.host_recheck_due(now).is_some_and(|at| now >= at);
        if lagging || !due || self.same_host.check.is_some() {
            return;
        }
        let quarter = self.health.stretch(self.config.timeout) / 4;
        self.watch.host_watch = Some(HostWatch {
            from: now + quarter,
            ..w
        });
        let not_before = if self.config.quorum == QuorumMode::Off {
            w.mended_at.max(self.last_stir(now)) + self.health.stretch(self.config.timeout)
        } else {
            now
        };
        self.check_host_of_still_emitter(now, emitter, not_before);
    }

    // ----- in-band evidence -----

    /// Transport errors are evidence only on ring links: the emitter writes
    /// only to its observer, and the observer only sends to its emitter
    /// (`ObserveMe`, sync, an accusation's probe). An error towards our
    /// observer or emitter declares it at once if it is proof (`Declare`),
    /// goes through `on_silence` if it is silence (an accusation with
    /// `FFD_QUORUM=majority`), or starts a check (`Suspect`): a probe to
    /// the observer and to the observer's own observer, declared unless one
    /// answers "alive" within `suspect_timeout`; for the emitter, our own
    /// slot is the best witness, so it is declared if its slot stood still
    /// for `suspect_timeout`. Errors towards any other peer (a notice
    /// copy to a distant overlay neighbour) are counted and ignored: that
    /// peer's own observer decides within a timeout, and the broadcast's
    /// redundant links and the digest sync cover the lost copy. Errors
    /// concerning departed ranks are ignored.
    pub(super) fn on_transport_error(
        &mut self,
        now: Time,
        peer: Rank,
        _kind: TransportErrorKind,
        evidence: Evidence,
        said: FabricSaid,
    ) {
        self.stats.observation.transport_errors += 1;
        if self.participation != Participation::Active
            || peer == self.me
            || peer >= self.ring.len()
            || self.is_gone(peer)
            || self.config.inband == InbandMode::Off
        {
            self.stats.observation.transport_errors_ignored += 1;
            return;
        }
        let is_observer = self.beat.observer == Some(peer);
        let is_emitter = self.watch.emitter == Some(peer);
        match self.config.inband {
            InbandMode::Declare if is_observer || is_emitter => match evidence {
                Evidence::Proof => {
                    self.declare(now, peer, Cause::InBand, FailureDetail::Proof { said });
                    self.check_rest_of_host(now, peer);
                }
                Evidence::Silence => self.on_silence(now, peer, Cause::InBand, said),
            },
            InbandMode::Suspect if is_observer => self.start_suspect(now, peer, said),
            InbandMode::Suspect if is_emitter => {
                self.watch.hurry = true;
                self.schedule_check(now);
            }
            _ => self.stats.observation.transport_errors_ignored += 1,
        }
    }

    pub(super) fn start_suspect(&mut self, now: Time, rank: Rank, said: FabricSaid) {
        if self.watch.suspect.is_some_and(|s| s.rank == rank) {
            return;
        }
        self.stats.observation.suspicions += 1;
        let nonce = self.quorum.next_nonce();
        self.watch.suspect = Some(Suspect { rank, nonce, said });
        let m = self.encoder.probe(nonce, rank);
        self.send(rank, Kind::Probe, m.clone());
        let witness = self.ring.successors(rank).find(|&r| !self.is_gone(r));
        if let Some(w) = witness.filter(|&w| w != self.me) {
            self.send(w, Kind::Probe, m);
        }
        self.timers.set(Timer::Suspect, now + self.suspect_limit());
    }
}
