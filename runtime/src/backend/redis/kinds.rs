//! Which script each kind's steps run on a Redis server: the one place the
//! Redis backend tells kinds apart. A lock takes with `SET NX PX` or
//! `acquire.lua` and releases with `release.lua` (which hands it over) or
//! the server's compare-and-delete; a permit takes with
//! `semaphore_acquire.lua`; a read or write lease with `rw_read_acquire.lua`
//! or `rw_write_acquire.lua`; permits and readers give their member lease
//! back with `member_release.lua`, a writer with `rw_write_release.lua`.
//! Operators read a lock with `inspect.lua` and the others with
//! `inspect_members.lua`, and free each with its own forced release.

use redis::RedisError;

use super::admin;
use super::commands::release as release_lock;
use super::connection::lock_error;
use super::rwlock::{acquire_rw, release_write};
use super::semaphore::{acquire_permit, release_member};
use super::topology::Commands;
use super::{RedisBackend, GRANT_WINDOW};
use crate::backend::state::{Evicted, State};
use crate::backend::step::{Attempt, Claim, Taking};
use crate::keys::LockKey;
use crate::kinds::kind::{Kind, Side};
use crate::token::OwnerToken;
use crate::LockError;

impl RedisBackend {
    /// One attempt to take the lease of `claim` with its kind's script (see
    /// [`Backend::take`](crate::backend::Backend::take)). An attempt whose
    /// answer was lost is undone in the background.
    pub(crate) async fn take(
        &self,
        claim: Claim<'_>,
        taking: Taking,
    ) -> Result<Attempt, LockError> {
        // A lock's attempt opens its own connection handle and check (and
        // may be a plain `SET NX`): none is made for it here.
        let reply = match claim.key.kind {
            Kind::Lock => return self.take_lock(claim, taking).await,
            Kind::Semaphore { permits } => {
                let check = self.node_check(claim.ttl_ms);
                let script = &self.semaphore_acquire;
                let connection = &mut self.commands.clone();
                acquire_permit(connection, script, claim, (permits, check)).await
            }
            Kind::ReadWrite(side) => {
                let check = self.node_check(claim.ttl_ms);
                let script = match side {
                    Side::Read => &self.rw_read_acquire,
                    Side::Write => &self.rw_write_acquire,
                };
                let connection = &mut self.commands.clone();
                acquire_rw(connection, script, claim, (taking.place, check)).await
            }
        };
        reply.map_err(|err| self.undone_if_unanswered(&self.commands, claim, lock_error(err)))
    }

    /// Gives back the lease of `token` on `key`. A lock is released with the
    /// server's compare-and-delete where it has one (see `native`), except
    /// while this process has waiters queued on the key, whose mark on the
    /// lock's value would make it fail, and for a lock taken `after_wait`,
    /// whose record of the grant only the script clears.
    pub(crate) async fn release(
        &self,
        key: &LockKey,
        token: &OwnerToken,
        after_wait: bool,
    ) -> Result<bool, LockError> {
        let native = self
            .native
            .release()
            .filter(|_| key.kind == Kind::Lock && !after_wait && self.local_waiters(key) == 0);
        self.on_commands(async |commands, sharded| {
            if let Some(how) = native {
                let released = how.run(commands, key, token).await;
                if let Some(answer) = self.native.settled(released) {
                    return answer;
                }
            }
            Self::release_on(commands, key, token, (sharded, self.lock_delay_ms(0))).await
        })
        .await
    }

    /// Gives back the lease of `token` on `key` with its kind's script, on
    /// `connection`: a lock is handed to the first queued waiter for
    /// [`GRANT_WINDOW`]; a permit or a read lease leaves its set; a write
    /// lease goes (and a waiting writer's intent). `sharded`: the release
    /// message goes out by SPUBLISH (Redis Cluster).
    pub(super) async fn release_on(
        connection: &mut Commands,
        key: &LockKey,
        token: &OwnerToken,
        (sharded, lock_delay_ms): (bool, u64),
    ) -> Result<bool, RedisError> {
        match key.kind {
            Kind::Lock => {
                let handing = (GRANT_WINDOW, lock_delay_ms);
                release_lock(connection, key, token, handing, sharded).await
            }
            Kind::ReadWrite(Side::Write) => release_write(connection, key, token, sharded).await,
            Kind::ReadWrite(Side::Read) | Kind::Semaphore { .. } => {
                release_member(connection, key.members(), token, sharded).await
            }
        }
    }

    /// What the server holds for `key` now, as its kind keeps it.
    pub(crate) async fn inspect(&self, key: &LockKey) -> Result<State, LockError> {
        self.on_commands(async |commands, _| match key.kind {
            Kind::Lock => admin::inspect_lock(commands, key).await,
            Kind::ReadWrite(_) => admin::inspect_members(commands, key, true).await,
            Kind::Semaphore { .. } => admin::inspect_members(commands, key, false).await,
        })
        .await
    }

    /// Frees `key` whoever holds it, with its kind's forced release.
    pub(crate) async fn force(&self, key: &LockKey) -> Result<Evicted, LockError> {
        self.on_commands(async |commands, sharded| match key.kind {
            Kind::Lock => admin::force_lock(commands, key, sharded).await,
            Kind::ReadWrite(_) => admin::force_rw(commands, key, sharded).await,
            Kind::Semaphore { .. } => admin::force_semaphore(commands, key, sharded).await,
        })
        .await
    }
}
