//! Delivery of events from the progress thread to the embedder: the published
//! failed and left sets, the embedder's callback, and the event queue.
//!
//! Owns: the embedder's callback, the gate that lets no callback start once
//! shutdown has begun, and what each event publishes before the embedder hears
//! of it. Must not: wait on the embedder (the queue never blocks; a callback is
//! the embedder's promise to return quickly), or let a panic of the embedder's
//! callback end the progress thread (it is caught and counted).
//!
//! It lives outside the progress loop's own state so that it survives a
//! panic of that loop: the final [`Event::Stopped`] still reaches the embedder.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

use crate::protocol;

use super::log::Logger;
use super::state::StopReason;
use super::{Callback, DetectorEvent, Event, PublishedState};

pub(super) struct Delivery {
    shared: Arc<PublishedState>,
    callback: Option<Callback>,
    /// The origin of the detector's clock.
    started: Instant,
    logger: Logger,
    /// Embedder callbacks that panicked (caught).
    pub(super) callback_panics: u64,
}

impl Delivery {
    pub(super) fn new(
        shared: Arc<PublishedState>,
        callback: Option<Callback>,
        started: Instant,
        logger: Logger,
    ) -> Delivery {
        Delivery {
            shared,
            callback,
            started,
            logger,
            callback_panics: 0,
        }
    }

    /// Publishes what a protocol event changes (the failed and left sets,
    /// this rank's exclusion), then hands it to the embedder.
    pub(super) fn protocol_event(&mut self, event: protocol::Event) {
        match &event {
            protocol::Event::Failed {
                rank,
                detector,
                cause,
                detail,
                ..
            } => {
                self.shared.failed.insert(*rank);
                self.logger.info(format_args!(
                    "rank {rank} failed ({}, declared by rank {detector})",
                    super::evidence::describe_failure(*cause, detail)
                ));
            }
            protocol::Event::Left { rank } => {
                self.shared.left.insert(*rank);
            }
            protocol::Event::SelfExcluded { by, why } => {
                self.shared.life.excluded(*by);
                match why {
                    protocol::Exclusion::Named => self.logger.warn(format_args!(
                        "this rank was declared failed (told by rank {by}); it stops participating"
                    )),
                    protocol::Exclusion::NoQuorum => self.logger.warn(format_args!(
                        "this rank's side of a partition holds no majority (rank {by}'s \
                         accusation found no quorum); it stops participating"
                    )),
                }
            }
            protocol::Event::SlowEmitter { rank, stalled_for } => {
                self.logger.info(format_args!(
                    "emitter {rank} is slow: its slot stood still for {stalled_for:?}"
                ));
            }
            protocol::Event::HostFailed { host, ranks } => {
                self.logger.info(format_args!(
                    "host {host} failed: ranks {ranks:?}, declared by this rank"
                ));
            }
            protocol::Event::ViewChange { id, failed, .. } => {
                self.logger.info(format_args!(
                    "view {id}: {} out ({})",
                    failed.len(),
                    crate::protocol::ranks::format_ranks(failed)
                ));
            }
            protocol::Event::Agreed {
                seq, flags, view, ..
            } => {
                self.logger.debug(format_args!(
                    "agreement {seq} decided: flags {flags:#x}, view {} with {} out",
                    view.id,
                    view.failed.len()
                ));
            }
            protocol::Event::AgreeAborted { seq, reason } => {
                self.logger.info(format_args!(
                    "agreement {seq} ends undecided: this rank {}",
                    reason.as_str()
                ));
            }
            protocol::Event::Payload { .. } => {}
        }
        self.hand_over(Event::from(event));
    }

    /// The progress thread ends for `reason`: publishes it, then hands the
    /// embedder the last event. Nothing if the detector had already ended (a
    /// leave or an exclusion is what it reports then).
    pub(super) fn stopped(&mut self, reason: StopReason) {
        self.logger.error(format_args!(
            "the detector stopped: {reason}; other ranks will declare this one failed"
        ));
        // A panic inside a callback is caught there; a panic elsewhere
        // leaves no callback running.
        self.shared.life.callback_returned();
        if self.shared.life.stopped(reason.clone()) {
            self.hand_over(Event::Stopped(reason));
        }
    }

    /// The embedder's callback (unless shutdown has begun), then the queue.
    fn hand_over(&mut self, event: Event) {
        let event = DetectorEvent {
            at: self.started.elapsed(),
            epoch: self.shared.failed.epoch(),
            event,
        };
        if let Some(callback) = self.callback.as_mut() {
            let life = &self.shared.life;
            if life.callback_starts(event.at) {
                let panicked = catch_unwind(AssertUnwindSafe(|| callback(&event))).is_err();
                life.callback_returned();
                if panicked {
                    self.callback_panics += 1;
                    self.logger
                        .error(format_args!("the embedder's event callback panicked"));
                }
            }
        }
        // A full queue counts the drop itself (`EventQueue::dropped`).
        let _ = self.shared.events.push(event);
    }
}
