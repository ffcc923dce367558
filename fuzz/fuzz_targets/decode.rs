//! `wire::decode` on libFuzzer's bytes: flags, rank, job size index,
//! message (`harness::decode_case`). Flag bits write the job key into the
//! header and seal the message for the rank, so mutations reach the
//! parsers behind the cheap filters and the tag. Fails on a panic or when
//! an accepted message does not survive being encoded and decoded again.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ffd_fuzz::harness::decode_case(data));
