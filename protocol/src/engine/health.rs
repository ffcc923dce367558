//! Own health awareness (Lifeguard, Dadgar et al., DSN 2018): how far
//! this rank trusts its own sense of time.
//!
//! Owns: the own health multiplier — 1 when this rank's timers fire on
//! time, up to `health_max` when they run late — its rise on a late
//! wake-up and its decay after on-time running, and the stretching of the
//! durations this rank judges others by. Must not: declare, mend or send
//! anything (observation reads the stretched durations and decides), or
//! read a clock (the lateness comes from the driver's `now`).
//!
//! Why: a rank whose own progress thread is starved (a busy host, a CPU
//! hog, a connection storm) sees its emitter's slot stand still because it
//! is itself late, and because on software-RMA providers the emitter's
//! writes land only when this rank progresses. Accusing its neighbours
//! then costs the job live ranks; a late rank should cost no more than
//! itself. So every wake-up later than `late_wakeup` raises the
//! multiplier by one (at most `health_max`), and each stretched timeout
//! of on-time wake-ups lowers it by one. While the multiplier is m,
//! timeouts judged here are m × timeout: a failure is still detected
//! within `health_max` × timeout (plus a check interval) of its last beat,
//! and in-band errors (a crash's failed write) are not stretched at all.

use std::time::Duration;

use crate::config::{EngineConfig, Time};

/// The own health multiplier and when it last changed.
#[derive(Clone, Copy, Debug)]
pub(super) struct Health {
    /// 1 ..= `health_max`.
    multiplier: u32,
    /// When the multiplier last rose or fell.
    changed_at: Time,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            multiplier: 1,
            changed_at: Time::ZERO,
        }
    }
}

/// What a wake-up did to the multiplier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum HealthChange {
    Rose,
    Fell,
    Unchanged,
}

impl Health {
    /// The current multiplier, 1 ..= `health_max`.
    pub(super) fn multiplier(&self) -> u32 {
        self.multiplier
    }

    /// `d` stretched by the multiplier.
    pub(super) fn stretch(&self, d: Duration) -> Duration {
        d.saturating_mul(self.multiplier)
    }

    /// This rank's timers fired `lateness` after their deadline, at `now`.
    /// A late wake-up raises the multiplier; a stretched timeout of on-time
    /// wake-ups since the last change lowers it.
    pub(super) fn on_wakeup(
        &mut self,
        now: Time,
        lateness: Duration,
        config: &EngineConfig,
    ) -> HealthChange {
        if lateness > config.late_wakeup() {
            if self.multiplier < config.health_max {
                self.multiplier += 1;
                self.changed_at = now;
                return HealthChange::Rose;
            }
            // At the ceiling: the on-time run starts again from here.
            self.changed_at = now;
            return HealthChange::Unchanged;
        }
        if self.multiplier > 1 && now - self.changed_at >= self.stretch(config.timeout) {
            self.multiplier -= 1;
            self.changed_at = now;
            return HealthChange::Fell;
        }
        HealthChange::Unchanged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn at(v: u64) -> Time {
        Time::ZERO + ms(v)
    }

    #[test]
    fn late_wakeups_raise_the_multiplier_to_its_ceiling_and_on_time_running_lowers_it() {
        let cfg = EngineConfig::default(); // timeout 100 ms, late after 25 ms, ceiling 4
        let mut h = Health::default();
        assert_eq!(h.on_wakeup(at(10), ms(25), &cfg), HealthChange::Unchanged);
        assert_eq!(h.multiplier(), 1);
        for (i, t) in [20, 30, 40].into_iter().enumerate() {
            assert_eq!(h.on_wakeup(at(t), ms(26), &cfg), HealthChange::Rose);
            assert_eq!(h.multiplier(), 2 + i as u32);
        }
        assert_eq!(h.on_wakeup(at(50), ms(80), &cfg), HealthChange::Unchanged);
        assert_eq!(h.multiplier(), 4, "capped at health_max");
        assert_eq!(h.stretch(cfg.timeout), ms(400));
        // On time from 50 ms: one step down per stretched timeout.
        assert_eq!(h.on_wakeup(at(449), ms(1), &cfg), HealthChange::Unchanged);
        assert_eq!(h.on_wakeup(at(450), ms(1), &cfg), HealthChange::Fell);
        assert_eq!(h.multiplier(), 3);
        assert_eq!(h.on_wakeup(at(750), ms(1), &cfg), HealthChange::Fell);
        assert_eq!(h.on_wakeup(at(950), ms(1), &cfg), HealthChange::Fell);
        assert_eq!(h.multiplier(), 1);
        assert_eq!(h.on_wakeup(at(5000), ms(1), &cfg), HealthChange::Unchanged);
        assert_eq!(h.multiplier(), 1);
    }

    #[test]
    fn a_ceiling_of_one_never_stretches() {
        let cfg = EngineConfig {
            health_max: 1,
            ..EngineConfig::default()
        };
        let mut h = Health::default();
        assert_eq!(h.on_wakeup(at(10), ms(500), &cfg), HealthChange::Unchanged);
        assert_eq!(h.stretch(cfg.timeout), cfg.timeout);
    }
}
