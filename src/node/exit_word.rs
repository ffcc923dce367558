//! Exit words: a same-host exit seen before the kernel tears the process
//! down (`docs/design.md` §4.12 "Hosts").
//!
//! A pidfd becomes readable only at the very end of a process's exit,
//! after the kernel has freed its memory: 4 ms for a 46 MiB rank here,
//! about 25 ms for a GiB of plain data. The kernel's robust-futex list is walked at the
//! *start* of a thread's exit instead (`exit_mm_release`, before the
//! address space is torn down): for every 32-bit word on the list that
//! still holds the dying thread's TID it sets `FUTEX_OWNER_DIED` and, if
//! `FUTEX_WAITERS` is set, wakes one waiter. So each rank's exit-word
//! thread holds one word per other local rank in the host's segment
//! (matrix row `[me][w]`, its TID in each, all on its robust list), and
//! waits with `futex_waitv` (Linux ≥ 5.16) on the words the others hold
//! for it (column `[o][me]`). One word per (owner, watcher) pair: the
//! kernel wakes one waiter per word, and every watcher has its own.
//!
//! A word goes `0` (not yet held) → `TID` (held) → `TID | WAITERS` (its
//! watcher is waiting) → `WAITERS | OWNER_DIED` (the holder died: proof)
//! or `0` (released: the holder stopped watching cleanly). The holder
//! thread does nothing but wait, so its exit is its process's death, an
//! `execve`, or this module's own stop (which releases the words first,
//! also when it unwinds from a panic).
//!
//! Owns: the holder's robust list (`set_robust_list`, saving and restoring
//! the one glibc registered for the thread), the watch loop, the eventfd
//! that says something was seen. Must not: decide who failed (the runtime
//! hands a death to the Engine as an exit), or block the progress thread.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use libc::{FUTEX_OWNER_DIED, FUTEX_TID_MASK, FUTEX_WAITERS};

use super::sched::Boost;
use super::segment::HostSegment;

/// Words one thread waits on: `FUTEX_WAITV_MAX` less the stop word, the
/// notice board's bell and the rank's mail word (`mailbox.rs`).
const WATCH_PER_THREAD: usize = libc::FUTEX_WAITV_MAX as usize - 3;

/// The kernel walks at most this many robust-list entries per thread
/// (`ROBUST_LIST_LIMIT`): watchers beyond it rely on their pidfds.
pub const MAX_HELD: usize = 2048;

/// What a watcher saw of a word held for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WordEvent {
    /// The holder thread died holding it: its process is gone (or exec'd).
    Died,
    /// The holder released it: it stopped watching cleanly.
    Released,
}

/// Why exit words cannot be used here.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExitWordUnavailable {
    #[error("futex_waitv is not supported by this kernel (Linux 5.16 or later needed)")]
    NotSupported,
    #[error("futex_waitv was refused: no permission (seccomp or a security module)")]
    NoPermission,
    #[error("set_robust_list failed: {0}")]
    RobustList(String),
    #[error("{0}")]
    Other(String),
}

fn unavailable(err: &io::Error) -> ExitWordUnavailable {
    match err.raw_os_error() {
        Some(libc::ENOSYS) => ExitWordUnavailable::NotSupported,
        Some(libc::EPERM) | Some(libc::EACCES) => ExitWordUnavailable::NoPermission,
        _ => ExitWordUnavailable::Other(err.to_string()),
    }
}

/// Whether `futex_waitv` exists here (for `ffd info` and start-up): a call
/// with no words is `EINVAL` where it exists, `ENOSYS` where it does not.
pub fn exit_word_probe() -> Result<(), ExitWordUnavailable> {
    // SAFETY: a null list of zero waiters and no timeout: the kernel
    // rejects the call before reading any memory.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            std::ptr::null::<libc::futex_waitv>(),
            0u32,
            0u32,
            std::ptr::null::<libc::timespec>(),
            libc::CLOCK_MONOTONIC,
        )
    };
    let err = io::Error::last_os_error();
    if ret < 0 && err.raw_os_error() == Some(libc::EINVAL) {
        Ok(())
    } else {
        Err(unavailable(&err))
    }
}

