//! What both attributes require of the function they annotate: an `async
//! fn` returning a `Result`-like type.

use proc_macro2::{Span, TokenStream};
use syn::{ItemFn, ReturnType, Signature, Type, TypePath};

use crate::shared::errors::Errors;

/// One attribute's requirements, for its messages.
pub(crate) struct Requirements {
    /// The attribute as written in messages: `#[distributed_lock]`.
    pub(crate) attribute: &'static str,
    /// The error the return type's `E` must convert from: `LockError`.
    pub(crate) error: &'static str,
}

/// The annotated item as a function; otherwise the error to emit with it.
pub(crate) fn function(item: TokenStream, requirements: &Requirements) -> syn::Result<ItemFn> {
    syn::parse2(item).map_err(|_| {
        let message = format!("{} applies to an `async fn`", requirements.attribute);
        syn::Error::new(Span::call_site(), message)
    })
}

/// Records what the attribute cannot wrap in this signature; returns the
/// declared return type if it is acceptable.
pub(crate) fn check(
    sig: &Signature,
    requirements: &Requirements,
    errors: &mut Errors,
) -> Option<Type> {
    if sig.asyncness.is_none() {
        let message = format!("{} requires an `async fn`", requirements.attribute);
        errors.push(syn::Error::new(sig.fn_token.span, message));
    }
    let result_required = format!(
        "the function must return `Result<T, E>` where `E: From<{}>`",
        requirements.error
    );
    match &sig.output {
        ReturnType::Type(_, ty) if is_result_like(ty) => Some((**ty).clone()),
        ReturnType::Type(_, ty) => {
            errors.push(syn::Error::new_spanned(ty, result_required));
            None
        }
        // No return type: point where it would go, after the parameters.
        ReturnType::Default => {
            let close = sig.paren_token.span.close();
            errors.push(syn::Error::new(close, result_required));
            None
        }
    }
}

/// A path whose last segment is `Result` or ends with it (`io::Result<T>`,
/// `AppResult<T>`). Whether it really is a `Result` whose error converts is
/// left to the compiler, through the runtime's trait bound.
fn is_result_like(ty: &Type) -> bool {
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

    const LOCK: Requirements = Requirements {
        attribute: "#[distributed_lock]",
        error: "LockError",
    };

    fn result_like(ty: &str) -> bool {
        is_result_like(&syn::parse_str(ty).unwrap())
    }

    fn messages(signature: &str) -> Vec<String> {
        let mut errors = Errors::default();
        check(&syn::parse_str(signature).unwrap(), &LOCK, &mut errors);
        match errors.finish() {
            Ok(()) => Vec::new(),
            Err(error) => error.into_iter().map(|e| e.to_string()).collect(),
        }
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

    #[test]
    fn messages_name_the_attribute_and_its_error_type() {
        assert_eq!(
            messages("fn f() -> u8"),
            [
                "#[distributed_lock] requires an `async fn`",
                "the function must return `Result<T, E>` where `E: From<LockError>`",
            ]
        );
        assert!(messages("async fn f() -> Result<(), E>").is_empty());
    }
}
