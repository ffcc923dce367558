//! Readable traces: a step, a copy in flight, an event, in the protocol's
//! words.
//!
//! Owns: the text of a counterexample. Must not: change a state (a trace
//! re-runs the path's steps with the log on).

use ffd_protocol::wire::{AgreementId, Message, WireValue};
use ffd_protocol::{Event, FailureDetail, Rank};

use super::job::{Action, Job, Packet, State, since_start};
use super::props;

/// One step, as the environment took it.
pub fn action(job: &Job, s: &State, a: Action) -> String {
    match a {
        Action::Deliver { from, to }
        | Action::Duplicate { from, to }
        | Action::Lose { from, to } => {
            let verb = match a {
                Action::Deliver { .. } => "deliver",
                Action::Duplicate { .. } => "deliver a duplicate of",
                _ => "lose",
            };
            let copy = s.outbox[from as usize]
                .iter()
                .find(|p| p.to == to)
                .map_or_else(
                    || format!("{from} → {to} (none)"),
                    |p| message(job, from, p),
                );
            format!("{verb} {copy}")
        }
        Action::Tick { rank, beat } => {
            let node = &s.nodes[rank as usize];
            let at = node
                .engine
                .next_deadline()
                .map_or_else(|| "never".to_owned(), |d| since_start(node.clock.max(d)));
            let reading = match (node.engine.watched_slot(), beat) {
                (None, _) => "no emitter",
                (Some(_), true) => "its emitter's new beat in the slot",
                (Some(_), false) => "no new beat in the slot",
            };
            format!("rank {rank}'s deadline fires at {at} ({reading})")
        }
        Action::WriteError { rank } => {
            let to = s.nodes[rank as usize].stream.map_or(u32::MAX, |st| st.to);
            format!("rank {rank}'s heartbeat write to crashed rank {to} fails (proof)")
        }
        Action::Probe { rank, greeted } => {
            let e = s.nodes[rank as usize].engine.emitter().unwrap_or(u32::MAX);
            let answer = job.probe_answer(s, rank, e, greeted);
            format!("rank {rank} probes its emitter {e}'s liveness port: {answer:?}")
        }
        Action::Crash { rank, keep } => {
            let queued = s.outbox[rank as usize].len();
            if queued == 0 {
                format!("rank {rank} crashes")
            } else {
                format!(
                    "rank {rank} crashes; of its {queued} copies in flight, the first {keep} \
                     had left"
                )
            }
        }
        Action::Cut { side } => format!("partition {}", props::sides(job.n(), side)),
        Action::Heal => "the partition heals".to_owned(),
        Action::Broadcast { rank } => {
            let seq = s.nodes[rank as usize].engine.payload_mark(rank) + 1;
            format!("rank {rank}'s host broadcasts payload {seq}")
        }
        Action::Agree { rank } => {
            let seq = s.nodes[rank as usize].calls + 1;
            format!("rank {rank}'s host calls agreement {seq}")
        }
        Action::Leave { rank } => format!("rank {rank}'s host leaves"),
    }
}

/// A copy in flight, decoded as its receiver would.
pub fn message(job: &Job, from: Rank, p: &Packet) -> String {
    let body = match job.decode(p) {
        Ok((_, m)) => body(&m),
        Err(e) => format!("undecodable ({})", e.as_str()),
    };
    format!("{from} → {}: {body}", p.to)
}

fn ranks(l: ffd_protocol::RankList<'_>) -> String {
    format!("{:?}", l.to_vec())
}

fn value(v: &WireValue<'_>) -> String {
    format!(
        "flags {:#x}, view {}, failed {}",
        v.flags,
        v.view,
        ranks(v.failed)
    )
}

fn instance(id: AgreementId) -> String {
    match id {
        AgreementId::View(k) => format!("view {k}"),
        AgreementId::User(u) => format!("agreement {u}"),
    }
}

fn body(m: &Message<'_>) -> String {
    match m {
        Message::Notice(n) => format!(
            "Notice from origin {}: failed {}, left {}",
            n.origin,
            ranks(n.failed),
            ranks(n.left)
        ),
        Message::ObserveMe { generation, slot } => {
            format!("ObserveMe generation {generation}, slot {slot}")
        }
        Message::SyncRequest {
            failed,
            left,
            marks,
            ..
        } => format!(
            "SyncRequest: failed {}, left {}, marks {:?}",
            ranks(*failed),
            ranks(*left),
            marks.iter().collect::<Vec<_>>()
        ),
        Message::SyncReply { failed, left } => {
            format!(
                "SyncReply: failed {}, left {}",
                ranks(*failed),
                ranks(*left)
            )
        }
        Message::Probe { nonce, about } => format!("Probe about {about} (nonce {nonce})"),
        Message::ProbeAck { about, verdict, .. } => format!("ProbeAck about {about}: {verdict:?}"),
        Message::Payload { origin, seq, .. } => format!("Payload {seq} of origin {origin}"),
        Message::Suspect {
            accuser,
            nonce,
            suspect,
            ..
        } => format!("Suspect: {accuser} accuses {suspect} (round {nonce})"),
        Message::Vote {
            accuser,
            nonce,
            count,
            flags,
        } => format!("Vote in {accuser}'s round {nonce}: count {count}, flags {flags:#b}"),
        Message::Refute { accuser, nonce } => format!("Refute {accuser}'s round {nonce}"),
        Message::Outcome {
            accuser,
            suspect,
            verdict,
            ..
        } => format!("Outcome of {accuser}'s accusation of {suspect}: {verdict:?}"),
        Message::AgreeUp(up) => format!(
            "AgreeUp {} (root {}): {}{}",
            instance(up.id),
            up.root,
            value(&up.value),
            up.decided
                .map_or_else(String::new, |d| format!("; decided: {}", value(&d)))
        ),
        Message::AgreeDown(down) => format!(
            "AgreeDown {} (root {}): {}",
            instance(down.id),
            down.root,
            value(&down.decision)
        ),
    }
}

/// An event, briefly.
pub fn event(e: &Event) -> String {
    match e {
        Event::Failed {
            rank,
            detector,
            cause,
            detail,
            ..
        } => {
            let how = match detail {
                FailureDetail::Learned => "learned".to_owned(),
                FailureDetail::Proof { .. } => "proof".to_owned(),
                FailureDetail::Silence { quorum, .. } => match quorum {
                    Some(q) => format!("silence, {} of {} votes", q.votes, q.live),
                    None => "silence".to_owned(),
                },
                FailureDetail::Stopped => "stopped".to_owned(),
            };
            format!(
                "Failed {rank} (cause {}, detector {detector}, {how})",
                cause.as_str()
            )
        }
        Event::ViewChange { id, failed, .. } => format!("ViewChange {id}: {failed:?}"),
        Event::Agreed {
            seq, flags, view, ..
        } => format!(
            "Agreed {seq}: flags {flags:#x}, view {} {:?}",
            view.id, view.failed
        ),
        Event::AgreeAborted { seq, reason } => {
            format!("AgreeAborted {seq} ({})", reason.as_str())
        }
        Event::Payload { origin, seq, .. } => format!("Payload {seq} of origin {origin}"),
        Event::SelfExcluded { by, why } => format!("SelfExcluded (by {by}, {})", why.as_str()),
        other => format!("{other:?}"),
    }
}
