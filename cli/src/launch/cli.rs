//! `ffd run`: the options, their validation into a [`Plan`], and the
//! output (timeline, summary, JSON) and exit status of a run.
//!
//! Owns: the subcommand's surface. Exit status: 0 when the run completed
//! and every agent that was not killed exited cleanly; 1 when the job did
//! not start, an agent exited abnormally, it was aborted, or the JSON could
//! not be written; 2 for bad usage (nothing is started); 128+signal when
//! SIGINT or SIGTERM interrupted it (after clean-up and the summary).

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::cluster::{HOST_IFACE, LinkShape, MAX_HOSTS, NetnsPlan};
use super::fault::{Fault, FaultKind, RankAt, Schedule, ScheduleError};
use super::launcher::{Ending, LaunchError, Launcher, Outcome};
use super::plan::Plan;
use super::process::AgentCommand;
use super::startup::{CpuBudget, DEFAULT_UNIVERSE, RXM_ENV, UNIVERSE_ENV};
use super::timeline::RunInfo;
use ffd::config::{
    ConfigBuilder, ConfigError, ConfigWarning, DURATION_FORM, Env, EnvPolicy, format_duration,
    parse_duration, var,
};
use ffd::protocol::{BcastKind, RingKind};

/// Options of `ffd run`.
#[derive(Clone, Debug, PartialEq, clap::Args)]
pub struct RunArgs {
    /// Number of ranks (agent processes) to start.
    #[arg(short = 'n', long = "ranks", value_parser = clap::value_parser!(u32).range(1..))]
    pub ranks: u32,
    /// libfabric provider (FFD_PROVIDER), e.g. `tcp`, `tcp;ofi_rxm`.
    #[arg(long)]
    pub provider: Option<String>,
    /// Fabric domain (FFD_DOMAIN); `lo` for tcp and sockets when not given.
    #[arg(long)]
    pub domain: Option<String>,
    /// Heartbeat period (FFD_PERIOD), e.g. `10ms`.
    #[arg(long, value_parser = positive_duration)]
    pub period: Option<Duration>,
    /// Silence before an emitter is declared failed (FFD_TIMEOUT), e.g. `100ms`.
    #[arg(long, value_parser = positive_duration)]
    pub timeout: Option<Duration>,
    /// SIGKILL rank RANK at TIME after job start (repeatable), e.g. `3@500ms`.
    #[arg(long, value_name = "RANK@TIME")]
    pub kill: Vec<RankAt>,
    /// SIGSTOP rank RANK at TIME after job start (repeatable).
    #[arg(long, value_name = "RANK@TIME")]
    pub stop: Vec<RankAt>,
    /// SIGCONT a stopped rank at TIME after job start (repeatable).
    #[arg(long, value_name = "RANK@TIME")]
    pub cont: Vec<RankAt>,
    /// SIGKILL every rank of emulated host HOST (with `--hosts H` or
    /// `--netns H`: the ranks r with r mod H = HOST) at TIME after job
    /// start (repeatable).
    #[arg(long = "kill-host", value_name = "HOST@TIME")]
    pub kill_host: Vec<RankAt>,
    /// With `--netns H`: take host HOST's link down at TIME after job
    /// start (repeatable): its packets vanish, no connection is reset.
    #[arg(long = "cut-host", value_name = "HOST@TIME")]
    pub cut_host: Vec<RankAt>,
    /// With `--netns H`: bring a cut host's link back up at TIME (repeatable).
    #[arg(long = "heal-host", value_name = "HOST@TIME")]
    pub heal_host: Vec<RankAt>,
    /// Every running agent starts an agreement at TIME after job start
    /// (repeatable): the timeline shows the decisions, the JSON report's
    /// `agreements` their latency.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub agree: Vec<Duration>,
    /// Run length after job start; default: 2s after the last fault.
    #[arg(long, value_parser = positive_duration)]
    pub duration: Option<Duration>,
    /// Write the report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Observation ring order (FFD_RING): topology, shuffle or rank.
    #[arg(long)]
    pub ring: Option<RingKind>,
    /// Failure broadcast overlay (FFD_BCAST): bmg or chord.
    #[arg(long)]
    pub bcast: Option<BcastKind>,
    /// Fake H hosts: FFD_HOSTNAME=node<rank mod H>.
    #[arg(long, value_name = "H", value_parser = clap::value_parser!(u32).range(1..))]
    pub hosts: Option<u32>,
    /// Emulate H hosts (at most 250): each a network and UTS namespace
    /// with hostname node<h>, joined by a bridge over veth pairs; rank r
    /// runs on host r mod H and talks over its link. Needs root, or
    /// unprivileged user namespaces; iproute2 (`ip`, `tc`).
    #[arg(long, value_name = "H", value_parser = clap::value_parser!(u32).range(1..=MAX_HOSTS as i64))]
    pub netns: Option<u32>,
    /// With `--netns`: delay every packet into a host by D (tc netem; so
    /// D each way between two hosts), e.g. `50us`.
    #[arg(long = "link-delay", value_name = "D", value_parser = parse_time)]
    pub link_delay: Option<Duration>,
    /// With `--netns`: lose every packet into a host with probability P
    /// percent (tc netem), e.g. `0.1`.
    #[arg(long = "link-loss", value_name = "P", value_parser = parse_percent)]
    pub link_loss: Option<f64>,
    /// Print every agent line, not only first detections and all-notified lines.
    #[arg(short, long)]
    pub verbose: bool,
    /// Run the job in the host's network namespace instead of a private
    /// one: its fabric ports on 127.0.0.1 are then reachable by every
    /// process of the host, whatever its user, unless the ranks talk
    /// through the host's segment (FFD_LOCAL=auto with futex_waitv: their
    /// ports then admit nobody).
    #[arg(long)]
    pub shared_network: bool,
    /// Extra arguments for every `ffd agent`.
    #[arg(last = true, value_name = "AGENT ARGS")]
    pub agent_args: Vec<String>,
}

