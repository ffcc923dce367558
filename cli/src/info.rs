//! `ffd info`: the effective settings and where each came from, how
//! messages are authenticated and what dropping one is counted as, the
//! providers libfabric offers here, what the chosen one requires, whether
//! same-host ranks can watch each other through pidfds, and where the
//! progress thread would run.
//!
//! Owns: the report. Must not: open an endpoint or talk to other ranks.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ffd::config::{Config, Env, LocalMode, SchedPolicy, SourceFilterMode, var};
use ffd::fabric::{self, Info};
use ffd::node::{
    Boost, FIFO_PRIORITY, exit_word_probe, fifo_refusal, pidfd_probe, set_current_thread_fifo,
};
use ffd::runtime::placement;

/// Prints the report to `out`; problems go to `err`. Exit status 2 when a
/// setting is invalid, 1 when the chosen provider is not available.
pub fn run(out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    match report(out, err) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(err, "ffd info: {e}");
            ExitCode::FAILURE
        }
    }
}

fn report(out: &mut dyn Write, err: &mut dyn Write) -> std::io::Result<ExitCode> {
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            writeln!(err, "ffd info: {e}")?;
            return Ok(ExitCode::from(2));
        }
    };
    writeln!(
        out,
        "ffd {} (protocol version {})",
        env!("CARGO_PKG_VERSION"),
        ffd::protocol::wire::VERSION
    )?;
    writeln!(out, "\nsettings (variable, effective value, source):")?;
    for line in config.describe().lines() {
        writeln!(out, "  {line}")?;
    }
    for w in config.warnings() {
        writeln!(out, "  warning: {w}")?;
    }
    let env = Env::process();
    let bootstrap: Vec<String> = [var::BOOTSTRAP, var::RANK, var::SIZE, var::BOOTSTRAP_TIMEOUT]
        .iter()
        .filter_map(|v| env.get(v).map(|value| format!("{v}={value}")))
        .collect();
    if !bootstrap.is_empty() {
        writeln!(out, "  bootstrap: {}", bootstrap.join(" "))?;
    }

    writeln!(
        out,
        "\nmessages (wire format version {}): each sealed for its receiver with a 16-byte keyed-BLAKE3 tag",
        ffd::protocol::wire::VERSION
    )?;
    let secret = match env.get(var::SECRET_FILE) {
        Some(path) => format!("{}={path}", var::SECRET_FILE),
        None => "the bootstrap's (ffd run), else drawn by rank 0 at start".to_owned(),
    };
    writeln!(out, "  job secret: {secret}")?;
    let reasons: Vec<&str> = ffd::protocol::RejectReason::ALL
        .iter()
        .map(|r| r.as_str())
        .collect();
    writeln!(
        out,
        "  dropped and counted by reason (stats: engine.rejected): {}",
        reasons.join(", ")
    )?;

    writeln!(
        out,
        "\nproviders offered by libfabric {} (RDM endpoints with RMA and messages):",
        libfabric_version()
    )?;
    let patched = patched_libfabric();
    match fabric::offerings() {
        Ok(offers) => {
            let mut by_provider: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for o in &offers {
                by_provider
                    .entry(o.provider.clone())
                    .or_default()
                    .push(o.domain.clone());
            }
            let mut testing = Vec::new();
            for (provider, mut domains) in by_provider {
                domains.dedup();
                writeln!(out, "  {provider:<16} domains: {}", domains.join(", "))?;
                if testing_provider(&provider).is_some() {
                    testing.push(provider);
                }
            }
            if !testing.is_empty() {
                writeln!(
                    out,
                    "  {} are testing providers: {}",
                    testing.join(", "),
                    exposed(patched.as_deref())
                )?;
            }
        }
        Err(e) => writeln!(out, "  (could not list: {e})")?,
    }

    writeln!(
        out,
        "\nchosen: FFD_PROVIDER={} FFD_DOMAIN={}",
        config.provider(),
        config.domain().unwrap_or("any")
    )?;
    let info = match Info::query(config.provider(), config.domain()) {
        Ok(info) => info,
        Err(e) => {
            writeln!(err, "ffd info: {e}")?;
            return Ok(ExitCode::FAILURE);
        }
    };
    let pci = info.pci_address().map(|p| p.to_string());
    writeln!(
        out,
        "  provider {} fabric {} domain {}",
        info.provider(),
        info.fabric_name(),
        info.domain_name()
    )?;
    writeln!(
        out,
        "  mr_mode {}, inject size {}, max message {}, sender addresses {}",
        info.mr_mode(),
        info.inject_size(),
        info.max_msg_size(),
        if info.has_source() {
            "yes (checked against each message's sender)"
        } else {
            "no (only the tag vouches for a message's sender)"
        }
    )?;
    writeln!(
        out,
        "  NIC PCI address: {}",
        pci.as_deref().unwrap_or("none reported")
    )?;
    if let Some(exposure) = exposure(&info.provider(), patched.as_deref()) {
        writeln!(out, "  {exposure}")?;
    }

    writeln!(
        out,
        "\nclosed to strangers (FFD_SOURCE_FILTER={}):",
        config.source_filter()
    )?;
    let by_mail = config.local() == LocalMode::Auto && exit_word_probe().is_ok();
    for line in protections(
        &info.provider(),
        (config.source_filter(), by_mail),
        filter_probe(),
    ) {
        writeln!(out, "  {line}")?;
    }

    writeln!(out, "\nsame-host watching (FFD_LOCAL={}):", config.local())?;
    writeln!(out, "  {}", local_watching(config.local()))?;

    writeln!(out, "\nprogress thread (FFD_CORE={}):", config.core())?;
    match placement::choose(config.core(), pci.as_deref(), 0) {
        Ok(p) => writeln!(
            out,
            "  {}\n  (as a host's first rank; with auto the others spread over the same CPUs)",
            p.reason
        )?,
        Err(e) => {
            writeln!(err, "ffd info: {e}")?;
            return Ok(ExitCode::from(2));
        }
    }
    writeln!(
        out,
        "  scheduling (FFD_SCHED={}): {}",
        config.sched(),
        scheduling(config.sched())
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Where the libfabric bugs that let a stranger's connection kill a rank
/// are described, with their fix.
const FIX_DOCUMENT: &str = "docs/upstream/libfabric-rxm-conn-id.md";

/// What a crafted connection does to the libfabric this process runs on:
/// `patched` is the stamp of `ci/libfabric-patched` beside it, if any.
fn crash_risk(patched: Option<&Path>) -> String {
    match patched {
        Some(stamp) => format!(
            "this libfabric is a patched build ({}): the crafted connections of \
             {FIX_DOCUMENT} are dropped, not a crash",
            stamp.display()
        ),
        None => format!(
            "on libfabric 1.13 to 2.6 one crafted connection kills a tcp rank (see \
             {FIX_DOCUMENT}; ci/libfabric-patched builds one with the fix)"
        ),
    }
}

/// The stamp of `ci/libfabric-patched` beside the libfabric this process
/// runs on, if it is such a build.
fn patched_libfabric() -> Option<PathBuf> {
    fabric::mapped_libfabric().and_then(|lib| fabric::patched_stamp(&lib))
}

/// What every testing provider shares, said once under the list.
fn exposed(patched: Option<&Path>) -> String {
    format!(
        "they accept connections (udp: datagrams) from anyone who can reach their port, \
         with no secret, and libfabric parses what arrives before ffd checks a tag; {}; \
         run them only where every host that can reach the port is trusted",
        crash_risk(patched)
    )
}

/// Whether `provider` is one of the socket providers kept for testing, and
/// what it takes from strangers: `connections` or `datagrams`.
fn testing_provider(provider: &str) -> Option<&'static str> {
    match provider.split(';').next().unwrap_or(provider) {
        "tcp" | "sockets" | "net" => Some("connections"),
        "udp" => Some("datagrams"),
        _ => None,
    }
}

