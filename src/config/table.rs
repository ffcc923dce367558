//! The settings table: every `FFD_*` variable, written once, with its
//! builder name, accepted form, help line, default, parser, range check and
//! display. [`settings_table!`](super::descriptor) derives the rest from
//! it: `var::*`, `setting::*`, [`VARIABLES`], the fields, accessors and
//! setters of [`Config`] and [`ConfigBuilder`], `ffd info`'s lines, the
//! environment's resolution and the C API's setters and getters. The
//! table of docs/configuration.md is generated from it (`tests/readme.rs`).
//!
//! Owns: the list and its order (the order of `ffd info` and of the first
//! error reported). Must not: restate a default the protocol owns (those
//! are `EngineConfig::DEFAULT_*` and the enums' `#[default]`), or parse
//! anything by hand (the parsers live in `values.rs`).

use std::time::Duration;

use super::builder::Resolver;
use super::descriptor::{Setting, Sourced, Variable, View, settings_table};
use super::values::{
    CoreChoice, DURATION_FORM, EagainLimit, LivenessMode, LocalMode, LogLevel, ProgressMode,
    SchedPolicy, SourceFilterMode, any, check_provider, check_token, duration, flag,
    format_duration, normalise_domain, parse_integer, positive, word, yes_no,
};
use super::{Config, ConfigBuilder, ConfigError, SettingInfo, Source};
use crate::protocol::{BcastKind, EngineConfig, InbandMode, QuorumMode, RingKind};

/// Largest `FFD_EVENT_QUEUE`.
pub const MAX_EVENT_QUEUE: usize = 1 << 20;

/// The shortest heartbeat period accepted without `FFD_UNSAFE_TIMING=1`.
/// Each period costs an RDMA write, and the observer's checks and the
/// progress thread's wake-ups scale with it: below 100 µs the detector
/// takes a core and the fabric's attention from the application, and the lag of a
/// loaded machine (tens of µs to ms) is several periods.
pub const MIN_PERIOD: Duration = Duration::from_micros(100);

/// The longest timeout accepted without `FFD_UNSAFE_TIMING=1`. A failure
/// goes unreported for a timeout: beyond 10 minutes a hung job is noticed
/// sooner by a person or by the batch system's time limit than by ffd, so
/// such a value is a unit slip (`600000s`, nanoseconds meant as µs) that
/// effectively disables detection (`FFD_TIMEOUT=18446744073709551615ns` is
/// 584 years).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);

