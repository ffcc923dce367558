//! `ffd agent`: one rank of a job, configured by the `FFD_*` environment,
//! printing what its detector learns as JSON lines on stdout.
//!
//! Owns: choosing the bootstrap (`FFD_BOOTSTRAP` TCP rendezvous, or PMIx
//! under `mpirun` with the `pmix` feature), running one [`Detector`], and
//! the agent side of the line protocol that `ffd run` reads (see
//! [`crate::launch`]). Must not: decide anything about failures itself.
//!
//! Lines: one JSON object each, an [`AgentLine`] (the contract, with the
//! list of kinds, is [`crate::launch::agent_line`]). A detector event's
//! line carries the detector's own time of the event (`t_ms` since the
//! detector started, `unix_ms` the same instant on the wall clock), not the
//! time it was printed; the other lines carry the time they are printed.
//!
//! It stops, leaving cleanly, on SIGTERM or SIGINT, and with
//! `--stdin-control` also when stdin reaches EOF or reads `shutdown`. It
//! stops by itself once the others have excluded it. With
//! `--stdin-control`, a line `agree` (or `agree FLAGS`, FLAGS a u64 in
//! decimal or `0x` hex; default all ones) starts its next agreement
//! (`Detector::iagree`): an `agree` line says so, and an `agreed` (or
//! `agree_aborted`) line brings the result.

use std::io::{self, BufRead, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use serde_json::Value;

use crate::launch::agent_line::{AgentEvent, AgentLine, Stamp};
use ffd::bootstrap::{self, Bootstrap, BootstrapError};
use ffd::config::{Config, Env};
use ffd::protocol::Rank;
use ffd::runtime::{self, Detector, DetectorEvent, Event};

/// `ffd agent` options.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AgentArgs {
    /// Leave cleanly when stdin reaches EOF or reads the line `shutdown`
    /// (what `ffd run` uses to end a job); start an agreement on a line
    /// `agree [FLAGS]` (`ffd run --agree`).
    #[arg(long)]
    pub stdin_control: bool,
    /// Hold SIZE of written memory (`512MiB`, `1GiB`, or bytes) from
    /// before the ready line to the end, as an application's data: a
    /// kill's teardown then takes as long as a real rank's
    /// (`benches/victim_memory.py`).
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub memory: Option<usize>,
    /// Bind this agent's own threads (not the detector's) to the CPU its
    /// progress thread is pinned to, as an MPI launcher binds a rank to a
    /// core: the detector's events then wake a thread of that CPU, not one
    /// asleep on another (a wake-up across CPUs costs the waker an
    /// interrupt to send). `ffd run` passes it when it places the progress
    /// threads (`--netns`, `--hosts`). Nothing to bind to (no pinned
    /// progress thread): a warning, and the agent runs unbound.
    #[arg(long)]
    pub bind: bool,
}

