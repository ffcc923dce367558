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

/// A delayed flood (`docs/design.md` §4.11, "Spent ballots"): 24 of 64
/// ranks, consecutive on the ring, are cut off at 100 ms, so only the
/// first of them (the accuser) finds its emitter silent. Its round's flood
/// reaches 16 ranks of its side at once (the early ranks) and 7 others
/// late, one every 18 ms (their copies held back), so its count keeps
/// growing for 1.26 timeouts and the round is never renewed. The last
/// three late ranks are the accuser's own overlay neighbours (their flood
/// parent is the accuser), and their copies to the early ranks are held
/// until 1.55 timeouts after the round began, when the early ranks'
/// ballots have expired. A rank that forgot its expired ballot re-joined
/// the round from such a copy under a second flood parent, so its side
/// was counted twice, a majority of 64, and the accuser declared a live
/// rank of the other side (so this test fails without the fix). A spent
/// ballot is kept and the copy refused: the count stays at 24, and the
/// side excludes itself.
#[test]
fn a_delayed_flood_does_not_count_a_side_twice() {
    for seed in 1..=3 {
        delayed_flood(seed);
    }
}

/// The scenario above with the network's `seed` (its jitter).
fn delayed_flood(seed: u64) {
    use std::cell::Cell;
    use std::rc::Rc;

    use ffd_protocol::sim::{Simulator, Verdict};
    use ffd_protocol::{Kind, Time};

    let n = 64;
    let side = 24;
    let mut cfg = config(&[], seed);
    let ring = Simulator::new(cfg.clone()).unwrap().ring().clone();
    // The side: ring positions 10..34; its first rank's emitter (position
    // 9) is on the other side, the others watch ranks of their own side.
    let first = 10;
    let at = |k: u32| ring.rank_at(first + k);
    let accuser = at(0);
    // Late, in the order they join: four the accuser does not link to,
    // then three it does (positions +4, +8, +16 of its overlay links).
    let late: Vec<Rank> = [6, 10, 20, 23, 4, 8, 16].into_iter().map(at).collect();
    let direct: Vec<Rank> = late[4..].to_vec();
    let cut: Vec<Rank> = sorted((0..side).map(at).collect());
    cfg.faults = vec![spec(&cut).parse().unwrap(), "heal@2s".parse().unwrap()];
    let timeout = cfg.engine.timeout;
    let mut sim = Simulator::new(cfg).unwrap();
    let began: Rc<Cell<Option<Time>>> = Rc::default();
    let held: Rc<Cell<u32>> = Rc::default();
    let (seen, stale) = (began.clone(), held.clone());
    let on_side = cut.clone();
    sim.set_rule(Box::new(move |m| {
        let inside = on_side.binary_search(&m.from).is_ok() && on_side.binary_search(&m.to).is_ok();
        if m.kind != Some(Kind::Suspect) || !inside {
            return Verdict::Pass;
        }
        let t0 = match seen.get() {
            Some(t0) => t0,
            None if m.from == accuser => {
                seen.set(Some(m.at));
                m.at
            }
            None => return Verdict::Pass,
        };
        if m.at.saturating_since(t0) > timeout * 2 {
            // Later floods go as the network takes them.
            return Verdict::Pass;
        }
        let until = |t: Time| Verdict::Delay(t.saturating_since(m.at));
        let join = |j: usize| t0 + Duration::from_millis(18 * (j as u64 + 1));
        if let Some(j) = late.iter().position(|&r| r == m.to) {
            // A late rank joins at its time, from the accuser's copy if
            // the accuser links to it.
            return if m.from == accuser {
                until(join(j))
            } else {
                until(join(j) + Duration::from_millis(1))
            };
        }
        if direct.contains(&m.from) {
            // Its copies to early ranks arrive after their ballots expired.
            stale.set(stale.get() + 1);
            return until(t0 + timeout * 3 / 2 + Duration::from_millis(5));
        }
        Verdict::Pass
    }));
    let r = sim.run();
    let stats = sim.engine(accuser).stats().quorum.clone();
    let Some(t0) = began.get() else {
        panic!("the accuser never flooded\n{r}");
    };
    // The stale copies left, and the round was still counting when they
    // arrived: the accuser gave up only after them.
    assert!(held.get() > 0, "no copy was held back\n{r}");
    let stale_at = t0 + timeout * 3 / 2 + Duration::from_millis(5);
    let t = &r.totals;
    let excluded_at = t
        .self_excluded
        .iter()
        .zip(&t.self_excluded_at_ms)
        .find(|(r, _)| **r == accuser)
        .map(|(_, at)| *at);
    assert!(
        t.no_quorum_exclusions.contains(&accuser),
        "the accuser {accuser} did not exclude itself: {stats:?}\n{r}"
    );
    assert!(
        excluded_at.is_some_and(|at| at > (stale_at - Time::ZERO).as_secs_f64() * 1e3),
        "the accuser {accuser} gave up at {excluded_at:?} ms, before the stale copies at {stale_at}\n{r}"
    );
    assert_eq!(
        (
            t.false_reports,
            t.false_report_events,
            t.reports_by_faulty_ranks
        ),
        (0, 0, 0),
        "seed {seed}: a side of {side} counted itself a majority of {n}: {:?}\naccuser {accuser}: {stats:?}\n{r}",
        r.false_report_samples
    );
    assert_eq!(stats.quorum_confirmations, 0, "{stats:?}");
}
