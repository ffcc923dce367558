//! Views and agreements: the agreement state machine (`crate::agreement`)
//! wired into the Engine.
//!
//! Owns: the view-change instances (one agreement per view id), the user
//! agreements (`Input::Agree`), the agreement messages (kinds 12 `AgreeUp`
//! and 13 `AgreeDown`), the batching window before this rank starts a view
//! change, what a decision raises (`Failed` for ranks learned from it, then
//! `ViewChange` or `Agreed`), and the end of pending agreements when this
//! rank leaves or is excluded. Must not: decide who failed (a decision only
//! names ranks some participant knew gone; they are learned here with
//! cause `notice`), or keep more than a few instances per class.
//!
//! # Views
//! View 0 names nobody. A rank whose gone set (failed ∪ left) holds ranks
//! its current view `k` does not name contributes its gone set to the
//! agreement `View(k+1)` after a batching window (half a period, so that
//! failures found together make one view); a rank that receives any message
//! of `View(k+1)` contributes at once. The decision is view `k+1`, raised
//! once every rank it names is known gone here (their notices are on their
//! way; after a timeout the rest are learned as failed, see `hold`). Every
//! participant contributes only after raising view `k`, and learns every
//! rank of a decision before raising it, so its gone set holds every view
//! it raised: views only grow, and "the gone set holds more than view `k`"
//! is a comparison of sizes. Every live rank learns every failure (the
//! notices), so every live rank joins every view change, and each decides
//! the same value (the agreement's guarantee): every live rank raises the
//! same views in the same order.
//!
//! # User agreements
//! The `u`-th `Input::Agree` of a rank contributes to `User(u)`, once its
//! `User(u-1)` is decided here (calls made before that wait in a queue), so
//! decisions come in call order. Messages for an instance this rank has
//! not reached are kept in that instance (at most [`AHEAD`] instances
//! ahead of this rank's own).
//!
//! # Bounded state
//! Per class, the instances in progress (at most [`AHEAD`]) and the last
//! [`KEEP_DECIDED`] decided ones, which answer late `Up`s and pass a
//! re-rooted decision on. Older ones cannot be asked for: a decision of
//! instance `i + 1` anywhere means that every rank it does not name
//! contributed to `i + 1`, hence decided `i` first.
//!
//! # Hops
//! Every agreement message carries the longest chain of agreement messages
//! behind it (the sender's longest incoming chain for that instance, plus
//! one); a decision's `hops` is that count at the deciding rank:
//! 2·⌈log2 N⌉ without failures.

use std::collections::VecDeque;
use std::time::Duration;

use super::{
    AgreeAbort, Cause, Engine, Event, Exclusion, FailureDetail, HandleError, Participation, Timer,
    View,
};
use crate::agreement::{AgreementMessage, Instance, Out, Value};
use crate::config::{Rank, Time};
use crate::ranks::RankSet;
use crate::wire::{AgreeDown, AgreeUp, AgreementId, Kind};

/// Decided instances kept per class (see the module docs: two would do).
pub(super) const KEEP_DECIDED: u64 = 3;
/// How far beyond this rank's own instance messages are kept: others can
/// be one instance ahead (they decided the instance this rank is still
/// in); one more for margin.
pub(super) const AHEAD: u64 = 2;

/// One agreement instance and the longest message chain seen for it.
#[derive(Clone, Debug)]
struct Slot {
    inst: Instance,
    hops: u16,
}

impl Slot {
    /// The decision, its root and hops, once decided here.
    fn decided(&self) -> Option<(Value, Rank, u16)> {
        let d = self.inst.decision()?;
        Some((d.clone(), self.inst.root(), self.hops))
    }
}

/// A few instances by number, ascending: a short vector (a `BTreeMap`
/// would allocate a node for 11 instances in each of a simulator's
/// million Engines), grown one slot at a time (a `Vec`'s first growth
/// makes room for 4: 928 bytes per rank for the one view change of a
/// failure).
#[derive(Clone, Debug, Default)]
struct Slots(Vec<(u64, Slot)>);

impl Slots {
    fn get(&self, key: &u64) -> Option<&Slot> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, s)| s)
    }

    fn get_mut(&mut self, key: &u64) -> Option<&mut Slot> {
        self.0.iter_mut().find(|(k, _)| k == key).map(|(_, s)| s)
    }

    fn contains_key(&self, key: &u64) -> bool {
        self.get(key).is_some()
    }

    /// Adds `slot` as `key` unless there is one.
    fn insert(&mut self, key: u64, slot: Slot) {
        if !self.contains_key(&key) {
            let at = self.0.partition_point(|(k, _)| *k < key);
            self.0.reserve_exact(1);
            self.0.insert(at, (key, slot));
        }
    }

    fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        self.0.retain(|(k, _)| keep(*k));
    }

    fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().map(|(k, _)| *k)
    }

    fn clear(&mut self) {
        self.0 = Vec::new();
    }
}

