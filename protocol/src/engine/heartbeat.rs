//! This rank as an emitter: its heartbeats to its observer, and the
//! `ObserveMe` requests that say where they go.
//!
//! Owns: the beat counter and target ([`Beat`]), the per-period heartbeat
//! write (or, in modelled mode, the owed `HeartbeatStream`) and the
//! acceptance rule for `ObserveMe`, as methods of `Beat` that return what
//! the Engine is to do (its glue, `Engine::write_beat_now` and
//! `Engine::on_observe_me`, is in `mod.rs`). Must not: allocate on the
//! per-period path (the write is parked in `pending_write`, not queued), or
//! judge the emitter this rank watches (that is `observation`).

use super::{HeartbeatMode, slot_value};
use crate::config::Rank;

/// This rank's heartbeats to its observer.
#[derive(Clone, Debug)]
pub(super) struct Beat {
    /// How heartbeats leave the Engine (fixed at start).
    pub(super) mode: HeartbeatMode,
    pub(super) observer: Option<Rank>,
    /// The observer's generation, from its `ObserveMe`.
    pub(super) generation: u32,
    pub(super) slot: u16,
    /// The beat counter of [`slot_value`]: 1..=65535, then 1 again.
    pub(super) counter: u16,
}

impl Beat {
    /// This rank's heartbeats to `observer` (if any), written each period,
    /// into slot 0 of generation 0 until the observer names its own.
    pub(super) fn new(observer: Option<Rank>) -> Beat {
        Beat {
            mode: HeartbeatMode::Write,
            observer,
            generation: 0,
            slot: 0,
            counter: 0,
        }
    }
}

/// What a beat asks of the Engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BeatOut {
    /// Write mode: park this `WriteHeartbeat` (observer, slot, value),
    /// count it, and beat again one period on.
    Write(Rank, u16, u64),
    /// Modelled mode: a `HeartbeatStream` is owed.
    Stream,
    /// Write mode without an observer: nothing.
    Nothing,
}

impl Beat {
    /// Beats now, with `digest`, the 32-bit fold of this rank's digest.
    pub(super) fn beat(&mut self, digest: u32) -> BeatOut {
        match self.mode {
            HeartbeatMode::Write => match self.observer {
                Some(o) => {
                    self.counter = self.counter.wrapping_add(1).max(1);
                    BeatOut::Write(
                        o,
                        self.slot,
                        slot_value(self.generation, digest, self.counter),
                    )
                }
                None => BeatOut::Nothing,
            },
            HeartbeatMode::Modelled => BeatOut::Stream,
        }
    }

    /// A rank asks us to heartbeat into its slot: taken (true) from our
    /// current observer with a generation at least as new, or from a rank
    /// farther along the ring than our current observer (`farther`: which
    /// it must have found gone; observers only move outward, there is no
    /// rejoin), or when we have no live observer (`observer_gone`). A
    /// request from a rank *nearer* than our current observer is stale:
    /// that rank was skipped by the mending that gave us the current
    /// observer.
    pub(super) fn observe_me(
        &mut self,
        sender: Rank,
        generation: u32,
        slot: u16,
        observer_gone: bool,
        farther: bool,
    ) -> bool {
        let accept = match self.observer {
            None => true,
            Some(_) if observer_gone => true,
            Some(o) if o == sender => generation >= self.generation,
            Some(_) => farther,
        };
        if accept {
            self.observer = Some(sender);
            self.generation = generation;
            self.slot = slot;
        }
        accept
    }
}
