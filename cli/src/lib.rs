//! The `ffd` command's subcommands, as a library so that tests drive the
//! launcher and the timeline without processes.
//!
//! Owns: everything a user of the `ffd` command meets and an embedder
//! never links: `ffd run` ([`launch`]), `ffd agent` ([`agent`]), `ffd
//! rendezvous` ([`rendezvous`]), `ffd sim` ([`sim`]) and `ffd info`
//! ([`info`]). Must not: make protocol decisions (the `ffd-protocol` Engine
//! does) or touch the fabric except through the `ffd` library.

#![forbid(unsafe_code)]

pub mod agent;
pub mod info;
pub mod launch;
pub mod rendezvous;
pub mod sim;
pub mod wall;
