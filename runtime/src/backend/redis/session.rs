//! The sessions a backend sends its lock-delay checking scripts under, so
//! that their check can skip `INFO` (see `SESSION` and `node_delay` in
//! `scripts/prelude.lua`).
//!
//! A session is a random nonce written into the script's text: its hash
//! names a script that exists in one server process only, the one that ran
//! it first. From Redis 7 on (and on Valkey) the script cache is the
//! process's own: no replica, snapshot or AOF carries it, and a restart,
//! `SCRIPT FLUSH` or eviction empties it (before, a server gets no session,
//! see `session_line`). So
//! the text of a session is sent once, ever: loaded and first run by one
//! pipeline, on one link to one process (`SCRIPT LOAD` and `EVALSHA`, the
//! commands a service's ACL allows; `EVAL` would do the same). Later calls
//! send `EVALSHA`, which runs it only where it was loaded; a server that
//! does not know it (`NOSCRIPT`) gets a new session's text, never the old
//! one again (which, sent again, could land on a second process after a
//! reconnection).
//!
//! Each session adds one script to the server's script cache; a backend
//! starts one per script sent under sessions (the uncontended and the
//! queueing attempt) at its first call and after each `NOSCRIPT` (a
//! restart, a failover, a flush), so the cache grows by a few KiB per
//! backend and per such event, which Redis before 7.4 keeps until
//! `SCRIPT FLUSH` or a restart.

use std::sync::{PoisonError, RwLock};

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, ServerErrorKind};

use super::scripts::{run_or_load, unpipelined, EVALSHA_ARGS, EVALSHA_SIZE, SESSION_LINE};

/// One script sent under sessions: the text of the one it sends now, and
/// how to make the next.
pub(crate) struct SessionScript {
    /// The script's source, with the prelude's `local SESSION = ''` line.
    source: &'static str,
    /// The hash of the session's script the server ran, if any yet, and
    /// how many sessions were loaded before it.
    loaded: RwLock<Option<(u64, String)>>,
    /// Held while a new session is loaded, so that the calls that find
    /// none (the first ones, or those in flight at a restart) load one
    /// between them, not one each.
    loading: tokio::sync::Mutex<()>,
    /// `source` as it is (no session), sent where sessions are not used
    /// (see [`without_sessions`](Self::without_sessions)).
    plain: Option<redis::Script>,
}

/// What running the loaded session gave: its answer, or none because no
/// session is loaded or the server did not know it (the session's number).
enum Loaded<T> {
    Answered(RedisResult<T>),
    Unknown(Option<u64>),
}

impl SessionScript {
    /// The script of `source` (built with the prelude), no session sent yet.
    pub(crate) fn new(source: &'static str) -> Self {
        debug_assert!(source.contains(SESSION_LINE), "a script without SESSION");
        SessionScript {
            source,
            loaded: RwLock::new(None),
            loading: tokio::sync::Mutex::new(()),
            plain: None,
        }
    }

    /// The script of `source`, always sent as it is, with no session, so
    /// its check reads `INFO` each time: for a Redis Cluster, where a
    /// session's `SCRIPT LOAD` goes to every primary but not in step with
    /// the `EVALSHA` that follows it on one of them (its session would be
    /// unknown there about once in five calls, and a new one loaded).
    pub(crate) fn without_sessions(source: &'static str) -> Self {
        SessionScript {
            plain: Some(redis::Script::new(source)),
            ..SessionScript::new(source)
        }
    }

    /// Runs the script once on `connection` with `keys` keys then the
    /// arguments that `arguments` writes (keys first): `EVALSHA` of the
    /// loaded session, or on `NOSCRIPT` (or before any), a new session's
    /// text loaded and run by `SCRIPT LOAD` and `EVALSHA` in one pipeline,
    /// which the connection sends on one link, so to one process (a
    /// reconnection fails it whole, and nothing sends it again); that
    /// session is the loaded one from then on if the server answered. One
    /// call at a time loads; those that waited for it run what it loaded.
    pub(crate) async fn run<T: FromRedisValue>(
        &self,
        connection: &mut (impl ConnectionLike + Send),
        keys: usize,
        arguments: impl Fn(&mut Cmd),
    ) -> RedisResult<T> {
        if let Some(script) = &self.plain {
            return self.run_plain(connection, script, keys, &arguments).await;
        }
        let unknown = match self.run_loaded(connection, keys, &arguments, None).await {
            Loaded::Answered(answer) => return answer,
            Loaded::Unknown(unknown) => unknown,
        };
        let _loading = self.loading.lock().await;
        if let Loaded::Answered(answer) =
            self.run_loaded(connection, keys, &arguments, unknown).await
        {
            return answer;
        }
        self.load_new(connection, keys, &arguments).await
    }

