use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A message's identity (REFERENCE a.11): minted when the message is created and preserved
/// through inbox, history and requests. Any non-empty string up to 256 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct MessageId(String);

impl MessageId {
    /// Validates `value` (non-empty, at most 256 bytes).
    ///
    /// # Errors
    /// [`crate::IdError::InvalidMessageId`] (`INVALID_MESSAGE_ID`).
    pub fn new(value: impl Into<String>) -> Result<Self, crate::IdError> {
        let value = value.into();
        if Self::is_valid(&value) {
            Ok(Self(value))
        } else {
            Err(crate::IdError::InvalidMessageId(value))
        }
    }

    /// Whether [`MessageId::new`] accepts `value` (without allocating).
    pub fn is_valid(value: &str) -> bool {
        !value.is_empty() && value.len() <= 256
    }

    /// A fresh random id (UUID v4).
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MessageId {
    /// Honours width, fill and alignment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl<'de> Deserialize<'de> for MessageId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        MessageId::new(String::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

/// Where a [`UserMessage`] came from (REFERENCE a.11): an open sum keyed by `kind` (`user`,
/// `subagent-settled`, `team-message`, `resume`, …) with kind-specific fields kept verbatim.
/// A source is recorded on the message and grants no authority.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageSource {
    /// The source kind.
    pub kind: String,
    /// Kind-specific fields (camelCase), kept as they are.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl MessageSource {
    /// A source of kind `kind` with no extra fields.
    pub fn kind(kind: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            extra: Map::new(),
        }
    }

    /// Adds one extra field.
    #[must_use]
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.extra.insert(key.into(), value.into());
        self
    }
}

/// A message addressed to an agent (REFERENCE a.11): what inbox items and `user/message`
/// events hold.
///
/// Wire shape: `{"id":"…","role":"user","content":[{"type":"text","text":"…"},…],
/// "source":{"kind":"…",…}}`. Content blocks of other types (plugins) are kept verbatim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    /// The message id.
    pub id: MessageId,
    /// Always `"user"`.
    pub role: String,
    /// Content blocks; `{"type":"text","text":…}` is the one every model understands.
    pub content: Vec<Value>,
    /// Where it came from.
    pub source: MessageSource,
}

impl UserMessage {
    /// A one-block text message with a fresh random id.
    pub fn text(text: impl Into<String>, source: MessageSource) -> Self {
        Self::text_with_id(MessageId::random(), text, source)
    }

    /// A one-block text message with the given id.
    pub fn text_with_id(id: MessageId, text: impl Into<String>, source: MessageSource) -> Self {
        Self {
            id,
            role: "user".to_owned(),
            content: vec![serde_json::json!({"type": "text", "text": text.into()})],
            source,
        }
    }

    /// The text of every `text` block, joined by blank lines (what a chat model is sent).
    pub fn text_content(&self) -> String {
        let parts: Vec<&str> = self
            .content
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect();
        parts.join("\n\n")
    }
}
