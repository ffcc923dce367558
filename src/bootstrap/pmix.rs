//! The PMIx bootstrap: the address exchange of a job launched by a PMIx
//! launcher (`mpirun` of Open MPI ≥ 4, `prterun`, Slurm's `srun
//! --mpi=pmix`), through the launcher's own PMIx server (feature `pmix`).
//!
//! Use it when the embedding library did not hand ffd an allgather of its own
//! ([`EmbedderAllgather`](super::EmbedderAllgather) is cheaper when it can) and the
//! job was not started by the `ffd` launcher ([`TcpBootstrap`](super::tcp::TcpBootstrap)):
//! a standalone tool or an OpenSHMEM runtime under `mpirun`/`srun` needs no
//! rendezvous of its own, the launcher already runs one.
//!
//! Each [`allgather`](Bootstrap::allgather) round is one PMIx exchange:
//! `PMIx_Put(PMIX_GLOBAL, "ffd.<n>", bytes)`, `PMIx_Commit`, `PMIx_Fence`
//! over the whole namespace with `PMIX_COLLECT_DATA` (the server gathers
//! every rank's data during the fence, so the gets that follow are local),
//! then `PMIx_Get("ffd.<n>")` from every other rank. `n` counts the rounds
//! of every `PmixBootstrap` of this process, so a second detector started in
//! the same job after a first one never reads the first one's keys; ranks
//! that run the same sequence of rounds use the same keys.
//!
//! Ranks: [`rank`](Bootstrap::rank) is the process's PMIx rank in its
//! namespace and [`size`](Bootstrap::size) is `PMIX_JOB_SIZE` of that
//! namespace. Under `mpirun` and `srun` these are the process's
//! `MPI_COMM_WORLD` rank and size. Checked with Open MPI 4.1.4: `PMIX_RANK`
//! equals `OMPI_COMM_WORLD_RANK`, and the applications of an MPMD launch
//! (`mpirun -np 1 a : -np 2 b`) share one namespace, ranked 0, 1, 2 as in
//! `MPI_COMM_WORLD`. Processes added later with `MPI_Comm_spawn` live in
//! another namespace and are not part of the exchange.
//!
//! Bounded waits: the fence and the gets carry `PMIX_TIMEOUT`, set from
//! `FFD_BOOTSTRAP_TIMEOUT` (default 60 s; PMIx counts whole seconds, so the
//! bound is rounded up to the next second). A rank that never reaches the
//! fence makes every other rank's round fail with
//! [`BootstrapError::Timeout`] rather than hang (checked under Open MPI
//! 4.1.4's `mpirun`, PMIx 4.2.2, by this module's test).
//!
//! Initialisation: `PMIx_Init` is reference counted (documented in PMIx
//! 4.2.2's `pmix.h`, and checked by this module's test, which finalizes a
//! second `PmixBootstrap` and goes on with the first): when the embedding MPI
//! library has already initialised PMIx, [`PmixBootstrap::init`] takes one
//! more reference on the same connection and dropping the bootstrap gives it
//! back with `PMIx_Finalize`; only the last `PMIx_Finalize` of the process
//! closes the connection. Open MPI 4.1.4's `ext3x` component links the same
//! system `libpmix.so.2`, so the count is shared. Drop the bootstrap (or
//! call [`PmixBootstrap::finalize`]) before the embedder finalizes PMIx.
//! A *failed* `PMIx_Init` is never finalized: PMIx 4.2.2 then still reports
//! itself initialised (`PMIx_Initialized() == 1`), and a `PMIx_Finalize`
//! in that state crashed (SIGSEGV) here, so the half-initialised client is
//! left alone.
//!
//! What PMIx does not do, and why ffd exists (observed here with
//! Open MPI 4.1.4 and PMIx 4.2.2): under `mpirun --enable-recovery` the job
//! survives a rank's SIGKILL, but the surviving ranks receive **no** PMIx
//! event of any kind — handlers registered for every process-termination
//! status stay silent — and `mpirun` exits 0. PMIx is the right channel to
//! exchange addresses at start, not a failure detector.
//!
//! Memory: `PMIx_Get` returns a `pmix_value_t` that PMIx allocated; it is
//! released as `PMIX_VALUE_RELEASE` does (a macro in 4.2, so by hand):
//! `PMIx_Value_destruct` frees the data it holds, then `free` the struct
//! (PMIx's `pmix_free` is `free`). The values and infos this module passes
//! in are built on the stack and only borrowed for the call: `PMIx_Put`
//! copies the value into the client's store before it returns, the infos
//! hold no heap data (a bool and an int).

