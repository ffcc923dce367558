//! `ffd sim`: command-line arguments and the run of the simulator of
//! `ffd-protocol`, timed here (the protocol crate reads no clock).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use ffd::protocol::{BcastKind, EngineConfig, InbandMode, QuorumMode, RingKind};
use ffd_protocol::duration::format_duration;
use ffd_protocol::sim::{FaultSpec, parse_duration};
use ffd_protocol::sim::{NetModel, SimConfig, Simulator};

/// In-band error latency, or `off` (no error ever comes back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InbandLatency(pub Option<Duration>);

fn parse_inband_latency(s: &str) -> Result<InbandLatency, String> {
    if s.trim().eq_ignore_ascii_case("off") {
        Ok(InbandLatency(None))
    } else {
        parse_duration(s)
            .map(|d| InbandLatency(Some(d)))
            .map_err(|e| format!("{e}, or `off`"))
    }
}

/// `--period`'s and `--timeout`'s defaults, the protocol's own (clap wants
/// them as text).
static DEFAULT_PERIOD: LazyLock<String> =
    LazyLock::new(|| format_duration(EngineConfig::DEFAULT_PERIOD));
static DEFAULT_TIMEOUT: LazyLock<String> =
    LazyLock::new(|| format_duration(EngineConfig::DEFAULT_TIMEOUT));

/// Simulate a job of N ranks on virtual time and report detection and
/// propagation of the injected failures.
#[derive(clap::Args, Debug, Clone)]
pub struct SimArgs {
    /// Number of ranks.
    #[arg(long, value_name = "N")]
    pub ranks: u32,
    /// Number of hosts; ranks are placed on them in blocks [default: N/8].
    #[arg(long, value_name = "H")]
    pub hosts: Option<u32>,
    /// A fault, repeatable: crash:R@T, hang:R@T, resume:R@T, random:K@T,
    /// consecutive:R+K@T (K ring neighbours from R), host:H@T,
    /// partition:R[,R...]@T, heal@T, leave:R@T, leave:all@T, allbut:R@T,
    /// bcast:R@T (R broadcasts a payload), glitch:R>P@T (R sees a spurious
    /// transport error about P), agree@T (every running rank starts an
    /// agreement; rank r's flags are all ones but bit r mod 64).
    #[arg(long = "fail", value_name = "SPEC")]
    pub fail: Vec<FaultSpec>,
    /// Broadcast overlay.
    #[arg(long, value_name = "bmg|chord", default_value_t)]
    pub bcast: BcastKind,
    /// Ring order.
    #[arg(long, value_name = "topology|shuffle|rank", default_value_t)]
    pub ring: RingKind,
    /// What a transport error on a ring link means.
    #[arg(long, value_name = "declare|suspect|off", default_value_t)]
    pub inband: InbandMode,
    /// Whether silence needs a majority's confirmation (`majority`: a side
    /// of a partition without one excludes itself) or is declared at once.
    #[arg(long, value_name = "majority|off", default_value_t)]
    pub quorum: QuorumMode,
    /// Heartbeat period (e.g. 10ms).
    #[arg(long, value_name = "D", default_value = DEFAULT_PERIOD.as_str(), value_parser = parse_duration)]
    pub period: Duration,
    /// Detection timeout; must exceed the period.
    #[arg(long, value_name = "D", default_value = DEFAULT_TIMEOUT.as_str(), value_parser = parse_duration)]
    pub timeout: Duration,
    /// One-way link latency.
    #[arg(long, value_name = "D", default_value = "2us", value_parser = parse_duration)]
    pub latency: Duration,
    /// Uniform extra delay per message, up to this.
    #[arg(long, value_name = "D", default_value = "500ns", value_parser = parse_duration)]
    pub jitter: Duration,
    /// Time between two copies leaving one rank: a fan-out of k copies
    /// takes k times this, and a crash in its middle cuts it.
    #[arg(long, value_name = "D", default_value = "1us", value_parser = parse_duration)]
    pub send_cost: Duration,
    /// How long a write or send to a dead process takes to error, or `off`.
    #[arg(long, value_name = "D|off", default_value = "3ms", value_parser = parse_inband_latency)]
    pub inband_latency: InbandLatency,
    /// Model the runtime's liveness port (FFD_LIVENESS): a crashed rank
    /// whose host lives is refused by its port, its observer declaring it
    /// on that proof `--inband-latency` after the crash; a hung one never is.
    #[arg(long)]
    pub liveness: bool,
    /// Connection set-up on a link's first use, as on tcp;ofi_rxm under
    /// load (ring and overlay links are up from the start); with it, the
    /// start-up grace is the runtime's [default: links are up at once].
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub connect: Option<Duration>,
    /// Virtual run length [default: until every failure is known everywhere, at least a timeout after the last fault].
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Seed of every random choice of the run.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Count notice copies per directed link (reports the maximum).
    #[arg(long)]
    pub track_links: bool,
    /// Same-host watching (FFD_LOCAL=auto): same-host ranks watch each
    /// other (an exit seen after --exit-latency, hangs by counters), one
    /// leader per host on the fabric ring.
    #[arg(long)]
    pub local: bool,
    /// With --local: how long a pidfd takes to wake a same-host watcher.
    #[arg(long, value_name = "D", default_value = "150us", value_parser = parse_duration)]
    pub exit_latency: Duration,
    /// Authenticate every message as on a fabric: tags, sequence numbers
    /// and replay windows (the report is the same; the run slower and
    /// larger).
    #[arg(long)]
    pub authenticate: bool,
    /// Print nothing but errors.
    #[arg(long)]
    pub quiet: bool,
}

