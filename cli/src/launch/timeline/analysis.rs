//! Analysis: what the timeline's state means, by the definitions in the
//! [module doc](super): the first detection of a failure, which ranks are
//! live for it, who learned and who never did, false reports and abnormal
//! exits.
//!
//! Owns: those definitions, as queries. Must not: change the state (that
//! is [`ingest`](super::ingest)'s) or word anything (that is
//! [`render`](super::render)'s).

use std::collections::BTreeMap;

use ffd::protocol::{Cause, Rank};

use super::{AgentExit, Failure, FalseReport, Reported, Timeline};

/// The first detection of a failure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Detection {
    pub at: f64,
    pub detector: Option<Rank>,
    pub cause: Cause,
}

impl Reported {
    pub(super) fn is_self_declaration(&self) -> bool {
        match self.detector {
            Some(d) => d == self.by,
            None => self.cause != Cause::Notice,
        }
    }
}

impl Timeline {
    pub(super) fn failure_of(&self, rank: Rank) -> Option<&Failure> {
        self.failures.iter().find(|f| f.rank == rank)
    }

    /// A clean exit, or the SIGKILL of a `--kill` (not one the launcher
    /// sent after the shutdown bound).
    pub(super) fn expected_exit(&self, rank: Rank, exit: AgentExit) -> bool {
        let killed = self.ranks.get(rank as usize).is_some_and(|s| s.killed);
        exit.is_clean() || (killed && exit.signal == Some(9) && !exit.forced)
    }

    fn abnormal(&self, rank: Rank) -> bool {
        match self.ranks[rank as usize].exited {
            Some((_, exit)) => !self.expected_exit(rank, exit),
            None => false,
        }
    }

    /// The first detection of `rank`'s failure.
    pub(super) fn detection(&self, rank: Rank) -> Option<Detection> {
        let list = self.reports.get(&rank)?;
        let earliest = |self_only: bool| {
            list.iter()
                .filter(|r| !self_only || r.is_self_declaration())
                .min_by(|a, b| a.t.total_cmp(&b.t).then(a.seq.cmp(&b.seq)))
        };
        let r = earliest(true).or_else(|| earliest(false))?;
        Some(Detection {
            at: r.t,
            detector: r.detector.or(r.is_self_declaration().then_some(r.by)),
            cause: r.cause,
        })
    }

    /// The ranks live for `failed`'s failure, as defined in the module doc.
    pub(super) fn live_for(&self, failed: Rank) -> Vec<Rank> {
        let reference = self
            .detection(failed)
            .map(|d| d.at)
            .or(self.shutdown_at)
            .unwrap_or(f64::INFINITY);
        let learned = self.learned(failed);
        (0..self.info.ranks)
            .filter(|&r| {
                let s = &self.ranks[r as usize];
                // A rank that reported it was there for it, whatever the
                // order in which its lines and the detector's arrived.
                let gone = !learned.contains_key(&r)
                    && (s.left_at.is_some_and(|t| t < reference)
                        || s.exited.is_some_and(|(t, _)| t < reference));
                r != failed && !s.faulted() && s.self_excluded_at.is_none() && !gone
            })
            .collect()
    }

    /// (first report time per reporter) for `failed`.
    pub(super) fn learned(&self, failed: Rank) -> BTreeMap<Rank, f64> {
        let mut out = BTreeMap::new();
        for r in self.reports.get(&failed).into_iter().flatten() {
            if r.by != failed {
                let t = out.entry(r.by).or_insert(r.t);
                *t = f64::min(*t, r.t);
            }
        }
        out
    }

    /// The live ranks that never learned of `failed`, ascending.
    pub(super) fn never_learned(&self, failed: Rank) -> Vec<Rank> {
        let learned = self.learned(failed);
        self.live_for(failed)
            .into_iter()
            .filter(|r| !learned.contains_key(r))
            .collect()
    }

    /// When the last live rank learned of `failed`, if all did.
    pub(super) fn all_notified_at(&self, failed: Rank) -> Option<f64> {
        let detected = self.detection(failed)?.at;
        let learned = self.learned(failed);
        let mut last = detected;
        for r in self.live_for(failed) {
            last = last.max(*learned.get(&r)?);
        }
        Some(last)
    }

