//! Loopback ports owned by servers of this process, and kept from the test
//! processes running beside it.
//!
//! A reservation is held twice: in this process's set, and as an exclusive
//! lock on a file named after the port in a directory every process on the
//! machine shares. The file lock keeps another test binary, started beside
//! this one, from starting a server on the port of a server this process
//! killed and will restart: a replica still trying to reach that address
//! would otherwise sync from the stranger and lose its data (seen once in
//! every few runs when the test binaries ran side by side). The OS drops the
//! lock when the process ends, however it ends.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::process::{addr, StartError};

/// Ports held by a live [`PortReservation`] in this process.
static RESERVED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
/// Ports asked of the OS at most before giving up on finding an unreserved one.
const MAX_PICKS: usize = 32;

/// Exclusive use of a loopback port among the servers of this process, from
/// creation until drop, so that a killed server's port is not handed to a
/// concurrently starting one before the killed server restarts on it.
#[derive(Debug)]
pub(crate) struct PortReservation {
    port: u16,
    /// Locked while this lives; unlocked when dropped.
    _lock: File,
}

impl PortReservation {
    /// Reserves a port that the OS reports free and no other reservation holds.
    pub(crate) fn free() -> Result<Self, StartError> {
        for _ in 0..MAX_PICKS {
            if let Some(reservation) = Self::claim(os_free_port()?) {
                return Ok(reservation);
            }
        }
        Err(StartError::Fatal(format!(
            "no unreserved loopback port after {MAX_PICKS} picks"
        )))
    }

    /// Reserves a port below the kernel's range of ephemeral ports (which it
    /// hands out for port 0), where nothing listens now: a port that stays
    /// free while its holder does not listen (a fault proxy's cut), because
    /// no process binding port 0 is given it and every test server asks
    /// for its port through a reservation. `free()` when the range leaves no
    /// room below it.
    pub(crate) fn unassignable() -> Result<Self, StartError> {
        let Some(first_ephemeral) = first_ephemeral_port() else {
            return Self::free();
        };
        let (low, high) = (UNASSIGNABLE_FLOOR, first_ephemeral);
        if high <= low {
            return Self::free();
        }
        let mut seed = std::hash::BuildHasher::hash_one(
            &std::collections::hash_map::RandomState::new(),
            std::process::id(),
        );
        for _ in 0..MAX_PICKS {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let offset = u16::try_from((seed >> 33) % u64::from(high - low)).unwrap_or(0);
            let port = low + offset;
            if TcpListener::bind(addr(port)).is_err() {
                continue;
            }
            if let Some(reservation) = Self::claim(port) {
                return Ok(reservation);
            }
        }
        Self::free()
    }

    /// Reserves `port`, which fails if another server of this process holds it.
    pub(crate) fn exact(port: u16) -> Result<Self, StartError> {
        Self::claim(port).ok_or_else(|| {
            StartError::Fatal(format!(
                "port {port} belongs to another RedisServer of this process"
            ))
        })
    }

    /// The reserved port.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Reserves `port` unless this process or another one reserved it.
    fn claim(port: u16) -> Option<Self> {
        // Lazily built: dropping a reservation that was never claimed would
        // release another's port (and relock the set while it is held).
        if !reserved().insert(port) {
            return None;
        }
        match machine_lock(port) {
            Some(lock) => Some(PortReservation { port, _lock: lock }),
            None => {
                reserved().remove(&port);
                None
            }
        }
    }
}

/// An exclusive lock on `port`'s file in the machine-wide directory, or
/// `None` when another process holds it (or the file cannot be opened, which
/// counts as held: another port will do).
fn machine_lock(port: u16) -> Option<File> {
    let directory = std::env::temp_dir().join("leasehold-testkit-ports");
    std::fs::create_dir_all(&directory).ok()?;
    let path: PathBuf = directory.join(port.to_string());
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .ok()?;
    file.try_lock().ok()?;
    Some(file)
}

impl Drop for PortReservation {
    fn drop(&mut self) {
        reserved().remove(&self.port);
    }
}

/// The reservation set; a panic elsewhere cannot leave it inconsistent.
fn reserved() -> MutexGuard<'static, BTreeSet<u16>> {
    RESERVED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Lowest port [`PortReservation::unassignable`] picks: above the ports
/// well-known services use.
const UNASSIGNABLE_FLOOR: u16 = 20_000;

/// The first port of the kernel's ephemeral range, if it says.
fn first_ephemeral_port() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

/// A port on which nothing listened a moment ago (the OS's pick for port 0).
fn os_free_port() -> Result<u16, StartError> {
    TcpListener::bind(addr(0))
        .and_then(|listener| listener.local_addr())
        .map(|bound| bound.port())
        .map_err(|e| StartError::Fatal(format!("cannot bind a loopback port: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unassignable_port_is_below_the_kernels_ephemeral_range_and_reserved() {
        let first_ephemeral = first_ephemeral_port().expect("Linux says its range");
        let reservation = PortReservation::unassignable().unwrap();
        let port = reservation.port();
        assert!(
            (UNASSIGNABLE_FLOOR..first_ephemeral).contains(&port),
            "{port} is not below the ephemeral range starting at {first_ephemeral}"
        );
        assert!(
            PortReservation::exact(port).is_err(),
            "reserved until dropped"
        );
    }

    #[test]
    fn reservations_are_exclusive_until_dropped() {
        let first = PortReservation::free().unwrap();
        let port = first.port();
        assert_ne!(port, 0);
        assert!(PortReservation::exact(port).is_err());
        drop(first);
        assert_eq!(PortReservation::exact(port).unwrap().port(), port);
    }

    #[test]
    fn a_port_locked_by_another_process_is_not_reserved() {
        let first = PortReservation::free().unwrap();
        let port = first.port();
        // What another process's reservation holds: the port's file, locked.
        drop(first);
        let other = machine_lock(port).expect("the port's file is free again");
        assert!(PortReservation::exact(port).is_err());
        assert!(
            !reserved().contains(&port),
            "a refused claim leaves no entry"
        );
        drop(other);
        assert!(PortReservation::exact(port).is_ok());
    }
}