    /// `EVALSHA` of the script without a session, loaded on `NOSCRIPT` (see
    /// [`run_or_load`]).
    async fn run_plain<T: FromRedisValue>(
        &self,
        connection: &mut (impl ConnectionLike + Send),
        script: &redis::Script,
        keys: usize,
        arguments: &impl Fn(&mut Cmd),
    ) -> RedisResult<T> {
        let mut evalsha = Cmd::with_capacity(EVALSHA_ARGS, EVALSHA_SIZE);
        evalsha.arg("EVALSHA").arg(script.get_hash()).arg(keys);
        arguments(&mut evalsha);
        run_or_load(connection, script, evalsha).await
    }

    /// `EVALSHA` of the loaded session, unless it is the one numbered
    /// `unknown`, which the server did not know.
    async fn run_loaded<T: FromRedisValue>(
        &self,
        connection: &mut (impl ConnectionLike + Send),
        keys: usize,
        arguments: &impl Fn(&mut Cmd),
        unknown: Option<u64>,
    ) -> Loaded<T> {
        let (number, mut evalsha) = {
            let loaded = self.loaded.read().unwrap_or_else(PoisonError::into_inner);
            match &*loaded {
                Some((number, hash)) if Some(*number) != unknown => {
                    let mut evalsha = Cmd::with_capacity(EVALSHA_ARGS, EVALSHA_SIZE);
                    evalsha.arg("EVALSHA").arg(hash.as_str()).arg(keys);
                    (*number, evalsha)
                }
                _ => return Loaded::Unknown(unknown),
            }
        };
        arguments(&mut evalsha);
        match evalsha.query_async(connection).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                Loaded::Unknown(Some(number))
            }
            answer => Loaded::Answered(answer),
        }
    }

    /// Loads and runs a new session's script in one pipeline (see
    /// [`run`](Self::run)).
    async fn load_new<T: FromRedisValue>(
        &self,
        connection: &mut (impl ConnectionLike + Send),
        keys: usize,
        arguments: &impl Fn(&mut Cmd),
    ) -> RedisResult<T> {
        let text = self.source.replacen(SESSION_LINE, &session_line(), 1);
        let hash = redis::Script::new(&text).get_hash().to_owned();
        let mut evalsha = Cmd::with_capacity(EVALSHA_ARGS, EVALSHA_SIZE);
        evalsha.arg("EVALSHA").arg(&hash).arg(keys);
        arguments(&mut evalsha);
        let mut pipeline = redis::pipe();
        pipeline
            .cmd("SCRIPT")
            .arg("LOAD")
            .arg(text)
            .ignore()
            .add_command(evalsha);
        let answer = pipeline
            .query_async::<(T,)>(connection)
            .await
            .map(|(answer,)| answer)
            .map_err(unpipelined);
        let answered = match &answer {
            Ok(_) => true,
            Err(err) => matches!(err.kind(), ErrorKind::Server(_) | ErrorKind::Extension),
        };
        if answered {
            let mut loaded = self.loaded.write().unwrap_or_else(PoisonError::into_inner);
            let number = loaded.as_ref().map_or(0, |(number, _)| number + 1);
            *loaded = Some((number, hash));
        }
        answer
    }
}

/// The prelude's `SESSION` line with a new nonce, 128 random bits in hex,
/// on a server of Redis 7 or later (or Valkey), which name their version
/// (`redis.REDIS_VERSION_NUM`); empty before, where a primary's snapshots
/// keep its scripts and its replicas get its `SCRIPT LOAD`s, so a script
/// would not stay in one process.
fn session_line() -> String {
    let mut raw = [0u8; 16];
    rand::Rng::fill_bytes(&mut rand::rng(), &mut raw);
    format!(
        "local SESSION = redis.REDIS_VERSION_NUM and '{:032x}' or ''\n",
        u128::from_le_bytes(raw)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_session_line_names_another_nonce() {
        let (first, second) = (session_line(), session_line());
        assert_ne!(first, second);
        let nonce = first
            .strip_prefix("local SESSION = redis.REDIS_VERSION_NUM and '")
            .and_then(|rest| rest.strip_suffix("' or ''\n"))
            .expect("the line's shape");
        assert_eq!(nonce.len(), 32);
        assert!(nonce.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
