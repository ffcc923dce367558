//! The launcher: makes the job secret, serves the rendezvous, starts N
//! agents, waits for them to be ready, injects the faults on time, shuts
//! the job down and reaps it.
//!
//! Owns: the phases of a local job and their bounds. Must not: sleep in
//! place of waiting (every wait is a `recv_timeout` on the one channel the
//! watcher threads feed, up to the next fault or deadline), leave a process
//! behind on any path (the [`Agent`] guards) or the secret (the
//! [`SecretDir`] guard, dropped after the agents are reaped), or decide
//! what the agents' lines mean (the [`Timeline`] does).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::{self, Write};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::agent_line::{AgentEvent, AgentLine, Stamp};
use super::cluster::{Cluster, ClusterError, switch_addr};
use super::fault::FaultKind;
use super::plan::Plan;
use super::process::{Agent, AgentCommand, ToLauncher, agent_exit};
use super::secret_dir::SecretDir;
use super::signals::SignalCatcher;
use super::startup::StartupProgress;
use super::timeline::{AgentExit, Fact, Timeline};
use ffd::bootstrap::secret::JobSecret;
use ffd::bootstrap::tcp::{AbortReason, DropCounts, Rendezvous, RendezvousError, RendezvousHandle};
use ffd::config::format_duration;
use ffd::protocol::Rank;
use ffd::protocol::ranks::format_ranks;

/// How long the job runs after its last fault (or after start, with none)
/// when no `--duration` is given.
pub const DEFAULT_TAIL: Duration = Duration::from_secs(2);
/// Bound on the agents' exit after they were asked to shut down.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);
/// Non-blank lines of each agent's standard error repeated in a start-up
/// failure message (all of it was passed through as it came).
const STDERR_TAIL: usize = 3;
/// Bound on reading what is left in the pipes once every agent is reaped.
const DRAIN_BOUND: Duration = Duration::from_secs(2);

/// The smallest bound on start-up (bootstrap and ring connection): 60 s
/// (the agents' own bootstrap bound), plus 100 ms per rank beyond 600. On
/// 2 cores each agent's libfabric start costs about 0.1 s of CPU, and 128
/// agents were seen to take 30 s to start while the machine was busy.
pub fn default_ready_timeout(ranks: u32) -> Duration {
    Duration::from_secs(60).max(Duration::from_millis(100) * ranks)
}

/// Why the job ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The run reached its end.
    Completed,
    /// Every agent exited before the end.
    AllExited,
    /// SIGINT or SIGTERM reached the launcher.
    Interrupted(Signal),
    /// An [`AbortHandle`] was used.
    Aborted,
}

/// One agent of a finished job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgentRecord {
    pub rank: Rank,
    pub pid: u32,
    pub exit: AgentExit,
}

/// What a job that started came to.
#[derive(Debug)]
pub struct Outcome {
    pub timeline: Timeline,
    pub ending: Ending,
    /// Every agent, reaped, by rank.
    pub agents: Vec<AgentRecord>,
    /// From job start to the last agent reaped.
    pub ran_for: Duration,
    /// Connections the rendezvous dropped without admitting them.
    pub rendezvous_dropped: DropCounts,
}

/// Why a job did not start (every agent has been reaped by then).
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("cannot serve the rendezvous on {addr}: {source}")]
    Rendezvous {
        addr: std::net::IpAddr,
        source: io::Error,
    },
    #[error("{0}")]
    Cluster(#[from] ClusterError),
    #[error("cannot make the job secret: {0}")]
    Secret(String),
    #[error("cannot start rank {rank} ({program}): {source}")]
    Spawn {
        rank: Rank,
        program: String,
        source: io::Error,
    },
    #[error("cannot catch SIGINT/SIGTERM: {0}")]
    Signals(io::Error),
    /// The job did not get ready; `details` has a line per rank not ready.
    #[error("{reason}{}", details.iter().fold(String::new(), |s, d| s + "\n  " + d))]
    NotReady {
        reason: String,
        missing: Vec<Rank>,
        details: Vec<String>,
        /// SIGINT or SIGTERM ended the start-up.
        interrupted: Option<Signal>,
    },
}

