//! The Lua scripts: each state change of a lock that needs more than one
//! command is one script, one round trip (the uncontended acquisition is a
//! plain `SET NX PX`). Hashed once per process; sent by EVALSHA, and on
//! NOSCRIPT loaded (`SCRIPT LOAD`) and sent again. `prelude.lua` holds the
//! functions the scripts share (the server clock, the waiter queue and its
//! mark on the lock's value, a semaphore's expired leases); it is prepended
//! to each that uses them.

use once_cell::sync::Lazy;
use redis::Script;

/// Runs `$script` once on `$connection` with the keys and arguments given,
/// in order, and reads its reply as the caller's type: the one shape of
/// every script call.
macro_rules! run_script {
    ($script:expr, $connection:expr, keys [$($key:expr),* $(,)?], args [$($arg:expr),* $(,)?]) => {
        $script
            $(.key($key))*
            $(.arg($arg))*
            .invoke_async($connection)
            .await
    };
}
pub(crate) use run_script;

/// A script that publishes what it changed, in two forms: with `PUBLISH`
/// for one server, and with `SPUBLISH` for Redis Cluster, where the message
/// goes out on the key's sharded channel, which stays on its slot's nodes
/// instead of crossing the whole cluster.
pub(crate) struct Publishing {
    plain: Script,
    sharded: Script,
}

impl Publishing {
    /// `body` (after the shared functions when `prelude`), in both forms.
    fn new(body: &str, prelude: bool) -> Self {
        let form = |body: &str| {
            if prelude {
                with_prelude(body)
            } else {
                Script::new(body)
            }
        };
        Publishing {
            plain: form(body),
            sharded: form(&body.replace("'PUBLISH'", "'SPUBLISH'")),
        }
    }

    /// The form for a cluster (`sharded`) or for one server.
    pub(crate) fn on(&self, sharded: bool) -> &Script {
        if sharded {
            &self.sharded
        } else {
            &self.plain
        }
    }
}

/// SET NX PX in arrival order when waiters queue, joining the queue when
/// busy, or confirming a hand-off; see `acquire.lua`.
pub(crate) static ACQUIRE: Lazy<Script> = Lazy::new(|| with_prelude(include_str!("acquire.lua")));
/// Compare-and-delete, or hand-off to the first queued waiter, plus PUBLISH;
/// see `release.lua`.
pub(crate) static RELEASE: Lazy<Publishing> =
    Lazy::new(|| Publishing::new(include_str!("release.lua"), true));
/// What one lock looks like, read in one step for operators; see `inspect.lua`.
pub(crate) static INSPECT: Lazy<Script> = Lazy::new(|| with_prelude(include_str!("inspect.lua")));
/// What one semaphore or read/write lock looks like, read in one step for
/// operators; see `inspect_shared.lua`.
pub(crate) static INSPECT_SHARED: Lazy<Script> =
    Lazy::new(|| with_prelude(include_str!("inspect_shared.lua")));
/// Free a lock whoever holds it and raise its fencing counter; see
/// `force_release.lua`.
pub(crate) static FORCE_RELEASE: Lazy<Publishing> =
    Lazy::new(|| Publishing::new(include_str!("force_release.lua"), true));
/// Take every permit of a semaphore back whoever holds them; see
/// `semaphore_force_release.lua`.
pub(crate) static SEMAPHORE_FORCE_RELEASE: Lazy<Publishing> =
    Lazy::new(|| Publishing::new(include_str!("semaphore_force_release.lua"), true));
/// Free a read/write lock's writer and readers whoever they are and raise
/// its writers' fencing counter; see `rw_force_release.lua`.
pub(crate) static RW_FORCE_RELEASE: Lazy<Publishing> =
    Lazy::new(|| Publishing::new(include_str!("rw_force_release.lua"), true));
