//! Engines with host groups (`docs/design.md` §4.12 "Hosts"): leaders and the ring
//! of hosts, local watching (exits as proof, hangs through the counters),
//! leader failover, and a whole host declared in one notice.
//!
//! A small driver runs every Engine on virtual time in 1 ms steps:
//! heartbeats land in a slot map, messages are delivered within the step,
//! and each rank's counter is the time of its last wake-up.

mod support;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use ffd_protocol::ranks::fold_digest;
use ffd_protocol::wire;
use ffd_protocol::{
    Cause, EmitterThread, Engine, EngineConfig, EngineOptions, Event, Evidence, FabricSaid,
    FailureDetail, Hosts, Input, Kind, LocalBeat, Output, QuorumMode, Rank, Ring, RingKind, Time,
    TransportErrorKind,
};
use support::{Job, deliver_from, deliver_sealed, drain, ms, readings, serve_deadlines};

const KEY: u64 = 0x5EED_0000_1111_2222;

/// An exit: proof, nothing from the fabric.
const PROOF: FailureDetail = FailureDetail::Proof {
    said: FabricSaid::Nothing,
};
/// A silence declared at once (`FFD_QUORUM=off`).
const SILENCE: FailureDetail = FailureDetail::Silence {
    said: FabricSaid::Nothing,
    quorum: None,
};

const JOB: Job = Job::new(KEY, [0x24; 32]);

/// Period 10 ms, timeout 100 ms, start-up grace 100 ms.
fn host_config(quorum: QuorumMode) -> Arc<EngineConfig> {
    Arc::new(EngineConfig {
        startup_grace: Some(ms(100)),
        ..support::config(quorum)
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Up,
    Hung,
    Dead,
}

struct Cluster {
    engines: Vec<Engine>,
    status: Vec<Status>,
    hosts: Arc<Hosts>,
    now: Time,
    /// (observer, slot) → value.
    slots: BTreeMap<(Rank, u16), u64>,
    /// Each rank's counter: its last wake-up, and its digest fold then.
    counters: Vec<Option<LocalBeat>>,
    /// Every event, with the rank that raised it and when.
    events: Vec<(Rank, Time, Event)>,
    /// Notices sent, by sender.
    notices: Vec<(Rank, Rank)>,
    /// Posts on a host's notice board: (poster, failed, detector).
    posts: Vec<(Rank, Vec<Rank>, Rank)>,
    /// Board news not yet read: (reader, failed, detector).
    board: VecDeque<(Rank, Vec<Rank>, Rank)>,
}

impl Cluster {
    /// `n` ranks, rank r on host r mod `h`, silence declared at once.
    fn new(n: u32, h: u32) -> Cluster {
        Cluster::with_quorum(n, h, QuorumMode::Off)
    }

    fn with_quorum(n: u32, h: u32, quorum: QuorumMode) -> Cluster {
        // Off: one notice per silent host at once; under majority the
        // host is one accusation first (tests below run it).
        Cluster::with_config(n, h, host_config(quorum))
    }

    fn with_config(n: u32, h: u32, config: Arc<EngineConfig>) -> Cluster {
        let ids: Vec<u32> = (0..n).map(|r| r % h).collect();
        let hosts = Arc::new(Hosts::new(RingKind::Topology, &ids, 0));
        let ring = Arc::new(Ring::topology(&ids));
        let engines = (0..n)
            .map(|r| {
                JOB.engine_on_hosts(
                    Arc::clone(&config),
                    Arc::clone(&ring),
                    Arc::clone(&hosts),
                    r,
                )
            })
            .collect();
        let mut c = Cluster {
            engines,
            status: vec![Status::Up; n as usize],
            hosts,
            now: Time::ZERO,
            slots: BTreeMap::new(),
            counters: vec![None; n as usize],
            events: Vec::new(),
            notices: Vec::new(),
            posts: Vec::new(),
            board: VecDeque::new(),
        };
        let mut queue = VecDeque::new();
        for r in 0..n {
            c.drain(r, &mut queue);
        }
        c.deliver(queue);
        c
    }

    fn n(&self) -> u32 {
        self.engines.len() as u32
    }

    fn drain(&mut self, r: Rank, queue: &mut VecDeque<(Rank, Rank, Vec<u8>)>) {
        while let Some(o) = self.engines[r as usize].poll_output() {
            match o {
                Output::WriteHeartbeat { to, slot, value } => {
                    if self.status[to as usize] != Status::Dead {
                        self.slots.insert((to, slot), value);
                    }
                }
                Output::ClearSlot { slot } => {
                    self.slots.remove(&(r, slot));
                }
                Output::Send { to, message } => {
                    let bytes = message.to_vec();
                    if wire::peek_kind(&bytes) == Some(Kind::Notice) {
                        self.notices.push((r, to));
                    }
                    queue.push_back((to, r, bytes));
                }
                Output::Event(e) => self.events.push((r, self.now, e)),
                Output::HeartbeatStream { .. } => {}
                Output::PostOnBoard { failed, detector } => {
                    self.posts.push((r, failed.to_vec(), detector));
                    for &to in self.hosts.members(self.hosts.host_of(r)) {
                        if to != r {
                            self.board.push_back((to, failed.to_vec(), detector));
                        }
                    }
                }
            }
        }
    }

    fn deliver(&mut self, mut queue: VecDeque<(Rank, Rank, Vec<u8>)>) {
        loop {
            // The board first: a futex wake-up, before any fabric copy.
            if let Some((to, failed, detector)) = self.board.pop_front() {
                if self.status[to as usize] == Status::Up {
                    let input = Input::BoardNotice {
                        failed: &failed,
                        detector,
                    };
                    let _ = self.engines[to as usize].handle(self.now, input);
                    self.drain(to, &mut queue);
                }
                continue;
            }
            let Some((to, from, bytes)) = queue.pop_front() else {
                break;
            };
            if self.status[to as usize] != Status::Up {
                continue;
            }
            let _ = self.engines[to as usize].handle(
                self.now,
                Input::Message {
                    from: Some(from),
                    bytes: &bytes,
                },
            );
            self.drain(to, &mut queue);
        }
    }

    /// Every rank reads its host's notice board (the driver says so).
    fn with_board(mut self) -> Cluster {
        for r in 0..self.n() {
            let others: Vec<Rank> = self
                .hosts
                .members(self.hosts.host_of(r))
                .iter()
                .copied()
                .filter(|&o| o != r)
                .collect();
            let _ =
                self.engines[r as usize].handle(self.now, Input::BoardReaders { ranks: &others });
        }
        self
    }

    /// One millisecond: every running rank whose deadline came wakes,
    /// reads its slot and its same-host emitter's counter, and bumps its own.
    fn step(&mut self) {
        self.now += ms(1);
        let mut queue = VecDeque::new();
        for r in 0..self.n() {
            if self.status[r as usize] != Status::Up {
                continue;
            }
            let due = self.engines[r as usize]
                .next_deadline()
                .is_some_and(|d| d <= self.now);
            if !due {
                continue;
            }
            let now = self.now;
            let slots = &self.slots;
            let counters = &self.counters;
            self.engines[r as usize].handle_timeout(
                now,
                &readings(
                    |slot| slots.get(&(r, slot)).copied().unwrap_or(0),
                    |e| counters[e as usize],
                ),
            );
            self.counters[r as usize] = Some(LocalBeat {
                at: now,
                digest: fold_digest(self.engines[r as usize].digest()),
                thread: EmitterThread::Unknown,
            });
            self.drain(r, &mut queue);
        }
        self.deliver(queue);
    }

    fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.step();
        }
    }

    /// SIGSTOP: `rank` stops waking, and a driver that looks at its
    /// progress thread finds it in `thread`; returns its last wake-up.
    fn hang(&mut self, rank: Rank, thread: EmitterThread) -> Time {
        self.status[rank as usize] = Status::Hung;
        let last = self.counters[rank as usize]
            .as_mut()
            .expect("the rank woke before");
        last.thread = thread;
        last.at
    }

    /// SIGKILL: the process is gone; its host's running ranks see the
    /// exit, and their driver knows they all do (exit words).
    fn kill(&mut self, victim: Rank) {
        self.kill_seen(victim, true);
    }

    /// SIGKILL, the driver knowing that every running rank of the host
    /// sees the exit itself (`told`) or not (pidfds only).
    fn kill_seen(&mut self, victim: Rank, told: bool) {
        self.status[victim as usize] = Status::Dead;
        let mut queue = VecDeque::new();
        let hosts = Arc::clone(&self.hosts);
        let watchers: Vec<Rank> = hosts
            .members(hosts.host_of(victim))
            .iter()
            .copied()
            .filter(|&r| self.status[r as usize] == Status::Up)
            .collect();
        for &r in &watchers {
            let seen_by: Vec<Rank> = if told {
                watchers.iter().copied().filter(|&w| w != r).collect()
            } else {
                Vec::new()
            };
            let input = Input::Exited {
                rank: victim,
                seen_by: &seen_by,
            };
            let _ = self.engines[r as usize].handle(self.now, input);
            self.drain(r, &mut queue);
        }
        self.deliver(queue);
    }

    /// Every rank that is up knows `rank` failed.
    fn all_know(&self, rank: Rank) -> bool {
        (0..self.n())
            .filter(|&r| self.status[r as usize] == Status::Up)
            .all(|r| self.engines[r as usize].is_failed(rank))
    }

    /// When `rank` was first declared failed anywhere.
    fn declared_at(&self, rank: Rank) -> Option<Time> {
        self.events.iter().find_map(|(_, t, e)| {
            matches!(e, Event::Failed { rank: r, .. } if *r == rank).then_some(*t)
        })
    }

    fn failed_events(&self, rank: Rank) -> Vec<(Rank, Cause, FailureDetail)> {
        self.events
            .iter()
            .filter_map(|(by, _, e)| match e {
                Event::Failed {
                    rank: r,
                    cause,
                    detail,
                    ..
                } if *r == rank => Some((*by, *cause, *detail)),
                _ => None,
            })
            .collect()
    }

    /// When the first `HostFailed` was raised.
    fn host_failed_at(&self) -> Time {
        self.events
            .iter()
            .find_map(|(_, t, e)| matches!(e, Event::HostFailed { .. }).then_some(*t))
            .expect("a host-failed event")
    }

    fn host_failed(&self) -> Vec<(Rank, u32, Vec<Rank>)> {
        self.events
            .iter()
            .filter_map(|(by, _, e)| match e {
                Event::HostFailed { host, ranks } => Some((*by, *host, ranks.clone())),
                _ => None,
            })
            .collect()
    }
}