use std::ffi::{CStr, CString, c_char, c_void};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use pmix_sys::{
    PMIX_BOOL, PMIX_BYTE_OBJECT, PMIX_COLLECT_DATA, PMIX_ERR_TIMEOUT, PMIX_GLOBAL, PMIX_INT,
    PMIX_JOB_SIZE, PMIX_RANK_UNDEF, PMIX_RANK_WILDCARD, PMIX_SUCCESS, PMIX_TIMEOUT, PMIX_UINT32,
    PMIx_Commit, PMIx_Error_string, PMIx_Fence, PMIx_Finalize, PMIx_Get, PMIx_Init, PMIx_Put,
    PMIx_Value_destruct, pmix_byte_object_t, pmix_info_t, pmix_key_t, pmix_nspace_t, pmix_proc_t,
    pmix_status_t, pmix_value__bindgen_ty_1, pmix_value_t,
};

use super::{Bootstrap, BootstrapError, MAX_CONTRIBUTION};
use crate::config::Env;
use crate::protocol::Rank;

/// Rounds of every `PmixBootstrap` of this process, so that keys never repeat.
static ROUNDS: AtomicU64 = AtomicU64::new(0);

/// The variables a PMIx server sets for the clients it launches; without
/// both, `PMIx_Init` has no server to connect to.
pub const LAUNCH_VARIABLES: [&str; 2] = ["PMIX_NAMESPACE", "PMIX_RANK"];

/// A rank's side of the PMIx exchange. Not `Clone`: it holds one reference
/// on the process's PMIx client, given back on drop.
#[derive(Debug)]
pub struct PmixBootstrap {
    /// This process's namespace and rank, as `PMIx_Init` returned them.
    me: pmix_proc_t,
    size: u32,
    timeout: Duration,
    failed: Option<String>,
    finalized: bool,
}

impl PmixBootstrap {
    /// Whether this process was launched by a PMIx server (`PMIX_NAMESPACE`
    /// and `PMIX_RANK` are in its environment). Cheap; calls no PMIx function.
    pub fn is_available() -> bool {
        missing_launch_variables(|name| std::env::var_os(name).is_some()).is_empty()
    }

    /// Connects to the launcher's PMIx server (`PMIx_Init`) and learns this
    /// rank and the job size, with the bound from `FFD_BOOTSTRAP_TIMEOUT`.
    ///
    /// Outside a PMIx launch it fails at once with
    /// [`BootstrapError::Unavailable`], without calling PMIx.
    pub fn init() -> Result<PmixBootstrap, BootstrapError> {
        PmixBootstrap::init_with_env(&Env::process())
    }

    /// [`init`](Self::init) with the `FFD_*` settings of `env`.
    pub fn init_with_env(env: &Env) -> Result<PmixBootstrap, BootstrapError> {
        PmixBootstrap::init_with_timeout(super::tcp::timeout_from_env(env)?)
    }

