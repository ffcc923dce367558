//! Codec round-trips and rejection of garbage: random bytes, every
//! truncation, every header field wrong.

use ffd_protocol::RejectReason;
use ffd_protocol::wire::{self, Encoder, HEADER_LEN, Kind, Message, ProbeVerdict, SLOTS};
use proptest::prelude::*;

const KEY: u64 = 0x0123_4567_89AB_CDEF;
const N: u32 = 100_000;

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

/// One message of every kind, with arbitrary field values.
fn any_message() -> impl Strategy<Value = Vec<u8>> {
    let sender = 0..N;
    (
        sender,
        0u8..7,
        any::<u32>(),
        any::<u64>(),
        sorted_ranks(),
        sorted_ranks(),
        proptest::collection::vec(any::<u8>(), 0..200),
    )
        .prop_map(|(s, k, x, y, a, b, bytes)| {
            let e = Encoder::new(KEY, s);
            match k {
                0 => e.notice(x % N, (y % 60000) as u16, &a, &b),
                1 => e.observe_me(x, (y % u64::from(SLOTS)) as u16),
                2 => e.sync_request(y, &a, &b),
                3 => e.sync_reply(&a, &b),
                4 => e.probe(x, (y % u64::from(N)) as u32),
                5 => e.probe_ack(x, (y % u64::from(N)) as u32, ProbeVerdict::Silent),
                _ => e.payload(x % N, y, 3, &bytes),
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn notices_round_trip(sender in 0..N, origin in 0..N, hops in any::<u16>(), failed in sorted_ranks(), left in sorted_ranks()) {
        let m = Encoder::new(KEY, sender).notice(origin, hops, &failed, &left);
        let (h, msg) = wire::decode(&m, KEY, N).expect("round trip");
        prop_assert_eq!((h.kind, h.sender, h.incarnation, h.body_len as usize), (Kind::Notice, sender, 0, m.len() - HEADER_LEN));
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
        let m = e.observe_me(a, slot);
        prop_assert_eq!(wire::decode(&m, KEY, N).unwrap().1, Message::ObserveMe { generation: a, slot });
        let m = e.sync_request(b, &failed, &[]);
        let Message::SyncRequest { digest, failed: f, left } = wire::decode(&m, KEY, N).unwrap().1 else { return Err(TestCaseError::fail("kind")) };
        prop_assert_eq!((digest, f.to_vec(), left.len()), (b, failed.clone(), 0));
        let m = e.sync_reply(&[], &failed);
        let Message::SyncReply { failed: f, left } = wire::decode(&m, KEY, N).unwrap().1 else { return Err(TestCaseError::fail("kind")) };
        prop_assert_eq!((f.len(), left.to_vec()), (0, failed));
        let m = e.probe(a, about);
        prop_assert_eq!(wire::decode(&m, KEY, N).unwrap().1, Message::Probe { nonce: a, about });
        let m = e.probe_ack(a, about, ProbeVerdict::Dead);
        prop_assert_eq!(wire::decode(&m, KEY, N).unwrap().1, Message::ProbeAck { nonce: a, about, verdict: ProbeVerdict::Dead });
        let m = e.payload(about, b, 9, &bytes);
        prop_assert_eq!(wire::decode(&m, KEY, N).unwrap().1, Message::Payload { origin: about, seq: b, hops: 9, bytes: &bytes });
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        // Almost always rejected; whatever decodes must be self-consistent.
        if let Ok((h, _)) = wire::decode(&bytes, KEY, N) {
            prop_assert!(h.sender < N);
            prop_assert_eq!(h.body_len as usize + HEADER_LEN, bytes.len());
        }
    }

    #[test]
    fn random_bodies_behind_a_valid_header_never_panic(kind in 1u8..8, body in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut m = Encoder::new(KEY, 1).probe(0, 0);
        m.truncate(HEADER_LEN);
        m[5] = kind;
        m[24..28].copy_from_slice(&(body.len() as u32).to_le_bytes());
        m.extend_from_slice(&body);
        if let Ok((h, msg)) = wire::decode(&m, KEY, 1000) {
            prop_assert_eq!(h.kind as u8, kind);
            if let Message::Notice(n) = msg {
                prop_assert!(n.origin < 1000 && n.failed.iter().all(|r| r < 1000));
            }
        }
    }

    #[test]
    fn every_truncation_and_extension_is_rejected(m in any_message(), extra in 1usize..8) {
        prop_assert!(wire::decode(&m, KEY, N).is_ok());
        for len in 0..m.len() {
            prop_assert!(wire::decode(&m[..len], KEY, N).is_err(), "prefix of {} bytes accepted", len);
        }
        let mut longer = m.clone();
        longer.extend(std::iter::repeat_n(0u8, extra));
        prop_assert_eq!(wire::decode(&longer, KEY, N).err(), Some(RejectReason::TrailingBytes));
        // The length field is checked against the bytes received.
        let mut lying = m.clone();
        let body = u32::from_le_bytes(lying[24..28].try_into().unwrap());
        lying[24..28].copy_from_slice(&(body + extra as u32).to_le_bytes());
        prop_assert_eq!(wire::decode(&lying, KEY, N).err(), Some(RejectReason::Truncated));
    }

    #[test]
    fn every_header_field_wrong_is_rejected_with_its_reason(m in any_message(), flip in 1u8..=255) {
        let field = |range: std::ops::Range<usize>| {
            let mut bad = m.clone();
            bad[range.start] ^= flip;
            bad
        };
        prop_assert_eq!(wire::decode(&field(0..4), KEY, N).err(), Some(RejectReason::BadMagic));
        prop_assert_eq!(wire::decode(&field(3..4), KEY, N).err(), Some(RejectReason::BadMagic));
        prop_assert_eq!(wire::decode(&field(4..5), KEY, N).err(), Some(RejectReason::BadVersion));
        let mut k = m.clone();
        k[5] = 0;
        prop_assert_eq!(wire::decode(&k, KEY, N).err(), Some(RejectReason::UnknownKind));
        k[5] = 8 + (flip % 200);
        prop_assert_eq!(wire::decode(&k, KEY, N).err(), Some(RejectReason::UnknownKind));
        prop_assert_eq!(wire::decode(&field(6..8), KEY, N).err(), Some(RejectReason::ReservedBits));
        prop_assert_eq!(wire::decode(&field(8..16), KEY, N).err(), Some(RejectReason::WrongJobKey));
        prop_assert_eq!(wire::decode(&m, KEY ^ u64::from(flip), N).err(), Some(RejectReason::WrongJobKey));
        let mut s = m.clone();
        s[16..20].copy_from_slice(&(N + u32::from(flip)).to_le_bytes());
        prop_assert_eq!(wire::decode(&s, KEY, N).err(), Some(RejectReason::RankOutOfRange));
        prop_assert_eq!(wire::decode(&field(20..24), KEY, N).err(), Some(RejectReason::UnsupportedIncarnation));
        let mut l = m.clone();
        let body = u32::from_le_bytes(l[24..28].try_into().unwrap());
        if body > 0 {
            l[24..28].copy_from_slice(&(body - 1).to_le_bytes());
            prop_assert_eq!(wire::decode(&l, KEY, N).err(), Some(RejectReason::TrailingBytes));
        }
        // A smaller job: every rank the message names must be < N.
        let (_, msg) = wire::decode(&m, KEY, N).unwrap();
        let sender = u32::from_le_bytes(m[16..20].try_into().unwrap());
        let max_named = match msg {
            Message::Notice(n) => n.failed.iter().chain(n.left.iter()).chain([n.origin, sender]).max(),
            Message::SyncRequest { failed, left, .. } | Message::SyncReply { failed, left } => failed.iter().chain(left.iter()).chain([sender]).max(),
            Message::Probe { about, .. } | Message::ProbeAck { about, .. } => Some(about.max(sender)),
            Message::Payload { origin, .. } => Some(origin.max(sender)),
            Message::ObserveMe { .. } => Some(sender),
        };
        if let Some(max) = max_named {
            prop_assert_eq!(wire::decode(&m, KEY, max).err(), Some(RejectReason::RankOutOfRange));
            prop_assert!(wire::decode(&m, KEY, max + 1).is_ok());
        }
    }
}
