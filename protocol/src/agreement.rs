//! Fault-tolerant agreement: every surviving participant decides the same
//! value, however many participants fail during the agreement. After ERA
//! (Herault et al., SC'15) and Open MPI's `coll/ftagree`, shaped sans-IO.
//!
//! Owns: one agreement instance's state machine (contributions, the
//! aggregation up a tree, the decision down it, re-rooting around
//! failures). Must not: decide who failed (the failure detector does; an
//! instance only reads the failed set it is given), read a clock, or do IO.
//! Messages leave as [`Out`] values; a driver (the Engine) encodes them.
//!
//! # The value
//! A participant contributes `flags`, the failed set it knows and the id
//! of the newest view it has (`view`, used by the Engine's user
//! agreements; 0 elsewhere); values merge by AND of flags, union of failed
//! sets and max of view ids (idempotent and commutative, so a value merged
//! twice, or by two paths, changes nothing).
//!
//! # The tree
//! Rooted at the lowest rank not known failed, of one of two shapes
//! ([`Shape`]), a function of the root alone:
//! - **Ranks**: the binomial tree over ranks: with `rel = (rank − root) mod
//!   N`, the parent of `rel` clears its highest set bit, and its children
//!   are `rel + 2^k` for every `2^k > rel`.
//! - **Hosts**: the [`HOST_RADIX`]-nomial tree over hosts (host indices
//!   relative to the root's host: the parent of `rel` clears its most
//!   significant base-4 digit, its children are `rel + j·4^m` for `j` in
//!   1..4 and every `4^m > rel`), each host represented by its *head* (the
//!   root on the root's host, the host's lowest rank elsewhere), and every
//!   other rank of a host a child of its head (flat; a host of more than
//!   [`FLAT_MAX`] ranks is a binomial tree over its ranks in order from
//!   the head instead). Without failures a message crosses between hosts
//!   only on the tree over heads: 2·(1 + ⌈log4 H⌉) hops for H hosts.
//!
//! A rank's
//! *effective* parent is its nearest ancestor not known failed; its
//! effective children are its nearest descendants not known failed (a
//! failed child's children are adopted). Ranks learn failures at different
//! times, so their trees may disagree for a while: an `Up` names the root it
//! was sent for, and is kept by whoever receives it until that rank's own
//! tree counts it.
//!
//! # The protocol
//! - **Up**: a participant that has contributed and has an `Up` (for its
//!   current root) from every effective child sends the merged value of its
//!   subtree, with its own current failed set, to its effective parent. If
//!   its parent or the root changes, it sends again to the new parent.
//! - **Decide**: the root, complete in the same sense, decides the merged
//!   value (or a decision carried up by an `Up`, see below) and sends
//!   `Down(root, decision)` to its effective children, who decide and pass
//!   it on. A rank that gains a child after deciding (a failure made it
//!   adopt one) sends it the decision; an `Up` reaching a decided rank is
//!   answered with the decision.
//! - **Root failure**: the lowest live rank becomes root and the tree is
//!   re-formed. A rank that had decided carries its decision in every later
//!   `Up`; a root whose aggregate carries a decision re-sends that decision
//!   instead of deciding anew.
//! - **Stale decisions**: a `Down` whose root this rank knows to have
//!   failed is ignored. So a rank decides the old root's value only before
//!   it learns of that root's failure, and its `Up` to the new root (sent
//!   after it learned) carries the decision; the new root waits for every
//!   live rank's subtree, so it re-sends that decision. A rank that ignored
//!   a stale `Down` is undecided in its `Up`s and takes the new root's
//!   decision, which is the same. Every surviving participant therefore
//!   decides one value.
//!
//! Liveness rests on the failure detector: a participant that is neither
//! failed nor contributing holds its parent back (an agreement waits for
//! every live participant, as `MPIX_Comm_agree` does), and a failed one is
//! eventually known failed everywhere and adopted around.
//!
//! Nothing of the protocol depends on the tree's shape but that it is a
//! tree over every rank, rooted at the root and the same at every rank for
//! the same root: an effective parent and its effective children then
//! agree whenever their failed sets do, and a rank covers its whole
//! structural subtree but the ranks it knows failed.
//!
//! Cost: N − 1 `Up`s and N − 1 `Down`s without failures; 2·⌈log2 N⌉ hops
//! over ranks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::{Hosts, Rank};