    /// [`init`](Self::init) with an explicit bound on the fences and gets
    /// (rounded up to whole seconds, at least one).
    pub fn init_with_timeout(timeout: Duration) -> Result<PmixBootstrap, BootstrapError> {
        if timeout.is_zero() {
            return Err(BootstrapError::Invalid(
                "the PMIx bootstrap's timeout must be positive".into(),
            ));
        }
        let missing = missing_launch_variables(|name| std::env::var_os(name).is_some());
        if !missing.is_empty() {
            return Err(BootstrapError::Unavailable {
                bootstrap: "PMIx",
                why: format!(
                    "{} not set: this process was not started by a PMIx launcher \
                     (mpirun, prterun, srun --mpi=pmix)",
                    missing.join(" and ")
                ),
            });
        }

        let mut me = pmix_proc_t {
            nspace: [0; 256],
            rank: PMIX_RANK_UNDEF,
        };
        // SAFETY: `me` is a valid, writable pmix_proc_t for PMIx to fill in;
        // a null info array with a count of 0 is allowed by PMIx_Init.
        let status = unsafe { PMIx_Init(&mut me, ptr::null_mut(), 0) };
        check(status, "PMIx_Init", || {
            "connecting to the launcher's PMIx server".to_owned()
        })?;
        // From here on we hold a reference: dropping `boot` gives it back.
        let mut boot = PmixBootstrap {
            me,
            size: 0,
            timeout,
            failed: None,
            finalized: false,
        };
        boot.size = boot.job_size()?;
        if boot.me.rank >= boot.size {
            return Err(BootstrapError::Invalid(format!(
                "PMIx gave this process rank {} in namespace `{}`, not below its job size {}",
                boot.me.rank,
                boot.namespace(),
                boot.size
            )));
        }
        Ok(boot)
    }

    /// The PMIx namespace of this job (the launcher's job id, e.g. `1720975361`).
    pub fn namespace(&self) -> String {
        nspace_text(&self.me.nspace)
    }

