//! Choosing a provider: `fi_getinfo` with the detector's hints, and the
//! list of what libfabric offers on this machine (for `ffd info`).
//!
//! Owns: the hints (RDM endpoint, `FI_MSG | FI_RMA` with writes both ways,
//! every mr_mode bit we honour, thread-safe domain), reading back what the
//! provider chose, and which libfabric the process runs on against the one
//! ffd was built for ([`FabricVersions`]). Must not: open anything; that
//! starts at `Fabric`.

use std::ffi::{CStr, CString, c_char};
use std::fmt;
use std::path::{Path, PathBuf};
use std::ptr;

use libfabric_sys as sys;

use super::error::FabricError;

/// The capabilities the detector needs: messages (notices) and RMA writes
/// (heartbeats), issued and received.
pub const REQUIRED_CAPS: u64 =
    sys::FI_MSG | sys::FI_RMA | sys::FI_WRITE | sys::FI_REMOTE_WRITE | sys::FI_SEND | sys::FI_RECV;

/// Every mr_mode bit this layer honours; the provider keeps those it needs.
pub const OFFERED_MR_MODE: i32 = sys::FI_MR_LOCAL
    | sys::FI_MR_VIRT_ADDR
    | sys::FI_MR_ALLOCATED
    | sys::FI_MR_PROV_KEY
    | sys::FI_MR_ENDPOINT;

/// The memory-registration rules a provider returned (`domain_attr->mr_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrMode(pub i32);

impl MrMode {
    /// `FI_MR_LOCAL`: local buffers of sends and receives need a descriptor.
    pub fn local(self) -> bool {
        self.0 & sys::FI_MR_LOCAL != 0
    }
    /// `FI_MR_VIRT_ADDR`: a remote address is the target's virtual address;
    /// without it, an offset into the region (0 for its start).
    pub fn virt_addr(self) -> bool {
        self.0 & sys::FI_MR_VIRT_ADDR != 0
    }
    /// `FI_MR_ALLOCATED`: registered memory must be backed by pages.
    pub fn allocated(self) -> bool {
        self.0 & sys::FI_MR_ALLOCATED != 0
    }
    /// `FI_MR_PROV_KEY`: the provider picks keys; read them with `fi_mr_key`.
    pub fn prov_key(self) -> bool {
        self.0 & sys::FI_MR_PROV_KEY != 0
    }
    /// `FI_MR_ENDPOINT`: a region must be bound to the endpoint and enabled.
    pub fn endpoint(self) -> bool {
        self.0 & sys::FI_MR_ENDPOINT != 0
    }
}

impl fmt::Display for MrMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (sys::FI_MR_LOCAL, "FI_MR_LOCAL"),
            (sys::FI_MR_RAW, "FI_MR_RAW"),
            (sys::FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"),
            (sys::FI_MR_ALLOCATED, "FI_MR_ALLOCATED"),
            (sys::FI_MR_PROV_KEY, "FI_MR_PROV_KEY"),
            (sys::FI_MR_MMU_NOTIFY, "FI_MR_MMU_NOTIFY"),
            (sys::FI_MR_RMA_EVENT, "FI_MR_RMA_EVENT"),
            (sys::FI_MR_ENDPOINT, "FI_MR_ENDPOINT"),
            (sys::FI_MR_HMEM, "FI_MR_HMEM"),
        ];
        let set: Vec<&str> = names
            .iter()
            .filter(|(bit, _)| self.0 & bit != 0)
            .map(|(_, n)| *n)
            .collect();
        if set.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&set.join("|"))
        }
    }
}

/// A PCI address (`domain:bus:device.function`), from `fi_info->nic`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PciAddress {
    /// PCI domain (segment).
    pub domain: u16,
    /// Bus number.
    pub bus: u8,
    /// Device number.
    pub device: u8,
    /// Function number.
    pub function: u8,
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// Maps the provider names users type to the RDM stack to ask for:
/// `tcp` and `verbs` only offer RDM endpoints through the `ofi_rxm` layer.
pub fn provider_hint(name: &str) -> String {
    match name {
        "tcp" | "verbs" => format!("{name};ofi_rxm"),
        other => other.to_owned(),
    }
}

