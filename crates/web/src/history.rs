//! The panel's reads of a Team's past (issue 17 items 3–4): the Team timeline and the Team at
//! a past event, each folded from the session files on request (nothing is kept).
//!
//! Both are the CLI's folds: `GET …/team/timeline` is `troupe team log --json` as one object,
//! `GET …/team/show` is `troupe team show --json`, and `…/team/show?at=SEQ` is `troupe team
//! show --json --at SEQ` (the Lead log folded up to event SEQ, the teammates' logs up to its
//! time; [`troupe_runtime::Cut`]).

use std::sync::Arc;

use serde_json::{Value, json};
use troupe_protocol::{ErrorCode, Seq, SessionId};
use troupe_runtime::{At, Cut, LeadLog, LeadLogError, LeadRead, TimeTravelError, read_timeline};

use crate::WebError;
use crate::hub::{Hub, blocking};

fn log_error(error: LeadLogError) -> WebError {
    match error {
        LeadLogError::Journal(troupe_journal::JournalError::NotFound { id, .. }) => {
            WebError::SessionNotFound(id)
        }
        other => WebError::Log {
            code: other.code(),
            message: other.to_string(),
        },
    }
}

/// `{"events":[TimelineEntry…]}`: one entry per Team event of the Lead log of `id`.
///
/// # Errors
/// `SESSION_NOT_FOUND`, `WEB_NOT_A_LEAD`; a log that cannot be read or folded is its own code
/// (`JOURNAL_CORRUPT`, `TEAM_LOG_INVALID`, …; 409).
pub(crate) async fn timeline(hub: &Arc<Hub>, id: SessionId) -> Result<Value, WebError> {
    hub.refuse_child(&id).await?;
    let hub = Arc::clone(hub);
    blocking(move || {
        let (entries, _) = read_timeline(hub.journal(), &id).map_err(log_error)?;
        Ok(json!({ "events": entries }))
    })
    .await
}

/// The object of `troupe team show --json` for the Lead `id`, at `at` (a seq of its log) or
/// of the whole log.
///
/// # Errors
/// `SESSION_NOT_FOUND`, `WEB_NOT_A_LEAD`; `TEAM_AT_OUTSIDE_LOG` (404) for a seq after the
/// last event; a log that cannot be read or folded is its own code (409).
pub(crate) async fn show(
    hub: &Arc<Hub>,
    id: SessionId,
    at: Option<u64>,
) -> Result<Value, WebError> {
    hub.refuse_child(&id).await?;
    let hub = Arc::clone(hub);
    blocking(move || {
        let journal = hub.journal();
        let cut = match at {
            None => None,
            Some(seq) => Some(Cut::resolve(journal, &id, At::Seq(Seq(seq))).map_err(
                |e| match e {
                    outside @ TimeTravelError::OutsideLog { .. } => {
                        WebError::OutsideLog(outside.to_string())
                    }
                    TimeTravelError::Log(e) => log_error(e),
                },
            )?),
        };
        let lead = LeadLog::read_at(journal, &id, LeadRead::TeamAndMail, cut).map_err(log_error)?;
        serde_json::to_value(lead.show_full(journal, false)).map_err(|e| WebError::Io(e.to_string()))
    })
    .await
}
