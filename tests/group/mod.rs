//! Starting a job of detectors inside one test process: threads stand in
//! for the ranks, over an in-process bootstrap. Shared by the top-level
//! tests (`mod group;`), with the loopback settings most of them use.

#![allow(dead_code)]

use std::thread;
use std::time::Duration;

use ffd::bootstrap::InProcessBootstrap;
use ffd::config::{Config, ConfigBuilder, CoreChoice, LocalMode};
use ffd::runtime::Detector;

pub mod pinned;

/// `tcp;ofi_rxm` over loopback at 10 ms / 100 ms, a short start-up grace,
/// unpinned, same-host watching `local`.
pub fn loopback(local: LocalMode) -> ConfigBuilder {
    Config::builder()
        .provider("tcp")
        .domain("lo")
        .period(Duration::from_millis(10))
        .timeout(Duration::from_millis(100))
        .startup_grace(Duration::from_millis(200))
        .core(CoreChoice::None)
        .local(local)
}

/// Starts `n` detectors concurrently (start is a collective), all with
/// `config`; sorted by rank.
pub fn start_group(n: u32, config: &Config) -> Vec<Detector> {
    let handles: Vec<_> = InProcessBootstrap::group(n)
        .expect("group")
        .into_iter()
        .map(|mut b| {
            let config = config.clone();
            thread::spawn(move || Detector::start(&config, &mut b))
        })
        .collect();
    let mut out: Vec<Detector> = handles
        .into_iter()
        .map(|h| h.join().expect("no panic").expect("detector starts"))
        .collect();
    out.sort_by_key(Detector::rank);
    out
}
