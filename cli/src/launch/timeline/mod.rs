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
//! - [`ingest`]: agent lines and launcher facts into state, and which of
//!   them are worth a line ([`Happening`]s).
//! - [`analysis`]: what the state means (the definitions below).
//! - [`render`]: the words of every line, the summary and the JSON report.
//! - [`agreements`]: views and agreements, all three of the above for them.
//!
//! Definitions used throughout:
//! - A *failure* is an injected `--kill` or `--stop` of a rank, or the cut
//!   of its host's link (the first one on that rank); `--cont` ends a hang
//!   and `--heal-host` a cut, but not the failure.
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
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::fault::FaultKind;
use ffd::protocol::{Cause, Rank};
pub use ffd_protocol::sim::FailureReport;

mod agreements;
mod analysis;
mod ingest;
mod render;

pub use agreements::{AgreementEntry, ViewEntry};

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

/// The JSON report of `ffd run --json` (times in ms since job start).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub ranks: u32,
    pub provider: String,
    pub period_ms: f64,
    pub timeout_ms: f64,
    /// One per injected failure, in the schema `ffd sim` writes too.
    pub failures: Vec<FailureReport>,
    pub false_reports: Vec<FalseReport>,
    pub self_excluded: Vec<Rank>,
    pub left: Vec<Rank>,
    pub stats: BTreeMap<Rank, Value>,
    /// Per view id, as the agents raised it.
    pub views: Vec<ViewEntry>,
    /// Per agreement (`ffd run --agree`).
    pub agreements: Vec<AgreementEntry>,
}

/// A rank reported failed that was never faulted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FalseReport {
    pub rank: Rank,
    pub reported_by: Vec<Rank>,
}

/// Something the timeline noticed, before it is worded: what [`ingest`]
/// decides is worth a line and [`render`] writes. `rank` is the rank whose
/// line (or process) it is about.
#[derive(Clone, Debug, PartialEq)]
enum Happening<'a> {
    Ready {
        rank: Rank,
        pid: Option<u32>,
        core: Option<u32>,
    },
    /// `rank` declared `failed` itself.
    Detected {
        rank: Rank,
        failed: Rank,
        cause: Cause,
        /// Another rank had detected it before.
        also: bool,
        /// The injected fault and how long after it; `None`: a false report.
        after: Option<(FaultKind, f64)>,
        /// The evidence in words, as the agent gave it.
        detail: Option<&'a str>,
    },
    /// `rank` reported `failed` again.
    Repeated {
        rank: Rank,
        failed: Rank,
    },
    /// `rank` learned of `failed` from someone else.
    Learned {
        rank: Rank,
        failed: Rank,
        cause: Cause,
        detector: Option<Rank>,
    },
    SawLeave {
        rank: Rank,
        gone: Rank,
    },
    /// `rank` declared every rank of host `host` in one notice.
    HostFailed {
        rank: Rank,
        host: u32,
        ranks: &'a [Rank],
    },
    SelfExcluded {
        rank: Rank,
        /// Who told it, or whose accusation found no quorum.
        by: Option<Rank>,
        /// `named` or `no_quorum`, as the agent gave it.
        why: Option<&'a str>,
    },
    SlowEmitter {
        rank: Rank,
        slow: Rank,
        late_ms: Option<f64>,
    },
    Payload {
        rank: Rank,
        origin: Rank,
        seq: u64,
        text: &'a str,
    },
    Stats {
        rank: Rank,
        stats: &'a Value,
    },
    Exiting {
        rank: Rank,
    },
    UnknownEvent {
        rank: Rank,
        kind: &'a str,
    },
    /// A line that is not an agent line; `why` completes "a line that …".
    Unreadable {
        rank: Rank,
        text: &'a str,
        why: &'a str,
    },
    /// A `kind` line about `about`, a rank outside the job.
    OutsideJob {
        rank: Rank,
        kind: &'static str,
        about: Rank,
    },
    Fault {
        rank: Rank,
        kind: FaultKind,
    },
    Exited {
        rank: Rank,
        exit: AgentExit,
        /// A clean exit, or the SIGKILL of a `--kill`.
        expected: bool,
    },
    AllNotified {
        failed: Rank,
        live: usize,
        after_detection: f64,
    },
}

