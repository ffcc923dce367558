//! Payload marks: the per-origin high-water marks a `SyncRequest` carries,
//! so that the rank asked can send the payloads the requester lacks
//! (docs/design.md §4.9 "Payloads").
//!
//! Owns: the marks' bytes and their validating, non-allocating decoder
//! ([`Marks`]). Must not: decide what is missing (the Engine compares), or
//! allocate by a count read from the wire.
//!
//! ```text
//! from   LEB128 u32   first origin covered
//! to     LEB128 u32   one past the last origin covered (from ≤ to ≤ N)
//! count  LEB128 u32   marks listed
//! count × (origin delta LEB128 u32, mark LEB128 u64)
//! ```
//!
//! The first delta is from `from`, each later one from the previous origin
//! plus one, so origins are strictly increasing; every mark is at least 1.
//! An origin of `from..to` that is not listed has mark 0 (the requester
//! delivered nothing of it); origins outside `from..to` are not covered by
//! this request (a requester that knows more origins than one request may
//! carry covers them in turns).

use super::RejectReason;
use crate::config::Rank;
use crate::ranks::{get_varint, put_varint};

/// The most marks one `SyncRequest` carries (the Engine covers more
/// origins in turns).
pub const MAX_MARKS: usize = 1024;

/// The most bytes the marks of a `SyncRequest` with at most [`MAX_MARKS`]
/// marks take: three LEB128 u32 and, per mark, a LEB128 u32 and a LEB128
/// u64. Receive buffers leave room for it (`ffd::runtime`).
pub const MAX_MARKS_LEN: usize = 3 * 5 + MAX_MARKS * (5 + 10);

/// LEB128 of a u64.
fn put_varint64(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7F) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a LEB128 u64 (at most 10 bytes, no overflow).
fn get_varint64(bytes: &[u8], at: &mut usize) -> Result<u64, RejectReason> {
    let mut value: u64 = 0;
    for i in 0..10 {
        let b = *bytes.get(*at).ok_or(RejectReason::Truncated)?;
        *at += 1;
        let bits = u64::from(b & 0x7F);
        if i == 9 && bits > 1 {
            return Err(RejectReason::Malformed);
        }
        value |= bits << (7 * i);
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(RejectReason::Malformed)
}

/// Appends the marks of origins `from..to`: `marks` lists `(origin, mark)`
/// with strictly increasing origins inside `from..to` and marks ≥ 1.
pub(super) fn encode_marks(from: Rank, to: Rank, marks: &[(Rank, u64)], out: &mut Vec<u8>) {
    debug_assert!(from <= to);
    debug_assert!(marks.windows(2).all(|w| w[0].0 < w[1].0));
    debug_assert!(marks.iter().all(|&(o, m)| o >= from && o < to && m >= 1));
    put_varint(out, from);
    put_varint(out, to);
    put_varint(out, marks.len() as u32);
    let mut next = from;
    for &(origin, mark) in marks {
        put_varint(out, origin - next);
        put_varint64(out, mark);
        next = origin + 1;
    }
}

/// Validated, borrowed marks inside a received `SyncRequest`. Iterating
/// re-reads the bytes; nothing is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marks<'a> {
    /// First origin covered.
    pub from: Rank,
    /// One past the last origin covered.
    pub to: Rank,
    count: u32,
    /// The listed marks' bytes.
    body: &'a [u8],
}

