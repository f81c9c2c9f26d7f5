//! Team identities (REFERENCE c.1): [`TeamId`], [`MemberName`], [`TaskId`], [`Revision`] and
//! the Team message id format.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};
use troupe_protocol::{MessageId, SessionId};

use crate::error::TeamError;

/// The largest integer JavaScript represents exactly, `2^53 − 1`.
///
/// Task numbers, revisions, versions and configured limits are bounded by it so every value
/// Troupe writes is also a safe integer for the original's readers (REFERENCE c.1, c.3, c.15).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// The pseudo-name of the Lead (REFERENCE c.1). No teammate may take it.
pub const LEAD_NAME: &str = "lead";

/// The longest accepted member name, in characters (all ASCII, so also bytes).
pub const MEMBER_NAME_MAX_LEN: usize = 64;

/// A Team's identity: always the Lead's [`SessionId`] (REFERENCE c.1). A Team has no creation
/// event; it exists implicitly for every Lead session.
///
/// Wire shape: the session id string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct TeamId(SessionId);

impl TeamId {
    /// The Team led by session `lead`.
    pub fn new(lead: SessionId) -> Self {
        Self(lead)
    }

    /// The Lead's session id (the same string).
    pub fn lead_id(&self) -> &SessionId {
        &self.0
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl From<SessionId> for TeamId {
    fn from(lead: SessionId) -> Self {
        Self(lead)
    }
}

impl fmt::Display for TeamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl<'de> Deserialize<'de> for TeamId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        SessionId::deserialize(deserializer).map(Self)
    }
}

/// A teammate's name (REFERENCE c.1): `^[a-z0-9]+(?:-[a-z0-9]+)*$`, at most
/// [`MEMBER_NAME_MAX_LEN`] characters, never `lead`. Immutable and never reused within a Team,
/// even after the member failed.
///
/// Wire shape: the name string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct MemberName(String);

impl MemberName {
    /// Validates `value` as a member name. The value is not trimmed (REFERENCE c.8 step 4).
    ///
    /// # Errors
    /// [`TeamError::InvalidMemberName`] (`TEAM_INVALID_MEMBER_NAME`) when the pattern, the
    /// length limit or the `lead` reservation is broken.
    pub fn new(value: impl Into<String>) -> Result<Self, TeamError> {
        let value = value.into();
        if Self::is_valid(&value) {
            Ok(Self(value))
        } else {
            Err(TeamError::InvalidMemberName { name: value })
        }
    }

    fn is_valid(value: &str) -> bool {
        let bytes = value.as_bytes();
        !bytes.is_empty()
            && bytes.len() <= MEMBER_NAME_MAX_LEN
            && value != LEAD_NAME
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
            && bytes.first() != Some(&b'-')
            && bytes.last() != Some(&b'-')
            && !value.contains("--")
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Lets maps keyed by [`MemberName`] be queried with a plain `&str`.
impl std::borrow::Borrow<str> for MemberName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MemberName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl<'de> Deserialize<'de> for MemberName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        MemberName::new(String::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

/// A task's identity (REFERENCE c.1, c.3). Troupe allocates `task-<n>` with `n` a positive
/// decimal integer ≤ [`MAX_SAFE_INTEGER`], monotonic and never reused; replay also accepts
/// any other non-empty id (for example `external-task`), but an id of the form `task-<digits>`
/// must carry a safe integer.
///
/// Wire shape: the id string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct TaskId(String);

/// Why a task id string was refused (see [`TaskId::parse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskIdError {
    /// The id is empty.
    Empty,
    /// The id has the form `task-<digits>` but the number exceeds [`MAX_SAFE_INTEGER`].
    UnsafeNumber,
}

impl fmt::Display for TaskIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskIdError::Empty => f.write_str("task id is empty"),
            TaskIdError::UnsafeNumber => {
                f.write_str("task id number is not a safe integer (at most 2^53-1)")
            }
        }
    }
}

impl TaskId {
    /// Validates `value` as a task id (non-empty; a `task-<digits>` id must carry a safe
    /// integer).
    ///
    /// # Errors
    /// [`TaskIdError`] saying which rule was broken.
    pub fn parse(value: impl Into<String>) -> Result<Self, TaskIdError> {
        let value = value.into();
        Self::check(&value)?;
        Ok(Self(value))
    }

    /// Whether [`TaskId::parse`] accepts `value` (without allocating).
    ///
    /// # Errors
    /// As [`TaskId::parse`].
    pub fn check(value: &str) -> Result<(), TaskIdError> {
        if value.is_empty() {
            return Err(TaskIdError::Empty);
        }
        match numeric_suffix(value) {
            Some(None) => Err(TaskIdError::UnsafeNumber),
            _ => Ok(()),
        }
    }

    /// The id Troupe allocates for task number `n`: `task-<n>`.
    ///
    /// # Errors
    /// [`TeamError::TaskLimit`] (`TEAM_TASK_LIMIT`) when `n` is 0 or above
    /// [`MAX_SAFE_INTEGER`].
    pub fn numbered(n: u64) -> Result<Self, TeamError> {
        if n == 0 || n > MAX_SAFE_INTEGER {
            return Err(TeamError::TaskLimit {
                message: format!("task number {n} is outside 1..=2^53-1"),
            });
        }
        Ok(Self(format!("task-{n}")))
    }

