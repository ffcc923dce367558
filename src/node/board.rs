//! The host's notice board: failures posted in the host's segment for
//! every local rank to read at once (`docs/design.md` §4.12 "Hosts"), instead of
//! a notice's forward-once over the fabric overlay, which wakes each rank
//! of a host once per overlay link it has on the host.
//!
//! A post sets, for each failed rank, its detector (plus one, first poster
//! wins) and then its bit in the board's bitmap (release), then bumps the
//! bell and wakes every waiter on it (one `FUTEX_WAKE`). Each reader's
//! exit-word thread waits on the bell beside its exit words and rings the
//! progress thread, which reads the bits it has not seen (acquire: the
//! detector is there). The bitmap only grows, so a reader that was
//! stopped finds every post when it runs again. A reader's flag (the
//! exit-word matrix's diagonal) says it waits on the bell: a poster's
//! fan-out skips the ranks so flagged. Each change of a flag is followed
//! by a bump of the readers' change count in the segment's header
//! ([`set_reader`]), so a rank that finds the count as it was at its last
//! scan of the flags skips the scan ([`readers_changes`]): one load of a
//! line every rank reads, instead of one cold line per local rank at each
//! idle wake-up.
//!
//! Owns: the post, the read, the flags. Must not: decide who failed (the
//! Engine posts and learns), or block.

use std::sync::atomic::Ordering;

use super::exit_word::wake;
use super::segment::HostSegment;

/// Posts `failed` (ranks of the job; others are ignored), news of
/// `detector`, and wakes the board's readers if any of it was new there
/// (several ranks of a host may get the same news over the fabric at
/// once: the readers are woken once). Returns how many ranks were new.
pub fn post(segment: &HostSegment, failed: &[u32], detector: u32) -> usize {
    let mut new = 0;
    for &rank in failed {
        let (Some(det), Some(bits)) = (
            segment.board_detector(rank),
            segment.board_bits(rank as usize / 64),
        ) else {
            continue;
        };
        let _ = det.compare_exchange(
            0,
            detector.saturating_add(1),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        let bit = 1 << (rank % 64);
        if bits.fetch_or(bit, Ordering::AcqRel) & bit == 0 {
            new += 1;
        }
    }
    if new > 0 {
        let bell = segment.board_bell();
        bell.fetch_add(1, Ordering::AcqRel);
        wake(bell, false);
    }
    new
}

/// One rank's reading of the board: the bits it has seen.
#[derive(Debug, Default)]
pub struct BoardReader {
    seen: Vec<u64>,
}

impl BoardReader {
    /// Pushes (rank, detector) for each failure posted since the last
    /// read (detector `u32::MAX` if none was written, which cannot happen
    /// for a post made through [`post`]).
    pub fn read(&mut self, segment: &HostSegment, out: &mut Vec<(u32, u32)>) {
        let words = (segment.ranks() as usize).div_ceil(64);
        self.seen.resize(words, 0);
        for (i, seen) in self.seen.iter_mut().enumerate() {
            let Some(bits) = segment.board_bits(i) else {
                break;
            };
            let mut new = bits.load(Ordering::Acquire) & !*seen;
            *seen |= new;
            while new != 0 {
                let bit = new.trailing_zeros();
                new &= new - 1;
                let rank = (i as u32) * 64 + bit;
                let detector = segment
                    .board_detector(rank)
                    .map_or(0, |d| d.load(Ordering::Acquire));
                out.push((rank, detector.wrapping_sub(1)));
            }
        }
    }
}

/// Sets local rank `index`'s reader flag (`on`: its exit-word thread
/// waits on the bell) and then bumps the readers' change count (release:
/// a rank that reads the new count sees the flag).
pub fn set_reader(segment: &HostSegment, index: u32, on: bool) {
    if let Some(flag) = segment.board_reader(index) {
        flag.store(u32::from(on), Ordering::Release);
        segment
            .board_readers_changes()
            .fetch_add(1, Ordering::Release);
    }
}

/// The readers' change count: read it before a scan of the flags
/// ([`readers`]); while it stays the same, so do the flags.
pub fn readers_changes(segment: &HostSegment) -> u32 {
    segment.board_readers_changes().load(Ordering::Acquire)
}

/// The same-host ranks (indices among the host's) whose exit-word threads
/// wait on the board's bell, ascending.
pub fn readers(segment: &HostSegment, out: &mut Vec<u32>) {
    for w in 0..segment.count() {
        if segment
            .board_reader(w)
            .is_some_and(|f| f.load(Ordering::Acquire) == 1)
        {
            out.push(w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_post_is_read_once_with_its_detector_and_only_grows() {
        let name = format!("/ffd-test-{}-board", std::process::id());
        let a = HostSegment::create(&name, 2, 130).unwrap();
        let b = HostSegment::open(&name, 2, 130).unwrap();
        let mut reader = BoardReader::default();
        let mut out = Vec::new();
        reader.read(&b, &mut out);
        assert!(out.is_empty());
        let bell = b.board_bell().load(Ordering::Acquire);
        assert_eq!(post(&a, &[3, 129, 200], 7), 2);
        assert_eq!(b.board_bell().load(Ordering::Acquire), bell + 1);
        // Nothing new: no ring.
        assert_eq!(post(&b, &[129], 8), 0);
        assert_eq!(b.board_bell().load(Ordering::Acquire), bell + 1);
        reader.read(&b, &mut out);
        assert_eq!(out, vec![(3, 7), (129, 7)], "200 is not a rank of the job");
        out.clear();
        reader.read(&b, &mut out);
        assert!(out.is_empty(), "each once: {out:?}");
        // A second post of the same rank keeps the first detector.
        assert_eq!(post(&a, &[3, 64], 9), 1);
        reader.read(&b, &mut out);
        assert_eq!(out, vec![(64, 9)]);
        let mut late = BoardReader::default();
        out.clear();
        late.read(&b, &mut out);
        assert_eq!(
            out,
            vec![(3, 7), (64, 9), (129, 7)],
            "a late reader finds all"
        );
    }

    #[test]
    fn readers_are_the_flagged_ranks() {
        let name = format!("/ffd-test-{}-readers", std::process::id());
        let a = HostSegment::create(&name, 3, 3).unwrap();
        let mut out = Vec::new();
        readers(&a, &mut out);
        assert!(out.is_empty());
        let before = readers_changes(&a);
        set_reader(&a, 2, true);
        let changed = readers_changes(&a);
        assert_ne!(changed, before, "a change is counted");
        readers(&a, &mut out);
        assert_eq!(out, vec![2]);
        // Another mapping sees the count and the flag; a clear counts too.
        let b = HostSegment::open(&name, 3, 3).unwrap();
        assert_eq!(readers_changes(&b), changed);
        set_reader(&b, 2, false);
        assert_ne!(readers_changes(&a), changed);
        out.clear();
        readers(&a, &mut out);
        assert!(out.is_empty());
        // Past the host's ranks: nothing, not even a count.
        let now = readers_changes(&a);
        set_reader(&a, 3, true);
        assert_eq!(readers_changes(&a), now);
    }
}
