//! Start-up of one detector: the steps [`Detector::start`] runs, in order,
//! and the peer records the ranks exchange on the way.
//!
//! Owns: opening the detector's own fabric resources, this rank's
//! [`PeerRecord`] and the address exchange (the record's byte format in
//! `record`, the checks across ranks in `exchange`), the address vector in
//! rank order, the ring and the Engine's ingredients, placement, the state
//! published to the embedder, spawning the progress thread, and the linking
//! phase with its barrier. Must not: make protocol decisions (the Engine
//! does), carry bytes between ranks itself (a [`Bootstrap`] does), or wait
//! without a bound of its own (a embedder's collective is the embedder's business).
//!
//! The steps, each a function below, in the order `start` runs them:
//! `Info::query` (no endpoint, no socket), `own_record` (with this rank's
//! claim on the job's secret, `keys`, and whether it reads its host's
//! mailboxes) and the first `exchange`, without fabric fields; then, from
//! the same records on every rank (`JobView::one_host_by_mail`), either
//! nothing more (a one-host job: no endpoint, `runtime/transport.rs`) or
//! `fabric_round`: `open_fabric` (then `guard::deny_all`: the source
//! filter drops everyone), the liveness port, the second `exchange` with
//! the fabric fields, `guard::admit_job` (the job's hosts only, locked),
//! `insert_peers`. Then `agree_engine` (with the host groups
//! unless `FFD_LOCAL=off`, then `local::plan`: the host's counter segment
//! and the pidfds), `choose_placement`,
//! `seed_engine` (the message key), `plan_links`, `publish_state`,
//! `wake_socket`, `spawn_progress`, `await_links`.

#![forbid(unsafe_code)]

mod exchange;
mod guard;
pub mod keys;
mod record;

pub use exchange::{ExchangeError, JobView, exchange};
pub use record::{
    FINGERPRINT_LEN, JobWideSettings, PeerRecord, ProcessIdentity, RECORD_VERSION, RecordError,
    SecretClaim, host_id, local_hostname, random_job_key, start_time_of, stat_after_command,
    this_process,
};

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::transport::{Fabric, NO_FABRIC_DOMAIN, NO_FABRIC_PROVIDER, Slots, Transport};
use crate::bootstrap::Bootstrap;
use crate::bootstrap::secret::JobSecret;
use crate::config::{
    Config, CoreChoice, Env, LivenessMode, LocalMode, ProgressMode, SchedPolicy, SourceFilterMode,
};
use crate::fabric::{
    AddressVector, Domain, Endpoint, EndpointConfig, FabricVersions, Info, RemoteRegion, SlotPage,
    SourceGuard, socket_address,
};
use crate::node;
use crate::protocol::{self, EngineConfig, Hosts, Rank, Ring};

use super::host_agree::HostAgreement;
use super::link::LinkProgress;
use super::liveness::LivenessParts;
use super::local;
use super::log::Logger;
use super::placement::{self, Placement};
use super::progress::{self, EngineSeed};
use super::{
    Callback, Detector, EventQueue, FailedBits, PublishedState, SlotRegion, StartError,
    StatsSnapshot, linger,
};

