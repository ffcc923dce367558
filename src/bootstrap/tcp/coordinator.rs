//! The rendezvous coordinator: every connection's state, admission, the
//! rounds and their deadlines (each connection's reader is `reader`).
//!
//! Owns: the connections (pending, admitted, done), the ranks' slots, the
//! drop counters' updates, every frame the server writes. Must not: admit
//! a connection whose HELLO's proof did not hold, write anything to an
//! unauthenticated connection but its CHALLENGE and a DENIED, abort the job
//! for anything a single unadmitted connection did, or hold a connection
//! (or its thread) past its bound.
//!
//! Bounds:
//! - a connection must send a HELLO whose proof holds within the handshake
//!   bound, in a first frame of at most [`wire::HANDSHAKE_MAX`] bytes; else it is
//!   dropped (its reader enforces the deadline);
//! - at most `max_unauthenticated` connections wait for their HELLO; a new
//!   one beyond the cap drops the oldest (and at most as many accepted
//!   connections wait in the channel: the acceptor closes the rest);
//! - all N ranks must be admitted within the timeout of the serve's start;
//!   once a round has a contribution (and everyone is connected) every rank
//!   must contribute within the timeout; once an admitted rank's frame has
//!   begun, it must arrive whole within the timeout. Between rounds the
//!   server waits for its ranks without a bound (a job may keep its
//!   connection for a final barrier); their readers still wake every
//!   [`STOP_POLL`](wire::STOP_POLL) to see whether the serve has ended.
//!
//! A rank that goes away while a round needs it, or breaks the protocol
//! after it was admitted, aborts the job at once: it proved the secret, so
//! it is one of the job's own.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::auth::{Challenges, RendezvousKey, Sealer, TAG_LEN};
use super::reader::Reader;
use super::server::{DROP_EVENTS_PER_REASON, DropTally, RendezvousError, ServeEvent, ServeReport};
use super::wire::{self, Frame, VERSION, framed};
use super::{AbortReason, DropReason, Meanwhile};
use crate::bootstrap::MAX_CONTRIBUTION;
use crate::protocol::Rank;

/// The bounds of one serve.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub size: u32,
    pub timeout: Duration,
    pub handshake: Duration,
    pub max_unauthenticated: u32,
}

pub(super) type ConnId = u64;

/// What the acceptor, the readers and a stopper tell the coordinator.
pub(super) enum ToCoordinator {
    Accepted(TcpStream, SocketAddr),
    /// A HELLO whose proof holds; the reader keeps the receiving half.
    Hello {
        id: ConnId,
        rank: u32,
        size: u32,
        sealer: Sealer,
    },
    /// A sealed frame, opened, from an authenticated connection.
    Frame(ConnId, Frame),
    /// The reader has ended, and why: always its last message.
    Ended(ConnId, End),
    Stop,
}

