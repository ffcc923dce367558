//! Host groups in the Engine: local watching and the fabric ring of hosts
//! (`docs/design.md` §4.12).
//!
//! Owns: this rank's local watch (its nearest live same-host predecessor's
//! counter in shared memory, judged by the rules of the fabric slot: the
//! timeout, the self-lag guard, slow-emitter warnings, the digest sync),
//! same-host exits (proof, declared at once by every local rank, broadcast
//! by the lowest live one), who is a leader and what a leader observes
//! (the emitter candidate and the `ObserveMe` order of a ring of hosts),
//! the whole-host check before a silent leader is declared, and
//! [`Engine::declare_silent`], the one place every declaration resting on
//! silence passes (but a local emitter the kernel shows stopped: declared
//! at once, [`FailureDetail::Stopped`]). Must not: read shared memory or a
//! pidfd (the driver does and hands in [`LocalBeat`]s and
//! [`Input::Exited`](super::Input)),
//! send per-period messages, or change the failed set except through
//! `membership`.

use std::sync::Arc;
use std::time::Duration;

use super::{
    Cause, EmitterThread, Engine, Event, FabricSaid, FailureDetail, LocalBeat, Output,
    Participation, Timer,
};
use crate::config::QuorumMode;
use crate::config::{EngineConfig, Rank, Time};
use crate::ring::Ring;

use super::health::Health;
use crate::hosts::Hosts;
use crate::wire::Kind;

/// Same-host watching (host groups) as one sub-state machine: the host
/// groups, this rank's watch of its local emitter's counter, whether it
/// leads its host, the check of a silent leader's host, and the board
/// readers. Without host groups (`hosts` `None`, `FFD_LOCAL=off`) it holds
/// nothing the Engine reads: no local emitter, every rank leads.
#[derive(Clone, Debug)]
pub(super) struct SameHost {
    /// Host groups (`None`: the per-process ring, `FFD_LOCAL=off`).
    pub(super) hosts: Option<Arc<Hosts>>,
    /// The local emitter's counter.
    pub(super) local: LocalWatch,
    /// Whether this rank led its host at the last change of the gone set.
    pub(super) leading: bool,
    /// A silent leader's host being checked.
    pub(super) check: Option<HostCheck>,
    /// The other ranks of this host that read its notice board
    /// ([`Input::BoardReaders`](super::Input)).
    pub(super) board_readers: BoardReaders,
}

/// This rank's watch of its local emitter's counter.
#[derive(Clone, Debug, Default)]
pub(super) struct LocalWatch {
    /// The nearest live same-host rank below this one (wrapping); `None`
    /// without host groups or when alone on the host.
    pub(super) emitter: Option<Rank>,
    /// The newest wake-up of the emitter seen in its counter.
    pub(super) seen_at: Option<Time>,
    /// The emitter is judged from `max(baseline, seen_at)`: the start-up
    /// grace (cleared by any wake-up read: the emitter is up), a local
    /// mending, a refuted accusation or a stall of this rank's own
    /// (`fresh_only`: cleared only by a wake-up at or after it, the
    /// emitter showed it is alive since).
    pub(super) baseline: Time,
    pub(super) fresh_only: bool,
    pub(super) digest: u32,
    /// What the kernel said of the emitter's progress thread at the last
    /// reading (looked at only once its counter was a timeout old).
    pub(super) thread: EmitterThread,
    pub(super) mismatch_since: Option<Time>,
    pub(super) sync_not_before: Time,
    pub(super) slow_warned_at: Option<Time>,
    /// Same-host exits this rank declared and left to another rank of the
    /// host to broadcast ([`Engine::on_exited`]).
    pub(super) deferred_exits: Vec<DeferredExit>,
}

/// A same-host exit this rank declared without broadcasting it: the
/// host's lowest live rank then, `broadcaster`, does. Should that rank be
/// found gone (it may have died with the exit unsent: a host's processes
/// killed one after another), the lowest live rank then broadcasts it
/// ([`Engine::broadcast_orphaned_exits`]).
#[derive(Clone, Debug)]
pub(super) struct DeferredExit {
    rank: Rank,
    /// When this rank saw it: kept two timeouts (its broadcaster, if hung
    /// before it sent it, is found within one), then dropped.
    at: Time,
    broadcaster: Rank,
    /// The ranks of the host that saw the exit themselves: no copy.
    seen_by: Box<[Rank]>,
}

