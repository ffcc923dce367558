//! Sets of ranks: the sparse failed set with its order-independent digest,
//! and the compact wire encoding of rank lists (sorted ranks, ranges, or a
//! bitmap, whichever is smallest).
//!
//! Owns: rank-set representation and rank-list bytes. Must not: allocate in
//! proportion to a *claimed* size read from the wire (only to what is
//! actually present), or panic on any input.

use super::config::Rank;

/// A mixed 64-bit hash of one rank (splitmix64 finaliser). The digest of a
/// set is the XOR of its members' hashes: order-independent and
/// incremental (adding a rank XORs one term in).
pub fn rank_hash(rank: Rank) -> u64 {
    let mut z = u64::from(rank).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The 32-bit fold of a 64-bit set digest that travels in a heartbeat slot.
pub fn fold_digest(digest: u64) -> u32 {
    (digest ^ (digest >> 32)) as u32
}

/// Ranks held without a heap allocation.
const INLINE: usize = 5;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Store {
    /// Up to `INLINE` ranks: most sets are tiny (failures are rare), and an
    /// inline set costs no extra cache miss on the message path.
    Inline(u8, [Rank; INLINE]),
    Heap(Vec<Rank>),
}

/// A sorted set of ranks with its digest. Sparse: memory grows with the
/// number of members (4 bytes each), not with the job size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankSet {
    store: Store,
    digest: u64,
}

impl Default for RankSet {
    fn default() -> Self {
        RankSet {
            store: Store::Inline(0, [0; INLINE]),
            digest: 0,
        }
    }
}

impl RankSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn contains(&self, rank: Rank) -> bool {
        match &self.store {
            Store::Inline(len, a) => a[..*len as usize].contains(&rank),
            Store::Heap(v) => v.binary_search(&rank).is_ok(),
        }
    }

    /// Adds `rank`; false if it was already present.
    pub fn insert(&mut self, rank: Rank) -> bool {
        let at = match self.as_slice().binary_search(&rank) {
            Ok(_) => return false,
            Err(at) => at,
        };
        self.digest ^= rank_hash(rank);
        match &mut self.store {
            Store::Inline(len, a) if (*len as usize) < INLINE => {
                let l = *len as usize;
                a.copy_within(at..l, at + 1);
                a[at] = rank;
                *len += 1;
            }
            Store::Inline(len, a) => {
                let mut v = Vec::with_capacity(2 * INLINE);
                v.extend_from_slice(&a[..*len as usize]);
                v.insert(at, rank);
                self.store = Store::Heap(v);
            }
            Store::Heap(v) => v.insert(at, rank),
        }
        true
    }

    /// Adds every rank of `sorted` (strictly increasing) that is not yet a
    /// member, in one merge: O(len + k), not O(len · k) — a mass leave at
    /// job end delivers thousands of ranks in a few notices.
    pub fn insert_sorted(&mut self, sorted: &[Rank]) {
        debug_assert!(sorted.windows(2).all(|w| w[0] < w[1]));
        if sorted.len() <= 2 {
            for &r in sorted {
                self.insert(r);
            }
            return;
        }
        let old = self.as_slice();
        let mut digest = self.digest;
        let mut merged = Vec::with_capacity(old.len() + sorted.len());
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < sorted.len() {
            let take_old = j >= sorted.len() || (i < old.len() && old[i] <= sorted[j]);
            let r = if take_old {
                i += 1;
                old[i - 1]
            } else {
                j += 1;
                sorted[j - 1]
            };
            if merged.last() != Some(&r) {
                if !take_old {
                    digest ^= rank_hash(r);
                }
                merged.push(r);
            }
        }
        self.digest = digest;
        self.store = if merged.len() <= INLINE {
            let mut a = [0; INLINE];
            a[..merged.len()].copy_from_slice(&merged);
            Store::Inline(merged.len() as u8, a)
        } else {
            Store::Heap(merged)
        };
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    /// The members, ascending.
    pub fn as_slice(&self) -> &[Rank] {
        match &self.store {
            Store::Inline(len, a) => &a[..*len as usize],
            Store::Heap(v) => v,
        }
    }

    /// XOR of `rank_hash` over the members.
    pub fn digest(&self) -> u64 {
        self.digest
    }
}