/// Runs every start-up step in order and returns the running detector; see
/// [`Detector::start`]. A collective: every rank of the job runs it through
/// the same bootstrap.
pub(super) fn start(
    config: &Config,
    bootstrap: &mut dyn Bootstrap,
    callback: Option<Callback>,
) -> Result<Detector, StartError> {
    // Before any thread is spawned: the detector belongs to this process.
    let owner = crate::node::Owner::this_process();
    let (me, size) = (bootstrap.rank(), bootstrap.size());
    let logger = Logger::new(config.log(), me);
    let phases = Phases {
        logger,
        t0: Instant::now(),
    };
    let engine_config = config.engine_config();

    check_fabric_version(&logger)?;
    // `fi_getinfo` only: no endpoint, no socket. A provider that is not
    // there fails here, named, on every rank.
    let info = Info::query(config.provider(), config.domain())
        .map_err(|e| abandon_exchange(bootstrap, e.into()))?;
    // First round: every rank's record without fabric fields, from which
    // every rank decides alike whether the job needs the fabric at all.
    let (mut record, held) = own_record(config, bootstrap, &info)?;
    let view = exchange(bootstrap, &record)?;
    let secret = job_secret(held, &view)?;
    phases.done("record exchange");
    // This rank reads its host's mailboxes (`futex_waitv` probed once,
    // when its record was made).
    let by_mail = record.mailbox;
    let (fabric, view, liveness) = if view.one_host_by_mail() {
        // Every rank on this host, each reading its mailbox: the node
        // segment carries everything, and no endpoint (no socket of
        // libfabric's, no liveness port) is opened.
        logger.info(format_args!(
            "no fabric endpoint: every rank is on this host, messages go through its \
             node segment (FFD_PROVIDER={} not opened)",
            info.provider()
        ));
        (None, view, None)
    } else {
        let (fabric, view, liveness) =
            fabric_round(config, bootstrap, (&info, &mut record), by_mail, &phases)?;
        (Some(fabric), view, liveness)
    };
    let (engine_config, ring, hosts) = agree_engine(config, engine_config, &view);
    let local = match hosts {
        Some(hosts) => Some(local::plan(config.local(), &view, hosts, me)?),
        None => None,
    };
    if let Some(plan) = &local {
        for why in &plan.fallback {
            logger.info(format_args!("local watching without pidfd: {why}"));
        }
    }
    let placement = choose_placement(config, &info, &view)?;
    phases.done("placement");
    let (provider, domain) = match &fabric {
        Some(_) => (info.provider(), info.domain_name()),
        None => (NO_FABRIC_PROVIDER.to_owned(), NO_FABRIC_DOMAIN.to_owned()),
    };
    logger.info(format_args!(
        "provider {provider} domain {domain}, {size} ranks, placement: {}",
        placement.reason
    ));

    // Time zero of the detector's clock and of its events.
    let started = Instant::now();
    let seed = seed_engine(engine_config, ring, local, &view, &secret)?;
    let max_payload = seed.config.max_payload;
    let links = match &fabric {
        Some((_, peers)) => plan_links(&seed, size, peers),
        None => LinkPlan {
            target: None,
            warm: Vec::new(),
        },
    };
    logger.debug(format_args!("start: links to warm up: {:?}", links.warm));
    // A one-host job agrees through the host's segment (`host_agree.rs`):
    // every rank decides the same from the same records.
    let one_host = seed.local.as_ref().is_some_and(|plan| {
        plan.segment.is_some() && plan.hosts.members(plan.hosts.host_of(me)).len() == size as usize
    });
    let host_agreement = one_host.then(|| HostAgreement::new(me, size, seed.config.timeout));
    let published = publish_state(
        config,
        (me, size),
        &placement,
        (&provider, &domain),
        host_agreement,
    )?;
    let (wake_rx, wake) = wake_socket()?;
    let (commands, command_rx) = super::commands::command_queue(super::MAX_QUEUED_BROADCASTS);
    let (linked_tx, linked_rx) = mpsc::sync_channel(1);
    let (go_tx, go_rx) = mpsc::sync_channel(1);
    let link_progress = Arc::new(LinkProgress::default());
    let warm_links = links.warm.len();

    let (transport, slots, peers) = match fabric {
        Some((fabric, peers)) => (
            Transport::Fabric(Box::new(Fabric {
                endpoint: fabric.endpoint,
                _av: fabric.av,
            })),
            Slots::Registered(fabric.slots),
            peers,
        ),
        None => (
            Transport::Node { refused: 0 },
            Slots::Plain(SlotPage::new()?),
            Vec::new(),
        ),
    };
    let parts = progress::Parts {
        shared: Arc::clone(&published),
        seed,
        transport,
        slots,
        peers,
        started,
        commands: command_rx,
        wake: wake_rx,
        callback,
        link: progress::Link {
            target: links.target,
            warm: links.warm,
            linked: linked_tx,
            go: go_rx,
            progress: Arc::clone(&link_progress),
        },
        spin: config.progress() == ProgressMode::Spin,
        eagain_limit: config.eagain_limit(),
        connect_grace: config.startup_grace() + config.timeout(),
        period: config.period(),
        timeout: config.timeout(),
        logger,
        liveness,
    };
    let widen = !matches!(config.core(), CoreChoice::Cpu(_));
    let (thread, exited) = spawn_progress(parts, &placement, (config.sched(), widen), logger)?;
    let linking = Linking {
        linked: linked_rx,
        progress: link_progress,
        warm_links,
    };
    await_links(config, bootstrap, &phases, &linking, go_tx, &wake)?;

    Ok(Detector {
        owner,
        shared: published,
        commands,
        wake,
        thread: Some(thread),
        exited: Mutex::new(exited),
        started,
        size,
        max_payload,
        linger: linger(config.period(), config.timeout()),
        placement,
        provider,
        domain,
    })
}

