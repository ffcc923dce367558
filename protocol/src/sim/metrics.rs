//! What the simulator measures: per injected failure, who learned it when
//! and through how many hops and messages; in total, false reports,
//! exclusions, departures, warnings and messages by kind. Builds the
//! [`SimReport`] at the end of a run.
//!
//! Owns: [`Track`] (one per injected failure), the attribution of notice
//! copies to failures, the reading of host events (agreements and views go
//! to `agreements`), and the completion test that ends a run early. Must not: change what a rank does (it only
//! observes outputs), or iterate a hash map into a result.

use super::report::{FailureReport, SimReport, Totals};
use super::{EXCLUDED, FAULTY, Simulator, Status};
use crate::wire::{self, Kind, Message, Sealed};
use crate::{Cause, Event, Exclusion, Rank, Time};

/// Per injected failure.
pub(super) struct Track {
    pub(super) rank: Rank,
    pub(super) fault: &'static str,
    pub(super) injected_at: Time,
    pub(super) first_at: Option<Time>,
    pub(super) detector: Option<Rank>,
    pub(super) cause: Option<Cause>,
    pub(super) learned: Vec<u64>,
    pub(super) last_learned_at: Time,
    pub(super) max_hops: u16,
    pub(super) messages: u64,
    pub(super) bytes: u64,
}

impl Track {
    fn has_learned(&self, r: Rank) -> bool {
        self.learned[(r / 64) as usize] & (1 << (r % 64)) != 0
    }
}

pub(super) fn ms(t: Time) -> f64 {
    t.as_nanos() as f64 / 1e6
}

impl Simulator {
    /// Counts a notice copy against every injected failure it names. The
    /// copies of one broadcast step share their bytes: one is decoded.
    pub(super) fn attribute_notice(&mut self, to: Rank, message: &Sealed) {
        if self.tracks.is_empty() {
            return;
        }
        let cached = matches!(&self.notice_cache, Some((m, _)) if m.same_message(message));
        if !cached {
            let mut named = Vec::new();
            let bytes = message.to_vec();
            if let Ok((_, Message::Notice(n))) = wire::decode(&bytes, &self.keys, to, self.n) {
                for r in n.failed.iter() {
                    if let Some(&i) = self.track_of.get(&r) {
                        named.push(i);
                    }
                }
            }
            self.notice_cache = Some((message.clone(), named));
        }
        if let Some((_, named)) = &self.notice_cache {
            for &i in named {
                self.tracks[i].messages += 1;
                self.tracks[i].bytes += message.len() as u64;
            }
        }
    }

    pub(super) fn track(&mut self, r: Rank, label: &'static str) {
        self.state[r as usize].flags |= FAULTY;
        if self.track_of.contains_key(&r) {
            return;
        }
        self.track_of.insert(r, self.tracks.len());
        self.tracks.push(Track {
            rank: r,
            fault: label,
            injected_at: self.now,
            first_at: None,
            detector: None,
            cause: None,
            learned: vec![0; (self.n as usize).div_ceil(64)],
            last_learned_at: Time::ZERO,
            max_hops: 0,
            messages: 0,
            bytes: 0,
        });
        self.notice_cache = None;
    }

    pub(super) fn on_event(&mut self, reporter: Rank, ev: Event) {
        let now = self.now;
        match ev {
            Event::Failed {
                rank,
                detector,
                cause,
                hops,
                ..
            } => {
                let healthy_reporter =
                    self.state[reporter as usize].flags & (FAULTY | EXCLUDED) == 0;
                if !healthy_reporter {
                    self.reports_by_faulty += 1;
                }
                if let Some(&i) = self.track_of.get(&rank) {
                    let t = &mut self.tracks[i];
                    if t.first_at.is_none()
                        || (t.cause == Some(Cause::Notice) && cause != Cause::Notice)
                    {
                        t.first_at = t.first_at.or(Some(now));
                        t.detector = Some(detector);
                        t.cause = Some(cause);
                    }
                    let (w, b) = ((reporter / 64) as usize, reporter % 64);
                    if t.learned[w] & (1 << b) == 0 {
                        t.learned[w] |= 1 << b;
                        if healthy_reporter {
                            t.last_learned_at = t.last_learned_at.max(now);
                            t.max_hops = t.max_hops.max(hops);
                        }
                    }
                } else {
                    // A rank never faulted, named failed: a false report,
                    // whoever raised it (a cut-off minority naming the
                    // primary side's ranks included).
                    self.false_reports += 1;
                    self.falsely_declared.insert(rank);
                    if !healthy_reporter {
                        self.false_reports_by_faulty += 1;
                    }
                    if self.false_samples.len() < 32 {
                        self.false_samples.push((reporter, rank, ms(now)));
                    }
                }
            }
            Event::SelfExcluded { why, .. } => {
                self.state[reporter as usize].flags |= EXCLUDED;
                self.self_excluded.push(reporter);
                self.self_excluded_at.push(ms(now));
                if why == Exclusion::NoQuorum {
                    self.no_quorum_excluded.push(reporter);
                }
                // The process stops participating: the slot model stops its beats.
                self.slots.stop(reporter, now);
            }
            Event::Left { .. } => self.left_events += 1,
            Event::SlowEmitter { .. } => self.slow_warnings += 1,
            Event::HostFailed { .. } => self.host_failed_events += 1,
            Event::Payload { origin, seq, .. } => {
                self.payloads += 1;
                self.payload_log
                    .delivered(reporter, origin, seq, now, self.n);
            }
            Event::ViewChange { id, failed, .. } => self.on_view(reporter, id, failed),
            Event::Agreed {
                seq,
                flags,
                view,
                hops,
            } => self.on_agreed(reporter, seq, flags, view, hops),
            Event::AgreeAborted { seq, .. } => self.on_agree_aborted(seq),
        }
    }

