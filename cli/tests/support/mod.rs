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
pub fn run_job(local: &str, env: &[(&str, &str)], args: &[&str]) -> (Value, Output) {
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
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
