//! `#[distributed_lock(...)]`: the function's body runs inside the runtime's
//! `locked` call, under the key its template builds.

mod boxed_future;
mod duration;
mod key;
mod open_transaction;
mod options;
mod setting;
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
use boxed_future::BoxedFuture;
use options::{Mode, OnBusy, OnLost, Options};
use setting::Setting;

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
    // A method of an `#[async_trait]` impl: checked and wrapped as the
    // `async fn` it was written as, then boxed again. On a mistake, the
    // method is emitted as async-trait left it.
    let (boxed, wrapped) = match BoxedFuture::recognise(&function) {
        Some((boxed, unboxed)) => (Some(boxed), unboxed),
        None => (None, function.clone()),
    };
    if let Some(error) = stacking::runtime_attribute_above(&wrapped) {
        return with_error(function.into_token_stream(), error);
    }
    let mut errors = Errors::default();
    let options = options::parse(args.clone(), &mut errors);
    let return_type = signature::check(&wrapped.sig, &REQUIREMENTS, &mut errors);
    if options
        .as_ref()
        .is_some_and(|options| !options.allow_open_transaction)
    {
        open_transaction::check(&wrapped.sig, &mut errors);
    }
    let key = options.as_ref().and_then(|options| {
        let krate = krate(options.crate_path.as_ref(), Span::call_site());
        let return_span = return_type
            .as_ref()
            .map_or_else(Span::call_site, Spanned::span);
        let bail = |checked| or_refused(checked, options, return_span);
        let keys: Vec<TokenStream> = options
            .keys
            .iter()
            .filter_map(|key| key::format_call(key, &wrapped.sig, &krate, &bail, &mut errors))
            .collect();
        match (keys.len() == options.keys.len(), options.several) {
            (false, _) => None,
            (true, false) => keys.into_iter().next(),
            (true, true) => Some(quote!(::std::vec![#(#keys),*])),
        }
    });
    match (errors.finish(), options, key, return_type) {
        (Ok(()), Some(options), Some(key), Some(return_type)) => {
            let rewritten = rewrite(wrapped, &options, key, &return_type);
            match boxed {
                Some(boxed) => boxed.restore(rewritten),
                None => rewritten,
            }
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
    let return_span = return_type.span();
    let options_var = Ident::new("__leasehold_options", Span::mixed_site());
    let permits_var = Ident::new("__leasehold_permits", Span::mixed_site());
    let krate_at_return = krate(options.crate_path.as_ref(), return_span);
    let bail = |checked| or_refused(checked, options, return_span);
    let label = label(&sig);
    let lock_options = lock_options(options, &krate_here, label, bail);
    let statements = crate::shared::body::statements(&block, return_type, &return_var);
    let proofs = if options.allow_open_transaction {
        TokenStream::new()
    } else {
        open_transaction::proofs(&sig, &krate_here)
    };
    // What to lock, with a computed number of permits checked before the
    // lock is taken.
    let (target, permits_binding) = match (
        options.period,
        options.several,
        &options.permits,
        options.mode,
    ) {
        (Some(period), ..) => {
            let period = millis(period);
            (quote!(Period(#key_var, #period)), None)
        }
        (None, true, ..) => (quote!(Locks(#key_var)), None),
        (None, false, Some(Setting::Fixed(permits)), _) => {
            let permits = Literal::u32_unsuffixed(*permits);
            (quote!(Permit(#key_var, #permits)), None)
        }
        (None, false, Some(Setting::Computed(expr)), _) => {
            let value = quote_spanned!(expr.span()=> #krate_here::__private::permits(#expr));
            let checked = bail(value);
            (
                quote!(Permit(#key_var, #permits_var)),
                Some(quote!(let #permits_var: u32 = #checked;)),
            )
        }
        (None, false, None, Some(Mode::Read)) => (quote!(Read(#key_var)), None),
        (None, false, None, Some(Mode::Write)) => (quote!(Write(#key_var)), None),
        (None, false, None, None) => (quote!(Lock(#key_var)), None),
    };
    let key_type = if options.several {
        quote!(::std::vec::Vec<::std::string::String>)
    } else {
        quote!(::std::string::String)
    };
    let on_busy = match options.on_busy {
        OnBusy::Wait => quote_spanned!(return_span=> Wait),
        OnBusy::Skip => quote_spanned!(return_span=> Skip),
    };
    // The call is spanned at the return type: an error type without
    // `From<LockError>` is reported there.
    let call = quote_spanned! {return_span=>
        #krate_at_return::__private::locked::<#krate_at_return::__private::#on_busy, _, _, _>(
            #manager_var,
            #krate_at_return::__private::Target::#target,
            #options_var,
            async move { #statements },
        )
        .await
    };

    quote! {
        #(#outer_attrs)*
        #vis #sig {
            #(#inner_attrs)*
            #proofs
            let #key_var: #key_type = #key;
            let #manager_var: ::core::option::Option<#krate_here::LockManager> = #manager;
            #permits_binding
            let #options_var = #lock_options;
            #call
        }
    }
}

/// `checked`'s value, or the end of the call with its `InvalidOptions`
/// before the lock is taken: a setting computed by the call that cannot be
/// used, a key placeholder that renders empty. Spanned at the return type
/// (`return_span`) like the entry point's call, which needs the same
/// conversion.
fn or_refused(checked: TokenStream, options: &Options, return_span: Span) -> TokenStream {
    let krate = krate(options.crate_path.as_ref(), return_span);
    quote_spanned! {return_span=>
        match #checked {
            ::core::result::Result::Ok(value) => value,
            ::core::result::Result::Err(error) => return #krate::__private::refused(error),
        }
    }
}

/// The path of the function, which the lock records for operators: its
/// type's path and name for a method (`shop::ExternalApi::call`: the type
/// is known only where the expansion runs, as `Self`), else its module's
/// path and name (`shop::call`).
fn label(sig: &syn::Signature) -> TokenStream {
    let function = sig.ident.to_string();
    if sig.receiver().is_some() {
        quote!(::std::format!("{}::{}", ::core::any::type_name::<Self>(), #function))
    } else {
        quote!(::core::concat!(::core::module_path!(), "::", #function))
    }
}

/// `LockOptions::new()` labelled with `label` (see [`label`]) and the key
/// template (the `lock` label of its metrics), with a setter for each option the user wrote, and
/// only those: the defaults are the runtime's. Settings written as
/// expressions go through `__private::Computed`, which checks their values;
/// `bail` makes its result the options or the call's early error.
fn lock_options(
    options: &Options,
    krate: &TokenStream,
    label: TokenStream,
    bail: impl Fn(TokenStream) -> TokenStream,
) -> TokenStream {
    let template = options
        .keys
        .iter()
        .map(LitStr::value)
        .collect::<Vec<_>>()
        .join(", ");
    let mut setters = quote! {
        .label(#label)
        .key_template(#template)
    };
    // Setters of `__private::Computed`, for the expressions.
    let mut computed = TokenStream::new();
    let mut duration = |name: &str, value: &Setting<u64>| {
        let name = Ident::new(name, Span::call_site());
        match value {
            Setting::Fixed(ms) => {
                let ms = millis(*ms);
                setters.extend(quote!(.#name(#ms)));
            }
            // Spanned at the expression: a value of the wrong type is reported there.
            Setting::Computed(expr) => computed.extend(quote_spanned!(expr.span()=> .#name(#expr))),
        }
    };
    if let Some(ttl) = &options.ttl {
        duration("ttl", ttl);
    }
    if let Some(wait) = &options.wait {
        duration("wait", wait);
    }
    if let Some(hold) = &options.hold_at_least {
        duration("hold_at_least", hold);
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
    match &options.min_replicas {
        Some((Setting::Fixed(replicas), Some(Setting::Fixed(timeout)))) => {
            let timeout = millis(*timeout);
            setters.extend(quote!(.min_replicas(#replicas, #timeout)));
        }
        Some((Setting::Fixed(replicas), None)) => {
            setters.extend(quote!(.min_replicas_default_timeout(#replicas)));
        }
        Some((replicas, timeout)) => {
            let replicas = computed_value(replicas, |count| quote!(#count));
            let timeout = match timeout {
                Some(timeout) => {
                    let timeout = computed_value(timeout, millis);
                    quote!(::core::option::Option::Some(#timeout))
                }
                None => quote!(::core::option::Option::None),
            };
            computed.extend(quote!(.min_replicas(#replicas, #timeout)));
        }
        None => {}
    }
    let literal = quote!(#krate::LockOptions::new() #setters);
    if computed.is_empty() {
        return literal;
    }
    bail(quote! {
        #krate::__private::Computed::new(#literal) #computed .finish()
    })
}

/// A literal duration of `ms` milliseconds.
fn millis(ms: u64) -> TokenStream {
    let ms = Literal::u64_unsuffixed(ms);
    quote!(::core::time::Duration::from_millis(#ms))
}

/// The value of `setting` as an expression: a literal as `literal` writes
/// it, or the user's expression, spanned there for type errors.
fn computed_value<T: Copy>(
    setting: &Setting<T>,
    literal: impl Fn(T) -> TokenStream,
) -> TokenStream {
    match setting {
        Setting::Fixed(value) => literal(*value),
        Setting::Computed(expr) => quote_spanned!(expr.span()=> #expr),
    }
}
