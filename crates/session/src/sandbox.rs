//! The sandbox of an agent's `bash` processes as a session records it (`agent/config`'s
//! `sandbox`): a file-system mode and network access.
//!
//! Plain data and its order (strict to loose), so a resume or a new teammate can be checked to
//! be confined at least as strictly as recorded. Enforcing it (the Landlock ruleset, the probe
//! of the kernel) is the tools' (`troupe_tools::sandbox`).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::ParseError;

/// What the file system looks like to a `bash` command (`--sandbox MODE`).
///
/// Ordered from the strictest to the loosest: `read-only` < `workspace-write` < `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Nothing writable but the session's temporary directory and the null-like devices.
    ReadOnly,
    /// Read everywhere; write only beneath the workspace, the session's temporary directory
    /// and the null-like devices. The default.
    WorkspaceWrite,
    /// No file-system rules: the command has the process's own rights.
    Off,
}

impl SandboxMode {
    /// Every mode, strictest first.
    pub const ALL: [SandboxMode; 3] = [Self::ReadOnly, Self::WorkspaceWrite, Self::Off];

    /// Parses `read-only`, `workspace-write` or `off`.
    ///
    /// # Errors
    /// [`ParseError::UnknownSandboxSetting`] (`SANDBOX_UNKNOWN_MODE`) for any other text.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        Self::ALL
            .into_iter()
            .find(|mode| mode.as_str() == text)
            .ok_or_else(|| ParseError::UnknownSandboxSetting {
                given: text.to_owned(),
                allowed: "read-only, workspace-write, off",
            })
    }

    /// The mode as typed and recorded: `read-only`, `workspace-write`, `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::WorkspaceWrite => "workspace-write",
            Self::Off => "off",
        }
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// Whether a `bash` command may open TCP connections or listen (`--network on|off`).
///
/// Ordered from the strictest to the loosest: `off` < `on`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkAccess {
    /// TCP `connect` and `bind` are denied on every port.
    Off,
    /// No network rules. The default.
    On,
}

impl NetworkAccess {
    /// Parses `on` or `off`.
    ///
    /// # Errors
    /// [`ParseError::UnknownSandboxSetting`] (`SANDBOX_UNKNOWN_MODE`) for any other text.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        match text {
            "on" => Ok(Self::On),
            "off" => Ok(Self::Off),
            other => Err(ParseError::UnknownSandboxSetting {
                given: other.to_owned(),
                allowed: "on, off",
            }),
        }
    }

    /// `on` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::On => "on",
            Self::Off => "off",
        }
    }
}

impl fmt::Display for NetworkAccess {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// The confinement of every `bash` process of one agent: a file-system mode and network
/// access. Recorded per session as `{"filesystem": "workspace-write", "network": "on"}`.
///
/// `Default` is `workspace-write` with the network on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxPolicy {
    /// The file-system mode.
    pub filesystem: SandboxMode,
    /// Network access.
    pub network: NetworkAccess,
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        Self {
            filesystem: SandboxMode::WorkspaceWrite,
            network: NetworkAccess::On,
        }
    }
}

impl SandboxPolicy {
    /// No confinement at all (`--sandbox off --network on`): what sessions recorded before
    /// the sandbox existed ran with.
    pub const OFF: Self = Self {
        filesystem: SandboxMode::Off,
        network: NetworkAccess::On,
    };

    /// Whether any rule applies (anything but [`SandboxPolicy::OFF`]).
    pub fn confines(&self) -> bool {
        self.filesystem != SandboxMode::Off || self.network == NetworkAccess::Off
    }

    /// Whether `self` allows nothing that `other` denies: each part is as strict or stricter.
    pub fn is_within(&self, other: &SandboxPolicy) -> bool {
        self.filesystem <= other.filesystem && self.network <= other.network
    }

    /// The strictest combination of both: each part the stricter of the two.
    #[must_use]
    pub fn meet(self, other: SandboxPolicy) -> Self {
        Self {
            filesystem: self.filesystem.min(other.filesystem),
            network: self.network.min(other.network),
        }
    }

    /// The Landlock ABI this kernel must offer: 3 for file-system rules (truncation is only
    /// controlled from ABI 3 on), 4 for network rules, 0 when nothing is confined.
    pub fn required_abi(&self) -> i32 {
        if self.network == NetworkAccess::Off {
            4
        } else if self.filesystem != SandboxMode::Off {
            3
        } else {
            0
        }
    }
}

impl fmt::Display for SandboxPolicy {
    /// `workspace-write, network on`.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}, network {}", self.filesystem, self.network)
    }
}

#[cfg(test)]
mod tests {
    use troupe_protocol::ErrorCode;

    use super::*;

    #[test]
    fn modes_parse_print_and_order_from_strict_to_loose() {
        for mode in SandboxMode::ALL {
            assert_eq!(SandboxMode::parse(mode.as_str()).ok(), Some(mode));
        }
        assert!(SandboxMode::ReadOnly < SandboxMode::WorkspaceWrite);
        assert!(SandboxMode::WorkspaceWrite < SandboxMode::Off);
        assert!(NetworkAccess::Off < NetworkAccess::On);
        let error = SandboxMode::parse("strict").err();
        assert_eq!(
            error.as_ref().map(ErrorCode::code),
            Some("SANDBOX_UNKNOWN_MODE")
        );
        assert!(NetworkAccess::parse("maybe").is_err());
        assert_eq!(NetworkAccess::parse("off").ok(), Some(NetworkAccess::Off));
    }

    #[test]
    fn within_and_meet_follow_each_part() {
        let default = SandboxPolicy::default();
        let read_only = SandboxPolicy {
            filesystem: SandboxMode::ReadOnly,
            network: NetworkAccess::On,
        };
        let offline = SandboxPolicy {
            filesystem: SandboxMode::Off,
            network: NetworkAccess::Off,
        };
        assert!(read_only.is_within(&default));
        assert!(default.is_within(&SandboxPolicy::OFF));
        assert!(!SandboxPolicy::OFF.is_within(&default));
        // Neither is within the other: one is stricter on files, the other on the network.
        assert!(!offline.is_within(&default) && !default.is_within(&offline));
        assert_eq!(
            default.meet(offline),
            SandboxPolicy {
                filesystem: SandboxMode::WorkspaceWrite,
                network: NetworkAccess::Off,
            }
        );
        assert!(!SandboxPolicy::OFF.confines());
        assert!(offline.confines() && read_only.confines());
        assert_eq!(
            serde_json::to_value(default).ok(),
            Some(serde_json::json!({"filesystem": "workspace-write", "network": "on"}))
        );
    }
}
