//! The per-host shared-memory segment of wake-up counters
//! (`/dev/shm/ffd-<job key>-<host id>`): one 64-byte line per local rank,
//! each written by its owner only, with a plain store at every wake-up.
//!
//! Layout: line 0 is the header (magic `FFDLOCA2` u64, local rank count
//! u32, ranks that mapped it u32); line 1 + i belongs to the host's i-th
//! rank (rank order): its last wake-up on `CLOCK_MONOTONIC` in ns (u64, 0:
//! never) and the digest fold of its failed ∪ left set then (u64, low 32
//! bits), then the thread id of its progress thread (u64, 0: not yet
//! written), written once when that thread starts, then its *ended*
//! mark (u64, 1 once its detector stopped watching: written before its
//! process can exit, so a peer that sees the exit knows it left first).
//! Lines are cache-line aligned so that no two writers share one.
//! After the lines, the exit-word matrix: `count × count` slots of 8
//! bytes, slot `[o][w]` (at `o × count + w`) holding in its low 32 bits
//! the futex word rank `o` holds for its watcher `w` (`exit_word.rs`);
//! the diagonal `[w][w]` is 1 while `w`'s exit-word thread reads the
//! notice board. Then the host's notice board (`board.rs`): a line whose
//! first u32 is the board's bell (a futex word every board reader's
//! exit-word thread waits on, bumped at each post), a bitmap of the job's
//! `ranks` ranks (a bit set: posted as failed), and one u32 per job rank:
//! the detector of its failure plus one (0: none posted). The header
//! also holds the job's rank count (u32 at byte 16) and the count of
//! changes of the board readers' flags (u32 at byte 20, `board.rs`).
//! In a one-host job (every rank of the job on this host), then the
//! agreement area (`runtime/host_agree.rs`), from the next line: a line
//! with its bell (u32, a futex word bumped at each contribution and
//! decision), its sleepers (u32: callers waiting on the bell) and the
//! decision word of each of the two rounds in use (u64 each); then, per
//! rank, per kind (contribution, proposal), per round, one record of
//! [`AGREE_RECORD_HEAD`] words and a bitmap of the job's ranks, rounded up
//! to whole lines.
//!
//! Owns: creating (the host's lowest rank), opening (the others, after a
//! start-up barrier), unlinking once every local rank mapped it (so a
//! `kill -9` leaves nothing in `/dev/shm`), and the atomic accesses into
//! the mapping. Must not: be read or written outside `AtomicU64` accesses
//! (other processes write it concurrently).

use std::ffi::CString;
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Changed with the layout: a segment of another build is then refused
/// as foreign (`FFDLOCA2`: the mailbox lines' bitmap of claimed records,
/// which a reader trusts and an older writer would not mark).
const MAGIC: u64 = u64::from_le_bytes(*b"FFDLOCA2");
const LINE: usize = 64;

/// The agreement area's rounds in use at once (see
/// `runtime/host_agree.rs`: round `u` and `u + 1`).
pub const AGREE_ROUNDS: usize = 2;
/// The words of an agreement record before its bitmap.
pub const AGREE_RECORD_HEAD: usize = 3;

/// What an agreement record holds (see [`HostSegment::agree_record`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgreeRecord {
    /// A rank's contribution to a round.
    Contribution,
    /// A rank's proposed decision of a round.
    Proposal,
}

/// The bytes one mailbox record carries for a job of `ranks`: at least
/// the runtime's message buffer (`runtime/progress`'s `message_buffers`,
/// which a test there checks against this), so every message of the
/// protocol fits one record: a failed and a left list as bitmaps and the
/// payload marks (16 KiB at most), or a payload of 8 KiB.
pub fn mail_capacity(ranks: u32) -> usize {
    (2 * (ranks as usize).div_ceil(8) + 24 * 1024).next_multiple_of(4096)
}

/// Records per mailbox for a host of `count` ranks: two per other local
/// rank (an agreement's fan-in to the host's head, and a notice behind
/// it), at least 32, at most 256. The mapping is sparse: only the pages
/// of records written are ever backed.
pub fn mail_slots(count: u32) -> usize {
    (2 * count as usize).clamp(32, 256)
}

/// The segment's name for a job and a host (`shm_open` form, one leading
/// slash; it appears as `/dev/shm/ffd-…`).
pub fn segment_name(job_key: u64, host_id: u64) -> String {
    format!("/ffd-{job_key:016x}-{host_id:016x}")
}

