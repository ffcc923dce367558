//! A stranger who can reach a rank's fabric port, and knows nothing of the
//! job, must not be able to kill the rank. On the default path
//! (`FFD_PROVIDER=tcp`, that is `tcp;ofi_rxm`) libfabric accepts a TCP
//! connection from anyone and parses what it sends before ffd sees a byte.
//! Two short streams go to every listening port of a process running the
//! two ranks of a job, each on a connection of its own:
//!
//! - a connection request, then one rxm packet whose header's `conn_id`
//!   (stream bytes 80-87) names a connection that does not exist;
//! - a connection request, then a bare tcp acknowledgement (`op_data` 2)
//!   that no transfer of this connection is waiting for.
//!
//! After each, the test waits until the rank has read every byte of it
//! (its socket's receive queue in `/proc/net/tcp` is empty). Then both ranks
//! must still be running, know nobody failed, agree with each other, and
//! have completed heartbeats since the attack began.
//!
//! The libfabric of Debian 12 (1.17), the 2.5 bundled in the Open MPI wheel
//! and libfabric's main branch dereference what these streams name and die
//! with SIGSEGV; `docs/upstream/libfabric-rxm-conn-id.md` describes both
//! bugs and carries the fix.
//!
//! On a libfabric version known to have them (`KNOWN_VULNERABLE`: 1.13 to
//! 2.6, Debian 12's 1.17 among them, the version CI runs) and a provider
//! they are in, the crash is an *expected failure*: the test passes only
//! if the rank died of SIGSEGV or SIGABRT, and prints `EXPECTED FAILURE`
//! naming the version and the document. If a rank survives there, the
//! test fails and says so: the default path has been made to survive
//! (the strangers issue, or a fixed libfabric under an old version
//! number), and the version is to come off `KNOWN_VULNERABLE`, so the
//! test guards the fix from then on. On any other version, any outcome
//! but a living, working rank fails.
//!
//! A libfabric that `ci/libfabric-patched PREFIX` built (1.17 or 2.1 with
//! `docs/upstream/`'s patch for it) is fixed whatever its version says:
//! the test finds the stamp that command leaves in PREFIX
//! (`share/ffd/libfabric-patched`) beside the `libfabric.so` the ranks
//! mapped, and then any outcome but a living, working rank fails. With
//! `FFD_TEST_PATCHED_LIBFABRIC=1` a libfabric without the stamp fails the
//! test instead of being taken as stock.
//!
//! The second test runs the same attack on the patched libfabric in
//! `target/libfabric-patched` (`FFD_TEST_PATCHED_PREFIX` names another
//! PREFIX), which `ci/test` builds first: the ranks' process gets
//! `PREFIX/lib` first on `LD_LIBRARY_PATH`, so the test binary built
//! against Debian's libfabric runs on it (2.x keeps the soname
//! `libfabric.so.1` and the 1.x symbol versions). There every rank must
//! live. Without that PREFIX it is skipped, and fails under
//! `FFD_TEST_REQUIRE_ALL=1` (`tests/prereq`).
//!
//! The ranks run in a child process (this test binary run again, filtered
//! to the ignored `rank_role` test), so that a crash in libfabric ends the
//! child and not the test. The child says which libfabric it mapped and
//! its version. It is killed and reaped on every path.

mod group;
mod hostile;
mod prereq;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use ffd::config::{Config, CoreChoice, LocalMode};
use ffd::fabric::{PATCHED_STAMP, mapped_libfabric, patched_stamp, runtime_version, version_text};
use ffd::runtime::Detector;
use group::start_group;
use hostile::{ACK_STREAM, CONN_ID_STREAM, listening_ports, ranks_work, unhex};

const CHILD_ENV: &str = "FFD_HOSTILE_RANKS";
const TAG: &str = "FFD-HOSTILE";
/// How long the child lives at most, whatever happens to the parent.
const CHILD_LIFETIME: Duration = Duration::from_secs(60);
/// For the child to start its ranks and for one agreement: both are well
/// under a second here; generous for a loaded machine.
const STEP_WITHIN: Duration = Duration::from_secs(20);
/// For a rank to answer a connection request and to read a stream.
const READ_WITHIN: Duration = Duration::from_secs(10);

