//! Options that take either a literal, checked at compile time, or any other
//! expression of the option's type, evaluated by each call before the lock is
//! taken and checked by the runtime (`ttl = "30s"` or `ttl = self.config.ttl`).

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ExprUnary, Lit, UnOp};

use crate::lock::duration::{self, DurationError};

/// One such option as written.
pub(crate) enum Setting<T> {
    /// A literal, read and checked: its value.
    Fixed(T),
    /// Any other expression: each call computes it.
    Computed(Expr),
}

impl<T: Copy> Setting<T> {
    /// The literal's value, if the option was written as one.
    pub(crate) fn fixed(&self) -> Option<T> {
        match self {
            Setting::Fixed(value) => Some(*value),
            Setting::Computed(_) => None,
        }
    }
}

/// A duration: a string literal such as `"30s"` in milliseconds, or a
/// `Duration` expression; with the span of what was written. A literal other
/// than a string (`ttl = 30`) is refused, naming both forms.
pub(crate) fn duration(value: &Expr, option: &str) -> syn::Result<(Setting<u64>, Span)> {
    let text = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) => text,
        _ if is_literal(value) => {
            let message = format!(
                "`{option}` takes a duration: a string literal such as `{option} = \"30s\"`, \
                 or a `std::time::Duration` expression such as `{option} = Duration::from_secs(30)` \
                 or `{option} = self.config.{option}`"
            );
            return Err(syn::Error::new_spanned(value, message));
        }
        _ => return Ok((Setting::Computed(value.clone()), value.span())),
    };
    let millis = duration::parse_millis(&text.value()).map_err(|reason: DurationError| {
        let message = format!(
            "invalid duration {:?} for `{option}`: {reason}; accepted forms: {}",
            text.value(),
            duration::ACCEPTED_FORMS
        );
        syn::Error::new(text.span(), message)
    })?;
    Ok((Setting::Fixed(millis), text.span()))
}

/// A count: an integer literal that fits a `u32`, or a `u32` expression. A
/// literal of another kind (`permits = "8"`, `permits = -1`) is refused with
/// `expected`, which names the forms.
pub(crate) fn count(value: &Expr, expected: &str) -> syn::Result<Setting<u32>> {
    let count = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(count),
            ..
        }) => count.base10_parse::<u32>().ok(),
        _ if is_literal(value) => None,
        _ => return Ok(Setting::Computed(value.clone())),
    };
    count
        .map(Setting::Fixed)
        .ok_or_else(|| syn::Error::new_spanned(value, expected))
}

/// Whether `value` is a literal, possibly negated (`-1`): a literal of the
/// wrong kind is the attribute's error, not a type error of the expansion.
fn is_literal(value: &Expr) -> bool {
    match value {
        Expr::Lit(_) => true,
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr,
            ..
        }) => is_literal(expr),
        _ => false,
    }
}
