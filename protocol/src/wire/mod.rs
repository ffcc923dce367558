//! The wire format of ffd's active messages (version 2): a fixed header, a
//! body per kind, and a tag. Little-endian throughout.
//!
//! ```text
//! offset size field
//!      0    4 magic "FFDP"
//!      4    1 protocol version (2)
//!      5    1 kind
//!      6    2 flags (0; reserved)
//!      8    8 job key (agreed at bootstrap)
//!     16    4 sender rank
//!     20    4 sender incarnation (0; reserved for a later rejoin mode)
//!     24    8 sequence number (per link, sender → receiver: from 1,
//!               strictly increasing)
//!     32    4 body length
//!     36    … body
//!   end-16   16 tag: keyed BLAKE3 of the receiver's rank and every byte
//!               before it (`seal`)
//! ```
//!
//! Owns: encoding and validating decoding. Must not: panic, or trust any
//! byte before validation. Every rejection has a [`RejectReason`]. Decoding
//! checks, in order, the cheap filters (length, magic, version, job key),
//! then the tag (constant-time), and only then reads the rest of the header
//! and the body: no byte after the job key is believed before the tag
//! holds. Whether a sequence number is fresh is the Engine's question (it
//! keeps a window per sender). A later rejoin mode can give incarnations
//! meaning (and a flag bit) without changing the header; version-2
//! decoders reject a nonzero incarnation.

mod agree;
mod marks;
mod quorum;
mod seal;

use super::config::Rank;
use super::ranks::{ListError, RankList, encode_rank_list};

pub use agree::{AgreeDown, AgreeUp, AgreementId, WireValue};
pub use marks::{MAX_MARKS, MAX_MARKS_LEN, Marks};
pub use quorum::{OutcomeVerdict, SUSPECT_HOST, VOTE_COMPLETE, VOTE_TIEBREAK};
pub use seal::{JobKeys, Sealed, TAG_LEN, seal, seal_into};

pub const MAGIC: [u8; 4] = *b"FFDP";
pub const VERSION: u8 = 2;
/// Bytes before the body.
pub const HEADER_LEN: usize = 36;
/// The shortest message: a header, an empty body, a tag.
pub const MIN_LEN: usize = HEADER_LEN + TAG_LEN;
/// Heartbeat slots in an observer's slot page: 512 × 8 bytes = 4 KiB.
pub const SLOTS: u16 = 512;

const OFF_KIND: usize = 5;
const OFF_SENDER: usize = 16;
const OFF_SEQ: usize = 24;
const OFF_BODY_LEN: usize = 32;
/// Offset of `hops` in a Notice (after `origin`).
const OFF_NOTICE_HOPS: usize = HEADER_LEN + 4;
/// Offset of `hops` in a Payload (after `origin` and `seq`).
const OFF_PAYLOAD_HOPS: usize = HEADER_LEN + 12;
/// Offset of the application's bytes in a Payload (after `origin`, `seq`,
/// `hops` and the reserved u16).
pub const OFF_PAYLOAD_BYTES: usize = HEADER_LEN + 16;
/// Offset of `hops` in a Suspect and an Outcome (after `accuser`, `nonce`
/// and `suspect`).
const OFF_FLOOD_HOPS: usize = HEADER_LEN + 12;

macro_rules! counted_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $val:literal => $word:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(u8)]
        pub enum $name { $($(#[$vmeta])* $variant = $val),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            pub const COUNT: usize = Self::ALL.len();

            /// Dense index, for counter arrays.
            pub fn index(self) -> usize {
                Self::ALL.iter().position(|&k| k == self).unwrap_or(0)
            }

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $word),+ }
            }
        }
    };
}

counted_enum!(
    /// Message kinds.
    Kind {
        /// Failed and/or left ranks, broadcast over the overlay.
        Notice = 1 => "notice",
        /// An observer asks its new emitter to heartbeat into a slot.
        ObserveMe = 2 => "observe_me",
        /// An observer whose emitter's digest differs sends its sets and
        /// its payload marks.
        SyncRequest = 3 => "sync_request",
        /// The ranks the requester lacked.
        SyncReply = 4 => "sync_reply",
        /// Is `about` alive? (`InbandMode::Suspect`)
        Probe = 5 => "probe",
        ProbeAck = 6 => "probe_ack",
        /// Application payload broadcast.
        Payload = 7 => "payload",
        /// Quorum: an accusation of silence, flooded over the overlay.
        Suspect = 8 => "suspect",
        /// Quorum: a subtree's count, up the flood-parent tree.
        Vote = 9 => "vote",
        /// Quorum: the suspect answers its accuser (it is reachable).
        Refute = 10 => "refute",
        /// Quorum: an accusation ends withdrawn or without a quorum, flooded.
        Outcome = 11 => "outcome",
        /// Agreement: a subtree's aggregate on its way to the root (`agree.rs`).
        AgreeUp = 12 => "agree_up",
        /// Agreement: the decision on its way down from the root.
        AgreeDown = 13 => "agree_down",
    }
);

