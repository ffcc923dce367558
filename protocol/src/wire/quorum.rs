//! The bodies of the primary-partition messages (kinds 8–11,
//! `docs/design.md` §4.11 "Primary partition" and §5 "Wire format"): encoding, and decoding once the tag
//! holds.
//!
//! ```text
//! Suspect  (8)  accuser u32, nonce u32, suspect u32, hops u16, flags u16
//! Vote     (9)  accuser u32, nonce u32, count u32, flags u16, 0 u16
//! Refute  (10)  accuser u32, nonce u32
//! Outcome (11)  accuser u32, nonce u32, suspect u32, hops u16, verdict u8, 0 u8
//! ```
//!
//! Suspect flags: bit 0 [`SUSPECT_HOST`]. Vote flags: bit 0
//! [`VOTE_TIEBREAK`], bit 1 [`VOTE_COMPLETE`]. The other bits are reserved
//! (zero). Owns: these layouts. Must not: panic, or
//! accept a count of 0 or above N, an unknown verdict, or reserved bits.

use super::{Encoder, Kind, Message, Reader, RejectReason};
use crate::config::Rank;

/// Vote flag: the voter's subtree holds the lowest live rank of a voter's
/// view (the tie-break of an exact half).
pub const VOTE_TIEBREAK: u16 = 1;
/// Vote flag: every rank the voter's subtree forwarded to has answered
/// (voted or forwarded its own copy): the count will not grow.
pub const VOTE_COMPLETE: u16 = 2;
const VOTE_FLAGS: u16 = VOTE_TIEBREAK | VOTE_COMPLETE;

/// Suspect flag: the accusation is of the suspect's whole host (every rank
/// of it the accuser holds live; the suspect is its leader). Any rank of
/// that host refutes it.
pub const SUSPECT_HOST: u16 = 1;
const SUSPECT_FLAGS: u16 = SUSPECT_HOST;

/// How an accusation ended without a declaration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutcomeVerdict {
    /// The suspect answered, or its heartbeats moved again: drop the ballot.
    Withdrawn = 1,
    /// No quorum in time: the accuser excluded itself, and so does every
    /// rank holding a ballot of its accusation (it is on the same side).
    NoQuorum = 2,
}

impl OutcomeVerdict {
    fn from_u8(b: u8) -> Option<Self> {
        match b {
            1 => Some(Self::Withdrawn),
            2 => Some(Self::NoQuorum),
            _ => None,
        }
    }
}

/// Decodes the body of a quorum kind (the tag has been checked).
pub(super) fn decode<'a>(
    kind: Kind,
    r: &mut Reader<'a>,
    n: u32,
) -> Result<Message<'a>, RejectReason> {
    let accuser = r.rank(n)?;
    let nonce = r.u32()?;
    Ok(match kind {
        Kind::Suspect => {
            let suspect = r.rank(n)?;
            let hops = r.u16()?;
            let flags = r.u16()?;
            if flags & !SUSPECT_FLAGS != 0 {
                return Err(RejectReason::ReservedBits);
            }
            Message::Suspect {
                accuser,
                nonce,
                suspect,
                hops,
                flags,
            }
        }
        Kind::Vote => {
            let count = r.u32()?;
            let flags = r.u16()?;
            r.zero16()?;
            if flags & !VOTE_FLAGS != 0 {
                return Err(RejectReason::ReservedBits);
            }
            if count == 0 || count > n {
                return Err(RejectReason::Malformed);
            }
            Message::Vote {
                accuser,
                nonce,
                count,
                flags,
            }
        }
        Kind::Refute => Message::Refute { accuser, nonce },
        _ => {
            let suspect = r.rank(n)?;
            let hops = r.u16()?;
            let verdict = OutcomeVerdict::from_u8(r.u8()?).ok_or(RejectReason::Malformed)?;
            if r.u8()? != 0 {
                return Err(RejectReason::ReservedBits);
            }
            Message::Outcome {
                accuser,
                nonce,
                suspect,
                hops,
                verdict,
            }
        }
    })
}

