//! The detector's runtime settings: the `FFD_*` environment variables, the
//! builder that takes the same settings in code, and where each effective
//! value came from (for `ffd info`).
//!
//! Owns: parsing and validating every setting, the list of known `FFD_*`
//! variables (unknown ones are warned about), and duration syntax.
//! Must not: read the process environment anywhere but [`Env::process`] (tests
//! pass an [`Env`] built from pairs, so no test mutates the environment),
//! start threads, or touch the fabric.
//!
//! Precedence is the host's choice, given as an [`EnvPolicy`]:
//! `Override` (environment beats code beats defaults; what HPC users expect)
//! or `Fill` (code beats environment beats defaults). [`ConfigBuilder::build`]
//! ignores the environment altogether.
//!
//! Durations are a number with a unit, `ns`, `us` (or `µs`), `ms` or `s`, with
//! an optional fraction (`1.5s`, `0.5ms`); a bare number is rejected because
//! a silent unit is the classic tuning mistake. The period must be positive
//! and the timeout must exceed it (an error); a timeout shorter than three
//! periods is accepted with a warning, since one late heartbeat then suffices
//! for a false positive.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

pub use crate::protocol::duration::{
    DURATION_FORM, DurationError, format_duration, parse_duration,
};
use crate::protocol::{BcastKind, EngineConfig, InbandMode, RingKind};

/// Largest `FFD_EVENT_QUEUE`.
pub const MAX_EVENT_QUEUE: usize = 1 << 20;

/// A timeout shorter than this many periods draws a [`ConfigWarning::ShortTimeout`].
pub const SAFE_TIMEOUT_PERIODS: u32 = 3;

/// One `FFD_*` variable: its name, accepted form and default, as printed by
/// `ffd info` and the README.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variable {
    pub name: &'static str,
    pub accepted: &'static str,
    pub default: &'static str,
    pub meaning: &'static str,
}

macro_rules! variables {
    ($($id:ident = $name:literal, $accepted:expr, $default:literal, $meaning:literal;)+) => {
        /// Names of the known variables, as constants.
        pub mod var {
            $(pub const $id: &str = $name;)+
        }
        /// Every variable ffd reads, in the order `ffd info` prints them.
        pub const VARIABLES: &[Variable] = &[
            $(Variable { name: $name, accepted: $accepted, default: $default, meaning: $meaning },)+
        ];
    };
}

variables! {
    PROVIDER = "FFD_PROVIDER", "a libfabric provider name, e.g. `tcp`, `tcp;ofi_rxm`, `verbs;ofi_rxm`, `shm`",
        "tcp", "libfabric provider of the detector's own endpoint";
    DOMAIN = "FFD_DOMAIN", "a fabric domain or interface name, e.g. `lo`, `mlx5_0`; empty or `any` for any",
        "any", "fabric domain (NIC) to open";
    PERIOD = "FFD_PERIOD", DURATION_FORM, "10ms", "heartbeat period";
    TIMEOUT = "FFD_TIMEOUT", DURATION_FORM, "100ms", "silence after which an emitter is declared failed; must exceed the period";
    INBAND = "FFD_INBAND", InbandMode::ACCEPTED, "declare", "what a transport error on the heartbeat link means";
    BCAST = "FFD_BCAST", BcastKind::ACCEPTED, "bmg", "overlay that broadcasts failure notices";
    RING = "FFD_RING", RingKind::ACCEPTED, "topology", "order of the observation ring";
    RING_SEED = "FFD_RING_SEED", "an unsigned 64-bit integer, e.g. `42`", "random",
        "seed of the `shuffle` ring (rank 0's value is used)";
    CORE = "FFD_CORE", "auto|none|<cpu index>, e.g. `3`", "auto", "core the progress thread is pinned to";
    PROGRESS = "FFD_PROGRESS", "sleep|spin", "sleep", "how the progress thread waits between deadlines";
    LOG = "FFD_LOG", "off|error|warn|info|debug", "warn", "log level (to stderr)";
    EVENT_QUEUE = "FFD_EVENT_QUEUE", "an integer from 1 to 1048576, e.g. `1024`", "1024",
        "capacity of the pollable event queue";
    EAGAIN_LIMIT = "FFD_EAGAIN_LIMIT", "`auto`, `timeout`, or a number with a unit ns|us|ms|s, e.g. `50ms`", "auto",
        "run of -FI_EAGAIN on posts to a peer after which it is unreachable (auto: 3 periods, at most the timeout)";
    STARTUP_GRACE = "FFD_STARTUP_GRACE", DURATION_FORM, "1s",
        "extra time at start for an emitter never heard from (connection set-up)";
    HOSTNAME = "FFD_HOSTNAME", "a host name without spaces, e.g. `node17`", "this machine's",
        "host identity used by the `topology` ring";
    BOOTSTRAP = "FFD_BOOTSTRAP", "host:port of an `ffd rendezvous`, e.g. `127.0.0.1:5000`", "unset",
        "TCP rendezvous for the address exchange";
    RANK = "FFD_RANK", "an integer below FFD_SIZE", "unset", "this process's rank (with FFD_BOOTSTRAP)";
    SIZE = "FFD_SIZE", "an integer from 1 to 4294967295", "unset", "number of ranks (with FFD_BOOTSTRAP)";
    BOOTSTRAP_TIMEOUT = "FFD_BOOTSTRAP_TIMEOUT", DURATION_FORM, "60s",
        "bound on every wait of the TCP and PMIx bootstraps";
}

