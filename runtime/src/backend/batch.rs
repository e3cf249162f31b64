//! Renewals in batches: the leases that fall due together are renewed with
//! one script call per server (`renew_batch.lua`) rather than one call each.
//! The watchdog asks [`Backend::renewal_batches`] how to split the leases it
//! renews at one moment, sends each batch with [`Backend::renew_batch`], and
//! applies each lease's own rules to the answer for that lease.
//!
//! A batch holds at most [`MOST_PER_CALL`] leases, so one script call keeps
//! Redis from other clients for a short while only (a few hundred
//! microseconds). On Redis Cluster the keys of one call must share a hash
//! slot: a batch holds the leases of one hash tag (every name of one lease
//! shares its tag, see `keys`), so a lease whose tag no other lease shares
//! is renewed alone, as before batching. Redlock sends each batch to every
//! node and keeps a lease iff a quorum renewed it; Sentinel sends it to the
//! current primary; the in-memory backend renews each lease in place.

use std::collections::HashMap;

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError};

use super::scripts;
use super::{Backend, Claim, RedisBackend};
use crate::keys::KeyKind;
use crate::LockError;

/// Most leases one script call renews.
pub(crate) const MOST_PER_CALL: usize = 200;

/// What a batch said of one of its leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Still ours, and extended by its ttl.
    Renewed,
    /// No longer ours: expired, or taken over.
    Refused,
    /// Not known either way (Redlock: no quorum of nodes agreed on it).
    Unknown,
}

impl Renewal {
    /// The answer of one server (or one Redlock node) for one lease.
    pub(super) fn from_server(renewed: bool) -> Self {
        if renewed {
            Renewal::Renewed
        } else {
            Renewal::Refused
        }
    }
}

impl Backend {
    /// `claims` split into batches, as indices into `claims`: each batch at
    /// most [`MOST_PER_CALL`] leases, and on Redis Cluster all of one hash
    /// tag. Every claim is in exactly one batch, in the order given within
    /// it.
    pub(crate) fn renewal_batches(&self, claims: &[Claim<'_>]) -> Vec<Vec<usize>> {
        let indices = 0..claims.len();
        if !self.needs_hash_tags() {
            let all: Vec<usize> = indices.collect();
            return all.chunks(MOST_PER_CALL).map(<[usize]>::to_vec).collect();
        }
        let mut by_tag: HashMap<&str, Vec<usize>> = HashMap::new();
        for index in indices {
            by_tag
                .entry(hash_tag(&claims[index].key.lock))
                .or_default()
                .push(index);
        }
        by_tag
            .into_values()
            .flat_map(|tagged| {
                tagged
                    .chunks(MOST_PER_CALL)
                    .map(<[usize]>::to_vec)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Renews one batch of [`renewal_batches`](Self::renewal_batches), one
    /// script call per server: for each claim, in order, whether it is still
    /// ours (and extended by its ttl). An error says nothing of any of them.
    pub(crate) async fn renew_batch(
        &self,
        claims: &[Claim<'_>],
    ) -> Result<Vec<Renewal>, LockError> {
        dispatch!(self,
            server => server.renew_batch(claims).await,
            memory => memory.renew_batch(claims))
    }
}

/// The `{tag}` a hash-tagged name starts with, which decides its slot; the
/// whole name when it has none.
fn hash_tag(name: &str) -> &str {
    match name.find('}') {
        Some(end) if name.starts_with('{') => &name[..=end],
        _ => name,
    }
}

/// Runs `renew_batch.lua` once on one server: for each claim, in order,
/// whether its lease was still ours there and is now extended.
pub(super) async fn renew_each(
    connection: &mut (impl ConnectionLike + Send),
    claims: &[Claim<'_>],
) -> Result<Vec<bool>, RedisError> {
    let mut invocation = scripts::RENEW_BATCH.prepare_invoke();
    for claim in claims {
        let Claim { key, token, ttl_ms } = *claim;
        let (name, kind) = match key.kind {
            KeyKind::Lock | KeyKind::Write => (&key.lock, "k"),
            KeyKind::Semaphore => (&key.lock, "m"),
            KeyKind::Read => (&key.readers, "m"),
        };
        invocation
            .key(name)
            .arg(token.as_str())
            .arg(ttl_ms)
            .arg(kind);
    }
    let renewed: Vec<i64> = invocation.invoke_async(connection).await?;
    if renewed.len() != claims.len() {
        return Err(RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "renew_batch.lua answered for a different number of leases than it was sent",
        )));
    }
    Ok(renewed.into_iter().map(|renewed| renewed == 1).collect())
}

#[cfg(test)]
mod tests {
    use super::hash_tag;

    #[test]
    fn a_hash_tag_is_the_braced_prefix() {
        assert_eq!(hash_tag("{a1b2}locks:k"), "{a1b2}");
        assert_eq!(hash_tag("locks:k"), "locks:k");
        assert_eq!(hash_tag("locks:{k}"), "locks:{k}");
    }
}
