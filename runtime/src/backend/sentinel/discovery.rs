//! Finding the primary of a Sentinel-monitored service: every Sentinel is
//! asked at once (`SENTINEL GET-MASTER-ADDR-BY-NAME`), and of the nodes they
//! name, the one named by most Sentinels that answers `ROLE` as a primary is
//! it. A node that is down or still a replica (a failover under way) is
//! skipped.
//!
//! Sentinels are spoken to without a database, and with the credentials
//! given for them (`LockManagerBuilder::sentinel_credentials`) or none; the
//! user, password, database and scheme (`redis://` or `rediss://`) of the
//! first URL are those of the primary.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, RedisConnectionInfo, RedisError,
    Value,
};

use crate::backend::redis::connection::{auth_refusal, connect_error, describe, RedisConfig};
use crate::backend::redis::native::server_of;
use crate::backend::redis::tls::TlsConfig;
use crate::check::{NodeReport, NodeRole};
use crate::LockError;

/// The credentials a Sentinel asks for (its `requirepass`, or an ACL user).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SentinelCredentials {
    /// `None` for the `default` user.
    pub(crate) username: Option<String>,
    pub(crate) password: String,
}

/// Never shows the password.
impl std::fmt::Debug for SentinelCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelCredentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// The Sentinels of one service and how to reach the primary they name.
pub(crate) struct Sentinels {
    service: String,
    /// One client per Sentinel, in the order given.
    sentinels: Vec<Client>,
    /// The primary's connection settings, with the address still to be filled in.
    primary: ConnectionInfo,
    config: RedisConfig,
}

/// A primary found through the Sentinels.
pub(crate) struct Primary {
    /// `host:port` as the Sentinels name it.
    pub(crate) addr: String,
    /// A client for it, with the settings of the first URL.
    pub(crate) client: Client,
}

/// What one Sentinel said about the service.
enum Named {
    Primary(String, u16),
    /// The Sentinel does not monitor a service of that name.
    Unknown,
}