/// Why a rank list could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListError {
    /// The bytes end inside the list.
    Truncated,
    /// Unknown encoding tag, overlong varint, ranks not strictly increasing,
    /// empty range/bitmap, or stray bits past a bitmap's end.
    Malformed,
    /// A rank ≥ the job size.
    RankOutOfRange,
}

const TAG_SPARSE: u8 = 0;
const TAG_RANGES: u8 = 1;
const TAG_BITMAP: u8 = 2;

fn varint_len(mut v: u32) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7F) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a LEB128 u32 (at most 5 bytes, no overflow) from `bytes` at `*at`.
pub(crate) fn get_varint(bytes: &[u8], at: &mut usize) -> Result<u32, ListError> {
    let mut value: u64 = 0;
    for i in 0..5 {
        let b = *bytes.get(*at).ok_or(ListError::Truncated)?;
        *at += 1;
        value |= u64::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            return u32::try_from(value).map_err(|_| ListError::Malformed);
        }
    }
    Err(ListError::Malformed)
}

/// Maximal runs of consecutive ranks in a sorted, duplicate-free slice.
fn runs(sorted: &[Rank]) -> impl Iterator<Item = (Rank, u32)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let start = *sorted.get(i)?;
        let mut len = 1u32;
        while i + (len as usize) < sorted.len() && sorted[i + len as usize] == start + len {
            len += 1;
        }
        i += len as usize;
        Some((start, len))
    })
}

/// Appends the compact encoding of `sorted` (strictly increasing ranks):
/// whichever of sparse deltas, ranges or bitmap is smallest.
pub fn encode_rank_list(sorted: &[Rank], out: &mut Vec<u8>) {
    debug_assert!(sorted.windows(2).all(|w| w[0] < w[1]));
    if sorted.is_empty() {
        out.push(TAG_SPARSE);
        out.push(0);
        return;
    }
    let count = sorted.len() as u32;
    let mut sparse = varint_len(count);
    let mut prev: Option<Rank> = None;
    for &r in sorted {
        sparse += varint_len(match prev {
            None => r,
            Some(p) => r - p - 1,
        });
        prev = Some(r);
    }
    let mut nruns = 0u32;
    let mut ranges = 0usize;
    // A run may end at `Rank::MAX`: the position after it needs 33 bits.
    let mut end = 0u64;
    for (start, len) in runs(sorted) {
        nruns += 1;
        ranges += varint_len((u64::from(start) - end) as u32) + varint_len(len - 1);
        end = u64::from(start) + u64::from(len);
    }
    ranges += varint_len(nruns);
    let base = sorted[0];
    // A bitmap spans at most u32::MAX bits (its count is a u32 on the wire).
    let span = u64::from(sorted[sorted.len() - 1]) - u64::from(base) + 1;
    let nbits = u32::try_from(span).unwrap_or(u32::MAX);
    let bitmap = if span > u64::from(u32::MAX) {
        usize::MAX
    } else {
        varint_len(base) + varint_len(nbits) + (nbits as usize).div_ceil(8)
    };

    if sparse <= ranges && sparse <= bitmap {
        out.push(TAG_SPARSE);
        put_varint(out, count);
        let mut prev: Option<Rank> = None;
        for &r in sorted {
            put_varint(
                out,
                match prev {
                    None => r,
                    Some(p) => r - p - 1,
                },
            );
            prev = Some(r);
        }
    } else if ranges <= bitmap {
        out.push(TAG_RANGES);
        put_varint(out, nruns);
        let mut end = 0u64;
        for (start, len) in runs(sorted) {
            put_varint(out, (u64::from(start) - end) as u32);
            put_varint(out, len - 1);
            end = u64::from(start) + u64::from(len);
        }
    } else {
        out.push(TAG_BITMAP);
        put_varint(out, base);
        put_varint(out, nbits);
        let first = out.len();
        out.resize(first + (nbits as usize).div_ceil(8), 0);
        for &r in sorted {
            let bit = (r - base) as usize;
            out[first + bit / 8] |= 1 << (bit % 8);
        }
    }
}

/// A validated, borrowed rank list inside a received message. Iterating
/// re-reads the bytes; nothing is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankList<'a> {
    tag: u8,
    /// The list's bytes after the tag.
    body: &'a [u8],
    len: u32,
}

