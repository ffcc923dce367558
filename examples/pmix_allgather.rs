//! Allgather rounds through the PMIx bootstrap, for running under a PMIx
//! launcher:
//!
//! ```sh
//! cargo build --example pmix_allgather --features pmix
//! mpirun --allow-run-as-root --oversubscribe -np 4 target/debug/examples/pmix_allgather
//! ```
//!
//! Every rank runs `ROUNDS` rounds; in round `k` rank `r` contributes
//! [`contribution(r, k)`] (its length differs by rank and round, rank 0's
//! first one is empty). For each round every rank prints one line,
//!
//! `rank=R size=S round=K got=LEN:HASH,LEN:HASH,...`
//!
//! with the length and FNV-1a hash of what it received from each rank, so
//! that the caller can check the exchange without trusting this program.
//!
//! `--nested`: plays a host library that initialised PMIx first. Each rank
//! holds an outer `PmixBootstrap` (the host's reference), runs round 0 on an
//! inner one, finalizes the inner one, and runs the remaining rounds on the
//! outer one: they succeed only if `PMIx_Init`/`PMIx_Finalize` are reference
//! counted, so that the inner finalize did not close the connection.
//!
//! `--absent RANK`: that rank never takes part, so the others' first round
//! must end in a timeout (`FFD_BOOTSTRAP_TIMEOUT`); they print
//! `rank=R error after=MILLIS ms: TEXT` and exit 0, while the absent rank
//! waits for its standard input to close (`mpirun --stdin RANK`) and exits.
//!
//! Outside a PMIx launch it prints `available=false` and the error of
//! `PmixBootstrap::init`, and exits 2.

use std::io::Read;
use std::process::ExitCode;
use std::time::Instant;

use ffd::bootstrap::Bootstrap;
use ffd::bootstrap::pmix::PmixBootstrap;

const ROUNDS: u32 = 2;

/// What rank `rank` contributes to round `round` (the test recomputes it).
fn contribution(rank: u32, round: u32) -> Vec<u8> {
    let len = (rank * 5 + round * 3) as usize;
    (0..len)
        .map(|i| (rank * 31 + round * 7 + i as u32) as u8)
        .collect()
}

/// FNV-1a, 64 bits.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (nested, absent): (bool, Option<u32>) = match args.as_slice() {
        [] => (false, None),
        [flag] if flag == "--nested" => (true, None),
        [flag, rank] if flag == "--absent" => match rank.parse() {
            Ok(rank) => (false, Some(rank)),
            Err(_) => return usage(),
        },
        _ => return usage(),
    };

    let mut boot = match PmixBootstrap::init() {
        Ok(boot) => boot,
        Err(e) => {
            println!("available={}", PmixBootstrap::is_available());
            eprintln!("pmix_allgather: {e}");
            return ExitCode::from(2);
        }
    };
    let (rank, size) = (boot.rank(), boot.size());

    if absent == Some(rank) {
        // Play a hung rank: stay alive, out of every round, until told to go.
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        println!("rank={rank} absent");
        return ExitCode::SUCCESS;
    }

    let mut inner = if nested {
        match PmixBootstrap::init() {
            Ok(inner) => Some(inner),
            Err(e) => {
                eprintln!("pmix_allgather: rank {rank}: second init: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };

    for round in 0..ROUNDS {
        let start = Instant::now();
        let result = match inner.as_mut() {
            Some(inner) => inner.allgather(&contribution(rank, round)),
            None => boot.allgather(&contribution(rank, round)),
        };
        if let Some(done) = inner.take() {
            if let Err(e) = done.finalize() {
                eprintln!("pmix_allgather: rank {rank}: inner finalize: {e}");
                return ExitCode::FAILURE;
            }
        }
        match result {
            Ok(all) => {
                let got: Vec<String> = all
                    .iter()
                    .map(|c| format!("{}:{:016x}", c.len(), fnv1a(c)))
                    .collect();
                println!(
                    "rank={rank} size={size} round={round} got={}",
                    got.join(",")
                );
            }
            Err(e) => {
                println!(
                    "rank={rank} error after={} ms: {e}",
                    start.elapsed().as_millis()
                );
                return if absent.is_some() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                };
            }
        }
    }
    match boot.finalize() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pmix_allgather: rank {rank}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: pmix_allgather [--nested | --absent RANK]");
    ExitCode::from(64)
}
