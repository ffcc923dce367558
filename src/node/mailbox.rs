//! Same-host messages through the host's segment (`docs/design.md`
//! §4.12 "Hosts", its mailboxes): one inbound mailbox per local rank, written by
//! every other rank of the host, read by its owner only.
//!
//! A mailbox is a line (the mail word: a futex word its owner's
//! exit-word thread waits on; the owner's awake flag; the count of posts;
//! the bitmap of the records ever claimed) and [`mail_slots`] records. A record's state word is `0` (free),
//! claimed (a writer took it: its local index), or published (its
//! writer's local index and the length); then the writer's sequence
//! number for this mailbox, then the bytes, as u64 words. A writer claims
//! any free record with a compare-and-swap, writes, publishes (release),
//! counts the post, and rings the mail word only when the owner's
//! progress thread is not awake (no system call per message while it
//! runs). The owner reads whenever the post count moved since its last
//! scan, looking only at the records marked in the bitmap (a writer marks
//! its record before it publishes; records about 28 KiB apart would
//! otherwise cost a page, and a first-touch fault, each per scan), and
//! hands each writer's records on in that writer's sequence
//! order (writers are single-threaded progress threads, so each writer's
//! records are published in order; a scan that saw a later one before an
//! earlier one scans again). A full mailbox refuses the post: the writer
//! keeps the message and tries again later. A writer killed between its
//! claim and its publication leaves one record claimed for good: the
//! mailbox has one record less, and nothing waits on it.
//!
//! Owns: the record format, the claim, the publication, the ring, the
//! scan. Must not: judge the bytes (the Engine checks their tag, and the
//! record's writer index stands for the transport's source), or block.

use std::sync::atomic::Ordering;

use super::exit_word::wake;
use super::segment::{HostSegment, mail_capacity, mail_slots};

const FREE: u64 = 0;
const CLAIMED: u64 = 1;
const PUBLISHED: u64 = 2;
const PHASE: u64 = 3;

/// The writer's index and the phase in one state word (the length in the
/// top 32 bits once published).
fn state(phase: u64, writer: u32, len: usize) -> u64 {
    phase | (u64::from(writer) & 0xff_ffff) << 8 | (len as u64) << 32
}

/// What became of a post.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Posted {
    /// In the mailbox; `asleep`: its owner's progress thread was not
    /// awake: wake it ([`ring`], or its doorbell).
    Sent { asleep: bool },
    /// Every record is taken: keep the message and try again later.
    Full,
    /// Longer than a record (cannot happen for a protocol message).
    TooLarge,
    /// No such mailbox (a host of one, or an index outside it).
    NoMailbox,
}

/// Posts `bytes` from local rank `writer`, its `seq`-th message to local
/// rank `owner` (from 0, counted by the writer over its successful posts).
pub fn post(segment: &HostSegment, owner: u32, writer: u32, seq: u64, bytes: &[u8]) -> Posted {
    let Some((_, awake, posted)) = segment.mailbox_line(owner) else {
        return Posted::NoMailbox;
    };
    if bytes.len() > mail_capacity(segment.ranks()) {
        return Posted::TooLarge;
    }
    let slots = mail_slots(segment.count());
    // Writers start at different records: fewer of them race for one.
    let start = (writer as usize).wrapping_mul(7) % slots;
    let claimed = state(CLAIMED, writer, 0);
    let record = (0..slots).find_map(|k| {
        let slot = (start + k) % slots;
        let rec = segment.mail_record(owner, slot)?;
        (rec[0].load(Ordering::Relaxed) == FREE
            && rec[0]
                .compare_exchange(FREE, claimed, Ordering::Acquire, Ordering::Relaxed)
                .is_ok())
        .then_some((slot, rec))
    });
    let Some((slot, rec)) = record else {
        return Posted::Full;
    };
    // Marked before published: the owner, once it sees the count moved,
    // sees the mark and scans this record (it scans no other).
    if let Some(used) = segment.mailbox_used(owner) {
        let bit = 1u64 << (slot % 64);
        let word = used[slot / 64];
        if word.load(Ordering::Relaxed) & bit == 0 {
            word.fetch_or(bit, Ordering::Release);
        }
    }
    rec[1].store(seq, Ordering::Relaxed);
    for (word, chunk) in rec[2..].iter().zip(bytes.chunks(8)) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        word.store(u64::from_le_bytes(w), Ordering::Relaxed);
    }
    rec[0].store(state(PUBLISHED, writer, bytes.len()), Ordering::Release);
    // SeqCst with the owner's doze: either it sees the count moved, or
    // this sees it not awake and the caller rings.
    posted.fetch_add(1, Ordering::SeqCst);
    Posted::Sent {
        asleep: awake.load(Ordering::SeqCst) == 0,
    }
}