/// Logs how long start-up took to reach each step (`FFD_LOG=debug`).
struct Phases {
    logger: Logger,
    t0: Instant,
}

impl Phases {
    fn done(&self, what: &str) {
        self.logger
            .debug(format_args!("start: {what} after {:?}", self.t0.elapsed()));
    }
}

/// The detector's own fabric resources, separate from the embedder's: open,
/// the slot region registered, not yet linked to any peer.
struct OwnFabric {
    av: AddressVector,
    endpoint: Endpoint,
    slots: SlotRegion,
}

/// Opens the provider and domain `config` names, an address vector for
/// `size` ranks, an endpoint whose buffers fit every message of a job of
/// that size, and registers the one-page slot region peers write into.
/// One libfabric per process: the embedder's (an MPI library's own build, say)
/// may not be the one ffd was built against. An older one is refused,
/// naming both versions; a newer one is logged.
fn check_fabric_version(logger: &Logger) -> Result<(), StartError> {
    let versions = FabricVersions::of_this_process();
    versions.check()?;
    if versions.loaded != versions.built {
        logger.info(format_args!("{versions}"));
    }
    Ok(())
}

fn open_fabric(info: &Info, size: u32) -> Result<OwnFabric, StartError> {
    let domain = Domain::open_info(info)?;
    let av = AddressVector::open(&domain, size as usize)?;
    let (buffers, buffer_size) = progress::message_buffers(size);
    let endpoint_config = EndpointConfig {
        // On tcp;ofi_rxm a write to a dead peer fails fast only with
        // delivery-complete (docs/design.md §7 "Fabric facts this rests on"); elsewhere errors come anyway.
        delivery_complete: info.provider().starts_with("tcp"),
        recv_buffers: buffers,
        recv_size: buffer_size,
        send_buffers: buffers,
        send_size: buffer_size,
        ..EndpointConfig::default()
    };
    let endpoint = Endpoint::open(&domain, &av, &endpoint_config)?;
    let slots = endpoint.register(SlotPage::new()?)?;
    Ok(OwnFabric {
        av,
        endpoint,
        slots,
    })
}

/// Builds this rank's [`PeerRecord`] without its fabric fields (host
/// name, provider, job-wide settings, its process, whether it can use the
/// host's mailboxes, its claim on the job's secret, and on rank 0 a fresh
/// job key), and returns it with the secret this rank holds, if any. On
/// error this rank still takes part in the exchange (`abandon_exchange`).
fn own_record(
    config: &Config,
    bootstrap: &mut dyn Bootstrap,
    info: &Info,
) -> Result<(PeerRecord, Option<JobSecret>), StartError> {
    let (me, size) = (bootstrap.rank(), bootstrap.size());
    let secret = keys::held_secret(bootstrap, &Env::process())
        .and_then(|held| keys::claim(me, held.as_ref()).map(|claim| (held, claim)));
    let (held, claim) = match secret {
        Ok(secret) => secret,
        Err(e) => return Err(abandon_exchange(bootstrap, e.into())),
    };
    let hostname = match config.hostname() {
        Some(h) => h.to_owned(),
        None => {
            local_hostname().map_err(|e| abandon_exchange(bootstrap, StartError::Hostname(e)))?
        }
    };
    let mut record = PeerRecord::new(me, size, hostname, config);
    record.provider = info.provider();
    record.secret = claim;
    record.process = this_process();
    record.mailbox = local::mailbox_usable(config.local());
    if me == 0 {
        record.job_key = random_job_key().map_err(|source| {
            abandon_exchange(
                bootstrap,
                StartError::Io {
                    what: "job key",
                    source,
                },
            )
        })?;
    }
    Ok((record, held))
}

