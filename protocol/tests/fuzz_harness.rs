//! The fuzz harness of `examples/fuzz` (the stable fuzz command of docs/testing.md)
//! in `cargo test`: a short seeded run must raise no panic and break no
//! invariant while reaching the protocol's interesting states; the same
//! seed gives the same counts; a recorded episode replays identically; and
//! the checks do catch what they forbid.

use std::path::PathBuf;
use std::sync::Arc;

// The harness the example and the cargo-fuzz targets run; each driver
// uses part of it.
#[allow(dead_code)]
#[path = "../examples/fuzz/harness/mod.rs"]
mod harness;

use ffd_protocol::wire::{self, Encoder, JobKeys, Sealed};
use ffd_protocol::{
    Cause, Engine, EngineConfig, EngineOptions, Event, FabricSaid, FailureDetail, HandleError,
    Output, RejectReason, Ring, Time, View,
};
use harness::check::{Call, EngineCheck, Step, Violation, Violations, decode_round_trip};
use harness::dice::Dice;
use harness::report::{Column, Tally};
use harness::{Options, episode};

fn options(inputs: u64, seed: u64) -> Options {
    Options {
        inputs,
        seed,
        save_dir: PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fuzz-panics"),
    }
}

fn verdict(tally: &Tally) -> String {
    format!(
        "{}\npanics: {:?}\nviolations: {:?}",
        tally.table("fuzz_harness"),
        tally.panic_notes,
        tally.violations.first
    )
}