/// Looks a variable up by name.
pub fn variable(name: &str) -> Option<&'static Variable> {
    VARIABLES.iter().find(|v| v.name == name)
}

/// Where a setting's effective value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    Default,
    /// Set with the builder.
    Code,
    /// Read from this environment variable.
    Env(&'static str),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Code => f.write_str("code"),
            Source::Env(var) => write!(f, "env {var}"),
        }
    }
}

/// Whether the environment may override settings made in code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EnvPolicy {
    /// Environment beats code beats defaults.
    #[default]
    Override,
    /// Code beats environment beats defaults; an environment variable shadowed
    /// by code draws a [`ConfigWarning::Ignored`].
    Fill,
}

/// The `FFD_*` variables of an environment, captured once.
///
/// [`Env::process`] reads the process environment; tests build one with
/// [`Env::from_pairs`]. Names are kept when they start with `FFD_` in any
/// case, so that `ffd_period` draws a warning rather than silence.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Env {
    vars: BTreeMap<String, String>,
    not_utf8: BTreeSet<String>,
}

impl Env {
    /// The `FFD_*` variables of this process's environment.
    pub fn process() -> Env {
        let mut env = Env::default();
        for (name, value) in std::env::vars_os() {
            let name = name.to_string_lossy().into_owned();
            if !is_ffd_name(&name) {
                continue;
            }
            match value.into_string() {
                Ok(value) => {
                    env.vars.insert(name, value);
                }
                Err(value) => {
                    env.not_utf8.insert(name.clone());
                    env.vars.insert(name, value.to_string_lossy().into_owned());
                }
            }
        }
        env
    }

    /// An environment holding these variables (others than `FFD_*` are dropped).
    pub fn from_pairs<I, K, V>(pairs: I) -> Env
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let mut env = Env::default();
        for (name, value) in pairs {
            let name = name.into();
            if is_ffd_name(&name) {
                env.vars.insert(name, value.into());
            }
        }
        env
    }

    /// The raw value of a variable, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Every captured `FFD_*` variable, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The value of a known variable, or an error if it is not valid UTF-8.
    pub(crate) fn value(&self, var: &'static str) -> Result<Option<&str>, ConfigError> {
        match self.vars.get(var) {
            None => Ok(None),
            Some(value) if self.not_utf8.contains(var) => Err(ConfigError::Invalid {
                var,
                value: value.clone(),
                problem: "is not valid UTF-8".into(),
                accepted: accepted_of(var),
            }),
            Some(value) => Ok(Some(value)),
        }
    }

    /// Warnings for every `FFD_*` name that is not a known variable.
    pub fn unknown_variables(&self) -> Vec<ConfigWarning> {
        self.vars
            .keys()
            .filter(|name| variable(name).is_none())
            .map(|name| ConfigWarning::UnknownVariable {
                name: name.clone(),
                suggestion: closest_variable(name),
            })
            .collect()
    }
}

