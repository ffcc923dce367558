//! Where every choice of a fuzz episode comes from: a seeded PRNG whose
//! bytes are recorded as they are handed out, or such a recording (a
//! "tape", also what a libFuzzer target is given) read back.
//!
//! Owns: drawing numbers, picks and weighted choices from either source,
//! identically, so that an episode run from a seed and the same episode
//! run from its tape make the same choices. Must not: know what the
//! choices mean (the generators and the episode do).

use rand::{RngCore, SeedableRng};
use rand_pcg::Pcg64Mcg;

/// The decision source of one episode.
pub struct Dice {
    /// `Some`: seeded mode, every byte drawn is appended to `tape`.
    rng: Option<Pcg64Mcg>,
    /// Seeded mode: the bytes handed out so far. Tape mode: the bytes to
    /// hand out, from `at`.
    tape: Vec<u8>,
    at: usize,
    /// Tape mode: a draw went past the end (it read zeros).
    exhausted: bool,
}

impl Dice {
    /// A PRNG seeded with `seed`, recording what it hands out.
    pub fn seeded(seed: u64) -> Dice {
        Dice {
            rng: Some(Pcg64Mcg::seed_from_u64(seed)),
            tape: Vec::new(),
            at: 0,
            exhausted: false,
        }
    }

    /// Reads `tape` back (a recording, or a fuzzer's input); past its end
    /// every draw is 0 and [`Dice::exhausted`] turns true.
    pub fn from_tape(tape: &[u8]) -> Dice {
        Dice {
            rng: None,
            tape: tape.to_vec(),
            at: 0,
            exhausted: false,
        }
    }

    /// A tape was read past its end: the episode stops at its next step.
    pub fn exhausted(&self) -> bool {
        self.exhausted
    }

    /// The bytes drawn so far: replaying them with [`Dice::from_tape`]
    /// makes the same choices.
    pub fn recorded(&self) -> &[u8] {
        match self.rng {
            Some(_) => &self.tape,
            None => &self.tape[..self.at.min(self.tape.len())],
        }
    }

    fn fill(&mut self, out: &mut [u8]) {
        match &mut self.rng {
            Some(rng) => {
                rng.fill_bytes(out);
                self.tape.extend_from_slice(out);
            }
            None => {
                for b in out {
                    *b = match self.tape.get(self.at) {
                        Some(&v) => {
                            self.at += 1;
                            v
                        }
                        None => {
                            self.exhausted = true;
                            0
                        }
                    };
                }
            }
        }
    }

    pub fn u8(&mut self) -> u8 {
        let mut b = [0u8; 1];
        self.fill(&mut b);
        b[0]
    }

    pub fn u16(&mut self) -> u16 {
        let mut b = [0u8; 2];
        self.fill(&mut b);
        u16::from_le_bytes(b)
    }

    pub fn u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.fill(&mut b);
        u32::from_le_bytes(b)
    }

    pub fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.fill(&mut b);
        u64::from_le_bytes(b)
    }

    /// A number in `0..n` (0 when `n` ≤ 1), drawn from as few bytes as
    /// `n` needs: a short tape still makes many choices.
    pub fn below(&mut self, n: u64) -> u64 {
        match n {
            0 | 1 => 0,
            2..=0x100 => u64::from(self.u8()) % n,
            0x101..=0x1_0000 => u64::from(self.u16()) % n,
            0x1_0001..=0x1_0000_0000 => u64::from(self.u32()) % n,
            _ => self.u64() % n,
        }
    }

    /// `below` for `u32` bounds (ranks, lengths).
    pub fn below32(&mut self, n: u32) -> u32 {
        self.below(u64::from(n)) as u32
    }

    /// `below` for lengths and indices.
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items` (which must not be empty).
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.index(items.len())]
    }

    /// An index into `weights`, each chosen in proportion to its weight.
    pub fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let mut x = self.below(total);
        for (i, &w) in weights.iter().enumerate() {
            if x < u64::from(w) {
                return i;
            }
            x -= u64::from(w);
        }
        weights.len().saturating_sub(1)
    }

    /// `len` drawn bytes; past 64 only the first 64 are drawn and the rest
    /// repeat them, so a large payload costs a tape little.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut head = vec![0u8; len.min(64)];
        self.fill(&mut head);
        if len <= head.len() {
            return head;
        }
        head.iter().copied().cycle().take(len).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_replays_the_same_choices() {
        let mut a = Dice::seeded(42);
        let drawn: Vec<u64> = (0..50)
            .map(|i| match i % 4 {
                0 => a.below(7),
                1 => a.below(100_000),
                2 => a.u64(),
                _ => a.weighted(&[1, 0, 5]) as u64,
            })
            .collect();
        let mut b = Dice::from_tape(a.recorded());
        let again: Vec<u64> = (0..50)
            .map(|i| match i % 4 {
                0 => b.below(7),
                1 => b.below(100_000),
                2 => b.u64(),
                _ => b.weighted(&[1, 0, 5]) as u64,
            })
            .collect();
        assert_eq!(drawn, again);
        assert!(!b.exhausted());
        b.u8();
        assert!(b.exhausted());
    }
}
