//! A leave whose sends are refused: once its linger is over, those to a
//! rank still in the job are retried at the retry's pace until they go,
//! their verdict, or the stop (no spin), and those to a rank that failed
//! meanwhile hold nothing (docs/design.md §6 "Runtime", end of the
//! thread). In a test binary of their own, one test at a time: they read
//! the process's CPU time, which other ranks in the process would add to.

mod group;

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ffd::config::{Config, LocalMode};
use ffd::runtime::{Callback, Detector, DetectorError, DetectorEvent, Event};

use group::{Signal, loopback, start_with_callbacks};

/// User + system CPU time of this process so far (`/proc/self/stat`
/// fields 14 and 15, in ticks of `USER_HZ`, 100 on Linux), threads that
/// ended included.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // The fields after the name (which may hold spaces) start at 3.
    let rest = &stat[stat.rfind(')').expect("a name in parentheses") + 2..];
    let field = |n: usize| -> u64 {
        rest.split_whitespace()
            .nth(n - 3)
            .and_then(|f| f.parse().ok())
            .expect("a tick count")
    };
    Duration::from_millis((field(14) + field(15)) * 10)
}

/// One test at a time in this binary (`process_cpu`).
static SERIAL: Mutex<()> = Mutex::new(());

/// Rank 1 of a [`refused_job`], its progress thread held in its
/// callback; dropped, it is released and shut down.
struct HeldRank1 {
    release: Arc<Signal>,
    _detector: Detector,
}

impl Drop for HeldRank1 {
    fn drop(&mut self) {
        // Before the detector's own drop, which waits for its callback.
        self.release.raise();
    }
}

/// Two ranks on one host (mailboxes) at `period` and `timeout`, refused
/// posts judged only after 30 s (`FFD_EAGAIN_LIMIT`): rank 1's progress
/// thread is held in its callback from its first payload on (bounded),
/// and rank 0 has broadcast until its posts to rank 1's mailbox were
/// refused. Returns rank 0 and rank 1.
fn refused_job(period: Duration, timeout: Duration) -> (Detector, HeldRank1) {
    if ffd::node::exit_word_probe().is_err() {
        panic!("futex_waitv (Linux 5.16 or later) for the mailboxes");
    }
    let config: Config = loopback(LocalMode::Auto)
        .period(period)
        .timeout(timeout)
        .eagain_limit(Duration::from_secs(30))
        .build()
        .expect("valid config");
    let (held, release) = (Arc::new(Signal::default()), Arc::new(Signal::default()));
    let callback: Callback = {
        let (held, release) = (Arc::clone(&held), Arc::clone(&release));
        Box::new(move |e: &DetectorEvent| {
            if matches!(&e.event, Event::Payload { .. }) {
                held.raise();
                // Bounded, so that a failing test cannot hang forever.
                release.wait(Duration::from_secs(60));
            }
        })
    };
    let mut detectors = start_with_callbacks(&config, vec![None, Some(callback)]);
    let rank_1 = HeldRank1 {
        release,
        _detector: detectors.pop().expect("rank 1"),
    };
    let d0 = detectors.pop().expect("rank 0");
    fill_rank_1_mailbox(&d0, &held);
    (d0, rank_1)
}

/// Rank 0 broadcasts until its posts to rank 1's mailbox are refused.
fn fill_rank_1_mailbox(d0: &Detector, held: &Signal) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut sent = 0u32;
    loop {
        assert!(
            Instant::now() < deadline,
            "rank 1's mailbox never filled ({sent} payloads; rank 1 held: {}): {:?}",
            held.wait(Duration::ZERO),
            d0.stats().runtime.mailbox
        );
        match d0.broadcast(&sent.to_le_bytes()) {
            Ok(()) => sent += 1,
            Err(DetectorError::Busy { .. }) => thread::yield_now(),
            Err(e) => panic!("broadcast {sent}: {e}"),
        }
        // The counters are published every 50 ms.
        if sent % 64 == 0 {
            if d0.stats().runtime.mailbox.full > 0 {
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
    assert!(
        held.wait(Duration::ZERO),
        "rank 1's callback holds its thread"
    );
}

/// Rank 1's progress thread is held in its callback, so its mailbox fills
/// and rank 0's posts to it are refused; rank 0 then shuts down. Its leave
/// waits for those sends (rank 1 is still in the job, and their refusal
/// run is far from `FFD_EAGAIN_LIMIT`) until the shutdown's stop, linger +
/// 1 s later. Until this test, once the linger had passed the thread took
/// its turns without a wait: a CPU for the whole second (and, over
/// `tcp;ofi_rxm`, a connection attempt per turn to a dead peer's address).
#[test]
fn a_leave_whose_sends_are_refused_retries_them_without_spinning() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (d0, _rank_1) = refused_job(Duration::from_millis(50), Duration::from_secs(10));

    let (cpu, started) = (process_cpu(), Instant::now());
    d0.shutdown();
    let (cpu, wall) = (process_cpu() - cpu, started.elapsed());
    // The stop comes linger (150 ms) + 1 s after the leave: the refused
    // sends held the end that long, and were retried meanwhile.
    assert!(
        wall >= Duration::from_secs(1),
        "the leave ended after {wall:?}, before the stop: were the refused sends to a \
         rank in the job dropped?"
    );
    assert!(
        cpu * 4 < wall,
        "the leave took {cpu:?} of CPU in {wall:?}: it spun"
    );
}

/// The same refused sends, but rank 1 is declared failed (its thread held
/// past the timeout) before rank 0 shuts down: they no longer hold the
/// leave, which ends after its linger (60 ms), not at the shutdown's stop
/// (linger + 1 s); until this test it waited for their verdict.
#[test]
fn a_leave_is_not_held_by_sends_to_a_rank_failed_meanwhile() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (d0, _rank_1) = refused_job(Duration::from_millis(20), Duration::from_millis(200));
    let deadline = Instant::now() + Duration::from_secs(10);
    while d0.is_alive(1) {
        assert!(
            Instant::now() < deadline,
            "rank 1, held, was never declared: {:?}",
            d0.stats().engine
        );
        thread::sleep(Duration::from_millis(10));
    }
    assert!(
        d0.stats().runtime.mailbox.full > 0,
        "posts to rank 1 were refused"
    );

    let started = Instant::now();
    d0.shutdown();
    let wall = started.elapsed();
    assert!(
        wall < Duration::from_millis(900),
        "the leave ended after {wall:?}: sends to a failed rank held it until the stop"
    );
}
