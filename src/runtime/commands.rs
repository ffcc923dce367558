//! The embedder's commands to the progress thread: a queue whose receiver
//! never waits on a sender by spinning, and that holds a bounded number of
//! broadcasts.
//!
//! Owns: the commands sent and not yet taken, in the order they were sent;
//! how many of them are broadcasts, and the broadcasts refused because
//! [`MAX_QUEUED_BROADCASTS`] were queued; how many broadcasts a turn takes
//! ([`BROADCASTS_PER_TURN`]).
//! Must not: make the progress thread spin or yield while a sender is
//! mid-send. A sender on the progress thread's CPU at the normal policy,
//! preempted mid-send by that thread lifted or held at `SCHED_FIFO`
//! (design §6 "Runtime"), would never get the CPU back to finish. That was
//! `std::sync::mpsc`: its `try_recv` spins and yields for a message whose
//! write has begun (176.8 ms of a lifted thread's CPU seen, every rank of
//! that CPU silent and declared). Here a send is a push under a mutex: a
//! receiver that finds it held sleeps on the lock's futex after a bounded
//! spin, and the preempted sender runs, finishes and wakes it. Nor may it
//! refuse anything but a broadcast for load: an agreement, a leave, a stop
//! always go in.
//!
//! Backpressure (docs/design.md §4.9 "Payloads"): an embedder broadcasting
//! faster than the progress thread carries payloads out is refused
//! ([`Refused::Busy`]) once [`MAX_QUEUED_BROADCASTS`] wait, and a turn
//! takes at most [`BROADCASTS_PER_TURN`] of them, so that its beats and
//! its reads of the completion queue come between batches. Before, a turn
//! took everything queued: at 100,000 payloads a second and more the
//! origin's turns grew to 25–180 ms and its observer declared it.
//!
//! One sender (the [`super::Detector`]) and one receiver (the progress
//! thread). Either side sees the other gone: the receiver once the sender
//! is dropped and the queue is empty, the sender once the receiver is
//! dropped. Dropping either side takes no lock, so a `fork()`ed child
//! dropping its copy of the detector never waits on a lock the parent's
//! progress thread held when it forked.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::progress::Command;

/// The most broadcasts queued for the progress thread and not yet taken:
/// one more is refused ([`Refused::Busy`], `DetectorError::Busy`) and not
/// sent. Four turns of [`BROADCASTS_PER_TURN`] take them all, so an
/// agreement, a leave or a stop called behind a full queue is taken by
/// the fourth turn; it holds at most 1 MiB of payloads
/// ([`super::MAX_APP_PAYLOAD`] each). An embedder that paces its payloads
/// (they are for rare orders: revoke, reinit) never meets it. Measured on
/// this project's 2-CPU machine (docs/design.md §4.9 "Payloads": 3 ranks,
/// `FFD_LOCAL=off`, rank 0's embedder broadcasting unpaced for 3 s while
/// every rank agrees in a loop; 3 runs each): with 1024 the agreements
/// stalled behind the queue (27 to 39 decided in the 3 s), with 256 about
/// 1,850 were decided, with 128 2,500 to 4,200.
pub const MAX_QUEUED_BROADCASTS: usize = 128;

/// The most broadcasts one turn of the progress thread takes; the next
/// ones (and what is queued behind them, in order) are the next turn's,
/// which comes at once (no sleep while commands wait). Between batches
/// the turn reads the completion queue and the Engine beats and checks. A
/// broadcast costs the origin its own delivery and one send per overlay
/// link (at most 2·log2 N). Measured as for [`MAX_QUEUED_BROADCASTS`] (at
/// 128, 2 runs each): with 16, 32 or 64 alike, no rank declared in those
/// runs, the origin's latest wake-up 2.5 to 5.5 ms past its deadline,
/// 32,000 to 41,000 payloads a second carried (100,000 to 133,000 with
/// `FFD_LOCAL=auto`, about 8 µs each: a batch of 32 is a quarter of a
/// millisecond). 32 halves the turns of 16, and where a payload has ten
/// times the links a batch stays about a quarter of the default 10 ms
/// period.
pub(super) const BROADCASTS_PER_TURN: usize = 32;

/// A new queue: its sending and receiving sides, refusing broadcasts
/// beyond `max_broadcasts` queued ([`MAX_QUEUED_BROADCASTS`]).
pub(super) fn command_queue(max_broadcasts: usize) -> (CommandSender, CommandReceiver) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queued::default()),
        max_broadcasts,
        refused_busy: AtomicU64::new(0),
    });
    (
        CommandSender {
            shared: Arc::clone(&shared),
        },
        CommandReceiver { shared },
    )
}

