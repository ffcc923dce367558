//! The TCP rendezvous: a server ([`Rendezvous`]) that the `ffd` launcher or
//! `ffd rendezvous` runs for N ranks, and a client ([`TcpBootstrap`]) that
//! each rank connects with (`FFD_BOOTSTRAP=host:port`, `FFD_RANK`,
//! `FFD_SIZE`, `FFD_SECRET_FILE`, `FFD_BOOTSTRAP_TIMEOUT`).
//!
//! Owns: the rendezvous protocol ([`wire`], [`auth`]) and its bounds. Must
//! not: block without a bound, let anyone without the job secret claim a
//! rank or see a record, let a stray or wrong connection abort the job
//! (it is dropped and counted by [`DropReason`]), or let one dead or
//! silent admitted rank leave the others waiting: the server aborts the
//! job and tells every rank why ([`AbortReason`]), and the client's error
//! carries that text.
//!
//! One connection carries any number of allgather rounds. The server relays:
//! a round completes when every rank has contributed to it, and every rank
//! then receives all contributions. The server exits when every rank has
//! connected and then closed its connection. `docs/design.md` §9 "The TCP rendezvous" says how
//! the two ends authenticate each other and what is dropped.

#![forbid(unsafe_code)]

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::{
    ConfigError, Env, format_duration, parse_duration, parse_integer, var, variable,
};
use crate::protocol::Rank;
use crate::protocol::ranks::format_ranks;

pub mod auth;
mod client;
mod coordinator;
mod reader;
mod server;
pub mod wire;

pub use client::TcpBootstrap;
pub use server::{
    DROP_EVENTS_PER_REASON, DropTally, Rendezvous, RendezvousError, RendezvousHandle,
    RendezvousStopper, ServeEvent, ServeReport,
};

/// Default bound on the TCP bootstrap's waits (`FFD_BOOTSTRAP_TIMEOUT`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Default bound on a connection's handshake (from accept to a HELLO that
/// holds): the smaller of this and the rendezvous timeout.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Default cap on connections not yet authenticated held at once: the
/// larger of this and the job size. At the cap, the oldest is dropped
/// ([`DropReason::Crowded`]).
pub const DEFAULT_MAX_UNAUTHENTICATED: u32 = 64;

/// What kind of abort a rendezvous sent; the number travels in ABORT frames.
/// (Codes 1 to 4 were the refusals of version 1, which aborted the job;
/// version 2 refuses a connection alone, see [`DropReason`].)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum AbortCode {
    NotConnected = 5,
    RoundTimeout = 6,
    Disconnected = 7,
    TooLarge = 8,
    Protocol = 9,
    Stopped = 10,
    /// A code this build does not know (from a newer server).
    Other = 0xffff,
}

impl AbortCode {
    pub fn from_u16(code: u16) -> AbortCode {
        use AbortCode::*;
        [
            NotConnected,
            RoundTimeout,
            Disconnected,
            TooLarge,
            Protocol,
            Stopped,
        ]
        .into_iter()
        .find(|c| *c as u16 == code)
        .unwrap_or(Other)
    }
}

/// Why the rendezvous dropped a connection without admitting it. Never a
/// reason to abort the job: one connection's claim cannot tell a stray
/// from a misconfigured rank (see [`AbortReason::NotConnected`] for how a
/// job that cannot complete still ends). The number travels as the code of
/// DENIED and REFUSED frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u16)]
pub enum DropReason {
    /// Not the rendezvous protocol: a first message that is not a HELLO,
    /// malformed, or over the handshake cap.
    Garbage = 1,
    /// A HELLO of another protocol version (told so in a DENIED).
    Version = 2,
    /// A HELLO whose proof fails: no job secret, or another one (told so in
    /// a DENIED).
    BadProof = 3,
    /// Sent nothing, or too little, within the handshake bound.
    Silent = 4,
    /// Closed before a whole HELLO.
    ClosedEarly = 5,
    /// The oldest unauthenticated connection when the cap on them was
    /// reached.
    Crowded = 6,
    /// Authenticated, but started for another job size (told so in a
    /// REFUSED).
    WrongSize = 7,
    /// Authenticated, but claimed a rank outside the job (REFUSED).
    RankOutOfRange = 8,
    /// Authenticated, but claimed a rank an authenticated client already
    /// holds (REFUSED): a rank started twice, or a leftover of a job that
    /// shared the secret file.
    RankTaken = 9,
}

