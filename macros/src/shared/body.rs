//! The body of the annotated function, moved into the `async` block that the
//! runtime drives, with a "fake return edge" that ties the block to the
//! function's declared return type.

use proc_macro2::{Ident, TokenStream};
use quote::quote_spanned;
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{Block, Type, TypeInfer};

/// The statements of `block`, spliced (not nested as a block, which the
/// compiler would flag as unnecessary braces around a one-line body), after a
/// statement that never runs but fixes the enclosing async block's output to
/// `return_type`: `?` then converts errors into it, and a wrong value in the
/// body is reported against the user's code, not the generated code.
/// `return_var` names that statement's variable; it is unnameable by the user.
pub(crate) fn statements(block: &Block, return_type: &Type, return_var: &Ident) -> TokenStream {
    let return_span = return_type.span();
    let stmts = &block.stmts;
    let return_type = inferable(return_type);
    quote_spanned! {return_span=>
        #[allow(
            unknown_lints,
            unreachable_code,
            clippy::diverging_sub_expression,
            clippy::empty_loop,
            clippy::needless_return,
        )]
        if false {
            let #return_var: #return_type = loop {};
            return #return_var;
        }
        #(#stmts)*
    }
}

/// `ty` with each `impl Trait` replaced by `_`, so that it can annotate a
/// `let` (the compiler infers the opaque type from the body).
fn inferable(ty: &Type) -> Type {
    struct ImplToInfer;
    impl VisitMut for ImplToInfer {
        fn visit_type_mut(&mut self, ty: &mut Type) {
            if let Type::ImplTrait(impl_trait) = ty {
                let underscore_token = syn::Token![_](impl_trait.impl_token.span);
                *ty = Type::Infer(TypeInfer {
                    attrs: Vec::new(),
                    underscore_token,
                });
            } else {
                syn::visit_mut::visit_type_mut(self, ty);
            }
        }
    }
    let mut ty = ty.clone();
    ImplToInfer.visit_type_mut(&mut ty);
    ty
}
