//! Host groups in the Engine: local watching and the fabric ring of hosts
//! (`docs/design.md` §4.12 "Hosts").
//!
//! Owns: this rank's local watch (its nearest live same-host predecessor's
//! counter in shared memory, judged by the rules of the fabric slot: the
//! timeout, the self-lag guard, slow-emitter warnings, the digest sync),
//! same-host exits (proof, declared at once by every local rank, broadcast
//! by the lowest live one), who is a leader and what a leader observes
//! (the emitter candidate and the `ObserveMe` order of a ring of hosts),
//! the whole-host check before a silent leader is declared, and
//! [`Engine::declare_silent`], the one place every declaration resting on
//! silence passes (but a same-host emitter the kernel shows stopped: declared
//! at once, [`FailureDetail::Stopped`]). Must not: read shared memory or a
//! pidfd (the driver does and hands in [`LocalBeat`]s and
//! [`Input::Exited`](super::Input)),
//! send per-period messages, or change the failed set except through
//! `membership`.

use std::sync::Arc;
use std::time::Duration;

mod same_host;

use super::{
    Cause, EmitterThread, Engine, Event, FabricSaid, FailureDetail, LocalBeat, Output,
    Participation, Timer,
};
use crate::config::QuorumMode;
use crate::config::{Rank, Time};
use crate::engine::broadcast::Covered;
use crate::wire::Kind;

use super::observation::next_check_within;
pub(super) use same_host::SameHost;
use same_host::{BoardReaders, DeferredExit, HostCheck, live_of_host};

impl Engine {
    /// Whether this rank leads its host (always, without host groups).
    pub fn is_leader(&self) -> bool {
        self.same_host.is_leader(self.me, |r| self.is_gone(r))
    }

    /// The rank whose counter this rank watches in shared memory, if any.
    pub fn local_emitter(&self) -> Option<Rank> {
        self.same_host.local_emitter()
    }

    // ----- exits -----

    /// A same-host process exited: proof. Every local rank declares it at
    /// once; only the lowest live local rank broadcasts the notice (the
    /// others would send duplicates: every local rank saw the exit itself),
    /// and not to `seen_by`, the ranks of the host the driver knows see it
    /// themselves: a copy would only wake them, or, arriving before the
    /// kernel has marked their own words (it marks and wakes one watcher
    /// at a time), be news they forward to every overlay neighbour, a
    /// flood on the host while its cores are busiest.
    pub(super) fn on_exited(&mut self, now: Time, rank: Rank, seen_by: &[Rank]) {
        self.stats.hosts.exits_seen += 1;
        let Some(hosts) = self.same_host.hosts.clone() else {
            return;
        };
        if rank >= self.ring.len()
            || rank == self.me
            || !hosts.same_host(rank, self.me)
            || self.is_gone(rank)
            || self.participation != Participation::Active
        {
            return;
        }
        let broadcaster = hosts
            .members(hosts.host_of(self.me))
            .iter()
            .copied()
            .find(|&r| r != rank && !self.is_gone(r));
        let broadcast = (broadcaster == Some(self.me)).then_some(seen_by);
        if let Some(b) = broadcaster.filter(|&b| b != self.me) {
            self.same_host.local.deferred_exits.push(DeferredExit {
                rank,
                at: now,
                broadcaster: b,
                seen_by: seen_by.into(),
            });
        }
        let proof = FailureDetail::Proof {
            said: FabricSaid::Nothing,
        };
        self.declare_now(now, &[rank], Cause::Exited, proof, broadcast);
    }

