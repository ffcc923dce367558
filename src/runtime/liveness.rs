//! The liveness port (`FFD_LIVENESS`, `docs/design.md`
//! §4.5 "In-band detection"): a crash on a host where no other rank of the job sees it
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
    /// Why a probe got no answer, for the log (empty otherwise).
    pub why: &'static str,
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
    /// it is not opened again to the same emitter at once), and when to
    /// try again (`None`: it has not ended).
    watching: Option<(Rank, Option<Instant>)>,
    probe: Option<(Conn, Instant, u8, &'static str)>,
    /// How long after a watch ends its emitter is watched again.
    retry: Duration,
    leaving: bool,
    /// When the sockets were last read.
    read_at: Instant,
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
            retry: Duration::from_secs(1),
            leaving: false,
            read_at: Instant::now(),
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
        self.watching = Some((e, None));
        self.retry = retry;
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

    /// Closes the watch; the same emitter is watched again only after the
    /// retry interval (a live one's port answered, or failed to).
    fn close_watch(&mut self) {
        if let Some(w) = self.watch.take() {
            self.set.remove(w.stream.as_fd());
            if let Some((r, again)) = self.watching.as_mut() {
                if *r == w.rank {
                    *again = Some(Instant::now() + self.retry);
                }
            }
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
            Err(e) => {
                let answer = connect_answer(&e).unwrap_or(ProbeAnswer::NoAnswer);
                Some(self.answered(rank, answer, after))
            }
        }
    }

    fn answered(&mut self, rank: Rank, answer: ProbeAnswer, after: &'static str) -> Answer {
        let why = match answer {
            ProbeAnswer::NoAnswer => "the connection failed without a refusal",
            _ => "",
        };
        self.answered_because(rank, answer, after, why)
    }

    fn answered_because(
        &mut self,
        rank: Rank,
        answer: ProbeAnswer,
        after: &'static str,
        why: &'static str,
    ) -> Answer {
        match answer {
            ProbeAnswer::Refused => self.counters.refused += 1,
            ProbeAnswer::Greeted => self.counters.greeted += 1,
            ProbeAnswer::NoAnswer => self.counters.unanswered += 1,
        }
        Answer {
            rank,
            answer,
            after,
            why,
        }
    }

    /// How long since the sockets were last read.
    pub(super) fn read_since(&self) -> Duration {
        self.read_at.elapsed()
    }

    /// When a probe under way runs out of time (for the thread's sleep).
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.probe.as_ref().map(|(_, at, ..)| *at + self.probe_wait)
    }

    /// Handles what is ready on the sockets (call after a wake-up) and a
    /// probe's time running out; returns the probes' answers. A probe's
    /// time is judged only after its socket was read: a turn that did not
    /// look at the sockets (`woken` false) reads them when the probe is
    /// due, so a refusal that came meanwhile is not taken for silence.
    pub(super) fn take(&mut self, woken: bool, out: &mut Vec<Answer>) {
        // One reading of the clock for both checks: a probe that came due
        // after the first is not judged before its socket was read.
        let now = Instant::now();
        let due = self
            .probe
            .as_ref()
            .is_some_and(|(_, at, ..)| now.duration_since(*at) >= self.probe_wait);
        if woken || due {
            self.read_at = now;
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
            if now.duration_since(*at) >= self.probe_wait {
                let (rank, after) = (p.rank, *after);
                if let Some((p, ..)) = self.probe.take() {
                    self.set.remove(p.stream.as_fd());
                }
                out.push(self.answered_because(
                    rank,
                    ProbeAnswer::NoAnswer,
                    after,
                    "no answer within the probe's wait",
                ));
            }
        }
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, from)) => {
                    let ours = self.allowed.contains(&from.ip().to_canonical());
                    if !ours || self.held.len() >= MAX_HELD {
                        self.counters.turned_away += 1;
                        continue;
                    }
                    if self.leaving {
                        // Its end is no crash: say so, and close.
                        let _ = (&stream).write(&[GREETING, LEAVING]);
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
        let how = if w.connected {
            let mut buf = [0u8; 64];
            loop {
                match (&w.stream).read(&mut buf) {
                    Ok(0) => break "the watch ended",
                    Ok(n) => {
                        if buf[..n].contains(&LEAVING) {
                            break "leaving";
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => break "the watch was reset",
                }
            }
        } else {
            if ev & (WRITABLE | HANG_UP) == 0 {
                return;
            }
            match w.stream.take_error() {
                Ok(None) => {
                    w.connected = true;
                    let _ = self.set.modify(w.stream.as_fd(), WATCH, READABLE | HANG_UP);
                    return;
                }
                // The watch's own connection is a probe too; reset once its
                // handshake was done, it ended as a watch does.
                Ok(Some(e)) | Err(e) => match connect_answer(&e) {
                    None => "the watch was reset",
                    Some(answer) => {
                        self.close_watch();
                        if answer != ProbeAnswer::NoAnswer {
                            out.push(self.answered(rank, answer, "the watch's connection"));
                        }
                        return;
                    }
                },
            }
        };
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
                // A reset asks again, as a close before the greeting below.
                Ok(Some(e)) | Err(e) => connect_answer(&e),
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
            None => out.push(self.answered_because(
                rank,
                ProbeAnswer::NoAnswer,
                after,
                "closed or reset before its greeting at every try",
            )),
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

/// A connection's error as a probe's answer: a refusal, or nothing; `None`
/// for a reset once its handshake was done (by the backlog of a listener
/// still open): the listener closed with the connection queued, so ask
/// again, as for a close before the greeting (1 probe in 6 of `ffd run -n
/// 8 --netns 8`'s kills met it; judged no answer, the crash waited for the
/// fabric).
fn connect_answer(e: &std::io::Error) -> Option<ProbeAnswer> {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => Some(ProbeAnswer::Refused),
        Some(libc::ECONNRESET) => None,
        _ => Some(ProbeAnswer::NoAnswer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::net::Ipv4Addr;
    use std::os::unix::net::UnixStream;
    use std::process::{Child, Command, Stdio};

    const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    /// The listening process: killed and reaped when the test ends, however
    /// it ends (a failed assertion too).
    struct Listener(Child);

    impl Listener {
        /// Kills and reaps it now: its kernel closes its sockets.
        fn end(&mut self) {
            let _ = self.0.kill();
            self.0.wait().expect("reaped");
        }
    }

    impl Drop for Listener {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A process that listens on a port of loopback and never accepts:
    /// what a stopped or starved rank's kernel shows a prober. Returns it
    /// and its address.
    fn listener_that_never_accepts() -> Option<(Listener, SocketAddr)> {
        let script = "import socket,sys,time\n\
                      s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(8)\n\
                      print(s.getsockname()[1]); sys.stdout.flush(); time.sleep(60)";
        let mut child = Listener(
            Command::new("python3")
                .args(["-c", script])
                .stdout(Stdio::piped())
                .spawn()
                .ok()?,
        );
        let mut line = String::new();
        std::io::BufReader::new(child.0.stdout.take()?)
            .read_line(&mut line)
            .ok()?;
        let port: u16 = line.trim().parse().ok()?;
        Some((child, SocketAddr::new(LO, port)))
    }

    /// [`listener_that_never_accepts`], stopped (SIGSTOP): its kernel still
    /// completes a handshake from the backlog, nobody greets.
    fn stopped_listener() -> Option<(Listener, SocketAddr)> {
        let Some((child, at)) = listener_that_never_accepts() else {
            eprintln!("skipped: python3 is not available here");
            return None;
        };
        let pid = child.0.id().to_string();
        let stopped = Command::new("kill").args(["-STOP", &pid]).status();
        assert!(stopped.is_ok_and(|s| s.success()));
        Some((child, at))
    }

    /// A `Liveness` whose rank 0 is at `peer`, and its wake socket.
    fn liveness(peer: SocketAddr, wait: Duration) -> (Liveness, UnixStream) {
        let (wake, other) = UnixStream::pair().unwrap();
        let listener = TcpListener::bind((LO, 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let parts = LivenessParts {
            listener,
            ports: vec![Some(peer)],
            allowed: vec![LO],
            probe_wait: wait,
        };
        (Liveness::new(parts, wake.as_fd()).unwrap(), other)
    }

    /// Turns until an answer comes (each bounded by the probe's wait).
    fn answer_of(l: &mut Liveness) -> Answer {
        let mut out = Vec::new();
        let until = Instant::now() + Duration::from_secs(10);
        while out.is_empty() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
            l.take(true, &mut out);
        }
        out.pop().expect("an answer within the probe's wait")
    }

    #[test]
    fn a_stopped_process_is_not_refused_and_a_dead_one_is() {
        let Some((mut child, at)) = stopped_listener() else {
            return;
        };
        let wait = Duration::from_millis(200);
        let (mut l, _wake) = liveness(at, wait);
        // Stopped: its kernel completes the handshake, nobody greets.
        assert!(l.start_probe(0, 1, "a test").is_none());
        let a = answer_of(&mut l);
        assert_eq!(a.answer, ProbeAnswer::NoAnswer);
        assert_eq!(crate::protocol::liveness::evidence(a.answer), None);
        child.end();
        // Dead: nobody listens, its kernel refuses.
        let a = match l.start_probe(0, 1, "a test") {
            Some(a) => a,
            None => answer_of(&mut l),
        };
        assert_eq!(a.answer, ProbeAnswer::Refused);
        assert_eq!(l.counters.refused, 1);
        assert_eq!(l.counters.unanswered, 1);
    }

    /// A probe is read before it is judged silent: a turn that did not
    /// look at the sockets (`woken` false) and finds the probe due still
    /// takes the answer that came meanwhile. Here the prober connects to
    /// a stopped process (its kernel completes the handshake, nobody
    /// greets), which then dies before the probe's time is up: its
    /// queued connection is reset, the probe asks again and is refused.
    /// Judged on its time alone, the probe said NoAnswer.
    #[test]
    fn a_due_probe_is_read_before_it_is_judged_silent() {
        let Some((mut child, at)) = stopped_listener() else {
            return;
        };
        let wait = Duration::from_millis(300);
        let (mut l, _wake) = liveness(at, wait);
        assert!(l.start_probe(0, 1, "a test").is_none());
        let mut out = Vec::new();
        let connected = |l: &Liveness| l.probe.as_ref().is_some_and(|(p, ..)| p.connected);
        let until = Instant::now() + Duration::from_secs(10);
        while !connected(&l) {
            assert!(Instant::now() < until, "the handshake never completed");
            l.take(true, &mut out);
            assert!(out.is_empty(), "answered while stopped: {out:?}");
            std::thread::yield_now();
        }
        child.end();
        // The probe's time runs out before the thread looks again.
        std::thread::sleep(wait);
        l.take(false, &mut out);
        let a = match out.pop() {
            Some(a) => a,
            None => answer_of(&mut l),
        };
        assert_eq!(a.answer, ProbeAnswer::Refused, "{a:?}");
        assert_eq!(l.counters.unanswered, 0);
    }

    /// Waits (10 s at most) until `done`: a connection's handshake completed
    /// in the kernel, seen without reading its socket.
    fn until_handshaken(done: impl Fn() -> bool) {
        let until = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < until, "the handshake never completed");
            std::thread::yield_now();
        }
    }

    /// A probe whose handshake the listener's kernel completed, and which
    /// was reset (the listener died with it queued) before the prober's
    /// thread saw it connected, asks again and is refused: the reset comes
    /// as the connection's error, and it is no answer of a live process,
    /// only of a listener that closed. (Before, it was judged no answer,
    /// and the crash waited for the fabric: 40-50 ms.)
    #[test]
    fn a_probe_reset_before_it_was_seen_connected_asks_again() {
        let Some((mut child, at)) = stopped_listener() else {
            return;
        };
        let (mut l, _wake) = liveness(at, Duration::from_millis(300));
        assert!(l.start_probe(0, 1, "a test").is_none());
        // The kernel completes the handshake without the thread looking.
        until_handshaken(|| {
            l.probe
                .as_ref()
                .is_none_or(|(p, ..)| p.stream.peer_addr().is_ok())
        });
        child.end();
        let a = answer_of(&mut l);
        assert_eq!(a.answer, ProbeAnswer::Refused, "{a:?}");
        assert_eq!(l.counters.probes, 2, "asked again");
        assert_eq!(l.counters.unanswered, 0);
    }

    /// The same reset met by the watch's own connection (the emitter died
    /// while it was being watched anew): an end of the watch, probed.
    #[test]
    fn a_watch_reset_before_it_was_seen_connected_is_probed() {
        let Some((mut child, at)) = stopped_listener() else {
            return;
        };
        let (mut l, _wake) = liveness(at, Duration::from_millis(300));
        l.watch(Some(0), Instant::now, Duration::from_secs(1));
        until_handshaken(|| {
            l.watch
                .as_ref()
                .is_none_or(|w| w.stream.peer_addr().is_ok())
        });
        child.end();
        let a = answer_of(&mut l);
        assert_eq!(a.answer, ProbeAnswer::Refused, "{a:?}");
        assert_eq!(a.after, "the watch was reset");
        assert_eq!(l.counters.watches_ended, 1);
    }

    #[test]
    fn a_watch_that_ends_without_a_leave_probes_and_a_leave_does_not() {
        // The emitter: a Liveness of its own, rank 0 of the watcher's.
        let (wake_e, _e) = UnixStream::pair().unwrap();
        let listener = TcpListener::bind((LO, 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let at = listener.local_addr().unwrap();
        let mut emitter = Liveness::new(
            LivenessParts {
                listener,
                ports: vec![None],
                allowed: vec![LO],
                probe_wait: Duration::from_millis(200),
            },
            wake_e.as_fd(),
        )
        .unwrap();
        let (mut watcher, _w) = liveness(at, Duration::from_millis(200));
        let mut out = Vec::new();
        watcher.watch(Some(0), Instant::now, Duration::from_secs(1));
        for _ in 0..100 {
            emitter.take(true, &mut out);
            watcher.take(true, &mut out);
            if watcher.watch.as_ref().is_some_and(|w| w.connected) && !emitter.held.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(emitter.counters.accepted, 1);
        // A leave: the watcher hears it and does not probe.
        emitter.leave();
        for _ in 0..40 {
            watcher.take(true, &mut out);
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(watcher.watch.is_none());
        assert_eq!(watcher.counters.probes, 0);
        assert!(out.is_empty(), "{out:?}");
        // The emitter's process ends (its sockets close): a new watch
        // ends without a leave, and the probe is refused.
        let mut emitter2 = {
            let (wake2, _x) = UnixStream::pair().unwrap();
            let listener = TcpListener::bind((LO, 0)).unwrap();
            listener.set_nonblocking(true).unwrap();
            let at2 = listener.local_addr().unwrap();
            watcher.ports[0] = Some(at2);
            let l = Liveness::new(
                LivenessParts {
                    listener,
                    ports: vec![None],
                    allowed: vec![LO],
                    probe_wait: Duration::from_millis(200),
                },
                wake2.as_fd(),
            )
            .unwrap();
            (l, wake2)
        };
        watcher.watching = None;
        watcher.watch(Some(0), Instant::now, Duration::from_secs(1));
        for _ in 0..100 {
            emitter2.0.take(true, &mut out);
            watcher.take(true, &mut out);
            if watcher.watch.as_ref().is_some_and(|w| w.connected) && !emitter2.0.held.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(emitter2);
        let a = answer_of(&mut watcher);
        assert_eq!(a.answer, ProbeAnswer::Refused, "{a:?}");
        assert_eq!(watcher.counters.watches_ended, 1);
    }
}