/// The job's secret: the one this rank holds, or the one rank 0 drew.
fn job_secret(held: Option<JobSecret>, view: &JobView) -> Result<JobSecret, StartError> {
    match (held, &view.drawn_secret) {
        (Some(held), _) => Ok(held),
        (None, Some(drawn)) => Ok(drawn.clone()),
        // The exchange checked that rank 0 drew one when nobody holds one.
        (None, None) => Err(ExchangeError::NoSecret.into()),
    }
}

/// A job across hosts: opens the fabric (the source filter deny-all from
/// the start, the liveness port), exchanges the records again with the
/// fabric address, slot region and liveness port filled in, admits the
/// job's hosts, and inserts every rank's address. Returns the fabric with
/// every rank's slot region, the second round's view, and the liveness
/// parts. A collective, like the first round: a rank that cannot open its
/// fabric still takes part, so that the others fail naming it.
fn fabric_round(
    config: &Config,
    bootstrap: &mut dyn Bootstrap,
    (info, record): (&Info, &mut PeerRecord),
    by_mail: bool,
    phases: &Phases,
) -> Result<(OwnedFabricPeers, JobView, Option<LivenessParts>), StartError> {
    let logger = phases.logger;
    let fabric = open_fabric(info, bootstrap.size()).map_err(|e| abandon_exchange(bootstrap, e))?;
    let source_guard = guard::deny_all(config, info, &fabric, &logger)
        .map_err(|e| abandon_exchange(bootstrap, e))?;
    phases.done("fabric open");
    let live = liveness_listener(config, &fabric, &logger);
    let remote = fabric.slots.remote();
    record.fabric_addr = fabric.endpoint.name().to_vec();
    record.slot_addr = remote.addr;
    record.slot_key = remote.key;
    record.liveness_port = live
        .as_ref()
        .map_or(0, |(l, _)| l.local_addr().map_or(0, |a| a.port()));
    let view = exchange(bootstrap, record)?;
    phases.done("address exchange");
    // Same-host messages go through the host's mailboxes: only other
    // hosts' ranks need this rank's fabric port, or its liveness port
    // (watched by fabric observers only); `local::plan` decides the same
    // from the same records.
    let liveness = admit_liveness(live, &view, config.timeout(), by_mail, &logger);
    let source_filter = guard::admit_job(source_guard, &view, by_mail)?;
    phases.done("source filter");
    if let Some(filter) = &source_filter {
        logger.info(format_args!(
            "source filter on {} ({} sockets): admits {:?}",
            filter.addr, filter.sockets, filter.allowed
        ));
    }
    let peers = insert_peers(&fabric, &view)?;
    Ok(((fabric, peers), view, liveness))
}

/// The fabric and every rank's slot region.
type OwnedFabricPeers = (OwnFabric, Vec<RemoteRegion>);

