//! The progress thread's use of the host's mailboxes (`runtime/mail.rs`):
//! a send to a rank of this host posted to its mailbox, a full mailbox's
//! refusal kept like a provider's, this rank's mailbox read at every
//! turn, and the awake flag that spares writers a wake-up while the
//! thread runs.
//!
//! Owns: those steps. Must not: judge (a refusal run is evidence handed
//! to the Engine, as on the fabric), or drop a message.

use std::sync::Arc;

use crate::node::Posted;
use crate::protocol::{Input, Rank};

use super::{Core, trace};

impl Core<'_> {
    /// Posts to `to`'s mailbox if it is a rank of this host that reads
    /// one. `None`: the fabric carries it; `Some(sent)` as
    /// [`Core::send`] says (a refused post waits in the send book).
    pub(super) fn mail_send(&mut self, to: Rank, bytes: &Arc<[u8]>) -> Option<bool> {
        let posted = self.mail.as_mut()?.post(to, bytes)?;
        let counters = &mut self.counters.mailbox;
        match posted {
            Posted::Sent { asleep } => {
                counters.sent += 1;
                counters.rung += u64::from(asleep);
                // Its link works: refusal runs end, and a later one is
                // judged by `FFD_EAGAIN_LIMIT`, not the start-up grace.
                self.link_works(u64::from(to));
                // What a fabric send's completion tells the Engine.
                let now = self.now();
                let _ = self.engine.handle(now, Input::Sent { to });
                Some(true)
            }
            Posted::Full => {
                counters.full += 1;
                self.sends.queue(to, Arc::clone(bytes));
                self.refused(to);
                Some(false)
            }
            Posted::TooLarge => {
                counters.too_large += 1;
                None
            }
            Posted::NoMailbox => None,
        }
    }

    /// Hands the messages in this rank's mailbox to the Engine.
    pub(super) fn read_mail(&mut self) {
        let Some(mut mail) = self.mail.take() else {
            return;
        };
        let n = mail.read(|from, bytes| {
            trace::message(&self.logger, "from", Some(u64::from(from)), bytes);
            self.on_message(Some(from), bytes);
        });
        self.counters.mailbox.received += n as u64;
        self.mail = Some(mail);
        let foreign = self.local.as_mut().map_or(0, |l| l.foreign_knocks());
        if foreign > self.counters.mailbox.foreign_knocks {
            if self.counters.mailbox.foreign_knocks == 0 {
                self.logger.warn(format_args!(
                    "another user knocked on this rank's doorbell: closed, same-host \
                     messages now wake this rank through its mail word"
                ));
            }
            self.counters.mailbox.foreign_knocks = foreign;
        }
    }

    /// This turn begins: writers need not ring.
    pub(super) fn mail_awake(&self) {
        if let Some(mail) = &self.mail {
            mail.awake();
        }
    }

    /// Before sleeping: writers ring from now on; true if mail came
    /// meanwhile (go round again instead of sleeping).
    pub(super) fn mail_waits(&self) -> bool {
        self.mail
            .as_ref()
            .is_some_and(super::super::mail::Mail::doze)
    }
}

#[cfg(test)]
mod tests {
    use super::super::message_buffers;
    use crate::node::mail_capacity;

    /// Every message the buffers hold fits one mailbox record: the
    /// mailbox never sends one over the fabric for its size.
    #[test]
    fn a_mailbox_record_holds_the_largest_message() {
        for ranks in [1u32, 2, 1000, 65_536, 1 << 20, 1 << 24] {
            let (_, size) = message_buffers(ranks);
            assert!(size <= mail_capacity(ranks), "N={ranks}: {size}");
        }
    }
}
