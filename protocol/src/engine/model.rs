//! For the model checker only (feature `model`, never in the library):
//! the hashing of an Engine's fingerprint, so that a checker exploring
//! every interleaving of a small job (`examples/model`) recognises a state
//! it has already explored.
//!
//! Owns: [`fingerprint`], the hash of a state's text with its times taken
//! relative to the checker's `now`. The text itself is written by
//! `Engine::model_fingerprint` in `mod.rs`, beside the struct, whose
//! destructuring names every field (a new one does not compile until it is
//! placed there). Must not: change the Engine.

use std::cell::RefCell;
use std::hash::{DefaultHasher, Hasher};
use std::time::Duration;

use crate::config::Time;

/// The hash of the text `write` writes (into a buffer reused per thread:
/// the checker fingerprints millions of states), with every time in it
/// taken relative to `now` and those more than `horizon` in the past alike
/// ([`relative_times`]).
pub(super) fn fingerprint(now: Time, horizon: Duration, write: impl FnOnce(&mut String)) -> u64 {
    thread_local! {
        static TEXT: RefCell<String> = const { RefCell::new(String::new()) };
    }
    TEXT.with_borrow_mut(|text| {
        text.clear();
        write(text);
        let mut hasher = DefaultHasher::new();
        relative_times(text, now, horizon, &mut hasher);
        hasher.finish()
    })
}

/// Feeds `text` to `hasher` with every `Time(t)` in it written as its
/// offset from `now` (`NEVER` as itself, one more than `horizon` in the
/// past as ancient).
fn relative_times(text: &str, now: Time, horizon: Duration, hasher: &mut DefaultHasher) {
    const OPEN: &str = "Time(";
    let now = i128::from(now.as_nanos());
    let horizon = horizon.as_nanos() as i128;
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        let (before, after) = rest.split_at(at + OPEN.len());
        hasher.write(before.as_bytes());
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let Ok(t) = after[..digits].parse::<u64>() else {
            rest = after;
            continue;
        };
        let offset = if t == Time::NEVER.as_nanos() {
            i128::MAX
        } else {
            (i128::from(t) - now).max(-horizon - 1)
        };
        hasher.write_i128(offset);
        rest = &after[digits..];
    }
    hasher.write(rest.as_bytes());
}
