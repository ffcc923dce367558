//! What a fuzz run counts and the one table it prints: inputs by kind,
//! accepted, rejected by reason (every `RejectReason`), refused, panics,
//! invariant violations by kind, what the episodes reached (events,
//! crashes), and peak RSS.
//!
//! Owns: [`Tally`], [`InputKind`], [`Column`], reading RSS from
//! `/proc/self/status`, and the table. Must not: decide anything about the
//! inputs (the episode) or the invariants (`check`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use ffd_protocol::{Event, HandleError, Rank, RejectReason};

use super::check::{Violation, Violations};

/// Where an input went: to `wire::decode` alone, or into an Engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    Decoder = 0,
    Engine = 1,
}

macro_rules! input_kinds {
    ($($variant:ident => $word:literal, decoder $d:literal, engine $e:literal;)+) => {
        /// The kinds of input a run generates.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum InputKind { $($variant),+ }

        impl InputKind {
            pub const ALL: &'static [InputKind] = &[$(InputKind::$variant),+];
            pub const COUNT: usize = Self::ALL.len();

            pub fn as_str(self) -> &'static str {
                match self { $(InputKind::$variant => $word),+ }
            }

            /// How often a message input of this kind is drawn, per column
            /// (0: never; non-message kinds are drawn by their action).
            pub fn weight(self, column: Column) -> u32 {
                match (self, column) {
                    $((InputKind::$variant, Column::Decoder) => $d,
                      (InputKind::$variant, Column::Engine) => $e,)+
                }
            }

            fn index(self) -> usize {
                self as usize
            }
        }
    };
}

input_kinds! {
    Genuine => "genuine message (as an Engine sent it)", decoder 10, engine 45;
    WrongSource => "genuine message, another rank as source", decoder 0, engine 3;
    Replayed => "replayed accepted message", decoder 0, engine 4;
    Forged => "generated message, sealed with the job's key", decoder 25, engine 22;
    Mutated => "mutated message", decoder 20, engine 9;
    Resealed => "mutated message, sealed again", decoder 30, engine 10;
    Unkeyed => "generated message, sealed without the secret", decoder 5, engine 3;
    RandomBytes => "random bytes", decoder 10, engine 4;
    TransportError => "transport error", decoder 0, engine 0;
    Exited => "same-host exit", decoder 0, engine 0;
    Sent => "send completion", decoder 0, engine 0;
    Timeout => "timeout with a slot reading", decoder 0, engine 0;
    Broadcast => "broadcast", decoder 0, engine 0;
    Leave => "leave", decoder 0, engine 0;
    Agree => "agree call", decoder 0, engine 0;
}

impl InputKind {
    /// The kinds that are messages (drawn by weight).
    pub const MESSAGES: &'static [InputKind] = &[
        InputKind::Genuine,
        InputKind::WrongSource,
        InputKind::Replayed,
        InputKind::Forged,
        InputKind::Mutated,
        InputKind::Resealed,
        InputKind::Unkeyed,
        InputKind::RandomBytes,
    ];
}

/// The counts of a run: the same seed gives the same counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub inputs: [[u64; 2]; InputKind::COUNT],
    pub accepted: [u64; 2],
    pub rejected: [[u64; 2]; RejectReason::COUNT],
    /// Broadcasts and leaves the Engine refused (`HandleError` other than
    /// `Rejected`), by its message.
    pub refused: BTreeMap<String, u64>,
    pub panics: [u64; 2],
    /// What the episodes reached: events by kind, sends, crashes.
    pub reached: BTreeMap<&'static str, u64>,
    pub episodes: u64,
}

/// Peak RSS (VmHWM), in KiB.
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory {
    pub after_tenth: Option<u64>,
    pub at_end: Option<u64>,
    /// The largest payload allowance of an episode within the first 10%
    /// of the inputs, and after them, in bytes (see [`Memory::limit`]).
    pub payload_allowance: [u64; 2],
}

impl Memory {
    /// The payload allowance of later episodes beyond the first tenth's,
    /// in KiB.
    pub fn excess_kib(&self) -> u64 {
        let [tenth, later] = self.payload_allowance;
        later.saturating_sub(tenth).div_ceil(1024)
    }

    /// The tolerance: the peak at the end may exceed the peak after the
    /// first 10% of inputs by a quarter plus 8 MiB (the bounded network and
    /// replay pool), plus the payload allowance by which a later episode
    /// exceeds the first tenth's largest: every Engine of a job may hold a
    /// copy of every payload broadcast in it (`payload_retention` and
    /// `payload_hold` per origin bound it, not the episode's length), so
    /// one late episode of 33 ranks broadcasting 64 KiB payloads
    /// legitimately peaks tens of MiB above a first tenth that drew none.
    /// Memory that outlives its episode (the only thing that can grow with
    /// the run's length) is excused only as far as that.
    pub fn limit(&self, after_tenth: u64) -> u64 {
        after_tenth + after_tenth / 4 + 8 * 1024 + self.excess_kib()
    }
}

#[derive(Debug, Default)]
pub struct Tally {
    pub counts: Counts,
    pub violations: Violations,
    pub memory: Memory,
    /// The column of the call under way (still set if it panicked).
    pub in_progress: Option<Column>,
    /// The last decoder input (me, n, bytes), to save if it panics.
    pub last_decode: Option<(Rank, u32, Vec<u8>)>,
    /// One line per panic: its message and where its input was saved.
    pub panic_notes: Vec<String>,
}

