//! Test-only (feature `model-bugs`, never in the library): switches that
//! put known, fixed bugs back into the Engine (or into a rule the
//! drivers share with it, `liveness::evidence`), so that a test can show
//! the model checker (`examples/model`) finds each one.
//!
//! Owns: the switches, one process-wide set (the checker explores on
//! threads of its own). Must not: be compiled without the feature (every
//! place that reads a switch is behind it), or be turned on outside a
//! test of the checker: while one is on, every Engine of the process
//! runs with that bug.

use std::sync::atomic::{AtomicU32, Ordering};

/// A known bug, fixed, that a switch puts back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// A voter's subtree records a vote from any rank (not only those it
    /// forwarded the flood to) and counts its children without the cap
    /// at N (test
    /// `a_voter_counts_only_the_ranks_it_forwarded_to_and_never_above_n`).
    UncappedVotes,
    /// A payload is forwarded only by its origin: a relay delivers it and
    /// sends it on to nobody.
    OriginOnlyForwards,
    /// A rank raises the next view from its own gone set when its batching
    /// window ends, before (without) the view's agreement deciding.
    ViewBeforeDecision,
    /// A ballot that expires with no `Outcome` seen is dropped, not kept
    /// spent: a straggling copy of its round makes the rank join it again
    /// under a second flood parent, and its subtree is counted twice (test
    /// `a_delayed_flood_does_not_count_a_side_twice`).
    ForgottenBallots,
    /// The liveness probe's rule (`liveness::evidence`) takes a probe that
    /// got no answer (a cut link, or a stopped process whose kernel
    /// completed the handshake without it) for a refusal: proof of death
    /// about a rank that may be alive.
    SilentProbeAsProof,
}

impl Bug {
    pub const ALL: [Bug; 5] = [
        Bug::UncappedVotes,
        Bug::OriginOnlyForwards,
        Bug::ViewBeforeDecision,
        Bug::ForgottenBallots,
        Bug::SilentProbeAsProof,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Bug::UncappedVotes => "uncapped-votes",
            Bug::OriginOnlyForwards => "origin-only-forwards",
            Bug::ViewBeforeDecision => "view-before-decision",
            Bug::ForgottenBallots => "forgotten-ballots",
            Bug::SilentProbeAsProof => "silent-probe-as-proof",
        }
    }

    fn bit(self) -> u32 {
        1 << self as u32
    }
}

static ON: AtomicU32 = AtomicU32::new(0);

/// Puts exactly `bugs` back (none: every switch off), for every Engine of
/// this process.
pub fn set(bugs: &[Bug]) {
    let bits = bugs.iter().fold(0, |b, bug| b | bug.bit());
    ON.store(bits, Ordering::SeqCst);
}

/// Whether `bug` is back.
pub(crate) fn on(bug: Bug) -> bool {
    ON.load(Ordering::Relaxed) & bug.bit() != 0
}
