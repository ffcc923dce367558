//! The rendezvous wire format, version 2 (public so that tests and other
//! implementations can speak it).
//!
//! Owns: the frames, their encoding and decoding, and reading a frame
//! within bounds (a deadline, a size cap). Must not: allocate by a length
//! it has not checked against the cap, or trust a sealed frame's body
//! before [`auth`](super::auth) has checked its tag.
//!
//! Every message is a frame: a `u32` little-endian payload length (at most
//! the receiver's limit), then the payload, whose first byte is its kind.
//! All integers are little-endian.
//!
//! Before authentication (plain, tiny: a receiver reads at most
//! [`HANDSHAKE_MAX`] bytes):
//!
//! | kind | name | direction | body after the kind byte |
//! |---|---|---|---|
//! | 6 | CHALLENGE | server → client, on accept | magic `FFDB`, version u16, server nonce (32) |
//! | 1 | HELLO | client → server | magic `FFDB`, version u16, rank u32, size u32, client nonce (32), proof (32) |
//! | 8 | DENIED | server → client | code u16, message (UTF-8, the rest): a HELLO of another version or with a proof that fails |
//!
//! After a HELLO whose proof holds, every frame is sealed: its payload ends
//! with a 32-byte tag over the frame's position on the connection (see
//! [`auth`](super::auth)).
//!
//! | kind | name | direction | body after the kind byte, before the tag |
//! |---|---|---|---|
//! | 2 | WELCOME | server → client | size u32 |
//! | 7 | REFUSED | server → client | code u16, message (the rest): an authenticated client not admitted |
//! | 3 | CONTRIBUTE | client → server | round u32 (from 1), the contribution |
//! | 4 | RESULT | server → client | round u32, count u32, count × (len u32, bytes) |
//! | 5 | ABORT | server → client | code u16, message (the rest) |
//!
//! CHALLENGE and HELLO begin with the magic and the version in every
//! version, so that peers of different versions can name each other's.
//! Codes of DENIED and REFUSED are [`DropReason`](super::DropReason)s, of
//! ABORT [`AbortCode`](super::AbortCode)s.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// This build's rendezvous protocol version.
pub const VERSION: u16 = 2;

/// Bytes in a nonce, and in a proof or a tag.
pub const NONCE_LEN: usize = 32;

/// The most a receiver reads of a frame before authentication (a HELLO is
/// 79 bytes, a CHALLENGE 39); a DENIED may be longer, see [`REPLY_MAX`].
pub const HANDSHAKE_MAX: usize = 256;

/// The most a client reads of the reply to its HELLO (WELCOME, REFUSED,
/// DENIED or ABORT, with their tag).
pub const REPLY_MAX: usize = 4096;

/// A HELLO's payload up to its proof: kind, magic, version, rank, size, nonce.
pub const HELLO_FIELDS: usize = 1 + 4 + 2 + 4 + 4 + NONCE_LEN;

const MAGIC: [u8; 4] = *b"FFDB";

const HELLO: u8 = 1;
const WELCOME: u8 = 2;
const CONTRIBUTE: u8 = 3;
const RESULT: u8 = 4;
const ABORT: u8 = 5;
const CHALLENGE: u8 = 6;
const REFUSED: u8 = 7;
const DENIED: u8 = 8;

/// One rendezvous message (a sealed one without its tag).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Challenge {
        version: u16,
        nonce: [u8; NONCE_LEN],
    },
    Hello {
        version: u16,
        rank: u32,
        size: u32,
        nonce: [u8; NONCE_LEN],
        proof: [u8; NONCE_LEN],
    },
    Denied {
        code: u16,
        message: String,
    },
    Welcome {
        size: u32,
    },
    Refused {
        code: u16,
        message: String,
    },
    Contribute {
        round: u32,
        data: Vec<u8>,
    },
    Result {
        round: u32,
        data: Vec<Vec<u8>>,
    },
    Abort {
        code: u16,
        message: String,
    },
}