/// A silent leader's host being checked before anyone is declared.
#[derive(Clone, Copy, Debug)]
pub(super) struct HostCheck {
    host: u32,
    leader: Rank,
    nonce: u32,
    /// The watch's `changed_at` when the check began: a slot that moves
    /// meanwhile ends the check (the leader was slow).
    changed_at: Time,
    /// The leader is already declared on proof (an in-band error): the
    /// check is about the rest of its host only.
    after_proof: bool,
    /// The close watch's re-check of a mended emitter's host
    /// ([`HostWatch`](super::observation::HostWatch)), with no verdict
    /// before this instant (later than the window only without a quorum:
    /// see [`Engine::recheck_host`](super::Engine)): `leader` is that
    /// emitter, and a beat seen or its link confirmed meanwhile ends the
    /// check with no verdict.
    still_emitter: Option<Time>,
    /// A rank of the host answered a check of a silent leader (not after
    /// proof): only the leader can be declared, once its time is up.
    answered: bool,
}

/// The other ranks of this host that read its notice board.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) enum BoardReaders {
    /// None (or no board): every overlay target gets a fabric copy.
    #[default]
    None,
    /// Every other rank of the host (the common case, kept without a list:
    /// a simulator holds a million Engines).
    AllOfHost,
    /// These, ascending.
    Some(Vec<Rank>),
}

impl SameHost {
    /// Rank `me`'s same-host watching at start (`grace_end`: the end of
    /// the start-up grace, its local emitter's first baseline).
    pub(super) fn new(hosts: Option<Arc<Hosts>>, me: Rank, grace_end: Time) -> SameHost {
        let none = |_| false;
        let (emitter, leading) = match &hosts {
            None => (None, true),
            Some(h) => (h.local_emitter(me, none), h.is_leader(me, none)),
        };
        SameHost {
            hosts,
            local: LocalWatch {
                emitter,
                baseline: grace_end,
                ..LocalWatch::default()
            },
            leading,
            check: None,
            board_readers: BoardReaders::None,
        }
    }

    /// The host groups, if any.
    pub(super) fn hosts(&self) -> Option<&Hosts> {
        self.hosts.as_deref()
    }

    /// The rank whose counter this rank watches in shared memory, if any.
    pub(super) fn local_emitter(&self) -> Option<Rank> {
        self.local.emitter
    }

    /// Whether `me` leads its host (always, without host groups).
    pub(super) fn is_leader(&self, me: Rank, gone: impl Fn(Rank) -> bool) -> bool {
        self.hosts.as_ref().is_none_or(|h| h.is_leader(me, gone))
    }

    /// Since when `rank` has been silent here if it is the local emitter:
    /// it is judged from max(baseline, seen_at).
    pub(super) fn silent_since(&self, rank: Rank) -> Option<Time> {
        (self.local.emitter == Some(rank)).then(|| {
            self.local
                .seen_at
                .map_or(self.local.baseline, |t| t.max(self.local.baseline))
        })
    }

    /// What the model checker's fingerprint tells states apart by (all of
    /// it but the host groups, which every Engine of a job shares).
    #[cfg(feature = "model")]
    pub(super) fn model_state(&self) -> String {
        format!(
            "{:?}|{}|{:?}|{:?}",
            self.local, self.leading, self.check, self.board_readers
        )
    }

    /// This rank stops: no host check, no exits left to broadcast.
    pub(super) fn close(&mut self) {
        self.check = None;
        self.local.deferred_exits = Vec::new();
    }

    /// The local emitter is judged from this instant.
    fn local_since(&self) -> Time {
        self.local
            .baseline
            .max(self.local.seen_at.unwrap_or(Time::ZERO))
    }

    /// How long the local emitter's counter may stand still before it is
    /// declared: the timeout, stretched by the local health multiplier as
    /// the fabric slot's is (`health`).
    ///
    /// An emitter whose progress thread the kernel has runnable (the
    /// driver looks once its counter is a timeout old) is starved, not
    /// hung: it waits for a CPU that busier threads hold, and an observer
    /// that happened to get one first would declare it (with CPU
    /// hogs on 2 cores the hogs held both CPUs for ~11 ms at a time). It is
    /// judged by the ceiling, `health_max` timeouts, the bound that holds
    /// anyway; a stopped (SIGSTOP) or blocked emitter is not runnable and
    /// keeps the plain limit (and a stopped one is declared there without
    /// an accusation round: `check_local`).
    fn local_limit(&self, config: &EngineConfig, health: &Health) -> Duration {
        if self.local.thread == EmitterThread::Runnable {
            config.timeout.saturating_mul(config.health_max.max(1))
        } else {
            health.stretch(config.timeout)
        }
    }

    /// The local emitter is judged from `now` until a wake-up of its own
    /// since (unless the start-up grace, which any wake-up clears, lasts
    /// longer).
    pub(super) fn restart_local_baseline(&mut self, now: Time) {
        if now >= self.local.baseline {
            self.local.baseline = now;
            self.local.fresh_only = true;
        }
    }

