//! `#[transactional(pool = ...)]`: the body runs with a database transaction
//! that commits when it returns `Ok` and rolls back otherwise.

mod options;

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{AttrStyle, Ident, ItemFn, Type};

use crate::shared::args::krate;
use crate::shared::errors::{with_error, Errors};
use crate::shared::mention::mention_params;
use crate::shared::signature::{self, Requirements};
use options::Options;

const REQUIREMENTS: Requirements = Requirements {
    attribute: "#[transactional]",
    error: "sqlx::Error",
};

/// Expands `#[transactional(args)] item`. On any mistake the function is
/// emitted as written next to the errors, its parameters that `args` name
/// marked as used.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut function = match signature::function(item.clone(), &REQUIREMENTS) {
        Ok(function) => function,
        Err(error) => return with_error(item, error),
    };
    let mut errors = Errors::default();
    let options = options::parse(args.clone(), &mut errors);
    if let Some(options) = &options {
        check_binding_is_free(&function.sig, &options.tx, &mut errors);
    }
    let return_type = signature::check(&function.sig, &REQUIREMENTS, &mut errors);
    match (errors.finish(), options, return_type) {
        (Ok(()), Some(options), Some(return_type)) => rewrite(function, &options, &return_type),
        (Err(error), ..) => {
            mention_params(&mut function, &args);
            with_error(function.into_token_stream(), error)
        }
        (Ok(()), ..) => unreachable!("a step that yields nothing records an error"),
    }
}

/// Records an error at a parameter named as the transaction's binding
/// `tx`: the body would see the transaction under that name, not the
/// parameter.
fn check_binding_is_free(sig: &syn::Signature, tx: &Ident, errors: &mut Errors) {
    for input in &sig.inputs {
        let syn::FnArg::Typed(typed) = input else {
            continue;
        };
        let syn::Pat::Ident(param) = &*typed.pat else {
            continue;
        };
        if param.ident.unraw() == tx.unraw() {
            let example = if tx == "tx" {
                ", e.g. `#[transactional(pool = ..., tx = conn)]`"
            } else {
                ""
            };
            let message = format!(
                "parameter `{tx}` has the name `#[transactional]` gives the transaction, which would hide it in the body; rename the parameter, or give the transaction another name with `tx = ...`{example}"
            );
            errors.push(syn::Error::new(param.ident.span(), message));
        }
    }
}

/// The function with its signature and attributes kept; its body runs with
/// the transaction bound to `options.tx`, and its result decides commit or
/// rollback. `return` and `?` in the body leave only the body (an inner
/// `async` block), so the decision always runs; a panic or cancellation drops
/// the transaction, which rolls it back. When the transaction cannot begin,
/// the body does not run.
fn rewrite(function: ItemFn, options: &Options, return_type: &Type) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
        ..
    } = function;
    let (outer_attrs, inner_attrs): (Vec<_>, Vec<_>) = attrs
        .into_iter()
        .partition(|attr| matches!(attr.style, AttrStyle::Outer));
    let return_span = return_type.span();
    let krate = krate(options.crate_path.as_ref(), return_span);

    // Mixed-site hygiene: the user's code cannot name these.
    let transaction = Ident::new("__leasehold_transaction", Span::mixed_site());
    let result = Ident::new("__leasehold_result", Span::mixed_site());
    let error = Ident::new("__leasehold_error", Span::mixed_site());
    let return_var = Ident::new("__leasehold_return", Span::mixed_site());
    // The argument the compiler blames for an error type without
    // `From<sqlx::Error>`: spanned at the return type, so that the error is
    // reported there. It is bound after the body, which cannot see it.
    let outcome = Ident::new("__leasehold_outcome", return_span);
    let tx = &options.tx;

    // Spanned at the user's expression: a pool of the wrong type is reported there.
    let pool = &options.pool;
    let pool = quote_spanned! {pool.span()=>
        ::core::borrow::Borrow::borrow(&(#pool))
    };
    let statement = match &options.begin {
        Some(statement) => quote!(::core::option::Option::Some(#statement)),
        None => quote!(::core::option::Option::None),
    };

    let statements = crate::shared::body::statements(&block, return_type, &return_var);
    // The only call that needs `E: From<sqlx::Error>`, spanned at the return
    // type: an error type without it is reported there, once.
    let finish = quote_spanned! {return_span=>
        #krate::__private::finish_transaction(#outcome).await
    };

    quote! {
        #(#outer_attrs)*
        #vis #sig {
            #(#inner_attrs)*
            let #outcome = match #krate::__private::begin_transaction(#pool, #statement).await {
                ::core::result::Result::Ok(mut #transaction) => {
                    let #result = async {
                        let #tx = &mut #transaction;
                        #statements
                    }
                    .await;
                    ::core::result::Result::Ok((#transaction, #result))
                }
                ::core::result::Result::Err(#error) => ::core::result::Result::Err(#error),
            };
            #finish
        }
    }
}