#[test]
fn only_leaders_are_on_the_fabric_ring_and_every_rank_watches_locally() {
    // 3 hosts × 3 ranks: host 0 = {0, 3, 6}, 1 = {1, 4, 7}, 2 = {2, 5, 8}.
    let c = Cluster::new(9, 3);
    for r in 0..9 {
        let e = &c.engines[r as usize];
        let leader = r < 3;
        assert_eq!(e.is_leader(), leader, "rank {r}");
        if leader {
            assert_eq!(e.emitter(), Some((r + 2) % 3), "rank {r}'s fabric emitter");
            assert_eq!(
                e.observer(),
                Some((r + 1) % 3),
                "rank {r}'s fabric observer"
            );
        } else {
            assert_eq!((e.emitter(), e.observer()), (None, None), "rank {r}");
        }
        let local = if r < 3 { r + 6 } else { r - 3 };
        assert_eq!(
            e.local_emitter(),
            Some(local),
            "rank {r}'s same-host emitter"
        );
    }
}

#[test]
fn non_leaders_write_no_heartbeats_and_nobody_is_declared_while_all_run() {
    let mut c = Cluster::new(9, 3);
    c.run_for(ms(1000));
    for r in 0..9u32 {
        let beats = c.engines[r as usize].stats().observation.heartbeats_written;
        if r < 3 {
            assert!(beats >= 90, "leader {r} wrote {beats} beats");
        } else {
            assert_eq!(beats, 0, "non-leader {r} wrote heartbeats");
        }
        assert!(c.engines[r as usize].failed().is_empty(), "rank {r}");
        assert!(
            c.engines[r as usize].stats().hosts.local_checks > 0,
            "rank {r}"
        );
    }
    assert!(c.events.is_empty(), "{:?}", c.events);
}

#[test]
fn an_exit_is_declared_by_every_local_rank_and_broadcast_by_the_lowest() {
    let mut c = Cluster::new(9, 3);
    c.run_for(ms(300));
    c.kill(3);
    // Both of its host's survivors declared it themselves, as proof.
    let events = c.failed_events(3);
    for r in [0, 6] {
        assert!(events.contains(&(r, Cause::Exited, PROOF)), "{events:?}");
    }
    // Only rank 0, the lowest live rank of the host, sent notices.
    let senders: Vec<Rank> = c.notices.iter().map(|&(s, _)| s).collect();
    assert!(senders.contains(&0) && !senders.contains(&6), "{senders:?}");
    assert!(c.all_know(3), "everyone learned it within the step");
    // Rank 6 now watches rank 0's counter.
    assert_eq!(c.engines[6].local_emitter(), Some(0));
    c.run_for(ms(500));
    assert_eq!(c.failed_events(3).len(), 8, "each survivor once");
    assert!(
        (0..9)
            .filter(|&r| r != 3)
            .all(|r| c.engines[r].failed() == [3]),
        "no other rank declared"
    );
}

/// The ranks of the victim's host see its exit themselves: the notice
/// goes to the other hosts, and from none of them back onto the host as
/// news (copies to ranks whose own words the kernel had not yet
/// marked were forwarded by each to its overlay links).
#[test]
fn an_exit_is_broadcast_past_the_ranks_that_see_it_themselves() {
    // Rank 0's copies to its own host (host 0: the even ranks), with and
    // without its driver knowing who sees the exit.
    let run = |told: bool| {
        let mut c = Cluster::new(12, 2);
        c.run_for(ms(300));
        c.kill_seen(4, told);
        assert!(c.all_know(4), "told {told}");
        let own: Vec<Rank> = c
            .notices
            .iter()
            .filter(|&&(s, to)| s == 0 && to % 2 == 0)
            .map(|&(_, to)| to)
            .collect();
        let remote = c
            .notices
            .iter()
            .filter(|&&(s, to)| s == 0 && to % 2 == 1)
            .count();
        let by_notice = c
            .failed_events(4)
            .iter()
            .filter(|&&(r, cause, _)| r % 2 == 0 && cause != Cause::Exited)
            .count();
        (own, remote, by_notice)
    };
    let (own, remote, by_notice) = run(true);
    assert!(own.is_empty(), "copies to its own host: {own:?}");
    assert!(remote > 0, "the other host is told");
    assert_eq!(by_notice, 0, "its host learned it from its own words");
    // Without that knowledge (pidfds only) its host's ranks get copies.
    let (own, remote, _) = run(false);
    assert!(!own.is_empty() && remote > 0, "{own:?} {remote}");

    // One host holding the whole job: nothing to send at all.
    let mut c = Cluster::new(8, 1);
    c.run_for(ms(300));
    c.kill(3);
    assert!(c.notices.is_empty(), "{:?}", c.notices);
    assert!(c.all_know(3));
    let mut c = Cluster::new(8, 1);
    c.run_for(ms(300));
    c.kill_seen(3, false);
    assert!(!c.notices.is_empty());
}

