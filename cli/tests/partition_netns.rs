//! A node cut off without a TCP reset: two "nodes" are network namespaces
//! joined by a bridge; ranks 0–2 run in one, 3–5 in the other. Taking the
//! second node's link down drops its packets silently (no RST, no error
//! completion), so only the observation ring's timeout can see it. Every
//! rank of the first node must report all three ranks of the second.
//!
//! Needs root and iproute2 (`ci/setup` installs it; CI runs as root).
//! Addresses are private ones inside namespaces this test creates, and
//! everything it creates is removed when it ends, however it ends.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use ffd::bootstrap::secret::JobSecret;
use serde_json::Value;

#[path = "../../tests/prereq/mod.rs"]
mod prereq;

const RANKS: u32 = 6;
const PER_NODE: u32 = 3;

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Two namespaces on a bridge; removed on drop.
struct Net {
    tag: String,
    subnet: u8,
}

impl Net {
    fn ns(&self, node: u32) -> String {
        format!("{}n{node}", self.tag)
    }
    fn bridge(&self) -> String {
        format!("{}br", self.tag)
    }
    /// The root-side end of `node`'s veth.
    fn outer(&self, node: u32) -> String {
        format!("{}o{node}", self.tag)
    }
    /// The namespace-side end, which is also the libfabric domain name there.
    fn inner(&self, node: u32) -> String {
        format!("{}i{node}", self.tag)
    }
    fn root_addr(&self) -> String {
        format!("10.213.{}.1", self.subnet)
    }