/// Why the segment could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    #[error("{what} of the shared-memory segment {name} failed: {source}")]
    Io {
        what: &'static str,
        name: String,
        #[source]
        source: io::Error,
    },
    #[error("the shared-memory segment {name} is not this job's ({why})")]
    Foreign { name: String, why: String },
}

/// A mapping of the segment.
#[derive(Debug)]
pub struct HostSegment {
    base: *mut u8,
    len: usize,
    count: u32,
    /// The job's ranks (the board's bitmap covers them).
    ranks: u32,
    name: String,
    /// This process created it: it unlinks it on drop if the others did not.
    creator: bool,
}

// SAFETY: the mapping is shared memory accessed only through atomics (see
// `word`); the pointer is owned by this value and unmapped once, on drop.
unsafe impl Send for HostSegment {}
// SAFETY: as above: every access is atomic, so sharing `&HostSegment`
// between threads is no different from sharing it between processes.
unsafe impl Sync for HostSegment {}

fn io_error(what: &'static str, name: &str) -> SegmentError {
    SegmentError::Io {
        what,
        name: name.to_owned(),
        source: io::Error::last_os_error(),
    }
}

impl HostSegment {
    fn lines_len(count: u32) -> usize {
        LINE * (1 + count as usize)
    }

    fn matrix_len(count: u32) -> usize {
        8 * count as usize * count as usize
    }

    /// Where the notice board starts: its bell's line.
    fn board_at(count: u32) -> usize {
        Self::lines_len(count) + Self::matrix_len(count)
    }

    fn bitmap_words(ranks: u32) -> usize {
        (ranks as usize).div_ceil(64)
    }

    fn board_len(ranks: u32) -> usize {
        LINE + 8 * Self::bitmap_words(ranks) + 4 * (ranks as usize).next_multiple_of(2)
    }

    /// Where the agreement area starts (its line of bell and decisions).
    fn agree_at(count: u32, ranks: u32) -> usize {
        (Self::board_at(count) + Self::board_len(ranks)).next_multiple_of(LINE)
    }

    /// Whether the segment has an agreement area: the whole job is on
    /// this host (and its ranks fit a decision word's 16 bits).
    fn has_agreement_area(count: u32, ranks: u32) -> bool {
        count >= 2 && count == ranks && count <= 1 << 16
    }

    fn agree_record_len(ranks: u32) -> usize {
        (8 * (AGREE_RECORD_HEAD + Self::bitmap_words(ranks))).next_multiple_of(LINE)
    }

    /// Where the areas before the mailboxes end.
    fn areas_end(count: u32, ranks: u32) -> usize {
        let board_end = Self::board_at(count) + Self::board_len(ranks);
        if Self::has_agreement_area(count, ranks) {
            Self::agree_at(count, ranks)
                + LINE
                + Self::agree_record_len(ranks) * 2 * AGREE_ROUNDS * count as usize
        } else {
            board_end
        }
    }

    /// Where the mailboxes start (one per local rank, `mailbox.rs`), when
    /// the host has two ranks or more.
    fn mail_at(count: u32, ranks: u32) -> usize {
        Self::areas_end(count, ranks).next_multiple_of(LINE)
    }

    /// One mailbox record: its state and sequence words, then
    /// [`mail_capacity`] bytes.
    fn mail_record_len(ranks: u32) -> usize {
        (16 + mail_capacity(ranks)).next_multiple_of(LINE)
    }

    /// One mailbox: its line (mail word, awake flag, posted count, door
    /// flag, the bitmap of records ever claimed), then
    /// its records.
    fn mailbox_len(count: u32, ranks: u32) -> usize {
        LINE + mail_slots(count) * Self::mail_record_len(ranks)
    }

    fn len_for(count: u32, ranks: u32) -> usize {
        if count >= 2 {
            Self::mail_at(count, ranks) + count as usize * Self::mailbox_len(count, ranks)
        } else {
            Self::areas_end(count, ranks)
        }
    }