/// The rank due to broadcast an exit (its host's lowest live rank) dies
/// before it handles it, unseen yet by the others: when its own exit is
/// seen, the next lowest live rank broadcasts both (a host's
/// processes killed one after another lost such notices, and the other
/// hosts found the rank a timeout or more later).
#[test]
fn an_exit_whose_broadcaster_died_with_it_unsent_is_broadcast_by_the_next() {
    // 3 hosts × 4: host 0 = {0, 3, 6, 9}.
    let mut c = Cluster::new(12, 3);
    c.run_for(ms(300));
    // Rank 3 is killed first, but rank 0's exit is seen before its own:
    // 6 and 9 leave rank 0 to rank 3, who never handles it.
    c.status[3] = Status::Dead;
    c.kill(0);
    for r in [6, 9] {
        assert!(c.engines[r].is_failed(0), "rank {r} saw the exit");
    }
    assert!(!c.engines[1].is_failed(0), "nobody broadcast it yet");
    let notices = c.notices.len();
    c.kill(3);
    assert!(c.all_know(0) && c.all_know(3));
    for r in [1, 2, 4, 5, 7, 8, 10, 11] {
        let learned = c.failed_events(0);
        assert!(
            learned.contains(&(r, Cause::Notice, FailureDetail::Learned)),
            "rank {r} learned rank 0 from a notice: {learned:?}"
        );
    }
    // Rank 6, the lowest live rank now, sent them, rank 9 none, and rank
    // 6 sent nothing to rank 9, which saw both exits.
    let sent = &c.notices[notices..];
    assert!(sent.iter().any(|&(s, _)| s == 6), "{sent:?}");
    assert!(!sent.contains(&(6, 9)) && sent.iter().all(|&(s, _)| s != 9));
    assert_eq!(c.engines[6].stats().hosts.orphaned_exits_broadcast, 1);
    assert_eq!(c.engines[9].stats().hosts.orphaned_exits_broadcast, 0);
    // A broadcaster that lives on takes nothing over: a later death of a
    // rank that was never anyone's broadcaster re-sends nothing.
    c.run_for(ms(300));
    c.kill(9);
    assert!(c.all_know(9));
    assert_eq!(c.engines[6].stats().hosts.orphaned_exits_broadcast, 1);
}

/// News read on the board is forwarded to the other hosts a period later,
/// not at once: the rank that took it off the fabric and posted it sent
/// the copies that matter, and every other host knows before the held ones
/// leave. They do leave (a host only they reach still learns).
#[test]
fn board_news_goes_to_other_hosts_a_period_after_it_was_read() {
    // Three hosts of four: rank 4 is on host 1 with 1, 7 and 10.
    let mut c = Cluster::new(12, 3).with_board();
    c.run_for(ms(300));
    c.kill(4);
    assert!(c.all_know(4), "known everywhere in the step of the kill");
    let learners: Vec<Rank> = (0..12)
        .filter(|&r| c.engines[r as usize].stats().hosts.board_learned > 0)
        .collect();
    // On hosts 0 and 2, all but the rank the fabric reached first.
    assert_eq!(learners.len(), 6, "{learners:?}");
    assert!(learners.iter().all(|r| r % 3 != 1), "{learners:?}");
    let held = |c: &Cluster| {
        c.notices
            .iter()
            .filter(|(s, _)| learners.contains(s))
            .count()
    };
    assert_eq!(held(&c), 0, "{:?}", c.notices);
    c.run_for(ms(9));
    assert_eq!(held(&c), 0, "{:?}", c.notices);
    c.run_for(ms(2));
    for &r in &learners {
        let stats = &c.engines[r as usize].stats().hosts;
        assert_eq!(stats.board_forwards_released, 1, "rank {r}");
    }
    let copies: Vec<(Rank, Rank)> = c
        .notices
        .iter()
        .copied()
        .filter(|(s, _)| learners.contains(s))
        .collect();
    assert!(
        !copies.is_empty() && copies.iter().all(|(s, to)| s % 3 != to % 3 && *to != 4),
        "only to other hosts' live ranks: {copies:?}"
    );
}

/// A hang found on a host goes onto the host's notice board: every rank
/// of the host learns it from there, none gets a fabric copy (at 32 ranks
/// on one host the overlay's forward-once sent 244 copies for one hang),
/// and the other hosts get theirs over the fabric.
#[test]
fn a_hang_is_posted_on_the_board_and_its_host_gets_no_fabric_copy() {
    // Two hosts of six: host 0 is the even ranks.
    let mut c = Cluster::new(12, 2).with_board();
    c.run_for(ms(300));
    c.hang(4, EmitterThread::Stopped);
    c.run_for(ms(300));
    assert!(c.all_know(4));
    let declarer = c
        .failed_events(4)
        .into_iter()
        .find(|&(_, cause, _)| cause == Cause::Timeout)
        .map(|(r, _, _)| r)
        .expect("declared by its same-host observer");
    // One post on host 0, by the declarer; news entering host 1 over the
    // fabric is posted there by the first rank it reaches.
    let on_host0: Vec<_> = c.posts.iter().filter(|p| p.0 % 2 == 0).cloned().collect();
    assert_eq!(
        on_host0,
        vec![(declarer, vec![4], declarer)],
        "{:?}",
        c.posts
    );
    assert!(
        c.posts.iter().any(|p| p.0 % 2 == 1 && p.2 == declarer),
        "{:?}",
        c.posts
    );
    let host_copies: Vec<(Rank, Rank)> = c
        .notices
        .iter()
        .copied()
        .filter(|&(s, to)| s % 2 == 0 && to % 2 == 0 && to != 4)
        .collect();
    assert!(
        host_copies.is_empty(),
        "fabric copies on host 0: {host_copies:?}"
    );
    for r in [0, 2, 6, 8, 10].into_iter().filter(|&r| r != declarer) {
        assert!(
            c.failed_events(4)
                .contains(&(r, Cause::Notice, FailureDetail::Learned)),
            "rank {r} learned it from the board"
        );
    }
    assert!(
        c.notices.iter().any(|&(s, to)| s % 2 == 0 && to % 2 == 1),
        "host 1 is told over the fabric"
    );

    // Without readers: the overlay as before, copies on the host.
    let mut c = Cluster::new(12, 2);
    c.run_for(ms(300));
    c.hang(4, EmitterThread::Stopped);
    c.run_for(ms(300));
    assert!(c.all_know(4));
    assert!(c.posts.is_empty());
    assert!(
        c.notices
            .iter()
            .any(|&(s, to)| s % 2 == 0 && to % 2 == 0 && to != 4)
    );

    // One host holding the whole job: only the hung rank's own notice.
    let mut c = Cluster::new(8, 1).with_board();
    c.run_for(ms(300));
    c.hang(5, EmitterThread::Stopped);
    c.run_for(ms(300));
    assert!(c.all_know(5));
    assert!(c.notices.iter().all(|&(_, to)| to == 5), "{:?}", c.notices);

    // Only the even ranks read the board (as their drivers say): the odd
    // ones still get fabric copies, the even ones none.
    let mut c = Cluster::new(8, 1);
    for r in 0..8u32 {
        let readers: Vec<Rank> = (0..8).filter(|&o| o != r && o % 2 == 0).collect();
        let input = Input::BoardReaders { ranks: &readers };
        let _ = c.engines[r as usize].handle(c.now, input);
    }
    c.run_for(ms(300));
    c.hang(5, EmitterThread::Stopped);
    c.run_for(ms(300));
    assert!(c.all_know(5));
    let to: Vec<Rank> = c
        .notices
        .iter()
        .map(|&(_, to)| to)
        .filter(|&t| t != 5)
        .collect();
    assert!(
        !to.is_empty() && to.iter().all(|t| t % 2 == 1),
        "{:?}",
        c.notices
    );
}

