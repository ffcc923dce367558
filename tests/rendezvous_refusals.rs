//! The TCP rendezvous refuses what it must without aborting the job: another
//! size, a rank held or out of range, another version, a proof that fails
//! (replayed or altered), a silent connection, too many at once; and a
//! client trusts no server that cannot prove the secret. Each side's text
//! is checked. Ordering is enforced with the server's events, never with
//! sleeps. (A real job among all of these at once is `rendezvous_strays.rs`.)

mod rendezvous_raw;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use ffd::bootstrap::secret::JobSecret;
use ffd::bootstrap::tcp::auth::Side;
use ffd::bootstrap::tcp::wire::{self, Frame, HELLO_FIELDS};
use ffd::bootstrap::tcp::{
    AbortCode, AbortReason, DropReason, Rendezvous, ServeEvent, TcpBootstrap,
};
use ffd::bootstrap::{Bootstrap, BootstrapError};
use rendezvous_raw::{LONG, connect, key, refused, secret, serve, server_abort, wait_event};

#[test]
fn a_size_disagreement_is_refused_and_the_job_goes_on() {
    let h = serve(2, LONG);
    let first = thread::spawn({
        let addr = h.addr().to_string();
        move || {
            TcpBootstrap::connect(&addr, 0, 2, &secret(), LONG).and_then(|mut b| b.allgather(b"a"))
        }
    });
    wait_event(&h, |e| matches!(e, ServeEvent::Connected { rank: 0, .. }));
    let err = connect(&h, 1, 3, LONG).err().unwrap();
    let want = "rank 1 was started for a job of 3 ranks, the rendezvous serves 2";
    assert_eq!(refused(&err), (Some(DropReason::WrongSize), want, true));
    assert_eq!(
        err.to_string(),
        format!("the rendezvous at {} refused this rank: {want}", h.addr())
    );
    // The job goes on: the right rank 1 completes it.
    let mut second = connect(&h, 1, 2, LONG).unwrap();
    assert_eq!(
        second.allgather(b"b").unwrap(),
        [b"a".to_vec(), b"b".to_vec()]
    );
    assert_eq!(
        first.join().unwrap().unwrap(),
        [b"a".to_vec(), b"b".to_vec()]
    );
    drop(second);
    let report = h.join().unwrap();
    assert_eq!(report.dropped.get(DropReason::WrongSize), 1);
    assert_eq!(report.dropped.total(), 1);
}

#[test]
fn a_job_whose_ranks_all_have_another_size_ends_at_its_timeout_naming_them() {
    // Every rank was started for 3, the rendezvous for 2: no single HELLO
    // tells a misconfiguration from a stray, so each is refused (and fails
    // at once with the reason); the job ends at its timeout, saying why.
    let h = serve(2, Duration::from_millis(300));
    let start = Instant::now();
    for rank in 0..2 {
        let err = connect(&h, rank, 3, LONG).err().unwrap();
        assert_eq!(refused(&err).0, Some(DropReason::WrongSize));
    }
    assert!(start.elapsed() < Duration::from_secs(5), "refused at once");
    let reason = server_abort(h).to_string();
    assert!(
        reason.starts_with(
            "ranks 0, 1 did not connect within 300ms (0 of 2 connected); \
             meanwhile it dropped 2 connections (2 wrong size), last refused: \
             rank 1 was started for a job of 3 ranks, the rendezvous serves 2 (from 127.0.0.1:"
        ),
        "{reason}"
    );
}

#[test]
fn a_second_claim_of_a_rank_is_refused_and_the_first_keeps_it() {
    let h = serve(2, LONG);
    let first = thread::spawn({
        let addr = h.addr().to_string();
        move || {
            TcpBootstrap::connect(&addr, 0, 2, &secret(), LONG).and_then(|mut b| b.allgather(b"a"))
        }
    });
    let holder = match wait_event(&h, |e| matches!(e, ServeEvent::Connected { rank: 0, .. })) {
        ServeEvent::Connected { peer, .. } => peer,
        _ => unreachable!(),
    };
    // With the secret: refused, told who holds it.
    let err = connect(&h, 0, 2, LONG).err().unwrap();
    let want = format!("rank 0 is already held by {holder}");
    assert_eq!(
        refused(&err),
        (Some(DropReason::RankTaken), want.as_str(), true)
    );
    // Without it: a bad proof, told nothing about the job.
    let other = TcpBootstrap::connect(
        &h.addr().to_string(),
        0,
        2,
        &JobSecret::from_bytes([8; 32]),
        LONG,
    )
    .err()
    .unwrap();
    let (reason, message, authenticated) = refused(&other);
    assert_eq!((reason, authenticated), (Some(DropReason::BadProof), false));
    assert_eq!(
        message,
        "this client did not prove it holds the job secret \
         (is FFD_SECRET_FILE the file the rendezvous was given?)"
    );
    let mut second = connect(&h, 1, 2, LONG).unwrap();
    assert_eq!(
        second.allgather(b"b").unwrap(),
        [b"a".to_vec(), b"b".to_vec()]
    );
    assert_eq!(
        first.join().unwrap().unwrap(),
        [b"a".to_vec(), b"b".to_vec()]
    );
    drop(second);
    let dropped = h.join().unwrap().dropped;
    assert_eq!(dropped.get(DropReason::RankTaken), 1);
    assert_eq!(dropped.get(DropReason::BadProof), 1);
}

