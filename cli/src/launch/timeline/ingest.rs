//! Ingest: the agents' lines and the launcher's own facts (faults sent,
//! processes reaped, shutdown begun) into the timeline's state, each
//! returning the lines to print.
//!
//! Owns: updating the state, and deciding which inputs are worth a line
//! (always, or only with `--verbose`). Must not: word a line (that is
//! [`render`](super::render)'s) or define what the state means (that is
//! [`analysis`](super::analysis)'s).

use ffd::protocol::Rank;

use super::{AgentExit, Fact, Failure, Happening, Reported, Timeline};
use crate::launch::agent_line::{AgentEvent, AgentLine};
use crate::launch::fault::FaultKind;

impl Timeline {
    /// A fact of the launcher's own (start, shutdown), in the same format.
    pub fn note(&self, t_ms: f64, text: impl Into<String>) -> Fact {
        Fact {
            t_ms,
            text: text.into(),
        }
    }

    /// A line that rank `rank` printed, at `t_ms`. The launcher has checked
    /// that `me`, if given, is `rank`.
    pub fn agent_line(&mut self, t_ms: f64, rank: Rank, line: &AgentLine) -> Vec<Fact> {
        let mut facts = Vec::new();
        if rank >= self.info.ranks {
            return facts;
        }
        let verbose = self.verbose;
        if matches!(
            line.event,
            AgentEvent::View { .. }
                | AgentEvent::Agree { .. }
                | AgentEvent::Agreed { .. }
                | AgentEvent::AgreeAborted { .. }
        ) {
            self.agreement_line(t_ms, rank, &line.event, &mut |shown, text| {
                if shown || verbose {
                    facts.push(Fact { t_ms, text });
                }
            });
            return facts;
        }
        let mut say = |shown: bool, what: Happening<'_>| {
            if shown || verbose {
                facts.push(Fact::of(t_ms, &what));
            }
        };
        match &line.event {
            AgentEvent::Ready { pid, core } => say(
                false,
                Happening::Ready {
                    rank,
                    pid: *pid,
                    core: *core,
                },
            ),
            AgentEvent::Failed {
                rank: failed,
                cause,
                detector,
                detail,
                ..
            } => {
                let failed = *failed;
                if failed >= self.info.ranks {
                    return self.outside_job(t_ms, rank, "failed", failed);
                }
                self.seq += 1;
                let report = Reported {
                    by: rank,
                    t: t_ms,
                    cause: *cause,
                    detector: *detector,
                    seq: self.seq,
                };
                let after = self
                    .failure_of(failed)
                    .map(|f| (f.fault, t_ms - f.injected_at));
                let list = self.reports.entry(failed).or_default();
                if list.iter().any(|r| r.by == rank) {
                    say(false, Happening::Repeated { rank, failed });
                } else {
                    let earlier_detections =
                        list.iter().filter(|r| r.is_self_declaration()).count();
                    let is_self = report.is_self_declaration();
                    list.push(report);
                    if is_self {
                        say(
                            true,
                            Happening::Detected {
                                rank,
                                failed,
                                cause: *cause,
                                also: earlier_detections > 0,
                                after,
                                detail: detail.as_deref(),
                            },
                        );
                    } else {
                        say(
                            false,
                            Happening::Learned {
                                rank,
                                failed,
                                cause: *cause,
                                detector: *detector,
                            },
                        );
                    }
                }
            }
            AgentEvent::HostFailed { host, ranks } => say(
                true,
                Happening::HostFailed {
                    rank,
                    host: *host,
                    ranks,
                },
            ),
            AgentEvent::Left { rank: gone } => {
                let gone = *gone;
                if gone >= self.info.ranks {
                    return self.outside_job(t_ms, rank, "left", gone);
                }
                let s = &mut self.ranks[gone as usize];
                let first = s.left_at.is_none();
                s.left_at = Some(s.left_at.map_or(t_ms, |l| l.min(t_ms)));
                say(
                    first && self.shutdown_at.is_none(),
                    Happening::SawLeave { rank, gone },
                );
            }
            AgentEvent::SelfExcluded { by, why } => {
                let s = &mut self.ranks[rank as usize];
                if s.self_excluded_at.is_none() {
                    s.self_excluded_at = Some(t_ms);
                    s.no_quorum = why.as_deref() == Some("no_quorum");
                    say(
                        true,
                        Happening::SelfExcluded {
                            rank,
                            by: *by,
                            why: why.as_deref(),
                        },
                    );
                }
            }
            AgentEvent::SlowEmitter {
                rank: slow,
                late_ms,
            } => {
                self.slow_warnings += 1;
                let first = self.slow_pairs.insert((rank, *slow));
                say(
                    first,
                    Happening::SlowEmitter {
                        rank,
                        slow: *slow,
                        late_ms: *late_ms,
                    },
                );
            }
            AgentEvent::Payload { origin, seq, text } => say(
                false,
                Happening::Payload {
                    rank,
                    origin: *origin,
                    seq: *seq,
                    text,
                },
            ),
            AgentEvent::Stats { stats } => {
                self.ranks[rank as usize].stats = Some(stats.clone());
                say(false, Happening::Stats { rank, stats });
            }
            AgentEvent::Exit => {
                let s = &mut self.ranks[rank as usize];
                s.left_at = Some(s.left_at.map_or(t_ms, |l| l.min(t_ms)));
                say(self.shutdown_at.is_none(), Happening::Exiting { rank });
            }
            AgentEvent::Unknown { kind } => {
                self.ranks[rank as usize].unknown_events += 1;
                say(false, Happening::UnknownEvent { rank, kind });
            }
            // Taken above (`agreements`).
            AgentEvent::View { .. }
            | AgentEvent::Agree { .. }
            | AgentEvent::Agreed { .. }
            | AgentEvent::AgreeAborted { .. } => {}
        }
        self.announce_all_notified(&mut facts);
        self.announce_complete(t_ms, &mut facts);
        facts
    }

    /// Adds the lines of views and agreements every rank live now has
    /// (the live set shrinks with faults, exits and exclusions).
    fn announce_complete(&mut self, t_ms: f64, facts: &mut Vec<Fact>) {
        let mut say = |_: bool, text: String| facts.push(Fact { t_ms, text });
        self.announce_views(&mut say);
        self.announce_agreements(&mut say);
    }

    /// A line of rank `rank` that is not an agent line.
    /// `why` completes "a line that …", e.g. "is not JSON".
    pub fn unparseable(&mut self, t_ms: f64, rank: Rank, text: &str, why: &str) -> Vec<Fact> {
        self.bad_line(t_ms, rank, &Happening::Unreadable { rank, text, why })
    }

    fn outside_job(&mut self, t_ms: f64, rank: Rank, kind: &'static str, about: Rank) -> Vec<Fact> {
        self.bad_line(t_ms, rank, &Happening::OutsideJob { rank, kind, about })
    }

    fn bad_line(&mut self, t_ms: f64, rank: Rank, what: &Happening<'_>) -> Vec<Fact> {
        if let Some(s) = self.ranks.get_mut(rank as usize) {
            s.bad_lines += 1;
        }
        if self.verbose {
            vec![Fact::of(t_ms, what)]
        } else {
            Vec::new()
        }
    }

    /// The launcher sent `kind` to rank `rank`'s process at `t_ms`.
    pub fn fault(&mut self, t_ms: f64, rank: Rank, kind: FaultKind) -> Vec<Fact> {
        let mut facts = Vec::new();
        let Some(s) = self.ranks.get_mut(rank as usize) else {
            return facts;
        };
        match kind {
            FaultKind::Kill => s.killed = true,
            FaultKind::Stop => {
                s.stopped = true;
                s.hung = true;
            }
            FaultKind::Cont => s.hung = false,
            FaultKind::Cut => {
                s.stopped = true;
                s.cut = true;
            }
            FaultKind::Heal => s.cut = false,
        }
        facts.push(Fact::of(t_ms, &Happening::Fault { rank, kind }));
        if kind.is_failure() && self.failure_of(rank).is_none() {
            self.failures.push(Failure {
                rank,
                fault: kind,
                injected_at: t_ms,
                announced: false,
            });
        }
        self.announce_all_notified(&mut facts);
        self.announce_complete(t_ms, &mut facts);
        facts
    }

    /// Whether rank `rank` is stopped now (for the launcher's clean-up).
    pub fn is_hung(&self, rank: Rank) -> bool {
        self.ranks.get(rank as usize).is_some_and(|s| s.hung)
    }

    /// Whether rank `rank`'s host link is cut now (for the launcher's clean-up).
    pub fn is_cut(&self, rank: Rank) -> bool {
        self.ranks.get(rank as usize).is_some_and(|s| s.cut)
    }

    /// The launcher reaped rank `rank`'s process.
    pub fn agent_exited(&mut self, t_ms: f64, rank: Rank, exit: AgentExit) -> Vec<Fact> {
        let mut facts = Vec::new();
        let Some(s) = self.ranks.get_mut(rank as usize) else {
            return facts;
        };
        s.exited = Some((t_ms, exit));
        let expected = self.expected_exit(rank, exit);
        if self.verbose || !expected || self.shutdown_at.is_none() {
            let what = Happening::Exited {
                rank,
                exit,
                expected,
            };
            facts.push(Fact::of(t_ms, &what));
        }
        self.announce_all_notified(&mut facts);
        self.announce_complete(t_ms, &mut facts);
        facts
    }

    /// The launcher began shutting the job down at `t_ms`; departures after
    /// this are expected and no longer printed one by one.
    pub fn shutdown_started(&mut self, t_ms: f64) {
        self.shutdown_at.get_or_insert(t_ms);
    }

    /// Adds the all-notified line of every failure that just became so.
    fn announce_all_notified(&mut self, facts: &mut Vec<Fact>) {
        for i in 0..self.failures.len() {
            if self.failures[i].announced {
                continue;
            }
            let rank = self.failures[i].rank;
            let Some(at) = self.all_notified_at(rank) else {
                continue;
            };
            let detected = self.detection(rank).map_or(at, |d| d.at);
            self.failures[i].announced = true;
            let what = Happening::AllNotified {
                failed: rank,
                live: self.live_for(rank).len(),
                after_detection: at - detected,
            };
            facts.push(Fact::of(at, &what));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_input::*;
    use super::*;
    use ffd::protocol::Cause;

    #[test]
    fn a_cut_host_is_a_failure_of_its_ranks_not_a_false_report() {
        let mut tl = Timeline::new(info(4), false);
        let mut facts = tl.fault(100.0, 1, FaultKind::Cut);
        facts.extend(tl.fault(100.0, 3, FaultKind::Cut));
        assert!(tl.is_cut(1) && tl.is_cut(3) && !tl.is_hung(1));
        for failed_rank in [1, 3] {
            facts.extend(tl.agent_line(210.0, 0, &failed(failed_rank, Cause::Timeout, 0)));
            facts.extend(tl.agent_line(212.0, 2, &failed(failed_rank, Cause::Notice, 0)));
        }
        facts.extend(tl.fault(400.0, 1, FaultKind::Heal));
        assert!(!tl.is_cut(1) && tl.is_cut(3));
        let texts = texts(&facts);
        assert_eq!(texts[0], "link cut of rank 1's host");
        assert!(
            texts.contains(&"rank 0 detected rank 1 (timeout, 110.0 ms after link cut)".to_owned()),
            "{texts:?}"
        );
        assert!(
            texts.contains(
                &"all 2 live ranks know rank 3 failed (2.0 ms after first detection)".to_owned()
            ),
            "{texts:?}"
        );
        assert_eq!(texts.last().unwrap(), "link healed of rank 1's host");
        let report = tl.report();
        assert!(report.false_reports.is_empty());
        let faults: Vec<&str> = report.failures.iter().map(|f| f.fault.as_str()).collect();
        assert_eq!(faults, ["cut", "cut"]);
    }

    #[test]
    fn a_stop_then_cont_and_self_exclusion_is_a_stop_failure_not_a_false_report() {
        let mut tl = Timeline::new(info(4), false);
        let mut facts = tl.fault(100.0, 1, FaultKind::Stop);
        assert!(tl.is_hung(1));
        facts.extend(tl.agent_line(210.0, 0, &failed(1, Cause::Timeout, 0)));
        facts.extend(tl.agent_line(212.0, 2, &failed(1, Cause::Notice, 0)));
        facts.extend(tl.agent_line(213.0, 3, &failed(1, Cause::Notice, 0)));
        facts.extend(tl.fault(400.0, 1, FaultKind::Cont));
        assert!(!tl.is_hung(1));
        facts.extend(tl.agent_line(
            405.0,
            1,
            &line(AgentEvent::SelfExcluded {
                by: Some(0),
                why: None,
            }),
        ));
        assert_eq!(
            texts(&facts),
            [
                "kill -STOP rank 1",
                "rank 0 detected rank 1 (timeout, 110.0 ms after kill -STOP)",
                "all 3 live ranks know rank 1 failed (3.0 ms after first detection)",
                "kill -CONT rank 1",
                "rank 1 self-excluded",
            ]
        );
        let report = tl.report();
        assert_eq!(report.failures.len(), 1, "a cont is not a failure");
        assert_eq!(report.failures[0].fault, "stop");
        assert_eq!(report.failures[0].all_notified_at_ms, Some(213.0));
        assert_eq!(report.self_excluded, [1]);
        assert!(report.false_reports.is_empty());
        assert!(tl.summary().contains("self-excluded: rank 1\n"));
    }

    #[test]
    fn unknown_and_unparseable_lines_are_counted_and_shown_only_when_verbose() {
        let mut quiet = Timeline::new(info(2), false);
        let mut loud = Timeline::new(info(2), true);
        for tl in [&mut quiet, &mut loud] {
            let a = tl.agent_line(
                1.0,
                1,
                &line(AgentEvent::Unknown {
                    kind: "rejoined".into(),
                }),
            );
            let b = tl.unparseable(2.0, 0, "hello", "is not JSON (expected value)");
            let c = tl.agent_line(3.0, 0, &failed(7, Cause::InBand, 0));
            let printed = [a, b, c].concat();
            assert_eq!(tl.bad_lines(), (2, 1));
            if tl.verbose {
                assert_eq!(
                    texts(&printed),
                    [
                        "rank 1 printed an unknown event `rejoined`",
                        "rank 0 printed a line that is not JSON (expected value): hello",
                        "rank 0 printed a `failed` line about rank 7, outside the job",
                    ]
                );
            } else {
                assert!(printed.is_empty(), "{printed:?}");
            }
            assert!(tl.summary().contains(
                "unparseable lines: 2, unknown events: 1 (rank 0: 2 + 0, rank 1: 0 + 1;"
            ));
        }
    }

    #[test]
    fn departures_during_shutdown_are_quiet_but_recorded() {
        let mut tl = Timeline::new(info(2), false);
        tl.shutdown_started(2000.0);
        let mut facts = tl.agent_line(2001.0, 0, &line(AgentEvent::Left { rank: 1 }));
        facts.extend(tl.agent_line(2002.0, 1, &line(AgentEvent::Exit)));
        facts.extend(tl.agent_exited(2003.0, 1, AgentExit::code(0)));
        assert!(facts.is_empty(), "{facts:?}");
        let stats = serde_json::json!({"beats": 200});
        tl.agent_line(
            2002.0,
            0,
            &line(AgentEvent::Stats {
                stats: stats.clone(),
            }),
        );
        let report = tl.report();
        assert_eq!(report.left, [1]);
        assert_eq!(report.stats.get(&0), Some(&stats));
        // A straggler the launcher killed is abnormal and always shown.
        let forced = AgentExit {
            forced: true,
            ..AgentExit::signal(9)
        };
        let facts = tl.agent_exited(12_000.0, 0, forced);
        assert_eq!(facts.len(), 1);
        assert!(facts[0].text.contains("did not exit in time"));
        assert_eq!(tl.abnormal_exits(), [(0, forced)]);
    }

    #[test]
    fn slow_emitter_warnings_are_shown_once_per_pair_and_counted() {
        let mut tl = Timeline::new(info(3), false);
        let slow = |rank| {
            line(AgentEvent::SlowEmitter {
                rank,
                late_ms: Some(37.0),
            })
        };
        assert_eq!(
            texts(&tl.agent_line(1.0, 0, &slow(2))),
            ["rank 0 warns: rank 2's heartbeat is late by 37.0 ms"]
        );
        assert!(tl.agent_line(2.0, 0, &slow(2)).is_empty());
        assert_eq!(tl.agent_line(3.0, 1, &slow(2)).len(), 1);
        assert!(tl.summary().contains("slow-emitter warnings: 3\n"));
    }

    #[test]
    fn verbose_shows_every_line_and_quiet_only_what_matters() {
        let inputs = |tl: &mut Timeline| {
            let mut facts = tl.agent_line(
                0.0,
                0,
                &line(AgentEvent::Ready {
                    pid: Some(42),
                    core: None,
                }),
            );
            facts.extend(tl.fault(10.0, 2, FaultKind::Kill));
            facts.extend(tl.agent_line(12.0, 1, &failed(2, Cause::Notice, 0)));
            facts.extend(tl.agent_line(13.0, 0, &failed(2, Cause::Timeout, 0)));
            facts.extend(tl.agent_line(14.0, 0, &failed(2, Cause::Timeout, 0)));
            facts.extend(tl.agent_line(
                15.0,
                1,
                &line(AgentEvent::Payload {
                    origin: 0,
                    seq: 3,
                    text: "revoke".into(),
                }),
            ));
            facts.extend(tl.agent_line(
                16.0,
                1,
                &line(AgentEvent::Stats {
                    stats: serde_json::json!({"n": 1}),
                }),
            ));
            texts(&facts)
        };
        let quiet = inputs(&mut Timeline::new(info(3), false));
        assert_eq!(
            quiet,
            [
                "kill -9 rank 2",
                "rank 0 detected rank 2 (timeout, 3.0 ms after kill -9)",
                "all 2 live ranks know rank 2 failed (0.0 ms after first detection)",
            ]
        );
        let loud = inputs(&mut Timeline::new(info(3), true));
        assert_eq!(
            loud,
            [
                "rank 0 ready (pid 42, core any)",
                "kill -9 rank 2",
                "rank 1 learned rank 2 failed (notice, declared by rank 0)",
                "rank 0 detected rank 2 (timeout, 3.0 ms after kill -9)",
                "all 2 live ranks know rank 2 failed (0.0 ms after first detection)",
                "rank 0 repeated that rank 2 failed",
                "rank 1 received payload 3 from rank 0: revoke",
                "rank 1 stats: {\"n\":1}",
            ]
        );
    }
}
