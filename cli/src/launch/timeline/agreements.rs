//! Views and agreements in the timeline: the agents' `view`, `agree`,
//! `agreed` and `agree_aborted` lines and the launcher's `--agree`, into
//! state, timeline lines, the summary's lines and the JSON report's
//! `views` and `agreements` sections.
//!
//! Owns: what these lines mean (a view or an agreement is *identical* when
//! every rank that raised it raised the same value; *complete* when every
//! rank live now raised it) and their words. Must not: read a clock or
//! print (every input carries its time), or judge failures (the rest of
//! the timeline does).
//!
//! Lines shown without `--verbose`: the first raise of each view and each
//! decision, every raise that differs from the first (a disagreement, which
//! must never happen), the moment every live rank has it, and every
//! agreement that ended undecided. Once the shutdown began, views (the
//! departures of the shutdown) are shown only if they disagree. Latency of an agreement: from the last
//! rank's `agree` line (the last participant joined) to the last decision.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use ffd::protocol::Rank;
use ffd::protocol::ranks::format_ranks;

use super::{Fact, Timeline};
use crate::launch::agent_line::AgentEvent;

/// Who raised a value and when.
type Raisers = Vec<(Rank, f64)>;

/// One view id, as the agents raised it.
#[derive(Clone, Debug, Default)]
pub(super) struct ViewSeen {
    /// Each distinct failed set, with who raised it and when.
    sets: Vec<(Vec<Rank>, Raisers)>,
    announced: bool,
}

/// A decided value: (flags, view id, failed set).
type Decision = (u64, u64, Vec<Rank>);
/// Who decided a value, when, and after how many hops.
type Deciders = Vec<(Rank, f64, Option<u16>)>;

/// One agreement, by sequence number.
#[derive(Clone, Debug, Default)]
pub(super) struct AgreementSeen {
    /// When `ffd run --agree` asked for it.
    asked_at: Option<f64>,
    /// Each rank's `agree` line.
    calls: BTreeMap<Rank, f64>,
    decisions: Vec<(Decision, Deciders)>,
    aborted: Vec<(Rank, String)>,
    announced: bool,
}

/// A view in the JSON report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ViewEntry {
    pub id: u64,
    /// The failed set most ranks raised.
    pub failed: Vec<Rank>,
    /// Every rank that raised this view id, ascending.
    pub raised_by: Vec<Rank>,
    /// Distinct failed sets raised for this id (1: identical everywhere).
    pub distinct_failed_sets: usize,
    pub first_at_ms: f64,
    pub last_at_ms: f64,
}

/// An agreement in the JSON report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgreementEntry {
    pub seq: u64,
    /// When `ffd run --agree` asked for it (null: the agents alone).
    pub asked_at_ms: Option<f64>,
    /// Ranks that started it (their `agree` line), ascending.
    pub called_by: Vec<Rank>,
    /// Ranks that decided it, ascending.
    pub decided_by: Vec<Rank>,
    /// Distinct decisions (1: identical everywhere).
    pub distinct_decisions: usize,
    /// The decision most ranks took.
    pub flags: Option<u64>,
    pub view: Option<u64>,
    pub failed: Vec<Rank>,
    /// Most hops of any decision.
    pub hops: Option<u16>,
    pub last_call_at_ms: Option<f64>,
    pub last_decided_at_ms: Option<f64>,
    /// From the last call to the last decision.
    pub latency_ms: Option<f64>,
    /// Ranks whose agreement ended undecided, with why.
    pub aborted: Vec<(Rank, String)>,
}

fn ranks_text(ranks: &[Rank]) -> String {
    if ranks.is_empty() {
        "nobody out".to_owned()
    } else {
        format!("{} out", format_ranks(ranks))
    }
}

fn most<V, R>(values: &[(V, Vec<R>)]) -> Option<&V> {
    values.iter().max_by_key(|(_, by)| by.len()).map(|(v, _)| v)
}

impl Timeline {
    /// `ffd run --agree`: the launcher asked every running agent for an
    /// agreement at `t_ms`; it is their next one.
    pub fn agree_requested(&mut self, t_ms: f64) -> Vec<Fact> {
        let seq = self.agreements.len() as u64 + 1;
        self.agreements.entry(seq).or_default().asked_at = Some(t_ms);
        vec![self.note(t_ms, format!("agree: agreement {seq} asked of every rank"))]
    }

