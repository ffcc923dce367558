//! Agreements and views in the simulator, with per-sender send times (a
//! crash in the middle of a fan-out cuts it): every survivor decides the
//! same value however the root and interior ranks of the agreement's tree
//! crash during it, at N = 64 and 4096; every live rank raises the same
//! views after random crashes; an agreement without failures takes at
//! most 2·⌈log2 N⌉ hops; with same-host watching, the tree over hosts
//! (fewer hops; heads, a whole host and the root crashing during it);
//! the report always has its sections.
//!
//! (`cargo test -p ffd-protocol --features sim`; the 4096-rank cases take
//! a few seconds each in a debug build.)

#![cfg(feature = "sim")]

mod support;

use ffd_protocol::sim::{AgreementReport, SimConfig, SimReport};
use ffd_protocol::{Rank, overlay};
use support::{sim_config, simulate};

/// `n` ranks on hosts of 8.
fn config(n: u32, faults: &[String], seed: u64) -> SimConfig {
    let mut cfg = sim_config(n, faults, seed);
    cfg.hosts = (n / 8).max(1);
    cfg
}

/// Every live rank decided, all the same, and the decision names every
/// crashed rank that never took part (and no live one).
fn assert_agreed(r: &SimReport, what: &str) -> AgreementReport {
    assert_eq!(r.agreements.len(), 1, "{what}\n{r}");
    let a = r.agreements[0].clone();
    assert!(a.live > 0, "{what}");
    assert_eq!(
        a.decided_by, a.live,
        "{what}: not every live rank decided\n{r}"
    );
    assert_eq!(a.distinct_decisions, 1, "{what}: decisions differ\n{r}");
    assert_eq!(r.totals.false_reports, 0, "{what}\n{r}");
    let crashed: Vec<Rank> = r.failures.iter().map(|f| f.rank).collect();
    for f in &a.failed {
        assert!(
            crashed.contains(f),
            "{what}: live rank {f} in the decision\n{r}"
        );
    }
    a
}

/// Every view raised by every live rank with one failed set, the views
/// numbered 1, 2, … with no gap, and the last one naming every crash.
fn assert_views(r: &SimReport, what: &str) {
    assert!(!r.views.is_empty(), "{what}: no view\n{r}");
    for (i, v) in r.views.iter().enumerate() {
        assert_eq!(v.id, i as u64 + 1, "{what}");
        assert_eq!(
            v.raised_by, v.live,
            "{what}: view {} not everywhere\n{r}",
            v.id
        );
        assert_eq!(
            v.distinct_failed_sets, 1,
            "{what}: view {} differs\n{r}",
            v.id
        );
    }
    let mut crashed: Vec<Rank> = r.failures.iter().map(|f| f.rank).collect();
    crashed.sort_unstable();
    assert_eq!(r.views.last().unwrap().failed, crashed, "{what}\n{r}");
}

/// The binomial tree of the agreement over ranks, rooted at 0: the root,
/// its children 1, 2, 4, …, and grandchildren 3, 5, 6, ….
fn interior(n: u32) -> Vec<Rank> {
    let mut v: Vec<Rank> = (0..overlay::levels(n)).map(|k| 1 << k).collect();
    v.extend([3, 5, 6]);
    v.retain(|&r| r < n);
    v
}

#[test]
fn crashes_of_the_root_and_interior_ranks_during_an_agreement() {
    for n in [64u32, 4096] {
        let tree = interior(n);
        // The agreement starts at 300 ms; the Up wave takes some 3 µs per
        // level, the Downs as much again: crashes at 0–40 µs land in
        // either wave, or in the middle of a fan-out.
        let cases: Vec<(Vec<Rank>, u64)> = vec![
            (vec![0], 0),
            (vec![tree[1], tree[2]], 4),
            (tree.clone(), 9),
            (vec![0, 1, 2], 25),
            (vec![0], 7),
            (vec![0, 1], 12),
            (vec![0, 1, 2], 40),
        ];
        // At 4096 (some 10 s each in a debug build) the first four.
        let cases = if n > 64 { &cases[..4] } else { &cases[..] };
        for (seed, (victims, after_us)) in cases.iter().cloned().enumerate() {
            let mut faults = vec!["agree@300ms".to_owned()];
            for (i, v) in victims.iter().enumerate() {
                faults.push(format!("crash:{v}@{}us", 300_000 + after_us + i as u64));
            }
            let what = format!("n={n} crash {victims:?} {after_us}us after the call");
            let r = simulate(config(n, &faults, seed as u64 + 1));
            let a = assert_agreed(&r, &what);
            assert_eq!(a.live, u64::from(n) - victims.len() as u64, "{what}");
            assert_views(&r, &what);
        }
    }
}

#[test]
fn crashes_at_random_times_during_agreements() {
    for seed in 1..=12u64 {
        let n = 64;
        // Deterministic picks from the seed: 1–4 victims, 0–60 µs in.
        let victims: Vec<Rank> = (0..1 + seed % 4)
            .map(|i| ((seed * 37 + i * 11) % u64::from(n)) as Rank)
            .collect();
        let mut faults = vec!["agree@300ms".to_owned()];
        for (i, v) in victims.iter().enumerate() {
            let at = 300_000 + (seed * 7 + i as u64 * 13) % 60;
            faults.push(format!("crash:{v}@{at}us"));
        }
        let what = format!("seed {seed}: crash {victims:?}");
        let r = simulate(config(n, &faults, seed));
        assert_agreed(&r, &what);
        assert_views(&r, &what);
    }
}