impl SimArgs {
    /// The simulation these arguments describe, or the message of a usage error.
    pub fn to_config(&self) -> Result<SimConfig, String> {
        if self.period.is_zero() {
            return Err(format!(
                "invalid value '{:?}' for '--period <D>': must be positive",
                self.period
            ));
        }
        if !EngineConfig::timeout_exceeds_period(self.period, self.timeout) {
            return Err(format!(
                "invalid value '{:?}' for '--timeout <D>': must exceed --period ({:?})",
                self.timeout, self.period
            ));
        }
        let mut cfg = SimConfig::new(self.ranks);
        if let Some(h) = self.hosts {
            cfg.hosts = h;
        }
        cfg.engine = EngineConfig {
            period: self.period,
            timeout: self.timeout,
            inband: self.inband,
            quorum: self.quorum,
            bcast: self.bcast,
            ring: self.ring,
            // The simulated links come up at once: a grace of one timeout
            // (not the runtime's default, made for connection set-up),
            // unless connection set-up is modelled.
            startup_grace: Some(match self.connect {
                Some(_) => EngineConfig::DEFAULT_STARTUP_GRACE,
                None => self.timeout,
            }),
            ..EngineConfig::default()
        };
        cfg.net = NetModel {
            latency: self.latency,
            jitter: self.jitter,
            inband_latency: self.inband_latency.0,
            send_cost: self.send_cost,
            connect: self.connect,
            liveness: self.liveness,
        };
        cfg.faults = self.fail.clone();
        cfg.local = self.local;
        cfg.exit_latency = self.exit_latency;
        cfg.seed = self.seed;
        cfg.duration = self.duration;
        cfg.track_links = self.track_links;
        cfg.authenticate = self.authenticate;
        Ok(cfg)
    }
}