    /// The driver's reading of the local emitter's counter (`None`: never
    /// written). A newer wake-up is a beat; a gap between two that exceeds
    /// a check interval plus the slow-emitter threshold is returned, once
    /// per timeout, as the emitter and how long it stalled, for a
    /// `SlowEmitter` (the emitter bumps at every wake-up, at least every
    /// check interval).
    fn on_local_beat(
        &mut self,
        now: Time,
        reading: Option<LocalBeat>,
        config: &EngineConfig,
    ) -> Option<(Rank, Duration)> {
        let (Some(emitter), Some(beat)) = (self.local.emitter, reading) else {
            return None;
        };
        self.local.thread = beat.thread;
        if self.local.seen_at.is_some_and(|t| beat.at <= t) {
            self.local.digest = beat.digest;
            return None;
        }
        let mut slow_emitter = None;
        if let Some(previous) = self.local.seen_at {
            let stalled_for = beat.at - previous;
            let quiet = self
                .local
                .slow_warned_at
                .is_none_or(|t| now - t >= config.timeout);
            let slow = config.check_interval() + config.slow_emitter_after();
            if stalled_for >= slow && quiet {
                self.local.slow_warned_at = Some(now);
                slow_emitter = Some((emitter, stalled_for));
            }
        }
        self.local.seen_at = Some(beat.at);
        // Only a wake-up since the baseline clears it: the first reading
        // after a local mending (or after a stall of this rank's own) may
        // be the emitter's last wake-up from before it, a timeout old on
        // an overloaded host, and judging from it would declare the new
        // emitter at once (the mend rate limit gives it a full timeout from
        // the mending).
        if !self.local.fresh_only || beat.at >= self.local.baseline {
            self.local.baseline = Time::ZERO;
            self.local.fresh_only = false;
        }
        self.local.digest = beat.digest;
        slow_emitter
    }

    /// The driver's board readers of this host (`docs/design.md` §4.12),
    /// for rank `me` of `n`.
    pub(super) fn set_board_readers(&mut self, me: Rank, n: u32, ranks: &[Rank]) {
        let Some(hosts) = &self.hosts else {
            return;
        };
        let ours = |r: Rank| r != me && r < n && hosts.same_host(r, me);
        let others = hosts.members(hosts.host_of(me)).len().saturating_sub(1);
        // The common case, every other rank of the host (a simulator
        // passes the host's members, this rank among them), takes no list.
        let ascending = ranks.windows(2).all(|w| w[0] < w[1]);
        if others > 0 && ascending && ranks.iter().filter(|&&r| ours(r)).count() == others {
            self.board_readers = BoardReaders::AllOfHost;
            return;
        }
        let mut readers: Vec<Rank> = ranks.iter().copied().filter(|&r| ours(r)).collect();
        readers.sort_unstable();
        readers.dedup();
        self.board_readers = if readers.is_empty() {
            BoardReaders::None
        } else if readers.len() == others {
            BoardReaders::AllOfHost
        } else {
            BoardReaders::Some(readers)
        };
    }

    /// Whether `r` reads the board of `me`'s host.
    pub(super) fn reads_board(&self, me: Rank, r: Rank) -> bool {
        match (&self.board_readers, &self.hosts) {
            (BoardReaders::AllOfHost, Some(h)) => r != me && h.same_host(r, me),
            (BoardReaders::Some(v), _) => v.binary_search(&r).is_ok(),
            _ => false,
        }
    }

    /// The emitter `me` should observe over the fabric: its nearest
    /// live ring predecessor, or with host groups, as its host's leader,
    /// the leader of the nearest live host before its own.
    pub(super) fn emitter_candidate(
        &self,
        me: Rank,
        ring: &Ring,
        gone: impl Fn(Rank) -> bool + Copy,
    ) -> Option<Rank> {
        match &self.hosts {
            None => ring.predecessors(me).find(|&r| !gone(r)),
            Some(h) if h.is_leader(me, gone) => h.fabric_emitter(me, gone),
            Some(_) => None,
        }
    }

    /// Whether an `ObserveMe` from `sender` supersedes the one from `me`'s
    /// current observer `current`: observers only move outward along the
    /// ring; with host groups, to a farther host, or on the same host to a
    /// higher rank (its new leader).
    pub(super) fn farther_observer(
        &self,
        me: Rank,
        ring: &Ring,
        sender: Rank,
        current: Rank,
    ) -> bool {
        match &self.hosts {
            None => ring.distance(me, sender) > ring.distance(me, current),
            Some(h) => {
                (h.host_distance(me, sender), sender) > (h.host_distance(me, current), current)
            }
        }
    }

    /// Whether `peer` is `me`'s local emitter or local observer (they may
    /// ask each other for their sets).
    pub(super) fn is_local_neighbour(
        &self,
        me: Rank,
        peer: Rank,
        gone: impl Fn(Rank) -> bool,
    ) -> bool {
        self.local.emitter == Some(peer)
            || self.hosts.as_ref().and_then(|h| h.local_observer(me, gone)) == Some(peer)
    }
}

