//! Host groups: which ranks share a host, each host's leader, and the
//! ring of hosts the fabric heartbeats run on (`docs/design.md` §4.12 "Hosts").
//!
//! Owns: the rank → host map, each host's ranks in rank order, and the
//! order of hosts on the fabric ring, the same on every rank from the same
//! inputs; the rules that pick a host's leader (its lowest live rank), a
//! rank's same-host emitter and observer (its nearest live same-host
//! predecessor and successor, by rank, wrapping) and a leader's fabric
//! emitter and observer (the leaders of the nearest hosts before and after
//! its own on the host ring that still have a live rank). Must not: hold
//! the failed set (callers pass `gone`), or be copied per Engine: drivers
//! share one `Arc<Hosts>` (4 bytes per rank twice, plus the host ring).

use std::collections::BTreeMap;

use super::config::{Rank, RingKind};
use super::ring::Ring;

/// The host groups of a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hosts {
    /// `host_of[r]`: rank r's host index (hosts numbered by their lowest rank).
    host_of: Box<[u32]>,
    /// `first[h]..first[h + 1]` indexes `members`: host h's ranks, ascending.
    first: Box<[u32]>,
    members: Box<[Rank]>,
    /// The fabric ring: positions hold host indices.
    ring: Ring,
}

impl Hosts {
    /// The host groups of `ids.len()` ranks, `ids[r]` rank r's host
    /// identity (only equality matters). Hosts are numbered by their lowest
    /// rank. The fabric ring of hosts follows `kind`: `shuffle` is a
    /// seeded permutation of hosts; `topology` and `rank` put hosts in the
    /// order of their lowest rank (a ring of hosts has no same-host
    /// neighbours to keep apart).
    pub fn new<H: Ord>(kind: RingKind, ids: &[H], seed: u64) -> Hosts {
        let mut index: BTreeMap<&H, u32> = BTreeMap::new();
        let host_of: Vec<u32> = ids
            .iter()
            .map(|id| {
                let next = index.len() as u32;
                *index.entry(id).or_insert(next)
            })
            .collect();
        let count = index.len();
        let mut sizes = vec![0u32; count + 1];
        for &h in &host_of {
            sizes[h as usize + 1] += 1;
        }
        for h in 0..count {
            sizes[h + 1] += sizes[h];
        }
        let first = sizes;
        let mut fill = first.clone();
        let mut members = vec![0; host_of.len()];
        for (r, &h) in host_of.iter().enumerate() {
            members[fill[h as usize] as usize] = r as Rank;
            fill[h as usize] += 1;
        }
        let ring = match kind {
            RingKind::Shuffle => Ring::shuffled(count as u32, seed),
            RingKind::Topology | RingKind::Rank => Ring::by_rank(count as u32),
        };
        Hosts {
            host_of: host_of.into_boxed_slice(),
            first: first.into_boxed_slice(),
            members: members.into_boxed_slice(),
            ring,
        }
    }

    /// Block placement, as the simulator places ranks: rank r on host
    /// ⌊r · hosts / ranks⌋.
    pub fn blocks(kind: RingKind, ranks: u32, hosts: u32, seed: u64) -> Hosts {
        let hosts = u64::from(hosts.clamp(1, ranks.max(1)));
        let ids: Vec<u32> = (0..u64::from(ranks))
            .map(|r| (r * hosts / u64::from(ranks.max(1))) as u32)
            .collect();
        Hosts::new(kind, &ids, seed)
    }

    /// Number of ranks.
    pub fn ranks(&self) -> u32 {
        self.host_of.len() as u32
    }

    /// Number of hosts.
    pub fn count(&self) -> u32 {
        self.ring.len()
    }

    /// Rank `rank`'s host. Panics if `rank ≥ N` (callers validate ranks).
    pub fn host_of(&self, rank: Rank) -> u32 {
        self.host_of[rank as usize]
    }

    /// Host `host`'s ranks, ascending.
    pub fn members(&self, host: u32) -> &[Rank] {
        let (a, b) = (self.first[host as usize], self.first[host as usize + 1]);
        &self.members[a as usize..b as usize]
    }

    /// Whether `a` and `b` share a host.
    pub fn same_host(&self, a: Rank, b: Rank) -> bool {
        self.host_of(a) == self.host_of(b)
    }

    /// The fabric ring of hosts.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// Host `host`'s leader: its lowest rank not `gone`.
    pub fn leader(&self, host: u32, gone: impl Fn(Rank) -> bool) -> Option<Rank> {
        self.members(host).iter().copied().find(|&r| !gone(r))
    }

    /// Whether `rank` leads its host (no lower rank of its host is left).
    pub fn is_leader(&self, rank: Rank, gone: impl Fn(Rank) -> bool) -> bool {
        self.leader(self.host_of(rank), gone) == Some(rank)
    }

