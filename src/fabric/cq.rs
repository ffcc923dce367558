//! Completion queues: reading completions and error entries, and sleeping
//! until one arrives.
//!
//! Owns: `fi_cq_open` with the best wait object the provider offers, reads
//! (`fi_cq_read`/`fi_cq_readfrom`), error reads (`fi_cq_readerr`,
//! `fi_cq_strerror`), and waiting (`FI_WAIT_FD` + `fi_trywait` + ppoll(2),
//! or `fi_cq_sread`, or short sleeps when there is no wait object). Must
//! not: interpret op contexts; the endpoint does that.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libfabric_sys as sys;

use super::Domain;
use super::error::{FabricError, NormalisedErr, check, normalise};
use super::resources::{DomainInner, FiAddr, close_fid};

/// How a completion queue can be slept on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitKind {
    /// `FI_WAIT_FD`: a file descriptor for epoll/poll; check
    /// [`CompletionQueue::try_wait`] before blocking on it.
    Fd,
    /// `FI_WAIT_UNSPEC`: the provider's own wait object, used through
    /// `fi_cq_sread` with a timeout. Only on explicit request: `shm` (1.17)
    /// accepts it but its `fi_cq_sread` ignores the timeout and blocks
    /// until a completion arrives.
    Sread,
    /// `FI_WAIT_NONE`: no wait object; waiting polls with short sleeps.
    None,
}

/// Which wait object to ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WaitPreference {
    /// `FI_WAIT_FD`, else none (polling with short sleeps). Skips
    /// [`WaitKind::Sread`], whose timeout is not honoured everywhere.
    #[default]
    Auto,
    /// Exactly this one, or fail.
    Only(WaitKind),
}

/// One completion (`struct fi_cq_msg_entry`).
#[derive(Clone, Copy, Debug, Default)]
#[repr(transparent)]
pub struct CqEntry(sys::fi_cq_msg_entry);

impl CqEntry {
    /// `op_context` as an integer; `None` when NULL.
    pub fn context(&self) -> Option<usize> {
        let c = self.0.op_context as usize;
        (c != 0).then_some(c)
    }
    /// The completion flags (`FI_SEND`, `FI_RECV`, `FI_RMA | FI_WRITE`, ...).
    pub fn flags(&self) -> u64 {
        self.0.flags
    }
    /// Bytes received (receives only).
    pub fn len(&self) -> usize {
        self.0.len
    }
    /// True when no bytes were transferred.
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }
}

/// The outcome of one read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqRead {
    /// This many entries were written to the front of the buffer.
    Entries(usize),
    /// Nothing completed (`-FI_EAGAIN`).
    Empty,
    /// An error entry is waiting: call [`CompletionQueue::read_error`].
    ErrorAvailable,
}

/// An error entry, normalised, with the provider's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawCqError {
    /// Normalised fields (positive `err`, NULL context as `None`).
    pub(crate) fields: NormalisedErr,
    /// `fi_cq_strerror` for the entry.
    pub prov_text: String,
}

impl RawCqError {
    /// `|err|`.
    pub fn err(&self) -> i32 {
        self.fields.err
    }
    /// The provider's errno, sign untouched.
    pub fn prov_errno(&self) -> i32 {
        self.fields.prov_errno
    }
    /// `op_context`, `None` when NULL.
    pub fn context(&self) -> Option<usize> {
        self.fields.context
    }
    /// The entry's flags.
    pub fn flags(&self) -> u64 {
        self.fields.flags
    }
}

pub(crate) struct CqInner {
    pub(crate) domain: Arc<DomainInner>,
    pub(crate) raw: *mut sys::fid_cq,
    wait: WaitKind,
    fd: Option<RawFd>,
}

// SAFETY: FI_THREAD_SAFE domain (see resources::FabricInner).
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        // SAFETY: raw is live; endpoints bound to it hold an Arc to this
        // inner, so they are closed already. The wait fd belongs to the CQ
        // and is closed by it.
        unsafe { close_fid(&mut (*self.raw).fid) };
    }
}

