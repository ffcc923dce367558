//! The emulated hosts of `ffd run --netns H`: a namespace cluster on one
//! machine.
//!
//! Host h is a network namespace and a UTS namespace whose hostname is
//! `node<h>` ([`ffd::node::Namespaces`]); its ranks (r mod H = h) start
//! inside both, so each host has a network stack of its own and the
//! library's same-host grouping (by hostname) puts them together. A host's
//! one interface, [`HOST_IFACE`] with address 10.38.0.(h+1)/24, is a veth
//! whose other end, `ffd-h<h>`, is a port of the bridge [`BRIDGE`] in a
//! job-private switch namespace; the rendezvous listens there, on
//! [`switch_addr`]. Every namespace is anonymous (held by a file
//! descriptor of the launcher's, never named under `/run/netns`), so two
//! jobs never share a name or an address, and nothing outlives the job:
//! the kernel frees a namespace, and the veths and bridge in it, once the
//! launcher has dropped the [`Cluster`] and the last process inside has
//! exited, however the launcher ended.
//!
//! Link shaping (`--link-delay`, `--link-loss`) is tc netem on each
//! bridge-side veth: a packet into host h waits the delay (and is lost with
//! the probability) once, so host to host is one delay each way. A cut
//! ([`Cluster::set_link`]) takes the bridge-side veth down: the host's
//! packets vanish without a reset or an error, as on a pulled cable.
//!
//! Owns: the namespaces, the `ip` and `tc` commands that wire them. Must
//! not: use `unsafe` (the namespaces are `ffd::node`'s), or name anything
//! outside its own namespaces.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::Duration;

use ffd::config::format_duration;
use ffd::node::Namespaces;

/// The interface of every host (each in its own namespace, so one name).
pub const HOST_IFACE: &str = "ffd0";
/// The bridge in the switch namespace.
pub const BRIDGE: &str = "ffd-br";
/// Most hosts of one job (addresses 10.38.0.1 to .250 on one /24).
pub const MAX_HOSTS: u32 = 250;

/// How the links are shaped (tc netem); neither set: not at all.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkShape {
    /// Added to every packet into a host (so once each way between two hosts).
    pub delay: Option<Duration>,
    /// Probability, in percent, that a packet into a host is lost.
    pub loss_percent: Option<f64>,
}

impl LinkShape {
    pub fn is_shaped(&self) -> bool {
        self.delay.is_some_and(|d| !d.is_zero()) || self.loss_percent.is_some_and(|p| p > 0.0)
    }

    /// The arguments of `tc qdisc add ... netem`.
    fn netem(&self) -> String {
        let mut s = String::from("netem");
        if let Some(d) = self.delay.filter(|d| !d.is_zero()) {
            let _ = write!(s, " delay {}us", d.as_micros());
        }
        if let Some(p) = self.loss_percent.filter(|&p| p > 0.0) {
            let _ = write!(s, " loss {p}%");
        }
        s
    }
}

/// `ffd run --netns`'s part of a [`Plan`](super::Plan).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NetnsPlan {
    pub hosts: u32,
    pub link: LinkShape,
    /// The launcher's environment sets `FFD_HOSTNAME`, which would put
    /// every rank on one host: the agents get their host's name in it.
    pub pin_hostname: bool,
}

/// Host h's address on the bridge.
pub fn host_addr(host: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 38, 0, (host + 1) as u8)
}

/// The switch namespace's address on the bridge: the rendezvous's.
pub fn switch_addr() -> Ipv4Addr {
    Ipv4Addr::new(10, 38, 0, 254)
}

/// Host h's bridge-side veth, in the switch namespace.
fn port(host: u32) -> String {
    format!("ffd-h{host}")
}

/// Why the cluster could not be made or changed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "cannot make the namespaces of {what}: {source}; --netns needs root, or unprivileged \
         user namespaces (which ffd run uses unless --shared-network)"
    )]
    Namespaces { what: String, source: io::Error },
    #[error("cannot run `{program}` (iproute2, needed by --netns): {source}")]
    Tool {
        program: &'static str,
        source: io::Error,
    },
    #[error("{what}: `{program}` failed: {detail}")]
    Failed {
        what: String,
        program: &'static str,
        detail: String,
    },
    #[error(
        "--link-delay and --link-loss need tc netem, which this kernel lacks \
         (CONFIG_NET_SCH_NETEM, module sch_netem); tc said: {0}"
    )]
    NoNetem(String),
}

/// The switch and the hosts of a running job; see the module doc.
#[derive(Debug)]
pub struct Cluster {
    switch: Namespaces,
    hosts: Vec<Namespaces>,
}

