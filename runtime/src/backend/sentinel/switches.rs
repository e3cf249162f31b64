//! Hearing of failovers as they happen. Every Sentinel publishes
//! `+switch-master <service> <old-ip> <old-port> <new-ip> <new-port>` once it
//! has promoted a replica. A task per Sentinel listens for it and tells the
//! manager at once, so that it does not keep using a replaced primary until
//! a call fails there: Sentinel demotes a replaced primary that is still up
//! only some seconds later, and until then it would go on granting locks
//! the new primary knows nothing of.
//!
//! The tasks end once the manager is gone (checked at every message and at
//! least every [`CHECK_EVERY`]). A subscription is checked with a `PING`
//! as often, so one whose connection died silently (a firewall
//! or NAT that dropped it, a partition) is noticed; a lost subscription is
//! opened again after [`RESUBSCRIBE_PAUSE`], and once it is, the manager is
//! told as for an announcement, so that a failover announced while nobody
//! listened is caught up at once instead of at the next failed call.

use std::time::Duration;

use futures_util::StreamExt;
use redis::Client;

use crate::backend::redis::connection::describe;

/// The channel Sentinels announce a promoted replica on.
const SWITCH_CHANNEL: &str = "+switch-master";
/// How often a listening task with no message to handle checks that its
/// manager still exists and that its Sentinel still answers a `PING`
/// (within twice the connect timeout; else the subscription counts as lost).
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// Pause before subscribing again to a Sentinel that could not be reached
/// or dropped the subscription.
const RESUBSCRIBE_PAUSE: Duration = Duration::from_secs(1);

/// What a listening task learns from its manager when it calls back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Manager {
    Alive,
    Gone,
}

/// Listens on every Sentinel for failovers of `service`, on the current
/// Tokio runtime (nothing happens outside one). `on_switch` is called for
/// each announcement, once per Sentinel that makes it; `alive` is polled
/// between messages. Both say whether the manager still exists.
pub(super) fn listen<S, A>(
    sentinels: &[Client],
    service: &str,
    connect_timeout: Duration,
    on_switch: S,
    alive: A,
) where
    S: Fn() -> Manager + Clone + Send + Sync + 'static,
    A: Fn() -> Manager + Clone + Send + Sync + 'static,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    for sentinel in sentinels {
        let listener = Listener {
            sentinel: sentinel.clone(),
            prefix: format!("{service} "),
            connect_timeout,
        };
        runtime.spawn(listener.run(on_switch.clone(), alive.clone()));
    }
}

/// One Sentinel's announcements of one service.
struct Listener {
    sentinel: Client,
    /// `<service> `, how an announcement of this service starts.
    prefix: String,
    connect_timeout: Duration,
}

impl Listener {
    async fn run<S, A>(self, on_switch: S, alive: A)
    where
        S: Fn() -> Manager,
        A: Fn() -> Manager,
    {
        // The first subscription follows the manager's own look-up of the
        // primary; any later one may have missed announcements.
        let mut catch_up = false;
        while alive() == Manager::Alive {
            if self.listen_once(&on_switch, &alive, catch_up).await == Manager::Gone {
                return;
            }
            catch_up = true;
            tokio::time::sleep(RESUBSCRIBE_PAUSE).await;
        }
    }

    /// Subscribes and handles announcements until the subscription is lost
    /// (then `Alive`) or the manager is gone; with `catch_up`, tells the
    /// manager once subscribed, since announcements may have been missed
    /// before.
    async fn listen_once<S, A>(&self, on_switch: &S, alive: &A, catch_up: bool) -> Manager
    where
        S: Fn() -> Manager,
        A: Fn() -> Manager,
    {
        let answer_limit = self.connect_timeout.saturating_mul(2);
        let subscribe = async {
            let mut pubsub = self.sentinel.get_async_pubsub().await?;
            pubsub.subscribe(SWITCH_CHANNEL).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        let pubsub = match tokio::time::timeout(answer_limit, subscribe).await {
            Ok(Ok(pubsub)) => pubsub,
            Ok(Err(err)) => {
                tracing::debug!(error = %describe(&err), "cannot subscribe to a Sentinel's failover announcements; trying again");
                return Manager::Alive;
            }
            Err(_) => return Manager::Alive,
        };
        if catch_up && on_switch() == Manager::Gone {
            return Manager::Gone;
        }
        let (mut sink, mut messages) = pubsub.split();
        loop {
            let message = tokio::select! {
                message = messages.next() => message,
                () = tokio::time::sleep(CHECK_EVERY) => {
                    if alive() == Manager::Gone {
                        return Manager::Gone;
                    }
                    let ping = sink.ping::<redis::Value>();
                    if !matches!(tokio::time::timeout(answer_limit, ping).await, Ok(Ok(_))) {
                        tracing::debug!("a Sentinel's subscription stopped answering; subscribing again");
                        return Manager::Alive;
                    }
                    continue;
                }
            };
            let Some(message) = message else {
                return Manager::Alive;
            };
            let payload: String = message.get_payload().unwrap_or_default();
            if payload.starts_with(&self.prefix) && on_switch() == Manager::Gone {
                return Manager::Gone;
            }
        }
    }
}