    /// A rank that should know every failure: never faulted, not excluded,
    /// not leaving, running.
    pub(super) fn is_live(&self, r: Rank) -> bool {
        self.state[r as usize].flags == 0 && self.state[r as usize].status == Status::Up
    }

    pub(super) fn missed(&self, t: &Track) -> u64 {
        (0..self.n)
            .filter(|&r| self.is_live(r) && !t.has_learned(r))
            .count() as u64
    }

    /// Every live rank knows every injected failure, has the results of
    /// its agreements and a view naming every rank it knows gone.
    pub(super) fn complete(&self) -> bool {
        self.tracks.iter().all(|t| self.missed(t) == 0) && self.agreements_settled()
    }

    pub(super) fn report(&self, end: Time) -> SimReport {
        let mut failures = Vec::new();
        let mut missed_total = 0;
        for t in &self.tracks {
            let missed = self.missed(t);
            missed_total += missed;
            failures.push(FailureReport {
                rank: t.rank,
                fault: t.fault.to_owned(),
                injected_at_ms: ms(t.injected_at),
                cause: t.cause,
                detector: t.detector,
                detected_at_ms: t.first_at.map(ms),
                all_notified_at_ms: (missed == 0 && t.first_at.is_some())
                    .then(|| ms(t.last_learned_at.max(t.first_at.unwrap_or(Time::ZERO)))),
                missed,
                max_hops: Some(t.max_hops),
                messages: Some(t.messages),
                bytes: Some(t.bytes),
                notified: None,
                exited_at_ms: None,
                learned_at_ms: None,
            });
        }
        let messages = self
            .by_kind
            .iter()
            .enumerate()
            .filter(|(_, v)| v.count > 0)
            .map(|(i, v)| {
                (
                    Kind::ALL
                        .get(i)
                        .map_or("unknown", |k| k.as_str())
                        .to_owned(),
                    v.clone(),
                )
            })
            .collect();
        let live_count = (0..self.n).filter(|&r| self.is_live(r)).count() as u32;
        let payloads = self.payload_log.report(|r| self.is_live(r), live_count);
        SimReport {
            totals: Totals {
                ranks: self.n,
                hosts: self.cfg.hosts,
                bcast: self.cfg.engine.bcast.as_str().to_owned(),
                seed: self.cfg.seed,
                false_reports: self.falsely_declared.len() as u64,
                false_report_events: self.false_reports,
                missed_notifications: missed_total,
                reports_by_faulty_ranks: self.reports_by_faulty,
                false_reports_by_faulty_ranks: self.false_reports_by_faulty,
                self_excluded: self.self_excluded.clone(),
                self_excluded_at_ms: self.self_excluded_at.clone(),
                no_quorum_exclusions: self.no_quorum_excluded.clone(),
                left_events: self.left_events,
                slow_emitter_warnings: self.slow_warnings,
                payloads_delivered: self.payloads,
                payload_duplicate_deliveries: self.payload_log.duplicates,
                payloads_out_of_order: self.payload_log.out_of_order,
                payloads_not_all_or_none: payloads.iter().filter(|p| !p.all_or_none()).count()
                    as u64,
                dropped_by_network: self.dropped,
                never_left: self.never_left,
                max_notices_per_link: self
                    .cfg
                    .track_links
                    .then(|| self.link_notices.values().copied().max().unwrap_or(0)),
                messages,
                events: self.events,
                local: self.cfg.local,
                fabric_heartbeats_per_s: self.heartbeat_streams() as f64
                    / self.cfg.engine.period.as_secs_f64(),
                messages_per_failure: (!self.tracks.is_empty()).then(|| {
                    self.by_kind[Kind::Notice.index()].count as f64 / self.tracks.len() as f64
                }),
                host_failed_events: self.host_failed_events,
                virtual_end_ms: ms(end),
                wall_s: 0.0,
                peak_rss_mb: 0.0,
            },
            false_report_samples: self.false_samples.clone(),
            failures,
            payloads,
            agreements: self.agreement_reports(),
            views: self.view_reports(),
        }
    }
}
