//! Process file descriptors: `pidfd_open(2)` (Linux ≥ 5.3) gives an fd
//! that becomes readable when the process exits, and an epoll set that
//! holds them with the progress thread's wake socket, so one `poll` on
//! the epoll fd wakes the thread for a command, a completion-queue event
//! (the caller polls the CQ fd beside it) or an exit.
//!
//! Owns: opening, polling and closing pidfds and the epoll set. Must not:
//! trust a pid by itself (the caller checks the pid namespace and start
//! time, see `runtime::local`), or block.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Why a pidfd could not be had for a process.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PidfdUnavailable {
    #[error("pidfd_open is not supported by this kernel (Linux 5.3 or later needed)")]
    NotSupported,
    #[error("pidfd_open was refused: no permission (seccomp or a security module)")]
    NoPermission,
    #[error("process {pid} does not exist")]
    NoSuchProcess { pid: u32 },
    #[error("pidfd_open failed: {0}")]
    Other(String),
}

/// An open pidfd: readable once the process has exited.
#[derive(Debug)]
pub struct PidFd {
    fd: OwnedFd,
    pid: u32,
}

impl PidFd {
    /// Opens a pidfd for `pid` (of this process's pid namespace).
    pub fn open(pid: u32) -> Result<PidFd, PidfdUnavailable> {
        let Ok(raw_pid) = libc::pid_t::try_from(pid) else {
            return Err(PidfdUnavailable::NoSuchProcess { pid });
        };
        // SAFETY: pidfd_open takes a pid and flags (0) and returns a new fd
        // or -1; it touches no memory of ours.
        let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, raw_pid, 0) };
        if ret < 0 {
            let err = io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::ENOSYS) => PidfdUnavailable::NotSupported,
                Some(libc::EPERM) | Some(libc::EACCES) => PidfdUnavailable::NoPermission,
                Some(libc::ESRCH) => PidfdUnavailable::NoSuchProcess { pid },
                _ => PidfdUnavailable::Other(err.to_string()),
            });
        }
        let Ok(raw) = RawFd::try_from(ret) else {
            return Err(PidfdUnavailable::Other(format!("fd {ret} out of range")));
        };
        // SAFETY: `raw` is the fresh fd pidfd_open returned; nothing else
        // owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(PidFd { fd, pid })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process has exited (the pidfd is readable), now.
    pub fn exited(&self) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, a zero timeout: poll returns at once.
        let ret = unsafe { libc::poll(&mut pfd, 1, 0) };
        ret > 0 && pfd.revents != 0
    }
}

impl AsFd for PidFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Whether this process may open pidfds at all, or why not (for `ffd
/// info`): it opens one for itself.
pub fn pidfd_probe() -> Result<(), PidfdUnavailable> {
    PidFd::open(std::process::id()).map(drop)
}

/// An epoll set of the watched pidfds and the wake socket. Its own fd is
/// readable when any of them is: hand it to the completion queue's wait
/// as the wake fd.
#[derive(Debug)]
pub struct ExitWatch {
    epoll: OwnedFd,
    /// The watched pidfds, with a token each (the caller's rank).
    watched: Vec<(u64, PidFd)>,
    /// An exit-word eventfd is in the set.
    bell: bool,
    /// This rank's doorbell (`doorbell.rs`), in the set: drained here.
    door: Option<super::Doorbell>,
    /// Knocks from another user found by the drains; the first closes the
    /// doorbell (`doorbell.rs`).
    foreign_knocks: u64,
}

/// The token of the wake socket in the epoll set.
const WAKE_TOKEN: u64 = u64::MAX;
/// The token of the exit words' eventfd.
const BELL_TOKEN: u64 = u64::MAX - 1;
/// The token of the doorbell.
const DOOR_TOKEN: u64 = u64::MAX - 2;

impl ExitWatch {
    /// An epoll set holding `wake` (a readable socket that asks the thread
    /// for attention), `pidfds`, each with its token, and `bell` (the exit
    /// words' eventfd: readable like `wake`, read by their owner).
    pub fn new(
        wake: BorrowedFd<'_>,
        pidfds: Vec<(u64, PidFd)>,
        bell: Option<BorrowedFd<'_>>,
    ) -> io::Result<ExitWatch> {
        // SAFETY: epoll_create1 takes flags and returns a new fd or -1.
        let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is the fresh fd epoll_create1 returned.
        let epoll = unsafe { OwnedFd::from_raw_fd(raw) };
        let watch = ExitWatch {
            epoll,
            watched: pidfds,
            bell: bell.is_some(),
            door: None,
            foreign_knocks: 0,
        };
        watch.add(wake, WAKE_TOKEN)?;
        if let Some(bell) = bell {
            watch.add(bell, BELL_TOKEN)?;
        }
        for (token, fd) in &watch.watched {
            watch.add(fd.as_fd(), *token)?;
        }
        Ok(watch)
    }

