//! User agreements of a one-host job through the host's shared segment
//! (`docs/design.md` §4.10 "Agreement and views", "On one host"): no message, no progress
//! thread on the way, a decision by compare-and-swap.
//!
//! Round `u` (this rank's `u`-th call, the same on every rank, a
//! collective) uses slot `u % 2` of the segment's agreement area:
//! 1. **Contribute**: a rank writes its flags, its newest view's id and
//!    its gone set (failed ∪ left) into its contribution record, then the
//!    round number (release), and rings the bell.
//! 2. **Propose**: a rank that sees, for every other rank, a contribution
//!    to `u` or proof that the rank is gone (in its failed or left set,
//!    posted failed on the host's notice board, or marked ended in the
//!    segment: all final) merges them (AND of flags, max of view ids,
//!    union of gone sets and of the ranks without a contribution) into its
//!    proposal record, then tries to install `(u, itself)` in the round's
//!    decision word by compare-and-swap.
//! 3. **Decide**: the first swap wins, once and for all; every rank reads
//!    the winner's proposal. A decision that names this rank excludes it
//!    (`AgreeError::Excluded`); ranks it names that this rank does not
//!    know gone yet are awaited (their notices are on their way) for one
//!    timeout, then learned from the decision (`Input::BoardNotice`, as a
//!    view's).
//!
//! Why it is one decision: the swap is consensus among the host's
//! processes, and any proposal is valid: it holds every contribution but
//! of ranks proven gone, so every survivor's. Why two slots suffice: a
//! rank contributes to `u + 2` only after it decided `u + 1`, which needs
//! every live rank's contribution to `u + 1`, which each made only after
//! it had decided `u`, that is, after it was done reading slot `u % 2`.
//! (A rank excluded meanwhile may still read; it checks the round number
//! after each read and its result is an exclusion anyway.)
//!
//! Who drives: the caller blocked in `agree`/`wait` (spinning, then
//! yielding, then sleeping on the area's bell and the board's), `test`
//! (one step), and the progress thread at each wake-up while a round is
//! open (it polls then, `AGREEMENT_POLL`), so an `iagree` nobody waits on
//! still ends, and it raises `Event::Agreed` for the embedder.
//!
//! Owns: the rounds of this rank, their requests, the results to raise
//! and the failures to learn. Must not: touch the segment but through
//! its accessors, or make the progress thread wait (it only `try_lock`s).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::node::{AGREE_RECORD_HEAD, AGREE_ROUNDS, AgreeRecord, HostSegment, ring_agree_bell};
use crate::protocol::{self, Rank};

use super::agree::{AgreeError, Agreement, Slot};
use super::failed_bits::FailedBits;

/// What a round needs from the rest of the detector.
pub(super) struct Context<'a> {
    pub failed: &'a FailedBits,
    pub left: &'a FailedBits,
    /// The newest view this rank raised (read when it contributes).
    pub view: &'a dyn Fn() -> u64,
}

/// A failure to learn from a decision: the progress thread hands it to
/// the Engine as news on the board from `detector` (the round's winner).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Learn {
    pub failed: Vec<Rank>,
    pub detector: Rank,
}

/// This rank's side of the host's agreements.
#[derive(Debug)]
pub(super) struct HostAgreement {
    me: Rank,
    ranks: u32,
    timeout: Duration,
    oversubscribed: bool,
    /// Set by the progress thread once local watching opened it.
    segment: OnceLock<Arc<HostSegment>>,
    rounds: Mutex<Rounds>,
    /// A round is open or queued that no caller may be waiting on (an
    /// `iagree`): the progress thread polls to drive it.
    unattended: AtomicBool,
    /// For the progress thread: results to raise, failures to learn.
    news: Mutex<News>,
    /// `news` holds something (read without its lock at every wake-up).
    newsworthy: AtomicBool,
}

#[derive(Debug, Default)]
pub(super) struct News {
    pub agreed: Vec<Agreement>,
    pub learn: Vec<Learn>,
}

