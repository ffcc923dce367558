//! Multi-process detection through the real launcher and agents:
//! `ffd run` over `tcp;ofi_rxm` on loopback, period 10 ms, timeout 100 ms,
//! every rank on the fabric ring (`FFD_LOCAL=off`).
//! Each test reads the `--json` report. Jobs run one at a time so that two
//! jobs do not compete for the machine's two cores.
//!
//! The machine is shared all the same (the rest of a `cargo test
//! --workspace` run, builds, other jobs), and a rank or the launcher can be
//! kept off a CPU for hundreds of milliseconds: on a loaded 2-core machine
//! agents woke up to 677 ms late and `--agree 1000ms` fired at 1234 ms.
//! With the default placement (`FFD_CORE=auto`) the progress threads of a
//! job's ranks are pinned alternately to the two CPUs, so a CPU taken by
//! something else stalls every other rank at once: each failing report
//! of the earlier version split the job by rank parity (ranks 0, 2, 4, 6
//! stalled or declaring 1, 3, 5, 7). So the agents run unpinned
//! (`FFD_CORE=none`, as in `partition_netns.rs`; placement has tests of
//! its own), the faults fall after every rank's start-up grace (shortened
//! to [`STARTUP_GRACE`]), a detection is bounded by the protocol's own
//! bound for a starved observer plus [`SLACK_MS`]
//! ([`DETECTION_BOUND_MS`]), and each step of a schedule that must finish
//! before the next (an agreement before a kill, a view change before an
//! agreement, an agreement before the end) has ten timeouts, not one.

use std::process::{Command, Output};

use serde_json::Value;

mod support;
use support::{ONE_JOB_AT_A_TIME, TIMEOUT_MS, assert_no_false_reports, failure_of};

/// The agents' start-up grace (`FFD_STARTUP_GRACE`, 1 s by default): an
/// emitter not heard from yet is judged only from its end. Every fault
/// below comes later than this after the job's start (all agents ready,
/// so every Engine started before it): a rank starved before its first
/// heartbeat is judged by the timeout, not a second after the fault.
const STARTUP_GRACE: &str = "300ms";

/// What a loaded machine may add to the protocol's bounds (process
/// wake-ups, the launcher's own), as in `partition_netns.rs`.
const SLACK_MS: f64 = 400.0;

/// The longest a fault may take to be detected: a silent emitter is
/// declared within `FFD_HEALTH_MAX` (4) timeouts plus a check interval
/// of its last beat while its observer's own wake-ups run late
/// (`docs/design.md` §4.3 "Timeout"), plus [`SLACK_MS`].
const DETECTION_BOUND_MS: f64 = 4.0 * TIMEOUT_MS + TIMEOUT_MS / 4.0 + SLACK_MS;

/// Runs `ffd run` with `args` on the per-process fabric ring these tests
/// were written for (same-host watching, the default, has its own in
/// local_e2e.rs): the report and the process output.
fn run_job(args: &[&str]) -> (Value, Output) {
    support::run_job(
        "off",
        &[("FFD_STARTUP_GRACE", STARTUP_GRACE), ("FFD_CORE", "none")],
        args,
    )
}

/// Every rank in `survivors` learned `rank` failed, and the report says
/// when the last one did.
fn assert_all_learned(report: &Value, rank: u64, survivors: &[u64]) {
    support::assert_all_learned(report, rank, survivors);
    let f = failure_of(report, rank);
    assert!(!f["all_notified_at_ms"].is_null(), "{f:#}");
}

