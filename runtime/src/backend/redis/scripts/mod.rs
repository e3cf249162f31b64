//! The Lua scripts: each state change of a lock that needs more than one
//! command is one script, one round trip (the uncontended acquisition is a
//! plain `SET NX PX`). Hashed once per process; sent by EVALSHA, and on
//! NOSCRIPT loaded and sent again in one pipeline (see [`run_or_load`]).
//! `prelude.lua` holds the functions the scripts share (the server clock,
//! the waiter queue and its mark on the lock's value, a semaphore's expired
//! leases); it is prepended to each that uses them.

use once_cell::sync::Lazy;
use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, RedisResult, Script, ServerErrorKind};

/// Runs `$script` once on `$connection` with the keys and arguments given,
/// in order, and reads its reply as the caller's type: the one shape of
/// every script call. The `EVALSHA` is written into one buffer sized up
/// front (redis-rs's invocation copies each key and argument into a buffer
/// of its own first: several allocations per call); a server that does not
/// know the script (`NOSCRIPT`: restarted, flushed) gets it through the
/// invocation, which loads it and sends it again.
macro_rules! run_script {
    ($script:expr, $connection:expr, keys [$($key:expr),* $(,)?], args [$($arg:expr),* $(,)?]) => {{
        let script: &::redis::Script = &$script;
        let mut evalsha = ::redis::Cmd::with_capacity(
            $crate::backend::redis::scripts::EVALSHA_ARGS,
            $crate::backend::redis::scripts::EVALSHA_SIZE,
        );
        let keys: usize = 0 $(+ { let _ = stringify!($key); 1 })*;
        evalsha.arg("EVALSHA").arg(script.get_hash()).arg(keys);
        $(evalsha.arg($key);)*
        $(evalsha.arg($arg);)*
        $crate::backend::redis::scripts::run_or_load($connection, script, evalsha).await
    }};
}
pub(crate) use run_script;

/// Runs `call`, an `EVALSHA` of `script`, on `connection`. A server that
/// does not know the script (`NOSCRIPT`: restarted, flushed, promoted) is
/// sent `SCRIPT LOAD` and the same call in one pipeline, which goes whole
/// to one server: on a cluster, the one that serves the call's key (and
/// after a redirection, whole to the next). A lone `SCRIPT LOAD` goes to
/// every primary the cluster client knows of, which just after a failover
/// may not yet include the promoted one, so its `EVALSHA` would answer
/// `NOSCRIPT` again.
pub(crate) async fn run_or_load<T: FromRedisValue>(
    connection: &mut (impl ConnectionLike + Send),
    script: &Script,
    call: Cmd,
) -> RedisResult<T> {
    match call.query_async(connection).await {
        Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            let (answer,): (T,) = redis::pipe()
                .add_command(Cmd::load_script(script))
                .ignore()
                .add_command(call)
                .query_async(connection)
                .await
                .map_err(unpipelined)?;
            Ok(answer)
        }
        answer => answer,
    }
}

/// The error of the first command of a pipeline that failed, as the
/// command alone would have failed, or `err` unchanged: the callers read an
/// ACL's refusal from it, and when `SCRIPT LOAD` is refused the `EVALSHA`
/// after it fails too (`NOSCRIPT`), which says nothing of the cause.
pub(crate) fn unpipelined(err: RedisError) -> RedisError {
    let failed = err.clone().into_server_errors();
    let first = failed
        .as_deref()
        .and_then(|failed| failed.iter().min_by_key(|(index, _)| *index));
    first.map_or(err, |(_, first)| first.clone().into())
}

/// Room for the arguments of a script call: `EVALSHA`, the hash, the key
/// count and up to 9 keys and arguments before its buffer grows.
pub(crate) const EVALSHA_ARGS: usize = 12;

/// Room for the bytes of a script call: the hash, three keys and a few
/// owner tokens and numbers before its buffer grows.
pub(crate) const EVALSHA_SIZE: usize = 384;

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

/// The uncontended attempt where a lock-delay is kept: the node's check,
/// then `SET NX PX`; see `try_set_checked.lua`. Its source: a backend sends
/// it under sessions (see `session`), which keep its check cheap.
pub(crate) static TRY_SET_CHECKED: Lazy<String> =
    Lazy::new(|| source_with_prelude(include_str!("lock/try_set_checked.lua")));

