//! Lifetimes at the C boundary, driven through the exports: a callback
//! stuck during ffd_finalize() (finalize waits for it, and no callback runs
//! after finalize returns), a panic on the progress thread (the embedder gets
//! FFD_EVENT_STOPPED, ffd_state() says why, liveness answers say they are
//! stale, the other ranks declare the rank), and payloads copied into the
//! caller's buffer.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread;
use std::time::Duration;

use super::super::ffd_result::*;
use super::super::*;
use super::{Barrier, Group, RankCtx, last_error, loopback_config, shared_allgather, wait_event};
use crate::runtime::Fault;

/// A handle moved between the test's threads.
struct Handle(*mut ffd_t);
// SAFETY: an ffd_t may be used from any thread (its contract); the tests
// finalize each handle once, from one thread.
unsafe impl Send for Handle {}

/// A embedder's callback and its userdata, for a rank of [`start_job`].
#[derive(Clone, Copy)]
struct HostCb {
    f: unsafe extern "C" fn(*mut c_void, *const ffd_event_t),
    userdata: usize,
}

/// Starts a job of `n` ranks through the C ABI (ffd_init on `n` threads at
/// once, the allgather over shared memory): `period`/`timeout` in ms, a
/// callback per rank where given. Returns the handles, by rank.
fn start_job(
    n: usize,
    period_ms: u64,
    timeout_ms: u64,
    callbacks: &[Option<HostCb>],
) -> Vec<Handle> {
    let group = Arc::new(Group {
        barrier: Barrier::new(n),
        slots: Mutex::new(vec![Vec::new(); n]),
    });
    let threads: Vec<_> = (0..n)
        .map(|rank| {
            let group = Arc::clone(&group);
            let cb = callbacks.get(rank).copied().flatten();
            thread::spawn(move || {
                let cfg = loopback_config();
                // SAFETY: a live config; the tests keep each userdata alive
                // until the detector is finalized.
                unsafe {
                    assert_eq!(ffd_config_set_period_ns(cfg, period_ms * 1_000_000), FFD_OK);
                    assert_eq!(
                        ffd_config_set_timeout_ns(cfg, timeout_ms * 1_000_000),
                        FFD_OK
                    );
                    if let Some(cb) = cb {
                        let rc =
                            ffd_config_set_callback(cfg, Some(cb.f), cb.userdata as *mut c_void);
                        assert_eq!(rc, FFD_OK);
                    }
                }
                let ctx = RankCtx { rank, group };
                let oob = ffd_oob_t {
                    rank: rank as c_int,
                    size: n as c_int,
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
        .enumerate()
        .map(|(rank, t)| {
            t.join()
                .unwrap_or_else(|_| panic!("rank {rank} did not start"))
        })
        .collect()
}

/// The state and its text.
fn state(h: *const ffd_t) -> (ffd_state_t, String) {
    let mut st = std::mem::MaybeUninit::<ffd_state_t>::uninit();
    let mut text = [0 as c_char; 256];
    // SAFETY: a live handle and valid outputs.
    let rc = unsafe {
        ffd_state(
            h,
            st.as_mut_ptr(),
            text.as_mut_ptr(),
            text.len(),
            ptr::null_mut(),
        )
    };
    assert_eq!(rc, FFD_OK, "{}", last_error());
    // SAFETY: written on FFD_OK; the text is NUL-terminated within the buffer.
    unsafe {
        (
            st.assume_init(),
            CStr::from_ptr(text.as_ptr()).to_str().unwrap().to_owned(),
        )
    }
}

fn finalize(h: Handle) {
    let mut h = h.0;
    // SAFETY: a live handle, finalized once.
    assert_eq!(unsafe { ffd_finalize(&mut h) }, FFD_OK, "{}", last_error());
    assert!(h.is_null());
}

/// A one-way flag with a bounded wait.
#[derive(Default)]
struct Signal {
    set: Mutex<bool>,
    cv: Condvar,
}

impl Signal {
    fn raise(&self) {
        *self.set.lock().unwrap() = true;
        self.cv.notify_all();
    }

    /// Whether it was raised within `bound`.
    fn wait(&self, bound: Duration) -> bool {
        let set = self.set.lock().unwrap();
        *self.cv.wait_timeout_while(set, bound, |s| !*s).unwrap().0
    }
}

/// What the stuck callback sees and how the test releases it.
#[derive(Default)]
struct Stuck {
    calls: AtomicUsize,
    /// The first payload has blocked (later ones do not).
    blocked: AtomicBool,
    /// Set once ffd_finalize has returned: a call after it is counted.
    finalized: AtomicBool,
    calls_after_finalize: AtomicUsize,
    entered: Signal,
    release: Signal,
}

/// Bound on how long the stuck callback waits for its release (so that a
/// failing test cannot hang forever).
const STUCK_BOUND: Duration = Duration::from_secs(60);

/// Counts every call; the first payload blocks until the test releases it.
unsafe extern "C" fn stuck_callback(userdata: *mut c_void, event: *const ffd_event_t) {
    // SAFETY: the test's Stuck outlives the detector; ffd passes a valid event.
    let (stuck, event) = unsafe { (&*userdata.cast::<Stuck>(), &*event) };
    stuck.calls.fetch_add(1, Ordering::SeqCst);
    if stuck.finalized.load(Ordering::SeqCst) {
        stuck.calls_after_finalize.fetch_add(1, Ordering::SeqCst);
    }
    if event.kind == ffd_event_kind::FFD_EVENT_PAYLOAD
        && !stuck.blocked.swap(true, Ordering::SeqCst)
    {
        stuck.entered.raise();
        stuck.release.wait(STUCK_BOUND);
    }
}

#[test]
fn finalize_waits_for_a_stuck_callback_and_no_callback_runs_after_it() {
    let stuck = Stuck::default();
    let cb = HostCb {
        f: stuck_callback,
        userdata: ptr::from_ref(&stuck) as usize,
    };
    // A timeout far above the stall: rank 1 must see a leave, not a failure.
    let mut job = start_job(2, 50, 10_000, &[Some(cb)]);
    let (h0, h1) = (job.remove(0), job.remove(0));
    // SAFETY: a live handle and a readable buffer.
    assert_eq!(
        unsafe { ffd_broadcast(h1.0, b"stick".as_ptr().cast(), 5) },
        FFD_OK
    );
    assert!(
        stuck.entered.wait(Duration::from_secs(10)),
        "rank 0's callback never saw the payload"
    );
    // The blocked callback is the last one that may ever run.
    let calls = stuck.calls.load(Ordering::SeqCst);

    let (done_tx, done_rx) = mpsc::channel();
    let stuck_addr = ptr::from_ref(&stuck) as usize;
    let finalizer = thread::spawn(move || {
        finalize(h0);
        // SAFETY: the test's Stuck outlives this thread (joined below).
        let stuck = unsafe { &*(stuck_addr as *const Stuck) };
        stuck.finalized.store(true, Ordering::SeqCst);
        let _ = done_tx.send(());
    });
    // Events that arrive once finalize has begun start no callback.
    // SAFETY: a live handle and a readable buffer.
    assert_eq!(
        unsafe { ffd_broadcast(h1.0, b"later".as_ptr().cast(), 5) },
        FFD_OK
    );
    // The old bound (the linger, 150 ms, plus 2 s) has passed, and more.
    assert_eq!(
        done_rx.recv_timeout(Duration::from_secs(3)),
        Err(mpsc::RecvTimeoutError::Timeout),
        "ffd_finalize returned while its callback was still running"
    );
    assert_eq!(stuck.calls.load(Ordering::SeqCst), calls);
    stuck.release.raise();
    done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("ffd_finalize returns once the callback did");
    finalizer.join().expect("the finalizer");

    // Rank 1 saw a clean leave, and changed nothing else.
    let (ev, _) = wait_event(h1.0, Duration::from_secs(10), |e| {
        e.kind == ffd_event_kind::FFD_EVENT_LEFT && e.rank == 0
    })
    .expect("rank 1 learns that rank 0 left");
    assert_eq!((ev.epoch, ev.cause), (0, ffd_cause::FFD_CAUSE_NONE));
    let mut epoch = 9;
    // SAFETY: a live handle and a valid output.
    unsafe {
        assert_eq!(ffd_epoch(h1.0, &mut epoch), FFD_OK);
        assert_eq!((ffd_is_alive(h1.0, 0), ffd_is_alive(h1.0, 1)), (0, 1));
    }
    assert_eq!(epoch, 0, "a leave, not a failure");
    assert_eq!(state(h1.0).0.state, ffd_state_kind::FFD_STATE_RUNNING);
    finalize(h1);
    assert_eq!(
        stuck.calls.load(Ordering::SeqCst),
        calls,
        "no callback started once finalize had begun"
    );
    assert_eq!(stuck.calls_after_finalize.load(Ordering::SeqCst), 0);
}

/// What a rank's callback saw of the job.
#[derive(Default)]
struct Seen {
    stopped: Mutex<Vec<ffd_stop_cause>>,
    failed: Mutex<Vec<u32>>,
    excluded: AtomicUsize,
}

unsafe extern "C" fn seen_callback(userdata: *mut c_void, event: *const ffd_event_t) {
    // SAFETY: the test's Seen outlives the detector; ffd passes a valid event.
    let (seen, event) = unsafe { (&*userdata.cast::<Seen>(), &*event) };
    match event.kind {
        ffd_event_kind::FFD_EVENT_STOPPED => seen.stopped.lock().unwrap().push(event.stop_cause),
        ffd_event_kind::FFD_EVENT_FAILED => seen.failed.lock().unwrap().push(event.rank),
        ffd_event_kind::FFD_EVENT_SELF_EXCLUDED => {
            seen.excluded.fetch_add(1, Ordering::SeqCst);
        }
        _ => {}
    }
}

#[test]
fn a_progress_thread_panic_stops_the_rank_visibly_and_the_others_declare_it() {
    const N: usize = 3;
    const VICTIM: usize = 1;
    let seen: Vec<Seen> = (0..N).map(|_| Seen::default()).collect();
    let callbacks: Vec<Option<HostCb>> = seen
        .iter()
        .map(|s| {
            Some(HostCb {
                f: seen_callback,
                userdata: ptr::from_ref(s) as usize,
            })
        })
        .collect();
    let job = start_job(N, 10, 200, &callbacks);
    let victim = job[VICTIM].0;
    // SAFETY: a live handle; the hook exists in test builds only.
    unsafe { &*victim }
        .detector
        .inject_fault(Fault::Panic)
        .expect("the thread takes commands");

    // The embedder hears it: by queue, by callback, by ffd_state().
    let (ev, _) = wait_event(victim, Duration::from_secs(10), |e| {
        e.kind == ffd_event_kind::FFD_EVENT_STOPPED
    })
    .expect("a STOPPED event");
    assert_eq!(
        (ev.rank, ev.stop_cause, ev.cause),
        (
            VICTIM as u32,
            ffd_stop_cause::FFD_STOP_PANIC,
            ffd_cause::FFD_CAUSE_NONE
        )
    );
    assert_eq!(
        *seen[VICTIM].stopped.lock().unwrap(),
        [ffd_stop_cause::FFD_STOP_PANIC]
    );
    let (st, text) = state(victim);
    assert_eq!(
        (st.state, st.stop_cause),
        (
            ffd_state_kind::FFD_STATE_STOPPED,
            ffd_stop_cause::FFD_STOP_PANIC
        )
    );
    assert!(
        text.contains("panicked") && text.contains("injected fault"),
        "{text}"
    );
    // Liveness answers say they are stale, never "alive".
    let (mut epoch, mut n) = (9u64, 9usize);
    let mut failed = [u32::MAX; 4];
    // SAFETY: a live handle and valid outputs.
    unsafe {
        for r in 0..N as u32 {
            assert_eq!(
                ffd_is_alive(victim, r),
                FFD_ERR_STOPPED as c_int,
                "about rank {r}"
            );
        }
        assert!(last_error().contains("no longer runs"), "{}", last_error());
        assert_eq!(ffd_is_alive(victim, N as u32), 0, "beyond the job");
        assert_eq!(ffd_epoch(victim, &mut epoch), FFD_STALE);
        assert_eq!(
            ffd_failed_ranks(victim, failed.as_mut_ptr(), failed.len(), &mut n),
            FFD_STALE
        );
        assert_eq!(
            ffd_broadcast(victim, b"x".as_ptr().cast(), 1),
            FFD_ERR_STOPPED
        );
        assert_eq!(ffd_is_excluded(victim), 0);
    }
    assert_eq!((epoch, n), (0, 0), "what it knew at its end");

    // The others declare it, and nobody else changes state.
    for (rank, h) in job.iter().enumerate().filter(|(r, _)| *r != VICTIM) {
        let (ev, _) = wait_event(h.0, Duration::from_secs(10), |e| {
            e.kind == ffd_event_kind::FFD_EVENT_FAILED
        })
        .unwrap_or_else(|| panic!("rank {rank} never declared rank {VICTIM}"));
        assert_eq!(ev.rank, VICTIM as u32, "rank {rank}");
        // SAFETY: a live handle and a valid output.
        unsafe {
            assert_eq!(ffd_epoch(h.0, &mut epoch), FFD_OK);
            for r in (0..N).filter(|&r| r != VICTIM) {
                assert_eq!(ffd_is_alive(h.0, r as u32), 1, "rank {rank} about {r}");
            }
            assert_eq!(ffd_is_alive(h.0, VICTIM as u32), 0);
        }
        assert_eq!(epoch, 1, "rank {rank}");
        assert_eq!(state(h.0).0.state, ffd_state_kind::FFD_STATE_RUNNING);
        assert_eq!(*seen[rank].failed.lock().unwrap(), [VICTIM as u32]);
        assert!(seen[rank].stopped.lock().unwrap().is_empty());
        assert_eq!(seen[rank].excluded.load(Ordering::SeqCst), 0);
    }
    for h in job {
        finalize(h);
    }
    assert_eq!(seen[VICTIM].stopped.lock().unwrap().len(), 1, "one STOPPED");
}

#[test]
fn a_payload_is_copied_into_the_callers_buffer_and_waits_for_a_large_enough_one() {
    let job = start_job(2, 10, 200, &[]);
    let payload: Vec<u8> = (0..100u8).collect();
    // SAFETY: a live handle and a readable buffer.
    let rc = unsafe { ffd_broadcast(job[0].0, payload.as_ptr().cast(), payload.len()) };
    assert_eq!(rc, FFD_OK);
    let h = job[1].0;
    // SAFETY: a live handle.
    let fd = unsafe { ffd_event_fd(h) };
    let readable = || {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd during the call; ffd's fd, only polled.
        unsafe { libc::poll(&mut pfd, 1, 10_000) == 1 }
    };
    assert!(readable(), "the payload never arrived");
    let mut small = [0u8; 10];
    let mut ev = std::mem::MaybeUninit::<ffd_event_t>::uninit();
    // SAFETY: a live handle; `ev` valid for a write; each buffer valid for
    // its length (or NULL with 0).
    unsafe {
        assert_eq!(
            ffd_next_event(h, ev.as_mut_ptr(), ptr::null_mut(), 4),
            FFD_ERR_NULL
        );
        let rc = ffd_next_event(h, ev.as_mut_ptr(), small.as_mut_ptr().cast(), small.len());
        assert_eq!(rc, FFD_BUFFER_TOO_SMALL);
        let described = ev.assume_init();
        assert_eq!(
            (
                described.kind,
                described.rank,
                described.payload_len,
                described.payload
            ),
            (ffd_event_kind::FFD_EVENT_PAYLOAD, 0, 100, ptr::null())
        );
        assert_eq!(small, [0; 10], "nothing written to a buffer too small");
        // Still first in line, and the fd says so.
        assert!(readable());
        assert_eq!(
            ffd_next_event(h, ev.as_mut_ptr(), ptr::null_mut(), 0),
            FFD_BUFFER_TOO_SMALL
        );
        let mut buf = vec![0u8; FFD_MAX_PAYLOAD];
        let rc = ffd_next_event(h, ev.as_mut_ptr(), buf.as_mut_ptr().cast(), buf.len());
        assert_eq!(rc, FFD_OK);
        let got = ev.assume_init();
        assert_eq!(
            (got.kind, got.payload_len),
            (ffd_event_kind::FFD_EVENT_PAYLOAD, 100)
        );
        assert_eq!(got.payload, buf.as_ptr(), "points into the caller's buffer");
        assert_eq!(buf[..100], payload[..]);
        assert_eq!(
            ffd_next_event(h, ev.as_mut_ptr(), buf.as_mut_ptr().cast(), buf.len()),
            FFD_NO_EVENT
        );
    }
    for h in job {
        finalize(h);
    }
}
