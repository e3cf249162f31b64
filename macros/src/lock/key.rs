//! The lock key: the template of `key = "..."` checked against the function's
//! parameters and turned into a `format!` call.

use std::ops::Range;

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;
use syn::ext::IdentExt;
use syn::visit::Visit;
use syn::{FnArg, Ident, Index, LitStr, Member, Pat, PatIdent, Signature};

use crate::lock::template::{self, Placeholder};
use crate::shared::errors::Errors;

/// The `::std::format!(...)` expression that builds the key, or `None` after
/// recording why it cannot be built. Each placeholder's value is rendered by
/// `__private::rendered`, whose refusal of an empty value `bail` turns into
/// the call's early error.
pub(crate) fn format_call(
    key: &LitStr,
    sig: &Signature,
    krate: &TokenStream,
    bail: &dyn Fn(TokenStream) -> TokenStream,
    errors: &mut Errors,
) -> Option<TokenStream> {
    let text = key.value();
    let template = match template::parse(&text) {
        Ok(template) => template,
        Err(error) => {
            errors.push(syn::Error::new(span_of(key, error.range), error.message));
            return None;
        }
    };
    let params = Params::of(sig);
    let mut arguments = Vec::with_capacity(template.placeholders.len());
    for placeholder in &template.placeholders {
        let span = span_of(key, placeholder.range.clone());
        match params.check(placeholder, &sig.ident) {
            Ok(param) => {
                let value = access(placeholder, param, span);
                arguments.push(bail(key_part(placeholder, value, krate, span)));
            }
            Err(message) => errors.push(syn::Error::new(span, message)),
        }
    }
    if arguments.len() < template.placeholders.len() {
        return None;
    }
    let format = LitStr::new(&template.format, key.span());
    Some(quote_spanned! {key.span()=>
        ::std::format!(#format #(, #arguments)*)
    })
}

/// The span of `range` (bytes of the key's value) inside the literal, where
/// the compiler can tell it (nightly, plain `"..."` literals); otherwise the
/// whole literal.
fn span_of(key: &LitStr, range: Range<usize>) -> Span {
    let token = key.token();
    let source = token.to_string();
    let plain = source.starts_with('"') && !source.contains('\\');
    plain
        .then(|| token.subspan(range.start + 1..range.end + 1))
        .flatten()
        .unwrap_or_else(|| key.span())
}

/// `value` rendered as a part of the key, or the error that names the
/// placeholder when it renders empty: `__private::KeyPart` says, when it has
/// no `Display`, what the key accepts (instead of the compiler's `{:?}` hint).
fn key_part(
    placeholder: &Placeholder,
    value: TokenStream,
    krate: &TokenStream,
    location: Span,
) -> TokenStream {
    let span = Span::call_site().located_at(location);
    let written = placeholder.written();
    quote_spanned! {span=>
        #krate::__private::rendered(#written, #krate::__private::KeyPart::key_part(#value))
    }
}

/// `&root.field.field`, located at the placeholder so that a missing field or
/// a missing `Display` impl is reported there. The root is the parameter's
/// own identifier (`param`), so it resolves to the parameter wherever the
/// function was written, inside a `macro_rules!` too. The rest belongs to
/// the expansion (call-site hygiene), which keeps the compiler from
/// suggesting edits inside the key text, such as replacing it with a field.
fn access(placeholder: &Placeholder, param: &Ident, location: Span) -> TokenStream {
    let mut root = param.clone();
    root.set_span(param.span().located_at(location));
    let span = Span::call_site().located_at(location);
    let fields = placeholder.fields.iter().map(|field| match field.parse() {
        Ok(index) => Member::Unnamed(Index { index, span }),
        Err(_) => Member::Named(ident(field, span)),
    });
    quote_spanned! {span=> &#root #(.#fields)* }
}

/// The identifier `name`, raw (`r#type`) where `name` is a keyword that a
/// raw identifier may name.
fn ident(name: &str, span: Span) -> Ident {
    let keyword = syn::parse_str::<Ident>(name).is_err();
    let raw_allowed = !matches!(name, "self" | "Self" | "super" | "crate" | "_");
    if keyword && raw_allowed {
        Ident::new_raw(name, span)
    } else {
        Ident::new(name, span)
    }
}

/// The names a placeholder may refer to.
struct Params {
    /// `self`, if a method, then each parameter bound to a plain name, as
    /// written (its identifier, hygiene included) and by name.
    idents: Vec<Ident>,
    names: Vec<String>,
    /// Names bound inside destructuring patterns such as `(a, b): (u32, u32)`.
    destructured: Vec<String>,
}

impl Params {
    fn of(sig: &Signature) -> Self {
        let mut params = Params {
            idents: Vec::new(),
            names: Vec::new(),
            destructured: Vec::new(),
        };
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(receiver) => {
                    params.idents.push(Ident::from(receiver.self_token));
                    params.names.push("self".to_owned());
                }
                FnArg::Typed(typed) => match &*typed.pat {
                    Pat::Ident(PatIdent { ident, .. }) => {
                        params.idents.push(ident.clone());
                        params.names.push(ident.unraw().to_string());
                    }
                    pattern => BoundNames(&mut params.destructured).visit_pat(pattern),
                },
            }
        }
        params
    }

    /// The parameter `placeholder` names, or `Err` with the message to show
    /// when it names none.
    fn check(&self, placeholder: &Placeholder, function: &Ident) -> Result<&Ident, String> {
        let root = &placeholder.root;
        if let Some(index) = self.names.iter().position(|name| name == root) {
            Ok(&self.idents[index])
        } else if root == "self" {
            Err(format!(
                "`{}` needs a method, but `{function}` has no `self` parameter",
                placeholder.written()
            ))
        } else if self.destructured.contains(root) {
            Err(format!(
                "`{root}` is bound by a destructuring pattern, which is unsupported: \
                 bind the argument to a name (e.g. `pair: (u32, u32)`) and use `{{pair.0}}`"
            ))
        } else {
            let listed = if self.names.is_empty() {
                "none".to_owned()
            } else {
                self.names.join(", ")
            };
            Err(format!(
                "no parameter `{root}` in `{function}`; parameters: {listed}"
            ))
        }
    }
}

/// Collects the names a pattern binds.
struct BoundNames<'a>(&'a mut Vec<String>);

impl Visit<'_> for BoundNames<'_> {
    fn visit_pat_ident(&mut self, pat: &PatIdent) {
        self.0.push(pat.ident.unraw().to_string());
        syn::visit::visit_pat_ident(self, pat);
    }
}