impl Kind {
    pub fn from_u8(b: u8) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|&k| k as u8 == b)
    }
}

counted_enum!(
    /// Why received bytes were dropped.
    RejectReason {
        /// Shorter than the header, or than the body it announces.
        Truncated = 0 => "truncated",
        BadMagic = 1 => "bad_magic",
        /// A protocol version this build does not speak.
        BadVersion = 2 => "bad_version",
        /// From another job (or garbage).
        WrongJobKey = 3 => "wrong_job_key",
        UnknownKind = 4 => "unknown_kind",
        /// Header flags or body reserved fields not zero.
        ReservedBits = 5 => "reserved_bits",
        /// A nonzero sender incarnation (rejoin mode is not supported).
        UnsupportedIncarnation = 6 => "unsupported_incarnation",
        /// A rank (sender, origin, listed rank) ≥ N, or a slot ≥ 512.
        RankOutOfRange = 7 => "rank_out_of_range",
        /// Body length field disagrees with the bytes received.
        LengthMismatch = 8 => "length_mismatch",
        /// A body field could not be parsed.
        Malformed = 9 => "malformed",
        /// Bytes left over after the body.
        TrailingBytes = 10 => "trailing_bytes",
        /// A message claiming to come from the receiver itself.
        FromSelf = 11 => "from_self",
        /// The tag does not authenticate the message: not sealed with this
        /// job's message key for this rank (a forgery, another job, a copy
        /// meant for another rank, or corruption).
        BadMac = 12 => "bad_mac",
        /// The transport's source address names another rank than the
        /// header's sender (providers that report sources only).
        SourceMismatch = 13 => "source_mismatch",
        /// A sequence number already seen from that sender, or older than
        /// its window (64 behind the newest): a replayed (or duplicated)
        /// message.
        Replayed = 14 => "replayed",
    }
);

impl From<ListError> for RejectReason {
    fn from(e: ListError) -> Self {
        match e {
            ListError::Truncated => RejectReason::Truncated,
            ListError::Malformed => RejectReason::Malformed,
            ListError::RankOutOfRange => RejectReason::RankOutOfRange,
        }
    }
}

/// What a probed rank's observer reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeVerdict {
    /// No evidence either way.
    Unknown = 0,
    /// Alive: it answered itself, or its beats are fresh.
    Alive = 1,
    /// Its beats have stood still for a while.
    Silent = 2,
    /// Already in the responder's failed set.
    Dead = 3,
}

impl ProbeVerdict {
    fn from_u8(b: u8) -> Option<Self> {
        [Self::Unknown, Self::Alive, Self::Silent, Self::Dead]
            .into_iter()
            .find(|&v| v as u8 == b)
    }
}

/// The validated header of a received message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    /// Authoritative sender (validated < N, authenticated by the tag).
    pub sender: Rank,
    pub incarnation: u32,
    /// The sequence number on the link from the sender to this rank (≥ 1);
    /// freshness is the receiver's question.
    pub seq: u64,
    pub body_len: u32,
}

/// A notice: ranks that failed and/or left, as detected by `origin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notice<'a> {
    pub origin: Rank,
    /// Overlay hops travelled so far (0 from the originator).
    pub hops: u16,
    pub failed: RankList<'a>,
    pub left: RankList<'a>,
}