/// What both sides hold.
struct Shared {
    queue: Mutex<Queued>,
    /// The limit of broadcasts queued.
    max_broadcasts: usize,
    /// Broadcasts refused at the limit: counted by the sender, read by the
    /// receiver for the stats.
    refused_busy: AtomicU64,
}

/// The commands queued, and how many of them are broadcasts.
#[derive(Default)]
struct Queued {
    commands: VecDeque<Command>,
    broadcasts: usize,
}

impl Queued {
    fn push(&mut self, command: Command) {
        if matches!(command, Command::Broadcast(_)) {
            self.broadcasts += 1;
        }
        self.commands.push_back(command);
    }

    fn pop(&mut self) -> Option<Command> {
        let command = self.commands.pop_front()?;
        if matches!(command, Command::Broadcast(_)) {
            self.broadcasts -= 1;
        }
        Some(command)
    }
}

/// Locks the queue; a panic while it was held (a push or a pop cannot
/// leave it half-done) does not make it unusable.
fn lock(shared: &Shared) -> MutexGuard<'_, Queued> {
    shared.queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether the other side of `shared` is gone: each side holds one count.
fn alone(shared: &Arc<Shared>) -> bool {
    Arc::strong_count(shared) == 1
}

/// The embedder's side (held by the detector).
pub(super) struct CommandSender {
    shared: Arc<Shared>,
}

/// Why [`CommandSender::send`] did not queue a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// The receiver is gone (the progress thread ended).
    Disconnected,
    /// A broadcast, and `queued` broadcasts (the limit) wait already.
    Busy { queued: usize },
}

impl CommandSender {
    pub(super) fn send(&self, command: Command) -> Result<(), Refused> {
        if alone(&self.shared) {
            return Err(Refused::Disconnected);
        }
        let mut queued = lock(&self.shared);
        if matches!(command, Command::Broadcast(_))
            && queued.broadcasts >= self.shared.max_broadcasts
        {
            let queued = queued.broadcasts;
            self.shared.refused_busy.fetch_add(1, Ordering::Relaxed);
            return Err(Refused::Busy { queued });
        }
        queued.push(command);
        Ok(())
    }
}

/// The progress thread's side.
pub(super) struct CommandReceiver {
    shared: Arc<Shared>,
}

/// The broadcasts one turn took, and the most it takes
/// ([`CommandReceiver::take`]).
pub(super) struct Turn {
    broadcasts: usize,
    max: usize,
}

impl Turn {
    pub(super) fn new(max: usize) -> Turn {
        Turn { broadcasts: 0, max }
    }
}

/// What a turn left queued ([`CommandReceiver::take`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Left {
    /// Nothing: the queue was found empty.
    Nothing,
    /// Broadcasts beyond the turn's most, and the commands behind them:
    /// for the next turn.
    More,
    /// Nothing, and the sender is gone: nothing will ever be.
    Forever,
}

impl CommandReceiver {
    /// The next command of a turn, oldest first, or what the turn leaves:
    /// a turn takes every command queued but the broadcasts beyond its
    /// most ([`BROADCASTS_PER_TURN`]) and what is queued behind them.
    pub(super) fn take(&self, turn: &mut Turn) -> Result<Command, Left> {
        let mut queue = lock(&self.shared);
        let broadcast = matches!(queue.commands.front(), Some(Command::Broadcast(_)));
        if broadcast && turn.broadcasts >= turn.max {
            return Err(Left::More);
        }
        match queue.pop() {
            Some(command) => {
                turn.broadcasts += usize::from(broadcast);
                Ok(command)
            }
            // Checked under the lock, the queue found empty: a sender's
            // last push comes before its drop, so a command sent before
            // the sender went is always taken first.
            None if alone(&self.shared) => Err(Left::Forever),
            None => Err(Left::Nothing),
        }
    }

    /// The oldest command queued, without waiting for one and whatever
    /// its kind (a turn with no limit: never [`Left::More`]).
    pub(super) fn try_recv(&self) -> Result<Command, Left> {
        self.take(&mut Turn::new(usize::MAX))
    }

