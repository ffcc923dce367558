//! The fuzz harness of the protocol core: generated and mutated inputs
//! through `wire::decode` and through small jobs of Engines driven
//! together, with the invariants of `check` judged after every call.
//!
//! Owns: the run (episodes from a seed until enough inputs, each inside
//! `catch_unwind`, a panicking one saved for replay), replays, and the
//! entry points of the cargo-fuzz targets. Must not: change the Engine or
//! the codec; it sees them only through the crate's public API.
//!
//! Four drivers share it: `examples/fuzz/main.rs` (the stable command,
//! `cargo run --release -p ffd-protocol --example fuzz`),
//! `tests/fuzz_harness.rs` (a short run in `cargo test`), and the
//! cargo-fuzz targets `decode` and `engine` in `fuzz/` (libFuzzer gives
//! the bytes: a tape of choices, or a message).
//!
//! Inputs are drawn from a [`dice::Dice`]: a seeded PRNG whose bytes are
//! recorded, so the episode that panicked is saved as its tape and runs
//! again, identically, from that file (`--replay FILE`), or as a libFuzzer
//! input of the `engine` target.

pub mod check;
pub mod dice;
pub mod episode;
pub mod generate;
pub mod mutate;
pub mod report;

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Once;

use ffd_protocol::wire::{self, JobKeys};

use check::Violations;
use dice::Dice;
use report::{Column, Tally};

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Stop after this many inputs (decoder and Engine together).
    pub inputs: u64,
    pub seed: u64,
    /// Where a panicking episode's tape (and a panicking decoder input)
    /// is saved; created when needed.
    pub save_dir: PathBuf,
}

thread_local! {
    /// Set while the harness runs an episode: its panics are recorded,
    /// not printed.
    static QUIET: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs (once) a panic hook that records the panics of harness
/// threads and leaves every other thread's to the previous hook.
fn install_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if QUIET.with(Cell::get) {
                let text = format!("{info}");
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(text));
            } else {
                previous(info);
            }
        }));
    });
}

/// The seed of episode `i` of a run seeded `seed` (splitmix64).
fn episode_seed(seed: u64, i: u64) -> u64 {
    let mut z = seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Runs episodes until `options.inputs` inputs, and judges memory.
pub fn run(options: &Options) -> Tally {
    install_hook();
    let mut tally = Tally::default();
    let tenth = options.inputs / 10;
    let mut episode = 0u64;
    while tally.inputs() < options.inputs {
        let mut dice = Dice::seeded(episode_seed(options.seed, episode));
        let allowance = one_episode(&mut dice, &mut tally, options.inputs);
        let phase = usize::from(tally.memory.after_tenth.is_some());
        let largest = &mut tally.memory.payload_allowance[phase];
        *largest = (*largest).max(allowance);
        if tally.in_progress.is_some() {
            let name = format!("panic-seed{}-episode{episode}", options.seed);
            save_panic(&mut tally, &dice, &options.save_dir, &name);
        }
        episode += 1;
        if tally.memory.after_tenth.is_none() && tally.inputs() >= tenth {
            tally.memory.after_tenth = report::rss_kib().map(|(_, peak)| peak);
        }
    }
    tally.memory.at_end = report::rss_kib().map(|(_, peak)| peak);
    if let (Some(tenth), Some(end)) = (tally.memory.after_tenth, tally.memory.at_end) {
        if end > tally.memory.limit(tenth) {
            tally.violations.record(check::Violation::MemoryGrew, || {
                format!(
                    "peak RSS {end} KiB at the end, {tenth} KiB after 10% of the inputs \
                     (payload allowance beyond the first 10%'s: {} KiB)",
                    tally.memory.excess_kib()
                )
            });
        }
    }
    tally
}

/// One episode inside `catch_unwind`; a panic leaves `tally.in_progress`
/// set and is counted in its column. Returns the episode's payload
/// allowance ([`report::Memory::limit`]), 0 if it panicked.
fn one_episode(dice: &mut Dice, tally: &mut Tally, limit: u64) -> u64 {
    QUIET.with(|q| q.set(true));
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| episode::run(dice, tally, limit)));
    QUIET.with(|q| q.set(false));
    tally.counts.episodes += 1;
    match outcome {
        Ok(allowance) => allowance,
        Err(_) => {
            let column = tally.in_progress.unwrap_or(Column::Engine);
            tally.counts.panics[column as usize] += 1;
            tally.in_progress = Some(column);
            0
        }
    }
}

