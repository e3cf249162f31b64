//! `#[distributed_lock(...)]`: the function's body runs inside the runtime's
//! `locked` call, under the key its template builds.

mod duration;
mod key;
mod open_transaction;
mod options;
mod stacking;
mod template;

use proc_macro2::{Literal, Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{AttrStyle, Ident, ItemFn, LitStr, Type};

use crate::shared::args::krate;
use crate::shared::errors::{with_error, Errors};
use crate::shared::mention::mention_params;
use crate::shared::signature::{self, Requirements};
use options::{Mode, OnBusy, OnLost, Options};

const REQUIREMENTS: Requirements = Requirements {
    attribute: "#[distributed_lock]",
    error: "LockError",
};

/// Expands `#[distributed_lock(args)] item`. On any mistake the function is
/// emitted as written next to the errors, its parameters that `args` name
/// marked as used.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut function = match signature::function(item.clone(), &REQUIREMENTS) {
        Ok(function) => function,
        Err(error) => return with_error(item, error),
    };
    if let Some(reordered) = stacking::move_transaction_inside(&args, &function) {
        return reordered;
    }
    let mut errors = Errors::default();
    let options = options::parse(args.clone(), &mut errors);
    let return_type = signature::check(&function.sig, &REQUIREMENTS, &mut errors);
    if options
        .as_ref()
        .is_some_and(|options| !options.allow_open_transaction)
    {
        open_transaction::check(&function.sig, &mut errors);
    }
    let key = options.as_ref().and_then(|options| {
        let keys: Vec<TokenStream> = options
            .keys
            .iter()
            .filter_map(|key| key::format_call(key, &function.sig, &mut errors))
            .collect();
        match (keys.len() == options.keys.len(), options.several) {
            (false, _) => None,
            (true, false) => keys.into_iter().next(),
            (true, true) => Some(quote!(::std::vec![#(#keys),*])),
        }
    });
    match (errors.finish(), options, key, return_type) {
        (Ok(()), Some(options), Some(key), Some(return_type)) => {
            rewrite(function, &options, key, &return_type)
        }
        (Err(error), ..) => {
            mention_params(&mut function, &args);
            with_error(function.into_token_stream(), error)
        }
        (Ok(()), ..) => unreachable!("a step that yields nothing records an error"),
    }
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
    let krate_here = krate(options.crate_path.as_ref(), Span::call_site());

    // Mixed-site hygiene: the user's code cannot name these.
    let key_var = Ident::new("__leasehold_key", Span::mixed_site());
    let manager_var = Ident::new("__leasehold_manager", Span::mixed_site());
    let return_var = Ident::new("__leasehold_return", Span::mixed_site());

    let manager = match &options.manager {
        // Spanned at the user's expression: a wrong type is reported there.
        Some(expr) => quote_spanned! {expr.span()=>
            ::core::option::Option::Some(::core::clone::Clone::clone(
                ::core::borrow::Borrow::<#krate_here::LockManager>::borrow(&(#expr)),
            ))
        },
        None => quote!(::core::option::Option::None),
    };
    let lock_options = lock_options(options, &krate_here, &sig.ident.to_string());

    let return_span = return_type.span();
    let statements = crate::shared::body::statements(&block, return_type, &return_var);
    // The call is spanned at the return type: an error type without
    // `From<LockError>` is reported there.
    let krate_at_return = krate(options.crate_path.as_ref(), return_span);
    let one_key = quote!(::std::string::String);
    let several_keys = quote!(::std::vec::Vec<::std::string::String>);
    let (entry, key_type) = match (
        options.on_busy,
        options.several,
        options.permits,
        options.mode,
    ) {
        (OnBusy::Wait, true, ..) => (quote!(locked_all), several_keys),
        (OnBusy::Skip, true, ..) => (quote!(locked_all_or_skipped), several_keys),
        (_, false, Some(_), _) => (quote!(permitted), one_key),
        (_, false, None, Some(Mode::Read)) => (quote!(read_locked), one_key),
        (_, false, None, Some(Mode::Write)) => (quote!(write_locked), one_key),
        (OnBusy::Wait, false, None, None) => (quote!(locked), one_key),
        (OnBusy::Skip, false, None, None) => (quote!(locked_or_skipped), one_key),
    };
    // `permitted` takes the number of permits after the key.
    let permits = options.permits.map(|permits| {
        let permits = Literal::u32_unsuffixed(permits);
        quote!(#permits,)
    });
    let call = quote_spanned! {return_span=>
        #krate_at_return::__private::#entry(
            #manager_var,
            #key_var,
            #permits
            #lock_options,
            async move { #statements },
        )
        .await
    };

    quote! {
        #(#outer_attrs)*
        #vis #sig {
            #(#inner_attrs)*
            let #key_var: #key_type = #key;
            let #manager_var: ::core::option::Option<#krate_here::LockManager> = #manager;
            #call
        }
    }
}

/// `LockOptions::new()` labelled with the function's path (`module::name`,
/// which the lock records for operators) and the key template (the `lock`
/// label of its metrics), with a setter for each option the user wrote, and
/// only those: the defaults are the runtime's.
fn lock_options(options: &Options, krate: &TokenStream, function: &str) -> TokenStream {
    let millis = |ms: u64| {
        let ms = Literal::u64_unsuffixed(ms);
        quote!(::core::time::Duration::from_millis(#ms))
    };
    let template = options
        .keys
        .iter()
        .map(LitStr::value)
        .collect::<Vec<_>>()
        .join(", ");
    let mut setters = quote! {
        .label(::core::concat!(::core::module_path!(), "::", #function))
        .key_template(#template)
    };
    if let Some(ttl) = options.ttl_ms {
        let ttl = millis(ttl);
        setters.extend(quote!(.ttl(#ttl)));
    }
    if let Some(wait) = options.wait_ms {
        let wait = millis(wait);
        setters.extend(quote!(.wait(#wait)));
    }
    if let Some(renew) = options.renew {
        setters.extend(quote!(.renew(#renew)));
    }
    if let Some(reentrant) = options.reentrant {
        setters.extend(quote!(.reentrant(#reentrant)));
    }
    if let Some(on_lost) = options.on_lost {
        let variant = match on_lost {
            OnLost::Cancel => quote!(Cancel),
            OnLost::Continue => quote!(Continue),
        };
        setters.extend(quote!(.on_lost(#krate::OnLost::#variant)));
    }
    if let Some(fenced) = options.fenced {
        setters.extend(quote!(.fenced(#fenced)));
    }
    if let Some(hold) = options.hold_at_least_ms {
        let hold = millis(hold);
        setters.extend(quote!(.hold_at_least(#hold)));
    }
    match options.min_replicas {
        Some((replicas, Some(timeout))) => {
            let timeout = millis(timeout);
            setters.extend(quote!(.min_replicas(#replicas, #timeout)));
        }
        Some((replicas, None)) => {
            setters.extend(quote!(.min_replicas_default_timeout(#replicas)));
        }
        None => {}
    }
    quote!(#krate::LockOptions::new() #setters)
}