/// The Engine's views and agreements. Made at first use, so an Engine
/// that never sees a failure or an agreement carries one pointer.
#[derive(Clone, Debug, Default)]
pub(super) struct Views {
    /// The current view's id and the size of its set.
    view: u64,
    view_len: usize,
    views: Slots,
    users: Slots,
    /// `Input::Agree` calls accepted (the latest one's sequence number).
    called: u64,
    /// User instances this rank contributed to (the latest one's number).
    started: u64,
    /// User instances whose result was raised here, in order.
    raised: u64,
    /// Flags of calls not yet contributed (`started + 1 ..= called`).
    queued: VecDeque<u64>,
    /// failed ∪ left, kept only while some rank left (otherwise the failed
    /// set is the gone set).
    gone: Option<RankSet>,
    /// Since when the next view's (`.0`) or the next user result's (`.1`)
    /// decision has waited for ranks it names to be known gone here.
    held: (Option<Time>, Option<Time>),
    /// |failed| + |left| when the instances were last told.
    told: usize,
    sweeping: bool,
    /// This rank left or was excluded: no more agreements.
    ended: bool,
}

impl Engine {
    /// The id of the newest view this rank raised (0: none yet).
    pub fn view_id(&self) -> u64 {
        self.views.as_ref().map_or(0, |v| v.view)
    }

    /// User agreements asked of this rank so far: the sequence number of
    /// the latest `Input::Agree`.
    pub fn agreements_called(&self) -> u64 {
        self.views.as_ref().map_or(0, |v| v.called)
    }

    /// Nothing in progress: every `Input::Agree` has its result, and the
    /// newest view names every rank this rank knows gone.
    pub fn agreements_settled(&self) -> bool {
        let gone = self.failed.len() + self.left.len();
        self.views
            .as_ref()
            .is_none_or(|v| v.raised == v.called && (v.ended || v.view_len == gone))
    }

    /// How long this rank gathers failures before it starts a view change.
    fn view_batch(&self) -> Duration {
        self.config.period / 2
    }

    fn views_mut(&mut self) -> &mut Views {
        self.views.get_or_insert_with(Default::default)
    }

    pub(super) fn on_agree(&mut self, now: Time, flags: u64) -> Result<(), HandleError> {
        if self.participation != Participation::Active {
            return Err(HandleError::NotActive);
        }
        let v = self.views_mut();
        v.called += 1;
        v.queued.push_back(flags);
        self.agreement_sweep(now);
        Ok(())
    }

    /// The failed or left set grew (`membership::after_gone_changed`).
    pub(super) fn views_on_gone(&mut self, now: Time) {
        if self.participation != Participation::Active {
            return;
        }
        self.views_mut();
        self.agreement_sweep(now);
    }

    /// The batching window is over: join the next view change.
    pub(super) fn on_view_batch(&mut self, now: Time) {
        if self.participation != Participation::Active {
            return;
        }
        let gone = self.failed.len() + self.left.len();
        let v = self.views_mut();
        let (next, behind) = (v.view + 1, v.view_len < gone);
        #[cfg(feature = "model-bugs")]
        if behind && crate::model_bugs::on(crate::model_bugs::Bug::ViewBeforeDecision) {
            let mut set: Vec<Rank> = self.failed.as_slice().to_vec();
            set.extend_from_slice(self.left.as_slice());
            set.sort_unstable();
            let own = Value::new(u64::MAX, &set).with_view(next - 1);
            self.raise_view(now, next, own, self.me, 0);
            self.agreement_sweep(now);
            return;
        }
        if behind {
            self.contribute(AgreementId::View(next), u64::MAX);
        }
        self.agreement_sweep(now);
    }

    pub(super) fn on_agree_up(&mut self, now: Time, sender: Rank, up: AgreeUp<'_>) {
        if !self.agreement_slot(up.id) {
            self.stats.views.agreement_messages_dropped += 1;
            return;
        }
        let value = up.value.to_value();
        let decided = up.decided.map(|d| d.to_value());
        self.with_slot(up.id, up.hops, |slot, set, out| {
            slot.inst
                .on_up(sender, up.root, &value, decided.as_ref(), set, out);
        });
        self.agreement_sweep(now);
    }

    pub(super) fn on_agree_down(&mut self, now: Time, sender: Rank, down: AgreeDown<'_>) {
        if !self.agreement_slot(down.id) {
            self.stats.views.agreement_messages_dropped += 1;
            return;
        }
        let decision = down.decision.to_value();
        self.with_slot(down.id, down.hops, |slot, set, out| {
            slot.inst.on_down(sender, down.root, &decision, set, out);
        });
        self.agreement_sweep(now);
    }

