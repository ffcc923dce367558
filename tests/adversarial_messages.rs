//! Adversarial messages against the real decoder and Engine:
//! an attacker who knows the job key (it travels in clear) but not the
//! job's secret, a replay of captured genuine bytes, a genuine message from
//! the wrong source address, a stale process of an earlier job, and the
//! four single messages that used to exclude a live rank, make it declare
//! live ranks, move its heartbeats, or block an origin's payloads. Each
//! is dropped before any handler reads it, counted by reason, and changes
//! nothing else: no event, no send, no change of the failed set, the
//! heartbeat target or the participation.
//!
//! `tests/runtime_adversarial.rs` sends the same kinds of messages to
//! running detectors over the fabric.

use std::sync::Arc;
use std::time::Duration;

use ffd::protocol::wire::{self, Encoder, HEADER_LEN, JobKeys, MAGIC, Sealed, TAG_LEN, VERSION};
use ffd::protocol::{
    Engine, EngineConfig, EngineOptions, Event, Evidence, FabricSaid, HandleError, InbandMode,
    Input, Kind, Output, Participation, Rank, RejectReason, Ring, Time, TransportErrorKind,
};

const N: u32 = 8;
/// The rank under attack: emitter 3, observer 5 on a ring by rank.
const ME: Rank = 4;
const JOB_KEY: u64 = 0x0B5E_55ED_0FFF_D0D0;

/// The job's keys: the job key, and the message key from a secret the
/// attacker does not hold.
fn keys() -> JobKeys {
    JobKeys::new(JOB_KEY, [0xA5; 32])
}

fn at(ms: u64) -> Time {
    Time::ZERO + Duration::from_millis(ms)
}

