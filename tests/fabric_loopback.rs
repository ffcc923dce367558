//! Two endpoints in one process, each on its own fabric and domain, over
//! loopback (`lo` for tcp;ofi_rxm and sockets; `shm`): heartbeat writes
//! land in the peer's slot page, messages arrive intact, the remote
//! address follows the provider's mr_mode, a wrong key or address is an
//! error rather than a hang, and the wait object wakes on arrival.
//!
//! A provider is skipped (with a printed reason) only when fi_getinfo does
//! not offer it. Every loop is bounded by a deadline.

mod prereq;

use std::time::{Duration, Instant};

use ffd::fabric::*;

/// Generous: loopback connection set-up on tcp;ofi_rxm takes 10–20 ms.
const DEADLINE: Duration = Duration::from_secs(5);

struct Peer {
    _domain: Domain,
    av: AddressVector,
    ep: Endpoint,
    slots: MemoryRegion<SlotPage>,
    /// Every completion this peer has seen, in order.
    log: Vec<Event>,
}

impl Peer {
    fn open(info: &Info, cfg: &EndpointConfig) -> Peer {
        let domain = Domain::open_info(info).expect("fabric and domain");
        let av = AddressVector::open(&domain, 4).expect("address vector");
        let ep = Endpoint::open(&domain, &av, cfg).expect("endpoint");
        let slots = ep.register(SlotPage::new().unwrap()).expect("slot page");
        Peer {
            _domain: domain,
            av,
            ep,
            slots,
            log: Vec::new(),
        }
    }

    /// Handles whatever completed, appending it to the log.
    fn pump(&mut self) {
        let log = &mut self.log;
        self.ep
            .poll(256, &mut |c| log.push(Event::from(c)))
            .expect("poll");
    }

    fn received(&self) -> Vec<(Vec<u8>, Option<FiAddr>)> {
        self.log
            .iter()
            .filter_map(|e| match e {
                Event::Received(bytes, src) => Some((bytes.clone(), *src)),
                _ => None,
            })
            .collect()
    }

