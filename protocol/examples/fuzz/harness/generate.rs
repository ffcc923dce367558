//! Generators of messages a receiving Engine must survive: a valid
//! message of each kind from the encoder with chosen field values (ranks
//! in and out of range, the receiver itself, its neighbours, long lists,
//! `u64::MAX` sequence numbers), and hand-built ones whose bodies the
//! encoder would never write (non-canonical or malformed rank lists,
//! reserved bits, wrong lengths).
//!
//! Owns: [`KIND_GENERATORS`], one generator per message kind, and the
//! field choosers they share. Must not: seal (the episode chooses the key,
//! the receiver and the sequence number), or look inside an Engine beyond
//! the public accessors gathered in [`View`].
//!
//! A new message kind gets a row in [`KIND_GENERATORS`]; until it has one,
//! [`forge`] builds its messages with the hand-built body generator, and
//! the test `every_kind_has_a_generator` names it.

use ffd_protocol::agreement::Value;
use ffd_protocol::wire::{
    AgreementId, Encoder, HEADER_LEN, MAGIC, OutcomeVerdict, ProbeVerdict, SLOTS, VERSION,
    VOTE_COMPLETE, VOTE_TIEBREAK,
};
use ffd_protocol::{Engine, Kind, Rank};

use super::dice::Dice;

/// What a generator may know of the receiving Engine: its public state.
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    pub me: Rank,
    pub n: u32,
    pub job_key: u64,
    pub emitter: Option<Rank>,
    pub observer: Option<Rank>,
    pub generation: u32,
    pub digest: u64,
    pub failed: &'a [Rank],
    pub left: &'a [Rank],
}

