//! The agreement state machine under random crashes, message delays and
//! reordering, with a failure detector that tells each survivor of each
//! crash at its own time: every survivor decides, every decision is the
//! same, the decided flags are the AND over a set of contributors that
//! holds every survivor, and the decided failed set holds no survivor and
//! every rank that crashed before it contributed.
//!
//! Each seed runs twice: on the binomial tree over ranks and on the tree
//! over hosts (`Shape::Hosts`, a random placement of the ranks on 1 to N
//! hosts, drawn from the seed; hosts larger than `FLAT_MAX` sometimes).
//!
//! 3000 random runs by default (about 3 s in a debug build);
//! `AGREEMENT_SEEDS=60000 cargo test --release -p ffd-protocol --test
//! agreement` runs more. Each of these mutations of the state machine makes
//! some seed fail (checked when the harness was written): accepting a
//! stale `Down`, not carrying a decision up to a new root, not passing on a
//! newer root's re-sent decision.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use std::sync::Arc;

use ffd_protocol::agreement::{AgreementMessage, Instance, Out, Shape, Value};
use ffd_protocol::{Hosts, RankSet, RingKind};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;

#[derive(Debug)]
enum What {
    Deliver {
        from: u32,
        to: u32,
        msg: AgreementMessage,
    },
    Crash(u32),
    /// `to` learns that `of` failed.
    Learn {
        to: u32,
        of: u32,
    },
    Contribute(u32),
}

struct Node {
    inst: Instance,
    /// Dies in the middle of its first fan-out of the decision.
    dies_deciding: bool,
    failed: RankSet,
    alive: bool,
    flags: u64,
    contributed_at: Option<u64>,
}

struct Run {
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    events: Vec<Option<What>>,
    rng: Pcg64,
    max_delay: u64,
    messages: u64,
}

impl Run {
    fn at(&mut self, t: u64, what: What) {
        self.seq += 1;
        self.events.push(Some(what));
        self.queue
            .push(Reverse((t, self.seq, self.events.len() - 1)));
    }

    fn send(&mut self, from: u32, out: Out) {
        for (to, msg) in out {
            self.messages += 1;
            // Long tails on purpose: a Down may arrive after the failure
            // of the root that sent it is known.
            let d = if self.rng.random_bool(0.1) {
                self.rng.random_range(1..self.max_delay * 20)
            } else {
                self.rng.random_range(1..self.max_delay)
            };
            self.at(self.now + d, What::Deliver { from, to, msg });
        }
    }
}

/// A random placement of `n` ranks on hosts, from its own generator (so
/// that the run's draws are those of the same seed over ranks).
fn random_hosts(seed: u64, n: u32) -> (Shape, String) {
    let mut rng = Pcg64::seed_from_u64(seed ^ 0x4057);
    let h = rng.random_range(1..=n);
    let ids: Vec<u32> = match rng.random_range(0..3) {
        // r mod H, as `ffd run --hosts`.
        0 => (0..n).map(|r| r % h).collect(),
        // Blocks, as the simulator.
        1 => (0..n).map(|r| r * h / n).collect(),
        _ => (0..n).map(|_| rng.random_range(0..h)).collect(),
    };
    let what = format!("hosts {ids:?}");
    (
        Shape::Hosts(Arc::new(Hosts::new(RingKind::Rank, &ids, 0))),
        what,
    )
}

