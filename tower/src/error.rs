//! The layer's two error types: a layer that cannot be built, and a request
//! that names no lock key.

/// Why [`LockLayerBuilder::build`](crate::LockLayerBuilder::build) refused
/// the layer. Every message names the part that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// Neither a key template nor a key function was given.
    #[error("the layer has no lock key: give it `.key(\"order:{{header.idempotency-key}}\")` or `.key_fn(|request| ...)`")]
    NoKey,
    /// Both key templates and a key function were given.
    #[error("the layer has both key templates and a key function; give it one or the other")]
    TwoKeySources,
    /// A key template does not parse, or names a part the request cannot have.
    #[error("key template `{template}`: {reason}")]
    Template {
        /// The template as given.
        template: String,
        /// What is wrong with it, naming the bad part.
        reason: String,
    },
    /// The route pattern given to `.route` does not parse.
    #[error("route `{route}`: {reason}")]
    Route {
        /// The route as given.
        route: String,
        /// What is wrong with it, naming the bad part.
        reason: String,
    },
    /// `.permits(0)`: a semaphore of no permits admits no request.
    #[error("permits(0) would refuse every request; give it at least 1")]
    ZeroPermits,
    /// `.permits(n)` with several key templates: a permit is taken on one key.
    #[error("a permit is taken on one key, and the layer has {templates} key templates; give it one template with `.permits`")]
    PermitsOnSeveralKeys {
        /// How many key templates were given.
        templates: usize,
    },
}

/// Why a request names no lock key. The layer answers it with
/// `400 Bad Request` (gRPC: `INVALID_ARGUMENT`) and this message, and never
/// takes a lock on a partial or empty key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The header a template names is absent.
    #[error("missing header `{0}`, which the lock key needs")]
    MissingHeader(String),
    /// The header a template names is present but empty.
    #[error("header `{0}` is empty, and the lock key needs its value")]
    EmptyHeader(String),
    /// The header a template names is not visible ASCII.
    #[error("header `{0}` is not visible ASCII, so it cannot be part of the lock key")]
    UnreadableHeader(String),
    /// The request path does not match the route, so it lacks a parameter.
    #[error("missing path parameter `{name}`: the path does not match the route `{route}`")]
    MissingPathParameter {
        /// The parameter's name, as in the route.
        name: String,
        /// The route the layer was built with.
        route: String,
    },
    /// A path parameter the key needs is empty (`/orders//checkout`).
    #[error("path parameter `{0}` is empty, and the lock key needs its value")]
    EmptyPathParameter(String),
    /// A path parameter is not valid percent-encoded UTF-8.
    #[error("path parameter `{0}` is not valid percent-encoded UTF-8")]
    UnreadablePathParameter(String),
    /// What a key function reports as missing from the request, e.g.
    /// `KeyError::Missing("the tenant id".into())`.
    #[error("missing {0}, which the lock key needs")]
    Missing(String),
    /// A key function returned an empty key.
    #[error("the lock key taken from the request is empty")]
    EmptyKey,
}
