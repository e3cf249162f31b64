//! Renewals of a batch of leases on one server in one script call
//! (`renew_batch.lua`); see `backend/batch.rs` for how the leases due at
//! one moment are split into batches.

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, RedisError};

use super::scripts::{self, run_or_load};
use crate::backend::step::Claim;
use crate::kinds::kind::Holding;

/// Runs `renew_batch.lua` once on one server for claims of one ttl: for
/// each claim, in order, whether its lease was still ours there and is
/// now extended; none is while the node is in its lock-delay of
/// `lock_delay_ms` (0: none). The call is written straight into one command
/// buffer (no allocation per argument), and the script loaded when the
/// server does not know it yet.
pub(in crate::backend) async fn renew_each(
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
    let answers: Vec<u8> = run_or_load(connection, script, call).await?;
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