/// This rank's liveness port (`FFD_LIVENESS=auto`, design
/// §4.5 "In-band detection"): a TCP listener at the fabric endpoint's IP that drops
/// every packet until the job's hosts are known. `None` (logged) when
/// off, when the endpoint has no IP address, or when the kernel refuses.
fn liveness_listener(
    config: &Config,
    fabric: &OwnFabric,
    logger: &Logger,
) -> Option<(std::net::TcpListener, Option<SourceGuard>)> {
    if config.liveness() == LivenessMode::Off {
        return None;
    }
    let Some(ip) = socket_address(fabric.endpoint.name())
        .map(|a| a.ip())
        .filter(|ip| !ip.is_unspecified())
    else {
        logger.info(format_args!(
            "no liveness port: the endpoint's address is no IP address"
        ));
        return None;
    };
    // Filtered as the fabric port is (`FFD_SOURCE_FILTER`): `auto` goes
    // on without a filter where the kernel refuses one (the listener
    // still closes at once what comes from outside the job's hosts).
    let mode = config.source_filter();
    let filtered = crate::fabric::liveness_listener(ip, mode != SourceFilterMode::Off);
    match filtered {
        Ok(l) => Some(l),
        Err(e) if mode == SourceFilterMode::Auto => {
            match crate::fabric::liveness_listener(ip, false) {
                Ok(l) => {
                    logger.info(format_args!("liveness port without a source filter: {e}"));
                    Some(l)
                }
                Err(e) => {
                    logger.info(format_args!("no liveness port: {e}"));
                    None
                }
            }
        }
        Err(e) => {
            logger.warn(format_args!("no liveness port: {e}"));
            None
        }
    }
}

/// After the exchange: the listener admits the job's hosts (locked; with
/// `by_mail`, the other hosts' only), and every rank's liveness address
/// is known.
fn admit_liveness(
    live: Option<(std::net::TcpListener, Option<SourceGuard>)>,
    view: &JobView,
    timeout: std::time::Duration,
    by_mail: bool,
    logger: &Logger,
) -> Option<LivenessParts> {
    let (listener, guard) = live?;
    let ports: Vec<Option<std::net::SocketAddr>> = view
        .records
        .iter()
        .map(|rec| {
            let ip = socket_address(&rec.fabric_addr)?.ip();
            (rec.liveness_port != 0).then(|| std::net::SocketAddr::new(ip, rec.liveness_port))
        })
        .collect();
    let mut allowed: Vec<std::net::IpAddr> = Vec::new();
    let others = ports
        .iter()
        .zip(&view.records)
        .filter(|(_, rec)| view.over_fabric(rec, by_mail));
    for ip in others.filter_map(|(a, _)| a.map(|a| a.ip().to_canonical())) {
        if !allowed.contains(&ip) {
            allowed.push(ip);
        }
    }
    if let Some(Err(e)) = guard.map(|g| g.allow(&allowed)) {
        // The port is published: it must stay open while this rank lives
        // (a closed one is refused, proof of death). Deny-all, it answers
        // nobody, which is no verdict.
        logger.warn(format_args!(
            "the liveness port stays closed to everyone (admitting the job's hosts failed: {e})"
        ));
    }
    Some(LivenessParts {
        listener,
        ports,
        allowed,
        probe_wait: timeout / 4,
    })
}

/// This rank cannot make its record: it still takes part in the exchange
/// with an empty contribution, so that the other ranks fail on it (naming
/// this rank) rather than wait for it, and returns `error`.
fn abandon_exchange(bootstrap: &mut dyn Bootstrap, error: StartError) -> StartError {
    let _ = bootstrap.allgather(&[]);
    error
}

/// Inserts every rank's fabric address into the address vector, in rank
/// order (so rank r is fabric address r), and returns each rank's slot
/// region. Fails when the provider numbers addresses otherwise, or when
/// our slot region cannot hold the protocol's slots.
fn insert_peers(fabric: &OwnFabric, view: &JobView) -> Result<Vec<RemoteRegion>, StartError> {
    let remote = fabric.slots.remote();
    let mut peers = Vec::with_capacity(view.records.len());
    for (rank, rec) in view.records.iter().enumerate() {
        let addr = fabric.av.insert(&rec.fabric_addr)?;
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
            rank: view.rank,
            len: remote.len,
            need: u64::from(protocol::wire::SLOTS),
        });
    }
    Ok(peers)
}