/// The document that describes the libfabric bugs and carries their fix.
const FIX_DOCUMENT: &str = "docs/upstream/libfabric-rxm-conn-id.md";

/// The providers the two bugs are in: rxm over tcp for the `conn_id`, the
/// tcp message protocol (under rxm, and the RDM endpoints of `net` and of
/// the newer native `tcp`) for the acknowledgement.
const AFFECTED_PROVIDERS: &[&str] = &["tcp;ofi_rxm", "tcp", "net"];

/// libfabric versions (`fi_version`, the API version) whose source has at
/// least one of the two bugs: the unchecked ack since 1.13, the rxm lookup
/// since 1.14; the newest read is 2.6, which 2.6.0 and the main branch both
/// report. No release carries the fix yet. A crash on a version outside
/// this range fails the test.
const KNOWN_VULNERABLE: ((u32, u32), (u32, u32)) = ((1, 13), (2, 6));

/// Set to `1` where the test must run against a patched libfabric.
const REQUIRE_PATCHED_ENV: &str = "FFD_TEST_PATCHED_LIBFABRIC";
/// The prefix of the patched libfabric for the second test, when not
/// `target/libfabric-patched` (where `ci/test` builds it).
const PATCHED_PREFIX_ENV: &str = "FFD_TEST_PATCHED_PREFIX";

fn fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// Whether a crash of a rank on `provider` under libfabric `loaded` is
/// the expected failure: a version with the known bugs, a provider they
/// are in.
fn expected_to_crash(loaded: u32, provider: &str) -> bool {
    known_vulnerable(loaded) && AFFECTED_PROVIDERS.contains(&provider)
}

fn known_vulnerable(loaded: u32) -> bool {
    let ((lo_major, lo_minor), (hi_major, hi_minor)) = KNOWN_VULNERABLE;
    (fi_version(lo_major, lo_minor)..=fi_version(hi_major, hi_minor)).contains(&loaded)
}

/// The receive queue of the rank's end of a connection, from
/// `/proc/net/tcp{,6}`: `local` is the rank's port, `remote` ours. `None`
/// once that socket is gone.
fn receive_queue(local: u16, remote: u16) -> Option<u64> {
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for row in text.lines().skip(1) {
            let cols: Vec<&str> = row.split_whitespace().collect();
            if cols.len() < 5 {
                continue;
            }
            let port = |col: &str| {
                col.rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
            };
            if port(cols[1]) == Some(local) && port(cols[2]) == Some(remote) {
                let rx = cols[4].split(':').nth(1).expect("tx_queue:rx_queue");
                return Some(u64::from_str_radix(rx, 16).expect("hex queue"));
            }
        }
    }
    None
}

/// The ranks: two detectors of one job in this process, on the default
/// provider over loopback, each on the fabric ring (same-host watching
/// off). Ignored in normal runs; the test runs it in a child process.
#[test]
#[ignore = "the ranks of the hostile-connection test; it runs them in a child process"]
fn rank_role() {
    assert!(
        std::env::var_os(CHILD_ENV).is_some(),
        "rank_role is run by the hostile-connection test, with {CHILD_ENV} set"
    );
    let config = Config::builder()
        .domain("lo")
        .period(Duration::from_millis(10))
        .timeout(Duration::from_millis(100))
        .startup_grace(Duration::from_millis(200))
        .core(CoreChoice::None)
        .local(LocalMode::Off)
        .build()
        .expect("valid config");
    let detectors: Vec<Detector> = start_group(2, &config);
    let beats_before: Vec<u64> = detectors
        .iter()
        .map(|d| d.stats().runtime.heartbeats.completed)
        .collect();

    let (lines, commands) = mpsc::channel::<String>();
    thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let (provider, _) = detectors[0].fabric();
    let ports: Vec<String> = listening_ports("self").iter().map(u16::to_string).collect();
    let library = mapped_libfabric().map_or_else(|| "-".to_owned(), |l| l.display().to_string());
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{TAG} library {} {library}", runtime_version())
        .and_then(|()| writeln!(out, "{TAG} ready {provider} {}", ports.join(" ")))
        .and_then(|()| out.flush())
        .is_err()
    {
        return; // the test is gone: nobody to serve
    }
    let start = Instant::now();
    while let Some(left) = CHILD_LIFETIME.checked_sub(start.elapsed()) {
        match commands.recv_timeout(left) {
            Ok(line) if line == "check" => {
                let answer = match check(&detectors, &beats_before) {
                    Ok(said) => format!("{TAG} alive {said}"),
                    Err(why) => format!("{TAG} broken {why}"),
                };
                if writeln!(out, "{answer}")
                    .and_then(|()| out.flush())
                    .is_err()
                {
                    break;
                }
            }
            Ok(_) => {}
            Err(_) => break, // stdin closed or lifetime over
        }
    }
    for d in detectors {
        d.shutdown();
    }
}

