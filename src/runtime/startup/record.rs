//! The bootstrap record: what each rank contributes to the address exchange
//! at start-up, and its byte format.
//!
//! Owns: encoding and decoding [`PeerRecord`]; decoding treats its input as
//! untrusted (length-checked, never panics). Must not: judge records against
//! each other (that is `exchange`'s job), or carry the bytes anywhere (the
//! [`Bootstrap`](crate::bootstrap::Bootstrap) transport does).
//!
//! Format, little-endian, version [`RECORD_VERSION`] = 5:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `FFDR` |
//! | 4 | 2 | record version (frozen at this offset in every version) |
//! | 6 | 2 | ffd protocol version ([`wire::VERSION`], a `u8`, widened) |
//! | 8 | 4 | job size |
//! | 12 | 4 | rank |
//! | 16 | 8 | host id |
//! | 24 | 8 | slot-region remote address (or offset) |
//! | 32 | 8 | slot-region key |
//! | 40 | 8 | job key (rank 0's is the job's) |
//! | 48 | 8 | ring seed (rank 0's is the job's) |
//! | 56 | 1 | secret claim: 0 none, 1 drawn (rank 0's secret follows), 2 held (its fingerprint follows) |
//! | 57 | 32 | the drawn secret; or the 8-byte fingerprint, then 24 zeros; or 32 zeros |
//! | 89 | 4 | process id (as this rank's pid namespace numbers it) |
//! | 93 | 8 | pid namespace: the inode of `/proc/self/ns/pid` (0: unknown) |
//! | 101 | 8 | process start time, clock ticks since boot (`/proc/self/stat` field 22; 0: unknown) |
//! | 109 | 2 | liveness port at the fabric address's IP (0: none; `FFD_LIVENESS`) |
//! | 111 | 1 | flags: bit 0, this rank's same-host messages can go through the host's mailboxes (`FFD_LOCAL=auto` with `futex_waitv`); the other bits 0 |
//! | 112 | 1 | k, the number of job-wide settings |
//! | 113 | k × (1+n) | each job-wide setting's canonical value, UTF-8, n ≤ 255, in the settings table's order |
//! | | 1+n | hostname, UTF-8, n ≤ 255 |
//! | | 1+n | provider name, UTF-8, n ≤ 255 |
//! | | 2+n | fabric address, n ≤ 4096 |
//!
//! Nothing may follow the fabric address.
//!
//! The job-wide settings are derived from the settings table: each setting
//! it marks job-wide ([`Setting::job_wide`]) is carried as its canonical
//! value, the text its variable accepts ([`Config::job_wide`]: `10ms`,
//! `majority`), in the table's order; the variables are not carried, the
//! order names them. In version 4 they are `FFD_PERIOD`, `FFD_TIMEOUT`,
//! `FFD_INBAND`, `FFD_QUORUM`, `FFD_BCAST`, `FFD_RING` and `FFD_LOCAL`.
//! Marking a setting job-wide, or no longer, changes the layout: the
//! version is bumped (the test `each_record_version_names_its_job_wide_settings`
//! fails until it is), so a rank of another build is refused naming both
//! versions rather than compared value by misplaced value.
//!
//! Version 5 added the flags byte: a job whose ranks all share one host
//! and can all use its mailboxes opens no fabric endpoint (`docs/design.md`
//! §5.4 "What the authentication stops"), and every rank must decide that
//! from the same records. In a one-host job the fabric fields (address,
//! slot region, liveness port) stay empty: start-up exchanges them in a
//! second round only when the job spans hosts.
//!
//! Version 4 made the job-wide settings a list derived from the settings
//! table (version 3 had fixed fields for period and timeout in ns and codes
//! for inband, bcast, ring and local) and added `FFD_QUORUM` to it: a rank
//! counting a majority beside one that declares alone would split a
//! partition's verdicts. It also added the liveness port (`docs/design.md`
//! §4.5 "In-band detection"): a refused connection to it is proof the
//! rank's process is gone.
//!
//! Version 3 added the process identity (pid, pid namespace, start time)
//! that a same-host watcher checks before it trusts a pid (a recycled pid
//! or one of another namespace is refused, `docs/design.md` §4.12 "Hosts"), and the
//! local watching setting every rank must share.
//!
//! Version 2 turned a reserved byte into the secret claim and added
//! the 32 bytes after it ([`SecretClaim`], `docs/design.md` §5.3 "The job's secret and keys"). A rank
//! that holds the job's secret (from its bootstrap or `FFD_SECRET_FILE`)
//! sends only a fingerprint of it, so that ranks holding different secrets
//! fail at start naming each other; when no rank holds one, rank 0 draws
//! the secret and sends it here, over the bootstrap, which is then the
//! embedder's own channel (its allgather, or PMIx).
//!
//! The protocol version is the one constant the message codec stamps on
//! every protocol message ([`wire::VERSION`]); the record keeps it in a
//! 16-bit field, so a peer's version that does not fit a `u8` still decodes
//! and is reported as a mismatch by the exchange.