/// The Engine's settings as the job agreed them (rank 0's ring seed, the
/// payload bounded by what the runtime carries), the ring they build over
/// every rank's host, and the host groups unless `FFD_LOCAL=off`.
fn agree_engine(
    config: &Config,
    engine_config: EngineConfig,
    view: &JobView,
) -> (EngineConfig, Arc<Ring>, Option<Arc<Hosts>>) {
    let hosts: Vec<u64> = view.records.iter().map(|r| r.host_id).collect();
    let engine_config = EngineConfig {
        ring_seed: view.ring_seed,
        max_payload: engine_config.max_payload.min(progress::MAX_APP_PAYLOAD),
        ..engine_config
    };
    let ring = Arc::new(Ring::new(engine_config.ring, &hosts, view.ring_seed));
    let groups = (config.local() != LocalMode::Off)
        .then(|| Arc::new(Hosts::new(engine_config.ring, &hosts, view.ring_seed)));
    (engine_config, ring, groups)
}

/// Where the progress thread will run: `FFD_CORE`, or a core near the NIC
/// of the chosen domain, spread over the host's ranks.
fn choose_placement(config: &Config, info: &Info, view: &JobView) -> Result<Placement, StartError> {
    let nic = info.pci_address().map(|p| p.to_string());
    let host = view.records[view.rank as usize].host_id;
    let local_index = view.records[..view.rank as usize]
        .iter()
        .filter(|r| r.host_id == host)
        .count();
    Ok(placement::choose(
        config.core(),
        nic.as_deref(),
        local_index,
    )?)
}

/// What the progress thread builds the Engine from once every rank is
/// linked: the settings (checked now, while errors can still be returned
/// to the embedder), the ring, and the job's keys (the message key derived
/// from `secret` and the job key).
fn seed_engine(
    engine_config: EngineConfig,
    ring: Arc<Ring>,
    local: Option<local::LocalPlan>,
    view: &JobView,
    secret: &JobSecret,
) -> Result<EngineSeed, StartError> {
    let config = Arc::new(engine_config);
    config.validate()?;
    Ok(EngineSeed {
        config,
        ring,
        local,
        me: view.rank,
        keys: keys::job_keys(secret, view.job_key),
    })
}

/// The links the linking phase sets up before anyone is judged.
struct LinkPlan {
    /// The observer (this rank's successor on the ring) and its slot
    /// region; none in a job of one.
    target: Option<(Rank, RemoteRegion)>,
    /// The other broadcast neighbours of this rank.
    warm: Vec<Rank>,
}

/// The heartbeat link to this rank's observer and the broadcast links to
/// warm up, from the ring and the overlay the Engine will use.
fn plan_links(seed: &EngineSeed, size: u32, peers: &[RemoteRegion]) -> LinkPlan {
    let (ring, me) = (&seed.ring, seed.me);
    // With host groups only leaders heartbeat, to the next host's leader.
    let observer = match &seed.local {
        None => ring.successors(me).next(),
        Some(plan) if plan.hosts.is_leader(me, |_| false) => {
            plan.hosts.fabric_observer(me, |_| false)
        }
        Some(_) => None,
    };
    let target = observer.map(|o| (o, peers[o as usize]));
    // A rank of this host whose messages go through the mailboxes needs no
    // fabric link (`runtime/mail.rs`).
    let by_mail = |r: Rank| {
        seed.local
            .as_ref()
            .is_some_and(|plan| plan.mailbox && plan.hosts.host_of(r) == plan.hosts.host_of(me))
    };
    let mut warm: Vec<Rank> = protocol::Overlay::new(seed.config.bcast, size)
        .neighbours(ring.position_of(me))
        .into_iter()
        .map(|pos| ring.rank_at(pos))
        .collect();
    // With host groups, agreements run on a tree over the hosts' heads
    // (design §4.10 "Agreement and views"), rooted at rank 0 while it
    // lives: its edges between hosts are warmed too, so that the first
    // agreement does not set up connections. (Broadcast neighbours need
    // not be tree edges: with hosts r mod 4 and the ring in rank order,
    // the root's edge to host 3's head, a difference of 3, is not one.)
    if let Some(plan) = &seed.local {
        let tree = protocol::agreement::Shape::Hosts(Arc::clone(&plan.hosts));
        let none = protocol::RankSet::new();
        warm.extend(tree.effective_parent(me, 0, size, &none));
        warm.extend(tree.effective_children(me, 0, size, &none));
    }
    warm.retain(|&r| r != me && !by_mail(r));
    warm.sort_unstable();
    warm.dedup();
    LinkPlan { target, warm }
}

