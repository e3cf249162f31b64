//! TLS (`rediss://`): which root certificates a client trusts, and the rustls
//! crypto provider. Compiled in with the `tls` feature; without it a TLS URL
//! is refused with a reason that names the feature.

use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::{Client, ProtocolVersion};
#[cfg(feature = "tls")]
use redis::{ConnectionAddr, TlsCertificates};

use crate::{redact_url, LockError};

/// Why a TLS URL is refused when the `tls` feature is off.
#[cfg(not(feature = "tls"))]
const NOT_COMPILED_IN: &str =
    "TLS (rediss://) is not compiled in; enable the `tls` feature of leasehold";

/// What the clients of one manager trust when they speak TLS.
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsConfig {
    /// PEM root certificates trusted instead of the system's store.
    #[cfg(feature = "tls")]
    pub(crate) root_certificates: Option<Vec<u8>>,
}

impl TlsConfig {
    /// Parses `url` into a client. A `rediss://` (or `valkeys://`) client
    /// trusts the configured root certificates and gets a crypto provider;
    /// without the `tls` feature it is refused with `InvalidUrl`.
    pub(crate) fn open_client(&self, url: &str) -> Result<Client, LockError> {
        let invalid = |reason: String| LockError::InvalidUrl {
            url: redact_url(url),
            reason,
        };
        #[cfg(not(feature = "tls"))]
        if is_tls_url(url) {
            // Checked before parsing: another crate of the application may
            // enable TLS in redis-rs, but without our feature no crypto
            // provider is installed for it and no root certificate can be given.
            return Err(invalid(NOT_COMPILED_IN.to_owned()));
        }
        let client = Client::open(url).map_err(|err| invalid(url_problem(&err)))?;
        #[cfg(feature = "tls")]
        let client = self.secure(client)?;
        Ok(client)
    }

    /// A RESP3 Redis Cluster client seeded with `urls`, connecting within
    /// `connect_timeout` and answering each request, redirections and
    /// retries included, within `response_timeout` (`None`: unbounded, for
    /// calls that bound themselves). TLS seeds trust the configured root
    /// certificates; without the `tls` feature they are refused with
    /// `InvalidUrl`, as is an empty list or a URL redis-rs cannot use.
    pub(crate) fn open_cluster_client(
        &self,
        urls: &[String],
        connect_timeout: Duration,
        response_timeout: Option<Duration>,
    ) -> Result<ClusterClient, LockError> {
        let invalid = |reason: String| LockError::InvalidUrl {
            url: urls
                .iter()
                .map(|url| redact_url(url))
                .collect::<Vec<_>>()
                .join(","),
            reason,
        };
        if urls.is_empty() {
            return Err(invalid("no cluster node given".to_owned()));
        }
        for url in urls {
            // Each seed alone, so a bad one is named (and TLS is checked as for one server).
            self.open_client(url)?;
        }
        let builder = ClusterClientBuilder::new(urls.iter().map(String::as_str))
            .use_protocol(ProtocolVersion::RESP3)
            .connection_timeout(connect_timeout);
        let builder = match response_timeout {
            Some(timeout) => builder.response_timeout(timeout),
            None => builder.overall_response_timeout(None),
        };
        #[cfg(feature = "tls")]
        let builder = self.secure_cluster(builder, urls);
        builder.build().map_err(|err| invalid(url_problem(&err)))
    }

    /// Gives TLS cluster seeds the configured root certificates.
    #[cfg(feature = "tls")]
    fn secure_cluster(
        &self,
        builder: ClusterClientBuilder,
        urls: &[String],
    ) -> ClusterClientBuilder {
        if !urls.iter().any(|url| is_tls_url(url)) {
            return builder;
        }
        install_crypto_provider();
        match &self.root_certificates {
            Some(root_cert) => builder.certs(TlsCertificates {
                client_tls: None,
                root_cert: Some(root_cert.clone()),
            }),
            None => builder,
        }
    }

    /// Gives a TLS client its root certificates and makes sure rustls has a
    /// crypto provider; a plain client is returned unchanged.
    #[cfg(feature = "tls")]
    fn secure(&self, client: Client) -> Result<Client, LockError> {
        if !matches!(
            client.get_connection_info().addr(),
            ConnectionAddr::TcpTls { .. }
        ) {
            return Ok(client);
        }
        install_crypto_provider();
        let Some(root_cert) = self.root_certificates.clone() else {
            return Ok(client);
        };
        let certificates = TlsCertificates {
            client_tls: None,
            root_cert: Some(root_cert),
        };
        Client::build_with_tls(client.get_connection_info().clone(), certificates)
            .map_err(|err| {
                LockError::InvalidOptions(format!(
                    "the TLS root certificate cannot be used ({}); give one or more PEM CERTIFICATE blocks",
                    err.detail().unwrap_or("not a PEM certificate")
                ))
            })
    }
}

/// Why the client library refused a URL, in our words (its own detail,
/// where it gave one, never its type names).
fn url_problem(err: &redis::RedisError) -> String {
    match err.detail() {
        Some(detail) => format!("it does not parse: {detail}"),
        None => "it does not parse".to_owned(),
    }
}

/// Whether `url` asks for TLS.
fn is_tls_url(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
    })
}

/// Installs rustls's `ring` provider as the process-wide default, once, unless
/// the application installed one first (then that one is used). redis-rs
/// builds rustls without a provider of its own, so without this its handshake
/// would have none to use.
#[cfg(feature = "tls")]
fn install_crypto_provider() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        // Err: the application installed its own provider already, which is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// With the feature, `rediss://` is tested against a TLS server in
/// `tests/suite/tls.rs`; without it, here (`scripts/test` runs this crate's
/// unit tests once with no feature).
#[cfg(all(test, not(feature = "tls")))]
mod tests {
    use super::TlsConfig;
    use crate::LockError;

    #[test]
    fn tls_url_without_the_tls_feature_names_the_feature() {
        let refused = TlsConfig::default().open_client("rediss://127.0.0.1:6379");
        let Err(err @ LockError::InvalidUrl { .. }) = refused else {
            panic!("rediss:// without the tls feature: {refused:?}");
        };
        assert!(
            err.to_string().contains("enable the `tls` feature"),
            "{err}"
        );
    }
}
