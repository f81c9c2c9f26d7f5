//! Approvals as a session records them (issue 16, item 2): the policy in `agent/config`
//! (`approval`), the request a member makes (`approval/requested`) and the decision on it
//! (`approval/decided`, in the member's log and in the request's decision log).
//!
//! Plain data with the wire shapes the runtime has always written; deciding, waiting and the
//! decision logs are the runtime's (`troupe_runtime::approval`), which also holds the crash
//! table.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use troupe_protocol::SessionId;

use crate::error::ParseError;

/// The default `--approval-timeout`: 10 minutes.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(600);

/// Whether a session's `bash` may ask the user to run a command outside the sandbox
/// (`--approval never|on-request`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalMode {
    /// Nothing runs outside the sandbox; `escalate: true` is refused with `APPROVAL_DISABLED`.
    /// The default.
    Never,
    /// `bash` accepts `escalate: true` with a `justification`: the user is asked, and the
    /// command runs outside the sandbox once approved.
    OnRequest,
}

impl ApprovalMode {
    /// Parses `never` or `on-request`.
    ///
    /// # Errors
    /// [`ParseError::UnknownApprovalMode`] (`APPROVAL_UNKNOWN_MODE`) for any other text.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        match text {
            "never" => Ok(Self::Never),
            "on-request" => Ok(Self::OnRequest),
            other => Err(ParseError::UnknownApprovalMode(other.to_owned())),
        }
    }

    /// `never` or `on-request`, as typed and recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Never => "never",
            Self::OnRequest => "on-request",
        }
    }
}

impl std::fmt::Display for ApprovalMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A session's approval settings, recorded in its `agent/config` as
/// `"approval": {"mode": "on-request", "timeoutMs": 600000}` (absent: never).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalPolicy {
    /// Whether requests may be made.
    pub mode: ApprovalMode,
    /// How long a request waits for an answer before it is denied (ms; recorded as decided by
    /// `timeout`).
    pub timeout_ms: u64,
}

impl Default for ApprovalPolicy {
    fn default() -> Self {
        Self {
            mode: ApprovalMode::Never,
            timeout_ms: DEFAULT_APPROVAL_TIMEOUT.as_millis() as u64,
        }
    }
}

impl ApprovalPolicy {
    /// The timeout as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

/// What the user decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Run this command outside the sandbox, once.
    Approve,
    /// Do not run it (also: nobody answered in time, or the turn was interrupted).
    Deny,
    /// Run it, and run this exact command outside the sandbox without asking again for the
    /// rest of this member's session (the terminal's `a`).
    Always,
}

impl Decision {
    /// Whether the command runs.
    pub fn approves(self) -> bool {
        matches!(self, Self::Approve | Self::Always)
    }

    /// `approve`, `deny`, `always`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Deny => "deny",
            Self::Always => "always",
        }
    }
}

/// Who (or what) decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecidedBy {
    /// The user at the terminal of `troupe run` / `troupe resume`.
    Terminal,
    /// The user with `troupe approve` (another terminal).
    Cli,
    /// The user in the web panel (`troupe web`).
    Web,
    /// The user in `troupe chat` (its `/approve`).
    Chat,
    /// Nobody answered within the timeout: denied.
    Timeout,
    /// An earlier `always` decision of the same session for the same exact command.
    Always,
    /// The turn was cancelled while the request waited (Ctrl-C, a signal, the Lead): the
    /// request was withdrawn, denied.
    Interrupt,
}

impl DecidedBy {
    /// `terminal`, `cli`, `web`, `chat`, `timeout`, `always`, `interrupt`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Terminal => "terminal",
            Self::Cli => "cli",
            Self::Web => "web",
            Self::Chat => "chat",
            Self::Timeout => "timeout",
            Self::Always => "always",
            Self::Interrupt => "interrupt",
        }
    }

    /// How a message names the decider: `at the terminal`, `with troupe approve`, …
    pub fn described(self) -> &'static str {
        match self {
            Self::Terminal => "by the user at the terminal",
            Self::Cli => "by the user with troupe approve",
            Self::Web => "by the user in the web panel",
            Self::Chat => "by the user in troupe chat",
            Self::Timeout => "because nobody answered in time",
            Self::Always => "by the user's earlier \"always\" for this command",
            Self::Interrupt => "because the turn was interrupted",
        }
    }
}

/// `approval/requested`: a member asks to run `command` outside the sandbox. Wire shape
/// `{"id","callId","command","justification","member"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequested {
    /// The request's id: 8 hex digits, unique within the member's session (what `troupe
    /// approve SESSION ID` names).
    pub id: String,
    /// The `bash` call waiting for it.
    pub call_id: String,
    /// The command, exactly as the call gives it.
    pub command: String,
    /// Why the member says it needs it.
    pub justification: String,
    /// The member's name (`lead`, a teammate's name).
    pub member: String,
}

/// `approval/decided`: the decision on request `id`. Wire shape `{"id","decision","by",
/// "decidedAt","session"?,"rule"?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalDecided {
    /// The request decided.
    pub id: String,
    /// What was decided.
    pub decision: Decision,
    /// Who decided.
    pub by: DecidedBy,
    /// When, epoch ms (the decision log's time: when the decider decided, not when the member
    /// saw it).
    pub decided_at: u64,
    /// The member's session (in a decision log; absent in the member's own log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionId>,
    /// For `by: always`: the request whose `always` decision covers this command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

/// One request of a member's log and its decision there, if any (see
/// [`crate::Transcript::approvals`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalEntry {
    /// The request.
    pub request: ApprovalRequested,
    /// When it was recorded (epoch ms).
    pub requested_at: u64,
    /// Its decision in the member's log.
    pub decided: Option<ApprovalDecided>,
}
