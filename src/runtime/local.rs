//! Same-host watching in the runtime (`docs/design.md` §4.12 "Hosts"): which local
//! ranks this rank can watch through a pidfd and why not the others, the
//! host's counter segment, the exit-word threads (started once the
//! segment is open), and the progress thread's part in it (bump its own
//! counter at every wake-up, read its same-host emitter's, hand exits seen
//! through exit words or pidfds to the Engine).
//!
//! Owns: the checks before a pid is trusted (same pid namespace, same
//! start time as the rank's record), the fallback reasons, creating the
//! segment on the host's lowest rank at start-up and opening it on the
//! others once every rank is linked. Must not: judge anyone (the Engine
//! does), or touch the fabric.

#![forbid(unsafe_code)]

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::time::Duration;

use crate::config::LocalMode;
use crate::node::{
    BoardReader, Boost, Doorbell, ExitWatch, ExitWords, HostSegment, MAX_HELD, PidFd,
    PidfdUnavailable, SegmentError, WordEvent, board_readers, board_readers_changes, door_name,
    exit_word_probe, monotonic_ns, post_on_board, segment_name, set_door, watchers_of,
};
use crate::protocol::ranks::fold_digest;
use crate::protocol::{EmitterThread, Engine, Hosts, Input, LocalBeat, Rank, Time};

use super::mail::Mail;
use super::startup::{JobView, start_time_of, stat_after_command};

/// What start-up prepared for local watching.
#[derive(Debug)]
pub(super) struct LocalPlan {
    pub hosts: Arc<Hosts>,
    /// This rank's host's ranks other than itself exist: the segment, as
    /// created here (the host's lowest rank) or to be opened once linked.
    pub segment: Option<SegmentPlan>,
    /// Pidfds of the other same-host ranks that passed the checks, by rank.
    pub pidfds: Vec<(Rank, PidFd)>,
    /// Watch the other same-host ranks' exit words too (`FFD_LOCAL=auto`).
    pub exit_words: bool,
    /// Same-host messages go through the segment's mailboxes: exit words
    /// and `futex_waitv` here, so that every rank of this host reads its
    /// own mailbox (each of them decides the same, from the job-wide
    /// `FFD_LOCAL` and the kernel they share).
    pub mailbox: bool,
    /// Why the others are watched by their counters only.
    pub fallback: Vec<String>,
    /// The pid of each of the host's ranks (by index among them) that runs
    /// in this rank's pid namespace, this rank excepted: to look at its
    /// progress thread's state when its counter stands still.
    pub pids: Vec<Option<u32>>,
}

#[derive(Debug)]
pub(super) enum SegmentPlan {
    Created(HostSegment),
    Open {
        name: String,
        count: u32,
        ranks: u32,
    },
}

