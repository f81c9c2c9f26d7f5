//! Blocking file operations shared by `read`, `write` and `edit`: atomic publication and
//! error mapping.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::ToolError;
use crate::observe::FileVersion;

/// Runs blocking file work on tokio's blocking pool.
pub(crate) async fn blocking<T, F>(work: F) -> Result<T, ToolError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ToolError> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|error| ToolError::Internal(format!("tool task failed: {error}")))?
}

/// Maps an IO error on `display` to the tool error the model should see.
pub(crate) fn io_error(display: &str, source: io::Error) -> ToolError {
    match source.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => ToolError::NotFound {
            path: display.to_owned(),
        },
        io::ErrorKind::IsADirectory => ToolError::IsDirectory {
            path: display.to_owned(),
        },
        _ => ToolError::Io {
            path: display.to_owned(),
            source,
        },
    }
}

/// The metadata of `path` (following symlinks), or `None` when nothing is there.
pub(crate) fn metadata_if_exists(
    path: &Path,
    display: &str,
) -> Result<Option<Metadata>, ToolError> {
    match std::fs::metadata(path) {
        Ok(metadata) => Ok(Some(metadata)),
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(source) => Err(ToolError::Io {
            path: display.to_owned(),
            source,
        }),
    }
}

/// A temporary sibling file that is removed on drop unless published.
struct TempFile {
    path: PathBuf,
    file: File,
    keep: bool,
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl TempFile {
    /// Creates a temp file next to `target` holding `content`.
    fn create(target: &Path, content: &[u8], display: &str) -> Result<Self, ToolError> {
        let parent = target.parent().unwrap_or(Path::new("/"));
        let name = target
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut attempt = 0;
        loop {
            let counter = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = parent.join(format!(
                ".{name}.troupe-{}-{counter}.tmp",
                std::process::id()
            ));
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => {
                    let mut temp = Self {
                        path,
                        file,
                        keep: false,
                    };
                    temp.file
                        .write_all(content)
                        .map_err(|source| io_error(display, source))?;
                    return Ok(temp);
                }
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists && attempt < 16 => {
                    attempt += 1;
                }
                Err(source) => return Err(io_error(display, source)),
            }
        }
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.keep {
            // Best effort: a leftover temp file is harmless, and there is no one to tell.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Atomically replaces the existing file at `target` with `content` (temp file + rename),
/// keeping the permissions in `previous`. Returns the version of the new file.
pub(crate) fn replace_atomically(
    target: &Path,
    content: &[u8],
    previous: &Metadata,
    display: &str,
) -> Result<FileVersion, ToolError> {
    let mut temp = TempFile::create(target, content, display)?;
    temp.file
        .set_permissions(previous.permissions())
        .map_err(|source| io_error(display, source))?;
    std::fs::rename(&temp.path, target).map_err(|source| io_error(display, source))?;
    temp.keep = true;
    // Stat the handle after the rename (which updates ctime): this is exactly the inode now
    // published at `target`.
    let metadata = temp
        .file
        .metadata()
        .map_err(|source| io_error(display, source))?;
    Ok(FileVersion::of(&metadata))
}

/// Publishes `content` at `target` only if nothing exists there (a hard link of a finished
/// temp file, so readers never see a partial file). Returns `None` when something exists.
pub(crate) fn create_if_absent(
    target: &Path,
    content: &[u8],
    display: &str,
) -> Result<Option<FileVersion>, ToolError> {
    if std::fs::symlink_metadata(target).is_ok() {
        return Ok(None);
    }
    let temp = TempFile::create(target, content, display)?;
    match std::fs::hard_link(&temp.path, target) {
        Ok(()) => {
            let handle = temp
                .file
                .try_clone()
                .map_err(|source| io_error(display, source))?;
            // Dropping the guard unlinks the temp name; the content stays under `target`.
            drop(temp);
            let metadata = handle
                .metadata()
                .map_err(|source| io_error(display, source))?;
            Ok(Some(FileVersion::of(&metadata)))
        }
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(None),
        Err(_) => {
            // Some filesystems refuse hard links: fall back to an exclusive create and a
            // direct write (a concurrent reader may briefly see a partial file).
            drop(temp);
            match OpenOptions::new().write(true).create_new(true).open(target) {
                Ok(mut file) => {
                    file.write_all(content)
                        .map_err(|source| io_error(display, source))?;
                    let metadata = file
                        .metadata()
                        .map_err(|source| io_error(display, source))?;
                    Ok(Some(FileVersion::of(&metadata)))
                }
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(None),
                Err(source) => Err(io_error(display, source)),
            }
        }
    }
}