fn is_ffd_name(name: &str) -> bool {
    name.len() >= 4 && name[..4].eq_ignore_ascii_case("FFD_")
}

fn accepted_of(var: &'static str) -> &'static str {
    variable(var).map_or("", |v| v.accepted)
}

/// The known variable closest to `name` (case-insensitive edit distance ≤ 3).
fn closest_variable(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    VARIABLES
        .iter()
        .map(|v| (edit_distance(&upper, v.name), v.name))
        .filter(|&(d, _)| d <= 3)
        .min_by_key(|&(d, _)| d)
        .map(|(_, n)| n)
}

/// Levenshtein distance over bytes (variable names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, &ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// A setting could not be accepted. Each message names the variable (or the
/// builder setting), the bad value and the accepted form.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// An environment variable's value is not accepted.
    #[error("{var}=`{value}` {problem}; accepted: {accepted}")]
    Invalid {
        var: &'static str,
        value: String,
        problem: String,
        accepted: &'static str,
    },
    /// A value given to the builder is not accepted.
    #[error("{setting} `{value}` set in code {problem}; accepted: {accepted}")]
    InvalidInCode {
        setting: &'static str,
        value: String,
        problem: String,
        accepted: &'static str,
    },
    /// A required variable is not set.
    #[error("{var} is not set; accepted: {accepted}")]
    Missing {
        var: &'static str,
        accepted: &'static str,
    },
    /// The timeout does not exceed the period. Both are shown with their origin.
    #[error("the timeout must exceed the period: {timeout} is not above {period}")]
    TimeoutNotAbovePeriod { timeout: String, period: String },
}

/// Something accepted but probably not meant. `Display` is one line for a log.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigWarning {
    #[error("{name} is not an ffd variable and is ignored{}", did_you_mean(.suggestion))]
    UnknownVariable {
        name: String,
        suggestion: Option<&'static str>,
    },
    #[error("{var}=`{value}` is ignored: the application sets this setting in code")]
    Ignored { var: &'static str, value: String },
    #[error(
        "the timeout {} is less than {SAFE_TIMEOUT_PERIODS} periods of {}: one late heartbeat may cause a false positive",
        format_duration(*.timeout), format_duration(*.period)
    )]
    ShortTimeout { timeout: Duration, period: Duration },
}

fn did_you_mean(suggestion: &Option<&'static str>) -> String {
    suggestion.map_or_else(String::new, |s| format!(" (did you mean {s}?)"))
}

/// Where the progress thread is pinned (`FFD_CORE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CoreChoice {
    /// A core near the NIC, outside the host's own binding where possible.
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

/// How the progress thread waits between deadlines (`FFD_PROGRESS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProgressMode {
    /// Sleep on the completion queue's wait object.
    #[default]
    Sleep,
    /// Poll without sleeping (for those who give the detector a core).
    Spin,
}

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

