//! The TCP rendezvous over loopback: several rounds among threads standing in
//! for ranks, and every error path with the text each side reports. Every
//! wait is bounded by small timeouts; ordering between clients is enforced
//! with the server's events, never with sleeps. (What the server refuses is
//! in `rendezvous_refusals.rs`, the strays of a real job in
//! `rendezvous_strays.rs`.)

mod rendezvous_raw;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use ffd::bootstrap::secret::JobSecret;
use ffd::bootstrap::tcp::wire::Frame;
use ffd::bootstrap::tcp::{
    AbortCode, AbortReason, DropReason, Rendezvous, ServeEvent, TcpBootstrap, TcpEnv,
};
use ffd::bootstrap::{Bootstrap, BootstrapError, MAX_CONTRIBUTION};
use ffd::config::Env;
use ffd::protocol::Rank;
use rendezvous_raw::{LONG, aborted, connect, key, secret, serve, server_abort, wait_event};

fn contribution(rank: Rank, round: u32) -> Vec<u8> {
    vec![(rank + round) as u8; (rank * round + rank % 2) as usize]
}

#[test]
fn ranks_gather_several_rounds_over_one_connection() {
    for n in [1u32, 2, 4] {
        let h = serve(n, LONG);
        let addr = h.addr().to_string();
        let results: Vec<Result<(), String>> = thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|rank| {
                    let addr = addr.clone();
                    s.spawn(move || {
                        let mut b = TcpBootstrap::connect(&addr, rank, n, &secret(), LONG)
                            .map_err(|e| e.to_string())?;
                        for round in 1..=3 {
                            let all = b
                                .allgather(&contribution(rank, round))
                                .map_err(|e| e.to_string())?;
                            let want: Vec<Vec<u8>> =
                                (0..n).map(|r| contribution(r, round)).collect();
                            if all != want {
                                return Err(format!("rank {rank} round {round}: {all:?}"));
                            }
                            let barrier = b.allgather(&[]).map_err(|e| e.to_string())?;
                            if barrier.len() != n as usize || barrier.iter().any(|c| !c.is_empty())
                            {
                                return Err(format!("barrier: {barrier:?}"));
                            }
                        }
                        Ok(())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(results.iter().all(Result::is_ok), "n = {n}: {results:?}");
        let events: Vec<ServeEvent> = h.events().try_iter().collect();
        assert!(events.contains(&ServeEvent::AllConnected), "{events:?}");
        let report = h.join().unwrap();
        assert_eq!(
            report.rounds, 6,
            "the server ends once every rank has closed"
        );
        assert!(report.dropped.is_empty(), "{}", report.dropped);
    }
}

#[test]
fn a_client_waits_for_a_server_that_starts_late() {
    // Reserve a free port, release it, and start the server on it a little
    // after the client begins retrying: the delay is the scenario.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let client = {
        let addr = addr.clone();
        thread::spawn(move || {
            let mut b = TcpBootstrap::connect(&addr, 0, 1, &secret(), LONG)?;
            b.allgather(b"late")
        })
    };
    thread::sleep(Duration::from_millis(150));
    let server = Rendezvous::bind(addr.as_str(), 1, &secret())
        .unwrap()
        .timeout(LONG)
        .spawn()
        .unwrap();
    assert_eq!(client.join().unwrap().unwrap(), vec![b"late".to_vec()]);
    assert_eq!(server.join().unwrap().rounds, 1);
}

#[test]
fn nobody_at_the_address_is_an_error_within_the_bound() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let start = Instant::now();
    let err = TcpBootstrap::connect(&addr, 0, 2, &secret(), Duration::from_millis(200))
        .err()
        .unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "could not reach the rendezvous at {addr} within 200ms: "
        )),
        "{text}"
    );
    assert!(matches!(err, BootstrapError::Connect { .. }));
}

#[test]
fn ranks_that_never_connect_are_named_to_those_that_did() {
    let h = serve(3, Duration::from_millis(200));
    let start = Instant::now();
    let err = connect(&h, 1, 3, LONG)
        .and_then(|mut b| b.allgather(b"x"))
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5));
    let (code, message) = aborted(&err);
    assert_eq!(code, AbortCode::NotConnected);
    assert_eq!(
        message,
        "ranks 0, 2 did not connect within 200ms (1 of 3 connected)"
    );
    assert_eq!(
        err.to_string(),
        format!("the rendezvous at {} aborted the job: {message}", h.addr())
    );
    assert_eq!(server_abort(h).to_string(), message);
}

