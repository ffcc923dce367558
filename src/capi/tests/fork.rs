//! A fork()ed child of a process holding detectors: every C call on the
//! parent's handles (and on an agreement request of the parent's) fails
//! with FFD_ERR_FORKED instead of answering from the copy frozen at the
//! fork, the Rust API says `Forked` the same way, and ffd_finalize() frees
//! the child's copies at once. The parent's detectors run on: queries,
//! a broadcast, the agreement asked for before the fork, clean leaves.
//!
//! The job is two ranks of this process with same-host watching on, so
//! the host's shared segment, the exit-word threads and the pidfds exist
//! when the child is made.

use std::ffi::c_int;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::ptr;
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use super::super::ffd_result::*;
use super::super::*;
use super::{Group, RankCtx, c, last_error, loopback_config, shared_allgather, wait_event};
use crate::runtime::{AgreeError, DetectorError, DetectorState, Liveness};

/// The bound the child's ffd_finalize() must meet.
const CHILD_FINALIZE_BOUND: Duration = Duration::from_secs(5);
/// The parent's bound on the whole child (its checks are a few calls).
const CHILD_BOUND: Duration = Duration::from_secs(20);

/// A handle moved between the test's threads.
struct Handle(*mut ffd_t);
// SAFETY: an ffd_t may be used from any thread (its contract); the test
// finalizes each handle once, from one thread.
unsafe impl Send for Handle {}

/// A request moved between the test's threads.
struct Request(*mut ffd_agree_req_t);
// SAFETY: a request is used by one thread at a time (its contract): the
// test hands it over, it is never shared.
unsafe impl Send for Request {}

