//! Which workspace files a `bash` command changed: the workspace is scanned before and after
//! the command ([`WorkspaceScan`]) and the two scans compared. The write radar's input for
//! `bash` (a `write`/`edit` call's change is exact: its recorded effect).
//!
//! Cost is bounded: at most [`SCAN_MAX_FILES`] files are stamped per scan, and git gets
//! [`GIT_TIMEOUT`]; past either bound the comparison is `complete: false` ("unknown": the
//! changes found are kept, others may be missing).
//!
//! - **A git work tree** (the workspace is inside one): `git status --porcelain -z
//!   --untracked-files=all -- .` lists the files that differ from `HEAD` (modified, added,
//!   deleted, untracked); each is stamped with its status, size and modification time. A
//!   file that enters or leaves the list, or whose stamp changes, was changed. Files git
//!   ignores are not watched, and a clean file touched without a content change is not a
//!   change. Git runs with `--no-optional-locks`: a scan never writes the repository.
//! - **Otherwise**: a walk of the workspace (`.git` directories skipped, symlinks not
//!   followed) stamps every file with its size and modification time.
//!
//! Files outside the workspace (`/tmp`, the home) are never watched.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use tokio::process::Command;
use troupe_session::effect::ChangedFiles;

/// The most files one scan stamps; a workspace with more is compared `complete: false`.
pub const SCAN_MAX_FILES: usize = 10_000;

/// How long one `git` command of a scan may take before the scan gives up (`complete:
/// false`).
pub const GIT_TIMEOUT: Duration = Duration::from_secs(10);

/// What one file looked like: its git status (`XY`, empty in a walk), size and modification
/// time (`None`: gone).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    status: String,
    len: Option<u64>,
    modified: Option<SystemTime>,
}

/// How the workspace is scanned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    /// Through `git status`; `prefix` is the workspace's path inside the work tree (`a/b/`
    /// or empty), which the porcelain paths start with.
    Git { prefix: String },
    /// By walking the files.
    Walk,
}

/// One scan of a workspace (see the module docs): taken before a command with
/// [`WorkspaceScan::before`], compared after it with [`WorkspaceScan::changes`].
#[derive(Debug, Clone)]
pub struct WorkspaceScan {
    root: PathBuf,
    mode: Mode,
    files: BTreeMap<String, Stamp>,
    complete: bool,
}

impl WorkspaceScan {
    /// Scans the workspace at `root` (git when it is inside a git work tree, else a walk).
    /// Never fails: what cannot be scanned makes the scan incomplete.
    pub async fn before(root: &Path) -> Self {
        let mode = match git(root, &["rev-parse", "--show-prefix"]).await {
            Some(out) => Mode::Git {
                prefix: String::from_utf8_lossy(&out).trim_end().to_owned(),
            },
            None => Mode::Walk,
        };
        Self::scan(root.to_path_buf(), mode).await
    }

    /// Scans the workspace again the same way and names what changed since this scan: files
    /// that appeared, disappeared, or whose stamp differs, sorted. `complete` only when both
    /// scans were.
    pub async fn changes(self) -> ChangedFiles {
        let after = Self::scan(self.root.clone(), self.mode.clone()).await;
        let mut paths: Vec<String> = self
            .files
            .iter()
            .filter(|(path, stamp)| after.files.get(*path) != Some(*stamp))
            .map(|(path, _)| path.clone())
            .collect();
        paths.extend(
            after
                .files
                .keys()
                .filter(|path| !self.files.contains_key(*path))
                .cloned(),
        );
        paths.sort();
        paths.dedup();
        ChangedFiles {
            paths,
            complete: self.complete && after.complete,
        }
    }

    async fn scan(root: PathBuf, mode: Mode) -> Self {
        let (listed, complete) = match &mode {
            Mode::Git { prefix } => git_listing(&root, prefix).await,
            Mode::Walk => {
                let walk_root = root.clone();
                tokio::task::spawn_blocking(move || walk(&walk_root))
                    .await
                    .unwrap_or_default()
            }
        };
        let files = listed
            .into_iter()
            .map(|(path, status)| {
                let meta = std::fs::symlink_metadata(root.join(&path)).ok();
                let stamp = Stamp {
                    status,
                    len: meta.as_ref().map(std::fs::Metadata::len),
                    modified: meta.and_then(|m| m.modified().ok()),
                };
                (path, stamp)
            })
            .collect();
        Self {
            root,
            mode,
            files,
            complete,
        }
    }
}

/// The files `git status` lists under the workspace (workspace-relative, with their `XY`
/// status), at most [`SCAN_MAX_FILES`]; `false` when git failed or the list was cut.
async fn git_listing(root: &Path, prefix: &str) -> (Vec<(String, String)>, bool) {
    let Some(out) = git(
        root,
        &[
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--no-renames",
            "--",
            ".",
        ],
    )
    .await
    else {
        return (Vec::new(), false);
    };
    let mut listed = Vec::new();
    for entry in out.split(|b| *b == 0).filter(|e| e.len() > 3) {
        if listed.len() == SCAN_MAX_FILES {
            return (listed, false);
        }
        let entry = String::from_utf8_lossy(entry);
        let (status, path) = entry.split_at(2);
        let path = path[1..].trim_end_matches('/');
        let path = path.strip_prefix(prefix).unwrap_or(path);
        listed.push((path.to_owned(), status.to_owned()));
    }
    (listed, true)
}

/// `git -C root --no-optional-locks ARGS`'s standard output, or `None` when it cannot run,
/// fails or takes longer than [`GIT_TIMEOUT`].
async fn git(root: &Path, args: &[&str]) -> Option<Vec<u8>> {
    let child = Command::new("git")
        .arg("-C")
        .arg(root)
        .arg("--no-optional-locks")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .ok()?;
    let out = tokio::time::timeout(GIT_TIMEOUT, child.wait_with_output())
        .await
        .ok()?
        .ok()?;
    out.status.success().then_some(out.stdout)
}

/// Every file under `root` (workspace-relative, `/`-separated; `.git` skipped, symlinks not
/// followed), at most [`SCAN_MAX_FILES`]; `false` when the walk was cut or a directory could
/// not be read.
fn walk(root: &Path) -> (Vec<(String, String)>, bool) {
    let mut files = Vec::new();
    let mut complete = true;
    let mut dirs = vec![PathBuf::new()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&dir)) else {
            complete = false;
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let rel = dir.join(&name);
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => {
                    if name != ".git" {
                        dirs.push(rel);
                    }
                }
                Ok(_) => {
                    if files.len() == SCAN_MAX_FILES {
                        return (files, false);
                    }
                    let rel = rel.to_string_lossy().replace('\\', "/");
                    files.push((rel, String::new()));
                }
                Err(_) => complete = false,
            }
        }
    }
    (files, complete)
}