#[test]
fn a_dead_leader_is_replaced_and_the_next_failure_is_still_found() {
    let mut c = Cluster::new(9, 3);
    c.run_for(ms(300));
    c.kill(0);
    assert!(c.all_know(0));
    // Rank 3 leads host 0 now: it watches host 2's leader, and host 1's
    // leader mended to it.
    assert!(c.engines[3].is_leader());
    assert_eq!(c.engines[3].stats().hosts.leader_takeovers, 1);
    assert_eq!(c.engines[3].emitter(), Some(2));
    assert_eq!(c.engines[1].emitter(), Some(3));
    c.run_for(ms(200));
    assert_eq!(c.engines[2].observer(), Some(3), "host 2 beats to rank 3");
    assert!(c.engines[3].stats().observation.heartbeats_written > 0);
    assert!(c.engines[3].stats().observation.observe_me_accepted > 0);
    // The next failure: the new leader hangs. Its same-host observer (rank 6)
    // finds it through its counter, within a timeout and a check.
    c.status[3] = Status::Hung;
    let hung_at = c.now;
    c.run_for(ms(200));
    assert!(c.all_know(3), "the hung leader was found");
    let (first_by, first_at) = c
        .events
        .iter()
        .find_map(|(by, t, e)| match e {
            Event::Failed { rank: 3, .. } => Some((*by, *t)),
            _ => None,
        })
        .expect("declared");
    assert!(
        first_at - hung_at <= ms(100 + 25 + 2),
        "{:?}",
        first_at - hung_at
    );
    assert!([6, 1].contains(&first_by), "declared by {first_by}");
    // Rank 6 leads host 0 now, alone on it.
    c.run_for(ms(300));
    assert!(c.engines[6].is_leader());
    assert_eq!(c.engines[6].local_emitter(), None);
    assert_eq!(c.engines[1].emitter(), Some(6));
    assert!(
        (0..9)
            .filter(|&r| ![0, 3].contains(&r))
            .all(|r| c.engines[r].failed() == [0, 3]),
        "nobody else declared"
    );
}

#[test]
fn a_silent_host_is_declared_in_one_notice_naming_every_rank() {
    let mut c = Cluster::new(9, 3);
    c.run_for(ms(300));
    // Host 1 loses power: no exit is seen anywhere.
    for r in [1, 4, 7] {
        c.status[r as usize] = Status::Dead;
    }
    let cut_at = c.now;
    c.run_for(ms(300));
    for r in [1, 4, 7] {
        assert!(c.all_know(r), "rank {r}");
    }
    // Host 2's leader observed host 1's: it checked the host, heard
    // nothing, and declared all three at once.
    let host_failed = c.host_failed();
    assert_eq!(host_failed, vec![(2, 1, vec![1, 4, 7])]);
    assert_eq!(c.engines[2].stats().hosts.host_checks, 1);
    assert_eq!(c.engines[2].stats().hosts.hosts_declared, 1);
    // In one timeout: the check began a quarter timeout before it was up
    // (its last beat came up to a period before the cut, the check runs
    // on the millisecond).
    let at = c.host_failed_at();
    assert!(
        at - cut_at >= ms(100 - 10) && at - cut_at <= ms(100 + 2),
        "{:?}",
        at - cut_at
    );
    for r in [1, 4, 7] {
        let events = c.failed_events(r);
        assert!(events.contains(&(2, Cause::Timeout, SILENCE)));
        assert_eq!(events.len(), 6, "each survivor once: {events:?}");
    }
    // One notice from the detector named the three: rank 2's first notice
    // copies all carry the same list (one broadcast step, not three).
    assert_eq!(c.engines[2].stats().detections_by(Cause::Timeout), 3);
    assert_eq!(c.engines[2].emitter(), Some(0), "host 2 now watches host 0");
}

#[test]
fn a_silent_leader_whose_host_answers_is_declared_alone() {
    let mut c = Cluster::new(9, 3);
    c.run_for(ms(300));
    // Leader 1 hangs; ranks 4 and 7 run and answer the host check, which
    // begins a quarter timeout early: it is declared once its timeout is
    // up, not at the answer.
    let hung_at = c.hang(1, EmitterThread::Unknown);
    while c.engines[2].stats().hosts.host_checks == 0 {
        assert!(c.now - hung_at < ms(100), "no check before the timeout");
        c.step();
    }
    c.run_for(ms(5));
    assert!(!c.engines[2].is_failed(1), "declared at the answer");
    c.run_for(ms(400));
    assert!(c.all_know(1));
    let at = c.declared_at(1).expect("declared");
    assert!(at - hung_at >= ms(100), "{:?}", at - hung_at);
    assert!(c.host_failed().is_empty(), "{:?}", c.host_failed());
    for r in [4, 7] {
        assert!(!c.engines[0].is_failed(r), "rank {r}");
    }
    assert!(c.engines[4].is_leader());
    assert_eq!(
        c.engines[2].emitter(),
        Some(4),
        "host 2 watches the new leader"
    );
}

#[test]
fn a_slow_leader_that_beats_while_its_host_is_checked_is_not_declared() {
    // Leader 1 stalls for 90 ms, its host with it (a long stall of the
    // whole host): rank 2's check of host 1 begins at 75 ms of silence,
    // unanswered; host 1 runs again before the timeout and leader 1 beats.
    // Nobody is declared.
    let mut c = Cluster::new(9, 3);
    c.run_for(ms(300));
    for r in [1, 4, 7] {
        c.hang(r, EmitterThread::Unknown);
    }
    let mut stalled = ms(0);
    while c.engines[2].stats().hosts.host_checks == 0 {
        assert!(stalled < ms(100), "no check before the timeout");
        c.step();
        stalled += ms(1);
    }
    assert!(stalled >= ms(60), "{stalled:?}");
    c.run_for(ms(90) - stalled);
    for r in [1, 4, 7] {
        c.status[r as usize] = Status::Up;
    }
    c.run_for(ms(300));
    let declared = |e: &Event| matches!(e, Event::Failed { .. } | Event::HostFailed { .. });
    assert!(
        !c.events.iter().any(|(_, _, e)| declared(e)),
        "{:?}",
        c.events
    );
    for r in 0..9 {
        assert!(c.engines[r].failed().is_empty(), "rank {r}");
    }
}

#[test]
fn a_hung_non_leader_is_found_by_its_local_observer() {
    let mut c = Cluster::new(9, 3);
    c.run_for(ms(300));
    c.status[4] = Status::Hung;
    let hung_at = c.now;
    c.run_for(ms(300));
    assert!(c.all_know(4));
    let events = c.failed_events(4);
    let (by, cause, _) = events[0];
    assert_eq!((by, cause), (7, Cause::Timeout), "{events:?}");
    assert_eq!(c.engines[7].stats().hosts.local_hangs, 1);
    let at = c.declared_at(4).expect("declared");
    // The counter says when rank 4 last woke: declared a timeout after
    // that, at the first check.
    assert!(at - hung_at <= ms(100 + 2), "{:?}", at - hung_at);
    assert_eq!(c.engines[7].local_emitter(), Some(1));
}

