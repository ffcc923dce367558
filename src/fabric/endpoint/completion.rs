//! Completions of an [`Endpoint`]: reading its queue, waiting on it, and
//! turning entries into typed [`Completion`]s.
//!
//! Owns: polling and waiting (bounded), returning send buffers and
//! reposting receive buffers as their operations complete, and naming the
//! operation of an error completion (normalised: positive errno, context
//! decoded or [`FailedOp::Unknown`]). Must not: drop an error completion
//! (errors are detection) or judge the peer it names.

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use libfabric_sys as sys;

use super::Endpoint;
use super::context::{Op, decode};
use crate::fabric::cq::{CqEntry, CqRead, RawCqError, WaitKind};
use crate::fabric::error::{CqError, FabricError, FailedOp, strerror};
use crate::fabric::resources::FiAddr;

/// A completed operation, as [`Endpoint::poll`] hands it out.
/// What [`Endpoint::wait_or`] did: the completions it handled, and whether
/// the queue and its wake fd may be readable now (`false` only when the
/// wait timed out on them: the caller can skip reading them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waited {
    pub completions: usize,
    pub queue: bool,
    pub woken: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Completion<'a> {
    /// A send finished; its buffer is free again.
    Sent {
        /// The caller's token.
        token: u64,
        /// The destination.
        peer: FiAddr,
    },
    /// A tracked write ([`Endpoint::try_write_u64`]) finished.
    Written {
        /// The caller's token.
        token: u64,
    },
    /// A message arrived. The bytes are valid during the callback; the
    /// buffer is posted again after it returns.
    Received {
        /// The message.
        bytes: &'a [u8],
        /// The sender, when the provider reports it (`FI_SOURCE`) and the
        /// sender is in the address vector.
        source: Option<FiAddr>,
    },
    /// An operation completed in error. Errors are detection: never drop one.
    Failed(CqError),
}

/// The first pause after a futile `fi_trywait` refusal; each further one
/// in a row doubles it, up to [`REFUSAL_PAUSE_MAX`].
const REFUSAL_PAUSE_MIN: Duration = Duration::from_micros(25);

/// The longest pause on a run of futile refusals: what a message that
/// arrives meanwhile may wait at most before it is read.
const REFUSAL_PAUSE_MAX: Duration = Duration::from_micros(200);

/// How long [`Endpoint::wait_or`] sleeps on its wake fd alone when
/// `fi_trywait` refuses after `futile` refusals in a row whose reads found
/// nothing: none after a first refusal (the usual race with a completion
/// that is about to be read), then [`REFUSAL_PAUSE_MIN`] doubling up to
/// [`REFUSAL_PAUSE_MAX`].
///
/// `tcp;ofi_rxm` refuses without pause for milliseconds while a peer's
/// connection is torn down (a killed rank's socket), and a read in between
/// finds nothing: without a pause every rank linked to the dead one
/// busy-looped through that time, and on a host with fewer CPUs than ranks
/// the ranks that had a notice to read or forward waited for a CPU
/// (`docs/design.md` §6 "Runtime").
pub(crate) fn refusal_pause(futile: u32) -> Duration {
    match futile {
        0 => Duration::ZERO,
        n => REFUSAL_PAUSE_MIN
            .saturating_mul(1u32 << (n - 1).min(16))
            .min(REFUSAL_PAUSE_MAX),
    }
}