#[test]
fn kill_9_of_one_rank_is_reported_by_every_survivor() {
    let (report, out) = run_job(&["-n", "8", "--kill", "3@500ms", "--duration", "2s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let f = failure_of(&report, 3);
    let cause = f["cause"].as_str().unwrap();
    assert!(cause == "inband" || cause == "timeout", "{f:#}");
    let delay = f["detected_at_ms"].as_f64().unwrap() - f["injected_at_ms"].as_f64().unwrap();
    assert!(
        (0.0..=DETECTION_BOUND_MS).contains(&delay),
        "detected {delay} ms after the kill"
    );
    assert_all_learned(&report, 3, &[0, 1, 2, 4, 5, 6, 7]);
    assert_no_false_reports(&report);
}

/// The rank stays stopped ten timeouts, past [`DETECTION_BOUND_MS`]: one
/// continued before it was declared would not be reported at all.
#[test]
fn a_stopped_rank_is_reported_by_timeout_and_excludes_itself_when_continued() {
    let (report, out) = run_job(&[
        "-n",
        "6",
        "--stop",
        "2@500ms",
        "--cont",
        "2@1500ms",
        "--duration",
        "2500ms",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let f = failure_of(&report, 2);
    assert_eq!(f["cause"], "timeout", "{f:#}");
    let delay = f["detected_at_ms"].as_f64().unwrap() - f["injected_at_ms"].as_f64().unwrap();
    assert!(
        (TIMEOUT_MS * 0.5..=DETECTION_BOUND_MS).contains(&delay),
        "{delay} ms"
    );
    assert_all_learned(&report, 2, &[0, 1, 3, 4, 5]);
    assert_eq!(
        report["self_excluded"],
        serde_json::json!([2]),
        "{report:#}"
    );
    assert_no_false_reports(&report);
    // Nobody else was reported.
    assert_eq!(
        report["failures"].as_array().unwrap().len(),
        1,
        "{report:#}"
    );
}

#[test]
fn three_consecutive_ranks_killed_at_once_are_all_reported() {
    // With the rank ring, 2, 3 and 4 are ring neighbours.
    let (report, out) = run_job(&[
        "-n",
        "8",
        "--ring",
        "rank",
        "--kill",
        "2@500ms",
        "--kill",
        "3@500ms",
        "--kill",
        "4@500ms",
        "--duration",
        "2s",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for dead in [2, 3, 4] {
        assert_all_learned(&report, dead, &[0, 1, 5, 6, 7]);
    }
    assert_no_false_reports(&report);
}

#[test]
fn a_job_that_shuts_down_cleanly_reports_nobody_failed() {
    let (report, out) = run_job(&["-n", "6", "--duration", "1s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["failures"], serde_json::json!([]), "{report:#}");
    assert_no_false_reports(&report);
    // The agents' own counters agree: no detection of any kind.
    for (rank, stats) in report["stats"].as_object().unwrap() {
        let d = &stats["engine"]["detections"];
        assert_eq!(
            (
                d["timeout"].as_u64(),
                d["inband"].as_u64(),
                d["notice"].as_u64()
            ),
            (Some(0), Some(0), Some(0)),
            "rank {rank}: {d}"
        );
    }
}

#[test]
fn twenty_idle_seconds_report_no_failure() {
    let (report, out) = run_job(&["-n", "8", "--duration", "20s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["failures"], serde_json::json!([]), "{report:#}");
    assert_no_false_reports(&report);
    let ranks = report["stats"].as_object().unwrap();
    assert_eq!(ranks.len(), 8);
    for (rank, stats) in ranks {
        // 20 s at 10 ms: about 2000 heartbeats each.
        let beats = stats["runtime"]["heartbeats"]["posted"].as_u64().unwrap();
        assert!(beats > 1000, "rank {rank} posted {beats}");
    }
}

#[test]
fn bad_settings_are_refused_before_anything_starts() {
    let out = Command::new(env!("CARGO_BIN_EXE_ffd"))
        .args(["agent"])
        .env("FFD_PERIOD", "10 parsecs")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("FFD_PERIOD") && err.contains("10 parsecs") && err.contains("10ms"),
        "{err}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_ffd"))
        .args(["agent"])
        .env_remove("FFD_BOOTSTRAP")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("FFD_BOOTSTRAP") && err.contains("ffd rendezvous"),
        "{err}"
    );
}

#[test]
fn an_unavailable_provider_is_named_with_the_available_ones() {
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let out = Command::new(env!("CARGO_BIN_EXE_ffd"))
        .args([
            "run",
            "-n",
            "2",
            "--provider",
            "nosuchfabric",
            "--duration",
            "1s",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nosuchfabric"), "{err}");
    assert!(err.contains("tcp"), "lists the available providers: {err}");
}

/// `ffd run` prints view changes and `--agree` agreements: after a kill,
/// every survivor raises view 1 naming the victim, and an agreement asked
/// after it is decided identically by every survivor, naming the victim.
/// Each step has ten timeouts before the next: the first agreement
/// before the kill (it was 100 ms, and a rank starved that long had not
/// decided it when it was killed), the kill's detection and view change
/// before the second agreement, the second before the end (it was 500
/// ms: a run with the agents 677 ms late left it undecided at three of
/// the five survivors).
#[test]
fn view_changes_and_agreements_are_identical_at_every_survivor() {
    let (report, out) = run_job(&[
        "-n",
        "6",
        "--agree",
        "400ms",
        "--kill",
        "4@1400ms",
        "--agree",
        "2400ms",
        "--duration",
        "3400ms",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let survivors = serde_json::json!([0, 1, 2, 3, 5]);
    // View 1, then (maybe) views of the shutdown's departures.
    let views = report["views"].as_array().unwrap();
    assert!(!views.is_empty(), "{report:#}");
    for v in views {
        assert_eq!(v["distinct_failed_sets"], 1, "{report:#}");
    }
    assert_eq!(views[0]["id"], 1);
    assert_eq!(views[0]["failed"], serde_json::json!([4]));
    assert_eq!(views[0]["distinct_failed_sets"], 1);
    assert_eq!(views[0]["raised_by"], survivors, "{report:#}");
    let agreements = report["agreements"].as_array().unwrap();
    assert_eq!(agreements.len(), 2, "{report:#}");
    // Before the kill: all six, nobody out.
    assert_eq!(
        agreements[0]["decided_by"],
        serde_json::json!([0, 1, 2, 3, 4, 5])
    );
    assert_eq!(agreements[0]["distinct_decisions"], 1);
    assert_eq!(agreements[0]["failed"], serde_json::json!([]));
    // After it: the survivors, the same decision, naming the victim.
    assert_eq!(agreements[1]["decided_by"], survivors, "{report:#}");
    assert_eq!(agreements[1]["distinct_decisions"], 1);
    assert_eq!(agreements[1]["failed"], serde_json::json!([4]));
    assert_eq!(agreements[1]["view"], 1);
    assert!(agreements[1]["latency_ms"].as_f64().unwrap() >= 0.0);
    // The timeline says so as it happens.
    assert!(stdout.contains("raised view 1: rank 4 out"), "{stdout}");
    assert!(
        stdout.contains("all 5 live ranks raised view 1 identically"),
        "{stdout}"
    );
    assert!(
        stdout.contains("all 5 live ranks decided agreement 2 identically"),
        "{stdout}"
    );
    assert_no_false_reports(&report);
}

/// An agent asked for an agreement goes back to sleep afterwards: the
/// whole job (launcher and both agents, their CPU time as the shell's
/// `times` counts its reaped children) uses a fraction of one core over a
/// run of 3 s with an agreement at 300 ms. Its main loop used to leave the
/// byte of the `agree` line in its wake-up socket, so every wait returned
/// at once and each agent spun on a core until the end: 3.9 s of CPU for a
/// 3.6 s run, where a sleeping job takes about 0.2 s.
#[test]
fn agents_sleep_after_an_agreement() {
    let _one = support::ONE_JOB_AT_A_TIME
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let script = r#""$0" run -n 2 --period 10ms --timeout 100ms --agree 300ms --duration 3s >/dev/null && times"#;
    let out = Command::new("bash")
        .args(["-c", script, env!("CARGO_BIN_EXE_ffd")])
        .env_remove("FFD_LOG")
        .env("FFD_CORE", "none")
        .output()
        .expect("bash starts");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", support::output_text(&out));
    // `times`: the shell's user and system time, then its children's.
    let children = text.lines().nth(1).unwrap_or_else(|| panic!("{text}"));
    let seconds: f64 = children
        .split_whitespace()
        .map(|t| {
            let (m, s) = t.trim_end_matches('s').split_once('m').unwrap();
            m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
        })
        .sum();
    // Half a core over the 3 s (a spinning agent alone takes a whole one).
    assert!(seconds < 1.5, "the job used {seconds} s of CPU: {text}");
}
