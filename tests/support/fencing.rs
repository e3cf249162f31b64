//! [`FencedStore`]: the storage side of fencing tokens.

use std::sync::{Mutex, PoisonError};

/// A store that accepts a write only with a fencing token at least as high as
/// every token it accepted before (what `UPDATE … WHERE fence <= $token`
/// does), and keeps the values it accepted.
#[derive(Debug, Default)]
pub struct FencedStore {
    /// The highest token accepted so far, and the accepted values in order.
    state: Mutex<(u64, Vec<&'static str>)>,
}

/// A write [`FencedStore`] refused: its token is below one already accepted.
#[derive(Debug, PartialEq)]
pub struct StaleWrite {
    /// The token of the refused write.
    pub token: u64,
    /// The highest token the store had accepted.
    pub highest: u64,
}

impl FencedStore {
    /// Stores `value` unless `token` is stale.
    pub fn write(&self, token: u64, value: &'static str) -> Result<(), StaleWrite> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if token < state.0 {
            return Err(StaleWrite {
                token,
                highest: state.0,
            });
        }
        state.0 = token;
        state.1.push(value);
        Ok(())
    }

    /// The accepted values, in the order they were written.
    pub fn values(&self) -> Vec<&'static str> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1
            .clone()
    }
}
