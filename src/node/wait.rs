//! The idle wait of a progress thread that has no fabric endpoint (a
//! one-host job, `runtime/transport.rs`): sleep until one fd is readable
//! or a timeout passes.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// Sleeps until `fd` is readable (or hung up) or `timeout` passes, to the
/// nanosecond (`ppoll`). Returns whether `fd` may be readable: `true`
/// also when a signal cut the sleep short, so the caller looks.
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> std::io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `pfd` is one valid pollfd for an fd `fd` keeps open during
    // the call, `ts` a valid timespec (tv_nsec < 1e9); a null signal mask
    // leaves the thread's mask alone. ppoll writes only `pfd.revents`.
    let ret = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    if ret < 0 {
        let e = std::io::Error::last_os_error();
        return if e.kind() == std::io::ErrorKind::Interrupted {
            Ok(true)
        } else {
            Err(e)
        };
    }
    Ok(ret > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::time::Instant;

    #[test]
    fn it_returns_on_a_byte_at_once_and_otherwise_after_the_timeout() {
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let t = Instant::now();
        assert!(!wait_readable(a.as_fd(), Duration::from_millis(20)).unwrap());
        assert!(t.elapsed() >= Duration::from_millis(20));
        b.write_all(&[1]).unwrap();
        let t = Instant::now();
        assert!(wait_readable(a.as_fd(), Duration::from_secs(60)).unwrap());
        assert!(t.elapsed() < Duration::from_secs(30));
    }
}
