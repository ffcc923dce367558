//! The model checker of `examples/model` in `cargo test`: short bounded
//! runs in which every safety property holds and every `sometimes`
//! property is reached (so none holds only because nothing happened), and
//! known bugs put back one at a time (the test-only `model-bugs` switches)
//! to show the checker finds each.
//!
//! The bug switches are process-wide: this file is its own test binary,
//! and one test runs every check in turn.

use std::collections::BTreeSet;

// The harness the command runs.
#[allow(dead_code)]
#[path = "../examples/model/harness/mod.rs"]
mod harness;

use ffd_protocol::model_bugs::{self, Bug};
use harness::job::Action;
use harness::props::Prop;
use harness::{Bounds, Report};

/// `ranks` ranks ticking over, with the faults and calls `with` allows.
fn bounds(ranks: u32, depth: u32, with: impl FnOnce(&mut Bounds)) -> Bounds {
    let mut b = Bounds::quiet(ranks, depth);
    b.skew = Some(1);
    with(&mut b);
    b
}

/// Short runs, each a few thousand states in a debug build: a crash and a
/// payload; a crash during an agreement; a partition; a stall, a loss, a
/// duplicate and a leave.
fn short_runs() -> Vec<Bounds> {
    vec![
        bounds(3, 5, |b| {
            b.faults = 1;
            b.broadcasts = 1;
        }),
        bounds(3, 7, |b| {
            b.faults = 1;
            b.agreements = 1;
        }),
        bounds(3, 6, |b| b.partitions = 1),
        // A liveness probe (refused by a crashed emitter, unanswered by a
        // stopped one or across a cut, greeted by a running one) beside a
        // crash, a stall and a partition.
        bounds(3, 5, |b| {
            b.faults = 1;
            b.stalls = 1;
            b.partitions = 1;
            b.probes = 1;
        }),
        bounds(3, 5, |b| {
            b.stalls = 1;
            b.losses = 1;
            b.duplicates = 1;
            b.leaves = 1;
            b.broadcasts = 1;
        }),
    ]
}

fn verdict(r: &Report) -> String {
    r.text()
}

/// Every safety property holds in every state of the short runs, each run
/// explores every state within its bounds, and between them they reach
/// every `sometimes` property.
fn all_hold_and_everything_is_reached() {
    model_bugs::set(&[]);
    let mut reached = BTreeSet::new();
    for b in short_runs() {
        let r = harness::run(&b);
        assert!(r.all_hold(), "{}", verdict(&r));
        assert!(r.exhaustive, "{}", verdict(&r));
        assert!(r.states > 100, "{}", verdict(&r));
        reached.extend(
            r.reached
                .iter()
                .filter(|(_, at)| at.is_some())
                .map(|(n, _)| *n),
        );
    }
    let all: BTreeSet<&str> = harness::SOMETIMES.iter().map(|(n, _)| *n).collect();
    assert_eq!(reached, all, "sometimes-properties never reached");
}

/// With `bugs` put back, the run within `b` breaks `prop`; without them,
/// the same run holds (`clean`: checked here; else by the command, whose
/// run of these bounds takes longer than a test should in a debug build).
fn finds(bugs: &[Bug], b: Bounds, prop: Prop, clean: bool) {
    model_bugs::set(bugs);
    let r = harness::run(&b);
    model_bugs::set(&[]);
    let broken = r.broken().map(|v| v.prop);
    let names: Vec<&str> = bugs.iter().map(|b| b.as_str()).collect();
    assert_eq!(broken, Some(prop), "{names:?}: {}", verdict(&r));
    if clean {
        let clean = harness::run(&b);
        assert!(clean.all_hold(), "{}", verdict(&clean));
    }
}

