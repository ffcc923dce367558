//! What a run measured, per injected failure and in total.
//!
//! Owns: the failure-report schema ([`FailureReport`]) that both `ffd sim`
//! and `ffd run --json` write, so the two reports use the same JSON field
//! names for the same things, and the simulator's totals. Must not: compute
//! anything (the simulator and `ffd run`'s timeline fill the fields).
//!
//! The simulator's JSON form is `{"failures": [...], "payloads": [...],
//! "totals": {...}, "false_report_samples": [...], "agreements": [...],
//! "views": [...]}` (every section always present, possibly empty); its
//! times are virtual milliseconds from the start of the run.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Cause, Rank};

/// One injected failure, as `ffd sim` and `ffd run` report it.
///
/// Times are milliseconds from the start: virtual time for `ffd sim`, time
/// since the job started for `ffd run`. A shared field that is `null` means
/// the thing did not happen (never detected, not every live rank learned).
/// A field only one of the two measures is `Option` and *absent* from the
/// other's JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailureReport {
    pub rank: Rank,
    /// How it was injected: `ffd run`: kill, stop; `ffd sim`: crash, hang,
    /// host, random, consecutive, allbut, partition.
    pub fault: String,
    pub injected_at_ms: f64,
    /// How it was first detected: `timeout` or `inband`; `notice` when
    /// `ffd run` saw only notices (the detector's own line never came);
    /// null if never.
    pub cause: Option<Cause>,
    /// The rank that first declared it.
    pub detector: Option<Rank>,
    /// When it was first detected (null if never).
    pub detected_at_ms: Option<f64>,
    /// When the last live rank learned it (null if some live rank never did).
    pub all_notified_at_ms: Option<f64>,
    /// Live ranks that never learned it.
    pub missed: u64,
    /// `ffd sim` only: most overlay hops any live rank's news of it travelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_hops: Option<u16>,
    /// `ffd sim` only: notice messages naming it (sent, including copies to
    /// already-informed ranks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<u64>,
    /// `ffd sim` only: the bytes of those messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// `ffd run` only: every rank that reported it, ascending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notified: Option<Vec<Rank>>,
    /// `ffd run` only, for a kill: when the launcher saw the process end
    /// (its `waitid`), the end of the kernel's teardown, late in which its
    /// sockets close: no evidence of the crash comes much before it
    /// (absent if it did not end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exited_at_ms: Option<f64>,
    /// `ffd run` only: when each rank that reported it did so (its own
    /// stamp, as `[rank, ms]`, ascending by rank): where the spread went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned_at_ms: Option<Vec<(Rank, f64)>>,
}

/// One application payload of a simulated run: who delivered it. All or
/// none holds when `delivered_by_live` is 0 or `live_at_end`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PayloadReport {
    pub origin: Rank,
    /// The origin's sequence number (1 for its first payload).
    pub seq: u64,
    /// When the fault schedule's `bcast` made it (null: seen delivered,
    /// never broadcast by the schedule).
    pub broadcast_at_ms: Option<f64>,
    /// Ranks that delivered it (the origin included, and ranks that
    /// failed later).
    pub delivered_by: u32,
    /// Ranks live at the end of the run (never faulted, not excluded, not
    /// leaving, running): the same for every payload of a run.
    pub live_at_end: u32,
    /// Of those, how many delivered it.
    pub delivered_by_live: u32,
    /// When the last delivery (by any rank) happened (null: none).
    pub last_delivered_at_ms: Option<f64>,
}

impl PayloadReport {
    /// Every live rank delivered it, or none did.
    pub fn all_or_none(&self) -> bool {
        self.delivered_by_live == 0 || self.delivered_by_live == self.live_at_end
    }
}

