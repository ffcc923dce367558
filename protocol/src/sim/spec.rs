//! Parsing of `ffd sim` arguments: durations (`500us`, `10ms`, `1s`) and
//! fault specifications (`crash:R@T`, ...).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::Rank;
use crate::duration::{self, DURATION_FORM};

/// Parses `500us`, `10ms`, `1s`, `2.5ms`, `100ns` (also `µs`) exactly, as
/// every ffd setting does; the error names the accepted form.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    duration::parse_duration(s).map_err(|e| format!("`{s}` {e}; accepted: {DURATION_FORM}"))
}

/// The accepted fault forms, for error messages.
pub const FAULT_FORMS: &str = "crash:R@T, hang:R@T, resume:R@T, random:K@T, consecutive:R+K@T, \
host:H@T, partition:R[,R...]@T, heal@T, leave:R@T, leave:all@T, allbut:R@T, bcast:R@T, glitch:R>P@T, \
agree@T (T a duration, e.g. 50ms)";

/// What happens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimFaultKind {
    /// The process dies (kill -9): writes to it error (in-band), its slot freezes.
    Crash(Rank),
    /// The process stops (SIGSTOP): silent, messages to it queue up.
    Hang(Rank),
    /// A hung process continues (SIGCONT).
    Resume(Rank),
    /// K distinct ranks, chosen with the run's seed, crash.
    Random(u32),
    /// K ranks adjacent on the ring, starting at rank R, crash.
    Consecutive { first: Rank, count: u32 },
    /// Every rank of host H crashes (ranks are placed on hosts in blocks).
    Host(u32),
    /// These ranks are cut off from all others (messages and writes lost).
    /// The side that is not primary (the smaller, or at an exact half the
    /// one without the lowest live rank) is the faulted one in the report.
    Partition(Vec<Rank>),
    /// The partition ends.
    Heal,
    /// A clean leave.
    Leave(Rank),
    /// Every rank leaves, staggered over one period.
    LeaveAll,
    /// Every rank but R crashes.
    AllBut(Rank),
    /// Rank R broadcasts an application payload.
    Broadcast(Rank),
    /// Rank R sees one spurious transport error about peer P (P is fine).
    Glitch { rank: Rank, peer: Rank },
    /// Every running rank (not excluded, not leaving) starts its next user
    /// agreement; rank r contributes the flags `!(1 << (r % 64))`, so the
    /// decided flags have bit b clear iff some participant r ≡ b (mod 64)
    /// took part.
    Agree,
}

/// A fault at a virtual time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultSpec {
    pub kind: SimFaultKind,
    pub at: Duration,
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.at;
        match &self.kind {
            SimFaultKind::Crash(r) => write!(f, "crash:{r}@{at:?}"),
            SimFaultKind::Hang(r) => write!(f, "hang:{r}@{at:?}"),
            SimFaultKind::Resume(r) => write!(f, "resume:{r}@{at:?}"),
            SimFaultKind::Random(k) => write!(f, "random:{k}@{at:?}"),
            SimFaultKind::Consecutive { first, count } => {
                write!(f, "consecutive:{first}+{count}@{at:?}")
            }
            SimFaultKind::Host(h) => write!(f, "host:{h}@{at:?}"),
            SimFaultKind::Partition(rs) => {
                let list: Vec<String> = rs.iter().map(|r| r.to_string()).collect();
                write!(f, "partition:{}@{at:?}", list.join(","))
            }
            SimFaultKind::Heal => write!(f, "heal@{at:?}"),
            SimFaultKind::Leave(r) => write!(f, "leave:{r}@{at:?}"),
            SimFaultKind::LeaveAll => write!(f, "leave:all@{at:?}"),
            SimFaultKind::AllBut(r) => write!(f, "allbut:{r}@{at:?}"),
            SimFaultKind::Broadcast(r) => write!(f, "bcast:{r}@{at:?}"),
            SimFaultKind::Glitch { rank, peer } => write!(f, "glitch:{rank}>{peer}@{at:?}"),
            SimFaultKind::Agree => write!(f, "agree@{at:?}"),
        }
    }
}

fn number(what: &str, s: &str, spec: &str) -> Result<u32, String> {
    s.trim().parse::<u32>().map_err(|_| {
        format!("`{spec}`: {what} `{s}` is not a non-negative integer; expected {FAULT_FORMS}")
    })
}

impl FromStr for FaultSpec {
    type Err = String;

