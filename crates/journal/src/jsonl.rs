//! The JSONL backend: one file per session, `<home>/sessions/<id>.jsonl` (DESIGN §3).
//!
//! Durability rules (REFERENCE a.8, tightened):
//! - A new session is materialised on its first append: header + batch are written to a
//!   temporary file, fsynced, published with a hard link (which fails rather than overwrite an
//!   existing file of the same id), and the directory is fsynced.
//! - Later batches are appended and `fdatasync`ed. A failed write or sync truncates the file
//!   back to its last durable length.
//! - The writer holds an exclusive OS advisory lock (`flock`) on the file; readers take none.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use troupe_protocol::{Event, Seq, SessionHeader, SessionId};

use crate::backend::{LogBackend, SessionListing, SessionSink};
use crate::error::{JournalError, Result};
use crate::image::SessionImage;
use crate::replay::{
    LineCheck, LineUse, Replay, ScanPosition, ScanSummary, ScanTail, Selected, open_regular,
    read_header, scan, scan_each, scan_events, scan_selected_each,
};

/// Fault injection for tests of the poisoning rules: lets a test make a write come up short
/// or an fsync fail, at the exact points where the JSONL backend does them.
pub trait FaultHook: Send + Sync + std::fmt::Debug {
    /// Called before a batch of `len` bytes is written. `Some(n)` writes only the first `n`
    /// bytes (`n < len`) and then fails the write with an I/O error, like a full disk would.
    fn short_write(&self, len: usize) -> Option<usize> {
        let _ = len;
        None
    }

    /// Called before each fsync/fdatasync; `true` makes it fail with an I/O error.
    fn fail_sync(&self) -> bool {
        false
    }
}

/// How often opening a session retries a lock that another open file holds.
const LOCK_RETRIES: u32 = 20;
/// The pause between those retries (total grace: 200 ms).
const LOCK_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// Session logs as JSONL files in one directory.
#[derive(Debug, Clone)]
pub struct JsonlBackend {
    dir: PathBuf,
    faults: Option<Arc<dyn FaultHook>>,
}

impl JsonlBackend {
    /// A backend storing sessions in `dir` (created on first write). For a Troupe home `H`
    /// this is `H/sessions`; see [`crate::Journal::open_home`].
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            faults: None,
        }
    }

    /// Installs a [`FaultHook`] consulted by every sink this backend creates or opens.
    #[must_use]
    pub fn with_faults(mut self, faults: Arc<dyn FaultHook>) -> Self {
        self.faults = Some(faults);
        self
    }

    /// The directory holding the session files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of session `id`: `<dir>/<id>.jsonl`. [`SessionId`]'s validation guarantees
    /// this is a plain file name inside `dir`.
    pub fn session_path(&self, id: &SessionId) -> PathBuf {
        self.dir.join(format!("{id}.jsonl"))
    }

    fn check_file(&self, id: &SessionId) -> Result<PathBuf> {
        let path = self.session_path(id);
        match fs::metadata(&path) {
            Ok(meta) if meta.is_file() => Ok(path),
            Ok(_) => Err(JournalError::NotAFile { path }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(JournalError::NotFound {
                id: id.to_string(),
                path,
            }),
            Err(e) => Err(JournalError::io("stat", path, e)),
        }
    }
}

/// Reads any session file by path without locking or repairing it.
///
/// # Errors
/// `SESSION_NOT_FOUND` (missing file), `JOURNAL_NOT_A_FILE`, `JOURNAL_CORRUPT`,
/// `JOURNAL_UNSUPPORTED`, `JOURNAL_IO`.
pub fn read_path(path: &Path) -> Result<Replay> {
    let mut events = Vec::new();
    let summary = read_path_each(path, &mut |e| events.push(e))?;
    Ok(Replay {
        path: path.to_path_buf(),
        header: summary.header,
        events,
        skipped: summary.skipped,
        torn_tail: summary.torn_tail,
        valid_len: summary.valid_len,
    })
}

/// Streams any session file by path to `on_event` without keeping the events (bounded
/// memory), without locking or repairing it.
///
/// # Errors
/// As [`read_path`].
pub fn read_path_each(path: &Path, on_event: &mut dyn FnMut(Event)) -> Result<ScanSummary> {
    let file = open_regular(path)?;
    scan_each(
        path,
        std::io::BufReader::with_capacity(256 * 1024, file),
        on_event,
    )
}

