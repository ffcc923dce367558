//! Primary partition: a declaration from silence is an *accusation* that a
//! majority of the live view must confirm before anyone raises `Failed`
//! (`FFD_QUORUM=majority`, `docs/design.md` §4.11 "Primary partition").
//!
//! Owns: the [`Quorum`] sub-state machine, which holds all of this rank's
//! quorum state (this rank's own accusations in `accusation`, its ballots
//! in the accusations of others in `ballot`, the round nonces, and the
//! lateness of its own wake-ups that decides whether a confirmed
//! accusation is held). Its methods take `now` and a [`Cx`], what they read
//! of the rest of the Engine (the ring, the overlay, the host groups, the
//! failed and left sets, the own health, how late this wake-up is), and
//! push the [`Act`]s the Engine carries out: sends, fan-outs,
//! declarations, withdrawals to tell the watchers, a self-exclusion, a
//! re-arm of the quorum timer. The Engine's part, here too, is the glue:
//! [`Engine::on_silence`], the one door every declaration from silence
//! goes through (timeouts, refusal runs, silent probes, the same-host
//! watcher's silences; not a same-host emitter the kernel shows stopped,
//! declared at once), [`Engine::accuse_host`] for a host found silent
//! whole (one accusation, flag `SUSPECT_HOST`, refuted by any rank of that
//! host, declared in one notice), the dispatch of `Suspect`, `Vote`,
//! `Refute` and `Outcome`, the quorum timer, and carrying out the acts.
//! Must not: declare except through `membership::declare` (an
//! [`Act::Declare`]), decide what is proof (the driver classifies), or
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

mod accusation;
mod ballot;

use std::sync::Arc;
use std::time::Duration;

use super::io::Event;
use super::trust::{LinkKey, link_key};
use super::{
    Cause, Confirmation, Engine, Exclusion, FabricSaid, FailureDetail, Participation, Stats, Timer,
};
use crate::config::{EngineConfig, QuorumMode, Rank, Time};
use crate::hosts::Hosts;
use crate::overlay::{Links, MAX_LINKS, Overlay, levels};
use crate::ranks::RankSet;
use crate::ring::Ring;
use crate::wire::{Encoder, Kind, Message, ProbeVerdict, SUSPECT_HOST};

use accusation::Accusation;
pub use accusation::AccusationNote;
use ballot::Ballot;

/// Ballots (accusations of others) a rank takes part in at once. A
/// partition of a large job can put many accusations under way together;
/// a new ballot takes the place of a spent one ([`Ballot::spend`]), and
/// beyond this a rank neither forwards nor votes (counted,
/// `QuorumStats::ballots_refused`), which can only cost a quorum, never make one.
pub(super) const MAX_BALLOTS: usize = 256;

/// One rank's quorum sub-state machine.
#[derive(Clone, Debug, Default)]
pub(super) struct Quorum {
    /// The last nonce handed out: of accusation rounds and their probes,
    /// and of the Engine's other probes (`Quorum::next_nonce`), one
    /// sequence.
    nonce: u32,
    /// The last wake-up later than `strain_lateness`: a confirmed
    /// accusation begun before it is held (`Quorum::check`).
    late_at: Option<Time>,
    /// The lateness of the latest wake-up, and the largest since this
    /// rank's latest accusation began (diagnostics only).
    last_lateness: Duration,
    lateness_since_accusation: Duration,
    /// The latest accusation this rank confirmed, until the driver takes it.
    note: Option<AccusationNote>,
    /// Accusations and ballots, made at their first use.
    open: Option<Box<Open>>,
}

/// The accusations and ballots under way.
#[derive(Clone, Debug, Default)]
struct Open {
    accusations: Vec<Accusation>,
    ballots: Vec<Ballot>,
    /// Another rank's accusation reached this one lately (until then): a
    /// partition or a multi-rank silence is under way.
    others_until: Time,
}

/// What the quorum reads of the rest of the Engine for one call, and the
/// acts it asks of it.
pub(super) struct Cx<'a> {
    me: Rank,
    /// `me`'s position on the ring.
    my_pos: u32,
    ring: &'a Ring,
    overlay: &'a Overlay,
    hosts: Option<&'a Hosts>,
    failed: &'a RankSet,
    left: &'a RankSet,
    config: &'a EngineConfig,
    encoder: &'a Encoder,
    stats: &'a mut Stats,
    /// The own health multiplier.
    health: u32,
    /// How late this wake-up came: how long the earliest timer is overdue
    /// (messages are handled before the timers that tell).
    overdue: Duration,
    /// What the Engine is to do, in order.
    acts: Vec<Act>,
}

