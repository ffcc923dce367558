//! The broadcast overlay over ring positions: BMG (p ± 2^k mod N) or the
//! chord-like variant (p + 2^k only), for k = 0..⌈log2 N⌉−1, and the send
//! order of a broadcast: the links of the binomial spanning tree rooted at
//! the originator first, then the redundant links (paper 000 §4.6,
//! Algorithm 1; paper 003 §4.2 and Appendix B for chord).
//!
//! Owns: which positions a position sends to, and in which order. Must
//! not: know about ranks, failures or messages (the Engine skips departed
//! ranks when it sends). Computes into a fixed stack buffer: no allocation.

use super::config::BcastKind;

/// At most 2 links per level and 32 levels.
pub const MAX_LINKS: usize = 64;

/// Send-order buffer filled by [`Overlay::send_order`].
pub type Links = [u32; MAX_LINKS];

/// The overlay of a ring of `n` positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overlay {
    kind: BcastKind,
    n: u32,
}

/// ⌈log2 n⌉ (0 for n ≤ 1): the number of link levels.
pub fn levels(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        32 - (n - 1).leading_zeros()
    }
}

impl Overlay {
    pub fn new(kind: BcastKind, n: u32) -> Self {
        Overlay { kind, n }
    }

    pub fn kind(&self) -> BcastKind {
        self.kind
    }

    /// The positions `pos` sends a broadcast rooted at `root` to, in send
    /// order: first its children in the binomial spanning tree rooted at
    /// `root` (relative position q sends to q + 2^k for 2^k > q, largest
    /// subtree first), then every other overlay link (+2^k, and for BMG
    /// −2^k, from the longest down). Each position appears once; `pos`
    /// itself never does. Returns how many entries of `out` are filled.
    pub fn send_order(&self, pos: u32, root: u32, out: &mut Links) -> usize {
        let n = self.n;
        if n <= 1 {
            return 0;
        }
        let q = (pos + n - root % n) % n;
        let levels = levels(n);
        let mut len = 0usize;
        let mut push = |target: u32, out: &mut Links| {
            if target != pos && !out[..len].contains(&target) {
                out[len] = target;
                len += 1;
            }
        };
        // Tree children: q + 2^k for 2^k > q and q + 2^k < n.
        for k in (0..levels).rev() {
            let d = 1u64 << k;
            if d > u64::from(q) && u64::from(q) + d < u64::from(n) {
                push(((u64::from(pos) + d) % u64::from(n)) as u32, out);
            }
        }
        // Redundant links.
        for k in (0..levels).rev() {
            let d = (1u64 << k) % u64::from(n);
            push(((u64::from(pos) + d) % u64::from(n)) as u32, out);
            if self.kind == BcastKind::Bmg {
                push(
                    ((u64::from(pos) + u64::from(n) - d) % u64::from(n)) as u32,
                    out,
                );
            }
        }
        len
    }

    /// The set of positions `pos` links to, ascending (for tests and tools).
    pub fn neighbours(&self, pos: u32) -> Vec<u32> {
        let mut buf = [0u32; MAX_LINKS];
        let len = self.send_order(pos, pos, &mut buf);
        let mut v = buf[..len].to_vec();
        v.sort_unstable();
        v
    }

