//! What resolving the settings can say: an error that names the variable
//! (or builder setting), the value and the accepted form, or a warning
//! about something accepted but probably not meant.
//!
//! Owns: the texts users see for bad settings (tests check them word for
//! word). Must not: decide what is valid (the table and its checks do).

use std::time::Duration;

use super::format_duration;

/// A timeout shorter than this many periods draws a [`ConfigWarning::ShortTimeout`].
pub const SAFE_TIMEOUT_PERIODS: u32 = 3;

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
    /// The period or the timeout is outside the range detection works in
    /// (shown with its origin), and `FFD_UNSAFE_TIMING` does not lift it.
    #[error(
        "{value} is outside the accepted range: {range}; {unlock}=1 accepts it anyway (for experts)"
    )]
    UnsafeTiming {
        value: String,
        range: String,
        unlock: &'static str,
    },
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
