//! [`IdIndex`]: the fold's index from string ids to positions in a list that holds the ids.

use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

/// A hash index from a string id to its position in a list that stores the ids itself (the
/// fold's tasks and messages). It keeps no copy of the keys: an entry is the key's hash and
/// the position, and lookups compare the candidate's id in the list. So indexing an id costs no
/// allocation and growing the table never reads the keys again.
///
/// Every method that reads keys takes `id_of(position)`, the id stored at a position; the
/// caller keeps the list and the index in step (each id at most once).
#[derive(Debug, Clone, Default)]
pub(crate) struct IdIndex {
    table: HashTable<(u64, usize)>,
    hasher: RandomState,
}

impl IdIndex {
    fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The position of `key`, if indexed.
    pub(crate) fn get<'a>(&self, key: &str, id_of: impl Fn(usize) -> &'a str) -> Option<usize> {
        let hash = self.hash(key);
        self.table
            .find(hash, |&(h, position)| h == hash && id_of(position) == key)
            .map(|&(_, position)| position)
    }

    /// Indexes `key` (not yet indexed) at `position`.
    pub(crate) fn insert(&mut self, key: &str, position: usize) {
        let hash = self.hash(key);
        self.table
            .insert_unique(hash, (hash, position), |&(h, _)| h);
    }

    /// The number of indexed ids.
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }
}