#![forbid(unsafe_code)]

use crate::bootstrap::secret::{JobSecret, SECRET_LEN};
use crate::config::{Config, Setting, VARIABLES};
use crate::protocol::{Rank, wire};

/// The version of the record format above.
pub const RECORD_VERSION: u16 = 5;

const MAGIC: [u8; 4] = *b"FFDR";
const FIXED_LEN: usize = 112;
/// The flags byte's bit for [`PeerRecord::mailbox`].
const FLAG_MAILBOX: u8 = 1;
/// Bytes of a secret's fingerprint in a record.
pub const FINGERPRINT_LEN: usize = 8;
const MAX_NAME: usize = 255;
/// Longest fabric address accepted (libfabric's are tens of bytes).
pub const MAX_FABRIC_ADDR: usize = 4096;

/// The settings every rank of a job must share, as one rank runs with
/// them: the canonical value of each setting the settings table marks
/// job-wide ([`Setting::job_wide`]), in the table's order
/// ([`Config::job_wide`]). Nothing here lists settings: the record's
/// layout and the exchange's checks follow the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobWideSettings {
    values: Vec<String>,
}

impl Default for JobWideSettings {
    /// The defaults' values.
    fn default() -> Self {
        JobWideSettings::of(&Config::default())
    }
}

impl JobWideSettings {
    /// `config`'s job-wide settings.
    pub fn of(config: &Config) -> Self {
        JobWideSettings {
            values: config.job_wide().into_iter().map(|(_, v)| v).collect(),
        }
    }

    /// The variables of the job-wide settings, in the table's (and the
    /// record's) order.
    pub fn variables() -> impl Iterator<Item = &'static str> {
        VARIABLES.iter().filter(|v| v.job_wide).map(|v| v.name)
    }

    /// Each value beside its variable, in order: what the exchange compares
    /// and names in a mismatch. (A record of a build with another list
    /// carries another number of values; the exchange refuses it first.)
    pub fn shown(&self) -> impl Iterator<Item = (&'static str, &str)> {
        Self::variables().zip(self.values.iter().map(String::as_str))
    }

    /// The number of values carried.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no value is carried (a table with no job-wide setting).
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The canonical value of the job-wide setting `var`, e.g. `10ms`.
    pub fn get(&self, var: &str) -> Option<&str> {
        self.shown()
            .find(|(v, _)| *v == var)
            .map(|(_, value)| value)
    }

    /// Sets `setting` to `value` (its canonical text); `false`, and nothing
    /// changed, when the setting is not job-wide.
    pub fn set<T>(&mut self, setting: &Setting<T>, value: &T) -> bool {
        let Some(at) = Self::variables().position(|v| v == setting.var) else {
            return false;
        };
        match self.values.get_mut(at) {
            Some(slot) => {
                *slot = setting.show(value);
                true
            }
            None => false,
        }
    }
}

/// Who a rank's process is, as a same-host watcher must check it: a pid
/// alone may be recycled, or belong to another pid namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessIdentity {
    /// The process id in the rank's own pid namespace.
    pub pid: u32,
    /// The inode of the rank's `/proc/self/ns/pid` (0: unknown).
    pub pid_namespace: u64,
    /// Its start time in clock ticks since boot (`/proc/<pid>/stat` field
    /// 22; 0: unknown).
    pub start_time: u64,
}

