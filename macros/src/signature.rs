//! What the attribute requires of the function's signature: `async`, and a
//! `Result`-like return type.

use syn::{ReturnType, Signature, Type, TypePath};

use crate::errors::Errors;

const RESULT_REQUIRED: &str = "the function must return `Result<T, E>` where `E: From<LockError>`";

/// Records what the lock cannot wrap in this signature; returns the declared
/// return type if it is acceptable.
pub(crate) fn check(sig: &Signature, errors: &mut Errors) -> Option<Type> {
    if sig.asyncness.is_none() {
        errors.push(syn::Error::new(
            sig.fn_token.span,
            "#[distributed_lock] requires an `async fn`",
        ));
    }
    match &sig.output {
        ReturnType::Type(_, ty) if is_result_like(ty) => Some((**ty).clone()),
        ReturnType::Type(_, ty) => {
            errors.push(syn::Error::new_spanned(ty, RESULT_REQUIRED));
            None
        }
        // No return type: point where it would go, after the parameters.
        ReturnType::Default => {
            let error = syn::Error::new(sig.paren_token.span.close(), RESULT_REQUIRED);
            errors.push(error);
            None
        }
    }
}

/// A path whose last segment is `Result` or ends with it (`io::Result<T>`,
/// `AppResult<T>`). Whether it really is a `Result` with `E: From<LockError>`
/// is left to the compiler, through the runtime's trait bound.
pub(crate) fn is_result_like(ty: &Type) -> bool {
    match ty {
        Type::Path(TypePath {
            qself: None, path, ..
        }) => path
            .segments
            .last()
            .is_some_and(|last| last.ident.to_string().ends_with("Result")),
        Type::Group(group) => is_result_like(&group.elem),
        Type::Paren(paren) => is_result_like(&paren.elem),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result_like(ty: &str) -> bool {
        is_result_like(&syn::parse_str(ty).unwrap())
    }

    #[test]
    fn result_paths_are_accepted() {
        for ty in [
            "Result<u32, MyError>",
            "std::result::Result<(), E>",
            "io::Result<Vec<u8>>",
            "anyhow::Result<()>",
            "AppResult<T>",
            "(Result<u8, E>)",
        ] {
            assert!(result_like(ty), "{ty}");
        }
    }

    #[test]
    fn other_types_are_rejected() {
        for ty in [
            "()",
            "u32",
            "Option<u32>",
            "ResultSet",
            "&Result<u8, E>",
            "(Result<u8, E>, u8)",
            "impl Future<Output = Result<u8, E>>",
            "<T as Trait>::Result",
        ] {
            assert!(!result_like(ty), "{ty}");
        }
    }
}
