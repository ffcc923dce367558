//! Same-host watching through the real launcher and agents
//! (`docs/design.md` §4.12 "Hosts"): `ffd run` over `tcp;ofi_rxm` on loopback,
//! period 10 ms, timeout 100 ms, `FFD_LOCAL=auto` unless a test says
//! otherwise. A kill is seen through exit words as it begins, or with
//! `FFD_LOCAL=pidfd` through a pidfd once it is over (cause `exited`), a hang
//! through the shared-memory counters, a dead leader is replaced, a whole
//! emulated host is one notice. Jobs run one at a time (two cores).

use std::process::Output;

use serde_json::Value;

#[path = "../../tests/prereq/mod.rs"]
mod prereq;
mod support;
use support::{TIMEOUT_MS, assert_all_learned, assert_no_false_reports, failure_of, output_text};

/// Runs `ffd run` with `args` and `FFD_LOCAL=local`; returns the JSON
/// report and the output.
fn run_job(local: &str, args: &[&str]) -> (Value, Output) {
    run_job_with(local, &[], args)
}

/// `run_job` with more variables for the agents; the launcher must
/// succeed.
fn run_job_with(local: &str, env: &[(&str, &str)], args: &[&str]) -> (Value, Output) {
    let (report, out) = support::run_job(local, env, args);
    assert!(out.status.success(), "{}", output_text(&out));
    (report, out)
}

/// How long after its fault `rank` was first declared, in ms.
fn delay_of(report: &Value, rank: u64) -> f64 {
    let f = failure_of(report, rank);
    f["detected_at_ms"].as_f64().unwrap() - f["injected_at_ms"].as_f64().unwrap()
}

/// Whether this machine gives pidfds; otherwise the test is skipped, and
/// fails under `FFD_TEST_REQUIRE_ALL=1` (`tests/prereq/mod.rs`).
fn pidfds_here() -> bool {
    prereq::available(&prereq::this_test(), &[prereq::pidfd()])
}

/// Whether this machine has exit words (`futex_waitv`, Linux ≥ 5.16);
/// otherwise as [`pidfds_here`].
fn exit_words_here() -> bool {
    prereq::available(&prereq::this_test(), &[prereq::exit_words()])
}

/// Kills rank 2 of 6 on one host under `FFD_LOCAL=local`: it is declared
/// `exited` within a timeout, every survivor learns it once (from its own
/// watching or from the first notice, whichever reached its Engine
/// first), nobody live is reported. Returns the report.
fn a_killed_rank_is_exited_for_every_survivor(local: &str) -> Value {
    a_killed_rank_is_exited_for_every_survivor_with(local, &[])
}

/// `a_killed_rank_is_exited_for_every_survivor` with more variables for
/// the agents.
fn a_killed_rank_is_exited_for_every_survivor_with(local: &str, env: &[(&str, &str)]) -> Value {
    let (report, _) = run_job_with(
        local,
        env,
        &["-n", "6", "--kill", "2@500ms", "--duration", "1500ms"],
    );
    let f = failure_of(&report, 2);
    assert_eq!(f["cause"], "exited", "{f:#}");
    let delay = delay_of(&report, 2);
    // Exit words wake a watcher as the exit begins, a pidfd about 0.15 ms
    // after the kernel's teardown; on a loaded machine either takes longer.
    assert!(
        (0.0..TIMEOUT_MS).contains(&delay),
        "{delay} ms after the kill"
    );
    assert_all_learned(&report, 2, &[0, 1, 3, 4, 5]);
    assert_no_false_reports(&report);
    for (rank, s) in survivors(&report, 2) {
        let d = &s["engine"]["detections"];
        let known = d["exited"].as_u64().unwrap() + d["notice"].as_u64().unwrap();
        assert_eq!(known, 1, "rank {rank}: {s}");
    }
    report
}

/// The stats of every rank but `victim`, by rank.
fn survivors(report: &Value, victim: u64) -> Vec<(&String, &Value)> {
    report["stats"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(rank, _)| **rank != victim.to_string())
        .collect()
}

