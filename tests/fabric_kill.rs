//! A peer process that owns a slot page is killed with SIGKILL while we
//! write to it every millisecond: within 1 s we must see either an error
//! completion or the bounded post helper's `Unreachable` verdict.
//!
//! The child is this test binary run again, filtered to the ignored
//! `child_role` test and told its provider by an environment variable. It
//! prints its fabric address and slot region on stdout, progresses its
//! completion queue, and says when our writes land. The child is always
//! killed and reaped (guard), and shm segments it leaves in /dev/shm are
//! removed by name.

mod prereq;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use ffd::fabric::*;

const CHILD_ENV: &str = "FFD_FABRIC_KILL_CHILD";
const TAG: &str = "FFD-CHILD";
/// How long the child lives at most, whatever happens to the parent.
const CHILD_LIFETIME: Duration = Duration::from_secs(60);
/// Verdict deadline after the kill.
const VERDICT_WITHIN: Duration = Duration::from_secs(1);
/// The bound given to the post helper: a run of refusals this long is a
/// verdict. Well inside VERDICT_WITHIN.
const REFUSAL_BOUND: Duration = Duration::from_millis(250);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex length: {s}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn open(
    provider: &str,
    domain: Option<&str>,
    cfg: &EndpointConfig,
) -> (Domain, AddressVector, Endpoint) {
    let info = Info::query(provider, domain).expect("provider");
    let domain = Domain::open_info(&info).expect("domain");
    let av = AddressVector::open(&domain, 4).expect("av");
    let ep = Endpoint::open(&domain, &av, cfg).expect("endpoint");
    (domain, av, ep)
}

/// The child: owns a slot page, progresses its queue, reports landings.
/// Ignored in normal runs; the kill tests run it in a child process.
#[test]
#[ignore = "child role of the kill tests; they run it in a child process"]
fn child_role() {
    let spec = std::env::var(CHILD_ENV).expect(
        "child_role is run by the kill tests, with FFD_FABRIC_KILL_CHILD=provider[/domain]",
    );
    let (provider, domain) = match spec.split_once('/') {
        Some((p, d)) => (p.to_owned(), Some(d.to_owned())),
        None => (spec.clone(), None),
    };
    let (_domain, _av, mut ep) = open(&provider, domain.as_deref(), &EndpointConfig::default());
    let slots = ep.register(SlotPage::new().unwrap()).expect("slot page");
    let stdin_closed = Arc::new(AtomicBool::new(false));
    {
        let closed = stdin_closed.clone();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            closed.store(true, Ordering::SeqCst);
        });
    }
    let mut out = std::io::stdout().lock();
    let hello = writeln!(
        out,
        "{TAG} hello {} {} {}",
        std::process::id(),
        hex(ep.name()),
        hex(&slots.remote().to_bytes())
    )
    .and_then(|()| out.flush());
    if hello.is_err() {
        return; // the parent is gone: nobody to serve
    }
    let start = Instant::now();
    let mut reported = false;
    while !stdin_closed.load(Ordering::SeqCst) && start.elapsed() < CHILD_LIFETIME {
        ep.wait(Duration::from_millis(5), &mut |_| {})
            .expect("progress");
        let v = slots.memory().read(0);
        if v != 0 && !reported {
            if writeln!(out, "{TAG} landed {v}")
                .and_then(|()| out.flush())
                .is_err()
            {
                return;
            }
            reported = true;
        }
    }
}

/// Kills and reaps the child on every path; removes its shm segments.
struct ChildGuard {
    child: Child,
    /// shm segments the child reported, removed after the kill.
    shm_names: Vec<String>,
}

