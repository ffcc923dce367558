//! SIGINT and SIGTERM for `ffd run` and `ffd rendezvous`: caught while a
//! [`SignalCatcher`] lives, and handed to its callback on a thread of its
//! own, so that the command cleans up (reaps its agents, removes its
//! secret) and reports before it ends.
//!
//! Owns: the calling thread's mask for the two signals, the thread that
//! waits for them, and the handlers for the rest. Must not: run anything
//! but async-signal-safe code in a handler (the handlers only set a flag
//! and write a byte; the callback runs on an ordinary thread), or outlive
//! its `Drop` (both threads are ended and joined).
//!
//! Two paths, because a handler alone is not enough in the `ffd` binary:
//! a library it loads (libinfinipath, through libfabric's PSM provider)
//! installs its own SIGINT/SIGTERM handler at load time that exits the
//! process, and a handler registered after it chains to it first. So the
//! installing thread blocks both signals (every thread it starts inherits
//! the mask) and a waiter thread takes them with `sigwait`: no handler ever
//! runs for a signal sent to the process. The handlers (signal-hook's flag
//! and self-pipe) still catch one sent to a thread that does not block
//! them, e.g. a test's `raise`.

use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use nix::sys::pthread::pthread_kill;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};

use super::process::WATCHER_STACK;

type Callback = Arc<Mutex<dyn FnMut(Signal) -> bool + Send>>;

/// SIGINT and SIGTERM, caught while it lives; see the module doc. Drop it
/// on the thread that installed it (its mask is restored there).
pub(crate) struct SignalCatcher {
    ids: Vec<signal_hook::SigId>,
    wake: UnixStream,
    forwarder: Option<JoinHandle<()>>,
    waiter: Option<JoinHandle<()>>,
    closing: Arc<AtomicBool>,
    old_mask: Option<SigSet>,
}

fn caught_set() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set
}

impl SignalCatcher {
    /// Catches SIGINT and SIGTERM; `on_signal` is called for each until it
    /// returns false. Install it before starting threads: those started
    /// earlier keep the process's handlers.
    pub fn install(
        on_signal: impl FnMut(Signal) -> bool + Send + 'static,
    ) -> io::Result<SignalCatcher> {
        let on_signal: Callback = Arc::new(Mutex::new(on_signal));
        let call = |cb: &Callback, signal| cb.lock().is_ok_and(|mut f| f(signal));
        let (read, write) = UnixStream::pair()?;
        let wake = read.try_clone()?;
        let last = Arc::new(AtomicUsize::new(0));
        let closing = Arc::new(AtomicBool::new(false));
        // Blocked before any thread of ours starts, so each inherits it;
        // from here on the catcher's `Drop` restores it on any way out.
        let set = caught_set();
        let old_mask = set.thread_swap_mask(SigmaskHow::SIG_BLOCK)?;
        let mut caught = SignalCatcher {
            ids: Vec::new(),
            wake,
            forwarder: None,
            waiter: None,
            closing: Arc::clone(&closing),
            old_mask: Some(old_mask),
        };
        for signal in [Signal::SIGINT, Signal::SIGTERM] {
            let number = signal as i32;
            // Registered first, so the flag is set before the wake-up is sent.
            caught.ids.push(signal_hook::flag::register_usize(
                number,
                Arc::clone(&last),
                number as usize,
            )?);
            caught.ids.push(signal_hook::low_level::pipe::register(
                number,
                write.try_clone()?,
            )?);
        }
        let cb = Arc::clone(&on_signal);
        caught.forwarder = Some(spawn("ffd-signals", move || {
            let mut read = read;
            let mut byte = [0u8; 1];
            // Ends at end of file: the catcher shut the socket down.
            while let Ok(1) = read.read(&mut byte) {
                let number = i32::try_from(last.load(Ordering::SeqCst)).unwrap_or(0);
                let signal = Signal::try_from(number).unwrap_or(Signal::SIGINT);
                if !call(&cb, signal) {
                    return;
                }
            }
        })?);

        caught.waiter = Some(spawn("ffd-sigwait", move || {
            // Ends when the catcher wakes it to close, or the callback says so.
            loop {
                match set.wait() {
                    Ok(_) if closing.load(Ordering::SeqCst) => return,
                    Ok(signal) => {
                        if !call(&on_signal, signal) {
                            return;
                        }
                    }
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(_) => return,
                }
            }
        })?);
        Ok(caught)
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name(name.into())
        .stack_size(WATCHER_STACK)
        .spawn(f)
}

impl Drop for SignalCatcher {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
        let _ = self.wake.shutdown(std::net::Shutdown::Both);
        if let Some(forwarder) = self.forwarder.take() {
            let _ = forwarder.join();
        }
        if let Some(waiter) = self.waiter.take() {
            self.closing.store(true, Ordering::SeqCst);
            // Not yet joined, so its id is still its own: a signal aimed at
            // it (it blocks SIGTERM) ends its `sigwait`.
            let woken = pthread_kill(waiter.as_pthread_t(), Signal::SIGTERM).is_ok();
            if woken || waiter.is_finished() {
                let _ = waiter.join();
            }
        }
        if let Some(old) = self.old_mask.take() {
            let _ = old.thread_set_mask();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_signal_to_the_process_reaches_the_callback() {
        let (tx, rx) = mpsc::channel();
        let catcher = SignalCatcher::install(move |s| tx.send(s).is_ok()).unwrap();
        // From a thread started after the install (it inherits the mask),
        // as every thread of the commands is.
        thread::spawn(|| nix::sys::signal::kill(nix::unistd::getpid(), Signal::SIGINT))
            .join()
            .unwrap()
            .unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(20)), Ok(Signal::SIGINT));
        drop(catcher);
    }
}
