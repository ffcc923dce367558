//! Adversarial messages against running detectors, over the real fabric
//! (`tcp;ofi_rxm` and `sockets` on loopback). The job has three ranks:
//! ranks 0 and 1 are detectors; rank 2 is this test, a plain endpoint that
//! took part in the address exchange, so it is on everyone's address
//! vector, and through the exchange (the embedder's channel) it learnt the job
//! key and rank 0's drawn secret, as any rank does. Its record names
//! another host than the detectors' (a rank of their own host would talk
//! to them through the host's mailboxes, and their fabric port admits no
//! address of their host: `docs/design.md` §5.4 "What the authentication stops"). From there it sends:
//!
//! - as a stale process of an earlier job on the same addresses: notices
//!   naming ranks 0 and 1 under another job key, and under this job's key
//!   with another secret;
//! - as a member forging its sender: a well-sealed notice naming rank 0
//!   that claims to come from rank 1 (the provider reports sources);
//! - a genuine message sealed for it (rank 0 declares it: it never beats)
//!   replayed to rank 1.
//!
//! Ranks 0 and 1 drop each one and count it by reason; neither raises
//! `SelfExcluded` nor loses the other, and only the silent rank 2 is
//! declared failed.

mod prereq;

use std::thread;
use std::time::{Duration, Instant};

use ffd::bootstrap::{Bootstrap, InProcessBootstrap};
use ffd::config::{Config, CoreChoice};
use ffd::fabric::*;
use ffd::protocol::RejectReason;
use ffd::protocol::wire::{self, Encoder, JobKeys, Message};
use ffd::runtime::startup::{JobView, PeerRecord, exchange, keys};
use ffd::runtime::{Detector, Event, StatsSnapshot};

const DEADLINE: Duration = Duration::from_secs(10);

fn config(provider: &str) -> Config {
    Config::builder()
        .provider(provider)
        .domain("lo")
        .hostname("node")
        .period(Duration::from_millis(10))
        .timeout(Duration::from_millis(100))
        .startup_grace(Duration::from_millis(200))
        .core(CoreChoice::None)
        .build()
        .unwrap()
}

/// Rank 2 of the job: an endpoint, its view of the exchange, its log.
struct Intruder {
    ep: Endpoint,
    _av: AddressVector,
    _slots: MemoryRegion<SlotPage>,
    view: JobView,
    /// Every message received, with its reported source.
    received: Vec<(Vec<u8>, Option<FiAddr>)>,
    next_token: u64,
}

impl Intruder {
    /// Handles what completed; waits up to `wait` for something to.
    fn pump_for(&mut self, wait: Duration) {
        let received = &mut self.received;
        self.ep
            .wait(wait, &mut |c| {
                if let Completion::Received { bytes, source } = c {
                    received.push((bytes.to_vec(), source));
                }
            })
            .expect("wait");
    }

    fn pump(&mut self) {
        self.pump_for(Duration::ZERO);
    }

    /// Sends `bytes` to `to`, retrying refusals (connection set-up) within
    /// the deadline.
    fn send(&mut self, to: u32, bytes: &[u8]) {
        let start = Instant::now();
        self.next_token += 1;
        loop {
            match self
                .ep
                .try_send(FiAddr(u64::from(to)), bytes, self.next_token)
            {
                Ok(()) => return,
                Err(e) if e.is_refusal() && start.elapsed() < DEADLINE => self.pump(),
                Err(e) => panic!("send to rank {to}: {e}"),
            }
        }
    }
}

/// Reads `d`'s published stats until `done` holds (bounded; the counters
/// are published every 50 ms), progressing our endpoint meanwhile.
fn stats_until(
    d: &Detector,
    what: &str,
    done: impl Fn(&StatsSnapshot) -> bool,
    intruder: &mut Intruder,
) -> StatsSnapshot {
    let start = Instant::now();
    loop {
        let s = d.stats();
        if done(&s) {
            return s;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "rank {}: {what} not seen; rejected {:?}",
            d.rank(),
            s.engine.drops.rejected
        );
        intruder.pump_for(Duration::from_millis(10));
    }
}

fn rejected(s: &StatsSnapshot, r: RejectReason) -> u64 {
    s.engine.drops.rejected[r.index()]
}

