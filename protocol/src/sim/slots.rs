//! The simulator's model of heartbeat slot memory.
//!
//! Heartbeats are not simulated write by write. Each emitter has a
//! *stream* — (observer, slot, generation, digest, since), announced by its
//! Engine as `Output::HeartbeatStream` — and the value a slot holds at time
//! t is a function of the stream writing it: `slot_value(generation,
//! digest, counter)` with the counter `1 + ⌊(t − since)/period⌋` (mod
//! 65535, never 0), frozen at the time its writer crashed or stopped, or at
//! the time a partition cut it off. An observer's `Output::ClearSlot`
//! zeroes a slot no stream writes any more. The slot is read only when the
//! observing Engine's deadline fires, exactly as the runtime reads slot
//! memory. An idle rank therefore costs `checks_per_timeout` events per
//! timeout, however short the period (with host groups, a rank that
//! watches only a same-host counter `local_checks_per_timeout`).
//!
//! Owns: stream table, slot cells, partition freezes. Must not: know about
//! the protocol beyond `slot_value`.
//!
//! Memory: one 32-byte stream per rank, plus sparse cells only where the
//! initial layout (rank r writes slot 0 of its ring successor, generation
//! 0) changed.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::{Rank, Ring, Time, slot_value};

const NONE: Rank = Rank::MAX;

#[derive(Clone, Copy, Debug)]
struct Stream {
    to: Rank,
    slot: u16,
    /// The observer's generation the values carry (low 16 bits).
    generation: u16,
    digest: u32,
    since: Time,
    /// The writer stopped writing (crash, hang, close): values freeze here.
    stopped_at: Time,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    /// Written by this emitter's current stream.
    Active(Rank),
    /// No longer written; holds its last value.
    Frozen(u64),
}

/// Slot memory of every rank.
#[derive(Debug)]
pub struct SlotModel {
    period_ns: u64,
    streams: Vec<Stream>,
    /// Cells that differ from the initial layout.
    cells: BTreeMap<(Rank, u16), Cell>,
    /// Cells whose writer is cut off by a partition: their value at the cut.
    blocked: BTreeMap<(Rank, u16), u64>,
    ring_pred: RingPred,
}

/// Who writes slot 0 of rank r initially: its ring predecessor.
#[derive(Debug)]
struct RingPred {
    ring: std::sync::Arc<Ring>,
}

impl RingPred {
    fn of(&self, r: Rank) -> Option<Rank> {
        self.ring.predecessors(r).next()
    }
}

impl SlotModel {
    /// The initial layout at time 0: every rank writes slot 0 of its ring
    /// successor, generation 0, digest 0.
    pub fn new(ring: std::sync::Arc<Ring>, period: Duration) -> SlotModel {
        let n = ring.len();
        let streams = (0..n)
            .map(|r| Stream {
                to: ring.successors(r).next().unwrap_or(NONE),
                slot: 0,
                generation: 0,
                digest: 0,
                since: Time::ZERO,
                stopped_at: Time::NEVER,
            })
            .collect();
        SlotModel {
            period_ns: period.as_nanos().max(1) as u64,
            streams,
            cells: BTreeMap::new(),
            blocked: BTreeMap::new(),
            ring_pred: RingPred { ring },
        }
    }

    /// The value emitter `e`'s stream shows at `t`.
    fn value_of(&self, e: Rank, t: Time) -> u64 {
        let s = &self.streams[e as usize];
        let t = t.min(s.stopped_at);
        if t < s.since {
            return 0;
        }
        let beats = (t.as_nanos() - s.since.as_nanos()) / self.period_ns;
        let counter = (beats % u64::from(u16::MAX)) as u16 + 1;
        slot_value(u32::from(s.generation), s.digest, counter)
    }

    /// The emitter currently writing (`observer`, `slot`), if any.
    pub fn writer_of(&self, observer: Rank, slot: u16) -> Option<Rank> {
        match self.cells.get(&(observer, slot)) {
            Some(Cell::Active(e)) => Some(*e),
            Some(Cell::Frozen(_)) => None,
            None if slot == 0 => self.ring_pred.of(observer),
            None => None,
        }
    }

    /// What `observer` reads in its slot `slot` at `t`.
    pub fn read(&self, observer: Rank, slot: u16, t: Time) -> u64 {
        if let Some(&v) = self.blocked.get(&(observer, slot)) {
            return v;
        }
        match self.cells.get(&(observer, slot)) {
            Some(Cell::Active(e)) => self.value_of(*e, t),
            Some(Cell::Frozen(v)) => *v,
            None if slot == 0 => self
                .ring_pred
                .of(observer)
                .map_or(0, |e| self.value_of(e, t)),
            None => 0,
        }
    }

