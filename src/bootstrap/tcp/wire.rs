//! The rendezvous wire format (public so that tests and other
//! implementations can speak it).
//!
//! Every message is a frame: a `u32` little-endian payload length (at most
//! the receiver's limit), then the payload, whose first byte is its kind.
//! All integers are little-endian.
//!
//! | kind | name | direction | body after the kind byte |
//! |---|---|---|---|
//! | 1 | HELLO | client → server | magic `FFDB`, version u16, rank u32, size u32 |
//! | 2 | WELCOME | server → client | version u16, size u32 |
//! | 3 | CONTRIBUTE | client → server | round u32 (from 1), the contribution |
//! | 4 | RESULT | server → client | round u32, count u32, count × (len u32, bytes) |
//! | 5 | ABORT | server → client | code u16, message (UTF-8, the rest) |
//!
//! HELLO and ABORT keep this layout in every version, so that peers of
//! different versions can still name each other and say why they part.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

/// This build's rendezvous protocol version.
pub const VERSION: u16 = 1;

const MAGIC: [u8; 4] = *b"FFDB";

const HELLO: u8 = 1;
const WELCOME: u8 = 2;
const CONTRIBUTE: u8 = 3;
const RESULT: u8 = 4;
const ABORT: u8 = 5;

/// One rendezvous message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Hello { version: u16, rank: u32, size: u32 },
    Welcome { version: u16, size: u32 },
    Contribute { round: u32, data: Vec<u8> },
    Result { round: u32, data: Vec<Vec<u8>> },
    Abort { code: u16, message: String },
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
    #[error("a result is too large for one frame")]
    TooLarge,
}

impl Frame {
    /// The frame's bytes, length prefix included.
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        let mut p = Vec::new();
        match self {
            Frame::Hello {
                version,
                rank,
                size,
            } => {
                p.push(HELLO);
                p.extend_from_slice(&MAGIC);
                p.extend_from_slice(&version.to_le_bytes());
                p.extend_from_slice(&rank.to_le_bytes());
                p.extend_from_slice(&size.to_le_bytes());
            }
            Frame::Welcome { version, size } => {
                p.push(WELCOME);
                p.extend_from_slice(&version.to_le_bytes());
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
            Frame::Abort { code, message } => {
                p.push(ABORT);
                p.extend_from_slice(&code.to_le_bytes());
                p.extend_from_slice(message.as_bytes());
            }
        }
        let len = u32::try_from(p.len()).map_err(|_| WireError::TooLarge)?;
        let mut out = Vec::with_capacity(4 + p.len());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&p);
        Ok(out)
    }

    /// Reads a payload (without its length prefix) from untrusted bytes.
    pub fn decode(payload: &[u8]) -> Result<Frame, WireError> {
        let (&kind, body) = payload.split_first().ok_or(WireError::Truncated("empty"))?;
        let mut r = Body {
            rest: body,
            name: "",
        };
        let frame = match kind {
            HELLO => {
                r.name = "HELLO";
                if r.take(4)? != MAGIC {
                    return Err(WireError::NotFfd);
                }
                Frame::Hello {
                    version: r.u16()?,
                    rank: r.u32()?,
                    size: r.u32()?,
                }
            }
            WELCOME => {
                r.name = "WELCOME";
                Frame::Welcome {
                    version: r.u16()?,
                    size: r.u32()?,
                }
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
            ABORT => {
                r.name = "ABORT";
                let code = r.u16()?;
                let message = String::from_utf8_lossy(r.take(r.rest.len())?).into_owned();
                Frame::Abort { code, message }
            }
            other => return Err(WireError::UnknownKind(other)),
        };
        if !r.rest.is_empty() {
            return Err(WireError::Trailing(r.name));
        }
        Ok(frame)
    }
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
    fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
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
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Reads one frame's payload, waiting until `deadline` (`None`: no bound, for
/// the server's readers, which are unblocked by shutting the socket down).
pub fn read_frame(
    stream: &mut TcpStream,
    deadline: Option<Instant>,
    max: usize,
) -> Result<Vec<u8>, ReadError> {
    let mut len = [0u8; 4];
    read_full(stream, &mut len, deadline, true)?;
    let len = u32::from_le_bytes(len);
    if len as usize > max {
        return Err(ReadError::TooLarge(u64::from(len)));
    }
    let mut payload = vec![0; len as usize];
    read_full(stream, &mut payload, deadline, false)?;
    Ok(payload)
}

fn read_full(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
    at_boundary: bool,
) -> Result<(), ReadError> {
    let mut filled = 0;
    // Each pass reads at least one byte, or returns, or lets time run
    // towards the deadline (a timed-out read).
    while filled < buf.len() {
        let timeout = match deadline {
            None => None,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ReadError::Timeout);
                }
                Some(left)
            }
        };
        stream.set_read_timeout(timeout)?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 && at_boundary => return Err(ReadError::Closed),
            Ok(0) => return Err(ReadError::Truncated),
            Ok(n) => filled += n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(ReadError::Io(e)),
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
            Frame::Hello {
                version: 1,
                rank: 3,
                size: 8,
            },
            Frame::Welcome {
                version: 1,
                size: 8,
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
                message: "two clients claimed rank 2".into(),
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
    fn garbage_is_rejected() {
        assert_eq!(Frame::decode(&[]), Err(WireError::Truncated("empty")));
        assert_eq!(Frame::decode(&[9]), Err(WireError::UnknownKind(9)));
        assert_eq!(Frame::decode(b"\x01GET / HTTP/1.1"), Err(WireError::NotFfd));
        assert_eq!(
            Frame::decode(&[2, 1, 0, 8, 0, 0, 0, 0]),
            Err(WireError::Trailing("WELCOME"))
        );
        // A count that promises more entries than bytes allocates nothing.
        assert_eq!(
            Frame::decode(&[4, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]),
            Err(WireError::Truncated("RESULT"))
        );
    }
}
