//! The source filter: only the job's own hosts reach the provider's
//! listening socket.
//!
//! On the socket providers (`tcp;ofi_rxm`, `sockets`, `net`, `udp`)
//! libfabric accepts a connection from anyone and parses what it sends
//! before ffd sees a byte; no libfabric call lets an application refuse a
//! connection. The kernel can: a socket's classic BPF filter
//! (`SO_ATTACH_FILTER`) runs on every segment before TCP handles it, the
//! SYN of a listening socket included, so a listener that drops a source
//! never completes its handshake, and a socket accepted from it inherits
//! the filter.
//!
//! Owns: finding this process's sockets bound to the endpoint's address
//! (`/proc/self/fd`, `getsockname` against `fi_getname`), keeping a
//! duplicate of each until the filter is locked, the filter programs, and
//! attaching and locking them. Must not: decide which addresses belong to
//! the job (start-up does, from the exchanged records).
//!
//! Two steps: [`SourceGuard::deny_all`] right after the endpoint is enabled
//! (nobody gets in while the job's addresses are unknown), then
//! [`SourceGuard::allow`] with the job's host addresses, which replaces the
//! filter and locks it (`SO_LOCK_FILTER`: no later `setsockopt` in the
//! process, libfabric's included, can detach or replace it).
//!
//! Measured here (Linux 6.x, libfabric 1.17, `tcp;ofi_rxm` on `lo`): the
//! endpoint has one listening socket, at its `fi_getname` address; rxm and
//! tcp open no other listener later; sockets accepted from it carry the
//! filter (`SO_GET_FILTER` answers its length).

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

/// The core providers whose endpoint listens on a kernel socket.
pub const SOCKET_PROVIDERS: &[&str] = &["tcp", "sockets", "net", "udp"];

/// Whether `provider` (`tcp;ofi_rxm`, `sockets`, ...) listens on a kernel
/// socket: its core provider (the first name) is one of
/// [`SOCKET_PROVIDERS`].
pub fn listens_on_sockets(provider: &str) -> bool {
    let core = provider.split(';').next().unwrap_or("").trim();
    SOCKET_PROVIDERS.contains(&core)
}

/// Why a source filter could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// The endpoint's name is no socket address.
    #[error("the endpoint's address ({len} bytes) is not an IPv4 or IPv6 socket address")]
    NotSocketAddress {
        /// Length of the name.
        len: usize,
    },
    /// No socket of this process is bound to the endpoint's address.
    #[error("no socket of this process is bound to the endpoint's address {0}")]
    NotFound(SocketAddr),
    /// The program for this many addresses exceeds the kernel's bound.
    #[error(
        "{addresses} source addresses make a filter longer than the kernel's 4096 instructions"
    )]
    TooMany {
        /// Distinct addresses asked for.
        addresses: usize,
    },
    /// The endpoint is bound to the wildcard address: the job's addresses
    /// cannot be told from its records.
    #[error(
        "the endpoint is bound to the wildcard address {0}; name an interface or domain (FFD_DOMAIN)"
    )]
    Wildcard(SocketAddr),
    /// A system call failed.
    #[error("{what} failed: {source}")]
    Sys {
        /// The call and its subject.
        what: String,
        /// The error.
        source: io::Error,
    },
}

/// The parsed `struct sockaddr_in`/`sockaddr_in6` of `name` (an
/// `fi_getname` or `getsockname` result), or `None`.
pub fn socket_address(name: &[u8]) -> Option<SocketAddr> {
    if name.len() < 2 {
        return None;
    }
    let family = i32::from(u16::from_ne_bytes([name[0], name[1]]));
    if family == libc::AF_INET && name.len() >= 8 {
        let port = u16::from_be_bytes([name[2], name[3]]);
        let ip = Ipv4Addr::new(name[4], name[5], name[6], name[7]);
        return Some(SocketAddr::from((ip, port)));
    }
    if family == libc::AF_INET6 && name.len() >= 24 {
        let port = u16::from_be_bytes([name[2], name[3]]);
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&name[8..24]);
        return Some(SocketAddr::from((Ipv6Addr::from(octets), port)));
    }
    None
}

