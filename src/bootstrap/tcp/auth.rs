//! The rendezvous's authentication: the HELLO's proof and the session
//! that seals every later frame of a connection, both keyed by the job
//! secret.
//!
//! Owns: the rendezvous key (`JobSecret::derive("ffd rendezvous v2")`),
//! the proof, the session key, the frame tags and their counters. Must
//! not: do I/O, compare tags other than in constant time, or hand out a
//! sealed frame's body whose tag failed.
//!
//! With K the rendezvous key, C the CHALLENGE payload the server sent
//! (kind to nonce, 39 bytes) and H the HELLO payload up to its proof (47
//! bytes), all keyed BLAKE3:
//! - proof = BLAKE3(K; `"hello"` ‖ C ‖ H): the client holds the secret,
//!   now (C is fresh per connection, from a per-server random seed);
//! - session key S = BLAKE3(K; `"session"` ‖ C ‖ H);
//! - the tag of the n-th sealed frame in one direction (n from 0) =
//!   BLAKE3(S; d ‖ n as u64 ‖ payload), d = 0 from the server, 1 from the
//!   client. The server's first sealed frame (WELCOME, or REFUSED) proves
//!   it holds the secret too: S binds the client's fresh nonce. A frame
//!   altered, dropped, reordered, replayed, or taken from another
//!   connection fails its tag.
//!
//! The rendezvous authenticates; it does not encrypt. What it carries (the
//! peer records: fabric addresses, the job key) is not secret once
//! messages are authenticated by the job secret, which never travels.

use super::wire::{Frame, HELLO_FIELDS, NONCE_LEN, WireError, framed};
use crate::bootstrap::secret::JobSecret;

/// Bytes in a tag.
pub const TAG_LEN: usize = 32;

/// The context of the rendezvous key derived from the job secret.
pub const KEY_CONTEXT: &str = "ffd rendezvous v2";

/// The key every proof and session of a rendezvous derives from.
#[derive(Clone)]
pub struct RendezvousKey([u8; 32]);

impl std::fmt::Debug for RendezvousKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RendezvousKey(..)")
    }
}

/// Which end of a connection a session half belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Server,
    Client,
}

impl Side {
    fn direction(self) -> u8 {
        match self {
            Side::Server => 0,
            Side::Client => 1,
        }
    }
    fn other(self) -> Side {
        match self {
            Side::Server => Side::Client,
            Side::Client => Side::Server,
        }
    }
}

impl RendezvousKey {
    pub fn new(secret: &JobSecret) -> RendezvousKey {
        RendezvousKey(secret.derive(KEY_CONTEXT))
    }

    fn mac(&self, label: &[u8], challenge: &[u8], hello_fields: &[u8]) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(label);
        h.update(challenge);
        h.update(hello_fields);
        h.finalize()
    }

    /// The proof a HELLO carries, over the CHALLENGE payload and the HELLO
    /// payload up to the proof.
    pub fn proof(&self, challenge: &[u8], hello_fields: &[u8]) -> [u8; TAG_LEN] {
        *self.mac(b"hello", challenge, hello_fields).as_bytes()
    }

    /// Whether `hello` (a whole HELLO payload, proof last) proves the
    /// secret for `challenge`. Constant-time.
    pub fn verify_hello(&self, challenge: &[u8], hello: &[u8]) -> bool {
        if hello.len() != HELLO_FIELDS + TAG_LEN {
            return false;
        }
        let (fields, proof) = hello.split_at(HELLO_FIELDS);
        self.mac(b"hello", challenge, fields) == *proof
    }

    /// This side's halves of the connection's session.
    pub fn session(&self, side: Side, challenge: &[u8], hello_fields: &[u8]) -> (Sealer, Opener) {
        let key = *self.mac(b"session", challenge, hello_fields).as_bytes();
        (
            Sealer {
                key,
                direction: side.direction(),
                sent: 0,
            },
            Opener {
                key,
                direction: side.other().direction(),
                received: 0,
            },
        )
    }
}

