//! A rank's doorbell: a Unix datagram socket bound to an abstract name
//! made of its host segment's name and its index there, in its progress
//! thread's epoll set (`pidfd.rs`'s [`super::ExitWatch`]), so that a
//! writer to its mailbox (`mailbox.rs`) wakes that thread itself, with one
//! `sendto` of one byte, instead of ringing the mail word for its
//! exit-word thread to pass on (two wake-ups). The bytes are never read
//! as anything: a datagram is only a wake-up, and any process of the
//! network namespace that finds the name can cause one, no more.
//!
//! Owns: the name, the bind, the knock, the drain. Must not: carry data,
//! or block (both sockets are non-blocking).

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The abstract name of local rank `index`'s doorbell on the host whose
/// segment is `segment` (a name of the job key and the host).
pub fn door_name(segment: &str, index: u32) -> String {
    format!("ffd-door{}-{index}", segment)
}

/// A rank's bound doorbell.
#[derive(Debug)]
pub struct Doorbell {
    socket: UnixDatagram,
}

impl Doorbell {
    /// Binds `name` (abstract); fails if it is taken.
    pub fn bind(name: &str) -> io::Result<Doorbell> {
        let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
        let socket = UnixDatagram::bind_addr(&addr)?;
        socket.set_nonblocking(true)?;
        Ok(Doorbell { socket })
    }

    /// Reads every waiting knock (they say nothing but "look").
    pub fn drain(&self) {
        let mut sink = [0u8; 16];
        while self.socket.recv(&mut sink).is_ok() {}
    }
}

impl AsFd for Doorbell {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

/// A writer's socket to knock with.
#[derive(Debug)]
pub struct Knocker {
    socket: UnixDatagram,
}

impl Knocker {
    pub fn new() -> io::Result<Knocker> {
        let socket = UnixDatagram::unbound()?;
        socket.set_nonblocking(true)?;
        Ok(Knocker { socket })
    }

    /// Knocks on the doorbell `name`: true if it is there (a full queue
    /// counts: its owner has knocks to wake for already).
    pub fn knock(&self, name: &str) -> bool {
        let Ok(addr) = SocketAddr::from_abstract_name(name.as_bytes()) else {
            return false;
        };
        match self.socket.send_to_addr(&[1], &addr) {
            Ok(_) => true,
            Err(e) => e.kind() == io::ErrorKind::WouldBlock,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_knock_makes_the_doorbell_readable_and_a_drain_empties_it() {
        let name = door_name(&format!("/ffd-test-{}", std::process::id()), 3);
        let knocker = Knocker::new().unwrap();
        assert!(!knocker.knock(&name), "nobody bound it yet");
        let door = Doorbell::bind(&name).unwrap();
        assert!(Doorbell::bind(&name).is_err(), "one owner per name");
        let readable = |d: &Doorbell| {
            let mut pfd = libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&d.socket),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, no wait.
            unsafe { libc::poll(&mut pfd, 1, 0) == 1 }
        };
        assert!(!readable(&door));
        for _ in 0..1000 {
            assert!(knocker.knock(&name), "a full queue still counts");
        }
        assert!(readable(&door));
        door.drain();
        assert!(!readable(&door));
        drop(door);
        assert!(!knocker.knock(&name), "gone with its owner");
    }
}
