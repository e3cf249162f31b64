//! Rewrites the function: its body runs inside the runtime's `locked` call.

use proc_macro2::{Literal, Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{AttrStyle, ItemFn, Type};

use crate::args::{self, OnLost, Options};
use crate::errors::Errors;
use crate::{key, open_transaction, signature, transactional};

/// Expands `#[distributed_lock(args)] item`. On any mistake the function is
/// emitted unchanged next to the errors, so that the rest of the crate still
/// type-checks and the IDE keeps working.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let function: ItemFn = match syn::parse2(item.clone()) {
        Ok(function) => function,
        Err(_) => {
            let error = syn::Error::new(
                Span::call_site(),
                "#[distributed_lock] applies to an `async fn`",
            );
            return with_error(item, error);
        }
    };
    if let Some(reordered) = transactional::move_above_lock(&args, &function) {
        return reordered;
    }
    let mut errors = Errors::default();
    let options = args::parse(args, &mut errors);
    let return_type = signature::check(&function.sig, &mut errors);
    if options
        .as_ref()
        .is_some_and(|options| !options.allow_open_transaction)
    {
        open_transaction::check(&function.sig, &mut errors);
    }
    let key = options
        .as_ref()
        .and_then(|options| key::format_call(&options.key, &function.sig, &mut errors));
    match (errors.finish(), options, key, return_type) {
        (Ok(()), Some(options), Some(key), Some(return_type)) => {
            rewrite(function, &options, key, &return_type)
        }
        (Err(error), ..) => with_error(item, error),
        (Ok(()), ..) => unreachable!("a step that yields nothing records an error"),
    }
}

fn with_error(item: TokenStream, error: syn::Error) -> TokenStream {
    let error = error.into_compile_error();
    quote! { #item #error }
}

/// The function with its signature and attributes kept and its body wrapped.
fn rewrite(
    function: ItemFn,
    options: &Options,
    key: TokenStream,
    return_type: &Type,
) -> TokenStream {
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
    let krate = crate_path(options, Span::call_site());

    // Mixed-site hygiene: the user's code cannot name these.
    let key_var = syn::Ident::new("__distributed_lock_key", Span::mixed_site());
    let client_var = syn::Ident::new("__distributed_lock_client", Span::mixed_site());
    let return_var = syn::Ident::new("__distributed_lock_return", Span::mixed_site());

    let client = match &options.client {
        // Spanned at the user's expression: a wrong type is reported there.
        Some(expr) => quote_spanned! {expr.span()=>
            ::core::option::Option::Some(::core::clone::Clone::clone(
                ::core::borrow::Borrow::<#krate::LockManager>::borrow(&(#expr)),
            ))
        },
        None => quote!(::core::option::Option::None),
    };

    let ttl = Literal::u64_unsuffixed(options.ttl_ms);
    let wait = Literal::u64_unsuffixed(options.wait_ms);
    let renew = options.renew;
    let reentrant = options.reentrant;
    let on_lost = match options.on_lost {
        OnLost::Cancel => quote!(Cancel),
        OnLost::Continue => quote!(Continue),
    };
    let lock_options = quote! {
        #krate::LockOptions::new()
            .ttl(::core::time::Duration::from_millis(#ttl))
            .wait(::core::time::Duration::from_millis(#wait))
            .renew(#renew)
            .reentrant(#reentrant)
            .on_lost(#krate::OnLost::#on_lost)
    };
    let lock_options = match options.min_replicas {
        Some((replicas, timeout_ms)) => quote! {
            #lock_options
                .min_replicas(#replicas, ::core::time::Duration::from_millis(#timeout_ms))
        },
        None => lock_options,
    };

    let return_span = return_type.span();
    let fake_return_edge = crate::return_edge::fake_return_edge(return_type, &return_var);
    let body = quote! {
        async move {
            #fake_return_edge
            #block
        }
    };
    // The call is spanned at the return type: an error type without
    // `From<LockError>` is reported there.
    let locked_crate = crate_path(options, return_span);
    let call = quote_spanned! {return_span=>
        #locked_crate::__private::locked(#client_var, #key_var, #lock_options, #body).await
    };

    quote! {
        #(#outer_attrs)*
        #vis #sig {
            #(#inner_attrs)*
            let #key_var: ::std::string::String = #key;
            let #client_var: ::core::option::Option<#krate::LockManager> = #client;
            #call
        }
    }
}

/// The path of the `distributed_lock` crate; the default one spanned at
/// `span`.
fn crate_path(options: &Options, span: Span) -> TokenStream {
    match &options.crate_path {
        Some(path) => path.to_token_stream(),
        None => quote_spanned!(span=> ::distributed_lock),
    }
}
