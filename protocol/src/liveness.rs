//! The liveness probe's rule: what an answer to a plain TCP connection to
//! a peer's liveness port proves (`docs/design.md`
//! §4.5 "In-band detection", §4.11 "Primary partition"). One function, shared by the
//! runtime (which makes the connections), the simulator and the model
//! checker (which model them), so that all three judge alike.
//!
//! Owns: [`ProbeAnswer`] and [`evidence`]. Must not: make a connection or
//! read a clock (the runtime does both).
//!
//! Every rank listens on a small TCP port of its own, at its fabric
//! address's IP, published in the address exchange; the listener accepts
//! every connection from the job's hosts and greets it with one byte. So
//! a connection to it ends in one of these ways:
//!
//! - *refused* (`ECONNREFUSED`): the peer's kernel answered the SYN with a
//!   reset, as it does for a port nobody listens on. The host is up and the
//!   listener is gone, which happens when its process exits (the kernel
//!   closes its sockets). Proof.
//! - *greeted*: the process accepted and wrote its byte: it runs. No verdict
//!   (a refutation of nothing: the caller simply stops probing).
//! - *no answer*: no SYN-ACK (a cut link, a host lost whole), or a
//!   handshake that the kernel completed from its backlog but no greeting
//!   (the process is stopped, starved, or slow). Silence, which the
//!   Engine's timeout already covers: no verdict either.
//!
//! A stopped or slow process keeps its listening socket, whose handshakes
//! its kernel completes without it, so it is never refused: that is why a
//! refusal, and only a refusal, is proof.

use crate::Evidence;

/// How a liveness probe ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeAnswer {
    /// The peer's kernel refused the connection (`ECONNREFUSED`): nobody
    /// listens at the port.
    Refused,
    /// The peer's process accepted and greeted: it runs.
    Greeted,
    /// Nothing within the wait: no handshake (a cut, a lost host, an
    /// unreachable network), or a handshake without a greeting (a stopped
    /// or starved process), or any other error.
    NoAnswer,
}

/// What a probe's answer shows about the peer: proof of death for a
/// refusal, nothing otherwise (silence is the timeout's to judge).
pub fn evidence(answer: ProbeAnswer) -> Option<Evidence> {
    #[cfg(feature = "model-bugs")]
    if crate::model_bugs::on(crate::model_bugs::Bug::SilentProbeAsProof)
        && answer == ProbeAnswer::NoAnswer
    {
        return Some(Evidence::Proof);
    }
    match answer {
        ProbeAnswer::Refused => Some(Evidence::Proof),
        ProbeAnswer::Greeted | ProbeAnswer::NoAnswer => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refusal_is_proof() {
        assert_eq!(evidence(ProbeAnswer::Refused), Some(Evidence::Proof));
        assert_eq!(evidence(ProbeAnswer::Greeted), None);
        assert_eq!(evidence(ProbeAnswer::NoAnswer), None);
    }
}