/// The same-host ranks (indices among the host's) whose exit-word threads
/// wait on a word `owner` holds for them (`FUTEX_WAITERS` set, before or
/// after the kernel marked it): they see `owner`'s exit themselves.
/// Pushed into `out` in ascending order.
pub fn watchers_of(segment: &HostSegment, owner: u32, out: &mut Vec<u32>) {
    for w in (0..segment.count().min(MAX_HELD as u32)).filter(|&w| w != owner) {
        if let Some(word) = segment.exit_word(owner, w) {
            if word.load(Ordering::Acquire) & FUTEX_WAITERS != 0 {
                out.push(w);
            }
        }
    }
}

/// The kernel's `struct robust_list_head`.
#[repr(C)]
struct RobustListHead {
    /// First entry; the list ends where an entry points back here.
    list: *mut libc::c_void,
    /// From an entry's address to its futex word's.
    futex_offset: libc::c_long,
    list_op_pending: *mut libc::c_void,
}

/// The running exit-word threads of one rank.
#[derive(Debug)]
pub struct ExitWords {
    shared: Arc<Shared>,
    segment: Arc<HostSegment>,
    /// This rank's index among the host's ranks.
    me: u32,
    threads: Vec<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    /// Non-zero: stop (a private futex word the threads also wait on).
    stop: AtomicU32,
    seen: Mutex<Vec<(u64, WordEvent)>>,
    /// Readable when `seen` gained something (an eventfd).
    bell: OwnedFd,
    /// Why a watch loop ended early, if one did.
    broken: Mutex<Option<String>>,
    /// The watched ranks: (index among the host's ranks, token).
    peers: Box<[(u32, u64)]>,
    /// Parallel to `peers`: its death was reported (by a watch loop or a
    /// [`ExitWords::scan`]), so it is reported once.
    died: Box<[AtomicBool]>,
    /// The notice board's bell moved (or the first thread began reading
    /// the board): the progress thread should read the board.
    board: AtomicBool,
    /// Lifts the progress thread before it is rung (`FFD_SCHED=boost|fifo`).
    boost: Option<Arc<Boost>>,
}

impl Shared {
    /// `peers[i]` died: true the first time only.
    fn first_death(&self, i: usize) -> bool {
        self.died
            .get(i)
            .is_some_and(|d| !d.swap(true, Ordering::AcqRel))
    }

    /// Hands `events` to the progress thread and rings it, also when only
    /// the board or the mail word moved.
    fn ring(&self, events: &mut Vec<(u64, WordEvent)>, board: bool, mail: bool) {
        if events.is_empty() && !board && !mail {
            return;
        }
        if board {
            self.board.store(true, Ordering::Release);
        }
        if !events.is_empty() {
            if let Ok(mut seen) = self.seen.lock() {
                seen.append(events);
            }
        }
        // Mail alone is no exit or notice: the thread runs at its policy.
        if let (Some(boost), true) = (&self.boost, board || !events.is_empty()) {
            boost.lift();
        }
        self.bell();
    }

    fn bell(&self) {
        let one: u64 = 1;
        // SAFETY: the eventfd is open for the life of `self`; write reads
        // 8 bytes from `one`. A full counter (EAGAIN) still reads ready.
        unsafe { libc::write(self.bell.as_raw_fd(), (&raw const one).cast(), 8) };
    }
}

