//! Methods with every receiver form, reading `{self.field}`.
use std::sync::Arc;

use leasehold::{distributed_lock, LockError};

pub struct Account {
    id: u64,
    owner: Owner,
    balance: u64,
}

pub struct Owner {
    name: String,
}

impl Account {
    #[distributed_lock(key = "account:{self.id}")]
    pub async fn balance(&self) -> Result<u64, LockError> {
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:{self.id}:{amount}")]
    pub async fn deposit(&mut self, amount: u64) -> Result<u64, LockError> {
        self.balance += amount;
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:{self.owner.name}")]
    pub async fn close(self) -> Result<u64, LockError> {
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:{self.id}")]
    pub async fn shared(self: Arc<Self>) -> Result<u64, LockError> {
        Ok(self.balance)
    }

    /// `mut self` is moved into the body and still mutable there.
    #[distributed_lock(key = "account:{self.id}")]
    pub async fn drain(mut self) -> Result<u64, LockError> {
        let all = self.balance;
        self.balance = 0;
        Ok(all + self.balance)
    }
}

trait Ledger {
    async fn post(&self, entry: u64) -> Result<(), LockError>;
}

impl Ledger for Account {
    #[distributed_lock(key = "ledger:{self.id}:{entry}")]
    async fn post(&self, entry: u64) -> Result<(), LockError> {
        let _ = (entry, &self.owner.name);
        Ok(())
    }
}

fn main() {
    let account = || Account {
        id: 1,
        owner: Owner {
            name: "ann".to_owned(),
        },
        balance: 0,
    };
    spawnable(account().balance());
    spawnable(account().deposit(5));
    spawnable(account().close());
    spawnable(Arc::new(account()).shared());
    spawnable(account().drain());
    spawnable(account().post(7));
}

/// The futures must stay `Send`, so that they can be spawned.
fn spawnable<F: std::future::Future + Send>(_: F) {}
