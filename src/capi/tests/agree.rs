//! Agreements and views through the C ABI, threads standing in for ranks:
//! ffd_iagree() and ffd_agree_test() after FFD_EVENT_AGREED, the blocking
//! ffd_agree(), a departure becoming FFD_EVENT_VIEW and ffd_view(), a
//! decided failed set too large for the buffer (FFD_BUFFER_TOO_SMALL, the
//! request keeps its result), an agreement left open at ffd_finalize()
//! (FFD_ERR_STOPPED), and NULL arguments.

use std::ffi::c_int;
use std::ptr;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::super::ffd_result::*;
use super::super::*;
use super::{Barrier, Group, RankCtx, last_error, loopback_config, shared_allgather, wait_event};

const WITHIN: Duration = Duration::from_secs(20);

/// (code, done, flags, view id, count, ranks written) of ffd_agree_test().
///
/// # Safety
/// `h` and `req` are live.
unsafe fn test(
    h: *const ffd_t,
    req: *const ffd_agree_req_t,
    cap: usize,
) -> (ffd_result, c_int, u64, u64, usize, Vec<u32>) {
    let (mut done, mut flags, mut view, mut count) = (7, 7, 7, 7);
    let mut buf = vec![u32::MAX; cap];
    // SAFETY: live handle and request, valid outputs, `buf` of `cap`.
    let rc = unsafe {
        ffd_agree_test(
            h,
            req,
            &mut done,
            &mut flags,
            &mut view,
            buf.as_mut_ptr(),
            cap,
            &mut count,
        )
    };
    (rc, done, flags, view, count, buf)
}

