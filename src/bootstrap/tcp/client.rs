//! The rendezvous client: one rank's connection, carrying its allgather
//! rounds.
//!
//! Owns: the client's half of the handshake (it proves the job secret in
//! its HELLO, and trusts nothing the server says until a sealed frame
//! proves the server holds it too) and its bounds. Must not: block without
//! a bound, or return a record from a frame whose tag failed.
//!
//! Every wait is bounded: connecting retries with backoff for the timeout
//! (the server may still be starting, or may have dropped this connection
//! among a crowd of strays); each reply is awaited for the timeout plus a
//! quarter (and 100 ms), so that when both sides use the same timeout the
//! server's diagnosis, which names the missing ranks, arrives first.

use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::thread;
use std::time::{Duration, Instant};

use super::auth::{Opener, RendezvousKey, Sealer, Side, TAG_LEN, random_nonce};
use super::wire::{self, Frame, HANDSHAKE_MAX, HELLO_FIELDS, REPLY_MAX, ReadError};
use super::{AbortCode, DropReason, TcpEnv};
use crate::bootstrap::secret::JobSecret;
use crate::bootstrap::{Bootstrap, BootstrapError, MAX_CONTRIBUTION};
use crate::config::Env;
use crate::protocol::Rank;

/// What this rank waits for in the handshake, for timeout messages.
const WELCOME: &str = "to welcome this rank";

/// A rank's connection to a [`Rendezvous`](super::Rendezvous).
pub struct TcpBootstrap {
    stream: TcpStream,
    sealer: Sealer,
    opener: Opener,
    secret: JobSecret,
    addr: String,
    rank: Rank,
    size: u32,
    rounds: u32,
    timeout: Duration,
    failed: Option<String>,
}

/// How one connection attempt failed.
enum Attempt {
    /// Worth another connection: the server closed this one before it
    /// answered (it may have been crowded out by strays).
    Retry(BootstrapError),
    Fail(BootstrapError),
}

impl TcpBootstrap {
    /// Connects as rank `rank` of `size` to the rendezvous at `addr`
    /// (`host:port`) of the job whose secret is `secret`, retrying for up
    /// to `timeout` while it starts, and waits for its welcome.
    pub fn connect(
        addr: &str,
        rank: Rank,
        size: u32,
        secret: &JobSecret,
        timeout: Duration,
    ) -> Result<TcpBootstrap, BootstrapError> {
        if rank >= size {
            return Err(BootstrapError::Invalid(format!(
                "rank {rank} is not below the job size {size}"
            )));
        }
        let deadline = Instant::now() + timeout;
        let mut backoff = Duration::from_millis(10);
        // Each pass makes one connection; the loop ends at the deadline.
        loop {
            let stream = connect_with_retry(addr, deadline, timeout)?;
            let e = match handshake(stream, addr, rank, size, secret, timeout) {
                Ok(me) => return Ok(me),
                Err(Attempt::Fail(e)) => return Err(e),
                Err(Attempt::Retry(e)) => e,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(e);
            }
            thread::sleep(backoff.min(left));
            if Instant::now() >= deadline {
                return Err(e);
            }
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }

    /// Connects as `FFD_BOOTSTRAP`, `FFD_RANK`, `FFD_SIZE`,
    /// `FFD_SECRET_FILE` and `FFD_BOOTSTRAP_TIMEOUT` of the process
    /// environment say.
    pub fn connect_from_env() -> Result<TcpBootstrap, BootstrapError> {
        TcpBootstrap::connect_with_env(&Env::process())
    }

    /// Connects as the variables of `env` say.
    pub fn connect_with_env(env: &Env) -> Result<TcpBootstrap, BootstrapError> {
        let e = TcpEnv::from_env(env)?;
        let secret = JobSecret::read_file(&e.secret_file)?;
        TcpBootstrap::connect(&e.addr, e.rank, e.size, &secret, e.timeout)
    }

    /// The rendezvous address this client was given.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn malformed(&self, what: String) -> BootstrapError {
        malformed(&self.addr, what)
    }

