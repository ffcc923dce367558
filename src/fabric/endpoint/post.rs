//! Posting operations on an [`Endpoint`]: the receive buffers kept posted,
//! heartbeat writes into a peer's slot region, notice sends, and the EAGAIN
//! policy of posts: try once, or retry within a [`RetryBound`] while
//! progressing the queue, and then say [`FabricError::Unreachable`].
//!
//! Owns: every `fi_recv`, `fi_inject_write`, `fi_writemsg` and `fi_send`,
//! and the mapping of a post's return value. Must not: judge a peer (a run
//! of refusals is reported, the protocol judges) or retry without a bound.

use std::ffi::c_void;
use std::ptr;
use std::time::{Duration, Instant};

use libfabric_sys as sys;

use super::Endpoint;
use super::completion::Completion;
use super::context::{MAX_WRITE_TOKEN, Op, encode};
use crate::fabric::error::{FabricError, strerror};
use crate::fabric::mr::RemoteRegion;
use crate::fabric::resources::FiAddr;

/// How long the bounded post helper may keep trying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryBound {
    /// Most posts to try (at least 1).
    pub max_attempts: u32,
    /// Most time from the first try.
    pub max_elapsed: Duration,
}

impl RetryBound {
    /// A bound of `max_attempts` tries within `max_elapsed`.
    pub fn new(max_attempts: u32, max_elapsed: Duration) -> RetryBound {
        RetryBound {
            max_attempts: max_attempts.max(1),
            max_elapsed,
        }
    }
}

impl Endpoint {
    /// Posts receive buffer `i` (at open, and again once its completion
    /// was handled).
    pub(super) fn post_recv(&mut self, i: usize) -> Result<(), FabricError> {
        // SAFETY: the endpoint is live; buffer i lies inside the pool, which
        // outlives the endpoint's close, and is not posted elsewhere (a
        // buffer is posted again only after its completion was handled);
        // desc is the pool's descriptor or NULL when none is required.
        let ret = unsafe {
            sys::fi_recv(
                self.inner.raw,
                self.recv_buf(i).cast(),
                self.cfg.recv_size,
                self.desc,
                sys::FI_ADDR_UNSPEC,
                encode(Op::Recv(i)),
            )
        };
        post_result("fi_recv", ret)
    }

    /// Tries once to write `value` into 8-byte slot `slot` of `remote` at
    /// `peer` with `fi_inject_write`: no completion on success, and the
    /// value is copied before return.
    ///
    /// Avoid it on `tcp;ofi_rxm` towards a peer that may die: libfabric
    /// 1.17 was seen to crash (SIGSEGV in `fi_cq_readfrom`, in rxm's error
    /// handling) about once in 20 such kills here. Prefer
    /// [`try_write_u64`](Self::try_write_u64), which the runtime uses. `-FI_EAGAIN` is
    /// [`FabricError::WouldBlock`]: progress with [`poll`](Self::poll) and
    /// keep per-peer bookkeeping of how long that lasts.
    pub fn try_inject_write(
        &mut self,
        peer: FiAddr,
        remote: &RemoteRegion,
        slot: usize,
        value: u64,
    ) -> Result<(), FabricError> {
        let addr = slot_addr(remote, slot)?;
        let buf = value.to_ne_bytes();
        self.posted = true;
        self.armed = false;
        // SAFETY: the endpoint is live; buf is 8 readable bytes, copied
        // before the call returns (inject); 8 <= inject_size (checked at
        // open).
        let ret = unsafe {
            sys::fi_inject_write(
                self.inner.raw,
                buf.as_ptr().cast(),
                8,
                peer.0,
                addr,
                remote.key,
            )
        };
        post_result("fi_inject_write", ret)
    }

