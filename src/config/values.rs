//! The value types of the settings that are the library's own
//! ([`CoreChoice`], [`ProgressMode`], [`SchedPolicy`], [`LocalMode`], [`SourceFilterMode`], [`LogLevel`], [`EagainLimit`]) and
//! the small parsers and range checks the settings table is built from.
//!
//! Owns: each value's words (parse and display) and the problem texts of
//! bad values ("is not recognised", "is out of range", ...). Must not: name
//! a variable or a default (the table in `table.rs` does), or read the
//! environment.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use crate::protocol::duration::{
    DURATION_FORM, DurationError, format_duration, parse_duration,
};

/// Where the progress thread is pinned (`FFD_CORE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CoreChoice {
    /// A core near the NIC, outside the embedder's own binding where possible.
    #[default]
    Auto,
    /// Not pinned: left to the scheduler.
    None,
    /// This logical CPU index.
    Cpu(u32),
}

impl fmt::Display for CoreChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreChoice::Auto => f.write_str("auto"),
            CoreChoice::None => f.write_str("none"),
            CoreChoice::Cpu(cpu) => write!(f, "{cpu}"),
        }
    }
}

impl CoreChoice {
    /// `auto`, `none` or a CPU index, with a problem text for the error.
    pub(super) fn parse(text: &str) -> Result<CoreChoice, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(CoreChoice::Auto),
            "none" => Ok(CoreChoice::None),
            t if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => {
                parse_integer::<u32>(t).map(CoreChoice::Cpu)
            }
            _ => Err(NOT_RECOGNISED.into()),
        }
    }
}

/// A setting whose values are a few words: its words, parsed in any case.
macro_rules! worded {
    ($name:ident { $($variant:ident => $word:literal),+ $(,)? }) => {
        impl $name {
            const WORDS: &[(&str, $name)] = &[$(($word, $name::$variant)),+];
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(text: &str) -> Result<Self, String> {
                let lower = text.trim().to_ascii_lowercase();
                Self::WORDS
                    .iter()
                    .find(|(w, _)| *w == lower)
                    .map(|&(_, v)| v)
                    .ok_or_else(|| NOT_RECOGNISED.to_owned())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let word = Self::WORDS.iter().find(|(_, v)| v == self).map_or("?", |(w, _)| w);
                f.write_str(word)
            }
        }
    };
}

/// How the progress thread waits between deadlines (`FFD_PROGRESS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProgressMode {
    /// Sleep on the completion queue's wait object.
    #[default]
    Sleep,
    /// Poll without sleeping (for those who give the detector a core).
    Spin,
}

worded!(ProgressMode { Sleep => "sleep", Spin => "spin" });

/// The progress thread's scheduling policy (`FFD_SCHED`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SchedPolicy {
    /// The process's normal policy (`SCHED_OTHER`): the thread waits for its
    /// turn like the application's threads.
    Normal,
    /// The normal policy, lifted while it handles a same-host exit or
    /// notice: the exit-word threads (asleep until one comes) run at
    /// `SCHED_FIFO` priority 1 on every allowed CPU, and the one woken
    /// raises the progress thread to the same and lets it run on any
    /// allowed CPU until it has handled it. No cost per period; needs
    /// what `Fifo` needs, and without it is `Normal` (the stats say why).
    #[default]
    Boost,
    /// `SCHED_FIFO` at priority 1, the lowest real-time one: a wake-up
    /// preempts any normal thread at once, so a rank whose threads spin on
    /// every core (MPI polling) still beats and judges on time. Needs
    /// `CAP_SYS_NICE` or an `RLIMIT_RTPRIO` of at least 1; without, the
    /// thread keeps the normal policy and the detector says why.
    Fifo,
}

worded!(SchedPolicy { Normal => "normal", Boost => "boost", Fifo => "fifo" });