/// A decoded, validated message body; lists and payload bytes borrow the
/// received buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message<'a> {
    Notice(Notice<'a>),
    ObserveMe {
        generation: u32,
        slot: u16,
    },
    SyncRequest {
        digest: u64,
        failed: RankList<'a>,
        left: RankList<'a>,
        /// The requester's payload high-water marks (`marks`).
        marks: Marks<'a>,
    },
    SyncReply {
        failed: RankList<'a>,
        left: RankList<'a>,
    },
    Probe {
        nonce: u32,
        about: Rank,
    },
    ProbeAck {
        nonce: u32,
        about: Rank,
        verdict: ProbeVerdict,
    },
    Payload {
        origin: Rank,
        seq: u64,
        hops: u16,
        bytes: &'a [u8],
    },
    /// `accuser` finds `suspect` silent (with [`SUSPECT_HOST`] in `flags`:
    /// its whole host); round `nonce` of its accusation.
    Suspect {
        accuser: Rank,
        nonce: u32,
        suspect: Rank,
        hops: u16,
        flags: u16,
    },
    /// The sender's subtree of round `nonce` of `accuser`'s accusation:
    /// `count` ranks, `flags` ([`VOTE_TIEBREAK`], [`VOTE_COMPLETE`]).
    Vote {
        accuser: Rank,
        nonce: u32,
        count: u32,
        flags: u16,
    },
    /// The suspect of round `nonce` of `accuser`'s accusation is alive.
    Refute {
        accuser: Rank,
        nonce: u32,
    },
    /// `accuser`'s accusation of `suspect` (last round `nonce`) ended.
    Outcome {
        accuser: Rank,
        nonce: u32,
        suspect: Rank,
        hops: u16,
        verdict: OutcomeVerdict,
    },
    AgreeUp(AgreeUp<'a>),
    AgreeDown(AgreeDown<'a>),
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take<const K: usize>(&mut self) -> Result<[u8; K], RejectReason> {
        let s = self
            .bytes
            .get(self.at..self.at + K)
            .ok_or(RejectReason::Truncated)?;
        self.at += K;
        let mut a = [0u8; K];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, RejectReason> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, RejectReason> {
        Ok(u16::from_le_bytes(self.take()?))
    }
    fn u32(&mut self) -> Result<u32, RejectReason> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, RejectReason> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    fn rank(&mut self, n: u32) -> Result<Rank, RejectReason> {
        let r = self.u32()?;
        if r >= n {
            Err(RejectReason::RankOutOfRange)
        } else {
            Ok(r)
        }
    }
    fn list(&mut self, n: u32) -> Result<RankList<'a>, RejectReason> {
        Ok(RankList::decode(self.bytes, &mut self.at, n)?)
    }
    fn zero16(&mut self) -> Result<(), RejectReason> {
        if self.u16()? != 0 {
            Err(RejectReason::ReservedBits)
        } else {
            Ok(())
        }
    }
}

/// The kind byte of an encoded message, without validation (for counters
/// in drivers; `None` if too short or unknown).
pub fn peek_kind(bytes: &[u8]) -> Option<Kind> {
    Kind::from_u8(*bytes.get(OFF_KIND)?)
}

/// Decodes and validates `bytes`, received by rank `me` of a job with keys
/// `keys` and `n` ranks: the cheap filters, then the tag (sealed for `me`),
/// then the rest. Never panics; every failure names its reason.
pub fn decode<'a>(
    bytes: &'a [u8],
    keys: &JobKeys,
    me: Rank,
    n: u32,
) -> Result<(Header, Message<'a>), RejectReason> {
    if bytes.len() < MIN_LEN {
        return Err(RejectReason::Truncated);
    }
    let mut r = Reader { bytes, at: 0 };
    if r.take::<4>()? != MAGIC {
        return Err(RejectReason::BadMagic);
    }
    if r.u8()? != VERSION {
        return Err(RejectReason::BadVersion);
    }
    let kind_byte = r.u8()?;
    let flags = r.u16()?;
    if r.u64()? != keys.job_key() {
        return Err(RejectReason::WrongJobKey);
    }
    if !keys.verify(bytes, me) {
        return Err(RejectReason::BadMac);
    }
    // Authenticated: everything before the tag is the sender's.
    let signed = &bytes[..bytes.len() - TAG_LEN];
    r.bytes = signed;
    let kind = Kind::from_u8(kind_byte).ok_or(RejectReason::UnknownKind)?;
    if flags != 0 {
        return Err(RejectReason::ReservedBits);
    }
    let sender = r.rank(n)?;
    let incarnation = r.u32()?;
    if incarnation != 0 {
        return Err(RejectReason::UnsupportedIncarnation);
    }
    let seq = r.u64()?;
    if seq == 0 {
        // Sequence numbers start at 1; 0 marks an unsealed message.
        return Err(RejectReason::Malformed);
    }
    let body_len = r.u32()?;
    match (signed.len() - HEADER_LEN).cmp(&(body_len as usize)) {
        std::cmp::Ordering::Less => return Err(RejectReason::Truncated),
        std::cmp::Ordering::Greater => return Err(RejectReason::TrailingBytes),
        std::cmp::Ordering::Equal => {}
    }
    let message = match kind {
        Kind::Notice => {
            let origin = r.rank(n)?;
            let hops = r.u16()?;
            r.zero16()?;
            let failed = r.list(n)?;
            let left = r.list(n)?;
            Message::Notice(Notice {
                origin,
                hops,
                failed,
                left,
            })
        }
        Kind::ObserveMe => {
            let generation = r.u32()?;
            let slot = r.u16()?;
            r.zero16()?;
            if slot >= SLOTS {
                return Err(RejectReason::RankOutOfRange);
            }
            Message::ObserveMe { generation, slot }
        }
        Kind::SyncRequest => {
            let digest = r.u64()?;
            let failed = r.list(n)?;
            let left = r.list(n)?;
            let marks = Marks::decode(r.bytes, &mut r.at, n)?;
            Message::SyncRequest {
                digest,
                failed,
                left,
                marks,
            }
        }
        Kind::SyncReply => {
            let failed = r.list(n)?;
            let left = r.list(n)?;
            Message::SyncReply { failed, left }
        }
        Kind::Probe => Message::Probe {
            nonce: r.u32()?,
            about: r.rank(n)?,
        },
        Kind::ProbeAck => {
            let nonce = r.u32()?;
            let about = r.rank(n)?;
            let verdict = ProbeVerdict::from_u8(r.u8()?).ok_or(RejectReason::Malformed)?;
            Message::ProbeAck {
                nonce,
                about,
                verdict,
            }
        }
        Kind::Payload => {
            let origin = r.rank(n)?;
            let seq = r.u64()?;
            let hops = r.u16()?;
            r.zero16()?;
            let rest = &signed[r.at..];
            r.at = signed.len();
            Message::Payload {
                origin,
                seq,
                hops,
                bytes: rest,
            }
        }
        Kind::Suspect | Kind::Vote | Kind::Refute | Kind::Outcome => {
            quorum::decode(kind, &mut r, n)?
        }
        Kind::AgreeUp => Message::AgreeUp(agree::decode_up(&mut r, n)?),
        Kind::AgreeDown => Message::AgreeDown(agree::decode_down(&mut r, n)?),
    };
    if r.at != signed.len() {
        return Err(RejectReason::TrailingBytes);
    }
    Ok((
        Header {
            kind,
            sender,
            incarnation,
            seq,
            body_len,
        },
        message,
    ))
}

/// Builds the unsealed messages of one sender of one job (sequence number
/// 0, no tag): the Engine seals each copy for its receiver as it leaves
/// ([`Sealed`]); others seal with [`seal()`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encoder {
    pub job_key: u64,
    pub sender: Rank,
}

