//! What a simulation run measured: per injected failure and in total. The
//! JSON form is `{"failures": [...], "totals": {...}}`; times are virtual
//! milliseconds from the start of the run.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::Rank;

/// One injected failure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailureReport {
    pub rank: Rank,
    /// How it was injected: crash, hang, host, random, consecutive, allbut, partition.
    pub fault: String,
    pub injected_at_ms: f64,
    /// How it was first detected: timeout or inband (null if never).
    pub cause: Option<String>,
    /// The rank that first declared it.
    pub detector: Option<Rank>,
    pub detected_at_ms: Option<f64>,
    /// When the last live rank learned it (null if some live rank never did).
    pub all_notified_at_ms: Option<f64>,
    /// Most overlay hops any live rank's news of it travelled.
    pub max_hops: u16,
    /// Notice messages naming it (sent, including copies to already-informed ranks).
    pub messages: u64,
    pub bytes: u64,
    /// Live ranks that never learned it.
    pub missed: u64,
}

/// Messages of one kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KindTotals {
    pub count: u64,
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Totals {
    pub ranks: u32,
    pub hosts: u32,
    pub bcast: String,
    pub seed: u64,
    /// Ranks never faulted (or that left cleanly) that some live rank
    /// declared failed.
    pub false_reports: u64,
    /// How many such reports live ranks made in all.
    pub false_report_events: u64,
    /// Σ over failures of live ranks that never learned it.
    pub missed_notifications: u64,
    /// Failure reports made by ranks that were themselves faulted (e.g. a
    /// partitioned rank declaring the others). Not false reports.
    pub reports_by_faulty_ranks: u64,
    pub self_excluded: Vec<Rank>,
    pub left_events: u64,
    pub slow_emitter_warnings: u64,
    pub payloads_delivered: u64,
    /// Messages lost to partitions and drop rules.
    pub dropped_by_network: u64,
    /// Most notice copies any directed link carried (when tracked).
    pub max_notices_per_link: Option<u32>,
    pub messages: BTreeMap<String, KindTotals>,
    pub events: u64,
    pub virtual_end_ms: f64,
    pub wall_s: f64,
    pub peak_rss_mb: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimReport {
    pub failures: Vec<FailureReport>,
    pub totals: Totals,
    /// (reporter, reported, virtual ms) of the first false reports.
    pub false_report_samples: Vec<(Rank, Rank, f64)>,
}

impl SimReport {
    /// The report with wall time and memory zeroed: what must be identical
    /// for identical seeds.
    pub fn deterministic_part(&self) -> SimReport {
        let mut r = self.clone();
        r.totals.wall_s = 0.0;
        r.totals.peak_rss_mb = 0.0;
        r
    }
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"))
}

impl fmt::Display for SimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.totals;
        writeln!(
            f,
            "{:>9} {:>11} {:>10} {:>8} {:>9} {:>11} {:>12} {:>11} {:>5} {:>9} {:>6}",
            "rank",
            "fault",
            "at_ms",
            "cause",
            "detector",
            "detected_ms",
            "all_known_ms",
            "propag_us",
            "hops",
            "messages",
            "missed"
        )?;
        for x in &self.failures {
            let propagation = match (x.detected_at_ms, x.all_notified_at_ms) {
                (Some(d), Some(a)) => format!("{:.1}", (a - d) * 1e3),
                _ => "-".to_owned(),
            };
            writeln!(
                f,
                "{:>9} {:>11} {:>10.3} {:>8} {:>9} {:>11} {:>12} {:>11} {:>5} {:>9} {:>6}",
                x.rank,
                x.fault,
                x.injected_at_ms,
                x.cause.as_deref().unwrap_or("-"),
                x.detector.map_or_else(|| "-".to_owned(), |d| d.to_string()),
                opt_ms(x.detected_at_ms),
                opt_ms(x.all_notified_at_ms),
                propagation,
                x.max_hops,
                x.messages,
                x.missed
            )?;
        }
        writeln!(
            f,
            "ranks {} (hosts {}, {}), seed {}: false reports {}, missed notifications {}, self-excluded {}, left {}, slow-emitter warnings {}",
            t.ranks,
            t.hosts,
            t.bcast,
            t.seed,
            t.false_reports,
            t.missed_notifications,
            t.self_excluded.len(),
            t.left_events,
            t.slow_emitter_warnings
        )?;
        let kinds: Vec<String> = t
            .messages
            .iter()
            .map(|(k, v)| format!("{k} {}", v.count))
            .collect();
        writeln!(
            f,
            "messages: {}; dropped by network {}",
            kinds.join(", "),
            t.dropped_by_network
        )?;
        write!(
            f,
            "virtual {:.3} ms, {} events, wall {:.2} s, peak RSS {:.0} MiB",
            t.virtual_end_ms, t.events, t.wall_s, t.peak_rss_mb
        )
    }
}