#[test]
fn a_version_mismatch_is_named_to_both_sides() {
    // A client of another version is denied, naming the server's.
    let h = serve(1, LONG);
    let mut future = rendezvous_raw::open(h.addr());
    future.hello_version(Some(&key(&secret())), wire::VERSION + 1, 0, 1);
    assert_eq!(
        future.read_plain(),
        Some(Frame::Denied {
            code: DropReason::Version as u16,
            message: "the rendezvous speaks rendezvous protocol version 2".into()
        })
    );
    let mut b = connect(&h, 0, 1, LONG).unwrap();
    assert_eq!(b.allgather(b"ok").unwrap(), [b"ok".to_vec()]);
    drop(b);
    assert_eq!(h.join().unwrap().dropped.get(DropReason::Version), 1);

    // A server of another version is named by the client.
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = other.local_addr().unwrap().to_string();
    let server = thread::spawn(move || {
        let (mut s, _) = other.accept().unwrap();
        let challenge = Frame::Challenge {
            version: 3,
            nonce: [0; 32],
        };
        s.write_all(&challenge.encode().unwrap()).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        rest
    });
    let err = TcpBootstrap::connect(&addr, 0, 1, &secret(), LONG)
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        format!(
            "the rendezvous at {addr} speaks rendezvous protocol version 3, this rank speaks 2"
        )
    );
    assert!(server.join().unwrap().is_empty(), "it sent no HELLO");
}

#[test]
fn a_rank_out_of_range_is_refused_by_client_and_server() {
    let h = serve(2, LONG);
    assert_eq!(
        connect(&h, 5, 2, LONG).err().unwrap().to_string(),
        "invalid bootstrap parameters: rank 5 is not below the job size 2"
    );
    let mut rogue = rendezvous_raw::open(h.addr());
    rogue.hello(Some(&key(&secret())), 5, 2);
    assert_eq!(
        rogue.read_sealed(),
        Some(Frame::Refused {
            code: DropReason::RankOutOfRange as u16,
            message: "rank 5 is not a rank of this job (0 to 1)".into()
        })
    );
    assert!(rogue.read_to_end().is_empty(), "then closed");
    let a = connect(&h, 0, 2, LONG).unwrap();
    let b = connect(&h, 1, 2, LONG).unwrap();
    drop((a, b));
    assert_eq!(h.join().unwrap().dropped.get(DropReason::RankOutOfRange), 1);
}

#[test]
fn a_client_trusts_no_server_without_the_secret() {
    // A server that holds another secret (or none) answers a HELLO with a
    // WELCOME it cannot seal right: the client refuses it.
    for server_secret in [Some(JobSecret::from_bytes([9; 32])), None] {
        let impostor = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = impostor.local_addr().unwrap().to_string();
        let server = thread::spawn(move || {
            let (mut s, _) = impostor.accept().unwrap();
            let challenge = Frame::Challenge {
                version: wire::VERSION,
                nonce: [1; 32],
            };
            s.write_all(&challenge.encode().unwrap()).unwrap();
            let challenge = challenge.payload().unwrap();
            let hello = wire::read_frame(&mut s, Some(Instant::now() + LONG), 256).unwrap();
            let welcome = Frame::Welcome { size: 1 };
            let bytes = match &server_secret {
                Some(other) => {
                    let (mut sealer, _) =
                        key(other).session(Side::Server, &challenge, &hello[..HELLO_FIELDS]);
                    sealer.seal(&welcome).unwrap()
                }
                None => welcome.encode().unwrap(),
            };
            s.write_all(&bytes).unwrap();
        });
        let err = TcpBootstrap::connect(&addr, 0, 1, &secret(), LONG)
            .err()
            .unwrap();
        assert!(matches!(err, BootstrapError::Unauthentic { .. }), "{err}");
        assert!(
            err.to_string().starts_with(&format!(
                "the rendezvous at {addr} did not prove it holds the job secret"
            )),
            "{err}"
        );
        server.join().unwrap();
    }
}

