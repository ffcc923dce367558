//! Closing the fabric port to strangers (`FFD_SOURCE_FILTER`,
//! `docs/design.md` §5.4 "What the authentication stops"): on the socket providers, the endpoint's
//! listening socket drops every packet from the moment it is open, and
//! after the exchange lets through only the job's own host addresses,
//! locked.
//!
//! Owns: when the filter goes on and which addresses it admits (every
//! rank's fabric address from the exchanged records). Must not: touch
//! sockets itself (`fabric::SourceGuard` does).

use std::net::IpAddr;

use crate::config::{Config, SourceFilterMode};
use crate::fabric::{
    FabricError, GuardError, Info, SourceFilter, SourceGuard, listens_on_sockets, socket_address,
};

use super::super::log::Logger;
use super::{JobView, OwnFabric, StartError};

/// Right after the endpoint is open: deny every source, when the setting
/// and the provider call for it. `None`: no filter (off, or a provider
/// that listens on no kernel socket).
/// With `auto`, a filter the kernel refuses (or a listening socket not
/// found) is a warning and no filter; with `on`, an error.
pub(super) fn deny_all(
    config: &Config,
    info: &Info,
    fabric: &OwnFabric,
    logger: &Logger,
) -> Result<Option<SourceGuard>, StartError> {
    let mode = config.source_filter();
    if mode == SourceFilterMode::Off || !listens_on_sockets(&info.provider()) {
        return Ok(None);
    }
    let guard = SourceGuard::deny_all(fabric.endpoint.name()).and_then(|guard| {
        if guard.addr().ip().is_unspecified() {
            Err(GuardError::Wildcard(guard.addr()))
        } else {
            Ok(guard)
        }
    });
    match guard {
        Ok(guard) => Ok(Some(guard)),
        Err(e) if mode == SourceFilterMode::Auto => {
            logger.warn(format_args!(
                "no source filter (FFD_SOURCE_FILTER=auto): {e}; anyone who reaches the \
                 fabric port reaches libfabric (FFD_SOURCE_FILTER=on makes this an error)"
            ));
            Ok(None)
        }
        Err(e) => Err(FabricError::from(e).into()),
    }
}

/// The job's host addresses: the IP of every rank's fabric address;
/// `by_mail`: not those of this rank's host's ranks, whose messages go
/// through the host's mailboxes (`runtime/mail.rs`). A rank of another
/// host that shares an address with this one (`ffd run --hosts`: every
/// fake host on 127.0.0.1) still admits it.
fn job_addresses(view: &JobView, by_mail: bool) -> Result<Vec<IpAddr>, GuardError> {
    let mut ips = Vec::new();
    for rec in view.records.iter().filter(|r| view.over_fabric(r, by_mail)) {
        let addr = socket_address(&rec.fabric_addr).ok_or(GuardError::NotSocketAddress {
            len: rec.fabric_addr.len(),
        })?;
        if !ips.contains(&addr.ip()) {
            ips.push(addr.ip());
        }
    }
    Ok(ips)
}

/// After the exchange: admit the job's host addresses and lock the filter;
/// with `by_mail` (same-host messages through the mailboxes), only those
/// of the ranks of other hosts: a one-host job's filter stays deny-all,
/// locked, and no process reaches libfabric through its port.
/// Not a collective: start-up keeps the exchange and the linking barrier as
/// its only ones. A peer connects only after its own exchange, insert,
/// placement and the spawn of its progress thread (tens of ms here), while
/// this takes tens of µs after ours; a peer that still came first would
/// have its SYN dropped and sent again a second later, within the
/// linking phase's bound.
pub(super) fn admit_job(
    guard: Option<SourceGuard>,
    view: &JobView,
    by_mail: bool,
) -> Result<Option<SourceFilter>, StartError> {
    let Some(guard) = guard else {
        return Ok(None);
    };
    let filter = job_addresses(view, by_mail)
        .and_then(|ips| guard.allow(&ips))
        .map_err(FabricError::from)?;
    Ok(Some(filter))
}
