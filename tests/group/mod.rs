//! Starting a job of detectors inside one test process: threads stand in
//! for the ranks, over an in-process bootstrap. Shared by the top-level
//! tests (`mod group;`).

use std::thread;

use ffd::bootstrap::InProcessBootstrap;
use ffd::config::Config;
use ffd::runtime::Detector;

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
