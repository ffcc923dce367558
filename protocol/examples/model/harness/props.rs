//! The properties the checker holds every state of the job to
//! (`docs/model-checking.md`), and the `sometimes` properties that show
//! the model reaches the states they speak of.
//!
//! Owns: the judgement of each Engine call's outputs ([`Check`]: what it
//! sent, streamed and raised, and its epoch), the judgement of each state
//! ([`after_step`]: all-or-none once the network drained, one side of a
//! partition), and the predicates stateright evaluates. Must not: drive
//! an Engine or choose a step (that is `job`).
//!
//! What an Engine raised is judged when it raises it, against what the
//! path remembers ([`Ghost`](super::job::Ghost): the first set raised for
//! each view, the first decision of each agreement); a breach sets the
//! property's bit in the state, so each `always` property is "no bit".

use std::sync::Arc;

use ffd_protocol::{Cause, Event, FailureDetail, Output, Participation, Rank, View};

use super::job::{Job, State};

/// A safety property.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prop {
    Views,
    Agreement,
    Payloads,
    Proof,
    Partition,
    Silence,
    Ballots,
}

impl Prop {
    pub const ALL: [Prop; 7] = [
        Prop::Views,
        Prop::Agreement,
        Prop::Payloads,
        Prop::Proof,
        Prop::Partition,
        Prop::Silence,
        Prop::Ballots,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Prop::Views => "views",
            Prop::Agreement => "agreement",
            Prop::Payloads => "payloads",
            Prop::Proof => "proof",
            Prop::Partition => "partition",
            Prop::Silence => "silence",
            Prop::Ballots => "ballots",
        }
    }

    pub fn says(self) -> &'static str {
        match self {
            Prop::Views => {
                "every rank raises views 1, 2, 3, ... without a gap, and two live ranks \
                 that raised view k raised the same set"
            }
            Prop::Agreement => {
                "two live ranks that decided one agreement decided the same flags and \
                 view; a rank decides only what it called, in order, having taken part \
                 (its flags in the AND, itself not named), and only ranks that called \
                 it have their flags in the AND"
            }
            Prop::Payloads => {
                "each rank delivers an origin's payloads once, in order, as sent; once \
                 nothing is in flight and no copy was lost, every live rank nobody \
                 declared has delivered the same ones"
            }
            Prop::Proof => "a rank is declared on proof of death only if it crashed",
            Prop::Partition => {
                "with a partition and no crash, the two sides do not both go on \
                 declaring each other: no rank going on with one side (active, in the \
                 job when it began, declared by none of its side) has declared one \
                 going on with the other while one of those has declared one of the first"
            }
            Prop::Silence => {
                "every copy sent decodes at its receiver as its sender's, none goes to \
                 its sender, no heartbeat stream targets its own rank, the epoch never \
                 decreases"
            }
            Prop::Ballots => {
                "in one round of an accusation, no rank is counted by two flood parents: \
                 among the accusations and open ballots of the ranks that have not \
                 crashed, each rank is recorded as a child by one rank at most"
            }
        }
    }

    fn bit(self) -> u32 {
        1 << self as u32
    }
}

/// Whether `p` holds on the path to `s`.
pub fn holds(s: &State, p: Prop) -> bool {
    s.ghost.broken & p.bit() == 0
}

/// Records that `p` broke on this path, and how (the first time).
pub fn breach(s: &mut State, p: Prop, how: impl FnOnce() -> String) {
    if s.ghost.broken & p.bit() != 0 {
        return;
    }
    Arc::make_mut(&mut s.ghost).broken |= p.bit();
    s.why[p as usize] = Some(Arc::from(how()));
}

/// The bytes of `origin`'s payload `seq` (so that a delivery can be told
/// from another origin's or number's).
pub fn payload_bytes(origin: Rank, seq: u64) -> Vec<u8> {
    let mut b = origin.to_le_bytes().to_vec();
    b.extend_from_slice(&seq.to_le_bytes());
    b
}

/// The flags rank `r` agrees with: every bit but its own, so that the
/// AND of a decision names its participants (their bits are clear).
pub fn agree_flags(r: Rank) -> u64 {
    !(1u64 << r)
}

/// What one Engine call is judged against: the rank's standing before it.
pub struct Check {
    epoch: u64,
    view: u64,
    /// Per origin, the high-water mark before the call.
    marks: Vec<u64>,
}

impl Check {
    pub fn before(s: &State, rank: Rank) -> Check {
        let e = &s.nodes[rank as usize].engine;
        Check {
            epoch: e.epoch(),
            view: e.view_id(),
            marks: (0..s.nodes.len() as Rank)
                .map(|o| e.payload_mark(o))
                .collect(),
        }
    }

