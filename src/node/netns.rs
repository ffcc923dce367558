//! A private network namespace for a one-host job (`ffd run`): its ranks'
//! fabric ports live on a loopback of their own, which no process outside
//! the job can reach, whatever its user.
//!
//! Also the namespaces of `ffd run --netns`: one network and UTS namespace
//! per emulated host ([`Namespaces`]), joined by the launcher.
//!
//! Owns: `unshare(2)` of the network namespace (with a user namespace that
//! maps only the caller's own uid and gid when it is not root), bringing
//! the new namespace's `lo` up, and for [`Namespaces`] the `unshare`,
//! `sethostname` and `setns(2)` calls, each on a thread of its own or in a
//! child between fork and exec. Must not: enter the private network once
//! the process has threads (a user namespace refuses a threaded caller,
//! and the other threads would stay outside), or name a namespace in the
//! file system (nothing must outlive the job).

use std::io;

/// How the private network namespace was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrivateNetwork {
    /// As root: a network namespace.
    Root,
    /// As another user: a user namespace mapping only its own uid and gid,
    /// and a network namespace owned by it.
    UserNamespace,
}

/// Moves the calling process into a new network namespace whose only
/// interface is an `lo` that is up (127.0.0.1 and ::1). Processes it starts
/// afterwards are in it too. Call before any thread is started.
pub fn enter_private_network() -> io::Result<PrivateNetwork> {
    // SAFETY: getuid/getgid/geteuid cannot fail.
    let (uid, gid, euid) = unsafe { (libc::getuid(), libc::getgid(), libc::geteuid()) };
    let kind = if euid == 0 {
        PrivateNetwork::Root
    } else {
        PrivateNetwork::UserNamespace
    };
    let flags = match kind {
        PrivateNetwork::Root => libc::CLONE_NEWNET,
        PrivateNetwork::UserNamespace => libc::CLONE_NEWUSER | libc::CLONE_NEWNET,
    };
    // SAFETY: unshare only changes this process's namespaces; it fails
    // (EINVAL) for a user namespace when the process has threads.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if kind == PrivateNetwork::UserNamespace {
        // Map only ourselves: files keep their owners, processes their ids.
        std::fs::write("/proc/self/setgroups", "deny")?;
        std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    }
    loopback_up()?;
    Ok(kind)
}

/// Sets `IFF_UP` on `lo` (a new namespace starts with it down).
fn loopback_up() -> io::Result<()> {
    // SAFETY: plain socket(2); the result is checked and closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: ifreq is plain data; all-zero is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: req is a valid ifreq naming `lo`; SIOCGIFFLAGS fills its
    // flags.
    let mut ret = unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) };
    if ret == 0 {
        // SAFETY: the flags member was just written by the kernel.
        unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
        // SAFETY: as above; SIOCSIFFLAGS reads the flags.
        ret = unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) };
    }
    let err = io::Error::last_os_error();
    // SAFETY: fd is ours and closed once.
    unsafe { libc::close(fd) };
    if ret != 0 {
        return Err(err);
    }
    Ok(())
}

/// The namespaces of an emulated host of `ffd run --netns` (or of the
/// job's switch, which holds the bridge): a network namespace and a UTS
/// namespace with a hostname of its own, both anonymous and held open by
/// this value. Nothing names them in the file system, so nothing outlives
/// the job: each is freed by the kernel once this value is dropped and the
/// last process inside has exited, whatever way the launcher ended (the
/// veth pairs and a bridge inside go with them).
#[derive(Debug)]
pub struct Namespaces {
    net: std::fs::File,
    uts: std::fs::File,
}

impl Namespaces {
    /// A new network namespace whose `lo` is up and a new UTS namespace
    /// whose hostname is `hostname`. Made on a thread of its own (network
    /// and UTS namespaces belong to a thread), so this may be called
    /// however many threads the process has.
    pub fn create(hostname: &str) -> io::Result<Namespaces> {
        let name = std::ffi::CString::new(hostname)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the hostname"))?;
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: unshare only moves this thread (it ends below) into
                // new namespaces; the process's other threads stay where they are.
                if unsafe { libc::unshare(libc::CLONE_NEWNET | libc::CLONE_NEWUTS) } != 0 {
                    return Err(io::Error::last_os_error());
                }
                let bytes = name.as_bytes();
                // SAFETY: `bytes` is valid for its length; sethostname copies it.
                if unsafe { libc::sethostname(bytes.as_ptr().cast(), bytes.len()) } != 0 {
                    return Err(io::Error::last_os_error());
                }
                loopback_up()?;
                Ok(Namespaces {
                    net: std::fs::File::open("/proc/thread-self/ns/net")?,
                    uts: std::fs::File::open("/proc/thread-self/ns/uts")?,
                })
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
        })
    }

    /// Makes `command` start inside these namespaces (it joins them
    /// between fork and exec). Spawn it while `self` lives.
    pub fn spawn_inside(&self, command: &mut std::process::Command) {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let (net, uts) = (self.net.as_raw_fd(), self.uts.as_raw_fd());
        // SAFETY: the closure runs in the forked child before exec; it
        // makes two setns(2) calls on descriptors the child inherited (the
        // parent holds them open while it spawns) and allocates nothing
        // (an Os error holds only the errno).
        unsafe {
            command.pre_exec(move || {
                if libc::setns(net, libc::CLONE_NEWNET) != 0
                    || libc::setns(uts, libc::CLONE_NEWUTS) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Runs `f` on a thread inside these namespaces: a socket it makes
    /// lives in this network namespace (and stays there afterwards).
    pub fn run_inside<T: Send>(&self, f: impl FnOnce() -> T + Send) -> io::Result<T> {
        use std::os::fd::AsRawFd;
        let (net, uts) = (self.net.as_raw_fd(), self.uts.as_raw_fd());
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: setns moves only this thread (it ends after `f`)
                // into the namespaces `self` holds open.
                if unsafe { libc::setns(net, libc::CLONE_NEWNET) } != 0
                    || unsafe { libc::setns(uts, libc::CLONE_NEWUTS) } != 0
                {
                    return Err(io::Error::last_os_error());
                }
                Ok(f())
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
        })
    }

    /// A path that opens the network namespace while `self` lives (for
    /// `ip link ... netns PATH`): `/proc/<pid>/fd/<fd>`.
    pub fn net_path(&self) -> std::path::PathBuf {
        use std::os::fd::AsRawFd;
        format!("/proc/{}/fd/{}", std::process::id(), self.net.as_raw_fd()).into()
    }

    /// The network namespace's identity as `/proc/PID/ns/net` reads:
    /// `net:[INODE]`.
    pub fn net_id(&self) -> io::Result<String> {
        use std::os::unix::fs::MetadataExt;
        Ok(format!("net:[{}]", self.net.metadata()?.ino()))
    }

    /// The UTS namespace's identity: `uts:[INODE]`.
    pub fn uts_id(&self) -> io::Result<String> {
        use std::os::unix::fs::MetadataExt;
        Ok(format!("uts:[{}]", self.uts.metadata()?.ino()))
    }
}