/// Starts two ranks through ffd_init() with same-host watching on.
fn start_pair() -> Vec<Handle> {
    let group = Arc::new(Group {
        barrier: super::Barrier::new(2),
        slots: Mutex::new(vec![Vec::new(); 2]),
    });
    let threads: Vec<_> = (0..2)
        .map(|rank| {
            let group = Arc::clone(&group);
            thread::spawn(move || {
                let cfg = loopback_config();
                // A timeout of 2 s: the test judges what a child gets, not
                // detection, and a loaded machine (the fork's copy, the
                // other tests' threads) must not make a false report of
                // the parent's epoch checks.
                // SAFETY: a live config.
                assert_eq!(
                    unsafe { ffd_config_set_timeout_ns(cfg, 2_000_000_000) },
                    FFD_OK
                );
                let (name, value) = (c("FFD_LOCAL"), c("auto"));
                // SAFETY: a live config and NUL-terminated strings.
                let rc = unsafe { ffd_config_set(cfg, name.as_ptr(), value.as_ptr()) };
                assert_eq!(rc, FFD_OK, "{}", last_error());
                let ctx = RankCtx { rank, group };
                let oob = ffd_oob_t {
                    rank: rank as c_int,
                    size: 2,
                    allgather: Some(shared_allgather),
                    userdata: ptr::from_ref(&ctx).cast_mut().cast(),
                };
                let mut h = ptr::null_mut();
                // SAFETY: valid oob (ctx lives through the call) and config.
                let rc = unsafe { ffd_init(&oob, cfg, &mut h) };
                // SAFETY: not needed after init.
                unsafe { ffd_config_free(cfg) };
                assert_eq!(rc, FFD_OK, "rank {rank}: {}", last_error());
                Handle(h)
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("the rank started"))
        .collect()
}

/// What the child checks, on the parent's handles and the request rank 0
/// asked for before the fork. Each failed check is a line to `report`
/// (written at once, so that a child killed for hanging has said what
/// failed before), and so is `at: <call>` before a call that would hang
/// if the copy were taken for the detector. Returns the number of failed
/// checks. Runs in the child: no lock another thread of the parent may
/// have held, nothing printed.
fn child_checks(
    handles: &mut [*mut ffd_t; 2],
    req: *mut ffd_agree_req_t,
    parent: u32,
    report: &mut dyn Write,
) -> usize {
    let mut c = Checks { report, failed: 0 };
    for &h in handles.iter() {
        // SAFETY (every call below): the handles and the request are the
        // parent's, live in the parent and copied here; the outputs are
        // valid for their writes.
        unsafe {
            c.check(
                ffd_is_alive(h, 0) == FFD_ERR_FORKED as c_int,
                "ffd_is_alive(0)",
            );
            c.check(
                ffd_is_alive(h, 7) == FFD_ERR_FORKED as c_int,
                "ffd_is_alive(beyond the job)",
            );
            let text = last_error();
            c.check(
                text.contains("fork()ed child")
                    && text.contains(&format!("belongs to process {parent}"))
                    && text.contains("ffd_init anew"),
                "the message names the parent and says what to do",
            );
            c.check(
                ffd_is_excluded(h) == FFD_ERR_FORKED as c_int,
                "ffd_is_excluded",
            );
            let (mut rank, mut size) = (99u32, 99u32);
            c.check(
                ffd_rank_size(h, &mut rank, &mut size) == FFD_ERR_FORKED
                    && (rank, size) == (99, 99),
                "ffd_rank_size, no output",
            );
            let mut epoch = 7u64;
            c.check(
                ffd_epoch(h, &mut epoch) == FFD_ERR_FORKED && epoch == 7,
                "ffd_epoch, no output",
            );
            let mut n = 7usize;
            c.check(
                ffd_failed_ranks(h, ptr::null_mut(), 0, &mut n) == FFD_ERR_FORKED && n == 7,
                "ffd_failed_ranks",
            );
            let mut ev = std::mem::MaybeUninit::<ffd_event_t>::uninit();
            c.check(
                ffd_next_event(h, ev.as_mut_ptr(), ptr::null_mut(), 0) == FFD_ERR_FORKED,
                "ffd_next_event",
            );
            let mut st = std::mem::MaybeUninit::<ffd_state_t>::uninit();
            c.check(
                ffd_state(h, st.as_mut_ptr(), ptr::null_mut(), 0, ptr::null_mut())
                    == FFD_ERR_FORKED,
                "ffd_state",
            );
            c.check(ffd_event_fd(h) == FFD_ERR_FORKED as c_int, "ffd_event_fd");
            c.check(
                ffd_broadcast(h, b"child".as_ptr().cast(), 5) == FFD_ERR_FORKED,
                "ffd_broadcast",
            );
            let mut stats = std::mem::MaybeUninit::<ffd_stats_t>::uninit();
            c.check(
                ffd_stats(h, stats.as_mut_ptr()) == FFD_ERR_FORKED,
                "ffd_stats",
            );
            let (mut id, mut count) = (7u64, 7usize);
            c.check(
                ffd_view(h, &mut id, ptr::null_mut(), 0, &mut count) == FFD_ERR_FORKED,
                "ffd_view",
            );
            let mut r = ptr::null_mut();
            c.check(
                ffd_iagree(h, 1, &mut r) == FFD_ERR_FORKED && r.is_null(),
                "ffd_iagree",
            );
            let (mut flags, mut vid, mut cnt) = (0u64, 0u64, 0usize);
            c.check(
                ffd_agree(h, 1, &mut flags, &mut vid, ptr::null_mut(), 0, &mut cnt)
                    == FFD_ERR_FORKED,
                "ffd_agree",
            );

            // The Rust API behind the handle says the same.
            let d = &(*h).detector;
            c.check(
                d.state() == DetectorState::Forked { pid: parent },
                "Detector::state",
            );
            c.check(d.forked_from() == Some(parent), "Detector::forked_from");
            c.check(
                !d.is_alive(0) && d.liveness(0) == Liveness::Unknown,
                "Detector::is_alive/liveness",
            );
            c.check(
                d.liveness(7) == Liveness::Unknown,
                "Detector::liveness beyond the job",
            );
            c.check(
                matches!(d.broadcast(b"x"), Err(DetectorError::Forked { pid }) if pid == parent),
                "Detector::broadcast",
            );
            c.check(
                matches!(d.iagree(1), Err(AgreeError::Forked { pid }) if pid == parent),
                "Detector::iagree",
            );
            c.check(d.try_next_event().is_none(), "Detector::try_next_event");
            c.check(!d.is_running() && !d.is_excluded(), "Detector::is_running");
        }
    }
    // SAFETY: the parent's request, copied here; valid outputs.
    unsafe {
        let (mut done, mut flags, mut vid, mut cnt) = (7 as c_int, 0u64, 0u64, 0usize);
        c.check(
            ffd_agree_test(
                ptr::null(),
                req,
                &mut done,
                &mut flags,
                &mut vid,
                ptr::null_mut(),
                0,
                &mut cnt,
            ) == FFD_ERR_FORKED
                && done == 7,
            "ffd_agree_test on the parent's request",
        );
        // Would wait for ever on a copy nobody decides.
        c.at("ffd_agree_wait");
        c.check(
            ffd_agree_wait(
                ptr::null(),
                req,
                &mut flags,
                &mut vid,
                ptr::null_mut(),
                0,
                &mut cnt,
            ) == FFD_ERR_FORKED,
            "ffd_agree_wait on the parent's request",
        );
        ffd_agree_free(req);
    }
    c.at("ffd_finalize");
    let t0 = Instant::now();
    for h in handles.iter_mut() {
        // SAFETY: the handle's address is valid; the copy is finalized once.
        let rc = unsafe { ffd_finalize(h) };
        c.check(
            rc == FFD_ERR_FORKED && h.is_null(),
            "ffd_finalize frees the copy",
        );
        c.check(
            last_error().contains("freed this process's copy"),
            "ffd_finalize says it freed the copy",
        );
        // SAFETY: as above; now NULL.
        c.check(
            unsafe { ffd_finalize(h) } == FFD_ERR_NULL,
            "a second ffd_finalize finds NULL",
        );
    }
    let took = t0.elapsed();
    c.check(
        took < CHILD_FINALIZE_BOUND,
        &format!("ffd_finalize took {took:?} in the child"),
    );
    c.failed
}

/// The child's checks, reported as they run.
struct Checks<'a> {
    report: &'a mut dyn Write,
    failed: usize,
}

impl Checks<'_> {
    fn check(&mut self, ok: bool, what: &str) {
        if !ok {
            self.failed += 1;
            let _ = writeln!(self.report, "{what} (last error: {})", last_error());
        }
    }

    /// Before a call that would hang on a copy taken for the detector.
    fn at(&mut self, call: &str) {
        let _ = writeln!(self.report, "at: {call}");
    }
}

/// Forks; the child runs [`child_checks`] and reports through a pipe.
/// Returns the child's exit status and report, killing it if it is not
/// done within [`CHILD_BOUND`].
fn fork_and_check(handles: &[Handle], req: &Request) -> (c_int, String) {
    let parent = std::process::id();
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` is valid for two ints.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both fds are fresh from pipe2 and owned here alone.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut copies = [handles[0].0, handles[1].0];
    let req = req.0;
    // SAFETY: the child runs only `child_checks` (ffd calls on copies,
    // allocation, which glibc makes safe after fork) and leaves with _exit,
    // running none of the parent's exit handlers or the test harness.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
    if child == 0 {
        drop(read_end);
        let mut pipe = std::fs::File::from(write_end);
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            child_checks(&mut copies, req, parent, &mut pipe)
        }))
        .unwrap_or_else(|_| {
            let _ = writeln!(pipe, "the child's checks panicked");
            1
        });
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(c_int::from(failed > 0)) };
    }
    drop(write_end);
    let (reaped_tx, reaped_rx) = mpsc::channel();
    let reaper = thread::spawn(move || {
        let mut status = 0;
        // SAFETY: our child; `status` valid for a write.
        let pid = unsafe { libc::waitpid(child, &mut status, 0) };
        let _ = reaped_tx.send((pid, status));
    });
    let reaped = reaped_rx.recv_timeout(CHILD_BOUND);
    if reaped.is_err() {
        // SAFETY: our child, not reaped yet: its pid is still ours.
        unsafe { libc::kill(child, libc::SIGKILL) };
    }
    reaper.join().expect("the reaper");
    // The write end is closed in both processes now: this reads to the end.
    let mut report = String::new();
    std::fs::File::from(read_end)
        .read_to_string(&mut report)
        .expect("the child's report");
    let Ok((pid, status)) = reaped else {
        panic!(
            "the forked child was not done within {CHILD_BOUND:?}: killed; its report:\n{report}"
        );
    };
    assert_eq!(pid, child, "waitpid: {}", std::io::Error::last_os_error());
    (status, report)
}

#[test]
fn a_forked_child_gets_errors_and_frees_its_copy_and_the_parent_runs_on() {
    let handles = start_pair();
    let (h0, h1) = (handles[0].0, handles[1].0);
    // An agreement rank 0 asked for before the fork: undecided until rank 1
    // asks too, after the child is done.
    let mut req = ptr::null_mut();
    // SAFETY: a live handle; `req` valid for a write.
    assert_eq!(
        unsafe { ffd_iagree(h0, 6, &mut req) },
        FFD_OK,
        "{}",
        last_error()
    );
    let req = Request(req);

    let (status, report) = fork_and_check(&handles, &req);
    let failures: Vec<&str> = report.lines().filter(|l| !l.starts_with("at: ")).collect();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 && failures.is_empty(),
        "the child (status {status:#x}) failed:\n{report}"
    );
    assert!(
        report.contains("at: ffd_finalize"),
        "the child ran to the end:\n{report}"
    );

    // The parent runs on: live answers, a broadcast delivered, the
    // agreement decided, clean leaves seen as leaves.
    for h in [h0, h1] {
        // SAFETY: live handles of this process.
        unsafe {
            assert_eq!(
                (ffd_is_alive(h, 0), ffd_is_alive(h, 1)),
                (1, 1),
                "{}",
                last_error()
            );
            let mut epoch = 7;
            assert_eq!(ffd_epoch(h, &mut epoch), FFD_OK);
            assert_eq!(epoch, 0);
        }
    }
    // SAFETY: a live handle and 6 readable bytes.
    assert_eq!(
        unsafe { ffd_broadcast(h0, b"parent".as_ptr().cast(), 6) },
        FFD_OK
    );
    let got = wait_event(h1, Duration::from_secs(10), |ev| {
        ev.kind == ffd_event_kind::FFD_EVENT_PAYLOAD && ev.rank == 0
    });
    assert_eq!(
        got.map(|(_, p)| p),
        Some(b"parent".to_vec()),
        "rank 1 got the broadcast"
    );

    let waiter = {
        let (h0, req) = (Handle(h0), req);
        thread::spawn(move || {
            // Whole, not by field: the wrappers are what is Send.
            let (h0, req) = (h0, req);
            let (mut flags, mut vid, mut count) = (0u64, 0u64, 0usize);
            // SAFETY: the live request of this process, used by this thread
            // only; valid outputs.
            let rc = unsafe {
                ffd_agree_wait(
                    h0.0,
                    req.0,
                    &mut flags,
                    &mut vid,
                    ptr::null_mut(),
                    0,
                    &mut count,
                )
            };
            // SAFETY: freed once.
            unsafe { ffd_agree_free(req.0) };
            (rc, flags, count)
        })
    };
    let (mut flags, mut vid, mut count) = (0u64, 0u64, 0usize);
    // SAFETY: a live handle; valid outputs.
    let rc = unsafe { ffd_agree(h1, 3, &mut flags, &mut vid, ptr::null_mut(), 0, &mut count) };
    assert_eq!((rc, flags, count), (FFD_OK, 2, 0), "{}", last_error());
    assert_eq!(waiter.join().expect("rank 0's wait"), (FFD_OK, 2, 0));

    let mut h0 = h0;
    let t0 = Instant::now();
    // SAFETY: a live handle, finalized once.
    assert_eq!(unsafe { ffd_finalize(&mut h0) }, FFD_OK, "{}", last_error());
    // Bounded by a few periods plus 2 s (10 ms periods here).
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let left = wait_event(h1, Duration::from_secs(10), |ev| {
        ev.kind == ffd_event_kind::FFD_EVENT_LEFT && ev.rank == 0
    });
    assert!(left.is_some(), "rank 1 saw rank 0 leave");
    let mut epoch = 7;
    // SAFETY: a live handle.
    assert_eq!(unsafe { ffd_epoch(h1, &mut epoch) }, FFD_OK);
    assert_eq!(epoch, 0, "a leave, not a failure");
    let mut h1 = h1;
    // SAFETY: a live handle, finalized once.
    assert_eq!(unsafe { ffd_finalize(&mut h1) }, FFD_OK, "{}", last_error());
}
