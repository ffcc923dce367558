//! The Engine's protections against its own lateness and against slow
//! links (`docs/design.md` §4.3 "Timeout", §4.4 "Mending"): own health awareness stretches
//! the timeout of a rank whose wake-ups run late, within `health_max`
//! timeouts; a mended emitter's timeout starts when its link is confirmed,
//! within a link grace.

mod support;

use std::time::Duration;

use ffd_protocol::ranks::fold_digest;
use ffd_protocol::wire::Encoder;
use ffd_protocol::{
    Cause, Engine, EngineConfig, Input, Output, QuorumMode, Rank, Time, slot_value,
};
use support::{
    Job, at, deliver_sealed, drain, drained, failures, ms, serve_deadlines, slot_reading, tick,
};

const KEY: u64 = 0x5EED_0000_0000_0014;
const JOB: Job = Job::new(KEY, [0x14; 32]);

/// Period 10 ms, timeout 100 ms (checks every 25 ms, late after 25 ms, lag
/// guard 50 ms), start-up and link grace 1 s, health ceiling 4. These
/// tests pin when silence is judged, not how it is confirmed: one Engine
/// alone has no voters, so silence is declared at once (`FFD_QUORUM=off`).
fn config() -> EngineConfig {
    EngineConfig {
        startup_grace: Some(ms(1000)),
        ..support::config(QuorumMode::Off)
    }
}

/// Rank `me` of a rank-ordered ring of `n`, checking its slot only
/// (modelled heartbeats: its deadlines are slot checks).
fn checker(cfg: EngineConfig, n: u32, me: Rank) -> Engine {
    drained(JOB.checker(cfg, n, me))
}

/// The failures `outs` report as declared here (timeout or in-band).
fn declared(outs: &[Output]) -> Vec<Rank> {
    failures(outs)
        .into_iter()
        .filter(|&(_, cause)| cause != Cause::Notice)
        .map(|(rank, _)| rank)
        .collect()
}

/// A notice from `from` naming `rank` failed, sealed for receiver `to`
/// with a sequence number never used before.
fn notice_failing(rank: Rank, from: Rank, to: Rank) -> Vec<u8> {
    JOB.seal(&Encoder::new(KEY, from).notice(from, 0, &[rank], &[]), to)
}

/// Ticks `e` at each deadline plus `late`, its slot reading `value`, until
/// it declares someone or `limit` passes: (when, whom).
fn run(e: &mut Engine, value: u64, late: Duration, limit: Time) -> Option<(Time, Rank)> {
    serve_deadlines(e, limit, late, slot_reading(|_| value), |_, now, outs| {
        declared(&outs).first().map(|&r| (now, r))
    })
}

/// Rank 5 of 10 whose emitter 4 was reported failed at 1 ms: it mends to 3.
fn mended() -> Engine {
    let mut e = checker(config(), 10, 5);
    deliver_sealed(&mut e, at(1), &notice_failing(4, 8, 5));
    assert_eq!(e.emitter(), Some(3));
    e
}

#[test]
fn a_mended_emitter_is_timed_from_its_link_up() {
    // The ObserveMe's send completes at 500 ms (a slow connection set-up):
    // 3's timeout starts then, whatever came before.
    let mut e = mended();
    assert_eq!(run(&mut e, 0, Duration::ZERO, at(499)), None);
    e.handle(at(500), Input::Sent { to: 7 }).unwrap();
    assert!(drain(&mut e).is_empty());
    e.handle(at(500), Input::Sent { to: 3 }).unwrap();
    drain(&mut e);
    assert_eq!(e.stats().observation.mend_links_confirmed, 1);
    let (t, rank) = run(&mut e, 0, Duration::ZERO, at(2000)).expect("declared");
    assert_eq!(rank, 3);
    assert!((at(600)..=at(625)).contains(&t), "declared at {t}");

    // A later completion does not restart it.
    let mut e = mended();
    e.handle(at(2), Input::Sent { to: 3 }).unwrap();
    e.handle(at(90), Input::Sent { to: 3 }).unwrap();
    drain(&mut e);
    let (t, _) = run(&mut e, 0, Duration::ZERO, at(2000)).expect("declared");
    assert!((at(102)..=at(127)).contains(&t), "declared at {t}");
}

