//! The key template: literal text with `{param}` / `{param.field}` placeholders.
//!
//! This module only reads the text; matching placeholders to the function's
//! parameters is the key module's job.

use std::ops::Range;

/// A parsed key template.
#[derive(Debug, PartialEq)]
pub(crate) struct Template {
    /// A `format!` string: the literal text with its braces escaped again and
    /// `{}` where each placeholder stood.
    pub(crate) format: String,
    /// The placeholders, in the order their `{}` appear in `format`.
    pub(crate) placeholders: Vec<Placeholder>,
}

/// One `{root.field.field}` placeholder.
#[derive(Debug, PartialEq)]
pub(crate) struct Placeholder {
    /// The parameter name, or `self`.
    pub(crate) root: String,
    /// The field path after the root: names, or tuple indices such as `0`.
    pub(crate) fields: Vec<String>,
    /// Byte range of the whole `{...}` in the key text.
    pub(crate) range: Range<usize>,
}

impl Placeholder {
    /// The placeholder as written, braces included: `{order.id}`.
    pub(crate) fn written(&self) -> String {
        let mut path = self.root.clone();
        for field in &self.fields {
            path.push('.');
            path.push_str(field);
        }
        format!("{{{path}}}")
    }
}

/// A syntax error in the key text.
#[derive(Debug, PartialEq)]
pub(crate) struct TemplateError {
    pub(crate) message: String,
    /// Byte range of the offending text in the key.
    pub(crate) range: Range<usize>,
}

impl TemplateError {
    fn new(message: impl Into<String>, range: Range<usize>) -> Self {
        TemplateError {
            message: message.into(),
            range,
        }
    }
}

/// Parses a key such as `"order:{order.id}:{user_id}"`; `{{` and `}}` stand
/// for literal braces.
pub(crate) fn parse(text: &str) -> Result<Template, TemplateError> {
    if text.is_empty() {
        return Err(TemplateError::new(
            "the key must not be empty; e.g. `key = \"order:{order.id}\"`",
            0..0,
        ));
    }
    let bytes = text.as_bytes();
    let mut format = String::with_capacity(text.len());
    let mut placeholders = Vec::new();
    // Start of the literal text not yet copied to `format`. Braces are ASCII,
    // so every index where we cut is a char boundary.
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'{', Some(b'{')) | (b'}', Some(b'}')) => i += 2,
            (b'{', _) => {
                format.push_str(&text[copied..i]);
                let end = placeholder_end(text, i)?;
                placeholders.push(placeholder(text, i..end)?);
                format.push_str("{}");
                i = end;
                copied = end;
            }
            (b'}', _) => {
                return Err(TemplateError::new(
                    "unmatched `}` in the key; write `}}` for a literal brace",
                    i..i + 1,
                ));
            }
            _ => i += 1,
        }
    }
    format.push_str(&text[copied..]);
    Ok(Template {
        format,
        placeholders,
    })
}

/// Returns the index just past the `}` that closes the `{` at `open`.
fn placeholder_end(text: &str, open: usize) -> Result<usize, TemplateError> {
    let rest = &text[open + 1..];
    match rest.find(['{', '}']) {
        Some(close) if rest.as_bytes()[close] == b'}' => Ok(open + 1 + close + 1),
        next_brace => {
            let unclosed = &text[open..open + 1 + next_brace.unwrap_or(rest.len())];
            Err(TemplateError::new(
                format!(
                    "unclosed `{unclosed}` in the key; close the placeholder with `}}`, \
                     or write `{{{{` for a literal brace"
                ),
                open..open + 1,
            ))
        }
    }
}

/// Reads the placeholder `text[range]`, braces included.
fn placeholder(text: &str, range: Range<usize>) -> Result<Placeholder, TemplateError> {
    let inner = &text[range.start + 1..range.end - 1];
    if inner.is_empty() {
        return Err(TemplateError::new(
            "empty placeholder `{}` in the key; name a parameter, e.g. `{user_id}`",
            range,
        ));
    }
    // A raw identifier (`r#type`) names what `type` would, were it not a keyword.
    let mut segments = inner
        .split('.')
        .map(|name| name.strip_prefix("r#").unwrap_or(name));
    let root = segments.next().unwrap_or_default();
    let fields: Vec<&str> = segments.collect();
    if !is_identifier(root) || !fields.iter().all(|field| is_field(field)) {
        return Err(TemplateError::new(
            format!(
                "invalid placeholder `{{{inner}}}`; write `{{param}}` or `{{param.field.subfield}}` \
                 (values are formatted with `Display`, format specs are not supported)"
            ),
            range,
        ));
    }
    Ok(Placeholder {
        root: root.to_owned(),
        fields: fields.into_iter().map(str::to_owned).collect(),
        range,
    })
}

