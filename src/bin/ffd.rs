//! The `ffd` command: `ffd run`, `ffd sim`, `ffd info`, `ffd agent`, `ffd rendezvous`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "ffd", version, about = "ffd, the fabric failure detector")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate N ranks on virtual time with injected faults.
    Sim(ffd::sim::cli::SimArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Sim(args) => ffd::sim::cli::run(&args),
    }
}
