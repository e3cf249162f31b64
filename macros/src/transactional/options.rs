//! The options of `#[transactional(...)]`, read into [`Options`].

use proc_macro2::{Span, TokenStream};
use syn::{Expr, ExprPath, Ident, LitStr, Path};

use crate::shared::args::{self, Args, Spec, CRATE};
use crate::shared::errors::Errors;

const POOL: &str = "pool";
const TX: &str = "tx";
const BEGIN: &str = "begin";

/// Every option of the attribute.
const SPEC: Spec = Spec {
    options: &[POOL, TX, BEGIN, CRATE],
    renamed: &[],
    positional: None,
};

/// The attribute's configuration.
pub(crate) struct Options {
    /// Expression giving the pool: any `Borrow<sqlx::Pool<DB>>`.
    pub(crate) pool: Expr,
    /// The name the body sees the transaction under (`tx` unless written).
    pub(crate) tx: Ident,
    /// The statement that opens the transaction; `None` leaves the choice to
    /// the runtime (`BEGIN IMMEDIATE` on SQLite, else the driver's `BEGIN`).
    pub(crate) begin: Option<LitStr>,
    /// Path of the `leasehold` crate; `None` means `::leasehold`.
    pub(crate) crate_path: Option<Path>,
}

/// Reads the arguments, recording each mistake in `errors`; `None` when
/// `pool` is missing or they are not `name = value` pairs.
pub(crate) fn parse(tokens: TokenStream, errors: &mut Errors) -> Option<Options> {
    let mut args = Args::parse(tokens, &SPEC, errors)?;
    let pool = args.take(POOL).map(|arg| arg.value);
    if pool.is_none() {
        errors.push(syn::Error::new(
            Span::call_site(),
            "missing `pool`: write e.g. `#[transactional(pool = self.db)]`",
        ));
    }
    let tx = args
        .take(TX)
        .and_then(|arg| errors.check(binding(arg.value)))
        .unwrap_or_else(|| Ident::new(TX, Span::call_site()));
    let begin = args
        .take(BEGIN)
        .and_then(|arg| errors.check(args::string(&arg.value, BEGIN, r#""BEGIN IMMEDIATE""#)));
    let crate_path = args
        .take(CRATE)
        .and_then(|arg| errors.check(args::crate_path(arg.value)));
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
            format!("`{TX}` takes a name for the transaction, e.g. `{TX} = conn`"),
        )
    })
}