#[derive(Debug, Default)]
struct Rounds {
    /// Calls made (the last round's number).
    called: u64,
    /// Why no call is taken any more.
    closed: Option<AgreeError>,
    /// The round contributed to and not yet ended here.
    current: Option<Current>,
    queue: VecDeque<Queued>,
}

#[derive(Debug)]
struct Queued {
    round: u64,
    flags: u64,
    slot: Arc<Slot>,
    attended: bool,
}

#[derive(Debug)]
struct Current {
    round: u64,
    slot: Arc<Slot>,
    attended: bool,
    /// Decided, waiting to know every rank it names gone.
    decided: Option<(Decision, Instant, bool)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Decision {
    winner: Rank,
    flags: u64,
    view: u64,
    gone: Vec<u64>,
}

/// What one step of driving did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Something moved (a contribution, a decision, a result).
    Moved,
    /// Waiting for others (or for notices).
    Waiting,
    /// Nothing open.
    Idle,
    /// Someone else is driving (the lock was taken).
    Busy,
}

impl HostAgreement {
    pub(super) fn new(me: Rank, ranks: u32, timeout: Duration) -> Self {
        HostAgreement {
            me,
            ranks,
            timeout,
            oversubscribed: std::thread::available_parallelism()
                .is_ok_and(|cpus| ranks as usize > cpus.get()),
            segment: OnceLock::new(),
            rounds: Mutex::default(),
            unattended: AtomicBool::new(false),
            news: Mutex::default(),
            newsworthy: AtomicBool::new(false),
        }
    }

    fn rounds(&self) -> MutexGuard<'_, Rounds> {
        self.rounds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The progress thread opened the segment (with an agreement area).
    pub(super) fn set_segment(&self, segment: Arc<HostSegment>) {
        if segment.has_agreement() {
            let _ = self.segment.set(segment);
        }
    }

    pub(super) fn segment(&self) -> Option<&HostSegment> {
        self.segment.get().map(|s| &**s)
    }

    /// More ranks on the host than CPUs for this process.
    pub(super) fn oversubscribed(&self) -> bool {
        self.oversubscribed
    }

    /// Whether a round is open or queued here that no caller may drive.
    pub(super) fn is_unattended(&self) -> bool {
        self.unattended.load(Ordering::Acquire)
    }

    /// Takes this rank's next call: its request's slot. `attended`: its
    /// caller waits for it (`agree`), driving it.
    pub(super) fn call(&self, flags: u64, attended: bool) -> Result<Arc<Slot>, AgreeError> {
        let mut rounds = self.rounds();
        if let Some(why) = &rounds.closed {
            return Err(why.clone());
        }
        rounds.called += 1;
        let slot = Arc::new(Slot::default());
        let round = rounds.called;
        rounds.queue.push_back(Queued {
            round,
            flags,
            slot: Arc::clone(&slot),
            attended,
        });
        if !attended {
            self.unattended.store(true, Ordering::Release);
        }
        Ok(slot)
    }

    /// Ends every open request with `why`, and every later call.
    pub(super) fn close(&self, why: AgreeError) {
        let mut rounds = self.rounds();
        rounds.closed.get_or_insert(why.clone());
        if let Some(c) = rounds.current.take() {
            c.slot.finish(Err(why.clone()));
        }
        for queued in rounds.queue.drain(..) {
            queued.slot.finish(Err(why.clone()));
        }
        self.unattended.store(false, Ordering::Release);
    }