/// Whether ranks of one host watch each other locally and share one fabric
/// heartbeat ring of hosts (`FFD_LOCAL`, `docs/design.md` §4.12 "Hosts").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LocalMode {
    /// Host groups: same-host ranks watch each other (exit words and
    /// pidfds for exits, counters in shared memory for hangs); one leader
    /// per host runs the fabric ring.
    #[default]
    Auto,
    /// Host groups as `auto`, but exits through pidfds only (seen once the
    /// kernel has torn the process down): where robust futexes misbehave,
    /// and to test that path.
    Pidfd,
    /// Host groups as `auto`, but without exit words or pidfds: exits too
    /// are found by the counters (in a timeout). For kernels or sandboxes where pidfds
    /// misbehave, and to test the fallback.
    Counters,
    /// Every rank on the fabric ring, as before host groups.
    Off,
}

worded!(LocalMode { Auto => "auto", Pidfd => "pidfd", Counters => "counters", Off => "off" });

/// Whether only the job's own hosts reach the fabric endpoint's listening
/// socket on the socket providers (`FFD_SOURCE_FILTER`; design
/// §5.4 "What the authentication stops"): a kernel filter on the source
/// address, locked after the address exchange.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SourceFilterMode {
    /// On the socket providers (`tcp`, `sockets`, `net`, `udp`) where the
    /// kernel lets this process attach it; where it refuses (an
    /// unprivileged process on kernels that reserve socket filters to
    /// `CAP_NET_ADMIN`), a warning and no filter.
    #[default]
    Auto,
    /// As `auto`, but start-up fails when the filter cannot be attached.
    On,
    /// No filter: anyone who reaches the port reaches libfabric's parser.
    Off,
}

worded!(SourceFilterMode { Auto => "auto", On => "on", Off => "off" });

/// Whether each rank opens a liveness port that its observer watches and
/// probes (`FFD_LIVENESS`; design §4.5 "In-band detection"): a refused
/// connection to it is proof that the rank's process is gone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LivenessMode {
    /// Where the fabric endpoint has an IP address (`tcp`, `sockets`, and
    /// `verbs` over IPoIB) and the kernel lets this process filter the
    /// port's sources; elsewhere none, and the log says why.
    #[default]
    Auto,
    /// No liveness port: a crash with no witness on its host is found by
    /// the fabric's own errors or the timeout.
    Off,
}

worded!(LivenessMode { Auto => "auto", Off => "off" });

/// Log level (`FFD_LOG`), ordered from quietest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    Off,
    Error,
    #[default]
    Warn,
    Info,
    Debug,
}

worded!(LogLevel {
    Off => "off",
    Error => "error",
    Warn => "warn",
    Info => "info",
    Debug => "debug",
});

/// How long a run of refused posts (`-FI_EAGAIN`, `sockets`' `-FI_ENOENT`)
/// to one peer lasts before the peer counts as unreachable
/// (`FFD_EAGAIN_LIMIT`). On `tcp;ofi_rxm` a dead peer's connection refuses
/// every post forever, so on a link that has carried traffic a run of a few
/// periods is strong evidence; a link that never worked gets the start-up
/// grace plus the timeout whatever this says (connection set-up).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EagainLimit {
    /// Three periods, at most the timeout.
    #[default]
    Auto,
    /// The timeout.
    Timeout,
    /// This long.
    After(Duration),
}

impl EagainLimit {
    /// `auto`, `timeout` or a positive duration.
    pub(super) fn parse(text: &str) -> Result<EagainLimit, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(EagainLimit::Auto),
            "timeout" => Ok(EagainLimit::Timeout),
            _ => duration(text).map(EagainLimit::After),
        }
    }

    /// The run length under a period and a timeout.
    pub fn resolve(self, period: Duration, timeout: Duration) -> Duration {
        match self {
            EagainLimit::Auto => (period * 3).min(timeout),
            EagainLimit::Timeout => timeout,
            EagainLimit::After(d) => d,
        }
    }
}

