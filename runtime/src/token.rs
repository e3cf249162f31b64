//! Owner tokens: who holds a lock.
//!
//! A token is 128 random bits (what makes it unguessable) followed by who
//! took the lock, so that anyone who reads a lock key in Redis can tell its
//! holder without another key or round trip:
//!
//! ```text
//! 3f9c…e1|1764833000123|30000|4242|web-7|orders-api|shop::buy
//! random  acquired (ms)  ttl   pid  host manager    label
//! ```
//!
//! Fields are separated by `|`; the host and manager name have `|` and
//! control characters replaced by `_` and are cut to 64 bytes, the label
//! (last, so it may hold `|`) to 200 bytes. Every script compares tokens as
//! whole strings, so the identity part changes nothing in how locks work.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Longest host or manager name kept in a token, in bytes.
const NAME_LIMIT: usize = 64;
/// Longest label kept in a token, in bytes.
const LABEL_LIMIT: usize = 200;

/// The owner token of one acquisition.
///
/// One is made per acquisition, so no two holders (even in one process) share
/// one, and no other client can guess it to free our lock.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct OwnerToken(Arc<str>);

impl OwnerToken {
    /// A token with 128 fresh random bits and no identity: for tests, and
    /// for names no lock uses (`LockManager::check`'s probe keys).
    pub(crate) fn generate() -> Self {
        let mut hex = String::with_capacity(32);
        push_hex(&mut hex, thread_random());
        OwnerToken(hex.into())
    }

    /// A token for an acquisition by `identity`'s manager with lease `ttl_ms`
    /// and `label`, taken now. Panics only if the OS random source is broken.
    /// Written in this thread's scratch buffer, then copied into its one
    /// allocation: an acquisition makes one of these each.
    pub(crate) fn issue(identity: &Identity, ttl_ms: u64, label: Option<&str>) -> Self {
        thread_local! {
            static SCRATCH: RefCell<String> = const { RefCell::new(String::new()) };
        }
        let acquired_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        let label = label.unwrap_or("");
        let write = |token: &mut String, random: [u8; 16]| {
            token.clear();
            push_hex(token, random);
            token.push('|');
            push_decimal(token, acquired_ms);
            token.push('|');
            push_decimal(token, ttl_ms);
            token.push('|');
            token.push_str(&identity.suffix);
            token.push('|');
            push_clean(token, label, LABEL_LIMIT, false);
            OwnerToken(Arc::from(token.as_str()))
        };
        // A thread being torn down may have neither the scratch buffer nor
        // the thread's generator left (the generator goes first when both
        // were set up in this call): a buffer of its own and the system's
        // generator then, never a panic.
        SCRATCH
            .try_with(|scratch| {
                let mut token = scratch.try_borrow_mut().ok()?;
                Some(write(&mut token, thread_random()))
            })
            .ok()
            .flatten()
            .unwrap_or_else(|| write(&mut String::new(), system_random()))
    }

    /// The token as stored in Redis.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerToken({})", self.as_str())
    }
}

/// Who a manager is, as every token it issues says: its name, host and
/// process id.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    name: String,
    /// `pid|host|name`, as every token of this manager carries it.
    suffix: String,
}

impl Identity {
    /// This process on this host, under `name` (default: `host:pid`).
    pub(crate) fn of_this_process(name: Option<&str>) -> Self {
        let host = clean(&host_name(), NAME_LIMIT, true);
        let pid = std::process::id();
        let name = match name {
            Some(name) => clean(name, NAME_LIMIT, true),
            None => format!("{host}:{pid}"),
        };
        let suffix = format!("{pid}|{host}|{name}");
        Identity { name, suffix }
    }

    /// The manager's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

/// Who holds (or waits for) a lock, as its owner token says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The name of the holder's manager (`LockManagerBuilder::name`, by
    /// default `host:pid`).
    pub manager: String,
    /// The host the holder runs on.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// The acquisition's label (`LockOptions::label`; the annotated
    /// function's path under the attribute), if it had one.
    pub label: Option<String>,
    /// When the holder asked for the lock, by its own clock: the token is
    /// made when the acquisition starts, so for a holder that waited in the
    /// queue this includes its wait.
    pub acquired_at: SystemTime,
    /// The lease the holder asked for; each renewal extends the lock to it.
    pub ttl: Duration,
}

impl Holder {
    /// Reads the identity part of an owner token (as a guard's `token()`
    /// or [`LockInfo::token`](crate::admin::LockInfo) shows it); `None` for a
    /// token without one (written by another client, or by a version
    /// before identities).
    pub fn from_token(token: &str) -> Option<Holder> {
        let mut fields = token.splitn(7, '|');
        let random = fields.next()?;
        if random.len() != 32 || !random.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        let acquired_ms: u64 = fields.next()?.parse().ok()?;
        let ttl_ms: u64 = fields.next()?.parse().ok()?;
        let pid = fields.next()?.parse().ok()?;
        let host = fields.next()?.to_owned();
        let manager = fields.next()?.to_owned();
        let label = fields.next()?;
        Some(Holder {
            manager,
            host,
            pid,
            label: (!label.is_empty()).then(|| label.to_owned()),
            acquired_at: UNIX_EPOCH + Duration::from_millis(acquired_ms),
            ttl: Duration::from_millis(ttl_ms),
        })
    }
}

