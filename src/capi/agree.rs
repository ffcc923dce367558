//! Agreements and views in C: ffd_agree() (blocking), ffd_iagree() with
//! ffd_agree_test(), ffd_agree_wait() and ffd_agree_free(), and ffd_view().
//!
//! Owns: these exports and the writing of a decided agreement into the
//! caller's outputs. Must not: write an output when a call fails (an
//! undecided test writes `*done` alone), block in ffd_agree_test(), or keep
//! a pointer the embedder lent past the call.
//!
//! An agreement is a collective, as `MPIX_Comm_agree`: every live rank must
//! make the same agreement calls in the same order, and each one waits for
//! every rank not known failed, **without a time limit** (a rank that fails
//! meanwhile is found by the detector and left out).

use std::ffi::c_int;

use super::ffd_result::{self, *};
use super::{Error, boundary, ffd_agree_req_t, ffd_t, handle};
use crate::runtime::{Agreement, DetectorState};

/// The caller's outputs for a decided agreement; every pointer but
/// `failed` (with `cap` 0) is checked non-NULL before anything is written.
struct Outputs {
    flags: *mut u64,
    view_id: *mut u64,
    failed: *mut u32,
    cap: usize,
    count: *mut usize,
}

impl Outputs {
    fn check(&self) -> Result<(), Error> {
        if self.flags.is_null() {
            return Err(Error::null("out_flags"));
        }
        if self.view_id.is_null() {
            return Err(Error::null("view_id"));
        }
        if self.count.is_null() {
            return Err(Error::null("count"));
        }
        if self.failed.is_null() && self.cap > 0 {
            return Err(Error::null("failed (with a non-zero cap)"));
        }
        Ok(())
    }

    /// Writes `a`; with fewer than its ranks' room: FFD_BUFFER_TOO_SMALL,
    /// and the ranks are written only if `partial` (the first `cap`).
    ///
    /// # Safety
    /// The pointers are valid for writes as `check` and the caller's
    /// contract say (`failed` for `cap` uint32_t).
    unsafe fn write(&self, a: &Agreement, partial: bool) -> ffd_result {
        let ranks = &a.view.failed;
        let fits = ranks.len() <= self.cap;
        let copied = if fits || partial {
            ranks.len().min(self.cap)
        } else {
            0
        };
        // SAFETY: checked non-NULL and valid for writes (contract); `failed`
        // holds `cap` >= `copied` uint32_t and does not overlap our Vec.
        unsafe {
            if copied > 0 {
                std::ptr::copy_nonoverlapping(ranks.as_ptr(), self.failed, copied);
            }
            *self.flags = a.flags;
            *self.view_id = a.view.id;
            *self.count = ranks.len();
        }
        if fits { FFD_OK } else { FFD_BUFFER_TOO_SMALL }
    }
}

/// Agrees with every live rank on `flags` and on the failed set, and
/// returns once decided (**no time limit**: a collective, see above).
/// Every surviving rank gets the same `*out_flags` (the AND of every
/// participant's `flags`), `*view_id` and failed set: every rank that did
/// not take part and every failure any participant knew when it joined
/// (ranks in it that this rank did not know gone are learned first, as
/// FFD_EVENT_LEFT or FFD_EVENT_FAILED once their notices come, as
/// FFD_EVENT_FAILED if none came within a timeout). `*view_id` is the
/// newest view (FFD_EVENT_VIEW) any participant had raised; the set
/// holds that view's ranks.
///
/// The set's ranks go to `failed` (increasing), its size to `*count`. A
/// buffer of the job size always fits; a smaller one gets the first `cap`
/// ranks and FFD_BUFFER_TOO_SMALL (use ffd_iagree() to be able to ask
/// again). Must not be called from the event callback (it would wait for
/// itself: FFD_ERR_INVALID_ARGUMENT).
///
/// @param[out] out_flags, view_id, count receive the decision on success
/// (FFD_OK, FFD_BUFFER_TOO_SMALL).
/// @return FFD_OK; FFD_BUFFER_TOO_SMALL (positive); FFD_ERR_NULL;
/// FFD_ERR_STOPPED when this rank left, was excluded or its detector
/// stopped before the decision (the message says which);
/// FFD_ERR_INVALID_ARGUMENT from the callback; FFD_ERR_FORKED in a
/// fork()ed child.
///
/// # Safety
/// `h` is NULL or a live handle; `out_flags`, `view_id` and `count` are NULL
/// or valid for a write; `failed` is NULL or valid for `cap` uint32_t writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_agree(
    h: *const ffd_t,
    flags: u64,
    out_flags: *mut u64,
    view_id: *mut u64,
    failed: *mut u32,
    cap: usize,
    count: *mut usize,
) -> ffd_result {
    boundary("ffd_agree", || {
        // SAFETY: NULL or a live handle (contract).
        let h = unsafe { handle(h) }?;
        let out = Outputs {
            flags: out_flags,
            view_id,
            failed,
            cap,
            count,
        };
        out.check()?;
        let agreement = h.detector.agree(flags)?;
        // SAFETY: checked, and valid for writes (contract).
        Ok(unsafe { out.write(&agreement, true) })
    })
}

