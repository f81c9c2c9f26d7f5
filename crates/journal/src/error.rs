use std::path::PathBuf;

use troupe_protocol::{ErrorCode, Seq, SessionId};

/// Everything the journal can refuse or fail with. Each variant maps to one stable code
/// (see [`ErrorCode`]); messages are one line and name the file involved.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Another process (or another writer in this process) holds the session file's advisory
    /// lock. Returned by opening a session for writing; never retried automatically.
    /// Code `JOURNAL_LOCKED`.
    #[error("session file {} is locked by another process", path.display())]
    Locked {
        /// The locked session file.
        path: PathBuf,
    },
    /// An earlier write or fsync of this writer failed; the file was rolled back to its last
    /// durable length and the writer refuses all further appends and flushes (no silent retry:
    /// the kernel may have dropped the dirty pages). Code `JOURNAL_POISONED`.
    #[error("journal writer for session {id} is poisoned by an earlier failure: {cause}")]
    Poisoned {
        /// The session whose writer is poisoned.
        id: SessionId,
        /// The first failure, as text.
        cause: String,
    },
    /// Damage that is not a crash artefact: a bad or out-of-sequence line followed later by a
    /// completed turn, a missing or unreadable header (REFERENCE a.9). The load is refused and
    /// nothing is repaired. Code `JOURNAL_CORRUPT`.
    #[error("corrupt session file {}: line {line}, byte offset {offset}: {reason}", path.display())]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// 1-based line number of the first bad line (the header is line 1).
        line: u64,
        /// Byte offset of the start of that line.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The file was written by another format version, or holds a required event type this
    /// build does not know (REFERENCE a.2). Code `JOURNAL_UNSUPPORTED`.
    #[error("unsupported session file {}: {reason}", path.display())]
    Unsupported {
        /// The refused file.
        path: PathBuf,
        /// Which version or event type was not understood, and where.
        reason: String,
    },
    /// No session file exists for this id. Code `SESSION_NOT_FOUND`.
    #[error("session {id} not found (looked for {})", path.display())]
    NotFound {
        /// The requested session.
        id: String,
        /// Where it was expected.
        path: PathBuf,
    },
    /// A session id prefix (see [`crate::Journal::resolve`]) matches more than one stored
    /// session. Code `SESSION_ID_AMBIGUOUS`. The message lists the candidates (at most
    /// [`crate::MAX_LISTED_CANDIDATES`], then how many more).
    #[error("{}", ambiguous_message(prefix, candidates))]
    Ambiguous {
        /// The prefix as given.
        prefix: String,
        /// Every stored session id that starts with it, sorted.
        candidates: Vec<SessionId>,
    },
    /// A session with this id already exists; creation never overwrites.
    /// Code `SESSION_ALREADY_EXISTS`.
    #[error("session {id} already exists at {}", path.display())]
    AlreadyExists {
        /// The id that was taken.
        id: SessionId,
        /// The existing file.
        path: PathBuf,
    },
    /// The session path exists but is not a regular file (for example a directory).
    /// Code `JOURNAL_NOT_A_FILE`.
    #[error("session path {} is not a regular file", path.display())]
    NotAFile {
        /// The offending path.
        path: PathBuf,
    },
    /// A backend append whose expected next seq does not match the stored log (another writer
    /// got there first). Code `JOURNAL_SEQ_CONFLICT`.
    #[error(
        "append to session {id} expected next seq {expected} but {}",
        actual.map_or_else(
            || "another writer's message, not a readable line, is the log's last".to_owned(),
            |seq| format!("the log's next seq is {seq}")
        )
    )]
    SeqConflict {
        /// The session appended to.
        id: SessionId,
        /// The seq the caller expected to write next.
        expected: Seq,
        /// The seq the log actually expects next (`None`: the last message on a shared store
        /// is another writer's and not a readable line).
        actual: Option<Seq>,
    },
    /// A batch or seed whose events are not contiguous from the expected seq.
    /// Code `JOURNAL_INVALID_BATCH`.
    #[error("invalid batch for session {id}: {reason}")]
    InvalidBatch {
        /// The session appended to.
        id: SessionId,
        /// What is wrong.
        reason: String,
    },
    /// A fork prefix ends inside an open turn (REFERENCE a.5). Code `OPEN_TURN`.
    #[error("cannot fork session {id} at seq {boundary}: the prefix ends inside an open turn")]
    OpenTurn {
        /// The source session.
        id: SessionId,
        /// The requested last seq of the prefix.
        boundary: Seq,
    },
    /// A fork boundary past the end of the source log (REFERENCE a.5). Code `INVALID_BOUNDARY`.
    #[error("cannot fork session {id} at seq {boundary}: the log has {len} events")]
    InvalidBoundary {
        /// The source session.
        id: SessionId,
        /// The requested last seq of the prefix.
        boundary: Seq,
        /// The number of events in the source log.
        len: u64,
    },
    /// An event refused at append: a required type this build does not know (it could not be
    /// read back), an empty or malformed type, or a payload nested deeper than
    /// [`crate::MAX_DATA_DEPTH`]. Nothing is appended. Code `JOURNAL_INVALID_EVENT`.
    #[error("invalid event for session {id}: {reason}")]
    InvalidEvent {
        /// The session appended to.
        id: SessionId,
        /// What is wrong.
        reason: String,
    },
    /// The writer was closed; nothing more can be appended. Code `JOURNAL_CLOSED`.
    #[error("journal writer for session {id} is closed")]
    Closed {
        /// The session.
        id: SessionId,
    },
    /// Another live writer holds the session's lease on a shared store (the NATS store's
    /// replacement for the file lock, DESIGN §7). Returned by opening a session for writing, or
    /// by the first append of a new session whose id another writer is creating. Never retried
    /// automatically; the lease frees itself when its holder stops renewing it.
    /// Code `JOURNAL_LOCKED`.
    #[error("session {id} is locked by {holder} (lease on {store})")]
    Leased {
        /// The session.
        id: SessionId,
        /// Who holds the lease, e.g. `host build-1 pid 4242 since 1764000000000`.
        holder: String,
        /// The store, e.g. `nats://127.0.0.1:4222`.
        store: String,
    },
    /// This writer's lease on a shared store could not be renewed in time or was taken by
    /// another writer: the writer is poisoned and refuses every later append and flush (another
    /// process may now write the session). Code `JOURNAL_LEASE_LOST`.
    #[error("journal writer for session {id} lost its lease: {reason}")]
    LeaseLost {
        /// The session.
        id: SessionId,
        /// Why, e.g. "not renewed within its 10 s TTL".
        reason: String,
    },
    /// A store URL that cannot be parsed (for example `nats://` without a host).
    /// Code `STORE_INVALID_URL`.
    #[error("invalid store URL {url:?}: {reason}")]
    StoreInvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A shared store could not be reached when connecting (no server answers at the URL).
    /// Code `STORE_UNREACHABLE`.
    #[error("cannot reach the store at {url}: {reason}")]
    StoreUnreachable {
        /// The store URL.
        url: String,
        /// The client's error.
        reason: String,
    },
    /// The server at the URL lacks what the store needs (JetStream disabled, a server too old).
    /// Code `STORE_UNSUPPORTED`.
    #[error("the store at {url} is unusable: {reason}")]
    StoreUnsupported {
        /// The store URL.
        url: String,
        /// What is missing.
        reason: String,
    },
    /// The store's existing configuration cannot hold session logs (a stream whose subjects do
    /// not cover the session subjects, a lease bucket without a TTL, a session id that is not a
    /// valid subject). Code `STORE_MISCONFIGURED`.
    #[error("the store at {url} is misconfigured: {reason}")]
    StoreMisconfigured {
        /// The store URL.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// A request to a connected store failed or timed out (connection lost, no stream leader,
    /// no quorum). Nothing the request would have written is considered written.
    /// Code `STORE_IO`.
    #[error("{op} on {url} failed: {reason}")]
    StoreIo {
        /// What was being done (e.g. "publish").
        op: &'static str,
        /// The store URL.
        url: String,
        /// The client's error.
        reason: String,
    },
    /// An operating-system error while reading or writing a session file or directory.
    /// Code `JOURNAL_IO`.
    #[error("{op} {}: {error}", path.display())]
    Io {
        /// What was being done (e.g. "fdatasync").
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error. Shown in the message and deliberately not exposed as
        /// `Error::source()`, so error chains do not print it twice.
        error: std::io::Error,
    },
}