/// Plans local watching for `me`: the host groups, the segment (created
/// now on the host's lowest rank, before the barrier after which the
/// others open it), and a pidfd for every other local rank whose process
/// this rank can prove is the rank's (`LocalMode::Counters`: none).
pub(super) fn plan(
    mode: LocalMode,
    view: &JobView,
    hosts: Arc<Hosts>,
    me: Rank,
) -> Result<LocalPlan, SegmentError> {
    let host = hosts.host_of(me);
    let members = hosts.members(host).to_vec();
    let mut plan = LocalPlan {
        hosts,
        segment: None,
        pidfds: Vec::new(),
        exit_words: false,
        mailbox: false,
        fallback: Vec::new(),
        pids: Vec::new(),
    };
    if members.len() < 2 {
        return Ok(plan);
    }
    let mine = &view.records[me as usize].process;
    let in_my_namespace = |r: Rank| {
        mine.pid_namespace != 0
            && view.records[r as usize].process.pid_namespace == mine.pid_namespace
    };
    plan.pids = members
        .iter()
        .map(|&r| (r != me && in_my_namespace(r)).then(|| view.records[r as usize].process.pid))
        .collect();
    let host_id = view.records[me as usize].host_id;
    let name = segment_name(view.job_key, host_id);
    let count = members.len() as u32;
    let ranks = plan.hosts.ranks();
    plan.segment = Some(if members[0] == me {
        SegmentPlan::Created(HostSegment::create(&name, count, ranks)?)
    } else {
        SegmentPlan::Open { name, count, ranks }
    });
    if mode == LocalMode::Counters {
        plan.fallback
            .push("FFD_LOCAL=counters: exits are found by the counters".to_owned());
        return Ok(plan);
    }
    plan.exit_words = mode == LocalMode::Auto;
    // Every member's record must say it reads its mailbox (this rank's
    // own says what `mailbox_usable` found when start-up made it): the
    // host's ranks post to each other alike (and a job of one host then
    // opens no fabric, `JobView::one_host_by_mail`).
    plan.mailbox =
        mode == LocalMode::Auto && members.iter().all(|&r| view.records[r as usize].mailbox);
    for &r in members.iter().filter(|&&r| r != me) {
        let theirs = &view.records[r as usize].process;
        let refused = if !in_my_namespace(r) {
            Some("it runs in another pid namespace".to_owned())
        } else {
            match PidFd::open(theirs.pid) {
                Err(PidfdUnavailable::NoSuchProcess { .. }) => {
                    // Gone already: its counter never moves, its same-host
                    // observer declares it after the start-up grace.
                    Some("its process is gone".to_owned())
                }
                Err(e) => Some(e.to_string()),
                Ok(fd) => {
                    // Opened first, checked after: a pid recycled before
                    // the open has another start time.
                    if start_time_of(&theirs.pid.to_string()) == Some(theirs.start_time)
                        && theirs.start_time != 0
                    {
                        plan.pidfds.push((r, fd));
                        None
                    } else {
                        Some(format!(
                            "pid {} has another start time than its record (recycled?)",
                            theirs.pid
                        ))
                    }
                }
            }
        };
        if let Some(why) = refused {
            plan.fallback.push(format!("rank {r}: {why}"));
        }
    }
    Ok(plan)
}

/// Whether the host's ranks exchange their messages through the segment's
/// mailboxes under `mode`: only with exit words (`FFD_LOCAL=auto`), whose
/// threads wait on the mail words, where `futex_waitv` exists.
pub(super) fn mailbox_usable(mode: LocalMode) -> bool {
    mode == LocalMode::Auto && exit_word_probe().is_ok()
}

/// The progress thread's local watching.
#[derive(Debug)]
pub(super) struct LocalWatching {
    hosts: Arc<Hosts>,
    segment: Option<Arc<HostSegment>>,
    my_index: u32,
    /// The threads that hold this rank's exit words and watch the others'
    /// (dropped before `exits`, whose epoll set holds their eventfd).
    words: Option<ExitWords>,
    exits: Option<ExitWatch>,
    /// `CLOCK_MONOTONIC` at the detector's time zero, in ns.
    origin_ns: u64,
    exited: Vec<u64>,
    word_events: Vec<(u64, WordEvent)>,
    /// Scratch for an exit's watchers (indices, then ranks).
    watcher_indices: Vec<u32>,
    seen_by: Vec<Rank>,
    me: Rank,
    /// What this rank has read of the host's notice board.
    board: BoardReader,
    board_news: Vec<(u32, u32)>,
    /// The board readers last told to the Engine (ranks), and scratch.
    readers: Vec<Rank>,
    readers_now: Vec<Rank>,
    /// When the flags were last looked at, and their change count then.
    readers_scan: ReadersScan,
    /// Same-host exits seen through exit words so far.
    words_seen: u64,
    /// Why a watch loop ended, until the progress thread logs it.
    broken: Option<String>,
    broken_told: bool,
    /// The other same-host ranks' pids, by index among the host's ranks.
    pids: Vec<Option<u32>>,
    /// Same-host messages go through the mailboxes ([`LocalPlan::mailbox`]).
    mailbox: bool,
    /// A counter at least this old (the timeout, in ns) makes `read` look
    /// at its rank's progress thread in `/proc`.
    stale_after_ns: u64,
}

