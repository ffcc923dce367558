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

    /// [`spawn_inside`](Self::spawn_inside) for a tool that configures the
    /// namespace (`ip`, `tc`): when this process is not root, it keeps
    /// `CAP_NET_ADMIN` across exec as an ambient capability. In the user
    /// namespace `ffd run` made for itself the process holds every
    /// capability, but only its own uid is mapped, so a program it execs
    /// would otherwise start with none, and the kernel would refuse its
    /// changes to the namespace's links.
    pub fn spawn_admin_inside(&self, command: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        self.spawn_inside(command);
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            return;
        }
        // SAFETY: the closure runs in the forked child before exec and
        // makes only the capget/capset/prctl system calls on stack data.
        unsafe {
            command.pre_exec(keep_net_admin_across_exec);
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

    /// Makes `command` start with this network namespace open as its
    /// descriptor `fd` (so that it can name it as `/proc/self/fd/<fd>`,
    /// e.g. `ip link ... netns /proc/self/fd/3`). `fd` must be above 2.
    pub fn pass_net_as(&self, command: &mut std::process::Command, fd: std::os::fd::RawFd) {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let net = self.net.as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec (after
        // its stdio is in place) and makes one dup2(2) call, whose copy
        // is not close-on-exec.
        unsafe {
            command.pre_exec(move || {
                if libc::dup2(net, fd) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
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

/// `CAP_NET_ADMIN` (linux/capability.h).
const CAP_NET_ADMIN: u32 = 12;
/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// `PR_CAP_AMBIENT`, `PR_CAP_AMBIENT_RAISE` (linux/prctl.h).
const PR_CAP_AMBIENT: libc::c_int = 47;
const PR_CAP_AMBIENT_RAISE: libc::c_ulong = 2;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Adds `CAP_NET_ADMIN` to the calling thread's inheritable and ambient
/// sets (it must be permitted), so that a program it execs keeps it.
/// Allocates nothing: safe between fork and exec.
fn keep_net_admin_across_exec() -> io::Result<()> {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: header and two data words are valid, writable, and of the
    // layout version 3 asks for; capget writes only them.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    data[0].inheritable |= 1 << CAP_NET_ADMIN;
    // SAFETY: as above; capset reads them.
    if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let cap = libc::c_ulong::from(CAP_NET_ADMIN);
    // SAFETY: prctl with integer arguments only.
    if unsafe {
        libc::prctl(
            PR_CAP_AMBIENT,
            PR_CAP_AMBIENT_RAISE,
            cap,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
