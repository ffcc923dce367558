//! The observation ring: the order in which ranks sit on the ring, the same
//! on every rank from the same inputs (`topology`, `shuffle`, `rank`).
//!
//! Owns: the position ↔ rank maps. Must not: depend on anything but its
//! inputs (no clock, no global RNG), or be copied per Engine — the maps are
//! 8 bytes per rank, so drivers share one `Arc<Ring>` among all Engines of a
//! process (the simulator runs a million Engines on one ring).

use std::collections::BTreeMap;

use rand::{RngCore, SeedableRng};
use rand_pcg::Pcg64;

use super::config::{Rank, RingKind};

/// Ring order: position `p` holds rank `order[p]`; rank `r` sits at
/// `position[r]`. The emitter of a rank is its predecessor (position − 1),
/// its observer its successor (position + 1), skipping the departed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ring {
    order: Box<[Rank]>,
    position: Box<[u32]>,
}

/// A uniformly distributed value in `0..bound` (Lemire's method with
/// rejection): stable across `rand` versions, unlike `random_range`.
fn bounded(rng: &mut Pcg64, bound: u32) -> u32 {
    debug_assert!(bound > 0);
    let threshold = bound.wrapping_neg() % bound;
    loop {
        let m = u64::from(rng.next_u32()) * u64::from(bound);
        if (m as u32) >= threshold {
            return (m >> 32) as u32;
        }
    }
}

impl Ring {
    fn from_order(order: Vec<Rank>) -> Ring {
        let mut position = vec![0u32; order.len()].into_boxed_slice();
        for (p, &r) in order.iter().enumerate() {
            position[r as usize] = p as u32;
        }
        Ring {
            order: order.into_boxed_slice(),
            position,
        }
    }

    /// Builds the ring of `hosts.len()` ranks; `hosts[r]` is rank `r`'s host
    /// identity (only equality and order of host ids matter).
    pub fn new<H: Ord>(kind: RingKind, hosts: &[H], seed: u64) -> Ring {
        let n = hosts.len() as u32;
        match kind {
            RingKind::Rank => Ring::by_rank(n),
            RingKind::Shuffle => Ring::shuffled(n, seed),
            RingKind::Topology => Ring::topology(hosts),
        }
    }

    /// Ranks in rank order.
    pub fn by_rank(n: u32) -> Ring {
        Ring::from_order((0..n).collect())
    }

    /// A seeded Fisher–Yates permutation (PCG64).
    pub fn shuffled(n: u32, seed: u64) -> Ring {
        let mut order: Vec<Rank> = (0..n).collect();
        let mut rng = Pcg64::seed_from_u64(seed);
        for i in (1..order.len()).rev() {
            let j = bounded(&mut rng, i as u32 + 1) as usize;
            order.swap(i, j);
        }
        Ring::from_order(order)
    }

    /// Hosts interleaved round-robin: the first rank of every host, then the
    /// second of every host, and so on. Hosts with more ranks come first in
    /// each round (ties by their lowest rank), so with equal counts — the
    /// usual case — no two ring neighbours share a host (given ≥ 2 hosts),
    /// and a whole-host failure leaves every victim observed by a survivor:
    /// all are detected within the same timeout.
    pub fn topology<H: Ord>(hosts: &[H]) -> Ring {
        let mut groups: BTreeMap<&H, Vec<Rank>> = BTreeMap::new();
        for (r, h) in hosts.iter().enumerate() {
            groups.entry(h).or_default().push(r as Rank);
        }
        let mut groups: Vec<Vec<Rank>> = groups.into_values().collect();
        groups.sort_by(|a, b| b.len().cmp(&a.len()).then(a[0].cmp(&b[0])));
        let rounds = groups.first().map_or(0, Vec::len);
        let mut order = Vec::with_capacity(hosts.len());
        for round in 0..rounds {
            for g in &groups {
                if let Some(&r) = g.get(round) {
                    order.push(r);
                }
            }
        }
        Ring::from_order(order)
    }

