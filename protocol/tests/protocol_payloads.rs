//! Application payloads, one Engine input at a time: delivered and
//! forwarded once, whatever the receiver knows of the origin; the origin
//! delivers its own; per-origin FIFO with a bounded hold; one mark per
//! origin, never evicted; the digest/sync repair of a missed payload, in
//! parts when it is large, and its limit (the kept window).

mod support;

use ffd_protocol::ranks::fold_digest;
use ffd_protocol::wire::{self, Encoder, Message};
use ffd_protocol::{
    Engine, EngineConfig, Event, HandleError, Input, Kind, Output, QuorumMode, Rank, RejectReason,
    Time, slot_value,
};
use support::{Job, at, deliver_sealed, drain, drained, sends_of, tick};

const KEY: u64 = 0x7061_796C_6F61_6473;
const JOB: Job = Job::new(KEY, [0x5a; 32]);

fn config() -> EngineConfig {
    support::config(QuorumMode::default())
}

fn engine_with(cfg: EngineConfig, n: u32, me: Rank) -> Engine {
    drained(JOB.engine(cfg, n, me))
}

fn engine(n: u32, me: Rank) -> Engine {
    engine_with(config(), n, me)
}

/// `origin`'s payload `seq` as relayed by `sender`.
fn payload(sender: Rank, origin: Rank, seq: u64, bytes: &[u8]) -> Vec<u8> {
    Encoder::new(KEY, sender).payload(origin, seq, 0, bytes)
}

/// (origin, seq) of every payload event, in order.
fn delivered(outs: &[Output]) -> Vec<(Rank, u64)> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Event(Event::Payload { origin, seq, .. }) => Some((*origin, *seq)),
            _ => None,
        })
        .collect()
}

/// (origin, seq) of the payloads among `sends`, decoded at their receiver.
fn payload_numbers(sends: &[(Rank, Vec<u8>)], n: u32) -> Vec<(Rank, u64)> {
    sends
        .iter()
        .map(
            |(to, b)| match wire::decode(b, &JOB.keys(), *to, n).unwrap().1 {
                Message::Payload { origin, seq, .. } => (origin, seq),
                m => panic!("not a payload: {m:?}"),
            },
        )
        .collect()
}

#[test]
fn payloads_are_delivered_once_and_forwarded_once() {
    let n = 16;
    let mut origin = engine(n, 0);
    origin.handle(at(1), Input::Broadcast(b"revoke")).unwrap();
    let outs = drain(&mut origin);
    let targets: Vec<Rank> = sends_of(&outs, Kind::Payload)
        .iter()
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(targets, vec![8, 4, 2, 1, 12, 14, 15]);
    let to_8 = &sends_of(&outs, Kind::Payload)[0].1;
    let mut r = engine(n, 8);
    let outs = deliver_sealed(&mut r, at(2), to_8);
    assert_eq!(
        outs.iter()
            .filter_map(|o| match o {
                Output::Event(e) => Some(e.clone()),
                _ => None,
            })
            .collect::<Vec<_>>(),
        vec![Event::Payload {
            origin: 0,
            seq: 1,
            bytes: b"revoke".to_vec()
        }]
    );
    assert!(!sends_of(&outs, Kind::Payload).is_empty());
    // The same payload by another path: rank 4 forwards its copy.
    let via_4 = JOB.seal(&wire::forwarded(to_8, 4).expect("a payload"), 8);
    assert!(
        deliver_sealed(&mut r, at(3), &via_4).is_empty(),
        "duplicate dropped"
    );
    assert_eq!(r.stats().payloads.payload_duplicates, 1);
    // The very same bytes again are a replay, dropped before the payload
    // is looked at.
    assert_eq!(
        r.handle(
            at(3),
            Input::Message {
                from: None,
                bytes: to_8
            }
        ),
        Err(HandleError::Rejected(RejectReason::Replayed))
    );
    assert_eq!(r.stats().payloads.payload_duplicates, 1);
    let big = vec![0u8; 70_000];
    assert_eq!(
        origin.handle(at(4), Input::Broadcast(&big)),
        Err(HandleError::PayloadTooLarge {
            len: 70_000,
            max: 65_536
        })
    );
}

