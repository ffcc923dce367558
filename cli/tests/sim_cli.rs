//! `ffd sim` as a user runs it: the JSON shape, and bad arguments exiting
//! with code 2 and a message naming the argument and its accepted form.

use std::process::{Command, Output};

fn ffd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ffd"))
        .args(args)
        .output()
        .expect("ffd runs")
}

#[test]
fn writes_the_documented_json() {
    let dir = std::env::temp_dir().join(format!("ffd-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("report.json");
    let out = ffd(&[
        "sim",
        "--ranks",
        "64",
        "--hosts",
        "8",
        "--fail",
        "crash:5@300ms",
        "--fail",
        "hang:9@300ms",
        "--bcast",
        "chord",
        "--period",
        "10ms",
        "--timeout",
        "100ms",
        "--latency",
        "2us",
        "--jitter",
        "500ns",
        "--seed",
        "7",
        "--json",
        path.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("crash") && table.contains("hang"), "{table}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let failures = v["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 2);
    for f in failures {
        for key in [
            "rank",
            "cause",
            "detected_at_ms",
            "all_notified_at_ms",
            "max_hops",
            "messages",
        ] {
            assert!(!f[key].is_null(), "failure field {key} missing: {f}");
        }
    }
    assert_eq!(failures[0]["cause"], "inband");
    assert_eq!(failures[1]["cause"], "timeout");
    for key in [
        "ranks",
        "false_reports",
        "missed_notifications",
        "wall_s",
        "peak_rss_mb",
    ] {
        assert!(v["totals"][key].is_number(), "totals field {key} missing");
    }
    assert_eq!(v["totals"]["ranks"], 64);
    assert_eq!(v["totals"]["missed_notifications"], 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_arguments_exit_2_naming_the_argument() {
    for (args, needles) in [
        (
            vec!["sim", "--ranks", "64", "--fail", "crash:5"],
            vec!["--fail", "crash:R@T"],
        ),
        (
            vec!["sim", "--ranks", "64", "--fail", "crash:99@1s"],
            vec!["--fail", "outside 0..64"],
        ),
        (
            vec!["sim", "--ranks", "64", "--period", "10"],
            vec!["--period", "unit"],
        ),
        (
            vec!["sim", "--ranks", "64", "--timeout", "5ms"],
            vec!["--timeout", "--period"],
        ),
        (
            vec!["sim", "--ranks", "64", "--bcast", "tree"],
            vec!["--bcast", "bmg|chord"],
        ),
        (vec!["sim", "--ranks", "0"], vec!["--ranks"]),
        (
            vec!["sim", "--ranks", "64", "--hosts", "65"],
            vec!["--hosts"],
        ),
        (vec!["sim", "--ranks", "many"], vec!["--ranks"]),
        (vec!["sim"], vec!["--ranks"]),
    ] {
        let out = ffd(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        for n in needles {
            assert!(err.contains(n), "{args:?}: `{n}` not in {err}");
        }
    }
}

/// From 2^16 ranks `ffd sim` runs itself again with glibc's huge-page
/// tunable: the run still reports once, with or without the tunable set
/// by the caller (`glibc.malloc.hugetlb=0` keeps it from re-executing).
#[test]
fn a_large_simulation_reports_once_with_or_without_huge_pages() {
    for tunables in [None, Some("glibc.malloc.hugetlb=0")] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ffd"));
        cmd.args([
            "sim",
            "--ranks",
            "65536",
            "--duration",
            "1ms",
            "--seed",
            "1",
        ]);
        match tunables {
            Some(t) => cmd.env("GLIBC_TUNABLES", t),
            None => cmd.env_remove("GLIBC_TUNABLES"),
        };
        let out = cmd.output().expect("ffd runs");
        assert!(
            out.status.success(),
            "{tunables:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let table = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            table.matches("ranks 65536").count(),
            1,
            "{tunables:?}: {table}"
        );
    }
}
