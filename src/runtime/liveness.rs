//! The liveness port (`FFD_LIVENESS`, `docs/design.md` §4.5 "In-band
//! detection"): a crash on a host where no other rank of the job sees it
//! exit, found when the kernel closes the dead process's sockets instead
//! of at the next heartbeat write or the timeout.
//!
//! Owns: this rank's listener (accept, greet with one byte, keep the
//! connection until its peer closes it; a leave says so first), the
//! observer's one connection to its fabric emitter's listener (the
//! *watch*), and the *probe*: a fresh connection to the emitter's port
//! once the watch ends without a leave, whose answer
//! ([`ffd_protocol::liveness::evidence`]) the Engine gets as an in-band
//! error. Must not: take anything but a refusal for proof, connect to
//! the provider's own port (a stranger's bytes there can crash the tcp
//! provider, `fabric/guard.rs`), or make a system call on a turn with no
//! event (every socket sits in one epoll set the thread waits on).
//!
//! Why a probe and not the end of the watch itself: the end says the
//! connection closed, which a process could do while it runs; a refusal
//! says that nobody listens at the port any more, which (the listener
//! being open for the detector's whole life) only its process's end does.
//! A stopped or starved process still holds its listener, whose kernel
//! completes the handshake without it: the probe then gets no greeting
//! and gives no verdict, and the timeout judges as before.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use crate::fabric::{HANG_UP, READABLE, SocketSet, WRITABLE, connect_started};
use crate::protocol::Rank;
use crate::protocol::liveness::ProbeAnswer;

use super::stats::LivenessCounters;

/// The greeting a listener writes on each connection it accepts.
const GREETING: u8 = b'A';
/// What a leaving rank writes on each connection it holds before it
/// closes them: its end is no crash.
const LEAVING: u8 = b'L';
/// Connections a listener holds at once (its observer's watch, a probe or
/// two, a stale watch closing): beyond, a new one is closed at once.
const MAX_HELD: usize = 16;
/// A probe whose connection was reset before its greeting (the listener
/// closed with it still queued) is made again, at most this many times.
const PROBE_TRIES: u8 = 3;

const WAKE: u64 = 0;
const LISTENER: u64 = 1;
const WATCH: u64 = 2;
const PROBE: u64 = 3;
const FIRST_HELD: u64 = 16;

/// What start-up hands the progress thread.
pub(super) struct LivenessParts {
    pub listener: TcpListener,
    /// `ports[r]`: rank r's liveness address, if it has one.
    pub ports: Vec<Option<SocketAddr>>,
    /// The job's host addresses: the only sources the listener keeps.
    pub allowed: Vec<IpAddr>,
    /// A probe without an answer this long gives no verdict.
    pub probe_wait: Duration,
}

struct Conn {
    rank: Rank,
    stream: TcpStream,
    connected: bool,
}

/// What a turn found: a probe's answer about a rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Answer {
    pub rank: Rank,
    pub answer: ProbeAnswer,
    /// How the watch ended before the probe, for the log.
    pub after: &'static str,
}

pub(super) struct Liveness {
    set: SocketSet,
    listener: TcpListener,
    ports: Vec<Option<SocketAddr>>,
    allowed: Vec<IpAddr>,
    probe_wait: Duration,
    held: Vec<(u64, TcpStream)>,
    next_token: u64,
    watch: Option<Conn>,
    /// The rank the watch is for, also after it ended or failed (so that
    /// it is not opened again to the same emitter), and when to try again.
    watching: Option<(Rank, Option<Instant>)>,
    probe: Option<(Conn, Instant, u8, &'static str)>,
    leaving: bool,
    events: Vec<(u64, u32)>,
    pub counters: LivenessCounters,
}

impl Liveness {
    /// The set holds `wake` (the thread's wake fd, or the exits' set that
    /// holds it) and the listener; its fd is what the thread waits on.
    pub(super) fn new(parts: LivenessParts, wake: BorrowedFd<'_>) -> std::io::Result<Self> {
        let set = SocketSet::new()?;
        set.add(wake, WAKE, READABLE)?;
        set.add(parts.listener.as_fd(), LISTENER, READABLE)?;
        Ok(Liveness {
            set,
            listener: parts.listener,
            ports: parts.ports,
            allowed: parts.allowed,
            probe_wait: parts.probe_wait,
            held: Vec::new(),
            next_token: FIRST_HELD,
            watch: None,
            watching: None,
            probe: None,
            leaving: false,
            events: Vec::new(),
            counters: LivenessCounters::default(),
        })
    }