/// A same-host emitter whose progress thread the driver found runnable
/// (waiting for a CPU) when its counter was a timeout old is starved, not
/// hung: its observer judges it by the ceiling, `health_max` (4)
/// timeouts (with CPU hogs on 2 cores, observers that got a CPU
/// first declared emitters still waiting for theirs). Not runnable
/// (stopped, blocked): the timeout.
#[test]
fn a_starved_local_emitter_is_judged_by_the_ceiling() {
    // (what the kernel says of its thread, stillness that declares it)
    for (thread, limit) in [
        (EmitterThread::Waiting, ms(100)),
        (EmitterThread::Runnable, ms(400)),
    ] {
        let runnable = thread == EmitterThread::Runnable;
        let mut c = Cluster::new(9, 3);
        c.run_for(ms(300));
        let last_woke = c.hang(4, thread);
        c.run_for(ms(500));
        let at = c.declared_at(4).expect("declared");
        assert!(
            at >= last_woke + limit && at <= last_woke + limit + ms(2),
            "runnable {runnable}: last woke at {last_woke}, declared at {at}"
        );
        assert_eq!(c.failed_events(4)[0].0, 7);
        assert_eq!(c.engines[7].own_health(), 1, "the observer kept time");
        assert_eq!(
            c.engines[7].stats().hosts.starved_emitter_checks > 0,
            runnable,
            "checks that found it starved"
        );
        assert!(c.all_know(4));
    }
}

/// Under `FFD_QUORUM=majority` a silent same-host emitter is accused, and
/// declared once a majority confirms. One whose counter stood still for
/// the timeout while the kernel shows its progress thread stopped
/// (SIGSTOP) is declared at once, without the round: a same-host
/// observation no partition can split and no starvation can fake. The
/// round is two more waves of wake-ups of every rank (the flood, the
/// answers) before the notice's: at N = 32 on 2 cores, about 10 ms of
/// a SIGSTOP's declaration.
#[test]
fn a_local_emitter_the_kernel_shows_stopped_is_declared_without_a_round() {
    // (what the kernel says of its thread, declared with a round)
    for (thread, round) in [
        (EmitterThread::Stopped, false),
        (EmitterThread::Waiting, true),
        (EmitterThread::Unknown, true),
    ] {
        // Host 1 holds ranks 1, 4, 7: 7 watches 4.
        let mut c = Cluster::with_quorum(9, 3, QuorumMode::Majority);
        c.run_for(ms(300));
        let last_woke = c.hang(4, thread);
        c.run_for(ms(300));
        let at = c.declared_at(4).expect("declared");
        assert!(
            at >= last_woke + ms(100) && at <= last_woke + ms(102),
            "{thread:?}: last woke at {last_woke}, declared at {at}"
        );
        let (by, cause, detail) = c.failed_events(4)[0];
        assert_eq!((by, cause), (7, Cause::Timeout), "{thread:?}");
        let stats = c.engines[7].stats();
        if round {
            assert!(
                matches!(detail, FailureDetail::Silence { quorum: Some(q), .. } if 2 * q.votes > q.live),
                "{thread:?}: {detail:?}"
            );
            assert_eq!(stats.quorum.accusations, 1, "{thread:?}");
            assert_eq!(stats.hosts.stopped_emitters_declared, 0, "{thread:?}");
        } else {
            assert_eq!(detail, FailureDetail::Stopped);
            assert_eq!(stats.quorum.accusations, 0, "no round");
            assert_eq!(stats.hosts.stopped_emitters_declared, 1);
        }
        assert!(c.all_know(4), "{thread:?}");
        assert_eq!(c.engines[7].local_emitter(), Some(1), "{thread:?}: mended");
        let others: Vec<Rank> = (0..9)
            .filter(|&r| r != 4 && c.engines[0].is_failed(r))
            .collect();
        assert!(others.is_empty(), "{thread:?}: also declared {others:?}");
    }
}

/// The mend rate limit holds for local watching too: after declaring its
/// same-host emitter, a rank gives the next one a full timeout from the
/// mending, not from that rank's last wake-up, which on an overloaded
/// host may already be a timeout old (observers declared their
/// next same-host emitter at the first look, one after another).
#[test]
fn a_local_mending_gives_the_next_emitter_a_full_timeout() {
    // Host 1 holds ranks 1, 3, 5, 7, 9, 11: 9 watches 7, 7 watches 5.
    let mut c = Cluster::new(12, 2);
    c.run_for(ms(300));
    c.status[5] = Status::Hung;
    c.status[7] = Status::Hung;
    c.run_for(ms(500));
    let declared = |rank: Rank| c.declared_at(rank).expect("declared");
    let (seven, five) = (declared(7), declared(5));
    assert_eq!(c.failed_events(7)[0].0, 9);
    assert_eq!(c.failed_events(5)[0].0, 9, "by 9, after its mending");
    // Rank 5's counter was as old as 7's when 9 mended to it.
    assert!(
        five >= seven + ms(100) && five <= seven + ms(102),
        "7 declared at {seven}, 5 at {five}"
    );
}

/// Under `FFD_QUORUM=majority` a same-host emitter's silence is an
/// accusation. Meanwhile the accuser keeps waking every local check
/// interval (its wake-ups are its own counter's beats), and a suspect that refutes
/// gets a fresh timeout. Before, the accuser stopped checking: it slept
/// until the next message, its own counter stood still, its observer
/// accused it in turn, and so on round the ring (32 ranks on
/// 2 cores with CPU hogs, 10 ms timeout, every rank accused its emitter
/// within 800 ms and 8 live ranks were declared).
#[test]
fn a_refuted_local_emitter_gets_a_fresh_timeout_and_the_accuser_keeps_waking() {
    let n = 4;
    let ids = vec![0; n as usize];
    let hosts = Arc::new(Hosts::new(RingKind::Topology, &ids, 0));
    let ring = Arc::new(Ring::topology(&ids));
    let config = host_config(QuorumMode::Majority);
    let mut e = JOB.engine_on_hosts(config, ring, hosts, 2);
    assert_eq!(e.local_emitter(), Some(1));
    // Rank 1 woke last at 150 ms, then its counter stands still.
    let stale = LocalBeat {
        at: Time::ZERO + ms(150),
        digest: fold_digest(e.digest()),
        thread: EmitterThread::Unknown,
    };
    let wake = |e: &mut Engine, d: Time| e.handle_timeout(d, &readings(|_| 0, |_| Some(stale)));
    // Runs the deadlines up to `until`: when rank 2 first floods an
    // accusation of 1, and the round's nonce.
    let run = |e: &mut Engine, until: Time| -> Option<(Time, u32)> {
        serve_deadlines(e, until, Duration::ZERO, wake, |_, d, outs| {
            JOB.sent(&outs, n)
                .into_iter()
                .find_map(|(_, _, m)| match m {
                    wire::Message::Suspect {
                        suspect: 1, nonce, ..
                    } => Some((d, nonce)),
                    _ => None,
                })
        })
    };
    let (accused, nonce) = run(&mut e, Time::ZERO + ms(1000)).expect("accused");
    assert!(accused >= Time::ZERO + ms(250), "accused at {accused}");
    // The accusation is under way (it has no voters here: it would give
    // up 75 ms on): rank 2 still wakes every local check interval (50 ms:
    // half the timeout, with 4 fabric checks per timeout).
    let every = e.config().local_check_interval();
    assert_eq!(every, ms(50));
    let mut woke = accused;
    while woke < accused + ms(50) {
        let d = e.next_deadline().expect("a deadline");
        assert!(d <= woke + every, "woke at {woke}, next wake-up at {d}");
        wake(&mut e, d);
        drain(&mut e);
        woke = d;
    }
    // Rank 1 answers: withdrawn.
    let refuted_at = woke + ms(1);
    let refute = wire::Encoder::new(KEY, 1).refute(2, nonce);
    deliver_sealed(&mut e, refuted_at, &JOB.seal_numbered(&refute, 1, 2));
    let next = e.next_deadline().expect("still checking");
    assert!(next <= refuted_at + every, "next wake-up at {next}");
    // A fresh timeout from the refutation, though the counter is still
    // the old one; then accused again.
    let (again, _) = run(&mut e, refuted_at + ms(1000)).expect("accused again");
    assert!(
        again >= refuted_at + ms(100) && again <= refuted_at + ms(126),
        "refuted at {refuted_at}, accused again at {again}"
    );
}

