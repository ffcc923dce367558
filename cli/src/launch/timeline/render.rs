//! Render: the words of every line `ffd run` prints about the job (the
//! live timeline's [`Fact`]s and the summary) and the JSON [`Report`].
//!
//! Owns: the wording and layout of those lines, and the filling of the
//! report's fields. Must not: change the state or decide what it means
//! (it asks [`analysis`](super::analysis)).

use std::fmt::{self, Write as _};

use ffd::config::format_duration;
use ffd::protocol::ranks::format_ranks;
use ffd::protocol::{Cause, Rank};

use super::{AgentExit, AgentState, Fact, FailureReport, Happening, Report, Timeline};
use crate::launch::fault::FaultKind;

/// The words a person reads for a cause (`in-band`, `timeout`, `notice`);
/// the JSON keeps the protocol's word (`inband`).
pub(super) fn describe(cause: Cause) -> &'static str {
    match cause {
        Cause::InBand => "in-band",
        other => other.as_str(),
    }
}

impl fmt::Display for Fact {
    /// `    +512.3 ms  kill -9 rank 3`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:>10} ms  {}", format!("{:+.1}", self.t_ms), self.text)
    }
}

impl fmt::Display for AgentExit {
    /// `code 0`, `killed by SIGKILL`, `killed by ffd run after the shutdown bound`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.forced {
            return f.write_str("killed by ffd run after the shutdown bound");
        }
        match (self.code, self.signal) {
            (Some(code), _) => write!(f, "code {code}"),
            (None, Some(sig)) => match nix::sys::signal::Signal::try_from(sig) {
                Ok(name) => write!(f, "killed by {name}"),
                Err(_) => write!(f, "killed by signal {sig}"),
            },
            (None, None) => f.write_str("unknown status"),
        }
    }
}

impl Fact {
    /// The timeline's line for `what`, at `t_ms`.
    pub(super) fn of(t_ms: f64, what: &Happening<'_>) -> Fact {
        Fact {
            t_ms,
            text: words(what),
        }
    }
}

fn words(what: &Happening<'_>) -> String {
    match *what {
        Happening::Ready { rank, pid, core } => {
            let pid = pid.map_or_else(|| "?".to_owned(), |p| p.to_string());
            let core = core.map_or_else(|| "any".to_owned(), |c| c.to_string());
            format!("rank {rank} ready (pid {pid}, core {core})")
        }
        Happening::Detected {
            rank,
            failed,
            cause,
            also,
            after,
            detail,
        } => {
            let also = if also { "also " } else { "" };
            let mut text = format!(
                "rank {rank} {also}detected rank {failed} ({}",
                detail.unwrap_or(describe(cause))
            );
            match after {
                Some((fault, delay)) => {
                    let _ = write!(text, ", {delay:.1} ms after {})", fault.command());
                }
                None => {
                    let _ = write!(text, ") -- false report: rank {failed} was not faulted");
                }
            }
            text
        }
        Happening::Repeated { rank, failed } => {
            format!("rank {rank} repeated that rank {failed} failed")
        }
        Happening::Learned {
            rank,
            failed,
            cause,
            detector,
        } => {
            let by = detector.map_or_else(String::new, |d| format!(", declared by rank {d}"));
            format!(
                "rank {rank} learned rank {failed} failed ({}{by})",
                describe(cause)
            )
        }
        Happening::SawLeave { rank, gone } => format!("rank {rank} saw rank {gone} leave"),
        Happening::HostFailed { rank, host, ranks } => {
            let list: Vec<String> = ranks.iter().map(ToString::to_string).collect();
            format!(
                "rank {rank} declared host {host} failed: ranks {} in one notice",
                list.join(", ")
            )
        }
        Happening::SelfExcluded { rank, by, why } => {
            let by = by.map_or_else(String::new, |b| format!("rank {b}'s "));
            match why {
                Some("no_quorum") => format!(
                    "rank {rank} self-excluded (no quorum: {by}accusation found no majority on its side)"
                ),
                Some("named") => {
                    format!("rank {rank} self-excluded (declared failed: {by}notice named it)")
                }
                _ => format!("rank {rank} self-excluded"),
            }
        }
        Happening::SlowEmitter {
            rank,
            slow,
            late_ms,
        } => {
            let late = late_ms.map_or_else(String::new, |l| format!(" by {l:.1} ms"));
            format!("rank {rank} warns: rank {slow}'s heartbeat is late{late}")
        }
        Happening::Payload {
            rank,
            origin,
            seq,
            text,
        } => format!("rank {rank} received payload {seq} from rank {origin}: {text}"),
        Happening::Stats { rank, stats } => format!("rank {rank} stats: {stats}"),
        Happening::Exiting { rank } => format!("rank {rank} is exiting"),
        Happening::UnknownEvent { rank, kind } => {
            format!("rank {rank} printed an unknown event `{kind}`")
        }
        Happening::Unreadable { rank, text, why } => {
            format!("rank {rank} printed a line that {why}: {text}")
        }
        Happening::OutsideJob { rank, kind, about } => {
            format!("rank {rank} printed a `{kind}` line about rank {about}, outside the job")
        }
        Happening::Fault {
            rank,
            kind: kind @ (FaultKind::Cut | FaultKind::Heal),
        } => format!("{} of rank {rank}'s host", kind.command()),
        Happening::Fault { rank, kind } => format!("{} rank {rank}", kind.command()),
        Happening::Exited {
            rank,
            exit,
            expected,
        } => {
            if exit.forced {
                format!("rank {rank} did not exit in time: {exit}")
            } else if expected {
                format!("rank {rank} exited ({exit})")
            } else {
                format!("rank {rank} exited abnormally ({exit})")
            }
        }
        Happening::AllNotified {
            failed,
            live,
            after_detection,
        } => {
            let who = match live {
                0 => "no live rank is left to learn".to_owned(),
                1 => "the 1 live rank knows".to_owned(),
                n => format!("all {n} live ranks know"),
            };
            format!("{who} rank {failed} failed ({after_detection:.1} ms after first detection)")
        }
    }
}

