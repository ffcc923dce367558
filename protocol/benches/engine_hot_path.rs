//! Microbenchmark of the Engine's hot path (`harness = false`): what one
//! rank's protocol core costs per heartbeat period when idle, and per
//! failure notice, at N = 2^10 … 2^20 ranks with 0, 10, 100 and 1000
//! known failures; and what authenticating a message costs.
//!
//! - `mac`: ns per seal (the Engine's per-copy [`Sealed::new`]: sequence
//!   number and keyed-BLAKE3 tag over the shared unsealed bytes) and per
//!   verify ([`JobKeys::verify`], what `decode` does before reading the
//!   body), for a notice of 48 and one of 64 signed bytes (the sizes of
//!   notices naming one or a few ranks) and a 1 KiB payload.
//!
//! - `idle`: one deadline step of an idle rank in write mode (the
//!   progress thread's case): [`Engine::handle_timeout`] with a live slot
//!   reading, then draining [`Engine::poll_output`] (the `WriteHeartbeat`).
//!   Reported per step and per heartbeat period (an idle rank wakes for
//!   every beat and, `checks_per_timeout` times per timeout, for a check).
//! - `dup`: a notice naming a failure already known (the common case at
//!   large N: every rank receives each failure over ~2 log2 N links), with
//!   the drain that follows (it yields nothing). Each is a new message (its
//!   own sequence number and tag): the tag is checked and the sender's
//!   replay window moves, as on the fabric.
//! - `new`: a notice naming a new failure, with the drain of its outputs:
//!   the `Failed` event and the forward-once copies over the overlay.
//! - `cold dup`: `dup` on a random Engine out of a pool too large for the
//!   caches (the simulator's access pattern), at the largest N.
//!
//! F = the failures the rank knows besides the one the notice names. All
//! are chosen away from the rank's ring neighbours, so nobody mends. Each
//! figure is the median over repetitions of the mean ns per operation.
//! The core reads no clock; this driver does (`Instant`).
//!
//! Prints a table and writes `target/bench/engine_hot_path.json` at the
//! workspace root. Knobs (environment): `ENGINE_HOT_PATH_MAX_LOG2`
//! (default 20), `ENGINE_HOT_PATH_REPS` (default 31), `ENGINE_HOT_PATH_COLD=0`
//! to skip the cold pool.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ffd_protocol::ranks::fold_digest;
use ffd_protocol::wire::{self, Encoder, JobKeys, Sealed, TAG_LEN};
use ffd_protocol::{
    Engine, EngineConfig, EngineOptions, Input, Rank, Ring, SlotReading, Time, slot_value,
};
use rand::{RngCore, SeedableRng};
use rand_pcg::Pcg64;

const JOB_KEY: u64 = 0x6666_6464_4245_4E43;

fn keys() -> JobKeys {
    JobKeys::new(JOB_KEY, *b"engine hot path benchmark key 32")
}
const KNOWN: [usize; 4] = [0, 10, 100, 1000];
/// Deadline steps timed per repetition of `idle` (tens of µs: short
/// batches, so that the median skips those another process interrupted).
const IDLE_STEPS: usize = 1000;
/// Notices handled per repetition of `dup`.
const DUP_OPS: usize = 1000;
/// New failures per freshly built Engine in `new` (fewer if N is small).
const NEW_OPS: usize = 32;
/// Engines in the cold pool: 2^16 × ~1 KiB is twice a 32 MiB L3.
const COLD_POOL: usize = 1 << 16;
/// Notices per timed batch of the cold pool.
const COLD_BATCH: usize = 4096;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn ns_per(elapsed: Duration, ops: usize) -> f64 {
    elapsed.as_nanos() as f64 / ops.max(1) as f64
}