/// Starts an agreement (as ffd_agree()) and returns at once with its
/// request in `*req`: poll it with ffd_agree_test(), wait with
/// ffd_agree_wait(), free it with ffd_agree_free(). Several may be in
/// flight; they are decided in call order, and the `k`-th call of this
/// rank is agreement number `k` (FFD_EVENT_AGREED's `seq`). Callable from
/// the event callback.
///
/// @param[out] req receives the request on success.
/// @return FFD_OK; FFD_ERR_NULL; FFD_ERR_STOPPED once the detector no
/// longer runs; FFD_ERR_FORKED in a fork()ed child.
///
/// # Safety
/// `h` is NULL or a live handle; `req` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_iagree(
    h: *const ffd_t,
    flags: u64,
    req: *mut *mut ffd_agree_req_t,
) -> ffd_result {
    boundary("ffd_iagree", || {
        // SAFETY: NULL or a live handle (contract).
        let h = unsafe { handle(h) }?;
        if req.is_null() {
            return Err(Error::null("req"));
        }
        let request = h.detector.iagree(flags)?;
        let boxed = Box::into_raw(Box::new(ffd_agree_req_t { request }));
        // SAFETY: non-NULL and valid for a write (contract).
        unsafe { *req = boxed };
        Ok(FFD_OK)
    })
}

/// The request behind `req`.
///
/// # Safety
/// `req` is NULL or a live request from ffd_iagree().
unsafe fn request<'a>(req: *const ffd_agree_req_t) -> Result<&'a ffd_agree_req_t, Error> {
    // SAFETY: NULL or a live request (contract); 'a ends with the call.
    unsafe { req.as_ref() }.ok_or_else(|| Error::null("req"))
}

/// Whether agreement `req` has ended, without blocking: `*done` is 0 (and
/// nothing else is written) while it runs, 1 once it ended. Once decided,
/// the outputs are written as by ffd_agree(); with a `failed` buffer too
/// small for the set, FFD_BUFFER_TOO_SMALL: the outputs but `failed` are
/// written (`*count` is the size needed) and the request keeps its result,
/// so call again with a larger buffer. `h` is the detector it was started
/// on, or NULL (the request stands alone: it may be tested after
/// ffd_finalize(); `h` is never read).
///
/// @param[out] done receives 1 or 0 on success; the others as ffd_agree().
/// @return FFD_OK; FFD_BUFFER_TOO_SMALL; FFD_ERR_NULL; FFD_ERR_STOPPED
/// (nothing written) when the agreement ended undecided here: this rank
/// left or was excluded, or its detector stopped (it is over: free it);
/// FFD_ERR_FORKED in a fork()ed child of the process that asked for it.
///
/// # Safety
/// `req` is NULL or live; `done`, `out_flags`, `view_id`, `count` are NULL
/// or valid for a write; `failed` is NULL or valid for `cap` uint32_t
/// writes.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ffd_agree_test(
    h: *const ffd_t,
    req: *const ffd_agree_req_t,
    done: *mut c_int,
    out_flags: *mut u64,
    view_id: *mut u64,
    failed: *mut u32,
    cap: usize,
    count: *mut usize,
) -> ffd_result {
    let _ = h;
    boundary("ffd_agree_test", || {
        // SAFETY: NULL or live (contract).
        let req = unsafe { request(req) }?;
        if done.is_null() {
            return Err(Error::null("done"));
        }
        let out = Outputs {
            flags: out_flags,
            view_id,
            failed,
            cap,
            count,
        };
        out.check()?;
        let (code, ended) = match req.request.test() {
            None => (FFD_OK, false),
            // SAFETY: checked, and valid for writes (contract).
            Some(Ok(agreement)) => (unsafe { out.write(&agreement, false) }, true),
            Some(Err(e)) => return Err(e.into()),
        };
        // SAFETY: non-NULL and valid for a write (contract).
        unsafe { *done = c_int::from(ended) };
        Ok(code)
    })
}

