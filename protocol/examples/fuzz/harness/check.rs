//! The invariants: what must hold after every call into an Engine, and of
//! every message the decoder accepts, whatever the inputs were.
//!
//! Owns: [`Violation`] (one row per invariant), [`EngineCheck`] (what the
//! harness remembers of one Engine to judge its next outputs: the events
//! it reported, its epoch, the sequence numbers it sent, its deadline) and
//! [`decode_round_trip`]. Must not: drive an Engine or choose inputs (the
//! episode does), or reach into an Engine's private state: every check is
//! made from its outputs and public accessors.
//!
//! An invariant added here gets a row in `violations!` and a check where
//! its evidence is seen.

use std::collections::{BTreeMap, BTreeSet};

use ffd_protocol::wire::{self, Encoder, JobKeys, Message, SLOTS};
use ffd_protocol::{Cause, Engine, Event, HandleError, Output, Rank, RejectReason, Time};

macro_rules! violations {
    ($($variant:ident => $word:literal: $what:literal,)+) => {
        /// One invariant of the Engine or the decoder.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Violation { $($variant),+ }

        impl Violation {
            pub const ALL: &'static [Violation] = &[$(Violation::$variant),+];
            pub const COUNT: usize = Self::ALL.len();

            pub fn as_str(self) -> &'static str {
                match self { $(Violation::$variant => $word),+ }
            }

            /// What the invariant says.
            pub fn what(self) -> &'static str {
                match self { $(Violation::$variant => $what),+ }
            }
        }
    };
}

violations! {
    SendToSelf => "send_to_self":
        "no Send, WriteHeartbeat or HeartbeatStream to the Engine's own rank",
    SendOutOfRange => "send_out_of_range":
        "no output names a rank >= N or a slot >= 512",
    SendUndecodable => "send_undecodable":
        "every Send decodes at its receiver, with the Engine as its sender",
    LinkSeqNotIncreasing => "link_seq_not_increasing":
        "the sequence numbers an Engine sends on a link strictly increase",
    EpochDecreased => "epoch_decreased":
        "the epoch never decreases",
    EventNamesSelf => "event_names_self":
        "no Failed or Left event names the Engine's own rank",
    ReportedTwice => "reported_twice":
        "no Failed event for a rank twice, no Left twice, none for a rank both failed and left",
    SetsDisagree => "sets_disagree":
        "failed() and left() are exactly the ranks the Failed and Left events named",
    DeadlineBackwards => "deadline_backwards":
        "after handle(now), next_deadline is not earlier than both now and the deadline before",
    DeadlineNotAfterTimeout => "deadline_not_after_timeout":
        "after handle_timeout(now), next_deadline is None or later than now (no busy loop)",
    ActiveAfterExclusion => "active_after_exclusion":
        "the Engine is inert from its SelfExcluded event on: no output follows it, no deadline",
    DeclaredAfterLeave => "declared_after_leave":
        "after Leave the Engine declares nobody itself",
    ViewsOutOfOrder => "views_out_of_order":
        "views are raised with ids 1, 2, 3, ..., user agreements end (decided or aborted) in call order and never before the call, and a view's or decision's failed set names only ranks Failed or Left events named before it",
    PayloadTwice => "payload_twice":
        "no (origin, seq) payload is delivered twice",
    OutputFlood => "output_flood":
        "one input yields at most 4N + 64 outputs",
    ReplayAccepted => "replay_accepted":
        "no (sender, seq) is accepted twice by one Engine",
    WrongSourceAccepted => "wrong_source_accepted":
        "no message is accepted whose transport source is not its header's sender",
    UnauthenticatedAccepted => "unauthenticated_accepted":
        "no message is accepted whose tag is not valid for the receiver",
    StatsDisagree => "stats_disagree":
        "Stats.rejected and Stats.received agree with what handle returned",
    DecodeRoundTrip => "decode_round_trip":
        "a decoded message, encoded and sealed again, decodes to the same message",
    MemoryGrew => "memory_grew":
        "peak RSS at the end stays within the tolerance of the peak after 10% of the inputs",
}

/// Counts of violations, with the first instance of each described.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Violations {
    pub counts: [u64; Violation::COUNT],
    pub first: BTreeMap<&'static str, String>,
}

