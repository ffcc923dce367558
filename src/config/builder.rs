//! The builder and the resolution of settings: code, environment and
//! defaults combined under an [`EnvPolicy`], then the checks that need two
//! settings (the timeout must exceed the period; the safe ranges of both
//! unless `FFD_UNSAFE_TIMING=1`; under three periods is a warning).
//!
//! Owns: precedence and its warnings. Must not: know any one setting's
//! syntax (the table's descriptors parse and check), or read the process
//! environment (callers pass an [`Env`]).

use super::descriptor::{Setting, Sourced};
use super::table::{Given, Values, check_safe_timing, setting};
use super::{Config, ConfigError, ConfigWarning, Env, SAFE_TIMEOUT_PERIODS, Source};
use crate::protocol::EngineConfig;

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

/// Settings made in code; anything not set takes the environment's value (if
/// built with one) or the default. One setter per setting, named as in the
/// table (`Config::builder().period(..)`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigBuilder {
    pub(super) given: Given,
}

impl ConfigBuilder {
    /// Code settings over defaults; the environment is not read.
    pub fn build(self) -> Result<Config, ConfigError> {
        Resolver {
            env: None,
            warnings: Vec::new(),
        }
        .resolve(self.given)
    }

    /// Code settings and `env` combined as `policy` says, over defaults.
    pub fn build_with_env(self, env: &Env, policy: EnvPolicy) -> Result<Config, ConfigError> {
        Resolver {
            env: Some((env, policy)),
            warnings: env.unknown_variables(),
        }
        .resolve(self.given)
    }

    /// Sets the setting of variable `var` from its text, parsed and checked
    /// now, as if given by that variable (errors and messages name it).
    /// `None` when `var` names no setting (a bootstrap variable or an
    /// unknown name); on error nothing changes.
    pub(crate) fn set_var(&mut self, var: &str, text: &str) -> Option<Result<(), ConfigError>> {
        self.given.set_text(var, text)
    }

    /// Sets a setting to a typed value, checked now, as if given by its
    /// variable; on error nothing changes.
    pub(crate) fn set_value<T>(
        &mut self,
        setting: &Setting<T>,
        value: T,
    ) -> Result<(), ConfigError> {
        let given = Sourced {
            value,
            source: Source::Env(setting.var),
        };
        setting.check_given(&given)?;
        *(setting.slot)(&mut self.given) = Some(given);
        Ok(())
    }

    /// Forgets the setting of variable `var` (back to the default); `false`
    /// when `var` names no setting.
    pub(crate) fn unset_var(&mut self, var: &str) -> bool {
        self.given.unset(var)
    }
}

/// One resolution: the environment and policy, and the warnings so far.
pub(super) struct Resolver<'a> {
    env: Option<(&'a Env, EnvPolicy)>,
    warnings: Vec<ConfigWarning>,
}

impl Resolver<'_> {
    /// One setting: the environment's value, the given one, or the default,
    /// as the policy says.
    pub(super) fn setting<T>(
        &mut self,
        setting: &Setting<T>,
        given: Option<Sourced<T>>,
    ) -> Result<Sourced<T>, ConfigError> {
        let var = setting.var;
        let env_text = match self.env {
            Some((env, _)) => env.value(var)?,
            None => None,
        };
        let use_env = match (&given, env_text, self.env) {
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
        if let (true, Some(text)) = (use_env, env_text) {
            return Ok(Sourced {
                value: setting.parse(text)?,
                source: Source::Env(var),
            });
        }
        match given {
            Some(given) => {
                setting.check_given(&given)?;
                Ok(given)
            }
            None => Ok(Sourced {
                value: setting.default_value(),
                source: Source::Default,
            }),
        }
    }

    fn resolve(mut self, given: Given) -> Result<Config, ConfigError> {
        let values = Values::resolve(&mut self, given)?;
        let (period, timeout) = (&values.period, &values.timeout);
        if !EngineConfig::timeout_exceeds_period(period.value, timeout.value) {
            return Err(ConfigError::TimeoutNotAbovePeriod {
                timeout: setting::TIMEOUT.origin(timeout),
                period: setting::PERIOD.origin(period),
            });
        }
        check_safe_timing(period, timeout, values.unsafe_timing.value)?;
        if timeout.value < period.value * SAFE_TIMEOUT_PERIODS {
            self.warnings.push(ConfigWarning::ShortTimeout {
                timeout: timeout.value,
                period: period.value,
            });
        }
        Ok(Config {
            values,
            warnings: self.warnings,
        })
    }
}
