//! Collects every mistake in one use of an attribute, so that one compile
//! reports them all, and emits them next to the function.

use proc_macro2::TokenStream;
use quote::quote;

/// Errors found so far, combined into one `syn::Error`.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    /// Records an error.
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Records the error of `result`, if any, and returns its value.
    pub(crate) fn check<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|error| self.push(error)).ok()
    }

    /// `Err` with every recorded error, or `Ok` if there were none.
    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// `item` as written, followed by `error`: the rest of the crate still
/// type-checks against the function and the IDE keeps working, while the user
/// sees only the attribute's own errors.
pub(crate) fn with_error(item: TokenStream, error: syn::Error) -> TokenStream {
    let error = error.into_compile_error();
    quote! { #item #error }
}
