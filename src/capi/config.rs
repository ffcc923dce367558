//! The settings of a detector-to-be: `ffd_config_t` and its functions.
//!
//! Owns: a typed [`ConfigBuilder`] per config. ffd_config_set() parses a
//! variable's text through the settings table into it at once (the error
//! names the variable, the value and the accepted form), the `_ns` setters
//! set typed values, ffd_config_get() formats from the typed value. Must
//! not: check what needs two settings before ffd_config_get() or
//! ffd_init() (an embedder may set the timeout before the period), or read the
//! environment but where the embedder asks (ffd_config_from_env(),
//! ffd_config_load_env(), or ffd_init() without a config).

use std::collections::BTreeMap;
use std::ffi::{c_char, c_void};
use std::time::Duration;

use super::ffd_result::{self, *};
use super::{
    Error, HostCallback, boundary, boundary_value, ffd_config_t, ffd_event_callback, str_arg,
    write_text,
};
use crate::bootstrap::tcp;
use crate::config::{
    Config, ConfigBuilder, ConfigWarning, Env, Setting, VARIABLES, Variable, setting, var, variable,
};

/// `name` as a known variable, or an error suggesting the closest one.
fn known_variable(name: &str) -> Result<&'static Variable, Error> {
    variable(name).ok_or_else(|| {
        let suggestion = Env::from_pairs([(name, "")])
            .unknown_variables()
            .into_iter()
            .find_map(|w| match w {
                ConfigWarning::UnknownVariable { suggestion, .. } => suggestion,
                _ => None,
            });
        Error::invalid(match suggestion {
            Some(s) => format!("{name} is not an ffd variable (did you mean {s}?)"),
            None => format!("{name} is not an ffd variable (`ffd info` lists them)"),
        })
    })
}

impl ffd_config_t {
    pub(super) fn new() -> ffd_config_t {
        ffd_config_t {
            settings: ConfigBuilder::default(),
            bootstrap: BTreeMap::new(),
            unknown: BTreeMap::new(),
            callback: None,
        }
    }

    /// Sets variable `var` to `value`, or back to its default when `value`
    /// is `None`. A setting is parsed and checked now; of the bootstrap
    /// variables, FFD_BOOTSTRAP_TIMEOUT is checked now, the others (which
    /// only make sense together) when a TCP bootstrap reads them. On error
    /// nothing changes.
    fn set(&mut self, var: &'static Variable, value: Option<&str>) -> Result<(), Error> {
        let Some(text) = value else {
            if !self.settings.unset_var(var.name) {
                self.bootstrap.remove(var.name);
            }
            return Ok(());
        };
        match self.settings.set_var(var.name, text) {
            Some(set) => set?,
            None => {
                if var.name == var::BOOTSTRAP_TIMEOUT {
                    tcp::timeout_from_env(&Env::from_pairs([(var.name, text)]))?;
                }
                self.bootstrap.insert(var.name, text.to_owned());
            }
        }
        Ok(())
    }

    /// The `FFD_*` variables of the process environment over this config's,
    /// each checked first, in the table's order; on error nothing changes.
    pub(super) fn load_env(&mut self) -> Result<(), Error> {
        let env = Env::process();
        let mut loaded = self.clone();
        for var in VARIABLES {
            if let Some(text) = env.value(var.name)? {
                loaded.set(var, Some(text))?;
            }
        }
        for (name, value) in env.iter().filter(|(name, _)| variable(name).is_none()) {
            loaded.unknown.insert(name.to_owned(), value.to_owned());
        }
        *self = loaded;
        Ok(())
    }

    /// The effective settings: this config's over the defaults.
    pub(super) fn resolve(&self) -> Result<Config, Error> {
        Ok(self.settings.clone().build()?)
    }

    /// What ffd_init() warns about: unknown `FFD_*` names first, then what
    /// the settings say (as an environment's resolution orders them).
    pub(super) fn warnings(&self, config: &Config) -> Vec<ConfigWarning> {
        let unknown = Env::from_pairs(self.unknown.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut warnings = unknown.unknown_variables();
        warnings.extend_from_slice(config.warnings());
        warnings
    }

    /// The launcher bootstrap's variables: the process environment's,
    /// overridden by what this config sets.
    pub(super) fn bootstrap_env(&self) -> Env {
        let process = Env::process();
        // Later pairs win.
        Env::from_pairs(
            process
                .iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .chain(
                    self.bootstrap
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), v.clone())),
                ),
        )
    }
}

