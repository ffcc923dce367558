//! The address exchange: one allgather of [`PeerRecord`]s over a
//! [`Bootstrap`], validated.
//!
//! Owns: the rules a job's records must satisfy together. Every rank
//! receives the same records and runs the same checks, so a misconfigured
//! job fails on every rank, each message naming the other rank and both
//! values from this rank's point of view. Must not: touch the fabric or
//! the Engine (the start-up steps in `startup` do, with the [`JobView`]).

#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use super::record::{FINGERPRINT_LEN, PeerRecord, RecordError, SecretClaim};
use crate::bootstrap::secret::JobSecret;
use crate::bootstrap::{Bootstrap, BootstrapError};
use crate::config::var;
use crate::protocol::Rank;

/// Every rank's record, and what rank 0 decided for the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobView {
    /// This process's rank.
    pub rank: Rank,
    pub size: u32,
    /// Rank 0's random job key, stamped on every protocol message.
    pub job_key: u64,
    /// Rank 0's ring seed, for the `shuffle` order.
    pub ring_seed: u64,
    /// The job's secret as rank 0 drew it, when no rank holds one of its
    /// own; `None` when every rank holds the same one (checked by
    /// fingerprint).
    pub drawn_secret: Option<JobSecret>,
    /// `records[r]` is rank r's.
    pub records: Vec<PeerRecord>,
}

impl JobView {
    pub fn record(&self, rank: Rank) -> Option<&PeerRecord> {
        self.records.get(rank as usize)
    }

    /// Whether rank `of`'s messages reach this rank over the fabric:
    /// always, unless `by_mail` (same-host messages through the host's
    /// mailboxes, `runtime/mail.rs`) and `of` shares this rank's host.
    pub fn over_fabric(&self, of: &PeerRecord, by_mail: bool) -> bool {
        !by_mail || of.host_id != self.records[self.rank as usize].host_id
    }

    /// Whether the job needs no fabric at all: every rank on this rank's
    /// host, each able to use the host's mailboxes (its record says so), so
    /// that the node segment carries every message (`runtime/mail.rs`).
    /// Every rank decides the same from the same records.
    pub fn one_host_by_mail(&self) -> bool {
        let host = self.records[self.rank as usize].host_id;
        self.records.iter().all(|r| r.host_id == host && r.mailbox)
    }

    /// A dense node index per rank (`0..node_count`), numbering hosts by
    /// their first rank: the same on every rank of the job.
    pub fn nodes(&self) -> Vec<u32> {
        let mut index: BTreeMap<&str, u32> = BTreeMap::new();
        self.records
            .iter()
            .map(|r| {
                let next = index.len() as u32;
                *index.entry(r.hostname.as_str()).or_insert(next)
            })
            .collect()
    }
}

/// Why the exchange failed. Messages read from this rank's point of view.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// This rank's own record is unusable (a bug in the caller).
    #[error("this rank's bootstrap record is unusable: {0}")]
    Local(String),
    #[error("rank {rank}'s bootstrap record {source}")]
    Record {
        rank: Rank,
        #[source]
        source: RecordError,
    },
    #[error("the bootstrap returned {got} contributions for a job of {size} ranks")]
    WrongCount { got: usize, size: u32 },
    #[error("the records of ranks {first} and {second} both claim rank {claimed}")]
    DuplicateRank {
        claimed: Rank,
        first: Rank,
        second: Rank,
    },
    #[error("the bootstrap put a record claiming rank {claimed} in rank {position}'s place")]
    Misplaced { position: Rank, claimed: Rank },
    #[error("rank {rank} runs ffd protocol version {theirs}, this rank runs {ours}")]
    VersionMismatch { rank: Rank, theirs: u16, ours: u16 },
    #[error("rank {rank} was started for a job of {theirs} ranks, this rank for {ours}")]
    SizeMismatch { rank: Rank, theirs: u32, ours: u32 },
    #[error("rank {rank} uses provider `{theirs}`, this rank uses `{ours}`")]
    ProviderMismatch {
        rank: Rank,
        theirs: String,
        ours: String,
    },
    /// A job-wide setting ([`Setting::job_wide`](crate::config::Setting::job_wide))
    /// differs: `setting` is its variable, each value its canonical text.
    #[error("rank {rank} runs with {setting}={theirs}, this rank with {setting}={ours}")]
    SettingMismatch {
        rank: Rank,
        setting: &'static str,
        theirs: String,
        ours: String,
    },
    /// Another number of job-wide settings: the ranks' builds mark other
    /// settings job-wide under one record version.
    #[error(
        "rank {rank} carries {theirs} job-wide settings, this rank {ours}: every rank must run \
         the same ffd build"
    )]
    SettingCount {
        rank: Rank,
        theirs: usize,
        ours: usize,
    },
    #[error("rank {rank} contributed an empty fabric address")]
    NoAddress { rank: Rank },
    #[error("rank 0 contributed no job key")]
    NoJobKey,
    #[error(
        "rank {rank} holds {theirs}, this rank holds {ours}: every rank must be given the same \
         job secret ({} or the launcher's) or none",
        var::SECRET_FILE
    )]
    SecretMismatch {
        rank: Rank,
        theirs: String,
        ours: String,
    },
    #[error("no rank holds a job secret and rank 0 contributed none")]
    NoSecret,
}

