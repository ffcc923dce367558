//! Memory registration: the slot page peers write heartbeats into, and
//! what a peer needs to address it.
//!
//! Owns: `fi_mr_reg` under the provider's mr_mode (random requested keys,
//! or the provider's under `FI_MR_PROV_KEY`; binding to the endpoint,
//! virtual address vs offset), page-aligned
//! allocations, and reading slots that remote writes change underneath us.
//! Must not: hand out `&[u8]`/`&mut [u8]` views of remotely writable
//! memory; slots are read one aligned 8-byte atomic load at a time.

use std::alloc::{self, Layout};
use std::ffi::c_void;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use libfabric_sys as sys;

use super::endpoint::{Endpoint, EpInner};
use super::error::{FabricError, check};
use super::resources::{Domain, DomainInner, close_fid};

/// Access rights of a registration (`FI_REMOTE_WRITE`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access(pub u64);

impl Access {
    /// Peers may write into the region (heartbeat slots).
    pub const REMOTE_WRITE: Access = Access(sys::FI_REMOTE_WRITE);
    /// Peers may read the region.
    pub const REMOTE_READ: Access = Access(sys::FI_REMOTE_READ);
    /// Local sends read from it.
    pub const SEND: Access = Access(sys::FI_SEND);
    /// Local receives write into it.
    pub const RECV: Access = Access(sys::FI_RECV);
    /// Local RMA writes read from it.
    pub const WRITE: Access = Access(sys::FI_WRITE);
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// A zeroed, page-aligned heap allocation, freed on drop.
pub(crate) struct PageAlloc {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: PageAlloc owns its memory exclusively, like a Box<[u8]>.
unsafe impl Send for PageAlloc {}
// SAFETY: PageAlloc itself gives no access to the memory; its users do,
// through raw pointers, under their own rules.
unsafe impl Sync for PageAlloc {}

impl PageAlloc {
    /// At least `len` bytes (rounded up to whole pages, at least one).
    pub(crate) fn new(len: usize) -> Result<PageAlloc, FabricError> {
        let page = page_size();
        let size = len.max(1).div_ceil(page) * page;
        let layout = Layout::from_size_align(size, page)
            .map_err(|e| FabricError::Invalid(format!("cannot allocate {len} bytes: {e}")))?;
        // SAFETY: layout has a non-zero size.
        let p = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or_else(|| FabricError::call("alloc", libc::ENOMEM))?;
        Ok(PageAlloc { ptr, layout })
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for PageAlloc {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated with exactly this layout and is freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// One page of 8-byte heartbeat slots: the only memory the detector lets
/// peers write into. Page-aligned and page-sized, so a registration of it
/// exposes nothing else.
pub struct SlotPage {
    mem: PageAlloc,
}

impl SlotPage {
    /// A zeroed page.
    pub fn new() -> Result<SlotPage, FabricError> {
        Ok(SlotPage {
            mem: PageAlloc::new(page_size())?,
        })
    }

    /// How many 8-byte slots it holds.
    pub fn slots(&self) -> usize {
        self.mem.len() / 8
    }

    /// Size in bytes (one page).
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// Always false: a page is never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn slot(&self, index: usize) -> &AtomicU64 {
        assert!(
            index < self.slots(),
            "slot {index} outside the page ({} slots)",
            self.slots()
        );
        // SAFETY: the page is page-aligned (so every 8-byte slot is 8-byte
        // aligned), index is in bounds, the memory lives as long as &self,
        // and it is only ever accessed atomically on our side (remote
        // writers are the provider/NIC storing whole aligned 8-byte words).
        unsafe { AtomicU64::from_ptr(self.mem.as_ptr().cast::<u64>().add(index)) }
    }

    /// Reads slot `index` (one atomic, acquire 8-byte load). Panics when
    /// `index >= slots()`.
    pub fn read(&self, index: usize) -> u64 {
        self.slot(index).load(Ordering::Acquire)
    }

    /// Sets slot `index` locally (e.g. to reset a slot when a new emitter
    /// is assigned to it).
    pub fn store(&self, index: usize, value: u64) {
        self.slot(index).store(value, Ordering::Release)
    }

    /// The page's address.
    pub fn as_ptr(&self) -> *const u8 {
        self.mem.as_ptr()
    }
}

/// Memory a [`MemoryRegion`] may own.
///
/// # Safety
/// `region()` must return the same pointer and length for the life of the
/// value, pointing to memory that stays allocated (it must not move when
/// the value moves) and that the owner only accesses atomically or through
/// raw pointers while registered.
pub unsafe trait RegionMemory: Send {
    /// Start and length of the memory.
    fn region(&self) -> (*mut u8, usize);
}

// SAFETY: the page is a heap allocation that does not move with SlotPage
// and is only accessed atomically (SlotPage::read/store).
unsafe impl RegionMemory for SlotPage {
    fn region(&self) -> (*mut u8, usize) {
        (self.mem.as_ptr(), self.mem.len())
    }
}

/// Memory registered by [`MemoryRegion::register_raw`]: owned by the caller.
pub struct ForeignMemory {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: register_raw's contract makes the caller responsible for the
// memory; ForeignMemory only carries its address.
unsafe impl Send for ForeignMemory {}

// SAFETY: register_raw's contract requires the memory to stay put and be
// accessed only atomically/through raw pointers while registered.
unsafe impl RegionMemory for ForeignMemory {
    fn region(&self) -> (*mut u8, usize) {
        (self.ptr, self.len)
    }
}

/// What a peer needs to write into a registered region: the remote address
/// (the region's virtual address under `FI_MR_VIRT_ADDR`, else 0, an
/// offset), the key, and the length. Exchange it at bootstrap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteRegion {
    /// Remote address of the region's first byte.
    pub addr: u64,
    /// The region's key.
    pub key: u64,
    /// Length in bytes.
    pub len: u64,
}

impl RemoteRegion {
    /// Encoded size of [`to_bytes`](Self::to_bytes).
    pub const ENCODED_LEN: usize = 24;

    /// The remote address of 8-byte slot `index`, or `None` past the end.
    pub fn slot_addr(&self, index: usize) -> Option<u64> {
        let off = u64::try_from(index).ok()?.checked_mul(8)?;
        (off.checked_add(8)? <= self.len).then(|| self.addr.wrapping_add(off))
    }

    /// Little-endian `addr, key, len`.
    pub fn to_bytes(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.key.to_le_bytes());
        b[16..].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Inverse of [`to_bytes`](Self::to_bytes); `None` unless exactly 24 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<RemoteRegion> {
        if b.len() != Self::ENCODED_LEN {
            return None;
        }
        let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Some(RemoteRegion {
            addr: word(0),
            key: word(8),
            len: word(16),
        })
    }
}

/// Random keys drawn before a collision (`-FI_ENOKEY`) is an error.
const KEY_ATTEMPTS: u32 = 8;

/// A raw registration, closed explicitly (by `MrInner` or the endpoint).
pub(crate) struct RawMr {
    pub(crate) raw: *mut sys::fid_mr,
    pub(crate) key: u64,
    pub(crate) desc: *mut c_void,
}

impl RawMr {
    /// Registers `[ptr, ptr+len)` on `domain` following its mr_mode; binds
    /// to `ep` and enables when the provider wants `FI_MR_ENDPOINT`.
    ///
    /// # Safety
    /// The memory stays allocated until the registration is closed, and
    /// `ep` (if any) is a live endpoint of this domain.
    pub(crate) unsafe fn register(
        domain: &DomainInner,
        ep: Option<*mut sys::fid_ep>,
        ptr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<RawMr, FabricError> {
        let mode = domain.info.mr_mode();
        let mut raw = ptr::null_mut();
        let mut attempts = 0;
        loop {
            // Random where we choose (domain.random_requested_key); the
            // provider's own otherwise.
            let requested_key = if mode.prov_key() {
                0
            } else {
                domain.random_requested_key()?
            };
            // SAFETY: domain is live; [ptr, ptr+len) stays allocated while
            // registered (caller's contract); raw is an out-pointer.
            let ret = unsafe {
                sys::fi_mr_reg(
                    domain.raw,
                    ptr.cast_const().cast(),
                    len,
                    access.0,
                    0,
                    requested_key,
                    0,
                    &mut raw,
                    ptr::null_mut(),
                )
            };
            attempts += 1;
            // A random key already in use: draw another.
            let taken = ret == -(sys::FI_ENOKEY as i32) && !mode.prov_key();
            if !taken || attempts == KEY_ATTEMPTS {
                check("fi_mr_reg", ret)?;
                break;
            }
        }
        let mut mr = RawMr {
            raw,
            key: 0,
            desc: ptr::null_mut(),
        };
        if mode.endpoint() {
            let Some(ep) = ep else {
                // SAFETY: mr.raw is live and unused elsewhere.
                unsafe { mr.close() };
                return Err(FabricError::Invalid(
                    "the provider requires FI_MR_ENDPOINT: register through an Endpoint".into(),
                ));
            };
            // SAFETY: mr and ep are live objects of the same domain.
            let bound = unsafe {
                check("fi_mr_bind", sys::fi_mr_bind(mr.raw, &raw mut (*ep).fid, 0))
                    .and_then(|()| check("fi_mr_enable", sys::fi_mr_enable(mr.raw)))
            };
            if let Err(e) = bound {
                // SAFETY: mr.raw is live and unused elsewhere.
                unsafe { mr.close() };
                return Err(e);
            }
        }
        // SAFETY: mr.raw is a live, enabled registration.
        let (key, desc) = unsafe { (sys::fi_mr_key(mr.raw), sys::fi_mr_desc(mr.raw)) };
        if key == sys::FI_KEY_NOTAVAIL {
            // SAFETY: mr.raw is live and unused elsewhere.
            unsafe { mr.close() };
            return Err(FabricError::Invalid(
                "fi_mr_key: key not available (raw keys are not supported)".into(),
            ));
        }
        mr.key = key;
        mr.desc = desc;
        Ok(mr)
    }

    /// # Safety
    /// Called once; the registration is not used afterwards.
    pub(crate) unsafe fn close(&mut self) -> i32 {
        // SAFETY: per the contract, raw is live and closed exactly once.
        unsafe { close_fid(&raw mut (*self.raw).fid) }
    }
}

struct MrInner {
    _domain: Arc<DomainInner>,
    /// Present when the region is bound to an endpoint (FI_MR_ENDPOINT),
    /// which must outlive the binding.
    _ep: Option<Arc<EpInner>>,
    mr: RawMr,
}

impl Drop for MrInner {
    fn drop(&mut self) {
        // SAFETY: the registration is live and this is its only owner.
        unsafe { self.mr.close() };
    }
}

/// A registered memory region that owns (or, with
/// [`register_raw`](Self::register_raw), borrows) its memory. Dropping it
/// closes the registration first, then frees the memory.
pub struct MemoryRegion<M: RegionMemory> {
    // Field order is drop order: the registration closes before `mem` frees.
    inner: MrInner,
    remote_addr: u64,
    mem: M,
}

// SAFETY: the registration is an object of an FI_THREAD_SAFE domain, so
// it may be closed from any thread; the memory is Send (RegionMemory's
// bound).
unsafe impl<M: RegionMemory> Send for MemoryRegion<M> {}
// SAFETY: as above; shared access reads the key/descriptor and reaches the
// memory only through M's own &self API (atomics for SlotPage).
unsafe impl<M: RegionMemory + Sync> Sync for MemoryRegion<M> {}

impl<M: RegionMemory> MemoryRegion<M> {
    /// Registers `mem` on `domain` with `access`. Pass the endpoint when the
    /// provider requires `FI_MR_ENDPOINT` (harmless otherwise).
    pub fn register(
        domain: &Domain,
        ep: Option<&Endpoint>,
        mem: M,
        access: Access,
    ) -> Result<MemoryRegion<M>, FabricError> {
        let (ptr, len) = mem.region();
        let ep_inner = ep.map(|e| e.inner.clone());
        if let Some(e) = &ep_inner {
            if !Arc::ptr_eq(&e.domain, &domain.inner) {
                return Err(FabricError::Invalid(
                    "the endpoint belongs to another domain".into(),
                ));
            }
        }
        // SAFETY: mem is moved into the returned value and, by
        // RegionMemory's contract, its memory stays put until it is dropped,
        // which happens after the registration closes (field order). The
        // endpoint, if any, is live (we hold its inner).
        let mr = unsafe {
            RawMr::register(
                &domain.inner,
                ep_inner.as_ref().map(|e| e.raw),
                ptr,
                len,
                access,
            )?
        };
        let remote_addr = if domain.info().mr_mode().virt_addr() {
            ptr as u64
        } else {
            0
        };
        let bound = domain.info().mr_mode().endpoint();
        Ok(MemoryRegion {
            inner: MrInner {
                _domain: domain.inner.clone(),
                _ep: if bound { ep_inner } else { None },
                mr,
            },
            remote_addr,
            mem,
        })
    }

    /// What a peer needs to write here.
    pub fn remote(&self) -> RemoteRegion {
        RemoteRegion {
            addr: self.remote_addr,
            key: self.inner.mr.key,
            len: self.mem.region().1 as u64,
        }
    }

    /// The key (`fi_mr_key`).
    pub fn key(&self) -> u64 {
        self.inner.mr.key
    }

    /// The local descriptor (`fi_mr_desc`), for local operations under
    /// `FI_MR_LOCAL`.
    pub fn desc(&self) -> *mut c_void {
        self.inner.mr.desc
    }

    /// The registered memory.
    pub fn memory(&self) -> &M {
        &self.mem
    }

    /// The raw handle, valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::fid_mr {
        self.inner.mr.raw
    }
}

impl MemoryRegion<ForeignMemory> {
    /// Registers memory the caller owns.
    ///
    /// # Safety
    /// `[ptr, ptr+len)` must stay allocated, and must not be read or
    /// written through Rust references (only atomics or raw pointers),
    /// until the returned region is dropped: peers can write into it at any
    /// time.
    pub unsafe fn register_raw(
        domain: &Domain,
        ep: Option<&Endpoint>,
        ptr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<MemoryRegion<ForeignMemory>, FabricError> {
        MemoryRegion::register(domain, ep, ForeignMemory { ptr, len }, access)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_page_is_one_aligned_zeroed_page() {
        let p = SlotPage::new().unwrap();
        assert_eq!(p.len(), page_size());
        assert_eq!(p.as_ptr() as usize % page_size(), 0);
        assert_eq!(p.slots(), page_size() / 8);
        assert!((0..p.slots()).all(|i| p.read(i) == 0));
        p.store(3, 0xdead_beef);
        assert_eq!(p.read(3), 0xdead_beef);
        assert_eq!(p.read(2), 0);
    }

    #[test]
    #[should_panic(expected = "outside the page")]
    fn slot_past_the_page_panics() {
        let p = SlotPage::new().unwrap();
        p.read(p.slots());
    }

    #[test]
    fn remote_region_addresses_and_encoding() {
        let r = RemoteRegion {
            addr: 0x1000,
            key: 7,
            len: 4096,
        };
        assert_eq!(r.slot_addr(0), Some(0x1000));
        assert_eq!(r.slot_addr(2), Some(0x1010));
        assert_eq!(r.slot_addr(511), Some(0x1000 + 4088));
        assert_eq!(r.slot_addr(512), None);
        assert_eq!(RemoteRegion::from_bytes(&r.to_bytes()), Some(r));
        assert_eq!(RemoteRegion::from_bytes(&[0; 23]), None);
    }
}
