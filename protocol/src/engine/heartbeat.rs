//! This rank as an emitter: its heartbeats to its observer, and the
//! `ObserveMe` requests that say where they go.
//!
//! Owns: the beat counter and target ([`Beat`]), the per-period heartbeat
//! write (or, in modelled mode, the owed `HeartbeatStream`) and the
//! acceptance rule for `ObserveMe`. Must not: allocate on the per-period
//! path (the write is parked in `pending_write`, not queued), or judge the
//! emitter this rank watches (that is `observation`).

use super::{Engine, HeartbeatMode, Timer, slot_value};
use crate::config::{Rank, Time};

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

impl Engine {
    /// Beats now: in write mode, parks the next `WriteHeartbeat` (polled
    /// first, no allocation) and schedules the next beat one period away;
    /// in modelled mode, owes a `HeartbeatStream`.
    pub(super) fn write_beat_now(&mut self, now: Time) {
        match self.beat.mode {
            HeartbeatMode::Write => {
                if let Some(o) = self.beat.observer {
                    self.beat.counter = self.beat.counter.wrapping_add(1).max(1);
                    self.pending_write = Some((
                        o,
                        self.beat.slot,
                        slot_value(self.beat.generation, self.my_digest32(), self.beat.counter),
                    ));
                    self.stats.observation.heartbeats_written += 1;
                    self.timers.set(Timer::Beat, now + self.config.period);
                }
            }
            HeartbeatMode::Modelled => self.stream_dirty = true,
        }
    }

    /// A rank asks us to heartbeat into its slot. Accepted from our current
    /// observer with a generation at least as new, or from a rank farther
    /// along the ring than our current observer (which it must have found
    /// gone: observers only move outward, there is no rejoin), or when we
    /// have no live observer. A request from a rank *nearer* than our
    /// current observer is stale: that rank was skipped by the mending that
    /// gave us the current observer.
    pub(super) fn on_observe_me(&mut self, now: Time, sender: Rank, generation: u32, slot: u16) {
        if self.left.contains(sender) {
            self.stats.observation.observe_me_stale += 1;
            return;
        }
        let accept = match self.beat.observer {
            None => true,
            Some(o) if self.is_gone(o) => true,
            Some(o) if o == sender => generation >= self.beat.generation,
            Some(o) => self
                .same_host
                .farther_observer(self.me, &self.ring, sender, o),
        };
        if !accept {
            self.stats.observation.observe_me_stale += 1;
            return;
        }
        self.stats.observation.observe_me_accepted += 1;
        self.beat.observer = Some(sender);
        self.beat.generation = generation;
        self.beat.slot = slot;
        self.write_beat_now(now);
    }
}