impl ChildGuard {
    fn kill(&mut self) {
        // SIGKILL (std's kill on Unix); an already-dead child is fine.
        let _ = self.child.kill();
        let _ = self.child.wait();
        // shm names segments "<pid>:<n>:<m>": also catch any the child had
        // not reported yet.
        let prefix = format!("{}:", self.child.id());
        if let Ok(dir) = std::fs::read_dir("/dev/shm") {
            for entry in dir.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.starts_with(&prefix) && !self.shm_names.contains(&name) {
                    self.shm_names.push(name);
                }
            }
        }
        for name in &self.shm_names {
            let path = std::path::Path::new("/dev/shm").join(name);
            match std::fs::remove_file(&path) {
                Ok(()) => eprintln!("removed {}", path.display()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => eprintln!("could not remove {}: {e}", path.display()),
            }
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// shm names its segment after the endpoint: "fi_shm://<pid>:<n>:<m>" is
/// /dev/shm/<pid>:<n>:<m>.
fn shm_segment(name: &[u8]) -> Option<String> {
    let s = String::from_utf8_lossy(name);
    let s = s.trim_end_matches('\0');
    s.strip_prefix("fi_shm://")
        .filter(|n| !n.is_empty() && !n.contains('/'))
        .map(str::to_owned)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum WriteKind {
    /// fi_inject_write: no completion; errors show as refusals.
    Inject,
    /// fi_writemsg(FI_INJECT | FI_COMPLETION): completions, errors included.
    Tracked,
    /// Tracked, with FI_DELIVERY_COMPLETE.
    Delivered,
}

fn killed_peer_is_detected(provider: &str, domain: Option<&str>, how: WriteKind) {
    if !prereq::available(&prereq::this_test(), &[prereq::provider(provider, domain)]) {
        return;
    }
    let spec = match domain {
        Some(d) => format!("{provider}/{d}"),
        None => provider.to_owned(),
    };
    let child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--ignored",
            "--exact",
            "child_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &spec)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child");
    let mut guard = ChildGuard {
        child,
        shm_names: Vec::new(),
    };
    let _stdin: ChildStdin = guard.child.stdin.take().expect("child stdin");
    let stdout = guard.child.stdout.take().expect("child stdout");
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // libtest prints "test child_role ... " before the child's first line.
            if let Some(at) = line.find(TAG) {
                if tx.send(line[at + TAG.len()..].trim().to_owned()).is_err() {
                    break;
                }
            }
        }
    });

    let hello = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("child says hello within 20 s");
    let words: Vec<&str> = hello.split_whitespace().collect();
    assert_eq!(words.len(), 4, "hello line: {hello}");
    assert_eq!(words[0], "hello");
    let child_pid: u32 = words[1].parse().expect("pid");
    assert_eq!(child_pid, guard.child.id());
    let child_name = unhex(words[2]);
    let remote = RemoteRegion::from_bytes(&unhex(words[3])).expect("remote region");
    if let Some(seg) = shm_segment(&child_name) {
        assert!(seg.starts_with(&format!("{child_pid}:")), "{seg}");
        guard.shm_names.push(seg);
    }

    let cfg = EndpointConfig {
        delivery_complete: how == WriteKind::Delivered,
        ..EndpointConfig::default()
    };
    let (_domain, av, mut ep) = open(provider, domain, &cfg);
    let peer = av.insert(&child_name).expect("insert child address");
    let mut failures: Vec<CqError> = Vec::new();
    let mut beat = 0u64;

