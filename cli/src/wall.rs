//! One instant on both clocks: the monotonic one (`Instant`) and the wall
//! clock (ms since the Unix epoch), which `ffd agent` stamps its lines
//! with and `ffd run` merges the ranks' timelines by.
//!
//! Owns: reading the two as one pair. Must not: be read per event (each
//! pairing reads the clocks a few times).
//!
//! Two reads of two clocks are two instants: a thread preempted between
//! them pairs a wall time with a monotonic time that much later, and
//! every line stamped from that pair moves by as much (a detection placed
//! 1.3 ms before its kill was seen on a loaded machine).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A pairing is kept when both monotonic reads around the wall clock's
/// fall within this.
const TIGHT: Duration = Duration::from_micros(20);

/// At most this many tries; the tightest is kept.
const TRIES: usize = 50;

/// Now on both clocks: an `Instant` and the wall clock in ms, read within
/// [`TIGHT`] of each other when some try managed it (the midpoint of the
/// two monotonic reads around the wall clock's), else the tightest try.
pub fn now_paired() -> (Instant, f64) {
    let mut best: Option<(Duration, Instant, f64)> = None;
    for _ in 0..TRIES {
        let before = Instant::now();
        let wall = unix_ms(SystemTime::now());
        let after = Instant::now();
        let spread = after - before;
        let at = before + spread / 2;
        if best.is_none_or(|(s, _, _)| spread < s) {
            best = Some((spread, at, wall));
        }
        if spread <= TIGHT {
            break;
        }
    }
    let (_, at, wall) = best.expect("at least one try");
    (at, wall)
}

fn unix_ms(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two pairings agree: the wall time between them is the monotonic
    /// time between them, within the pairings' spread (and a wall clock
    /// slewed by at most 0.05 %).
    #[test]
    fn two_pairings_measure_the_same_interval_on_both_clocks() {
        for _ in 0..100 {
            let (a, wall_a) = now_paired();
            std::thread::sleep(Duration::from_millis(2));
            let (b, wall_b) = now_paired();
            let mono_ms = (b - a).as_secs_f64() * 1e3;
            let err = ((wall_b - wall_a) - mono_ms).abs();
            assert!(
                err < 0.25 + mono_ms * 5e-4,
                "{err} ms apart over {mono_ms} ms"
            );
        }
    }
}
