//! The liveness port's part of a turn (`FFD_LIVENESS`, `../liveness.rs`,
//! `docs/design.md` §4.5 "In-band detection"): its sockets' events and a
//! probe's answer handed to the Engine, and the watch kept on the
//! Engine's fabric emitter.
//!
//! Owns: turning a refused probe into an in-band error with proof. Must
//! not: judge an answer itself (`ffd_protocol::liveness::evidence` does).

use std::time::Instant;

use crate::protocol::{FabricSaid, TransportErrorKind};

use super::Core;

impl Core<'_> {
    /// Whether the liveness sockets were last read a check interval ago
    /// or more.
    pub(super) fn liveness_overdue(&self) -> bool {
        self.liveness
            .as_ref()
            .is_some_and(|l| l.read_since() >= self.timeout / 4)
    }

    /// The liveness sockets' events and a probe's time running out: a
    /// refused probe is proof, to the Engine at once (`liveness.rs`).
    pub(super) fn take_liveness(&mut self, woken: bool) {
        let Some(l) = self.liveness.as_mut() else {
            return;
        };
        l.take(woken, &mut self.answers);
        if self.answers.is_empty() {
            return;
        }
        self.counters.liveness = l.counters;
        let answers = std::mem::take(&mut self.answers);
        for a in &answers {
            let why = if a.why.is_empty() { "" } else { " (" };
            let end = if a.why.is_empty() { "" } else { ")" };
            self.logger.info(format_args!(
                "liveness probe of rank {} after {}: {:?}{why}{}{end}",
                a.rank, a.after, a.answer, a.why
            ));
            if let Some(evidence) = crate::protocol::liveness::evidence(a.answer) {
                let now = self.now();
                self.transport_error(
                    now,
                    a.rank,
                    TransportErrorKind::LivenessProbe,
                    evidence,
                    FabricSaid::ProbeRefused,
                );
            }
        }
        self.answers = answers;
        self.answers.clear();
    }

    /// The watch follows the Engine's fabric emitter (none for one of this
    /// rank's own host: its exit is seen here at once).
    pub(super) fn rewatch(&mut self) {
        let Some(l) = self.liveness.as_mut() else {
            return;
        };
        let me = self.engine.me();
        let emitter = self.engine.emitter().filter(|&e| {
            e != me
                && self
                    .engine
                    .hosts()
                    .is_none_or(|h| h.host_of(e) != h.host_of(me))
        });
        l.watch(emitter, Instant::now, self.timeout);
        self.counters.liveness = l.counters;
    }
}