    /// The ranks live now: never faulted, not excluded, not gone.
    fn live_now(&self) -> Vec<Rank> {
        (0..self.info.ranks)
            .filter(|&r| {
                let s = &self.ranks[r as usize];
                !s.faulted()
                    && s.self_excluded_at.is_none()
                    && s.left_at.is_none()
                    && s.exited.is_none()
            })
            .collect()
    }

    /// A `view`, `agree`, `agreed` or `agree_aborted` line of rank `rank`;
    /// `say(shown, text)` adds a line (shown without `--verbose` if `shown`).
    pub(super) fn agreement_line(
        &mut self,
        t_ms: f64,
        rank: Rank,
        event: &AgentEvent,
        say: &mut dyn FnMut(bool, String),
    ) {
        match event {
            AgentEvent::View { id, failed, hops } => {
                let quiet = self.shutdown_at.is_some();
                let v = self.views.entry(*id).or_default();
                let first = v.sets.is_empty();
                match v.sets.iter_mut().find(|(set, _)| set == failed) {
                    Some((_, by)) => by.push((rank, t_ms)),
                    None => {
                        let differs = !first;
                        v.sets.push((failed.clone(), vec![(rank, t_ms)]));
                        let hops = hops.map_or_else(String::new, |h| format!(", {h} hops"));
                        let text = if differs {
                            format!(
                                "rank {rank} raised view {id} with another failed set: {} -- views disagree",
                                ranks_text(failed)
                            )
                        } else {
                            format!("rank {rank} raised view {id}: {}{hops}", ranks_text(failed))
                        };
                        say(differs || !quiet, text);
                        return self.announce_views(say);
                    }
                }
                say(false, format!("rank {rank} raised view {id}"));
                self.announce_views(say);
            }
            AgentEvent::Agree { seq, flags } => {
                self.agreements
                    .entry(*seq)
                    .or_default()
                    .calls
                    .insert(rank, t_ms);
                say(
                    false,
                    format!("rank {rank} started agreement {seq} (flags {flags:#x})"),
                );
            }
            AgentEvent::Agreed {
                seq,
                flags,
                view,
                failed,
                hops,
            } => {
                let a = self.agreements.entry(*seq).or_default();
                let decision = (*flags, *view, failed.clone());
                let first = a.decisions.is_empty();
                let since = a.asked_at.map_or_else(String::new, |t| {
                    format!("; {:.1} ms after ffd run asked", t_ms - t)
                });
                match a.decisions.iter_mut().find(|(d, _)| *d == decision) {
                    Some((_, by)) => {
                        by.push((rank, t_ms, *hops));
                        say(false, format!("rank {rank} decided agreement {seq}"));
                    }
                    None => {
                        a.decisions.push((decision, vec![(rank, t_ms, *hops)]));
                        let what = format!("flags {flags:#x}, view {view}, {}", ranks_text(failed));
                        let text = if first {
                            format!("rank {rank} decided agreement {seq}: {what}{since}")
                        } else {
                            format!(
                                "rank {rank} decided agreement {seq} otherwise: {what} -- decisions disagree"
                            )
                        };
                        say(true, text);
                    }
                }
                self.announce_agreements(say);
            }
            AgentEvent::AgreeAborted { seq, reason } => {
                let a = self.agreements.entry(*seq).or_default();
                a.aborted.push((rank, reason.clone()));
                say(
                    true,
                    format!("rank {rank}'s agreement {seq} ended undecided ({reason})"),
                );
            }
            _ => {}
        }
    }

