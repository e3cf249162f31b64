//! One call that refreshes the places of all of one process's queued
//! waiters on a key (see `refresh_places.lua`), instead of one script per
//! waiter and second.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisError};

use super::scripts::{self, run_or_load};
use crate::backend::step::millis;
use crate::keys::LockKey;

/// The places to refresh: numbered `seq` (a release's grant may name it),
/// each lasting `place`, one per waiter as its owner token and the lease in
/// ms it asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlaceRefresh<'a> {
    pub(crate) seq: u64,
    pub(crate) place: Duration,
    pub(crate) waiters: &'a [(String, u64)],
}

/// What a refresh saw of the key.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct PlacesSeen {
    /// When the lock is free: the first live waiter, who may take it.
    pub(crate) first: Option<String>,
    /// The refreshed waiters that had no place left in the queue and do
    /// not hold the lock (they left, or were dropped as dead).
    pub(crate) missing: Vec<String>,
    /// The refreshed waiters that hold the lock now (a release granted it),
    /// each with the lock's remaining time on the server as the refresh ran.
    pub(crate) holding: Vec<(String, Duration)>,
}

impl PlacesSeen {
    /// Reads `refresh_places.lua`'s `{first, missing...}` reply, whose
    /// missing tokens that hold the lock come as `token PTTL`.
    fn from_reply(reply: Vec<String>) -> Self {
        let mut reply = reply.into_iter();
        let mut seen = PlacesSeen {
            first: reply.next().filter(|token| !token.is_empty()),
            ..PlacesSeen::default()
        };
        for entry in reply {
            let holding = entry.split_once(' ').and_then(|(token, pttl)| {
                let ms = pttl.parse::<u64>().ok()?;
                Some((token.to_owned(), Duration::from_millis(ms)))
            });
            match holding {
                Some(holding) => seen.holding.push(holding),
                None => seen.missing.push(entry),
            }
        }
        seen
    }
}

/// Runs `refresh_places.lua` once on one server.
pub(in crate::backend) async fn refresh(
    connection: &mut (impl ConnectionLike + Send),
    key: &LockKey,
    refresh: PlaceRefresh<'_>,
) -> Result<PlacesSeen, RedisError> {
    let mut invocation = scripts::REFRESH_PLACES.prepare_invoke();
    invocation
        .key(key.lock())
        .key(key.as_lock().queue)
        .key(key.as_lock().places)
        .arg(refresh.seq)
        .arg(millis(refresh.place));
    for (token, lease_ms) in refresh.waiters {
        invocation.arg(token).arg(lease_ms);
    }
    let call = Cmd::invoke_script(&invocation);
    let reply: Vec<String> = run_or_load(connection, &scripts::REFRESH_PLACES, call).await?;
    Ok(PlacesSeen::from_reply(reply))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::PlacesSeen;

    #[test]
    fn the_reply_names_the_first_waiter_of_a_free_lock_then_the_missing() {
        let reply = |parts: &[&str]| {
            PlacesSeen::from_reply(parts.iter().map(|part| (*part).to_owned()).collect())
        };
        assert_eq!(
            reply(&["", "a", "b"]),
            PlacesSeen {
                first: None,
                missing: vec!["a".into(), "b".into()],
                holding: vec![],
            }
        );
        assert_eq!(
            reply(&["f"]),
            PlacesSeen {
                first: Some("f".into()),
                missing: vec![],
                holding: vec![],
            }
        );
    }

    #[test]
    fn a_missing_waiter_that_holds_the_lock_comes_with_its_remaining_time() {
        let reply = PlacesSeen::from_reply(vec!["".into(), "a 1500".into(), "b".into()]);
        assert_eq!(
            reply,
            PlacesSeen {
                first: None,
                missing: vec!["b".into()],
                holding: vec![("a".into(), Duration::from_millis(1500))],
            }
        );
    }
}
