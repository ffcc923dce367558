//! Faults that `ffd run` injects: `--kill R@T`, `--stop R@T`, `--cont R@T`,
//! and with `--netns` a host's link cut and healed (`--cut-host`,
//! `--heal-host`, one fault per rank of the host).
//!
//! Owns: the `RANK@TIME` syntax and the validation of a whole schedule
//! against the job (rank in range, a `--cont` only after a `--stop`, a heal
//! only after a cut, nothing after a kill, nothing after the end). Must not: send signals (the
//! launcher does) or read a clock; times are offsets from job start.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use ffd::config::{DURATION_FORM, format_duration, parse_duration};
use ffd::protocol::Rank;

/// What is done to a rank's process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL: a crash.
    Kill,
    /// SIGSTOP: a hang.
    Stop,
    /// SIGCONT: the end of a hang.
    Cont,
    /// The rank's host link taken down (`--cut-host`): a partition.
    Cut,
    /// The rank's host link back up (`--heal-host`).
    Heal,
}

impl FaultKind {
    /// The command-line option (`--kill`, `--stop`, `--cont`).
    pub fn option(self) -> &'static str {
        match self {
            FaultKind::Kill => "--kill",
            FaultKind::Stop => "--stop",
            FaultKind::Cont => "--cont",
            FaultKind::Cut => "--cut",
            FaultKind::Heal => "--heal",
        }
    }

    /// The word of the JSON report (`kill`, `stop`, `cont`).
    pub fn as_word(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Stop => "stop",
            FaultKind::Cont => "cont",
            FaultKind::Cut => "cut",
            FaultKind::Heal => "heal",
        }
    }

    /// How the timeline shows it, as the shell command (`kill -9`) or, for
    /// a host link, the event (`link cut`).
    pub fn command(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill -9",
            FaultKind::Stop => "kill -STOP",
            FaultKind::Cont => "kill -CONT",
            FaultKind::Cut => "link cut",
            FaultKind::Heal => "link healed",
        }
    }

    /// A fault that makes the rank a failure (kill, stop, cut), not the
    /// end of one (cont, heal).
    pub fn is_failure(self) -> bool {
        matches!(self, FaultKind::Kill | FaultKind::Stop | FaultKind::Cut)
    }

    /// The fault this one ends: a cont ends a stop, a heal a cut.
    pub fn ends(self) -> Option<FaultKind> {
        match self {
            FaultKind::Cont => Some(FaultKind::Stop),
            FaultKind::Heal => Some(FaultKind::Cut),
            _ => None,
        }
    }
}

/// The accepted form of a fault option's value.
pub const FAULT_FORM: &str = "RANK@TIME, a rank and a time after job start, e.g. `--kill 3@500ms`";

/// `RANK@TIME`, the value of a fault option, before it is checked against the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankAt {
    pub rank: Rank,
    pub at: Duration,
}

impl fmt::Display for RankAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.rank, format_duration(self.at))
    }
}

impl FromStr for RankAt {
    type Err = String;

    fn from_str(text: &str) -> Result<RankAt, String> {
        let Some((rank, at)) = text.split_once('@') else {
            return Err(format!("`{text}` has no `@`; accepted: {FAULT_FORM}"));
        };
        let rank = rank.trim();
        if rank.is_empty() || !rank.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "`{rank}` is not a rank (a non-negative integer); accepted: {FAULT_FORM}"
            ));
        }
        let rank: Rank = rank
            .parse()
            .map_err(|_| format!("rank `{rank}` is too large; accepted: {FAULT_FORM}"))?;
        let at = parse_duration(at)
            .map_err(|e| format!("time `{}` {e}; accepted: {DURATION_FORM}", at.trim()))?;
        Ok(RankAt { rank, at })
    }
}

/// One fault of a checked schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    pub rank: Rank,
    /// Offset from job start (the moment the last rank was ready).
    pub at: Duration,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}@{}",
            self.kind.option(),
            self.rank,
            format_duration(self.at)
        )
    }
}

