use serde::{Deserialize, Serialize};

use crate::SessionId;

/// The on-disk format version this build writes and the only one it reads.
///
/// Bump it (and keep a reader for the old one) whenever a change would make an older build
/// misread a file. A header with another value is refused with `JOURNAL_UNSUPPORTED`.
pub const FORMAT_VERSION: u32 = 1;

/// The `type` tag of a header line, so a session file is self-describing.
pub const HEADER_TYPE: &str = "session";

/// Line 1 of every session file (DESIGN §3, REFERENCE a.1), immutable once written.
///
/// Wire shape (camelCase, absent options omitted):
/// `{"type":"session","format":1,"id":"…","createdAt":MS,"cwd"?:"…","parentSession"?:"…",
/// "seedLength"?:N,"origin"?:"…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionHeader {
    /// Always [`HEADER_TYPE`].
    #[serde(rename = "type")]
    pub kind: String,
    /// On-disk format version; see [`FORMAT_VERSION`].
    pub format: u32,
    /// The session's id.
    pub id: SessionId,
    /// Creation time, epoch milliseconds.
    pub created_at: u64,
    /// Absolute working directory at creation, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The direct parent session (fork lineage or a child's parent), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<SessionId>,
    /// Number of leading events inherited from the parent (REFERENCE a.5); absent means 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_length: Option<u64>,
    /// Presentation-only classification, e.g. `"subagent"` for a child session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

impl SessionHeader {
    /// A header for a new root session: current [`FORMAT_VERSION`], no parent, no seed.
    pub fn new(id: SessionId, created_at_ms: u64) -> Self {
        Self {
            kind: HEADER_TYPE.to_owned(),
            format: FORMAT_VERSION,
            id,
            created_at: created_at_ms,
            cwd: None,
            parent_session: None,
            seed_length: None,
            origin: None,
        }
    }

    /// Sets the working directory.
    #[must_use]
    pub fn with_cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Sets the parent session.
    #[must_use]
    pub fn with_parent(mut self, parent: SessionId) -> Self {
        self.parent_session = Some(parent);
        self
    }

    /// Sets the origin classification (e.g. `"subagent"`).
    #[must_use]
    pub fn with_origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = Some(origin.into());
        self
    }

    /// The number of inherited events (`seedLength`, 0 when absent): the own suffix of the
    /// session starts at this seq.
    pub fn seed_len(&self) -> u64 {
        self.seed_length.unwrap_or(0)
    }
}
