//! The shape of one entry of the settings table ([`Setting`]) and the
//! macro that turns the table into everything else: the `var::*` names,
//! the typed descriptors in `setting::*`, [`VARIABLES`](super::VARIABLES),
//! the builder's setters, the accessors of [`Config`], and the per-variable
//! dispatch the C API and the resolution use.
//!
//! Owns: how a setting's text becomes a checked value, and how a value is
//! shown. Must not: list settings (`table.rs` does) or decide precedence
//! (`builder.rs` does).

use std::fmt;

use super::table::Given;
use super::{Config, ConfigError, SettingInfo, Source};

/// A setting's value and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Sourced<T> {
    pub(super) value: T,
    pub(super) source: Source,
}

/// One setting of the table: its names, accepted form, help line, default,
/// parser, range check and display, written once (in `table.rs`).
///
/// The descriptors are `ffd::config::setting::PERIOD` and so on; the
/// builder, [`Config`]'s accessors, `ffd info` and the C API all go through
/// them.
pub struct Setting<T: 'static> {
    /// The builder's name for it, e.g. `period`.
    pub name: &'static str,
    /// Its environment variable, e.g. `FFD_PERIOD`.
    pub var: &'static str,
    /// The accepted form, as error messages and docs/configuration.md show it.
    pub accepted: &'static str,
    /// One line saying what it does.
    pub help: &'static str,
    /// Job-wide: every rank of a job must run with the same value. The
    /// start-up record is derived from this flag: it carries each job-wide
    /// setting's canonical value ([`Setting::show`], in the table's order;
    /// [`Config::job_wide`]), and the exchange refuses a job whose ranks
    /// differ in one, naming the variable and both values
    /// (`runtime::startup`). The settings table of docs/configuration.md
    /// has a column for it. Marking one more setting job-wide changes the
    /// record's layout: bump `RECORD_VERSION` (a test names the list of
    /// each version).
    pub job_wide: bool,
    pub(super) default: fn() -> T,
    /// Text to value; `Err` is the problem ("has no unit").
    pub(super) parse: fn(&str) -> Result<T, String>,
    /// The range check of any value, parsed or given in code.
    pub(super) check: fn(&T) -> Result<(), String>,
    /// The value in a form the variable accepts.
    pub(super) show: fn(&T) -> String,
    /// How `ffd info` shows the effective value when it needs more than
    /// [`Setting::show`] (`auto (30ms)`).
    pub(super) shown: Option<fn(&T, &Config) -> String>,
    /// The builder's slot for it.
    pub(super) slot: fn(&mut Given) -> &mut Option<Sourced<T>>,
}

impl<T> fmt::Debug for Setting<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Setting")
            .field("name", &self.name)
            .field("var", &self.var)
            .finish_non_exhaustive()
    }
}

impl<T> Setting<T> {
    /// The value when nothing sets it.
    pub fn default_value(&self) -> T {
        (self.default)()
    }

    /// `value` in a form the variable accepts, e.g. `10ms`.
    pub fn show(&self, value: &T) -> String {
        (self.show)(value)
    }

    /// Parses and checks the variable's text; the error names the variable,
    /// the text and the accepted form.
    pub fn parse(&self, text: &str) -> Result<T, ConfigError> {
        let invalid = |problem: String| ConfigError::Invalid {
            var: self.var,
            value: text.to_owned(),
            problem,
            accepted: self.accepted,
        };
        let value = (self.parse)(text).map_err(invalid)?;
        (self.check)(&value).map_err(invalid)?;
        Ok(value)
    }

    /// Checks a value that did not come from text: given in code (the error
    /// says so) or by the variable's name (the C API; the error names the
    /// variable).
    pub(super) fn check_given(&self, given: &Sourced<T>) -> Result<(), ConfigError> {
        (self.check)(&given.value).map_err(|problem| match given.source {
            Source::Env(var) => ConfigError::Invalid {
                var,
                value: self.show(&given.value),
                problem,
                accepted: self.accepted,
            },
            Source::Code | Source::Default => ConfigError::InvalidInCode {
                setting: self.name,
                value: self.show(&given.value),
                problem,
                accepted: self.accepted,
            },
        })
    }

    /// The effective value as `ffd info` prints it.
    pub(super) fn info(&self, value: &Sourced<T>, config: &Config) -> SettingInfo {
        SettingInfo {
            name: self.name,
            var: self.var,
            value: match self.shown {
                Some(shown) => shown(&value.value, config),
                None => self.show(&value.value),
            },
            source: value.source,
        }
    }

