//! A job's secret on disk for the processes `ffd run` and `ffd rendezvous`
//! start or serve: a fresh private directory (mode 0700) holding one
//! secret file (mode 0600), removed with everything in it when dropped.
//!
//! Owns: making that directory and removing it. Must not: reuse a
//! directory that already exists, remove one it did not make, or write the
//! secret anywhere else.

use std::fs::{self, DirBuilder, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ffd::bootstrap::secret::JobSecret;
use ffd::bootstrap::tcp::auth::random_nonce;

/// The secret file's name inside its directory.
pub const SECRET_FILE_NAME: &str = "secret";

/// A private directory holding a job's secret; removed on drop.
#[derive(Debug)]
pub struct SecretDir {
    dir: PathBuf,
    file: PathBuf,
}

impl SecretDir {
    /// Writes `secret` into a new directory `<prefix>-<pid>-<random>` under
    /// [`private_parent`].
    pub fn create(secret: &JobSecret, prefix: &str) -> io::Result<SecretDir> {
        SecretDir::create_in(&private_parent(), secret, prefix)
    }

    /// [`create`](Self::create) under `parent`.
    pub fn create_in(parent: &Path, secret: &JobSecret, prefix: &str) -> io::Result<SecretDir> {
        let dir = make_private_dir(parent, prefix)?;
        // From here on the guard removes the directory on any way out.
        let made = SecretDir {
            file: dir.join(SECRET_FILE_NAME),
            dir,
        };
        secret
            .write_new_file(&made.file)
            .map_err(|e| io::Error::other(e.to_string()))?;
        Ok(made)
    }

    /// The secret file (for `FFD_SECRET_FILE`).
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The directory holding it.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for SecretDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Where private directories go: `$XDG_RUNTIME_DIR` (per user, mode 0700,
/// in memory) when it is set to an absolute directory, else the temporary
/// directory (`$TMPDIR` or `/tmp`).
pub fn private_parent() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .unwrap_or_else(std::env::temp_dir)
}

/// A new directory of mode 0700 under `parent`; never one that existed.
fn make_private_dir(parent: &Path, prefix: &str) -> io::Result<PathBuf> {
    let mut last = None;
    // A name taken by someone else is tried again with another; a few
    // attempts are plenty with 64 random bits in the name.
    for _ in 0..8 {
        let random = random_nonce()?;
        let tag: String = random[..8].iter().map(|b| format!("{b:02x}")).collect();
        let dir = parent.join(format!("{prefix}-{}-{tag}", std::process::id()));
        match DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                // The umask may have taken bits away; none were added.
                fs::set_permissions(&dir, Permissions::from_mode(0o700))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!(
                        "cannot make a private directory in {}: {e}",
                        parent.display()
                    ),
                ));
            }
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free directory name")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_secret_is_private_and_removed_with_its_directory() {
        let secret = JobSecret::random().unwrap();
        let made = SecretDir::create_in(&std::env::temp_dir(), &secret, "ffd-test").unwrap();
        let dir = made.dir().to_owned();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        assert_eq!(fs::metadata(made.file()).unwrap().mode() & 0o777, 0o600);
        assert_eq!(JobSecret::read_file(made.file()).unwrap(), secret);
        let other = SecretDir::create_in(&std::env::temp_dir(), &secret, "ffd-test").unwrap();
        assert_ne!(other.dir(), made.dir(), "a fresh directory each time");
        drop(made);
        assert!(!dir.exists(), "{} is left behind", dir.display());
        drop(other);
    }

    #[test]
    fn a_parent_that_cannot_hold_it_is_an_error_naming_it() {
        let secret = JobSecret::random().unwrap();
        let err = SecretDir::create_in(Path::new("/nonexistent/ffd"), &secret, "x").unwrap_err();
        assert!(
            err.to_string()
                .contains("cannot make a private directory in /nonexistent/ffd"),
            "{err}"
        );
    }
}
