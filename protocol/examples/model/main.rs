//! The model checker of the protocol core: every interleaving of a small
//! job of Engines (N = 2 to 5), with crashes, lost and duplicated copies,
//! a partition, premature timeouts and the hosts' calls, explored
//! breadth-first (stateright) within bounds; the safety properties judged
//! in every state (`docs/model-checking.md`).
//!
//! ```text
//! cargo run --release -p ffd-protocol --example model -- --ranks 3 [--depth D] [--faults F]
//! ```
//!
//! Prints the properties, the states explored and "all hold", or the
//! shortest counterexample as a readable trace. Exits 0 if all hold, 1 if
//! a property broke, 2 on a usage error.

#![forbid(unsafe_code)]

// Shared with tests/model_check.rs.
#[allow(dead_code)]
mod harness;

use std::process::ExitCode;

use ffd_protocol::model_bugs::{self, Bug};
use harness::Bounds;

const USAGE: &str = "usage: model --ranks N [--depth D] [--faults F] [options]
  --ranks N        ranks in the job, 2 to 5 (required)
  --depth D        steps per path (default: 6 at N = 2 and 3, 5 at 4, 4 at 5)
  --faults F       crashes per path (default 1)
  --losses L       copies lost per path (default 1)
  --duplicates D   copies delivered twice per path (default 1)
  --stalls S       premature timeouts per path: a deadline fires before a live
                   emitter's beat lands (default 1)
  --partitions P   partitions per path, each may heal (default 1)
  --broadcasts B   payloads broadcast per path (default 1)
  --agreements A   user agreements each rank calls (default 1)
  --leaves L       ranks that leave per path (default 0)
  --probes P       liveness probes of an emitter per path: refused by a crashed
                   one, unanswered across a cut or by a stopped one, greeted
                   by a running one (default 0)
  --skew K         a rank's clock runs at most K timeouts ahead of the slowest
                   running rank's (default: unbounded)
  --threads T      checker threads (default 1: exact breadth-first order)
  --max-states S   stop after S states generated (repeats included), a bounded
                   run rather than an exhaustive one (default 20000000, about
                   8 GiB of memory; 0: no limit)
  --time-limit T   stop after T seconds (a bounded run, not an exhaustive one)
  --bug NAME       test only: put a known, fixed bug back (uncapped-votes,
                   origin-only-forwards, view-before-decision,
                   forgotten-ballots, silent-probe-as-proof); repeatable";

/// The default depth at `ranks` ranks.
fn default_depth(ranks: u32) -> u32 {
    match ranks {
        0..=3 => 6,
        4 => 5,
        _ => 4,
    }
}

fn number(flag: &str, value: Option<String>) -> Result<u64, String> {
    let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
    value
        .replace('_', "")
        .parse()
        .map_err(|e| format!("{flag} {value}: {e}"))
}

fn small(flag: &str, value: Option<String>) -> Result<u32, String> {
    let v = number(flag, value)?;
    u32::try_from(v)
        .ok()
        .filter(|&v| v <= 1000)
        .ok_or_else(|| format!("{flag} {v}: at most 1000"))
}

fn parse() -> Result<(Bounds, Vec<Bug>), String> {
    let mut ranks = None;
    let mut depth = None;
    let mut b = Bounds::new(0, 0);
    let mut bugs = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--ranks" => ranks = Some(small("--ranks", args.next())?),
            "--depth" => depth = Some(small("--depth", args.next())?),
            "--faults" => b.faults = small("--faults", args.next())?,
            "--losses" => b.losses = small("--losses", args.next())?,
            "--duplicates" => b.duplicates = small("--duplicates", args.next())?,
            "--stalls" => b.stalls = small("--stalls", args.next())?,
            "--partitions" => b.partitions = small("--partitions", args.next())?,
            "--broadcasts" => b.broadcasts = small("--broadcasts", args.next())?,
            "--agreements" => b.agreements = small("--agreements", args.next())?,
            "--leaves" => b.leaves = small("--leaves", args.next())?,
            "--probes" => b.probes = small("--probes", args.next())?,
            "--skew" => b.skew = Some(small("--skew", args.next())?),
            "--threads" => {
                b.threads = small("--threads", args.next())? as usize;
                if b.threads == 0 {
                    return Err("--threads 0: at least 1".to_owned());
                }
            }
            "--time-limit" => {
                let secs = number("--time-limit", args.next())?;
                b.time_limit = Some(std::time::Duration::from_secs(secs));
            }
            "--max-states" => {
                b.max_states = Some(number("--max-states", args.next())? as usize);
            }
            "--bug" => {
                let name = args.next().ok_or("--bug needs a name")?;
                let bug = Bug::ALL
                    .into_iter()
                    .find(|b| b.as_str() == name)
                    .ok_or_else(|| format!("--bug {name}: not a known bug"))?;
                bugs.push(bug);
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let ranks = ranks.ok_or("--ranks is required")?;
    if !(2..=5).contains(&ranks) {
        return Err(format!("--ranks {ranks}: 2 to 5"));
    }
    if b.faults >= ranks {
        return Err(format!(
            "--faults {}: fewer than the {ranks} ranks (one stays)",
            b.faults
        ));
    }
    b.ranks = ranks;
    b.max_states = match b.max_states {
        None => Some(20_000_000),
        Some(0) => None,
        cap => cap,
    };
    b.depth = depth.unwrap_or_else(|| default_depth(ranks));
    Ok((b, bugs))
}

fn main() -> ExitCode {
    let (bounds, bugs) = match parse() {
        Ok(p) => p,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("model: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    model_bugs::set(&bugs);
    for bug in &bugs {
        println!("(test only) bug put back: {}", bug.as_str());
    }
    let report = harness::run(&bounds);
    print!("{}", report.text());
    if report.all_hold() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