/// Streams the events of any session file appended after `from` (a position an earlier read
/// returned: [`ScanSummary::position`] or [`ScanTail::next`]) to `on_event`, without locking or
/// repairing the file; the header is not read again. This is how a reader follows a file that
/// another process is writing: bytes of an unfinished write are reported as
/// [`ScanTail::torn_tail`] and read again next time. A repair by a later writer only ever
/// truncates bytes past the valid prefix, so `from` stays valid.
///
/// # Errors
/// `SESSION_NOT_FOUND`, `JOURNAL_NOT_A_FILE`, `JOURNAL_IO`; `JOURNAL_CORRUPT` for committed
/// corruption after `from`, or when the file is now shorter than `from.offset` (it was
/// replaced); `JOURNAL_UNSUPPORTED` for an unknown required event type.
pub fn read_path_each_from(
    path: &Path,
    from: ScanPosition,
    on_event: &mut dyn FnMut(Event),
) -> Result<ScanTail> {
    use std::io::Seek;
    let mut file = open_regular(path)?;
    let len = file
        .metadata()
        .map_err(|e| JournalError::io("stat", path, e))?
        .len();
    if len < from.offset {
        return Err(JournalError::Corrupt {
            path: path.to_path_buf(),
            line: from.next_seq.0 + 2,
            offset: len,
            reason: format!(
                "the file is {len} bytes long, shorter than the {} bytes already read (was it \
                 replaced?)",
                from.offset
            ),
        });
    }
    file.seek(io::SeekFrom::Start(from.offset))
        .map_err(|e| JournalError::io("seek", path, e))?;
    scan_events(
        path,
        std::io::BufReader::with_capacity(64 * 1024, file),
        from,
        on_event,
    )
}

