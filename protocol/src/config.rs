//! Protocol vocabulary shared by the Engine, the runtime and the simulator:
//! ranks, virtual time, and the protocol's tunable choices.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::str::FromStr;
use std::time::Duration;

/// A process of the job, `0..N`.
pub type Rank = u32;

/// A point in time, in nanoseconds since an origin the driver chooses (job
/// start for the runtime, zero for the simulator). The protocol core never
/// reads a clock: every `Time` it sees was handed to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(u64);

impl Time {
    pub const ZERO: Time = Time(0);
    /// A time later than any deadline the protocol sets.
    pub const NEVER: Time = Time(u64::MAX);

    pub const fn from_nanos(nanos: u64) -> Self {
        Time(nanos)
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed since `earlier`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Time(self.0.saturating_add(nanos))
    }
}

impl AddAssign<Duration> for Time {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Time> for Time {
    type Output = Duration;
    fn sub(self, earlier: Time) -> Duration {
        self.saturating_since(earlier)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}ms", self.0 as f64 / 1e6)
    }
}

/// A setting's value was not one of its accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{value}` is not one of {accepted}")]
pub struct ParseSettingError {
    pub value: String,
    /// The accepted forms, e.g. `declare|suspect|off`.
    pub accepted: &'static str,
}

macro_rules! setting_enum {
    ($(#[$meta:meta])* $name:ident, $accepted:literal, { $($(#[$vmeta:meta])* $variant:ident => $word:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// The accepted spellings, as shown in error messages and `ffd info`.
            pub const ACCEPTED: &'static str = $accepted;

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $word),+ }
            }
        }

        impl FromStr for $name {
            type Err = ParseSettingError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s.trim().to_ascii_lowercase().as_str() {
                    $($word => Ok($name::$variant),)+
                    _ => Err(ParseSettingError { value: s.to_owned(), accepted: $accepted }),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

setting_enum!(
    /// What a transport error on the link to the observer means (`FFD_INBAND`).
    InbandMode, "declare|suspect|off", {
        /// Declare the observer failed at once (default).
        #[default]
        Declare => "declare",
        /// Check the observer out of band before declaring it.
        Suspect => "suspect",
        /// Ignore transport errors; only timeouts detect.
        Off => "off",
    }
);

setting_enum!(
    /// The broadcast overlay for failure notices (`FFD_BCAST`).
    BcastKind, "bmg|chord", {
        /// Binomial graph, links p ± 2^k (default).
        #[default]
        Bmg => "bmg",
        /// Chord-like, links p + 2^k only: about half the messages.
        Chord => "chord",
    }
);

setting_enum!(
    /// How ranks are placed on the observation ring (`FFD_RING`).
    RingKind, "topology|shuffle|rank", {
        /// Interleave hosts so ring neighbours sit on different hosts (default).
        #[default]
        Topology => "topology",
        /// A seeded permutation, the same on every rank.
        Shuffle => "shuffle",
        /// Rank order.
        Rank => "rank",
    }
);

setting_enum!(
    /// How a declaration from silence is made (`FFD_QUORUM`, `docs/design.md`
    /// §4.11 "Primary partition"). Proof of death (an error the peer's kernel caused) is always
    /// declared at once.
    QuorumMode, "majority|off", {
        /// Silence (a timeout, a refusal run) is an accusation that a
        /// majority of the live view must confirm before anyone raises
        /// `Failed`; a rank whose side of a partition holds no majority
        /// excludes itself (default).
        #[default]
        Majority => "majority",
        /// Silence is declared at once, as proof is (no primary partition:
        /// both sides of a partition go on).
        Off => "off",
    }
);

/// The protocol's settings, identical on every rank of a job.
///
/// The fields after `ring_seed` are refinements with sensible defaults; the
/// `Option<Duration>` ones default (`None`) to a fraction of `timeout`, so
/// that changing the timeout alone keeps them proportionate. Read them
/// through the accessor of the same name, which resolves the default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Heartbeat period δ.
    pub period: Duration,
    /// Timeout η: an emitter whose slot has not changed for longer is declared failed.
    pub timeout: Duration,
    pub inband: InbandMode,
    /// Whether silence needs a quorum before it is declared.
    pub quorum: QuorumMode,
    pub bcast: BcastKind,
    pub ring: RingKind,
    /// Seed of the `shuffle` ring order (agreed at bootstrap).
    pub ring_seed: u64,
    /// How many slot checks per timeout while idle (≥ 1, default 4). An idle
    /// observer wakes `checks_per_timeout` times per timeout, not per period.
    pub checks_per_timeout: u32,
    /// Nobody is declared before start + `startup_grace` + `timeout`
    /// (connection set-up on `tcp;ofi_rxm` takes tens of ms). Default
    /// (`None`): [`Self::DEFAULT_STARTUP_GRACE`]. The simulator, whose links
    /// come up at once, sets its own (one timeout).
    pub startup_grace: Option<Duration>,
    /// Self-lag guard: a check that runs this late declares nobody and
    /// restarts its baseline. Default: half a timeout.
    pub lag_guard: Option<Duration>,
    /// A live emitter whose slot stood still this long before changing again
    /// raises `Event::SlowEmitter` (never a failure). Default: half a timeout.
    pub slow_emitter_after: Option<Duration>,
    /// `InbandMode::Suspect`: how long a suspect has to prove it is alive. Default: half a timeout.
    pub suspect_timeout: Option<Duration>,
    /// How long an emitter's failed-set digest must differ from ours before
    /// we ask it for the difference (filters out notices still in flight).
    /// Default: half a timeout. At most one sync request per timeout.
    pub sync_after: Option<Duration>,
    /// Leaves learned from others are forwarded in batches, one notice per
    /// window (mass leave at job end would otherwise cost N broadcasts).
    /// Must stay well under the runtime's linger after a leave. Default:
    /// half a period.
    pub leave_batch: Option<Duration>,
    /// Largest application payload `Input::Broadcast` accepts, in bytes.
    pub max_payload: usize,
    /// Whether a rank's own payloads are delivered to it too (as
    /// `Event::Payload`, when it broadcasts them). Default: yes.
    pub deliver_own: bool,
    /// Payloads of one origin held at most while the gap before them is
    /// open (they arrived ahead of an earlier one of the same origin). One
    /// more is dropped and counted (`payloads_hold_overflow`; the lowest
    /// are kept): the sync repair brings it again. Default 64.
    pub payload_hold: usize,
    /// The last W payloads of each origin every rank keeps, to answer the
    /// sync requests of ranks that missed them (0: no payload repair). A
    /// rank more than W payloads of one origin behind its neighbours cannot
    /// be repaired by them (`payloads_beyond_retention`). Default 64.
    pub payload_retention: usize,
    /// Own health awareness (Lifeguard): the largest factor by which a
    /// rank that sees its own wake-ups running late stretches the timeouts
    /// it judges others by (1 to [`Self::MAX_HEALTH`]; 1 never stretches).
    /// Default [`Self::DEFAULT_HEALTH_MAX`]. See `docs/design.md` §4.3 "Timeout".
    pub health_max: u32,
    /// A wake-up of this rank's timers later than this raises its own
    /// health multiplier by one. Default: one check interval
    /// (`timeout / checks_per_timeout`).
    pub late_wakeup: Option<Duration>,
    /// Most ranks one `SyncReply` carries (failed ones first). A larger
    /// difference goes in parts, one per request (the requester asks again
    /// a timeout later while its digest still differs), so the work one
    /// request draws is bounded: 1024 ranks are at most ~5 KiB of lists.
    /// Also the most payload marks one `SyncRequest` carries (and never
    /// more than `wire::MAX_MARKS`; a rank that knows more origins covers
    /// them in turns).
    pub max_sync_ranks: usize,
    /// The payloads one sync request draws, in bytes (at least one
    /// payload, however large): the rest waits for the next request.
    /// Default 64 KiB.
    pub max_sync_payload_bytes: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            period: Self::DEFAULT_PERIOD,
            timeout: Self::DEFAULT_TIMEOUT,
            inband: InbandMode::default(),
            quorum: QuorumMode::default(),
            bcast: BcastKind::default(),
            ring: RingKind::default(),
            ring_seed: 0,
            checks_per_timeout: 4,
            startup_grace: None,
            lag_guard: None,
            slow_emitter_after: None,
            suspect_timeout: None,
            sync_after: None,
            leave_batch: None,
            max_payload: 64 * 1024,
            deliver_own: true,
            payload_hold: 64,
            payload_retention: 64,
            health_max: Self::DEFAULT_HEALTH_MAX,
            late_wakeup: None,
            max_sync_ranks: 1024,
            max_sync_payload_bytes: 64 * 1024,
        }
    }
}

