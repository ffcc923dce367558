//! Fabric, domain and address vector: the objects every endpoint hangs off.
//!
//! Owns: opening and closing them. Each is an `Arc` around an inner value
//! whose `Drop` calls `fi_close`; a child keeps its parents' inners alive,
//! so closing always runs child first. Must not: post or poll anything.

use std::fmt;
use std::ptr;
use std::sync::Arc;

use libfabric_sys as sys;

use super::error::{FabricError, check};
use super::info::Info;

/// An address in an [`AddressVector`] (`fi_addr_t`): what posts name a
/// peer by. Only meaningful for the vector it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct FiAddr(pub u64);

impl FiAddr {
    /// `FI_ADDR_UNSPEC`.
    pub const UNSPEC: FiAddr = FiAddr(sys::FI_ADDR_UNSPEC);
}

impl fmt::Display for FiAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == FiAddr::UNSPEC {
            f.write_str("fi_addr(unspec)")
        } else {
            write!(f, "fi_addr({})", self.0)
        }
    }
}

/// Closes a libfabric object; returns `fi_close`'s result.
///
/// # Safety
/// `fid` is a live object handle that nothing will use afterwards.
pub(crate) unsafe fn close_fid(fid: *mut sys::fid) -> i32 {
    // SAFETY: per the function contract.
    unsafe { sys::fi_close(fid) }
}

pub(crate) struct FabricInner {
    pub(crate) raw: *mut sys::fid_fabric,
}

// SAFETY: domains are opened FI_THREAD_SAFE (see Info::query's hints), so
// libfabric serialises access to every object below the fabric itself.
unsafe impl Send for FabricInner {}
// SAFETY: as above.
unsafe impl Sync for FabricInner {}

impl Drop for FabricInner {
    fn drop(&mut self) {
        // SAFETY: raw is live; every child holds an Arc to this inner, so
        // all of them are closed already.
        unsafe { close_fid(&mut (*self.raw).fid) };
    }
}

/// An open fabric (`fi_fabric`).
#[derive(Clone)]
pub struct Fabric {
    pub(crate) inner: Arc<FabricInner>,
}

impl Fabric {
    /// Opens the fabric `info` names.
    pub fn open(info: &Info) -> Result<Fabric, FabricError> {
        let mut raw = ptr::null_mut();
        // SAFETY: info is a valid fi_info with fabric_attr set (as every
        // fi_getinfo result is); raw is a valid out-pointer.
        let ret =
            unsafe { sys::fi_fabric((*info.as_raw()).fabric_attr, &mut raw, ptr::null_mut()) };
        check("fi_fabric", ret)?;
        Ok(Fabric {
            inner: Arc::new(FabricInner { raw }),
        })
    }

    /// The raw handle, valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::fid_fabric {
        self.inner.raw
    }
}

pub(crate) struct DomainInner {
    pub(crate) _fabric: Arc<FabricInner>,
    pub(crate) raw: *mut sys::fid_domain,
    pub(crate) info: Info,
}

// SAFETY: FI_THREAD_SAFE domain (see FabricInner).
unsafe impl Send for DomainInner {}
// SAFETY: as above.
unsafe impl Sync for DomainInner {}

impl Drop for DomainInner {
    fn drop(&mut self) {
        // SAFETY: raw is live; endpoints, CQs, AVs and MRs hold an Arc to
        // this inner, so they are closed already.
        unsafe { close_fid(&mut (*self.raw).fid) };
    }
}

impl DomainInner {
    pub(crate) fn fabric(&self) -> &FabricInner {
        &self._fabric
    }

    /// A random key for `fi_mr_reg`'s `requested_key` when the provider
    /// lets us choose (no `FI_MR_PROV_KEY`): as many random bytes as the
    /// domain's keys hold (`mr_key_size`, at most 8), never 0 nor
    /// `FI_KEY_NOTAVAIL`. A peer that was not told a region's key cannot
    /// guess it (counting keys from 1 gave every slot page of a job on
    /// `tcp;ofi_rxm` the key 1). A collision with a key in use is the
    /// caller's to retry (`-FI_ENOKEY`).
    pub(crate) fn random_requested_key(&self) -> Result<u64, FabricError> {
        use rand::TryRngCore;
        let bytes = self.info.mr_key_size().clamp(1, 8);
        let mask = if bytes == 8 {
            u64::MAX
        } else {
            (1u64 << (8 * bytes)) - 1
        };
        loop {
            let key = rand::rngs::OsRng.try_next_u64().map_err(|e| {
                FabricError::Invalid(format!(
                    "the operating system's random generator failed: {e}"
                ))
            })? & mask;
            if key != 0 && key != sys::FI_KEY_NOTAVAIL {
                return Ok(key);
            }
        }
    }
}