fn word_of<T: Copy + PartialEq>(table: &[(&'static str, T)], value: T) -> &'static str {
    table
        .iter()
        .find(|(_, v)| *v == value)
        .map_or("?", |(w, _)| w)
}

fn parse_word<T: Copy>(table: &[(&'static str, T)], text: &str) -> Result<T, String> {
    let lower = text.trim().to_ascii_lowercase();
    table
        .iter()
        .find(|(w, _)| *w == lower)
        .map(|&(_, v)| v)
        .ok_or_else(|| "is not recognised".to_owned())
}

const PROGRESS_WORDS: &[(&str, ProgressMode)] =
    &[("sleep", ProgressMode::Sleep), ("spin", ProgressMode::Spin)];
const LOG_WORDS: &[(&str, LogLevel)] = &[
    ("off", LogLevel::Off),
    ("error", LogLevel::Error),
    ("warn", LogLevel::Warn),
    ("info", LogLevel::Info),
    ("debug", LogLevel::Debug),
];

impl fmt::Display for ProgressMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(word_of(PROGRESS_WORDS, *self))
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(word_of(LOG_WORDS, *self))
    }
}

/// One effective setting, as `ffd info` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingInfo {
    /// The builder's name for it, e.g. `period`.
    pub name: &'static str,
    /// Its environment variable, e.g. `FFD_PERIOD`.
    pub var: &'static str,
    /// The effective value, in a form the variable accepts.
    pub value: String,
    pub source: Source,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Setting<T> {
    value: T,
    source: Source,
}

/// The detector's effective settings. Build with [`Config::builder`],
/// [`Config::from_env`] or [`Config::from_env_with`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    provider: Setting<String>,
    domain: Setting<Option<String>>,
    period: Setting<Duration>,
    timeout: Setting<Duration>,
    inband: Setting<InbandMode>,
    bcast: Setting<BcastKind>,
    ring: Setting<RingKind>,
    ring_seed: Setting<Option<u64>>,
    core: Setting<CoreChoice>,
    progress: Setting<ProgressMode>,
    log: Setting<LogLevel>,
    event_queue: Setting<usize>,
    eagain_limit: Setting<EagainLimit>,
    startup_grace: Setting<Duration>,
    hostname: Setting<Option<String>>,
    warnings: Vec<ConfigWarning>,
}

impl Default for Config {
    fn default() -> Self {
        Config::builder()
            .build()
            .expect("the defaults are a valid configuration")
    }
}

impl Config {
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// Defaults overridden by the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::builder().build_with_env(&Env::process(), EnvPolicy::Override)
    }

    /// The builder's settings combined with the process environment as
    /// `policy` says.
    pub fn from_env_with(builder: ConfigBuilder, policy: EnvPolicy) -> Result<Config, ConfigError> {
        builder.build_with_env(&Env::process(), policy)
    }

    /// libfabric provider name (`FFD_PROVIDER`).
    pub fn provider(&self) -> &str {
        &self.provider.value
    }
    /// Fabric domain, `None` for any (`FFD_DOMAIN`).
    pub fn domain(&self) -> Option<&str> {
        self.domain.value.as_deref()
    }
    pub fn period(&self) -> Duration {
        self.period.value
    }
    pub fn timeout(&self) -> Duration {
        self.timeout.value
    }
    pub fn inband(&self) -> InbandMode {
        self.inband.value
    }
    pub fn bcast(&self) -> BcastKind {
        self.bcast.value
    }
    pub fn ring(&self) -> RingKind {
        self.ring.value
    }
    /// The ring seed rank 0 proposes; `None` means rank 0 draws one at random.
    pub fn ring_seed(&self) -> Option<u64> {
        self.ring_seed.value
    }
    pub fn core(&self) -> CoreChoice {
        self.core.value
    }
    pub fn progress(&self) -> ProgressMode {
        self.progress.value
    }
    pub fn log(&self) -> LogLevel {
        self.log.value
    }
    /// Capacity of the pollable event queue.
    pub fn event_queue(&self) -> usize {
        self.event_queue.value
    }
    /// How long posts to one peer may keep returning `-FI_EAGAIN` before the
    /// peer counts as unreachable ([`EagainLimit`]; `auto` unless set).
    pub fn eagain_limit(&self) -> Duration {
        match self.eagain_limit.value {
            EagainLimit::Auto => (self.period.value * 3).min(self.timeout.value),
            EagainLimit::Timeout => self.timeout.value,
            EagainLimit::After(d) => d,
        }
    }
    /// Time after start before an emitter's silence counts against it.
    pub fn startup_grace(&self) -> Duration {
        self.startup_grace.value
    }
    /// The host identity override; `None` means this machine's hostname.
    pub fn hostname(&self) -> Option<&str> {
        self.hostname.value.as_deref()
    }

    /// Things accepted but probably not meant: unknown `FFD_*` variables,
    /// shadowed variables, a timeout of fewer than three periods.
    pub fn warnings(&self) -> &[ConfigWarning] {
        &self.warnings
    }

    /// The protocol's settings. `ring_seed` is this rank's proposal (0 when
    /// unset): the runtime replaces it with the seed agreed at bootstrap.
    #[allow(clippy::needless_update)]
    pub fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            period: self.period(),
            timeout: self.timeout(),
            inband: self.inband(),
            bcast: self.bcast(),
            ring: self.ring(),
            ring_seed: self.ring_seed().unwrap_or(0),
            startup_grace: Some(self.startup_grace()),
            // Fields added to the engine later keep their defaults.
            ..EngineConfig::default()
        }
    }

    /// Every setting with its effective value and origin, in [`VARIABLES`] order.
    pub fn settings(&self) -> Vec<SettingInfo> {
        fn info<T>(
            name: &'static str,
            var: &'static str,
            s: &Setting<T>,
            value: String,
        ) -> SettingInfo {
            SettingInfo {
                name,
                var,
                value,
                source: s.source,
            }
        }
        let eagain = match self.eagain_limit.value {
            EagainLimit::After(d) => format_duration(d),
            EagainLimit::Auto => format!("auto ({})", format_duration(self.eagain_limit())),
            EagainLimit::Timeout => format!("timeout ({})", format_duration(self.eagain_limit())),
        };
        vec![
            info(
                "provider",
                var::PROVIDER,
                &self.provider,
                self.provider.value.clone(),
            ),
            info(
                "domain",
                var::DOMAIN,
                &self.domain,
                self.domain().unwrap_or("any").to_owned(),
            ),
            info(
                "period",
                var::PERIOD,
                &self.period,
                format_duration(self.period()),
            ),
            info(
                "timeout",
                var::TIMEOUT,
                &self.timeout,
                format_duration(self.timeout()),
            ),
            info(
                "inband",
                var::INBAND,
                &self.inband,
                self.inband().to_string(),
            ),
            info("bcast", var::BCAST, &self.bcast, self.bcast().to_string()),
            info("ring", var::RING, &self.ring, self.ring().to_string()),
            info(
                "ring_seed",
                var::RING_SEED,
                &self.ring_seed,
                self.ring_seed()
                    .map_or_else(|| "random".to_owned(), |s| s.to_string()),
            ),
            info("core", var::CORE, &self.core, self.core().to_string()),
            info(
                "progress",
                var::PROGRESS,
                &self.progress,
                self.progress().to_string(),
            ),
            info("log", var::LOG, &self.log, self.log().to_string()),
            info(
                "event_queue",
                var::EVENT_QUEUE,
                &self.event_queue,
                self.event_queue().to_string(),
            ),
            info(
                "eagain_limit",
                var::EAGAIN_LIMIT,
                &self.eagain_limit,
                eagain,
            ),
            info(
                "startup_grace",
                var::STARTUP_GRACE,
                &self.startup_grace,
                format_duration(self.startup_grace()),
            ),
            info(
                "hostname",
                var::HOSTNAME,
                &self.hostname,
                self.hostname().unwrap_or("(this machine's)").to_owned(),
            ),
        ]
    }

    /// The settings as an aligned table, one per line:
    /// `FFD_PERIOD        10ms        default`.
    pub fn describe(&self) -> String {
        let settings = self.settings();
        let width = settings.iter().map(|s| s.value.len()).max().unwrap_or(0);
        let mut out = String::new();
        for s in settings {
            out.push_str(&format!(
                "{:<18} {:<width$}  {}\n",
                s.var, s.value, s.source
            ));
        }
        out
    }
}