impl Encoder {
    pub fn new(job_key: u64, sender: Rank) -> Self {
        Encoder { job_key, sender }
    }

    fn start(&self, kind: Kind, body_hint: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + body_hint);
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(kind as u8);
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&self.job_key.to_le_bytes());
        out.extend_from_slice(&self.sender.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes()); // sequence number, written when sealed
        out.extend_from_slice(&0u32.to_le_bytes()); // body length, patched in `finish`
        out
    }

    fn finish(mut out: Vec<u8>) -> Vec<u8> {
        let body = (out.len() - HEADER_LEN) as u32;
        out[OFF_BODY_LEN..OFF_BODY_LEN + 4].copy_from_slice(&body.to_le_bytes());
        out
    }

    /// `failed` and `left` must be strictly increasing.
    pub fn notice(&self, origin: Rank, hops: u16, failed: &[Rank], left: &[Rank]) -> Vec<u8> {
        let mut out = self.start(Kind::Notice, 16 + 2 * (failed.len() + left.len()));
        out.extend_from_slice(&origin.to_le_bytes());
        out.extend_from_slice(&hops.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        encode_rank_list(failed, &mut out);
        encode_rank_list(left, &mut out);
        Self::finish(out)
    }

    pub fn observe_me(&self, generation: u32, slot: u16) -> Vec<u8> {
        let mut out = self.start(Kind::ObserveMe, 8);
        out.extend_from_slice(&generation.to_le_bytes());
        out.extend_from_slice(&slot.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        Self::finish(out)
    }

    /// A sync request that asks for no payloads (its marks cover no
    /// origin).
    pub fn sync_request(&self, digest: u64, failed: &[Rank], left: &[Rank]) -> Vec<u8> {
        self.sync_request_with_marks(digest, failed, left, 0, 0, &[])
    }

    /// A sync request with the requester's payload marks for the origins
    /// `from..to`: `marks` lists `(origin, high-water mark)` for the
    /// origins of that range it delivered anything of, origins strictly
    /// increasing, marks ≥ 1 (see `marks`). `failed` and `left` must be
    /// strictly increasing.
    pub fn sync_request_with_marks(
        &self,
        digest: u64,
        failed: &[Rank],
        left: &[Rank],
        from: Rank,
        to: Rank,
        marks: &[(Rank, u64)],
    ) -> Vec<u8> {
        let hint = 24 + 2 * (failed.len() + left.len()) + 8 * marks.len();
        let mut out = self.start(Kind::SyncRequest, hint);
        out.extend_from_slice(&digest.to_le_bytes());
        encode_rank_list(failed, &mut out);
        encode_rank_list(left, &mut out);
        marks::encode_marks(from, to, marks, &mut out);
        Self::finish(out)
    }

    pub fn sync_reply(&self, failed: &[Rank], left: &[Rank]) -> Vec<u8> {
        let mut out = self.start(Kind::SyncReply, 8 + 2 * (failed.len() + left.len()));
        encode_rank_list(failed, &mut out);
        encode_rank_list(left, &mut out);
        Self::finish(out)
    }

    pub fn probe(&self, nonce: u32, about: Rank) -> Vec<u8> {
        let mut out = self.start(Kind::Probe, 8);
        out.extend_from_slice(&nonce.to_le_bytes());
        out.extend_from_slice(&about.to_le_bytes());
        Self::finish(out)
    }

    pub fn probe_ack(&self, nonce: u32, about: Rank, verdict: ProbeVerdict) -> Vec<u8> {
        let mut out = self.start(Kind::ProbeAck, 9);
        out.extend_from_slice(&nonce.to_le_bytes());
        out.extend_from_slice(&about.to_le_bytes());
        out.push(verdict as u8);
        Self::finish(out)
    }

    pub fn payload(&self, origin: Rank, seq: u64, hops: u16, bytes: &[u8]) -> Vec<u8> {
        let mut out = self.start(Kind::Payload, 16 + bytes.len());
        out.extend_from_slice(&origin.to_le_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&hops.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(bytes);
        Self::finish(out)
    }
}

/// The unsealed copy of a received (validated) Notice, Payload, Suspect or
/// Outcome message
/// with the sender replaced and the hop count incremented, its sequence
/// number cleared and its tag removed: forwarding costs one copy, no
/// re-encoding, and the forwarder seals each copy with its own sequence
/// number and tag. Returns `None` for other kinds or bytes too short to
/// hold a header, the hop field and a tag.
pub fn forwarded(bytes: &[u8], new_sender: Rank) -> Option<Vec<u8>> {
    let off = match peek_kind(bytes)? {
        Kind::Notice => OFF_NOTICE_HOPS,
        Kind::Payload => OFF_PAYLOAD_HOPS,
        Kind::Suspect | Kind::Outcome => OFF_FLOOD_HOPS,
        _ => return None,
    };
    let signed = bytes.get(..bytes.len().checked_sub(TAG_LEN)?)?;
    let hops = u16::from_le_bytes(signed.get(off..off + 2)?.try_into().ok()?);
    let mut out = signed.to_vec();
    out[OFF_SENDER..OFF_SENDER + 4].copy_from_slice(&new_sender.to_le_bytes());
    out[OFF_SEQ..OFF_SEQ + 8].copy_from_slice(&0u64.to_le_bytes());
    out[off..off + 2].copy_from_slice(&hops.saturating_add(1).to_le_bytes());
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: u64 = 0x5EED_F00D_0000_0001;

    fn keys() -> JobKeys {
        JobKeys::new(KEY, [7; 32])
    }

    #[test]
    fn header_layout_is_fixed() {
        let m = seal(&Encoder::new(KEY, 3).observe_me(9, 4), 5, 6, &keys());
        assert_eq!(&m[0..4], b"FFDP");
        assert_eq!(m[4], VERSION);
        assert_eq!(m[5], Kind::ObserveMe as u8);
        assert_eq!(u64::from_le_bytes(m[8..16].try_into().unwrap()), KEY);
        assert_eq!(u32::from_le_bytes(m[16..20].try_into().unwrap()), 3);
        assert_eq!(u64::from_le_bytes(m[24..32].try_into().unwrap()), 5);
        assert_eq!(
            u32::from_le_bytes(m[32..36].try_into().unwrap()) as usize,
            m.len() - HEADER_LEN - TAG_LEN
        );
        assert_eq!(peek_kind(&m), Some(Kind::ObserveMe));
        let (h, _) = decode(&m, &keys(), 6, 10).unwrap();
        assert_eq!((h.sender, h.seq), (3, 5));
    }

    #[test]
    fn a_sealed_copy_is_what_seal_makes() {
        let unsealed = Encoder::new(KEY, 1).notice(1, 0, &[7], &[]);
        let copy = Sealed::new(unsealed.clone().into(), 9, 2, &keys());
        assert_eq!(copy.to_vec(), seal(&unsealed, 9, 2, &keys()));
        assert_eq!(copy.len(), unsealed.len() + TAG_LEN);
        assert_eq!((copy.kind(), copy.seq()), (Some(Kind::Notice), 9));
    }

    #[test]
    fn forwarding_patches_sender_and_hops_and_needs_a_new_seal() {
        let m = seal(&Encoder::new(KEY, 1).notice(1, 4, &[7], &[]), 3, 2, &keys());
        let f = forwarded(&m, 2).expect("a notice");
        assert_eq!(f.len(), m.len() - TAG_LEN, "the tag is dropped");
        assert!(
            decode(&f, &keys(), 5, 10).is_err(),
            "an unsealed copy is no message"
        );
        let f = seal(&f, 1, 5, &keys());
        let (h, msg) = decode(&f, &keys(), 5, 10).unwrap();
        assert_eq!((h.sender, h.seq), (2, 1));
        let Message::Notice(n) = msg else {
            panic!("not a notice")
        };
        assert_eq!((n.origin, n.hops, n.failed.to_vec()), (1, 5, vec![7]));
        let p = seal(
            &Encoder::new(KEY, 1).payload(1, 77, 0, b"revoke"),
            4,
            3,
            &keys(),
        );
        let fp = seal(&forwarded(&p, 3).unwrap(), 8, 4, &keys());
        let (_, msg) = decode(&fp, &keys(), 4, 10).unwrap();
        assert_eq!(
            msg,
            Message::Payload {
                origin: 1,
                seq: 77,
                hops: 1,
                bytes: b"revoke"
            }
        );
        let probe = seal(&Encoder::new(KEY, 1).probe(1, 2), 1, 3, &keys());
        assert_eq!(forwarded(&probe, 3), None);
    }

    #[test]
    fn slot_beyond_the_page_is_rejected() {
        let m = seal(&Encoder::new(KEY, 1).observe_me(1, SLOTS), 1, 0, &keys());
        assert_eq!(decode(&m, &keys(), 0, 4), Err(RejectReason::RankOutOfRange));
    }

    #[test]
    fn bad_probe_verdict_is_malformed() {
        let mut m = Encoder::new(KEY, 1).probe_ack(1, 2, ProbeVerdict::Alive);
        *m.last_mut().unwrap() = 9;
        let m = seal(&m, 1, 0, &keys());
        assert_eq!(decode(&m, &keys(), 0, 4), Err(RejectReason::Malformed));
    }

    #[test]
    fn the_tag_is_checked_before_the_body_and_after_the_job_key() {
        let good = seal(&Encoder::new(KEY, 1).probe(1, 2), 1, 3, &keys());
        assert!(decode(&good, &keys(), 3, 4).is_ok());
        // Another secret: the job key matches, the tag does not.
        let other = JobKeys::new(KEY, [8; 32]);
        assert_eq!(decode(&good, &other, 3, 4), Err(RejectReason::BadMac));
        // Another receiver: a copy is good only where it was sent.
        assert_eq!(decode(&good, &keys(), 2, 4), Err(RejectReason::BadMac));
        // Another job: the cheap filter answers first.
        let stranger = JobKeys::new(KEY + 1, [7; 32]);
        assert_eq!(
            decode(&good, &stranger, 3, 4),
            Err(RejectReason::WrongJobKey)
        );
        // A header the tag does not cover (sender out of range, bad kind)
        // is a bad tag, not a parse error: nothing is read before it holds.
        let mut forged = good.clone();
        forged[16..20].copy_from_slice(&99u32.to_le_bytes());
        forged[5] = 0x7f;
        assert_eq!(decode(&forged, &keys(), 3, 4), Err(RejectReason::BadMac));
        // An unsealed message (sequence number 0) sealed anyway.
        let zero = seal(&Encoder::new(KEY, 1).probe(1, 2), 0, 3, &keys());
        assert_eq!(decode(&zero, &keys(), 3, 4), Err(RejectReason::Malformed));
    }
}