#[test]
fn a_rendezvous_nobody_joins_ends_within_its_bound() {
    let h = serve(2, Duration::from_millis(100));
    assert_eq!(
        server_abort(h).to_string(),
        "ranks 0, 1 did not connect within 100ms (0 of 2 connected)"
    );
}

#[test]
fn a_client_that_dies_mid_round_is_named_to_the_others() {
    let n = 3;
    let h = serve(n, LONG);
    let addr = h.addr().to_string();
    let survivors: Vec<_> = (0..2)
        .map(|rank| {
            let addr = addr.clone();
            thread::spawn(move || {
                let mut b = TcpBootstrap::connect(&addr, rank, n, &secret(), LONG)?;
                b.allgather(b"one")?;
                b.allgather(b"two")
            })
        })
        .collect();
    // Rank 2 completes round 1, then dies while the others wait in round 2.
    let mut doomed = connect(&h, 2, n, LONG).unwrap();
    doomed.allgather(b"one").unwrap();
    wait_event(&h, |e| {
        matches!(e, ServeEvent::RoundComplete { round: 1, .. })
    });
    drop(doomed);
    for t in survivors {
        let err = t.join().unwrap().unwrap_err();
        let (code, message) = aborted(&err);
        assert_eq!(code, AbortCode::Disconnected);
        assert_eq!(message, "rank 2 disconnected before round 2 completed");
    }
    assert_eq!(
        server_abort(h),
        AbortReason::Disconnected { rank: 2, round: 2 }
    );
}

#[test]
fn a_silent_rank_times_the_round_out() {
    let h = serve(2, Duration::from_millis(300));
    let _silent = connect(&h, 1, 2, LONG).unwrap(); // connected, never contributes
    let mut b = connect(&h, 0, 2, LONG).unwrap();
    let start = Instant::now();
    let err = b.allgather(b"x").unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(
        aborted(&err),
        (
            AbortCode::RoundTimeout,
            "rank 1 did not contribute to round 1 within 300ms"
        )
    );
    // A failed bootstrap stays failed.
    assert!(matches!(
        b.allgather(b"again"),
        Err(BootstrapError::Failed(_))
    ));
    assert!(matches!(
        server_abort(h),
        AbortReason::RoundTimeout { round: 1, .. }
    ));
}

#[test]
fn a_server_that_never_answers_times_the_client_out() {
    let mute = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = mute.local_addr().unwrap().to_string();
    let start = Instant::now();
    let err = TcpBootstrap::connect(&addr, 0, 1, &secret(), Duration::from_millis(200))
        .err()
        .unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(
        err.to_string(),
        format!("timed out after 350ms waiting for the rendezvous at {addr} to welcome this rank")
    );
}

#[test]
fn strays_are_dropped_and_the_job_goes_on() {
    let h = serve(1, LONG);
    let mut stray = TcpStream::connect_timeout(&h.addr(), LONG).unwrap();
    stray
        .write_all(b"\x10\x00\x00\x00\x01GET / HTTP/1.1\r\n")
        .unwrap();
    let event = wait_event(&h, |e| matches!(e, ServeEvent::Dropped { .. }));
    assert!(
        matches!(event, ServeEvent::Dropped { reason: DropReason::Garbage, detail, .. }
            if detail == "not an ffd rendezvous message")
    );
    let mut b = connect(&h, 0, 1, LONG).unwrap();
    assert_eq!(b.allgather(b"ok").unwrap(), vec![b"ok".to_vec()]);
    drop(b);
    let report = h.join().unwrap();
    assert_eq!(report.rounds, 1);
    assert_eq!(report.dropped.get(DropReason::Garbage), 1);
}

