//! Start and stop: ffd_init() (the settings, the bootstrap — the embedder's
//! allgather or the launcher's — and the detector with the embedder's
//! callback) and ffd_finalize().
//!
//! Owns: the handle's birth and death, and the rules that an event callback
//! must not finalize and that no callback runs after ffd_finalize()
//! returns. Must not: start any communication before the settings are
//! known to be valid (a bad setting fails every rank the same way, without
//! a hang), free a handle twice, or return from ffd_finalize() while the
//! progress thread (and so a callback) may still run.

use std::cell::Cell;

use super::ffd_result::{self, *};
use super::{Error, boundary, ffd_config_t, ffd_oob_t, ffd_t, to_c_event};
use crate::bootstrap::{self, Bootstrap, EmbedderAllgather};
use crate::config::LogLevel;
use crate::protocol::Rank;
use crate::runtime::{Detector, DetectorEvent};

thread_local! {
    /// This thread is running a embedder's event callback (it is a progress thread).
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// The embedder's allgather as a [`Bootstrap`].
fn host_bootstrap(oob: &ffd_oob_t) -> Result<Box<dyn Bootstrap>, Error> {
    let Some(f) = oob.allgather else {
        return Err(Error::null("oob->allgather"));
    };
    if oob.size <= 0 || oob.rank < 0 || oob.rank >= oob.size {
        return Err(Error::invalid(format!(
            "oob->rank {} and oob->size {}: need 0 <= rank < size",
            oob.rank, oob.size
        )));
    }
    let userdata = oob.userdata;
    let bootstrap = EmbedderAllgather::new(
        oob.rank as Rank,
        oob.size as u32,
        move |mine: &[u8], all: &mut [u8]| {
            // SAFETY: `f` is the embedder's allgather (ffd_oob_t's contract): it reads
            // `mine.len()` bytes at `mine` and writes `mine.len() * size` bytes
            // at `all`, which EmbedderAllgather sized so; both live for the call.
            let rc = unsafe {
                f(
                    userdata,
                    mine.as_ptr().cast(),
                    mine.len(),
                    all.as_mut_ptr().cast(),
                )
            };
            if rc == 0 {
                Ok(())
            } else {
                Err(format!("the ffd_oob_t allgather callback returned {rc}"))
            }
        },
    )?;
    Ok(Box::new(bootstrap))
}

/// Starts this process's detector: exchanges records with every other
/// rank, opens its own libfabric endpoint (none when every rank is on this
/// host and FFD_LOCAL=auto finds futex_waitv: the host's shared memory then
/// carries everything and no socket of libfabric's listens), builds the
/// observation ring,
/// starts the pinned progress thread, and returns once this rank's
/// heartbeat link is up (or the start-up grace has passed). **Collective**:
/// every rank of the job must call it, each once per detector.
///
/// Address exchange: through `oob` (the embedder's allgather, called on this
/// thread during the call) when it is not NULL. Otherwise through the
/// launcher: the TCP rendezvous named by FFD_BOOTSTRAP (with FFD_RANK,
/// FFD_SIZE) when that is set, in the config or the environment, else PMIx
/// when the process was started by mpirun/prterun/srun and the library was
/// built with the `pmix` feature (ranks are then PMIx ranks, the
/// MPI_COMM_WORLD ranks).
///
/// Settings: `cfg`, or the environment when `cfg` is NULL (as
/// ffd_config_from_env()). They are checked before any communication, so a
/// bad setting fails every rank the same way without a hang. `cfg` may be
/// freed right after the call. Warnings (unknown `FFD_*` names, a timeout
/// under three periods) go to stderr unless FFD_LOG is `off` or `error`.
///
/// @param oob the embedder's collective, or NULL.
/// @param cfg the settings and callback, or NULL.
/// @param[out] out receives the handle on success only.
/// @return FFD_OK; FFD_ERR_NULL (`out`, or `oob->allgather`);
/// FFD_ERR_INVALID_ARGUMENT (rank/size); FFD_ERR_CONFIG; FFD_ERR_BOOTSTRAP;
/// FFD_ERR_FABRIC; FFD_ERR_SYSTEM.
///
/// # Safety
/// `oob` is NULL or a valid ffd_oob_t whose allgather honours
/// ffd_allgather_fn's contract; `cfg` is NULL or a live config not used by
/// another thread during the call; `out` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_init(
    oob: *const ffd_oob_t,
    cfg: *const ffd_config_t,
    out: *mut *mut ffd_t,
) -> ffd_result {
    boundary("ffd_init", || {
        if out.is_null() {
            return Err(Error::null("out"));
        }
        // SAFETY: NULL or a live config (contract).
        let cfg = match unsafe { cfg.as_ref() } {
            Some(cfg) => cfg.clone(),
            None => {
                let mut cfg = ffd_config_t::new();
                cfg.load_env()?;
                cfg
            }
        };
        let config = cfg.resolve()?;
        if config.log() >= LogLevel::Warn {
            for warning in cfg.warnings(&config) {
                eprintln!("ffd: warning: {warning}");
            }
        }
        // SAFETY: NULL or a valid ffd_oob_t (contract); copied at once.
        let mut bootstrap = match unsafe { oob.as_ref() } {
            Some(oob) => host_bootstrap(oob)?,
            None => bootstrap::from_env(&cfg.bootstrap_env())?,
        };
        let me = bootstrap.rank();
        let detector = match cfg.callback {
            Some(registered) => {
                let callback = move |event: &DetectorEvent| {
                    let c = to_c_event(event, me);
                    IN_CALLBACK.set(true);
                    registered.call(&c);
                    IN_CALLBACK.set(false);
                };
                Detector::start_with_callback(&config, bootstrap.as_mut(), Box::new(callback))
            }
            None => Detector::start(&config, bootstrap.as_mut()),
        }
        .map_err(|e| {
            let mut e = Error::from(e);
            e.message = format!("rank {me}: {}", e.message);
            e
        })?;
        // Give a launcher connection (PMIx reference) back at once.
        drop(bootstrap);
        let handle = Box::into_raw(Box::new(ffd_t { detector }));
        // SAFETY: `out` is non-NULL and valid for a write (contract).
        unsafe { *out = handle };
        Ok(FFD_OK)
    })
}

