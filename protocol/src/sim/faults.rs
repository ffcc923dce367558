//! Faults: turning `--fail` specifications into concrete actions, and
//! carrying them out on virtual time.
//!
//! Owns: [`MAX_LEAVE_ALL`], the resolution of each [`SimFaultKind`] into
//! an action (random picks drawn from the fault stream, ranks checked
//! against the job), and the effect of each action on the ranks, the slot
//! model and the partition. Must not: report (the metrics do), or read
//! any randomness but the fault and leave streams.

use std::time::Duration;

use rand::RngCore;
use rand_pcg::Pcg64;

use super::{
    EXCLUDED, LEFT, SimConfig, SimError, SimFaultKind, Simulator, Status, What, transport_error,
};
use crate::{Evidence, Input, Rank, Ring, Time, TransportErrorKind};

/// Largest job `leave:all` is simulated for (see `resolve`).
pub const MAX_LEAVE_ALL: u32 = 16_384;

#[derive(Clone, Debug)]
pub(super) enum Action {
    Crash {
        ranks: Vec<Rank>,
        label: &'static str,
    },
    Hang(Rank),
    Resume(Rank),
    Partition(Vec<Rank>),
    Heal,
    Leave(Rank),
    LeaveAll,
    Broadcast(Rank),
    Glitch {
        rank: Rank,
        peer: Rank,
    },
    Agree,
}

pub(super) fn host_of(r: Rank, hosts: u32, n: u32) -> u32 {
    ((u64::from(r) * u64::from(hosts)) / u64::from(n)) as u32
}

/// `k` distinct values of `0..n`, in the order drawn (Floyd's algorithm).
fn sample_distinct(rng: &mut Pcg64, n: u32, k: u32) -> Vec<Rank> {
    let mut chosen = std::collections::BTreeSet::new();
    let mut order = Vec::with_capacity(k as usize);
    for j in (n - k)..n {
        let t = (rng.next_u64() % (u64::from(j) + 1)) as u32;
        let pick = if chosen.contains(&t) { j } else { t };
        chosen.insert(pick);
        order.push(pick);
    }
    order
}

impl Simulator {
    /// Turns fault specs into concrete actions (random picks drawn here).
    pub(super) fn resolve(
        cfg: &SimConfig,
        ring: &Ring,
        rng: &mut Pcg64,
    ) -> Result<Vec<(Time, Action)>, SimError> {
        let n = cfg.ranks;
        let mut out = Vec::new();
        for f in &cfg.faults {
            let bad = |why: String| SimError::Fault {
                spec: f.to_string(),
                why,
            };
            let rank = |r: Rank| {
                if r < n {
                    Ok(r)
                } else {
                    Err(bad(format!("rank {r} is outside 0..{n}")))
                }
            };
            let at = Time::ZERO + f.at;
            let action = match &f.kind {
                SimFaultKind::Crash(r) => Action::Crash {
                    ranks: vec![rank(*r)?],
                    label: "crash",
                },
                SimFaultKind::Hang(r) => Action::Hang(rank(*r)?),
                SimFaultKind::Resume(r) => Action::Resume(rank(*r)?),
                SimFaultKind::Random(k) => {
                    if *k > n {
                        return Err(bad(format!("cannot pick {k} of {n} ranks")));
                    }
                    Action::Crash {
                        ranks: sample_distinct(rng, n, *k),
                        label: "random",
                    }
                }
                SimFaultKind::Consecutive { first, count } => {
                    if *count > n {
                        return Err(bad(format!("cannot take {count} of {n} ranks")));
                    }
                    let p = ring.position_of(rank(*first)?);
                    Action::Crash {
                        ranks: (0..*count).map(|k| ring.rank_at(p + k)).collect(),
                        label: "consecutive",
                    }
                }
                SimFaultKind::Host(h) => {
                    if *h >= cfg.hosts {
                        return Err(bad(format!("host {h} is outside 0..{}", cfg.hosts)));
                    }
                    let ranks = (0..n).filter(|&r| host_of(r, cfg.hosts, n) == *h).collect();
                    Action::Crash {
                        ranks,
                        label: "host",
                    }
                }
                SimFaultKind::AllBut(r) => {
                    let keep = rank(*r)?;
                    Action::Crash {
                        ranks: (0..n).filter(|&x| x != keep).collect(),
                        label: "allbut",
                    }
                }
                SimFaultKind::Partition(rs) => {
                    let mut v = rs.iter().map(|&r| rank(r)).collect::<Result<Vec<_>, _>>()?;
                    v.sort_unstable();
                    v.dedup();
                    Action::Partition(v)
                }
                SimFaultKind::Heal => Action::Heal,
                SimFaultKind::Leave(r) => Action::Leave(rank(*r)?),
                SimFaultKind::LeaveAll => {
                    if n > MAX_LEAVE_ALL {
                        return Err(bad(format!(
                            "at most {MAX_LEAVE_ALL} ranks: every rank records every leave, so the simulator \
                             of all ranks needs O(N²) memory"
                        )));
                    }
                    Action::LeaveAll
                }
                SimFaultKind::Broadcast(r) => Action::Broadcast(rank(*r)?),
                SimFaultKind::Glitch { rank: r, peer } => Action::Glitch {
                    rank: rank(*r)?,
                    peer: rank(*peer)?,
                },
                SimFaultKind::Agree => Action::Agree,
            };
            out.push((at, action));
        }
        Ok(out)
    }

