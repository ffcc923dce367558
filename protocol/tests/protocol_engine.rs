//! Engine behaviour, one input at a time: heartbeats, timeout detection,
//! mending (skips, wrap-around, all-but-one), ObserveMe staleness,
//! forward-once, exclusion, lag guard, in-band modes, sync, leave.
//! Payloads have their own file, `protocol_payloads.rs`.

mod support;

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use ffd_protocol::ranks::fold_digest;
use ffd_protocol::wire::{self, Encoder, JobKeys, Message, ProbeVerdict};
use ffd_protocol::{
    BcastKind, Cause, Engine, EngineConfig, EngineOptions, Event, Evidence, Exclusion, FabricSaid,
    FailureDetail, HandleError, InbandMode, Input, Kind, Output, Overlay, Participation,
    QuorumMode, Rank, RejectReason, Ring, SlotReading, Time, TransportErrorKind, slot_value,
};
use support::{
    Job, at, deliver_sealed, drain, drained, events, ms, readings, run_until, serve_deadlines,
    slot_reading, tick,
};

const KEY: u64 = 0xABCD_0123_4567_89EF;
const MESSAGE_KEY: [u8; 32] = [0x42; 32];
const JOB: Job = Job::new(KEY, MESSAGE_KEY);

/// These tests pin the declare-at-once behaviour, `FFD_QUORUM=off`
/// (the primary partition is tested in `engine_quorum.rs` and `sim_partition.rs`).
fn config() -> EngineConfig {
    support::config(QuorumMode::Off)
}

fn engine(n: u32, me: Rank) -> Engine {
    JOB.engine(config(), n, me)
}

fn checker(n: u32, me: Rank) -> Engine {
    JOB.checker(config(), n, me)
}

/// A notice a test peer `from` sends (unsealed).
fn notice(from: Rank, origin: Rank, failed: &[Rank], left: &[Rank]) -> Vec<u8> {
    Encoder::new(KEY, from).notice(origin, 0, failed, left)
}

/// A transport error on the link to `peer` that proves it gone, the
/// fabric saying nothing more.
fn transport_error(peer: Rank, kind: TransportErrorKind) -> Input<'static> {
    Input::TransportError {
        peer,
        kind,
        evidence: Evidence::Proof,
        said: FabricSaid::Nothing,
    }
}

/// Runs `e` with its emitter's slot frozen at `value` until it declares,
/// returning the outputs of the declaring tick and its time.
fn run_until_declared(e: &mut Engine, value: u64, limit: Time) -> (Time, Vec<Output>) {
    serve_deadlines(
        e,
        limit,
        Duration::ZERO,
        slot_reading(|_| value),
        |_, t, outs| {
            let declared = events(&outs).iter().any(|ev| {
                matches!(
                    ev,
                    Event::Failed {
                        cause: Cause::Timeout,
                        ..
                    }
                )
            });
            declared.then_some((t, outs))
        },
    )
    .unwrap_or_else(|| panic!("not declared by {limit}"))
}

#[test]
fn heartbeats_go_to_the_successor_every_period() {
    let mut e = engine(8, 3);
    let outs = drain(&mut e);
    assert_eq!(
        outs,
        vec![Output::WriteHeartbeat {
            to: 4,
            slot: 0,
            value: slot_value(0, 0, 1)
        }]
    );
    assert_eq!(e.next_deadline(), Some(at(10)));
    let outs = tick(&mut e, at(10), 0);
    assert_eq!(
        outs,
        vec![Output::WriteHeartbeat {
            to: 4,
            slot: 0,
            value: slot_value(0, 0, 2)
        }]
    );
    assert_eq!(
        (e.emitter(), e.observer(), e.watched_slot()),
        (Some(2), Some(4), Some(0))
    );
}

