//! The event types this build knows (REFERENCE a.2).
//!
//! A reader meeting a type not in [`KNOWN`] refuses the load unless the event is marked
//! `ignorable`. Every crate that writes a new required event type adds it here first, so an
//! older build refuses (rather than misreads) a log that uses it.

/// A session seeded from another ends its seed with this marker (REFERENCE a.5). Data `{}`.
pub const SESSION_END_SEED: &str = "session/end-seed";
/// A turn begins.
pub const TURN_START: &str = "turn/start";
/// A turn ends. (Under REFERENCE a.9 a completed turn made earlier damage "committed
/// corruption"; DESIGN decision 9 makes all damage but an unfinished final write corruption.)
pub const TURN_END: &str = "turn/end";
/// A model step begins.
pub const STEP_START: &str = "step/start";
/// A model step ends.
pub const STEP_END: &str = "step/end";
/// A user message entered a model step.
pub const USER_MESSAGE: &str = "user/message";
/// The model's complete answer of one step.
pub const ASSISTANT_MESSAGE: &str = "assistant/message";
/// A coalesced piece of a streamed answer.
pub const ASSISTANT_CHUNK: &str = "assistant/chunk";
/// The agent's configuration (model spec without secrets, profile, workspace), recorded once
/// at creation so a resume uses the same settings.
pub const AGENT_CONFIG: &str = "agent/config";
/// One failed attempt of a model call (the attempt is retried or the call fails).
pub const MODEL_ATTEMPT: &str = "model/attempt";
/// A model request was sent (what the model was told, minus secrets).
pub const REQUEST_HEADER: &str = "request/header";
/// A tool call started.
pub const TOOL_CALL: &str = "tool/call";
/// A tool call's result.
pub const TOOL_RESULT: &str = "tool/result";
/// A tool call started a process group (`{turn, step, callId, pgid, startTime}`), so that a
/// restarted runtime can stop it if a crash left it running. Written as `ignorable`: builds
/// that do not know it lose nothing by skipping it.
pub const TOOL_PROCESS: &str = "tool/process";
/// The Team record appended with it (same batch) is the effect of a member's tool call
/// (`{sessionId, callId, tool, result?}`), so recovery can resolve that call from the Lead log
/// (DESIGN decision 10). Written as `ignorable`: builds that do not know it lose only that.
pub const TOOL_EFFECT: &str = "tool/effect";
/// A member asked the user to run one `bash` command outside the sandbox
/// (`{id, callId, command, justification, member}`), appended in the batch of the call's
/// `tool/call`; the call waits for the matching [`APPROVAL_DECIDED`].
pub const APPROVAL_REQUESTED: &str = "approval/requested";
/// The decision on an approval request (`{id, decision, by, decidedAt}`): the command runs
/// outside the sandbox only after an `approve`/`always` decision is durable in the member's
/// log. Also the only event of a decision log (`approval-<member>-<id>`, origin `approval`),
/// whose exclusive creation is how any front end decides.
pub const APPROVAL_DECIDED: &str = "approval/decided";
/// An inbox mutation (REFERENCE a.11).
pub const AGENT_INBOX_SPLICED: &str = "agent/inbox/spliced";
/// A continuable child's descriptor (REFERENCE b.5).
pub const SUBAGENT_DESCRIPTOR: &str = "subagent/descriptor";
/// Team roster record (REFERENCE c.3).
pub const TEAM_MEMBER: &str = "team/member";
/// Team task snapshot (REFERENCE c.3).
pub const TEAM_TASK: &str = "team/task";
/// Team message queued in the Lead log (REFERENCE c.3).
pub const TEAM_MESSAGE_QUEUED: &str = "team/message/queued";
/// Team message acknowledged as delivered (REFERENCE c.3).
pub const TEAM_MESSAGE_DELIVERED: &str = "team/message/delivered";

/// Every event type this build understands.
pub const KNOWN: &[&str] = &[
    SESSION_END_SEED,
    TURN_START,
    TURN_END,
    STEP_START,
    STEP_END,
    USER_MESSAGE,
    ASSISTANT_MESSAGE,
    ASSISTANT_CHUNK,
    REQUEST_HEADER,
    AGENT_CONFIG,
    MODEL_ATTEMPT,
    TOOL_CALL,
    TOOL_RESULT,
    TOOL_PROCESS,
    TOOL_EFFECT,
    APPROVAL_REQUESTED,
    APPROVAL_DECIDED,
    AGENT_INBOX_SPLICED,
    SUBAGENT_DESCRIPTOR,
    TEAM_MEMBER,
    TEAM_TASK,
    TEAM_MESSAGE_QUEUED,
    TEAM_MESSAGE_DELIVERED,
];

/// Whether `kind` is a type this build understands.
pub fn is_known(kind: &str) -> bool {
    KNOWN.contains(&kind)
}

/// Whether `kind` is one of the four durable Team event types (`team/…`).
pub fn is_team(kind: &str) -> bool {
    matches!(
        kind,
        TEAM_MEMBER | TEAM_TASK | TEAM_MESSAGE_QUEUED | TEAM_MESSAGE_DELIVERED
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_and_team_types() {
        assert!(is_known("turn/end"));
        assert!(!is_known("plugin/unknown"));
        assert!(is_team("team/member"));
        assert!(!is_team("turn/start"));
    }
}
