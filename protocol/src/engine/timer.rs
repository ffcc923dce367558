//! The Engine's timers: one deadline per [`Timer`], in a table indexed by
//! it; the Engine's next deadline is the table's minimum.
//!
//! Owns: the timer kinds and their table. Must not: decide what a timer
//! does when it fires (each concern's code does), or read a clock (the
//! driver hands the Engine its time).

use crate::config::Time;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timer {
    /// Next heartbeat write (Write mode).
    Beat = 0,
    /// Next check of the emitter's slot.
    Check = 1,
    /// A suspect's time to prove itself alive is up.
    Suspect = 2,
    /// Forward the leaves learned in this window.
    LeaveBatch = 3,
    /// Join the next view change with the failures learned in this window.
    ViewBatch = 4,
    /// Accusations and ballots (`quorum`): new rounds, give-ups, votes.
    Quorum = 5,
    /// Next check of the same-host emitter's counter (host groups).
    LocalCheck = 6,
    /// A silent leader's host had its time to answer (host groups).
    HostCheck = 7,
    /// Held broadcast steps are due (`Broadcast::held`).
    HeldCopies = 8,
}

pub(super) const TIMERS: [Timer; 9] = [
    Timer::Beat,
    Timer::Check,
    Timer::Suspect,
    Timer::LeaveBatch,
    Timer::ViewBatch,
    Timer::Quorum,
    Timer::LocalCheck,
    Timer::HostCheck,
    Timer::HeldCopies,
];

/// Deadlines indexed by [`Timer`]; `Time::NEVER` when unset. A fired timer
/// whose deadline has moved is simply not due: no cancel API.
#[derive(Clone, Copy, Debug)]
pub(super) struct TimerTable([Time; TIMERS.len()]);

impl TimerTable {
    pub(super) const NONE: TimerTable = TimerTable([Time::NEVER; TIMERS.len()]);
}

impl TimerTable {
    pub(super) fn get(&self, t: Timer) -> Time {
        self.0[t as usize]
    }
    pub(super) fn set(&mut self, t: Timer, at: Time) {
        self.0[t as usize] = at;
    }
    pub(super) fn stop(&mut self, t: Timer) {
        self.0[t as usize] = Time::NEVER;
    }
    pub(super) fn next(&self) -> Time {
        self.0.iter().copied().min().unwrap_or(Time::NEVER)
    }
}
