//! Closed to strangers (`FFD_SOURCE_FILTER`, docs/design.md §5.4 "What the authentication stops"): on the
//! default provider (`tcp;ofi_rxm`), a connection to a rank's fabric port
//! from an address outside the job never completes its handshake, so the
//! streams that kill a rank of libfabric 1.17 (`tests/provider_hostile_connection.rs`)
//! never reach libfabric's parser.
//!
//! Three ranks of one job run in a child process (this binary again,
//! filtered to the ignored `rank_role` test) on `FFD_DOMAIN=lo` (their
//! addresses are 127.0.0.1) with `FFD_LOCAL=off`, the path of a job across
//! hosts. From 127.0.0.2, outside the job, the test opens connections to
//! every TCP port the child listens on: the rxm `conn_id` stream, the tcp
//! ack stream, 4 KiB of random bytes, and a silent one. Then every rank
//! must live, know nobody failed, agree with the others, and have
//! completed heartbeats since. The child also reports that every socket at
//! its listening ports carries the filter (the listener and the sockets
//! accepted from it). With `FFD_SOURCE_FILTER=off` the same connection
//! completes: the attack path is real.
//!
//! A child that cannot start its ranks fails the test; nothing is
//! skipped.

mod group;
mod hostile;
mod prereq;

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use ffd::config::{Config, CoreChoice, LocalMode, SourceFilterMode};
use ffd::fabric::{connect_within, filters_at_port};
use ffd::runtime::Detector;
use group::start_group;
use hostile::{ACK_STREAM, CONN_ID_STREAM, STRANGER, noise, ranks_work, unhex};

const CHILD_ENV: &str = "FFD_STRANGERS_RANKS";
const FILTER_ENV: &str = "FFD_STRANGERS_FILTER";
const TAG: &str = "FFD-STRANGERS";
const RANKS: usize = 3;
const CHILD_LIFETIME: Duration = Duration::from_secs(60);
/// For the child to start its ranks and for one agreement.
const STEP_WITHIN: Duration = Duration::from_secs(20);
/// A dropped SYN is sent again after 1 s and 3 s: a handshake not done
/// within this was dropped more than twice.
const DROPPED_WITHIN: Duration = Duration::from_millis(2500);
/// For an admitted handshake on loopback.
const HANDSHAKE_WITHIN: Duration = Duration::from_secs(10);

/// The TCP ports this process listens on.
fn listening_ports() -> Vec<u16> {
    hostile::listening_ports("self")
}

/// The ranks: three detectors of one job in this process on `lo`, every
/// rank on the fabric ring. The filter is as [`FILTER_ENV`] says.
#[test]
#[ignore = "the ranks of the strangers test; it runs them in a child process"]
fn rank_role() {
    assert!(
        std::env::var_os(CHILD_ENV).is_some(),
        "rank_role is run by the strangers test, with {CHILD_ENV} set"
    );
    let filter = match std::env::var(FILTER_ENV).as_deref() {
        Ok("off") => SourceFilterMode::Off,
        _ => SourceFilterMode::On,
    };
    let config = Config::builder()
        .domain("lo")
        // Generous: the attack takes half a minute, on a machine that may
        // be loaded by others; a false report fails the test.
        .period(Duration::from_millis(20))
        .timeout(Duration::from_millis(1000))
        .startup_grace(Duration::from_millis(1000))
        .core(CoreChoice::None)
        .local(LocalMode::Off)
        .source_filter(filter)
        .build()
        .expect("valid config");
    let detectors: Vec<Detector> = start_group(RANKS as u32, &config);
    // `FFD_LOCAL=off` keeps the fabric between one host's ranks.
    for d in &detectors {
        assert_eq!(d.fabric().0, "tcp;ofi_rxm", "rank {}", d.rank());
    }
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
    let ports: Vec<String> = listening_ports().iter().map(u16::to_string).collect();
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{TAG} ready {}", ports.join(" "))
        .and_then(|()| out.flush())
        .is_err()
    {
        return;
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
            Err(_) => break,
        }
    }
    for d in detectors {
        d.shutdown();
    }
}

/// Whether every rank still runs and works (`hostile::ranks_work`), and
/// every socket at a listening port
/// carries a filter.
fn check(detectors: &[Detector], beats_before: &[u64]) -> Result<String, String> {
    let ports = listening_ports();
    let mut sockets = 0;
    for &port in &ports {
        for (listening, len) in filters_at_port(port) {
            if len == 0 {
                return Err(format!(
                    "a socket at port {port} (listening: {listening}) has no filter"
                ));
            }
            sockets += 1;
        }
    }
    let work = ranks_work(detectors, beats_before, STEP_WITHIN)?;
    Ok(format!(
        "{work}; {sockets} sockets at listening ports {ports:?} filtered"
    ))
}