    fn add(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: both fds are open (`fd` is borrowed for the call), `ev`
        // is a valid event the kernel copies.
        let ret = unsafe {
            libc::epoll_ctl(
                self.epoll.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                fd.as_raw_fd(),
                &mut ev,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Takes `fd` out of the set (an fd not in it is left as it is).
    fn remove(&self, fd: BorrowedFd<'_>) {
        // SAFETY: both fds are open (`fd` is borrowed for the call); a
        // null event is allowed for EPOLL_CTL_DEL.
        unsafe {
            libc::epoll_ctl(
                self.epoll.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd.as_raw_fd(),
                std::ptr::null_mut(),
            );
        }
    }

    /// How many processes are watched.
    pub fn len(&self) -> usize {
        self.watched.len()
    }

    /// Adds this rank's doorbell to the set; the set drains it when it
    /// is readable ([`Self::take_exited`]).
    pub fn add_door(&mut self, door: super::Doorbell) -> io::Result<()> {
        self.add(door.as_fd(), DOOR_TOKEN)?;
        self.door = Some(door);
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.watched.is_empty()
    }

    /// Knocks from another user on the doorbell so far; once there is
    /// one, the doorbell is out of the set: the owner takes it
    /// ([`Self::take_door`]), tells its writers, and closes it.
    pub fn foreign_knocks(&self) -> u64 {
        self.foreign_knocks
    }

    /// The doorbell, out of the set (`None` once taken): dropping it
    /// closes its socket, so tell its writers first.
    pub fn take_door(&mut self) -> Option<super::Doorbell> {
        self.door.take()
    }

    /// The tokens of the watched processes that exited since the last
    /// call, now; they are no longer watched. Returns whether the exit
    /// words' eventfd is readable (its owner reads it).
    pub fn take_exited(&mut self, out: &mut Vec<u64>) -> bool {
        let mut rung = false;
        if self.watched.is_empty() && !self.bell && self.door.is_none() {
            return rung;
        }
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 16];
        loop {
            // SAFETY: `events` holds 16 writable entries; timeout 0
            // returns at once.
            let n = unsafe {
                libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as i32,
                    0,
                )
            };
            if n <= 0 {
                return rung;
            }
            let mut any = false;
            for ev in &events[..n as usize] {
                let token = ev.u64;
                if token == WAKE_TOKEN {
                    continue;
                }
                if token == BELL_TOKEN {
                    rung = true;
                    continue;
                }
                if token == DOOR_TOKEN {
                    // Only a wake-up: the mailbox is read every turn. A
                    // stranger's knock closes the doorbell for good.
                    let foreign = self.door.as_ref().map_or(0, super::Doorbell::drain);
                    if foreign > 0 && self.foreign_knocks == 0 {
                        if let Some(door) = &self.door {
                            // Out of the set; the socket stays bound (so
                            // its name cannot be taken) until the owner
                            // has told its writers ([`Self::take_door`]).
                            self.remove(door.as_fd());
                        }
                    }
                    self.foreign_knocks += u64::from(foreign);
                    continue;
                }
                if let Some(i) = self.watched.iter().position(|(t, _)| *t == token) {
                    let (_, fd) = self.watched.swap_remove(i);
                    self.remove(fd.as_fd());
                    out.push(token);
                    any = true;
                }
            }
            if !any || (n as usize) < events.len() {
                return rung;
            }
        }
    }
}

impl AsFd for ExitWatch {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::process::Command;

    #[test]
    fn an_exit_makes_the_pidfd_and_the_epoll_set_readable() {
        if pidfd_probe().is_err() {
            eprintln!("skipped: pidfd_open is not available here");
            return;
        }
        let (wake, _other) = UnixStream::pair().unwrap();
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let fd = PidFd::open(child.id()).unwrap();
        assert!(!fd.exited());
        let mut watch = ExitWatch::new(wake.as_fd(), vec![(7, fd)], None).unwrap();
        let mut out = Vec::new();
        watch.take_exited(&mut out);
        assert!(out.is_empty());
        child.kill().unwrap();
        child.wait().unwrap();
        watch.take_exited(&mut out);
        assert_eq!(out, vec![7]);
        assert!(watch.is_empty());
        watch.take_exited(&mut out);
        assert_eq!(out, vec![7], "reported once");
    }

    #[test]
    fn a_missing_process_is_named() {
        // Pid 2^22 + 1 is above the default pid_max of this machine's kind.
        match PidFd::open(4_194_305) {
            Err(PidfdUnavailable::NoSuchProcess { pid }) => assert_eq!(pid, 4_194_305),
            Err(PidfdUnavailable::NotSupported) => {}
            other => panic!("{other:?}"),
        }
    }
}