/// The filter on this process's sockets at one endpoint address: deny-all
/// until [`allow`](Self::allow) locks in the job's addresses.
pub struct SourceGuard {
    addr: SocketAddr,
    /// Duplicates of the matching sockets: the sockets stay the ones we
    /// filter even if libfabric closes its descriptors meanwhile.
    sockets: Vec<OwnedFd>,
}

impl fmt::Debug for SourceGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceGuard")
            .field("addr", &self.addr)
            .field("sockets", &self.sockets.len())
            .finish()
    }
}

/// What [`SourceGuard::allow`] locked in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFilter {
    /// The endpoint's address.
    pub addr: SocketAddr,
    /// How many sockets carry the filter.
    pub sockets: usize,
    /// The source addresses let through.
    pub allowed: Vec<IpAddr>,
}

impl SourceGuard {
    /// Finds every socket of this process bound to `name` (the endpoint's
    /// `fi_getname`; a socket bound to the wildcard address at its port
    /// counts) and attaches a filter that drops every packet. Fails when
    /// the name is no socket address or no socket matches.
    pub fn deny_all(name: &[u8]) -> Result<SourceGuard, GuardError> {
        let addr = socket_address(name).ok_or(GuardError::NotSocketAddress { len: name.len() })?;
        let sockets = sockets_bound_to(addr)?;
        if sockets.is_empty() {
            return Err(GuardError::NotFound(addr));
        }
        let guard = SourceGuard { addr, sockets };
        guard.attach(&program(&[])?, false)?;
        Ok(guard)
    }

    /// A guard over one socket this process made itself (the liveness
    /// listener, `fabric::liveness`), at `addr`: drops every packet from
    /// now on, until [`allow`](Self::allow).
    pub fn deny_all_on(
        socket: BorrowedFd<'_>,
        addr: SocketAddr,
    ) -> Result<SourceGuard, GuardError> {
        let dup = socket
            .try_clone_to_owned()
            .map_err(|source| GuardError::Sys {
                what: format!("duplicating the socket at {addr}"),
                source,
            })?;
        let guard = SourceGuard {
            addr,
            sockets: vec![dup],
        };
        guard.attach(&program(&[])?, false)?;
        Ok(guard)
    }

    /// The same guard, naming `addr` (a port the kernel chose since).
    pub fn at(self, addr: SocketAddr) -> SourceGuard {
        SourceGuard { addr, ..self }
    }

    /// The endpoint address the guard filters at.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Lets only packets from `sources` through, and locks the filter.
    /// Sockets accepted since [`deny_all`](Self::deny_all) cannot exist (it
    /// dropped every SYN); those accepted later inherit the filter.
    pub fn allow(self, sources: &[IpAddr]) -> Result<SourceFilter, GuardError> {
        let mut allowed: Vec<IpAddr> = Vec::new();
        for ip in sources {
            let ip = ip.to_canonical();
            if !allowed.contains(&ip) {
                allowed.push(ip);
            }
        }
        self.attach(&program(&allowed)?, true)?;
        Ok(SourceFilter {
            addr: self.addr,
            sockets: self.sockets.len(),
            allowed,
        })
    }

    fn attach(&self, prog: &[libc::sock_filter], lock: bool) -> Result<(), GuardError> {
        for fd in &self.sockets {
            match attach_filter(fd.as_raw_fd(), prog, lock) {
                Ok(()) => {}
                // Locked by another endpoint of this process that shares
                // the listening socket (seen with several endpoints in one
                // process: a listener at the same address and port already
                // filtered and locked). It stays filtered; it is not ours
                // to change.
                Err(e)
                    if e.raw_os_error() == Some(libc::EPERM)
                        && attached_filter_len(fd.as_fd()).is_ok_and(|len| len > 0) => {}
                Err(source) => {
                    return Err(GuardError::Sys {
                        what: format!("attaching the source filter to the socket at {}", self.addr),
                        source,
                    });
                }
            }
        }
        Ok(())
    }
}