/// What a rank's record says about the job's secret.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SecretClaim {
    /// This rank holds no secret of its own: rank 0 draws the job's.
    #[default]
    None,
    /// Rank 0 drew the job's secret and hands it to the others through the
    /// bootstrap (the embedder's own channel).
    Drawn(JobSecret),
    /// This rank holds a secret (its bootstrap's or `FFD_SECRET_FILE`'s);
    /// only this fingerprint of it travels.
    Held { fingerprint: [u8; FINGERPRINT_LEN] },
}

impl SecretClaim {
    fn code(&self) -> u8 {
        match self {
            SecretClaim::None => 0,
            SecretClaim::Drawn(_) => 1,
            SecretClaim::Held { .. } => 2,
        }
    }

    fn material(&self) -> [u8; SECRET_LEN] {
        let mut out = [0u8; SECRET_LEN];
        match self {
            SecretClaim::None => {}
            SecretClaim::Drawn(secret) => out = *secret.as_bytes(),
            SecretClaim::Held { fingerprint } => {
                out[..FINGERPRINT_LEN].copy_from_slice(fingerprint)
            }
        }
        out
    }

    fn decode(code: u8, material: [u8; SECRET_LEN]) -> Result<SecretClaim, RecordError> {
        match code {
            0 => Ok(SecretClaim::None),
            1 => Ok(SecretClaim::Drawn(JobSecret::from_bytes(material))),
            2 => {
                let mut fingerprint = [0u8; FINGERPRINT_LEN];
                fingerprint.copy_from_slice(&material[..FINGERPRINT_LEN]);
                Ok(SecretClaim::Held { fingerprint })
            }
            code => Err(RecordError::UnknownCode {
                field: "secret claim",
                code,
            }),
        }
    }
}

/// What one rank tells every other at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerRecord {
    /// The ffd protocol version this rank speaks, [`wire::VERSION`] widened
    /// to the record's 16-bit field. Ranks of one job must agree.
    pub protocol_version: u16,
    pub job_size: u32,
    pub rank: Rank,
    /// Host identity as text (the `topology` ring groups ranks by it).
    pub hostname: String,
    /// [`host_id`] of the hostname: the same on every rank of a host.
    pub host_id: u64,
    /// The libfabric provider this rank opened, e.g. `tcp;ofi_rxm`.
    pub provider: String,
    /// This rank's endpoint name (`fi_getname`).
    pub fabric_addr: Vec<u8>,
    /// Remote address of the slot region: a virtual address with
    /// `FI_MR_VIRT_ADDR`, otherwise an offset (0).
    pub slot_addr: u64,
    /// Key of the slot region (`fi_mr_key`).
    pub slot_key: u64,
    /// Rank 0's random job key, stamped on every message; 0 on other ranks.
    pub job_key: u64,
    /// The ring seed this rank proposes; rank 0's is used.
    pub ring_seed: u64,
    /// The job-wide settings this rank runs with.
    pub settings: JobWideSettings,
    /// The job's secret as this rank knows it (never the secret itself,
    /// except rank 0's drawn one).
    pub secret: SecretClaim,
    /// This rank's process, for its same-host watchers.
    pub process: ProcessIdentity,
    /// This rank's liveness port, at its fabric address's IP (0: none).
    pub liveness_port: u16,
    /// This rank's same-host messages can go through the host's mailboxes
    /// (`FFD_LOCAL=auto` where `futex_waitv` exists).
    pub mailbox: bool,
}

impl PeerRecord {
    /// A record of this build's protocol version ([`wire::VERSION`]) with
    /// `config`'s job-wide settings and ring seed (0 when unset); the caller
    /// fills in the fabric fields and, on rank 0, the job key
    /// ([`random_job_key`]).
    pub fn new(rank: Rank, job_size: u32, hostname: impl Into<String>, config: &Config) -> Self {
        let hostname = hostname.into();
        PeerRecord {
            protocol_version: u16::from(wire::VERSION),
            job_size,
            rank,
            host_id: host_id(&hostname),
            hostname,
            provider: String::new(),
            fabric_addr: Vec::new(),
            slot_addr: 0,
            slot_key: 0,
            job_key: 0,
            ring_seed: config.ring_seed().unwrap_or(0),
            settings: JobWideSettings::of(config),
            secret: SecretClaim::None,
            process: ProcessIdentity::default(),
            liveness_port: 0,
            mailbox: false,
        }
    }