/// Messages of one kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindTotals {
    pub count: u64,
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub ranks: u32,
    pub hosts: u32,
    pub bcast: String,
    pub seed: u64,
    /// Ranks never faulted (or that left cleanly) that some rank declared
    /// failed: a live rank, or a faulted one (a cut-off minority naming
    /// the primary side's ranks counts).
    pub false_reports: u64,
    /// How many such `Failed` events were raised in all.
    pub false_report_events: u64,
    /// Σ over failures of live ranks that never learned it.
    pub missed_notifications: u64,
    /// `Failed` events raised by ranks that were themselves faulted (e.g. a
    /// partitioned rank declaring the others, or learning of them), about
    /// anyone.
    pub reports_by_faulty_ranks: u64,
    /// Of the false-report events, those raised by faulted ranks.
    #[serde(default)]
    pub false_reports_by_faulty_ranks: u64,
    pub self_excluded: Vec<Rank>,
    /// When each of `self_excluded` excluded itself (virtual ms, same order).
    #[serde(default)]
    pub self_excluded_at_ms: Vec<f64>,
    /// Of those, the ranks that excluded themselves because their side held
    /// no majority (`FFD_QUORUM=majority`).
    #[serde(default)]
    pub no_quorum_exclusions: Vec<Rank>,
    pub left_events: u64,
    pub slow_emitter_warnings: u64,
    /// Payload deliveries (`Event::Payload`), over every rank.
    pub payloads_delivered: u64,
    /// Deliveries of a payload to a rank that had delivered it before.
    #[serde(default)]
    pub payload_duplicate_deliveries: u64,
    /// Deliveries that were not the next of their origin at that rank (a
    /// gap or a reordering: FIFO per origin broken).
    #[serde(default)]
    pub payloads_out_of_order: u64,
    /// Payloads some live rank delivered and another did not.
    #[serde(default)]
    pub payloads_not_all_or_none: u64,
    /// Messages lost to partitions and drop rules.
    pub dropped_by_network: u64,
    /// Copies that never left: their sender crashed (or closed) before
    /// their turn in its fan-out (`NetModel::send_cost`).
    pub never_left: u64,
    /// Most notice copies any directed link carried (when tracked).
    pub max_notices_per_link: Option<u32>,
    pub messages: BTreeMap<String, KindTotals>,
    pub events: u64,
    /// Same-host watching (host groups, a ring of host leaders).
    #[serde(default)]
    pub local: bool,
    /// Fabric heartbeat writes per second at the end of the run: streams
    /// running (one per rank, or one per host leader with local watching)
    /// over the period.
    #[serde(default)]
    pub fabric_heartbeats_per_s: f64,
    /// Notice copies sent in the run over the failures injected (a notice
    /// naming a whole host counts once; null: none injected).
    #[serde(default)]
    pub messages_per_failure: Option<f64>,
    /// `HostFailed` events raised by any rank.
    #[serde(default)]
    pub host_failed_events: u64,
    pub virtual_end_ms: f64,
    pub wall_s: f64,
    pub peak_rss_mb: f64,
}

/// One user agreement (the `seq`-th `agree@T`). "Live" ranks are those
/// running at the end of the run, never faulted, excluded or leaving: the
/// agreement succeeded when `decided_by == live` and
/// `distinct_decisions == 1`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgreementReport {
    pub seq: u64,
    pub started_at_ms: f64,
    /// Live ranks at the end of the run.
    pub live: u64,
    /// Live ranks that decided it.
    pub decided_by: u64,
    /// Distinct (flags, view) decisions among them (1 when they agree).
    pub distinct_decisions: u64,
    /// Ranks whose agreement ended without a result (they left or were
    /// excluded first).
    pub aborted: u64,
    /// Most hops of a live rank's decision (the longest chain of agreement
    /// messages behind it); null if none decided.
    pub hops: Option<u16>,
    /// From the `agree@T` to the last live rank's decision, virtual µs.
    pub virtual_us: Option<f64>,
    /// The decision most live ranks took: its flags, view id and failed set.
    pub flags: Option<u64>,
    pub view_id: Option<u64>,
    pub failed: Vec<Rank>,
}

/// One view id: who raised it, and whether they agree on its failed set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ViewReport {
    pub id: u64,
    /// Live ranks at the end of the run.
    pub live: u64,
    /// Live ranks that raised it.
    pub raised_by: u64,
    /// Distinct failed sets among them (1 when they agree).
    pub distinct_failed_sets: u64,
    /// Every rank that raised it, live at the end or not.
    pub raised_by_all: u64,
    pub first_at_ms: Option<f64>,
    pub last_at_ms: Option<f64>,
    /// The failed set most live ranks raised.
    pub failed: Vec<Rank>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    pub failures: Vec<FailureReport>,
    /// Every payload broadcast or delivered, in order of first sight.
    #[serde(default)]
    pub payloads: Vec<PayloadReport>,
    pub totals: Totals,
    /// (reporter, reported, virtual ms) of the first false reports.
    pub false_report_samples: Vec<(Rank, Rank, f64)>,
    /// Per user agreement (`agree@T`).
    pub agreements: Vec<AgreementReport>,
    /// Per view id, in order.
    pub views: Vec<ViewReport>,
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

