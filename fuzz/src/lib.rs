//! The cargo-fuzz targets' access to the fuzz harness of the protocol
//! core: the same code the stable run (`cargo run --release -p
//! ffd-protocol --example fuzz`) and `protocol/tests/fuzz_harness.rs`
//! use, included by path, so the three drivers never drift apart.
//!
//! Owns: nothing of its own. Must not: add generators or checks here (they
//! belong in the harness, where every driver gets them).

#![forbid(unsafe_code)]

#[path = "../../protocol/examples/fuzz/harness/mod.rs"]
pub mod harness;
