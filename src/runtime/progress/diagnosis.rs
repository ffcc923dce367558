//! The diagnosis ring: what the progress thread saw of its own timing, for
//! the log (`FFD_LOG=info`) when it confirms an accusation or is itself
//! declared.
//!
//! Owns: the recent turns of the loop (when each began, how long its
//! queue read, timers and the rest took, the heartbeats it posted), the
//! long gaps between turns and the long turns of the last two seconds.
//! Must not: read a clock below `info` (every method is a no-op there and
//! its caller passes the time lazily), or allocate outside the log lines.

use std::collections::VecDeque;
use std::time::Duration;

use crate::config::LogLevel;
use crate::protocol::{Engine, Event, Exclusion, FailureDetail, Time};

use super::super::log::Logger;

/// How many recent turns [`Diagnosis::log`] can show.
const RECENT_TURNS: usize = 48;

/// How long long gaps and long turns are kept.
const KEEP: Duration = Duration::from_secs(2);

/// One turn of the loop.
#[derive(Clone, Copy, Debug)]
struct TurnNote {
    began: Time,
    /// The queue read, the timers, the rest (carrying out, retries).
    phases: [Duration; 3],
    /// Heartbeats posted during the turn.
    beats: u8,
    /// The Engine's next deadline at the turn's end, from then.
    deadline_in: Option<Duration>,
}

/// The progress thread's notes on its own turns.
pub(super) struct Diagnosis {
    /// `FFD_LOG` is `info` or more: otherwise nothing is noted.
    enabled: bool,
    /// A turn or a gap longer than this (a quarter timeout) is long.
    long: Duration,
    /// When the last turn of the loop began.
    last_turn: Option<Time>,
    /// The long gaps between turns in the last two seconds: (at, gap).
    long_gaps: VecDeque<(Time, Duration)>,
    /// This turn: when its queue read and its timers ended.
    turn_marks: [Option<Time>; 2],
    /// Turns that took longer than a quarter timeout: (began, queue read,
    /// timers, the rest), for two seconds.
    long_turns: VecDeque<(Time, [Duration; 3])>,
    /// The last [`RECENT_TURNS`] turns.
    recent_turns: VecDeque<TurnNote>,
    /// Heartbeats posted in this turn so far.
    beats_this_turn: u8,
    /// When the last heartbeat was posted.
    last_beat_posted: Option<Time>,
}

impl Diagnosis {
    pub(super) fn new(logger: &Logger, timeout: Duration) -> Self {
        Diagnosis {
            enabled: logger.enabled(LogLevel::Info),
            long: timeout / 4,
            last_turn: None,
            long_gaps: VecDeque::new(),
            turn_marks: [None; 2],
            long_turns: VecDeque::new(),
            recent_turns: VecDeque::new(),
            beats_this_turn: 0,
            last_beat_posted: None,
        }
    }

    /// A turn of the loop begins: a gap since the last one longer than a
    /// quarter timeout is kept two seconds.
    pub(super) fn begin_turn(&mut self, now: impl FnOnce() -> Time) {
        if !self.enabled {
            return;
        }
        let now = now();
        if let Some(last) = self.last_turn {
            let gap = now.saturating_since(last);
            if gap > self.long {
                self.long_gaps.push_back((now, gap));
            }
        }
        self.last_turn = Some(now);
        while self
            .long_gaps
            .front()
            .is_some_and(|&(at, _)| now.saturating_since(at) > KEEP)
        {
            self.long_gaps.pop_front();
        }
    }

    /// Phase `k` of this turn ended (0: the queue read, 1: the timers).
    pub(super) fn mark(&mut self, k: usize, now: impl FnOnce() -> Time) {
        if self.enabled {
            self.turn_marks[k] = Some(now());
        }
    }

    /// A heartbeat was posted.
    pub(super) fn beat_posted(&mut self, now: impl FnOnce() -> Time) {
        if self.enabled {
            self.last_beat_posted = Some(now());
            self.beats_this_turn = self.beats_this_turn.saturating_add(1);
        }
    }

    /// A turn ends, with the Engine's next deadline: the last
    /// [`RECENT_TURNS`] are kept, and any longer than a quarter timeout
    /// for two seconds.
    pub(super) fn end_turn(&mut self, now: impl FnOnce() -> Time, next_deadline: Option<Time>) {
        let beats = std::mem::take(&mut self.beats_this_turn);
        let (Some(began), [Some(read), Some(timers)]) = (self.last_turn, self.turn_marks) else {
            return;
        };
        let now = now();
        let phases = [
            read.saturating_since(began),
            timers.saturating_since(read),
            now.saturating_since(timers),
        ];
        if now.saturating_since(began) > self.long {
            self.long_turns.push_back((began, phases));
        }
        while self
            .long_turns
            .front()
            .is_some_and(|&(at, _)| now.saturating_since(at) > KEEP)
        {
            self.long_turns.pop_front();
        }
        if self.recent_turns.len() == RECENT_TURNS {
            self.recent_turns.pop_front();
        }
        self.recent_turns.push_back(TurnNote {
            began,
            phases,
            beats,
            deadline_in: next_deadline.map(|d| d.saturating_since(now)),
        });
        self.turn_marks = [None; 2];
    }

