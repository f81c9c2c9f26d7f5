//! Payloads of the runtime's event types (camelCase wire shapes, `data` of an [`Event`]).
//!
//! Surface events (`user/message`, `assistant/message`, `tool/result`) enter the model's
//! history; every other runtime event is log-only. The model history is a fold of these
//! events (see [`crate::Transcript`]).
//!
//! Every payload here is what the runtime (`troupe_runtime`) writes and what every reader — the
//! runtime's own resume, `troupe log`, `troupe sessions`, the web panel — decodes; changing a
//! field's wire shape changes the log format.
//!
//! [`Event`]: troupe_protocol::Event

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use troupe_protocol::UserMessage;

use crate::approval::ApprovalPolicy;
use crate::chat::{AssistantMessage, Attempt, FinishReason, TruncatedCall, Usage};
use crate::effect::{ChangedFiles, FileEffect, FileSeen};
use crate::error::ParseError;
use crate::instructions::ProjectInstructions;
use crate::model::ModelSpec;
use crate::sandbox::SandboxPolicy;

/// `turn/start {turn}`: turn numbers increase by one per turn within a log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnStart {
    /// 1-based turn number.
    pub turn: u64,
}

/// Why a turn ended (`turn/end {turn, reason}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum TurnEndReason {
    /// The model answered without tool calls.
    Completed,
    /// The turn was cancelled (`cancel`, an interrupt, Ctrl-C); `reason` is the cause, e.g.
    /// `{"kind":"user"}` or `{"kind":"parent"}`.
    Aborted {
        /// The cancellation cause.
        reason: Value,
    },
    /// A crash interrupted the turn; written by recovery (REFERENCE a.9).
    Interrupted,
    /// The model call failed for good (after retries).
    Failed {
        /// The stable error code, e.g. `LLM_AUTH`.
        code: String,
        /// The one-line message.
        message: String,
    },
}

/// `turn/end {turn, reason}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnEnd {
    /// The turn that ended.
    pub turn: u64,
    /// Why.
    pub reason: TurnEndReason,
}

/// `step/start {turn, step}` and `step/end {turn, step}`; steps are 1-based within a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepMark {
    /// The turn.
    pub turn: u64,
    /// 1-based step number within the turn.
    pub step: u64,
}

/// `request/header`: a model request was sent. The messages themselves are the fold of the
/// log up to here, so only their count is recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestHeader {
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The provider's label, e.g. `deepseek:deepseek-chat` (never a key).
    pub model: String,
    /// Number of messages sent (system prompt included).
    pub messages: usize,
    /// Names of the tools offered.
    pub tools: Vec<String>,
}

/// `assistant/chunk`: a coalesced piece of a streamed answer (for live progress; the
/// authoritative content is the `assistant/message` that follows).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantChunk {
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// `text`, `reasoning` or `toolCall`.
    pub block: String,
    /// For `toolCall` blocks: the index of the tool call whose argument text this is (each
    /// call is coalesced separately, so a chunk never mixes two calls' arguments).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    /// The coalesced text.
    pub delta: String,
}

/// `assistant/message`: the model's whole answer of one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssistantRecord {
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The message as sent back to the model in later requests.
    pub message: AssistantMessage,
    /// Token counts as the server reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Why the model stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// The tool calls the output token limit cut while their arguments were being written
    /// (`finish_reason: length`), with their argument text exactly as it arrived. Each one is
    /// also in `message.tool_calls`, at its `position`, with `{}` as its arguments (what later
    /// requests send: servers may refuse invalid JSON there), is answered by a
    /// `TOOL_ARGUMENTS_TRUNCATED` tool result and never runs. Absent (empty) otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub truncated_calls: Vec<TruncatedCall>,
}

/// `model/attempt`: one failed attempt of a model call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelAttemptRecord {
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The attempt as the client reported it.
    pub attempt: Attempt,
}

/// `tool/call`: a tool call is about to run (flushed before it runs, so a crash during the
/// call is known to have started it).
///
/// A `write`/`edit` call carries its [`FileEffect`] (DESIGN decision 10): the file's pre-image
/// and intended post-image hashes, decided before the file is touched, so recovery can tell
/// from the file whether the call took effect. A call whose planning already failed is
/// recorded without one, in the same batch as its `tool/result` (it never touched the file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRecord {
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The model's call id.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The arguments.
    pub arguments: Value,
    /// What a `write`/`edit` call will do to its file (absent for other tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<FileEffect>,
}

/// `tool/effect` (ignorable), in the Lead log: the Team record appended right after it, in the
/// same batch, is the effect of tool call `callId` of session `sessionId` (DESIGN decision 10).
/// Recovery resolves a Team tool call a crash cut from it: with a link, the call is done and
/// its result is rebuilt (`result`, when recorded, is the exact text the call returned); with
/// none, the call changed nothing and is asked again.
///
/// Wire shape: `{"sessionId","callId","tool","result"?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolEffectRecord {
    /// The calling member's session.
    pub session_id: troupe_protocol::SessionId,
    /// The model's call id.
    pub call_id: String,
    /// The tool (e.g. `team_task_create`).
    pub tool: String,
    /// The call's result text, when it is known when the record is appended (task creations
    /// and updates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

