//! `ffd rendezvous` as a process: it prints its address, serves ranks that
//! connect with the `FFD_*` variables, and exits 0 when they are done, or 1
//! with the reason. Every wait on the child is bounded; a stuck child is
//! killed.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use ffd::bootstrap::Bootstrap;
use ffd::bootstrap::tcp::TcpBootstrap;
use ffd::config::Env;

const BOUND: Duration = Duration::from_secs(20);

fn start(args: &[&str]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ffd"))
        .arg("rendezvous")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ffd starts");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(BOUND) {
        Ok(line) => (child, line),
        Err(_) => {
            let _ = child.kill();
            panic!("ffd rendezvous printed no address");
        }
    }
}

/// Waits for the child to exit (killing it after the bound) and returns its
/// status and standard error.
fn finish(mut child: Child) -> (ExitStatus, String) {
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        let _ = tx.send(text);
    });
    // Standard error closes when the process exits.
    let text = match rx.recv_timeout(BOUND) {
        Ok(text) => text,
        Err(_) => {
            let _ = child.kill();
            panic!("ffd rendezvous did not exit");
        }
    };
    (child.wait().unwrap(), text)
}

#[test]
fn serves_ranks_started_by_hand_and_exits_when_they_are_done() {
    let (child, line) = start(&["-n", "2", "--listen", "127.0.0.1:0", "--timeout", "20s"]);
    let addr = line
        .trim()
        .strip_prefix("FFD_BOOTSTRAP=")
        .expect("first line names the address")
        .to_owned();
    assert!(
        addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
        "{addr}"
    );
    let results: Vec<_> = (0..2)
        .map(|rank| {
            let addr = addr.clone();
            thread::spawn(move || {
                let rank = rank.to_string();
                let env = Env::from_pairs([
                    ("FFD_BOOTSTRAP", addr.as_str()),
                    ("FFD_RANK", rank.as_str()),
                    ("FFD_SIZE", "2"),
                    ("FFD_BOOTSTRAP_TIMEOUT", "20s"),
                ]);
                let mut b = TcpBootstrap::connect_with_env(&env)?;
                b.allgather(rank.as_bytes())
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap().unwrap())
        .collect();
    assert!(
        results
            .iter()
            .all(|all| *all == [b"0".to_vec(), b"1".to_vec()])
    );
    let (status, log) = finish(child);
    assert!(status.success(), "{status}: {log}");
    assert!(
        log.contains("ffd rendezvous: all 2 ranks connected"),
        "{log}"
    );
    assert!(
        log.contains("ffd rendezvous: round 1 complete (2 bytes)"),
        "{log}"
    );
    assert!(log.contains("ffd rendezvous: done after 1 rounds"), "{log}");
}

#[test]
fn exits_1_with_the_reason_when_ranks_do_not_come() {
    let (child, line) = start(&["-n", "3", "--timeout", "200ms"]);
    assert!(line.starts_with("FFD_BOOTSTRAP=127.0.0.1:"), "{line}");
    let (status, log) = finish(child);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("ffd rendezvous: the rendezvous aborted the job: ranks 0, 1, 2 did not connect within 200ms (0 of 3 connected)"),
        "{log}"
    );
}

#[test]
fn bad_options_are_refused_with_the_accepted_form() {
    let out = Command::new(env!("CARGO_BIN_EXE_ffd"))
        .args(["rendezvous", "-n", "2", "--timeout", "5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`5` has no unit; accepted: a number with a unit ns|us|ms|s, e.g. `10ms`"),
        "{err}"
    );
}