/// A host of at most this many ranks is flat under its head (one hop);
/// a larger one is a binomial tree over its ranks, so that no rank
/// receives or sends more than about this many messages for its host.
pub const FLAT_MAX: usize = 16;

/// The tree over the hosts' heads is this-nomial (a k-nomial tree, as
/// MPI libraries shape their collectives): ⌈log4 H⌉ levels for H hosts,
/// a head sending at most 3 per level. A hop between hosts is the
/// slowest of an agreement (a fabric message and a wake-up on another
/// host), and with 4 hosts the binomial tree's second level cost about
/// 0.1 ms of its 0.6 (`ffd run -n 16 --netns 4`; docs/design.md
/// §4.10 "Agreement and views", its tree over hosts).
pub const HOST_RADIX: u32 = 4;

/// The shape of an instance's tree (module docs, "The tree").
#[derive(Clone, Debug, Default)]
pub enum Shape {
    /// The binomial tree over ranks.
    #[default]
    Ranks,
    /// A [`HOST_RADIX`]-nomial tree over hosts, each host's ranks under its head.
    Hosts(Arc<Hosts>),
}

/// A contribution, a subtree's aggregate, or a decision: the AND of the
/// participants' flags, the union of their failed sets and the newest of
/// their view ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Value {
    pub flags: u64,
    /// Ascending, no duplicates.
    pub failed: Vec<Rank>,
    /// The newest view id among the participants (max).
    pub view: u64,
}

impl Value {
    /// A participant's contribution (`failed` ascending), view id 0.
    pub fn new(flags: u64, failed: &[Rank]) -> Value {
        debug_assert!(failed.windows(2).all(|w| w[0] < w[1]));
        Value {
            flags,
            failed: failed.to_vec(),
            view: 0,
        }
    }

    /// The same value with view id `view`.
    pub fn with_view(mut self, view: u64) -> Value {
        self.view = view;
        self
    }

    /// The neutral value: all flags set, nobody failed, view 0.
    pub fn neutral() -> Value {
        Value {
            flags: u64::MAX,
            failed: Vec::new(),
            view: 0,
        }
    }

    /// AND of flags, union of failed sets, max of view ids.
    pub fn merge(&mut self, other: &Value) {
        self.flags &= other.flags;
        self.view = self.view.max(other.view);
        self.merge_failed(&other.failed);
    }

    fn merge_failed(&mut self, other: &[Rank]) {
        if other.iter().all(|r| self.failed.binary_search(r).is_ok()) {
            return;
        }
        let mut merged = Vec::with_capacity(self.failed.len() + other.len());
        let (mut i, mut j) = (0, 0);
        while i < self.failed.len() || j < other.len() {
            let next = match (self.failed.get(i), other.get(j)) {
                (Some(&a), Some(&b)) if a == b => {
                    i += 1;
                    j += 1;
                    a
                }
                (Some(&a), Some(&b)) if a < b => {
                    i += 1;
                    a
                }
                (Some(_), Some(&b)) => {
                    j += 1;
                    b
                }
                (Some(&a), None) => {
                    i += 1;
                    a
                }
                (None, Some(&b)) => {
                    j += 1;
                    b
                }
                (None, None) => unreachable!("loop condition"),
            };
            merged.push(next);
        }
        self.failed = merged;
    }
}

/// What the failure detector knows, as an instance reads it.
pub trait FailedSet {
    fn is_failed(&self, rank: Rank) -> bool;
    /// The failed ranks, ascending.
    fn ranks(&self) -> &[Rank];
}

impl FailedSet for crate::RankSet {
    fn is_failed(&self, rank: Rank) -> bool {
        self.contains(rank)
    }
    fn ranks(&self) -> &[Rank] {
        self.as_slice()
    }
}

