//! The rendezvous server: relays allgather rounds among N TCP clients.
//!
//! Threads: one accepts connections, one per connection reads frames, and
//! the coordinator (the caller of `serve`) owns all state, writes every
//! reply, and enforces the deadlines. Readers and the acceptor only forward
//! what they see over one channel, so the coordinator waits on a single
//! `recv_timeout`.
//!
//! Deadlines: all N ranks must have said HELLO within the timeout of
//! `serve` starting; once a round has a contribution (and everyone is
//! connected) every rank must contribute within the timeout. Between rounds
//! the server waits for its clients without a bound: a job may keep its
//! connection for a final barrier. A client that goes away while a round
//! needs it aborts the job at once.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::wire::{self, Frame, WireError};
use super::{AbortReason, DEFAULT_TIMEOUT};
use crate::bootstrap::MAX_CONTRIBUTION;
use crate::protocol::Rank;

/// What the server has seen, for whoever runs it (the CLI prints these).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServeEvent {
    /// A rank said hello.
    Connected { rank: Rank, peer: SocketAddr },
    /// Every rank has connected.
    AllConnected,
    /// Every rank contributed to this round and was sent the result.
    RoundComplete { round: u32, bytes: usize },
    /// A rank closed its connection.
    Closed { rank: Rank },
    /// A connection that does not speak the rendezvous protocol was dropped.
    Stray { peer: SocketAddr, why: String },
}

/// How a successful rendezvous went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeReport {
    /// Rounds completed.
    pub rounds: u32,
}

/// Why `serve` failed. An abort was also sent to every connected client.
#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    #[error("the rendezvous aborted the job: {0}")]
    Aborted(#[from] AbortReason),
    #[error("the rendezvous failed: {0}")]
    Io(#[from] io::Error),
}

/// A bound rendezvous for `size` ranks; see [`Rendezvous::serve`].
pub struct Rendezvous {
    listener: TcpListener,
    size: u32,
    timeout: Duration,
}

enum Msg {
    Accepted(TcpStream, SocketAddr),
    Frame(usize, Vec<u8>),
    Gone(usize),
    /// A frame over the size limit (its length) ended the connection.
    Oversized(usize, u64),
    Stop,
}

impl Rendezvous {
    /// Listens on `addr` (port 0 picks a free port) for `size` ranks, with
    /// the default timeout of 60 s.
    pub fn bind(addr: impl ToSocketAddrs, size: u32) -> io::Result<Rendezvous> {
        if size == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a rendezvous needs at least one rank",
            ));
        }
        Ok(Rendezvous {
            listener: TcpListener::bind(addr)?,
            size,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// Bounds the wait for all ranks to connect, and for each round.
    pub fn timeout(mut self, timeout: Duration) -> Rendezvous {
        self.timeout = timeout;
        self
    }

    /// The address clients connect to (with the port chosen for port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until every rank has connected and closed (Ok), or aborts.
    pub fn serve(self) -> Result<ServeReport, RendezvousError> {
        self.serve_with(|_| {})
    }

    /// [`serve`](Self::serve), calling `on_event` on the serving thread for
    /// each [`ServeEvent`].
    pub fn serve_with(
        self,
        on_event: impl FnMut(ServeEvent),
    ) -> Result<ServeReport, RendezvousError> {
        let (tx, rx) = channel();
        self.run(tx, rx, on_event)
    }

    /// Serves on a new thread; the handle reports events and can stop it.
    pub fn spawn(self) -> io::Result<RendezvousHandle> {
        let addr = self.local_addr()?;
        let (tx, rx) = channel();
        let (events_tx, events) = channel();
        let stop = tx.clone();
        let thread = thread::Builder::new()
            .name("ffd-rendezvous".into())
            .spawn(move || {
                self.run(tx, rx, move |e| {
                    let _ = events_tx.send(e);
                })
            })?;
        Ok(RendezvousHandle {
            addr,
            events,
            stop,
            thread,
        })
    }

    fn run(
        self,
        tx: Sender<Msg>,
        rx: Receiver<Msg>,
        on_event: impl FnMut(ServeEvent),
    ) -> Result<ServeReport, RendezvousError> {
        let local = self.listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let (listener, tx, stop) = (self.listener, tx.clone(), Arc::clone(&stop));
            thread::Builder::new()
                .name("ffd-rdv-accept".into())
                .spawn(move || accept_loop(&listener, &tx, &stop))?
        };
        let mut c = Coordinator {
            size: self.size,
            timeout: self.timeout,
            tx,
            on_event,
            conns: Vec::new(),
            readers: Vec::new(),
            by_rank: vec![None; self.size as usize],
            closed: vec![false; self.size as usize],
            connected: 0,
            connect_deadline: Instant::now() + self.timeout,
            all_connected: false,
            round: 1,
            slots: vec![None; self.size as usize],
            arrived: 0,
            round_started: None,
        };
        let result = c.serve(&rx);
        if let Err(RendezvousError::Aborted(reason)) = &result {
            c.abort_all(reason);
        }
        c.shut_down();
        stop.store(true, Ordering::SeqCst);
        // Wake the acceptor with a connection of our own; if that fails it
        // stays blocked in accept and is left behind rather than joined.
        if TcpStream::connect_timeout(&wake_addr(local), Duration::from_secs(1)).is_ok() {
            let _ = acceptor.join();
        }
        for reader in c.readers.drain(..) {
            let _ = reader.join();
        }
        result
    }
}

