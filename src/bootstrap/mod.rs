//! The transport ranks exchange bytes over at start: the [`Bootstrap`]
//! trait (an allgather of byte strings), its implementations, and
//! [`from_env`], the one choice between them for a process a launcher
//! started.
//!
//! Owns: the bootstrap collectives (embedder's allgather adapter, TCP rendezvous,
//! PMIx, in-process groups for tests) and their own `FFD_*` variables.
//! Must not: know what the bytes mean (the peer records and their
//! validation are the runtime's start-up, `runtime::startup`), touch the
//! fabric or the protocol Engine, import from the protocol anything but
//! ranks, or block without a bound (every wait of ours has a timeout; a
//! embedder's collective is the embedder's business).
//!
//! Implementations:
//! - [`EmbedderAllgather`]: the embedding case; the embedder passes a fixed-length
//!   allgather (like `MPI_Allgather`), as the C ABI's `ffd_oob_t` will.
//! - [`tcp::TcpBootstrap`] with [`tcp::Rendezvous`]: `FFD_BOOTSTRAP`,
//!   `FFD_RANK`, `FFD_SIZE`, `FFD_SECRET_FILE`, for the `ffd` launcher and
//!   ranks started by hand; authenticated by the job secret.
//! - `pmix::PmixBootstrap` (feature `pmix`): PMIx Put/Commit/Fence/Get
//!   through the server of `mpirun`, `prterun` or `srun --mpi=pmix`.
//! - [`InProcessBootstrap`]: threads of one process standing in for ranks.
//!
//! Unlike a plain allgather function, `allgather` takes `&mut self`: a bootstrap
//! is driven by one thread through a sequence of rounds that must happen in
//! the same order on every rank, a TCP client owns its stream, and an embedder's
//! C callback is an `FnMut`. Sharing one between threads has no meaning.

#![deny(unsafe_code)]

use std::time::Duration;

use crate::config::{ConfigError, Env, format_duration, var};
use crate::protocol::Rank;

mod embedder;
mod in_process;
#[cfg(feature = "pmix")]
#[allow(unsafe_code)]
pub mod pmix;
pub mod secret;
pub mod tcp;

pub use embedder::EmbedderAllgather;
pub use in_process::InProcessBootstrap;

/// Largest contribution of one rank to one allgather round, in bytes.
/// A start-up peer record is well under 1 KiB; this bounds what an
/// untrusted peer can make every rank allocate.
pub const MAX_CONTRIBUTION: usize = 1 << 20;

/// An allgather among the ranks of a job, usable for several rounds.
pub trait Bootstrap {
    /// This process's rank, `0..size`.
    fn rank(&self) -> Rank;
    /// The number of ranks.
    fn size(&self) -> u32;
    /// Contributes `mine` and returns every rank's contribution, indexed by
    /// rank (this rank's included). Contributions may differ in length.
    /// Every rank must call it the same number of times; a call with an
    /// empty contribution is a barrier.
    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError>;
    /// The job's secret when this transport already holds one that every
    /// rank shares (the TCP rendezvous reads `FFD_SECRET_FILE` to
    /// authenticate itself). `None` (the default): start-up takes it from
    /// `FFD_SECRET_FILE`, or rank 0 draws one and hands it to the others
    /// through this allgather, which must then be the embedder's own channel.
    fn secret(&self) -> Option<&secret::JobSecret> {
        None
    }
}

impl<B: Bootstrap + ?Sized> Bootstrap for &mut B {
    fn rank(&self) -> Rank {
        (**self).rank()
    }
    fn size(&self) -> u32 {
        (**self).size()
    }
    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        (**self).allgather(mine)
    }
    fn secret(&self) -> Option<&secret::JobSecret> {
        (**self).secret()
    }
}

impl<B: Bootstrap + ?Sized> Bootstrap for Box<B> {
    fn rank(&self) -> Rank {
        (**self).rank()
    }
    fn size(&self) -> u32 {
        (**self).size()
    }
    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        (**self).allgather(mine)
    }
    fn secret(&self) -> Option<&secret::JobSecret> {
        (**self).secret()
    }
}

/// The bootstrap a process started by a launcher uses when its embedder lent
/// no allgather of its own: an explicit `FFD_BOOTSTRAP` (the TCP rendezvous
/// of `ffd run`/`ffd rendezvous`) first, else PMIx when this process was
/// started by a PMIx launcher (`mpirun`, `prterun`, `srun --mpi=pmix`; the
/// `pmix` feature). `ffd agent` and `ffd_init` with a NULL `oob` both come
/// here. Neither available is [`BootstrapError::Unavailable`] naming both
/// ways; a malformed `FFD_*` variable is [`BootstrapError::Config`].
pub fn from_env(env: &Env) -> Result<Box<dyn Bootstrap>, BootstrapError> {
    if env.get(var::BOOTSTRAP).is_some() {
        return Ok(Box::new(tcp::TcpBootstrap::connect_with_env(env)?));
    }
    #[cfg(feature = "pmix")]
    if pmix::PmixBootstrap::is_available() {
        return Ok(Box::new(pmix::PmixBootstrap::init_with_env(env)?));
    }
    let pmix = if cfg!(feature = "pmix") {
        "this process was not started by a PMIx launcher (PMIX_NAMESPACE and PMIX_RANK are not set)"
    } else {
        "this build has no PMIx bootstrap (the `pmix` feature)"
    };
    Err(BootstrapError::Unavailable {
        bootstrap: "launcher",
        why: format!(
            "{} is not set (set it to the host:port of an `ffd rendezvous -n N`, with {}, {} \
             and {}), and {pmix}",
            var::BOOTSTRAP,
            var::RANK,
            var::SIZE,
            var::SECRET_FILE
        ),
    })
}

