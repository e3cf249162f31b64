//! Mistakes in `#[transactional(...)]` and in the function it annotates; a
//! pool parameter used only in the attribute draws no "unused variable"
//! warning on top of them.
use leasehold::transactional;
use sqlx::SqlitePool;

#[transactional]
async fn missing_pool() -> Result<(), sqlx::Error> {
    Ok(())
}

#[transactional(pool = db, isolation = "serializable", tx = conn, tx = t)]
async fn unknown_and_duplicate(db: &SqlitePool) -> Result<(), sqlx::Error> {
    Ok(())
}

#[transactional(pool = db, tx = self.conn, begin = BEGIN)]
async fn bad_values(db: &SqlitePool) -> Result<(), sqlx::Error> {
    Ok(())
}

#[transactional(pool = db)]
fn not_async(db: &SqlitePool) -> Result<(), sqlx::Error> {
    Ok(())
}

#[transactional(pool = db)]
async fn not_result(db: &SqlitePool) -> u32 {
    1
}

#[transactional(pool = db)]
struct NotAFunction;

fn main() {}
