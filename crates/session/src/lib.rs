//! Troupe's session model: what a session log's runtime events mean, owned below the runtime
//! so that every reader of a log — the runtime's resume, the `troupe` binary's `log`,
//! `sessions` and `team` commands, the web panel — shares one definition without the model
//! client, the tools or the runtime.
//!
//! - [`events`]: the payloads (`data`) of the runtime's event types (`turn/start`,
//!   `assistant/message`, `tool/call`, `agent/config`, `subagent/descriptor`, …), camelCase.
//! - The plain data those payloads embed: the chat types ([`chat`]: messages, the model's
//!   answers and tool calls, usage, finish reasons, attempts, truncated calls; OpenAI wire
//!   format), the recorded model choice ([`model`]: [`ModelSpec`], never a key), what a tool
//!   call recorded of a file ([`effect`]), the `bash` sandbox policy ([`sandbox`]), the
//!   `AGENTS.md` instructions a session started with ([`instructions`]), and approvals'
//!   policy, requests and decisions ([`approval`]).
//!   `troupe_llm` and `troupe_tools` re-export them and do the work on them (HTTP, parsing the
//!   flags, hashing files, Landlock).
//! - [`changes`]: the files a member actually changed, folded from its log (`ChangeFold`: the
//!   write radar's input).
//! - [`Transcript`]: the fold of one session log into the model history, the pending inbox,
//!   the turn/step state, the recovery closers (REFERENCE a.9) and statistics.
//! - [`ledger`]: the cost ledger (model calls, tokens and cost per member and per Team, folded
//!   from the recorded usage), prices and budgets.
//! - [`SessionRole`] / [`RoleProbe`]: a stored session's role (`lead`, `teammate`, `child`,
//!   `fork`), and [`is_team_session`]: the rules `troupe sessions`, `troupe team` and the web
//!   panel share.
//! - [`InvalidEvent`] (an event the fold refuses) and [`ParseError`] (a name or setting that does
//!   not parse), each with a stable code.
//!
//! # Invariants
//! - Pure: no IO, no clock, no tokio, no HTTP. Its dependencies are `troupe-protocol`, serde and
//!   thiserror, so a log reader (the web panel) never links an HTTP client or the search
//!   crates.
//! - The wire shapes are the log format: every type here serializes exactly as the runtime has
//!   always recorded it (old logs read unchanged: new fields are optional).
//! - The fold is deterministic: the same events give the same [`Transcript`], whether applied
//!   one by one as the live agent appends them or folded from the file on a cold resume.

pub mod approval;
pub mod changes;
pub mod chat;
pub mod effect;
mod error;
pub mod events;
pub mod instructions;
pub mod ledger;
pub mod model;
mod role;
pub mod sandbox;
mod transcript;

pub use error::{InvalidEvent, ParseError};
pub use model::ModelSpec;
pub use role::{RoleProbe, SUBAGENT_ORIGIN, SessionRole, is_team_session};
pub use transcript::{
    CONTINUATION_SOURCE, CallResolution, ContinuationRule, OpenTurn, READ_ONLY_TOOLS, Transcript,
    TranscriptStats, UnansweredCall,
};
