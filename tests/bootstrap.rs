//! The in-process and host-callback bootstraps: allgathers of bytes over
//! several rounds, and every way a round fails. (The peer records ranks
//! exchange over them are tested with the runtime's start-up, in
//! `runtime_startup.rs`.) Threads stand in for ranks; every wait is bounded
//! by the group's timeout, so a broken test fails instead of hanging.

use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use ffd::bootstrap::{
    Bootstrap, BootstrapError, EmbedderAllgather, InProcessBootstrap, MAX_CONTRIBUTION,
};
use ffd::protocol::Rank;

/// Runs `f` on one thread per member and returns the results by rank.
fn on_threads<B, T>(members: Vec<B>, f: impl Fn(B) -> T + Sync) -> Vec<T>
where
    B: Bootstrap + Send,
    T: Send,
{
    thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = members.into_iter().map(|m| s.spawn(move || f(m))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    })
}

/// Rank r's contribution to round k: r·k + (r mod 3) bytes of a value
/// depending on both, so lengths differ between ranks and rounds.
fn contribution(rank: Rank, round: u32) -> Vec<u8> {
    let len = (rank * round + rank % 3) as usize;
    vec![(rank * 31 + round) as u8; len]
}

/// Several rounds of differing lengths, plus a barrier; checks every result.
fn rounds_agree<B: Bootstrap>(mut b: B, rounds: u32) -> Result<(), String> {
    let size = b.size();
    for round in 1..=rounds {
        let all = b
            .allgather(&contribution(b.rank(), round))
            .map_err(|e| e.to_string())?;
        let want: Vec<Vec<u8>> = (0..size).map(|r| contribution(r, round)).collect();
        if all != want {
            return Err(format!("rank {} round {round}: got {all:?}", b.rank()));
        }
        let barrier = b.allgather(&[]).map_err(|e| e.to_string())?;
        if barrier != vec![Vec::<u8>::new(); size as usize] {
            return Err(format!("barrier returned {barrier:?}"));
        }
    }
    Ok(())
}

#[test]
fn local_groups_gather_several_rounds_of_different_lengths() {
    for n in [1, 2, 5] {
        let results = on_threads(InProcessBootstrap::group(n).unwrap(), |b| {
            rounds_agree(b, 4)
        });
        assert!(results.iter().all(Result::is_ok), "n = {n}: {results:?}");
    }
}

#[test]
fn a_local_group_needs_a_rank() {
    assert!(matches!(
        InProcessBootstrap::group(0),
        Err(BootstrapError::Invalid(_))
    ));
}

#[test]
fn a_rank_that_never_comes_times_the_round_out_on_every_member() {
    let mut group = InProcessBootstrap::group_with_timeout(3, Duration::from_millis(100)).unwrap();
    let absent = group.pop().unwrap(); // rank 2: alive but silent
    let start = Instant::now();
    let errors = on_threads(group, |mut b| b.allgather(b"x").unwrap_err().to_string());
    assert!(start.elapsed() < Duration::from_secs(5));
    let timeout = "timed out after 100ms waiting for rank 2 in round 1";
    assert!(errors.iter().any(|e| e == timeout), "{errors:?}");
    // The other member saw the same timeout, or learnt of it from the group.
    for e in &errors {
        assert!(
            e == timeout
                || *e == format!("the bootstrap group failed: rank 0: {timeout}")
                || *e == format!("the bootstrap group failed: rank 1: {timeout}"),
            "{e}"
        );
    }
    // The group stays failed.
    let mut absent = absent;
    let late = absent.allgather(b"late").unwrap_err().to_string();
    assert!(
        late.starts_with("the bootstrap group failed: rank "),
        "{late}"
    );
}

#[test]
fn a_member_dropped_mid_job_fails_the_next_round_naming_it() {
    let group = InProcessBootstrap::group(3).unwrap();
    let errors = on_threads(group, |mut b| {
        b.allgather(b"one").map_err(|e| e.to_string())?;
        if b.rank() == 1 {
            return Ok(()); // leaves after round 1
        }
        b.allgather(b"two").map(|_| ()).map_err(|e| e.to_string())
    });
    assert_eq!(errors[1], Ok(()));
    for r in [0, 2] {
        assert_eq!(
            errors[r],
            Err("rank 1 left the group before round 2 completed".to_owned())
        );
    }
}