impl Timeline {
    /// The JSON report of what was seen so far.
    pub fn report(&self) -> Report {
        let failures = self
            .failures
            .iter()
            .map(|f| {
                let detection = self.detection(f.rank);
                let learned = self.learned(f.rank);
                FailureReport {
                    rank: f.rank,
                    fault: f.fault.as_word().to_owned(),
                    injected_at_ms: f.injected_at,
                    cause: detection.map(|d| d.cause),
                    detector: detection.and_then(|d| d.detector),
                    detected_at_ms: detection.map(|d| d.at),
                    all_notified_at_ms: self.all_notified_at(f.rank),
                    missed: self.never_learned(f.rank).len() as u64,
                    // What only the simulator measures.
                    max_hops: None,
                    messages: None,
                    bytes: None,
                    notified: Some(learned.keys().copied().collect()),
                    learned_at_ms: Some(learned.into_iter().collect()),
                    // A kill's end (a stopped rank ends only with the job).
                    exited_at_ms: (f.fault == FaultKind::Kill)
                        .then(|| self.ranks[f.rank as usize].exited.map(|(t, _)| t))
                        .flatten(),
                }
            })
            .collect();
        let ranks_where = |p: &dyn Fn(&AgentState) -> bool| -> Vec<Rank> {
            (0..self.info.ranks)
                .filter(|&r| p(&self.ranks[r as usize]))
                .collect()
        };
        Report {
            ranks: self.info.ranks,
            provider: self.info.provider.clone(),
            period_ms: self.info.period.as_secs_f64() * 1e3,
            timeout_ms: self.info.timeout.as_secs_f64() * 1e3,
            failures,
            false_reports: self.false_reports(),
            self_excluded: ranks_where(&|s| s.self_excluded_at.is_some()),
            left: ranks_where(&|s| s.left_at.is_some()),
            stats: (0..self.info.ranks)
                .filter_map(|r| Some((r, self.ranks[r as usize].stats.clone()?)))
                .collect(),
            views: self.view_entries(),
            agreements: self.agreement_entries(),
        }
    }

    /// The provider configured, or what the agents' stats say they used
    /// when that is another provider and they all say the same (a one-host
    /// job opens no fabric endpoint: `none (one host: node segment)`);
    /// `tcp;ofi_rxm` for `tcp` is the same provider.
    fn provider_used(&self) -> String {
        let used: Vec<&str> = self
            .ranks
            .iter()
            .filter_map(|s| s.stats.as_ref()?.get("provider")?.as_str())
            .collect();
        match used.split_first() {
            Some((first, rest))
                if first.split(';').next() != self.info.provider.split(';').next()
                    && rest.iter().all(|p| p == first) =>
            {
                format!("{first} (configured: {})", self.info.provider)
            }
            _ => self.info.provider.clone(),
        }
    }