/// A message an instance asks its driver to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgreementMessage {
    /// The sender's subtree aggregate, for the tree rooted at `root`.
    /// `decided`: a decision the sender already holds (it dominates).
    Up {
        root: Rank,
        value: Value,
        decided: Option<Value>,
    },
    /// The decision, as decided or re-sent by `root`.
    Down { root: Rank, decision: Value },
}

/// `(to, message)` pairs for the driver.
pub type Out = Vec<(Rank, AgreementMessage)>;

/// Counters of one instance, for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstanceStats {
    pub ups_sent: u32,
    pub downs_sent: u32,
    pub stale_downs: u32,
    /// Times this rank re-formed its tree (a parent, child or root failed).
    pub reformed: u32,
}

/// One agreement instance at one rank.
#[derive(Clone, Debug)]
pub struct Instance {
    me: Rank,
    n: u32,
    shape: Shape,
    contributed: bool,
    /// Own contribution merged with every `Up` received so far.
    acc: Value,
    /// A decision heard in an `Up` (a rank that decided under a failed root).
    carried: Option<Value>,
    decided: Option<Value>,
    /// The root whose `Down` this rank's decision came with (itself when
    /// it decided as root, or re-sends as root).
    decided_under: Rank,
    /// The root this rank's tree has now.
    root: Rank,
    /// Who sent an `Up`, and for which root (the latest; roots only move
    /// up, as the lowest live rank does).
    ups: BTreeMap<Rank, Rank>,
    /// Where and for which root the last `Up` went.
    sent_up: Option<(Rank, Rank)>,
    /// (child, root) pairs the decision was sent to.
    told: BTreeSet<(Rank, Rank)>,
    stats: InstanceStats,
}

impl Instance {
    /// An instance at rank `me` of a job of `n` ranks, not yet contributed.
    pub fn new(me: Rank, n: u32, failed: &impl FailedSet) -> Instance {
        Instance::with_shape(me, n, Shape::Ranks, failed)
    }

    /// An instance whose tree has `shape` (every rank of the instance must
    /// be given the same). A `Shape::Hosts` of another job size is
    /// ignored: the tree is then over ranks.
    pub fn with_shape(me: Rank, n: u32, shape: Shape, failed: &impl FailedSet) -> Instance {
        assert!(me < n, "rank {me} outside a job of {n}");
        let shape = match shape {
            Shape::Hosts(h) if h.ranks() == n => Shape::Hosts(h),
            _ => Shape::Ranks,
        };
        Instance {
            me,
            n,
            shape,
            contributed: false,
            acc: Value::neutral(),
            carried: None,
            decided: None,
            decided_under: me,
            root: lowest_live(n, failed).unwrap_or(me),
            ups: BTreeMap::new(),
            sent_up: None,
            told: BTreeSet::new(),
            stats: InstanceStats::default(),
        }
    }

    pub fn has_contributed(&self) -> bool {
        self.contributed
    }

    /// The decision, once made.
    pub fn decision(&self) -> Option<&Value> {
        self.decided.as_ref()
    }

    pub fn stats(&self) -> InstanceStats {
        self.stats
    }

    /// The root of this rank's tree now.
    pub fn root(&self) -> Rank {
        self.root
    }

    /// This rank's contribution. A second call is ignored.
    pub fn contribute(&mut self, value: &Value, failed: &impl FailedSet, out: &mut Out) {
        if self.contributed {
            return;
        }
        self.contributed = true;
        self.acc.merge(value);
        self.progress(failed, out);
    }

    /// An `Up` from `from`.
    pub fn on_up(
        &mut self,
        from: Rank,
        root: Rank,
        value: &Value,
        decided: Option<&Value>,
        failed: &impl FailedSet,
        out: &mut Out,
    ) {
        if from >= self.n || from == self.me {
            return;
        }
        self.acc.merge(value);
        if let (None, Some(d)) = (&self.carried, decided) {
            self.carried = Some(d.clone());
        }
        let latest = self.ups.entry(from).or_insert(root);
        *latest = (*latest).max(root);
        if let Some(d) = &self.decided {
            // A child that has not heard: tell it, under the root this
            // rank's decision stands for.
            if !failed.is_failed(from) && self.told.insert((from, self.decided_under)) {
                out.push((
                    from,
                    AgreementMessage::Down {
                        root: self.decided_under,
                        decision: d.clone(),
                    },
                ));
                self.stats.downs_sent += 1;
            }
            return;
        }
        self.progress(failed, out);
    }

