use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize};

/// The longest accepted [`SessionId`], in bytes.
pub const SESSION_ID_MAX_LEN: usize = 128;

/// Why an identifier was refused by its validating constructor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The session id is empty, longer than [`SESSION_ID_MAX_LEN`] bytes, starts with `.` or
    /// `-`, or contains a character outside `[A-Za-z0-9._-]`. Code `INVALID_SESSION_ID`.
    #[error(
        "invalid session id {0:?}: use 1-128 characters from [A-Za-z0-9._-], not starting with '.' or '-'"
    )]
    InvalidSessionId(String),
    /// A message id that is empty or longer than 256 bytes. Code `INVALID_MESSAGE_ID`.
    #[error("invalid message id {0:?}: use 1-256 bytes")]
    InvalidMessageId(String),
}

impl crate::ErrorCode for IdError {
    fn code(&self) -> &'static str {
        match self {
            IdError::InvalidSessionId(_) => "INVALID_SESSION_ID",
            IdError::InvalidMessageId(_) => "INVALID_MESSAGE_ID",
        }
    }
}

/// A session's identity (REFERENCE a.1): an opaque string, in Troupe a UUID v4 unless the
/// caller chose one.
///
/// Accepted: 1–128 bytes of `[A-Za-z0-9._-]`, not starting with `.` or `-`. The restriction
/// makes every id a safe file name (so the session file is `<id>.jsonl` with no escaping) and
/// a safe command-line argument.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct SessionId(String);

impl SessionId {
    /// Validates `value` as a session id.
    ///
    /// # Errors
    /// [`IdError::InvalidSessionId`] (`INVALID_SESSION_ID`) when the rules above are broken.
    pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
        let value = value.into();
        if Self::is_valid(&value) {
            Ok(Self(value))
        } else {
            Err(IdError::InvalidSessionId(value))
        }
    }

    /// Whether [`SessionId::new`] accepts `value` (without allocating).
    pub fn is_valid(value: &str) -> bool {
        /// The bytes a session id may hold: `[A-Za-z0-9._-]`.
        const ALLOWED: [bool; 256] = {
            let mut table = [false; 256];
            let mut b = 0;
            while b < 256 {
                let c = b as u8;
                table[b] = c.is_ascii_alphanumeric() || c == b'.' || c == b'_' || c == b'-';
                b += 1;
            }
            table
        };
        !value.is_empty()
            && value.len() <= SESSION_ID_MAX_LEN
            && !value.starts_with(['.', '-'])
            && value.bytes().all(|b| ALLOWED[usize::from(b)])
    }

    /// A fresh random id (UUID v4, lowercase hyphenated, 36 bytes).
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    /// Honours width, fill and alignment (`{:<36}`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl FromStr for SessionId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        SessionId::new(raw).map_err(serde::de::Error::custom)
    }
}

/// A 0-based event position in a session log (REFERENCE a.2): `events[i].seq == i`, contiguous,
/// assigned at append as the log length.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Seq(pub u64);

impl Seq {
    /// The first event of every log.
    pub const ZERO: Seq = Seq(0);

    /// The position after this one.
    #[must_use]
    pub fn next(self) -> Seq {
        Seq(self.0 + 1)
    }

    /// The raw value.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Seq {
    /// Honours width, fill and alignment (`{:>6}`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_id_accepts_uuid_and_safe_names() {
        for ok in ["a", "0f8c-x", "lead.1", "A_b-C.d", &"x".repeat(128)] {
            assert!(SessionId::new(ok).is_ok(), "{ok}");
        }
        assert_eq!(SessionId::random().as_str().len(), 36);
    }

    #[test]
    fn session_id_bytes_are_exactly_ascii_alphanumerics_dot_underscore_dash() {
        for b in 0..=255u8 {
            let expected = b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
            let id = format!("a{}", char::from(b));
            assert_eq!(SessionId::is_valid(&id), expected, "byte {b:#04x}");
            assert_eq!(SessionId::new(id).is_ok(), expected, "byte {b:#04x}");
        }
    }

    #[test]
    fn session_id_refuses_unsafe_names() {
        for bad in [
            "",
            ".",
            "..",
            "-x",
            "a/b",
            "a b",
            "é",
            "../etc",
            &"x".repeat(129),
        ] {
            let err = SessionId::new(bad).unwrap_err();
            assert_eq!(crate::ErrorCode::code(&err), "INVALID_SESSION_ID");
        }
    }

    #[test]
    fn display_honours_width() {
        assert_eq!(format!("[{:<4}]", SessionId::new("ab").unwrap()), "[ab  ]");
        assert_eq!(format!("[{:>4}]", Seq(7)), "[   7]");
    }

    #[test]
    fn session_id_deserialize_validates() {
        assert!(serde_json::from_str::<SessionId>("\"ok-id\"").is_ok());
        assert!(serde_json::from_str::<SessionId>("\"../x\"").is_err());
    }
}