    /// Broadcasts refused so far because the queue held the limit.
    pub(super) fn refused_busy(&self) -> u64 {
        self.shared.refused_busy.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    fn broadcast(byte: u8) -> Command {
        Command::Broadcast(vec![byte])
    }

    fn byte(command: Command) -> u8 {
        match command {
            Command::Broadcast(bytes) => bytes[0],
            _ => panic!("not a broadcast"),
        }
    }

    #[test]
    fn commands_come_out_in_the_order_they_were_sent() {
        let (tx, rx) = command_queue(MAX_QUEUED_BROADCASTS);
        assert_eq!(rx.try_recv().err(), Some(Left::Nothing));
        for b in 0..5 {
            tx.send(broadcast(b)).unwrap();
        }
        let taken: Vec<u8> = std::iter::from_fn(|| rx.try_recv().ok().map(byte)).collect();
        assert_eq!(taken, vec![0, 1, 2, 3, 4]);
        assert_eq!(rx.try_recv().err(), Some(Left::Nothing));
    }

    #[test]
    fn a_gone_sender_leaves_its_commands_and_then_says_so() {
        let (tx, rx) = command_queue(MAX_QUEUED_BROADCASTS);
        tx.send(broadcast(7)).unwrap();
        drop(tx);
        assert_eq!(rx.try_recv().ok().map(byte), Some(7));
        assert_eq!(rx.try_recv().err(), Some(Left::Forever));
    }

    #[test]
    fn a_gone_receiver_refuses_the_send() {
        let (tx, rx) = command_queue(MAX_QUEUED_BROADCASTS);
        drop(rx);
        assert!(tx.send(broadcast(1)).is_err());
    }

    /// One turn: each command it takes handed to `each`, and what it left.
    fn turn(rx: &CommandReceiver, max: usize, mut each: impl FnMut(Command)) -> Left {
        let mut turn = Turn::new(max);
        loop {
            match rx.take(&mut turn) {
                Ok(command) => each(command),
                Err(left) => return left,
            }
        }
    }

    /// A command as a word: `b7` for the broadcast of byte 7.
    fn word(command: Command) -> String {
        match command {
            Command::Broadcast(bytes) => format!("b{}", bytes[0]),
            Command::Agree(flags, _) => format!("agree{flags}"),
            Command::Leave => "leave".into(),
            Command::Stop => "stop".into(),
            Command::Fault(_) => "fault".into(),
        }
    }

    /// The queue refuses a broadcast at exactly the limit, counts the
    /// refusal, keeps every queued command, takes the others at the limit,
    /// and takes a broadcast again once the receiver took one.
    #[test]
    fn at_the_limit_a_broadcast_is_refused_until_one_is_taken() {
        let (tx, rx) = command_queue(MAX_QUEUED_BROADCASTS);
        for i in 0..MAX_QUEUED_BROADCASTS {
            tx.send(broadcast(i as u8))
                .unwrap_or_else(|e| panic!("broadcast {i} refused: {e:?}"));
        }
        assert_eq!(rx.refused_busy(), 0);
        let busy = Refused::Busy {
            queued: MAX_QUEUED_BROADCASTS,
        };
        assert_eq!(tx.send(broadcast(1)).err(), Some(busy));
        assert_eq!(rx.refused_busy(), 1);
        // Never refused for load.
        tx.send(Command::Agree(3, Instant::now())).unwrap();
        tx.send(Command::Leave).unwrap();
        tx.send(Command::Stop).unwrap();
        assert_eq!(tx.send(broadcast(2)).err(), Some(busy));
        assert_eq!(rx.try_recv().map(word), Ok("b0".into()));
        tx.send(broadcast(200)).expect("room for one again");
        assert_eq!(tx.send(broadcast(3)).err(), Some(busy));
        assert_eq!(rx.refused_busy(), 3);
        // Everything queued, in order; the refused ones are not.
        let taken: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok().map(word)).collect();
        let mut expected: Vec<String> = (1..MAX_QUEUED_BROADCASTS)
            .map(|i| format!("b{}", i as u8))
            .collect();
        expected.extend(["agree3", "leave", "stop", "b200"].map(String::from));
        assert_eq!(taken, expected);
        // Empty again: the limit is whole.
        for i in 0..MAX_QUEUED_BROADCASTS {
            tx.send(broadcast(i as u8)).unwrap();
        }
        assert_eq!(tx.send(broadcast(0)).err(), Some(busy));
    }

