//! The stable-toolchain fuzz run of the protocol core: at least a million
//! generated and mutated inputs through `wire::decode` and through small
//! jobs of Engines driven together, the invariants checked after every
//! call, one table at the end.
//!
//! ```text
//! cargo run --release -p ffd-protocol --example fuzz -- --inputs 1000000 [--seed S]
//! cargo run --release -p ffd-protocol --example fuzz -- --replay target/fuzz-panics/panic-seed1-episode7.tape
//! ```
//!
//! Exits 1 if any input panicked or broke an invariant (each panicking
//! episode is saved as a tape for `--replay`), 2 on a usage error.
//! Deterministic: the same seed gives the same counts.

#![forbid(unsafe_code)]

// Shared with tests/fuzz_harness.rs and the cargo-fuzz targets in fuzz/;
// each driver uses part of it.
#[allow(dead_code)]
mod harness;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use harness::Options;

const USAGE: &str = "usage: fuzz [--inputs N] [--seed S] [--save-dir DIR] | fuzz --replay FILE
  --inputs N      inputs to run, decoder and Engine together (default 1000000)
  --seed S        the run's seed (default 1); the same seed gives the same counts
  --save-dir DIR  where panicking episodes are saved (default target/fuzz-panics)
  --replay FILE   run the episode saved in FILE once";

fn number(flag: &str, value: Option<String>) -> Result<u64, String> {
    let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
    value
        .replace('_', "")
        .parse()
        .map_err(|e| format!("{flag} {value}: {e}"))
}

enum Mode {
    Run(Options),
    Replay(PathBuf),
}

fn parse() -> Result<Mode, String> {
    let mut options = Options {
        inputs: 1_000_000,
        seed: 1,
        save_dir: PathBuf::from("target/fuzz-panics"),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--inputs" => options.inputs = number("--inputs", args.next())?,
            "--seed" => options.seed = number("--seed", args.next())?,
            "--save-dir" => {
                options.save_dir = args.next().ok_or("--save-dir needs a value")?.into();
            }
            "--replay" => {
                return Ok(Mode::Replay(
                    args.next().ok_or("--replay needs a file")?.into(),
                ));
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(Mode::Run(options))
}

fn main() -> ExitCode {
    let mode = match parse() {
        Ok(m) => m,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("fuzz: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let start = Instant::now();
    let (tally, title) = match mode {
        Mode::Run(options) => {
            let tally = harness::run(&options);
            (tally, format!("ffd fuzz, seed {}", options.seed))
        }
        Mode::Replay(path) => match std::fs::read(&path) {
            Ok(tape) => (
                harness::replay(&tape),
                format!("replay of {}", path.display()),
            ),
            Err(e) => {
                eprintln!("fuzz: cannot read {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
    };
    let secs = start.elapsed().as_secs_f64();
    print!("{}", tally.table(&title));
    println!(
        "\n{} inputs in {secs:.1} s ({:.0} per second)",
        tally.inputs(),
        tally.inputs() as f64 / secs.max(1e-9)
    );
    for note in &tally.panic_notes {
        eprintln!("panic: {note}");
    }
    for (word, first) in &tally.violations.first {
        eprintln!("violation {word}: {first}");
    }
    if tally.panics() > 0 || tally.violations.total() > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