/// `tool/process`: a tool call started a process group (written as soon as it started, and
/// flushed promptly). If a crash leaves the call unanswered, recovery stops the group when it
/// still runs — recognized by its leader's start time, so a reused pid is never signalled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolProcessRecord {
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The call that started the group.
    pub call_id: String,
    /// The process group id (the leader's pid).
    pub pgid: i32,
    /// The leader's start time (field 22 of `/proc/<pid>/stat`, clock ticks since boot).
    pub start_time: u64,
}

/// `tool/result`: a tool call's result as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultRecord {
    /// The turn.
    pub turn: u64,
    /// The step.
    pub step: u64,
    /// The call answered.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// Whether the result is an error.
    pub is_error: bool,
    /// The stable error code when `is_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The compact JSON text sent to the model.
    pub content: String,
    /// For synthetic results: a deterministic message id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// For synthetic results: the events this one answers (the `tool/call` seq).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_event_seqs: Vec<u64>,
    /// What a `read` saw of its file (`{path, image}`, see [`FileSeen`]): a
    /// restarted agent's file observations are rebuilt from it (absent in older logs and for
    /// every other call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen: Option<FileSeen>,
    /// For a `bash` call that ran: the workspace files it changed, found by comparing the
    /// workspace before and after the command ([`ChangedFiles`], bounded in cost; the write
    /// radar's input, `crate::changes`). Recorded in this same event, so it is exactly as
    /// durable as the result: a command a crash cut has no result and records no change.
    /// Absent for every other call and in older logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<ChangedFiles>,
}

/// Which inbox list a splice changes (REFERENCE b.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InboxTarget {
    /// Follow-ups: one per turn, claimed when a turn opens.
    NextTurn,
    /// Steered and injected items: all claimed at each step.
    NextStep,
}

/// `agent/inbox/spliced`: every inbox mutation, with array-splice semantics (REFERENCE a.11).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InboxSplice {
    /// The list changed.
    pub target: InboxTarget,
    /// Index of the first removed/inserted item.
    pub start: usize,
    /// Number of items removed at `start`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub removed_count: usize,
    /// Items inserted at `start`.
    #[serde(default)]
    pub inserted: Vec<UserMessage>,
    /// `canceled` when the removal discarded items (an explicit clear), absent for claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Which tools and policy an agent runs with (DESIGN decision 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Profile {
    /// Core tools plus `subagent` and `subagent_fork`.
    Default,
    /// Core tools plus the Team tools and policy.
    Team,
}

/// `agent/config`: recorded once in an agent's own suffix so a resume uses the same settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentConfigRecord {
    /// The agent's name (`lead` for a root; a child's label) — also the scripted provider's
    /// agent key.
    pub name: String,
    /// The model, without any secret: the one the agent runs with when the config was
    /// recorded.
    pub model: ModelSpec,
    /// Whether `model` is the agent's own, chosen for it at its creation (a teammate model:
    /// `--teammate-model`, `[team] teammate_model`, `[team.models]`), and so kept whatever the
    /// session's model becomes. When false (absent), the agent runs the session's model —
    /// the Lead's, which a resume's `--model` changes for every such member — and `model` only
    /// says what that was when the config was recorded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub own_model: bool,
    /// A Team root's choice of models for the teammates it creates
    /// ([`TeammateModels`]); absent when every teammate runs the session's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub teammate_models: Option<TeammateModels>,
    /// The `AGENTS.md` instructions the session started with, in the agent's system prompt
    /// (a child copies its parent's; see [`crate::instructions`]). Absent when there were
    /// none or they were turned off (`--no-project-instructions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_instructions: Option<ProjectInstructions>,
    /// The tool profile.
    pub profile: Profile,
    /// The workspace directory (absolute).
    pub workspace: String,
    /// Delegation depth: 0 for a root, parent + 1 for a child.
    pub depth: u32,
    /// A Team root's limits (REFERENCE c.15) as `{"maxMembers",…}`, so a resume keeps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_limits: Option<serde_json::Value>,
    /// The sandbox of the agent's `bash` processes, e.g. `{"filesystem": "workspace-write",
    /// "network": "on"}`. Absent in logs written before the sandbox existed: those agents ran
    /// unconfined, so absent reads as [`SandboxPolicy::OFF`] ([`Self::sandbox_policy`]) and a
    /// resume does not suddenly confine a running workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxPolicy>,
    /// The agent's temporary directory (its `bash` gets it as `TMPDIR`; writable in every
    /// sandbox mode). Absent in older logs: then `troupe_tools::session_temp_dir` of the
    /// session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp_dir: Option<String>,
    /// A root's MCP servers, in the recorded form of `troupe_mcp::McpServers::to_record`
    /// (`{"<name>": {"command", "args"?, "env"?, "enabledTools"?, "startupTimeoutMs",
    /// "toolTimeoutMs"}}`), so a resume starts the same servers. Absent: none (and in every
    /// child's config: the servers are the process's, shared by every member).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<serde_json::Value>,
    /// The session's approvals (`--approval`, `--approval-timeout`), e.g. `{"mode":
    /// "on-request", "timeoutMs": 600000}`; a child records its parent's. Absent in logs
    /// written before approvals existed: [`ApprovalPolicy::default`] (never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalPolicy>,
    /// A Team root run with `--worktree` (issue 17 item 6): the absolute directory under
    /// which each teammate it creates gets its own git worktree (`<root>/<team-id>/<name>`);
    /// a resume keeps it. Absent (every other session): teammates share the Lead's checkout,
    /// as REFERENCE g.1 says. A teammate's own worktree is its `workspace`, and its Team
    /// record names it (`team/member`'s `worktree`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree_root: Option<String>,
    /// A Team root's `--placement` (DESIGN §7 "Workers and placement"): where its woken
    /// teammates run. Recorded as `"workers"` in the root's first config (the batch that
    /// creates the session) when the run chose workers, so a resume without `--placement`
    /// places them as the run did; absent (every other session, and logs written before it
    /// existed): [`Placement::Local`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
}

