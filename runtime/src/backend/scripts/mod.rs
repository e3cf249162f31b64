//! The Lua scripts: each state change of a lock is one script, one round trip.
//! Hashed once per process; sent by EVALSHA with an EVAL fallback on NOSCRIPT.

use once_cell::sync::Lazy;
use redis::Script;

/// SET NX PX plus a fencing token above every earlier one, also after a
/// restart from stale data; see `acquire.lua`.
pub(crate) static ACQUIRE: Lazy<Script> = Lazy::new(|| Script::new(include_str!("acquire.lua")));
/// Compare-and-delete plus PUBLISH; see `release.lua`.
pub(crate) static RELEASE: Lazy<Script> = Lazy::new(|| Script::new(include_str!("release.lua")));
/// Compare-and-PEXPIRE; see `renew.lua`.
pub(crate) static RENEW: Lazy<Script> = Lazy::new(|| Script::new(include_str!("renew.lua")));
/// Raise a fencing counter to a floor and refresh its expiry (Redlock); see
/// `fence_floor.lua`.
pub(crate) static FENCE_FLOOR: Lazy<Script> =
    Lazy::new(|| Script::new(include_str!("fence_floor.lua")));
