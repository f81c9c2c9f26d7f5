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
//! Cost: [`write_conflicts`] makes one selective read (`tool/call`, `tool/result`, `team/task`
//! lines) of the Lead's log (none when the Team's one pass fed it) and of every member's,
//! O(their length) per call. A running Team's `team_task_list` asks through its
//! [`RadarTail`] instead: the same folds kept in memory, each log read from where the last
//! list left it ([`Journal::read_each_from`]), so a list costs what the logs grew by since.
//! Advisory: a log that cannot be read (a failed provisioning never made one) adds no
//! change; nothing is refused.

use std::collections::HashMap;
use std::sync::Mutex;

use troupe_journal::{Journal, LineCheck, LineUse, ScanPosition, Selected};
use troupe_protocol::{Event, Seq, SessionId, event_types as ty, sync::lock};
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
        let _ =
            journal.read_selected_each(lead, LineCheck::Prefix, &Self::selects, &mut |selected| {
                let event = match selected {
                    Selected::Event(event) => event,
                    Selected::Line(_) => return LineUse::NeedEvent,
                };
                if let Some(last_seq) = cut
                    && last_seq.is_none_or(|last| event.seq > last)
                {
                    return LineUse::Used;
                }
                radar.logged(&event);
                LineUse::Used
            });
        radar
    }

    /// Whether [`LeadRadar::logged`] reads events of `kind`.
    fn selects(kind: &str) -> bool {
        Self::reads(kind) || kind == ty::TEAM_TASK
    }

    /// One event of the Lead's log, in log order, of a type [`LeadRadar::selects`]: a task
    /// record of this Team, or one of the Lead's own tool events.
    fn logged(&mut self, event: &Event) {
        if event.kind == ty::TEAM_TASK {
            if event.data["teamId"].as_str() == Some(self.lead.as_str())
                && let Ok(task) = serde_json::from_value::<TaskSnapshot>(event.data["task"].clone())
            {
                self.radar.task(event.time, &task);
            }
        } else {
            self.event(event);
        }
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

/// The write radar of a running Team, kept in memory between its `team_task_list`s (see the
/// module docs): the Lead log's part ([`LeadRadar`]) and every active member's changes,
/// each log folded up to the position the last list read it to. A list reads only what each
/// log grew by since ([`Journal::read_each_from`]) and answers exactly what
/// [`write_conflicts`]' whole reads answer: the same events, folded in the same order (the
/// radar does not depend on the order of logs). Whenever a read does not go through — a log
/// damaged or unreadable, a header that does not read, a store error — the list answers
/// [`write_conflicts`]' own reads instead and the kept folds are dropped (the next list
/// starts them again from the start of each log). An active member stays active (a member's
/// phase never leaves `active`), so a member's changes, once taken, stay in. Memory: the
/// radar's windows and changes (one per task window and per changed file), and each log's
/// unfinished calls. Pure reads: nothing here writes.
#[derive(Debug, Default)]
pub(crate) struct RadarTail {
    kept: Mutex<Option<Tails>>,
}

/// What a [`RadarTail`] keeps.
#[derive(Debug)]
struct Tails {
    /// The Lead log's part, with every active member's changes recorded into its radar.
    lead: LeadRadar,
    /// Where the next read of the Lead log starts.
    lead_at: ScanPosition,
    /// Each active member's change fold and where the next read of its log starts.
    members: HashMap<SessionId, (ChangeFold, ScanPosition)>,
}

impl RadarTail {
    /// Whether folds are kept now (a failed read drops them), for the tests.
    #[cfg(test)]
    pub(crate) fn is_kept(&self) -> bool {
        lock(&self.kept).is_some()
    }

    /// The write conflicts of the Team whose folded state is `state` (exactly
    /// `write_conflicts(journal, state, None)`), reading each log from where the last call
    /// left it. Blocking reads (call it off the async threads).
    pub(crate) fn write_conflicts(
        &self,
        journal: &Journal,
        state: &TeamState,
    ) -> Vec<WriteConflict> {
        let mut kept = lock(&self.kept);
        match Tails::advance(kept.take(), journal, state) {
            Some(tails) => {
                let conflicts = tails.lead.radar.conflicts(state);
                *kept = Some(tails);
                conflicts
            }
            None => write_conflicts(journal, state, None),
        }
    }
}

impl Tails {
    /// `kept` (or new folds when `None`) brought up to the logs' ends as they read now;
    /// `None` when some read did not go through.
    fn advance(kept: Option<Self>, journal: &Journal, state: &TeamState) -> Option<Self> {
        let lead = state.id().lead_id();
        let mut tails = match kept {
            Some(mut tails) => {
                let tail = journal
                    .read_each_from(lead, tails.lead_at, &mut |event| {
                        if LeadRadar::selects(&event.kind) {
                            tails.lead.logged(&event);
                        }
                    })
                    .ok()?;
                tails.lead_at = tail.next;
                tails
            }
            None => {
                let seed = journal.header(lead).ok()?.seed_len();
                let mut radar = LeadRadar::new(lead.clone(), seed);
                let summary = journal
                    .read_each(lead, &mut |event| {
                        if LeadRadar::selects(&event.kind) {
                            radar.logged(&event);
                        }
                    })
                    .ok()?;
                Self {
                    lead: radar,
                    lead_at: summary.position(),
                    members: HashMap::new(),
                }
            }
        };
        for member in state.members() {
            if member.phase != MemberPhase::Active {
                continue;
            }
            let radar = &mut tails.lead.radar;
            let id = &member.id;
            let mut take = |fold: &mut ChangeFold, event: Event| {
                if ChangeFold::reads(&event.kind) {
                    let changes = fold.apply(&event);
                    record(radar, id, changes, event.time);
                }
            };
            match tails.members.get_mut(id) {
                Some((fold, at)) => {
                    *at = journal
                        .read_each_from(id, *at, &mut |event| take(fold, event))
                        .ok()?
                        .next;
                }
                None => {
                    let mut fold = ChangeFold::new(journal.header(id).ok()?.seed_len());
                    let at = journal
                        .read_each(id, &mut |event| take(&mut fold, event))
                        .ok()?
                        .position();
                    tails.members.insert(id.clone(), (fold, at));
                }
            }
        }
        Some(tails)
    }
}