impl ExitWords {
    /// Starts the threads of local rank `me` (its index in the host's
    /// segment): the first holds the words `[me][w]` for every other local
    /// rank `w` (at most [`MAX_HELD`]); together they wait on `[o][me]`
    /// for each `(o, token)` in `peers`. Returns once the words are held.
    /// `boost`: the lift of the calling thread, which must be the one that
    /// drops these words (the drop joins the threads that lift it); the
    /// threads then run as [`Boost::ready_exit_word_thread`] says and lift it
    /// before each ring.
    pub fn start(
        segment: Arc<HostSegment>,
        me: u32,
        peers: Vec<(u32, u64)>,
        name: &str,
        boost: Option<Arc<Boost>>,
    ) -> Result<ExitWords, ExitWordUnavailable> {
        exit_word_probe()?;
        // SAFETY: eventfd takes an initial value and flags; returns a new
        // fd or -1.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(ExitWordUnavailable::Other(format!(
                "eventfd: {}",
                io::Error::last_os_error()
            )));
        }
        // SAFETY: `raw` is the fresh fd eventfd returned.
        let bell = unsafe { OwnedFd::from_raw_fd(raw) };
        let died = peers.iter().map(|_| AtomicBool::new(false)).collect();
        let shared = Arc::new(Shared {
            stop: AtomicU32::new(0),
            seen: Mutex::new(Vec::new()),
            bell,
            broken: Mutex::new(None),
            peers: peers.into_boxed_slice(),
            died,
            board: AtomicBool::new(false),
            boost,
        });
        let mut words = ExitWords {
            shared,
            segment: Arc::clone(&segment),
            me,
            threads: Vec::new(),
        };
        // Each thread watches a range of `peers`, by index.
        let watched = words.shared.peers.len();
        let mut chunks: Vec<std::ops::Range<usize>> = (0..watched)
            .step_by(WATCH_PER_THREAD)
            .map(|start| start..(start + WATCH_PER_THREAD).min(watched))
            .collect();
        if chunks.is_empty() {
            chunks.push(0..0);
        }
        for (i, chunk) in chunks.into_iter().enumerate() {
            let holder = i == 0;
            let (ready_tx, ready_rx) = mpsc::channel();
            let seg = Arc::clone(&segment);
            let shared = Arc::clone(&words.shared);
            let spawned = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || run(&seg, &shared, me, chunk, holder, &ready_tx));
            let handle = spawned.map_err(|e| ExitWordUnavailable::Other(e.to_string()))?;
            words.threads.push(handle);
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(ExitWordUnavailable::Other(
                        "the exit-word thread ended before it was ready".to_owned(),
                    ));
                }
            }
        }
        Ok(words)
    }

    /// How many same-host ranks are watched through their exit words.
    pub fn len(&self) -> usize {
        self.shared.peers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shared.peers.is_empty()
    }

    /// Reads the watched words directly, without waiting for a watch
    /// loop to be scheduled: the deaths the kernel has marked and nobody
    /// reported yet go into `out` (token, [`WordEvent::Died`]), each once
    /// whoever sees it first. One load per watched rank, no syscall: for
    /// the progress thread before it handles messages, which may be
    /// notices of the same exit sent by a rank whose watch loop ran first.
    pub fn scan(&self, out: &mut Vec<(u64, WordEvent)>) {
        let shared = &self.shared;
        for (i, &(owner, token)) in shared.peers.iter().enumerate() {
            if shared.died[i].load(Ordering::Acquire) {
                continue;
            }
            let Some(word) = self.segment.exit_word(owner, self.me) else {
                continue;
            };
            if word.load(Ordering::Acquire) & FUTEX_OWNER_DIED != 0 && shared.first_death(i) {
                out.push((token, WordEvent::Died));
            }
        }
    }

    /// Readable when something was seen, or a watch loop ended: add it
    /// to the progress thread's epoll set, and call [`Self::take`] and
    /// [`Self::broken`] only when it is.
    pub fn bell(&self) -> BorrowedFd<'_> {
        self.shared.bell.as_fd()
    }

    /// What was seen since the last call (token and event), each once.
    pub fn take(&self, out: &mut Vec<(u64, WordEvent)>) {
        let mut count = [0u8; 8];
        // SAFETY: the eventfd is open; read writes at most 8 bytes into
        // `count`. Reset before draining: a later ring is not lost.
        unsafe { libc::read(self.shared.bell.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
        if let Ok(mut seen) = self.shared.seen.lock() {
            out.append(&mut seen);
        }
    }

    /// Whether the host's notice board moved since the last call (the
    /// first thread waits on its bell): read it then.
    pub fn take_board(&self) -> bool {
        self.shared.board.swap(false, Ordering::AcqRel)
    }

    /// Why a watch loop ended (an unexpected `futex_waitv` error), if one
    /// did: its ranks are then watched by their pidfds and counters only.
    pub fn broken(&self) -> Option<String> {
        self.shared.broken.lock().ok().and_then(|b| b.clone())
    }
}

impl Drop for ExitWords {
    fn drop(&mut self) {
        self.shared.stop.store(1, Ordering::Release);
        for _ in &self.threads {
            wake(&self.shared.stop, true);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Wakes every waiter on `word` (`private`: only this process's).
pub(super) fn wake(word: &AtomicU32, private: bool) {
    let op = if private {
        libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG
    } else {
        libc::FUTEX_WAKE
    };
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAKE reads no other
    // argument than the count.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), op, i32::MAX) };
}

/// The words this thread holds, on its robust list; released (and glibc's
/// list given back) on drop, also when the thread unwinds.
struct Holding<'a> {
    segment: &'a HostSegment,
    me: u32,
    held: Vec<u32>,
    head: Box<RobustListHead>,
    /// Parallel to the matrix row: entry `w` is 8 bytes before entry
    /// `w + 1`, like word `[me][w]` and `[me][w + 1]`.
    _entries: Box<[usize]>,
    glibc_head: *mut libc::c_void,
}

impl<'a> Holding<'a> {
    fn take(segment: &'a HostSegment, me: u32) -> Result<Holding<'a>, ExitWordUnavailable> {
        let count = segment.count().min(MAX_HELD as u32);
        let held: Vec<u32> = (0..count).filter(|&w| w != me).collect();
        let mut entries = vec![0usize; count as usize].into_boxed_slice();
        let mut head = Box::new(RobustListHead {
            list: std::ptr::null_mut(),
            futex_offset: 0,
            list_op_pending: std::ptr::null_mut(),
        });
        let head_addr = (&raw mut *head) as usize;
        let Some(row) = segment.exit_word(me, 0) else {
            return Err(ExitWordUnavailable::Other("no exit-word row".to_owned()));
        };
        let base = entries.as_mut_ptr() as usize;
        head.futex_offset = (row.as_ptr() as isize).wrapping_sub(base as isize) as libc::c_long;
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = unsafe { libc::gettid() } as u32 & FUTEX_TID_MASK;
        let mut next = head_addr;
        for &w in held.iter().rev() {
            entries[w as usize] = next;
            next = base + 8 * w as usize;
        }
        head.list = next as *mut libc::c_void;
        let mut glibc_head: *mut libc::c_void = std::ptr::null_mut();
        let mut glibc_len: usize = 0;
        // SAFETY: get_robust_list(0, …) writes this thread's head pointer
        // and its length into the two out-parameters.
        unsafe {
            libc::syscall(
                libc::SYS_get_robust_list,
                0,
                &raw mut glibc_head,
                &raw mut glibc_len,
            )
        };
        for &w in &held {
            if let Some(word) = segment.exit_word(me, w) {
                word.store(tid, Ordering::Release);
            }
        }
        let holding = Holding {
            segment,
            me,
            held,
            head,
            _entries: entries,
            glibc_head,
        };
        // SAFETY: the head and its entries live in `holding` (boxed, so
        // they do not move) until its drop puts glibc's head back; every
        // entry points to the next or back to the head, and entry + offset
        // is a word of the mapped segment, which outlives the thread.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_set_robust_list,
                &raw const *holding.head,
                std::mem::size_of::<RobustListHead>(),
            )
        };
        if ret != 0 {
            let err = io::Error::last_os_error();
            return Err(ExitWordUnavailable::RobustList(err.to_string()));
        }
        // Watchers that began while the words were 0 look again.
        for &w in &holding.held {
            if let Some(word) = segment.exit_word(me, w) {
                wake(word, false);
            }
        }
        Ok(holding)
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        // Give the thread glibc's list back (or none) first: from here on
        // its exit marks nothing, and our head may be freed.
        // SAFETY: the head glibc registered for this thread as
        // get_robust_list returned it (it lives as long as the thread), or
        // null, which the kernel takes as no list.
        unsafe {
            libc::syscall(
                libc::SYS_set_robust_list,
                self.glibc_head,
                std::mem::size_of::<RobustListHead>(),
            )
        };
        for &w in &self.held {
            if let Some(word) = self.segment.exit_word(self.me, w) {
                let old = word.swap(0, Ordering::AcqRel);
                if old & FUTEX_WAITERS != 0 {
                    wake(word, false);
                }
            }
        }
    }
}

/// One exit-word thread: hold the row (the first thread), then watch
/// `peers` until told to stop.
fn run(
    segment: &HostSegment,
    shared: &Shared,
    me: u32,
    peers: std::ops::Range<usize>,
    holder: bool,
    ready: &mpsc::Sender<Result<(), ExitWordUnavailable>>,
) {
    if let Some(boost) = &shared.boost {
        // Refused only if the host's limits changed since the progress
        // thread's check: the thread then watches at its inherited
        // policy and CPU, and still lifts the progress thread if it can.
        let _ = boost.ready_exit_word_thread();
    }
    let _holding = if holder {
        match Holding::take(segment, me) {
            Ok(h) => Some(h),
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        }
    } else {
        None
    };
    let _ = ready.send(Ok(()));
    if let Err(why) = watch(segment, shared, me, peers, holder) {
        if let Ok(mut broken) = shared.broken.lock() {
            broken.get_or_insert(why);
        }
        shared.bell();
    }
}

/// A `futex_waitv` entry for `word` expected to hold `val`.
pub(super) fn waiter(word: &AtomicU32, val: u32, private: bool) -> libc::futex_waitv {
    // SAFETY: futex_waitv is plain data; all-zero is a valid value.
    let mut w: libc::futex_waitv = unsafe { std::mem::zeroed() };
    w.val = u64::from(val);
    w.uaddr = word.as_ptr() as u64;
    w.flags = (libc::FUTEX2_SIZE_U32 | if private { libc::FUTEX2_PRIVATE } else { 0 }) as u32;
    w
}

/// Clears this rank's board-reader flag when its reading ends (also on
/// unwind): posters then send it fabric copies again.
struct ReaderFlag<'a>(&'a HostSegment, u32);

impl Drop for ReaderFlag<'_> {
    fn drop(&mut self) {
        super::board::set_reader(self.0, self.1, false);
    }
}

/// Watches the words `[o][me]` of `shared.peers[peers]` until
/// `shared.stop`, and (`board`) the notice board's bell.
fn watch(
    segment: &HostSegment,
    shared: &Shared,
    me: u32,
    peers: std::ops::Range<usize>,
    board: bool,
) -> Result<(), String> {
    // Flag first, then read the bell, then have the board read once: a
    // post made before the flag was seen is in the bitmap.
    let flag = board.then(|| segment.board_reader(me)).flatten();
    let _flag = flag.map(|_| {
        super::board::set_reader(segment, me, true);
        ReaderFlag(segment, me)
    });
    let bell = flag.map(|_| segment.board_bell());
    let mut bell_seen = bell.map(|b| b.load(Ordering::Acquire));
    let mut board_moved = bell.is_some();
    // The mail word: rung by a writer while this rank's progress thread
    // sleeps (`mailbox.rs`); it reads its mailbox at every turn.
    let mail = board
        .then(|| segment.mailbox_line(me))
        .flatten()
        .map(|(m, _, _)| m);
    let mut mail_seen = mail.map(|m| m.load(Ordering::Acquire));
    // (index in `shared.peers`, owner, token, seen held)
    let mut live: Vec<(usize, u32, u64, bool)> = peers
        .filter_map(|i| shared.peers.get(i).map(|&(o, t)| (i, o, t, false)))
        .collect();
    // The words, the bell, the stop word.
    let mut waits: Vec<libc::futex_waitv> = Vec::with_capacity(live.len() + 2);
    let mut events = Vec::new();
    while shared.stop.load(Ordering::Acquire) == 0 {
        waits.clear();
        live.retain_mut(|(i, owner, token, seen_held)| {
            let Some(word) = segment.exit_word(*owner, me) else {
                return false;
            };
            loop {
                let v = word.load(Ordering::Acquire);
                if v & FUTEX_OWNER_DIED != 0 {
                    if shared.first_death(*i) {
                        events.push((*token, WordEvent::Died));
                    }
                    return false;
                }
                if v & FUTEX_TID_MASK == 0 {
                    if *seen_held {
                        events.push((*token, WordEvent::Released));
                        return false;
                    }
                    waits.push(waiter(word, v, false));
                    return true;
                }
                *seen_held = true;
                let want = v | FUTEX_WAITERS;
                if v != want
                    && word
                        .compare_exchange(v, want, Ordering::AcqRel, Ordering::Acquire)
                        .is_err()
                {
                    continue;
                }
                waits.push(waiter(word, want, false));
                return true;
            }
        });
        if let (Some(b), Some(seen)) = (bell, bell_seen.as_mut()) {
            let v = b.load(Ordering::Acquire);
            if v != *seen {
                *seen = v;
                board_moved = true;
            }
            waits.push(waiter(b, v, false));
        }
        let mut mail_moved = false;
        if let (Some(m), Some(seen)) = (mail, mail_seen.as_mut()) {
            let v = m.load(Ordering::Acquire);
            mail_moved = v != *seen;
            *seen = v;
            waits.push(waiter(m, v, false));
        }
        shared.ring(&mut events, std::mem::take(&mut board_moved), mail_moved);
        waits.push(waiter(&shared.stop, 0, true));
        // SAFETY: `waits` holds at most FUTEX_WAITV_MAX valid entries whose
        // words (the segment's, which outlives this thread, and `stop`)
        // stay mapped during the call; no timeout.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_futex_waitv,
                waits.as_ptr(),
                waits.len() as u32,
                0u32,
                std::ptr::null::<libc::timespec>(),
                libc::CLOCK_MONOTONIC,
            )
        };
        if ret < 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                // A word changed before the wait: look again.
                Some(libc::EAGAIN) | Some(libc::EINTR) => {}
                _ => return Err(format!("futex_waitv: {err}")),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(tag: &str, count: u32) -> (Arc<HostSegment>, HostSegment) {
        let name = format!("/ffd-test-{}-{tag}", std::process::id());
        let a = HostSegment::create(&name, count, 8).unwrap();
        let b = HostSegment::open(&name, count, 8).unwrap();
        (Arc::new(a), b)
    }

    /// Whether this kernel lacks `futex_waitv` (the test is then skipped).
    fn no_futex_waitv() -> bool {
        let missing = exit_word_probe().is_err();
        if missing {
            eprintln!("skipped: no futex_waitv here");
        }
        missing
    }

    /// A thread that holds `owner`'s row the way the holder does and then
    /// ends without releasing it: its exit is what a process death looks
    /// like to the kernel's robust-list walk.
    fn die_holding(segment: &Arc<HostSegment>, owner: u32) {
        let seg = Arc::clone(segment);
        std::thread::spawn(move || {
            let h = Holding::take(&seg, owner).unwrap();
            std::mem::forget(h);
        })
        .join()
        .unwrap();
    }

    /// Until a watcher waits on `word` (it sets `FUTEX_WAITERS` first), at
    /// most 10 s.
    fn wait_until_waited(word: &AtomicU32) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while word.load(Ordering::Acquire) & FUTEX_WAITERS == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the watcher never waited"
            );
            std::thread::yield_now();
        }
    }

    fn wait_for(words: &ExitWords, want: usize) -> Vec<(u64, WordEvent)> {
        let mut out = Vec::new();
        let mut pfd = libc::pollfd {
            fd: words.bell().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        while out.len() < want {
            // SAFETY: one valid pollfd; a 10 s bound.
            let n = unsafe { libc::poll(&mut pfd, 1, 10_000) };
            assert!(n > 0, "nothing seen within 10 s: {out:?}");
            words.take(&mut out);
        }
        out
    }

    #[test]
    fn a_released_row_is_seen_as_released_not_died() {
        if no_futex_waitv() {
            return;
        }
        let (a, b) = segment("exitwords-release", 2);
        let b = Arc::new(b);
        // Rank 1 watches rank 0; rank 0 holds its row, then stops cleanly.
        let watcher = ExitWords::start(Arc::clone(&b), 1, vec![(0, 70)], "t-w", None).unwrap();
        let holder = ExitWords::start(Arc::clone(&a), 0, vec![(1, 71)], "t-h", None).unwrap();
        let word = a.exit_word(0, 1).unwrap();
        assert_ne!(word.load(Ordering::Acquire) & FUTEX_TID_MASK, 0);
        // A release the watcher never saw held is no event: wait until it
        // waits on the held word (it sets FUTEX_WAITERS first).
        wait_until_waited(word);
        drop(holder);
        assert_eq!(wait_for(&watcher, 1), vec![(70, WordEvent::Released)]);
        assert_eq!(word.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_holder_thread_that_dies_marks_its_words_and_wakes_its_watcher() {
        if no_futex_waitv() {
            return;
        }
        let (a, b) = segment("exitwords-death", 3);
        let watcher =
            ExitWords::start(Arc::new(b), 2, vec![(0, 80), (1, 81)], "t-w", None).unwrap();
        // Rank 0's holder dies holding its row.
        die_holding(&a, 0);
        assert_eq!(wait_for(&watcher, 1), vec![(80, WordEvent::Died)]);
        let v = a.exit_word(0, 2).unwrap().load(Ordering::Acquire);
        assert_eq!(v & FUTEX_OWNER_DIED, FUTEX_OWNER_DIED, "{v:#x}");
        // Row 1 was never held: nothing for it.
        let mut more = Vec::new();
        watcher.take(&mut more);
        assert!(more.is_empty(), "{more:?}");
    }

    /// The progress thread's direct read and the watch loop race for a
    /// death: it is reported once, by whichever looks first, and the
    /// read also finds it when the loop has not run.
    #[test]
    fn a_death_is_reported_once_by_the_scan_or_the_watch_loop() {
        if no_futex_waitv() {
            return;
        }
        let (a, b) = segment("exitwords-scan", 3);
        let watcher =
            ExitWords::start(Arc::new(b), 2, vec![(0, 90), (1, 91)], "t-w", None).unwrap();
        let mut seen = Vec::new();
        watcher.scan(&mut seen);
        assert!(seen.is_empty(), "nobody died yet: {seen:?}");
        die_holding(&a, 0);
        // The kernel marked the word before the holder's join returned.
        watcher.scan(&mut seen);
        let mut pfd = libc::pollfd {
            fd: watcher.bell().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // If the scan found nothing, the loop claimed the death first and
        // rings once it has recorded it: wait for that (bounded only
        // against a hang; a loaded machine may run the loop late). If the
        // scan found it, the loop must not report it again: give it the
        // chance (200 ms), then nothing more may come.
        let within = if seen.is_empty() { 20_000 } else { 200 };
        // SAFETY: one valid pollfd; a bounded wait.
        unsafe { libc::poll(&mut pfd, 1, within) };
        watcher.take(&mut seen);
        watcher.scan(&mut seen);
        assert_eq!(seen, vec![(90, WordEvent::Died)]);
    }

    /// `watchers_of` names the ranks waiting on a row's words: those whose
    /// exit-word threads watch its owner.
    #[test]
    fn a_rows_watchers_are_the_ranks_waiting_on_it() {
        if no_futex_waitv() {
            return;
        }
        let (a, b) = segment("exitwords-watchers", 3);
        let _holder = ExitWords::start(Arc::new(b), 0, vec![], "t-h", None).unwrap();
        let mut out = Vec::new();
        watchers_of(&a, 0, &mut out);
        assert!(out.is_empty(), "nobody waits yet: {out:?}");
        // Rank 2 watches rank 0; rank 1 does not.
        let _watcher = ExitWords::start(Arc::clone(&a), 2, vec![(0, 100)], "t-w", None).unwrap();
        wait_until_waited(a.exit_word(0, 2).unwrap());
        watchers_of(&a, 0, &mut out);
        assert_eq!(out, vec![2]);
    }
}