/// Aborts a running [`Launcher`] from another thread, as Ctrl-C would.
#[derive(Clone, Debug)]
pub struct AbortHandle(Sender<ToLauncher>);

impl AbortHandle {
    pub fn abort(&self) {
        let _ = self.0.send(ToLauncher::Abort);
    }
}

/// A local job of N agent processes; see the module doc.
pub struct Launcher {
    plan: Plan,
    command: AgentCommand,
    ready_timeout: Duration,
    shutdown_timeout: Duration,
    catch_signals: bool,
    tx: Sender<ToLauncher>,
    rx: Receiver<ToLauncher>,
}

impl Launcher {
    /// A launcher of `ffd agent --stdin-control` (this executable).
    pub fn new(plan: Plan) -> io::Result<Launcher> {
        Ok(Launcher::with_agent_command(
            plan,
            Launcher::default_agent()?,
        ))
    }

    /// `ffd agent --stdin-control`, with this executable as `ffd`.
    pub fn default_agent() -> io::Result<AgentCommand> {
        Ok(AgentCommand {
            program: std::env::current_exe()?,
            args: vec!["agent".into(), "--stdin-control".into()],
        })
    }

    /// A launcher of another agent program (which must speak the agent line
    /// protocol on stdout and leave on `shutdown` or end of file on stdin).
    pub fn with_agent_command(plan: Plan, command: AgentCommand) -> Launcher {
        let (tx, rx) = channel();
        Launcher {
            ready_timeout: default_ready_timeout(plan.info.ranks),
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            plan,
            command,
            catch_signals: false,
            tx,
            rx,
        }
    }

    /// Extra arguments for every agent, after the command's own.
    pub fn agent_args(
        mut self,
        args: impl IntoIterator<Item = impl Into<std::ffi::OsString>>,
    ) -> Self {
        self.command.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Bound on start-up: every rank ready (default [`default_ready_timeout`]).
    pub fn ready_timeout(mut self, bound: Duration) -> Self {
        self.ready_timeout = bound;
        self
    }

    /// Bound on the agents' exit once asked to leave; then SIGKILL.
    pub fn shutdown_timeout(mut self, bound: Duration) -> Self {
        self.shutdown_timeout = bound;
        self
    }

    /// Catch SIGINT/SIGTERM while running: shut down, then report.
    pub fn catch_signals(mut self, yes: bool) -> Self {
        self.catch_signals = yes;
        self
    }

    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle(self.tx.clone())
    }

