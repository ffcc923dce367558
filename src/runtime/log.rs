//! Diagnostics to stderr at the level `FFD_LOG` chooses.
//!
//! Owns: the detector's own log lines, prefixed `ffd[rank]`. Must not: set
//! a global logger (the embedder may have its own) or be called per heartbeat.

use std::fmt;
use std::io::Write;

use crate::config::LogLevel;
use crate::protocol::Rank;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Logger {
    level: LogLevel,
    rank: Rank,
}

impl Logger {
    pub(crate) fn new(level: LogLevel, rank: Rank) -> Self {
        Logger { level, rank }
    }

    fn emit(&self, at: LogLevel, word: &str, args: fmt::Arguments<'_>) {
        if at != LogLevel::Off && self.level >= at {
            // One write per line: ranks of a job often share one stderr pipe
            // (mpirun), and eprintln! may write a line in pieces.
            let line = format!("ffd[{}] {word}: {args}\n", self.rank);
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }

    pub(crate) fn error(&self, args: fmt::Arguments<'_>) {
        self.emit(LogLevel::Error, "error", args);
    }

    pub(crate) fn warn(&self, args: fmt::Arguments<'_>) {
        self.emit(LogLevel::Warn, "warn", args);
    }

    pub(crate) fn info(&self, args: fmt::Arguments<'_>) {
        self.emit(LogLevel::Info, "info", args);
    }

    /// Whether lines at `at` are written (to skip preparing them).
    pub(crate) fn enabled(&self, at: LogLevel) -> bool {
        at != LogLevel::Off && self.level >= at
    }

    pub(crate) fn debug(&self, args: fmt::Arguments<'_>) {
        self.emit(LogLevel::Debug, "debug", args);
    }
}