    /// Sends `frame` sealed and reads the sealed reply, turning an ABORT
    /// into an error. `waiting` completes "waiting for the rendezvous …",
    /// `when` says when.
    fn request(
        &mut self,
        frame: &Frame,
        waiting: &str,
        when: &str,
    ) -> Result<Frame, BootstrapError> {
        let bytes = self
            .sealer
            .seal(frame)
            .map_err(|e| self.malformed(e.to_string()))?;
        if let Err(source) = wire::write_bytes(&mut self.stream, &bytes) {
            // The server may have aborted and closed: its reason is more
            // useful than the broken pipe.
            let brief = Instant::now() + Duration::from_millis(500);
            return match self.read_reply(brief, waiting, when) {
                Ok(Frame::Abort { code, message }) => Err(aborted(&self.addr, code, message)),
                _ => Err(io_error(&self.addr, when, source)),
            };
        }
        let bound = reply_bound(self.timeout);
        match self.read_reply(Instant::now() + bound, waiting, when)? {
            Frame::Abort { code, message } => Err(aborted(&self.addr, code, message)),
            frame => Ok(frame),
        }
    }

    fn read_reply(
        &mut self,
        deadline: Instant,
        waiting: &str,
        when: &str,
    ) -> Result<Frame, BootstrapError> {
        // A RESULT holds every rank's contribution, each at most the limit.
        let max = (self.size as usize)
            .saturating_mul(4 + MAX_CONTRIBUTION)
            .saturating_add(9 + TAG_LEN)
            .min(u32::MAX as usize);
        let payload = wire::read_frame(&mut self.stream, Some(deadline), max)
            .map_err(|e| read_error(&self.addr, e, self.timeout, waiting, when))?;
        self.opener
            .open(&payload)
            .map_err(|e| unauthentic(&self.addr, e.to_string()))
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

/// One handshake on a fresh connection: CHALLENGE, HELLO, and a sealed
/// WELCOME (or a refusal).
fn handshake(
    mut stream: TcpStream,
    addr: &str,
    rank: Rank,
    size: u32,
    secret: &JobSecret,
    timeout: Duration,
) -> Result<TcpBootstrap, Attempt> {
    let fail = |e| Attempt::Fail(e);
    let _ = stream.set_nodelay(true);
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|source| fail(io_error(addr, "while connecting", source)))?;
    let bound = reply_bound(timeout);

    let challenge = read_handshake(&mut stream, addr, bound, HANDSHAKE_MAX, timeout)?;
    let version = wire::announced_version(&challenge)
        .map_err(|e| fail(malformed(addr, format!("instead of a CHALLENGE: {e}"))))?;
    if version != wire::VERSION {
        return Err(fail(BootstrapError::VersionMismatch {
            addr: addr.to_owned(),
            server: version,
            client: wire::VERSION,
        }));
    }
    if !matches!(Frame::decode(&challenge), Ok(Frame::Challenge { .. })) {
        return Err(fail(malformed(
            addr,
            "a CHALLENGE that does not parse".into(),
        )));
    }

    let key = RendezvousKey::new(secret);
    let nonce = random_nonce().map_err(|source| fail(io_error(addr, "at start", source)))?;
    let mut hello = Frame::Hello {
        version: wire::VERSION,
        rank,
        size,
        nonce,
        proof: [0; TAG_LEN],
    }
    .payload()
    .map_err(|e| fail(malformed(addr, e.to_string())))?;
    let proof = key.proof(&challenge, &hello[..HELLO_FIELDS]);
    hello[HELLO_FIELDS..].copy_from_slice(&proof);
    let (sealer, mut opener) = key.session(Side::Client, &challenge, &hello[..HELLO_FIELDS]);
    let bytes = wire::framed(&hello, &[]).map_err(|e| fail(malformed(addr, e.to_string())))?;
    if let Err(source) = wire::write_bytes(&mut stream, &bytes) {
        return Err(Attempt::Retry(io_error(
            addr,
            "after its CHALLENGE",
            source,
        )));
    }

    let reply = read_handshake(&mut stream, addr, bound, REPLY_MAX, timeout)?;
    if let Ok(Frame::Denied { code, message }) = Frame::decode(&reply) {
        return Err(fail(refused(addr, code, message, false)));
    }
    // Nothing the server says counts until its tag holds.
    let frame = opener
        .open(&reply)
        .map_err(|e| fail(unauthentic(addr, e.to_string())))?;
    match frame {
        Frame::Welcome { size: s } if s == size => Ok(TcpBootstrap {
            stream,
            sealer,
            opener,
            secret: secret.clone(),
            addr: addr.to_owned(),
            rank,
            size,
            rounds: 0,
            timeout,
            failed: None,
        }),
        Frame::Refused { code, message } => Err(fail(refused(addr, code, message, true))),
        Frame::Abort { code, message } => Err(fail(aborted(addr, code, message))),
        other => Err(fail(malformed(
            addr,
            format!("expected a WELCOME for {size} ranks, got {other:?}"),
        ))),
    }
}

/// Reads one handshake frame; a close before it is worth a retry.
fn read_handshake(
    stream: &mut TcpStream,
    addr: &str,
    bound: Duration,
    max: usize,
    timeout: Duration,
) -> Result<Vec<u8>, Attempt> {
    let when = "before it welcomed this rank";
    match wire::read_frame(stream, Some(Instant::now() + bound), max) {
        Ok(payload) => Ok(payload),
        Err(e @ (ReadError::Closed | ReadError::Truncated)) => {
            Err(Attempt::Retry(read_error(addr, e, timeout, WELCOME, when)))
        }
        Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::ConnectionReset => Err(Attempt::Retry(
            read_error(addr, ReadError::Io(e), timeout, WELCOME, when),
        )),
        Err(e) => Err(Attempt::Fail(read_error(addr, e, timeout, WELCOME, when))),
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

    fn secret(&self) -> Option<&JobSecret> {
        Some(&self.secret)
    }
}

fn reply_bound(timeout: Duration) -> Duration {
    timeout + timeout / 4 + Duration::from_millis(100)
}

fn read_error(
    addr: &str,
    e: ReadError,
    timeout: Duration,
    waiting: &str,
    when: &str,
) -> BootstrapError {
    match e {
        ReadError::Timeout => BootstrapError::Timeout {
            after: reply_bound(timeout),
            waiting: format!("the rendezvous at {addr} {waiting}"),
        },
        ReadError::Closed | ReadError::Truncated | ReadError::Stopped => BootstrapError::Closed {
            addr: addr.to_owned(),
            when: when.to_owned(),
        },
        ReadError::TooLarge(n) => {
            malformed(addr, format!("a reply of {n} bytes is over the limit"))
        }
        ReadError::Io(source) => io_error(addr, when, source),
    }
}

fn malformed(addr: &str, what: String) -> BootstrapError {
    BootstrapError::Malformed {
        addr: addr.to_owned(),
        what,
    }
}

fn unauthentic(addr: &str, what: String) -> BootstrapError {
    BootstrapError::Unauthentic {
        addr: addr.to_owned(),
        what,
    }
}

fn aborted(addr: &str, code: u16, message: String) -> BootstrapError {
    BootstrapError::Aborted {
        addr: addr.to_owned(),
        code: AbortCode::from_u16(code),
        message,
    }
}

fn refused(addr: &str, code: u16, message: String, authenticated: bool) -> BootstrapError {
    BootstrapError::Refused {
        addr: addr.to_owned(),
        reason: DropReason::from_u16(code),
        message,
        authenticated,
    }
}

fn io_error(addr: &str, when: &str, source: io::Error) -> BootstrapError {
    BootstrapError::Io {
        addr: addr.to_owned(),
        when: when.to_owned(),
        source,
    }
}

/// Connects, retrying with backoff (10 ms doubling to 500 ms) until
/// `deadline` (`timeout` after the first attempt).
fn connect_with_retry(
    addr: &str,
    deadline: Instant,
    timeout: Duration,
) -> Result<TcpStream, BootstrapError> {
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
