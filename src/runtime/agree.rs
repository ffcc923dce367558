//! Agreements and views for the embedder: [`Detector::agree`] (blocking),
//! [`Detector::iagree`] with its [`AgreeRequest`] (`test`, `wait`), and
//! [`Detector::view`], the latest view this rank raised.
//!
//! Owns: the book of requests in flight ([`AgreeBook`]: sent to the
//! progress thread, then numbered by the Engine's sequence number), the
//! handing of each result to its request, and the end of every request
//! still open when the progress thread ends, however it ends. Must not:
//! make a protocol decision (the Engine's user agreements do), or let the
//! progress thread wait on the embedder: it takes the book's lock only to move a
//! request from one list to another, and the view's only to swap an `Arc`.
//!
//! An agreement is a collective: every live rank must call `agree` (or
//! `iagree`) the same number of times, in the same order, as with
//! `MPIX_Comm_agree`. It waits for every rank not known gone: a live rank
//! that never calls it holds everyone back, **without a time limit** (a
//! rank that fails meanwhile is found by the detector and the agreement
//! goes on without it).

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::node::Owner;
use crate::protocol::{self, AgreeAbort};

use super::host_agree::{Context, Step};
use super::progress::Command;
use super::{Detector, PublishedState};

/// A decided agreement: the same at every surviving participant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Agreement {
    /// Its sequence number on this rank: the `seq`-th call (from 1).
    pub seq: u64,
    /// The AND of every participant's flags.
    pub flags: u64,
    /// The decided view: `view.failed` holds every rank that did not take
    /// part and every failure any participant knew when it joined;
    /// `view.id` is the newest view (`Event::ViewChange`) any participant
    /// had raised, whose set `view.failed` contains.
    pub view: protocol::View,
    /// The longest chain of agreement messages behind the decision.
    pub hops: u16,
}

/// Why an agreement has no result on this rank.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AgreeError {
    /// This rank left (shutdown) before the agreement was decided here.
    #[error("this rank left before the agreement was decided")]
    Left,
    /// This rank was declared failed by the others (excluded).
    #[error(
        "this rank was excluded (declared failed by the others) before the agreement was decided"
    )]
    Excluded,
    /// The detector's progress thread ended on an error or a panic, or had
    /// already ended when the agreement was asked for.
    #[error("the detector stopped before the agreement was decided: {0}")]
    Stopped(String),
    /// `agree`/`wait` called from the detector's own callback, on the
    /// progress thread, which would then wait for itself.
    #[error(
        "agree() and wait() cannot be called from the detector's callback (the progress thread would wait for itself); use iagree() and test()"
    )]
    OnProgressThread,
    /// This process is a `fork()`ed child of process `pid`, which started
    /// the detector (and the request) and runs it.
    #[error(
        "this agreement belongs to process {pid}, which started its detector; this process is a \
         fork()ed child of it and holds only a copy"
    )]
    Forked { pid: u32 },
}

pub(super) type Outcome = Result<Agreement, AgreeError>;

/// One request's result, once known.
#[derive(Debug, Default)]
pub(super) struct Slot {
    result: Mutex<Option<Outcome>>,
    ready: Condvar,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, Option<Outcome>> {
        self.result.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The result, if known.
    #[cfg(test)]
    pub(super) fn result(&self) -> Option<Outcome> {
        self.lock().clone()
    }

    pub(super) fn finish(&self, outcome: Outcome) {
        let mut result = self.lock();
        if result.is_none() {
            *result = Some(outcome);
            self.ready.notify_all();
        }
    }
}

/// The requests in flight, shared by the embedder's threads and the progress
/// thread (in the detector's published state, so that it outlives a panic
/// of the progress loop).
#[derive(Debug, Default)]
pub(super) struct AgreeBook {
    inner: Mutex<BookInner>,
}

#[derive(Debug, Default)]
struct BookInner {
    /// Why no request is taken any more (the progress thread ended).
    closed: Option<AgreeError>,
    /// Sent to the progress thread, in the order of their commands.
    sent: std::collections::VecDeque<Arc<Slot>>,
    /// Numbered by the Engine, waiting for the result.
    numbered: std::collections::BTreeMap<u64, Arc<Slot>>,
    /// The latest view this rank raised.
    view: Arc<protocol::View>,
}

impl AgreeBook {
    fn lock(&self) -> MutexGuard<'_, BookInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The progress thread took the oldest `Agree` command: its request is
    /// number `seq` (the Engine accepted it) or ends with `refused`.
    pub(super) fn numbered(&self, seq: Result<u64, AgreeError>) {
        let mut book = self.lock();
        let Some(slot) = book.sent.pop_front() else {
            return;
        };
        match seq {
            Ok(seq) => {
                book.numbered.insert(seq, slot);
            }
            Err(e) => {
                drop(book);
                slot.finish(Err(e));
            }
        }
    }