#[test]
fn a_replayed_or_altered_hello_proves_nothing() {
    let h = serve(2, LONG);
    let k = key(&secret());
    // A genuine HELLO for one connection's challenge...
    let mut first = rendezvous_raw::open(h.addr());
    first.hello(Some(&k), 0, 3); // wrong size: refused, not admitted
    assert!(matches!(first.read_sealed(), Some(Frame::Refused { .. })));
    // ...replayed on another connection, whose challenge differs.
    let mut replay = rendezvous_raw::open(h.addr());
    replay.send_payload(&first.hello.clone());
    assert!(matches!(
        replay.read_plain(),
        Some(Frame::Denied { code, .. }) if code == DropReason::BadProof as u16
    ));
    // A proof for rank 0 with the rank changed to 1.
    let mut altered = rendezvous_raw::open(h.addr());
    let mut hello = rendezvous_raw::hello_for(&altered.challenge, Some(&k), wire::VERSION, 0, 2);
    hello[7] = 1;
    altered.send_payload(&hello);
    assert!(matches!(
        altered.read_plain(),
        Some(Frame::Denied { code, .. }) if code == DropReason::BadProof as u16
    ));
    let (a, b) = (
        connect(&h, 0, 2, LONG).unwrap(),
        connect(&h, 1, 2, LONG).unwrap(),
    );
    drop((a, b));
    let dropped = h.join().unwrap().dropped;
    assert_eq!(dropped.get(DropReason::BadProof), 2);
    assert_eq!(dropped.get(DropReason::WrongSize), 1);
}

#[test]
fn an_altered_frame_from_an_admitted_rank_is_not_taken() {
    let h = serve(1, LONG);
    let mut rank = rendezvous_raw::open(h.addr());
    rank.hello(Some(&key(&secret())), 0, 1);
    assert_eq!(rank.read_sealed(), Some(Frame::Welcome { size: 1 }));
    let mut bytes = rank
        .session
        .as_mut()
        .unwrap()
        .0
        .seal(&Frame::Contribute {
            round: 1,
            data: b"mine".to_vec(),
        })
        .unwrap();
    bytes[9] ^= 1; // a byte of the contribution
    rank.send_bytes(&bytes);
    assert_eq!(
        rank.read_sealed(),
        Some(Frame::Abort {
            code: AbortCode::Protocol as u16,
            message: "rank 0 broke the rendezvous protocol: a message's tag does not verify \
                      (altered, replayed, or not from the peer)"
                .into()
        })
    );
    assert!(matches!(
        server_abort(h),
        AbortReason::Protocol { rank: 0, .. }
    ));
}

#[test]
fn a_silent_connection_is_dropped_after_the_handshake_bound() {
    let h = Rendezvous::bind("127.0.0.1:0", 1, &secret())
        .unwrap()
        .timeout(LONG)
        .handshake_timeout(Duration::from_millis(200))
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut silent = rendezvous_raw::open(h.addr());
    let event = wait_event(&h, |e| matches!(e, ServeEvent::Dropped { .. }));
    assert!(
        matches!(&event, ServeEvent::Dropped { reason: DropReason::Silent, detail, .. }
            if detail == "sent no whole HELLO within 200ms"),
        "{event:?}"
    );
    assert!(silent.read_to_end().is_empty(), "it got nothing more");
    assert!(start.elapsed() < Duration::from_secs(5));
    // Too little is as silent as nothing: half a HELLO.
    let mut half = rendezvous_raw::open(h.addr());
    half.send_bytes(&[79, 0, 0, 0, 1, b'F']);
    let event = wait_event(&h, |e| matches!(e, ServeEvent::Dropped { .. }));
    assert!(matches!(
        event,
        ServeEvent::Dropped {
            reason: DropReason::Silent,
            ..
        }
    ));
    let mut b = connect(&h, 0, 1, LONG).unwrap();
    assert_eq!(b.allgather(b"ok").unwrap(), [b"ok".to_vec()]);
    drop(b);
    assert_eq!(h.join().unwrap().dropped.get(DropReason::Silent), 2);
}

#[test]
fn unauthenticated_connections_are_capped_dropping_the_oldest() {
    let h = Rendezvous::bind("127.0.0.1:0", 1, &secret())
        .unwrap()
        .timeout(LONG)
        .max_unauthenticated(2)
        .spawn()
        .unwrap();
    let held: Vec<_> = (0..3).map(|_| rendezvous_raw::open(h.addr())).collect();
    let event = wait_event(&h, |e| matches!(e, ServeEvent::Dropped { .. }));
    let oldest = held[0].stream.local_addr().unwrap();
    assert_eq!(
        event,
        ServeEvent::Dropped {
            peer: oldest,
            reason: DropReason::Crowded,
            detail: "the oldest of 2 connections not yet authenticated".into()
        }
    );
    // A rank still gets in (dropping another stray to make room).
    let mut b = connect(&h, 0, 1, LONG).unwrap();
    assert_eq!(b.allgather(b"ok").unwrap(), [b"ok".to_vec()]);
    drop(b);
    assert_eq!(h.join().unwrap().dropped.get(DropReason::Crowded), 2);
    drop(held);
}