    /// Runs the job, printing the timeline on `out` and the agents' standard
    /// error (`[rank R] `) and the launcher's messages on `log`.
    pub fn run(self, out: &mut dyn Write, log: &mut dyn Write) -> Result<Outcome, LaunchError> {
        let _signals = if self.catch_signals {
            let tx = self.tx.clone();
            let forward = move |signal| tx.send(ToLauncher::Interrupted { signal }).is_ok();
            Some(SignalCatcher::install(forward).map_err(LaunchError::Signals)?)
        } else {
            None
        };
        let n = self.plan.info.ranks;
        // Declared before the rendezvous and the agents, so dropped after
        // them: on any way out the secret goes last.
        let secret = JobSecret::random().map_err(|e| LaunchError::Secret(e.to_string()))?;
        let secret_dir = SecretDir::create(&secret, "ffd-run")
            .map_err(|e| LaunchError::Secret(e.to_string()))?;
        // The emulated hosts (`--netns`): declared before the rendezvous
        // and the agents, so dropped after them.
        let cluster = match &self.plan.netns {
            Some(plan) => Some(Cluster::create(plan)?),
            None => None,
        };
        let listen = match &cluster {
            // Reachable from every host, over its link.
            Some(_) => std::net::IpAddr::from(switch_addr()),
            None => std::net::IpAddr::from([127, 0, 0, 1]),
        };
        let bind = || {
            Rendezvous::bind((listen, 0), n, &secret)
                .and_then(|r| r.timeout(self.ready_timeout).spawn())
        };
        let rendezvous = match &cluster {
            Some(cluster) => cluster.in_switch(bind).and_then(|r| r),
            None => bind(),
        }
        .map_err(|source| LaunchError::Rendezvous {
            addr: listen,
            source,
        })?;
        let rendezvous = RendezvousGuard(Some(rendezvous));
        let bootstrap = rendezvous.addr().to_string();
        if self.plan.verbose {
            let _ = writeln!(
                log,
                "ffd run: starting {n} agents, rendezvous on {bootstrap}, secret in {}",
                secret_dir.file().display()
            );
            if let (Some(cluster), Some(plan)) = (&cluster, &self.plan.netns) {
                for line in cluster.describe(&plan.link) {
                    let _ = writeln!(log, "ffd run: {line}");
                }
            }
        }
        // Declared after the rendezvous: on any way out, the agents are
        // killed and reaped before the rendezvous is stopped.
        let (start, start_unix_ms) = crate::wall::now_paired();
        let mut job = Job {
            agents: Vec::with_capacity(n as usize),
            timeline: Timeline::new(self.plan.info.clone(), self.plan.verbose),
            reported: vec![false; n as usize],
            forced: vec![false; n as usize],
            exit_seen: vec![None; n as usize],
            interrupted: None,
            early: Vec::new(),
            stdout_open: vec![true; n as usize],
            stderr_open: vec![true; n as usize],
            stderr_tail: vec![VecDeque::new(); n as usize],
            start,
            start_unix_ms,
            out,
            log,
        };
        let spawned = Instant::now();
        for rank in 0..n {
            let host = cluster
                .as_ref()
                .zip(self.plan.host_of(rank))
                .map(|(c, h)| c.host(h));
            let agent = Agent::spawn(
                rank,
                &self.command,
                &self.plan.env_of(rank, &bootstrap, secret_dir.file()),
                host,
                &self.tx,
            )
            .map_err(|source| LaunchError::Spawn {
                rank,
                program: self.command.program.display().to_string(),
                source,
            })?;
            job.agents.push(agent);
        }

        if let Err(reason) = self.wait_ready(&mut job) {
            return Err(self.startup_failed(job, rendezvous, reason));
        }
        let startup = spawned.elapsed();
        (job.start, job.start_unix_ms) = crate::wall::now_paired();
        let fact = job.timeline.note(
            0.0,
            format!(
                "all {n} ranks ready (start-up took {:.1} ms)",
                startup.as_secs_f64() * 1e3
            ),
        );
        job.print(&[fact]);
        let hosts = match (&self.plan.netns, self.plan.hosts) {
            (Some(plan), _) => Some((plan.hosts, "namespaces")),
            (None, Some(h)) => Some((h, "FFD_HOSTNAME only")),
            (None, None) => None,
        };
        if let Some((h, how)) = hosts {
            let fact = job.timeline.note(0.0, hosts_line(h, n, how));
            job.print(&[fact]);
        }
        job.replay_early_lines();

        let ending = self.run_faults(&mut job, cluster.as_ref());
        self.shut_down(&mut job, ending, cluster.as_ref());
        let ran_for = job.start.elapsed();
        let rendezvous_dropped = rendezvous.dropped();
        drop(rendezvous);
        let agents = job
            .agents
            .iter()
            .enumerate()
            .map(|(i, a)| AgentRecord {
                rank: a.rank,
                pid: a.pid().as_raw().unsigned_abs(),
                // Every agent is reaped by now; `forced` for one that is not.
                exit: a.exit().map_or(
                    AgentExit {
                        code: None,
                        signal: None,
                        forced: true,
                    },
                    |s| agent_exit(s, job.forced[i]),
                ),
            })
            .collect();
        Ok(Outcome {
            timeline: job.timeline,
            ending,
            agents,
            ran_for,
            rendezvous_dropped,
        })
    }

