//! The runtime: the pinned progress thread that drives the protocol
//! [`Engine`](crate::protocol::Engine) with real time and the fabric, and
//! what the host reads from it (lock-free state, events, stats).
//!
//! Owns: the detector's own fabric resources (fabric, domain, endpoint,
//! address vector, completion queue, the one-page slot region), start-up
//! (address exchange, ring, placement), the progress thread, and delivery
//! of events. Must not: make protocol decisions (the Engine does), block
//! the progress thread on the host, or allocate on the heartbeat path.
//!
//! ```no_run
//! use ffd::bootstrap::tcp::TcpBootstrap;
//! use ffd::config::Config;
//! use ffd::runtime::Detector;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::from_env()?;
//! let mut bootstrap = TcpBootstrap::connect_from_env()?;
//! let detector = Detector::start(&config, &mut bootstrap)?;
//! while let Some(event) = detector.try_next_event() {
//!     println!("{event:?}");
//! }
//! assert!(detector.is_alive(detector.rank()));
//! detector.shutdown();
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

pub mod events;
pub mod failed_bits;
mod log;
pub mod placement;
mod progress;
pub mod stats;

use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::bootstrap::{self, Bootstrap, ExchangeError, PeerRecord};
use crate::config::Config;
use crate::fabric::{
    AddressVector, Domain, Endpoint, EndpointConfig, FabricError, FabricVersions, Info,
    MemoryRegion, RemoteRegion, SlotPage,
};
use crate::protocol::{self, Rank, Ring};

pub use events::EventQueue;
pub use failed_bits::FailedBits;
pub use placement::Placement;
pub use stats::{LatenessHistogram, RuntimeCounters, StatsSnapshot};

use log::Logger;
use progress::Command;

/// An event as the host receives it: what happened (the protocol's
/// [`protocol::Event`]), when this rank learned it, and the epoch after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetectorEvent {
    /// Time since the detector started.
    pub at: Duration,
    /// Count of failures known to this rank once this event was applied.
    pub epoch: u64,
    pub event: protocol::Event,
}

/// A host callback. It runs **on the progress thread**: it must return
/// quickly and must not call back into the detector's blocking functions
/// ([`Detector::shutdown`]); a panic in it is caught and counted.
pub type Callback = Box<dyn FnMut(&DetectorEvent) + Send + 'static>;

/// Why the detector could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Fabric(#[from] FabricError),
    #[error(transparent)]
    Exchange(#[from] ExchangeError),
    #[error(transparent)]
    Placement(#[from] placement::PlacementError),
    #[error("the protocol engine refused its configuration: {0}")]
    Engine(#[from] protocol::ConfigError),
    #[error("rank {rank}'s slot region ({len} bytes) is too small for the protocol's {need} slots")]
    SlotRegion { rank: Rank, len: u64, need: u64 },
    #[error(
        "the address vector gave rank {rank} the address {got}; ranks must be inserted in order"
    )]
    AddressOrder { rank: Rank, got: u64 },
    #[error("could not determine this host's name: {0}")]
    Hostname(std::io::Error),
    #[error("could not create the {what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
}

/// What the host asked for that could not be done.
#[derive(Debug, thiserror::Error)]
pub enum DetectorError {
    #[error("the detector has stopped (shut down, excluded, or its thread ended)")]
    Stopped,
    #[error("payload of {len} bytes exceeds the {max}-byte limit")]
    PayloadTooLarge { len: usize, max: usize },
}

/// State the progress thread writes and any thread reads without a lock
/// the progress thread can hold.
#[derive(Debug)]
struct Shared {
    me: Rank,
    failed: FailedBits,
    left: FailedBits,
    excluded: AtomicBool,
    /// The progress thread is running.
    running: AtomicBool,
    events: EventQueue<DetectorEvent>,
    /// Published with `try_lock` by the progress thread.
    stats: Mutex<StatsSnapshot>,
}

/// One rank's failure detector: a pinned progress thread and the state the
/// host reads. Dropping it shuts it down cleanly (see [`Detector::shutdown`]).
pub struct Detector {
    shared: Arc<Shared>,
    commands: mpsc::Sender<Command>,
    /// Writing a byte wakes the progress thread.
    wake: UnixStream,
    thread: Option<JoinHandle<()>>,
    /// Disconnects (or carries a unit) when the progress thread ends. In a
    /// mutex only so that `Detector` is `Sync` (the C ABI shares it between
    /// host threads); only `stop` locks it.
    exited: Mutex<mpsc::Receiver<()>>,
    size: u32,
    max_payload: usize,
    linger: Duration,
    placement: Placement,
    provider: String,
    domain: String,
}