impl ErrorCode for JournalError {
    fn code(&self) -> &'static str {
        match self {
            JournalError::Locked { .. } => "JOURNAL_LOCKED",
            JournalError::Poisoned { .. } => "JOURNAL_POISONED",
            JournalError::Corrupt { .. } => "JOURNAL_CORRUPT",
            JournalError::Unsupported { .. } => "JOURNAL_UNSUPPORTED",
            JournalError::NotFound { .. } => "SESSION_NOT_FOUND",
            JournalError::Ambiguous { .. } => "SESSION_ID_AMBIGUOUS",
            JournalError::AlreadyExists { .. } => "SESSION_ALREADY_EXISTS",
            JournalError::NotAFile { .. } => "JOURNAL_NOT_A_FILE",
            JournalError::SeqConflict { .. } => "JOURNAL_SEQ_CONFLICT",
            JournalError::InvalidBatch { .. } => "JOURNAL_INVALID_BATCH",
            JournalError::OpenTurn { .. } => "OPEN_TURN",
            JournalError::InvalidBoundary { .. } => "INVALID_BOUNDARY",
            JournalError::InvalidEvent { .. } => "JOURNAL_INVALID_EVENT",
            JournalError::Closed { .. } => "JOURNAL_CLOSED",
            JournalError::Leased { .. } => "JOURNAL_LOCKED",
            JournalError::LeaseLost { .. } => "JOURNAL_LEASE_LOST",
            JournalError::StoreInvalidUrl { .. } => "STORE_INVALID_URL",
            JournalError::StoreUnreachable { .. } => "STORE_UNREACHABLE",
            JournalError::StoreUnsupported { .. } => "STORE_UNSUPPORTED",
            JournalError::StoreMisconfigured { .. } => "STORE_MISCONFIGURED",
            JournalError::StoreIo { .. } => "STORE_IO",
            JournalError::Io { .. } => "JOURNAL_IO",
        }
    }
}

impl JournalError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        JournalError::Io {
            op,
            path: path.into(),
            error,
        }
    }

    /// The OS error kind behind a `JOURNAL_IO` error, if this is one.
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        match self {
            JournalError::Io { error, .. } => Some(error.kind()),
            _ => None,
        }
    }
}

/// `session id prefix `ab` is ambiguous: it matches 3 sessions: ab1…, ab2…, ab3… (give more
/// characters)`.
fn ambiguous_message(prefix: &str, candidates: &[SessionId]) -> String {
    let listed = crate::MAX_LISTED_CANDIDATES;
    let mut shown: Vec<&str> = candidates
        .iter()
        .take(listed)
        .map(SessionId::as_str)
        .collect();
    let more = candidates.len().saturating_sub(listed);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    if shown.is_empty() {
        shown.push("-");
    }
    format!(
        "session id prefix {prefix} is ambiguous: it matches {} sessions: {}{more} (give more characters of the id)",
        candidates.len(),
        shown.join(", ")
    )
}

/// Shorthand for journal results.
pub type Result<T, E = JournalError> = std::result::Result<T, E>;
