//! `ffd run`: a local job of N `ffd agent` processes, with faults injected
//! on time, a live timeline, a summary and a JSON report.
//!
//! Owns: starting, signalling and reaping the agents, and the agent line
//! protocol ([`agent_line`], which `ffd agent` writes with the same type). Must not: touch the fabric or the protocol
//! Engine (the agents do), use `unsafe`, or leave a process behind on any
//! path. The pure part ([`Timeline`], [`agent_line`], [`fault`]) is kept
//! apart from the process handling ([`Launcher`]) so it is tested with
//! synthetic inputs.
//!
//! - [`cli`]: the options ([`cli::RunArgs`]) and [`cli::run`].
//! - [`Plan`]: what to run, and each agent's variables ([`Plan::env_of`]).
//! - [`Launcher`]: makes the job secret ([`SecretDir`]), serves the TCP
//!   rendezvous on `127.0.0.1:0`, spawns the agents with `FFD_BOOTSTRAP`,
//!   `FFD_RANK`, `FFD_SIZE`, `FFD_SECRET_FILE`, waits for every `ready`,
//!   injects the [`fault::Schedule`], shuts down, reaps, and removes the
//!   secret.
//! - [`cluster`]: with `--netns H`, the emulated hosts (network and UTS
//!   namespaces on a bridge) the agents are spawned into, and their links
//!   (shaped, cut, healed).
//! - [`Timeline`]: what the lines and the faults mean.
//! - [`startup`]: the CPU budget warning before a run, the start-up's
//!   progress while it happens, the agents' libfabric settings.

#![forbid(unsafe_code)]

pub mod agent_line;
pub mod cli;
pub mod cluster;
pub mod fault;
mod launcher;
mod plan;
mod process;
pub mod secret_dir;
mod signals;
pub mod startup;
mod timeline;

pub use agent_line::{AgentEvent, AgentLine, LineError, Stamp};
pub use launcher::{
    AbortHandle, AgentRecord, DEFAULT_SHUTDOWN_TIMEOUT, DEFAULT_TAIL, Ending, LaunchError,
    Launcher, Outcome, default_ready_timeout,
};
pub use plan::Plan;
pub use process::AgentCommand;
pub use secret_dir::SecretDir;
pub(crate) use signals::SignalCatcher;
pub use timeline::{AgentExit, Fact, FailureReport, FalseReport, Report, RunInfo, Timeline};