/// The state the progress thread publishes and the embedder reads: empty
/// failed and left sets, the event queue (`FFD_EVENT_QUEUE`), and stats
/// that already name the placement and the fabric.
fn publish_state(
    config: &Config,
    (me, size): (Rank, u32),
    placement: &Placement,
    (provider, domain): (&str, &str),
    host_agreement: Option<HostAgreement>,
) -> Result<Arc<PublishedState>, StartError> {
    let events = EventQueue::new(config.event_queue()).map_err(|source| StartError::Io {
        what: "event queue",
        source,
    })?;
    Ok(Arc::new(PublishedState {
        me,
        failed: FailedBits::new(size),
        left: FailedBits::new(size),
        life: Default::default(),
        events,
        stats: Mutex::new(StatsSnapshot {
            placement: Some(placement.clone()),
            provider: provider.to_owned(),
            domain: domain.to_owned(),
            ..StatsSnapshot::default()
        }),
        agreements: Default::default(),
        host_agreement,
        boost: std::sync::OnceLock::new(),
        logger: Logger::new(config.log(), me),
    }))
}

/// The socket pair by which the embedder wakes the progress thread: (the
/// thread's end, the embedder's end), both non-blocking.
fn wake_socket() -> Result<(UnixStream, UnixStream), StartError> {
    let io = |source| StartError::Io {
        what: "wake-up socket",
        source,
    };
    let (thread_end, host_end) = UnixStream::pair().map_err(io)?;
    thread_end
        .set_nonblocking(true)
        .and_then(|()| host_end.set_nonblocking(true))
        .map_err(io)?;
    Ok((thread_end, host_end))
}

/// Spawns the progress thread `ffd-progress-<rank>`, pinned as `placement`
/// says (unpinned, with a warning, when that fails) and under the
/// scheduling policy `sched` (the normal one when the host refuses it;
/// the stats name the outcome). `widen`: a lift may move it off its
/// placement (not when `FFD_CORE` named a CPU). Returns its handle and a
/// receiver that disconnects when the thread ends, however it ends.
fn spawn_progress(
    parts: progress::Parts,
    placement: &Placement,
    (sched, widen): (SchedPolicy, bool),
    logger: Logger,
) -> Result<(JoinHandle<()>, mpsc::Receiver<()>), StartError> {
    let pin = placement.clone();
    let (exit_tx, exited) = mpsc::sync_channel(1);
    let thread = std::thread::Builder::new()
        .name(format!("ffd-progress-{}", parts.seed.me))
        .spawn(move || {
            // Dropped when the thread ends, however it ends.
            let _exit = exit_tx;
            if let Err(e) = placement::pin_current_thread(&pin) {
                logger.warn(format_args!("{e}; running unpinned"));
            }
            // Before `run`: the exit-word threads it starts inherit it.
            let (policy, boost) = apply_sched(sched, widen, logger);
            if let Ok(mut stats) = parts.shared.stats.lock() {
                stats.sched = policy;
            }
            if let Some(boost) = boost {
                let _ = parts.shared.boost.set(boost);
            }
            progress::run(parts);
        })
        .map_err(|source| StartError::Io {
            what: "progress thread",
            source,
        })?;
    Ok((thread, exited))
}

