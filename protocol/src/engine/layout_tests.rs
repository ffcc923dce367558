//! The Engine's layout: the fields a duplicate notice reads sit in its
//! first cache lines (`engine/mod.rs` keeps them first).

use super::*;
use std::mem::{offset_of, size_of};

/// The fields a duplicate notice reads (decode and its tag with the
/// keys, the replay window, trust checks, `learn`, the counters, the
/// `poll_output` and the `next_deadline` that follow) lie in the Engine's first 320
/// bytes: 5 cache lines (6 if the Engine is not line-aligned). rustc's
/// own field order (no `repr(C)`) spreads them over 8. A field added in
/// front of them, or a reorder, fails here.
#[test]
fn a_duplicate_notice_reads_only_the_first_five_cache_lines() {
    let stats = offset_of!(Engine, stats);
    let read = [
        ("participation", offset_of!(Engine, participation), 1),
        ("stream_dirty", offset_of!(Engine, stream_dirty), 1),
        ("me", offset_of!(Engine, me), size_of::<Rank>()),
        ("my_pos", offset_of!(Engine, my_pos), size_of::<u32>()),
        ("ring", offset_of!(Engine, ring), size_of::<Arc<Ring>>()),
        (
            "sealing.keys",
            offset_of!(Engine, sealing) + offset_of!(Sealing, keys),
            size_of::<Arc<JobKeys>>(),
        ),
        (
            "sealing.links",
            offset_of!(Engine, sealing) + offset_of!(Sealing, links),
            size_of::<PeerLinks>(),
        ),
        ("failed", offset_of!(Engine, failed), size_of::<RankSet>()),
        ("left", offset_of!(Engine, left), size_of::<RankSet>()),
        (
            "pending_write",
            offset_of!(Engine, pending_write),
            size_of::<Option<(Rank, u16, u64)>>(),
        ),
        (
            "out",
            offset_of!(Engine, out),
            size_of::<VecDeque<Output>>(),
        ),
        (
            "fanouts",
            offset_of!(Engine, fanouts),
            size_of::<VecDeque<Fanout>>(),
        ),
        (
            "timers (next_deadline)",
            offset_of!(Engine, timers),
            size_of::<TimerTable>(),
        ),
        (
            "stats.messages.received[notice]",
            stats
                + offset_of!(Stats, messages)
                + offset_of!(MessageStats, received)
                + 8 * Kind::Notice.index(),
            size_of::<u64>(),
        ),
        (
            "stats.messages.duplicate_notices",
            stats + offset_of!(Stats, messages) + offset_of!(MessageStats, duplicate_notices),
            size_of::<u64>(),
        ),
    ];
    for (name, offset, size) in read {
        assert!(
            offset + size <= 5 * 64,
            "{name} ends at byte {} of the Engine, past its first 5 cache lines",
            offset + size
        );
    }
}