/// One `fi_info` entry, owned (a `fi_dupinfo` copy freed on drop).
pub struct Info {
    raw: *mut sys::fi_info,
}

// SAFETY: an Info is plain data owned by this value (a private fi_dupinfo
// copy); libfabric keeps no reference to it and reading it needs no lock.
unsafe impl Send for Info {}
// SAFETY: shared access only reads the structure.
unsafe impl Sync for Info {}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: raw came from fi_dupinfo and is freed exactly once, here.
        unsafe { sys::fi_freeinfo(self.raw) };
    }
}

impl Clone for Info {
    fn clone(&self) -> Self {
        Info::dup(self.raw).expect("fi_dupinfo of a valid fi_info")
    }
}

impl fmt::Debug for Info {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Info")
            .field("provider", &self.provider())
            .field("fabric", &self.fabric_name())
            .field("domain", &self.domain_name())
            .field("mr_mode", &self.mr_mode().to_string())
            .field("inject_size", &self.inject_size())
            .field("source", &self.has_source())
            .finish()
    }
}

/// Reads a C string field that may be NULL.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for the call.
unsafe fn c_str(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: non-NULL and NUL-terminated per this function's contract.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl Info {
    /// Asks libfabric for an RDM endpoint of `provider` (`tcp`, `tcp;ofi_rxm`,
    /// `sockets`, `shm`, `verbs`, ...) on `domain` (e.g. `lo`; `None` for
    /// any), with [`REQUIRED_CAPS`] and every mr_mode bit in
    /// [`OFFERED_MR_MODE`]. `FI_SOURCE` (the sender's address on receives)
    /// is asked for first and dropped when the provider lacks it.
    ///
    /// When the provider is not offered, the error lists the ones that are.
    pub fn query(provider: &str, domain: Option<&str>) -> Result<Info, FabricError> {
        let prov = provider_hint(provider);
        for caps in [REQUIRED_CAPS | sys::FI_SOURCE, REQUIRED_CAPS] {
            let Some(list) = InfoList::get(&Hints::new(caps, Some(&prov), domain)?)? else {
                continue;
            };
            // Layered providers (tcp;ofi_rxm in 1.17) ignore the domain
            // name hint: filter ourselves.
            if let Some(found) = list
                .iter()
                .find(|i| domain.is_none_or(|d| i.domain_name() == d))
            {
                return Ok(found);
            }
        }
        let available = offerings()?
            .into_iter()
            .map(|o| format!("{} ({})", o.provider, o.domain))
            .collect();
        Err(FabricError::ProviderUnavailable {
            requested: provider.to_owned(),
            domain: domain.map(str::to_owned),
            available,
        })
    }

    fn dup(raw: *const sys::fi_info) -> Result<Info, FabricError> {
        // SAFETY: raw points to a valid fi_info (an entry of a list from
        // fi_getinfo, or another Info). fi_dupinfo copies one entry and
        // sets `next` to NULL in the copy.
        let copy = unsafe { sys::fi_dupinfo(raw) };
        if copy.is_null() {
            return Err(FabricError::call("fi_dupinfo", sys::FI_ENOMEM));
        }
        Ok(Info { raw: copy })
    }

    /// The `fi_info` for calls this module does not wrap. Valid while
    /// `self` lives; do not free it.
    pub fn as_raw(&self) -> *mut sys::fi_info {
        self.raw
    }

    fn attr<T>(&self, get: impl FnOnce(&sys::fi_info) -> *mut T) -> Option<&T> {
        // SAFETY: self.raw is a valid fi_info owned by self; its attribute
        // pointers are NULL or point into the same allocation graph, which
        // lives as long as self (the returned borrow is tied to &self).
        unsafe {
            let info = &*self.raw;
            get(info).as_ref()
        }
    }

    /// The provider, e.g. `tcp;ofi_rxm`.
    pub fn provider(&self) -> String {
        self.attr(|i| i.fabric_attr)
            // SAFETY: prov_name is NULL or a string owned by this fi_info.
            .map(|a| unsafe { c_str(a.prov_name) })
            .unwrap_or_default()
    }

    /// The fabric name, e.g. `127.0.0.1/32`.
    pub fn fabric_name(&self) -> String {
        self.attr(|i| i.fabric_attr)
            // SAFETY: name is NULL or a string owned by this fi_info.
            .map(|a| unsafe { c_str(a.name) })
            .unwrap_or_default()
    }

    /// The domain name, e.g. `lo`, `eth0`, `shm`, `mlx5_0`.
    pub fn domain_name(&self) -> String {
        self.attr(|i| i.domain_attr)
            // SAFETY: name is NULL or a string owned by this fi_info.
            .map(|a| unsafe { c_str(a.name) })
            .unwrap_or_default()
    }

    /// The mr_mode the provider requires.
    pub fn mr_mode(&self) -> MrMode {
        MrMode(self.attr(|i| i.domain_attr).map_or(0, |a| a.mr_mode))
    }

    /// The size of a memory-region key in bytes (`domain_attr->mr_key_size`).
    pub fn mr_key_size(&self) -> usize {
        self.attr(|i| i.domain_attr).map_or(0, |a| a.mr_key_size)
    }

    /// The largest payload an inject (`fi_inject_write`, `FI_INJECT`) takes.
    pub fn inject_size(&self) -> usize {
        self.attr(|i| i.tx_attr).map_or(0, |a| a.inject_size)
    }

    /// The largest message the endpoint sends.
    pub fn max_msg_size(&self) -> usize {
        self.attr(|i| i.ep_attr).map_or(0, |a| a.max_msg_size)
    }

    /// The capabilities granted.
    pub fn caps(&self) -> u64 {
        // SAFETY: self.raw is a valid fi_info owned by self.
        unsafe { (*self.raw).caps }
    }

    /// Whether receives report the sender's address (`FI_SOURCE`).
    pub fn has_source(&self) -> bool {
        self.caps() & sys::FI_SOURCE != 0
    }

    /// True when the provider progresses data only when the application
    /// calls into it (`FI_PROGRESS_MANUAL`): the target's thread must read
    /// its completion queue for writes to land.
    pub fn manual_progress(&self) -> bool {
        self.attr(|i| i.domain_attr).is_some_and(|a| {
            // SAFETY: `a` is a valid fi_domain_attr of the fi_info self
            // owns; the function only reads one field of it.
            let progress = unsafe { sys::libfabric_sys_domain_data_progress(a) };
            progress == sys::FI_PROGRESS_MANUAL
        })
    }

    /// The NIC's PCI address, when the provider reports one
    /// (`fi_info->nic->bus_attr`); used to place the progress thread.
    pub fn pci_address(&self) -> Option<PciAddress> {
        let nic = self.attr(|i| i.nic)?;
        // SAFETY: bus_attr is NULL or points into the nic object owned by
        // this fi_info; a PCI bus type means the `pci` union member is set.
        unsafe {
            let bus = nic.bus_attr.as_ref()?;
            if bus.bus_type != sys::FI_BUS_PCI {
                return None;
            }
            let pci = bus.attr.pci;
            Some(PciAddress {
                domain: pci.domain_id,
                bus: pci.bus_id,
                device: pci.device_id,
                function: pci.function_id,
            })
        }
    }
}

