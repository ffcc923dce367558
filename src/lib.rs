//! ffd, the fabric failure detector: the library that MPI and OpenSHMEM
//! implementations embed to learn, within milliseconds and consistently,
//! which processes of their job have died.
//!
//! The layers are crates of one workspace, so Cargo enforces the arrows
//! (see `docs/design.md`):
//!
//! - [`protocol`] (crate `ffd-protocol`, re-exported): the sans-IO core
//!   (ring, mending, BMG broadcast, wire codec, the [`protocol::Engine`]).
//!   No clock, no libc, no libfabric, no `unsafe`.
//! - this crate, the embeddable library (`libffd.so`, `libffd.a`):
//!   - [`config`]: the `FFD_*` settings, their builder and their origins;
//!   - [`bootstrap`]: the address-exchange transports (an allgather of
//!     bytes: embedder's callback, TCP rendezvous, PMIx, in-process groups);
//!   - [`fabric`]: safe libfabric wrappers (`unsafe` here, with `libfabric-sys`);
//!   - [`node`]: the operating system's side of same-host watching (pidfd,
//!     exit words, the host's shared segment, scheduling; `unsafe` here);
//!   - [`runtime`]: the detector itself, [`runtime::Detector`], its start-up,
//!     its pinned progress thread, events and stats;
//!   - [`capi`]: the C ABI (`include/ffd.h`).
//! - `ffd-cli` (`cli/`): the `ffd` command (`run`, `agent`, `rendezvous`,
//!   `sim`, `info`); the library links none of it.
//!
//! `unsafe` is denied crate-wide and allowed only in [`fabric`], [`node`],
//! [`capi`] and [`bootstrap::pmix`](bootstrap) (feature `pmix`), each block with a
//! `// SAFETY:` comment; every other module forbids it.

#![deny(unsafe_code)]

pub use ffd_protocol as protocol;

pub mod bootstrap;
#[allow(unsafe_code)]
pub mod capi;
pub mod config;
#[allow(unsafe_code)]
pub mod fabric;
#[allow(unsafe_code)]
pub mod node;
pub mod runtime;
