//! The aggregator of a launched job: what the agents said and what the
//! launcher did, turned into the live timeline, the summary and the JSON
//! report.
//!
//! Owns: the meaning of the facts (first detection, who is live, who never
//! learned, false reports, abnormal exits) and every line `ffd run` prints
//! about them. Must not: read a clock, spawn or signal processes, or print:
//! every input carries its time (milliseconds since job start, negative
//! before it) and returns the [`Fact`]s to print, so tests drive it with
//! synthetic inputs.
//!
//! Definitions used throughout:
//! - A *failure* is an injected `--kill` or `--stop` of a rank (the first
//!   one on that rank); `--cont` ends a hang but not the failure.
//! - A *self-declaration* is a `failed` line whose `detector` is the rank
//!   that printed it (or with no detector and a cause other than `notice`).
//!   The *first detection* is the earliest self-declaration (the earliest
//!   report of any kind if no detector reported itself); later detectors
//!   are shown but do not replace it.
//! - A rank is *live* for a failure if it is not the failed rank, was never
//!   killed or stopped, never self-excluded, and either reported the
//!   failure or had not left or exited before the first detection (before
//!   the shutdown, for a failure never detected). The failure is
//!   *all-notified* when every live rank reported it; the time is the last
//!   live rank's report.
//! - A *false report* names a rank that was never faulted, unless that rank
//!   crashed by itself (exited abnormally without self-excluding): then the
//!   reports are true, and the crash is listed among the abnormal exits.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::agent_line::{AgentEvent, AgentLine, Cause};
use super::fault::FaultKind;
use ffd::config::format_duration;
use ffd::protocol::Rank;
use ffd::protocol::ranks::format_ranks;

/// The job's settings, as the report states them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunInfo {
    pub ranks: u32,
    pub provider: String,
    pub period: Duration,
    pub timeout: Duration,
}

/// One line of the live timeline: a time (ms since job start) and a text.
#[derive(Clone, Debug, PartialEq)]
pub struct Fact {
    pub t_ms: f64,
    pub text: String,
}

impl fmt::Display for Fact {
    /// `    +512.3 ms  kill -9 rank 3`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:>10} ms  {}", format!("{:+.1}", self.t_ms), self.text)
    }
}

/// How an agent process ended, as the launcher reaped it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgentExit {
    /// The exit code, if it exited.
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// The launcher killed it because it did not exit within the shutdown bound.
    pub forced: bool,
}

impl AgentExit {
    pub fn code(code: i32) -> AgentExit {
        AgentExit {
            code: Some(code),
            signal: None,
            forced: false,
        }
    }

    pub fn signal(signal: i32) -> AgentExit {
        AgentExit {
            code: None,
            signal: Some(signal),
            forced: false,
        }
    }

    pub fn is_clean(&self) -> bool {
        self.code == Some(0) && !self.forced
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

/// The JSON report of `ffd run --json` (times in ms since job start).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub ranks: u32,
    pub provider: String,
    pub period_ms: f64,
    pub timeout_ms: f64,
    pub failures: Vec<FailureReport>,
    pub false_reports: Vec<FalseReport>,
    pub self_excluded: Vec<Rank>,
    pub left: Vec<Rank>,
    pub stats: BTreeMap<Rank, Value>,
}

/// One injected failure in the [`Report`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailureReport {
    pub rank: Rank,
    /// `kill` or `stop`.
    pub fault: &'static str,
    pub injected_at_ms: f64,
    pub first_detected_at_ms: Option<f64>,
    /// `inband`, `timeout` or `notice` (the last when only notices were seen).
    pub cause: Option<String>,
    pub detector: Option<Rank>,
    pub all_notified_at_ms: Option<f64>,
    /// Every rank that reported the failure, ascending.
    pub notified: Vec<Rank>,
}

/// A rank reported failed that was never faulted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FalseReport {
    pub rank: Rank,
    pub reported_by: Vec<Rank>,
}

#[derive(Clone, Debug)]
struct Reported {
    by: Rank,
    t: f64,
    cause: Cause,
    detector: Option<Rank>,
    /// Arrival order, the tie-break between equal times.
    seq: u64,
}