#[test]
fn oversized_contributions_are_refused_on_both_sides() {
    let h = serve(1, LONG);
    let mut b = connect(&h, 0, 1, LONG).unwrap();
    assert!(matches!(
        b.allgather(&vec![0; MAX_CONTRIBUTION + 1]),
        Err(BootstrapError::TooLarge { rank: 0, .. })
    ));
    drop(b);
    assert!(h.join().is_ok(), "a refused round never reached the server");

    let h = serve(1, LONG);
    let mut rogue = rendezvous_raw::open(h.addr());
    rogue.hello(Some(&key(&secret())), 0, 1);
    assert!(matches!(rogue.read_sealed(), Some(Frame::Welcome { .. })));
    let big = Frame::Contribute {
        round: 1,
        data: vec![0; MAX_CONTRIBUTION + 1],
    };
    // The server stops reading at the length and aborts: the rest of the
    // write may meet a reset, but the ABORT is already on its way.
    rogue.send_sealed(&big);
    let want = format!(
        "rank 0's contribution of {} bytes exceeds the limit of {MAX_CONTRIBUTION} bytes",
        MAX_CONTRIBUTION + 1
    );
    assert_eq!(
        rogue.read_sealed(),
        Some(Frame::Abort {
            code: AbortCode::TooLarge as u16,
            message: want.clone()
        })
    );
    assert_eq!(server_abort(h).to_string(), want);
}

#[test]
fn stopping_the_server_aborts_its_clients() {
    let h = serve(2, LONG);
    let waiting = thread::spawn({
        let addr = h.addr().to_string();
        move || {
            TcpBootstrap::connect(&addr, 0, 2, &secret(), LONG).and_then(|mut b| b.allgather(b"a"))
        }
    });
    wait_event(&h, |e| matches!(e, ServeEvent::Connected { rank: 0, .. }));
    h.stop();
    let err = waiting.join().unwrap().unwrap_err();
    assert_eq!(
        aborted(&err),
        (AbortCode::Stopped, "the rendezvous was stopped")
    );
    assert_eq!(server_abort(h), AbortReason::Stopped);
}

#[test]
fn wait_all_connected_reports_a_complete_job() {
    let h = serve(2, LONG);
    assert!(!h.wait_all_connected(Duration::from_millis(50)));
    let a = connect(&h, 0, 2, LONG).unwrap();
    let b = connect(&h, 1, 2, LONG).unwrap();
    assert!(h.wait_all_connected(LONG));
    drop((a, b));
    assert_eq!(h.join().unwrap().rounds, 0);
}

// ---- the environment ----

fn tcp_env(pairs: &[(&str, &str)]) -> Result<TcpEnv, String> {
    TcpEnv::from_env(&Env::from_pairs(pairs.iter().copied())).map_err(|e| e.to_string())
}