/// A same-host emitter's wake-ups and its observer's reads come once per
/// local check interval on the same grid points, so two readings of a
/// timely emitter can be two intervals apart (one just before a wake-up,
/// the next just after the following one: 105 ms at 100 ms with the
/// grid's 2.5 ms step): no `SlowEmitter` for that; a gap of two
/// intervals plus half a timeout (a starved emitter, which the ceiling
/// keeps from a declaration) raises one.
#[test]
fn two_readings_two_local_intervals_apart_are_no_slow_emitter() {
    let n = 4;
    let ids = vec![0; n as usize];
    let hosts = Arc::new(Hosts::new(RingKind::Topology, &ids, 0));
    let ring = Arc::new(Ring::topology(&ids));
    let mut e = JOB.engine_on_hosts(host_config(QuorumMode::Off), ring, hosts, 2);
    assert_eq!(e.local_emitter(), Some(1));
    assert_eq!(e.config().local_check_interval(), ms(50));
    let t = |v: u64| Time::ZERO + Duration::from_micros(v);
    let mut slow = Vec::new();
    // (when this rank reads, the emitter's last wake-up then)
    for (now, woke) in [
        (150_000, 150_000),
        (202_500, 150_000), // read just before its wake-up at 202.5 ms
        (255_000, 255_000), // and just after the next: 105 ms apart
        (307_500, 307_500),
        (462_500, 462_500), // starved for 155 ms (two intervals + half)
    ] {
        let beat = LocalBeat {
            at: t(woke),
            digest: fold_digest(e.digest()),
            thread: EmitterThread::Runnable,
        };
        e.handle_timeout(t(now), &readings(|_| 0, |_| Some(beat)));
        for o in drain(&mut e) {
            match o {
                Output::Event(Event::SlowEmitter { rank, stalled_for }) => {
                    slow.push((now, rank, stalled_for));
                }
                Output::Event(Event::Failed { .. }) => panic!("declared at {now} µs"),
                _ => {}
            }
        }
    }
    assert_eq!(slow, vec![(462_500, 1, ms(155))]);
}

/// The start-up grace gives way to the first wake-up read (the emitter is
/// up): a rank that stops inside the grace is declared a timeout after its
/// last wake-up, not a timeout after the grace. (The baselines of a
/// mending, a refutation or a stall of the observer's own give way only to
/// a wake-up since.)
#[test]
fn a_rank_stopped_inside_the_start_up_grace_is_timed_from_its_last_wake_up() {
    let mut c = Cluster::new(9, 3); // start-up grace 100 ms, timeout 100 ms
    // Its first wake-up: a local check interval (50 ms) from the start.
    c.run_for(ms(60));
    c.status[4] = Status::Hung;
    let last_woke = c.counters[4].expect("rank 4 woke").at;
    assert!(last_woke < Time::ZERO + ms(100), "inside the grace");
    c.run_for(ms(500));
    let at = c.declared_at(4).expect("declared");
    assert!(
        at >= last_woke + ms(100) && at <= last_woke + ms(102),
        "last woke at {last_woke}, declared at {at}"
    );
}

#[test]
fn host_groups_must_describe_the_ring() {
    let hosts = Arc::new(Hosts::new(RingKind::Topology, &[0u32, 0, 1], 0));
    let err = Engine::new(
        Arc::new(EngineConfig::default()),
        Arc::new(Ring::by_rank(4)),
        0,
        JOB.keys(),
        Time::ZERO,
        EngineOptions {
            hosts: Some(hosts),
            ..EngineOptions::default()
        },
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "the host groups name 3 ranks, the ring 4");
}

#[test]
fn an_excluded_rank_raises_nothing_from_its_counter_or_host_checks() {
    let mut c = Cluster::new(9, 3);
    c.run_for(ms(300));
    // Rank 4 hangs, is declared by its same-host observer, then runs again:
    // the first notice it finds excludes it.
    c.status[4] = Status::Hung;
    c.run_for(ms(300));
    assert!(c.all_know(4));
    c.status[4] = Status::Up;
    c.run_for(ms(300));
    let excluded_at = c
        .events
        .iter()
        .find_map(|(by, t, e)| (*by == 4 && matches!(e, Event::SelfExcluded { .. })).then_some(*t))
        .expect("rank 4 learned it was excluded");
    // Its emitter's counter kept moving, its own timers were due: nothing
    // more came from it.
    let after: Vec<&Event> = c
        .events
        .iter()
        .filter(|(by, t, _)| *by == 4 && *t > excluded_at)
        .map(|(_, _, e)| e)
        .collect();
    assert!(after.is_empty(), "{after:?}");
}

#[test]
fn under_a_majority_a_silent_host_is_one_accusation_and_one_notice() {
    let mut c = Cluster::with_quorum(9, 3, QuorumMode::Majority);
    c.run_for(ms(300));
    for r in [1, 4, 7] {
        c.status[r as usize] = Status::Dead;
    }
    let cut_at = c.now;
    c.run_for(ms(600));
    for r in [1, 4, 7] {
        assert!(c.all_know(r), "rank {r}");
        let events = c.failed_events(r);
        // Declared by host 2's leader once 4 of the 6 live ranks (with
        // itself) confirmed: each survivor learned it once.
        let confirmed = events.iter().any(|(by, cause, detail)| {
            *by == 2
                && *cause == Cause::Timeout
                && matches!(
                    detail,
                    FailureDetail::Silence {
                        quorum: Some(q),
                        ..
                    } if 2 * q.votes > q.live
                )
        });
        assert!(confirmed, "rank {r}: {events:?}");
        assert_eq!(events.len(), 6, "each survivor once: {events:?}");
    }
    // One accusation of the host, not one per rank, and one notice
    // naming the three with a host-failed event.
    assert_eq!(c.host_failed(), vec![(2, 1, vec![1, 4, 7])]);
    assert_eq!(c.engines[2].stats().quorum.accusations, 1);
    assert_eq!(c.engines[2].stats().hosts.hosts_declared, 1);
    let at = c.host_failed_at();
    // A timeout, the host check's quarter, then a round of votes.
    assert!(at - cut_at <= ms(100 + 25 + 25 + 100), "{:?}", at - cut_at);
    for r in [0, 2, 3, 5, 6, 8] {
        assert_eq!(c.engines[r].failed(), [1, 4, 7], "rank {r}");
    }
}

#[test]
fn a_rank_of_an_accused_host_refutes_the_accusation() {
    let mut c = Cluster::with_quorum(9, 3, QuorumMode::Majority);
    c.run_for(ms(300));
    // Rank 2 accuses host 1 (its leader, rank 1, with SUSPECT_HOST):
    // rank 4 is on host 1 and alive, so it refutes; rank 5 (host 2) takes
    // a ballot and votes instead.
    let suspect = wire::Encoder::new(KEY, 2).suspect(2, 77, 1, 0, wire::SUSPECT_HOST);
    let bytes = JOB.seal_numbered(&suspect, 1_000_000, 4);
    let mut refuted = false;
    for o in deliver_from(&mut c.engines[4], c.now, 2, &bytes) {
        if let Output::Send { to: 2, message } = &o {
            refuted |= message.kind() == Some(Kind::Refute);
            assert_ne!(
                message.kind(),
                Some(Kind::Vote),
                "a rank of the host never votes"
            );
        }
    }
    assert!(refuted, "rank 4 refutes the accusation of its host");
}

