//! Simulator scenarios, each over several seeds: completeness, accuracy,
//! hop bounds and forward-once, for N from 2 to 65536.
//!
//! The 65536-rank, 32-failure scenario is `#[ignore]`d (minutes in a debug
//! build); `benches/sim_scale.sh` and `cargo test --release -- --ignored`
//! run it.

use std::time::Duration;

mod support;

use ffd_protocol::sim::{FailureReport, SimConfig, SimReport, Simulator, Verdict};
use ffd_protocol::{BcastKind, Cause, InbandMode, Kind, QuorumMode, Rank, Time};
use support::{ms, sim_config, simulate};

fn ceil_log2(n: u32) -> u32 {
    ffd_protocol::overlay::levels(n)
}

/// `n` ranks on hosts of 8, each link's traffic tracked up to 4096 ranks.
fn config(n: u32, faults: &[&str], seed: u64) -> SimConfig {
    let mut cfg = sim_config(n, faults, seed);
    cfg.hosts = (n / 8).max(1);
    cfg.track_links = n <= 4096;
    cfg
}

/// Every injected failure detected and known to every live rank; no live
/// rank reported a live one.
fn assert_complete(r: &SimReport, what: &str) {
    assert_eq!(
        r.totals.false_reports, 0,
        "{what}: false reports {:?}",
        r.false_report_samples
    );
    assert_eq!(r.totals.missed_notifications, 0, "{what}: missed\n{r}");
    for f in &r.failures {
        assert!(
            f.detected_at_ms.is_some(),
            "{what}: rank {} never detected\n{r}",
            f.rank
        );
        assert!(
            f.all_notified_at_ms.is_some(),
            "{what}: rank {} not known everywhere\n{r}",
            f.rank
        );
    }
}

/// The hop count of a failure (the simulator always measures it).
fn hops(f: &FailureReport) -> u16 {
    f.max_hops.expect("the simulator counts hops")
}

/// Hops ≤ ⌈log2 N⌉ + failures (fewer than 2·log2 N failures), and no
/// directed link carried more notice copies than there were detections.
fn assert_bounds(r: &SimReport, n: u32, what: &str) {
    let k = r.failures.len() as u32;
    if k < 2 * ceil_log2(n).max(1) {
        for f in &r.failures {
            assert!(
                u32::from(hops(f)) <= ceil_log2(n) + k,
                "{what}: rank {} took {} hops\n{r}",
                f.rank,
                hops(f)
            );
        }
    }
    if let Some(max) = r.totals.max_notices_per_link {
        assert!(
            max <= k.max(1),
            "{what}: a link carried {max} notices for {k} failures"
        );
    }
}

#[test]
fn single_crash_at_every_size() {
    for n in [2u32, 3, 7, 64, 1000] {
        for seed in 1..=3 {
            let victim = (seed as u32 * 7919) % n;
            let r = simulate(config(n, &[&format!("crash:{victim}@300ms")], seed));
            let what = format!("n={n} seed={seed}");
            assert_complete(&r, &what);
            assert_bounds(&r, n, &what);
            let f = &r.failures[0];
            // In-band: the crashed rank's emitter sees its next write fail.
            assert_eq!(f.cause, Some(Cause::InBand), "{what}");
            assert!(
                f.detected_at_ms.unwrap() <= 300.0 + 10.0 + 3.0 + 0.01,
                "{what}\n{r}"
            );
            // The notice reaches everyone within a few link latencies per
            // hop, plus, at each hop, a fan-out of at most 2·⌈log2 N⌉
            // copies leaving one every send cost.
            let propagation = f.all_notified_at_ms.unwrap() - f.detected_at_ms.unwrap();
            let fan_out = 2 * ceil_log2(n) * SimConfig::new(n).net.send_cost.as_nanos() as u32;
            let per_hop = 0.003 + f64::from(fan_out) / 1e6;
            assert!(
                propagation <= per_hop * f64::from(ceil_log2(n) + 1),
                "{what}: {propagation} ms"
            );
            // Forward-once: a notice copy per live overlay link, at most.
            let links = u64::from(n - 1) * u64::from(2 * ceil_log2(n));
            let messages = f.messages.expect("the simulator counts messages");
            assert!(
                messages <= links + 1,
                "{what}: {messages} notices for {links} links"
            );
        }
    }
}

