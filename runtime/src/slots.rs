//! Redis Cluster hash slots: the slot a hash tag falls in (CRC16 modulo
//! 16384, as Redis computes it), and one short tag per slot, which names the
//! node marker that every lock of that slot shares (see `keys`): a cluster
//! then keeps at most one marker per slot and namespace, however many keys
//! are locked.

use std::sync::OnceLock;

/// The number of hash slots of a Redis Cluster.
const SLOTS: usize = 16_384;

/// The highest number whose decimal text is a [`marker_tag`]: the numbers
/// from 0 up to it hash to every slot (a unit test checks it).
const LAST_MARKER_TAG: u32 = 109_757;

/// The hash slot of a key whose hash tag (between its braces) is `tag`.
pub(crate) fn slot(tag: &str) -> usize {
    usize::from(crc16(tag.as_bytes())) % SLOTS
}

/// The tag of the marker of `slot`: the smallest number, in decimal, whose
/// [`slot`] it is. The same in every process and version.
pub(crate) fn marker_tag(slot: usize) -> u32 {
    static TAGS: OnceLock<Box<[u32]>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags = vec![u32::MAX; SLOTS];
        for number in 0..=LAST_MARKER_TAG {
            let first = &mut tags[self::slot(&number.to_string())];
            if *first == u32::MAX {
                *first = number;
            }
        }
        tags.into_boxed_slice()
    });
    tags[slot % SLOTS]
}

/// CRC-16/XMODEM (polynomial 0x1021, initial value 0), Redis's key hash.
fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0, |crc, &byte| {
        (0..8).fold(crc ^ (u16::from(byte) << 8), |crc, _| {
            if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_s() {
        assert_eq!(crc16(b"123456789"), 0x31c3, "CRC-16/XMODEM's check value");
        assert_eq!(slot("foo"), 12_182, "CLUSTER KEYSLOT foo");
        assert_eq!(slot(""), 0);
    }

    #[test]
    fn every_slot_has_a_marker_tag_of_its_own_slot() {
        for each in 0..SLOTS {
            let tag = marker_tag(each);
            assert!(tag <= LAST_MARKER_TAG, "slot {each} has no tag");
            assert_eq!(slot(&tag.to_string()), each);
        }
        assert_eq!(marker_tag(slot("0")), 0);
    }
}