    /// A `Down` from `from`, decided or re-sent by `root`.
    pub fn on_down(
        &mut self,
        _from: Rank,
        root: Rank,
        decision: &Value,
        failed: &impl FailedSet,
        out: &mut Out,
    ) {
        if failed.is_failed(root) {
            // Decided by a root this rank knows failed: if a live rank
            // holds that decision, the new root re-sends it (module docs).
            self.stats.stale_downs += 1;
            return;
        }
        match &self.decided {
            None => {
                self.decided = Some(decision.clone());
                self.decided_under = root;
                self.after_decision(failed, out);
            }
            // A newer root re-sends the decision: pass it on under that
            // root, to children that may have refused the older one.
            Some(_) if root > self.decided_under => {
                self.decided_under = root;
                self.tell_children(failed, out);
            }
            Some(_) => {}
        }
    }

    /// The failed set grew: re-form the tree, send again where the parent
    /// or root changed, adopt children, and go on if that completed a wait.
    pub fn on_failures(&mut self, failed: &impl FailedSet, out: &mut Out) {
        self.stats.reformed += 1;
        if self.decided.is_some() {
            if let Some(root) = lowest_live(self.n, failed) {
                self.root = root;
            }
            self.after_decision(failed, out);
        } else {
            self.progress(failed, out);
        }
    }

    /// Sends up (or decides, at the root) when complete.
    fn progress(&mut self, failed: &impl FailedSet, out: &mut Out) {
        if let Some(root) = lowest_live(self.n, failed) {
            self.root = root;
        }
        if !self.contributed || self.decided.is_some() {
            return;
        }
        let children = self
            .shape
            .effective_children(self.me, self.root, self.n, failed);
        let complete = children
            .iter()
            .all(|c| self.ups.get(c).is_some_and(|&r| r >= self.root));
        if !complete {
            return;
        }
        if self.me == self.root {
            let decision = match &self.carried {
                Some(d) => d.clone(),
                None => {
                    let mut d = self.acc.clone();
                    d.merge_failed(failed.ranks());
                    d
                }
            };
            self.decided = Some(decision);
            self.decided_under = self.me;
            self.tell_children(failed, out);
            return;
        }
        self.send_up(failed, out);
    }

    /// After deciding, or when the tree changed after deciding: the root
    /// tells its children under its own name; anyone else carries the
    /// decision up to the current root, so that a new root re-sends it.
    fn after_decision(&mut self, failed: &impl FailedSet, out: &mut Out) {
        if self.me == self.root && self.decided_under != self.me {
            self.decided_under = self.me;
        }
        self.tell_children(failed, out);
        if self.me != self.root {
            self.send_up(failed, out);
        }
    }

    /// An `Up` for the current root to the effective parent, once per
    /// (parent, root); a decided rank's carries its decision.
    fn send_up(&mut self, failed: &impl FailedSet, out: &mut Out) {
        let Some(parent) = self
            .shape
            .effective_parent(self.me, self.root, self.n, failed)
        else {
            return;
        };
        if self.sent_up == Some((parent, self.root)) {
            return;
        }
        let mut value = self.acc.clone();
        value.merge_failed(failed.ranks());
        let decided = self.decided.clone().or_else(|| self.carried.clone());
        out.push((
            parent,
            AgreementMessage::Up {
                root: self.root,
                value,
                decided,
            },
        ));
        self.stats.ups_sent += 1;
        self.sent_up = Some((parent, self.root));
    }

    fn tell_children(&mut self, failed: &impl FailedSet, out: &mut Out) {
        let Some(d) = &self.decided else {
            return;
        };
        let under = self.decided_under;
        let mut children = self
            .shape
            .effective_children(self.me, self.root, self.n, failed);
        self.shape.send_order(self.me, self.root, &mut children);
        for c in children {
            if self.told.insert((c, under)) {
                out.push((
                    c,
                    AgreementMessage::Down {
                        root: under,
                        decision: d.clone(),
                    },
                ));
                self.stats.downs_sent += 1;
            }
        }
    }
}

