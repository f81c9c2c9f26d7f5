//! Team limits (REFERENCE c.15).

use serde::Serialize;
use serde_json::Value;

use crate::error::TeamError;
use crate::ids::MAX_SAFE_INTEGER;

/// The configurable limits of one Team runtime (REFERENCE c.15). Every field is a positive
/// safe integer (`1..=2^53-1`); [`TeamLimits::validate`] and [`TeamLimits::from_json`]
/// enforce it.
///
/// Wire shape (config file): `{"maxMembers", "maxTasks", "maxPendingMessagesPerMember",
/// "maxMessageBytes", "disposalTimeoutMs"}`, every key optional.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TeamLimits {
    /// Teammate names ever provisioned per Team, failed members included. Default 8.
    pub max_members: u64,
    /// Non-deleted tasks per Team. Default 256.
    pub max_tasks: u64,
    /// Pending (queued − delivered) messages per target. Default 64.
    pub max_pending_messages_per_member: u64,
    /// UTF-8 bytes of the compact JSON of a framed message's content. Default 65 536.
    pub max_message_bytes: u64,
    /// Bound per disposal settlement step, in milliseconds. Default 5 000.
    pub disposal_timeout_ms: u64,
}

impl Default for TeamLimits {
    fn default() -> Self {
        Self {
            max_members: 8,
            max_tasks: 256,
            max_pending_messages_per_member: 64,
            max_message_bytes: 65_536,
            disposal_timeout_ms: 5_000,
        }
    }
}

const NOT_POSITIVE_SAFE: &str = "it must be a positive safe integer (1..=2^53-1)";

/// The configuration keys, in REFERENCE c.15 order.
pub const LIMIT_KEYS: [&str; 5] = [
    "maxMembers",
    "maxTasks",
    "maxPendingMessagesPerMember",
    "maxMessageBytes",
    "disposalTimeoutMs",
];

impl TeamLimits {
    fn fields(&self) -> [(&'static str, u64); 5] {
        [
            (LIMIT_KEYS[0], self.max_members),
            (LIMIT_KEYS[1], self.max_tasks),
            (LIMIT_KEYS[2], self.max_pending_messages_per_member),
            (LIMIT_KEYS[3], self.max_message_bytes),
            (LIMIT_KEYS[4], self.disposal_timeout_ms),
        ]
    }

    fn field_mut(&mut self, key: &str) -> Option<&mut u64> {
        match key {
            "maxMembers" => Some(&mut self.max_members),
            "maxTasks" => Some(&mut self.max_tasks),
            "maxPendingMessagesPerMember" => Some(&mut self.max_pending_messages_per_member),
            "maxMessageBytes" => Some(&mut self.max_message_bytes),
            "disposalTimeoutMs" => Some(&mut self.disposal_timeout_ms),
            _ => None,
        }
    }

    /// Checks that every limit is a positive safe integer.
    ///
    /// # Errors
    /// [`TeamError::InvalidConfig`] (`TEAM_INVALID_CONFIG`) for the first bad field.
    pub fn validate(&self) -> Result<(), TeamError> {
        for (key, value) in self.fields() {
            if value == 0 || value > MAX_SAFE_INTEGER {
                return Err(TeamError::InvalidConfig {
                    key: key.to_owned(),
                    value: value.to_string(),
                    reason: NOT_POSITIVE_SAFE.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// Reads limits from a JSON object: absent keys keep their defaults; each present value
    /// must be a JSON integer in `1..=2^53-1` (so `0`, `1.5` and `9007199254740992` are
    /// refused, CASES 33).
    ///
    /// # Errors
    /// [`TeamError::InvalidConfig`] (`TEAM_INVALID_CONFIG`) when `config` is not an object, a
    /// key is unknown, or a value is not a positive safe integer.
    pub fn from_json(config: &Value) -> Result<Self, TeamError> {
        let Some(object) = config.as_object() else {
            return Err(TeamError::InvalidConfig {
                key: "(root)".to_owned(),
                value: config.to_string(),
                reason: "the configuration must be a JSON object".to_owned(),
            });
        };
        let mut limits = Self::default();
        for (key, value) in object {
            limits.set_json(key, value)?;
        }
        Ok(limits)
    }

    /// Sets one limit from a JSON value (see [`TeamLimits::from_json`] for the rules).
    ///
    /// # Errors
    /// [`TeamError::InvalidConfig`] for an unknown key or a value that is not a positive safe
    /// integer.
    pub fn set_json(&mut self, key: &str, value: &Value) -> Result<(), TeamError> {
        let refused = |reason: &str| TeamError::InvalidConfig {
            key: key.to_owned(),
            value: value.to_string(),
            reason: reason.to_owned(),
        };
        let slot = self.field_mut(key).ok_or_else(|| refused("unknown key"))?;
        let parsed = value
            .as_u64()
            .filter(|v| (1..=MAX_SAFE_INTEGER).contains(v))
            .ok_or_else(|| refused(NOT_POSITIVE_SAFE))?;
        *slot = parsed;
        Ok(())
    }
}