/// `handle_timeout` reads the watched slot exactly once per step, the one
/// `watched_slot` names (which moves with mending), and reads nothing when
/// there is no emitter.
#[test]
fn handle_timeout_reads_the_watched_slot_once_then_runs_the_timers() {
    let n = 16;
    let mut e = drained(checker(n, 5));
    let reads = &RefCell::new(Vec::new());
    let t = e.next_deadline().expect("a first check");
    let reading = |value: u64| {
        readings(
            move |slot| {
                reads.borrow_mut().push(slot);
                value
            },
            |_| None,
        )
    };
    e.handle_timeout(t, &reading(slot_value(0, 0, 1)));
    assert_eq!(reads.take(), vec![0]);
    assert_eq!(e.stats().observation.slot_checks, 1, "the due check ran");
    // After mending (emitter 4 reported failed), the step reads the new
    // generation's slot.
    JOB.deliver(&mut e, at(30), notice(9, 9, &[4], &[]));
    assert_eq!(e.watched_slot(), Some(1));
    let digest = fold_digest(e.digest());
    let t = e.next_deadline().expect("a check after mending");
    e.handle_timeout(t, &reading(slot_value(1, digest, 1)));
    assert_eq!(reads.take(), vec![1]);
    // A step before any deadline reads the slot but runs no timer.
    let checks = e.stats().observation.slot_checks;
    e.handle_timeout(t, &SlotReading(slot_value(1, digest, 2)));
    assert_eq!(e.stats().observation.slot_checks, checks);
    assert_eq!(e.stats().observation.foreign_slot_values, 0);
    // Alone in the job: no emitter, nothing to read.
    let mut alone = drained(engine(1, 0));
    assert_eq!(alone.watched_slot(), None);
    let no_emitter = readings(
        |slot| panic!("read slot {slot} without an emitter"),
        |_| None,
    );
    alone.handle_timeout(at(50), &no_emitter);
    assert!(drain(&mut alone).is_empty());
}

#[test]
fn modelled_heartbeats_wake_at_the_timeout_scale() {
    let mut e = checker(8, 3);
    let outs = drain(&mut e);
    assert_eq!(
        outs,
        vec![Output::HeartbeatStream {
            to: Some(4),
            slot: 0,
            generation: 0,
            digest: 0
        }]
    );
    // Checks every timeout/4 from the start (the grace only protects an
    // emitter never heard from).
    assert_eq!(e.next_deadline(), Some(at(25)));
    let mut t = at(25);
    for beat in 1..=8u16 {
        assert!(tick(&mut e, t, slot_value(0, 0, beat)).is_empty());
        let next = e.next_deadline().unwrap();
        assert_eq!(next - t, ms(25));
        t = next;
    }
}

#[test]
fn timeout_declares_mends_and_broadcasts() {
    let n = 16;
    let mut e = drained(checker(n, 5));
    let (t, outs) = run_until_declared(&mut e, slot_value(0, 0, 7), at(1000));
    // The one beat is seen at the first check (25); it never changes again:
    // declared one timeout (100) later, at check-interval granularity.
    assert!(t >= at(125) && t <= at(150), "declared at {t}");
    assert!(events(&outs).contains(&Event::Failed {
        rank: 4,
        detector: 5,
        cause: Cause::Timeout,
        hops: 0,
        detail: FailureDetail::Silence {
            said: FabricSaid::Nothing,
            quorum: None,
        },
    }));
    // The notice goes over the overlay (tree links first, from this rank
    // as root), never to the failed rank; then the failed rank is told
    // directly, last: nobody waits for that copy.
    let mut notices = JOB.sent_to(&outs, n, Kind::Notice);
    assert_eq!(notices.pop(), Some(4));
    let overlay = Overlay::new(BcastKind::Bmg, n);
    let mut expect: Vec<Rank> = {
        let mut buf = [0; ffd_protocol::overlay::MAX_LINKS];
        let len = overlay.send_order(5, 5, &mut buf);
        buf[..len].to_vec()
    };
    expect.retain(|&r| r != 4);
    assert_eq!(notices, expect);
    // Mending: ObserveMe to the next predecessor, new generation and slot.
    assert_eq!(JOB.sent_to(&outs, n, Kind::ObserveMe), vec![3]);
    assert_eq!(
        (e.emitter(), e.generation(), e.watched_slot()),
        (Some(3), 1, Some(1))
    );
    assert_eq!(e.stats().detections_by(Cause::Timeout), 1);
    assert_eq!(e.epoch(), 1);
}

#[test]
fn mending_skips_known_failures_and_wraps_around() {
    let n = 10;
    let mut e = drained(checker(n, 1));
    // Others reported 9 and 8 (behind 0 across the wrap).
    JOB.deliver(&mut e, at(1), notice(5, 5, &[8, 9], &[]));
    assert_eq!(e.emitter(), Some(0));
    // Now 0 fails: the next live predecessor is 7.
    let outs = JOB.deliver(&mut e, at(2), notice(5, 5, &[0], &[]));
    assert_eq!(JOB.sent_to(&outs, n, Kind::ObserveMe), vec![7]);
    assert_eq!(e.emitter(), Some(7));
    // The post-mending grace: nothing is declared for one timeout.
    let mut t = at(2);
    let mut declared_at = None;
    for _ in 0..100 {
        t = e.next_deadline().unwrap();
        let checks = e.stats().observation.slot_checks;
        let outs = tick(&mut e, t, 0);
        if events(&outs)
            .iter()
            .any(|ev| matches!(ev, Event::Failed { rank: 7, .. }))
        {
            declared_at = Some(t);
            break;
        }
        // While no beat arrives, ObserveMe is re-sent at each check (the
        // other wake-ups here start view changes).
        if e.stats().observation.slot_checks > checks {
            assert_eq!(JOB.sent_to(&outs, n, Kind::ObserveMe), vec![7]);
        } else {
            assert_eq!(JOB.sent_to(&outs, n, Kind::ObserveMe), Vec::<Rank>::new());
        }
    }
    let declared_at = declared_at.expect("7 declared");
    assert!(declared_at >= at(102), "grace respected: {declared_at} {t}");
    assert_eq!(e.emitter(), Some(6));
}

