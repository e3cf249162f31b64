//! Type errors around `#[transactional]` point at the user's code: the error
//! type, the pool expression, and an attempt to end the transaction early.
use leasehold::{transactional, LockManager};
use sqlx::SqlitePool;

#[derive(Debug)]
pub struct ShopError;

pub struct Shop {
    db: SqlitePool,
    locks: LockManager,
}

impl Shop {
    #[transactional(pool = self.db)]
    async fn error_without_from(&self) -> Result<(), ShopError> {
        let _ = tx;
        Ok(())
    }

    #[transactional(pool = self.locks)]
    async fn pool_of_wrong_type(&self) -> Result<(), sqlx::Error> {
        let _ = tx;
        Ok(())
    }

    #[transactional(pool = self.db)]
    async fn commits_itself(&self) -> Result<(), sqlx::Error> {
        tx.commit().await
    }
}

fn main() {}
