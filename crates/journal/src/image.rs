//! Sessions as their stored lines: [`SessionImage`] (read with
//! [`crate::LogBackend::read_image`], stored with [`crate::LogBackend::import`]) and
//! [`crate::Journal::copy_to`], which moves sessions between stores byte for byte
//! (DESIGN §7: `troupe store copy`).

use std::path::{Path, PathBuf};

use troupe_protocol::{SessionHeader, SessionId};

use crate::error::{JournalError, Result};
use crate::replay::{TornTail, scan_each};

/// A session's valid prefix as stored: the header line and every valid event line, each
/// followed by `'\n'`, exactly as a JSONL file holds them (and as the NATS store's message
/// payloads are, joined with newlines). Made only from bytes that scan as a session
/// ([`SessionImage::from_bytes`]), so every image is a whole, valid session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionImage {
    header: SessionHeader,
    bytes: Vec<u8>,
    events: u64,
    torn_tail: Option<TornTail>,
    location: PathBuf,
}

impl SessionImage {
    /// Reads `bytes` (a session file's content; `location` names it in errors) with the rules
    /// of [`scan_each`] and keeps the valid prefix: an unfinished final write is cut off and
    /// reported in [`SessionImage::torn_tail`].
    ///
    /// # Errors
    /// As [`scan_each`]: `JOURNAL_CORRUPT` (with line and byte offset), `JOURNAL_UNSUPPORTED`.
    pub fn from_bytes(location: &Path, mut bytes: Vec<u8>) -> Result<Self> {
        let summary = scan_each(location, &bytes[..], &mut |_| {})?;
        let valid = usize::try_from(summary.valid_len).unwrap_or(usize::MAX);
        bytes.truncate(valid);
        Ok(Self {
            header: summary.header,
            bytes,
            events: summary.next_seq.0,
            torn_tail: summary.torn_tail,
            location: location.to_path_buf(),
        })
    }

    /// Line 1, parsed.
    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    /// The session's id (the header's).
    pub fn id(&self) -> &SessionId {
        &self.header.id
    }

    /// The lines, each followed by `'\n'`: header first, then event `i` on line `i + 2`.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The number of events (valid event lines).
    pub fn events(&self) -> u64 {
        self.events
    }

    /// The bytes of an unfinished final write the source held after the valid prefix, which
    /// are not part of the image.
    pub fn torn_tail(&self) -> Option<&TornTail> {
        self.torn_tail.as_ref()
    }

    /// Where the image was read from.
    pub fn location(&self) -> &Path {
        &self.location
    }

    /// The lines without their newlines: the header line, then each event line in seq order.
    pub fn lines(&self) -> impl Iterator<Item = &[u8]> {
        self.bytes
            .split(|b| *b == b'\n')
            .take(usize::try_from(self.events + 1).unwrap_or(usize::MAX))
    }
}

/// What [`crate::Journal::copy_to`] did with one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyOutcome {
    /// The session was stored on the target.
    Copied {
        /// Events copied.
        events: u64,
        /// Bytes copied (header and event lines with their newlines).
        bytes: u64,
        /// An unfinished final write of the source that was not copied.
        torn_tail: Option<TornTail>,
    },
    /// The target already held exactly these lines (an earlier copy): nothing was written.
    AlreadyThere {
        /// Events in the session.
        events: u64,
        /// Its bytes.
        bytes: u64,
    },
}

/// Why [`crate::Journal::copy_to`] did not copy a session.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// Reading the session from the source failed (`SESSION_NOT_FOUND`, `JOURNAL_CORRUPT`, …).
    #[error("reading it from the source: {0}")]
    Source(JournalError),
    /// Storing it on the target failed (`SESSION_ALREADY_EXISTS` when a concurrent writer
    /// created another session of that id, `JOURNAL_LOCKED`, `JOURNAL_IO`, `STORE_IO`, …).
    #[error("storing it on the target: {0}")]
    Target(JournalError),
    /// The target holds a session of that id with other lines; nothing was written.
    /// Code `SESSION_ALREADY_EXISTS`.
    #[error(
        "the target already holds a session {id} with other lines ({}); nothing was written",
        location.display()
    )]
    Differs {
        /// The session.
        id: SessionId,
        /// Where the target holds it.
        location: PathBuf,
    },
}

impl troupe_protocol::ErrorCode for CopyError {
    fn code(&self) -> &'static str {
        match self {
            CopyError::Source(e) | CopyError::Target(e) => e.code(),
            CopyError::Differs { .. } => "SESSION_ALREADY_EXISTS",
        }
    }
}

/// Copies one session (see [`crate::Journal::copy_to`]).
pub(crate) fn copy(
    source: &dyn crate::LogBackend,
    target: &dyn crate::LogBackend,
    id: &SessionId,
) -> std::result::Result<CopyOutcome, CopyError> {
    let image = source.read_image(id).map_err(CopyError::Source)?;
    if let Some(outcome) = already_there(target, &image)? {
        return Ok(outcome);
    }
    match target.import(&image) {
        Ok(()) => Ok(CopyOutcome::Copied {
            events: image.events(),
            bytes: image.bytes().len() as u64,
            torn_tail: image.torn_tail().cloned(),
        }),
        // Another copy stored it meanwhile: the same lines are fine.
        Err(e @ JournalError::AlreadyExists { .. }) => match already_there(target, &image)? {
            Some(outcome) => Ok(outcome),
            None => Err(CopyError::Target(e)),
        },
        Err(e) => Err(CopyError::Target(e)),
    }
}

/// `Some` when `target` already holds exactly `image`'s lines; `None` when it holds no such
/// session (or only an unfinished creation).
///
/// # Errors
/// [`CopyError::Differs`] when it holds other lines under the id, or [`CopyError::Target`]
/// with the target's read error.
fn already_there(
    target: &dyn crate::LogBackend,
    image: &SessionImage,
) -> std::result::Result<Option<CopyOutcome>, CopyError> {
    match target.read_image(image.id()) {
        Ok(existing) if existing.bytes() == image.bytes() => Ok(Some(CopyOutcome::AlreadyThere {
            events: image.events(),
            bytes: image.bytes().len() as u64,
        })),
        Ok(existing) => Err(CopyError::Differs {
            id: image.id().clone(),
            location: existing.location().to_path_buf(),
        }),
        Err(JournalError::NotFound { .. }) => Ok(None),
        Err(e) => Err(CopyError::Target(e)),
    }
}