#[test]
fn all_but_one_failed_ends_with_no_emitter() {
    let n = 7;
    let mut e = drained(engine(n, 3));
    let others: Vec<Rank> = (0..n).filter(|&r| r != 3).collect();
    let outs = JOB.deliver(&mut e, at(1), notice(2, 2, &others[1..], &[]));
    assert!(!outs.is_empty());
    // The last other rank, the emitter candidate, fails too.
    let outs = JOB.deliver(&mut e, at(2), notice(others[0], others[0], &[], &[]));
    assert!(
        JOB.sent_kinds(&outs, n).is_empty(),
        "a duplicate-free empty notice changes nothing"
    );
    let mut e2 = drained(engine(n, 3));
    JOB.deliver(&mut e2, at(1), notice(2, 2, &others, &[]));
    assert_eq!(
        (e2.emitter(), e2.observer(), e2.watched_slot()),
        (None, None, None)
    );
    assert_eq!(e2.epoch(), 6);
    assert_eq!(e2.participation(), Participation::Active);
    // Ticks keep working and produce nothing but, once, the view naming
    // the six others (this rank alone decides it).
    let mut outs = Vec::new();
    for _ in 0..5 {
        match e2.next_deadline() {
            Some(t) => outs.extend(tick(&mut e2, t, 0)),
            None => break,
        }
    }
    assert_eq!(
        outs,
        vec![Output::Event(Event::ViewChange {
            id: 1,
            failed: others.clone(),
            hops: 0
        })]
    );
}

#[test]
fn observe_me_switches_the_target_and_rejects_stale_requests() {
    let n = 10;
    let mut e = drained(engine(n, 2));
    assert_eq!(e.heartbeat_target(), Some((3, 0)));
    // 4 took over (3 is gone in its view): farther than 3, accepted; write at once.
    let outs = JOB.deliver(&mut e, at(5), Encoder::new(KEY, 4).observe_me(1, 1));
    assert_eq!(
        outs,
        vec![Output::WriteHeartbeat {
            to: 4,
            slot: 1,
            value: slot_value(1, 0, 2)
        }],
        "the beat carries the generation 4 named"
    );
    assert_eq!(e.heartbeat_target(), Some((4, 1)));
    // A late request from 3 (nearer than 4) is stale.
    assert!(
        JOB.deliver(&mut e, at(6), Encoder::new(KEY, 3).observe_me(5, 5))
            .is_empty()
    );
    // An older generation from the current observer is stale too.
    assert!(
        JOB.deliver(&mut e, at(7), Encoder::new(KEY, 4).observe_me(0, 0))
            .is_empty()
    );
    assert_eq!(e.heartbeat_target(), Some((4, 1)));
    assert_eq!(e.stats().observation.observe_me_stale, 2);
    // A repeated request (same generation) is answered with a write.
    let outs = JOB.deliver(&mut e, at(8), Encoder::new(KEY, 4).observe_me(1, 1));
    assert!(matches!(
        outs[..],
        [Output::WriteHeartbeat { to: 4, slot: 1, .. }]
    ));
    // Across the wrap: 0 is farther from 2 than 4 is.
    JOB.deliver(&mut e, at(9), Encoder::new(KEY, 0).observe_me(3, 3));
    assert_eq!(e.heartbeat_target(), Some((0, 3)));
}