#[test]
fn single_crash_detected_by_timeout_without_inband() {
    for n in [3u32, 64, 1000] {
        let mut cfg = config(n, &["crash:1@300ms"], 4);
        cfg.net.inband_latency = None;
        let r = simulate(cfg);
        assert_complete(&r, "no in-band");
        let f = &r.failures[0];
        assert_eq!(f.cause, Some(Cause::Timeout));
        let latency = f.detected_at_ms.unwrap() - 300.0;
        assert!(
            (90.0..=100.0 + 25.0 + 0.1).contains(&latency),
            "detected {latency} ms after the crash"
        );
    }
}

#[test]
fn sixty_five_thousand_ranks_single_crash() {
    let n = 65536;
    let r = simulate(config(n, &["crash:40000@300ms"], 1));
    assert_complete(&r, "65536");
    assert_bounds(&r, n, "65536");
    assert!(u32::from(hops(&r.failures[0])) <= ceil_log2(n));
}

#[test]
fn consecutive_failures_mend_around_the_gap() {
    for n in [64u32, 1000] {
        for k in [2u32, 3, 5, 8] {
            for inband in [true, false] {
                let mut cfg = config(n, &[&format!("consecutive:10+{k}@300ms")], u64::from(k));
                cfg.engine.ring = ffd_protocol::RingKind::Rank;
                if !inband {
                    cfg.net.inband_latency = None;
                }
                let r = simulate(cfg);
                let what = format!("n={n} k={k} inband={inband}");
                assert_complete(&r, &what);
                assert_bounds(&r, n, &what);
                assert_eq!(r.failures.len(), k as usize);
                // Mending walks the gap: without in-band evidence, one timeout per rank.
                let last = r
                    .failures
                    .iter()
                    .filter_map(|f| f.detected_at_ms)
                    .fold(0.0, f64::max);
                let bound = if inband {
                    300.0 + 13.0 + 3.5 * f64::from(k)
                } else {
                    300.0 + 125.0 * f64::from(k) + 1.0
                };
                assert!(last <= bound, "{what}: last detection at {last}\n{r}");
            }
        }
    }
}

#[test]
fn random_failures_up_to_twice_log2_n() {
    for n in [7u32, 64, 1000] {
        let k = 2 * ceil_log2(n) - 1;
        for seed in 1..=3 {
            let r = simulate(config(n, &[&format!("random:{k}@300ms")], seed));
            let what = format!("n={n} k={k} seed={seed}");
            assert_complete(&r, &what);
            assert_bounds(&r, n, &what);
            assert_eq!(r.failures.len(), k as usize);
        }
    }
}

#[test]
fn inband_suspect_mode_checks_before_declaring() {
    let n = 64;
    let ring = ffd_protocol::Ring::new(
        ffd_protocol::RingKind::Topology,
        &(0..n).map(|r| r / 8).collect::<Vec<_>>(),
        0,
    );
    let observer_of_5 = ring.successors(5).next().unwrap();
    let glitch = format!("glitch:5>{observer_of_5}@250ms");
    // Declare, without quorum: a spurious error on the ring link is taken
    // at its word.
    let mut cfg = config(n, &[&glitch], 3);
    cfg.engine.ring_seed = 1;
    cfg.engine.quorum = QuorumMode::Off;
    let declare = simulate(cfg.clone());
    assert_eq!(
        declare.totals.false_reports, 1,
        "declare mode trusts the error\n{declare}"
    );
    // With a quorum (the default) a spurious error is silence, not proof:
    // an accusation, which the accused refutes.
    cfg.engine.quorum = QuorumMode::Majority;
    let majority = simulate(cfg.clone());
    assert_eq!(majority.totals.false_reports, 0, "{majority}");
    assert!(majority.totals.self_excluded.is_empty(), "{majority}");
    assert!(
        majority
            .totals
            .messages
            .get("refute")
            .is_some_and(|k| k.count > 0),
        "the accused refuted\n{majority}"
    );
    cfg.engine.quorum = QuorumMode::Off;
    // Suspect: the observer answers its probe, nothing is declared; a real
    // crash is still found within the suspect timeout, before the timeout.
    cfg.engine.inband = InbandMode::Suspect;
    cfg.faults.push("crash:20@300ms".parse().unwrap());
    let suspect = simulate(cfg);
    assert_complete(&suspect, "suspect");
    let f = &suspect.failures[0];
    assert_eq!(f.cause, Some(Cause::InBand));
    let latency = f.detected_at_ms.unwrap() - 300.0;
    assert!(
        latency <= 10.0 + 3.0 + 50.0 + 0.1,
        "{latency} ms\n{suspect}"
    );
}