/// How a reader ended.
pub(super) enum End {
    /// Before authentication: the connection is dropped for this reason.
    Dropped(DropReason, String),
    /// End of stream, an error, or the serve ended.
    Closed,
    /// After authentication: a frame whose tag fails, that is malformed,
    /// or that stalled.
    Broke(String),
    /// After authentication: a frame over the cap (its length).
    Oversized(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Accepted, waiting for a HELLO whose proof holds.
    Pending,
    Admitted(Rank),
    /// Dropped, refused, or closed: waiting for its reader to end.
    Done,
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    state: State,
    sealer: Option<Sealer>,
    reader: Option<JoinHandle<()>>,
}

pub(super) struct Coordinator<E> {
    limits: Limits,
    key: Arc<RendezvousKey>,
    challenges: Challenges,
    tally: DropTally,
    stop: Arc<AtomicBool>,
    /// Accepted connections in the channel, not yet taken up.
    queued: Arc<AtomicUsize>,
    tx: Sender<ToCoordinator>,
    on_event: E,
    conns: HashMap<ConnId, Conn>,
    next_id: ConnId,
    /// Connections waiting for their HELLO, oldest first.
    pending: BTreeSet<ConnId>,
    /// The admitted connection and its peer, by rank.
    by_rank: Vec<Option<(ConnId, SocketAddr)>>,
    /// Ranks whose connection has closed.
    closed: Vec<bool>,
    connected: u32,
    connect_deadline: Instant,
    all_connected: bool,
    /// The round in progress or next, from 1.
    round: u32,
    slots: Vec<Option<Vec<u8>>>,
    arrived: u32,
    round_started: Option<Instant>,
    /// The last refusal of each authenticated kind, for a `NotConnected`.
    refusals: BTreeMap<DropReason, String>,
}

type Step = Result<Option<ServeReport>, RendezvousError>;

/// What the coordinator shares with the serve's other threads.
pub(super) struct Shared {
    pub tally: DropTally,
    /// Set when the serve ends; the readers look at it.
    pub stop: Arc<AtomicBool>,
    /// Accepted connections in the channel, not yet taken up.
    pub queued: Arc<AtomicUsize>,
    /// The channel the acceptor and the readers send into.
    pub tx: Sender<ToCoordinator>,
}

impl<E: FnMut(ServeEvent)> Coordinator<E> {
    pub(super) fn new(
        limits: Limits,
        key: Arc<RendezvousKey>,
        challenges: Challenges,
        shared: Shared,
        on_event: E,
    ) -> Coordinator<E> {
        let n = limits.size as usize;
        Coordinator {
            limits,
            key,
            challenges,
            tally: shared.tally,
            stop: shared.stop,
            queued: shared.queued,
            tx: shared.tx,
            on_event,
            conns: HashMap::new(),
            next_id: 0,
            pending: BTreeSet::new(),
            by_rank: vec![None; n],
            closed: vec![false; n],
            connected: 0,
            connect_deadline: Instant::now() + limits.timeout,
            all_connected: false,
            round: 1,
            slots: vec![None; n],
            arrived: 0,
            round_started: None,
            refusals: BTreeMap::new(),
        }
    }

    pub(super) fn serve(
        &mut self,
        rx: &Receiver<ToCoordinator>,
    ) -> Result<ServeReport, RendezvousError> {
        // Each pass handles one message or one expired deadline. Unbounded
        // only between rounds with everyone connected (see the module doc).
        loop {
            let msg = match self.deadline() {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    match rx.recv_timeout(left) {
                        Ok(msg) => msg,
                        Err(RecvTimeoutError::Timeout) => return Err(self.expired().into()),
                        Err(RecvTimeoutError::Disconnected) => {
                            return Err(io::Error::other("channel closed").into());
                        }
                    }
                }
                None => rx.recv().map_err(|_| io::Error::other("channel closed"))?,
            };
            if let Some(report) = self.handle(msg)? {
                return Ok(report);
            }
        }
    }

    fn deadline(&self) -> Option<Instant> {
        if !self.all_connected {
            Some(self.connect_deadline)
        } else {
            self.round_started.map(|t| t + self.limits.timeout)
        }
    }

    fn expired(&self) -> AbortReason {
        if !self.all_connected {
            AbortReason::NotConnected {
                missing: (0..self.limits.size)
                    .filter(|&r| self.by_rank[r as usize].is_none())
                    .collect(),
                connected: self.connected,
                size: self.limits.size,
                after: self.limits.timeout,
                meanwhile: Box::new(Meanwhile {
                    dropped: self.tally.get(),
                    refusals: self.refusals.values().cloned().collect(),
                }),
            }
        } else {
            AbortReason::RoundTimeout {
                round: self.round,
                missing: (0..self.limits.size)
                    .filter(|&r| self.slots[r as usize].is_none())
                    .collect(),
                after: self.limits.timeout,
            }
        }
    }