/// A forwarder sends a failure notice at once only to its overlay links
/// that are not the origin's: the origin sent it to every one of its own
/// as it declared. Its copies to the origin's links go a period later
/// (a link the origin did not reach still learns), none to the origin.
#[test]
fn a_forwarders_copies_to_the_origins_links_go_a_period_later() {
    let n = 32;
    let overlay = Overlay::new(BcastKind::Bmg, n);
    let (origin, sender, me) = (26, 27, 10);
    let origin_links = overlay.neighbours(origin);
    let mut e = drained(engine(n, me));
    let outs = JOB.deliver(&mut e, at(1), notice(sender, origin, &[11], &[]));
    let at_once = JOB.sent_to(&outs, n, Kind::Notice);
    assert!(!at_once.is_empty(), "{outs:?}");
    assert!(
        at_once.iter().all(|r| !origin_links.contains(r)),
        "at once, only to links the origin does not have: {at_once:?} (its: {origin_links:?})"
    );
    // Nothing more before the period is up...
    let alive = || slot_reading(|_| 0);
    let early = run_until(&mut e, at(10), alive());
    assert!(JOB.sent_to(&early, n, Kind::Notice).is_empty(), "{early:?}");
    assert_eq!(e.stats().notices.origin_copies_released, 0);
    // ...then the held copies, to the origin's links only.
    let later = JOB.sent_to(&run_until(&mut e, at(12), alive()), n, Kind::Notice);
    assert!(
        !later.is_empty() && later.iter().all(|r| origin_links.contains(r)),
        "{later:?} (the origin's links: {origin_links:?})"
    );
    assert_eq!(e.stats().notices.origin_copies_released, 1);
    // Together: every link of this rank but the sender, the origin and
    // the failed rank, once.
    let mut all: Vec<Rank> = at_once.iter().chain(&later).copied().collect();
    all.sort_unstable();
    let expected: Vec<Rank> = overlay
        .neighbours(me)
        .into_iter()
        .filter(|r| ![sender, origin, 11].contains(r))
        .collect();
    assert_eq!(all, expected);
}

#[test]
fn notices_are_forwarded_once_and_never_to_failed_ranks() {
    let n = 32;
    let mut e = drained(engine(n, 10));
    let m = JOB.seal(&Encoder::new(KEY, 26).notice(26, 0, &[11, 20], &[]), 10);
    let outs = deliver_sealed(&mut e, at(1), &m);
    let targets = JOB.sent_to(&outs, n, Kind::Notice);
    assert!(!targets.is_empty());
    assert!(
        !targets.contains(&11) && !targets.contains(&20),
        "never to known-failed ranks"
    );
    assert!(!targets.contains(&26), "not back to the sender");
    let mut sorted = targets.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), targets.len(), "each link once");
    // The forwarded copy keeps the origin and counts a hop.
    let (_, h, Message::Notice(fwd)) = JOB.sent(&outs, n)[0] else {
        panic!()
    };
    assert_eq!((h.sender, fwd.origin, fwd.hops), (10, 26, 1));
    // The same bytes again are a replay, dropped before anything reads them.
    assert_eq!(
        e.handle(
            at(2),
            Input::Message {
                from: None,
                bytes: &m
            }
        ),
        Err(HandleError::Rejected(RejectReason::Replayed))
    );
    // The same news again (a new message), or a subset, is not forwarded.
    let again = notice(26, 26, &[11, 20], &[]);
    assert!(
        JOB.sent_kinds(&JOB.deliver(&mut e, at(2), &again), n)
            .is_empty()
    );
    assert!(
        JOB.sent_kinds(&JOB.deliver(&mut e, at(3), notice(3, 3, &[20], &[])), n)
            .is_empty()
    );
    assert_eq!(e.stats().messages.duplicate_notices, 2);
    assert_eq!(e.stats().notices.notices_forwarded, 1);
    // Events name the origin as detector, with the hop count.
    let e2 = events(&outs);
    assert!(e2.contains(&Event::Failed {
        rank: 11,
        detector: 26,
        cause: Cause::Notice,
        hops: 1,
        detail: FailureDetail::Learned,
    }));
    // The emitter (9) is alive; 11 was the observer: heartbeats stop until
    // 12 (11's observer) mends to us.
    assert_eq!(e.observer(), None);
    JOB.deliver(&mut e, at(4), Encoder::new(KEY, 12).observe_me(1, 1));
    assert_eq!(e.heartbeat_target(), Some((12, 1)));
}

#[test]
fn a_notice_naming_me_excludes_me_for_good() {
    let n = 8;
    let mut e = drained(engine(n, 4));
    let outs = JOB.deliver(&mut e, at(1), notice(5, 5, &[4], &[]));
    assert_eq!(
        events(&outs),
        vec![Event::SelfExcluded {
            by: 5,
            why: Exclusion::Named
        }]
    );
    assert_eq!(e.participation(), Participation::Excluded);
    assert_eq!(e.next_deadline(), None);
    assert!(
        JOB.deliver(&mut e, at(2), notice(5, 5, &[1], &[]))
            .is_empty()
    );
    assert!(tick(&mut e, at(500), 0).is_empty());
    assert_eq!(
        e.handle(at(3), Input::Broadcast(b"x")),
        Err(HandleError::NotActive)
    );
    assert!(e.failed().is_empty(), "nothing learned after exclusion");
}

