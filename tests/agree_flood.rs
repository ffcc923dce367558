//! Application payloads faster than they are comfortably taken, while
//! agreements hold the progress threads at `SCHED_FIFO` (`FFD_SCHED=boost`,
//! docs/design.md §6 "Runtime"): a held thread busy with them must not keep
//! another rank's thread on its CPU from running. Alone in its test
//! binary: it pins threads to CPUs.

mod group;
#[path = "group/pinned.rs"]
mod pinned;
mod prereq;

use std::time::Duration;

use pinned::agree_while_rank_0_broadcasts;

/// Agreements each rank calls, one after the other.
const ROUNDS: usize = 150;
/// How often rank 0's embedder broadcasts: 50,000 payloads a second, each
/// forwarded and delivered by ranks 1 and 2, which share one CPU.
const EVERY: Duration = Duration::from_micros(20);

/// Ranks 1 and 2 share a CPU and both take rank 0's flood of payloads;
/// each agreement holds their threads at `SCHED_FIFO` until it is decided
/// there. Every agreement is decided with nobody failed, and nobody is
/// declared: a held thread that is busy gives up the hold
/// (`src/runtime/progress/hold.rs`), so the other rank's thread on its CPU
/// keeps beating. Without that, rank 1, held while it waited for rank 2's
/// part, took 1.7 to 2.0 ms of every 2.2 ms for 100 ms, rank 2 posted no
/// beat and its observer declared it: 5 of 10 runs failed (with the
/// release, 2 of 146, both within a minute under outside load).
#[test]
fn a_flood_of_payloads_during_agreements_starves_no_rank() {
    agree_while_rank_0_broadcasts(EVERY, ROUNDS);
}
