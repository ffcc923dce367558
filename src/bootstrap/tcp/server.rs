//! The rendezvous server's surface: binding, serving in place or on a
//! thread, its events, its drop counters, and the accepting thread.
//!
//! Owns: [`Rendezvous`] and [`RendezvousHandle`], the acceptor thread and
//! the end of a serve (every connection shut, every thread joined). Must
//! not: hold job state (the coordinator does), or leave a thread of its own
//! behind when `serve` returns (the acceptor is woken by a connection of
//! ours; if that connection cannot be made it is left blocked in
//! `accept`, holding nothing but the listener).
//!
//! Threads: one accepts connections, one per connection reads frames (see
//! `coordinator`), and the coordinator (the caller of `serve`) owns all
//! state, writes every frame, and enforces the deadlines. Readers and the
//! acceptor only forward what they see over one channel, so the
//! coordinator waits on a single `recv_timeout`.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::auth::{Challenges, RendezvousKey};
use super::coordinator::{Coordinator, Limits, Shared, ToCoordinator};
use super::{
    AbortReason, DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_MAX_UNAUTHENTICATED, DEFAULT_TIMEOUT,
    DropCounts, DropReason,
};
use crate::bootstrap::secret::JobSecret;
use crate::protocol::Rank;

/// What the server has seen, for whoever runs it (the CLI prints these).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServeEvent {
    /// A rank proved the job secret and was admitted.
    Connected { rank: Rank, peer: SocketAddr },
    /// Every rank has connected.
    AllConnected,
    /// Every rank contributed to this round and was sent the result.
    RoundComplete { round: u32, bytes: usize },
    /// A rank closed its connection.
    Closed { rank: Rank },
    /// A connection was dropped without being admitted (and counted). Only
    /// the first [`DROP_EVENTS_PER_REASON`] of each reason are reported;
    /// the counters ([`DropTally`]) count them all.
    Dropped {
        peer: SocketAddr,
        reason: DropReason,
        detail: String,
    },
}

/// How many [`ServeEvent::Dropped`] of one reason a serve reports.
pub const DROP_EVENTS_PER_REASON: u64 = 32;

/// How a successful rendezvous went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeReport {
    /// Rounds completed.
    pub rounds: u32,
    /// Connections dropped without being admitted.
    pub dropped: DropCounts,
}

/// Why `serve` failed. An abort was also sent to every admitted rank.
#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    #[error("the rendezvous aborted the job: {0}")]
    Aborted(#[from] AbortReason),
    #[error("the rendezvous failed: {0}")]
    Io(#[from] io::Error),
}

/// The drop counters of a serve, readable from any thread while it runs
/// and after.
#[derive(Clone, Debug, Default)]
pub struct DropTally(Arc<[AtomicU64; DropReason::ALL.len()]>);

impl DropTally {
    /// The counts now.
    pub fn get(&self) -> DropCounts {
        let mut counts = DropCounts::default();
        for reason in DropReason::ALL {
            counts.add_n(reason, self.0[reason as usize - 1].load(Ordering::Relaxed));
        }
        counts
    }

    /// Counts one drop; returns how many of this reason there are now.
    pub(super) fn add(&self, reason: DropReason) -> u64 {
        self.0[reason as usize - 1].fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Stops a serve from any thread ([`AbortReason::Stopped`] to every rank).
#[derive(Clone, Debug)]
pub struct RendezvousStopper(Sender<ToCoordinator>);

impl RendezvousStopper {
    pub fn stop(&self) {
        let _ = self.0.send(ToCoordinator::Stop);
    }
}

/// A bound rendezvous for `size` ranks that authenticates them with the
/// job secret; see [`Rendezvous::serve`].
pub struct Rendezvous {
    listener: TcpListener,
    size: u32,
    key: RendezvousKey,
    challenges: Challenges,
    timeout: Duration,
    handshake_timeout: Option<Duration>,
    max_unauthenticated: Option<u32>,
    tally: DropTally,
    tx: Sender<ToCoordinator>,
    rx: Receiver<ToCoordinator>,
}

impl Rendezvous {
    /// Listens on `addr` (port 0 picks a free port) for `size` ranks that
    /// hold `secret`, with the default timeout of 60 s.
    pub fn bind(addr: impl ToSocketAddrs, size: u32, secret: &JobSecret) -> io::Result<Rendezvous> {
        if size == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a rendezvous needs at least one rank",
            ));
        }
        let (tx, rx) = channel();
        Ok(Rendezvous {
            listener: TcpListener::bind(addr)?,
            size,
            key: RendezvousKey::new(secret),
            challenges: Challenges::new()?,
            timeout: DEFAULT_TIMEOUT,
            handshake_timeout: None,
            max_unauthenticated: None,
            tally: DropTally::default(),
            tx,
            rx,
        })
    }

    /// Bounds the wait for all ranks to connect, and for each round.
    pub fn timeout(mut self, timeout: Duration) -> Rendezvous {
        self.timeout = timeout;
        self
    }

    /// Bounds each connection's handshake, from accept to a HELLO that
    /// holds (default: the smaller of [`DEFAULT_HANDSHAKE_TIMEOUT`] and the
    /// timeout).
    pub fn handshake_timeout(mut self, bound: Duration) -> Rendezvous {
        self.handshake_timeout = Some(bound);
        self
    }

    /// Caps the connections held before they authenticate (default: the
    /// larger of [`DEFAULT_MAX_UNAUTHENTICATED`] and the job size; at least
    /// 1). At the cap, a new connection drops the oldest.
    pub fn max_unauthenticated(mut self, cap: u32) -> Rendezvous {
        self.max_unauthenticated = Some(cap.max(1));
        self
    }

    /// The address clients connect to (with the port chosen for port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The drop counters of this rendezvous.
    pub fn tally(&self) -> DropTally {
        self.tally.clone()
    }

    /// A handle that stops this rendezvous once it serves.
    pub fn stopper(&self) -> RendezvousStopper {
        RendezvousStopper(self.tx.clone())
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
        self.run(on_event)
    }

    /// Serves on a new thread; the handle reports events and can stop it.
    pub fn spawn(self) -> io::Result<RendezvousHandle> {
        let addr = self.local_addr()?;
        let (events_tx, events) = channel();
        let stopper = self.stopper();
        let tally = self.tally();
        let thread = thread::Builder::new()
            .name("ffd-rendezvous".into())
            .spawn(move || {
                self.run(move |e| {
                    let _ = events_tx.send(e);
                })
            })?;
        Ok(RendezvousHandle {
            addr,
            events,
            stopper,
            tally,
            thread,
        })
    }

    fn run(self, on_event: impl FnMut(ServeEvent)) -> Result<ServeReport, RendezvousError> {
        let local = self.listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let limits = Limits {
            size: self.size,
            timeout: self.timeout,
            handshake: self
                .handshake_timeout
                .unwrap_or(DEFAULT_HANDSHAKE_TIMEOUT.min(self.timeout)),
            max_unauthenticated: self
                .max_unauthenticated
                .unwrap_or(DEFAULT_MAX_UNAUTHENTICATED.max(self.size)),
        };
        let queued = Arc::new(AtomicUsize::new(0));
        let acceptor = {
            let accepting = Accepting {
                tx: self.tx.clone(),
                stop: Arc::clone(&stop),
                queued: Arc::clone(&queued),
                cap: limits.max_unauthenticated as usize,
                tally: self.tally.clone(),
            };
            let listener = self.listener;
            thread::Builder::new()
                .name("ffd-rdv-accept".into())
                .spawn(move || accepting.run(&listener))?
        };
        let shared = Shared {
            tally: self.tally,
            stop: Arc::clone(&stop),
            queued,
            tx: self.tx,
        };
        let mut c = Coordinator::new(
            limits,
            Arc::new(self.key),
            self.challenges,
            shared,
            on_event,
        );
        let result = c.serve(&self.rx);
        if let Err(RendezvousError::Aborted(reason)) = &result {
            c.abort_all(reason);
        }
        stop.store(true, Ordering::SeqCst);
        c.shut_down();
        // Wake the acceptor with a connection of our own; if that fails it
        // stays blocked in accept and is left behind rather than joined.
        if TcpStream::connect_timeout(&wake_addr(local), Duration::from_secs(1)).is_ok() {
            let _ = acceptor.join();
        }
        result
    }
}

