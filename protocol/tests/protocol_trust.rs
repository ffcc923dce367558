//! What a message may make an Engine do, and what a slot may make it
//! believe: per-link sequence numbers and replay windows, the sync and
//! exclusion limits, and slot values that count only in their own
//! generation (a leftover of the generation 512 mendings ago in the same
//! slot, a value of a replaced emitter, a zero), with the slot cleared
//! before a new emitter is named.

mod support;

use std::time::Duration;

use ffd_protocol::ranks::fold_digest;
use ffd_protocol::wire::{self, Encoder, Message, SLOTS};
use ffd_protocol::{
    Cause, Engine, EngineConfig, Input, Kind, Output, QuorumMode, Rank, RejectReason, Time,
    slot_generation, slot_value,
};
use support::{
    Job, at, deliver_from, drain, drained, failures, sends_of, serve_deadlines, slot_reading,
};

const KEY: u64 = 0x7275_7374_0000_0001;
const JOB: Job = Job::new(KEY, [0x3c; 32]);

fn engine_with(config: EngineConfig, n: u32, me: Rank) -> Engine {
    drained(JOB.engine(config, n, me))
}

/// One Engine alone has no voters: silence is declared at once
/// (`FFD_QUORUM=off`), as these tests of the trust rules expect.
fn engine(n: u32, me: Rank) -> Engine {
    engine_with(support::config(QuorumMode::Off), n, me)
}

fn rejected(e: &Engine, r: RejectReason) -> u64 {
    e.stats().drops.rejected[r.index()]
}

#[test]
fn each_link_numbers_its_copies_from_1_and_the_receiver_checks_them() {
    let n = 16;
    let mut e = engine(n, 0);
    e.handle(at(1), Input::Broadcast(b"one")).unwrap();
    e.handle(at(1), Input::Broadcast(b"two")).unwrap();
    let outs = drain(&mut e);
    let copies = sends_of(&outs, Kind::Payload);
    assert!(copies.len() >= 2 * 7, "{}", copies.len());
    // Per link: 1 then 2, whatever went to others in between.
    for to in [1, 8] {
        let seqs: Vec<u64> = copies
            .iter()
            .filter(|(t, _)| *t == to)
            .map(|(t, b)| wire::decode(b, &JOB.keys(), *t, n).unwrap().0.seq)
            .collect();
        assert_eq!(seqs, vec![1, 2], "link 0 -> {to}");
    }
    // Rank 8 gets the second before the first (reordered on the way):
    // both count; each again is a replay.
    let to_8: Vec<&Vec<u8>> = copies
        .iter()
        .filter(|(t, _)| *t == 8)
        .map(|(_, b)| b)
        .collect();
    let mut r = engine(n, 8);
    deliver_from(&mut r, at(2), 0, to_8[1]);
    deliver_from(&mut r, at(2), 0, to_8[0]);
    assert_eq!(r.stats().payloads.payloads_delivered, 2);
    for b in &to_8 {
        assert!(
            r.handle(
                at(3),
                Input::Message {
                    from: Some(0),
                    bytes: b
                }
            )
            .is_err()
        );
    }
    assert_eq!(rejected(&r, RejectReason::Replayed), 2);
    // A number more than 64 behind the newest of that link is refused.
    let old = JOB.seal_numbered(&Encoder::new(KEY, 3).probe(1, 3), 10, 8);
    let new = JOB.seal_numbered(&Encoder::new(KEY, 3).probe(2, 3), 75, 8);
    deliver_from(&mut r, at(4), 3, &new);
    assert!(
        r.handle(
            at(4),
            Input::Message {
                from: Some(3),
                bytes: &old
            }
        )
        .is_err()
    );
    assert_eq!(rejected(&r, RejectReason::Replayed), 3);
}

