//! What both attributes share: one argument parser, one signature check, one
//! way to wrap the body and one way to report errors.

pub(crate) mod args;
pub(crate) mod body;
pub(crate) mod errors;
pub(crate) mod mention;
pub(crate) mod signature;