    /// `FFD_TIMEOUT=`10ms``, `timeout `10ms` (set in code)` or
    /// `the default timeout `100ms``: a value and its origin, for an error
    /// about two settings.
    pub(super) fn origin(&self, value: &Sourced<T>) -> String {
        let text = self.show(&value.value);
        match value.source {
            Source::Env(var) => format!("{var}=`{text}`"),
            Source::Code => format!("{} `{text}` (set in code)", self.name),
            Source::Default => format!("the default {} `{text}`", self.name),
        }
    }
}

/// One `FFD_*` variable: its name, accepted form, default and meaning, as
/// `ffd info` and docs/configuration.md show them. The settings' variables come first,
/// in the table's order, then those the bootstrap reads.
#[derive(Clone, Copy, Debug)]
pub struct Variable {
    pub name: &'static str,
    pub accepted: &'static str,
    pub meaning: &'static str,
    /// Every rank of a job must set it alike ([`Setting::job_wide`]).
    pub job_wide: bool,
    pub(super) default: fn() -> String,
}

impl Variable {
    /// The default, as docs/configuration.md's table shows it: a value in the accepted
    /// form (`10ms`), or words for what happens when it is unset (`random`).
    pub fn default_text(&self) -> String {
        (self.default)()
    }
}

/// How an accessor of [`Config`] hands a setting's value out: by copy, or
/// borrowed as `&str`.
pub(super) trait View<'a, Out> {
    fn view(&'a self) -> Out;
}

impl<'a> View<'a, &'a str> for String {
    fn view(&'a self) -> &'a str {
        self
    }
}

impl<'a> View<'a, Option<&'a str>> for Option<String> {
    fn view(&'a self) -> Option<&'a str> {
        self.as_deref()
    }
}

macro_rules! by_copy {
    ($($t:ty),+) => {
        $(impl View<'_, $t> for $t {
            fn view(&self) -> $t {
                *self
            }
        })+
    };
}

by_copy!(
    bool,
    std::time::Duration,
    usize,
    Option<u64>,
    crate::protocol::InbandMode,
    crate::protocol::QuorumMode,
    crate::protocol::BcastKind,
    crate::protocol::RingKind,
    super::CoreChoice,
    super::ProgressMode,
    super::SchedPolicy,
    super::LocalMode,
    super::SourceFilterMode,
    super::LivenessMode,
    super::LogLevel
);

/// An entry's optional `job_wide: true`, `false` when absent.
macro_rules! job_wide {
    () => {
        false
    };
    ($e:literal) => {
        $e
    };
}

/// `None` or `Some(shown)`: an entry's optional `shown`.
macro_rules! optional {
    () => {
        None
    };
    ($e:expr) => {
        Some($e)
    };
}