    fn failures(&self) -> Vec<&CqError> {
        self.log
            .iter()
            .filter_map(|e| match e {
                Event::Failed(e) => Some(e),
                _ => None,
            })
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Event {
    Sent(u64, FiAddr),
    Written(u64),
    Received(Vec<u8>, Option<FiAddr>),
    Failed(CqError),
}

impl From<Completion<'_>> for Event {
    fn from(c: Completion<'_>) -> Event {
        match c {
            Completion::Sent { token, peer } => Event::Sent(token, peer),
            Completion::Written { token } => Event::Written(token),
            Completion::Received { bytes, source } => Event::Received(bytes.to_vec(), source),
            Completion::Failed(e) => Event::Failed(e),
        }
    }
}

/// The shm tests pin its CMA path: without CMA (`FI_SHM_DISABLE_CMA` set)
/// the target drops bad writes silently (only a log warning).
fn shm_cma() -> Result<(), String> {
    match std::env::var_os("FI_SHM_DISABLE_CMA") {
        Some(_) => Err("FI_SHM_DISABLE_CMA is set: these tests pin shm's CMA path".into()),
        None => Ok(()),
    }
}

/// Opens two peers that know each other: (a, b, a's address of b, b's
/// address of a). `None` (after printing why) if the provider is not offered
/// ([`prereq::available`]: under `FFD_TEST_REQUIRE_ALL=1` that fails).
fn pair(
    provider: &str,
    domain: Option<&str>,
    cfg: &EndpointConfig,
) -> Option<(Peer, Peer, FiAddr, FiAddr)> {
    if !prereq::available(&prereq::this_test(), &[prereq::provider(provider, domain)]) {
        return None;
    }
    let info =
        Info::query(provider, domain).unwrap_or_else(|e| panic!("fi_getinfo for {provider}: {e}"));
    let a = Peer::open(&info, cfg);
    let b = Peer::open(&info, cfg);
    let b_at_a = a.av.insert(b.ep.name()).expect("insert b");
    let a_at_b = b.av.insert(a.ep.name()).expect("insert a");
    Some((a, b, b_at_a, a_at_b))
}

/// Drives both peers until `done` holds; panics with `what` and both logs
/// if the deadline passes first.
fn drive(a: &mut Peer, b: &mut Peer, what: &str, mut done: impl FnMut(&Peer, &Peer) -> bool) {
    let start = Instant::now();
    while start.elapsed() < DEADLINE {
        a.pump();
        b.pump();
        if done(a, b) {
            return;
        }
        std::thread::yield_now();
    }
    panic!(
        "{what}: not done within {DEADLINE:?}; a saw {:?}, b saw {:?}",
        a.log, b.log
    );
}

/// Posts with `op` until it is accepted, progressing both peers.
fn post(
    a: &mut Peer,
    b: &mut Peer,
    what: &str,
    mut op: impl FnMut(&mut Endpoint) -> Result<(), FabricError>,
) {
    let start = Instant::now();
    loop {
        match op(&mut a.ep) {
            Ok(()) => return,
            Err(e) if e.is_would_block() => {}
            Err(e) => panic!("{what}: {e}"),
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: refused for {DEADLINE:?}"
        );
        a.pump();
        b.pump();
        std::thread::yield_now();
    }
}

fn write_lands(provider: &str, domain: Option<&str>) {
    let Some((mut a, mut b, b_addr, _)) = pair(provider, domain, &EndpointConfig::default()) else {
        return;
    };
    let info = b.ep.info().clone();
    let remote = b.slots.remote();
    // The remote address follows mr_mode: the page's address with
    // FI_MR_VIRT_ADDR, offset 0 without.
    if info.mr_mode().virt_addr() {
        assert_eq!(remote.addr, b.slots.memory().as_ptr() as u64);
    } else {
        assert_eq!(remote.addr, 0);
    }
    assert_eq!(remote.len, page_size() as u64);
    eprintln!(
        "MEASURE provider={} domain={} mr_mode={} inject_size={} source={} wait={:?} manual_progress={}",
        info.provider(),
        info.domain_name(),
        info.mr_mode(),
        info.inject_size(),
        info.has_source(),
        b.ep.wait_kind(),
        info.manual_progress(),
    );

    // An untracked inject write lands while the target progresses its CQ.
    let value = 0x1122_3344_5566_7788u64;
    let t0 = Instant::now();
    post(&mut a, &mut b, "inject write", |ep| {
        ep.try_inject_write(b_addr, &remote, 3, value)
    });
    drive(&mut a, &mut b, "inject write lands", |_, b| {
        b.slots.memory().read(3) == value
    });
    eprintln!(
        "MEASURE provider={} first_write_lands_after={:?}",
        info.provider(),
        t0.elapsed()
    );
    assert_eq!(b.slots.memory().read(2), 0, "neighbouring slot untouched");
    assert_eq!(b.slots.memory().read(4), 0, "neighbouring slot untouched");

    // A tracked write lands too and completes with its token.
    post(&mut a, &mut b, "tracked write", |ep| {
        ep.try_write_u64(b_addr, &remote, 511, 42, 7)
    });
    drive(
        &mut a,
        &mut b,
        "tracked write lands and completes",
        |a, b| b.slots.memory().read(511) == 42 && a.log.contains(&Event::Written(7)),
    );
    assert!(a.failures().is_empty(), "{:?}", a.log);

    // The bounded helper succeeds on a live peer.
    let log = &mut a.log;
    let tries =
        a.ep.inject_write(
            b_addr,
            &remote,
            0,
            9,
            RetryBound::new(1000, DEADLINE),
            &mut |c| log.push(Event::from(c)),
        )
        .expect("bounded inject to a live peer");
    assert!(tries >= 1);
    drive(&mut a, &mut b, "bounded write lands", |_, b| {
        b.slots.memory().read(0) == 9
    });
    assert!(a.failures().is_empty(), "{:?}", a.log);
}

fn message_arrives(provider: &str, domain: Option<&str>) {
    let Some((mut a, mut b, b_addr, a_at_b)) = pair(provider, domain, &EndpointConfig::default())
    else {
        return;
    };
    let msg: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
    post(&mut a, &mut b, "send", |ep| ep.try_send(b_addr, &msg, 99));
    drive(&mut a, &mut b, "message arrives", |a, b| {
        a.log.contains(&Event::Sent(99, b_addr)) && !b.received().is_empty()
    });
    let got = b.received();
    assert_eq!(got.len(), 1, "{:?}", b.log);
    assert_eq!(got[0].0, msg, "payload intact");
    if b.ep.has_source() {
        assert_eq!(got[0].1, Some(a_at_b), "FI_SOURCE names the sender");
    } else {
        assert_eq!(got[0].1, None);
    }

    // More messages than receive buffers: buffers are posted again, and
    // every message arrives once, intact.
    let n = EndpointConfig::default().recv_buffers as u64 * 2 + 3;
    for i in 0..n {
        let body = i.to_le_bytes();
        post(&mut a, &mut b, "send", |ep| ep.try_send(b_addr, &body, i));
        a.pump();
        b.pump();
    }
    drive(&mut a, &mut b, "all messages arrive", |_, b| {
        b.received().len() as u64 == n + 1
    });
    let mut bodies: Vec<u64> = b.received()[1..]
        .iter()
        .map(|(bytes, _)| u64::from_le_bytes(bytes[..].try_into().expect("8 bytes")))
        .collect();
    bodies.sort_unstable();
    assert_eq!(bodies, (0..n).collect::<Vec<_>>());
    assert!(
        a.failures().is_empty() && b.failures().is_empty(),
        "{:?} {:?}",
        a.log,
        b.log
    );
}

/// A wrong key (or an address outside the region) must show up as an
/// error (an error completion, or the bounded helper's `Unreachable` when
/// the provider answers by dropping the connection), never as a hang, and
/// must not write anywhere else. One documented exception: `shm` (1.17)
/// does not check keys on RMA writes, so a write with a wrong key but the
/// right address lands; the test pins that down so a change is noticed.
fn bad_target_is_an_error(provider: &str, domain: Option<&str>, wrong_key: bool) {
    if provider == "shm" && !prereq::available(&prereq::this_test(), &[shm_cma()]) {
        return;
    }
    let Some((mut a, mut b, b_addr, _)) = pair(provider, domain, &EndpointConfig::default()) else {
        return;
    };
    let shm_ignores_keys = wrong_key && a.ep.info().provider() == "shm";
    // Connect first with a good write so the error is about the target.
    let good = b.slots.remote();
    post(&mut a, &mut b, "good write", |ep| {
        ep.try_write_u64(b_addr, &good, 1, 5, 1)
    });
    drive(&mut a, &mut b, "good write lands", |a, b| {
        b.slots.memory().read(1) == 5 && a.log.contains(&Event::Written(1))
    });

    let mut bad = good;
    if wrong_key {
        bad.key = good.key.wrapping_add(0x5a5a);
    } else if a.ep.info().mr_mode().virt_addr() {
        // A virtual address in the never-mapped first page: shm does not
        // check addresses against registrations (see
        // shm_rma_is_not_checked_against_registrations), so anything
        // mapped would really be written.
        bad.addr = 8;
    } else {
        // An offset 1 MiB past the page: inside no registration.
        bad.addr = good.addr.wrapping_add(1 << 20);
    }
    let start = Instant::now();
    let mut outcome = None;
    while outcome.is_none() && start.elapsed() < DEADLINE {
        let log = &mut a.log;
        let posted = a.ep.post_bounded(
            b_addr,
            RetryBound::new(u32::MAX, Duration::from_millis(500)),
            &mut |c| log.push(Event::from(c)),
            |ep| ep.try_write_u64(b_addr, &bad, 2, 77, 2),
        );
        match posted {
            Err(e @ FabricError::Unreachable { .. }) => outcome = Some(format!("post: {e}")),
            Err(e) => outcome = Some(format!("post error: {e}")),
            Ok(_) => {}
        }
        let settle = Instant::now();
        while outcome.is_none() && settle.elapsed() < Duration::from_millis(200) {
            a.pump();
            b.pump();
            if let Some(e) = a.failures().first() {
                outcome = Some(format!("completion: {e} (op {:?})", e.op));
            } else if shm_ignores_keys && b.slots.memory().read(2) == 77 {
                outcome = Some("landed: shm does not check keys".into());
            }
        }
    }
    let landed = b.slots.memory().read(2) == 77;
    let outcome = outcome.unwrap_or_else(|| {
        panic!(
            "{provider}: no error within {DEADLINE:?} for a wrong target; slot 2 written: {landed}"
        )
    });
    eprintln!(
        "MEASURE provider={provider} wrong_{}: {outcome} after {:?}",
        if wrong_key { "key" } else { "address" },
        start.elapsed()
    );
    assert_eq!(landed, shm_ignores_keys, "{outcome}");
    let page = b.slots.memory();
    for i in (0..page.slots()).filter(|&i| i != 1 && i != 2) {
        assert_eq!(page.read(i), 0, "slot {i} written by a misdirected write");
    }
    assert_eq!(page.read(1), 5);
}

/// The wait object wakes a sleeping peer when a message arrives.
fn wait_wakes(provider: &str, domain: Option<&str>) {
    let Some((mut a, mut b, b_addr, _)) = pair(provider, domain, &EndpointConfig::default()) else {
        return;
    };
    let sleeper = std::thread::spawn(move || {
        let start = Instant::now();
        let mut got = None;
        while got.is_none() && start.elapsed() < DEADLINE {
            b.ep.wait(DEADLINE, &mut |c| {
                if let Completion::Received { bytes, .. } = c {
                    got = Some(bytes.to_vec());
                }
            })
            .expect("wait");
        }
        (got, start.elapsed(), b.ep.wait_kind())
    });
    let start = Instant::now();
    let mut sent = false;
    while !sent && start.elapsed() < DEADLINE {
        match a.ep.try_send(b_addr, b"wake", 1) {
            Ok(()) => sent = true,
            Err(e) if e.is_would_block() => {
                a.pump();
                std::thread::yield_now();
            }
            Err(e) => panic!("send: {e}"),
        }
    }
    assert!(sent, "send refused for {DEADLINE:?}");
    // Keep the sender progressing until the sleeper is done.
    while !sleeper.is_finished() && start.elapsed() < DEADLINE * 2 {
        a.pump();
        std::thread::sleep(Duration::from_millis(1));
    }
    let (got, elapsed, kind) = sleeper.join().expect("sleeper thread");
    assert_eq!(
        got.as_deref(),
        Some(&b"wake"[..]),
        "nothing received ({kind:?})"
    );
    eprintln!("MEASURE provider={provider} wait={kind:?} woke_after={elapsed:?}");
    assert!(elapsed < DEADLINE, "woke only after {elapsed:?}");
}

/// With `delivery_complete`, tcp;ofi_rxm reports a rejected write as an
/// error completion of that very write (FI_ECANCELED), and the connection
/// stays usable for good writes afterwards.
#[test]
fn tcp_rxm_delivery_complete_names_the_rejected_write() {
    let cfg = EndpointConfig {
        delivery_complete: true,
        ..EndpointConfig::default()
    };
    let Some((mut a, mut b, b_addr, _)) = pair("tcp", Some("lo"), &cfg) else {
        return;
    };
    let good = b.slots.remote();
    post(&mut a, &mut b, "good write", |ep| {
        ep.try_write_u64(b_addr, &good, 1, 5, 1)
    });
    drive(&mut a, &mut b, "good write delivered", |a, b| {
        b.slots.memory().read(1) == 5 && a.log.contains(&Event::Written(1))
    });
    let bad = RemoteRegion {
        key: good.key.wrapping_add(0x5a5a),
        ..good
    };
    let start = Instant::now();
    post(&mut a, &mut b, "bad write", |ep| {
        ep.try_write_u64(b_addr, &bad, 2, 77, 2)
    });
    drive(&mut a, &mut b, "bad write fails", |a, _| {
        !a.failures().is_empty()
    });
    let failures = a.failures();
    eprintln!(
        "MEASURE provider=tcp;ofi_rxm delivery_complete wrong_key: {} after {:?}",
        failures[0],
        start.elapsed()
    );
    assert_eq!(failures[0].op, FailedOp::Write { token: 2 });
    assert_eq!(failures[0].err, libc::ECANCELED);
    assert!(!a.log.contains(&Event::Written(2)));
    assert_eq!(b.slots.memory().read(2), 0);
}

/// shm (1.17, with CMA, the default) writes RMA data straight into the
/// target process at the given virtual address, checking neither the key
/// nor the registration's bounds: a write aimed at an unregistered page of
/// the target lands there. The slot page is then not the only remotely
/// writable memory; callers must only ever address slot pages they were
/// given. Pinned here so a libfabric change is noticed.
#[test]
fn shm_rma_is_not_checked_against_registrations() {
    if !prereq::available(&prereq::this_test(), &[shm_cma()]) {
        return;
    }
    let Some((mut a, mut b, b_addr, _)) = pair("shm", None, &EndpointConfig::default()) else {
        return;
    };
    // An unregistered page of the target, only ever read atomically.
    let other = SlotPage::new().unwrap();
    let aimed = RemoteRegion {
        addr: other.as_ptr() as u64,
        ..b.slots.remote()
    };
    post(&mut a, &mut b, "write to unregistered page", |ep| {
        ep.try_write_u64(b_addr, &aimed, 5, 1234, 3)
    });
    drive(&mut a, &mut b, "write completes", |a, _| {
        a.log.contains(&Event::Written(3)) || !a.failures().is_empty()
    });
    assert_eq!(
        other.read(5),
        1234,
        "shm now checks registrations: update docs/design.md §7 \"Fabric facts this rests on\" and this test"
    );
    assert_eq!(b.slots.memory().read(5), 0);
}

/// `Endpoint::wait` returns by its timeout when nothing arrives (run on a
/// thread, so a wait object that ignores its timeout, as shm's
/// `fi_cq_sread` does in 1.17, fails the test instead of hanging it).
fn wait_times_out(provider: &str, domain: Option<&str>) {
    let Some((_a, mut b, _, _)) = pair(provider, domain, &EndpointConfig::default()) else {
        return;
    };
    let waiter = std::thread::spawn(move || {
        let start = Instant::now();
        let n =
            b.ep.wait(Duration::from_millis(50), &mut |_| {})
                .expect("wait");
        (n, start.elapsed(), b.ep.wait_kind())
    });
    let start = Instant::now();
    while !waiter.is_finished() {
        assert!(
            start.elapsed() < DEADLINE,
            "{provider}: wait(50 ms) still blocked after {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let (n, took, kind) = waiter.join().expect("waiter");
    assert_eq!(n, 0, "nothing was sent");
    assert!(
        took >= Duration::from_millis(50),
        "returned early: {took:?} ({kind:?})"
    );
    eprintln!("MEASURE provider={provider} wait={kind:?} wait(50ms) took {took:?}");
}

macro_rules! provider_tests {
    ($module:ident, $provider:expr, $domain:expr) => {
        mod $module {
            #[test]
            fn write_lands_in_the_peer_slot_page() {
                super::write_lands($provider, $domain);
            }
            #[test]
            fn message_arrives_intact() {
                super::message_arrives($provider, $domain);
            }
            #[test]
            fn wrong_key_is_an_error_not_a_hang() {
                super::bad_target_is_an_error($provider, $domain, true);
            }
            #[test]
            fn wrong_address_is_an_error_not_a_hang() {
                super::bad_target_is_an_error($provider, $domain, false);
            }
            #[test]
            fn wait_object_wakes_on_arrival() {
                super::wait_wakes($provider, $domain);
            }
            #[test]
            fn wait_returns_by_its_timeout() {
                super::wait_times_out($provider, $domain);
            }
        }
    };
}

provider_tests!(tcp_rxm, "tcp", Some("lo"));
provider_tests!(sockets, "sockets", Some("lo"));
provider_tests!(shm, "shm", None);
