//! For the model checker only (feature `model`, never in the library): a
//! fingerprint of an Engine's protocol state, so that a checker exploring
//! every interleaving of a small job (`examples/model`) recognises a state
//! it has already explored.
//!
//! Owns: [`Engine::model_fingerprint`]. Must not: change the Engine, or
//! leave a field of it out silently (the destructuring below names every
//! field, so a new one does not compile until it is placed here).

use std::cell::RefCell;
use std::fmt::Write;
use std::hash::{DefaultHasher, Hasher};
use std::time::Duration;

use super::Engine;
use crate::config::{Rank, Time};

impl Engine {
    /// For the model checker only (feature `model`): the children this
    /// rank counts, as (accuser, round nonce, child): the votes recorded in
    /// the current round of each of its accusations and in each of its
    /// open ballots. In a tree of flood parents a rank is one rank's child
    /// per round (`docs/model-checking.md`, property `ballots`).
    pub fn model_flood_children(&self) -> Vec<(Rank, u32, Rank)> {
        self.quorum.model_flood_children(self.me)
    }

    /// A fingerprint of everything this Engine's future behaviour depends
    /// on, seen from its driver's time `now`: two Engines of the same job
    /// with the same fingerprint at their own `now` answer the same inputs
    /// at the same offsets from it alike.
    ///
    /// Left out: the counters ([`Stats`](super::Stats), which no decision
    /// reads), what every Engine of the job shares (ring, config, keys,
    /// overlay, hosts), and without host groups the same-host watch,
    /// which nothing reads then. Times are taken relative to `now`, and one more
    /// than `horizon` in the past counts as ancient (all alike): the
    /// checker passes a horizon longer than any span the Engine compares a
    /// past time with (a few timeouts), and starts its clocks later than
    /// that, so `Time::ZERO` (the start values of some fields) is ancient
    /// from the first step. So an Engine that only ticks over, its emitter
    /// beating, comes back to a state it had.
    pub fn model_fingerprint(&self, now: Time, horizon: Duration) -> u64 {
        let Engine {
            participation,
            stream_dirty,
            me,
            my_pos: _,
            ring: _,
            sealing,
            failed,
            left,
            pending_write,
            out,
            fanouts,
            stats: _,
            timers,
            encoder: _,
            config: _,
            broadcast,
            watch,
            health,
            beat,
            payloads,
            limits,
            quorum,
            views,
            same_host,
        } = self;
        thread_local! {
            static TEXT: RefCell<String> = const { RefCell::new(String::new()) };
        }
        TEXT.with_borrow_mut(|text| {
            text.clear();
            // Debug output is deterministic: the Engine keeps ordered
            // containers only.
            let _ = write!(
                text,
                "{participation:?}|{stream_dirty}|{me}|{:?}|{failed:?}|{left:?}|\
                 {pending_write:?}|{out:?}|{fanouts:?}|{timers:?}|{watch:?}|{health:?}|\
                 {beat:?}|{payloads:?}|{:?}|{limits:?}|{:?}|{views:?}",
                sealing.links,
                broadcast.pending_left,
                quorum.model_state()
            );
            // Same-host watching: without host groups nothing reads these
            // (its emitter stays `None`), and its baseline, set at start,
            // would only tell the clock.
            if same_host.hosts.is_some() {
                let _ = write!(text, "|{}", same_host.model_state());
            }
            let mut hasher = DefaultHasher::new();
            relative_times(text, now, horizon, &mut hasher);
            hasher.finish()
        })
    }
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
