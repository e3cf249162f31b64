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
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind};

use super::redis::scripts;
use super::{Backend, Claim, RedisBackend};
use crate::kinds::kind::Holding;
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

/// Whether a lease is a plain key (a lock's or a writer's) rather than a
/// member of a lease set (a semaphore's permit or a read lease).
fn is_plain(claim: &Claim<'_>) -> bool {
    claim.key.kind.holding() == Holding::Key
}

/// The key a lease lives at: its own, or its lease set.
fn leased_name<'a>(claim: &Claim<'a>) -> &'a str {
    claim.key.lease_name()
}

/// The claims in the order `renew_batch.lua` takes them: plain leases
/// first, then members of lease sets, each in the order given.
fn plain_first<'c, 'a>(claims: &'c [Claim<'a>]) -> impl Iterator<Item = &'c Claim<'a>> {
    let members = claims.iter().filter(|claim| !is_plain(claim));
    claims.iter().filter(|claim| is_plain(claim)).chain(members)
}

/// Runs `renew_batch.lua` once on one server for claims of one ttl: for
/// each claim, in order, whether its lease was still ours there and is
/// now extended; none is while the node is in its lock-delay of
/// `lock_delay_ms` (0: none). The call is written straight into one command
/// buffer (no allocation per argument), and the script loaded when the
/// server does not know it yet.
pub(super) async fn renew_each(
    connection: &mut (impl ConnectionLike + Send),
    claims: &[Claim<'_>],
    lock_delay_ms: u64,
) -> Result<Vec<bool>, RedisError> {
    let Some(first) = claims.first() else {
        return Ok(Vec::new());
    };
    if claims.iter().any(|claim| claim.ttl_ms != first.ttl_ms) {
        return Err(RedisError::from((
            ErrorKind::Client,
            "a batch of renewals mixed lease lengths; renew_batch.lua takes one",
        )));
    }
    let plain = claims.iter().filter(|claim| is_plain(claim)).count();
    let script = &*scripts::RENEW_BATCH;
    let names: usize = claims
        .iter()
        .map(|claim| leased_name(claim).len() + claim.token.as_str().len())
        .sum();
    let mut call = Cmd::with_capacity(2 * claims.len() + 7, names + 128);
    call.arg("EVALSHA")
        .arg(script.get_hash())
        .arg(claims.len() + 1);
    for claim in plain_first(claims) {
        call.arg(leased_name(claim));
    }
    call.arg(first.key.node()).arg(first.ttl_ms).arg(plain);
    for claim in plain_first(claims) {
        call.arg(claim.token.as_str());
    }
    call.arg(lock_delay_ms);
    let answers: Vec<u8> = match call.query_async(connection).await {
        Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.load_async(connection).await?;
            call.query_async(connection).await?
        }
        answered => answered?,
    };
    if answers.len() != claims.len() {
        return Err(RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "renew_batch.lua answered for a different number of leases than it was sent",
        )));
    }
    let (plain_answers, member_answers) = answers.split_at(plain);
    let (mut plain_answers, mut member_answers) = (plain_answers.iter(), member_answers.iter());
    Ok(claims
        .iter()
        .map(|claim| {
            let answer = if is_plain(claim) {
                plain_answers.next()
            } else {
                member_answers.next()
            };
            answer == Some(&b'1')
        })
        .collect())
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