/// The lowest rank not known failed (`None`: everybody failed).
pub fn lowest_live(n: u32, failed: &impl FailedSet) -> Option<Rank> {
    let mut candidate: Rank = 0;
    for &f in failed.ranks() {
        if f > candidate {
            break;
        }
        if f == candidate {
            candidate += 1;
        }
    }
    (candidate < n).then_some(candidate)
}

fn rel(rank: Rank, root: Rank, n: u32) -> u32 {
    ((u64::from(rank) + u64::from(n) - u64::from(root)) % u64::from(n)) as u32
}

fn abs(rel: u32, root: Rank, n: u32) -> Rank {
    ((u64::from(rel) + u64::from(root)) % u64::from(n)) as Rank
}

/// The structural parent of `rel` (its highest set bit cleared).
fn parent_rel(rel: u32) -> Option<u32> {
    (rel != 0).then(|| rel & !(1 << (31 - rel.leading_zeros())))
}

/// The structural parent of `rel` in the `radix`-nomial tree: its most
/// significant base-`radix` digit cleared.
fn parent_rel_radix(rel: u32, radix: u32) -> Option<u32> {
    if rel == 0 {
        return None;
    }
    let mut top = 1u32;
    while rel / top >= radix {
        top *= radix;
    }
    Some(rel % top)
}

/// The structural children of `rel` in the `radix`-nomial tree:
/// `rel + j·radix^m` for `j` in `1..radix` and every `radix^m > rel`.
fn children_rel_radix(rel: u32, n: u32, radix: u32) -> impl Iterator<Item = u32> {
    let mut first = 1u64;
    while first <= u64::from(rel) {
        first *= u64::from(radix);
    }
    std::iter::successors(Some(first), move |&p| Some(p * u64::from(radix)))
        .take_while(move |&p| p < u64::from(n))
        .flat_map(move |p| (1..u64::from(radix)).map(move |j| u64::from(rel) + j * p))
        .take_while(move |&c| c < u64::from(n))
        .map(|c| c as u32)
}

/// The structural children of `rel`: `rel + 2^k` for every `2^k > rel`.
fn children_rel(rel: u32, n: u32) -> impl Iterator<Item = u32> {
    let first = if rel == 0 {
        0
    } else {
        32 - rel.leading_zeros()
    };
    (first..32)
        .map(move |k| u64::from(rel) + (1u64 << k))
        .take_while(move |&c| c < u64::from(n))
        .map(|c| c as u32)
}

impl Shape {
    /// `me`'s structural parent in the tree rooted at `root`.
    fn parent(&self, me: Rank, root: Rank, n: u32) -> Option<Rank> {
        let hosts = match self {
            Shape::Ranks => return parent_rel(rel(me, root, n)).map(|p| abs(p, root, n)),
            Shape::Hosts(hosts) => hosts,
        };
        let (h, hr, count) = (hosts.host_of(me), hosts.host_of(root), hosts.count());
        let members = hosts.members(h);
        let head = if h == hr { root } else { members[0] };
        if me != head {
            if members.len() <= FLAT_MAX {
                return Some(head);
            }
            let at = |r: Rank| members.binary_search(&r).expect("a member") as u32;
            let len = members.len() as u32;
            let p = parent_rel(rel(at(me), at(head), len)).expect("not the head");
            return Some(members[abs(p, at(head), len) as usize]);
        }
        let p = parent_rel_radix(rel(h, hr, count), HOST_RADIX)?;
        let ph = abs(p, hr, count);
        Some(if ph == hr { root } else { hosts.members(ph)[0] })
    }

