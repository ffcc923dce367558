//! The launcher's process handling with scripted fake agents (`sh -c`):
//! spawning with the job's variables, fault injection by PID, shutdown
//! through stdin, the shutdown bound, start-up failures and aborts. The
//! fakes speak the agent line protocol, so this runs the launcher's real
//! code; only the agent is a stand-in.
//!
//! Every wait is bounded (the launcher's own bounds, and `recv_timeout`
//! here). The launcher reaps its agents on every path; the fakes also exit
//! at end of file on stdin, so none outlives a failed test for long.

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::mpsc::{self, Sender};
use std::thread;
use std::time::Duration;

use ffd_cli::launch::fault::{Fault, FaultKind, Schedule};
use ffd_cli::launch::{
    AgentCommand, AgentExit, Ending, LaunchError, Launcher, Outcome, Plan, RunInfo,
};
use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

const BOUND: Duration = Duration::from_secs(30);

/// A fake agent: ready at once, leaves on `shutdown` or end of file, and
/// reports the job's variables (and its secret file's modes) in its stats. `$BEFORE` and `$AFTER` are
/// spliced in before `ready` and after shutdown was asked.
fn fake(before: &str, after: &str) -> AgentCommand {
    let script = format!(
        r#"
{before}
echo "{{\"event\":\"ready\",\"me\":$FFD_RANK,\"pid\":$$,\"core\":null}}"
while read -r line; do [ "$line" = shutdown ] && break; done
{after}
echo "{{\"event\":\"stats\",\"me\":$FFD_RANK,\"stats\":{{\"size\":\"$FFD_SIZE\",\"bootstrap\":\"$FFD_BOOTSTRAP\",\"host\":\"$FFD_HOSTNAME\",\"domain\":\"$FFD_DOMAIN\",\"secret\":\"$FFD_SECRET_FILE\",\"secret_mode\":\"$(stat -c %a "$FFD_SECRET_FILE")\",\"dir_mode\":\"$(stat -c %a "$(dirname "$FFD_SECRET_FILE")")\"}}}}"
echo "{{\"event\":\"exit\",\"me\":$FFD_RANK}}"
"#
    );
    AgentCommand {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into(), "fake-agent".into()],
    }
}

fn plan(ranks: u32, faults: &[(FaultKind, u32, u64)], duration_ms: u64) -> Plan {
    let faults = faults.iter().map(|&(kind, rank, ms)| Fault {
        kind,
        rank,
        at: Duration::from_millis(ms),
    });
    let duration = Some(Duration::from_millis(duration_ms));
    Plan {
        info: RunInfo {
            ranks,
            provider: "tcp".into(),
            period: Duration::from_millis(10),
            timeout: Duration::from_millis(100),
        },
        schedule: Schedule::new(ranks, faults, duration).expect("a valid schedule"),
        agree: Vec::new(),
        duration,
        env: vec![("FFD_DOMAIN".into(), "lo".into())],
        hosts: Some(2),
        netns: None,
        verbose: false,
        cores: Vec::new(),
    }
}

fn launcher(plan: Plan, agent: AgentCommand) -> Launcher {
    Launcher::with_agent_command(plan, agent)
        .ready_timeout(BOUND)
        .shutdown_timeout(BOUND)
}

/// Runs to the end; the result, the timeline printed and the log.
fn run(launcher: Launcher) -> (Result<Outcome, LaunchError>, String, String) {
    let (mut out, mut log) = (Vec::new(), Vec::new());
    let result = launcher.run(&mut out, &mut log);
    (
        result,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&log).into_owned(),
    )
}

/// A fresh directory for the fakes to leave files in.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ffd-launch-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// The PIDs the fakes wrote into `dir` (as `<rank>.pid`).
fn pids_in(dir: &PathBuf) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the scratch directory") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "pid") {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        pids.push(text.trim().parse().expect("a pid"));
    }
    pids
}

fn assert_gone(pid: i32) {
    assert_eq!(
        kill(Pid::from_raw(pid), None),
        Err(Errno::ESRCH),
        "process {pid} is still there (not reaped)"
    );
}

