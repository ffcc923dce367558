//! ffd's sans-IO protocol core: observation ring, mending, BMG broadcast,
//! failed set, wire codec and the `Engine` state machine; and, with the
//! `sim` feature, the deterministic simulator that drives many Engines on
//! virtual time.
//!
//! Owns: every protocol decision. Must not: read a clock, spawn a thread,
//! touch a socket or libfabric, or use `unsafe`. Time is passed in as
//! [`Time`]; effects come out as outputs that a driver (the progress thread
//! of the `ffd` library, the simulator, a test) carries out. This crate
//! depends on neither libc nor libfabric: Cargo enforces the layering.

#![forbid(unsafe_code)]

mod config;
pub mod duration;
mod engine;
mod hosts;
pub mod liveness;
pub mod overlay;
pub mod ranks;
mod ring;
pub mod wire;

pub mod agreement;

#[cfg(feature = "sim")]
pub mod sim;

#[cfg(feature = "model-bugs")]
#[doc(hidden)]
pub mod model_bugs;

pub use config::{
    BcastKind, EngineConfig, EngineConfigError, InbandMode, ParseSettingError, QuorumMode, Rank,
    RingKind, Time,
};
pub use engine::{
    AccusationNote, AgreeAbort, Cause, Confirmation, DropStats, EmitterThread, Engine,
    EngineOptions, Event, Evidence, Exclusion, FabricSaid, FailureDetail, HandleError, HealthStats,
    HeartbeatMode, HostStats, Input, LocalBeat, MessageStats, NoticeStats, ObservationStats,
    Output, Participation, PayloadStats, QuorumStats, Readings, SlotReading, Stats, SyncStats,
    TransportErrorKind, View, ViewStats, slot_digest, slot_generation, slot_value,
};
pub use hosts::Hosts;
pub use overlay::Overlay;
pub use ranks::{RankList, RankSet};
pub use ring::Ring;
pub use wire::{JobKeys, Kind, RejectReason, Sealed};
