//! Multi-process detection through the real launcher and agents:
//! `ffd run` over `tcp;ofi_rxm` on loopback, period 10 ms, timeout 100 ms,
//! every rank on the fabric ring (`FFD_LOCAL=off`).
//! Each test reads the `--json` report. Jobs run one at a time so that two
//! jobs do not compete for the machine's two cores.

use std::process::{Command, Output};

use serde_json::Value;

mod support;
use support::{ONE_JOB_AT_A_TIME, TIMEOUT_MS, assert_no_false_reports, failure_of};

/// Runs `ffd run` with `args` on the per-process fabric ring these tests
/// were written for (same-host watching, the default, has its own in
/// local_e2e.rs): the report and the process output.
fn run_job(args: &[&str]) -> (Value, Output) {
    support::run_job("off", &[], args)
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
    let (report, out) = run_job(&["-n", "8", "--kill", "3@500ms", "--duration", "1500ms"]);
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
        (0.0..=TIMEOUT_MS + 500.0).contains(&delay),
        "detected {delay} ms after the kill"
    );
    assert_all_learned(&report, 3, &[0, 1, 2, 4, 5, 6, 7]);
    assert_no_false_reports(&report);
}

#[test]
fn a_stopped_rank_is_reported_by_timeout_and_excludes_itself_when_continued() {
    let (report, out) = run_job(&[
        "-n",
        "6",
        "--stop",
        "2@500ms",
        "--cont",
        "2@1000ms",
        "--duration",
        "2s",
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
        (TIMEOUT_MS * 0.5..=TIMEOUT_MS + 500.0).contains(&delay),
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
#[test]
fn view_changes_and_agreements_are_identical_at_every_survivor() {
    let (report, out) = run_job(&[
        "-n",
        "6",
        "--kill",
        "4@400ms",
        "--agree",
        "300ms",
        "--agree",
        "1000ms",
        "--duration",
        "1500ms",
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