fn parse_time(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| format!("`{text}` {e}; accepted: {DURATION_FORM}"))
}

fn parse_percent(text: &str) -> Result<f64, String> {
    match text.trim().trim_end_matches('%').parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!(
            "`{text}` is not a percentage; accepted: a number from 0 to 100, e.g. `0.5`"
        )),
    }
}

fn positive_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(format!(
            "`{text}` must be positive; accepted: {DURATION_FORM}"
        )),
        Err(e) => Err(format!("`{text}` {e}; accepted: {DURATION_FORM}")),
    }
}

/// Why the options do not make a job.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("{0}")]
    Schedule(#[from] ScheduleError),
    #[error("the agents would reject their settings: {0}")]
    Config(#[from] ConfigError),
    #[error("--kill-host {0} needs --hosts H or --netns H (the emulated hosts to kill one of)")]
    KillHostWithoutHosts(RankAt),
    #[error("{option} {at}: host {} is not in the job (hosts 0 to {})", .at.rank, .hosts - 1)]
    HostOutOfRange {
        option: &'static str,
        at: RankAt,
        hosts: u32,
    },
    #[error("{0} needs --netns H (hosts with links of their own)")]
    NeedsNetns(String),
    #[error(
        "--netns and --hosts both set the hosts; give one (--netns emulates them, --hosts fakes them)"
    )]
    NetnsAndHosts,
    #[error("--netns {hosts}: more hosts than ranks (-n {ranks}); a host needs at least one rank")]
    MoreHostsThanRanks { hosts: u32, ranks: u32 },
    #[error("--agree {}: not before the end of the run (--duration {})", format_duration(*.at), format_duration(*.duration))]
    AgreeAfterEnd { at: Duration, duration: Duration },
}

