//! Authentication of messages: the job's keys, the 16-byte tag that ends
//! every message, and a sealed copy of a message on its way out.
//!
//! Owns: [`JobKeys`] (the job key, a cheap filter, and the message key, the
//! one that authenticates), computing and checking tags, and [`Sealed`],
//! one copy of a message for one receiver with its own sequence number and
//! tag. Must not: print a key (`Debug` is redacted), decide whether a
//! sequence number is fresh (the Engine keeps a window per sender), or
//! parse anything after the header (the codec does, once the tag holds).
//!
//! An unsealed message (what [`Encoder`](super::Encoder) builds and
//! [`forwarded`](super::forwarded) returns) is the header and the body with
//! a sequence number of 0 and no tag. Sealing it for receiver `to` writes
//! the sequence number and appends the tag:
//!
//! ```text
//! tag = first 16 bytes of BLAKE3-keyed(message key, to (u32 LE) ‖ header ‖ body)
//! ```
//!
//! The receiver's rank is covered but not sent (each rank knows its own):
//! a copy is good at the rank it was sealed for and nowhere else, so a
//! message captured on one link cannot be replayed to another rank, and
//! sequence numbers can count per link (sender → receiver), where the
//! receiver's window sees them consecutive.

use std::fmt;
use std::sync::Arc;

use super::{HEADER_LEN, Kind, OFF_SEQ, peek_kind};
use crate::config::Rank;

/// Bytes of the tag that ends every message.
pub const TAG_LEN: usize = 16;

/// The keys of one job: the job key every header carries (it filters out
/// other jobs cheaply, and authenticates nothing) and the 32-byte message
/// key the tags are computed with (derived from the job's secret, which
/// never travels on the fabric).
#[derive(Clone, PartialEq, Eq)]
pub struct JobKeys {
    job_key: u64,
    /// `None` only in the simulator's own keys ([`JobKeys::unauthenticated`]).
    message_key: Option<[u8; 32]>,
}

impl fmt::Debug for JobKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobKeys")
            .field("job_key", &format_args!("{:#018x}", self.job_key))
            .field("message_key", &format_args!(".."))
            .finish()
    }
}

impl JobKeys {
    pub fn new(job_key: u64, message_key: [u8; 32]) -> JobKeys {
        JobKeys {
            job_key,
            message_key: Some(message_key),
        }
    }

    /// Keys that authenticate nothing: no tag is computed (every tag is
    /// zeros) and any is accepted, and the Engines that hold them number
    /// no copy and keep no replay window (see [`JobKeys::authenticates`]).
    /// For the simulator alone, where nobody forges and no copy arrives
    /// twice or out of order on its link (`sim::SimConfig::authenticate`).
    /// Not reachable from outside the crate.
    #[cfg(feature = "sim")]
    pub(crate) fn unauthenticated(job_key: u64) -> JobKeys {
        JobKeys {
            job_key,
            message_key: None,
        }
    }

    /// Whether messages are authenticated: always, but for the
    /// simulator's [`JobKeys::unauthenticated`].
    pub(crate) fn authenticates(&self) -> bool {
        self.message_key.is_some()
    }

    /// The job key, stamped in clear on every message.
    pub fn job_key(&self) -> u64 {
        self.job_key
    }

    /// The tag of `parts` (a whole message but its tag, possibly in
    /// pieces) for receiver `to`.
    fn tag(&self, to: Rank, parts: &[&[u8]]) -> [u8; TAG_LEN] {
        let Some(key) = &self.message_key else {
            return [0; TAG_LEN];
        };
        let mut h = blake3::Hasher::new_keyed(key);
        h.update(&to.to_le_bytes());
        for part in parts {
            h.update(part);
        }
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&h.finalize().as_bytes()[..TAG_LEN]);
        tag
    }

    /// Whether `bytes` ends with the right tag, for receiver `me`, for
    /// everything before it. Constant time in the tag's bytes. `false` when
    /// too short to hold one.
    pub fn verify(&self, bytes: &[u8], me: Rank) -> bool {
        let Some(split) = bytes.len().checked_sub(TAG_LEN) else {
            return false;
        };
        let (signed, tag) = bytes.split_at(split);
        let Ok(tag) = <&[u8; TAG_LEN]>::try_from(tag) else {
            return false;
        };
        if self.message_key.is_none() {
            return true;
        }
        constant_time_eq::constant_time_eq_16(&self.tag(me, &[signed]), tag)
    }
}

