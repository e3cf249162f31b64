//! Taking a lease: one attempt→wait→retry engine for every kind.

pub(crate) mod pending;