/// The chosen provider's exposure, when it is a testing provider: it
/// listens on a port of the chosen domain and takes anyone's traffic.
fn exposure(provider: &str, patched: Option<&Path>) -> Option<String> {
    let takes = testing_provider(provider)?;
    Some(format!(
        "exposure: {provider} is a testing provider: it accepts {takes} from anyone who can \
         reach its port, with no secret, and libfabric parses what arrives before ffd checks \
         a tag; {}; run it only where every host that can reach the port is trusted",
        crash_risk(patched)
    ))
}

/// Whether this process may attach a source filter: tried on a listener
/// of its own on 127.0.0.1, closed at once.
fn filter_probe() -> Result<(), String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let mut name = vec![0u8; 16];
    name[..2].copy_from_slice(&AF_INET.to_ne_bytes());
    name[2..4].copy_from_slice(&addr.port().to_be_bytes());
    name[4..8].copy_from_slice(&[127, 0, 0, 1]);
    fabric::SourceGuard::deny_all(&name)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// `AF_INET`, a `sockaddr_in`'s family field (Linux).
const AF_INET: u16 = 2;

/// What keeps a stranger (a process outside the job) from reaching
/// libfabric below ffd's tag, for `provider` and the setting; `by_mail`:
/// same-host messages go through the host's mailboxes (`FFD_LOCAL=auto`
/// with `futex_waitv` here); `probe`: whether a filter could be attached
/// here.
fn protections(
    provider: &str,
    (mode, by_mail): (SourceFilterMode, bool),
    probe: Result<(), String>,
) -> Vec<String> {
    let mut lines = vec!["messages: a keyed tag on each, checked before use (above)".to_owned()];
    if by_mail {
        lines.push(
            "one-host job (every rank on this host, e.g. a one-node MPI job or `ffd run`): no \
             fabric endpoint at all; its ranks' messages go through the host's segment, and \
             no socket of libfabric's and no liveness port listens, whoever runs the job"
                .to_owned(),
        );
    }
    if fabric::listens_on_sockets(provider) {
        // With the mailboxes only a job across hosts opens a port.
        let label = if by_mail {
            "source filter (a job across hosts)"
        } else {
            "source filter"
        };
        let filter = "source filter: the listening socket admits only the job's host \
                      addresses (a kernel filter, deny-all from open, the job's addresses \
                      after the exchange, locked); still open to any process on one of the \
                      job's hosts";
        lines.push(match (mode, probe) {
            (SourceFilterMode::Off, _) => {
                format!("{label}: off: anyone who reaches the port reaches libfabric")
            }
            (_, Ok(())) if by_mail => "source filter (a job across hosts): the listening \
                                       socket admits only the addresses of the job's other \
                                       hosts (same-host messages go through the host's \
                                       segment; a kernel filter, deny-all from open, those \
                                       addresses after the exchange, locked); still open \
                                       to any process on another of the job's hosts; \
                                       attachable here"
                .to_owned(),
            (_, Ok(())) => format!("{filter}; attachable here"),
            (SourceFilterMode::Auto, Err(why)) => format!(
                "{label}: refused here ({why}): auto starts without it, so anyone who \
                 reaches the port reaches libfabric"
            ),
            (SourceFilterMode::On, Err(why)) => {
                format!("{label}: refused here ({why}): on makes start-up fail")
            }
        });
    } else if provider.split(';').next() == Some("shm") {
        lines.push(
            "shm: no socket; regions of mode 0600, reachable only by this user's processes"
                .to_owned(),
        );
    } else {
        lines.push(format!(
            "{provider}: no kernel socket; access is the fabric's own (e.g. its subnet or \
             RDMA connection manager)"
        ));
    }
    lines.push(
        "ffd run: the job in a private network namespace (its ports unreachable from \
         outside; --shared-network opts out)"
            .to_owned(),
    );
    lines
}