#[test]
fn the_origin_delivers_its_own_payloads_unless_told_not_to() {
    let n = 16;
    let mut origin = engine(n, 3);
    origin.handle(at(1), Input::Broadcast(b"one")).unwrap();
    origin.handle(at(1), Input::Broadcast(b"two")).unwrap();
    let outs = drain(&mut origin);
    assert_eq!(delivered(&outs), vec![(3, 1), (3, 2)]);
    assert!(
        matches!(
            &outs[0],
            Output::Event(Event::Payload { bytes, .. }) if bytes == b"one"
        ),
        "told before any copy leaves"
    );
    assert_eq!(
        (
            origin.payload_mark(3),
            origin.stats().payloads.payloads_delivered
        ),
        (2, 2)
    );
    // A copy coming back through a relay is a duplicate.
    let (relay, copy) = sends_of(&outs, Kind::Payload)[0].clone();
    let back = wire::forwarded(&copy, relay).expect("a payload");
    assert!(delivered(&JOB.deliver(&mut origin, at(3), &back)).is_empty());
    assert_eq!(origin.stats().payloads.payload_duplicates, 1);

    let quiet = EngineConfig {
        deliver_own: false,
        ..config()
    };
    let mut origin = engine_with(quiet, n, 3);
    origin.handle(at(1), Input::Broadcast(b"one")).unwrap();
    let outs = drain(&mut origin);
    assert!(delivered(&outs).is_empty());
    assert_eq!(sends_of(&outs, Kind::Payload).len(), 7, "still sent");
    assert_eq!(origin.payload_mark(3), 1, "still numbered and kept");
}

#[test]
fn a_rank_that_knows_the_origin_failed_still_delivers_and_forwards_its_payload() {
    let n = 16;
    let mut r = engine(n, 8);
    // Rank 2 declared the origin, 0, failed; rank 8 knows it.
    JOB.deliver(&mut r, at(1), Encoder::new(KEY, 2).notice(2, 0, &[0], &[]));
    assert!(r.is_failed(0));
    // The origin's payload, relayed by rank 4 (live): the revoke must reach
    // every survivor, so rank 8 delivers it and sends it on.
    let outs = JOB.deliver(&mut r, at(2), payload(4, 0, 1, b"revoke"));
    assert_eq!(delivered(&outs), vec![(0, 1)]);
    let on: Vec<Rank> = sends_of(&outs, Kind::Payload)
        .iter()
        .map(|(t, _)| *t)
        .collect();
    assert!(
        !on.is_empty() && !on.contains(&4) && !on.contains(&0),
        "{on:?}"
    );
    // From the failed origin itself it is not believed (its sender is
    // failed): answered with an exclusion, as any message from it.
    let outs = JOB.deliver(&mut r, at(3), payload(0, 0, 2, b"late"));
    assert!(delivered(&outs).is_empty());
    assert_eq!(r.stats().drops.dropped_from_failed, 1);
}

#[test]
fn a_payload_overtaken_by_64_later_ones_is_delivered_first_then_the_rest_in_order() {
    let n = 16;
    let mut r = engine(n, 8);
    let mut seen = Vec::new();
    for seq in 2..=65 {
        seen.extend(delivered(&JOB.deliver(
            &mut r,
            at(1),
            payload(4, 5, seq, b"p"),
        )));
    }
    assert!(seen.is_empty(), "held until 1 comes: {seen:?}");
    assert_eq!(r.payloads_held(5), 64);
    let outs = JOB.deliver(&mut r, at(2), payload(4, 5, 1, b"p"));
    let want: Vec<(Rank, u64)> = (1..=65).map(|s| (5, s)).collect();
    assert_eq!(delivered(&outs), want);
    // Forwarded in the origin's order too.
    let to_12: Vec<(Rank, u64)> = payload_numbers(
        &sends_of(&outs, Kind::Payload)
            .into_iter()
            .filter(|(t, _)| *t == 12)
            .collect::<Vec<_>>(),
        n,
    );
    assert_eq!(to_12, want);
    assert_eq!(
        (
            r.payload_mark(5),
            r.payloads_held(5),
            r.stats().payloads.payloads_held
        ),
        (65, 0, 64)
    );
}

#[test]
fn the_hold_is_bounded_and_what_overflows_is_counted_and_comes_again() {
    let n = 16;
    let cfg = EngineConfig {
        payload_hold: 4,
        ..config()
    };
    let mut r = engine_with(cfg, n, 8);
    // 3..=8 ahead of a gap at 1 and 2: the lowest four are held.
    for seq in [8, 3, 7, 4, 5, 6] {
        assert!(delivered(&JOB.deliver(&mut r, at(1), payload(4, 5, seq, b"p"))).is_empty());
    }
    assert_eq!(r.payloads_held(5), 4);
    assert_eq!(r.stats().payloads.payloads_hold_overflow, 2);
    JOB.deliver(&mut r, at(2), payload(4, 5, 1, b"p"));
    let outs = JOB.deliver(&mut r, at(2), payload(4, 5, 2, b"p"));
    assert_eq!(
        delivered(&outs),
        (2..=6).map(|s| (5, s)).collect::<Vec<_>>()
    );
    // The dropped ones, sent again (a repair, another relay), are new.
    let outs = JOB.deliver(&mut r, at(3), payload(12, 5, 7, b"p"));
    assert_eq!(delivered(&outs), vec![(5, 7)]);
    // Dropped, not delivered out of order, and not twice.
    assert_eq!(r.stats().payloads.payloads_delivered, 7);
}

