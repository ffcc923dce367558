//! A job of 3 ranks on 2 CPUs whose rank 0 broadcasts from its progress
//! thread's CPU while every rank agrees: `agree_bound.rs` (the embedder's
//! thread on that CPU) and `agree_flood.rs` (broadcasts faster than the
//! two ranks sharing the other CPU take them comfortably). Each test
//! binary using it holds one test: it pins threads to CPUs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use ffd::bootstrap::InProcessBootstrap;
use ffd::config::{Config, CoreChoice, LocalMode};
use ffd::runtime::Detector;
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

use super::loopback;

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

/// Rank 0's progress thread pinned to `home`, the others' to `away`.
fn start(local: LocalMode, home: usize, away: usize) -> Vec<Detector> {
    let handles: Vec<_> = InProcessBootstrap::group(3)
        .expect("group")
        .into_iter()
        .enumerate()
        .map(|(r, mut b)| {
            let cpu = if r == 0 { home } else { away };
            let config: Config = loopback(local)
                .core(CoreChoice::Cpu(cpu as u32))
                .build()
                .expect("valid config");
            thread::spawn(move || Detector::start(&config, &mut b))
        })
        .collect();
    let mut out: Vec<Detector> = handles
        .into_iter()
        .map(|h| h.join().expect("no panic").expect("detector starts"))
        .collect();
    out.sort_by_key(Detector::rank);
    out
}

/// What each rank's scheduling did, for a failure's message.
fn sched_picture(detectors: &[Detector]) -> String {
    detectors
        .iter()
        .map(|d| {
            let l = d.stats().runtime.local;
            format!(
                "rank {}: lifts {} holds {} busy releases {}",
                d.rank(),
                l.boost_lifts,
                l.boost_holds,
                l.busy_releases
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Every rank agrees `rounds` times while a thread bound to rank 0's CPU
/// broadcasts from rank 0 every `every` (paced, spinning meanwhile, as a
/// computing rank), rank 0's own caller bound there too, and ranks 1 and 2
/// share the other CPU. Every agreement is decided with nobody failed,
/// and no rank is ever declared. Over the fabric and through the host's
/// segment. Nothing to check on one CPU, or where `SCHED_FIFO` is refused
/// (nothing is lifted or held).
pub fn agree_while_rank_0_broadcasts(every: Duration, rounds: usize) {
    let cpus = allowed_cpus();
    let (Some(&home), Some(&away)) = (cpus.first(), cpus.get(1)) else {
        eprintln!("one CPU only: nothing to bind apart");
        return;
    };
    let mut modes = vec![LocalMode::Off];
    if ffd::node::exit_word_probe().is_ok() {
        modes.push(LocalMode::Auto);
    }
    for local in modes {
        let detectors = start(local, home, away);
        let sched = detectors[0].stats().sched;
        if sched != "boost" {
            eprintln!("SCHED_FIFO refused here ({sched}): nothing is held");
            return;
        }
        let done = AtomicBool::new(false);
        let sent = AtomicU64::new(0);
        thread::scope(|s| {
            s.spawn(|| {
                bind_to(home);
                while !done.load(Ordering::Relaxed) {
                    let next = Instant::now() + every;
                    detectors[0].broadcast(b"x").expect("broadcast");
                    sent.fetch_add(1, Ordering::Relaxed);
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
        assert!(sent.load(Ordering::Relaxed) > 0, "{local:?}: nothing sent");
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