/// The policy the progress thread would run under here: `fifo` and
/// `boost` are tried on a thread of its own, which then ends.
fn scheduling(sched: SchedPolicy) -> String {
    let refused = |e: &std::io::Error| {
        format!(
            "refused here ({}): the thread would keep the normal policy",
            fifo_refusal(e)
        )
    };
    match sched {
        SchedPolicy::Normal => "normal (SCHED_OTHER)".to_owned(),
        SchedPolicy::Boost => {
            match std::thread::spawn(|| Boost::for_current_thread(true, true).map(|_| ())).join() {
                Ok(Ok(())) => format!(
                    "normal, lifted to SCHED_FIFO priority {FIFO_PRIORITY} on any allowed CPU \
                     while it handles a same-host exit or notice; allowed here"
                ),
                Ok(Err(e)) => refused(&e),
                Err(_) => "could not be tried (the trial thread panicked)".to_owned(),
            }
        }
        SchedPolicy::Fifo => match std::thread::spawn(set_current_thread_fifo).join() {
            Ok(Ok(())) => format!("SCHED_FIFO priority {FIFO_PRIORITY}, allowed here"),
            Ok(Err(e)) => refused(&e),
            Err(_) => "could not be tried (the trial thread panicked)".to_owned(),
        },
    }
}