/// Whether both ranks still run and work (`hostile::ranks_work`).
fn check(detectors: &[Detector], beats_before: &[u64]) -> Result<String, String> {
    ranks_work(detectors, beats_before, STEP_WITHIN)
}

/// Kills and reaps the child on every path.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the child said, or that its stdout closed.
enum Said {
    Line(String),
    Closed,
}

/// Sends `stream` to `port` on a connection of its own and waits until the
/// rank answered the connection request (or closed it) and has read every
/// byte. Returns the connection, kept open until the end of the test, and
/// what happened.
fn attack(port: u16, stream: &[u8]) -> (Option<TcpStream>, String) {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut conn = match TcpStream::connect_timeout(&addr, READ_WITHIN) {
        Ok(c) => c,
        Err(e) => return (None, format!("port {port}: connect: {e}")),
    };
    let ours = conn.local_addr().expect("local address").port();
    if let Err(e) = conn.write_all(stream) {
        return (None, format!("port {port}: send: {e}"));
    }
    conn.set_read_timeout(Some(READ_WITHIN)).expect("timeout");
    let mut reply = [0u8; 256];
    let answered = match conn.read(&mut reply) {
        Ok(0) => "closed the connection".to_owned(),
        Ok(n) => format!("answered {n} bytes"),
        Err(e) => format!("answered nothing ({e})"),
    };
    let deadline = Instant::now() + READ_WITHIN;
    let read = loop {
        match receive_queue(port, ours) {
            None => break "its socket is gone".to_owned(),
            Some(0) => break "read every byte".to_owned(),
            Some(left) if Instant::now() >= deadline => {
                break format!("{left} bytes still unread after {READ_WITHIN:?}");
            }
            Some(_) => thread::sleep(Duration::from_millis(2)),
        }
    };
    (Some(conn), format!("port {port}: {answered}, {read}"))
}

/// Waits (bounded) for the child's exit status once its stdout closed.
fn exit_status(child: &mut Child) -> Option<ExitStatus> {
    let deadline = Instant::now() + STEP_WITHIN;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        thread::sleep(Duration::from_millis(5));
    }
    None
}

#[test]
fn a_strangers_connection_to_a_ranks_fabric_port_does_not_kill_it() {
    let require_patched = std::env::var(REQUIRE_PATCHED_ENV).is_ok_and(|v| v == "1");
    attack_the_ranks(None, require_patched);
}

#[test]
fn a_strangers_connection_does_not_kill_a_rank_on_the_patched_libfabric() {
    let prefix = std::env::var_os(PATCHED_PREFIX_ENV).map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target/libfabric-patched"),
        PathBuf::from,
    );
    let built = if prefix.join("lib/libfabric.so.1").exists()
        && prefix.join(PATCHED_STAMP).is_file()
    {
        Ok(())
    } else {
        Err(format!(
            "no libfabric built by ci/libfabric-patched in {} (`ci/libfabric-patched {}` builds \
             it; {PATCHED_PREFIX_ENV} names another PREFIX)",
            prefix.display(),
            prefix.display()
        ))
    };
    if !prereq::available(&prereq::this_test(), &[built]) {
        return;
    }
    attack_the_ranks(Some(&prefix), true);
}

