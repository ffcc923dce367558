//! What a transport error shows about the peer: proof of death, or only
//! silence (`docs/design.md` §4.11 "Primary partition" and §7 "Fabric facts this rests on" hold the table measured here).
//!
//! Owns: the classification of error completions and failed posts by the
//! error numbers libfabric 1.17 reported on `tcp;ofi_rxm` and `sockets`
//! after `kill -9` of the peer versus a network cut without a reset, the
//! names of those numbers, and the words a host reads for a failure's
//! evidence ([`describe_failure`]) and for an exclusion. Must not: decide
//! what the evidence means for the peer (the Engine does), or call
//! libfabric.
//!
//! Measured on this machine (loopback and two network namespaces on a
//! bridge, libfabric 1.17):
//!
//! | provider | event | what the fabric says | evidence |
//! |---|---|---|---|
//! | `tcp;ofi_rxm` | peer killed, heartbeat write | completion `FI_ECANCELED`, provider `ENOTCONN` | proof |
//! | `tcp;ofi_rxm` | peer killed, send | completion `FI_ENOTCONN`, provider `EPIPE` | proof |
//! | `tcp;ofi_rxm` | peer killed, later posts (a new connection) | `-FI_EAGAIN` run (unreachable verdict after `FFD_EAGAIN_LIMIT`) | silence |
//! | `sockets` | peer killed, write or send | completion `FI_EIO`, provider `-EIO` | proof |
//! | `sockets` | peer killed, later posts | `-FI_ENOENT` run | silence |
//! | `tcp;ofi_rxm` | link cut, no reset | nothing for ~22 s, then a `-FI_EAGAIN` run (send queue full) | silence |
//! | `sockets` | link cut, no reset | nothing (≥ 25 s) | silence |
//! | liveness port (TCP) | peer killed, host up | the watch ends, the probe is refused (`ECONNREFUSED`) | proof |
//! | liveness port | peer stopped or starved | handshake from the kernel's backlog, no greeting | no verdict |
//! | liveness port | link cut, host lost | no answer | no verdict |
//!
//! The liveness port's answers are judged by `ffd_protocol::liveness`
//! (`src/runtime/liveness.rs` makes the connections): only a refusal is
//! proof, and a stopped process's kernel never refuses.
//!
//! A connection refused or reset by the peer's kernel (`ECONNREFUSED`,
//! `ECONNRESET`, `EPIPE`, `ENOTCONN`, as the error or, under
//! `FI_ECANCELED`, as the provider's reason) can only come from a live
//! host whose process is gone: proof. A cut gives no error at all, or a
//! refusal run, or a time-out (`ETIMEDOUT`, `EHOSTUNREACH`): silence, as
//! is anything not in the table.

use crate::protocol::{Cause, Evidence, Exclusion, FabricSaid, FailureDetail};

/// Errors only the peer's kernel gives: it refused or reset the
/// connection, so the host is up and the process is gone.
const REFUSED_OR_RESET: [i32; 4] = [
    libc::ECONNREFUSED,
    libc::ECONNRESET,
    libc::EPIPE,
    libc::ENOTCONN,
];

/// The evidence of an error completion: libfabric's `err` and the
/// provider's errno (either sign).
pub fn classify_completion(err: i32, prov_errno: i32) -> Evidence {
    let (err, prov) = (err.saturating_abs(), prov_errno.saturating_abs());
    if REFUSED_OR_RESET.contains(&err)
        // tcp;ofi_rxm: a write cancelled because the peer reset the connection.
        || (err == libc::ECANCELED && REFUSED_OR_RESET.contains(&prov))
        // sockets: both numbers EIO after the peer was killed.
        || (err == libc::EIO && prov == libc::EIO)
    {
        Evidence::Proof
    } else {
        Evidence::Silence
    }
}

