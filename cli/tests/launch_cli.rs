//! `ffd run` (and `ffd info`) with bad usage, as a process: exit status 2, a message on
//! standard error naming the option and its accepted form, nothing started
//! and nothing on standard output. Every wait on the child is bounded.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(20);

/// Runs `ffd run ARGS` with extra environment; (status code, stdout, stderr).
fn ffd_run(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    ffd("run", args, env)
}

/// Runs `ffd SUBCOMMAND ARGS` with extra environment and no other `FFD_*`
/// variable; (status code, stdout, stderr).
fn ffd(subcommand: &str, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ffd"));
    command
        .arg(subcommand)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, _) in std::env::vars() {
        if name.starts_with("FFD_") {
            command.env_remove(name);
        }
    }
    command.envs(env.iter().copied());
    let mut child = command.spawn().expect("ffd starts");
    let (mut stdout, mut stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let (mut out, mut err) = (String::new(), String::new());
        let _ = stdout.read_to_string(&mut out);
        let _ = stderr.read_to_string(&mut err);
        let _ = tx.send((out, err));
    });
    // The pipes close when the process exits.
    let Ok((out, err)) = rx.recv_timeout(BOUND) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("ffd {subcommand} {args:?} did not exit");
    };
    (child.wait().expect("reaped").code(), out, err)
}

#[test]
fn bad_usage_exits_2_with_a_message_naming_the_option() {
    // (arguments, environment, expected on stderr)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        (
            &["-n", "4", "--kill", "3"],
            &[],
            "invalid value '3' for '--kill <RANK@TIME>': `3` has no `@`; accepted: RANK@TIME, a rank and a time after job start, e.g. `--kill 3@500ms`",
        ),
        (
            &["-n", "4", "--stop", "1@500"],
            &[],
            "invalid value '1@500' for '--stop <RANK@TIME>': time `500` has no unit",
        ),
        (
            &["-n", "4", "--kill", "7@1s"],
            &[],
            "ffd run: --kill 7@1s: rank 7 is not in the job (ranks 0 to 3)\n",
        ),
        (
            &["-n", "4", "--cont", "1@1s"],
            &[],
            "ffd run: --cont 1@1s: rank 1 is not stopped then; a --cont needs an earlier --stop 1@TIME\n",
        ),
        (
            &["-n", "4", "--stop", "1@2s", "--cont", "1@1s"],
            &[],
            "ffd run: --cont 1@1s: rank 1 is not stopped then",
        ),
        (
            &["-n", "4", "--kill", "1@3s", "--duration", "2s"],
            &[],
            "ffd run: --kill 1@3s is not before the end of the run (--duration 2s)\n",
        ),
        (
            &["-n", "4", "--period", "10"],
            &[],
            "invalid value '10' for '--period <PERIOD>': `10` has no unit; accepted: a number with a unit ns|us|ms|s",
        ),
        (
            &["-n", "4", "--period", "10ms", "--timeout", "5ms"],
            &[],
            "ffd run: the agents would reject their settings: the timeout must exceed the period",
        ),
        (
            &["-n", "4"],
            &[("FFD_RING", "circle")],
            "ffd run: the agents would reject their settings: FFD_RING=`circle`",
        ),
        (&["--kill", "1@1s"], &[], "--ranks <RANKS>"),
        (
            &["-n", "4", "--cut-host", "1@1s"],
            &[],
            "ffd run: --cut-host 1@1s needs --netns H (hosts with links of their own)\n",
        ),
        (
            &["-n", "2", "--netns", "3"],
            &[],
            "ffd run: --netns 3: more hosts than ranks (-n 2); a host needs at least one rank\n",
        ),
        (&["-n", "2", "--netns", "0"], &[], "'--netns <H>'"),
    ];
    for (args, env, want) in cases {
        let (code, out, err) = ffd_run(args, env);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want {want:?} in:\n{err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out, "", "{args:?}: nothing is started");
    }
}

#[test]
fn help_lists_the_fault_options() {
    let (code, out, _) = ffd_run(&["--help"], &[]);
    assert_eq!(code, Some(0));
    for option in [
        "--kill <RANK@TIME>",
        "--stop <RANK@TIME>",
        "--cont <RANK@TIME>",
        "--json <FILE>",
        "--hosts <H>",
        "--netns <H>",
        "--link-delay <D>",
        "--link-loss <P>",
        "--kill-host <HOST@TIME>",
        "--cut-host <HOST@TIME>",
        "--heal-host <HOST@TIME>",
    ] {
        assert!(out.contains(option), "{option} in:\n{out}");
    }
}

/// `ffd info`'s scheduling line under `env` (the default without one),
/// checked against what this process may do: `allowed_says` when real-time
/// scheduling is allowed here, the refusal naming `CAP_SYS_NICE` when not.
fn check_scheduling_line(env: &[(&str, &str)], shown: &str, allowed: bool, allowed_says: &str) {
    let (code, out, err) = ffd("info", &[], env);
    assert_eq!(code, Some(0), "{err}");
    let prefix = format!("scheduling (FFD_SCHED={shown}): ");
    let line = out
        .lines()
        .find(|l| l.contains(&prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{out}"));
    if allowed {
        assert!(
            line.contains(allowed_says) && line.ends_with("allowed here"),
            "{line}"
        );
    } else {
        assert!(
            line.contains("refused here") && line.contains("CAP_SYS_NICE"),
            "{line}"
        );
    }
}

#[test]
fn info_says_whether_the_progress_thread_may_run_under_fifo_and_refuses_a_bad_policy() {
    // What this process may do, asked from a thread of its own; `ffd
    // info` runs with the same credentials and limits.
    let allowed = thread::spawn(ffd::node::set_current_thread_fifo)
        .join()
        .unwrap()
        .is_ok();
    check_scheduling_line(
        &[("FFD_SCHED", "fifo")],
        "fifo",
        allowed,
        "SCHED_FIFO priority 1, allowed here",
    );
    // boost is the default.
    check_scheduling_line(
        &[],
        "boost",
        allowed,
        "normal, lifted to SCHED_FIFO priority 1 on any allowed CPU",
    );
    let (_, out, _) = ffd("info", &[], &[("FFD_SCHED", "normal")]);
    assert!(
        out.contains("scheduling (FFD_SCHED=normal): normal (SCHED_OTHER)"),
        "{out}"
    );
    let (code, out, err) = ffd("info", &[], &[("FFD_SCHED", "rr")]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        err.contains("FFD_SCHED=`rr` is not recognised; accepted: normal|boost|fifo"),
        "{err}"
    );
}
