//! Project instructions: the `AGENTS.md` files a session starts with, recorded in every
//! member's `agent/config` and put into its system prompt.
//!
//! **Which files, in which order** ([`discover`]): the personal file `<home>/AGENTS.md` (the
//! Troupe home, `$TROUPE_HOME`), then one `AGENTS.md` per directory from the repository's top
//! level (the nearest ancestor of the workspace holding `.git`; without one, the workspace
//! alone) down to the workspace itself. A later, closer file is more specific, and the prompt
//! says that it wins where they disagree.
//!
//! **The cap**: [`MAX_INSTRUCTIONS_BYTES`] (32 KiB) of file text in all, taken in that order;
//! a file that does not fit is cut at a character boundary and the files after it are left
//! out. Each one is still recorded (with its size and hash, and the part included), and the
//! prompt ends the section with a visible note saying what was left out.
//!
//! **Bad files** are skipped, never fatal: a file that is not UTF-8 text, or that cannot be
//! read, is reported in [`Discovery::skipped`] (the CLI prints a warning naming it) and is
//! not recorded.
//!
//! **Recorded once, in the batch that creates the session**: the Lead's `agent/config`
//! carries [`ProjectInstructions`] in the batch that creates its log (with its first prompt),
//! and every child copies its parent's into its own `agent/config`, in the batch that creates
//! the child's log (descriptor, config, prompt). So a crash leaves either no session (no
//! child) or one that holds the instructions; there is no point in between. Nothing is read
//! again afterwards: a resume, a cold-resumed teammate and a recreated one fold them from their
//! own log, so every member keeps exactly the text the session started with, whatever the files
//! say later ([`changes`] describes the difference for a note).
//!
//! The recorded form ([`ProjectInstructions`], [`InstructionFile`]) and the prompt section made
//! of it are session data, `troupe_session::instructions`; this module finds and reads the
//! files.

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use troupe_session::instructions::{InstructionFile, MAX_INSTRUCTIONS_BYTES, ProjectInstructions};

/// The instruction file's name.
pub const INSTRUCTIONS_FILE: &str = "AGENTS.md";

/// The most bytes read of one file (1 MiB): more can never be included, and reading stops
/// there (its size and hash are then those of the part read).
const MAX_READ_BYTES: u64 = 1 << 20;

/// An `AGENTS.md` that exists but was not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedFile {
    /// The file.
    pub path: PathBuf,
    /// Why, e.g. `it is not UTF-8 text (invalid byte at offset 12)`.
    pub reason: String,
}

/// What [`discover`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovery {
    /// The instructions (`None` when no usable file exists).
    pub instructions: Option<ProjectInstructions>,
    /// Files that exist but were skipped, in discovery order.
    pub skipped: Vec<SkippedFile>,
}

/// The `AGENTS.md` paths looked at for a session of the home `home` (made absolute) working in
/// `workspace` (absolute; the CLI passes it canonical), in prompt order: `<home>/AGENTS.md`, then one per directory from the
/// repository's top level (the nearest ancestor of `workspace`, itself included, that holds a
/// `.git` directory or file; none: `workspace` alone) down to `workspace`.
pub fn candidate_paths(home: &Path, workspace: &Path) -> Vec<PathBuf> {
    let home = std::path::absolute(home).unwrap_or_else(|_| home.to_path_buf());
    let top = workspace
        .ancestors()
        .find(|dir| dir.join(".git").exists())
        .unwrap_or(workspace);
    let mut dirs: Vec<&Path> = workspace
        .ancestors()
        .take_while(|dir| dir.starts_with(top))
        .collect();
    dirs.reverse();
    let mut paths = vec![home.join(INSTRUCTIONS_FILE)];
    for dir in dirs {
        let path = dir.join(INSTRUCTIONS_FILE);
        if !paths.contains(&path) {
            paths.push(path);
        }
    }
    paths
}

/// Reads the instructions of a new session of the home `home` working in `workspace` (see
/// [`candidate_paths`]), applying the cap. Missing files are not mentioned; a file that is
/// not UTF-8 text or cannot be read (or is not a regular file) is skipped and listed.
pub fn discover(home: &Path, workspace: &Path) -> Discovery {
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    let mut budget = MAX_INSTRUCTIONS_BYTES;
    for path in candidate_paths(home, workspace) {
        match read_file(&path) {
            FileRead::Missing => {}
            FileRead::Skipped(reason) => skipped.push(SkippedFile { path, reason }),
            FileRead::Text { content, bytes } => {
                let sha256 = hex_sha256(content.as_bytes());
                let keep = if content.len() <= budget {
                    content.len()
                } else {
                    content.floor_char_boundary(budget)
                };
                // A file cut by the cap is the last one included: later ones are left out
                // whole, even if a few bytes of the budget remain.
                budget = if keep < content.len() {
                    0
                } else {
                    budget - keep
                };
                let mut text = content;
                text.truncate(keep);
                files.push(InstructionFile {
                    path: path.display().to_string(),
                    bytes,
                    sha256,
                    text,
                });
            }
        }
    }
    Discovery {
        instructions: (!files.is_empty()).then_some(ProjectInstructions { files }),
        skipped,
    }
}