/// Saves the tape of the episode that panicked (and the decoder input, if
/// the decoder panicked), and notes where.
fn save_panic(tally: &mut Tally, dice: &Dice, dir: &Path, name: &str) {
    let message = LAST_PANIC
        .with(|p| p.borrow_mut().take())
        .unwrap_or_else(|| "a panic".to_owned());
    let tape = dir.join(format!("{name}.tape"));
    let mut note =
        match std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&tape, dice.recorded())) {
            Ok(()) => format!("{message}\n  replay: --replay {}", tape.display()),
            Err(e) => format!("{message}\n  (could not save {}: {e})", tape.display()),
        };
    if tally.in_progress == Some(Column::Decoder) {
        if let Some((me, n, bytes)) = &tally.last_decode {
            let path = dir.join(format!("{name}.decode"));
            let input = decode_target_input(*me, *n, bytes);
            if std::fs::write(&path, input).is_ok() {
                note.push_str(&format!("\n  decoder input: {}", path.display()));
            }
        }
    }
    tally.panic_notes.push(note);
    tally.in_progress = None;
}

/// Runs the episode recorded in `tape` once (a saved panic, a libFuzzer
/// input of the `engine` target), with panics caught and counted.
pub fn replay(tape: &[u8]) -> Tally {
    install_hook();
    let mut tally = Tally::default();
    let mut dice = Dice::from_tape(tape);
    one_episode(&mut dice, &mut tally, u64::MAX);
    if tally.in_progress.is_some() {
        let message = LAST_PANIC.with(|p| p.borrow_mut().take());
        tally.panic_notes.extend(message);
    }
    tally
}

/// The `engine` cargo-fuzz target: the episode `data` describes, with
/// panics left to libFuzzer and any violation turned into one.
pub fn engine_case(data: &[u8]) {
    let mut tally = Tally::default();
    let mut dice = Dice::from_tape(data);
    episode::run(&mut dice, &mut tally, u64::MAX);
    assert_no_violation(&tally.violations);
}

// ----- the decoder alone -----

/// Job sizes the `decode` target decodes for.
const DECODE_SIZES: [u32; 6] = [1, 2, 3, 8, 64, 4096];

/// The keys of every fuzz job and of the `decode` target (the same in
/// every run, so a decoder input saved by the stable run is an input of
/// the target).
pub fn job_keys() -> JobKeys {
    JobKeys::new(0xF022_0000_0000_0001, [0x42; 32])
}

/// Flag bits of a `decode` target input: which header fields to write
/// right before decoding, so that libFuzzer's mutations of the rest reach
/// the checks behind them.
const FIX_MAGIC: u8 = 1;
const FIX_JOB_KEY: u8 = 2;
const FIX_BODY_LEN: u8 = 4;
const SEAL: u8 = 8;

/// A `decode` target input for rank `me` of `n` (a size not in the table
/// becomes the next larger one), the message `bytes` as is.
fn decode_target_input(me: u32, n: u32, bytes: &[u8]) -> Vec<u8> {
    let size = DECODE_SIZES
        .iter()
        .position(|&s| s >= n)
        .unwrap_or(DECODE_SIZES.len() - 1);
    let mut input = vec![0u8, me as u8, size as u8];
    input.extend_from_slice(bytes);
    input
}

/// The `decode` target: `data` = flags, rank, job size index, message.
/// The flags write the magic and version, the job key, the body length
/// (what the bytes after the header hold), and seal the message for the
/// rank with the sequence number it carries, in that order. Decodes with
/// [`job_keys`]; an accepted message must survive
/// [`check::decode_round_trip`].
pub fn decode_case(data: &[u8]) {
    let [flags, me, size, ..] = *data else {
        return;
    };
    let n = DECODE_SIZES[usize::from(size) % DECODE_SIZES.len()];
    let me = u32::from(me) % n;
    let keys = job_keys();
    let mut bytes = data[3..].to_vec();
    let mut put = |at: usize, field: &[u8]| {
        if let Some(place) = bytes.get_mut(at..at + field.len()) {
            place.copy_from_slice(field);
        }
    };
    if flags & FIX_MAGIC != 0 {
        put(0, &wire::MAGIC);
        put(4, &[wire::VERSION]);
    }
    if flags & FIX_JOB_KEY != 0 {
        put(8, &keys.job_key().to_le_bytes());
    }
    if flags & FIX_BODY_LEN != 0 {
        let body = data.len().saturating_sub(3 + wire::HEADER_LEN) as u32;
        put(32, &body.to_le_bytes());
    }
    if flags & SEAL != 0 {
        let seq = bytes
            .get(24..32)
            .and_then(|s| s.try_into().ok())
            .map_or(1, u64::from_le_bytes);
        bytes = wire::seal(&bytes, seq, me, &keys);
    }
    let mut v = Violations::default();
    let _ = check::decode_round_trip(&bytes, &keys, me, n, &mut v);
    assert_no_violation(&v);
}

fn assert_no_violation(v: &Violations) {
    assert!(v.total() == 0, "invariant violated: {:?}", v.first);
}