#[test]
fn a_sync_request_is_honoured_only_from_a_neighbour_once_per_timeout() {
    let n = 16;
    let mut e = engine(n, 4);
    deliver_from(
        &mut e,
        at(1),
        9,
        &JOB.seal_numbered(&Encoder::new(KEY, 9).notice(9, 0, &[12], &[]), 1, 4),
    );
    let request = |from: Rank, seq: u64| {
        JOB.seal_numbered(&Encoder::new(KEY, from).sync_request(0, &[7], &[]), seq, 4)
    };
    // Rank 9 is neither our emitter (3) nor our observer (5): refused, and
    // nothing it lists is learned.
    let outs = deliver_from(&mut e, at(2), 9, &request(9, 2));
    assert!(outs.is_empty(), "{outs:?}");
    assert!(!e.is_failed(7));
    assert_eq!(e.stats().sync.sync_requests_refused, 1);
    // Our observer: honoured (merged, answered with the difference).
    let outs = deliver_from(&mut e, at(3), 5, &request(5, 1));
    assert!(e.is_failed(7));
    assert_eq!(sends_of(&outs, Kind::SyncReply).len(), 1);
    // Again within a timeout: refused.
    assert!(deliver_from(&mut e, at(50), 5, &request(5, 2)).is_empty());
    assert_eq!(e.stats().sync.sync_requests_refused, 2);
    // A timeout later: honoured again.
    let outs = deliver_from(&mut e, at(110), 5, &request(5, 3));
    assert_eq!(sends_of(&outs, Kind::SyncReply).len(), 1);
    assert_eq!(e.stats().sync.sync_requests_received, 2);
}

#[test]
fn a_sync_reply_carries_at_most_max_sync_ranks() {
    let n = 64;
    let config = EngineConfig {
        max_sync_ranks: 3,
        ..EngineConfig::default()
    };
    let mut e = engine_with(config, n, 4);
    let known: Vec<Rank> = (20..30).collect();
    deliver_from(
        &mut e,
        at(1),
        40,
        &JOB.seal_numbered(&Encoder::new(KEY, 40).notice(40, 0, &known, &[]), 1, 4),
    );
    // The observer (5) knows none of them: it gets 3, and the next 3 a
    // timeout later.
    let mut got = Vec::new();
    for (i, t) in [2u64, 103, 204].into_iter().enumerate() {
        let request = JOB.seal_numbered(
            &Encoder::new(KEY, 5).sync_request(1, &got, &[]),
            i as u64 + 1,
            4,
        );
        let outs = deliver_from(&mut e, at(t), 5, &request);
        let replies = sends_of(&outs, Kind::SyncReply);
        let (_, bytes) = &replies[0];
        let (_, Message::SyncReply { failed, .. }) =
            wire::decode(bytes, &JOB.keys(), 5, n).unwrap()
        else {
            panic!("not a reply")
        };
        let part = failed.to_vec();
        assert_eq!(part.len(), 3, "{part:?}");
        got.extend(part);
        got.sort_unstable();
    }
    assert_eq!(got, known[..9].to_vec());
    assert_eq!(e.stats().sync.sync_replies_truncated, 3);
}

#[test]
fn exclusion_replies_are_one_per_rank_per_timeout_with_bounded_memory() {
    let n = 1024;
    let mut e = engine(n, 4);
    let failed: Vec<Rank> = (100..300).collect();
    deliver_from(
        &mut e,
        at(1),
        900,
        &JOB.seal_numbered(&Encoder::new(KEY, 900).notice(900, 0, &failed, &[]), 1, 4),
    );
    // 200 ranks we hold failed each send twice within a timeout.
    let mut replies = 0;
    for round in 0..2u64 {
        for &r in &failed {
            let m = JOB.seal_numbered(&Encoder::new(KEY, r).probe(1, 4), round + 1, 4);
            replies += sends_of(&deliver_from(&mut e, at(10 + round), r, &m), Kind::Notice).len();
        }
    }
    assert_eq!(replies, 64, "at most 64 ranks remembered, once each");
    assert_eq!(e.stats().notices.exclusion_replies_suppressed, 400 - 64);
    // A timeout later the memory has room again.
    let m = JOB.seal_numbered(&Encoder::new(KEY, 299).probe(1, 4), 3, 4);
    assert_eq!(
        sends_of(&deliver_from(&mut e, at(200), 299, &m), Kind::Notice).len(),
        1
    );
}

/// Observer `ME` of a job of `N`: after mending `k` times its watched slot
/// is `k mod 512`, of generation `k`.
const N: u32 = 1024;
const ME: Rank = 1000;