impl Sentinels {
    /// Parses the Sentinel URLs; fails with `InvalidOptions` when there is
    /// none, with `InvalidUrl` for one that cannot be used.
    pub(crate) fn new(
        service: &str,
        urls: &[String],
        config: RedisConfig,
        tls: &TlsConfig,
        credentials: Option<&SentinelCredentials>,
    ) -> Result<Self, LockError> {
        let Some(first) = urls.first() else {
            return Err(LockError::InvalidOptions(format!(
                "no Sentinel URL given for service `{service}`; pass at least one redis://host:port of a Sentinel"
            )));
        };
        let primary = tls.open_client(first)?.get_connection_info().clone();
        let sentinels = urls
            .iter()
            .map(|url| {
                let info = tls.open_client(url)?.get_connection_info().clone();
                let settings = sentinel_settings(credentials);
                // The URL parsed above; only the credentials are new here.
                Client::open(info.set_redis_settings(settings)).map_err(|err| {
                    LockError::InvalidOptions(format!("Sentinel credentials: {err}"))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Sentinels {
            service: service.to_owned(),
            sentinels,
            primary,
            config,
        })
    }

    /// One client per Sentinel, with its credentials if given, without
    /// database.
    pub(crate) fn clients(&self) -> &[Client] {
        &self.sentinels
    }

    /// The service name the Sentinels know the primary by.
    pub(crate) fn service(&self) -> &str {
        &self.service
    }

    /// The connection settings of the primary and the Sentinels.
    pub(crate) fn config(&self) -> RedisConfig {
        self.config
    }

    /// The longest [`primary`](Self::primary) takes: a Sentinel round trip
    /// and a `ROLE` round trip, each with its connection.
    pub(crate) fn resolve_limit(&self) -> Duration {
        self.config
            .connect_timeout
            .saturating_add(self.config.response_timeout)
            .saturating_mul(2)
    }

    /// Asks every Sentinel for the primary and returns the node named by
    /// most of them that answers `ROLE` as a primary, within
    /// [`resolve_limit`](Self::resolve_limit).
    /// Fails with `UnknownService` when every Sentinel that answered does not
    /// know the service, else with `Connection`.
    pub(crate) async fn primary(&self) -> Result<Primary, LockError> {
        let limit = self.resolve_limit();
        match tokio::time::timeout(limit, self.find_primary()).await {
            Ok(found) => found,
            Err(_) => Err(LockError::connection(format!(
                "no primary of service `{}` found through its Sentinels within {limit:?}",
                self.service
            ))),
        }
    }

    async fn find_primary(&self) -> Result<Primary, LockError> {
        let answers = join_all(self.sentinels.iter().map(|sentinel| self.ask(sentinel))).await;
        // Each node named, with how many Sentinels name it.
        let mut named: Vec<((String, u16), usize)> = Vec::new();
        let mut failures = Vec::new();
        let mut unknown = 0;
        let mut refused_credentials = None;
        for (sentinel, answer) in self.sentinels.iter().zip(answers) {
            match answer {
                Ok(Named::Primary(host, port)) => {
                    let node = (host, port);
                    match named.iter_mut().find(|(seen, _)| *seen == node) {
                        Some((_, votes)) => *votes += 1,
                        None => named.push((node, 1)),
                    }
                }
                Ok(Named::Unknown) => unknown += 1,
                Err(err) => {
                    failures.push(format!("{}: {}", address(sentinel), describe(&err)));
                    if refused_credentials.is_none() && auth_refusal(&err).is_some() {
                        refused_credentials = Some((address(sentinel), err));
                    }
                }
            }
        }
        // While a failover spreads, a Sentinel that has not heard of it yet
        // names the old primary, which may still answer as one: the node most
        // Sentinels name goes first.
        named.sort_by_key(|(_, votes)| std::cmp::Reverse(*votes));
        if named.is_empty() && unknown > 0 {
            return Err(LockError::UnknownService {
                service: self.service.clone(),
            });
        }
        if named.is_empty() {
            if let Some((sentinel, err)) = refused_credentials {
                return Err(LockError::Auth {
                    detail: format!(
                        "Sentinel {sentinel} of service `{}` turned the connection down ({}): give the Sentinels' own credentials with LockManagerBuilder::sentinel_credentials (the URLs' credentials are the primary's)",
                        self.service,
                        describe(&err)
                    ),
                    source: Some(Arc::new(err)),
                });
            }
            return Err(LockError::connection(format!(
                "no Sentinel of service `{}` answered ({})",
                self.service,
                failures.join("; ")
            )));
        }
        for ((host, port), _) in named {
            let addr = format!("{host}:{port}");
            let client = self.primary_client(host, port)?;
            match self.is_primary(&client).await {
                Ok(true) => return Ok(Primary { addr, client }),
                Ok(false) => failures.push(format!("{addr} is named but is not a primary (yet)")),
                Err(err) => {
                    if let Some(refused) = auth_refusal(&err) {
                        return Err(LockError::Auth {
                            detail: format!(
                                "the primary {addr} of service `{}` {refused} (the primary gets the credentials of the first Sentinel URL)",
                                self.service
                            ),
                            source: Some(Arc::new(err)),
                        });
                    }
                    failures.push(format!(
                        "{addr} is named but unreachable: {}",
                        describe(&err)
                    ));
                }
            }
        }
        Err(LockError::connection(format!(
            "the Sentinels of service `{}` name no reachable primary ({}); a failover may be under way, retry",
            self.service,
            failures.join("; ")
        )))
    }

    /// One Sentinel's answer, each step bounded by the configured time limits.
    async fn ask(&self, sentinel: &Client) -> Result<Named, RedisError> {
        let mut connection = sentinel
            .get_multiplexed_async_connection_with_config(&self.connection_config())
            .await?;
        let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.service)
            .query_async(&mut connection)
            .await?;
        Ok(reply.map_or(Named::Unknown, |(host, port)| Named::Primary(host, port)))
    }

    /// One report per Sentinel: a `PING`'s round trip and the version its
    /// `HELLO` gives, or why it failed; each within the time limits.
    pub(crate) async fn reports(&self) -> Vec<NodeReport> {
        join_all(self.sentinels.iter().map(|sentinel| async move {
            let mut report = NodeReport::new(address(sentinel), NodeRole::Sentinel);
            let asked = async {
                let mut connection = sentinel
                    .get_multiplexed_async_connection_with_config(&self.connection_config())
                    .await?;
                let started = Instant::now();
                redis::cmd("PING")
                    .query_async::<Value>(&mut connection)
                    .await?;
                let round_trip = started.elapsed();
                let hello = redis::cmd("HELLO")
                    .query_async::<Value>(&mut connection)
                    .await
                    .ok();
                Ok::<_, RedisError>((round_trip, hello))
            };
            match asked.await {
                Ok((round_trip, hello)) => {
                    report.round_trip = Some(round_trip);
                    report.server = hello
                        .map(server_of)
                        .map(|(server, version)| format!("{server} {version}"));
                }
                Err(err) => report.failure = Some(connect_error(err, &address(sentinel))),
            }
            report
        }))
        .await
    }

    /// Whether the node of `client` answers `ROLE` as a primary.
    async fn is_primary(&self, client: &Client) -> Result<bool, RedisError> {
        let mut connection = client
            .get_multiplexed_async_connection_with_config(&self.connection_config())
            .await?;
        let role: Value = redis::cmd("ROLE").query_async(&mut connection).await?;
        let Value::Array(fields) = role else {
            return Ok(false);
        };
        Ok(matches!(fields.first(), Some(Value::BulkString(kind)) if kind == b"master"))
    }

    /// A client for `host:port` with the first URL's scheme, credentials,
    /// database and trusted roots (kept in its TLS parameters).
    fn primary_client(&self, host: String, port: u16) -> Result<Client, LockError> {
        let addr = match self.primary.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        let info = self.primary.clone().set_addr(addr);
        let named = info.addr().to_string();
        Client::open(info).map_err(|err| LockError::Connection {
            detail: format!("cannot address the named primary {named}"),
            source: Some(Arc::new(err)),
        })
    }

    fn connection_config(&self) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.config.connect_timeout))
            .set_response_timeout(Some(self.config.response_timeout))
    }
}

