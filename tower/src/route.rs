//! Route patterns (`/shows/{show}/seats/{seat}`) and the path parameters a
//! request path has under one. The layer reads parameters itself, from the
//! pattern it was built with, so that it works under any router.

use crate::error::{BuildError, KeyError};

/// A route's path pattern: `/`-separated segments, each a literal, a
/// parameter `{name}` (one whole segment) or, last, `{*name}` (the rest of
/// the path), as axum writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    text: String,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Parameter(String),
    Rest(String),
}

impl Route {
    /// Parses `text`; the error names the segment that is wrong.
    pub(crate) fn parse(text: &str) -> Result<Route, BuildError> {
        let refuse = |reason: String| BuildError::Route {
            route: text.to_owned(),
            reason,
        };
        let Some(path) = text.strip_prefix('/') else {
            return Err(refuse("a route starts with `/`".to_owned()));
        };
        let mut segments: Vec<Segment> = Vec::new();
        let parts: Vec<&str> = path.split('/').collect();
        for (index, part) in parts.iter().enumerate() {
            let segment = parse_segment(part).map_err(&refuse)?;
            if matches!(segment, Segment::Rest(_)) && index + 1 != parts.len() {
                return Err(refuse(format!(
                    "`{part}` takes the rest of the path, so it must be the last segment"
                )));
            }
            if let Some(name) = segment.name() {
                if segments.iter().any(|seen| seen.name() == Some(name)) {
                    return Err(refuse(format!("parameter `{name}` appears twice")));
                }
            }
            segments.push(segment);
        }
        Ok(Route {
            text: text.to_owned(),
            segments,
        })
    }

    /// Whether the route has a parameter `name`.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.segments
            .iter()
            .any(|segment| segment.name() == Some(name))
    }

    /// The percent-decoded, non-empty value of parameter `name` in `path`.
    pub(crate) fn parameter(&self, path: &str, name: &str) -> Result<String, KeyError> {
        let missing = || KeyError::MissingPathParameter {
            name: name.to_owned(),
            route: self.text.clone(),
        };
        let mut rest = path.strip_prefix('/').ok_or_else(missing)?;
        let mut found = None;
        for (index, segment) in self.segments.iter().enumerate() {
            let last = index + 1 == self.segments.len();
            let value = match segment {
                Segment::Rest(_) => std::mem::take(&mut rest),
                _ => match rest.split_once('/') {
                    Some(_) if last => return Err(missing()),
                    Some((value, after)) => {
                        rest = after;
                        value
                    }
                    None if last => std::mem::take(&mut rest),
                    None => return Err(missing()),
                },
            };
            match segment {
                Segment::Literal(literal) if literal != value => return Err(missing()),
                Segment::Parameter(parameter) | Segment::Rest(parameter) if parameter == name => {
                    found = Some(value);
                }
                _ => {}
            }
        }
        let raw = found.ok_or_else(missing)?;
        let value = percent_decode(raw)
            .ok_or_else(|| KeyError::UnreadablePathParameter(name.to_owned()))?;
        if value.is_empty() {
            return Err(KeyError::EmptyPathParameter(name.to_owned()));
        }
        Ok(value)
    }
}

impl Segment {
    fn name(&self) -> Option<&str> {
        match self {
            Segment::Literal(_) => None,
            Segment::Parameter(name) | Segment::Rest(name) => Some(name),
        }
    }
}

fn parse_segment(part: &str) -> Result<Segment, String> {
    let Some(inner) = part.strip_prefix('{') else {
        if part.contains(['{', '}']) {
            return Err(format!(
                "segment `{part}`: a parameter is a whole segment, `{{name}}`"
            ));
        }
        return Ok(Segment::Literal(part.to_owned()));
    };
    let Some(inner) = inner.strip_suffix('}') else {
        return Err(format!(
            "segment `{part}`: a parameter is a whole segment, `{{name}}`"
        ));
    };
    let (rest, name) = match inner.strip_prefix('*') {
        Some(name) => (true, name),
        None => (false, inner),
    };
    if name.is_empty() || name.contains(['{', '}', '*']) {
        return Err(format!(
            "segment `{part}`: the parameter needs a plain name"
        ));
    }
    Ok(if rest {
        Segment::Rest(name.to_owned())
    } else {
        Segment::Parameter(name.to_owned())
    })
}

/// `raw` with every `%XX` decoded; `None` if an escape is malformed or the
/// result is not UTF-8.
fn percent_decode(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while let Some(&byte) = bytes.get(index) {
        if byte == b'%' {
            let hex = bytes.get(index + 1..index + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            decoded.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            index += 3;
        } else {
            decoded.push(byte);
            index += 1;
        }
    }
    String::from_utf8(decoded).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_parameters_of_a_matching_path() {
        let route = Route::parse("/shows/{show}/seats/{seat}").unwrap();
        assert_eq!(
            route.parameter("/shows/7/seats/A%2012", "seat").unwrap(),
            "A 12"
        );
        assert_eq!(route.parameter("/shows/7/seats/A1", "show").unwrap(), "7");
    }

    #[test]
    fn the_rest_of_the_path_is_one_parameter() {
        let route = Route::parse("/files/{*path}").unwrap();
        assert_eq!(
            route.parameter("/files/a/b.txt", "path").unwrap(),
            "a/b.txt"
        );
    }

    #[test]
    fn a_path_that_does_not_match_misses_the_parameter() {
        let route = Route::parse("/orders/{id}/checkout").unwrap();
        for path in ["/orders/1", "/orders/1/checkout/x", "/carts/1/checkout", ""] {
            assert_eq!(
                route.parameter(path, "id"),
                Err(KeyError::MissingPathParameter {
                    name: "id".into(),
                    route: "/orders/{id}/checkout".into()
                }),
                "{path}"
            );
        }
        assert_eq!(
            route.parameter("/orders//checkout", "id"),
            Err(KeyError::EmptyPathParameter("id".into()))
        );
        assert_eq!(
            route.parameter("/orders/%ff/checkout", "id"),
            Err(KeyError::UnreadablePathParameter("id".into()))
        );
        assert_eq!(
            route.parameter("/orders/%4/checkout", "id"),
            Err(KeyError::UnreadablePathParameter("id".into()))
        );
    }

    #[test]
    fn refuses_malformed_routes_naming_the_segment() {
        for (route, part) in [
            ("orders/{id}", "starts with `/`"),
            ("/orders/x{id}", "`x{id}`"),
            ("/orders/{id", "`{id`"),
            ("/orders/{}", "`{}`"),
            ("/orders/{*rest}/x", "`{*rest}`"),
            ("/a/{id}/b/{id}", "`id` appears twice"),
        ] {
            let error = Route::parse(route).unwrap_err().to_string();
            assert!(error.contains(part), "{route}: {error}");
        }
    }
}
