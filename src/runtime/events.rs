//! Event delivery from the progress thread to the embedder: a bounded
//! queue and a file descriptor that is readable while events are pending.
//!
//! Owns: the queue, its wake-up fd, and the place of an event a consumer
//! refused (it stays first in line). Must not: make the progress thread
//! spin on a consumer. The queue is under a mutex held for one push or one
//! pop, and a producer that finds it held sleeps on the lock after a
//! bounded spin: a consumer preempted mid-pop by a progress thread held at
//! `SCHED_FIFO` on its CPU then runs and finishes. A lock-free array queue
//! (crossbeam's, until then) made a producer that met a full queue whose
//! head a consumer had moved but not yet freed spin and yield, and that
//! consumer, bound to the same CPU at the normal policy, never ran again
//! (as `std::sync::mpsc` did for the commands, `commands.rs`).
//! A full queue drops the new event and counts it; the failed set and the
//! epoch stay exact, so an embedder that lost events re-reads `failed_ranks()`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A bounded multi-consumer queue with a readiness fd.
///
/// The fd is a socket that holds at least one byte while the queue is not
/// empty (it may also be readable, spuriously, right after the last pop).
/// Hosts put it in their poll/epoll set and call [`EventQueue::try_pop`]
/// when it becomes readable.
#[derive(Debug)]
pub struct EventQueue<T> {
    /// The events, oldest first; at most `capacity` (allocated at the
    /// start: a push never allocates).
    queue: Mutex<VecDeque<T>>,
    capacity: usize,
    /// An event a consumer did not take ([`EventQueue::try_pop_if`]): the
    /// next consumer gets it first. Locked by consumers only, for the
    /// whole of a pop, so that events leave in order.
    front: Mutex<Option<T>>,
    dropped: AtomicU64,
    /// Readable end, handed to the embedder.
    ready: UnixStream,
    /// Written by producers (and by consumers re-arming).
    wake: UnixStream,
}

impl<T> EventQueue<T> {
    /// A queue holding at most `capacity` (≥ 1) events.
    pub fn new(capacity: usize) -> std::io::Result<Self> {
        let (ready, wake) = UnixStream::pair()?;
        ready.set_nonblocking(true)?;
        wake.set_nonblocking(true)?;
        let capacity = capacity.max(1);
        Ok(EventQueue {
            queue: Mutex::new(VecDeque::with_capacity(capacity)),
            capacity,
            front: Mutex::new(None),
            dropped: AtomicU64::new(0),
            ready,
            wake,
        })
    }

