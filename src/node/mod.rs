//! Same-host watching's system edge (`docs/design.md` §4.12 "Hosts"): process
//! file descriptors (pidfd) that turn another process's exit into a
//! readable fd, exit words (robust futexes in the host's segment) that
//! turn it into a wake-up before the kernel tears the process down, an
//! epoll set that joins both to the progress thread's wake socket, the
//! per-host shared-memory segment of wake-up counters and its notice
//! board (failures posted for every local rank at once), the monotonic
//! clock those counters carry, and the progress thread's scheduling policy
//! (`FFD_SCHED`); and, process-wide, which process a detector belongs to
//! (a `fork()`ed child holds only a copy of its parent's); and the
//! agreement area's bell that blocked agreement callers sleep on; and
//! the mailboxes that carry same-host messages; and the idle wait of a
//! progress thread with no fabric endpoint (`ppoll` on its wake fd).
//!
//! Owns: `pidfd_open`, the epoll set, `shm_open`/`mmap`/`shm_unlink` of the
//! segment and its layout, `set_robust_list`/`futex_waitv` and the
//! exit-word threads, `clock_gettime(CLOCK_MONOTONIC)`,
//! `sched_setscheduler` and `sched_setaffinity` of the calling thread and
//! (a [`Boost`]'s lift) of the progress thread, the process's fork
//! handler (`pthread_atfork`); every
//! `unsafe` block here carries a `// SAFETY:` line. Must not: decide who
//! failed (the Engine does, from what the runtime hands it), or block the
//! progress thread: every call it makes here returns at once (only the
//! exit-word threads and agreement callers wait).

mod bell;
mod board;
mod doorbell;
mod exit_word;
mod fork;
mod mailbox;
mod netns;
mod pidfd;
mod sched;
mod segment;
mod wait;

pub use bell::{Bells, bells as agree_bells, ring as ring_agree_bell, wait as wait_agree_bells};
pub use board::{
    BoardReader, post as post_on_board, readers as board_readers,
    readers_changes as board_readers_changes,
};
pub use doorbell::{Doorbell, Knocker, door_name};
pub use exit_word::{
    ExitWordUnavailable, ExitWords, MAX_HELD, WordEvent, exit_word_probe, watchers_of,
};
pub use fork::Owner;
pub use mailbox::{MailReader, Posted, door_open, post as post_mail, ring as ring_mail, set_door};
pub use netns::{Namespaces, PrivateNetwork, enter_private_network};
pub use pidfd::{ExitWatch, PidFd, PidfdUnavailable, pidfd_probe};
pub use sched::{Boost, FIFO_PRIORITY, fifo_refusal, set_current_thread_fifo, thread_cpu_ns};
pub use segment::{
    AGREE_RECORD_HEAD, AGREE_ROUNDS, AgreeRecord, HostSegment, SegmentError, mail_capacity,
    segment_name,
};
pub use wait::wait_readable;

/// Now on `CLOCK_MONOTONIC`, in ns: the clock every process of a host
/// shares (Rust's `Instant` reads the same clock on Linux), so a wake-up
/// time written by one process means the same instant to another.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Clock `clock` now, in ns; 0 if it cannot be read.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime writes
    // only `ts`, and fails (checked) for a clock that does not exist.
    let ret = unsafe { libc::clock_gettime(clock, &mut ts) };
    if ret != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}
