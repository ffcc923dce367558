//! When an idle progress thread wakes: the plain check wake-ups of every
//! rank end on one grid of the host's monotonic clock, so a host's ranks
//! wake together, a few at each grid point, instead of one by one.
//!
//! Why (issue 35, the shim's noise at 32 ranks on 2 cores): an idle
//! non-leader's wake-up is one `ppoll` that timed out, the Engine's tick
//! and the counter store, no read of the completion queue; about half
//! its CPU is the wake-up itself (a bare `ppoll` loop costs as much), the
//! rest the loop's work on cold caches. 31 such threads waking
//! `checks_per_timeout` times per timeout at their own phases preempted
//! the application about 1,300 times a second, each time on its own. On
//! the grid the same wake-ups come in a few bursts per check interval: one
//! timer interrupt and one preemption of the application per burst.
//!
//! Bound: only a sleep that runs to within one grid step of a full tick
//! is extended (a plain tick of an idle rank: the same-host check
//! interval, `EngineConfig::local_check_interval`, or the publication of
//! the counters if that comes sooner); a shorter one (the
//! Engine's check at an emitter's expiry, a heartbeat period, a retry, an
//! agreement's poll, a leave) is left alone, and nothing is extended while
//! an agreement or view change is under way or sends wait. The completion
//! queue and the wake socket still end any sleep at once. So a check runs
//! at most one grid step (an eighth of the check interval, at most a
//! quarter of a period: 2.5 ms at 10 ms / 100 ms) after its deadline, and
//! an idle rank's counter moves every tick plus at most a step (the
//! same-host check interval: half the timeout at 4 checks per timeout).

use std::time::Duration;

/// The grid: an eighth of the check interval, and at most a quarter of
/// `strain_lateness` (a wake-up later than that strains the rank: a
/// confirmed accusation of its is held, docs/design.md
/// §4.11 "Primary partition"), so that the grid alone never makes a
/// wake-up look strained.
const STEPS_PER_CHECK: u32 = 8;
const STEPS_PER_STRAIN: u32 = 4;

/// Where an idle rank's tick ends ([`Cadence::extend`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Cadence {
    /// An idle rank's sleep when nothing else bounds it.
    tick: Duration,
    grid: Duration,
}

impl Cadence {
    /// `tick`: an idle rank's sleep (its same-host check interval, or the
    /// publication's if shorter); `check_interval`: the Engine's (fabric)
    /// check interval, which sets the step with `strain_lateness`.
    pub(super) fn new(tick: Duration, check_interval: Duration, strain_lateness: Duration) -> Self {
        Cadence {
            tick,
            grid: (check_interval / STEPS_PER_CHECK).min(strain_lateness / STEPS_PER_STRAIN),
        }
    }

    /// The sleep to wait from `now_ns` (`CLOCK_MONOTONIC`) for one of
    /// `sleep`: extended to the next grid point if it is a plain tick
    /// (`plain`: only the Engine's deadline or the publication bounds it,
    /// and it runs to within one step of a tick); `None` keeps it.
    pub(super) fn extend(&self, now_ns: u64, sleep: Duration, plain: bool) -> Option<Duration> {
        let tick = plain && self.grid > Duration::ZERO && sleep + self.grid >= self.tick;
        tick.then(|| to_grid(now_ns, sleep, self.grid))
    }
}

/// Extends a sleep of `sleep` from `now_ns` to the next multiple of `grid`
/// at or after its end (the same instants in every process of the host).
fn to_grid(now_ns: u64, sleep: Duration, grid: Duration) -> Duration {
    let grid_ns = u64::try_from(grid.as_nanos()).unwrap_or(u64::MAX).max(1);
    let sleep_ns = u64::try_from(sleep.as_nanos()).unwrap_or(u64::MAX);
    let end = now_ns.saturating_add(sleep_ns);
    let aligned = end.div_ceil(grid_ns).saturating_mul(grid_ns);
    Duration::from_nanos(aligned.saturating_sub(now_ns).max(sleep_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// A sleep ends on the next grid point, never before its own end, and
    /// at most one step after it.
    #[test]
    fn a_tick_ends_on_the_next_grid_point_within_one_step() {
        let c = Cadence::new(ms(24), ms(24), ms(24));
        assert_eq!(c.grid, ms(3));
        // Already on the grid.
        assert_eq!(c.extend(MS, ms(23), true), Some(ms(23)));
        // 1.5 ms + 23 ms = 24.5 ms: to 27 ms.
        let got = c.extend(MS + MS / 2, ms(23), true);
        assert_eq!(got, Some(Duration::from_micros(25_500)));
        for now in (0..10 * MS).step_by(77_777) {
            let got = c.extend(now, ms(22), true).expect("a tick");
            assert!(got >= ms(22) && got < ms(22) + c.grid, "{now}: {got:?}");
            assert_eq!((now + u64::try_from(got.as_nanos()).unwrap()) % (3 * MS), 0);
        }
    }

    /// Only a plain sleep of about a tick is extended: a shorter one (an
    /// emitter's expiry, a heartbeat period, a poll) and one that
    /// something else bounds keep their end.
    #[test]
    fn only_a_plain_sleep_of_a_tick_is_extended() {
        let c = Cadence::new(ms(24), ms(24), ms(24));
        assert!(c.extend(7, ms(21), true).is_some());
        assert_eq!(c.extend(7, ms(20), true), None);
        assert_eq!(c.extend(7, ms(10), true), None);
        assert_eq!(c.extend(7, Duration::from_micros(800), true), None);
        assert_eq!(c.extend(7, ms(24), false), None);
        // A zero interval has no grid.
        assert_eq!(
            Cadence::new(ms(24), Duration::ZERO, ms(1)).extend(7, ms(24), true),
            None
        );
        // A same-host tick of 50 ms (half the timeout) with 25 ms fabric
        // checks: the grid of the fabric checks, but a 25 ms sleep (a
        // counter's expiry) is no tick.
        let c = Cadence::new(ms(50), ms(25), ms(10));
        assert_eq!(c.grid, Duration::from_micros(2_500));
        assert!(c.extend(7, ms(50), true).is_some());
        assert!(c.extend(7, Duration::from_micros(47_500), true).is_some());
        assert_eq!(c.extend(7, ms(47), true), None);
        assert_eq!(c.extend(7, ms(25), true), None);
    }

    /// The step is an eighth of the check interval, and never more than a
    /// quarter of the lateness that strains a rank: 2.5 ms at the
    /// defaults (10 ms period, 100 ms timeout: 25 ms checks), 250 µs with
    /// a 1 ms period; so a tick on the grid is never strained by it.
    #[test]
    fn the_step_stays_under_a_quarter_of_the_strain_lateness() {
        assert_eq!(
            Cadence::new(ms(50), ms(25), ms(10)).grid,
            Duration::from_micros(2_500)
        );
        assert_eq!(
            Cadence::new(ms(50), ms(25), ms(1)).grid,
            Duration::from_micros(250)
        );
        assert_eq!(
            Cadence::new(ms(500), ms(250), ms(100)).grid,
            Duration::from_micros(25_000)
        );
        assert_eq!(Cadence::new(ms(8), ms(8), ms(8)).grid, ms(1));
    }
}
