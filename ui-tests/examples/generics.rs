//! Generics, where-clauses, lifetimes and `impl Trait` arguments.
use std::fmt::Display;

use leasehold::{distributed_lock, LockError};

pub struct Pair<'a, K> {
    pub key: &'a K,
    pub tag: (u8, &'a str),
}

#[distributed_lock(key = "pair:{pair.key}:{pair.tag.1}:{extra}")]
pub async fn generic<'a, 'b: 'a, K, V>(pair: Pair<'a, K>, extra: &'b V) -> Result<&'a K, LockError>
where
    K: Display + Sync,
    V: Display + ?Sized + Sync,
{
    let _ = extra;
    Ok(pair.key)
}

#[distributed_lock(key = "item:{item}")]
pub async fn with_impl_trait(item: impl Display + Send, count: usize) -> Result<usize, LockError> {
    Ok(item.to_string().len() + count)
}

pub struct Store<T> {
    pub name: T,
}

impl<T: Display + Sync> Store<T> {
    #[distributed_lock(key = "store:{self.name}:{id}")]
    pub async fn get<'s>(&'s self, id: u32) -> Result<&'s T, LockError> {
        let _ = id;
        Ok(&self.name)
    }
}

fn main() {
    let (key, extra) = (5u8, "extra");
    spawnable(generic(
        Pair {
            key: &key,
            tag: (1, "tag"),
        },
        extra,
    ));
    spawnable(with_impl_trait("item", 2));
    spawnable(Store { name: "store" }.get(3));
}

/// The futures must stay `Send`, so that they can be spawned.
fn spawnable<F: std::future::Future + Send>(_: F) {}
