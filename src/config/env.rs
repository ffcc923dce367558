//! The `FFD_*` variables of an environment, captured once, and the
//! warnings about names that are not ffd variables.
//!
//! Owns: the only read of the process environment ([`Env::process`]; tests
//! build an [`Env`] from pairs, so no test mutates the environment), the
//! UTF-8 check of values, and the "did you mean" suggestion. Must not:
//! parse a value (the settings table does).

use std::collections::{BTreeMap, BTreeSet};

use super::{ConfigError, ConfigWarning, VARIABLES, variable};

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
                accepted: variable(var).map_or("", |v| v.accepted),
            }),
            Some(value) => Ok(Some(value)),
        }
    }

    /// Warnings for every `FFD_*` name that is not a known variable (nor
    /// one of [`COMPANION_VARIABLES`]).
    pub fn unknown_variables(&self) -> Vec<ConfigWarning> {
        self.vars
            .keys()
            .filter(|name| {
                variable(name).is_none() && !COMPANION_VARIABLES.contains(&name.as_str())
            })
            .map(|name| ConfigWarning::UnknownVariable {
                name: name.clone(),
                suggestion: closest_variable(name),
            })
            .collect()
    }
}

/// `FFD_*` variables that are not settings of the library but of a
/// companion that embeds it: `FFD_MPI_ON_FAILURE`, read by the MPI shim
/// `libffd_mpi.so` (`shim/ffd_mpi.c`), which checks its value itself. They
/// draw no "unknown variable" warning.
pub const COMPANION_VARIABLES: &[&str] = &["FFD_MPI_ON_FAILURE"];

fn is_ffd_name(name: &str) -> bool {
    name.len() >= 4 && name[..4].eq_ignore_ascii_case("FFD_")
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
    fn a_companion_variable_draws_no_warning_and_a_near_miss_still_does() {
        let env = Env::from_pairs([("FFD_MPI_ON_FAILURE", "abort"), ("FFD_PERIDO", "1ms")]);
        let unknown: Vec<String> = env
            .unknown_variables()
            .into_iter()
            .map(|w| match w {
                ConfigWarning::UnknownVariable { name, .. } => name,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(unknown, ["FFD_PERIDO"]);
    }
}