impl LocalWatching {
    /// Opens the segment (unless this rank created it) and the epoll set
    /// of pidfds and `wake`, and writes this (the progress) thread's id
    /// into its line. `origin_ns`: the detector's time zero on
    /// `CLOCK_MONOTONIC`; `timeout`: the detector's.
    pub(super) fn start(
        plan: LocalPlan,
        me: Rank,
        wake: BorrowedFd<'_>,
        (origin_ns, timeout): (u64, Duration),
        boost: Option<Arc<Boost>>,
        fallback: &mut Vec<String>,
    ) -> Result<LocalWatching, String> {
        let segment = match plan.segment {
            None => None,
            Some(SegmentPlan::Created(s)) => Some(Arc::new(s)),
            Some(SegmentPlan::Open { name, count, ranks }) => Some(Arc::new(
                HostSegment::open(&name, count, ranks).map_err(|e| e.to_string())?,
            )),
        };
        let members = plan.hosts.members(plan.hosts.host_of(me));
        let my_index = members.binary_search(&me).unwrap_or(0) as u32;
        if let (Some(seg), Some(tid)) = (&segment, current_thread_id()) {
            seg.store_thread(my_index, tid);
        }
        let words = match &segment {
            Some(seg) if plan.exit_words => {
                let peers = members
                    .iter()
                    .enumerate()
                    .filter(|&(_, &r)| r != me && (my_index as usize) < MAX_HELD)
                    .map(|(i, &r)| (i as u32, u64::from(r)))
                    .collect::<Vec<_>>();
                let name = format!("ffd-exits-{me}");
                match ExitWords::start(Arc::clone(seg), my_index, peers, &name, boost) {
                    Ok(w) => Some(w),
                    Err(why) => {
                        fallback.push(format!("exit words: {why}"));
                        None
                    }
                }
            }
            _ => None,
        };
        // With the mailboxes, this rank's doorbell: writers wake its
        // progress thread through it (`node/doorbell.rs`); a name taken
        // already leaves them the mail word.
        let door = match &segment {
            Some(seg) if plan.mailbox => match Doorbell::bind(&door_name(seg.name(), my_index)) {
                Ok(door) => Some(door),
                Err(e) => {
                    fallback.push(format!("no doorbell ({e}): mail rings the mail word"));
                    None
                }
            },
            _ => None,
        };
        let exits = if plan.pidfds.is_empty() && words.is_none() && door.is_none() {
            None
        } else {
            let fds = plan
                .pidfds
                .into_iter()
                .map(|(r, fd)| (u64::from(r), fd))
                .collect();
            let bell = words.as_ref().map(ExitWords::bell);
            let mut exits =
                ExitWatch::new(wake, fds, bell).map_err(|e| format!("epoll for pidfds: {e}"))?;
            if let (Some(door), Some(seg)) = (door, &segment) {
                match exits.add_door(door) {
                    Ok(()) => set_door(seg, my_index, true),
                    Err(e) => fallback.push(format!("no doorbell ({e}): mail rings the mail word")),
                }
            }
            Some(exits)
        };
        Ok(LocalWatching {
            hosts: plan.hosts,
            segment,
            my_index,
            words,
            exits,
            origin_ns,
            exited: Vec::new(),
            word_events: Vec::new(),
            watcher_indices: Vec::new(),
            seen_by: Vec::new(),
            me,
            board: BoardReader::default(),
            board_news: Vec::new(),
            readers: Vec::new(),
            readers_now: Vec::new(),
            readers_scan: ReadersScan::default(),
            words_seen: 0,
            broken: None,
            broken_told: false,
            pids: plan.pids,
            mailbox: plan.mailbox,
            stale_after_ns: u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX),
        })
    }

    /// The fd to wait on beside the completion queue: the epoll set
    /// (pidfds and the wake socket) if there is one.
    pub(super) fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        self.exits.as_ref().map(AsFd::as_fd)
    }

    /// The host's segment, if this rank shares its host.
    pub(super) fn segment(&self) -> Option<&Arc<HostSegment>> {
        self.segment.as_ref()
    }

    /// This rank's side of the host's mailboxes, if its messages to the
    /// host's ranks go through them.
    pub(super) fn mail(&self) -> Option<Mail> {
        let segment = self.segment.as_ref().filter(|_| self.mailbox)?;
        let members = self.hosts.members(self.hosts.host_of(self.me)).to_vec();
        Some(Mail::new(Arc::clone(segment), self.my_index, members))
    }

    /// This rank woke: one store into its line of the segment.
    pub(super) fn bump(&self, digest: u64) {
        if let Some(s) = &self.segment {
            s.store(self.my_index, monotonic_ns(), fold_digest(digest));
        }
    }

    /// `rank`'s counter, in the Engine's time.
    pub(super) fn read(&self, rank: Rank) -> Option<LocalBeat> {
        let s = self.segment.as_ref()?;
        let index = self.index_of(rank)?;
        let (at_ns, digest) = s.load(index)?;
        // Only a counter a timeout old costs a look into /proc: is its
        // thread waiting for a CPU (starved), stopped, or blocked?
        let thread = if monotonic_ns().saturating_sub(at_ns) >= self.stale_after_ns {
            self.pids
                .get(index as usize)
                .copied()
                .flatten()
                .and_then(|pid| s.thread(index).and_then(|tid| thread_state(pid, tid)))
                .map_or(EmitterThread::Unknown, emitter_thread)
        } else {
            EmitterThread::Unknown
        };
        Some(LocalBeat {
            at: Time::from_nanos(at_ns.saturating_sub(self.origin_ns)),
            digest,
            thread,
        })
    }

    /// Hands the exits seen since the last call to the Engine (exit words
    /// first: they come before the process is torn down, its pidfd after);
    /// returns how many came through pidfds. One `epoll_wait` with no
    /// timeout; the exit words' eventfd and queue are read only when the
    /// epoll set says they rang.
    pub(super) fn take_exits(&mut self, engine: &mut Engine, now: Time) -> usize {
        let Some(exits) = self.exits.as_mut() else {
            return 0;
        };
        self.exited.clear();
        let rung = exits.take_exited(&mut self.exited);
        self.word_events.clear();
        let mut board = false;
        if let (true, Some(words)) = (rung, &self.words) {
            words.take(&mut self.word_events);
            board = words.take_board();
            if self.broken.is_none() && !self.broken_told {
                self.broken = words.broken();
            }
        }
        self.word_deaths_to(engine, now);
        for i in 0..self.exited.len() {
            // A rank that marked its line ended (its local watching
            // dropped, and released its exit words, before its process
            // ended) left (its notice says so) or stopped on an error (its
            // counter stands still, and its observer declares it in a
            // timeout); its pidfd may be seen first. Not proof of a death
            // either way.
            if let Ok(rank) = Rank::try_from(self.exited[i]) {
                if self.marked_ended(rank) {
                    continue;
                }
                self.exited_to(engine, now, rank);
            }
        }
        if board {
            self.read_board(engine, now);
        }
        self.exited.len()
    }

    /// Whether local rank `rank` marked its line ended before it exited.
    fn marked_ended(&self, rank: Rank) -> bool {
        let (Some(seg), Some(index)) = (&self.segment, self.index_of(rank)) else {
            return false;
        };
        seg.ended(index)
    }

    /// `rank`'s index among its host's ranks, if it is on this host.
    fn index_of(&self, rank: Rank) -> Option<u32> {
        let members = self.hosts.members(self.hosts.host_of(self.me));
        members.binary_search(&rank).ok().map(|i| i as u32)
    }

    /// Hands the failures posted on the host's notice board since the last
    /// read to the Engine.
    fn read_board(&mut self, engine: &mut Engine, now: Time) {
        let Some(seg) = &self.segment else {
            return;
        };
        self.board_news.clear();
        self.board.read(seg, &mut self.board_news);
        // One input per detector: its news travels on in one notice.
        self.board_news
            .sort_unstable_by_key(|&(rank, detector)| (detector, rank));
        for group in self.board_news.chunk_by(|a, b| a.1 == b.1) {
            let failed: Vec<Rank> = group.iter().map(|&(rank, _)| rank).collect();
            let input = Input::BoardNotice {
                failed: &failed,
                detector: group[0].1,
            };
            let _ = engine.handle(now, input);
        }
    }

    /// Posts the Engine's news on the host's notice board.
    pub(super) fn post(&self, failed: &[Rank], detector: Rank) {
        if let Some(seg) = &self.segment {
            let _ = post_on_board(seg, failed, detector);
        }
    }

    /// Tells the Engine which other ranks of the host read the board, if
    /// that changed: at most once per quarter timeout (the flags change
    /// when ranks start, and when one stops reading; a rank not yet known
    /// to read gets fabric copies meanwhile), one load of the readers'
    /// change count, and one load per local rank only if that moved since
    /// the last scan, so that a host of 128 ranks does not pay 127 loads
    /// of cold lines at an idle wake-up (at 32 ranks on 2 cores the scan
    /// was 4 % of an idle agent's samples, `perf record -e cpu-clock`).
    pub(super) fn refresh_board_readers(&mut self, engine: &mut Engine, now: Time) {
        let Some(seg) = &self.segment else {
            return;
        };
        let every = Duration::from_nanos(self.stale_after_ns / 4);
        if !self
            .readers_scan
            .due(now, every, || board_readers_changes(seg))
        {
            return;
        }
        self.watcher_indices.clear();
        board_readers(seg, &mut self.watcher_indices);
        let members = self.hosts.members(self.hosts.host_of(self.me));
        others_at(
            members,
            self.me,
            &self.watcher_indices,
            &mut self.readers_now,
        );
        if self.readers_now != self.readers {
            std::mem::swap(&mut self.readers, &mut self.readers_now);
            let _ = engine.handle(
                now,
                Input::BoardReaders {
                    ranks: &self.readers,
                },
            );
        }
    }

    /// Hands `rank`'s exit to the Engine with the ranks of this host whose
    /// exit-word threads wait on it (they see it themselves: the notice
    /// skips them).
    fn exited_to(&mut self, engine: &mut Engine, now: Time, rank: Rank) {
        self.seen_by.clear();
        if let (Some(seg), Some(owner)) = (&self.segment, self.index_of(rank)) {
            let members = self.hosts.members(self.hosts.host_of(self.me));
            self.watcher_indices.clear();
            watchers_of(seg, owner, &mut self.watcher_indices);
            others_at(members, self.me, &self.watcher_indices, &mut self.seen_by);
        }
        let _ = engine.handle(
            now,
            Input::Exited {
                rank,
                seen_by: &self.seen_by,
            },
        );
    }

    /// Deaths the kernel has marked in the exit words this rank watches,
    /// read directly (one load per word) rather than waiting for the
    /// exit-word thread to be scheduled and ring: called before messages
    /// are handled, so that a rank whose exit this rank can see itself
    /// is declared `exited` here before a notice of it from a faster
    /// local rank arrives (which would otherwise be news, forwarded to
    /// every overlay neighbour: a flood of copies on the host at the
    /// moment its cores are busiest).
    pub(super) fn scan_exit_words(&mut self, engine: &mut Engine, now: Time) {
        let Some(words) = &self.words else {
            return;
        };
        self.word_events.clear();
        words.scan(&mut self.word_events);
        self.word_deaths_to(engine, now);
    }

    /// Hands the deaths among `word_events` to the Engine.
    fn word_deaths_to(&mut self, engine: &mut Engine, now: Time) {
        for i in 0..self.word_events.len() {
            let (token, event) = self.word_events[i];
            if let (WordEvent::Died, Ok(rank)) = (event, Rank::try_from(token)) {
                self.words_seen += 1;
                self.exited_to(engine, now, rank);
            }
        }
    }

    /// Local ranks watched through exit words, and the exits seen so.
    pub(super) fn exit_words(&self) -> (usize, u64) {
        (
            self.words.as_ref().map_or(0, ExitWords::len),
            self.words_seen,
        )
    }

    /// Why the exit-word threads stopped watching, once, if they did.
    pub(super) fn take_exit_words_broken(&mut self) -> Option<String> {
        let why = self.broken.take()?;
        self.broken_told = true;
        Some(why)
    }

    /// Local ranks watched through a pidfd, still running.
    pub(super) fn pidfds(&self) -> usize {
        self.exits.as_ref().map_or(0, ExitWatch::len)
    }

    /// Knocks from another user on this rank's doorbell so far
    /// (`node/doorbell.rs`). At the first, the doorbell closes: its writers
    /// are told to ring the mail word before its socket goes, so that a
    /// stranger cannot take its name while they still knock there.
    pub(super) fn foreign_knocks(&mut self) -> u64 {
        let Some(exits) = self.exits.as_mut() else {
            return 0;
        };
        let n = exits.foreign_knocks();
        if n > 0
            && let Some(door) = exits.take_door()
        {
            if let Some(seg) = &self.segment {
                set_door(seg, self.my_index, false);
            }
            drop(door);
        }
        n
    }
}

