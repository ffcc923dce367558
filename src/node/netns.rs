//! A private network namespace for a one-host job (`ffd run`): its ranks'
//! fabric ports live on a loopback of their own, which no process outside
//! the job can reach, whatever its user.
//!
//! Owns: `unshare(2)` of the network namespace (with a user namespace that
//! maps only the caller's own uid and gid when it is not root) and bringing
//! the new namespace's `lo` up. Must not: be called once the process has
//! threads (a user namespace refuses a threaded caller, and the other
//! threads would stay outside).

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