/// Why a bootstrap round failed. Every variant says what was waited for,
/// or who broke the round.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// Bad arguments to a constructor (rank not below size, empty group).
    #[error("invalid bootstrap parameters: {0}")]
    Invalid(String),
    /// An `FFD_*` bootstrap variable is missing or malformed.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A rank's contribution is over [`MAX_CONTRIBUTION`].
    #[error(
        "rank {rank}'s contribution of {len} bytes exceeds the limit of {MAX_CONTRIBUTION} bytes"
    )]
    TooLarge { rank: Rank, len: u64 },
    /// The embedder's allgather callback reported a failure.
    #[error("the embedder's allgather failed: {0}")]
    Embedder(String),
    /// The embedder's allgather returned data that cannot be right (this
    /// rank's own contribution not at its position).
    #[error("the embedder's allgather is inconsistent: {0}")]
    EmbedderInconsistent(String),
    /// A bounded wait ran out.
    #[error("timed out after {} waiting for {waiting}", format_duration(*.after))]
    Timeout { after: Duration, waiting: String },
    /// A member of an in-process group left (dropped its handle) while
    /// others still needed it.
    #[error("rank {rank} left the group before round {round} completed")]
    PeerLeft { rank: Rank, round: u32 },
    /// Another member of an in-process group failed, which fails the group.
    #[error("the bootstrap group failed: {0}")]
    GroupFailed(String),
    /// The rendezvous could not be reached within the bound.
    #[error("could not reach the rendezvous at {addr} within {}: {source}", format_duration(*.after))]
    Connect {
        addr: String,
        after: Duration,
        #[source]
        source: std::io::Error,
    },
    /// The connection to the rendezvous failed.
    #[error("the connection to the rendezvous at {addr} failed {when}: {source}")]
    Io {
        addr: String,
        when: String,
        #[source]
        source: std::io::Error,
    },
    /// The rendezvous closed the connection.
    #[error("the rendezvous at {addr} closed the connection {when}")]
    Closed { addr: String, when: String },
    /// The rendezvous aborted the job and said why (the same text reaches
    /// every rank).
    #[error("the rendezvous at {addr} aborted the job: {message}")]
    Aborted {
        addr: String,
        code: tcp::AbortCode,
        message: String,
    },
    /// The rendezvous sent something this client cannot read.
    #[error("the rendezvous at {addr} sent a malformed reply: {what}")]
    Malformed { addr: String, what: String },
    /// The rendezvous refused this rank and said why; the job goes on
    /// without this connection. `authenticated`: the refusal came sealed,
    /// from a server that proved it holds the job secret (a wrong size, or
    /// a rank already held); else before authentication (this client's
    /// proof failed, or its version differs).
    #[error("the rendezvous at {addr} refused this rank: {message}")]
    Refused {
        addr: String,
        reason: Option<tcp::DropReason>,
        message: String,
        authenticated: bool,
    },
    /// What answered at the rendezvous's address did not prove it holds the
    /// job secret: a frame's tag failed.
    #[error(
        "the rendezvous at {addr} did not prove it holds the job secret ({what}); \
         is it this job's rendezvous, and FFD_SECRET_FILE the file it was given?"
    )]
    Unauthentic { addr: String, what: String },
    /// The rendezvous speaks another protocol version.
    #[error(
        "the rendezvous at {addr} speaks rendezvous protocol version {server}, this rank speaks {client}"
    )]
    VersionMismatch {
        addr: String,
        server: u16,
        client: u16,
    },
    /// The job secret could not be read (`FFD_SECRET_FILE`).
    #[error(transparent)]
    Secret(#[from] secret::SecretError),
    /// This process was not started in a way this bootstrap can use (e.g.
    /// the PMIx bootstrap outside `mpirun`/`srun`).
    #[error("the {bootstrap} bootstrap cannot be used here: {why}")]
    Unavailable {
        bootstrap: &'static str,
        why: String,
    },
    /// A PMIx call returned an error status (the `pmix` feature): the call,
    /// what it was doing, and PMIx's text for the status.
    #[error("{call} failed {when}: {text} (PMIx status {status})")]
    Pmix {
        call: &'static str,
        when: String,
        status: i32,
        text: String,
    },
    /// An earlier call on this bootstrap failed, so it cannot be used again.
    #[error("an earlier bootstrap call failed: {0}")]
    Failed(String),
}