/// An entry's accessor on [`Config`], when the entry names its type.
macro_rules! accessor {
    ($(#[$doc:meta])* $name:ident, $var:literal, $help:literal, $get:ty) => {
        #[doc = concat!($help, " (`", $var, "`).")]
        $(#[$doc])*
        pub fn $name(&self) -> $get {
            View::view(&self.values.$name.value)
        }
    };
    ($(#[$doc:meta])* $name:ident, $var:literal, $help:literal,) => {};
}

/// Expands the settings table (see `table.rs`) into everything derived
/// from it. Each entry of `settings` is one field of [`Config`]:
///
/// ```text
/// /// accessor doc
/// name: Type => AccessorType {        // no `=> ..`: no accessor generated
///     var: CONST = "FFD_NAME",
///     accepted: "...", help: "...",
///     job_wide: true,                 // optional: every rank must agree
///     default: value, parse: fn, check: fn, show: fn,
///     shown: fn,                      // optional, see Setting::shown
///     set(arg: ArgType) => value,     // the builder's setter
/// }
/// ```
///
/// Each entry of `bootstrap_variables` is a variable read by
/// `crate::bootstrap`, known here for `VARIABLES` and the warnings.
macro_rules! settings_table {
    (
        settings {
            $(
                $(#[$doc:meta])*
                $name:ident: $ty:ty $(=> $get:ty)? {
                    var: $VAR:ident = $var:literal,
                    accepted: $accepted:expr,
                    help: $help:literal,
                    $(job_wide: $job_wide:literal,)?
                    default: $default:expr,
                    parse: $parse:expr,
                    check: $check:expr,
                    show: $show:expr,
                    $(shown: $shown:expr,)?
                    set($arg:ident: $arg_ty:ty) => $conv:expr $(,)?
                }
            )+
        }
        bootstrap_variables {
            $(
                $BVAR:ident = $bvar:literal {
                    accepted: $baccepted:expr,
                    help: $bhelp:literal,
                    default: $bdefault:literal $(,)?
                }
            )+
        }
    ) => {
        /// Names of the known variables, as constants.
        pub mod var {
            $(pub const $VAR: &str = $var;)+
            $(pub const $BVAR: &str = $bvar;)+
        }

        /// The settings' descriptors, one per `FFD_*` setting variable.
        pub mod setting {
            use super::*;
            $(
                #[doc = concat!("`", $var, "`: ", $help, ".")]
                pub static $VAR: Setting<$ty> = Setting {
                    name: stringify!($name),
                    var: $var,
                    accepted: $accepted,
                    help: $help,
                    job_wide: $crate::config::descriptor::job_wide!($($job_wide)?),
                    default: || $default,
                    parse: $parse,
                    check: $check,
                    show: $show,
                    shown: $crate::config::descriptor::optional!($($shown)?),
                    slot: |given| &mut given.$name,
                };
            )+
        }

        /// Every variable ffd reads, in the order `ffd info` prints them.
        pub const VARIABLES: &[Variable] = &[
            $(Variable {
                name: $var,
                accepted: $accepted,
                meaning: $help,
                job_wide: setting::$VAR.job_wide,
                default: || setting::$VAR.show(&setting::$VAR.default_value()),
            },)+
            $(Variable {
                name: $bvar,
                accepted: $baccepted,
                meaning: $bhelp,
                job_wide: false,
                default: || $bdefault.to_owned(),
            },)+
        ];

        /// A builder's settings: each given in code, or by its variable's
        /// name through the C API, or not at all.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub(super) struct Given {
            $(pub(super) $name: Option<Sourced<$ty>>,)+
        }

        /// A configuration's effective settings.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub(super) struct Values {
            $(pub(super) $name: Sourced<$ty>,)+
        }

        impl Given {
            /// Sets `var`'s setting from its text, parsed and checked now;
            /// `None` when `var` names no setting.
            pub(super) fn set_text(
                &mut self,
                var: &str,
                text: &str,
            ) -> Option<Result<(), ConfigError>> {
                match var {
                    $($var => Some(setting::$VAR.parse(text).map(|value| {
                        self.$name = Some(Sourced { value, source: Source::Env($var) });
                    })),)+
                    _ => None,
                }
            }

            /// Forgets `var`'s setting; `false` when `var` names no setting.
            pub(super) fn unset(&mut self, var: &str) -> bool {
                match var {
                    $($var => {
                        self.$name = None;
                        true
                    })+
                    _ => false,
                }
            }
        }

        impl Values {
            /// Every setting resolved, in the table's order (the first bad
            /// one is the error).
            pub(super) fn resolve(
                resolver: &mut Resolver<'_>,
                given: Given,
            ) -> Result<Values, ConfigError> {
                Ok(Values {
                    $($name: resolver.setting(&setting::$VAR, given.$name)?,)+
                })
            }

            /// Every setting's effective value and origin, in the table's order.
            pub(super) fn settings(&self, config: &Config) -> Vec<SettingInfo> {
                vec![$(setting::$VAR.info(&self.$name, config),)+]
            }

            /// Each job-wide setting's variable and canonical value (the
            /// value as the variable accepts it, [`Setting::show`]), in the
            /// table's order.
            pub(super) fn job_wide(&self) -> Vec<(&'static str, String)> {
                let mut out = Vec::new();
                $(if setting::$VAR.job_wide {
                    out.push(($var, setting::$VAR.show(&self.$name.value)));
                })+
                out
            }
        }

        impl Config {
            $($crate::config::descriptor::accessor! {
                $(#[$doc])* $name, $var, $help, $($get)?
            })+
        }

        impl ConfigBuilder {
            $(
                #[doc = concat!("Sets `", stringify!($name), "` (`", $var, "`) in code. ", $help, ".")]
                pub fn $name(mut self, $arg: $arg_ty) -> Self {
                    self.given.$name = Some(Sourced { value: $conv, source: Source::Code });
                    self
                }
            )+
        }
    };
}

pub(super) use {accessor, job_wide, optional, settings_table};