    /// `rank`'s same-host emitter: the nearest same-host rank below it (wrapping
    /// to the highest) not `gone`; `None` when it is alone on its host.
    pub fn local_emitter(&self, rank: Rank, gone: impl Fn(Rank) -> bool) -> Option<Rank> {
        let m = self.members(self.host_of(rank));
        let at = m.binary_search(&rank).ok()?;
        (1..m.len())
            .map(|k| m[(at + m.len() - k) % m.len()])
            .find(|&r| !gone(r))
    }

    /// `rank`'s same-host observer: the nearest same-host rank above it
    /// (wrapping) not `gone`.
    pub fn local_observer(&self, rank: Rank, gone: impl Fn(Rank) -> bool) -> Option<Rank> {
        let m = self.members(self.host_of(rank));
        let at = m.binary_search(&rank).ok()?;
        (1..m.len())
            .map(|k| m[(at + k) % m.len()])
            .find(|&r| !gone(r))
    }

    /// The fabric emitter of `rank`'s host: the leader of the nearest host
    /// before it on the host ring that has a live rank.
    pub fn fabric_emitter(&self, rank: Rank, gone: impl Fn(Rank) -> bool) -> Option<Rank> {
        let h = self.host_of(rank);
        self.ring
            .predecessors(h)
            .find_map(|other| self.leader(other, &gone))
    }

    /// The fabric observer of `rank`'s host: the leader of the nearest host
    /// after it on the host ring that has a live rank.
    pub fn fabric_observer(&self, rank: Rank, gone: impl Fn(Rank) -> bool) -> Option<Rank> {
        let h = self.host_of(rank);
        self.ring
            .successors(h)
            .find_map(|other| self.leader(other, &gone))
    }

    /// How far `to`'s host lies after `from`'s on the host ring (0: the
    /// same host).
    pub fn host_distance(&self, from: Rank, to: Rank) -> u32 {
        self.ring.distance(self.host_of(from), self.host_of(to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_leaders_and_local_rings() {
        // Ranks 0..6 round-robin over 3 hosts: host 0 = {0, 3}, 1 = {1, 4}, 2 = {2, 5}.
        let ids: Vec<u32> = (0..6).map(|r| r % 3).collect();
        let hosts = Hosts::new(RingKind::Topology, &ids, 0);
        assert_eq!((hosts.count(), hosts.ranks()), (3, 6));
        assert_eq!(hosts.members(1), &[1, 4]);
        let none = |_| false;
        assert_eq!(hosts.leader(2, none), Some(2));
        assert_eq!(hosts.leader(2, |r| r == 2), Some(5));
        assert_eq!(hosts.leader(2, |r| r == 2 || r == 5), None);
        assert!(hosts.is_leader(0, none) && !hosts.is_leader(3, none));
        assert_eq!(hosts.local_emitter(3, none), Some(0));
        assert_eq!(hosts.local_emitter(0, none), Some(3), "wraps");
        assert_eq!(hosts.local_observer(3, none), Some(0));
        assert_eq!(hosts.local_emitter(0, |r| r == 3), None, "alone");
        // Fabric ring of hosts 0 → 1 → 2 → 0, leaders the lowest live ranks.
        assert_eq!(hosts.fabric_emitter(0, none), Some(2));
        assert_eq!(hosts.fabric_observer(0, none), Some(1));
        assert_eq!(hosts.fabric_observer(0, |r| r == 1), Some(4), "failover");
        assert_eq!(
            hosts.fabric_observer(0, |r| r == 1 || r == 4),
            Some(2),
            "a dead host is skipped"
        );
        assert_eq!(hosts.host_distance(0, 5), 2);
        assert_eq!(hosts.host_distance(0, 3), 0);
    }

    #[test]
    fn one_host_has_no_fabric_ring() {
        let hosts = Hosts::new(RingKind::Topology, &[7u64; 4], 0);
        assert_eq!(hosts.fabric_emitter(1, |_| false), None);
        assert_eq!(hosts.fabric_observer(0, |_| false), None);
        assert_eq!(hosts.local_emitter(0, |_| false), Some(3));
    }

    #[test]
    fn block_placement_and_shuffled_hosts() {
        let hosts = Hosts::blocks(RingKind::Shuffle, 1 << 12, 64, 9);
        assert_eq!(hosts.count(), 64);
        assert_eq!(hosts.members(1), &(64..128).collect::<Vec<_>>()[..]);
        assert_ne!(
            hosts.ring().order(),
            Hosts::blocks(RingKind::Rank, 1 << 12, 64, 9).ring().order()
        );
    }
}
