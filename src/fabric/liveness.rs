//! The liveness port's system edge (`docs/design.md`
//! §4.5 "In-band detection"): a plain TCP listener at the fabric endpoint's IP, closed to
//! strangers by the same kernel source filter as the endpoint's own port
//! ([`SourceGuard`]), non-blocking connections to a peer's, and an epoll
//! set that joins them to the progress thread's wait.
//!
//! Owns: `socket`/`bind`/`listen` of the listener with its deny-all filter
//! attached before it listens, the non-blocking `connect`, the epoll set.
//! Must not: decide what an answer means (`ffd_protocol::liveness` does) or
//! who to watch (the runtime does); never connects to the provider's port.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::guard::{GuardError, SourceGuard};

/// Connections a listener's kernel queues before its process accepts them.
const BACKLOG: i32 = 64;

/// A raw socket address for `bind`/`connect` (also the guard's test
/// connections).
pub(super) fn sockaddr_of(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: plain data; all-zero is valid.
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write((&raw mut s).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write((&raw mut s).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (s, len as libc::socklen_t)
}

/// A fresh non-blocking, close-on-exec TCP socket for `a`'s family.
pub(super) fn tcp_socket(a: SocketAddr) -> io::Result<OwnedFd> {
    let family = if a.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket(2); the result is checked.
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh socket owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A non-blocking listener at `ip` (port chosen by the kernel). With
/// `filter`, it drops every packet until the guard's
/// [`SourceGuard::allow`] admits the job's hosts: the filter is attached
/// before `listen`, so no stranger's handshake completes in between (an
/// error if the kernel refuses it). Returns the listener and its guard.
pub fn liveness_listener(
    ip: std::net::IpAddr,
    filter: bool,
) -> Result<(TcpListener, Option<SourceGuard>), GuardError> {
    let sys = |what: &str| {
        let what = what.to_owned();
        move |source| GuardError::Sys { what, source }
    };
    let at = SocketAddr::new(ip, 0);
    let sock = tcp_socket(at).map_err(sys("socket for the liveness listener"))?;
    let guard = if filter {
        Some(SourceGuard::deny_all_on(sock.as_fd(), at)?)
    } else {
        None
    };
    let (addr, len) = sockaddr_of(at);
    // SAFETY: addr is a valid address of len bytes; the fd is ours.
    if unsafe { libc::bind(sock.as_raw_fd(), (&raw const addr).cast(), len) } != 0 {
        return Err(sys(&format!("binding the liveness listener to {ip}"))(
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: listen(2) on our bound socket.
    if unsafe { libc::listen(sock.as_raw_fd(), BACKLOG) } != 0 {
        return Err(sys("listen on the liveness listener")(
            io::Error::last_os_error(),
        ));
    }
    let listener = TcpListener::from(sock);
    let bound = listener
        .local_addr()
        .map_err(sys("getsockname of the liveness listener"))?;
    Ok((listener, guard.map(|g| g.at(bound))))
}

/// Starts a non-blocking connection to `to`; it completes (or fails) when
/// the stream becomes writable (`TcpStream::take_error` says which). An
/// error here is the connection's answer already (`ECONNREFUSED` can come
/// at once on loopback).
pub fn connect_started(to: SocketAddr) -> io::Result<TcpStream> {
    let sock = tcp_socket(to)?;
    let (addr, len) = sockaddr_of(to);
    // SAFETY: addr is a valid address of len bytes; the fd is ours.
    let ret = unsafe { libc::connect(sock.as_raw_fd(), (&raw const addr).cast(), len) };
    if ret != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    Ok(TcpStream::from(sock))
}

/// Readable (data, end of stream or an error).
pub const READABLE: u32 = libc::EPOLLIN as u32;
/// Writable (a connection completed or failed).
pub const WRITABLE: u32 = libc::EPOLLOUT as u32;
/// The peer closed or reset the connection, or it failed.
pub const HANG_UP: u32 = (libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) as u32;

/// An epoll set of sockets, each with a token. Its own fd is readable when
/// any of them has an event.
#[derive(Debug)]
pub struct SocketSet {
    epoll: OwnedFd,
}

impl SocketSet {
    pub fn new() -> io::Result<SocketSet> {
        // SAFETY: epoll_create1 takes flags and returns a new fd or -1.
        let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is the fresh fd epoll_create1 returned.
        Ok(SocketSet {
            epoll: unsafe { OwnedFd::from_raw_fd(raw) },
        })
    }

    fn ctl(&self, op: i32, fd: BorrowedFd<'_>, token: u64, events: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: both fds are open (`fd` is borrowed for the call), `ev`
        // is a valid event the kernel copies.
        let ret = unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd.as_raw_fd(), &mut ev) };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Watches `fd` for `events` (level-triggered), reported with `token`.
    pub fn add(&self, fd: BorrowedFd<'_>, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, events)
    }

    /// Watches `fd` for `events` from now on.
    pub fn modify(&self, fd: BorrowedFd<'_>, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, events)
    }

    /// Stops watching `fd` (closing it does too).
    pub fn remove(&self, fd: BorrowedFd<'_>) {
        let _ = self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0);
    }

    /// The events ready now, as (token, events), without waiting.
    pub fn ready(&self, out: &mut Vec<(u64, u32)>) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 16];
        loop {
            // SAFETY: `events` holds 16 writable entries; timeout 0 returns
            // at once.
            let n = unsafe {
                libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as i32,
                    0,
                )
            };
            if n <= 0 {
                return;
            }
            out.extend(events[..n as usize].iter().map(|e| (e.u64, e.events)));
            if (n as usize) < events.len() {
                return;
            }
        }
    }
}

impl AsFd for SocketSet {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{IpAddr, Ipv4Addr};

    const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
    /// A loopback address of this test's own: the refusal at the end needs
    /// nobody listening at the port once ours is closed, and the other
    /// tests of this binary, running at once, listen on 127.0.0.1 at ports
    /// the kernel chooses. A listener on every address (libfabric's) can
    /// still take the freed port: the refusal is then checked again on a
    /// new one (`closed_port_refuses`). Connections to it still come from
    /// 127.0.0.1 (lo's source address).
    const OWN: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 83, 0, 1));

    #[test]
    fn a_listener_drops_everyone_until_the_job_is_admitted_and_a_closed_port_refuses() {
        let (listener, guard) = liveness_listener(OWN, true).unwrap();
        let guard = guard.unwrap();
        let at = listener.local_addr().unwrap();
        // Deny-all: the SYN is dropped, the handshake does not complete.
        let c = connect_started(at).unwrap();
        let set = SocketSet::new().unwrap();
        set.add(c.as_fd(), 1, WRITABLE).unwrap();
        let mut out = Vec::new();
        std::thread::sleep(std::time::Duration::from_millis(50));
        set.ready(&mut out);
        assert!(out.is_empty(), "a filtered SYN got an answer: {out:?}");
        drop(c);
        guard.allow(&[LO]).unwrap();
        let mut c = TcpStream::connect(at).unwrap();
        let (mut accepted, _) = listener.accept().unwrap();
        accepted.write_all(b"A").unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"A");
        // The process closes its listener (as its exit does): refused.
        drop(listener);
        assert!(
            refused(at) || (1..5).any(|_| closed_port_refuses()),
            "a closed and admitted port did not refuse"
        );
    }

    /// Whether a connection to `at` is refused; `false` when it is
    /// accepted: another listener of this test binary took the port just
    /// freed (libfabric's tcp provider listens on every address, at ports
    /// the kernel chooses; seen once in a loaded run).
    fn refused(at: std::net::SocketAddr) -> bool {
        match TcpStream::connect(at) {
            Ok(_) => false,
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::ECONNREFUSED), "{e}");
                true
            }
        }
    }

    /// Another admitted listener, closed at once: whether it refuses.
    fn closed_port_refuses() -> bool {
        let (listener, guard) = liveness_listener(OWN, true).unwrap();
        let guard = guard.unwrap();
        guard.allow(&[LO]).unwrap();
        let at = listener.local_addr().unwrap();
        drop(listener);
        refused(at)
    }
}