#[test]
fn chord_broadcast_is_complete_with_fewer_messages() {
    let n = 1000;
    for spec in ["crash:17@300ms", "random:12@300ms"] {
        // Fan-outs leaving at once: the hops are the overlay's. (With a
        // send cost, a copy sent late in a fan-out can be overtaken by a
        // longer path, and chord's first copy to a rank may take more hops
        // than its tree's depth: 12 for 10 levels, crash:17, seed 5.)
        let instant = |mut cfg: SimConfig| {
            cfg.net.send_cost = Duration::ZERO;
            cfg
        };
        let bmg = simulate(instant(config(n, &[spec], 5)));
        let mut cfg = instant(config(n, &[spec], 5));
        cfg.engine.bcast = BcastKind::Chord;
        let chord = simulate(cfg);
        assert_complete(&chord, spec);
        assert_bounds(&chord, n, spec);
        let mut cfg = config(n, &[spec], 5);
        cfg.engine.bcast = BcastKind::Chord;
        assert_complete(&simulate(cfg), spec);
        let count = |r: &SimReport| r.totals.messages.get("notice").map_or(0, |k| k.count);
        assert!(
            count(&chord) * 10 < count(&bmg) * 6,
            "chord {} vs bmg {}",
            count(&chord),
            count(&bmg)
        );
    }
}

#[test]
fn a_whole_host_is_detected_within_one_timeout() {
    for (n, hosts) in [(64u32, 8u32), (1000, 125)] {
        for inband in [true, false] {
            let mut cfg = config(n, &["host:3@300ms"], 9);
            cfg.hosts = hosts;
            if !inband {
                cfg.net.inband_latency = None;
            }
            let r = simulate(cfg);
            let what = format!("n={n} inband={inband}");
            assert_complete(&r, &what);
            assert_eq!(r.failures.len() as u32, n / hosts);
            let times: Vec<f64> = r
                .failures
                .iter()
                .map(|f| f.detected_at_ms.unwrap())
                .collect();
            let spread = times.iter().cloned().fold(f64::MIN, f64::max)
                - times.iter().cloned().fold(f64::MAX, f64::min);
            assert!(
                spread <= 100.0,
                "{what}: detections spread over {spread} ms\n{r}"
            );
            // Each victim was detected by a survivor on another host.
            for f in &r.failures {
                let d = f.detector.unwrap();
                assert!(
                    r.failures.iter().all(|g| g.rank != d),
                    "{what}: {d} is a victim"
                );
            }
        }
    }
}

#[test]
fn a_hung_rank_that_resumes_is_excluded_and_reports_nobody() {
    for n in [3u32, 7, 64, 1000] {
        for seed in 1..=2 {
            let victim = n / 2;
            let r = simulate(config(
                n,
                &[
                    &format!("hang:{victim}@300ms"),
                    &format!("resume:{victim}@900ms"),
                ],
                seed,
            ));
            let what = format!("n={n} seed={seed}");
            assert_complete(&r, &what);
            assert_eq!(r.failures[0].cause, Some(Cause::Timeout), "{what}");
            assert_eq!(r.totals.self_excluded, vec![victim], "{what}");
            assert_eq!(
                r.totals.reports_by_faulty_ranks, 0,
                "{what}: the resumed rank declared someone"
            );
        }
    }
}