/// What libfabric offers here for the detector's use, one entry per
/// provider, fabric and domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offering {
    /// Provider, e.g. `tcp;ofi_rxm`.
    pub provider: String,
    /// Fabric name.
    pub fabric: String,
    /// Domain name.
    pub domain: String,
    /// The mr_mode it requires.
    pub mr_mode: MrMode,
    /// Inject size.
    pub inject_size: usize,
    /// Whether it reports senders (`FI_SOURCE`).
    pub source: bool,
    /// The NIC's PCI address, if known.
    pub pci: Option<PciAddress>,
}

/// Every provider/domain that offers RDM endpoints with
/// [`REQUIRED_CAPS`], in libfabric's order of preference.
pub fn offerings() -> Result<Vec<Offering>, FabricError> {
    let Some(list) = InfoList::get(&Hints::new(REQUIRED_CAPS, None, None)?)? else {
        return Ok(Vec::new());
    };
    let mut out: Vec<Offering> = Vec::new();
    for info in list.iter() {
        let o = Offering {
            provider: info.provider(),
            fabric: info.fabric_name(),
            domain: info.domain_name(),
            mr_mode: info.mr_mode(),
            inject_size: info.inject_size(),
            source: info.has_source(),
            pci: info.pci_address(),
        };
        let seen = out
            .iter()
            .any(|p| p.provider == o.provider && p.fabric == o.fabric && p.domain == o.domain);
        if !seen {
            out.push(o);
        }
    }
    Ok(out)
}