/// One thing the quorum asks of the Engine; carried out in order, after
/// the call that asked for it.
#[derive(Debug)]
pub(super) enum Act {
    Send {
        to: Rank,
        kind: Kind,
        bytes: Vec<u8>,
    },
    SendShared {
        to: Rank,
        kind: Kind,
        bytes: Arc<[u8]>,
    },
    /// A broadcast step rooted at `root`, skipping `skip`.
    FanOut {
        kind: Kind,
        bytes: Arc<[u8]>,
        root: Rank,
        skip: Option<Rank>,
    },
    /// A confirmed accusation: declare `suspect` (or, for a host, the
    /// members not gone by then, with a `HostFailed` event).
    Declare {
        suspect: Rank,
        host: Option<(u32, Vec<Rank>)>,
        cause: Cause,
        detail: FailureDetail,
    },
    /// The accusation of `suspect` was withdrawn: if it is this rank's
    /// fabric or same-host emitter, that watch starts a fresh timeout.
    Withdrawn(Rank),
    /// No quorum: this rank excludes itself (`by`: the accuser).
    GiveUp(Rank),
    /// Set the quorum timer to the earliest thing due.
    Rearm,
}

/// `a` is a later round than `b` (nonces count up, wrapping).
fn newer(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

impl Quorum {
    /// The next nonce of the one sequence.
    pub(super) fn next_nonce(&mut self) -> u32 {
        self.nonce = self.nonce.wrapping_add(1);
        self.nonce
    }

    /// A wake-up `lateness` late at `now`: remembered for the hold of
    /// confirmations and for the diagnostics.
    pub(super) fn note_wakeup(&mut self, now: Time, lateness: Duration, strain: Duration) {
        self.last_lateness = lateness;
        if lateness > strain {
            self.late_at = Some(now);
        }
        self.lateness_since_accusation = self.lateness_since_accusation.max(lateness);
    }

    /// What [`Quorum::note_wakeup`] reads and writes, read only (the
    /// simulator warms the next event's Engine with it: `Engine::timer_lines`).
    #[cfg(feature = "sim")]
    pub(super) fn wakeup_lines(&self) -> (Option<Time>, Duration) {
        (self.late_at, self.lateness_since_accusation)
    }

    /// The diagnostics of the latest accusation confirmed, once.
    pub(super) fn take_note(&mut self) -> Option<AccusationNote> {
        self.note.take()
    }

    /// Whether other ranks' accusations are under way here (a partition
    /// or a multi-rank silence).
    pub(super) fn others_around(&self, now: Time) -> bool {
        self.open.as_ref().is_some_and(|q| q.others_until > now)
    }

    /// Drops every accusation and ballot (this rank stops participating).
    pub(super) fn close(&mut self) {
        self.open = None;
    }

    fn open(&mut self) -> &mut Open {
        self.open.get_or_insert_with(Box::default)
    }

    /// What the model checker's fingerprint tells states apart by: the
    /// nonce, the accusations and ballots, the last strained wake-up (not
    /// the diagnostics, which no decision reads).
    #[cfg(feature = "model")]
    pub(super) fn model_state(&self) -> impl std::fmt::Debug + '_ {
        (self.nonce, &self.open, self.late_at)
    }

    /// The children this rank counts, as (accuser, round nonce, child):
    /// the votes recorded in the current round of each of `me`'s
    /// accusations and in each of its open ballots (feature `model`; see
    /// [`Engine::model_flood_children`]).
    #[cfg(feature = "model")]
    pub(super) fn model_flood_children(&self, me: Rank) -> Vec<(Rank, u32, Rank)> {
        let Some(q) = &self.open else {
            return Vec::new();
        };
        let mine = q
            .accusations
            .iter()
            .flat_map(|a| a.tree.child_ranks().map(move |c| (me, a.nonce, c)));
        let ballots = q
            .ballots
            .iter()
            .filter(|b| !b.closed)
            .flat_map(|b| b.tree.child_ranks().map(move |c| (b.accuser, b.nonce, c)));
        mine.chain(ballots).collect()
    }
}

