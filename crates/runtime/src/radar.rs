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
use troupe_protocol::{Event, Seq, SessionId, event_types as ty};
use troupe_session::changes::ChangeFold;
use troupe_team::{MemberPhase, TaskSnapshot, TeamState, WriteConflict, WriteRadar};

/// The write conflicts of the Team whose folded state is `state`, from its logs in `journal`
/// (see the module docs). With `cut` (a past point, `troupe team show --at`: the Lead log's
/// last event folded, `None` for none, and the point's time in epoch ms), the Lead's log up to
/// that event and every member's log up to that time ([`Journal::read_until`]: its last whole
/// batch by then), as the receipts are read.
pub fn write_conflicts(
    journal: &Journal,
    state: &TeamState,
    cut: Option<(Option<Seq>, u64)>,
) -> Vec<WriteConflict> {
    let mut radar = WriteRadar::new();
    let lead = state.id().lead_id();
    feed(journal, lead, &mut radar, true, cut);
    for member in state.members() {
        if member.phase == MemberPhase::Active {
            feed(journal, &member.id, &mut radar, false, cut);
        }
    }
    radar.conflicts(state)
}

/// Feeds `id`'s changes (and, for the Lead's log, its task records) into `radar`.
fn feed(
    journal: &Journal,
    id: &SessionId,
    radar: &mut WriteRadar,
    lead: bool,
    cut: Option<(Option<Seq>, u64)>,
) {
    let Ok(header) = journal.header(id) else {
        return;
    };
    let mut fold = ChangeFold::new(header.seed_len());
    let mut apply = |event: &Event| {
        if lead
            && let Some((last_seq, _)) = cut
            && last_seq.is_none_or(|last| event.seq > last)
        {
            return;
        }
        if lead && event.kind == ty::TEAM_TASK {
            if event.data["teamId"].as_str() == Some(id.as_str())
                && let Ok(task) = serde_json::from_value::<TaskSnapshot>(event.data["task"].clone())
            {
                radar.task(event.time, &task);
            }
            return;
        }
        for change in fold.apply(event) {
            match change.since {
                None => radar.exact(id, &change.path, event.time),
                Some(since) => radar.scanned(id, &change.path, since, event.time),
            }
        }
    };
    // A read error ends this log's contribution where it stopped (advisory).
    let _ =
        match cut {
            Some((_, time)) if !lead => journal.read_until(id, time, &mut |e| apply(e)).map(drop),
            _ => {
                let select =
                    |kind: &str| ChangeFold::reads(kind) || (lead && kind == ty::TEAM_TASK);
                journal
                    .read_selected_each(id, LineCheck::Prefix, &select, &mut |selected| {
                        match selected {
                            Selected::Event(event) => {
                                apply(&event);
                                LineUse::Used
                            }
                            Selected::Line(_) => LineUse::NeedEvent,
                        }
                    })
                    .map(drop)
            }
        };
}