impl Tally {
    /// Inputs counted so far, both columns.
    pub fn inputs(&self) -> u64 {
        self.counts.inputs.iter().flatten().sum()
    }

    pub fn panics(&self) -> u64 {
        self.counts.panics.iter().sum()
    }

    /// Counts an input and marks a call of `column` under way.
    pub fn input(&mut self, column: Column, kind: InputKind) {
        self.counts.inputs[kind.index()][column as usize] += 1;
        self.in_progress = Some(column);
    }

    /// The call under way returned.
    pub fn done(&mut self) {
        self.in_progress = None;
    }

    pub fn message_result(&mut self, column: Column, result: &Result<(), HandleError>) {
        self.done();
        match result {
            Ok(()) => self.counts.accepted[column as usize] += 1,
            Err(HandleError::Rejected(r)) => self.counts.rejected[r.index()][column as usize] += 1,
            Err(other) => *self.counts.refused.entry(other.to_string()).or_default() += 1,
        }
    }

    /// A broadcast's or leave's result.
    pub fn refusal(&mut self, result: &Result<(), HandleError>) {
        self.done();
        if let Err(e) = result {
            let word = match e {
                HandleError::PayloadTooLarge { .. } => "payload_too_large".to_owned(),
                HandleError::NotActive => "not_active".to_owned(),
                other => other.to_string(),
            };
            *self.counts.refused.entry(word).or_default() += 1;
        }
    }

    pub fn reached(&mut self, what: &'static str) {
        *self.counts.reached.entry(what).or_default() += 1;
    }

    pub fn event(&mut self, e: &Event) {
        self.reached(match e {
            Event::Failed { .. } => "Failed event",
            Event::Left { .. } => "Left event",
            Event::SelfExcluded { .. } => "SelfExcluded event",
            Event::SlowEmitter { .. } => "SlowEmitter event",
            Event::Payload { .. } => "Payload event",
            Event::HostFailed { .. } => "HostFailed event",
            Event::ViewChange { .. } => "ViewChange event",
            Event::Agreed { .. } => "Agreed event",
            Event::AgreeAborted { .. } => "AgreeAborted event",
            #[allow(unreachable_patterns)] // events added later
            _ => "other event",
        });
    }

    /// The table, in Markdown (it reads as well in a terminal).
    pub fn table(&self, title: &str) -> String {
        let c = &self.counts;
        let num = |x: u64| x.to_string();
        let dash = || "-".to_owned();
        let sum = |col: usize| c.inputs.iter().map(|k| k[col]).sum::<u64>();
        let mut rows: Vec<(String, String, String)> = Vec::new();
        rows.push(("inputs".into(), num(sum(0)), num(sum(1))));
        for &k in InputKind::ALL {
            let [d, e] = c.inputs[k.index()];
            // Kinds that never go to the decoder alone print a dash there.
            let d = if k.weight(Column::Decoder) > 0 || d > 0 {
                num(d)
            } else {
                dash()
            };
            rows.push((format!("  {}", k.as_str()), d, num(e)));
        }
        rows.push(("accepted".into(), num(c.accepted[0]), num(c.accepted[1])));
        for &r in RejectReason::ALL {
            let [d, e] = c.rejected[r.index()];
            rows.push((format!("rejected: {}", r.as_str()), num(d), num(e)));
        }
        let mut refused: BTreeMap<&str, u64> = [("payload_too_large", 0), ("not_active", 0)].into();
        for (word, &x) in &c.refused {
            *refused.entry(word).or_default() += x;
        }
        for (word, x) in refused {
            rows.push((format!("refused: {word}"), dash(), num(x)));
        }
        rows.push(("panics".into(), num(c.panics[0]), num(c.panics[1])));
        for (i, &v) in Violation::ALL.iter().enumerate() {
            let x = num(self.violations.counts[i]);
            let label = format!("violation: {}", v.as_str());
            rows.push(match v {
                Violation::DecodeRoundTrip => (label, x, dash()),
                _ => (label, dash(), x),
            });
        }
        rows.push((
            "episodes (jobs of 2 to 33 Engines)".into(),
            dash(),
            num(c.episodes),
        ));
        for (what, &x) in &c.reached {
            rows.push((format!("reached: {what}"), dash(), num(x)));
        }
        let mib = |k: Option<u64>| {
            k.map_or("n/a".to_owned(), |k| {
                format!("{:.1} MiB", k as f64 / 1024.0)
            })
        };
        rows.push((
            "peak RSS: after 10% of the inputs, at the end".into(),
            mib(self.memory.after_tenth),
            mib(self.memory.at_end),
        ));
        rows.push((
            "payload allowance beyond the first 10%'s".into(),
            dash(),
            mib(Some(self.memory.excess_kib())),
        ));
        let mut t = String::new();
        let _ = writeln!(t, "| {title:<50} | {:>9} | {:>9} |", "decoder", "engine");
        let _ = writeln!(t, "|{:-<52}|{:->10}:|{:->10}:|", "", "", "");
        for (label, d, e) in rows {
            let _ = writeln!(t, "| {label:<50} | {d:>9} | {e:>9} |");
        }
        t
    }
}

/// (VmRSS, VmHWM) of this process in KiB, where `/proc` has them.
pub fn rss_kib() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}