    /// An event from the Engine: a result (`Event::Agreed`/`AgreeAborted`)
    /// goes to its request, a view is kept for [`Detector::view`]. Returns
    /// whether it was a result.
    pub(super) fn on_event(&self, event: &protocol::Event) -> bool {
        let (seq, outcome) = match event {
            protocol::Event::Agreed {
                seq,
                flags,
                view,
                hops,
            } => (
                *seq,
                Ok(Agreement {
                    seq: *seq,
                    flags: *flags,
                    view: view.clone(),
                    hops: *hops,
                }),
            ),
            protocol::Event::AgreeAborted { seq, reason } => (
                *seq,
                Err(match reason {
                    AgreeAbort::Left => AgreeError::Left,
                    AgreeAbort::Excluded => AgreeError::Excluded,
                }),
            ),
            protocol::Event::ViewChange { id, failed, .. } => {
                self.lock().view = Arc::new(protocol::View {
                    id: *id,
                    failed: failed.clone(),
                });
                return false;
            }
            _ => return false,
        };
        let slot = self.lock().numbered.remove(&seq);
        if let Some(slot) = slot {
            slot.finish(outcome);
        }
        true
    }

    /// The progress thread ended: every open request ends with `why`, and
    /// so does every later one.
    pub(super) fn close(&self, why: AgreeError) {
        let open: Vec<Arc<Slot>> = {
            let mut book = self.lock();
            book.closed.get_or_insert(why.clone());
            let mut open: Vec<Arc<Slot>> = book.sent.drain(..).collect();
            open.extend(std::mem::take(&mut book.numbered).into_values());
            open
        };
        for slot in open {
            slot.finish(Err(why.clone()));
        }
    }
}

/// An agreement in progress ([`Detector::iagree`]).
#[derive(Debug, Clone)]
pub struct AgreeRequest {
    slot: Arc<Slot>,
    /// The progress thread, which must never wait for itself.
    progress: Option<std::thread::ThreadId>,
    /// The process that asked for it: in a `fork()`ed child nobody will
    /// ever give it a result, and its lock may have been held at the fork.
    owner: Owner,
    /// A one-host job's agreement (`host_agree.rs`): waiting drives it.
    host: Option<Arc<PublishedState>>,
}

impl AgreeRequest {
    /// The result if it is known; never blocks on the progress thread.
    /// [`AgreeError::Forked`] in a `fork()`ed child of the process that
    /// asked for it.
    pub fn test(&self) -> Option<Result<Agreement, AgreeError>> {
        if let Err(forked) = self.owned_here() {
            return Some(Err(forked));
        }
        if let Some(shared) = &self.host {
            if self.slot.lock().is_none() && self.progress != Some(std::thread::current().id()) {
                shared.drive_host_agreement(false);
            }
        }
        self.slot.lock().clone()
    }

    fn owned_here(&self) -> Result<(), AgreeError> {
        if self.owner.is_this_process() {
            Ok(())
        } else {
            Err(AgreeError::Forked {
                pid: self.owner.pid(),
            })
        }
    }

    /// Waits for the result, **without a time limit**: an agreement waits
    /// for every live rank (module docs). Ends early with an error when
    /// this rank leaves, is excluded or its detector stops.
    pub fn wait(self) -> Result<Agreement, AgreeError> {
        self.wait_until(None)
            .unwrap_or_else(|| Err(AgreeError::Stopped("no result".into())))
    }

    /// Waits at most `timeout` for the result (`None`: not yet).
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<Agreement, AgreeError>> {
        self.wait_until(Some(Instant::now() + timeout))
    }

