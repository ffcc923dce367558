//! Helpers for the rendezvous tests: a served job with a fixed secret, the
//! errors each side reports, and a hand-made client that speaks the wire
//! format directly, for tests that play strays, forgers and misbehaving
//! ranks. Every wait is bounded.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use ffd::bootstrap::BootstrapError;
use ffd::bootstrap::secret::JobSecret;
use ffd::bootstrap::tcp::auth::{Opener, RendezvousKey, Sealer, Side, TAG_LEN};
use ffd::bootstrap::tcp::wire::{self, Frame, HELLO_FIELDS, VERSION};
use ffd::bootstrap::tcp::{
    AbortCode, AbortReason, DropReason, Rendezvous, RendezvousError, RendezvousHandle, ServeEvent,
    TcpBootstrap,
};
use ffd::protocol::Rank;

/// Generous for loopback on a loaded machine; only a hang reaches it.
pub const LONG: Duration = Duration::from_secs(20);

/// The secret of every served job.
pub fn secret() -> JobSecret {
    JobSecret::from_bytes([7; 32])
}

pub fn serve(size: u32, timeout: Duration) -> RendezvousHandle {
    Rendezvous::bind("127.0.0.1:0", size, &secret())
        .unwrap()
        .timeout(timeout)
        .spawn()
        .unwrap()
}

pub fn connect(
    h: &RendezvousHandle,
    rank: Rank,
    size: u32,
    timeout: Duration,
) -> Result<TcpBootstrap, BootstrapError> {
    TcpBootstrap::connect(&h.addr().to_string(), rank, size, &secret(), timeout)
}

/// Waits (bounded) for the event `want`, skipping others.
pub fn wait_event(h: &RendezvousHandle, want: impl Fn(&ServeEvent) -> bool) -> ServeEvent {
    let deadline = Instant::now() + LONG;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = h
            .events()
            .recv_timeout(left)
            .expect("the awaited server event never came");
        if want(&e) {
            return e;
        }
    }
}

pub fn aborted(e: &BootstrapError) -> (AbortCode, &str) {
    match e {
        BootstrapError::Aborted { code, message, .. } => (*code, message.as_str()),
        other => panic!("expected an abort, got: {other}"),
    }
}

pub fn refused(e: &BootstrapError) -> (Option<DropReason>, &str, bool) {
    match e {
        BootstrapError::Refused {
            reason,
            message,
            authenticated,
            ..
        } => (*reason, message.as_str(), *authenticated),
        other => panic!("expected a refusal, got: {other}"),
    }
}

pub fn server_abort(h: RendezvousHandle) -> AbortReason {
    match h.join() {
        Err(RendezvousError::Aborted(reason)) => reason,
        other => panic!("expected an abort, got {other:?}"),
    }
}

/// One raw connection: its CHALLENGE, and its session once it sent a
/// HELLO with a key.
pub struct Raw {
    pub stream: TcpStream,
    /// The CHALLENGE payload the server sent.
    pub challenge: Vec<u8>,
    /// The last HELLO payload sent.
    pub hello: Vec<u8>,
    pub session: Option<(Sealer, Opener)>,
}

/// Opens a raw connection and reads the server's CHALLENGE.
pub fn open(addr: SocketAddr) -> Raw {
    let mut stream = TcpStream::connect_timeout(&addr, LONG).expect("connect");
    let challenge =
        wire::read_frame(&mut stream, Some(Instant::now() + LONG), 1024).expect("a CHALLENGE");
    assert!(
        matches!(Frame::decode(&challenge), Ok(Frame::Challenge { version, .. }) if version == VERSION),
        "the server greets with a CHALLENGE"
    );
    Raw {
        stream,
        challenge,
        hello: Vec::new(),
        session: None,
    }
}

/// A HELLO payload for `challenge`, with the proof `key` makes (or zeros).
pub fn hello_for(
    challenge: &[u8],
    key: Option<&RendezvousKey>,
    version: u16,
    rank: u32,
    size: u32,
) -> Vec<u8> {
    let mut hello = Frame::Hello {
        version,
        rank,
        size,
        nonce: [0x5a; 32],
        proof: [0; TAG_LEN],
    }
    .payload()
    .unwrap();
    if let Some(key) = key {
        let proof = key.proof(challenge, &hello[..HELLO_FIELDS]);
        hello[HELLO_FIELDS..].copy_from_slice(&proof);
    }
    hello
}

pub fn key(secret: &JobSecret) -> RendezvousKey {
    RendezvousKey::new(secret)
}

impl Raw {
    /// Sends a HELLO proven with `key` (none: a forged, all-zero proof);
    /// with a key, the session is set up to read sealed replies.
    pub fn hello(&mut self, key: Option<&RendezvousKey>, rank: u32, size: u32) {
        self.hello_version(key, VERSION, rank, size);
    }

    pub fn hello_version(
        &mut self,
        key: Option<&RendezvousKey>,
        version: u16,
        rank: u32,
        size: u32,
    ) {
        let hello = hello_for(&self.challenge, key, version, rank, size);
        self.send_payload(&hello);
        if let Some(key) = key {
            self.session = Some(key.session(Side::Client, &self.challenge, &hello[..HELLO_FIELDS]));
        }
        self.hello = hello;
    }

    /// Sends `payload` behind a length prefix, unsealed.
    pub fn send_payload(&mut self, payload: &[u8]) {
        let mut bytes = (payload.len() as u32).to_le_bytes().to_vec();
        bytes.extend_from_slice(payload);
        self.send_bytes(&bytes);
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) {
        // The server may already have closed: what it sent still reads.
        let _ = self.stream.write_all(bytes);
    }

    /// Seals and sends `frame` on the session.
    pub fn send_sealed(&mut self, frame: &Frame) {
        let bytes = self
            .session
            .as_mut()
            .expect("a session")
            .0
            .seal(frame)
            .unwrap();
        self.send_bytes(&bytes);
    }

    /// The next frame's payload; `None` at end of stream.
    pub fn read_payload(&mut self) -> Option<Vec<u8>> {
        wire::read_frame(&mut self.stream, Some(Instant::now() + LONG), 8 << 20).ok()
    }

    /// The next frame, unsealed (a DENIED).
    pub fn read_plain(&mut self) -> Option<Frame> {
        self.read_payload()
            .map(|p| Frame::decode(&p).expect("a frame"))
    }

    /// The next frame, opened with the session.
    pub fn read_sealed(&mut self) -> Option<Frame> {
        let payload = self.read_payload()?;
        let opener = &mut self.session.as_mut().expect("a session").1;
        Some(opener.open(&payload).expect("a frame sealed by the server"))
    }

    /// Everything the server sends until it closes (bounded).
    pub fn read_to_end(&mut self) -> Vec<u8> {
        let _ = self.stream.set_read_timeout(Some(LONG));
        let mut rest = Vec::new();
        let _ = self.stream.read_to_end(&mut rest);
        rest
    }
}
