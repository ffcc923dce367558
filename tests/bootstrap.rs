//! The in-process and host-callback bootstraps, and the record exchange
//! over them. Threads stand in for ranks; every wait is bounded by the
//! group's timeout, so a broken test fails instead of hanging.

use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use ffd::bootstrap::{
    Bootstrap, BootstrapError, ExchangeError, HostAllgather, JobView, LocalBootstrap,
    MAX_CONTRIBUTION, PROTOCOL_VERSION, PeerRecord, exchange,
};
use ffd::protocol::{EngineConfig, Rank};

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
        let results = on_threads(LocalBootstrap::group(n).unwrap(), |b| rounds_agree(b, 4));
        assert!(results.iter().all(Result::is_ok), "n = {n}: {results:?}");
    }
}

#[test]
fn a_local_group_needs_a_rank() {
    assert!(matches!(
        LocalBootstrap::group(0),
        Err(BootstrapError::Invalid(_))
    ));
}

#[test]
fn a_rank_that_never_comes_times_the_round_out_on_every_member() {
    let mut group = LocalBootstrap::group_with_timeout(3, Duration::from_millis(100)).unwrap();
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
    let group = LocalBootstrap::group(3).unwrap();
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
    let mut group = LocalBootstrap::group(1).unwrap();
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
fn host_over_local(n: u32) -> Vec<HostAllgather<impl HostCollective>> {
    LocalBootstrap::group(n)
        .unwrap()
        .into_iter()
        .map(|mut local| {
            let rank = local.rank();
            HostAllgather::new(rank, n, move |mine: &[u8], all: &mut [u8]| {
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
    let mut b = HostAllgather::new(0, 1, |mine: &[u8], all: &mut [u8]| {
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
    let mut failing = HostAllgather::new(0, 2, |_: &[u8], _: &mut [u8]| {
        Err("MPI_ERR_COMM: invalid communicator".into())
    })
    .unwrap();
    assert_eq!(
        failing.allgather(b"x").unwrap_err().to_string(),
        "the host's allgather failed: MPI_ERR_COMM: invalid communicator"
    );
    // A host that fills `all` with zeros never put our bytes at our place.
    let mut zeros = HostAllgather::new(1, 2, |_: &[u8], _: &mut [u8]| Ok(())).unwrap();
    assert_eq!(
        zeros.allgather(b"x").unwrap_err().to_string(),
        "the host's allgather is inconsistent: this rank's 8 bytes are not at its position (rank 1 × 8 bytes)"
    );
    assert!(matches!(
        HostAllgather::new(2, 2, |_: &[u8], _: &mut [u8]| Ok(())),
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

// ---- the record exchange ----

fn record(rank: Rank, size: u32, host: &str) -> PeerRecord {
    let mut r = PeerRecord::new(rank, size, host, &EngineConfig::default());
    r.provider = "tcp;ofi_rxm".into();
    r.fabric_addr = vec![rank as u8 + 1; 16 + rank as usize];
    r.slot_addr = 0x1000 * u64::from(rank);
    r.slot_key = 100 + u64::from(rank);
    r.ring_seed = 7 + u64::from(rank);
    if rank == 0 {
        r.job_key = 0x5eed_f00d;
    }
    r
}

#[test]
fn exchange_returns_every_record_and_rank_0s_choices() {
    let hosts = ["a", "b", "a", "c"];
    let views = on_threads(LocalBootstrap::group(4).unwrap(), |mut b| {
        let rank = b.rank();
        exchange(&mut b, &record(rank, 4, hosts[rank as usize])).unwrap()
    });
    for (rank, view) in (0..).zip(&views) {
        assert_eq!(view.rank, rank);
        assert_eq!(view.size, 4);
        assert_eq!(view.job_key, 0x5eed_f00d);
        assert_eq!(view.ring_seed, 7, "rank 0's seed");
        assert_eq!(view.nodes(), [0, 1, 0, 2]);
        for r in 0..4 {
            assert_eq!(view.record(r), Some(&record(r, 4, hosts[r as usize])));
        }
        assert_eq!(view.records, views[0].records);
    }
}

#[test]
fn exchange_over_the_host_adapter() {
    let views = on_threads(host_over_local(3), |mut b| {
        let rank = b.rank();
        exchange(&mut b, &record(rank, 3, "h")).unwrap()
    });
    assert!(
        views
            .iter()
            .all(|v| v.records == views[0].records && v.records.len() == 3)
    );
}

/// Each rank's exchange error text when rank `odd` contributes `tweak`ed.
fn exchange_errors(n: u32, odd: Rank, tweak: impl Fn(&mut PeerRecord) + Sync) -> Vec<String> {
    on_threads(LocalBootstrap::group(n).unwrap(), |mut b| {
        let rank = b.rank();
        let mut mine = record(rank, n, "h");
        if rank == odd {
            tweak(&mut mine);
        }
        exchange(&mut b, &mine)
            .map(|_: JobView| ())
            .unwrap_err()
            .to_string()
    })
}

#[test]
fn a_version_mismatch_fails_every_rank_naming_both_versions() {
    let errors = exchange_errors(4, 3, |r| r.protocol_version = PROTOCOL_VERSION + 1);
    for e in &errors[..3] {
        assert_eq!(e, "rank 3 runs ffd protocol version 2, this rank runs 1");
    }
    assert_eq!(
        errors[3],
        "rank 0 runs ffd protocol version 1, this rank runs 2"
    );
}

#[test]
fn a_provider_or_setting_mismatch_fails_every_rank() {
    let errors = exchange_errors(3, 1, |r| r.provider = "verbs;ofi_rxm".into());
    assert_eq!(
        errors[0],
        "rank 1 uses provider `verbs;ofi_rxm`, this rank uses `tcp;ofi_rxm`"
    );
    assert_eq!(
        errors[1],
        "rank 0 uses provider `tcp;ofi_rxm`, this rank uses `verbs;ofi_rxm`"
    );
    assert_eq!(errors[2], errors[0]);

    let errors = exchange_errors(2, 1, |r| r.settings.timeout = Duration::from_millis(250));
    assert_eq!(
        errors[0],
        "rank 1 runs with timeout 250ms, this rank with 100ms"
    );
    assert_eq!(
        errors[1],
        "rank 0 runs with timeout 100ms, this rank with 250ms"
    );

    let errors = exchange_errors(2, 0, |r| r.settings.ring = ffd::protocol::RingKind::Shuffle);
    assert_eq!(
        errors[1],
        "rank 0 runs with ring shuffle, this rank with topology"
    );
}

#[test]
fn a_size_mismatch_fails_the_odd_rank_locally_and_the_others_by_name() {
    let errors = exchange_errors(3, 2, |r| r.job_size = 8);
    assert_eq!(
        errors[0],
        "rank 2 was started for a job of 8 ranks, this rank for 3"
    );
    assert_eq!(errors[1], errors[0]);
    assert_eq!(
        errors[2],
        "this rank's bootstrap record is unusable: it says rank 2 of 8, the bootstrap says rank 2 of 3"
    );
}

#[test]
fn an_unencodable_record_still_takes_part_so_nobody_hangs() {
    let errors = exchange_errors(2, 1, |r| r.fabric_addr = vec![0; 5000]);
    assert_eq!(
        errors[0],
        "rank 1's bootstrap record is not an ffd bootstrap record (no `FFDR` magic)"
    );
    assert_eq!(
        errors[1],
        "this rank's bootstrap record is unusable: it has a fabric address of 5000 bytes, more than 4096"
    );
}

#[test]
fn rank_0_must_send_a_job_key_and_everyone_an_address() {
    let errors = exchange_errors(2, 0, |r| r.job_key = 0);
    assert_eq!(errors, vec!["rank 0 contributed no job key"; 2]);
    let errors = exchange_errors(2, 1, |r| r.fabric_addr.clear());
    assert_eq!(
        errors,
        vec!["rank 1 contributed an empty fabric address"; 2]
    );
}

/// A bootstrap that returns canned contributions: for what no honest
/// bootstrap produces (duplicate ranks, garbage, wrong counts).
struct Canned {
    rank: Rank,
    size: u32,
    all: Vec<Vec<u8>>,
}

impl Bootstrap for Canned {
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn allgather(&mut self, _mine: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        Ok(self.all.clone())
    }
}

fn canned_error(all: Vec<Vec<u8>>) -> String {
    let size = 3;
    let mut b = Canned { rank: 0, size, all };
    exchange(&mut b, &record(0, size, "h"))
        .unwrap_err()
        .to_string()
}

#[test]
fn exchange_rejects_what_no_honest_bootstrap_returns() {
    let enc = |r: PeerRecord| r.encode().unwrap();
    let good = |rank| enc(record(rank, 3, "h"));
    assert_eq!(
        canned_error(vec![good(0), good(1), good(1)]),
        "the records of ranks 1 and 2 both claim rank 1"
    );
    assert_eq!(
        canned_error(vec![good(0), good(2), good(1)]),
        "the bootstrap put a record claiming rank 2 in rank 1's place"
    );
    assert_eq!(
        canned_error(vec![good(0), good(1)]),
        "the bootstrap returned 2 contributions for a job of 3 ranks"
    );
    assert_eq!(
        canned_error(vec![good(0), b"FFDR\x01\x00".to_vec(), good(2)]),
        "rank 1's bootstrap record is truncated: 6 bytes, the fixed header needs 2 more"
    );
    let mut v9 = good(2);
    v9[4] = 9;
    assert_eq!(
        canned_error(vec![good(0), good(1), v9]),
        "rank 2's bootstrap record is of record version 9, this rank reads version 1"
    );
    let mut empty = Canned {
        rank: 0,
        size: 0,
        all: vec![],
    };
    assert!(matches!(
        exchange(&mut empty, &record(0, 0, "h")),
        Err(ExchangeError::WrongCount { got: 0, size: 0 })
    ));
    assert!(matches!(
        {
            let mut b = Canned {
                rank: 0,
                size: 3,
                all: vec![good(0), b"junk".to_vec(), good(2)],
            };
            exchange(&mut b, &record(0, 3, "h"))
        },
        Err(ExchangeError::Record { rank: 1, .. })
    ));
}