    /// The bound on each fence and get, as PMIx applies it (whole seconds).
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(timeout_secs(self.timeout).unsigned_abs().into())
    }

    /// Gives back this bootstrap's reference on the PMIx client
    /// (`PMIx_Finalize`) and reports its status, which dropping cannot.
    pub fn finalize(mut self) -> Result<(), BootstrapError> {
        self.finalized = true;
        // SAFETY: we hold one reference from a successful PMIx_Init (and
        // `finalized` was false); a null info array with count 0 is allowed.
        let status = unsafe { PMIx_Finalize(ptr::null(), 0) };
        check(status, "PMIx_Finalize", || {
            "closing this process's PMIx bootstrap".to_owned()
        })
    }

    /// `PMIX_JOB_SIZE` of our namespace (job-level data: `PMIX_RANK_WILDCARD`).
    fn job_size(&self) -> Result<u32, BootstrapError> {
        let job = pmix_proc_t {
            nspace: self.me.nspace,
            rank: PMIX_RANK_WILDCARD,
        };
        let key = key_ptr(PMIX_JOB_SIZE);
        let when = || format!("reading PMIX_JOB_SIZE of namespace `{}`", self.namespace());
        let value = get(&job, key, &[], "PMIx_Get", &when)?;
        match value.uint32() {
            Some(size) if size > 0 => Ok(size),
            Some(_) => Err(BootstrapError::Invalid(format!(
                "PMIx says namespace `{}` has 0 processes",
                self.namespace()
            ))),
            None => Err(BootstrapError::Invalid(format!(
                "PMIX_JOB_SIZE of namespace `{}` has PMIx data type {}, not PMIX_UINT32",
                self.namespace(),
                value.data_type()
            ))),
        }
    }

    fn round(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        let n = ROUNDS.fetch_add(1, Ordering::Relaxed);
        let key_text = format!("ffd.{n}");
        let key = CString::new(key_text.clone()).expect("no NUL in a formatted key");
        let mut value = pmix_value_t {
            type_: PMIX_BYTE_OBJECT as u16,
            data: pmix_value__bindgen_ty_1 {
                bo: pmix_byte_object_t {
                    // PMIx_Put only reads the bytes (it copies them).
                    bytes: mine.as_ptr().cast::<c_char>().cast_mut(),
                    size: mine.len(),
                },
            },
        };
        // SAFETY: `key` is a NUL-terminated string and `value` a byte object
        // whose `bytes`/`size` describe `mine`, all alive for the call;
        // PMIx_Put copies the value into the client's store before returning
        // and does not write through `bytes`.
        let status = unsafe { PMIx_Put(PMIX_GLOBAL as u8, key.as_ptr(), &mut value) };
        check(status, "PMIx_Put", || {
            format!(
                "storing this rank's {} bytes under `{key_text}`",
                mine.len()
            )
        })?;
        // SAFETY: no arguments; PMIx is initialised (we hold a reference).
        let status = unsafe { PMIx_Commit() };
        check(status, "PMIx_Commit", || format!("publishing `{key_text}`"))?;

        let secs = timeout_secs(self.timeout);
        let all = pmix_proc_t {
            nspace: self.me.nspace,
            rank: PMIX_RANK_WILDCARD,
        };
        let fence_info = [
            info_bool(PMIX_COLLECT_DATA, true),
            info_int(PMIX_TIMEOUT, secs),
        ];
        // SAFETY: one valid proc and a 2-element info array, both on the
        // stack and alive for the (blocking) call; PMIx only reads them.
        let status = unsafe { PMIx_Fence(&all, 1, fence_info.as_ptr(), fence_info.len()) };
        if status == PMIX_ERR_TIMEOUT {
            return Err(BootstrapError::Timeout {
                after: self.timeout(),
                waiting: format!(
                    "every rank of namespace `{}` to reach PMIx_Fence for `{key_text}` \
                     (PMIx_Fence: {})",
                    self.namespace(),
                    error_text(status)
                ),
            });
        }
        check(status, "PMIx_Fence", || {
            format!(
                "exchanging `{key_text}` among the {} ranks of namespace `{}`",
                self.size,
                self.namespace()
            )
        })?;

        let get_info = [info_int(PMIX_TIMEOUT, secs)];
        let mut out = Vec::with_capacity(self.size as usize);
        for rank in 0..self.size {
            if rank == self.me.rank {
                out.push(mine.to_vec());
                continue;
            }
            let peer = pmix_proc_t {
                nspace: self.me.nspace,
                rank,
            };
            let when = || format!("reading `{key_text}` of rank {rank}");
            let value = get(&peer, key.as_ptr(), &get_info, "PMIx_Get", &when)?;
            let Some(bytes) = value.bytes() else {
                return Err(BootstrapError::Invalid(format!(
                    "rank {rank}'s `{key_text}` has PMIx data type {}, not PMIX_BYTE_OBJECT",
                    value.data_type()
                )));
            };
            if bytes.len() > MAX_CONTRIBUTION {
                return Err(BootstrapError::TooLarge {
                    rank,
                    len: bytes.len() as u64,
                });
            }
            out.push(bytes.to_vec());
        }
        Ok(out)
    }
}

impl Bootstrap for PmixBootstrap {
    fn rank(&self) -> Rank {
        self.me.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        if let Some(why) = &self.failed {
            return Err(BootstrapError::Failed(why.clone()));
        }
        if mine.len() > MAX_CONTRIBUTION {
            return Err(BootstrapError::TooLarge {
                rank: self.me.rank,
                len: mine.len() as u64,
            });
        }
        self.round(mine)
            .inspect_err(|e| self.failed = Some(e.to_string()))
    }
}

impl Drop for PmixBootstrap {
    fn drop(&mut self) {
        if !self.finalized {
            // SAFETY: as in `finalize`: one reference from our PMIx_Init,
            // not yet given back. Its status cannot be reported from drop;
            // `finalize` is the way to see it.
            let _ = unsafe { PMIx_Finalize(ptr::null(), 0) };
        }
    }
}

/// The launch variables missing from an environment (`is_set` answers for
/// one name).
fn missing_launch_variables(is_set: impl Fn(&str) -> bool) -> Vec<&'static str> {
    LAUNCH_VARIABLES
        .iter()
        .copied()
        .filter(|name| !is_set(name))
        .collect()
}