    /// The broadcasters of exits this rank deferred to ([`DeferredExit`])
    /// that are now gone: each such exit passes to the host's lowest live
    /// rank, and if that is this rank, it broadcasts them, in one notice,
    /// past the ranks of the host that saw them all. The broadcaster may
    /// have sent them before it died, and then the copies are duplicates;
    /// but it may not have (it died on the same CPU a moment later, the
    /// kernel waking the watchers of one exit while it tore down the next
    /// process), and then no one else would: the other hosts would find
    /// the rank only through their own watch of its host, a timeout or
    /// more later (at N = 32 a notice lost so cost 60-130 ms).
    fn broadcast_orphaned_exits(&mut self, now: Time) {
        let kept = self.health.stretch(self.config.timeout).saturating_mul(2);
        let (failed, left) = (&self.failed, &self.left);
        let gone = |r| failed.contains(r) || left.contains(r);
        let Some((ranks, skip)) = self.same_host.orphaned_exits(now, kept, self.me, gone) else {
            return;
        };
        if self.participation != Participation::Active {
            return;
        }
        self.stats.hosts.orphaned_exits_broadcast += 1;
        let m: Arc<[u8]> = self.encoder.notice(self.me, 0, &ranks, &[]).into();
        self.fan_out(Kind::Notice, m, self.me, &skip, false);
    }

    // ----- the host's notice board -----

    /// News for the fabric (`failed`, found by `detector`): posted on the
    /// host's board first when the host has readers, who then need no
    /// fabric copy (true: posted, the fan-out skips them). A notice's
    /// forward-once over the overlay wakes each rank of a host once per
    /// overlay link it has there: at 32 ranks on one host, 244 copies for
    /// one hang, 210 of them duplicates, on the cores the notice waits
    /// for; the board wakes each once.
    pub(super) fn post_on_board(&mut self, failed: &[Rank], detector: Rank) -> bool {
        if matches!(self.same_host.board_readers, BoardReaders::None) || failed.is_empty() {
            return false;
        }
        self.stats.hosts.board_posts += 1;
        self.queue_output(Output::PostOnBoard {
            failed: failed.into(),
            detector,
        });
        true
    }

    /// Failures read from the host's board: learned like a notice's, and
    /// forwarded in one notice to the overlay links that do not read the
    /// board (other hosts), never posted again; those copies are held for
    /// a period ([`EngineConfig::board_forward_delay`]).
    ///
    /// Why held: the rank that posted the news sends its own copies to other
    /// hosts as it posts, and at a few ranks per host its overlay reaches
    /// every other host; the copies of the host's other ranks then only
    /// wake ranks that know already, and sent at once they took the CPUs
    /// the news was still travelling on (`ffd run -n 16 --netns 4`, a kill:
    /// every survivor knew 2.8 to 3.5 ms after the first declaration with
    /// them, 1.4 to 1.8 ms later without). They are still sent, so a host
    /// that only they reach (the poster died before its copies left, or
    /// its links miss a host) learns a period later (a period for each
    /// such hop), not never.
    ///
    /// [`EngineConfig::board_forward_delay`]: crate::config::EngineConfig::board_forward_delay
    pub(super) fn on_board_notice(&mut self, now: Time, failed: &[Rank], detector: Rank) {
        if self.same_host.hosts.is_none()
            || self.participation != Participation::Active
            || detector >= self.ring.len()
        {
            return;
        }
        let mut new: Vec<Rank> = failed
            .iter()
            .copied()
            .filter(|&r| r < self.ring.len() && r != self.me && !self.is_gone(r))
            .collect();
        new.sort_unstable();
        new.dedup();
        if new.is_empty() {
            return;
        }
        self.stats.hosts.board_learned += new.len() as u64;
        self.learned_failed(&new, detector, 1);
        let m: Arc<[u8]> = self.encoder.notice(detector, 1, &new, &[]).into();
        self.stats.notices.notices_forwarded += 1;
        if let Some(step) = self.broadcast_step(Kind::Notice, m, detector, &[detector], true) {
            self.hold_copies(now, Covered::ByBoardPoster, step);
        }
        self.after_gone_changed(now);
    }

    // ----- the local counter -----

    /// The driver's reading of the same-host emitter's counter (`None`: never
    /// written). A newer wake-up is a beat; a gap between two that exceeds
    /// two local check intervals plus the slow-emitter threshold raises
    /// `SlowEmitter` (the emitter bumps at every wake-up, at least every
    /// local check interval).
    pub(super) fn on_local_beat(&mut self, now: Time, reading: Option<LocalBeat>) {
        if self.participation == Participation::Excluded {
            return;
        }
        let slow = self.same_host.on_local_beat(now, reading, &self.config);
        if let Some((rank, stalled_for)) = slow {
            self.stats.observation.slow_emitter_warnings += 1;
            self.push_event(Event::SlowEmitter { rank, stalled_for });
        }
    }

