//! Which deployment to connect to, from the global options, and the
//! manager connected to it.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use leasehold::{redact_url, LockManager};

use crate::failure::Failure;
use crate::password;

/// The global connection options: one deployment, its namespace and timeouts.
#[derive(Debug, Args)]
pub struct Target {
    /// One Redis server (ignored when --redlock, --sentinel or --cluster is
    /// given). Prefer REDIS_URL to the option, and a password from
    /// --password-file or DLOCK_PASSWORD to one in the URL: argv is visible
    /// to every user of the host.
    #[arg(
        long,
        global = true,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    url: String,
    /// File holding the Redis password, for URLs without one (else the
    /// DLOCK_PASSWORD environment variable is used, if set).
    #[arg(long, global = true, value_name = "PATH")]
    password_file: Option<PathBuf>,
    /// Redlock over independent masters (an odd number).
    #[arg(
        long,
        global = true,
        value_name = "URL,URL,...",
        value_delimiter = ',',
        group = "deployment"
    )]
    redlock: Option<Vec<String>>,
    /// The primary Redis Sentinel names for service NAME; URLS are Sentinels.
    #[arg(long, global = true, num_args = 2, value_names = ["NAME", "URL,URL,..."], group = "deployment")]
    sentinel: Option<Vec<String>>,
    /// Password the Sentinels ask for (their requirepass, or USER's); the
    /// URLs' own credentials are the primary's. Prefer
    /// --sentinel-password-file or DLOCK_SENTINEL_PASSWORD (read only with
    /// --sentinel): argv is visible to every user of the host.
    #[arg(long, global = true, value_name = "PASSWORD", requires = "sentinel")]
    sentinel_password: Option<String>,
    /// File holding the Sentinels' password (its content without the final
    /// line break), in place of --sentinel-password.
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        requires = "sentinel",
        conflicts_with = "sentinel_password"
    )]
    sentinel_password_file: Option<PathBuf>,
    /// ACL user for the Sentinels' password (default: the default user).
    #[arg(long, global = true, value_name = "USER", requires = "sentinel")]
    sentinel_user: Option<String>,
    /// A Redis Cluster, through any of its nodes.
    #[arg(
        long,
        global = true,
        value_name = "URL,URL,...",
        value_delimiter = ',',
        group = "deployment"
    )]
    cluster: Option<Vec<String>>,
    /// Prefix of every lock key, as the applications set it.
    #[arg(long, global = true, value_name = "NS", default_value = "lock:")]
    namespace: String,
    /// Longest time to connect, and to wait for each answer, in milliseconds.
    #[arg(long, global = true, value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    timeout: u64,
}

impl Target {
    /// A manager connected to the chosen deployment.
    pub async fn connect(&self) -> Result<LockManager, Failure> {
        self.connect_through(&self.namespace, &|url: &str| url.to_owned())
            .await
    }

    /// A manager with keys under `namespace`, connected to the chosen
    /// deployment with each node's URL (its password in it) passed through
    /// `route` first (`verify`'s workers reach nodes through proxies).
    pub async fn connect_through(
        &self,
        namespace: &str,
        route: &dyn Fn(&str) -> String,
    ) -> Result<LockManager, Failure> {
        let timeout = self.timeout();
        let mut builder = LockManager::builder()
            .namespace(namespace)
            .connect_timeout(timeout)
            .response_timeout(timeout);
        if let Some(password) = self.sentinel_password()? {
            builder = builder.sentinel_credentials(self.sentinel_user.as_deref(), &password);
        }
        let password = password::read(self.password_file.as_deref())?;
        let with_password = |url: &str| match &password {
            Some(password) => route(&password::into_url(url, password)),
            None => route(url),
        };
        let manager = if let Some(urls) = &self.redlock {
            builder
                .redlock(urls.iter().map(|url| with_password(url)))
                .await?
        } else if let Some([service, urls]) = self.sentinel.as_deref() {
            builder
                .sentinel(service, urls.split(',').map(with_password))
                .await?
        } else if let Some(urls) = &self.cluster {
            builder
                .cluster(urls.iter().map(|url| with_password(url)))
                .await?
        } else {
            builder.connect(&with_password(&self.url)).await?
        };
        Ok(manager)
    }

