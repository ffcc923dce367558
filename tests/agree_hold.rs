//! An agreement holds the progress thread at `SCHED_FIFO` until it is
//! decided (`FFD_SCHED=boost`, docs/design.md §6 "Runtime"). Alone in its
//! test binary: it finds the progress threads by name in `/proc/self/task`,
//! and another test's ranks running in the same process would share the
//! names.

mod group;

use std::thread;
use std::time::{Duration, Instant};

use ffd::config::{Config, LocalMode};

use group::{loopback, start_group};

const NORMAL: u32 = 0;
const FIFO: u32 = 1;
const WITHIN: Duration = Duration::from_secs(10);

fn config(local: LocalMode) -> Config {
    loopback(local).build().expect("valid config")
}

/// The scheduling policy of this process's thread named `name` (field 41
/// of its `/proc` stat: 0 normal, 1 `SCHED_FIFO`); `None` when no thread
/// has that name.
fn policy_of_thread(name: &str) -> Option<u32> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
        // The fields after the name (which may hold spaces) start at 3.
        let rest = &stat[stat.rfind(')')? + 2..];
        return rest.split_whitespace().nth(41 - 3)?.parse().ok();
    }
    None
}

fn policy_of(rank: u32) -> Option<u32> {
    policy_of_thread(&format!("ffd-progress-{rank}"))
}

/// Waits (bounded) until `done` holds; returns whether it did.
fn wait_until(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + WITHIN;
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Rank 0 calls and waits for ranks 1 and 2: its thread is held (the
/// hold is counted, so the thread slept since the call's lift, and it
/// still runs real-time); once all have called and decided, every rank's
/// thread is back at the normal policy. Over the fabric (`FFD_LOCAL=off`)
/// and through the host's segment.
#[test]
fn an_agreement_holds_the_progress_thread_real_time_until_it_is_decided() {
    let mut modes = vec![LocalMode::Off];
    if ffd::node::exit_word_probe().is_ok() {
        modes.push(LocalMode::Auto);
    }
    for local in modes {
        let detectors = start_group(3, &config(local));
        let sched = detectors[0].stats().sched;
        if sched != "boost" {
            eprintln!("SCHED_FIFO refused here ({sched}): nothing is held");
            assert!(
                sched.starts_with("normal (FFD_SCHED=boost refused"),
                "{sched}"
            );
            return;
        }
        // Idle, normal (a lift during start-up, e.g. by the exit-word
        // thread, lasts until the thread's next sleep: seen once in 50).
        assert!(
            wait_until(|| policy_of(0) == Some(NORMAL)),
            "{local:?}: idle, yet at {:?}",
            policy_of(0)
        );
        let first = detectors[0].iagree(u64::MAX).expect("iagree");
        // The counters are published every 50 ms, at a turn's end.
        let holds = || detectors[0].stats().runtime.local.boost_holds;
        assert!(wait_until(|| holds() >= 1), "{local:?}: never held");
        assert_eq!(policy_of(0), Some(FIFO), "{local:?}: held while it waits");
        assert!(
            first.test().is_none(),
            "{local:?}: decided without ranks 1 and 2"
        );
        let rest: Vec<_> = detectors[1..]
            .iter()
            .map(|d| d.iagree(u64::MAX).expect("iagree"))
            .collect();
        for request in std::iter::once(&first).chain(&rest) {
            let agreed = request.wait_timeout(Duration::from_secs(20));
            assert!(matches!(agreed, Some(Ok(_))), "{local:?}: {agreed:?}");
        }
        for r in 0..3 {
            assert!(
                wait_until(|| policy_of(r) == Some(NORMAL)),
                "{local:?}: rank {r} still at {:?}",
                policy_of(r)
            );
        }
        for d in detectors {
            d.shutdown();
        }
    }
}
