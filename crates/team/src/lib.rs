//! Troupe's pure Team domain (REFERENCE section c; DESIGN §1–§2).
//!
//! All Team state is a fold of the Lead's append-only session log. This crate owns that fold
//! and every rule that decides what may be appended next; the runtime owns the log, the
//! serializer and the IO.
//!
//! - **Identities** ([`TeamId`], [`MemberName`], [`TaskId`], [`Revision`],
//!   [`team_message_id`]) — REFERENCE c.1.
//! - **Durable events** ([`TeamEvent`], [`TeamRecord`], [`MemberSnapshot`], [`TaskSnapshot`],
//!   [`MessageSnapshot`], [`decode`]) — the four `team/…` types of REFERENCE c.3 with exact
//!   field names and `version: 1`, decoded strictly.
//! - **Fold** ([`TeamState`]) — REFERENCE c.4: [`TeamState::apply`] takes one event at a time
//!   and keeps indexes so no read re-folds the log; [`TeamState::apply_line`] applies an
//!   unparsed Lead-log line in one decoding pass and [`StreamFold`] folds a log streamed by a
//!   selective journal scan (the fast path of `troupe team show/verify` and Team attach);
//!   [`TeamState::check_candidate`] is the invariant companion of REFERENCE c.5 (`INVARIANT`).
//! - **Decisions** — given state, caller and command, a typed [`TeamError`] or the exact event
//!   to append: [`TeamState::decide_create_task`], [`TeamState::decide_update_task`] (c.11),
//!   [`TeamState::decide_provision`], [`TeamState::decide_settle_provisioning`] (c.8–c.9),
//!   [`TeamState::decide_send`], [`TeamState::decide_delivered`] (c.10), and a message from
//!   the user through the same mailbox, [`TeamState::decide_user_send`] (a Troupe addition).
//! - **Views** ([`MemberView`], [`TaskView`], [`TeamShow`]) — c.7, c.11.1, DESIGN §6; a task
//!   view's derived `stalled` field ([`StallCheck`], [`TeamState::stall_of`]) — stalled owners,
//!   a Troupe addition (DESIGN decision 7: nothing is released automatically).
//! - **Write radar** ([`WriteRadar`], [`WriteConflict`]) — which files two members changed
//!   within the same window of work (a Troupe addition; advisory, like write scopes).
//! - **Receipts** ([`Receipts`], [`MessageReceipt`]) — each message's life (queued, received,
//!   delivered, consumed), folded from the Lead log and the targets' logs (issue 17 item 3).
//! - **Timeline** ([`TeamState::describe`], [`TimelineEntry`]) — one readable line per Team
//!   event (`troupe team log`, the panel's slider; issue 17 item 4).
//! - **Limits** ([`TeamLimits`]) — c.15. **Errors** — every code of c.16 on [`TeamError`].
//!
//! Invariant: this crate does no IO, reads no clock, spawns nothing and mints no ids; time,
//! ids, live statuses and limits are passed in. The runtime's commit protocol is: decide →
//! [`TeamState::stage`] (the one invariant check) → append the event's draft → flush →
//! [`Staged::apply`].

mod board;
mod content;
mod error;
mod graph;
mod ids;
mod index;
mod limits;
mod line;
mod mailbox;
mod radar;
mod receipts;
mod record;
mod roster;
mod stall;
mod state;
mod text;
mod timeline;
mod view;

pub use board::{CreateTask, TaskAction, UpdateTask};
pub use content::{IMAGE_MEDIA_TYPES, validate_content};
pub use error::{FoldError, INVARIANT_PACKAGE, InvariantError, ReplayError, TeamError};
pub use graph::{GraphViolation, GraphViolationKind};
pub use ids::{
    LEAD_NAME, MAX_SAFE_INTEGER, MEMBER_NAME_MAX_LEN, MemberName, Revision, TEAM_MESSAGE_ID_PREFIX,
    TaskId, TaskIdError, TeamId, team_message_id,
};
pub use limits::{LIMIT_KEYS, TeamLimits};
pub use mailbox::{
    SendMessage, TEAM_MESSAGE_SOURCE_KIND, USER_FRAME_HEADER, USER_SENDER_NAME, UserSend,
    UserSendDecision, WAIT_TIMEOUT_DEFAULT_MS, WAIT_TIMEOUT_MAX_MS, WAIT_TIMEOUT_MIN_MS,
    delivered_user_message, frame_content, frame_header, framed_size, team_message_source,
    validate_wait_timeout,
};
pub use radar::{WriteConflict, WriteRadar};
pub use receipts::{Consumed, LogPoint, MessageReceipt, Receipts};
pub use record::{
    Decoded, Delivery, MemberContext, MemberPhase, MemberProvider, MemberSnapshot, MessageSnapshot,
    TEAM_EVENT_VERSION, TaskSnapshot, TaskStatus, TeamEvent, TeamRecord, decode,
};
pub use roster::{
    ProvisionTeammate, ProvisioningOutcome, RECOVERY_CHILD_MISMATCH,
    RECOVERY_INSPECT_FAILED_PREFIX, RECOVERY_NO_RESUMABLE_CHILD, SettleDecision,
};
pub use stall::{
    OwnerActivity, STALL_AFTER_DEFAULT_MS, Stall, StallAfter, StallCheck, StallReason, stall_notice,
};
pub use state::{Caller, LineApplied, Role, Staged, StreamFold, TeamState};
pub use text::{
    SHORT_TEXT_MAX, TASK_DESCRIPTION_MAX, js_trim, normalize_write_scope, normalize_write_scopes,
    required_text, scopes_overlap, utf16_len,
};
pub use timeline::{AtPoint, TeamShowFull, Timeline, TimelineEntry};
pub use view::{
    LiveAgent, LiveStatus, MemberStatus, MemberView, PendingMessageView, RosterRow, ScopeOverlap,
    ShowOptions, TaskListQuery, TaskPage, TaskView, TeamShow,
};
