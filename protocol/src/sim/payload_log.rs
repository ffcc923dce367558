//! What the simulator records of application payloads: for each payload
//! broadcast, which ranks delivered it; for each rank and origin, whether
//! deliveries came once each and in the origin's order. Feeds the report's
//! `payloads` section ([`PayloadReport`]).
//!
//! Owns: [`PayloadLog`]. Must not: change what a rank does (it only reads
//! `Event::Payload` and the broadcasts the fault schedule makes), or
//! iterate a hash map into a result.

use std::collections::BTreeMap;

use super::metrics::ms;
use super::report::PayloadReport;
use crate::{Rank, Time};

/// One payload broadcast (or seen delivered without its broadcast, which
/// a driver that broadcasts outside the fault schedule may cause).
struct Track {
    origin: Rank,
    seq: u64,
    broadcast_at: Option<Time>,
    /// Bit r: rank r delivered it.
    delivered: Vec<u64>,
    delivered_by: u32,
    /// The latest delivery.
    last_at: Option<Time>,
}

/// The payloads of a run and their deliveries.
#[derive(Default)]
pub(super) struct PayloadLog {
    tracks: Vec<Track>,
    index: BTreeMap<(Rank, u64), usize>,
    /// Per origin, per rank: the last sequence number delivered (0: none).
    last: BTreeMap<Rank, Vec<u64>>,
    /// Deliveries of a payload a rank had delivered before.
    pub(super) duplicates: u64,
    /// Deliveries that were not the one after the rank's previous one of
    /// that origin (a gap or a reordering).
    pub(super) out_of_order: u64,
}

impl PayloadLog {
    fn track(&mut self, origin: Rank, seq: u64, n: u32) -> &mut Track {
        let next = self.tracks.len();
        let i = *self.index.entry((origin, seq)).or_insert(next);
        if i == next {
            self.tracks.push(Track {
                origin,
                seq,
                broadcast_at: None,
                delivered: vec![0; (n as usize).div_ceil(64)],
                delivered_by: 0,
                last_at: None,
            });
        }
        &mut self.tracks[i]
    }

    /// `origin` broadcast its payload `seq` at `at`.
    pub(super) fn broadcast(&mut self, origin: Rank, seq: u64, at: Time, n: u32) {
        self.track(origin, seq, n).broadcast_at = Some(at);
    }

    /// Rank `rank` delivered `origin`'s payload `seq` at `at`.
    pub(super) fn delivered(&mut self, rank: Rank, origin: Rank, seq: u64, at: Time, n: u32) {
        let last = self
            .last
            .entry(origin)
            .or_insert_with(|| vec![0; n as usize]);
        if seq != last[rank as usize] + 1 {
            self.out_of_order += 1;
        }
        last[rank as usize] = last[rank as usize].max(seq);
        let t = self.track(origin, seq, n);
        t.last_at = Some(at);
        let (w, b) = ((rank / 64) as usize, rank % 64);
        if t.delivered[w] & (1 << b) != 0 {
            self.duplicates += 1;
        } else {
            t.delivered[w] |= 1 << b;
            t.delivered_by += 1;
        }
    }

    /// One line per payload, in order of first sight; `live` says which
    /// ranks are live at the end, `live_count` how many there are.
    pub(super) fn report(
        &self,
        live: impl Fn(Rank) -> bool,
        live_count: u32,
    ) -> Vec<PayloadReport> {
        self.tracks
            .iter()
            .map(|t| {
                let mut by_live = 0;
                for (w, &bits) in t.delivered.iter().enumerate() {
                    let mut bits = bits;
                    while bits != 0 {
                        let r = (w * 64) as Rank + bits.trailing_zeros();
                        bits &= bits - 1;
                        if live(r) {
                            by_live += 1;
                        }
                    }
                }
                PayloadReport {
                    origin: t.origin,
                    seq: t.seq,
                    broadcast_at_ms: t.broadcast_at.map(ms),
                    delivered_by: t.delivered_by,
                    live_at_end: live_count,
                    delivered_by_live: by_live,
                    last_delivered_at_ms: t.last_at.map(ms),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_are_counted_once_and_checked_for_order() {
        let mut log = PayloadLog::default();
        log.broadcast(2, 1, Time::from_nanos(5_000_000), 130);
        log.broadcast(2, 2, Time::from_nanos(6_000_000), 130);
        let t = |ms: u64| Time::from_nanos(ms * 1_000_000);
        for r in [0, 2, 64, 129] {
            log.delivered(r, 2, 1, t(5), 130);
        }
        log.delivered(64, 2, 1, t(7), 130);
        log.delivered(64, 2, 2, t(8), 130);
        log.delivered(0, 2, 3, t(9), 130);
        assert_eq!((log.duplicates, log.out_of_order), (1, 2));
        let live = |r: Rank| r != 129;
        let report = log.report(live, 3);
        assert_eq!(report.len(), 3);
        let first = &report[0];
        assert_eq!(
            (first.origin, first.seq, first.broadcast_at_ms),
            (2, 1, Some(5.0))
        );
        assert_eq!(
            (
                first.delivered_by,
                first.live_at_end,
                first.delivered_by_live
            ),
            (4, 3, 3)
        );
        assert_eq!(first.last_delivered_at_ms, Some(7.0));
        assert_eq!(
            (report[1].delivered_by, report[1].delivered_by_live),
            (1, 1)
        );
        assert_eq!(report[2].broadcast_at_ms, None, "seen, never broadcast");
    }
}