    /// Like [`try_inject_write`](Self::try_inject_write) but asks for a
    /// completion: [`Completion::Written`] with `token`, or
    /// [`Completion::Failed`] naming
    /// [`FailedOp::Write`](crate::fabric::FailedOp::Write) with `token`
    /// (`fi_writemsg` with `FI_INJECT | FI_COMPLETION`). `token` must not
    /// exceed [`MAX_WRITE_TOKEN`].
    pub fn try_write_u64(
        &mut self,
        peer: FiAddr,
        remote: &RemoteRegion,
        slot: usize,
        value: u64,
        token: u64,
    ) -> Result<(), FabricError> {
        if token > MAX_WRITE_TOKEN {
            return Err(FabricError::Invalid(format!(
                "write token {token} exceeds {MAX_WRITE_TOKEN}"
            )));
        }
        let addr = slot_addr(remote, slot)?;
        let buf = value.to_ne_bytes();
        let iov = libc::iovec {
            iov_base: buf.as_ptr() as *mut c_void,
            iov_len: 8,
        };
        let rma = sys::fi_rma_iov {
            addr,
            len: 8,
            key: remote.key,
        };
        let mut desc: *mut c_void = ptr::null_mut();
        let msg = sys::fi_msg_rma {
            msg_iov: (&raw const iov).cast(),
            desc: &mut desc,
            iov_count: 1,
            addr: peer.0,
            rma_iov: &rma,
            rma_iov_count: 1,
            context: encode(Op::Write(token)),
            data: 0,
        };
        let mut flags = sys::FI_INJECT | sys::FI_COMPLETION;
        if self.cfg.delivery_complete {
            flags |= sys::FI_DELIVERY_COMPLETE;
        }
        self.posted = true;
        self.armed = false;
        // SAFETY: the endpoint is live; msg and everything it points to are
        // valid for the call, and FI_INJECT makes the provider copy the 8
        // source bytes before returning (8 <= inject_size, checked at open).
        let ret = unsafe { sys::fi_writemsg(self.inner.raw, &msg, flags) };
        post_result("fi_writemsg", ret)
    }

    /// Tries once to send `bytes` to `peer`. The bytes are copied into one
    /// of the endpoint's registered send buffers, so the caller's slice is
    /// free at once; the completion ([`Completion::Sent`] or
    /// [`Completion::Failed`]) carries `token` and `peer`. `-FI_EAGAIN`,
    /// and no free send buffer, are [`FabricError::WouldBlock`].
    pub fn try_send(&mut self, peer: FiAddr, bytes: &[u8], token: u64) -> Result<(), FabricError> {
        if bytes.len() > self.cfg.send_size {
            return Err(FabricError::Invalid(format!(
                "message of {} bytes exceeds the send buffer size {}",
                bytes.len(),
                self.cfg.send_size
            )));
        }
        let Some(i) = self.send_free.pop() else {
            return Err(FabricError::WouldBlock {
                call: "fi_send (all send buffers in flight)",
            });
        };
        let buf = self.send_buf(i);
        // SAFETY: buffer i is free (no operation points into it), lies in
        // the pool and holds send_size >= bytes.len() bytes.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), buf, bytes.len()) };
        self.posted = true;
        self.armed = false;
        // SAFETY: the endpoint is live; buffer i stays untouched by us until
        // its completion returns it to send_free; desc as in post_recv.
        let ret = unsafe {
            sys::fi_send(
                self.inner.raw,
                buf.cast(),
                bytes.len(),
                self.desc,
                peer.0,
                encode(Op::Send(i)),
            )
        };
        match post_result("fi_send", ret) {
            Ok(()) => {
                self.send_meta[i] = (token, peer);
                Ok(())
            }
            Err(e) => {
                self.send_free.push(i);
                Err(e)
            }
        }
    }

