//! A list with reusable places: O(1) insertion, removal by the index its
//! insertion gave, and draining. The renewal timer keeps the first cycles
//! of its leases in one, so that a lease ending before the timer takes it
//! into its schedule costs a store and a removal, not a sorted map's.

/// Values at stable indices; a removed value's index is given to a later
/// insertion.
pub(crate) struct Slab<T> {
    entries: Vec<Option<T>>,
    vacant: Vec<usize>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            entries: Vec::new(),
            vacant: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    /// Keeps `value`; its index, valid until it is removed or drained.
    pub(crate) fn insert(&mut self, value: T) -> usize {
        match self.vacant.pop() {
            Some(index) => {
                self.entries[index] = Some(value);
                index
            }
            None => {
                self.entries.push(Some(value));
                self.entries.len() - 1
            }
        }
    }

    /// Takes out the value at `index`, if one is there.
    pub(crate) fn remove(&mut self, index: usize) -> Option<T> {
        let value = self.entries.get_mut(index)?.take()?;
        self.vacant.push(index);
        Some(value)
    }

    /// Takes out every value, leaving the slab empty (its memory kept).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.vacant.clear();
        self.entries.drain(..).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_index_is_reused_and_drain_empties() {
        let mut slab = Slab::default();
        let a = slab.insert('a');
        let b = slab.insert('b');
        assert_eq!(slab.remove(a), Some('a'));
        assert_eq!(slab.remove(a), None, "removed once");
        assert_eq!(slab.insert('c'), a, "the vacant index is reused");
        let mut all: Vec<char> = slab.drain().collect();
        all.sort_unstable();
        assert_eq!(all, ['b', 'c']);
        assert_eq!(slab.remove(b), None, "drained");
        assert_eq!(slab.insert('d'), 0, "empty after draining");
    }
}