/// The evidence of a post that failed at once with `err` (not a refusal:
/// refusal runs are silence).
pub fn classify_post(err: i32) -> Evidence {
    if REFUSED_OR_RESET.contains(&err.saturating_abs()) {
        Evidence::Proof
    } else {
        Evidence::Silence
    }
}

/// The name of an error number (either sign), e.g. `ECANCELED`, or `None`.
pub fn errno_name(errno: i32) -> Option<&'static str> {
    let names: [(i32, &str); 21] = [
        (libc::EPERM, "EPERM"),
        (libc::ENOENT, "ENOENT"),
        (libc::EIO, "EIO"),
        (libc::EAGAIN, "EAGAIN"),
        (libc::ENOMEM, "ENOMEM"),
        (libc::EACCES, "EACCES"),
        (libc::EBUSY, "EBUSY"),
        (libc::EINVAL, "EINVAL"),
        (libc::EPIPE, "EPIPE"),
        (libc::ENETDOWN, "ENETDOWN"),
        (libc::ENETUNREACH, "ENETUNREACH"),
        (libc::ECONNABORTED, "ECONNABORTED"),
        (libc::ECONNRESET, "ECONNRESET"),
        (libc::ENOBUFS, "ENOBUFS"),
        (libc::ENOTCONN, "ENOTCONN"),
        (libc::ESHUTDOWN, "ESHUTDOWN"),
        (libc::ETIMEDOUT, "ETIMEDOUT"),
        (libc::ECONNREFUSED, "ECONNREFUSED"),
        (libc::EHOSTDOWN, "EHOSTDOWN"),
        (libc::EHOSTUNREACH, "EHOSTUNREACH"),
        (libc::ECANCELED, "ECANCELED"),
    ];
    let errno = errno.saturating_abs();
    names
        .iter()
        .find(|(n, _)| *n == errno)
        .map(|(_, name)| *name)
}

fn fi_name(err: i32) -> String {
    errno_name(err).map_or_else(|| format!("error {err}"), |n| format!("FI_{n}"))
}

fn os_name(errno: i32) -> String {
    errno_name(errno).map_or_else(
        || format!("errno {}", errno.saturating_abs()),
        str::to_owned,
    )
}

/// What the fabric said, in words: `error completion FI_ECANCELED/ENOTCONN`,
/// `post failed FI_ECONNREFUSED`, `refused for 31 ms`; `None` when it said
/// nothing.
pub fn describe_said(said: &FabricSaid) -> Option<String> {
    match *said {
        FabricSaid::Completion { err, prov_errno } => Some(format!(
            "error completion {}/{}",
            fi_name(err),
            os_name(prov_errno)
        )),
        FabricSaid::Post { err } => Some(format!("post failed {}", fi_name(err))),
        FabricSaid::Refused { run } => Some(format!("refused for {} ms", run.as_millis())),
        FabricSaid::DeadProcess => Some("error from a dead process".to_owned()),
        FabricSaid::ProbeRefused => Some("liveness probe refused (ECONNREFUSED)".to_owned()),
        FabricSaid::Nothing => None,
    }
}

/// A failure's cause and evidence in words, as the agent's JSON and
/// `ffd run` show it: `in-band, error completion FI_ECANCELED/ENOTCONN:
/// proof`, `in-band, refused for 31 ms: silence confirmed by 6 of 8 live
/// ranks`, `timeout: silence declared at once`, `timeout: stopped (the
/// kernel's word), declared at once`, `notice`.
pub fn describe_failure(cause: Cause, detail: &FailureDetail) -> String {
    let cause = match cause {
        Cause::InBand => "in-band",
        other => other.as_str(),
    };
    let said = |s: &FabricSaid| describe_said(s).map_or_else(String::new, |t| format!(", {t}"));
    match detail {
        FailureDetail::Learned => cause.to_owned(),
        FailureDetail::Proof { said: s } => format!("{cause}{}: proof", said(s)),
        FailureDetail::Stopped => format!("{cause}: stopped (the kernel's word), declared at once"),
        FailureDetail::Silence {
            said: s,
            quorum: None,
        } => format!("{cause}{}: silence, declared at once", said(s)),
        FailureDetail::Silence {
            said: s,
            quorum: Some(q),
        } => format!(
            "{cause}{}: silence, confirmed by {} of {} live ranks{}",
            said(s),
            q.votes,
            q.live,
            if q.tiebreak {
                " (an exact half holding the lowest live rank)"
            } else {
                ""
            }
        ),
    }
}

