//! The runtime: the pinned progress thread that drives the protocol
//! [`Engine`](crate::protocol) with real time and the fabric, and what the
//! host reads from it (lock-free state, events, stats).

pub mod events;
pub mod failed_bits;
pub mod placement;
