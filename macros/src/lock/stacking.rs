//! `#[distributed_lock]` stacked with `#[transactional]`: whichever is
//! written first, the lock ends up outside the transaction.

use proc_macro2::TokenStream;
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