    /// Logs (`FFD_LOG=info`) what this thread saw of its own timing when
    /// `event` says it confirmed an accusation or was itself declared: the
    /// evidence for telling a late accuser from a starved suspect.
    pub(super) fn log(
        &self,
        logger: &Logger,
        now: impl FnOnce() -> Time,
        event: &Event,
        engine: &mut Engine,
    ) {
        if !self.enabled {
            return;
        }
        let now = now();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let gaps: Vec<String> = self
            .long_gaps
            .iter()
            .map(|&(at, gap)| format!("{:.1}ms {:.1}ms ago", ms(gap), ms(now.saturating_since(at))))
            .collect();
        let beat = self
            .last_beat_posted
            .map(|t| format!("{:.1}ms ago", ms(now.saturating_since(t))));
        match event {
            Event::Failed {
                rank,
                detector,
                detail: FailureDetail::Silence { .. },
                ..
            } if *detector == engine.me() => {
                let note = engine.take_accusation_note();
                logger.info(format_args!(
                    "diagnosis: declared rank {rank} from silence: {note:?}; my long turn gaps \
                     (last 2 s): [{}]",
                    gaps.join(", ")
                ));
            }
            Event::SelfExcluded {
                by,
                why: Exclusion::Named,
            } => {
                let turns: Vec<String> = self
                    .long_turns
                    .iter()
                    .map(|&(at, [r, t, o])| {
                        format!(
                            "{:.1}ms ago: read {:.1} timers {:.1} rest {:.1}",
                            ms(now.saturating_since(at)),
                            ms(r),
                            ms(t),
                            ms(o)
                        )
                    })
                    .collect();
                let this = self.last_turn.map(|t| ms(now.saturating_since(t)));
                let marks = self
                    .turn_marks
                    .map(|m| m.map(|t| ms(now.saturating_since(t))));
                // Each recent turn: began (ms ago) read/timers/rest (ms)
                // heartbeats posted, the Engine's next deadline after it.
                let recent: Vec<String> = self
                    .recent_turns
                    .iter()
                    .map(|t| {
                        let [r, tm, o] = t.phases.map(ms);
                        format!(
                            "{:.1}:{r:.1}/{tm:.1}/{o:.1}:b{}:d{}",
                            ms(now.saturating_since(t.began)),
                            t.beats,
                            t.deadline_in
                                .map_or("-".into(), |d| format!("{:.1}", ms(d)))
                        )
                    })
                    .collect();
                logger.info(format_args!(
                    "diagnosis: declared by rank {by}; my health {}, my last beat posted {beat:?}, \
                     my long turn gaps (last 2 s): [{}]; long turns: [{}]; this turn began \
                     {this:?} ms ago, marks {marks:?}; recent turns (ago:read/timers/rest:beats:\
                     next deadline in): [{}]",
                    engine.own_health(),
                    gaps.join(", "),
                    turns.join("; "),
                    recent.join(" ")
                ));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Time {
        Time::from_nanos(ms * 1_000_000)
    }

    /// The ring keeps the last [`RECENT_TURNS`] turns, and a turn or gap
    /// longer than a quarter timeout for two seconds only.
    #[test]
    fn the_ring_keeps_recent_turns_and_long_ones_for_two_seconds() {
        let logger = Logger::new(LogLevel::Info, 0);
        let mut d = Diagnosis::new(&logger, Duration::from_millis(100));
        let mut t = 0;
        for _ in 0..RECENT_TURNS + 5 {
            d.begin_turn(|| at(t));
            d.mark(0, || at(t + 1));
            d.mark(1, || at(t + 2));
            d.beat_posted(|| at(t + 2));
            d.end_turn(|| at(t + 3), Some(at(t + 10)));
            t += 10;
        }
        assert_eq!(d.recent_turns.len(), RECENT_TURNS);
        assert!(d.long_turns.is_empty() && d.long_gaps.is_empty());
        let last = d.recent_turns.back().unwrap();
        assert_eq!(last.beats, 1);
        assert_eq!(last.deadline_in, Some(Duration::from_millis(7)));
        // A 40 ms turn after a 50 ms gap: both long (over 25 ms).
        t += 50;
        d.begin_turn(|| at(t));
        d.mark(0, || at(t + 30));
        d.mark(1, || at(t + 35));
        d.end_turn(|| at(t + 40), None);
        assert_eq!(d.long_turns.len(), 1);
        assert_eq!(d.long_gaps.len(), 1);
        // Two seconds on, the next turn lets both go.
        t += 2100;
        d.begin_turn(|| at(t));
        assert!(d.long_gaps.len() == 1, "the new gap itself is long");
        d.mark(0, || at(t));
        d.mark(1, || at(t));
        d.end_turn(|| at(t), None);
        assert!(d.long_turns.is_empty());
    }

    /// Below `info`, nothing is noted and no time is read.
    #[test]
    fn below_info_the_ring_reads_no_time() {
        let logger = Logger::new(LogLevel::Warn, 0);
        let mut d = Diagnosis::new(&logger, Duration::from_millis(100));
        let never = || -> Time { panic!("time read below info") };
        d.begin_turn(never);
        d.mark(0, never);
        d.beat_posted(never);
        d.end_turn(never, None);
        assert!(d.recent_turns.is_empty());
    }
}