/// Kills and reaps the child on every path.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The child's ranks, its stdin and the lines it says.
struct Ranks {
    guard: ChildGuard,
    stdin: ChildStdin,
    said: mpsc::Receiver<Option<String>>,
    ports: Vec<u16>,
}

fn start_ranks(filter: &str) -> Ranks {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--ignored",
            "--exact",
            "rank_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .env(FILTER_ENV, filter)
        .env("IPATH_NO_BACKTRACE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the ranks");
    let stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let guard = ChildGuard(child);
    let (tx, said) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(at) = line.find(TAG) {
                if tx
                    .send(Some(line[at + TAG.len()..].trim().to_owned()))
                    .is_err()
                {
                    return;
                }
            }
        }
        let _ = tx.send(None);
    });
    let ready = said
        .recv_timeout(STEP_WITHIN)
        .expect("the ranks start within the bound")
        .expect("the ranks started (their stdout closed first)");
    let words: Vec<&str> = ready.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"ready"), "ready line: {ready}");
    let ports: Vec<u16> = words[1..]
        .iter()
        .map(|p| p.parse().expect("port"))
        .collect();
    assert!(!ports.is_empty(), "the ranks listen on no TCP port");
    Ranks {
        guard,
        stdin,
        said,
        ports,
    }
}