    fn create() -> Result<Net, String> {
        let pid = std::process::id();
        let net = Net {
            tag: format!("ffd{}", pid % 100_000),
            subnet: (pid % 250) as u8 + 1,
        };
        let br = net.bridge();
        ip(&["link", "add", &br, "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", net.root_addr()),
            "dev",
            &br,
        ])?;
        ip(&["link", "set", &br, "up"])?;
        for node in 0..2 {
            let (ns, outer, inner) = (net.ns(node), net.outer(node), net.inner(node));
            ip(&["netns", "add", &ns])?;
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", &inner,
            ])?;
            ip(&["link", "set", &inner, "netns", &ns])?;
            ip(&["link", "set", &outer, "master", &br, "up"])?;
            let addr = format!("10.213.{}.{}/24", net.subnet, 10 + node);
            ip(&[
                "netns", "exec", &ns, "ip", "addr", "add", &addr, "dev", &inner,
            ])?;
            ip(&["netns", "exec", &ns, "ip", "link", "set", &inner, "up"])?;
            ip(&["netns", "exec", &ns, "ip", "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for node in 0..2 {
            let _ = ip(&["link", "del", &self.outer(node)]);
            let _ = ip(&["netns", "del", &self.ns(node)]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
    }
}

/// The job's secret in a private directory of this test's; removed on drop.
struct Secret(std::path::PathBuf);

impl Secret {
    fn create() -> Secret {
        let dir = std::env::temp_dir().join(format!("ffd-netns-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("a directory for the secret");
        JobSecret::random()
            .unwrap()
            .write_new_file(&dir.join("secret"))
            .expect("the secret file");
        Secret(dir)
    }
    fn file(&self) -> std::path::PathBuf {
        self.0.join("secret")
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process killed and reaped on drop.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_node_cut_off_without_a_reset_is_reported_by_timeout() {
    if !prereq::available(
        "a_node_cut_off_without_a_reset_is_reported_by_timeout",
        &[prereq::netns()],
    ) {
        return;
    }
    let net = Net::create().expect("create the namespaces");
    let ffd = env!("CARGO_BIN_EXE_ffd");
    // Given to the rendezvous, which is killed at the end and so could not
    // remove one it made.
    let secret = Secret::create();
    let secret_file = secret.file();

    // The rendezvous listens on the bridge, reachable from both nodes.
    let mut rendezvous = Reaped(
        Command::new(ffd)
            .args([
                "rendezvous",
                "-n",
                &RANKS.to_string(),
                "--listen",
                &format!("{}:0", net.root_addr()),
                "--secret-file",
                secret_file.to_str().unwrap(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("ffd rendezvous"),
    );
    let (mut first, mut second) = (String::new(), String::new());
    let mut printed = BufReader::new(rendezvous.0.stdout.take().unwrap());
    printed.read_line(&mut first).unwrap();
    printed.read_line(&mut second).unwrap();
    let addr = first
        .trim()
        .strip_prefix("FFD_BOOTSTRAP=")
        .unwrap_or_else(|| panic!("{first}"))
        .to_owned();
    assert_eq!(
        second.trim(),
        format!("FFD_SECRET_FILE={}", secret_file.display())
    );

    let (tx, rx) = mpsc::channel::<(u32, Value)>();
    let mut agents = Vec::new();
    for rank in 0..RANKS {
        let node = rank / PER_NODE;
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &net.ns(node),
                ffd,
                "agent",
                "--stdin-control",
            ])
            .env("FFD_BOOTSTRAP", &addr)
            .env("FFD_RANK", rank.to_string())
            .env("FFD_SIZE", RANKS.to_string())
            .env("FFD_SECRET_FILE", &secret_file)
            .env("FFD_DOMAIN", net.inner(node))
            .env("FFD_HOSTNAME", format!("node{node}"))
            .env("FFD_PERIOD", "10ms")
            .env("FFD_TIMEOUT", "100ms")
            .env("FFD_CORE", "none")
            // Our end of stdin stays open (in `agents`) until the end.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("ffd agent in a namespace");
        let stdout = child.stdout.take().unwrap();
        let tx = tx.clone();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send((rank, v));
                }
            }
        });
        agents.push(Reaped(child));
    }
    drop(tx);

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ready = 0;
    while ready < RANKS {
        let left = deadline.saturating_duration_since(Instant::now());
        let (rank, line) = rx
            .recv_timeout(left)
            .expect("every agent becomes ready within 60 s");
        if line["event"] == "ready" {
            ready += 1;
        } else {
            panic!("rank {rank} said {line} before all were ready");
        }
    }

    // Cut node 1 off: its link goes down, packets vanish, nobody is reset.
    let cut = Instant::now();
    ip(&["link", "set", &net.outer(1), "down"]).expect("cut node 1");

    let survivors: Vec<u32> = (0..PER_NODE).collect();
    let cut_off: Vec<u32> = (PER_NODE..RANKS).collect();
    let mut learned = std::collections::BTreeSet::new();
    let mut causes = Vec::new();
    let bound = Duration::from_millis(100 * (cut_off.len() as u64 + 1)) + Duration::from_secs(2);
    while learned.len() < survivors.len() * cut_off.len() {
        let left = (cut + bound).saturating_duration_since(Instant::now());
        let Ok((rank, line)) = rx.recv_timeout(left) else {
            panic!("after {bound:?} the first node knew only {learned:?} (of {cut_off:?})");
        };
        if line["event"] == "failed" && survivors.contains(&rank) {
            let failed = line["rank"].as_u64().unwrap() as u32;
            assert!(
                cut_off.contains(&failed),
                "rank {rank} reported live rank {failed}: {line}"
            );
            learned.insert((rank, failed));
            if line["detector"].as_u64() == Some(u64::from(rank)) {
                causes.push(line["cause"].as_str().unwrap_or("?").to_owned());
            }
        }
    }
    // With no reset, nothing is in-band: the first detections are timeouts.
    assert!(
        !causes.is_empty() && causes.iter().all(|c| c == "timeout"),
        "{causes:?}"
    );

    // Agents and the rendezvous are killed and reaped on drop, then the
    // namespaces go.
    drop(agents);
    drop(rendezvous);
    drop(net);
    drop(secret);
}
