//! The RDM endpoint: heartbeat writes, notice sends, pre-posted receives,
//! and turning completions into typed events.
//!
//! Owns: the endpoint and its own completion queue, the registered send and
//! receive buffers (so no caller buffer has to outlive an operation), and
//! their lifetimes. By concern:
//! - this file: the endpoint object (opening, binding, enabling, the
//!   buffer pool and its registration, closing in order);
//! - `post`: posting operations and the EAGAIN policy of posts (try once,
//!   or retry within a bound and then say `Unreachable`);
//! - `completion`: reading and waiting on the queue, typed completions,
//!   error-completion normalisation;
//! - `context`: the op-context encoding that names operations to libfabric.
//!
//! Must not: decide that a peer has failed; it reports refusals and error
//! completions, the protocol judges.

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use libfabric_sys as sys;

use super::Info;
use super::cq::{CompletionQueue, CqEntry, WaitKind, WaitPreference};
use super::error::{FabricError, check};
use super::mr::{Access, MemoryRegion, PageAlloc, RawMr, RegionMemory};
use super::resources::{AddressVector, AvInner, Domain, DomainInner, FiAddr, close_fid};

mod completion;
mod context;
mod post;

pub use completion::{Completion, Waited};
pub use context::MAX_WRITE_TOKEN;
pub use post::RetryBound;

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
    /// A send or write was tried since the queue was last read: its
    /// completion (or the provider's progress on it) may be waiting, so
    /// [`wait_or`](Self::wait_or) reads the queue before it sleeps.
    posted: bool,
    /// The last wait armed the queue's fd (`fi_trywait` succeeded) and
    /// timed out on it, and nothing was read or posted since: the next
    /// wait may sleep on the fd without `fi_trywait`.
    armed: bool,
    /// Waits in a row that `fi_trywait` refused and whose read found
    /// nothing (see `completion::refusal_pause`).
    futile_refusals: u32,
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
            posted: false,
            armed: false,
            futile_refusals: 0,
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

    /// The start of send buffer `i` in the pool (`send_size` bytes).
    fn send_buf(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.cfg.send_buffers);
        self.pool_base.wrapping_add(i * self.cfg.send_size)
    }

    /// The start of receive buffer `i`, after every send buffer in the pool
    /// (`recv_size` bytes).
    fn recv_buf(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.cfg.recv_buffers);
        self.pool_base
            .wrapping_add(self.cfg.send_buffers * self.cfg.send_size + i * self.cfg.recv_size)
    }
}

/// The endpoint's address (`fi_getname`), growing the buffer once when
/// the provider says it is too small.
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
