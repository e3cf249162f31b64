//! For a function emitted as written next to its attribute's errors: the
//! parameters the attribute's arguments use (in the key's placeholders, in
//! `manager = self.locks`, in `pool = db`) are mentioned at the top of the
//! body, so that they draw no "unused variable" warning on top of the errors.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::{FnArg, ItemFn, LitStr, Pat, PatIdent};

/// Starts the body of `function` with `let _ = (&param, ..);` for each
/// parameter named in `args`. The arguments are read leniently, as they may
/// hold the mistake: every identifier counts, and in string literals every
/// name after a `{`.
pub(crate) fn mention_params(function: &mut ItemFn, args: &TokenStream) {
    let mut named = Vec::new();
    names_in(args, &mut named);
    let params: Vec<TokenStream> = function
        .sig
        .inputs
        .iter()
        .filter_map(|input| match input {
            FnArg::Receiver(receiver) => Some(receiver.self_token.to_token_stream()),
            FnArg::Typed(typed) => match &*typed.pat {
                Pat::Ident(PatIdent { ident, .. }) => Some(ident.to_token_stream()),
                _ => None,
            },
        })
        .filter(|param| named.contains(&param.to_string()))
        .collect();
    if !params.is_empty() {
        let mention = syn::parse_quote! { let _ = (#(&#params,)*); };
        function.block.stmts.insert(0, mention);
    }
}

/// Collects the identifiers in `tokens`, and the names after `{` in its
/// string literals.
fn names_in(tokens: &TokenStream, names: &mut Vec<String>) {
    for token in tokens.clone() {
        match token {
            TokenTree::Ident(ident) => names.push(ident.to_string()),
            TokenTree::Group(group) => names_in(&group.stream(), names),
            TokenTree::Literal(literal) => {
                if let Ok(text) = syn::parse2::<LitStr>(literal.into_token_stream()) {
                    names.extend(placeholder_roots(&text.value()));
                }
            }
            TokenTree::Punct(_) => {}
        }
    }
}

/// The name after each `{` that does not start a `{{`.
fn placeholder_roots(text: &str) -> Vec<String> {
    let mut roots = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        rest = &rest[open + 1..];
        if let Some(after_escape) = rest.strip_prefix('{') {
            rest = after_escape;
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        roots.push(rest[..end].to_owned());
    }
    roots
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn first_statement(function: &ItemFn) -> String {
        function.block.stmts[0].to_token_stream().to_string()
    }

    #[test]
    fn roots_are_read_from_well_formed_and_broken_keys() {
        assert_eq!(
            placeholder_roots("order:{order.id}:{user_id}"),
            ["order", "user_id"]
        );
        assert_eq!(placeholder_roots("{self.id}/{sku"), ["self", "sku"]);
        assert_eq!(placeholder_roots("{{literal}}:{id}"), ["id"]);
        assert!(placeholder_roots("plain").is_empty());
    }

    #[test]
    fn parameters_named_in_the_key_or_in_expressions_are_mentioned() {
        let mut function: ItemFn = syn::parse_quote! {
            async fn f(&self, a: u8, b: u8, (c, d): (u8, u8), pool: &Pool) {}
        };
        let args = quote!(key = "{self.x}:{b}:{c}:{missing", pool = pool, tx = a.b);
        mention_params(&mut function, &args);
        assert_eq!(
            first_statement(&function),
            "let _ = (& self , & a , & b , & pool ,) ;"
        );
    }

    #[test]
    fn unparsable_arguments_are_still_read() {
        let mut function: ItemFn = syn::parse_quote! { async fn f(sku: &str) {} };
        mention_params(&mut function, &quote!(key "{sku}" ttl));
        assert_eq!(first_statement(&function), "let _ = (& sku ,) ;");
    }

    #[test]
    fn nothing_is_added_when_no_parameter_is_named() {
        let mut function: ItemFn = syn::parse_quote! { async fn f(a: u8) {} };
        mention_params(&mut function, &quote!(key = "jobs"));
        assert!(function.block.stmts.is_empty());
    }
}