/// An `EngineConfig` the Engine cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineConfigError {
    #[error("the heartbeat period must be positive")]
    ZeroPeriod,
    #[error("the timeout ({timeout:?}) must exceed the heartbeat period ({period:?})")]
    TimeoutNotAbovePeriod { period: Duration, timeout: Duration },
    #[error("checks_per_timeout must be at least 1")]
    ZeroChecks,
    #[error("health_max ({value}) must be between 1 and {max}")]
    HealthMax { value: u32, max: u32 },
    #[error("the ring is empty")]
    EmptyRing,
    #[error("rank {rank} is outside the job of {size} ranks")]
    RankOutOfRange { rank: Rank, size: u32 },
    #[error("the host groups name {hosts} ranks, the ring {ring}")]
    HostsMismatch { hosts: u32, ring: u32 },
}

impl EngineConfig {
    /// The heartbeat period unless set: the default of `FFD_PERIOD` and of
    /// `ffd sim --period`.
    pub const DEFAULT_PERIOD: Duration = Duration::from_millis(10);
    /// The timeout unless set: the default of `FFD_TIMEOUT` and of
    /// `ffd sim --timeout`.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);
    /// The start-up grace unless set (`FFD_STARTUP_GRACE`'s default): room
    /// for the connection set-up of a real fabric, which takes tens of ms on
    /// `tcp;ofi_rxm` and more on a loaded machine.
    pub const DEFAULT_STARTUP_GRACE: Duration = Duration::from_secs(1);
    /// The own health multiplier's ceiling unless set (`FFD_HEALTH_MAX`'s
    /// default): a rank that sees itself late waits up to 4 timeouts.
    pub const DEFAULT_HEALTH_MAX: u32 = 4;
    /// The largest accepted `health_max`.
    pub const MAX_HEALTH: u32 = 16;