/// The job the options describe, with `env` the launcher's `FFD_*`
/// variables (which the agents inherit); also the settings' warnings.
pub fn plan(args: &RunArgs, env: &Env) -> Result<(Plan, Vec<ConfigWarning>), UsageError> {
    let netns = match args.netns {
        Some(_) if args.hosts.is_some() => return Err(UsageError::NetnsAndHosts),
        Some(hosts) if hosts > args.ranks => {
            return Err(UsageError::MoreHostsThanRanks {
                hosts,
                ranks: args.ranks,
            });
        }
        Some(hosts) => Some(NetnsPlan {
            hosts,
            link: LinkShape {
                delay: args.link_delay,
                loss_percent: args.link_loss,
            },
            pin_hostname: env.get(var::HOSTNAME).is_some(),
        }),
        None => {
            let needs = [
                ("--link-delay", args.link_delay.map(format_duration)),
                ("--link-loss", args.link_loss.map(|p| p.to_string())),
                ("--cut-host", args.cut_host.first().map(|a| a.to_string())),
                ("--heal-host", args.heal_host.first().map(|a| a.to_string())),
            ];
            if let Some((option, Some(value))) = needs.into_iter().find(|(_, v)| v.is_some()) {
                return Err(UsageError::NeedsNetns(format!("{option} {value}")));
            }
            None
        }
    };
    let hosts = args.hosts.or(args.netns);
    // A host fault is the same fault of each of its ranks at the same time.
    let per_host = |option: &'static str, list: &[RankAt]| {
        let mut out = Vec::new();
        for &at in list {
            let hosts = hosts.ok_or(UsageError::KillHostWithoutHosts(at))?;
            if at.rank >= hosts.min(args.ranks) {
                return Err(UsageError::HostOutOfRange {
                    option,
                    at,
                    hosts: hosts.min(args.ranks),
                });
            }
            out.extend(
                (at.rank..args.ranks)
                    .step_by(hosts as usize)
                    .map(|rank| RankAt { rank, at: at.at }),
            );
        }
        Ok(out)
    };
    let mut kills = args.kill.clone();
    kills.extend(per_host("--kill-host", &args.kill_host)?);
    let cuts = per_host("--cut-host", &args.cut_host)?;
    let heals = per_host("--heal-host", &args.heal_host)?;
    let faults = [
        (FaultKind::Kill, &kills),
        (FaultKind::Stop, &args.stop),
        (FaultKind::Cont, &args.cont),
        (FaultKind::Cut, &cuts),
        (FaultKind::Heal, &heals),
    ]
    .into_iter()
    .flat_map(|(kind, list)| {
        list.iter().map(move |r| Fault {
            kind,
            rank: r.rank,
            at: r.at,
        })
    });
    let schedule = Schedule::new(args.ranks, faults, args.duration)?;
    let mut agree = args.agree.clone();
    agree.sort_unstable();
    if let (Some(&at), Some(duration)) = (agree.last(), args.duration) {
        if at >= duration {
            return Err(UsageError::AgreeAfterEnd { at, duration });
        }
    }

    let mut set: Vec<(String, String)> = Vec::new();
    let mut put = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            set.push((name.to_owned(), value));
        }
    };
    put(var::PROVIDER, args.provider.clone());
    put(var::DOMAIN, args.domain.clone());
    put(var::PERIOD, args.period.map(format_duration));
    put(var::TIMEOUT, args.timeout.map(format_duration));
    put(var::RING, args.ring.map(|r| r.to_string()));
    put(var::BCAST, args.bcast.map(|b| b.to_string()));
    // The agents read the inherited variables with these on top: check that.
    let merged = Env::from_pairs(
        env.iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .filter(|(k, _)| !set.iter().any(|(s, _)| s == k))
            .chain(set.iter().cloned()),
    );
    let config = ConfigBuilder::default().build_with_env(&merged, EnvPolicy::Override)?;
    let transport = config.provider().split(';').next().unwrap_or_default();
    let loopback_provider = matches!(transport.to_ascii_lowercase().as_str(), "tcp" | "sockets");
    if netns.is_some() && args.domain.is_none() {
        // Each host's ranks talk over its link (and publish its address),
        // whatever domain the environment names.
        set.push((var::DOMAIN.to_owned(), HOST_IFACE.to_owned()));
    } else if loopback_provider && args.domain.is_none() && env.get(var::DOMAIN).is_none() {
        // A local job: keep the detector's traffic on loopback.
        set.push((var::DOMAIN.to_owned(), "lo".to_owned()));
    }

    // Emulated hosts share this machine's CPUs: each host's first rank
    // would be pinned to the same CPU (every progress thread on one CPU
    // with one rank per host). They are spread over the CPUs this process
    // may use, each host's ranks as a host's are (`Plan::core_index`); left
    // to the scheduler when those cannot be read.
    let mut cores = Vec::new();
    if hosts.is_some() && env.get(var::CORE).is_none() {
        match allowed_cpus() {
            Some(cpus) if !cpus.is_empty() => cores = cpus,
            _ => set.push((var::CORE.to_owned(), "none".to_owned())),
        }
    }

    let plan = Plan {
        info: RunInfo {
            ranks: args.ranks,
            provider: config.provider().to_owned(),
            period: config.period(),
            timeout: config.timeout(),
        },
        schedule,
        agree,
        duration: args.duration,
        env: set,
        hosts: args.hosts,
        netns,
        verbose: args.verbose,
        cores,
    };
    Ok((plan, config.warnings().to_vec()))
}

/// The CPUs this process may run on (`Cpus_allowed_list` of
/// `/proc/self/status`, e.g. `0-3,8`), ascending; `None` if unreadable.
fn allowed_cpus() -> Option<Vec<usize>> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    parse_cpu_list(list.trim())
}

