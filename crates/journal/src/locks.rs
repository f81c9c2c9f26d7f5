//! Which session files a process holds open for writing, without touching them.
//!
//! The journal's single writer holds an exclusive `flock` on its session file for as long as
//! the agent is resident (REFERENCE b.1's Activation). Taking a lock to test this could make a
//! writer that opens the file at that instant wait, so the panel reads the kernel's lock table
//! (`/proc/locks`) instead. Where that table cannot be read, residency is unknown (`None`) and
//! the status falls back to the log alone. Used by the web panel and `troupe team show` (stalled
//! owners: is the owner of a task in progress resident?).

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// A file's identity as the lock table names it: device major, minor, inode.
type FileKey = (u32, u32, u64);

/// A snapshot of the files some process holds a `flock` write lock on.
#[derive(Debug, Clone, Default)]
pub struct LockTable {
    held: Option<HashSet<FileKey>>,
}

impl LockTable {
    /// Reads `/proc/locks`; an unreadable table gives a snapshot that knows nothing.
    pub fn read() -> Self {
        match std::fs::read_to_string("/proc/locks") {
            Ok(text) => Self::parse(&text),
            Err(_) => Self { held: None },
        }
    }

    /// Parses the lock table's text: lines such as
    /// `1: FLOCK  ADVISORY  WRITE 4242 00:2f:1234567 0 EOF` (major and minor in hex, the inode
    /// in decimal). Lines of processes waiting for a lock (`->`) and read locks are left out.
    pub fn parse(text: &str) -> Self {
        let mut held = HashSet::new();
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(1) != Some(&"FLOCK") || fields.get(3) != Some(&"WRITE") {
                continue;
            }
            let Some(file) = fields.get(5) else { continue };
            let mut parts = file.split(':');
            let (Some(major), Some(minor), Some(inode), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if let (Ok(major), Ok(minor), Ok(inode)) = (
                u32::from_str_radix(major, 16),
                u32::from_str_radix(minor, 16),
                inode.parse::<u64>(),
            ) {
                held.insert((major, minor, inode));
            }
        }
        Self { held: Some(held) }
    }

    /// Whether a process holds `path` locked for writing; `None` when unknown (no table, or
    /// the file cannot be examined).
    pub fn is_held(&self, path: &Path) -> Option<bool> {
        let held = self.held.as_ref()?;
        let meta = std::fs::metadata(path).ok()?;
        let dev = meta.dev();
        let key = (rustix::fs::major(dev), rustix::fs::minor(dev), meta.ino());
        Some(held.contains(&key))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_file_locked_by_this_process_is_seen_as_held_and_released() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, b"x").unwrap();
        let before = LockTable::read();
        if before.held.is_none() {
            // No lock table on this system: residency is unknown, never guessed.
            assert_eq!(before.is_held(&path), None);
            return;
        }
        assert_eq!(before.is_held(&path), Some(false));
        let file = std::fs::File::open(&path).unwrap();
        file.lock().unwrap();
        assert_eq!(LockTable::read().is_held(&path), Some(true));
        drop(file);
        assert_eq!(LockTable::read().is_held(&path), Some(false));
    }

    #[test]
    fn waiting_and_read_locks_are_not_held_for_writing() {
        let table = LockTable::parse(
            "1: FLOCK  ADVISORY  WRITE 10 00:2f:77 0 EOF\n\
             1: -> FLOCK  ADVISORY  WRITE 11 00:2f:78 0 EOF\n\
             2: FLOCK  ADVISORY  READ 12 00:2f:79 0 EOF\n\
             3: POSIX  ADVISORY  WRITE 13 fd:01:80 0 EOF\n",
        );
        let held = table.held.unwrap();
        assert_eq!(held.len(), 1);
        assert!(held.contains(&(0, 0x2f, 77)));
    }
}
