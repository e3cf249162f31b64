//! The options of `#[distributed_lock(...)]`: `name = value` pairs read into
//! [`Options`].

use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, ExprPath, Ident, Lit, LitStr, Path, Token};

use crate::duration::{self, DurationError};
use crate::errors::Errors;

/// Every option, for the "unknown option" message.
const VALID_OPTIONS: &str = "`key`, `ttl`, `wait`, `renew`, `reentrant`, `on_lost`, `client`, \
     `min_replicas`, `replica_timeout`, `allow_open_transaction`, `crate`";

/// Longest default wait for replica acknowledgements: 200 ms, or half the ttl if shorter.
const DEFAULT_REPLICA_TIMEOUT_MS: u64 = 200;

/// Default lease: 30 s.
const DEFAULT_TTL_MS: u64 = 30_000;

/// The attribute's configuration, defaults filled in.
pub(crate) struct Options {
    /// The key template, still unparsed: `key.rs` reads it against the
    /// function's parameters.
    pub(crate) key: LitStr,
    pub(crate) ttl_ms: u64,
    pub(crate) wait_ms: u64,
    pub(crate) renew: bool,
    pub(crate) reentrant: bool,
    pub(crate) on_lost: OnLost,
    /// Expression giving the manager; `None` uses the installed one.
    pub(crate) client: Option<Expr>,
    /// Path of the `distributed_lock` crate; `None` means `::distributed_lock`.
    pub(crate) crate_path: Option<Path>,
    /// Accept parameters that look like a caller's open transaction.
    pub(crate) allow_open_transaction: bool,
    /// Replicas that must acknowledge the acquisition, and how long to wait for them.
    pub(crate) min_replicas: Option<(u32, u64)>,
}

/// What the body does when the lease is lost.
#[derive(Clone, Copy)]
pub(crate) enum OnLost {
    Cancel,
    Continue,
}

/// One `name = value` as written.
pub(crate) struct Arg {
    pub(crate) name: Ident,
    pub(crate) value: Expr,
}

impl Parse for Arg {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        // `crate` is a keyword, hence `parse_any`.
        let name = input.call(Ident::parse_any)?;
        if !input.peek(Token![=]) {
            let message = format!("expected `{name} = ...`: options are written `name = value`");
            return Err(syn::Error::new(name.span(), message));
        }
        input.parse::<Token![=]>()?;
        let value = input.parse()?;
        Ok(Arg { name, value })
    }
}

/// Reads the attribute's arguments. Each wrong option is recorded in
/// `errors` and replaced by its default, so that later checks still run;
/// `None` when the key is missing or invalid, or the arguments are not
/// `name = value` pairs.
pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> Option<Options> {
    let args = distinct_args(args, errors)?;
    let key_given = args.iter().any(|arg| arg.name == "key");
    let mut key = None;
    let mut ttl_ms = DEFAULT_TTL_MS;
    let mut wait_ms = 0;
    let mut renew = true;
    let mut reentrant = true;
    let mut on_lost = OnLost::Cancel;
    let mut client = None;
    let mut crate_path = None;
    let mut allow_open_transaction = false;
    let mut min_replicas = None;
    let mut replica_timeout = None;
    for Arg { name, value } in args {
        let name_text = name.to_string();
        // A wrong value is reported and the default kept.
        match name_text.as_str() {
            "key" => key = errors.check(string(&value, "key", r#""order:{order.id}""#)),
            "ttl" => ttl_ms = errors.check(millis(&value, "ttl")).unwrap_or(ttl_ms),
            "wait" => wait_ms = errors.check(millis(&value, "wait")).unwrap_or(wait_ms),
            "renew" => renew = errors.check(boolean(&value, "renew")).unwrap_or(renew),
            "reentrant" => {
                reentrant = errors
                    .check(boolean(&value, "reentrant"))
                    .unwrap_or(reentrant);
            }
            "on_lost" => on_lost = errors.check(parse_on_lost(&value)).unwrap_or(on_lost),
            "client" => client = Some(value),
            "allow_open_transaction" => {
                allow_open_transaction = errors
                    .check(boolean(&value, "allow_open_transaction"))
                    .unwrap_or(allow_open_transaction);
            }
            "min_replicas" => min_replicas = errors.check(replica_count(&value)),
            "replica_timeout" => {
                replica_timeout = errors
                    .check(millis(&value, "replica_timeout"))
                    .map(|ms| (ms, name.span()));
            }
            "crate" => crate_path = errors.check(path(value)),
            other => {
                let message = format!("unknown option `{other}`; valid options: {VALID_OPTIONS}");
                errors.push(syn::Error::new(name.span(), message));
            }
        }
    }
    if !key_given {
        errors.push(syn::Error::new(
            Span::call_site(),
            "missing `key`: write e.g. `#[distributed_lock(key = \"order:{order.id}\")]`",
        ));
    }
    let min_replicas = match (min_replicas, replica_timeout) {
        (Some(replicas), Some((timeout_ms, _))) => Some((replicas, timeout_ms)),
        (Some(replicas), None) => {
            Some((replicas, DEFAULT_REPLICA_TIMEOUT_MS.min(ttl_ms / 2).max(1)))
        }
        (None, Some((_, span))) => {
            errors.push(syn::Error::new(
                span,
                "`replica_timeout` needs `min_replicas`, e.g. `min_replicas = 1, replica_timeout = \"200ms\"`",
            ));
            None
        }
        (None, None) => None,
    };
    Some(Options {
        key: key?,
        ttl_ms,
        wait_ms,
        renew,
        reentrant,
        on_lost,
        client,
        crate_path,
        allow_open_transaction,
        min_replicas,
    })
}

/// A whole number of replicas, at least 1.
fn replica_count(value: &Expr) -> syn::Result<u32> {
    let invalid = || {
        syn::Error::new_spanned(
            value,
            "`min_replicas` takes a whole number of replicas, at least 1, e.g. `min_replicas = 1`",
        )
    };
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(count),
            ..
        }) => match count.base10_parse::<u32>() {
            Ok(count) if count > 0 => Ok(count),
            _ => Err(invalid()),
        },
        _ => Err(invalid()),
    }
}

