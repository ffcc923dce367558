//! Which process a detector belongs to, so that a `fork()`ed child of it
//! can tell it holds only a copy: the progress thread, the exit-word
//! threads and every fabric object they drive stay with the parent (a
//! child has one thread), while their memory, the host's shared segment
//! and every descriptor are inherited as they were at the fork.
//!
//! Owns: the process's fork handler (`pthread_atfork`, registered once)
//! and the count of forks it saw. Must not: do anything in the child's
//! handler but one atomic add (it runs in a child of a multi-threaded
//! process, where only async-signal-safe work is allowed).
//!
//! Why a fork count and not only `getpid()`: the liveness queries are a
//! few atomic loads and embedders call them on hot paths; `getpid()` is a
//! system call on every call (glibc caches nothing since 2.25: about
//! 210–250 ns each on the 2-core development machine, measured with a
//! C loop of 2·10⁶ calls), the count is one load. A child made without the
//! fork handlers (a raw `clone` system call, glibc's `_Fork`) is not seen
//! by the count, so [`Owner::is_this_process_checked`] also compares the
//! pid; the calls that make a system call anyway (broadcast, agreements,
//! shutdown) use it.

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Forks this process descends through since the handler was registered
/// (bumped in each child).
static FORKS: AtomicU64 = AtomicU64::new(0);
/// Whether the handler is registered: if `pthread_atfork` ever failed,
/// only the pid tells a child.
static COUNTED: AtomicBool = AtomicBool::new(false);
static REGISTER: Once = Once::new();

extern "C" fn count_fork_in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// The process a detector was started in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pid: u32,
    forks: u64,
}

impl Owner {
    /// This process, now (registers the fork handler, once per process).
    pub fn this_process() -> Owner {
        REGISTER.call_once(|| {
            // SAFETY: the handler is a plain `extern "C" fn` of this
            // library that only adds to an atomic. In a shared library,
            // glibc's `pthread_atfork` (from libc_nonshared.a) records
            // this object's `__dso_handle`, so the handler is removed if
            // the library is unloaded.
            let rc = unsafe { libc::pthread_atfork(None, None, Some(count_fork_in_child)) };
            COUNTED.store(rc == 0, Ordering::Release);
        });
        Owner {
            pid: std::process::id(),
            forks: FORKS.load(Ordering::Acquire),
        }
    }

    /// The pid of the process that holds the detector.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether this is still the owning process (not a `fork()`ed child of
    /// it): one atomic load, for lock-free queries.
    pub fn is_this_process(&self) -> bool {
        if COUNTED.load(Ordering::Acquire) {
            FORKS.load(Ordering::Relaxed) == self.forks
        } else {
            std::process::id() == self.pid
        }
    }

    /// As [`is_this_process`](Self::is_this_process), and the pid too, so
    /// that a child made without fork handlers is seen as well: a system
    /// call, for the calls that make one anyway.
    pub fn is_this_process_checked(&self) -> bool {
        self.is_this_process() && std::process::id() == self.pid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_not_the_owner_and_the_parent_still_is() {
        let owner = Owner::this_process();
        assert!(owner.is_this_process() && owner.is_this_process_checked());
        assert_eq!(owner.pid(), std::process::id());
        // SAFETY: the child only loads atomics, makes system calls (getpid)
        // and leaves with _exit: nothing that could wait for a lock another
        // thread of the parent held at the fork.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
        if child == 0 {
            let code = match (owner.is_this_process(), owner.is_this_process_checked()) {
                (false, false) => 0,
                _ => 1,
            };
            // A child's detector of its own is its owner's.
            let mine = Owner::this_process();
            let code = code | if mine.is_this_process_checked() { 0 } else { 2 };
            // SAFETY: ends the child without running the parent's atexit
            // handlers or the test harness's code.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: `child` is our child; `status` is valid for a write. The
        // child does no more than the above, so this returns promptly.
        let reaped = unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(reaped, child);
        assert!(libc::WIFEXITED(status), "status {status:#x}");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "1: the child took itself for the owner; 2: its own owner was not itself"
        );
        assert!(owner.is_this_process() && owner.is_this_process_checked());
    }
}
