//! Adversarial: a stray rendezvous client. While a real job of N ranks
//! bootstraps through the server, strays connect: a forged HELLO with no
//! secret, a client with another secret, one that connects and says
//! nothing, one of another job size (holding the secret: a leftover of a
//! job that shared the secret file), a second claim of a held rank (with
//! and without the secret), a replayed HELLO, garbage, another version,
//! and a flood of connections. The job must complete with every rank
//! getting every record; the strays must get nothing (no record, no job
//! key); the counters must show each reason. Ordering is enforced with the
//! server's events and its counters, never with sleeps.

mod rendezvous_raw;

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use ffd::bootstrap::secret::JobSecret;
use ffd::bootstrap::tcp::wire::{Frame, VERSION};
use ffd::bootstrap::tcp::{
    DropCounts, DropReason, Rendezvous, RendezvousHandle, ServeEvent, TcpBootstrap,
};
use ffd::bootstrap::{Bootstrap, BootstrapError};
use rendezvous_raw::{LONG, key};

const N: u32 = 4;

/// What rank `rank` contributes in `round`: its "record", with the job key
/// in rank 0's, as the start-up exchange carries it.
fn record(rank: u32, round: u32) -> Vec<u8> {
    let mut r = format!("record of rank {rank}, round {round}").into_bytes();
    if rank == 0 {
        r.extend_from_slice(b"; job key 0x5eC12E7");
    }
    r
}

/// Bytes no stray may ever see.
const MARKERS: [&[u8]; 2] = [b"record of rank", b"job key"];

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Runs a genuine rank through three rounds; its results.
fn genuine(
    addr: SocketAddr,
    rank: u32,
    secret: JobSecret,
) -> thread::JoinHandle<Result<Vec<Vec<Vec<u8>>>, BootstrapError>> {
    thread::spawn(move || {
        let mut b = TcpBootstrap::connect(&addr.to_string(), rank, N, &secret, LONG)?;
        (1..=3)
            .map(|round| b.allgather(&record(rank, round)))
            .collect()
    })
}

/// The server's events as they come, kept.
struct Seen<'h> {
    h: &'h RendezvousHandle,
    all: Vec<ServeEvent>,
}

impl Seen<'_> {
    /// Waits (bounded) until `want` holds for one event, seen before or now.
    fn until(&mut self, what: &str, want: impl Fn(&ServeEvent) -> bool) {
        let deadline = Instant::now() + LONG;
        while !self.all.iter().any(&want) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.h.events().recv_timeout(left) {
                Ok(e) => self.all.push(e),
                Err(_) => panic!("never saw {what}; saw {:?}", self.all),
            }
        }
    }

    /// Waits (bounded) until the server counted a drop for `reason`. A
    /// connection crowded out before the coordinator took it up is dropped
    /// by the accepting thread, which counts it but raises no event (under
    /// load the acceptor outruns the coordinator): so the counters are
    /// read, between the events that arrive meanwhile.
    fn until_counted(&mut self, reason: DropReason) {
        let deadline = Instant::now() + LONG;
        while self.h.dropped().get(reason) == 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!(
                    "never counted a drop for {reason:?}: {}; saw {:?}",
                    self.h.dropped(),
                    self.all
                );
            }
            if let Ok(e) = self
                .h
                .events()
                .recv_timeout(left.min(Duration::from_millis(20)))
            {
                self.all.push(e);
            }
        }
    }
}

/// `counts` as (reason, count) pairs, for readable assertions.
fn by_reason(counts: DropCounts) -> Vec<(DropReason, u64)> {
    counts.iter().collect()
}

/// One more drop of `reason` in `counts`, kept in code order.
fn expect(reason: DropReason, counts: &mut Vec<(DropReason, u64)>) {
    match counts.iter_mut().find(|(r, _)| *r == reason) {
        Some((_, n)) => *n += 1,
        None => {
            counts.push((reason, 1));
            counts.sort();
        }
    }
}