impl Cx<'_> {
    fn is_gone(&self, rank: Rank) -> bool {
        self.failed.contains(rank) || self.left.contains(rank)
    }

    fn send(&mut self, to: Rank, kind: Kind, bytes: Vec<u8>) {
        self.acts.push(Act::Send { to, kind, bytes });
    }

    fn fan_out(&mut self, kind: Kind, bytes: Arc<[u8]>, root: Rank, skip: Option<Rank>) {
        self.acts.push(Act::FanOut {
            kind,
            bytes,
            root,
            skip,
        });
    }

    /// Live ranks of this rank's view: N − failed − left.
    fn live_view(&self) -> u32 {
        self.ring.len() - (self.failed.len() + self.left.len()) as u32
    }

    /// Every live rank of the view shares this rank's host. Shared memory
    /// cannot be cut, so no silence among them is a partition: a quorum
    /// that does not come is late votes, never the evidence of a minority
    /// that a self-exclusion needs (`docs/design.md` §4.11 "Primary partition").
    fn view_on_my_host(&self) -> bool {
        let Some(h) = self.hosts else {
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
            .unwrap_or(super::NO_RANK)
    }

    /// The overlay slots of the ranks this rank forwards a flood rooted at
    /// `root` to, less `skip`, the suspect and ranks known gone.
    fn flood_mask(&self, root: Rank, skip: Rank, suspect: Rank, host: bool) -> u64 {
        let host_of_suspect = match (self.hosts, host) {
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
            if let (Some(h), Some(hosts)) = (host_of_suspect, self.hosts) {
                if hosts.host_of(r) == h {
                    continue;
                }
            }
            if let LinkKey::Overlay(k) = link_key(self.ring, self.my_pos, r) {
                mask |= 1 << k;
            }
        }
        mask
    }

    /// The overlay slot of `peer`, as a bit, if it is an overlay neighbour.
    fn slot_bit(&self, peer: Rank) -> u64 {
        match link_key(self.ring, self.my_pos, peer) {
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
                self.acts.push(Act::SendShared {
                    to: r,
                    kind,
                    bytes: bytes.clone(),
                });
            }
        }
    }
}

