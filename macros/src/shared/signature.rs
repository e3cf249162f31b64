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
        "the function must return `Result<T, E>` where `E: From<{}>`, or an alias of it \
         (`io::Result<T>`, `type Fallible<T> = Result<T, MyError>`)",
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

/// A type that may be a `Result`: any path (a macro cannot see through a
/// type alias, so `Fallible<T>`, `io::Result<T>` and `Outcome` may all be
/// one), except the standard types that plainly are not (`Option`, `Vec`,
/// `String`, `Box`, the primitives). Tuples, references, `impl Trait` and
/// the like are refused. Whether a path really is a `Result` whose error
/// converts is left to the compiler, which checks the body's value against
/// `Result<T, E>` at the return type.
fn is_result_like(ty: &Type) -> bool {
    const NOT_RESULTS: &[&str] = &[
        "Option", "Vec", "String", "Box", "bool", "char", "str", "u8", "u16", "u32", "u64", "u128",
        "usize", "i8", "i16", "i32", "i64", "i128", "isize", "f32", "f64",
    ];
    match ty {
        Type::Path(TypePath { path, .. }) => path
            .segments
            .last()
            .is_some_and(|last| !NOT_RESULTS.iter().any(|name| last.ident == name)),
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
            "Fallible<T>",
            "Outcome",
            "<T as Trait>::Result",
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
            "std::option::Option<u32>",
            "Vec<u8>",
            "String",
            "&Result<u8, E>",
            "(Result<u8, E>, u8)",
            "impl Future<Output = Result<u8, E>>",
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
                "the function must return `Result<T, E>` where `E: From<LockError>`, or an alias of \
                 it (`io::Result<T>`, `type Fallible<T> = Result<T, MyError>`)",
            ]
        );
        assert!(messages("async fn f() -> Result<(), E>").is_empty());
    }
}
