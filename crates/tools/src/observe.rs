//! File versions, per-owner observations and the per-target mutation lock (REFERENCE a.12).

use std::collections::HashMap;
use std::fmt;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};

use troupe_protocol::SessionId;

/// An opaque file version token: `dev:ino:size:mtimeNs:ctimeNs` (REFERENCE a.12).
///
/// Two versions are equal only when the file is the same inode with the same size and
/// timestamps. Our own writes replace the file through a rename, so they always produce a new
/// inode and a new version; an external in-place rewrite of the same size within one kernel
/// timestamp tick is the one change this token cannot see.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileVersion(String);

impl FileVersion {
    /// The version of the file described by `metadata`.
    pub fn of(metadata: &Metadata) -> Self {
        let mtime_ns =
            i128::from(metadata.mtime()) * 1_000_000_000 + i128::from(metadata.mtime_nsec());
        let ctime_ns =
            i128::from(metadata.ctime()) * 1_000_000_000 + i128::from(metadata.ctime_nsec());
        Self(format!(
            "{}:{}:{}:{}:{}",
            metadata.dev(),
            metadata.ino(),
            metadata.size(),
            mtime_ns,
            ctime_ns
        ))
    }

    /// The token as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FileVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What one owner session last saw of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    /// The owner never read, wrote or edited the file (nothing recorded).
    Unseen,
    /// The owner's last read found no file there.
    Absent,
    /// The owner last saw (read, wrote or edited) this version.
    Present(FileVersion),
}

/// The observation store: per owner session and canonical path, the last [`Observation`].
///
/// One store is shared by all members of a team (and may be shared by unrelated agents):
/// entries are keyed by owner, so one member's write never refreshes another member's view —
/// which is exactly what makes the other member's next `write`/`edit` fail with
/// `FS_STALE_VERSION` until it re-reads. The store is in memory only.
#[derive(Debug, Default)]
pub struct FileObservations {
    by_owner: Mutex<HashMap<SessionId, HashMap<PathBuf, Observation>>>,
}

impl FileObservations {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// What `owner` last saw of the file at canonical path `path`.
    pub fn get(&self, owner: &SessionId, path: &Path) -> Observation {
        self.lock()
            .get(owner)
            .and_then(|paths| paths.get(path))
            .cloned()
            .unwrap_or(Observation::Unseen)
    }

    /// Records what `owner` saw of `path`; recording [`Observation::Unseen`] forgets it.
    pub fn record(&self, owner: &SessionId, path: &Path, observation: Observation) {
        let mut by_owner = self.lock();
        match observation {
            Observation::Unseen => {
                if let Some(paths) = by_owner.get_mut(owner) {
                    paths.remove(path);
                }
            }
            observation => {
                by_owner
                    .entry(owner.clone())
                    .or_default()
                    .insert(path.to_path_buf(), observation);
            }
        }
    }

    /// Forgets everything `owner` observed (for example when its session is deleted).
    pub fn forget_owner(&self, owner: &SessionId) {
        self.lock().remove(owner);
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<SessionId, HashMap<PathBuf, Observation>>> {
        // A panic while holding this lock cannot leave a half-updated map (every update is a
        // single insert or remove), so a poisoned lock is still usable.
        self.by_owner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

type LockTable = HashMap<PathBuf, Weak<Mutex<()>>>;

/// Process-wide mutation locks, one per canonical target path. A process-wide table (rather
/// than one per [`FileObservations`]) serializes writers even when they use different stores.
static TARGET_LOCKS: LazyLock<Mutex<LockTable>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// The mutation lock of `path`. Hold its guard around version check + publication.
pub(crate) fn target_lock(path: &Path) -> Arc<Mutex<()>> {
    let mut table = TARGET_LOCKS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(lock) = table.get(path).and_then(Weak::upgrade) {
        return lock;
    }
    if table.len() >= 1024 {
        table.retain(|_, lock| lock.strong_count() > 0);
    }
    let lock = Arc::new(Mutex::new(()));
    table.insert(path.to_path_buf(), Arc::downgrade(&lock));
    lock
}