#[test]
fn a_resumed_rank_learns_its_exclusion_from_its_standing_check() {
    // Drop every notice sent to the victim while it is stopped, so the
    // detector's direct exclusion notice is lost: the resumed rank's lag
    // guard must hold it back and its standing check must exclude it.
    let n = 64;
    let victim: Rank = 20;
    let mut sim = Simulator::new(config(n, &["hang:20@300ms", "resume:20@900ms"], 3)).unwrap();
    let resume = Time::ZERO + ms(900);
    sim.set_rule(Box::new(move |m| {
        if m.to == victim && m.kind == Some(Kind::Notice) && m.at < resume {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
    let r = sim.run();
    assert_complete(&r, "standing check");
    assert!(r.totals.dropped_by_network >= 1);
    assert_eq!(r.totals.self_excluded, vec![victim]);
    assert_eq!(
        r.totals.reports_by_faulty_ranks, 0,
        "the resumed rank declared someone"
    );
    assert!(sim.engine(victim).stats().health.self_lag_trips >= 1);
    assert!(sim.engine(victim).stats().sync.sync_requests_sent >= 1);
}

/// Links that take longer than a timeout to set up, as `tcp;ofi_rxm` on a
/// busy host (hundreds of ms): only ring and overlay links are up from the
/// start, and the runtime's start-up grace applies.
fn cold_links(n: u32, faults: &[&str], seed: u64) -> SimConfig {
    let mut cfg = config(n, faults, seed);
    cfg.engine.ring = ffd_protocol::RingKind::Rank;
    cfg.engine.startup_grace = None;
    cfg.net.connect = Some(ms(300));
    cfg
}

/// The N = 128 cascade in miniature: 11 declares its hung emitters 10 and
/// 9, and mends to 8 (ring distance 3, not an overlay link), whose link
/// takes 300 ms to come up. Judged from the mending, 8 would be declared
/// after 100 ms, excluded, and the next one with it; judged from the moment
/// the link is up, it is not. One late rank costs only itself.
#[test]
fn a_mend_over_a_cold_link_gives_the_new_emitter_a_timeout_from_link_up() {
    for seed in 1..=3 {
        let mut sim =
            Simulator::new(cold_links(64, &["hang:10@300ms", "hang:9@300ms"], seed)).unwrap();
        let r = sim.run();
        let what = format!("seed={seed}");
        assert_complete(&r, &what);
        assert_eq!(r.failures.len(), 2, "{what}");
        assert!(r.totals.self_excluded.is_empty(), "{what}: {r}");
        assert_eq!(sim.engine(11).emitter(), Some(8), "{what}");
        assert!(
            sim.engine(11).stats().observation.mend_links_confirmed >= 2,
            "{what}: the mendings were timed from their link-up"
        );
    }
}

/// The bound that mend rate limit costs: a new emitter that is itself hung
/// behind a cold link (its link never comes up) is declared a link grace
/// plus a timeout after the mending.
#[test]
fn a_hung_emitter_behind_a_cold_link_is_declared_after_the_link_grace() {
    let r = simulate(cold_links(
        64,
        &["hang:10@300ms", "hang:9@300ms", "hang:8@300ms"],
        1,
    ));
    assert_complete(&r, "three hung");
    assert_eq!(r.failures.len(), 3);
    let of = |rank| r.failures.iter().find(|f| f.rank == rank).unwrap();
    // 10 and 9 one timeout apart (9 is 11's overlay neighbour: a warm
    // link), then 8 a link grace (1 s) and a timeout later.
    let (t10, t9, t8) = (
        of(10).detected_at_ms.unwrap(),
        of(9).detected_at_ms.unwrap(),
        of(8).detected_at_ms.unwrap(),
    );
    assert!(t10 <= 300.0 + 125.1 && t9 <= t10 + 125.1, "{r}");
    assert!(
        (t9 + 1100.0..=t9 + 1100.0 + 25.1).contains(&t8),
        "8 declared at {t8}, 9 at {t9}\n{r}"
    );
}

#[test]
fn a_partitioned_rank_is_declared_and_excluded_after_healing() {
    for n in [7u32, 64, 1000] {
        let victim = 3;
        let r = simulate(config(
            n,
            &[&format!("partition:{victim}@300ms"), "heal@800ms"],
            2,
        ));
        let what = format!("n={n}");
        assert_complete(&r, &what);
        assert_eq!(r.failures[0].cause, Some(Cause::Timeout), "{what}");
        assert_eq!(
            r.totals.self_excluded,
            vec![victim],
            "{what}: excluded once healed\n{r}"
        );
    }
}

/// Without in-band errors (silence only) and without quorum, the survivor
/// declares everybody; with a quorum it cannot tell this from being cut
/// off, and excludes itself; with in-band errors (proof) it declares them
/// all and keeps running either way (below).
#[test]
fn all_but_one_failed() {
    for n in [2u32, 3, 7, 64] {
        let survivor = n - 1;
        let mut cfg = config(n, &[&format!("allbut:{survivor}@300ms")], 1);
        cfg.net.inband_latency = None;
        cfg.engine.quorum = QuorumMode::Off;
        let mut sim = Simulator::new(cfg).unwrap();
        let r = sim.run();
        let what = format!("n={n}");
        assert_complete(&r, &what);
        assert_eq!(r.failures.len() as u32, n - 1);
        let last = sim.engine(survivor);
        assert_eq!(last.failed().len() as u32, n - 1, "{what}");
        assert_eq!(
            (last.emitter(), last.observer(), last.watched_slot()),
            (None, None, None),
            "{what}"
        );
    }
}

#[test]
fn the_survivor_of_a_silent_mass_failure_excludes_itself_and_of_a_proven_one_goes_on() {
    for n in [2u32, 3, 7, 64] {
        let survivor = n - 1;
        let what = format!("n={n}");
        let mut cfg = config(n, &[&format!("allbut:{survivor}@300ms")], 1);
        cfg.net.inband_latency = None;
        let timeout = cfg.engine.timeout;
        let silent = simulate(cfg.clone());
        assert_eq!(silent.totals.false_reports, 0, "{what}\n{silent}");
        assert_eq!(silent.totals.self_excluded, vec![survivor], "{what}");
        assert_eq!(silent.totals.no_quorum_exclusions, vec![survivor], "{what}");
        let at = silent.totals.self_excluded_at_ms[0];
        let bound = 300.0 + 2.0 * timeout.as_secs_f64() * 1e3;
        assert!(at <= bound, "{what}: excluded at {at} ms > {bound}");
        assert!(
            silent.failures.iter().all(|f| f.detected_at_ms.is_none()),
            "{what}: silence confirmed by nobody\n{silent}"
        );
        // Proof (errors from the dead processes): declared, no quorum needed.
        cfg.net.inband_latency = Some(Duration::from_millis(3));
        let mut sim = Simulator::new(cfg).unwrap();
        let proven = sim.run();
        assert_complete(&proven, &what);
        assert!(proven.totals.self_excluded.is_empty(), "{what}\n{proven}");
        assert_eq!(sim.engine(survivor).failed().len() as u32, n - 1, "{what}");
    }
}

#[test]
fn all_ranks_leaving_report_no_failure() {
    for n in [2u32, 3, 7, 64, 1000] {
        for seed in 1..=2 {
            let r = simulate(config(n, &["leave:all@300ms"], seed));
            let what = format!("n={n} seed={seed}");
            assert_eq!(
                r.totals.false_reports, 0,
                "{what}: {:?}",
                r.false_report_samples
            );
            assert!(r.failures.is_empty());
            let failed_events: u64 = r.totals.reports_by_faulty_ranks;
            assert_eq!(failed_events, 0, "{what}");
            assert!(r.totals.left_events > 0, "{what}");
        }
    }
}

#[test]
fn one_rank_leaving_is_reported_as_left_everywhere() {
    for n in [3u32, 64, 1000] {
        let r = simulate(config(n, &["leave:1@300ms"], 1));
        assert_eq!(r.totals.false_reports, 0, "n={n}");
        assert_eq!(r.totals.left_events, u64::from(n - 1), "n={n}");
    }
}

#[test]
fn payloads_reach_every_live_rank_once() {
    for n in [2u32, 64, 1000] {
        let r = simulate(config(
            n,
            &["crash:1@300ms", "bcast:0@400ms", "bcast:0@410ms"],
            2,
        ));
        assert_complete(&r, "payload");
        // Every live rank, the origin included (it delivers its own).
        assert_eq!(r.totals.payloads_delivered, 2 * u64::from(n - 1), "n={n}");
        assert_eq!(r.payloads.len(), 2, "n={n}");
        for p in &r.payloads {
            assert_eq!(p.delivered_by_live, n - 1, "n={n}: {p:?}");
        }
    }
}

#[test]
fn delayed_notices_still_complete() {
    let n = 1000;
    let mut sim = Simulator::new(config(n, &["random:6@300ms"], 8)).unwrap();
    let mut count = 0u64;
    sim.set_rule(Box::new(move |m| {
        count += 1;
        if m.kind == Some(Kind::Notice) && count % 3 == 0 {
            Verdict::Delay(ms(5))
        } else {
            Verdict::Pass
        }
    }));
    let r = sim.run();
    assert_complete(&r, "delayed");
}

#[test]
fn ranks_cut_off_from_notices_learn_through_the_digest_sync() {
    // Ranks 100..=104 (ring neighbours, rank ring) never receive a notice:
    // the broadcast cannot inform them. Each learns from its emitter's
    // heartbeat digest, asks for the difference, and passes it on.
    let n = 200;
    let mut cfg = config(n, &["crash:5@300ms", "crash:77@300ms"], 6);
    cfg.engine.ring = ffd_protocol::RingKind::Rank;
    let mut sim = Simulator::new(cfg).unwrap();
    sim.set_rule(Box::new(|m| {
        if m.kind == Some(Kind::Notice) && (100..=104).contains(&m.to) {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
    let r = sim.run();
    assert_complete(&r, "blackout");
    let syncs = r.totals.messages.get("sync_request").map_or(0, |k| k.count);
    assert!(syncs >= 5, "each blacked-out rank asked its emitter\n{r}");
    for rank in 100..=104 {
        assert_eq!(sim.engine(rank).failed(), &[5, 77]);
        assert!(
            sim.engine(rank).stats().sync.ranks_learned_by_sync >= 2,
            "rank {rank}"
        );
    }
}

#[test]
fn identical_seeds_give_identical_runs() {
    let faults = [
        "random:5@300ms",
        "hang:3@350ms",
        "resume:3@900ms",
        "leave:9@400ms",
    ];
    let a = simulate(config(500, &faults, 42)).deterministic_part();
    let b = simulate(config(500, &faults, 42)).deterministic_part();
    assert_eq!(a, b);
    let json = |r: &SimReport| serde_json::to_string(r).expect("a report serialises");
    assert_eq!(json(&a), json(&b));
    let c = simulate(config(500, &faults, 43)).deterministic_part();
    let ranks = |r: &SimReport| r.failures.iter().map(|f| f.rank).collect::<Vec<_>>();
    assert_ne!(ranks(&a), ranks(&c), "another seed picks other victims");
}

/// Authentication is off by default in the simulator (nobody forges
/// there, and no copy arrives twice or out of order on its link) and
/// changes no outcome: the same run with every tag and sequence number
/// made and checked reports the same, through crashes, a hang and its
/// resumption (held copies), a leave, payloads and delayed copies (a
/// rule). With it, the copies a rule sees carry a tag and numbers counting
/// up per link; without, a zero tag and number 1.
#[test]
fn authentication_on_or_off_the_report_is_the_same() {
    let faults = [
        "random:3@300ms",
        "hang:3@350ms",
        "resume:3@500ms",
        "leave:9@400ms",
        "bcast:12@320ms",
    ];
    let run_with = |authenticate: bool| {
        let mut cfg = config(300, &faults, 5);
        cfg.authenticate = authenticate;
        let mut sim = Simulator::new(cfg).unwrap();
        // (copies with a tag, copies numbered above 1, copies)
        let tags = std::rc::Rc::new(std::cell::Cell::new((0u64, 0u64, 0u64)));
        let seen = tags.clone();
        sim.set_rule(Box::new(move |m| {
            let bytes = m.message.to_vec();
            let tag = &bytes[bytes.len() - ffd_protocol::wire::TAG_LEN..];
            let (tagged, numbered, count) = seen.get();
            let tagged = tagged + u64::from(tag.iter().any(|&b| b != 0));
            let numbered = numbered + u64::from(m.message.seq() > 1);
            seen.set((tagged, numbered, count + 1));
            if m.kind == Some(Kind::Notice) && count % 4 == 0 {
                Verdict::Delay(ms(3))
            } else {
                Verdict::Pass
            }
        }));
        let r = sim.run().deterministic_part();
        (r, tags.get())
    };
    let (on, (tagged_on, numbered_on, copies)) = run_with(true);
    let (off, (tagged_off, numbered_off, _)) = run_with(false);
    assert_complete(&off, "authentication off");
    assert!(copies > 1000, "{copies} copies");
    assert_eq!(tagged_on, copies, "authenticated, every copy carries a tag");
    assert!(numbered_on > copies / 2, "and numbers count up per link");
    assert_eq!((tagged_off, numbered_off), (0, 0), "without, neither");
    assert_eq!(on, off);
}

#[test]
#[ignore = "minutes in a debug build; run with --release (benches/sim_scale.sh does)"]
fn sixty_five_thousand_ranks_thirty_two_random_crashes() {
    let n = 65536;
    let r = simulate(config(n, &["random:32@300ms"], 1));
    assert_complete(&r, "65536 x 32");
    assert_bounds(&r, n, "65536 x 32");
}

/// The runtime's liveness port, modelled (`NetModel::liveness`): one rank
/// per host, so no same-host witness. A crashed rank's observer is refused
/// by its port `inband_latency` after the crash and declares it on that
/// proof, whatever the next heartbeat write (a period of 50 ms here); a
/// hung rank keeps its port and is declared by the timeout only.
#[test]
fn the_liveness_port_refuses_a_crash_and_never_a_hang() {
    let inband = Duration::from_millis(3);
    for n in [8u32, 64] {
        for seed in 1..=3 {
            let victim = n / 2;
            let setup = |fault: String| {
                let mut cfg = sim_config(n, &[fault], seed);
                cfg.hosts = n;
                cfg.local = true;
                cfg.engine.period = Duration::from_millis(50);
                cfg.engine.timeout = Duration::from_millis(500);
                cfg.net.inband_latency = Some(inband);
                cfg.net.liveness = true;
                cfg
            };
            let what = format!("n={n} seed={seed}");
            let r = simulate(setup(format!("crash:{victim}@1017ms")));
            assert_complete(&r, &what);
            let f = &r.failures[0];
            assert_eq!(f.cause, Some(Cause::InBand), "{what}");
            let delay = f.detected_at_ms.unwrap() - f.injected_at_ms;
            assert!(
                delay <= inband.as_secs_f64() * 1e3 + 0.5,
                "{what}: declared {delay} ms after the crash\n{r}"
            );
            let r = simulate(setup(format!("hang:{victim}@1017ms")));
            assert_complete(&r, &what);
            let f = &r.failures[0];
            assert_eq!(f.cause, Some(Cause::Timeout), "{what}\n{r}");
            let delay = f.detected_at_ms.unwrap() - f.injected_at_ms;
            assert!(delay >= 500.0, "{what}: declared {delay} ms after the hang");
        }
    }
}
