//! The liveness port through the real launcher and agents (`docs/design.md`
//! §4.5 "In-band detection"): one rank per emulated host (`--hosts`), so a
//! rank has no same-host witness. A killed rank's observer finds its
//! watch of the rank's port ended and its probe refused (proof, declared at
//! once); a stopped rank's kernel keeps its port, so it is declared only by
//! the timeout. Period 10 ms, timeout 100 ms; jobs run one at a time.

use serde_json::Value;

mod support;
use support::{TIMEOUT_MS, assert_all_learned, assert_no_false_reports, failure_of, output_text};

fn run_job(args: &[&str]) -> Value {
    let (report, out) = support::run_job("auto", &[], args);
    assert!(out.status.success(), "{}", output_text(&out));
    report
}

/// `rank`'s runtime counters of the liveness port.
fn liveness_of(report: &Value, rank: u64) -> &Value {
    &report["stats"][rank.to_string()]["runtime"]["liveness"]
}

fn delay_of(report: &Value, rank: u64) -> f64 {
    let f = failure_of(report, rank);
    f["detected_at_ms"].as_f64().unwrap() - f["injected_at_ms"].as_f64().unwrap()
}

#[test]
fn a_killed_rank_alone_on_its_host_is_refused_by_its_port_within_a_fraction_of_the_timeout() {
    // Ring of hosts 0 → 1 → 2 → 3: rank 2 observes rank 1 and watches its port.
    let report = run_job(&[
        "-n",
        "4",
        "--hosts",
        "4",
        "--kill",
        "1@500ms",
        "--duration",
        "1500ms",
    ]);
    let f = failure_of(&report, 1);
    assert_eq!(f["cause"], "inband", "{f:#}");
    // The kernel closes the dead process's sockets as it tears it down;
    // the watch ends then and the probe is refused at once. Bounded by
    // half the timeout (generous: a loaded machine's teardown is the
    // bulk of it), where the timeout path would take a whole one.
    let delay = delay_of(&report, 1);
    assert!(
        (0.0..TIMEOUT_MS / 2.0).contains(&delay),
        "{delay} ms after the kill"
    );
    let observer = liveness_of(&report, 2);
    assert!(observer["watches"].as_u64().unwrap() >= 1, "{observer}");
    // The observer's probe after the kill was refused, unless the
    // emitter's heartbeat write failed first (both follow the kernel's
    // teardown) and its notice moved the observer's watch on before the
    // watch's end was read. (At the end, a watch opened to a rank that
    // left and exited is refused too: the Engine ignores it.)
    assert!(
        observer["refused"].as_u64().unwrap() >= 1 || f["detector"] == 0,
        "{observer}; {f:#}"
    );
    // Whenever a watch ended without a leave, no probe was greeted: the
    // process was dead. (Not necessarily refused yet: the kernel closes the
    // port a moment after the watch, so a first probe can meet it still
    // listening and end unanswered, to be probed again, unless rank 0's
    // notice moves the watch on first: design §4.5 "In-band detection", the
    // teardown floor. Seen once the agents got small, with a full ci/test:
    // probes 1, unanswered 1, declared in-band by rank 0.)
    if observer["watches_ended"].as_u64().unwrap() >= 1 {
        assert_eq!(observer["greeted"], 0, "{observer}");
        assert!(
            observer["refused"].as_u64().unwrap() + observer["unanswered"].as_u64().unwrap() >= 1,
            "{observer}"
        );
    }
    assert_all_learned(&report, 1, &[0, 2, 3]);
    assert_no_false_reports(&report);
}

#[test]
fn a_stopped_rank_alone_on_its_host_is_not_declared_by_the_probe_only_by_the_timeout() {
    let report = run_job(&[
        "-n",
        "4",
        "--hosts",
        "4",
        "--stop",
        "1@500ms",
        "--duration",
        "1500ms",
    ]);
    let f = failure_of(&report, 1);
    assert_eq!(f["cause"], "timeout", "{f:#}");
    let delay = delay_of(&report, 1);
    assert!(
        delay >= TIMEOUT_MS * 0.9,
        "{delay} ms after the stop: {f:#}"
    );
    // Its kernel kept the port and the observer's connection to it: no
    // watch ended, no probe was refused anywhere.
    for rank in [0u64, 2, 3] {
        let l = liveness_of(&report, rank);
        assert_eq!(l["refused"], 0, "rank {rank}: {l}");
    }
    assert_eq!(liveness_of(&report, 2)["watches_ended"], 0, "{report:#}");
    assert_no_false_reports(&report);
}