fn check_one(seed: u64, hosts: bool) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let n: u32 = rng.random_range(1..48);
    let (shape, layout) = if hosts {
        random_hosts(seed, n)
    } else {
        (Shape::Ranks, "ranks".to_string())
    };
    let crashes: u32 = rng.random_range(0..n.max(1));
    let mut run = Run {
        now: 0,
        seq: 0,
        queue: BinaryHeap::new(),
        events: Vec::new(),
        rng: Pcg64::seed_from_u64(seed ^ 0x5eed),
        max_delay: rng.random_range(2..50),
        messages: 0,
    };
    let empty = RankSet::new();
    let mut nodes: Vec<Node> = (0..n)
        .map(|r| Node {
            inst: Instance::with_shape(r, n, shape.clone(), &empty),
            dies_deciding: rng.random_bool(0.15),
            failed: RankSet::new(),
            alive: true,
            // Mostly all-ones, sometimes a cleared bit, so the AND shows.
            flags: if rng.random_bool(0.2) {
                !(1u64 << rng.random_range(0..4))
            } else {
                u64::MAX
            },
            contributed_at: None,
        })
        .collect();
    for r in 0..n {
        let t = rng.random_range(0..200);
        run.at(t, What::Contribute(r));
    }
    // Crash some ranks, the early roots more often than chance.
    let mut victims: Vec<u32> = (0..n).collect();
    for i in 0..victims.len() {
        let j = rng.random_range(i..victims.len());
        victims.swap(i, j);
    }
    if rng.random_bool(0.5) {
        victims.sort_by_key(|&v| (v > 2, v));
    }
    for &v in victims.iter().take(crashes as usize) {
        let t = rng.random_range(0..400);
        run.at(t, What::Crash(v));
    }

    // Sends `out` from `from`; a rank that dies deciding sends a random
    // prefix of its first fan-out of Downs, then crashes.
    let emit = |run: &mut Run, nodes: &mut Vec<Node>, from: u32, mut out: Out| {
        let node = &mut nodes[from as usize];
        if node.dies_deciding
            && out
                .iter()
                .any(|(_, m)| matches!(m, AgreementMessage::Down { .. }))
        {
            node.dies_deciding = false;
            let keep = run.rng.random_range(0..=out.len());
            out.truncate(keep);
            run.send(from, out);
            let now = run.now;
            run.at(now, What::Crash(from));
            return;
        }
        run.send(from, out);
    };

    while let Some(Reverse((t, _, i))) = run.queue.pop() {
        run.now = t;
        let what = run.events[i].take().expect("each event once");
        match what {
            What::Crash(v) => {
                if !nodes[v as usize].alive {
                    continue;
                }
                nodes[v as usize].alive = false;
                for to in 0..n {
                    if to != v {
                        let d = run.rng.random_range(1..run.max_delay * 10);
                        run.at(t + d, What::Learn { to, of: v });
                    }
                }
            }
            What::Learn { to, of } => {
                let node = &mut nodes[to as usize];
                if !node.alive || node.failed.contains(of) {
                    continue;
                }
                node.failed.insert(of);
                let mut out = Out::new();
                node.inst.on_failures(&node.failed, &mut out);
                emit(&mut run, &mut nodes, to, out);
            }
            What::Contribute(r) => {
                let node = &mut nodes[r as usize];
                if !node.alive {
                    continue;
                }
                node.contributed_at = Some(t);
                let mut out = Out::new();
                let value = Value::new(node.flags, node.failed.as_slice());
                node.inst.contribute(&value, &node.failed, &mut out);
                emit(&mut run, &mut nodes, r, out);
            }
            What::Deliver { from, to, msg } => {
                let node = &mut nodes[to as usize];
                if !node.alive {
                    continue;
                }
                let mut out = Out::new();
                match &msg {
                    AgreementMessage::Up {
                        root,
                        value,
                        decided,
                    } => node.inst.on_up(
                        from,
                        *root,
                        value,
                        decided.as_ref(),
                        &node.failed,
                        &mut out,
                    ),
                    AgreementMessage::Down { root, decision } => {
                        node.inst
                            .on_down(from, *root, decision, &node.failed, &mut out)
                    }
                }
                emit(&mut run, &mut nodes, to, out);
            }
        }
    }

    let survivors: Vec<u32> = (0..n).filter(|&r| nodes[r as usize].alive).collect();
    let ctx = format!("seed {seed} ({layout}): n={n} crashes={crashes} survivors={survivors:?}");
    let decisions: Vec<&Value> = survivors
        .iter()
        .map(|&r| {
            nodes[r as usize]
                .inst
                .decision()
                .unwrap_or_else(|| panic!("{ctx}: rank {r} never decided"))
        })
        .collect();
    let Some(&first) = decisions.first() else {
        return;
    };
    for (r, d) in survivors.iter().zip(&decisions) {
        assert_eq!(*d, first, "{ctx}: rank {r} decided otherwise");
    }
    // The flags: AND over a set of contributors holding every survivor.
    let survivors_and = survivors
        .iter()
        .fold(u64::MAX, |a, &r| a & nodes[r as usize].flags);
    let everyone_and = nodes
        .iter()
        .filter(|n| n.contributed_at.is_some())
        .fold(u64::MAX, |a, n| a & n.flags);
    assert_eq!(first.flags & survivors_and, first.flags, "{ctx}");
    assert_eq!(first.flags & everyone_and, everyone_and, "{ctx}");
    for &r in &survivors {
        assert!(
            !first.failed.contains(&r),
            "{ctx}: survivor {r} in the decided failed set {:?}",
            first.failed
        );
    }
    for (r, node) in nodes.iter().enumerate() {
        if !node.alive && node.contributed_at.is_none() {
            assert!(
                first.failed.contains(&(r as u32)),
                "{ctx}: rank {r} crashed before contributing but is not in {:?}",
                first.failed
            );
        }
    }
    // Without failures: N-1 Ups and N-1 Downs.
    if crashes == 0 && nodes.iter().all(|n| n.alive) {
        assert_eq!(run.messages, 2 * u64::from(n - 1), "{ctx}");
    }
}

#[test]
fn every_survivor_decides_the_same_value_under_random_crashes() {
    let seeds: u64 = std::env::var("AGREEMENT_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    for seed in 0..seeds {
        check_one(seed, false);
        check_one(seed, true);
    }
}