    /// The summary printed at the end: a table of failures, then the lists.
    pub fn summary(&self) -> String {
        let report = self.report();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "summary: {} ranks, provider {}, period {}, timeout {}",
            self.info.ranks,
            self.provider_used(),
            format_duration(self.info.period),
            format_duration(self.info.timeout)
        );
        let time = |t: Option<f64>| t.map_or_else(|| "-".to_owned(), |t| format!("{t:+.1} ms"));
        if report.failures.is_empty() {
            out.push_str("no faults injected\n");
        } else {
            let _ = writeln!(
                out,
                "{:>6}  {:<5}  {:>12}  {:>14}  {:>8}  {:<8}  {:>12}  {:>7}",
                "rank",
                "fault",
                "injected",
                "first detected",
                "detector",
                "cause",
                "all notified",
                "learned"
            );
            for f in &report.failures {
                let live = self.live_for(f.rank).len();
                let learned = live - self.never_learned(f.rank).len();
                let _ = writeln!(
                    out,
                    "{:>6}  {:<5}  {:>12}  {:>14}  {:>8}  {:<8}  {:>12}  {:>7}",
                    f.rank,
                    f.fault,
                    time(Some(f.injected_at_ms)),
                    time(f.detected_at_ms),
                    f.detector.map_or_else(|| "-".to_owned(), |d| d.to_string()),
                    f.cause.map_or("-", describe),
                    time(f.all_notified_at_ms),
                    format!("{learned}/{live}"),
                );
            }
            for f in &report.failures {
                let never = self.never_learned(f.rank);
                if !never.is_empty() {
                    let _ = writeln!(
                        out,
                        "never learned of rank {}'s failure: {}",
                        f.rank,
                        format_ranks(&never)
                    );
                }
            }
        }
        out.push_str("false reports: ");
        if report.false_reports.is_empty() {
            out.push_str("none\n");
        } else {
            let list: Vec<String> = report
                .false_reports
                .iter()
                .map(|f| {
                    format!(
                        "rank {} reported failed by {}",
                        f.rank,
                        format_ranks(&f.reported_by)
                    )
                })
                .collect();
            let _ = writeln!(out, "{}", list.join("; "));
        }
        let no_quorum: Vec<Rank> = (0..self.info.ranks)
            .filter(|&r| self.ranks[r as usize].no_quorum)
            .collect();
        let _ = writeln!(
            out,
            "self-excluded: {}{}",
            if report.self_excluded.is_empty() {
                "none".to_owned()
            } else {
                format_ranks(&report.self_excluded)
            },
            if no_quorum.is_empty() {
                String::new()
            } else {
                format!(" (no quorum: {})", format_ranks(&no_quorum))
            }
        );
        let abnormal = self.abnormal_exits();
        if !abnormal.is_empty() {
            let list: Vec<String> = abnormal
                .iter()
                .map(|(r, e)| format!("rank {r} ({e})"))
                .collect();
            let _ = writeln!(out, "abnormal exits: {}", list.join(", "));
        }
        let (bad, unknown) = self.bad_lines();
        if bad > 0 || unknown > 0 {
            let per_rank: Vec<String> = (0..self.info.ranks)
                .filter_map(|r| {
                    let s = &self.ranks[r as usize];
                    (s.bad_lines + s.unknown_events > 0)
                        .then(|| format!("rank {r}: {} + {}", s.bad_lines, s.unknown_events))
                })
                .collect();
            let _ = writeln!(
                out,
                "unparseable lines: {bad}, unknown events: {unknown} ({}; --verbose shows them)",
                per_rank.join(", ")
            );
        }
        if self.slow_warnings > 0 {
            let _ = writeln!(out, "slow-emitter warnings: {}", self.slow_warnings);
        }
        self.agreement_summary(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::super::test_input::*;
    use super::*;
    use crate::launch::agent_line::AgentEvent;

    #[test]
    fn a_kill_detected_in_band_then_notified_reads_as_three_lines() {
        let (tl, facts) = kill_detected_in_band();
        let printed: Vec<String> = facts.iter().map(ToString::to_string).collect();
        assert_eq!(
            printed,
            [
                "    +500.0 ms  kill -9 rank 3",
                "    +502.5 ms  rank 2 detected rank 3 (in-band, 2.5 ms after kill -9)",
                "    +507.2 ms  all 3 live ranks know rank 3 failed (4.7 ms after first detection)",
                "    +510.0 ms  rank 3 exited (killed by SIGKILL)",
            ]
        );
        let report = tl.report();
        assert_eq!(
            report.failures,
            [FailureReport {
                rank: 3,
                fault: "kill".into(),
                injected_at_ms: 500.0,
                cause: Some(Cause::InBand),
                detector: Some(2),
                detected_at_ms: Some(502.5),
                all_notified_at_ms: Some(507.2),
                missed: 0,
                max_hops: None,
                messages: None,
                bytes: None,
                notified: Some(vec![0, 1, 2]),
                exited_at_ms: Some(510.0),
                learned_at_ms: Some(vec![(0, 504.0), (1, 507.2), (2, 502.5)]),
            }]
        );
        assert!(report.false_reports.is_empty());
        assert!(
            tl.abnormal_exits().is_empty(),
            "an injected SIGKILL is expected"
        );
    }

    #[test]
    fn the_summary_is_a_table_of_failures_then_the_lists() {
        let (tl, _) = kill_detected_in_band();
        let summary = tl.summary();
        let want = "\
summary: 4 ranks, provider tcp, period 10ms, timeout 100ms
  rank  fault      injected  first detected  detector  cause     all notified  learned
     3  kill      +500.0 ms       +502.5 ms         2  in-band      +507.2 ms      3/3
false reports: none
self-excluded: none
";
        assert_eq!(summary, want);
    }

    /// Agents that all report another transport than the one configured
    /// (a one-host job opens no fabric endpoint) are named in the summary;
    /// agents that differ, or report none, leave the configured one.
    #[test]
    fn the_summary_names_the_provider_the_agents_used() {
        let stats = |provider: &str| {
            line(AgentEvent::Stats {
                stats: serde_json::json!({ "provider": provider }),
            })
        };
        let first_line = |tl: &Timeline| tl.summary().lines().next().unwrap().to_owned();
        let (mut tl, _) = kill_detected_in_band();
        assert!(first_line(&tl).contains("provider tcp,"), "no stats yet");
        let none = "none (one host: node segment)";
        for rank in 0..3 {
            tl.agent_line(900.0, rank, &stats(none));
        }
        assert!(
            first_line(&tl).contains(&format!("provider {none} (configured: tcp),")),
            "{}",
            first_line(&tl)
        );
        tl.agent_line(901.0, 0, &stats("tcp;ofi_rxm"));
        assert!(first_line(&tl).contains("provider tcp,"), "agents differ");
        for rank in 1..3 {
            tl.agent_line(902.0, rank, &stats("tcp;ofi_rxm"));
        }
        assert!(
            first_line(&tl).contains("provider tcp,"),
            "the same provider"
        );
    }

    #[test]
    fn causes_read_as_words_in_the_timeline_and_as_the_protocols_in_the_report() {
        assert_eq!(describe(Cause::InBand), "in-band");
        assert_eq!(describe(Cause::Timeout), "timeout");
        assert_eq!(describe(Cause::Notice), "notice");
        let (tl, _) = kill_detected_in_band();
        let json = serde_json::to_value(tl.report()).unwrap();
        assert_eq!(json["failures"][0]["cause"], "inband");
    }

    #[test]
    fn the_json_report_has_exactly_the_documented_fields() {
        let (mut tl, _) = kill_detected_in_band();
        tl.fault(600.0, 1, FaultKind::Stop);
        tl.agent_line(700.0, 0, &failed(2, Cause::Timeout, 0));
        tl.agent_line(
            800.0,
            0,
            &line(AgentEvent::Stats {
                stats: serde_json::json!({"n": 1}),
            }),
        );
        let json = serde_json::to_value(tl.report()).unwrap();
        let keys = |v: &Value| -> Vec<String> {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(
            keys(&json),
            [
                "agreements",
                "failures",
                "false_reports",
                "left",
                "period_ms",
                "provider",
                "ranks",
                "self_excluded",
                "stats",
                "timeout_ms",
                "views"
            ]
        );
        // The failure-report schema `ffd sim` writes too, less what only
        // the simulator measures, plus who was notified.
        assert_eq!(
            keys(&json["failures"][0]),
            [
                "all_notified_at_ms",
                "cause",
                "detected_at_ms",
                "detector",
                "exited_at_ms",
                "fault",
                "injected_at_ms",
                "learned_at_ms",
                "missed",
                "notified",
                "rank"
            ]
        );
        assert_eq!(keys(&json["false_reports"][0]), ["rank", "reported_by"]);
        assert_eq!(json["period_ms"], 10.0);
        assert_eq!(json["failures"][1]["detected_at_ms"], Value::Null);
        assert_eq!(json["failures"][1]["all_notified_at_ms"], Value::Null);
        assert_eq!(json["failures"][1]["missed"], 2);
        assert_eq!(json["stats"]["0"], serde_json::json!({"n": 1}));
    }
}
