//! Project instructions as a session records them: the `AGENTS.md` files a session started
//! with, in every member's `agent/config` (key `projectInstructions`), and the system prompt
//! section made of them.
//!
//! Plain data: finding and reading the files (which ones, in which order, the cap applied,
//! bad files skipped) is the runtime's (`troupe_runtime::instructions`).

use serde::{Deserialize, Serialize};

/// The most bytes of instruction text included in a system prompt, all files together
/// (32 KiB).
pub const MAX_INSTRUCTIONS_BYTES: usize = 32 * 1024;

/// The instructions a session started with: every `AGENTS.md` read, in prompt order.
///
/// Wire shape (in `agent/config`, key `projectInstructions`):
/// `{"files":[{"path","bytes","sha256","text"}…]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProjectInstructions {
    /// The files, personal first, then from the repository's top level down.
    pub files: Vec<InstructionFile>,
}

/// One `AGENTS.md` as read at session start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstructionFile {
    /// The file's absolute path.
    pub path: String,
    /// The size of the content read, in bytes (at most 1 MiB is read).
    pub bytes: u64,
    /// The SHA-256 of the content read, lowercase hex: how a resume tells that it changed.
    pub sha256: String,
    /// The part of it in the prompt: all of it, a prefix cut at a character boundary, or
    /// nothing when earlier files used up the cap.
    pub text: String,
}

impl InstructionFile {
    /// Whether only part of the file (or none of it) is in the prompt.
    pub fn is_cut(&self) -> bool {
        (self.text.len() as u64) < self.bytes
    }
}

impl ProjectInstructions {
    /// Whether the cap left something out.
    pub fn truncated(&self) -> bool {
        self.files.iter().any(InstructionFile::is_cut)
    }

    /// Total size of the files, in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }

    /// What the cap left out, as a phrase (`the end of /a/AGENTS.md, all of /b/AGENTS.md`);
    /// `None` when nothing was.
    pub fn left_out(&self) -> Option<String> {
        let parts: Vec<String> = self
            .files
            .iter()
            .filter(|f| f.is_cut())
            .map(|f| {
                if f.text.is_empty() {
                    format!("all of {}", f.path)
                } else {
                    format!("the end of {}", f.path)
                }
            })
            .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// The system prompt section: a heading, what the files are and how to weigh them, each
    /// file's text under its path, and — when the cap cut anything — a note saying what was
    /// left out. It goes after the default prompt and before the Team policy.
    pub fn section(&self) -> String {
        let mut out = String::from(
            "## Project instructions (AGENTS.md)\n\
             The user and the project give these instructions in AGENTS.md files: the user's \
             own first, then the repository's from its top level down to the working directory \
             (where they disagree, the later, more specific file wins). Follow them in all your \
             work here; what the user asks directly in this conversation comes first.\n",
        );
        for file in self.files.iter().filter(|f| !f.text.is_empty()) {
            out.push_str("\n### ");
            out.push_str(&file.path);
            out.push('\n');
            out.push_str(file.text.trim_end_matches('\n'));
            out.push('\n');
        }
        if let Some(left_out) = self.left_out() {
            out.push_str(&format!(
                "\n[Project instructions truncated: these AGENTS.md files hold {} bytes, more \
                 than the {} bytes (32 KiB) included; left out: {left_out}.]\n",
                self.total_bytes(),
                MAX_INSTRUCTIONS_BYTES
            ));
        }
        out
    }
}