/// A selective read of any session file by path (see [`scan_selected_each`]), without
/// locking or repairing it.
///
/// # Errors
/// As [`read_path`].
pub fn read_path_selected_each(
    path: &Path,
    check: LineCheck,
    select: &dyn Fn(&str) -> bool,
    on_selected: &mut dyn FnMut(Selected<'_>) -> LineUse,
) -> Result<ScanSummary> {
    let file = open_regular(path)?;
    scan_selected_each(
        path,
        std::io::BufReader::with_capacity(256 * 1024, file),
        check,
        select,
        on_selected,
    )
}

impl LogBackend for JsonlBackend {
    fn create(&self, header: SessionHeader) -> Result<Box<dyn SessionSink>> {
        let path = self.session_path(&header.id);
        if fs::symlink_metadata(&path).is_ok() {
            return Err(JournalError::AlreadyExists {
                id: header.id.clone(),
                path,
            });
        }
        Ok(Box::new(JsonlSink {
            path,
            dir: self.dir.clone(),
            header,
            file: None,
            next_seq: Seq::ZERO,
            durable_len: 0,
            faults: self.faults.clone(),
            buf: Vec::new(),
        }))
    }

    fn open(&self, id: &SessionId) -> Result<(Box<dyn SessionSink>, Replay)> {
        let path = self.check_file(id)?;
        // Opening for writing is where a restart begins: staging files of creations a crash
        // cut (of any session) go first.
        sweep_stale_temps(&self.dir);
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&path)
            .map_err(|e| JournalError::io("open", &path, e))?;
        // A file this process just released can still look locked for a moment: a child being
        // forked at that instant shares the open file (and its lock) until its exec closes it.
        // So "locked" is only reported after a short grace period (LOCK_RETRIES × LOCK_PAUSE).
        let mut attempt = 0;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(fs::TryLockError::WouldBlock) if attempt < LOCK_RETRIES => {
                    attempt += 1;
                    std::thread::sleep(LOCK_PAUSE);
                }
                Err(fs::TryLockError::WouldBlock) => return Err(JournalError::Locked { path }),
                Err(fs::TryLockError::Error(e)) => return Err(JournalError::io("lock", path, e)),
            }
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| JournalError::io("read", &path, e))?;
        let replay = scan(&path, &bytes)?;
        check_header_id(&path, &replay.header, id)?;
        if let Some(torn) = &replay.torn_tail {
            tracing::warn!(
                path = %path.display(),
                offset = torn.offset,
                bytes = torn.bytes,
                reason = %torn.reason,
                "repairing torn tail of session file"
            );
            file.set_len(replay.valid_len)
                .map_err(|e| JournalError::io("truncate", &path, e))?;
            file.sync_all()
                .map_err(|e| JournalError::io("fsync", &path, e))?;
        }
        let sink = JsonlSink {
            path,
            dir: self.dir.clone(),
            header: replay.header.clone(),
            file: Some(file),
            next_seq: replay.next_seq(),
            durable_len: replay.valid_len,
            faults: self.faults.clone(),
            buf: Vec::new(),
        };
        Ok((Box::new(sink), replay))
    }

    fn read(&self, id: &SessionId) -> Result<Replay> {
        let path = self.check_file(id)?;
        let replay = read_path(&path)?;
        check_header_id(&path, &replay.header, id)?;
        Ok(replay)
    }

    fn read_each(&self, id: &SessionId, on_event: &mut dyn FnMut(Event)) -> Result<ScanSummary> {
        let path = self.check_file(id)?;
        let header = read_header(&path)?;
        check_header_id(&path, &header, id)?;
        read_path_each(&path, on_event)
    }

    fn read_each_from(
        &self,
        id: &SessionId,
        from: ScanPosition,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<ScanTail> {
        let path = self.check_file(id)?;
        read_path_each_from(&path, from, on_event)
    }

    fn read_selected_each(
        &self,
        id: &SessionId,
        check: LineCheck,
        select: &dyn Fn(&str) -> bool,
        on_selected: &mut dyn FnMut(Selected<'_>) -> LineUse,
    ) -> Result<ScanSummary> {
        let path = self.check_file(id)?;
        let header = read_header(&path)?;
        check_header_id(&path, &header, id)?;
        read_path_selected_each(&path, check, select, on_selected)
    }

    /// Line 1 of the file only.
    fn header(&self, id: &SessionId) -> Result<SessionHeader> {
        let path = self.check_file(id)?;
        let header = read_header(&path)?;
        check_header_id(&path, &header, id)?;
        Ok(header)
    }

    /// The file's bytes up to the end of its valid prefix (read in one go, so the image is one
    /// consistent state of a file another process may be appending to).
    fn read_image(&self, id: &SessionId) -> Result<SessionImage> {
        let path = self.check_file(id)?;
        let mut bytes = Vec::new();
        open_regular(&path)?
            .read_to_end(&mut bytes)
            .map_err(|e| JournalError::io("read", &path, e))?;
        let image = SessionImage::from_bytes(&path, bytes)?;
        check_header_id(&path, image.header(), id)?;
        Ok(image)
    }

    /// A new file holding exactly the image's bytes, published whole (see [`publish_new`] for
    /// what survives a crash part-way).
    fn import(&self, image: &SessionImage) -> Result<()> {
        let path = self.session_path(image.id());
        if fs::symlink_metadata(&path).is_ok() {
            return Err(JournalError::AlreadyExists {
                id: image.id().clone(),
                path,
            });
        }
        let file = publish_new(
            &self.dir,
            &path,
            image.id(),
            image.bytes(),
            self.faults.as_deref(),
        )?;
        drop(file);
        Ok(())
    }

    /// The stems of the `<id>.jsonl` files in the sessions directory that are valid ids; no
    /// file is opened. A missing directory holds no session.
    fn ids(&self) -> Result<Vec<SessionId>> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(JournalError::io("list", &self.dir, e)),
        };
        let mut ids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| JournalError::io("list", &self.dir, e))?;
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".jsonl")) else {
                continue;
            };
            if let Ok(id) = SessionId::new(stem)
                && !stem.starts_with('.')
            {
                ids.push(id);
            }
        }
        Ok(ids)
    }

    fn list(&self, on_error: &mut dyn FnMut(JournalError)) -> Result<Vec<SessionListing>> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(JournalError::io("list", &self.dir, e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| JournalError::io("list", &self.dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') || !name.ends_with(".jsonl") {
                continue;
            }
            let path = entry.path();
            let stem = &name[..name.len() - ".jsonl".len()];
            let header = read_header(&path).and_then(|header| match SessionId::new(stem) {
                Ok(id) => check_header_id(&path, &header, &id).map(|()| header),
                Err(e) => Err(JournalError::Corrupt {
                    path: path.clone(),
                    line: 1,
                    offset: 0,
                    reason: e.to_string(),
                }),
            });
            match header {
                Ok(header) => out.push(SessionListing {
                    header,
                    location: path,
                }),
                Err(e) => on_error(e),
            }
        }
        out.sort_by(|a, b| {
            (a.header.created_at, a.header.id.as_str())
                .cmp(&(b.header.created_at, b.header.id.as_str()))
        });
        Ok(out)
    }
}