/// A rendezvous serving on its own thread.
pub struct RendezvousHandle {
    addr: SocketAddr,
    events: Receiver<ServeEvent>,
    stopper: RendezvousStopper,
    tally: DropTally,
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

    /// Connections dropped so far, by reason.
    pub fn dropped(&self) -> DropCounts {
        self.tally.get()
    }

    /// Waits up to `timeout` for every rank to connect; false if they did
    /// not (or the server ended first). Consumes the events it reads.
    pub fn wait_all_connected(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.events.recv_timeout(left) {
                Ok(ServeEvent::AllConnected) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    }

    /// Aborts the job ([`AbortReason::Stopped`] to every rank).
    pub fn stop(&self) {
        self.stopper.stop();
    }

    /// Waits for the server to end and returns its result.
    pub fn join(self) -> Result<ServeReport, RendezvousError> {
        self.thread
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the rendezvous thread panicked").into()))
    }
}

/// The accepting thread's share of the serve.
struct Accepting {
    tx: Sender<ToCoordinator>,
    stop: Arc<AtomicBool>,
    /// Connections sent to the coordinator and not yet taken up by it.
    queued: Arc<AtomicUsize>,
    /// At most this many queued: a flood faster than the coordinator is
    /// dropped here, and its descriptors closed at once.
    cap: usize,
    tally: DropTally,
}

impl Accepting {
    fn run(self, listener: &TcpListener) {
        // Ends when stopped (woken by a connection) or when the coordinator
        // is gone.
        loop {
            let accepted = listener.accept();
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            match accepted {
                Ok((stream, _)) if self.queued.load(Ordering::SeqCst) >= self.cap => {
                    drop(stream);
                    self.tally.add(DropReason::Crowded);
                }
                Ok((stream, peer)) => {
                    self.queued.fetch_add(1, Ordering::SeqCst);
                    if self.tx.send(ToCoordinator::Accepted(stream, peer)).is_err() {
                        return;
                    }
                }
                // Out of descriptors or an aborted handshake: back off
                // briefly rather than spin.
                Err(_) => thread::sleep(Duration::from_millis(10)),
            }
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

    #[test]
    fn the_tally_counts_by_reason() {
        let tally = DropTally::default();
        assert_eq!(tally.add(DropReason::Silent), 1);
        assert_eq!(tally.add(DropReason::Silent), 2);
        tally.add(DropReason::BadProof);
        let counts = tally.get();
        assert_eq!(counts.get(DropReason::Silent), 2);
        assert_eq!(counts.total(), 3);
        assert_eq!(counts.to_string(), "3 connections (1 bad proof, 2 silent)");
        assert_eq!(DropCounts::default().to_string(), "0 connections");
    }
}