/// One job: its ring, its settings, the measured rank and who is failed.
struct Job {
    ring: Arc<Ring>,
    config: Arc<EngineConfig>,
    me: Rank,
    /// A live rank that sends (and originates) every notice.
    sender: Rank,
    /// The F failures known beforehand, ascending.
    known: Vec<Rank>,
    /// The failure the duplicate notice names (known too).
    repeated: Rank,
    /// Failures new to the rank, one per `new` notice.
    fresh: Vec<Rank>,
}

impl Job {
    /// N ranks on the default ring (topology, N/8 hosts in blocks, as
    /// `ffd sim` places them) with the default settings.
    fn new(n: u32, known: usize) -> Job {
        let config = EngineConfig::default();
        let hosts: Vec<u32> = (0..n)
            .map(|r| ((u64::from(r) * u64::from((n / 8).max(1))) / u64::from(n)) as u32)
            .collect();
        let ring = Arc::new(Ring::new(config.ring, &hosts, 7));
        let me = n / 3;
        let p = ring.position_of(me);
        // Candidates: ring offsets 3 ..= n-3 from `me` (never a neighbour
        // or a neighbour's neighbour), less the sender's offset n/2.
        let candidates: Vec<u32> = (3..=n - 3).filter(|&o| o != n / 2).collect();
        let new_ops = NEW_OPS.min(candidates.len() - known - 1);
        let wanted = known + 1 + new_ops;
        let step = candidates.len() as f64 / wanted as f64;
        let mut picked: Vec<Rank> = (0..wanted)
            .map(|i| ring.rank_at((p + candidates[(i as f64 * step) as usize]) % n))
            .collect();
        let fresh = picked.split_off(known + 1);
        let repeated = picked.pop().expect("one repeated failure");
        picked.sort_unstable();
        Job {
            sender: ring.rank_at((p + n / 2) % n),
            ring,
            config: Arc::new(config),
            me,
            known: picked,
            repeated,
            fresh,
        }
    }

    /// The sender's notice naming `failed`, sealed with sequence number
    /// `seq` (1 is the set-up notice's).
    fn notice(&self, failed: &[Rank], seq: u64) -> Vec<u8> {
        let mut failed = failed.to_vec();
        failed.sort_unstable();
        let unsealed = Encoder::new(JOB_KEY, self.sender).notice(self.sender, 0, &failed, &[]);
        wire::seal(&unsealed, seq, self.me, &keys())
    }

    /// A fresh Engine for `me` that knows `failed` (handed in as one
    /// notice at 1 ms, sequence number 1), its outputs drained.
    fn engine(&self, failed: &[Rank]) -> Engine {
        let mut e = Engine::new(
            self.config.clone(),
            self.ring.clone(),
            self.me,
            keys(),
            Time::ZERO,
            EngineOptions::default(),
        )
        .expect("valid engine");
        drain(&mut e);
        if !failed.is_empty() {
            deliver(&mut e, at_ms(1), self.sender, &self.notice(failed, 1))
                .expect("the set-up notice is accepted");
            drain(&mut e);
        }
        assert_eq!(e.epoch(), failed.len() as u64, "set-up failures known");
        assert_eq!(e.generation(), 0, "nobody mended during set-up");
        e
    }

    /// Known failures plus the repeated one.
    fn known_and_repeated(&self) -> Vec<Rank> {
        let mut v = self.known.clone();
        v.push(self.repeated);
        v
    }
}

fn at_ms(ms: u64) -> Time {
    Time::ZERO + Duration::from_millis(ms)
}

fn deliver(e: &mut Engine, now: Time, from: Rank, bytes: &[u8]) -> Result<(), String> {
    e.handle(
        now,
        Input::Message {
            from: Some(from),
            bytes,
        },
    )
    .map_err(|err| err.to_string())
}

/// Drains the outputs; returns how many there were.
fn drain(e: &mut Engine) -> usize {
    let mut k = 0;
    while let Some(o) = e.poll_output() {
        black_box(&o);
        k += 1;
    }
    k
}

struct Idle {
    step_ns: f64,
    period_ns: f64,
    steps_per_period: f64,
}