    /// Number of ranks on the ring (the job size N).
    pub fn len(&self) -> u32 {
        self.order.len() as u32
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The rank at position `pos` (taken modulo N).
    pub fn rank_at(&self, pos: u32) -> Rank {
        self.order[(pos % self.len()) as usize]
    }

    /// The position of `rank`. Panics if `rank ≥ N` (callers validate ranks
    /// from the wire first).
    pub fn position_of(&self, rank: Rank) -> u32 {
        self.position[rank as usize]
    }

    /// Steps forward along the ring from `from` to `to` (0 if equal).
    pub fn distance(&self, from: Rank, to: Rank) -> u32 {
        let n = self.len();
        let (a, b) = (self.position_of(from), self.position_of(to));
        (b + n - a) % n
    }

    /// The ranks before `rank` on the ring, nearest first (N − 1 of them).
    pub fn predecessors(&self, rank: Rank) -> impl Iterator<Item = Rank> + '_ {
        let n = self.len();
        let p = self.position_of(rank);
        (1..n).map(move |k| self.rank_at(p + n - k))
    }

    /// The ranks after `rank` on the ring, nearest first (N − 1 of them).
    pub fn successors(&self, rank: Rank) -> impl Iterator<Item = Rank> + '_ {
        let p = self.position_of(rank);
        (1..self.len()).map(move |k| self.rank_at(p + k))
    }

    /// The order, position by position.
    pub fn order(&self) -> &[Rank] {
        &self.order
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn is_permutation(ring: &Ring) -> bool {
        let mut seen = vec![false; ring.len() as usize];
        for &r in ring.order() {
            if seen[r as usize] {
                return false;
            }
            seen[r as usize] = true;
        }
        seen.iter().all(|&s| s)
            && ring
                .order()
                .iter()
                .enumerate()
                .all(|(p, &r)| ring.position_of(r) == p as u32)
    }

    #[test]
    fn rank_ring_neighbours_and_wrap() {
        let ring = Ring::by_rank(5);
        assert_eq!(ring.predecessors(0).collect::<Vec<_>>(), vec![4, 3, 2, 1]);
        assert_eq!(ring.successors(3).collect::<Vec<_>>(), vec![4, 0, 1, 2]);
        assert_eq!(ring.distance(4, 1), 2);
        assert_eq!(ring.distance(1, 1), 0);
        assert_eq!(Ring::by_rank(1).predecessors(0).count(), 0);
    }

    #[test]
    fn topology_interleaves_block_placed_hosts() {
        // 4 hosts × 3 ranks, block placement: host = rank / 3.
        let hosts: Vec<u32> = (0..12).map(|r| r / 3).collect();
        let ring = Ring::topology(&hosts);
        assert_eq!(ring.order(), &[0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11]);
        // Host names work as identities too.
        let names: Vec<String> = (0..12).map(|r| format!("node{}", r / 3)).collect();
        assert_eq!(Ring::new(RingKind::Topology, &names, 0), ring);
    }

    #[test]
    fn shuffle_is_seeded() {
        let a = Ring::shuffled(1000, 7);
        assert_eq!(a, Ring::shuffled(1000, 7));
        assert_ne!(a, Ring::shuffled(1000, 8));
        assert_ne!(a, Ring::by_rank(1000));
        assert!(is_permutation(&a));
    }

    proptest! {
        #[test]
        fn every_order_is_a_permutation(n in 1u32..400, hosts in 1u32..20, seed in any::<u64>()) {
            let ids: Vec<u32> = (0..n).map(|r| r % hosts).collect();
            for kind in [RingKind::Rank, RingKind::Shuffle, RingKind::Topology] {
                let ring = Ring::new(kind, &ids, seed);
                prop_assert_eq!(ring.len(), n);
                prop_assert!(is_permutation(&ring));
            }
        }

        #[test]
        fn topology_separates_neighbours_on_equal_hosts(h in 2u32..30, per in 1u32..30, block in any::<bool>()) {
            let n = h * per;
            let ids: Vec<u32> = (0..n).map(|r| if block { r / per } else { r % h }).collect();
            let ring = Ring::topology(&ids);
            for p in 0..n {
                let (a, b) = (ring.rank_at(p), ring.rank_at(p + 1));
                prop_assert_ne!(ids[a as usize], ids[b as usize], "positions {} and {}", p, p + 1);
            }
        }
    }
}
