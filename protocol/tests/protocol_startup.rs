//! The start-up grace protects connection set-up, not a live job: once the
//! emitter's first heartbeat has been seen, its silence is judged against
//! the plain timeout, even while the grace would still run.

mod support;

use std::time::Duration;

use ffd_protocol::{Cause, Engine, EngineConfig, QuorumMode, Rank, Time, slot_value};
use support::{Job, at, drained, failures, ms, serve_deadlines, slot_reading};

const JOB: Job = Job::new(7, [7; 32]);

/// Rank 3 of 4 (its emitter is 2) with the start-up grace `grace`. These
/// tests pin when silence is judged, not how it is confirmed: declared at
/// once (`FFD_QUORUM=off`).
fn engine(grace: Duration) -> Engine {
    let cfg = EngineConfig {
        startup_grace: Some(grace),
        ..support::config(QuorumMode::Off)
    };
    drained(JOB.engine(cfg, 4, 3))
}

/// Drives `e` through its deadlines up to `until`, feeding the slot value
/// `value_at(t)` at each check. Returns the failures declared, with when.
fn run(e: &mut Engine, until: Time, value_at: impl Fn(Time) -> u64) -> Vec<(Time, Rank, Cause)> {
    let mut declared = Vec::new();
    serve_deadlines(
        e,
        until,
        Duration::ZERO,
        slot_reading(value_at),
        |_, t, outs| {
            declared.extend(failures(&outs).into_iter().map(|(r, c)| (t, r, c)));
            None::<()>
        },
    );
    declared
}

#[test]
fn a_stall_after_the_first_heartbeat_is_declared_one_timeout_later_within_the_grace() {
    let mut e = engine(ms(1000));
    // Rank 2 (the emitter) beats every 10 ms until 300 ms, then hangs.
    let beats = |t: Time| {
        slot_value(
            0,
            0,
            (t.as_nanos().min(300_000_000) / 10_000_000) as u16 + 1,
        )
    };
    // Only the first declaration matters: afterwards the mended emitters'
    // slots read as silent in this driver.
    let declared = run(&mut e, at(2000), beats);
    let (when, rank, cause) = declared[0];
    assert_eq!((rank, cause), (2, Cause::Timeout));
    // Last change seen at <= 300 ms (+ a check interval): declared one
    // timeout later, well before the 1.1 s the grace alone would allow.
    assert!(when >= at(400) && when <= at(450), "declared at {when}");
}

#[test]
fn an_emitter_never_heard_from_has_the_whole_grace() {
    let mut e = engine(ms(500));
    let declared = run(&mut e, at(2000), |_| 0);
    let (when, rank, _) = declared[0];
    assert_eq!(rank, 2);
    assert!(when >= at(600) && when <= at(650), "declared at {when}");
}