/// Runs the address exchange: contributes `mine`, and checks that every
/// rank runs the same protocol version, job size, provider and job-wide
/// settings, that every rank sent a fabric address or none did, that no rank is claimed twice, that every rank holds the same
/// job secret (by fingerprint) or none, and that rank 0 sent a job key and,
/// when nobody holds a secret, the one it drew.
pub fn exchange<B: Bootstrap + ?Sized>(
    bootstrap: &mut B,
    mine: &PeerRecord,
) -> Result<JobView, ExchangeError> {
    let (me, size) = (bootstrap.rank(), bootstrap.size());
    // Take part in the allgather even with a bad record of our own, so that
    // the other ranks fail on it rather than wait for this one.
    let (bytes, local_error) = match mine.encode() {
        Ok(bytes) => (bytes, None),
        Err(e) => (Vec::new(), Some(format!("it {e}"))),
    };
    let local_error = local_error.or_else(|| {
        (mine.rank != me || mine.job_size != size).then(|| {
            format!(
                "it says rank {} of {}, the bootstrap says rank {me} of {size}",
                mine.rank, mine.job_size
            )
        })
    });
    let all = bootstrap.allgather(&bytes)?;
    if let Some(e) = local_error {
        return Err(ExchangeError::Local(e));
    }
    if all.len() != size as usize {
        return Err(ExchangeError::WrongCount {
            got: all.len(),
            size,
        });
    }
    let records = all
        .iter()
        .zip(0..)
        .map(|(b, rank)| {
            PeerRecord::decode(b).map_err(|source| ExchangeError::Record { rank, source })
        })
        .collect::<Result<Vec<_>, _>>()?;

    let mut claimed: BTreeMap<Rank, Rank> = BTreeMap::new();
    for (position, r) in (0..).zip(&records) {
        if let Some(&first) = claimed.get(&r.rank) {
            return Err(ExchangeError::DuplicateRank {
                claimed: r.rank,
                first,
                second: position,
            });
        }
        claimed.insert(r.rank, position);
    }
    // A round without fabric addresses (start-up's first, which decides
    // whether the job needs the fabric) carries none at all; otherwise
    // every rank's.
    let with_addresses = records.iter().any(|r| !r.fabric_addr.is_empty());
    for (position, r) in (0..).zip(&records) {
        if r.rank != position {
            return Err(ExchangeError::Misplaced {
                position,
                claimed: r.rank,
            });
        }
        check_agreement(mine, r)?;
        if with_addresses && r.fabric_addr.is_empty() {
            return Err(ExchangeError::NoAddress { rank: r.rank });
        }
    }
    let Some(rank0) = records.first() else {
        // Only a bootstrap claiming zero ranks gets here.
        return Err(ExchangeError::WrongCount { got: 0, size });
    };
    if rank0.job_key == 0 {
        return Err(ExchangeError::NoJobKey);
    }
    let drawn_secret = match (&mine.secret, &rank0.secret) {
        (SecretClaim::Held { .. }, _) => None,
        (_, SecretClaim::Drawn(secret)) => Some(secret.clone()),
        _ => return Err(ExchangeError::NoSecret),
    };
    Ok(JobView {
        rank: me,
        size,
        job_key: rank0.job_key,
        ring_seed: rank0.ring_seed,
        drawn_secret,
        records,
    })
}

/// How a secret claim reads in an error: which secret, never the secret.
fn describe_secret(claim: &SecretClaim) -> Option<[u8; FINGERPRINT_LEN]> {
    match claim {
        SecretClaim::Held { fingerprint } => Some(*fingerprint),
        SecretClaim::None | SecretClaim::Drawn(_) => None,
    }
}

fn held_text(fingerprint: Option<[u8; FINGERPRINT_LEN]>) -> String {
    match fingerprint {
        Some(f) => format!(
            "a job secret with fingerprint {}",
            f.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
        None => "no job secret of its own".to_owned(),
    }
}

fn check_agreement(mine: &PeerRecord, r: &PeerRecord) -> Result<(), ExchangeError> {
    let rank = r.rank;
    if r.protocol_version != mine.protocol_version {
        return Err(ExchangeError::VersionMismatch {
            rank,
            theirs: r.protocol_version,
            ours: mine.protocol_version,
        });
    }
    if r.job_size != mine.job_size {
        return Err(ExchangeError::SizeMismatch {
            rank,
            theirs: r.job_size,
            ours: mine.job_size,
        });
    }
    if r.provider != mine.provider {
        return Err(ExchangeError::ProviderMismatch {
            rank,
            theirs: r.provider.clone(),
            ours: mine.provider.clone(),
        });
    }
    let (theirs, ours) = (describe_secret(&r.secret), describe_secret(&mine.secret));
    if theirs != ours {
        return Err(ExchangeError::SecretMismatch {
            rank,
            theirs: held_text(theirs),
            ours: held_text(ours),
        });
    }
    // The job-wide settings, as the settings table marks them: the same
    // number (one build's table), then each value.
    if r.settings.len() != mine.settings.len() {
        return Err(ExchangeError::SettingCount {
            rank,
            theirs: r.settings.len(),
            ours: mine.settings.len(),
        });
    }
    for ((setting, theirs), (_, ours)) in r.settings.shown().zip(mine.settings.shown()) {
        if theirs != ours {
            return Err(ExchangeError::SettingMismatch {
                rank,
                setting,
                theirs: theirs.to_owned(),
                ours: ours.to_owned(),
            });
        }
    }
    Ok(())
}
