//! How often the progress thread reads its queue while an agreement or a
//! view change is under way (`docs/design.md` §4.10 "Agreement and views"),
//! and which ranks need to.
//!
//! Owns: the poll interval, its bound, and the rule that exempts a rank
//! whose agreement messages all come through its host's mailboxes. Must
//! not: read the Engine but through what it is handed.

use std::time::{Duration, Instant};

use crate::protocol::{Hosts, Rank};

/// While a one-host round nobody waits on is open here (`iagree`), the
/// thread sleeps at most this long between turns, for at most one
/// timeout from when it began: nothing wakes it when the round is decided
/// in the host's segment (ringing it from the exit-word thread measured
/// slower, docs/design.md §4.10 "Agreement and views"). Measured with `benches/agreement.py`'s
/// jobs on 2 cores: p50 6.2 -> 0.20 ms at N = 4, 25 -> 0.91 ms at N = 16.
/// The bound keeps a participant that never calls (an agreement waits
/// for every live rank) from costing the others more than one timeout of
/// these wake-ups; nothing changes while none is under way. The interval
/// grows with the ranks per CPU of the host ([`agreement_poll_every`]):
/// 32 ranks on 2 cores turning every 100 µs would ask for several cores.
pub(super) const AGREEMENT_POLL: Duration = Duration::from_micros(100);

/// While an agreement or a view change whose messages come over the
/// fabric is under way here, the thread reads its queue at least this
/// often, for at most one timeout: a safety net only. A message wakes the
/// thread through the queue's wait fd (`fi_trywait`, then ppoll); with
/// `tcp;ofi_rxm` no wake-up was missed in hundreds of agreements, and
/// reading every 100 µs instead cost more than it saved (`ffd run -n 16
/// --netns 4`, 40 agreements a run, 4 interleaved pairs: p50 1.03 ms
/// polled every 100 µs, 0.91 not polled; `--hosts 4` and `FFD_LOCAL=off`
/// the same way). The `sockets` provider missed some (maxima 7.4 ms
/// unpolled against 3.4 at 100 µs): this bounds what one costs.
pub(super) const FABRIC_POLL: Duration = Duration::from_millis(1);

/// How often to turn while an agreement is under way here: every
/// `every` ([`agreement_poll_every`]) while a one-host round nobody
/// waits on is open (`unattended`), else every [`FABRIC_POLL`] if this
/// rank's agreement messages come over the fabric (`fabric`,
/// [`polls_agreements`]; `every` if longer, on a host of more than 20
/// ranks a CPU); `None`: its messages wake it.
pub(super) fn poll_interval(unattended: bool, fabric: bool, every: Duration) -> Option<Duration> {
    if unattended {
        Some(every)
    } else {
        // No denser than a round's poll on a crowded host.
        fabric.then_some(FABRIC_POLL.max(every))
    }
}

/// The poll interval for `local_ranks` ranks of this host on `cpus` CPUs:
/// [`AGREEMENT_POLL`] for every two ranks per CPU (rounded up), so that
/// the host's ranks together read their queues about twice per CPU every
/// [`AGREEMENT_POLL`].
pub(super) fn agreement_poll_every(local_ranks: usize, cpus: usize) -> Duration {
    let per_cpu = local_ranks.max(1).div_ceil(cpus.max(1) * 2);
    AGREEMENT_POLL.saturating_mul(u32::try_from(per_cpu).unwrap_or(u32::MAX))
}

/// The sleep cap at `now` (`every` apart): `Some` while an agreement that
/// began at `since` is under way and at most `bound` old.
pub(super) fn agreement_poll(
    since: Option<Instant>,
    now: Instant,
    bound: Duration,
    every: Duration,
) -> Option<Duration> {
    let since = since?;
    (now.saturating_duration_since(since) <= bound).then_some(every)
}

