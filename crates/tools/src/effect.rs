//! What a `write` or `edit` call does to its file, decided before the file is touched, so a
//! runtime can record it first and tell after a crash whether it happened (DESIGN decision 10).
//!
//! A call's [`FilePlan`] holds the new content and its [`FileEffect`]: the file, the hash of its
//! content before the call (its *pre-image*, or none when the call creates it), the hash of the
//! content the call writes (its *post-image*) and the result the call returns. The runtime
//! records the effect in the call's `tool/call` and makes it durable, then runs the call with
//! the plan ([`crate::ToolContext::with_file_plan`]); the tool writes only while the file is
//! still at the pre-image (else `FS_STALE_VERSION`, nothing written). After a crash,
//! [`file_effect_state`] compares the file with both images: the post-image means the call took
//! effect (its result is [`FileEffect::result`]), the pre-image that it did not, anything else
//! that someone else changed the file since.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
pub use troupe_session::effect::FileEffect;

use crate::error::ToolError;
use crate::fsops::io_error;
use crate::observe::FileVersion;
use crate::path::resolve;

/// Where a recorded [`FileEffect`] stands, judged from the file now ([`file_effect_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileEffectState {
    /// The file holds the post-image: the call took effect.
    Done,
    /// The file is still at the pre-image (or still absent): the call did not take effect.
    NotRun,
    /// The file holds neither image: someone else changed it since the call was planned.
    Changed,
}

/// A `write`/`edit` call planned by [`crate::Tool::plan`]: its [`FileEffect`] and what carrying
/// it out needs. The tool that planned it writes exactly this content, and only while the file
/// is at the pre-image.
#[derive(Debug, Clone)]
pub struct FilePlan {
    pub(crate) effect: FileEffect,
    /// The resolved target.
    pub(crate) absolute: PathBuf,
    /// The content the call writes.
    pub(crate) content: Vec<u8>,
    /// When the file exists: the version it had when planned (the stale-version guard's
    /// token). `None`: the call creates the file.
    pub(crate) replaces: Option<FileVersion>,
}

impl FilePlan {
    /// The effect to record before the call runs.
    pub fn effect(&self) -> &FileEffect {
        &self.effect
    }
}

/// `sha256:<hex>` of `bytes`.
pub(crate) fn image_of(bytes: &[u8]) -> String {
    image_text(&Sha256::digest(bytes))
}

/// `sha256:<hex>` of a finished SHA-256 `digest`.
pub(crate) fn image_text(digest: &[u8]) -> String {
    let mut text = String::with_capacity(7 + 64);
    text.push_str("sha256:");
    for &byte in digest {
        text.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        text.push(char::from(b"0123456789abcdef"[usize::from(byte & 0xf)]));
    }
    text
}

/// The image of the file at `absolute` now: `None` when nothing is there.
pub(crate) fn current_image(absolute: &Path, display: &str) -> Result<Option<String>, ToolError> {
    match std::fs::read(absolute) {
        Ok(bytes) => Ok(Some(image_of(&bytes))),
        Err(error)
            if matches!(
                error.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(source) => Err(io_error(display, source)),
    }
}

/// Judges a recorded `effect` against the file now, in the workspace `workspace_root`: the
/// post-image → [`FileEffectState::Done`], the pre-image (or still absent for a creation) →
/// [`FileEffectState::NotRun`], anything else → [`FileEffectState::Changed`]. Reads the file
/// once; changes nothing.
///
/// # Errors
/// `FS_PATH_OUTSIDE_WORKSPACE` (the path no longer resolves inside the workspace, e.g. through
/// a symlink changed since), `FS_IS_DIRECTORY`, `FS_IO` when the file cannot be read.
pub fn file_effect_state(
    workspace_root: &Path,
    effect: &FileEffect,
) -> Result<FileEffectState, ToolError> {
    let resolved = resolve(workspace_root, &effect.path)?;
    let now = current_image(&resolved.absolute, &resolved.display)?;
    Ok(if now.as_deref() == Some(effect.post_image.as_str()) {
        FileEffectState::Done
    } else if now == effect.pre_image {
        FileEffectState::NotRun
    } else {
        FileEffectState::Changed
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn images_are_sha256_in_lowercase_hex() {
        assert_eq!(
            image_of(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
