//! A job of 3 ranks on 2 CPUs whose rank 0 broadcasts from its progress
//! thread's CPU while every rank agrees: `agree_bound.rs` (the embedder's
//! thread on that CPU) and `agree_flood.rs` (broadcasts faster than the
//! two ranks sharing the other CPU take them comfortably). Each test
//! binary using it holds one test: it pins threads to CPUs. Declared by
//! those two only (`#[path = "group/pinned.rs"] mod pinned;`, beside
//! `mod group;` and `mod prereq;`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use ffd::config::{CoreChoice, LocalMode};
use ffd::runtime::{Detector, DetectorError};
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

use crate::group::{loopback, start_group_with};
use crate::prereq;

/// How long one agreement may take.
const WITHIN: Duration = Duration::from_secs(20);

fn allowed_cpus() -> Vec<usize> {
    let set = sched_getaffinity(Pid::from_raw(0)).expect("affinity");
    (0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect()
}

fn bind_to(cpu: usize) {
    let mut set = CpuSet::new();
    set.set(cpu).expect("cpu in range");
    sched_setaffinity(Pid::from_raw(0), &set).expect("bind");
}

/// This process may run a thread at `SCHED_FIFO` (tried on a thread of
/// its own): without it nothing is ever held.
fn fifo_allowed() -> Result<(), String> {
    thread::spawn(ffd::node::set_current_thread_fifo)
        .join()
        .expect("no panic")
        .map_err(|e| format!("SCHED_FIFO refused here ({e})"))
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

/// What each rank's scheduling did, for a failure's message.
fn sched_picture(detectors: &[Detector]) -> String {
    detectors
        .iter()
        .map(|d| {
            let runtime = d.stats().runtime;
            let l = runtime.local;
            format!(
                "rank {}: lifts {} holds {} busy releases {} broadcasts refused busy {}",
                d.rank(),
                l.boost_lifts,
                l.boost_holds,
                l.busy_releases,
                runtime.commands.broadcasts_refused_busy
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Every rank agrees `rounds` times while a thread bound to rank 0's CPU
/// broadcasts from rank 0 every `every` (paced, spinning meanwhile, as a
/// computing rank; a broadcast refused as `Busy`, rank 0's thread behind,
/// is counted and the loop goes on, any other error fails), rank 0's own
/// caller bound there too, and ranks 1 and 2 share the other CPU. Every agreement is decided with nobody failed,
/// and no rank is ever declared, and rank 0's thread was held (the case
/// under test happened). Over the fabric and through the host's segment.
/// Needs two CPUs, `SCHED_FIFO` and exit words (`prereq`: a skip says
/// why, and fails under `ci/test`).
pub fn agree_while_rank_0_broadcasts(every: Duration, rounds: usize) {
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
        let busy = AtomicU64::new(0);
        thread::scope(|s| {
            s.spawn(|| {
                bind_to(home);
                while !done.load(Ordering::Relaxed) {
                    let next = Instant::now() + every;
                    // Busy: rank 0's thread is behind; this payload is
                    // not sent, the loop goes on (as an embedder does).
                    match detectors[0].broadcast(b"x") {
                        Ok(()) => sent.fetch_add(1, Ordering::Relaxed),
                        Err(DetectorError::Busy { .. }) => busy.fetch_add(1, Ordering::Relaxed),
                        Err(e) => panic!("{local:?}: broadcast: {e}"),
                    };
                    while Instant::now() < next {
                        std::hint::spin_loop();
                    }
                }
            });
            let callers: Vec<_> = detectors
                .iter()
                .map(|d| {
                    let all = &detectors;
                    s.spawn(move || {
                        if d.rank() == 0 {
                            bind_to(home);
                        }
                        for round in 0..rounds {
                            let agreed = d.iagree(u64::MAX).expect("iagree").wait_timeout(WITHIN);
                            let Some(Ok(agreement)) = agreed else {
                                panic!(
                                    "{local:?}: rank {} round {round}: {agreed:?} ({})",
                                    d.rank(),
                                    sched_picture(all)
                                );
                            };
                            assert!(
                                agreement.view.failed.is_empty(),
                                "{local:?}: rank {} round {round} decided {:?} failed ({})",
                                d.rank(),
                                agreement.view.failed,
                                sched_picture(all)
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
        assert!(
            sent.load(Ordering::Relaxed) > 0,
            "{local:?}: nothing sent ({} refused busy)",
            busy.load(Ordering::Relaxed)
        );
        let holds = detectors[0].stats().runtime.local.boost_holds;
        assert!(holds > 0, "{local:?}: rank 0's thread was never held");
        for d in &detectors {
            assert!(
                d.failed_ranks().is_empty(),
                "{local:?}: rank {} holds {:?} failed ({})",
                d.rank(),
                d.failed_ranks(),
                sched_picture(&detectors)
            );
        }
        for d in detectors {
            d.shutdown();
        }
    }
}