fn opt<T: fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn ranks(v: &[Rank]) -> String {
    if v.is_empty() {
        "nobody".to_owned()
    } else {
        crate::ranks::format_ranks(v)
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
                x.cause.map_or("-", Cause::as_str),
                opt(x.detector),
                opt_ms(x.detected_at_ms),
                opt_ms(x.all_notified_at_ms),
                propagation,
                opt(x.max_hops),
                opt(x.messages),
                x.missed
            )?;
        }
        writeln!(
            f,
            "ranks {} (hosts {}, {}), seed {}: false reports {} ({} events, {} by faulted ranks), missed notifications {}, failed events from faulted ranks {}, self-excluded {} ({} without quorum), left {}, slow-emitter warnings {}",
            t.ranks,
            t.hosts,
            t.bcast,
            t.seed,
            t.false_reports,
            t.false_report_events,
            t.false_reports_by_faulty_ranks,
            t.missed_notifications,
            t.reports_by_faulty_ranks,
            t.self_excluded.len(),
            t.no_quorum_exclusions.len(),
            t.left_events,
            t.slow_emitter_warnings
        )?;
        let kinds: Vec<String> = t
            .messages
            .iter()
            .map(|(k, v)| format!("{k} {}", v.count))
            .collect();
        if !self.payloads.is_empty() {
            let everywhere = self
                .payloads
                .iter()
                .filter(|p| p.live_at_end > 0 && p.delivered_by_live == p.live_at_end)
                .count();
            let nowhere = self
                .payloads
                .iter()
                .filter(|p| p.delivered_by_live == 0)
                .count();
            writeln!(
                f,
                "payloads {}: delivered by every live rank {}, by none {}, by some {}; duplicates {}, out of order {}",
                self.payloads.len(),
                everywhere,
                nowhere,
                t.payloads_not_all_or_none,
                t.payload_duplicate_deliveries,
                t.payloads_out_of_order
            )?;
        }
        writeln!(
            f,
            "messages: {}; dropped by network {}, never left {}",
            kinds.join(", "),
            t.dropped_by_network,
            t.never_left
        )?;
        writeln!(
            f,
            "local watching {}: fabric heartbeats {:.0}/s, notice messages per failure {}, host failures {}",
            if t.local { "on" } else { "off" },
            t.fabric_heartbeats_per_s,
            t.messages_per_failure
                .map_or_else(|| "-".to_owned(), |m| format!("{m:.1}")),
            t.host_failed_events
        )?;
        for a in &self.agreements {
            writeln!(
                f,
                "agreement {} at {:.3} ms: decided by {} of {} live ranks, {} distinct, {} hops, {} us, flags {}, view {} = {}",
                a.seq,
                a.started_at_ms,
                a.decided_by,
                a.live,
                a.distinct_decisions,
                opt(a.hops),
                a.virtual_us
                    .map_or_else(|| "-".to_owned(), |u| format!("{u:.1}")),
                a.flags
                    .map_or_else(|| "-".to_owned(), |x| format!("{x:#x}")),
                opt(a.view_id),
                ranks(&a.failed)
            )?;
        }
        for v in &self.views {
            writeln!(
                f,
                "view {} at {}..{} ms: raised by {} of {} live ranks, {} distinct = {}",
                v.id,
                opt_ms(v.first_at_ms),
                opt_ms(v.last_at_ms),
                v.raised_by,
                v.live,
                v.distinct_failed_sets,
                ranks(&v.failed)
            )?;
        }
        write!(
            f,
            "virtual {:.3} ms, {} events, wall {:.2} s, peak RSS {:.0} MiB",
            t.virtual_end_ms, t.events, t.wall_s, t.peak_rss_mb
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure() -> FailureReport {
        FailureReport {
            rank: 3,
            fault: "crash".into(),
            injected_at_ms: 300.0,
            cause: Some(Cause::InBand),
            detector: Some(2),
            detected_at_ms: Some(303.0),
            all_notified_at_ms: None,
            missed: 1,
            max_hops: Some(4),
            messages: Some(12),
            bytes: Some(480),
            notified: None,
            exited_at_ms: None,
            learned_at_ms: None,
        }
    }

    #[test]
    fn causes_are_written_as_the_protocol_words() {
        for cause in Cause::ALL {
            assert_eq!(serde_json::to_value(cause).unwrap(), cause.as_str());
            let back: Cause = serde_json::from_value(cause.as_str().into()).unwrap();
            assert_eq!(back, cause);
        }
        assert!(serde_json::from_str::<Cause>("\"in-band\"").is_err());
    }

    #[test]
    fn fields_one_side_does_not_measure_are_absent_and_the_rest_always_present() {
        let json = serde_json::to_value(failure()).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "all_notified_at_ms",
                "bytes",
                "cause",
                "detected_at_ms",
                "detector",
                "fault",
                "injected_at_ms",
                "max_hops",
                "messages",
                "missed",
                "rank"
            ]
        );
        assert_eq!(json["cause"], "inband");
        assert!(json["all_notified_at_ms"].is_null());
        let back: FailureReport = serde_json::from_value(json).unwrap();
        assert_eq!(back, failure());

        let run = FailureReport {
            max_hops: None,
            messages: None,
            bytes: None,
            notified: Some(vec![0, 1]),
            ..failure()
        };
        let json = serde_json::to_value(&run).unwrap();
        assert!(json.get("max_hops").is_none() && json.get("bytes").is_none());
        assert_eq!(json["notified"], serde_json::json!([0, 1]));
        assert_eq!(serde_json::from_value::<FailureReport>(json).unwrap(), run);
    }
}