    /// Takes what the progress thread must raise and learn.
    pub(super) fn take_news(&self) -> News {
        if !self.newsworthy.swap(false, Ordering::AcqRel) {
            return News::default();
        }
        std::mem::take(&mut *self.news.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Drives the rounds as far as they go now. `wait`: take the lock
    /// (a caller); otherwise only try it (the progress thread).
    pub(super) fn drive(&self, cx: &Context<'_>, wait: bool) -> Step {
        let Some(segment) = self.segment() else {
            return Step::Waiting;
        };
        let mut rounds = if wait {
            self.rounds()
        } else {
            match self.rounds.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return Step::Busy,
            }
        };
        let mut moved = false;
        let step = loop {
            if rounds.current.is_none() {
                let Some(next) = rounds.queue.pop_front() else {
                    break if moved { Step::Moved } else { Step::Idle };
                };
                self.contribute(segment, cx, next.round, next.flags);
                rounds.current = Some(Current {
                    round: next.round,
                    slot: next.slot,
                    attended: next.attended,
                    decided: None,
                });
                moved = true;
            }
            let current = rounds.current.as_mut().expect("set above");
            if current.decided.is_none() {
                match self.decision(segment, cx, current.round) {
                    Some(d) => {
                        current.decided = Some((d, Instant::now(), false));
                        moved = true;
                    }
                    None => break if moved { Step::Moved } else { Step::Waiting },
                }
            }
            let round = current.round;
            let (decision, since, asked) = current.decided.as_mut().expect("set above");
            match self.result(cx, round, decision) {
                Ok(result) => {
                    let current = rounds.current.take().expect("set above");
                    if let Ok(agreement) = &result {
                        self.news().agreed.push(agreement.clone());
                    }
                    current.slot.finish(result);
                    moved = true;
                }
                Err(unknown) => {
                    if !*asked && since.elapsed() >= self.timeout {
                        *asked = true;
                        self.news().learn.push(Learn {
                            failed: unknown,
                            detector: decision.winner,
                        });
                    }
                    break if moved { Step::Moved } else { Step::Waiting };
                }
            }
        };
        let unattended = rounds.current.as_ref().is_some_and(|c| !c.attended)
            || rounds.queue.iter().any(|q| !q.attended);
        self.unattended.store(unattended, Ordering::Release);
        step
    }

    /// The news, for a push (marked newsworthy first: a take that sees
    /// the mark waits on the lock for the push).
    fn news(&self) -> MutexGuard<'_, News> {
        let news = self.news.lock().unwrap_or_else(PoisonError::into_inner);
        self.newsworthy.store(true, Ordering::Release);
        news
    }

    /// Writes this rank's contribution to `round` and rings the bell.
    fn contribute(&self, segment: &HostSegment, cx: &Context<'_>, round: u64, flags: u64) {
        let slot = round as usize % AGREE_ROUNDS;
        let Some(record) = segment.agree_record(self.me, AgreeRecord::Contribution, slot) else {
            return;
        };
        invalidate(record);
        record[1].store(flags, Ordering::Relaxed);
        record[2].store((cx.view)(), Ordering::Relaxed);
        for (i, word) in record[AGREE_RECORD_HEAD..].iter().enumerate() {
            word.store(cx.failed.word(i) | cx.left.word(i), Ordering::Relaxed);
        }
        record[0].store(round, Ordering::Release);
        ring_agree_bell(segment);
    }