    /// `me`'s structural children in the tree rooted at `root`, into `out`.
    fn children(&self, me: Rank, root: Rank, n: u32, out: &mut Vec<Rank>) {
        let hosts = match self {
            Shape::Ranks => {
                out.extend(children_rel(rel(me, root, n), n).map(|c| abs(c, root, n)));
                return;
            }
            Shape::Hosts(hosts) => hosts,
        };
        let (h, hr, count) = (hosts.host_of(me), hosts.host_of(root), hosts.count());
        let members = hosts.members(h);
        let head = if h == hr { root } else { members[0] };
        if members.len() <= FLAT_MAX {
            if me != head {
                return;
            }
            out.extend(members.iter().copied().filter(|&r| r != head));
        } else {
            let at = |r: Rank| members.binary_search(&r).expect("a member") as u32;
            let len = members.len() as u32;
            out.extend(
                children_rel(rel(at(me), at(head), len), len)
                    .map(|c| members[abs(c, at(head), len) as usize]),
            );
            if me != head {
                return;
            }
        }
        out.extend(
            children_rel_radix(rel(h, hr, count), count, HOST_RADIX)
                .map(|c| abs(c, hr, count))
                .map(|ch| hosts.members(ch)[0]),
        );
    }

    /// Puts `children` (of `me`, ascending) in the order the decision
    /// goes to them: over hosts, the other hosts' heads first, the one
    /// heading the largest subtree (the deepest path) first, then this
    /// host's ranks, so that a host's ranks wake after the messages that go
    /// on to other hosts have left. In the radix tree a child host's
    /// subtree is the larger the smaller its index relative to the root's
    /// host (`rel + j·4^m`: a smaller `m` leaves more levels below it;
    /// within one `m`, the last ones are cut short by the host count).
    /// Over ranks, ascending (unchanged).
    fn send_order(&self, me: Rank, root: Rank, children: &mut [Rank]) {
        let Shape::Hosts(hosts) = self else {
            return;
        };
        let (mine, hr, count) = (hosts.host_of(me), hosts.host_of(root), hosts.count());
        children.sort_by_key(|&c| {
            let h = hosts.host_of(c);
            (h == mine, rel(h, hr, count), c)
        });
    }

    /// `me`'s nearest ancestor not known failed, in the tree rooted at `root`.
    pub fn effective_parent(
        &self,
        me: Rank,
        root: Rank,
        n: u32,
        failed: &impl FailedSet,
    ) -> Option<Rank> {
        let mut at = me;
        while let Some(p) = self.parent(at, root, n) {
            if !failed.is_failed(p) {
                return Some(p);
            }
            at = p;
        }
        None
    }

    /// `me`'s nearest descendants not known failed, in the tree rooted at
    /// `root`, ascending.
    pub fn effective_children(
        &self,
        me: Rank,
        root: Rank,
        n: u32,
        failed: &impl FailedSet,
    ) -> Vec<Rank> {
        let mut out = Vec::new();
        let mut stack = Vec::new();
        self.children(me, root, n, &mut stack);
        while let Some(c) = stack.pop() {
            if failed.is_failed(c) {
                self.children(c, root, n, &mut stack);
            } else {
                out.push(c);
            }
        }
        out.sort_unstable();
        out
    }
}

/// `me`'s nearest ancestor not known failed, in the tree rooted at `root`.
pub fn effective_parent(me: Rank, root: Rank, n: u32, failed: &impl FailedSet) -> Option<Rank> {
    let mut r = rel(me, root, n);
    while let Some(p) = parent_rel(r) {
        let rank = abs(p, root, n);
        if !failed.is_failed(rank) {
            return Some(rank);
        }
        r = p;
    }
    None
}

