//! A leave whose sends are refused: once its linger is over, those to a
//! rank still in the job are retried at the retry's pace until they go,
//! their verdict, or the stop (no spin), and those to a rank that failed
//! meanwhile hold nothing (docs/design.md §6 "Runtime", end of the
//! thread). In a test binary of their own, one test at a time: they read
//! the process's CPU time, which other ranks in the process would add to.

mod group;

use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ffd::bootstrap::InProcessBootstrap;
use ffd::config::{Config, LocalMode};
use ffd::runtime::{Callback, Detector, DetectorError, DetectorEvent, Event};

use group::loopback;

/// A one-way flag with a bounded wait.
#[derive(Default)]
struct Signal {
    set: Mutex<bool>,
    cv: Condvar,
}

impl Signal {
    fn raise(&self) {
        *self.set.lock().unwrap() = true;
        self.cv.notify_all();
    }

    fn wait(&self, bound: Duration) -> bool {
        let set = self.set.lock().unwrap();
        *self.cv.wait_timeout_while(set, bound, |s| !*s).unwrap().0
    }
}

/// Raises its signal when dropped: a failed assertion does not leave
/// rank 1's callback (and its shutdown) waiting for the release.
struct RaiseOnDrop(Arc<Signal>);

impl Drop for RaiseOnDrop {
    fn drop(&mut self) {
        self.0.raise();
    }
}

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

/// Two ranks on one host (mailboxes), rank 1 with a callback that holds its
/// progress thread at the first payload until `release` (bounded); returns
/// them and a signal raised once rank 1's thread is held.
fn start_with_rank_1_held(
    config: &Config,
    release: &Arc<Signal>,
) -> (Detector, Detector, Arc<Signal>) {
    if ffd::node::exit_word_probe().is_err() {
        panic!("futex_waitv (Linux 5.16 or later) for the mailboxes");
    }
    let held = Arc::new(Signal::default());
    let callback: Callback = {
        let (held, release) = (Arc::clone(&held), Arc::clone(release));
        Box::new(move |e: &DetectorEvent| {
            if matches!(&e.event, Event::Payload { .. }) {
                held.raise();
                // Bounded, so that a failing test cannot hang forever.
                release.wait(Duration::from_secs(60));
            }
        })
    };
    let mut callbacks = vec![None, Some(callback)];
    let handles: Vec<_> = InProcessBootstrap::group(2)
        .expect("group")
        .into_iter()
        .map(|mut b| {
            let config = config.clone();
            let callback: Option<Callback> = callbacks.remove(0);
            thread::spawn(move || match callback {
                Some(callback) => Detector::start_with_callback(&config, &mut b, callback),
                None => Detector::start(&config, &mut b),
            })
        })
        .collect();
    let mut detectors: Vec<Detector> = handles
        .into_iter()
        .map(|h| h.join().expect("no panic").expect("detector starts"))
        .collect();
    detectors.sort_by_key(Detector::rank);
    let d1 = detectors.pop().expect("rank 1");
    let d0 = detectors.pop().expect("rank 0");
    (d0, d1, held)
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
    let config: Config = loopback(LocalMode::Auto)
        .period(Duration::from_millis(50))
        .timeout(Duration::from_secs(10))
        .eagain_limit(Duration::from_secs(30))
        .build()
        .expect("valid config");
    let release = Arc::new(Signal::default());
    let (d0, d1, held) = start_with_rank_1_held(&config, &release);
    // Dropped before `d1`, whose drop waits for its callback.
    let _release_on_exit = RaiseOnDrop(Arc::clone(&release));
    fill_rank_1_mailbox(&d0, &held);

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
    release.raise();
    d1.shutdown();
}

/// The same refused sends, but rank 1 is declared failed (its thread held
/// past the timeout) before rank 0 shuts down: they no longer hold the
/// leave, which ends after its linger (60 ms), not at the shutdown's stop
/// (linger + 1 s); until this test it waited for their verdict.
#[test]
fn a_leave_is_not_held_by_sends_to_a_rank_failed_meanwhile() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let config: Config = loopback(LocalMode::Auto)
        .period(Duration::from_millis(20))
        .timeout(Duration::from_millis(200))
        .eagain_limit(Duration::from_secs(30))
        .build()
        .expect("valid config");
    let release = Arc::new(Signal::default());
    let (d0, d1, held) = start_with_rank_1_held(&config, &release);
    let _release_on_exit = RaiseOnDrop(Arc::clone(&release));
    fill_rank_1_mailbox(&d0, &held);
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
    release.raise();
    d1.shutdown();
}