    /// Creates the segment `name` for `count` same-host ranks of a job of
    /// `ranks` (an earlier leftover of the same name is replaced) and maps
    /// it; this process counts as having mapped it.
    pub fn create(name: &str, count: u32, ranks: u32) -> Result<HostSegment, SegmentError> {
        let cname = c_name(name)?;
        let len = Self::len_for(count, ranks);
        let mut fd = open(&cname, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR);
        if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
            // SAFETY: a NUL-terminated name; shm_unlink reads only it.
            unsafe { libc::shm_unlink(cname.as_ptr()) };
            fd = open(&cname, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR);
        }
        if fd < 0 {
            return Err(io_error("creation", name));
        }
        // SAFETY: `fd` is the open shm object; ftruncate sets its size.
        let sized = unsafe { libc::ftruncate(fd, len as libc::off_t) } == 0;
        let mapped = if sized { map(fd, len) } else { None };
        // SAFETY: `fd` is ours; the mapping (if any) keeps the object.
        unsafe { libc::close(fd) };
        let Some(base) = mapped else {
            // SAFETY: as above.
            unsafe { libc::shm_unlink(cname.as_ptr()) };
            return Err(io_error("sizing or mapping", name));
        };
        let seg = HostSegment {
            base,
            len,
            count,
            ranks,
            name: name.to_owned(),
            creator: true,
        };
        seg.header_count().store(count, Ordering::Relaxed);
        seg.header_ranks().store(ranks, Ordering::Relaxed);
        seg.header_mapped().store(1, Ordering::Relaxed);
        seg.header_magic().store(MAGIC, Ordering::Release);
        if count <= 1 {
            seg.unlink();
        }
        Ok(seg)
    }

    /// Opens and maps the segment another local rank created for `count`
    /// same-host ranks of a job of `ranks`; the last of them to map it unlinks
    /// it.
    pub fn open(name: &str, count: u32, ranks: u32) -> Result<HostSegment, SegmentError> {
        let cname = c_name(name)?;
        let len = Self::len_for(count, ranks);
        let fd = open(&cname, libc::O_RDWR);
        if fd < 0 {
            return Err(io_error("opening", name));
        }
        // SAFETY: a zeroed stat is a valid out-parameter for fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open; fstat writes only `st`.
        let ok = unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_size as usize >= len;
        let mapped = if ok { map(fd, len) } else { None };
        // SAFETY: `fd` is ours.
        unsafe { libc::close(fd) };
        let Some(base) = mapped else {
            return Err(SegmentError::Foreign {
                name: name.to_owned(),
                why: format!("smaller than {len} bytes, or not mappable"),
            });
        };
        let seg = HostSegment {
            base,
            len,
            count,
            ranks,
            name: name.to_owned(),
            creator: false,
        };
        if seg.header_magic().load(Ordering::Acquire) != MAGIC
            || seg.header_count().load(Ordering::Relaxed) != count
            || seg.header_ranks().load(Ordering::Relaxed) != ranks
        {
            return Err(SegmentError::Foreign {
                name: name.to_owned(),
                why: format!("no header for {count} same-host ranks of {ranks}"),
            });
        }
        if seg.header_mapped().fetch_add(1, Ordering::AcqRel) + 1 >= count {
            seg.unlink();
        }
        Ok(seg)
    }

    fn unlink(&self) {
        if let Ok(cname) = CString::new(self.name.as_str()) {
            // SAFETY: a NUL-terminated name; ENOENT (already gone) is fine.
            unsafe { libc::shm_unlink(cname.as_ptr()) };
        }
    }

    /// The segment's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The u64 at byte `offset` of the mapping, as an atomic.
    fn word(&self, offset: usize) -> &AtomicU64 {
        assert!(offset + 8 <= self.len && offset % 8 == 0);
        // SAFETY: `offset` is 8-aligned and inside the mapping (checked),
        // which is page-aligned and lives as long as `self`; the memory is
        // shared with other processes, so it is only ever accessed as an
        // atomic.
        unsafe { &*(self.base.add(offset) as *const AtomicU64) }
    }

    fn header_magic(&self) -> &AtomicU64 {
        self.word(0)
    }

    fn header_u32(&self, offset: usize) -> &AtomicU32 {
        assert!(offset + 4 <= LINE);
        self.word32(offset)
    }

    fn header_count(&self) -> &AtomicU32 {
        self.header_u32(8)
    }

    fn header_mapped(&self) -> &AtomicU32 {
        self.header_u32(12)
    }

    fn header_ranks(&self) -> &AtomicU32 {
        self.header_u32(16)
    }

    /// The job's ranks.
    pub fn ranks(&self) -> u32 {
        self.ranks
    }

    /// The u32 at byte `offset` of the mapping, as an atomic.
    fn word32(&self, offset: usize) -> &AtomicU32 {
        assert!(offset + 4 <= self.len && offset % 4 == 0);
        // SAFETY: 4-aligned, inside the live mapping (checked); shared with
        // other processes, so only ever accessed as an atomic (exit words
        // and the bell also by the kernel, as futex words).
        unsafe { &*(self.base.add(offset) as *const AtomicU32) }
    }

    /// The notice board's bell: bumped at each post, waited on by every
    /// reader's exit-word thread.
    pub fn board_bell(&self) -> &AtomicU32 {
        self.word32(Self::board_at(self.count))
    }

    /// The count of changes of the board readers' flags (header u32 at
    /// 20): bumped after each change of one (`board.rs`).
    pub fn board_readers_changes(&self) -> &AtomicU32 {
        self.header_u32(20)
    }

    /// Word `i` of the board's bitmap of failed ranks (`None` past it).
    pub fn board_bits(&self, i: usize) -> Option<&AtomicU64> {
        (i < Self::bitmap_words(self.ranks))
            .then(|| self.word(Self::board_at(self.count) + LINE + 8 * i))
    }

    /// The detector posted for `rank`, plus one (0: none).
    pub fn board_detector(&self, rank: u32) -> Option<&AtomicU32> {
        (rank < self.ranks).then(|| {
            self.word32(
                Self::board_at(self.count)
                    + LINE
                    + 8 * Self::bitmap_words(self.ranks)
                    + 4 * rank as usize,
            )
        })
    }

    /// Local rank `index`'s board-reader flag (the matrix's diagonal): 1
    /// while its exit-word thread waits on the bell.
    pub fn board_reader(&self, index: u32) -> Option<&AtomicU32> {
        self.exit_word(index, index)
    }

    /// Whether this segment has the agreement area (a one-host job).
    pub fn has_agreement(&self) -> bool {
        Self::has_agreement_area(self.count, self.ranks)
    }

    /// The agreement area's bell: bumped at each contribution and
    /// decision, waited on by callers (`None`: no area).
    pub fn agree_bell(&self) -> Option<&AtomicU32> {
        self.has_agreement()
            .then(|| self.word32(Self::agree_at(self.count, self.ranks)))
    }

    /// How many callers wait on the agreement bell (a ringer skips the
    /// `FUTEX_WAKE` when none does).
    pub fn agree_sleepers(&self) -> Option<&AtomicU32> {
        self.has_agreement()
            .then(|| self.word32(Self::agree_at(self.count, self.ranks) + 4))
    }

    /// The decision word of round slot `round` (`< AGREE_ROUNDS`).
    pub fn agree_decision(&self, round: usize) -> Option<&AtomicU64> {
        (self.has_agreement() && round < AGREE_ROUNDS)
            .then(|| self.word(Self::agree_at(self.count, self.ranks) + 8 * (1 + round)))
    }

    /// Rank `rank`'s record of `kind` for round slot `round`: its
    /// [`AGREE_RECORD_HEAD`] words, then the bitmap of the job's ranks
    /// (`None`: no area, or out of range).
    pub fn agree_record(&self, rank: u32, kind: AgreeRecord, round: usize) -> Option<&[AtomicU64]> {
        if !self.has_agreement() || rank >= self.count || round >= AGREE_ROUNDS {
            return None;
        }
        let kind = match kind {
            AgreeRecord::Contribution => 0,
            AgreeRecord::Proposal => 1,
        };
        let index = (rank as usize * 2 + kind) * AGREE_ROUNDS + round;
        let len = Self::agree_record_len(self.ranks);
        let offset = Self::agree_at(self.count, self.ranks) + LINE + index * len;
        let words = AGREE_RECORD_HEAD + Self::bitmap_words(self.ranks);
        assert!(offset + 8 * words <= self.len);
        // SAFETY: `offset` is line-aligned and the `words` u64s after it
        // lie inside the live mapping (checked); shared with other
        // processes, so only ever accessed as atomics, like `word`.
        Some(unsafe {
            std::slice::from_raw_parts(self.base.add(offset) as *const AtomicU64, words)
        })
    }

    /// Where local rank `owner`'s mailbox (its line, then its records)
    /// starts. `None`: no mailboxes (a host of one), or out of range.
    fn mailbox_at(&self, owner: u32) -> Option<usize> {
        (self.count >= 2 && owner < self.count).then(|| {
            Self::mail_at(self.count, self.ranks)
                + owner as usize * Self::mailbox_len(self.count, self.ranks)
        })
    }

    /// The line of local rank `owner`'s mailbox: its mail word (u32 at 0,
    /// a futex word), its awake flag (u32 at 4) and its posted count (u64
    /// at 8). `None`: no mailboxes (a host of one), or out of range.
    pub fn mailbox_line(&self, owner: u32) -> Option<(&AtomicU32, &AtomicU32, &AtomicU64)> {
        let at = self.mailbox_at(owner)?;
        Some((self.word32(at), self.word32(at + 4), self.word(at + 8)))
    }

    /// Local rank `owner`'s doorbell flag (u32 at 16 of its mailbox's
    /// line): 1 while its doorbell is bound (`doorbell.rs`).
    pub fn mailbox_door(&self, owner: u32) -> Option<&AtomicU32> {
        let at = self.mailbox_at(owner)?;
        Some(self.word32(at + 16))
    }

    /// The records of local rank `owner`'s mailbox ever claimed: a bitmap
    /// of [`mail_slots`] bits (at most 256) in four words of its line,
    /// from byte 24; a bit is set by a writer before it publishes into
    /// that record, and never cleared.
    pub fn mailbox_used(&self, owner: u32) -> Option<[&AtomicU64; 4]> {
        let at = self.mailbox_at(owner)?;
        Some([0, 1, 2, 3].map(|k| self.word(at + 24 + 8 * k)))
    }

    /// Record `slot` of local rank `owner`'s mailbox: its state word, its
    /// sequence word and its [`mail_capacity`] bytes as u64 words.
    pub fn mail_record(&self, owner: u32, slot: usize) -> Option<&[AtomicU64]> {
        if slot >= mail_slots(self.count) {
            return None;
        }
        let offset = self.mailbox_at(owner)? + LINE + slot * Self::mail_record_len(self.ranks);
        let words = 2 + mail_capacity(self.ranks) / 8;
        assert!(offset + 8 * words <= self.len);
        // SAFETY: `offset` is line-aligned and the `words` u64s after it
        // lie inside the live mapping (checked); shared with other
        // processes, so only ever accessed as atomics, like `word`.
        Some(unsafe {
            std::slice::from_raw_parts(self.base.add(offset) as *const AtomicU64, words)
        })
    }

    /// Local ranks on this segment.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The exit word local rank `owner` holds for its watcher `watcher`
    /// (`None` outside the host).
    pub fn exit_word(&self, owner: u32, watcher: u32) -> Option<&AtomicU32> {
        if owner >= self.count || watcher >= self.count {
            return None;
        }
        let slot = owner as usize * self.count as usize + watcher as usize;
        // 8-aligned: the lines end on a 64-byte boundary.
        Some(self.word32(Self::lines_len(self.count) + 8 * slot))
    }

    /// Writes local rank `index`'s wake-up (`at_ns` on `CLOCK_MONOTONIC`,
    /// never 0) and digest fold: two plain stores.
    pub fn store(&self, index: u32, at_ns: u64, digest: u32) {
        if index < self.count {
            let line = LINE * (1 + index as usize);
            self.word(line + 8)
                .store(u64::from(digest), Ordering::Relaxed);
            self.word(line).store(at_ns.max(1), Ordering::Release);
        }
    }

    /// Writes local rank `index`'s progress thread id (once, when that
    /// thread starts).
    pub fn store_thread(&self, index: u32, tid: u32) {
        if index < self.count {
            let line = LINE * (1 + index as usize);
            self.word(line + 16)
                .store(u64::from(tid), Ordering::Release);
        }
    }

    /// Marks local rank `index` as no longer watching: its detector has
    /// stopped, before its process exits (a clean end, not a death).
    pub fn store_ended(&self, index: u32) {
        if index < self.count {
            let line = LINE * (1 + index as usize);
            self.word(line + 24).store(1, Ordering::Release);
        }
    }

    /// Whether local rank `index` marked itself ended ([`Self::store_ended`]).
    pub fn ended(&self, index: u32) -> bool {
        index < self.count && {
            let line = LINE * (1 + index as usize);
            self.word(line + 24).load(Ordering::Acquire) != 0
        }
    }

    /// Local rank `index`'s progress thread id (`None`: not written yet).
    pub fn thread(&self, index: u32) -> Option<u32> {
        if index >= self.count {
            return None;
        }
        let line = LINE * (1 + index as usize);
        let tid = self.word(line + 16).load(Ordering::Acquire) as u32;
        (tid != 0).then_some(tid)
    }

    /// Local rank `index`'s last wake-up and digest fold (`None`: never
    /// written).
    pub fn load(&self, index: u32) -> Option<(u64, u32)> {
        if index >= self.count {
            return None;
        }
        let line = LINE * (1 + index as usize);
        let at = self.word(line).load(Ordering::Acquire);
        let digest = self.word(line + 8).load(Ordering::Relaxed) as u32;
        (at != 0).then_some((at, digest))
    }
}