    /// The fd to wait on: readable on a wake-up, an exit, or a socket event.
    pub(super) fn wait_fd(&self) -> BorrowedFd<'_> {
        self.set.as_fd()
    }

    /// Watch `emitter` (the Engine's fabric emitter; `None`: nobody). A
    /// change closes the old watch; the same emitter is not watched again
    /// after its watch ended, until `retry` passed.
    pub(super) fn watch(
        &mut self,
        emitter: Option<Rank>,
        now: impl Fn() -> Instant,
        retry: Duration,
    ) {
        let same = match (self.watching, emitter) {
            (Some((w, again)), Some(e)) if w == e => {
                self.watch.is_some() || again.is_none_or(|t| now() < t)
            }
            (None, None) => true,
            _ => false,
        };
        if same || self.leaving {
            return;
        }
        self.close_watch();
        self.watching = None;
        let Some(e) = emitter else {
            return;
        };
        self.watching = Some((e, Some(now() + retry)));
        let Some(addr) = self.ports.get(e as usize).copied().flatten() else {
            return;
        };
        if let Ok(stream) = connect_started(addr) {
            if self
                .set
                .add(stream.as_fd(), WATCH, WRITABLE | READABLE | HANG_UP)
                .is_ok()
            {
                self.counters.watches += 1;
                self.watch = Some(Conn {
                    rank: e,
                    stream,
                    connected: false,
                });
            }
        }
    }

    fn close_watch(&mut self) {
        if let Some(w) = self.watch.take() {
            self.set.remove(w.stream.as_fd());
        }
    }

    fn start_probe(&mut self, rank: Rank, tries: u8, after: &'static str) -> Option<Answer> {
        if let Some((p, ..)) = self.probe.take() {
            self.set.remove(p.stream.as_fd());
        }
        let addr = self.ports.get(rank as usize).copied().flatten()?;
        self.counters.probes += 1;
        match connect_started(addr) {
            Ok(stream) => {
                if self
                    .set
                    .add(stream.as_fd(), PROBE, WRITABLE | READABLE | HANG_UP)
                    .is_err()
                {
                    return None;
                }
                let conn = Conn {
                    rank,
                    stream,
                    connected: false,
                };
                self.probe = Some((conn, Instant::now(), tries, after));
                None
            }
            Err(e) => Some(self.answered(rank, connect_answer(&e), after)),
        }
    }

    fn answered(&mut self, rank: Rank, answer: ProbeAnswer, after: &'static str) -> Answer {
        match answer {
            ProbeAnswer::Refused => self.counters.refused += 1,
            ProbeAnswer::Greeted => self.counters.greeted += 1,
            ProbeAnswer::NoAnswer => self.counters.unanswered += 1,
        }
        Answer {
            rank,
            answer,
            after,
        }
    }

