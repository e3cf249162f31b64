//! Passwords out of URLs before they are shown: every URL the crate keeps for
//! an error message, a `Debug` output or a log line goes through
//! [`redact_url`] first.
//!
//! It works on the text, not on a parsed URL, so a URL that does not parse
//! (the very one an error message is about) is redacted too.

/// What stands in for a password.
const MASK: &str = "***";

/// `url` with its password replaced by `***`: `redis://user:pw@host:6379/0`
/// becomes `redis://user:***@host:6379/0`; the user name, host, port and
/// database stay.
///
/// Guarantees that nothing between the first `:` of the user part and the
/// last `@` of the URL is kept, whether or not the URL parses: a password
/// holding `@`, `:` or `/`, a URL without scheme (`:pw@host`), a bad port.
/// When in doubt it hides more (a `@` in a path or query counts as the end
/// of the user part), never less. One URL at a time: a list is redacted
/// URL by URL, as a `,` may belong to a password.
pub fn redact_url(url: &str) -> String {
    let start = url.find("://").map_or(0, |scheme| scheme + 3);
    let rest = &url[start..];
    let Some(at) = rest.rfind('@') else {
        return url.to_owned();
    };
    let user_info = &rest[..at];
    let Some(colon) = user_info.find(':') else {
        // `redis://name@host`: a user name without password.
        return url.to_owned();
    };
    format!(
        "{}{}:{MASK}{}",
        &url[..start],
        &user_info[..colon],
        &rest[at..]
    )
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn password_is_masked_and_the_rest_kept() {
        assert_eq!(
            redact_url("redis://svc:s3cr3t@10.0.0.1:6379/2"),
            "redis://svc:***@10.0.0.1:6379/2"
        );
        assert_eq!(
            redact_url("rediss://:s3cr3t@cache.internal"),
            "rediss://:***@cache.internal"
        );
    }

    #[test]
    fn url_without_password_is_unchanged() {
        for url in [
            "redis://127.0.0.1:6379",
            "redis://svc@127.0.0.1:6379",
            "garbage",
            "",
        ] {
            assert_eq!(redact_url(url), url);
        }
    }

    #[test]
    fn malformed_urls_hide_their_password_too() {
        for (url, shown) in [
            (
                "redis://:s3cr3t@127.0.0.1:notaport",
                "redis://:***@127.0.0.1:notaport",
            ),
            (":s3cr3t@127.0.0.1:6379", ":***@127.0.0.1:6379"),
            ("u:s3cr3t@host", "u:***@host"),
            ("redis//:s3cr3t@host", "redis//:***@host"),
        ] {
            assert_eq!(redact_url(url), shown);
        }
    }

    #[test]
    fn passwords_holding_separators_are_masked_whole() {
        for (url, shown) in [
            ("redis://u:p@ss:w/rd@host:1", "redis://u:***@host:1"),
            ("redis://u:a:b@host", "redis://u:***@host"),
            ("redis://u:%40x@host", "redis://u:***@host"),
        ] {
            assert_eq!(redact_url(url), shown);
        }
    }

    #[test]
    fn a_comma_in_a_password_is_part_of_it() {
        assert_eq!(redact_url("redis://u:a,b@host"), "redis://u:***@host");
    }
}
