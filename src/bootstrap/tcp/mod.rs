//! The TCP rendezvous: a server ([`Rendezvous`]) that the `ffd` launcher or
//! `ffd rendezvous` runs for N ranks, and a client ([`TcpBootstrap`]) that
//! each rank connects with (`FFD_BOOTSTRAP=host:port`, `FFD_RANK`,
//! `FFD_SIZE`, `FFD_BOOTSTRAP_TIMEOUT`).
//!
//! Owns: the rendezvous protocol ([`wire`]) and its timeouts. Must not:
//! block without a bound on the client side, or let one dead or wrong client
//! leave the others waiting: the server aborts the job and tells every
//! client why ([`AbortReason`]), and the client's error carries that text.
//!
//! One connection carries any number of allgather rounds. The server relays:
//! a round completes when every rank has contributed to it, and every rank
//! then receives all contributions. The server exits when every rank has
//! connected and then closed its connection.

#![forbid(unsafe_code)]

use std::time::Duration;

use crate::config::{
    ConfigError, Env, format_duration, parse_duration, parse_integer, var, variable,
};
use crate::protocol::Rank;
use crate::protocol::ranks::format_ranks;

mod client;
mod server;
pub mod wire;

pub use client::TcpBootstrap;
pub use server::{Rendezvous, RendezvousError, RendezvousHandle, ServeEvent, ServeReport};

/// Default bound on the TCP bootstrap's waits (`FFD_BOOTSTRAP_TIMEOUT`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// What kind of abort a rendezvous sent; the number travels in ABORT frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum AbortCode {
    VersionMismatch = 1,
    SizeMismatch = 2,
    RankOutOfRange = 3,
    DuplicateRank = 4,
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
            VersionMismatch,
            SizeMismatch,
            RankOutOfRange,
            DuplicateRank,
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

/// Why the rendezvous aborted the job. Its text is sent to every client.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AbortReason {
    #[error(
        "rank {rank} speaks rendezvous protocol version {client}, the rendezvous speaks {server}"
    )]
    VersionMismatch {
        rank: Rank,
        client: u16,
        server: u16,
    },
    #[error("rank {rank} was started for a job of {claimed} ranks, the rendezvous serves {size}")]
    SizeMismatch { rank: Rank, claimed: u32, size: u32 },
    #[error("a client claimed rank {rank}, but the job's ranks are 0 to {}", .size - 1)]
    RankOutOfRange { rank: Rank, size: u32 },
    #[error("two clients claimed rank {rank} (from {first} and {second})")]
    DuplicateRank {
        rank: Rank,
        first: String,
        second: String,
    },
    #[error("{} did not connect within {} ({connected} of {size} connected)", format_ranks(.missing), format_duration(*.after))]
    NotConnected {
        missing: Vec<Rank>,
        connected: u32,
        size: u32,
        after: Duration,
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

impl AbortReason {
    pub fn code(&self) -> AbortCode {
        match self {
            AbortReason::VersionMismatch { .. } => AbortCode::VersionMismatch,
            AbortReason::SizeMismatch { .. } => AbortCode::SizeMismatch,
            AbortReason::RankOutOfRange { .. } => AbortCode::RankOutOfRange,
            AbortReason::DuplicateRank { .. } => AbortCode::DuplicateRank,
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
/// `FFD_SIZE` and `FFD_BOOTSTRAP_TIMEOUT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpEnv {
    /// `host:port` of the rendezvous (resolved at each connection attempt).
    pub addr: String,
    pub rank: Rank,
    pub size: u32,
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
        let timeout = timeout_from_env(env)?;
        Ok(TcpEnv {
            addr: addr.trim().to_owned(),
            rank,
            size,
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