impl Encoder {
    pub fn suspect(
        &self,
        accuser: Rank,
        nonce: u32,
        suspect: Rank,
        hops: u16,
        flags: u16,
    ) -> Vec<u8> {
        let mut out = self.start(Kind::Suspect, 16);
        out.extend_from_slice(&accuser.to_le_bytes());
        out.extend_from_slice(&nonce.to_le_bytes());
        out.extend_from_slice(&suspect.to_le_bytes());
        out.extend_from_slice(&hops.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        Self::finish(out)
    }

    pub fn vote(&self, accuser: Rank, nonce: u32, count: u32, flags: u16) -> Vec<u8> {
        let mut out = self.start(Kind::Vote, 16);
        out.extend_from_slice(&accuser.to_le_bytes());
        out.extend_from_slice(&nonce.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        Self::finish(out)
    }

    pub fn refute(&self, accuser: Rank, nonce: u32) -> Vec<u8> {
        let mut out = self.start(Kind::Refute, 8);
        out.extend_from_slice(&accuser.to_le_bytes());
        out.extend_from_slice(&nonce.to_le_bytes());
        Self::finish(out)
    }

    pub fn outcome(
        &self,
        accuser: Rank,
        nonce: u32,
        suspect: Rank,
        hops: u16,
        verdict: OutcomeVerdict,
    ) -> Vec<u8> {
        let mut out = self.start(Kind::Outcome, 16);
        out.extend_from_slice(&accuser.to_le_bytes());
        out.extend_from_slice(&nonce.to_le_bytes());
        out.extend_from_slice(&suspect.to_le_bytes());
        out.extend_from_slice(&hops.to_le_bytes());
        out.push(verdict as u8);
        out.push(0);
        Self::finish(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{JobKeys, decode, forwarded, seal};
    use super::*;

    const KEY: u64 = 0x5EED_F00D_0000_0002;

    fn keys() -> JobKeys {
        JobKeys::new(KEY, [9; 32])
    }

    fn roundtrip(unsealed: &[u8]) -> Result<Message<'static>, RejectReason> {
        let sealed = seal(unsealed, 1, 2, &keys());
        let leaked: &'static [u8] = Box::leak(sealed.into_boxed_slice());
        decode(leaked, &keys(), 2, 10).map(|(_, m)| m)
    }

    #[test]
    fn every_quorum_body_round_trips() {
        let e = Encoder::new(KEY, 1);
        assert_eq!(
            roundtrip(&e.suspect(1, 7, 4, 0, 0)),
            Ok(Message::Suspect {
                accuser: 1,
                nonce: 7,
                suspect: 4,
                hops: 0,
                flags: 0
            })
        );
        assert_eq!(
            roundtrip(&e.suspect(1, 7, 4, 0, SUSPECT_HOST)),
            Ok(Message::Suspect {
                accuser: 1,
                nonce: 7,
                suspect: 4,
                hops: 0,
                flags: SUSPECT_HOST
            })
        );
        assert_eq!(
            roundtrip(&e.vote(3, 7, 6, VOTE_TIEBREAK | VOTE_COMPLETE)),
            Ok(Message::Vote {
                accuser: 3,
                nonce: 7,
                count: 6,
                flags: 3
            })
        );
        assert_eq!(
            roundtrip(&e.refute(3, 9)),
            Ok(Message::Refute {
                accuser: 3,
                nonce: 9
            })
        );
        assert_eq!(
            roundtrip(&e.outcome(3, 9, 4, 2, OutcomeVerdict::NoQuorum)),
            Ok(Message::Outcome {
                accuser: 3,
                nonce: 9,
                suspect: 4,
                hops: 2,
                verdict: OutcomeVerdict::NoQuorum
            })
        );
    }

    #[test]
    fn bad_quorum_bodies_are_rejected_with_their_reason() {
        let e = Encoder::new(KEY, 1);
        assert_eq!(
            roundtrip(&e.vote(3, 7, 0, 0)),
            Err(RejectReason::Malformed),
            "a count of 0"
        );
        assert_eq!(
            roundtrip(&e.vote(3, 7, 11, 0)),
            Err(RejectReason::Malformed),
            "more than N"
        );
        assert_eq!(
            roundtrip(&e.vote(3, 7, 1, 4)),
            Err(RejectReason::ReservedBits)
        );
        assert_eq!(
            roundtrip(&e.suspect(10, 7, 4, 0, 0)),
            Err(RejectReason::RankOutOfRange)
        );
        assert_eq!(
            roundtrip(&e.suspect(1, 7, 4, 0, 2)),
            Err(RejectReason::ReservedBits)
        );
        let mut bad = e.outcome(3, 9, 4, 0, OutcomeVerdict::Withdrawn);
        let at = bad.len() - 2;
        bad[at] = 3;
        assert_eq!(roundtrip(&bad), Err(RejectReason::Malformed), "a verdict");
        let mut bad = e.outcome(3, 9, 4, 0, OutcomeVerdict::Withdrawn);
        *bad.last_mut().unwrap() = 1;
        assert_eq!(roundtrip(&bad), Err(RejectReason::ReservedBits));
        let mut short = e.refute(3, 9);
        short.pop();
        let at = 32;
        short[at..at + 4].copy_from_slice(&7u32.to_le_bytes());
        assert_eq!(roundtrip(&short), Err(RejectReason::Truncated));
    }

    #[test]
    fn floods_are_forwarded_with_one_more_hop() {
        let e = Encoder::new(KEY, 1);
        for m in [
            e.suspect(1, 7, 4, 2, SUSPECT_HOST),
            e.outcome(1, 7, 4, 2, OutcomeVerdict::Withdrawn),
        ] {
            let f = forwarded(&seal(&m, 3, 5, &keys()), 5).expect("a flood");
            let sealed = seal(&f, 1, 6, &keys());
            let (h, msg) = decode(&sealed, &keys(), 6, 10).unwrap();
            assert_eq!(h.sender, 5);
            match msg {
                Message::Suspect { hops, accuser, .. } | Message::Outcome { hops, accuser, .. } => {
                    assert_eq!((hops, accuser), (3, 1))
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            forwarded(&seal(&e.vote(1, 1, 1, 0), 1, 2, &keys()), 2),
            None
        );
    }
}
