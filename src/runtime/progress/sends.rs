//! Send and refusal bookkeeping: heartbeat writes and message sends to
//! peers, the sends a provider refused for now (kept in order per peer and
//! retried), how long each peer's run of refusals has lasted, and the
//! transport errors all of these become for the Engine.
//!
//! Owns: [`SendBook`] (refusal runs, links known to work, refused sends,
//! the last heartbeat's target). Must not: judge a peer itself (a run of
//! refusals past its bound, or a failed operation, is evidence handed to
//! the Engine, which judges), or drop a refused send before a verdict.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fabric::{CqError, FabricError, FailedOp, FiAddr};
use crate::protocol::{Evidence, FabricSaid, Input, Rank, Time, TransportErrorKind};

use super::super::evidence::{classify_completion, classify_post};
use super::super::transport::Transport;
use super::Core;

/// What the progress thread keeps of its sends between turns.
#[derive(Default)]
pub(super) struct SendBook {
    /// Start of the current run of refused posts, per peer.
    refused_since: BTreeMap<Rank, Instant>,
    /// Peers an operation of ours completed to: their link is established.
    connected: BTreeSet<Rank>,
    /// Sends refused for now, in order.
    pending: VecDeque<(Rank, Arc<[u8]>)>,
    /// Where the last heartbeat went (attributes context-less write errors).
    last_write_target: Option<Rank>,
}

impl SendBook {
    /// Whether refused sends wait for a retry.
    pub(super) fn is_waiting(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether a refused send to `to` waits: a new one goes behind it.
    pub(super) fn waits_for(&self, to: Rank) -> bool {
        self.pending.iter().any(|(p, _)| *p == to)
    }

    /// Whether a refused send waits for a peer that `pred` admits.
    pub(super) fn waits_for_any(&self, pred: impl Fn(Rank) -> bool) -> bool {
        self.pending.iter().any(|(p, _)| pred(*p))
    }

    /// Queues a send behind the refused ones to the same peer.
    pub(super) fn queue(&mut self, to: Rank, bytes: Arc<[u8]>) {
        self.pending.push_back((to, bytes));
    }
}

impl Core<'_> {
    /// An operation to the peer named by `token` completed: its link is up.
    pub(super) fn link_works(&mut self, token: u64) {
        if let Ok(peer) = Rank::try_from(token) {
            self.sends.refused_since.remove(&peer);
            self.sends.connected.insert(peer);
        }
    }

    pub(super) fn on_error_completion(&mut self, now: Time, error: CqError) {
        let (peer, kind) = match error.op {
            FailedOp::Write { token } => (
                Rank::try_from(token).ok(),
                TransportErrorKind::HeartbeatWrite,
            ),
            FailedOp::Send { token, .. } => (Rank::try_from(token).ok(), TransportErrorKind::Send),
            FailedOp::Recv => {
                self.logger.warn(format_args!("receive failed: {error}"));
                return;
            }
            // No context (shm): a write can only have been a heartbeat, and
            // heartbeats go to one peer at a time.
            FailedOp::Unknown if error.is_rma_write() => (
                self.sends.last_write_target,
                TransportErrorKind::HeartbeatWrite,
            ),
            FailedOp::Unknown => (None, TransportErrorKind::Send),
        };
        // Proof or silence, by what the provider said (`evidence.rs`).
        let evidence = classify_completion(error.err, error.prov_errno);
        let said = FabricSaid::Completion {
            err: error.err,
            prov_errno: error.prov_errno,
        };
        match peer {
            Some(peer) => {
                self.logger.info(format_args!(
                    "transport error on the link to rank {peer}: {error} ({})",
                    evidence.as_str()
                ));
                self.transport_error(now, peer, kind, evidence, said);
            }
            None => {
                self.counters.transport.unattributed_errors += 1;
                self.logger
                    .debug(format_args!("error completion naming no peer: {error}"));
            }
        }
    }

    pub(super) fn transport_error(
        &mut self,
        now: Time,
        peer: Rank,
        kind: TransportErrorKind,
        evidence: Evidence,
        said: FabricSaid,
    ) {
        self.counters.transport.errors += 1;
        self.sends.refused_since.remove(&peer);
        let _ = self.engine.handle(
            now,
            Input::TransportError {
                peer,
                kind,
                evidence,
                said,
            },
        );
    }

    /// A post that failed at once with `error` (not a refusal): proof or
    /// silence by its error number.
    fn post_failed(&mut self, peer: Rank, kind: TransportErrorKind, error: &FabricError) {
        let now = self.now();
        let err = error.errno().unwrap_or(0);
        let evidence = classify_post(err);
        self.transport_error(now, peer, kind, evidence, FabricSaid::Post { err });
    }

    /// A post to `peer` was refused (`-FI_EAGAIN`/`-FI_ENOENT`): a run of
    /// refusals longer than the bound is a verdict against the peer, and
    /// silence (a dead peer's connection and a cut one both refuse).
    pub(super) fn refused(&mut self, peer: Rank) {
        self.counters.transport.posts_refused += 1;
        let now = Instant::now();
        let since = *self.sends.refused_since.entry(peer).or_insert(now);
        let bound = self.refusal_bound(peer);
        let run = now.duration_since(since);
        if run > bound {
            self.counters.transport.unreachable_verdicts += 1;
            self.logger.info(format_args!(
                "rank {peer} unreachable: posts refused for {run:?}"
            ));
            self.sends.pending.retain(|(to, _)| *to != peer);
            let t = self.now();
            self.transport_error(
                t,
                peer,
                TransportErrorKind::Unreachable,
                Evidence::Silence,
                FabricSaid::Refused { run },
            );
        }
    }

