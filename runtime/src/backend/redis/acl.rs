//! What a Redis ACL refusal means for the lock: a `NOPERM` reply (or the
//! `ERR` a script gets for a command its user may not run) becomes
//! [`LockError::PermissionDenied`] naming the rule to add to the user.

use std::sync::Arc;

use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::LockError;

/// The start of what Redis 7 answers when a script's `redis.call` is refused
/// by the ACL; its error code is a plain `ERR`.
const SCRIPT_REFUSED: &str = "The user executing the script can't";

/// `Some(PermissionDenied)` when `err` is an ACL refusal, naming the rule
/// the user lacks as far as the server's message tells it.
pub(in crate::backend) fn permission_denied(err: &RedisError) -> Option<LockError> {
    let detail = err.detail().unwrap_or_default();
    let refused = matches!(err.kind(), ErrorKind::Server(ServerErrorKind::NoPerm))
        || detail.contains(SCRIPT_REFUSED);
    if !refused {
        return None;
    }
    // Only the server's sentence: a script's error also names its sha and line.
    let detail = detail.split(" script: ").next().unwrap_or(detail).trim();
    Some(LockError::PermissionDenied {
        detail: detail.to_owned(),
        rule: rule_for(detail),
        source: Some(Arc::new(err.clone())),
    })
}

/// The ACL rule that grants what `detail` (the server's refusal) says is missing.
fn rule_for(detail: &str) -> String {
    if detail.contains("channel") {
        namespace_rule('&', "channels")
    } else if detail.contains("key") {
        namespace_rule('~', "keys")
    } else if let Some(command) = quoted(detail) {
        format!("`+{command}`")
    } else {
        "every command of the guide's least-privilege ACL (a lock script was refused one)"
            .to_owned()
    }
}

/// The patterns (`~` keys, `&` channels) of a namespace's `what`.
fn namespace_rule(kind: char, what: &str) -> String {
    format!(
        "`{kind}<base>:* {kind}<base>-*`, the {what} of the namespace `<base>:` (for `lock:`, `{kind}lock:* {kind}lock-*`; on a Redis Cluster `{kind}{{*}}lock:* {kind}{{*}}lock-*`)"
    )
}

/// The first `'…'` of `text`: the command Redis names in a refusal.
fn quoted(text: &str) -> Option<&str> {
    let (_, rest) = text.split_once('\'')?;
    let (command, _) = rest.split_once('\'')?;
    Some(command)
}

#[cfg(test)]
mod tests {
    use super::rule_for;

    #[test]
    fn a_refused_command_names_its_plus_rule() {
        assert_eq!(
            rule_for("this user has no permissions to run the 'script|load' command"),
            "`+script|load`"
        );
    }

    #[test]
    fn refused_keys_and_channels_name_the_namespace_patterns() {
        assert!(rule_for(
            "this user has no permissions to access one of the keys used as arguments"
        )
        .starts_with("`~<base>:* ~<base>-*`"));
        assert!(rule_for(
            "this user has no permissions to access one of the channels used as arguments"
        )
        .starts_with("`&<base>:* &<base>-*`"));
        assert!(rule_for(
            "The user executing the script can't access at least one of the keys mentioned in the command arguments"
        )
        .starts_with("`~<base>:* ~<base>-*`"));
    }

    #[test]
    fn a_command_refused_inside_a_script_points_at_the_whole_list() {
        assert!(
            rule_for("The user executing the script can't run this command or subcommand")
                .contains("least-privilege ACL")
        );
    }
}
