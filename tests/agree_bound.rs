//! An embedder's thread bound to its progress thread's CPU, as an MPI rank
//! is bound to a core, sends commands while agreements lift and hold that
//! thread at `SCHED_FIFO` (`FFD_SCHED=boost`, docs/design.md §6 "Runtime").
//! The thread must never spin on a half-sent command: at `SCHED_FIFO` it
//! would keep the sender, at the normal policy on the same CPU, from ever
//! finishing, and its rank would go silent and be declared (176.8 ms seen
//! under `ffd run` with `std::sync::mpsc`). Alone in its test binary: it
//! pins threads to CPUs.

mod group;
mod prereq;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use ffd::config::{CoreChoice, LocalMode};
use ffd::runtime::Detector;
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

use group::{loopback, start_group_with};

/// Agreements each rank calls, one after the other.
const ROUNDS: usize = 150;
const WITHIN: Duration = Duration::from_secs(20);
/// How often the bound thread sends a command (a broadcast): often
/// enough that the progress thread's wake-ups fall inside sends (with
/// `std::sync::mpsc`, 2 runs of 8 failed, rank 0 declared; with the queue
/// of `src/runtime/commands.rs`, 0 of 22), and seldom enough that the
/// broadcasts' receivers, two ranks on one CPU, keep up (every 20 µs, 40k
/// messages a second, they did not: a rank of theirs was declared).
const EVERY: Duration = Duration::from_micros(100);

fn allowed_cpus() -> Vec<usize> {
    let set = sched_getaffinity(Pid::from_raw(0)).expect("affinity");
    (0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect()
}

/// This process may run a thread at `SCHED_FIFO` (tried on a thread of
/// its own): without it nothing is ever held.
fn fifo_allowed() -> Result<(), String> {
    thread::spawn(ffd::node::set_current_thread_fifo)
        .join()
        .expect("no panic")
        .map_err(|e| format!("SCHED_FIFO refused here ({e})"))
}

fn bind_to(cpu: usize) {
    let mut set = CpuSet::new();
    set.set(cpu).expect("cpu in range");
    sched_setaffinity(Pid::from_raw(0), &set).expect("bind");
}

/// Rank 0's progress thread pinned to `home`, the others' to `away`.
fn start(local: LocalMode, home: usize, away: usize) -> Vec<Detector> {
    start_group_with(3, |r| {
        let cpu = if r == 0 { home } else { away };
        loopback(local)
            .core(CoreChoice::Cpu(cpu as u32))
            .build()
            .expect("valid config")
    })
}

/// Every rank agrees `ROUNDS` times while a thread bound to rank 0's CPU
/// broadcasts from rank 0 throughout; rank 0's own caller is bound there
/// too. Every agreement is decided with nobody failed, and no rank is
/// ever declared: rank 0's thread kept running its turns (the others,
/// on another CPU, watch its counter). Over the fabric and through the
/// host's segment.
#[test]
fn commands_from_the_progress_threads_cpu_never_stall_it_during_agreements() {
    let cpus = allowed_cpus();
    let two_cpus = if cpus.len() >= 2 {
        Ok(())
    } else {
        Err(format!("one CPU only ({cpus:?}): nothing to bind apart"))
    };
    if !prereq::available(
        &prereq::this_test(),
        &[two_cpus, fifo_allowed(), prereq::exit_words()],
    ) {
        return;
    }
    let (home, away) = (cpus[0], cpus[1]);
    for local in [LocalMode::Off, LocalMode::Auto] {
        let detectors = start(local, home, away);
        let sched = detectors[0].stats().sched;
        assert_eq!(sched, "boost", "{local:?}: the default holds");
        let done = AtomicBool::new(false);
        let sent = AtomicU64::new(0);
        thread::scope(|s| {
            s.spawn(|| {
                bind_to(home);
                while !done.load(Ordering::Relaxed) {
                    let next = Instant::now() + EVERY;
                    detectors[0].broadcast(b"x").expect("broadcast");
                    sent.fetch_add(1, Ordering::Relaxed);
                    // Paced, and on the CPU meanwhile, as a computing rank.
                    while Instant::now() < next {
                        std::hint::spin_loop();
                    }
                }
            });
            let callers: Vec<_> = detectors
                .iter()
                .map(|d| {
                    s.spawn(move || {
                        if d.rank() == 0 {
                            bind_to(home);
                        }
                        for round in 0..ROUNDS {
                            let agreed = d.iagree(u64::MAX).expect("iagree").wait_timeout(WITHIN);
                            let Some(Ok(agreement)) = agreed else {
                                panic!("{local:?}: rank {} round {round}: {agreed:?}", d.rank());
                            };
                            assert!(
                                agreement.view.failed.is_empty(),
                                "{local:?}: rank {} round {round} decided {:?} failed",
                                d.rank(),
                                agreement.view.failed
                            );
                        }
                    })
                })
                .collect();
            for c in callers {
                let ended = c.join();
                done.store(true, Ordering::Relaxed);
                if let Err(panic) = ended {
                    std::panic::resume_unwind(panic);
                }
            }
        });
        assert!(sent.load(Ordering::Relaxed) > 0, "{local:?}: nothing sent");
        // The case under test happened: rank 0's thread was held.
        let holds = detectors[0].stats().runtime.local.boost_holds;
        assert!(holds > 0, "{local:?}: rank 0's thread was never held");
        for d in &detectors {
            assert!(
                d.failed_ranks().is_empty(),
                "{local:?}: rank {} holds {:?} failed",
                d.rank(),
                d.failed_ranks()
            );
        }
        for d in detectors {
            d.shutdown();
        }
    }
}