/// Seconds for `PMIX_TIMEOUT` (an int; 0 would mean "wait forever").
fn timeout_secs(timeout: Duration) -> i32 {
    let secs = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
}

/// PMIx's text for a status.
fn error_text(status: pmix_status_t) -> String {
    // SAFETY: PMIx_Error_string may be called at any time (it looks the
    // status up in a static table) and returns a pointer to a static,
    // NUL-terminated string, or null, which we check.
    let text = unsafe { PMIx_Error_string(status) };
    if text.is_null() {
        return format!("unknown PMIx status {status}");
    }
    // SAFETY: non-null, NUL-terminated, static (never freed).
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

/// `Ok` for `PMIX_SUCCESS`; otherwise an error naming the call, what it was
/// for, and PMIx's text for the status.
fn check(
    status: pmix_status_t,
    call: &'static str,
    when: impl FnOnce() -> String,
) -> Result<(), BootstrapError> {
    if status == PMIX_SUCCESS as pmix_status_t {
        return Ok(());
    }
    Err(BootstrapError::Pmix {
        call,
        when: when(),
        status,
        text: error_text(status),
    })
}

/// The text of a NUL-terminated namespace array.
fn nspace_text(nspace: &pmix_nspace_t) -> String {
    let bytes = nspace.map(|c| c as u8);
    CStr::from_bytes_until_nul(&bytes)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned())
}

/// A `pmix_sys` key constant (NUL-terminated bytes) as a C string pointer.
fn key_ptr(key: &'static [u8]) -> *const c_char {
    debug_assert_eq!(key.last(), Some(&0), "PMIx key constants end in NUL");
    key.as_ptr().cast()
}

/// An info key: a PMIx key constant copied into the fixed-size array.
fn info_key(key: &'static [u8]) -> pmix_key_t {
    let mut out: pmix_key_t = [0; 512];
    let key = key.strip_suffix(&[0]).unwrap_or(key);
    assert!(key.len() < out.len(), "PMIx attribute names are short");
    for (o, &b) in out.iter_mut().zip(key) {
        *o = b as c_char;
    }
    out
}

/// A `pmix_info_t` holding a bool (no heap data: nothing to destruct).
fn info_bool(key: &'static [u8], flag: bool) -> pmix_info_t {
    pmix_info_t {
        key: info_key(key),
        flags: 0,
        value: pmix_value_t {
            type_: PMIX_BOOL as u16,
            data: pmix_value__bindgen_ty_1 { flag },
        },
    }
}

/// A `pmix_info_t` holding an int (no heap data: nothing to destruct).
fn info_int(key: &'static [u8], integer: i32) -> pmix_info_t {
    pmix_info_t {
        key: info_key(key),
        flags: 0,
        value: pmix_value_t {
            type_: PMIX_INT as u16,
            data: pmix_value__bindgen_ty_1 { integer },
        },
    }
}

/// `PMIx_Get` of `key` from `proc_`; the value PMIx allocated is owned by
/// the returned guard.
fn get(
    proc_: &pmix_proc_t,
    key: *const c_char,
    info: &[pmix_info_t],
    call: &'static str,
    when: &dyn Fn() -> String,
) -> Result<Value, BootstrapError> {
    let mut out: *mut pmix_value_t = ptr::null_mut();
    let info_ptr = if info.is_empty() {
        ptr::null()
    } else {
        info.as_ptr()
    };
    // SAFETY: `proc_`, the NUL-terminated `key` and `info` are valid and
    // alive for the blocking call, which only reads them; `out` is a valid
    // place for PMIx to store a pointer to a value it allocates.
    let status = unsafe { PMIx_Get(proc_, key, info_ptr, info.len(), &mut out) };
    check(status, call, when)?;
    NonNull::new(out)
        .map(Value)
        .ok_or_else(|| BootstrapError::Pmix {
            call,
            when: when(),
            status,
            text: "returned success but no value".into(),
        })
}

