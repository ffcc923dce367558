//! `ffd agent`: one rank of a job, configured by the `FFD_*` environment,
//! printing what its detector learns as JSON lines on stdout.
//!
//! Owns: choosing the bootstrap (`FFD_BOOTSTRAP` TCP rendezvous, or PMIx
//! under `mpirun` with the `pmix` feature), running one [`Detector`], and
//! the agent side of the line protocol that `ffd run` reads (see
//! [`crate::launch`]). Must not: decide anything about failures itself.
//!
//! Lines (one JSON object each; `t_ms` is time since the detector started,
//! `unix_ms` the wall clock, so a launcher can merge ranks' timelines):
//!
//! ```text
//! {"event":"ready","me":3,"pid":1234,"core":1,"t_ms":0.0,"unix_ms":...}
//! {"event":"failed","me":3,"rank":5,"cause":"inband","detector":4,"hops":0,"epoch":1,...}
//! {"event":"left","me":3,"rank":5,...}
//! {"event":"self_excluded","me":3,"by":4,...}
//! {"event":"slow_emitter","me":3,"rank":2,"late_ms":37.0,...}
//! {"event":"payload","me":3,"origin":1,"seq":0,"text":"revoke",...}
//! {"event":"stats","me":3,"stats":{...}}
//! {"event":"exit","me":3,...}
//! ```
//!
//! It stops, leaving cleanly, on SIGTERM or SIGINT, and with
//! `--stdin-control` also when stdin reaches EOF or reads `shutdown`. It
//! stops by itself once the others have excluded it.

use std::io::{self, BufRead, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use serde_json::{Value, json};

use ffd::bootstrap::{self, Bootstrap, BootstrapError};
use ffd::config::{Config, Env};
use ffd::protocol::Event;
use ffd::runtime::{Detector, DetectorEvent};

/// `ffd agent` options.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AgentArgs {
    /// Leave cleanly when stdin reaches EOF or reads the line `shutdown`
    /// (what `ffd run` uses to end a job).
    #[arg(long)]
    pub stdin_control: bool,
}

/// Runs one rank until it is told to stop or is excluded.
pub fn run(args: &AgentArgs) -> ExitCode {
    match run_agent(args, &mut io::stdout().lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(AgentError::Usage(e)) => {
            eprintln!("ffd agent: {e}");
            ExitCode::from(2)
        }
        Err(AgentError::Failed(e)) => {
            eprintln!("ffd agent: {e}");
            ExitCode::FAILURE
        }
    }
}

enum AgentError {
    /// Bad settings: nothing started.
    Usage(String),
    /// Could not start, or the output went away.
    Failed(String),
}

fn run_agent(args: &AgentArgs, out: &mut dyn Write) -> Result<(), AgentError> {
    let env = Env::process();
    let config = Config::from_env().map_err(|e| AgentError::Usage(e.to_string()))?;
    for warning in config.warnings() {
        eprintln!("ffd agent: warning: {warning}");
    }
    let mut bootstrap = open_bootstrap(&env)?;
    let me = bootstrap.rank();
    let detector = Detector::start(&config, bootstrap.as_mut())
        .map_err(|e| AgentError::Failed(format!("rank {me}: could not start: {e}")))?;
    drop(bootstrap);

    let line = |event: Value| -> Value { stamp(event, me, &detector) };
    let core = detector.placement().cpu;
    emit(
        out,
        line(json!({"event": "ready", "pid": std::process::id(), "core": core})),
    )?;

    // Signals and stdin wake the loop through this socket.
    let stop = Arc::new(AtomicBool::new(false));
    let (wake_rx, wake_tx) =
        UnixStream::pair().map_err(|e| AgentError::Failed(format!("wake-up socket: {e}")))?;
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        let registered = signal_hook::flag::register(signal, Arc::clone(&stop)).and_then(|_| {
            let pipe = wake_tx.try_clone()?;
            signal_hook::low_level::pipe::register(signal, pipe)
        });
        registered.map_err(|e| AgentError::Failed(format!("signal handler: {e}")))?;
    }
    if args.stdin_control {
        let stop = Arc::clone(&stop);
        let mut wake = wake_tx
            .try_clone()
            .map_err(|e| AgentError::Failed(format!("wake-up socket: {e}")))?;
        std::thread::spawn(move || {
            for line in io::stdin().lock().lines() {
                match line {
                    Ok(l) if l.trim() != "shutdown" => continue,
                    _ => break,
                }
            }
            stop.store(true, Ordering::Release);
            let _ = wake.write_all(&[1]);
        });
    }

    let mut excluded = false;
    while !stop.load(Ordering::Acquire) && !excluded {
        while let Some(event) = detector.try_next_event() {
            excluded |= matches!(event.event, Event::SelfExcluded { .. });
            emit(out, line(event_json(&event)))?;
        }
        if excluded || !detector.is_running() {
            break;
        }
        let mut fds = [
            PollFd::new(detector.event_fd(), PollFlags::POLLIN),
            PollFd::new(wake_rx.as_fd(), PollFlags::POLLIN),
        ];
        // The timeout only bounds how long a missed wake-up could delay us.
        if let Err(e) = poll(&mut fds, PollTimeout::from(1000u16)) {
            if e != nix::errno::Errno::EINTR {
                return Err(AgentError::Failed(format!("poll: {e}")));
            }
        }
    }
    // Whatever arrived meanwhile.
    while let Some(event) = detector.try_next_event() {
        emit(out, line(event_json(&event)))?;
    }
    let stats = serde_json::to_value(detector.stats()).unwrap_or(Value::Null);
    emit(out, line(json!({"event": "stats", "stats": stats})))?;
    let last = line(json!({"event": "exit"}));
    detector.shutdown();
    emit(out, last)
}

