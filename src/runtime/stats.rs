//! What the progress thread counts, as the embedder reads it.
//!
//! Owns: the runtime's own counters, grouped (heartbeats, messages,
//! transport refusals and errors, the linking phase, delivery, wake-up
//! lateness, same-host watching) and the snapshot
//! type that joins them to the Engine's. Must not: be locked by the
//! progress thread in a way that can wait: it publishes with `try_lock` and
//! simply retries at the next publication.

use std::time::Duration;

use crate::protocol::{self, Cause};

use super::placement::Placement;

/// Upper bounds (exclusive) of the wake-up lateness buckets, in µs; the
/// last bucket holds everything later.
pub const LATENESS_BUCKETS_US: [u64; 7] = [10, 100, 1_000, 5_000, 10_000, 50_000, 100_000];

/// How late the progress thread woke for its deadlines: the jitter that
/// causes false positives when it approaches the timeout.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LatenessHistogram {
    /// `counts[i]` wake-ups were later than bucket i-1's bound and earlier
    /// than `LATENESS_BUCKETS_US[i]`; the last entry counts the rest.
    pub counts: [u64; LATENESS_BUCKETS_US.len() + 1],
    pub max_us: u64,
    pub total: u64,
}

impl LatenessHistogram {
    pub fn record(&mut self, late: Duration) {
        let us = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        let i = LATENESS_BUCKETS_US
            .iter()
            .position(|&bound| us < bound)
            .unwrap_or(LATENESS_BUCKETS_US.len());
        self.counts[i] += 1;
        self.total += 1;
        self.max_us = self.max_us.max(us);
    }

    /// The smallest bucket bound below which at least `q` (0..=1) of the
    /// wake-ups fall, in µs (`None` for the open last bucket or no data).
    pub fn quantile_bound_us(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let want = (q * self.total as f64).ceil() as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return LATENESS_BUCKETS_US.get(i).copied();
            }
        }
        None
    }
}

/// The runtime's own counters, grouped by concern as the Engine's are
/// ([`protocol::Stats`]): what the progress thread posts and what the
/// provider completes, refuses or reports; the linking phase; delivery to
/// the embedder; its wake-ups; same-host watching. What the Engine counts
/// (messages by kind, drops by reason) is in the Engine's counters only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RuntimeCounters {
    /// Heartbeat RDMA writes.
    pub heartbeats: HeartbeatCounters,
    /// Message sends and receives on the fabric.
    pub messages: MessageCounters,
    /// Posts the provider refused, and the errors it reported.
    pub transport: TransportCounters,
    /// The linking phase before the Engine starts.
    pub link: LinkCounters,
    /// Events to the embedder.
    pub delivery: DeliveryCounters,
    /// Wake-ups for a deadline and how late they ran.
    pub lateness: LatenessHistogram,
    /// Same-host watching (`FFD_LOCAL`): pidfds, exit words, lifts.
    pub local: LocalCounters,
    /// The liveness port (`FFD_LIVENESS`).
    pub liveness: LivenessCounters,
    /// Same-host messages through the host's segment (the mailboxes).
    pub mailbox: MailboxCounters,
    /// The embedder's commands to the progress thread.
    pub commands: CommandCounters,
}

/// The embedder's commands to the progress thread (`runtime/commands.rs`,
/// docs/design.md §4.9 "Payloads").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CommandCounters {
    /// Broadcasts refused because `MAX_QUEUED_BROADCASTS` waited for the
    /// progress thread (`DetectorError::Busy`): none of them was sent.
    pub broadcasts_refused_busy: u64,
    /// Turns that took their most broadcasts (`BROADCASTS_PER_TURN`) and
    /// left the commands behind them to the next turn, which came at once.
    pub capped_turns: u64,
}

/// Same-host messages through the mailboxes of the host's segment
/// (`docs/design.md` §4.12 "Hosts"): what went, what came, and the posts
/// a full mailbox refused (each waits and goes again, in order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct MailboxCounters {
    /// Messages posted to another local rank's mailbox.
    pub sent: u64,
    /// Of those, posts that woke the owner (its progress thread was
    /// asleep): a knock on its doorbell, or its mail word rung.
    pub rung: u64,
    /// Messages read from this rank's mailbox.
    pub received: u64,
    /// Posts refused by a full mailbox (retried later).
    pub full: u64,
    /// Messages too large for a record, sent over the fabric (none
    /// expected: a record holds the largest message).
    pub too_large: u64,
    /// Knocks on this rank's doorbell from another user (the first
    /// closed it: writers ring the mail word since).
    pub foreign_knocks: u64,
}