/// A fencing token above every earlier one of the key, also after a restart
/// from stale data, for the current holder only; see `fence.lua` and
/// `fence_issue.lua`.
pub(crate) static FENCE: Lazy<Script> = Lazy::new(|| {
    with_prelude(&[include_str!("fence_issue.lua"), include_str!("fence.lua")].concat())
});
/// `SET NX PX` and, when it takes the lock, its fencing token, in one call;
/// see `acquire_fenced.lua`. Without the prelude: it needs none of it.
pub(crate) static ACQUIRE_FENCED: Lazy<Script> = Lazy::new(|| {
    Script::new(
        &[
            include_str!("fence_issue.lua"),
            include_str!("acquire_fenced.lua"),
        ]
        .concat(),
    )
});
/// Compare-and-PEXPIRE; see `renew.lua`.
pub(crate) static RENEW: Lazy<Script> = Lazy::new(|| with_prelude(include_str!("renew.lua")));
/// Raise a fencing counter to a floor and refresh its expiry (Redlock); see
/// `fence_floor.lua`.
pub(crate) static FENCE_FLOOR: Lazy<Script> =
    Lazy::new(|| Script::new(include_str!("fence_floor.lua")));

/// One permit of a counting semaphore, if fewer than N are held; see
/// `semaphore_acquire.lua`.
pub(crate) static SEMAPHORE_ACQUIRE: Lazy<Script> =
    Lazy::new(|| with_prelude(include_str!("semaphore_acquire.lua")));
/// Compare-and-extend of one permit's or read lease's lease; see
/// `member_renew.lua`.
pub(crate) static MEMBER_RENEW: Lazy<Script> =
    Lazy::new(|| with_prelude(include_str!("member_renew.lua")));
/// Compare-and-remove of one permit or read lease, plus PUBLISH; see
/// `member_release.lua`.
pub(crate) static MEMBER_RELEASE: Lazy<Publishing> =
    Lazy::new(|| Publishing::new(include_str!("member_release.lua"), true));

/// A read lease of a read/write lock, unless a writer holds it or waits;
/// see `rw_read_acquire.lua`.
pub(crate) static RW_READ_ACQUIRE: Lazy<Script> =
    Lazy::new(|| with_prelude(include_str!("rw_read_acquire.lua")));
/// The write lease of a read/write lock, or a writer's intent; see
/// `rw_write_acquire.lua`.
pub(crate) static RW_WRITE_ACQUIRE: Lazy<Script> =
    Lazy::new(|| with_prelude(include_str!("rw_write_acquire.lua")));
/// Compare-and-delete of the write lease or withdrawal of a writer's
/// intent, plus PUBLISH; see `rw_write_release.lua`.
pub(crate) static RW_WRITE_RELEASE: Lazy<Publishing> =
    Lazy::new(|| Publishing::new(include_str!("rw_write_release.lua"), false));

/// Compare-and-extend of many leases of any kind in one call; see
/// `renew_batch.lua`.
pub(crate) static RENEW_BATCH: Lazy<Script> =
    Lazy::new(|| with_prelude(include_str!("renew_batch.lua")));

/// A script made of the shared functions followed by `body`.
fn with_prelude(body: &str) -> Script {
    Script::new(&[include_str!("prelude.lua"), body].concat())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_sharded_release_publishes_only_on_sharded_channels() {
        let plain = include_str!("release.lua");
        let sharded = plain.replace("'PUBLISH'", "'SPUBLISH'");
        assert_eq!(plain.matches("'PUBLISH'").count(), 3);
        assert_eq!(sharded.matches("'SPUBLISH'").count(), 3);
        assert!(!sharded.contains("'PUBLISH'"));
    }

    #[test]
    fn the_sharded_member_release_publishes_only_on_sharded_channels() {
        let plain = include_str!("member_release.lua");
        let sharded = plain.replace("'PUBLISH'", "'SPUBLISH'");
        assert_eq!(plain.matches("'PUBLISH'").count(), 1);
        assert_eq!(sharded.matches("'SPUBLISH'").count(), 1);
        assert!(!sharded.contains("'PUBLISH'"));
    }

    #[test]
    fn the_sharded_shared_releases_publish_only_on_sharded_channels() {
        for (plain, publishes) in [
            (include_str!("rw_write_release.lua"), 2),
            (include_str!("rw_force_release.lua"), 2),
            (include_str!("semaphore_force_release.lua"), 1),
        ] {
            let sharded = plain.replace("'PUBLISH'", "'SPUBLISH'");
            assert_eq!(plain.matches("'PUBLISH'").count(), publishes);
            assert_eq!(sharded.matches("'SPUBLISH'").count(), publishes);
            assert!(!sharded.contains("'PUBLISH'"));
        }
    }
}
