//! `ffd rendezvous`: serves the TCP bootstrap for N ranks started by hand.
//!
//! Owns: the subcommand's options and output. Prints `FFD_BOOTSTRAP=addr`
//! (the address actually bound, so port 0 shows the chosen port) as the
//! first line of standard output for scripts, and progress on the log
//! stream (standard error).

use std::io::{self, Write};
use std::time::Duration;

use ffd::bootstrap::tcp::{DEFAULT_TIMEOUT, Rendezvous, RendezvousError, ServeEvent, ServeReport};
use ffd::config::{DURATION_FORM, format_duration, parse_duration};

/// Options of `ffd rendezvous`.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct RendezvousArgs {
    /// Number of ranks in the job.
    #[arg(short = 'n', long = "ranks", value_parser = clap::value_parser!(u32).range(1..))]
    pub ranks: u32,
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Bound on waiting for all ranks to connect, and on each round.
    #[arg(long, default_value = "60s", value_parser = duration_arg)]
    pub timeout: Duration,
    /// Also report each rank's connection and departure.
    #[arg(short, long)]
    pub verbose: bool,
}

impl Default for RendezvousArgs {
    fn default() -> Self {
        RendezvousArgs {
            ranks: 1,
            listen: "127.0.0.1:0".into(),
            timeout: DEFAULT_TIMEOUT,
            verbose: false,
        }
    }
}

fn duration_arg(text: &str) -> Result<Duration, String> {
    match parse_duration(text) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(format!(
            "`{text}` must be positive; accepted: {DURATION_FORM}"
        )),
        Err(e) => Err(format!("`{text}` {e}; accepted: {DURATION_FORM}")),
    }
}

/// Binds, prints the address on `out`, serves until every rank has
/// connected and closed, and logs progress on `log`.
pub fn run(
    args: &RendezvousArgs,
    out: &mut dyn Write,
    log: &mut dyn Write,
) -> Result<ServeReport, RendezvousError> {
    let server = Rendezvous::bind(args.listen.as_str(), args.ranks)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {}: {e}", args.listen)))?
        .timeout(args.timeout);
    let addr = server.local_addr()?;
    writeln!(out, "FFD_BOOTSTRAP={addr}")?;
    out.flush()?;
    let _ = writeln!(
        log,
        "ffd rendezvous: serving {} ranks on {addr} (timeout {})",
        args.ranks,
        format_duration(args.timeout)
    );
    let (ranks, verbose) = (args.ranks, args.verbose);
    let report = server.serve_with(|event| {
        let line = match event {
            ServeEvent::Connected { rank, peer } if verbose => {
                format!("rank {rank} connected from {peer}")
            }
            ServeEvent::Closed { rank } if verbose => format!("rank {rank} closed its connection"),
            ServeEvent::Connected { .. } | ServeEvent::Closed { .. } => return,
            ServeEvent::AllConnected => format!("all {ranks} ranks connected"),
            ServeEvent::RoundComplete { round, bytes } => {
                format!("round {round} complete ({bytes} bytes)")
            }
            ServeEvent::Stray { peer, why } => format!("dropped a connection from {peer}: {why}"),
        };
        let _ = writeln!(log, "ffd rendezvous: {line}");
    });
    match &report {
        Ok(r) => {
            let _ = writeln!(log, "ffd rendezvous: done after {} rounds", r.rounds);
        }
        Err(e) => {
            let _ = writeln!(log, "ffd rendezvous: {e}");
        }
    }
    report
}