fn check_header_id(path: &Path, header: &SessionHeader, id: &SessionId) -> Result<()> {
    if &header.id == id {
        Ok(())
    } else {
        Err(JournalError::Corrupt {
            path: path.to_path_buf(),
            line: 1,
            offset: 0,
            reason: format!("header names session {} but the file is {id}'s", header.id),
        })
    }
}

/// One JSONL session file open for writing (or not yet materialised).
#[derive(Debug)]
struct JsonlSink {
    path: PathBuf,
    dir: PathBuf,
    header: SessionHeader,
    /// `None` until the first append publishes the file.
    file: Option<File>,
    next_seq: Seq,
    /// Byte length of the file's durable content.
    durable_len: u64,
    faults: Option<Arc<dyn FaultHook>>,
    /// Reused serialization buffer.
    buf: Vec<u8>,
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("injected fault: {what}"))
}

impl JsonlSink {
    /// First append: write header + batch to a temp file, fsync, link into place (never
    /// overwriting), fsync the directory.
    fn publish(&mut self, batch_len: u64) -> Result<()> {
        let mut bytes = serde_json::to_vec(&self.header)
            .map_err(|e| JournalError::io("encode", &self.path, e.into()))?;
        bytes.push(b'\n');
        let header_len = bytes.len() as u64;
        bytes.extend_from_slice(&self.buf);
        let file = publish_new(
            &self.dir,
            &self.path,
            &self.header.id,
            &bytes,
            self.faults.as_deref(),
        )?;
        self.durable_len = header_len + batch_len;
        self.file = Some(file);
        Ok(())
    }
}

/// Materialises a new session file holding `bytes` (its whole content) at `path`: the bytes
/// go to a staging file `.<id>.<pid>.<suffix>.tmp` in `dir`, which is fsynced, published with
/// a hard link (which fails rather than overwrite an existing file) and removed; then `dir` is
/// fsynced. Returns the new file, open and locked.
///
/// What survives a crash: before the link, only the staging file (no session; it is removed
/// by [`sweep_stale_temps`] once its process is gone); after the link, the whole file (it was
/// fsynced before), though a power loss before the directory's fsync may lose its name (no
/// session). Never part of the content under the session's name.
fn publish_new(
    dir: &Path,
    path: &Path,
    id: &SessionId,
    bytes: &[u8],
    faults: Option<&dyn FaultHook>,
) -> Result<File> {
    create_dir_durable(dir)?;
    sweep_stale_temps(dir);
    let tmp = dir.join(format!(".{id}.{}.{}.tmp", std::process::id(), uuid_like()));
    let result = publish_via(&tmp, path, id, bytes, faults).and_then(|file| {
        sync_dir(dir)?;
        Ok(file)
    });
    // The temp name is only a staging name: remove it whatever happened.
    let _ = fs::remove_file(&tmp);
    result
}