    /// How long a run of refused posts to `peer` may last before it is a
    /// verdict ([`refusal_bound`]).
    fn refusal_bound(&self, peer: Rank) -> Duration {
        refusal_bound(
            self.eagain_limit,
            self.connect_grace,
            self.sends.connected.contains(&peer),
            self.engine.is_gone(peer),
            self.engine.own_health(),
        )
    }

    pub(super) fn write_heartbeat(
        &mut self,
        transport: &mut Transport,
        to: Rank,
        slot: u16,
        value: u64,
    ) {
        let Some(region) = self.peers.get(to as usize) else {
            return;
        };
        self.sends.last_write_target = Some(to);
        match transport.try_write_u64(
            FiAddr(u64::from(to)),
            region,
            usize::from(slot),
            value,
            u64::from(to),
        ) {
            Ok(()) => {
                self.counters.heartbeats.posted += 1;
                let started = self.started;
                self.diagnosis.beat_posted(|| super::elapsed(started));
            }
            // The next period brings the next beat; only the run is counted.
            Err(e) if e.is_refusal() => self.refused(to),
            // No endpoint (`transport.rs`): a bug, not evidence against `to`.
            Err(FabricError::Invalid(why)) => {
                self.logger
                    .error(format_args!("heartbeat to rank {to} not written: {why}"));
            }
            Err(e) => {
                self.logger
                    .info(format_args!("heartbeat to rank {to} failed: {e}"));
                self.post_failed(to, TransportErrorKind::HeartbeatWrite, &e);
            }
        }
    }

    /// Tries a send; a refused one waits in `pending`. Returns whether the
    /// send left (or was abandoned as an error).
    pub(super) fn send(&mut self, transport: &mut Transport, to: Rank, bytes: Arc<[u8]>) -> bool {
        // A rank of this host: its mailbox, not the fabric (`mail.rs`).
        if let Some(sent) = self.mail_send(to, &bytes) {
            return sent;
        }
        match transport.try_send(FiAddr(u64::from(to)), &bytes, u64::from(to)) {
            Ok(()) => {
                self.sends.refused_since.remove(&to);
                true
            }
            Err(e) if e.is_refusal() => {
                self.sends.pending.push_back((to, bytes));
                self.refused(to);
                false
            }
            Err(FabricError::Invalid(why)) => {
                // Too large for a buffer (message_buffers says it cannot
                // be): a bug, not evidence against `to`.
                self.logger
                    .error(format_args!("message to rank {to} not sent: {why}"));
                true
            }
            Err(e) => {
                self.logger
                    .info(format_args!("send to rank {to} failed: {e}"));
                self.post_failed(to, TransportErrorKind::Send, &e);
                true
            }
        }
    }

    /// Retries refused sends in order; stops at the first peer still refusing.
    pub(super) fn retry_pending(&mut self, transport: &mut Transport) {
        let mut round = std::mem::take(&mut self.sends.pending);
        let mut blocked: Vec<Rank> = Vec::new();
        // Sends to ranks already declared failed stay queued too: the Engine
        // addresses them on purpose (the exclusion notice a stopped rank
        // must find when it resumes). Only a refusal verdict drops them.
        while let Some((to, bytes)) = round.pop_front() {
            if blocked.contains(&to) {
                self.sends.pending.push_back((to, bytes));
                continue;
            }
            // `send` re-queues a refused message at the back of `pending`.
            if !self.send(transport, to, bytes) {
                blocked.push(to);
            }
        }
        // Outputs raised by transport errors during the retries.
        self.carry_out(transport);
    }
}

/// How long a run of refused posts to a peer may last before it is a
/// verdict: `eagain_limit` (`FFD_EAGAIN_LIMIT`), or `connect_grace`
/// (start-up grace + timeout) on a link that never carried anything
/// (`carried` false: connection set-up) to a rank still in the job (one
/// failed or left, `gone`, is no link being set up: its refusals, a
/// connection attempt each to a dead address, end after the limit and its
/// sends with them), stretched like the Engine's own timeouts while this
/// rank's wake-ups run late (its own `health`,
/// `docs/design.md` §4.3 "Timeout"): a refusal run is timing evidence
/// too, and a starved rank drains its queues late.
fn refusal_bound(
    eagain_limit: Duration,
    connect_grace: Duration,
    carried: bool,
    gone: bool,
    health: u32,
) -> Duration {
    let bound = if carried || gone {
        eagain_limit
    } else {
        eagain_limit.max(connect_grace)
    };
    bound.saturating_mul(health)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_millis(30);
    const GRACE: Duration = Duration::from_millis(1100);

    #[test]
    fn only_a_link_being_set_up_to_a_rank_in_the_job_gets_the_grace() {
        assert_eq!(refusal_bound(LIMIT, GRACE, false, false, 1), GRACE);
        assert_eq!(refusal_bound(LIMIT, GRACE, true, false, 1), LIMIT);
        // A failed rank's link that never carried anything: the exclusion
        // notice to a dead process, retried every millisecond until this.
        assert_eq!(refusal_bound(LIMIT, GRACE, false, true, 1), LIMIT);
        assert_eq!(refusal_bound(LIMIT, GRACE, true, true, 1), LIMIT);
    }

    #[test]
    fn a_late_rank_stretches_the_bound_and_a_limit_above_the_grace_stands() {
        assert_eq!(refusal_bound(LIMIT, GRACE, true, false, 3), LIMIT * 3);
        assert_eq!(refusal_bound(LIMIT, GRACE, false, false, 2), GRACE * 2);
        let long = Duration::from_secs(5);
        assert_eq!(refusal_bound(long, GRACE, false, false, 1), long);
    }
}