impl Drop for HostSegment {
    fn drop(&mut self) {
        if self.creator && self.header_mapped().load(Ordering::Acquire) < self.count {
            // Not every local rank mapped it (one failed at start): leave
            // nothing behind.
            self.unlink();
        }
        // SAFETY: `base`/`len` are the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

fn c_name(name: &str) -> Result<CString, SegmentError> {
    CString::new(name).map_err(|_| SegmentError::Foreign {
        name: name.escape_debug().to_string(),
        why: "a NUL in the name".to_owned(),
    })
}

fn open(name: &CString, flags: libc::c_int) -> libc::c_int {
    // SAFETY: a NUL-terminated name; shm_open returns an fd or -1.
    unsafe { libc::shm_open(name.as_ptr(), flags | libc::O_CLOEXEC, 0o600) }
}

/// Maps `len` bytes of `fd` shared, read-write; `None` on failure.
fn map(fd: libc::c_int, len: usize) -> Option<*mut u8> {
    // SAFETY: a fresh shared mapping of an fd sized to at least `len`;
    // the kernel picks the address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p.cast())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_rank_to_map_it_unlinks_it_and_writes_are_shared() {
        let name = format!("/ffd-test-{}-segment", std::process::id());
        let path = format!("/dev/shm{name}");
        let a = HostSegment::create(&name, 3, 8).unwrap();
        assert!(std::path::Path::new(&path).exists());
        let b = HostSegment::open(&name, 3, 8).unwrap();
        assert!(
            std::path::Path::new(&path).exists(),
            "one rank still to map"
        );
        let c = HostSegment::open(&name, 3, 8).unwrap();
        assert!(!std::path::Path::new(&path).exists(), "unlinked");
        assert_eq!(b.load(0), None);
        a.store(0, 12345, 0xdead_beef);
        assert_eq!(b.load(0), Some((12345, 0xdead_beef)));
        c.store(2, 7, 1);
        assert_eq!(a.load(2), Some((7, 1)));
        assert_eq!(a.thread(2), None);
        c.store_thread(2, 4321);
        assert_eq!(a.thread(2), Some(4321));
        assert_eq!(a.load(2), Some((7, 1)), "its own word");
        assert!(!a.ended(2));
        c.store_ended(2);
        assert!(a.ended(2) && !a.ended(1), "one rank's mark");
        assert_eq!(a.thread(2), Some(4321), "its own word");
        assert!(!a.ended(3), "outside the host");
        assert_eq!(a.thread(3), None, "outside the host");
        assert_eq!(a.load(3), None, "outside the host");
        assert!(matches!(
            HostSegment::open(&name, 3, 8),
            Err(SegmentError::Io { .. })
        ));
    }

    #[test]
    fn a_segment_of_another_size_is_refused() {
        let name = format!("/ffd-test-{}-size", std::process::id());
        let _a = HostSegment::create(&name, 2, 8).unwrap();
        let err = HostSegment::open(&name, 4, 8).unwrap_err();
        assert!(err.to_string().contains("not this job's"), "{err}");
        // The same host size in a job of another size: its board differs.
        let err = HostSegment::open(&name, 2, 6).unwrap_err();
        assert!(err.to_string().contains("not this job's"), "{err}");
        drop(_a);
        assert!(!std::path::Path::new(&format!("/dev/shm{name}")).exists());
    }
}