/// Waits until agreement `req` ends (**no time limit**, as ffd_agree()),
/// then writes its outputs as ffd_agree_test() does once done (`h` as
/// there: never read, may be NULL). Must not be called from the event
/// callback (FFD_ERR_INVALID_ARGUMENT).
///
/// @return as ffd_agree_test() once done.
///
/// # Safety
/// As ffd_agree_test(), without `done`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_agree_wait(
    h: *const ffd_t,
    req: *const ffd_agree_req_t,
    out_flags: *mut u64,
    view_id: *mut u64,
    failed: *mut u32,
    cap: usize,
    count: *mut usize,
) -> ffd_result {
    let _ = h;
    boundary("ffd_agree_wait", || {
        // SAFETY: NULL or live (contract).
        let req = unsafe { request(req) }?;
        let out = Outputs {
            flags: out_flags,
            view_id,
            failed,
            cap,
            count,
        };
        out.check()?;
        let agreement = req.request.clone().wait()?;
        // SAFETY: checked, and valid for writes (contract).
        Ok(unsafe { out.write(&agreement, false) })
    })
}

/// Frees a request from ffd_iagree(), ended or not (an agreement in
/// progress goes on; its result is dropped). NULL is ignored. Before or
/// after ffd_finalize().
///
/// # Safety
/// `req` is NULL or a request from ffd_iagree() not freed yet, in use by
/// no other thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_agree_free(req: *mut ffd_agree_req_t) {
    let _ = boundary("ffd_agree_free", || {
        if !req.is_null() {
            // SAFETY: from Box::into_raw in ffd_iagree, freed once (contract).
            drop(unsafe { Box::from_raw(req) });
        }
        Ok(FFD_OK)
    });
}

/// The latest view this rank raised (FFD_EVENT_VIEW): its id in `*id` (0
/// before the first: nobody out), the first `min(cap, total)` of its ranks
/// (failed or left, increasing) in `buf`, the total in `*count` (more than
/// `cap`: call again with a larger buffer, 4 × the job size always fits).
/// `buf` may be NULL when `cap` is 0. Any thread; takes a lock the
/// progress thread holds only to swap the view in.
///
/// @param[out] id, count receive the view on success.
/// @return FFD_OK; FFD_STALE (positive, outputs written) once the detector
/// no longer runs; FFD_ERR_NULL.
///
/// # Safety
/// `h` is NULL or a live handle; `id` and `count` NULL or valid for a
/// write; `buf` NULL or valid for `cap` uint32_t writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ffd_view(
    h: *const ffd_t,
    id: *mut u64,
    buf: *mut u32,
    cap: usize,
    count: *mut usize,
) -> ffd_result {
    boundary("ffd_view", || {
        // SAFETY: NULL or a live handle (contract).
        let h = unsafe { handle(h) }?;
        if id.is_null() {
            return Err(Error::null("id"));
        }
        if count.is_null() {
            return Err(Error::null("count"));
        }
        if buf.is_null() && cap > 0 {
            return Err(Error::null("buf (with a non-zero cap)"));
        }
        let view = h.detector.view();
        let copied = view.failed.len().min(cap);
        // SAFETY: non-NULL and valid for writes (contract); `buf` holds
        // `cap` >= `copied` uint32_t and does not overlap our Vec.
        unsafe {
            if copied > 0 {
                std::ptr::copy_nonoverlapping(view.failed.as_ptr(), buf, copied);
            }
            *id = view.id;
            *count = view.failed.len();
        }
        Ok(if h.detector.state() == DetectorState::Running {
            FFD_OK
        } else {
            FFD_STALE
        })
    })
}
