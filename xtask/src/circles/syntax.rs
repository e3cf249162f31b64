//! What the import check reads of one Rust file: its `mod` declarations
//! (inline or from a file, with `#[path]`), its `use` declarations as
//! flat paths, and the names of the items it defines, each with the inline
//! module it sits in. A tokenizer that skips comments and literals, not a
//! parser: enough for the shapes of `use` and `mod` the language has.

use std::collections::BTreeSet;

/// A `mod NAME;` whose body is another file.
#[derive(Debug)]
pub struct ModDecl {
    /// The inline modules around it in this file.
    pub inline: Vec<String>,
    /// The module's name.
    pub name: String,
    /// Its `#[path = "..."]`, if any.
    pub path: Option<String>,
}

/// One path a `use` declaration brings in.
#[derive(Debug)]
pub struct UsePath {
    /// The inline modules around the declaration in this file.
    pub inline: Vec<String>,
    /// The path as written, e.g. `["super", "guard", "Guard"]`.
    pub segments: Vec<String>,
    /// The name it binds (an `as` rename, else the last segment); `None`
    /// for a glob (`::*`).
    pub bound: Option<String>,
    /// Whether it sits among the module's items (not in a function body):
    /// only those are names of the module that others can import through it.
    pub item: bool,
    /// Whether it is `pub` (of any reach): a re-export, which imports
    /// nothing unless the file also names what it binds.
    pub public: bool,
}

/// Everything read from one file.
#[derive(Debug, Default)]
pub struct FileItems {
    /// Its `mod NAME;` declarations.
    pub modules: Vec<ModDecl>,
    /// Its inline modules (`mod NAME { ... }`), each as its path in the file.
    pub inline_modules: Vec<Vec<String>>,
    /// Its `use` paths.
    pub uses: Vec<UsePath>,
    /// The items it defines among a module's items, with their inline module.
    pub defined: Vec<(Vec<String>, String)>,
    /// Every name its code mentions outside `use` declarations.
    pub mentioned: BTreeSet<String>,
    /// Every path of two or more segments its code writes outside `use`
    /// declarations (`lease::Lease`), with its inline module.
    pub paths: Vec<(Vec<String>, Vec<String>)>,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Punct(char),
    PathSep,
}

/// Reads `source`.
pub fn read(source: &str) -> FileItems {
    let tokens = tokenize(source);
    let mut items = FileItems::default();
    // Each open brace: the inline module it opens, or `None`.
    let mut braces: Vec<Option<String>> = Vec::new();
    let mut opening: Option<String> = None;
    let mut path_attribute: Option<String> = None;
    let mut index = 0;
    while index < tokens.len() {
        let inline: Vec<String> = braces.iter().flatten().cloned().collect();
        let item = braces.iter().all(Option::is_some);
        match &tokens[index] {
            Token::Punct('{') => {
                braces.push(opening.take());
                path_attribute = None;
            }
            Token::Punct('}') => {
                braces.pop();
                path_attribute = None;
            }
            Token::Punct(';') => {
                opening = None;
                path_attribute = None;
            }
            Token::Punct('#') => {
                if let [Token::Punct('['), Token::Ident(name), Token::Punct('='), Token::Str(path), Token::Punct(']'), ..] =
                    &tokens[index + 1..]
                    && name == "path"
                {
                    path_attribute = Some(path.clone());
                    index += 5;
                }
            }
            Token::Ident(keyword) if keyword == "mod" => {
                if let Some(Token::Ident(name)) = tokens.get(index + 1) {
                    match tokens.get(index + 2) {
                        Some(Token::Punct(';')) => items.modules.push(ModDecl {
                            inline,
                            name: name.clone(),
                            path: path_attribute.take(),
                        }),
                        Some(Token::Punct('{')) => {
                            let mut path = inline;
                            path.push(name.clone());
                            items.inline_modules.push(path);
                            opening = Some(name.clone());
                        }
                        _ => {}
                    }
                    index += 1;
                }
            }
            Token::Ident(keyword) if keyword == "use" => {
                if matches!(
                    tokens.get(index + 1),
                    Some(Token::Ident(_) | Token::PathSep | Token::Punct('{'))
                ) {
                    let public = is_public(&tokens[..index]);
                    let mut paths = Vec::new();
                    index = use_tree(&tokens, index + 1, &mut Vec::new(), &mut paths);
                    items
                        .uses
                        .extend(paths.into_iter().map(|(segments, bound)| UsePath {
                            inline: inline.clone(),
                            segments,
                            bound,
                            item,
                            public,
                        }));
                    continue;
                }
            }
            Token::Ident(keyword) if item && is_item_keyword(keyword) => {
                let name_at = if keyword == "macro_rules" {
                    index + 2
                } else {
                    index + 1
                };
                if let Some(Token::Ident(name)) = tokens.get(name_at) {
                    items.defined.push((inline, name.clone()));
                }
            }
            Token::Ident(name) => {
                items.mentioned.insert(name.clone());
                if index == 0 || tokens[index - 1] != Token::PathSep {
                    let mut path = vec![name.clone()];
                    while let (Some(Token::PathSep), Some(Token::Ident(next))) = (
                        tokens.get(index + 2 * path.len() - 1),
                        tokens.get(index + 2 * path.len()),
                    ) {
                        path.push(next.clone());
                    }
                    if path.len() > 1 {
                        items.paths.push((inline, path));
                    }
                }
            }
            _ => {}
        }
        index += 1;
    }
    items
}