    fn handle(&mut self, msg: ToCoordinator) -> Step {
        match msg {
            ToCoordinator::Accepted(stream, peer) => {
                self.queued.fetch_sub(1, Ordering::SeqCst);
                self.accept(stream, peer);
                Ok(None)
            }
            ToCoordinator::Hello {
                id,
                rank,
                size,
                sealer,
            } => self.hello(id, rank, size, sealer),
            ToCoordinator::Frame(id, frame) => match self.conns.get(&id).map(|c| c.state) {
                Some(State::Admitted(rank)) => self.frame(rank, frame),
                _ => Ok(None),
            },
            ToCoordinator::Ended(id, end) => self.ended(id, end),
            ToCoordinator::Stop => Err(AbortReason::Stopped.into()),
        }
    }

    fn accept(&mut self, mut stream: TcpStream, peer: SocketAddr) {
        if self.pending.len() as u64 >= u64::from(self.limits.max_unauthenticated) {
            if let Some(oldest) = self.pending.pop_first() {
                let detail = format!(
                    "the oldest of {} connections not yet authenticated",
                    self.limits.max_unauthenticated
                );
                self.drop_conn(oldest, DropReason::Crowded, detail);
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        let _ = stream.set_nodelay(true);
        let _ = stream.set_write_timeout(Some(self.limits.handshake));
        let challenge = Frame::Challenge {
            version: VERSION,
            nonce: self.challenges.next_nonce(),
        }
        .payload()
        .unwrap_or_default();
        let sent = framed(&challenge, &[])
            .map_err(io::Error::other)
            .and_then(|bytes| wire::write_bytes(&mut stream, &bytes));
        let reading = sent.and_then(|()| stream.try_clone());
        let reader = reading.and_then(|reading| {
            let args = Reader {
                id,
                stream: reading,
                key: Arc::clone(&self.key),
                challenge,
                hello_by: Instant::now() + self.limits.handshake,
                limits: self.limits,
                stop: Arc::clone(&self.stop),
                tx: self.tx.clone(),
            };
            thread::Builder::new()
                .name("ffd-rdv-read".into())
                .stack_size(super::reader::STACK)
                .spawn(move || args.run())
        });
        match reader {
            Ok(handle) => {
                self.conns.insert(
                    id,
                    Conn {
                        stream,
                        peer,
                        state: State::Pending,
                        sealer: None,
                        reader: Some(handle),
                    },
                );
                self.pending.insert(id);
            }
            Err(e) => {
                let _ = stream.shutdown(Shutdown::Both);
                self.count(peer, DropReason::ClosedEarly, format!("on accept: {e}"));
            }
        }
    }

    /// Counts a drop and reports the first few of each reason.
    fn count(&mut self, peer: SocketAddr, reason: DropReason, detail: String) {
        let n = self.tally.add(reason);
        if n <= DROP_EVENTS_PER_REASON {
            let detail = if n == DROP_EVENTS_PER_REASON {
                format!("{detail} (later drops of this kind are counted, not reported)")
            } else {
                detail
            };
            (self.on_event)(ServeEvent::Dropped {
                peer,
                reason,
                detail,
            });
        }
    }

    /// Drops a connection not admitted: counts it, shuts it. Its reader
    /// ends on its own and is joined then.
    fn drop_conn(&mut self, id: ConnId, reason: DropReason, detail: String) {
        let Some(conn) = self.conns.get(&id) else {
            return;
        };
        if conn.state == State::Done {
            return;
        }
        let peer = conn.peer;
        self.count(peer, reason, detail);
        self.close(id);
    }

    /// Shuts a connection not admitted; its reader ends on its own.
    fn close(&mut self, id: ConnId) {
        self.pending.remove(&id);
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.state = State::Done;
            let _ = conn.stream.shutdown(Shutdown::Both);
        }
    }

    fn hello(&mut self, id: ConnId, rank: u32, size: u32, sealer: Sealer) -> Step {
        let Some(conn) = self.conns.get_mut(&id) else {
            return Ok(None);
        };
        if conn.state != State::Pending {
            return Ok(None); // dropped meanwhile (crowded out)
        }
        self.pending.remove(&id);
        conn.sealer = Some(sealer);
        let _ = conn.stream.set_write_timeout(Some(self.limits.timeout));
        let peer = conn.peer;
        let n = self.limits.size;
        let refusal = if size != n {
            Some((
                DropReason::WrongSize,
                format!(
                    "rank {rank} was started for a job of {size} ranks, the rendezvous serves {n}"
                ),
            ))
        } else if rank >= n {
            Some((
                DropReason::RankOutOfRange,
                format!("rank {rank} is not a rank of this job (0 to {})", n - 1),
            ))
        } else if let Some((_, holder)) = self.by_rank[rank as usize] {
            Some((
                DropReason::RankTaken,
                format!("rank {rank} is already held by {holder}"),
            ))
        } else {
            None
        };
        if let Some((reason, message)) = refusal {
            // Counted before the client can see the refusal.
            self.count(peer, reason, message.clone());
            self.refusals
                .insert(reason, format!("{message} (from {peer})"));
            self.send(
                id,
                &Frame::Refused {
                    code: reason as u16,
                    message,
                },
            );
            self.close(id);
            return Ok(None);
        }
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.state = State::Admitted(rank);
        }
        self.by_rank[rank as usize] = Some((id, peer));
        self.connected += 1;
        // A failed write shows up as the reader's end of stream.
        self.send(id, &Frame::Welcome { size: n });
        (self.on_event)(ServeEvent::Connected { rank, peer });
        if self.connected == n {
            self.all_connected = true;
            if self.arrived > 0 {
                // The round's clock starts when its last member can join it.
                self.round_started = Some(Instant::now());
            }
            (self.on_event)(ServeEvent::AllConnected);
        }
        Ok(None)
    }