    /// The one rule between the two timings: the timeout must exceed the
    /// period, or an emitter could be declared failed between two of its
    /// heartbeats. [`EngineConfig::validate`], the library's settings and
    /// `ffd sim` all ask this function.
    pub fn timeout_exceeds_period(period: Duration, timeout: Duration) -> bool {
        timeout > period
    }

    /// Checks the settings the Engine depends on.
    pub fn validate(&self) -> Result<(), EngineConfigError> {
        if self.period.is_zero() {
            return Err(EngineConfigError::ZeroPeriod);
        }
        if !Self::timeout_exceeds_period(self.period, self.timeout) {
            return Err(EngineConfigError::TimeoutNotAbovePeriod {
                period: self.period,
                timeout: self.timeout,
            });
        }
        if self.checks_per_timeout == 0 {
            return Err(EngineConfigError::ZeroChecks);
        }
        if !(1..=Self::MAX_HEALTH).contains(&self.health_max) {
            return Err(EngineConfigError::HealthMax {
                value: self.health_max,
                max: Self::MAX_HEALTH,
            });
        }
        Ok(())
    }

    fn half_timeout(&self) -> Duration {
        self.timeout / 2
    }

    /// Interval between idle slot checks: `timeout / checks_per_timeout`.
    pub fn check_interval(&self) -> Duration {
        self.timeout_over(self.checks_per_timeout.max(1))
    }