impl<'a> RankList<'a> {
    /// Decodes and validates the list starting at `bytes[*at]` for a job of
    /// `n` ranks, advancing `*at` past it.
    pub fn decode(bytes: &'a [u8], at: &mut usize, n: u32) -> Result<Self, ListError> {
        let tag = *bytes.get(*at).ok_or(ListError::Truncated)?;
        *at += 1;
        let start = *at;
        let len = match tag {
            TAG_SPARSE => {
                let count = get_varint(bytes, at)?;
                let mut next_min: u64 = 0;
                for _ in 0..count {
                    // Every entry takes at least one byte: a huge claimed
                    // count fails on truncation, not on allocation.
                    let v = u64::from(get_varint(bytes, at)?);
                    let r = next_min + v;
                    if r >= u64::from(n) {
                        return Err(ListError::RankOutOfRange);
                    }
                    next_min = r + 1;
                }
                count
            }
            TAG_RANGES => {
                let nruns = get_varint(bytes, at)?;
                let mut end: u64 = 0;
                let mut total: u64 = 0;
                for i in 0..nruns {
                    let gap = u64::from(get_varint(bytes, at)?);
                    let len = u64::from(get_varint(bytes, at)?) + 1;
                    if i > 0 && gap == 0 {
                        // Adjacent runs must be merged: one canonical form.
                        return Err(ListError::Malformed);
                    }
                    let s = end + gap;
                    end = s + len;
                    if end > u64::from(n) {
                        return Err(ListError::RankOutOfRange);
                    }
                    total += len;
                }
                u32::try_from(total).map_err(|_| ListError::Malformed)?
            }
            TAG_BITMAP => {
                let base = get_varint(bytes, at)?;
                let nbits = get_varint(bytes, at)?;
                if nbits == 0 {
                    return Err(ListError::Malformed);
                }
                if u64::from(base) + u64::from(nbits) > u64::from(n) {
                    return Err(ListError::RankOutOfRange);
                }
                let nbytes = (nbits as usize).div_ceil(8);
                let map = bytes.get(*at..*at + nbytes).ok_or(ListError::Truncated)?;
                *at += nbytes;
                let spare = (nbytes * 8) - nbits as usize;
                if spare > 0 && map[nbytes - 1] >> (8 - spare) != 0 {
                    return Err(ListError::Malformed);
                }
                map.iter().map(|b| b.count_ones()).sum()
            }
            _ => return Err(ListError::Malformed),
        };
        Ok(RankList {
            tag,
            body: &bytes[start..*at],
            len,
        })
    }

    /// Number of ranks in the list.
    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> RankListIter<'a> {
        let mut at = 0;
        let state = match self.tag {
            TAG_SPARSE => {
                let count = get_varint(self.body, &mut at).unwrap_or(0);
                IterState::Sparse {
                    left: count,
                    next_min: 0,
                }
            }
            TAG_RANGES => {
                let nruns = get_varint(self.body, &mut at).unwrap_or(0);
                IterState::Ranges {
                    runs_left: nruns,
                    cur: 0,
                    end: 0,
                }
            }
            _ => {
                let base = get_varint(self.body, &mut at).unwrap_or(0);
                let nbits = get_varint(self.body, &mut at).unwrap_or(0);
                IterState::Bitmap {
                    base,
                    nbits,
                    bit: 0,
                }
            }
        };
        RankListIter {
            body: self.body,
            at,
            state,
        }
    }

    pub fn contains(&self, rank: Rank) -> bool {
        self.iter().any(|r| r == rank)
    }

    pub fn to_vec(&self) -> Vec<Rank> {
        self.iter().collect()
    }
}

enum IterState {
    Sparse { left: u32, next_min: u32 },
    Ranges { runs_left: u32, cur: u32, end: u32 },
    Bitmap { base: u32, nbits: u32, bit: u32 },
}

/// Iterator over a validated [`RankList`], ascending.
pub struct RankListIter<'a> {
    body: &'a [u8],
    at: usize,
    state: IterState,
}