/// Where a Team root's woken teammates run (`--placement`, DESIGN §7): wire form `"local"`,
/// `"workers"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// In the Lead's process (the default).
    #[default]
    Local,
    /// On live `troupe worker`s of the NATS store.
    Workers,
}

/// Which model each teammate a Team root creates runs with: `byName` for the member with
/// that name, else `default`, else (neither) the session's model. Chosen once, when the
/// teammate is created, and recorded in its own `agent/config` as its own model.
///
/// Wire shape: `{"default"?: ModelSpec, "byName"?: {"<member name>": ModelSpec}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TeammateModels {
    /// The model of every teammate without an entry in `by_name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<ModelSpec>,
    /// Models by member name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_name: BTreeMap<String, ModelSpec>,
}

impl TeammateModels {
    /// The model a teammate named `name` gets: its `by_name` entry, else `default`; `None`
    /// when it runs the session's model.
    pub fn for_member(&self, name: &str) -> Option<&ModelSpec> {
        self.by_name.get(name).or(self.default.as_ref())
    }

    /// Whether no teammate gets a model of its own.
    pub fn is_empty(&self) -> bool {
        self.default.is_none() && self.by_name.is_empty()
    }

    /// Every model named, `default` first, then by name.
    pub fn specs(&self) -> impl Iterator<Item = &ModelSpec> {
        self.default.iter().chain(self.by_name.values())
    }
}

impl AgentConfigRecord {
    /// The recorded sandbox; [`SandboxPolicy::OFF`] for a config recorded before the sandbox
    /// existed.
    pub fn sandbox_policy(&self) -> SandboxPolicy {
        self.sandbox.unwrap_or(SandboxPolicy::OFF)
    }

    /// The recorded approvals; [`ApprovalPolicy::default`] (never) when none was recorded.
    pub fn approval_policy(&self) -> ApprovalPolicy {
        self.approval.unwrap_or_default()
    }
}

/// `subagent/descriptor` (REFERENCE b.5): written in a continuable child's log before its first
/// turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Descriptor {
    /// Always 2.
    pub version: u32,
    /// `continuable` for children that can be followed up and resumed; `one-shot` for a
    /// `subagent` tool call's child.
    pub mode: DescriptorMode,
    /// The provider that created the child: `spawn` (fresh) or `fork`.
    pub provider: ChildProvider,
    /// The child's label (its name).
    pub label: String,
    /// The model provider kind the child runs with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_provider: Option<String>,
    /// The model name the child runs with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_model: Option<String>,
}

/// A child's mode in its [`Descriptor`] (REFERENCE b.5). Wire: `"continuable"` | `"one-shot"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DescriptorMode {
    /// A continuable child: followed up, resumed cold, settled when idle (REFERENCE b.3–b.8).
    Continuable,
    /// A `subagent` tool call's child, whose caller awaits its answer.
    OneShot,
}

impl DescriptorMode {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DescriptorMode::Continuable => "continuable",
            DescriptorMode::OneShot => "one-shot",
        }
    }
}

/// Which provider creates a child (REFERENCE b.4). Wire (in a [`Descriptor`]): `"spawn"` |
/// `"fork"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChildProvider {
    /// `spawn`: a fresh child that sees none of the parent's history.
    Spawn,
    /// `fork`: a child seeded with the parent's completed-turn prefix, captured once.
    Fork,
}

impl ChildProvider {
    /// Parses `spawn` / `fork`.
    ///
    /// # Errors
    /// [`ParseError::UnknownProvider`] (`UNKNOWN_PROVIDER`) for any other name.
    pub fn parse(name: &str) -> Result<Self, ParseError> {
        match name {
            "spawn" => Ok(Self::Spawn),
            "fork" => Ok(Self::Fork),
            other => Err(ParseError::UnknownProvider(other.to_owned())),
        }
    }

    /// The provider's name as recorded in the descriptor (and in a Team member's snapshot).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Spawn => "spawn",
            Self::Fork => "fork",
        }
    }
}