/// `me`'s nearest descendants not known failed, in the tree rooted at `root`.
pub fn effective_children(me: Rank, root: Rank, n: u32, failed: &impl FailedSet) -> Vec<Rank> {
    let mut out = Vec::new();
    let mut stack: Vec<u32> = children_rel(rel(me, root, n), n).collect();
    while let Some(c) = stack.pop() {
        let rank = abs(c, root, n);
        if failed.is_failed(rank) {
            stack.extend(children_rel(c, n));
        } else {
            out.push(rank);
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RankSet;

    fn set(ranks: &[Rank]) -> RankSet {
        let mut s = RankSet::new();
        for &r in ranks {
            s.insert(r);
        }
        s
    }

    #[test]
    fn the_binomial_tree_covers_every_rank_once() {
        for n in [1u32, 2, 3, 5, 8, 13, 64, 100] {
            for root in [0, n / 2, n - 1] {
                let none = set(&[]);
                let mut seen = vec![0u32; n as usize];
                for r in 0..n {
                    for c in effective_children(r, root, n, &none) {
                        seen[c as usize] += 1;
                        assert_eq!(effective_parent(c, root, n, &none), Some(r));
                    }
                }
                seen[root as usize] += 1;
                assert!(seen.iter().all(|&s| s == 1), "n={n} root={root} {seen:?}");
                assert_eq!(effective_parent(root, root, n, &none), None);
            }
        }
    }

    /// Hosts of `ranks` ranks, rank r on host `place(r)`.
    fn hosts(ranks: u32, place: impl Fn(u32) -> u32) -> Shape {
        let ids: Vec<u32> = (0..ranks).map(place).collect();
        Shape::Hosts(Arc::new(Hosts::new(crate::RingKind::Rank, &ids, 0)))
    }

    /// The depth of `r` below `root` (without failures).
    fn depth(shape: &Shape, r: Rank, root: Rank, n: u32) -> u32 {
        let none = set(&[]);
        let mut d = 0;
        let mut at = r;
        while let Some(p) = shape.effective_parent(at, root, n, &none) {
            d += 1;
            at = p;
        }
        d
    }

    #[test]
    fn the_tree_over_hosts_covers_every_rank_once() {
        for (n, h) in [
            (1u32, 1u32),
            (2, 2),
            (16, 4),
            (13, 3),
            (40, 2),
            (64, 1),
            (7, 7),
        ] {
            for place in [0, 1] {
                let shape = hosts(n, |r| if place == 0 { r % h } else { r * h / n });
                for root in [0, n / 2, n - 1] {
                    let none = set(&[]);
                    let mut seen = vec![0u32; n as usize];
                    for r in 0..n {
                        for c in shape.effective_children(r, root, n, &none) {
                            seen[c as usize] += 1;
                            assert_eq!(shape.effective_parent(c, root, n, &none), Some(r));
                        }
                    }
                    seen[root as usize] += 1;
                    assert!(
                        seen.iter().all(|&s| s == 1),
                        "n={n} h={h} root={root} {seen:?}"
                    );
                    assert_eq!(shape.effective_parent(root, root, n, &none), None);
                }
            }
        }
    }

    #[test]
    fn the_radix_tree_covers_every_index_once_and_is_binomial_at_two() {
        for radix in 2..=5u32 {
            for n in 1..=130u32 {
                let mut parent_of = vec![None; n as usize];
                for rel in 0..n {
                    for c in children_rel_radix(rel, n, radix) {
                        assert!(parent_of[c as usize].is_none(), "{c} twice");
                        parent_of[c as usize] = Some(rel);
                    }
                }
                for rel in 0..n {
                    assert_eq!(parent_of[rel as usize], parent_rel_radix(rel, radix));
                }
                if radix == 2 {
                    for rel in 0..n {
                        assert_eq!(parent_rel_radix(rel, 2), parent_rel(rel));
                        assert!(children_rel_radix(rel, n, 2).eq(children_rel(rel, n)));
                    }
                }
            }
        }
        // Radix 4: 3, 2 and 1 hang under 0; 5 under 1; 21 under 5.
        assert_eq!(parent_rel_radix(21, 4), Some(5));
        assert!(children_rel_radix(0, 17, 4).eq([1, 2, 3, 4, 8, 12, 16]));
        assert!(children_rel_radix(5, 64, 4).eq([21, 37, 53]));
    }

    #[test]
    fn the_tree_over_hosts_crosses_hosts_only_between_heads() {
        // 16 ranks on 4 hosts, r on host r mod 4: 1 + 1 levels deep.
        let shape = hosts(16, |r| r % 4);
        let none = set(&[]);
        assert_eq!(
            shape.effective_children(0, 0, 16, &none),
            vec![1, 2, 3, 4, 8, 12]
        );
        assert_eq!(shape.effective_children(1, 0, 16, &none), vec![5, 9, 13]);
        assert_eq!(
            shape.effective_children(5, 0, 16, &none),
            Vec::<Rank>::new()
        );
        assert_eq!(shape.effective_parent(7, 0, 16, &none), Some(3));
        assert_eq!(shape.effective_parent(3, 0, 16, &none), Some(0));
        // The decision leaves for the other hosts first, the host's own
        // ranks last.
        let mut order = shape.effective_children(0, 0, 16, &none);
        shape.send_order(0, 0, &mut order);
        assert_eq!(order, vec![1, 2, 3, 4, 8, 12]);
        assert_eq!((0..16).map(|r| depth(&shape, r, 0, 16)).max(), Some(2));
        // 8 hosts: 1 to 4 hang under the root's host, 5, 6 and 7 under
        // 1, 2 and 3.
        let eight = hosts(16, |r| r % 8);
        assert_eq!(eight.effective_parent(4, 0, 16, &none), Some(0));
        assert_eq!(eight.effective_parent(6, 0, 16, &none), Some(2));
        // The heads of the largest subtrees first: 1, 2 and 3 each head
        // two hosts, 4 only its own; then the root's host's rank 8.
        let mut order = eight.effective_children(0, 0, 16, &none);
        eight.send_order(0, 0, &mut order);
        assert_eq!(order, vec![1, 2, 3, 4, 8]);
        assert_eq!((0..16).map(|r| depth(&eight, r, 0, 16)).max(), Some(3));
        // Rooted at 5 (0..4 failed): 5 heads host 1; the other hosts'
        // heads (their lowest ranks) failed, so their ranks, and host 0
        // below host 2, are adopted by 5.
        let failed = set(&[0, 1, 2, 3, 4]);
        assert_eq!(lowest_live(16, &failed), Some(5));
        assert_eq!(
            shape.effective_children(5, 5, 16, &failed),
            (6..16).collect::<Vec<Rank>>()
        );
        assert_eq!(shape.effective_parent(7, 5, 16, &failed), Some(5));
        assert_eq!(shape.effective_parent(9, 5, 16, &set(&[0])), Some(5));
        // One rank per host, in rank order: the radix-4 tree over ranks,
        // relative to the root.
        let singles = hosts(13, |r| r);
        for root in [0, 5] {
            for r in 0..13 {
                let expected: Vec<Rank> = {
                    let mut v: Vec<Rank> = children_rel_radix(rel(r, root, 13), 13, HOST_RADIX)
                        .map(|c| abs(c, root, 13))
                        .collect();
                    v.sort_unstable();
                    v
                };
                assert_eq!(singles.effective_children(r, root, 13, &none), expected);
            }
        }
        // A host larger than FLAT_MAX is a binomial tree over its ranks.
        let big = hosts(40, |_| 0);
        assert_eq!(big.effective_children(0, 0, 40, &none).len(), 6);
        assert_eq!((0..40).map(|r| depth(&big, r, 0, 40)).max(), Some(5));
    }

    #[test]
    fn failed_ranks_are_adopted_around() {
        let n = 16;
        let failed = set(&[2, 4]);
        // Root 0 has children 1, 2, 4, 8; 2's children 6 and 10 and 4's
        // child 12 come up to 0. 3 and 5 stay with 1.
        assert_eq!(effective_children(0, 0, n, &failed), vec![1, 6, 8, 10, 12]);
        assert_eq!(effective_parent(6, 0, n, &failed), Some(0));
        assert_eq!(effective_parent(12, 0, n, &failed), Some(0));
        assert_eq!(effective_parent(7, 0, n, &failed), Some(3));
        assert_eq!(effective_children(1, 0, n, &failed), vec![3, 5, 9]);
        assert_eq!(lowest_live(n, &set(&[0, 1, 3])), Some(2));
        assert_eq!(lowest_live(2, &set(&[0, 1])), None);
    }

    #[test]
    fn values_merge_by_and_and_union() {
        let mut a = Value::new(0b1110, &[1, 5]).with_view(3);
        a.merge(&Value::new(0b0111, &[2, 5, 9]).with_view(2));
        assert_eq!(a, Value::new(0b0110, &[1, 2, 5, 9]).with_view(3));
        let before = a.clone();
        a.merge(&before);
        assert_eq!(a, before, "idempotent");
    }
}
