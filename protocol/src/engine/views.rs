//! Views and agreements: the agreement state machine (`crate::agreement`)
//! run for view changes and user agreements.
//!
//! Owns: [`Views`], which decides by itself: the view-change instances
//! (one agreement per view id), the user agreements (`Input::Agree`), the
//! agreement messages (kinds 12 `AgreeUp` and 13 `AgreeDown`) kept or
//! dropped, the batching window before this rank starts a view change,
//! when a decision is raised (`hold`), and the end of pending agreements
//! when this rank leaves or is excluded. Its methods take `now` and what
//! they read of the rest ([`ViewsCtx`]: this rank, N, the failed and left
//! sets, the timeout, the batch window and its timer) and return acts
//! ([`ViewsAct`]: send, set the batch timer, raise a decision). The
//! Engine's glue, in `membership` beside the sets a decision grows,
//! encodes and sends, learns a decision's ranks (`Failed` with cause
//! `notice`) and raises `ViewChange` or `Agreed`. Must not: decide who
//! failed (a decision only names ranks some participant knew gone), or
//! keep more than a few instances per class.
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
//! 2·⌈log2 N⌉ without failures on the tree over ranks, 2·(1 + ⌈log4 H⌉)
//! on the tree over H hosts (when the Engine has `Hosts`: the instances'
//! [`Shape`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::Hosts;
use crate::agreement::{Instance, Out, Shape, Value};
use crate::config::{Rank, Time};
use crate::ranks::RankSet;
use crate::wire::{AgreeDown, AgreeUp, AgreementId};

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

/// What [`Views`] reads of the rest of the Engine.
pub(super) struct ViewsCtx<'a> {
    pub(super) me: Rank,
    pub(super) n: u32,
    /// The job's hosts, when ranks are grouped by host: the instances'
    /// trees are then over hosts (`Shape::Hosts`).
    pub(super) hosts: Option<&'a Arc<Hosts>>,
    pub(super) failed: &'a RankSet,
    pub(super) left: &'a RankSet,
    /// How long a decision waits for the ranks it names (a timeout).
    pub(super) timeout: Duration,
    /// How long this rank gathers failures before it starts a view
    /// change (half a period).
    pub(super) view_batch: Duration,
    /// The `ViewBatch` timer's deadline (`Time::NEVER`: not set).
    pub(super) batch_at: Time,
}

impl ViewsCtx<'_> {
    fn gone(&self) -> usize {
        self.failed.len() + self.left.len()
    }

    /// A new instance at this rank, its tree over hosts when there are.
    fn instance(&self, set: &RankSet) -> Instance {
        let shape = self
            .hosts
            .map_or(Shape::Ranks, |h| Shape::Hosts(Arc::clone(h)));
        Instance::with_shape(self.me, self.n, shape, set)
    }
}

/// What [`Views`] asks of the Engine, in order.
#[derive(Debug)]
pub(super) enum ViewsAct {
    /// Send instance `id`'s messages, `hops` long.
    Send(AgreementId, u16, Out),
    /// Set the `ViewBatch` timer to this.
    Batch(Time),
    /// Learn the ranks `decision` names (from `root`, `hops` long) and,
    /// unless it names this rank, raise it as view `id`
    /// ([`Views::raised_view`]).
    RaiseView {
        id: u64,
        decision: Value,
        root: Rank,
        hops: u16,
    },
    /// The same for user agreement `seq` ([`Views::raised_agreed`]).
    RaiseAgreed {
        seq: u64,
        decision: Value,
        root: Rank,
        hops: u16,
    },
}

impl Views {
    /// The id of the newest view this rank raised (0: none yet).
    pub(super) fn view_id(&self) -> u64 {
        self.view
    }

    /// `Input::Agree` calls accepted so far.
    pub(super) fn called(&self) -> u64 {
        self.called
    }

    /// Nothing in progress, with `gone` ranks known gone: every call has
    /// its result, and the newest view names every one of them.
    pub(super) fn settled(&self, gone: usize) -> bool {
        self.raised == self.called && (self.ended || self.view_len == gone)
    }

    /// The next view's id, and whether this rank knows more ranks gone
    /// (`gone`) than its current view names.
    pub(super) fn next_view(&self, gone: usize) -> (u64, bool) {
        (self.view + 1, self.view_len < gone)
    }

    /// An `Input::Agree` with `flags`: queued until the previous call's
    /// result is raised.
    pub(super) fn call(&mut self, flags: u64) {
        self.called += 1;
        self.queued.push_back(flags);
    }

    /// Starts a sweep; false if one is running (re-entry through a
    /// decision's ranks learned) or agreements ended.
    pub(super) fn begin_sweep(&mut self) -> bool {
        if self.sweeping || self.ended {
            return false;
        }
        self.sweeping = true;
        true
    }