    /// A turn takes at most `max` broadcasts and every other command
    /// queued among them, in the order sent; what remains waits for the
    /// next turn, and says so.
    #[test]
    fn a_turn_takes_at_most_its_broadcasts_in_order() {
        const MAX: usize = BROADCASTS_PER_TURN;
        let (tx, rx) = command_queue(MAX_QUEUED_BROADCASTS);
        let mut sent = Vec::new();
        for i in 0..(2 * MAX + 6) as u8 {
            tx.send(broadcast(i)).unwrap();
            sent.push(format!("b{i}"));
            if i == 0 || i == MAX as u8 + 8 {
                tx.send(Command::Leave).unwrap();
                sent.push("leave".into());
            }
        }
        let mut turns = Vec::new();
        loop {
            let mut taken = Vec::new();
            let left = turn(&rx, MAX, |c| taken.push(word(c)));
            let broadcasts = taken.iter().filter(|w| w.starts_with('b')).count();
            turns.push((taken, broadcasts, left));
            if turns.last().unwrap().2 != Left::More {
                break;
            }
            assert!(turns.len() < 10, "the turns never end: {turns:?}");
        }
        let counts: Vec<(usize, &Left)> = turns.iter().map(|(_, b, l)| (*b, l)).collect();
        assert_eq!(
            counts,
            [(MAX, &Left::More), (MAX, &Left::More), (6, &Left::Nothing)]
        );
        // The first turn's leave came before its broadcasts (it was sent
        // so); the second's among them.
        assert_eq!(turns[0].0[..2], ["b0".to_string(), "leave".into()]);
        let all: Vec<String> = turns.into_iter().flat_map(|(t, _, _)| t).collect();
        assert_eq!(all, sent);
        // Exactly `MAX` queued: one turn, nothing left for another.
        for i in 0..MAX as u8 {
            tx.send(broadcast(i)).unwrap();
        }
        let mut n = 0;
        assert_eq!(turn(&rx, MAX, |_| n += 1), Left::Nothing);
        assert_eq!(n, MAX);
        // The commands between the turn's last broadcast and the next are
        // the turn's; the next broadcast and what follows it wait.
        for i in 0..=MAX as u8 {
            tx.send(broadcast(i)).unwrap();
            if i as usize == MAX - 1 {
                tx.send(Command::Stop).unwrap();
                tx.send(Command::Leave).unwrap();
            }
        }
        tx.send(Command::Leave).unwrap();
        let mut taken = Vec::new();
        assert_eq!(turn(&rx, MAX, |c| taken.push(word(c))), Left::More);
        let last = format!("b{}", MAX - 1);
        assert_eq!(taken[MAX - 1..], [last, "stop".into(), "leave".into()]);
        assert_eq!(taken.len(), MAX + 2);
        let mut taken = Vec::new();
        assert_eq!(turn(&rx, MAX, |c| taken.push(word(c))), Left::Nothing);
        assert_eq!(taken, [format!("b{MAX}"), "leave".into()]);
        // A turn of no broadcasts takes the others.
        tx.send(Command::Stop).unwrap();
        tx.send(broadcast(1)).unwrap();
        let mut taken = Vec::new();
        assert_eq!(turn(&rx, 0, |c| taken.push(word(c))), Left::More);
        assert_eq!(taken, ["stop"]);
        assert_eq!(rx.try_recv().map(word), Ok("b1".into()));
        tx.send(broadcast(9)).unwrap();
        drop(tx);
        let mut last = Vec::new();
        assert_eq!(turn(&rx, MAX, |c| last.push(word(c))), Left::Forever);
        assert_eq!(last, ["b9"]);
    }

    /// The scheduler's state letter of the thread of this process named
    /// `name` ('R' running or runnable, 'S' asleep), from `/proc`.
    fn state_of(name: &str) -> Option<char> {
        for task in std::fs::read_dir("/proc/self/task").ok()? {
            let dir = task.ok()?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            if comm.trim_end() != name {
                continue;
            }
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // "tid (comm) S ...": the state follows the comm's ')'.
            return stat[stat.rfind(')')? + 1..].trim_start().chars().next();
        }
        None
    }

    /// Whether this process's thread named `name` is seen asleep within
    /// `bound` (looked at again and again, yielding between): a thread
    /// that spins instead stays runnable, and the test fails rather than
    /// hangs.
    pub(in crate::runtime) fn sleeps_within(name: &str, bound: Duration) -> bool {
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if state_of(name) == Some('S') {
                return true;
            }
            std::thread::yield_now();
        }
        false
    }

    /// The property the queue exists for: a receiver that meets a sender
    /// mid-send (here: holding the queue's lock, as a preempted sender
    /// does) goes to sleep instead of spinning, so on one CPU the sender
    /// gets to finish even when the receiver runs at a real-time
    /// priority. A spinning receiver (`std::sync::mpsc`'s `try_recv` on a
    /// half-written message) stays runnable and fails this.
    #[test]
    fn a_receiver_meeting_a_sender_mid_send_sleeps_rather_than_spins() {
        let (tx, rx) = command_queue(MAX_QUEUED_BROADCASTS);
        // Mid-send: the sender holds the queue.
        let mut held = lock(&tx.shared);
        let (done_tx, done_rx) = mpsc::channel();
        let name = "ffd-cmd-recv";
        let receiver = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let got = rx.try_recv().ok().map(byte);
                done_tx.send(got).unwrap();
            })
            .unwrap();
        // The receiver asleep on the lock.
        let slept = sleeps_within(name, Duration::from_secs(20));
        // The send finishes: the receiver wakes and takes it.
        held.push(broadcast(9));
        drop(held);
        let got = done_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the receiver returns once the send is done");
        receiver.join().unwrap();
        assert!(
            slept,
            "the receiver kept the CPU while the sender held the queue"
        );
        assert_eq!(got, Some(9), "and took the command the sender finished");
    }
}
