//! The bodies of the agreement messages (kinds 12 `AgreeUp` and 13
//! `AgreeDown`, see `crate::agreement`): which agreement, the hop count,
//! the root, and one or two values.
//!
//! ```text
//! AgreeUp    class u8, has_decision u8, hops u16, number u64, root u32,
//!            value, [decision]
//! AgreeDown  class u8, 0 u8, hops u16, number u64, root u32, decision
//! value      flags u64, view u64, failed list
//! ```
//!
//! `class` is 0 for a view change (number: the view id being decided) and
//! 1 for a user agreement (number: its sequence number, from 1). `hops` is
//! the longest chain of agreement messages behind this one (the sender's
//! count plus one). A failed list is the usual rank list (`ranks.rs`), so a
//! message carries at most two lists of N bits each: it fits the buffers
//! sized for a notice's failed and left lists.
//!
//! Owns: encoding and validating decoding of these bodies. Must not: panic
//! on any input, or interpret a value (the agreement does).

use super::{Encoder, Kind, Reader, RejectReason};
use crate::agreement::Value;
use crate::config::Rank;
use crate::ranks::{RankList, encode_rank_list};

/// Which agreement a message belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AgreementId {
    /// The view change that decides view `id` (`id` ≥ 1).
    View(u64),
    /// The `seq`-th user agreement of the job (from 1).
    User(u64),
}

impl AgreementId {
    fn class_and_number(self) -> (u8, u64) {
        match self {
            AgreementId::View(id) => (0, id),
            AgreementId::User(seq) => (1, seq),
        }
    }
}

/// A value as it travels: flags, view id and the failed list (borrowing
/// the received buffer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireValue<'a> {
    pub flags: u64,
    pub view: u64,
    pub failed: RankList<'a>,
}

impl WireValue<'_> {
    /// The value, owned.
    pub fn to_value(&self) -> Value {
        Value {
            flags: self.flags,
            failed: self.failed.to_vec(),
            view: self.view,
        }
    }
}

/// An `AgreeUp`: the sender's subtree aggregate for the tree rooted at
/// `root`, and a decision the sender already holds, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgreeUp<'a> {
    pub id: AgreementId,
    pub hops: u16,
    pub root: Rank,
    pub value: WireValue<'a>,
    pub decided: Option<WireValue<'a>>,
}

/// An `AgreeDown`: the decision, as decided or re-sent by `root`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgreeDown<'a> {
    pub id: AgreementId,
    pub hops: u16,
    pub root: Rank,
    pub decision: WireValue<'a>,
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    out.extend_from_slice(&v.flags.to_le_bytes());
    out.extend_from_slice(&v.view.to_le_bytes());
    encode_rank_list(&v.failed, out);
}

fn put_head(out: &mut Vec<u8>, id: AgreementId, second: u8, hops: u16, root: Rank) {
    let (class, number) = id.class_and_number();
    out.push(class);
    out.push(second);
    out.extend_from_slice(&hops.to_le_bytes());
    out.extend_from_slice(&number.to_le_bytes());
    out.extend_from_slice(&root.to_le_bytes());
}

impl Encoder {
    /// `value.failed` (and `decided`'s) must be strictly increasing.
    pub fn agree_up(
        &self,
        id: AgreementId,
        hops: u16,
        root: Rank,
        value: &Value,
        decided: Option<&Value>,
    ) -> Vec<u8> {
        let lists = value.failed.len() + decided.map_or(0, |d| d.failed.len());
        let mut out = self.start(Kind::AgreeUp, 48 + 2 * lists);
        put_head(&mut out, id, u8::from(decided.is_some()), hops, root);
        put_value(&mut out, value);
        if let Some(d) = decided {
            put_value(&mut out, d);
        }
        Self::finish(out)
    }

    /// `decision.failed` must be strictly increasing.
    pub fn agree_down(&self, id: AgreementId, hops: u16, root: Rank, decision: &Value) -> Vec<u8> {
        let mut out = self.start(Kind::AgreeDown, 32 + 2 * decision.failed.len());
        put_head(&mut out, id, 0, hops, root);
        put_value(&mut out, decision);
        Self::finish(out)
    }
}

/// Reads the common head: (id, second byte, hops, root).
fn head(r: &mut Reader<'_>, n: u32) -> Result<(AgreementId, u8, u16, Rank), RejectReason> {
    let class = r.u8()?;
    let second = r.u8()?;
    let hops = r.u16()?;
    let number = r.u64()?;
    let root = r.rank(n)?;
    let id = match class {
        0 if number >= 1 => AgreementId::View(number),
        1 if number >= 1 => AgreementId::User(number),
        _ => return Err(RejectReason::Malformed),
    };
    Ok((id, second, hops, root))
}

fn value<'a>(r: &mut Reader<'a>, n: u32) -> Result<WireValue<'a>, RejectReason> {
    Ok(WireValue {
        flags: r.u64()?,
        view: r.u64()?,
        failed: r.list(n)?,
    })
}

pub(super) fn decode_up<'a>(r: &mut Reader<'a>, n: u32) -> Result<AgreeUp<'a>, RejectReason> {
    let (id, has_decision, hops, root) = head(r, n)?;
    let value = value(r, n)?;
    let decided = match has_decision {
        0 => None,
        1 => Some(self::value(r, n)?),
        _ => return Err(RejectReason::ReservedBits),
    };
    Ok(AgreeUp {
        id,
        hops,
        root,
        value,
        decided,
    })
}

pub(super) fn decode_down<'a>(r: &mut Reader<'a>, n: u32) -> Result<AgreeDown<'a>, RejectReason> {
    let (id, zero, hops, root) = head(r, n)?;
    if zero != 0 {
        return Err(RejectReason::ReservedBits);
    }
    Ok(AgreeDown {
        id,
        hops,
        root,
        decision: value(r, n)?,
    })
}