/// A completion queue (`FI_CQ_FORMAT_MSG`).
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

impl CompletionQueue {
    /// Opens a queue of `size` entries with the wait object `want` asks for.
    pub fn open(
        domain: &Domain,
        size: usize,
        want: WaitPreference,
    ) -> Result<CompletionQueue, FabricError> {
        let order: &[WaitKind] = match want {
            WaitPreference::Auto => &[WaitKind::Fd, WaitKind::None],
            WaitPreference::Only(WaitKind::Fd) => &[WaitKind::Fd],
            WaitPreference::Only(WaitKind::Sread) => &[WaitKind::Sread],
            WaitPreference::Only(WaitKind::None) => &[WaitKind::None],
        };
        let mut last = None;
        for &kind in order {
            match Self::open_with(domain, size, kind) {
                Ok(cq) => return Ok(cq),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("at least one wait kind was tried"))
    }

    fn open_with(
        domain: &Domain,
        size: usize,
        kind: WaitKind,
    ) -> Result<CompletionQueue, FabricError> {
        let mut attr = sys::fi_cq_attr {
            size,
            format: sys::FI_CQ_FORMAT_MSG,
            wait_obj: match kind {
                WaitKind::Fd => sys::FI_WAIT_FD,
                WaitKind::Sread => sys::FI_WAIT_UNSPEC,
                WaitKind::None => sys::FI_WAIT_NONE,
            },
            wait_cond: sys::FI_CQ_COND_NONE,
            ..Default::default()
        };
        let mut raw = ptr::null_mut();
        // SAFETY: domain is live; attr and raw are valid for the call.
        let ret =
            unsafe { sys::fi_cq_open(domain.inner.raw, &mut attr, &mut raw, ptr::null_mut()) };
        check("fi_cq_open", ret)?;
        let mut inner = CqInner {
            domain: domain.inner.clone(),
            raw,
            wait: kind,
            fd: None,
        };
        if kind == WaitKind::Fd {
            let mut fd: libc::c_int = -1;
            // SAFETY: the CQ is live and was opened with FI_WAIT_FD, for
            // which FI_GETWAIT writes one int.
            let ret = unsafe {
                sys::fi_control(
                    &mut (*raw).fid,
                    sys::FI_GETWAIT as i32,
                    (&mut fd as *mut libc::c_int).cast(),
                )
            };
            // On failure `inner` drops here and closes the CQ.
            check("fi_control(FI_GETWAIT)", ret)?;
            if fd < 0 {
                return Err(FabricError::Invalid(
                    "fi_control(FI_GETWAIT) returned no file descriptor".into(),
                ));
            }
            inner.fd = Some(fd);
        }
        Ok(CompletionQueue {
            inner: Arc::new(inner),
        })
    }

    /// The wait object this queue got.
    pub fn wait_kind(&self) -> WaitKind {
        self.inner.wait
    }

    /// The file descriptor to put in an epoll set (with `FI_WAIT_FD`).
    /// Call [`try_wait`](Self::try_wait) before every sleep on it. Owned
    /// by the queue: do not close it.
    pub fn wait_fd(&self) -> Option<RawFd> {
        self.inner.fd
    }

    /// `fi_trywait`: `Ok(true)` when it is safe to block on the wait fd,
    /// `Ok(false)` when completions (or provider work) are pending and the
    /// queue must be read first.
    pub fn try_wait(&self) -> Result<bool, FabricError> {
        let mut fid: *mut sys::fid = self.fid();
        // SAFETY: the fabric and the CQ are live (the CQ holds its domain,
        // which holds the fabric); fids is an array of one live fid.
        let ret = unsafe { sys::fi_trywait(self.inner.domain.fabric().raw, &mut fid, 1) };
        if ret == 0 {
            Ok(true)
        } else if ret == -sys::FI_EAGAIN {
            Ok(false)
        } else {
            Err(FabricError::call("fi_trywait", ret))
        }
    }

    fn fid(&self) -> *mut sys::fid {
        // SAFETY: raw is a live CQ; taking the address of its first member
        // does not read or write it.
        unsafe { &raw mut (*self.inner.raw).fid }
    }

    /// Reads up to `out.len()` completions. With `src`, also the senders'
    /// addresses (`fi_cq_readfrom`; needs `FI_SOURCE`), one per entry.
    pub fn read(
        &self,
        out: &mut [CqEntry],
        src: Option<&mut [FiAddr]>,
    ) -> Result<CqRead, FabricError> {
        let ret = match src {
            Some(src) => {
                let n = out.len().min(src.len());
                // SAFETY: the CQ is live; out holds n writable
                // fi_cq_msg_entry and src n writable fi_addr_t (CqEntry and
                // FiAddr are repr(transparent) over those types).
                unsafe {
                    sys::fi_cq_readfrom(
                        self.inner.raw,
                        out.as_mut_ptr().cast(),
                        n,
                        src.as_mut_ptr().cast(),
                    )
                }
            }
            // SAFETY: the CQ is live; out holds out.len() writable entries
            // in the format the CQ was opened with (FI_CQ_FORMAT_MSG).
            None => unsafe { sys::fi_cq_read(self.inner.raw, out.as_mut_ptr().cast(), out.len()) },
        };
        Self::classify("fi_cq_read", ret)
    }

    /// Blocks up to `timeout` for completions (`fi_cq_sread`); needs a wait
    /// object ([`WaitKind::Fd`] or [`WaitKind::Sread`]).
    pub fn sread(
        &self,
        out: &mut [CqEntry],
        src: Option<&mut [FiAddr]>,
        timeout: Duration,
    ) -> Result<CqRead, FabricError> {
        if self.inner.wait == WaitKind::None {
            return Err(FabricError::Invalid(
                "fi_cq_sread needs a wait object; this queue has none".into(),
            ));
        }
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        let ret = match src {
            Some(src) => {
                let n = out.len().min(src.len());
                // SAFETY: as in read(); cond is NULL (wait_cond NONE).
                unsafe {
                    sys::fi_cq_sreadfrom(
                        self.inner.raw,
                        out.as_mut_ptr().cast(),
                        n,
                        src.as_mut_ptr().cast(),
                        ptr::null(),
                        ms,
                    )
                }
            }
            // SAFETY: as in read(); cond is NULL (wait_cond NONE).
            None => unsafe {
                sys::fi_cq_sread(
                    self.inner.raw,
                    out.as_mut_ptr().cast(),
                    out.len(),
                    ptr::null(),
                    ms,
                )
            },
        };
        Self::classify("fi_cq_sread", ret)
    }

    fn classify(call: &'static str, ret: isize) -> Result<CqRead, FabricError> {
        if ret > 0 {
            Ok(CqRead::Entries(ret as usize))
        } else if ret == 0 || ret == -(sys::FI_EAGAIN as isize) {
            Ok(CqRead::Empty)
        } else if ret == -(sys::FI_EAVAIL as isize) {
            Ok(CqRead::ErrorAvailable)
        } else {
            Err(FabricError::call(call, ret as i64))
        }
    }

    /// Reads one error entry (`fi_cq_readerr`), normalised. `Ok(None)` when
    /// there is none.
    pub fn read_error(&self) -> Result<Option<RawCqError>, FabricError> {
        let mut entry = sys::fi_cq_err_entry::default();
        // SAFETY: the CQ is live; entry is a zeroed fi_cq_err_entry, so
        // err_data_size is 0 and the provider points err_data at its own
        // buffer (valid until the next readerr on this CQ).
        let ret = unsafe { sys::fi_cq_readerr(self.inner.raw, &mut entry, 0) };
        if ret == -(sys::FI_EAGAIN as isize) || ret == 0 {
            return Ok(None);
        }
        if ret < 0 {
            return Err(FabricError::call("fi_cq_readerr", ret as i64));
        }
        // SAFETY: the CQ is live; prov_errno and err_data come from the
        // entry just read, as fi_cq_strerror expects; with a NULL buffer it
        // returns a string owned by the provider (or NULL).
        let text = unsafe {
            let p = sys::fi_cq_strerror(
                self.inner.raw,
                entry.prov_errno,
                entry.err_data,
                ptr::null_mut(),
                0,
            );
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        Ok(Some(RawCqError {
            fields: normalise(&entry),
            prov_text: text,
        }))
    }

    /// Sleeps until the queue may have something to read, or `timeout`
    /// passes, without consuming entries. With [`WaitKind::Fd`]:
    /// `fi_trywait`, then poll(2) on the fd. Otherwise this returns at
    /// once for [`WaitKind::Sread`] (use [`sread`](Self::sread)) and sleeps
    /// at most 1 ms for [`WaitKind::None`]. Returns whether the fd fired.
    pub fn wait_readable(&self, timeout: Duration) -> Result<bool, FabricError> {
        match (self.inner.wait, self.inner.fd) {
            (WaitKind::Fd, Some(fd)) => {
                if !self.try_wait()? {
                    return Ok(true);
                }
                poll_fd(fd, timeout)
            }
            (WaitKind::None, _) => {
                std::thread::sleep(timeout.min(Duration::from_millis(1)));
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    /// Like [`wait_readable`](Self::wait_readable), but also returns as
    /// soon as `wake` becomes readable (an embedder's thread asking the progress
    /// thread for attention). Without a wait fd it sleeps at most 1 ms, so
    /// `wake` is noticed within a millisecond there too. Returns which of
    /// the queue and `wake` may be readable: both when it could not tell
    /// (no wait fd, or `fi_trywait` found the queue busy). `armed` says
    /// that the last wait's `fi_trywait` succeeded, that wait timed out on
    /// the queue, and the provider was not called since: the fd is still
    /// armed, and this wait skips `fi_trywait` (on `ofi_rxm` it runs the
    /// provider's progress, most of an idle wake-up's system time).
    /// `pause`: how long to sleep on `wake` alone when `fi_trywait` finds
    /// the queue busy (zero: return at once), for a caller whose last
    /// reads after such a refusal found nothing (see
    /// [`Endpoint::wait_or`](crate::fabric::Endpoint::wait_or)).
    pub fn wait_readable_or(
        &self,
        timeout: Duration,
        wake: BorrowedFd<'_>,
        armed: bool,
        pause: Duration,
    ) -> Result<Readiness, FabricError> {
        match (self.inner.wait, self.inner.fd) {
            (WaitKind::Fd, Some(fd)) => {
                if !armed && !self.try_wait()? {
                    if pause.is_zero() {
                        return Ok(Readiness::REFUSED);
                    }
                    // The queue's fd cannot be trusted to sleep on (the
                    // provider says it has work), and reading at once
                    // found none: sleep a little on `wake`, then read.
                    let woken = poll_fd(wake.as_raw_fd(), pause.min(timeout))?;
                    return Ok(Readiness {
                        wake: woken,
                        ..Readiness::REFUSED
                    });
                }
                let (queue, wake) = poll_fds(fd, Some(wake), timeout)?;
                Ok(Readiness {
                    queue,
                    wake,
                    refused: false,
                })
            }
            _ => {
                std::thread::sleep(timeout.min(Duration::from_millis(1)));
                Ok(Readiness::BOTH)
            }
        }
    }

    /// The raw handle, valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::fid_cq {
        self.inner.raw
    }
}

/// What a wait saw: whether the completion queue and the wake fd may have
/// something to read. `false` is certain (the wait timed out on it), `true`
/// may be spurious. `refused`: `fi_trywait` found the queue busy, so the
/// wait did not sleep on its fd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Readiness {
    pub queue: bool,
    pub wake: bool,
    pub refused: bool,
}

impl Readiness {
    /// Both may be readable: what a wait that could not tell reports.
    pub const BOTH: Self = Self {
        queue: true,
        wake: true,
        refused: false,
    };

    /// `fi_trywait` refused: the queue must be read (the provider's
    /// progress), and the wake fd was not looked at.
    pub const REFUSED: Self = Self {
        queue: true,
        wake: true,
        refused: true,
    };
}

/// poll(2) for readability, retrying on EINTR within the timeout.
fn poll_fd(fd: RawFd, timeout: Duration) -> Result<bool, FabricError> {
    poll_fds(fd, None, timeout).map(|(cq, _)| cq)
}

/// ppoll(2) on `fd` and, if given, `extra`; returns which were readable.
/// The timeout is passed to the nanosecond: poll(2)'s whole milliseconds
/// rounded a 1 ms period's 1.0x ms sleep up to 2 ms.
fn poll_fds(
    fd: RawFd,
    extra: Option<BorrowedFd<'_>>,
    timeout: Duration,
) -> Result<(bool, bool), FabricError> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(left.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(left.subsec_nanos()),
        };
        let mut pfds = [
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: extra.map_or(-1, |e| e.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let count: libc::nfds_t = if extra.is_some() { 2 } else { 1 };
        // SAFETY: pfds holds `count` valid pollfds; fd stays open while the
        // CQ lives and `extra` is borrowed for the duration of the call;
        // `ts` is a valid timespec and the signal mask pointer is NULL
        // (the thread's mask is left as it is).
        let ret = unsafe { libc::ppoll(pfds.as_mut_ptr(), count, &ts, ptr::null()) };
        if ret >= 0 {
            return Ok((pfds[0].revents != 0, pfds[1].revents != 0));
        }
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if errno != libc::EINTR || left.is_zero() {
            return Err(FabricError::call("ppoll", errno));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixDatagram;

    /// A wait of 1.2 ms sleeps about 1.2 ms, not 2: poll(2)'s whole
    /// milliseconds, rounded up, stretched a 1 ms heartbeat period to 2.
    /// The median of 21 waits absorbs the odd late wake-up of a busy
    /// machine.
    #[test]
    fn waits_are_not_rounded_up_to_whole_milliseconds() {
        let (quiet, _peer) = UnixDatagram::pair().unwrap();
        let (other, _peer2) = UnixDatagram::pair().unwrap();
        let mut took: Vec<Duration> = (0..21)
            .map(|_| {
                let start = Instant::now();
                let (a, b) = poll_fds(
                    quiet.as_raw_fd(),
                    Some(other.as_fd()),
                    Duration::from_micros(1200),
                )
                .unwrap();
                assert!(!a && !b, "nothing was written, nothing is readable");
                start.elapsed()
            })
            .collect();
        took.sort();
        let median = took[took.len() / 2];
        assert!(
            median >= Duration::from_micros(1200),
            "woke early: {median:?}"
        );
        assert!(
            median < Duration::from_micros(1900),
            "a 1.2 ms wait took {median:?} (median of 21): rounded up to 2 ms?"
        );
    }

    /// Readiness names the fd that fired.
    #[test]
    fn the_fd_that_fired_is_named() {
        let (cq_side, cq_peer) = UnixDatagram::pair().unwrap();
        let (wake, wake_peer) = UnixDatagram::pair().unwrap();
        wake_peer.send(b"x").unwrap();
        let seen = poll_fds(
            cq_side.as_raw_fd(),
            Some(wake.as_fd()),
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(seen, (false, true));
        cq_peer.send(b"y").unwrap();
        let seen = poll_fds(cq_side.as_raw_fd(), None, Duration::from_secs(5)).unwrap();
        assert_eq!(seen, (true, false));
    }
}