#[test]
fn views_are_identical_everywhere_after_random_crashes() {
    for (n, k, seed) in [(64u32, 10u32, 1u64), (64, 20, 2), (1024, 16, 3)] {
        let r = simulate(config(n, &[format!("random:{k}@300ms")], seed));
        let what = format!("n={n} random:{k}");
        assert_eq!(r.totals.missed_notifications, 0, "{what}\n{r}");
        assert_views(&r, &what);
    }
    // Crashes spread over time: several views, in order, each identical.
    let r = simulate(config(
        64,
        &[
            "crash:3@300ms".to_owned(),
            "crash:40@400ms".to_owned(),
            "random:5@500ms".to_owned(),
        ],
        4,
    ));
    assert!(r.views.len() >= 3, "{r}");
    assert_views(&r, "spread");
}

#[test]
fn an_agreement_without_failures_takes_at_most_two_log_n_hops() {
    for n in [2u32, 7, 64, 1024] {
        let r = simulate(config(n, &["agree@300ms".to_owned()], 1));
        let a = assert_agreed(&r, &format!("n={n}"));
        let bound = 2 * overlay::levels(n) as u16;
        assert!(a.hops.unwrap() <= bound, "n={n}: {:?} > {bound}", a.hops);
        assert!(r.views.is_empty());
        // Rank r clears bit r mod 64: all of them took part.
        let expect = if n >= 64 { 0 } else { !((1u64 << n) - 1) };
        assert_eq!(a.flags, Some(expect), "n={n}");
        assert_eq!(r.totals.messages["agree_up"].count, u64::from(n - 1));
        assert_eq!(r.totals.messages["agree_down"].count, u64::from(n - 1));
    }
}

#[test]
fn a_crash_in_the_middle_of_a_fan_out_cuts_it() {
    // Rank 10 crashes; its detector then sends a notice to ~12 overlay
    // links, one copy per µs. Crashing the detector 3 µs into that
    // fan-out leaves the other copies unsent: the first three receivers
    // forward it, and every live rank still learns both failures.
    let first = simulate(config(64, &["crash:10@300ms".to_owned()], 5));
    let f = &first.failures[0];
    let (detector, detected_us) = (
        f.detector.expect("detected"),
        (f.detected_at_ms.expect("detected") * 1e3).round() as u64,
    );
    assert_eq!(first.totals.never_left, 0, "{first}");
    let faults = [
        "crash:10@300ms".to_owned(),
        format!("crash:{detector}@{}us", detected_us + 3),
    ];
    let r = simulate(config(64, &faults, 5));
    assert!(r.totals.never_left > 0, "no copy was cut\n{r}");
    assert_eq!(r.failures[0].detected_at_ms, f.detected_at_ms, "{r}");
    assert_eq!(r.totals.missed_notifications, 0, "{r}");
    assert_views(&r, "cut fan-out");
}

#[test]
fn every_report_has_its_sections() {
    let r = simulate(config(16, &[], 1));
    let json = serde_json::to_value(&r).unwrap();
    for section in ["failures", "totals", "payloads", "agreements", "views"] {
        assert!(
            json[section].is_array() || json[section].is_object(),
            "{section}"
        );
    }
    assert_eq!(json["agreements"], serde_json::json!([]));
}

/// With same-host watching (`--local`: hosts of 8 ranks, in blocks) the
/// agreement takes the tree over hosts: without failures at most
/// 2·(1 + ⌈log4 H⌉) hops (at most the binomial tree's 2·(1 + ⌈log2 H⌉)); heads (each host's lowest rank: 0, 8, 16, …),
/// the root's host's other ranks and a whole host crashing during it,
/// every survivor still decides one value naming only crashed ranks.
#[test]
fn agreements_over_hosts_take_the_tree_over_hosts_and_survive_crashes() {
    let n = 64u32;
    let local = |faults: &[String], seed: u64| {
        let mut cfg = config(n, faults, seed);
        cfg.local = true;
        simulate(cfg)
    };
    let r = local(&["agree@300ms".to_owned()], 1);
    let a = assert_agreed(&r, "no failure");
    // ⌈log4 H⌉ levels of hosts (8 hosts: 2, where a binomial tree has 3).
    let levels4 = (0u16..).find(|&l| 4u32.pow(u32::from(l)) >= n / 8).unwrap();
    let bound = 2 * (1 + levels4);
    assert!(a.hops.unwrap() <= bound, "{:?} > {bound}\n{r}", a.hops);
    assert!(
        a.hops.unwrap() < 2 * overlay::levels(n) as u16,
        "fewer hops than over ranks: {:?}\n{r}",
        a.hops
    );
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["crash:0@300000us".to_owned()], "the root"),
        (
            vec![
                "crash:8@300002us".to_owned(),
                "crash:32@300004us".to_owned(),
            ],
            "two heads",
        ),
        (
            vec!["crash:3@300001us".to_owned()],
            "a rank of the root's host",
        ),
        (vec!["host:2@300003us".to_owned()], "a whole host"),
        (
            vec!["crash:0@300006us".to_owned(), "host:1@300002us".to_owned()],
            "the root and the next host",
        ),
    ];
    for (seed, (crashes, what)) in cases.into_iter().enumerate() {
        let mut faults = vec!["agree@300ms".to_owned()];
        faults.extend(crashes);
        let r = local(&faults, seed as u64 + 2);
        let a = assert_agreed(&r, what);
        assert_eq!(
            a.live,
            u64::from(n) - r.failures.len() as u64,
            "{what}\n{r}"
        );
        assert_views(&r, what);
    }
}
