//! The demo's built-in scripts and where they are recorded: `<home>/demo/script-<hash>.json`
//! (`worktree-script-<hash>.json` for `demo --worktree`), named by the hash of their text, and
//! found again under another home when a session recorded under one that is gone (or on
//! another host) is resumed.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::exit::Failure;

/// The built-in script: `{"agents": {"lead": […], "alpha": […], "beta": […]}}`.
pub(crate) const SCRIPT: &str = include_str!("demo/script.json");

/// The script of `troupe demo --worktree`: the same Team and board, each teammate in its own
/// git worktree, so beta's edit is never stale (alpha's change is on alpha's branch) and the
/// Lead lists the branches instead of running the suite (its checkout is unchanged until
/// `troupe team merge`).
pub(crate) const WORKTREE_SCRIPT: &str = include_str!("demo/script-worktree.json");

/// The file-name prefix of the recorded worktree script (`<home>/demo/worktree-script-….json`):
/// a resumed worktree demo has no test check (its work is on the teammates' branches).
pub(crate) const WORKTREE_SCRIPT_PREFIX: &str = "worktree-script-";

/// Whether `path` names this build's own demo script as [`record_script`] records it under
/// some home (`<home>/demo/script-<hash>.json`, or `worktree-script-<hash>.json` for `demo
/// --worktree`: `Some(true)`), by name only — the file need not exist (the home that recorded
/// it may be on another host, or gone).
pub(crate) fn built_in_at(path: &Path) -> Option<bool> {
    let in_demo = path
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|d| d == "demo");
    let name = path.file_name()?.to_str()?.strip_suffix(".json")?;
    let (worktree, hash) = match name.strip_prefix(WORKTREE_SCRIPT_PREFIX) {
        Some(hash) => (true, hash),
        None => (false, name.strip_prefix("script-")?),
    };
    let script = if worktree { WORKTREE_SCRIPT } else { SCRIPT };
    (in_demo && hash == format!("{:016x}", fnv1a(script.as_bytes()))).then_some(worktree)
}

/// The demo script to load for a session whose log records `path`: `path` itself while it can
/// be read; when it cannot (the demo was started under another home — another host, a
/// home since removed) and it names this build's own demo script ([`built_in_at`]), that script
/// recorded under `home` again, so a demo resumes "on any host, any home". `None` otherwise
/// (the path is loaded as given and its error reported).
pub(crate) fn script_here(path: &Path, home: &Path) -> Option<PathBuf> {
    if path.is_file() {
        return None;
    }
    let worktree = built_in_at(path)?;
    record_script(home, worktree).ok()
}

/// Writes the built-in script to `<home>/demo/script-<hash of its text>.json` (once per
/// version of the script) and returns its path. A session records the path, so `troupe
/// resume` of a demo session reads the same script, even after a newer Troupe changed it.
/// With `worktree`, the worktree script, as `worktree-script-<hash>.json`.
pub(crate) fn record_script(home: &Path, worktree: bool) -> Result<PathBuf, Failure> {
    let dir = home.join("demo");
    let (script, prefix) = if worktree {
        (WORKTREE_SCRIPT, WORKTREE_SCRIPT_PREFIX)
    } else {
        (SCRIPT, "script-")
    };
    let path = dir.join(format!("{prefix}{:016x}.json", fnv1a(script.as_bytes())));
    if std::fs::read(&path).is_ok_and(|bytes| bytes == script.as_bytes()) {
        return Ok(path);
    }
    let write = || -> anyhow::Result<()> {
        std::fs::create_dir_all(&dir)?;
        let staging = dir.join(format!(".script-{}.tmp", std::process::id()));
        let mut file = std::fs::File::create(&staging)?;
        file.write_all(script.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&staging, &path)?;
        Ok(())
    };
    write()
        .with_context(|| format!("writing the demo script to {}", path.display()))
        .map_err(Failure::bad_input)?;
    Ok(path)
}

/// FNV-1a, 64 bits: a stable name for a version of the script (not a security hash).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `config`, with a demo script recorded under another home (on another host, or a home since
/// removed) found again under `home` ([`script_here`]): a demo resumes from any home.
pub(crate) fn config_here(
    config: troupe_llm::ProviderConfig,
    home: &std::path::Path,
) -> troupe_llm::ProviderConfig {
    match config {
        troupe_llm::ProviderConfig::Script { path } => troupe_llm::ProviderConfig::Script {
            path: script_here(&path, home).unwrap_or(path),
        },
        other => other,
    }
}