/// Why this rank was excluded, in words.
pub fn describe_exclusion(why: Exclusion) -> &'static str {
    match why {
        Exclusion::Named => "declared failed by another rank",
        Exclusion::NoQuorum => "its side of a partition holds no majority",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Confirmation;
    use std::time::Duration;

    #[test]
    fn what_a_kill_gives_is_proof_and_what_a_cut_gives_is_silence() {
        // Measured after kill -9 (see the module's table).
        assert_eq!(
            classify_completion(libc::ECANCELED, libc::ENOTCONN),
            Evidence::Proof
        );
        assert_eq!(
            classify_completion(libc::ENOTCONN, libc::EPIPE),
            Evidence::Proof
        );
        assert_eq!(classify_completion(libc::EIO, -libc::EIO), Evidence::Proof);
        assert_eq!(classify_completion(-libc::ECONNREFUSED, 0), Evidence::Proof);
        assert_eq!(classify_post(-libc::ECONNRESET), Evidence::Proof);
        // A cut: time-outs, unreachable hosts, anything unclassified.
        assert_eq!(
            classify_completion(libc::ECANCELED, libc::ETIMEDOUT),
            Evidence::Silence
        );
        assert_eq!(classify_completion(libc::ETIMEDOUT, 0), Evidence::Silence);
        assert_eq!(
            classify_completion(libc::EHOSTUNREACH, libc::EHOSTUNREACH),
            Evidence::Silence
        );
        assert_eq!(classify_completion(libc::EIO, 0), Evidence::Silence);
        assert_eq!(classify_completion(256, 0), Evidence::Silence);
        assert_eq!(classify_post(libc::EAGAIN), Evidence::Silence);
        assert_eq!(classify_completion(i32::MIN, i32::MIN), Evidence::Silence);
    }

    #[test]
    fn failures_read_as_cause_what_the_fabric_said_and_evidence() {
        let proof = FailureDetail::Proof {
            said: FabricSaid::Completion {
                err: libc::ECANCELED,
                prov_errno: libc::EPIPE,
            },
        };
        assert_eq!(
            describe_failure(Cause::InBand, &proof),
            "in-band, error completion FI_ECANCELED/EPIPE: proof"
        );
        let refused = FailureDetail::Silence {
            said: FabricSaid::Refused {
                run: Duration::from_micros(31_400),
            },
            quorum: Some(Confirmation {
                votes: 6,
                live: 8,
                tiebreak: false,
            }),
        };
        assert_eq!(
            describe_failure(Cause::InBand, &refused),
            "in-band, refused for 31 ms: silence, confirmed by 6 of 8 live ranks"
        );
        let off = FailureDetail::Silence {
            said: FabricSaid::Nothing,
            quorum: None,
        };
        assert_eq!(
            describe_failure(Cause::Timeout, &off),
            "timeout: silence, declared at once"
        );
        assert_eq!(
            describe_failure(Cause::Timeout, &FailureDetail::Stopped),
            "timeout: stopped (the kernel's word), declared at once"
        );
        assert_eq!(
            describe_failure(Cause::Notice, &FailureDetail::Learned),
            "notice"
        );
        assert_eq!(
            describe_said(&FabricSaid::Completion {
                err: 999,
                prov_errno: -7777
            })
            .unwrap(),
            "error completion error 999/errno 7777"
        );
        assert_eq!(
            describe_exclusion(Exclusion::NoQuorum),
            "its side of a partition holds no majority"
        );
    }
}