    fn wait_until(&self, deadline: Option<Instant>) -> Option<Outcome> {
        if let Err(forked) = self.owned_here() {
            return Some(Err(forked));
        }
        if self.progress == Some(std::thread::current().id()) {
            return self.test().or(Some(Err(AgreeError::OnProgressThread)));
        }
        if let Some(shared) = &self.host {
            return self.drive_until(shared, deadline);
        }
        let mut result = self.slot.lock();
        loop {
            if let Some(outcome) = result.as_ref() {
                return Some(outcome.clone());
            }
            result = match deadline {
                None => self
                    .slot
                    .ready
                    .wait(result)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let left = d.checked_duration_since(Instant::now())?;
                    self.slot
                        .ready
                        .wait_timeout(result, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }
}

impl AgreeRequest {
    /// Drives a one-host agreement until this request has its result:
    /// spinning a little, then yielding the CPU (the others may need it to
    /// contribute), then sleeping on the agreement area's bell and the
    /// notice board's (a failure posted there may be what is missing).
    fn drive_until(&self, shared: &PublishedState, deadline: Option<Instant>) -> Option<Outcome> {
        /// Idle steps spent spinning before yielding, with no more ranks
        /// on the host than CPUs (with more, a spin only delays the rank
        /// that has yet to contribute).
        const SPINS: u32 = 16;
        /// How long idle steps yield the CPU before sleeping: on a host
        /// with more ranks than CPUs the others need it to contribute,
        /// and a yield costs them nothing when nobody else runs.
        const YIELDING: Duration = Duration::from_millis(2);
        /// A sleep's bound: a failure this rank learns (its progress
        /// thread's failed set) rings no bell.
        const NAP: Duration = Duration::from_millis(1);
        let host = shared.host_agreement.as_ref();
        let spins = if host.is_some_and(|h| h.oversubscribed()) {
            0
        } else {
            SPINS
        };
        let mut idle = 0u32;
        let mut idle_since = Instant::now();
        loop {
            if let Some(outcome) = self.slot.lock().as_ref() {
                return Some(outcome.clone());
            }
            // Read before the step: a bell rung after it ends the sleep.
            let segment = host.and_then(|h| h.segment());
            let bells = segment.map(crate::node::agree_bells);
            match shared.drive_host_agreement(true) {
                Step::Moved => idle = 0,
                Step::Waiting | Step::Idle | Step::Busy => idle += 1,
            }
            if idle <= 1 {
                idle_since = Instant::now();
            }
            if idle < spins {
                std::hint::spin_loop();
                continue;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return self.slot.lock().clone();
            }
            if now.duration_since(idle_since) < YIELDING {
                std::thread::yield_now();
            } else {
                let nap = deadline.map_or(NAP, |d| {
                    d.saturating_duration_since(Instant::now()).min(NAP)
                });
                match segment.zip(bells) {
                    Some((segment, bells)) => {
                        crate::node::wait_agree_bells(segment, bells, nap);
                    }
                    // The segment is not open yet (the progress thread
                    // opens it once every rank is linked).
                    None => std::thread::park_timeout(nap.min(Duration::from_micros(100))),
                }
            }
        }
    }
}

impl PublishedState {
    /// One step of this rank's one-host agreements (`wait`: take their
    /// lock; otherwise only try it).
    pub(super) fn drive_host_agreement(&self, wait: bool) -> Step {
        let Some(host) = &self.host_agreement else {
            return Step::Idle;
        };
        let view = || self.agreements.lock().view.id;
        let cx = Context {
            failed: &self.failed,
            left: &self.left,
            view: &view,
        };
        host.drive(&cx, wait)
    }
}

impl Detector {
    /// Agrees with every live rank on `flags` (the AND of everyone's) and
    /// on a view: blocks until decided, **however long that takes** (see
    /// the module docs: a collective, like `MPIX_Comm_agree`). Every
    /// surviving rank gets the same [`Agreement`]. Ranks in its failed set
    /// this rank did not know gone are learned first (`Left` or `Failed`
    /// events, once their notices come; `Failed` after a timeout without).
    pub fn agree(&self, flags: u64) -> Result<Agreement, AgreeError> {
        self.start_agreement(flags, true)?.wait()
    }

    /// Starts an agreement and returns at once; [`AgreeRequest::test`] or
    /// [`AgreeRequest::wait`] give the result. Several may be in flight;
    /// they are decided in call order. [`AgreeError::Forked`] in a
    /// `fork()`ed child of the process that started the detector.
    pub fn iagree(&self, flags: u64) -> Result<AgreeRequest, AgreeError> {
        self.start_agreement(flags, false)
    }

    /// `attended`: the caller waits for the result at once (`agree`).
    fn start_agreement(&self, flags: u64, attended: bool) -> Result<AgreeRequest, AgreeError> {
        if !self.owner.is_this_process_checked() {
            return Err(AgreeError::Forked {
                pid: self.owner.pid(),
            });
        }
        // The progress thread takes the call at `SCHED_FIFO`, ahead of the
        // host's normal threads (this one among them), and then holds that
        // policy until the agreement is decided here (docs/design.md
        // §6 "Runtime"): lifted when it will take the call (by message, or
        // a one-host round nobody waits on), not from the callback (the
        // thread is running) nor once it has ended.
        let progress = self.thread.as_ref().map(|t| t.thread().id());
        let on_progress = progress == Some(std::thread::current().id());
        let takes_it = self.shared.host_agreement.is_none() || !attended;
        let lift = || {
            if let Some(boost) = self.shared.boost.get() {
                if takes_it && !on_progress && self.shared.life.is_running() {
                    boost.lift();
                }
            }
        };
        if let Some(host) = &self.shared.host_agreement {
            lift();
            let slot = host.call(flags, attended)?;
            // Contribute now (from the callback, only if nobody else is
            // driving: the progress thread never waits on an embedder's thread);
            // the progress thread drives a request nobody may wait on (and
            // raises the event): wake it for one.
            self.shared.drive_host_agreement(!on_progress);
            if !attended {
                self.wake_progress();
            }
            return Ok(AgreeRequest {
                slot,
                progress,
                owner: self.owner,
                host: Some(Arc::clone(&self.shared)),
            });
        }
        let slot = Arc::new(Slot::default());
        let book = &self.shared.agreements;
        {
            // Under the book's lock, so requests are listed in the order
            // of their commands whatever the embedder's threads do.
            let mut inner = book.lock();
            if let Some(why) = &inner.closed {
                return Err(why.clone());
            }
            inner.sent.push_back(Arc::clone(&slot));
            if self
                .queue_command(Command::Agree(flags, Instant::now()))
                .is_err()
            {
                inner.sent.pop_back();
                return Err(AgreeError::Stopped("the progress thread has ended".into()));
            }
        }
        // Lifted only now the command is sent, and woken only now the lock
        // is released: the lifted thread takes the call at once (at
        // `SCHED_FIFO`, ahead of this thread on its CPU). Woken under the
        // lock, it would number the request under that lock and wait for
        // this thread to release it (a priority inversion: 0.07 to 1.4 ms a
        // call, seen under `ffd run`). Lifted before the send, it would
        // preempt this thread mid-send; the command queue lets it sleep
        // then (`commands.rs`), but the call is still taken sooner once
        // sent.
        lift();
        self.wake_progress();
        Ok(AgreeRequest {
            slot,
            progress,
            owner: self.owner,
            host: None,
        })
    }

    /// The latest view this rank raised (`Event::ViewChange`): id 0 and
    /// nobody until the first one. Takes a lock the progress thread holds
    /// only to swap the view in. In a `fork()`ed child, id 0 and nobody
    /// (that lock may have been held at the fork; [`state`](Self::state)
    /// says [`DetectorState::Forked`](super::DetectorState::Forked)).
    pub fn view(&self) -> protocol::View {
        if !self.owner.is_this_process() {
            return protocol::View::default();
        }
        protocol::View::clone(&self.shared.agreements.lock().view)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agreed(seq: u64) -> protocol::Event {
        protocol::Event::Agreed {
            seq,
            flags: 6,
            view: protocol::View {
                id: 2,
                failed: vec![3],
            },
            hops: 4,
        }
    }

    fn request(book: &AgreeBook) -> AgreeRequest {
        let slot = Arc::new(Slot::default());
        book.lock().sent.push_back(Arc::clone(&slot));
        AgreeRequest {
            slot,
            progress: None,
            owner: Owner::this_process(),
            host: None,
        }
    }

    #[test]
    fn results_reach_their_requests_by_number() {
        let book = AgreeBook::default();
        let (a, b) = (request(&book), request(&book));
        book.numbered(Ok(1));
        book.numbered(Ok(2));
        assert!(book.on_event(&agreed(2)));
        assert_eq!(a.test(), None);
        assert_eq!(b.test().unwrap().unwrap().seq, 2);
        assert!(book.on_event(&protocol::Event::AgreeAborted {
            seq: 1,
            reason: AgreeAbort::Left
        }));
        assert_eq!(a.wait(), Err(AgreeError::Left));
        assert!(!book.on_event(&protocol::Event::Left { rank: 1 }));
    }

    #[test]
    fn the_end_of_the_thread_ends_every_open_request_and_later_ones() {
        let book = AgreeBook::default();
        let (a, b) = (request(&book), request(&book));
        book.numbered(Ok(1));
        let waiter = std::thread::spawn(move || a.wait());
        book.close(AgreeError::Excluded);
        assert_eq!(waiter.join().unwrap(), Err(AgreeError::Excluded));
        assert_eq!(b.test(), Some(Err(AgreeError::Excluded)));
        assert_eq!(book.lock().closed, Some(AgreeError::Excluded));
        // A result after the end changes nothing.
        book.on_event(&agreed(1));
        assert_eq!(
            b.wait_timeout(Duration::ZERO),
            Some(Err(AgreeError::Excluded))
        );
    }

    #[test]
    fn a_refused_request_ends_at_once_and_a_wait_can_time_out() {
        let book = AgreeBook::default();
        let a = request(&book);
        book.numbered(Err(AgreeError::Left));
        assert_eq!(a.test(), Some(Err(AgreeError::Left)));
        let b = request(&book);
        assert_eq!(b.wait_timeout(Duration::from_millis(10)), None);
    }

    #[test]
    fn views_are_kept_for_readers() {
        let book = AgreeBook::default();
        assert_eq!(*book.lock().view, protocol::View::default());
        book.on_event(&protocol::Event::ViewChange {
            id: 1,
            failed: vec![5],
            hops: 2,
        });
        assert_eq!(book.lock().view.failed, vec![5]);
    }
}