/// `host:port` of a Sentinel, for error messages.
fn address(sentinel: &Client) -> String {
    match sentinel.get_connection_info().addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            format!("{host}:{port}")
        }
        ConnectionAddr::Unix(path) => path.display().to_string(),
        other => format!("{other:?}"),
    }
}

/// The connection settings of a Sentinel: its credentials if given, no
/// database.
fn sentinel_settings(credentials: Option<&SentinelCredentials>) -> RedisConnectionInfo {
    let plain = RedisConnectionInfo::default();
    match credentials {
        None => plain,
        Some(SentinelCredentials {
            username: Some(username),
            password,
        }) => plain.set_username(username).set_password(password),
        Some(SentinelCredentials {
            username: None,
            password,
        }) => plain.set_password(password),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::LockDelay;

    fn sentinels_with(urls: &[&str], credentials: Option<&SentinelCredentials>) -> Sentinels {
        let urls: Vec<String> = urls.iter().map(|url| (*url).to_owned()).collect();
        let config = RedisConfig {
            connect_timeout: Duration::from_millis(100),
            response_timeout: Duration::from_millis(200),
            lock_delay: LockDelay::default(),
            delay_after_start: false,
        };
        Sentinels::new("svc", &urls, config, &TlsConfig::default(), credentials)
            .unwrap_or_else(|err| panic!("{err}"))
    }

    fn sentinels(urls: &[&str]) -> Sentinels {
        sentinels_with(urls, None)
    }

    #[test]
    fn sentinels_get_their_own_credentials_never_the_primarys() {
        let credentials = SentinelCredentials {
            username: Some("watcher".to_owned()),
            password: "s3cret".to_owned(),
        };
        let found = sentinels_with(
            &["redis://user:secret@127.0.0.1:26379/3"],
            Some(&credentials),
        );
        let settings = found.sentinels[0].get_connection_info().redis_settings();
        assert_eq!(settings.username(), Some("watcher"));
        assert_eq!(settings.password(), Some("s3cret"));
        assert_eq!(settings.db(), 0);
        assert!(!format!("{credentials:?}").contains("s3cret"));
    }

    #[test]
    fn sentinels_get_no_credentials_and_no_database() {
        let found = sentinels(&[
            "redis://user:secret@127.0.0.1:26379/3",
            "redis://127.0.0.1:26380",
        ]);
        for sentinel in &found.sentinels {
            let settings = sentinel.get_connection_info().redis_settings();
            assert_eq!(settings.username(), None);
            assert_eq!(settings.password(), None);
            assert_eq!(settings.db(), 0);
        }
    }

    #[test]
    fn primary_gets_the_first_urls_credentials_and_database_at_the_named_address() {
        let found = sentinels(&[
            "redis://user:secret@127.0.0.1:26379/3",
            "redis://other:pw@127.0.0.1:26380/5",
        ]);
        let primary = found.primary_client("10.0.0.7".to_owned(), 6400).unwrap();
        let info = primary.get_connection_info();
        assert!(
            matches!(info.addr(), ConnectionAddr::Tcp(host, 6400) if host == "10.0.0.7"),
            "{:?}",
            info.addr()
        );
        let settings = info.redis_settings();
        assert_eq!(settings.username(), Some("user"));
        assert_eq!(settings.password(), Some("secret"));
        assert_eq!(settings.db(), 3);
    }

    #[cfg(feature = "tls")]
    #[test]
    fn primary_speaks_tls_when_the_first_url_does() {
        let found = sentinels(&["rediss://127.0.0.1:26379"]);
        let primary = found.primary_client("10.0.0.7".to_owned(), 6400).unwrap();
        assert!(
            matches!(
                primary.get_connection_info().addr(),
                ConnectionAddr::TcpTls { host, port: 6400, insecure: false, .. } if host == "10.0.0.7"
            ),
            "{:?}",
            primary.get_connection_info().addr()
        );
    }
}