/// The ranks of `host` not `gone`, ascending.
fn live_of_host(hosts: &Hosts, host: u32, gone: impl Fn(Rank) -> bool) -> Vec<Rank> {
    hosts
        .members(host)
        .iter()
        .copied()
        .filter(|&r| !gone(r))
        .collect()
}

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
    fn broadcast_orphaned_exits(&mut self, now: Time, hosts: &Hosts) {
        let kept = self.health.stretch(self.config.timeout).saturating_mul(2);
        self.same_host
            .local
            .deferred_exits
            .retain(|d| now < d.at || now - d.at <= kept);
        if self
            .same_host
            .local
            .deferred_exits
            .iter()
            .all(|d| !self.is_gone(d.broadcaster))
        {
            return;
        }
        let next = hosts.leader(hosts.host_of(self.me), |r| self.is_gone(r));
        let mut deferred = std::mem::take(&mut self.same_host.local.deferred_exits);
        let mut orphans: Vec<DeferredExit> = Vec::new();
        deferred.retain_mut(|d| {
            if !self.is_gone(d.broadcaster) {
                return true;
            }
            match next {
                Some(b) if b != self.me => {
                    d.broadcaster = b;
                    true
                }
                _ => {
                    orphans.push(d.clone());
                    false
                }
            }
        });
        self.same_host.local.deferred_exits = deferred;
        if orphans.is_empty() || self.participation != Participation::Active {
            return;
        }
        let mut ranks: Vec<Rank> = orphans.iter().map(|d| d.rank).collect();
        ranks.sort_unstable();
        ranks.dedup();
        let skip: Vec<Rank> = orphans[0]
            .seen_by
            .iter()
            .copied()
            .filter(|r| orphans.iter().all(|d| d.seen_by.contains(r)))
            .collect();
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
        self.out.push_back(Output::PostOnBoard {
            failed: failed.into(),
            detector,
        });
        true
    }

    /// Failures read from the host's board: learned like a notice's, and
    /// forwarded in one notice to the overlay links that do not read the
    /// board (other hosts), never posted again.
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
        self.fan_out(Kind::Notice, m, detector, &[detector], true);
        self.after_gone_changed(now);
    }

    // ----- the local counter -----

    /// The driver's reading of the local emitter's counter (`None`: never
    /// written). A newer wake-up is a beat; a gap between two that exceeds
    /// a check interval plus the slow-emitter threshold raises
    /// `SlowEmitter` (the emitter bumps at every wake-up, at least every
    /// check interval).
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
        let next = self.next_check(
            now,
            self.same_host.local_since() + self.same_host.local_limit(&self.config, &self.health),
        );
        self.timers.set(Timer::LocalCheck, next);
    }

    /// A check of the local emitter: declared when its counter stood still
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
            // checking, and keep waking, every check interval meanwhile.
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
        if self.same_host.local.seen_at.is_some()
            && self.same_host.local.digest != self.my_digest32()
        {
            match self.same_host.local.mismatch_since {
                None => self.same_host.local.mismatch_since = Some(now),
                Some(since) => {
                    if now - since >= self.config.sync_after()
                        && now >= self.same_host.local.sync_not_before
                    {
                        self.same_host.local.sync_not_before = now + self.config.timeout;
                        self.send_sync_request(emitter);
                    }
                }
            }
        } else {
            self.same_host.local.mismatch_since = None;
        }
        self.schedule_local_check(now);
    }

    /// This rank woke late: its local emitter gets a full timeout from now.
    pub(super) fn local_self_lag(&mut self, now: Time) {
        self.same_host.restart_local_baseline(now);
        self.same_host.local.mismatch_since = None;
    }

    /// The local ring after the gone set grew: watch the nearest live
    /// same-host predecessor; take over the fabric watch on becoming the
    /// host's leader.
    pub(super) fn after_gone_changed_local(&mut self, now: Time) {
        let Some(hosts) = self.same_host.hosts.clone() else {
            return;
        };
        self.broadcast_orphaned_exits(now, &hosts);
        let emitter = hosts.local_emitter(self.me, |r| self.is_gone(r));
        if emitter != self.same_host.local.emitter {
            self.same_host.local.emitter = emitter;
            self.same_host.local.seen_at = None;
            self.same_host.local.thread = EmitterThread::Unknown;
            self.same_host.local.baseline = now;
            self.same_host.local.fresh_only = true;
            self.same_host.local.mismatch_since = None;
            self.same_host.local.slow_warned_at = None;
            self.schedule_local_check(now);
        }
        let leads = hosts.is_leader(self.me, |r| self.is_gone(r));
        if leads && !self.same_host.leading {
            self.stats.hosts.leader_takeovers += 1;
        }
        self.same_host.leading = leads;
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

    /// Every declaration of node-local watching that rests on silence
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