#[test]
fn a_killed_rank_is_declared_exited_through_its_exit_words() {
    if !exit_words_here() {
        return;
    }
    let report = a_killed_rank_is_exited_for_every_survivor("auto");
    // The default FFD_SCHED=boost: each survivor's exit-word thread lifted
    // its progress thread to handle the exit (and the leaves at the end),
    // where the host grants real-time priority; where not, the stats say
    // so and nothing was lifted.
    let allowed = fifo_allowed_here();
    for (rank, s) in survivors(&report, 2) {
        let lifts = s["runtime"]["local"]["boost_lifts"].as_u64().unwrap();
        match &allowed {
            Ok(()) => {
                assert_eq!(s["sched"], "boost", "rank {rank}: {s}");
                assert!(lifts >= 1, "rank {rank}: {s}");
            }
            Err(_) => {
                let sched = s["sched"].as_str().unwrap_or_default();
                assert!(
                    sched.starts_with("normal (FFD_SCHED=boost refused: "),
                    "rank {rank}: {s}"
                );
                assert_eq!(lifts, 0, "rank {rank}: {s}");
            }
        }
    }
    // Every survivor held a word for each other rank and waited on the
    // words the others held for it; rank 2's thread died holding them, so
    // each survivor's exit-word thread saw the death (whether its Engine
    // heard it first from there, from the pidfd, or from a notice).
    for (rank, s) in survivors(&report, 2) {
        assert_eq!(s["runtime"]["local"]["exit_words"], 5, "rank {rank}: {s}");
        assert_eq!(
            s["runtime"]["local"]["exit_words_seen"], 1,
            "rank {rank}: {s}"
        );
    }
    // The others left cleanly at the end: released words are no deaths.
    assert_eq!(
        report["failures"].as_array().unwrap().len(),
        1,
        "{report:#}"
    );
}

/// Whether this process may use SCHED_FIFO (root, CAP_SYS_NICE or
/// `ulimit -r`), asked from a thread of its own: the agents inherit it.
fn fifo_allowed_here() -> std::io::Result<()> {
    std::thread::spawn(ffd::node::set_current_thread_fifo)
        .join()
        .unwrap()
}

#[test]
fn under_the_normal_policy_nothing_is_lifted_and_a_kill_is_still_exited_everywhere() {
    if !exit_words_here() {
        return;
    }
    let report =
        a_killed_rank_is_exited_for_every_survivor_with("auto", &[("FFD_SCHED", "normal")]);
    for (rank, s) in survivors(&report, 2) {
        assert_eq!(s["sched"], "normal", "rank {rank}: {s}");
        assert_eq!(s["runtime"]["local"]["boost_lifts"], 0, "rank {rank}: {s}");
    }
}

#[test]
fn under_fifo_the_progress_threads_run_real_time_and_a_kill_is_still_exited_everywhere() {
    let allowed = fifo_allowed_here();
    let report = a_killed_rank_is_exited_for_every_survivor_with("auto", &[("FFD_SCHED", "fifo")]);
    for (rank, s) in survivors(&report, 2) {
        let sched = s["sched"].as_str().unwrap_or_default();
        match &allowed {
            // Already real-time: a lift only lets it run on every CPU.
            Ok(()) if ffd::node::exit_word_probe().is_ok() => {
                assert_eq!(sched, "fifo", "rank {rank}: {s}");
                let lifts = s["runtime"]["local"]["boost_lifts"].as_u64().unwrap();
                assert!(lifts >= 1, "rank {rank}: {s}");
            }
            Ok(()) => assert_eq!(sched, "fifo", "rank {rank}: {s}"),
            Err(e) => {
                eprintln!("SCHED_FIFO refused here ({e}): checking that the agents say so");
                assert!(
                    sched.starts_with("normal (FFD_SCHED=fifo refused: ")
                        && sched.contains("CAP_SYS_NICE"),
                    "rank {rank}: {s}"
                );
            }
        }
    }
}

#[test]
fn with_pidfds_only_a_killed_rank_is_declared_exited_and_every_survivor_is_told() {
    if !pidfds_here() {
        return;
    }
    let report = a_killed_rank_is_exited_for_every_survivor("pidfd");
    // Each survivor watched every other rank through a pidfd and saw the
    // exit itself; no exit words.
    for (rank, s) in survivors(&report, 2) {
        assert_eq!(s["runtime"]["local"]["pidfds"], 5, "rank {rank}: {s}");
        assert_eq!(s["runtime"]["local"]["exits_seen"], 1, "rank {rank}: {s}");
        assert_eq!(s["runtime"]["local"]["exit_words"], 0, "rank {rank}: {s}");
    }
}