#[test]
fn twenty_thousand_inputs_raise_no_panic_and_break_no_invariant() {
    let tally = harness::run(&options(20_000, 10));
    assert!(tally.inputs() >= 20_000);
    assert_eq!(tally.panics(), 0, "{}", verdict(&tally));
    assert_eq!(tally.violations.total(), 0, "{}", verdict(&tally));
    // It went deep: messages were accepted by Engines and by the decoder,
    // and refused for the reasons an attacker or a fault provokes.
    let engine = Column::Engine as usize;
    assert!(tally.counts.accepted[engine] > 1_000, "{}", verdict(&tally));
    assert!(
        tally.counts.accepted[Column::Decoder as usize] > 100,
        "{}",
        verdict(&tally)
    );
    for reason in [
        RejectReason::Truncated,
        RejectReason::WrongJobKey,
        RejectReason::BadMac,
        RejectReason::RankOutOfRange,
        RejectReason::Malformed,
        RejectReason::FromSelf,
        RejectReason::SourceMismatch,
        RejectReason::Replayed,
    ] {
        assert!(
            tally.counts.rejected[reason.index()][engine] > 0,
            "no input was rejected as {}: {}",
            reason.as_str(),
            verdict(&tally)
        );
    }
    for reached in [
        "Failed event",
        "Left event",
        "Payload event",
        "SelfExcluded event",
        "ViewChange event",
        "Agreed event",
        "crash",
    ] {
        assert!(
            tally.counts.reached.get(reached).is_some_and(|&x| x > 0),
            "no episode reached a {reached}: {}",
            verdict(&tally)
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_counts() {
    let a = harness::run(&options(3_000, 77));
    let b = harness::run(&options(3_000, 77));
    let c = harness::run(&options(3_000, 78));
    assert_eq!(a.counts, b.counts);
    assert_eq!(a.violations, b.violations);
    assert_ne!(a.counts, c.counts, "another seed, other inputs");
}

#[test]
fn a_recorded_episode_replays_identically() {
    for seed in [3, 4] {
        let mut dice = Dice::seeded(seed);
        let mut first = Tally::default();
        episode::run(&mut dice, &mut first, u64::MAX);
        first.counts.episodes = 1;
        assert!(first.inputs() > 0);
        let again = harness::replay(dice.recorded());
        assert_eq!(first.counts, again.counts, "seed {seed}");
        assert_eq!(again.panics(), 0);
    }
}

const KEY: u64 = 0x0F0F_0000_0000_0007;

fn keys() -> JobKeys {
    JobKeys::new(KEY, [9; 32])
}

fn step(call: Call, now: Time, deadline_before: Option<Time>) -> Step {
    Step {
        call,
        now,
        deadline_before,
    }
}

/// Rank 0 of 4, and its check, after its first outputs.
fn engine_and_check() -> (Engine, EngineCheck) {
    let mut e = Engine::new(
        Arc::new(EngineConfig::default()),
        Arc::new(Ring::by_rank(4)),
        0,
        keys(),
        Time::ZERO,
        EngineOptions::default(),
    )
    .expect("an engine");
    let mut check = EngineCheck::new(&e);
    let outputs: Vec<Output> = std::iter::from_fn(|| e.poll_output()).collect();
    let mut v = Violations::default();
    check.after(
        &e,
        &keys(),
        step(Call::New, Time::ZERO, None),
        &outputs,
        &mut v,
    );
    assert_eq!(v.total(), 0, "{:?}", v.first);
    (e, check)
}

#[test]
fn the_checks_catch_what_they_forbid() {
    let (e, mut check) = engine_and_check();
    let notice = |to| {
        Sealed::new(
            Encoder::new(KEY, 0).notice(0, 0, &[2], &[]).into(),
            1,
            to,
            &keys(),
        )
    };
    let failed = |rank| {
        Output::Event(Event::Failed {
            rank,
            detector: 0,
            cause: Cause::Timeout,
            hops: 0,
            detail: FailureDetail::Silence {
                said: FabricSaid::Nothing,
                quorum: None,
            },
        })
    };
    let forged = [
        Output::Send {
            to: 0,
            message: notice(0),
        },
        Output::Send {
            to: 9,
            message: notice(9),
        },
        Output::Send {
            to: 1,
            message: notice(3), // sealed for another rank
        },
        Output::WriteHeartbeat {
            to: 1,
            slot: 512,
            value: 1,
        },
        failed(0),
        failed(2),
        failed(2),
    ];
    let mut v = Violations::default();
    let now = Time::from_nanos(5);
    check.after(&e, &keys(), step(Call::Handle, now, None), &forged, &mut v);
    assert_eq!(v.count(Violation::SendToSelf), 1, "{:?}", v.first);
    assert_eq!(v.count(Violation::SendOutOfRange), 2, "{:?}", v.first);
    assert_eq!(v.count(Violation::SendUndecodable), 1, "{:?}", v.first);
    assert_eq!(v.count(Violation::EventNamesSelf), 1, "{:?}", v.first);
    assert_eq!(v.count(Violation::ReportedTwice), 1, "{:?}", v.first);
    // The Engine itself never reported rank 2.
    assert_eq!(v.count(Violation::SetsDisagree), 1, "{:?}", v.first);

    // Messages "accepted" that must not be: a bad tag, a wrong source, a
    // sequence number already accepted.
    let mut v = Violations::default();
    let good = wire::seal(&Encoder::new(KEY, 1).probe(1, 2), 7, 0, &keys());
    let mut bad_tag = good.clone();
    *bad_tag.last_mut().unwrap() ^= 1;
    check.message_result(&keys(), Some(1), &good, &Ok(()), &mut v);
    check.message_result(&keys(), Some(1), &bad_tag, &Ok(()), &mut v);
    check.message_result(&keys(), Some(1), &good, &Ok(()), &mut v);
    check.message_result(&keys(), Some(3), &good, &Ok(()), &mut v);
    let rejected = Err(HandleError::Rejected(RejectReason::Replayed));
    check.message_result(&keys(), Some(1), &good, &rejected, &mut v);
    assert_eq!(
        v.count(Violation::UnauthenticatedAccepted),
        1,
        "{:?}",
        v.first
    );
    assert_eq!(v.count(Violation::ReplayAccepted), 2, "{:?}", v.first);
    assert_eq!(v.count(Violation::WrongSourceAccepted), 1, "{:?}", v.first);
    // And the Engine, which saw none of these, disagrees with the tally.
    check.at_end(&e, &mut v);
    assert_eq!(v.count(Violation::StatsDisagree), 1, "{:?}", v.first);

    // Views and agreements out of order: view 2 before view 1, a view
    // naming a rank never reported, a decision nobody called for.
    let mut v = Violations::default();
    let (e, mut check) = engine_and_check();
    let out_of_order = [
        Output::Event(Event::ViewChange {
            id: 2,
            failed: vec![],
            hops: 0,
        }),
        Output::Event(Event::ViewChange {
            id: 3,
            failed: vec![1],
            hops: 0,
        }),
        Output::Event(Event::Agreed {
            seq: 1,
            flags: 0,
            view: View {
                id: 0,
                failed: vec![],
            },
            hops: 0,
        }),
    ];
    check.after(
        &e,
        &keys(),
        step(Call::Handle, now, None),
        &out_of_order,
        &mut v,
    );
    assert_eq!(v.count(Violation::ViewsOutOfOrder), 3, "{:?}", v.first);

    // A deadline left at or before `now` by handle_timeout.
    let mut v = Violations::default();
    let (e, mut check) = engine_and_check();
    let late = e.next_deadline().expect("a deadline");
    check.after(
        &e,
        &keys(),
        step(Call::Timeout, late, Some(late)),
        &[],
        &mut v,
    );
    assert_eq!(
        v.count(Violation::DeadlineNotAfterTimeout),
        1,
        "{:?}",
        v.first
    );
}

#[test]
fn an_accepted_message_survives_the_round_trip() {
    let mut v = Violations::default();
    let m = Encoder::new(KEY, 1).sync_request(5, &[0, 2, 3], &[1]);
    let sealed = wire::seal(&m, 3, 2, &keys());
    assert_eq!(decode_round_trip(&sealed, &keys(), 2, 4, &mut v), Ok(()));
    assert_eq!(
        decode_round_trip(&sealed, &keys(), 1, 4, &mut v),
        Err(RejectReason::BadMac)
    );
    assert_eq!(v.total(), 0, "{:?}", v.first);
}