    /// Posts with `op`, retrying while the provider refuses (`-FI_EAGAIN`,
    /// or `-FI_ENOENT` as `sockets` says for a lost connection),
    /// progressing the queue between tries (completions go to `sink`,
    /// errors included; after 64 tries it sleeps 100 µs between them). Gives
    /// up after `bound` with [`FabricError::Unreachable`], and at once with
    /// [`FabricError::Interrupted`] when an error completion arrived while
    /// progressing. Other errors return at once. Returns the number of
    /// tries on success.
    pub fn post_bounded(
        &mut self,
        peer: FiAddr,
        bound: RetryBound,
        sink: &mut dyn FnMut(Completion<'_>),
        mut op: impl FnMut(&mut Endpoint) -> Result<(), FabricError>,
    ) -> Result<u32, FabricError> {
        let start = Instant::now();
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let refusal = match op(self) {
                Ok(()) => return Ok(attempts),
                Err(e) if e.is_refusal() => e,
                Err(e) => return Err(e),
            };
            let elapsed = start.elapsed();
            if attempts >= bound.max_attempts || elapsed >= bound.max_elapsed {
                let (call, errno) = match refusal {
                    FabricError::WouldBlock { call } => (call, sys::FI_EAGAIN),
                    FabricError::Call { call, errno, .. } => (call, errno),
                    _ => ("post", sys::FI_EAGAIN),
                };
                return Err(FabricError::Unreachable {
                    peer,
                    call,
                    attempts,
                    elapsed,
                    errno,
                    text: strerror(errno),
                });
            }
            let mut saw_error = false;
            self.poll(usize::MAX, &mut |c| {
                saw_error |= matches!(c, Completion::Failed(_));
                sink(c)
            })?;
            if saw_error {
                return Err(FabricError::Interrupted {
                    peer,
                    attempts,
                    elapsed: start.elapsed(),
                });
            }
            // Yield for the first tries (connection set-up takes a few ms of
            // EAGAIN), then back off so a dead peer does not eat the core.
            if attempts <= 64 {
                std::thread::yield_now();
            } else {
                let left = bound.max_elapsed.saturating_sub(start.elapsed());
                std::thread::sleep(left.min(Duration::from_micros(100)));
            }
        }
    }

    /// [`try_inject_write`](Self::try_inject_write) within `bound`.
    pub fn inject_write(
        &mut self,
        peer: FiAddr,
        remote: &RemoteRegion,
        slot: usize,
        value: u64,
        bound: RetryBound,
        sink: &mut dyn FnMut(Completion<'_>),
    ) -> Result<u32, FabricError> {
        self.post_bounded(peer, bound, sink, |ep| {
            ep.try_inject_write(peer, remote, slot, value)
        })
    }

    /// [`try_send`](Self::try_send) within `bound`.
    pub fn send(
        &mut self,
        peer: FiAddr,
        bytes: &[u8],
        token: u64,
        bound: RetryBound,
        sink: &mut dyn FnMut(Completion<'_>),
    ) -> Result<u32, FabricError> {
        self.post_bounded(peer, bound, sink, |ep| ep.try_send(peer, bytes, token))
    }
}

fn slot_addr(remote: &RemoteRegion, slot: usize) -> Result<u64, FabricError> {
    remote.slot_addr(slot).ok_or_else(|| {
        FabricError::Invalid(format!(
            "slot {slot} is outside the remote region ({} bytes)",
            remote.len
        ))
    })
}

/// Maps a post's `ssize_t`: 0 ok, `-FI_EAGAIN` would block, else error.
fn post_result(call: &'static str, ret: isize) -> Result<(), FabricError> {
    if ret == 0 {
        Ok(())
    } else if ret == -(sys::FI_EAGAIN as isize) {
        Err(FabricError::WouldBlock { call })
    } else {
        Err(FabricError::call(call, ret as i64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_eagain_and_enoent_only() {
        assert!(FabricError::WouldBlock { call: "fi_send" }.is_refusal());
        assert!(FabricError::call("fi_send", -sys::FI_ENOENT).is_refusal());
        assert!(!FabricError::call("fi_send", -sys::FI_EINVAL).is_refusal());
        assert!(!FabricError::Invalid("x".into()).is_refusal());
    }

    #[test]
    fn post_results_map_eagain_to_would_block() {
        assert!(post_result("fi_send", 0).is_ok());
        assert!(
            post_result("fi_send", -(sys::FI_EAGAIN as isize))
                .unwrap_err()
                .is_would_block()
        );
        let e = post_result("fi_send", -(sys::FI_EIO as isize)).unwrap_err();
        assert_eq!(e.errno(), Some(sys::FI_EIO));
    }
}