    /// A copy `rank` sent to `to`.
    pub fn sent(&mut self, job: &Job, s: &mut State, rank: Rank, to: Rank, bytes: &[u8]) {
        if to == rank {
            breach(s, Prop::Silence, || {
                format!("rank {rank} sent a copy to itself")
            });
            return;
        }
        if to >= job.n() {
            breach(s, Prop::Silence, || {
                format!("rank {rank} sent a copy to rank {to}, beyond the job")
            });
            return;
        }
        match ffd_protocol::wire::decode(bytes, &job.keys, to, job.n()) {
            Ok((h, _)) if h.sender == rank => {}
            other => {
                let what = format!("{other:?}");
                breach(s, Prop::Silence, || {
                    format!("rank {rank} sent rank {to} a copy that does not decode there: {what}")
                });
            }
        }
    }

    /// A heartbeat stream of `rank`'s, towards `to`.
    pub fn stream(&mut self, s: &mut State, rank: Rank, to: Option<Rank>) {
        if to == Some(rank) {
            breach(s, Prop::Silence, || {
                format!("rank {rank} heartbeats into its own slot page")
            });
        }
    }

    pub fn unexpected(&mut self, s: &mut State, rank: Rank, o: &Output) {
        let what = format!("{o:?}");
        breach(s, Prop::Silence, || {
            format!("rank {rank}, modelled heartbeats and no host groups, output {what}")
        });
    }

    /// An event `rank` raised.
    pub fn event(&mut self, job: &Job, s: &mut State, rank: Rank, e: &Event) {
        match e {
            Event::Failed {
                rank: r,
                cause,
                detail,
                ..
            } => {
                let proof =
                    matches!(detail, FailureDetail::Proof { .. }) || *cause == Cause::Exited;
                if proof && !s.nodes[*r as usize].crashed {
                    let r = *r;
                    breach(s, Prop::Proof, || {
                        format!(
                            "rank {rank} declared rank {r} on proof, but rank {r} never crashed"
                        )
                    });
                }
            }
            Event::ViewChange { id, failed, .. } => self.view(s, rank, *id, failed),
            Event::Agreed {
                seq, flags, view, ..
            } => agreed(job, s, rank, *seq, *flags, view),
            Event::Payload { origin, seq, bytes } => {
                let (o, seq) = (*origin, *seq);
                let Some(mark) = self.marks.get_mut(o as usize) else {
                    breach(s, Prop::Payloads, || {
                        format!("rank {rank} delivered a payload of rank {o}, beyond the job")
                    });
                    return;
                };
                let expected = *mark + 1;
                *mark = seq;
                if seq != expected {
                    breach(s, Prop::Payloads, || {
                        format!(
                            "rank {rank} delivered payload {seq} of rank {o} when the next was \
                             {expected} (twice, or out of order)"
                        )
                    });
                } else if *bytes != payload_bytes(o, seq) {
                    breach(s, Prop::Payloads, || {
                        format!("rank {rank} delivered payload {seq} of rank {o} with other bytes")
                    });
                }
            }
            _ => {}
        }
    }

    fn view(&mut self, s: &mut State, rank: Rank, id: u64, failed: &[Rank]) {
        if id != self.view + 1 {
            let was = self.view;
            breach(s, Prop::Views, || {
                format!("rank {rank} raised view {id} after view {was}")
            });
        }
        self.view = id;
        Arc::make_mut(&mut s.ghost).views[rank as usize].push(failed.to_vec());
    }

    /// The call is over.
    pub fn done(self, s: &mut State, rank: Rank) {
        let epoch = s.nodes[rank as usize].engine.epoch();
        if epoch < self.epoch {
            let was = self.epoch;
            breach(s, Prop::Silence, || {
                format!("rank {rank}'s epoch went from {was} to {epoch}")
            });
        }
    }
}