settings_table! {
    settings {
        provider: String => &str {
            var: PROVIDER = "FFD_PROVIDER",
            accepted: "a libfabric provider name, e.g. `tcp`, `tcp;ofi_rxm`, `verbs;ofi_rxm`, `shm`",
            help: "The libfabric provider of the detector's own endpoint",
            default: "tcp".to_owned(),
            parse: |text| Ok(text.trim().to_owned()),
            check: |provider| check_provider(provider),
            show: String::clone,
            set(provider: impl Into<String>) => provider.into(),
        }
        /// `None` for any; given in code, `""` and `"any"` also mean any.
        domain: Option<String> => Option<&str> {
            var: DOMAIN = "FFD_DOMAIN",
            accepted: "a fabric domain or interface name, e.g. `lo`, `mlx5_0`; empty or `any` for any",
            help: "The fabric domain (NIC) to open",
            default: None,
            parse: |text| Ok(normalise_domain(text)),
            check: check_token,
            show: |domain| domain.clone().unwrap_or_else(|| "any".to_owned()),
            set(domain: impl Into<String>) => normalise_domain(&domain.into()),
        }
        period: Duration => Duration {
            var: PERIOD = "FFD_PERIOD",
            accepted: DURATION_FORM,
            help: "The heartbeat period",
            job_wide: true,
            default: EngineConfig::DEFAULT_PERIOD,
            parse: duration,
            check: positive,
            show: |d| format_duration(*d),
            set(period: Duration) => period,
        }
        timeout: Duration => Duration {
            var: TIMEOUT = "FFD_TIMEOUT",
            accepted: DURATION_FORM,
            help: "The silence after which an emitter is declared failed; must exceed the period",
            job_wide: true,
            default: EngineConfig::DEFAULT_TIMEOUT,
            parse: duration,
            check: positive,
            show: |d| format_duration(*d),
            set(timeout: Duration) => timeout,
        }
        /// Whether the safe ranges of the period and timeout are lifted.
        unsafe_timing: bool => bool {
            var: UNSAFE_TIMING = "FFD_UNSAFE_TIMING",
            accepted: "0|1",
            help: "1 accepts a period under 100us or a timeout over 600s (for experts: see docs/configuration.md)",
            default: false,
            parse: flag,
            check: any,
            show: |on| if *on { "1" } else { "0" }.to_owned(),
            set(unsafe_timing: bool) => unsafe_timing,
        }
        inband: InbandMode => InbandMode {
            var: INBAND = "FFD_INBAND",
            accepted: InbandMode::ACCEPTED,
            help: "What a transport error on the heartbeat link means",
            job_wide: true,
            default: InbandMode::default(),
            parse: word,
            check: any,
            show: ToString::to_string,
            set(inband: InbandMode) => inband,
        }
        quorum: QuorumMode => QuorumMode {
            var: QUORUM = "FFD_QUORUM",
            accepted: QuorumMode::ACCEPTED,
            help: "Whether a silent rank is declared only once a majority confirms it \
                   (majority: a side of a partition without one excludes itself)",
            job_wide: true,
            default: QuorumMode::default(),
            parse: word,
            check: any,
            show: ToString::to_string,
            set(quorum: QuorumMode) => quorum,
        }
        bcast: BcastKind => BcastKind {
            var: BCAST = "FFD_BCAST",
            accepted: BcastKind::ACCEPTED,
            help: "The overlay that broadcasts failure notices",
            job_wide: true,
            default: BcastKind::default(),
            parse: word,
            check: any,
            show: ToString::to_string,
            set(bcast: BcastKind) => bcast,
        }
        ring: RingKind => RingKind {
            var: RING = "FFD_RING",
            accepted: RingKind::ACCEPTED,
            help: "The order of the observation ring",
            job_wide: true,
            default: RingKind::default(),
            parse: word,
            check: any,
            show: ToString::to_string,
            set(ring: RingKind) => ring,
        }
        /// The seed rank 0 proposes; `None` means rank 0 draws one at random.
        ring_seed: Option<u64> => Option<u64> {
            var: RING_SEED = "FFD_RING_SEED",
            accepted: "an unsigned 64-bit integer, e.g. `42`",
            help: "The seed of the `shuffle` ring (rank 0's value is used)",
            default: None,
            parse: |text| parse_integer(text).map(Some),
            check: any,
            show: |seed| seed.map_or_else(|| "random".to_owned(), |s| s.to_string()),
            set(seed: u64) => Some(seed),
        }
        core: CoreChoice => CoreChoice {
            var: CORE = "FFD_CORE",
            accepted: "auto|none|<cpu index>, e.g. `3`",
            help: "The core the progress thread is pinned to",
            default: CoreChoice::Auto,
            parse: CoreChoice::parse,
            check: any,
            show: ToString::to_string,
            set(core: CoreChoice) => core,
        }
        progress: ProgressMode => ProgressMode {
            var: PROGRESS = "FFD_PROGRESS",
            accepted: "sleep|spin",
            help: "How the progress thread waits between deadlines",
            default: ProgressMode::Sleep,
            parse: word,
            check: any,
            show: ToString::to_string,
            set(progress: ProgressMode) => progress,
        }
        sched: SchedPolicy => SchedPolicy {
            var: SCHED = "FFD_SCHED",
            accepted: "normal|boost|fifo",
            help: "The progress thread's scheduling policy; boost: normal, lifted to \
                   SCHED_FIFO priority 1 on any allowed CPU while it handles a same-host \
                   exit or notice, and held at it on its own CPU while an agreement is \
                   under way; fifo: SCHED_FIFO priority 1 always, so its wake-ups \
                   preempt application threads spinning on every core (both need \
                   CAP_SYS_NICE or RLIMIT_RTPRIO >= 1, else normal and the stats say why)",
            default: SchedPolicy::Boost,
            parse: word,
            check: any,
            show: ToString::to_string,
            set(sched: SchedPolicy) => sched,
        }
        local: LocalMode => LocalMode {
            var: LOCAL = "FFD_LOCAL",
            accepted: "auto|pidfd|counters|off",
            help: "Same-host ranks watch each other (exit words, pidfd, shared-memory \
                   counters) and one leader per host heartbeats over the fabric; pidfd: \
                   without exit words; counters: without exit words or pidfds; off: every \
                   rank heartbeats over the fabric",
            job_wide: true,
            default: LocalMode::Auto,
            parse: word,
            check: any,
            show: ToString::to_string,
            set(local: LocalMode) => local,
        }
        source_filter: SourceFilterMode => SourceFilterMode {
            var: SOURCE_FILTER = "FFD_SOURCE_FILTER",
            accepted: "auto|on|off",
            help: "On the socket providers (tcp, sockets, net, udp), only the job's own host \
                   addresses reach the endpoint's listening socket (a kernel filter on the \
                   source address, locked after the address exchange); auto: a warning and no \
                   filter where the kernel refuses it; on: start-up fails then; off: anyone \
                   who reaches the port reaches libfabric",
            default: SourceFilterMode::Auto,
            parse: word,
            check: any,
            show: ToString::to_string,
            set(source_filter: SourceFilterMode) => source_filter,
        }
        liveness: LivenessMode => LivenessMode {
            var: LIVENESS = "FFD_LIVENESS",
            accepted: "auto|off",
            help: "Each rank listens on a small TCP port at its fabric address's IP (filtered \
                   like the fabric port) that its observer keeps a connection to; when that \
                   connection ends, the observer connects again, and a refusal from the \
                   peer's kernel is proof that the process is gone (a stopped or slow process \
                   is never refused); auto: where the endpoint has an IP address; off: none",
            default: LivenessMode::Auto,
            parse: word,
            check: any,
            show: ToString::to_string,
            set(liveness: LivenessMode) => liveness,
        }
        log: LogLevel => LogLevel {
            var: LOG = "FFD_LOG",
            accepted: "off|error|warn|info|debug",
            help: "The log level (to stderr)",
            default: LogLevel::Warn,
            parse: word,
            check: any,
            show: ToString::to_string,
            set(level: LogLevel) => level,
        }
        event_queue: usize => usize {
            var: EVENT_QUEUE = "FFD_EVENT_QUEUE",
            accepted: "an integer from 1 to 1048576, e.g. `1024`",
            help: "The capacity of the pollable event queue",
            default: 1024,
            parse: parse_integer,
            check: |&n| {
                if (1..=MAX_EVENT_QUEUE).contains(&n) {
                    Ok(())
                } else {
                    Err("is out of range".to_owned())
                }
            },
            show: ToString::to_string,
            set(capacity: usize) => capacity,
        }
        /// Whether this rank's own broadcasts come back to it as payload
        /// events (`EngineConfig::deliver_own`).
        deliver_own: bool => bool {
            var: DELIVER_OWN = "FFD_DELIVER_OWN",
            accepted: "yes|no",
            help: "Whether this rank's own broadcasts are delivered to it too, as payload events",
            default: EngineConfig::default().deliver_own,
            parse: yes_no,
            check: any,
            show: |own| if *own { "yes" } else { "no" }.to_owned(),
            set(deliver_own: bool) => deliver_own,
        }
        // Its accessor, `Config::eagain_limit`, resolves `auto` and `timeout`.
        eagain_limit: EagainLimit {
            var: EAGAIN_LIMIT = "FFD_EAGAIN_LIMIT",
            accepted: "`auto`, `timeout`, or a number with a unit ns|us|ms|s, e.g. `50ms`",
            help: "The run of -FI_EAGAIN on posts to a peer after which it is unreachable \
                   (auto: 3 periods, at most the timeout)",
            default: EagainLimit::Auto,
            parse: EagainLimit::parse,
            check: |limit| match limit {
                EagainLimit::After(d) => positive(d),
                EagainLimit::Auto | EagainLimit::Timeout => Ok(()),
            },
            show: ToString::to_string,
            shown: |limit, config| match limit {
                EagainLimit::After(d) => format_duration(*d),
                word => format!("{word} ({})", format_duration(config.eagain_limit())),
            },
            set(limit: Duration) => EagainLimit::After(limit),
        }
        /// Time after start before an emitter's silence counts against it.
        startup_grace: Duration => Duration {
            var: STARTUP_GRACE = "FFD_STARTUP_GRACE",
            accepted: DURATION_FORM,
            help: "The extra time at start for an emitter never heard from (connection set-up)",
            default: EngineConfig::DEFAULT_STARTUP_GRACE,
            parse: duration,
            check: any,
            show: |d| format_duration(*d),
            set(grace: Duration) => grace,
        }
        /// Own health awareness (`docs/design.md` §4.3 "Timeout").
        health_max: usize => usize {
            var: HEALTH_MAX = "FFD_HEALTH_MAX",
            accepted: "an integer from 1 to 16, e.g. `4`",
            help: "The most timeouts a rank whose own wake-ups run late waits before \
                   declaring its emitter (own health awareness; 1: never stretch)",
            default: EngineConfig::DEFAULT_HEALTH_MAX as usize,
            parse: parse_integer,
            check: |&n| {
                if (1..=EngineConfig::MAX_HEALTH as usize).contains(&n) {
                    Ok(())
                } else {
                    Err("is out of range".to_owned())
                }
            },
            show: ToString::to_string,
            set(health_max: usize) => health_max,
        }
        /// `None` means this machine's hostname (tests set one to fake several nodes).
        hostname: Option<String> => Option<&str> {
            var: HOSTNAME = "FFD_HOSTNAME",
            accepted: "a host name without spaces, e.g. `node17`",
            help: "The host identity used by the `topology` ring",
            default: None,
            parse: |text| Ok(Some(text.trim().to_owned())),
            check: check_token,
            show: |host| host.clone().unwrap_or_else(|| "(this machine's)".to_owned()),
            set(hostname: impl Into<String>) => Some(hostname.into()),
        }
    }
    bootstrap_variables {
        BOOTSTRAP = "FFD_BOOTSTRAP" {
            accepted: "host:port of an `ffd rendezvous`, e.g. `127.0.0.1:5000`",
            help: "The TCP rendezvous for the address exchange",
            default: "unset",
        }
        RANK = "FFD_RANK" {
            accepted: "an integer below FFD_SIZE",
            help: "This process's rank (with FFD_BOOTSTRAP)",
            default: "unset",
        }
        SIZE = "FFD_SIZE" {
            accepted: "an integer from 1 to 4294967295",
            help: "The number of ranks (with FFD_BOOTSTRAP)",
            default: "unset",
        }
        SECRET_FILE = "FFD_SECRET_FILE" {
            accepted: crate::bootstrap::secret::SECRET_FILE_FORM,
            help: "The file holding the job's secret (`ffd run` and `ffd rendezvous` write one)",
            default: "unset",
        }
        // `crate::bootstrap::tcp::DEFAULT_TIMEOUT` (a test checks they agree).
        BOOTSTRAP_TIMEOUT = "FFD_BOOTSTRAP_TIMEOUT" {
            accepted: DURATION_FORM,
            help: "The bound on every wait of the TCP and PMIx bootstraps",
            default: "60s",
        }
    }
}