    /// `timeout / n` (n ≥ 1), at least a nanosecond. One division of the
    /// timeout's nanoseconds: the same floor as `timeout / n`, which
    /// divides seconds, their remainder and nanoseconds apart (three
    /// divisions by a number known only at run time, for every timer step
    /// of every Engine).
    fn timeout_over(&self, n: u32) -> Duration {
        let interval = match u64::try_from(self.timeout.as_nanos()) {
            Ok(ns) => Duration::from_nanos(ns / u64::from(n)),
            Err(_) => self.timeout / n,
        };
        interval.max(Duration::from_nanos(1))
    }

    /// How many times per timeout an idle rank checks its same-host
    /// emitter's counter: half of `checks_per_timeout`, but at least 2
    /// (and never more than `checks_per_timeout`): 2 at the default 4.
    ///
    /// The counter moves at every wake-up of the emitter's thread, and
    /// an idle rank with no fabric duty wakes only for this check, so the
    /// check interval is also the interval of its emitter's beats: the
    /// counter stands still at most a local check interval while the
    /// emitter's thread keeps time, which leaves the timeout minus that
    /// interval (half a timeout at least, at 2 checks) as the margin for
    /// a late wake-up. A late thread that the kernel shows runnable (one
    /// waiting for a CPU) is not judged by the timeout at all but by the
    /// ceiling of `health_max` timeouts (`docs/design.md` §4.12 "Hosts"), so
    /// the margin only has to cover a thread that is held in the kernel
    /// (not waiting for a CPU), where a fabric slot's margin has to cover
    /// any lateness. A check comes at the counter's expiry, not on the
    /// interval's next step, so fewer checks do not delay a declaration
    /// (it comes a timeout after the emitter's last wake-up). Why fewer
    /// (issue 35): on a host with more ranks than cores every idle wake-up
    /// preempts an application thread; at 32 ranks on 2 cores, 4 checks
    /// per timeout cost the shim's ping-pong about 4 % of its speed.
    pub fn local_checks_per_timeout(&self) -> u32 {
        let n = self.checks_per_timeout.max(1);
        (n / 2).max(2).min(n)
    }

    /// How long a rank holds its copies to other hosts of news it read on
    /// its host's notice board: one period (§4.12 "Hosts" of
    /// docs/design.md).
    pub fn board_forward_delay(&self) -> Duration {
        self.period
    }

    /// Interval between idle checks of the same-host emitter's counter:
    /// `timeout / local_checks_per_timeout` (50 ms at 100 ms and 4
    /// checks per timeout).
    pub fn local_check_interval(&self) -> Duration {
        self.timeout_over(self.local_checks_per_timeout())
    }

    pub fn startup_grace(&self) -> Duration {
        self.startup_grace.unwrap_or(Self::DEFAULT_STARTUP_GRACE)
    }

    /// How long a link may take to come up before silence on it counts:
    /// an emitter at start, or one just mended to, has this plus a timeout
    /// until its link is confirmed. The start-up grace.
    pub fn link_grace(&self) -> Duration {
        self.startup_grace()
    }

    pub fn late_wakeup(&self) -> Duration {
        self.late_wakeup.unwrap_or_else(|| self.check_interval())
    }

    /// A wake-up of this rank's timers later than this strains it: a
    /// majority confirmation of its accusations is held (`docs/design.md`
    /// §4.11 "Primary partition"). One period, or `late_wakeup` if shorter (so with a very
    /// short period nearly every confirmation under load is held, up to
    /// `health_max` timeouts): a wake-up a period
    /// late means at least one of its own beats left late, the measure
    /// its observer judges it by, so the host is short of CPU and its
    /// suspect may be starved by the same shortage.
    pub fn strain_lateness(&self) -> Duration {
        self.period.min(self.late_wakeup())
    }