impl Violations {
    pub fn record(&mut self, v: Violation, detail: impl FnOnce() -> String) {
        let i = Violation::ALL.iter().position(|&x| x == v).unwrap_or(0);
        self.counts[i] += 1;
        self.first.entry(v.as_str()).or_insert_with(detail);
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn count(&self, v: Violation) -> u64 {
        let i = Violation::ALL.iter().position(|&x| x == v).unwrap_or(0);
        self.counts[i]
    }
}

/// Which call the outputs being checked followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// `Engine::new`.
    New,
    Handle,
    Timeout,
}

/// The call whose outputs are judged: which, at what time, and the
/// deadline before it.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub call: Call,
    pub now: Time,
    pub deadline_before: Option<Time>,
}

/// What the harness remembers of one Engine.
#[derive(Debug)]
pub struct EngineCheck {
    me: Rank,
    n: u32,
    epoch: u64,
    /// The ranks Failed and Left events named, ascending.
    failed: Vec<Rank>,
    left: Vec<Rank>,
    excluded: bool,
    left_job: bool,
    /// The last sequence number sent to each receiver.
    out_seq: BTreeMap<Rank, u64>,
    /// The last payload sequence number delivered of each origin: each is
    /// delivered once and in the origin's order (per-origin high-water
    /// marks never forget an origin).
    payloads: BTreeMap<Rank, u64>,
    /// (sender, seq) of accepted messages.
    accepted_seqs: BTreeSet<(Rank, u64)>,
    /// The id of the last view raised; the user agreements called and
    /// ended.
    view: u64,
    agree_calls: u64,
    agreements_ended: u64,
    /// What `handle` returned for messages.
    accepted: u64,
    rejected: [u64; RejectReason::COUNT],
}

impl EngineCheck {
    pub fn new(engine: &Engine) -> EngineCheck {
        let n = engine.size();
        EngineCheck {
            me: engine.me(),
            n,
            epoch: engine.epoch(),
            failed: Vec::new(),
            left: Vec::new(),
            excluded: false,
            left_job: false,
            out_seq: BTreeMap::new(),
            payloads: BTreeMap::new(),
            accepted_seqs: BTreeSet::new(),
            view: 0,
            agree_calls: 0,
            agreements_ended: 0,
            accepted: 0,
            rejected: [0; RejectReason::COUNT],
        }
    }

    /// The Engine accepted `Input::Leave`.
    pub fn left_job(&mut self) {
        self.left_job = true;
    }

    /// `Input::Agree` is about to be given to the Engine (1), or was
    /// refused (-1).
    pub fn agree_called(&mut self, change: i64) {
        self.agree_calls = self.agree_calls.saturating_add_signed(change);
    }

    /// A view's or a decision's failed set: ascending, not this rank, and
    /// only ranks reported before (a decision's new ranks are learned, as
    /// Failed events, first).
    fn decided_set(&self, failed: &[Rank], e: &Event, v: &mut Violations) {
        let me = self.me;
        let known =
            |r: &Rank| self.failed.binary_search(r).is_ok() || self.left.binary_search(r).is_ok();
        if !failed.windows(2).all(|w| w[0] < w[1])
            || failed.contains(&me)
            || !failed.iter().all(known)
        {
            v.record(Violation::ViewsOutOfOrder, || {
                format!(
                    "rank {me}: {e:?}, after Failed {:?} and Left {:?}",
                    self.failed, self.left
                )
            });
        }
    }

    /// A user agreement's end (`Agreed` or `AgreeAborted`): the next one
    /// called.
    fn agreement_ended(&mut self, seq: u64, e: &Event, v: &mut Violations) {
        let me = self.me;
        let (ended, calls) = (self.agreements_ended, self.agree_calls);
        if seq != ended + 1 || seq > calls {
            v.record(Violation::ViewsOutOfOrder, || {
                format!("rank {me}: {e:?} after {ended} ended, {calls} called")
            });
        }
        self.agreements_ended = self.agreements_ended.max(seq);
    }

    pub fn excluded(&self) -> bool {
        self.excluded
    }

