//! Errors of the fabric layer: failing calls, error completions, and the
//! verdicts of the bounded post helper.
//!
//! Owns: turning libfabric's return codes and error entries into typed,
//! normalised values. Must not: decide what an error means for a peer (that
//! is the protocol's call); it only reports faithfully.

use std::ffi::CStr;
use std::fmt;
use std::time::Duration;

use libfabric_sys as sys;

use super::FiAddr;

/// `fi_strerror(errno)` as an owned string.
pub fn strerror(errno: i32) -> String {
    // SAFETY: fi_strerror accepts any int and returns a pointer to a static,
    // NUL-terminated string (libfabric's table or libc's strerror buffer).
    let p = unsafe { sys::fi_strerror(errno) };
    if p.is_null() {
        return format!("error {errno}");
    }
    // SAFETY: p is non-NULL and NUL-terminated, per above.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// An error of the fabric layer.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// The source filter on the endpoint's listening socket could not be
    /// set up (`guard`).
    #[error("the source filter (FFD_SOURCE_FILTER=on; `auto` warns and starts without it): {0}")]
    SourceFilter(#[from] super::GuardError),
    /// A libfabric call failed.
    #[error("{call} failed: {text} (errno {errno})")]
    Call {
        /// The libfabric function, e.g. `"fi_endpoint"`.
        call: &'static str,
        /// The positive error number (`FI_E*`, or an errno).
        errno: i32,
        /// `fi_strerror(errno)`.
        text: String,
    },
    /// A post returned `-FI_EAGAIN` (or no local buffer was free): progress
    /// the completion queue and try again later.
    #[error("{call} would block: progress the completion queue and try again")]
    WouldBlock {
        /// The libfabric function (or local resource) that refused.
        call: &'static str,
    },
    /// The bounded post helper gave up on a peer: every try within the
    /// bound was refused. On `tcp;ofi_rxm` (`-FI_EAGAIN`) and `sockets`
    /// (`-FI_ENOENT`) this is how a dead peer looks to a sender.
    #[error(
        "peer {peer} unreachable: {call} refused {attempts} times over {elapsed:?} \
         (last: {text}, errno {errno})"
    )]
    Unreachable {
        /// The peer the posts were addressed to.
        peer: FiAddr,
        /// The refusing call.
        call: &'static str,
        /// How many posts were tried.
        attempts: u32,
        /// Time from the first try to the verdict.
        elapsed: Duration,
        /// The last refusal's error number.
        errno: i32,
        /// `fi_strerror(errno)`.
        text: String,
    },
    /// The bounded post helper stopped retrying because an error
    /// completion arrived while it progressed the queue (it was handed to
    /// the sink): errors are detection, so the caller looks at it before
    /// posting to this peer again. Nothing was posted.
    #[error(
        "post to peer {peer} abandoned after {attempts} refusals over {elapsed:?}: \
         an error completion arrived"
    )]
    Interrupted {
        /// The peer the posts were addressed to.
        peer: FiAddr,
        /// How many posts were tried.
        attempts: u32,
        /// Time from the first try.
        elapsed: Duration,
    },
    /// The provider asked for is not offered here.
    #[error(
        "libfabric offers no provider {requested:?}{} with RDM endpoints, RMA and messages; \
         available: {}",
        domain.as_ref().map(|d| format!(" on domain {d:?}")).unwrap_or_default(),
        if available.is_empty() { "none".to_owned() } else { available.join(", ") }
    )]
    ProviderUnavailable {
        /// The provider name as given.
        requested: String,
        /// The domain asked for, if any.
        domain: Option<String>,
        /// `provider (domain)` pairs that are offered for the same use.
        available: Vec<String>,
    },
    /// A request this layer cannot carry out with the chosen provider or
    /// the arguments given.
    #[error("{0}")]
    Invalid(String),
    /// The libfabric loaded in this process is older than the headers ffd
    /// was built against (see [`FabricVersions`](super::FabricVersions)).
    #[error(
        "libfabric {loaded} is loaded (from {path}) but ffd was built against libfabric \
         {built}, which is newer: run ffd on libfabric >= {built} (LD_LIBRARY_PATH), or build \
         it against this one (LIBFABRIC_INCLUDE_DIR and LIBFABRIC_LIB_DIR, or PKG_CONFIG_PATH \
         holding its libfabric.pc)"
    )]
    OlderLibrary {
        /// `major.minor` of the headers ffd was built against.
        built: String,
        /// `major.minor` of the library loaded at run time.
        loaded: String,
        /// Where the loaded library came from.
        path: String,
    },
}

