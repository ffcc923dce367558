//! Where the progress thread runs (`FFD_CORE=auto|none|<cpu>`).
//!
//! Owns: choosing a CPU and pinning the calling thread to it. Must not: bind
//! the embedder's threads or memory; it only ever pins the detector's own thread.
//!
//! `auto` asks hwloc for the CPUs near the NIC of the fabric domain (the PCI
//! address libfabric reports in `fi_info->nic->bus_attr`), keeps those the
//! process may use, and prefers one outside the CPUs the embedder bound the
//! process to, so the detector does not steal the application's core. Among
//! equals the host's ranks spread from the highest-numbered CPU down (CPU 0
//! is where most interrupts and daemons land): its n-th rank on this host
//! takes the n-th highest, modulo their count, so the progress threads of
//! unbound ranks do not all queue on one core (they did: a crash's fan-out
//! to every survivor ran one thread at a time). Without a PCI address
//! (loopback, `shm`) or without hwloc I/O discovery it falls back to the
//! process's allowed CPUs.

use hwlocality::Topology;
use hwlocality::cpu::binding::CpuBindingFlags;
use hwlocality::cpu::cpuset::CpuSet;
use hwlocality::topology::builder::TypeFilter;

use crate::config::CoreChoice;

/// The choice made, and why; shown by `ffd info` and in the stats.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Placement {
    /// The CPU to pin to, or `None` to leave the thread unpinned.
    pub cpu: Option<usize>,
    pub reason: String,
}

/// Why a placement could not be honoured.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    #[error("FFD_CORE={cpu}: this process may run only on CPUs {allowed}")]
    CpuNotAllowed { cpu: usize, allowed: String },
    #[error("hwloc could not load the machine topology: {0}")]
    Topology(String),
    #[error("could not pin the progress thread to CPU {0}")]
    Pin(usize),
}

/// Decides where the progress thread should run. Call it before starting the
/// thread (it reads the process's binding, which the thread will not share
/// once pinned). `local_index`: this process's place among its host's ranks
/// (0 for the lowest), which spreads `auto`'s choices.
pub fn choose(
    request: CoreChoice,
    nic_bus_id: Option<&str>,
    local_index: usize,
) -> Result<Placement, PlacementError> {
    match request {
        CoreChoice::None => Ok(Placement {
            cpu: None,
            reason: "none: left to the scheduler (FFD_CORE=none)".to_owned(),
        }),
        CoreChoice::Cpu(cpu) => {
            let cpu = cpu as usize;
            let topology = load_topology(false)?;
            let allowed = topology.allowed_cpuset().clone_target();
            if !allowed.is_set(cpu) {
                return Err(PlacementError::CpuNotAllowed {
                    cpu,
                    allowed: allowed.to_string(),
                });
            }
            Ok(Placement {
                cpu: Some(cpu),
                reason: format!("cpu {cpu}: set by FFD_CORE"),
            })
        }
        CoreChoice::Auto => auto(nic_bus_id, local_index),
    }
}

fn auto(nic_bus_id: Option<&str>, local_index: usize) -> Result<Placement, PlacementError> {
    let topology = load_topology(nic_bus_id.is_some())?;
    let allowed = topology.allowed_cpuset().clone_target();
    // The embedder's own binding: what mpirun/srun or the application set.
    let bound = topology
        .cpu_binding(CpuBindingFlags::PROCESS)
        .unwrap_or_else(|_| allowed.clone());

    let (near, locality) = match nic_bus_id {
        Some(bus) => match topology.pci_device_by_bus_id_string(bus) {
            Ok(Some(device)) => match device.first_non_io_ancestor().and_then(|a| a.cpuset()) {
                Some(set) => (Some(set.clone_target()), format!("near NIC {bus}")),
                None => (None, format!("NIC {bus} has no CPU locality")),
            },
            Ok(None) => (None, format!("NIC {bus} not found by hwloc")),
            Err(_) => (None, format!("NIC address {bus} is not a PCI bus id")),
        },
        None => (
            None,
            "no NIC locality (the provider reports no PCI address)".to_owned(),
        ),
    };

    let mut candidates: Vec<(CpuSet, &str)> = Vec::new();
    if let Some(near) = &near {
        let near_allowed = near & &allowed;
        candidates.push((&near_allowed - &bound, "outside the embedder's binding"));
        candidates.push((
            near_allowed,
            "inside the embedder's binding (no free CPU near the NIC)",
        ));
    }
    candidates.push((&allowed - &bound, "outside the embedder's binding"));
    candidates.push((
        allowed.clone(),
        "inside the embedder's binding (it covers every allowed CPU)",
    ));

    for (set, why) in candidates {
        let cpus: Vec<usize> = set.iter_set().map(usize::from).collect();
        if cpus.is_empty() {
            continue;
        }
        let cpu = cpus[cpus.len() - 1 - local_index % cpus.len()];
        let spread = if cpus.len() > 1 {
            format!(
                ", local rank {local_index} of the host spread over {} CPUs",
                cpus.len()
            )
        } else {
            String::new()
        };
        return Ok(Placement {
            cpu: Some(cpu),
            reason: format!("auto: cpu {cpu}, {locality}, {why}{spread}; allowed {allowed}"),
        });
    }
    Ok(Placement {
        cpu: None,
        reason: format!("auto: hwloc reports no allowed CPU ({locality}); left unpinned"),
    })
}

