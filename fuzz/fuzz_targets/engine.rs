//! A job of Engines driven by libFuzzer's bytes, read as the tape of
//! choices of one fuzz episode (`harness::engine_case`): the job's size
//! and configuration, then each step (messages genuine, forged, mutated,
//! resealed, replayed, from a wrong source; timeouts with slot readings;
//! transport errors; broadcasts; leaves; crashes). Fails on a panic or on
//! any invariant violation. A tape saved by the stable run
//! (`target/fuzz-panics/*.tape`) is an input of this target.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ffd_fuzz::harness::engine_case(data));
