//! `ffd rendezvous`: serves the TCP bootstrap for N ranks started by hand.
//!
//! Owns: the subcommand's options, its secret file when it makes one, and
//! its output. Prints `FFD_BOOTSTRAP=addr` (the address actually bound, so
//! port 0 shows the chosen port) as the first line of standard output and
//! `FFD_SECRET_FILE=path` as the second, for scripts; progress on the log
//! stream (standard error). Must not: leave a secret it wrote behind on
//! any way out it can see (an error, the end, SIGINT or SIGTERM), or print
//! the secret itself.

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ffd::bootstrap::secret::{JobSecret, SECRET_FILE_FORM, SecretError};
use ffd::bootstrap::tcp::{
    DEFAULT_TIMEOUT, DropTally, Rendezvous, RendezvousError, RendezvousStopper, ServeEvent,
    ServeReport,
};
use ffd::config::{DURATION_FORM, format_duration, parse_duration};
use nix::sys::signal::Signal;

use crate::launch::{SecretDir, SignalCatcher};

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
    /// The job secret: an existing file of mode 0600 holding 64 hex digits.
    /// Without it, a fresh secret is written to a new private directory,
    /// printed as FFD_SECRET_FILE=path, and removed when the rendezvous ends.
    #[arg(long, value_name = "PATH")]
    pub secret_file: Option<PathBuf>,
    /// Also report each rank's connection and departure, and each
    /// connection dropped.
    #[arg(short, long)]
    pub verbose: bool,
}

impl Default for RendezvousArgs {
    fn default() -> Self {
        RendezvousArgs {
            ranks: 1,
            listen: "127.0.0.1:0".into(),
            timeout: DEFAULT_TIMEOUT,
            secret_file: None,
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

/// The secret and, when this command made it, the directory to remove.
fn secret(args: &RendezvousArgs) -> io::Result<(JobSecret, PathBuf, Option<SecretDir>)> {
    match &args.secret_file {
        Some(path) => match JobSecret::read_file(path) {
            Ok(secret) => Ok((secret, path.clone(), None)),
            Err(SecretError::File { path, problem }) => Err(io::Error::other(format!(
                "--secret-file {}: {problem}; accepted: {SECRET_FILE_FORM}",
                path.display()
            ))),
            Err(e) => Err(io::Error::other(e.to_string())),
        },
        None => {
            let secret = JobSecret::random().map_err(|e| io::Error::other(e.to_string()))?;
            let dir = SecretDir::create(&secret, "ffd-rendezvous")?;
            Ok((secret, dir.file().to_owned(), Some(dir)))
        }
    }
}

/// Binds, prints the address and the secret file on `out`, serves until
/// every rank has connected and closed (or SIGINT/SIGTERM stops it), and
/// logs progress on `log`.
pub fn run(
    args: &RendezvousArgs,
    out: &mut dyn Write,
    log: &mut dyn Write,
) -> Result<ServeReport, RendezvousError> {
    let mut tally = None;
    let report = serve(args, out, log, &mut tally);
    match &report {
        Ok(r) => {
            let _ = writeln!(log, "ffd rendezvous: done after {} rounds", r.rounds);
        }
        Err(e) => {
            let _ = writeln!(log, "ffd rendezvous: {e}");
        }
    }
    let dropped = tally.map(|t| t.get()).unwrap_or_default();
    if !dropped.is_empty() {
        let _ = writeln!(log, "ffd rendezvous: dropped {dropped}");
    }
    report
}

fn serve(
    args: &RendezvousArgs,
    out: &mut dyn Write,
    log: &mut dyn Write,
    tally: &mut Option<DropTally>,
) -> Result<ServeReport, RendezvousError> {
    // First, so that no way out skips the clean-up below: a signal before
    // the server serves is remembered, and stops it as soon as it can.
    let caught = Arc::new(Mutex::new((None::<Signal>, None::<RendezvousStopper>)));
    let _signals = {
        let caught = Arc::clone(&caught);
        SignalCatcher::install(move |signal| {
            if let Ok(mut c) = caught.lock() {
                c.0.get_or_insert(signal);
                if let Some(stopper) = &c.1 {
                    stopper.stop();
                }
            }
            true
        })?
    };
    // Dropped last: the secret outlives the serve.
    let (secret, secret_path, _made) = secret(args)?;
    let server = Rendezvous::bind(args.listen.as_str(), args.ranks, &secret)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {}: {e}", args.listen)))?
        .timeout(args.timeout);
    let addr = server.local_addr()?;
    *tally = Some(server.tally());
    if let Ok(mut c) = caught.lock() {
        if c.0.is_some() {
            server.stopper().stop();
        }
        c.1 = Some(server.stopper());
    }
    writeln!(out, "FFD_BOOTSTRAP={addr}")?;
    writeln!(out, "FFD_SECRET_FILE={}", secret_path.display())?;
    out.flush()?;
    let _ = writeln!(
        log,
        "ffd rendezvous: serving {} ranks on {addr} (timeout {}), secret in {}",
        args.ranks,
        format_duration(args.timeout),
        secret_path.display()
    );
    let (ranks, verbose) = (args.ranks, args.verbose);
    let served = server.serve_with(|event| {
        let line = match event {
            ServeEvent::Connected { rank, peer } if verbose => {
                format!("rank {rank} connected from {peer}")
            }
            ServeEvent::Closed { rank } if verbose => format!("rank {rank} closed its connection"),
            ServeEvent::Dropped {
                peer,
                reason,
                detail,
            } if verbose => {
                format!(
                    "dropped a connection from {peer} ({}): {detail}",
                    reason.name()
                )
            }
            ServeEvent::Connected { .. }
            | ServeEvent::Closed { .. }
            | ServeEvent::Dropped { .. } => {
                return;
            }
            ServeEvent::AllConnected => format!("all {ranks} ranks connected"),
            ServeEvent::RoundComplete { round, bytes } => {
                format!("round {round} complete ({bytes} bytes)")
            }
        };
        let _ = writeln!(log, "ffd rendezvous: {line}");
    });
    if let Some(signal) = caught.lock().ok().and_then(|c| c.0) {
        let _ = writeln!(log, "ffd rendezvous: interrupted by {signal}");
    }
    served
}
