//! Same-host messages through the host's segment in the runtime
//! (`docs/design.md` §4.12 "Hosts"): which peers a message goes to by
//! mailbox, the writer's sequence numbers per mailbox, and this rank's
//! reading of its own.
//!
//! Owns: the route (a rank of this host, when the host's ranks read
//! their mailboxes: `FFD_LOCAL=auto` and `futex_waitv` here, decided the
//! same way by every rank of the host), the numbering, the reading.
//! Must not: judge anyone, check a message (the Engine checks its tag;
//! the record's writer index stands for the transport's source), or
//! touch the fabric.

#![forbid(unsafe_code)]

use std::ops::Range;
use std::sync::Arc;

use crate::node::{
    HostSegment, Knocker, MailReader, Posted, door_name, door_open, post_mail, ring_mail,
};
use crate::protocol::Rank;

/// This rank's side of the host's mailboxes.
#[derive(Debug)]
pub(super) struct Mail {
    segment: Arc<HostSegment>,
    /// This rank's index among the host's ranks.
    me: u32,
    /// The host's ranks, ascending (a rank's index is its place here).
    members: Vec<Rank>,
    /// The next sequence number of this rank's posts, per mailbox.
    seqs: Vec<u64>,
    reader: MailReader,
    bytes: Vec<u8>,
    read: Vec<(u32, Range<usize>)>,
    /// To knock on an asleep owner's doorbell (`None`: no socket; the
    /// mail word then).
    knocker: Option<Knocker>,
    /// Each local rank's doorbell name.
    doors: Vec<String>,
}

impl Mail {
    pub(super) fn new(segment: Arc<HostSegment>, me: u32, members: Vec<Rank>) -> Mail {
        Mail {
            seqs: vec![0; members.len()],
            knocker: Knocker::new().ok(),
            doors: (0..members.len() as u32)
                .map(|i| door_name(segment.name(), i))
                .collect(),
            segment,
            me,
            members,
            reader: MailReader::default(),
            bytes: Vec::new(),
            read: Vec::new(),
        }
    }

    /// Posts `bytes` to `to`'s mailbox; `None`: `to` is not another rank
    /// of this host (the fabric carries it).
    pub(super) fn post(&mut self, to: Rank, bytes: &[u8]) -> Option<Posted> {
        let owner = self.members.binary_search(&to).ok()?;
        if owner == self.me as usize {
            return None;
        }
        let seq = self.seqs.get_mut(owner)?;
        let posted = post_mail(&self.segment, owner as u32, self.me, *seq, bytes);
        if let Posted::Sent { asleep } = posted {
            *seq += 1;
            if asleep {
                // Its doorbell wakes its progress thread directly; else
                // the mail word, through its exit-word thread.
                let knocked = door_open(&self.segment, owner as u32)
                    && self
                        .knocker
                        .as_ref()
                        .is_some_and(|k| k.knock(&self.doors[owner]));
                if !knocked {
                    ring_mail(&self.segment, owner as u32);
                }
            }
        }
        Some(posted)
    }

    /// The progress thread runs: writers need not ring its mail word.
    pub(super) fn awake(&self) {
        MailReader::awake(&self.segment, self.me);
    }

    /// The progress thread is about to sleep: true if mail came since the
    /// last read (read it first).
    pub(super) fn doze(&self) -> bool {
        self.reader.doze(&self.segment, self.me)
    }

    /// Hands each message in this rank's mailbox to `handle` (its writer's
    /// rank, its bytes), in order per writer.
    pub(super) fn read(&mut self, mut handle: impl FnMut(Rank, &[u8])) -> usize {
        self.bytes.clear();
        self.read.clear();
        self.reader
            .read(&self.segment, self.me, &mut self.bytes, &mut self.read);
        for (writer, range) in &self.read {
            if let Some(&from) = self.members.get(*writer as usize) {
                handle(from, &self.bytes[range.clone()]);
            }
        }
        self.read.len()
    }
}
