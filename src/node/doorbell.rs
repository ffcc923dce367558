//! A rank's doorbell: a Unix datagram socket bound to an abstract name
//! made of its host segment's name and its index there, in its progress
//! thread's epoll set (`pidfd.rs`'s [`super::ExitWatch`]), so that a
//! writer to its mailbox (`mailbox.rs`) wakes that thread itself, with one
//! `sendto` of one byte, instead of ringing the mail word for its
//! exit-word thread to pass on (two wake-ups). The bytes are never read
//! as anything: a datagram is only a wake-up.
//!
//! An abstract name has no permissions: any process of the network
//! namespace can find it (`/proc/net/unix`) and knock. So the socket
//! asks for its senders' credentials (`SO_PASSCRED`), and a drain that
//! finds a knock from another user (or one without credentials) reports
//! it: the owner then closes its doorbell for good and its writers ring
//! the mail word (`runtime/local.rs`). A stranger can cost a rank a
//! wake-up or two and the doorbell's speed, never a message, and nothing
//! it sends is parsed.
//!
//! Owns: the name, the bind, the knock, the drain and its credential
//! check. Must not: carry data, or block (both sockets are
//! non-blocking).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
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
    /// Binds `name` (abstract), asking for each sender's credentials;
    /// fails if it is taken.
    pub fn bind(name: &str) -> io::Result<Doorbell> {
        let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
        let socket = UnixDatagram::bind_addr(&addr)?;
        socket.set_nonblocking(true)?;
        let on: libc::c_int = 1;
        // SAFETY: a valid socket fd, and a c_int option value of its size.
        let ret = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PASSCRED,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Doorbell { socket })
    }

    /// Reads every waiting knock (they say nothing but "look"); returns
    /// how many came from another user than this process's, or carried no
    /// credentials.
    pub fn drain(&self) -> u32 {
        // SAFETY: getuid cannot fail.
        let me = unsafe { libc::getuid() };
        let mut foreign = 0u32;
        while let Some(uid) = self.recv_one() {
            foreign += u32::from(uid != Some(me));
        }
        foreign
    }

    /// One knock: `None` when none waits, else its sender's uid (`None`
    /// inside: no credentials came with it).
    fn recv_one(&self) -> Option<Option<libc::uid_t>> {
        let mut sink = [0u8; 16];
        let mut iov = libc::iovec {
            iov_base: sink.as_mut_ptr().cast(),
            iov_len: sink.len(),
        };
        // Room for one SCM_CREDENTIALS message, aligned for cmsghdr.
        let mut control = [0u64; 8];
        // SAFETY: msghdr is plain data; zeroed is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: `msg` points at `iov` (into `sink`) and `control`, all
        // live and writable for the call; the socket is non-blocking.
        let n = unsafe { libc::recvmsg(self.socket.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        if n < 0 {
            return None;
        }
        // SAFETY: the kernel filled `msg_control` up to `msg_controllen`;
        // CMSG_FIRSTHDR/NXTHDR stay within it.
        let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        while !cmsg.is_null() {
            // SAFETY: a non-null header returned by CMSG_FIRSTHDR/NXTHDR.
            let header = unsafe { &*cmsg };
            if header.cmsg_level == libc::SOL_SOCKET && header.cmsg_type == libc::SCM_CREDENTIALS {
                // SAFETY: an SCM_CREDENTIALS message's data is one ucred;
                // read unaligned, as cmsg data need not be aligned for it.
                let cred: libc::ucred =
                    unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast()) };
                return Some(Some(cred.uid));
            }
            // SAFETY: as above.
            cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
        }
        Some(None)
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
        assert_eq!(door.drain(), 0, "this process's own user");
        assert!(!readable(&door));
        drop(door);
        assert!(!knocker.knock(&name), "gone with its owner");
        a_knock_from_another_user_is_reported_foreign();
    }

    /// A knock from another user is told apart (as root: a child as
    /// `nobody` knocks; elsewhere there is no other user to be). Called
    /// from the test above, after its drop: run beside it, the child
    /// forked here would hold that test's socket until it execs.
    fn a_knock_from_another_user_is_reported_foreign() {
        use std::os::unix::process::CommandExt;
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: only root can knock as another user");
            return;
        }
        let name = door_name(&format!("/ffd-test-foreign-{}", std::process::id()), 0);
        let door = Doorbell::bind(&name).unwrap();
        let script = format!(
            "import socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); \
             s.sendto(b'x', b'\\0' + {name:?}.encode())"
        );
        let status = std::process::Command::new("python3")
            .args(["-c", &script])
            .uid(65534)
            .gid(65534)
            .status()
            .expect("python3 runs");
        assert!(status.success(), "the knock as nobody: {status}");
        Knocker::new().unwrap().knock(&name);
        assert_eq!(door.drain(), 1, "one knock of nobody's, one of ours");
    }
}