    /// The record's bytes, or which field is too long.
    pub fn encode(&self) -> Result<Vec<u8>, RecordError> {
        let check = |field: &'static str, len: usize, max: usize| {
            if len > max {
                Err(RecordError::TooLong { field, len, max })
            } else {
                Ok(())
            }
        };
        check("hostname", self.hostname.len(), MAX_NAME)?;
        check("provider", self.provider.len(), MAX_NAME)?;
        check("fabric address", self.fabric_addr.len(), MAX_FABRIC_ADDR)?;
        check(
            "job-wide settings list",
            self.settings.values.len(),
            MAX_NAME,
        )?;
        for value in &self.settings.values {
            check("job-wide setting", value.len(), MAX_NAME)?;
        }

        let settings_len: usize = self.settings.values.iter().map(|v| 1 + v.len()).sum();
        let mut out = Vec::with_capacity(
            FIXED_LEN
                + 1
                + settings_len
                + 4
                + self.hostname.len()
                + self.provider.len()
                + self.fabric_addr.len(),
        );
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&RECORD_VERSION.to_le_bytes());
        out.extend_from_slice(&self.protocol_version.to_le_bytes());
        out.extend_from_slice(&self.job_size.to_le_bytes());
        out.extend_from_slice(&self.rank.to_le_bytes());
        for v in [
            self.host_id,
            self.slot_addr,
            self.slot_key,
            self.job_key,
            self.ring_seed,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.push(self.secret.code());
        out.extend_from_slice(&self.secret.material());
        out.extend_from_slice(&self.process.pid.to_le_bytes());
        out.extend_from_slice(&self.process.pid_namespace.to_le_bytes());
        out.extend_from_slice(&self.process.start_time.to_le_bytes());
        out.extend_from_slice(&self.liveness_port.to_le_bytes());
        out.push(if self.mailbox { FLAG_MAILBOX } else { 0 });
        out.push(self.settings.values.len() as u8); // checked above: ≤ 255
        let texts = self.settings.values.iter();
        for text in texts.chain([&self.hostname, &self.provider]) {
            out.push(text.len() as u8); // checked above: ≤ 255
            out.extend_from_slice(text.as_bytes());
        }
        out.extend_from_slice(&(self.fabric_addr.len() as u16).to_le_bytes()); // ≤ 4096
        out.extend_from_slice(&self.fabric_addr);
        Ok(out)
    }

    /// Reads a record from untrusted bytes.
    pub fn decode(bytes: &[u8]) -> Result<PeerRecord, RecordError> {
        if bytes.len() < 6 || bytes[..4] != MAGIC {
            return Err(RecordError::NotARecord);
        }
        let mut r = RecordReader { bytes, at: 4 };
        let version = r.u16()?;
        if version != RECORD_VERSION {
            return Err(RecordError::Version {
                theirs: version,
                ours: RECORD_VERSION,
            });
        }
        let protocol_version = r.u16()?;
        let job_size = r.u32()?;
        let rank = r.u32()?;
        let host_id = r.u64()?;
        let slot_addr = r.u64()?;
        let slot_key = r.u64()?;
        let job_key = r.u64()?;
        let ring_seed = r.u64()?;
        let claim = r.u8()?;
        let secret = SecretClaim::decode(claim, r.array()?)?;
        let process = ProcessIdentity {
            pid: r.u32()?,
            pid_namespace: r.u64()?,
            start_time: r.u64()?,
        };
        let liveness_port = r.u16()?;
        let flags = r.u8()?;
        if flags & !FLAG_MAILBOX != 0 {
            return Err(RecordError::UnknownCode {
                field: "flags",
                code: flags,
            });
        }
        let count = r.u8()?;
        let values = (0..count)
            .map(|_| r.text("job-wide setting"))
            .collect::<Result<Vec<_>, _>>()?;
        let hostname = r.text("hostname")?;
        let provider = r.text("provider")?;
        let addr_len = usize::from(r.u16()?);
        if addr_len > MAX_FABRIC_ADDR {
            return Err(RecordError::TooLong {
                field: "fabric address",
                len: addr_len,
                max: MAX_FABRIC_ADDR,
            });
        }
        let fabric_addr = r.take(addr_len)?.to_vec();
        if r.at != bytes.len() {
            return Err(RecordError::Trailing {
                extra: bytes.len() - r.at,
            });
        }
        Ok(PeerRecord {
            protocol_version,
            job_size,
            rank,
            hostname,
            host_id,
            provider,
            fabric_addr,
            slot_addr,
            slot_key,
            job_key,
            ring_seed,
            settings: JobWideSettings { values },
            secret,
            process,
            liveness_port,
            mailbox: flags & FLAG_MAILBOX != 0,
        })
    }
}

