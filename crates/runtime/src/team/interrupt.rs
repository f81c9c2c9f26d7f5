//! `interrupt_agent` across processes (REFERENCE c.13, DESIGN §7, issue 14 item 1): the Lead
//! interrupting a teammate hosted by another process asks the process holding the teammate's
//! lease, which stops the teammate's turn exactly as a local interrupt does — the same
//! `{"kind":"parent"}` cancel keeping the inbox (REFERENCE b.7), so the teammate's log gets
//! the same events — and answers the status it sampled before; the Lead's tool result is the
//! one a local call returns, byte for byte (`{"previousStatus":"running"|"idle"}`).
//!
//! Two halves, transport-free here (the NATS transport is `troupe-store-nats`' `deliver`,
//! subject `troupe.interrupt.<id>`):
//!
//! - **Asking** (`roster::interrupt`): for a target not resident in the serializer's
//!   process, the roster asks its [`MemberHosts::interrupt`](super::hosts::MemberHosts):
//!   the holder's answer is the result; nobody holding the lease is REFERENCE's answer for a
//!   member that is not live (`inactive`, no effect). A holder that stopped answering is
//!   decided once its lease expired from what is known then, never guessed: the teammate
//!   resident in the serializer's process by then (the Team continued it,
//!   `TeamService::watch_elsewhere`) is interrupted there; otherwise its stored log is judged
//!   against the turn that was open when the interrupt was asked for (read before asking):
//!   ended aborted by `{"kind":"parent"}` — the holder's cancel took effect, `running`; still
//!   open or ended otherwise (cut by the host's death and closed by the recovery) — the typed
//!   error `TEAM_HOST_LOST`: the interrupt is not confirmed, and the Team continues the
//!   teammate as after a crash, so the Lead may interrupt it again; no turn open when asked
//!   and none now — `inactive` (nothing runs).
//! - **Accepting** ([`TeamService::accept_interrupt`]): the holder's side, below.
//!
//! **What survives a crash**, at each point of one interrupt (nothing is written by the
//! request itself: the only writes are the interrupted turn's own closing events, appended
//! by the holder's agent as for any cancelled turn, one atomic batch — decision 9):
//! - the holder dies before its cancel: the teammate's log ends in the open turn; the next
//!   host's (or the Team's) recovery closes it as a crash cut and continues it; the Lead gets
//!   `TEAM_HOST_LOST` once the lease expired (the turn open, or closed by the recovery) — or,
//!   when the Team already runs the teammate again here, its local interrupt's answer;
//! - after its cancel, before the closing batch is durable: the same (the batch is whole or
//!   absent);
//! - after the closing batch (`turn/end` aborted `{"kind":"parent"}`), before the answer: the
//!   log shows the turn aborted by `{"kind":"parent"}`; the recovery leaves a turn the Lead
//!   interrupted alone, and the Lead gets `running` (what the holder would have answered)
//!   once the lease expired;
//! - after the answer: nothing is left to do.

use std::time::Duration;

use troupe_protocol::ErrorCode;

use super::hosts::{INTERRUPT_VERSION, InterruptAnswer, InterruptRequest, TEAM_MEMBER_NOT_HOSTED};
use super::service::TeamService;
use crate::agent::AgentStatus;

impl TeamService {
    /// Accepts the Lead's interrupt of a teammate this process hosts (the holder's side, see
    /// the module docs): samples its status (`running` or `idle`), cancels its turn with
    /// cause `{"kind":"parent"}` keeping its inbox — what a local interrupt does — (or
    /// `{"kind":"shutdown"}` for a park's,
    /// [`InterruptCause::Shutdown`](super::hosts::InterruptCause::Shutdown)) and waits
    /// up to `wait_ms` for the turn to close, then answers. The transport has checked that
    /// this process holds the lease the request names.
    ///
    /// Answers `INVALID_ARGUMENTS` for another version, `UNAUTHORIZED` when the resident
    /// agent is not a teammate of `request.team`, `TEAM_MEMBER_NOT_HOSTED` when no agent of
    /// the target is resident (it is starting or settling), the journal's code when the
    /// cancel's flush fails.
    pub async fn accept_interrupt(&self, request: &InterruptRequest) -> InterruptAnswer {
        if request.version != INTERRUPT_VERSION {
            return InterruptAnswer::failed(
                "INVALID_ARGUMENTS",
                format!(
                    "Error: interrupt request version {} (this process speaks \
                     {INTERRUPT_VERSION})",
                    request.version
                ),
            );
        }
        let Some(agent) = self.resident(&request.target) else {
            return InterruptAnswer::failed(
                TEAM_MEMBER_NOT_HOSTED,
                format!(
                    "Error: this process holds the lease of {} but runs no agent of it now",
                    request.target
                ),
            );
        };
        let teammate_of_team = agent.with_transcript(|t| t.descriptor().is_some())
            && agent.writer().header().parent_session.as_ref() == Some(&request.team);
        if !teammate_of_team || request.by != request.team {
            return InterruptAnswer::failed(
                "UNAUTHORIZED",
                format!(
                    "Error: {} may not interrupt {}: not the Lead of its Team",
                    request.by, request.target
                ),
            );
        }
        let previous = match agent.status() {
            AgentStatus::Running => "running",
            AgentStatus::Idle => "idle",
        };
        if let Err(e) = agent.cancel(request.cause.record(), true).await {
            return InterruptAnswer::failed(e.code(), format!("Error: {e}"));
        }
        let bound = Duration::from_millis(request.wait_ms);
        let settled = tokio::time::timeout(bound, agent.wait_idle()).await.is_ok();
        if !settled {
            tracing::warn!(teammate = %request.target, "the interrupted turn did not close in time");
        }
        InterruptAnswer::interrupted(previous, settled)
    }
}