    /// Adds an event; never blocks. Returns `false` (and counts it) when the
    /// queue is full and the event was dropped.
    pub fn push(&self, event: T) -> bool {
        {
            let mut queue = self.events();
            if queue.len() >= self.capacity {
                drop(queue);
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            queue.push_back(event);
        }
        self.arm();
        true
    }

    /// The queue, locked for one push or one pop (a panic while it was
    /// held cannot leave it half-done).
    fn events(&self) -> MutexGuard<'_, VecDeque<T>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the oldest event, if any. Never blocks on the producer (it may
    /// wait briefly for another consumer).
    pub fn try_pop(&self) -> Option<T> {
        self.try_pop_if(|_| Ok::<(), Infallible>(()))
            .map(|taken| match taken {
                Ok(event) => event,
                Err(never) => match never {},
            })
    }

    /// Looks at the oldest event, if any, and takes it when `take` accepts
    /// it (`Some(Ok(event))`). An event `take` refuses stays first in line
    /// (the fd stays readable) and its error is returned (`Some(Err(_))`):
    /// a consumer whose buffer is too small for it says so and comes back.
    pub fn try_pop_if<R>(&self, take: impl FnOnce(&T) -> Result<(), R>) -> Option<Result<T, R>> {
        let mut front = self
            .front
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Drain the fd first: a producer that pushes after this point writes
        // a fresh byte, so the fd never reads empty while an event waits.
        self.disarm();
        let event = front.take().or_else(|| self.events().pop_front())?;
        let taken = match take(&event) {
            Ok(()) => Ok(event),
            Err(refused) => {
                *front = Some(event);
                Err(refused)
            }
        };
        if front.is_some() || !self.events().is_empty() {
            self.arm();
        }
        Some(taken)
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Events waiting, the one a consumer refused included.
    pub fn len(&self) -> usize {
        let front = self
            .front
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.events().len() + usize::from(front.is_some())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn arm(&self) {
        // WouldBlock means the socket buffer is full: it is readable already.
        let _ = (&self.wake).write(&[1]);
    }

    fn disarm(&self) {
        let mut sink = [0u8; 256];
        loop {
            match (&self.ready).read(&mut sink) {
                Ok(n) if n == sink.len() => continue,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                _ => break,
            }
        }
    }
}

impl<T> AsFd for EventQueue<T> {
    /// The readiness fd: readable while events are pending.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.ready.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Whether the fd reads as readable (single-threaded use only: it takes a
    /// byte and puts one back).
    fn readable(q: &EventQueue<u32>) -> bool {
        let mut b = [0u8; 1];
        match (&q.ready).read(&mut b) {
            Ok(n) => {
                q.arm();
                n > 0
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => false,
            Err(e) => panic!("read: {e}"),
        }
    }

    #[test]
    fn fd_is_readable_exactly_while_events_are_pending() {
        let q = EventQueue::new(4).unwrap();
        assert!(!readable(&q));
        assert!(q.push(1));
        assert!(q.push(2));
        assert!(readable(&q));
        assert_eq!(q.try_pop(), Some(1));
        assert!(readable(&q), "one event still pending");
        assert_eq!(q.try_pop(), Some(2));
        assert!(!readable(&q));
        assert_eq!(q.try_pop(), None);
    }

    #[test]
    fn a_refused_event_stays_first_and_keeps_the_fd_readable() {
        let q = EventQueue::new(4).unwrap();
        assert!(q.push(10) && q.push(2));
        let too_big = |e: &u32| if *e > 5 { Err(*e) } else { Ok(()) };
        assert_eq!(q.try_pop_if(too_big), Some(Err(10)));
        assert_eq!(q.len(), 2);
        assert_eq!(q.try_pop_if(too_big), Some(Err(10)), "still first in line");
        assert_eq!(q.try_pop(), Some(10));
        assert_eq!(q.try_pop(), Some(2));
        assert!(!readable(&q));

        // Refused as the only event: the fd stays readable for it.
        assert!(q.push(9));
        assert_eq!(q.try_pop_if(too_big), Some(Err(9)));
        assert!(q.events().is_empty());
        assert!(readable(&q));
        assert_eq!(q.try_pop_if(|_| Ok::<(), u32>(())), Some(Ok(9)));
        assert!(!readable(&q));
        assert_eq!(q.try_pop_if(too_big), None);
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_blocking() {
        let q = EventQueue::new(2).unwrap();
        assert!(q.push(1) && q.push(2));
        assert!(!q.push(3));
        assert_eq!(q.dropped(), 1);
        assert_eq!(
            (q.try_pop(), q.try_pop(), q.try_pop()),
            (Some(1), Some(2), None)
        );
    }

    #[test]
    fn many_pushes_never_block_on_a_full_socket_buffer() {
        let q = EventQueue::new(1 << 20).unwrap();
        for i in 0..300_000u32 {
            assert!(q.push(i));
        }
        assert_eq!(q.len(), 300_000);
        assert!(readable(&q));
    }

    /// The property the mutex is for: a producer (the progress thread)
    /// that meets a consumer mid-pop (here: holding the queue, as a
    /// preempted consumer does) sleeps instead of spinning, so on one CPU
    /// the consumer gets to finish even when the producer runs at a
    /// real-time priority.
    #[test]
    fn a_producer_meeting_a_consumer_mid_pop_sleeps_rather_than_spins() {
        let q = Arc::new(EventQueue::new(1).unwrap());
        assert!(q.push(1));
        // Mid-pop: the consumer holds the (full) queue.
        let mut held = q.events();
        let name = "ffd-event-push";
        let producer = {
            let q = Arc::clone(&q);
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || q.push(2))
                .unwrap()
        };
        let slept =
            super::super::commands::tests::sleeps_within(name, std::time::Duration::from_secs(20));
        // The pop finishes: the producer wakes and finds room.
        assert_eq!(held.pop_front(), Some(1));
        drop(held);
        let pushed = producer.join().unwrap();
        assert!(
            slept,
            "the producer kept the CPU while a consumer held the queue"
        );
        assert!(pushed, "and pushed into the room the pop left");
        assert_eq!(q.try_pop(), Some(2));
    }

    #[test]
    fn concurrent_producer_and_consumer_lose_nothing() {
        let q = Arc::new(EventQueue::new(64).unwrap());
        let producer = {
            let q = Arc::clone(&q);
            std::thread::spawn(move || {
                let mut sent = 0u32;
                let mut i = 0u32;
                while sent < 10_000 {
                    if q.push(i) {
                        sent += 1;
                        i += 1;
                    } else {
                        std::thread::yield_now();
                    }
                }
            })
        };
        let mut expected = 0u32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while expected < 10_000 && std::time::Instant::now() < deadline {
            if let Some(v) = q.try_pop() {
                assert_eq!(v, expected);
                expected += 1;
            }
        }
        producer.join().unwrap();
        assert_eq!(expected, 10_000);
        // The last push may arm the fd after its event was popped (allowed:
        // a spurious wake-up); one more pop on the empty queue disarms it.
        assert_eq!(q.try_pop(), None);
        assert!(!readable(&q));
    }
}