/// An ASCII Rust identifier other than `_`.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    let starts_well = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    starts_well && name != "_" && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A field name, or a tuple index such as `0` (no leading zeros).
fn is_field(name: &str) -> bool {
    let is_index = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_digit())
        && (name == "0" || !name.starts_with('0'))
        && name.parse::<u32>().is_ok();
    is_index || is_identifier(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Template {
        parse(text).unwrap_or_else(|e| panic!("{text:?} should parse: {e:?}"))
    }

    fn err(text: &str) -> TemplateError {
        match parse(text) {
            Ok(template) => panic!("{text:?} should fail, got {template:?}"),
            Err(error) => error,
        }
    }

    fn roots(template: &Template) -> Vec<(&str, Vec<&str>)> {
        template
            .placeholders
            .iter()
            .map(|p| {
                (
                    p.root.as_str(),
                    p.fields.iter().map(String::as_str).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn plain_text_is_kept_verbatim() {
        let template = ok("orders:all");
        assert_eq!(template.format, "orders:all");
        assert!(template.placeholders.is_empty());
    }

    #[test]
    fn placeholders_become_positional_arguments() {
        let template = ok("order:{order.id}:{user_id}");
        assert_eq!(template.format, "order:{}:{}");
        assert_eq!(
            roots(&template),
            vec![("order", vec!["id"]), ("user_id", vec![])]
        );
    }

    #[test]
    fn raw_identifiers_name_what_they_would_without_r_hash() {
        let template = ok("{r#type}:{item.r#match}:{type}");
        assert_eq!(template.format, "{}:{}:{}");
        assert_eq!(
            roots(&template),
            vec![("type", vec![]), ("item", vec!["match"]), ("type", vec![])]
        );
    }

    #[test]
    fn placeholder_ranges_cover_the_braces() {
        let template = ok("a{b}c{d.e}");
        let ranges: Vec<_> = template
            .placeholders
            .iter()
            .map(|p| p.range.clone())
            .collect();
        assert_eq!(ranges, vec![1..4, 5..10]);
    }

    #[test]
    fn nested_fields_and_tuple_indices() {
        let template = ok("{self.account.owner.id}/{pair.0}/{t.10.x}");
        assert_eq!(
            roots(&template),
            vec![
                ("self", vec!["account", "owner", "id"]),
                ("pair", vec!["0"]),
                ("t", vec!["10", "x"]),
            ]
        );
    }

    #[test]
    fn placeholders_can_be_shown_as_written() {
        let template = ok("{a}{b.c.0}");
        let written: Vec<_> = template
            .placeholders
            .iter()
            .map(Placeholder::written)
            .collect();
        assert_eq!(written, ["{a}", "{b.c.0}"]);
    }

    #[test]
    fn key_may_be_only_a_placeholder() {
        let template = ok("{id}");
        assert_eq!(template.format, "{}");
        assert_eq!(roots(&template), vec![("id", vec![])]);
    }

    #[test]
    fn doubled_braces_stay_escaped_for_format() {
        let template = ok("{{literal}}:{id}:}}{{");
        assert_eq!(template.format, "{{literal}}:{}:}}{{");
        assert_eq!(roots(&template), vec![("id", vec![])]);
    }

    #[test]
    fn escaped_brace_next_to_placeholder() {
        let template = ok("{{{id}}}");
        assert_eq!(template.format, "{{{}}}");
        assert_eq!(roots(&template), vec![("id", vec![])]);
    }

    #[test]
    fn non_ascii_text_is_kept() {
        let template = ok("commande:{id}:été");
        assert_eq!(template.format, "commande:{}:été");
    }

    #[test]
    fn underscores_in_names() {
        let template = ok("{_user.first_name}");
        assert_eq!(roots(&template), vec![("_user", vec!["first_name"])]);
    }

    #[test]
    fn empty_key_is_an_error() {
        assert!(err("").message.contains("must not be empty"));
    }

    #[test]
    fn unclosed_brace_is_an_error() {
        let error = err("order:{id");
        assert!(error.message.starts_with("unclosed `{id`"), "{error:?}");
        assert_eq!(error.range, 6..7);
    }

    #[test]
    fn brace_opened_inside_placeholder_is_unclosed() {
        let error = err("{a{b}");
        assert!(error.message.starts_with("unclosed `{a`"), "{error:?}");
        assert_eq!(error.range, 0..1);
    }

    #[test]
    fn lone_brace_at_end_is_unclosed() {
        let error = err("order:{");
        assert!(error.message.starts_with("unclosed `{`"), "{error:?}");
        assert_eq!(error.range, 6..7);
    }

    #[test]
    fn stray_closing_brace_is_an_error() {
        let error = err("order}:{id}");
        assert!(error.message.contains("unmatched `}`"), "{error:?}");
        assert_eq!(error.range, 5..6);
    }

    #[test]
    fn closing_brace_after_placeholder_is_stray() {
        assert_eq!(err("{id}}").range, 4..5);
    }

    #[test]
    fn empty_placeholder_is_an_error() {
        let error = err("order:{}");
        assert!(error.message.contains("empty placeholder"), "{error:?}");
        assert_eq!(error.range, 6..8);
    }

    #[test]
    fn format_specs_are_rejected() {
        let error = err("{id:?}");
        assert!(
            error.message.contains("invalid placeholder `{id:?}`"),
            "{error:?}"
        );
    }

    #[test]
    fn malformed_paths_are_rejected() {
        for text in [
            "{.id}",
            "{id.}",
            "{a..b}",
            "{1}",
            "{_}",
            "{ id }",
            "{a-b}",
            "{a.01}",
            "{é}",
            "{a.99999999999}",
        ] {
            let error = err(text);
            assert!(
                error.message.starts_with("invalid placeholder"),
                "{text}: {error:?}"
            );
            assert_eq!(error.range, 0..text.len(), "{text}");
        }
    }

    #[test]
    fn first_error_wins() {
        assert!(err("}{").message.contains("unmatched"));
    }
}