/// Why a fault schedule does not fit the job. Each message names the option
/// as written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("{fault}: rank {} is not in the job (ranks 0 to {})", .fault.rank, .ranks - 1)]
    RankOutOfRange { fault: Fault, ranks: u32 },
    #[error("{fault}: rank {} is not stopped then; a --cont needs an earlier --stop {}@TIME", .fault.rank, .fault.rank)]
    ContWithoutStop { fault: Fault },
    #[error("{fault}: rank {} is already stopped by {earlier}", .fault.rank)]
    AlreadyStopped { fault: Fault, earlier: Fault },
    #[error("{fault}: rank {} is not cut off then; a heal needs an earlier --cut-host of its host", .fault.rank)]
    HealWithoutCut { fault: Fault },
    #[error("{fault}: rank {} is already killed by {earlier}", .fault.rank)]
    AfterKill { fault: Fault, earlier: Fault },
    #[error("{fault} and {other} act on rank {} at the same time; give them different times", .fault.rank)]
    SameTime { fault: Fault, other: Fault },
    #[error("{fault} is not before the end of the run (--duration {})", format_duration(*.duration))]
    AfterEnd { fault: Fault, duration: Duration },
}

/// A checked fault schedule, in order of time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    faults: Vec<Fault>,
}

impl Schedule {
    /// Checks `faults` against a job of `ranks` ranks that runs for
    /// `duration` after start (if given).
    pub fn new(
        ranks: u32,
        faults: impl IntoIterator<Item = Fault>,
        duration: Option<Duration>,
    ) -> Result<Schedule, ScheduleError> {
        let mut faults: Vec<Fault> = faults.into_iter().collect();
        // Stable: equal times keep the order of the options (then rejected below
        // when on one rank).
        faults.sort_by_key(|f| f.at);
        for &fault in &faults {
            if fault.rank >= ranks {
                return Err(ScheduleError::RankOutOfRange { fault, ranks });
            }
            if let Some(duration) = duration {
                if fault.at >= duration {
                    return Err(ScheduleError::AfterEnd { fault, duration });
                }
            }
        }
        // Per rank, the faults must read: (stop cont | cut heal)* [stop | cut] [kill].
        for (i, &fault) in faults.iter().enumerate() {
            let earlier: Vec<Fault> = faults[..i]
                .iter()
                .filter(|f| f.rank == fault.rank)
                .copied()
                .collect();
            if let Some(&other) = earlier.iter().find(|f| f.at == fault.at) {
                return Err(ScheduleError::SameTime { fault, other });
            }
            if let Some(&kill) = earlier.iter().find(|f| f.kind == FaultKind::Kill) {
                return Err(ScheduleError::AfterKill {
                    fault,
                    earlier: kill,
                });
            }
            let stopped_by = earlier
                .last()
                .filter(|f| matches!(f.kind, FaultKind::Stop | FaultKind::Cut))
                .copied();
            match (fault.kind, stopped_by) {
                (FaultKind::Cont | FaultKind::Heal, open)
                    if open.map(|f| f.kind) != fault.kind.ends() =>
                {
                    return Err(if fault.kind == FaultKind::Cont {
                        ScheduleError::ContWithoutStop { fault }
                    } else {
                        ScheduleError::HealWithoutCut { fault }
                    });
                }
                (FaultKind::Stop | FaultKind::Cut, Some(earlier)) => {
                    return Err(ScheduleError::AlreadyStopped { fault, earlier });
                }
                _ => {}
            }
        }
        Ok(Schedule { faults })
    }

    /// The faults, earliest first.
    pub fn faults(&self) -> &[Fault] {
        &self.faults
    }

    /// When the last fault happens (zero with none).
    pub fn last(&self) -> Duration {
        self.faults.last().map_or(Duration::ZERO, |f| f.at)
    }