    /// Adds the line of every view and agreement that every rank live now
    /// has raised (once each).
    pub(super) fn announce_views(&mut self, say: &mut dyn FnMut(bool, String)) {
        let live = self.live_now();
        for (id, v) in self.views.iter_mut() {
            if v.announced || v.sets.is_empty() {
                continue;
            }
            let raised = |r: &Rank| v.sets.iter().any(|(_, by)| by.iter().any(|(x, _)| x == r));
            if !live.iter().all(raised) {
                continue;
            }
            v.announced = true;
            if v.sets.len() == 1 && self.shutdown_at.is_some() {
                continue;
            }
            let times = v.sets.iter().flat_map(|(_, by)| by.iter().map(|(_, t)| *t));
            let (first, last) = times.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), t| {
                (a.min(t), b.max(t))
            });
            let how = if v.sets.len() == 1 {
                "identically"
            } else {
                "NOT identically"
            };
            say(
                true,
                format!(
                    "all {} live ranks raised view {id} {how} ({:.1} ms after the first)",
                    live.len(),
                    last - first
                ),
            );
        }
    }

    pub(super) fn announce_agreements(&mut self, say: &mut dyn FnMut(bool, String)) {
        let live = self.live_now();
        for (seq, a) in self.agreements.iter_mut() {
            if a.announced || a.decisions.is_empty() {
                continue;
            }
            let decided = |r: &Rank| {
                a.decisions
                    .iter()
                    .any(|(_, by)| by.iter().any(|(x, _, _)| x == r))
            };
            if !live.iter().all(decided) {
                continue;
            }
            a.announced = true;
            let how = if a.decisions.len() == 1 {
                "identically"
            } else {
                "NOT identically"
            };
            let last = a
                .decisions
                .iter()
                .flat_map(|(_, by)| by.iter().map(|(_, t, _)| *t))
                .fold(f64::NEG_INFINITY, f64::max);
            let mut text = format!(
                "all {} live ranks decided agreement {seq} {how}",
                live.len()
            );
            if let Some(call) = a.calls.values().copied().reduce(f64::max) {
                let _ = write!(text, " ({:.1} ms after the last call)", last - call);
            }
            say(true, text);
        }
    }

    pub(super) fn view_entries(&self) -> Vec<ViewEntry> {
        self.views
            .iter()
            .map(|(&id, v)| {
                let mut raised_by: Vec<Rank> = v
                    .sets
                    .iter()
                    .flat_map(|(_, by)| by.iter().map(|(r, _)| *r))
                    .collect();
                raised_by.sort_unstable();
                raised_by.dedup();
                let times = v.sets.iter().flat_map(|(_, by)| by.iter().map(|(_, t)| *t));
                let (first, last) = times.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), t| {
                    (a.min(t), b.max(t))
                });
                ViewEntry {
                    id,
                    failed: most(&v.sets).cloned().unwrap_or_default(),
                    raised_by,
                    distinct_failed_sets: v.sets.len(),
                    first_at_ms: first,
                    last_at_ms: last,
                }
            })
            .collect()
    }

    pub(super) fn agreement_entries(&self) -> Vec<AgreementEntry> {
        self.agreements
            .iter()
            .map(|(&seq, a)| {
                let mut decided_by: Vec<Rank> = a
                    .decisions
                    .iter()
                    .flat_map(|(_, by)| by.iter().map(|(r, _, _)| *r))
                    .collect();
                decided_by.sort_unstable();
                let times = a
                    .decisions
                    .iter()
                    .flat_map(|(_, by)| by.iter().map(|(_, t, _)| *t));
                let last_decided = times.reduce(f64::max);
                let last_call = a.calls.values().copied().reduce(f64::max);
                let decision = most(&a.decisions);
                AgreementEntry {
                    seq,
                    asked_at_ms: a.asked_at,
                    called_by: a.calls.keys().copied().collect(),
                    decided_by,
                    distinct_decisions: a.decisions.len(),
                    flags: decision.map(|d| d.0),
                    view: decision.map(|d| d.1),
                    failed: decision.map(|d| d.2.clone()).unwrap_or_default(),
                    hops: a
                        .decisions
                        .iter()
                        .flat_map(|(_, by)| by.iter().filter_map(|(_, _, h)| *h))
                        .max(),
                    last_call_at_ms: last_call,
                    last_decided_at_ms: last_decided,
                    latency_ms: last_call.zip(last_decided).map(|(c, d)| d - c),
                    aborted: a.aborted.clone(),
                }
            })
            .collect()
    }

    /// The summary's lines about views and agreements.
    pub(super) fn agreement_summary(&self, out: &mut String) {
        for v in self.view_entries() {
            let _ = writeln!(
                out,
                "view {}: {} (raised by {} ranks{})",
                v.id,
                ranks_text(&v.failed),
                v.raised_by.len(),
                if v.distinct_failed_sets == 1 {
                    ", identical".to_owned()
                } else {
                    format!(", {} DIFFERENT failed sets", v.distinct_failed_sets)
                }
            );
        }
        for a in self.agreement_entries() {
            let latency = a
                .latency_ms
                .map_or_else(String::new, |l| format!(", {l:.1} ms after the last call"));
            let _ = writeln!(
                out,
                "agreement {}: decided by {} of {} ranks that called it{}{}{}",
                a.seq,
                a.decided_by.len(),
                a.called_by.len(),
                match a.distinct_decisions {
                    0 => String::new(),
                    1 => format!(
                        ", identical: flags {:#x}, view {}, {}",
                        a.flags.unwrap_or(0),
                        a.view.unwrap_or(0),
                        ranks_text(&a.failed)
                    ),
                    n => format!(", {n} DIFFERENT decisions"),
                },
                latency,
                if a.aborted.is_empty() {
                    String::new()
                } else {
                    format!(", {} ended undecided", a.aborted.len())
                }
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_input::*;
    use super::*;
    use crate::launch::fault::FaultKind;

    fn view(id: u64, failed: &[Rank]) -> crate::launch::agent_line::AgentLine {
        line(AgentEvent::View {
            id,
            failed: failed.to_vec(),
            hops: Some(4),
        })
    }

    fn agreed(seq: u64, failed: &[Rank]) -> crate::launch::agent_line::AgentLine {
        line(AgentEvent::Agreed {
            seq,
            flags: 6,
            view: 1,
            failed: failed.to_vec(),
            hops: Some(4),
        })
    }

    #[test]
    fn a_view_raised_by_every_live_rank_reads_as_two_lines() {
        let mut tl = Timeline::new(info(4), false);
        let mut facts = tl.fault(100.0, 3, FaultKind::Kill);
        facts.extend(tl.agent_line(110.0, 0, &view(1, &[3])));
        facts.extend(tl.agent_line(110.5, 1, &view(1, &[3])));
        facts.extend(tl.agent_line(111.0, 2, &view(1, &[3])));
        assert_eq!(
            texts(&facts),
            [
                "kill -9 rank 3",
                "rank 0 raised view 1: rank 3 out, 4 hops",
                "all 3 live ranks raised view 1 identically (1.0 ms after the first)",
            ]
        );
        let report = tl.report();
        assert_eq!(report.views.len(), 1);
        assert_eq!(report.views[0].raised_by, [0, 1, 2]);
        assert_eq!(report.views[0].distinct_failed_sets, 1);
        assert!(
            tl.summary()
                .contains("view 1: rank 3 out (raised by 3 ranks, identical)\n")
        );
    }

    #[test]
    fn views_of_the_shutdown_are_quiet_unless_they_disagree() {
        let mut tl = Timeline::new(info(3), false);
        tl.shutdown_started(1000.0);
        let mut facts = tl.agent_line(1001.0, 0, &view(1, &[2]));
        facts.extend(tl.agent_line(1002.0, 1, &view(1, &[2])));
        assert!(facts.is_empty(), "{facts:?}");
        let facts = tl.agent_line(1003.0, 2, &view(1, &[0, 2]));
        assert_eq!(
            texts(&facts),
            [
                "rank 2 raised view 1 with another failed set: ranks 0, 2 out -- views disagree",
                "all 3 live ranks raised view 1 NOT identically (2.0 ms after the first)",
            ]
        );
        assert_eq!(tl.report().views[0].raised_by, [0, 1, 2]);
    }

    #[test]
    fn a_disagreement_is_always_shown_and_counted() {
        let mut tl = Timeline::new(info(3), false);
        tl.agent_line(10.0, 0, &view(1, &[2]));
        let facts = tl.agent_line(11.0, 1, &view(1, &[1, 2]));
        assert_eq!(
            texts(&facts),
            ["rank 1 raised view 1 with another failed set: ranks 1, 2 out -- views disagree"]
        );
        assert!(tl.summary().contains("2 DIFFERENT failed sets"));
    }

    #[test]
    fn agreements_asked_called_and_decided() {
        let mut tl = Timeline::new(info(2), false);
        let mut facts = tl.agree_requested(50.0);
        for r in 0..2 {
            facts.extend(tl.agent_line(
                51.0 + f64::from(r),
                r,
                &line(AgentEvent::Agree {
                    seq: 1,
                    flags: u64::MAX,
                }),
            ));
        }
        facts.extend(tl.agent_line(53.5, 1, &agreed(1, &[])));
        facts.extend(tl.agent_line(54.0, 0, &agreed(1, &[])));
        assert_eq!(
            texts(&facts),
            [
                "agree: agreement 1 asked of every rank",
                "rank 1 decided agreement 1: flags 0x6, view 1, nobody out; 3.5 ms after ffd run asked",
                "all 2 live ranks decided agreement 1 identically (2.0 ms after the last call)",
            ]
        );
        let a = &tl.report().agreements[0];
        assert_eq!(
            (a.decided_by.clone(), a.distinct_decisions, a.latency_ms),
            (vec![0, 1], 1, Some(2.0))
        );
        let aborted = tl.agent_line(
            60.0,
            0,
            &line(AgentEvent::AgreeAborted {
                seq: 2,
                reason: "left".into(),
            }),
        );
        assert_eq!(
            texts(&aborted),
            ["rank 0's agreement 2 ended undecided (left)"]
        );
    }
}
