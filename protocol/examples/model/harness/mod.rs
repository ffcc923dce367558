//! The model checker of the protocol core: every interleaving of a small
//! job of Engines, with crashes, losses, duplicates, a partition, stalls
//! (premature timeouts) and the hosts' calls (broadcast, agree, leave),
//! explored breadth-first by stateright within bounds, and the safety
//! properties of `docs/model-checking.md` judged in every state.
//!
//! Owns: the [`Bounds`] of a run, the `stateright::Model` of the job
//! ([`job::Job`]), the run and its [`Report`] (states explored, time, each
//! property's verdict, the shortest counterexample as a readable trace).
//! Must not: change the Engine; it drives Engines only through the crate's
//! public API (and, under the crate's test-only `model` features,
//! `Engine: Clone` and `Engine::model_fingerprint`).
//!
//! Two drivers share it: `examples/model/main.rs` (the command,
//! `cargo run --release -p ffd-protocol --example model -- --ranks N`) and
//! `tests/model_check.rs` (short runs in `cargo test`, and the known bugs
//! put back to show each is found).

pub mod job;
pub mod props;
pub mod trace;

use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model, Property};

use job::{Action, Job, State};
use props::Prop;

/// What a run explores: the job's size, how many steps a path may take,
/// and how many of each fault and call a path may hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub ranks: u32,
    /// Steps per path (deliveries, deadlines, faults, calls).
    pub depth: u32,
    /// Crashes (F).
    pub faults: u32,
    /// Copies lost.
    pub losses: u32,
    /// Copies delivered twice.
    pub duplicates: u32,
    /// Premature timeouts: a deadline fires before a live emitter's beat
    /// lands.
    pub stalls: u32,
    /// Partitions (each may heal).
    pub partitions: u32,
    /// Payloads broadcast, in all.
    pub broadcasts: u32,
    /// User agreements each rank calls.
    pub agreements: u32,
    /// Ranks that leave.
    pub leaves: u32,
    /// Liveness probes of an emitter (`ffd_protocol::liveness`), in all:
    /// refused by a crashed emitter's kernel, unanswered across a cut or
    /// by a live emitter that is stopped or slow, greeted by one that runs.
    pub probes: u32,
    /// How many timeouts a rank's clock may run ahead of the slowest
    /// running rank's (`None`: unbounded, the asynchronous model). Copies
    /// in flight are delayed without bound either way.
    pub skew: Option<u32>,
    /// Checker threads (1: the breadth-first order is exact, so a
    /// counterexample is a shortest one and the depth bound is exact).
    pub threads: usize,
    /// Stop after this many states generated, repeats included (a
    /// bounded run rather than an exhaustive one).
    pub max_states: Option<usize>,
    /// Stop after this long.
    pub time_limit: Option<std::time::Duration>,
    /// Steps every path starts with (empty: from the start): the checker
    /// explores every interleaving from the state they reach, within the
    /// depth, which counts them. For a schedule too deep to reach
    /// breadth-first from the start (`tests/model_check.rs`).
    pub opening: Vec<Action>,
}

impl Bounds {
    /// `ranks` ranks, the defaults otherwise: one crash, one loss, one
    /// duplicate, one stall, one partition, one payload, one agreement
    /// each, no leave.
    pub fn new(ranks: u32, depth: u32) -> Bounds {
        Bounds {
            ranks,
            depth,
            faults: 1,
            losses: 1,
            duplicates: 1,
            stalls: 1,
            partitions: 1,
            broadcasts: 1,
            agreements: 1,
            leaves: 0,
            probes: 0,
            skew: None,
            threads: 1,
            max_states: None,
            time_limit: None,
            opening: Vec::new(),
        }
    }

    /// Nothing but `ranks` ranks ticking over: every fault and call at 0.
    pub fn quiet(ranks: u32, depth: u32) -> Bounds {
        Bounds {
            faults: 0,
            losses: 0,
            duplicates: 0,
            stalls: 0,
            partitions: 0,
            broadcasts: 0,
            agreements: 0,
            leaves: 0,
            ..Bounds::new(ranks, depth)
        }
    }

    /// One line: the bounds as the command's flags.
    pub fn flags(&self) -> String {
        format!(
            "--ranks {} --depth {} --faults {} --losses {} --duplicates {} --stalls {} \
             --partitions {} --broadcasts {} --agreements {} --leaves {}{}{}{}",
            self.ranks,
            self.depth,
            self.faults,
            self.losses,
            self.duplicates,
            self.stalls,
            self.partitions,
            self.broadcasts,
            self.agreements,
            self.leaves,
            match self.probes {
                0 => String::new(),
                p => format!(" --probes {p}"),
            },
            self.skew
                .map_or_else(String::new, |k| format!(" --skew {k}")),
            match self.opening.len() {
                0 => String::new(),
                k => format!(" (every path opens with the {k} steps given)"),
            }
        )
    }
}