/// A resource domain (`fi_domain`): one NIC (or `lo`, or `shm`) through one
/// provider. Keeps the [`Info`] it was opened with.
#[derive(Clone)]
pub struct Domain {
    pub(crate) inner: Arc<DomainInner>,
}

impl Domain {
    /// Opens the domain `info` names on `fabric`.
    pub fn open(fabric: &Fabric, info: &Info) -> Result<Domain, FabricError> {
        let mut raw = ptr::null_mut();
        // SAFETY: the fabric is live (we hold it); info is valid for the
        // call (libfabric copies what it keeps); raw is an out-pointer.
        let ret =
            unsafe { sys::fi_domain(fabric.inner.raw, info.as_raw(), &mut raw, ptr::null_mut()) };
        check("fi_domain", ret)?;
        Ok(Domain {
            inner: Arc::new(DomainInner {
                _fabric: fabric.inner.clone(),
                raw,
                info: info.clone(),
            }),
        })
    }

    /// Opens fabric and domain for `info` in one go.
    pub fn open_info(info: &Info) -> Result<Domain, FabricError> {
        Domain::open(&Fabric::open(info)?, info)
    }

    /// What this domain was opened with.
    pub fn info(&self) -> &Info {
        &self.inner.info
    }

    /// The fabric this domain belongs to.
    pub fn fabric(&self) -> Fabric {
        Fabric {
            inner: self.inner._fabric.clone(),
        }
    }

    /// The raw handle, valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::fid_domain {
        self.inner.raw
    }
}

pub(crate) struct AvInner {
    pub(crate) _domain: Arc<DomainInner>,
    pub(crate) raw: *mut sys::fid_av,
}

// SAFETY: FI_THREAD_SAFE domain (see FabricInner).
unsafe impl Send for AvInner {}
// SAFETY: as above.
unsafe impl Sync for AvInner {}

impl Drop for AvInner {
    fn drop(&mut self) {
        // SAFETY: raw is live; endpoints bound to it hold an Arc to this
        // inner, so they are closed already.
        unsafe { close_fid(&mut (*self.raw).fid) };
    }
}

/// An address vector (`fi_av_open`, `FI_AV_TABLE`): turns the raw
/// addresses peers publish into [`FiAddr`]s.
#[derive(Clone)]
pub struct AddressVector {
    pub(crate) inner: Arc<AvInner>,
}

impl AddressVector {
    /// Opens an address vector sized for `count` peers (a hint; it grows).
    pub fn open(domain: &Domain, count: usize) -> Result<AddressVector, FabricError> {
        let mut attr = sys::fi_av_attr {
            type_: sys::FI_AV_TABLE,
            count,
            ..Default::default()
        };
        let mut raw = ptr::null_mut();
        // SAFETY: domain is live; attr and raw are valid for the call.
        let ret =
            unsafe { sys::fi_av_open(domain.inner.raw, &mut attr, &mut raw, ptr::null_mut()) };
        check("fi_av_open", ret)?;
        Ok(AddressVector {
            inner: Arc::new(AvInner {
                _domain: domain.inner.clone(),
                raw,
            }),
        })
    }

    /// Inserts one raw address (as `Endpoint::name` returned it on the
    /// peer) and returns its [`FiAddr`].
    pub fn insert(&self, raw_addr: &[u8]) -> Result<FiAddr, FabricError> {
        if raw_addr.is_empty() {
            return Err(FabricError::Invalid("empty fabric address".into()));
        }
        let mut out: sys::fi_addr_t = sys::FI_ADDR_NOTAVAIL;
        // SAFETY: the AV is live; raw_addr is readable for the call and
        // libfabric copies it; out receives one fi_addr_t.
        let ret = unsafe {
            sys::fi_av_insert(
                self.inner.raw,
                raw_addr.as_ptr().cast(),
                1,
                &mut out,
                0,
                ptr::null_mut(),
            )
        };
        if ret < 0 {
            return Err(FabricError::call("fi_av_insert", ret));
        }
        if ret != 1 || out == sys::FI_ADDR_NOTAVAIL {
            return Err(FabricError::Invalid(format!(
                "fi_av_insert did not accept the address ({} bytes)",
                raw_addr.len()
            )));
        }
        Ok(FiAddr(out))
    }

    /// Removes an address (e.g. of a failed peer).
    pub fn remove(&self, addr: FiAddr) -> Result<(), FabricError> {
        let mut a = addr.0;
        // SAFETY: the AV is live; a is one readable fi_addr_t.
        let ret = unsafe { sys::fi_av_remove(self.inner.raw, &mut a, 1, 0) };
        check("fi_av_remove", ret)
    }

    /// The raw handle, valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::fid_av {
        self.inner.raw
    }
}