fn attacks_are_dropped(provider: &str) {
    if !prereq::available(
        &prereq::this_test(),
        &[prereq::provider(provider, Some("lo"))],
    ) {
        return;
    }
    let config = config(provider);
    let mut group = InProcessBootstrap::group(3).unwrap();
    let mut me = group.pop().unwrap();
    let detectors: Vec<_> = group
        .into_iter()
        .map(|mut b| {
            let config = config.clone();
            thread::spawn(move || Detector::start(&config, &mut b))
        })
        .collect();

    let info = Info::query(provider, Some("lo"))
        .unwrap_or_else(|e| panic!("fi_getinfo for {provider}: {e}"));
    let domain = Domain::open_info(&info).unwrap();
    let av = AddressVector::open(&domain, 3).unwrap();
    let ep = Endpoint::open(&domain, &av, &EndpointConfig::default()).unwrap();
    let slots = ep.register(SlotPage::new().unwrap()).unwrap();
    // Another host: the detectors' fabric port admits it.
    let mut record = PeerRecord::new(me.rank(), me.size(), "elsewhere", &config);
    record.provider = info.provider();
    // Start-up's first round carries no fabric fields; a job across
    // hosts then exchanges them in a second.
    exchange(&mut me, &record).expect("first round");
    record.fabric_addr = ep.name().to_vec();
    record.slot_addr = slots.remote().addr;
    record.slot_key = slots.remote().key;
    let view = exchange(&mut me, &record).expect("exchange");
    for r in &view.records {
        av.insert(&r.fabric_addr).unwrap();
    }
    let mut intruder = Intruder {
        ep,
        _av: av,
        _slots: slots,
        view,
        received: Vec::new(),
        next_token: 0,
    };
    // The start-up barrier, progressing our endpoint meanwhile.
    let barrier = thread::spawn(move || me.allgather(&[]).map(|_| ()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !barrier.is_finished() && Instant::now() < deadline {
        intruder.pump_for(Duration::from_millis(5));
    }
    barrier.join().unwrap().expect("start-up barrier");
    let detectors: Vec<Detector> = detectors
        .into_iter()
        .map(|h| h.join().unwrap().expect("detector starts"))
        .collect();

    let job_key = intruder.view.job_key;
    let secret = intruder
        .view
        .drawn_secret
        .clone()
        .expect("rank 0 drew the secret (no FFD_SECRET_FILE here)");
    let job = keys::job_keys(&secret, job_key);
    let earlier_job = JobKeys::new(job_key ^ 0x5eed, [0x11; 32]);
    let other_secret = JobKeys::new(job_key, [0x11; 32]);

    // A stale process of an earlier job, and one with the right job key
    // but another secret: notices naming the receiver.
    for to in [0u32, 1] {
        let notice = Encoder::new(earlier_job.job_key(), 2).notice(2, 0, &[to], &[]);
        intruder.send(to, &wire::seal(&notice, 1, to, &earlier_job));
        let notice = Encoder::new(job_key, 2).notice(2, 0, &[to], &[]);
        intruder.send(to, &wire::seal(&notice, 1, to, &other_secret));
    }
    for d in &detectors {
        stats_until(
            d,
            "a stale job's and a forged notice dropped",
            |s| {
                rejected(s, RejectReason::WrongJobKey) >= 1
                    && rejected(s, RejectReason::BadMac) >= 1
            },
            &mut intruder,
        );
    }

    // A member forging its sender: sealed with the job's keys, claiming
    // rank 1, naming rank 0. Only a provider that reports sources can tell.
    if info.has_source() {
        let forged = Encoder::new(job_key, 1).notice(1, 0, &[0], &[]);
        intruder.send(0, &wire::seal(&forged, 1_000, 0, &job));
        stats_until(
            &detectors[0],
            "the forged sender dropped",
            |s| rejected(s, RejectReason::SourceMismatch) >= 1,
            &mut intruder,
        );
    } else {
        // A property of the provider, not a missing prerequisite: the
        // other attacks above and below still run.
        eprintln!(
            "{provider} reports no sender addresses (FI_SOURCE): the forged-sender \
             case needs them; only the tag counts"
        );
    }

    // Rank 0 declares the silent rank 2 and tells it: a genuine notice,
    // sealed for rank 2. Replayed to rank 1, it is good nowhere else.
    let start = Instant::now();
    let genuine =
        loop {
            intruder.pump_for(Duration::from_millis(5));
            let found = intruder.received.iter().find_map(|(bytes, _)| {
                match wire::decode(bytes, &job, 2, 3) {
                    Ok((h, Message::Notice(n))) if h.sender == 0 && n.failed.contains(2) => {
                        Some(bytes.clone())
                    }
                    _ => None,
                }
            });
            if let Some(bytes) = found {
                break bytes;
            }
            assert!(start.elapsed() < DEADLINE, "rank 0 never told rank 2");
        };
    let before = rejected(&detectors[1].stats(), RejectReason::BadMac);
    intruder.send(1, &genuine);
    stats_until(
        &detectors[1],
        "the replayed copy dropped",
        |s| rejected(s, RejectReason::BadMac) > before,
        &mut intruder,
    );

    // Neither live rank changed state: no exclusion, each sees the other
    // alive, and the only failure is the silent rank 2.
    for d in &detectors {
        while let Some(e) = d.try_next_event() {
            match &e.event {
                Event::Stopped(reason) => {
                    panic!("rank {}: the detector stopped: {reason:?}", d.rank())
                }
                Event::SelfExcluded { by, why } => {
                    panic!("rank {} excluded by {by} ({why:?})", d.rank())
                }
                Event::Failed { rank, .. } => assert_eq!(*rank, 2, "rank {}", d.rank()),
                _ => {}
            }
        }
        assert!(d.is_alive(0) && d.is_alive(1), "rank {}", d.rank());
        assert!(d.epoch() <= 1, "rank {}: epoch {}", d.rank(), d.epoch());
        assert!(d.stats().engine.drops.rejected.iter().sum::<u64>() >= 2);
    }
}

#[test]
fn tcp_adversarial_messages_are_dropped_and_counted() {
    attacks_are_dropped("tcp");
}

#[test]
fn sockets_adversarial_messages_are_dropped_and_counted() {
    attacks_are_dropped("sockets");
}
