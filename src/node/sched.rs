//! The calling thread's scheduling policy (`FFD_SCHED`), and the lift of
//! the progress thread while it handles a same-host exit.
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
//!
//! A [`Boost`] gives a same-host exit that speed without the per-period
//! cost (`FFD_SCHED=boost`, the default): the exit-word threads run at
//! `SCHED_FIFO` on every allowed CPU (they sleep until an exit or a
//! notice, so they cost nothing per period); the one woken lifts the
//! progress thread to `SCHED_FIFO` and to every allowed CPU before it
//! rings it, and the progress thread lowers itself back to its policy and
//! CPU before it next sleeps. The CPU matters as much as the policy: the
//! kernel wakes an exit's watchers from the dying thread, on its CPU, and
//! tears the process down there for a few ms without a preemption point
//! on a `PREEMPT_NONE` kernel; a thread that may run elsewhere is pulled
//! to a free CPU by the real-time balancer, one pinned there waits.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// The real-time priority asked for: the lowest, above every normal
/// thread and below every real-time thread of the host.
pub const FIFO_PRIORITY: i32 = 1;

/// Moves the calling thread (only it) to `SCHED_FIFO` at
/// [`FIFO_PRIORITY`]. Fails with `EPERM` without `CAP_SYS_NICE` or an
/// `RLIMIT_RTPRIO` of at least 1, and leaves the policy as it was.
pub fn set_current_thread_fifo() -> io::Result<()> {
    set_policy(0, libc::SCHED_FIFO, FIFO_PRIORITY)
}

/// Moves the calling thread back to the normal policy (`SCHED_OTHER`,
/// nice unchanged). Always allowed.
pub fn set_current_thread_normal() -> io::Result<()> {
    set_policy(0, libc::SCHED_OTHER, 0)
}

/// The calling thread's CPU time so far (`CLOCK_THREAD_CPUTIME_ID`), in
/// ns; 0 if the clock cannot be read. A system call (the vDSO serves only
/// the wall clocks): read it seldom.
pub fn thread_cpu_ns() -> u64 {
    super::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn set_policy(tid: libc::pid_t, policy: libc::c_int, priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `tid` is 0 (the calling thread) or a thread of this process
    // (the progress thread, alive while its exit-word threads run, which
    // it joins before it ends, and until it retires its Boost, which waits
    // for the lifts under way and makes later ones do nothing); `param` is
    // only read; the call changes that thread's policy or fails and
    // changes nothing.
    let ret = unsafe { libc::sched_setscheduler(tid, policy, &param) };
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Every CPU: the kernel narrows an affinity to the CPUs the thread's
/// cpuset allows (`sched_setaffinity(2)`), so this is "wherever the
/// process's cgroup lets it run" (hwloc's allowed set, as `FFD_CORE=auto`
/// chooses from), which may be wider than a binding by `taskset` or the
/// launcher.
fn every_cpu() -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is a plain bit array, all-zero the empty set;
    // CPU_SET writes bit `cpu` < CPU_SETSIZE, inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(cpu, &mut set);
        }
        set
    }
}