/// Starts the two ranks in a child process, on the libfabric the loader
/// finds or, with `patched_prefix`, on the one in `patched_prefix/lib`;
/// sends both streams to each of their ports and checks that the ranks
/// live and work. `require_patched`: the ranks' libfabric must carry the
/// stamp of `ci/libfabric-patched`.
fn attack_the_ranks(patched_prefix: Option<&Path>, require_patched: bool) {
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    if let Some(prefix) = patched_prefix {
        let mut paths = vec![prefix.join("lib")];
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            paths.extend(std::env::split_paths(&old));
        }
        command.env(
            "LD_LIBRARY_PATH",
            std::env::join_paths(paths).expect("LD_LIBRARY_PATH"),
        );
    }
    let child = command
        .args([
            "--ignored",
            "--exact",
            "rank_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        // Debian's libfabric loads libinfinipath, whose SIGSEGV handler
        // prints a backtrace and exits with status 1; without it the
        // status says which signal ended the ranks.
        .env("IPATH_NO_BACKTRACE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the ranks");
    let mut guard = ChildGuard(child);
    let mut stdin: ChildStdin = guard.0.stdin.take().expect("child stdin");
    let stdout = guard.0.stdout.take().expect("child stdout");
    let (tx, rx) = mpsc::channel::<Said>();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // libtest prints "test rank_role ... " before the child's first line.
            if let Some(at) = line.find(TAG) {
                let said = line[at + TAG.len()..].trim().to_owned();
                if tx.send(Said::Line(said)).is_err() {
                    return;
                }
            }
        }
        let _ = tx.send(Said::Closed);
    });

    let next_line = || match rx.recv_timeout(STEP_WITHIN) {
        Ok(Said::Line(l)) => l,
        Ok(Said::Closed) => panic!("the ranks ended before starting"),
        Err(_) => panic!("the ranks did not start within {STEP_WITHIN:?}"),
    };
    // The libfabric the ranks run on: its version and the file mapped.
    let said = next_line();
    let (loaded, library) = said
        .strip_prefix("library ")
        .and_then(|rest| rest.split_once(' '))
        .and_then(|(v, path)| Some((v.parse::<u32>().ok()?, path)))
        .unwrap_or_else(|| panic!("library line: {said}"));
    let library = (library != "-").then(|| PathBuf::from(library));
    let patched = library.as_deref().and_then(patched_stamp);
    if require_patched {
        assert!(
            patched.is_some(),
            "the ranks' libfabric ({library:?}) has no {PATCHED_STAMP} in its prefix: build it \
             with ci/libfabric-patched PREFIX and run with LD_LIBRARY_PATH=PREFIX/lib"
        );
    }
    if let (Some(prefix), Some(lib)) = (patched_prefix, &library) {
        assert!(
            lib.starts_with(prefix),
            "the ranks mapped {} and not the libfabric in {}",
            lib.display(),
            prefix.display()
        );
    }
    // A crash is expected only on a stock libfabric with the known bugs.
    let expected_to_crash =
        |loaded: u32, provider: &str| patched.is_none() && expected_to_crash(loaded, provider);
    let fabric = match (&patched, &library) {
        (Some(stamp), _) => format!("patched ({})", stamp.display()),
        (None, Some(lib)) => format!("stock ({})", lib.display()),
        (None, None) => "stock".to_owned(),
    };
    let ready = next_line();
    let words: Vec<&str> = ready.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"ready"), "ready line: {ready}");
    let provider = words.get(1).expect("provider").to_string();
    let ports: Vec<u16> = words[2..]
        .iter()
        .map(|p| p.parse().expect("port"))
        .collect();
    assert!(
        !ports.is_empty(),
        "the ranks listen on no TCP port ({provider})"
    );

    let mut open = Vec::new();
    let mut log = Vec::new();
    for (name, stream) in [("conn_id", CONN_ID_STREAM), ("ack", ACK_STREAM)] {
        let bytes = unhex(stream);
        for &port in &ports {
            let (conn, said) = attack(port, &bytes);
            log.push(format!("{name} stream, {said}"));
            open.extend(conn);
        }
    }

    let said = match writeln!(stdin, "check").and_then(|()| stdin.flush()) {
        Ok(()) => match rx.recv_timeout(2 * STEP_WITHIN) {
            Ok(Said::Line(l)) => Said::Line(l),
            Ok(Said::Closed) => Said::Closed,
            Err(_) => panic!(
                "the ranks did not answer the check within {:?}; {}",
                2 * STEP_WITHIN,
                log.join("; ")
            ),
        },
        Err(_) => Said::Closed,
    };
    drop(open);
    match said {
        Said::Line(l) if l.starts_with("alive") => {
            assert!(
                !expected_to_crash(loaded, &provider),
                "{provider} on libfabric {} survived the strangers' streams, which this \
                 version is known to crash on ({FIX_DOCUMENT}): the default path is fixed. \
                 Take it off KNOWN_VULNERABLE so this test guards the fix. {}; {l}",
                version_text(loaded),
                log.join("; ")
            );
            // Straight to stderr: a pass against the patched libfabric must show.
            let _ = writeln!(
                std::io::stderr(),
                "{provider} on libfabric {} {fabric}: every rank alive: {}; {l}",
                version_text(loaded),
                log.join("; ")
            );
        }
        Said::Line(l) => panic!("{provider}: {}; then: {l}", log.join("; ")),
        Said::Closed => {
            let status = exit_status(&mut guard.0);
            let signal = status.and_then(|s| s.signal());
            let crashed = matches!(signal, Some(libc::SIGSEGV) | Some(libc::SIGABRT));
            if crashed && expected_to_crash(loaded, &provider) {
                // Straight to the process's stderr: the harness captures
                // `eprintln!` of passing tests, and an expected failure
                // must show.
                let _ = writeln!(
                    std::io::stderr(),
                    "EXPECTED FAILURE: a_strangers_connection_to_a_ranks_fabric_port_does_not_kill_it: \
                     libfabric {} ({provider}) has the known bugs: the rank died of signal {} \
                     ({}); the fix is in {FIX_DOCUMENT}",
                    version_text(loaded),
                    signal.unwrap_or_default(),
                    log.join("; ")
                );
                return;
            }
            panic!(
                "{provider} on libfabric {} {fabric}: the ranks ended ({status:?}); {}",
                version_text(loaded),
                log.join("; ")
            );
        }
    }
}

