//! The Engine's hot paths allocate nothing: an idle rank's deadline step
//! and the drain of its `WriteHeartbeat` (every period, on the progress
//! thread), an idle modelled check (the simulator's case), and a duplicate
//! notice (its tag checked, its sender's replay window moved). Counted by a global allocator that forwards to the system's
//! and counts the calls made on the current thread.
//!
//! The `unsafe impl GlobalAlloc` below is the only `unsafe` in the
//! protocol crate's tree, test-only: an allocator can only be written
//! that way. The library itself says `#![forbid(unsafe_code)]`.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ffd_protocol::ranks::fold_digest;
use ffd_protocol::wire::Encoder;
use ffd_protocol::{Engine, EngineConfig, Input, Output, Rank, SlotReading, slot_value};
use support::{Job, at, deliver_from, drain, drained};

thread_local! {
    /// Allocation calls (alloc, alloc_zeroed, realloc) on this thread.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

struct CountingAllocator;

fn count_one() {
    // A const-initialised Cell<u64> has no destructor and never
    // allocates; `try_with` only fails during thread teardown.
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every method forwards its arguments unchanged to `System`,
// which upholds the `GlobalAlloc` contract; counting touches only a
// thread-local integer (no allocation, no panic, no reentrancy).
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's contract for `alloc_zeroed` is passed on as is.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: `ptr` came from `System` (every allocation here does),
        // and the caller's contract for `realloc` is passed on as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Allocation calls made on this thread while `f` runs.
fn allocations_in<R>(f: impl FnOnce() -> R) -> (u64, R) {
    let before = ALLOCATIONS.with(Cell::get);
    let r = f();
    (ALLOCATIONS.with(Cell::get) - before, r)
}

const KEY: u64 = 0x0A11_0C47_10E5;

const JOB: Job = Job::new(KEY, [0xA1; 32]);
const N: u32 = 4096;
const ME: Rank = 100;
/// A live rank far from `ME` on the ring, the sender of every notice.
const SENDER: Rank = 2000;

/// Failures far from `ME` and `SENDER` on the ring: nobody mends.
fn known_failures() -> Vec<Rank> {
    (0..50).map(|i| 3000 + 7 * i).collect()
}

/// A notice from `SENDER` to `ME` with sequence number `seq`.
fn notice(failed: &[Rank], seq: u64) -> Vec<u8> {
    JOB.seal_numbered(
        &Encoder::new(KEY, SENDER).notice(SENDER, 0, failed, &[]),
        seq,
        ME,
    )
}

/// Rank `ME` of `N` (ring by rank) knowing `known_failures()`.
fn engine() -> Engine {
    knowing_failures(JOB.engine(EngineConfig::default(), N, ME))
}

/// [`engine`] with modelled heartbeats.
fn checker() -> Engine {
    knowing_failures(JOB.checker(EngineConfig::default(), N, ME))
}

/// `e`, its first outputs drained, once it learned 50 failures.
fn knowing_failures(e: Engine) -> Engine {
    let mut e = drained(e);
    deliver_from(&mut e, at(1), SENDER, &notice(&known_failures(), 1));
    assert_eq!(e.epoch(), 50);
    assert_eq!(e.generation(), 0, "nobody mended");
    e
}

/// `steps` deadline steps with a live emitter (its slot moves each time);
/// returns the `WriteHeartbeat`s drained. Allocates nothing itself.
fn idle_steps(e: &mut Engine, counter: &mut u16, steps: usize) -> usize {
    let digest = fold_digest(e.digest());
    let mut beats = 0;
    for _ in 0..steps {
        let t = e.next_deadline().expect("an idle rank has a deadline");
        *counter += 1;
        let value = slot_value(e.generation(), digest, *counter);
        e.handle_timeout(t, &SlotReading(value));
        while let Some(out) = e.poll_output() {
            assert!(
                matches!(out, Output::WriteHeartbeat { .. }),
                "an idle step only beats: {out:?}"
            );
            beats += 1;
        }
    }
    beats
}

#[test]
fn an_idle_heartbeat_period_allocates_nothing() {
    let mut e = engine();
    let mut counter = 0;
    // Past the start-up grace, into the steady state.
    idle_steps(&mut e, &mut counter, 200);
    let checks = e.stats().observation.slot_checks;
    let (allocations, beats) = allocations_in(|| idle_steps(&mut e, &mut counter, 1000));
    assert!(beats >= 800, "the steps beat ({beats} heartbeats)");
    assert!(
        e.stats().observation.slot_checks > checks,
        "the steps checked the slot"
    );
    assert_eq!(allocations, 0, "1000 idle deadline steps allocated");
    assert_eq!(e.epoch(), 50, "nobody declared");
}

#[test]
fn an_idle_modelled_check_allocates_nothing() {
    let mut e = checker();
    drain(&mut e);
    let mut counter = 0;
    idle_steps(&mut e, &mut counter, 50);
    let checks = e.stats().observation.slot_checks;
    let (allocations, beats) = allocations_in(|| idle_steps(&mut e, &mut counter, 200));
    assert_eq!(beats, 0, "modelled mode writes no heartbeat");
    assert_eq!(e.stats().observation.slot_checks - checks, 200);
    assert_eq!(allocations, 0, "200 modelled checks allocated");
}

#[test]
fn a_duplicate_notice_allocates_nothing_and_a_new_one_does() {
    let mut e = engine();
    let now = at(2);
    // The same news in 100 messages (a replayed message would be dropped
    // before it is read).
    let duplicates: Vec<Vec<u8>> = (2..102)
        .map(|seq| notice(&known_failures()[7..8], seq))
        .collect();
    let fresh = notice(&[2500], 102);
    let (allocations, ()) = allocations_in(|| {
        for duplicate in &duplicates {
            e.handle(
                now,
                Input::Message {
                    from: Some(SENDER),
                    bytes: duplicate,
                },
            )
            .expect("accepted");
            assert!(e.poll_output().is_none(), "a duplicate changes nothing");
        }
    });
    assert_eq!(e.stats().messages.duplicate_notices, 100);
    assert_eq!(allocations, 0, "100 duplicate notices allocated");
    // The counter does see the Engine's allocations: a new failure is
    // reported and forwarded.
    let (allocations, outs) = allocations_in(|| {
        e.handle(
            now,
            Input::Message {
                from: Some(SENDER),
                bytes: &fresh,
            },
        )
        .expect("accepted");
        drain(&mut e)
    });
    assert!(outs.len() > 1, "reported and forwarded: {outs:?}");
    assert!(allocations > 0, "a new notice's outputs are allocated");
}
