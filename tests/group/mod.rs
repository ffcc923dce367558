//! Starting a job of detectors inside one test process: threads stand in
//! for the ranks, over an in-process bootstrap. Shared by the top-level
//! tests (`mod group;`), with the loopback settings most of them use.

#![allow(dead_code)]

use std::sync::{Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use ffd::bootstrap::InProcessBootstrap;
use ffd::config::{Config, ConfigBuilder, CoreChoice, LocalMode};
use ffd::runtime::{Callback, Detector, StartError};

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
    start_group_with(n, |_| config.clone())
}

/// [`start_group`] with rank r's config `config_of(r)`.
pub fn start_group_with(n: u32, config_of: impl Fn(u32) -> Config) -> Vec<Detector> {
    let handles: Vec<_> = InProcessBootstrap::group(n)
        .expect("group")
        .into_iter()
        .zip(0..)
        .map(|(mut b, r)| {
            let config = config_of(r);
            thread::spawn(move || Detector::start(&config, &mut b))
        })
        .collect();
    joined(handles)
}

/// Starts `callbacks.len()` detectors concurrently, rank r with
/// `callbacks[r]` when it has one; sorted by rank.
pub fn start_with_callbacks(config: &Config, callbacks: Vec<Option<Callback>>) -> Vec<Detector> {
    let group = InProcessBootstrap::group(callbacks.len() as u32).expect("group");
    let handles: Vec<_> = group
        .into_iter()
        .zip(callbacks)
        .map(|(mut b, callback)| {
            let config = config.clone();
            thread::spawn(move || match callback {
                Some(callback) => Detector::start_with_callback(&config, &mut b, callback),
                None => Detector::start(&config, &mut b),
            })
        })
        .collect();
    joined(handles)
}

/// The detectors the threads of `handles` started, sorted by rank.
fn joined(handles: Vec<JoinHandle<Result<Detector, StartError>>>) -> Vec<Detector> {
    let mut out: Vec<Detector> = handles
        .into_iter()
        .map(|h| h.join().expect("no panic").expect("detector starts"))
        .collect();
    out.sort_by_key(Detector::rank);
    out
}

/// A one-way flag with a bounded wait.
#[derive(Default)]
pub struct Signal {
    set: Mutex<bool>,
    cv: Condvar,
}

impl Signal {
    pub fn raise(&self) {
        *self.set.lock().unwrap() = true;
        self.cv.notify_all();
    }

    /// Whether it was raised within `bound`.
    pub fn wait(&self, bound: Duration) -> bool {
        let set = self.set.lock().unwrap();
        *self.cv.wait_timeout_while(set, bound, |s| !*s).unwrap().0
    }
}