    /// The live ranks that watch `r`'s liveness port: those whose fabric
    /// emitter it is, on another host (a rank's own host sees its exit).
    fn liveness_watchers(&self, r: Rank) -> Vec<Rank> {
        let host = |x: Rank| self.engines[x as usize].hosts().map(|h| h.host_of(x));
        (0..self.n)
            .filter(|&w| {
                w != r
                    && self.state[w as usize].status == Status::Up
                    && self.engines[w as usize].emitter() == Some(r)
                    && (host(w).is_none() || host(w) != host(r))
            })
            .collect()
    }

    pub(super) fn crash(&mut self, r: Rank, label: &'static str) {
        if !matches!(self.state[r as usize].status, Status::Up | Status::Hung) {
            return;
        }
        let now = self.now;
        self.state[r as usize].status = Status::Crashed;
        self.went_down(r);
        self.slots.stop(r, now);
        self.held.remove(&r);
        self.held_board.remove(&r);
        self.held_errors.remove(&r);
        self.track(r, label);
        self.announce_exit(r);
        // With local watching a `host` fault is a host lost whole (power,
        // network): no kernel is left to reset its connections, so no
        // in-band error; its observer finds it silent and checks the host.
        let silent = self.cfg.local && label == "host";
        if silent {
            self.state[r as usize].flags |= super::LOST;
        }
        if let (Some(d), false, true) = (self.cfg.net.inband_latency, silent, self.cfg.net.liveness)
        {
            // Its port closes with it: the observers whose watch was on it
            // probe and are refused (`crate::liveness`). Only a dead
            // process's port refuses: a hung one (`Action::Hang`) keeps it.
            let answer = match self.state[r as usize].status {
                Status::Crashed | Status::Closed => crate::liveness::ProbeAnswer::Refused,
                Status::Up => crate::liveness::ProbeAnswer::Greeted,
                Status::Hung => crate::liveness::ProbeAnswer::NoAnswer,
            };
            if let Some(evidence) = crate::liveness::evidence(answer) {
                for watcher in self.liveness_watchers(r) {
                    self.queue.push(
                        now + d,
                        What::Error {
                            to: watcher,
                            peer: r,
                            kind: TransportErrorKind::LivenessProbe,
                            evidence,
                        },
                    );
                }
            }
        }
        if let (Some(d), false) = (self.cfg.net.inband_latency, silent) {
            for (_, writer) in self.slots.writers_into(r) {
                if self.state[writer as usize].status == Status::Up {
                    let at = self.slots.next_write(writer, now) + d;
                    self.queue.push(
                        at,
                        What::Error {
                            to: writer,
                            peer: r,
                            kind: TransportErrorKind::HeartbeatWrite,
                            evidence: Evidence::Proof,
                        },
                    );
                }
            }
        }
    }

    /// The side of a partition cutting `cut` off that is not the primary
    /// one, and so the side the report treats as faulted: the side with
    /// fewer live ranks, or at an exact half the side without the lowest
    /// live rank (the protocol's rule, `docs/design.md` §4.11 "Primary partition"). Its reports
    /// about the other side's ranks are false reports.
    fn non_primary_side(&self, cut: &[Rank]) -> Vec<Rank> {
        let live = |r: Rank| {
            self.state[r as usize].status == Status::Up
                && self.state[r as usize].flags & (EXCLUDED | LEFT) == 0
        };
        let inside = |r: Rank| cut.binary_search(&r).is_ok();
        let cut_live = (0..self.n).filter(|&r| live(r) && inside(r)).count();
        let rest_live = (0..self.n).filter(|&r| live(r) && !inside(r)).count();
        let lowest_inside = (0..self.n).find(|&r| live(r)).is_some_and(inside);
        let cut_is_primary = cut_live > rest_live || (cut_live == rest_live && lowest_inside);
        if cut_is_primary {
            (0..self.n).filter(|&r| !inside(r)).collect()
        } else {
            cut.to_vec()
        }
    }

