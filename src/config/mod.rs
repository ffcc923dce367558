//! The detector's runtime settings: the `FFD_*` environment variables, the
//! builder that takes the same settings in code, and where each effective
//! value came from (for `ffd info`).
//!
//! Owns: parsing and validating every setting, the list of known `FFD_*`
//! variables (unknown ones are warned about), and duration syntax (the one
//! parser of `ffd_protocol::duration`).
//! Must not: read the process environment anywhere but [`Env::process`] (tests
//! pass an [`Env`] built from pairs, so no test mutates the environment),
//! start threads, or touch the fabric.
//!
//! Each setting is written once, in the table of `table.rs`; the builder's
//! setters, [`Config`]'s accessors, [`Config::settings`] (`ffd info`),
//! [`VARIABLES`], the resolution below and the C API's setters and getters
//! all derive from it. The files:
//! - `table.rs`: the table itself;
//! - `descriptor.rs`: one entry's shape ([`Setting`]) and the macro that
//!   expands the table;
//! - `values.rs`: the library's own value types ([`CoreChoice`],
//!   [`ProgressMode`], [`LogLevel`], [`EagainLimit`]) and the parsers;
//! - `builder.rs`: [`ConfigBuilder`] and precedence ([`EnvPolicy`]);
//! - `env.rs`: [`Env`] and the unknown-variable warnings;
//! - `error.rs`: [`ConfigError`] and [`ConfigWarning`].
//!
//! Precedence is the embedder's choice, given as an [`EnvPolicy`]:
//! `Override` (environment beats code beats defaults; what HPC users expect)
//! or `Fill` (code beats environment beats defaults). [`ConfigBuilder::build`]
//! ignores the environment altogether.
//!
//! Durations are a number with a unit, `ns`, `us` (or `µs`), `ms` or `s`, with
//! an optional fraction (`1.5s`, `0.5ms`); a bare number is rejected because
//! a silent unit is the classic tuning mistake. The period must be positive
//! and the timeout must exceed it (an error); a period under 100 µs or a
//! timeout over 600 s is refused with the accepted range, unless
//! `FFD_UNSAFE_TIMING=1` (`table::MIN_PERIOD`, `table::MAX_TIMEOUT`); a
//! timeout shorter than three periods is accepted with a warning, since one
//! late heartbeat then suffices for a false positive.

#![forbid(unsafe_code)]

mod builder;
mod descriptor;
mod env;
mod error;
mod table;
mod values;

use std::fmt;
use std::time::Duration;

pub use builder::{ConfigBuilder, EnvPolicy};
pub use descriptor::{Setting, Variable};
pub use env::Env;
pub use error::{ConfigError, ConfigWarning, SAFE_TIMEOUT_PERIODS};
pub use table::{MAX_EVENT_QUEUE, MAX_TIMEOUT, MIN_PERIOD, VARIABLES, setting, var, variable};
pub(crate) use values::parse_integer;
pub use values::{
    CoreChoice, DURATION_FORM, DurationError, EagainLimit, LivenessMode, LocalMode, LogLevel,
    ProgressMode, SchedPolicy, SourceFilterMode, format_duration, parse_duration,
};

use crate::protocol::EngineConfig;
use table::Values;

/// Where a setting's effective value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    Default,
    /// Set with the builder.
    Code,
    /// Read from this environment variable, or given by this variable's
    /// name (the C API's `ffd_config_set`).
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

/// The detector's effective settings. Build with [`Config::builder`],
/// [`Config::from_env`] or [`Config::from_env_with`]. One accessor per
/// setting of the table, named as the builder's setter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    values: Values,
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

    /// How long posts to one peer may keep returning `-FI_EAGAIN` before the
    /// peer counts as unreachable ([`EagainLimit`] resolved against the
    /// period and timeout; `auto` unless set).
    pub fn eagain_limit(&self) -> Duration {
        self.values
            .eagain_limit
            .value
            .resolve(self.period(), self.timeout())
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
            quorum: self.quorum(),
            bcast: self.bcast(),
            ring: self.ring(),
            ring_seed: self.ring_seed().unwrap_or(0),
            startup_grace: Some(self.startup_grace()),
            deliver_own: self.deliver_own(),
            // Range-checked (1 to 16) when the setting was read.
            health_max: u32::try_from(self.health_max()).unwrap_or(u32::MAX),
            // Fields added to the engine later keep their defaults.
            ..EngineConfig::default()
        }
    }

    /// The job-wide settings ([`Setting::job_wide`]): each one's variable
    /// and canonical value, the value as the variable accepts it
    /// (`("FFD_PERIOD", "10ms")`, `("FFD_QUORUM", "majority")`), in
    /// [`VARIABLES`] order. What the start-up record carries and every rank
    /// compares; two values are the same setting exactly when these texts
    /// are equal (a duration is shown in its largest exact unit).
    pub fn job_wide(&self) -> Vec<(&'static str, String)> {
        self.values.job_wide()
    }

    /// Every setting with its effective value and origin, in [`VARIABLES`] order.
    pub fn settings(&self) -> Vec<SettingInfo> {
        self.values.settings(self)
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