    pub fn is_empty(&self) -> bool {
        self.faults.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn f(kind: FaultKind, rank: Rank, at_ms: u64) -> Fault {
        Fault {
            kind,
            rank,
            at: ms(at_ms),
        }
    }

    #[test]
    fn rank_at_parses_with_the_shared_duration_syntax() {
        assert_eq!(
            "3@500ms".parse::<RankAt>(),
            Ok(RankAt {
                rank: 3,
                at: ms(500)
            })
        );
        assert_eq!(
            " 0 @ 1.5s ".parse::<RankAt>(),
            Ok(RankAt {
                rank: 0,
                at: ms(1500)
            })
        );
        let bad = [
            ("3", "has no `@`"),
            ("x@1s", "`x` is not a rank"),
            ("-1@1s", "`-1` is not a rank"),
            ("@1s", "`` is not a rank"),
            ("99999999999@1s", "is too large"),
            ("3@500", "time `500` has no unit"),
            ("3@soon", "time `soon` is not a duration"),
            ("3@", "time `` is empty"),
        ];
        for (text, want) in bad {
            let err = text.parse::<RankAt>().unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
            assert!(err.contains("accepted"), "{text}: {err}");
        }
        assert!(
            "3".parse::<RankAt>()
                .unwrap_err()
                .contains("e.g. `--kill 3@500ms`")
        );
    }

    #[test]
    fn a_schedule_is_sorted_by_time() {
        let s = Schedule::new(
            8,
            [
                f(FaultKind::Kill, 3, 900),
                f(FaultKind::Cont, 5, 700),
                f(FaultKind::Stop, 5, 100),
            ],
            None,
        )
        .unwrap();
        let times: Vec<_> = s.faults().iter().map(|f| f.at).collect();
        assert_eq!(times, [ms(100), ms(700), ms(900)]);
        assert_eq!(s.last(), ms(900));
        assert!(Schedule::new(8, [], None).unwrap().is_empty());
    }

    #[test]
    fn stop_cont_stop_kill_on_one_rank_is_accepted() {
        let s = Schedule::new(
            4,
            [
                f(FaultKind::Stop, 1, 100),
                f(FaultKind::Cont, 1, 200),
                f(FaultKind::Stop, 1, 300),
                f(FaultKind::Kill, 1, 400),
            ],
            Some(ms(500)),
        );
        assert_eq!(s.map(|s| s.faults().len()), Ok(4));
    }

    #[test]
    fn bad_schedules_are_explained() {
        let cases: [(Vec<Fault>, Option<Duration>, &str); 7] = [
            (
                vec![f(FaultKind::Kill, 8, 100)],
                None,
                "--kill 8@100ms: rank 8 is not in the job (ranks 0 to 7)",
            ),
            (
                vec![f(FaultKind::Cont, 2, 100)],
                None,
                "--cont 2@100ms: rank 2 is not stopped then; a --cont needs an earlier --stop 2@TIME",
            ),
            (
                vec![f(FaultKind::Cont, 2, 100), f(FaultKind::Stop, 2, 200)],
                None,
                "--cont 2@100ms: rank 2 is not stopped then",
            ),
            (
                vec![f(FaultKind::Stop, 2, 100), f(FaultKind::Stop, 2, 200)],
                None,
                "--stop 2@200ms: rank 2 is already stopped by --stop 2@100ms",
            ),
            (
                vec![f(FaultKind::Kill, 2, 100), f(FaultKind::Stop, 2, 200)],
                None,
                "--stop 2@200ms: rank 2 is already killed by --kill 2@100ms",
            ),
            (
                vec![f(FaultKind::Stop, 2, 100), f(FaultKind::Kill, 2, 100)],
                None,
                "act on rank 2 at the same time",
            ),
            (
                vec![f(FaultKind::Kill, 1, 2000)],
                Some(ms(2000)),
                "--kill 1@2s is not before the end of the run (--duration 2s)",
            ),
        ];
        for (faults, duration, want) in cases {
            let err = Schedule::new(8, faults.clone(), duration)
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{faults:?}: {err}");
        }
    }
}