    /// Makes sure instance `id` exists if a message for it is to be kept:
    /// one this rank keeps, or one at most [`AHEAD`] beyond its own.
    fn agreement_slot(&mut self, id: AgreementId) -> bool {
        if self.participation != Participation::Active {
            return false;
        }
        let (me, n) = (self.me, self.ring.len());
        let v: &mut Views = self.views.get_or_insert_with(Default::default);
        let (map, key, floor, limit) = match id {
            AgreementId::View(k) => (&mut v.views, k, v.view, v.view + AHEAD),
            AgreementId::User(s) => (&mut v.users, s, v.raised, v.started + AHEAD),
        };
        if map.contains_key(&key) {
            return true;
        }
        if key <= floor || key > limit {
            return false;
        }
        let set = v.gone.as_ref().unwrap_or(&self.failed);
        let inst = Instance::new(me, n, set);
        map.insert(key, Slot { inst, hops: 0 });
        true
    }

    /// Runs `f` on instance `id` (which exists) with the gone set, after
    /// noting a message of `hops`; sends what it asks for.
    fn with_slot(
        &mut self,
        id: AgreementId,
        hops: u16,
        f: impl FnOnce(&mut Slot, &RankSet, &mut Out),
    ) {
        let mut out = Out::new();
        let Some(v) = self.views.as_deref_mut() else {
            return;
        };
        let Views {
            gone, views, users, ..
        } = v;
        let set = gone.as_ref().unwrap_or(&self.failed);
        let (map, key) = match id {
            AgreementId::View(k) => (views, k),
            AgreementId::User(s) => (users, s),
        };
        let Some(slot) = map.get_mut(&key) else {
            return;
        };
        slot.hops = slot.hops.max(hops);
        f(slot, set, &mut out);
        let hops = slot.hops.saturating_add(1);
        self.send_agreement(id, hops, out);
    }

