//! The `ffd` command: `ffd run`, `ffd sim`, `ffd info`, `ffd agent`, `ffd rendezvous`.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "ffd", version, about = "The fabric failure detector")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the TCP bootstrap for N ranks started by hand (they connect
    /// with FFD_BOOTSTRAP=host:port, FFD_RANK, FFD_SIZE, FFD_SECRET_FILE).
    Rendezvous(ffd_cli::rendezvous::RendezvousArgs),
    /// Run a local job of N agents, inject faults (--kill/--stop/--cont
    /// RANK@TIME), print the timeline and a summary; with --netns H, over
    /// H emulated hosts (network namespaces on a bridge).
    Run(ffd_cli::launch::cli::RunArgs),
    /// Run one rank configured by FFD_* (FFD_BOOTSTRAP, FFD_RANK, FFD_SIZE,
    /// ...), printing its events as JSON lines until stopped or excluded.
    Agent(ffd_cli::agent::AgentArgs),
    /// Print the effective FFD_* settings and their sources, the providers
    /// libfabric offers here, and where the progress thread would run.
    Info,
    /// Simulate N ranks on virtual time with injected faults.
    Sim(ffd_cli::sim::SimArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Rendezvous(args) => {
            let served =
                ffd_cli::rendezvous::run(&args, &mut std::io::stdout(), &mut std::io::stderr());
            if served.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Command::Agent(args) => ffd_cli::agent::run(&args),
        Command::Info => ffd_cli::info::run(&mut std::io::stdout(), &mut std::io::stderr()),
        Command::Run(args) => {
            ffd_cli::launch::cli::run(&args, &mut std::io::stdout(), &mut std::io::stderr())
        }
        Command::Sim(args) => ffd_cli::sim::run(&args),
    }
}