    /// Waits until every rank printed `ready`, saying on `log` how far it
    /// is every few seconds; the reason if not.
    fn wait_ready(&self, job: &mut Job) -> Result<(), String> {
        let n = self.plan.info.ranks as usize;
        let spawned = Instant::now();
        let deadline = spawned + self.ready_timeout;
        let mut progress = StartupProgress::new(self.plan.info.ranks);
        let mut ready = vec![false; n];
        let mut count = 0;
        while count < n {
            let left = deadline.saturating_duration_since(Instant::now());
            let report_in = progress.due_in(spawned.elapsed());
            let msg = match self.rx.recv_timeout(left.min(report_in)) {
                Ok(msg) => msg,
                Err(RecvTimeoutError::Timeout) if !left.is_zero() => {
                    if let Some(line) = progress.report(spawned.elapsed(), count as u32) {
                        let _ = writeln!(job.log, "ffd run: {line}");
                    }
                    continue;
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    return Err(format!(
                        "not every rank was ready within {}",
                        format_duration(self.ready_timeout)
                    ));
                }
            };
            match msg {
                ToLauncher::Line { rank, at, text } => {
                    let is_ready = matches!(
                        AgentLine::parse(&text),
                        Ok(AgentLine { event: AgentEvent::Ready { .. }, stamp })
                            if stamp.me.is_none_or(|m| m == rank)
                    );
                    if is_ready && !ready[rank as usize] {
                        ready[rank as usize] = true;
                        count += 1;
                    }
                    job.early.push((rank, at, text));
                }
                ToLauncher::Stderr { rank, text } => job.stderr(rank, text),
                ToLauncher::StdoutClosed { rank } => job.stdout_open[rank as usize] = false,
                ToLauncher::StderrClosed { rank } => job.stderr_open[rank as usize] = false,
                ToLauncher::Exited { rank, .. } => {
                    let status = job.agents[rank as usize].try_reap().map_or_else(
                        || "ended".to_owned(),
                        |s| format!("exited ({})", agent_exit(s, false)),
                    );
                    let before = if ready[rank as usize] {
                        "every rank was ready"
                    } else {
                        "it was ready"
                    };
                    return Err(format!("rank {rank} {status} before {before}"));
                }
                ToLauncher::Interrupted { signal } => {
                    job.interrupted = Some(signal);
                    return Err(format!(
                        "interrupted by {signal} before every rank was ready"
                    ));
                }
                ToLauncher::Abort => return Err("aborted before every rank was ready".into()),
            }
        }
        Ok(())
    }

