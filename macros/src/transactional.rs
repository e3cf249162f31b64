//! `#[transactional(pool = ...)]`: the body runs with a database transaction
//! that commits when it returns `Ok` and rolls back otherwise; and the
//! re-ordering that lets `#[distributed_lock]` always end up outside it.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{AttrStyle, Attribute, Expr, ExprPath, Ident, ItemFn, LitStr, Path, ReturnType, Token};

use crate::args::{self, Arg};
use crate::errors::Errors;
use crate::signature::is_result_like;

/// Every option, for the "unknown option" message.
const VALID_OPTIONS: &str = "`pool`, `tx`, `begin`, `crate`";

const RESULT_REQUIRED: &str =
    "the function must return `Result<T, E>` where `E: From<sqlx::Error>`";

/// The attribute's configuration.
struct Options {
    /// Expression giving the pool: any `Borrow<sqlx::Pool<DB>>`.
    pool: Expr,
    /// The name the body sees the transaction under (`tx` by default).
    tx: Ident,
    /// The statement that opens the transaction, instead of the driver's.
    begin: Option<LitStr>,
    /// Path of the `distributed_lock` crate; `None` means `::distributed_lock`.
    crate_path: Option<Path>,
}

/// Expands `#[transactional(args)] item`; on any mistake, emits the function
/// unchanged next to the errors.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let Ok(function) = syn::parse2::<ItemFn>(item.clone()) else {
        let error = syn::Error::new(
            Span::call_site(),
            "#[transactional] applies to an `async fn`",
        );
        return with_error(item, error);
    };
    let mut errors = Errors::default();
    let options = parse(args, &mut errors);
    if function.sig.asyncness.is_none() {
        errors.push(syn::Error::new(
            function.sig.fn_token.span,
            "#[transactional] requires an `async fn`",
        ));
    }
    let return_type = match &function.sig.output {
        ReturnType::Type(_, ty) if is_result_like(ty) => Some((**ty).clone()),
        ReturnType::Type(_, ty) => {
            errors.push(syn::Error::new_spanned(ty, RESULT_REQUIRED));
            None
        }
        ReturnType::Default => {
            let close = function.sig.paren_token.span.close();
            errors.push(syn::Error::new(close, RESULT_REQUIRED));
            None
        }
    };
    match (errors.finish(), options, return_type) {
        (Ok(()), Some(options), Some(return_type)) => rewrite(function, &options, &return_type),
        (Err(error), ..) => with_error(item, error),
        (Ok(()), ..) => unreachable!("a step that yields nothing records an error"),
    }
}

fn with_error(item: TokenStream, error: syn::Error) -> TokenStream {
    let error = error.into_compile_error();
    quote! { #item #error }
}

/// Reads the arguments; `None` when `pool` is missing or they are not
/// `name = value` pairs.
fn parse(args: TokenStream, errors: &mut Errors) -> Option<Options> {
    let args = args::distinct_args(args, errors)?;
    let mut pool = None;
    let mut tx = Ident::new("tx", Span::call_site());
    let mut begin = None;
    let mut crate_path = None;
    for Arg { name, value } in args {
        match name.to_string().as_str() {
            "pool" => pool = Some(value),
            "tx" => tx = errors.check(binding(value)).unwrap_or(tx),
            "begin" => begin = errors.check(args::string(&value, "begin", r#""BEGIN IMMEDIATE""#)),
            "crate" => crate_path = errors.check(args::path(value)),
            other => {
                let message = format!("unknown option `{other}`; valid options: {VALID_OPTIONS}");
                errors.push(syn::Error::new(name.span(), message));
            }
        }
    }
    if pool.is_none() {
        errors.push(syn::Error::new(
            Span::call_site(),
            "missing `pool`: write e.g. `#[transactional(pool = self.db)]`",
        ));
    }
    Some(Options {
        pool: pool?,
        tx,
        begin,
        crate_path,
    })
}

/// A plain name for the transaction, such as `tx = conn`.
fn binding(value: Expr) -> syn::Result<Ident> {
    let name = match &value {
        Expr::Path(ExprPath {
            attrs,
            qself: None,
            path,
        }) if attrs.is_empty() => path.get_ident().cloned(),
        _ => None,
    };
    name.ok_or_else(|| {
        syn::Error::new_spanned(
            value,
            "`tx` takes a name for the transaction, e.g. `tx = conn`",
        )
    })
}

/// The function with its signature and attributes kept; its body runs with
/// the transaction bound to `options.tx`, and its result decides commit or
/// rollback. `return` and `?` in the body leave only the body (an inner
/// `async` block), so the decision always runs; a panic or cancellation drops
/// the transaction, which rolls it back. When the transaction cannot begin,
/// the body does not run.
fn rewrite(function: ItemFn, options: &Options, return_type: &syn::Type) -> TokenStream {
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
    let krate = match &options.crate_path {
        Some(path) => path.to_token_stream(),
        None => quote_spanned!(return_span=> ::distributed_lock),
    };

    // Mixed-site hygiene: the user's code cannot name these.
    let transaction = Ident::new("__distributed_lock_transaction", Span::mixed_site());
    let result = Ident::new("__distributed_lock_result", Span::mixed_site());
    let error = Ident::new("__distributed_lock_error", Span::mixed_site());
    let return_var = Ident::new("__distributed_lock_return", Span::mixed_site());
    // The argument the compiler blames for an error type without
    // `From<sqlx::Error>`: spanned at the return type, so that the error is
    // reported there. It is bound after the body, which cannot see it.
    let outcome = Ident::new("__distributed_lock_outcome", return_span);
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

    let fake_return_edge = crate::return_edge::fake_return_edge(return_type, &return_var);
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
                        #fake_return_edge
                        #block
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

/// For `#[distributed_lock]`: when the function still carries a
/// `#[transactional(..)]` attribute, it was written *below* the lock and
/// would expand outside it, beginning the transaction before the lock is
/// taken and committing after it is released. Returns the function again
/// with that attribute moved above a copy of `#[distributed_lock(args)]`, so
/// that the transaction expands first and the lock wraps it; `None` when there
/// is no such attribute.
pub(crate) fn move_above_lock(lock_args: &TokenStream, function: &ItemFn) -> Option<TokenStream> {
    let position = function.attrs.iter().position(is_transactional)?;
    let mut function = function.clone();
    let transactional = function.attrs.remove(position);
    let krate = lock_args_crate(lock_args)
        .map_or_else(|| quote!(::distributed_lock), |path| path.to_token_stream());
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

/// The `crate = path` option of `#[distributed_lock(..)]`, if given and
/// readable; mistakes are reported when the copy expands.
fn lock_args_crate(lock_args: &TokenStream) -> Option<Path> {
    let args = Punctuated::<Arg, Token![,]>::parse_terminated
        .parse2(lock_args.clone())
        .ok()?;
    args.into_iter()
        .find(|arg| arg.name == "crate")
        .and_then(|arg| args::path(arg.value).ok())
}
