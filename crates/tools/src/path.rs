//! Workspace confinement: turning a model-given path into a canonical path inside the
//! workspace, or refusing it.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::error::ToolError;

/// How many symlinks resolution follows by hand (dangling links) before giving up, as the
/// kernel's `ELOOP` limit.
const MAX_SYMLINK_HOPS: usize = 40;

/// A path resolved inside the workspace.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    /// The canonical path: the longest existing prefix is fully resolved (symlinks followed),
    /// the rest are plain names that do not exist yet.
    pub absolute: PathBuf,
    /// The path relative to the workspace root, `/`-separated; `.` for the root itself.
    pub display: String,
}

/// Resolves `input` (relative to `root`, or absolute) to a canonical path inside `root`.
///
/// `root` must be canonical. Blocking: it touches the filesystem.
pub(crate) fn resolve(root: &Path, input: &str) -> Result<Resolved, ToolError> {
    if input.contains('\0') {
        return Err(ToolError::invalid_arguments(
            "path must not contain NUL bytes",
        ));
    }
    let mut pending = normalize(&root.join(input));
    let mut hops = 0;
    'restart: loop {
        let mut existing = pending.clone();
        let mut missing: Vec<OsString> = Vec::new();
        let canonical = loop {
            match std::fs::canonicalize(&existing) {
                Ok(canonical) => break canonical,
                Err(error)
                    if matches!(
                        error.kind(),
                        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                    ) =>
                {
                    if let Ok(metadata) = std::fs::symlink_metadata(&existing)
                        && metadata.file_type().is_symlink()
                    {
                        // A dangling symlink: follow it by hand so that creating a file
                        // through it cannot land outside the workspace.
                        hops += 1;
                        if hops > MAX_SYMLINK_HOPS {
                            return Err(ToolError::Io {
                                path: input.to_owned(),
                                source: io::Error::other("too many levels of symbolic links"),
                            });
                        }
                        let target =
                            std::fs::read_link(&existing).map_err(|source| ToolError::Io {
                                path: input.to_owned(),
                                source,
                            })?;
                        let parent = existing.parent().unwrap_or(Path::new("/"));
                        let mut next = normalize(&parent.join(target));
                        for name in missing.iter().rev() {
                            next.push(name);
                        }
                        pending = next;
                        continue 'restart;
                    }
                    match existing.file_name() {
                        Some(name) => missing.push(name.to_owned()),
                        None => {
                            return Err(ToolError::Io {
                                path: input.to_owned(),
                                source: error,
                            });
                        }
                    }
                    existing.pop();
                }
                Err(source) => {
                    return Err(ToolError::Io {
                        path: input.to_owned(),
                        source,
                    });
                }
            }
        };
        let mut absolute = canonical;
        for name in missing.iter().rev() {
            absolute.push(name);
        }
        return match absolute.strip_prefix(root) {
            Ok(relative) => Ok(Resolved {
                display: display_relative(relative),
                absolute,
            }),
            Err(_) => Err(ToolError::PathOutsideWorkspace {
                path: input.to_owned(),
                resolved: absolute.display().to_string(),
                workspace: root.display().to_string(),
            }),
        };
    }
}

/// Shows a workspace-relative path: `/`-separated, `.` for the root.
pub(crate) fn display_relative(relative: &Path) -> String {
    let shown = relative.to_string_lossy();
    if shown.is_empty() {
        ".".to_owned()
    } else {
        shown.into_owned()
    }
}

/// Removes `.` and resolves `..` lexically (`..` at the root stays at the root).
fn normalize(path: &Path) -> PathBuf {
    let mut normalized = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => normalized.push(component.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                normalized.pop();
            }
            Component::Normal(name) => normalized.push(name),
        }
    }
    normalized
}