/// The kernel shows the stopped rank's progress thread stopped (`T`) once
/// its counter is a timeout old: its observer declares it at once, with no
/// accusation round under the default `FFD_QUORUM=majority`.
#[test]
fn a_stopped_rank_is_found_through_its_counter_by_its_same_host_observer() {
    let (report, out) = run_job(
        "auto",
        &["-n", "4", "--stop", "2@500ms", "--duration", "1500ms"],
    );
    let f = failure_of(&report, 2);
    assert_eq!(
        (&f["cause"], &f["detector"]),
        (&"timeout".into(), &3.into()),
        "{f:#}"
    );
    assert_eq!(
        report["stats"]["3"]["engine"]["stopped_emitters_declared"], 1,
        "{:#}",
        report["stats"]["3"]
    );
    // It went onto the host's notice board: the other two read it there
    // and got no fabric copy.
    assert_eq!(report["stats"]["3"]["engine"]["board_posts"], 1);
    for r in ["0", "1"] {
        let e = &report["stats"][r]["engine"];
        assert_eq!(e["board_learned"], 1, "rank {r}: {e:#}");
        assert_eq!(e["received"]["notice"], 0, "rank {r}: {e:#}");
    }
    let timeline = output_text(&out);
    assert!(
        timeline.contains(
            "rank 3 detected rank 2 (timeout: stopped (the kernel's word), declared at once"
        ),
        "{timeline}"
    );
    let delay = delay_of(&report, 2);
    assert!(
        (TIMEOUT_MS * 0.5..=TIMEOUT_MS + 500.0).contains(&delay),
        "{delay} ms"
    );
    assert_all_learned(&report, 2, &[0, 1, 3]);
    assert_no_false_reports(&report);
    assert_eq!(
        report["failures"].as_array().unwrap().len(),
        1,
        "{report:#}"
    );
}

#[test]
fn without_pidfds_the_counters_still_catch_a_kill() {
    let (report, _) = run_job(
        "counters",
        &["-n", "4", "--kill", "1@500ms", "--duration", "1500ms"],
    );
    let f = failure_of(&report, 1);
    assert_eq!(
        (&f["cause"], &f["detector"]),
        (&"timeout".into(), &2.into()),
        "{f:#}"
    );
    assert!(delay_of(&report, 1) <= TIMEOUT_MS + 500.0);
    assert_all_learned(&report, 1, &[0, 2, 3]);
    assert_no_false_reports(&report);
    for (rank, s) in report["stats"].as_object().unwrap() {
        assert_eq!(s["runtime"]["local"]["pidfds"], 0, "rank {rank}: {s}");
        assert_eq!(s["runtime"]["local"]["exit_words"], 0, "rank {rank}: {s}");
    }
}

/// 3 hosts of 2: host 1 = ranks 1 and 4, silenced together (stopped, not
/// killed: a killed process's sockets are reset by its kernel, and that
/// in-band proof names each rank on its own, as it should; a host that
/// loses power or its network says nothing). One notice for the whole host,
/// under `quorum` (`FFD_QUORUM`).
fn a_whole_emulated_host_is_declared_in_one_notice(quorum: &str) {
    let (report, out) = run_job_with(
        "auto",
        &[("FFD_QUORUM", quorum)],
        &[
            "-n",
            "6",
            "--hosts",
            "3",
            "--stop",
            "1@500ms",
            "--stop",
            "4@500ms",
            "--duration",
            "1500ms",
        ],
    );
    let (a, b) = (failure_of(&report, 1), failure_of(&report, 4));
    assert_eq!(
        (&a["cause"], &b["cause"]),
        (&"timeout".into(), &"timeout".into())
    );
    assert_eq!(
        a["detector"], b["detector"],
        "one rank declared both: {report:#}"
    );
    for dead in [1, 4] {
        assert!(delay_of(&report, dead) <= TIMEOUT_MS + 500.0);
        assert_all_learned(&report, dead, &[0, 2, 3, 5]);
    }
    assert_no_false_reports(&report);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("declared host 1 failed: ranks 1, 4 in one notice"),
        "{stdout}"
    );
}

#[test]
fn a_whole_emulated_host_is_declared_in_one_notice_at_once_without_a_quorum() {
    a_whole_emulated_host_is_declared_in_one_notice("off");
}

#[test]
fn a_whole_emulated_host_is_one_accusation_and_one_notice_under_a_majority() {
    a_whole_emulated_host_is_declared_in_one_notice("majority");
}