    pub(super) fn schedule_local_check(&mut self, now: Time) {
        if self.same_host.local.emitter.is_none() || self.participation != Participation::Active {
            self.timers.stop(Timer::LocalCheck);
            return;
        }
        let next = next_check_within(
            now,
            self.same_host.local_since() + self.same_host.local_limit(&self.config, &self.health),
            self.config.local_check_interval(),
        );
        self.timers.set(Timer::LocalCheck, next);
    }

    /// A check of the same-host emitter: declared when its counter stood still
    /// for the timeout (not on a wake-up that ran late: this rank's own
    /// stall is not its emitter's); a digest that differs from ours for
    /// `sync_after` asks it for its sets, as over the fabric.
    pub(super) fn check_local(&mut self, now: Time, lagging: bool) {
        self.stats.hosts.local_checks += 1;
        if self.participation != Participation::Active {
            return;
        }
        let Some(emitter) = self.same_host.local.emitter else {
            return;
        };
        let since = self.same_host.local_since();
        if self.same_host.local.thread == EmitterThread::Runnable
            && now >= since
            && now - since >= self.config.timeout
        {
            self.stats.hosts.starved_emitter_checks += 1;
        }
        if !lagging
            && now >= since
            && now - since >= self.same_host.local_limit(&self.config, &self.health)
        {
            let accused = self.quorum.accusing(emitter);
            if !accused {
                self.stats.hosts.local_hangs += 1;
            }
            if self.same_host.local.thread == EmitterThread::Stopped {
                // The kernel shows it stopped (SIGSTOP): a hang on its
                // word, seen through shared memory, which no partition
                // splits and no starvation fakes. No accusation round (one
                // under way ends with the declaration): its flood and the
                // answers are two more waves of wake-ups of every rank
                // before the notice's.
                self.stats.hosts.stopped_emitters_declared += 1;
                self.declare_now(
                    now,
                    &[emitter],
                    Cause::Timeout,
                    FailureDetail::Stopped,
                    Some(&[]),
                );
            } else if !accused {
                self.declare_silent(now, &[emitter], Cause::Timeout);
            }
            // Declared (and mended), or excluded: the mending or the end
            // set the timer. Accused (`FFD_QUORUM=majority`): keep
            // checking, and keep waking, every local check interval meanwhile.
            // (This rank's wake-ups are its own counter's beats: a rank
            // that stopped checking slept until the next message, and its
            // observer accused it in turn, round the ring.)
            if self.same_host.local.emitter == Some(emitter)
                && self.participation == Participation::Active
            {
                self.schedule_local_check(now);
            }
            return;
        }
        let digest = self.my_digest32();
        let (sync_after, timeout) = (self.config.sync_after(), self.config.timeout);
        if self.same_host.sync_due(now, digest, sync_after, timeout) {
            self.send_sync_request(emitter);
        }
        self.schedule_local_check(now);
    }

    /// This rank woke late: its same-host emitter gets a full timeout from now.
    pub(super) fn local_self_lag(&mut self, now: Time) {
        self.same_host.self_lag(now);
    }

    /// The local ring after the gone set grew: watch the nearest live
    /// same-host predecessor; take over the fabric watch on becoming the
    /// host's leader.
    pub(super) fn after_gone_changed_local(&mut self, now: Time) {
        if self.same_host.hosts.is_none() {
            return;
        }
        self.broadcast_orphaned_exits(now);
        let (failed, left) = (&self.failed, &self.left);
        let gone = |r| failed.contains(r) || left.contains(r);
        let (changed, leads, took_over) = self.same_host.on_gone(now, self.me, gone);
        if changed {
            self.schedule_local_check(now);
        }
        if took_over {
            self.stats.hosts.leader_takeovers += 1;
        }
        if leads
            && self.watch.emitter.is_none()
            && self
                .same_host
                .emitter_candidate(self.me, &self.ring, |r| self.is_gone(r))
                .is_some()
        {
            // A new leader: observe the previous host's leader (ObserveMe
            // switches its heartbeats to us); the next host's leader mends
            // to us when it learns that ours failed.
            self.mend(now);
        }
    }