fn load_topology(with_io: bool) -> Result<Topology, PlacementError> {
    let topo_err = |e: &dyn std::fmt::Display| PlacementError::Topology(e.to_string());
    let mut builder = Topology::builder();
    if with_io {
        builder = builder
            .with_io_type_filter(TypeFilter::KeepImportant)
            .map_err(|e| topo_err(&e))?;
    }
    builder.build().map_err(|e| topo_err(&e))
}

/// Pins the calling thread as `placement` says (no-op when unpinned).
pub fn pin_current_thread(placement: &Placement) -> Result<(), PlacementError> {
    match placement.cpu {
        None => Ok(()),
        Some(cpu) => {
            if core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
                Ok(())
            } else {
                Err(PlacementError::Pin(cpu))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_binding() -> CpuSet {
        let topology = Topology::new().unwrap();
        topology.cpu_binding(CpuBindingFlags::THREAD).unwrap()
    }

    fn allowed() -> CpuSet {
        Topology::new().unwrap().allowed_cpuset().clone_target()
    }

    #[test]
    fn none_leaves_the_thread_unpinned() {
        let p = choose(CoreChoice::None, None, 0).unwrap();
        assert_eq!(p.cpu, None);
        assert!(p.reason.contains("FFD_CORE=none"));
    }

    #[test]
    fn explicit_cpu_outside_the_allowed_set_is_an_error_naming_it() {
        let err = choose(CoreChoice::Cpu(100_000), None, 0).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("FFD_CORE=100000: this process may run only on CPUs"),
            "{text}"
        );
    }

    #[test]
    fn auto_without_nic_picks_the_highest_allowed_cpu_outside_the_binding() {
        let p = choose(CoreChoice::Auto, None, 0).unwrap();
        let cpu = p.cpu.expect("some CPU is allowed");
        assert!(allowed().is_set(cpu));
        assert!(p.reason.contains("no NIC locality"), "{}", p.reason);
    }

    /// The host's ranks spread over the CPUs auto picks from, from the top:
    /// a host of unbound ranks does not queue every progress thread on one
    /// core. (Whether the set is the allowed CPUs or those outside this
    /// process's binding, both hold the CPUs counted here.)
    #[test]
    fn auto_spreads_the_hosts_ranks_over_the_cpus_from_the_top() {
        let pick = |i| choose(CoreChoice::Auto, None, i).unwrap().cpu.unwrap();
        let first = pick(0);
        assert!(allowed().is_set(first));
        let mut seen = vec![first];
        for i in 1..64 {
            let cpu = pick(i);
            assert!(allowed().is_set(cpu));
            if seen.contains(&cpu) {
                // The choices wrap around after as many ranks as CPUs.
                assert_eq!(cpu, first, "rank {i} wrapped to {cpu}, not to {first}");
                break;
            }
            assert!(
                cpu < *seen.last().unwrap(),
                "rank {i}: {cpu} after {seen:?}"
            );
            seen.push(cpu);
        }
        let spread_over = seen.len();
        assert_eq!(pick(spread_over), first);
        if allowed().weight().unwrap_or(1) >= 2 && thread_binding() == allowed() {
            assert!(spread_over >= 2, "an unbound process on {} CPUs", allowed());
            assert_ne!(pick(0), pick(1));
        }
    }

    #[test]
    fn auto_with_an_unknown_nic_falls_back_and_says_so() {
        let p = choose(CoreChoice::Auto, Some("0000:ff:1f.7"), 0).unwrap();
        assert!(p.cpu.is_some());
        assert!(p.reason.contains("not found by hwloc"), "{}", p.reason);
        let p = choose(CoreChoice::Auto, Some("garbage"), 0).unwrap();
        assert!(p.reason.contains("not a PCI bus id"), "{}", p.reason);
    }

    #[test]
    fn pinning_binds_the_calling_thread_to_that_cpu() {
        let target = allowed().last_set().map(usize::from).unwrap();
        let placement = choose(CoreChoice::Cpu(target as u32), None, 0).unwrap();
        let binding = std::thread::spawn(move || {
            pin_current_thread(&placement).unwrap();
            thread_binding()
        })
        .join()
        .unwrap();
        assert_eq!(binding.weight(), Some(1));
        assert!(binding.is_set(target));
    }
}