/// `--memory`'s SIZE: bytes, or a whole number of `KiB`, `MiB` or `GiB`.
fn parse_memory(text: &str) -> Result<usize, String> {
    let form = "accepted: a whole number of bytes, KiB, MiB or GiB (e.g. 512MiB)";
    let (digits, unit) = [("GiB", 1usize << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
        .into_iter()
        .find_map(|(suffix, unit)| text.strip_suffix(suffix).map(|d| (d, unit)))
        .unwrap_or((text, 1));
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{text}` is not a size; {form}"));
    }
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .filter(|&bytes| bytes <= isize::MAX as usize)
        .ok_or_else(|| format!("`{text}` is too large for this machine's addresses; {form}"))
}

/// `--memory`: `bytes` written, or why they cannot be had.
fn ballast(bytes: usize) -> Result<Vec<u8>, AgentError> {
    let mut held = Vec::new();
    held.try_reserve_exact(bytes)
        .map_err(|e| AgentError::Failed(format!("--memory: cannot allocate {bytes} bytes: {e}")))?;
    held.resize(bytes, 1);
    Ok(held)
}

/// `--bind`: this thread (and the threads it starts later) on `cpu`, the
/// progress thread's; a warning where that cannot be.
fn bind_to(cpu: Option<u32>) {
    let Some(cpu) = cpu else {
        eprintln!(
            "ffd agent: warning: --bind: the progress thread is not pinned to a CPU; running unbound"
        );
        return;
    };
    let mut set = nix::sched::CpuSet::new();
    let bound = set
        .set(cpu as usize)
        .and_then(|()| nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set));
    if let Err(e) = bound {
        eprintln!("ffd agent: warning: --bind: cannot bind to CPU {cpu} ({e}); running unbound");
    }
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
    // Written, so that every page is the process's own (a kill frees it).
    let ballast = args.memory.map(ballast).transpose()?;
    let mut bootstrap = open_bootstrap(&env)?;
    let me = bootstrap.rank();
    let detector = Detector::start(&config, bootstrap.as_mut())
        .map_err(|e| AgentError::Failed(format!("rank {me}: could not start: {e}")))?;
    drop(bootstrap);

    let clock = LineClock::new(me, detector.started());
    let core = detector
        .placement()
        .cpu
        .and_then(|cpu| u32::try_from(cpu).ok());
    emit(
        out,
        &clock.now(AgentEvent::Ready {
            pid: Some(std::process::id()),
            core,
        }),
    )?;

    if args.bind {
        bind_to(core);
    }
    // Signals and stdin wake the loop through this socket.
    let stop = Arc::new(AtomicBool::new(false));
    let (wake_rx, wake_tx) =
        UnixStream::pair().map_err(|e| AgentError::Failed(format!("wake-up socket: {e}")))?;
    // Emptied after every wait below: a byte left in it would keep the
    // wait returning at once, and this thread spinning.
    wake_rx
        .set_nonblocking(true)
        .map_err(|e| AgentError::Failed(format!("wake-up socket: {e}")))?;
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        let registered = signal_hook::flag::register(signal, Arc::clone(&stop)).and_then(|_| {
            let pipe = wake_tx.try_clone()?;
            signal_hook::low_level::pipe::register(signal, pipe)
        });
        registered.map_err(|e| AgentError::Failed(format!("signal handler: {e}")))?;
    }
    let (agree_tx, agree_rx) = mpsc::channel::<u64>();
    if args.stdin_control {
        let stop = Arc::clone(&stop);
        let mut wake = wake_tx
            .try_clone()
            .map_err(|e| AgentError::Failed(format!("wake-up socket: {e}")))?;
        std::thread::spawn(move || {
            for line in io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                match control(&line) {
                    Control::Shutdown => break,
                    Control::Agree(flags) => {
                        if agree_tx.send(flags).is_err() {
                            break;
                        }
                        let _ = wake.write_all(&[1]);
                    }
                    Control::Unknown => eprintln!(
                        "ffd agent: ignoring the stdin line `{}` (expected `shutdown` or `agree [FLAGS]`)",
                        line.trim()
                    ),
                }
            }
            stop.store(true, Ordering::Release);
            let _ = wake.write_all(&[1]);
        });
    }

    let mut excluded = false;
    let mut agreements = 0u64;
    while !stop.load(Ordering::Acquire) && !excluded {
        while let Ok(flags) = agree_rx.try_recv() {
            // Stamped before the call: once it is made, the agreement can
            // be decided (and its `agreed` events stamped, at the
            // detector's own time) before this thread runs again, and a
            // stamp taken after it would put this rank's call after the
            // decisions (a negative latency in `ffd run`'s report).
            let seq = agreements + 1;
            let line = clock.now(AgentEvent::Agree { seq, flags });
            // The result comes as an event (`agreed`), like everything else.
            if detector.iagree(flags).is_ok() {
                agreements = seq;
                emit(out, &line)?;
            }
        }
        while let Some(event) = detector.try_next_event() {
            excluded |= matches!(event.event, Event::SelfExcluded { .. });
            emit_event(out, &clock, &event)?;
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
        // Whatever woke us is looked at on the next turn (the channel,
        // the stop flag): the bytes themselves carry nothing.
        drain(&wake_rx);
    }
    // Whatever arrived meanwhile.
    while let Some(event) = detector.try_next_event() {
        emit_event(out, &clock, &event)?;
    }
    let stats = serde_json::to_value(detector.stats()).unwrap_or(Value::Null);
    emit(out, &clock.now(AgentEvent::Stats { stats }))?;
    let last = clock.now(AgentEvent::Exit);
    detector.shutdown();
    drop(std::hint::black_box(ballast));
    emit(out, &last)
}

/// Reads `socket` (non-blocking) until it is empty.
fn drain(mut socket: &UnixStream) {
    let mut sink = [0u8; 64];
    while matches!(io::Read::read(&mut socket, &mut sink), Ok(n) if n > 0) {}
}

/// A line of the agent's standard input (`--stdin-control`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Control {
    Shutdown,
    /// Start an agreement with these flags.
    Agree(u64),
    Unknown,
}

fn control(line: &str) -> Control {
    let mut words = line.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("shutdown"), None, None) => Control::Shutdown,
        (Some("agree"), None, None) => Control::Agree(u64::MAX),
        (Some("agree"), Some(flags), None) => {
            let parsed = match flags.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => flags.parse(),
            };
            parsed.map_or(Control::Unknown, Control::Agree)
        }
        _ => Control::Unknown,
    }
}

/// `FFD_BOOTSTRAP` (TCP rendezvous) when set, else PMIx when launched by
/// `mpirun`/`srun` and built with the `pmix` feature.
fn open_bootstrap(env: &Env) -> Result<Box<dyn Bootstrap>, AgentError> {
    bootstrap::from_env(env).map_err(|e| match e {
        BootstrapError::Config(_)
        | BootstrapError::Secret(_)
        | BootstrapError::Unavailable { .. } => AgentError::Usage(e.to_string()),
        e => AgentError::Failed(e.to_string()),
    })
}

/// Prints a detector event's line; the detector's stop (an error or a
/// panic on its thread) ends the agent with its reason instead.
fn emit_event(
    out: &mut dyn Write,
    clock: &LineClock,
    event: &DetectorEvent,
) -> Result<(), AgentError> {
    match (&event.event, clock.event(event)) {
        (_, Some(line)) => emit(out, &line),
        (Event::Stopped(reason), None) => Err(AgentError::Failed(format!(
            "the detector stopped: {reason}"
        ))),
        (_, None) => Ok(()),
    }
}

/// The line's event for a detector event (none for the detector's stop).
pub fn agent_event(event: &DetectorEvent) -> Option<AgentEvent> {
    Some(match &event.event {
        Event::Failed {
            rank,
            detector,
            cause,
            hops,
            detail,
        } => AgentEvent::Failed {
            rank: *rank,
            cause: *cause,
            detector: Some(*detector),
            hops: Some(*hops),
            epoch: Some(event.epoch),
            detail: Some(runtime::evidence::describe_failure(*cause, detail)),
        },
        Event::HostFailed { host, ranks } => AgentEvent::HostFailed {
            host: *host,
            ranks: ranks.clone(),
        },
        Event::Left { rank } => AgentEvent::Left { rank: *rank },
        Event::SelfExcluded { by, why } => AgentEvent::SelfExcluded {
            by: Some(*by),
            why: Some(why.as_str().to_owned()),
        },
        Event::SlowEmitter { rank, stalled_for } => AgentEvent::SlowEmitter {
            rank: *rank,
            late_ms: Some(ms(*stalled_for)),
        },
        Event::Payload { origin, seq, bytes } => AgentEvent::Payload {
            origin: *origin,
            seq: *seq,
            text: String::from_utf8_lossy(bytes).into_owned(),
        },
        Event::ViewChange { id, failed, hops } => AgentEvent::View {
            id: *id,
            failed: failed.clone(),
            hops: Some(*hops),
        },
        Event::Agreed {
            seq,
            flags,
            view,
            hops,
        } => AgentEvent::Agreed {
            seq: *seq,
            flags: *flags,
            view: view.id,
            failed: view.failed.clone(),
            hops: Some(*hops),
        },
        Event::AgreeAborted { seq, reason } => AgentEvent::AgreeAborted {
            seq: *seq,
            reason: reason.as_str().to_owned(),
        },
        Event::Stopped(_) => return None,
    })
}

/// Stamps lines with this rank and the detector's clock: `t_ms` counts
/// from the detector's start, `unix_ms` is the same instant on the wall
/// clock (read once, so the two never disagree).
#[derive(Clone, Copy, Debug)]
struct LineClock {
    me: Rank,
    started: Instant,
    /// The detector's start on the wall clock.
    started_unix_ms: f64,
}

impl LineClock {
    fn new(me: Rank, started: Instant) -> LineClock {
        let (now, unix_now_ms) = crate::wall::now_paired();
        LineClock {
            me,
            started,
            started_unix_ms: unix_now_ms - ms(now.saturating_duration_since(started)),
        }
    }

    /// The line of something that happened `at` after the detector started.
    fn at(&self, at: Duration, event: AgentEvent) -> AgentLine {
        AgentLine {
            event,
            stamp: Stamp {
                me: Some(self.me),
                t_ms: Some(ms(at)),
                unix_ms: Some(self.started_unix_ms + ms(at)),
            },
        }
    }

    /// The line of a detector event, at the detector's own time of it
    /// (none for the detector's stop).
    fn event(&self, event: &DetectorEvent) -> Option<AgentLine> {
        Some(self.at(event.at, agent_event(event)?))
    }

    /// The line of something that happens now.
    fn now(&self, event: AgentEvent) -> AgentLine {
        self.at(self.started.elapsed(), event)
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn emit(out: &mut dyn Write, line: &AgentLine) -> Result<(), AgentError> {
    let text = line
        .to_json()
        .map_err(|e| AgentError::Failed(format!("a `{}` line: {e}", line.event.kind())))?;
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(|e| AgentError::Failed(format!("stdout: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ffd::protocol;

    fn detector_event(at_ms: u64, event: protocol::Event) -> DetectorEvent {
        DetectorEvent {
            at: Duration::from_millis(at_ms),
            epoch: 1,
            event: event.into(),
        }
    }

    fn clock() -> LineClock {
        LineClock {
            me: 3,
            started: Instant::now(),
            started_unix_ms: 1.5e12,
        }
    }

    /// `--bind` puts the calling thread on the CPU named; with none, it
    /// stays where it was.
    #[test]
    fn bind_puts_this_thread_on_the_progress_threads_cpu() {
        let allowed = |tid| nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(tid)).unwrap();
        std::thread::spawn(move || {
            let before = allowed(0);
            bind_to(None);
            let unchanged = allowed(0);
            assert!(
                (0..nix::sched::CpuSet::count())
                    .all(|c| before.is_set(c).unwrap() == unchanged.is_set(c).unwrap())
            );
            let cpu = (0..nix::sched::CpuSet::count())
                .rev()
                .find(|&c| before.is_set(c).unwrap())
                .unwrap();
            bind_to(Some(cpu as u32));
            let after = allowed(0);
            for c in 0..nix::sched::CpuSet::count() {
                assert_eq!(after.is_set(c).unwrap(), c == cpu, "CPU {c}");
            }
        })
        .join()
        .unwrap();
    }

    /// The agent's lines read back as written: one contract.
    #[test]
    fn agent_lines_parse_as_the_launcher_reads_them() {
        let cases = [
            (
                protocol::Event::Failed {
                    rank: 5,
                    detector: 4,
                    cause: protocol::Cause::InBand,
                    hops: 2,
                    detail: protocol::FailureDetail::Proof {
                        said: protocol::FabricSaid::Completion {
                            err: 125,
                            prov_errno: 107,
                        },
                    },
                },
                AgentEvent::Failed {
                    rank: 5,
                    cause: protocol::Cause::InBand,
                    detector: Some(4),
                    hops: Some(2),
                    epoch: Some(1),
                    detail: Some("in-band, error completion FI_ECANCELED/ENOTCONN: proof".into()),
                },
            ),
            (
                protocol::Event::Failed {
                    rank: 6,
                    detector: 4,
                    cause: protocol::Cause::Timeout,
                    hops: 0,
                    detail: protocol::FailureDetail::Silence {
                        said: protocol::FabricSaid::Nothing,
                        quorum: Some(protocol::Confirmation {
                            votes: 5,
                            live: 8,
                            tiebreak: false,
                        }),
                    },
                },
                AgentEvent::Failed {
                    rank: 6,
                    cause: protocol::Cause::Timeout,
                    detector: Some(4),
                    hops: Some(0),
                    epoch: Some(1),
                    detail: Some("timeout: silence, confirmed by 5 of 8 live ranks".into()),
                },
            ),
            (
                protocol::Event::Left { rank: 2 },
                AgentEvent::Left { rank: 2 },
            ),
            (
                protocol::Event::SelfExcluded {
                    by: 1,
                    why: protocol::Exclusion::Named,
                },
                AgentEvent::SelfExcluded {
                    by: Some(1),
                    why: Some("named".into()),
                },
            ),
            (
                protocol::Event::SelfExcluded {
                    by: 3,
                    why: protocol::Exclusion::NoQuorum,
                },
                AgentEvent::SelfExcluded {
                    by: Some(3),
                    why: Some("no_quorum".into()),
                },
            ),
            (
                protocol::Event::SlowEmitter {
                    rank: 2,
                    stalled_for: Duration::from_millis(37),
                },
                AgentEvent::SlowEmitter {
                    rank: 2,
                    late_ms: Some(37.0),
                },
            ),
            (
                protocol::Event::Payload {
                    origin: 1,
                    seq: 7,
                    bytes: b"revoke".to_vec(),
                },
                AgentEvent::Payload {
                    origin: 1,
                    seq: 7,
                    text: "revoke".into(),
                },
            ),
            (
                protocol::Event::ViewChange {
                    id: 2,
                    failed: vec![1, 5],
                    hops: 3,
                },
                AgentEvent::View {
                    id: 2,
                    failed: vec![1, 5],
                    hops: Some(3),
                },
            ),
            (
                protocol::Event::Agreed {
                    seq: 1,
                    flags: 6,
                    view: protocol::View {
                        id: 2,
                        failed: vec![1, 5],
                    },
                    hops: 4,
                },
                AgentEvent::Agreed {
                    seq: 1,
                    flags: 6,
                    view: 2,
                    failed: vec![1, 5],
                    hops: Some(4),
                },
            ),
            (
                protocol::Event::AgreeAborted {
                    seq: 3,
                    reason: protocol::AgreeAbort::Excluded,
                },
                AgentEvent::AgreeAborted {
                    seq: 3,
                    reason: "excluded".into(),
                },
            ),
        ];
        for (event, want) in cases {
            let line = clock()
                .event(&detector_event(5, event))
                .expect("a protocol event's line");
            let parsed = AgentLine::parse(&line.to_json().unwrap()).unwrap();
            assert_eq!(parsed.event, want);
            assert_eq!(parsed.stamp.me, Some(3));
        }
    }

    #[test]
    fn memory_sizes_parse_with_their_unit_and_bad_ones_say_the_form() {
        assert_eq!(parse_memory("4096"), Ok(4096));
        assert_eq!(parse_memory("3KiB"), Ok(3 * 1024));
        assert_eq!(parse_memory("512MiB"), Ok(512 << 20));
        assert_eq!(parse_memory("2GiB"), Ok(2 << 30));
        for bad in ["", "MiB", "1.5GiB", "-1MiB", "+5MiB", "5 MiB", "1GB", " 5"] {
            let err = parse_memory(bad).unwrap_err();
            assert!(err.contains("is not a size"), "{bad}: {err}");
            assert!(err.contains("KiB, MiB or GiB"), "{bad}: {err}");
        }
        for huge in ["99999999999999999999GiB", "17179869184GiB"] {
            let err = parse_memory(huge).unwrap_err();
            assert!(err.contains("too large"), "{huge}: {err}");
        }
    }

    #[test]
    fn stdin_control_lines() {
        assert_eq!(control("shutdown"), Control::Shutdown);
        assert_eq!(control(" agree "), Control::Agree(u64::MAX));
        assert_eq!(control("agree 6"), Control::Agree(6));
        assert_eq!(control("agree 0xff"), Control::Agree(255));
        for bad in ["agree x", "agree 1 2", "", "stop", "shutdown now"] {
            assert_eq!(control(bad), Control::Unknown, "{bad}");
        }
    }

    /// The detector's stop prints no event line: the agent ends with its
    /// reason (and a non-zero status).
    #[test]
    fn a_detector_stop_ends_the_agent_with_its_reason() {
        let reason = runtime::StopReason::new(runtime::StopCause::Panic, "boom");
        let stop = DetectorEvent {
            at: Duration::from_millis(9),
            epoch: 0,
            event: Event::Stopped(reason),
        };
        assert!(clock().event(&stop).is_none());
        let mut out = Vec::new();
        match emit_event(&mut out, &clock(), &stop) {
            Err(AgentError::Failed(e)) => assert_eq!(
                e,
                "the detector stopped: the progress thread panicked: boom"
            ),
            _ => panic!("the stop must end the agent"),
        }
        assert!(out.is_empty(), "no line for the stop");
    }

    /// An event's line is stamped with the detector's time of the event,
    /// however late it is printed.
    #[test]
    fn event_lines_carry_the_detectors_own_time() {
        let clock = clock();
        let line = clock
            .event(&detector_event(250, protocol::Event::Left { rank: 2 }))
            .expect("a protocol event's line");
        assert_eq!(line.stamp.t_ms, Some(250.0));
        assert_eq!(line.stamp.unix_ms, Some(1.5e12 + 250.0));
        let now = clock.now(AgentEvent::Exit);
        let t = now.stamp.t_ms.unwrap();
        assert!((0.0..250.0).contains(&t), "printed now, not at 250 ms: {t}");
        assert_eq!(now.stamp.unix_ms, Some(1.5e12 + t));
    }

    #[test]
    fn the_clock_places_the_detectors_start_on_the_wall_clock() {
        let unix_now = || crate::wall::now_paired().1;
        let before = unix_now();
        let started = Instant::now() - Duration::from_millis(400);
        let clock = LineClock::new(0, started);
        let after = unix_now();
        // Started 400 ms before it was read, within the wall clock's reads.
        let (low, high) = (before - 400.0 - (after - before) - 1.0, after - 400.0 + 1.0);
        assert!(
            (low..=high).contains(&clock.started_unix_ms),
            "{before} {} {after}",
            clock.started_unix_ms
        );
    }
}