    // ----- whole hosts -----

    /// The fabric emitter stood still for the timeout. With host groups,
    /// and other live ranks on its host, check the host first (unless the
    /// check already runs: it begins a quarter timeout early, see
    /// [`Engine::host_precheck_at`]): a probe to each of its live ranks; a
    /// quarter timeout without any answer declares the whole host in one
    /// notice, an answer only the leader, once its timeout is up and if it
    /// is still silent then. Otherwise declare it.
    pub(super) fn on_silent_emitter(&mut self, now: Time, emitter: Rank, cause: Cause) {
        if cause == Cause::Timeout && self.same_host.hosts.is_some() {
            // A check under way, or its accusation (`majority`): no new
            // round of probes at each check meanwhile.
            if self.same_host.check.is_some() || self.quorum.accusing(emitter) {
                return;
            }
            if self.begin_silent_host_check(now, emitter) {
                return;
            }
        }
        self.declare_silent(now, &[emitter], cause);
    }

    /// When to begin the check of the fabric emitter's host while it
    /// stands still (`limit`, `cause`: its stillness limit now): a quarter
    /// timeout before its time is up, so that the check's window closes
    /// when the timeout does, and a host lost whole is declared in one
    /// timeout (it was a timeout and a quarter: a host cut off by a
    /// network namespace took 127 ms at 100 ms). Only for the plain
    /// timeout (not a freshly mended emitter's first-beat limit, shorter
    /// than the window), with host groups and other live ranks on the
    /// emitter's host, and no check under way. Allocates nothing.
    pub(super) fn host_precheck_at(&self, limit: Duration, cause: Cause) -> Option<Time> {
        // Host groups first: without them (most Engines of a simulator)
        // nothing else is read.
        let (hosts, emitter) = (self.same_host.hosts.as_ref()?, self.watch.emitter?);
        if cause != Cause::Timeout || limit < self.config.timeout || self.same_host.check.is_some()
        {
            return None;
        }
        if self.quorum.accusing(emitter) {
            return None;
        }
        let host = hosts.host_of(emitter);
        let others = host != hosts.host_of(self.me)
            && hosts
                .members(host)
                .iter()
                .any(|&r| r != emitter && !self.is_gone(r));
        others.then(|| self.watch.changed_at + (limit - self.config.timeout / 4))
    }

    /// Probes each live rank of the silent fabric emitter's host (a check
    /// not after proof); false if it has no other live rank.
    pub(super) fn begin_silent_host_check(&mut self, now: Time, emitter: Rank) -> bool {
        let Some(hosts) = self.same_host.hosts.clone() else {
            return false;
        };
        let host = hosts.host_of(emitter);
        let live = live_of_host(&hosts, host, |r| self.is_gone(r));
        if live.len() < 2 {
            return false;
        }
        self.begin_host_check(now, host, emitter, &live, (false, None));
        true
    }

    /// `leader`, a leader of another host, is gone: this rank declared it
    /// on proof (an in-band error on the fabric link between them, either
    /// way round), or it was its fabric emitter and it now mends to the
    /// next rank of the same host. That host's other ranks may be gone too
    /// (a whole host's processes killed at once): rather than mend to each
    /// in turn, finding each dead only when its own new link fails (a
    /// link that never came up counts only after the link grace), probe
    /// them all now; a quarter timeout without any answer declares them as
    /// one silent host ([`Engine::declare_silent`]), an answer ends the
    /// check (the next leader takes over as usual).
    pub(super) fn check_rest_of_host(&mut self, now: Time, leader: Rank) {
        self.check_host_of(now, leader, None);
    }

