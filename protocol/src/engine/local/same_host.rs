//! Same-host watching's own state ([`SameHost`]) and what it decides by
//! itself: the same-host emitter's counter (its readings, its limit, its
//! baseline), the board readers, leadership, the emitter candidate and
//! the order of observers on a ring of hosts. Its methods take what they
//! read of the Engine (this rank, the ring, a gone test, the config, the
//! own health) as arguments; the Engine's glue, which declares, sends
//! and sets timers, is in `local/mod.rs`.

use std::sync::Arc;
use std::time::Duration;

use crate::config::{EngineConfig, Rank, Time};
use crate::engine::health::Health;
use crate::engine::{EmitterThread, LocalBeat};
use crate::hosts::Hosts;
use crate::ring::Ring;

/// Same-host watching (host groups) as one sub-state machine: the host
/// groups, this rank's watch of its same-host emitter's counter, whether it
/// leads its host, the check of a silent leader's host, and the board
/// readers. Without host groups (`hosts` `None`, `FFD_LOCAL=off`) it holds
/// nothing the Engine reads: no same-host emitter, every rank leads.
#[derive(Clone, Debug)]
pub(in crate::engine) struct SameHost {
    /// Host groups (`None`: the per-process ring, `FFD_LOCAL=off`).
    pub(in crate::engine) hosts: Option<Arc<Hosts>>,
    /// The same-host emitter's counter.
    pub(in crate::engine) local: LocalWatch,
    /// Whether this rank led its host at the last change of the gone set.
    pub(in crate::engine) leading: bool,
    /// A silent leader's host being checked.
    pub(in crate::engine) check: Option<HostCheck>,
    /// The other ranks of this host that read its notice board
    /// ([`Input::BoardReaders`](crate::engine::Input)).
    pub(in crate::engine) board_readers: BoardReaders,
}

/// This rank's watch of its same-host emitter's counter.
#[derive(Clone, Debug, Default)]
pub(in crate::engine) struct LocalWatch {
    /// The nearest live same-host rank below this one (wrapping); `None`
    /// without host groups or when alone on the host.
    pub(in crate::engine) emitter: Option<Rank>,
    /// The newest wake-up of the emitter seen in its counter.
    pub(in crate::engine) seen_at: Option<Time>,
    /// The emitter is judged from `max(baseline, seen_at)`: the start-up
    /// grace (cleared by any wake-up read: the emitter is up), a local
    /// mending, a refuted accusation or a stall of this rank's own
    /// (`fresh_only`: cleared only by a wake-up at or after it, the
    /// emitter showed it is alive since).
    pub(in crate::engine) baseline: Time,
    pub(in crate::engine) fresh_only: bool,
    pub(in crate::engine) digest: u32,
    /// What the kernel said of the emitter's progress thread at the last
    /// reading (looked at only once its counter was a timeout old).
    pub(in crate::engine) thread: EmitterThread,
    pub(in crate::engine) mismatch_since: Option<Time>,
    pub(in crate::engine) sync_not_before: Time,
    pub(in crate::engine) slow_warned_at: Option<Time>,
    /// Same-host exits this rank declared and left to another rank of the
    /// host to broadcast ([`Engine::on_exited`](crate::Engine)).
    pub(in crate::engine) deferred_exits: Vec<DeferredExit>,
}

/// A same-host exit this rank declared without broadcasting it: the
/// host's lowest live rank then, `broadcaster`, does. Should that rank be
/// found gone (it may have died with the exit unsent: a host's processes
/// killed one after another), the lowest live rank then broadcasts it
/// ([`Engine::broadcast_orphaned_exits`](crate::Engine)).
#[derive(Clone, Debug)]
pub(in crate::engine) struct DeferredExit {
    pub(super) rank: Rank,
    /// When this rank saw it: kept two timeouts (its broadcaster, if hung
    /// before it sent it, is found within one), then dropped.
    pub(super) at: Time,
    pub(super) broadcaster: Rank,
    /// The ranks of the host that saw the exit themselves: no copy.
    pub(super) seen_by: Box<[Rank]>,
}

