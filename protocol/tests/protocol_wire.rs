//! Codec round-trips and rejection of garbage: random bytes, every
//! truncation, every header field wrong (sealed by a sender who holds the
//! key, or changed on the way without it), every byte changed.

use ffd_protocol::RejectReason;
use ffd_protocol::agreement::Value;
use ffd_protocol::wire::{
    self, AgreementId, Encoder, HEADER_LEN, JobKeys, Kind, Message, OutcomeVerdict, ProbeVerdict,
    SLOTS, TAG_LEN,
};
use proptest::prelude::*;

const KEY: u64 = 0x0123_4567_89AB_CDEF;
const N: u32 = 100_000;
/// The header's sequence number and body length.
const SEQ: std::ops::Range<usize> = 24..32;
const BODY_LEN: std::ops::Range<usize> = 32..36;

fn keys() -> JobKeys {
    JobKeys::new(KEY, [0x33; 32])
}

/// The receiver every message here is sealed for.
const TO: u32 = 17;

/// `unsealed` sealed for `TO` by a sender who holds the job's keys.
fn seal(unsealed: &[u8], seq: u64) -> Vec<u8> {
    wire::seal(unsealed, seq, TO, &keys())
}

/// `wire::decode` at `TO`.
fn decode<'a>(
    bytes: &'a [u8],
    keys: &JobKeys,
    n: u32,
) -> Result<(wire::Header, Message<'a>), RejectReason> {
    wire::decode(bytes, keys, TO, n)
}

/// The unsealed part of a sealed message, sequence number kept.
fn unsealed(sealed: &[u8]) -> Vec<u8> {
    sealed[..sealed.len() - TAG_LEN].to_vec()
}

fn sorted_ranks() -> impl Strategy<Value = Vec<u32>> {
    prop_oneof![
        proptest::collection::vec(0..N, 0..50),
        (0..N - 5000, 1u32..5000).prop_map(|(s, l)| (s..s + l).collect()),
        (0..N - 3000).prop_map(|s| (s..s + 3000).filter(|r| r % 7 != 0).collect()),
    ]
    .prop_map(|mut v: Vec<u32>| {
        v.sort_unstable();
        v.dedup();
        v
    })
}

