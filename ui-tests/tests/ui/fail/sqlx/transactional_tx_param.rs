//! A parameter named as the transaction's binding (`tx`, or the name given
//! with `tx = ...`) would be hidden in the body: refused at the parameter.
use leasehold::transactional;
use sqlx::SqlitePool;

#[transactional(pool = db)]
async fn default_name(db: &SqlitePool, tx: u32) -> Result<u32, sqlx::Error> {
    Ok(tx)
}

#[transactional(pool = db, tx = conn)]
async fn chosen_name(db: &SqlitePool, conn: u32) -> Result<u32, sqlx::Error> {
    Ok(conn)
}

fn main() {}
