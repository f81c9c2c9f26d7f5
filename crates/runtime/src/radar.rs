//! The write radar over stored logs (`troupe_team::WriteRadar`): the Lead log's task
//! records (each task's windows of work, by event time) and every member's own file changes
//! (`troupe_session::changes::ChangeFold`: `write`/`edit` exactly, `bash` by its recorded
//! before/after comparison), read from the journal without locks. Used by `troupe team
//! show` ([`LeadLog::write_conflicts`](crate::LeadLog::write_conflicts)) and by every
//! `team_task_list` result (`writeConflicts`). Pure reads: nothing here writes.
//!
//! Cost: one selective read (`tool/call`, `tool/result`, `team/task` lines) of the Lead's log
//! and of every member's, O(their length) per call, like REFERENCE g.9's re-fold of the Lead
//! log. Advisory: a log that cannot be read (a failed provisioning never made one) adds no
//! change; nothing is refused.

use troupe_journal::{Journal, LineCheck, LineUse, Selected};
use troupe_protocol::{SessionId, event_types as ty};
use troupe_session::changes::ChangeFold;
use troupe_team::{TaskSnapshot, TeamState, WriteConflict, WriteRadar};

/// The write conflicts of the Team whose folded state is `state`, from its logs in `journal`
/// (see the module docs).
pub fn write_conflicts(journal: &Journal, state: &TeamState) -> Vec<WriteConflict> {
    let mut radar = WriteRadar::new();
    let lead = state.id().lead_id();
    feed(journal, lead, &mut radar, true);
    for member in state.members() {
        feed(journal, &member.id, &mut radar, false);
    }
    radar.conflicts(state)
}

/// Feeds `id`'s changes (and, for the Lead's log, its task records) into `radar`.
fn feed(journal: &Journal, id: &SessionId, radar: &mut WriteRadar, lead: bool) {
    let Ok(header) = journal.header(id) else {
        return;
    };
    let mut fold = ChangeFold::new(header.seed_len());
    let select = |kind: &str| ChangeFold::reads(kind) || (lead && kind == ty::TEAM_TASK);
    // A read error ends this log's contribution where it stopped (advisory).
    let _ = journal.read_selected_each(id, LineCheck::Prefix, &select, &mut |selected| {
        let Selected::Event(event) = selected else {
            return LineUse::NeedEvent;
        };
        if event.kind == ty::TEAM_TASK {
            if event.data["teamId"].as_str() == Some(id.as_str())
                && let Ok(task) = serde_json::from_value::<TaskSnapshot>(event.data["task"].clone())
            {
                radar.task(event.time, &task);
            }
            return LineUse::Used;
        }
        for change in fold.apply(&event) {
            match change.since {
                None => radar.exact(id, &change.path, event.time),
                Some(since) => radar.scanned(id, &change.path, since, event.time),
            }
        }
        LineUse::Used
    });
}
