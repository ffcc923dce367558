//! Detectors of several ranks inside one process (threads standing in for
//! ranks, `tcp;ofi_rxm` over loopback): start-up, steady state, clean leave,
//! application broadcast, events by queue, fd and callback; a callback stuck
//! during shutdown, and a progress thread that dies (through the
//! `fault-injection` hooks this crate's tests turn on).

mod group;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use ffd::bootstrap::{Bootstrap, InProcessBootstrap};
use ffd::config::{Config, CoreChoice, Env, EnvPolicy, LocalMode};
use ffd::runtime::{
    Callback, Detector, DetectorError, DetectorEvent, DetectorState, Event, Fault, Liveness,
    StopCause, StopReason,
};

use group::{Signal, loopback, start_group, start_with_callbacks};

/// Threads of one process stand in for the ranks (one pid, one host):
/// every rank on the fabric ring, as these tests expect. Same-host
/// watching has its own test below and its process tests in cli/tests.
fn config() -> Config {
    config_with(LocalMode::Off)
}

fn config_with(local: LocalMode) -> Config {
    loopback(local).build().expect("valid config")
}

/// Waits (bounded) until `pred` holds for the events drained from `d`.
fn wait_for_event(
    d: &Detector,
    within: Duration,
    mut pred: impl FnMut(&DetectorEvent) -> bool,
) -> Option<DetectorEvent> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        while let Some(e) = d.try_next_event() {
            if pred(&e) {
                return Some(e);
            }
        }
        // Sleep on the detector's own readiness fd rather than a timer.
        let fd = d.event_fd();
        let mut pfd = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = u16::try_from(left.as_millis().min(1000)).unwrap_or(1000);
        let _ = nix::poll::poll(&mut pfd, ms);
    }
    None
}