/// The line of `prelude.lua` that a session's script has with its nonce
/// (see `session`), in every script that checks the lock-delay.
pub(crate) const SESSION_LINE: &str = "local SESSION = ''\n";
/// SET NX PX in arrival order when waiters queue, joining the queue when
/// busy, or confirming a hand-off; see `acquire.lua`.
pub(crate) static ACQUIRE: Lazy<Script> = Lazy::new(|| Script::new(&ACQUIRE_SOURCE));
/// The source of [`ACQUIRE`], which a backend that keeps a lock-delay
/// sends under sessions (see `session`).
pub(crate) static ACQUIRE_SOURCE: Lazy<String> =
    Lazy::new(|| source_with_prelude(include_str!("lock/acquire.lua")));
/// Compare-and-delete, or hand-off to the first queued waiter, plus PUBLISH;
/// see `release.lua`.
pub(crate) static RELEASE: Lazy<Publishing> =
    Lazy::new(|| Publishing::new(include_str!("lock/release.lua"), true));
/// Refresh of the places of one process's queued waiters, all at once; see
/// `refresh_places.lua`.
pub(crate) static REFRESH_PLACES: Lazy<Script> =
    Lazy::new(|| with_prelude(include_str!("lock/refresh_places.lua")));
/// What one lock looks like, read in one step for operators; see `inspect.lua`.
pub(crate) static INSPECT: Lazy<Script> =
    Lazy::new(|| with_prelude(include_str!("lock/inspect.lua")));
/// What one semaphore or read/write lock looks like, read in one step for
/// operators; see `inspect_members.lua`.
pub(crate) static INSPECT_MEMBERS: Lazy<Script> =
    Lazy::new(|| with_prelude(include_str!("members/inspect_members.lua")));
/// Free a lock whoever holds it and raise its fencing counter; see
/// `force_release.lua`.
pub(crate) static FORCE_RELEASE: Lazy<Publishing> =
    Lazy::new(|| Publishing::new(include_str!("lock/force_release.lua"), true));
/// Take every permit of a semaphore back whoever holds them; see
/// `semaphore_force_release.lua`.
pub(crate) static SEMAPHORE_FORCE_RELEASE: Lazy<Publishing> =
    Lazy::new(|| Publishing::new(include_str!("semaphore/semaphore_force_release.lua"), true));
/// Free a read/write lock's writer and readers whoever they are and raise
/// its writers' fencing counter; see `rw_force_release.lua`.
pub(crate) static RW_FORCE_RELEASE: Lazy<Publishing> =
    Lazy::new(|| Publishing::new(include_str!("rwlock/rw_force_release.lua"), true));
/// A fencing token above every earlier one of the key, also after a restart
/// from stale data, for the current holder only; see `fence.lua` and
/// `issue_fence` in `prelude.lua`.
pub(crate) static FENCE: Lazy<Script> = Lazy::new(|| with_prelude(include_str!("lock/fence.lua")));
/// `SET NX PX` and, when it takes the lock, its fencing token, in one call;
/// see `acquire_fenced.lua`. With the prelude's lock-delay check only; sent
/// under sessions (see `session`).
pub(crate) static ACQUIRE_FENCED: Lazy<String> =
    Lazy::new(|| source_with_prelude(include_str!("lock/acquire_fenced.lua")));
/// Compare-and-PEXPIRE of a lock released within its `hold_at_least`, noted
/// in the lock's record; see `hold_down.lua`.
pub(crate) static HOLD_DOWN: Lazy<Script> =
    Lazy::new(|| with_prelude(include_str!("lock/hold_down.lua")));
/// Tells a primary the Sentinels replaced to grant, hand over and renew
/// nothing; see `depose.lua`.
pub(crate) static DEPOSE: Lazy<Script> = Lazy::new(|| with_prelude(include_str!("depose.lua")));
/// Compare-and-PEXPIRE; see `renew.lua`.
pub(crate) static RENEW: Lazy<Script> = Lazy::new(|| with_prelude(include_str!("lock/renew.lua")));
/// Raise a fencing counter to a floor and refresh its expiry (Redlock); see
/// `fence_floor.lua`.
pub(crate) static FENCE_FLOOR: Lazy<Script> =
    Lazy::new(|| Script::new(include_str!("lock/fence_floor.lua")));

