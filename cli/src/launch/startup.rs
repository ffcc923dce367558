//! What `ffd run` says about a job's start before and while it happens:
//! the warning when the detectors' heartbeats alone would take a large
//! share of this machine's cores, the start-up's progress every few
//! seconds, and the libfabric settings that keep the agents' start cheap.
//!
//! Owns: [`CpuBudget`] (the estimate and the settings it suggests),
//! [`StartupProgress`] (when to say what), [`RXM_ENV`]. Must not: touch a
//! process (the launcher does) or read a clock (times are handed in), so
//! all of it is tested with plain values.

use std::time::Duration;

use ffd::config::format_duration;

/// CPU one detector spends per heartbeat period on `tcp;ofi_rxm` over
/// loopback, both ends counted: its beat (a tracked RDMA write and its
/// completion), the target's progress of it, its share of slot checks,
/// the kernel's loopback TCP, and the wake-ups. Measured on this
/// project's 2-core machine as the agents' user + system time over 5 idle
/// seconds divided by ranks × periods: 77-104 µs at N = 32 and 128, the
/// same with and without the overload guards of the Engine's health.
pub const COST_PER_PERIOD: Duration = Duration::from_micros(80);

/// The share of the cores the heartbeats may take before `ffd run` warns:
/// beyond it the progress threads queue behind each other and their
/// wake-ups run late by periods (at N = 128, 10 ms, 2 cores: 51%, and
/// wake-ups late by 1-10 ms).
pub const CPU_SHARE: f64 = 0.5;

/// The heartbeat load of a job on this machine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuBudget {
    pub ranks: u32,
    pub period: Duration,
    pub timeout: Duration,
    /// Cores this process may run on.
    pub cores: usize,
}

impl CpuBudget {
    /// Cores the heartbeats keep busy: ranks × [`COST_PER_PERIOD`] / period.
    pub fn load(&self) -> f64 {
        f64::from(self.ranks) * COST_PER_PERIOD.as_secs_f64() / self.period.as_secs_f64()
    }

    /// The load as a share of the cores.
    pub fn share(&self) -> f64 {
        self.load() / self.cores.max(1) as f64
    }

    /// The period and timeout (in the same ratio as the job's) that keep
    /// the load within [`CPU_SHARE`], the period rounded up to 1, 2 or 5
    /// times a power of ten microseconds.
    pub fn holding_settings(&self) -> (Duration, Duration) {
        let need = f64::from(self.ranks) * COST_PER_PERIOD.as_secs_f64()
            / (CPU_SHARE * self.cores.max(1) as f64);
        let period = round_up_125(Duration::from_secs_f64(need)).max(self.period);
        let ratio = self.timeout.as_secs_f64() / self.period.as_secs_f64();
        (
            period,
            Duration::from_secs_f64(period.as_secs_f64() * ratio),
        )
    }

    /// The warning to print before starting, if the load exceeds
    /// [`CPU_SHARE`] of the cores.
    pub fn warning(&self) -> Option<String> {
        if self.share() <= CPU_SHARE {
            return None;
        }
        let (period, timeout) = self.holding_settings();
        Some(format!(
            "{} detectors heartbeating every {} take about {:.2} of this machine's {} cores \
             ({} µs of CPU each per period); beyond {:.0}% of the cores their wake-ups run \
             late and timeouts can fire on live ranks; --period {} --timeout {} would hold",
            self.ranks,
            format_duration(self.period),
            self.load(),
            self.cores,
            COST_PER_PERIOD.as_micros(),
            CPU_SHARE * 100.0,
            format_duration(period),
            format_duration(timeout),
        ))
    }
}

/// `d` rounded up to 1, 2 or 5 × 10^k µs (at least 1 µs).
fn round_up_125(d: Duration) -> Duration {
    let us = d.as_secs_f64() * 1e6;
    let mut decade = 1.0;
    while decade * 10.0 <= us {
        decade *= 10.0;
    }
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * decade)
        .find(|&v| v >= us - 1e-9)
        .unwrap_or(10.0 * decade);
    Duration::from_micros(step.max(1.0) as u64)
}

/// How often `ffd run` says how far the start-up is.
pub const REPORT_EVERY: Duration = Duration::from_secs(5);

/// When to report the start-up's progress, and what.
#[derive(Clone, Copy, Debug)]
pub struct StartupProgress {
    ranks: u32,
    next: Duration,
}

impl StartupProgress {
    pub fn new(ranks: u32) -> StartupProgress {
        StartupProgress {
            ranks,
            next: REPORT_EVERY,
        }
    }

    /// How long from `elapsed` until the next report is due.
    pub fn due_in(&self, elapsed: Duration) -> Duration {
        self.next.saturating_sub(elapsed)
    }

    /// The line to print at `elapsed` since the agents were spawned with
    /// `ready` of them ready, if a report is due.
    pub fn report(&mut self, elapsed: Duration, ready: u32) -> Option<String> {
        if elapsed < self.next {
            return None;
        }
        while self.next <= elapsed {
            self.next += REPORT_EVERY;
        }
        let hint = if ready == 0 {
            " (each loads libfabric's providers, then links to its ring and broadcast neighbours)"
        } else {
            ""
        };
        Some(format!(
            "start-up is taking {:.1} s: {ready} of {} ranks ready{hint}",
            elapsed.as_secs_f64(),
            self.ranks
        ))
    }
}