/// Whether this rank's agreement messages come over the fabric, so that
/// it reads its queue every [`FABRIC_POLL`] while an agreement is under
/// way: a rank whose every agreement message comes through its host's
/// mailboxes (`by_mail`) is woken by the mail itself (its doorbell or
/// mail word) and needs no safety net. That is a rank other than its host's head (the host's
/// lowest rank, or the root on the root's host, which is then that rank)
/// while the head is not gone: its parent in the tree over hosts is the
/// head and its children are of its host. The head, a rank without host
/// groups or mailboxes, and every rank of a host whose head is gone (its
/// ranks are adopted by another host's head) poll.
pub(super) fn polls_agreements(
    hosts: Option<&std::sync::Arc<Hosts>>,
    me: Rank,
    by_mail: bool,
    is_gone: impl Fn(Rank) -> bool,
) -> bool {
    let Some(hosts) = hosts.filter(|_| by_mail) else {
        return true;
    };
    match hosts.members(hosts.host_of(me)).first() {
        Some(&head) => head == me || is_gone(head),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The agreement poll caps sleeps only while an agreement is under way
    /// and for one timeout from its start; none under way, none after.
    #[test]
    fn the_agreement_poll_lasts_one_timeout_at_most() {
        let t0 = Instant::now();
        let timeout = Duration::from_millis(100);
        let every = AGREEMENT_POLL;
        assert_eq!(agreement_poll(None, t0, timeout, every), None);
        assert_eq!(agreement_poll(Some(t0), t0, timeout, every), Some(every));
        assert_eq!(
            agreement_poll(Some(t0), t0 + timeout, timeout, every),
            Some(every)
        );
        let after = t0 + timeout + Duration::from_micros(1);
        assert_eq!(agreement_poll(Some(t0), after, timeout, every), None);
        assert!(AGREEMENT_POLL < timeout);
    }

    /// Two ranks per CPU read every 100 µs; more ranks, proportionally
    /// less often, so the host's reads stay about two per CPU per 100 µs.
    #[test]
    fn the_agreement_poll_slows_with_the_ranks_per_cpu() {
        let us = |v| Duration::from_micros(v);
        assert_eq!(agreement_poll_every(1, 2), us(100));
        assert_eq!(agreement_poll_every(4, 2), us(100));
        assert_eq!(agreement_poll_every(8, 2), us(200));
        assert_eq!(agreement_poll_every(32, 2), us(800));
        assert_eq!(agreement_poll_every(32, 16), us(100));
        assert_eq!(agreement_poll_every(0, 0), us(100));
    }

    /// A one-host round nobody waits on turns every `every`; a rank whose
    /// messages come over the fabric every FABRIC_POLL; one woken by its
    /// mail not at all.
    #[test]
    fn the_poll_is_the_rounds_then_the_fabrics_safety_net() {
        let every = agreement_poll_every(4, 2);
        assert_eq!(poll_interval(true, true, every), Some(every));
        assert_eq!(poll_interval(true, false, every), Some(every));
        assert_eq!(poll_interval(false, true, every), Some(FABRIC_POLL));
        assert_eq!(poll_interval(false, false, every), None);
        let crowded = agreement_poll_every(64, 2);
        assert_eq!(poll_interval(false, true, crowded), Some(crowded));
        assert!(AGREEMENT_POLL < FABRIC_POLL);
    }

    /// Only a host's head polls, while it lives, and only with mailboxes.
    #[test]
    fn only_heads_poll_when_mail_carries_the_rest() {
        // Hosts r mod 2 over 6 ranks: {0, 2, 4} and {1, 3, 5}.
        let ids: Vec<u64> = (0..6).map(|r| r % 2).collect();
        let hosts = std::sync::Arc::new(Hosts::new(crate::protocol::RingKind::Rank, &ids, 0));
        let none = |_: Rank| false;
        let polls = |me, by_mail, gone: &dyn Fn(Rank) -> bool| {
            polls_agreements(Some(&hosts), me, by_mail, gone)
        };
        assert!(polls(0, true, &none) && polls(1, true, &none));
        assert!(!polls(2, true, &none) && !polls(5, true, &none));
        // Without mailboxes, or without host groups, everyone polls.
        assert!(polls(2, false, &none));
        assert!(polls_agreements(None, 2, true, none));
        // Head 1 gone: its host's ranks are adopted across hosts; host 0's
        // ranks still have theirs.
        let one_gone = |r: Rank| r == 1;
        assert!(polls(3, true, &one_gone) && polls(5, true, &one_gone));
        assert!(!polls(2, true, &one_gone));
    }
}