impl Reported {
    fn is_self_declaration(&self) -> bool {
        match self.detector {
            Some(d) => d == self.by,
            None => self.cause != Cause::Notice,
        }
    }
}

#[derive(Clone, Debug)]
struct Failure {
    rank: Rank,
    fault: FaultKind,
    injected_at: f64,
    /// The all-notified line has been printed.
    announced: bool,
}

#[derive(Clone, Debug, Default)]
struct RankState {
    killed: bool,
    stopped: bool,
    /// Currently stopped (a `--stop` without its `--cont` yet).
    hung: bool,
    self_excluded_at: Option<f64>,
    /// The first `left` report about it, or its own `exit` line.
    left_at: Option<f64>,
    exited: Option<(f64, AgentExit)>,
    stats: Option<Value>,
    bad_lines: u32,
    unknown_events: u32,
}

impl RankState {
    fn faulted(&self) -> bool {
        self.killed || self.stopped
    }
}

/// What ffd run saw: feed it inputs in arrival order, print the facts each
/// returns, and ask for the [`summary`](Timeline::summary) and the
/// [`report`](Timeline::report) at the end.
#[derive(Clone, Debug)]
pub struct Timeline {
    info: RunInfo,
    verbose: bool,
    ranks: Vec<RankState>,
    failures: Vec<Failure>,
    /// Reports per failed rank, the first per reporter, in arrival order.
    reports: BTreeMap<Rank, Vec<Reported>>,
    slow_pairs: BTreeSet<(Rank, Rank)>,
    slow_warnings: u64,
    shutdown_at: Option<f64>,
    seq: u64,
}

impl Timeline {
    /// A timeline of a job; `verbose` adds a fact for every line.
    pub fn new(info: RunInfo, verbose: bool) -> Timeline {
        Timeline {
            ranks: vec![RankState::default(); info.ranks as usize],
            info,
            verbose,
            failures: Vec::new(),
            reports: BTreeMap::new(),
            slow_pairs: BTreeSet::new(),
            slow_warnings: 0,
            shutdown_at: None,
            seq: 0,
        }
    }

