//! The linking phase, before the Engine starts: each rank's heartbeat link
//! to its observer must carry a write, and its broadcast links are warmed.
//!
//! Owns: the first write to the observer, the warm-up sends, and the
//! messages that arrive meanwhile (a faster rank's first notice), held for
//! the Engine. Must not: judge anyone (no Engine runs yet), hold a message
//! that is not of this job (magic and job key are checked), or hold more
//! than [`HOLD_MESSAGES`] messages and [`HOLD_BYTES`] bytes: beyond that
//! they are dropped and counted, so a flood during start-up costs bounded
//! memory.
//!
//! Why: on `tcp;ofi_rxm` connection set-up costs CPU on both sides and was
//! seen to take over a second with 32 ranks on 2 cores; judged meanwhile,
//! live ranks would be declared. The thread keeps progressing its
//! completion queue (peers' connections to it need that) until
//! `Detector::start` has seen every rank linked (a bootstrap barrier) and
//! says go.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::time::Duration;

use crate::fabric::{Completion, FailedOp, FiAddr, RemoteRegion};
use crate::protocol::{Rank, wire};

use super::progress::{Command, Parts};
use super::state::{StopCause, StopReason};

/// The linking phase's warm-up message. It cannot be mistaken for a
/// protocol message (those start with the magic `FFDP`, a 36-byte header,
/// and end with a tag) and never reaches the Engine.
pub(super) const WARM_UP: &[u8] = b"FFDW";

/// At most this many messages are held for the Engine while linking.
pub(super) const HOLD_MESSAGES: usize = 256;
/// At most this many bytes of messages are held while linking (room for
/// every held message to be a large notice or payload).
pub(super) const HOLD_BYTES: usize = 2 << 20;

/// The job key's place in every protocol message's header: bytes 8..16,
/// little-endian, after the magic, version, kind and flags (docs/design.md
/// §5 "Wire format"; unchanged by later versions of the header).
const JOB_KEY_AT: std::ops::Range<usize> = 8..16;

/// What the linking phase needs besides the transport. A one-host job
/// (no endpoint, `transport.rs`) has no link to set up: no target, none
/// to warm.
pub(super) struct Link {
    /// The observer and its slot region (none in a job of one).
    pub target: Option<(Rank, RemoteRegion)>,
    /// The broadcast neighbours: their links are set up now too, so the
    /// first notice wave does not pay a connection set-up per hop.
    pub warm: Vec<Rank>,
    /// Signalled once the write to the observer completed.
    pub linked: SyncSender<()>,
    /// Go (a unit) or give up (disconnected).
    pub go: Receiver<()>,
    /// How far linking has come, for `Detector::start` to report.
    pub progress: Arc<LinkProgress>,
}

/// How far the linking phase has come (written by the progress thread,
/// read by `Detector::start` while it waits).
#[derive(Debug, Default)]
pub(super) struct LinkProgress {
    /// The write to the observer completed (or there is no observer).
    pub observer: AtomicBool,
    /// Broadcast links whose warm-up send completed.
    pub warm: AtomicU32,
}

/// Messages received while linking, for the Engine once it starts.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// (the transport's sender, if it reports one; the bytes), in order.
    pub messages: Vec<(Option<Rank>, Vec<u8>)>,
    bytes: usize,
    /// Dropped: no magic or another job's key.
    pub dropped_foreign: u64,
    /// Dropped: the hold was full.
    pub dropped_over_cap: u64,
}

impl Held {
    /// Keeps a copy of `bytes` if it is of this job (magic and `job_key`)
    /// and fits the caps; otherwise counts the drop.
    pub(super) fn offer(&mut self, from: Option<Rank>, bytes: &[u8], job_key: u64) {
        if !of_this_job(bytes, job_key) {
            self.dropped_foreign += 1;
        } else if self.messages.len() >= HOLD_MESSAGES || self.bytes + bytes.len() > HOLD_BYTES {
            self.dropped_over_cap += 1;
        } else {
            self.bytes += bytes.len();
            self.messages.push((from, bytes.to_vec()));
        }
    }
}

/// Whether `bytes` starts like a protocol message of the job `job_key`:
/// the magic and the job key only (the Engine validates the rest).
fn of_this_job(bytes: &[u8], job_key: u64) -> bool {
    bytes.starts_with(&wire::MAGIC)
        && bytes.get(JOB_KEY_AT) == Some(job_key.to_le_bytes().as_slice())
}

/// How the linking phase ended.
pub(super) enum Linked {
    /// Go: start the Engine, with what arrived meanwhile.
    Go(Held),
    /// Told to stop (start-up failed elsewhere, or the embedder left at once).
    Abandoned,
    /// The completion queue failed.
    Failed(StopReason),
}

