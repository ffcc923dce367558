//! Safe wrappers over libfabric for the detector: choose a provider, open
//! fabric/domain/address vector/endpoint, register the slot page, write
//! heartbeats, send and receive notices, read (normalised) completions.
//!
//! Owns: every `unsafe` call into libfabric (with `libfabric-sys`), and
//! the source filter on the provider's listening socket (`guard`). The rest
//! of the crate uses only the safe API below. Must not: make protocol
//! decisions (who is dead); it reports refusals and error completions
//! faithfully and leaves judging to the protocol.
//!
//! Shape (after rust-ibverbs): each object is an `Arc` of an inner value
//! holding its raw handle and `Arc`s of its parents; `Drop` calls
//! `fi_close`, so children always close before parents. The endpoint owns
//! its completion queue and its registered send/receive buffers (freed
//! only after the endpoint is closed), so no caller buffer must outlive an
//! operation. Domains are opened `FI_THREAD_SAFE`.
//!
//! ```no_run
//! use ffd::fabric::*;
//! # fn main() -> Result<(), FabricError> {
//! let info = Info::query("tcp", Some("lo"))?;
//! let domain = Domain::open_info(&info)?;
//! let av = AddressVector::open(&domain, 16)?;
//! let mut ep = Endpoint::open(&domain, &av, &EndpointConfig::default())?;
//! let slots = ep.register(SlotPage::new()?)?;
//! // publish ep.name() and slots.remote().to_bytes(); for a peer:
//! # let (peer_name, peer_region) = (ep.name().to_vec(), slots.remote());
//! let peer = av.insert(&peer_name)?;
//! ep.try_inject_write(peer, &peer_region, 0, 1)?;
//! ep.poll(64, &mut |c| println!("{c:?}"))?;
//! # Ok(()) }
//! ```
//!
//! # Measured on this machine (libfabric 1.17.0, loopback, 2 shared cores)
//!
//! From `tests/fabric_loopback.rs` and `tests/fabric_kill.rs` (run with
//! `-- --nocapture` and look for `MEASURE`). Kill times are from `kill -9`
//! (including reaping the child) to the verdict, writing every 1 ms, six
//! runs each; the helper's refusal bound was 250 ms.
//!
//! | | `tcp;ofi_rxm` (lo) | `sockets` (lo) | `shm` |
//! |---|---|---|---|
//! | wait object | `FI_WAIT_FD` (fd sleeps: 0.1 ms CPU per 300 ms idle) | `FI_WAIT_FD` | none usable: FD refused; `FI_WAIT_UNSPEC` accepted but `fi_cq_sread` ignores its timeout, so `Auto` polls with 1 ms sleeps |
//! | mr_mode | none (remote address = offset 0) | none | `FI_MR_VIRT_ADDR` (remote address = pointer) |
//! | inject size | 64 | 255 | 4096 |
//! | FI_SOURCE | yes | yes | yes |
//! | data progress | manual: the target must read its CQ | auto | manual |
//! | first write lands | ~11 ms (connection set-up, EAGAIN meanwhile) | 3–20 ms | < 0.1 ms |
//! | wrong key / address | target drops the connection: later posts `-FI_EAGAIN` until `Unreachable`; with `delivery_complete`, `FI_ECANCELED` completion naming the write in < 1 ms | `FI_EACCES` completion naming the write in 8–28 ms | key **not checked** (write lands); unmapped address: `FI_EIO` completion, NULL context; a mapped unregistered address is **written** |
//! | peer `kill -9`, tracked writes | posts `-FI_EAGAIN` from 10–60 ms → `Unreachable` at the bound (once: `FI_ECONNRESET` completion in 8 ms) | posts `-FI_ENOENT` from 1–13 ms; `FI_EIO` completion naming the write in 1–13 ms (2 of 6 runs: none within 250 ms → `Unreachable`) | `FI_EIO` completion, **NULL context**, in 1–10 ms |
//! | peer `kill -9`, inject writes | `-FI_EAGAIN` from 10–45 ms → `Unreachable` | `-FI_ENOENT`, then `FI_EIO` with NULL context in 5–32 ms (1 of 6: `Unreachable`) | the post itself fails `FI_EIO` in 1–16 ms |
//! | peer `kill -9`, delivery-complete writes | `FI_ECANCELED` (prov_errno `ENOTCONN`) naming the write in 10–33 ms | – | – |
//!
//! What follows for callers: judge a peer by refusals (a run of
//! `WouldBlock`/`ENOENT` on posts to it) as well as by error completions;
//! expect error entries without an operation ([`FailedOp::Unknown`]); on
//! shm, RMA writes are checked against nothing, so only ever address the
//! slot region a peer published.

mod cq;
mod endpoint;
mod error;
mod guard;
mod info;
mod liveness;
mod mr;
mod resources;

pub use cq::{CompletionQueue, CqEntry, CqRead, RawCqError, Readiness, WaitKind, WaitPreference};
pub use endpoint::{Completion, Endpoint, EndpointConfig, MAX_WRITE_TOKEN, RetryBound, Waited};
pub use error::{CqError, FabricError, FailedOp, strerror};
pub use guard::{
    GuardError, SOCKET_PROVIDERS, SourceFilter, SourceGuard, attached_filter_len,
    listens_on_sockets, socket_address,
};
#[cfg(any(test, feature = "fault-injection"))]
pub use guard::{connect_within, filters_at_port};
pub use info::{
    FabricVersions, Info, MrMode, OFFERED_MR_MODE, Offering, PATCHED_STAMP, PciAddress,
    REQUIRED_CAPS, mapped_libfabric, offerings, patched_stamp, provider_hint, runtime_version,
    version_text,
};
pub use liveness::{HANG_UP, READABLE, SocketSet, WRITABLE, connect_started, liveness_listener};
pub use mr::{
    Access, ForeignMemory, MemoryRegion, RegionMemory, RemoteRegion, SlotPage, page_size,
};
pub use resources::{AddressVector, Domain, Fabric, FiAddr};
