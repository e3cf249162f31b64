//! Loopback ports owned by servers of this process.

use std::collections::BTreeSet;
use std::net::TcpListener;
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

    /// Reserves `port` unless it is already reserved.
    fn claim(port: u16) -> Option<Self> {
        // Lazily built: dropping a reservation that was never claimed would
        // release another's port (and relock the set while it is held).
        let newly_reserved = reserved().insert(port);
        newly_reserved.then(|| PortReservation { port })
    }
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
    fn reservations_are_exclusive_until_dropped() {
        let first = PortReservation::free().unwrap();
        let port = first.port();
        assert_ne!(port, 0);
        assert!(PortReservation::exact(port).is_err());
        drop(first);
        assert_eq!(PortReservation::exact(port).unwrap().port(), port);
    }
}
