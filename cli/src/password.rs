//! The Redis password kept out of argv: read from `--password-file` or
//! `DLOCK_PASSWORD`, and put into the URLs that carry none; the Sentinels'
//! from `--sentinel-password-file` the same way.

use std::path::Path;

use crate::failure::Failure;

/// The environment variable that holds the password when no file is given.
pub const PASSWORD_ENV: &str = "DLOCK_PASSWORD";

/// The environment variable that holds the Sentinels' password when neither
/// option gives it.
pub const SENTINEL_PASSWORD_ENV: &str = "DLOCK_SENTINEL_PASSWORD";

/// The password from `file` (its content without the final line break),
/// else from `DLOCK_PASSWORD`, else none. An unreadable file is a usage
/// error that names the path, never the content.
pub fn read(file: Option<&Path>) -> Result<Option<String>, Failure> {
    if let Some(path) = file {
        return from_file(path, "--password-file").map(Some);
    }
    Ok(std::env::var(PASSWORD_ENV)
        .ok()
        .filter(|password| !password.is_empty()))
}

/// The password in the file at `path` (its content without the final line
/// break), given with `option`. An unreadable file is a usage error that
/// names the option and the path, never the content.
pub fn from_file(path: &Path, option: &str) -> Result<String, Failure> {
    let content = std::fs::read_to_string(path).map_err(|err| {
        Failure::Usage(format!(
            "cannot read {option} {}: {err}; give a readable file that holds the password",
            path.display()
        ))
    })?;
    Ok(content.trim_end_matches(['\n', '\r']).to_owned())
}

/// `url` with `password` as its password when it has none (its user name,
/// if any, kept); a URL with a password of its own is returned unchanged.
pub fn into_url(url: &str, password: &str) -> String {
    let start = url.find("://").map_or(0, |scheme| scheme + 3);
    let (scheme, rest) = url.split_at(start);
    let encoded = encode(password);
    match rest.rfind('@') {
        Some(at) if rest[..at].contains(':') => url.to_owned(),
        Some(at) => format!("{scheme}{}:{encoded}{}", &rest[..at], &rest[at..]),
        None => format!("{scheme}:{encoded}@{rest}"),
    }
}

/// `text` percent-encoded for the user part of a URL (only unreserved
/// characters stay as they are).
fn encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::into_url;

    #[test]
    fn password_goes_into_a_url_without_one() {
        assert_eq!(into_url("redis://h:1/2", "pw"), "redis://:pw@h:1/2");
        assert_eq!(into_url("redis://svc@h:1", "pw"), "redis://svc:pw@h:1");
    }

    #[test]
    fn a_urls_own_password_wins() {
        assert_eq!(into_url("redis://:mine@h:1", "pw"), "redis://:mine@h:1");
    }

    #[test]
    fn separators_in_the_password_are_encoded() {
        assert_eq!(
            into_url("redis://h:1", "a@b:c/d%"),
            "redis://:a%40b%3Ac%2Fd%25@h:1"
        );
    }
}
