//! Whether the agreement hold (`FFD_SCHED=boost`, `Boost::hold`) may keep
//! the progress thread at `SCHED_FIFO`: only while the thread uses at most
//! half of its CPU.
//!
//! Why: the hold is for wake-ups. A thread that sleeps between an
//! agreement's messages takes each at once, ahead of the host's normal
//! threads (docs/design.md §6 "Runtime", Agreements). A thread that is busy
//! (a flood of application payloads to forward and deliver) gains nothing
//! from it, being awake anyway, and at `SCHED_FIFO` it keeps every normal
//! thread of its CPU from running, other ranks' progress threads among
//! them. Measured (`tests/agree_flood.rs`: 3 ranks in one process, ranks 1
//! and 2 on one CPU, rank 0's embedder broadcasting every 20 µs while all
//! agree): rank 1, held while it waited for rank 2's part of an agreement,
//! ran 1.7 to 2.0 ms of every 2.2 ms, and rank 2, at the normal policy on
//! the same CPU, got the rest for 100 ms, too little to end the turn in
//! which it read its queue: no beat left it, and its observer declared it
//! (a timeout, confirmed by rank 1's vote), in about half the runs. At
//! `FFD_SCHED=normal` the same runs passed 14 of 14.
//!
//! The rule: the thread's CPU time is read once a [`WINDOW_NS`] (a system
//! call, only on the turns that would hold); a thread that used more than
//! half of the last window is not held (it runs at the normal policy and
//! shares its CPU by the kernel's fair share) until a window in which it
//! used less than a quarter: hysteresis, so that a thread sharing its CPU
//! fairly with another busy one (about half each) stays released. A busy
//! held thread keeps its CPU for at most a window and a turn.

/// How often the thread's share of its CPU is judged: a starved neighbour
/// waits at most this long (and a turn) for its CPU.
pub(super) const WINDOW_NS: u64 = 2_000_000;

/// The hold's verdict over the last window ([`HoldShare::admits`]).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct HoldShare {
    /// Start of the current window (`CLOCK_MONOTONIC`, ns), and the
    /// thread's CPU time then.
    window_start: u64,
    cpu_at_start: u64,
    /// The last window judged the thread busy: not held.
    released: bool,
    /// Times the thread was found busy and released (stats).
    releases: u64,
}

impl HoldShare {
    /// Whether the thread may be held now (`now_ns`, `CLOCK_MONOTONIC`);
    /// `cpu_ns` reads its CPU time, called only when a window has ended.
    /// The window spans the time since it was last judged, whatever the
    /// thread did meanwhile: after a stretch with no agreement the share
    /// is that of the stretch.
    pub(super) fn admits(&mut self, now_ns: u64, cpu_ns: impl FnOnce() -> u64) -> bool {
        let wall = now_ns.saturating_sub(self.window_start);
        if wall >= WINDOW_NS {
            let cpu = cpu_ns();
            let used = cpu.saturating_sub(self.cpu_at_start);
            if self.released {
                self.released = used.saturating_mul(4) >= wall;
            } else if used.saturating_mul(2) > wall {
                self.released = true;
                self.releases += 1;
            }
            self.window_start = now_ns;
            self.cpu_at_start = cpu;
        }
        !self.released
    }

    /// Times the thread was found busy and its hold given up.
    pub(super) fn releases(&self) -> u64 {
        self.releases
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Feeds `share` (CPU ns per wall ns) for `windows` windows starting at
    /// `*now`/`*cpu`; returns the verdicts at each window's end.
    fn run(h: &mut HoldShare, now: &mut u64, cpu: &mut u64, share: f64, windows: u32) -> Vec<bool> {
        (0..windows)
            .map(|_| {
                *now += WINDOW_NS;
                *cpu += (WINDOW_NS as f64 * share) as u64;
                let c = *cpu;
                h.admits(*now, || c)
            })
            .collect()
    }

    /// An idle thread (an agreement's few messages) stays held; a busy one
    /// is released at the end of its first busy window, stays released
    /// while it takes about half (a fair share beside another busy
    /// thread), and is held again once it uses less than a quarter.
    #[test]
    fn a_busy_thread_is_released_until_it_is_nearly_idle_again() {
        let (mut now, mut cpu) = (10 * MS, 0);
        let mut h = HoldShare::default();
        assert!(h.admits(now, || 0), "first turn: held");
        assert_eq!(run(&mut h, &mut now, &mut cpu, 0.05, 3), [true; 3]);
        assert_eq!(run(&mut h, &mut now, &mut cpu, 0.95, 1), [false]);
        assert_eq!(h.releases(), 1);
        assert_eq!(run(&mut h, &mut now, &mut cpu, 0.5, 4), [false; 4]);
        assert_eq!(run(&mut h, &mut now, &mut cpu, 0.3, 2), [false; 2]);
        assert_eq!(run(&mut h, &mut now, &mut cpu, 0.1, 1), [true]);
        assert_eq!(run(&mut h, &mut now, &mut cpu, 0.45, 2), [true; 2]);
        assert_eq!(run(&mut h, &mut now, &mut cpu, 0.9, 1), [false]);
        assert_eq!(h.releases(), 2);
    }

    /// Inside a window the verdict stands and the CPU time is not read;
    /// a long stretch without turns is one window, judged by its share.
    #[test]
    fn the_cpu_time_is_read_once_a_window() {
        let mut h = HoldShare::default();
        let reads = std::cell::Cell::new(0);
        let at = |h: &mut HoldShare, now: u64, cpu: u64| {
            h.admits(now, || {
                reads.set(reads.get() + 1);
                cpu
            })
        };
        assert!(at(&mut h, 50 * MS, 0));
        assert!(at(&mut h, 50 * MS + WINDOW_NS / 2, 9 * MS));
        assert!(!at(&mut h, 50 * MS + WINDOW_NS, 2 * MS), "all of it");
        assert!(!at(&mut h, 50 * MS + WINDOW_NS + 1, 2 * MS));
        // 100 ms with 4 ms of CPU: idle, held again.
        assert!(at(&mut h, 150 * MS + WINDOW_NS, 6 * MS));
        assert_eq!(reads.get(), 3);
    }
}