/// Why a payload is not a frame.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("not an ffd rendezvous message")]
    NotFfd,
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    #[error("a {0} message is truncated")]
    Truncated(&'static str),
    #[error("a {0} message has bytes after its end")]
    Trailing(&'static str),
    #[error("a message is too large for one frame")]
    TooLarge,
}

impl Frame {
    /// The frame's name on the wire, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Frame::Challenge { .. } => "CHALLENGE",
            Frame::Hello { .. } => "HELLO",
            Frame::Denied { .. } => "DENIED",
            Frame::Welcome { .. } => "WELCOME",
            Frame::Refused { .. } => "REFUSED",
            Frame::Contribute { .. } => "CONTRIBUTE",
            Frame::Result { .. } => "RESULT",
            Frame::Abort { .. } => "ABORT",
        }
    }

    /// Whether this kind travels sealed (after authentication).
    pub fn is_sealed(&self) -> bool {
        !matches!(
            self,
            Frame::Challenge { .. } | Frame::Hello { .. } | Frame::Denied { .. }
        )
    }

    /// The payload: the kind byte and the body, without length or tag.
    pub fn payload(&self) -> Result<Vec<u8>, WireError> {
        let mut p = Vec::new();
        match self {
            Frame::Challenge { version, nonce } => {
                p.push(CHALLENGE);
                p.extend_from_slice(&MAGIC);
                p.extend_from_slice(&version.to_le_bytes());
                p.extend_from_slice(nonce);
            }
            Frame::Hello {
                version,
                rank,
                size,
                nonce,
                proof,
            } => {
                p.push(HELLO);
                p.extend_from_slice(&MAGIC);
                p.extend_from_slice(&version.to_le_bytes());
                p.extend_from_slice(&rank.to_le_bytes());
                p.extend_from_slice(&size.to_le_bytes());
                p.extend_from_slice(nonce);
                p.extend_from_slice(proof);
            }
            Frame::Denied { code, message }
            | Frame::Refused { code, message }
            | Frame::Abort { code, message } => {
                p.push(match self {
                    Frame::Denied { .. } => DENIED,
                    Frame::Refused { .. } => REFUSED,
                    _ => ABORT,
                });
                p.extend_from_slice(&code.to_le_bytes());
                p.extend_from_slice(message.as_bytes());
            }
            Frame::Welcome { size } => {
                p.push(WELCOME);
                p.extend_from_slice(&size.to_le_bytes());
            }
            Frame::Contribute { round, data } => {
                p.reserve(5 + data.len());
                p.push(CONTRIBUTE);
                p.extend_from_slice(&round.to_le_bytes());
                p.extend_from_slice(data);
            }
            Frame::Result { round, data } => {
                let total = data
                    .iter()
                    .try_fold(9usize, |acc, d| acc.checked_add(4 + d.len()));
                p.reserve(total.ok_or(WireError::TooLarge)?);
                p.push(RESULT);
                p.extend_from_slice(&round.to_le_bytes());
                let count = u32::try_from(data.len()).map_err(|_| WireError::TooLarge)?;
                p.extend_from_slice(&count.to_le_bytes());
                for d in data {
                    let len = u32::try_from(d.len()).map_err(|_| WireError::TooLarge)?;
                    p.extend_from_slice(&len.to_le_bytes());
                    p.extend_from_slice(d);
                }
            }
        }
        Ok(p)
    }

    /// The frame's bytes as sent plain, length prefix included.
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        framed(&self.payload()?, &[])
    }

    /// Reads a payload (without its length prefix, and without the tag of
    /// a sealed frame) from untrusted bytes.
    pub fn decode(payload: &[u8]) -> Result<Frame, WireError> {
        let (&kind, body) = payload.split_first().ok_or(WireError::Truncated("empty"))?;
        let mut r = Body {
            rest: body,
            name: "",
        };
        let frame = match kind {
            CHALLENGE => {
                r.name = "CHALLENGE";
                r.magic()?;
                Frame::Challenge {
                    version: r.u16()?,
                    nonce: r.nonce()?,
                }
            }
            HELLO => {
                r.name = "HELLO";
                r.magic()?;
                Frame::Hello {
                    version: r.u16()?,
                    rank: r.u32()?,
                    size: r.u32()?,
                    nonce: r.nonce()?,
                    proof: r.nonce()?,
                }
            }
            DENIED | REFUSED | ABORT => {
                r.name = match kind {
                    DENIED => "DENIED",
                    REFUSED => "REFUSED",
                    _ => "ABORT",
                };
                let code = r.u16()?;
                let message = String::from_utf8_lossy(r.take(r.rest.len())?).into_owned();
                match kind {
                    DENIED => Frame::Denied { code, message },
                    REFUSED => Frame::Refused { code, message },
                    _ => Frame::Abort { code, message },
                }
            }
            WELCOME => {
                r.name = "WELCOME";
                Frame::Welcome { size: r.u32()? }
            }
            CONTRIBUTE => {
                r.name = "CONTRIBUTE";
                let round = r.u32()?;
                let data = r.take(r.rest.len())?.to_vec();
                Frame::Contribute { round, data }
            }
            RESULT => {
                r.name = "RESULT";
                let round = r.u32()?;
                let count = r.u32()?;
                // Each entry takes at least 4 bytes: bound the allocation by
                // what was actually received.
                if count as usize > r.rest.len() / 4 {
                    return Err(WireError::Truncated("RESULT"));
                }
                let mut data = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    let len = r.u32()? as usize;
                    data.push(r.take(len)?.to_vec());
                }
                Frame::Result { round, data }
            }
            other => return Err(WireError::UnknownKind(other)),
        };
        if !r.rest.is_empty() {
            return Err(WireError::Trailing(r.name));
        }
        Ok(frame)
    }
}