/// Seals an unsealed message for receiver `to`: a copy with sequence
/// number `seq` and the tag appended, ready to send. (The Engine seals its
/// own copies as they leave, [`Sealed`]; this is for tests, tools and
/// fuzzers that speak as a rank.) `unsealed` must hold at least a header.
pub fn seal(unsealed: &[u8], seq: u64, to: Rank, keys: &JobKeys) -> Vec<u8> {
    let mut out = Vec::with_capacity(unsealed.len() + TAG_LEN);
    seal_into(unsealed, seq, to, keys, &mut out);
    out
}

/// [`seal`], appending the copy's wire bytes to `out` (a buffer reused
/// from copy to copy, as the simulator's).
pub fn seal_into(unsealed: &[u8], seq: u64, to: Rank, keys: &JobKeys, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(unsealed);
    if let Some(field) = out.get_mut(start + OFF_SEQ..start + OFF_SEQ + 8) {
        field.copy_from_slice(&seq.to_le_bytes());
    }
    let tag = keys.tag(to, &[&out[start..]]);
    out.extend_from_slice(&tag);
}

/// One copy of a message on its way out of the Engine, for one receiver:
/// the unsealed bytes, shared by the copies of one broadcast step, and this
/// copy's sequence number and tag. Its wire bytes are the unsealed bytes
/// with the sequence number written in, then the tag
/// ([`Sealed::write_to`]).
///
/// A driver sends [`Sealed::to_vec`] (or writes it into a buffer of its
/// own); the simulator keeps the `Sealed` itself in flight, which costs 24
/// bytes more than a shared pointer rather than a copy of the message.
#[derive(Clone, PartialEq, Eq)]
pub struct Sealed {
    unsealed: Arc<[u8]>,
    seq: u64,
    tag: [u8; TAG_LEN],
}

impl fmt::Debug for Sealed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealed")
            .field("kind", &self.kind())
            .field("seq", &self.seq)
            .field("len", &self.len())
            .finish()
    }
}

impl Sealed {
    /// A copy of `unsealed` for receiver `to`, with sequence number `seq`
    /// and its tag. (The Engine seals its own copies as they leave; this is
    /// how, for tools and benchmarks.) `unsealed` holds at least a header:
    /// the Engine's own encoder and [`forwarded`](super::forwarded) make
    /// nothing shorter.
    pub fn new(unsealed: Arc<[u8]>, seq: u64, to: Rank, keys: &JobKeys) -> Sealed {
        Sealed::unsealed(unsealed).sealed_as(seq, to, keys)
    }

    /// A message not sealed yet (sequence number 0, no tag), as the Engine
    /// queues it; never handed to a driver.
    pub(crate) fn unsealed(unsealed: Arc<[u8]>) -> Sealed {
        Sealed {
            unsealed,
            seq: 0,
            tag: [0; TAG_LEN],
        }
    }

    /// This message sealed for `to` with sequence number `seq`. The tag is
    /// computed over the shared bytes with the sequence number spliced in,
    /// without copying them.
    pub(crate) fn sealed_as(self, seq: u64, to: Rank, keys: &JobKeys) -> Sealed {
        debug_assert!(self.unsealed.len() >= HEADER_LEN, "an unsealed message");
        let tag = match (
            self.unsealed.get(..OFF_SEQ),
            self.unsealed.get(OFF_SEQ + 8..),
        ) {
            (Some(before), Some(after)) => keys.tag(to, &[before, &seq.to_le_bytes(), after]),
            // Too short to be a message: a tag that fails.
            _ => [0; TAG_LEN],
        };
        Sealed {
            unsealed: self.unsealed,
            seq,
            tag,
        }
    }

    /// Bytes on the wire.
    pub fn len(&self) -> usize {
        self.unsealed.len() + TAG_LEN
    }

    /// Never: a message holds at least a header and a tag.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The message's kind.
    pub fn kind(&self) -> Option<Kind> {
        peek_kind(&self.unsealed)
    }

    /// This copy's sequence number.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether `other` is a copy of the same message (the same broadcast
    /// step), whatever its receiver and sequence number.
    pub fn same_message(&self, other: &Sealed) -> bool {
        Arc::ptr_eq(&self.unsealed, &other.unsealed)
    }

    /// The unsealed bytes and this copy's sequence number: what the
    /// simulator keeps of a copy in flight (the tag, a function of them,
    /// its receiver and the keys, is made again on delivery).
    #[cfg(feature = "sim")]
    pub(crate) fn into_parts(self) -> (Arc<[u8]>, u64) {
        (self.unsealed, self.seq)
    }

    /// Appends the wire bytes to `out`.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.unsealed);
        if let Some(field) = out.get_mut(start + OFF_SEQ..start + OFF_SEQ + 8) {
            field.copy_from_slice(&self.seq.to_le_bytes());
        }
        out.extend_from_slice(&self.tag);
    }

    /// The wire bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        self.write_to(&mut out);
        out
    }
}
