//! The sans-IO protocol core: observation ring, mending, BMG broadcast,
//! failed set, wire codec and the `Engine` state machine.
//!
//! Owns: every protocol decision. Must not: read a clock, spawn a thread,
//! touch a socket or libfabric, or use `unsafe`. Time is passed in as
//! [`Time`]; effects come out as outputs that a driver (the progress thread,
//! the simulator, a test) carries out.

#![forbid(unsafe_code)]

mod config;

pub use config::{BcastKind, EngineConfig, InbandMode, ParseSettingError, Rank, RingKind, Time};