impl fmt::Display for EagainLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EagainLimit::Auto => f.write_str("auto"),
            EagainLimit::Timeout => f.write_str("timeout"),
            EagainLimit::After(d) => f.write_str(&format_duration(*d)),
        }
    }
}

const NOT_RECOGNISED: &str = "is not recognised";

/// A word of `T` (its `FromStr`), every failure being "is not recognised".
pub(super) fn word<T: FromStr>(text: &str) -> Result<T, String> {
    text.parse().map_err(|_| NOT_RECOGNISED.to_owned())
}

/// A duration in the one syntax of [`parse_duration`].
pub(super) fn duration(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

/// The range check of the period, the timeout and an explicit eagain limit.
pub(super) fn positive(d: &Duration) -> Result<(), String> {
    if d.is_zero() {
        Err("must be positive".to_owned())
    } else {
        Ok(())
    }
}

/// `0` or `1` (`FFD_UNSAFE_TIMING`).
pub(super) fn flag(text: &str) -> Result<bool, String> {
    match text.trim() {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(NOT_RECOGNISED.to_owned()),
    }
}

/// `yes` or `no`, in any case (`FFD_DELIVER_OWN`).
pub(super) fn yes_no(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(NOT_RECOGNISED.to_owned()),
    }
}

/// The range check of settings whose every parsed value is valid.
pub(super) fn any<T>(_: &T) -> Result<(), String> {
    Ok(())
}

/// A decimal integer of type `T`, with a problem text for the error.
pub(crate) fn parse_integer<T: FromStr>(text: &str) -> Result<T, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("is empty".into());
    }
    if !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err("is not a non-negative integer".into());
    }
    t.parse().map_err(|_| "is too large".into())
}

/// `None` for "any domain" (empty or `any`), else the trimmed name.
pub(super) fn normalise_domain(d: &str) -> Option<String> {
    let t = d.trim();
    if t.is_empty() || t.eq_ignore_ascii_case("any") {
        None
    } else {
        Some(t.to_owned())
    }
}

/// A libfabric provider name, or several joined by `;` (`tcp;ofi_rxm`).
pub(super) fn check_provider(p: &str) -> Result<(), String> {
    if p.is_empty() {
        return Err("is empty".into());
    }
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | ';' | '-' | '.');
    if p.chars().all(ok) && !p.starts_with(';') && !p.ends_with(';') {
        Ok(())
    } else {
        Err("is not a provider name".into())
    }
}

/// A name without spaces (a domain, a host name), when one is given.
pub(super) fn check_token(t: &Option<String>) -> Result<(), String> {
    match t.as_deref() {
        None => Ok(()),
        Some("") => Err("is empty".into()),
        Some(t) if t.chars().any(|c| c.is_whitespace() || c.is_control()) => {
            Err("contains spaces".into())
        }
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_parse_in_any_case_and_display_back() {
        assert_eq!("SPIN".parse(), Ok(ProgressMode::Spin));
        assert_eq!(" Info ".parse(), Ok(LogLevel::Info));
        assert_eq!(
            "trace".parse::<LogLevel>(),
            Err("is not recognised".to_owned())
        );
        for (w, level) in LogLevel::WORDS {
            assert_eq!(level.to_string(), *w);
        }
        assert_eq!((yes_no(" YES "), yes_no("no")), (Ok(true), Ok(false)));
        assert_eq!(yes_no("1"), Err("is not recognised".to_owned()));
        assert_eq!(CoreChoice::parse("7"), Ok(CoreChoice::Cpu(7)));
        assert_eq!(EagainLimit::parse("Timeout"), Ok(EagainLimit::Timeout));
        let ms = Duration::from_millis;
        assert_eq!(EagainLimit::Auto.resolve(ms(10), ms(100)), ms(30));
        assert_eq!(EagainLimit::Auto.resolve(ms(50), ms(120)), ms(120));
    }
}