#[test]
fn messages_from_failed_ranks_are_answered_with_an_exclusion_rate_limited() {
    let n = 8;
    let mut e = drained(engine(n, 4));
    JOB.deliver(&mut e, at(1), notice(6, 6, &[2], &[]));
    // 2 (failed here) sends a notice about 3: dropped, answered.
    let outs = JOB.deliver(&mut e, at(2), notice(2, 2, &[3], &[]));
    assert_eq!(JOB.sent_kinds(&outs, n), vec![(2, Kind::Notice)]);
    let (_, _, Message::Notice(x)) = JOB.sent(&outs[..1], n)[0] else {
        panic!()
    };
    assert_eq!(x.failed.to_vec(), vec![2]);
    assert!(!e.is_failed(3));
    // Within a timeout: no second answer.
    assert!(
        JOB.deliver(
            &mut e,
            at(50),
            Encoder::new(KEY, 2).sync_request(0, &[], &[])
        )
        .is_empty()
    );
    assert_eq!(
        JOB.sent_kinds(&JOB.deliver(&mut e, at(200), notice(2, 2, &[3], &[])), n),
        vec![(2, Kind::Notice)]
    );
    // A notice forwarded by a live rank but originated by a failed one is not trusted.
    assert!(
        JOB.deliver(&mut e, at(201), notice(6, 2, &[3, 4], &[]))
            .is_empty()
    );
    assert!(!e.is_failed(3));
    assert_eq!(
        e.participation(),
        Participation::Active,
        "an untrusted origin cannot exclude us"
    );
    assert_eq!(e.stats().drops.dropped_untrusted_origin, 1);
}

#[test]
fn the_lag_guard_declares_nobody_and_checks_our_standing() {
    let n = 8;
    let mut e = drained(checker(n, 4));
    let v = slot_value(0, 0, 3);
    let t = e.next_deadline().unwrap();
    tick(&mut e, t, v);
    // The thread stalls for 10 s (SIGSTOP) and wakes with the slot unchanged.
    let late = at(10_000);
    let outs = tick(&mut e, late, v);
    assert!(
        events(&outs).is_empty(),
        "nobody declared on a late wake-up"
    );
    assert_eq!(e.stats().health.self_lag_trips, 1);
    let mut asked = JOB.sent_to(&outs, n, Kind::SyncRequest);
    asked.sort_unstable();
    assert_eq!(
        asked,
        vec![3, 5],
        "standing checked with emitter and observer"
    );
    // The answer names us: excluded before any false declaration.
    let outs = JOB.deliver(&mut e, late + ms(1), notice(3, 3, &[4], &[]));
    assert_eq!(
        events(&outs),
        vec![Event::SelfExcluded {
            by: 3,
            why: Exclusion::Named
        }]
    );

    // Had nobody excluded us, the emitter gets a full timeout from the wake-up.
    let mut e = drained(checker(n, 4));
    let first = e.next_deadline().unwrap();
    tick(&mut e, first, v);
    tick(&mut e, late, v);
    let (t, _) = run_until_declared(&mut e, v, late + ms(1000));
    assert!(
        t >= late + ms(100),
        "declared at {t}, too soon after waking"
    );
}

#[test]
fn inband_declare_off_and_departed_peers() {
    let n = 8;
    let mut e = drained(engine(n, 4));
    // An error towards a distant peer is not evidence.
    e.handle(at(1), transport_error(0, TransportErrorKind::Send))
        .unwrap();
    assert!(drain(&mut e).is_empty());
    // Towards the observer: declared at once.
    e.handle(
        at(2),
        transport_error(5, TransportErrorKind::HeartbeatWrite),
    )
    .unwrap();
    let outs = drain(&mut e);
    assert!(events(&outs).contains(&Event::Failed {
        rank: 5,
        detector: 4,
        cause: Cause::InBand,
        hops: 0,
        detail: FailureDetail::Proof {
            said: FabricSaid::Nothing,
        },
    }));
    // Again (the peer is known failed now): ignored.
    e.handle(at(3), transport_error(5, TransportErrorKind::Send))
        .unwrap();
    assert!(drain(&mut e).is_empty());
    assert_eq!(e.stats().observation.transport_errors_ignored, 2);

    let mut off = drained(JOB.engine(
        EngineConfig {
            inband: InbandMode::Off,
            ..config()
        },
        n,
        4,
    ));
    off.handle(at(2), transport_error(5, TransportErrorKind::Unreachable))
        .unwrap();
    assert!(drain(&mut off).is_empty());
    assert!(off.failed().is_empty());

    // The emitter's link failing is evidence too (e.g. ObserveMe send failed).
    let mut e = drained(engine(n, 4));
    e.handle(at(2), transport_error(3, TransportErrorKind::Send))
        .unwrap();
    let outs = drain(&mut e);
    assert!(events(&outs).contains(&Event::Failed {
        rank: 3,
        detector: 4,
        cause: Cause::InBand,
        hops: 0,
        detail: FailureDetail::Proof {
            said: FabricSaid::Nothing,
        },
    }));
    assert_eq!(JOB.sent_to(&outs, n, Kind::ObserveMe), vec![2]);
}