    /// The decision of `round`: read if made, made if every rank is
    /// accounted for, else `None`.
    fn decision(&self, segment: &HostSegment, cx: &Context<'_>, round: u64) -> Option<Decision> {
        let slot = round as usize % AGREE_ROUNDS;
        let word = segment.agree_decision(slot)?;
        let mut seen = word.load(Ordering::Acquire);
        if seen >> 16 == round {
            return self.read_proposal(segment, round, (seen & 0xffff) as Rank);
        }
        let proposal = self.propose(segment, cx, round)?;
        let record = segment.agree_record(self.me, AgreeRecord::Proposal, slot)?;
        invalidate(record);
        record[1].store(proposal.flags, Ordering::Relaxed);
        record[2].store(proposal.view, Ordering::Relaxed);
        for (w, &bits) in record[AGREE_RECORD_HEAD..].iter().zip(&proposal.gone) {
            w.store(bits, Ordering::Relaxed);
        }
        record[0].store(round, Ordering::Release);
        let mine = (round << 16) | u64::from(self.me);
        loop {
            if seen >> 16 >= round {
                break;
            }
            match word.compare_exchange(seen, mine, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    ring_agree_bell(segment);
                    return Some(proposal);
                }
                Err(now) => seen = now,
            }
        }
        (seen >> 16 == round)
            .then(|| self.read_proposal(segment, round, (seen & 0xffff) as Rank))
            .flatten()
    }

    /// Merges every contribution to `round` if every rank contributed or
    /// is gone.
    fn propose(&self, segment: &HostSegment, cx: &Context<'_>, round: u64) -> Option<Decision> {
        let slot = round as usize % AGREE_ROUNDS;
        let words = (self.ranks as usize).div_ceil(64);
        let mut merged = Decision {
            winner: self.me,
            flags: u64::MAX,
            view: 0,
            gone: vec![0; words],
        };
        let mut gone_bits = vec![0u64; words];
        for (i, g) in gone_bits.iter_mut().enumerate() {
            *g = cx.failed.word(i)
                | cx.left.word(i)
                | segment
                    .board_bits(i)
                    .map_or(0, |b| b.load(Ordering::Acquire));
        }
        let mut head = [0u64; AGREE_RECORD_HEAD];
        let mut bits = vec![0u64; words];
        for rank in 0..self.ranks {
            let record = segment.agree_record(rank, AgreeRecord::Contribution, slot)?;
            if read_record(record, round, &mut head, &mut bits) {
                merged.flags &= head[1];
                merged.view = merged.view.max(head[2]);
                for (m, b) in merged.gone.iter_mut().zip(&bits) {
                    *m |= b;
                }
            } else if gone_bits[rank as usize / 64] & (1 << (rank % 64)) != 0 || segment.ended(rank)
            {
                merged.gone[rank as usize / 64] |= 1 << (rank % 64);
            } else {
                return None;
            }
        }
        Some(merged)
    }

    fn read_proposal(&self, segment: &HostSegment, round: u64, winner: Rank) -> Option<Decision> {
        let slot = round as usize % AGREE_ROUNDS;
        let record = segment.agree_record(winner, AgreeRecord::Proposal, slot)?;
        let mut head = [0u64; AGREE_RECORD_HEAD];
        let mut gone = vec![0u64; (self.ranks as usize).div_ceil(64)];
        read_record(record, round, &mut head, &mut gone).then_some(Decision {
            winner,
            flags: head[1],
            view: head[2],
            gone,
        })
    }

    /// The result of a decision here, or the ranks it names that this
    /// rank does not know gone yet.
    fn result(
        &self,
        cx: &Context<'_>,
        round: u64,
        d: &Decision,
    ) -> Result<Result<Agreement, AgreeError>, Vec<Rank>> {
        let failed: Vec<Rank> = (0..self.ranks)
            .filter(|&r| d.gone[r as usize / 64] & (1 << (r % 64)) != 0)
            .collect();
        if failed.contains(&self.me) {
            return Ok(Err(AgreeError::Excluded));
        }
        let unknown: Vec<Rank> = failed
            .iter()
            .copied()
            .filter(|&r| !cx.failed.contains(r) && !cx.left.contains(r))
            .collect();
        if !unknown.is_empty() {
            return Err(unknown);
        }
        Ok(Ok(Agreement {
            seq: round,
            flags: d.flags,
            view: protocol::View { id: d.view, failed },
            hops: 1,
        }))
    }
}

/// Reads a record of `round` into `head` and `bits`: false if it holds
/// another round (before or after the read).
fn read_record(record: &[AtomicU64], round: u64, head: &mut [u64], bits: &mut [u64]) -> bool {
    if record[0].load(Ordering::Acquire) != round {
        return false;
    }
    for (h, w) in head.iter_mut().zip(record).skip(1) {
        *h = w.load(Ordering::Relaxed);
    }
    for (b, w) in bits.iter_mut().zip(&record[AGREE_RECORD_HEAD..]) {
        *b = w.load(Ordering::Relaxed);
    }
    std::sync::atomic::fence(Ordering::Acquire);
    record[0].load(Ordering::Relaxed) == round
}