impl Endpoint {
    /// Reads and handles up to `max` completions (at least one batch),
    /// giving each to `sink`; posts consumed receive buffers again.
    /// Returns how many were handled. Error completions are delivered as
    /// [`Completion::Failed`], normalised.
    pub fn poll(
        &mut self,
        max: usize,
        sink: &mut dyn FnMut(Completion<'_>),
    ) -> Result<usize, FabricError> {
        self.repost_pending();
        self.posted = false;
        self.armed = false;
        let mut handled = 0;
        while handled < max.max(1) {
            let want = self.entries.len().min(max.max(1) - handled);
            let read = {
                let cq = &self.inner.cq;
                if self.source {
                    cq.read(&mut self.entries[..want], Some(&mut self.sources[..want]))?
                } else {
                    cq.read(&mut self.entries[..want], None)?
                }
            };
            match self.handle_read(read, sink)? {
                0 => break,
                n => handled += n,
            }
        }
        Ok(handled)
    }

    /// Sleeps on the queue's wait object for up to `timeout` until
    /// something completes, then handles what is there as
    /// [`poll`](Self::poll) does. Returns how many completions were handled
    /// (0 on timeout). Without a wait object it polls every millisecond.
    pub fn wait(
        &mut self,
        timeout: Duration,
        sink: &mut dyn FnMut(Completion<'_>),
    ) -> Result<usize, FabricError> {
        let deadline = Instant::now() + timeout;
        // Bounded: each pass sleeps until the deadline or handles something;
        // the count cap guards against a wait object that fires spuriously.
        for _ in 0..1_000_000 {
            let n = self.poll(usize::MAX, sink)?;
            if n > 0 {
                return Ok(n);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(0);
            }
            match self.inner.cq.wait_kind() {
                WaitKind::Sread => {
                    let read = {
                        let cq = &self.inner.cq;
                        if self.source {
                            cq.sread(&mut self.entries, Some(&mut self.sources), left)?
                        } else {
                            cq.sread(&mut self.entries, None, left)?
                        }
                    };
                    let n = self.handle_read(read, sink)?;
                    if n > 0 {
                        return Ok(n);
                    }
                }
                WaitKind::Fd | WaitKind::None => {
                    self.inner.cq.wait_readable(left)?;
                }
            }
        }
        Ok(0)
    }

    /// Sleeps until something completes, `wake` becomes readable, or
    /// `timeout` passes, then handles what completed as
    /// [`poll`](Self::poll) does. Returns how many completions were handled
    /// and what may still be readable (see [`Waited`]). This is the
    /// progress thread's idle wait: it never consumes `wake`.
    pub fn wait_or(
        &mut self,
        timeout: Duration,
        wake: BorrowedFd<'_>,
        sink: &mut dyn FnMut(Completion<'_>),
    ) -> Result<Waited, FabricError> {
        // The caller read the queue after its last wake-up; read it again
        // only if something was posted since (its completion, or the
        // provider's progress on it, may be due). Otherwise `fi_trywait`
        // below finds anything that arrived meanwhile.
        let n = if self.posted {
            self.poll(usize::MAX, sink)?
        } else {
            0
        };
        if n > 0 {
            self.futile_refusals = 0;
        }
        if n > 0 || timeout.is_zero() {
            return Ok(Waited {
                completions: n,
                queue: true,
                woken: true,
            });
        }
        let pause = refusal_pause(self.futile_refusals);
        let seen = self
            .inner
            .cq
            .wait_readable_or(timeout, wake, self.armed, pause)?;
        // A wait that timed out on the queue leaves its fd armed.
        self.armed = !seen.queue;
        // A queue the wait timed out on has nothing to read: no second
        // read (the provider's progress call is most of a wake-up's cost).
        let completions = if seen.queue {
            self.poll(usize::MAX, sink)?
        } else {
            0
        };
        // A refusal that the read after it did not explain (no
        // completion) is futile: the next one pauses (`refusal_pause`).
        self.futile_refusals = if seen.refused && completions == 0 {
            self.futile_refusals.saturating_add(1)
        } else {
            0
        };
        Ok(Waited {
            completions,
            queue: seen.queue,
            woken: seen.wake,
        })
    }

    /// Handles one read result; returns how many completions it handled.
    fn handle_read(
        &mut self,
        read: CqRead,
        sink: &mut dyn FnMut(Completion<'_>),
    ) -> Result<usize, FabricError> {
        match read {
            CqRead::Empty => Ok(0),
            CqRead::Entries(n) => {
                for k in 0..n {
                    let entry = self.entries[k];
                    let source = self.source.then(|| self.sources[k]);
                    self.complete(entry, source, sink);
                }
                Ok(n)
            }
            CqRead::ErrorAvailable => match self.inner.cq.read_error()? {
                Some(raw) => {
                    let failed = self.fail(raw);
                    sink(Completion::Failed(failed));
                    Ok(1)
                }
                None => Ok(0),
            },
        }
    }

    fn complete(
        &mut self,
        entry: CqEntry,
        source: Option<FiAddr>,
        sink: &mut dyn FnMut(Completion<'_>),
    ) {
        match decode(entry.context()) {
            Some(Op::Send(i)) if i < self.cfg.send_buffers => {
                let (token, peer) = self.send_meta[i];
                self.send_free.push(i);
                sink(Completion::Sent { token, peer });
            }
            Some(Op::Write(token)) => sink(Completion::Written { token }),
            Some(Op::Recv(i)) if i < self.cfg.recv_buffers => {
                let len = entry.len().min(self.cfg.recv_size);
                // SAFETY: buffer i lies in the pool, holds len <= recv_size
                // initialised bytes (the pool is zeroed at allocation and
                // the provider wrote len of them), and is not posted, so
                // nothing writes to it until post_recv below.
                let bytes = unsafe { std::slice::from_raw_parts(self.recv_buf(i), len) };
                let source = source.filter(|s| *s != FiAddr(sys::FI_ADDR_NOTAVAIL));
                sink(Completion::Received { bytes, source });
                if self.post_recv(i).is_err() {
                    self.repost.push(i);
                }
            }
            // Not one of ours (cannot happen: this CQ is private); ignore.
            _ => {}
        }
    }

    /// Maps a normalised error entry to the operation it names, releasing
    /// or reposting that operation's buffer.
    fn fail(&mut self, raw: RawCqError) -> CqError {
        let op = match decode(raw.context()) {
            Some(Op::Send(i)) if i < self.cfg.send_buffers => {
                let (token, peer) = self.send_meta[i];
                self.send_free.push(i);
                FailedOp::Send { token, peer }
            }
            Some(Op::Write(token)) => FailedOp::Write { token },
            Some(Op::Recv(i)) if i < self.cfg.recv_buffers => {
                if self.post_recv(i).is_err() {
                    self.repost.push(i);
                }
                FailedOp::Recv
            }
            _ => FailedOp::Unknown,
        };
        CqError {
            op,
            err: raw.err(),
            prov_errno: raw.prov_errno(),
            flags: raw.flags(),
            text: strerror(raw.err()),
            prov_text: raw.prov_text,
        }
    }

    fn repost_pending(&mut self) {
        while let Some(i) = self.repost.pop() {
            if self.post_recv(i).is_err() {
                self.repost.push(i);
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::c_void;
    use std::ptr;

    use super::*;
    use crate::fabric::endpoint::context::encode;

    fn err_entry(err: i32, ctx: *mut c_void) -> sys::fi_cq_err_entry {
        sys::fi_cq_err_entry {
            err,
            prov_errno: err,
            op_context: ctx,
            flags: sys::FI_RMA | sys::FI_WRITE,
            ..Default::default()
        }
    }

    #[test]
    fn shm_style_error_entry_is_an_unknown_operation_with_positive_err() {
        // shm: negative err, NULL op_context.
        let n = crate::fabric::error::normalise(&err_entry(-libc::EIO, ptr::null_mut()));
        assert_eq!(n.err, libc::EIO);
        assert_eq!(decode(n.context), None);
        let e = CqError {
            op: FailedOp::Unknown,
            err: n.err,
            prov_errno: n.prov_errno,
            flags: n.flags,
            text: strerror(n.err),
            prov_text: String::new(),
        };
        assert!(
            e.to_string().starts_with("unknown operation failed: "),
            "{e}"
        );
        assert!(e.to_string().contains("(err 5;"), "{e}");
    }

    #[test]
    fn error_entry_with_our_context_names_the_write() {
        let n = crate::fabric::error::normalise(&err_entry(-libc::ENOTCONN, encode(Op::Write(77))));
        assert_eq!(n.err, libc::ENOTCONN);
        assert_eq!(decode(n.context), Some(Op::Write(77)));
        let n = crate::fabric::error::normalise(&err_entry(libc::ECANCELED, encode(Op::Send(3))));
        assert_eq!(
            (n.err, decode(n.context)),
            (libc::ECANCELED, Some(Op::Send(3)))
        );
    }

    /// A first refusal reads again at once (the usual race with a
    /// completion about to be read); a run of futile ones pauses, longer
    /// each time, never beyond the bound a message may wait.
    #[test]
    fn futile_refusals_pause_longer_up_to_a_bound() {
        assert_eq!(refusal_pause(0), Duration::ZERO);
        assert_eq!(refusal_pause(1), REFUSAL_PAUSE_MIN);
        assert_eq!(refusal_pause(2), 2 * REFUSAL_PAUSE_MIN);
        let mut last = Duration::ZERO;
        for n in 0..100 {
            let p = refusal_pause(n);
            assert!(p >= last, "pause {n} ({p:?}) shorter than the one before");
            assert!(p <= REFUSAL_PAUSE_MAX, "pause {n}: {p:?}");
            last = p;
        }
        assert_eq!(refusal_pause(u32::MAX), REFUSAL_PAUSE_MAX);
        // A message that arrives meanwhile waits a fraction of a
        // millisecond at most.
        assert!(REFUSAL_PAUSE_MAX <= Duration::from_millis(1) / 4);
    }
}