    pub fn lag_guard(&self) -> Duration {
        self.lag_guard.unwrap_or_else(|| self.half_timeout())
    }

    pub fn slow_emitter_after(&self) -> Duration {
        self.slow_emitter_after
            .unwrap_or_else(|| self.half_timeout())
    }

    pub fn suspect_timeout(&self) -> Duration {
        self.suspect_timeout.unwrap_or_else(|| self.half_timeout())
    }

    pub fn leave_batch(&self) -> Duration {
        self.leave_batch.unwrap_or(self.period / 2)
    }

    pub fn sync_after(&self) -> Duration {
        self.sync_after.unwrap_or_else(|| self.half_timeout())
    }

    /// Quorum: how long a voter waits for the rest of its subtree before it
    /// sends a partial vote (a subtree that answers in full votes at once):
    /// `timeout / 32`, so a partition's majority confirms within a few ms.
    pub fn vote_wait(&self) -> Duration {
        (self.timeout / 32).max(Duration::from_nanos(1))
    }

    /// Quorum: an accusation without a quorum floods again (a new round)
    /// this often: `timeout / 4`, which recovers votes lost with a dead
    /// flood parent.
    pub fn accusation_retry(&self) -> Duration {
        (self.timeout / 4).max(Duration::from_nanos(1))
    }

    /// Quorum: an accusation still without a quorum this long after it
    /// began excludes its accuser: `timeout − check_interval` (at least
    /// half a timeout), so that a rank cut off from the majority excludes
    /// itself within 2 × timeout of the cut (its accusation begins at most
    /// a timeout and a check interval after the cut).
    pub fn accusation_give_up(&self) -> Duration {
        self.timeout
            .saturating_sub(self.check_interval())
            .max(self.half_timeout())
    }

    /// Quorum: an accusation starts a new round, or gives up, only once
    /// its vote count has stood still this long (a quarter timeout, as
    /// [`Self::accusation_retry`], stretched by the rank's own health):
    /// votes still arriving mean the flood is reaching a side that may yet
    /// be a majority, as on an overloaded machine where every hop of the
    /// vote tree waits for a late thread. A partition's minority stops
    /// growing once its side has voted, so it still gives up one give-up
    /// window after the accusation began.
    pub fn accusation_stall(&self) -> Duration {
        self.accusation_retry()
    }