/// Creates a config holding the defaults (see `ffd info`); the environment
/// is not read (ffd_config_load_env() does that). Free it with
/// ffd_config_free().
///
/// @param[out] out receives the new config on success.
/// @return FFD_OK, or FFD_ERR_NULL.
///
/// # Safety
/// `out` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_new(out: *mut *mut ffd_config_t) -> ffd_result {
    boundary("ffd_config_new", || {
        if out.is_null() {
            return Err(Error::null("out"));
        }
        let cfg = Box::into_raw(Box::new(ffd_config_t::new()));
        // SAFETY: `out` is non-NULL and valid for a write (contract).
        unsafe { *out = cfg };
        Ok(FFD_OK)
    })
}

/// Creates a config from the process environment's `FFD_*` variables over
/// the defaults (as ffd_config_new() then ffd_config_load_env()). Later
/// ffd_config_set() calls override what the environment said; unknown
/// `FFD_*` names are kept and warned about by ffd_init().
///
/// @param[out] out receives the new config on success.
/// @return FFD_OK, FFD_ERR_NULL, or FFD_ERR_CONFIG when a variable's value
/// is not accepted (the message names it, its value and the accepted form).
///
/// # Safety
/// `out` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_from_env(out: *mut *mut ffd_config_t) -> ffd_result {
    boundary("ffd_config_from_env", || {
        if out.is_null() {
            return Err(Error::null("out"));
        }
        let mut cfg = ffd_config_t::new();
        cfg.load_env()?;
        // SAFETY: `out` is non-NULL and valid for a write (contract).
        unsafe { *out = Box::into_raw(Box::new(cfg)) };
        Ok(FFD_OK)
    })
}

/// Applies the process environment's `FFD_*` variables over what `cfg`
/// holds: call it after setting the embedder's own defaults with
/// ffd_config_set() to let users override them, as HPC users expect.
///
/// @return FFD_OK, FFD_ERR_NULL, or FFD_ERR_CONFIG (then `cfg` is unchanged).
///
/// # Safety
/// `cfg` is NULL or a live config not used by another thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_load_env(cfg: *mut ffd_config_t) -> ffd_result {
    boundary("ffd_config_load_env", || {
        // SAFETY: NULL or a live, unshared config (contract).
        let cfg = unsafe { cfg.as_mut() }.ok_or_else(|| Error::null("cfg"))?;
        cfg.load_env()?;
        Ok(FFD_OK)
    })
}

/// Sets one `FFD_*` variable, e.g. `ffd_config_set(cfg, "FFD_PERIOD",
/// "10ms")`, with the same syntax and checks as the environment variable.
/// `value` NULL removes the setting (back to the default). Checks that need
/// two settings (the timeout must exceed the period) happen in ffd_init().
/// The bootstrap variables (FFD_BOOTSTRAP, FFD_RANK, FFD_SIZE,
/// FFD_BOOTSTRAP_TIMEOUT) apply when ffd_init() gets no `oob`.
///
/// @return FFD_OK; FFD_ERR_NULL (`cfg` or `name`); FFD_ERR_INVALID_ARGUMENT
/// for a name that is not an ffd variable (the message suggests the closest
/// one) or text that is not UTF-8; FFD_ERR_CONFIG for a value that is not
/// accepted (the message names the variable, the value and the accepted
/// form). On error `cfg` is unchanged.
///
/// # Safety
/// `cfg` is NULL or a live config not used by another thread during the
/// call; `name` and `value` are NULL or NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_set(
    cfg: *mut ffd_config_t,
    name: *const c_char,
    value: *const c_char,
) -> ffd_result {
    boundary("ffd_config_set", || {
        // SAFETY: NULL or a live, unshared config (contract).
        let cfg = unsafe { cfg.as_mut() }.ok_or_else(|| Error::null("cfg"))?;
        // SAFETY: NULL or NUL-terminated, valid during the call (contract).
        let name = unsafe { str_arg(name, "name") }?;
        let var = known_variable(name)?;
        let value = if value.is_null() {
            None
        } else {
            // SAFETY: non-NULL, NUL-terminated, valid during the call (contract).
            Some(unsafe { str_arg(value, "value") }?)
        };
        cfg.set(var, value)?;
        Ok(FFD_OK)
    })
}

/// Sets a duration setting from nanoseconds: typed, checked at once.
fn set_nanos(
    cfg: *mut ffd_config_t,
    setting: &Setting<Duration>,
    ns: u64,
) -> Result<ffd_result, Error> {
    // SAFETY: the callers pass their `cfg` argument under the same contract
    // (NULL or a live config, not used by another thread during the call).
    let cfg = unsafe { cfg.as_mut() }.ok_or_else(|| Error::null("cfg"))?;
    cfg.settings.set_value(setting, Duration::from_nanos(ns))?;
    Ok(FFD_OK)
}

