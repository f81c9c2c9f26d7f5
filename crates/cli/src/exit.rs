//! Failures and the exit codes they map to — the one place where library error codes become
//! process exit codes (DESIGN §6): 0 success, 1 the work failed, 2 bad usage or bad input.
//!
//! ## The rule (the same for every command; README "Exit codes")
//!
//! - **2, bad input**: the command cannot be carried out *as asked*, nothing was changed, and
//!   the fix is in what was typed or pointed at: bad usage; an invalid or unknown session id;
//!   a session of the wrong kind for the command (a teammate's or a child's given to `resume`
//!   or `team`, a session without an agent configuration); a session locked by another
//!   process (a file lock, or a NATS lease naming its holder); a store that cannot be used
//!   (`STORE_INVALID_URL`, `STORE_UNREACHABLE`, `STORE_UNSUPPORTED`, `STORE_MISCONFIGURED`);
//!   an unusable model configuration; and a home, session path or workspace the
//!   operating system refuses — missing, not a directory or not a regular file, not readable
//!   or (for commands that write) not writable, on a read-only file system, or behind a
//!   symbolic-link loop.
//! - **1, the work failed**: anything that went wrong while working (a model error, a log
//!   that failed while being written — `JOURNAL_FAILED`, also a store request that failed,
//!   `STORE_IO`, or a lost lease, `JOURNAL_LEASE_LOST` —, an interrupt), and a session file
//!   whose *content* is damaged or cannot be read by this build (`JOURNAL_CORRUPT`,
//!   `JOURNAL_UNSUPPORTED`, `TEAM_LOG_INVALID`, `RUNTIME_INVALID_EVENT`): the same for `log`,
//!   `team show`, `team verify` and `resume`, with the file and position named, and nothing
//!   rewritten.

use std::io::ErrorKind;

use troupe_journal::JournalError;
use troupe_llm::LlmError;
use troupe_protocol::{ErrorCode, IdError};
use troupe_runtime::RuntimeError;

/// Exit code of a failure of the work (a model error, a journal failure, an interrupt).
pub(crate) const WORK_FAILED: u8 = 1;
/// Exit code of bad usage or bad input.
pub(crate) const BAD_INPUT: u8 = 2;

/// A failure with the exit code it maps to. `main` prints `troupe: <error>` on one line, unless
/// the command already reported it (`error` is `None`).
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) error: Option<anyhow::Error>,
}

impl Failure {
    /// Bad usage or bad input (exit 2), whatever the error's code says.
    pub(crate) fn bad_input(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: BAD_INPUT,
            error: Some(error.into()),
        }
    }

    /// A failure of the work (exit 1), whatever the error's code says.
    pub(crate) fn work(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: WORK_FAILED,
            error: Some(error.into()),
        }
    }

    /// A failure the command has already explained on stderr.
    pub(crate) fn reported(code: u8) -> Self {
        Self { code, error: None }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Self {
        let code = if unusable_environment(&error) {
            BAD_INPUT
        } else {
            error_code(&error).map_or(WORK_FAILED, exit_code)
        };
        Failure {
            code,
            error: Some(error),
        }
    }
}

impl From<RuntimeError> for Failure {
    fn from(error: RuntimeError) -> Self {
        anyhow::Error::new(error).into()
    }
}

impl From<LlmError> for Failure {
    fn from(error: LlmError) -> Self {
        anyhow::Error::new(error).into()
    }
}

impl From<JournalError> for Failure {
    fn from(error: JournalError) -> Self {
        anyhow::Error::new(error).into()
    }
}

/// The stable code of the first error in `error`'s chain that has one.
pub(crate) fn error_code(error: &anyhow::Error) -> Option<&'static str> {
    error.chain().find_map(|cause| {
        if let Some(e) = cause.downcast_ref::<RuntimeError>() {
            Some(e.code())
        } else if let Some(e) = cause.downcast_ref::<LlmError>() {
            Some(e.code())
        } else if let Some(e) = cause.downcast_ref::<JournalError>() {
            Some(e.code())
        } else {
            cause.downcast_ref::<IdError>().map(ErrorCode::code)
        }
    })
}