impl<'a> View<'a> {
    pub fn of(engine: &'a Engine, job_key: u64) -> View<'a> {
        View {
            me: engine.me(),
            n: engine.size(),
            job_key,
            emitter: engine.emitter(),
            observer: engine.observer(),
            generation: engine.generation(),
            digest: engine.digest(),
            failed: engine.failed(),
            left: engine.left(),
        }
    }
}

/// Builds the unsealed bytes of one message of a kind, spoken by
/// `encoder`'s sender.
pub type MakeMessage = fn(&mut Dice, &View<'_>, &Encoder) -> Vec<u8>;

/// The generator of one message kind.
pub struct KindGenerator {
    pub kind: Kind,
    pub make: MakeMessage,
}

/// One generator per message kind (kind 14 gets its own with the work
/// that adds it).
pub const KIND_GENERATORS: &[KindGenerator] = &[
    KindGenerator {
        kind: Kind::Notice,
        make: notice,
    },
    KindGenerator {
        kind: Kind::ObserveMe,
        make: observe_me,
    },
    KindGenerator {
        kind: Kind::SyncRequest,
        make: sync_request,
    },
    KindGenerator {
        kind: Kind::SyncReply,
        make: sync_reply,
    },
    KindGenerator {
        kind: Kind::Probe,
        make: probe,
    },
    KindGenerator {
        kind: Kind::ProbeAck,
        make: probe_ack,
    },
    KindGenerator {
        kind: Kind::Payload,
        make: payload,
    },
    KindGenerator {
        kind: Kind::Suspect,
        make: suspect,
    },
    KindGenerator {
        kind: Kind::Vote,
        make: vote,
    },
    KindGenerator {
        kind: Kind::Refute,
        make: refute,
    },
    KindGenerator {
        kind: Kind::Outcome,
        make: outcome,
    },
    KindGenerator {
        kind: Kind::AgreeUp,
        make: agree_up,
    },
    KindGenerator {
        kind: Kind::AgreeDown,
        make: agree_down,
    },
];

/// A generated message, not sealed yet.
pub struct Forged {
    /// The sender its header names (the episode seals and delivers it as
    /// coming from this rank).
    pub sender: Rank,
    pub unsealed: Vec<u8>,
}

/// A message of any kind for the Engine of `view`: mostly from the kind's
/// generator, sometimes hand-built around the kind's byte.
pub fn forge(dice: &mut Dice, view: &View<'_>) -> Forged {
    let kind = dice.pick(Kind::ALL);
    let sender = sender(dice, view);
    let generator = KIND_GENERATORS.iter().find(|g| g.kind == kind);
    let unsealed = match generator {
        Some(g) if !dice.chance(15) => (g.make)(dice, view, &Encoder::new(view.job_key, sender)),
        _ => hand_built(dice, view, kind as u8, sender),
    };
    Forged { sender, unsealed }
}

// ----- field choosers -----

/// A rank for a message field: mostly in range, often one the receiver
/// cares about (itself, its emitter and observer, a rank it holds failed
/// or left), sometimes out of range.
pub fn rank(dice: &mut Dice, view: &View<'_>) -> Rank {
    let n = view.n;
    match dice.below(100) {
        0..=44 => dice.below32(n),
        45..=54 => view.emitter.unwrap_or(0),
        55..=64 => view.observer.unwrap_or(0),
        65..=69 if !view.failed.is_empty() => dice.pick(view.failed),
        70..=72 if !view.left.is_empty() => dice.pick(view.left),
        73..=79 => view.me,
        80..=86 => n,
        87..=92 => n.saturating_add(dice.below32(1000)),
        _ => dice.pick(&[u32::MAX, u32::MAX - 1, 1 << 31, n.saturating_sub(1)]),
    }
}

/// The sender a message claims: another rank in range mostly, the
/// receiver's ring neighbours often (their messages reach deeper: a sync
/// request is honoured only from them), the receiver or out of range
/// rarely.
pub fn sender(dice: &mut Dice, view: &View<'_>) -> Rank {
    let n = view.n;
    match dice.below(100) {
        0..=54 if n > 1 => (view.me + 1 + dice.below32(n - 1)) % n,
        55..=71 if view.emitter.is_some() => view.emitter.unwrap_or(0),
        72..=89 if view.observer.is_some() => view.observer.unwrap_or(0),
        90..=93 => view.me,
        94..=97 => n.saturating_add(dice.below32(4)),
        98 | 99 => u32::MAX,
        _ => dice.below32(n),
    }
}

/// A member of a rank list: in range and not the receiver mostly (naming
/// the receiver as failed excludes it, which ends its part in the episode).
fn member(dice: &mut Dice, view: &View<'_>) -> Rank {
    match dice.below(100) {
        0..=93 => dice.below32(view.n),
        94..=96 => view.me,
        _ => view.n.saturating_add(dice.below32(3)),
    }
}

/// A strictly increasing rank list, as the encoder requires: empty, a few
/// ranks, a run, everyone (but the receiver), the receiver's failed set.
pub fn ranks(dice: &mut Dice, view: &View<'_>) -> Vec<Rank> {
    let n = view.n;
    let mut list: Vec<Rank> = match dice.below(100) {
        0..=34 => Vec::new(),
        35..=59 => vec![member(dice, view)],
        60..=77 => {
            let k = 2 + dice.index(8);
            (0..k).map(|_| member(dice, view)).collect()
        }
        78..=82 => (0..n).filter(|&r| r != view.me).collect(),
        83 => (0..n).collect(),
        84..=89 => {
            let start = dice.below32(n);
            let len = 1 + dice.below32(n - start);
            (start..start + len).filter(|&r| r != view.me).collect()
        }
        90..=95 => {
            let mut l = view.failed.to_vec();
            l.push(member(dice, view));
            l
        }
        _ => {
            // Far out of range, up to the largest u32 (which no job has;
            // the encoder handles it since the harness found it overflowed).
            vec![member(dice, view), dice.pick(&[u32::MAX - 1, u32::MAX])]
        }
    };
    list.sort_unstable();
    list.dedup();
    list
}

fn hops(dice: &mut Dice) -> u16 {
    dice.pick(&[0, 0, 1, 2, 7, u16::MAX - 1, u16::MAX])
}

fn interesting_u64(dice: &mut Dice) -> u64 {
    match dice.below(10) {
        0 => 0,
        1 => 1,
        2 => u64::MAX,
        3 => u64::MAX - 1,
        4 => 1 << 63,
        5 => u64::from(u32::MAX),
        6..=7 => dice.below(64),
        _ => dice.u64(),
    }
}

// ----- one generator per kind -----

fn notice(dice: &mut Dice, view: &View<'_>, enc: &Encoder) -> Vec<u8> {
    let origin = if dice.chance(60) {
        enc.sender
    } else {
        rank(dice, view)
    };
    let failed = ranks(dice, view);
    let left = ranks(dice, view);
    enc.notice(origin, hops(dice), &failed, &left)
}

fn observe_me(dice: &mut Dice, view: &View<'_>, enc: &Encoder) -> Vec<u8> {
    let generation = match dice.below(6) {
        0 => 0,
        1 => 1,
        2 => dice.below32(8),
        3 => u32::MAX,
        4 => view.generation.wrapping_add(dice.below32(3)),
        _ => dice.u32(),
    };
    let slot = match dice.below(8) {
        0..=4 => dice.below32(u32::from(SLOTS)) as u16,
        5 => SLOTS - 1,
        6 => SLOTS,
        _ => dice.u16(),
    };
    enc.observe_me(generation, slot)
}

fn sync_request(dice: &mut Dice, view: &View<'_>, enc: &Encoder) -> Vec<u8> {
    let digest = match dice.below(3) {
        0 => view.digest,
        1 => 0,
        _ => dice.u64(),
    };
    let failed = ranks(dice, view);
    let left = ranks(dice, view);
    if dice.chance(50) {
        return enc.sync_request(digest, &failed, &left);
    }
    // Payload high-water marks for the origins `from..to`: ascending
    // origins inside the range, marks from 1 (some far ahead).
    let from = dice.below32(view.n);
    let to = from + dice.below32(view.n - from + 1);
    let mut marks = Vec::new();
    let mut origin = from;
    while origin < to && marks.len() < 64 {
        if dice.chance(40) {
            let mark = dice.pick(&[1, 2, 3, 64, 65, u64::MAX]);
            marks.push((origin, mark));
        }
        origin += 1 + dice.below32(4);
    }
    enc.sync_request_with_marks(digest, &failed, &left, from, to, &marks)
}

fn sync_reply(dice: &mut Dice, view: &View<'_>, enc: &Encoder) -> Vec<u8> {
    let failed = ranks(dice, view);
    let left = ranks(dice, view);
    enc.sync_reply(&failed, &left)
}

/// Nonces count from 1 in each Engine: small ones may match a live probe.
fn nonce(dice: &mut Dice) -> u32 {
    if dice.chance(70) {
        dice.below32(6)
    } else {
        dice.u32()
    }
}

fn probe(dice: &mut Dice, view: &View<'_>, enc: &Encoder) -> Vec<u8> {
    enc.probe(nonce(dice), rank(dice, view))
}

fn probe_ack(dice: &mut Dice, view: &View<'_>, enc: &Encoder) -> Vec<u8> {
    let verdict = dice.pick(&[
        ProbeVerdict::Unknown,
        ProbeVerdict::Alive,
        ProbeVerdict::Silent,
        ProbeVerdict::Dead,
    ]);
    enc.probe_ack(nonce(dice), rank(dice, view), verdict)
}

fn payload(dice: &mut Dice, view: &View<'_>, enc: &Encoder) -> Vec<u8> {
    let origin = if dice.chance(50) {
        enc.sender
    } else {
        rank(dice, view)
    };
    let len = dice.pick(&[0, 1, 8, 100, 2000]);
    let bytes = dice.bytes(len);
    enc.payload(origin, interesting_u64(dice), hops(dice), &bytes)
}

/// The accuser of a quorum message: mostly the sender (an accuser's own
/// flood, or the answer to it), the receiver itself (votes and refutations
/// come back to an accuser), or any rank.
fn accuser(dice: &mut Dice, view: &View<'_>, enc: &Encoder) -> Rank {
    match dice.below(10) {
        0..=4 => enc.sender,
        5..=6 => view.me,
        _ => rank(dice, view),
    }
}

/// Which agreement: mostly the first few of each class (those an Engine
/// is running or about to run: view ids and user sequence numbers count
/// from 1), sometimes far ahead or at the largest number.
fn agreement_id(dice: &mut Dice) -> AgreementId {
    let number = match dice.below(10) {
        0..=6 => 1 + dice.below(4),
        7 => 1 + dice.below(64),
        8 => u64::MAX,
        _ => interesting_u64(dice).max(1),
    };
    if dice.chance(50) {
        AgreementId::View(number)
    } else {
        AgreementId::User(number)
    }
}

/// An agreement value: flags, the newest view id, a failed list (often
/// the receiver's failed set, or one naming the receiver, or everyone).
fn agreement_value(dice: &mut Dice, view: &View<'_>) -> Value {
    Value {
        flags: interesting_u64(dice),
        failed: ranks(dice, view),
        view: match dice.below(6) {
            0..=2 => 0,
            3 | 4 => dice.below(4),
            _ => interesting_u64(dice),
        },
    }
}

/// The root an agreement message names: the lowest rank mostly (the
/// tree's first root), the sender, or any rank.
fn agreement_root(dice: &mut Dice, view: &View<'_>, enc: &Encoder) -> Rank {
    match dice.below(10) {
        0..=4 => dice.below32(3.min(view.n)),
        5 | 6 => enc.sender,
        _ => rank(dice, view),
    }
}

fn suspect(dice: &mut Dice, view: &View<'_>, enc: &Encoder) -> Vec<u8> {
    let accuser = accuser(dice, view, enc);
    // Flags: none, the whole host, or a reserved bit (refused).
    let flags = match dice.below(10) {
        0..=5 => 0,
        6..=8 => ffd_protocol::wire::SUSPECT_HOST,
        _ => 2,
    };
    enc.suspect(accuser, nonce(dice), rank(dice, view), hops(dice), flags)
}

fn vote(dice: &mut Dice, view: &View<'_>, enc: &Encoder) -> Vec<u8> {
    let accuser = accuser(dice, view, enc);
    // Counts from 1 to N are valid; 0 and above N are refused.
    let count = match dice.below(10) {
        0..=5 => 1 + dice.below32(view.n),
        6 => view.n,
        7 => 0,
        8 => view.n.saturating_add(1),
        _ => dice.u32(),
    };
    let flags = match dice.below(10) {
        0..=8 => dice.pick(&[
            0,
            VOTE_TIEBREAK,
            VOTE_COMPLETE,
            VOTE_TIEBREAK | VOTE_COMPLETE,
        ]),
        _ => dice.u16(),
    };
    enc.vote(accuser, nonce(dice), count, flags)
}

fn refute(dice: &mut Dice, view: &View<'_>, enc: &Encoder) -> Vec<u8> {
    let accuser = accuser(dice, view, enc);
    enc.refute(accuser, nonce(dice))
}

fn outcome(dice: &mut Dice, view: &View<'_>, enc: &Encoder) -> Vec<u8> {
    let accuser = accuser(dice, view, enc);
    let verdict = dice.pick(&[OutcomeVerdict::Withdrawn, OutcomeVerdict::NoQuorum]);
    enc.outcome(accuser, nonce(dice), rank(dice, view), hops(dice), verdict)
}

fn agree_up(dice: &mut Dice, view: &View<'_>, enc: &Encoder) -> Vec<u8> {
    let id = agreement_id(dice);
    let root = agreement_root(dice, view, enc);
    let value = agreement_value(dice, view);
    let decided = dice.chance(30).then(|| agreement_value(dice, view));
    enc.agree_up(id, hops(dice), root, &value, decided.as_ref())
}

fn agree_down(dice: &mut Dice, view: &View<'_>, enc: &Encoder) -> Vec<u8> {
    let id = agreement_id(dice);
    let root = agreement_root(dice, view, enc);
    let decision = agreement_value(dice, view);
    enc.agree_down(id, hops(dice), root, &decision)
}

// ----- hand-built messages -----

/// A header with `kind` (any byte) and `sender`, reserved fields mostly
/// zero, and a body of fragments: ranks, small and large integers, rank
/// lists (valid, non-canonical, malformed), random bytes; the body length
/// field mostly right. Unsealed (sequence number 0).
pub fn hand_built(dice: &mut Dice, view: &View<'_>, kind: u8, sender: Rank) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + 32);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(kind);
    let flags: u16 = if dice.chance(95) { 0 } else { dice.u16() };
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&view.job_key.to_le_bytes());
    out.extend_from_slice(&sender.to_le_bytes());
    let incarnation: u32 = if dice.chance(95) { 0 } else { dice.u32() };
    out.extend_from_slice(&incarnation.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for _ in 0..dice.below(7) {
        match dice.below(8) {
            0 | 1 => out.extend_from_slice(&rank(dice, view).to_le_bytes()),
            2 => {
                out.extend_from_slice(&(if dice.chance(80) { 0 } else { dice.u16() }).to_le_bytes())
            }
            3 => out.extend_from_slice(&interesting_u64(dice).to_le_bytes()),
            4 | 5 => raw_list(dice, view, &mut out),
            6 => out.push(dice.below(6) as u8),
            _ => {
                let len = dice.index(17);
                out.extend_from_slice(&dice.bytes(len));
            }
        }
    }
    let body = (out.len() - HEADER_LEN) as u32;
    let claimed = match dice.below(20) {
        0 => 0,
        1 => body.wrapping_add(1),
        2 => body.wrapping_sub(1),
        3 => u32::MAX,
        _ => body,
    };
    out[32..36].copy_from_slice(&claimed.to_le_bytes());
    out
}

fn varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7F) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A rank list in one of the wire's three encodings (tags 0 sparse, 1
/// ranges, 2 bitmap): valid, or with one of the defects the decoder must
/// refuse (a huge claimed count, overflowing deltas, adjacent runs, an
/// empty or overlong bitmap, stray bits, an overlong varint, an unknown
/// tag).
fn raw_list(dice: &mut Dice, view: &View<'_>, out: &mut Vec<u8>) {
    let n = view.n;
    match dice.below(12) {
        0..=2 => ffd_protocol::ranks::encode_rank_list(&ranks(dice, view), out),
        3 => {
            out.push(0);
            varint(out, dice.pick(&[u32::MAX, 1 << 20, n + 1]));
            varint(out, 0);
        }
        4 => {
            out.push(0);
            varint(out, 2);
            varint(out, u32::MAX);
            varint(out, u32::MAX);
        }
        5 => {
            out.push(1);
            varint(out, 2);
            out.extend_from_slice(&[0, 0, 0, 0]);
        }
        6 => {
            out.push(1);
            varint(out, 1);
            varint(out, 0);
            varint(out, dice.pick(&[u32::MAX, n, n.saturating_sub(1)]));
        }
        7 => {
            out.push(2);
            varint(out, 0);
            varint(out, 0);
        }
        8 => {
            out.push(2);
            varint(out, 0);
            varint(out, 3);
            out.push(0xFF);
        }
        9 => {
            out.push(2);
            varint(out, dice.below32(n + 2));
            varint(out, dice.pick(&[n, 8, u32::MAX]));
            out.push(0xFF);
        }
        10 => out.extend_from_slice(&[0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),
        _ => out.push(3 + dice.below(253) as u8),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_generator() {
        let missing: Vec<&str> = Kind::ALL
            .iter()
            .filter(|k| !KIND_GENERATORS.iter().any(|g| g.kind == **k))
            .map(|k| k.as_str())
            .collect();
        assert!(
            missing.is_empty(),
            "message kinds without a generator in KIND_GENERATORS \
             (protocol/examples/fuzz/harness/generate.rs): {missing:?}; they are fuzzed \
             only with hand-built bodies until they get one"
        );
    }
}