fn engine_of(me: Rank, keys: JobKeys) -> Engine {
    let config = EngineConfig {
        inband: InbandMode::Declare,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(
        Arc::new(config),
        Arc::new(Ring::by_rank(N)),
        me,
        keys,
        Time::ZERO,
        EngineOptions::default(),
    )
    .expect("valid engine");
    drain(&mut e);
    e
}

fn drain(e: &mut Engine) -> Vec<Output> {
    std::iter::from_fn(|| e.poll_output()).collect()
}

/// What an attacked rank must still be after a dropped message.
#[derive(Debug, PartialEq, Eq)]
struct Standing {
    participation: Participation,
    failed: Vec<Rank>,
    left: Vec<Rank>,
    heartbeat_target: Option<(Rank, u16)>,
    emitter: Option<Rank>,
    generation: u32,
}

fn standing(e: &Engine) -> Standing {
    Standing {
        participation: e.participation(),
        failed: e.failed().to_vec(),
        left: e.left().to_vec(),
        heartbeat_target: e.heartbeat_target(),
        emitter: e.emitter(),
        generation: e.generation(),
    }
}

/// Hands `bytes` to `e` as if from `from`; asserts they are dropped for
/// `reason`, counted once, and that nothing else happened.
fn assert_dropped(e: &mut Engine, from: Option<Rank>, bytes: &[u8], reason: RejectReason) {
    let before = standing(e);
    let stats_before = e.stats().clone();
    assert_eq!(
        e.handle(at(5), Input::Message { from, bytes }),
        Err(HandleError::Rejected(reason))
    );
    assert_eq!(drain(e), vec![], "a dropped message draws no output");
    assert_eq!(standing(e), before, "a dropped message changes nothing");
    let mut expected = stats_before;
    expected.drops.rejected[reason.index()] += 1;
    assert_eq!(
        e.stats(),
        &expected,
        "only the {} counter moved",
        reason.as_str()
    );
}

/// An attacker's message: right job key, any header and body, and a tag
/// it cannot compute (zeros, or one made with a guessed secret).
fn forged(unsealed: &[u8], guessed_secret: Option<[u8; 32]>) -> Vec<u8> {
    match guessed_secret {
        Some(secret) => wire::seal(unsealed, 1, ME, &JobKeys::new(JOB_KEY, secret)),
        None => {
            let mut m = unsealed.to_vec();
            m[24..32].copy_from_slice(&1u64.to_le_bytes());
            m.extend_from_slice(&[0u8; TAG_LEN]);
            m
        }
    }
}

fn events(outs: &[Output]) -> Vec<Event> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Event(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

/// The sealed copies `outs` send to `to`.
fn sent_to(outs: &[Output], to: Rank) -> Vec<Sealed> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Send { to: t, message } if *t == to => Some(message.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_forged_notice_naming_the_receiver_is_dropped_as_a_bad_tag() {
    let mut e = engine_of(ME, keys());
    let notice = Encoder::new(JOB_KEY, 6).notice(6, 0, &[ME], &[]);
    for guess in [None, Some([0u8; 32]), Some([0xA4; 32])] {
        assert_dropped(
            &mut e,
            Some(6),
            &forged(&notice, guess),
            RejectReason::BadMac,
        );
    }
    assert_eq!(e.stats().drops.rejected[RejectReason::BadMac.index()], 3);
    assert_eq!(e.participation(), Participation::Active, "no SelfExcluded");
}

/// A genuine notice (rank 6 declared rank 7 and tells us) captured and
/// sent again: the first copy is news, the replay is dropped unread.
#[test]
fn a_replayed_genuine_notice_is_dropped() {
    let mut declarer = engine_of(6, keys());
    declarer
        .handle(
            at(1),
            Input::TransportError {
                peer: 7,
                kind: TransportErrorKind::HeartbeatWrite,
                evidence: Evidence::Proof,
                said: FabricSaid::Nothing,
            },
        )
        .unwrap();
    let outs = drain(&mut declarer);
    let copy = sent_to(&outs, ME)
        .pop()
        .expect("rank 6 tells rank 4")
        .to_vec();
    let mut e = engine_of(ME, keys());
    e.handle(
        at(2),
        Input::Message {
            from: Some(6),
            bytes: &copy,
        },
    )
    .expect("the genuine copy");
    let learned = events(&drain(&mut e));
    assert!(
        learned
            .iter()
            .any(|ev| matches!(ev, Event::Failed { rank: 7, .. })),
        "{learned:?}"
    );
    for _ in 0..3 {
        assert_dropped(&mut e, Some(6), &copy, RejectReason::Replayed);
    }
    // The same copy replayed to another rank: sealed for rank 4 only.
    let mut other = engine_of(2, keys());
    assert_dropped(&mut other, Some(6), &copy, RejectReason::BadMac);
}

/// A genuine message delivered with another rank as the transport's
/// source (a provider that reports sources): dropped, and its sequence
/// number is not burnt, so the same bytes from the right source count.
#[test]
fn a_genuine_message_from_the_wrong_source_is_dropped() {
    let mut observer = engine_of(5, keys());
    observer
        .handle(at(1), Input::Leave)
        .expect("rank 5 leaves and tells its neighbours");
    let leave = sent_to(&drain(&mut observer), ME).remove(0).to_vec();
    let mut e = engine_of(ME, keys());
    assert_dropped(&mut e, Some(2), &leave, RejectReason::SourceMismatch);
    assert_dropped(&mut e, Some(6), &leave, RejectReason::SourceMismatch);
    e.handle(
        at(6),
        Input::Message {
            from: Some(5),
            bytes: &leave,
        },
    )
    .expect("from its sender");
    assert!(events(&drain(&mut e)).contains(&Event::Left { rank: 5 }));
}

/// A process left over from an earlier job on the same addresses: its
/// messages carry the other job's key (dropped by the cheap filter), or,
/// had the job keys collided, the other job's secret (a bad tag).
#[test]
fn a_stale_process_of_an_earlier_job_is_dropped() {
    for (earlier, reason) in [
        (
            JobKeys::new(JOB_KEY ^ 0x5a, [0x11; 32]),
            RejectReason::WrongJobKey,
        ),
        (JobKeys::new(JOB_KEY, [0x11; 32]), RejectReason::BadMac),
    ] {
        // Rank 3 of the earlier job believes rank 4 failed and says so,
        // and asks rank 4 to heartbeat into its slot 9.
        let mut stale = engine_of(3, earlier.clone());
        stale
            .handle(
                at(1),
                Input::TransportError {
                    peer: ME,
                    kind: TransportErrorKind::Send,
                    evidence: Evidence::Proof,
                    said: FabricSaid::Nothing,
                },
            )
            .unwrap();
        let outs = drain(&mut stale);
        let copies = sent_to(&outs, ME);
        assert!(!copies.is_empty(), "the earlier job's rank 3 tells rank 4");
        let observe_me = wire::seal(
            &Encoder::new(earlier.job_key(), 3).observe_me(9, 9),
            99,
            ME,
            &earlier,
        );
        let mut e = engine_of(ME, keys());
        for copy in &copies {
            assert_dropped(&mut e, Some(3), &copy.to_vec(), reason);
        }
        assert_dropped(&mut e, Some(3), &observe_me, reason);
        assert_eq!(e.heartbeat_target(), Some((5, 0)));
    }
}

/// The four single-message attacks, each now dropped: a notice
/// naming the receiver, a 43-byte SyncRequest listing live ranks, a forged
/// ObserveMe, and a payload with sequence number u64::MAX.
#[test]
fn the_four_single_message_attacks_are_dropped() {
    let mut e = engine_of(ME, keys());

    // 1. A notice naming the receiver (above too): version 1 framing is
    // not spoken any more, version 2 needs the tag.
    let notice = Encoder::new(JOB_KEY, 6).notice(6, 0, &[ME], &[]);
    let v1_notice = v1_message(Kind::Notice, 6, &notice[HEADER_LEN..]);
    assert_dropped(&mut e, Some(6), &v1_notice, v1_reason(&v1_notice));
    assert_dropped(
        &mut e,
        Some(6),
        &forged(&notice, None),
        RejectReason::BadMac,
    );

    // 2. A SyncRequest of 43 bytes from the emitter, listing 7 live ranks
    // as failed: it used to make the receiver declare them and re-broadcast.
    let live: Vec<Rank> = (0..N).filter(|&r| r != ME).collect();
    let sync = Encoder::new(JOB_KEY, 3).sync_request(0, &live, &[]);
    // Version 1's body: the digest and the two lists (no payload marks).
    let mut v1_body = 0u64.to_le_bytes().to_vec();
    ffd::protocol::ranks::encode_rank_list(&live, &mut v1_body);
    ffd::protocol::ranks::encode_rank_list(&[], &mut v1_body);
    let v1_sync = v1_message(Kind::SyncRequest, 3, &v1_body);
    assert!(
        v1_sync.len() <= 43,
        "a request as small as the issue's 43 bytes"
    );
    assert_dropped(&mut e, Some(3), &v1_sync, v1_reason(&v1_sync));
    assert_dropped(&mut e, Some(3), &forged(&sync, None), RejectReason::BadMac);
    assert_dropped(
        &mut e,
        Some(3),
        &forged(&sync, Some([7; 32])),
        RejectReason::BadMac,
    );

    // 3. A forged ObserveMe from a rank farther along the ring than the
    // observer: it used to move our heartbeats away from the real one.
    let observe_me = Encoder::new(JOB_KEY, 7).observe_me(1, 1);
    assert_dropped(
        &mut e,
        Some(7),
        &forged(&observe_me, None),
        RejectReason::BadMac,
    );
    assert_eq!(e.heartbeat_target(), Some((5, 0)), "beats still go to 5");

    // 4. A payload of origin 2 with sequence number u64::MAX: it used to
    // make every later genuine payload of 2 a "duplicate".
    let payload = Encoder::new(JOB_KEY, 2).payload(2, u64::MAX, 0, b"block");
    assert_dropped(
        &mut e,
        Some(2),
        &forged(&payload, None),
        RejectReason::BadMac,
    );
    let genuine = wire::seal(
        &Encoder::new(JOB_KEY, 2).payload(2, 1, 0, b"revoke"),
        1,
        ME,
        &keys(),
    );
    e.handle(
        at(6),
        Input::Message {
            from: Some(2),
            bytes: &genuine,
        },
    )
    .expect("a genuine payload of rank 2");
    assert!(events(&drain(&mut e)).contains(&Event::Payload {
        origin: 2,
        seq: 1,
        bytes: b"revoke".to_vec()
    }));

    let rejected = |r: RejectReason| e.stats().drops.rejected[r.index()];
    assert_eq!(
        (
            rejected(RejectReason::BadVersion) + rejected(RejectReason::Truncated),
            rejected(RejectReason::BadMac)
        ),
        (2, 5)
    );
    assert!(e.failed().is_empty() && e.participation() == Participation::Active);
    let received = e.stats().messages.received;
    assert_eq!(
        (
            received.iter().sum::<u64>(),
            received[Kind::Payload.index()]
        ),
        (1, 1),
        "only the genuine payload was read"
    );
}

/// Why a version-1 message is dropped: shorter than any version-2 message
/// (a header and a tag), or of the wrong version.
fn v1_reason(bytes: &[u8]) -> RejectReason {
    if bytes.len() < wire::MIN_LEN {
        RejectReason::Truncated
    } else {
        RejectReason::BadVersion
    }
}

/// A message in version 1's framing (28-byte header, no sequence number,
/// no tag), as the attacks were written.
fn v1_message(kind: Kind, sender: Rank, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&MAGIC);
    m.push(1);
    m.push(kind as u8);
    m.extend_from_slice(&0u16.to_le_bytes());
    m.extend_from_slice(&JOB_KEY.to_le_bytes());
    m.extend_from_slice(&sender.to_le_bytes());
    m.extend_from_slice(&0u32.to_le_bytes());
    m.extend_from_slice(&(body.len() as u32).to_le_bytes());
    m.extend_from_slice(body);
    assert_ne!(VERSION, 1);
    assert!(m.len() < HEADER_LEN + body.len() + TAG_LEN);
    m
}
