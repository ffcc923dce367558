//! What carries this rank's messages and heartbeats beyond its host: the
//! detector's fabric endpoint, or nothing at all in a one-host job.
//!
//! Owns: the endpoint and its address vector once start-up hands them
//! over, this rank's slot page (registered with the fabric, or plain
//! memory when there is none), and the progress thread's idle wait.
//! Must not: judge (a refusal or error goes back to the caller as the
//! endpoint gives it), or send anything when there is no endpoint.
//!
//! A job whose ranks all share one host and can all use its mailboxes
//! (`FFD_LOCAL=auto` with `futex_waitv`: `JobView::one_host_by_mail`)
//! opens no endpoint (`docs/design.md` §5.4 "What the authentication stops"):
//! the node segment carries every message, the exit words and counters
//! every verdict, and no socket of libfabric listens. Then
//! [`Transport::Node`] sleeps on the wake fd alone, reads no completion
//! queue, and refuses a send: no code path should make one (every rank
//! is a rank of this host, whose messages go through its mailbox), so
//! one that does is counted, said as an error by the caller, and dropped
//! — never evidence against a peer.

#![forbid(unsafe_code)]

use std::os::fd::BorrowedFd;
use std::time::Duration;

use crate::fabric::{
    AddressVector, Completion, Endpoint, FabricError, FiAddr, RemoteRegion, SlotPage, Waited,
};

use super::SlotRegion;

/// What the provider and domain read as in a job with no endpoint
/// ([`Detector::fabric`](super::Detector::fabric), stats, logs).
pub const NO_FABRIC_PROVIDER: &str = "none (one host: node segment)";
/// The domain of a job with no endpoint.
pub const NO_FABRIC_DOMAIN: &str = "none";

/// The detector's fabric resources, or none.
pub(super) enum Transport {
    /// Every rank shares this host: no endpoint.
    Node {
        /// Sends and heartbeat writes refused: a bug if ever non-zero.
        refused: u64,
    },
    Fabric(Box<Fabric>),
}

/// The endpoint and its address vector.
pub(super) struct Fabric {
    pub endpoint: Endpoint,
    /// Declared after the endpoint so it closes after it.
    pub _av: AddressVector,
}

/// Why [`Transport::Node`] refused a send: not a fabric error, no
/// evidence against anyone.
pub(super) const NO_ENDPOINT: &str = "no fabric endpoint: every rank of this job is on this host (a message for the fabric \
     here is a bug)";

impl Transport {
    /// Sends and writes refused for want of an endpoint (each also said
    /// as an error by its caller).
    #[cfg(test)]
    fn refused(&self) -> u64 {
        match self {
            Transport::Node { refused } => *refused,
            Transport::Fabric(_) => 0,
        }
    }

    /// [`Endpoint::try_send`]; with no endpoint, counted and
    /// [`FabricError::Invalid`] ([`NO_ENDPOINT`]).
    pub(super) fn try_send(
        &mut self,
        to: FiAddr,
        bytes: &[u8],
        token: u64,
    ) -> Result<(), FabricError> {
        match self {
            Transport::Fabric(f) => f.endpoint.try_send(to, bytes, token),
            Transport::Node { refused } => {
                *refused += 1;
                Err(FabricError::Invalid(NO_ENDPOINT.to_owned()))
            }
        }
    }

    /// [`Endpoint::try_write_u64`]; with no endpoint as [`Self::try_send`].
    pub(super) fn try_write_u64(
        &mut self,
        to: FiAddr,
        region: &RemoteRegion,
        slot: usize,
        value: u64,
        token: u64,
    ) -> Result<(), FabricError> {
        match self {
            Transport::Fabric(f) => f.endpoint.try_write_u64(to, region, slot, value, token),
            Transport::Node { refused } => {
                *refused += 1;
                Err(FabricError::Invalid(NO_ENDPOINT.to_owned()))
            }
        }
    }

    /// [`Endpoint::poll`]; nothing to read with no endpoint.
    pub(super) fn poll(
        &mut self,
        max: usize,
        sink: &mut dyn FnMut(Completion<'_>),
    ) -> Result<usize, FabricError> {
        match self {
            Transport::Fabric(f) => f.endpoint.poll(max, sink),
            Transport::Node { .. } => Ok(0),
        }
    }

    /// [`Endpoint::wait_or`]; with no endpoint, a sleep on `wake` alone.
    pub(super) fn wait_or(
        &mut self,
        timeout: Duration,
        wake: BorrowedFd<'_>,
        sink: &mut dyn FnMut(Completion<'_>),
    ) -> Result<Waited, FabricError> {
        match self {
            Transport::Fabric(f) => f.endpoint.wait_or(timeout, wake, sink),
            Transport::Node { .. } => {
                let woken = timeout.is_zero()
                    || crate::node::wait_readable(wake, timeout).map_err(|e| {
                        FabricError::Invalid(format!("waiting on the wake-up socket: {e}"))
                    })?;
                Ok(Waited {
                    completions: 0,
                    queue: false,
                    woken,
                })
            }
        }
    }
}

/// This rank's slot page: registered for the fabric's writes, or plain
/// memory in a job with no endpoint (the Engine still reads and clears
/// it; nobody writes it).
pub(super) enum Slots {
    Registered(SlotRegion),
    Plain(SlotPage),
}

impl Slots {
    pub(super) fn memory(&self) -> &SlotPage {
        match self {
            Slots::Registered(region) => region.memory(),
            Slots::Plain(page) => page,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    /// With no endpoint nothing leaves: a send or a heartbeat write is
    /// refused (counted, an `Invalid` error, no refusal to wait out), the
    /// queue is empty, and the wait returns on the wake socket.
    #[test]
    fn with_no_endpoint_nothing_is_sent_and_the_wait_is_the_wake_socket() {
        let mut t = Transport::Node { refused: 0 };
        let e = t.try_send(FiAddr(1), b"hello", 1).unwrap_err();
        assert!(matches!(&e, FabricError::Invalid(why) if why == NO_ENDPOINT));
        assert!(!e.is_refusal());
        let region = RemoteRegion {
            addr: 0,
            key: 0,
            len: 4096,
        };
        assert!(t.try_write_u64(FiAddr(1), &region, 0, 7, 1).is_err());
        assert_eq!(t.refused(), 2);
        assert_eq!(
            t.poll(usize::MAX, &mut |_| panic!("a completion")).unwrap(),
            0
        );
        let (thread_end, mut host_end) = std::os::unix::net::UnixStream::pair().unwrap();
        let idle = t
            .wait_or(Duration::from_millis(5), thread_end.as_fd(), &mut |_| {})
            .unwrap();
        assert_eq!(
            (idle.woken, idle.queue, idle.completions),
            (false, false, 0)
        );
        host_end.write_all(&[1]).unwrap();
        let woken = t
            .wait_or(Duration::from_secs(60), thread_end.as_fd(), &mut |_| {})
            .unwrap();
        assert!(woken.woken && !woken.queue);
    }
}