#[test]
fn inband_suspect_probes_before_declaring() {
    let n = 8;
    let cfg = EngineConfig {
        inband: InbandMode::Suspect,
        ..config()
    };
    let mut e = drained(JOB.checker(cfg.clone(), n, 4));
    e.handle(
        at(10),
        transport_error(5, TransportErrorKind::HeartbeatWrite),
    )
    .unwrap();
    let outs = drain(&mut e);
    assert!(events(&outs).is_empty());
    let mut probed = JOB.sent_to(&outs, n, Kind::Probe);
    probed.sort_unstable();
    assert_eq!(probed, vec![5, 6], "the suspect and its observer");
    // The suspect's observer vouches for it: cleared.
    let (_, _, Message::Probe { nonce, about }) = JOB.sent(&outs[..1], n)[0] else {
        panic!()
    };
    JOB.deliver(
        &mut e,
        at(11),
        Encoder::new(KEY, 6).probe_ack(nonce, about, ProbeVerdict::Alive),
    );
    assert_eq!(e.stats().observation.suspicions_cleared, 1);
    let t = e.next_deadline().unwrap();
    assert!(events(&tick(&mut e, t.max(at(100)), slot_value(0, 0, 1))).is_empty());

    // No answer within suspect_timeout: declared (in-band).
    let mut e = drained(JOB.checker(cfg, n, 4));
    e.handle(
        at(10),
        transport_error(5, TransportErrorKind::HeartbeatWrite),
    )
    .unwrap();
    drain(&mut e);
    // The suspect's time (10 + 50) is up by 60; a slot check may come first.
    assert!(e.next_deadline().unwrap() <= at(60));
    let outs = tick(&mut e, at(60), 0);
    assert!(events(&outs).contains(&Event::Failed {
        rank: 5,
        detector: 4,
        cause: Cause::InBand,
        hops: 0,
        detail: FailureDetail::Silence {
            said: FabricSaid::Nothing,
            quorum: None,
        },
    }));
}

#[test]
fn a_probe_about_my_emitter_is_answered_by_its_next_beat() {
    let n = 8;
    let mut e = drained(checker(n, 4));
    let t = e.next_deadline().unwrap();
    tick(&mut e, t, slot_value(0, 0, 1));
    // A probe about our emitter (3): no answer until a beat written after it.
    assert!(
        JOB.deliver(&mut e, t + ms(1), Encoder::new(KEY, 2).probe(9, 3))
            .is_empty()
    );
    let soon = e.next_deadline().unwrap();
    assert!(
        soon <= t + ms(11),
        "checks the slot within a period: {soon}"
    );
    assert!(
        tick(&mut e, soon, slot_value(0, 0, 1)).is_empty(),
        "slot unchanged: still no answer"
    );
    let next = e.next_deadline().unwrap();
    let outs = tick(&mut e, next, slot_value(0, 0, 2));
    assert!(matches!(
        JOB.sent(&outs[..1], n)[..],
        [(
            2,
            _,
            Message::ProbeAck {
                nonce: 9,
                about: 3,
                verdict: ProbeVerdict::Alive
            }
        )]
    ));
    // After half a timeout of stillness, the answer is immediate: silent.
    let still = next + ms(60);
    let outs = JOB.deliver(&mut e, still, Encoder::new(KEY, 2).probe(10, 3));
    assert!(matches!(
        JOB.sent(&outs[..1], n)[..],
        [(
            _,
            _,
            Message::ProbeAck {
                verdict: ProbeVerdict::Silent,
                ..
            }
        )]
    ));
    // About someone else: unknown.
    let outs = JOB.deliver(&mut e, still, Encoder::new(KEY, 2).probe(11, 6));
    assert!(matches!(
        JOB.sent(&outs[..1], n)[..],
        [(
            _,
            _,
            Message::ProbeAck {
                verdict: ProbeVerdict::Unknown,
                ..
            }
        )]
    ));
}