/// Rank `ME`, its emitter declared failed `mendings` times over (each by a
/// notice naming the current emitter), slot checks seeing live beats in
/// between so that nobody is declared by timeout.
fn mended(mendings: u32) -> (Engine, Vec<Output>) {
    let mut e = drained(JOB.checker(support::config(QuorumMode::Off), N, ME));
    let mut last = Vec::new();
    for k in 0..mendings {
        let emitter = e.emitter().expect("an emitter");
        let m = JOB.seal_numbered(
            &Encoder::new(KEY, 10).notice(10, 0, &[emitter], &[]),
            u64::from(k) + 1,
            ME,
        );
        last = deliver_from(&mut e, at(1), 10, &m);
    }
    assert_eq!(e.generation(), mendings);
    // The last ObserveMe's send completed at once: the new emitter's
    // timeout runs from now (docs/design.md §4.4 "Mending", the mend clock).
    if let Some(emitter) = e.emitter() {
        e.handle(at(1), Input::Sent { to: emitter })
            .expect("a send completion");
        assert!(drain(&mut e).is_empty());
    }
    (e, last)
}

#[test]
fn a_mending_clears_the_new_slot_before_naming_it() {
    let (e, outs) = mended(1);
    let clear = outs
        .iter()
        .position(|o| matches!(o, Output::ClearSlot { slot: 1 }))
        .expect("the new slot is cleared");
    let observe_me = outs
        .iter()
        .position(|o| matches!(o, Output::Send { message, .. } if message.kind() == Some(Kind::ObserveMe)))
        .expect("the new emitter is named");
    assert!(clear < observe_me, "{outs:?}");
    assert_eq!(e.watched_slot(), Some(1));
}

/// Feeds the watched slot `value` at every deadline until `limit`;
/// returns the first `Failed` event about the emitter (if any) and its time.
fn watch(e: &mut Engine, value: impl Fn(Time) -> u64, limit: Time) -> Option<(Time, Cause)> {
    let emitter = e.emitter()?;
    serve_deadlines(
        e,
        limit,
        Duration::ZERO,
        slot_reading(value),
        |_, t, outs| {
            failures(&outs)
                .into_iter()
                .find(|&(rank, _)| rank == emitter)
                .map(|(_, cause)| (t, cause))
        },
    )
}

#[test]
fn a_leftover_of_the_generation_512_mendings_ago_is_no_heartbeat() {
    let (mut e, outs) = mended(u32::from(SLOTS));
    assert_eq!(e.watched_slot(), Some(0), "slot 0 comes round again");
    assert!(outs.contains(&Output::ClearSlot { slot: 0 }));
    // Slot 0 still holds (had the clear been lost) a value of generation
    // 0, changing even, as if its old writer were alive: it is not a beat
    // of this generation's emitter, which is declared one timeout on.
    let digest = fold_digest(e.digest());
    let leftover = |t: Time| slot_value(0, digest, (t.as_nanos() / 10_000_000) as u16 + 1);
    assert_eq!(slot_generation(leftover(at(5))), 0);
    let mended_at = at(1);
    let (when, cause) = watch(&mut e, leftover, at(1000)).expect("declared");
    assert_eq!(cause, Cause::Timeout);
    assert!(when - mended_at >= e.config().timeout, "{when}");
    assert!(e.stats().observation.foreign_slot_values > 0);
}

#[test]
fn a_value_of_a_replaced_emitter_is_no_heartbeat() {
    let (mut e, _) = mended(1);
    // The replaced emitter (generation 0) writing, moving, into the slot
    // of generation 1.
    let digest = fold_digest(e.digest());
    let replaced = |t: Time| slot_value(0, digest, (t.as_nanos() / 10_000_000) as u16 + 1);
    let (_, cause) = watch(&mut e, replaced, at(1000)).expect("declared");
    assert_eq!(cause, Cause::Timeout);
    // Whereas the new emitter's own beats keep it alive.
    let (mut e, _) = mended(1);
    let own = |t: Time| slot_value(1, digest, (t.as_nanos() / 10_000_000) as u16 + 1);
    assert_eq!(watch(&mut e, own, at(1000)), None);
    assert_eq!(e.stats().observation.foreign_slot_values, 0);
}

#[test]
fn a_zero_is_no_heartbeat() {
    let (mut e, _) = mended(1);
    let (when, cause) = watch(&mut e, |_| 0, at(1000)).expect("declared");
    assert_eq!(cause, Cause::Timeout);
    assert!(when - at(1) >= e.config().timeout);
    // A first beat of the right generation, then silence: declared a
    // timeout after the beat, not before.
    let (mut e, _) = mended(1);
    let digest = fold_digest(e.digest());
    let beat = slot_value(1, digest, 1);
    let (when, _) =
        watch(&mut e, |t| if t >= at(50) { beat } else { 0 }, at(1000)).expect("declared");
    assert!(when >= at(50) + e.config().timeout, "{when}");
}
