//! The runtime's start-up exchange of peer records: one allgather of
//! [`PeerRecord`]s over a bootstrap (in-process groups, a host's
//! fixed-length collective, the TCP rendezvous), and the checks that make a
//! misconfigured job fail on every rank with a message naming the odd rank
//! and both values. Threads stand in for ranks; every wait is bounded by
//! the bootstrap's timeout, so a broken test fails instead of hanging.

use std::thread;
use std::time::Duration;

use ffd::bootstrap::secret::JobSecret;
use ffd::bootstrap::tcp::{Rendezvous, TcpBootstrap};
use ffd::bootstrap::{Bootstrap, BootstrapError, EmbedderAllgather, InProcessBootstrap};
use ffd::config::{Config, LocalMode, setting, var};
use ffd::protocol::{QuorumMode, Rank, RingKind, wire};
use ffd::runtime::startup::{ExchangeError, JobView, PeerRecord, SecretClaim, exchange, keys};

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

/// The shape of a host's fixed-length allgather.
trait HostCollective: FnMut(&[u8], &mut [u8]) -> Result<(), String> + Send {}
impl<F: FnMut(&[u8], &mut [u8]) -> Result<(), String> + Send> HostCollective for F {}

/// A host collective (fixed length, like MPI_Allgather) built on a local
/// group.
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

fn record(rank: Rank, size: u32, host: &str) -> PeerRecord {
    let mut r = PeerRecord::new(rank, size, host, &Config::default());
    r.provider = "tcp;ofi_rxm".into();
    r.fabric_addr = vec![rank as u8 + 1; 16 + rank as usize];
    r.slot_addr = 0x1000 * u64::from(rank);
    r.slot_key = 100 + u64::from(rank);
    r.ring_seed = 7 + u64::from(rank);
    if rank == 0 {
        r.job_key = 0x5eed_f00d;
        r.secret = SecretClaim::Drawn(rank0_secret());
    }
    r
}

/// The secret rank 0 draws in these jobs.
fn rank0_secret() -> JobSecret {
    JobSecret::from_bytes([0x5e; 32])
}

