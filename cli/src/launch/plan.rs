//! What `ffd run` runs: a [`Plan`], the job's settings, faults and
//! environment, and what each agent's environment is made of.
//!
//! Owns: the plan's fields and the variables of one agent
//! ([`Plan::env_of`]). Must not: start anything (the launcher does).

use std::path::Path;
use std::time::Duration;

use super::cluster::NetnsPlan;
use super::fault::Schedule;
use super::launcher::DEFAULT_TAIL;
use super::timeline::RunInfo;
use ffd::config::var;
use ffd::protocol::Rank;

/// What to run: the job's settings, faults and environment.
#[derive(Clone, Debug)]
pub struct Plan {
    pub info: RunInfo,
    pub schedule: Schedule,
    /// When every running agent starts an agreement (`--agree`), ascending.
    pub agree: Vec<Duration>,
    /// Run length after start; default: [`DEFAULT_TAIL`] after the last
    /// fault or agreement.
    pub duration: Option<Duration>,
    /// Variables for every agent (on top of the inherited environment).
    pub env: Vec<(String, String)>,
    /// Fake this many hosts: `FFD_HOSTNAME=node<rank % hosts>`.
    pub hosts: Option<u32>,
    /// Emulate hosts with namespaces (`--netns`): rank r runs in host
    /// r mod H, whose hostname is `node<h>`.
    pub netns: Option<NetnsPlan>,
    /// Print every agent line, not only the first detection and the all-notified line.
    pub verbose: bool,
    /// CPUs to pin the agents' progress threads to, each host's ranks
    /// spread over them as a host spreads its ranks over its cores, each
    /// host from its own offset ([`Plan::core_index`]); empty: each
    /// agent's own `FFD_CORE` decides.
    pub cores: Vec<usize>,
}

impl Plan {
    /// The host of rank `rank` (rank mod H) when the job has hosts, faked
    /// (`--hosts`) or emulated (`--netns`).
    pub fn host_of(&self, rank: Rank) -> Option<u32> {
        self.host_count().filter(|&h| h > 0).map(|h| rank % h)
    }

    /// The number of hosts, faked (`--hosts`) or emulated (`--netns`).
    fn host_count(&self) -> Option<u32> {
        self.hosts.or(self.netns.map(|n| n.hosts))
    }

    /// Where rank `rank`'s progress thread goes among [`Plan::cores`]
    /// (modulo their number, counted from the top): its host plus its
    /// index among its host's ranks. Host h's ranks take consecutive CPUs
    /// from the h-th, as a host's ranks are bound to cores of their own,
    /// and the job stays balanced over the CPUs. By `rank` alone, as
    /// before, with as many hosts as CPUs (or a multiple) every rank of a
    /// host shared one CPU, and a killed rank's host mates waited there
    /// for its teardown before they could handle its exit (a lift does
    /// not move a thread `FFD_CORE` pins: docs/design.md §6 "Runtime").
    pub fn core_index(&self, rank: Rank) -> usize {
        core_index(rank, self.host_count())
    }

    /// When the launcher starts the shutdown, from job start.
    pub fn end(&self) -> Duration {
        self.duration.unwrap_or_else(|| {
            let last_agree = self.agree.last().copied();
            if self.schedule.is_empty() && last_agree.is_none() {
                DEFAULT_TAIL
            } else {
                self.schedule.last().max(last_agree.unwrap_or_default()) + DEFAULT_TAIL
            }
        })
    }

    /// The variables that make rank `rank` an agent of this job, whose
    /// rendezvous is at `bootstrap` and secret in `secret_file`.
    pub fn env_of(&self, rank: Rank, bootstrap: &str, secret_file: &Path) -> Vec<(String, String)> {
        let mut env = self.env.clone();
        env.push((var::BOOTSTRAP.into(), bootstrap.into()));
        env.push((var::RANK.into(), rank.to_string()));
        env.push((var::SIZE.into(), self.info.ranks.to_string()));
        env.push((
            var::SECRET_FILE.into(),
            secret_file.to_string_lossy().into_owned(),
        ));
        if !self.cores.is_empty() {
            let at = self.cores.len() - 1 - self.core_index(rank) % self.cores.len();
            env.push((var::CORE.into(), self.cores[at].to_string()));
        }
        let pinned = self.netns.is_some_and(|n| n.pin_hostname);
        if self.hosts.is_some() || pinned {
            if let Some(host) = self.host_of(rank) {
                env.push((var::HOSTNAME.into(), format!("node{host}")));
            }
        }
        env
    }
}

/// [`Plan::core_index`] of `rank` in a job of `hosts` hosts (none: by rank).
fn core_index(rank: Rank, hosts: Option<u32>) -> usize {
    match hosts.filter(|&h| h > 0) {
        Some(h) => (rank % h) as usize + (rank / h) as usize,
        None => rank as usize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU of each of `n` ranks over `hosts` hosts and `cpus` CPUs.
    fn cpus_of(n: Rank, hosts: u32, cpus: usize) -> Vec<usize> {
        (0..n).map(|r| core_index(r, Some(hosts)) % cpus).collect()
    }

    #[test]
    fn a_hosts_ranks_spread_over_the_cpus_and_the_job_stays_balanced() {
        for cpus in [2, 4] {
            let of = cpus_of(16, 4, cpus);
            // Host 1 of 4 is ranks 1, 5, 9, 13: by rank alone all of them
            // were on one CPU.
            let host_1: Vec<usize> = [1, 5, 9, 13].iter().map(|&r| of[r]).collect();
            assert!(
                host_1.windows(2).all(|w| w[0] != w[1]),
                "{cpus} CPUs: {host_1:?}"
            );
            let per_cpu: Vec<usize> = (0..cpus)
                .map(|c| of.iter().filter(|&&x| x == c).count())
                .collect();
            assert!(
                per_cpu.iter().all(|&k| k == 16 / cpus),
                "{cpus} CPUs: {per_cpu:?}"
            );
        }
        // One rank a host: by rank, as before.
        assert_eq!(cpus_of(8, 8, 2), [0, 1, 0, 1, 0, 1, 0, 1]);
        assert_eq!(core_index(5, None), 5);
    }
}
