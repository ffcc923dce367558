//! The Engine's counters ([`Engine::stats`](super::Engine::stats)), grouped
//! by concern in the style of quinn-proto's `connection/stats.rs`: the
//! traffic, the drops of input that was not trusted, this rank's own
//! timing, the observation of its emitter, notices and membership, sync
//! exchanges, payloads, the quorum, views and agreements, and host groups.
//!
//! Owns: the counter structs and their plain helpers. Must not: hold
//! protocol state or be read by any protocol decision (a counter only
//! counts; the model checker leaves them out of a job's state).

use crate::wire::{Kind, RejectReason};

use super::io::Cause;

/// Counters the runtime can read ([`Engine::stats`](super::Engine::stats)).
/// Plain integers, one group per concern.
///
/// `repr(C)`: the traffic counters, touched by every message
/// (`messages.duplicate_notices` and `messages.received`, whose first entry
/// is the notices'), come first, so that they fall in the Engine's first 5
/// cache lines with its other hot fields (see [`Engine`](super::Engine)
/// and its layout test).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Stats {
    /// Messages received and sent (first: the hot counters).
    pub messages: MessageStats,
    /// Messages dropped: undecodable, unauthenticated, or untrusted.
    pub drops: DropStats,
    /// This rank's own timing: late wake-ups and the health multiplier.
    pub health: HealthStats,
    /// This rank as emitter and observer: heartbeats, slot readings,
    /// mendings, suspicions.
    pub observation: ObservationStats,
    /// Notices and the failed and left sets.
    pub notices: NoticeStats,
    /// Sync exchanges between an observer and its emitter.
    pub sync: SyncStats,
    /// Application payloads (`engine/payloads.rs`).
    pub payloads: PayloadStats,
    /// The primary partition (`FFD_QUORUM=majority`, `engine/quorum/`).
    pub quorum: QuorumStats,
    /// View changes and user agreements (`engine/views.rs`).
    pub views: ViewStats,
    /// Host groups (`engine/local/`): same-host watching, the notice
    /// board, host checks.
    pub hosts: HostStats,
}

impl Stats {
    pub fn notices_sent(&self) -> u64 {
        self.messages.sent[Kind::Notice.index()]
    }
    pub fn notices_received(&self) -> u64 {
        self.messages.received[Kind::Notice.index()]
    }
    pub fn detections_by(&self, cause: Cause) -> u64 {
        self.notices.detections[cause as usize]
    }
}

/// Messages received and sent.
///
/// `repr(C)`: `duplicate_notices` and `received` first (see [`Stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct MessageStats {
    /// Notices that named nothing new (not forwarded).
    pub duplicate_notices: u64,
    /// Messages received, indexed by [`Kind::index`] (notices first: the
    /// counter every duplicate notice bumps stays in the hot lines however
    /// many kinds follow).
    pub received: [u64; Kind::COUNT],
    /// Messages sent, indexed by [`Kind::index`].
    pub sent: [u64; Kind::COUNT],
    pub bytes_sent: u64,
}

/// Messages dropped because they could not be trusted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DropStats {
    /// Messages dropped before any handler saw them (at decoding, the
    /// tag, the source address, the replay window, or from self), indexed
    /// by [`RejectReason::index`].
    pub rejected: [u64; RejectReason::COUNT],
    /// Messages from ranks in the failed set (answered with an exclusion).
    pub dropped_from_failed: u64,
    /// Notices whose origin is in the failed set; payloads naming this
    /// rank as origin with a number it never used; quorum messages of an
    /// accuser that is gone, and votes its round's tree refuses.
    pub dropped_untrusted_origin: u64,
}

/// How far this rank trusts its own timing (`engine/health.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthStats {
    /// Wake-ups that ran later than the lag guard: nobody declared.
    pub self_lag_trips: u64,
    /// The latest any timer fired past its deadline, in ns.
    pub max_lateness_ns: u64,
    /// Late wake-ups that raised the own health multiplier.
    pub health_rises: u64,
    /// The highest own health multiplier reached (0: it never rose above 1).
    pub health_peak: u64,
}

/// This rank as emitter (heartbeats) and as observer of its emitter (slot
/// readings, mendings, suspicions, transport errors).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObservationStats {
    pub heartbeats_written: u64,
    pub slot_checks: u64,
    pub mendings: u64,
    pub observe_me_accepted: u64,
    pub observe_me_stale: u64,
    pub observe_me_resent: u64,
    pub slow_emitter_warnings: u64,
    pub transport_errors: u64,
    /// Transport errors that were not evidence (departed peer, non-ring
    /// peer, in-band off).
    pub transport_errors_ignored: u64,
    pub suspicions: u64,
    pub suspicions_cleared: u64,
    /// Slot readings the Engine ignored: it no longer observes (this rank
    /// was excluded).
    pub stale_slot_reads: u64,
    /// Mended emitters whose link was confirmed by a completed send (their
    /// timeout started then rather than at the mending).
    pub mend_links_confirmed: u64,
    /// Slot readings that carried another generation than the one this
    /// rank named in `ObserveMe`: not heartbeats.
    pub foreign_slot_values: u64,
}

