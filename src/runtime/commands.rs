//! The embedder's commands to the progress thread: a queue whose receiver
//! never waits on a sender by spinning.
//!
//! Owns: the commands sent and not yet taken, in the order they were sent.
//! Must not: make the progress thread spin or yield while a sender is
//! mid-send. A sender on the progress thread's CPU at the normal policy,
//! preempted mid-send by that thread lifted or held at `SCHED_FIFO`
//! (design §6 "Runtime"), would never get the CPU back to finish. That was
//! `std::sync::mpsc`: its `try_recv` spins and yields for a message whose
//! write has begun (176.8 ms of a lifted thread's CPU seen, every rank of
//! that CPU silent and declared). Here a send is a push under a mutex: a
//! receiver that finds it held sleeps on the lock's futex after a bounded
//! spin, and the preempted sender runs, finishes and wakes it.
//!
//! One sender (the [`super::Detector`]) and one receiver (the progress
//! thread). Either side sees the other gone: the receiver once the sender
//! is dropped and the queue is empty, the sender once the receiver is
//! dropped. Dropping either side takes no lock, so a `fork()`ed child
//! dropping its copy of the detector never waits on a lock the parent's
//! progress thread held when it forked.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::progress::Command;

/// A new queue: its sending and receiving sides.
pub(super) fn command_queue() -> (CommandSender, CommandReceiver) {
    let queue = Arc::new(Mutex::new(VecDeque::new()));
    (
        CommandSender {
            queue: Arc::clone(&queue),
        },
        CommandReceiver { queue },
    )
}

type Queue = Mutex<VecDeque<Command>>;

/// Locks the queue; a panic while it was held (a push or a pop cannot
/// leave it half-done) does not make it unusable.
fn lock(queue: &Queue) -> MutexGuard<'_, VecDeque<Command>> {
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether the other side of `queue` is gone: each side holds one count.
fn alone(queue: &Arc<Queue>) -> bool {
    Arc::strong_count(queue) == 1
}

/// The embedder's side (held by the detector).
pub(super) struct CommandSender {
    queue: Arc<Queue>,
}

/// The receiver is gone (the progress thread ended): the command was not
/// queued.
#[derive(Debug)]
pub(super) struct Disconnected;

impl CommandSender {
    pub(super) fn send(&self, command: Command) -> Result<(), Disconnected> {
        if alone(&self.queue) {
            return Err(Disconnected);
        }
        lock(&self.queue).push_back(command);
        Ok(())
    }
}

/// The progress thread's side.
pub(super) struct CommandReceiver {
    queue: Arc<Queue>,
}

/// Why [`CommandReceiver::try_recv`] returned no command.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Empty {
    /// None is queued now.
    Now,
    /// None is queued and the sender is gone: none will ever be.
    Forever,
}

impl CommandReceiver {
    /// The oldest command queued, without waiting for one.
    pub(super) fn try_recv(&self) -> Result<Command, Empty> {
        let mut queue = lock(&self.queue);
        if let Some(command) = queue.pop_front() {
            return Ok(command);
        }
        // Checked under the lock, the queue found empty: a sender's last
        // push comes before its drop, so a command sent before the sender
        // went is always taken first.
        if alone(&self.queue) {
            Err(Empty::Forever)
        } else {
            Err(Empty::Now)
        }
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
        let (tx, rx) = command_queue();
        assert_eq!(rx.try_recv().err(), Some(Empty::Now));
        for b in 0..5 {
            tx.send(broadcast(b)).unwrap();
        }
        let taken: Vec<u8> = std::iter::from_fn(|| rx.try_recv().ok().map(byte)).collect();
        assert_eq!(taken, vec![0, 1, 2, 3, 4]);
        assert_eq!(rx.try_recv().err(), Some(Empty::Now));
    }

    #[test]
    fn a_gone_sender_leaves_its_commands_and_then_says_so() {
        let (tx, rx) = command_queue();
        tx.send(broadcast(7)).unwrap();
        drop(tx);
        assert_eq!(rx.try_recv().ok().map(byte), Some(7));
        assert_eq!(rx.try_recv().err(), Some(Empty::Forever));
    }

    #[test]
    fn a_gone_receiver_refuses_the_send() {
        let (tx, rx) = command_queue();
        drop(rx);
        assert!(tx.send(broadcast(1)).is_err());
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
        let (tx, rx) = command_queue();
        // Mid-send: the sender holds the queue.
        let mut held = lock(&tx.queue);
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
        held.push_back(broadcast(9));
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