/// A stray's whole view of the connection after its CHALLENGE: no frame
/// that carries a record, and none of the records' bytes.
fn assert_got_nothing(who: &str, rest: &[u8]) {
    for marker in MARKERS {
        assert!(!contains(rest, marker), "{who} saw a record: {rest:?}");
    }
}

#[test]
fn a_stray_rendezvous_client_gets_nothing_and_the_job_completes() {
    let secret = JobSecret::random().unwrap();
    let h = Rendezvous::bind("127.0.0.1:0", N, &secret)
        .unwrap()
        .timeout(LONG)
        // Long enough that, on a loaded machine, the server accepts more
        // than the cap of silent connections of a flood before the first
        // of them times out (step 8 needs the cap, not the timeout, to
        // drop them).
        .handshake_timeout(Duration::from_millis(1500))
        .max_unauthenticated(8)
        .spawn()
        .unwrap();
    let addr = h.addr();
    let k = key(&secret);
    let mut seen = Seen { h: &h, all: vec![] };

    // Ranks 0 and 1 are in, waiting in round 1 while the strays come.
    let early: Vec<_> = (0..2).map(|r| genuine(addr, r, secret.clone())).collect();
    seen.until("ranks 0 and 1", |e| {
        matches!(e, ServeEvent::Connected { rank: 1, .. })
    });
    seen.until("rank 0", |e| {
        matches!(e, ServeEvent::Connected { rank: 0, .. })
    });
    // What the counters must say after each stray.
    let mut counts: Vec<(DropReason, u64)> = Vec::new();

    // 1. No secret: a forged HELLO claiming rank 2, proof all zeros.
    let mut forged = rendezvous_raw::open(addr);
    forged.hello(None, 2, N);
    assert!(matches!(
        forged.read_plain(),
        Some(Frame::Denied { code, .. }) if code == DropReason::BadProof as u16
    ));
    assert_got_nothing("the forger", &forged.read_to_end());
    expect(DropReason::BadProof, &mut counts);
    assert_eq!(by_reason(h.dropped()), counts);

    // 2. Another secret, through the real client: told its proof failed.
    let other = JobSecret::random().unwrap();
    let err = TcpBootstrap::connect(&addr.to_string(), 3, N, &other, LONG)
        .err()
        .unwrap();
    assert!(
        matches!(
            err,
            BootstrapError::Refused {
                reason: Some(DropReason::BadProof),
                authenticated: false,
                ..
            }
        ),
        "{err}"
    );
    expect(DropReason::BadProof, &mut counts);
    assert_eq!(by_reason(h.dropped()), counts);

    // 3. Connects and sends nothing: dropped at the handshake bound.
    let mut silent = rendezvous_raw::open(addr);
    seen.until("the silent stray dropped", |e| {
        matches!(
            e,
            ServeEvent::Dropped {
                reason: DropReason::Silent,
                ..
            }
        )
    });
    assert_got_nothing("the silent stray", &silent.read_to_end());
    expect(DropReason::Silent, &mut counts);
    assert_eq!(by_reason(h.dropped()), counts);

    // 4. Another job size, holding the secret (a leftover of an earlier job
    // that shared the secret file): refused, sealed, and nothing else.
    let mut leftover = rendezvous_raw::open(addr);
    leftover.hello(Some(&k), 2, N + 1);
    assert_eq!(
        leftover.read_sealed(),
        Some(Frame::Refused {
            code: DropReason::WrongSize as u16,
            message: format!(
                "rank 2 was started for a job of {} ranks, the rendezvous serves {N}",
                N + 1
            )
        })
    );
    assert_got_nothing("the leftover", &leftover.read_to_end());
    expect(DropReason::WrongSize, &mut counts);
    assert_eq!(by_reason(h.dropped()), counts);

    // 5. A rank already held, claimed with the secret: the first holder
    // keeps it; the second is told so, and gets no record.
    let err = TcpBootstrap::connect(&addr.to_string(), 0, N, &secret, LONG)
        .err()
        .unwrap();
    assert!(
        matches!(&err, BootstrapError::Refused { reason: Some(DropReason::RankTaken), authenticated: true, message, .. }
            if message.starts_with("rank 0 is already held by 127.0.0.1:")),
        "{err}"
    );
    expect(DropReason::RankTaken, &mut counts);
    // ...and claimed without it: a bad proof, whatever rank it names.
    let mut usurper = rendezvous_raw::open(addr);
    usurper.hello(Some(&key(&other)), 0, N);
    assert!(matches!(usurper.read_plain(), Some(Frame::Denied { .. })));
    assert_got_nothing("the usurper", &usurper.read_to_end());
    expect(DropReason::BadProof, &mut counts);
    assert_eq!(by_reason(h.dropped()), counts);

    // 6. A genuine HELLO (the leftover's) replayed on a new connection.
    let mut replay = rendezvous_raw::open(addr);
    replay.send_payload(&leftover.hello.clone());
    assert!(matches!(replay.read_plain(), Some(Frame::Denied { .. })));
    expect(DropReason::BadProof, &mut counts);
    // 7. Garbage, and a HELLO of another version.
    let mut garbage = rendezvous_raw::open(addr);
    garbage.send_bytes(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_got_nothing("the garbage stray", &garbage.read_to_end());
    expect(DropReason::Garbage, &mut counts);
    let mut old = rendezvous_raw::open(addr);
    old.hello_version(Some(&k), VERSION - 1, 2, N);
    assert!(matches!(old.read_plain(), Some(Frame::Denied { .. })));
    expect(DropReason::Version, &mut counts);
    assert_eq!(by_reason(h.dropped()), counts);

    // 8. A flood of silent connections: the cap drops the oldest. Then the
    // last ranks arrive in the middle of a second flood; one crowded out
    // connects again.
    let flood: Vec<TcpStream> = (0..40).map(|_| flood_one(addr).unwrap()).collect();
    seen.until_counted(DropReason::Crowded);
    let flooder = thread::spawn(move || {
        // Connections after the job has ended are refused: that is fine.
        (0..40)
            .filter_map(|_| flood_one(addr).ok())
            .collect::<Vec<_>>()
    });
    let late: Vec<_> = (2..N).map(|r| genuine(addr, r, secret.clone())).collect();

    // Every rank gets every record of every round.
    for (rank, t) in (0..N).zip(early.into_iter().chain(late)) {
        let rounds = t
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        for (i, all) in rounds.iter().enumerate() {
            let round = i as u32 + 1;
            let want: Vec<Vec<u8>> = (0..N).map(|r| record(r, round)).collect();
            assert_eq!(all, &want, "rank {rank}, round {round}");
        }
    }
    let report = h.join().unwrap();
    assert_eq!(report.rounds, 3);

    // The flood got nothing but its CHALLENGEs.
    let more = flooder.join().unwrap();
    for (i, mut f) in flood.into_iter().chain(more).enumerate() {
        let _ = f.set_read_timeout(Some(LONG));
        let mut all = Vec::new();
        let _ = f.read_to_end(&mut all);
        assert_got_nothing(&format!("flood connection {i}"), &all);
    }

    // Each reason shows. Of the first flood's 40 connections, all but the
    // 8 held at its end were crowded out, or (on a slow machine) went
    // silent first.
    let dropped = report.dropped;
    let flood_dropped = dropped.get(DropReason::Crowded) + dropped.get(DropReason::Silent) - 1;
    assert!(flood_dropped >= 40 - 8, "{dropped}");
    for (reason, n) in counts {
        match reason {
            DropReason::Silent => assert!(dropped.get(reason) >= n, "{dropped}"),
            _ => assert_eq!(dropped.get(reason), n, "{reason:?}: {dropped}"),
        }
    }
}

/// One flooding connection: connects and says nothing.
fn flood_one(addr: SocketAddr) -> std::io::Result<TcpStream> {
    TcpStream::connect_timeout(&addr, LONG)
}
