//! The write radar over stored logs (`troupe_team::WriteRadar`): the Lead log's task
//! records (each task's windows of work, by event time) and every member's own file changes
//! (`troupe_session::changes::ChangeFold`: `write`/`edit` exactly, `bash` by its recorded
//! before/after comparison), read from the journal without locks. Used by `troupe team
//! show` ([`LeadLog::write_conflicts`](crate::LeadLog::write_conflicts)) and by every
//! `team_task_list` result (`writeConflicts`). Pure reads: nothing here writes.
//!
//! The Lead log's part ([`LeadRadar`]) is fed either by its own selective read
//! ([`write_conflicts`]) or, for `troupe team show`, in the one pass that folds the Team
//! ([`LeadLog::read_at`](crate::LeadLog::read_at) with `LeadRead::TeamAndMail`); the
//! teammates' logs are read afterwards ([`LeadRadar::conflicts`]), the same code either way.
//!
//! Cost: one selective read (`tool/call`, `tool/result`, `team/task` lines) of the Lead's log
//! (none when the Team's one pass fed it) and of every member's, O(their length) per call,
//! like REFERENCE g.9's re-fold of the Lead log. Advisory: a log that cannot be read (a failed
//! provisioning never made one) adds no change; nothing is refused.

use troupe_journal::{Journal, LineCheck, LineUse, Selected};
use troupe_protocol::{Event, Seq, SessionId, event_types as ty};
use troupe_session::changes::{ChangeFold, FileChange};
use troupe_team::{MemberPhase, TaskSnapshot, TeamState, WriteConflict, WriteRadar};

use crate::teammate_scan::{TeammateScan, TeammateScans, Wants};

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
    LeadRadar::read(journal, state.id().lead_id(), cut.map(|(last, _)| last)).conflicts(
        journal,
        state,
        cut.map(|(_, time)| time),
    )
}

/// The Lead log's part of the write radar: its task records (the windows of work) and the
/// Lead's own file changes, fed one event at a time in log order ([`LeadRadar::task`],
/// [`LeadRadar::event`]); then [`LeadRadar::conflicts`] adds the teammates' changes.
#[derive(Debug, Clone)]
pub(crate) struct LeadRadar {
    lead: SessionId,
    radar: WriteRadar,
    changes: ChangeFold,
}

impl LeadRadar {
    /// An empty radar for the Lead `lead`, whose log has a seeded prefix of `seed_len` events
    /// (not the Lead's own changes).
    pub(crate) fn new(lead: SessionId, seed_len: u64) -> Self {
        Self {
            lead,
            radar: WriteRadar::new(),
            changes: ChangeFold::new(seed_len),
        }
    }

    /// Whether [`LeadRadar::event`] reads events of `kind` (`tool/call`, `tool/result`).
    pub(crate) fn reads(kind: &str) -> bool {
        ChangeFold::reads(kind)
    }

    /// A task record of this Team in the Lead log, appended at `time` (epoch ms), as it
    /// left the task.
    pub(crate) fn task(&mut self, time: u64, task: &TaskSnapshot) {
        self.radar.task(time, task);
    }

    /// One of the Lead's own events (a `tool/call` or `tool/result`; others change nothing).
    pub(crate) fn event(&mut self, event: &Event) {
        let changes = self.changes.apply(event);
        record(&mut self.radar, &self.lead, changes, event.time);
    }

    /// The radar fed by a selective read of the Lead's log of `lead` (up to the event `cut`
    /// when given: `Some(None)` for the empty prefix). A log whose header cannot be read adds
    /// nothing; a read error ends its contribution where it stopped (advisory).
    pub(crate) fn read(journal: &Journal, lead: &SessionId, cut: Option<Option<Seq>>) -> Self {
        let Ok(header) = journal.header(lead) else {
            return Self::new(lead.clone(), 0);
        };
        let mut radar = Self::new(lead.clone(), header.seed_len());
        let select = |kind: &str| Self::reads(kind) || kind == ty::TEAM_TASK;
        let _ = journal.read_selected_each(lead, LineCheck::Prefix, &select, &mut |selected| {
            let event = match selected {
                Selected::Event(event) => event,
                Selected::Line(_) => return LineUse::NeedEvent,
            };
            if let Some(last_seq) = cut
                && last_seq.is_none_or(|last| event.seq > last)
            {
                return LineUse::Used;
            }
            if event.kind == ty::TEAM_TASK {
                if event.data["teamId"].as_str() == Some(lead.as_str())
                    && let Ok(task) =
                        serde_json::from_value::<TaskSnapshot>(event.data["task"].clone())
                {
                    radar.task(event.time, &task);
                }
            } else {
                radar.event(&event);
            }
            LineUse::Used
        });
        radar
    }

    /// Adds every active teammate's changes of `state` (read now from `journal`; up to
    /// `until`, epoch ms, when given: [`Journal::read_until`]) and returns the conflicts.
    pub(crate) fn conflicts(
        self,
        journal: &Journal,
        state: &TeamState,
        until: Option<u64>,
    ) -> Vec<WriteConflict> {
        let wants = Wants {
            changes: true,
            ..Wants::default()
        };
        let active = state
            .members()
            .iter()
            .filter(|m| m.phase == MemberPhase::Active)
            .map(|m| (m.id.clone(), wants));
        let logs = TeammateScans::read(journal, active, until);
        self.conflicts_in(&logs, state)
    }

    /// [`LeadRadar::conflicts`] with the teammates' logs as `logs` read them (their
    /// [`TeammateScan::changes`](crate::teammate_scan::TeammateScan)).
    pub(crate) fn conflicts_in(
        mut self,
        logs: &TeammateScans,
        state: &TeamState,
    ) -> Vec<WriteConflict> {
        for member in state.members() {
            if member.phase == MemberPhase::Active {
                feed_member(&logs.get(&member.id), &member.id, &mut self.radar);
            }
        }
        self.radar.conflicts(state)
    }
}

/// Records `member`'s `changes`, shown by an event at `at` (epoch ms).
fn record(radar: &mut WriteRadar, member: &SessionId, changes: Vec<FileChange>, at: u64) {
    for change in changes {
        match change.since {
            None => radar.exact(member, &change.path, at),
            Some(since) => radar.scanned(member, &change.path, since, at),
        }
    }
}

/// Feeds teammate `id`'s own changes, as `scan` read them, into `radar` (a log whose header
/// cannot be read adds nothing; a read that stopped adds what it read).
fn feed_member(scan: &TeammateScan, id: &SessionId, radar: &mut WriteRadar) {
    let Some(seed) = scan.seed else {
        return;
    };
    let mut fold = ChangeFold::new(seed);
    for event in &scan.changes.events {
        let changes = fold.apply(event);
        record(radar, id, changes, event.time);
    }
}
