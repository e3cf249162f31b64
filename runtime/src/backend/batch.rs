//! Renewals in batches: the leases that fall due together are renewed with
//! one script call per server (`renew_batch.lua`) rather than one call each.
//! The watchdog asks [`Backend::renewal_batches`] how to split the leases it
//! renews at one moment, sends each batch with [`Backend::renew_batch`], and
//! applies each lease's own rules to the answer for that lease.
//!
//! A batch holds at most `MOST_PER_CALL` leases, so one script call keeps
//! Redis from other clients for a short while only (a few hundred
//! microseconds). On Redis Cluster the keys of one call must share a hash
//! slot: a batch holds the leases of one hash tag (every name of one lease
//! shares its tag, see `keys`), so a lease whose tag no other lease shares
//! is renewed alone, as before batching. Redlock sends each batch to every
//! node and keeps a lease iff a quorum renewed it; Sentinel sends it to the
//! current primary; the in-memory backend renews each lease in place.

use std::collections::HashMap;

use super::redis::RedisBackend;
use super::step::{Claim, Renewal};
use super::Backend;
use crate::LockError;

/// Most leases one script call renews.
pub(crate) const MOST_PER_CALL: usize = 200;

impl Backend {
    /// `claims` split into batches, as indices into `claims`: each batch at
    /// most [`MOST_PER_CALL`] leases of one length (one ttl goes with the
    /// whole call), and on Redis Cluster all of one hash tag. Every claim is
    /// in exactly one batch, in the order given within it.
    pub(crate) fn renewal_batches(&self, claims: &[Claim<'_>]) -> Vec<Vec<usize>> {
        let groups: Vec<Vec<usize>> = if self.needs_hash_tags() {
            let mut by_tag: HashMap<(&str, u64), Vec<usize>> = HashMap::new();
            for (index, claim) in claims.iter().enumerate() {
                let tag = hash_tag(claim.key.lock());
                by_tag.entry((tag, claim.ttl_ms)).or_default().push(index);
            }
            by_tag.into_values().collect()
        } else {
            let mut by_ttl: HashMap<u64, Vec<usize>> = HashMap::new();
            for (index, claim) in claims.iter().enumerate() {
                by_ttl.entry(claim.ttl_ms).or_default().push(index);
            }
            by_ttl.into_values().collect()
        };
        groups
            .iter()
            .flat_map(|group| group.chunks(MOST_PER_CALL).map(<[usize]>::to_vec))
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
