//! What a tool call recorded about a file: a `write`/`edit` call's planned effect
//! ([`FileEffect`], in its `tool/call`) and what a `read` saw ([`FileSeen`], in its
//! `tool/result`). Plain data: the tools (`troupe_tools`) plan, hash and judge them against the
//! files; recovery decides from them whether a cut call took effect (DESIGN decision 10).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A `write`/`edit` call's whole effect on its one file (recorded in its `tool/call` before the
/// file is touched).
///
/// Wire shape (camelCase): `{"path", "preImage": "sha256:<hex>" | null, "postImage":
/// "sha256:<hex>", "result": {…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileEffect {
    /// The file, relative to the workspace (as the call's result names it).
    pub path: String,
    /// The hash of the file's content before the call (`sha256:` and 64 lowercase hex
    /// digits), or `None` when the call creates the file (it did not exist).
    pub pre_image: Option<String>,
    /// The hash of the content the call writes, in the same form.
    pub post_image: String,
    /// The call's result when it writes (the tool's JSON value, e.g. `{"path","bytes",
    /// "created"}` for `write`, `{"path","replacements"}` for `edit`).
    pub result: Value,
}

/// What a `read` left its owner session knowing about one file: the hash of the content it
/// read (the same `sha256:<hex>` form as a [`FileEffect`]'s images), or `None` when it
/// found no file. A runtime records it with the call's result, so a restarted session's
/// observations can be rebuilt from its log (`troupe_tools::restore_observations`); a `write`/`edit` needs
/// none, its recorded effect's post-image is what its owner saw.
///
/// Wire shape (camelCase): `{"path": "<workspace-relative>", "image": "sha256:<hex>" | null}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileSeen {
    /// The file, relative to the workspace (as the call's result names it).
    pub path: String,
    /// The hash of the whole content read, or `None`: no file was there.
    pub image: Option<String>,
}

/// The workspace files a `bash` call changed, found by comparing the workspace before and
/// after the command (`troupe_tools::WorkspaceScan`): a file that appeared, disappeared, or
/// whose size, modification time or git status changed.
///
/// Wire shape (camelCase): `{"paths": ["<workspace-relative>", …], "complete": bool}`;
/// `paths` sorted, `/`-separated. `complete` is `false` when the comparison was cut short
/// (more files than the scan's bound, or git failed): then `paths` are the changes found, and
/// others may be missing ("unknown").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChangedFiles {
    /// The changed files, relative to the workspace, sorted.
    pub paths: Vec<String>,
    /// Whether every file of the workspace was compared.
    pub complete: bool,
}