/// `fi_getinfo` hints, freed on drop.
struct Hints {
    raw: *mut sys::fi_info,
}

impl Drop for Hints {
    fn drop(&mut self) {
        // SAFETY: raw came from fi_allocinfo; the strings in it were
        // allocated with malloc (strdup), as fi_freeinfo expects.
        unsafe { sys::fi_freeinfo(self.raw) };
    }
}

/// `strdup` of a Rust string, for fields that `fi_freeinfo` will `free`.
fn malloc_str(s: &str) -> Result<*mut c_char, FabricError> {
    let c = CString::new(s)
        .map_err(|_| FabricError::Invalid(format!("name {s:?} contains a NUL byte")))?;
    // SAFETY: c is a valid NUL-terminated string; strdup copies it into
    // malloc'd memory (or returns NULL).
    let p = unsafe { libc::strdup(c.as_ptr()) };
    if p.is_null() {
        return Err(FabricError::call("strdup", sys::FI_ENOMEM));
    }
    Ok(p)
}

impl Hints {
    fn new(caps: u64, provider: Option<&str>, domain: Option<&str>) -> Result<Hints, FabricError> {
        // SAFETY: fi_allocinfo returns a zeroed fi_info whose attribute
        // structs are allocated, or NULL.
        let raw = unsafe { sys::fi_allocinfo() };
        if raw.is_null() {
            return Err(FabricError::call("fi_allocinfo", sys::FI_ENOMEM));
        }
        let hints = Hints { raw };
        let prov = provider.map(malloc_str).transpose()?;
        let dom = match domain.map(malloc_str).transpose() {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: prov came from strdup and was not stored yet.
                prov.into_iter()
                    .for_each(|p| unsafe { libc::free(p.cast()) });
                return Err(e);
            }
        };
        // SAFETY: hints.raw and its ep/domain/fabric attribute structs were
        // allocated by fi_allocinfo; the strings are malloc'd and from here
        // on owned (and freed) by the hints.
        unsafe {
            let info = &mut *hints.raw;
            info.caps = caps;
            // We take no mode bits: our op contexts are plain tokens, so we
            // cannot give providers FI_CONTEXT space.
            info.mode = 0;
            (*info.ep_attr).type_ = sys::FI_EP_RDM;
            let d = &mut *info.domain_attr;
            d.mr_mode = OFFERED_MR_MODE;
            d.threading = sys::FI_THREAD_SAFE;
            if let Some(p) = dom {
                d.name = p;
            }
            if let Some(p) = prov {
                (*info.fabric_attr).prov_name = p;
            }
        }
        Ok(hints)
    }
}

/// A list returned by `fi_getinfo`, freed on drop.
struct InfoList {
    head: *mut sys::fi_info,
}

impl Drop for InfoList {
    fn drop(&mut self) {
        // SAFETY: head came from fi_getinfo and is freed once, here.
        unsafe { sys::fi_freeinfo(self.head) };
    }
}

impl InfoList {
    /// `Ok(None)` when nothing matches (`-FI_ENODATA`).
    fn get(hints: &Hints) -> Result<Option<InfoList>, FabricError> {
        let mut head: *mut sys::fi_info = ptr::null_mut();
        // SAFETY: hints.raw is a valid fi_info; head is a valid out-pointer;
        // NULL node/service ask for local addresses of any kind.
        let ret = unsafe {
            sys::fi_getinfo(
                sys::fi_header_version(),
                ptr::null(),
                ptr::null(),
                0,
                hints.raw,
                &mut head,
            )
        };
        if ret == -(sys::FI_ENODATA) {
            return Ok(None);
        }
        if ret != 0 {
            return Err(FabricError::call("fi_getinfo", ret));
        }
        if head.is_null() {
            return Ok(None);
        }
        Ok(Some(InfoList { head }))
    }

