//! The Team service (REFERENCE c.2–c.14, DESIGN decisions 1–7): the runtime side of
//! `troupe-team`.
//!
//! [`TeamService`] is the façade: the registry of live Teams (one [`Team`] per live Lead),
//! membership resolution, the one entry point [`TeamService::call`] (a [`TeamOp`] in, a
//! [`TeamReply`] out — the ten tools' path), and the order of attach, recovery and disposal.
//! It drives children only through the runtime's narrow [`crate::ChildControl`]. Each kind of
//! state has one owner, one file each:
//!
//! - `journal.rs` — the serializer (DESIGN decision 5) and the one commit path: *decide →
//!   check once → append → flush → apply → publish*; the fold of a stored Lead log.
//! - `roster.rs` — membership views, provisioning (c.8), interruption (c.13), roster
//!   reconciliation (c.9, with the one teammate rule of `crate::teammate`) and the
//!   continuation of teammates.
//! - `mailbox.rs` — durable enqueue, per-target FIFO dispatch, de-duplication and
//!   acknowledgement (c.10, decision 1), and mailbox recovery.
//! - `board.rs` — task create / update / get / list (c.11); `stall.rs` — the inputs of the
//!   derived `stalled` field of the reads and the Lead's one-time `stallNotice`.
//! - `waiters.rs` — `wait_agent` over the change edges (c.12).
//! - `lifecycle.rs` — the admission cutoff and the bounded settlement of work in flight
//!   (c.14).
//! - `op.rs` — the request, reply and error types; `schema.rs` — the ten tools
//!   ([`TeamToolName`]) and their schemas (d.3–d.4); `output.rs` — their rendered results
//!   (the texts recovery rebuilds too); `tools.rs` — the tools themselves.
//! - `remote.rs` — the Team service across processes: [`TeamService::serve_remote`] (a
//!   teammate hosted elsewhere calls through this serializer) and [`RemoteTeam`] (the ten
//!   tools of such a teammate, through a [`TeamLink`]).
//! - `delivery.rs` — Team mail across processes: a teammate hosted elsewhere gets its mail
//!   through the holder of its lease ([`TeamService::accept_delivery`]); `hosts.rs` — its
//!   shapes, the [`MemberHosts`] seam and the serializer's unhosted append (imported by the
//!   mailbox, the roster and the service, it imports none of them).
//! - `interrupt.rs` — `interrupt_agent` across processes: the holder of a teammate's lease
//!   stops its turn as a local interrupt does ([`TeamService::accept_interrupt`]), asked
//!   through [`MemberHosts::interrupt`].
//! - `leftover.rs` — what a crash left a stopped Team to do ([`crash_left_work`]), read from
//!   its logs: what `troupe worker --adopt` asks of a Team whose Lead finished its own turn.
//! - `status.rs` — status across processes: the status edges of members hosted elsewhere
//!   ([`StatusEdge`], [`TeamService::status_edge`]) for `list_agents` and `wait_agent`.

mod board;
mod delivery;
mod hosts;
mod in_flight;
mod interrupt;
mod journal;
mod leftover;
mod lifecycle;
mod mailbox;
mod op;
pub(crate) mod output;
#[cfg(test)]
mod radar_tests;
mod remote;
mod roster;
pub(crate) mod schema;
mod service;
mod stall;
mod status;
mod tools;
mod waiters;

pub use hosts::{
    DELIVER_VERSION, DeliverAnswer, DeliverRequest, Handoff, HandoffFuture, INTERRUPT_VERSION,
    InterruptAnswer, InterruptCause, InterruptFuture, InterruptHandoff, InterruptRequest,
    MemberHosts, PlaceFuture, TEAM_MEMBER_NOT_HOSTED,
};
pub use journal::{feed_stream_fold, fold_team_log};
pub use leftover::crash_left_work;
pub use op::{
    CallOrigin, ListedMember, LogError, NO_PROGRESS_MESSAGE, OpContext, TeamOp, TeamOpError,
    TeamReply, WaitOutcome,
};
pub use remote::{
    CallerLease, CallerLive, CallerStatus, LinkFuture, LiveSource, RemoteTeam, TEAM_CALL_VERSION,
    TEAM_LEAD_MOVED, TEAM_NOT_AUTHORIZED, TeamCallAnswer, TeamCallRequest, TeamLink, TeamLinkError,
};
pub use schema::{TEAM_TOOL_NAMES, TeamToolName, listed_member_schema};
pub use service::{Team, TeamService};
pub use status::{STATUS_VERSION, StatusEdge};
pub(crate) use tools::team_tools;