/// 128 bits from the thread's cryptographic generator (ChaCha12, seeded
/// from the operating system and reseeded every 64 KiB): unguessable,
/// without a system call per token.
fn thread_random() -> [u8; 16] {
    let mut raw = [0u8; 16];
    rand::Rng::fill_bytes(&mut rand::rng(), &mut raw);
    raw
}

/// 128 bits from the operating system, for a thread whose own generator is
/// gone. Panics only if the OS random source is broken.
fn system_random() -> [u8; 16] {
    let mut raw = [0u8; 16];
    rand::TryRng::try_fill_bytes(&mut rand::rngs::SysRng, &mut raw)
        .expect("the operating system's random source failed");
    raw
}

/// Appends `raw` as 32 lowercase hex digits.
fn push_hex(out: &mut String, raw: [u8; 16]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = [0u8; 32];
    for (pair, byte) in hex.chunks_exact_mut(2).zip(raw) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0x0f)];
    }
    out.push_str(std::str::from_utf8(&hex).unwrap_or_default());
}

/// Appends `value` in decimal digits, without the formatting machinery:
/// every acquisition writes two numbers into its token.
fn push_decimal(out: &mut String, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.push_str(std::str::from_utf8(&digits[start..]).unwrap_or_default());
}

/// `text` with control characters (and `|` when `is_field`, which a later
/// field follows) replaced by `_`, cut to at most `limit` bytes on a
/// character boundary.
fn clean(text: &str, limit: usize, is_field: bool) -> String {
    let mut cleaned = String::with_capacity(text.len().min(limit));
    push_clean(&mut cleaned, text, limit, is_field);
    cleaned
}

/// Appends [`clean`]`(text, limit, is_field)` to `out`.
fn push_clean(out: &mut String, text: &str, limit: usize, is_field: bool) {
    let start = out.len();
    for c in text.chars() {
        let c = if c.is_control() || (is_field && c == '|') {
            '_'
        } else {
            c
        };
        if out.len() - start + c.len_utf8() > limit {
            break;
        }
        out.push(c);
    }
}

/// The host's name: the kernel's, else `$HOSTNAME`, else `unknown-host`.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown-host".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guard dropped in a thread-local's destructor may issue a token
    /// (releasing, say) after the scratch buffer is gone: it still gets
    /// one, and nothing panics.
    #[test]
    fn a_token_is_issued_while_its_thread_is_torn_down() {
        struct IssuesOnDrop(std::sync::mpsc::Sender<String>);
        impl Drop for IssuesOnDrop {
            fn drop(&mut self) {
                let identity = Identity::of_this_process(None);
                let token = OwnerToken::issue(&identity, 1_000, None);
                let _ = self.0.send(token.as_str().to_owned());
            }
        }
        thread_local! {
            static LATE: RefCell<Option<IssuesOnDrop>> = const { RefCell::new(None) };
        }
        let (sender, issued) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Registered before the scratch buffer, so torn down after it.
            LATE.with(|late| *late.borrow_mut() = Some(IssuesOnDrop(sender)));
            OwnerToken::issue(&Identity::of_this_process(None), 1_000, None);
        })
        .join()
        .expect("no panic while the thread is torn down");
        let token = issued.recv().expect("a token issued in the teardown");
        assert!(token[..32].bytes().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn decimals_are_written_as_format_writes_them() {
        for value in [0, 7, 10, 999, 1_764_833_000_123, u64::MAX] {
            let mut written = String::from("|");
            push_decimal(&mut written, value);
            assert_eq!(written, format!("|{value}"));
        }
    }

    #[test]
    fn tokens_start_with_32_hex_digits_and_are_distinct() {
        let identity = Identity::of_this_process(None);
        let a = OwnerToken::issue(&identity, 1_000, None);
        let b = OwnerToken::issue(&identity, 1_000, None);
        let random = &a.as_str()[..32];
        assert!(random.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(a.as_str().as_bytes()[32], b'|');
        assert_ne!(a, b);
        assert_eq!(OwnerToken::generate().as_str().len(), 32);
    }

    #[test]
    fn a_token_names_its_holder() {
        let identity = Identity::of_this_process(Some("orders-api"));
        let token = OwnerToken::issue(&identity, 30_000, Some("shop::buy|v2"));
        let holder = Holder::from_token(token.as_str()).expect("identity");
        assert_eq!(holder.manager, "orders-api");
        assert_eq!(holder.pid, std::process::id());
        assert_eq!(holder.label.as_deref(), Some("shop::buy|v2"));
        assert_eq!(holder.ttl, Duration::from_secs(30));
        let age = SystemTime::now()
            .duration_since(holder.acquired_at)
            .expect("acquired in the past");
        assert!(age < Duration::from_secs(5), "{age:?}");
    }

    #[test]
    fn names_cannot_break_the_layout_and_are_bounded() {
        let identity = Identity::of_this_process(Some("a|b\nc"));
        assert_eq!(identity.name(), "a_b_c");
        let long = "é".repeat(500);
        let token = OwnerToken::issue(&Identity::of_this_process(Some(&long)), 1, Some(&long));
        let holder = Holder::from_token(token.as_str()).expect("identity");
        assert!(holder.manager.len() <= NAME_LIMIT);
        assert!(holder.label.unwrap().len() <= LABEL_LIMIT);
    }

    #[test]
    fn a_token_without_identity_names_nobody() {
        assert_eq!(Holder::from_token(OwnerToken::generate().as_str()), None);
        assert_eq!(Holder::from_token("not a token"), None);
        assert_eq!(Holder::from_token(""), None);
    }
}
