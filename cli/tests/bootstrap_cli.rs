//! `ffd rendezvous` as a process: it prints its address and the job's
//! secret file, serves ranks that connect with the `FFD_*` variables, and
//! exits 0 when they are done, or 1 with the reason, removing a secret it
//! wrote either way. Every wait on the child is bounded; a stuck child is
//! killed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use ffd::bootstrap::Bootstrap;
use ffd::bootstrap::secret::JobSecret;
use ffd::bootstrap::tcp::TcpBootstrap;
use ffd::config::Env;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const BOUND: Duration = Duration::from_secs(20);

/// The first two lines a started `ffd rendezvous` prints.
struct Started {
    child: Child,
    addr: String,
    secret_file: PathBuf,
}

/// Starts `ffd rendezvous` and reads `FFD_BOOTSTRAP=` and
/// `FFD_SECRET_FILE=`, in that order.
fn start_ok(args: &[&str]) -> Started {
    let (child, lines) = start_lines(args, 2);
    let addr = lines[0]
        .trim()
        .strip_prefix("FFD_BOOTSTRAP=")
        .unwrap_or_else(|| panic!("the first line names the address: {lines:?}"))
        .to_owned();
    let secret_file = lines[1]
        .trim()
        .strip_prefix("FFD_SECRET_FILE=")
        .unwrap_or_else(|| panic!("the second line names the secret file: {lines:?}"))
        .into();
    Started {
        child,
        addr,
        secret_file,
    }
}

/// Starts `ffd rendezvous` and reads `count` lines of its standard output.
fn start_lines(args: &[&str], count: usize) -> (Child, Vec<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ffd"))
        .arg("rendezvous")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ffd starts");
    let stdout: ChildStdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let lines: Vec<String> = (0..count)
            .map(|_| {
                let mut line = String::new();
                let _ = reader.read_line(&mut line);
                line
            })
            .collect();
        let _ = tx.send(lines);
    });
    match rx.recv_timeout(BOUND) {
        Ok(lines) => (child, lines),
        Err(_) => {
            let _ = child.kill();
            panic!("ffd rendezvous printed no address");
        }
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().mode() & 0o777
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
    let Started {
        child,
        addr,
        secret_file,
    } = start_ok(&["-n", "2", "--listen", "127.0.0.1:0", "--timeout", "20s"]);
    assert!(
        addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
        "{addr}"
    );
    // A fresh secret, readable by its owner only, in a private directory.
    assert_eq!(mode(&secret_file), 0o600);
    let dir = secret_file.parent().unwrap().to_owned();
    assert_eq!(mode(&dir), 0o700);
    assert!(JobSecret::read_file(&secret_file).is_ok());
    let results: Vec<_> = (0..2)
        .map(|rank| {
            let (addr, secret_file) = (addr.clone(), secret_file.clone());
            thread::spawn(move || {
                let rank = rank.to_string();
                let env = Env::from_pairs([
                    ("FFD_BOOTSTRAP", addr.as_str()),
                    ("FFD_RANK", rank.as_str()),
                    ("FFD_SIZE", "2"),
                    ("FFD_SECRET_FILE", secret_file.to_str().unwrap()),
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
    assert!(!log.contains("dropped"), "{log}");
    assert!(!dir.exists(), "the secret is removed at exit");
}

#[test]
fn exits_1_with_the_reason_when_ranks_do_not_come() {
    let started = start_ok(&["-n", "3", "--timeout", "200ms"]);
    assert!(started.addr.starts_with("127.0.0.1:"), "{}", started.addr);
    let (status, log) = finish(started.child);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("ffd rendezvous: the rendezvous aborted the job: ranks 0, 1, 2 did not connect within 200ms (0 of 3 connected)"),
        "{log}"
    );
    assert!(
        !started.secret_file.exists(),
        "the secret is removed on failure too"
    );
}

#[test]
fn a_given_secret_file_is_used_and_kept() {
    let dir = std::env::temp_dir().join(format!("ffd-rdv-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("secret");
    let secret = JobSecret::random().unwrap();
    secret.write_new_file(&path).unwrap();
    let given = path.to_str().unwrap();
    let started = start_ok(&["-n", "1", "--secret-file", given, "--timeout", "20s"]);
    assert_eq!(started.secret_file, path);
    let mut b = TcpBootstrap::connect(&started.addr, 0, 1, &secret, BOUND).unwrap();
    assert_eq!(b.allgather(b"x").unwrap(), [b"x".to_vec()]);
    drop(b);
    let (status, log) = finish(started.child);
    assert!(status.success(), "{log}");
    assert!(path.exists(), "a file it did not write is kept");

    // A file others can read is refused, naming the option.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ffd"))
        .args(["rendezvous", "-n", "1", "--secret-file", given])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "--secret-file {given}: has mode 0640: other users may read or write it; accepted: \
             a file of mode 0600"
        )),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing printed for scripts");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn verbose_reports_each_dropped_connection_and_the_counts() {
    let started = start_ok(&["-n", "1", "--verbose", "--timeout", "20s"]);
    let mut stray = TcpStream::connect(&started.addr).unwrap();
    stray
        .write_all(b"\x10\x00\x00\x00\x01GET / HTTP/1.1\r\n")
        .unwrap();
    let mut rest = Vec::new();
    stray.read_to_end(&mut rest).unwrap(); // closed by the server
    let secret = JobSecret::read_file(&started.secret_file).unwrap();
    let mut b = TcpBootstrap::connect(&started.addr, 0, 1, &secret, BOUND).unwrap();
    b.allgather(b"x").unwrap();
    drop(b);
    let (status, log) = finish(started.child);
    assert!(status.success(), "{log}");
    assert!(
        log.contains("ffd rendezvous: dropped a connection from 127.0.0.1:")
            && log.contains(" (garbage): not an ffd rendezvous message"),
        "{log}"
    );
    assert!(
        log.contains("ffd rendezvous: rank 0 connected from"),
        "{log}"
    );
    assert!(
        log.contains("ffd rendezvous: dropped 1 connection (1 garbage)"),
        "{log}"
    );
}

#[test]
fn sigterm_stops_it_and_removes_the_secret() {
    let started = start_ok(&["-n", "2", "--timeout", "20s"]);
    let pid = Pid::from_raw(started.child.id() as i32);
    kill(pid, Signal::SIGTERM).unwrap();
    let (status, log) = finish(started.child);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("ffd rendezvous: interrupted by SIGTERM"),
        "{log}"
    );
    assert!(
        log.contains("ffd rendezvous: the rendezvous aborted the job: the rendezvous was stopped"),
        "{log}"
    );
    assert!(!started.secret_file.parent().unwrap().exists(), "{log}");
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
