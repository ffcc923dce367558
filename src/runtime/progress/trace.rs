//! The agreement trace (`FFD_LOG=debug`): one line per step of an
//! agreement on this rank, stamped with `CLOCK_MONOTONIC` in microseconds,
//! so that the lines of every rank of one machine (its network namespaces
//! too: they share the clock) can be merged into each agreement's path:
//! the embedder's call taken by the progress thread (and how long after it
//! was made), each `AgreeUp`/`AgreeDown` sent and received, the decision.
//! `benches/agree_trace.py` merges them.
//!
//! Owns: those lines. Must not: cost anything below `debug` (one level
//! check), or be read by a program as an interface: the words may change.

use std::time::Instant;

use crate::config::LogLevel;
use crate::node::monotonic_ns;
use crate::protocol::Event;
use crate::protocol::wire::{Kind, peek_kind};

use super::super::log::Logger;

fn now_us() -> u64 {
    monotonic_ns() / 1000
}

/// The progress thread took this rank's call of agreement `seq`, made at
/// `called` on the embedder's thread.
pub(super) fn call(logger: &Logger, seq: u64, called: Instant) {
    if logger.enabled(LogLevel::Debug) {
        let waited = called.elapsed().as_micros();
        logger.debug(format_args!(
            "agreement trace t={} call {seq} taken {waited} us after it was made",
            now_us()
        ));
    }
}

/// An agreement message (`way`: "to" or "from" `peer`); other kinds are
/// not traced.
pub(super) fn message(logger: &Logger, way: &str, peer: Option<u64>, bytes: &[u8]) {
    if !logger.enabled(LogLevel::Debug) {
        return;
    }
    if let Some(kind) = traced_kind(bytes) {
        let peer = peer.map_or_else(|| "?".to_owned(), |p| p.to_string());
        logger.debug(format_args!(
            "agreement trace t={} {kind} {way} {peer}",
            now_us()
        ));
    }
}

/// The kind's name if `bytes` are an agreement message.
fn traced_kind(bytes: &[u8]) -> Option<&'static str> {
    match peek_kind(bytes)? {
        kind @ (Kind::AgreeUp | Kind::AgreeDown) => Some(kind.as_str()),
        _ => None,
    }
}

/// A user agreement decided here (raised for the embedder).
pub(super) fn event(logger: &Logger, event: &Event) {
    if let Event::Agreed { seq, hops, .. } = event {
        if logger.enabled(LogLevel::Debug) {
            logger.debug(format_args!(
                "agreement trace t={} decided {seq} hops {hops}",
                now_us()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::agreement::Value;
    use crate::protocol::wire::{AgreementId, Encoder};

    /// Agreement messages are traced under their kind's name (the words
    /// benches/agree_trace.py reads); other kinds and garbage are not.
    #[test]
    fn only_agreement_messages_are_traced() {
        let enc = Encoder::new(1, 0);
        let value = Value::new(u64::MAX, &[3]);
        let id = AgreementId::User(1);
        let up = enc.agree_up(id, 1, 0, &value, None);
        let down = enc.agree_down(id, 2, 0, &value);
        assert_eq!(traced_kind(&up), Some("agree_up"));
        assert_eq!(traced_kind(&down), Some("agree_down"));
        assert_eq!(traced_kind(&enc.notice(0, 0, &[3], &[])), None);
        assert_eq!(traced_kind(&[]), None);
    }
}