#[test]
fn local_contributions_over_the_limit_are_refused() {
    let mut group = InProcessBootstrap::group(1).unwrap();
    let err = group[0]
        .allgather(&vec![0; MAX_CONTRIBUTION + 1])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "rank 0's contribution of {} bytes exceeds the limit of {MAX_CONTRIBUTION} bytes",
            MAX_CONTRIBUTION + 1
        )
    );
}

/// The shape of a host's fixed-length allgather.
trait HostCollective: FnMut(&[u8], &mut [u8]) -> Result<(), String> + Send {}
impl<F: FnMut(&[u8], &mut [u8]) -> Result<(), String> + Send> HostCollective for F {}

/// A host collective (fixed length, like MPI_Allgather) built on a local
/// group, counting its calls.
fn host_over_local(n: u32) -> Vec<EmbedderAllgather<impl HostCollective>> {
    InProcessBootstrap::group(n)
        .unwrap()
        .into_iter()
        .map(|mut local| {
            let rank = local.rank();
            EmbedderAllgather::new(rank, n, move |mine: &[u8], all: &mut [u8]| {
                let gathered = local.allgather(mine).map_err(|e| e.to_string())?;
                for (r, bytes) in gathered.iter().enumerate() {
                    if bytes.len() != mine.len() {
                        return Err(format!(
                            "rank {r} passed {} bytes, not {}",
                            bytes.len(),
                            mine.len()
                        ));
                    }
                    all[r * mine.len()..(r + 1) * mine.len()].copy_from_slice(bytes);
                }
                Ok(())
            })
            .unwrap()
        })
        .collect()
}

#[test]
fn host_allgather_turns_variable_lengths_into_fixed_rounds() {
    for n in [1, 3, 4] {
        let results = on_threads(host_over_local(n), |b| rounds_agree(b, 3));
        assert!(results.iter().all(Result::is_ok), "n = {n}: {results:?}");
    }
}

#[test]
fn host_allgather_calls_the_host_once_for_a_barrier_and_twice_otherwise() {
    let calls = Mutex::new(Vec::new());
    let mut b = EmbedderAllgather::new(0, 1, |mine: &[u8], all: &mut [u8]| {
        calls.lock().unwrap().push(mine.len());
        all.copy_from_slice(mine);
        Ok(())
    })
    .unwrap();
    assert_eq!(b.allgather(&[]).unwrap(), vec![Vec::<u8>::new()]);
    assert_eq!(b.allgather(b"abc").unwrap(), vec![b"abc".to_vec()]);
    let _ = b;
    assert_eq!(*calls.lock().unwrap(), [8, 8, 3]);
}

#[test]
fn host_allgather_reports_the_hosts_failure_and_inconsistency() {
    let mut failing = EmbedderAllgather::new(0, 2, |_: &[u8], _: &mut [u8]| {
        Err("MPI_ERR_COMM: invalid communicator".into())
    })
    .unwrap();
    assert_eq!(
        failing.allgather(b"x").unwrap_err().to_string(),
        "the embedder's allgather failed: MPI_ERR_COMM: invalid communicator"
    );
    // A host that fills `all` with zeros never put our bytes at our place.
    let mut zeros = EmbedderAllgather::new(1, 2, |_: &[u8], _: &mut [u8]| Ok(())).unwrap();
    assert_eq!(
        zeros.allgather(b"x").unwrap_err().to_string(),
        "the embedder's allgather is inconsistent: this rank's 8 bytes are not at its position (rank 1 × 8 bytes)"
    );
    assert!(matches!(
        EmbedderAllgather::new(2, 2, |_: &[u8], _: &mut [u8]| Ok(())),
        Err(BootstrapError::Invalid(_))
    ));
}

#[test]
fn host_allgather_fails_every_rank_on_one_oversized_contribution() {
    let results = on_threads(host_over_local(3), |mut b| {
        let len = if b.rank() == 2 {
            MAX_CONTRIBUTION + 1
        } else {
            4
        };
        b.allgather(&vec![1; len]).unwrap_err().to_string()
    });
    let want = format!(
        "rank 2's contribution of {} bytes exceeds the limit of {MAX_CONTRIBUTION} bytes",
        MAX_CONTRIBUTION + 1
    );
    assert_eq!(results, vec![want; 3]);
}
