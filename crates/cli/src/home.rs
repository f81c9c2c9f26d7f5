//! The Troupe home a command works in: resolved once, checked before any work starts, and
//! prepared (its `sessions` directory created, durably) by the commands that write.

use std::path::{Path, PathBuf};

use anyhow::anyhow;

use crate::exit::Failure;

/// Where the command's sessions live, as resolved and as the user typed it (for hints).
pub(crate) struct Home<'a> {
    pub(crate) dir: PathBuf,
    pub(crate) flag: Option<&'a Path>,
    /// How messages name it: `--home DIR`, `TROUPE_HOME DIR` or `the Troupe home DIR`.
    pub(crate) named: String,
    /// The store of the sessions: the home's JSONL files, or `--store`'s.
    pub(crate) store: crate::store::Store,
}

impl Home<'_> {
    /// ` --home DIR --store URL` as far as the command was given them (see
    /// [`crate::hints::home_arg`]), to repeat in printed commands.
    pub(crate) fn args(&self) -> String {
        format!("{}{}", crate::hints::home_arg(self.flag), self.store.arg)
    }

    /// Makes sure a run can write its sessions, before anything else is written: creates
    /// `<home>/sessions` and any missing parent (durably: the parent of each new directory is
    /// fsynced, as the journal does) and checks that it is writable (`access(2)`, which also
    /// sees read-only mounts). A home where that fails (`/proc/x`, a read-only file system) is
    /// bad input (exit 2) in one line, and whatever this created is removed again. Returns the
    /// directories it created.
    pub(crate) fn prepare(&self) -> Result<CreatedDirs, Failure> {
        if self.store.is_nats() {
            // The sessions are on the store: nothing of the home is written for them.
            return Ok(CreatedDirs::default());
        }
        let sessions = self.dir.join("sessions");
        let created = create_dirs(&sessions).map_err(|(dir, e)| {
            Failure::bad_input(anyhow!(
                "{} cannot hold sessions: creating {} failed ({e})",
                self.named,
                dir.display()
            ))
        })?;
        if let Err(e) = rustix::fs::access(&sessions, rustix::fs::Access::WRITE_OK) {
            created.undo();
            return Err(Failure::bad_input(anyhow!(
                "{} cannot hold sessions: {} is not writable ({e})",
                self.named,
                sessions.display()
            )));
        }
        Ok(created)
    }
}

/// Directories a command created (outermost first), so it can remove them again when a later
/// check refuses the input.
#[derive(Default)]
pub(crate) struct CreatedDirs(Vec<PathBuf>);

impl CreatedDirs {
    /// Removes the created directories again (only while they are empty).
    pub(crate) fn undo(&self) {
        for dir in self.0.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Creates `dir` and every missing ancestor, outermost first, fsyncing the parent of each new
/// directory so the creation survives a power loss. On failure, removes what it created and
/// returns the directory that could not be created with the error.
pub(crate) fn create_dirs(dir: &Path) -> Result<CreatedDirs, (PathBuf, std::io::Error)> {
    let mut missing = Vec::new();
    let mut cursor = Some(dir);
    while let Some(d) = cursor.filter(|d| !d.as_os_str().is_empty()) {
        match std::fs::symlink_metadata(d) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing.push(d.to_path_buf()),
            _ => break,
        }
        cursor = d.parent();
    }
    let mut created = CreatedDirs(Vec::new());
    for d in missing.into_iter().rev() {
        let made = std::fs::create_dir(&d).and_then(|()| {
            let parent = d.parent().filter(|p| !p.as_os_str().is_empty());
            std::fs::File::open(parent.unwrap_or(Path::new(".")))?.sync_all()
        });
        match made {
            Ok(()) => created.0.push(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                created.undo();
                return Err((d, e));
            }
        }
    }
    Ok(created)
}

/// The home as the user chose it, for messages: `--home DIR`, `TROUPE_HOME DIR` or
/// `the Troupe home DIR`.
pub(crate) fn home_name(home: &Path, from_flag: bool) -> String {
    if from_flag {
        format!("--home {}", home.display())
    } else if std::env::var_os(troupe_journal::HOME_ENV).is_some_and(|v| !v.is_empty()) {
        format!("TROUPE_HOME {}", home.display())
    } else {
        format!("the Troupe home {}", home.display())
    }
}

/// The home and its `sessions` directory must be directories when they exist (a missing one is
/// created by the first write). Anything else is bad input, reported before any work starts.
pub(crate) fn check_home(home: &Path, named: &str) -> Result<(), Failure> {
    let named = named.to_owned();
    let sessions = home.join("sessions");
    for (dir, shown) in [
        (home, named.clone()),
        (
            sessions.as_path(),
            format!("{} (in {named})", sessions.display()),
        ),
    ] {
        match std::fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(Failure::bad_input(anyhow::anyhow!(
                    "{shown} is not a directory"
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) => return Err(Failure::bad_input(anyhow::anyhow!("{shown}: {e}"))),
        }
    }
    Ok(())
}