/// The liveness port (`FFD_LIVENESS`, design §4.5 "In-band detection"):
/// the watch of the emitter's, its probes and their answers, and the
/// connections this rank's listener held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LivenessCounters {
    /// Watches opened to an emitter's port.
    pub watches: u64,
    /// Watches that ended without a leave (each starts a probe).
    pub watches_ended: u64,
    /// Probes made (retries included).
    pub probes: u64,
    pub refused: u64,
    pub greeted: u64,
    pub unanswered: u64,
    /// Connections accepted and held by this rank's listener.
    pub accepted: u64,
    /// Connections closed at once: from outside the job, or over the cap.
    pub turned_away: u64,
}

/// Heartbeat RDMA writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct HeartbeatCounters {
    /// Writes posted (accepted by the provider).
    pub posted: u64,
    /// Writes that completed.
    pub completed: u64,
}

/// Message sends and receives on the fabric, as the provider reports them
/// (the Engine counts its outputs and inputs by kind:
/// `engine.sent`, `engine.received`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct MessageCounters {
    /// Sends that completed (a send refused and retried counts once).
    pub sends_completed: u64,
    /// Messages received and handed to the Engine (those it rejected
    /// included: `engine.rejected` counts them by reason).
    pub received: u64,
}

/// Posts the provider refused, and the errors it reported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TransportCounters {
    /// Posts refused with `-FI_EAGAIN` (or `-FI_ENOENT`), heartbeats and
    /// messages.
    pub posts_refused: u64,
    /// Peers declared unreachable after a run of refused posts.
    pub unreachable_verdicts: u64,
    /// Error completions and post errors handed to the Engine as
    /// transport errors.
    pub errors: u64,
    /// Error completions that named no peer (`shm` gives NULL contexts).
    pub unattributed_errors: u64,
}

/// The linking phase before the Engine starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LinkCounters {
    /// Messages received while linking and handed to the Engine once it
    /// started.
    pub messages_held: u64,
    /// Messages received while linking and dropped: no protocol magic, or
    /// another job's key.
    pub dropped_foreign: u64,
    /// Messages received while linking and dropped because the hold was
    /// full (256 messages or 2 MiB).
    pub dropped_over_cap: u64,
}

/// Events to the embedder.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct DeliveryCounters {
    /// Events dropped because the embedder's event queue was full.
    pub events_dropped: u64,
    /// Embedder callbacks that panicked (caught; the thread goes on).
    pub callback_panics: u64,
}

/// Same-host watching (`FFD_LOCAL`; the code names of that setting keep
/// the word *local*, docs/design.md, Glossary).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LocalCounters {
    /// Other ranks of this host watched through a pidfd from the start
    /// (the rest by their counters only; `fallback` says why).
    pub pidfds: u64,
    /// Why some same-host ranks are watched by their counters only (empty:
    /// all have a pidfd, or this rank is alone on its host).
    pub fallback: String,
    /// Same-host exits seen through pidfds.
    pub exits_seen: u64,
    /// Other same-host ranks watched through their exit words (robust
    /// futexes in the host's segment: an exit seen before the kernel tears
    /// the process down; 0 where `futex_waitv` is missing, `fallback` says
    /// why).
    pub exit_words: u64,
    /// Same-host exits seen through exit words.
    pub exit_words_seen: u64,
    /// Times the progress thread was lifted: by an exit-word thread to
    /// handle a same-host exit or notice, or by an embedder's agreement
    /// call to take it (`FFD_SCHED=boost|fifo`; 0 when neither applies or
    /// the kernel refused real-time scheduling).
    pub boost_lifts: u64,
    /// Times the progress thread was held at `SCHED_FIFO` while an
    /// agreement or a view change was under way here (`FFD_SCHED=boost`;
    /// 0 under `normal` and `fifo`, or when the kernel refused real-time
    /// scheduling).
    pub boost_holds: u64,
    /// Times the agreement hold was given up because the progress thread
    /// was busy (more than half of a 2 ms window on its CPU): it then runs
    /// at the normal policy, so the other threads of its CPU, other ranks'
    /// progress threads among them, keep their share (`progress/hold.rs`;
    /// `FFD_SCHED=boost` only).
    pub busy_releases: u64,
    /// Idle ticks whose sleep was extended to the host's wake-up grid,
    /// so that the host's ranks wake together (`progress/cadence.rs`).
    pub grid_ticks: u64,
}