#[test]
fn a_stranger_outside_the_job_never_reaches_a_ranks_fabric_port() {
    let mut ranks = start_ranks("on");
    let streams = [
        ("conn_id", unhex(CONN_ID_STREAM)),
        ("ack", unhex(ACK_STREAM)),
        ("noise", noise()),
        ("silent", Vec::new()),
    ];
    // Every connection at once, each on a thread of its own: the
    // handshakes that never complete wait out their bound together.
    let started = Instant::now();
    let attempts: Vec<_> = ranks
        .ports
        .iter()
        .flat_map(|&port| streams.iter().map(move |s| (port, s.clone())))
        .map(|(port, (name, bytes))| {
            thread::spawn(move || {
                let to = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
                match connect_within(STRANGER, to, DROPPED_WITHIN) {
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                        Ok(format!("{name} to {port}: no handshake"))
                    }
                    Err(e) => Err(format!(
                        "{name} to port {port} from {STRANGER}: {e} (not a dropped SYN)"
                    )),
                    Ok(mut conn) => {
                        let _ = conn.write_all(&bytes);
                        Err(format!(
                            "{name}: a connection from {STRANGER} to port {port} completed"
                        ))
                    }
                }
            })
        })
        .collect();
    let log: Vec<String> = attempts
        .into_iter()
        .map(|t| {
            t.join()
                .expect("no panic")
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect();
    writeln!(ranks.stdin, "check").expect("ask the ranks");
    ranks.stdin.flush().expect("ask the ranks");
    match ranks.said.recv_timeout(2 * STEP_WITHIN) {
        Ok(Some(l)) if l.starts_with("alive") => {
            eprintln!(
                "attacked for {:?}: {}; {l}",
                started.elapsed(),
                log.join("; ")
            );
        }
        Ok(Some(l)) => panic!("{}; then: {l}", log.join("; ")),
        Ok(None) => panic!(
            "the ranks ended ({:?}); {}",
            ranks.guard.0.wait(),
            log.join("; ")
        ),
        Err(_) => panic!("the ranks did not answer within {:?}", 2 * STEP_WITHIN),
    }
}

#[test]
fn without_the_filter_the_strangers_handshake_completes() {
    let ranks = start_ranks("off");
    let to = SocketAddr::from((Ipv4Addr::LOCALHOST, ranks.ports[0]));
    // The attack path is real: 127.0.0.2 reaches the port when nothing
    // filters it. Nothing is sent (libfabric 1.17 would crash on it).
    let conn = connect_within(STRANGER, to, HANDSHAKE_WITHIN);
    assert!(
        conn.is_ok(),
        "{STRANGER} reaches port {}: {conn:?}",
        ranks.ports[0]
    );
}

/// A one-host embedded job (four detectors of one job in this process,
/// `FFD_LOCAL=auto`: every rank on this host, each reading its mailbox)
/// opens no fabric endpoint (docs/design.md §5.4 "What the authentication stops"): this process owns
/// no listening TCP socket at all (none of libfabric's, no liveness port),
/// so nobody, of this user or another, root or not, reaches libfabric's
/// parser; and every rank works: a broadcast reaches all, an agreement
/// decides, nothing went over the fabric (no send, no heartbeat) and the
/// mailboxes carried it. The detectors name the node segment as their
/// transport.
#[test]
fn a_one_host_job_opens_no_endpoint_and_talks_through_its_segment() {
    ffd::node::exit_word_probe().expect("futex_waitv (Linux 5.16 or later) for the mailboxes");
    let config = Config::builder()
        .domain("lo")
        .period(Duration::from_millis(20))
        .timeout(Duration::from_millis(1000))
        .startup_grace(Duration::from_millis(1000))
        .core(CoreChoice::None)
        .local(LocalMode::Auto)
        .source_filter(SourceFilterMode::On)
        .build()
        .expect("valid config");
    let detectors: Vec<Detector> = start_group(4, &config);
    assert_eq!(
        listening_ports(),
        Vec::<u16>::new(),
        "a one-host job listens on a TCP port"
    );
    for d in &detectors {
        assert_eq!(
            d.fabric(),
            (
                ffd::runtime::NO_FABRIC_PROVIDER,
                ffd::runtime::NO_FABRIC_DOMAIN
            )
        );
        let stats = d.stats();
        assert_eq!(stats.provider, ffd::runtime::NO_FABRIC_PROVIDER);
    }
    detectors[1].broadcast(b"one host").expect("broadcast");
    for d in &detectors {
        let deadline = Instant::now() + STEP_WITHIN;
        let payload = loop {
            match d.try_next_event().map(|e| e.event) {
                Some(ffd::runtime::Event::Payload { bytes, .. }) => break bytes,
                Some(_) => {}
                None => {
                    assert!(Instant::now() < deadline, "rank {}: no payload", d.rank());
                    thread::sleep(Duration::from_millis(5));
                }
            }
        };
        assert_eq!(payload.as_slice(), b"one host");
        // The origin posted to the three others, who read it; the counters
        // are published every 50 ms.
        let carried = |m: &ffd::runtime::stats::MailboxCounters| {
            if d.rank() == 1 {
                m.sent >= 3
            } else {
                m.received >= 1
            }
        };
        let stats = loop {
            let stats = d.stats().runtime;
            if carried(&stats.mailbox) || Instant::now() > deadline {
                break stats;
            }
            thread::sleep(Duration::from_millis(10));
        };
        assert!(carried(&stats.mailbox), "rank {}: {stats:?}", d.rank());
        assert_eq!(stats.messages.sends_completed, 0, "rank {}", d.rank());
        assert_eq!(stats.heartbeats.posted, 0, "rank {}", d.rank());
        assert_eq!(stats.transport.errors, 0, "rank {}", d.rank());
    }
    knock_as_nobody_on_every_doorbell(&detectors);
    let work = ranks_work(&detectors, &[0; 4], STEP_WITHIN);
    // No heartbeat on one host: `ranks_work` says so last, after every
    // rank ran, knew nobody failed and decided the agreement.
    let work = work.expect_err("no heartbeat is written on one host");
    assert!(work.contains("no heartbeat completed"), "{work}");
    for d in detectors {
        d.shutdown();
    }
}

/// As root: another user (`nobody`) knocks on every doorbell of this
/// host (abstract Unix names anyone can list in `/proc/net/unix`); each
/// rank closes its doorbell at the knock, counts it, and its same-host
/// messages still arrive (a broadcast from rank 2 reaches every rank, its
/// writers now ringing the mail word). Not root: nothing to check here.
fn knock_as_nobody_on_every_doorbell(detectors: &[Detector]) {
    use std::os::unix::process::CommandExt;
    if !prereq::available("a stranger's knock on the doorbells", &[prereq::root()]) {
        return;
    }
    let script = "import socket\n\
        names = [l.split()[-1] for l in open('/proc/net/unix') if l.split()[-1].startswith('@ffd-door')]\n\
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
        for n in names: s.sendto(b'x', b'\\0' + n[1:].encode())\n\
        print(len(names))\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .uid(65534)
        .gid(65534)
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "the knocks as nobody: {out:?}");
    let knocked: usize = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    assert!(knocked >= detectors.len(), "doorbells found: {out:?}");
    detectors[2]
        .broadcast(b"after the knock")
        .expect("broadcast");
    for d in detectors {
        let deadline = Instant::now() + STEP_WITHIN;
        loop {
            match d.try_next_event().map(|e| e.event) {
                Some(ffd::runtime::Event::Payload { bytes, .. }) if bytes == b"after the knock" => {
                    break;
                }
                Some(_) => {}
                None => {
                    assert!(
                        Instant::now() < deadline,
                        "rank {}: no payload after the knock",
                        d.rank()
                    );
                    thread::sleep(Duration::from_millis(5));
                }
            }
        }
        let stats = loop {
            let stats = d.stats().runtime;
            if stats.mailbox.foreign_knocks >= 1 || Instant::now() > deadline {
                break stats;
            }
            thread::sleep(Duration::from_millis(10));
        };
        assert!(
            stats.mailbox.foreign_knocks >= 1,
            "rank {}: {stats:?}",
            d.rank()
        );
    }
}