impl std::fmt::Debug for Detector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detector")
            .field("rank", &self.shared.me)
            .field("size", &self.size)
            .field("provider", &self.provider)
            .field("epoch", &self.epoch())
            .finish_non_exhaustive()
    }
}

impl Detector {
    /// Starts the detector of this process: opens its own fabric endpoint,
    /// exchanges addresses through `bootstrap` (a collective: every rank of
    /// the job must call it), builds the ring, starts the progress thread,
    /// and returns once this rank's heartbeat link to its observer is up
    /// (or the start-up grace has passed).
    pub fn start(config: &Config, bootstrap: &mut dyn Bootstrap) -> Result<Detector, StartError> {
        Self::start_with(config, bootstrap, None)
    }

    /// Like [`start`](Self::start), with a callback that sees every event
    /// (on the progress thread, before the event is queued).
    pub fn start_with_callback(
        config: &Config,
        bootstrap: &mut dyn Bootstrap,
        callback: Callback,
    ) -> Result<Detector, StartError> {
        Self::start_with(config, bootstrap, Some(callback))
    }

    fn start_with(
        config: &Config,
        bootstrap: &mut dyn Bootstrap,
        callback: Option<Callback>,
    ) -> Result<Detector, StartError> {
        let me = bootstrap.rank();
        let size = bootstrap.size();
        let logger = Logger::new(config.log(), me);
        let t0 = Instant::now();
        let phase =
            |what: &str| logger.debug(format_args!("start: {what} after {:?}", t0.elapsed()));
        let engine_config = config.engine_config();

        // One libfabric per process: the host's (e.g. an MPI library's own
        // build) may not be the one ffd was built against.
        let versions = FabricVersions::of_this_process();
        versions.check()?;
        if versions.loaded != versions.built {
            logger.info(format_args!("{versions}"));
        }

        // Our own fabric resources, separate from the host's.
        let info = Info::query(config.provider(), config.domain())?;
        let provider = info.provider();
        let domain_name = info.domain_name();
        let domain = Domain::open_info(&info)?;
        let av = AddressVector::open(&domain, size as usize)?;
        let (buffers, buffer_size) = progress::message_buffers(size);
        let endpoint_config = EndpointConfig {
            // On tcp;ofi_rxm a write to a dead peer fails fast only with
            // delivery-complete (DESIGN §5); elsewhere errors come anyway.
            delivery_complete: provider.starts_with("tcp"),
            recv_buffers: buffers,
            recv_size: buffer_size,
            send_buffers: buffers,
            send_size: buffer_size,
            ..EndpointConfig::default()
        };
        let endpoint = Endpoint::open(&domain, &av, &endpoint_config)?;
        let slots = endpoint.register(SlotPage::new()?)?;
        let remote = slots.remote();
        phase("fabric open");

        // Address exchange.
        let hostname = match config.hostname() {
            Some(h) => h.to_owned(),
            None => bootstrap::local_hostname().map_err(StartError::Hostname)?,
        };
        let mut record = PeerRecord::new(me, size, hostname, &engine_config);
        record.provider = provider.clone();
        record.fabric_addr = endpoint.name().to_vec();
        record.slot_addr = remote.addr;
        record.slot_key = remote.key;
        if me == 0 {
            record.job_key = bootstrap::random_job_key().map_err(|source| StartError::Io {
                what: "job key",
                source,
            })?;
        }
        let view = bootstrap::exchange(bootstrap, &record)?;
        phase("address exchange");

        let mut peers = Vec::with_capacity(size as usize);
        for (rank, rec) in view.records.iter().enumerate() {
            let addr = av.insert(&rec.fabric_addr)?;
            if addr.0 != rank as u64 {
                return Err(StartError::AddressOrder {
                    rank: rank as Rank,
                    got: addr.0,
                });
            }
            peers.push(RemoteRegion {
                addr: rec.slot_addr,
                key: rec.slot_key,
                len: remote.len,
            });
        }
        if remote.len < u64::from(protocol::wire::SLOTS) * 8 {
            return Err(StartError::SlotRegion {
                rank: me,
                len: remote.len,
                need: u64::from(protocol::wire::SLOTS),
            });
        }

        let hosts: Vec<u64> = view.records.iter().map(|r| r.host_id).collect();
        let engine_config = protocol::EngineConfig {
            ring_seed: view.ring_seed,
            max_payload: engine_config.max_payload.min(progress::MAX_APP_PAYLOAD),
            ..engine_config
        };
        let ring = Arc::new(Ring::new(engine_config.ring, &hosts, view.ring_seed));
        let nic = info.pci_address().map(|p| p.to_string());
        let placement = placement::choose(config.core(), nic.as_deref())?;
        phase("placement");
        logger.info(format_args!(
            "provider {provider} domain {domain_name}, {} ranks, placement: {}",
            size, placement.reason
        ));

        let max_payload = engine_config.max_payload;
        let engine_config = Arc::new(engine_config);
        let started = Instant::now();
        // The Engine is built by the progress thread once every rank is
        // linked; check its settings now, while errors can still be returned.
        engine_config.validate()?;
        let observer = ring.successors(me).next();
        let link_target = observer.map(|o| (o, peers[o as usize]));
        let warm: Vec<Rank> = protocol::Overlay::new(engine_config.bcast, size)
            .neighbours(ring.position_of(me))
            .into_iter()
            .map(|pos| ring.rank_at(pos))
            .filter(|&r| r != me)
            .collect();

        let shared = Arc::new(Shared {
            me,
            failed: FailedBits::new(size),
            left: FailedBits::new(size),
            excluded: AtomicBool::new(false),
            running: AtomicBool::new(true),
            events: EventQueue::new(config.event_queue()).map_err(|source| StartError::Io {
                what: "event queue",
                source,
            })?,
            stats: Mutex::new(StatsSnapshot {
                placement: Some(placement.clone()),
                provider: provider.clone(),
                domain: domain_name.clone(),
                ..StatsSnapshot::default()
            }),
        });
        let (wake_rx, wake) = UnixStream::pair().map_err(|source| StartError::Io {
            what: "wake-up socket",
            source,
        })?;
        wake_rx
            .set_nonblocking(true)
            .and_then(|()| wake.set_nonblocking(true))
            .map_err(|source| StartError::Io {
                what: "wake-up socket",
                source,
            })?;
        let (commands, command_rx) = mpsc::channel();
        let (linked_tx, linked_rx) = mpsc::sync_channel(1);
        let (go_tx, go_rx) = mpsc::sync_channel(1);

        let parts = progress::Parts {
            shared: Arc::clone(&shared),
            seed: progress::EngineSeed {
                config: engine_config,
                ring,
                me,
                job_key: view.job_key,
            },
            endpoint,
            _av: av,
            slots,
            peers,
            started,
            commands: command_rx,
            wake: wake_rx,
            callback,
            link: progress::Link {
                target: link_target,
                warm,
                linked: linked_tx,
                go: go_rx,
            },
            spin: config.progress() == crate::config::ProgressMode::Spin,
            eagain_limit: config.eagain_limit(),
            connect_grace: config.startup_grace() + config.timeout(),
            period: config.period(),
            timeout: config.timeout(),
            logger,
        };
        let pin = placement.clone();
        let (exit_tx, exited) = mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name(format!("ffd-progress-{me}"))
            .spawn(move || {
                // Dropped when the thread ends, however it ends.
                let _exit = exit_tx;
                if let Err(e) = placement::pin_current_thread(&pin) {
                    logger.warn(format_args!("{e}; running unpinned"));
                }
                progress::run(parts);
            })
            .map_err(|source| StartError::Io {
                what: "progress thread",
                source,
            })?;

        // Nobody judges anybody before every rank's heartbeat link carried a
        // write: wait for ours, then for everyone's (a barrier), then go.
        // A link still down after three times the grace has a dead or
        // wedged observer: go on, its own observer will find it.
        let bound = (config.startup_grace() + config.timeout()) * 3;
        if linked_rx.recv_timeout(bound).is_err() {
            logger.warn(format_args!(
                "the heartbeat link to the observer was not confirmed within {bound:?}"
            ));
        }
        phase("heartbeat link");
        // On error the thread sees `go` dropped and ends.
        bootstrap.allgather(&[]).map_err(ExchangeError::from)?;
        phase("all ranks linked");
        let _ = go_tx.send(());
        let _ = (&wake).write(&[1]);

        Ok(Detector {
            shared,
            commands,
            wake,
            thread: Some(thread),
            exited: Mutex::new(exited),
            size,
            max_payload,
            linger: linger(config.period(), config.timeout()),
            placement,
            provider,
            domain: domain_name,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> Rank {
        self.shared.me
    }

    /// The job size N.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Whether `rank` is neither known failed nor known to have left. Lock-free;
    /// any thread. Ranks outside `0..N` are not alive. This rank is not
    /// alive once it has been excluded.
    pub fn is_alive(&self, rank: Rank) -> bool {
        if rank >= self.size {
            return false;
        }
        if rank == self.shared.me && self.shared.excluded.load(Ordering::Acquire) {
            return false;
        }
        !self.shared.failed.contains(rank) && !self.shared.left.contains(rank)
    }

    /// Whether `rank` left cleanly (shut its detector down). Lock-free.
    pub fn has_left(&self, rank: Rank) -> bool {
        self.shared.left.contains(rank)
    }

    /// Count of failures known to this rank; never decreases. Lock-free.
    pub fn epoch(&self) -> u64 {
        self.shared.failed.epoch()
    }

    /// The failed ranks known to this rank, increasing. Lock-free.
    pub fn failed_ranks(&self) -> Vec<Rank> {
        self.shared.failed.ranks()
    }

    /// Whether the others declared this rank failed: it no longer takes
    /// part and the host must stop using it (fail-stop).
    pub fn is_excluded(&self) -> bool {
        self.shared.excluded.load(Ordering::Acquire)
    }

    /// Whether the progress thread is still running.
    pub fn is_running(&self) -> bool {
        self.shared.running.load(Ordering::Acquire)
    }

    /// The next queued event, if any; never blocks. Events that did not fit
    /// the queue (`FFD_EVENT_QUEUE`) are counted in the stats; the failed set
    /// stays exact, so re-read [`failed_ranks`](Self::failed_ranks) then.
    pub fn try_next_event(&self) -> Option<DetectorEvent> {
        self.shared.events.try_pop()
    }

    /// A file descriptor that is readable while events are queued, for the
    /// host's poll/epoll loop.
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.shared.events.as_fd()
    }

    /// Reliably broadcasts `payload` to every live rank (they receive
    /// [`protocol::Event::Payload`]); returns at once.
    pub fn broadcast(&self, payload: &[u8]) -> Result<(), DetectorError> {
        if payload.len() > self.max_payload {
            return Err(DetectorError::PayloadTooLarge {
                len: payload.len(),
                max: self.max_payload,
            });
        }
        if !self.is_running() {
            return Err(DetectorError::Stopped);
        }
        self.command(Command::Broadcast(payload.to_vec()))
    }

    /// The counters as last published by the progress thread (at most a
    /// few periods old).
    pub fn stats(&self) -> StatsSnapshot {
        match self.shared.stats.lock() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Where the progress thread runs, and why.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// The libfabric provider and domain the detector opened.
    pub fn fabric(&self) -> (&str, &str) {
        (&self.provider, &self.domain)
    }

    /// Leaves cleanly: tells the others this rank is going (they report
    /// [`protocol::Event::Left`], not a failure, and mend the ring around
    /// it), keeps the link up for a few periods so the notice is out, then
    /// stops the progress thread. Bounded by the timeout plus a second.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        let _ = self.command(Command::Leave);
        let ended = |rx: &mpsc::Receiver<()>, within| {
            !matches!(
                rx.recv_timeout(within),
                Err(mpsc::RecvTimeoutError::Timeout)
            )
        };
        let exited = self
            .exited
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !ended(&exited, self.linger + Duration::from_secs(1))
            && (self.command(Command::Stop).is_err() || !ended(&exited, Duration::from_secs(1)))
        {
            // Stuck in a host callback: never hang the host on it.
            return;
        }
        let _ = thread.join();
    }

    fn command(&self, command: Command) -> Result<(), DetectorError> {
        self.commands
            .send(command)
            .map_err(|_| DetectorError::Stopped)?;
        // WouldBlock means bytes are already waiting: the thread is awake.
        let _ = (&self.wake).write(&[1]);
        Ok(())
    }
}

impl Drop for Detector {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How long a leaving rank keeps its endpoint open after announcing it:
/// long enough for the notice to be sent and for neighbours to mend.
fn linger(period: Duration, timeout: Duration) -> Duration {
    (period * 3).min(timeout).max(Duration::from_millis(5))
}

/// The slot region of this detector (the only remotely writable memory).
type SlotRegion = MemoryRegion<SlotPage>;
