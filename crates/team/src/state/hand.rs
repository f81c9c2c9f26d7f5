//! The former fast path over the hand-written decoder ([`crate::line_hand`]), kept only so the
//! fold bench can compare it with [`TeamState::apply_line`] (feature `hand-decoder`; never
//! built by default). The code is the former `apply_line` unchanged.

use troupe_protocol::{SessionId, event_types};

use super::{LineApplied, Prepared, StreamFold, TaskUpdate, TeamState};
use crate::ids::{Revision, TaskId};
use crate::line_hand::{LineRecord, StrList, TaskText, Text, decode_line};
use crate::record::{TaskSnapshot, TeamRecord};

impl StreamFold {
    /// [`StreamFold::line`] through the former hand-written decoder (bench only).
    pub fn line_hand(&mut self, kind: &str, text: &str) -> bool {
        self.refused.is_some() || self.state.apply_line_hand(kind, text) == LineApplied::Applied
    }
}

impl TeamState {
    /// [`TeamState::apply_line`] through the former hand-written decoder (bench only).
    pub fn apply_line_hand(&mut self, kind: &str, line: &str) -> LineApplied {
        if !event_types::is_team(kind) {
            return LineApplied::Applied;
        }
        let Some((team_id, record)) = decode_line(kind, line) else {
            return LineApplied::NeedEvent;
        };
        if team_id.0 != self.id.as_str() {
            return if record.is_valid() {
                LineApplied::Applied
            } else {
                LineApplied::NeedEvent
            };
        }
        let prepared = match record {
            LineRecord::Member(snapshot) => self.prepare_member(snapshot).ok(),
            LineRecord::Task(task) => self.prepare_task_text_hand(task),
            LineRecord::MessageQueued(snapshot) => self
                .prepare_record(TeamRecord::MessageQueued(snapshot))
                .ok(),
            LineRecord::MessageDelivered {
                message_id,
                target_id,
            } => self.prepare_delivered_text_hand(&message_id, &target_id),
        };
        match prepared {
            Some(prepared) => {
                self.commit(prepared);
                LineApplied::Applied
            }
            None => LineApplied::NeedEvent,
        }
    }

    fn prepare_task_text_hand(&self, task: TaskText<'_>) -> Option<Prepared> {
        let id = task.id.as_ref();
        let revision = Revision::new(task.revision)?;
        let index = self.task_position(id);
        let current = index.map(|i| &self.tasks[i]);
        let expected = current.map_or(1, |c| c.revision.get() + 1);
        if revision.get() != expected {
            return None;
        }
        let same_owner = match (current.and_then(|c| c.owner_id.as_ref()), &task.owner_id) {
            (None, None) => true,
            (Some(a), Some(b)) => a.as_str() == b.as_ref(),
            _ => false,
        };
        let same_blockers = current.is_some_and(|c| same_list(&c.blocked_by, task.blocked_by));
        let same_scopes = current.is_some_and(|c| same_list(&c.write_scopes, task.write_scopes));
        let owner_id = if same_owner {
            None
        } else {
            Some(match task.owner_id {
                Some(text) => Some(SessionId::new(text.into_owned()).ok()?),
                None => None,
            })
        };
        let blocked_by = if same_blockers {
            None
        } else {
            let ids: Option<Vec<TaskId>> = task
                .blocked_by
                .iter()
                .map(|t| TaskId::parse(t.into_owned()).ok())
                .collect();
            Some(ids?)
        };
        match (index, current) {
            (Some(index), Some(current)) => {
                let blockers = blocked_by.as_deref().unwrap_or(&current.blocked_by);
                self.check_graph_of(Some(index), id, task.status, blockers)
                    .ok()?;
                let update = TaskUpdate {
                    revision,
                    status: task.status,
                    subject: (current.subject != task.subject.as_ref())
                        .then(|| task.subject.into_owned()),
                    description: (current.description != task.description.as_ref())
                        .then(|| task.description.into_owned()),
                    owner_id,
                    blocked_by,
                    write_scopes: (!same_scopes)
                        .then(|| task.write_scopes.iter().map(Text::into_owned).collect()),
                };
                Some(Prepared::TaskUpdate { index, update })
            }
            _ => {
                let snapshot = TaskSnapshot {
                    id: TaskId::parse(task.id.into_owned()).ok()?,
                    revision,
                    subject: task.subject.into_owned(),
                    description: task.description.into_owned(),
                    status: task.status,
                    owner_id: owner_id.flatten(),
                    blocked_by: blocked_by.unwrap_or_default(),
                    write_scopes: task.write_scopes.iter().map(Text::into_owned).collect(),
                };
                self.prepare_task(snapshot).ok()
            }
        }
    }

    fn prepare_delivered_text_hand(
        &self,
        message_id: &Text<'_>,
        target_id: &Text<'_>,
    ) -> Option<Prepared> {
        let index = self.pending_position(message_id.as_ref())?;
        let accepted =
            self.messages[index].target_id.as_str() == target_id.as_ref() && !self.delivered[index];
        accepted.then_some(Prepared::Delivered(index))
    }
}

fn same_list<A: AsRef<str>>(a: &[A], b: StrList<'_>) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|(a, b)| a.as_ref() == b.as_ref())
}