/// Runs the linking phase until `Detector::start` says go (bounded by it:
/// it says go or drops the channel within its own bounds).
pub(super) fn link_phase(parts: &mut Parts) -> Linked {
    let job_key = parts.seed.keys.job_key();
    let mut held = Held::default();
    let mut observer_done = parts.link.target.is_none();
    let mut posted = false;
    // Broadcast neighbours still to warm up, and whether a send is posted.
    let mut warm: BTreeMap<Rank, bool> = parts.link.warm.iter().map(|&r| (r, false)).collect();
    let mut linked = false;
    loop {
        match parts.link.go.try_recv() {
            Ok(()) => return Linked::Go(held),
            Err(TryRecvError::Disconnected) => return Linked::Abandoned,
            Err(TryRecvError::Empty) => {}
        }
        if matches!(
            parts.commands.try_recv(),
            Ok(Command::Stop | Command::Leave)
        ) {
            return Linked::Abandoned;
        }
        for (&to, in_flight) in warm.iter_mut().filter(|(_, f)| !**f) {
            match parts
                .transport
                .try_send(FiAddr(u64::from(to)), WARM_UP, u64::from(to))
            {
                Ok(()) => *in_flight = true,
                Err(e) if e.is_refusal() => {}
                Err(e) => parts
                    .logger
                    .debug(format_args!("warming the link to rank {to}: {e}")),
            }
        }
        if let (false, false, Some((to, region))) =
            (observer_done, posted, parts.link.target.as_ref())
        {
            match parts.transport.try_write_u64(
                FiAddr(u64::from(*to)),
                region,
                0,
                0,
                u64::from(*to),
            ) {
                Ok(()) => posted = true,
                Err(e) if e.is_refusal() => {}
                Err(e) => parts
                    .logger
                    .debug(format_args!("linking to rank {to}: {e}")),
            }
        }
        let target = parts.link.target.as_ref().map(|(t, _)| u64::from(*t));
        let mut done = false;
        let mut write_failed = false;
        let waited = parts.transport.wait_or(
            Duration::from_millis(5),
            parts.wake.as_fd(),
            &mut |c| match c {
                Completion::Written { token } if Some(token) == target => done = true,
                Completion::Sent { token, .. } => {
                    if let Ok(peer) = Rank::try_from(token) {
                        warm.remove(&peer);
                    }
                }
                Completion::Failed(e) => match e.op {
                    // Try again next round (the peer may still be starting).
                    FailedOp::Send { token, .. } => {
                        if let Some(f) = Rank::try_from(token).ok().and_then(|p| warm.get_mut(&p)) {
                            *f = false;
                        }
                    }
                    _ => write_failed = true,
                },
                Completion::Received { bytes, source } if bytes != WARM_UP => {
                    let from = source.and_then(|a| Rank::try_from(a.0).ok());
                    held.offer(from, bytes, job_key);
                }
                _ => {}
            },
        );
        if let Err(e) = waited {
            return Linked::Failed(StopReason::new(
                StopCause::Wait,
                format!("while linking: {e}"),
            ));
        }
        let mut sink = [0u8; 64];
        while matches!((&parts.wake).read(&mut sink), Ok(n) if n > 0) {}
        observer_done |= done;
        if write_failed {
            posted = false;
        }
        let progress = &parts.link.progress;
        progress.observer.store(observer_done, Ordering::Relaxed);
        let warmed = parts.link.warm.len().saturating_sub(warm.len());
        progress
            .warm
            .store(u32::try_from(warmed).unwrap_or(u32::MAX), Ordering::Relaxed);
        if observer_done && warm.is_empty() && !linked {
            linked = true;
            let _ = parts.link.linked.try_send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::wire::Encoder;

    #[test]
    fn only_messages_of_this_job_are_held() {
        let mut held = Held::default();
        let mine = Encoder::new(0xfeed, 1).probe(7, 2);
        held.offer(Some(1), &mine, 0xfeed);
        held.offer(Some(1), &Encoder::new(0xbeef, 1).probe(7, 2), 0xfeed);
        held.offer(None, WARM_UP, 0xfeed);
        held.offer(None, b"FFDP", 0xfeed); // the magic, no key
        held.offer(None, &[], 0xfeed);
        assert_eq!(held.messages, [(Some(1), mine)]);
        assert_eq!((held.dropped_foreign, held.dropped_over_cap), (4, 0));
    }

    #[test]
    fn the_hold_is_capped_in_count_and_bytes() {
        let enc = Encoder::new(9, 0);
        let small = enc.probe(1, 1);
        let mut held = Held::default();
        for _ in 0..HOLD_MESSAGES + 10 {
            held.offer(None, &small, 9);
        }
        assert_eq!(held.messages.len(), HOLD_MESSAGES);
        assert_eq!(held.dropped_over_cap, 10);

        let big = enc.payload(0, 1, 0, &vec![0u8; 8 * 1024]);
        let mut held = Held::default();
        let fit = HOLD_BYTES / big.len();
        for _ in 0..fit + 3 {
            held.offer(None, &big, 9);
        }
        assert_eq!(held.messages.len(), fit);
        assert!(held.messages.len() * big.len() <= HOLD_BYTES);
        assert_eq!(held.dropped_over_cap, 3);
        assert_eq!(held.dropped_foreign, 0);
    }
}
