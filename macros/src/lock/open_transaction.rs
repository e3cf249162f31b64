//! The lint against locking inside a caller's transaction.
//!
//! A locked function that receives an open transaction (`&mut Transaction<'_,
//! Postgres>`, `&mut PgConnection` borrowed from one) writes through it, then
//! returns and releases the lock; the caller commits later. Until then the
//! next holder of the lock reads data from before those writes. The fix is to
//! take the lock before the transaction begins, so parameters that look like a
//! transaction are refused unless `allow_open_transaction = true`.
//!
//! Two checks: [`check`] reads the signature's spelling and explains in
//! full; [`proofs`] asks the compiler to prove of each parameter's type,
//! whatever name it goes by (a type alias), that it is not sqlx's
//! `Transaction` or a `&mut` to an sqlx connection (see the `leasehold`
//! crate's `open_transaction.rs`).

use proc_macro2::TokenStream;
use quote::quote_spanned;
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{FnArg, Pat, PatIdent, PatType, PathArguments, Signature, Type, TypePath, TypeReference};

use crate::shared::errors::Errors;

/// Records an error at each parameter of `sig` whose type looks like an open
/// transaction: a type that names `Transaction` with arguments anywhere
/// (`Transaction<'_, Postgres>`; a domain type `Transaction` without them is
/// left alone), or a `&mut` to a type whose last path segment ends with
/// `Connection`, unless it is plainly not a database's (a Redis connection).
/// Syntax cannot tell for sure, so the message says "looks like" and names
/// the opt-out.
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

/// One statement per parameter bound to a name, spanned at the parameter,
/// that compiles only if its type is not an sqlx transaction or a `&mut`
/// to an sqlx connection; `krate` is the path of the `leasehold` crate.
/// Parameters bound by a pattern are left to [`check`].
pub(crate) fn proofs(sig: &Signature, krate: &TokenStream) -> TokenStream {
    sig.inputs
        .iter()
        .filter_map(|input| match input {
            FnArg::Typed(param) => match &*param.pat {
                Pat::Ident(PatIdent { ident, .. }) => Some((param.span(), ident)),
                _ => None,
            },
            FnArg::Receiver(_) => None,
        })
        .map(|(span, ident)| {
            quote_spanned! {span=>
                {
                    #[allow(unused_imports)]
                    use #krate::__private::open_transaction::{
                        Connected as _, Fallback as _, Transactional as _,
                    };
                    #krate::__private::open_transaction::not_open_transaction(
                        (&#krate::__private::open_transaction::Probe::of(&#ident)).verdict(),
                    );
                }
            }
        })
        .collect()
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
        Found::Transaction => "looks like a database transaction opened by the caller",
        Found::Connection => {
            "looks like a database connection, which may be inside a transaction opened by the caller"
        }
    };
    format!(
        "{name} {what}: if so, the lock would be released when `{function}` returns, before \
         the caller commits, so the next holder could read data from before this call's \
         writes. Take the lock before the transaction begins: let this function open it with \
         `#[transactional(pool = ...)]`, or lock the function that begins it. If it is not \
         an open transaction, or the caller commits before anyone else may act on the data, \
         write `allow_open_transaction = true` in the attribute",
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
        let transaction = ty.path.segments.iter().any(|segment| {
            segment.ident == "Transaction" && !matches!(segment.arguments, PathArguments::None)
        });
        if transaction {
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
/// `sqlx::SqliteConnection`, `PoolConnection<Postgres>`, `DB::Connection`;
/// not a Redis connection (a path through `redis`, or redis-rs's
/// `MultiplexedConnection` and `ClusterConnection`), which has no
/// transaction to commit later.
fn is_connection(ty: &Type) -> bool {
    const NOT_DATABASES: &[&str] = &["MultiplexedConnection", "ClusterConnection"];
    match ty {
        Type::Path(TypePath { path, .. }) => {
            let redis = path.segments.iter().any(|segment| segment.ident == "redis");
            !redis
                && path.segments.last().is_some_and(|last| {
                    let name = last.ident.to_string();
                    name.ends_with("Connection")
                        && !name.contains("Redis")
                        && !NOT_DATABASES.contains(&name.as_str())
                })
        }
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
                errors[0]
                    .starts_with("`tx` looks like a database transaction opened by the caller"),
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
                errors[0].starts_with("`conn` looks like a database connection"),
                "{errors:?}"
            );
        }
    }

    #[test]
    fn every_flagged_parameter_is_reported() {
        let errors = flagged("async fn f(a: &mut PgConnection, (b, c): (Transaction<'_, Pg>, u8))");
        assert_eq!(errors.len(), 2);
        assert!(errors[1].starts_with("this parameter looks like a database transaction"));
    }

    #[test]
    fn the_message_names_the_fix_and_the_opt_out() {
        let errors = flagged("async fn pay(tx: &mut Transaction<'_, Postgres>)");
        assert!(errors[0].contains("when `pay` returns, before the caller commits"));
        assert!(errors[0].contains("#[transactional(pool = ...)]"));
        assert!(errors[0].contains("allow_open_transaction = true"));
        assert!(errors[0].contains("if so,"));
    }

    #[test]
    fn other_parameters_are_accepted() {
        for signature in [
            "async fn f(&mut self, pool: &PgPool, conn: &PgConnection)",
            "async fn f(pool: &Pool<Postgres>, redis: MultiplexedConnection)",
            "async fn f(order: &Order, transactions: Vec<TransactionId>)",
            "async fn f(db: &mut Database, log: &mut ConnectionLog)",
            // Domain types and Redis connections, which hold no transaction.
            "async fn f(payment: &Transaction, all: &[Transaction])",
            "async fn f(conn: &mut MultiplexedConnection)",
            "async fn f(conn: &mut redis::aio::MultiplexedConnection)",
            "async fn f(conn: &mut redis::cluster_async::ClusterConnection)",
            "async fn f(conn: &mut redis::aio::Connection, c: &mut RedisConnection)",
        ] {
            assert!(flagged(signature).is_empty(), "{signature}");
        }
    }
}
