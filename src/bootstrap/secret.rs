//! The job's secret: 32 random bytes that authenticate a job's messages and
//! its rendezvous. It never travels on the fabric.
//!
//! Owns: making, reading and writing a secret, and deriving one key per use
//! from it (keyed BLAKE3 `derive_key`, so the rendezvous and the messages
//! never share a key). Must not: print a secret (`Debug` is redacted),
//! accept a secret file that others could read, or overwrite a file.
//!
//! Where a job's secret comes from (`docs/design.md` §5 "Wire format"):
//! - `ffd run` and `ffd rendezvous` make one and write it to a file only
//!   their user can read (mode 0600), passed to the ranks as
//!   `FFD_SECRET_FILE`; the rendezvous checks it before it trusts a client.
//! - An embedded job (the embedder's allgather, or PMIx) has rank 0 draw one
//!   and hand it to the others through that allgather, which is the embedder's
//!   own channel; an `FFD_SECRET_FILE` given to every rank takes precedence.
//!
//! A secret file holds the secret as 64 hexadecimal digits (a trailing
//! newline is allowed).

#![forbid(unsafe_code)]

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rand::TryRngCore;
use rand::rngs::OsRng;

use crate::config::{Env, var};

/// Bytes in a job secret.
pub const SECRET_LEN: usize = 32;

/// The accepted form of a secret file, for error messages.
pub const SECRET_FILE_FORM: &str =
    "a file of mode 0600 (readable by its owner only) holding 64 hexadecimal digits";

/// A job's secret.
#[derive(Clone, PartialEq, Eq)]
pub struct JobSecret([u8; SECRET_LEN]);

impl fmt::Debug for JobSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JobSecret(..)")
    }
}

/// Why a secret could not be made, read or written.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("the operating system's random generator failed: {0}")]
    Random(String),
    #[error("{var}={path}: {problem}; accepted: {SECRET_FILE_FORM}", var = var::SECRET_FILE, path = .path.display())]
    File { path: PathBuf, problem: String },
    #[error("could not write the secret file {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("a secret is 64 hexadecimal digits; {0}")]
    Hex(String),
}

impl JobSecret {
    /// A fresh secret from the operating system's generator.
    pub fn random() -> Result<JobSecret, SecretError> {
        let mut bytes = [0u8; SECRET_LEN];
        OsRng
            .try_fill_bytes(&mut bytes)
            .map_err(|e| SecretError::Random(e.to_string()))?;
        Ok(JobSecret(bytes))
    }

    pub fn from_bytes(bytes: [u8; SECRET_LEN]) -> JobSecret {
        JobSecret(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; SECRET_LEN] {
        &self.0
    }

    /// The key for one use (`context` names it, e.g. `"ffd rendezvous v1"`):
    /// keys for different uses are independent.
    pub fn derive(&self, context: &str) -> [u8; 32] {
        blake3::derive_key(context, &self.0)
    }

    /// 64 lowercase hexadecimal digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses 64 hexadecimal digits (surrounding whitespace ignored).
    pub fn from_hex(text: &str) -> Result<JobSecret, SecretError> {
        let t = text.trim();
        if t.len() != 2 * SECRET_LEN {
            return Err(SecretError::Hex(format!("found {} characters", t.len())));
        }
        let mut bytes = [0u8; SECRET_LEN];
        for (i, pair) in t.as_bytes().chunks(2).enumerate() {
            let digits = std::str::from_utf8(pair).ok();
            bytes[i] = digits
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| SecretError::Hex(format!("`{}` is not hexadecimal", t)))?;
        }
        Ok(JobSecret(bytes))
    }

    /// Reads a secret file: a regular file that nobody but its owner can
    /// read or write (mode 0600 or stricter). (A file of another user's
    /// with mode 0600 can be opened only by root.)
    pub fn read_file(path: &Path) -> Result<JobSecret, SecretError> {
        let problem = |problem: String| SecretError::File {
            path: path.to_owned(),
            problem,
        };
        let mut file = File::open(path).map_err(|e| problem(format!("cannot be opened: {e}")))?;
        let meta = file
            .metadata()
            .map_err(|e| problem(format!("cannot be read: {e}")))?;
        if !meta.is_file() {
            return Err(problem("is not a regular file".into()));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(problem(format!(
                "has mode {:04o}: other users may read or write it",
                meta.mode() & 0o7777
            )));
        }
        let mut text = String::new();
        Read::by_ref(&mut file)
            .take(4 * SECRET_LEN as u64)
            .read_to_string(&mut text)
            .map_err(|e| problem(format!("cannot be read: {e}")))?;
        JobSecret::from_hex(&text).map_err(|e| problem(e.to_string()))
    }

    /// Writes this secret to a new file of mode 0600; an existing file is
    /// never overwritten.
    pub fn write_new_file(&self, path: &Path) -> Result<(), SecretError> {
        let write = |source| SecretError::Write {
            path: path.to_owned(),
            source,
        };
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(write)?;
        file.write_all(format!("{}\n", self.to_hex()).as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(write)
    }

    /// The secret named by `FFD_SECRET_FILE`, if set.
    pub fn from_env(env: &Env) -> Result<Option<JobSecret>, SecretError> {
        match env.get(var::SECRET_FILE) {
            None => Ok(None),
            Some(path) => JobSecret::read_file(Path::new(path)).map(Some),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ffd-secret-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        dir
    }

    #[test]
    fn a_written_secret_reads_back_and_is_not_overwritten() {
        let path = temp("roundtrip");
        let s = JobSecret::random().unwrap();
        s.write_new_file(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(JobSecret::read_file(&path).unwrap(), s);
        let again = JobSecret::random().unwrap();
        assert!(matches!(
            again.write_new_file(&path),
            Err(SecretError::Write { .. })
        ));
        assert_eq!(JobSecret::read_file(&path).unwrap(), s, "kept");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_file_others_can_read_is_refused_with_its_mode() {
        let path = temp("mode");
        JobSecret::random().unwrap().write_new_file(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = JobSecret::read_file(&path).unwrap_err().to_string();
        assert!(err.contains("FFD_SECRET_FILE="), "{err}");
        assert!(err.contains("has mode 0644"), "{err}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn malformed_secrets_are_refused() {
        assert!(JobSecret::from_hex("abc").is_err());
        assert!(JobSecret::from_hex(&"zz".repeat(32)).is_err());
        let s = JobSecret::from_hex(&"0f".repeat(32)).unwrap();
        assert_eq!(s.as_bytes(), &[0x0f; 32]);
        assert_eq!(format!("{s:?}"), "JobSecret(..)");
        let missing = JobSecret::read_file(Path::new("/nonexistent/ffd-secret")).unwrap_err();
        assert!(
            missing.to_string().contains("cannot be opened"),
            "{missing}"
        );
    }

    #[test]
    fn derived_keys_differ_by_context_and_secret() {
        let a = JobSecret::from_bytes([1; 32]);
        let b = JobSecret::from_bytes([2; 32]);
        assert_ne!(a.derive("ffd rendezvous v1"), a.derive("ffd messages v2"));
        assert_ne!(a.derive("ffd rendezvous v1"), b.derive("ffd rendezvous v1"));
        assert_eq!(a.derive("x"), a.derive("x"));
    }
}