/// How the files found now (`current`) differ from those a session recorded (`recorded`;
/// `None` for a session that started without instructions), as phrases: `PATH changed`,
/// `PATH is new`, `PATH was removed`. Empty when they are the same.
pub fn changes(recorded: Option<&ProjectInstructions>, current: &Discovery) -> Vec<String> {
    let now: Vec<&InstructionFile> = current
        .instructions
        .iter()
        .flat_map(|i| i.files.iter())
        .collect();
    let then: Vec<&InstructionFile> = recorded.iter().flat_map(|i| i.files.iter()).collect();
    let mut out = Vec::new();
    for old in &then {
        match now.iter().find(|f| f.path == old.path) {
            Some(new) if new.sha256 == old.sha256 => {}
            Some(_) => out.push(format!("{} changed", old.path)),
            None if current
                .skipped
                .iter()
                .any(|s| s.path.display().to_string() == old.path) =>
            {
                out.push(format!("{} changed (it is skipped now)", old.path));
            }
            None => out.push(format!("{} was removed", old.path)),
        }
    }
    for new in &now {
        if !then.iter().any(|f| f.path == new.path) {
            out.push(format!("{} is new", new.path));
        }
    }
    out
}

enum FileRead {
    Missing,
    Skipped(String),
    Text { content: String, bytes: u64 },
}

fn read_file(path: &Path) -> FileRead {
    let metadata = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return FileRead::Missing,
        Err(e) => return FileRead::Skipped(format!("it cannot be read ({e})")),
    };
    if !metadata.is_file() {
        return FileRead::Skipped("it is not a regular file".to_owned());
    }
    let mut bytes = Vec::new();
    let read = std::fs::File::open(path)
        .and_then(|file| file.take(MAX_READ_BYTES).read_to_end(&mut bytes));
    if let Err(e) = read {
        return FileRead::Skipped(format!("it cannot be read ({e})"));
    }
    let size = bytes.len() as u64;
    let cut = size == MAX_READ_BYTES && metadata.len() > MAX_READ_BYTES;
    match String::from_utf8(bytes) {
        Ok(content) => FileRead::Text {
            content,
            bytes: size,
        },
        // A file cut by the read limit may end inside a character: keep what is whole.
        Err(e) if cut && e.utf8_error().error_len().is_none() => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            let size = bytes.len() as u64;
            match String::from_utf8(bytes) {
                Ok(content) => FileRead::Text {
                    content,
                    bytes: size,
                },
                Err(_) => FileRead::Skipped("it is not UTF-8 text".to_owned()),
            }
        }
        Err(e) => FileRead::Skipped(format!(
            "it is not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )),
    }
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_files_go_personal_first_then_from_the_top_level_down() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let repo = dir.path().join("repo");
        let ws = repo.join("a").join("b");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir(repo.join(".git")).unwrap();
        assert_eq!(
            candidate_paths(&home, &ws),
            [
                home.join("AGENTS.md"),
                repo.join("AGENTS.md"),
                repo.join("a/AGENTS.md"),
                ws.join("AGENTS.md"),
            ]
        );
        // Without a repository: the workspace alone.
        let lone = dir.path().join("lone");
        std::fs::create_dir(&lone).unwrap();
        assert_eq!(
            candidate_paths(&home, &lone),
            [home.join("AGENTS.md"), lone.join("AGENTS.md")]
        );
    }

    #[test]
    fn the_cap_cuts_at_a_character_boundary_and_says_what_it_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        // 3-byte characters: the cap (32768) falls inside one.
        let big = "é€".repeat(7000); // 5 bytes a pair: 35000 bytes
        std::fs::write(home.join("AGENTS.md"), &big).unwrap();
        std::fs::write(ws.join("AGENTS.md"), "local rules").unwrap();
        let found = discover(&home, &ws);
        let instructions = found.instructions.unwrap();
        let [personal, local] = instructions.files.as_slice() else {
            panic!("two files: {instructions:?}");
        };
        assert!(personal.text.len() <= MAX_INSTRUCTIONS_BYTES);
        assert!(personal.text.len() > MAX_INSTRUCTIONS_BYTES - 3);
        assert!(big.starts_with(&personal.text));
        assert_eq!(personal.bytes, 35_000);
        assert_eq!(local.text, "");
        assert_eq!(local.bytes, 11);
        let section = instructions.section();
        assert!(section.starts_with("## Project instructions (AGENTS.md)\n"));
        assert!(section.contains(&format!(
            "left out: the end of {}, all of {}.]",
            personal.path, local.path
        )));
    }

    #[test]
    fn a_file_that_is_not_utf8_is_skipped_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("AGENTS.md"), b"ok \xff\xfe no").unwrap();
        let found = discover(&dir.path().join("nohome"), &ws);
        assert_eq!(found.instructions, None);
        assert_eq!(found.skipped.len(), 1);
        assert_eq!(found.skipped[0].path, ws.join("AGENTS.md"));
        assert_eq!(
            found.skipped[0].reason,
            "it is not UTF-8 text (invalid byte at offset 3)"
        );
    }

    #[test]
    fn changes_name_each_file_that_differs() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(ws.join("AGENTS.md"), "v1").unwrap();
        let recorded = discover(&home, &ws).instructions;
        assert!(changes(recorded.as_ref(), &discover(&home, &ws)).is_empty());
        std::fs::write(ws.join("AGENTS.md"), "v2").unwrap();
        std::fs::write(home.join("AGENTS.md"), "mine").unwrap();
        assert_eq!(
            changes(recorded.as_ref(), &discover(&home, &ws)),
            [
                format!("{} changed", ws.join("AGENTS.md").display()),
                format!("{} is new", home.join("AGENTS.md").display()),
            ]
        );
        std::fs::remove_file(ws.join("AGENTS.md")).unwrap();
        assert_eq!(
            changes(recorded.as_ref(), &discover(&home, &ws))[0],
            format!("{} was removed", ws.join("AGENTS.md").display())
        );
    }
}