    pub fn info(&self) -> &RunInfo {
        &self.info
    }

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
        let mut fact = |t_ms: f64, text: String| facts.push(Fact { t_ms, text });
        match &line.event {
            AgentEvent::Ready { pid, core } => {
                if self.verbose {
                    let pid = pid.map_or_else(|| "?".to_owned(), |p| p.to_string());
                    let core = core.map_or_else(|| "any".to_owned(), |c| c.to_string());
                    fact(t_ms, format!("rank {rank} ready (pid {pid}, core {core})"));
                }
            }
            AgentEvent::Failed {
                rank: failed,
                cause,
                detector,
            } => {
                let failed = *failed;
                if failed >= self.info.ranks {
                    return self.bad_line(
                        t_ms,
                        rank,
                        &format!("a `failed` line about rank {failed}, outside the job"),
                    );
                }
                self.seq += 1;
                let report = Reported {
                    by: rank,
                    t: t_ms,
                    cause: cause.clone(),
                    detector: *detector,
                    seq: self.seq,
                };
                let list = self.reports.entry(failed).or_default();
                if list.iter().any(|r| r.by == rank) {
                    if self.verbose {
                        fact(
                            t_ms,
                            format!("rank {rank} repeated that rank {failed} failed"),
                        );
                    }
                } else {
                    let earlier_detections =
                        list.iter().filter(|r| r.is_self_declaration()).count();
                    let is_self = report.is_self_declaration();
                    list.push(report);
                    if is_self {
                        let also = if earlier_detections > 0 { "also " } else { "" };
                        let mut text = format!(
                            "rank {rank} {also}detected rank {failed} ({}",
                            cause.describe()
                        );
                        match self.failure_of(failed) {
                            Some(f) => {
                                let _ = write!(
                                    text,
                                    ", {:.1} ms after {})",
                                    t_ms - f.injected_at,
                                    f.fault.command()
                                );
                            }
                            None => {
                                let _ = write!(
                                    text,
                                    ") -- false report: rank {failed} was not faulted"
                                );
                            }
                        }
                        fact(t_ms, text);
                    } else if self.verbose {
                        let by = detector
                            .map_or_else(String::new, |d| format!(", declared by rank {d}"));
                        fact(
                            t_ms,
                            format!(
                                "rank {rank} learned rank {failed} failed ({}{by})",
                                cause.describe()
                            ),
                        );
                    }
                }
            }
            AgentEvent::Left { rank: gone } => {
                let gone = *gone;
                if gone >= self.info.ranks {
                    return self.bad_line(
                        t_ms,
                        rank,
                        &format!("a `left` line about rank {gone}, outside the job"),
                    );
                }
                let first = self.ranks[gone as usize].left_at.is_none();
                let s = &mut self.ranks[gone as usize];
                s.left_at = Some(s.left_at.map_or(t_ms, |l| l.min(t_ms)));
                if self.verbose || (first && self.shutdown_at.is_none()) {
                    fact(t_ms, format!("rank {rank} saw rank {gone} leave"));
                }
            }
            AgentEvent::SelfExcluded => {
                let s = &mut self.ranks[rank as usize];
                if s.self_excluded_at.is_none() {
                    s.self_excluded_at = Some(t_ms);
                    fact(t_ms, format!("rank {rank} self-excluded"));
                }
            }
            AgentEvent::SlowEmitter {
                rank: slow,
                late_ms,
            } => {
                self.slow_warnings += 1;
                if self.slow_pairs.insert((rank, *slow)) || self.verbose {
                    let late = late_ms.map_or_else(String::new, |l| format!(" by {l:.1} ms"));
                    fact(
                        t_ms,
                        format!("rank {rank} warns: rank {slow}'s heartbeat is late{late}"),
                    );
                }
            }
            AgentEvent::Stats(stats) => {
                self.ranks[rank as usize].stats = Some(stats.clone());
                if self.verbose {
                    fact(t_ms, format!("rank {rank} stats: {stats}"));
                }
            }
            AgentEvent::Exit => {
                let s = &mut self.ranks[rank as usize];
                s.left_at = Some(s.left_at.map_or(t_ms, |l| l.min(t_ms)));
                if self.verbose || self.shutdown_at.is_none() {
                    fact(t_ms, format!("rank {rank} is exiting"));
                }
            }
            AgentEvent::Unknown { kind } => {
                self.ranks[rank as usize].unknown_events += 1;
                if self.verbose {
                    fact(
                        t_ms,
                        format!("rank {rank} printed an unknown event `{kind}`"),
                    );
                }
            }
        }
        self.check_all_notified(&mut facts);
        facts
    }

    /// A line of rank `rank` that is not an agent line.
    /// `why` completes "a line that …", e.g. "is not JSON".
    pub fn unparseable(&mut self, t_ms: f64, rank: Rank, text: &str, why: &str) -> Vec<Fact> {
        self.bad_line(t_ms, rank, &format!("a line that {why}: {text}"))
    }

    fn bad_line(&mut self, t_ms: f64, rank: Rank, what: &str) -> Vec<Fact> {
        if let Some(s) = self.ranks.get_mut(rank as usize) {
            s.bad_lines += 1;
        }
        if self.verbose {
            vec![Fact {
                t_ms,
                text: format!("rank {rank} printed {what}"),
            }]
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
        }
        facts.push(Fact {
            t_ms,
            text: format!("{} rank {rank}", kind.command()),
        });
        if kind != FaultKind::Cont && self.failure_of(rank).is_none() {
            self.failures.push(Failure {
                rank,
                fault: kind,
                injected_at: t_ms,
                announced: false,
            });
        }
        self.check_all_notified(&mut facts);
        facts
    }

    /// Whether rank `rank` is stopped now (for the launcher's clean-up).
    pub fn is_hung(&self, rank: Rank) -> bool {
        self.ranks.get(rank as usize).is_some_and(|s| s.hung)
    }

    /// The launcher reaped rank `rank`'s process.
    pub fn agent_exited(&mut self, t_ms: f64, rank: Rank, exit: AgentExit) -> Vec<Fact> {
        let mut facts = Vec::new();
        let Some(s) = self.ranks.get_mut(rank as usize) else {
            return facts;
        };
        s.exited = Some((t_ms, exit));
        let expected = exit.is_clean() || (s.killed && exit.signal == Some(9) && !exit.forced);
        let text = if exit.forced {
            format!("rank {rank} did not exit in time: {exit}")
        } else if expected {
            format!("rank {rank} exited ({exit})")
        } else {
            format!("rank {rank} exited abnormally ({exit})")
        };
        if self.verbose || !expected || self.shutdown_at.is_none() {
            facts.push(Fact { t_ms, text });
        }
        self.check_all_notified(&mut facts);
        facts
    }

    /// The launcher began shutting the job down at `t_ms`; departures after
    /// this are expected and no longer printed one by one.
    pub fn shutdown_started(&mut self, t_ms: f64) {
        self.shutdown_at.get_or_insert(t_ms);
    }

    fn failure_of(&self, rank: Rank) -> Option<&Failure> {
        self.failures.iter().find(|f| f.rank == rank)
    }

    fn abnormal(&self, rank: Rank) -> bool {
        let s = &self.ranks[rank as usize];
        match s.exited {
            Some((_, exit)) => {
                !(exit.is_clean() || (s.killed && exit.signal == Some(9) && !exit.forced))
            }
            None => false,
        }
    }

    /// The first detection of `rank`'s failure: (time, detector, cause).
    fn detection(&self, rank: Rank) -> Option<(f64, Option<Rank>, &Cause)> {
        let list = self.reports.get(&rank)?;
        let earliest = |self_only: bool| {
            list.iter()
                .filter(|r| !self_only || r.is_self_declaration())
                .min_by(|a, b| a.t.total_cmp(&b.t).then(a.seq.cmp(&b.seq)))
        };
        let r = earliest(true).or_else(|| earliest(false))?;
        let detector = r.detector.or(r.is_self_declaration().then_some(r.by));
        Some((r.t, detector, &r.cause))
    }

    /// The ranks live for `failed`'s failure, as defined in the module doc.
    fn live_for(&self, failed: Rank) -> Vec<Rank> {
        let reference = self
            .detection(failed)
            .map(|(t, _, _)| t)
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
    fn learned(&self, failed: Rank) -> BTreeMap<Rank, f64> {
        let mut out = BTreeMap::new();
        for r in self.reports.get(&failed).into_iter().flatten() {
            if r.by != failed {
                let t = out.entry(r.by).or_insert(r.t);
                *t = f64::min(*t, r.t);
            }
        }
        out
    }

    /// When the last live rank learned of `failed`, if all did.
    fn all_notified_at(&self, failed: Rank) -> Option<f64> {
        let (detected, _, _) = self.detection(failed)?;
        let learned = self.learned(failed);
        let mut last = detected;
        for r in self.live_for(failed) {
            last = last.max(*learned.get(&r)?);
        }
        Some(last)
    }

    fn check_all_notified(&mut self, facts: &mut Vec<Fact>) {
        for i in 0..self.failures.len() {
            if self.failures[i].announced {
                continue;
            }
            let rank = self.failures[i].rank;
            let Some(at) = self.all_notified_at(rank) else {
                continue;
            };
            let detected = self.detection(rank).map_or(at, |(t, _, _)| t);
            let live = self.live_for(rank).len();
            self.failures[i].announced = true;
            let who = match live {
                0 => "no live rank is left to learn".to_owned(),
                1 => "the 1 live rank knows".to_owned(),
                n => format!("all {n} live ranks know"),
            };
            facts.push(Fact {
                t_ms: at,
                text: format!(
                    "{who} rank {rank} failed ({:.1} ms after first detection)",
                    at - detected
                ),
            });
        }
    }

    fn false_reports(&self) -> Vec<FalseReport> {
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

    /// The JSON report of what was seen so far.
    pub fn report(&self) -> Report {
        let failures = self
            .failures
            .iter()
            .map(|f| {
                let detection = self.detection(f.rank);
                FailureReport {
                    rank: f.rank,
                    fault: f.fault.as_word(),
                    injected_at_ms: f.injected_at,
                    first_detected_at_ms: detection.map(|(t, _, _)| t),
                    cause: detection.map(|(_, _, c)| c.as_word().to_owned()),
                    detector: detection.and_then(|(_, d, _)| d),
                    all_notified_at_ms: self.all_notified_at(f.rank),
                    notified: self.learned(f.rank).into_keys().collect(),
                }
            })
            .collect();
        let ranks_where = |p: &dyn Fn(&RankState) -> bool| -> Vec<Rank> {
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
        }
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

    /// The summary printed at the end: a table of failures, then the lists.
    pub fn summary(&self) -> String {
        let report = self.report();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "summary: {} ranks, provider {}, period {}, timeout {}",
            self.info.ranks,
            self.info.provider,
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
                let live = self.live_for(f.rank);
                let learned = live.iter().filter(|r| f.notified.contains(r)).count();
                let cause = f
                    .cause
                    .as_deref()
                    .map_or("-", |w| if w == "inband" { "in-band" } else { w });
                let _ = writeln!(
                    out,
                    "{:>6}  {:<5}  {:>12}  {:>14}  {:>8}  {:<8}  {:>12}  {:>7}",
                    f.rank,
                    f.fault,
                    time(Some(f.injected_at_ms)),
                    time(f.first_detected_at_ms),
                    f.detector.map_or_else(|| "-".to_owned(), |d| d.to_string()),
                    cause,
                    time(f.all_notified_at_ms),
                    format!("{learned}/{}", live.len()),
                );
            }
            for f in &report.failures {
                let never: Vec<Rank> = self
                    .live_for(f.rank)
                    .into_iter()
                    .filter(|r| !f.notified.contains(r))
                    .collect();
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
        let _ = writeln!(
            out,
            "self-excluded: {}",
            if report.self_excluded.is_empty() {
                "none".to_owned()
            } else {
                format_ranks(&report.self_excluded)
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
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(ranks: u32) -> RunInfo {
        RunInfo {
            ranks,
            provider: "tcp".into(),
            period: Duration::from_millis(10),
            timeout: Duration::from_millis(100),
        }
    }

    fn line(event: AgentEvent) -> AgentLine {
        AgentLine {
            me: None,
            t_ms: None,
            unix_ms: None,
            event,
        }
    }

    fn failed(rank: Rank, cause: Cause, detector: Rank) -> AgentLine {
        line(AgentEvent::Failed {
            rank,
            cause,
            detector: Some(detector),
        })
    }

    fn texts(facts: &[Fact]) -> Vec<String> {
        facts.iter().map(|f| f.text.clone()).collect()
    }

    /// 4 ranks; rank 3 killed at 500 ms, rank 2 detects it in-band, 0 and 1 by notice.
    fn kill_detected_in_band() -> (Timeline, Vec<Fact>) {
        let mut tl = Timeline::new(info(4), false);
        let mut facts = tl.fault(500.0, 3, FaultKind::Kill);
        facts.extend(tl.agent_line(502.5, 2, &failed(3, Cause::Inband, 2)));
        facts.extend(tl.agent_line(504.0, 0, &failed(3, Cause::Notice, 2)));
        facts.extend(tl.agent_line(507.2, 1, &failed(3, Cause::Notice, 2)));
        facts.extend(tl.agent_exited(510.0, 3, AgentExit::signal(9)));
        (tl, facts)
    }

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
                fault: "kill",
                injected_at_ms: 500.0,
                first_detected_at_ms: Some(502.5),
                cause: Some("inband".into()),
                detector: Some(2),
                all_notified_at_ms: Some(507.2),
                notified: vec![0, 1, 2],
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
        facts.extend(tl.agent_line(405.0, 1, &line(AgentEvent::SelfExcluded)));
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
    fn a_self_excluded_rank_is_not_live_for_a_later_failure() {
        let mut tl = Timeline::new(info(4), false);
        tl.fault(100.0, 1, FaultKind::Stop);
        tl.agent_line(150.0, 1, &line(AgentEvent::SelfExcluded));
        tl.fault(300.0, 3, FaultKind::Kill);
        tl.agent_line(301.0, 0, &failed(3, Cause::Inband, 0));
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
        tl.agent_line(45.0, 0, &failed(2, Cause::Inband, 0));
        assert!(tl.report().false_reports.is_empty());
        assert_eq!(tl.abnormal_exits(), [(2, AgentExit::code(101))]);
        assert!(tl.summary().contains("abnormal exits: rank 2 (code 101)\n"));
    }

    #[test]
    fn a_live_rank_that_never_learned_leaves_all_notified_null() {
        let mut tl = Timeline::new(info(4), false);
        tl.fault(500.0, 3, FaultKind::Kill);
        tl.agent_line(502.0, 2, &failed(3, Cause::Inband, 2));
        let facts = tl.agent_line(503.0, 0, &failed(3, Cause::Notice, 2));
        assert!(facts.is_empty(), "rank 1 has not learned: {facts:?}");
        tl.shutdown_started(2500.0);
        for r in 0..3 {
            tl.agent_exited(2510.0, r, AgentExit::code(0));
        }
        let f = &tl.report().failures[0];
        assert_eq!(f.all_notified_at_ms, None);
        assert_eq!(f.notified, [0, 2]);
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
        let second = tl.agent_line(110.0, 0, &failed(3, Cause::Inband, 0));
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
            (f.first_detected_at_ms, f.detector, f.cause.as_deref()),
            (Some(110.0), Some(0), Some("inband"))
        );

        // At equal times, the first to arrive wins.
        let mut tl = Timeline::new(info(4), false);
        tl.fault(100.0, 3, FaultKind::Kill);
        tl.agent_line(110.0, 2, &failed(3, Cause::Timeout, 2));
        tl.agent_line(110.0, 0, &failed(3, Cause::Inband, 0));
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
        assert_eq!((f.detector, f.cause.as_deref()), (Some(0), Some("notice")));
        tl.agent_line(4.0, 0, &failed(2, Cause::Inband, 0));
        let f = &tl.report().failures[0];
        assert_eq!(
            (f.first_detected_at_ms, f.detector, f.cause.as_deref()),
            (Some(4.0), Some(0), Some("inband"))
        );
        assert_eq!(f.all_notified_at_ms, Some(5.0));
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
            let c = tl.agent_line(3.0, 0, &failed(7, Cause::Inband, 0));
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
    fn a_rank_that_left_before_the_detection_is_not_live() {
        let mut tl = Timeline::new(info(4), false);
        let left = tl.agent_line(50.0, 0, &line(AgentEvent::Left { rank: 1 }));
        assert_eq!(texts(&left), ["rank 0 saw rank 1 leave"]);
        tl.fault(100.0, 3, FaultKind::Kill);
        tl.agent_line(101.0, 2, &failed(3, Cause::Inband, 2));
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
        let facts = tl.agent_line(401.0, 0, &failed(2, Cause::Inband, 0));
        assert_eq!(
            texts(&facts),
            [
                "rank 0 detected rank 2 (in-band, 301.0 ms after kill -9)",
                "all 2 live ranks know rank 2 failed (0.0 ms after first detection)",
            ]
        );
        assert_eq!(tl.report().failures[0].all_notified_at_ms, Some(401.0));
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
        tl.agent_line(2002.0, 0, &line(AgentEvent::Stats(stats.clone())));
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
    fn the_json_report_has_exactly_the_documented_fields() {
        let (mut tl, _) = kill_detected_in_band();
        tl.fault(600.0, 1, FaultKind::Stop);
        tl.agent_line(700.0, 0, &failed(2, Cause::Timeout, 0));
        tl.agent_line(
            800.0,
            0,
            &line(AgentEvent::Stats(serde_json::json!({"n": 1}))),
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
                "failures",
                "false_reports",
                "left",
                "period_ms",
                "provider",
                "ranks",
                "self_excluded",
                "stats",
                "timeout_ms"
            ]
        );
        assert_eq!(
            keys(&json["failures"][0]),
            [
                "all_notified_at_ms",
                "cause",
                "detector",
                "fault",
                "first_detected_at_ms",
                "injected_at_ms",
                "notified",
                "rank"
            ]
        );
        assert_eq!(keys(&json["false_reports"][0]), ["rank", "reported_by"]);
        assert_eq!(json["period_ms"], 10.0);
        assert_eq!(json["failures"][1]["first_detected_at_ms"], Value::Null);
        assert_eq!(json["failures"][1]["all_notified_at_ms"], Value::Null);
        assert_eq!(json["stats"]["0"], serde_json::json!({"n": 1}));
    }
}
