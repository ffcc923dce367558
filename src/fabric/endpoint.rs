//! The RDM endpoint: heartbeat writes, notice sends, pre-posted receives,
//! and turning completions into typed events.
//!
//! Owns: the endpoint and its own completion queue, the registered send and
//! receive buffers (so no caller buffer has to outlive an operation), the
//! op-context encoding, error-completion normalisation, and the EAGAIN
//! policy of posts (try once, or retry within a bound and then say
//! `Unreachable`). Must not: decide that a peer has failed; it reports
//! refusals and error completions, the protocol judges.

use std::ffi::c_void;
use std::os::fd::BorrowedFd;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libfabric_sys as sys;

use super::Info;
use super::cq::{CompletionQueue, CqEntry, CqRead, RawCqError, WaitKind, WaitPreference};
use super::error::{CqError, FabricError, FailedOp, check, strerror};
use super::mr::{Access, MemoryRegion, PageAlloc, RawMr, RegionMemory, RemoteRegion};
use super::resources::{AddressVector, AvInner, Domain, DomainInner, FiAddr, close_fid};

/// Sizes of an endpoint's queue and buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointConfig {
    /// Completion queue entries.
    pub cq_size: usize,
    /// Which wait object to ask for.
    pub wait: WaitPreference,
    /// Receive buffers kept posted.
    pub recv_buffers: usize,
    /// Bytes per receive buffer (the largest message accepted).
    pub recv_size: usize,
    /// Send buffers (sends in flight at once).
    pub send_buffers: usize,
    /// Bytes per send buffer (the largest message sent).
    pub send_size: usize,
    /// Tracked writes ([`Endpoint::try_write_u64`]) complete only once the
    /// target has placed the data (`FI_DELIVERY_COMPLETE`) instead of when
    /// it has left (the provider's default). On `tcp;ofi_rxm` this turns a
    /// rejected write into an `FI_ECANCELED` error completion for that very
    /// write (instead of a dropped connection and `-FI_EAGAIN` on later
    /// posts), and writes to a hung target stop completing.
    pub delivery_complete: bool,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            cq_size: 1024,
            wait: WaitPreference::Auto,
            recv_buffers: 64,
            recv_size: 4096,
            send_buffers: 64,
            send_size: 4096,
            delivery_complete: false,
        }
    }
}

/// A completed operation, as [`Endpoint::poll`] hands it out.
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

// Op contexts are tokens, not pointers: kind in the low two bits (never 0,
// so NULL is never ours), an index or the caller's token above.
const KIND_SEND: usize = 1;
const KIND_RECV: usize = 2;
const KIND_WRITE: usize = 3;

/// The largest token a tracked write can carry.
pub const MAX_WRITE_TOKEN: u64 = (usize::MAX >> 2) as u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Send(usize),
    Recv(usize),
    Write(u64),
}

fn encode(op: Op) -> *mut c_void {
    let v = match op {
        Op::Send(i) => (i << 2) | KIND_SEND,
        Op::Recv(i) => (i << 2) | KIND_RECV,
        Op::Write(t) => ((t as usize) << 2) | KIND_WRITE,
    };
    v as *mut c_void
}

fn decode(ctx: Option<usize>) -> Option<Op> {
    let v = ctx?;
    match v & 3 {
        KIND_SEND => Some(Op::Send(v >> 2)),
        KIND_RECV => Some(Op::Recv(v >> 2)),
        KIND_WRITE => Some(Op::Write((v >> 2) as u64)),
        _ => None,
    }
}

/// The endpoint's libfabric objects and the buffers operations point into.
/// Dropped last of all (user regions bound to the endpoint hold it).
pub(crate) struct EpInner {
    pub(crate) domain: Arc<DomainInner>,
    _av: Arc<AvInner>,
    cq: CompletionQueue,
    pub(crate) raw: *mut sys::fid_ep,
    /// Registration of `pool` (only under FI_MR_LOCAL).
    pool_mr: Option<RawMr>,
    /// Send buffers then receive buffers. Freed only after the endpoint is
    /// closed, as posted receives point into it.
    pool: Option<PageAlloc>,
}

// SAFETY: FI_THREAD_SAFE domain (see resources::FabricInner). The pool is
// only touched through raw pointers by the Endpoint (&mut self methods).
unsafe impl Send for EpInner {}
// SAFETY: as above.
unsafe impl Sync for EpInner {}

impl Drop for EpInner {
    fn drop(&mut self) {
        if let Some(mr) = self.pool_mr.as_mut() {
            // SAFETY: the registration is live and owned by this inner.
            unsafe { mr.close() };
        }
        // SAFETY: raw is live; nothing uses it after this (user regions
        // bound to it hold this inner, so they are closed already).
        let ret = unsafe { close_fid(&raw mut (*self.raw).fid) };
        if ret != 0 {
            // The provider may still own posted receives: leak the pool
            // rather than free memory it could write into.
            std::mem::forget(self.pool.take());
        }
    }
}