#[test]
fn tcp_variables_are_validated_naming_the_variable() {
    let ok = tcp_env(&[
        ("FFD_BOOTSTRAP", "node1:5000"),
        ("FFD_RANK", "3"),
        ("FFD_SIZE", "4"),
        ("FFD_SECRET_FILE", "/run/ffd/secret"),
    ])
    .unwrap();
    assert_eq!(
        ok,
        TcpEnv {
            addr: "node1:5000".into(),
            rank: 3,
            size: 4,
            secret_file: "/run/ffd/secret".into(),
            timeout: Duration::from_secs(60)
        }
    );
    let with = |k: &'static str, v: &'static str| {
        let mut pairs = vec![
            ("FFD_BOOTSTRAP", "127.0.0.1:5000"),
            ("FFD_RANK", "0"),
            ("FFD_SIZE", "2"),
            ("FFD_SECRET_FILE", "/run/ffd/secret"),
        ];
        pairs.retain(|(name, _)| *name != k);
        if !v.is_empty() || k == "FFD_SIZE" {
            pairs.push((k, v));
        }
        tcp_env(&pairs)
    };
    let addr_form = "accepted: host:port of an `ffd rendezvous`, e.g. `127.0.0.1:5000`";
    assert_eq!(
        with("FFD_BOOTSTRAP", "").unwrap_err(),
        format!("FFD_BOOTSTRAP is not set; {addr_form}")
    );
    assert_eq!(
        with("FFD_BOOTSTRAP", "localhost").unwrap_err(),
        format!("FFD_BOOTSTRAP=`localhost` has no port; {addr_form}")
    );
    assert_eq!(
        with("FFD_BOOTSTRAP", "localhost:http").unwrap_err(),
        format!("FFD_BOOTSTRAP=`localhost:http` has no valid port (1 to 65535); {addr_form}")
    );
    assert_eq!(
        with("FFD_BOOTSTRAP", "::1:5000").unwrap_err(),
        format!("FFD_BOOTSTRAP=`::1:5000` has an IPv6 host without brackets; {addr_form}")
    );
    assert!(with("FFD_BOOTSTRAP", "[::1]:5000").is_ok());
    assert_eq!(
        with("FFD_RANK", "2").unwrap_err(),
        "FFD_RANK=`2` is not below FFD_SIZE=`2`; accepted: an integer below FFD_SIZE"
    );
    assert_eq!(
        with("FFD_RANK", "").unwrap_err(),
        "FFD_RANK is not set; accepted: an integer below FFD_SIZE"
    );
    assert_eq!(
        with("FFD_SECRET_FILE", "").unwrap_err(),
        "FFD_SECRET_FILE is not set; accepted: a file of mode 0600 (readable by its owner only) \
         holding 64 hexadecimal digits"
    );
    assert_eq!(
        with("FFD_SIZE", "0").unwrap_err(),
        "FFD_SIZE=`0` must be at least 1; accepted: an integer from 1 to 4294967295"
    );
    assert_eq!(
        with("FFD_SIZE", "").unwrap_err(),
        "FFD_SIZE=`` is empty; accepted: an integer from 1 to 4294967295"
    );
    assert_eq!(
        with("FFD_SIZE", "4294967296").unwrap_err(),
        "FFD_SIZE=`4294967296` is too large; accepted: an integer from 1 to 4294967295"
    );
    assert_eq!(
        with("FFD_BOOTSTRAP_TIMEOUT", "60").unwrap_err(),
        "FFD_BOOTSTRAP_TIMEOUT=`60` has no unit; accepted: a number with a unit ns|us|ms|s, e.g. `10ms`"
    );
    assert_eq!(
        with("FFD_BOOTSTRAP_TIMEOUT", "0s").unwrap_err(),
        "FFD_BOOTSTRAP_TIMEOUT=`0s` must be positive; accepted: a number with a unit ns|us|ms|s, e.g. `10ms`"
    );
}

/// A secret file of mode 0600 in a fresh directory of this test's.
fn secret_file(name: &str, secret: &JobSecret) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ffd-tcp-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("secret");
    secret.write_new_file(&path).unwrap();
    path
}

#[test]
fn connect_with_env_uses_the_variables() {
    let h = serve(1, LONG);
    let addr = h.addr().to_string();
    let path = secret_file("env", &secret());
    let env = Env::from_pairs([
        ("FFD_BOOTSTRAP", addr.as_str()),
        ("FFD_RANK", "0"),
        ("FFD_SIZE", "1"),
        ("FFD_SECRET_FILE", path.to_str().unwrap()),
        ("FFD_BOOTSTRAP_TIMEOUT", "5s"),
    ]);
    let mut b = TcpBootstrap::connect_with_env(&env).unwrap();
    assert_eq!((b.rank(), b.size(), b.addr()), (0, 1, addr.as_str()));
    assert_eq!(
        b.secret(),
        Some(&secret()),
        "start-up takes the secret from it"
    );
    assert_eq!(b.allgather(b"e").unwrap(), vec![b"e".to_vec()]);
    drop(b);
    assert!(h.join().is_ok());

    let missing = TcpBootstrap::connect_with_env(&Env::from_pairs([("FFD_RANK", "0")]))
        .err()
        .unwrap();
    assert!(matches!(missing, BootstrapError::Config(_)));
    assert_eq!(
        missing.to_string(),
        "FFD_BOOTSTRAP is not set; accepted: host:port of an `ffd rendezvous`, e.g. `127.0.0.1:5000`"
    );
    let no_secret = TcpBootstrap::connect_with_env(&Env::from_pairs([
        ("FFD_BOOTSTRAP", addr.as_str()),
        ("FFD_RANK", "0"),
        ("FFD_SIZE", "1"),
    ]))
    .err()
    .unwrap();
    assert!(
        no_secret
            .to_string()
            .starts_with("FFD_SECRET_FILE is not set; accepted: "),
        "{no_secret}"
    );

    // A secret file others can read is refused before connecting.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let open = TcpBootstrap::connect_with_env(&env).err().unwrap();
    assert!(matches!(open, BootstrapError::Secret(_)), "{open}");
    assert!(open.to_string().contains("has mode 0644"), "{open}");
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}