/// `rank` decided its user agreement `seq`.
fn agreed(job: &Job, s: &mut State, rank: Rank, seq: u64, flags: u64, view: &View) {
    let n = job.n();
    let calls = |s: &State, r: Rank| u64::from(s.nodes[r as usize].calls);
    if seq == 0 || seq > calls(s, rank) {
        breach(s, Prop::Agreement, || {
            format!("rank {rank} decided agreement {seq}, which it never called")
        });
        return;
    }
    let took_part: Vec<Rank> = (0..n).filter(|r| flags & (1 << r) == 0).collect();
    if !took_part.contains(&rank) {
        breach(s, Prop::Agreement, || {
            format!(
                "rank {rank} decided agreement {seq} without its flags in the AND \
                 (participants {took_part:?})"
            )
        });
    }
    if let Some(&r) = took_part.iter().find(|&&r| calls(s, r) < seq) {
        breach(s, Prop::Agreement, || {
            format!("agreement {seq}'s decision holds the flags of rank {r}, which never called it")
        });
    }
    if view.failed.contains(&rank) {
        breach(s, Prop::Agreement, || {
            format!("rank {rank} decided agreement {seq} whose view names it: {view:?}")
        });
    }
    let last = s.ghost.decisions[rank as usize].len();
    if seq != last as u64 + 1 {
        breach(s, Prop::Agreement, || {
            format!("rank {rank} decided agreement {seq} after agreement {last}")
        });
        return;
    }
    Arc::make_mut(&mut s.ghost).decisions[rank as usize].push((flags, view.clone()));
}

/// Judges the state a step led to: one view and one decision among the
/// live ranks, all-or-none once the network drained, one side of a
/// partition.
pub fn after_step(job: &Job, s: &mut State) {
    one_view(job, s);
    one_decision(job, s);
    all_or_none(job, s);
    one_side(job, s);
    one_parent(job, s);
}

/// In one round of an accusation no rank is counted by two flood parents
/// (`docs/design.md` §4.11: the flood parents form a tree, so the count up
/// it is exact). Judged on the children the ranks that have not crashed
/// record now: a rank that joined a round twice, after forgetting its
/// ballot, is recorded by both parents while both count.
fn one_parent(job: &Job, s: &mut State) {
    if !holds(s, Prop::Ballots) {
        return;
    }
    let mut seen: Vec<((Rank, u32, Rank), Rank)> = Vec::new();
    for parent in (0..job.n()).filter(|&r| !s.nodes[r as usize].crashed) {
        for child in s.nodes[parent as usize].engine.model_flood_children() {
            match seen.iter().find(|(c, _)| *c == child) {
                Some(&(_, other)) if other != parent => {
                    let (accuser, nonce, rank) = child;
                    breach(s, Prop::Ballots, || {
                        format!(
                            "in rank {accuser}'s round {nonce}, rank {rank} is counted by \
                             both rank {other} and rank {parent}"
                        )
                    });
                    return;
                }
                Some(_) => {}
                None => seen.push((child, parent)),
            }
        }
    }
}

/// Live, for what a rank raised: not crashed, not excluded, and declared
/// by no rank that has not crashed (reports are final: a declared rank is
/// out of the job, and learns it at its next message to one that knows).
/// A rank that left is live: what it raised before it left still counts.
fn live(s: &State, r: Rank) -> bool {
    let n = &s.nodes[r as usize];
    !n.crashed
        && n.engine.participation() != Participation::Excluded
        && s.nodes.iter().all(|m| m.crashed || !m.engine.is_failed(r))
}

/// Two live ranks that raised view k raised the same set. (A rank that
/// crashed, or is out of the job, is no longer held to what it raised:
/// the views are those of the ranks that go on, as ULFM's.)
fn one_view(job: &Job, s: &mut State) {
    if !holds(s, Prop::Views) {
        return;
    }
    let live: Vec<Rank> = (0..job.n()).filter(|&r| live(s, r)).collect();
    for (i, &a) in live.iter().enumerate() {
        for &b in &live[i + 1..] {
            let (va, vb) = (&s.ghost.views[a as usize], &s.ghost.views[b as usize]);
            if let Some(k) = (0..va.len().min(vb.len())).find(|&k| va[k] != vb[k]) {
                let (x, y) = (va[k].clone(), vb[k].clone());
                breach(s, Prop::Views, || {
                    format!("rank {a} raised view {} as {x:?}, rank {b} as {y:?}", k + 1)
                });
                return;
            }
        }
    }
}

/// Two live ranks that decided agreement u decided the same flags and
/// view (as `MPIX_Comm_agree`: every non-failed process agrees; a rank
/// that crashed after deciding is not held to it).
fn one_decision(job: &Job, s: &mut State) {
    if !holds(s, Prop::Agreement) {
        return;
    }
    let live: Vec<Rank> = (0..job.n()).filter(|&r| live(s, r)).collect();
    for (i, &a) in live.iter().enumerate() {
        for &b in &live[i + 1..] {
            let (da, db) = (
                &s.ghost.decisions[a as usize],
                &s.ghost.decisions[b as usize],
            );
            if let Some(k) = (0..da.len().min(db.len())).find(|&k| da[k] != db[k]) {
                let (x, y) = (da[k].clone(), db[k].clone());
                breach(s, Prop::Agreement, || {
                    format!(
                        "rank {a} decided agreement {} as flags {:#x}, {:?}; rank {b} as flags \
                         {:#x}, {:?}",
                        k + 1,
                        x.0,
                        x.1,
                        y.0,
                        y.1
                    )
                });
                return;
            }
        }
    }
}

