//! The failed and left sets: how a rank gets into them and what follows;
//! and the other news that travels the overlay, application payloads.
//!
//! Owns: declaring a failure, learning failures and leaves from others,
//! the reactions to a grown set (mend, stop beating a departed observer,
//! drop a departed suspect), this rank's own exclusion (fail-stop), the
//! exclusion replies to ranks we hold failed, and this rank's clean leave
//! (an exclusion or a leave also ends this rank's pending agreements);
//! the news itself: a received notice's forward-once, the batching of
//! leaves learned from others, and the re-broadcast of ranks learned by
//! sync (the fan-out is `broadcast`'s); the Engine's glue of
//! `Payloads` (`payloads` decides: duplicate, held, next, what a repair
//! sends; here the embedder's broadcasts, delivery, forward-once, the
//! counters); and the Engine's glue of `Views` (`views` decides which
//! agreement messages are kept, when a decision is raised, when to join a
//! view change; here the sends, the ranks a decision names learned, the
//! `ViewChange`, `Agreed` and `AgreeAborted` events). Must not: remove a rank from either set (reports are final), or decide
//! *whether* a rank failed (observation does that, then calls `declare`).

use std::collections::VecDeque;
use std::sync::Arc;

use super::broadcast::{Covered, Fanout};
use super::payloads::Arrival;
use super::views::{Views, ViewsAct, ViewsCtx};
use super::{
    AgreeAbort, Cause, Engine, Event, Exclusion, FailureDetail, HandleError, HeartbeatMode,
    NO_RANK, Participation, Timer, TimerTable, View, push_lean,
};
use crate::agreement::{AgreementMessage, Out};
use crate::config::{Rank, Time};
use crate::ranks::RankList;
use crate::wire::{self, AgreeDown, AgreeUp, AgreementId, Kind, Marks, Notice};