fn publish_via(
    tmp: &Path,
    path: &Path,
    id: &SessionId,
    bytes: &[u8],
    faults: Option<&dyn FaultHook>,
) -> Result<File> {
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create_new(true)
        .open(tmp)
        .map_err(|e| JournalError::io("create", tmp, e))?;
    // Lock before the file becomes visible under its real name: the inode is shared.
    file.try_lock()
        .map_err(|e| JournalError::io("lock", tmp, io::Error::other(e.to_string())))?;
    write_with_faults(faults, &mut file, bytes).map_err(|e| JournalError::io("write", tmp, e))?;
    sync_with_faults(faults, &file, false).map_err(|e| JournalError::io("fsync", tmp, e))?;
    match fs::hard_link(tmp, path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return Err(JournalError::AlreadyExists {
                id: id.clone(),
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(JournalError::io("link", path, e)),
    }
    let _ = fs::remove_file(tmp);
    Ok(file)
}

fn write_with_faults(
    faults: Option<&dyn FaultHook>,
    file: &mut File,
    bytes: &[u8],
) -> io::Result<()> {
    if let Some(n) = faults.and_then(|f| f.short_write(bytes.len())) {
        file.write_all(&bytes[..n.min(bytes.len())])?;
        return Err(injected("short write"));
    }
    file.write_all(bytes)
}

fn sync_with_faults(
    faults: Option<&dyn FaultHook>,
    file: &File,
    data_only: bool,
) -> io::Result<()> {
    if faults.is_some_and(|f| f.fail_sync()) {
        return Err(injected("fsync failed"));
    }
    if data_only {
        file.sync_data()
    } else {
        file.sync_all()
    }
}

/// A short random-enough suffix for temp names (pid + time + counter; uniqueness only matters
/// within one directory and one process).
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{nanos:x}{:x}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// Creates `dir` and any missing ancestors, then fsyncs the parent of every directory it
/// created, so a fresh home survives a power loss together with its first session.
fn create_dir_durable(dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut cursor = Some(dir);
    while let Some(d) = cursor {
        if d.exists() {
            break;
        }
        missing.push(d.to_path_buf());
        cursor = d.parent();
    }
    if missing.is_empty() {
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(|e| JournalError::io("create", dir, e))?;
    for created in missing.iter().rev() {
        if let Some(parent) = created.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

/// Removes the staging files `.<id>.<pid>.<suffix>.tmp` (of any session) left by processes
/// that died while creating a session (their pid no longer exists). Run before a session is
/// created or opened for writing, so a crash during a creation leaves its staging file only
/// until the home is next written. Best effort: errors are ignored, and nothing is removed
/// where process liveness cannot be checked (no `/proc`).
fn sweep_stale_temps(dir: &Path) {
    let proc_root = Path::new("/proc");
    if !proc_root.join("self").exists() {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        // Ids may contain dots, so the name is read from the right: `<id>.<pid>.<suffix>`.
        let Some(rest) = name
            .strip_prefix('.')
            .and_then(|r| r.strip_suffix(".tmp"))
            .and_then(|r| r.rsplit_once('.'))
            .and_then(|(r, _suffix)| r.rsplit_once('.'))
            .filter(|(id, _)| SessionId::new(*id).is_ok())
            .map(|(_, pid)| pid)
        else {
            continue;
        };
        let Ok(pid) = rest.parse::<u32>() else {
            continue;
        };
        if pid != std::process::id() && !proc_root.join(pid.to_string()).exists() {
            let _ = fs::remove_file(entry.path());
        }
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| JournalError::io("fsync directory", dir, e))
}

impl SessionSink for JsonlSink {
    fn header(&self) -> &SessionHeader {
        &self.header
    }

    fn next_seq(&self) -> Seq {
        self.next_seq
    }

    fn append(&mut self, expected: Seq, events: &[Event]) -> Result<()> {
        crate::check_append(&self.header.id, self.next_seq, expected, events)?;
        if events.is_empty() {
            return Ok(());
        }
        self.buf.clear();
        for event in events {
            serde_json::to_writer(&mut self.buf, event)
                .map_err(|e| JournalError::io("encode", &self.path, e.into()))?;
            self.buf.push(b'\n');
        }
        let batch_len = self.buf.len() as u64;
        match self.file.take() {
            None => self.publish(batch_len)?,
            Some(mut file) => {
                let faults = self.faults.as_deref();
                let written = write_with_faults(faults, &mut file, &self.buf)
                    .map_err(|e| ("write", e))
                    .and_then(|()| {
                        sync_with_faults(faults, &file, true).map_err(|e| ("fdatasync", e))
                    });
                if let Err((op, e)) = written {
                    // Roll back to the last durable length so no partial batch stays behind.
                    if let Err(rollback) = file.set_len(self.durable_len) {
                        tracing::error!(
                            path = %self.path.display(),
                            error = %rollback,
                            "could not roll back a failed append"
                        );
                    }
                    self.file = Some(file);
                    return Err(JournalError::io(op, &self.path, e));
                }
                self.durable_len += batch_len;
                self.file = Some(file);
            }
        }
        self.next_seq = Seq(expected.0 + events.len() as u64);
        Ok(())
    }
}