#[test]
fn exchange_returns_every_record_and_rank_0s_choices() {
    let hosts = ["a", "b", "a", "c"];
    let views = on_threads(InProcessBootstrap::group(4).unwrap(), |mut b| {
        let rank = b.rank();
        exchange(&mut b, &record(rank, 4, hosts[rank as usize])).unwrap()
    });
    for (rank, view) in (0..).zip(&views) {
        assert_eq!(view.rank, rank);
        assert_eq!(view.size, 4);
        assert_eq!(view.job_key, 0x5eed_f00d);
        assert_eq!(view.ring_seed, 7, "rank 0's seed");
        assert_eq!(view.drawn_secret, Some(rank0_secret()), "rank 0's secret");
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
    on_threads(InProcessBootstrap::group(n).unwrap(), |mut b| {
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
    let errors = exchange_errors(4, 3, |r| r.protocol_version = u16::from(wire::VERSION) + 1);
    for e in &errors[..3] {
        assert_eq!(e, "rank 3 runs ffd protocol version 3, this rank runs 2");
    }
    assert_eq!(
        errors[3],
        "rank 0 runs ffd protocol version 2, this rank runs 3"
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

    let errors = exchange_errors(2, 1, |r| {
        r.settings
            .set(&setting::TIMEOUT, &Duration::from_millis(250));
    });
    assert_eq!(
        errors[0],
        "rank 1 runs with FFD_TIMEOUT=250ms, this rank with FFD_TIMEOUT=100ms"
    );
    assert_eq!(
        errors[1],
        "rank 0 runs with FFD_TIMEOUT=100ms, this rank with FFD_TIMEOUT=250ms"
    );

    let errors = exchange_errors(2, 0, |r| {
        r.settings.set(&setting::RING, &RingKind::Shuffle);
    });
    assert_eq!(
        errors[1],
        "rank 0 runs with FFD_RING=shuffle, this rank with FFD_RING=topology"
    );

    let errors = exchange_errors(2, 1, |r| {
        r.settings.set(&setting::LOCAL, &LocalMode::Off);
    });
    assert_eq!(
        errors[0],
        "rank 1 runs with FFD_LOCAL=off, this rank with FFD_LOCAL=auto"
    );

    let errors = exchange_errors(3, 2, |r| {
        r.settings.set(&setting::QUORUM, &QuorumMode::Off);
    });
    for e in &errors[..2] {
        assert_eq!(
            e,
            "rank 2 runs with FFD_QUORUM=off, this rank with FFD_QUORUM=majority"
        );
    }
    assert_eq!(
        errors[2],
        "rank 0 runs with FFD_QUORUM=majority, this rank with FFD_QUORUM=off"
    );
}

/// A record from a build whose table marks other settings job-wide, under
/// the same record version, is refused by its count, not compared value by
/// misplaced value.
#[test]
fn a_record_with_another_count_of_job_wide_settings_is_refused() {
    let mut short = record(1, 2, "h");
    let mut bytes = short.encode().unwrap();
    // Drop the last value (FFD_LOCAL's) from rank 1's record.
    let local = short.settings.get(var::LOCAL).unwrap().len();
    let count_at = 112; // after the liveness port and the flags (record version 5)
    let count = usize::from(bytes[count_at]);
    let mut at = count_at + 1;
    for _ in 0..count - 1 {
        at += 1 + usize::from(bytes[at]);
    }
    assert_eq!(usize::from(bytes[at]), local);
    bytes.drain(at..at + 1 + local);
    bytes[count_at] -= 1;
    short = PeerRecord::decode(&bytes).unwrap();
    assert_eq!(short.settings.len(), count - 1);

    let errors = exchange_errors(2, 1, |r| *r = short.clone());
    assert_eq!(
        errors[0],
        format!(
            "rank 1 carries {} job-wide settings, this rank {count}: every rank must run the \
             same ffd build",
            count - 1
        )
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
    // Start-up's first round: nobody's address, no error.
    let views = on_threads(InProcessBootstrap::group(2).unwrap(), |mut b| {
        let mut mine = record(b.rank(), 2, "h");
        mine.fabric_addr.clear();
        exchange(&mut b, &mine).unwrap()
    });
    assert!(
        views
            .iter()
            .all(|v| v.records.iter().all(|r| r.fabric_addr.is_empty()))
    );
    let errors = exchange_errors(2, 0, |r| r.secret = SecretClaim::None);
    assert_eq!(
        errors,
        vec!["no rank holds a job secret and rank 0 contributed none"; 2]
    );
}

/// Every rank holds the same secret (a launcher's file): only fingerprints
/// travel, and the view carries no secret.
#[test]
fn ranks_holding_one_secret_send_only_its_fingerprint() {
    let secret = JobSecret::from_bytes([0x77; 32]);
    let views = on_threads(InProcessBootstrap::group(3).unwrap(), |mut b| {
        let rank = b.rank();
        let mut mine = record(rank, 3, "h");
        mine.secret = keys::claim(rank, Some(&secret)).unwrap();
        exchange(&mut b, &mine).unwrap()
    });
    for view in &views {
        assert_eq!(view.drawn_secret, None);
        for r in &view.records {
            assert_eq!(
                r.secret,
                SecretClaim::Held {
                    fingerprint: keys::fingerprint(&secret)
                }
            );
            let encoded = r.encode().unwrap();
            assert!(
                !encoded
                    .windows(32)
                    .any(|w| w == secret.as_bytes().as_slice()),
                "the secret itself never travels"
            );
        }
    }
}

/// Ranks given different secrets fail at start, each naming the other,
/// rather than silently dropping each other's messages.
#[test]
fn ranks_holding_different_secrets_fail_naming_both() {
    let (a, b) = (
        JobSecret::from_bytes([1; 32]),
        JobSecret::from_bytes([2; 32]),
    );
    let hex = |s: &JobSecret| {
        keys::fingerprint(s)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let errors = exchange_errors(3, 2, |r| {
        r.secret = SecretClaim::Held {
            fingerprint: keys::fingerprint(&b),
        }
    });
    // Ranks 0 and 1 hold none here (rank 0 drew one); rank 2 holds `b`.
    assert_eq!(
        errors[0],
        format!(
            "rank 2 holds a job secret with fingerprint {}, this rank holds no job secret of \
             its own: every rank must be given the same job secret (FFD_SECRET_FILE or the \
             launcher's) or none",
            hex(&b)
        )
    );
    assert!(
        errors[2].starts_with(
            "rank 0 holds no job secret of its own, this rank holds a job secret with fingerprint"
        ),
        "{}",
        errors[2]
    );
    let errors = on_threads(InProcessBootstrap::group(2).unwrap(), |mut g| {
        let rank = g.rank();
        let mut mine = record(rank, 2, "h");
        let held = if rank == 0 { &a } else { &b };
        mine.secret = keys::claim(rank, Some(held)).unwrap();
        exchange(&mut g, &mine).unwrap_err().to_string()
    });
    assert!(
        errors[0].starts_with(&format!(
            "rank 1 holds a job secret with fingerprint {}, this rank holds a job secret with fingerprint {}",
            hex(&b),
            hex(&a)
        )),
        "{}",
        errors[0]
    );
    assert!(errors[1].starts_with("rank 0 holds"), "{}", errors[1]);
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
        canned_error(vec![good(0), b"FFDR\x05\x00".to_vec(), good(2)]),
        "rank 1's bootstrap record is truncated: 6 bytes, the fixed header needs 2 more"
    );
    let mut v9 = good(2);
    v9[4] = 9;
    assert_eq!(
        canned_error(vec![good(0), good(1), v9]),
        "rank 2's bootstrap record is of record version 9, this rank reads version 5"
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

/// Generous for loopback on a loaded machine; only a hang reaches it.
const LONG: Duration = Duration::from_secs(20);

#[test]
fn the_record_exchange_runs_over_tcp() {
    let n = 3;
    let secret = JobSecret::from_bytes([3; 32]);
    let h = Rendezvous::bind("127.0.0.1:0", n, &secret)
        .unwrap()
        .timeout(LONG)
        .spawn()
        .unwrap();
    let addr = h.addr().to_string();
    let views: Vec<_> = thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let (addr, secret) = (addr.clone(), &secret);
                s.spawn(move || {
                    let mut b = TcpBootstrap::connect(&addr, rank, n, secret, LONG).unwrap();
                    let mut mine =
                        PeerRecord::new(rank, n, format!("node{rank}"), &Config::default());
                    mine.provider = "tcp".into();
                    mine.fabric_addr = vec![rank as u8; 24];
                    mine.job_key = if rank == 0 { 77 } else { 0 };
                    if rank == 0 {
                        mine.secret = SecretClaim::Drawn(rank0_secret());
                    }
                    exchange(&mut b, &mine).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        views
            .iter()
            .all(|v| v.job_key == 77 && v.records == views[0].records)
    );
    assert_eq!(views[2].nodes(), [0, 1, 2]);
    assert!(h.join().is_ok());
}

/// Whether a job needs the fabric, decided alike on every rank from the
/// first round's records: none only when every rank is on one host and
/// every record says it reads its mailbox.
#[test]
fn only_a_job_on_one_host_that_reads_its_mailboxes_needs_no_fabric() {
    let decide = |hosts: [&'static str; 3], mail: [bool; 3]| {
        on_threads(InProcessBootstrap::group(3).unwrap(), move |mut b| {
            let rank = b.rank();
            let mut mine = record(rank, 3, hosts[rank as usize]);
            mine.fabric_addr.clear();
            mine.mailbox = mail[rank as usize];
            exchange(&mut b, &mine).unwrap().one_host_by_mail()
        })
    };
    assert_eq!(decide(["h"; 3], [true; 3]), [true; 3]);
    assert_eq!(decide(["h"; 3], [true, false, true]), [false; 3]);
    assert_eq!(decide(["h", "h", "g"], [true; 3]), [false; 3]);
}