#[test]
fn a_clean_run_passes_the_job_variables_and_shuts_down_through_stdin() {
    let (result, out, log) = run(launcher(plan(3, &[], 200), fake("", "")));
    let outcome = result.expect("the job runs");
    assert_eq!(outcome.ending, Ending::Completed, "{out}{log}");
    assert_eq!(outcome.agents.len(), 3);
    for a in &outcome.agents {
        assert_eq!(a.exit, AgentExit::code(0), "rank {}: {out}{log}", a.rank);
        assert_gone(a.pid as i32);
    }
    let report = outcome.timeline.report();
    // The stats line is printed only after `shutdown` was read from stdin.
    assert_eq!(report.stats.len(), 3, "{out}{log}");
    let mut secrets = Vec::new();
    for (rank, stats) in &report.stats {
        assert_eq!(stats["size"], "3");
        assert_eq!(stats["domain"], "lo");
        assert_eq!(stats["host"], format!("node{}", rank % 2));
        let bootstrap = stats["bootstrap"].as_str().unwrap();
        assert!(bootstrap.starts_with("127.0.0.1:"), "{bootstrap}");
        // The job's secret, private while the job ran.
        assert_eq!(stats["secret_mode"], "600", "{stats}");
        assert_eq!(stats["dir_mode"], "700", "{stats}");
        secrets.push(PathBuf::from(stats["secret"].as_str().unwrap()));
    }
    secrets.dedup();
    assert_eq!(secrets.len(), 1, "one secret for the job: {secrets:?}");
    assert!(
        !secrets[0].parent().unwrap().exists(),
        "the secret's directory is removed when the run ends"
    );
    assert_eq!(report.left, [0, 1, 2], "each printed its exit line");
    assert!(out.contains("all 3 ranks ready (start-up took"), "{out}");
    assert!(
        out.contains("end of the run: shutting down 3 agents"),
        "{out}"
    );
    assert!(out.contains("all agents reaped"), "{out}");
    assert_eq!(ffd_cli::launch::cli::exit_status(&outcome), 0);
}

#[test]
fn a_killed_agent_is_reaped_as_killed_and_reports_reach_the_timeline() {
    // Ranks 0 and 2 "learn" of rank 1's failure when asked to shut down.
    let after = r#"
echo "{\"event\":\"failed\",\"me\":$FFD_RANK,\"rank\":1,\"cause\":\"timeout\",\"detector\":$FFD_RANK}"
"#;
    let (result, out, log) = run(launcher(
        plan(3, &[(FaultKind::Kill, 1, 100)], 400),
        fake("", after),
    ));
    let outcome = result.expect("the job runs");
    assert_eq!(outcome.ending, Ending::Completed, "{out}{log}");
    assert_eq!(outcome.agents[1].exit, AgentExit::signal(9), "{out}{log}");
    assert_eq!(outcome.agents[0].exit, AgentExit::code(0));
    assert_eq!(outcome.agents[2].exit, AgentExit::code(0));
    assert!(out.contains(" ms  kill -9 rank 1\n"), "{out}");
    let failure = &outcome.timeline.report().failures[0];
    assert_eq!((failure.rank, failure.fault.as_str()), (1, "kill"));
    assert!(
        (100.0..2000.0).contains(&failure.injected_at_ms),
        "{}",
        failure.injected_at_ms
    );
    assert_eq!(failure.notified.as_deref(), Some(&[0, 2][..]));
    assert_eq!(failure.missed, 0);
    assert!(failure.detected_at_ms.is_some());
    assert!(failure.all_notified_at_ms.is_some());
    assert!(outcome.timeline.abnormal_exits().is_empty(), "{out}");
    assert_eq!(ffd_cli::launch::cli::exit_status(&outcome), 0);
}

#[test]
fn a_stopped_agent_is_continued_before_it_is_asked_to_leave() {
    let (result, out, log) = run(launcher(
        plan(2, &[(FaultKind::Stop, 1, 50)], 300),
        fake("", ""),
    ));
    let outcome = result.expect("the job runs");
    assert!(out.contains("kill -STOP rank 1\n"), "{out}");
    assert!(out.contains("kill -CONT rank 1\n"), "{out}");
    assert_eq!(outcome.agents[1].exit, AgentExit::code(0), "{out}{log}");
    assert!(
        outcome.ran_for < Duration::from_secs(20),
        "it did not wait for the shutdown bound: {:?}",
        outcome.ran_for
    );
    assert_eq!(outcome.timeline.report().failures[0].fault, "stop");
}