/// Runs `ffd sim`. Exit code 2 for bad arguments, 1 if the JSON cannot be
/// written, 0 otherwise.
pub fn run(args: &SimArgs) -> ExitCode {
    let cfg = match args.to_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if cfg.ranks >= HUGE_PAGES_FROM {
        with_huge_pages();
    }
    let mut sim = match Simulator::new(cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let wall = Instant::now();
    let mut report = sim.run();
    report.totals.wall_s = wall.elapsed().as_secs_f64();
    report.totals.peak_rss_mb = peak_rss_mb();
    if !args.quiet {
        println!("{report}");
    }
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report).expect("a report serialises");
        if let Err(e) = std::fs::write(path, json + "\n") {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    // The process ends here: the kernel takes its memory back at once,
    // while dropping the simulator frees every Engine's allocations one
    // by one (2% of a 2^18-rank run, the Engines' pages read once more).
    std::mem::forget(sim);
    ExitCode::SUCCESS
}

/// From this many ranks `ffd sim` runs with transparent huge pages.
const HUGE_PAGES_FROM: u32 = 1 << 16;

/// The glibc tunable that makes malloc ask for transparent huge pages
/// (`madvise(MADV_HUGEPAGE)` on its heap and mappings; glibc 2.35+).
const HUGE_PAGES_TUNABLE: &str = "glibc.malloc.hugetlb";

/// Runs this `ffd sim` again, in place, with glibc's malloc asking for
/// transparent huge pages, unless `GLIBC_TUNABLES` already says whether it
/// should (`glibc.malloc.hugetlb=0` keeps 4 KiB pages). A large simulation
/// reads its Engines (about 1.8 KiB per rank) and its agenda at random
/// across gigabytes: with 4 KiB pages most of those reads also miss the
/// TLB (perf at 2^18 ranks: user time 20 s with 4 KiB pages, 13 s with
/// huge ones, same peak RSS). Where the kernel gives no huge pages
/// (`/sys/kernel/mm/transparent_hugepage/enabled` = never) or the C
/// library ignores the tunable, nothing changes. If the exec fails, this
/// process goes on as it is.
fn with_huge_pages() {
    use std::os::unix::process::CommandExt;
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return;
    }
    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    if tunables.contains(HUGE_PAGES_TUNABLE) {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    let tunables = if tunables.is_empty() {
        format!("{HUGE_PAGES_TUNABLE}=1")
    } else {
        format!("{tunables}:{HUGE_PAGES_TUNABLE}=1")
    };
    // Returns only if the exec failed.
    let _ = std::process::Command::new(exe)
        .arg0(arg0)
        .args(args)
        .env("GLIBC_TUNABLES", tunables)
        .exec();
}

/// This process's peak resident set size in MiB (Linux `VmHWM`), 0 if unknown.
pub fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser, Debug)]
    struct Wrapper {
        #[command(flatten)]
        sim: SimArgs,
    }

    fn parse(args: &[&str]) -> Result<SimArgs, clap::Error> {
        Wrapper::try_parse_from(std::iter::once("sim").chain(args.iter().copied())).map(|w| w.sim)
    }

    #[test]
    fn definition_is_consistent() {
        Wrapper::command().debug_assert();
    }

    #[test]
    fn parses_every_option() {
        let a = parse(&[
            "--ranks",
            "64",
            "--hosts",
            "8",
            "--fail",
            "crash:3@50ms",
            "--fail",
            "random:2@1s",
            "--bcast",
            "chord",
            "--period",
            "500us",
            "--timeout",
            "5ms",
            "--latency",
            "1us",
            "--jitter",
            "0ns",
            "--inband-latency",
            "off",
            "--quorum",
            "off",
            "--send-cost",
            "0ns",
            "--seed",
            "9",
            "--json",
            "/tmp/x.json",
        ])
        .unwrap();
        assert_eq!(
            (a.ranks, a.hosts, a.fail.len(), a.bcast),
            (64, Some(8), 2, BcastKind::Chord)
        );
        assert_eq!(
            (a.period, a.timeout, a.inband_latency),
            (
                Duration::from_micros(500),
                Duration::from_millis(5),
                InbandLatency(None)
            )
        );
        let cfg = a.to_config().unwrap();
        assert_eq!(
            (
                cfg.seed,
                cfg.net.inband_latency,
                cfg.engine.bcast,
                cfg.engine.quorum
            ),
            (9, None, BcastKind::Chord, QuorumMode::Off)
        );
        assert_eq!(cfg.net.send_cost, Duration::ZERO);
    }

    #[test]
    fn defaults_are_the_protocols_and_the_grace_is_one_timeout() {
        let a = parse(&["--ranks", "4", "--timeout", "300ms"]).unwrap();
        assert_eq!(
            (a.period, a.bcast, a.ring, a.inband, a.quorum),
            (
                EngineConfig::DEFAULT_PERIOD,
                BcastKind::default(),
                RingKind::default(),
                InbandMode::default(),
                QuorumMode::Majority
            )
        );
        let engine = a.to_config().unwrap().engine;
        assert_eq!(engine.startup_grace(), Duration::from_millis(300));
        let a = parse(&["--ranks", "4"]).unwrap();
        assert_eq!(a.timeout, EngineConfig::DEFAULT_TIMEOUT);
        assert_eq!(a.send_cost, NetModel::DEFAULT_SEND_COST);
    }

    #[test]
    fn bad_arguments_name_the_argument_and_the_form() {
        for (args, needle) in [
            (vec!["--ranks", "x"], "--ranks"),
            (vec!["--ranks", "4", "--period", "10"], "no unit"),
            (vec!["--ranks", "4", "--fail", "crash:1"], "crash:R@T"),
            (vec!["--ranks", "4", "--bcast", "tree"], "bmg|chord"),
            (vec!["--ranks", "4", "--inband-latency", "soon"], "`off`"),
        ] {
            let e = parse(&args).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().contains(needle), "{args:?}: {e}");
        }
        let a = parse(&["--ranks", "4", "--period", "10ms", "--timeout", "10ms"]).unwrap();
        assert!(a.to_config().unwrap_err().contains("--timeout"));
    }
}
