//! An embedder's thread bound to its progress thread's CPU, as an MPI rank
//! is bound to a core, sends commands while agreements lift and hold that
//! thread at `SCHED_FIFO` (`FFD_SCHED=boost`, docs/design.md §6 "Runtime").
//! The thread must never spin on a half-sent command: at `SCHED_FIFO` it
//! would keep the sender, at the normal policy on the same CPU, from ever
//! finishing, and its rank would go silent and be declared (176.8 ms seen
//! under `ffd run` with `std::sync::mpsc`). Alone in its test binary: it
//! pins threads to CPUs.

mod group;
#[path = "group/pinned.rs"]
mod pinned;
mod prereq;

use std::time::Duration;

use pinned::agree_while_rank_0_broadcasts;

/// Agreements each rank calls, one after the other.
const ROUNDS: usize = 150;
/// How often the bound thread sends a command (a broadcast): often
/// enough that the progress thread's wake-ups fall inside sends (with
/// `std::sync::mpsc`, 2 runs of 8 failed, rank 0 declared; with the queue
/// of `src/runtime/commands.rs`, 0 of 22). Faster, the broadcasts' two
/// receivers sharing a CPU are what is tested: `agree_flood.rs`.
const EVERY: Duration = Duration::from_micros(100);

/// Every rank agrees `ROUNDS` times while a thread bound to rank 0's CPU
/// broadcasts from rank 0 throughout; rank 0's own caller is bound there
/// too. Every agreement is decided with nobody failed, and no rank is
/// ever declared: rank 0's thread kept running its turns (the others,
/// on another CPU, watch its counter). Over the fabric and through the
/// host's segment.
#[test]
fn commands_from_the_progress_threads_cpu_never_stall_it_during_agreements() {
    agree_while_rank_0_broadcasts(EVERY, ROUNDS);
}
