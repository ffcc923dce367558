//! Remote keys of slot pages are random where the provider lets us choose
//! them (no `FI_MR_PROV_KEY`), so a process that was not told a page's key
//! cannot guess it: two pages of one domain, and the pages of two
//! domains (two ranks), get different keys, none of them a small counter.
//!
//! A provider is a prerequisite (`tests/prereq/mod.rs`): where fi_getinfo
//! does not offer it the test is skipped, and under `FFD_TEST_REQUIRE_ALL=1`
//! it fails.

mod prereq;

use ffd::fabric::*;

/// The keys of `pages` slot pages registered on one domain, and the mr_mode.
fn page_keys(provider: &str, domain: Option<&str>, pages: usize) -> Option<(Vec<u64>, MrMode)> {
    if !prereq::available(&prereq::this_test(), &[prereq::provider(provider, domain)]) {
        return None;
    }
    let info =
        Info::query(provider, domain).unwrap_or_else(|e| panic!("fi_getinfo for {provider}: {e}"));
    let dom = Domain::open_info(&info).expect("fabric and domain");
    let av = AddressVector::open(&dom, 4).expect("address vector");
    let ep = Endpoint::open(&dom, &av, &EndpointConfig::default()).expect("endpoint");
    let regions: Vec<_> = (0..pages)
        .map(|_| ep.register(SlotPage::new().unwrap()).expect("slot page"))
        .collect();
    Some((
        regions.iter().map(|r| r.remote().key).collect(),
        info.mr_mode(),
    ))
}

fn check(provider: &str, domain: Option<&str>) {
    let Some((first, mode)) = page_keys(provider, domain, 2) else {
        return;
    };
    let Some((second, _)) = page_keys(provider, domain, 1) else {
        return;
    };
    println!("{provider}: mr_mode {mode}, keys {first:x?} and {second:x?}");
    if mode.prov_key() {
        // The provider's own keys: nothing of ours to check but distinctness.
        assert_ne!(first[0], first[1], "{provider}: two pages, one key");
        return;
    }
    let all = [first[0], first[1], second[0]];
    assert_ne!(all[0], all[1], "{provider}: two pages of one domain");
    assert_ne!(all[0], all[2], "{provider}: pages of two domains");
    assert_ne!(all[1], all[2], "{provider}: pages of two domains");
    // Counting from 1 gave every rank's page key 1; three random 64-bit
    // keys below 2^20 happen once in 2^132 runs.
    assert!(
        all.iter().any(|&k| k >= 1 << 20),
        "{provider}: keys look counted, not drawn: {all:#x?}"
    );
}

#[test]
fn tcp_slot_pages_get_random_keys() {
    check("tcp", Some("lo"));
}

#[test]
fn sockets_slot_pages_get_random_keys() {
    check("sockets", Some("lo"));
}