/// The version a CHALLENGE or HELLO payload announces, read from the part
/// every version shares (kind, magic, version), whatever follows.
pub fn announced_version(payload: &[u8]) -> Result<u16, WireError> {
    let (&kind, body) = payload.split_first().ok_or(WireError::Truncated("empty"))?;
    let name = match kind {
        HELLO => "HELLO",
        CHALLENGE => "CHALLENGE",
        other => return Err(WireError::UnknownKind(other)),
    };
    let mut r = Body { rest: body, name };
    r.magic()?;
    r.u16()
}

/// `payload` then `tag` behind a length prefix.
pub(crate) fn framed(payload: &[u8], tag: &[u8]) -> Result<Vec<u8>, WireError> {
    let len = payload
        .len()
        .checked_add(tag.len())
        .and_then(|n| u32::try_from(n).ok())
        .ok_or(WireError::TooLarge)?;
    let mut out = Vec::with_capacity(4 + len as usize);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(tag);
    Ok(out)
}

struct Body<'a> {
    rest: &'a [u8],
    name: &'static str,
}

impl<'a> Body<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.rest.len() < n {
            return Err(WireError::Truncated(self.name));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }
    fn magic(&mut self) -> Result<(), WireError> {
        // Too short to hold the magic is as foreign as a wrong one.
        match self.take(4) {
            Ok(m) if m == MAGIC => Ok(()),
            _ => Err(WireError::NotFfd),
        }
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn nonce(&mut self) -> Result<[u8; NONCE_LEN], WireError> {
        let mut out = [0; NONCE_LEN];
        out.copy_from_slice(self.take(NONCE_LEN)?);
        Ok(out)
    }
}

/// Why no frame was read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("the deadline passed")]
    Timeout,
    #[error("the peer closed the connection")]
    Closed,
    #[error("the peer closed the connection in the middle of a message")]
    Truncated,
    #[error("a message of {0} bytes is over the limit")]
    TooLarge(u64),
    #[error("the reader was stopped")]
    Stopped,
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// How long, and how much, [`read_frame_within`] reads.
#[derive(Clone, Copy, Debug)]
pub struct Bounds<'a> {
    /// The frame's first byte must arrive by then. `None`: wait for it,
    /// waking every [`STOP_POLL`] to look at `stop`.
    pub start_by: Option<Instant>,
    /// Once the first byte is in, the rest must follow within this.
    pub finish_within: Option<Duration>,
    /// The largest payload accepted.
    pub max: usize,
    /// Set when the reader must give up ([`ReadError::Stopped`]).
    pub stop: Option<&'a AtomicBool>,
}

/// How often a read with no deadline wakes to look at its stop flag.
pub const STOP_POLL: Duration = Duration::from_millis(500);

/// Reads one frame's payload, waiting until `deadline` (`None`: no bound).
pub fn read_frame(
    stream: &mut TcpStream,
    deadline: Option<Instant>,
    max: usize,
) -> Result<Vec<u8>, ReadError> {
    read_frame_within(
        stream,
        &Bounds {
            start_by: deadline,
            finish_within: None,
            max,
            stop: None,
        },
    )
}

/// Reads one frame's payload within `bounds`. Nothing is allocated for a
/// length over `bounds.max`.
pub fn read_frame_within(stream: &mut TcpStream, bounds: &Bounds) -> Result<Vec<u8>, ReadError> {
    let mut len = [0u8; 4];
    let mut deadline = bounds.start_by;
    read_full(stream, &mut len, &mut deadline, bounds, true)?;
    let len = u32::from_le_bytes(len);
    if len as usize > bounds.max {
        return Err(ReadError::TooLarge(u64::from(len)));
    }
    let mut payload = vec![0; len as usize];
    read_full(stream, &mut payload, &mut deadline, bounds, false)?;
    Ok(payload)
}

