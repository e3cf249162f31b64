//! What each kind allows, described once beside `kind`: the options it
//! takes, the fencing tokens it carries, the backends that can hold it, how
//! it shares its key with this process's other holders, and how a nested
//! acquisition re-enters it.

use std::sync::Arc;

use crate::kinds::kind::{Kind, Side};
use crate::lease::guard::LockGuard;
use crate::lease::seats::Share;
use crate::lease::Lease;
use crate::options::MinReplicas;
use crate::{LockError, LockOptions};

impl Kind {
    /// Whether Redlock can hold it: only plain locks, as a semaphore's
    /// holders or a read/write lock's readers would be counted by each node
    /// on its own. The refusal, naming the fix, otherwise.
    pub(crate) fn on_redlock(self, user: &str) -> Result<(), LockError> {
        let why = match self {
            Kind::Lock => return Ok(()),
            Kind::Semaphore { .. } => format!(
                "semaphore `{user}`: Redlock cannot bound the holders of a semaphore, as each node counts its own; use a single Redis server, Sentinel or a Redis Cluster for semaphores (a manager of its own if your locks stay on Redlock)"
            ),
            Kind::ReadWrite(_) => format!(
                "read/write lock `{user}`: Redlock does not support read/write locks; use a single Redis server, Sentinel or a Redis Cluster for read/write locks (a manager of its own if your locks stay on Redlock)"
            ),
        };
        Err(LockError::InvalidOptions(why))
    }

    /// `Err(InvalidOptions)` unless its lease carries fencing tokens:
    /// readers carry none.
    pub(crate) fn carries_fence(self, user: &str) -> Result<(), LockError> {
        if self == Kind::ReadWrite(Side::Read) {
            return Err(LockError::InvalidOptions(format!(
                "read/write lock `{user}`: readers carry no fencing token (only writers change what the lock protects); ask for it under the write lock"
            )));
        }
        Ok(())
    }

    /// The ttl in ms once `options` are known to suit this kind, and the
    /// replicas a lock must reach.
    pub(crate) fn checked(
        self,
        user: &str,
        options: &LockOptions,
    ) -> Result<(u64, Option<MinReplicas>), LockError> {
        let refuse = |what: &str, why: &str| {
            Err(LockError::InvalidOptions(format!("{what} `{user}`: {why}")))
        };
        let (kind, kinds) = match self {
            Kind::Lock => {
                let ttl_ms = options.ttl_millis()?;
                let replicas = options.replication()?;
                options.hold()?;
                return Ok((ttl_ms, replicas));
            }
            Kind::Semaphore { permits: 0 } => {
                return refuse(
                    "semaphore",
                    "permits must be at least 1: a semaphore of 0 permits admits nobody",
                )
            }
            Kind::Semaphore { .. } => ("semaphore", "permits"),
            Kind::ReadWrite(_) => ("read/write lock", "read/write locks"),
        };
        if options.fenced {
            match self {
                Kind::ReadWrite(Side::Read) => return refuse(kind, "readers carry no fencing token; leave `fenced` off (writers' tokens are above every earlier writer's)"),
                Kind::Semaphore { .. } => return refuse(kind, "permits carry no fencing token; leave `fenced` off"),
                _ => {}
            }
        }
        let unsupported = [
            ("min_replicas", options.min_replicas.is_some()),
            ("hold_at_least", options.hold_at_least.is_some()),
        ];
        if let Some((option, _)) = unsupported.iter().find(|(_, set)| *set) {
            let why = format!("`{option}` is not supported for {kinds}; leave it off");
            return refuse(kind, &why);
        }
        Ok((options.ttl_millis()?, None))
    }

    /// How its lease shares the key with this process's other holders.
    pub(crate) fn share(self) -> Share {
        match self {
            Kind::Lock | Kind::ReadWrite(Side::Write) => Share::Alone,
            Kind::ReadWrite(Side::Read) => Share::Reader,
            Kind::Semaphore { permits } => Share::OneOf(permits),
        }
    }

    /// The guard of a nested acquisition of a key whose `lease` the running
    /// scope holds: the shared lease, unless the kinds do not allow it.
    pub(crate) fn reenter(
        self,
        user: &str,
        options: &LockOptions,
        lease: Arc<Lease>,
    ) -> Result<LockGuard, LockError> {
        let key = user.to_owned();
        match (self, lease.key.kind) {
            // Another permit, not this one: the caller may itself keep the
            // last permit from it.
            (Kind::Semaphore { .. }, _) => return Err(LockError::AlreadyHeld { key }),
            (Kind::ReadWrite(Side::Write), Kind::ReadWrite(Side::Read)) => {
                return Err(LockError::UpgradeRefused { key })
            }
            _ => {}
        }
        if !options.reentrant {
            return Err(LockError::AlreadyHeld { key });
        }
        if lease.is_lost() {
            tracing::warn!(
                key,
                "re-entry refused: the enclosing scope's lease on this key is lost"
            );
            return Err(LockError::LeaseLost { key });
        }
        tracing::debug!(key, kind = self.name(), "re-entered by its own scope");
        Ok(LockGuard::reentered(lease))
    }
}
