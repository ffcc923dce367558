//! The rendezvous client: one rank's connection, carrying its allgather
//! rounds.
//!
//! Every wait is bounded: connecting retries with backoff for the timeout
//! (the server may still be starting); each reply is awaited for the timeout
//! plus a quarter (and 100 ms), so that when both sides use the same timeout
//! the server's diagnosis, which names the missing ranks, arrives first.

use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::thread;
use std::time::{Duration, Instant};

use super::wire::{self, Frame, ReadError};
use super::{AbortCode, TcpEnv};
use crate::bootstrap::{Bootstrap, BootstrapError, MAX_CONTRIBUTION};
use crate::config::Env;
use crate::protocol::Rank;

/// A rank's connection to a [`Rendezvous`](super::Rendezvous).
pub struct TcpBootstrap {
    stream: TcpStream,
    addr: String,
    rank: Rank,
    size: u32,
    rounds: u32,
    timeout: Duration,
    failed: Option<String>,
}

impl TcpBootstrap {
    /// Connects as rank `rank` of `size` to the rendezvous at `addr`
    /// (`host:port`), retrying for up to `timeout` while it starts, and
    /// waits for its welcome.
    pub fn connect(
        addr: &str,
        rank: Rank,
        size: u32,
        timeout: Duration,
    ) -> Result<TcpBootstrap, BootstrapError> {
        if rank >= size {
            return Err(BootstrapError::Invalid(format!(
                "rank {rank} is not below the job size {size}"
            )));
        }
        let stream = connect_with_retry(addr, timeout)?;
        let _ = stream.set_nodelay(true);
        stream
            .set_write_timeout(Some(timeout))
            .map_err(|source| io_error(addr, "while connecting", source))?;
        let mut me = TcpBootstrap {
            stream,
            addr: addr.to_owned(),
            rank,
            size,
            rounds: 0,
            timeout,
            failed: None,
        };
        let hello = Frame::Hello {
            version: wire::VERSION,
            rank,
            size,
        };
        let welcome = me.request(&hello, "to welcome this rank", "after HELLO");
        match welcome {
            Ok(Frame::Welcome { version, size: s }) if version == wire::VERSION && s == size => {
                Ok(me)
            }
            Ok(other) => Err(me.malformed(format!(
                "expected a WELCOME for version {} and {size} ranks, got {other:?}",
                wire::VERSION
            ))),
            Err(e) => Err(e),
        }
    }

    /// Connects as `FFD_BOOTSTRAP`, `FFD_RANK`, `FFD_SIZE` and
    /// `FFD_BOOTSTRAP_TIMEOUT` of the process environment say.
    pub fn connect_from_env() -> Result<TcpBootstrap, BootstrapError> {
        TcpBootstrap::connect_with_env(&Env::process())
    }

    /// Connects as the variables of `env` say.
    pub fn connect_with_env(env: &Env) -> Result<TcpBootstrap, BootstrapError> {
        let e = TcpEnv::from_env(env)?;
        TcpBootstrap::connect(&e.addr, e.rank, e.size, e.timeout)
    }