/// Fills `buf`. At a frame boundary the wait for the first byte is bounded
/// by `deadline`; once a byte is in, `deadline` tightens to
/// `bounds.finish_within` from then.
fn read_full(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: &mut Option<Instant>,
    bounds: &Bounds,
    at_boundary: bool,
) -> Result<(), ReadError> {
    let mut filled = 0;
    // Each pass reads at least one byte, or returns, or lets time run
    // towards the deadline (a timed-out read), or looks at the stop flag.
    while filled < buf.len() {
        let timeout = match *deadline {
            None => STOP_POLL,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ReadError::Timeout);
                }
                left
            }
        };
        stream.set_read_timeout(Some(timeout))?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 && at_boundary => return Err(ReadError::Closed),
            Ok(0) => return Err(ReadError::Truncated),
            Ok(n) => {
                if filled == 0 && at_boundary {
                    if let Some(within) = bounds.finish_within {
                        let by = Instant::now() + within;
                        *deadline = Some(deadline.map_or(by, |d| d.min(by)));
                    }
                }
                filled += n;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
        if bounds.stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
            return Err(ReadError::Stopped);
        }
    }
    Ok(())
}

/// Writes already-encoded frame bytes.
pub fn write_bytes(stream: &mut TcpStream, bytes: &[u8]) -> io::Result<()> {
    stream.write_all(bytes)?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let frames = [
            Frame::Challenge {
                version: 2,
                nonce: [7; 32],
            },
            Frame::Hello {
                version: 2,
                rank: 3,
                size: 8,
                nonce: [1; 32],
                proof: [2; 32],
            },
            Frame::Denied {
                code: 3,
                message: "no proof".into(),
            },
            Frame::Welcome { size: 8 },
            Frame::Refused {
                code: 9,
                message: "rank 2 is taken".into(),
            },
            Frame::Contribute {
                round: 2,
                data: vec![1, 2, 3],
            },
            Frame::Contribute {
                round: 1,
                data: vec![],
            },
            Frame::Result {
                round: 2,
                data: vec![vec![], vec![9; 5]],
            },
            Frame::Abort {
                code: 4,
                message: "rank 2 disconnected".into(),
            },
        ];
        for f in frames {
            let bytes = f.encode().unwrap();
            let len = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
            assert_eq!(len, bytes.len() - 4);
            assert_eq!(Frame::decode(&bytes[4..]), Ok(f.clone()));
            for cut in 1..bytes.len() - 4 {
                let r = Frame::decode(&bytes[4..4 + cut]);
                assert!(
                    !matches!(&r, Ok(g) if *g == f),
                    "a truncated {f:?} decoded as itself"
                );
            }
        }
    }

    #[test]
    fn handshake_frames_fit_the_handshake_cap() {
        let hello = Frame::Hello {
            version: VERSION,
            rank: 0,
            size: 1,
            nonce: [0; 32],
            proof: [0; 32],
        };
        let payload = hello.payload().unwrap();
        assert_eq!(payload.len(), HELLO_FIELDS + NONCE_LEN);
        assert!(payload.len() <= HANDSHAKE_MAX);
        assert_eq!(announced_version(&payload), Ok(VERSION));
        // A version-1 HELLO: magic, version 1, rank, size; no nonce.
        let v1 = [1, b'F', b'F', b'D', b'B', 1, 0, 0, 0, 0, 0, 2, 0, 0, 0];
        assert_eq!(announced_version(&v1), Ok(1));
    }

    #[test]
    fn garbage_is_rejected() {
        assert_eq!(Frame::decode(&[]), Err(WireError::Truncated("empty")));
        assert_eq!(Frame::decode(&[9]), Err(WireError::UnknownKind(9)));
        assert_eq!(Frame::decode(b"\x01GET / HTTP/1.1"), Err(WireError::NotFfd));
        assert_eq!(Frame::decode(b"\x01GE"), Err(WireError::NotFfd));
        assert_eq!(announced_version(b"\x01GET /"), Err(WireError::NotFfd));
        assert_eq!(
            announced_version(b"\x03abc"),
            Err(WireError::UnknownKind(3))
        );
        assert_eq!(
            Frame::decode(&[2, 8, 0, 0, 0, 0]),
            Err(WireError::Trailing("WELCOME"))
        );
        // A count that promises more entries than bytes allocates nothing.
        assert_eq!(
            Frame::decode(&[4, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]),
            Err(WireError::Truncated("RESULT"))
        );
    }
}