    /// Quorum: while other accusations are under way (a partition or a
    /// multi-rank silence), a freshly mended emitter that has not written
    /// its first heartbeat within `timeout / 8` is accused at once (it
    /// writes one as soon as `ObserveMe` arrives): a chain of cut-off ranks
    /// is then declared in `timeout / 8` per link, not a timeout per link.
    /// Only while the observer's own wake-ups keep time (own health 1):
    /// a late observer gives the new emitter a full stretched timeout.
    pub fn first_beat_within(&self) -> Duration {
        (self.timeout / 8).max(Duration::from_nanos(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check interval's one division gives what `Duration / u32` gives,
    /// down to the nanosecond, whatever the split of seconds and nanoseconds.
    #[test]
    fn check_interval_is_the_timeout_divided() {
        let timeouts = [
            Duration::from_nanos(1),
            Duration::from_nanos(999_999_999),
            Duration::from_millis(100),
            Duration::new(1, 1),
            Duration::new(7, 333_333_333),
            Duration::new(12_345, 999_999_999),
            Duration::new(u64::MAX / 1_000_000_000 - 1, 999_999_999),
            Duration::MAX,
        ];
        for timeout in timeouts {
            for n in [1, 2, 3, 4, 7, 10, 64, 1000, 999_999_937, u32::MAX] {
                let c = EngineConfig {
                    timeout,
                    checks_per_timeout: n,
                    ..EngineConfig::default()
                };
                assert_eq!(
                    c.check_interval(),
                    (timeout / n).max(Duration::from_nanos(1)),
                    "timeout {timeout:?} / {n}"
                );
            }
        }
    }

    /// Same-host checks: half the fabric's, at least 2, never more than
    /// the fabric's: the counter of an emitter that keeps time stands
    /// still at most half a timeout between two of its wake-ups (with
    /// 2 checks or more).
    #[test]
    fn local_checks_are_half_the_fabric_checks_but_at_least_two() {
        let want = [
            (1, 1),
            (2, 2),
            (3, 2),
            (4, 2),
            (5, 2),
            (6, 3),
            (8, 4),
            (16, 8),
        ];
        for (n, local) in want {
            let c = EngineConfig {
                checks_per_timeout: n,
                ..EngineConfig::default()
            };
            assert_eq!(c.local_checks_per_timeout(), local, "{n} checks");
            assert_eq!(c.local_check_interval(), c.timeout / local, "{n} checks");
            assert!(c.local_check_interval() >= c.check_interval());
            if n >= 2 {
                assert!(c.local_check_interval() <= c.timeout / 2);
            }
        }
        let c = EngineConfig::default();
        assert_eq!(c.local_check_interval(), Duration::from_millis(50));
        let tiny = EngineConfig {
            timeout: Duration::from_nanos(1),
            ..EngineConfig::default()
        };
        assert_eq!(tiny.local_check_interval(), Duration::from_nanos(1));
    }

    #[test]
    fn settings_parse_their_words_and_reject_others() {
        assert_eq!("SUSPECT".parse::<InbandMode>(), Ok(InbandMode::Suspect));
        assert_eq!("chord".parse::<BcastKind>(), Ok(BcastKind::Chord));
        assert_eq!(" rank ".parse::<RingKind>(), Ok(RingKind::Rank));
        let err = "tree".parse::<BcastKind>().unwrap_err();
        assert_eq!(err.to_string(), "`tree` is not one of bmg|chord");
    }

    #[test]
    fn time_arithmetic_saturates() {
        let t = Time::from_nanos(5);
        assert_eq!(t + Duration::from_nanos(3), Time::from_nanos(8));
        assert_eq!(Time::ZERO - t, Duration::ZERO);
        assert_eq!(Time::NEVER + Duration::from_secs(1), Time::NEVER);
    }

    #[test]
    fn config_validation_and_derived_defaults() {
        let mut c = EngineConfig::default();
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.check_interval(), Duration::from_millis(25));
        assert_eq!(c.lag_guard(), Duration::from_millis(50));
        c.timeout = Duration::from_millis(200);
        assert_eq!(c.startup_grace(), EngineConfig::DEFAULT_STARTUP_GRACE);
        assert_eq!(
            c.startup_grace(),
            Duration::from_secs(1),
            "not tied to the timeout"
        );
        let (period, just_above) = (c.period, c.period + Duration::from_nanos(1));
        assert!(!EngineConfig::timeout_exceeds_period(period, period));
        assert!(EngineConfig::timeout_exceeds_period(period, just_above));
        c.timeout = c.period;
        assert!(matches!(
            c.validate(),
            Err(EngineConfigError::TimeoutNotAbovePeriod { .. })
        ));
        c.timeout = Duration::from_secs(1);
        c.checks_per_timeout = 0;
        assert_eq!(c.validate(), Err(EngineConfigError::ZeroChecks));
        c.checks_per_timeout = 4;
        assert_eq!(c.late_wakeup(), Duration::from_millis(250));
        // One period, or late_wakeup when that is shorter.
        let period = c.period;
        c.period = Duration::from_millis(100);
        assert_eq!(c.strain_lateness(), Duration::from_millis(100));
        c.late_wakeup = Some(Duration::from_millis(5));
        assert_eq!(c.strain_lateness(), Duration::from_millis(5));
        (c.period, c.late_wakeup) = (period, None);
        for bad in [0, EngineConfig::MAX_HEALTH + 1] {
            c.health_max = bad;
            assert!(matches!(
                c.validate(),
                Err(EngineConfigError::HealthMax { value, .. }) if value == bad
            ));
        }
    }
}