    /// What [`SlotModel::read`] of `observer`'s slot 0 reads (its ring
    /// predecessor and that one's stream), read only: the simulator warms
    /// the next timer event with it.
    pub(super) fn warm(&self, observer: Rank) -> Option<Time> {
        let e = self.ring_pred.of(observer)?;
        self.streams.get(e as usize).map(|s| s.since)
    }

    /// Current target of `e`'s heartbeats.
    pub fn target(&self, e: Rank) -> Option<(Rank, u16)> {
        let s = &self.streams[e as usize];
        (s.to != NONE).then_some((s.to, s.slot))
    }

    /// The time of `e`'s next write at or after `t` (its stream's beat grid).
    pub fn next_write(&self, e: Rank, t: Time) -> Time {
        let s = &self.streams[e as usize];
        if t <= s.since {
            return s.since;
        }
        let k = (t.as_nanos() - s.since.as_nanos()).div_ceil(self.period_ns);
        Time::from_nanos(s.since.as_nanos() + k * self.period_ns)
    }

    /// `e` announced a stream at `now`: to (`observer`, `slot`) for the
    /// observer's `generation`, with `digest`. `cut(a, b)`: a partition
    /// separates a and b. Returns true if the target changed.
    pub fn set_stream(
        &mut self,
        e: Rank,
        (to, slot, generation): (Option<Rank>, u16, u32),
        digest: u32,
        now: Time,
        cut: impl Fn(Rank, Rank) -> bool,
    ) -> bool {
        let to = to.unwrap_or(NONE);
        let generation = generation as u16;
        let old = self.streams[e as usize];
        if (old.to, old.slot) == (to, slot) {
            // A new digest (or generation) from now on: the value changes
            // at once, the beat grid stays.
            let s = &mut self.streams[e as usize];
            s.digest = digest;
            s.generation = generation;
            return false;
        }
        if old.to != NONE && self.writer_of(old.to, old.slot) == Some(e) {
            let last = self.value_of(e, now);
            self.cells.insert((old.to, old.slot), Cell::Frozen(last));
        }
        self.streams[e as usize] = Stream {
            to,
            slot,
            generation,
            digest,
            since: now,
            stopped_at: old.stopped_at,
        };
        if to != NONE {
            let before = self.read(to, slot, now);
            self.cells.insert((to, slot), Cell::Active(e));
            if cut(e, to) {
                self.blocked.insert((to, slot), before);
            } else {
                self.blocked.remove(&(to, slot));
            }
        }
        true
    }

    /// `observer` writes 0 into its own slot `slot` (it reassigned the
    /// slot). A stream still writing there overwrites it at its next beat
    /// with values of its own generation, so only a cell no stream writes
    /// changes: it holds 0 from now on (a local write lands whatever the
    /// partition).
    pub fn clear(&mut self, observer: Rank, slot: u16) {
        if let Some(v) = self.blocked.get_mut(&(observer, slot)) {
            *v = 0;
        }
        if self.writer_of(observer, slot).is_none() {
            self.cells.insert((observer, slot), Cell::Frozen(0));
        }
    }

    /// `e` stops writing at `t` (crash, hang, close).
    pub fn stop(&mut self, e: Rank, t: Time) {
        let s = &mut self.streams[e as usize];
        s.stopped_at = s.stopped_at.min(t);
    }

    /// `e` writes again from `t` (resume after a hang).
    pub fn resume(&mut self, e: Rank) {
        self.streams[e as usize].stopped_at = Time::NEVER;
    }

    /// Every (observer, slot) cell currently written by some emitter and
    /// targeting `observer` (at most the implicit slot 0 and the overrides).
    pub fn writers_into(&self, observer: Rank) -> Vec<(u16, Rank)> {
        let mut v: Vec<(u16, Rank)> = self
            .cells
            .range((observer, 0)..=(observer, u16::MAX))
            .filter_map(|(&(_, s), c)| match c {
                Cell::Active(e) => Some((s, *e)),
                Cell::Frozen(_) => None,
            })
            .collect();
        if !self.cells.contains_key(&(observer, 0)) {
            if let Some(e) = self.ring_pred.of(observer) {
                v.insert(0, (0, e));
            }
        }
        v
    }

