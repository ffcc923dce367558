//! Safe wrappers over libfabric for the detector: choose a provider, open
//! fabric/domain/address vector/endpoint, register the slot page, write
//! heartbeats, send and receive notices, read (normalised) completions.
//!
//! Owns: every `unsafe` call into libfabric (with `libfabric-sys`). The rest
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
//! # Measured on this machine (libfabric 1.17.0, loopback, 2 cores)
//!
//! Filled in from `tests/fabric_*.rs` runs; see the report in the
//! repository history for the commands.
//!
//! | provider | wait object | mr_mode | inject | FI_SOURCE | peer `kill -9` while writing every 1 ms |
//! |---|---|---|---|---|---|
//! | `tcp;ofi_rxm` (lo) | TBD | TBD | TBD | TBD | TBD |
//! | `sockets` (lo) | TBD | TBD | TBD | TBD | TBD |
//! | `shm` | TBD | TBD | TBD | TBD | TBD |

mod cq;
mod endpoint;
mod error;
mod info;
mod mr;
mod resources;

pub use cq::{CompletionQueue, CqEntry, CqRead, RawCqError, WaitKind, WaitPreference};
pub use endpoint::{Completion, Endpoint, EndpointConfig, MAX_WRITE_TOKEN, RetryBound};
pub use error::{CqError, FabricError, FailedOp, strerror};
pub use info::{
    Info, MrMode, OFFERED_MR_MODE, Offering, PciAddress, REQUIRED_CAPS, offerings, provider_hint,
};
pub use mr::{
    Access, ForeignMemory, MemoryRegion, RegionMemory, RemoteRegion, SlotPage, page_size,
};
pub use resources::{AddressVector, Domain, Fabric, FiAddr};
