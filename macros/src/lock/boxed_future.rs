//! `#[distributed_lock]` on a method of an `#[async_trait]` impl.
//!
//! `#[async_trait]` on the impl expands before the attributes of its methods,
//! so the lock sees a plain `fn` returning
//! `Pin<Box<dyn Future<Output = T> + Send + 'async_trait>>` whose body is
//! `Box::pin(async move { ... })`. Locking around that `fn` would hold the
//! lock only while the future is built, not while it runs. Instead, the
//! method is read back as the `async fn ... -> T` it was written as (the
//! async block's body as its body), wrapped like any other, and the wrapped
//! body is put back inside the boxed future: the lock is taken when the
//! future first runs and released when it ends.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{
    Block, Expr, ExprAsync, ExprCall, GenericArgument, ItemFn, PathArguments, ReturnType,
    Signature, Stmt, Type, TypeParamBound, TypePath,
};

/// A method in the shape async-trait gives it.
pub(crate) struct BoxedFuture {
    /// The signature as async-trait left it, emitted unchanged.
    sig: Signature,
    /// `Box::pin` as async-trait wrote it.
    pin: Expr,
    /// The attributes of the async block (async-trait writes none today).
    async_attrs: Vec<syn::Attribute>,
}

impl BoxedFuture {
    /// Recognises `fn ..(..) -> Pin<Box<dyn Future<Output = T> + ..>> {
    /// Box::pin(async move { .. }) }`; returns it with the `async fn .. -> T`
    /// to wrap in its place. `None` for any other function, an `async fn`
    /// included.
    pub(crate) fn recognise(function: &ItemFn) -> Option<(BoxedFuture, ItemFn)> {
        if function.sig.asyncness.is_some() {
            return None;
        }
        let ReturnType::Type(arrow, returned) = &function.sig.output else {
            return None;
        };
        let output = future_output(returned)?;
        let [Stmt::Expr(Expr::Call(call), None)] = function.block.stmts.as_slice() else {
            return None;
        };
        let (pin, body) = box_pin_async(call)?;
        let mut sig = function.sig.clone();
        sig.asyncness = Some(syn::Token![async](function.sig.fn_token.span));
        sig.output = ReturnType::Type(*arrow, Box::new(output.clone()));
        let unboxed = ItemFn {
            attrs: function.attrs.clone(),
            vis: function.vis.clone(),
            modifiers: function.modifiers.clone(),
            sig,
            block: Box::new(body.block.clone()),
        };
        let boxed = BoxedFuture {
            sig: function.sig.clone(),
            pin: pin.clone(),
            async_attrs: body.attrs.clone(),
        };
        Some((boxed, unboxed))
    }

    /// The method again as async-trait shaped it, its boxed future running
    /// the statements of `wrapped`: the function the lock made of the
    /// `async fn` that [`recognise`](Self::recognise) returned.
    pub(crate) fn restore(self, wrapped: TokenStream) -> TokenStream {
        let wrapped: ItemFn = match syn::parse2(wrapped) {
            Ok(function) => function,
            Err(error) => return error.into_compile_error(),
        };
        let ItemFn {
            attrs, vis, block, ..
        } = wrapped;
        let Block { stmts, .. } = *block;
        let BoxedFuture {
            sig,
            pin,
            async_attrs,
        } = self;
        quote! {
            #(#attrs)*
            #vis #sig {
                #pin(#(#async_attrs)* async move { #(#stmts)* })
            }
        }
    }
}

/// `T` of `Pin<Box<dyn Future<Output = T> + ..>>`, any paths to them.
fn future_output(ty: &Type) -> Option<&Type> {
    let pinned = only_type_argument(ty, "Pin")?;
    let boxed = only_type_argument(pinned, "Box")?;
    let Type::TraitObject(object) = boxed else {
        return None;
    };
    object.bounds.iter().find_map(|bound| {
        let TypeParamBound::Trait(bound) = bound else {
            return None;
        };
        let last = bound.path.segments.last()?;
        if last.ident != "Future" {
            return None;
        }
        let PathArguments::AngleBracketed(arguments) = &last.arguments else {
            return None;
        };
        arguments.args.iter().find_map(|argument| match argument {
            GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(&assoc.ty),
            _ => None,
        })
    })
}

