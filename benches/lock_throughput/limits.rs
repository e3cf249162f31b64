//! What every subject's cycle asks for: the lease of each lock and the
//! longest wait for a busy one, the same for ours, raw and the peers.

use std::time::Duration;

/// Lease of every lock taken here.
pub const TTL: Duration = Duration::from_secs(10);
/// Longest wait for a busy lock.
pub const WAIT: Duration = Duration::from_secs(10);