/// Deadline steps of an idle rank whose emitter beats every step.
fn idle(job: &Job, reps: usize) -> Idle {
    let mut e = job.engine(&job.known);
    let digest = fold_digest(e.digest());
    let mut counter = 0u16;
    let mut step = |e: &mut Engine| -> Time {
        let t = e.next_deadline().expect("an idle rank has a deadline");
        counter = counter.wrapping_add(1).max(1);
        let value = slot_value(0, digest, counter);
        e.handle_timeout(t, &SlotReading(value));
        let outs = drain(e);
        debug_assert!(outs <= 1, "an idle step writes at most one heartbeat");
        t
    };
    // Warm up past the start-up grace.
    for _ in 0..IDLE_STEPS {
        step(&mut e);
    }
    let (mut per_step, mut per_period, mut steps_per_period) = (Vec::new(), Vec::new(), 0.0);
    for _ in 0..reps {
        let first = e.next_deadline().expect("deadline");
        let start = Instant::now();
        let mut last = first;
        for _ in 0..IDLE_STEPS {
            last = step(&mut e);
        }
        let elapsed = start.elapsed();
        let periods = (last - first).as_nanos() as f64 / job.config.period.as_nanos() as f64;
        per_step.push(ns_per(elapsed, IDLE_STEPS));
        per_period.push(elapsed.as_nanos() as f64 / periods);
        steps_per_period = IDLE_STEPS as f64 / periods;
    }
    assert_eq!(
        e.epoch(),
        job.known.len() as u64,
        "an idle rank declares nobody"
    );
    Idle {
        step_ns: median(per_step),
        period_ns: median(per_period),
        steps_per_period,
    }
}

/// The same news in new messages, again and again, with the drain after
/// each (the messages are sealed beforehand, untimed).
fn dup(job: &Job, reps: usize) -> f64 {
    let mut e = job.engine(&job.known_and_repeated());
    let mut seq = 1;
    let batches: Vec<Vec<Vec<u8>>> = (0..reps)
        .map(|_| {
            (0..DUP_OPS)
                .map(|_| {
                    seq += 1;
                    job.notice(&[job.repeated], seq)
                })
                .collect()
        })
        .collect();
    let now = at_ms(2);
    let mut per_op = Vec::new();
    for batch in &batches {
        let start = Instant::now();
        for bytes in batch {
            let _ = deliver(&mut e, now, job.sender, black_box(bytes));
            black_box(drain(&mut e));
        }
        per_op.push(ns_per(start.elapsed(), DUP_OPS));
    }
    assert_eq!(
        e.stats().messages.duplicate_notices,
        (reps * DUP_OPS) as u64,
        "every notice was a duplicate"
    );
    median(per_op)
}

struct New {
    ns: f64,
    sends: f64,
}

/// Notices each naming one new failure, with the drain of the event and
/// the forwarded copies; a fresh Engine per repetition (set-up untimed).
fn new(job: &Job, reps: usize) -> New {
    let notices: Vec<Vec<u8>> = (2..)
        .zip(&job.fresh)
        .map(|(seq, &r)| job.notice(&[r], seq))
        .collect();
    let now = at_ms(2);
    let (mut per_op, mut outputs) = (Vec::new(), 0usize);
    for _ in 0..reps {
        let mut e = job.engine(&job.known);
        let start = Instant::now();
        for bytes in &notices {
            let _ = deliver(&mut e, now, job.sender, black_box(bytes));
            outputs += drain(&mut e);
        }
        per_op.push(ns_per(start.elapsed(), notices.len()));
        assert_eq!(
            e.epoch(),
            (job.known.len() + notices.len()) as u64,
            "every notice was new"
        );
        assert_eq!(e.generation(), 0, "nobody mended");
    }
    let ops = (reps * notices.len()) as f64;
    New {
        ns: median(per_op),
        // One output per notice is the `Failed` event; the rest are sends.
        sends: (outputs as f64 - ops) / ops,
    }
}

