//! What the layer answers in place of the inner service: a request that
//! names no key, a busy lock, a lock server that failed, a lost lease; as
//! HTTP statuses or as gRPC statuses.

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};

use crate::body::LockBody;
use crate::error::KeyError;
use leasehold_runtime::LockError;

/// What a busy lock answers over HTTP (gRPC answers `ABORTED` either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnBusy {
    /// `409 Conflict` (the default): another request is working on the same
    /// resource.
    #[default]
    Conflict,
    /// `429 Too Many Requests` with `Retry-After`: the holder's remaining
    /// lease, in whole seconds rounded up (at least 1; 1 when the holder let
    /// go meanwhile). The holder may renew its lease, so this is when a retry
    /// may succeed, not when it will.
    TooManyRequests,
}

/// Why the layer answers instead of the inner service.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The request names no lock key.
    BadKey(KeyError),
    /// The lock call failed with `error`; for a busy lock, `retry_after` is
    /// how long the holder's lease has left, if known.
    Failed {
        error: LockError,
        retry_after: Option<Duration>,
    },
}

/// How refusals are answered: HTTP statuses, or gRPC statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answers {
    pub(crate) on_busy: OnBusy,
    pub(crate) grpc: bool,
}

impl Answers {
    /// Whether a busy answer carries the holder's remaining lease.
    pub(crate) fn tells_retry_after(&self) -> bool {
        !self.grpc && self.on_busy == OnBusy::TooManyRequests
    }

    /// The response that tells the client why its request did not run: the
    /// status and gRPC code of [`LockError`]'s one table
    /// ([`LockError::http_status`], [`LockError::grpc_code`]), with 429 in
    /// place of 409 when configured so.
    pub(crate) fn respond<B>(&self, refusal: Refusal) -> Response<LockBody<B>> {
        let (error, retry_after) = match refusal {
            // The same row as an empty key refused by the runtime.
            Refusal::BadKey(missing) => (LockError::InvalidOptions(missing.to_string()), None),
            Refusal::Failed { error, retry_after } => (error, retry_after),
        };
        let busy = matches!(error, LockError::Busy { .. } | LockError::Timeout { .. });
        let status = match (busy, self.on_busy) {
            (true, OnBusy::TooManyRequests) => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::from_u16(error.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        };
        let message = message_for(&error, status);
        if self.grpc {
            return grpc_status(error.grpc_code(), &message);
        }
        let mut response = Response::new(LockBody::answer(Bytes::from(message)));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        if busy && self.tells_retry_after() {
            headers.insert(
                RETRY_AFTER,
                HeaderValue::from(retry_after_seconds(retry_after)),
            );
        }
        response
    }
}

/// What the client is told for `error`, answered with `status`: nothing of
/// the server's internals (they go to the log).
fn message_for(error: &LockError, status: StatusCode) -> String {
    match error {
        LockError::Busy { .. } | LockError::Timeout { .. } => {
            "another request holds the lock on this resource; retry later".to_owned()
        }
        LockError::LeaseLost { .. } => "the lock on this resource was lost before the response was complete, so the request was cancelled and may have been partly processed; retry it".to_owned(),
        LockError::InvalidOptions(reason) => reason.clone(),
        _ if status == StatusCode::SERVICE_UNAVAILABLE => {
            "the lock service is unavailable; retry later".to_owned()
        }
        _ => "the request could not be locked; the server's log says why".to_owned(),
    }
}

/// `remaining` in whole seconds, rounded up; at least 1.
fn retry_after_seconds(remaining: Option<Duration>) -> u64 {
    remaining
        .map_or(1, |left| {
            left.as_secs() + u64::from(left.subsec_nanos() > 0)
        })
        .max(1)
}

/// A gRPC "trailers-only" response: HTTP 200, `grpc-status` and the
/// percent-encoded `grpc-message` in the headers, no body; what tonic's
/// `Status::aborted` and the like put on the wire.
fn grpc_status<B>(code: i32, message: &str) -> Response<LockBody<B>> {
    let mut response = Response::new(LockBody::answer(Bytes::new()));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from(code));
    let encoded = grpc_percent_encode(message);
    if let Ok(value) = HeaderValue::from_str(&encoded) {
        headers.insert("grpc-message", value);
    }
    response
}

/// `message` as the gRPC spec encodes `grpc-message`: bytes outside
/// printable ASCII, and `%`, as `%XX`.
fn grpc_percent_encode(message: &str) -> String {
    let mut encoded = String::with_capacity(message.len());
    for byte in message.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_seconds(Some(Duration::from_millis(1))), 1);
        assert_eq!(retry_after_seconds(Some(Duration::from_millis(2001))), 3);
        assert_eq!(retry_after_seconds(Some(Duration::from_secs(4))), 4);
        assert_eq!(retry_after_seconds(Some(Duration::ZERO)), 1);
        assert_eq!(retry_after_seconds(None), 1);
    }

    #[test]
    fn grpc_messages_are_percent_encoded() {
        assert_eq!(grpc_percent_encode("50% é"), "50%25 %C3%A9");
    }
}
