//! The start-up grace protects connection set-up, not a live job: once the
//! emitter's first heartbeat has been seen, its silence is judged against
//! the plain timeout, even while the grace would still run.

use std::sync::Arc;
use std::time::Duration;

use ffd_protocol::{
    Cause, Engine, EngineConfig, Event, JobKeys, Output, QuorumMode, Ring, Time, slot_value,
};

fn at(ms: u64) -> Time {
    Time::ZERO + Duration::from_millis(ms)
}

fn failures(e: &mut Engine) -> Vec<(u32, Cause)> {
    let mut out = Vec::new();
    for _ in 0..10_000 {
        match e.poll_output() {
            Some(Output::Event(Event::Failed { rank, cause, .. })) => out.push((rank, cause)),
            Some(_) => {}
            None => return out,
        }
    }
    panic!("poll_output never returned None");
}

/// Drives `e` through its deadlines up to `until`, feeding the slot value
/// `value_at(t)` at each check. Returns the failures declared, with when.
fn run(e: &mut Engine, until: Time, value_at: impl Fn(Time) -> u64) -> Vec<(Time, u32, Cause)> {
    let mut declared = Vec::new();
    for _ in 0..100_000 {
        let Some(t) = e.next_deadline() else { break };
        if t > until {
            break;
        }
        e.handle_timeout(t, |_| value_at(t));
        declared.extend(failures(e).into_iter().map(|(r, c)| (t, r, c)));
    }
    declared
}

#[test]
fn a_stall_after_the_first_heartbeat_is_declared_one_timeout_later_within_the_grace() {
    let cfg = EngineConfig {
        period: Duration::from_millis(10),
        timeout: Duration::from_millis(100),
        startup_grace: Some(Duration::from_secs(1)),
        // When silence is judged, not how it is confirmed: declared at once.
        quorum: QuorumMode::Off,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(
        Arc::new(cfg),
        Arc::new(Ring::by_rank(4)),
        3,
        JobKeys::new(7, [7; 32]),
        Time::ZERO,
    )
    .unwrap();
    failures(&mut e);
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
    let cfg = EngineConfig {
        period: Duration::from_millis(10),
        timeout: Duration::from_millis(100),
        startup_grace: Some(Duration::from_millis(500)),
        // When silence is judged, not how it is confirmed: declared at once.
        quorum: QuorumMode::Off,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(
        Arc::new(cfg),
        Arc::new(Ring::by_rank(4)),
        3,
        JobKeys::new(7, [7; 32]),
        Time::ZERO,
    )
    .unwrap();
    failures(&mut e);
    let declared = run(&mut e, at(2000), |_| 0);
    let (when, rank, _) = declared[0];
    assert_eq!(rank, 2);
    assert!(when >= at(600) && when <= at(650), "declared at {when}");
}