/// One permit of a counting semaphore, if fewer than N are held; see
/// `semaphore_acquire.lua`. Sent under sessions (see `session`).
pub(crate) static SEMAPHORE_ACQUIRE: Lazy<String> =
    Lazy::new(|| source_with_prelude(include_str!("semaphore/semaphore_acquire.lua")));
/// Compare-and-extend of one permit's or read lease's lease; see
/// `member_renew.lua`.
pub(crate) static MEMBER_RENEW: Lazy<Script> =
    Lazy::new(|| with_prelude(include_str!("members/member_renew.lua")));
/// Compare-and-remove of one permit or read lease, plus PUBLISH; see
/// `member_release.lua`.
pub(crate) static MEMBER_RELEASE: Lazy<Publishing> =
    Lazy::new(|| Publishing::new(include_str!("members/member_release.lua"), true));

/// A read lease of a read/write lock, unless a writer holds it or waits;
/// see `rw_read_acquire.lua`. Sent under sessions (see `session`).
pub(crate) static RW_READ_ACQUIRE: Lazy<String> =
    Lazy::new(|| source_with_prelude(include_str!("rwlock/rw_read_acquire.lua")));
/// The write lease of a read/write lock, or a writer's intent; see
/// `rw_write_acquire.lua`. Sent under sessions (see `session`).
pub(crate) static RW_WRITE_ACQUIRE: Lazy<String> =
    Lazy::new(|| source_with_prelude(include_str!("rwlock/rw_write_acquire.lua")));
/// Compare-and-delete of the write lease or withdrawal of a writer's
/// intent, plus PUBLISH; see `rw_write_release.lua`.
pub(crate) static RW_WRITE_RELEASE: Lazy<Publishing> =
    Lazy::new(|| Publishing::new(include_str!("rwlock/rw_write_release.lua"), false));

/// Compare-and-extend of many leases of any kind in one call; see
/// `renew_batch.lua`.
pub(crate) static RENEW_BATCH: Lazy<Script> =
    Lazy::new(|| with_prelude(include_str!("renew_batch.lua")));

/// A script made of `body` and the shared functions it uses (see
/// [`prelude_for`]): before it, or where it has the line
/// [`PRELUDE_HERE`], so that a fast path above that line returns before
/// any of them is built.
fn with_prelude(body: &str) -> Script {
    Script::new(&source_with_prelude(body))
}

/// The source of [`with_prelude`]'s script.
fn source_with_prelude(body: &str) -> String {
    let prelude = prelude_for(body);
    let (head, tail) = body
        .split_once(PRELUDE_HERE)
        .map_or(("", body), |(head, tail)| (head, tail));
    [head, prelude.as_str(), tail].concat()
}

/// The line of a script where its shared functions are to be defined.
const PRELUDE_HERE: &str = "-- (the shared functions of prelude.lua are defined here)\n";

/// The definitions of `prelude.lua` that `body` uses, with those they use
/// in turn, in the prelude's order (each after what it calls). Lua builds
/// every function a script defines on each call, so a script defines only
/// what it needs: a release that carried the whole prelude spent about as
/// long building it as running.
///
/// The prelude is read as paragraphs (split at blank lines), each one
/// definition (`local function name(` or `local NAME =`) after its
/// comment; a paragraph without one (the file's own comment) is left out.
fn prelude_for(body: &str) -> String {
    let definitions: Vec<(&str, &str)> = include_str!("prelude.lua")
        .split("\n\n")
        .filter_map(|paragraph| Some((defined_name(paragraph)?, paragraph)))
        .collect();
    let mut needed = vec![false; definitions.len()];
    // Each pass adds at least one definition, or ends.
    for _ in 0..=definitions.len() {
        let users: Vec<&str> = std::iter::once(body)
            .chain(
                definitions
                    .iter()
                    .zip(&needed)
                    .filter(|&(_, &needed)| needed)
                    .map(|(&(_, text), _)| text),
            )
            .collect();
        let mut added = false;
        for (index, &(name, _)) in definitions.iter().enumerate() {
            if !needed[index] && users.iter().any(|text| mentions(text, name)) {
                needed[index] = true;
                added = true;
            }
        }
        if !added {
            break;
        }
    }
    let mut prelude = String::new();
    for (&(_, text), _) in definitions.iter().zip(needed).filter(|(_, needed)| *needed) {
        prelude.push_str(text);
        prelude.push_str("\n\n");
    }
    prelude
}

