//! The layer's settings read from a configuration file (feature `serde`):
//! [`LayerSettings`], given to [`LockLayerBuilder::settings`]. Each answer
//! setting is text (`on_busy = "too_many_requests"`, `hold =
//! "until_body_ends"`, `retry_after = "recent_holds"` or a duration); a bad
//! value is an error naming the field, the value and the accepted forms.

use std::borrow::Borrow;

use leasehold_runtime::{parse_duration, LockManager, LockOptions, ACCEPTED_DURATIONS};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use crate::{Hold, LockLayerBuilder, OnBusy, RetryAfter};

/// A [`LockLayer`](crate::LockLayer) as a file configures it; every field
/// but `key` may be left out (the builder's defaults).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct LayerSettings {
    /// The key template, or several (all locked, all or nothing); see
    /// [`LockLayerBuilder::key`].
    pub key: Templates,
    /// The route the layer wraps; see [`LockLayerBuilder::route`].
    #[serde(default)]
    pub route: Option<String>,
    /// Permits of the semaphore on the key; see [`LockLayerBuilder::permits`].
    #[serde(default)]
    pub permits: Option<u32>,
    /// The lock's options (a table; see `LockOptions`'s fields).
    #[serde(default)]
    pub options: LockOptions,
    /// `"conflict"` (`409`) or `"too_many_requests"` (`429`).
    #[serde(default)]
    pub on_busy: OnBusy,
    /// `"recent_holds"` or a duration.
    #[serde(default)]
    pub retry_after: RetryAfter,
    /// gRPC statuses instead of HTTP ones.
    #[serde(default)]
    pub grpc: bool,
    /// `"until_response"` or `"until_body_ends"`.
    #[serde(default)]
    pub hold: Hold,
}

/// One key template, or several.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Templates {
    /// One template.
    One(String),
    /// Several, all locked.
    Several(Vec<String>),
}

impl<M: Borrow<LockManager>, B> LockLayerBuilder<M, B> {
    /// Everything `settings` holds, as the builder's own methods would set
    /// it; [`build`](Self::build) checks it as usual.
    pub fn settings(mut self, settings: &LayerSettings) -> Self {
        match &settings.key {
            Templates::One(template) => self = self.key(template),
            Templates::Several(templates) => {
                for template in templates {
                    self = self.key(template);
                }
            }
        }
        if let Some(route) = &settings.route {
            self = self.route(route);
        }
        if let Some(permits) = settings.permits {
            self = self.permits(permits);
        }
        self = self
            .options(settings.options.clone())
            .on_busy(settings.on_busy)
            .retry_after(settings.retry_after)
            .hold(settings.hold);
        if settings.grpc {
            self = self.grpc();
        }
        self
    }
}

/// `text` as one of `choices` (names and values) for `field`, or an error
/// naming the three.
fn choose<T: Copy, E: serde::de::Error>(
    field: &str,
    text: &str,
    choices: &[(&str, T)],
) -> Result<T, E> {
    choices
        .iter()
        .find(|(name, _)| *name == text)
        .map(|&(_, value)| value)
        .ok_or_else(|| {
            let names: Vec<String> = choices
                .iter()
                .map(|(name, _)| format!("{name:?}"))
                .collect();
            E::custom(format!(
                "`{field}` = {text:?} is not one of {}",
                names.join(", ")
            ))
        })
}

impl<'de> Deserialize<'de> for OnBusy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        choose(
            "on_busy",
            &text,
            &[
                ("conflict", OnBusy::Conflict),
                ("too_many_requests", OnBusy::TooManyRequests),
            ],
        )
    }
}

impl<'de> Deserialize<'de> for Hold {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        choose(
            "hold",
            &text,
            &[
                ("until_response", Hold::UntilResponse),
                ("until_body_ends", Hold::UntilBodyEnds),
            ],
        )
    }
}

impl<'de> Deserialize<'de> for RetryAfter {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text == "recent_holds" {
            return Ok(RetryAfter::RecentHolds);
        }
        parse_duration(&text).map(RetryAfter::Fixed).map_err(|_| {
            D::Error::custom(format!(
                "`retry_after` = {text:?} is neither \"recent_holds\" nor a duration; accepted durations: {ACCEPTED_DURATIONS}"
            ))
        })
    }
}