    /// Ends a sweep: forgets instances older than the last
    /// [`KEEP_DECIDED`] decided ones.
    pub(super) fn end_sweep(&mut self) {
        self.sweeping = false;
        let keep_views = self.view.saturating_sub(KEEP_DECIDED);
        let keep_users = self.raised.saturating_sub(KEEP_DECIDED);
        self.views.retain(|k| k > keep_views);
        self.users.retain(|s| s > keep_users);
    }

    /// The batching window is over: joins the next view change if this
    /// rank knows more ranks gone than its view names.
    pub(super) fn on_batch(&mut self, ctx: &ViewsCtx<'_>, acts: &mut Vec<ViewsAct>) {
        let (next, behind) = self.next_view(ctx.gone());
        if behind {
            self.contribute(ctx, AgreementId::View(next), u64::MAX, acts);
        }
    }

    /// An `AgreeUp` from `sender`; false if it is not kept (an instance
    /// too old or too far ahead).
    pub(super) fn on_up(
        &mut self,
        ctx: &ViewsCtx<'_>,
        sender: Rank,
        up: AgreeUp<'_>,
        acts: &mut Vec<ViewsAct>,
    ) -> bool {
        if !self.slot_for(ctx, up.id) {
            return false;
        }
        let value = up.value.to_value();
        let decided = up.decided.map(|d| d.to_value());
        self.with_slot(ctx, up.id, up.hops, acts, |slot, set, out| {
            slot.inst
                .on_up(sender, up.root, &value, decided.as_ref(), set, out);
        });
        true
    }

    /// An `AgreeDown` from `sender`; false if it is not kept.
    pub(super) fn on_down(
        &mut self,
        ctx: &ViewsCtx<'_>,
        sender: Rank,
        down: AgreeDown<'_>,
        acts: &mut Vec<ViewsAct>,
    ) -> bool {
        if !self.slot_for(ctx, down.id) {
            return false;
        }
        let decision = down.decision.to_value();
        self.with_slot(ctx, down.id, down.hops, acts, |slot, set, out| {
            slot.inst.on_down(sender, down.root, &decision, set, out);
        });
        true
    }

    /// Makes sure instance `id` exists if a message for it is to be kept:
    /// one this rank keeps, or one at most [`AHEAD`] beyond its own.
    fn slot_for(&mut self, ctx: &ViewsCtx<'_>, id: AgreementId) -> bool {
        let (map, key, floor, limit) = match id {
            AgreementId::View(k) => (&mut self.views, k, self.view, self.view + AHEAD),
            AgreementId::User(s) => (&mut self.users, s, self.raised, self.started + AHEAD),
        };
        if map.contains_key(&key) {
            return true;
        }
        if key <= floor || key > limit {
            return false;
        }
        let set = self.gone.as_ref().unwrap_or(ctx.failed);
        let inst = ctx.instance(set);
        map.insert(key, Slot { inst, hops: 0 });
        true
    }

    /// Runs `f` on instance `id` (if it exists) with the gone set, after
    /// noting a message of `hops`; asks to send what it produced.
    fn with_slot(
        &mut self,
        ctx: &ViewsCtx<'_>,
        id: AgreementId,
        hops: u16,
        acts: &mut Vec<ViewsAct>,
        f: impl FnOnce(&mut Slot, &RankSet, &mut Out),
    ) {
        let mut out = Out::new();
        let set = self.gone.as_ref().unwrap_or(ctx.failed);
        let (map, key) = match id {
            AgreementId::View(k) => (&mut self.views, k),
            AgreementId::User(s) => (&mut self.users, s),
        };
        let Some(slot) = map.get_mut(&key) else {
            return;
        };
        slot.hops = slot.hops.max(hops);
        f(slot, set, &mut out);
        let hops = slot.hops.saturating_add(1);
        acts.push(ViewsAct::Send(id, hops, out));
    }

    /// This rank's contribution to `id` (made if missing): `flags`, its
    /// gone set and its current view id. A second one is ignored.
    fn contribute(
        &mut self,
        ctx: &ViewsCtx<'_>,
        id: AgreementId,
        flags: u64,
        acts: &mut Vec<ViewsAct>,
    ) {
        let set = self.gone.as_ref().unwrap_or(ctx.failed);
        let value = Value::new(flags, set.as_slice()).with_view(self.view);
        let (map, key) = match id {
            AgreementId::View(k) => (&mut self.views, k),
            AgreementId::User(s) => (&mut self.users, s),
        };
        if !map.contains_key(&key) {
            let inst = ctx.instance(set);
            map.insert(key, Slot { inst, hops: 0 });
        }
        self.with_slot(ctx, id, 0, acts, |slot, set, out| {
            slot.inst.contribute(&value, set, out);
        });
    }

