//! The one parser of attribute arguments: `name = value` pairs checked against
//! the options an attribute accepts, and readers for the values both
//! attributes take.

use proc_macro2::{Span, TokenStream};
use quote::{quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::{Expr, ExprLit, ExprPath, Ident, Lit, LitStr, Path, Token};

use crate::shared::errors::Errors;

/// `crate = path`: where `leasehold` is, if re-exported; both
/// attributes accept it.
pub(crate) const CRATE: &str = "crate";

/// The options one attribute accepts.
pub(crate) struct Spec {
    /// Every option's name, in the order the "valid options" message lists them.
    pub(crate) options: &'static [&'static str],
    /// Former names of options, as `(old name, option)`: refused with the
    /// name to write instead.
    pub(crate) renamed: &'static [(&'static str, &'static str)],
    /// The option a string literal written alone most likely means
    /// (`#[distributed_lock("order:{id}")]`: `key`), for its error.
    pub(crate) positional: Option<&'static str>,
}

impl Spec {
    /// The option `name` stands for, if any.
    fn option(&self, name: &Ident) -> Option<&'static str> {
        self.options.iter().copied().find(|option| name == option)
    }

    /// The option's name now, if `name` is a former name of it.
    fn renamed(&self, name: &Ident) -> Option<&'static str> {
        self.renamed
            .iter()
            .find(|(old, _)| name == old)
            .map(|&(_, option)| option)
    }

    /// "`key`, `ttl`, ...", for the "unknown option" message.
    fn listed(&self) -> String {
        let quoted: Vec<String> = self
            .options
            .iter()
            .map(|name| format!("`{name}`"))
            .collect();
        quoted.join(", ")
    }
}

/// One `name = value` as written.
pub(crate) struct Arg {
    pub(crate) name: Ident,
    pub(crate) value: Expr,
}

impl Arg {
    /// One `name = value` of an attribute with `spec`; a string literal
    /// without a name is refused with the name it most likely needs.
    fn parse(input: ParseStream<'_>, spec: &Spec) -> syn::Result<Self> {
        if input.peek(LitStr) {
            let text: LitStr = input.parse()?;
            let message = match spec.positional {
                Some(option) => format!(
                    "write `{option} = {}`: every option is written `name = value`, `{option}` too",
                    text.token()
                ),
                None => "options are written `name = value`".to_owned(),
            };
            return Err(syn::Error::new(text.span(), message));
        }
        // `crate` is a keyword, hence `parse_any`.
        let name = input.call(Ident::parse_any)?;
        if !input.peek(Token![=]) {
            let message = format!("expected `{name} = ...`: options are written `name = value`");
            return Err(syn::Error::new(name.span(), message));
        }
        input.parse::<Token![=]>()?;
        let value = input.parse()?;
        Ok(Arg { name, value })
    }
}

/// The arguments of one use of an attribute, each filed under the option it
/// sets: every one is known and given once.
pub(crate) struct Args(Vec<(&'static str, Arg)>);

impl Args {
    /// Parses `tokens` against `spec`. Records an error at each unknown name
    /// (listing the valid ones) and at each second mention of an option, under
    /// the same or another of its names, and leaves them out. `None` when the
    /// arguments are not `name = value` pairs.
    pub(crate) fn parse(tokens: TokenStream, spec: &Spec, errors: &mut Errors) -> Option<Args> {
        // `name = value` pairs separated by commas, a trailing one allowed.
        let parser = |input: ParseStream<'_>| {
            let mut written = Vec::new();
            while !input.is_empty() {
                written.push(Arg::parse(input, spec)?);
                if !input.is_empty() {
                    input.parse::<Token![,]>()?;
                }
            }
            Ok(written)
        };
        let written = errors.check(parser.parse2(tokens))?;
        let mut args: Vec<(&'static str, Arg)> = Vec::new();
        for arg in written {
            if let Some(option) = spec.renamed(&arg.name) {
                let message = format!(
                    "`{}` is now called `{option}`: write `{option} = ...`",
                    arg.name
                );
                errors.push(syn::Error::new(arg.name.span(), message));
                continue;
            }
            let Some(option) = spec.option(&arg.name) else {
                let message = format!(
                    "unknown option `{}`; valid options: {}",
                    arg.name,
                    spec.listed()
                );
                errors.push(syn::Error::new(arg.name.span(), message));
                continue;
            };
            match args.iter().find(|(seen, _)| *seen == option) {
                Some((_, first)) => errors.push(duplicate(&first.name, &arg.name)),
                None => args.push((option, arg)),
            }
        }
        Some(Args(args))
    }

    /// The name, as written, of the argument that sets `option`, if given.
    pub(crate) fn name_of(&self, option: &str) -> Option<&Ident> {
        self.0
            .iter()
            .find(|(name, _)| *name == option)
            .map(|(_, arg)| &arg.name)
    }

    /// Removes and returns the argument that sets `option`, if given.
    pub(crate) fn take(&mut self, option: &str) -> Option<Arg> {
        let position = self.0.iter().position(|(name, _)| *name == option)?;
        Some(self.0.remove(position).1)
    }
}

/// The error at `second`, which sets an option that `first` already set.
fn duplicate(first: &Ident, second: &Ident) -> syn::Error {
    let message = if first == second {
        format!("duplicate option `{second}`")
    } else {
        format!(
            "duplicate option `{second}`: `{first}` is another name for it and is already given"
        )
    };
    syn::Error::new(second.span(), message)
}

/// A string literal value.
pub(crate) fn string(value: &Expr, option: &str, example: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) => Ok(text.clone()),
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`{option}` takes a string literal, e.g. `{option} = {example}`"),
        )),
    }
}

