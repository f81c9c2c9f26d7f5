//! The Team's waiters (REFERENCE c.12, d.4.1): `wait_agent` over the journal's change edges —
//! every durable Team event, every status change of the Lead or a teammate — woken only after
//! the owning flush.

use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use troupe_team::{MemberStatus, TeamError};

use super::journal::{Member, TeamJournal};
use super::lifecycle::Lifecycle;
use super::op::{TeamOpError, WaitOutcome};
use super::roster;
use crate::control::ChildControl;

/// `wait_agent` (REFERENCE c.12, d.4.1): `NoProgress` at once when no other member is running
/// or provisioning; otherwise waits for the next change edge after the call began, the
/// timeout, or the Team's closing (`timedOut: false`).
///
/// # Errors
/// `TEAM_INVALID_TIMEOUT` (`timeout_ms` not an integer in 10000..=3600000),
/// `TEAM_WAIT_ABORTED` when `cancel` fires (also when it already had), `TEAM_NOT_MEMBER`.
pub(super) async fn wait(
    journal: &TeamJournal,
    lifecycle: &Lifecycle,
    control: &dyn ChildControl,
    agent: Member<'_>,
    timeout_ms: u64,
    cancel: &CancellationToken,
) -> Result<WaitOutcome, TeamOpError> {
    if lifecycle.is_closed() {
        return Ok(WaitOutcome::Waited { timed_out: false });
    }
    // Register before looking at statuses, so no edge between the two is missed.
    let mut edges = journal.subscribe();
    let others_active = {
        let state = journal.enter().await;
        journal.caller(&state, agent)?;
        roster::members_for(journal, &state, control, agent)
            .iter()
            .filter(|m| m.id != *agent.id())
            .any(|m| matches!(m.status, MemberStatus::Running | MemberStatus::Provisioning))
    };
    if !others_active {
        return Ok(WaitOutcome::NoProgress);
    }
    tokio::select! {
        _ = edges.changed() => Ok(WaitOutcome::Waited { timed_out: false }),
        () = tokio::time::sleep(Duration::from_millis(timeout_ms)) => {
            Ok(WaitOutcome::Waited { timed_out: true })
        }
        () = lifecycle.closing().cancelled() => Ok(WaitOutcome::Waited { timed_out: false }),
        () = cancel.cancelled() => Err(aborted(agent).into()),
    }
}

/// The timeout of a `wait_agent` call, checked before anything else (REFERENCE c.12): a
/// signal that is already aborted is reported right after it.
///
/// # Errors
/// `TEAM_INVALID_TIMEOUT`, `TEAM_WAIT_ABORTED`.
pub(super) fn admit(
    agent: Member<'_>,
    timeout_ms: &Value,
    cancel: &CancellationToken,
) -> Result<u64, TeamError> {
    let timeout_ms = troupe_team::validate_wait_timeout(timeout_ms)?;
    if cancel.is_cancelled() {
        return Err(aborted(agent));
    }
    Ok(timeout_ms)
}

/// `TEAM_WAIT_ABORTED` with the turn's abort cause.
pub(super) fn aborted(agent: Member<'_>) -> TeamError {
    TeamError::WaitAborted {
        reason: agent
            .abort_cause()
            .map_or_else(|| "the turn was cancelled".to_owned(), |c| inspect(&c)),
    }
}

/// A compact single-line rendering of an abort cause, as `{ kind: 'user' }` (REFERENCE c.12).
fn inspect(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Object(map) => {
            let fields: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}: {}", inspect_inner(v)))
                .collect();
            format!("{{ {} }}", fields.join(", "))
        }
        other => other.to_string(),
    }
}

fn inspect_inner(value: &Value) -> String {
    match value {
        Value::String(s) => format!("'{s}'"),
        other => inspect(other),
    }
}
