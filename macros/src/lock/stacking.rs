//! `#[distributed_lock]` stacked with other attributes: with
//! `#[transactional]`, whichever is written first, the lock ends up outside
//! the transaction; below `#[tokio::test]` or `#[tokio::main]`, which have
//! already made the function synchronous, it says to move it up.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{AttrStyle, Attribute, ItemFn};

use crate::lock::options;
use crate::shared::args::krate;

/// When the function still carries a `#[transactional(..)]` attribute, it
/// was written *below* the lock and would expand outside it, beginning the
/// transaction before the lock is taken and committing after it is released.
/// Returns the function again with that attribute moved above a copy of
/// `#[distributed_lock(lock_args)]`, so that the transaction expands first
/// and the lock wraps it; `None` when there is no such attribute.
pub(crate) fn move_transaction_inside(
    lock_args: &TokenStream,
    function: &ItemFn,
) -> Option<TokenStream> {
    let position = function.attrs.iter().position(is_transactional)?;
    let mut function = function.clone();
    let transactional = function.attrs.remove(position);
    let crate_path = options::crate_path_only(lock_args.clone());
    let krate = krate(crate_path.as_ref(), proc_macro2::Span::call_site());
    Some(quote! {
        #transactional
        #[#krate::distributed_lock(#lock_args)]
        #function
    })
}

/// An outer attribute whose path ends with `transactional`.
fn is_transactional(attr: &Attribute) -> bool {
    matches!(attr.style, AttrStyle::Outer)
        && attr
            .path()
            .segments
            .last()
            .is_some_and(|last| last.ident == "transactional")
}

/// The error for a function that a runtime attribute written above this one
/// (`#[tokio::test]`, `#[tokio::main]`) has already expanded: no longer
/// `async`, and marked `#[test]` or named `main`. `None` otherwise, and for
/// any `async fn`.
pub(crate) fn runtime_attribute_above(function: &ItemFn) -> Option<syn::Error> {
    if function.sig.asyncness.is_some() {
        return None;
    }
    let test = function.attrs.iter().any(|attr| ends_with(attr, "test"));
    let above = match (test, function.sig.ident == "main") {
        (true, _) => "#[tokio::test]",
        (false, true) => "#[tokio::main]",
        (false, false) => return None,
    };
    let message = format!(
        "write `#[distributed_lock]` above `{above}`: attributes expand from the top, and `{above}` has already turned this `async fn` into a plain `fn` that runs it"
    );
    Some(syn::Error::new(Span::call_site(), message))
}

/// Whether `attr`'s path ends with `name` (`#[test]`, `#[::core::prelude::v1::test]`).
fn ends_with(attr: &Attribute, name: &str) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|segment| segment.ident == name)
}