    /// One step of a sweep, bringing every instance up to date and acting
    /// on what follows: tells the instances of new failures, raises the
    /// next view and the next user result once decided, starts the next
    /// queued user agreement, joins or schedules the next view change.
    /// False when there was nothing to do. The Engine carries out `acts`
    /// (a raise learns the ranks the decision names) before the next step.
    pub(super) fn step(&mut self, now: Time, ctx: &ViewsCtx<'_>, acts: &mut Vec<ViewsAct>) -> bool {
        if self.ended {
            return false;
        }
        let gone = ctx.gone();
        if self.told != gone {
            self.told = gone;
            self.refresh_gone(ctx);
            self.tell_failures(ctx, acts);
            return true;
        }
        let mut batch_at = ctx.batch_at;
        let next_view = self.view + 1;
        if let Some((decision, root, hops)) = self.views.get(&next_view).and_then(|s| s.decided()) {
            if !self.hold(now, ctx, &decision.failed, false, &mut batch_at, acts) {
                acts.push(ViewsAct::RaiseView {
                    id: next_view,
                    decision,
                    root,
                    hops,
                });
                return true;
            }
        }
        if self.raised < self.started {
            let seq = self.raised + 1;
            if let Some((decision, root, hops)) = self.users.get(&seq).and_then(|s| s.decided()) {
                if !self.hold(now, ctx, &decision.failed, true, &mut batch_at, acts) {
                    acts.push(ViewsAct::RaiseAgreed {
                        seq,
                        decision,
                        root,
                        hops,
                    });
                    return true;
                }
            }
        } else if let Some(flags) = self.queued.pop_front() {
            self.started += 1;
            let seq = self.started;
            self.contribute(ctx, AgreementId::User(seq), flags, acts);
            return true;
        }
        let joined = self
            .views
            .get(&next_view)
            .is_some_and(|s| s.inst.has_contributed());
        if !joined {
            if self.views.contains_key(&next_view) {
                // A message of the next view change came: join at once.
                self.contribute(ctx, AgreementId::View(next_view), u64::MAX, acts);
                return true;
            }
            if self.view_len < gone && batch_at == Time::NEVER {
                acts.push(ViewsAct::Batch(now + ctx.view_batch));
            }
        }
        false
    }

    /// Rebuilds failed ∪ left while some rank left.
    fn refresh_gone(&mut self, ctx: &ViewsCtx<'_>) {
        self.gone = if ctx.left.is_empty() {
            None
        } else {
            let (a, b) = (ctx.failed.as_slice(), ctx.left.as_slice());
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
    }

    /// Every instance kept, decided ones too (they pass a re-rooted
    /// decision on), re-forms its tree around the grown gone set.
    fn tell_failures(&mut self, ctx: &ViewsCtx<'_>, acts: &mut Vec<ViewsAct>) {
        let ids: Vec<AgreementId> = self
            .views
            .keys()
            .map(AgreementId::View)
            .chain(self.users.keys().map(AgreementId::User))
            .collect();
        for id in ids {
            self.with_slot(ctx, id, 0, acts, |slot, set, out| {
                slot.inst.on_failures(set, out)
            });
        }
    }

    /// Whether a decision naming `failed` waits before it is raised: while
    /// it names ranks this rank does not know gone (nor itself), for at
    /// most a timeout. A decision names only ranks some participant knew
    /// gone, failed or left, and their notices are on their way here: a
    /// departure learned from the decision itself would be misreported as
    /// a failure. After the timeout the rest are learned as failed
    /// (`learn_decided`). `user`: the next user result, else the next
    /// view. Moves the `ViewBatch` timer (`batch_at`) to the end of the
    /// wait if it is later.
    fn hold(
        &mut self,
        now: Time,
        ctx: &ViewsCtx<'_>,
        failed: &[Rank],
        user: bool,
        batch_at: &mut Time,
        acts: &mut Vec<ViewsAct>,
    ) -> bool {
        let known = |r: &Rank| *r == ctx.me || ctx.failed.contains(*r) || ctx.left.contains(*r);
        let waiting = !failed.iter().all(known) && failed.binary_search(&ctx.me).is_err();
        let since = if user {
            &mut self.held.1
        } else {
            &mut self.held.0
        };
        if !waiting {
            *since = None;
            return false;
        }
        let until = *since.get_or_insert(now) + ctx.timeout;
        if now >= until {
            *since = None;
            return false;
        }
        if *batch_at > until {
            *batch_at = until;
            acts.push(ViewsAct::Batch(until));
        }
        true
    }

    /// View `id` naming `len` ranks was raised.
    pub(super) fn raised_view(&mut self, id: u64, len: usize) {
        self.view = id;
        self.view_len = len;
    }

    /// User agreement `seq`'s result was raised.
    pub(super) fn raised_agreed(&mut self, seq: u64) {
        self.raised = seq;
    }

    /// This rank leaves or is excluded: no agreement goes on here. The
    /// user agreements left without a result (`None` if agreements had
    /// ended already).
    pub(super) fn end(&mut self) -> Option<std::ops::RangeInclusive<u64>> {
        if self.ended {
            return None;
        }
        self.ended = true;
        let pending = self.raised + 1..=self.called;
        self.raised = self.called;
        self.queued.clear();
        self.views.clear();
        self.users.clear();
        self.gone = None;
        Some(pending)
    }
}
