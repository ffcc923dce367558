//! What the simulator records of user agreements and view changes: per
//! agreement and per view id, who raised which value, when and after how
//! many hops; and the report sections built from it at the end
//! (`agreements`, `views`).
//!
//! Owns: [`AgreeTrack`] and [`ViewTrack`], their filling from host events,
//! and their report rows. Must not: change what a rank does, or judge a
//! rank live (the simulator's `is_live` does, at the end of the run).

use super::Simulator;
use super::metrics::ms;
use super::report::{AgreementReport, ViewReport};
use crate::{Rank, Time, View};

/// The distinct values some rank raised, and which one each rank raised.
#[derive(Clone, Debug, Default)]
struct Raised<V> {
    values: Vec<V>,
    /// Per rank: 1 + the index in `values` of what it raised (0: nothing).
    by_rank: Vec<u32>,
}

impl<V: PartialEq> Raised<V> {
    fn record(&mut self, n: u32, rank: Rank, value: V) {
        if self.by_rank.is_empty() {
            self.by_rank = vec![0; n as usize];
        }
        let i = match self.values.iter().position(|v| *v == value) {
            Some(i) => i,
            None => {
                self.values.push(value);
                self.values.len() - 1
            }
        };
        self.by_rank[rank as usize] = i as u32 + 1;
    }

    /// (ranks `live` that raised it, distinct values among them, the value
    /// most of them raised).
    fn among(&self, live: impl Fn(Rank) -> bool) -> (u64, u64, Option<&V>) {
        let mut counts = vec![0u64; self.values.len()];
        for (r, &i) in self.by_rank.iter().enumerate() {
            if i > 0 && live(r as Rank) {
                counts[i as usize - 1] += 1;
            }
        }
        let by = counts.iter().sum();
        let distinct = counts.iter().filter(|&&c| c > 0).count() as u64;
        let most = counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .max_by_key(|(i, c)| (**c, std::cmp::Reverse(*i)))
            .map(|(i, _)| &self.values[i]);
        (by, distinct, most)
    }
}

/// One user agreement (the `seq`-th `agree@T` of the run).
#[derive(Clone, Debug)]
pub(super) struct AgreeTrack {
    started_at: Time,
    raised: Raised<(u64, View)>,
    /// Per rank: hops and time of its decision.
    hops: Vec<u16>,
    at: Vec<Time>,
    aborted: u64,
}

/// One view id.
#[derive(Clone, Debug, Default)]
pub(super) struct ViewTrack {
    raised: Raised<Vec<Rank>>,
    first_at: Option<Time>,
    last_at: Time,
}

impl Simulator {
    /// An `agree@T` starts agreement number `seq` now.
    pub(super) fn agreement_started(&mut self, seq: u64) {
        let i = seq as usize - 1;
        if self.agreements.len() <= i {
            self.agreements.resize_with(i + 1, || AgreeTrack {
                started_at: self.now,
                raised: Raised::default(),
                hops: Vec::new(),
                at: Vec::new(),
                aborted: 0,
            });
        }
        self.agreements[i].started_at = self.now;
    }

    pub(super) fn on_agreed(&mut self, rank: Rank, seq: u64, flags: u64, view: View, hops: u16) {
        let (n, now) = (self.n, self.now);
        self.agreement_started_if_unknown(seq);
        let t = &mut self.agreements[seq as usize - 1];
        t.raised.record(n, rank, (flags, view));
        if t.hops.is_empty() {
            t.hops = vec![0; n as usize];
            t.at = vec![Time::ZERO; n as usize];
        }
        t.hops[rank as usize] = hops;
        t.at[rank as usize] = now;
    }

    pub(super) fn on_agree_aborted(&mut self, seq: u64) {
        self.agreement_started_if_unknown(seq);
        self.agreements[seq as usize - 1].aborted += 1;
    }

    fn agreement_started_if_unknown(&mut self, seq: u64) {
        if seq == 0 || self.agreements.len() < seq as usize {
            self.agreement_started(seq.max(1));
        }
    }

    pub(super) fn on_view(&mut self, rank: Rank, id: u64, failed: Vec<Rank>) {
        let (n, now) = (self.n, self.now);
        let i = id.max(1) as usize - 1;
        if self.views.len() <= i {
            self.views.resize_with(i + 1, ViewTrack::default);
        }
        let t = &mut self.views[i];
        t.raised.record(n, rank, failed);
        t.first_at.get_or_insert(now);
        t.last_at = now;
    }

    pub(super) fn live_count(&self) -> u64 {
        (0..self.n).filter(|&r| self.is_live(r)).count() as u64
    }

    pub(super) fn agreement_reports(&self) -> Vec<AgreementReport> {
        let live = self.live_count();
        self.agreements
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let (decided_by, distinct, most) = t.raised.among(|r| self.is_live(r));
                let deciders = || {
                    (0..self.n).filter(|&r| {
                        self.is_live(r) && t.raised.by_rank.get(r as usize).is_some_and(|&x| x > 0)
                    })
                };
                let hops = deciders().map(|r| t.hops[r as usize]).max();
                let last = deciders().map(|r| t.at[r as usize]).max();
                AgreementReport {
                    seq: i as u64 + 1,
                    started_at_ms: ms(t.started_at),
                    live,
                    decided_by,
                    distinct_decisions: distinct,
                    aborted: t.aborted,
                    hops,
                    virtual_us: last.map(|l| (l - t.started_at).as_nanos() as f64 / 1e3),
                    flags: most.map(|(f, _)| *f),
                    view_id: most.map(|(_, v)| v.id),
                    failed: most.map(|(_, v)| v.failed.clone()).unwrap_or_default(),
                }
            })
            .collect()
    }

    pub(super) fn view_reports(&self) -> Vec<ViewReport> {
        let live = self.live_count();
        self.views
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let (raised_by, distinct, most) = t.raised.among(|r| self.is_live(r));
                ViewReport {
                    id: i as u64 + 1,
                    live,
                    raised_by,
                    distinct_failed_sets: distinct,
                    raised_by_all: t.raised.by_rank.iter().filter(|&&x| x > 0).count() as u64,
                    first_at_ms: t.first_at.map(ms),
                    last_at_ms: t.first_at.map(|_| ms(t.last_at)),
                    failed: most.cloned().unwrap_or_default(),
                }
            })
            .collect()
    }

    /// Every live rank has the results of its agreements and a view
    /// naming every rank it knows gone.
    pub(super) fn agreements_settled(&self) -> bool {
        (0..self.n).all(|r| !self.is_live(r) || self.engine(r).agreements_settled())
    }
}