/// Whether the `use` after `before` is `pub`, `pub(crate)`, `pub(super)`
/// or `pub(in PATH)`.
fn is_public(before: &[Token]) -> bool {
    let mut at = before.len();
    if matches!(before.last(), Some(Token::Punct(')'))) {
        while at > 0 && before[at - 1] != Token::Punct('(') {
            at -= 1;
        }
        at = at.saturating_sub(1);
    }
    at > 0 && before[at - 1] == Token::Ident("pub".to_owned())
}

fn is_item_keyword(word: &str) -> bool {
    matches!(
        word,
        "fn" | "struct" | "enum" | "trait" | "type" | "const" | "static" | "union" | "macro_rules"
    )
}

/// Reads one use tree from `at` on, each path it names (prefixed by
/// `prefix`) into `paths`; returns the index after it (after the `;`, or
/// at the `,` or `}` that ends it inside a group).
fn use_tree(
    tokens: &[Token],
    mut at: usize,
    prefix: &mut Vec<String>,
    paths: &mut Vec<(Vec<String>, Option<String>)>,
) -> usize {
    let depth = prefix.len();
    loop {
        match tokens.get(at) {
            Some(Token::PathSep) => at += 1,
            Some(Token::Ident(segment)) if segment != "as" => {
                prefix.push(segment.clone());
                at += 1;
            }
            Some(Token::Ident(_)) => {
                // `as NAME`
                let bound = match tokens.get(at + 1) {
                    Some(Token::Ident(name)) if name != "_" => Some(name.clone()),
                    _ => None,
                };
                if bound.is_some() {
                    paths.push((prefix.clone(), bound));
                }
                at += 2;
                break;
            }
            Some(Token::Punct('*')) => {
                paths.push((prefix.clone(), None));
                at += 1;
                break;
            }
            Some(Token::Punct('{')) => {
                at += 1;
                while !matches!(tokens.get(at), None | Some(Token::Punct('}'))) {
                    at = use_tree(tokens, at, prefix, paths);
                    if matches!(tokens.get(at), Some(Token::Punct(','))) {
                        at += 1;
                    }
                }
                at += 1;
                break;
            }
            _ => {
                if prefix.len() > depth {
                    let mut segments = prefix.clone();
                    // `a::{self}` binds `a`.
                    if segments.last().is_some_and(|last| last == "self") {
                        segments.pop();
                    }
                    let bound = segments.last().cloned();
                    paths.push((segments, bound));
                }
                break;
            }
        }
    }
    prefix.truncate(depth);
    if matches!(tokens.get(at), Some(Token::Punct(';'))) {
        at += 1;
    }
    at
}

/// The tokens of `source` without comments, whitespace, numbers, char
/// literals or lifetimes; string literals keep their text (for `#[path]`).
fn tokenize(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        let next = chars.get(at + 1).copied();
        if c.is_whitespace() {
            at += 1;
        } else if c == '/' && next == Some('/') {
            while at < chars.len() && chars[at] != '\n' {
                at += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while at < chars.len() {
                if chars[at] == '/' && chars.get(at + 1) == Some(&'*') {
                    depth += 1;
                    at += 2;
                } else if chars[at] == '*' && chars.get(at + 1) == Some(&'/') {
                    depth -= 1;
                    at += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    at += 1;
                }
            }
        } else if c == '"' || ((c == 'r' || c == 'b' || c == 'c') && starts_string(&chars[at..])) {
            let (text, end) = string(&chars, at);
            tokens.push(Token::Str(text));
            at = end;
        } else if c == '\'' {
            at = quote(&chars, at);
        } else if c.is_alphabetic() || c == '_' {
            let start = at;
            while at < chars.len()
                && (chars[at].is_alphanumeric() || chars[at] == '_' || chars[at] == '#')
            {
                at += 1;
            }
            let word: String = chars[start..at].iter().collect();
            tokens.push(Token::Ident(word.trim_start_matches("r#").to_owned()));
        } else if c.is_ascii_digit() {
            while at < chars.len() && (chars[at].is_alphanumeric() || chars[at] == '_') {
                at += 1;
            }
        } else if c == ':' && next == Some(':') {
            tokens.push(Token::PathSep);
            at += 2;
        } else {
            tokens.push(Token::Punct(c));
            at += 1;
        }
    }
    tokens
}