impl Iterator for RankListIter<'_> {
    type Item = Rank;

    fn next(&mut self) -> Option<Rank> {
        match &mut self.state {
            IterState::Sparse { left, next_min } => {
                if *left == 0 {
                    return None;
                }
                *left -= 1;
                let v = get_varint(self.body, &mut self.at).ok()?;
                let r = next_min.checked_add(v)?;
                *next_min = r.wrapping_add(1);
                Some(r)
            }
            IterState::Ranges {
                runs_left,
                cur,
                end,
            } => {
                if cur == end {
                    if *runs_left == 0 {
                        return None;
                    }
                    *runs_left -= 1;
                    let gap = get_varint(self.body, &mut self.at).ok()?;
                    let len = get_varint(self.body, &mut self.at).ok()?.checked_add(1)?;
                    *cur = end.checked_add(gap)?;
                    *end = cur.checked_add(len)?;
                }
                let r = *cur;
                *cur += 1;
                Some(r)
            }
            IterState::Bitmap { base, nbits, bit } => {
                while *bit < *nbits {
                    let b = *bit;
                    *bit += 1;
                    let byte = *self.body.get(self.at + (b / 8) as usize)?;
                    if byte & (1 << (b % 8)) != 0 {
                        return Some(*base + b);
                    }
                }
                None
            }
        }
    }
}