/// How same-host ranks would watch each other here: exit words, pidfds,
/// or why not.
fn local_watching(mode: LocalMode) -> String {
    let pidfd = match pidfd_probe() {
        Ok(()) => "pidfd available: a same-host exit is seen once the kernel has \
                   torn the process down (proof)"
            .to_owned(),
        Err(why) => format!("pidfd unavailable ({why}): an exit is found in a timeout"),
    };
    match mode {
        LocalMode::Off => "off: every rank heartbeats over the fabric".to_owned(),
        LocalMode::Counters => {
            "counters in shared memory only (an exit is found in a timeout)".to_owned()
        }
        LocalMode::Pidfd => format!("{pidfd}; hangs through counters in shared memory"),
        LocalMode::Auto => {
            let words = match exit_word_probe() {
                Ok(()) => "exit words available (robust futexes, futex_waitv): a same-host \
                           exit is seen as it begins, before the teardown (proof), and news \
                           of a failure reaches the host's ranks through its notice board \
                           (one wake-up each, no fabric copy)"
                    .to_owned(),
                Err(why) => format!(
                    "exit words unavailable ({why}): no notice board either, news \
                     reaches the host's ranks over the fabric"
                ),
            };
            format!("{words}; {pidfd}; hangs through counters in shared memory")
        }
    }
}

fn libfabric_version() -> String {
    let v = fabric::runtime_version();
    format!("{}.{}", v >> 16, v & 0xffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protections_follow_the_provider_and_the_setting() {
        let on = protections("tcp;ofi_rxm", (SourceFilterMode::Auto, false), Ok(()));
        assert!(
            on.iter()
                .any(|l| l.contains("admits only the job's host addresses"))
        );
        assert!(!on.iter().any(|l| l.contains("admits none")));
        let mail = protections("tcp;ofi_rxm", (SourceFilterMode::Auto, true), Ok(()));
        assert!(
            mail.iter()
                .any(|l| l.starts_with("one-host job") && l.contains("no fabric endpoint"))
        );
        assert!(!on.iter().any(|l| l.contains("no fabric endpoint")));
        assert!(!mail.iter().any(|l| l.contains("one of the job's hosts")));
        let off = protections("tcp;ofi_rxm", (SourceFilterMode::Off, true), Ok(()));
        assert!(
            off.iter()
                .any(|l| l.contains("source filter (a job across hosts): off"))
        );
        let off = protections("tcp;ofi_rxm", (SourceFilterMode::Off, false), Ok(()));
        assert!(off.iter().any(|l| l.contains("source filter: off")));
        let refused = protections(
            "sockets",
            (SourceFilterMode::Auto, true),
            Err("EPERM".into()),
        );
        assert!(refused.iter().any(|l| l.contains("refused here (EPERM)")));
        // Refused or not, a one-host job opens no endpoint.
        assert!(refused.iter().any(|l| l.contains("no fabric endpoint")));
        let shm = protections("shm", (SourceFilterMode::Auto, true), Ok(()));
        assert!(shm.iter().any(|l| l.contains("mode 0600")));
        assert!(!shm.iter().any(|l| l.contains("source filter")));
    }

    #[test]
    fn testing_providers_say_they_take_anyones_traffic_and_name_the_fix() {
        for provider in ["tcp;ofi_rxm", "tcp", "sockets", "net", "udp;ofi_rxd"] {
            let said = exposure(provider, None).unwrap_or_else(|| panic!("{provider}"));
            assert!(
                said.contains("from anyone who can reach its port"),
                "{said}"
            );
            assert!(said.contains(FIX_DOCUMENT), "{said}");
            assert!(said.contains("kills a tcp rank"), "{said}");
            let stamp = Path::new("/opt/lf/share/ffd/libfabric-patched");
            let patched = exposure(provider, Some(stamp)).unwrap();
            assert!(
                patched.contains("a patched build (/opt/lf/share/ffd/libfabric-patched)")
                    && patched.contains("dropped, not a crash")
                    && !patched.contains("kills a tcp rank"),
                "{patched}"
            );
        }
        assert!(
            exposure("udp;ofi_rxd", None)
                .unwrap()
                .contains("accepts datagrams")
        );
        assert!(
            exposure("tcp;ofi_rxm", None)
                .unwrap()
                .contains("accepts connections")
        );
        for provider in ["verbs;ofi_rxm", "shm", "efa", "cxi"] {
            assert_eq!(exposure(provider, None), None, "{provider}");
        }
        assert!(exposed(None).contains("from anyone who can reach their port"));
        let doc = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(FIX_DOCUMENT);
        assert!(doc.is_file(), "{} exists", doc.display());
    }
}