    /// The time limit of each connection and answer.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout)
    }

    /// The deployment, as `verify` needs to know it: its kind and the
    /// nodes' URLs, each with its password in it.
    pub fn deployment(&self) -> Result<Deployment, Failure> {
        let password = password::read(self.password_file.as_deref())?;
        let with_password = |url: &str| match &password {
            Some(password) => password::into_url(url, password),
            None => url.to_owned(),
        };
        let all = |urls: &[String]| urls.iter().map(|url| with_password(url)).collect();
        Ok(if let Some(urls) = &self.redlock {
            Deployment::Redlock(all(urls))
        } else if let Some([service, urls]) = self.sentinel.as_deref() {
            let urls: Vec<String> = urls.split(',').map(str::to_owned).collect();
            Deployment::Sentinel {
                service: service.clone(),
                primary_url: with_password(&urls[0]),
                sentinels: urls,
                credentials: self
                    .sentinel_password()?
                    .map(|password| (self.sentinel_user.clone(), password)),
            }
        } else if let Some(urls) = &self.cluster {
            Deployment::Cluster(all(urls))
        } else {
            Deployment::Server(with_password(&self.url))
        })
    }

    /// The Sentinels' password, with --sentinel only: from
    /// --sentinel-password, else --sentinel-password-file, else
    /// `DLOCK_SENTINEL_PASSWORD` (an ambient variable, so it is read here
    /// rather than by the parser, which would demand --sentinel of every
    /// command run with it set). --sentinel-user without one is a usage
    /// error.
    fn sentinel_password(&self) -> Result<Option<String>, Failure> {
        if self.sentinel.is_none() {
            return Ok(None);
        }
        let password = match (&self.sentinel_password, &self.sentinel_password_file) {
            (Some(password), _) => Some(password.clone()),
            (None, Some(path)) => Some(password::from_file(path, "--sentinel-password-file")?),
            (None, None) => std::env::var(password::SENTINEL_PASSWORD_ENV)
                .ok()
                .filter(|password| !password.is_empty()),
        };
        if password.is_none() && self.sentinel_user.is_some() {
            return Err(Failure::Usage(
                "--sentinel-user needs the Sentinels' password: --sentinel-password-file, DLOCK_SENTINEL_PASSWORD or --sentinel-password".into(),
            ));
        }
        Ok(password)
    }

    /// The deployment and namespace in a few words, without passwords.
    pub fn describe(&self) -> String {
        format!(
            "{}, namespace {}",
            self.describe_deployment(),
            self.namespace
        )
    }

    /// The deployment in a few words, without passwords.
    pub fn describe_deployment(&self) -> String {
        if let Some(urls) = &self.redlock {
            format!("redlock over {} masters", urls.len())
        } else if let Some([service, urls]) = self.sentinel.as_deref() {
            format!("sentinel {service} via {}", without_password(urls))
        } else if let Some(urls) = &self.cluster {
            format!("cluster via {}", without_password(&urls.join(",")))
        } else {
            without_password(&self.url)
        }
    }
}

/// The deployment a target names, with the passwords in its URLs.
pub enum Deployment {
    /// One server.
    Server(String),
    /// Redlock's nodes.
    Redlock(Vec<String>),
    /// A Sentinel-monitored service: the Sentinels as given, the first
    /// URL's settings for the primary, and the Sentinels' own credentials.
    Sentinel {
        service: String,
        sentinels: Vec<String>,
        primary_url: String,
        credentials: Option<(Option<String>, String)>,
    },
    /// A Redis Cluster's seeds.
    Cluster(Vec<String>),
}

/// `urls` (separated by `,`) with each URL's password replaced by `***`.
fn without_password(urls: &str) -> String {
    urls.split(',')
        .map(redact_url)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::without_password;

    #[test]
    fn descriptions_never_show_passwords() {
        assert_eq!(
            without_password("redis://:secret@10.0.0.1:6379/2,redis://u:p@h:1"),
            "redis://:***@10.0.0.1:6379/2,redis://u:***@h:1"
        );
        assert_eq!(without_password("redis://h:1"), "redis://h:1");
        assert_eq!(without_password("garbage@"), "garbage@");
        assert_eq!(without_password(":secret@h:x"), ":***@h:x");
    }
}