/// Whether `error` is the operating system refusing what the user pointed Troupe at: the home
/// (or a path inside it) is not a directory, is not readable or writable, is on a read-only
/// file system, is behind a symbolic-link loop, or is missing (`JOURNAL_IO` with `NotFound`:
/// the journal only touches the home). These are bad input (2), not failures of the work,
/// whatever the error's code says (see the module docs).
pub(crate) fn unusable_environment(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        let journal = cause.downcast_ref::<JournalError>().or_else(|| {
            // `RuntimeError::Journal` is transparent: the journal error is not in the chain.
            match cause.downcast_ref::<RuntimeError>() {
                Some(RuntimeError::Journal(e)) => Some(e),
                _ => None,
            }
        });
        match journal {
            Some(JournalError::Io { error, .. }) => {
                refused_path(error) || error.kind() == ErrorKind::NotFound
            }
            Some(e) => matches!(
                e.io_kind(),
                Some(ErrorKind::NotADirectory | ErrorKind::PermissionDenied | ErrorKind::NotFound)
            ),
            None => cause
                .downcast_ref::<std::io::Error>()
                .is_some_and(refused_path),
        }
    })
}

/// The operating system refusing a path as such (rather than failing while working on it):
/// not a directory, permission denied (EACCES, EPERM — also an immutable file), a read-only
/// file system (EROFS), a symbolic-link loop (ELOOP).
fn refused_path(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        ErrorKind::NotADirectory | ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem
    ) || error.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
}

/// The stable codes ([`troupe_protocol::STABLE_CODES`]) that mean "what the user named or
/// configured is unusable": bad input (2) whatever command meets them.
pub(crate) const BAD_INPUT_CODES: [&str; 22] = [
    // The named session cannot be used for this command (its content may be fine: a damaged
    // or unsupported file is a failure of the work, 1).
    "INVALID_SESSION_ID",
    "SESSION_NOT_FOUND",
    "SESSION_ID_AMBIGUOUS",
    "JOURNAL_NOT_A_FILE",
    "JOURNAL_LOCKED",
    "NOT_RESUMABLE",
    // A past point of a Team (`--at`) outside its Lead log.
    "TEAM_AT_OUTSIDE_LOG",
    // The model configuration is unusable: unknown provider, missing key, bad base URL,
    // malformed or unreadable script, a script without steps for the agent.
    "LLM_CONFIG",
    "LLM_SCRIPT",
    // The workspace does not exist, is not a directory or is not writable.
    "WORKSPACE_INVALID",
    // The store named cannot be used: a URL that does not parse, no server answering, a
    // server without JetStream, a stream or lease bucket that cannot hold sessions.
    "STORE_INVALID_URL",
    "STORE_UNREACHABLE",
    "STORE_UNSUPPORTED",
    "STORE_MISCONFIGURED",
    // The MCP configuration (`--mcp-config`) cannot be read or is not valid.
    "MCP_CONFIG_UNREADABLE",
    "MCP_CONFIG_INVALID",
    // `--worktree` for a workspace it cannot branch from; `team merge`/`team clean` of what
    // has no worktree, into a branch that does not exist, or over uncommitted changes.
    "WORKTREE_NOT_A_REPOSITORY",
    "WORKTREE_DIRTY_INDEX",
    "WORKTREE_DIRTY_CHECKOUT",
    "WORKTREE_UNKNOWN_BRANCH",
    "TEAM_NO_WORKTREE",
    "WORKTREE_MEMBER_RUNNING",
];

