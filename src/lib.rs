//! ffd, the fabric failure detector.
//!
//! A library that MPI and OpenSHMEM implementations embed to learn, within
//! milliseconds and consistently, which processes of a job have died. See
//! `DESIGN.md` for the protocol; the layout of this crate:
//!
//! - [`protocol`]: the sans-IO core (ring, mending, BMG broadcast, wire
//!   codec, the [`protocol::Engine`]). No clocks, threads or libfabric.
//! - [`sim`]: a deterministic discrete-event simulator of many Engines
//!   (`ffd sim`).

pub mod protocol;
pub mod sim;