#[test]
fn stop_then_cont_on_time() {
    let (result, out, _) = run(launcher(
        plan(
            2,
            &[(FaultKind::Stop, 0, 50), (FaultKind::Cont, 0, 150)],
            300,
        ),
        fake("", ""),
    ));
    let outcome = result.expect("the job runs");
    let stop = out.find("kill -STOP rank 0").expect("stopped");
    let cont = out.find("kill -CONT rank 0").expect("continued");
    assert!(stop < cont, "{out}");
    assert_eq!(
        out.matches("kill -CONT").count(),
        1,
        "not continued twice: {out}"
    );
    assert!(outcome.agents.iter().all(|a| a.exit == AgentExit::code(0)));
}

#[test]
fn a_straggler_is_killed_at_the_shutdown_bound() {
    // Rank 1 never reads its stdin.
    let before =
        r#"case "$FFD_RANK" in 1) echo "{\"event\":\"ready\",\"me\":1}"; exec sleep 60;; esac"#;
    let l =
        launcher(plan(2, &[], 100), fake(before, "")).shutdown_timeout(Duration::from_millis(300));
    let (result, out, log) = run(l);
    let outcome = result.expect("the job runs");
    let straggler = outcome.agents[1];
    assert_eq!(
        straggler.exit,
        AgentExit {
            code: None,
            signal: Some(9),
            forced: true
        },
        "{out}{log}"
    );
    assert_gone(straggler.pid as i32);
    assert!(out.contains("rank 1 did not exit in time"), "{out}");
    assert!(
        outcome
            .timeline
            .summary()
            .contains("abnormal exits: rank 1 (killed by ffd run after the shutdown bound)")
    );
    assert_eq!(ffd_cli::launch::cli::exit_status(&outcome), 1);
}