/// Looks a variable up by name.
pub fn variable(name: &str) -> Option<&'static Variable> {
    VARIABLES.iter().find(|v| v.name == name)
}

/// The safe ranges of the period ([`MIN_PERIOD`]) and the timeout
/// ([`MAX_TIMEOUT`]), unless `FFD_UNSAFE_TIMING=1` lifts them. The error
/// names the value, its origin and the accepted range.
pub(super) fn check_safe_timing(
    period: &Sourced<Duration>,
    timeout: &Sourced<Duration>,
    unsafe_timing: bool,
) -> Result<(), ConfigError> {
    if unsafe_timing {
        return Ok(());
    }
    let unsafe_value = |value: String, range: String| ConfigError::UnsafeTiming {
        value,
        range,
        unlock: var::UNSAFE_TIMING,
    };
    if period.value < MIN_PERIOD {
        return Err(unsafe_value(
            setting::PERIOD.origin(period),
            format!(
                "a period of at least {} (a shorter one takes a core in heartbeats and wake-ups)",
                format_duration(MIN_PERIOD)
            ),
        ));
    }
    if timeout.value > MAX_TIMEOUT {
        return Err(unsafe_value(
            setting::TIMEOUT.origin(timeout),
            format!(
                "a timeout of at most {} (a longer one effectively disables detection)",
                format_duration(MAX_TIMEOUT)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn every_variable_is_listed_once() {
        let names: BTreeSet<_> = VARIABLES.iter().map(|v| v.name).collect();
        assert_eq!(names.len(), VARIABLES.len());
        assert!(names.iter().all(|n| n.starts_with("FFD_")));
    }

    #[test]
    fn the_texts_agree_with_the_checks() {
        assert_eq!(
            setting::EVENT_QUEUE.accepted,
            format!("an integer from 1 to {MAX_EVENT_QUEUE}, e.g. `1024`")
        );
        assert_eq!(
            setting::LOCAL.accepted,
            [
                LocalMode::Auto,
                LocalMode::Pidfd,
                LocalMode::Counters,
                LocalMode::Off
            ]
            .map(|m| m.to_string())
            .join("|")
        );
        assert_eq!(
            setting::SOURCE_FILTER.accepted,
            [
                SourceFilterMode::Auto,
                SourceFilterMode::On,
                SourceFilterMode::Off,
            ]
            .map(|m| m.to_string())
            .join("|")
        );
        assert_eq!(
            setting::HEALTH_MAX.accepted,
            format!(
                "an integer from 1 to {}, e.g. `{}`",
                EngineConfig::MAX_HEALTH,
                EngineConfig::DEFAULT_HEALTH_MAX
            )
        );
        assert_eq!(
            setting::PROGRESS.accepted,
            [ProgressMode::Sleep, ProgressMode::Spin]
                .map(|p| p.to_string())
                .join("|")
        );
        assert_eq!(
            setting::SCHED.accepted,
            [SchedPolicy::Normal, SchedPolicy::Boost, SchedPolicy::Fifo]
                .map(|p| p.to_string())
                .join("|")
        );
        let levels = [
            LogLevel::Off,
            LogLevel::Error,
            LogLevel::Warn,
            LogLevel::Info,
            LogLevel::Debug,
        ];
        assert_eq!(
            setting::LOG.accepted,
            levels.map(|l| l.to_string()).join("|")
        );
        assert_eq!(
            variable(var::BOOTSTRAP_TIMEOUT).map(Variable::default_text),
            Some(format_duration(crate::bootstrap::tcp::DEFAULT_TIMEOUT))
        );
        let unsafe_help = setting::UNSAFE_TIMING.help;
        assert!(unsafe_help.contains(&format!("under {}", format_duration(MIN_PERIOD))));
        assert!(unsafe_help.contains(&format!("over {}", format_duration(MAX_TIMEOUT))));
        let defaults = EngineConfig::default();
        assert!(defaults.period >= MIN_PERIOD && defaults.timeout <= MAX_TIMEOUT);
    }

    #[test]
    fn every_default_is_accepted_by_its_own_variable() {
        // A default shown as a value parses back; the others are words for
        // "unset" (`random`, `(this machine's)`).
        let unset_words = ["random", "(this machine's)"];
        let mut settings = 0;
        for v in VARIABLES {
            let text = v.default_text();
            let Some(parsed) = ConfigBuilder::default().set_var(v.name, &text) else {
                continue; // read by the bootstrap
            };
            settings += 1;
            assert!(
                parsed.is_ok() || unset_words.contains(&text.as_str()),
                "{}: {text}",
                v.name
            );
        }
        assert_eq!(settings, Config::default().settings().len());
    }
}
