//! The attributes of the `leasehold` crate: `#[distributed_lock]` and
//! `#[transactional]`.
//!
//! This crate only reads and rewrites syntax; it knows nothing of Redis or
//! databases. Use the attributes through `leasehold`, which also
//! provides the runtime that the generated code calls.

#![warn(missing_docs)]

mod lock;
mod shared;
mod transactional;

use proc_macro::TokenStream;

/// `#[distributed_lock]`: documented, with examples, where users meet it,
/// as `leasehold::distributed_lock`.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    lock::expand(args.into(), item.into()).into()
}

/// `#[transactional]`: documented, with an example, where users meet it,
/// as `leasehold::transactional`.
#[proc_macro_attribute]
pub fn transactional(args: TokenStream, item: TokenStream) -> TokenStream {
    transactional::expand(args.into(), item.into()).into()
}