impl DropReason {
    /// Every reason, in code order.
    pub const ALL: [DropReason; 9] = [
        DropReason::Garbage,
        DropReason::Version,
        DropReason::BadProof,
        DropReason::Silent,
        DropReason::ClosedEarly,
        DropReason::Crowded,
        DropReason::WrongSize,
        DropReason::RankOutOfRange,
        DropReason::RankTaken,
    ];

    /// The reason's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Garbage => "garbage",
            DropReason::Version => "other version",
            DropReason::BadProof => "bad proof",
            DropReason::Silent => "silent",
            DropReason::ClosedEarly => "closed early",
            DropReason::Crowded => "crowded out",
            DropReason::WrongSize => "wrong size",
            DropReason::RankOutOfRange => "rank out of range",
            DropReason::RankTaken => "rank taken",
        }
    }

    /// Whether only a client holding the job secret can cause it.
    pub fn is_authenticated(self) -> bool {
        matches!(
            self,
            DropReason::WrongSize | DropReason::RankOutOfRange | DropReason::RankTaken
        )
    }

    pub fn from_u16(code: u16) -> Option<DropReason> {
        DropReason::ALL.into_iter().find(|r| *r as u16 == code)
    }

    fn index(self) -> usize {
        self as usize - 1
    }
}

/// Connections dropped, by [`DropReason`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts([u64; DropReason::ALL.len()]);

impl DropCounts {
    pub fn get(&self, reason: DropReason) -> u64 {
        self.0[reason.index()]
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }

    pub(crate) fn add_n(&mut self, reason: DropReason, n: u64) {
        self.0[reason.index()] += n;
    }

    /// Each reason with a nonzero count.
    pub fn iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .into_iter()
            .map(|r| (r, self.get(r)))
            .filter(|&(_, n)| n > 0)
    }
}

/// `3 connections (1 bad proof, 2 silent)`.
impl fmt::Display for DropCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.total();
        write!(f, "{total} connection{}", if total == 1 { "" } else { "s" })?;
        for (i, (reason, n)) in self.iter().enumerate() {
            let sep = if i == 0 { " (" } else { ", " };
            write!(f, "{sep}{n} {}", reason.name())?;
        }
        if total > 0 {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// Why the rendezvous aborted the job. Its text is sent to every admitted
/// rank.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AbortReason {
    /// Not every rank was admitted in time. `meanwhile` says what came
    /// instead: a job that can never complete (every rank started with
    /// another size, or another secret) ends here, with the refusals
    /// named, rather than hanging.
    #[error("{} did not connect within {} ({connected} of {size} connected){meanwhile}", format_ranks(.missing), format_duration(*.after))]
    NotConnected {
        missing: Vec<Rank>,
        connected: u32,
        size: u32,
        after: Duration,
        meanwhile: Box<Meanwhile>,
    },
    #[error("{} did not contribute to round {round} within {}", format_ranks(.missing), format_duration(*.after))]
    RoundTimeout {
        round: u32,
        missing: Vec<Rank>,
        after: Duration,
    },
    #[error("rank {rank} disconnected before round {round} completed")]
    Disconnected { rank: Rank, round: u32 },
    #[error(
        "rank {rank}'s contribution of {len} bytes exceeds the limit of {} bytes",
        super::MAX_CONTRIBUTION
    )]
    TooLarge { rank: Rank, len: u64 },
    #[error("rank {rank} broke the rendezvous protocol: {what}")]
    Protocol { rank: Rank, what: String },
    #[error("the rendezvous was stopped")]
    Stopped,
}

/// What a rendezvous dropped while it waited for its ranks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meanwhile {
    pub dropped: DropCounts,
    /// The last refusal of each authenticated kind, in words.
    pub refusals: Vec<String>,
}

/// Nothing when nothing was dropped; else `; meanwhile it dropped …`.
impl fmt::Display for Meanwhile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.dropped.is_empty() {
            return Ok(());
        }
        write!(f, "; meanwhile it dropped {}", self.dropped)?;
        if !self.refusals.is_empty() {
            write!(f, ", last refused: {}", self.refusals.join("; "))?;
        }
        Ok(())
    }
}