    /// The rendezvous address this client was given.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn reply_bound(&self) -> Duration {
        self.timeout + self.timeout / 4 + Duration::from_millis(100)
    }

    fn malformed(&self, what: String) -> BootstrapError {
        BootstrapError::Malformed {
            addr: self.addr.clone(),
            what,
        }
    }

    /// Sends `frame` and reads the reply, turning an ABORT into an error.
    /// `waiting` completes "waiting for the rendezvous …", `when` says when.
    fn request(
        &mut self,
        frame: &Frame,
        waiting: &str,
        when: &str,
    ) -> Result<Frame, BootstrapError> {
        let bytes = frame.encode().map_err(|e| self.malformed(e.to_string()))?;
        if let Err(source) = wire::write_bytes(&mut self.stream, &bytes) {
            // The server may have aborted and closed: its reason is more
            // useful than the broken pipe.
            let brief = Instant::now() + Duration::from_millis(500);
            return match self.read_reply(brief) {
                Ok(Frame::Abort { code, message }) => Err(self.aborted(code, message)),
                _ => Err(io_error(&self.addr, when, source)),
            };
        }
        let bound = self.reply_bound();
        match self.read_reply(Instant::now() + bound) {
            Ok(Frame::Abort { code, message }) => Err(self.aborted(code, message)),
            Ok(frame) => Ok(frame),
            Err(ReadError::Timeout) => Err(BootstrapError::Timeout {
                after: bound,
                waiting: format!("the rendezvous at {} {waiting}", self.addr),
            }),
            Err(ReadError::Closed | ReadError::Truncated) => Err(BootstrapError::Closed {
                addr: self.addr.clone(),
                when: when.to_owned(),
            }),
            Err(ReadError::TooLarge(n)) => {
                Err(self.malformed(format!("a reply of {n} bytes is over the limit")))
            }
            Err(ReadError::Io(source)) => Err(io_error(&self.addr, when, source)),
        }
    }

    fn read_reply(&mut self, deadline: Instant) -> Result<Frame, ReadError> {
        // A RESULT holds every rank's contribution, each at most the limit.
        let max = (self.size as usize)
            .saturating_mul(4 + MAX_CONTRIBUTION)
            .saturating_add(9)
            .min(u32::MAX as usize);
        let payload = wire::read_frame(&mut self.stream, Some(deadline), max)?;
        Frame::decode(&payload)
            .map_err(|e| ReadError::Io(io::Error::new(io::ErrorKind::InvalidData, e)))
    }

    fn aborted(&self, code: u16, message: String) -> BootstrapError {
        BootstrapError::Aborted {
            addr: self.addr.clone(),
            code: AbortCode::from_u16(code),
            message,
        }
    }

    fn round(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        if mine.len() > MAX_CONTRIBUTION {
            return Err(BootstrapError::TooLarge {
                rank: self.rank,
                len: mine.len() as u64,
            });
        }
        let round = self.rounds + 1;
        let frame = Frame::Contribute {
            round,
            data: mine.to_vec(),
        };
        let reply = self.request(
            &frame,
            &format!("to complete round {round}"),
            &format!("during round {round}"),
        )?;
        match reply {
            Frame::Result { round: r, data }
                if r == round
                    && data.len() == self.size as usize
                    && data[self.rank as usize] == mine =>
            {
                self.rounds = round;
                Ok(data)
            }
            Frame::Result { round: r, data } => Err(self.malformed(format!(
                "a RESULT for round {r} with {} contributions, for round {round} of {} ranks, or without this rank's",
                data.len(),
                self.size
            ))),
            other => Err(self.malformed(format!("expected a RESULT for round {round}, got {other:?}"))),
        }
    }
}

impl Bootstrap for TcpBootstrap {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        if let Some(why) = &self.failed {
            return Err(BootstrapError::Failed(why.clone()));
        }
        let result = self.round(mine);
        if let Err(e) = &result {
            // The stream may be mid-frame: no later round can trust it.
            self.failed = Some(e.to_string());
        }
        result
    }
}

fn io_error(addr: &str, when: &str, source: io::Error) -> BootstrapError {
    BootstrapError::Io {
        addr: addr.to_owned(),
        when: when.to_owned(),
        source,
    }
}

/// Connects, retrying with backoff (10 ms doubling to 500 ms) until `timeout`.
fn connect_with_retry(addr: &str, timeout: Duration) -> Result<TcpStream, BootstrapError> {
    let deadline = Instant::now() + timeout;
    let mut backoff = Duration::from_millis(10);
    // Each pass makes one attempt; the loop ends at the deadline.
    loop {
        let error = match try_connect(addr, deadline) {
            Ok(stream) => return Ok(stream),
            Err(e) => e,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(BootstrapError::Connect {
                addr: addr.to_owned(),
                after: timeout,
                source: error,
            });
        }
        thread::sleep(backoff.min(left));
        backoff = (backoff * 2).min(Duration::from_millis(500));
    }
}

fn try_connect(addr: &str, deadline: Instant) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the address resolved to nothing");
    for sa in addr.to_socket_addrs()? {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(&sa, left.min(Duration::from_secs(2))) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(last)
}
