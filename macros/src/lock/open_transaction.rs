//! The lint against locking inside a caller's transaction.
//!
//! A locked function that receives an open transaction (`&mut Transaction<'_,
//! Postgres>`, `&mut PgConnection` borrowed from one) writes through it, then
//! returns and releases the lock; the caller commits later. Until then the
//! next holder of the lock reads data from before those writes. The fix is to
//! take the lock before the transaction begins, so parameters that look like a
//! transaction are refused unless `allow_open_transaction = true`.

use syn::visit::Visit;
use syn::{FnArg, Pat, PatIdent, PatType, Signature, Type, TypePath, TypeReference};

use crate::shared::errors::Errors;

/// Records an error at each parameter of `sig` whose type looks like an open
/// transaction: a type that names `Transaction` anywhere, or a `&mut` to a
/// type whose last path segment ends with `Connection`.
pub(crate) fn check(sig: &Signature, errors: &mut Errors) {
    for input in &sig.inputs {
        let FnArg::Typed(param) = input else {
            continue;
        };
        let mut finder = Finder::default();
        finder.visit_type(&param.ty);
        if let Some(what) = finder.found {
            errors.push(syn::Error::new_spanned(param, message(param, what, sig)));
        }
    }
}

/// Why a parameter looks like a transaction.
#[derive(Clone, Copy)]
enum Found {
    Transaction,
    Connection,
}

fn message(param: &PatType, found: Found, sig: &Signature) -> String {
    let name = match &*param.pat {
        Pat::Ident(PatIdent { ident, .. }) => format!("`{ident}`"),
        _ => "this parameter".to_owned(),
    };
    let what = match found {
        Found::Transaction => "is a transaction opened by the caller",
        Found::Connection => "may be a connection inside a transaction opened by the caller",
    };
    format!(
        "{name} {what}: the lock would be released when `{function}` returns, before the \
         caller commits, so the next holder could read data from before this call's writes. \
         Take the lock before the transaction begins: let this function open it with \
         `#[transactional(pool = ...)]`, or lock the function that begins it. If the caller \
         commits before anyone else may act on the data, opt out with \
         `allow_open_transaction = true`",
        function = sig.ident,
    )
}

/// Finds the first transaction-like type inside a parameter's type.
#[derive(Default)]
struct Finder {
    found: Option<Found>,
}

impl Visit<'_> for Finder {
    fn visit_type_path(&mut self, ty: &TypePath) {
        if ty.path.segments.iter().any(|s| s.ident == "Transaction") {
            self.found.get_or_insert(Found::Transaction);
        }
        syn::visit::visit_type_path(self, ty);
    }

    fn visit_type_reference(&mut self, ty: &TypeReference) {
        if ty.mutability.is_some() && is_connection(&ty.elem) {
            self.found.get_or_insert(Found::Connection);
        }
        syn::visit::visit_type_reference(self, ty);
    }
}

/// A path whose last segment ends with `Connection`: `PgConnection`,
/// `sqlx::SqliteConnection`, `PoolConnection<Postgres>`, `DB::Connection`.
fn is_connection(ty: &Type) -> bool {
    match ty {
        Type::Path(TypePath { path, .. }) => path
            .segments
            .last()
            .is_some_and(|last| last.ident.to_string().ends_with("Connection")),
        Type::Group(group) => is_connection(&group.elem),
        Type::Paren(paren) => is_connection(&paren.elem),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flagged(signature: &str) -> Vec<String> {
        let sig: Signature = syn::parse_str(signature).unwrap();
        let mut errors = Errors::default();
        check(&sig, &mut errors);
        match errors.finish() {
            Ok(()) => Vec::new(),
            Err(error) => error.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn transactions_are_flagged() {
        for signature in [
            "async fn f(tx: &mut Transaction<'_, Postgres>)",
            "async fn f(tx: &mut sqlx::Transaction<'static, Sqlite>)",
            "async fn f(tx: Transaction<'static, Sqlite>)",
            "async fn f(tx: Option<&mut Transaction<'_, Postgres>>)",
            "async fn f(&self, id: u64, tx: &mut Transaction<'_, DB>)",
        ] {
            let errors = flagged(signature);
            assert_eq!(errors.len(), 1, "{signature}");
            assert!(
                errors[0].starts_with("`tx` is a transaction opened by the caller"),
                "{signature}: {errors:?}"
            );
        }
    }

    #[test]
    fn mutable_connections_are_flagged() {
        for signature in [
            "async fn f(conn: &mut PgConnection)",
            "async fn f(conn: &mut sqlx::SqliteConnection)",
            "async fn f(conn: &'a mut (PoolConnection<Postgres>))",
            "async fn f(conn: &mut <DB as Database>::Connection)",
        ] {
            let errors = flagged(signature);
            assert_eq!(errors.len(), 1, "{signature}");
            assert!(
                errors[0].starts_with("`conn` may be a connection"),
                "{errors:?}"
            );
        }
    }

    #[test]
    fn every_flagged_parameter_is_reported() {
        let errors = flagged("async fn f(a: &mut PgConnection, (b, c): (Transaction, u8))");
        assert_eq!(errors.len(), 2);
        assert!(errors[1].starts_with("this parameter is a transaction"));
    }

    #[test]
    fn the_message_names_the_fix_and_the_opt_out() {
        let errors = flagged("async fn pay(tx: &mut Transaction<'_, Postgres>)");
        assert!(errors[0].contains("when `pay` returns, before the caller commits"));
        assert!(errors[0].contains("#[transactional(pool = ...)]"));
        assert!(errors[0].contains("allow_open_transaction = true"));
    }

    #[test]
    fn other_parameters_are_accepted() {
        for signature in [
            "async fn f(&mut self, pool: &PgPool, conn: &PgConnection)",
            "async fn f(pool: &Pool<Postgres>, redis: MultiplexedConnection)",
            "async fn f(order: &Order, transactions: Vec<TransactionId>)",
            "async fn f(db: &mut Database, log: &mut ConnectionLog)",
        ] {
            assert!(flagged(signature).is_empty(), "{signature}");
        }
    }
}