/// One rank's report that some rank failed.
#[derive(Clone, Debug)]
struct Reported {
    by: Rank,
    t: f64,
    cause: Cause,
    detector: Option<Rank>,
    /// Arrival order, the tie-break between equal times.
    seq: u64,
}

/// An injected failure.
#[derive(Clone, Debug)]
struct Failure {
    rank: Rank,
    fault: FaultKind,
    injected_at: f64,
    /// The all-notified line has been printed.
    announced: bool,
}

/// What the timeline knows of one agent (the simulator's `RankState` is
/// another thing: a simulated rank).
#[derive(Clone, Debug, Default)]
struct AgentState {
    killed: bool,
    stopped: bool,
    /// Currently stopped (a `--stop` without its `--cont` yet).
    hung: bool,
    /// Its host link is down now (a `--cut-host` without its `--heal-host` yet).
    cut: bool,
    self_excluded_at: Option<f64>,
    /// It excluded itself for want of a quorum (its side of a partition).
    no_quorum: bool,
    /// The first `left` report about it, or its own `exit` line.
    left_at: Option<f64>,
    exited: Option<(f64, AgentExit)>,
    stats: Option<Value>,
    bad_lines: u32,
    unknown_events: u32,
}

impl AgentState {
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
    ranks: Vec<AgentState>,
    failures: Vec<Failure>,
    /// Reports per failed rank, the first per reporter, in arrival order.
    reports: BTreeMap<Rank, Vec<Reported>>,
    slow_pairs: BTreeSet<(Rank, Rank)>,
    slow_warnings: u64,
    shutdown_at: Option<f64>,
    seq: u64,
    views: BTreeMap<u64, agreements::ViewSeen>,
    agreements: BTreeMap<u64, agreements::AgreementSeen>,
}

impl Timeline {
    /// A timeline of a job; `verbose` adds a fact for every line.
    pub fn new(info: RunInfo, verbose: bool) -> Timeline {
        Timeline {
            ranks: vec![AgentState::default(); info.ranks as usize],
            info,
            verbose,
            failures: Vec::new(),
            reports: BTreeMap::new(),
            slow_pairs: BTreeSet::new(),
            slow_warnings: 0,
            shutdown_at: None,
            seq: 0,
            views: BTreeMap::new(),
            agreements: BTreeMap::new(),
        }
    }

    pub fn info(&self) -> &RunInfo {
        &self.info
    }
}

/// Synthetic inputs shared by the tests of the three parts.
#[cfg(test)]
mod test_input {
    use super::*;
    use crate::launch::agent_line::{AgentEvent, AgentLine, Stamp};

    pub fn info(ranks: u32) -> RunInfo {
        RunInfo {
            ranks,
            provider: "tcp".into(),
            period: Duration::from_millis(10),
            timeout: Duration::from_millis(100),
        }
    }

    pub fn line(event: AgentEvent) -> AgentLine {
        AgentLine {
            event,
            stamp: Stamp::default(),
        }
    }

    pub fn failed(rank: Rank, cause: Cause, detector: Rank) -> AgentLine {
        line(AgentEvent::Failed {
            rank,
            cause,
            detector: Some(detector),
            hops: None,
            epoch: None,
            detail: None,
        })
    }

    pub fn texts(facts: &[Fact]) -> Vec<String> {
        facts.iter().map(|f| f.text.clone()).collect()
    }

    /// 4 ranks; rank 3 killed at 500 ms, rank 2 detects it in-band, 0 and 1 by notice.
    pub fn kill_detected_in_band() -> (Timeline, Vec<Fact>) {
        let mut tl = Timeline::new(info(4), false);
        let mut facts = tl.fault(500.0, 3, FaultKind::Kill);
        facts.extend(tl.agent_line(502.5, 2, &failed(3, Cause::InBand, 2)));
        facts.extend(tl.agent_line(504.0, 0, &failed(3, Cause::Notice, 2)));
        facts.extend(tl.agent_line(507.2, 1, &failed(3, Cause::Notice, 2)));
        facts.extend(tl.agent_exited(510.0, 3, AgentExit::signal(9)));
        (tl, facts)
    }
}