/// `0-3,8` -> [0, 1, 2, 3, 8]; `None` if malformed.
fn parse_cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?),
            None => out.push(part.parse().ok()?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// Adds [`RXM_ENV`] and [`UNIVERSE_ENV`] (the job's size, at most
/// libfabric's default) to the agents' variables of a job over `tcp`
/// (with `ofi_rxm`), each unless `inherited(name)`: the agents inherit
/// this process's environment, whose choice wins.
pub fn add_libfabric_defaults(plan: &mut Plan, inherited: impl Fn(&str) -> bool) {
    let transport = plan.info.provider.split(';').next().unwrap_or_default();
    if !transport.trim().eq_ignore_ascii_case("tcp") {
        return;
    }
    let universe = plan.info.ranks.min(DEFAULT_UNIVERSE).to_string();
    let defaults = RXM_ENV
        .iter()
        .map(|&(name, value)| (name, value.to_owned()))
        .chain([(UNIVERSE_ENV, universe)]);
    for (name, value) in defaults {
        if !inherited(name) && !plan.env.iter().any(|(k, _)| k == name) {
            plan.env.push((name.to_owned(), value));
        }
    }
}

/// The heartbeat load of `plan` on the cores this process may use.
pub fn cpu_budget(plan: &Plan) -> CpuBudget {
    CpuBudget {
        ranks: plan.info.ranks,
        period: plan.info.period,
        timeout: plan.info.timeout,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// The exit status of a job that started.
pub fn exit_status(outcome: &Outcome) -> u8 {
    match outcome.ending {
        Ending::Interrupted(signal) => 128u8.saturating_add(signal as u8),
        Ending::Aborted => 1,
        Ending::Completed | Ending::AllExited => {
            if outcome.timeline.abnormal_exits().is_empty() {
                0
            } else {
                1
            }
        }
    }
}

/// Runs `ffd run` with the process's environment and this executable as
/// the agent: timeline and summary on `out`, messages on `log`.
pub fn run(args: &RunArgs, out: &mut dyn Write, log: &mut dyn Write) -> ExitCode {
    if !args.shared_network {
        // First, while this process has no other thread: the job, its
        // rendezvous included, lives on a loopback of its own.
        if let Err(e) = ffd::node::enter_private_network() {
            let _ = writeln!(
                log,
                "ffd run: warning: no private network namespace ({e}; root or unprivileged \
                 user namespaces needed): the job's fabric ports on 127.0.0.1 are reachable by \
                 every process of this host"
            );
        }
    }
    let agent = match Launcher::default_agent() {
        Ok(agent) => agent,
        Err(e) => {
            let _ = writeln!(log, "ffd run: cannot find the ffd executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    ExitCode::from(run_with(args, &Env::process(), agent, true, out, log))
}

/// The arguments every agent gets after its command's own: `--bind`
/// first where this launcher places the progress threads and the agent is
/// `ffd agent` (its own threads then sit beside its progress thread, as a
/// rank is bound to its core: an event wakes a thread of the same CPU),
/// then the user's (`-- ARGS`).
fn agent_args(plan: &Plan, agent: &AgentCommand, user: &[String]) -> Vec<String> {
    // A `--bind` of the user's is not given twice (clap refuses that).
    let ours = !plan.cores.is_empty()
        && agent.args.first().is_some_and(|a| a == "agent")
        && !user.iter().any(|a| a == "--bind");
    ours.then(|| "--bind".to_owned())
        .into_iter()
        .chain(user.iter().cloned())
        .collect()
}

/// [`run`] with the launcher's `FFD_*` environment `env` (which the agents
/// must also inherit), another agent program, and optionally without
/// catching SIGINT/SIGTERM; the exit status.
pub fn run_with(
    args: &RunArgs,
    env: &Env,
    agent: AgentCommand,
    catch_signals: bool,
    out: &mut dyn Write,
    log: &mut dyn Write,
) -> u8 {
    let (mut plan, warnings) = match plan(args, env) {
        Ok(p) => p,
        Err(e) => {
            let _ = writeln!(log, "ffd run: {e}");
            return 2;
        }
    };
    for w in warnings {
        let _ = writeln!(log, "ffd run: warning: {w}");
    }
    if let Some(w) = cpu_budget(&plan).warning() {
        let _ = writeln!(log, "ffd run: warning: {w}");
    }
    add_libfabric_defaults(&mut plan, |name| std::env::var_os(name).is_some());
    // Opened first, so a bad path fails before anything is started.
    let json = match &args.json {
        Some(path) => match File::create(path) {
            Ok(file) => Some((path, file)),
            Err(e) => {
                let _ = writeln!(log, "ffd run: cannot write {}: {e}", path.display());
                return 1;
            }
        },
        None => None,
    };
    let extra = agent_args(&plan, &agent, &args.agent_args);
    let launcher = Launcher::with_agent_command(plan, agent)
        .catch_signals(catch_signals)
        .agent_args(extra);
    let outcome = match launcher.run(out, log) {
        Ok(outcome) => outcome,
        Err(e) => {
            let _ = writeln!(log, "ffd run: {e}");
            return match e {
                LaunchError::NotReady {
                    interrupted: Some(signal),
                    ..
                } => 128u8.saturating_add(signal as u8),
                _ => 1,
            };
        }
    };
    let _ = writeln!(out);
    let _ = write!(out, "{}", outcome.timeline.summary());
    let _ = out.flush();
    if !outcome.rendezvous_dropped.is_empty() {
        let _ = writeln!(
            log,
            "ffd run: the rendezvous dropped {} (strays, or processes without this job's secret)",
            outcome.rendezvous_dropped
        );
    }
    let mut status = exit_status(&outcome);
    if let Some((path, mut file)) = json {
        let written = serde_json::to_writer_pretty(&mut file, &outcome.timeline.report())
            .map_err(io::Error::from)
            .and_then(|()| writeln!(file));
        if let Err(e) = written {
            let _ = writeln!(log, "ffd run: cannot write {}: {e}", path.display());
            status = status.max(1);
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::path::Path;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(args: &[&str]) -> Result<RunArgs, String> {
        Cli::try_parse_from(std::iter::once("run").chain(args.iter().copied()))
            .map(|c| c.run)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn emulated_hosts_spread_the_progress_threads_by_rank_unless_ffd_core_is_set() {
        let cpus = allowed_cpus().expect("this process's allowed CPUs");
        for option in ["--hosts", "--netns"] {
            let plan = plan_of(&["-n", "4", option, "4"], &[]).unwrap();
            assert_eq!(plan.cores, cpus, "{option}");
            let last = *cpus.last().unwrap();
            let core_of = |rank| {
                plan.env_of(rank, "x", std::path::Path::new("/s"))
                    .into_iter()
                    .find(|(k, _)| k == "FFD_CORE")
                    .map(|(_, v)| v)
            };
            // Rank 0 on the top CPU, as a host's first rank, and ranks of
            // different hosts apart where there are CPUs for them.
            assert_eq!(core_of(0), Some(last.to_string()), "{option}");
            if cpus.len() > 1 {
                assert_ne!(core_of(0), core_of(1), "{option}");
            }
            let set = plan_of(&["-n", "4", option, "4"], &[("FFD_CORE", "auto")]).unwrap();
            assert!(
                set.cores.is_empty(),
                "{option}: the inherited FFD_CORE wins"
            );
        }
        assert!(plan_of(&["-n", "4"], &[]).unwrap().cores.is_empty());
    }

    #[test]
    fn ffd_agents_are_bound_beside_the_progress_threads_this_launcher_places() {
        let ours = AgentCommand {
            program: "/bin/ffd".into(),
            args: vec!["agent".into(), "--stdin-control".into()],
        };
        let other = AgentCommand {
            program: "/bin/other".into(),
            args: vec!["--stdin-control".into()],
        };
        let user = vec!["--memory".to_owned(), "1MiB".to_owned()];
        let placed = plan_of(&["-n", "4", "--netns", "2"], &[]).unwrap();
        assert_eq!(
            agent_args(&placed, &ours, &user),
            ["--bind", "--memory", "1MiB"]
        );
        // Another program knows no --bind; FFD_CORE given, or one host,
        // places nothing.
        assert_eq!(agent_args(&placed, &other, &user), user);
        let inherited = plan_of(&["-n", "4", "--hosts", "2"], &[("FFD_CORE", "0")]).unwrap();
        assert_eq!(agent_args(&inherited, &ours, &user), user);
        let one_host = plan_of(&["-n", "4"], &[]).unwrap();
        assert!(agent_args(&one_host, &ours, &[]).is_empty());
        let theirs = vec!["--bind".to_owned()];
        assert_eq!(agent_args(&placed, &ours, &theirs), theirs);
    }

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(
            parse_cpu_list("0-3,8,10-11"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list("0-x"), None);
    }

    fn plan_of(args: &[&str], env: &[(&str, &str)]) -> Result<Plan, String> {
        let args = parse(args)?;
        plan(&args, &Env::from_pairs(env.iter().copied()))
            .map(|(p, _)| p)
            .map_err(|e| e.to_string())
    }

    fn var_of<'a>(plan: &'a Plan, name: &str) -> Option<&'a str> {
        plan.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn options_become_ffd_variables_and_a_tcp_job_stays_on_loopback() {
        let plan = plan_of(
            &[
                "-n",
                "8",
                "--period",
                "5ms",
                "--timeout",
                "50ms",
                "--ring",
                "shuffle",
                "--bcast",
                "chord",
                "--kill",
                "3@500ms",
                "--stop",
                "5@1s",
                "--cont",
                "5@1.5s",
            ],
            &[],
        )
        .unwrap();
        assert_eq!(var_of(&plan, "FFD_PERIOD"), Some("5ms"));
        assert_eq!(var_of(&plan, "FFD_TIMEOUT"), Some("50ms"));
        assert_eq!(var_of(&plan, "FFD_RING"), Some("shuffle"));
        assert_eq!(var_of(&plan, "FFD_BCAST"), Some("chord"));
        assert_eq!(var_of(&plan, "FFD_DOMAIN"), Some("lo"));
        assert_eq!(var_of(&plan, "FFD_PROVIDER"), None, "inherited, not set");
        assert_eq!(plan.info.provider, "tcp");
        assert_eq!(plan.info.timeout, Duration::from_millis(50));
        assert_eq!(plan.schedule.faults().len(), 3);
        assert_eq!(plan.end(), Duration::from_millis(3500));

        let env = plan.env_of(5, "127.0.0.1:4000", Path::new("/run/ffd-x/secret"));
        let get = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        assert_eq!(get("FFD_BOOTSTRAP").as_deref(), Some("127.0.0.1:4000"));
        assert_eq!(get("FFD_RANK").as_deref(), Some("5"));
        assert_eq!(get("FFD_SIZE").as_deref(), Some("8"));
        assert_eq!(get("FFD_SECRET_FILE").as_deref(), Some("/run/ffd-x/secret"));
        assert_eq!(get("FFD_HOSTNAME"), None);
    }

    #[test]
    fn tcp_agents_get_small_rxm_pools_unless_the_environment_sets_them() {
        let with = |args: &[&str], inherited: &str, name: &str| {
            let mut plan = plan_of(args, &[]).unwrap();
            add_libfabric_defaults(&mut plan, |n| n == inherited);
            var_of(&plan, name).map(str::to_owned)
        };
        for (name, value) in [
            ("FI_OFI_RXM_MSG_RX_SIZE", "256"),
            ("FI_OFI_RXM_BUFFER_SIZE", "1024"),
        ] {
            assert_eq!(with(&["-n", "2"], "", name).as_deref(), Some(value));
            assert_eq!(
                with(&["-n", "2", "--provider", "tcp;ofi_rxm"], "", name).as_deref(),
                Some(value)
            );
            assert_eq!(
                with(&["-n", "2"], name, name),
                None,
                "the inherited value wins"
            );
            assert_eq!(
                with(&["-n", "2", "--provider", "shm"], "", name),
                None,
                "not rxm over tcp"
            );
        }
        // One inherited setting leaves the other default in place.
        assert_eq!(
            with(
                &["-n", "2"],
                "FI_OFI_RXM_MSG_RX_SIZE",
                "FI_OFI_RXM_BUFFER_SIZE"
            )
            .as_deref(),
            Some("1024")
        );
    }

    #[test]
    fn tcp_agents_get_the_jobs_size_as_universe_at_most_libfabrics_default() {
        let universe = |args: &[&str], inherited: bool| {
            let mut plan = plan_of(args, &[]).unwrap();
            add_libfabric_defaults(&mut plan, |n| inherited && n == "FI_UNIVERSE_SIZE");
            var_of(&plan, "FI_UNIVERSE_SIZE").map(str::to_owned)
        };
        assert_eq!(universe(&["-n", "8"], false).as_deref(), Some("8"));
        assert_eq!(universe(&["-n", "64"], false).as_deref(), Some("64"));
        assert_eq!(universe(&["-n", "300"], false).as_deref(), Some("256"));
        assert_eq!(
            universe(&["-n", "8"], true),
            None,
            "the inherited value wins"
        );
        assert_eq!(
            universe(&["-n", "8", "--provider", "verbs;ofi_rxm"], false),
            None
        );
    }

    #[test]
    fn hosts_are_faked_round_robin() {
        let plan = plan_of(&["-n", "5", "--hosts", "2"], &[]).unwrap();
        let host = |rank| {
            plan.env_of(rank, "x", Path::new("s"))
                .into_iter()
                .find(|(k, _)| k == "FFD_HOSTNAME")
                .map(|(_, v)| v)
        };
        assert_eq!(host(0).as_deref(), Some("node0"));
        assert_eq!(host(3).as_deref(), Some("node1"));
        assert_eq!(host(4).as_deref(), Some("node0"));
    }

    #[test]
    fn a_host_kill_kills_every_rank_of_the_emulated_host_at_once() {
        let plan = plan_of(&["-n", "7", "--hosts", "3", "--kill-host", "1@2s"], &[]).unwrap();
        let kills: Vec<(u32, Duration)> = plan
            .schedule
            .faults()
            .iter()
            .map(|f| (f.rank, f.at))
            .collect();
        let two = Duration::from_secs(2);
        assert_eq!(kills, vec![(1, two), (4, two)]);
        assert_eq!(
            plan_of(&["-n", "4", "--kill-host", "1@2s"], &[]).unwrap_err(),
            "--kill-host 1@2s needs --hosts H or --netns H (the emulated hosts to kill one of)"
        );
        assert_eq!(
            plan_of(&["-n", "4", "--hosts", "2", "--kill-host", "2@2s"], &[]).unwrap_err(),
            "--kill-host 2@2s: host 2 is not in the job (hosts 0 to 1)"
        );
    }

    #[test]
    fn netns_hosts_run_rank_mod_h_over_their_link_with_real_hostnames() {
        let plan = plan_of(
            &[
                "-n",
                "6",
                "--netns",
                "4",
                "--link-delay",
                "50us",
                "--link-loss",
                "0.5",
            ],
            &[("FFD_DOMAIN", "lo")],
        )
        .unwrap();
        let netns = plan.netns.unwrap();
        assert_eq!(netns.hosts, 4);
        assert_eq!(netns.link.delay, Some(Duration::from_micros(50)));
        assert_eq!(netns.link.loss_percent, Some(0.5));
        assert_eq!(
            plan.hosts, None,
            "no faked FFD_HOSTNAME: the UTS name is real"
        );
        assert_eq!(
            var_of(&plan, "FFD_DOMAIN"),
            Some("ffd0"),
            "over the link, not lo"
        );
        assert_eq!(
            (0..6).map(|r| plan.host_of(r)).collect::<Vec<_>>(),
            [0, 1, 2, 3, 0, 1].map(Some)
        );
        let env = plan.env_of(5, "10.38.0.254:4000", Path::new("s"));
        assert!(!env.iter().any(|(k, _)| k == "FFD_HOSTNAME"), "{env:?}");
        let given = plan_of(&["-n", "2", "--netns", "2", "--domain", "eth9"], &[]).unwrap();
        assert_eq!(var_of(&given, "FFD_DOMAIN"), Some("eth9"));
        // An inherited FFD_HOSTNAME would make one host of all: overridden.
        let pinned = plan_of(&["-n", "3", "--netns", "2"], &[("FFD_HOSTNAME", "login1")]).unwrap();
        let env = pinned.env_of(2, "x", Path::new("s"));
        let names: Vec<&str> = env
            .iter()
            .filter(|(k, _)| k == "FFD_HOSTNAME")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(names, ["node0"]);
    }

    #[test]
    fn host_faults_expand_to_every_rank_of_the_host() {
        let plan = plan_of(
            &[
                "-n",
                "8",
                "--netns",
                "4",
                "--kill-host",
                "3@1s",
                "--cut-host",
                "1@2s",
                "--heal-host",
                "1@3s",
            ],
            &[],
        )
        .unwrap();
        let faults: Vec<(FaultKind, u32, u64)> = plan
            .schedule
            .faults()
            .iter()
            .map(|f| (f.kind, f.rank, f.at.as_secs()))
            .collect();
        use FaultKind::{Cut, Heal, Kill};
        assert_eq!(
            faults,
            [
                (Kill, 3, 1),
                (Kill, 7, 1),
                (Cut, 1, 2),
                (Cut, 5, 2),
                (Heal, 1, 3),
                (Heal, 5, 3)
            ]
        );
        assert_eq!(plan.end(), Duration::from_secs(5));
    }

    #[test]
    fn netns_combinations_that_make_no_job_are_usage_errors() {
        let cases: [(&[&str], &str); 9] = [
            (
                &["-n", "4", "--cut-host", "1@1s"],
                "--cut-host 1@1s needs --netns H (hosts with links of their own)",
            ),
            (
                &["-n", "4", "--hosts", "2", "--heal-host", "1@1s"],
                "--heal-host 1@1s needs --netns H",
            ),
            (
                &["-n", "4", "--link-delay", "50us"],
                "--link-delay 50us needs --netns H",
            ),
            (
                &["-n", "4", "--link-loss", "1"],
                "--link-loss 1 needs --netns H",
            ),
            (
                &["-n", "4", "--netns", "2", "--hosts", "2"],
                "--netns and --hosts both set the hosts; give one",
            ),
            (
                &["-n", "4", "--netns", "5"],
                "--netns 5: more hosts than ranks (-n 4); a host needs at least one rank",
            ),
            (
                &["-n", "4", "--netns", "2", "--cut-host", "2@1s"],
                "--cut-host 2@1s: host 2 is not in the job (hosts 0 to 1)",
            ),
            (
                &["-n", "4", "--netns", "2", "--heal-host", "1@1s"],
                "rank 1 is not cut off then; a heal needs an earlier --cut-host of its host",
            ),
            (
                &[
                    "-n",
                    "4",
                    "--netns",
                    "2",
                    "--cut-host",
                    "1@1s",
                    "--stop",
                    "1@2s",
                ],
                "--stop 1@2s: rank 1 is already stopped by --cut 1@1s",
            ),
        ];
        for (args, want) in cases {
            let err = plan_of(args, &[]).unwrap_err();
            assert!(err.contains(want), "{args:?}: {err}");
        }
        let cases: [(&[&str], &str); 4] = [
            (&["-n", "4", "--netns", "0"], "'--netns <H>'"),
            (&["-n", "400", "--netns", "251"], "'--netns <H>'"),
            (
                &["-n", "4", "--netns", "2", "--link-loss", "120"],
                "`120` is not a percentage; accepted: a number from 0 to 100",
            ),
            (
                &["-n", "4", "--netns", "2", "--link-delay", "50"],
                "`50` has no unit",
            ),
        ];
        for (args, want) in cases {
            let err = parse(args).unwrap_err();
            assert!(err.contains(want), "{args:?}: {err}");
        }
    }

    #[test]
    fn the_domain_is_left_alone_when_given_or_not_tcp() {
        let given = plan_of(&["-n", "2", "--domain", "eth0"], &[]).unwrap();
        assert_eq!(var_of(&given, "FFD_DOMAIN"), Some("eth0"));
        let inherited = plan_of(&["-n", "2"], &[("FFD_DOMAIN", "mlx5_0")]).unwrap();
        assert_eq!(var_of(&inherited, "FFD_DOMAIN"), None);
        let verbs = plan_of(&["-n", "2", "--provider", "verbs;ofi_rxm"], &[]).unwrap();
        assert_eq!(var_of(&verbs, "FFD_DOMAIN"), None);
        let rxm = plan_of(&["-n", "2"], &[("FFD_PROVIDER", "tcp;ofi_rxm")]).unwrap();
        assert_eq!(var_of(&rxm, "FFD_DOMAIN"), Some("lo"));
        assert_eq!(rxm.info.provider, "tcp;ofi_rxm");
    }

    #[test]
    fn options_beat_inherited_variables_and_bad_inherited_ones_are_caught() {
        let plan = plan_of(&["-n", "2", "--period", "20ms"], &[("FFD_PERIOD", "1ms")]).unwrap();
        assert_eq!(plan.info.period, Duration::from_millis(20));
        let err = plan_of(&["-n", "2"], &[("FFD_TIMEOUT", "soon")]).unwrap_err();
        assert!(
            err.starts_with("the agents would reject their settings: FFD_TIMEOUT=`soon`"),
            "{err}"
        );
        let err = plan_of(&["-n", "2", "--period", "10ms", "--timeout", "5ms"], &[]).unwrap_err();
        assert!(err.contains("the timeout must exceed the period"), "{err}");
    }

    #[test]
    fn bad_values_name_the_option_and_the_accepted_form() {
        let cases: [(&[&str], &str); 9] = [
            (
                &["-n", "4", "--kill", "3"],
                "'--kill <RANK@TIME>': `3` has no `@`",
            ),
            (&["-n", "4", "--kill", "3"], "e.g. `--kill 3@500ms`"),
            (&["-n", "4", "--stop", "1@500"], "time `500` has no unit"),
            (
                &["-n", "4", "--period", "10"],
                "`10` has no unit; accepted: a number with a unit",
            ),
            (&["-n", "4", "--duration", "0s"], "`0s` must be positive"),
            (&["-n", "0"], "'--ranks <RANKS>'"),
            (
                &["-n", "4", "--ring", "circle"],
                "`circle` is not one of topology|shuffle|rank",
            ),
            (
                &["-n", "4", "--bcast", "flood"],
                "`flood` is not one of bmg|chord",
            ),
            (&["-n", "4", "--hosts", "0"], "'--hosts <H>'"),
        ];
        for (args, want) in cases {
            let err = parse(args).unwrap_err();
            assert!(err.contains(want), "{args:?}: {err}");
        }
        let cases: [(&[&str], &str); 3] = [
            (
                &["-n", "4", "--kill", "4@1s"],
                "--kill 4@1s: rank 4 is not in the job (ranks 0 to 3)",
            ),
            (
                &["-n", "4", "--cont", "2@1s"],
                "--cont 2@1s: rank 2 is not stopped then",
            ),
            (
                &["-n", "4", "--kill", "1@3s", "--duration", "2s"],
                "--kill 1@3s is not before the end of the run (--duration 2s)",
            ),
        ];
        for (args, want) in cases {
            let err = plan_of(args, &[]).unwrap_err();
            assert!(err.contains(want), "{args:?}: {err}");
        }
    }

    #[test]
    fn agreements_are_scheduled_in_order_and_within_the_run() {
        let plan = plan_of(&["-n", "4", "--agree", "2s", "--agree", "500ms"], &[]).unwrap();
        assert_eq!(
            plan.agree,
            [Duration::from_millis(500), Duration::from_secs(2)]
        );
        assert_eq!(plan.end(), Duration::from_secs(4), "2 s after the last");
        let err = plan_of(&["-n", "4", "--agree", "3s", "--duration", "2s"], &[]).unwrap_err();
        assert_eq!(
            err,
            "--agree 3s: not before the end of the run (--duration 2s)"
        );
        assert!(
            parse(&["-n", "4", "--agree", "soon"])
                .unwrap_err()
                .contains("`soon`")
        );
    }

    #[test]
    fn agent_args_follow_the_double_dash() {
        let args = parse(&["-n", "2", "--", "--foo", "bar"]).unwrap();
        assert_eq!(args.agent_args, ["--foo", "bar"]);
    }
}