    /// [`Engine::check_rest_of_host`] for the mended emitter `emitter`,
    /// still for a quarter timeout: the same probes, but a beat of the
    /// emitter or its link coming up before the window closes ends the
    /// check with no verdict (it runs), and there is none before
    /// `not_before` either.
    pub(super) fn check_host_of_still_emitter(
        &mut self,
        now: Time,
        emitter: Rank,
        not_before: Time,
    ) {
        self.check_host_of(now, emitter, Some(not_before));
    }

    /// The check of `leader`'s host after proof; `still_emitter`: the
    /// close watch's re-check, not before that instant (see
    /// [`HostCheck::still_emitter`]). A check of `leader`'s silence
    /// under way (begun a quarter timeout early, or answered and waiting
    /// for its time) gives way: `leader` is gone, and the rest of its host
    /// is what is left to check.
    fn check_host_of(&mut self, now: Time, leader: Rank, still_emitter: Option<Time>) {
        let Some(hosts) = self.same_host.hosts.clone() else {
            return;
        };
        if let Some(c) = self.same_host.check {
            if !c.after_proof && c.leader == leader && self.is_gone(leader) {
                self.same_host.check = None;
                self.timers.stop(Timer::HostCheck);
            }
        }
        if self.same_host.check.is_some() || self.participation != Participation::Active {
            return;
        }
        let host = hosts.host_of(leader);
        if host == hosts.host_of(self.me) {
            return;
        }
        let live = live_of_host(&hosts, host, |r| self.is_gone(r));
        if !live.is_empty() {
            self.begin_host_check(now, host, leader, &live, (true, still_emitter));
        }
    }

    /// Probes each of `live` (of `host`, whose leader is `leader`) and
    /// resolves the check a quarter timeout later. `(after_proof,
    /// still_emitter)`: as in [`HostCheck`].
    fn begin_host_check(
        &mut self,
        now: Time,
        host: u32,
        leader: Rank,
        live: &[Rank],
        (after_proof, still_emitter): (bool, Option<Time>),
    ) {
        self.stats.hosts.host_checks += 1;
        let nonce = self.quorum.next_nonce();
        for &r in live {
            let m = self.encoder.probe(nonce, r);
            self.send(r, Kind::Probe, m);
        }
        self.same_host.check = Some(HostCheck {
            host,
            leader,
            nonce,
            changed_at: self.watch.changed_at,
            after_proof,
            still_emitter,
            answered: false,
        });
        self.timers
            .set(Timer::HostCheck, now + self.config.timeout / 4);
    }

    /// A probe's answer: if it is about a rank of the host being checked
    /// and says alive, the host runs. After proof, the check ends; a
    /// silent leader is declared alone, once its time is up (at once if it
    /// is: the check began when it was; otherwise when it is, the check
    /// having begun a quarter timeout early) and if it is still silent
    /// then. Returns whether the answer belonged to the host check.
    pub(super) fn on_host_check_ack(&mut self, now: Time, nonce: u32, about: Rank) -> bool {
        let Some(check) = self.same_host.check else {
            return false;
        };
        let ours = check.nonce == nonce
            && self
                .same_host
                .hosts
                .as_ref()
                .is_some_and(|h| h.host_of(about) == check.host);
        if !ours {
            return false;
        }
        if check.after_proof {
            // Someone of the host runs: the watch goes on as usual.
            self.same_host.check = None;
            self.timers.stop(Timer::HostCheck);
            self.schedule_check(now);
        } else if !check.answered {
            self.same_host.check = Some(HostCheck {
                answered: true,
                ..check
            });
            self.resolve_answered_host_check(now, check.leader, check.changed_at);
        }
        true
    }

    /// A silent leader whose host answered: declared alone if it is still
    /// this rank's emitter, still silent since the check began, and its
    /// time is up; the check waits for that time otherwise.
    fn resolve_answered_host_check(&mut self, now: Time, leader: Rank, changed_at: Time) {
        let still = self.watch.emitter == Some(leader)
            && !self.is_gone(leader)
            && self.watch.changed_at == changed_at;
        let (limit, _) = self.stillness_limit(now);
        let up_at = self.watch.changed_at + limit;
        if still && now < up_at {
            self.timers.set(Timer::HostCheck, up_at);
            return;
        }
        self.same_host.check = None;
        self.timers.stop(Timer::HostCheck);
        if still {
            self.declare_silent(now, &[leader], Cause::Timeout);
        }
        self.schedule_check(now);
    }

