//! The primary partition in the simulator (`FFD_QUORUM=majority`, the
//! default; `docs/design.md` §4.11 "Primary partition"). After a
//! partition exactly one side goes on; the other excludes itself within two
//! timeouts and names nobody; the primary side declares the other within a
//! timeout and a few ms; only silence counts against the quorum.

use std::time::Duration;

mod support;

use ffd_protocol::sim::{SimConfig, SimReport};
use ffd_protocol::{Cause, QuorumMode, Rank};
use support::{sim_config, simulate, sorted};

/// The job of these checks: 64 ranks on 8 hosts, period 10 ms,
/// timeout 100 ms, in-band errors from dead processes after 3 ms.
fn config(faults: &[String], seed: u64) -> SimConfig {
    let mut cfg = sim_config(64, faults, seed);
    cfg.hosts = 8;
    cfg
}

fn spec(ranks: &[Rank]) -> String {
    let list: Vec<String> = ranks.iter().map(Rank::to_string).collect();
    format!("partition:{}@100ms", list.join(","))
}

fn timeout_ms(cfg: &SimConfig) -> f64 {
    cfg.engine.timeout.as_secs_f64() * 1e3
}

/// Every rank of `cut_off` excluded itself for want of a quorum within two
/// timeouts of the cut at 100 ms; nobody else did; nobody raised a false
/// report (a `Failed` event naming a primary rank), and the cut-off side
/// raised no `Failed` event at all.
fn assert_one_side_goes_on(r: &SimReport, cut_off: &[Rank], timeout: f64, what: &str) {
    let t = &r.totals;
    assert_eq!(
        t.false_reports, 0,
        "{what}: {:?}\n{r}",
        r.false_report_samples
    );
    assert_eq!(t.false_report_events, 0, "{what}\n{r}");
    assert_eq!(
        t.reports_by_faulty_ranks, 0,
        "{what}: the minority named someone\n{r}"
    );
    assert_eq!(sorted(t.self_excluded.clone()), cut_off, "{what}\n{r}");
    assert_eq!(
        sorted(t.no_quorum_exclusions.clone()),
        cut_off,
        "{what}\n{r}"
    );
    for (rank, at) in t.self_excluded.iter().zip(&t.self_excluded_at_ms) {
        assert!(
            *at <= 100.0 + 2.0 * timeout + 1.0,
            "{what}: rank {rank} excluded itself at {at} ms"
        );
    }
}

#[test]
fn ranks_0_to_9_of_64_cut_off_and_healed_exclude_themselves_and_name_nobody() {
    let cut_off: Vec<Rank> = (0..10).collect();
    for seed in 1..=3 {
        let cfg = config(&[spec(&cut_off), "heal@2s".to_owned()], seed);
        let timeout = timeout_ms(&cfg);
        let mut cfg = cfg;
        cfg.duration = Some(Duration::from_secs(5));
        let r = simulate(cfg);
        let what = format!("seed {seed}");
        assert_one_side_goes_on(&r, &cut_off, timeout, &what);
        // The majority declares every one of them within timeout + 25 ms
        // of the cut, and every live rank learns it.
        assert_eq!(r.failures.len(), cut_off.len(), "{what}\n{r}");
        assert_eq!(r.totals.missed_notifications, 0, "{what}\n{r}");
        for f in &r.failures {
            let at = f.detected_at_ms.expect("declared");
            assert!(
                at - 100.0 <= timeout + 25.0,
                "{what}: rank {} declared {} ms after the cut\n{r}",
                f.rank,
                at - 100.0
            );
            assert_eq!(f.cause, Some(Cause::Timeout), "{what}");
        }
    }
}

#[test]
fn an_even_odd_half_split_leaves_exactly_one_side_running() {
    let even: Vec<Rank> = (0..64).step_by(2).collect();
    let odd: Vec<Rank> = (1..64).step_by(2).collect();
    // Whichever half is named as the cut-off one, the half holding rank 0
    // (the lowest live rank) goes on.
    for named in [&even, &odd] {
        let cfg = config(&[spec(named), "heal@2s".to_owned()], 1);
        let timeout = timeout_ms(&cfg);
        let r = simulate(cfg);
        assert_one_side_goes_on(&r, &odd, timeout, &format!("{named:?}"));
        assert_eq!(r.failures.len(), odd.len(), "{r}");
        assert!(r.failures.iter().all(|f| f.detected_at_ms.is_some()), "{r}");
    }
}

#[test]
fn forty_of_64_crashed_with_in_band_declare_exclude_nobody() {
    for seed in 1..=5 {
        let r = simulate(config(&["random:40@100ms".to_owned()], seed));
        let what = format!("seed {seed}");
        assert!(r.totals.self_excluded.is_empty(), "{what}\n{r}");
        assert_eq!(r.totals.false_reports, 0, "{what}\n{r}");
        assert_eq!(r.totals.missed_notifications, 0, "{what}\n{r}");
        assert_eq!(r.failures.len(), 40);
        assert!(
            r.failures
                .iter()
                .all(|f| f.detected_at_ms.is_some() && f.all_notified_at_ms.is_some()),
            "{what}\n{r}"
        );
    }
}

#[test]
fn without_quorum_the_cut_off_side_names_the_other_and_goes_on() {
    // What FFD_QUORUM=off does (and every rank did before): split brain,
    // which the summary now counts as false reports.
    let cut_off: Vec<Rank> = (0..10).collect();
    let mut cfg = config(&[spec(&cut_off), "heal@2s".to_owned()], 1);
    cfg.engine.quorum = QuorumMode::Off;
    let r = simulate(cfg);
    assert!(r.totals.false_reports > 0, "{r}");
    assert!(r.totals.false_reports_by_faulty_ranks > 0, "{r}");
    assert!(r.totals.no_quorum_exclusions.is_empty(), "{r}");
}