    /// This rank's contribution to `id` (made if missing): `flags`, its
    /// gone set and its current view id. A second one is ignored.
    fn contribute(&mut self, id: AgreementId, flags: u64) {
        let (me, n) = (self.me, self.ring.len());
        let v: &mut Views = self.views.get_or_insert_with(Default::default);
        let set = v.gone.as_ref().unwrap_or(&self.failed);
        let value = Value::new(flags, set.as_slice()).with_view(v.view);
        let (map, key) = match id {
            AgreementId::View(k) => (&mut v.views, k),
            AgreementId::User(s) => (&mut v.users, s),
        };
        if !map.contains_key(&key) {
            let inst = Instance::new(me, n, set);
            map.insert(key, Slot { inst, hops: 0 });
        }
        self.with_slot(id, 0, |slot, set, out| {
            slot.inst.contribute(&value, set, out);
        });
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

    /// Brings every instance up to date and acts on what follows, until
    /// nothing changes: tells the instances of new failures, raises the
    /// next view and the next user result once decided (learning the ranks
    /// they name, which may tell the instances again), starts the next
    /// queued user agreement, joins or schedules the next view change, and
    /// forgets old instances. Re-entry (a decision's ranks learned through
    /// `membership`) returns at once: the loop sees the change.
    fn agreement_sweep(&mut self, now: Time) {
        match self.views.as_deref_mut() {
            Some(v) if !v.sweeping && !v.ended => v.sweeping = true,
            _ => return,
        }
        while self.participation == Participation::Active && self.agreement_step(now) {}
        if let Some(v) = self.views.as_deref_mut() {
            v.sweeping = false;
            let keep_views = v.view.saturating_sub(KEEP_DECIDED);
            let keep_users = v.raised.saturating_sub(KEEP_DECIDED);
            v.views.retain(|k| k > keep_views);
            v.users.retain(|s| s > keep_users);
        }
    }

    /// One step of [`Self::agreement_sweep`]; false when there was nothing to do.
    fn agreement_step(&mut self, now: Time) -> bool {
        let gone = self.failed.len() + self.left.len();
        let Some(v) = self.views.as_deref_mut() else {
            return false;
        };
        if v.ended {
            return false;
        }
        if v.told != gone {
            v.told = gone;
            self.refresh_gone();
            self.tell_failures();
            return true;
        }
        let v = self.views.as_deref_mut().expect("checked above");
        let next_view = v.view + 1;
        if let Some(d) = v.views.get(&next_view).and_then(|s| s.decided()) {
            if !self.hold(now, &d.0.failed, false) {
                let (d, root, hops) = d;
                self.raise_view(now, next_view, d, root, hops);
                return true;
            }
        }
        let v = self.views.as_deref_mut().expect("checked above");
        if v.raised < v.started {
            let seq = v.raised + 1;
            if let Some(d) = v.users.get(&seq).and_then(|s| s.decided()) {
                if !self.hold(now, &d.0.failed, true) {
                    let (d, root, hops) = d;
                    self.raise_agreed(now, seq, d, root, hops);
                    return true;
                }
            }
        } else if let Some(flags) = v.queued.pop_front() {
            v.started += 1;
            let seq = v.started;
            self.contribute(AgreementId::User(seq), flags);
            return true;
        }
        let v = self.views.as_deref_mut().expect("checked above");
        let joined = v
            .views
            .get(&next_view)
            .is_some_and(|s| s.inst.has_contributed());
        if !joined {
            if v.views.contains_key(&next_view) {
                // A message of the next view change came: join at once.
                self.contribute(AgreementId::View(next_view), u64::MAX);
                return true;
            }
            if v.view_len < gone && self.timers.get(Timer::ViewBatch) == Time::NEVER {
                let at = now + self.view_batch();
                self.timers.set(Timer::ViewBatch, at);
            }
        }
        false
    }

    /// Rebuilds failed ∪ left while some rank left.
    fn refresh_gone(&mut self) {
        let gone = if self.left.is_empty() {
            None
        } else {
            let (a, b) = (self.failed.as_slice(), self.left.as_slice());
            let mut merged = Vec::with_capacity(a.len() + b.len());
            let (mut i, mut j) = (0, 0);
            while i < a.len() || j < b.len() {
                if j >= b.len() || (i < a.len() && a[i] < b[j]) {
                    merged.push(a[i]);
                    i += 1;
                } else {
                    merged.push(b[j]);
                    j += 1;
                }
            }
            let mut set = RankSet::new();
            set.insert_sorted(&merged);
            Some(set)
        };
        if let Some(v) = self.views.as_deref_mut() {
            v.gone = gone;
        }
    }

    /// Every instance kept, decided ones too (they pass a re-rooted
    /// decision on), re-forms its tree around the grown gone set.
    fn tell_failures(&mut self) {
        let Some(v) = self.views.as_deref() else {
            return;
        };
        let ids: Vec<AgreementId> = v
            .views
            .keys()
            .map(AgreementId::View)
            .chain(v.users.keys().map(AgreementId::User))
            .collect();
        for id in ids {
            self.with_slot(id, 0, |slot, set, out| slot.inst.on_failures(set, out));
        }
    }

    /// Whether a decision naming `failed` waits before it is raised: while
    /// it names ranks this rank does not know gone (nor itself), for at
    /// most a timeout. A decision names only ranks some participant knew
    /// gone, failed or left, and their notices are on their way here: a
    /// departure learned from the decision itself would be misreported as
    /// a failure. After the timeout the rest are learned as failed
    /// (`learn_decided`). `user`: the next user result, else the next view.
    fn hold(&mut self, now: Time, failed: &[Rank], user: bool) -> bool {
        let known = |r: &Rank| *r == self.me || self.failed.contains(*r) || self.left.contains(*r);
        let waiting = !failed.iter().all(known) && failed.binary_search(&self.me).is_err();
        let deadline = self.config.timeout;
        let Some(v) = self.views.as_deref_mut() else {
            return false;
        };
        let since = if user { &mut v.held.1 } else { &mut v.held.0 };
        if !waiting {
            *since = None;
            return false;
        }
        let until = *since.get_or_insert(now) + deadline;
        if now >= until {
            *since = None;
            return false;
        }
        if self.timers.get(Timer::ViewBatch) > until {
            self.timers.set(Timer::ViewBatch, until);
        }
        true
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

    fn raise_view(&mut self, now: Time, id: u64, decision: Value, root: Rank, hops: u16) {
        if !self.learn_decided(now, &decision.failed, root, hops) {
            return;
        }
        let v = self.views_mut();
        v.view = id;
        v.view_len = decision.failed.len();
        self.stats.views.views_raised += 1;
        self.push_event(Event::ViewChange {
            id,
            failed: decision.failed,
            hops,
        });
    }

    fn raise_agreed(&mut self, now: Time, seq: u64, decision: Value, root: Rank, hops: u16) {
        if !self.learn_decided(now, &decision.failed, root, hops) {
            return;
        }
        self.views_mut().raised = seq;
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

    /// This rank leaves or is excluded: each of its user agreements without
    /// a result ends with `reason`; no agreement goes on here.
    pub(super) fn abort_agreements(&mut self, reason: AgreeAbort) {
        let Some(v) = self.views.as_deref_mut() else {
            return;
        };
        if v.ended {
            return;
        }
        v.ended = true;
        let pending = v.raised + 1..=v.called;
        v.raised = v.called;
        v.queued.clear();
        v.views.clear();
        v.users.clear();
        v.gone = None;
        self.timers.stop(Timer::ViewBatch);
        for seq in pending {
            self.push_event(Event::AgreeAborted { seq, reason });
        }
    }
}