/// Ranks that stay live: not crashed, neither left nor excluded, and
/// declared by no rank that has not crashed (a declared rank learns it is
/// out at its next message to one that knows, and stops).
pub fn staying(s: &State, r: Rank) -> bool {
    s.active(r) && s.nodes.iter().all(|n| n.crashed || !n.engine.is_failed(r))
}

fn all_or_none(job: &Job, s: &mut State) {
    if !s.drained() || s.cut.is_some() || s.used.losses > 0 || !holds(s, Prop::Payloads) {
        return;
    }
    let live: Vec<Rank> = (0..job.n()).filter(|&r| staying(s, r)).collect();
    for origin in 0..job.n() {
        let marks: Vec<(Rank, u64)> = live
            .iter()
            .map(|&r| (r, s.nodes[r as usize].engine.payload_mark(origin)))
            .collect();
        let lo = marks.iter().min_by_key(|m| m.1);
        let hi = marks.iter().max_by_key(|m| m.1);
        if let (Some(&(a, m)), Some(&(b, k))) = (lo, hi) {
            if m != k {
                breach(s, Prop::Payloads, || {
                    format!(
                        "nothing in flight, no copy lost: rank {b} delivered {k} payloads of \
                         rank {origin}, rank {a} {m}"
                    )
                });
                return;
            }
        }
    }
}

fn one_side(job: &Job, s: &mut State) {
    let Some(side) = s.ghost.side else {
        return;
    };
    if s.used.crashes > 0 || !holds(s, Prop::Partition) {
        return;
    }
    let out = s.ghost.out_at_cut;
    let n = job.n();
    let on_a = |r: Rank| side >> r & 1 == 1;
    // A rank goes on with its side: active, in the job when the partition
    // began, and declared by no active rank of its own side.
    let goes_on = |r: Rank| {
        s.active(r)
            && out >> r & 1 == 0
            && (0..n).all(|m| {
                on_a(m) != on_a(r) || !s.active(m) || !s.nodes[m as usize].engine.is_failed(r)
            })
    };
    // A rank going on with one side that has declared one going on with
    // the other.
    let accuser = |a_side: bool| {
        (0..n).find_map(|r| {
            if on_a(r) != a_side || !goes_on(r) {
                return None;
            }
            let e = &s.nodes[r as usize].engine;
            e.failed()
                .iter()
                .find(|&&x| on_a(x) != a_side && goes_on(x))
                .map(|&x| (r, x))
        })
    };
    if let (Some((a, x)), Some((b, y))) = (accuser(true), accuser(false)) {
        breach(s, Prop::Partition, || {
            format!(
                "partition {}: rank {a} declared rank {x} and rank {b} declared rank {y}, and \
                 both go on",
                sides(job.n(), side)
            )
        });
    }
}

/// `side` and the rest, as two rank lists.
pub fn sides(n: u32, side: u32) -> String {
    let (a, b): (Vec<Rank>, Vec<Rank>) = (0..n).partition(|r| side >> r & 1 == 1);
    format!("{a:?} | {b:?}")
}

// ----- the `sometimes` properties -----

/// Some rank raised a view.
pub fn a_view(s: &State) -> bool {
    s.ghost.views.iter().any(|v| !v.is_empty())
}

/// Some rank decided a user agreement.
pub fn a_decision(s: &State) -> bool {
    s.ghost.decisions.iter().any(|d| !d.is_empty())
}

/// Some rank delivered a payload of another origin.
pub fn a_delivery(s: &State) -> bool {
    let n = s.nodes.len() as Rank;
    (0..n).any(|r| (0..n).any(|o| o != r && s.nodes[r as usize].engine.payload_mark(o) > 0))
}

/// Some rank excluded itself.
pub fn a_self_exclusion(s: &State) -> bool {
    s.nodes
        .iter()
        .any(|n| !n.crashed && n.engine.participation() == Participation::Excluded)
}

/// Some live rank declared a crashed one.
pub fn a_crash_declared(s: &State) -> bool {
    s.nodes.iter().any(|n| {
        !n.crashed
            && n.engine
                .failed()
                .iter()
                .any(|&r| s.nodes[r as usize].crashed)
    })
}
