//! An in-process bootstrap: threads of one process standing in for ranks,
//! for tests and the simulator's smoke runs.
//!
//! Owns: a reusable allgather over a mutex and a condition variable. Must
//! not: wait without a bound. A member that times out fails the whole group,
//! and a member dropped while others wait for it fails their round, so a
//! broken test ends with an error on every thread instead of a hang.

#![forbid(unsafe_code)]

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{Bootstrap, BootstrapError, MAX_CONTRIBUTION};
use crate::protocol::Rank;
use crate::protocol::ranks::format_ranks;

/// How long a member waits for the others in one round unless told otherwise.
pub const DEFAULT_IN_PROCESS_TIMEOUT: Duration = Duration::from_secs(10);

/// One rank's handle on an in-process group; see [`InProcessBootstrap::group`].
pub struct InProcessBootstrap {
    rank: Rank,
    group: Arc<Group>,
    /// Rounds this member has completed.
    rounds: u32,
}

/// One in-process group, held by each of its members' handles: its size,
/// its bound, and the round state under a mutex.
struct Group {
    size: u32,
    timeout: Duration,
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    /// Rounds completed by the group.
    completed: u32,
    slots: Vec<Option<Vec<u8>>>,
    arrived: u32,
    /// The last completed round's contributions.
    result: Arc<Vec<Vec<u8>>>,
    /// Members that dropped their handle, with the rounds they had completed.
    left: Vec<(Rank, u32)>,
    /// Set when a member timed out: every later call fails with it.
    failed: Option<String>,
}

impl InProcessBootstrap {
    /// `size` handles, one per rank, waiting at most 10 s per round.
    pub fn group(size: u32) -> Result<Vec<InProcessBootstrap>, BootstrapError> {
        InProcessBootstrap::group_with_timeout(size, DEFAULT_IN_PROCESS_TIMEOUT)
    }

    /// `size` handles whose every wait is bounded by `timeout`.
    pub fn group_with_timeout(
        size: u32,
        timeout: Duration,
    ) -> Result<Vec<InProcessBootstrap>, BootstrapError> {
        if size == 0 {
            return Err(BootstrapError::Invalid(
                "a group needs at least one rank".into(),
            ));
        }
        let group = Arc::new(Group {
            size,
            timeout,
            state: Mutex::new(State {
                completed: 0,
                slots: vec![None; size as usize],
                arrived: 0,
                result: Arc::new(Vec::new()),
                left: Vec::new(),
                failed: None,
            }),
            changed: Condvar::new(),
        });
        Ok((0..size)
            .map(|rank| InProcessBootstrap {
                rank,
                group: Arc::clone(&group),
                rounds: 0,
            })
            .collect())
    }
}

fn lock(group: &Group) -> MutexGuard<'_, State> {
    // A panicking member must not take the others down with a poison
    // panic; the state is consistent at every unlock.
    group.state.lock().unwrap_or_else(|p| p.into_inner())
}

impl Bootstrap for InProcessBootstrap {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.group.size
    }

    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        if mine.len() > MAX_CONTRIBUTION {
            return Err(BootstrapError::TooLarge {
                rank: self.rank,
                len: mine.len() as u64,
            });
        }
        let round = self.rounds + 1;
        let group = Arc::clone(&self.group);
        let size = group.size;
        let mut state = lock(&group);
        if let Some(why) = &state.failed {
            return Err(BootstrapError::GroupFailed(why.clone()));
        }
        if let Some(&(rank, _)) = state.left.first() {
            return Err(BootstrapError::PeerLeft { rank, round });
        }
        state.slots[self.rank as usize] = Some(mine.to_vec());
        state.arrived += 1;
        if state.arrived == size {
            let all = state
                .slots
                .iter_mut()
                .map(|s| s.take().unwrap_or_default())
                .collect();
            state.result = Arc::new(all);
            state.arrived = 0;
            state.completed = round;
            group.changed.notify_all();
        }
        let deadline = Instant::now() + group.timeout;
        // Each pass either returns or waits until notified or the deadline.
        loop {
            if state.completed >= round {
                self.rounds = round;
                return Ok(state.result.as_ref().clone());
            }
            if let Some(why) = &state.failed {
                return Err(BootstrapError::GroupFailed(why.clone()));
            }
            if let Some(&(rank, _)) = state.left.iter().find(|&&(_, done)| done < round) {
                return Err(BootstrapError::PeerLeft { rank, round });
            }
            let now = Instant::now();
            if now >= deadline {
                let missing: Vec<Rank> = (0..size)
                    .filter(|&r| state.slots[r as usize].is_none())
                    .collect();
                let err = BootstrapError::Timeout {
                    after: group.timeout,
                    waiting: format!("{} in round {round}", format_ranks(&missing)),
                };
                state.failed = Some(format!("rank {}: {err}", self.rank));
                group.changed.notify_all();
                return Err(err);
            }
            state = self
                .group
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl Drop for InProcessBootstrap {
    fn drop(&mut self) {
        let (rank, done) = (self.rank, self.rounds);
        let mut state = lock(&self.group);
        state.left.push((rank, done));
        self.group.changed.notify_all();
    }
}
