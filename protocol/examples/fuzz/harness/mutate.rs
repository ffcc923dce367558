//! Mutations of message bytes: what corruption, truncation, a confused
//! sender or an attacker editing a captured message produce.
//!
//! Owns: [`MUTATIONS`], one row per kind of edit, and [`reseal`], which
//! puts a valid tag back on an edited message so that the header and body
//! parsers behind the tag see it. Must not: panic on any length (an
//! empty input included), or know message layouts beyond the header's
//! field offsets.

// The rows of MUTATIONS share one signature (`Edit`); some only index.
#![allow(clippy::ptr_arg)]

use ffd_protocol::Rank;
use ffd_protocol::wire::{self, HEADER_LEN, JobKeys, TAG_LEN};

use super::dice::Dice;
use super::generate::{self, View};

/// Edits `bytes` in place; `other` is a second message to splice from.
/// (One signature for every row, so some take a `Vec` they only index.)
pub type Edit = fn(&mut Dice, &mut Vec<u8>, &View<'_>, &[u8]);

pub struct Mutation {
    pub name: &'static str,
    pub edit: Edit,
}

pub const MUTATIONS: &[Mutation] = &[
    Mutation {
        name: "bit_flip",
        edit: bit_flip,
    },
    Mutation {
        name: "byte_set",
        edit: byte_set,
    },
    Mutation {
        name: "header_field",
        edit: header_field,
    },
    Mutation {
        name: "body_rank",
        edit: body_rank,
    },
    Mutation {
        name: "truncate",
        edit: truncate,
    },
    Mutation {
        name: "extend",
        edit: extend,
    },
    Mutation {
        name: "splice",
        edit: splice,
    },
    Mutation {
        name: "duplicate_region",
        edit: duplicate_region,
    },
    Mutation {
        name: "delete_region",
        edit: delete_region,
    },
];

/// One to three edits from [`MUTATIONS`].
pub fn mutate(dice: &mut Dice, bytes: &mut Vec<u8>, view: &View<'_>, other: &[u8]) {
    for _ in 0..1 + dice.below(3) {
        let m = &MUTATIONS[dice.index(MUTATIONS.len())];
        (m.edit)(dice, bytes, view, other);
    }
}

/// Replaces the tag of a (mutated) sealed message with a valid one for
/// receiver `to` under `keys`, with sequence number `seq`: the edit is now
/// what the sender "meant", and only the parsers behind the tag can refuse
/// it.
pub fn reseal(bytes: &mut Vec<u8>, seq: u64, to: Rank, keys: &JobKeys) {
    let unsealed = &bytes[..bytes.len().saturating_sub(TAG_LEN)];
    *bytes = wire::seal(unsealed, seq, to, keys);
}

/// A sequence number for a sealed message: the next one of the link
/// mostly (`next`), else a jump ahead, one behind (a replay-window edge),
/// 1, 0, or near `u64::MAX`. The last poisons the link for the rest of the
/// episode (every later number is "old"), as an insider holding the key
/// can: rare, so that the episode's other links keep working.
pub fn seq(dice: &mut Dice, next: u64) -> u64 {
    match dice.below(200) {
        0..=179 => next,
        180..=185 => next.saturating_add(1 + dice.below(200)),
        186..=191 => next.saturating_sub(1 + dice.below(70)),
        192..=194 => 1,
        195..=196 => 0,
        197 => u64::MAX,
        198 => u64::MAX - dice.below(64),
        _ => dice.u64(),
    }
}

fn bit_flip(dice: &mut Dice, bytes: &mut Vec<u8>, _: &View<'_>, _: &[u8]) {
    if !bytes.is_empty() {
        let i = dice.index(bytes.len());
        bytes[i] ^= 1 << dice.below(8);
    }
}

fn byte_set(dice: &mut Dice, bytes: &mut Vec<u8>, _: &View<'_>, _: &[u8]) {
    if !bytes.is_empty() {
        let i = dice.index(bytes.len());
        let any = dice.u8();
        bytes[i] = dice.pick(&[0, 1, 0x7F, 0x80, 0xFF, any]);
    }
}

fn put(bytes: &mut [u8], at: usize, value: &[u8]) {
    if let Some(field) = bytes.get_mut(at..at + value.len()) {
        field.copy_from_slice(value);
    }
}

/// Rewrites one header field with a value its validation must handle:
/// magic, version, kind (including the reserved 8–14 and unknown ones),
/// flags, job key, sender, incarnation, sequence number, body length.
fn header_field(dice: &mut Dice, bytes: &mut Vec<u8>, view: &View<'_>, _: &[u8]) {
    match dice.below(9) {
        0 => put(bytes, 0, b"FFDQ"),
        1 => put(bytes, 4, &[dice.pick(&[0, 1, 3, 0xFF])]),
        2 => {
            let any = dice.u8();
            put(
                bytes,
                5,
                &[dice.pick(&[0, 8, 9, 11, 12, 14, 15, 0x7F, 0xFF, any])],
            );
        }
        3 => put(bytes, 6, &dice.pick(&[1u16, 0x8000, 0xFFFF]).to_le_bytes()),
        4 => put(bytes, 8, &view.job_key.wrapping_add(1).to_le_bytes()),
        5 => put(bytes, 16, &generate::rank(dice, view).to_le_bytes()),
        6 => put(bytes, 20, &dice.pick(&[1u32, u32::MAX]).to_le_bytes()),
        7 => put(bytes, 24, &dice.pick(&[0u64, 1, u64::MAX]).to_le_bytes()),
        _ => {
            let body = bytes.len().saturating_sub(HEADER_LEN + TAG_LEN) as u32;
            let len = dice.pick(&[0, body.wrapping_add(1), body.wrapping_sub(1), u32::MAX]);
            put(bytes, 32, &len.to_le_bytes());
        }
    }
}

/// Overwrites a 4-byte field of the body with an interesting rank.
fn body_rank(dice: &mut Dice, bytes: &mut Vec<u8>, view: &View<'_>, _: &[u8]) {
    let end = bytes.len().saturating_sub(TAG_LEN);
    if end >= HEADER_LEN + 4 {
        let at = HEADER_LEN + dice.index(end - HEADER_LEN - 3);
        put(bytes, at, &generate::rank(dice, view).to_le_bytes());
    }
}

fn truncate(dice: &mut Dice, bytes: &mut Vec<u8>, _: &View<'_>, _: &[u8]) {
    let len = bytes.len();
    let to = match dice.below(5) {
        0 => len.saturating_sub(1),
        1 => len.saturating_sub(TAG_LEN),
        2 => HEADER_LEN,
        3 => HEADER_LEN + TAG_LEN,
        _ => dice.index(len + 1),
    };
    bytes.truncate(to);
}

fn extend(dice: &mut Dice, bytes: &mut Vec<u8>, _: &View<'_>, _: &[u8]) {
    let k = 1 + dice.index(32);
    if dice.chance(50) {
        bytes.resize(bytes.len() + k, 0);
    } else {
        let extra = dice.bytes(k);
        bytes.extend_from_slice(&extra);
    }
}

fn splice(dice: &mut Dice, bytes: &mut Vec<u8>, _: &View<'_>, other: &[u8]) {
    let a = dice.index(bytes.len() + 1);
    let b = dice.index(other.len() + 1);
    bytes.truncate(a);
    bytes.extend_from_slice(&other[b..]);
}

fn duplicate_region(dice: &mut Dice, bytes: &mut Vec<u8>, _: &View<'_>, _: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let start = dice.index(bytes.len());
    let len = 1 + dice.index((bytes.len() - start).min(16));
    let region = bytes[start..start + len].to_vec();
    let at = dice.index(bytes.len() + 1);
    bytes.splice(at..at, region);
}

fn delete_region(dice: &mut Dice, bytes: &mut Vec<u8>, _: &View<'_>, _: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let start = dice.index(bytes.len());
    let len = 1 + dice.index((bytes.len() - start).min(16));
    bytes.drain(start..start + len);
}
