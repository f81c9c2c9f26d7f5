//! The panel's reads of a Team's past (issue 17 items 3–4): the Team timeline and the Team at
//! a past event, each folded from the session files on request (nothing is kept).
//!
//! Both give what the CLI prints: `GET …/team/timeline` is `troupe team log --json` as one
//! object, `GET …/team/show` is `troupe team show --json`, and `…/team/show?at=SEQ` is `troupe
//! team show --json --at SEQ` — the Lead log folded up to the end of event SEQ's batch, the
//! teammates' logs up to its time ([`Journal::find_cut`], [`Journal::read_until`]). The folds
//! are the Team crate's ([`TeamState`], [`Receipts`], [`Timeline`]); the panel reads logs
//! through the journal and the session model, never through the runtime, so the few lines that
//! read the files are its own (the runtime's `LeadLog` does the same reads for the CLI; the
//! browser test compares the two at a past event).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Value, json};
use troupe_journal::{At, Journal, JournalError, LineCheck, LineUse, Selected};
use troupe_protocol::{ErrorCode, Event, Seq, SessionId, event_types};
use troupe_session::changes::ChangeFold;
use troupe_session::events::AgentConfigRecord;
use troupe_team::{
    AtPoint, MemberPhase, Receipts, ShowOptions, StreamFold, TaskSnapshot, TeamId, TeamShowFull,
    TeamState, Timeline, WriteRadar,
};

use crate::WebError;
use crate::hub::{Hub, blocking};

fn journal_error(error: JournalError) -> WebError {
    match error {
        JournalError::NotFound { id, .. } => WebError::SessionNotFound(id),
        other => WebError::Log {
            code: other.code(),
            message: other.to_string(),
        },
    }
}

fn fold_error(error: impl ErrorCode + std::fmt::Display) -> WebError {
    WebError::Log {
        code: error.code(),
        message: format!("the Team log cannot be folded: {error}"),
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
        let mut timeline = Timeline::new(TeamId::new(id.clone()));
        hub.journal()
            .read_selected_each(
                &id,
                LineCheck::Prefix,
                &StreamFold::reads,
                &mut |selected| match selected {
                    Selected::Line(_) => LineUse::NeedEvent,
                    Selected::Event(event) => {
                        timeline.event(&event);
                        LineUse::Used
                    }
                },
            )
            .map_err(journal_error)?;
        let entries = timeline.finish().map_err(fold_error)?;
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
        let view = show_blocking(hub.journal(), &id, at)?;
        serde_json::to_value(view).map_err(|e| WebError::Io(e.to_string()))
    })
    .await
}

fn show_blocking(
    journal: &Journal,
    id: &SessionId,
    at: Option<u64>,
) -> Result<TeamShowFull, WebError> {
    let point = match at {
        None => None,
        Some(seq) => {
            let search = journal
                .find_cut(id, At::Seq(Seq(seq)))
                .map_err(journal_error)?;
            let Some(cut) = search.cut else {
                let end = match search.last {
                    Some((last, _)) => format!("its last event is seq {last}"),
                    None => "it has no events".to_owned(),
                };
                return Err(WebError::OutsideLog(format!(
                    "seq {seq} is beyond the log of session {id}: {end}"
                )));
            };
            Some(AtPoint {
                seq: cut.last_seq,
                time: cut.time,
                last_seq: search.last.map(|(seq, _)| seq),
            })
        }
    };
    let beyond = |seq: Seq| point.is_some_and(|p| p.seq.is_none_or(|last| seq > last));
    let until = point.map(|p| p.time);
    let seed = journal.header(id).map_err(journal_error)?.seed_len();
    let team = TeamId::new(id.clone());
    let mut state = TeamState::new(team.clone());
    let mut receipts = Receipts::new(team.clone());
    let mut lead_model: Option<String> = None;
    let mut refused: Option<WebError> = None;
    // The write radar (as `troupe team show`): task windows and the Lead's own changes from
    // its log, each member's changes from its own.
    let mut radar = WriteRadar::new();
    let mut lead_changes = ChangeFold::new(seed);
    let feed =
        |radar: &mut WriteRadar, fold: &mut ChangeFold, member: &SessionId, event: &Event| {
            for change in fold.apply(event) {
                match change.since {
                    None => radar.exact(member, &change.path, event.time),
                    Some(since) => radar.scanned(member, &change.path, since, event.time),
                }
            }
        };
    journal
        .read_each(id, &mut |event| {
            if beyond(event.seq) || refused.is_some() {
                return;
            }
            if event.kind == event_types::AGENT_CONFIG
                && event.seq.0 >= seed
                && let Ok(config) = serde_json::from_value::<AgentConfigRecord>(event.data.clone())
            {
                lead_model = Some(config.model.model);
            }
            if let Err(e) = state.apply(&event) {
                refused = Some(fold_error(troupe_team::ReplayError {
                    seq: event.seq,
                    event_type: event.kind.clone(),
                    source: e,
                }));
                return;
            }
            if event.seq.0 >= seed {
                receipts.apply_lead(&event);
            }
            feed(&mut radar, &mut lead_changes, id, &event);
            if event.kind == event_types::TEAM_TASK
                && let Ok(task) = serde_json::from_value::<TaskSnapshot>(event.data["task"].clone())
            {
                radar.task(event.time, &task);
            }
        })
        .map_err(journal_error)?;
    if let Some(refused) = refused {
        return Err(refused);
    }
    // The other logs, up to the point's time: each message's target (for its receipts) and
    // each active teammate (for a model of its own).
    let read = |member: &SessionId, on_event: &mut dyn FnMut(&Event)| {
        let _ = match until {
            Some(time) => journal.read_until(member, time, on_event).map(drop),
            None => journal.read_each(member, &mut |e| on_event(&e)).map(drop),
        };
    };
    let targets: BTreeSet<&SessionId> = state
        .messages()
        .iter()
        .map(|m| &m.target_id)
        .filter(|t| *t != id)
        .collect();
    for target in targets {
        let Ok(header) = journal.header(target) else {
            continue;
        };
        let seed = header.seed_len();
        read(target, &mut |event| {
            if event.seq.0 >= seed {
                receipts.apply_target(target, event);
            }
        });
    }
    let mut member_models = BTreeMap::new();
    for member in state.members() {
        if member.phase != MemberPhase::Active {
            continue;
        }
        // A fork's seed holds the Lead's configurations; its own come after them.
        let mut latest: Option<AgentConfigRecord> = None;
        let seed = journal.header(&member.id).map_or(0, |h| h.seed_len());
        let mut changes = ChangeFold::new(seed);
        read(&member.id, &mut |event| {
            feed(&mut radar, &mut changes, &member.id, event);
            if event.kind == event_types::AGENT_CONFIG
                && let Ok(config) = serde_json::from_value(event.data.clone())
            {
                latest = Some(config);
            }
        });
        if let Some(config) = latest
            && config.own_model
        {
            member_models.insert(member.id.clone(), config.model.model);
        }
    }
    let mut show = state.show(&ShowOptions {
        include_deleted: false,
        lead_model,
        member_models,
        // Stalls are of the present (who holds a session now, "now" itself): the live view
        // carries them, a read of the log does not.
        stall: None,
    });
    show.write_conflicts = radar.conflicts(&state);
    Ok(TeamShowFull {
        show,
        messages: receipts.list(&state),
        at: point,
    })
}
