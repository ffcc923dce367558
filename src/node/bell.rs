//! The agreement area's bell (`runtime/host_agree.rs`): a futex word in
//! the host's segment that a rank bumps after it writes a contribution or
//! a decision, and that callers blocked in an agreement sleep on, beside
//! the notice board's bell (a failure posted there may be what they wait
//! for).
//!
//! Owns: the bump, the `FUTEX_WAKE` (skipped while nobody sleeps) and the
//! bounded `futex_waitv` of a caller. Must not: be used by the progress
//! thread to wait (it polls), or decide anything.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::exit_word::{waiter, wake};
use super::segment::HostSegment;

/// Bumps the agreement bell and wakes its sleepers, if any.
pub fn ring(segment: &HostSegment) {
    let (Some(bell), Some(sleepers)) = (segment.agree_bell(), segment.agree_sleepers()) else {
        return;
    };
    bell.fetch_add(1, Ordering::SeqCst);
    // SeqCst with the sleeper's increment below: either it sees the bell
    // moved, or this sees it asleep.
    if sleepers.load(Ordering::SeqCst) != 0 {
        wake(bell, false);
    }
}

/// The bells' values, to wait on once what they guard was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bells {
    agree: u32,
    board: u32,
}

/// Reads both bells (before looking at what they guard).
pub fn bells(segment: &HostSegment) -> Bells {
    Bells {
        agree: segment
            .agree_bell()
            .map_or(0, |b| b.load(Ordering::Acquire)),
        board: segment.board_bell().load(Ordering::Acquire),
    }
}

/// Sleeps until either bell moves from `seen` or `at_most` passes (or a
/// signal comes). Returns at once if the area has no bell.
pub fn wait(segment: &HostSegment, seen: Bells, at_most: Duration) {
    let (Some(bell), Some(sleepers)) = (segment.agree_bell(), segment.agree_sleepers()) else {
        return;
    };
    sleepers.fetch_add(1, Ordering::SeqCst);
    let waits = [
        waiter(bell, seen.agree, false),
        waiter(segment.board_bell(), seen.board, false),
    ];
    let now = super::monotonic_ns().saturating_add(at_most.as_nanos() as u64);
    let deadline = libc::timespec {
        tv_sec: (now / 1_000_000_000) as libc::time_t,
        tv_nsec: (now % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `waits` holds two valid entries for live 4-byte words of the
    // mapping; `deadline` is a valid absolute CLOCK_MONOTONIC time. The
    // kernel reads both and writes nothing; every error (EAGAIN: a bell
    // moved, ETIMEDOUT, EINTR) just ends the wait.
    unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            waits.as_ptr(),
            waits.len() as u32,
            0u32,
            &raw const deadline,
            libc::CLOCK_MONOTONIC,
        )
    };
    sleepers.fetch_sub(1, Ordering::AcqRel);
}