/// `true` or `false`.
pub(crate) fn boolean(value: &Expr, option: &str) -> syn::Result<bool> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(flag),
            ..
        }) => Ok(flag.value()),
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`{option}` takes `true` or `false`"),
        )),
    }
}

/// The value of `crate = path`: a plain path such as `my_crate::leasehold`.
pub(crate) fn crate_path(value: Expr) -> syn::Result<Path> {
    match value {
        Expr::Path(ExprPath {
            attrs, qself, path, ..
        }) if attrs.is_empty() && qself.is_none() => Ok(path),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{CRATE}` takes a path, e.g. `{CRATE} = my_reexports::leasehold`"),
        )),
    }
}

/// The path of the `leasehold` crate: the one given with `crate = ...`,
/// else `::leasehold` spanned at `span`.
pub(crate) fn krate(given: Option<&Path>, span: Span) -> TokenStream {
    match given {
        Some(path) => path.to_token_stream(),
        None => quote_spanned!(span=> ::leasehold),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    const SPEC: Spec = Spec {
        options: &["key", "manager", CRATE],
        renamed: &[("client", "manager")],
        positional: Some("key"),
    };

    /// The options parsed, in order, and the error messages.
    fn parse(tokens: TokenStream) -> (Vec<&'static str>, Vec<String>) {
        let mut errors = Errors::default();
        let options = Args::parse(tokens, &SPEC, &mut errors)
            .map(|args| args.0.into_iter().map(|(option, _)| option).collect())
            .unwrap_or_default();
        let messages = match errors.finish() {
            Ok(()) => Vec::new(),
            Err(error) => error.into_iter().map(|e| e.to_string()).collect(),
        };
        (options, messages)
    }

    #[test]
    fn a_former_name_is_refused_with_the_name_to_write() {
        let (options, errors) = parse(quote!(client = m, key = "k", crate = c));
        assert_eq!(options, ["key", "crate"]);
        assert_eq!(
            errors,
            ["`client` is now called `manager`: write `manager = ...`"]
        );
    }

    #[test]
    fn the_same_name_twice_is_a_duplicate() {
        let (_, errors) = parse(quote!(key = "a", key = "b"));
        assert_eq!(errors, ["duplicate option `key`"]);
    }

    #[test]
    fn unknown_names_list_the_options_but_not_the_former_names() {
        let (options, errors) = parse(quote!(kye = "a"));
        assert!(options.is_empty());
        assert_eq!(
            errors,
            ["unknown option `kye`; valid options: `key`, `manager`, `crate`"]
        );
    }

    #[test]
    fn taking_an_option_removes_it() {
        let mut errors = Errors::default();
        let mut args = Args::parse(quote!(manager = m), &SPEC, &mut errors).unwrap();
        assert_eq!(args.take("manager").unwrap().name, "manager");
        assert!(args.take("manager").is_none());
    }

    #[test]
    fn a_key_without_its_name_is_shown_with_it() {
        let (_, errors) = parse(quote!("order:{id}", manager = m));
        assert_eq!(
            errors,
            [r#"write `key = "order:{id}"`: every option is written `name = value`, `key` too"#]
        );
    }

    #[test]
    fn a_name_without_value_is_an_error() {
        let (_, errors) = parse(quote!(key));
        assert_eq!(
            errors,
            ["expected `key = ...`: options are written `name = value`"]
        );
    }
}