/// The one type argument of a path type whose last segment is `name`.
fn only_type_argument<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
    let Type::Path(TypePath {
        qself: None, path, ..
    }) = ty
    else {
        return None;
    };
    let last = path.segments.last()?;
    if last.ident != name {
        return None;
    }
    let PathArguments::AngleBracketed(arguments) = &last.arguments else {
        return None;
    };
    let mut types = arguments.args.iter().filter_map(|argument| match argument {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    });
    match (types.next(), types.next()) {
        (Some(ty), None) => Some(ty),
        _ => None,
    }
}

/// `(Box::pin, async move { .. })` of a call `Box::pin(async move { .. })`.
fn box_pin_async(call: &ExprCall) -> Option<(&Expr, &ExprAsync)> {
    let Expr::Path(function) = &*call.func else {
        return None;
    };
    let segments = &function.path.segments;
    let is_box_pin = segments.len() >= 2
        && segments[segments.len() - 1].ident == "pin"
        && segments[segments.len() - 2].ident == "Box";
    if !is_box_pin || call.args.len() != 1 {
        return None;
    }
    match &call.args[0] {
        Expr::Async(body) if body.capture.is_some() => Some((&call.func, body)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::ToTokens;

    /// What async-trait 0.1 makes of
    /// `async fn call(&self, id: u64) -> Result<u64, E> { Ok(id) }`.
    fn async_trait_method() -> ItemFn {
        syn::parse_quote! {
            #[distributed_lock(key = "s:{id}")]
            fn call<'life0, 'async_trait>(&'life0 self, id: u64)
                -> ::core::pin::Pin<Box<dyn ::core::future::Future<Output = Result<u64, E>>
                    + ::core::marker::Send + 'async_trait>>
            where 'life0: 'async_trait, Self: 'async_trait
            {
                Box::pin(async move {
                    let __self = self;
                    let id = id;
                    let __ret: Result<u64, E> = { Ok(id) };
                    __ret
                })
            }
        }
    }

    #[test]
    fn the_async_fn_is_read_back_with_the_futures_output() {
        let (_, unboxed) = BoxedFuture::recognise(&async_trait_method()).expect("recognised");
        assert!(unboxed.sig.asyncness.is_some());
        let ReturnType::Type(_, output) = &unboxed.sig.output else {
            panic!("no return type");
        };
        assert_eq!(output.to_token_stream().to_string(), "Result < u64 , E >");
        assert_eq!(unboxed.block.stmts.len(), 4);
    }

    #[test]
    fn the_wrapped_body_goes_back_into_the_box() {
        let (boxed, _) = BoxedFuture::recognise(&async_trait_method()).expect("recognised");
        let restored = boxed.restore(quote! {
            async fn call(&self, id: u64) -> Result<u64, E> { locked(id).await }
        });
        let restored: ItemFn = syn::parse2(restored).unwrap();
        assert!(restored.sig.asyncness.is_none());
        assert_eq!(
            restored.block.to_token_stream().to_string(),
            "{ Box :: pin (async move { locked (id) . await }) }"
        );
    }

    #[test]
    fn other_functions_are_left_alone() {
        for function in [
            quote!(
                async fn f() -> Pin<Box<dyn Future<Output = Result<(), E>>>> {
                    Box::pin(async move { Ok(()) })
                }
            ),
            quote!(
                fn f() -> Pin<Box<dyn Future<Output = Result<(), E>>>> {
                    let x = 1;
                    Box::pin(async move { Ok(()) })
                }
            ),
            quote!(
                fn f() -> Pin<Box<dyn Future<Output = Result<(), E>>>> {
                    Box::pin(async { Ok(()) })
                }
            ),
            quote!(
                fn f() -> Box<dyn Future<Output = Result<(), E>>> {
                    Box::new(async move { Ok(()) })
                }
            ),
            quote!(
                fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
        ] {
            let function: ItemFn = syn::parse2(function.clone()).unwrap();
            assert!(
                BoxedFuture::recognise(&function).is_none(),
                "{}",
                function.to_token_stream()
            );
        }
    }
}