/// Settings made in code; anything not set takes the environment's value (if
/// built with one) or the default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigBuilder {
    provider: Option<String>,
    domain: Option<String>,
    period: Option<Duration>,
    timeout: Option<Duration>,
    inband: Option<InbandMode>,
    bcast: Option<BcastKind>,
    ring: Option<RingKind>,
    ring_seed: Option<u64>,
    core: Option<CoreChoice>,
    progress: Option<ProgressMode>,
    log: Option<LogLevel>,
    event_queue: Option<usize>,
    eagain_limit: Option<Duration>,
    startup_grace: Option<Duration>,
    hostname: Option<String>,
}

macro_rules! setters {
    ($($(#[$m:meta])* $name:ident: $ty:ty;)+) => {
        $($(#[$m])* pub fn $name(mut self, value: $ty) -> Self { self.$name = Some(value); self })+
    };
}

impl ConfigBuilder {
    setters! {
        period: Duration;
        timeout: Duration;
        inband: InbandMode;
        bcast: BcastKind;
        ring: RingKind;
        ring_seed: u64;
        core: CoreChoice;
        progress: ProgressMode;
        log: LogLevel;
        event_queue: usize;
        /// Defaults to [`EagainLimit::Auto`].
        eagain_limit: Duration;
        startup_grace: Duration;
    }

    pub fn provider(mut self, provider: impl Into<String>) -> Self {
        self.provider = Some(provider.into());
        self
    }
    /// The fabric domain; `""` or `"any"` for any.
    pub fn domain(mut self, domain: impl Into<String>) -> Self {
        self.domain = Some(domain.into());
        self
    }
    /// Overrides the host identity (tests use it to fake several nodes).
    pub fn hostname(mut self, hostname: impl Into<String>) -> Self {
        self.hostname = Some(hostname.into());
        self
    }

    /// Code settings over defaults; the environment is not read.
    pub fn build(self) -> Result<Config, ConfigError> {
        Resolver {
            env: None,
            warnings: Vec::new(),
        }
        .resolve(self)
    }

    /// Code settings and `env` combined as `policy` says, over defaults.
    pub fn build_with_env(self, env: &Env, policy: EnvPolicy) -> Result<Config, ConfigError> {
        Resolver {
            env: Some((env, policy)),
            warnings: env.unknown_variables(),
        }
        .resolve(self)
    }
}

struct Resolver<'a> {
    env: Option<(&'a Env, EnvPolicy)>,
    warnings: Vec<ConfigWarning>,
}

impl Resolver<'_> {
    /// One setting: the code value, the environment's, or the default, with
    /// `parse` for the environment's text and `check` for any value.
    fn setting<T>(
        &mut self,
        (name, var): (&'static str, &'static str),
        code: Option<T>,
        default: T,
        parse: impl Fn(&str) -> Result<T, String>,
        check: impl Fn(&T) -> Result<(), String>,
        show: impl Fn(&T) -> String,
    ) -> Result<Setting<T>, ConfigError> {
        let env_text = match self.env {
            Some((env, _)) => env.value(var)?,
            None => None,
        };
        let use_env = match (&code, env_text, self.env) {
            (_, None, _) | (_, _, None) => false,
            (None, Some(_), _) => true,
            (Some(_), Some(_), Some((_, EnvPolicy::Override))) => true,
            (Some(_), Some(text), Some((_, EnvPolicy::Fill))) => {
                self.warnings.push(ConfigWarning::Ignored {
                    var,
                    value: text.to_owned(),
                });
                false
            }
        };
        let accepted = accepted_of(var);
        if let (true, Some(text)) = (use_env, env_text) {
            let invalid = |problem: String| ConfigError::Invalid {
                var,
                value: text.to_owned(),
                problem,
                accepted,
            };
            let value = parse(text).map_err(invalid)?;
            check(&value).map_err(invalid)?;
            return Ok(Setting {
                value,
                source: Source::Env(var),
            });
        }
        match code {
            Some(value) => {
                check(&value).map_err(|problem| ConfigError::InvalidInCode {
                    setting: name,
                    value: show(&value),
                    problem,
                    accepted,
                })?;
                Ok(Setting {
                    value,
                    source: Source::Code,
                })
            }
            None => Ok(Setting {
                value: default,
                source: Source::Default,
            }),
        }
    }

    fn resolve(mut self, b: ConfigBuilder) -> Result<Config, ConfigError> {
        let dur = |s: &str| parse_duration(s).map_err(|e| e.to_string());
        let positive = |d: &Duration| {
            if d.is_zero() {
                Err("must be positive".to_owned())
            } else {
                Ok(())
            }
        };
        let show_dur = |d: &Duration| format_duration(*d);

        let provider = self.setting(
            ("provider", var::PROVIDER),
            b.provider,
            "tcp".to_owned(),
            |s| Ok(s.trim().to_owned()),
            |p: &String| check_provider(p),
            String::clone,
        )?;
        let domain = self.setting(
            ("domain", var::DOMAIN),
            b.domain.map(normalise_domain),
            None,
            |s| Ok(normalise_domain(s.to_owned())),
            |d: &Option<String>| d.as_deref().map_or(Ok(()), check_token),
            |d| d.clone().unwrap_or_default(),
        )?;
        let period = self.setting(
            ("period", var::PERIOD),
            b.period,
            Duration::from_millis(10),
            dur,
            positive,
            show_dur,
        )?;
        let timeout = self.setting(
            ("timeout", var::TIMEOUT),
            b.timeout,
            Duration::from_millis(100),
            dur,
            positive,
            show_dur,
        )?;
        let inband = self.setting(
            ("inband", var::INBAND),
            b.inband,
            InbandMode::default(),
            |s| s.parse().map_err(|_| "is not recognised".to_owned()),
            any,
            |v| v.to_string(),
        )?;
        let bcast = self.setting(
            ("bcast", var::BCAST),
            b.bcast,
            BcastKind::default(),
            |s| s.parse().map_err(|_| "is not recognised".to_owned()),
            any,
            |v| v.to_string(),
        )?;
        let ring = self.setting(
            ("ring", var::RING),
            b.ring,
            RingKind::default(),
            |s| s.parse().map_err(|_| "is not recognised".to_owned()),
            any,
            |v| v.to_string(),
        )?;
        let ring_seed = self.setting(
            ("ring_seed", var::RING_SEED),
            b.ring_seed.map(Some),
            None,
            |s| parse_integer::<u64>(s).map(Some),
            any,
            |v| v.map_or_else(String::new, |s| s.to_string()),
        )?;
        let core = self.setting(
            ("core", var::CORE),
            b.core,
            CoreChoice::Auto,
            parse_core,
            any,
            |v| v.to_string(),
        )?;
        let progress = self.setting(
            ("progress", var::PROGRESS),
            b.progress,
            ProgressMode::Sleep,
            |s| parse_word(PROGRESS_WORDS, s),
            any,
            |v| v.to_string(),
        )?;
        let log = self.setting(
            ("log", var::LOG),
            b.log,
            LogLevel::Warn,
            |s| parse_word(LOG_WORDS, s),
            any,
            |v| v.to_string(),
        )?;
        let event_queue = self.setting(
            ("event_queue", var::EVENT_QUEUE),
            b.event_queue,
            1024,
            parse_integer::<usize>,
            |&n: &usize| {
                if (1..=MAX_EVENT_QUEUE).contains(&n) {
                    Ok(())
                } else {
                    Err("is out of range".to_owned())
                }
            },
            |v| v.to_string(),
        )?;
        let eagain_limit = self.setting(
            ("eagain_limit", var::EAGAIN_LIMIT),
            b.eagain_limit.map(EagainLimit::After),
            EagainLimit::Auto,
            |s| match s.trim().to_ascii_lowercase().as_str() {
                "auto" => Ok(EagainLimit::Auto),
                "timeout" => Ok(EagainLimit::Timeout),
                _ => dur(s).map(EagainLimit::After),
            },
            |l: &EagainLimit| match l {
                EagainLimit::After(d) => positive(d),
                _ => Ok(()),
            },
            |l| match l {
                EagainLimit::Auto => "auto".to_owned(),
                EagainLimit::Timeout => "timeout".to_owned(),
                EagainLimit::After(d) => format_duration(*d),
            },
        )?;
        let startup_grace = self.setting(
            ("startup_grace", var::STARTUP_GRACE),
            b.startup_grace,
            Duration::from_secs(1),
            dur,
            any,
            show_dur,
        )?;
        let hostname = self.setting(
            ("hostname", var::HOSTNAME),
            b.hostname.map(Some),
            None,
            |s| Ok(Some(s.trim().to_owned())),
            |h: &Option<String>| h.as_deref().map_or(Ok(()), check_token),
            |h| h.clone().unwrap_or_default(),
        )?;

        if timeout.value <= period.value {
            return Err(ConfigError::TimeoutNotAbovePeriod {
                timeout: describe_origin("timeout", &timeout),
                period: describe_origin("period", &period),
            });
        }
        if timeout.value < period.value * SAFE_TIMEOUT_PERIODS {
            self.warnings.push(ConfigWarning::ShortTimeout {
                timeout: timeout.value,
                period: period.value,
            });
        }

        Ok(Config {
            provider,
            domain,
            period,
            timeout,
            inband,
            bcast,
            ring,
            ring_seed,
            core,
            progress,
            log,
            event_queue,
            eagain_limit,
            startup_grace,
            hostname,
            warnings: self.warnings,
        })
    }
}

/// `FFD_TIMEOUT=`10ms``, `timeout `10ms` (set in code)` or `the default period `10ms``.
fn describe_origin(name: &str, s: &Setting<Duration>) -> String {
    let value = format_duration(s.value);
    match s.source {
        Source::Env(var) => format!("{var}=`{value}`"),
        Source::Code => format!("{name} `{value}` (set in code)"),
        Source::Default => format!("the default {name} `{value}`"),
    }
}

/// The check of settings whose every parsed value is valid.
fn any<T>(_: &T) -> Result<(), String> {
    Ok(())
}

fn normalise_domain(d: String) -> Option<String> {
    let t = d.trim();
    if t.is_empty() || t.eq_ignore_ascii_case("any") {
        None
    } else {
        Some(t.to_owned())
    }
}

fn check_provider(p: &str) -> Result<(), String> {
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

fn check_token(t: &str) -> Result<(), String> {
    if t.is_empty() {
        Err("is empty".into())
    } else if t.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Err("contains spaces".into())
    } else {
        Ok(())
    }
}

/// A decimal integer of type `T`, with a problem text for the error.
pub(crate) fn parse_integer<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("is empty".into());
    }
    if !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err("is not a non-negative integer".into());
    }
    t.parse().map_err(|_| "is too large".into())
}

fn parse_core(text: &str) -> Result<CoreChoice, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(CoreChoice::Auto),
        "none" => Ok(CoreChoice::None),
        t if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => {
            parse_integer::<u32>(t).map(CoreChoice::Cpu)
        }
        _ => Err("is not recognised".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("FFD_PERIOD", "FFD_PERIOD"), 0);
        assert_eq!(edit_distance("FFD_PERIDO", "FFD_PERIOD"), 2);
        assert_eq!(edit_distance("FFD_TIMEOUTS", "FFD_TIMEOUT"), 1);
        assert_eq!(closest_variable("ffd_period"), Some("FFD_PERIOD"));
        assert_eq!(closest_variable("FFD_WHATEVER"), None);
    }

    #[test]
    fn every_variable_is_listed_once() {
        let names: BTreeSet<_> = VARIABLES.iter().map(|v| v.name).collect();
        assert_eq!(names.len(), VARIABLES.len());
        assert!(names.iter().all(|n| n.starts_with("FFD_")));
    }
}