    /// Judges what `handle` did with a message (`from`, `bytes`).
    pub fn message_result(
        &mut self,
        keys: &JobKeys,
        from: Option<Rank>,
        bytes: &[u8],
        result: &Result<(), HandleError>,
        v: &mut Violations,
    ) {
        match result {
            Err(HandleError::Rejected(r)) => self.rejected[r.index()] += 1,
            Err(_) => {}
            Ok(()) => {
                self.accepted += 1;
                let me = self.me;
                let decoded = wire::decode(bytes, keys, me, self.n);
                let Ok((header, _)) = decoded else {
                    v.record(Violation::UnauthenticatedAccepted, || {
                        format!(
                            "rank {me} accepted {} bytes its decoder refuses",
                            bytes.len()
                        )
                    });
                    return;
                };
                if !keys.verify(bytes, me) {
                    v.record(Violation::UnauthenticatedAccepted, || {
                        format!("rank {me} accepted a message with a bad tag")
                    });
                }
                if let Some(f) = from.filter(|&f| f != header.sender) {
                    v.record(Violation::WrongSourceAccepted, || {
                        format!(
                            "rank {me} accepted from source {f} a message of {}",
                            header.sender
                        )
                    });
                }
                if !self.accepted_seqs.insert((header.sender, header.seq)) {
                    v.record(Violation::ReplayAccepted, || {
                        format!(
                            "rank {me} accepted sequence number {} from {} twice",
                            header.seq, header.sender
                        )
                    });
                }
            }
        }
    }

    /// Judges the outputs of one call.
    pub fn after(
        &mut self,
        engine: &Engine,
        keys: &JobKeys,
        step: Step,
        outputs: &[Output],
        v: &mut Violations,
    ) {
        let Step {
            call,
            now,
            deadline_before,
        } = step;
        let (me, n) = (self.me, self.n);
        if call != Call::New && outputs.len() > 4 * n as usize + 64 {
            v.record(Violation::OutputFlood, || {
                format!("rank {me}: {} outputs from one {call:?}", outputs.len())
            });
        }
        // Inert from the SelfExcluded event on: what was queued before it
        // comes before it; nothing may follow.
        for o in outputs {
            let inert = self.excluded;
            let active = |what: &str, v: &mut Violations| {
                if inert {
                    v.record(Violation::ActiveAfterExclusion, || {
                        format!("rank {me} excluded, then: {what}")
                    });
                }
            };
            match o {
                Output::Send { to, message } => {
                    active("a send", v);
                    let to = *to;
                    if self.addressee(to, v, "Send") {
                        continue;
                    }
                    let bytes = message.to_vec();
                    match wire::decode(&bytes, keys, to, n) {
                        Ok((h, _)) if h.sender == me => {}
                        other => v.record(Violation::SendUndecodable, || {
                            format!("rank {me} sent {to} a {:?}: {other:?}", message.kind())
                        }),
                    }
                    let last = self.out_seq.entry(to).or_insert(0);
                    if message.seq() <= *last {
                        let prev = *last;
                        v.record(Violation::LinkSeqNotIncreasing, || {
                            format!("rank {me} sent {to} seq {} after {prev}", message.seq())
                        });
                    }
                    *last = message.seq().max(*last);
                }
                Output::WriteHeartbeat { to, slot, .. } => {
                    active("a heartbeat write", v);
                    self.addressee(*to, v, "WriteHeartbeat");
                    self.slot(*slot, v);
                }
                Output::HeartbeatStream { to, slot, .. } => {
                    // An excluded rank's last stream says "no more" (None).
                    if let Some(to) = *to {
                        active("a heartbeat stream", v);
                        self.addressee(to, v, "HeartbeatStream");
                        self.slot(*slot, v);
                    }
                }
                Output::ClearSlot { slot } => {
                    active("a slot clear", v);
                    self.slot(*slot, v);
                }
                Output::Event(e) => {
                    active("an event", v);
                    self.event(e, v);
                }
                #[allow(unreachable_patterns)] // outputs added later: no rule yet
                _ => active("an output", v),
            }
        }
        let epoch = engine.epoch();
        if epoch < self.epoch {
            let was = self.epoch;
            v.record(Violation::EpochDecreased, || {
                format!("rank {me}: epoch {was} -> {epoch}")
            });
        }
        self.epoch = self.epoch.max(epoch);
        if engine.failed() != self.failed.as_slice() || engine.left() != self.left.as_slice() {
            v.record(Violation::SetsDisagree, || {
                format!(
                    "rank {me}: failed {:?} left {:?}, events named {:?} and {:?}",
                    engine.failed(),
                    engine.left(),
                    self.failed,
                    self.left
                )
            });
            self.failed = engine.failed().to_vec();
            self.left = engine.left().to_vec();
        }
        let deadline = engine.next_deadline();
        if self.excluded && deadline.is_some() {
            v.record(Violation::ActiveAfterExclusion, || {
                format!("rank {me} excluded, then: a deadline")
            });
        }
        match (call, deadline) {
            (Call::Timeout, Some(d)) if d <= now => {
                v.record(Violation::DeadlineNotAfterTimeout, || {
                    format!("rank {me}: handle_timeout({now}) left the deadline at {d}")
                });
            }
            (Call::Handle, Some(d)) if d < now && deadline_before.is_none_or(|b| d < b) => {
                v.record(Violation::DeadlineBackwards, || {
                    format!("rank {me}: handle({now}) moved the deadline from {deadline_before:?} to {d}")
                });
            }
            _ => {}
        }
    }