// The Engine's glue: what enters the quorum, and carrying out its acts.
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
            QuorumMode::Majority => {
                if self.quorum.accusing(rank) {
                    return;
                }
                self.begin_accusation(now, rank, None, cause, said);
            }
        }
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
            || ranks
                .iter()
                .any(|&r| r == self.me || self.quorum.accusing(r))
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

    /// Begins an accusation of `suspect` (of a host, its leader), judged
    /// silent here since its slot's or counter's last change if it is one
    /// of this rank's emitters.
    fn begin_accusation(
        &mut self,
        now: Time,
        suspect: Rank,
        host: Option<(u32, Vec<Rank>)>,
        cause: Cause,
        said: FabricSaid,
    ) {
        let silent_since = if self.watch.emitter == Some(suspect) {
            self.watch.changed_at.min(now)
        } else {
            self.same_host.silent_since(suspect).unwrap_or(now).min(now)
        };
        self.quorum_call(now, |q, cx| {
            q.accuse(now, suspect, host, cause, said, silent_since, cx);
        });
    }

    /// Whether other ranks' accusations are under way here (a partition or
    /// a multi-rank silence): a freshly mended emitter then has
    /// [`first_beat_within`](crate::EngineConfig::first_beat_within) to
    /// write its first heartbeat.
    pub(super) fn silence_around(&self, now: Time) -> bool {
        self.config.quorum == QuorumMode::Majority && self.quorum.others_around(now)
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
                self.quorum_call(now, |q, cx| {
                    q.on_suspect(now, sender, (accuser, nonce, suspect, host), bytes, cx);
                });
            }
            Message::Vote {
                accuser,
                nonce,
                count,
                flags,
            } => self.quorum_call(now, |q, cx| {
                q.on_vote(now, sender, accuser, nonce, count, flags, cx);
            }),
            // Only the suspect refutes, whatever round it answers.
            Message::Refute { accuser, nonce: _ }
                if accuser == self.me && self.quorum.accusing(sender) =>
            {
                self.quorum_call(now, |q, cx| q.withdraw(sender, cx));
            }
            Message::Outcome {
                accuser,
                nonce,
                suspect,
                verdict,
                ..
            } => self.quorum_call(now, |q, cx| {
                q.on_outcome(sender, (accuser, nonce, suspect), verdict, bytes, cx);
            }),
            _ => {}
        }
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
        for emitter in [self.watch.emitter, self.same_host.local_emitter()]
            .into_iter()
            .flatten()
        {
            if self.quorum.accusing(emitter) {
                self.stats.quorum.withdrawn_on_self_lag += 1;
                self.quorum_call(now, |q, cx| q.withdraw(emitter, cx));
            }
        }
    }

    /// The emitter's slot moved: an accusation of it is withdrawn.
    pub(super) fn quorum_emitter_alive(&mut self, now: Time, emitter: Rank) {
        if self.quorum.accusing(emitter) {
            self.quorum_call(now, |q, cx| q.withdraw(emitter, cx));
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
        if !self.quorum.probed(about, nonce) {
            return false;
        }
        if sender == about && verdict == ProbeVerdict::Alive {
            self.quorum_call(now, |q, cx| q.withdraw(about, cx));
        }
        true
    }

    /// The quorum timer fired: new rounds, give-ups, partial votes,
    /// expired ballots. `lagging`: this thread woke late (it may have
    /// missed votes), so no accusation gives up on this wake-up.
    pub(super) fn quorum_tick(&mut self, now: Time, lagging: bool) {
        if self.participation != Participation::Active {
            self.quorum.close();
            return;
        }
        self.quorum_call(now, |q, cx| q.tick(now, lagging, cx));
    }

    /// The failed or left set grew: accusations and ballots about gone
    /// ranks (or by gone accusers) end, neighbours gone owe no answer, and
    /// a smaller view may now hold a quorum.
    pub(super) fn quorum_on_gone(&mut self, now: Time) {
        self.quorum_call(now, |q, cx| q.on_gone(now, cx));
    }

    /// Calls `f` on the quorum with what it reads of the Engine, then
    /// carries out the acts it asked for, in order.
    fn quorum_call(&mut self, now: Time, f: impl FnOnce(&mut Quorum, &mut Cx<'_>)) {
        let mut cx = Cx {
            me: self.me,
            my_pos: self.my_pos,
            ring: &self.ring,
            overlay: &self.broadcast.overlay,
            hosts: self.same_host.hosts(),
            failed: &self.failed,
            left: &self.left,
            config: &self.config,
            encoder: &self.encoder,
            stats: &mut self.stats,
            health: self.health.multiplier(),
            overdue: now.saturating_since(self.timers.next()),
            acts: Vec::new(),
        };
        f(&mut self.quorum, &mut cx);
        let acts = cx.acts;
        for act in acts {
            self.carry_out(now, act);
        }
    }

    fn carry_out(&mut self, now: Time, act: Act) {
        match act {
            Act::Send { to, kind, bytes } => self.send(to, kind, bytes),
            Act::SendShared { to, kind, bytes } => self.send_shared(to, kind, bytes),
            Act::FanOut {
                kind,
                bytes,
                root,
                skip,
            } => self.fan_out(kind, bytes, root, skip.as_slice(), false),
            Act::Declare {
                suspect,
                host,
                cause,
                detail,
            } => match host {
                None => self.declare(now, suspect, cause, detail),
                Some((host, members)) => {
                    let ranks: Vec<Rank> =
                        members.into_iter().filter(|&r| !self.is_gone(r)).collect();
                    self.declare_now(now, &ranks, cause, detail, Some(&[]));
                    self.stats.hosts.hosts_declared += 1;
                    self.push_event(Event::HostFailed { host, ranks });
                }
            },
            Act::Withdrawn(suspect) => {
                if self.watch.emitter == Some(suspect) {
                    self.watch.changed_at = now;
                    self.watch.still_seen_at = None;
                    let m = self
                        .encoder
                        .observe_me(self.watch.generation, self.watch.slot);
                    self.send(suspect, Kind::ObserveMe, m);
                    self.schedule_check(now);
                }
                if self.same_host.local_emitter() == Some(suspect) {
                    // The same-host emitter answered: a fresh timeout from now, until
                    // a wake-up of its own since shows in its counter.
                    self.same_host.restart_local_baseline(now);
                    self.schedule_local_check(now);
                }
            }
            Act::GiveUp(by) => {
                self.stats.quorum.no_quorum_exclusions += 1;
                self.self_exclude(by, Exclusion::NoQuorum);
            }
            Act::Rearm => {
                let next = self.quorum.rearm(now, now + self.config.check_interval());
                if next == Time::NEVER {
                    self.timers.stop(Timer::Quorum);
                } else {
                    self.timers.set(Timer::Quorum, next);
                }
            }
        }
    }
}

/// The confirmation of an accusation by `votes` of a live view of `live`.
fn confirmation(votes: u32, live: u32) -> Confirmation {
    Confirmation {
        votes,
        live,
        tiebreak: 2 * u64::from(votes) == u64::from(live),
    }
}