/// Why a record could not be encoded or read. `Display` is a predicate:
/// "rank 3's bootstrap record {error}".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("is not an ffd bootstrap record (no `FFDR` magic)")]
    NotARecord,
    #[error("is of record version {theirs}, this rank reads version {ours}")]
    Version { theirs: u16, ours: u16 },
    #[error("is truncated: {len} bytes, the {field} needs {need} more")]
    Truncated {
        field: &'static str,
        len: usize,
        need: usize,
    },
    #[error("has a {field} of {len} bytes, more than {max}")]
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    #[error("has an unknown {field} code {code}")]
    UnknownCode { field: &'static str, code: u8 },
    #[error("has a {field} that is not UTF-8")]
    NotUtf8 { field: &'static str },
    #[error("has {extra} bytes after its end")]
    Trailing { extra: usize },
}

/// A cursor over an untrusted record's bytes; every read names the field
/// it was for when the bytes run out. (Not the message codec's reader.)
struct RecordReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> RecordReader<'a> {
    fn take_field(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], RecordError> {
        let rest = &self.bytes[self.at..];
        if rest.len() < n {
            return Err(RecordError::Truncated {
                field,
                len: self.bytes.len(),
                need: n - rest.len(),
            });
        }
        self.at += n;
        Ok(&rest[..n])
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        self.take_field("fabric address", n)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], RecordError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take_field("fixed header", N)?);
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, RecordError> {
        Ok(self.array::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, RecordError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, RecordError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, RecordError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn text(&mut self, field: &'static str) -> Result<String, RecordError> {
        let len = usize::from(self.take_field(field, 1)?[0]);
        let bytes = self.take_field(field, len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| RecordError::NotUtf8 { field })
    }
}

/// A deterministic 64-bit id of a host name (FNV-1a): every rank computes
/// the same id for the same host.
pub fn host_id(hostname: &str) -> u64 {
    hostname.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// This process's identity for same-host watchers: its pid, the inode of
/// its pid namespace and its start time. The last two are 0 where `/proc`
/// does not tell (a watcher then trusts the pid only in its own namespace
/// by the start time it reads, and says why it fell back when it cannot).
pub fn this_process() -> ProcessIdentity {
    let pid = std::process::id();
    let pid_namespace = std::fs::metadata("/proc/self/ns/pid")
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap_or(0);
    ProcessIdentity {
        pid,
        pid_namespace,
        start_time: start_time_of("self").unwrap_or(0),
    }
}

/// The start time (clock ticks since boot, field 22 of `/proc/<pid>/stat`)
/// of the process `pid` (a number, or `self`) as this process's pid
/// namespace sees it; `None` if it cannot be read.
pub fn start_time_of(pid: &str) -> Option<u64> {
    // Field 3 is the first after the command; 22 is the 20th.
    stat_after_command(&format!("/proc/{pid}/stat"))?
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// The fields of a `/proc/.../stat` file from field 3 on: field 2 (the
/// command) is in parentheses and may hold spaces, so this counts from the
/// last ')'. `None` if the file cannot be read.
pub fn stat_after_command(path: &str) -> Option<String> {
    let stat = std::fs::read_to_string(path).ok()?;
    Some(stat[stat.rfind(')')? + 1..].to_owned())
}

/// This machine's host name, from the kernel (`/proc/sys/kernel/hostname`),
/// else `/etc/hostname`.
pub fn local_hostname() -> std::io::Result<String> {
    let mut last = None;
    for path in ["/proc/sys/kernel/hostname", "/etc/hostname"] {
        match std::fs::read_to_string(path) {
            Ok(text) if !text.trim().is_empty() => return Ok(text.trim().to_owned()),
            Ok(_) => {}
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("the host name is empty")))
}

/// A fresh random job key from the operating system's generator; never 0
/// (0 means "no key" in a record).
pub fn random_job_key() -> std::io::Result<u64> {
    use rand::TryRngCore;
    let key = rand::rngs::OsRng
        .try_next_u64()
        .map_err(std::io::Error::other)?;
    Ok(key.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LocalMode, LogLevel, setting, var};
    use crate::protocol::{BcastKind, InbandMode, QuorumMode, RingKind};

    /// A configuration whose job-wide settings are not all defaults.
    fn config() -> Config {
        Config::builder()
            .ring(RingKind::Shuffle)
            .inband(InbandMode::Off)
            .bcast(BcastKind::Chord)
            .quorum(QuorumMode::Off)
            .local(LocalMode::Off)
            .build()
            .unwrap()
    }

    fn sample() -> PeerRecord {
        let mut r = PeerRecord::new(3, 8, "node17", &config());
        r.provider = "tcp;ofi_rxm".into();
        r.fabric_addr = vec![1, 2, 3, 4, 5];
        r.slot_addr = 0x7f00_0000_1000;
        r.slot_key = 42;
        r.job_key = 0xdead_beef;
        r.ring_seed = 9;
        r.secret = SecretClaim::Held {
            fingerprint: [1, 2, 3, 4, 5, 6, 7, 8],
        };
        r.process = ProcessIdentity {
            pid: 4242,
            pid_namespace: 4_026_531_836,
            start_time: 123_456,
        };
        r.liveness_port = 40_123;
        r
    }

    /// The sample's job-wide settings as the record carries them.
    const SAMPLE_SETTINGS: [&str; 7] = ["10ms", "100ms", "off", "off", "chord", "shuffle", "off"];
    /// Where the sample's hostname starts: after the count and the values.
    const SAMPLE_HOSTNAME_AT: usize = FIXED_LEN + 1 + 7 + 4 + 5 + 3 + 3 + 5 + 7 + 3;

    /// Each record version's job-wide settings, newest last. Marking a
    /// setting job-wide (or no longer) in the settings table changes what a
    /// record carries: bump `RECORD_VERSION` and list the new set here, so
    /// that a rank of another build is refused by version, both named,
    /// rather than compared value by misplaced value.
    #[test]
    fn each_record_version_names_its_job_wide_settings() {
        use var::*;
        const VERSIONS: &[(u16, &[&str])] = &[
            (3, &[PERIOD, TIMEOUT, INBAND, BCAST, RING, LOCAL]),
            (4, &[PERIOD, TIMEOUT, INBAND, QUORUM, BCAST, RING, LOCAL]),
            // Version 5 added the flags byte, not a setting.
            (5, &[PERIOD, TIMEOUT, INBAND, QUORUM, BCAST, RING, LOCAL]),
        ];
        let now: Vec<&str> = JobWideSettings::variables().collect();
        let &(version, list) = VERSIONS.last().unwrap();
        assert_eq!(
            (RECORD_VERSION, now.as_slice()),
            (version, list),
            "the settings table's job-wide settings changed: bump RECORD_VERSION and list them"
        );
    }

    /// The record's settings are the configuration's job-wide ones, each
    /// its canonical text; a setting that is not job-wide leaves it alone.
    #[test]
    fn the_record_carries_each_job_wide_setting_of_the_config() {
        let config = config();
        let r = PeerRecord::new(0, 1, "h", &config);
        let carried: Vec<(&str, &str)> = r.settings.shown().collect();
        let job_wide = config.job_wide();
        let want: Vec<(&str, &str)> = job_wide.iter().map(|(v, t)| (*v, t.as_str())).collect();
        assert_eq!(carried, want);
        assert_eq!(r.settings.get(var::QUORUM), Some("off"));
        assert_eq!(r.settings.get(var::LOCAL), Some("off"));
        assert_eq!(r.settings.get(var::LOG), None, "not job-wide");

        let chatty = Config::builder().log(LogLevel::Debug).build().unwrap();
        let r = PeerRecord::new(0, 1, "h", &chatty);
        assert_eq!(r.settings, JobWideSettings::default());
        assert_eq!(r.settings.len(), JobWideSettings::variables().count());

        let mut s = JobWideSettings::default();
        assert!(s.set(&setting::TIMEOUT, &std::time::Duration::from_millis(1500)));
        assert_eq!(s.get(var::TIMEOUT), Some("1500ms"));
        assert!(!s.set(&setting::LOG, &LogLevel::Debug), "not job-wide");
        assert_eq!(s.get(var::LOG), None);
    }

    #[test]
    fn the_job_wide_settings_follow_the_process_identity_in_the_tables_order() {
        let bytes = sample().encode().unwrap();
        assert_eq!(usize::from(bytes[FIXED_LEN]), SAMPLE_SETTINGS.len());
        let mut want = Vec::new();
        for text in SAMPLE_SETTINGS {
            want.push(text.len() as u8);
            want.extend_from_slice(text.as_bytes());
        }
        assert_eq!(bytes[FIXED_LEN + 1..SAMPLE_HOSTNAME_AT], want[..]);
        assert_eq!(bytes[SAMPLE_HOSTNAME_AT..][..7], *b"\x06node17");
    }

    #[test]
    fn records_round_trip() {
        let r = sample();
        let bytes = r.encode().unwrap();
        assert_eq!(&bytes[..4], b"FFDR");
        assert_eq!(bytes[4..6], [5, 0]);
        assert_eq!(bytes.len(), SAMPLE_HOSTNAME_AT + 1 + 6 + 1 + 11 + 2 + 5);
        assert_eq!(PeerRecord::decode(&bytes), Ok(r));
    }

    #[test]
    fn every_secret_claim_round_trips_and_only_rank_0s_drawn_one_is_secret() {
        for claim in [
            SecretClaim::None,
            SecretClaim::Drawn(JobSecret::from_bytes([9; SECRET_LEN])),
            SecretClaim::Held {
                fingerprint: [7; FINGERPRINT_LEN],
            },
        ] {
            let mut r = sample();
            r.secret = claim.clone();
            let bytes = r.encode().unwrap();
            assert_eq!(bytes.len(), SAMPLE_HOSTNAME_AT + 1 + 6 + 1 + 11 + 2 + 5);
            assert_eq!(PeerRecord::decode(&bytes).unwrap().secret, claim);
            let held = matches!(claim, SecretClaim::Held { .. });
            assert_eq!(bytes[57..65] == [7; 8], held, "a fingerprint travels");
            let drawn = matches!(claim, SecretClaim::Drawn(_));
            assert_eq!(bytes[65..89] == [9; 24], drawn, "a drawn secret travels");
        }
        let drawn = SecretClaim::Drawn(JobSecret::from_bytes([9; SECRET_LEN]));
        assert!(!format!("{drawn:?}").contains('9'), "Debug hides a secret");
    }

    /// The flags byte at 111: bit 0 the mailbox; an unknown bit is named.
    #[test]
    fn the_mailbox_flag_is_bit_0_at_111_and_unknown_bits_are_refused() {
        let mut r = sample();
        assert_eq!(r.encode().unwrap()[111], 0);
        r.mailbox = true;
        let mut bytes = r.encode().unwrap();
        assert_eq!(bytes[111], 1);
        assert_eq!(PeerRecord::decode(&bytes), Ok(r));
        bytes[111] = 3;
        assert_eq!(
            PeerRecord::decode(&bytes),
            Err(RecordError::UnknownCode {
                field: "flags",
                code: 3
            })
        );
    }

    #[test]
    fn the_protocol_version_is_the_wire_version_in_a_16_bit_field() {
        let bytes = sample().encode().unwrap();
        assert_eq!(bytes[6..8], [wire::VERSION, 0]);
        let mut future = sample();
        future.protocol_version = 0x0102;
        let bytes = future.encode().unwrap();
        assert_eq!(bytes[6..8], [2, 1]);
        assert_eq!(PeerRecord::decode(&bytes).unwrap().protocol_version, 0x0102);
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let bytes = sample().encode().unwrap();
        for len in 0..bytes.len() {
            assert!(PeerRecord::decode(&bytes[..len]).is_err(), "length {len}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(
            PeerRecord::decode(&long),
            Err(RecordError::Trailing { extra: 1 })
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let bytes = sample().encode().unwrap();
        let mut v3 = bytes.clone();
        v3[4] = 3;
        assert_eq!(
            PeerRecord::decode(&v3).unwrap_err().to_string(),
            "is of record version 3, this rank reads version 5"
        );
        let mut claim = bytes.clone();
        claim[56] = 3;
        assert_eq!(
            PeerRecord::decode(&claim),
            Err(RecordError::UnknownCode {
                field: "secret claim",
                code: 3
            })
        );
        let mut setting = bytes.clone();
        setting[FIXED_LEN + 2] = 0xff;
        assert_eq!(
            PeerRecord::decode(&setting),
            Err(RecordError::NotUtf8 {
                field: "job-wide setting"
            })
        );
        let mut utf = bytes.clone();
        utf[SAMPLE_HOSTNAME_AT + 1] = 0xff;
        assert_eq!(
            PeerRecord::decode(&utf),
            Err(RecordError::NotUtf8 { field: "hostname" })
        );
        assert_eq!(
            PeerRecord::decode(&bytes[..SAMPLE_HOSTNAME_AT + 4])
                .unwrap_err()
                .to_string(),
            format!(
                "is truncated: {} bytes, the hostname needs 3 more",
                SAMPLE_HOSTNAME_AT + 4
            )
        );
    }

    #[test]
    fn over_long_fields_are_refused_on_both_sides() {
        let mut r = sample();
        r.fabric_addr = vec![0; MAX_FABRIC_ADDR + 1];
        assert_eq!(
            r.encode(),
            Err(RecordError::TooLong {
                field: "fabric address",
                len: MAX_FABRIC_ADDR + 1,
                max: MAX_FABRIC_ADDR
            })
        );
        r.fabric_addr.clear();
        r.hostname = "h".repeat(256);
        assert!(matches!(
            r.encode(),
            Err(RecordError::TooLong {
                field: "hostname",
                ..
            })
        ));
        let mut r = sample();
        r.settings.values[0] = "1".repeat(256);
        assert!(matches!(
            r.encode(),
            Err(RecordError::TooLong {
                field: "job-wide setting",
                len: 256,
                ..
            })
        ));
    }

    #[test]
    fn host_ids_are_deterministic_and_distinct() {
        assert_eq!(host_id("node1"), host_id("node1"));
        assert_ne!(host_id("node1"), host_id("node2"));
        assert_eq!(host_id(""), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn job_keys_are_random_and_nonzero() {
        let a = random_job_key().unwrap();
        let b = random_job_key().unwrap();
        assert_ne!(a, 0);
        assert_ne!(a, b, "two 64-bit draws collided");
    }

    #[test]
    fn the_process_identity_is_at_its_documented_offsets() {
        let bytes = sample().encode().unwrap();
        assert_eq!(bytes[89..93], 4242u32.to_le_bytes());
        assert_eq!(bytes[93..101], 4_026_531_836u64.to_le_bytes());
        assert_eq!(bytes[101..109], 123_456u64.to_le_bytes());
    }

    #[test]
    fn this_process_knows_its_pid_namespace_and_start_time() {
        let me = this_process();
        assert_eq!(me.pid, std::process::id());
        assert_ne!(me.pid_namespace, 0);
        assert_ne!(me.start_time, 0);
        assert_eq!(start_time_of(&me.pid.to_string()), Some(me.start_time));
        assert_eq!(start_time_of("0"), None);
    }

    #[test]
    fn this_machine_has_a_hostname() {
        let name = local_hostname().unwrap();
        assert!(!name.is_empty() && !name.contains('\n'));
    }
}
