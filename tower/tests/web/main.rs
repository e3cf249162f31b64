//! `LockLayer` in front of a real axum server on loopback, locking on a real
//! redis-server, driven by a real HTTP/1 client. One binary, one module per
//! behaviour.

mod support;

mod busy;
mod faults;
mod grpc;
mod keys;
mod kinds;
mod serial;
#[cfg(feature = "serde")]
mod settings;
mod streaming;