/// An RDM endpoint with its own completion queue, bound to an address
/// vector, enabled, with receive buffers posted.
pub struct Endpoint {
    pub(crate) inner: Arc<EpInner>,
    name: Vec<u8>,
    inject_size: usize,
    source: bool,
    desc: *mut c_void,
    pool_base: *mut u8,
    cfg: EndpointConfig,
    /// Free send buffers (indices), and who each busy one is for.
    send_free: Vec<usize>,
    send_meta: Vec<(u64, FiAddr)>,
    /// Completed receive buffers that could not be posted again yet.
    repost: Vec<usize>,
    entries: Vec<CqEntry>,
    sources: Vec<FiAddr>,
}

// SAFETY: all pointers are into objects and memory owned by `inner`, which
// is Send; the endpoint's mutable state moves with it.
unsafe impl Send for Endpoint {}

impl Endpoint {
    /// Opens an endpoint on `domain` with its own completion queue, binds
    /// `av` and the queue, enables it, registers its buffers as the
    /// provider's mr_mode requires, and posts its receives.
    pub fn open(
        domain: &Domain,
        av: &AddressVector,
        cfg: &EndpointConfig,
    ) -> Result<Endpoint, FabricError> {
        if !Arc::ptr_eq(&av.inner._domain, &domain.inner) {
            return Err(FabricError::Invalid(
                "the address vector belongs to another domain".into(),
            ));
        }
        let info: &Info = domain.info();
        let max = info.max_msg_size();
        if cfg.recv_size == 0 || cfg.send_size == 0 || cfg.recv_size.max(cfg.send_size) > max {
            return Err(FabricError::Invalid(format!(
                "buffer sizes {}/{} must be in 1..={max} (the provider's max_msg_size)",
                cfg.send_size, cfg.recv_size
            )));
        }
        if cfg.recv_buffers == 0 || cfg.send_buffers == 0 {
            return Err(FabricError::Invalid(
                "an endpoint needs at least one send and one receive buffer".into(),
            ));
        }
        if info.inject_size() < 8 {
            return Err(FabricError::Invalid(format!(
                "provider {} injects only {} bytes; heartbeats need 8",
                info.provider(),
                info.inject_size()
            )));
        }
        let cq = CompletionQueue::open(domain, cfg.cq_size, cfg.wait)?;
        let pool_len = cfg
            .send_buffers
            .checked_mul(cfg.send_size)
            .zip(cfg.recv_buffers.checked_mul(cfg.recv_size))
            .and_then(|(a, b)| a.checked_add(b))
            .ok_or_else(|| FabricError::Invalid("buffer pool size overflows".into()))?;
        let pool = PageAlloc::new(pool_len)?;
        let pool_base = pool.as_ptr();

        let mut raw = ptr::null_mut();
        // SAFETY: domain is live; info is valid for the call; raw is an
        // out-pointer.
        let ret =
            unsafe { sys::fi_endpoint(domain.inner.raw, info.as_raw(), &mut raw, ptr::null_mut()) };
        check("fi_endpoint", ret)?;
        // From here on, dropping `inner` closes everything in order.
        let mut inner = EpInner {
            domain: domain.inner.clone(),
            _av: av.inner.clone(),
            cq,
            raw,
            pool_mr: None,
            pool: Some(pool),
        };
        // SAFETY: ep, av and cq are live objects of the same domain.
        unsafe {
            check(
                "fi_ep_bind(av)",
                sys::fi_ep_bind(raw, &raw mut (*av.inner.raw).fid, 0),
            )?;
            check(
                "fi_ep_bind(cq)",
                sys::fi_ep_bind(
                    raw,
                    &raw mut (*inner.cq.inner.raw).fid,
                    sys::FI_TRANSMIT | sys::FI_RECV,
                ),
            )?;
            check("fi_enable", sys::fi_enable(raw))?;
        }
        if info.mr_mode().local() {
            // SAFETY: the pool stays allocated until after this
            // registration is closed (EpInner::drop); the endpoint is live.
            let mr = unsafe {
                RawMr::register(
                    &domain.inner,
                    Some(raw),
                    pool_base,
                    pool_len,
                    Access::SEND | Access::RECV,
                )?
            };
            inner.pool_mr = Some(mr);
        }
        let desc = inner.pool_mr.as_ref().map_or(ptr::null_mut(), |m| m.desc);
        let name = getname(raw)?;

        let mut ep = Endpoint {
            inner: Arc::new(inner),
            name,
            inject_size: info.inject_size(),
            source: info.has_source(),
            desc,
            pool_base,
            cfg: cfg.clone(),
            send_free: (0..cfg.send_buffers).rev().collect(),
            send_meta: vec![(0, FiAddr::UNSPEC); cfg.send_buffers],
            repost: Vec::with_capacity(cfg.recv_buffers),
            entries: vec![CqEntry::default(); 64],
            sources: vec![FiAddr::UNSPEC; 64],
        };
        for i in 0..cfg.recv_buffers {
            ep.post_recv(i)?;
        }
        Ok(ep)
    }