    /// Records a send to self or out of range; true if so.
    fn addressee(&self, to: Rank, v: &mut Violations, what: &str) -> bool {
        let me = self.me;
        if to == me {
            v.record(Violation::SendToSelf, || {
                format!("rank {me}: {what} to itself")
            });
            true
        } else if to >= self.n {
            let n = self.n;
            v.record(Violation::SendOutOfRange, || {
                format!("rank {me}: {what} to rank {to} of {n}")
            });
            true
        } else {
            false
        }
    }

    fn slot(&self, slot: u16, v: &mut Violations) {
        if slot >= SLOTS {
            let me = self.me;
            v.record(Violation::SendOutOfRange, || {
                format!("rank {me}: slot {slot}")
            });
        }
    }

    fn event(&mut self, e: &Event, v: &mut Violations) {
        let me = self.me;
        match e {
            Event::Failed {
                rank,
                detector,
                cause,
                ..
            } => {
                let rank = *rank;
                if rank == me {
                    v.record(Violation::EventNamesSelf, || format!("rank {me}: {e:?}"));
                    return;
                }
                if rank >= self.n {
                    v.record(Violation::SendOutOfRange, || format!("rank {me}: {e:?}"));
                }
                if self.left_job && *detector == me && *cause != Cause::Notice {
                    v.record(Violation::DeclaredAfterLeave, || {
                        format!("rank {me}: {e:?}")
                    });
                }
                insert_once(&mut self.failed, rank, &self.left, me, e, v);
            }
            Event::Left { rank } => {
                if *rank == me {
                    v.record(Violation::EventNamesSelf, || format!("rank {me}: {e:?}"));
                    return;
                }
                insert_once(&mut self.left, *rank, &self.failed, me, e, v);
            }
            Event::SelfExcluded { .. } => {
                self.excluded = true;
            }
            Event::Payload { origin, seq, .. } => {
                let last = self.payloads.entry(*origin).or_insert(0);
                if *seq <= *last {
                    v.record(Violation::PayloadTwice, || {
                        format!("rank {me}: {e:?} after seq {last}")
                    });
                }
                *last = (*last).max(*seq);
            }
            Event::SlowEmitter { .. } => {}
            Event::ViewChange { id, failed, .. } => {
                if *id != self.view + 1 {
                    let last = self.view;
                    v.record(Violation::ViewsOutOfOrder, || {
                        format!("rank {me}: {e:?} after view {last}")
                    });
                }
                self.view = self.view.max(*id);
                self.decided_set(failed, e, v);
            }
            Event::Agreed { seq, view, .. } => {
                self.agreement_ended(*seq, e, v);
                self.decided_set(&view.failed, e, v);
            }
            Event::AgreeAborted { seq, .. } => self.agreement_ended(*seq, e, v),
            #[allow(unreachable_patterns)] // events added later: no rule yet
            _ => {}
        }
    }

    /// At the end of an episode: the Engine's counters against what
    /// `handle` returned.
    pub fn at_end(&self, engine: &Engine, v: &mut Violations) {
        let stats = engine.stats();
        let received: u64 = stats.messages.received.iter().sum();
        if stats.drops.rejected != self.rejected || received != self.accepted {
            let me = self.me;
            v.record(Violation::StatsDisagree, || {
                format!(
                    "rank {me}: stats say {received} received, rejected {:?}; handle said {} and {:?}",
                    stats.drops.rejected, self.accepted, self.rejected
                )
            });
        }
    }
}