/// Parses `name = value` pairs, reporting each repeated name (on its second
/// occurrence) and dropping it; `None` when the arguments are not such pairs.
pub(crate) fn distinct_args(args: TokenStream, errors: &mut Errors) -> Option<Vec<Arg>> {
    let args = errors.check(Punctuated::<Arg, Token![,]>::parse_terminated.parse2(args))?;
    let mut distinct: Vec<Arg> = Vec::new();
    for arg in args {
        if distinct.iter().any(|seen| seen.name == arg.name) {
            let message = format!("duplicate option `{}`", arg.name);
            errors.push(syn::Error::new(arg.name.span(), message));
        } else {
            distinct.push(arg);
        }
    }
    Some(distinct)
}

/// A string literal value.
pub(crate) fn string(value: &Expr, option: &str, example: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) => Ok(text.clone()),
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`{option}` takes a string literal, e.g. `{option} = {example}`"),
        )),
    }
}

/// A duration such as `"30s"`, in milliseconds; `ttl` must not be zero.
fn millis(value: &Expr, option: &str) -> syn::Result<u64> {
    let text = string(value, option, r#""30s""#)?;
    let invalid = |reason: DurationError| {
        let message = format!(
            "invalid duration {:?} for `{option}`: {reason}; accepted forms: {}",
            text.value(),
            duration::ACCEPTED_FORMS
        );
        syn::Error::new(text.span(), message)
    };
    let millis = duration::parse_millis(&text.value()).map_err(invalid)?;
    if option == "ttl" && millis == 0 {
        return Err(syn::Error::new(
            text.span(),
            "`ttl` must be greater than zero: the lease would expire before the body runs",
        ));
    }
    Ok(millis)
}

/// `true` or `false`.
fn boolean(value: &Expr, option: &str) -> syn::Result<bool> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(flag),
            ..
        }) => Ok(flag.value()),
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`{option}` takes `true` or `false`"),
        )),
    }
}

/// `"cancel"` or `"continue"`.
fn parse_on_lost(value: &Expr) -> syn::Result<OnLost> {
    let text = string(value, "on_lost", r#""cancel""#)?;
    match text.value().as_str() {
        "cancel" => Ok(OnLost::Cancel),
        "continue" => Ok(OnLost::Continue),
        _ => Err(syn::Error::new(
            text.span(),
            r#"`on_lost` takes "cancel" (stop the body at its next await) or "continue" (let it finish)"#,
        )),
    }
}

/// A plain path such as `my_crate::distributed_lock`.
pub(crate) fn path(value: Expr) -> syn::Result<Path> {
    match value {
        Expr::Path(ExprPath {
            attrs, qself, path, ..
        }) if attrs.is_empty() && qself.is_none() => Ok(path),
        other => Err(syn::Error::new_spanned(
            other,
            "`crate` takes a path, e.g. `crate = my_reexports::distributed_lock`",
        )),
    }
}