impl FabricError {
    /// Builds [`FabricError::Call`] from a libfabric return value (negative
    /// or positive error number).
    pub fn call(call: &'static str, ret: impl Into<i64>) -> Self {
        let errno = abs_errno(ret.into());
        FabricError::Call {
            call,
            errno,
            text: strerror(errno),
        }
    }

    /// The error number, where there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            FabricError::Call { errno, .. } | FabricError::Unreachable { errno, .. } => {
                Some(*errno)
            }
            FabricError::WouldBlock { .. } => Some(sys::FI_EAGAIN),
            _ => None,
        }
    }

    /// True for [`FabricError::WouldBlock`].
    pub fn is_would_block(&self) -> bool {
        matches!(self, FabricError::WouldBlock { .. })
    }

    /// True for the post results that mean "not now" rather than "wrong":
    /// `-FI_EAGAIN` (or no free local buffer) and `sockets`' `-FI_ENOENT`
    /// for a lost connection. A long run of them is how a dead peer looks
    /// to a sender on `tcp;ofi_rxm` and `sockets`.
    pub fn is_refusal(&self) -> bool {
        match self {
            FabricError::WouldBlock { .. } => true,
            FabricError::Call { errno, .. } => *errno == sys::FI_ENOENT,
            _ => false,
        }
    }
}

/// `|ret|` as an `i32` error number; 0 and values that do not fit become
/// `FI_EOTHER`.
pub(crate) fn abs_errno(ret: i64) -> i32 {
    match i32::try_from(ret.unsigned_abs()) {
        Ok(0) | Err(_) => sys::FI_EOTHER as i32,
        Ok(e) => e,
    }
}

/// Turns a libfabric `int` return into `Ok(())` or a [`FabricError::Call`].
pub(crate) fn check(call: &'static str, ret: i32) -> Result<(), FabricError> {
    if ret == 0 {
        Ok(())
    } else {
        Err(FabricError::call(call, ret))
    }
}

/// Which operation an error completion belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailedOp {
    /// A message send, with the caller's token and the destination.
    Send {
        /// The token passed to [`super::Endpoint::try_send`].
        token: u64,
        /// The destination.
        peer: FiAddr,
    },
    /// A tracked RMA write, with the caller's token.
    Write {
        /// The token passed to [`super::Endpoint::try_write_u64`].
        token: u64,
    },
    /// A posted receive (the buffer has been posted again).
    Recv,
    /// The entry named no operation we posted: `op_context` was NULL (seen
    /// on `shm`) or not one of ours. `flags` may still hint at the kind.
    Unknown,
}

impl fmt::Display for FailedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailedOp::Send { token, peer } => write!(f, "send (token {token}) to {peer}"),
            FailedOp::Write { token } => write!(f, "RMA write (token {token})"),
            FailedOp::Recv => f.write_str("receive"),
            FailedOp::Unknown => f.write_str("unknown operation"),
        }
    }
}

/// An error completion (`fi_cq_readerr`), normalised: `err` is positive
/// whatever sign the provider used, and a NULL `op_context` is
/// [`FailedOp::Unknown`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{op} failed: {text} (err {err}; provider errno {prov_errno}: {prov_text})")]
pub struct CqError {
    /// The operation the entry names.
    pub op: FailedOp,
    /// `|err|`: an `FI_E*` value such as `FI_ENOTCONN`, `FI_EIO`, `FI_ECANCELED`.
    pub err: i32,
    /// The provider's own error number, as reported (sign untouched).
    pub prov_errno: i32,
    /// The entry's `flags` (`FI_SEND`, `FI_RMA | FI_WRITE`, `FI_RECV`, ...).
    pub flags: u64,
    /// `fi_strerror(err)`.
    pub text: String,
    /// `fi_cq_strerror(prov_errno, err_data)`.
    pub prov_text: String,
}