#[test]
fn the_model_checker_finds_nothing_in_todays_engine_and_each_known_bug_put_back() {
    all_hold_and_everything_is_reached();
    // A payload forwarded only by its origin: the origin crashes after one
    // copy left; its receiver delivers and sends it on to nobody.
    finds(
        &[Bug::OriginOnlyForwards],
        bounds(3, 4, |b| {
            b.faults = 1;
            b.broadcasts = 1;
        }),
        Prop::Payloads,
        true,
    );
    // A view raised from a rank's own gone set, without its agreement:
    // two ranks learn a crash and a leave in different orders.
    finds(
        &[Bug::ViewBeforeDecision],
        bounds(3, 8, |b| {
            b.faults = 1;
            b.losses = 1;
            b.leaves = 1;
        }),
        Prop::Views,
        false,
    );
    // A vote counted from a rank the flood was not forwarded to, without
    // the cap at N: two voters whose ballots expired re-join the round from
    // each other's late copies of the flood, each the other's flood parent,
    // and count each other's votes up past N = 4 (an undecodable vote).
    // Re-joining a round needs a forgotten ballot: both bugs go back.
    finds(
        &[Bug::UncappedVotes, Bug::ForgottenBallots],
        stale_flood(),
        Prop::Silence,
        true,
    );
    // A ballot forgotten when it expired: a late copy of its round makes
    // the voter join it again under a second flood parent, which counts
    // it while the first one still does.
    finds(&[Bug::ForgottenBallots], late_copy(), Prop::Ballots, true);
    // A liveness probe that got no answer taken for a refusal: a live
    // emitter that is stopped (its kernel completes the handshake, nobody
    // greets) is declared on proof, in one step.
    finds(
        &[Bug::SilentProbeAsProof],
        bounds(3, 3, |b| b.probes = 1),
        Prop::Proof,
        true,
    );
    // The same across a cut: the emitter's host does not answer at all.
    finds(
        &[Bug::SilentProbeAsProof],
        bounds(3, 3, |b| {
            b.partitions = 1;
            b.probes = 1;
        }),
        Prop::Proof,
        true,
    );
}

/// N = 4, 16 steps, every path opening with 10 steps that no bug changes:
/// rank 2's emitter 1 stalls and 2 accuses it; rank 3 joins the round
/// from 2's flood, votes, and 2 counts it; 3 runs to the end of its ballot
/// (1.5 timeouts); then 2's delayed copy reaches rank 0, which forwards it
/// to 3, and that copy arrives. With its ballot forgotten, 3 joins the
/// round again with 0 as its flood parent; 0 forwarded to it, so it counts
/// 3's next vote while 2 still counts the first (`ballots`, in 13 steps).
/// Kept spent, the ballot refuses the copy. Every interleaving of the 6
/// steps after the opening is explored.
fn late_copy() -> Bounds {
    let tick = |rank| Action::Tick { rank, beat: true };
    let deliver = |from, to| Action::Deliver { from, to };
    let mut b = Bounds::quiet(4, 16);
    b.stalls = 1;
    b.opening = vec![
        tick(2),
        Action::Tick {
            rank: 2,
            beat: false,
        },
        deliver(2, 3),
        tick(3),
        tick(3),
        deliver(3, 2),
        tick(3),
        tick(3),
        deliver(2, 0),
        deliver(0, 3),
    ];
    b
}

/// N = 4, 20 steps, every path opening with 14 steps that no bug changes:
/// rank 0's emitter 3 stalls and 0 accuses it; ranks 1 and 2 join the
/// round from 0's flood and forward it to each other; both copies are
/// delayed while 1 and 2 run to the end of their ballots (1.5 timeouts);
/// then 1 → 2 and 2 → 1 arrive, and each re-joins the round with the other
/// as its flood parent. Every interleaving of the 6 steps after it is
/// explored. From the start the schedule is 20 steps deep, beyond a
/// breadth-first search that finishes at N = 4.
fn stale_flood() -> Bounds {
    let tick = |rank| Action::Tick { rank, beat: true };
    let deliver = |from, to| Action::Deliver { from, to };
    let mut b = Bounds::quiet(4, 20);
    b.stalls = 1;
    b.opening = vec![
        tick(0),
        Action::Tick {
            rank: 0,
            beat: false,
        },
        deliver(0, 1),
        deliver(0, 2),
        tick(1),
        tick(1),
        tick(1),
        tick(1),
        tick(2),
        tick(2),
        tick(2),
        tick(2),
        deliver(1, 2),
        deliver(2, 1),
    ];
    b
}