    /// Seals and writes `frame` to an authenticated connection; a failed
    /// write shows up as that reader's end of stream.
    fn send(&mut self, id: ConnId, frame: &Frame) {
        if let Ok(payload) = frame.payload() {
            self.send_payload(id, &payload);
        }
    }

    fn send_payload(&mut self, id: ConnId, payload: &[u8]) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if let Some(bytes) = conn
            .sealer
            .as_mut()
            .and_then(|s| s.seal_payload(payload).ok())
        {
            let _ = wire::write_bytes(&mut conn.stream, &bytes);
        }
    }

    fn frame(&mut self, rank: Rank, frame: Frame) -> Step {
        match frame {
            Frame::Contribute { round, data } => self.contribute(rank, round, data),
            other => Err(AbortReason::Protocol {
                rank,
                what: format!("sent an unexpected {}", other.name()),
            }
            .into()),
        }
    }

    fn contribute(&mut self, rank: Rank, round: u32, data: Vec<u8>) -> Step {
        if round != self.round {
            return Err(AbortReason::Protocol {
                rank,
                what: format!("contributed to round {round} during round {}", self.round),
            }
            .into());
        }
        if self.slots[rank as usize].is_some() {
            return Err(AbortReason::Protocol {
                rank,
                what: format!("contributed twice to round {round}"),
            }
            .into());
        }
        if data.len() > MAX_CONTRIBUTION {
            return Err(AbortReason::TooLarge {
                rank,
                len: data.len() as u64,
            }
            .into());
        }
        if let Some(gone) = self.closed.iter().position(|&c| c) {
            return Err(AbortReason::Disconnected {
                rank: gone as Rank,
                round,
            }
            .into());
        }
        self.slots[rank as usize] = Some(data);
        self.arrived += 1;
        if self.arrived == 1 && self.all_connected {
            self.round_started = Some(Instant::now());
        }
        if self.arrived < self.limits.size {
            return Ok(None);
        }
        let data: Vec<Vec<u8>> = self
            .slots
            .iter_mut()
            .map(|s| s.take().unwrap_or_default())
            .collect();
        let bytes_total = data.iter().map(Vec::len).sum();
        let payload =
            Frame::Result { round, data }
                .payload()
                .map_err(|e| AbortReason::Protocol {
                    rank,
                    what: e.to_string(),
                })?;
        let ids: Vec<ConnId> = self.by_rank.iter().flatten().map(|(id, _)| *id).collect();
        for id in ids {
            self.send_payload(id, &payload);
        }
        (self.on_event)(ServeEvent::RoundComplete {
            round,
            bytes: bytes_total,
        });
        self.round += 1;
        self.arrived = 0;
        self.round_started = None;
        Ok(None)
    }

    fn ended(&mut self, id: ConnId, end: End) -> Step {
        let Some(conn) = self.conns.get_mut(&id) else {
            return Ok(None);
        };
        if let Some(reader) = conn.reader.take() {
            // It sent its last message: it is returning.
            let _ = reader.join();
        }
        let state = conn.state;
        match (state, end) {
            (State::Admitted(rank), End::Closed) => {
                self.conns.remove(&id);
                self.rank_closed(rank)
            }
            // A rank that broke the protocol: its connection stays, to be
            // told why the job is aborted.
            (State::Admitted(rank), End::Oversized(len)) => Err(AbortReason::TooLarge {
                rank,
                // The payload holds the kind and round (5 bytes) and the
                // tag around the data.
                len: len.saturating_sub(5 + TAG_LEN as u64),
            }
            .into()),
            (State::Admitted(rank), End::Broke(what) | End::Dropped(_, what)) => {
                Err(AbortReason::Protocol { rank, what }.into())
            }
            (State::Pending, end) => {
                let (reason, detail) = match end {
                    End::Dropped(reason, detail) => (reason, detail),
                    _ => (DropReason::ClosedEarly, "closed before its HELLO".into()),
                };
                if let Some(conn) = self.conns.remove(&id) {
                    self.pending.remove(&id);
                    self.deny(conn, reason, detail);
                }
                Ok(None)
            }
            (State::Done, _) => {
                self.conns.remove(&id);
                Ok(None)
            }
        }
    }

    /// Counts a connection dropped before authentication, tells it why
    /// when the reason is one a genuine client can act on (a bad proof, a
    /// version), and closes it.
    fn deny(&mut self, mut conn: Conn, reason: DropReason, detail: String) {
        let denial = match reason {
            DropReason::BadProof => Some(
                "this client did not prove it holds the job secret \
                 (is FFD_SECRET_FILE the file the rendezvous was given?)"
                    .to_owned(),
            ),
            DropReason::Version => Some(format!(
                "the rendezvous speaks rendezvous protocol version {VERSION}"
            )),
            _ => None,
        };
        // Counted before the client can see the denial.
        self.count(conn.peer, reason, detail);
        if let Some(message) = denial {
            let denied = Frame::Denied {
                code: reason as u16,
                message,
            };
            if let Ok(bytes) = denied.encode() {
                let _ = wire::write_bytes(&mut conn.stream, &bytes);
            }
        }
        let _ = conn.stream.shutdown(Shutdown::Both);
    }

    fn rank_closed(&mut self, rank: Rank) -> Step {
        self.closed[rank as usize] = true;
        (self.on_event)(ServeEvent::Closed { rank });
        if self.arrived > 0 {
            return Err(AbortReason::Disconnected {
                rank,
                round: self.round,
            }
            .into());
        }
        if self.all_connected && self.closed.iter().all(|&c| c) {
            return Ok(Some(ServeReport {
                rounds: self.round - 1,
                dropped: self.tally.get(),
            }));
        }
        Ok(None)
    }

    /// Tells every admitted rank still connected why the job is aborted.
    pub(super) fn abort_all(&mut self, reason: &AbortReason) {
        let frame = Frame::Abort {
            code: reason.code() as u16,
            message: reason.to_string(),
        };
        let ids: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(c.state, State::Admitted(_)))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.send(id, &frame);
        }
    }

    /// Shuts every connection and joins every reader (the caller has set
    /// the stop flag, so a reader also ends within [`wire::STOP_POLL`]).
    pub(super) fn shut_down(&mut self) {
        for (_, mut conn) in self.conns.drain() {
            let _ = conn.stream.shutdown(Shutdown::Both);
            if let Some(reader) = conn.reader.take() {
                let _ = reader.join();
            }
        }
    }
}