#[test]
fn a_killed_leader_is_replaced_and_the_next_failure_is_still_found() {
    if !pidfds_here() {
        return;
    }
    // 2 hosts of 3: host 0 = {0, 2, 4} led by 0, host 1 = {1, 3, 5} led by 1.
    // Rank 0 dies: rank 2 leads host 0. Then host 1 falls silent whole:
    // only the fabric ring, now led by rank 2 on host 0, can find it.
    let (report, out) = run_job_with(
        "auto",
        &[("FFD_QUORUM", "off")],
        &[
            "-n",
            "6",
            "--hosts",
            "2",
            "--kill",
            "0@500ms",
            "--stop",
            "1@1500ms",
            "--stop",
            "3@1500ms",
            "--stop",
            "5@1500ms",
            "--duration",
            "2500ms",
        ],
    );
    // Its host saw the exit; its fabric neighbour may see the reset of its
    // connection first: both are proof.
    let cause = failure_of(&report, 0)["cause"].as_str().unwrap().to_owned();
    assert!(cause == "exited" || cause == "inband", "{cause}");
    assert_all_learned(&report, 0, &[2, 4]);
    for dead in [1, 3, 5] {
        let f = failure_of(&report, dead);
        assert_eq!(
            (&f["cause"], &f["detector"]),
            (&"timeout".into(), &2.into()),
            "{f:#}"
        );
        assert!(delay_of(&report, dead) <= TIMEOUT_MS + 500.0);
        assert_all_learned(&report, dead, &[2, 4]);
    }
    assert_no_false_reports(&report);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("rank 2 declared host 1 failed: ranks 1, 3, 5 in one notice"),
        "{stdout}"
    );
}

/// Checks that agreement `a` was decided once, by `deciders`, through
/// the host's segment (hops 1: no message).
fn decided_through_the_segment(a: &Value, deciders: &Value) {
    assert_eq!(a["decided_by"], *deciders, "{a:#}");
    assert_eq!(a["distinct_decisions"], 1, "{a:#}");
    assert_eq!(a["hops"], 1, "not through the segment: {a:#}");
}

/// A one-host job agrees through the host's segment, and the agents'
/// `iagree` calls are never polled (they wait for the event): the
/// progress threads end them. A rank killed as the agreement is asked
/// for: every survivor gets the same decision, naming the victim exactly
/// when it did not contribute before it died.
#[test]
fn a_one_host_agreement_goes_through_the_segment_and_survives_a_kill_during_it() {
    let (report, out) = run_job(
        "auto",
        &[
            "-n",
            "6",
            "--agree",
            "400ms",
            "--kill",
            "5@600ms",
            "--agree",
            "600ms",
            "--agree",
            "900ms",
            "--duration",
            "1500ms",
        ],
    );
    let text = output_text(&out);
    let agreements = report["agreements"].as_array().unwrap();
    assert_eq!(agreements.len(), 3, "{text}");
    decided_through_the_segment(&agreements[0], &serde_json::json!([0, 1, 2, 3, 4, 5]));
    let survivors = serde_json::json!([0, 1, 2, 3, 4]);
    let during = &agreements[1];
    assert_eq!(during["distinct_decisions"], 1, "{text}");
    assert_eq!(during["hops"], 1, "{text}");
    let deciders = during["decided_by"].as_array().unwrap();
    assert!(
        survivors
            .as_array()
            .unwrap()
            .iter()
            .all(|r| deciders.contains(r)),
        "every survivor decided: {text}"
    );
    let failed = during["failed"].as_array().unwrap();
    assert!(
        failed.is_empty() || failed == &[Value::from(5)],
        "only the victim can be named: {text}"
    );
    // Asked after the kill: the survivors, naming the victim.
    decided_through_the_segment(&agreements[2], &survivors);
    assert_eq!(agreements[2]["failed"], serde_json::json!([5]), "{text}");
    assert_no_false_reports(&report);
}

/// A rank stopped (SIGSTOP) before an agreement holds it back until its
/// same-host observer declares it (counters, one timeout); then every other
/// rank decides without it, naming it, through the segment.
#[test]
fn a_one_host_agreement_waits_for_a_stopped_rank_to_be_declared_then_names_it() {
    let (report, out) = run_job(
        "auto",
        &[
            "-n",
            "5",
            "--stop",
            "4@400ms",
            "--agree",
            "450ms",
            "--duration",
            "1500ms",
        ],
    );
    let text = output_text(&out);
    let agreements = report["agreements"].as_array().unwrap();
    assert_eq!(agreements.len(), 1, "{text}");
    decided_through_the_segment(&agreements[0], &serde_json::json!([0, 1, 2, 3]));
    assert_eq!(agreements[0]["failed"], serde_json::json!([4]), "{text}");
    assert!(delay_of(&report, 4) <= TIMEOUT_MS * 3.0 + 500.0, "{text}");
}