    /// A partition starts at `t`: freeze every cell whose writer is cut
    /// off from its reader. `members` is the cut-off set.
    pub fn cut(&mut self, members: &[Rank], t: Time, cut: impl Fn(Rank, Rank) -> bool) {
        let mut freeze = Vec::new();
        for &o in members {
            for (slot, e) in self.writers_into(o) {
                if cut(e, o) {
                    freeze.push((o, slot));
                }
            }
        }
        for &e in members {
            if let Some((o, slot)) = self.target(e) {
                if cut(e, o) && self.writer_of(o, slot) == Some(e) {
                    freeze.push((o, slot));
                }
            }
        }
        for (o, slot) in freeze {
            let v = self.read(o, slot, t);
            self.blocked.insert((o, slot), v);
        }
    }

    /// The partition heals: writes land again.
    pub fn heal(&mut self) {
        self.blocked.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn ms(v: u64) -> Time {
        Time::ZERO + Duration::from_millis(v)
    }

    #[test]
    fn slots_follow_streams_and_freeze() {
        let ring = Arc::new(Ring::by_rank(4));
        let mut m = SlotModel::new(ring, Duration::from_millis(10));
        let no_cut = |_: Rank, _: Rank| false;
        // Rank 1 writes slot 0 of rank 2; the value changes every period.
        assert_eq!(m.writer_of(2, 0), Some(1));
        assert_ne!(m.read(2, 0, ms(5)), m.read(2, 0, ms(15)));
        assert_eq!(m.read(2, 0, ms(11)), m.read(2, 0, ms(19)));
        // A crash freezes it.
        m.stop(1, ms(20));
        assert_eq!(m.read(2, 0, ms(25)), m.read(2, 0, ms(500)));
        // Rank 0 is asked by 2 to write its slot 1 (generation 1); rank 0's
        // old slot (1,0) freezes.
        let before = m.read(1, 0, ms(30));
        assert!(m.set_stream(0, (Some(2), 1, 1), 7, ms(30), no_cut));
        assert_eq!(m.read(1, 0, ms(90)), before);
        assert_eq!(m.writer_of(2, 1), Some(0));
        assert_eq!(m.read(2, 1, ms(30)), slot_value(1, 7, 1));
        assert_eq!(m.read(2, 1, ms(45)), slot_value(1, 7, 2));
        // A digest change alone changes the value at once.
        assert!(!m.set_stream(0, (Some(2), 1, 1), 8, ms(46), no_cut));
        assert_eq!(m.read(2, 1, ms(46)), slot_value(1, 8, 2));
        assert_eq!(m.next_write(0, ms(46)), ms(50));
        assert_eq!(m.writers_into(2), vec![(0, 1), (1, 0)]);
    }

    #[test]
    fn a_cleared_slot_reads_zero_until_a_stream_writes_it() {
        let ring = Arc::new(Ring::by_rank(4));
        let mut m = SlotModel::new(ring, Duration::from_millis(10));
        let no_cut = |_: Rank, _: Rank| false;
        // Rank 1 crashes; rank 2 mends to rank 0 (generation 1, slot 1).
        m.stop(1, ms(20));
        let left = m.read(2, 0, ms(30));
        assert_ne!(left, 0);
        // 512 generations later slot 0 comes round again: cleared first,
        // the dead writer's leftover is gone.
        m.clear(2, 0);
        assert_eq!(m.read(2, 0, ms(40)), left, "a stream still targets it");
        assert!(m.set_stream(0, (Some(2), 1, 1), 0, ms(30), no_cut));
        assert!(m.set_stream(1, (Some(3), 0, 0), 0, ms(30), no_cut));
        m.clear(2, 0);
        assert_eq!(m.read(2, 0, ms(40)), 0, "nobody writes it now");
        assert!(m.set_stream(0, (Some(2), 0, 512), 0, ms(50), no_cut));
        assert_eq!(m.read(2, 0, ms(50)), slot_value(512, 0, 1));
    }

    #[test]
    fn partitions_freeze_cut_cells_until_healed() {
        let ring = Arc::new(Ring::by_rank(4));
        let mut m = SlotModel::new(ring, Duration::from_millis(10));
        let cut = |a: Rank, b: Rank| (a == 2) != (b == 2);
        m.cut(&[2], ms(20), cut);
        let v3 = m.read(3, 0, ms(20));
        let v2 = m.read(2, 0, ms(20));
        assert_eq!(m.read(3, 0, ms(200)), v3, "2's writes to 3 do not land");
        assert_eq!(m.read(2, 0, ms(200)), v2, "1's writes to 2 do not land");
        assert_ne!(
            m.read(0, 0, ms(20)),
            m.read(0, 0, ms(200)),
            "3 → 0 unaffected"
        );
        m.heal();
        assert_ne!(m.read(3, 0, ms(300)), v3);
    }
}
