//! The embedder's commands as the progress thread takes them: a turn's
//! worth at a time (`runtime/commands.rs`: at most
//! [`BROADCASTS_PER_TURN`] broadcasts, the rest for the next turn, which
//! comes at once), each carried out in the order sent.
//!
//! Owns: what each command does to the Engine and the thread (a
//! broadcast, an agreement's numbering, a leave, a stop, an injected
//! fault). Must not: wait for the embedder, or take more than a turn's
//! broadcasts (docs/design.md §4.9 "Payloads").

use super::super::AgreeError;
use super::super::commands::{BROADCASTS_PER_TURN, Left, Turn};
use super::{Command, Core, trace};
use crate::protocol::{Input, Participation};

impl Core<'_> {
    /// Carries out the embedder's commands, in order, at most
    /// [`BROADCASTS_PER_TURN`] broadcasts of them: the rest are
    /// for the next turn, which comes at once ([`Core::sleep_for`]).
    pub(super) fn take_commands(&mut self) {
        let mut turn = Turn::new(BROADCASTS_PER_TURN);
        let left = loop {
            match self.commands.take(&mut turn) {
                Ok(command) => self.command(command),
                Err(left) => break left,
            }
        };
        self.commands_left = left == Left::More;
        if left == Left::More {
            self.counters.commands.capped_turns += 1;
        }
        // The Detector is gone without a word: leave cleanly.
        if left == Left::Forever {
            self.begin_leave();
        }
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Broadcast(bytes) => {
                let now = self.now();
                if let Err(e) = self.engine.handle(now, Input::Broadcast(&bytes)) {
                    self.logger.warn(format_args!("broadcast refused: {e}"));
                }
            }
            Command::Agree(flags, called) => {
                let now = self.now();
                let seq = match self.engine.handle(now, Input::Agree { flags }) {
                    Ok(()) => {
                        let seq = self.engine.agreements_called();
                        trace::call(&self.logger, seq, called);
                        Ok(seq)
                    }
                    Err(_) if self.engine.participation() == Participation::Excluded => {
                        Err(AgreeError::Excluded)
                    }
                    Err(_) => Err(AgreeError::Left),
                };
                self.shared.agreements.numbered(seq);
            }
            Command::Leave => self.begin_leave(),
            Command::Stop => self.stop = true,
            #[cfg(any(test, feature = "fault-injection"))]
            Command::Fault(fault) => self.inject(fault),
        }
    }
}