#[test]
fn a_host_whose_leader_is_proven_dead_is_checked_whole_at_once() {
    // Every process of host 1 is killed together (the kernel lives, so
    // the link to the leader is refused: proof). Host 2's leader, rank 2,
    // watches rank 1: instead of mending to rank 4 and then 7, finding each
    // dead only when its own link fails, it probes both at once and
    // accuses the rest of the host as one.
    let mut c = Cluster::with_quorum(9, 3, QuorumMode::Majority);
    c.run_for(ms(300));
    assert_eq!(c.engines[2].emitter(), Some(1));
    for r in [1, 4, 7] {
        c.status[r as usize] = Status::Dead;
    }
    let killed_at = c.now;
    let _ = c.engines[2].handle(
        c.now,
        Input::TransportError {
            peer: 1,
            kind: TransportErrorKind::Send,
            evidence: Evidence::Proof,
            said: FabricSaid::Nothing,
        },
    );
    let mut queue = VecDeque::new();
    c.drain(2, &mut queue);
    c.deliver(queue);
    c.run_for(ms(400));
    for r in [1, 4, 7] {
        assert!(c.all_know(r), "rank {r}");
    }
    assert_eq!(c.failed_events(1)[0].1, Cause::InBand);
    assert_eq!(c.host_failed(), vec![(2, 1, vec![4, 7])]);
    assert_eq!(c.engines[2].stats().hosts.host_checks, 1);
    let at = c.host_failed_at();
    // A quarter timeout for the probes, then a round of votes: well
    // inside the timeout that mending to rank 4 first would take.
    assert!(at - killed_at <= ms(25 + 50), "{:?}", at - killed_at);
    for r in [0, 2, 3, 5, 6, 8] {
        assert_eq!(c.engines[r].failed(), [1, 4, 7], "rank {r}");
    }
}

#[test]
fn when_a_leader_exits_and_its_host_follows_the_observer_checks_the_rest_at_once() {
    // Rank 1, host 1's leader, is killed; ranks 4 and 7 see the exit, rank
    // 4 broadcasts it, and then both are killed too before anyone else
    // hears from them (a whole host's processes killed one after another).
    // Rank 2, which watched rank 1, mends to rank 4 and probes the rest of
    // host 1 at once instead of waiting for rank 4's link.
    let mut c = Cluster::with_quorum(9, 3, QuorumMode::Majority);
    c.run_for(ms(300));
    assert_eq!(c.engines[2].emitter(), Some(1));
    c.status[1] = Status::Dead;
    let mut queue = VecDeque::new();
    for r in [4, 7] {
        let _ = c.engines[r as usize].handle(
            c.now,
            Input::Exited {
                rank: 1,
                seen_by: &[],
            },
        );
        c.drain(r, &mut queue);
    }
    c.status[4] = Status::Dead;
    c.status[7] = Status::Dead;
    let killed_at = c.now;
    c.deliver(queue);
    c.run_for(ms(400));
    for r in [1, 4, 7] {
        assert!(c.all_know(r), "rank {r}");
    }
    assert_eq!(c.host_failed(), vec![(2, 1, vec![4, 7])]);
    let at = c.host_failed_at();
    assert!(at - killed_at <= ms(25 + 50), "{:?}", at - killed_at);
    for r in [0, 2, 3, 5, 6, 8] {
        assert_eq!(c.engines[r].failed(), [1, 4, 7], "rank {r}");
    }
}

/// Host 1's leader, rank 1, is killed; ranks 4 and 7 see the exit and
/// broadcast it. Rank 2, which watched rank 1, mends to rank 4 and probes
/// the rest of host 1: both still run and answer, so the check ends. The
/// start-up grace, and so the link grace, is 1 s as in the runtime.
/// Returns the cluster just after the mending.
fn host_leader_killed(quorum: QuorumMode) -> Cluster {
    let config = Arc::new(EngineConfig {
        startup_grace: Some(ms(1000)),
        ..(*host_config(quorum)).clone()
    });
    let mut c = Cluster::with_config(9, 3, config);
    c.run_for(ms(1300));
    assert_eq!(c.engines[2].emitter(), Some(1));
    c.kill(1);
    assert_eq!(
        c.engines[2].emitter(),
        Some(4),
        "mended to host 1's next rank"
    );
    assert_eq!(
        c.engines[2].stats().hosts.host_checks,
        1,
        "checked host 1 at once"
    );
    c
}

/// [`host_leader_killed`] (with `quorum`), and then 4 and 7 are killed too, before rank
/// 4's link to rank 2 is up and with nobody left on their host to see it
/// (a whole host's processes killed one after another; seen with `ffd
/// run --kill-host` once same-host exits were handled in a fraction of a
/// millisecond). Returns the cluster and when 4 and 7 died.
fn host_killed_after_answering(quorum: QuorumMode) -> (Cluster, Time) {
    let mut c = host_leader_killed(quorum);
    // Rank 4 took the ObserveMe and wrote its first beat at once; on the
    // fabric that write needs the new connection, which never came up.
    c.slots.retain(|&(observer, _), _| observer != 2);
    c.status[4] = Status::Dead;
    c.status[7] = Status::Dead;
    let killed_at = c.now;
    (c, killed_at)
}

/// Host 1 was declared as one, by rank 2, within `bound` of `since`, and
/// nobody holds anyone else failed.
fn assert_host_1_declared_within(c: &Cluster, since: Time, bound: Duration) {
    for r in [4, 7] {
        assert!(c.all_know(r), "rank {r}");
    }
    assert_eq!(c.host_failed(), vec![(2, 1, vec![4, 7])]);
    let at = c.host_failed_at();
    assert!(at - since <= bound, "{:?}", at - since);
    for r in [0, 2, 3, 5, 6, 8] {
        assert_eq!(c.engines[r].failed(), [1, 4, 7], "rank {r}");
    }
}

#[test]
fn a_mended_leader_that_answered_the_host_check_and_then_died_unseen_is_rechecked_in_a_quarter_timeout()
 {
    // Rank 2 re-checks host 1 once the new emitter has been still for a
    // quarter timeout since the mending, instead of waiting the link
    // grace and then a timeout of silence.
    let (mut c, killed_at) = host_killed_after_answering(QuorumMode::Majority);
    c.run_for(ms(400));
    assert_eq!(c.engines[2].stats().hosts.host_checks, 2, "one re-check");
    // A quarter for the new emitter, a quarter for the probes, a round of
    // votes: half a timeout and the round, well inside one timeout.
    assert_host_1_declared_within(&c, killed_at, ms(25 + 25 + 20));
}

#[test]
fn a_mended_leader_that_beat_and_then_died_with_its_host_unseen_is_rechecked_in_a_quarter_timeout()
{
    // As above, but rank 4's link comes up and it beats to rank 2 for a
    // while before it and rank 7 are killed: its silence is a quarter
    // timeout old when rank 2 re-checks the host, not a whole one.
    let mut c = host_leader_killed(QuorumMode::Majority);
    c.run_for(ms(30));
    assert!(
        c.engines[2].stats().hosts.host_checks >= 1 && c.host_failed().is_empty(),
        "a beating emitter's host is not declared"
    );
    c.status[4] = Status::Dead;
    c.status[7] = Status::Dead;
    let killed_at = c.now;
    c.run_for(ms(400));
    assert_host_1_declared_within(&c, killed_at, ms(10 + 25 + 25 + 20));
}

#[test]
fn a_mended_leader_that_hangs_while_its_host_runs_is_found_by_its_host_alone() {
    // Rank 4, the new emitter, is stopped just after the mending, before
    // its first beat; rank 7 runs on. Rank 2's re-checks are answered by
    // rank 7: no host is declared; rank 4 is found hung by rank 7, its
    // same-host observer, in a timeout.
    let mut c = host_leader_killed(QuorumMode::Majority);
    c.slots.retain(|&(observer, _), _| observer != 2);
    let stopped_at = c.hang(4, EmitterThread::Unknown);
    c.run_for(ms(400));
    assert!(c.engines[2].stats().hosts.host_checks >= 2, "re-checked");
    assert!(c.host_failed().is_empty(), "{:?}", c.host_failed());
    assert!(c.all_know(4));
    assert!((0..9).all(|r| r == 4 || r == 1 || !c.engines[2].is_failed(r)));
    assert!(!c.engines[0].is_failed(7) && !c.engines[2].is_failed(7));
    let at = c.declared_at(4).expect("declared");
    assert!(at - stopped_at >= ms(100), "{:?}", at - stopped_at);
}

