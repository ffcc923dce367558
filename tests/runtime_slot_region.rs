//! The slot page is the only memory of a detector that a peer can write,
//! and it is one page. The test joins a job as a rank of its own: it gets
//! rank 0's slot address and key through the bootstrap, as any peer does,
//! then writes into the page (lands) and one byte past it, or with another
//! key (refused: an error, never a hang or a silent write elsewhere).
//!
//! On `shm` the provider checks neither key nor bounds (see
//! `src/fabric/mod.rs`), so this holds only on providers that enforce
//! registrations: `tcp;ofi_rxm` and `sockets` here, verbs on InfiniBand.

use std::thread;
use std::time::{Duration, Instant};

use ffd::bootstrap::{Bootstrap, InProcessBootstrap};
use ffd::config::{Config, CoreChoice};
use ffd::fabric::*;
use ffd::runtime::Detector;
use ffd::runtime::startup::{PeerRecord, exchange};

const DEADLINE: Duration = Duration::from_secs(5);

fn config(provider: &str) -> Config {
    Config::builder()
        .provider(provider)
        .domain("lo")
        .hostname("node")
        .core(CoreChoice::None)
        .build()
        .unwrap()
}

enum Outcome {
    Landed,
    Refused(String),
}

/// Posts one tracked write and waits (bounded) for its fate.
fn write_and_wait(
    ep: &mut Endpoint,
    to: FiAddr,
    region: &RemoteRegion,
    slot: usize,
    token: u64,
) -> Outcome {
    let start = Instant::now();
    loop {
        match ep.try_write_u64(to, region, slot, 0x5eed, token) {
            Ok(()) => break,
            Err(e) if e.is_refusal() && start.elapsed() < DEADLINE => {
                ep.poll(64, &mut |_| {}).unwrap();
            }
            Err(e) => return Outcome::Refused(e.to_string()),
        }
    }
    while start.elapsed() < DEADLINE {
        let mut outcome = None;
        ep.poll(64, &mut |c| match c {
            Completion::Written { token: t } if t == token => outcome = Some(Outcome::Landed),
            Completion::Failed(e) => outcome = Some(Outcome::Refused(e.to_string())),
            _ => {}
        })
        .unwrap();
        if let Some(o) = outcome {
            return o;
        }
        // A rejected write can also leave the connection refusing posts.
        if let Err(e) = ep.try_send(to, b"probe", 99) {
            if !e.is_refusal() {
                return Outcome::Refused(e.to_string());
            }
        }
    }
    Outcome::Refused("no completion within the deadline (posts refused)".into())
}

fn only_the_slot_page_is_writable(provider: &str) {
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

    // Rank 2: a plain endpoint taking part in the exchange.
    let info = Info::query(provider, Some("lo")).unwrap();
    let domain = Domain::open_info(&info).unwrap();
    let av = AddressVector::open(&domain, 3).unwrap();
    let mut ep = Endpoint::open(
        &domain,
        &av,
        &EndpointConfig {
            // Makes tcp;ofi_rxm report a rejected write as an error
            // completion of that write.
            delivery_complete: true,
            ..EndpointConfig::default()
        },
    )
    .unwrap();
    let mine = ep.register(SlotPage::new().unwrap()).unwrap();
    // Another host: the detectors' fabric port admits it (their own host
    // talks through the mailboxes).
    let mut record = PeerRecord::new(me.rank(), me.size(), "elsewhere", &config);
    record.provider = info.provider();
    // Start-up's first round carries no fabric fields; a job across
    // hosts then exchanges them in a second.
    exchange(&mut me, &record).expect("first round");
    record.fabric_addr = ep.name().to_vec();
    record.slot_addr = mine.remote().addr;
    record.slot_key = mine.remote().key;
    let view = exchange(&mut me, &record).expect("exchange");
    for r in &view.records {
        av.insert(&r.fabric_addr).unwrap();
    }
    // Join the start-up barrier as every rank does, progressing our
    // endpoint meanwhile: rank 1's heartbeat link is to us.
    let barrier = thread::spawn(move || me.allgather(&[]).map(|_| ()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !barrier.is_finished() && Instant::now() < deadline {
        ep.wait(Duration::from_millis(5), &mut |_| {}).unwrap();
    }
    barrier.join().unwrap().expect("start-up barrier");
    let _detectors: Vec<Detector> = detectors
        .into_iter()
        .map(|h| h.join().unwrap().expect("detector starts"))
        .collect();
    let target = &view.records[0];
    let page = page_size() as u64;
    assert_eq!(page, 4096, "the slot page is one 4 KiB page here");
    // Claim a region twice the size, so the fabric layer lets us aim past it.
    let claimed = RemoteRegion {
        addr: target.slot_addr,
        key: target.slot_key,
        len: 2 * page,
    };

    // Inside the page: the last slot lands.
    match write_and_wait(&mut ep, FiAddr(0), &claimed, 511, 1) {
        Outcome::Landed => {}
        Outcome::Refused(why) => {
            panic!("{provider}: a write into the slot page was refused: {why}")
        }
    }
    // One slot past the page: refused.
    match write_and_wait(&mut ep, FiAddr(0), &claimed, 512, 2) {
        Outcome::Landed => panic!("{provider}: a write past the slot page landed"),
        Outcome::Refused(_) => {}
    }
    // Rank 1 (a fresh connection): the right address with another key.
    let target = &view.records[1];
    let wrong_key = RemoteRegion {
        addr: target.slot_addr,
        key: target.slot_key ^ 0x5a5a,
        len: page,
    };
    match write_and_wait(&mut ep, FiAddr(1), &wrong_key, 0, 3) {
        Outcome::Landed => panic!("{provider}: a write with the wrong key landed"),
        Outcome::Refused(_) => {}
    }
}

#[test]
fn tcp_only_the_slot_page_is_remotely_writable() {
    only_the_slot_page_is_writable("tcp");
}

#[test]
fn sockets_only_the_slot_page_is_remotely_writable() {
    only_the_slot_page_is_writable("sockets");
}
