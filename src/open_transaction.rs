//! The check `#[distributed_lock]`'s expansion asks the compiler to prove
//! for each parameter: that its type is not an sqlx transaction or a
//! `&mut` to an sqlx connection, whatever name it goes by (a type alias
//! such as `type Tx = sqlx::Transaction<'static, Sqlite>`, which the
//! attribute's look at the signature's spelling cannot see through).
//!
//! The expansion calls `(&Probe::of(&param)).verdict()` with the three
//! traits below in scope. Method lookup tries the receiver's own type
//! (`&Probe<T>`) before borrowing it again, so `Transactional::verdict` or
//! `Connected::verdict` (whose receiver is `&Probe<T>`) is chosen when
//! `Probe<T>` implements it, and `Fallback::verdict` (receiver
//! `&&Probe<T>`) otherwise. (Two traits, not one: sqlx could one day make
//! its `Transaction` a `Connection`, so one trait's two impls would
//! overlap.) The
//! verdict goes to [`not_open_transaction`], whose bound only [`Passed`]
//! meets: a transaction fails to compile with the message below, at the
//! parameter. A generic parameter is not known to be a transaction, so it
//! passes, as does everything without the `sqlite` or `postgres` feature.

use std::marker::PhantomData;

/// What a parameter's type is, to choose its verdict by.
#[derive(Debug)]
pub struct Probe<T: ?Sized>(PhantomData<fn() -> *const T>);

impl<T: ?Sized> Probe<T> {
    /// The probe of `value`'s type.
    pub fn of(_value: &T) -> Self {
        Probe(PhantomData)
    }
}

/// The verdict for a type that is not a transaction.
#[derive(Debug)]
pub struct Passed;

/// The verdict for a transaction or a `&mut` to a connection.
#[derive(Debug)]
pub struct OpenTransaction;

/// The verdict for every type [`Transactional`] does not claim.
pub trait Fallback {
    /// [`Passed`].
    fn verdict(&self) -> Passed {
        Passed
    }
}

impl<T: ?Sized> Fallback for &Probe<T> {}

/// The verdict for sqlx's transactions, owned or `&mut`.
pub trait Transactional {
    /// [`OpenTransaction`].
    fn verdict(&self) -> OpenTransaction {
        OpenTransaction
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl<DB: sqlx::Database> Transactional for Probe<sqlx::Transaction<'_, DB>> {}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl<DB: sqlx::Database> Transactional for Probe<&mut sqlx::Transaction<'_, DB>> {}

/// The verdict for a `&mut` to an sqlx connection.
pub trait Connected {
    /// [`OpenTransaction`].
    fn verdict(&self) -> OpenTransaction {
        OpenTransaction
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl<C: sqlx::Connection> Connected for Probe<&mut C> {}

/// Met by [`Passed`] only.
#[diagnostic::on_unimplemented(
    message = "this parameter is an sqlx transaction or connection (its type may be an alias): the lock would be released when the function returns, before the caller commits",
    label = "an open transaction, seen through its type",
    note = "take the lock before the transaction begins: let this function open it with `#[transactional(pool = ...)]`, or lock the function that begins it; if the caller commits before anyone else may act on the data, write `allow_open_transaction = true` in the attribute"
)]
pub trait NotAnOpenTransaction {}

#[diagnostic::do_not_recommend]
impl NotAnOpenTransaction for Passed {}

/// Compiles only for [`Passed`].
pub fn not_open_transaction<V: NotAnOpenTransaction>(_verdict: V) {}