#[test]
fn a_linked_mended_leader_that_hangs_is_checked_at_the_check_interval_not_in_a_spin() {
    // Rank 4's link to rank 2 comes up at the mending, then rank 4 hangs
    // (rank 7 runs): the close watch's re-checks and the check of its
    // silence a quarter timeout before its timeout fall due together;
    // rank 2 keeps to its check interval meanwhile.
    let mut c = host_leader_killed(QuorumMode::Majority);
    let _ = c.engines[2].handle(c.now, Input::Sent { to: 4 });
    c.slots.retain(|&(observer, _), _| observer != 2);
    c.hang(4, EmitterThread::Unknown);
    let checks = c.engines[2].stats().observation.slot_checks;
    c.run_for(ms(100));
    let checks = c.engines[2].stats().observation.slot_checks - checks;
    assert!(checks <= 3 * 4, "{checks} checks in a timeout");
    c.run_for(ms(300));
    assert!(c.all_know(4));
    assert!(c.host_failed().is_empty() && !c.engines[2].is_failed(7));
}

#[test]
fn without_a_quorum_a_host_that_stalls_after_its_leader_died_is_not_declared() {
    // FFD_QUORUM=off: no vote, no refutation. Host 1's next rank, linked
    // and beating, stalls with its whole host for 60 ms just after the
    // mending: the close watch's re-check finds nobody answering, but
    // without a quorum it declares nobody before a whole limit of
    // stillness, and the host runs again before that.
    let mut c = host_leader_killed(QuorumMode::Off);
    let _ = c.engines[2].handle(c.now, Input::Sent { to: 4 });
    c.run_for(ms(5));
    for r in [4, 7] {
        c.hang(r, EmitterThread::Unknown);
    }
    c.run_for(ms(60));
    assert!(c.engines[2].stats().hosts.host_checks >= 2, "re-checked");
    for r in [4, 7] {
        c.status[r as usize] = Status::Up;
    }
    c.run_for(ms(300));
    assert!(c.host_failed().is_empty(), "{:?}", c.host_failed());
    for r in [0, 2, 3, 5, 6, 8] {
        assert_eq!(c.engines[r].failed(), [1], "rank {r}");
    }
}

#[test]
fn an_exit_left_to_a_broadcaster_that_dies_much_later_is_not_sent_again() {
    // Rank 3 broadcast rank 0's exit and ran on; it dies two timeouts
    // and more later: rank 6 sends its own exit, not rank 0's again.
    let mut c = Cluster::new(12, 3);
    c.run_for(ms(300));
    c.kill(0);
    assert!(c.all_know(0));
    c.run_for(ms(300));
    c.kill(3);
    assert!(c.all_know(3));
    for r in [6, 9] {
        assert_eq!(
            c.engines[r].stats().hosts.orphaned_exits_broadcast,
            0,
            "rank {r}"
        );
    }
}

/// [`host_killed_after_answering`] without a quorum, run until rank 2's
/// re-check of host 1 has begun (a quarter timeout after the mending).
fn recheck_begun() -> Cluster {
    let (mut c, killed_at) = host_killed_after_answering(QuorumMode::Off);
    while c.engines[2].stats().hosts.host_checks < 2 {
        assert!(c.now - killed_at < ms(60), "no re-check");
        c.step();
    }
    c
}

#[test]
fn a_host_recheck_whose_emitter_links_meanwhile_declares_nobody() {
    // As above, but while the re-check's probes are out rank 4's link to
    // rank 2 comes up (an ObserveMe completes): the emitter runs as far as
    // rank 2 can tell, so the unanswered probes declare nobody, and rank 4
    // is judged from the link instead.
    let mut c = recheck_begun();
    let linked_at = c.now;
    let _ = c.engines[2].handle(c.now, Input::Sent { to: 4 });
    c.run_for(ms(30));
    assert!(
        c.host_failed().is_empty() && !c.engines[2].is_failed(4),
        "the re-check declared an emitter whose link came up"
    );
    // Its stillness from the link on: a quarter timeout, then the next
    // re-check's window.
    c.run_for(ms(200));
    assert!(c.all_know(4) && c.all_know(7));
    let at = c.declared_at(4).expect("declared");
    assert!(at - linked_at >= ms(25 + 25), "{:?}", at - linked_at);
}

#[test]
fn a_host_recheck_whose_emitter_is_declared_by_others_meanwhile_declares_the_rest() {
    // As above; while the re-check's probes are out, the news that rank 4
    // failed reaches rank 2 late (its detector, on host 1, died with it).
    // Rank 2 mends to rank 7, but the window closes with no answer from
    // host 1: rank 7 is declared with it, not a mending and a re-check
    // (another timeout) later.
    let mut c = recheck_begun();
    let told_at = c.now;
    let _ = c.engines[2].handle(
        c.now,
        Input::BoardNotice {
            failed: &[4],
            detector: 7,
        },
    );
    c.run_for(ms(60));
    assert!(c.engines[2].is_failed(4));
    let at = c.declared_at(7).expect("rank 7 declared with the window");
    assert!(at - told_at <= ms(25 + 5), "{:?}", at - told_at);
    c.run_for(ms(100));
    assert!(c.all_know(4) && c.all_know(7));
}

/// Shared memory cannot be partitioned: a job whose ranks all share one
/// host has no minority to leave, so an accusation whose votes do not come
/// (here none can: a lone Engine, its same-host emitter's counter still and
/// its thread neither runnable nor stopped) goes on with new rounds and
/// never excludes its accuser for want of a quorum. The same accuser on a
/// job of two hosts gives up and excludes itself, as a cut minority must.
#[test]
fn a_one_host_job_never_excludes_itself_for_want_of_a_quorum() {
    let run = |hosts_of: &[u32]| -> (ffd_protocol::Participation, u64) {
        let hosts = Arc::new(Hosts::new(RingKind::Topology, hosts_of, 0));
        let ring = Arc::new(Ring::topology(hosts_of));
        let config = host_config(QuorumMode::Majority);
        let mut e = JOB.engine_on_hosts(config, ring, hosts, 2);
        let emitter = e.local_emitter().expect("a same-host emitter");
        let stale = LocalBeat {
            at: Time::ZERO + ms(150),
            digest: fold_digest(e.digest()),
            thread: EmitterThread::Waiting,
        };
        // Twenty timeouts of silence, every deadline served.
        let end = Time::ZERO + ms(2_000);
        let wake = |e: &mut Engine, d: Time| {
            e.handle_timeout(d, &readings(|_| 0, |r| (r == emitter).then_some(stale)));
        };
        serve_deadlines(&mut e, end, Duration::ZERO, wake, |e, _, _| {
            (e.participation() == ffd_protocol::Participation::Excluded).then_some(())
        });
        (e.participation(), e.stats().quorum.accusation_rounds)
    };
    let (one_host, rounds) = run(&[0, 0, 0, 0]);
    assert_eq!(one_host, ffd_protocol::Participation::Active);
    assert!(
        rounds >= 5,
        "the accusation goes on with new rounds: {rounds}"
    );
    let (two_hosts, _) = run(&[0, 0, 0, 0, 1, 1, 1, 1]);
    assert_eq!(two_hosts, ffd_protocol::Participation::Excluded);
}