#[test]
fn ranks_agree_through_the_c_abi_and_see_the_same_views() {
    const N: usize = 4;
    let group = Arc::new(Group {
        barrier: Barrier::new(N),
        slots: Mutex::new(vec![Vec::new(); N]),
    });
    let step = Arc::new(Barrier::new(N));
    let threads: Vec<_> = (0..N)
        .map(|rank| {
            let (group, step) = (Arc::clone(&group), Arc::clone(&step));
            thread::spawn(move || {
                let cfg = loopback_config();
                let ctx = RankCtx { rank, group };
                let oob = ffd_oob_t {
                    rank: rank as c_int,
                    size: N as c_int,
                    allgather: Some(shared_allgather),
                    userdata: ptr::from_ref(&ctx).cast_mut().cast(),
                };
                let mut h = ptr::null_mut();
                // SAFETY: valid oob (ctx lives through the call) and config.
                let rc = unsafe { ffd_init(&oob, cfg, &mut h) };
                assert_eq!(rc, FFD_OK, "rank {rank}: {}", last_error());
                // SAFETY: the config is not needed after init.
                unsafe { ffd_config_free(cfg) };
                step.wait();

                // 1. A non-blocking agreement: the AND of every rank's flags.
                let mut req = ptr::null_mut();
                // SAFETY: a live handle; `req` valid for a write.
                unsafe {
                    assert_eq!(ffd_iagree(h, 0, ptr::null_mut()), FFD_ERR_NULL);
                    assert_eq!(ffd_iagree(h, !(1u64 << rank), &mut req), FFD_OK);
                }
                assert!(!req.is_null());
                let (ev, _) = wait_event(h, WITHIN, |e| e.kind == ffd_event_kind::FFD_EVENT_AGREED)
                    .unwrap_or_else(|| panic!("rank {rank}: no AGREED event"));
                assert_eq!(ev.seq, 1);
                // SAFETY: live handle and request.
                let got = unsafe { test(h, req, 4) };
                assert_eq!(
                    got,
                    (FFD_OK, 1, !0xf, 0, 0, vec![u32::MAX; 4]),
                    "rank {rank}"
                );
                // SAFETY: the request is ours, freed once.
                unsafe { ffd_agree_free(req) };

                // 2. The blocking form, twice.
                for round in 0..2u64 {
                    let (mut flags, mut view, mut count) = (0, 9, 9);
                    let mut buf = [u32::MAX; 4];
                    // SAFETY: a live handle and valid outputs.
                    let rc = unsafe {
                        ffd_agree(
                            h,
                            u64::from(rank != 2) | (round << 8),
                            &mut flags,
                            &mut view,
                            buf.as_mut_ptr(),
                            buf.len(),
                            &mut count,
                        )
                    };
                    assert_eq!(rc, FFD_OK, "rank {rank}: {}", last_error());
                    assert_eq!((flags, view, count), (round << 8, 0, 0), "rank {rank}");
                }
                step.wait();

                // 3. Rank 3 starts an agreement nobody joins, then leaves:
                // it ends with FFD_ERR_STOPPED. The others see a view
                // naming it, then agree without it.
                if rank == N - 1 {
                    let mut open = ptr::null_mut();
                    // SAFETY: a live handle; `open` valid for a write.
                    assert_eq!(unsafe { ffd_iagree(h, u64::MAX, &mut open) }, FFD_OK);
                    // SAFETY: our live handle, not used by anyone else now.
                    assert_eq!(unsafe { ffd_finalize(&mut h) }, FFD_OK);
                    assert!(h.is_null());
                    let (mut flags, mut view, mut count) = (7, 7, 7);
                    // SAFETY: a live request (it outlives the detector); the
                    // handle may be NULL.
                    let rc = unsafe {
                        ffd_agree_wait(
                            h,
                            open,
                            &mut flags,
                            &mut view,
                            ptr::null_mut(),
                            0,
                            &mut count,
                        )
                    };
                    assert_eq!(rc, FFD_ERR_STOPPED, "{}", last_error());
                    assert!(last_error().contains("left"), "{}", last_error());
                    assert_eq!((flags, view, count), (7, 7, 7), "nothing written");
                    // SAFETY: as above.
                    let got = unsafe { test(h, open, 1) };
                    assert_eq!(got.0, FFD_ERR_STOPPED);
                    assert_eq!(got.1, 7, "`done` not written on failure");
                    // SAFETY: ours, freed once, after finalize.
                    unsafe { ffd_agree_free(open) };
                } else {
                    let (ev, bytes) =
                        wait_event(h, WITHIN, |e| e.kind == ffd_event_kind::FFD_EVENT_VIEW)
                            .unwrap_or_else(|| panic!("rank {rank}: no view"));
                    assert_eq!((ev.seq, ev.payload_len), (1, 4), "rank {rank}");
                    assert_eq!(bytes, (N as u32 - 1).to_ne_bytes());
                    let (mut id, mut count) = (9, 9);
                    let mut buf = [u32::MAX; 2];
                    // SAFETY: a live handle and valid outputs.
                    unsafe {
                        assert_eq!(
                            ffd_view(h, &mut id, buf.as_mut_ptr(), buf.len(), &mut count),
                            FFD_OK
                        );
                        assert_eq!(
                            ffd_view(h, &mut id, ptr::null_mut(), 1, &mut count),
                            FFD_ERR_NULL
                        );
                    }
                    assert_eq!((id, count, buf), (1, 1, [3, u32::MAX]));

                    let mut req = ptr::null_mut();
                    // SAFETY: a live handle; `req` valid for a write.
                    assert_eq!(unsafe { ffd_iagree(h, u64::MAX, &mut req) }, FFD_OK);
                    wait_event(h, WITHIN, |e| e.kind == ffd_event_kind::FFD_EVENT_AGREED)
                        .unwrap_or_else(|| panic!("rank {rank}: no AGREED event"));
                    // Too small a buffer: the outputs but the ranks, and
                    // the request keeps its result.
                    // SAFETY: live handle and request.
                    let got = unsafe { test(h, req, 0) };
                    assert_eq!(got, (FFD_BUFFER_TOO_SMALL, 1, u64::MAX, 1, 1, vec![]));
                    // SAFETY: as above.
                    let got = unsafe { test(h, req, 2) };
                    assert_eq!(got, (FFD_OK, 1, u64::MAX, 1, 1, vec![3, u32::MAX]));
                    // SAFETY: as above; NULL outputs are refused.
                    unsafe {
                        let mut done = 5;
                        let rc = ffd_agree_test(
                            h,
                            req,
                            &mut done,
                            ptr::null_mut(),
                            ptr::null_mut(),
                            ptr::null_mut(),
                            0,
                            ptr::null_mut(),
                        );
                        assert_eq!((rc, done), (FFD_ERR_NULL, 5));
                        ffd_agree_free(req);
                        ffd_agree_free(ptr::null_mut());
                    }
                    // SAFETY: our live handle.
                    assert_eq!(unsafe { ffd_finalize(&mut h) }, FFD_OK);
                }
            })
        })
        .collect();
    let mut failures = Vec::new();
    for (rank, t) in threads.into_iter().enumerate() {
        if let Err(e) = t.join() {
            failures.push(format!(
                "rank {rank}: {}",
                super::super::error::panic_text(e.as_ref())
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}
