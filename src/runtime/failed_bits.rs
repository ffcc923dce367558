//! The lock-free mirror of the failed set that the embedder's threads read.
//!
//! Owns: one bit per rank and the epoch. Must not: be written by anyone but
//! the progress thread. Readers never take a lock; a reader that sees epoch
//! `e` sees at least `e` bits set (bits are published before the epoch).

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::protocol::Rank;

#[derive(Debug)]
pub struct FailedBits {
    words: Box<[AtomicU64]>,
    ranks: u32,
    epoch: CachePadded<AtomicU64>,
}

impl FailedBits {
    pub fn new(ranks: u32) -> Self {
        let words = (ranks as usize).div_ceil(64);
        FailedBits {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            ranks,
            epoch: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// Marks `rank` failed; returns false if it already was (or is out of
    /// range). Progress thread only.
    pub fn insert(&self, rank: Rank) -> bool {
        if rank >= self.ranks {
            return false;
        }
        let bit = 1u64 << (rank % 64);
        let old = self.words[(rank / 64) as usize].fetch_or(bit, Ordering::Release);
        if old & bit != 0 {
            return false;
        }
        self.epoch.fetch_add(1, Ordering::Release);
        true
    }

    /// Whether `rank` is known failed. Ranks out of range are reported failed
    /// by [`is_alive`](Self::is_alive)'s caller's choice; here they are not members.
    pub fn contains(&self, rank: Rank) -> bool {
        rank < self.ranks
            && self.words[(rank / 64) as usize].load(Ordering::Acquire) & (1u64 << (rank % 64)) != 0
    }

    /// Bits `64 i .. 64 i + 63` (0 past the end).
    pub fn word(&self, i: usize) -> u64 {
        self.words.get(i).map_or(0, |w| w.load(Ordering::Acquire))
    }

    /// Number of failures known (monotonic).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The failed ranks in increasing order, as of some instant during the call.
    pub fn ranks(&self) -> Vec<Rank> {
        let mut out = Vec::new();
        for (w, word) in self.words.iter().enumerate() {
            let mut bits = word.load(Ordering::Acquire);
            while bits != 0 {
                let b = bits.trailing_zeros();
                out.push(w as u32 * 64 + b);
                bits &= bits - 1;
            }
        }
        out
    }

    pub fn size(&self) -> u32 {
        self.ranks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_contains_epoch_and_listing_agree() {
        let f = FailedBits::new(130);
        assert!(f.insert(0) && f.insert(64) && f.insert(129));
        assert!(!f.insert(64), "second insert is not a new failure");
        assert!(!f.insert(130), "out of range");
        assert_eq!(f.epoch(), 3);
        assert!(f.contains(129) && !f.contains(128) && !f.contains(1000));
        assert_eq!(f.ranks(), vec![0, 64, 129]);
    }

    #[test]
    fn a_reader_never_sees_fewer_bits_than_the_epoch_says() {
        let f = std::sync::Arc::new(FailedBits::new(4096));
        let writer = {
            let f = std::sync::Arc::clone(&f);
            std::thread::spawn(move || {
                for r in (0..4096).rev() {
                    f.insert(r);
                }
            })
        };
        for _ in 0..2000 {
            let e = f.epoch();
            assert!(f.ranks().len() as u64 >= e);
        }
        writer.join().unwrap();
        assert_eq!(f.epoch(), 4096);
    }
}