    /// The number of tree children at the head of `send_order(pos, root)`.
    pub fn tree_children(&self, pos: u32, root: u32) -> usize {
        let n = self.n;
        if n <= 1 {
            return 0;
        }
        let q = u64::from((pos + n - root % n) % n);
        (0..levels(n))
            .filter(|&k| (1u64 << k) > q && q + (1u64 << k) < u64::from(n))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn levels_is_ceil_log2() {
        assert_eq!(levels(1), 0);
        assert_eq!(levels(2), 1);
        assert_eq!(levels(3), 2);
        assert_eq!(levels(4), 2);
        assert_eq!(levels(5), 3);
        assert_eq!(levels(1 << 20), 20);
        assert_eq!(levels((1 << 20) + 1), 21);
    }

    #[test]
    fn bmg_of_twelve_matches_the_paper() {
        // Paper 000 Fig. 4/5: 12 nodes, broadcast from 0. Links ±1, ±2, ±4, ±8;
        // the binomial tree children of 0 are 8, 4, 2, 1 (largest subtree
        // first), then the redundant links −2 = 10 and −1 = 11.
        let o = Overlay::new(BcastKind::Bmg, 12);
        assert_eq!(o.neighbours(0), vec![1, 2, 4, 8, 10, 11]);
        let mut buf = [0; MAX_LINKS];
        let len = o.send_order(0, 0, &mut buf);
        assert_eq!(&buf[..len], &[8, 4, 2, 1, 10, 11]);
        assert_eq!(o.tree_children(0, 0), 4);
        // Relative position 3 has children 3 + 4 and 3 + 8; 4 and 5 are
        // leaves (4 + 8 and 5 + 8 are past the end of a 12-ring).
        assert_eq!(o.tree_children(3, 0), 2);
        assert_eq!(o.tree_children(4, 0), 0);
        assert_eq!(o.tree_children(5, 0), 0);
        // Relative position 2 has children 2 + 8 and 2 + 4.
        assert_eq!(o.tree_children(2, 0), 2);
        let len = o.send_order(2, 0, &mut buf);
        assert_eq!(&buf[..2], &[10, 6]);
        assert_eq!(len, o.neighbours(2).len());
        // Rooted elsewhere, the same position sends in another order.
        let len = o.send_order(2, 1, &mut buf);
        assert_eq!(o.tree_children(2, 1), 3);
        assert_eq!(&buf[..3], &[10, 6, 4]);
        assert_eq!(len, 6);
    }

    #[test]
    fn chord_is_forward_only() {
        let o = Overlay::new(BcastKind::Chord, 12);
        assert_eq!(o.neighbours(5), vec![1, 6, 7, 9]);
        let o = Overlay::new(BcastKind::Chord, 2);
        assert_eq!(o.neighbours(1), vec![0]);
        assert_eq!(
            Overlay::new(BcastKind::Bmg, 1).neighbours(0),
            Vec::<u32>::new()
        );
    }

    /// Positions reached from `root` along tree links only.
    fn tree_reach(o: &Overlay, n: u32, root: u32) -> (Vec<bool>, u32) {
        let mut reached = vec![false; n as usize];
        reached[root as usize] = true;
        let mut frontier = vec![root];
        let mut depth = 0;
        let mut buf = [0; MAX_LINKS];
        while !frontier.is_empty() {
            let mut next = Vec::new();
            for &p in &frontier {
                let len = o.send_order(p, root, &mut buf);
                let tree = o.tree_children(p, root);
                assert!(tree <= len);
                for &c in &buf[..tree] {
                    assert!(!reached[c as usize], "tree reaches {c} twice");
                    reached[c as usize] = true;
                    next.push(c);
                }
            }
            if !next.is_empty() {
                depth += 1;
            }
            frontier = next;
        }
        (reached, depth)
    }

    proptest! {
        #[test]
        fn tree_spans_the_ring_within_log2_depth(n in 1u32..600, root_seed in any::<u32>(), chord in any::<bool>()) {
            let kind = if chord { BcastKind::Chord } else { BcastKind::Bmg };
            let o = Overlay::new(kind, n);
            let root = root_seed % n;
            let (reached, depth) = tree_reach(&o, n, root);
            prop_assert!(reached.iter().all(|&r| r));
            prop_assert!(depth <= levels(n));
        }

        #[test]
        fn neighbour_sets(n in 2u32..3000, pos_seed in any::<u32>()) {
            let pos = pos_seed % n;
            let bmg = Overlay::new(BcastKind::Bmg, n).neighbours(pos);
            let chord = Overlay::new(BcastKind::Chord, n).neighbours(pos);
            // Exactly the positions p ± 2^k, without p.
            let mut expect: Vec<u32> = (0..levels(n)).flat_map(|k| {
                let d = (1u64 << k) % u64::from(n);
                [((u64::from(pos) + d) % u64::from(n)) as u32, ((u64::from(pos) + u64::from(n) - d) % u64::from(n)) as u32]
            }).filter(|&t| t != pos).collect();
            expect.sort_unstable();
            expect.dedup();
            prop_assert_eq!(&bmg, &expect);
            prop_assert!(chord.iter().all(|c| bmg.contains(c)));
            prop_assert!(chord.len() <= levels(n) as usize);
            // BMG links are symmetric.
            for &t in &bmg {
                prop_assert!(Overlay::new(BcastKind::Bmg, n).neighbours(t).contains(&pos));
            }
        }

        #[test]
        fn send_order_is_a_permutation_of_the_neighbours(n in 2u32..3000, pos_seed in any::<u32>(), root_seed in any::<u32>()) {
            let o = Overlay::new(BcastKind::Bmg, n);
            let (pos, root) = (pos_seed % n, root_seed % n);
            let mut buf = [0; MAX_LINKS];
            let len = o.send_order(pos, root, &mut buf);
            let mut got = buf[..len].to_vec();
            got.sort_unstable();
            prop_assert_eq!(got, o.neighbours(pos));
        }
    }
}