    pub(super) fn apply(&mut self, action: Action) {
        let now = self.now;
        match action {
            Action::Crash { ranks, label } => {
                for r in ranks {
                    self.crash(r, label);
                }
            }
            Action::Hang(r) => {
                if self.state[r as usize].status == Status::Up {
                    self.state[r as usize].status = Status::Hung;
                    self.slots.stop(r, now);
                    self.track(r, "hang");
                }
            }
            Action::Resume(r) => {
                if self.state[r as usize].status == Status::Hung {
                    self.state[r as usize].status = Status::Up;
                    self.slots.resume(r);
                    // The progress thread wakes: its timers are long overdue.
                    self.state[r as usize].deadline = Time::NEVER;
                    self.tick(r);
                    for (from, message) in self.held.remove(&r).unwrap_or_default() {
                        if self.state[r as usize].status != Status::Up {
                            break;
                        }
                        self.deliver(r, from, &message);
                        self.after_handle(r);
                    }
                    for (failed, detector) in self.held_board.remove(&r).unwrap_or_default() {
                        if self.state[r as usize].status != Status::Up {
                            break;
                        }
                        let input = Input::BoardNotice {
                            failed: &failed,
                            detector,
                        };
                        let _ = self.engines[r as usize].handle(now, input);
                        self.after_handle(r);
                    }
                    for (peer, kind, evidence) in self.held_errors.remove(&r).unwrap_or_default() {
                        let _ = self.engines[r as usize]
                            .handle(now, transport_error(peer, kind, evidence));
                        self.after_handle(r);
                    }
                    if let Some((t, _)) = self.slots.target(r) {
                        if matches!(
                            self.state[t as usize].status,
                            Status::Crashed | Status::Closed
                        ) {
                            self.bounce(r, t, TransportErrorKind::HeartbeatWrite);
                        }
                    }
                }
            }
            Action::Partition(ranks) => {
                for r in self.non_primary_side(&ranks) {
                    self.track(r, "partition");
                }
                self.partition = Some(ranks.clone());
                let cut = |a: Rank, b: Rank| {
                    ranks.binary_search(&a).is_ok() != ranks.binary_search(&b).is_ok()
                };
                self.slots.cut(&ranks, now, cut);
            }
            Action::Heal => {
                self.partition = None;
                self.slots.heal();
            }
            Action::Leave(r) => self.queue.push(now, What::Leave(r)),
            Action::Glitch { rank, peer } => self.queue.push(
                now,
                // A spurious error is no proof: the peer is alive.
                What::Error {
                    to: rank,
                    peer,
                    kind: TransportErrorKind::HeartbeatWrite,
                    evidence: Evidence::Silence,
                },
            ),
            Action::Broadcast(r) => {
                if self.state[r as usize].status == Status::Up {
                    let payload = format!("payload from {r} at {now}");
                    let sent =
                        self.engines[r as usize].handle(now, Input::Broadcast(payload.as_bytes()));
                    if sent.is_ok() {
                        let seq = self.engines[r as usize].payload_mark(r);
                        self.payload_log.broadcast(r, seq, now, self.n);
                    }
                    self.after_handle(r);
                }
            }
            Action::Agree => {
                self.agree_calls += 1;
                self.agreement_started(self.agree_calls);
                for r in 0..self.n {
                    let st = self.state[r as usize];
                    if st.status == Status::Up && st.flags & (EXCLUDED | LEFT) == 0 {
                        let flags = !(1u64 << (r % 64));
                        let _ = self.engines[r as usize].handle(now, Input::Agree { flags });
                        self.after_handle(r);
                    }
                }
            }
            Action::LeaveAll => {
                let period = self.cfg.engine.period.as_nanos() as u64;
                for r in 0..self.n {
                    let stagger = Duration::from_nanos(self.leave_rng.next_u64() % period.max(1));
                    self.queue.push(now + stagger, What::Leave(r));
                }
            }
        }
    }
}