    /// Reaps everything, gathers what the ranks that were not ready printed,
    /// and says why the job did not start.
    fn startup_failed(
        &self,
        mut job: Job,
        rendezvous: RendezvousGuard,
        reason: String,
    ) -> LaunchError {
        let ready: Vec<bool> = (0..self.plan.info.ranks)
            .map(|r| {
                job.early.iter().any(|(rank, _, text)| {
                    *rank == r
                        && matches!(
                            AgentLine::parse(text),
                            Ok(AgentLine {
                                event: AgentEvent::Ready { .. },
                                ..
                            })
                        )
                })
            })
            .collect();
        let mut statuses = Vec::new();
        for agent in &mut job.agents {
            let before = agent.try_reap();
            let status = agent.kill_and_reap();
            statuses.push((before, status));
        }
        // What the agents printed last on standard error arrives after they die.
        let deadline = Instant::now() + DRAIN_BOUND;
        while job.stderr_open.iter().any(|&o| o) {
            match self
                .rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(ToLauncher::Stderr { rank, text }) => job.stderr(rank, text),
                Ok(ToLauncher::StderrClosed { rank }) => job.stderr_open[rank as usize] = false,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let dropped = rendezvous.dropped();
        let rendezvous_error = rendezvous.finish();
        let mut missing = Vec::new();
        let mut details = Vec::new();
        for (rank, (before, status)) in statuses.into_iter().enumerate() {
            if ready[rank] {
                continue;
            }
            let rank = rank as Rank;
            missing.push(rank);
            let mut line = match (before, status) {
                (Some(s), _) => format!(
                    "rank {rank}: exited ({}) before it was ready",
                    agent_exit(s, false)
                ),
                _ => format!("rank {rank}: still starting; killed"),
            };
            let tail = &job.stderr_tail[rank as usize];
            if tail.is_empty() {
                line.push_str("; it printed nothing on stderr");
            } else {
                let _ = write!(line, "; its last stderr lines:");
                for l in tail {
                    let _ = write!(line, "\n    {l}");
                }
            }
            details.push(line);
        }
        let mut reason = reason;
        if !missing.is_empty() {
            let _ = write!(reason, "; not ready: {}", format_ranks(&missing));
        }
        match rendezvous_error {
            // Its text already counts what it dropped.
            Some(e) => {
                let _ = write!(reason, "; {e}");
            }
            None if !dropped.is_empty() => {
                let _ = write!(reason, "; the rendezvous dropped {dropped}");
            }
            None => {}
        }
        LaunchError::NotReady {
            reason,
            missing,
            details,
            interrupted: job.interrupted,
        }
    }

    /// Injects the faults (and `--agree` requests) on time until the end;
    /// why it ended.
    fn run_faults(&self, job: &mut Job, cluster: Option<&Cluster>) -> Ending {
        let faults = self.plan.schedule.faults();
        // Hosts whose link is down now.
        let mut cut = vec![false; cluster.map_or(0, |c| c.len() as usize)];
        // When each host's link last changed: the time of each of its ranks' fault.
        let mut link_changed = vec![0.0; cut.len()];
        let agree = &self.plan.agree;
        let end = self.plan.end();
        let (mut next, mut next_agree) = (0, 0);
        loop {
            let now = job.start.elapsed();
            while next_agree < agree.len() && agree[next_agree] <= now {
                next_agree += 1;
                let t = job.now_ms();
                for a in &mut job.agents {
                    // A stopped agent reads it when continued; a dead one
                    // does not (its pipe is closed).
                    a.send_line("agree");
                }
                let facts = job.timeline.agree_requested(t);
                job.print(&facts);
            }
            while next < faults.len() && faults[next].at <= now {
                let fault = faults[next];
                next += 1;
                let t = job.now_ms();
                let signal = match fault.kind {
                    FaultKind::Kill => Signal::SIGKILL,
                    FaultKind::Stop => Signal::SIGSTOP,
                    FaultKind::Cont => Signal::SIGCONT,
                    FaultKind::Cut | FaultKind::Heal => {
                        // One fault per rank of the host: the first acts on the link.
                        let host = self.plan.host_of(fault.rank);
                        let down = fault.kind == FaultKind::Cut;
                        let fact = match (cluster, host) {
                            (Some(c), Some(h)) if cut[h as usize] != down => {
                                match c.set_link(h, !down) {
                                    Ok(()) => {
                                        // From just before the command, as a
                                        // signal's from just before kill(2):
                                        // the link changed during it, and on a
                                        // loaded machine `ip` can take longer
                                        // to be reaped than the detection.
                                        cut[h as usize] = down;
                                        link_changed[h as usize] = t;
                                        None
                                    }
                                    Err(e) => Some(e.to_string()),
                                }
                            }
                            (Some(_), Some(_)) => None,
                            _ => Some("no emulated host (--netns) to cut".to_owned()),
                        };
                        let facts = match (fact, host) {
                            (None, Some(h)) => {
                                let t = link_changed[h as usize];
                                job.timeline.fault(t, fault.rank, fault.kind)
                            }
                            (None, None) => Vec::new(),
                            (Some(e), _) => vec![job.timeline.note(t, e)],
                        };
                        job.print(&facts);
                        continue;
                    }
                };
                match job.agents[fault.rank as usize].signal(signal) {
                    Ok(()) => {
                        let facts = job.timeline.fault(t, fault.rank, fault.kind);
                        job.print(&facts);
                    }
                    Err(status) => {
                        let fact = job.timeline.note(
                            t,
                            format!(
                                "{} rank {} not sent: it already exited ({})",
                                fault.kind.command(),
                                fault.rank,
                                agent_exit(status, false)
                            ),
                        );
                        job.print(&[fact]);
                        job.reap(fault.rank as usize, None);
                        job.note_exits(false);
                    }
                }
            }
            if now >= end {
                return Ending::Completed;
            }
            if job.agents.iter().all(|a| a.exit().is_some()) {
                return Ending::AllExited;
            }
            let wake = faults.get(next).map_or(end, |f| f.at.min(end));
            let wake = agree.get(next_agree).map_or(wake, |&a| a.min(wake));
            match self.rx.recv_timeout(wake.saturating_sub(now)) {
                Ok(msg) => {
                    if let Some(ending) = job.handle(msg) {
                        return ending;
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
            }
        }
    }

    /// Asks every agent to leave (continuing stopped ones first), waits for
    /// them within the bound, then kills what is left; reads what remains
    /// in their pipes.
    fn shut_down(&self, job: &mut Job, ending: Ending, cluster: Option<&Cluster>) {
        let t = job.now_ms();
        job.timeline.shutdown_started(t);
        for i in 0..job.agents.len() {
            job.reap(i, None);
        }
        let running: Vec<usize> = (0..job.agents.len())
            .filter(|&i| job.agents[i].exit().is_none())
            .collect();
        job.note_exits(false);
        let why = match ending {
            Ending::Completed => "end of the run".to_owned(),
            Ending::AllExited => "every agent has exited".to_owned(),
            Ending::Interrupted(signal) => format!("interrupted by {signal}"),
            Ending::Aborted => "aborted".to_owned(),
        };
        let fact = job
            .timeline
            .note(t, format!("{why}: shutting down {} agents", running.len()));
        job.print(&[fact]);
        for &i in &running {
            let rank = job.agents[i].rank;
            if job.timeline.is_hung(rank) && job.agents[i].signal(Signal::SIGCONT).is_ok() {
                let facts = job.timeline.fault(job.now_ms(), rank, FaultKind::Cont);
                job.print(&facts);
            }
        }
        // Links still cut come back up, so that the ranks behind them can leave.
        let mut healed = Vec::new();
        for &i in &running {
            let rank = job.agents[i].rank;
            let host = self.plan.host_of(rank);
            if let (true, Some(c), Some(h)) = (job.timeline.is_cut(rank), cluster, host) {
                if !healed.contains(&h) {
                    healed.push(h);
                    if let Err(e) = c.set_link(h, true) {
                        let fact = job.timeline.note(job.now_ms(), e.to_string());
                        job.print(&[fact]);
                        continue;
                    }
                }
                let facts = job.timeline.fault(job.now_ms(), rank, FaultKind::Heal);
                job.print(&facts);
            }
        }
        for &i in &running {
            job.agents[i].request_shutdown();
        }
        let deadline = Instant::now() + self.shutdown_timeout;
        let mut interrupted_again = false;
        while !interrupted_again && job.agents.iter().any(|a| a.exit().is_none()) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(ToLauncher::Interrupted { signal }) => {
                    let fact = job.timeline.note(
                        job.now_ms(),
                        format!("interrupted by {signal} again: killing the agents now"),
                    );
                    job.print(&[fact]);
                    interrupted_again = true;
                }
                Ok(msg) => {
                    job.handle(msg);
                }
                Err(_) => break,
            }
        }
        for i in 0..job.agents.len() {
            if job.agents[i].exit().is_none() {
                if let Some(status) = job.agents[i].kill_and_reap() {
                    let rank = job.agents[i].rank;
                    let facts =
                        job.timeline
                            .agent_exited(job.now_ms(), rank, agent_exit(status, true));
                    job.reported[i] = true;
                    job.forced[i] = true;
                    job.print(&facts);
                }
            }
        }
        let deadline = Instant::now() + DRAIN_BOUND;
        while job.stdout_open.iter().chain(&job.stderr_open).any(|&o| o) {
            match self
                .rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(msg) => {
                    job.handle(msg);
                }
                Err(_) => break,
            }
        }
        // Pipes a grandchild keeps open do not hold the report back.
        job.note_exits(true);
        let fact = job.timeline.note(job.now_ms(), "all agents reaped");
        job.print(&[fact]);
    }
}

