//! Network faults between a lock holder and Redis, made by a `FaultProxy`
//! the holder reaches the server through.

use std::time::Duration;

use leasehold_testkit::FaultProxy;

/// A network fault between a holder and one Redis server.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// Refused and reset: every connection closed, new ones refused.
    Cut,
    /// Silent: connections stay open, every byte is dropped.
    Blackhole,
    /// Slow: every byte arrives two ttls late.
    DelayPastTtl,
}

impl Fault {
    /// Makes the fault on `proxy`, for holders whose lease lasts `ttl`.
    pub fn apply(self, proxy: &FaultProxy, ttl: Duration) {
        match self {
            Fault::Cut => proxy.cut(),
            Fault::Blackhole => proxy.blackhole(),
            Fault::DelayPastTtl => proxy.delay(2 * ttl),
        }
    }
}