/// Adds `rank` to the sorted `set`, recording a second report of it, or a
/// rank in `other` (failed and left are disjoint).
fn insert_once(
    set: &mut Vec<Rank>,
    rank: Rank,
    other: &[Rank],
    me: Rank,
    e: &Event,
    v: &mut Violations,
) {
    if other.binary_search(&rank).is_ok() {
        v.record(Violation::ReportedTwice, || {
            format!("rank {me}: {e:?}, reported both ways")
        });
    }
    match set.binary_search(&rank) {
        Ok(_) => v.record(Violation::ReportedTwice, || {
            format!("rank {me}: {e:?} again")
        }),
        Err(i) => set.insert(i, rank),
    }
}

/// The unsealed bytes the encoder makes of a decoded message, from
/// `sender`; `None` for kinds without an encoder here yet.
pub fn reencode(job_key: u64, sender: Rank, message: &Message<'_>) -> Option<Vec<u8>> {
    let enc = Encoder::new(job_key, sender);
    Some(match *message {
        Message::Notice(n) => enc.notice(n.origin, n.hops, &n.failed.to_vec(), &n.left.to_vec()),
        Message::ObserveMe { generation, slot } => enc.observe_me(generation, slot),
        Message::SyncRequest {
            digest,
            failed,
            left,
            marks,
        } => enc.sync_request_with_marks(
            digest,
            &failed.to_vec(),
            &left.to_vec(),
            marks.from,
            marks.to,
            &marks.iter().collect::<Vec<_>>(),
        ),
        Message::SyncReply { failed, left } => enc.sync_reply(&failed.to_vec(), &left.to_vec()),
        Message::Probe { nonce, about } => enc.probe(nonce, about),
        Message::ProbeAck {
            nonce,
            about,
            verdict,
        } => enc.probe_ack(nonce, about, verdict),
        Message::Payload {
            origin,
            seq,
            hops,
            bytes,
        } => enc.payload(origin, seq, hops, bytes),
        Message::Suspect {
            accuser,
            nonce,
            suspect,
            hops,
            flags,
        } => enc.suspect(accuser, nonce, suspect, hops, flags),
        Message::Vote {
            accuser,
            nonce,
            count,
            flags,
        } => enc.vote(accuser, nonce, count, flags),
        Message::Refute { accuser, nonce } => enc.refute(accuser, nonce),
        Message::Outcome {
            accuser,
            nonce,
            suspect,
            hops,
            verdict,
        } => enc.outcome(accuser, nonce, suspect, hops, verdict),
        Message::AgreeUp(up) => enc.agree_up(
            up.id,
            up.hops,
            up.root,
            &up.value.to_value(),
            up.decided.map(|d| d.to_value()).as_ref(),
        ),
        Message::AgreeDown(down) => {
            enc.agree_down(down.id, down.hops, down.root, &down.decision.to_value())
        }
        #[allow(unreachable_patterns)] // kind 14 (in flight) until they get a line
        _ => return None,
    })
}

/// Decodes `bytes` at rank `me` of `n`; if accepted, encodes the message
/// again, seals it with the same sequence number and decodes that: the
/// same header and, re-encoded, the same bytes, or a violation. Returns
/// the decoder's verdict.
pub fn decode_round_trip(
    bytes: &[u8],
    keys: &JobKeys,
    me: Rank,
    n: u32,
    v: &mut Violations,
) -> Result<(), RejectReason> {
    let (header, message) = wire::decode(bytes, keys, me, n)?;
    let Some(unsealed) = reencode(keys.job_key(), header.sender, &message) else {
        return Ok(());
    };
    let again = wire::seal(&unsealed, header.seq, me, keys);
    match wire::decode(&again, keys, me, n) {
        Ok((h2, m2))
            if (h2.kind, h2.sender, h2.seq) == (header.kind, header.sender, header.seq)
                && reencode(keys.job_key(), h2.sender, &m2).as_deref() == Some(&unsealed[..]) => {}
        other => v.record(Violation::DecodeRoundTrip, || {
            format!("{message:?} encoded again decodes as {other:?}")
        }),
    }
    Ok(())
}