#[test]
fn the_known_vulnerable_versions_are_those_the_fix_document_names() {
    assert!(known_vulnerable(fi_version(1, 17)));
    assert!(known_vulnerable(fi_version(2, 5)));
    assert!(known_vulnerable(fi_version(1, 13)));
    assert!(!known_vulnerable(fi_version(1, 12)));
    assert!(known_vulnerable(fi_version(2, 6)));
    assert!(!known_vulnerable(fi_version(2, 7)));
    // Debian 12's 1.17 on the default path is the expected failure; not
    // on a provider the bugs are not in.
    assert!(expected_to_crash(fi_version(1, 17), "tcp;ofi_rxm"));
    assert!(!expected_to_crash(fi_version(1, 17), "sockets"));
    assert!(!expected_to_crash(fi_version(2, 7), "tcp;ofi_rxm"));
    let doc = std::fs::read_to_string(format!("{}/{FIX_DOCUMENT}", env!("CARGO_MANIFEST_DIR")))
        .expect("the fix document");
    let ((lo_major, lo_minor), (hi_major, hi_minor)) = KNOWN_VULNERABLE;
    for version in [
        format!("{lo_major}.{lo_minor}"),
        format!("{hi_major}.{hi_minor}"),
    ] {
        assert!(doc.contains(&version), "{FIX_DOCUMENT} names {version}");
    }
}

#[test]
fn the_patched_libfabric_is_known_by_the_stamp_in_its_prefix() {
    // This process maps the libfabric ffd links.
    let library = mapped_libfabric().expect("a libfabric.so in /proc/self/maps");
    assert!(library.is_absolute(), "{}", library.display());
    let prefix = std::env::temp_dir().join(format!("ffd-patched-stamp-{}", std::process::id()));
    let lib = prefix.join("lib/libfabric.so.1");
    std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
    assert_eq!(patched_stamp(&lib), None, "no stamp yet");
    let stamp = prefix.join(PATCHED_STAMP);
    std::fs::create_dir_all(stamp.parent().unwrap()).unwrap();
    std::fs::write(&stamp, "patch-sha256 0\n").unwrap();
    assert_eq!(patched_stamp(&lib), Some(stamp));
    std::fs::remove_dir_all(&prefix).unwrap();
}