#[test]
fn digest_mismatch_triggers_a_rate_limited_sync() {
    let n = 16;
    let mut e = drained(checker(n, 4));
    // The emitter knows of a failure (digest ≠ ours) that never reached us.
    let mut other = ffd_protocol::RankSet::new();
    other.insert(12);
    let theirs = ffd_protocol::ranks::fold_digest(other.digest());
    let mut t = e.next_deadline().unwrap();
    let first_check = t;
    let mut requests = Vec::new();
    for beat in 1..=40u16 {
        let outs = tick(&mut e, t, slot_value(0, theirs, beat));
        if !JOB.sent_to(&outs, n, Kind::SyncRequest).is_empty() {
            requests.push(t);
        }
        t = e.next_deadline().unwrap();
    }
    assert!(requests.len() >= 2, "{requests:?}");
    assert!(
        requests[0] - first_check >= ms(50),
        "waits sync_after before asking"
    );
    assert!(
        requests[1] - requests[0] >= ms(100),
        "at most one per timeout"
    );
    // The reply fills the gap; the learned rank is re-broadcast as a notice.
    let outs = JOB.deliver(&mut e, t, Encoder::new(KEY, 3).sync_reply(&[12], &[]));
    assert!(e.is_failed(12));
    assert!(events(&outs).contains(&Event::Failed {
        rank: 12,
        detector: 3,
        cause: Cause::Notice,
        hops: 1,
        detail: FailureDetail::Learned,
    }));
    assert!(!JOB.sent_to(&outs, n, Kind::Notice).is_empty());
    assert_eq!(e.stats().sync.ranks_learned_by_sync, 1);
}

#[test]
fn a_sync_request_is_merged_and_answered_with_the_difference() {
    let n = 16;
    let mut e = drained(engine(n, 4));
    JOB.deliver(&mut e, at(1), notice(9, 9, &[7, 8], &[]));
    let outs = JOB.deliver(
        &mut e,
        at(2),
        Encoder::new(KEY, 5).sync_request(1, &[8, 13], &[]),
    );
    assert!(e.is_failed(13));
    let replies: Vec<_> = JOB
        .sent(&outs, n)
        .into_iter()
        .filter(|(_, header, _)| header.kind == Kind::SyncReply)
        .collect();
    assert_eq!(replies.len(), 1);
    let (to, _, Message::SyncReply { failed, left }) = replies[0] else {
        panic!()
    };
    assert_eq!(to, 5);
    assert_eq!((failed.to_vec(), left.to_vec()), (vec![7], vec![]));
}

#[test]
fn leave_is_announced_and_never_reported_as_a_failure() {
    let n = 8;
    let mut leaver = drained(engine(n, 4));
    leaver.handle(at(5), Input::Leave).unwrap();
    let outs = drain(&mut leaver);
    let targets = JOB.sent_to(&outs, n, Kind::Notice);
    assert_eq!(&targets[..2], &[5, 3], "ring neighbours first");
    assert_eq!(leaver.participation(), Participation::Left);
    let Output::Send { to: 5, message } = &outs[0] else {
        panic!()
    };
    let leave_notice = message.to_vec();
    // The leaver declares nobody, even after a long silence, and ignores errors.
    leaver
        .handle(
            at(6),
            transport_error(5, TransportErrorKind::HeartbeatWrite),
        )
        .unwrap();
    let mut t = at(6);
    for _ in 0..100 {
        t = leaver.next_deadline().unwrap();
        assert!(events(&tick(&mut leaver, t, 0)).is_empty());
    }
    assert!(t > at(500));

    // Its observer mends around it and reports Left.
    let mut obs = drained(engine(n, 5));
    let outs = deliver_sealed(&mut obs, at(6), &leave_notice);
    assert_eq!(events(&outs), vec![Event::Left { rank: 4 }]);
    assert_eq!(JOB.sent_to(&outs, n, Kind::ObserveMe), vec![3]);
    assert!(obs.failed().is_empty());
    // A failure notice about a rank known to have left does not make it failed.
    JOB.deliver(&mut obs, at(7), notice(1, 1, &[4], &[]));
    assert!(!obs.is_failed(4));
    // Transport errors about it are ignored.
    obs.handle(at(8), transport_error(4, TransportErrorKind::Send))
        .unwrap();
    assert!(drain(&mut obs).is_empty());
}

#[test]
fn a_slow_emitter_is_a_warning_not_a_failure() {
    let n = 8;
    let mut e = drained(checker(n, 4));
    let mut t = e.next_deadline().unwrap();
    let mut beat = 1;
    tick(&mut e, t, slot_value(0, 0, beat));
    // The slot stands still for 75 ms (< timeout), then moves.
    for _ in 0..3 {
        t = e.next_deadline().unwrap();
        assert!(events(&tick(&mut e, t, slot_value(0, 0, beat))).is_empty());
    }
    beat += 1;
    t = e.next_deadline().unwrap();
    let ev = events(&tick(&mut e, t, slot_value(0, 0, beat)));
    assert!(
        matches!(ev[..], [Event::SlowEmitter { rank: 3, stalled_for }] if stalled_for >= ms(75)),
        "{ev:?}"
    );
    assert!(e.failed().is_empty());
}