/// Puts the calling thread under `sched`; returns the policy it runs
/// under, as the stats show it, and its lift for a same-host exit
/// (`boost`, and `fifo` when `widen`). A refused `fifo` was asked for
/// and is warned about; a refused `boost` is the default on a host that
/// grants no real-time priority, and is only logged at `info`.
fn apply_sched(
    sched: SchedPolicy,
    widen: bool,
    logger: Logger,
) -> (String, Option<Arc<node::Boost>>) {
    let refused = |e: &std::io::Error| {
        let why = node::fifo_refusal(e);
        (format!("normal (FFD_SCHED={sched} refused: {why})"), why)
    };
    match sched {
        SchedPolicy::Normal => (sched.to_string(), None),
        SchedPolicy::Boost => match node::Boost::for_current_thread(true, widen) {
            Ok(boost) => (sched.to_string(), Some(Arc::new(boost))),
            Err(e) => {
                let (shown, why) = refused(&e);
                logger.info(format_args!(
                    "FFD_SCHED=boost: {why}; same-host exits are handled at the normal policy"
                ));
                (shown, None)
            }
        },
        SchedPolicy::Fifo => match node::set_current_thread_fifo() {
            Ok(()) => {
                let boost = widen
                    .then(|| node::Boost::for_current_thread(false, true).ok())
                    .flatten();
                (sched.to_string(), boost.map(Arc::new))
            }
            Err(e) => {
                let (shown, why) = refused(&e);
                logger.warn(format_args!(
                    "FFD_SCHED=fifo: {why}; the progress thread keeps the normal policy"
                ));
                (shown, None)
            }
        },
    }
}

/// Bound on the wait for this rank's links, unless 3 × (start-up grace +
/// timeout) is longer: half the bootstrap's default bound (60 s), so that
/// ranks already waiting at the barrier that follows do not give up first.
/// Connection set-up on `tcp;ofi_rxm` takes seconds when a hundred
/// processes start at once on a few cores.
const LINK_WAIT: Duration = Duration::from_secs(30);

/// How often a rank still linking says how far it is (`FFD_LOG=info`).
const LINK_REPORT_EVERY: Duration = Duration::from_secs(5);

/// What `Detector::start` watches of the linking phase.
struct Linking {
    /// Signalled once every link of this rank is up.
    linked: mpsc::Receiver<()>,
    progress: Arc<LinkProgress>,
    /// Broadcast links to warm up.
    warm_links: usize,
}

impl Linking {
    /// "the heartbeat link to the observer is up, 9 of 14 broadcast links".
    fn describe(&self) -> String {
        use std::sync::atomic::Ordering;
        let observer = if self.progress.observer.load(Ordering::Relaxed) {
            "up"
        } else {
            "not up yet"
        };
        format!(
            "the heartbeat link to the observer is {observer}, {} of {} broadcast links",
            self.progress.warm.load(Ordering::Relaxed),
            self.warm_links
        )
    }
}

/// The linking phase's end. Nobody judges anybody before every rank's
/// heartbeat link carried a write: wait for ours (saying how far it is
/// every few seconds), then for everyone's (a bootstrap barrier), then
/// tell the progress thread to go. A link still down after
/// [`LINK_WAIT`] has a dead or wedged peer: go on, its own observer will
/// find it. On error `go` is dropped and the thread ends.
fn await_links(
    config: &Config,
    bootstrap: &mut dyn Bootstrap,
    phases: &Phases,
    linking: &Linking,
    go: mpsc::SyncSender<()>,
    wake: &UnixStream,
) -> Result<(), StartError> {
    let bound = LINK_WAIT.max((config.startup_grace() + config.timeout()) * 3);
    let started = Instant::now();
    loop {
        let waited = started.elapsed();
        let left = bound.saturating_sub(waited);
        if left.is_zero() {
            phases.logger.warn(format_args!(
                "the links of this rank were not all confirmed within {bound:?}: {}",
                linking.describe()
            ));
            break;
        }
        match linking.linked.recv_timeout(left.min(LINK_REPORT_EVERY)) {
            Ok(()) => break,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                phases
                    .logger
                    .warn(format_args!("the progress thread stopped while linking"));
                break;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if started.elapsed() < bound {
                    phases.logger.info(format_args!(
                        "still linking after {:.1?}: {}",
                        started.elapsed(),
                        linking.describe()
                    ));
                }
            }
        }
    }
    phases.done("heartbeat link");
    bootstrap.allgather(&[]).map_err(ExchangeError::from)?;
    phases.done("all ranks linked");
    let _ = go.send(());
    let _ = (&*wake).write(&[1]);
    Ok(())
}