    /// Entries as owned copies (a handful; this is not a hot path).
    fn iter(&self) -> impl Iterator<Item = Info> + '_ {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            if cur.is_null() {
                return None;
            }
            let item = Info::dup(cur).ok();
            // SAFETY: cur is an entry of the list owned by self.
            cur = unsafe { (*cur).next };
            item
        })
    }
}

/// The version of the libfabric library loaded at run time
/// (`FI_VERSION(major, minor)`), which may be newer than the headers.
pub fn runtime_version() -> u32 {
    // SAFETY: fi_version takes no arguments, has no preconditions and only
    // returns a value.
    unsafe { sys::fi_version() }
}

/// `"major.minor"` of an `FI_VERSION` word.
pub fn version_text(version: u32) -> String {
    format!("{}.{}", sys::FI_MAJOR(version), sys::FI_MINOR(version))
}

/// The libfabric this process runs on against the one ffd was built for.
///
/// A process has one libfabric (one `libfabric.so.1`, whichever the loader
/// found first), shared by ffd and the embedder: an MPI library that bundles its
/// own libfabric brings it into the process, and ffd then runs on it.
/// libfabric keeps its ABI backward compatible, so a newer library than the
/// headers ffd was built with is fine; an older one may lack what ffd calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FabricVersions {
    /// `FI_VERSION` of the headers ffd was built against.
    pub built: u32,
    /// `fi_version()` of the library loaded in this process.
    pub loaded: u32,
    /// The file the library was loaded from, when the loader says.
    pub path: Option<String>,
}

impl FabricVersions {
    /// The versions of this process.
    pub fn of_this_process() -> FabricVersions {
        FabricVersions {
            built: sys::fi_header_version(),
            loaded: runtime_version(),
            path: loaded_library_path(),
        }
    }

    /// Refuses a loaded libfabric older than the headers ffd was built
    /// against, naming both versions and the file.
    pub fn check(&self) -> Result<(), FabricError> {
        if self.loaded >= self.built {
            return Ok(());
        }
        Err(FabricError::OlderLibrary {
            built: version_text(self.built),
            loaded: version_text(self.loaded),
            path: self
                .path
                .clone()
                .unwrap_or_else(|| "an unknown file".to_owned()),
        })
    }
}

impl fmt::Display for FabricVersions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "libfabric {} loaded from {}, ffd built against libfabric {}",
            version_text(self.loaded),
            self.path.as_deref().unwrap_or("an unknown file"),
            version_text(self.built)
        )
    }
}