    // Phase 1: write every millisecond until the child reports a landing.
    let start = Instant::now();
    let mut landed = false;
    let (mut ok, mut refused) = (0u32, 0u32);
    while !landed {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no write landed within 10 s ({ok} accepted, {refused} refused)"
        );
        beat += 1;
        let r = match how {
            WriteKind::Inject => ep.try_inject_write(peer, &remote, 0, beat),
            _ => ep.try_write_u64(peer, &remote, 0, beat, beat),
        };
        match r {
            Ok(()) => ok += 1,
            Err(e) if e.is_would_block() => refused += 1,
            Err(e) => panic!("write before the kill: {e}"),
        }
        ep.poll(256, &mut |c| {
            if let Completion::Failed(e) = c {
                failures.push(e)
            }
        })
        .expect("poll");
        assert!(failures.is_empty(), "error before the kill: {failures:?}");
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(1)) {
            landed = line.starts_with("landed");
        }
    }

    // Phase 2: kill -9, keep writing every millisecond, wait for a verdict.
    let killed_at = Instant::now();
    guard.kill();
    let reaped = killed_at.elapsed();
    let mut verdict: Option<(Duration, String)> = None;
    let mut first_refusal: Option<Duration> = None;
    let mut first_error: Option<Duration> = None;
    let mut posts_after_kill = 0u32;
    while verdict.is_none() && killed_at.elapsed() < VERDICT_WITHIN {
        beat += 1;
        posts_after_kill += 1;
        let tick = Instant::now();
        let mut sink = |c: Completion<'_>| {
            if let Completion::Failed(e) = c {
                first_error.get_or_insert(killed_at.elapsed());
                failures.push(e)
            }
        };
        let left = VERDICT_WITHIN.saturating_sub(killed_at.elapsed());
        let r = ep.post_bounded(
            peer,
            RetryBound::new(u32::MAX, REFUSAL_BOUND.min(left)),
            &mut sink,
            |ep| {
                let r = match how {
                    WriteKind::Inject => ep.try_inject_write(peer, &remote, 0, beat),
                    _ => ep.try_write_u64(peer, &remote, 0, beat, beat),
                };
                if r.is_err() {
                    first_refusal.get_or_insert(killed_at.elapsed());
                }
                r
            },
        );
        ep.poll(256, &mut sink).expect("poll");
        if let Some(e) = failures.first() {
            verdict = Some((
                first_error.expect("set with the failure"),
                format!("error completion: {e} [op {:?}]", e.op),
            ));
        } else {
            match r {
                Ok(_) => {}
                Err(e @ FabricError::Unreachable { .. }) => {
                    verdict = Some((killed_at.elapsed(), e.to_string()))
                }
                Err(e) => verdict = Some((killed_at.elapsed(), format!("post error: {e}"))),
            }
        }
        if let Some(rest) = Duration::from_millis(1).checked_sub(tick.elapsed()) {
            std::thread::sleep(rest);
        }
    }
    let Some((after, verdict)) = verdict.filter(|(t, _)| *t <= VERDICT_WITHIN) else {
        panic!(
            "{provider} ({how:?}): no error completion and no Unreachable within \
             {VERDICT_WITHIN:?} of kill -9 ({posts_after_kill} posts)"
        )
    };
    eprintln!(
        "MEASURE provider={} write={how:?} verdict_after={after:?} first_refusal={first_refusal:?} \
         first_error={first_error:?} reaped_in={reaped:?} posts={posts_after_kill}: {verdict}",
        ep.info().provider(),
    );
}

#[test]
fn tcp_rxm_killed_peer_tracked_writes() {
    killed_peer_is_detected("tcp", Some("lo"), WriteKind::Tracked);
}

// No case for plain `fi_inject_write` on tcp;ofi_rxm: after the peer is
// killed, libfabric 1.17 sometimes crashes inside fi_cq_readfrom (rxm's
// error handling; 1 run in 20 under load here; compare ofiwg/libfabric
// issue 7396). The runtime never uses it: its heartbeats are tracked
// writes, with delivery-complete on tcp (0 crashes in 40 runs).

#[test]
fn tcp_rxm_killed_peer_delivery_complete_writes() {
    killed_peer_is_detected("tcp", Some("lo"), WriteKind::Delivered);
}

#[test]
fn sockets_killed_peer_tracked_writes() {
    killed_peer_is_detected("sockets", Some("lo"), WriteKind::Tracked);
}

#[test]
fn sockets_killed_peer_inject_writes() {
    killed_peer_is_detected("sockets", Some("lo"), WriteKind::Inject);
}

#[test]
fn shm_killed_peer_tracked_writes() {
    killed_peer_is_detected("shm", None, WriteKind::Tracked);
}

#[test]
fn shm_killed_peer_inject_writes() {
    killed_peer_is_detected("shm", None, WriteKind::Inject);
}

#[test]
fn shm_segment_names_follow_the_endpoint_name() {
    assert_eq!(
        shm_segment(b"fi_shm://6457:0:0\0").as_deref(),
        Some("6457:0:0")
    );
    assert_eq!(shm_segment(b"fi_shm://../etc\0"), None);
    assert_eq!(shm_segment(&[2, 0, 140, 133, 127, 0, 0, 1]), None);
}