impl AbortReason {
    pub fn code(&self) -> AbortCode {
        match self {
            AbortReason::NotConnected { .. } => AbortCode::NotConnected,
            AbortReason::RoundTimeout { .. } => AbortCode::RoundTimeout,
            AbortReason::Disconnected { .. } => AbortCode::Disconnected,
            AbortReason::TooLarge { .. } => AbortCode::TooLarge,
            AbortReason::Protocol { .. } => AbortCode::Protocol,
            AbortReason::Stopped => AbortCode::Stopped,
        }
    }
}

/// The TCP bootstrap's settings, from `FFD_BOOTSTRAP`, `FFD_RANK`,
/// `FFD_SIZE`, `FFD_SECRET_FILE` and `FFD_BOOTSTRAP_TIMEOUT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpEnv {
    /// `host:port` of the rendezvous (resolved at each connection attempt).
    pub addr: String,
    pub rank: Rank,
    pub size: u32,
    /// The job secret's file (read when connecting).
    pub secret_file: PathBuf,
    pub timeout: Duration,
}

impl TcpEnv {
    /// Reads and validates the variables; errors name the variable, the
    /// value and the accepted form.
    pub fn from_env(env: &Env) -> Result<TcpEnv, ConfigError> {
        let required = |name: &'static str| {
            env.value(name)?.ok_or(ConfigError::Missing {
                var: name,
                accepted: accepted(name),
            })
        };
        let invalid = |name: &'static str, value: &str, problem: String| ConfigError::Invalid {
            var: name,
            value: value.to_owned(),
            problem,
            accepted: accepted(name),
        };

        let addr = required(var::BOOTSTRAP)?;
        check_host_port(addr).map_err(|p| invalid(var::BOOTSTRAP, addr, p.to_owned()))?;

        let size_text = required(var::SIZE)?;
        let size: u32 = parse_integer(size_text).map_err(|p| invalid(var::SIZE, size_text, p))?;
        if size == 0 {
            return Err(invalid(var::SIZE, size_text, "must be at least 1".into()));
        }
        let rank_text = required(var::RANK)?;
        let rank: u32 = parse_integer(rank_text).map_err(|p| invalid(var::RANK, rank_text, p))?;
        if rank >= size {
            return Err(invalid(
                var::RANK,
                rank_text,
                format!("is not below FFD_SIZE=`{size}`"),
            ));
        }
        let secret_file = PathBuf::from(required(var::SECRET_FILE)?);
        let timeout = timeout_from_env(env)?;
        Ok(TcpEnv {
            addr: addr.trim().to_owned(),
            rank,
            size,
            secret_file,
            timeout,
        })
    }
}

/// `FFD_BOOTSTRAP_TIMEOUT` (a positive duration), or [`DEFAULT_TIMEOUT`]
/// when unset: the bound on the bootstrap's waits, for the TCP and the PMIx
/// bootstraps alike.
pub fn timeout_from_env(env: &Env) -> Result<Duration, ConfigError> {
    let invalid = |value: &str, problem: String| ConfigError::Invalid {
        var: var::BOOTSTRAP_TIMEOUT,
        value: value.to_owned(),
        problem,
        accepted: accepted(var::BOOTSTRAP_TIMEOUT),
    };
    match env.value(var::BOOTSTRAP_TIMEOUT)? {
        None => Ok(DEFAULT_TIMEOUT),
        Some(text) => {
            let d = parse_duration(text).map_err(|e| invalid(text, e.to_string()))?;
            if d.is_zero() {
                return Err(invalid(text, "must be positive".into()));
            }
            Ok(d)
        }
    }
}

fn accepted(name: &'static str) -> &'static str {
    variable(name).map_or("", |v| v.accepted)
}

/// `host:port` or `[v6]:port`, without resolving the host.
fn check_host_port(text: &str) -> Result<(), &'static str> {
    let text = text.trim();
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err("has no port");
    };
    if host.is_empty() {
        return Err("has no host");
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err("has an IPv6 host without brackets");
    }
    if host.chars().any(char::is_whitespace) {
        return Err("contains spaces");
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err("has no valid port (1 to 65535)"),
        Ok(_) => Ok(()),
    }
}
