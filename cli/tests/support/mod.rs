//! What the `ffd run` end-to-end tests share (`run_e2e.rs`, `local_e2e.rs`):
//! one job at a time through the real launcher, period 10 ms, timeout
//! 100 ms, and reading its `--json` report.

use std::process::{Command, Output};
use std::sync::Mutex;

use serde_json::Value;

/// Held by every job a test binary starts (two jobs would compete for the
/// machine's two cores).
pub static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

pub const TIMEOUT_MS: f64 = 100.0;

/// Runs `ffd run` with `args` (plus the JSON report), `FFD_LOCAL=local`
/// and the variables `env` for the agents; returns the report and the
/// process output. Jobs in one test binary run one at a time so that two
/// jobs do not compete for the machine's two cores. `ffd run` reaps its
/// agents on every path and bounds its own run time, so the test only
/// bounds the launcher.
///
/// A job whose every falsely reported rank shows, in its own stats, a
/// wake-up at least a timeout late is run again (at most
/// [`STALLED_RUNS`] runs in all): the machine took that rank's CPU from it
/// for a whole timeout (a VM whose host deschedules a vCPU for 170 ms was
/// seen in CI, every rank of an emulated host pinned there), and under
/// the rules its observer was right to declare it. A false report without
/// that evidence is returned as it is, for the test to fail on.
pub fn run_job(local: &str, env: &[(&str, &str)], args: &[&str]) -> (Value, Output) {
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut run = 1;
    loop {
        let (report, out) = run_job_once(local, env, args);
        match stalled_false_reports(&report) {
            Some(stalled) if run < STALLED_RUNS => {
                eprintln!(
                    "ffd run {}: run {run} had false reports of ranks whose CPU was \
                     taken for a timeout or more ({stalled}): the machine's, run again",
                    args.join(" ")
                );
                run += 1;
            }
            _ => return (report, out),
        }
    }
}

/// How many times [`run_job`] runs a job whose false reports the machine
/// explains.
pub const STALLED_RUNS: u32 = 3;

/// The falsely reported ranks with their latest wake-up in ms, if there
/// are some and each of them woke at least a timeout late once
/// (`runtime.lateness.max_us` of its stats); `None` otherwise.
pub fn stalled_false_reports(report: &Value) -> Option<String> {
    let reported = report["false_reports"].as_array()?;
    if reported.is_empty() {
        return None;
    }
    let mut stalled = Vec::new();
    for entry in reported {
        let rank = entry["rank"].as_u64()?;
        let late_us =
            report["stats"][rank.to_string()]["runtime"]["lateness"]["max_us"].as_f64()?;
        if late_us < TIMEOUT_MS * 1000.0 {
            return None;
        }
        stalled.push(format!("rank {rank} woke {:.0} ms late", late_us / 1000.0));
    }
    Some(stalled.join(", "))
}

fn run_job_once(local: &str, env: &[(&str, &str)], args: &[&str]) -> (Value, Output) {
    let dir = std::env::temp_dir().join(format!(
        "ffd-e2e-{}-{}-{}",
        std::process::id(),
        local,
        args.join("_").replace(['/', '@'], "-")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_ffd"))
        .arg("run")
        .args(["--period", "10ms", "--timeout", "100ms"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .env_remove("FFD_LOG")
        .env("FFD_LOCAL", local)
        .envs(env.iter().copied())
        .output()
        .expect("ffd run starts");
    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| {
        panic!("no report ({e}); {}", output_text(&out));
    });
    let _ = std::fs::remove_dir_all(&dir);
    (serde_json::from_str(&text).expect("valid JSON"), out)
}

/// A process's stdout and stderr, for failure messages.
pub fn output_text(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The report's failure entry for `rank`.
pub fn failure_of(report: &Value, rank: u64) -> &Value {
    report["failures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rank"] == rank)
        .unwrap_or_else(|| panic!("no failure entry for rank {rank}: {report:#}"))
}

pub fn assert_no_false_reports(report: &Value) {
    assert_eq!(report["false_reports"], serde_json::json!([]), "{report:#}");
}

/// Every rank in `survivors` learned `rank` failed.
pub fn assert_all_learned(report: &Value, rank: u64, survivors: &[u64]) {
    let f = failure_of(report, rank);
    let notified: Vec<u64> = f["notified"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    for s in survivors {
        assert!(
            notified.contains(s),
            "rank {s} never learned rank {rank} failed: {f:#}"
        );
    }
}
