//! The calling thread's scheduling policy (`FFD_SCHED`).
//!
//! Under the normal policy a woken thread waits for the running one's
//! turn to end, up to a scheduler tick (4 ms here, `HZ=250`), when every
//! core is busy: with MPI ranks polling on every core, a progress thread
//! at a 1 ms period then beats late, and its observer judges late. At
//! `SCHED_FIFO` priority 1, the lowest real-time priority, its wake-up
//! preempts any normal thread at once. The thread sleeps between
//! deadlines, so it takes only its own few µs per period; the kernel's
//! real-time throttling (`sched_rt_runtime_us`, 95 % by default) bounds
//! it should it ever spin. Threads it creates inherit the policy (the
//! exit-word threads, which hand a same-host exit to it; so no
//! `SCHED_RESET_ON_FORK`, which would reset them too: the progress thread
//! starts no process).

use std::io;

/// The real-time priority asked for: the lowest, above every normal
/// thread and below every real-time thread of the host.
pub const FIFO_PRIORITY: i32 = 1;

/// Moves the calling thread (only it) to `SCHED_FIFO` at
/// [`FIFO_PRIORITY`]. Fails with `EPERM` without `CAP_SYS_NICE` or an
/// `RLIMIT_RTPRIO` of at least 1, and leaves the policy as it was.
pub fn set_current_thread_fifo() -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: FIFO_PRIORITY,
    };
    // SAFETY: pid 0 is the calling thread on Linux; `param` is a valid
    // sched_param that the call only reads; the call changes nothing but
    // that thread's policy, or fails and changes nothing.
    let ret = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Why `set_current_thread_fifo` failed, in words a user can act on.
pub fn fifo_refusal(e: &io::Error) -> String {
    if e.raw_os_error() == Some(libc::EPERM) {
        format!(
            "{e}: SCHED_FIFO needs CAP_SYS_NICE or an RLIMIT_RTPRIO of at least {FIFO_PRIORITY} \
             (`ulimit -r`)"
        )
    } else {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the calling thread runs under `SCHED_FIFO`.
    fn current_thread_is_fifo() -> io::Result<bool> {
        // SAFETY: pid 0 is the calling thread; the call reads its policy only.
        let policy = unsafe { libc::sched_getscheduler(0) };
        if policy < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(policy == libc::SCHED_FIFO)
    }

    #[test]
    fn fifo_applies_to_the_calling_thread_only_and_is_inherited_by_its_threads() {
        let outcome = std::thread::spawn(|| {
            let before = current_thread_is_fifo().unwrap();
            match set_current_thread_fifo() {
                Ok(()) => {
                    let child = std::thread::spawn(|| current_thread_is_fifo().unwrap())
                        .join()
                        .unwrap();
                    Some((before, current_thread_is_fifo().unwrap(), child))
                }
                Err(e) => {
                    // Unprivileged: refused, named, and nothing changed.
                    assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
                    assert!(fifo_refusal(&e).contains("CAP_SYS_NICE"));
                    assert!(!current_thread_is_fifo().unwrap());
                    None
                }
            }
        })
        .join()
        .unwrap();
        if let Some((before, after, child)) = outcome {
            assert!(!before, "a new thread starts under the normal policy");
            assert!(after, "the thread that asked runs under SCHED_FIFO");
            assert!(child, "a thread it creates inherits the policy");
        }
        assert!(
            !current_thread_is_fifo().unwrap(),
            "the test's own thread was not touched"
        );
    }
}