/// Over emulated hosts, agreements travel as messages on the tree over
/// hosts (`Shape::Hosts`): 8 ranks on 2 hosts take 2·(1 + 1) = 4 hops,
/// where the binomial tree over ranks took 2·3 = 6. The root (rank 0, host
/// 0's leader and the head of the tree) killed as the second agreement is
/// asked: every survivor decides the same, naming at most the victim; the
/// third, asked after, names it, re-rooted at rank 1 (host 1's head; host
/// 0's ranks, their head gone, hang under it).
#[test]
fn agreements_over_hosts_take_the_tree_over_hosts_and_survive_the_roots_death() {
    let (report, out) = run_job(
        "auto",
        &[
            "-n",
            "8",
            "--hosts",
            "2",
            "--agree",
            "400ms",
            "--kill",
            "0@600ms",
            "--agree",
            "600ms",
            "--agree",
            "900ms",
            "--duration",
            "1500ms",
        ],
    );
    let text = output_text(&out);
    let agreements = report["agreements"].as_array().unwrap();
    assert_eq!(agreements.len(), 3, "{text}");
    let first = &agreements[0];
    assert_eq!(
        first["decided_by"],
        serde_json::json!([0, 1, 2, 3, 4, 5, 6, 7]),
        "{text}"
    );
    assert_eq!(first["distinct_decisions"], 1, "{text}");
    assert_eq!(first["hops"], 4, "the tree over hosts: {text}");
    let survivors: Vec<Value> = (1..8).map(Value::from).collect();
    let during = &agreements[1];
    assert_eq!(during["distinct_decisions"], 1, "{text}");
    let deciders = during["decided_by"].as_array().unwrap();
    assert!(
        survivors.iter().all(|r| deciders.contains(r)),
        "every survivor decided: {text}"
    );
    let failed = during["failed"].as_array().unwrap();
    assert!(
        failed.is_empty() || failed == &[Value::from(0)],
        "only the victim can be named: {text}"
    );
    let after = &agreements[2];
    assert_eq!(after["decided_by"], Value::from(survivors), "{text}");
    assert_eq!(after["distinct_decisions"], 1, "{text}");
    assert_eq!(after["failed"], serde_json::json!([0]), "{text}");
    assert_no_false_reports(&report);
}

/// A whole host killed as an agreement over hosts is asked (its head and
/// every rank under it): every survivor decides the same, naming none or
/// some of the host's ranks (those that did not contribute before they
/// died); the next agreement names the whole host.
#[test]
fn an_agreement_over_hosts_survives_a_whole_host_killed_during_it() {
    let (report, out) = run_job(
        "auto",
        &[
            "-n",
            "12",
            "--hosts",
            "3",
            "--agree",
            "400ms",
            "--kill-host",
            "1@600ms",
            "--agree",
            "600ms",
            "--agree",
            "1000ms",
            "--duration",
            "1600ms",
        ],
    );
    let text = output_text(&out);
    let agreements = report["agreements"].as_array().unwrap();
    assert_eq!(agreements.len(), 3, "{text}");
    // One hop to a head, one to the root's host (3 hosts: depth 1).
    assert_eq!(agreements[0]["hops"], 4, "the tree over hosts: {text}");
    let host: Vec<Value> = [1, 4, 7, 10].into_iter().map(Value::from).collect();
    let survivors: Vec<Value> = (0..12).filter(|r| r % 3 != 1).map(Value::from).collect();
    let during = &agreements[1];
    assert_eq!(during["distinct_decisions"], 1, "{text}");
    let deciders = during["decided_by"].as_array().unwrap();
    assert!(
        survivors.iter().all(|r| deciders.contains(r)),
        "every survivor decided: {text}"
    );
    let failed = during["failed"].as_array().unwrap();
    assert!(
        failed.iter().all(|r| host.contains(r)),
        "only the host's ranks can be named: {text}"
    );
    let after = &agreements[2];
    assert_eq!(after["decided_by"], Value::from(survivors), "{text}");
    assert_eq!(after["distinct_decisions"], 1, "{text}");
    assert_eq!(after["failed"], Value::from(host), "{text}");
    assert_no_false_reports(&report);
}