/// The name a prelude paragraph defines at its top level, if any.
fn defined_name(paragraph: &str) -> Option<&str> {
    paragraph.lines().find_map(|line| {
        let rest = line.strip_prefix("local ")?;
        let rest = rest.strip_prefix("function ").unwrap_or(rest);
        let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
        (end > 0).then(|| &rest[..end])
    })
}

/// Whether `text` names `name` as a whole word (not inside a longer name).
fn mentions(text: &str, name: &str) -> bool {
    let word_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(word_char) && !after.is_some_and(word_char)
    })
}

#[cfg(test)]
mod tests {
    use super::prelude_for;

    #[test]
    fn a_script_gets_the_shared_functions_it_calls_and_theirs_only() {
        let release = prelude_for(include_str!("lock/release.lua"));
        for needed in [
            "local function holder_of(",
            "local WAITERS_MARK",
            "local function first_live_waiter(",
            "local function place_of(",
            "local function clock_us(",
        ] {
            assert!(release.contains(needed), "release.lua lacks {needed}");
        }
        for unused in [
            "drop_expired_permits",
            "raise_fence",
            "expire_with_last_permit",
        ] {
            assert!(!release.contains(unused), "release.lua carries {unused}");
        }
        assert!(
            release.find("local function clock_us(")
                < release.find("local function first_live_waiter("),
            "a function comes after what it calls"
        );
        assert_eq!(prelude_for("return 1"), "");
    }

    #[test]
    fn the_release_deletes_an_unmarked_lock_before_it_builds_the_shared_functions() {
        let release = super::source_with_prelude(include_str!("lock/release.lua"));
        let fast_path = release.find("redis.call('DEL'").expect("a DEL");
        let first_function = release.find("local function").expect("a function");
        assert!(fast_path < first_function);
        let renew = super::source_with_prelude(include_str!("lock/renew.lua"));
        assert!(
            renew.find("local function") < renew.find("held_by(KEYS"),
            "without the line, the shared functions come first"
        );
    }

    #[test]
    fn every_prelude_paragraph_defines_one_name() {
        let prelude = include_str!("prelude.lua");
        let top_level = prelude
            .lines()
            .filter(|line| line.starts_with("local "))
            .count();
        let defined = prelude
            .split("\n\n")
            .filter_map(super::defined_name)
            .count();
        assert_eq!(
            defined, top_level,
            "a paragraph of prelude.lua defines two names: keep a blank line between definitions"
        );
    }
    #[test]
    fn the_sharded_release_publishes_only_on_sharded_channels() {
        let plain = include_str!("lock/release.lua");
        let sharded = plain.replace("'PUBLISH'", "'SPUBLISH'");
        assert_eq!(plain.matches("'PUBLISH'").count(), 3);
        assert_eq!(sharded.matches("'SPUBLISH'").count(), 3);
        assert!(!sharded.contains("'PUBLISH'"));
    }

    #[test]
    fn the_sharded_member_release_publishes_only_on_sharded_channels() {
        let plain = include_str!("members/member_release.lua");
        let sharded = plain.replace("'PUBLISH'", "'SPUBLISH'");
        assert_eq!(plain.matches("'PUBLISH'").count(), 1);
        assert_eq!(sharded.matches("'SPUBLISH'").count(), 1);
        assert!(!sharded.contains("'PUBLISH'"));
    }

    #[test]
    fn the_sharded_shared_releases_publish_only_on_sharded_channels() {
        for (plain, publishes) in [
            (include_str!("rwlock/rw_write_release.lua"), 2),
            (include_str!("rwlock/rw_force_release.lua"), 2),
            (include_str!("semaphore/semaphore_force_release.lua"), 1),
        ] {
            let sharded = plain.replace("'PUBLISH'", "'SPUBLISH'");
            assert_eq!(plain.matches("'PUBLISH'").count(), publishes);
            assert_eq!(sharded.matches("'SPUBLISH'").count(), publishes);
            assert!(!sharded.contains("'PUBLISH'"));
        }
    }
}