    /// When a probe under way runs out of time (for the thread's sleep).
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.probe.as_ref().map(|(_, at, ..)| *at + self.probe_wait)
    }

    /// Handles what is ready on the sockets (call after a wake-up) and a
    /// probe's time running out; returns the probes' answers.
    pub(super) fn take(&mut self, woken: bool, out: &mut Vec<Answer>) {
        if woken {
            let mut events = std::mem::take(&mut self.events);
            events.clear();
            self.set.ready(&mut events);
            for &(token, ev) in &events {
                match token {
                    WAKE => {}
                    LISTENER => self.accept(),
                    WATCH => self.on_watch(ev, out),
                    PROBE => self.on_probe(ev, out),
                    t => self.on_held(t),
                }
            }
            self.events = events;
        }
        if let Some((p, at, _, after)) = &self.probe {
            if at.elapsed() >= self.probe_wait {
                let (rank, after) = (p.rank, *after);
                if let Some((p, ..)) = self.probe.take() {
                    self.set.remove(p.stream.as_fd());
                }
                out.push(self.answered(rank, ProbeAnswer::NoAnswer, after));
            }
        }
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, from)) => {
                    let ours = self.allowed.contains(&from.ip().to_canonical());
                    if !ours || self.held.len() >= MAX_HELD || self.leaving {
                        self.counters.turned_away += 1;
                        continue;
                    }
                    let _ = stream.set_nonblocking(true);
                    let _ = (&stream).write(&[GREETING]);
                    let token = self.next_token;
                    self.next_token += 1;
                    if self
                        .set
                        .add(stream.as_fd(), token, READABLE | HANG_UP)
                        .is_ok()
                    {
                        self.counters.accepted += 1;
                        self.held.push((token, stream));
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }

    /// A held connection: read what its peer sent; its end closes it.
    fn on_held(&mut self, token: u64) {
        let Some(i) = self.held.iter().position(|(t, _)| *t == token) else {
            return;
        };
        let mut sink = [0u8; 64];
        let ended = loop {
            match (&self.held[i].1).read(&mut sink) {
                Ok(0) => break true,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break true,
            }
        };
        if ended {
            let (_, stream) = self.held.swap_remove(i);
            self.set.remove(stream.as_fd());
        }
    }

    fn on_watch(&mut self, ev: u32, out: &mut Vec<Answer>) {
        let Some(w) = self.watch.as_mut() else {
            return;
        };
        let rank = w.rank;
        if !w.connected {
            if ev & (WRITABLE | HANG_UP) == 0 {
                return;
            }
            match w.stream.take_error() {
                Ok(None) => {
                    w.connected = true;
                    let _ = self.set.modify(w.stream.as_fd(), WATCH, READABLE | HANG_UP);
                }
                Ok(Some(e)) | Err(e) => {
                    // The watch's own connection is a probe too.
                    self.close_watch();
                    let answer = connect_answer(&e);
                    if answer != ProbeAnswer::NoAnswer {
                        out.push(self.answered(rank, answer, "the watch's connection"));
                    }
                }
            }
            return;
        }
        let mut buf = [0u8; 64];
        let (ended, how) = loop {
            match (&w.stream).read(&mut buf) {
                Ok(0) => break (true, "the watch ended"),
                Ok(n) => {
                    if buf[..n].contains(&LEAVING) {
                        break (true, "leaving");
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break (false, ""),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break (true, "the watch was reset"),
            }
        };
        if !ended {
            return;
        }
        self.close_watch();
        if how != "leaving" {
            self.counters.watches_ended += 1;
            if let Some(a) = self.start_probe(rank, 1, how) {
                out.push(a);
            }
        }
    }

    fn on_probe(&mut self, ev: u32, out: &mut Vec<Answer>) {
        let Some((p, _, tries, after)) = self.probe.as_mut() else {
            return;
        };
        let (rank, tries, after) = (p.rank, *tries, *after);
        let answer = if !p.connected {
            if ev & (WRITABLE | HANG_UP) == 0 {
                return;
            }
            match p.stream.take_error() {
                Ok(None) => {
                    p.connected = true;
                    let _ = self.set.modify(p.stream.as_fd(), PROBE, READABLE | HANG_UP);
                    return;
                }
                Ok(Some(e)) | Err(e) => Some(connect_answer(&e)),
            }
        } else {
            let mut b = [0u8; 1];
            match (&p.stream).read(&mut b) {
                Ok(1) if b[0] == GREETING => Some(ProbeAnswer::Greeted),
                Ok(1) => return,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                    return;
                }
                // Closed before its greeting: the listener closed with
                // the connection still queued. Ask again: a listener gone
                // refuses the next one.
                _ => None,
            }
        };
        if let Some((p, ..)) = self.probe.take() {
            self.set.remove(p.stream.as_fd());
        }
        match answer {
            Some(a) => out.push(self.answered(rank, a, after)),
            None if tries < PROBE_TRIES => {
                if let Some(a) = self.start_probe(rank, tries + 1, after) {
                    out.push(a);
                }
            }
            None => out.push(self.answered(rank, ProbeAnswer::NoAnswer, after)),
        }
    }

    /// This rank leaves: every connection it holds hears so before it
    /// closes (its observer does not probe a clean end), and no new one
    /// is kept.
    pub(super) fn leave(&mut self) {
        self.leaving = true;
        for (_, stream) in &self.held {
            let _ = (&*stream).write(&[LEAVING]);
        }
        self.close_watch();
    }
}

/// A connection's error as a probe's answer: a refusal, or nothing.
fn connect_answer(e: &std::io::Error) -> ProbeAnswer {
    if e.raw_os_error() == Some(libc::ECONNREFUSED) {
        ProbeAnswer::Refused
    } else {
        ProbeAnswer::NoAnswer
    }
}