#[test]
fn an_agent_that_dies_before_ready_fails_the_start_and_nothing_is_left() {
    let dir = scratch("early-exit");
    // Rank 2 fails once the others have written their PIDs (the launcher
    // kills them as soon as it fails), polling within the ready bound.
    let before = format!(
        r#"echo $$ > {dir}/$FFD_RANK.pid
echo "$FFD_SECRET_FILE" > {dir}/secret-of-$FFD_RANK
case "$FFD_RANK" in
2) while [ ! -s {dir}/0.pid ] || [ ! -s {dir}/1.pid ]; do sleep 0.01 </dev/null >/dev/null 2>&1; done
   echo "boom: no fabric here" >&2; exit 3;;
*) read -r line; exit 0;;
esac"#,
        dir = dir.display()
    );
    let (result, _, log) = run(launcher(plan(3, &[], 1000), fake(&before, "")));
    let Err(LaunchError::NotReady {
        missing, details, ..
    }) = &result
    else {
        panic!("expected a start-up failure, got {result:?}");
    };
    let message = result.as_ref().unwrap_err().to_string();
    assert!(
        message.contains("rank 2 exited (code 3) before it was ready"),
        "{message}"
    );
    assert!(missing.contains(&2), "{missing:?}");
    let rank2 = details
        .iter()
        .find(|d| d.starts_with("rank 2:"))
        .expect("rank 2 explained");
    assert!(rank2.contains("boom: no fabric here"), "{rank2}");
    assert!(log.contains("[rank 2] boom: no fabric here\n"), "{log}");
    let pids = pids_in(&dir);
    assert_eq!(pids.len(), 3);
    for pid in pids {
        assert_gone(pid);
    }
    // The job's secret went with it.
    let secret = std::fs::read_to_string(dir.join("secret-of-0")).unwrap();
    let secret = PathBuf::from(secret.trim());
    assert!(secret.is_absolute(), "{}", secret.display());
    assert!(!secret.parent().unwrap().exists(), "{}", secret.display());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_rank_that_never_gets_ready_is_named_after_the_bound() {
    let dir = scratch("never-ready");
    let before = format!(
        r#"echo $$ > {dir}/$FFD_RANK.pid
case "$FFD_RANK" in 1) echo "waiting for a fabric" >&2; read -r line; exit 0;; esac"#,
        dir = dir.display()
    );
    let l = launcher(plan(2, &[], 1000), fake(&before, "")).ready_timeout(Duration::from_secs(2));
    let (result, _, _) = run(l);
    let message = result.expect_err("not ready").to_string();
    assert!(
        message.starts_with("not every rank was ready within 2s; not ready: rank 1"),
        "{message}"
    );
    assert!(
        message.contains(
            "rank 1: still starting; killed; its last stderr lines:\n    waiting for a fabric"
        ),
        "{message}"
    );
    for pid in pids_in(&dir) {
        assert_gone(pid);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn odd_lines_are_counted_and_stderr_is_passed_through_with_the_rank() {
    let after = r#"case "$FFD_RANK" in 0)
echo "garbage"
echo '{"event":"rejoined","me":0}'
echo '{"event":"exit","me":1}'
echo "hello from stderr" >&2;; esac"#;
    let (result, _, log) = run(launcher(plan(2, &[], 100), fake("", after)));
    let outcome = result.expect("the job runs");
    // "garbage" and the line claiming to be rank 1 are bad; `rejoined` is unknown.
    assert_eq!(outcome.timeline.bad_lines(), (2, 1));
    assert!(log.contains("[rank 0] hello from stderr\n"), "{log}");
    assert_eq!(ffd_cli::launch::cli::exit_status(&outcome), 0);
}

/// Forwards what the launcher prints, line by line.
struct Lines {
    tx: Sender<String>,
    partial: Vec<u8>,
}

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.partial.extend_from_slice(buf);
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let _ = self.tx.send(String::from_utf8_lossy(&line).into_owned());
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn an_abort_shuts_the_job_down_and_reaps_every_agent() {
    let l = launcher(plan(3, &[], 600_000), fake("", ""));
    let abort = l.abort_handle();
    let (lines_tx, lines) = mpsc::channel();
    let (done_tx, done) = mpsc::channel();
    thread::spawn(move || {
        let mut out = Lines {
            tx: lines_tx,
            partial: Vec::new(),
        };
        let _ = done_tx.send(l.run(&mut out, &mut io::sink()));
    });
    let ready = loop {
        match lines.recv_timeout(BOUND) {
            Ok(line) if line.contains("all 3 ranks ready") => break true,
            Ok(_) => {}
            Err(_) => break false,
        }
    };
    // Abort either way, so that a failure here still ends the job.
    abort.abort();
    assert!(ready, "the fakes did not get ready");
    let outcome = done
        .recv_timeout(BOUND)
        .expect("the launcher ends after an abort")
        .expect("the job ran");
    assert_eq!(outcome.ending, Ending::Aborted);
    for a in &outcome.agents {
        assert_eq!(a.exit, AgentExit::code(0), "rank {} left cleanly", a.rank);
        assert_gone(a.pid as i32);
    }
    assert_eq!(outcome.timeline.report().stats.len(), 3);
    assert_eq!(ffd_cli::launch::cli::exit_status(&outcome), 1);
}

#[test]
fn run_with_prints_the_timeline_and_summary_and_writes_the_json() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: ffd_cli::launch::cli::RunArgs,
    }
    let dir = scratch("json");
    let json = dir.join("report.json");
    let json_arg = json.display().to_string();
    let args = Cli::try_parse_from([
        "run",
        "-n",
        "4",
        "--kill",
        "3@100ms",
        "--stop",
        "2@150ms",
        "--duration",
        "400ms",
        "--json",
        &json_arg,
    ])
    .expect("valid options")
    .run;
    // When asked to leave: rank 0 declares rank 3 (in-band), rank 1 hears
    // of it and falsely declares rank 0; rank 2, continued, self-excludes.
    let after = r#"case "$FFD_RANK" in
0) echo '{"event":"failed","me":0,"rank":3,"cause":"inband","detector":0}';;
1) echo '{"event":"failed","me":1,"rank":3,"cause":"notice","detector":0}'
   echo '{"event":"failed","me":1,"rank":0,"cause":"timeout","detector":1}';;
