//! Redis Cluster key hashing: which of the 16384 hash slots a key lives in.

/// Hash slots of a Redis Cluster; a key's slot is below this.
pub const CLUSTER_SLOTS: u16 = 16384;

/// The hash slot of `key`, exactly as Redis Cluster computes it (and
/// `CLUSTER KEYSLOT` reports it): CRC16-XMODEM of the key modulo 16384.
///
/// A hash tag is honoured: if the key has a `{` followed later by a `}` with
/// at least one byte between them, only the bytes between the first `{` and
/// the first `}` after it are hashed, so `{user1}.a` and `{user1}.b` share a
/// slot. Total: every byte string, including the empty one, has a slot.
pub fn key_slot(key: impl AsRef<[u8]>) -> u16 {
    let key = key.as_ref();
    crc16_xmodem(hash_tag(key).unwrap_or(key)) % CLUSTER_SLOTS
}

/// The non-empty bytes between the first `{` and the next `}`, if any.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&byte| byte == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&byte| byte == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// CRC16 with polynomial 0x1021, initial value 0, no reflection (XMODEM).
fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_xmodem_check_value() {
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        assert_eq!(crc16_xmodem(b""), 0);
    }

    #[test]
    fn slots_match_what_redis_reports() {
        // Each pair as `CLUSTER KEYSLOT` of redis-server 7.0 answered it.
        let expected = [
            ("123456789", 12739),
            ("foo", 12182),
            ("bar", 5061),
            ("", 0),
            ("{user1000}.following", 3443),
            ("a{b}", 3300),
        ];
        for (key, slot) in expected {
            assert_eq!(key_slot(key), slot, "{key:?}");
        }
    }

    #[test]
    fn hash_tag_rules_follow_redis() {
        assert_eq!(
            key_slot("{user1000}.following"),
            key_slot("{user1000}.followers")
        );
        assert_eq!(key_slot("foo{bar}{zap}"), key_slot("bar"));
        // An empty tag hashes the whole key; so does an unclosed one.
        assert_eq!(key_slot("foo{}{bar}"), 8363);
        assert_eq!(key_slot("{bar"), 4015);
        // The tag runs to the first `}` after the first `{`.
        assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
    }
}