#[test]
fn an_origin_is_never_forgotten_however_many_others_broadcast() {
    // Before, 1024 origins were remembered and the least recently used
    // forgotten: a late copy of its payload was delivered again.
    let n = 2000;
    let mut r = engine(n, 0);
    assert_eq!(
        delivered(&JOB.deliver(&mut r, at(1), payload(1, 1, 1, b"p"))),
        vec![(1, 1)]
    );
    for origin in 2..n {
        let got = delivered(&JOB.deliver(&mut r, at(1), payload(origin, origin, 1, b"p")));
        assert_eq!(got, vec![(origin, 1)]);
    }
    for relay in [3, 1000, 1999] {
        let late = payload(relay, 1, 1, b"p");
        assert!(delivered(&JOB.deliver(&mut r, at(2), &late)).is_empty());
    }
    assert_eq!(r.stats().payloads.payloads_delivered, u64::from(n - 1));
    // An origin's numbers far behind its newest stay duplicates.
    for seq in 2..=70u64 {
        JOB.deliver(&mut r, at(3), payload(7, 7, seq, b"p"));
    }
    assert!(delivered(&JOB.deliver(&mut r, at(4), payload(9, 7, 3, b"p"))).is_empty());
    assert_eq!(r.payload_mark(7), 70);
}

/// Drives observer `o` (rank 4, checking its emitter rank 3 in modelled
/// mode) with rank 3's slot carrying `digest` until it asks for a sync;
/// returns that request's wire bytes.
fn sync_request_of(o: &mut Engine, digest: u64) -> Vec<u8> {
    for beat in 1..=100u16 {
        let t = o.next_deadline().expect("checking");
        let outs = tick(o, t, slot_value(0, fold_digest(digest), beat));
        if let Some((to, bytes)) = sends_of(&outs, Kind::SyncRequest).pop() {
            assert_eq!(to, 3);
            return bytes;
        }
    }
    panic!("no sync request");
}

#[test]
fn a_rank_that_missed_a_payload_gets_it_through_the_digest_sync() {
    let n = 16;
    let mut emitter = engine(n, 3);
    let mut observer = drained(JOB.checker(config(), n, 4));
    // Rank 9's payload reached rank 3, and its copies to rank 4 were lost.
    JOB.deliver(&mut emitter, at(1), payload(9, 9, 1, b"revoke"));
    assert_ne!(
        emitter.digest(),
        observer.digest(),
        "the marks are in the digest"
    );
    let request = sync_request_of(&mut observer, emitter.digest());
    let outs = deliver_sealed(&mut emitter, at(200), &request);
    let repair = sends_of(&outs, Kind::Payload);
    assert_eq!(payload_numbers(&repair, n), vec![(9, 1)]);
    assert_eq!(repair[0].0, 4);
    assert_eq!(emitter.stats().payloads.sync_payloads_sent, 1);
    let outs = deliver_sealed(&mut observer, at(201), &repair[0].1);
    assert!(outs.iter().any(|o| matches!(
        o,
        Output::Event(Event::Payload { origin: 9, seq: 1, bytes }) if bytes == b"revoke"
    )));
    assert!(
        !sends_of(&outs, Kind::Payload).is_empty(),
        "forwarded, as any payload delivered"
    );
    assert_eq!(observer.digest(), emitter.digest());
}

#[test]
fn a_large_repair_spans_several_requests_and_old_gaps_are_counted() {
    let n = 16;
    let cfg = EngineConfig {
        max_sync_payload_bytes: 4096,
        payload_retention: 8,
        ..config()
    };
    let mut e = engine_with(cfg, n, 3);
    let body = vec![7u8; 1000];
    for seq in 1..=10 {
        JOB.deliver(&mut e, at(1), payload(9, 9, seq, &body));
    }
    let ask = |e: &mut Engine, now: Time, marks: &[(Rank, u64)]| {
        let m = Encoder::new(KEY, 4).sync_request_with_marks(1, &[], &[], 0, n, marks);
        let outs = JOB.deliver(e, now, &m);
        payload_numbers(&sends_of(&outs, Kind::Payload), n)
    };
    // Kept: 3..=10. A requester at 4 gets 5, 6, 7 (4 KiB: 3 of 1052 bytes).
    assert_eq!(ask(&mut e, at(10), &[(9, 4)]), vec![(9, 5), (9, 6), (9, 7)]);
    assert_eq!(e.stats().payloads.sync_payloads_truncated, 1);
    // Its next request (a timeout later) carries 7 and gets the rest.
    assert_eq!(
        ask(&mut e, at(120), &[(9, 7)]),
        vec![(9, 8), (9, 9), (9, 10)]
    );
    // One at 1 lacks 2, which is no longer kept: nothing to send, counted.
    assert!(ask(&mut e, at(240), &[(9, 1)]).is_empty());
    assert_eq!(e.stats().payloads.payloads_beyond_retention, 1);
    // Origins outside the marks' range are not answered for.
    let m = Encoder::new(KEY, 4).sync_request_with_marks(1, &[], &[], 10, n, &[]);
    assert!(sends_of(&JOB.deliver(&mut e, at(360), &m), Kind::Payload).is_empty());
}