fn tag(key: &[u8; 32], direction: u8, counter: u64, payload: &[u8]) -> blake3::Hash {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(&[direction]);
    h.update(&counter.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// The sending half of a session: seals this side's frames in order.
pub struct Sealer {
    key: [u8; 32],
    direction: u8,
    sent: u64,
}

impl Sealer {
    /// The bytes of `payload` sealed as this side's next frame, length
    /// prefix and tag included.
    pub fn seal_payload(&mut self, payload: &[u8]) -> Result<Vec<u8>, WireError> {
        let t = tag(&self.key, self.direction, self.sent, payload);
        let bytes = framed(payload, t.as_bytes())?;
        self.sent += 1;
        Ok(bytes)
    }

    /// [`seal_payload`](Self::seal_payload) of `frame`'s payload.
    pub fn seal(&mut self, frame: &Frame) -> Result<Vec<u8>, WireError> {
        self.seal_payload(&frame.payload()?)
    }
}

/// Why a sealed frame was not accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("a message's tag does not verify (altered, replayed, or not from the peer)")]
    BadTag,
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// The receiving half of a session: checks the peer's frames in order.
pub struct Opener {
    key: [u8; 32],
    direction: u8,
    received: u64,
}

impl Opener {
    /// The peer's next frame, from a payload that ends with its tag.
    pub fn open(&mut self, payload: &[u8]) -> Result<Frame, OpenError> {
        let body_len = payload
            .len()
            .checked_sub(TAG_LEN)
            .ok_or(OpenError::BadTag)?;
        let (body, t) = payload.split_at(body_len);
        if tag(&self.key, self.direction, self.received, body) != *t {
            return Err(OpenError::BadTag);
        }
        self.received += 1;
        let frame = Frame::decode(body)?;
        if !frame.is_sealed() {
            return Err(WireError::UnknownKind(body[0]).into());
        }
        Ok(frame)
    }
}

/// A fresh random nonce from the operating system's generator.
pub fn random_nonce() -> std::io::Result<[u8; NONCE_LEN]> {
    use rand::TryRngCore;
    let mut nonce = [0u8; NONCE_LEN];
    rand::rngs::OsRng
        .try_fill_bytes(&mut nonce)
        .map_err(|e| std::io::Error::other(format!("the random generator failed: {e}")))?;
    Ok(nonce)
}

/// Unique, unpredictable challenge nonces for one server: BLAKE3 keyed by
/// a random seed over a counter.
pub struct Challenges {
    seed: [u8; 32],
    next: u64,
}

impl Challenges {
    pub fn new() -> std::io::Result<Challenges> {
        Ok(Challenges {
            seed: random_nonce()?,
            next: 0,
        })
    }

    pub fn next_nonce(&mut self) -> [u8; NONCE_LEN] {
        let n = *blake3::keyed_hash(&self.seed, &self.next.to_le_bytes()).as_bytes();
        self.next += 1;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::tcp::wire::VERSION;

    fn handshake(key: &RendezvousKey) -> (Vec<u8>, Vec<u8>) {
        let challenge = Frame::Challenge {
            version: VERSION,
            nonce: [3; 32],
        }
        .payload()
        .unwrap();
        let mut hello = Frame::Hello {
            version: VERSION,
            rank: 1,
            size: 4,
            nonce: [5; 32],
            proof: [0; 32],
        }
        .payload()
        .unwrap();
        let proof = key.proof(&challenge, &hello[..HELLO_FIELDS]);
        hello[HELLO_FIELDS..].copy_from_slice(&proof);
        (challenge, hello)
    }

    #[test]
    fn a_proof_holds_only_for_its_secret_challenge_and_fields() {
        let key = RendezvousKey::new(&JobSecret::from_bytes([1; 32]));
        let other = RendezvousKey::new(&JobSecret::from_bytes([2; 32]));
        let (challenge, hello) = handshake(&key);
        assert!(key.verify_hello(&challenge, &hello));
        assert!(!other.verify_hello(&challenge, &hello));
        let mut fresh = challenge.clone();
        fresh[10] ^= 1;
        assert!(
            !key.verify_hello(&fresh, &hello),
            "a replay to a new challenge"
        );
        let mut claimed = hello.clone();
        claimed[7] ^= 1; // the rank
        assert!(!key.verify_hello(&challenge, &claimed));
        assert!(!key.verify_hello(&challenge, &hello[..40]));
    }

    #[test]
    fn sealed_frames_open_once_in_order_and_only_in_their_direction() {
        let key = RendezvousKey::new(&JobSecret::from_bytes([1; 32]));
        let (challenge, hello) = handshake(&key);
        let fields = &hello[..HELLO_FIELDS];
        let (mut server_tx, mut server_rx) = key.session(Side::Server, &challenge, fields);
        let (mut client_tx, mut client_rx) = key.session(Side::Client, &challenge, fields);

        let welcome = server_tx.seal(&Frame::Welcome { size: 4 }).unwrap();
        let result = server_tx
            .seal(&Frame::Result {
                round: 1,
                data: vec![vec![1]],
            })
            .unwrap();
        // Out of order: the RESULT is not frame 0.
        let mut probe = key.session(Side::Client, &challenge, fields).1;
        assert_eq!(probe.open(&result[4..]), Err(OpenError::BadTag));
        assert_eq!(
            client_rx.open(&welcome[4..]),
            Ok(Frame::Welcome { size: 4 })
        );
        // Replayed: frame 0 again where frame 1 is due.
        let mut replay = key.session(Side::Client, &challenge, fields).1;
        replay.open(&welcome[4..]).unwrap();
        assert_eq!(replay.open(&welcome[4..]), Err(OpenError::BadTag));
        assert!(client_rx.open(&result[4..]).is_ok());

        let contribute = client_tx
            .seal(&Frame::Contribute {
                round: 1,
                data: vec![1],
            })
            .unwrap();
        // Reflected back to its sender, it fails.
        let mut reflected = key.session(Side::Client, &challenge, fields).1;
        assert_eq!(reflected.open(&contribute[4..]), Err(OpenError::BadTag));
        let mut altered = contribute.clone();
        let last = altered.len() - TAG_LEN - 1;
        altered[last] ^= 1;
        let mut check = key.session(Side::Server, &challenge, fields).1;
        assert_eq!(check.open(&altered[4..]), Err(OpenError::BadTag));
        assert!(server_rx.open(&contribute[4..]).is_ok());
        // Too short to hold a tag.
        assert_eq!(server_rx.open(&[1, 2, 3]), Err(OpenError::BadTag));
    }

    #[test]
    fn challenges_do_not_repeat() {
        let mut a = Challenges::new().unwrap();
        let mut b = Challenges::new().unwrap();
        let first = a.next_nonce();
        assert_ne!(first, a.next_nonce());
        assert_ne!(first, b.next_nonce(), "servers draw their own seeds");
    }
}