#[test]
fn bad_messages_are_rejected_and_counted() {
    let n = 8;
    let mut e = drained(engine(n, 4));
    let other_job = JobKeys::new(KEY ^ 1, MESSAGE_KEY);
    let wrong_key = wire::seal(&Encoder::new(KEY ^ 1, 3).observe_me(1, 1), 1, 4, &other_job);
    assert_eq!(
        e.handle(
            at(1),
            Input::Message {
                from: Some(3),
                bytes: &wrong_key
            }
        ),
        Err(HandleError::Rejected(RejectReason::WrongJobKey))
    );
    let from_self = JOB.seal(&Encoder::new(KEY, 4).observe_me(1, 1), 4);
    assert_eq!(
        e.handle(
            at(1),
            Input::Message {
                from: None,
                bytes: &from_self
            }
        ),
        Err(HandleError::Rejected(RejectReason::FromSelf))
    );
    assert_eq!(
        e.handle(
            at(1),
            Input::Message {
                from: None,
                bytes: b"hello"
            }
        ),
        Err(HandleError::Rejected(RejectReason::Truncated))
    );
    assert_eq!(
        e.stats().drops.rejected[RejectReason::WrongJobKey.index()],
        1
    );
    assert_eq!(e.stats().drops.rejected.iter().sum::<u64>(), 3);
    assert!(drain(&mut e).is_empty());
}

#[test]
fn engine_rejects_impossible_settings() {
    let ring = Arc::new(Ring::by_rank(4));
    assert!(
        Engine::new(
            Arc::new(config()),
            ring.clone(),
            4,
            JOB.keys(),
            Time::ZERO,
            EngineOptions::default(),
        )
        .is_err()
    );
    let bad = EngineConfig {
        timeout: ms(10),
        period: ms(10),
        ..config()
    };
    assert!(
        Engine::new(
            Arc::new(bad),
            ring,
            0,
            JOB.keys(),
            Time::ZERO,
            EngineOptions::default(),
        )
        .is_err()
    );
    // A job of one has nobody to watch.
    let mut alone = engine(1, 0);
    assert!(drain(&mut alone).is_empty());
    assert_eq!(alone.next_deadline(), None);
}

mod mending_properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// Whatever fails, in whatever order and however it is learned, the
        /// emitter is the nearest predecessor not known failed (None when
        /// alone), the observer request goes to it, and generations grow.
        #[test]
        fn emitter_is_the_nearest_live_predecessor(
            n in 2u32..40,
            me_seed in any::<u32>(),
            shuffle_seed in any::<u64>(),
            failures in proptest::collection::vec(any::<u32>(), 1..40),
            batch in 1usize..4,
        ) {
            let me = me_seed % n;
            let ring = Arc::new(Ring::shuffled(n, shuffle_seed));
            let mut e = Engine::new(Arc::new(config()), ring.clone(), me, JOB.keys(), Time::ZERO, EngineOptions::default()).unwrap();
            drain(&mut e);
            let mut failed: Vec<Rank> = Vec::new();
            let mut t = 1;
            let mut last_generation = e.generation();
            for chunk in failures.chunks(batch) {
                let mut names: Vec<Rank> = chunk.iter().map(|x| x % n).filter(|&r| r != me).collect();
                names.sort_unstable();
                names.dedup();
                // Told by any live rank other than us (or by a rank named in the notice).
                let from = (0..n).find(|r| *r != me && !failed.contains(r)).unwrap_or(names.first().copied().unwrap_or(me));
                if from == me || names.is_empty() {
                    continue;
                }
                let before = e.emitter();
                let outs = JOB.deliver(&mut e, at(t), notice(from, from, &names, &[]));
                t += 1;
                if failed.contains(&from) {
                    continue;
                }
                failed.extend(names.iter().copied());
                failed.sort_unstable();
                failed.dedup();
                let expect = ring.predecessors(me).find(|r| !failed.contains(r));
                prop_assert_eq!(e.emitter(), expect);
                prop_assert_eq!(e.watched_slot().is_some(), expect.is_some());
                if e.emitter() != before {
                    prop_assert!(e.generation() > last_generation);
                    last_generation = e.generation();
                    if let Some(x) = expect {
                        prop_assert_eq!(JOB.sent_to(&outs, n, Kind::ObserveMe), vec![x]);
                    }
                }
                // Forwarded notices never go to ranks known failed.
                for to in JOB.sent_to(&outs, n, Kind::Notice) {
                    prop_assert!(!failed.contains(&to), "notice to failed {}", to);
                }
            }
        }
    }
}
