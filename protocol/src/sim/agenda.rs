//! The simulator's agenda: what happens next on virtual time, earliest
//! first, ties in insertion order, so a run is a deterministic function of
//! its inputs. (Not to be confused with the library's host event queue.)
//!
//! Owns: the ordering of scheduled items. Must not: look inside them, or
//! let time go back.
//!
//! A monotone radix queue: virtual time never goes back, so every push is
//! at or after the time of the last pop. Entries sit in 65 buckets by the
//! highest bit in which their time differs from the last popped time;
//! popping refills bucket 0 (entries due exactly now, ordered by insertion)
//! from the lowest non-empty bucket. Pushes are O(1), each entry moves down
//! a few buckets over its life, and memory is touched sequentially: several
//! times faster than a binary heap at tens of millions of entries.
//!
//! Every bucket holds its entries in insertion order, so an entry needs no
//! sequence number (8 bytes of each of the tens of millions in flight at
//! 2^20 ranks): a push appends the newest entry, and a refill moves the
//! lowest non-empty bucket, in order, into buckets that are all empty (they
//! are lower), so each receives an ordered run before any later push.
//!
//! A bucket (but the one due now) is a list of blocks of [`BLOCK`]
//! entries rather than one vector: heaptrack put a 2^19-rank flood's agenda at 2.8 times its live
//! entries, from vectors that double (up to as much spare room as entries)
//! and from a refill holding the bucket it empties beside the buckets it
//! fills. Blocks hold at most one partly filled block per bucket of spare
//! room, and a refill hands each block back as it empties it.

use std::collections::VecDeque;

use crate::Time;

/// Entries per block (48 KiB at the simulator's 48-byte entries).
const BLOCK: usize = 1024;

/// Emptied blocks kept for reuse, at most.
const SPARE: usize = 8;

struct Entry<T> {
    at: u64,
    item: T,
}

/// Entries in insertion order, in blocks of at most [`BLOCK`]; no block is
/// empty.
struct Bucket<T> {
    blocks: Vec<Vec<Entry<T>>>,
}

impl<T> Default for Bucket<T> {
    fn default() -> Self {
        Bucket { blocks: Vec::new() }
    }
}

impl<T> Bucket<T> {
    fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    fn push(&mut self, e: Entry<T>, spare: &mut Vec<Vec<Entry<T>>>) {
        match self.blocks.last_mut() {
            Some(last) if last.len() < BLOCK => last.push(e),
            _ => {
                let mut block = spare.pop().unwrap_or_else(|| Vec::with_capacity(BLOCK));
                block.push(e);
                self.blocks.push(block);
            }
        }
    }
}

pub struct Agenda<T> {
    /// Time of bucket 0 (the last popped time).
    last: u64,
    /// Entries due at `last`, in insertion order.
    now: VecDeque<Entry<T>>,
    /// `buckets[i]`: entries whose time differs from `last` first in bit i.
    buckets: Vec<Bucket<T>>,
    /// Emptied blocks (with room for [`BLOCK`] entries), at most [`SPARE`].
    spare: Vec<Vec<Entry<T>>>,
}

impl<T> Default for Agenda<T> {
    fn default() -> Self {
        Agenda {
            last: 0,
            now: VecDeque::new(),
            buckets: (0..64).map(|_| Bucket::default()).collect(),
            spare: Vec::new(),
        }
    }
}

impl<T> Agenda<T> {
    /// Schedules `item` at `at`; times before the last popped time are
    /// treated as due now.
    pub fn push(&mut self, at: Time, item: T) {
        let at = at.as_nanos().max(self.last);
        let entry = Entry { at, item };
        match at ^ self.last {
            0 => self.now.push_back(entry),
            x => self.buckets[63 - x.leading_zeros() as usize].push(entry, &mut self.spare),
        }
    }

    pub fn pop(&mut self) -> Option<(Time, T)> {
        if self.now.is_empty() {
            let i = self.buckets.iter().position(|b| !b.is_empty())?;
            let moving = std::mem::take(&mut self.buckets[i]);
            self.last = moving
                .blocks
                .iter()
                .flat_map(|b| b.iter().map(|e| e.at))
                .min()
                .unwrap_or(self.last);
            for mut block in moving.blocks {
                for e in block.drain(..) {
                    match e.at ^ self.last {
                        0 => self.now.push_back(e),
                        x => self.buckets[63 - x.leading_zeros() as usize].push(e, &mut self.spare),
                    }
                }
                if self.spare.len() < SPARE {
                    self.spare.push(block);
                }
            }
        }
        self.now
            .pop_front()
            .map(|e| (Time::from_nanos(e.at), e.item))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn earliest_first_then_fifo() {
        let mut q = Agenda::default();
        q.push(Time::from_nanos(5), 'a');
        q.push(Time::from_nanos(1), 'b');
        q.push(Time::from_nanos(5), 'c');
        q.push(Time::from_nanos(1), 'd');
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, c)| c)).collect();
        assert_eq!(order, vec!['b', 'd', 'a', 'c']);
    }

    /// Across block boundaries: runs of several blocks' worth of entries,
    /// many at the same time, pushed between pops, come out in (time,
    /// insertion) order, and the spare blocks stay bounded.
    #[test]
    fn blocks_keep_the_order() {
        use rand::{RngCore, SeedableRng};
        let mut rng = rand_pcg::Pcg64::seed_from_u64(7);
        let mut q = Agenda::default();
        let mut reference: std::collections::BTreeSet<(u64, u64)> = Default::default();
        let (mut now, mut seq) = (0u64, 0u64);
        for round in 0..20 {
            for _ in 0..(3 * BLOCK + round * 37) {
                seq += 1;
                let at = now + rng.next_u64() % 64;
                q.push(Time::from_nanos(at), seq);
                reference.insert((at, seq));
            }
            for _ in 0..(2 * BLOCK + round * 11) {
                let expected = reference.pop_first().expect("more pushed than popped");
                let (t, item) = q.pop().expect("the agenda has it");
                assert_eq!((t.as_nanos(), item), expected);
                now = expected.0;
            }
            assert!(q.spare.len() <= SPARE);
        }
        while let Some(expected) = reference.pop_first() {
            assert_eq!(q.pop().map(|(t, i)| (t.as_nanos(), i)), Some(expected));
        }
        assert!(q.pop().is_none());
    }

    proptest! {
        /// Same order as sorting by (time, insertion), with pushes
        /// interleaved between pops at or after the current time.
        #[test]
        fn matches_a_sorted_reference(ops in proptest::collection::vec((0u64..3, 0u64..5000), 1..400)) {
            let mut q = Agenda::default();
            let mut reference: Vec<(u64, u64)> = Vec::new();
            let (mut now, mut seq) = (0u64, 0u64);
            for (op, delta) in ops {
                if op == 0 && !reference.is_empty() {
                    reference.sort_unstable();
                    let (at, s) = reference.remove(0);
                    let (t, item) = q.pop().unwrap();
                    prop_assert_eq!((t.as_nanos(), item), (at, s));
                    now = at;
                } else {
                    seq += 1;
                    let at = now + if op == 1 { 0 } else { delta };
                    q.push(Time::from_nanos(at), seq);
                    reference.push((at, seq));
                }
            }
            reference.sort_unstable();
            for (at, s) in reference {
                prop_assert_eq!(q.pop().map(|(t, i)| (t.as_nanos(), i)), Some((at, s)));
            }
            prop_assert!(q.pop().is_none());
        }
    }
}