/// The file holding the `fi_version` this process calls (`dladdr`).
fn loaded_library_path() -> Option<String> {
    let function: unsafe extern "C" fn() -> u32 = sys::fi_version;
    let mut info = libc::Dl_info {
        dli_fname: ptr::null(),
        dli_fbase: ptr::null_mut(),
        dli_sname: ptr::null(),
        dli_saddr: ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the loader's tables for the given address
    // and writes the out-structure, which is valid for writes.
    let found = unsafe { libc::dladdr(function as *const libc::c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is non-NULL and points to the loader's NUL-terminated
    // name of a loaded object, which stays loaded (libfabric is never
    // unloaded while ffd links it).
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(name.to_string_lossy().into_owned())
}

/// Where `ci/libfabric-patched` stamps the prefix it installs into
/// (`PREFIX/share/ffd/libfabric-patched`, naming the source and the
/// patch): the libfabric beside it carries ffd's fix for a stranger's
/// crafted connection (`docs/upstream/libfabric-rxm-conn-id.md`).
pub const PATCHED_STAMP: &str = "share/ffd/libfabric-patched";

/// The `libfabric.so` file this process has mapped, from `/proc/self/maps`
/// (`None` before libfabric is loaded, or without procfs).
pub fn mapped_libfabric() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .map(Path::new)
        .find(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libfabric.so"))
        })
        .map(Path::to_path_buf)
}

/// The stamp of `ci/libfabric-patched` in the prefix of `library`
/// (`PREFIX/lib/libfabric.so.1` → `PREFIX/share/ffd/libfabric-patched`),
/// if `library` is such a patched build.
pub fn patched_stamp(library: &Path) -> Option<PathBuf> {
    let stamp = library.parent()?.parent()?.join(PATCHED_STAMP);
    stamp.is_file().then_some(stamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_and_verbs_go_through_rxm() {
        assert_eq!(provider_hint("tcp"), "tcp;ofi_rxm");
        assert_eq!(provider_hint("verbs"), "verbs;ofi_rxm");
        assert_eq!(provider_hint("tcp;ofi_rxm"), "tcp;ofi_rxm");
        assert_eq!(provider_hint("shm"), "shm");
    }

    #[test]
    fn mr_mode_bits_and_names() {
        let m = MrMode(sys::FI_MR_VIRT_ADDR | sys::FI_MR_PROV_KEY);
        assert!(m.virt_addr() && m.prov_key());
        assert!(!m.local() && !m.endpoint() && !m.allocated());
        assert_eq!(m.to_string(), "FI_MR_VIRT_ADDR|FI_MR_PROV_KEY");
        assert_eq!(MrMode(0).to_string(), "none");
    }

    #[test]
    fn pci_address_formats_like_lspci() {
        let p = PciAddress {
            domain: 0,
            bus: 0x3b,
            device: 0,
            function: 1,
        };
        assert_eq!(p.to_string(), "0000:3b:00.1");
    }

    #[test]
    fn tcp_is_offered_with_rma_and_loopback_is_a_domain() {
        let info = Info::query("tcp", Some("lo")).expect("tcp;ofi_rxm on lo");
        assert_eq!(info.provider(), "tcp;ofi_rxm");
        assert_eq!(info.domain_name(), "lo");
        assert_eq!(info.caps() & REQUIRED_CAPS, REQUIRED_CAPS);
        assert!(info.inject_size() >= 8, "{info:?}");
        // rxm progresses data when called (1.17's data_progress, 2.x's
        // progress: the same member of fi_domain_attr).
        assert!(info.manual_progress(), "{info:?}");
        let all = offerings().expect("offerings");
        assert!(
            all.iter()
                .any(|o| o.provider == "tcp;ofi_rxm" && o.domain == "lo")
        );
    }

    #[test]
    fn an_older_loaded_libfabric_is_refused_naming_both_versions() {
        let older = FabricVersions {
            built: sys::FI_VERSION(1, 17),
            loaded: sys::FI_VERSION(1, 15),
            path: Some("/opt/mpi/lib/libfabric.so.1".to_owned()),
        };
        let err = older.check().expect_err("1.15 is older than 1.17");
        let text = err.to_string();
        for part in ["1.15", "1.17", "/opt/mpi/lib/libfabric.so.1"] {
            assert!(text.contains(part), "{part} missing from: {text}");
        }
        let newer = FabricVersions {
            loaded: sys::FI_VERSION(2, 5),
            ..older.clone()
        };
        newer
            .check()
            .expect("a newer libfabric is backward compatible");
        assert_eq!(
            newer.to_string(),
            "libfabric 2.5 loaded from /opt/mpi/lib/libfabric.so.1, \
             ffd built against libfabric 1.17"
        );
        let same = FabricVersions {
            loaded: sys::FI_VERSION(1, 17),
            ..older
        };
        same.check().expect("the same version");
    }

    #[test]
    fn this_process_runs_on_a_libfabric_it_can_use() {
        let v = FabricVersions::of_this_process();
        v.check()
            .expect("the tests run on the libfabric they were built against");
        let path = v.path.expect("dladdr finds libfabric");
        assert!(path.contains("libfabric"), "{path}");
        assert_eq!(v.built, sys::fi_header_version());
    }

    #[test]
    fn missing_provider_names_itself_and_the_alternatives() {
        let err = Info::query("no-such-provider", None).expect_err("must not exist");
        match &err {
            FabricError::ProviderUnavailable {
                requested,
                available,
                ..
            } => {
                assert_eq!(requested, "no-such-provider");
                assert!(
                    available.iter().any(|a| a.starts_with("tcp;ofi_rxm")),
                    "{available:?}"
                );
            }
            other => panic!("wrong error: {other}"),
        }
        assert!(err.to_string().contains("no-such-provider"));
    }
}