/// A rendezvous serving on its own thread.
pub struct RendezvousHandle {
    addr: SocketAddr,
    events: Receiver<ServeEvent>,
    stop: Sender<Msg>,
    thread: JoinHandle<Result<ServeReport, RendezvousError>>,
}

impl RendezvousHandle {
    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's events, in order.
    pub fn events(&self) -> &Receiver<ServeEvent> {
        &self.events
    }

    /// Waits up to `timeout` for every rank to connect; false if they did
    /// not (or the server ended first). Consumes the events it reads.
    pub fn wait_all_connected(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(ServeEvent::AllConnected) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    }

    /// Aborts the job ([`AbortReason::Stopped`] to every client).
    pub fn stop(&self) {
        let _ = self.stop.send(Msg::Stop);
    }

    /// Waits for the server to end and returns its result.
    pub fn join(self) -> Result<ServeReport, RendezvousError> {
        self.thread
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the rendezvous thread panicked").into()))
    }
}

fn accept_loop(listener: &TcpListener, tx: &Sender<Msg>, stop: &AtomicBool) {
    // Ends when stopped (woken by a connection) or when the coordinator is gone.
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::SeqCst) {
            return;
        }
        match accepted {
            Ok((stream, peer)) => {
                if tx.send(Msg::Accepted(stream, peer)).is_err() {
                    return;
                }
            }
            // Out of descriptors or an aborted handshake: back off briefly
            // rather than spin.
            Err(_) => thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Where to connect to reach a listener bound to `local` (an unspecified
/// address is reached over loopback).
fn wake_addr(local: SocketAddr) -> SocketAddr {
    let ip = match local.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, local.port())
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    rank: Option<Rank>,
    open: bool,
}

struct Coordinator<E> {
    size: u32,
    timeout: Duration,
    tx: Sender<Msg>,
    on_event: E,
    conns: Vec<Conn>,
    readers: Vec<JoinHandle<()>>,
    by_rank: Vec<Option<usize>>,
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
}

type Step = Result<Option<ServeReport>, RendezvousError>;

impl<E: FnMut(ServeEvent)> Coordinator<E> {
    fn serve(&mut self, rx: &Receiver<Msg>) -> Result<ServeReport, RendezvousError> {
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
            self.round_started.map(|t| t + self.timeout)
        }
    }

    fn expired(&self) -> AbortReason {
        if !self.all_connected {
            AbortReason::NotConnected {
                missing: (0..self.size)
                    .filter(|&r| self.by_rank[r as usize].is_none())
                    .collect(),
                connected: self.connected,
                size: self.size,
                after: self.timeout,
            }
        } else {
            AbortReason::RoundTimeout {
                round: self.round,
                missing: (0..self.size)
                    .filter(|&r| self.slots[r as usize].is_none())
                    .collect(),
                after: self.timeout,
            }
        }
    }

    fn handle(&mut self, msg: Msg) -> Step {
        match msg {
            Msg::Accepted(stream, peer) => {
                self.accept(stream, peer);
                Ok(None)
            }
            Msg::Frame(id, payload) => self.frame(id, &payload),
            Msg::Gone(id) => self.gone(id),
            Msg::Oversized(id, len) => match self.conns[id].rank {
                // The frame holds the kind and round (5 bytes) before the data.
                Some(rank) => Err(AbortReason::TooLarge {
                    rank,
                    len: len.saturating_sub(5),
                }
                .into()),
                None => {
                    self.drop_stray(id, format!("sent a message of {len} bytes"));
                    Ok(None)
                }
            },
            Msg::Stop => Err(AbortReason::Stopped.into()),
        }
    }

    fn accept(&mut self, stream: TcpStream, peer: SocketAddr) {
        let _ = stream.set_nodelay(true);
        let _ = stream.set_write_timeout(Some(self.timeout));
        let Ok(mut reading) = stream.try_clone() else {
            return;
        };
        let id = self.conns.len();
        let tx = self.tx.clone();
        let spawned = thread::Builder::new()
            .name("ffd-rdv-read".into())
            .spawn(move || {
                // Ends at end of stream or error, which shutting the socket
                // down causes.
                let max = 1 + 4 + MAX_CONTRIBUTION;
                loop {
                    match wire::read_frame(&mut reading, None, max) {
                        Ok(payload) => {
                            if tx.send(Msg::Frame(id, payload)).is_err() {
                                return;
                            }
                        }
                        Err(wire::ReadError::TooLarge(len)) => {
                            let _ = tx.send(Msg::Oversized(id, len));
                            return;
                        }
                        Err(_) => {
                            let _ = tx.send(Msg::Gone(id));
                            return;
                        }
                    }
                }
            });
        if let Ok(handle) = spawned {
            self.readers.push(handle);
            self.conns.push(Conn {
                stream,
                peer,
                rank: None,
                open: true,
            });
        }
    }

    fn drop_stray(&mut self, id: usize, why: String) {
        let conn = &mut self.conns[id];
        let _ = conn.stream.shutdown(std::net::Shutdown::Both);
        conn.open = false;
        let peer = conn.peer;
        (self.on_event)(ServeEvent::Stray { peer, why });
    }

    fn frame(&mut self, id: usize, payload: &[u8]) -> Step {
        if !self.conns[id].open {
            return Ok(None);
        }
        let rank = self.conns[id].rank;
        let frame = match (Frame::decode(payload), rank) {
            (Ok(f), _) => f,
            (Err(e), None) => {
                self.drop_stray(id, e.to_string());
                return Ok(None);
            }
            (Err(e), Some(rank)) => {
                return Err(AbortReason::Protocol {
                    rank,
                    what: e.to_string(),
                }
                .into());
            }
        };
        match (frame, rank) {
            (
                Frame::Hello {
                    version,
                    rank: claimed,
                    size,
                },
                None,
            ) => self.hello(id, version, claimed, size),
            (Frame::Contribute { round, data }, Some(rank)) => self.contribute(rank, round, data),
            (other, None) => {
                self.drop_stray(id, format!("sent {} before HELLO", kind_name(&other)));
                Ok(None)
            }
            (other, Some(rank)) => Err(AbortReason::Protocol {
                rank,
                what: format!("sent an unexpected {}", kind_name(&other)),
            }
            .into()),
        }
    }

    fn hello(&mut self, id: usize, version: u16, rank: Rank, size: u32) -> Step {
        if version != wire::VERSION {
            return Err(AbortReason::VersionMismatch {
                rank,
                client: version,
                server: wire::VERSION,
            }
            .into());
        }
        if size != self.size {
            return Err(AbortReason::SizeMismatch {
                rank,
                claimed: size,
                size: self.size,
            }
            .into());
        }
        if rank >= self.size {
            return Err(AbortReason::RankOutOfRange {
                rank,
                size: self.size,
            }
            .into());
        }
        if let Some(first) = self.by_rank[rank as usize] {
            return Err(AbortReason::DuplicateRank {
                rank,
                first: self.conns[first].peer.to_string(),
                second: self.conns[id].peer.to_string(),
            }
            .into());
        }
        self.conns[id].rank = Some(rank);
        self.by_rank[rank as usize] = Some(id);
        self.connected += 1;
        let welcome = Frame::Welcome {
            version: wire::VERSION,
            size: self.size,
        };
        if let Ok(bytes) = welcome.encode() {
            // A failed write shows up as the reader's end of stream.
            let _ = wire::write_bytes(&mut self.conns[id].stream, &bytes);
        }
        let peer = self.conns[id].peer;
        (self.on_event)(ServeEvent::Connected { rank, peer });
        if self.connected == self.size {
            self.all_connected = true;
            if self.arrived > 0 {
                // The round's clock starts when its last member can join it.
                self.round_started = Some(Instant::now());
            }
            (self.on_event)(ServeEvent::AllConnected);
        }
        Ok(None)
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
        if self.arrived < self.size {
            return Ok(None);
        }
        let data: Vec<Vec<u8>> = self
            .slots
            .iter_mut()
            .map(|s| s.take().unwrap_or_default())
            .collect();
        let bytes_total = data.iter().map(Vec::len).sum();
        let bytes = Frame::Result { round, data }
            .encode()
            .map_err(|e: WireError| AbortReason::Protocol {
                rank,
                what: e.to_string(),
            })?;
        for id in self.by_rank.iter().flatten() {
            // A failed write shows up as that reader's end of stream.
            let _ = wire::write_bytes(&mut self.conns[*id].stream, &bytes);
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

    fn gone(&mut self, id: usize) -> Step {
        let conn = &mut self.conns[id];
        if !conn.open {
            return Ok(None);
        }
        conn.open = false;
        let Some(rank) = conn.rank else {
            return Ok(None);
        };
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
            }));
        }
        Ok(None)
    }

    /// Tells every open connection why the job is aborted.
    fn abort_all(&mut self, reason: &AbortReason) {
        let frame = Frame::Abort {
            code: reason.code() as u16,
            message: reason.to_string(),
        };
        let Ok(bytes) = frame.encode() else { return };
        for conn in self.conns.iter_mut().filter(|c| c.open) {
            let _ = wire::write_bytes(&mut conn.stream, &bytes);
        }
    }

    fn shut_down(&mut self) {
        for conn in &mut self.conns {
            let _ = conn.stream.shutdown(std::net::Shutdown::Both);
            conn.open = false;
        }
    }
}

fn kind_name(frame: &Frame) -> &'static str {
    match frame {
        Frame::Hello { .. } => "HELLO",
        Frame::Welcome { .. } => "WELCOME",
        Frame::Contribute { .. } => "CONTRIBUTE",
        Frame::Result { .. } => "RESULT",
        Frame::Abort { .. } => "ABORT",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unspecified_listeners_are_woken_over_loopback() {
        let v4: SocketAddr = "0.0.0.0:5000".parse().unwrap();
        assert_eq!(wake_addr(v4), "127.0.0.1:5000".parse().unwrap());
        let v6: SocketAddr = "[::]:5000".parse().unwrap();
        assert_eq!(wake_addr(v6), "[::1]:5000".parse().unwrap());
        let lo: SocketAddr = "127.0.0.2:7".parse().unwrap();
        assert_eq!(wake_addr(lo), lo);
    }
}