/// The ranks of `list` (ascending) that are neither `me` nor in the sorted
/// sets `a` and `b`: binary searches for short lists, one merge walk for
/// long ones (batched leaves).
fn unknown_ranks(list: RankList<'_>, me: Rank, a: &[Rank], b: &[Rank]) -> Vec<Rank> {
    let k = list.len() as usize;
    if k * 16 < a.len() + b.len() {
        return list
            .iter()
            .filter(|r| *r != me && a.binary_search(r).is_err() && b.binary_search(r).is_err())
            .collect();
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    for r in list.iter() {
        while i < a.len() && a[i] < r {
            i += 1;
        }
        while j < b.len() && b[j] < r {
            j += 1;
        }
        if r != me && a.get(i) != Some(&r) && b.get(j) != Some(&r) {
            out.push(r);
        }
    }
    out
}

impl Engine {
    /// This rank declares `rank` failed: report (with the evidence,
    /// `detail`), tell `rank` itself (if it is only stopped or cut off, it
    /// learns it is out as soon as it runs again), broadcast, mend: the
    /// one-rank [`Engine::declare_now`]. From silence, callers go through
    /// `quorum::on_silence`, never here.
    pub(super) fn declare(&mut self, now: Time, rank: Rank, cause: Cause, detail: FailureDetail) {
        self.declare_now(now, &[rank], cause, detail, Some(&[]));
    }

    /// Declares `ranks` (ascending) failed together: report each with
    /// `detail`, tell each (if it is only stopped or cut off, it learns it is
    /// out as soon as it runs again; not after an exit), broadcast one
    /// notice naming all of them over the overlay unless `broadcast` is
    /// `None`, skipping the ranks it holds (a same-host exit is broadcast
    /// by one rank of the host only, and not to the ranks of the host that
    /// see it themselves), mend. Ranks already gone,
    /// and this rank, are skipped. Same-host watching's exits and whole
    /// hosts (`local`); from silence only through
    /// [`Engine::declare_silent`], or as a same-host emitter the kernel shows
    /// stopped ([`FailureDetail::Stopped`]).
    pub(super) fn declare_now(
        &mut self,
        now: Time,
        ranks: &[Rank],
        cause: Cause,
        detail: FailureDetail,
        broadcast: Option<&[Rank]>,
    ) {
        if self.participation != Participation::Active {
            return;
        }
        let new: Vec<Rank> = ranks
            .iter()
            .copied()
            .filter(|&r| r != self.me && !self.is_gone(r))
            .collect();
        if new.is_empty() {
            return;
        }
        self.failed.insert_sorted(&new);
        for &rank in &new {
            self.stats.notices.detections[cause as usize] += 1;
            self.push_event(Event::Failed {
                rank,
                detector: self.me,
                cause,
                hops: 0,
                detail,
            });
        }
        let m: Arc<[u8]> = self.encoder.notice(self.me, 0, &new, &[]).into();
        if let Some(skip) = broadcast {
            // The declared ranks are skipped as failed when their turn
            // comes (`poll_fanout`). An exit is seen by the host itself.
            let board = cause != Cause::Exited && self.post_on_board(&new, self.me);
            self.fan_out(Kind::Notice, m.clone(), self.me, skip, board);
        }
        // Each declared rank is told too, after the survivors' copies
        // (`Fanout::exclusions`). An exited process is not there to tell.
        if cause != Cause::Exited {
            push_lean(&mut self.fanouts, Fanout::exclusions(m, &new));
        }
        self.after_gone_changed(now);
    }

    /// Adds the listed ranks; returns the ones that were new. (Lists are
    /// ascending, so the new ones merge into the sets in one pass.)
    pub(super) fn learn(
        &mut self,
        failed: RankList<'_>,
        left: RankList<'_>,
        detector: Rank,
        hops: u16,
    ) -> (Vec<Rank>, Vec<Rank>) {
        // Most notices at large N are copies of news already here: nothing
        // new, and nothing to merge (the sets' merges are no-ops then).
        let new_failed = unknown_ranks(
            failed,
            self.me,
            self.failed.as_slice(),
            self.left.as_slice(),
        );
        if !new_failed.is_empty() {
            self.learned_failed(&new_failed, detector, hops);
        }
        if left.is_empty() {
            return (new_failed, Vec::new());
        }
        let new_left = unknown_ranks(left, self.me, self.failed.as_slice(), self.left.as_slice());
        self.left.insert_sorted(&new_left);
        for &rank in &new_left {
            self.stats.notices.departures_learned += 1;
            self.push_event(Event::Left { rank });
        }
        (new_failed, new_left)
    }

    /// Adds `new` (ascending, none of them known gone) to the failed set,
    /// learned from `detector`'s news `hops` away, and reports each.
    pub(super) fn learned_failed(&mut self, new: &[Rank], detector: Rank, hops: u16) {
        self.failed.insert_sorted(new);
        for &rank in new {
            self.stats.notices.detections[Cause::Notice as usize] += 1;
            self.push_event(Event::Failed {
                rank,
                detector,
                cause: Cause::Notice,
                hops,
                detail: FailureDetail::Learned,
            });
        }
    }

    /// Reacts to a grown failed/left set: mend if the emitter is gone, stop
    /// heartbeats to a departed observer (its own observer will mend to us),
    /// drop a departed suspect, end accusations and ballots about departed
    /// ranks, announce the new digest.
    pub(super) fn after_gone_changed(&mut self, now: Time) {
        if self.beat.mode == HeartbeatMode::Modelled
            && self.participation != Participation::Excluded
        {
            self.stream_dirty = true;
        }
        if let Some(o) = self.beat.observer {
            if self.is_gone(o) {
                self.beat.observer = None;
                self.pending_write = None;
            }
        }
        if let Some(s) = self.watch.suspect {
            if self.is_gone(s.rank) {
                self.watch.suspect = None;
                self.timers.stop(Timer::Suspect);
            }
        }
        if let Some(e) = self.watch.emitter {
            if self.is_gone(e) {
                self.mend(now);
            }
        }
        self.after_gone_changed_local(now);
        self.quorum_on_gone(now);
        self.views_on_gone(now);
    }

    /// This rank stops participating (`why`; `by` told it, or made the
    /// accusation that found no quorum): fail-stop.
    pub(super) fn self_exclude(&mut self, by: Rank, why: Exclusion) {
        if self.participation == Participation::Excluded {
            return;
        }
        self.participation = Participation::Excluded;
        self.timers = TimerTable::NONE;
        self.quorum.close();
        self.watch.host_watch = None;
        self.same_host.close();
        self.fanouts.clear();
        self.broadcast.held = VecDeque::new();
        self.pending_write = None;
        self.watch.suspect = None;
        self.beat.observer = None;
        self.stream_dirty = self.beat.mode == HeartbeatMode::Modelled;
        // Pending agreements end first, so SelfExcluded is the Engine's
        // last output.
        self.abort_agreements(AgreeAbort::Excluded);
        self.push_event(Event::SelfExcluded { by, why });
    }

    /// Answers a message from a rank in the failed set with a notice naming
    /// it: at most once per timeout per rank, with a bounded memory of the
    /// ranks answered (`Limits::reply_exclusion`); the others are counted.
    pub(super) fn reply_exclusion(&mut self, now: Time, to: Rank) {
        if !self.limits.reply_exclusion(to, now, self.config.timeout) {
            self.stats.notices.exclusion_replies_suppressed += 1;
            return;
        }
        self.stats.notices.exclusions_sent += 1;
        let m = self.encoder.notice(self.me, 0, &[to], &[]);
        self.send(to, Kind::Notice, m);
    }

    /// Clean leave: a `Leave` notice straight to both ring neighbours (they
    /// are the ones who must mend) and over the overlay. From now on this
    /// rank declares nobody but keeps heartbeating, forwarding and
    /// answering until the driver stops it.
    pub(super) fn on_leave(&mut self) -> Result<(), HandleError> {
        if self.participation != Participation::Active {
            return Err(HandleError::NotActive);
        }
        self.participation = Participation::Left;
        self.same_host.local.deferred_exits = Vec::new();
        self.abort_agreements(AgreeAbort::Left);
        self.timers.stop(Timer::Check);
        self.timers.stop(Timer::Suspect);
        self.watch.suspect = None;
        let m: Arc<[u8]> = self.encoder.notice(self.me, 0, &[], &[self.me]).into();
        let neighbours = [
            self.beat.observer.unwrap_or(NO_RANK),
            self.watch.emitter.unwrap_or(NO_RANK),
        ];
        let mut sent = NO_RANK;
        for n in neighbours {
            if n != NO_RANK && n != sent && !self.is_gone(n) {
                sent = n;
                self.send_shared(n, Kind::Notice, m.clone());
            }
        }
        self.fan_out(Kind::Notice, m, self.me, &neighbours, false);
        Ok(())
    }

    // ----- notices: forward-once, leave batches, news learned by sync -----

    /// A notice (already trusted by `on_message`): learn what is new.
    /// Nothing new: a duplicate, counted and dropped (the common case at
    /// large N). New failures travel on at once, as received
    /// (forward-once, `bytes` re-sent with this rank as sender, each copy
    /// sealed anew); news of leaves only waits for the next leave batch.
    pub(super) fn on_notice(&mut self, now: Time, sender: Rank, n: Notice<'_>, bytes: &[u8]) {
        let (nf, nl) = self.learn(n.failed, n.left, n.origin, n.hops.saturating_add(1));
        if nf.is_empty() && nl.is_empty() {
            self.stats.messages.duplicate_notices += 1;
            return;
        }
        if !nf.is_empty() {
            // Failures travel at once, as received (forward-once); the
            // host's board readers learn them from the board.
            let board = self.post_on_board(&nf, n.origin);
            if let Some(fwd) = wire::forwarded(bytes, self.me) {
                self.stats.notices.notices_forwarded += 1;
                self.forward_failures(now, fwd.into(), n.origin, sender, board);
            }
        } else {
            self.batch_leaves(now, &nl);
        }
        self.after_gone_changed(now);
    }

    /// Forwards failures learned from `sender`'s copy of a notice `origin`
    /// broadcast: a broadcast step rooted at `origin`, less `sender`,
    /// `origin` itself and (if `board`) the host's board readers, whose
    /// copies to `origin`'s own overlay links are held for a period
    /// ([`EngineConfig::board_forward_delay`]) and the rest sent at once.
    ///
    /// Why: the origin sent the notice to every one of its links as it
    /// declared, so every other forwarder's copy to them only wakes a rank
    /// that knows; at `ffd run -n 16 --netns 4` those copies, about half of
    /// a kill's, took the CPUs the news still travelled on (every survivor
    /// knew in a median of 13.5 ms with them, 9.9 without, 16 interleaved
    /// pairs). The ranks outside the origin's links get theirs at once, so
    /// a broadcast takes the hops it took; the held copies still go, so a
    /// link the origin did not reach (it died mid-fan-out) learns a period
    /// later, not never.
    ///
    /// [`EngineConfig::board_forward_delay`]: crate::config::EngineConfig::board_forward_delay
    pub(super) fn forward_failures(
        &mut self,
        now: Time,
        bytes: Arc<[u8]>,
        origin: Rank,
        sender: Rank,
        board: bool,
    ) {
        let Some(mut step) =
            self.broadcast_step(Kind::Notice, bytes, origin, &[sender, origin], board)
        else {
            return;
        };
        if origin != self.me && origin < self.ring.len() {
            // Once per forward, not per target: every rank of a simulated
            // million forwards each failure.
            let (links, len) = self.broadcast.links_of(&self.ring, origin);
            let ring = &self.ring;
            if let Some(held) = step.split_off(|r| links[..len].contains(&ring.position_of(r))) {
                self.hold_copies(now, Covered::ByOrigin, held);
            }
        }
        if !step.is_done() {
            push_lean(&mut self.fanouts, step);
        }
    }

    /// Queues leaves learned from others for the next batch.
    pub(super) fn batch_leaves(&mut self, now: Time, left: &[Rank]) {
        if left.is_empty() {
            return;
        }
        self.broadcast.batch_leaves(left);
        if self.timers.get(Timer::LeaveBatch) == Time::NEVER {
            self.timers
                .set(Timer::LeaveBatch, now + self.config.leave_batch());
        }
    }

    /// Forwards the leaves learned since the last batch as one notice
    /// rooted here.
    pub(super) fn forward_leaves(&mut self) {
        if self.participation == Participation::Excluded {
            return;
        }
        let Some(left) = self.broadcast.take_leaves() else {
            return;
        };
        self.stats.notices.notices_forwarded += 1;
        let m: Arc<[u8]> = self.encoder.notice(self.me, 0, &[], &left).into();
        self.fan_out(Kind::Notice, m, self.me, &[], false);
    }

    /// Ranks learned from a sync exchange are new to this part of the
    /// overlay too: broadcast them as a notice originated here.
    pub(super) fn rebroadcast_learned(&mut self, failed: &[Rank], left: &[Rank], peer: Rank) {
        if failed.is_empty() && left.is_empty() {
            return;
        }
        self.stats.sync.ranks_learned_by_sync += (failed.len() + left.len()) as u64;
        let m: Arc<[u8]> = self.encoder.notice(self.me, 0, failed, left).into();
        self.fan_out(Kind::Notice, m, self.me, &[peer], false);
    }

    // ----- payloads: the Engine's glue of `Payloads` (`payloads`) -----

    /// The embedder broadcasts `payload`: numbered after this rank's previous
    /// one, delivered here at once (unless `deliver_own` is off), kept for
    /// repair and sent over the overlay.
    pub(super) fn on_broadcast(&mut self, payload: &[u8]) -> Result<(), HandleError> {
        if self.participation != Participation::Active {
            return Err(HandleError::NotActive);
        }
        if payload.len() > self.config.max_payload {
            return Err(HandleError::PayloadTooLarge {
                len: payload.len(),
                max: self.config.max_payload,
            });
        }
        let seq = self.payloads.mark(self.me) + 1;
        let m: Arc<[u8]> = self.encoder.payload(self.me, seq, 0, payload).into();
        self.deliver_payload(self.me, seq, NO_RANK, m);
        Ok(())
    }

    /// A payload (already trusted by `on_message`: its sender is a live
    /// job member; `bytes` is the whole message, for forwarding). Whatever
    /// this rank knows of the origin, the payload is delivered and
    /// forwarded once, in the origin's order: the next one at once (then
    /// any held ones it unblocks), a later one held (bounded; beyond the
    /// bound dropped and counted, the sync repair brings it again), an
    /// earlier one dropped as a duplicate.
    pub(super) fn on_payload(&mut self, sender: Rank, origin: Rank, seq: u64, bytes: &[u8]) {
        let hold_cap = self.config.payload_hold;
        let arrival = self
            .payloads
            .receive(self.me, sender, (origin, seq), bytes, hold_cap);
        let forward = match arrival {
            Arrival::Duplicate => {
                self.stats.payloads.payload_duplicates += 1;
                return;
            }
            Arrival::NotOurs => {
                self.stats.drops.dropped_untrusted_origin += 1;
                return;
            }
            Arrival::Later { held, overflow } => {
                if overflow {
                    self.stats.payloads.payloads_hold_overflow += 1;
                }
                if held {
                    self.stats.payloads.payloads_held += 1;
                }
                return;
            }
            Arrival::Unforwardable => return,
            Arrival::Next(forward) => forward,
        };
        self.deliver_payload(origin, seq, sender, forward);
        // Held payloads the new mark unblocks.
        while let Some((seq, from, forward)) = self.payloads.next_held(origin) {
            self.deliver_payload(origin, seq, from, forward);
        }
    }

    /// Delivers `origin`'s payload `seq` (the one after its mark): raises
    /// the mark (and the digest), keeps `forward` for repair, tells the
    /// embedder (its own payloads only with `deliver_own`), and sends it on
    /// over the overlay rooted at the origin, except back to `from`.
    fn deliver_payload(&mut self, origin: Rank, seq: u64, from: Rank, forward: Arc<[u8]>) {
        let retention = self.config.payload_retention;
        self.payloads.advance(origin, seq, &forward, retention);
        if self.beat.mode == HeartbeatMode::Modelled
            && self.participation != Participation::Excluded
        {
            self.stream_dirty = true;
        }
        if origin != self.me || self.config.deliver_own {
            self.stats.payloads.payloads_delivered += 1;
            self.push_event(Event::Payload {
                origin,
                seq,
                bytes: forward
                    .get(wire::OFF_PAYLOAD_BYTES..)
                    .unwrap_or(&[])
                    .to_vec(),
            });
        }
        #[cfg(feature = "model-bugs")]
        if origin != self.me && crate::model_bugs::on(crate::model_bugs::Bug::OriginOnlyForwards) {
            return;
        }
        self.fan_out(Kind::Payload, forward, origin, &[from], false);
    }

    /// A sync request's marks: send the requester what `Payloads::repair`
    /// finds, and count what it could not.
    pub(super) fn repair_payloads(&mut self, to: Rank, marks: Marks<'_>) {
        let repair = self
            .payloads
            .repair(marks, self.config.max_sync_payload_bytes);
        self.stats.payloads.payloads_beyond_retention += repair.beyond;
        if repair.cut {
            self.stats.payloads.sync_payloads_truncated += 1;
        }
        self.stats.payloads.sync_payloads_sent += repair.payloads.len() as u64;
        for m in repair.payloads {
            self.send_shared(to, Kind::Payload, m);
        }
    }

    // ----- views: the Engine's glue of `Views` (`views`) -----

    /// The id of the newest view this rank raised (0: none yet).
    pub fn view_id(&self) -> u64 {
        self.views.as_ref().map_or(0, |v| v.view_id())
    }

    /// User agreements asked of this rank so far: the sequence number of
    /// the latest `Input::Agree`.
    pub fn agreements_called(&self) -> u64 {
        self.views.as_ref().map_or(0, |v| v.called())
    }

    /// Nothing in progress: every `Input::Agree` has its result, and the
    /// newest view names every rank this rank knows gone.
    pub fn agreements_settled(&self) -> bool {
        let gone = self.failed.len() + self.left.len();
        self.views.as_ref().is_none_or(|v| v.settled(gone))
    }

    /// What `Views` reads of the rest of the Engine, with it.
    fn views_and_ctx(&mut self) -> (&mut Views, ViewsCtx<'_>) {
        let ctx = ViewsCtx {
            me: self.me,
            n: self.ring.len(),
            hosts: self.same_host.hosts.as_ref(),
            failed: &self.failed,
            left: &self.left,
            timeout: self.config.timeout,
            view_batch: self.config.period / 2,
            batch_at: self.timers.get(Timer::ViewBatch),
        };
        (self.views.get_or_insert_with(Default::default), ctx)
    }

    pub(super) fn on_agree(&mut self, now: Time, flags: u64) -> Result<(), HandleError> {
        if self.participation != Participation::Active {
            return Err(HandleError::NotActive);
        }
        self.views_and_ctx().0.call(flags);
        self.agreement_sweep(now);
        Ok(())
    }

    /// The failed or left set grew (`after_gone_changed`).
    pub(super) fn views_on_gone(&mut self, now: Time) {
        if self.participation != Participation::Active {
            return;
        }
        self.views_and_ctx();
        self.agreement_sweep(now);
    }

    /// The batching window is over: join the next view change.
    pub(super) fn on_view_batch(&mut self, now: Time) {
        if self.participation != Participation::Active {
            return;
        }
        let mut acts = Vec::new();
        let (v, ctx) = self.views_and_ctx();
        #[cfg(feature = "model-bugs")]
        {
            let (next, behind) = v.next_view(ctx.failed.len() + ctx.left.len());
            if behind && crate::model_bugs::on(crate::model_bugs::Bug::ViewBeforeDecision) {
                let mut set: Vec<Rank> = self.failed.as_slice().to_vec();
                set.extend_from_slice(self.left.as_slice());
                set.sort_unstable();
                let own = crate::agreement::Value::new(u64::MAX, &set).with_view(next - 1);
                self.raise(
                    now,
                    ViewsAct::RaiseView {
                        id: next,
                        decision: own,
                        root: self.me,
                        hops: 0,
                    },
                );
                self.agreement_sweep(now);
                return;
            }
        }
        v.on_batch(&ctx, &mut acts);
        self.carry_out_views(now, acts);
        self.agreement_sweep(now);
    }

    pub(super) fn on_agree_up(&mut self, now: Time, sender: Rank, up: AgreeUp<'_>) {
        self.on_agreement_message(now, |v, ctx, acts| v.on_up(ctx, sender, up, acts));
    }

    pub(super) fn on_agree_down(&mut self, now: Time, sender: Rank, down: AgreeDown<'_>) {
        self.on_agreement_message(now, |v, ctx, acts| v.on_down(ctx, sender, down, acts));
    }

    /// An agreement message, which `take` hands to `Views` (false: not
    /// kept, counted as dropped); only while this rank takes part.
    fn on_agreement_message(
        &mut self,
        now: Time,
        take: impl FnOnce(&mut Views, &ViewsCtx<'_>, &mut Vec<ViewsAct>) -> bool,
    ) {
        let mut acts = Vec::new();
        let kept = self.participation == Participation::Active && {
            let (v, ctx) = self.views_and_ctx();
            take(v, &ctx, &mut acts)
        };
        if !kept {
            self.stats.views.agreement_messages_dropped += 1;
            return;
        }
        self.carry_out_views(now, acts);
        self.agreement_sweep(now);
    }

    /// Steps `Views` until nothing changes, carrying out what each step
    /// asks before the next (a raise learns the ranks it names, which may
    /// tell the instances again). Re-entry (a decision's ranks learned
    /// through `after_gone_changed`) returns at once: the loop sees the
    /// change.
    fn agreement_sweep(&mut self, now: Time) {
        if !self.views.as_deref_mut().is_some_and(Views::begin_sweep) {
            return;
        }
        while self.participation == Participation::Active {
            let mut acts = Vec::new();
            // (`views` exists: `begin_sweep` ran on it, and it is never
            // dropped.)
            let (v, ctx) = self.views_and_ctx();
            let progressed = v.step(now, &ctx, &mut acts);
            self.carry_out_views(now, acts);
            if !progressed {
                break;
            }
        }
        if let Some(v) = self.views.as_deref_mut() {
            v.end_sweep();
        }
    }

    /// Carries out what `Views` asked, in order.
    fn carry_out_views(&mut self, now: Time, acts: Vec<ViewsAct>) {
        for act in acts {
            match act {
                ViewsAct::Send(id, hops, out) => self.send_agreement(id, hops, out),
                ViewsAct::Batch(at) => self.timers.set(Timer::ViewBatch, at),
                raise => self.raise(now, raise),
            }
        }
    }

    fn send_agreement(&mut self, id: AgreementId, hops: u16, out: Out) {
        for (to, msg) in out {
            let (kind, bytes) = match msg {
                AgreementMessage::Up {
                    root,
                    value,
                    decided,
                } => (
                    Kind::AgreeUp,
                    self.encoder
                        .agree_up(id, hops, root, &value, decided.as_ref()),
                ),
                AgreementMessage::Down { root, decision } => (
                    Kind::AgreeDown,
                    self.encoder.agree_down(id, hops, root, &decision),
                ),
            };
            self.send(to, kind, bytes);
        }
    }

    /// Raises a decision (`ViewsAct::RaiseView` or `RaiseAgreed`) once
    /// the ranks it names are learned, unless it names this rank.
    fn raise(&mut self, now: Time, act: ViewsAct) {
        match act {
            ViewsAct::RaiseView {
                id,
                decision,
                root,
                hops,
            } => {
                if !self.learn_decided(now, &decision.failed, root, hops) {
                    return;
                }
                self.views_and_ctx()
                    .0
                    .raised_view(id, decision.failed.len());
                self.stats.views.views_raised += 1;
                self.push_event(Event::ViewChange {
                    id,
                    failed: decision.failed,
                    hops,
                });
            }
            ViewsAct::RaiseAgreed {
                seq,
                decision,
                root,
                hops,
            } => {
                if !self.learn_decided(now, &decision.failed, root, hops) {
                    return;
                }
                self.views_and_ctx().0.raised_agreed(seq);
                self.stats.views.agreements_decided += 1;
                self.push_event(Event::Agreed {
                    seq,
                    flags: decision.flags,
                    view: View {
                        id: decision.view,
                        failed: decision.failed,
                    },
                    hops,
                });
            }
            ViewsAct::Send(..) | ViewsAct::Batch(_) => {}
        }
    }

    /// Learns the ranks of a decision this rank did not know gone (as
    /// failed, cause `notice`, from the deciding tree's root); false if the
    /// decision names this rank, which is then excluded.
    fn learn_decided(&mut self, now: Time, failed: &[Rank], root: Rank, hops: u16) -> bool {
        if failed.binary_search(&self.me).is_ok() {
            self.self_exclude(root, Exclusion::Named);
            return false;
        }
        let new: Vec<Rank> = failed
            .iter()
            .copied()
            .filter(|&r| !self.failed.contains(r) && !self.left.contains(r))
            .collect();
        if new.is_empty() {
            return true;
        }
        self.failed.insert_sorted(&new);
        for &rank in &new {
            self.stats.notices.detections[Cause::Notice as usize] += 1;
            self.push_event(Event::Failed {
                rank,
                detector: root,
                cause: Cause::Notice,
                hops,
                detail: FailureDetail::Learned,
            });
        }
        self.after_gone_changed(now);
        true
    }

    /// This rank leaves or is excluded: each of its user agreements without
    /// a result ends with `reason`; no agreement goes on here.
    pub(super) fn abort_agreements(&mut self, reason: AgreeAbort) {
        let Some(pending) = self.views.as_deref_mut().and_then(Views::end) else {
            return;
        };
        self.timers.stop(Timer::ViewBatch);
        for seq in pending {
            self.push_event(Event::AgreeAborted { seq, reason });
        }
    }
}