#[test]
fn a_mended_emitter_whose_link_never_confirms_gets_the_link_grace() {
    let mut e = mended();
    let (t, rank) = run(&mut e, 0, Duration::ZERO, at(5000)).expect("declared");
    assert_eq!(rank, 3);
    assert!((at(1101)..=at(1126)).contains(&t), "declared at {t}");
    assert_eq!(e.stats().observation.mend_links_confirmed, 0);
}

#[test]
fn a_beat_confirms_the_link_too() {
    let mut e = mended();
    // First read: the fresh slot is empty; then the new emitter's beat.
    let t = e.next_deadline().unwrap();
    tick(&mut e, t, 0);
    // A beat counts in the generation the ObserveMe named (docs/design.md §5 "Wire format").
    let beat = slot_value(e.generation(), fold_digest(e.digest()), 1);
    let t = e.next_deadline().unwrap();
    tick(&mut e, t, beat);
    // A completion now changes nothing: the beat started the clock.
    e.handle(t + ms(50), Input::Sent { to: 3 }).unwrap();
    assert_eq!(e.stats().observation.mend_links_confirmed, 0);
    let (declared_at, _) = run(&mut e, beat, Duration::ZERO, at(5000)).unwrap();
    assert!(
        (t + ms(100)..=t + ms(125)).contains(&declared_at),
        "beat at {t}, declared at {declared_at}"
    );
}

/// The emitter's last beat is read at `beat`; then the slot freezes.
fn beating_until(cfg: EngineConfig, beat: Time) -> Engine {
    let mut e = checker(cfg, 8, 4);
    tick(&mut e, beat, slot_value(0, 0, 1));
    e
}

#[test]
fn late_wakeups_stretch_the_timeout_up_to_health_max() {
    // Every wake-up 30 ms late (over the 25 ms threshold, under the 50 ms
    // lag guard): the multiplier climbs to 4 and the silent emitter is
    // declared 4 timeouts after its last beat, not 1.
    let beat = at(20);
    let mut e = beating_until(config(), beat);
    let (t, rank) = run(&mut e, slot_value(0, 0, 1), ms(30), at(5000)).expect("declared");
    assert_eq!(rank, 3);
    assert_eq!(e.own_health(), 4);
    assert_eq!(e.stats().health.health_peak, 4);
    assert!(e.stats().health.health_rises >= 3);
    // The bound `docs/design.md` §4.3 "Timeout" states: within health_max timeouts of the last
    // beat, plus the wake-up's own lateness and a check interval.
    assert!(
        t >= beat + ms(400) && t <= beat + ms(400) + ms(30) + ms(25),
        "declared at {t}"
    );
}

#[test]
fn on_time_wakeups_bring_the_timeout_back() {
    let mut e = beating_until(config(), at(20));
    // Three late wake-ups while the emitter beats: multiplier 4.
    let mut value = 1;
    for _ in 0..3 {
        let now = e.next_deadline().unwrap() + ms(30);
        value += 1;
        tick(&mut e, now, slot_value(0, 0, value));
    }
    assert_eq!(e.own_health(), 4);
    // On time from here, beating: one step down per stretched timeout
    // (400 + 300 + 200 ms).
    let mut now = Time::ZERO;
    while e.own_health() > 1 {
        now = e.next_deadline().unwrap();
        value += 1;
        tick(&mut e, now, slot_value(0, 0, value));
        assert!(now < at(2000), "still at {} by {now}", e.own_health());
    }
    assert!(now >= at(1000), "back to 1 at {now}");
    // Then a silent emitter is declared one timeout after its last beat.
    let (t, _) = run(
        &mut e,
        slot_value(0, 0, value),
        Duration::ZERO,
        now + ms(1000),
    )
    .unwrap();
    assert!(t <= now + ms(125), "declared at {t}, last beat {now}");
}

#[test]
fn a_ceiling_of_one_judges_by_the_plain_timeout() {
    let cfg = EngineConfig {
        health_max: 1,
        ..config()
    };
    let beat = at(20);
    let mut e = beating_until(cfg, beat);
    let (t, _) = run(&mut e, slot_value(0, 0, 1), ms(30), at(5000)).expect("declared");
    assert_eq!(e.own_health(), 1);
    assert_eq!(e.stats().health.health_rises, 0);
    assert!(t <= beat + ms(100) + ms(30) + ms(25), "declared at {t}");
}
