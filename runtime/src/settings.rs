//! Settings read from a configuration file (feature `serde`): `LockOptions`
//! and `OnLost` deserialize, and so do [`SemaphoreSettings`] and
//! [`LeaderSettings`], with any format serde reads (TOML, YAML, environment
//! variables through `config` or `figment`). Durations are text in the
//! attribute's syntax or humantime's (see [`parse_duration`]), or whole
//! milliseconds. A bad value is an error naming the field, the value and
//! the accepted forms; unknown fields are refused, so a misspelt one is not
//! silently left at its default.

use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use crate::duration::{parse_duration, ACCEPTED_DURATIONS};
use crate::{LockOptions, OnLost};

/// A duration as written in a file: text, or whole milliseconds.
#[derive(Deserialize)]
#[serde(untagged)]
enum Written {
    Text(String),
    Millis(u64),
}

impl Written {
    /// The duration, or an error naming `field`, the value and the forms.
    fn read(self, field: &str) -> Result<Duration, String> {
        match self {
            Written::Millis(ms) => Ok(Duration::from_millis(ms)),
            Written::Text(text) => parse_duration(&text).map_err(|err| {
                let reason = err.to_string();
                let reason = reason
                    .split("; accepted forms")
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                format!(
                    "`{field}` = {text:?} is not a duration ({reason}); accepted forms: {ACCEPTED_DURATIONS}, or whole milliseconds"
                )
            }),
        }
    }
}

/// `LockOptions` as a file writes them: each field optional, at its default
/// when left out.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WrittenOptions {
    ttl: Option<Written>,
    wait: Option<Written>,
    renew: Option<bool>,
    reentrant: Option<bool>,
    on_lost: Option<OnLost>,
    fenced: Option<bool>,
    hold_at_least: Option<Written>,
    label: Option<String>,
    min_replicas: Option<u32>,
    replica_timeout: Option<Written>,
}

impl WrittenOptions {
    /// The options, or an error naming the first bad field.
    fn options(self) -> Result<LockOptions, String> {
        let mut options = LockOptions::new();
        if let Some(ttl) = self.ttl {
            options = options.ttl(ttl.read("ttl")?);
        }
        if let Some(wait) = self.wait {
            options = options.wait(wait.read("wait")?);
        }
        if let Some(renew) = self.renew {
            options = options.renew(renew);
        }
        if let Some(reentrant) = self.reentrant {
            options = options.reentrant(reentrant);
        }
        if let Some(on_lost) = self.on_lost {
            options = options.on_lost(on_lost);
        }
        if let Some(fenced) = self.fenced {
            options = options.fenced(fenced);
        }
        if let Some(hold) = self.hold_at_least {
            options = options.hold_at_least(hold.read("hold_at_least")?);
        }
        if let Some(label) = self.label {
            options = options.label(label);
        }
        let timeout = self
            .replica_timeout
            .map(|timeout| timeout.read("replica_timeout"))
            .transpose()?;
        options = match (self.min_replicas, timeout) {
            (Some(replicas), Some(timeout)) => options.min_replicas(replicas, timeout),
            (Some(replicas), None) => options.min_replicas_default_timeout(replicas),
            (None, Some(_)) => {
                return Err("`replica_timeout` needs `min_replicas`".to_owned());
            }
            (None, None) => options,
        };
        options
            .ttl_millis()
            .map_err(|err| format!("`ttl`: {err}"))?;
        options
            .hold()
            .map_err(|err| format!("`hold_at_least`: {err}"))?;
        options
            .replication()
            .map_err(|err| format!("`replica_timeout`: {err}"))?;
        Ok(options)
    }
}

impl<'de> Deserialize<'de> for LockOptions {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        WrittenOptions::deserialize(deserializer)?
            .options()
            .map_err(D::Error::custom)
    }
}

impl<'de> Deserialize<'de> for OnLost {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        match text.as_str() {
            "cancel" => Ok(OnLost::Cancel),
            "continue" => Ok(OnLost::Continue),
            _ => Err(D::Error::custom(format!(
                "`on_lost` = {text:?} is not one of \"cancel\", \"continue\""
            ))),
        }
    }
}

/// A semaphore as a file configures it: its key, how many permits, and the
/// options of each acquisition (a table `options`; defaults when left out).
/// Use it as `manager.semaphore(&settings.key, settings.permits)`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SemaphoreSettings {
    /// The semaphore's key.
    pub key: String,
    /// How many holders it admits at once.
    pub permits: u32,
    /// The options of each acquisition.
    #[serde(default)]
    pub options: LockOptions,
}

/// A leader election as a file configures it: its key and the options of
/// each term (a table `options`; defaults when left out). Use it as
/// `manager.leader(&settings.key, settings.options.clone())`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct LeaderSettings {
    /// The election's key.
    pub key: String,
    /// The options of each term.
    #[serde(default)]
    pub options: LockOptions,
}
