//! The simulator's model of same-host watching (`SimConfig::local`,
//! `docs/design.md` §4.12 "Hosts"), over several seeds: exits seen by the host
//! after the pidfd latency, hangs by the counters, leader failover, a
//! whole host in one notice, fabric heartbeats per host.

use std::time::Duration;

mod support;

use ffd_protocol::sim::{SimConfig, SimReport};
use ffd_protocol::{Cause, QuorumMode};
use support::{sim_config, simulate};

fn config(n: u32, hosts: u32, faults: &[&str], seed: u64) -> SimConfig {
    let mut cfg = sim_config(n, faults, seed);
    cfg.hosts = hosts;
    cfg.local = true;
    // Silence declared at once: one notice per silent host (with the
    // default majority the host is one accusation first).
    cfg.engine.quorum = QuorumMode::Off;
    cfg
}

fn assert_complete(r: &SimReport) {
    assert_eq!(r.totals.false_reports, 0, "{r}");
    assert_eq!(r.totals.missed_notifications, 0, "{r}");
    assert!(
        r.failures.iter().all(|f| f.all_notified_at_ms.is_some()),
        "{r}"
    );
}

#[test]
fn a_crash_is_seen_by_its_host_after_the_pidfd_latency() {
    for seed in 1..=3 {
        // 256 ranks on 16 hosts of 16: rank 5 is on host 0, not its leader.
        let r = simulate(config(256, 16, &["crash:5@300ms"], seed));
        assert_complete(&r);
        let f = &r.failures[0];
        assert_eq!(f.cause, Some(Cause::Exited), "{r}");
        let delay = f.detected_at_ms.unwrap() - f.injected_at_ms;
        assert!((delay - 0.15).abs() < 1e-6, "{delay} ms");
        assert!(
            f.all_notified_at_ms.unwrap() - f.injected_at_ms < 1.0,
            "{r}"
        );
    }
}

#[test]
fn a_dead_leader_is_replaced_and_the_next_failure_is_found() {
    for seed in 1..=3 {
        // Rank 16 leads host 1; rank 17 takes over; then host 1's new
        // leader hangs, and host 2 dies whole.
        let r = simulate(config(
            256,
            16,
            &["crash:16@300ms", "hang:17@600ms", "host:2@900ms"],
            seed,
        ));
        assert_complete(&r);
        assert_eq!(r.failures.len(), 2 + 16);
        assert_eq!(r.failures[0].cause, Some(Cause::Exited));
        assert_eq!(r.failures[1].cause, Some(Cause::Timeout), "{r}");
        let hang = r.failures[1].detected_at_ms.unwrap() - 600.0;
        assert!(hang <= 100.0 + 25.0, "{hang} ms");
        assert_eq!(r.totals.host_failed_events, 1, "{r}");
    }
}

#[test]
fn a_whole_host_is_one_notice_found_in_a_timeout_and_a_quarter() {
    let r = simulate(config(256, 16, &["host:3@500ms"], 7));
    assert_complete(&r);
    assert_eq!(r.failures.len(), 16);
    let first = r.failures[0].detected_at_ms.unwrap();
    for f in &r.failures {
        assert_eq!(f.cause, Some(Cause::Timeout));
        assert_eq!(f.detector, r.failures[0].detector, "one detector");
        assert_eq!(f.detected_at_ms, Some(first), "all at once");
    }
    assert!(first - 500.0 <= 100.0 + 25.0 + 25.0, "{first}");
    assert_eq!(r.totals.host_failed_events, 1);
    // One broadcast for the 16 ranks: about one notice's worth of copies.
    let notices = r.totals.messages["notice"].count;
    let copies_per_rank = notices as f64 / 256.0;
    assert!(copies_per_rank < 2.0 * 8.0 + 1.0, "{notices} notices");
}

#[test]
fn fabric_heartbeats_scale_with_hosts_not_ranks() {
    let local = simulate(config(4096, 64, &[], 1));
    let mut off_cfg = config(4096, 64, &[], 1);
    off_cfg.local = false;
    off_cfg.duration = Some(Duration::from_millis(300));
    let off = simulate(off_cfg);
    let period = SimConfig::new(1).engine.period.as_secs_f64();
    assert_eq!(local.totals.fabric_heartbeats_per_s, 64.0 / period);
    assert_eq!(off.totals.fabric_heartbeats_per_s, 4096.0 / period);
    assert!(local.totals.local && !off.totals.local);
    assert_eq!(local.totals.false_reports, 0);
}
