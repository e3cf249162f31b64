//! What a stand-in for the `leasehold` crate must provide, besides its own
//! `locked`, for the `#[distributed_lock]` expansion to compile against it
//! (`crate = shim` in `macro_expansion.rs` and `transactional_order.rs`).

/// Declares, in the shim's `__private`, the items the expansion names
/// around its `locked` call: `Target` (these shims lock one key),
/// `KeyPart`, `OnBusy` and `Wait` (these shims wait).
#[macro_export]
macro_rules! shim_private_items {
    () => {
        /// The expansion's proof that no parameter is an open transaction.
        pub use leasehold::__private::open_transaction;

        /// What the expansion locks; these tests lock one key.
        pub enum Target {
            Lock(String),
        }

        /// A placeholder's value, as the runtime's `KeyPart`.
        pub trait KeyPart {
            fn key_part(&self) -> &dyn std::fmt::Display;
        }

        impl<T: std::fmt::Display> KeyPart for T {
            fn key_part(&self) -> &dyn std::fmt::Display {
                self
            }
        }

        /// A placeholder's value rendered into the key; these tests never
        /// refuse one.
        pub fn rendered(
            _written: &str,
            value: &dyn std::fmt::Display,
        ) -> Result<String, std::convert::Infallible> {
            Ok(value.to_string())
        }

        /// The early error of a call; never reached here.
        pub fn refused<T, E>(error: std::convert::Infallible) -> Result<T, E> {
            match error {}
        }

        /// What a call does when busy; these tests wait.
        pub trait OnBusy<T> {}

        pub struct Wait;

        impl<T> OnBusy<T> for Wait {}
    };
}