    /// The number `n` of a `task-<n>` id, or `None` for any other id.
    pub fn number(&self) -> Option<u64> {
        numeric_suffix(&self.0).flatten()
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The number `n` of a `task-<n>` id given as a string (see [`TaskId::number`]).
pub(crate) fn task_number(value: &str) -> Option<u64> {
    numeric_suffix(value).flatten()
}

/// `None` when `value` is not `task-<digits>`; `Some(None)` when it is but the number is not
/// a safe integer; `Some(Some(n))` otherwise.
fn numeric_suffix(value: &str) -> Option<Option<u64>> {
    let digits = value.strip_prefix("task-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(
        digits
            .parse::<u64>()
            .ok()
            .filter(|n| *n <= MAX_SAFE_INTEGER),
    )
}

/// Lets maps keyed by [`TaskId`] be queried with a plain `&str` (the derived `Hash`/`Eq` of
/// the newtype are those of its string).
impl std::borrow::Borrow<str> for TaskId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for TaskId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        TaskId::parse(String::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

/// A task's revision (REFERENCE c.3): starts at 1 and grows by exactly 1 per mutation; the
/// compare-and-set token of `updateTask` (c.11.4). Always in `1..=2^53-1`.
///
/// Wire shape: a JSON integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Revision(u64);

impl Revision {
    /// The revision of a newly created task.
    pub const FIRST: Revision = Revision(1);

    /// Validates `value` (`1..=2^53-1`); `None` otherwise.
    pub fn new(value: u64) -> Option<Self> {
        (1..=MAX_SAFE_INTEGER)
            .contains(&value)
            .then_some(Self(value))
    }

    /// The next revision, or `None` when it would exceed [`MAX_SAFE_INTEGER`].
    pub fn next(self) -> Option<Self> {
        Self::new(self.0 + 1)
    }

    /// The raw value.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl<'de> Deserialize<'de> for Revision {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = u64::deserialize(deserializer)?;
        Revision::new(raw).ok_or_else(|| {
            serde::de::Error::custom(format!("revision {raw} is outside 1..=2^53-1"))
        })
    }
}

/// The prefix of every Team message id (REFERENCE c.1): `team-message-<uuid v4>`.
pub const TEAM_MESSAGE_ID_PREFIX: &str = "team-message-";

/// Builds the Team message id `team-message-<unique>` from a caller-supplied unique part
/// (normally a UUID v4; this crate mints no randomness).
///
/// # Errors
/// [`TeamError::InvalidArgument`] when the resulting id is not a valid [`MessageId`]
/// (`unique` empty or the id longer than 256 bytes).
pub fn team_message_id(unique: &str) -> Result<MessageId, TeamError> {
    if unique.is_empty() {
        return Err(TeamError::InvalidArgument {
            message: "team message id needs a non-empty unique part".to_owned(),
        });
    }
    MessageId::new(format!("{TEAM_MESSAGE_ID_PREFIX}{unique}")).map_err(|e| {
        TeamError::InvalidArgument {
            message: e.to_string(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_names() {
        for ok in ["a", "worker-a", "w2", "a-b-c", &"x".repeat(64)] {
            assert!(MemberName::new(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Lead",
            "lead",
            "-bad",
            "bad-",
            "bad_name",
            "a--b",
            " a",
            &"x".repeat(65),
        ] {
            assert!(MemberName::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn task_ids() {
        assert_eq!(TaskId::parse("task-7").unwrap().number(), Some(7));
        assert_eq!(TaskId::parse("external-task").unwrap().number(), None);
        assert_eq!(TaskId::parse("task-").unwrap().number(), None);
        assert_eq!(TaskId::parse("task-x1").unwrap().number(), None);
        assert_eq!(
            TaskId::parse("task-9007199254740991").unwrap().number(),
            Some(MAX_SAFE_INTEGER)
        );
        assert_eq!(
            TaskId::parse("task-9007199254740992"),
            Err(TaskIdError::UnsafeNumber)
        );
        assert_eq!(
            TaskId::parse("task-99999999999999999999999"),
            Err(TaskIdError::UnsafeNumber)
        );
        assert_eq!(TaskId::parse(""), Err(TaskIdError::Empty));
        assert_eq!(TaskId::numbered(3).unwrap().as_str(), "task-3");
        assert!(TaskId::numbered(0).is_err());
        assert!(TaskId::numbered(MAX_SAFE_INTEGER + 1).is_err());
    }

    #[test]
    fn revisions() {
        assert_eq!(Revision::new(0), None);
        assert_eq!(Revision::FIRST.next().unwrap().get(), 2);
        assert_eq!(Revision::new(MAX_SAFE_INTEGER).unwrap().next(), None);
        assert!(serde_json::from_str::<Revision>("0").is_err());
        assert!(serde_json::from_str::<Revision>("9007199254740992").is_err());
    }

    #[test]
    fn message_ids() {
        assert_eq!(team_message_id("u1").unwrap().as_str(), "team-message-u1");
        assert!(team_message_id("").is_err());
    }
}
