//! Simulator scenarios for application payloads, read from the report's
//! `payloads` section: all or none when the origin dies during its
//! fan-out, a revoke reaching ranks that already hold its origin failed,
//! FIFO per origin for a burst of 200, exactly once with many origins, and
//! the digest/sync repair of a payload lost on every link to one rank.
//!
//! The 2000-origin scenario at N = 2000 (4 million deliveries, 84 million
//! messages) is `#[ignore]`d; `cargo test --release -- --ignored` runs it.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

mod support;

use ffd_protocol::sim::{PayloadReport, SimReport, Simulator, Verdict};
use ffd_protocol::wire::HEADER_LEN;
use ffd_protocol::{Kind, Rank, Time};
use support::{ms, sim_config, simulate};

fn specs(faults: &[&str]) -> Vec<String> {
    faults.iter().map(|f| (*f).to_owned()).collect()
}

/// (origin, seq) of a payload copy, read from its wire bytes (the rule
/// sees them before the receiver checks the tag).
fn payload_id(bytes: &[u8]) -> (Rank, u64) {
    let origin = u32::from_le_bytes(bytes[HEADER_LEN..HEADER_LEN + 4].try_into().unwrap());
    let seq = u64::from_le_bytes(bytes[HEADER_LEN + 4..HEADER_LEN + 12].try_into().unwrap());
    (origin, seq)
}

fn assert_all_or_none(r: &SimReport, what: &str) {
    assert!(!r.payloads.is_empty(), "{what}: no payload\n{r}");
    for p in &r.payloads {
        assert!(p.all_or_none(), "{what}: {p:?}\n{r}");
    }
    assert_eq!(r.totals.payloads_not_all_or_none, 0, "{what}");
    assert_eq!(r.totals.payload_duplicate_deliveries, 0, "{what}");
    assert_eq!(r.totals.payloads_out_of_order, 0, "{what}");
}

fn everywhere(p: &PayloadReport) -> bool {
    p.live_at_end > 0 && p.delivered_by_live == p.live_at_end
}

/// The origin crashes during its fan-out, 1 µs after it began: only some
/// of its copies leave (a rule lets the first `kept` through and drops the
/// rest; with per-link send times the crash itself cuts the fan-out). If
/// one copy left, the rank that got it delivers and forwards it, and so
/// does every live rank; if none did, no live rank delivers it.
#[test]
fn an_origin_crashing_in_its_fan_out_is_delivered_by_every_live_rank_or_by_none() {
    for n in [8u32, 64, 1000] {
        for (kept, seed) in [(1usize, 1u64), (3, 2), (0, 3)] {
            let origin = n / 2;
            let faults = [
                format!("bcast:{origin}@300ms"),
                format!("crash:{origin}@300001us"),
            ];
            let mut sim = Simulator::new(sim_config(n, &faults, seed)).unwrap();
            let left_origin = Rc::new(Cell::new(0usize));
            let out = Rc::clone(&left_origin);
            sim.set_rule(Box::new(move |m| {
                if m.kind == Some(Kind::Payload) && m.from == origin {
                    if out.get() >= kept {
                        return Verdict::Drop;
                    }
                    out.set(out.get() + 1);
                }
                Verdict::Pass
            }));
            let r = sim.run();
            let what = format!("n={n} copies={kept}");
            assert_all_or_none(&r, &what);
            let p = &r.payloads[0];
            assert_eq!(p.origin, origin);
            if left_origin.get() == 0 {
                assert_eq!(p.delivered_by, 1, "{what}: only the dead origin\n{r}");
            } else {
                assert!(everywhere(p), "{what}: {p:?}");
                assert_eq!(p.delivered_by, n, "{what}: the origin too");
            }
            assert!(left_origin.get() <= kept);
            assert_eq!(r.totals.false_reports, 0, "{what}");
        }
    }
}

/// The origin broadcasts a revoke and dies; its own copies arrive at once,
/// the relayed ones 40 ms late, well after the crash was detected in-band
/// (about 20 ms) and its notice wave started. Links are FIFO, so a notice
/// sent behind a late copy on the same link waits for it: the ranks that
/// learn of the crash first (its detectors, and those the wave reaches on
/// other links) hold the origin failed when the relayed copies come. They
/// still deliver and forward it: it reaches everyone.
#[test]
fn a_revoke_from_an_origin_already_known_failed_still_reaches_everyone() {
    for n in [16u32, 256, 1000] {
        let origin = 3;
        // The crash comes once the whole fan-out has left.
        let faults = specs(&["bcast:3@300ms", "crash:3@300050us"]);
        let mut sim = Simulator::new(sim_config(n, &faults, 7)).unwrap();
        sim.set_rule(Box::new(move |m| {
            if m.kind == Some(Kind::Payload) && m.from != origin {
                Verdict::Delay(ms(40))
            } else {
                Verdict::Pass
            }
        }));
        let r = sim.run();
        let what = format!("n={n}");
        assert_all_or_none(&r, &what);
        let p = &r.payloads[0];
        assert!(everywhere(p), "{what}: {p:?}\n{r}");
        let detected = r.failures[0].detected_at_ms.expect("the crash is detected");
        assert!(
            r.failures[0].all_notified_at_ms.is_some(),
            "{what}: the crash is known everywhere"
        );
        let last = p.last_delivered_at_ms.expect("delivered");
        assert!(
            detected + 10.0 < last,
            "{what}: the crash was detected at {detected} ms, not well before the relayed copies came (last delivery {last} ms)"
        );
    }
}

