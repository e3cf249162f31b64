//! Key templates: `order:{header.idempotency-key}`, `seat:{path.show}:{path.seat}`.
//! Parsed and checked when the layer is built; rendered from each request.

use std::sync::Arc;

use http::header::HeaderName;
use http::HeaderMap;

use crate::error::{BuildError, KeyError};
use crate::route::Route;

/// A parsed key template: literal text and placeholders. `{{` and `}}` are
/// literal braces.
#[derive(Debug, Clone)]
pub(crate) struct KeyTemplate {
    text: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone)]
enum Part {
    Text(String),
    Header(HeaderName),
    /// A parameter of the route it is read under.
    Path(String, Arc<Route>),
}

impl KeyTemplate {
    /// Parses `text`, checking that every `{path.NAME}` is a parameter of
    /// `route`; the error names the bad placeholder.
    pub(crate) fn parse(text: &str, route: Option<&Arc<Route>>) -> Result<Self, BuildError> {
        let refuse = |reason: String| BuildError::Template {
            template: text.to_owned(),
            reason,
        };
        if text.is_empty() {
            return Err(refuse("a lock key cannot be empty".to_owned()));
        }
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.as_str().starts_with('{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.as_str().starts_with('}') => {
                    chars.next();
                    literal.push('}');
                }
                '}' => {
                    return Err(refuse(
                        "a lone `}`; write `}}` for a literal brace".to_owned(),
                    ))
                }
                '{' => {
                    let Some((placeholder, after)) = chars.as_str().split_once('}') else {
                        return Err(refuse(
                            "a `{` is never closed; write `{{` for a literal brace".to_owned(),
                        ));
                    };
                    let part = parse_placeholder(placeholder, route).map_err(&refuse)?;
                    chars = after.chars();
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(part);
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(KeyTemplate {
            text: text.to_owned(),
            parts,
        })
    }

    /// The template as written.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The key for a request with these headers and path. Every placeholder
    /// must have a non-empty value, so the key is never empty or partial.
    pub(crate) fn render(&self, headers: &HeaderMap, path: &str) -> Result<String, KeyError> {
        let mut key = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => key.push_str(text),
                Part::Header(name) => key.push_str(header(headers, name)?),
                Part::Path(name, route) => key.push_str(&route.parameter(path, name)?),
            }
        }
        Ok(key)
    }
}

fn parse_placeholder(placeholder: &str, route: Option<&Arc<Route>>) -> Result<Part, String> {
    let unknown = || {
        format!(
            "`{{{placeholder}}}` is not a placeholder; use `{{header.NAME}}` or `{{path.NAME}}`"
        )
    };
    let (source, name) = placeholder.split_once('.').ok_or_else(unknown)?;
    match source {
        "header" => HeaderName::from_bytes(name.as_bytes())
            .map(Part::Header)
            .map_err(|_| format!("`{{{placeholder}}}`: `{name}` is not a valid header name")),
        "path" => match route {
            None => Err(format!(
                "`{{{placeholder}}}` reads the path, so the layer needs the route: `.route(\"/orders/{{{name}}}\")`"
            )),
            Some(route) if !route.has(name) => Err(format!(
                "`{{{placeholder}}}`: the route has no parameter `{name}`"
            )),
            Some(route) => Ok(Part::Path(name.to_owned(), Arc::clone(route))),
        },
        _ => Err(unknown()),
    }
}

/// The first value of header `name`: present, visible ASCII, not empty.
fn header<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Result<&'a str, KeyError> {
    let value = headers
        .get(name)
        .ok_or_else(|| KeyError::MissingHeader(name.to_string()))?;
    let value = value
        .to_str()
        .map_err(|_| KeyError::UnreadableHeader(name.to_string()))?;
    if value.is_empty() {
        return Err(KeyError::EmptyHeader(name.to_string()));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(text: &str) -> Arc<Route> {
        Arc::new(Route::parse(text).unwrap())
    }

    #[test]
    fn renders_headers_and_path_parameters() {
        let route = route("/shows/{show}/seats/{seat}");
        let template = KeyTemplate::parse(
            "seat:{path.show}:{path.seat}:{header.X-Tenant}:{{x}}",
            Some(&route),
        )
        .unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("x-tenant", "acme".parse().unwrap());
        assert_eq!(
            template.render(&headers, "/shows/7/seats/A1").unwrap(),
            "seat:7:A1:acme:{x}"
        );
    }

    #[test]
    fn a_missing_or_empty_header_is_named() {
        let template = KeyTemplate::parse("order:{header.idempotency-key}", None).unwrap();
        let mut headers = HeaderMap::new();
        assert_eq!(
            template.render(&headers, "/"),
            Err(KeyError::MissingHeader("idempotency-key".into()))
        );
        headers.insert("idempotency-key", "".parse().unwrap());
        assert_eq!(
            template.render(&headers, "/"),
            Err(KeyError::EmptyHeader("idempotency-key".into()))
        );
        headers.insert(
            "idempotency-key",
            http::HeaderValue::from_bytes(b"\xff").unwrap(),
        );
        assert_eq!(
            template.render(&headers, "/"),
            Err(KeyError::UnreadableHeader("idempotency-key".into()))
        );
    }

    #[test]
    fn refuses_bad_templates_naming_the_part() {
        let orders = route("/orders/{id}");
        for (template, part) in [
            ("", "cannot be empty"),
            ("order:{query.id}", "`{query.id}` is not a placeholder"),
            ("order:{id}", "`{id}` is not a placeholder"),
            (
                "order:{header.bad name}",
                "`bad name` is not a valid header name",
            ),
            ("order:{path.order}", "no parameter `order`"),
            ("order:{header.x", "never closed"),
            ("order:}", "lone `}`"),
        ] {
            let error = KeyTemplate::parse(template, Some(&orders))
                .unwrap_err()
                .to_string();
            assert!(error.contains(part), "{template}: {error}");
        }
        let error = KeyTemplate::parse("order:{path.id}", None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("needs the route"), "{error}");
    }
}