2) echo '{"event":"self_excluded","me":2}';;
esac"#;
    let (mut out, mut log) = (Vec::new(), Vec::new());
    let status = ffd_cli::launch::cli::run_with(
        &args,
        &ffd::config::Env::default(),
        fake("", after),
        false,
        &mut out,
        &mut log,
    );
    let (out, log) = (String::from_utf8_lossy(&out), String::from_utf8_lossy(&log));
    assert_eq!(status, 0, "{out}{log}");
    for want in [
        " ms  kill -9 rank 3\n",
        " ms  kill -STOP rank 2\n",
        " ms  rank 0 detected rank 3 (in-band, ",
        " ms  all 2 live ranks know rank 3 failed (",
        " ms  rank 1 detected rank 0 (timeout) -- false report: rank 0 was not faulted\n",
        " ms  rank 2 self-excluded\n",
        "\nsummary: 4 ranks, provider tcp, period 10ms, timeout 100ms\n",
        "false reports: rank 0 reported failed by rank 1\n",
        "self-excluded: rank 2\n",
        "never learned of rank 2's failure: ranks 0, 1\n",
    ] {
        assert!(out.contains(want), "{want:?} in:\n{out}");
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON was written"))
            .expect("valid JSON");
    assert_eq!(report["ranks"], 4);
    assert_eq!(report["provider"], "tcp");
    assert_eq!(report["period_ms"], 10.0);
    assert_eq!(report["timeout_ms"], 100.0);
    let kill = &report["failures"][0];
    assert_eq!(kill["rank"], 3);
    assert_eq!(kill["fault"], "kill");
    assert_eq!(kill["cause"], "inband");
    assert_eq!(kill["detector"], 0);
    assert_eq!(kill["notified"], serde_json::json!([0, 1]));
    assert!(kill["all_notified_at_ms"].as_f64().is_some(), "{report}");
    assert!(kill["injected_at_ms"].as_f64().unwrap() >= 100.0);
    let stop = &report["failures"][1];
    assert_eq!((&stop["rank"], &stop["fault"]), (&2.into(), &"stop".into()));
    assert!(stop["detected_at_ms"].is_null() && stop["all_notified_at_ms"].is_null());
    assert_eq!(stop["missed"], 2, "ranks 0 and 1 never learned: {report}");
    assert_eq!(
        report["false_reports"],
        serde_json::json!([{"rank": 0, "reported_by": [1]}])
    );
    assert_eq!(report["self_excluded"], serde_json::json!([2]));
    assert_eq!(report["left"], serde_json::json!([0, 1, 2]));
    assert_eq!(report["stats"]["1"]["size"], "4");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_abort_during_start_up_fails_it_naming_the_ranks() {
    // The abort is queued before the run, so it is the first thing seen.
    let l = launcher(plan(2, &[], 1000), fake("read -r line; exit 0", ""));
    l.abort_handle().abort();
    let (result, _, _) = run(l);
    match result {
        Err(LaunchError::NotReady {
            reason,
            missing,
            interrupted,
            ..
        }) => {
            assert!(
                reason.starts_with("aborted before every rank was ready; not ready: ranks 0, 1"),
                "{reason}"
            );
            assert_eq!(missing, [0, 1]);
            assert_eq!(interrupted, None);
        }
        other => panic!("expected a start-up failure, got {other:?}"),
    }
}

#[test]
fn the_run_ends_early_when_every_agent_is_gone() {
    let (result, out, log) = run(launcher(
        plan(1, &[(FaultKind::Kill, 0, 50)], 600_000),
        fake("", ""),
    ));
    let outcome = result.expect("the job runs");
    assert_eq!(outcome.ending, Ending::AllExited, "{out}{log}");
    assert!(outcome.ran_for < BOUND, "{:?}", outcome.ran_for);
    assert!(
        out.contains("every agent has exited: shutting down 0 agents"),
        "{out}"
    );
    assert_eq!(outcome.agents[0].exit, AgentExit::signal(9));
    assert_eq!(ffd_cli::launch::cli::exit_status(&outcome), 0);
}