/// `FFD_BOOTSTRAP` (TCP rendezvous) when set, else PMIx when launched by
/// `mpirun`/`srun` and built with the `pmix` feature.
fn open_bootstrap(env: &Env) -> Result<Box<dyn Bootstrap>, AgentError> {
    bootstrap::from_env(env).map_err(|e| match e {
        BootstrapError::Config(_) | BootstrapError::Unavailable { .. } => {
            AgentError::Usage(e.to_string())
        }
        e => AgentError::Failed(e.to_string()),
    })
}

/// The JSON line for a detector event (without the common stamp).
pub fn event_json(event: &DetectorEvent) -> Value {
    match &event.event {
        Event::Failed {
            rank,
            detector,
            cause,
            hops,
        } => json!({
            "event": "failed", "rank": rank, "cause": cause.as_str(),
            "detector": detector, "hops": hops, "epoch": event.epoch,
        }),
        Event::Left { rank } => json!({"event": "left", "rank": rank}),
        Event::SelfExcluded { by } => json!({"event": "self_excluded", "by": by}),
        Event::SlowEmitter { rank, stalled_for } => json!({
            "event": "slow_emitter", "rank": rank, "late_ms": ms(*stalled_for),
        }),
        Event::Payload { origin, seq, bytes } => json!({
            "event": "payload", "origin": origin, "seq": seq,
            "text": String::from_utf8_lossy(bytes),
        }),
    }
}

/// Adds `me`, `t_ms` and `unix_ms` to a line.
fn stamp(mut line: Value, me: u32, detector: &Detector) -> Value {
    let uptime = detector.stats().uptime_ms;
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3);
    if let Value::Object(map) = &mut line {
        map.insert("me".into(), json!(me));
        map.insert("t_ms".into(), json!(uptime));
        map.insert("unix_ms".into(), json!(unix_ms));
    }
    line
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn emit(out: &mut dyn Write, line: Value) -> Result<(), AgentError> {
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| AgentError::Failed(format!("stdout: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::agent_line::{AgentEvent, AgentLine, Cause};
    use ffd::protocol;

    fn detector_event(event: protocol::Event) -> DetectorEvent {
        DetectorEvent {
            at: Duration::from_millis(5),
            epoch: 1,
            event,
        }
    }

    /// The agent's lines are what the launcher's parser expects: one contract.
    #[test]
    fn agent_lines_parse_as_the_launcher_reads_them() {
        let failed = event_json(&detector_event(protocol::Event::Failed {
            rank: 5,
            detector: 4,
            cause: protocol::Cause::InBand,
            hops: 2,
        }));
        let mut failed = failed;
        failed["me"] = json!(3);
        failed["unix_ms"] = json!(1.5e12);
        let parsed = AgentLine::parse(&failed.to_string()).unwrap();
        assert_eq!(parsed.me, Some(3));
        assert_eq!(
            parsed.event,
            AgentEvent::Failed {
                rank: 5,
                cause: Cause::Inband,
                detector: Some(4)
            }
        );
        let left = event_json(&detector_event(protocol::Event::Left { rank: 2 }));
        assert_eq!(
            AgentLine::parse(&left.to_string()).unwrap().event,
            AgentEvent::Left { rank: 2 }
        );
        let excluded = event_json(&detector_event(protocol::Event::SelfExcluded { by: 1 }));
        assert_eq!(
            AgentLine::parse(&excluded.to_string()).unwrap().event,
            AgentEvent::SelfExcluded
        );
        let slow = event_json(&detector_event(protocol::Event::SlowEmitter {
            rank: 2,
            stalled_for: Duration::from_millis(37),
        }));
        assert_eq!(
            AgentLine::parse(&slow.to_string()).unwrap().event,
            AgentEvent::SlowEmitter {
                rank: 2,
                late_ms: Some(37.0)
            }
        );
    }
}