    /// This endpoint's raw address (`fi_getname`): publish it to peers,
    /// who insert it into their address vectors.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The domain's `Info`.
    pub fn info(&self) -> &Info {
        &self.inner.domain.info
    }

    /// The inject size of this endpoint.
    pub fn inject_size(&self) -> usize {
        self.inject_size
    }

    /// Whether receives report their sender.
    pub fn has_source(&self) -> bool {
        self.source
    }

    /// The configuration it was opened with.
    pub fn config(&self) -> &EndpointConfig {
        &self.cfg
    }

    /// The completion queue's wait object.
    pub fn wait_kind(&self) -> WaitKind {
        self.inner.cq.wait_kind()
    }

    /// The fd to add to an epoll set ([`WaitKind::Fd`] only). Before
    /// sleeping on it, call [`try_wait`](Self::try_wait); after it fires,
    /// call [`poll`](Self::poll).
    pub fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        self.inner.cq.wait_fd()
    }

    /// `fi_trywait` on the queue: `true` when blocking on the fd is safe.
    pub fn try_wait(&self) -> Result<bool, FabricError> {
        self.inner.cq.try_wait()
    }

    /// Registers `mem` for peers to write into (`FI_REMOTE_WRITE`), bound
    /// to this endpoint when the provider wants `FI_MR_ENDPOINT`.
    pub fn register<M: RegionMemory>(&self, mem: M) -> Result<MemoryRegion<M>, FabricError> {
        let domain = Domain {
            inner: self.inner.domain.clone(),
        };
        MemoryRegion::register(&domain, Some(self), mem, Access::REMOTE_WRITE)
    }

    /// The raw handle, valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::fid_ep {
        self.inner.raw
    }

    fn send_buf(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.cfg.send_buffers);
        self.pool_base.wrapping_add(i * self.cfg.send_size)
    }

    fn recv_buf(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.cfg.recv_buffers);
        self.pool_base
            .wrapping_add(self.cfg.send_buffers * self.cfg.send_size + i * self.cfg.recv_size)
    }

    fn post_recv(&mut self, i: usize) -> Result<(), FabricError> {
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
    /// [`Completion::Failed`] naming [`FailedOp::Write`] with `token`
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
    /// [`poll`](Self::poll) does. Returns how many completions were handled.
    /// This is the progress thread's idle wait: it never consumes `wake`.
    pub fn wait_or(
        &mut self,
        timeout: Duration,
        wake: BorrowedFd<'_>,
        sink: &mut dyn FnMut(Completion<'_>),
    ) -> Result<usize, FabricError> {
        let n = self.poll(usize::MAX, sink)?;
        if n > 0 || timeout.is_zero() {
            return Ok(n);
        }
        self.inner.cq.wait_readable_or(timeout, wake)?;
        self.poll(usize::MAX, sink)
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

fn getname(ep: *mut sys::fid_ep) -> Result<Vec<u8>, FabricError> {
    let mut buf = vec![0u8; 256];
    for _ in 0..2 {
        let mut len = buf.len();
        // SAFETY: ep is live and enabled; buf has len writable bytes; on
        // -FI_ETOOSMALL libfabric writes the needed size to len.
        let ret = unsafe { sys::fi_getname(&raw mut (*ep).fid, buf.as_mut_ptr().cast(), &mut len) };
        if ret == 0 {
            buf.truncate(len);
            return Ok(buf);
        }
        if ret != -(sys::FI_ETOOSMALL as i32) {
            return Err(FabricError::call("fi_getname", ret));
        }
        buf.resize(len, 0);
    }
    Err(FabricError::call("fi_getname", sys::FI_ETOOSMALL as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_round_trip_and_null_is_not_ours() {
        for op in [
            Op::Send(0),
            Op::Send(63),
            Op::Recv(5),
            Op::Write(0),
            Op::Write(MAX_WRITE_TOKEN),
        ] {
            let ctx = encode(op) as usize;
            assert_ne!(ctx, 0);
            assert_eq!(decode(Some(ctx)), Some(op));
        }
        assert_eq!(decode(None), None);
        assert_eq!(decode(Some(4)), None, "kind bits 0 are not ours");
    }

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