/// Duplicates of this process's sockets whose local address is `addr`
/// (or the wildcard address at its port).
fn sockets_bound_to(addr: SocketAddr) -> Result<Vec<OwnedFd>, GuardError> {
    let dir = std::fs::read_dir("/proc/self/fd").map_err(|source| GuardError::Sys {
        what: "reading /proc/self/fd".to_owned(),
        source,
    })?;
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<RawFd>().ok())
        else {
            continue;
        };
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|t| t.to_string_lossy().starts_with("socket:["));
        if !is_socket {
            continue;
        }
        // SAFETY: `fd` was open when listed; if it has been closed since,
        // the duplication fails with EBADF. The borrow ends here.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        // Checked on a duplicate: another thread may close `fd` and open
        // another socket under the same number meanwhile, but the
        // duplicate stays the socket it was made from.
        let Ok(dup) = borrowed.try_clone_to_owned() else {
            continue;
        };
        let Some(local) = local_address(dup.as_fd()) else {
            continue;
        };
        let matches = local.port() == addr.port()
            && (local.ip().to_canonical() == addr.ip().to_canonical()
                || local.ip().is_unspecified());
        // A connected stream socket at this address is not the endpoint's
        // to filter: its own were accepted from the listener and carry its
        // filter already, and one of an earlier endpoint on the same port
        // (still closing) may carry a locked filter of its own.
        let listener_or_datagram = int_option(dup.as_fd(), libc::SO_ACCEPTCONN) == Some(1)
            || int_option(dup.as_fd(), libc::SO_TYPE) == Some(libc::SOCK_DGRAM);
        // A socket that already carries a filter is not a fresh endpoint's:
        // with several endpoints in one process, another endpoint's
        // listener was seen at the same address and port, its filter
        // locked (a listening group of SO_REUSEPORT sockets would allow
        // that).
        let unfiltered = attached_filter_len(dup.as_fd()).is_ok_and(|len| len == 0);
        if matches && listener_or_datagram && unfiltered {
            found.push(dup);
        }
    }
    Ok(found)
}

/// An integer `SOL_SOCKET` option of `fd`.
fn int_option(fd: BorrowedFd<'_>, option: libc::c_int) -> Option<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: value and len are valid out-pointers of the sizes given; a
    // bad fd or option makes the call fail, which is handled.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&raw mut value).cast(),
            &mut len,
        )
    };
    (ret == 0).then_some(value)
}

/// `getsockname` of `fd`, when it is an IPv4 or IPv6 socket.
fn local_address(fd: BorrowedFd<'_>) -> Option<SocketAddr> {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: storage and len are valid for writes of `len` bytes; a bad
    // or non-socket fd makes the call fail, which is handled.
    let ret = unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            (&raw mut storage).cast::<libc::sockaddr>(),
            &mut len,
        )
    };
    if ret != 0 {
        return None;
    }
    // SAFETY: the kernel wrote `len` bytes (at most the storage's size)
    // into storage.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (&raw const storage).cast::<u8>(),
            (len as usize).min(std::mem::size_of::<libc::sockaddr_storage>()),
        )
    };
    socket_address(bytes)
}