/// Sets the heartbeat period (FFD_PERIOD) in nanoseconds; must be positive.
///
/// @return FFD_OK, FFD_ERR_NULL or FFD_ERR_CONFIG.
///
/// # Safety
/// As ffd_config_set().
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_set_period_ns(cfg: *mut ffd_config_t, ns: u64) -> ffd_result {
    boundary("ffd_config_set_period_ns", || {
        set_nanos(cfg, &setting::PERIOD, ns)
    })
}

/// Sets the detection timeout (FFD_TIMEOUT) in nanoseconds; must exceed the
/// period (checked by ffd_init()).
///
/// @return FFD_OK, FFD_ERR_NULL or FFD_ERR_CONFIG.
///
/// # Safety
/// As ffd_config_set().
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_set_timeout_ns(cfg: *mut ffd_config_t, ns: u64) -> ffd_result {
    boundary("ffd_config_set_timeout_ns", || {
        set_nanos(cfg, &setting::TIMEOUT, ns)
    })
}

/// The effective value of variable `name` under `cfg` (its value, or the
/// default), in the form the variable accepts, e.g. "10ms". Copied as
/// ffd_last_error_message() does (NUL-terminated, truncated to `len - 1`,
/// full length in `*out_len`). Bootstrap variables give their set value or "".
///
/// @return FFD_OK; FFD_ERR_NULL; FFD_ERR_INVALID_ARGUMENT for an unknown
/// name; FFD_ERR_CONFIG when the settings together are not valid (timeout
/// not above the period).
///
/// # Safety
/// `cfg` is NULL or a live config not being modified during the call;
/// `name` is NULL or NUL-terminated; `buf` is NULL or valid for `len`
/// bytes; `out_len` is NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_get(
    cfg: *const ffd_config_t,
    name: *const c_char,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> ffd_result {
    boundary("ffd_config_get", || {
        // SAFETY: NULL or a live config (contract).
        let cfg = unsafe { cfg.as_ref() }.ok_or_else(|| Error::null("cfg"))?;
        // SAFETY: NULL or NUL-terminated, valid during the call (contract).
        let name = unsafe { str_arg(name, "name") }?;
        if variable(name).is_none() {
            return Err(Error::invalid(format!("{name} is not an ffd variable")));
        }
        let value = match cfg
            .resolve()?
            .settings()
            .into_iter()
            .find(|s| s.var == name)
        {
            Some(setting) => setting.value,
            None => cfg.bootstrap.get(name).cloned().unwrap_or_default(),
        };
        // SAFETY: the pointers come with this function's own contract.
        unsafe { write_text(&value, buf, len, out_len) }?;
        Ok(FFD_OK)
    })
}

/// Registers the event callback (see ffd_event_callback): it sees every
/// event of the detector started with this config, from the first one on,
/// on the progress thread. `callback` NULL removes it. `userdata` is passed
/// back untouched and must stay valid until ffd_finalize() has returned.
/// Events are also queued for ffd_next_event() either way.
///
/// @return FFD_OK or FFD_ERR_NULL (`cfg`).
///
/// # Safety
/// `cfg` is NULL or a live config not used by another thread during the
/// call; `callback` is NULL or a function with that signature that stays
/// callable, with `userdata`, from another thread until ffd_finalize() of
/// every detector started with this config has returned.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_set_callback(
    cfg: *mut ffd_config_t,
    callback: ffd_event_callback,
    userdata: *mut c_void,
) -> ffd_result {
    boundary("ffd_config_set_callback", || {
        // SAFETY: NULL or a live, unshared config (contract).
        let cfg = unsafe { cfg.as_mut() }.ok_or_else(|| Error::null("cfg"))?;
        cfg.callback = callback.map(|f| HostCallback { f, userdata });
        Ok(FFD_OK)
    })
}

/// Frees a config. NULL is a no-op. Detectors started with it are not
/// affected.
///
/// # Safety
/// `cfg` is NULL or a config from ffd_config_new()/ffd_config_from_env()
/// not freed before and not used by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_config_free(cfg: *mut ffd_config_t) {
    boundary_value(
        "ffd_config_free",
        (),
        |_| (),
        || {
            if !cfg.is_null() {
                // SAFETY: a config from Box::into_raw in ffd_config_new or
                // ffd_config_from_env, freed once (contract).
                drop(unsafe { Box::from_raw(cfg) });
            }
            Ok(())
        },
    )
}