impl Drop for LocalWatching {
    /// This rank stops watching (a leave, a stop, a panic unwinding the
    /// progress thread): mark its line ended before its process can
    /// exit, so a peer that sees the exit through a pidfd does not take a
    /// clean end for a death. The exit words, released after this, say
    /// the same to peers that have them. A killed process runs no drop:
    /// its exit stays proof.
    fn drop(&mut self) {
        if let Some(seg) = &self.segment {
            // Writers ring the mail word from here on (the doorbell closes
            // with `exits`).
            set_door(seg, self.my_index, false);
            seg.store_ended(self.my_index);
        }
    }
}

/// Sets `out` to the host's ranks at `indices` (into `members`, the
/// host's ranks), `me` left out.
fn others_at(members: &[Rank], me: Rank, indices: &[u32], out: &mut Vec<Rank>) {
    out.clear();
    out.extend(
        indices
            .iter()
            .filter_map(|&w| members.get(w as usize).copied())
            .filter(|&r| r != me),
    );
}

/// This thread's id, from `/proc/thread-self` (a link to `<pid>/task/<tid>`);
/// `None` without `/proc`.
fn current_thread_id() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// What a thread's scheduler state says of a same-host emitter: `R` runnable
/// (running, or waiting for a CPU), `T` stopped by a signal, anything
/// else waiting: `S` asleep, `D` blocked, and `t`, held by a tracer (a
/// debugger, strace, a checkpointer), which is not the kernel's word on a
/// hang: the tracer may itself be starved.
fn emitter_thread(state: char) -> EmitterThread {
    match state {
        'R' => EmitterThread::Runnable,
        'T' => EmitterThread::Stopped,
        _ => EmitterThread::Waiting,
    }
}