/// One sealed message of every kind, with arbitrary field values.
fn any_message() -> impl Strategy<Value = Vec<u8>> {
    let sender = 0..N;
    (
        sender,
        0u8..13,
        any::<u32>(),
        any::<u64>(),
        sorted_ranks(),
        sorted_ranks(),
        proptest::collection::vec(any::<u8>(), 0..200),
    )
        .prop_map(|(s, k, x, y, a, b, bytes)| {
            let e = Encoder::new(KEY, s);
            let m = match k {
                0 => e.notice(x % N, (y % 60000) as u16, &a, &b),
                1 => e.observe_me(x, (y % u64::from(SLOTS)) as u16),
                2 => {
                    // Marks for the ranks of `b`, covering up to the last.
                    let marks: Vec<(u32, u64)> = b.iter().map(|&r| (r, y | 1)).collect();
                    let to = b.last().map_or(0, |&r| r + 1);
                    e.sync_request_with_marks(y, &a, &[], 0, to, &marks)
                }
                3 => e.sync_reply(&a, &b),
                4 => e.probe(x, (y % u64::from(N)) as u32),
                5 => e.probe_ack(x, (y % u64::from(N)) as u32, ProbeVerdict::Silent),
                6 => e.payload(x % N, y, 3, &bytes),
                7 => e.suspect(
                    x % N,
                    y as u32,
                    (y % u64::from(N)) as u32,
                    2,
                    (y % 2) as u16,
                ),
                8 => e.vote(x % N, y as u32, 1, (y % 4) as u16),
                9 => e.refute(x % N, y as u32),
                10 => e.outcome(
                    x % N,
                    y as u32,
                    (y % u64::from(N)) as u32,
                    1,
                    OutcomeVerdict::NoQuorum,
                ),
                11 => {
                    let v = Value::new(y, &a).with_view(u64::from(x));
                    let d = Value::new(!y, &b);
                    let decided = (x % 2 == 0).then_some(&d);
                    e.agree_up(AgreementId::View(1 + y % 9), x as u16, x % N, &v, decided)
                }
                _ => e.agree_down(AgreementId::User(1 + y), 2, x % N, &Value::new(y, &b)),
            };
            seal(&m, 1 + y % 1_000_000)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn notices_round_trip(sender in 0..N, origin in 0..N, hops in any::<u16>(), failed in sorted_ranks(), left in sorted_ranks(), seq in 1..u64::MAX) {
        let m = seal(&Encoder::new(KEY, sender).notice(origin, hops, &failed, &left), seq);
        let (h, msg) = decode(&m, &keys(), N).expect("round trip");
        prop_assert_eq!((h.kind, h.sender, h.incarnation, h.seq, h.body_len as usize), (Kind::Notice, sender, 0, seq, m.len() - HEADER_LEN - TAG_LEN));
        let Message::Notice(n) = msg else { return Err(TestCaseError::fail("kind")) };
        prop_assert_eq!((n.origin, n.hops), (origin, hops));
        prop_assert_eq!(n.failed.to_vec(), failed);
        prop_assert_eq!(n.left.to_vec(), left);
    }

    #[test]
    fn other_kinds_round_trip(sender in 0..N, a in any::<u32>(), b in any::<u64>(), failed in sorted_ranks(), bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let e = Encoder::new(KEY, sender);
        let slot = (b % u64::from(SLOTS)) as u16;
        let about = a % N;
        let m = seal(&e.observe_me(a, slot), 1);
        prop_assert_eq!(decode(&m, &keys(), N).unwrap().1, Message::ObserveMe { generation: a, slot });
        let m = seal(&e.sync_request(b, &failed, &[]), 2);
        let Message::SyncRequest { digest, failed: f, left, marks } = decode(&m, &keys(), N).unwrap().1 else { return Err(TestCaseError::fail("kind")) };
        prop_assert_eq!((digest, f.to_vec(), left.len()), (b, failed.clone(), 0));
        prop_assert_eq!((marks.from, marks.to, marks.len()), (0, 0, 0), "asks for no payloads");
        let from = failed.first().copied().unwrap_or(about);
        let marked: Vec<(u32, u64)> = failed.iter().map(|&r| (r, b.max(1) ^ u64::from(r))).filter(|m| m.1 > 0).collect();
        let m = seal(&e.sync_request_with_marks(b, &[], &failed, from, N, &marked), 7);
        let Message::SyncRequest { failed: f, left, marks, .. } = decode(&m, &keys(), N).unwrap().1 else { return Err(TestCaseError::fail("kind")) };
        prop_assert_eq!((f.len(), left.to_vec()), (0, failed.clone()));
        prop_assert_eq!((marks.from, marks.to), (from, N));
        prop_assert_eq!(marks.iter().collect::<Vec<_>>(), marked);
        let m = seal(&e.sync_reply(&[], &failed), 3);
        let Message::SyncReply { failed: f, left } = decode(&m, &keys(), N).unwrap().1 else { return Err(TestCaseError::fail("kind")) };
        prop_assert_eq!((f.len(), left.to_vec()), (0, failed));
        let m = seal(&e.probe(a, about), 4);
        prop_assert_eq!(decode(&m, &keys(), N).unwrap().1, Message::Probe { nonce: a, about });
        let m = seal(&e.probe_ack(a, about, ProbeVerdict::Dead), 5);
        prop_assert_eq!(decode(&m, &keys(), N).unwrap().1, Message::ProbeAck { nonce: a, about, verdict: ProbeVerdict::Dead });
        let m = seal(&e.payload(about, b, 9, &bytes), 6);
        prop_assert_eq!(decode(&m, &keys(), N).unwrap().1, Message::Payload { origin: about, seq: b, hops: 9, bytes: &bytes });
    }

    #[test]
    fn agreement_messages_round_trip(sender in 0..N, root in 0..N, hops in any::<u16>(), number in 1..u64::MAX, flags in any::<u64>(), view in any::<u64>(), a in sorted_ranks(), b in sorted_ranks(), user in any::<bool>(), decided in any::<bool>()) {
        let e = Encoder::new(KEY, sender);
        let id = if user { AgreementId::User(number) } else { AgreementId::View(number) };
        let value = Value::new(flags, &a).with_view(view);
        let d = Value::new(!flags, &b).with_view(view / 2);
        let m = seal(&e.agree_up(id, hops, root, &value, decided.then_some(&d)), 7);
        let (h, msg) = decode(&m, &keys(), N).expect("round trip");
        prop_assert_eq!(h.kind, Kind::AgreeUp);
        let Message::AgreeUp(up) = msg else { return Err(TestCaseError::fail("kind")) };
        prop_assert_eq!((up.id, up.hops, up.root), (id, hops, root));
        prop_assert_eq!(up.value.to_value(), value);
        prop_assert_eq!(up.decided.map(|d| d.to_value()), decided.then(|| d.clone()));
        let m = seal(&e.agree_down(id, hops, root, &d), 8);
        let Message::AgreeDown(down) = decode(&m, &keys(), N).unwrap().1 else { return Err(TestCaseError::fail("kind")) };
        prop_assert_eq!((down.id, down.hops, down.root), (id, hops, root));
        prop_assert_eq!(down.decision.to_value(), d);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        // Rejected (no tag verifies); whatever decodes must be self-consistent.
        let decoded = decode(&bytes, &keys(), N);
        if let Ok((h, _)) = decoded {
            prop_assert!(h.sender < N);
            prop_assert_eq!(h.body_len as usize + HEADER_LEN + TAG_LEN, bytes.len());
        }
        prop_assert!(decoded.is_err());
    }

    #[test]
    fn random_bodies_behind_a_valid_header_never_panic(kind in prop::sample::select(Kind::ALL.iter().map(|&k| k as u8).collect::<Vec<_>>()), body in proptest::collection::vec(any::<u8>(), 0..200)) {
        // Garbage sealed by a key holder: the tag holds, the body is read.
        let mut m = Encoder::new(KEY, 1).probe(0, 0);
        m.truncate(HEADER_LEN);
        m[5] = kind;
        m[BODY_LEN].copy_from_slice(&(body.len() as u32).to_le_bytes());
        m.extend_from_slice(&body);
        let m = seal(&m, 1);
        if let Ok((h, msg)) = decode(&m, &keys(), 1000) {
            prop_assert_eq!(h.kind as u8, kind);
            if let Message::Notice(n) = msg {
                prop_assert!(n.origin < 1000 && n.failed.iter().all(|r| r < 1000));
            }
            if let Message::AgreeUp(up) = msg {
                prop_assert!(up.root < 1000 && up.value.failed.iter().all(|r| r < 1000));
            }
        }
    }

    #[test]
    fn every_changed_byte_is_rejected(m in any_message(), at in any::<prop::sample::Index>(), flip in 1u8..=255) {
        let mut bad = m.clone();
        bad[at.index(m.len())] ^= flip;
        prop_assert!(decode(&bad, &keys(), N).is_err());
        // Sealed with another secret: the same job key, a bad tag.
        let other = JobKeys::new(KEY, [0x34; 32]);
        prop_assert_eq!(decode(&m, &other, N).err(), Some(RejectReason::BadMac));
        // Sealed for another rank: good there only.
        prop_assert_eq!(wire::decode(&m, &keys(), TO + 1, N).err(), Some(RejectReason::BadMac));
    }

    #[test]
    fn every_truncation_and_extension_is_rejected(m in any_message(), extra in 1usize..8) {
        prop_assert!(decode(&m, &keys(), N).is_ok());
        for len in 0..m.len() {
            prop_assert!(decode(&m[..len], &keys(), N).is_err(), "prefix of {} bytes accepted", len);
        }
        // Bytes appended on the way: the tag no longer ends the message.
        let mut longer = m.clone();
        longer.extend(std::iter::repeat_n(0u8, extra));
        prop_assert_eq!(decode(&longer, &keys(), N).err(), Some(RejectReason::BadMac));
        // Bytes after the body, sealed by the sender.
        let mut padded = unsealed(&m);
        padded.extend(std::iter::repeat_n(0u8, extra));
        let body = u32::from_le_bytes(padded[BODY_LEN].try_into().unwrap());
        let padded = seal(&padded, 7);
        prop_assert_eq!(decode(&padded, &keys(), N).err(), Some(RejectReason::TrailingBytes));
        // The length field is checked against the bytes received.
        let mut lying = unsealed(&m);
        lying[BODY_LEN].copy_from_slice(&(body + extra as u32).to_le_bytes());
        prop_assert_eq!(decode(&seal(&lying, 7), &keys(), N).err(), Some(RejectReason::Truncated));
    }

    #[test]
    fn every_header_field_wrong_is_rejected_with_its_reason(m in any_message(), flip in 1u8..=255) {
        let seq = u64::from_le_bytes(m[SEQ].try_into().unwrap());
        // Changed on the way, without the key: the cheap filters name what
        // they see first; anything after the job key is a bad tag.
        let changed = |range: std::ops::Range<usize>| {
            let mut bad = m.clone();
            bad[range.start] ^= flip;
            bad
        };
        prop_assert_eq!(decode(&changed(0..4), &keys(), N).err(), Some(RejectReason::BadMagic));
        prop_assert_eq!(decode(&changed(3..4), &keys(), N).err(), Some(RejectReason::BadMagic));
        prop_assert_eq!(decode(&changed(4..5), &keys(), N).err(), Some(RejectReason::BadVersion));
        prop_assert_eq!(decode(&changed(8..16), &keys(), N).err(), Some(RejectReason::WrongJobKey));
        let other_job = JobKeys::new(KEY ^ u64::from(flip), [0x33; 32]);
        prop_assert_eq!(decode(&m, &other_job, N).err(), Some(RejectReason::WrongJobKey));
        for field in [5..6, 6..8, 16..20, 20..24, SEQ, BODY_LEN] {
            prop_assert_eq!(decode(&changed(field), &keys(), N).err(), Some(RejectReason::BadMac));
        }
        // Sealed wrong by a key holder: each field's own reason.
        let field = |range: std::ops::Range<usize>| {
            let mut bad = unsealed(&m);
            bad[range.start] ^= flip;
            seal(&bad, seq)
        };
        let mut k = unsealed(&m);
        k[5] = 0;
        prop_assert_eq!(decode(&seal(&k, seq), &keys(), N).err(), Some(RejectReason::UnknownKind));
        // 8..=13 are taken, 14 is reserved for work in flight.
        k[5] = 15 + (flip % 200);
        prop_assert_eq!(decode(&seal(&k, seq), &keys(), N).err(), Some(RejectReason::UnknownKind));
        prop_assert_eq!(decode(&field(6..8), &keys(), N).err(), Some(RejectReason::ReservedBits));
        let mut s = unsealed(&m);
        s[16..20].copy_from_slice(&(N + u32::from(flip)).to_le_bytes());
        prop_assert_eq!(decode(&seal(&s, seq), &keys(), N).err(), Some(RejectReason::RankOutOfRange));
        prop_assert_eq!(decode(&field(20..24), &keys(), N).err(), Some(RejectReason::UnsupportedIncarnation));
        prop_assert_eq!(decode(&seal(&unsealed(&m), 0), &keys(), N).err(), Some(RejectReason::Malformed));
        let mut l = unsealed(&m);
        let body = u32::from_le_bytes(l[BODY_LEN].try_into().unwrap());
        if body > 0 {
            l[BODY_LEN].copy_from_slice(&(body - 1).to_le_bytes());
            prop_assert_eq!(decode(&seal(&l, seq), &keys(), N).err(), Some(RejectReason::TrailingBytes));
        }
        // A smaller job: every rank the message names must be < N.
        let (_, msg) = decode(&m, &keys(), N).unwrap();
        let sender = u32::from_le_bytes(m[16..20].try_into().unwrap());
        let max_named = match msg {
            Message::Notice(n) => n.failed.iter().chain(n.left.iter()).chain([n.origin, sender]).max(),
            Message::SyncRequest { failed, left, marks, .. } => failed.iter().chain(left.iter()).chain(marks.to.checked_sub(1)).chain([sender]).max(),
            Message::SyncReply { failed, left } => failed.iter().chain(left.iter()).chain([sender]).max(),
            Message::Probe { about, .. } | Message::ProbeAck { about, .. } => Some(about.max(sender)),
            Message::Payload { origin, .. } => Some(origin.max(sender)),
            Message::ObserveMe { .. } => Some(sender),
            Message::Suspect { accuser, suspect, .. } | Message::Outcome { accuser, suspect, .. } => Some(accuser.max(suspect).max(sender)),
            Message::Vote { accuser, .. } | Message::Refute { accuser, .. } => Some(accuser.max(sender)),
            Message::AgreeUp(up) => up.value.failed.iter().chain(up.decided.iter().flat_map(|d| d.failed.iter())).chain([up.root, sender]).max(),
            Message::AgreeDown(down) => down.decision.failed.iter().chain([down.root, sender]).max(),
        };
        if let Some(max) = max_named {
            prop_assert_eq!(decode(&m, &keys(), max).err(), Some(RejectReason::RankOutOfRange));
            prop_assert!(decode(&m, &keys(), max + 1).is_ok());
        }
    }
}
