//! The body of the annotated function, moved into the `async` block that the
//! runtime drives, with a "fake return edge" that ties the block to the
//! function's declared return type.

use proc_macro2::{Delimiter, Group, Ident, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{Block, Type, TypeInfer};

/// The user's `block`, braces and all, as the value of the enclosing async
/// block, after a statement that never runs but fixes that async block's
/// output to `return_type`: `?` then converts errors into it, and a wrong
/// value in the body is reported against the user's code, not the generated
/// code. `return_var` names that statement's variable; it is unnameable by
/// the user.
///
/// The user's statements stay a block of their own, so lints that read a
/// block's statements see only the user's: a `use` or `const` at the top of
/// the body draws no `clippy::items_after_statements` for following the
/// generated statement. Its braces are located where the user wrote them
/// but belong to the expansion, so that `unused_braces` does not ask to
/// remove them from a one-line body.
pub(crate) fn statements(block: &Block, return_type: &Type, return_var: &Ident) -> TokenStream {
    let return_span = return_type.span();
    let return_type = inferable(return_type);
    let stmts = &block.stmts;
    let braces = Span::call_site().located_at(block.brace_token.span.join());
    let mut block = Group::new(Delimiter::Brace, quote!(#(#stmts)*));
    block.set_span(braces);
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
        #block
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