/// One consistent picture of the detector's counters ([`super::Detector::stats`]).
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct StatsSnapshot {
    /// Time since the detector started.
    pub uptime_ms: f64,
    pub epoch: u64,
    pub runtime: RuntimeCounters,
    #[cfg_attr(feature = "serde", serde(serialize_with = "serialize_engine_stats"))]
    pub engine: protocol::Stats,
    pub placement: Option<Placement>,
    /// The progress thread's scheduling policy as it runs (`FFD_SCHED`):
    /// `normal`, `fifo`, or `normal` and why `fifo` was refused.
    pub sched: String,
    pub provider: String,
    pub domain: String,
}

impl StatsSnapshot {
    /// Failures this rank learned, by cause.
    pub fn detections(&self, cause: Cause) -> u64 {
        self.engine.detections_by(cause)
    }
}

/// The Engine's counters as a map with named entries (kinds, reject
/// reasons and causes by their names rather than by index).
#[cfg(feature = "serde")]
fn serialize_engine_stats<S: serde::Serializer>(
    stats: &protocol::Stats,
    s: S,
) -> Result<S::Ok, S::Error> {
    use crate::protocol::{Kind, RejectReason};
    use serde::ser::SerializeMap;

    /// Counters indexed like `names`, as a map name -> count.
    struct Named<'a>(&'a [&'static str], &'a [u64]);
    impl serde::Serialize for Named<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_map(self.0.iter().zip(self.1))
        }
    }
    let kinds: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
    let reasons: Vec<&str> = RejectReason::ALL.iter().map(|r| r.as_str()).collect();
    let causes: Vec<&str> = Cause::ALL.iter().map(|c| c.as_str()).collect();
    let detections: Vec<u64> = Cause::ALL.iter().map(|&c| stats.detections_by(c)).collect();
    let mut m = s.serialize_map(None)?;
    m.serialize_entry("heartbeats_written", &stats.observation.heartbeats_written)?;
    m.serialize_entry("slot_checks", &stats.observation.slot_checks)?;
    m.serialize_entry("self_lag_trips", &stats.health.self_lag_trips)?;
    m.serialize_entry("health_rises", &stats.health.health_rises)?;
    m.serialize_entry("health_peak", &stats.health.health_peak)?;
    m.serialize_entry(
        "mend_links_confirmed",
        &stats.observation.mend_links_confirmed,
    )?;
    m.serialize_entry(
        "starved_emitter_checks",
        &stats.hosts.starved_emitter_checks,
    )?;
    m.serialize_entry(
        "stopped_emitters_declared",
        &stats.hosts.stopped_emitters_declared,
    )?;
    m.serialize_entry("board_posts", &stats.hosts.board_posts)?;
    m.serialize_entry("board_learned", &stats.hosts.board_learned)?;
    m.serialize_entry(
        "board_forwards_released",
        &stats.hosts.board_forwards_released,
    )?;
    m.serialize_entry(
        "origin_copies_released",
        &stats.notices.origin_copies_released,
    )?;
    m.serialize_entry("max_lateness_ns", &stats.health.max_lateness_ns)?;
    m.serialize_entry("sent", &Named(&kinds, &stats.messages.sent))?;
    m.serialize_entry("received", &Named(&kinds, &stats.messages.received))?;
    m.serialize_entry("bytes_sent", &stats.messages.bytes_sent)?;
    m.serialize_entry("rejected", &Named(&reasons, &stats.drops.rejected))?;
    m.serialize_entry("dropped_from_failed", &stats.drops.dropped_from_failed)?;
    m.serialize_entry(
        "dropped_untrusted_origin",
        &stats.drops.dropped_untrusted_origin,
    )?;
    m.serialize_entry("duplicate_notices", &stats.messages.duplicate_notices)?;
    m.serialize_entry("notices_forwarded", &stats.notices.notices_forwarded)?;
    m.serialize_entry("detections", &Named(&causes, &detections))?;
    m.serialize_entry("departures_learned", &stats.notices.departures_learned)?;
    m.serialize_entry("mendings", &stats.observation.mendings)?;
    m.serialize_entry("sync_requests_sent", &stats.sync.sync_requests_sent)?;
    m.serialize_entry("sync_requests_refused", &stats.sync.sync_requests_refused)?;
    m.serialize_entry("sync_replies_truncated", &stats.sync.sync_replies_truncated)?;
    m.serialize_entry("ranks_learned_by_sync", &stats.sync.ranks_learned_by_sync)?;
    m.serialize_entry("exclusions_sent", &stats.notices.exclusions_sent)?;
    m.serialize_entry(
        "exclusion_replies_suppressed",
        &stats.notices.exclusion_replies_suppressed,
    )?;
    m.serialize_entry(
        "foreign_slot_values",
        &stats.observation.foreign_slot_values,
    )?;
    m.serialize_entry(
        "slow_emitter_warnings",
        &stats.observation.slow_emitter_warnings,
    )?;
    m.serialize_entry("transport_errors", &stats.observation.transport_errors)?;
    m.serialize_entry(
        "transport_errors_ignored",
        &stats.observation.transport_errors_ignored,
    )?;
    m.serialize_entry("suspicions", &stats.observation.suspicions)?;
    // Destructured: a new quorum counter does not build until it is named
    // here; each is serialised under its field name.
    macro_rules! quorum_counters {
        ($($field:ident),* $(,)?) => {{
            let protocol::QuorumStats { $($field),* } = stats.quorum;
            ([$(stringify!($field)),*], [$($field),*])
        }};
    }
    let (names, values) = quorum_counters!(
        accusations,
        accusation_rounds,
        votes_sent,
        quorum_confirmations,
        refutations,
        no_quorum_exclusions,
        ballots_refused,
        withdrawn_on_self_lag,
        confirmations_held,
    );
    m.serialize_entry("quorum", &Named(&names, &values))?;
    m.serialize_entry("payloads_delivered", &stats.payloads.payloads_delivered)?;
    m.serialize_entry("payload_duplicates", &stats.payloads.payload_duplicates)?;
    m.serialize_entry("payloads_held", &stats.payloads.payloads_held)?;
    m.serialize_entry(
        "payloads_hold_overflow",
        &stats.payloads.payloads_hold_overflow,
    )?;
    m.serialize_entry("sync_payloads_sent", &stats.payloads.sync_payloads_sent)?;
    m.serialize_entry(
        "sync_payloads_truncated",
        &stats.payloads.sync_payloads_truncated,
    )?;
    m.serialize_entry(
        "payloads_beyond_retention",
        &stats.payloads.payloads_beyond_retention,
    )?;
    m.end()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_lands_in_its_bucket_and_quantiles_follow() {
        let mut h = LatenessHistogram::default();
        for us in [5, 50, 50, 500, 200_000] {
            h.record(Duration::from_micros(us));
        }
        assert_eq!(h.counts, [1, 2, 1, 0, 0, 0, 0, 1]);
        assert_eq!(h.total, 5);
        assert_eq!(h.max_us, 200_000);
        assert_eq!(h.quantile_bound_us(0.5), Some(100));
        assert_eq!(h.quantile_bound_us(0.8), Some(1_000));
        assert_eq!(h.quantile_bound_us(1.0), None, "open last bucket");
        assert_eq!(LatenessHistogram::default().quantile_bound_us(0.5), None);
    }

    #[cfg(feature = "serde")]
    #[test]
    fn snapshot_serialises_engine_counters_by_name() {
        let mut snap = StatsSnapshot::default();
        snap.engine.notices.detections[Cause::InBand as usize] = 2;
        snap.engine.payloads.payloads_hold_overflow = 3;
        let v = serde_json::to_value(&snap).unwrap();
        assert_eq!(v["engine"]["payloads_hold_overflow"], 3);
        snap.engine.quorum.confirmations_held = 4;
        snap.engine.quorum.withdrawn_on_self_lag = 5;
        let v = serde_json::to_value(&snap).unwrap();
        assert_eq!(v["engine"]["quorum"]["confirmations_held"], 4);
        assert_eq!(v["engine"]["quorum"]["withdrawn_on_self_lag"], 5);
        assert_eq!(v["engine"]["quorum"]["accusations"], 0);
        assert_eq!(v["engine"]["detections"]["inband"], 2);
        assert_eq!(v["engine"]["sent"]["notice"], 0);
        // Every reason a message is dropped, by name.
        for reason in crate::protocol::RejectReason::ALL {
            assert_eq!(v["engine"]["rejected"][reason.as_str()], 0, "{reason:?}");
        }
        assert_eq!(v["engine"]["rejected"]["bad_mac"], 0);
        assert_eq!(v["runtime"]["lateness"]["total"], 0);
        // The runtime's counters, by group.
        snap.runtime.heartbeats.posted = 6;
        snap.runtime.messages.sends_completed = 7;
        snap.runtime.local.boost_lifts = 8;
        snap.runtime.commands.broadcasts_refused_busy = 9;
        let v = serde_json::to_value(&snap).unwrap();
        assert_eq!(v["runtime"]["commands"]["broadcasts_refused_busy"], 9);
        assert_eq!(v["runtime"]["commands"]["capped_turns"], 0);
        assert_eq!(v["runtime"]["heartbeats"]["posted"], 6);
        assert_eq!(v["runtime"]["messages"]["sends_completed"], 7);
        assert_eq!(v["runtime"]["local"]["boost_lifts"], 8);
        assert!(v["runtime"].get("messages_rejected").is_none());
    }
}