/// A silent leader's host being checked before anyone is declared.
#[derive(Clone, Copy, Debug)]
pub(in crate::engine) struct HostCheck {
    pub(super) host: u32,
    pub(super) leader: Rank,
    pub(super) nonce: u32,
    /// The watch's `changed_at` when the check began: a slot that moves
    /// meanwhile ends the check (the leader was slow).
    pub(super) changed_at: Time,
    /// The leader is already declared on proof (an in-band error): the
    /// check is about the rest of its host only.
    pub(super) after_proof: bool,
    /// The close watch's re-check of a mended emitter's host
    /// ([`HostWatch`](crate::engine::observation::HostWatch)), with no verdict
    /// before this instant (later than the window only without a quorum:
    /// see [`Engine::recheck_host`](crate::Engine)): `leader` is that
    /// emitter, and a beat seen or its link confirmed meanwhile ends the
    /// check with no verdict.
    pub(super) still_emitter: Option<Time>,
    /// A rank of the host answered a check of a silent leader (not after
    /// proof): only the leader can be declared, once its time is up.
    pub(super) answered: bool,
}

/// The other ranks of this host that read its notice board.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(in crate::engine) enum BoardReaders {
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
    /// the start-up grace, its same-host emitter's first baseline).
    pub(in crate::engine) fn new(hosts: Option<Arc<Hosts>>, me: Rank, grace_end: Time) -> SameHost {
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
    pub(in crate::engine) fn hosts(&self) -> Option<&Hosts> {
        self.hosts.as_deref()
    }

    /// The rank whose counter this rank watches in shared memory, if any.
    pub(in crate::engine) fn local_emitter(&self) -> Option<Rank> {
        self.local.emitter
    }

    /// Whether `me` leads its host (always, without host groups).
    pub(in crate::engine) fn is_leader(&self, me: Rank, gone: impl Fn(Rank) -> bool) -> bool {
        self.hosts.as_ref().is_none_or(|h| h.is_leader(me, gone))
    }

    /// Since when `rank` has been silent here if it is the same-host emitter:
    /// it is judged from max(baseline, seen_at).
    pub(in crate::engine) fn silent_since(&self, rank: Rank) -> Option<Time> {
        (self.local.emitter == Some(rank)).then(|| {
            self.local
                .seen_at
                .map_or(self.local.baseline, |t| t.max(self.local.baseline))
        })
    }

    /// What the model checker's fingerprint tells states apart by (all of
    /// it but the host groups, which every Engine of a job shares).
    #[cfg(feature = "model")]
    pub(in crate::engine) fn model_state(&self) -> String {
        format!(
            "{:?}|{}|{:?}|{:?}",
            self.local, self.leading, self.check, self.board_readers
        )
    }

    /// This rank woke late: its same-host emitter gets a full timeout from
    /// now, and a digest mismatch starts over.
    pub(super) fn self_lag(&mut self, now: Time) {
        self.restart_local_baseline(now);
        self.local.mismatch_since = None;
    }

    /// The same-host emitter's digest against this rank's (`digest`) at a
    /// check: true when it has differed for `sync_after` and a sync
    /// request is due (at most one per `timeout`).
    pub(super) fn sync_due(
        &mut self,
        now: Time,
        digest: u32,
        sync_after: Duration,
        timeout: Duration,
    ) -> bool {
        if self.local.seen_at.is_none() || self.local.digest == digest {
            self.local.mismatch_since = None;
            return false;
        }
        match self.local.mismatch_since {
            None => {
                self.local.mismatch_since = Some(now);
                false
            }
            Some(since) => {
                if now - since >= sync_after && now >= self.local.sync_not_before {
                    self.local.sync_not_before = now + timeout;
                    true
                } else {
                    false
                }
            }
        }
    }

    /// The gone set grew (`gone`): the same-host emitter becomes the nearest
    /// live same-host predecessor of `me` (a new one is judged from `now`,
    /// and only by a wake-up since), and leadership follows the host's
    /// lowest live rank. Returns (the same-host emitter changed, `me` leads,
    /// `me` took over the lead just now). Nothing without host groups.
    pub(super) fn on_gone(
        &mut self,
        now: Time,
        me: Rank,
        gone: impl Fn(Rank) -> bool + Copy,
    ) -> (bool, bool, bool) {
        let Some(hosts) = &self.hosts else {
            return (false, self.leading, false);
        };
        let emitter = hosts.local_emitter(me, gone);
        let changed = emitter != self.local.emitter;
        if changed {
            self.local.emitter = emitter;
            self.local.seen_at = None;
            self.local.thread = EmitterThread::Unknown;
            self.local.baseline = now;
            self.local.fresh_only = true;
            self.local.mismatch_since = None;
            self.local.slow_warned_at = None;
        }
        let leads = hosts.is_leader(me, gone);
        let took_over = leads && !self.leading;
        self.leading = leads;
        (changed, leads, took_over)
    }

    /// Exits this rank deferred to a broadcaster now `gone` ([`DeferredExit`];
    /// those older than `kept` are dropped first): each passes to the host's
    /// lowest live rank; returns, if that is `me` for any, the ranks to
    /// broadcast (ascending) and the ranks of the host that saw them all.
    pub(super) fn orphaned_exits(
        &mut self,
        now: Time,
        kept: Duration,
        me: Rank,
        gone: impl Fn(Rank) -> bool + Copy,
    ) -> Option<(Vec<Rank>, Vec<Rank>)> {
        let hosts = self.hosts.as_ref()?;
        self.local
            .deferred_exits
            .retain(|d| now < d.at || now - d.at <= kept);
        if self
            .local
            .deferred_exits
            .iter()
            .all(|d| !gone(d.broadcaster))
        {
            return None;
        }
        let next = hosts.leader(hosts.host_of(me), gone);
        let mut orphans: Vec<DeferredExit> = Vec::new();
        self.local.deferred_exits.retain_mut(|d| {
            if !gone(d.broadcaster) {
                return true;
            }
            match next {
                Some(b) if b != me => {
                    d.broadcaster = b;
                    true
                }
                _ => {
                    orphans.push(d.clone());
                    false
                }
            }
        });
        if orphans.is_empty() {
            return None;
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
        Some((ranks, skip))
    }

    /// This rank stops: no host check, no exits left to broadcast.
    pub(in crate::engine) fn close(&mut self) {
        self.check = None;
        self.local.deferred_exits = Vec::new();
    }

    /// The same-host emitter is judged from this instant.
    pub(super) fn local_since(&self) -> Time {
        self.local
            .baseline
            .max(self.local.seen_at.unwrap_or(Time::ZERO))
    }

    /// How long the same-host emitter's counter may stand still before it is
    /// declared: the timeout, stretched by the own health multiplier as
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
    pub(super) fn local_limit(&self, config: &EngineConfig, health: &Health) -> Duration {
        if self.local.thread == EmitterThread::Runnable {
            config.timeout.saturating_mul(config.health_max.max(1))
        } else {
            health.stretch(config.timeout)
        }
    }

    /// The same-host emitter is judged from `now` until a wake-up of its own
    /// since (unless the start-up grace, which any wake-up clears, lasts
    /// longer).
    pub(in crate::engine) fn restart_local_baseline(&mut self, now: Time) {
        if now >= self.local.baseline {
            self.local.baseline = now;
            self.local.fresh_only = true;
        }
    }

    /// The driver's reading of the same-host emitter's counter (`None`: never
    /// written). A newer wake-up is a beat; a gap between two that exceeds
    /// two local check intervals plus the slow-emitter threshold is returned, once
    /// per timeout, as the emitter and how long it stalled, for a
    /// `SlowEmitter` (the emitter bumps at every wake-up, at least every
    /// local check interval, `EngineConfig::local_check_interval`).
    pub(super) fn on_local_beat(
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
            // Two intervals: the emitter wakes and this rank reads once per
            // local check interval, on the same grid points of the host,
            // so with no stall at all a reading can come just before one
            // wake-up and the next just after the following one.
            let slow = config
                .local_check_interval()
                .saturating_mul(2)
                .saturating_add(config.slow_emitter_after());
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

    /// The driver's board readers of this host (`docs/design.md` §4.12 "Hosts"),
    /// for rank `me` of `n`.
    pub(in crate::engine) fn set_board_readers(&mut self, me: Rank, n: u32, ranks: &[Rank]) {
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
    pub(in crate::engine) fn reads_board(&self, me: Rank, r: Rank) -> bool {
        match (&self.board_readers, &self.hosts) {
            (BoardReaders::AllOfHost, Some(h)) => r != me && h.same_host(r, me),
            (BoardReaders::Some(v), _) => v.binary_search(&r).is_ok(),
            _ => false,
        }
    }

    /// The emitter `me` should observe over the fabric: its nearest
    /// live ring predecessor, or with host groups, as its host's leader,
    /// the leader of the nearest live host before its own.
    pub(in crate::engine) fn emitter_candidate(
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
    pub(in crate::engine) fn farther_observer(
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

    /// Whether `peer` is `me`'s same-host emitter or same-host observer (they may
    /// ask each other for their sets).
    pub(in crate::engine) fn is_local_neighbour(
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
pub(super) fn live_of_host(hosts: &Hosts, host: u32, gone: impl Fn(Rank) -> bool) -> Vec<Rank> {
    hosts
        .members(host)
        .iter()
        .copied()
        .filter(|&r| !gone(r))
        .collect()
}