/// Marks a record as being rewritten before its words change, so that a
/// reader of its old round sees the round number move (a sequence lock).
fn invalidate(record: &[AtomicU64]) {
    record[0].store(0, Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host of `ranks` ranks in this process: one segment, each rank's
    /// side and its own failed and left sets.
    struct Host {
        sides: Vec<HostAgreement>,
        failed: Vec<FailedBits>,
        left: Vec<FailedBits>,
        segment: Arc<HostSegment>,
    }

    impl Host {
        fn new(name: &str, ranks: u32, timeout: Duration) -> Host {
            let name = format!("/ffd-test-{}-{name}", std::process::id());
            let segment = Arc::new(HostSegment::create(&name, ranks, ranks).unwrap());
            let sides = (0..ranks)
                .map(|r| {
                    let side = HostAgreement::new(r, ranks, timeout);
                    side.set_segment(Arc::clone(&segment));
                    side
                })
                .collect();
            Host {
                sides,
                failed: (0..ranks).map(|_| FailedBits::new(ranks)).collect(),
                left: (0..ranks).map(|_| FailedBits::new(ranks)).collect(),
                segment,
            }
        }

        fn drive(&self, rank: usize) -> Step {
            let view = || 0;
            let cx = Context {
                failed: &self.failed[rank],
                left: &self.left[rank],
                view: &view,
            };
            self.sides[rank].drive(&cx, true)
        }

        /// Drives `rank` until `slot` has its result (bounded).
        fn until(&self, rank: usize, slot: &Slot) -> Result<Agreement, AgreeError> {
            let start = Instant::now();
            loop {
                if let Some(outcome) = slot.result() {
                    return outcome;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "rank {rank} never decided"
                );
                self.drive(rank);
                std::thread::yield_now();
            }
        }
    }

    #[test]
    fn every_rank_decides_the_and_of_every_flag_round_after_round() {
        let host = Host::new("rounds", 4, Duration::from_secs(1));
        let rounds = 200u64;
        let results: Vec<Vec<Agreement>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..4usize)
                .map(|rank| {
                    let host = &host;
                    s.spawn(move || {
                        (1..=rounds)
                            .map(|u| {
                                // Rank r clears bit (u + r) % 64.
                                let flags = !(1u64 << ((u as usize + rank) % 64));
                                let slot = host.sides[rank].call(flags, true).unwrap();
                                host.until(rank, &slot).unwrap()
                            })
                            .collect()
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        for u in 1..=rounds {
            let want = (0..4).fold(u64::MAX, |f, r| f & !(1u64 << ((u as usize + r) % 64)));
            for (rank, mine) in results.iter().enumerate() {
                let a = &mine[u as usize - 1];
                assert_eq!((a.seq, a.flags), (u, want), "rank {rank}, round {u}");
                assert!(a.view.failed.is_empty());
                assert_eq!(a, &results[0][u as usize - 1], "one decision");
            }
        }
    }

    #[test]
    fn a_rank_that_dies_mid_round_leaves_one_decision_that_names_it_unless_it_took_part() {
        // Many trials: rank 3 contributes (or not) then "dies"; the others
        // learn it failed at some point; every survivor decides the same.
        for trial in 0..400u64 {
            let host = Host::new(&format!("dies-{trial}"), 4, Duration::from_secs(5));
            let contributes = trial % 2 == 0;
            let decided: Vec<Agreement> = std::thread::scope(|s| {
                let survivors: Vec<_> = (0..3usize)
                    .map(|rank| {
                        let host = &host;
                        s.spawn(move || {
                            let slot = host.sides[rank].call(!(1 << rank), true).unwrap();
                            host.until(rank, &slot).unwrap()
                        })
                    })
                    .collect();
                if contributes {
                    let slot = host.sides[3].call(!(1 << 3), true).unwrap();
                    host.drive(3);
                    drop(slot);
                }
                // Its death is learned, by each survivor at its own time.
                for rank in (0..3).rev() {
                    std::thread::yield_now();
                    host.failed[rank].insert(3);
                }
                survivors.into_iter().map(|t| t.join().unwrap()).collect()
            });
            for a in &decided {
                assert_eq!(a, &decided[0], "trial {trial}: one decision");
            }
            // Named if it did not take part (and maybe if it did: a
            // survivor knew it failed when it joined).
            let named = decided[0].view.failed == [3];
            let took_part = decided[0].flags & (1 << 3) == 0;
            assert!(
                named || took_part,
                "trial {trial}: rank 3 took part or is named: {:?}",
                decided[0]
            );
            assert!(contributes || !took_part, "trial {trial}");
            assert_eq!(decided[0].flags | (1 << 3), !0b111, "trial {trial}");
        }
    }

    #[test]
    fn a_contribution_after_the_decision_changes_nothing() {
        let host = Host::new("late", 4, Duration::from_secs(1));
        let slots: Vec<_> = (0..3)
            .map(|r| host.sides[r].call(!(1 << r), true).unwrap())
            .collect();
        for r in 0..3 {
            host.drive(r);
        }
        // Rank 0 learns rank 3 failed and decides without it.
        host.failed[0].insert(3);
        let first = host.until(0, &slots[0]).unwrap();
        assert_eq!(first.view.failed, vec![3]);
        assert_eq!(first.flags, !0b111);
        // Rank 3 (declared, not yet stopped) contributes late; ranks 1
        // and 2, learning the failure only now, could merge it: they
        // read rank 0's decision instead.
        let late = host.sides[3].call(!(1 << 3), true).unwrap();
        host.drive(3);
        for (r, slot) in slots.iter().enumerate().skip(1) {
            host.failed[r].insert(3);
            assert_eq!(host.until(r, slot).unwrap(), first, "rank {r}");
        }
        assert_eq!(late.result(), Some(Err(AgreeError::Excluded)));
    }

    #[test]
    fn a_decision_naming_this_rank_excludes_it_and_unknown_ranks_are_learned_after_a_timeout() {
        let host = Host::new("excluded", 3, Duration::from_millis(20));
        // Ranks 0 and 1 hold rank 2 failed (it was declared; it still runs).
        host.failed[0].insert(2);
        host.failed[1].insert(2);
        let a0 = host.sides[0].call(u64::MAX, true).unwrap();
        let a1 = host.sides[1].call(u64::MAX, true).unwrap();
        host.drive(1);
        let mine = host.until(0, &a0).unwrap();
        assert_eq!(mine.view.failed, vec![2]);
        assert_eq!(host.until(1, &a1).unwrap(), mine);
        // Rank 2 calls late: it reads a decision that names it.
        let a2 = host.sides[2].call(u64::MAX, true).unwrap();
        assert_eq!(host.until(2, &a2), Err(AgreeError::Excluded));

        // Round 2: rank 1 alone knows rank 2 gone (posted on the board):
        // rank 0 waits for its notice, then is told to learn it.
        let host = Host::new("learn", 3, Duration::from_millis(20));
        crate::node::post_on_board(&host.segment, &[2], 1);
        let a1 = host.sides[1].call(u64::MAX, true).unwrap();
        let a0 = host.sides[0].call(u64::MAX, true).unwrap();
        host.drive(1);
        assert_eq!(host.drive(0), Step::Moved);
        assert_eq!(a0.result(), None, "rank 2 is not known gone at rank 0 yet");
        let start = Instant::now();
        while host.sides[0].take_news().learn.is_empty() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "never asked to learn"
            );
            host.drive(0);
            std::thread::yield_now();
        }
        // The progress thread hands it to the Engine, which raises it.
        host.failed[0].insert(2);
        let got = host.until(0, &a0).unwrap();
        assert_eq!(got.view.failed, vec![2]);
        host.failed[1].insert(2);
        assert_eq!(host.until(1, &a1).unwrap(), got);
        let news = host.sides[0].take_news();
        assert_eq!(news.agreed, vec![got], "raised for the embedder");
    }

    #[test]
    fn closing_ends_the_open_round_the_queued_ones_and_later_calls() {
        let host = Host::new("close", 2, Duration::from_secs(1));
        let a = host.sides[0].call(1, false).unwrap();
        let b = host.sides[0].call(2, false).unwrap();
        assert!(host.sides[0].is_unattended());
        host.drive(0);
        host.sides[0].close(AgreeError::Left);
        assert_eq!(a.result(), Some(Err(AgreeError::Left)));
        assert_eq!(b.result(), Some(Err(AgreeError::Left)));
        assert_eq!(host.sides[0].call(3, true).err(), Some(AgreeError::Left));
        assert!(!host.sides[0].is_unattended());
    }
}