/// `dup` on a random Engine of a pool of `COLD_POOL`, in a shuffled order,
/// `passes` times over the pool, timed in batches of `COLD_BATCH`.
fn cold_dup(job: &Job, passes: usize) -> f64 {
    let failed = job.known_and_repeated();
    let set_up = job.notice(&failed, 1);
    let mut pool: Vec<Engine> = (0..COLD_POOL)
        .map(|_| {
            let mut e = Engine::new(
                job.config.clone(),
                job.ring.clone(),
                job.me,
                keys(),
                Time::ZERO,
                EngineOptions::default(),
            )
            .expect("valid engine");
            drain(&mut e);
            deliver(&mut e, at_ms(1), job.sender, &set_up).expect("accepted");
            drain(&mut e);
            e
        })
        .collect();
    let mut rng = Pcg64::seed_from_u64(11);
    let mut order: Vec<u32> = (0..COLD_POOL as u32).collect();
    for i in (1..order.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    let now = at_ms(2);
    let mut per_op = Vec::new();
    for pass in 0..passes {
        // One message per pass: each Engine sees it once.
        let bytes = job.notice(&[job.repeated], 2 + pass as u64);
        for batch in order.chunks(COLD_BATCH) {
            let start = Instant::now();
            for &i in batch {
                let e = &mut pool[i as usize];
                let _ = deliver(e, now, job.sender, black_box(&bytes));
                black_box(drain(e));
            }
            per_op.push(ns_per(start.elapsed(), batch.len()));
        }
    }
    let dups: u64 = pool
        .iter()
        .map(|e| e.stats().messages.duplicate_notices)
        .sum();
    assert_eq!(
        dups,
        (passes * COLD_POOL) as u64,
        "every notice was a duplicate"
    );
    median(per_op)
}

/// One row of the MAC cost table.
struct Mac {
    what: &'static str,
    /// Bytes the tag covers (header and body).
    signed: usize,
    seal_ns: f64,
    verify_ns: f64,
}

/// Ops per timed batch of `mac`.
const MAC_OPS: usize = 10_000;

/// ns per seal ([`Sealed::new`], the Engine's per-copy seal) and per
/// verify ([`JobKeys::verify`]) of `unsealed`.
fn mac(what: &'static str, unsealed: Vec<u8>, reps: usize) -> Mac {
    let keys = keys();
    let shared: Arc<[u8]> = unsealed.into();
    let sealed = Sealed::new(shared.clone(), 1, 5, &keys).to_vec();
    assert!(keys.verify(&sealed, 5), "a sealed message verifies");
    let (mut seal_ns, mut verify_ns) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let start = Instant::now();
        for seq in 1..=MAC_OPS as u64 {
            black_box(Sealed::new(black_box(shared.clone()), seq, 5, &keys));
        }
        seal_ns.push(ns_per(start.elapsed(), MAC_OPS));
        let start = Instant::now();
        for _ in 0..MAC_OPS {
            assert!(black_box(keys.verify(black_box(&sealed), 5)));
        }
        verify_ns.push(ns_per(start.elapsed(), MAC_OPS));
    }
    Mac {
        what,
        signed: sealed.len() - TAG_LEN,
        seal_ns: median(seal_ns),
        verify_ns: median(verify_ns),
    }
}