/// The state of a running job on the launcher's thread.
struct Job<'w> {
    agents: Vec<Agent>,
    timeline: Timeline,
    /// The timeline was told of this agent's exit.
    reported: Vec<bool>,
    /// The launcher killed this agent at the shutdown bound.
    forced: Vec<bool>,
    /// When the launcher learned the agent had exited.
    exit_seen: Vec<Option<Instant>>,
    /// The start-up was interrupted by this signal.
    interrupted: Option<Signal>,
    stdout_open: Vec<bool>,
    stderr_open: Vec<bool>,
    stderr_tail: Vec<VecDeque<String>>,
    /// Lines that arrived before job start, with their arrival.
    early: Vec<(Rank, Instant, String)>,
    start: Instant,
    start_unix_ms: f64,
    out: &'w mut dyn Write,
    log: &'w mut dyn Write,
}

impl Job<'_> {
    fn now_ms(&self) -> f64 {
        self.ms_since_start(Instant::now())
    }

    fn ms_since_start(&self, at: Instant) -> f64 {
        match at.checked_duration_since(self.start) {
            Some(d) => d.as_secs_f64() * 1e3,
            None => -(self.start.duration_since(at).as_secs_f64() * 1e3),
        }
    }

    fn print(&mut self, facts: &[Fact]) {
        for fact in facts {
            let _ = writeln!(self.out, "{fact}");
        }
        let _ = self.out.flush();
    }

    fn stderr(&mut self, rank: Rank, text: String) {
        let _ = writeln!(self.log, "[rank {rank}] {text}");
        if text.trim().is_empty() {
            return;
        }
        let tail = &mut self.stderr_tail[rank as usize];
        if tail.len() == STDERR_TAIL {
            tail.pop_front();
        }
        tail.push_back(text);
    }

    /// Feeds one stdout line to the timeline, timed by the agent's stamp
    /// (`unix_ms`; for a detector event, when the detector learned it) when
    /// it gave one, else by its arrival.
    fn line(&mut self, rank: Rank, at: Instant, text: &str) {
        let facts = match AgentLine::parse(text) {
            Ok(AgentLine {
                stamp: Stamp { me: Some(me), .. },
                ..
            }) if me != rank => {
                let t = self.ms_since_start(at);
                self.timeline
                    .unparseable(t, rank, text, &format!("says it is rank {me}"))
            }
            Ok(line) => {
                let t = line
                    .stamp
                    .unix_ms
                    .map_or_else(|| self.ms_since_start(at), |u| u - self.start_unix_ms);
                self.timeline.agent_line(t, rank, &line)
            }
            Err(e) => {
                let t = self.ms_since_start(at);
                self.timeline.unparseable(t, rank, text, &e.to_string())
            }
        };
        self.print(&facts);
    }

    fn replay_early_lines(&mut self) {
        for (rank, at, text) in std::mem::take(&mut self.early) {
            self.line(rank, at, &text);
        }
    }

    /// Reaps agent `i` if it has ended, noting when the exit was seen
    /// (`at`, else now) the first time.
    fn reap(&mut self, i: usize, at: Option<Instant>) {
        if self.agents[i].try_reap().is_some() && self.exit_seen[i].is_none() {
            self.exit_seen[i] = Some(at.unwrap_or_else(Instant::now));
        }
    }

    /// Tells the timeline of every agent reaped and not yet reported, once
    /// all its stdout lines were read (the exit watcher can overtake the
    /// reader, and a rank's last lines must count before its exit), or
    /// regardless with `all`.
    fn note_exits(&mut self, all: bool) {
        for i in 0..self.agents.len() {
            if self.reported[i] || (self.stdout_open[i] && !all) {
                continue;
            }
            let Some(status) = self.agents[i].exit() else {
                continue;
            };
            self.reported[i] = true;
            let rank = self.agents[i].rank;
            let t = self.exit_seen[i].map_or_else(|| self.now_ms(), |at| self.ms_since_start(at));
            let facts = self
                .timeline
                .agent_exited(t, rank, agent_exit(status, false));
            self.print(&facts);
        }
    }

    /// Handles one message of the running job; an ending if it ends it.
    fn handle(&mut self, msg: ToLauncher) -> Option<Ending> {
        match msg {
            ToLauncher::Line { rank, at, text } => self.line(rank, at, &text),
            ToLauncher::Stderr { rank, text } => self.stderr(rank, text),
            ToLauncher::StdoutClosed { rank } => {
                self.stdout_open[rank as usize] = false;
                self.reap(rank as usize, None);
                self.note_exits(false);
            }
            ToLauncher::StderrClosed { rank } => self.stderr_open[rank as usize] = false,
            ToLauncher::Exited { rank, at } => {
                self.reap(rank as usize, Some(at));
                self.note_exits(false);
            }
            ToLauncher::Interrupted { signal } => return Some(Ending::Interrupted(signal)),
            ToLauncher::Abort => return Some(Ending::Aborted),
        }
        None
    }
}