fn set_affinity(tid: libc::pid_t, set: &libc::cpu_set_t) -> io::Result<()> {
    // SAFETY: `tid` as in `set_policy`; the kernel reads
    // size_of::<cpu_set_t>() bytes from `set`.
    let ret = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), set) };
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn affinity(tid: libc::pid_t) -> io::Result<libc::cpu_set_t> {
    // SAFETY: all-zero is a valid (empty) cpu_set_t; `tid` as in
    // `set_policy`; the kernel writes at most size_of::<cpu_set_t>() bytes
    // into `set`.
    let (ret, set) = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let ret = libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        (ret, set)
    };
    if ret == 0 {
        Ok(set)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The progress thread's lift while it handles a same-host exit (module
/// doc). Made on the progress thread, once it is placed and under its
/// policy; shared with its exit-word threads.
pub struct Boost {
    /// The progress thread.
    tid: libc::pid_t,
    /// Raise its policy to `SCHED_FIFO` (`boost`); `false` when it runs
    /// under `SCHED_FIFO` already (`fifo`) and only its CPUs widen.
    raise_policy: bool,
    /// Its own CPUs (its placement), restored by [`Boost::lower`]; `None`:
    /// a lift leaves its CPUs alone (`FFD_CORE` named one).
    home: Option<libc::cpu_set_t>,
    /// Lifted since the progress thread last lowered itself.
    lifted: AtomicBool,
    /// Lifts so far (stats).
    lifts: AtomicU64,
    /// Held at `SCHED_FIFO` while an agreement is under way here
    /// ([`Boost::hold`]); touched by the progress thread only.
    held: AtomicBool,
    /// Holds so far (stats).
    holds: AtomicU64,
    /// The progress thread is ending or has ended: no more lifts (its
    /// thread id may be another thread's by now).
    retired: AtomicBool,
    /// Lifts under way (their system calls name the thread's id):
    /// [`Boost::retire`] waits for them.
    lifting: AtomicU32,
}

impl std::fmt::Debug for Boost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Boost")
            .field("tid", &self.tid)
            .field("raise_policy", &self.raise_policy)
            .field("lifts", &self.lifts.load(Ordering::Relaxed))
            .field("holds", &self.holds.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Boost {
    /// The lift of the calling (progress) thread. `raise_policy`: it runs
    /// under the normal policy and is to be raised to `SCHED_FIFO` while
    /// lifted; `widen`: it may run on every allowed CPU while lifted. Fails as [`set_current_thread_fifo`] does when the host
    /// refuses real-time scheduling (checked here, by raising and lowering
    /// the calling thread once, so a refusal is known at start-up and not
    /// at the first exit).
    pub fn for_current_thread(raise_policy: bool, widen: bool) -> io::Result<Boost> {
        if raise_policy {
            set_current_thread_fifo()?;
            set_current_thread_normal()?;
        }
        // SAFETY: gettid has no preconditions and cannot fail.
        let tid = unsafe { libc::gettid() };
        Ok(Boost {
            tid,
            raise_policy,
            home: if widen { Some(affinity(0)?) } else { None },
            lifted: AtomicBool::new(false),
            lifts: AtomicU64::new(0),
            held: AtomicBool::new(false),
            holds: AtomicU64::new(0),
            retired: AtomicBool::new(false),
            lifting: AtomicU32::new(0),
        })
    }

    /// Readies the calling exit-word thread: `SCHED_FIFO` (inherited under
    /// `fifo`, set here under `boost`) on every allowed CPU.
    pub fn ready_exit_word_thread(&self) -> io::Result<()> {
        set_current_thread_fifo()?;
        set_affinity(0, &every_cpu())
    }

    /// Lifts the progress thread: every allowed CPU, then `SCHED_FIFO`.
    /// Called by an exit-word thread before it rings the progress thread,
    /// or by an embedder's thread before its agreement call wakes it; the
    /// progress thread lowers itself before it next sleeps. Nothing once
    /// it is retired ([`Boost::retire`]). The lift is counted and
    /// marked after its calls and before the ring, so a lift that races a
    /// lowering is followed by another turn of the progress thread, and
    /// that turn lowers it: the thread always ends up lowered. A refused
    /// call leaves the thread as it is.
    pub fn lift(&self) {
        // Counted before the check (both SeqCst): either this lift sees the
        // thread retired, or `retire` sees the lift and waits for it.
        self.lifting.fetch_add(1, Ordering::SeqCst);
        if self.retired.load(Ordering::SeqCst) {
            self.lifting.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        let widened = self.home.is_some() && set_affinity(self.tid, &every_cpu()).is_ok();
        let raised =
            self.raise_policy && set_policy(self.tid, libc::SCHED_FIFO, FIFO_PRIORITY).is_ok();
        self.lifting.fetch_sub(1, Ordering::SeqCst);
        if widened || raised {
            self.lifts.fetch_add(1, Ordering::AcqRel);
            self.lifted.store(true, Ordering::Release);
        }
    }

    /// On the progress thread, before it sleeps: back to its own policy
    /// and CPUs if it was lifted, unless a lift came after `seen` (the
    /// [`Boost::lifts`] it read before it took what the exit-word threads
    /// handed it): that lift's exit is not handled yet, and its ring
    /// brings the thread round again at once, still lifted. One atomic
    /// load when nothing lifted it.
    pub fn lower_unless_lifted_since(&self, seen: u64) {
        if self.lifts.load(Ordering::Acquire) == seen {
            self.lower();
        }
    }

    /// Back to its own policy and CPUs if it was lifted (the progress
    /// thread, also when it ends). A hold ([`Boost::hold`]) keeps the
    /// policy: only the CPUs come back.
    pub fn lower(&self) {
        if self.lifted.load(Ordering::Acquire) && self.lifted.swap(false, Ordering::AcqRel) {
            if self.raise_policy && !self.held.load(Ordering::Acquire) {
                let _ = set_current_thread_normal();
            }
            if let Some(home) = &self.home {
                let _ = set_affinity(0, home);
            }
        }
    }

    /// Whether a lift or hold raises the thread to `SCHED_FIFO` (`boost`);
    /// `false` when it runs real-time already (`fifo`): nothing to hold.
    pub fn raises_policy(&self) -> bool {
        self.raise_policy
    }

    /// How many times the progress thread was lifted.
    pub fn lifts(&self) -> u64 {
        self.lifts.load(Ordering::Acquire)
    }

    /// On the progress thread, before it sleeps: `agreeing` (an agreement
    /// or a view change is under way here) holds it at `SCHED_FIFO` on its
    /// own CPUs until it is not, so that the messages that finish it (the
    /// decision coming down the tree) wake it ahead of the host's normal
    /// threads, the embedder's among them; the policy goes back once no
    /// agreement is under way, unless a lift holds it (then
    /// [`Boost::lower`] does). One atomic load when nothing changes; under
    /// `fifo` (the policy is real-time already) nothing to do. A refused
    /// call leaves the thread as it is and is not counted.
    pub fn hold(&self, agreeing: bool) {
        if !self.raise_policy || agreeing == self.held.load(Ordering::Acquire) {
            return;
        }
        if agreeing {
            if set_current_thread_fifo().is_ok() {
                self.held.store(true, Ordering::Release);
                self.holds.fetch_add(1, Ordering::AcqRel);
            }
        } else {
            self.held.store(false, Ordering::Release);
            if !self.lifted.load(Ordering::Acquire) {
                let _ = set_current_thread_normal();
            }
        }
    }

    /// On the progress thread as it ends, however it ends: no lift from
    /// now on (an embedder's thread may still call), and none still under
    /// way (waited for: two system calls at most), so that no lift names
    /// this thread's id once it is gone. Lower it after this.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
        // Asleep, not yielding: a lifter on this thread's CPU at the
        // normal policy, preempted by the lift it made, must get to run
        // and end it while this thread is at `SCHED_FIFO`.
        while self.lifting.load(Ordering::SeqCst) != 0 {
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
    }

    /// How many times the progress thread was held for an agreement.
    pub fn holds(&self) -> u64 {
        self.holds.load(Ordering::Acquire)
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

    /// The thread's CPU clock moves while it computes and stands nearly
    /// still while it sleeps (the agreement hold judges a thread busy by
    /// it, `runtime/progress/hold.rs`).
    #[test]
    fn the_thread_cpu_clock_counts_computing_not_sleeping() {
        let start = thread_cpu_ns();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        // 5 ms of CPU, however long the machine takes to give it.
        while thread_cpu_ns().saturating_sub(start) < 5_000_000 {
            assert!(
                std::time::Instant::now() < deadline,
                "the clock stood still"
            );
            std::hint::spin_loop();
        }
        let before = thread_cpu_ns();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let slept = thread_cpu_ns().saturating_sub(before);
        assert!(slept < 25_000_000, "{slept} ns of CPU while asleep 50 ms");
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

    fn one_cpu(cpu: usize) -> libc::cpu_set_t {
        // SAFETY: all-zero is the empty set; `cpu` < CPU_SETSIZE.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            set
        }
    }

    fn cpus(set: &libc::cpu_set_t) -> Vec<usize> {
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `cpu` < CPU_SETSIZE; CPU_ISSET only reads the set.
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, set) })
            .collect()
    }

    /// The first CPU this process may use (the "progress thread" is
    /// pinned there).
    fn first_cpu() -> usize {
        cpus(&affinity(0).unwrap())[0]
    }

    /// The CPUs a thread gets when it asks for every CPU (the kernel
    /// narrows the request to the cpuset), asked on a thread of its own.
    fn widest() -> Vec<usize> {
        std::thread::spawn(|| {
            set_affinity(0, &every_cpu()).unwrap();
            cpus(&affinity(0).unwrap())
        })
        .join()
        .unwrap()
    }

    /// What a lifted thread looks like: (SCHED_FIFO, its CPUs).
    type Seen = (bool, Vec<usize>);

    fn seen() -> Seen {
        (
            current_thread_is_fifo().unwrap(),
            cpus(&affinity(0).unwrap()),
        )
    }

    /// Runs a "progress thread" pinned to [`first_cpu`] with a Boost made by
    /// `make`; another thread lifts it once; returns what it saw before,
    /// lifted, lowered, lowered again, and the lifts counted (`None`:
    /// refused, checked inside).
    fn lift_once(make: fn() -> io::Result<Boost>) -> Option<(Seen, Seen, Seen, Seen, u64)> {
        let (boost_tx, boost_rx) = std::sync::mpsc::channel();
        let (lifted_tx, lifted_rx) = std::sync::mpsc::channel::<()>();
        let progress = std::thread::spawn(move || {
            set_affinity(0, &one_cpu(first_cpu())).unwrap();
            let boost = match make() {
                Ok(b) => std::sync::Arc::new(b),
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
                    assert!(
                        !current_thread_is_fifo().unwrap(),
                        "a refusal changes nothing"
                    );
                    boost_tx.send(None).unwrap();
                    return None;
                }
            };
            let before = seen();
            boost_tx.send(Some(std::sync::Arc::clone(&boost))).unwrap();
            lifted_rx.recv().unwrap();
            let lifted = seen();
            boost.lower_unless_lifted_since(0);
            assert_eq!(seen(), lifted, "a lift after what it saw keeps it lifted");
            boost.lower_unless_lifted_since(boost.lifts());
            let lowered = seen();
            boost.lower();
            let again = seen();
            Some((before, lifted, lowered, again, boost.lifts()))
        });
        if let Some(boost) = boost_rx.recv().unwrap() {
            boost.lift();
            lifted_tx.send(()).unwrap();
        }
        progress.join().unwrap()
    }

    #[test]
    fn a_lift_raises_and_widens_the_progress_thread_and_lowering_restores_both() {
        let every = widest();
        let Some((before, lifted, lowered, again, lifts)) =
            lift_once(|| Boost::for_current_thread(true, true))
        else {
            return;
        };
        assert_eq!(
            before,
            (false, vec![first_cpu()]),
            "normal and pinned, the check undone"
        );
        assert_eq!(
            lifted,
            (true, every.clone()),
            "SCHED_FIFO on every allowed CPU"
        );
        assert_eq!(lowered, before, "back to its policy and CPU");
        assert_eq!(again, before, "a second lowering changes nothing");
        assert_eq!(lifts, 1);
    }

    #[test]
    fn under_fifo_a_lift_only_widens_and_without_widen_only_raises() {
        let every = widest();
        let fifo = || {
            set_current_thread_fifo()?;
            Boost::for_current_thread(false, true)
        };
        if let Some((before, lifted, lowered, _, lifts)) = lift_once(fifo) {
            assert_eq!(before, (true, vec![first_cpu()]));
            assert_eq!(
                lifted,
                (true, every),
                "real-time already: only the CPUs widen"
            );
            assert_eq!(lowered, before, "still real-time, back on its CPU");
            assert_eq!(lifts, 1);
        }
        if let Some((before, lifted, lowered, _, _)) =
            lift_once(|| Boost::for_current_thread(true, false))
        {
            assert_eq!(before, (false, vec![first_cpu()]));
            assert_eq!(
                lifted,
                (true, vec![first_cpu()]),
                "FFD_CORE named a CPU: it stays there"
            );
            assert_eq!(lowered, before);
        }
    }

    /// A hold raises the calling thread's policy only (its CPU stays); a
    /// lift's lowering while held keeps the policy and restores the CPUs;
    /// the release lowers it; a retired Boost lifts nothing.
    #[test]
    fn an_agreement_hold_keeps_the_policy_through_a_lowering_until_released() {
        let outcome = std::thread::spawn(|| {
            set_affinity(0, &one_cpu(first_cpu())).unwrap();
            let boost = Boost::for_current_thread(true, true).ok()?;
            let pinned = vec![first_cpu()];
            boost.hold(true);
            let held = seen();
            boost.hold(true);
            boost.lift();
            boost.lower();
            let lowered_while_held = seen();
            boost.hold(false);
            let released = seen();
            boost.retire();
            boost.lift();
            let after_retire = seen();
            Some((
                pinned,
                [held, lowered_while_held, released, after_retire],
                (boost.holds(), boost.lifts()),
            ))
        })
        .join()
        .unwrap();
        let Some((pinned, [held, lowered, released, retired], counts)) = outcome else {
            return;
        };
        assert_eq!(held, (true, pinned.clone()), "held: FIFO on its own CPU");
        assert_eq!(lowered, (true, pinned.clone()), "a lowering keeps the hold");
        assert_eq!(released, (false, pinned.clone()), "released: normal");
        assert_eq!(retired, released, "retired: a lift changes nothing");
        assert_eq!(
            counts,
            (1, 1),
            "one hold (the second asked nothing), one lift"
        );
    }

    #[test]
    fn a_watcher_runs_real_time_on_every_allowed_cpu() {
        let every = widest();
        let outcome = std::thread::spawn(|| {
            set_affinity(0, &one_cpu(first_cpu())).unwrap();
            let boost = Boost::for_current_thread(true, true).ok()?;
            let watcher = std::thread::spawn(move || {
                boost.ready_exit_word_thread().unwrap();
                seen()
            });
            Some(watcher.join().unwrap())
        })
        .join()
        .unwrap();
        if let Some(watcher) = outcome {
            assert_eq!(watcher, (true, every));
        }
    }
}
