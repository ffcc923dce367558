//! A connection's reader thread: reads the HELLO within the handshake
//! bound, checks its proof, then reads the sealed frames of an
//! authenticated connection, forwarding each to the coordinator.
//!
//! Owns: the receiving half of the connection's session and every read
//! on it. Must not: forward a frame whose tag failed, read without a bound
//! (the HELLO has a deadline and a size cap; a sealed frame, once begun,
//! must end within the timeout; between frames it wakes every
//! [`STOP_POLL`](wire::STOP_POLL) to look at the serve's stop flag), or
//! write anything (the coordinator does). It ends with exactly one
//! [`ToCoordinator::Ended`].

use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Sender;
use std::time::Instant;

use super::DropReason;
use super::auth::{Opener, RendezvousKey, Side, TAG_LEN};
use super::coordinator::{ConnId, End, Limits, ToCoordinator};
use super::wire::{self, Bounds, Frame, HANDSHAKE_MAX, HELLO_FIELDS, ReadError, VERSION};
use crate::bootstrap::MAX_CONTRIBUTION;
use crate::config::format_duration;

/// Stack of a reader: it holds a frame buffer on the heap and little else.
pub(super) const STACK: usize = 256 * 1024;

/// What a connection's reader needs.
pub(super) struct Reader {
    pub(super) id: ConnId,
    pub(super) stream: TcpStream,
    pub(super) key: Arc<RendezvousKey>,
    /// The CHALLENGE payload sent on this connection.
    pub(super) challenge: Vec<u8>,
    /// The HELLO must be in by then.
    pub(super) hello_by: Instant,
    pub(super) limits: Limits,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) tx: Sender<ToCoordinator>,
}

impl Reader {
    pub(super) fn run(mut self) {
        let end = self.read();
        let _ = self.tx.send(ToCoordinator::Ended(self.id, end));
    }

    /// Reads the HELLO, then the authenticated frames; how it ended.
    fn read(&mut self) -> End {
        let (rank, size, hello) = match self.read_hello() {
            Ok(h) => h,
            Err(end) => return end,
        };
        let (sealer, mut opener) =
            self.key
                .session(Side::Server, &self.challenge, &hello[..HELLO_FIELDS]);
        let hello = ToCoordinator::Hello {
            id: self.id,
            rank,
            size,
            sealer,
        };
        if self.tx.send(hello).is_err() {
            return End::Closed;
        }
        self.read_sealed(&mut opener)
    }

    fn read_hello(&mut self) -> Result<(u32, u32, Vec<u8>), End> {
        let dropped = |reason, detail: String| Err(End::Dropped(reason, detail));
        let bounds = Bounds {
            start_by: Some(self.hello_by),
            finish_within: None,
            max: HANDSHAKE_MAX,
            stop: Some(&self.stop),
        };
        let payload = match wire::read_frame_within(&mut self.stream, &bounds) {
            Ok(p) => p,
            Err(ReadError::Timeout) => {
                return dropped(
                    DropReason::Silent,
                    format!(
                        "sent no whole HELLO within {}",
                        format_duration(self.limits.handshake)
                    ),
                );
            }
            Err(ReadError::TooLarge(n)) => {
                return dropped(
                    DropReason::Garbage,
                    format!("a first message of {n} bytes (over {HANDSHAKE_MAX})"),
                );
            }
            Err(ReadError::Stopped) => return Err(End::Closed),
            Err(e) => {
                return dropped(DropReason::ClosedEarly, format!("before its HELLO: {e}"));
            }
        };
        match wire::announced_version(&payload) {
            Err(e) => return dropped(DropReason::Garbage, e.to_string()),
            Ok(v) if v != VERSION => {
                return dropped(
                    DropReason::Version,
                    format!("speaks rendezvous protocol version {v}, not {VERSION}"),
                );
            }
            Ok(_) => {}
        }
        let (rank, size) = match Frame::decode(&payload) {
            Ok(Frame::Hello { rank, size, .. }) => (rank, size),
            Ok(other) => {
                return dropped(DropReason::Garbage, format!("sent {}", other.name()));
            }
            Err(e) => return dropped(DropReason::Garbage, e.to_string()),
        };
        if !self.key.verify_hello(&self.challenge, &payload) {
            return dropped(
                DropReason::BadProof,
                format!("a HELLO for rank {rank} of {size} whose proof fails"),
            );
        }
        Ok((rank, size, payload))
    }

    fn read_sealed(&mut self, opener: &mut Opener) -> End {
        let bounds = Bounds {
            start_by: None,
            finish_within: Some(self.limits.timeout),
            max: 1 + 4 + MAX_CONTRIBUTION + TAG_LEN,
            stop: Some(&self.stop),
        };
        // Ends at end of stream, an error, a bad frame, or the stop flag.
        loop {
            match wire::read_frame_within(&mut self.stream, &bounds) {
                Ok(payload) => match opener.open(&payload) {
                    Ok(frame) => {
                        if self.tx.send(ToCoordinator::Frame(self.id, frame)).is_err() {
                            return End::Closed;
                        }
                    }
                    Err(e) => return End::Broke(e.to_string()),
                },
                Err(ReadError::TooLarge(len)) => return End::Oversized(len),
                Err(ReadError::Timeout) => {
                    return End::Broke(format!(
                        "a message it began did not arrive whole within {}",
                        format_duration(self.limits.timeout)
                    ));
                }
                Err(_) => return End::Closed,
            }
        }
    }
}