/// The messages of the MAC table: notices of 48 and 64 signed bytes, and
/// a payload of 1 KiB.
fn mac_table(reps: usize) -> Vec<Mac> {
    let e = Encoder::new(JOB_KEY, 3);
    let small = e.notice(3, 0, &[17], &[]);
    let mut wide: Vec<Rank> = vec![17];
    let mut notice = e.notice(3, 0, &wide, &[]);
    while notice.len() < 64 {
        wide.push(wide[wide.len() - 1] + 1000);
        notice = e.notice(3, 0, &wide, &[]);
    }
    vec![
        mac("notice, 1 rank", small, reps),
        mac("notice, a few ranks", notice, reps),
        mac("payload, 1 KiB", e.payload(3, 1, 0, &[7u8; 1024]), reps),
    ]
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is accepted.
    let max_log2 = env_u64("ENGINE_HOT_PATH_MAX_LOG2", 20).clamp(10, 24) as u32;
    let reps = env_u64("ENGINE_HOT_PATH_REPS", 31).clamp(1, 10_000) as usize;
    let cold = env_u64("ENGINE_HOT_PATH_COLD", 1) != 0;
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    std::fs::create_dir_all(&out).expect("create target/bench");

    let macs = mac_table(reps);
    println!(
        "Message authentication (keyed BLAKE3, 16-byte tag): ns per operation, median of {reps} repetitions"
    );
    println!(
        "{:>22} {:>7} {:>8} {:>8}",
        "message", "signed", "seal", "verify"
    );
    for m in &macs {
        println!(
            "{:>22} {:>7} {:>8.1} {:>8.1}",
            m.what, m.signed, m.seal_ns, m.verify_ns
        );
    }
    println!();
    println!(
        "Engine hot path: ns per operation, median of {reps} repetitions \
         (size_of::<Engine>() = {} bytes)",
        std::mem::size_of::<Engine>()
    );
    println!(
        "{:>8} {:>5} {:>10} {:>11} {:>10} {:>10} {:>11}",
        "N", "F", "idle_step", "idle_period", "dup", "new", "new_sends"
    );
    let mut rows = Vec::new();
    let mut cold_rows = Vec::new();
    for log2 in (10..=max_log2).step_by(2) {
        let n = 1u32 << log2;
        for &f in &KNOWN {
            let job = Job::new(n, f);
            let idle = idle(&job, reps);
            let dup_ns = dup(&job, reps);
            let new = new(&job, reps);
            println!(
                "{:>8} {:>5} {:>10.1} {:>11.1} {:>10.1} {:>10.1} {:>11.1}",
                n, f, idle.step_ns, idle.period_ns, dup_ns, new.ns, new.sends
            );
            rows.push(serde_json::json!({
                "ranks": n,
                "known_failures": f,
                "idle_step_ns": idle.step_ns,
                "idle_period_ns": idle.period_ns,
                "idle_steps_per_period": idle.steps_per_period,
                "dup_notice_ns": dup_ns,
                "new_notice_ns": new.ns,
                "new_notice_sends": new.sends,
            }));
            if cold && log2 == max_log2 {
                cold_rows.push((n, f, cold_dup(&job, 2)));
            }
        }
    }
    if !cold_rows.is_empty() {
        println!(
            "\ncold dup: the duplicate notice on a random Engine of {COLD_POOL} \
             (~{} MiB of Engines), shuffled order",
            (COLD_POOL * std::mem::size_of::<Engine>()) >> 20
        );
        println!("{:>8} {:>5} {:>10}", "N", "F", "dup");
        for &(n, f, ns) in &cold_rows {
            println!("{n:>8} {f:>5} {ns:>10.1}");
        }
    }
    let json = serde_json::json!({
        "mac": macs
            .iter()
            .map(|m| serde_json::json!({
                "message": m.what,
                "signed_bytes": m.signed,
                "seal_ns": m.seal_ns,
                "verify_ns": m.verify_ns,
            }))
            .collect::<Vec<_>>(),
        "engine_size_bytes": std::mem::size_of::<Engine>(),
        "repetitions": reps,
        "rows": rows,
        "cold_pool": COLD_POOL,
        "cold": cold_rows
            .iter()
            .map(|&(n, f, ns)| serde_json::json!({
                "ranks": n,
                "known_failures": f,
                "dup_notice_ns": ns,
            }))
            .collect::<Vec<_>>(),
    });
    let path = out.join("engine_hot_path.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&json).expect("serialisable") + "\n",
    )
    .expect("write JSON");
    println!("wrote {}", path.display());
}