/// A one-host job's messages between its ranks all go through the host's
/// mailboxes (`docs/design.md` §4.12 "Hosts", "Mailboxes"): a kill, a
/// stop, an agreement after both, and the exclusion notice the stopped
/// rank finds when it resumes; no rank completed a fabric send or posted
/// a heartbeat, and the mailboxes carried what went.
#[test]
fn a_one_host_job_sends_nothing_over_the_fabric() {
    if !exit_words_here() {
        return;
    }
    let (report, out) = run_job(
        "auto",
        &[
            "-n",
            "6",
            "--kill",
            "1@500ms",
            "--stop",
            "4@800ms",
            "--agree",
            "1300ms",
            "--cont",
            "4@1600ms",
            "--duration",
            "2500ms",
        ],
    );
    assert_eq!(failure_of(&report, 1)["cause"], "exited", "{report:#}");
    assert_all_learned(&report, 1, &[0, 2, 3, 5]);
    assert_all_learned(&report, 4, &[0, 2, 3, 5]);
    assert_no_false_reports(&report);
    // Stopped 800 ms, rank 4 was excluded by the time it ran again; the
    // first turn after its stop still records the stall (its wake-up
    // lateness), which `support::run_job` takes as the machine's doing
    // when a rank is falsely reported.
    let stall_us = report["stats"]["4"]["runtime"]["lateness"]["max_us"]
        .as_f64()
        .unwrap();
    assert!(stall_us >= 5.0 * TIMEOUT_MS * 1000.0, "{report:#}");
    let a = &report["agreements"][0];
    assert_eq!(a["decided_by"], serde_json::json!([0, 2, 3, 5]), "{a:#}");
    assert_eq!(a["distinct_decisions"], 1, "{a:#}");
    assert_eq!(a["failed"], serde_json::json!([1, 4]), "{a:#}");
    assert_eq!(
        report["self_excluded"],
        serde_json::json!([4]),
        "{}",
        output_text(&out)
    );
    let (mut sent, mut received) = (0, 0);
    for r in ["0", "2", "3", "4", "5"] {
        let s = &report["stats"][r]["runtime"];
        assert_eq!(s["messages"]["sends_completed"], 0, "rank {r}: {s:#}");
        assert_eq!(s["heartbeats"]["posted"], 0, "rank {r}: {s:#}");
        assert_eq!(s["transport"]["errors"], 0, "rank {r}: {s:#}");
        sent += s["mailbox"]["sent"].as_u64().unwrap();
        received += s["mailbox"]["received"].as_u64().unwrap();
    }
    assert!(sent > 0 && received > 0, "{sent} sent, {received} read");
    // Its exclusion came by mail.
    let resumed = &report["stats"]["4"]["runtime"]["mailbox"]["received"];
    assert!(resumed.as_u64().unwrap() > 0, "{resumed}");
}

/// A job is run again only when each falsely reported rank's own stats
/// show a wake-up a timeout late (`support::run_job`): the stall explains
/// the declaration. A false report of a rank that ran on time, or one of
/// two ranks that did, is not explained.
#[test]
fn only_a_stall_of_a_timeout_explains_a_false_report() {
    let report = |late_us: &[(u64, u64)], reported: &[u64]| {
        let stats: serde_json::Map<String, Value> = late_us
            .iter()
            .map(|&(rank, us)| {
                let s = serde_json::json!({ "runtime": { "lateness": { "max_us": us } } });
                (rank.to_string(), s)
            })
            .collect();
        let false_reports: Vec<Value> = reported
            .iter()
            .map(|&r| serde_json::json!({ "rank": r, "reported_by": [1] }))
            .collect();
        serde_json::json!({ "false_reports": false_reports, "stats": stats })
    };
    let stalled = 168_296;
    let on_time = 3_335;
    let none = report(&[(0, stalled), (1, on_time)], &[]);
    assert_eq!(support::stalled_false_reports(&none), None);
    let explained = report(&[(0, stalled), (1, on_time), (2, 100_000)], &[0, 2]);
    assert_eq!(
        support::stalled_false_reports(&explained).as_deref(),
        Some("rank 0 woke 168 ms late, rank 2 woke 100 ms late")
    );
    let one_on_time = report(&[(0, stalled), (1, on_time)], &[0, 1]);
    assert_eq!(support::stalled_false_reports(&one_on_time), None);
    let no_stats = report(&[(1, on_time)], &[0]);
    assert_eq!(support::stalled_false_reports(&no_stats), None);
}