/// Leaves cleanly and frees the detector: tells the other ranks this rank
/// is going (they see FFD_EVENT_LEFT, not a failure), keeps the link up a
/// few periods so the notice gets out, stops the progress thread and waits
/// for it to end, releases the fabric resources, and sets `*handle` to
/// NULL. Also the way to free the handle of a detector that was excluded
/// or has stopped.
///
/// Callbacks: once ffd_finalize() has begun, no new callback starts
/// (events still reach the queue, freed with the handle); if one is
/// running, ffd_finalize() waits for it to return; after ffd_finalize()
/// returns, none ever runs again, so the callback's `userdata` and code may
/// go (free, dlclose). Bounded by a few periods plus 2 s, unless a
/// callback does not return: then ffd_finalize() does not return either,
/// and from then on it prints, every 5 s, at FFD_LOG=warn (the default) or
/// above:
/// `ffd[R] warn: shutdown (ffd_finalize) is waiting for the event callback to return (running for Ns); it cannot return before the callback does`.
///
/// Takes the address of the handle so that a second call is safe: it finds
/// NULL and returns FFD_ERR_NULL. Copies of the pointer elsewhere dangle
/// after the call (using them is undefined behaviour, as after free()).
///
/// Must not race with any other call on the same handle, and must not be
/// called from an event callback (that returns FFD_ERR_INVALID_ARGUMENT).
///
/// In a fork()ed child of the process that called ffd_init() the handle is
/// a copy: ffd_finalize() frees the child's copy, sets `*handle` to NULL
/// and returns FFD_ERR_FORKED at once. It touches nothing of the parent's:
/// no notice is sent, no libfabric object is closed, the host's shared
/// segment is neither written nor unmapped, no thread is waited for (the
/// child has none of the detector's threads); what the copy inherited
/// (libfabric's memory and descriptors, the mapping) stays allocated in
/// the child until it exits or execs, since releasing it would act on
/// objects the parent still uses. The parent's detector runs on.
///
/// @return FFD_OK; FFD_ERR_NULL when `handle` or `*handle` is NULL (already
/// finalized, or ffd_init() did not succeed); FFD_ERR_INVALID_ARGUMENT from
/// a callback; FFD_ERR_FORKED (handle freed) in a fork()ed child.
///
/// # Safety
/// `handle` is NULL or valid for reads and writes, and `*handle` is NULL or
/// a handle from ffd_init() not finalized before, not in use by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_finalize(handle: *mut *mut ffd_t) -> ffd_result {
    boundary("ffd_finalize", || {
        if handle.is_null() {
            return Err(Error::null("the handle's address"));
        }
        // SAFETY: `handle` is non-NULL and valid for reads (contract).
        let h = unsafe { *handle };
        if h.is_null() {
            return Err(Error::null(
                "the handle (already finalized, or ffd_init did not succeed)",
            ));
        }
        // SAFETY: non-NULL, a live handle from ffd_init (contract).
        if let Some(pid) = unsafe { &*h }.detector.forked_from() {
            // SAFETY: as below: valid for writes, and the only copy of the
            // pointer in this process is now NULL.
            let h = unsafe {
                *handle = std::ptr::null_mut();
                Box::from_raw(h)
            };
            // A forked child's shutdown returns at once and leaks what the
            // parent still uses (Detector::shutdown).
            h.detector.shutdown();
            let mut e = Error::forked(pid);
            e.message
                .push_str(" (ffd_finalize freed this process's copy)");
            return Err(e);
        }
        if IN_CALLBACK.get() {
            return Err(Error::invalid(
                "called from an event callback (the progress thread); call it from an embedder's thread",
            ));
        }
        // SAFETY: valid for writes (contract). NULL first, so that the
        // handle is gone for the caller even if shutting down panics.
        unsafe { *handle = std::ptr::null_mut() };
        // SAFETY: `h` came from Box::into_raw in ffd_init and is finalized
        // once: the caller's only copy of it is now NULL (contract).
        let h = unsafe { Box::from_raw(h) };
        let ffd_t { detector, .. } = *h;
        detector.shutdown();
        Ok(FFD_OK)
    })
}
