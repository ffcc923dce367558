//! Operation contexts: how an endpoint names its posted operations to
//! libfabric and recognises them in completions.
//!
//! Owns: the encoding of an operation (a send buffer, a receive buffer, or
//! a tracked write's token) into the `void *` context libfabric hands back.
//! Contexts are tokens, not pointers: nothing is ever dereferenced, so a
//! context a provider leaves out (shm's NULL) decodes to "not ours". Must
//! not: hold state or call libfabric.

use std::ffi::c_void;

// Op contexts are tokens, not pointers: kind in the low two bits (never 0,
// so NULL is never ours), an index or the caller's token above.
const KIND_SEND: usize = 1;
const KIND_RECV: usize = 2;
const KIND_WRITE: usize = 3;

/// The largest token a tracked write can carry.
pub const MAX_WRITE_TOKEN: u64 = (usize::MAX >> 2) as u64;

/// An operation of ours, as its context names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Op {
    Send(usize),
    Recv(usize),
    Write(u64),
}

/// The context to post `op` with: never NULL.
pub(super) fn encode(op: Op) -> *mut c_void {
    let v = match op {
        Op::Send(i) => (i << 2) | KIND_SEND,
        Op::Recv(i) => (i << 2) | KIND_RECV,
        Op::Write(t) => ((t as usize) << 2) | KIND_WRITE,
    };
    v as *mut c_void
}

/// The operation a completion's context names, or `None` when it is not
/// one of ours (NULL, or kind bits 0).
pub(super) fn decode(ctx: Option<usize>) -> Option<Op> {
    let v = ctx?;
    match v & 3 {
        KIND_SEND => Some(Op::Send(v >> 2)),
        KIND_RECV => Some(Op::Recv(v >> 2)),
        KIND_WRITE => Some(Op::Write((v >> 2) as u64)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_round_trip_and_null_is_not_ours() {
        for op in [
            Op::Send(0),
            Op::Send(63),
            Op::Recv(5),
            Op::Write(0),
            Op::Write(MAX_WRITE_TOKEN),
        ] {
            let ctx = encode(op) as usize;
            assert_ne!(ctx, 0);
            assert_eq!(decode(Some(ctx)), Some(op));
        }
        assert_eq!(decode(None), None);
        assert_eq!(decode(Some(4)), None, "kind bits 0 are not ours");
    }
}