    pub(super) fn false_reports(&self) -> Vec<FalseReport> {
        self.reports
            .iter()
            .filter(|&(&rank, _)| {
                let s = &self.ranks[rank as usize];
                let crashed = self.abnormal(rank) && s.self_excluded_at.is_none();
                !s.faulted() && !crashed
            })
            .map(|(&rank, list)| {
                let mut by: Vec<Rank> = list.iter().map(|r| r.by).collect();
                by.sort_unstable();
                FalseReport {
                    rank,
                    reported_by: by,
                }
            })
            .filter(|f| !f.reported_by.is_empty())
            .collect()
    }

    /// The ranks whose process ended abnormally, with how.
    pub fn abnormal_exits(&self) -> Vec<(Rank, AgentExit)> {
        (0..self.info.ranks)
            .filter(|&r| self.abnormal(r))
            .filter_map(|r| Some((r, self.ranks[r as usize].exited?.1)))
            .collect()
    }

    /// Lines that were not agent lines, and unknown events, in all.
    pub fn bad_lines(&self) -> (u64, u64) {
        self.ranks.iter().fold((0, 0), |(b, u), s| {
            (b + u64::from(s.bad_lines), u + u64::from(s.unknown_events))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_input::*;
    use super::*;
    use crate::launch::agent_line::AgentEvent;
    use crate::launch::fault::FaultKind;

    #[test]
    fn a_self_excluded_rank_is_not_live_for_a_later_failure() {
        let mut tl = Timeline::new(info(4), false);
        tl.fault(100.0, 1, FaultKind::Stop);
        tl.agent_line(
            150.0,
            1,
            &line(AgentEvent::SelfExcluded {
                by: None,
                why: None,
            }),
        );
        tl.fault(300.0, 3, FaultKind::Kill);
        tl.agent_line(301.0, 0, &failed(3, Cause::InBand, 0));
        let facts = tl.agent_line(302.0, 2, &failed(3, Cause::Notice, 0));
        assert_eq!(
            texts(&facts),
            ["all 2 live ranks know rank 3 failed (1.0 ms after first detection)"]
        );
    }

    #[test]
    fn a_rank_reported_but_never_faulted_is_a_false_report() {
        let mut tl = Timeline::new(info(4), false);
        let facts = tl.agent_line(50.0, 0, &failed(2, Cause::Timeout, 0));
        assert_eq!(
            texts(&facts),
            ["rank 0 detected rank 2 (timeout) -- false report: rank 2 was not faulted"]
        );
        assert!(
            tl.agent_line(52.0, 3, &failed(2, Cause::Notice, 0))
                .is_empty()
        );
        tl.agent_line(53.0, 1, &failed(2, Cause::Notice, 0));
        let report = tl.report();
        assert_eq!(
            report.false_reports,
            [FalseReport {
                rank: 2,
                reported_by: vec![0, 1, 3]
            }]
        );
        assert!(report.failures.is_empty());
        assert!(
            tl.summary()
                .contains("false reports: rank 2 reported failed by ranks 0, 1, 3\n")
        );
    }

    #[test]
    fn a_rank_that_crashed_by_itself_is_not_falsely_reported() {
        let mut tl = Timeline::new(info(3), false);
        let facts = tl.agent_exited(40.0, 2, AgentExit::code(101));
        assert_eq!(texts(&facts), ["rank 2 exited abnormally (code 101)"]);
        tl.agent_line(45.0, 0, &failed(2, Cause::InBand, 0));
        assert!(tl.report().false_reports.is_empty());
        assert_eq!(tl.abnormal_exits(), [(2, AgentExit::code(101))]);
        assert!(tl.summary().contains("abnormal exits: rank 2 (code 101)\n"));
    }

    #[test]
    fn a_live_rank_that_never_learned_leaves_all_notified_null() {
        let mut tl = Timeline::new(info(4), false);
        tl.fault(500.0, 3, FaultKind::Kill);
        tl.agent_line(502.0, 2, &failed(3, Cause::InBand, 2));
        let facts = tl.agent_line(503.0, 0, &failed(3, Cause::Notice, 2));
        assert!(facts.is_empty(), "rank 1 has not learned: {facts:?}");
        tl.shutdown_started(2500.0);
        for r in 0..3 {
            tl.agent_exited(2510.0, r, AgentExit::code(0));
        }
        let f = &tl.report().failures[0];
        assert_eq!(f.all_notified_at_ms, None);
        assert_eq!(f.notified.as_deref(), Some(&[0, 2][..]));
        assert_eq!(f.missed, 1);
        assert_eq!(tl.never_learned(3), [1]);
        let summary = tl.summary();
        assert!(summary.contains("      2/3\n"), "{summary}");
        assert!(
            summary.contains("never learned of rank 3's failure: rank 1\n"),
            "{summary}"
        );
        assert!(summary.contains("            -"), "{summary}");
    }

    #[test]
    fn the_earliest_of_two_detectors_wins_and_the_other_is_also_shown() {
        let mut tl = Timeline::new(info(4), false);
        tl.fault(100.0, 3, FaultKind::Kill);
        // Rank 2's line arrives first but rank 0 detected earlier.
        let first = tl.agent_line(112.0, 2, &failed(3, Cause::Timeout, 2));
        let second = tl.agent_line(110.0, 0, &failed(3, Cause::InBand, 0));
        assert_eq!(
            texts(&first),
            ["rank 2 detected rank 3 (timeout, 12.0 ms after kill -9)"]
        );
        assert_eq!(
            texts(&second),
            ["rank 0 also detected rank 3 (in-band, 10.0 ms after kill -9)"]
        );
        let f = &tl.report().failures[0];
        assert_eq!(
            (f.detected_at_ms, f.detector, f.cause),
            (Some(110.0), Some(0), Some(Cause::InBand))
        );

        // At equal times, the first to arrive wins.
        let mut tl = Timeline::new(info(4), false);
        tl.fault(100.0, 3, FaultKind::Kill);
        tl.agent_line(110.0, 2, &failed(3, Cause::Timeout, 2));
        tl.agent_line(110.0, 0, &failed(3, Cause::InBand, 0));
        assert_eq!(tl.report().failures[0].detector, Some(2));
    }

    #[test]
    fn a_notice_before_the_detectors_own_line_does_not_make_it_the_detector() {
        let mut tl = Timeline::new(info(3), false);
        tl.fault(0.0, 2, FaultKind::Kill);
        assert!(
            tl.agent_line(5.0, 1, &failed(2, Cause::Notice, 0))
                .is_empty()
        );
        let f = &tl.report().failures[0];
        // Only a notice so far: the detector is the one it names.
        assert_eq!((f.detector, f.cause), (Some(0), Some(Cause::Notice)));
        tl.agent_line(4.0, 0, &failed(2, Cause::InBand, 0));
        let f = &tl.report().failures[0];
        assert_eq!(
            (f.detected_at_ms, f.detector, f.cause),
            (Some(4.0), Some(0), Some(Cause::InBand))
        );
        assert_eq!(f.all_notified_at_ms, Some(5.0));
    }

    #[test]
    fn a_rank_that_left_before_the_detection_is_not_live() {
        let mut tl = Timeline::new(info(4), false);
        let left = tl.agent_line(50.0, 0, &line(AgentEvent::Left { rank: 1 }));
        assert_eq!(texts(&left), ["rank 0 saw rank 1 leave"]);
        tl.fault(100.0, 3, FaultKind::Kill);
        tl.agent_line(101.0, 2, &failed(3, Cause::InBand, 2));
        let facts = tl.agent_line(102.0, 0, &failed(3, Cause::Notice, 2));
        assert_eq!(
            texts(&facts),
            ["all 2 live ranks know rank 3 failed (1.0 ms after first detection)"]
        );
        assert_eq!(tl.report().left, [1]);
    }

    #[test]
    fn a_rank_that_learned_then_left_counts_even_if_its_lines_came_first() {
        // Times by arrival: rank 1's report and exit arrive before the
        // detector's own line. It learned, so it is live and notified.
        let mut tl = Timeline::new(info(3), false);
        tl.fault(100.0, 2, FaultKind::Kill);
        tl.shutdown_started(400.0);
        tl.agent_line(400.5, 1, &failed(2, Cause::Notice, 0));
        tl.agent_line(400.6, 1, &line(AgentEvent::Exit));
        tl.agent_exited(400.7, 1, AgentExit::code(0));
        let facts = tl.agent_line(401.0, 0, &failed(2, Cause::InBand, 0));
        assert_eq!(
            texts(&facts),
            [
                "rank 0 detected rank 2 (in-band, 301.0 ms after kill -9)",
                "all 2 live ranks know rank 2 failed (0.0 ms after first detection)",
            ]
        );
        assert_eq!(tl.report().failures[0].all_notified_at_ms, Some(401.0));
    }
}