/// Rings local rank `owner`'s mail word: its exit-word thread wakes and
/// rings its progress thread (one `FUTEX_WAKE`).
pub fn ring(segment: &HostSegment, owner: u32) {
    if let Some((mail, _, _)) = segment.mailbox_line(owner) {
        mail.fetch_add(1, Ordering::SeqCst);
        wake(mail, false);
    }
}

/// Whether local rank `owner`'s doorbell is bound (`doorbell.rs`): a
/// knock on it wakes its progress thread directly.
pub fn door_open(segment: &HostSegment, owner: u32) -> bool {
    segment
        .mailbox_door(owner)
        .is_some_and(|d| d.load(Ordering::Acquire) == 1)
}

/// Says whether this rank's (`me`) doorbell is bound.
pub fn set_door(segment: &HostSegment, me: u32, open: bool) {
    if let Some(d) = segment.mailbox_door(me) {
        d.store(u32::from(open), Ordering::Release);
    }
}

/// The owner's reading of its mailbox.
#[derive(Debug, Default)]
pub struct MailReader {
    /// The post count at the start of the last scan.
    scanned: u64,
    /// The next sequence number expected from each local writer.
    expected: Vec<u64>,
    /// Scratch: (writer, seq, record) of the published records.
    found: Vec<(u32, u64, usize)>,
    /// The records the last scan looked at.
    scanned_records: usize,
}

impl MailReader {
    /// The owner's progress thread runs: writers need not ring.
    pub fn awake(segment: &HostSegment, me: u32) {
        if let Some((_, awake, _)) = segment.mailbox_line(me) {
            awake.store(1, Ordering::SeqCst);
        }
    }

    /// The owner is about to sleep: writers ring from now on. Returns
    /// whether mail came since the last scan (read it before sleeping).
    pub fn doze(&self, segment: &HostSegment, me: u32) -> bool {
        let Some((_, awake, posted)) = segment.mailbox_line(me) else {
            return false;
        };
        awake.store(0, Ordering::SeqCst);
        posted.load(Ordering::SeqCst) != self.scanned
    }