impl<'a> Marks<'a> {
    /// Marks covering no origin (a request that asks for no payloads).
    pub const NONE: Marks<'static> = Marks {
        from: 0,
        to: 0,
        count: 0,
        body: &[],
    };

    /// Decodes and validates the marks at `bytes[*at]` for a job of `n`
    /// ranks, advancing `*at` past them.
    pub(super) fn decode(bytes: &'a [u8], at: &mut usize, n: u32) -> Result<Self, RejectReason> {
        let from = get_varint(bytes, at)?;
        let to = get_varint(bytes, at)?;
        if to > n {
            return Err(RejectReason::RankOutOfRange);
        }
        if from > to {
            return Err(RejectReason::Malformed);
        }
        let count = get_varint(bytes, at)?;
        let start = *at;
        let mut next = u64::from(from);
        for _ in 0..count {
            let origin = next + u64::from(get_varint(bytes, at)?);
            if origin >= u64::from(to) {
                return Err(RejectReason::Malformed);
            }
            if get_varint64(bytes, at)? == 0 {
                return Err(RejectReason::Malformed);
            }
            next = origin + 1;
        }
        Ok(Marks {
            from,
            to,
            count,
            body: &bytes[start..*at],
        })
    }

    /// Marks listed (origins of `from..to` with a mark of at least 1).
    pub fn len(&self) -> u32 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether `origin` lies in the covered range `from..to`.
    pub fn covers(&self, origin: Rank) -> bool {
        (self.from..self.to).contains(&origin)
    }

    /// The listed `(origin, mark)` pairs, origins ascending.
    pub fn iter(&self) -> impl Iterator<Item = (Rank, u64)> + 'a {
        let body = self.body;
        let mut at = 0;
        let mut next = self.from;
        (0..self.count).map_while(move |_| {
            // Validated by `decode`: these reads succeed.
            let origin = next.checked_add(get_varint(body, &mut at).ok()?)?;
            let mark = get_varint64(body, &mut at).ok()?;
            next = origin + 1;
            Some((origin, mark))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(from: Rank, to: Rank, marks: &[(Rank, u64)], n: u32) -> Vec<(Rank, u64)> {
        let mut out = Vec::new();
        encode_marks(from, to, marks, &mut out);
        let mut at = 0;
        let m = Marks::decode(&out, &mut at, n).expect("valid marks");
        assert_eq!(at, out.len());
        assert_eq!((m.from, m.to, m.len()), (from, to, marks.len() as u32));
        m.iter().collect()
    }

    #[test]
    fn the_largest_marks_fit_their_bound() {
        let marks: Vec<(Rank, u64)> = (0..MAX_MARKS as Rank)
            .map(|i| (i * (1 << 21), u64::MAX))
            .collect();
        let mut out = Vec::new();
        encode_marks(0, u32::MAX, &marks, &mut out);
        assert!(
            out.len() <= MAX_MARKS_LEN,
            "{} > {MAX_MARKS_LEN}",
            out.len()
        );
        assert!(out.len() > MAX_MARKS_LEN - 3 * MAX_MARKS, "a tight bound");
    }

    #[test]
    fn marks_round_trip() {
        let marks = [(3, 1), (4, u64::MAX), (900, 200), (999, 1 << 40)];
        assert_eq!(round_trip(2, 1000, &marks, 1000), marks);
        assert_eq!(round_trip(0, 0, &[], 5), []);
        assert_eq!(round_trip(7, 7, &[], 7), []);
    }

    #[test]
    fn bad_marks_are_rejected() {
        fn decode(bytes: &[u8], n: u32) -> Result<Marks<'_>, RejectReason> {
            Marks::decode(bytes, &mut 0, n)
        }
        // to beyond the job, from after to.
        assert_eq!(decode(&[0, 9, 0], 8), Err(RejectReason::RankOutOfRange));
        assert_eq!(decode(&[5, 4, 0], 8), Err(RejectReason::Malformed));
        // An origin outside from..to, a mark of 0.
        assert_eq!(decode(&[0, 4, 1, 4, 1], 8), Err(RejectReason::Malformed));
        assert_eq!(decode(&[0, 4, 1, 2, 0], 8), Err(RejectReason::Malformed));
        // A count larger than what follows; an overlong mark.
        assert_eq!(decode(&[0, 4, 3, 0, 1], 8), Err(RejectReason::Truncated));
        let mut long = vec![0, 4, 1, 0];
        long.extend([0xFF; 9]);
        long.push(0x02);
        assert_eq!(decode(&long, 8), Err(RejectReason::Malformed));
        assert_eq!(decode(&[0, 4, 1, 0, 0x80], 8), Err(RejectReason::Truncated));
    }
}
