//! A cheap hasher for the runtime's own in-process maps.
//!
//! Their keys are lease ids and lock labels written in the program itself:
//! nobody outside the process chooses them, so hash flooding is no concern,
//! and the standard SipHash costs more than the map operation it serves on
//! every acquisition. This is a multiply-rotate per 8-byte word, as rustc's
//! FxHash; the multiplication spreads sequential ids over the high bits
//! that hashbrown's groups are tagged with.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` hashed with [`FastHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// An odd constant with well-mixed bits (FxHash's).
const SPREAD: u64 = 0x517c_c1b7_2722_0a95;

/// Hashes each word into the state by rotate, xor and multiply; see the
/// module documentation for where it may be used.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SPREAD);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let mut full = [0u8; 8];
            full.copy_from_slice(word);
            self.add(u64::from_le_bytes(full));
        }
        // The last word carries how many of its bytes are the key's, in its
        // top byte (at most 7 are), so trailing zero bytes still count.
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            last[7] = rest.len() as u8;
            self.add(u64::from_le_bytes(last));
        }
    }

    fn write_u8(&mut self, byte: u8) {
        self.add(u64::from(byte));
    }

    fn write_u64(&mut self, word: u64) {
        self.add(word);
    }

    fn write_usize(&mut self, word: usize) {
        self.add(word as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    fn hash_of(value: impl std::hash::Hash) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(value)
    }

    /// Sequential ids differ in the top 7 bits (hashbrown's group tags) as
    /// often as random values would, and strings differing only past their
    /// first word, or in length, hash apart.
    #[test]
    fn sequential_ids_spread_over_the_top_bits_and_strings_hash_apart() {
        let tags: std::collections::HashSet<u64> =
            (0..1024u64).map(|id| hash_of(id) >> 57).collect();
        assert!(tags.len() > 100, "only {} of 128 tags used", tags.len());
        assert_ne!(hash_of("stock:{sku}:a"), hash_of("stock:{sku}:b"));
        assert_ne!(hash_of("abc"), hash_of("abc\0"));
        assert_eq!(hash_of("unlabelled"), hash_of(String::from("unlabelled")));
    }
}