    /// Reads local rank `me`'s mailbox: each message in order per writer,
    /// appended to `bytes`, with (writer, range in `bytes`) pushed to
    /// `out`. One load when nothing was posted since the last scan.
    pub fn read(
        &mut self,
        segment: &HostSegment,
        me: u32,
        bytes: &mut Vec<u8>,
        out: &mut Vec<(u32, std::ops::Range<usize>)>,
    ) {
        let (Some((_, _, posted)), Some(used)) =
            (segment.mailbox_line(me), segment.mailbox_used(me))
        else {
            return;
        };
        self.expected.resize(segment.count() as usize, 0);
        loop {
            let now = posted.load(Ordering::SeqCst);
            if now == self.scanned {
                return;
            }
            self.scanned = now;
            self.found.clear();
            // Only the records ever claimed: every one published before
            // the count moved is marked (`post`), and a scan then touches
            // a few lines, not one page per record of the mailbox.
            let marked = used.map(|w| w.load(Ordering::Acquire));
            let records = marked.iter().enumerate().flat_map(|(k, &bits)| {
                (0..64)
                    .filter(move |b| bits & (1 << b) != 0)
                    .map(move |b| 64 * k + b)
            });
            self.scanned_records = 0;
            for i in records {
                let Some(rec) = segment.mail_record(me, i) else {
                    break;
                };
                self.scanned_records += 1;
                let st = rec[0].load(Ordering::Acquire);
                if st & PHASE == PUBLISHED {
                    let writer = ((st >> 8) & 0xff_ffff) as u32;
                    self.found.push((writer, rec[1].load(Ordering::Relaxed), i));
                }
            }
            self.found.sort_unstable();
            for &(writer, seq, i) in &self.found {
                let Some(rec) = segment.mail_record(me, i) else {
                    continue;
                };
                let Some(next) = self.expected.get_mut(writer as usize) else {
                    // No such writer: not a record of this host's ranks.
                    rec[0].store(FREE, Ordering::Release);
                    continue;
                };
                if seq != *next {
                    // An earlier one of the writer's not seen yet (the
                    // count moved past it: the loop scans again).
                    continue;
                }
                *next += 1;
                let st = rec[0].load(Ordering::Relaxed);
                let len = ((st >> 32) as usize).min(8 * (rec.len() - 2));
                let from = bytes.len();
                for word in &rec[2..2 + len.div_ceil(8)] {
                    bytes.extend_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
                }
                bytes.truncate(from + len);
                // Read before freed: the next writer's claim acquires this.
                rec[0].store(FREE, Ordering::Release);
                out.push((writer, from..from + len));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn segment(tag: &str, count: u32) -> (Arc<HostSegment>, Arc<HostSegment>) {
        let name = format!("/ffd-test-{}-mail-{tag}", std::process::id());
        let a = HostSegment::create(&name, count, count).unwrap();
        let b = HostSegment::open(&name, count, count).unwrap();
        (Arc::new(a), Arc::new(b))
    }

    fn read_all(r: &mut MailReader, seg: &HostSegment, me: u32) -> Vec<(u32, Vec<u8>)> {
        let (mut bytes, mut out) = (Vec::new(), Vec::new());
        r.read(seg, me, &mut bytes, &mut out);
        out.into_iter()
            .map(|(w, range)| (w, bytes[range].to_vec()))
            .collect()
    }

    #[test]
    fn messages_go_round_the_records_many_times_in_order() {
        let (a, b) = segment("wrap", 3);
        let mut reader = MailReader::default();
        let slots = mail_slots(3) as u64;
        for seq in 0..5 * slots {
            // Lengths that end inside a word, on one, and empty.
            let msg: Vec<u8> = (0..(seq % 19) as u8).collect();
            assert!(matches!(post(&a, 2, 1, seq, &msg), Posted::Sent { .. }));
            assert_eq!(read_all(&mut reader, &b, 2), vec![(1, msg)]);
        }
        assert!(read_all(&mut reader, &b, 2).is_empty());
        assert!(!reader.doze(&b, 2));
    }

    #[test]
    fn a_scan_looks_only_at_the_records_ever_claimed() {
        let (a, b) = segment("scan", 4);
        let mut reader = MailReader::default();
        // Writers 1 and 2 start at different records; each takes its own
        // again once it is read.
        for seq in 0..3 {
            for writer in [1, 2] {
                assert!(matches!(
                    post(&a, 0, writer, seq, &[writer as u8]),
                    Posted::Sent { .. }
                ));
            }
            assert_eq!(
                read_all(&mut reader, &b, 0),
                vec![(1, vec![1]), (2, vec![2])]
            );
            assert_eq!(reader.scanned_records, 2);
        }
        // Two more of writer 1's before a read: a third record, marked.
        for seq in 3..5 {
            assert!(matches!(post(&a, 0, 1, seq, b"x"), Posted::Sent { .. }));
        }
        assert_eq!(read_all(&mut reader, &b, 0).len(), 2);
        assert_eq!(reader.scanned_records, 3);
    }

    #[test]
    fn a_full_mailbox_refuses_and_takes_the_message_once_read() {
        let (a, b) = segment("full", 2);
        let slots = mail_slots(2) as u64;
        for seq in 0..slots {
            assert!(matches!(
                post(&a, 1, 0, seq, &seq.to_le_bytes()),
                Posted::Sent { .. }
            ));
        }
        assert_eq!(post(&a, 1, 0, slots, b"late"), Posted::Full);
        let mut reader = MailReader::default();
        assert!(reader.doze(&b, 1), "mail waits");
        let got = read_all(&mut reader, &b, 1);
        assert_eq!(got.len() as u64, slots);
        for (i, (w, m)) in got.iter().enumerate() {
            assert_eq!((*w, m.as_slice()), (0, (i as u64).to_le_bytes().as_slice()));
        }
        // The refused message goes now, with the number it was refused with.
        assert!(matches!(
            post(&a, 1, 0, slots, b"late"),
            Posted::Sent { .. }
        ));
        assert_eq!(read_all(&mut reader, &b, 1), vec![(0, b"late".to_vec())]);
    }

    #[test]
    fn a_record_too_large_is_refused_and_the_largest_fits() {
        let (a, b) = segment("large", 2);
        let cap = mail_capacity(2);
        assert_eq!(post(&a, 1, 0, 0, &vec![1; cap + 1]), Posted::TooLarge);
        assert!(matches!(
            post(&a, 1, 0, 0, &vec![9; cap]),
            Posted::Sent { .. }
        ));
        let got = read_all(&mut MailReader::default(), &b, 1);
        assert_eq!(got, vec![(0, vec![9; cap])]);
        assert_eq!(post(&a, 2, 0, 0, b"x"), Posted::NoMailbox);
    }

    #[test]
    fn an_awake_owner_is_not_to_be_rung_and_a_dozing_one_is() {
        let (a, b) = segment("ring", 2);
        let mut reader = MailReader::default();
        let (mail, _, _) = b.mailbox_line(1).unwrap();
        MailReader::awake(&b, 1);
        let before = mail.load(Ordering::Acquire);
        assert_eq!(post(&a, 1, 0, 0, b"a"), Posted::Sent { asleep: false });
        assert_eq!(mail.load(Ordering::Acquire), before);
        assert!(reader.doze(&b, 1), "the post is seen before sleeping");
        assert_eq!(read_all(&mut reader, &b, 1).len(), 1);
        assert!(!reader.doze(&b, 1));
        assert_eq!(post(&a, 1, 0, 1, b"b"), Posted::Sent { asleep: true });
        assert_eq!(mail.load(Ordering::Acquire), before, "the caller rings");
        ring(&a, 1);
        assert_eq!(mail.load(Ordering::Acquire), before + 1);
        assert!(!door_open(&b, 1));
        set_door(&b, 1, true);
        assert!(door_open(&a, 1));
    }

    /// Several writers on threads, each with its own order; the owner
    /// reads as they write, and retries of refused posts keep the order.
    #[test]
    fn several_writers_each_arrive_whole_and_in_order() {
        let count = 6u32;
        let (a, b) = segment("writers", count);
        let per_writer = 3 * mail_slots(count) as u64;
        let writers: Vec<_> = (1..count)
            .map(|w| {
                let seg = Arc::clone(&a);
                std::thread::spawn(move || {
                    let mut full = 0u64;
                    for seq in 0..per_writer {
                        let msg: Vec<u8> =
                            [w as u8; 5].into_iter().chain(seq.to_le_bytes()).collect();
                        loop {
                            match post(&seg, 0, w, seq, &msg) {
                                Posted::Sent { .. } => break,
                                Posted::Full => {
                                    full += 1;
                                    std::thread::yield_now();
                                }
                                other => panic!("{other:?}"),
                            }
                        }
                    }
                    full
                })
            })
            .collect();
        let mut reader = MailReader::default();
        let mut next = vec![0u64; count as usize];
        let total = per_writer * u64::from(count - 1);
        let mut got = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while got < total {
            assert!(std::time::Instant::now() < deadline, "{got} of {total}");
            for (w, m) in read_all(&mut reader, &b, 0) {
                assert_eq!(&m[..5], &[w as u8; 5]);
                let seq = u64::from_le_bytes(m[5..].try_into().unwrap());
                assert_eq!(seq, next[w as usize], "writer {w} out of order");
                next[w as usize] += 1;
                got += 1;
            }
            std::thread::yield_now();
        }
        for w in writers {
            w.join().unwrap();
        }
        assert!(next[1..].iter().all(|&n| n == per_writer));
        assert!(read_all(&mut reader, &b, 0).is_empty());
    }
}