/// libfabric settings the agents get unless the environment sets them
/// (docs/configuration.md, "libfabric settings of `ffd run`'s agents"):
/// - `FI_OFI_RXM_MSG_RX_SIZE=256`: `ofi_rxm` over `tcp` posts 4096
///   receive buffers of 16 KiB (64 MiB) per process on its shared receive
///   context, and zeroing them is most of the CPU of the link phase when a
///   hundred agents start together on two cores. 256 are plenty for the
///   detector's traffic.
/// - `FI_OFI_RXM_BUFFER_SIZE=1024`: the size of every `ofi_rxm` bounce
///   buffer (its eager limit). Its pools grow 1024 buffers at a time, and
///   at the default 16 KiB two of them were 37 of an agent's 45 MB
///   resident. A killed agent's sockets close only after the kernel has
///   freed its memory (`exit_mm` before `exit_files`), so that memory was
///   most of the time from `kill -9` to its peers' proof (docs/design.md
///   §4.5 "In-band detection"). The detector's messages are tens of bytes;
///   a larger one (a payload, a sync reply of a big job) goes in 1 KiB
///   segments (ofi_rxm's SAR protocol), as before beyond 16 KiB.
pub const RXM_ENV: [(&str, &str); 2] = [
    ("FI_OFI_RXM_MSG_RX_SIZE", "256"),
    ("FI_OFI_RXM_BUFFER_SIZE", "1024"),
];

/// libfabric's universe, the processes of the job (`FI_UNIVERSE_SIZE`),
/// which `ffd run` sets to its rank count up to [`DEFAULT_UNIVERSE`]:
/// ofi_rxm sizes its message completion queue by it, and at the default
/// that queue is 12 MiB per process, zero pages its circular use touches
/// one after another (about 4 kB/s for an agent of `ffd run -n 8`, so an
/// agent an hour old held 12 MB more to free at its death). An agent
/// talks to fewer peers than the job's size.
pub const UNIVERSE_ENV: &str = "FI_UNIVERSE_SIZE";

/// libfabric's default universe.
pub const DEFAULT_UNIVERSE: u32 = 256;

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn budget(ranks: u32, period: u64, timeout: u64, cores: usize) -> CpuBudget {
        CpuBudget {
            ranks,
            period: ms(period),
            timeout: ms(timeout),
            cores,
        }
    }

    #[test]
    fn the_load_is_ranks_times_cost_over_period() {
        let b = budget(64, 10, 100, 2);
        assert!((b.load() - 0.512).abs() < 1e-9, "{}", b.load());
        assert!((b.share() - 0.256).abs() < 1e-9);
        assert_eq!(b.warning(), None);
    }

    #[test]
    fn an_overloaded_job_is_warned_with_settings_that_hold() {
        let b = budget(128, 10, 100, 2);
        let w = b.warning().expect("128 ranks at 10 ms on 2 cores");
        let head =
            "128 detectors heartbeating every 10ms take about 1.02 of this machine's 2 cores";
        assert!(w.starts_with(head), "{w}");
        assert!(
            w.ends_with("--period 20ms --timeout 200ms would hold"),
            "{w}"
        );
        assert_eq!(
            budget(256, 10, 100, 2).holding_settings(),
            (ms(50), ms(500))
        );
        let (period, timeout) = b.holding_settings();
        let held = CpuBudget {
            period,
            timeout,
            ..b
        };
        assert!(held.share() <= CPU_SHARE, "{}", held.share());
        assert_eq!(held.warning(), None);
        // The ratio is kept.
        let (p, t) = budget(1000, 1, 5, 4).holding_settings();
        assert_eq!((p, t), (ms(50), ms(250)));
    }

    #[test]
    fn periods_round_up_to_one_two_five() {
        let r = |us| round_up_125(Duration::from_micros(us)).as_micros();
        assert_eq!(
            [1, 2, 3, 7, 10, 11, 17_920, 50_000, 50_001].map(r),
            [1, 2, 5, 10, 10, 20, 20_000, 50_000, 100_000]
        );
    }

    #[test]
    fn progress_is_reported_every_five_seconds() {
        let mut p = StartupProgress::new(128);
        assert_eq!(p.report(Duration::from_secs(4), 0), None);
        assert_eq!(p.due_in(Duration::from_secs(4)), Duration::from_secs(1));
        let line = p.report(Duration::from_millis(5200), 0).unwrap();
        assert!(line.starts_with("start-up is taking 5.2 s: 0 of 128 ranks ready (each loads"));
        assert_eq!(p.report(Duration::from_secs(7), 3), None);
        // A late call reports once and moves past every missed slot.
        assert_eq!(
            p.report(Duration::from_secs(16), 100).as_deref(),
            Some("start-up is taking 16.0 s: 100 of 128 ranks ready")
        );
        assert_eq!(p.due_in(Duration::from_secs(16)), Duration::from_secs(4));
    }
}
