//! Simulator scale benchmark (`harness = false`): for N = 2^4 … 2^20 and
//! both broadcasts (BMG, chord), one crash on 2 µs links without jitter,
//! then 32 random crashes at N = 65536. Each run is a separate `ffd sim`
//! process, so its peak RSS is its own.
//!
//! Prints a table and writes `target/bench/sim_scale.json`.
//!
//! Knobs (environment): `SIM_SCALE_MAX_LOG2` (default 20),
//! `SIM_SCALE_STRESS=0` to skip the 65536 × 32 run, `SIM_SCALE_SEED`.

use std::path::{Path, PathBuf};
use std::process::Command;

use ffd_protocol::sim::SimReport;
use serde::Serialize;

#[derive(Serialize)]
struct Row {
    ranks: u64,
    bcast: String,
    fail: String,
    failures: usize,
    /// Most hops of any failure.
    max_hops: u64,
    /// Detection → last live rank informed, µs of virtual time (worst failure).
    propagation_us: f64,
    /// Notice messages naming a failure, averaged over failures.
    messages_per_failure: f64,
    missed_notifications: u64,
    false_reports: u64,
    wall_s: f64,
    peak_rss_mb: f64,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn run(ffd: &Path, out: &Path, ranks: u64, bcast: &str, fail: &str, seed: u64) -> Row {
    let json = out.join(format!(
        "sim_{bcast}_{ranks}_{}.json",
        fail.replace([':', '@'], "_")
    ));
    let status = Command::new(ffd)
        .args([
            "sim",
            "--ranks",
            &ranks.to_string(),
            "--hosts",
            &(ranks / 8).max(1).to_string(),
        ])
        .args([
            "--bcast",
            bcast,
            "--fail",
            fail,
            "--latency",
            "2us",
            "--jitter",
            "0ns",
        ])
        .args(["--seed", &seed.to_string(), "--quiet", "--json"])
        .arg(&json)
        .status()
        .expect("ffd runs");
    assert!(
        status.success(),
        "ffd sim failed for N={ranks} {bcast} {fail}"
    );
    let report: SimReport =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("report written"))
            .expect("a simulator report");
    let failures = &report.failures;
    let totals = &report.totals;
    let propagation_us = failures
        .iter()
        .map(|f| match (f.detected_at_ms, f.all_notified_at_ms) {
            (Some(detected), Some(all)) => (all - detected) * 1e3,
            _ => f64::NAN,
        })
        .fold(0.0, f64::max);
    let messages: u64 = failures.iter().filter_map(|f| f.messages).sum();
    Row {
        ranks,
        bcast: bcast.to_owned(),
        fail: fail.to_owned(),
        failures: failures.len(),
        max_hops: failures
            .iter()
            .filter_map(|f| f.max_hops)
            .max()
            .map_or(0, u64::from),
        propagation_us,
        messages_per_failure: messages as f64 / failures.len().max(1) as f64,
        missed_notifications: totals.missed_notifications,
        false_reports: totals.false_reports,
        wall_s: totals.wall_s,
        peak_rss_mb: totals.peak_rss_mb,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is accepted.
    let ffd = PathBuf::from(env!("CARGO_BIN_EXE_ffd"));
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    std::fs::create_dir_all(&out).expect("target/bench");
    let max_log2 = env_u64("SIM_SCALE_MAX_LOG2", 20).clamp(4, 24);
    let seed = env_u64("SIM_SCALE_SEED", 1);
    let mut rows = Vec::new();
    println!(
        "{:>8} {:>6} {:>16} {:>4} {:>5} {:>12} {:>14} {:>6} {:>6} {:>8} {:>8}",
        "N",
        "bcast",
        "fail",
        "k",
        "hops",
        "propag_us",
        "msgs/failure",
        "missed",
        "false",
        "wall_s",
        "rss_MiB"
    );
    let print = |r: &Row| {
        println!(
            "{:>8} {:>6} {:>16} {:>4} {:>5} {:>12.1} {:>14.0} {:>6} {:>6} {:>8.2} {:>8.0}",
            r.ranks,
            r.bcast,
            r.fail,
            r.failures,
            r.max_hops,
            r.propagation_us,
            r.messages_per_failure,
            r.missed_notifications,
            r.false_reports,
            r.wall_s,
            r.peak_rss_mb
        );
    };
    for log2 in 4..=max_log2 {
        let n = 1u64 << log2;
        for bcast in ["bmg", "chord"] {
            let row = run(
                &ffd,
                &out,
                n,
                bcast,
                &format!("crash:{}@300ms", n / 3),
                seed,
            );
            print(&row);
            rows.push(row);
        }
    }
    if env_u64("SIM_SCALE_STRESS", 1) != 0 && max_log2 >= 16 {
        for bcast in ["bmg", "chord"] {
            let row = run(&ffd, &out, 65536, bcast, "random:32@300ms", seed);
            print(&row);
            rows.push(row);
        }
    }
    let path = out.join("sim_scale.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&rows).expect("serialisable") + "\n",
    )
    .expect("write JSON");
    println!("wrote {}", path.display());
    let bad: Vec<&Row> = rows
        .iter()
        .filter(|r| r.missed_notifications != 0 || r.false_reports != 0)
        .collect();
    assert!(
        bad.is_empty(),
        "runs with missed notifications or false reports: {}",
        bad.len()
    );
}
