//! Owner tokens: who holds a lock.

use std::fmt;

/// A 128-bit owner token drawn from the operating system's CSPRNG.
///
/// One is made per acquisition, so no two holders (even in one process) share
/// one, and no other client can guess it to free our lock.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct OwnerToken([u8; 32]);

impl OwnerToken {
    /// Draws a fresh token. Panics only if the OS random source is broken.
    pub(crate) fn generate() -> Self {
        let mut raw = [0u8; 16];
        getrandom::fill(&mut raw).expect("the operating system's random source failed");
        let mut hex = [0u8; 32];
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        for (i, byte) in raw.iter().enumerate() {
            hex[2 * i] = DIGITS[usize::from(byte >> 4)];
            hex[2 * i + 1] = DIGITS[usize::from(byte & 0x0f)];
        }
        OwnerToken(hex)
    }

    /// The token as 32 lowercase hex digits, as stored in Redis.
    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("hex digits are ASCII")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_32_hex_digits_and_distinct() {
        let a = OwnerToken::generate();
        let b = OwnerToken::generate();
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