/// 200 payloads from one origin, one every 2 µs: relays forward them as
/// they come, lost copies (a rule drops every 7th) are made up by the
/// other links (the later payloads wait in the hold meanwhile) or by the
/// repair. Every live rank delivers all 200, each once, in the origin's
/// order. (Not all at one instant: the simulator's jitter would then
/// shuffle the 200 copies on each link, which no FIFO link does, and the
/// replay window drops copies 64 behind the newest.)
#[test]
fn two_hundred_payloads_from_one_origin_arrive_in_order_everywhere() {
    for (n, lossy) in [(64u32, false), (64, true), (200, true)] {
        let faults: Vec<String> = (0..200)
            .map(|i| format!("bcast:5@{}us", 300_000 + 2 * i))
            .collect();
        let mut cfg = sim_config(n, &faults, 11);
        cfg.duration = Some(ms(1500));
        let mut sim = Simulator::new(cfg).unwrap();
        if lossy {
            let mut count = 0u64;
            sim.set_rule(Box::new(move |m| {
                if m.kind == Some(Kind::Payload) {
                    count += 1;
                    if count % 7 == 0 {
                        return Verdict::Drop;
                    }
                }
                Verdict::Pass
            }));
        }
        let r = sim.run();
        let what = format!("n={n} lossy={lossy}");
        assert_all_or_none(&r, &what);
        assert_eq!(r.payloads.len(), 200, "{what}");
        for (i, p) in r.payloads.iter().enumerate() {
            assert_eq!((p.origin, p.seq), (5, i as u64 + 1), "{what}");
            assert_eq!(p.delivered_by, n, "{what}: {p:?}");
        }
        assert_eq!(r.totals.payloads_delivered, 200 * u64::from(n), "{what}");
        if lossy {
            let held: u64 = (0..n)
                .map(|r| sim.engine(r).stats().payloads.payloads_held)
                .sum();
            assert!(
                held > 0,
                "{what}: losses made some ranks hold later payloads"
            );
        }
    }
}

/// Many origins at one instant: each payload delivered exactly once by
/// every rank (no per-origin state is forgotten, so a late copy is never
/// delivered again). The links are FIFO (no jitter): with thousands of
/// copies entering each link at one instant, the simulator's independent
/// jitter would reorder them beyond the 64-wide replay window, which no
/// FIFO link does.
fn many_origins(n: u32, origins: u32, retention: usize) {
    let faults: Vec<String> = (0..origins).map(|o| format!("bcast:{o}@300ms")).collect();
    let mut cfg = sim_config(n, &faults, 5);
    cfg.net.jitter = Duration::ZERO;
    cfg.engine.payload_retention = retention;
    let r = simulate(cfg);
    let what = format!("n={n} origins={origins}");
    assert_all_or_none(&r, &what);
    assert_eq!(r.payloads.len(), origins as usize, "{what}");
    for p in &r.payloads {
        assert_eq!((p.seq, p.delivered_by), (1, n), "{what}: {p:?}");
    }
    assert_eq!(
        r.totals.payloads_delivered,
        u64::from(origins) * u64::from(n),
        "{what}"
    );
}

#[test]
fn several_origins_at_once_deliver_exactly_once_everywhere() {
    many_origins(2000, 8, 64);
}

/// The scenario: N = 2000, every rank broadcasts once at the same
/// instant (before, each rank remembered 1024 origins and delivered a late
/// copy of a forgotten one twice). Retention is off: kept payloads would
/// cost the simulator N² copies (about 1 GB more); exactly-once does not
/// depend on them. About 3 minutes and 7 GB (the messages in flight) on
/// this project's shared 2-core machine, release build.
#[test]
#[ignore = "84 million messages: minutes even in a release build"]
fn two_thousand_origins_each_broadcasting_once_deliver_exactly_once_everywhere() {
    many_origins(2000, 2000, 0);
}

/// Every copy of one payload to one rank is lost: that rank holds the next
/// payload of the origin (FIFO) until its digest, which folds in the
/// origin's high-water mark, differs from its emitter's long enough; its
/// sync request carries its marks, and the emitter sends what it lacked.
#[test]
fn a_payload_lost_on_every_link_to_a_rank_comes_through_the_repair() {
    for n in [16u32, 200] {
        let victim: Rank = 9;
        let faults = specs(&["bcast:2@300ms", "bcast:2@310ms"]);
        let mut cfg = sim_config(n, &faults, 4);
        cfg.duration = Some(ms(1000));
        let mut sim = Simulator::new(cfg).unwrap();
        let lost_until = Time::ZERO + ms(350);
        sim.set_rule(Box::new(move |m| {
            if m.kind == Some(Kind::Payload)
                && m.to == victim
                && m.at < lost_until
                && payload_id(&m.message.to_vec()) == (2, 1)
            {
                Verdict::Drop
            } else {
                Verdict::Pass
            }
        }));
        let r = sim.run();
        let what = format!("n={n}");
        assert_all_or_none(&r, &what);
        for p in &r.payloads {
            assert!(everywhere(p), "{what}: {p:?}\n{r}");
        }
        let repaired = sim.engine(victim).stats();
        assert_eq!(
            repaired.payloads.payloads_held, 1,
            "{what}: seq 2 waited for 1"
        );
        assert_eq!(sim.engine(victim).payload_mark(2), 2, "{what}");
        let sent: u64 = (0..n)
            .map(|r| sim.engine(r).stats().payloads.sync_payloads_sent)
            .sum();
        assert!(sent >= 1, "{what}: repaired by a sync reply");
        let first = &r.payloads[0];
        let latest = first.last_delivered_at_ms.unwrap();
        assert!(
            latest > 350.0 && latest < 300.0 + 3.0 * 100.0,
            "{what}: repaired within a few timeouts ({latest} ms)"
        );
    }
}