/// A `pmix_value_t` allocated by `PMIx_Get`, released on drop as
/// `PMIX_VALUE_RELEASE` does.
struct Value(NonNull<pmix_value_t>);

impl Value {
    fn data_type(&self) -> u16 {
        // SAFETY: the pointer came from a successful PMIx_Get and is valid
        // until we drop it.
        unsafe { self.0.as_ref() }.type_
    }

    fn uint32(&self) -> Option<u32> {
        if self.data_type() != PMIX_UINT32 as u16 {
            return None;
        }
        // SAFETY: valid as above; `uint32` is the union member PMIx sets for
        // PMIX_UINT32, checked above.
        Some(unsafe { self.0.as_ref().data.uint32 })
    }

    fn bytes(&self) -> Option<&[u8]> {
        if self.data_type() != PMIX_BYTE_OBJECT as u16 {
            return None;
        }
        // SAFETY: valid as above; `bo` is the member PMIx sets for
        // PMIX_BYTE_OBJECT, checked above.
        let bo = unsafe { self.0.as_ref().data.bo };
        if bo.bytes.is_null() || bo.size == 0 {
            return Some(&[]);
        }
        // SAFETY: PMIx allocated `size` bytes at `bytes` for this value;
        // they live, unchanged, until `self` is dropped, which the returned
        // borrow of `self` prevents.
        Some(unsafe { std::slice::from_raw_parts(bo.bytes.cast::<u8>(), bo.size) })
    }
}

impl Drop for Value {
    fn drop(&mut self) {
        let value = self.0.as_ptr();
        // SAFETY: PMIx_Get allocated `value` (malloc) and handed it to us;
        // PMIx_Value_destruct frees what it holds and `free` frees the
        // struct itself, exactly PMIX_VALUE_RELEASE; nothing uses it after.
        unsafe {
            PMIx_Value_destruct(value);
            pmix_sys::free(value.cast::<c_void>());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn availability_needs_both_launch_variables() {
        assert!(missing_launch_variables(|_| true).is_empty());
        assert_eq!(
            missing_launch_variables(|_| false),
            ["PMIX_NAMESPACE", "PMIX_RANK"]
        );
        assert_eq!(
            missing_launch_variables(|n| n == "PMIX_NAMESPACE"),
            ["PMIX_RANK"]
        );
    }

    #[test]
    fn timeouts_round_up_to_whole_seconds() {
        assert_eq!(timeout_secs(Duration::from_millis(1)), 1);
        assert_eq!(timeout_secs(Duration::from_secs(2)), 2);
        assert_eq!(timeout_secs(Duration::from_millis(2001)), 3);
        assert_eq!(timeout_secs(Duration::from_secs(60)), 60);
        assert_eq!(timeout_secs(Duration::from_secs(u64::MAX)), i32::MAX);
    }

    #[test]
    fn info_keys_are_copied_with_their_terminator() {
        let key = info_key(PMIX_COLLECT_DATA);
        let bytes = key.map(|c| c as u8);
        assert_eq!(
            CStr::from_bytes_until_nul(&bytes).unwrap().to_bytes(),
            b"pmix.collect"
        );
        let info = info_int(PMIX_TIMEOUT, 7);
        assert_eq!(info.value.type_, PMIX_INT as u16);
        // SAFETY: `integer` is the member info_int sets.
        assert_eq!(unsafe { info.value.data.integer }, 7);
    }

    #[test]
    fn status_texts_come_from_pmix() {
        assert_eq!(error_text(PMIX_ERR_TIMEOUT), "TIMEOUT");
        let err = check(PMIX_ERR_TIMEOUT, "PMIx_Fence", || "testing".into()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "PMIx_Fence failed testing: TIMEOUT (PMIx status -24)"
        );
        assert!(check(PMIX_SUCCESS as pmix_status_t, "PMIx_Commit", String::new).is_ok());
    }
}