/// Notes of what a step did, when a trace is wanted.
pub struct Log(Option<Vec<String>>);

impl Log {
    pub fn off() -> Log {
        Log(None)
    }

    pub fn on() -> Log {
        Log(Some(Vec::new()))
    }

    pub fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(lines) = &mut self.0 {
            lines.push(line());
        }
    }

    pub fn lines(self) -> Vec<String> {
        self.0.unwrap_or_default()
    }
}

/// A predicate on a state.
pub type Predicate = fn(&State) -> bool;

/// The `sometimes` properties: states the model must reach, so that no
/// safety property holds only because nothing happened.
pub const SOMETIMES: [(&str, Predicate); 5] = [
    ("a view is raised", props::a_view),
    ("an agreement is decided", props::a_decision),
    ("a payload reaches another rank", props::a_delivery),
    ("a rank excludes itself", props::a_self_exclusion),
    ("a crashed rank is declared", props::a_crash_declared),
];

impl Model for Job {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut s = self.initial();
        for &a in &self.bounds.opening {
            let mut offered = Vec::new();
            Job::actions(self, &s, &mut offered);
            assert!(offered.contains(&a), "opening step {a:?} not offered");
            s = self.apply(&s, a, &mut Log::off());
        }
        vec![s]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        // A state that broke a property is reported, not explored further.
        if s.steps < self.bounds.depth && s.ghost.broken == 0 {
            Job::actions(self, s, actions);
        }
    }

    fn next_state(&self, s: &State, a: Action) -> Option<State> {
        Some(self.apply(s, a, &mut Log::off()))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        // Plain functions: stateright takes `fn` pointers.
        fn views(j: &Job, s: &State) -> bool {
            j.judge(s, Prop::Views)
        }
        fn agreement(j: &Job, s: &State) -> bool {
            j.judge(s, Prop::Agreement)
        }
        fn payloads(j: &Job, s: &State) -> bool {
            j.judge(s, Prop::Payloads)
        }
        fn proof(j: &Job, s: &State) -> bool {
            j.judge(s, Prop::Proof)
        }
        fn partition(j: &Job, s: &State) -> bool {
            j.judge(s, Prop::Partition)
        }
        fn silence(j: &Job, s: &State) -> bool {
            j.judge(s, Prop::Silence)
        }
        fn ballots(j: &Job, s: &State) -> bool {
            j.judge(s, Prop::Ballots)
        }
        fn view(j: &Job, s: &State) -> bool {
            j.sometimes(s, 0)
        }
        fn decision(j: &Job, s: &State) -> bool {
            j.sometimes(s, 1)
        }
        fn delivery(j: &Job, s: &State) -> bool {
            j.sometimes(s, 2)
        }
        fn exclusion(j: &Job, s: &State) -> bool {
            j.sometimes(s, 3)
        }
        fn declared(j: &Job, s: &State) -> bool {
            j.sometimes(s, 4)
        }
        vec![
            Property::always(Prop::Views.name(), views),
            Property::always(Prop::Agreement.name(), agreement),
            Property::always(Prop::Payloads.name(), payloads),
            Property::always(Prop::Proof.name(), proof),
            Property::always(Prop::Partition.name(), partition),
            Property::always(Prop::Silence.name(), silence),
            Property::always(Prop::Ballots.name(), ballots),
            Property::sometimes(SOMETIMES[0].0, view),
            Property::sometimes(SOMETIMES[1].0, decision),
            Property::sometimes(SOMETIMES[2].0, delivery),
            Property::sometimes(SOMETIMES[3].0, exclusion),
            Property::sometimes(SOMETIMES[4].0, declared),
        ]
    }
}

/// The verdict on one safety property.
pub struct Verdict {
    pub prop: Prop,
    /// `None`: it holds in every state explored; else the shortest path
    /// found that breaks it, as a readable trace, and its steps.
    pub counterexample: Option<Vec<String>>,
    pub steps: usize,
}

/// What a run found.
pub struct Report {
    pub bounds: Bounds,
    /// Distinct states explored.
    pub states: usize,
    /// States generated, repeats included.
    pub generated: usize,
    pub max_depth: usize,
    pub secs: f64,
    /// Whether every state within the bounds was explored (no counterexample
    /// stopped it early, no state budget cut it).
    pub exhaustive: bool,
    pub verdicts: Vec<Verdict>,
    /// Each `sometimes` property and the steps of the shortest path found
    /// to it (`None`: not reached).
    pub reached: Vec<(&'static str, Option<usize>)>,
}

impl Report {
    pub fn all_hold(&self) -> bool {
        self.verdicts.iter().all(|v| v.counterexample.is_none())
    }

