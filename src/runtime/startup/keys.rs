//! The job's keys at start-up: which secret this rank holds, what its peer
//! record says about it, and the message key the Engine seals and checks
//! every message with.
//!
//! Owns: the order in which a secret is looked for (the bootstrap's, then
//! `FFD_SECRET_FILE`, else rank 0 draws one and hands it over in its
//! record), the secret's fingerprint, and the derivation of the message key
//! from the secret and the job key. Must not: print or log a secret, send
//! one anywhere but in rank 0's record when no rank holds one, or carry
//! bytes between ranks (the exchange does).
//!
//! The message key is `BLAKE3-keyed(secret.derive("ffd messages v2"), job
//! key)`: bound to the job key (rank 0's random draw), so two jobs started
//! with the same secret file still seal with different keys, and a stale
//! process of the earlier job cannot speak in the later one.

#![forbid(unsafe_code)]

use super::record::{FINGERPRINT_LEN, SecretClaim};
use crate::bootstrap::Bootstrap;
use crate::bootstrap::secret::{JobSecret, SecretError};
use crate::config::Env;
use crate::protocol::{JobKeys, Rank};

/// The context of the messages' key (`JobSecret::derive`).
const MESSAGES: &str = "ffd messages v2";
/// The context of the fingerprint peer records carry.
const FINGERPRINT: &str = "ffd secret fingerprint";

/// The secret this rank holds of its own: its bootstrap's (the TCP
/// rendezvous reads one), else `FFD_SECRET_FILE`'s, else none.
pub fn held_secret(bootstrap: &dyn Bootstrap, env: &Env) -> Result<Option<JobSecret>, SecretError> {
    match bootstrap.secret() {
        Some(secret) => Ok(Some(secret.clone())),
        None => JobSecret::from_env(env),
    }
}

/// What this rank's record says: the fingerprint of the secret it holds;
/// on rank 0 without one, a secret drawn now (the others take it from the
/// record); on the others, nothing.
pub fn claim(me: Rank, held: Option<&JobSecret>) -> Result<SecretClaim, SecretError> {
    Ok(match held {
        Some(secret) => SecretClaim::Held {
            fingerprint: fingerprint(secret),
        },
        None if me == 0 => SecretClaim::Drawn(JobSecret::random()?),
        None => SecretClaim::None,
    })
}

/// A fingerprint of `secret`: names it in errors and records, reveals
/// nothing of it (a derived key, cut to 8 bytes).
pub fn fingerprint(secret: &JobSecret) -> [u8; FINGERPRINT_LEN] {
    let mut out = [0u8; FINGERPRINT_LEN];
    out.copy_from_slice(&secret.derive(FINGERPRINT)[..FINGERPRINT_LEN]);
    out
}

/// The key every message of the job with `job_key` is sealed with.
pub fn message_key(secret: &JobSecret, job_key: u64) -> [u8; 32] {
    *blake3::keyed_hash(&secret.derive(MESSAGES), &job_key.to_le_bytes()).as_bytes()
}

/// The Engine's keys for the job with `job_key` and `secret`.
pub fn job_keys(secret: &JobSecret, job_key: u64) -> JobKeys {
    JobKeys::new(job_key, message_key(secret, job_key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_secret_and_by_job_key() {
        let a = JobSecret::from_bytes([1; 32]);
        let b = JobSecret::from_bytes([2; 32]);
        assert_ne!(message_key(&a, 7), message_key(&b, 7));
        assert_ne!(
            message_key(&a, 7),
            message_key(&a, 8),
            "a reused secret file"
        );
        assert_eq!(message_key(&a, 7), message_key(&a, 7));
        assert_ne!(fingerprint(&a), fingerprint(&b));
        assert_ne!(&fingerprint(&a)[..], &a.as_bytes()[..FINGERPRINT_LEN]);
        assert_ne!(&message_key(&a, 7)[..], &a.derive(FINGERPRINT)[..]);
    }

    #[test]
    fn only_rank_0_draws_and_a_held_secret_is_sent_as_its_fingerprint() {
        let s = JobSecret::from_bytes([3; 32]);
        assert_eq!(
            claim(5, Some(&s)).unwrap(),
            SecretClaim::Held {
                fingerprint: fingerprint(&s)
            }
        );
        assert_eq!(claim(5, None).unwrap(), SecretClaim::None);
        assert!(matches!(claim(0, None).unwrap(), SecretClaim::Drawn(_)));
        assert!(matches!(
            claim(0, Some(&s)).unwrap(),
            SecretClaim::Held { .. }
        ));
    }
}