    /// The host check's window closed. Answered: see
    /// [`Engine::on_host_check_ack`]. Without an answer the whole host (the
    /// rest of it, after proof) is declared, unless the leader's slot moved
    /// meanwhile (it was slow) or this rank mended elsewhere, and not
    /// before the leader's time is up (its stretched limit may have grown
    /// since the check began a quarter timeout early) or the instant a
    /// re-check gives ([`HostCheck::still_emitter`]).
    pub(super) fn resolve_host_check(&mut self, now: Time, lagging: bool) {
        let Some(check) = self.same_host.check else {
            return;
        };
        if lagging {
            // No verdict on a late wake-up: answers may be waiting.
            self.timers
                .set(Timer::HostCheck, now + self.config.timeout / 4);
            return;
        }
        if check.answered {
            self.resolve_answered_host_check(now, check.leader, check.changed_at);
            return;
        }
        self.same_host.check = None;
        let gone = self.is_gone(check.leader);
        let ours = self.watch.emitter == Some(check.leader);
        let verdict_at = if let Some(not_before) = check.still_emitter {
            // The close watch's re-check of a still emitter: no verdict
            // while that emitter may run (it beat, its link came up, or
            // this rank mended away from it). Declared by others meanwhile
            // (a late notice: its detector died with it), it is proof
            // after all, and the rest of its host, silent through the
            // window, is declared as after any proof.
            let stirred = self.watch.changed_at != check.changed_at;
            if gone {
                Some(now)
            } else if !ours || stirred {
                None
            } else {
                Some(not_before)
            }
        } else if check.after_proof {
            Some(now)
        } else {
            let moved = self.watch.changed_at > check.changed_at;
            let (limit, _) = self.stillness_limit(now);
            (ours && !gone && !moved).then(|| self.watch.changed_at + limit)
        };
        let Some(at) = verdict_at else {
            self.schedule_check(now);
            return;
        };
        if now < at {
            self.same_host.check = Some(check);
            self.timers.set(Timer::HostCheck, at);
            return;
        }
        let Some(hosts) = self.same_host.hosts.clone() else {
            return;
        };
        let live = live_of_host(&hosts, check.host, |r| self.is_gone(r));
        self.declare_silent(now, &live, Cause::Timeout);
        if check.after_proof {
            self.schedule_check(now);
        }
    }

    /// Every declaration of same-host watching that rests on silence
    /// passes here (a local counter that stood still, a silent leader, a
    /// silent host): `ranks` ascending. When they are every live rank of
    /// one host (more than one), the host is reported failed too, and all
    /// of them are named in one notice: with `FFD_QUORUM=off` at once,
    /// with `majority` once a majority confirms one accusation of the
    /// whole host ([`Engine::accuse_host`]). Otherwise each rank goes
    /// through the quorum's door ([`Engine::on_silence`]).
    pub(super) fn declare_silent(&mut self, now: Time, ranks: &[Rank], cause: Cause) {
        if self.participation != Participation::Active {
            return;
        }
        let whole_host = match (&self.same_host.hosts, ranks) {
            (Some(h), [first, _, ..]) => {
                let host = h.host_of(*first);
                (live_of_host(h, host, |r| self.is_gone(r)) == ranks).then_some(host)
            }
            _ => None,
        };
        if self.config.quorum == QuorumMode::Majority {
            match whole_host {
                Some(host) => self.accuse_host(now, host, ranks, cause),
                None => {
                    for &r in ranks {
                        self.on_silence(now, r, cause, FabricSaid::Nothing);
                    }
                }
            }
            return;
        }
        let detail = FailureDetail::Silence {
            said: FabricSaid::Nothing,
            quorum: None,
        };
        self.declare_now(now, ranks, cause, detail, Some(&[]));
        if let Some(host) = whole_host {
            self.stats.hosts.hosts_declared += 1;
            self.push_event(Event::HostFailed {
                host,
                ranks: ranks.to_vec(),
            });
        }
    }
}