/// Notices, and what this rank learned of the failed and left sets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NoticeStats {
    pub notices_forwarded: u64,
    /// Forwarded failure notices whose copies to the origin's own overlay
    /// links went out a period after the others (`Engine::forward_failures`).
    pub origin_copies_released: u64,
    /// Failures this rank learned, indexed like [`Cause::ALL`].
    pub detections: [u64; Cause::COUNT],
    pub departures_learned: u64,
    pub exclusions_sent: u64,
    /// Exclusion replies not sent: one went to that rank within a timeout,
    /// or the bounded memory of recent replies was full.
    pub exclusion_replies_suppressed: u64,
}

/// Sync exchanges: an observer whose emitter's digest differs asks for
/// what it lacks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncStats {
    pub sync_requests_sent: u64,
    pub sync_requests_received: u64,
    /// Sync requests not honoured: not from this rank's emitter or
    /// observer, or a second one from that peer within a timeout.
    pub sync_requests_refused: u64,
    pub sync_replies_sent: u64,
    /// Sync replies cut to `max_sync_ranks` (the rest waits for the next
    /// request).
    pub sync_replies_truncated: u64,
    pub ranks_learned_by_sync: u64,
}

/// Application payloads: delivery, holds and repair.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PayloadStats {
    /// Payloads delivered to the host (`Event::Payload`).
    pub payloads_delivered: u64,
    /// Payload copies already delivered (or held) here.
    pub payload_duplicates: u64,
    /// Payloads held because an earlier one of the same origin was missing.
    pub payloads_held: u64,
    /// Payloads dropped because their origin's hold was full (the repair
    /// brings them again).
    pub payloads_hold_overflow: u64,
    /// Payloads sent in answer to sync requests.
    pub sync_payloads_sent: u64,
    /// Sync requests whose payloads were cut to `max_sync_payload_bytes`.
    pub sync_payloads_truncated: u64,
    /// Origins a sync requester lacked payloads of that are older than the
    /// ones kept here (`payload_retention`): not repairable from here.
    pub payloads_beyond_retention: u64,
}

/// The quorum (`FFD_QUORUM=majority`, `engine/quorum/`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuorumStats {
    /// Accusations this rank made (each silence of a rank it watches, once).
    pub accusations: u64,
    /// Further rounds of them: no quorum yet, flooded again (new nonce).
    pub accusation_rounds: u64,
    /// Votes this rank sent (first votes and updates of a subtree's count).
    pub votes_sent: u64,
    /// Accusations of this rank's that a majority confirmed (declared).
    pub quorum_confirmations: u64,
    /// Accusations of this rank's withdrawn: the suspect answered, or its
    /// slot moved again.
    pub refutations: u64,
    /// Times this rank excluded itself for want of a quorum (as accuser, or
    /// as voter in such an accusation).
    pub no_quorum_exclusions: u64,
    /// Accusations of others this rank took no part in: it already held the
    /// most ballots it keeps.
    pub ballots_refused: u64,
    /// Accusations of this rank's own emitters withdrawn because it woke
    /// later than the lag guard meanwhile (its stall voids its evidence).
    pub withdrawn_on_self_lag: u64,
    /// Confirmed accusations held until the suspect's silence reached the
    /// ceiling, because this rank's own timing was strained.
    pub confirmations_held: u64,
}

/// View changes and user agreements (`engine/views.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ViewStats {
    /// View changes raised (`Event::ViewChange`).
    pub views_raised: u64,
    /// User agreements decided here (`Event::Agreed`).
    pub agreements_decided: u64,
    /// Agreement messages dropped: for an instance this rank no longer
    /// keeps or is too far ahead of, or received after this rank left.
    pub agreement_messages_dropped: u64,
}

/// Host groups (`engine/local/`): the same-host emitter's counter, same-host
/// exits, the host's notice board, its leader, and checks of silent hosts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Checks of the same-host emitter's counter in shared memory.
    pub local_checks: u64,
    /// Same-host emitters declared after their counter stood still.
    pub local_hangs: u64,
    /// Local checks that found the same-host emitter's counter past its
    /// timeout but its progress thread runnable (waiting for a CPU): given
    /// the ceiling, `health_max` timeouts, instead of declared.
    pub starved_emitter_checks: u64,
    /// Same-host emitters declared at once because the kernel showed their
    /// progress thread stopped once their counter stood still for the
    /// timeout ([`FailureDetail::Stopped`](super::FailureDetail::Stopped)).
    pub stopped_emitters_declared: u64,
    /// Same-host exits reported by the driver (pidfd), already known or not.
    pub exits_seen: u64,
    /// Notices this rank sent for same-host exits whose broadcaster (the
    /// host's lowest live rank then) failed before it was known to have
    /// sent them: one notice naming all of them.
    pub orphaned_exits_broadcast: u64,
    /// News this rank posted on its host's notice board.
    pub board_posts: u64,
    /// Failures this rank learned from its host's notice board.
    pub board_learned: u64,
    /// Board news whose held copies to other hosts went out, a period
    /// after it was read (`Engine::on_board_notice`).
    pub board_forwards_released: u64,
    /// Fabric emitters whose host was checked before declaring (a probe
    /// to each of its live ranks).
    pub host_checks: u64,
    /// Host checks that found the whole host silent: one notice named
    /// every rank of it.
    pub hosts_declared: u64,
    /// Times this rank became its host's leader after the one before it
    /// failed or left.
    pub leader_takeovers: u64,
}