    pub fn all_reached(&self) -> bool {
        self.reached.iter().all(|(_, r)| r.is_some())
    }

    /// The first property broken, if any.
    pub fn broken(&self) -> Option<&Verdict> {
        self.verdicts.iter().find(|v| v.counterexample.is_some())
    }

    /// The report as the command prints it.
    pub fn text(&self) -> String {
        let mut t = String::new();
        t.push_str(&format!("ffd model check: {}\n", self.bounds.flags()));
        t.push_str("\nproperties (always):\n");
        for v in &self.verdicts {
            let verdict = if v.counterexample.is_some() {
                "BROKEN"
            } else {
                "holds"
            };
            t.push_str(&format!(
                "  {:<10} {:<7} {}\n",
                v.prop.name(),
                verdict,
                v.prop.says()
            ));
        }
        t.push_str("\nreachable (sometimes):\n");
        for (name, at) in &self.reached {
            match at {
                Some(steps) => t.push_str(&format!("  reached in {steps:>2} steps: {name}\n")),
                None => t.push_str(&format!("  NOT reached:       {name}\n")),
            }
        }
        t.push_str(&format!(
            "\n{} states explored ({} generated), depth {}, in {:.1} s ({:.0} states/s){}\n",
            self.states,
            self.generated,
            self.max_depth.saturating_sub(1),
            self.secs,
            self.states as f64 / self.secs.max(1e-9),
            if self.exhaustive {
                ", every state within the bounds"
            } else {
                ", stopped early"
            }
        ));
        match self.broken() {
            None => t.push_str("all hold\n"),
            Some(v) => {
                t.push_str(&format!(
                    "\ncounterexample to `{}` ({} steps):\n",
                    v.prop.name(),
                    v.steps
                ));
                for line in v.counterexample.iter().flatten() {
                    t.push_str(line);
                    t.push('\n');
                }
            }
        }
        t
    }
}

/// Runs the checker within `bounds` (breadth-first, so the first
/// counterexample found is a shortest one); it stops at the first
/// property broken.
pub fn run(bounds: &Bounds) -> Report {
    let job = Job::new(bounds.clone());
    let start = Instant::now();
    let mut builder = job
        .checker()
        .threads(bounds.threads.max(1))
        .finish_when(HasDiscoveries::AnyFailures);
    if let Some(max) = bounds.max_states {
        builder = builder.target_state_count(max);
    }
    if let Some(limit) = bounds.time_limit {
        builder = builder.timeout(limit);
    }
    let checker = builder.spawn_bfs().join();
    let secs = start.elapsed().as_secs_f64();
    let job = checker.model();
    let found = job.found.lock().expect("no checker thread panics");
    let verdicts: Vec<Verdict> = Prop::ALL
        .iter()
        .map(|&prop| {
            let first = found.broken[prop as usize].as_ref();
            Verdict {
                prop,
                steps: first.map_or(0, |s| s.steps as usize),
                counterexample: first.map(|s| counterexample(job, prop, s)),
            }
        })
        .collect();
    let reached = SOMETIMES
        .iter()
        .zip(found.reached)
        .map(|((name, _), steps)| (*name, steps.map(|s| s as usize)))
        .collect();
    let broken = verdicts.iter().any(|v| v.counterexample.is_some());
    let capped = bounds
        .max_states
        .is_some_and(|m| checker.state_count() >= m)
        || bounds.time_limit.is_some_and(|l| start.elapsed() >= l);
    Report {
        bounds: bounds.clone(),
        states: checker.unique_state_count(),
        generated: checker.state_count(),
        max_depth: checker.max_depth(),
        secs,
        exhaustive: !broken && !capped,
        verdicts,
        reached,
    }
}

/// The path to `broken`, a state that breaks `prop`, step by step (re-run
/// from the start with the log on), with what each step raised, and how
/// the property broke.
fn counterexample(job: &Job, prop: Prop, broken: &State) -> Vec<String> {
    let mut lines = Vec::new();
    let mut s = job.initial();
    for (i, a) in broken.actions().into_iter().enumerate() {
        lines.push(format!("{:>3}. {}", i + 1, trace::action(job, &s, a)));
        let mut log = Log::on();
        s = job.apply(&s, a, &mut log);
        for note in log.lines() {
            if !note.starts_with("deliver ") && !note.contains("'s deadline at ") {
                lines.push(format!("       {note}"));
            }
        }
    }
    let why = broken.why[prop as usize]
        .as_ref()
        .map_or_else(|| "(no description)".to_owned(), |w| w.to_string());
    lines.push(format!("  ⇒ {} broken: {why}", prop.name()));
    lines
}