impl CqError {
    /// Whether the entry's flags say it was an RMA write, which tells a
    /// heartbeat's error apart from a message's when the provider gave no
    /// context ([`FailedOp::Unknown`], as `shm` does).
    pub fn is_rma_write(&self) -> bool {
        self.flags & sys::FI_WRITE != 0 && self.flags & sys::FI_RMA != 0
    }
}

/// The raw facts of an error entry after normalisation, before the
/// endpoint has mapped the context to an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NormalisedErr {
    /// `|err|`, never 0 (an entry with err 0 becomes `FI_EOTHER`).
    pub err: i32,
    pub prov_errno: i32,
    pub flags: u64,
    /// `op_context` as an integer; `None` when NULL.
    pub context: Option<usize>,
}

/// Normalises an error entry: the sign of `err` and a NULL `op_context`
/// (both seen on `shm`) must not confuse the caller.
pub(crate) fn normalise(entry: &sys::fi_cq_err_entry) -> NormalisedErr {
    NormalisedErr {
        err: abs_errno(entry.err.into()),
        prov_errno: entry.prov_errno,
        flags: entry.flags,
        context: if entry.op_context.is_null() {
            None
        } else {
            Some(entry.op_context as usize)
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(err: i32, context: usize) -> sys::fi_cq_err_entry {
        sys::fi_cq_err_entry {
            err,
            prov_errno: -32,
            flags: sys::FI_RMA | sys::FI_WRITE,
            op_context: context as *mut std::ffi::c_void,
            ..Default::default()
        }
    }

    #[test]
    fn negative_err_is_made_positive() {
        let n = normalise(&entry(-libc::ENOTCONN, 0x40));
        assert_eq!(n.err, libc::ENOTCONN);
        assert_eq!(n.context, Some(0x40));
    }

    #[test]
    fn positive_err_is_kept() {
        let n = normalise(&entry(libc::EIO, 0x40));
        assert_eq!(n.err, libc::EIO);
        assert_eq!(n.prov_errno, -32);
        assert_eq!(n.flags, sys::FI_RMA | sys::FI_WRITE);
    }

    #[test]
    fn null_context_is_no_context() {
        let n = normalise(&entry(-libc::ECONNRESET, 0));
        assert_eq!(n.context, None);
        assert_eq!(n.err, libc::ECONNRESET);
    }

    #[test]
    fn zero_and_extreme_err_become_eother() {
        assert_eq!(normalise(&entry(0, 1)).err, sys::FI_EOTHER as i32);
        assert_eq!(normalise(&entry(i32::MIN, 1)).err, sys::FI_EOTHER as i32);
    }

    #[test]
    fn call_error_carries_name_errno_and_text() {
        let e = FabricError::call("fi_cq_read", -(sys::FI_EAGAIN as isize) as i64);
        assert_eq!(e.errno(), Some(sys::FI_EAGAIN));
        let s = e.to_string();
        assert!(s.starts_with("fi_cq_read failed: "), "{s}");
        assert!(s.contains(&strerror(sys::FI_EAGAIN)), "{s}");
    }

    #[test]
    fn provider_unavailable_lists_what_is_there() {
        let e = FabricError::ProviderUnavailable {
            requested: "verbs".into(),
            domain: None,
            available: vec!["tcp;ofi_rxm (lo)".into(), "shm (shm)".into()],
        };
        let s = e.to_string();
        assert!(
            s.contains("\"verbs\"") && s.contains("tcp;ofi_rxm (lo), shm (shm)"),
            "{s}"
        );
    }
}