/// The rendezvous server, stopped and joined on drop.
struct RendezvousGuard(Option<RendezvousHandle>);

impl RendezvousGuard {
    fn addr(&self) -> std::net::SocketAddr {
        self.0.as_ref().map_or_else(
            || std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            RendezvousHandle::addr,
        )
    }

    /// Connections it has dropped so far.
    fn dropped(&self) -> DropCounts {
        self.0
            .as_ref()
            .map_or_else(DropCounts::default, RendezvousHandle::dropped)
    }

    /// Stops it; why it aborted the job, unless it was stopped by us.
    fn finish(mut self) -> Option<RendezvousError> {
        let handle = self.0.take()?;
        handle.stop();
        match handle.join() {
            Ok(_) | Err(RendezvousError::Aborted(AbortReason::Stopped)) => None,
            Err(e) => Some(e),
        }
    }
}

impl Drop for RendezvousGuard {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            handle.stop();
            let _ = handle.join();
        }
    }
}

/// The timeline's line naming each host's ranks: `hosts (namespaces):
/// node0: ranks 0, 2; node1: ranks 1, 3`.
fn hosts_line(hosts: u32, ranks: u32, how: &str) -> String {
    let mut line = format!("hosts ({how}):");
    for h in 0..hosts.min(ranks) {
        let on: Vec<Rank> = (h..ranks).step_by(hosts as usize).collect();
        let sep = if h == 0 { " " } else { "; " };
        let _ = write!(line, "{sep}node{h}: {}", format_ranks(&on));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_line_names_each_hosts_ranks() {
        assert_eq!(
            hosts_line(2, 5, "namespaces"),
            "hosts (namespaces): node0: ranks 0, 2, 4; node1: ranks 1, 3"
        );
        assert_eq!(
            hosts_line(4, 3, "FFD_HOSTNAME only"),
            "hosts (FFD_HOSTNAME only): node0: rank 0; node1: rank 1; node2: rank 2"
        );
    }
}
