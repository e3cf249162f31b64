//! The Lua scripts: each state change of a lock is one script, one round trip.
//! Hashed once per process; sent by EVALSHA with an EVAL fallback on NOSCRIPT.
//! `prelude.lua` holds the functions acquire and release share (fencing
//! tokens, the waiter queue); it is prepended to both.

use once_cell::sync::Lazy;
use redis::Script;

/// SET NX PX plus a fencing token above every earlier one, also after a
/// restart from stale data, in arrival order when waiters queue; see
/// `acquire.lua`.
pub(crate) static ACQUIRE: Lazy<Script> = Lazy::new(|| with_prelude(include_str!("acquire.lua")));
/// Compare-and-delete, or hand-off to the first queued waiter, plus PUBLISH;
/// see `release.lua`.
pub(crate) static RELEASE: Lazy<Script> = Lazy::new(|| with_prelude(include_str!("release.lua")));
/// Compare-and-PEXPIRE; see `renew.lua`.
pub(crate) static RENEW: Lazy<Script> = Lazy::new(|| Script::new(include_str!("renew.lua")));
/// Raise a fencing counter to a floor and refresh its expiry (Redlock); see
/// `fence_floor.lua`.
pub(crate) static FENCE_FLOOR: Lazy<Script> =
    Lazy::new(|| Script::new(include_str!("fence_floor.lua")));

/// A script made of the shared functions followed by `body`.
fn with_prelude(body: &str) -> Script {
    Script::new(&[include_str!("prelude.lua"), body].concat())
}