/// Whether a string literal with a prefix (`r"`, `r#"`, `b"`, `br"`, `c"`) starts here.
fn starts_string(chars: &[char]) -> bool {
    let prefix = chars
        .iter()
        .take_while(|c| matches!(c, 'r' | 'b' | 'c'))
        .count();
    matches!(prefix, 1 | 2)
        && matches!(chars.get(prefix), Some('"' | '#'))
        && chars[prefix..].iter().find(|&&c| c != '#') == Some(&'"')
        && (chars[..prefix].contains(&'r') || chars[prefix] == '"')
}

/// The text of the string literal at `at` and the index after it.
fn string(chars: &[char], mut at: usize) -> (String, usize) {
    let raw = chars[at] != '"'
        && chars[at..]
            .iter()
            .take_while(|&&c| c != '"' && c != '#')
            .any(|&c| c == 'r');
    while chars[at] != '"' && chars[at] != '#' {
        at += 1;
    }
    let hashes = chars[at..].iter().take_while(|&&c| c == '#').count();
    at += hashes + 1;
    let start = at;
    while at < chars.len() {
        if !raw && chars[at] == '\\' {
            at += 2;
            continue;
        }
        if chars[at] == '"'
            && chars[at + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == '#')
                .count()
                == hashes
        {
            let text = chars[start..at].iter().collect();
            return (text, at + 1 + hashes);
        }
        at += 1;
    }
    (chars[start..].iter().collect(), chars.len())
}

/// Skips a char literal or a lifetime at `at`; returns the index after it.
fn quote(chars: &[char], at: usize) -> usize {
    match (chars.get(at + 1), chars.get(at + 2)) {
        (Some('\\'), _) => {
            let mut end = at + 2;
            while end < chars.len() && chars[end] != '\'' {
                end += 1;
            }
            end + 1
        }
        (Some(_), Some('\'')) => at + 3,
        _ => {
            let mut end = at + 1;
            while end < chars.len() && (chars[end].is_alphanumeric() || chars[end] == '_') {
                end += 1;
            }
            end
        }
    }
}

#[cfg(test)]
mod tests {
    use super::read;

    #[test]
    fn reads_uses_mods_and_items() {
        let items = read(
            r##"
            //! use crate::not::This;
            #[path = "other.rs"]
            pub(crate) mod child;
            mod inline {
                use super::{a::B as C, d::{self, *}};
                pub struct Item;
            }
            fn f() { use crate::x::Y; let s = "use crate::z::W;"; let c = '{'; }
            pub use self::child::Thing;
            "##,
        );
        assert_eq!(items.modules.len(), 1);
        assert_eq!(items.modules[0].path.as_deref(), Some("other.rs"));
        assert_eq!(items.inline_modules, vec![vec!["inline".to_owned()]]);
        let uses: Vec<_> = items
            .uses
            .iter()
            .map(|path| {
                (
                    path.inline.join("::"),
                    path.segments.join("::"),
                    path.bound.clone(),
                    path.public,
                )
            })
            .collect();
        assert_eq!(
            uses,
            vec![
                (
                    "inline".to_owned(),
                    "super::a::B".to_owned(),
                    Some("C".to_owned()),
                    false
                ),
                (
                    "inline".to_owned(),
                    "super::d".to_owned(),
                    Some("d".to_owned()),
                    false
                ),
                ("inline".to_owned(), "super::d".to_owned(), None, false),
                (
                    String::new(),
                    "crate::x::Y".to_owned(),
                    Some("Y".to_owned()),
                    false
                ),
                (
                    String::new(),
                    "self::child::Thing".to_owned(),
                    Some("Thing".to_owned()),
                    true
                ),
            ]
        );
        assert!(items
            .defined
            .contains(&(vec!["inline".to_owned()], "Item".to_owned())));
        assert!(items.defined.contains(&(vec![], "f".to_owned())));
        assert!(items.mentioned.contains("s") && !items.mentioned.contains("W"));
    }
}
