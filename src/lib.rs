//! ffd, the fabric failure detector.
//!
//! A library that MPI and OpenSHMEM implementations embed to learn, within
//! milliseconds and consistently, which processes of a job have died. See
//! `DESIGN.md` for the protocol; the layout of this crate:
//!
//! - [`protocol`]: the sans-IO core (ring, mending, BMG broadcast, wire
//!   codec, the [`protocol::Engine`]). No clocks, threads or libfabric.
//! - [`config`]: the `FFD_*` settings, their builder and their origins.
//! - [`bootstrap`]: how ranks exchange addresses at start (host allgather,
//!   TCP rendezvous, in-process groups for tests).
//! - [`fabric`]: safe libfabric wrappers (provider choice, endpoint, slot
//!   page, heartbeat writes, notices, normalised error completions); the
//!   only place besides `libfabric-sys` with `unsafe`.
//! - [`runtime`]: the detector itself: [`runtime::Detector`], its pinned
//!   progress thread, events and stats.
//! - [`agent`]: `ffd agent`, one rank driven by the `FFD_*` environment.
//! - [`info`]: `ffd info`, the effective settings and the fabric here.
//! - [`launch`]: `ffd run`, a local job of agent processes with injected
//!   faults, its live timeline and report.
//! - [`sim`]: a deterministic discrete-event simulator of many Engines
//!   (`ffd sim`).

pub mod agent;
pub mod bootstrap;
pub mod capi;
pub mod config;
pub mod fabric;
pub mod info;
pub mod launch;
pub mod protocol;
pub mod runtime;
pub mod sim;