fn attach_filter(fd: RawFd, prog: &[libc::sock_filter], lock: bool) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: u16::try_from(prog.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: fprog points at `prog`, alive for the call; the kernel
    // copies the program. A bad fd fails with EBADF.
    let ret = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&raw const fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    if lock {
        let one: libc::c_int = 1;
        // SAFETY: `one` is a c_int alive for the call.
        let ret = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_LOCK_FILTER,
                (&raw const one).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Length of the filter attached to `fd` (`SO_GET_FILTER`), 0 for none:
/// for tests and `ffd info` to see what the kernel holds.
pub fn attached_filter_len(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut len: libc::socklen_t = 0;
    // SAFETY: with a NULL buffer and a length of 0 the kernel only writes
    // the program's length (in instructions) into `len`.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_GET_FILTER,
            std::ptr::null_mut(),
            &mut len,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(len as usize)
}

const ETH_P_IP: u32 = 0x0800;
const ETH_P_IPV6: u32 = 0x86dd;
/// The kernel's bound on a classic BPF program (`BPF_MAXINSNS`).
const MAX_INSTRUCTIONS: usize = 4096;

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The classic BPF program that accepts a packet only when its network
/// header's source address is one of `allowed` (none: drops every
/// packet). IPv4 or IPv6 comes from `skb->protocol` (IPv4 packets reach a
/// dual-stack IPv6 socket with IPv4 headers); offsets are from the network
/// header (`SKF_NET_OFF`), so one program serves TCP and UDP.
///
/// Every conditional jump is short (at most 7 instructions), so the
/// program grows by 2 instructions per IPv4 address and 9 per IPv6
/// address, up to the kernel's 4096.
fn program(allowed: &[IpAddr]) -> Result<Vec<libc::sock_filter>, GuardError> {
    use libc::{
        BPF_ABS, BPF_H, BPF_JA, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W, SKF_AD_OFF,
        SKF_AD_PROTOCOL, SKF_NET_OFF,
    };
    const DROP: u32 = 0;
    const ACCEPT: u32 = u32::MAX;
    let net = |offset: u32| (SKF_NET_OFF as u32).wrapping_add(offset);
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for ip in allowed {
        match ip.to_canonical() {
            IpAddr::V4(a) => v4.push(u32::from(a)),
            IpAddr::V6(a) => v6.push(a.octets()),
        }
    }
    if v4.is_empty() && v6.is_empty() {
        return Ok(vec![stmt(BPF_RET | BPF_K, DROP)]);
    }
    // The IPv4 section: load the source, then per address "equal? accept".
    let mut v4_section = vec![stmt(BPF_LD | BPF_W | BPF_ABS, net(12))];
    for a in &v4 {
        v4_section.push(jump(BPF_JMP | BPF_JEQ | BPF_K, *a, 0, 1));
        v4_section.push(stmt(BPF_RET | BPF_K, ACCEPT));
    }
    v4_section.push(stmt(BPF_RET | BPF_K, DROP));
    // The IPv6 section (entered with the protocol still loaded): per
    // address, four words compared, a mismatch skipping to the next one.
    let mut v6_section = vec![
        jump(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IPV6, 1, 0),
        stmt(BPF_RET | BPF_K, DROP),
    ];
    for o in &v6 {
        for i in 0..4u8 {
            let at = 4 * usize::from(i);
            let word = u32::from_be_bytes([o[at], o[at + 1], o[at + 2], o[at + 3]]);
            v6_section.push(stmt(BPF_LD | BPF_W | BPF_ABS, net(8 + 4 * u32::from(i))));
            // A mismatch skips this address's remaining loads and compares
            // and its accept.
            v6_section.push(jump(BPF_JMP | BPF_JEQ | BPF_K, word, 0, 7 - 2 * i));
        }
        v6_section.push(stmt(BPF_RET | BPF_K, ACCEPT));
    }
    v6_section.push(stmt(BPF_RET | BPF_K, DROP));
    let mut prog = vec![
        stmt(
            BPF_LD | BPF_H | BPF_ABS,
            (SKF_AD_OFF + SKF_AD_PROTOCOL) as u32,
        ),
        // IPv4: on to the IPv4 section, over the jump to the IPv6 one.
        jump(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, 1, 0),
        stmt(BPF_JMP | BPF_JA, v4_section.len() as u32),
    ];
    prog.extend(v4_section);
    prog.extend(v6_section);
    if prog.len() > MAX_INSTRUCTIONS {
        return Err(GuardError::TooMany {
            addresses: v4.len() + v6.len(),
        });
    }
    Ok(prog)
}

#[cfg(any(test, feature = "fault-injection"))]
/// A TCP connection to `to` from `from` (port chosen by the kernel),
/// or the error of a handshake not completed `within`: what a stranger
/// does to a rank's port, for the tests (`fault-injection`).
pub fn connect_within(
    from: IpAddr,
    to: SocketAddr,
    within: std::time::Duration,
) -> io::Result<std::net::TcpStream> {
    let sock = super::liveness::tcp_socket(to)?;
    let fd = sock.as_raw_fd();
    let (src, src_len) = super::liveness::sockaddr_of(SocketAddr::new(from, 0));
    // SAFETY: src is a valid address of src_len bytes.
    if unsafe { libc::bind(fd, (&raw const src).cast(), src_len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let (dst, dst_len) = super::liveness::sockaddr_of(to);
    // SAFETY: dst is a valid address of dst_len bytes.
    let ret = unsafe { libc::connect(fd, (&raw const dst).cast(), dst_len) };
    if ret != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, within.as_millis() as libc::c_int) };
    if n == 0 {
        return Err(io::Error::from(io::ErrorKind::TimedOut));
    }
    let stream = std::net::TcpStream::from(sock);
    match stream.take_error()? {
        Some(e) => Err(e),
        None => Ok(stream),
    }
}

/// Every socket of this process whose local port is `port`: whether it
/// listens and the length of its filter (0: none). For the tests
/// (`fault-injection`): the listener and the sockets accepted from it.
#[cfg(any(test, feature = "fault-injection"))]
pub fn filters_at_port(port: u16) -> Vec<(bool, usize)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<RawFd>().ok())
        else {
            continue;
        };
        // SAFETY: as in `sockets_bound_to`: a descriptor closed since it
        // was listed makes the calls fail; the borrow ends here.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        if local_address(borrowed).is_none_or(|a| a.port() != port) {
            continue;
        }
        let listening = int_option(borrowed, libc::SO_ACCEPTCONN) == Some(1);
        let filter = attached_filter_len(borrowed).unwrap_or(0);
        found.push((listening, filter));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    /// Shorter than the first SYN retransmission (1 s): a dropped SYN
    /// shows as no connection within it.
    const DROPPED_WITHIN: Duration = Duration::from_millis(500);
    /// For an admitted handshake on loopback (well under a millisecond
    /// here): generous for a loaded machine.
    const HANDSHAKE_WITHIN: Duration = Duration::from_secs(10);

    fn connect_from(from: IpAddr, to: SocketAddr) -> io::Result<TcpStream> {
        connect_within(from, to, HANDSHAKE_WITHIN)
    }

    /// That a handshake from `from` to `to` does not complete.
    fn dropped(from: IpAddr, to: SocketAddr) -> Result<(), io::ErrorKind> {
        connect_within(from, to, DROPPED_WITHIN)
            .map(drop)
            .map_err(|e| e.kind())
    }

    fn guarded_listener(at: IpAddr) -> (TcpListener, SourceGuard) {
        let listener = TcpListener::bind((at, 0)).expect("listener");
        let addr = listener.local_addr().expect("address");
        let name = local_name(&listener);
        assert_eq!(socket_address(&name), Some(addr));
        let guard = SourceGuard::deny_all(&name).expect("deny-all attached");
        assert_eq!(guard.addr(), addr);
        (listener, guard)
    }

    /// The listener's address as `fi_getname` would give it: the raw
    /// `sockaddr` bytes.
    fn local_name(listener: &TcpListener) -> Vec<u8> {
        let mut storage: libc::sockaddr_storage =
            // SAFETY: plain data; all-zero is valid.
            unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: valid out-buffers.
        let ret =
            unsafe { libc::getsockname(listener.as_raw_fd(), (&raw mut storage).cast(), &mut len) };
        assert_eq!(ret, 0);
        // SAFETY: the kernel wrote len bytes.
        unsafe { std::slice::from_raw_parts((&raw const storage).cast::<u8>(), len as usize) }
            .to_vec()
    }

    #[test]
    fn deny_all_then_the_allowed_sources_only_and_locked() {
        let job = IpAddr::from([127, 0, 0, 1]);
        let stranger = IpAddr::from([127, 0, 0, 2]);
        let (listener, guard) = guarded_listener(job);
        let addr = listener.local_addr().unwrap();
        assert_eq!(
            dropped(job, addr),
            Err(io::ErrorKind::TimedOut),
            "deny-all lets nobody complete a handshake"
        );
        let filter = guard
            .allow(&[job, IpAddr::from([10, 9, 8, 7])])
            .expect("allowed");
        assert_eq!(filter.sockets, 1);
        assert_eq!(filter.allowed.len(), 2);
        assert_eq!(
            dropped(stranger, addr),
            Err(io::ErrorKind::TimedOut),
            "a source outside the list never completes its handshake"
        );
        let mut peer = connect_from(job, addr).expect("an allowed source connects");
        let (accepted, from) = listener.accept().expect("accepted");
        assert_eq!(from.ip(), job);
        // The accepted socket inherits the listener's filter.
        assert!(attached_filter_len(accepted.as_fd()).unwrap() > 0);
        use std::io::{Read, Write};
        peer.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        accepted.set_nonblocking(false).unwrap();
        (&accepted).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        // Locked: neither replaced nor detached.
        let again = attach_filter(listener.as_raw_fd(), &program(&[]).unwrap(), false);
        assert_eq!(again.unwrap_err().raw_os_error(), Some(libc::EPERM));
        let one: libc::c_int = 0;
        // SAFETY: valid option value.
        let detach = unsafe {
            libc::setsockopt(
                listener.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_DETACH_FILTER,
                (&raw const one).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(detach, -1);
    }

    #[test]
    fn ipv6_sources_are_filtered_too() {
        let Ok(probe) = TcpListener::bind("[::1]:0") else {
            // No IPv6 loopback in this environment: nothing to filter.
            return;
        };
        drop(probe);
        let job = IpAddr::from(Ipv6Addr::LOCALHOST);
        let (listener, guard) = guarded_listener(job);
        let addr = listener.local_addr().unwrap();
        // Only another address is allowed: ::1 is a stranger.
        guard
            .allow(&[IpAddr::from("fd00::1".parse::<Ipv6Addr>().unwrap())])
            .expect("allowed");
        assert_eq!(dropped(job, addr), Err(io::ErrorKind::TimedOut));
        let (listener2, guard2) = guarded_listener(job);
        guard2
            .allow(&[IpAddr::from([10, 0, 0, 1]), job])
            .expect("allowed");
        connect_from(job, listener2.local_addr().unwrap()).expect("::1 allowed");
    }

    #[test]
    fn a_name_that_is_no_socket_address_or_bound_to_nothing_is_refused() {
        assert!(matches!(
            SourceGuard::deny_all(&[1, 2, 3]),
            Err(GuardError::NotSocketAddress { len: 3 })
        ));
        // A port nobody listens on: take one, then free it.
        let free = TcpListener::bind("127.0.0.1:0").unwrap();
        let name = local_name(&free);
        drop(free);
        assert!(matches!(
            SourceGuard::deny_all(&name),
            Err(GuardError::NotFound(_))
        ));
    }

    #[test]
    fn the_program_fits_the_kernels_bound_or_says_why() {
        let many: Vec<IpAddr> = (0..2044u32)
            .map(|i| IpAddr::V4(Ipv4Addr::from((10u32 << 24) | i)))
            .collect();
        assert!(program(&many).unwrap().len() <= MAX_INSTRUCTIONS);
        let too_many: Vec<IpAddr> = (0..2100u32)
            .map(|i| IpAddr::V4(Ipv4Addr::from((10u32 << 24) | i)))
            .collect();
        assert!(matches!(
            program(&too_many),
            Err(GuardError::TooMany { addresses: 2100 })
        ));
        assert!(listens_on_sockets("tcp;ofi_rxm"));
        assert!(listens_on_sockets("sockets"));
        assert!(!listens_on_sockets("shm"));
        assert!(!listens_on_sockets("verbs;ofi_rxm"));
    }
}