/// `rank 3`, `ranks 1, 2, 5`, or the first ten and a count of the rest:
/// rank lists in messages for people.
pub fn format_ranks(ranks: &[Rank]) -> String {
    use std::fmt::Write as _;
    const SHOWN: usize = 10;
    let mut out = String::from(if ranks.len() == 1 { "rank " } else { "ranks " });
    for (i, r) in ranks.iter().take(SHOWN).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{r}");
    }
    if ranks.len() > SHOWN {
        let _ = write!(out, " and {} more", ranks.len() - SHOWN);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(sorted: &[Rank], n: u32) -> Vec<Rank> {
        let mut buf = Vec::new();
        encode_rank_list(sorted, &mut buf);
        let mut at = 0;
        let list = RankList::decode(&buf, &mut at, n).expect("valid list");
        assert_eq!(at, buf.len(), "list consumed exactly");
        assert_eq!(list.len() as usize, sorted.len());
        list.to_vec()
    }

    #[test]
    fn picks_the_compact_form() {
        let mut buf = Vec::new();
        encode_rank_list(&[5, 900_000], &mut buf);
        assert_eq!(buf[0], TAG_SPARSE);
        buf.clear();
        let run: Vec<Rank> = (1000..3000).collect();
        encode_rank_list(&run, &mut buf);
        assert_eq!(buf[0], TAG_RANGES);
        assert!(buf.len() < 10);
        buf.clear();
        let dense: Vec<Rank> = (0..4000).filter(|r| r % 3 != 0).collect();
        encode_rank_list(&dense, &mut buf);
        assert_eq!(buf[0], TAG_BITMAP);
        assert!(buf.len() <= 4 + 500 + 1);
        assert_eq!(round_trip(&dense, 4000), dense);
    }

    #[test]
    fn rejects_bad_lists() {
        // rank out of range
        let mut buf = Vec::new();
        encode_rank_list(&[7], &mut buf);
        assert_eq!(
            RankList::decode(&buf, &mut 0, 7),
            Err(ListError::RankOutOfRange)
        );
        // huge claimed count with no entries: truncation, not allocation
        let buf = [TAG_SPARSE, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F];
        assert_eq!(
            RankList::decode(&buf, &mut 0, 100),
            Err(ListError::Truncated)
        );
        // overlong varint
        let buf = [TAG_SPARSE, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01];
        assert_eq!(
            RankList::decode(&buf, &mut 0, 100),
            Err(ListError::Malformed)
        );
        // unknown tag
        assert_eq!(
            RankList::decode(&[9, 0], &mut 0, 100),
            Err(ListError::Malformed)
        );
        // stray bits past a bitmap's end
        let buf = [TAG_BITMAP, 0, 3, 0b1000_0001];
        assert_eq!(
            RankList::decode(&buf, &mut 0, 100),
            Err(ListError::Malformed)
        );
        // adjacent ranges
        let buf = [TAG_RANGES, 2, 0, 0, 0, 0];
        assert_eq!(
            RankList::decode(&buf, &mut 0, 100),
            Err(ListError::Malformed)
        );
        // empty input
        assert_eq!(
            RankList::decode(&[], &mut 0, 100),
            Err(ListError::Truncated)
        );
    }

    #[test]
    fn digest_is_order_independent() {
        let mut a = RankSet::new();
        let mut b = RankSet::new();
        for r in [3, 99, 1_000_000, 7] {
            assert!(a.insert(r));
        }
        for r in [7, 1_000_000, 3, 99] {
            assert!(b.insert(r));
        }
        assert!(!a.insert(3));
        assert_eq!(a.digest(), b.digest());
        assert_eq!(a.as_slice(), &[3, 7, 99, 1_000_000]);
        b.insert(4);
        assert_ne!(a.digest(), b.digest());
        assert_ne!(fold_digest(a.digest()), fold_digest(b.digest()));
    }

    proptest! {
        #[test]
        fn rank_set_matches_a_btree_set(ranks in proptest::collection::vec(0u32..50, 0..40)) {
            let mut set = RankSet::new();
            let mut reference = std::collections::BTreeSet::new();
            for r in ranks {
                prop_assert_eq!(set.insert(r), reference.insert(r));
                let expect: Vec<u32> = reference.iter().copied().collect();
                prop_assert_eq!(set.as_slice(), expect.as_slice());
            }
            for r in 0..50 {
                prop_assert_eq!(set.contains(r), reference.contains(&r));
            }
            let digest = reference.iter().fold(0, |d, &r| d ^ rank_hash(r));
            prop_assert_eq!(set.digest(), digest);
        }

        #[test]
        fn batch_insert_matches_single_inserts(a in proptest::collection::vec(0u32..300, 0..60), b in proptest::collection::vec(0u32..300, 0..60)) {
            let mut one = RankSet::new();
            let mut batch = RankSet::new();
            for &r in &a {
                one.insert(r);
                batch.insert(r);
            }
            let mut b = b;
            b.sort_unstable();
            b.dedup();
            for &r in &b {
                one.insert(r);
            }
            batch.insert_sorted(&b);
            prop_assert_eq!(one.as_slice(), batch.as_slice());
            prop_assert_eq!(one.digest(), batch.digest());
        }

        #[test]
        fn lists_round_trip(mut ranks in proptest::collection::vec(0u32..5000, 0..300)) {
            ranks.sort_unstable();
            ranks.dedup();
            prop_assert_eq!(round_trip(&ranks, 5000), ranks);
        }

        #[test]
        fn runs_round_trip(start in 0u32..1000, len in 1u32..3000, extra in 3000u32..9000) {
            let mut ranks: Vec<Rank> = (start..start + len).collect();
            ranks.push(start + len + extra);
            prop_assert_eq!(round_trip(&ranks, 20_000), ranks);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64), n in 1u32..10_000) {
            let mut at = 0;
            if let Ok(list) = RankList::decode(&bytes, &mut at, n) {
                let v = list.to_vec();
                prop_assert_eq!(v.len() as u32, list.len());
                prop_assert!(v.windows(2).all(|w| w[0] < w[1]));
                prop_assert!(v.iter().all(|&r| r < n));
            }
        }
    }

    #[test]
    fn rank_lists_for_people_are_short() {
        assert_eq!(format_ranks(&[3]), "rank 3");
        assert_eq!(format_ranks(&[1, 2, 5]), "ranks 1, 2, 5");
        let many: Vec<Rank> = (0..25).collect();
        assert_eq!(
            format_ranks(&many),
            "ranks 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 15 more"
        );
    }

    #[test]
    fn lists_reaching_the_largest_rank_encode_without_overflow() {
        // Found by the fuzz harness: 0 and Rank::MAX made the bitmap's
        // span and a run's end overflow. No job has that rank, but the
        // encoder must not panic on any strictly increasing list.
        for list in [
            vec![0, Rank::MAX],
            vec![Rank::MAX - 2, Rank::MAX - 1, Rank::MAX],
            vec![0, 1, 2, Rank::MAX],
        ] {
            let mut out = Vec::new();
            encode_rank_list(&list, &mut out);
            let mut at = 0;
            // Rank::MAX is outside every job: decoding says so, it does not panic.
            assert_eq!(
                RankList::decode(&out, &mut at, Rank::MAX).err(),
                Some(ListError::RankOutOfRange),
                "{list:?}"
            );
        }
    }
}