impl Cluster {
    /// Makes the switch, `plan.hosts` hosts wired to it, and shapes the links.
    pub fn create(plan: &NetnsPlan) -> Result<Cluster, ClusterError> {
        let make = |name: &str| {
            Namespaces::create(name).map_err(|source| ClusterError::Namespaces {
                what: name.to_owned(),
                source,
            })
        };
        let switch = make("ffd-switch")?;
        run_batch(
            &switch,
            None,
            "ip",
            "the bridge",
            &[
                format!("link add {BRIDGE} type bridge"),
                format!("addr add {}/24 dev {BRIDGE}", switch_addr()),
                format!("link set {BRIDGE} up"),
            ],
        )?;
        let mut cluster = Cluster {
            switch,
            hosts: Vec::with_capacity(plan.hosts as usize),
        };
        for h in 0..plan.hosts {
            let host = make(&format!("node{h}"))?;
            run_batch(
                &host,
                Some(&cluster.switch),
                "ip",
                &format!("host node{h}"),
                &[
                    format!(
                        "link add {HOST_IFACE} type veth peer name {} netns /proc/self/fd/{PASSED_FD}",
                        port(h),
                    ),
                    format!("addr add {}/24 dev {HOST_IFACE}", host_addr(h)),
                    format!("link set {HOST_IFACE} up"),
                ],
            )?;
            cluster.hosts.push(host);
        }
        let ports: Vec<String> = (0..plan.hosts)
            .map(|h| format!("link set {} master {BRIDGE} up", port(h)))
            .collect();
        run_batch(&cluster.switch, None, "ip", "the bridge's ports", &ports)?;
        if plan.link.is_shaped() {
            let netem = plan.link.netem();
            let qdiscs: Vec<String> = (0..plan.hosts)
                .map(|h| format!("qdisc add dev {} root {netem}", port(h)))
                .collect();
            run_batch(&cluster.switch, None, "tc", "the links' shape", &qdiscs).map_err(
                |e| match e {
                    ClusterError::Failed { detail, .. }
                        if detail.contains("qdisc kind is unknown") =>
                    {
                        ClusterError::NoNetem(detail)
                    }
                    e => e,
                },
            )?;
        }
        Ok(cluster)
    }

    /// How many hosts.
    pub fn len(&self) -> u32 {
        self.hosts.len() as u32
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// Host h's namespaces (its ranks are spawned inside them).
    pub fn host(&self, host: u32) -> &Namespaces {
        &self.hosts[host as usize]
    }

    /// Runs `f` on a thread inside the switch namespace (the rendezvous's
    /// socket is made there, on [`switch_addr`]).
    pub fn in_switch<T: Send>(&self, f: impl FnOnce() -> T + Send) -> io::Result<T> {
        self.switch.run_inside(f)
    }

    /// Takes host h's link down (`up` false: a cut, no reset) or up.
    pub fn set_link(&self, host: u32, up: bool) -> Result<(), ClusterError> {
        let state = if up { "up" } else { "down" };
        run_batch(
            &self.switch,
            None,
            "ip",
            &format!("link {state} of host node{host}"),
            &[format!("link set {} {state}", port(host))],
        )
    }

    /// One line per host for the verbose log: its name, address and
    /// namespaces (`net:[INODE]` as `/proc/PID/ns/net` reads).
    pub fn describe(&self, shape: &LinkShape) -> Vec<String> {
        let mut lines = vec![format!(
            "switch: bridge {BRIDGE} {} in {}{}",
            switch_addr(),
            self.switch.net_id().unwrap_or_default(),
            match (shape.delay, shape.loss_percent) {
                (None, None) => String::new(),
                (d, p) => format!(
                    "; links: delay {}, loss {}%",
                    d.map_or("0s".into(), format_duration),
                    p.unwrap_or(0.0)
                ),
            }
        )];
        for (h, host) in self.hosts.iter().enumerate() {
            lines.push(format!(
                "host node{h}: {HOST_IFACE} {} in {} {}",
                host_addr(h as u32),
                host.net_id().unwrap_or_default(),
                host.uts_id().unwrap_or_default()
            ));
        }
        lines
    }
}

/// The descriptor a batch gets another namespace as (`/proc/self/fd/3`).
const PASSED_FD: i32 = 3;

/// Runs `program -batch -` with `lines` inside `ns`, with `pass` open as
/// [`PASSED_FD`]; what failed if it did.
fn run_batch(
    ns: &Namespaces,
    pass: Option<&Namespaces>,
    program: &'static str,
    what: &str,
    lines: &[String],
) -> Result<(), ClusterError> {
    let mut command = Command::new(program);
    command
        .args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    ns.spawn_admin_inside(&mut command);
    if let Some(other) = pass {
        other.pass_net_as(&mut command, PASSED_FD);
    }
    let mut child = command
        .spawn()
        .map_err(|source| ClusterError::Tool { program, source })?;
    if let Some(mut stdin) = child.stdin.take() {
        let mut text = lines.join("\n");
        text.push('\n');
        // A failure shows in the exit status and stderr below.
        let _ = stdin.write_all(text.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|source| ClusterError::Tool { program, source })?;
    if out.status.success() {
        return Ok(());
    }
    let detail = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    Err(ClusterError::Failed {
        what: what.to_owned(),
        program,
        detail: if detail.is_empty() {
            format!("exit {}", out.status)
        } else {
            detail
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netem_is_asked_only_for_what_is_set() {
        let none = LinkShape::default();
        assert!(!none.is_shaped());
        let zero = LinkShape {
            delay: Some(Duration::ZERO),
            loss_percent: Some(0.0),
        };
        assert!(!zero.is_shaped(), "zero delay and loss: no qdisc at all");
        let both = LinkShape {
            delay: Some(Duration::from_micros(50)),
            loss_percent: Some(0.5),
        };
        assert!(both.is_shaped());
        assert_eq!(both.netem(), "netem delay 50us loss 0.5%");
        let loss = LinkShape {
            delay: None,
            loss_percent: Some(2.0),
        };
        assert_eq!(loss.netem(), "netem loss 2%");
    }

    #[test]
    fn hosts_get_distinct_addresses_beside_the_switch() {
        assert_eq!(host_addr(0), Ipv4Addr::new(10, 38, 0, 1));
        assert_eq!(host_addr(MAX_HOSTS - 1), Ipv4Addr::new(10, 38, 0, 250));
        assert!((0..MAX_HOSTS).all(|h| host_addr(h) != switch_addr()));
    }
}