/// The exit code of an error that reached the command with this stable code.
///
/// Codes that mean "what the user named or configured is unusable" ([`BAD_INPUT_CODES`]) are
/// bad input (2); every other code is a failure of the work (1). A model call that fails
/// *during* a turn is always 1: it is recorded as the turn's end, and never reaches this
/// function.
pub(crate) fn exit_code(code: &str) -> u8 {
    if BAD_INPUT_CODES.contains(&code) {
        BAD_INPUT
    } else {
        WORK_FAILED
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_exit_codes() {
        for (code, exit) in [
            ("SESSION_NOT_FOUND", 2),
            ("JOURNAL_LOCKED", 2),
            ("LLM_CONFIG", 2),
            ("LLM_SCRIPT", 2),
            ("WORKSPACE_INVALID", 2),
            ("LLM_AUTH", 1),
            ("JOURNAL_POISONED", 1),
            ("JOURNAL_CORRUPT", 1),
            ("JOURNAL_UNSUPPORTED", 1),
            ("TEAM_LOG_INVALID", 1),
            ("NOT_RESUMABLE", 2),
            ("JOURNAL_IO", 1),
            ("STORE_UNREACHABLE", 2),
            ("STORE_MISCONFIGURED", 2),
            ("STORE_UNSUPPORTED", 2),
            ("STORE_INVALID_URL", 2),
            ("STORE_IO", 1),
            ("JOURNAL_LEASE_LOST", 1),
            ("MCP_CONFIG_INVALID", 2),
            ("MCP_SERVER_UNAVAILABLE", 1),
            ("SOMETHING_NEW", 1),
        ] {
            assert_eq!(exit_code(code), exit, "{code}");
        }
    }

    /// Every code the exit rule names is a stable code (a renamed or misspelt one would
    /// silently turn bad input into a failure of the work).
    #[test]
    fn the_bad_input_codes_are_stable_codes() {
        for code in BAD_INPUT_CODES {
            assert!(
                troupe_protocol::stable_code(code).is_some(),
                "{code} is not in STABLE_CODES"
            );
        }
    }

    #[test]
    fn the_code_is_found_through_context_and_wrappers() {
        let error = anyhow::Error::new(RuntimeError::Model(LlmError::Script {
            message: "bad".to_owned(),
        }))
        .context("starting the lead");
        assert_eq!(error_code(&error), Some("LLM_SCRIPT"));
        assert_eq!(Failure::from(error).code, BAD_INPUT);
        let plain = anyhow::anyhow!("no code");
        assert_eq!(Failure::from(plain).code, WORK_FAILED);
    }

    fn journal_io(kind: ErrorKind) -> JournalError {
        JournalError::Io {
            op: "read",
            path: "/h/sessions/s.jsonl".into(),
            error: std::io::Error::from(kind),
        }
    }

    #[test]
    fn an_unusable_home_is_bad_input_other_io_errors_are_work_failures() {
        for kind in [
            ErrorKind::NotADirectory,
            ErrorKind::PermissionDenied,
            ErrorKind::NotFound,
            ErrorKind::ReadOnlyFilesystem,
        ] {
            let direct = anyhow::Error::new(journal_io(kind)).context("listing sessions");
            assert_eq!(Failure::from(direct).code, BAD_INPUT, "{kind:?}");
            let wrapped = RuntimeError::Journal(journal_io(kind));
            assert_eq!(
                Failure::from(wrapped).code,
                BAD_INPUT,
                "{kind:?} via the runtime"
            );
        }
        for kind in [
            ErrorKind::StorageFull,
            ErrorKind::Other,
            ErrorKind::Interrupted,
        ] {
            let error = anyhow::Error::new(journal_io(kind));
            assert_eq!(Failure::from(error).code, WORK_FAILED, "{kind:?}");
        }
        // A symbolic-link loop is refused like any other unusable path.
        let looped = JournalError::Io {
            op: "open",
            path: "/h/sessions/s.jsonl".into(),
            error: std::io::Error::from_raw_os_error(rustix::io::Errno::LOOP.raw_os_error()),
        };
        assert_eq!(Failure::from(looped).code, BAD_INPUT);
        // A real one: the home is a regular file.
        let file = tempfile::NamedTempFile::new().unwrap();
        let listed = troupe_journal::Journal::open_home(file.path())
            .list(&mut |_| {})
            .unwrap_err();
        assert_eq!(listed.io_kind(), Some(ErrorKind::NotADirectory));
        assert_eq!(Failure::from(listed).code, BAD_INPUT);
        // A plain OS error of the same kinds (not from the journal).
        let denied = anyhow::Error::new(std::io::Error::from(ErrorKind::PermissionDenied));
        assert_eq!(Failure::from(denied).code, BAD_INPUT);
        let missing = anyhow::Error::new(std::io::Error::from(ErrorKind::NotFound));
        assert_eq!(Failure::from(missing).code, WORK_FAILED);
    }
}