/// With host groups (one host here), only the leader, rank 0, writes
/// heartbeats; every rank checks its same-host emitter's counter; nobody is
/// declared.
/// No rank raises any event for `d` (a steady state observed, not a wait
/// for something to happen).
fn assert_quiet_for(detectors: &[Detector], span: Duration) {
    let quiet = Instant::now() + span;
    while Instant::now() < quiet {
        for d in detectors {
            if let Some(e) = d.try_next_event() {
                panic!("rank {} saw {e:?}; stats {:?}", d.rank(), d.stats());
            }
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn with_host_groups_a_quiet_host_heartbeats_from_its_leader_only() {
    let detectors = start_group(4, &config_with(LocalMode::Auto));
    assert_quiet_for(&detectors, Duration::from_millis(400));
    for d in &detectors {
        assert_eq!(d.epoch(), 0);
        let stats = d.stats();
        // One host: no fabric ring at all, even for the leader.
        assert_eq!(
            stats.engine.observation.heartbeats_written,
            0,
            "rank {}",
            d.rank()
        );
        assert!(stats.engine.hosts.local_checks > 0, "rank {}", d.rank());
        assert_eq!(stats.runtime.transport.errors, 0);
    }
}

/// An idle rank's plain ticks end on the host's wake-up grid (an eighth
/// of the check interval), so the host's ranks wake together; nobody is
/// declared. (A `SlowEmitter` warning is not checked for: a loaded
/// machine starves these threads for longer than its bound at start-up,
/// grid or not.)
#[test]
fn with_host_groups_idle_ticks_end_on_the_hosts_wake_up_grid() {
    let detectors = start_group(4, &config_with(LocalMode::Auto));
    // Counted per tick, published at most every 50 ms: a few timeouts.
    let deadline = Instant::now() + Duration::from_secs(5);
    for d in &detectors {
        while d.stats().runtime.local.grid_ticks < 3 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        let stats = d.stats();
        assert!(
            stats.runtime.local.grid_ticks >= 3,
            "rank {}: no ticks on the grid; stats {stats:?}",
            d.rank()
        );
    }
    for d in &detectors {
        assert_eq!(d.epoch(), 0, "rank {}", d.rank());
        while let Some(e) = d.try_next_event() {
            assert!(
                matches!(e.event, Event::SlowEmitter { .. }),
                "rank {} saw {e:?}",
                d.rank()
            );
        }
    }
    // Without same-host watching every rank beats each period: no tick
    // is idle, none goes on the grid.
    let detectors = start_group(2, &config_with(LocalMode::Off));
    let deadline = Instant::now() + Duration::from_secs(5);
    for d in &detectors {
        while d.stats().engine.observation.slot_checks < 3 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        let stats = d.stats();
        assert!(
            stats.engine.observation.slot_checks >= 3,
            "rank {}",
            d.rank()
        );
        assert_eq!(stats.runtime.local.grid_ticks, 0, "rank {}", d.rank());
    }
}

/// A job whose ranks differ in a job-wide setting fails to start on every
/// rank, each naming the variable and both values: `FFD_QUORUM` (carried
/// since record version 4) and `FFD_PERIOD`, set through the environment
/// on rank 2 only.
#[test]
fn ranks_that_differ_in_a_job_wide_setting_fail_to_start_naming_it() {
    for (var, odd, usual) in [
        ("FFD_QUORUM", "off", "majority"),
        ("FFD_PERIOD", "20ms", "10ms"),
    ] {
        let group = InProcessBootstrap::group(3).expect("group");
        let handles: Vec<_> = group
            .into_iter()
            .map(|mut b| {
                let pairs = if b.rank() == 2 {
                    vec![(var, odd)]
                } else {
                    vec![]
                };
                let config = loopback(LocalMode::Off)
                    .build_with_env(&Env::from_pairs(pairs), EnvPolicy::Override)
                    .expect("valid config");
                thread::spawn(move || match Detector::start(&config, &mut b) {
                    Ok(_) => panic!("rank {} started with {var} differing", b.rank()),
                    Err(e) => e.to_string(),
                })
            })
            .collect();
        let errors: Vec<String> = handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect();
        let by_rank_2 = format!("rank 2 runs with {var}={odd}, this rank with {var}={usual}");
        let by_rank_0 = format!("rank 0 runs with {var}={usual}, this rank with {var}={odd}");
        for (rank, e) in errors.iter().enumerate() {
            let want = if rank == 2 { &by_rank_0 } else { &by_rank_2 };
            assert!(e.contains(want.as_str()), "rank {rank}: {e}");
        }
    }
}

#[test]
fn a_quiet_job_reports_nobody_and_every_rank_is_alive() {
    let config = config();
    let detectors = start_group(4, &config);
    // Four timeouts of steady state.
    assert_quiet_for(&detectors, Duration::from_millis(400));
    for d in &detectors {
        assert_eq!(d.epoch(), 0);
        assert!((0..4).all(|r| d.is_alive(r)));
        assert!(!d.is_alive(4), "ranks beyond N are not members");
        let stats = d.stats();
        assert!(stats.runtime.heartbeats.posted >= 10, "{:?}", stats.runtime);
        assert!(stats.engine.observation.slot_checks > 0);
        assert_eq!(stats.runtime.transport.errors, 0);
    }
}

#[test]
fn a_clean_leave_is_reported_as_left_not_failed() {
    let config = config();
    let mut detectors = start_group(4, &config);
    let leaver = detectors.remove(2);
    assert_eq!(leaver.rank(), 2);
    leaver.shutdown();
    for d in &detectors {
        let left = wait_for_event(d, Duration::from_secs(3), |e| {
            matches!(&e.event, Event::Left { rank: 2 })
        });
        assert!(
            left.is_some(),
            "rank {} never learned rank 2 left",
            d.rank()
        );
        assert!(d.has_left(2));
        assert!(!d.is_alive(2));
        assert_eq!(d.epoch(), 0, "a leave is not a failure");
    }
    // The ring mended around rank 2: another timeout passes with no failure.
    let quiet = Instant::now() + Duration::from_millis(300);
    while Instant::now() < quiet {
        for d in &detectors {
            if let Some(e) = d.try_next_event() {
                assert!(
                    !matches!(&e.event, Event::Failed { .. }),
                    "rank {} reported {e:?}",
                    d.rank()
                );
            }
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn all_ranks_shutting_down_at_once_report_no_failure() {
    let config = config();
    let seen: Arc<Mutex<Vec<(u32, DetectorEvent)>>> = Arc::default();
    let group = InProcessBootstrap::group(5).expect("group");
    let handles: Vec<_> = group
        .into_iter()
        .map(|mut b| {
            let config = config.clone();
            let seen = Arc::clone(&seen);
            thread::spawn(move || {
                let me = ffd::bootstrap::Bootstrap::rank(&b);
                Detector::start_with_callback(
                    &config,
                    &mut b,
                    Box::new(move |e| seen.lock().unwrap().push((me, e.clone()))),
                )
            })
        })
        .collect();
    let detectors: Vec<Detector> = handles
        .into_iter()
        .map(|h| h.join().unwrap().expect("start"))
        .collect();
    let (done_tx, done_rx) = mpsc::channel();
    for d in detectors {
        let done_tx = done_tx.clone();
        thread::spawn(move || {
            d.shutdown();
            let _ = done_tx.send(());
        });
    }
    for _ in 0..5 {
        done_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("shutdown is bounded");
    }
    let seen = seen.lock().unwrap();
    let failures: Vec<_> = seen
        .iter()
        .filter(|(_, e)| matches!(&e.event, Event::Failed { .. }))
        .collect();
    assert!(failures.is_empty(), "false reports: {failures:?}");
}

#[test]
fn an_application_broadcast_reaches_every_rank_once_its_origin_too() {
    let config = config();
    let detectors = start_group(5, &config);
    detectors[1].broadcast(b"revoke 7").expect("broadcast");
    for d in detectors.iter() {
        let got = wait_for_event(
            d,
            Duration::from_secs(3),
            |e| matches!(&e.event, Event::Payload { origin: 1, bytes, .. } if bytes == b"revoke 7"),
        );
        assert!(got.is_some(), "rank {} missed the payload", d.rank());
        // Exactly once.
        let again = wait_for_event(d, Duration::from_millis(100), |e| {
            matches!(&e.event, Event::Payload { .. })
        });
        assert!(again.is_none(), "rank {} got it twice", d.rank());
    }
    // The largest payload the detector accepts arrives whole (at its
    // origin too); one more byte
    // is refused at once.
    let largest = vec![b'x'; 8 * 1024];
    detectors[2].broadcast(&largest).expect("8 KiB payload");
    let got = wait_for_event(
        &detectors[0],
        Duration::from_secs(3),
        |e| matches!(&e.event, Event::Payload { origin: 2, bytes, .. } if bytes.len() == largest.len()),
    );
    assert!(got.is_some(), "rank 0 missed the 8 KiB payload");
    let own = wait_for_event(
        &detectors[2],
        Duration::from_secs(3),
        |e| matches!(&e.event, Event::Payload { origin: 2, seq: 1, bytes } if bytes.len() == largest.len()),
    );
    assert!(own.is_some(), "rank 2 did not deliver its own payload");
    let err = detectors[0]
        .broadcast(&vec![0u8; 8 * 1024 + 1])
        .unwrap_err();
    assert!(err.to_string().contains("8192"), "{err}");
    let too_big = vec![0u8; 1 << 20];
    let err = detectors[0].broadcast(&too_big).unwrap_err();
    assert!(err.to_string().contains("exceeds"), "{err}");
}

#[test]
fn an_unavailable_provider_is_a_clear_error_naming_the_available_ones() {
    let config = Config::builder()
        .provider("no-such-provider")
        .core(CoreChoice::None)
        .build()
        .unwrap();
    let mut group = InProcessBootstrap::group(1).unwrap();
    let err = Detector::start(&config, &mut group[0])
        .unwrap_err()
        .to_string();
    assert!(err.contains("no-such-provider"), "{err}");
    assert!(err.contains("tcp"), "lists what is available: {err}");
}

/// A config whose timeout is far above the stalls these tests cause.
fn patient_config() -> Config {
    Config::builder()
        .provider("tcp")
        .domain("lo")
        .period(Duration::from_millis(50))
        .timeout(Duration::from_secs(10))
        .startup_grace(Duration::from_millis(200))
        .core(CoreChoice::None)
        .build()
        .expect("valid config")
}

#[test]
fn shutdown_waits_for_a_stuck_callback_and_no_callback_runs_after_it() {
    #[derive(Default)]
    struct Stuck {
        calls: AtomicUsize,
        /// The first payload has blocked (later ones do not).
        blocked: AtomicBool,
        shut_down: AtomicBool,
        calls_after_shutdown: AtomicUsize,
        entered: Signal,
        release: Signal,
    }
    let stuck = Arc::new(Stuck::default());
    let callback: Callback = {
        let stuck = Arc::clone(&stuck);
        Box::new(move |e: &DetectorEvent| {
            stuck.calls.fetch_add(1, Ordering::SeqCst);
            if stuck.shut_down.load(Ordering::SeqCst) {
                stuck.calls_after_shutdown.fetch_add(1, Ordering::SeqCst);
            }
            if matches!(&e.event, Event::Payload { .. })
                && !stuck.blocked.swap(true, Ordering::SeqCst)
            {
                stuck.entered.raise();
                // Bounded, so that a failing test cannot hang forever.
                stuck.release.wait(Duration::from_secs(60));
            }
        })
    };
    let mut detectors = start_with_callbacks(&patient_config(), vec![Some(callback), None]);
    let (d0, d1) = (detectors.remove(0), detectors.remove(0));
    d1.broadcast(b"stick").expect("broadcast");
    assert!(
        stuck.entered.wait(Duration::from_secs(10)),
        "rank 0's callback never saw the payload"
    );
    // The blocked callback is the last one that may ever run.
    let calls = stuck.calls.load(Ordering::SeqCst);
    let (done_tx, done_rx) = mpsc::channel();
    let shutter = {
        let stuck = Arc::clone(&stuck);
        thread::spawn(move || {
            d0.shutdown();
            stuck.shut_down.store(true, Ordering::SeqCst);
            let _ = done_tx.send(());
        })
    };
    // Once shutdown has begun, this payload starts no callback.
    d1.broadcast(b"later").expect("broadcast");
    assert_eq!(
        done_rx.recv_timeout(Duration::from_secs(3)),
        Err(mpsc::RecvTimeoutError::Timeout),
        "shutdown returned while its callback was still running"
    );
    assert_eq!(stuck.calls.load(Ordering::SeqCst), calls);
    stuck.release.raise();
    done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("shutdown returns once the callback did");
    shutter.join().expect("the shutting thread");

    let left = wait_for_event(&d1, Duration::from_secs(10), |e| {
        matches!(&e.event, Event::Left { rank: 0 })
    });
    assert!(left.is_some(), "rank 1 never learned rank 0 left");
    assert_eq!(d1.epoch(), 0, "a leave, not a failure");
    assert_eq!(d1.state(), DetectorState::Running);
    assert_eq!(d1.liveness(1), Liveness::Alive);
    d1.shutdown();
    assert_eq!(
        stuck.calls.load(Ordering::SeqCst),
        calls,
        "no callback started once shutdown had begun"
    );
    assert_eq!(stuck.calls_after_shutdown.load(Ordering::SeqCst), 0);
}

#[test]
fn a_progress_thread_panic_stops_the_rank_and_the_others_declare_it() {
    const VICTIM: u32 = 2;
    let stops: Arc<Mutex<Vec<StopReason>>> = Arc::default();
    let callback: Callback = {
        let stops = Arc::clone(&stops);
        Box::new(move |e: &DetectorEvent| {
            if let Event::Stopped(reason) = &e.event {
                stops.lock().unwrap().push(reason.clone());
            }
        })
    };
    let mut callbacks: Vec<Option<Callback>> = (0..4).map(|_| None).collect();
    callbacks[VICTIM as usize] = Some(callback);
    let detectors = start_with_callbacks(&config(), callbacks);
    let victim = &detectors[VICTIM as usize];
    victim
        .inject_fault(Fault::Panic)
        .expect("the thread takes commands");

    let stopped = wait_for_event(victim, Duration::from_secs(10), |e| {
        matches!(e.event, Event::Stopped(_))
    })
    .expect("a Stopped event");
    let Event::Stopped(reason) = stopped.event else {
        unreachable!()
    };
    assert_eq!(reason.cause, StopCause::Panic);
    assert!(reason.message.contains("injected fault"), "{reason}");
    assert_eq!(
        *stops.lock().unwrap(),
        std::slice::from_ref(&reason),
        "the callback too"
    );
    assert_eq!(victim.state(), DetectorState::Stopped(reason));
    for r in 0..4 {
        assert_eq!(victim.liveness(r), Liveness::Unknown, "about {r}");
        assert!(!victim.is_alive(r), "never a stale true");
    }
    assert!(matches!(
        victim.broadcast(b"x"),
        Err(DetectorError::Stopped)
    ));
    assert!(!victim.is_excluded());

    for d in detectors.iter().filter(|d| d.rank() != VICTIM) {
        let failed = wait_for_event(d, Duration::from_secs(5), |e| {
            matches!(&e.event, Event::Failed { .. })
        })
        .unwrap_or_else(|| panic!("rank {} never declared rank {VICTIM}", d.rank()));
        assert!(
            matches!(&failed.event, Event::Failed { rank: VICTIM, .. }),
            "rank {}: {failed:?}",
            d.rank()
        );
        assert_eq!(d.epoch(), 1, "rank {}: nobody else", d.rank());
        assert_eq!(d.failed_ranks(), [VICTIM]);
        assert_eq!(d.state(), DetectorState::Running);
        assert_eq!(d.liveness(VICTIM), Liveness::NotAlive);
    }
    drop(detectors);
    assert_eq!(stops.lock().unwrap().len(), 1, "one Stopped event");
}

#[test]
fn a_completion_queue_error_stops_the_detector_with_its_cause() {
    let mut detectors = start_group(1, &config());
    let d = detectors.remove(0);
    assert_eq!(d.liveness(0), Liveness::Alive);
    d.inject_fault(Fault::CompletionQueueError)
        .expect("the thread takes commands");
    let stopped = wait_for_event(&d, Duration::from_secs(10), |e| {
        matches!(e.event, Event::Stopped(_))
    })
    .expect("a Stopped event");
    let DetectorState::Stopped(reason) = d.state() else {
        panic!("state {:?}", d.state());
    };
    assert_eq!(stopped.event, Event::Stopped(reason.clone()));
    assert_eq!(reason.cause, StopCause::CompletionQueue);
    assert!(reason.message.contains("injected fault"), "{reason}");
    assert_eq!(d.liveness(0), Liveness::Unknown);
    d.shutdown();
}

/// A burst larger than a mailbox (two ranks of one host: 32 records):
/// the posts a full mailbox refuses wait in the sender's book and go
/// again, so every payload arrives, once, in order (a broadcast refused
/// as `Busy` is sent again until taken). Whether the mailbox
/// fills depends on the reader's thread running less than the writer's
/// (on two free cores it may keep up), so bursts go on, each checked
/// whole and in order, until one filled it (at most `BURSTS`).
#[test]
fn a_burst_beyond_a_full_mailbox_arrives_whole_and_in_order() {
    if ffd::node::exit_word_probe().is_err() {
        panic!("futex_waitv (Linux 5.16 or later) for the mailboxes");
    }
    let detectors = start_group(2, &config_with(LocalMode::Auto));
    const BURST: u32 = 200;
    const BURSTS: u32 = 10;
    let mut bursts = 0;
    let stats = loop {
        for i in 0..BURST {
            // Busy: `MAX_QUEUED_BROADCASTS` wait for the progress thread;
            // this payload was not sent, and goes again once it took some.
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                match detectors[0].broadcast(&i.to_le_bytes()) {
                    Ok(()) => break,
                    Err(DetectorError::Busy { .. }) if Instant::now() < deadline => {
                        thread::yield_now();
                    }
                    Err(e) => panic!("burst {}: broadcast {i}: {e}", bursts + 1),
                }
            }
        }
        bursts += 1;
        let mut next = 0u32;
        let deadline = Instant::now() + Duration::from_secs(20);
        while next < BURST {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "burst {bursts}: {next} of {BURST} arrived");
            let e = wait_for_event(&detectors[1], left, |e| {
                matches!(&e.event, Event::Payload { origin: 0, .. })
            });
            let Some(DetectorEvent {
                event: Event::Payload { bytes, .. },
                ..
            }) = e
            else {
                panic!("burst {bursts}: {next} of {BURST} arrived");
            };
            assert_eq!(bytes, next.to_le_bytes(), "in order");
            next += 1;
        }
        // The counters are published every 50 ms.
        let deadline = Instant::now() + Duration::from_secs(5);
        let stats = loop {
            let s = detectors[0].stats().runtime.mailbox;
            if s.sent >= u64::from(bursts * BURST) || Instant::now() > deadline {
                break s;
            }
            thread::sleep(Duration::from_millis(10));
        };
        if stats.full > 0 || bursts == BURSTS {
            break stats;
        }
    };
    assert!(
        stats.full > 0,
        "the mailbox was never full in {bursts} bursts: {stats:?}"
    );
    assert!(stats.sent >= u64::from(bursts * BURST), "{stats:?}");
    assert_eq!(detectors[0].stats().runtime.messages.sends_completed, 0);
    for d in detectors {
        d.shutdown();
    }
}