/// The scheduler state of thread `tid` of process `pid` (field 3 of
/// `/proc/<pid>/task/<tid>/stat`: `R` running or waiting for a CPU, `S`
/// asleep, `D` in uninterruptible wait, `T` stopped, …); `None` if it
/// cannot be read (gone, another pid namespace, no `/proc`).
fn thread_state(pid: u32, tid: u32) -> Option<char> {
    stat_after_command(&format!("/proc/{pid}/task/{tid}/stat"))?
        .trim_start()
        .chars()
        .next()
}

/// When the board readers' flags are scanned: at most once per `every`,
/// and then only if their change count moved since the last scan (read
/// before the flags, so a change during the scan shows next time).
#[derive(Debug, Default)]
struct ReadersScan {
    at: Option<Time>,
    changes: Option<u32>,
}

impl ReadersScan {
    /// Whether to scan the flags at `now`; `changes` reads the count.
    fn due(&mut self, now: Time, every: Duration, changes: impl FnOnce() -> u32) -> bool {
        if self.at.is_some_and(|at| now < at + every) {
            return false;
        }
        self.at = Some(now);
        let changes = changes();
        if self.changes == Some(changes) {
            return false;
        }
        self.changes = Some(changes);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thread's state once it is `want`, or the last one read: a
    /// bounded number of looks, yielding between them.
    fn state_once(pid: u32, tid: u32, want: char) -> Option<char> {
        let mut state = None;
        for _ in 0..10_000 {
            state = thread_state(pid, tid);
            if state == Some(want) {
                break;
            }
            std::thread::yield_now();
        }
        state
    }

    /// The first look scans; later ones only once `every` has passed and
    /// the change count moved (the count is not even read before).
    #[test]
    fn the_readers_are_scanned_only_when_their_change_count_moved() {
        let every = Duration::from_millis(25);
        let t = |ms| Time::ZERO + Duration::from_millis(ms);
        let mut scan = ReadersScan::default();
        assert!(scan.due(t(0), every, || 7), "the first look scans");
        assert!(!scan.due(t(10), every, || panic!("read within `every`")));
        assert!(!scan.due(t(25), every, || 7), "the count stood");
        assert!(
            !scan.due(t(40), every, || 8),
            "within `every` of the last look"
        );
        assert!(scan.due(t(50), every, || 8), "the count moved");
        assert!(!scan.due(t(75), every, || 8));
        assert!(scan.due(t(100), every, || 9));
    }

    #[test]
    fn a_thread_reads_its_own_id_and_states_say_running_asleep_or_stopped() {
        let pid = std::process::id();
        let me = current_thread_id().expect("/proc/thread-self");
        assert_eq!(thread_state(pid, me), Some('R'), "reading, so running");
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (id_tx, id_rx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            id_tx.send(current_thread_id()).unwrap();
            let _ = rx.recv();
        });
        let tid = id_rx.recv().unwrap().expect("its id");
        assert_ne!(tid, me);
        // It blocks in recv: asleep once it gets there (it may still be
        // on its way for a moment).
        assert_eq!(state_once(pid, tid, 'S'), Some('S'));
        tx.send(()).unwrap();
        sleeper.join().unwrap();
        assert_eq!(thread_state(pid, tid), None, "gone");
        assert_eq!(thread_state(u32::MAX, 1), None);

        // A stopped process (SIGSTOP, as `ffd run --stop` does): `T`.
        struct Reaped(std::process::Child);
        impl Drop for Reaped {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let child = Reaped(
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .expect("sleep"),
        );
        let cpid = child.0.id();
        let stopped = std::process::Command::new("kill")
            .args(["-STOP", &cpid.to_string()])
            .status()
            .expect("kill");
        assert!(stopped.success());
        // The signal is delivered asynchronously.
        assert_eq!(state_once(cpid, cpid, 'T'), Some('T'));
    }

    #[test]
    fn the_kernels_states_map_to_what_the_engine_is_told() {
        assert_eq!(emitter_thread('R'), EmitterThread::Runnable);
        assert_eq!(emitter_thread('T'), EmitterThread::Stopped);
        for waiting in ['S', 'D', 't', 'I', 'Z', 'X'] {
            assert_eq!(emitter_thread(waiting), EmitterThread::Waiting, "{waiting}");
        }
    }

    /// Two ranks on one host: this test (rank 0) and a child process
    /// standing in for rank 1, watched through its pidfd only. Its exit is
    /// a failure (`exited`), unless rank 1 marked its line ended first,
    /// as a rank whose detector ended cleanly does (`FFD_LOCAL=pidfd`
    /// has no exit words to say it).
    #[test]
    fn a_pidfd_exit_is_a_failure_unless_the_rank_marked_itself_ended_first() {
        use crate::protocol::{EngineConfig, EngineOptions, JobKeys, Ring, RingKind};
        use std::os::unix::net::UnixStream;
        use std::process::{Command, Stdio};
        if pidfd_probe_here().is_err() {
            return;
        }
        for stopped in [false, true] {
            let name = format!("/ffd-test-{}-pidfd-stopped-{stopped}", std::process::id());
            let segment = HostSegment::create(&name, 2, 2).unwrap();
            let peer = HostSegment::open(&name, 2, 2).unwrap();
            let mut child = Command::new("sleep")
                .arg("30")
                .stdin(Stdio::null())
                .spawn()
                .unwrap();
            let pidfd = PidFd::open(child.id()).unwrap();
            let ids = [0u32, 0];
            let hosts = Arc::new(Hosts::new(RingKind::Topology, &ids, 0));
            let plan = LocalPlan {
                hosts: Arc::clone(&hosts),
                segment: Some(SegmentPlan::Created(segment)),
                pidfds: vec![(1, pidfd)],
                exit_words: false,
                mailbox: false,
                fallback: Vec::new(),
                pids: vec![None, Some(child.id())],
            };
            let (wake, _host_end) = UnixStream::pair().unwrap();
            let timeout = Duration::from_millis(100);
            let mut watching =
                LocalWatching::start(plan, 0, wake.as_fd(), (0, timeout), None, &mut Vec::new())
                    .unwrap();
            let mut engine = Engine::new(
                Arc::new(EngineConfig::default()),
                Arc::new(Ring::topology(&ids)),
                0,
                JobKeys::new(7, [3; 32]),
                Time::ZERO,
                EngineOptions {
                    hosts: Some(hosts),
                    ..EngineOptions::default()
                },
            )
            .unwrap();
            if stopped {
                // What rank 1's `LocalWatching` does when it drops.
                peer.store_ended(1);
            }
            child.kill().unwrap();
            child.wait().unwrap();
            // The pidfd is readable once the child is reaped; bounded.
            let mut seen = 0;
            for _ in 0..1000 {
                seen += watching.take_exits(&mut engine, Time::ZERO);
                if seen > 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(seen, 1, "the exit was seen (stopped: {stopped})");
            assert_eq!(engine.is_failed(1), !stopped, "stopped: {stopped}");
            drop(watching);
            assert!(peer.ended(0), "a dropped watcher marks its own line");
        }
    }

    fn pidfd_probe_here() -> Result<(), PidfdUnavailable> {
        crate::node::pidfd_probe()
    }
}
