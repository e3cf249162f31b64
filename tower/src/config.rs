//! What a layer and its services share: the settings a
//! [`LockLayer`](crate::LockLayer) was built with, and how long a request
//! holds its lock.

use leasehold_runtime::LockOptions;

use crate::answer::Answers;
use crate::retry::RecentHolds;
use crate::target::Keys;

/// How long a request holds its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hold {
    /// Until the inner service has produced the response (the default): the
    /// handler runs under the lock, which is released before the response
    /// is sent; its body streams unlocked. Right for handlers that do their
    /// work before they answer, which is most, and it keeps a slow client
    /// reading a large body from holding the lock.
    #[default]
    UntilResponse,
    /// Until the response body has ended (or the server dropped it, e.g. the
    /// client went away): for handlers that keep writing while the body
    /// streams. A lease lost meanwhile ends the body with an error, which
    /// aborts the response.
    UntilBodyEnds,
}

/// Everything a [`LockService`](crate::LockService) needs, shared by the
/// layer and its services.
pub(crate) struct Config<M, B> {
    pub(crate) manager: M,
    pub(crate) keys: Keys<B>,
    pub(crate) options: LockOptions,
    pub(crate) answers: Answers,
    pub(crate) hold: Hold,
    /// The holds this layer's requests completed lately, for `Retry-After`.
    pub(crate) holds: RecentHolds,
}