    fn from_str(spec: &str) -> Result<Self, String> {
        let (head, at) = spec
            .rsplit_once('@')
            .ok_or_else(|| format!("`{spec}` has no `@T` time; expected {FAULT_FORMS}"))?;
        let at = parse_duration(at).map_err(|e| format!("`{spec}`: time {e}"))?;
        let (word, arg) = head.split_once(':').unwrap_or((head, ""));
        let kind = match word.trim() {
            "crash" => SimFaultKind::Crash(number("rank", arg, spec)?),
            "hang" => SimFaultKind::Hang(number("rank", arg, spec)?),
            "resume" => SimFaultKind::Resume(number("rank", arg, spec)?),
            "random" => SimFaultKind::Random(number("count", arg, spec)?),
            "host" => SimFaultKind::Host(number("host", arg, spec)?),
            "allbut" => SimFaultKind::AllBut(number("rank", arg, spec)?),
            "bcast" => SimFaultKind::Broadcast(number("rank", arg, spec)?),
            "heal" if arg.is_empty() => SimFaultKind::Heal,
            "agree" if arg.is_empty() => SimFaultKind::Agree,
            "agree" => {
                return Err(format!(
                    "`{spec}`: agree takes no argument (every running rank agrees); expected {FAULT_FORMS}"
                ));
            }
            "leave" if arg.trim() == "all" => SimFaultKind::LeaveAll,
            "leave" => SimFaultKind::Leave(number("rank", arg, spec)?),
            "consecutive" => {
                let (r, k) = arg.split_once('+').ok_or_else(|| {
                    format!("`{spec}`: consecutive needs R+K; expected {FAULT_FORMS}")
                })?;
                SimFaultKind::Consecutive {
                    first: number("rank", r, spec)?,
                    count: number("count", k, spec)?,
                }
            }
            "glitch" => {
                let (r, p) = arg
                    .split_once('>')
                    .ok_or_else(|| format!("`{spec}`: glitch needs R>P; expected {FAULT_FORMS}"))?;
                SimFaultKind::Glitch {
                    rank: number("rank", r, spec)?,
                    peer: number("rank", p, spec)?,
                }
            }
            "partition" => {
                let ranks = arg
                    .split(',')
                    .map(|r| number("rank", r, spec))
                    .collect::<Result<Vec<_>, _>>()?;
                SimFaultKind::Partition(ranks)
            }
            other => {
                return Err(format!(
                    "`{spec}`: unknown fault `{other}`; expected {FAULT_FORMS}"
                ));
            }
        };
        Ok(FaultSpec { kind, at })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500us"), Ok(Duration::from_micros(500)));
        assert_eq!(parse_duration("10ms"), Ok(Duration::from_millis(10)));
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("2.5ms"), Ok(Duration::from_micros(2500)));
        assert_eq!(parse_duration("2µs"), Ok(Duration::from_micros(2)));
        assert!(parse_duration("10").unwrap_err().contains("no unit"));
        let err = parse_duration("10parsecs").unwrap_err();
        assert!(err.contains("`10parsecs` is not a duration"), "{err}");
        assert!(err.contains("accepted: a number with a unit"), "{err}");
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("1e99s").is_err());
        assert!(parse_duration("-1ms").is_err());
    }

    #[test]
    fn faults() {
        let f: FaultSpec = "crash:7@50ms".parse().unwrap();
        assert_eq!(
            f,
            FaultSpec {
                kind: SimFaultKind::Crash(7),
                at: Duration::from_millis(50)
            }
        );
        assert_eq!(
            "consecutive:3+4@1s".parse::<FaultSpec>().unwrap().kind,
            SimFaultKind::Consecutive { first: 3, count: 4 }
        );
        assert_eq!(
            "partition:1,5@1s".parse::<FaultSpec>().unwrap().kind,
            SimFaultKind::Partition(vec![1, 5])
        );
        assert_eq!(
            "heal@2s".parse::<FaultSpec>().unwrap().kind,
            SimFaultKind::Heal
        );
        assert_eq!(
            "leave:all@2s".parse::<FaultSpec>().unwrap().kind,
            SimFaultKind::LeaveAll
        );
        for agree in ["agree@5ms", "agree:@5ms"] {
            let f = agree.parse::<FaultSpec>().unwrap();
            assert_eq!(f.kind, SimFaultKind::Agree);
            assert_eq!(f.to_string().parse::<FaultSpec>().unwrap(), f);
        }
        for bad in [
            "crash:7",
            "crash:x@1s",
            "boom:1@1s",
            "consecutive:3@1s",
            "agree:7@1s",
            "crash:1@1",
            "random:-1@1s",
        ] {
            let e = bad.parse::<FaultSpec>().unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
        let f: FaultSpec = "hang:3@20ms".parse().unwrap();
        assert_eq!(f.to_string().parse::<FaultSpec>().unwrap(), f);
    }
}
