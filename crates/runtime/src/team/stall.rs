//! Stalled owners on the live board (issue 17 item 2; the rule is the team crate's
//! [`TeamState::stall_of`]): what a [`StallCheck`] needs — now from the journal's clock, which
//! owners are resident, the time of each owner's last logged event — and the Lead's one-time
//! notice in `team_task_list`.
//!
//! **Told once.** The Lead's `team_task_list` carries `stallNotice` for every stalled task in
//! the page whose *episode* — (task id, revision, the owner's last event time) — the Lead has
//! not yet seen in a list result. The episodes seen are those of every `team_task_list`
//! result in the Lead's own history (its transcript, i.e. its log): read once when the first
//! list of this process needs them, then kept in memory as results are returned. So a restart
//! does not tell the Lead again of an episode a recorded result showed it; a result a crash
//! kept from the log was never seen, and the re-asked list tells it. An owner that acts again
//! changes its last event time: a later stall is a new episode and is told again. Nothing
//! here writes anything.

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use troupe_journal::{Journal, ScanPosition};
use troupe_protocol::{SessionId, sync::lock};
use troupe_session::chat::ChatMessage;
use troupe_team::{OwnerActivity, StallAfter, StallCheck, TaskPage, TeamState, stall_notice};

use crate::agent::Agent;
use crate::control::ChildControl;

/// One stall episode: task id, revision, the owner's last event time.
type Episode = (String, u64, Option<u64>);

/// The stall threshold of a Team, the episodes its Lead was told of, and where the stored
/// log of each owner that was not resident was last read to.
#[derive(Debug, Default)]
pub(super) struct StallWatch {
    after: StallAfter,
    /// `None` until read from the Lead's history.
    told: std::sync::Mutex<Option<HashSet<Episode>>>,
    /// Per session: where the next read of its log starts, and the time of the last event
    /// read so far (see [`StallWatch::last_event_time`]).
    read_to: std::sync::Mutex<HashMap<SessionId, (ScanPosition, Option<u64>)>>,
}

impl StallWatch {
    /// A watch with threshold `after`.
    pub(super) fn new(after: StallAfter) -> Self {
        Self {
            after,
            told: std::sync::Mutex::new(None),
            read_to: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The check for `state` now: each teammate owner of a task in progress, resident (a live
    /// agent: the last event of its transcript) or not (the last event of its stored log, read
    /// here from where the last check left it; `None` when it cannot be read).
    pub(super) fn check(
        &self,
        state: &TeamState,
        control: &dyn ChildControl,
        store: &Journal,
    ) -> StallCheck {
        let owners = state
            .stall_candidates()
            .into_iter()
            .map(|id| {
                let activity = match control.agent(&id).filter(|a| !a.is_disposed()) {
                    Some(agent) => OwnerActivity {
                        resident: true,
                        last_event_ms: Some(agent.with_transcript(|t| t.last_time())),
                    },
                    None => OwnerActivity {
                        resident: false,
                        last_event_ms: self.last_event_time(store, &id),
                    },
                };
                (id, activity)
            })
            .collect();
        StallCheck {
            now_ms: store.clock().now_ms(),
            after: self.after,
            owners,
        }
    }

    /// Exactly [`last_event_time`](crate::teammate_scan::last_event_time) of `id` now, reading only what its log grew by since the
    /// last call for it ([`Journal::read_each_from`]): the last event of the tail, else the
    /// one remembered. A tail that does not read (a damaged or replaced log, a store error)
    /// forgets the position and reads the whole log, as [`last_event_time`](crate::teammate_scan::last_event_time) does.
    fn last_event_time(&self, store: &Journal, id: &SessionId) -> Option<u64> {
        let mut read_to = lock(&self.read_to);
        if let Some((at, last)) = read_to.remove(id) {
            let mut newest = None;
            if let Ok(tail) = store.read_each_from(id, at, &mut |event| newest = Some(event.time)) {
                let last = newest.or(last);
                read_to.insert(id.clone(), (tail.next, last));
                return last;
            }
        }
        let mut last = None;
        let summary = store
            .read_each(id, &mut |event| last = Some(event.time))
            .ok()?;
        read_to.insert(id.clone(), (summary.position(), last));
        last
    }

    /// Sets `page.stallNotice` for the stalled tasks of the page the Lead `lead` was not told
    /// of, and remembers them as told.
    pub(super) fn tell_lead(&self, lead: &Agent, page: &mut TaskPage) {
        let mut told = lock(&self.told);
        let told = told.get_or_insert_with(|| lead.with_transcript(|t| told_in(t.history())));
        let fresh: Vec<_> = page
            .tasks
            .iter()
            .filter(|view| {
                view.stalled.is_some_and(|stall| {
                    !told.contains(&(view.id.to_string(), view.revision, stall.since))
                })
            })
            .collect();
        page.stall_notice = stall_notice(&fresh);
        for view in fresh {
            if let Some(stall) = view.stalled {
                told.insert((view.id.to_string(), view.revision, stall.since));
            }
        }
    }
}

/// The episodes shown by the `team_task_list` results in `history`: every tool result that is a
/// task page (`{"tasks": […]}`), each of its tasks with `stalled`.
fn told_in(history: &[ChatMessage]) -> HashSet<Episode> {
    let mut told = HashSet::new();
    for message in history {
        let ChatMessage::Tool { content, .. } = message else {
            continue;
        };
        if !content.starts_with("{\"tasks\":") {
            continue;
        }
        let Ok(page) = serde_json::from_str::<Value>(content) else {
            continue;
        };
        for task in page["tasks"].as_array().into_iter().flatten() {
            let stalled = &task["stalled"];
            if stalled.is_null() {
                continue;
            }
            if let (Some(id), Some(revision)) = (task["id"].as_str(), task["revision"].as_u64()) {
                told.insert((id.to_owned(), revision, stalled["since"].as_u64()));
            }
        }
    }
    told
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::teammate_scan::last_event_time;
    use troupe_protocol::{EventDraft, SessionHeader};

    /// The watch's last event time of a log read from where it last left it is the whole
    /// read's, as the log grows, after a line that is no event (the whole read fails: `None`,
    /// and the position is forgotten), and for a log that does not exist.
    #[test]
    fn the_kept_last_event_time_equals_the_whole_reads() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open_home(dir.path());
        let id = SessionId::new("mate-a").unwrap();
        let watch = StallWatch::default();
        assert_eq!(watch.last_event_time(&journal, &id), None);
        let writer = journal.create(SessionHeader::new(id.clone(), 1)).unwrap();
        writer.flush_blocking().unwrap();
        assert_eq!(watch.last_event_time(&journal, &id), None);
        for time in [1_000, 1_010, 1_020] {
            writer
                .append_batch_at(
                    vec![EventDraft::new(
                        "turn/start",
                        serde_json::json!({"turn": 1}),
                    )],
                    time,
                )
                .unwrap();
            writer.flush_blocking().unwrap();
            assert_eq!(watch.last_event_time(&journal, &id), Some(time));
            assert_eq!(last_event_time(&journal, &id), Some(time));
            // Nothing new: the remembered one.
            assert_eq!(watch.last_event_time(&journal, &id), Some(time));
        }
        assert!(lock(&watch.read_to).contains_key(&id));
        let path = dir.path().join("sessions").join("mate-a.jsonl");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut file, b"{\"not\":\"an event\"}\n").unwrap();
        drop(file);
        writer
            .append_batch_at(
                vec![EventDraft::new(
                    "turn/start",
                    serde_json::json!({"turn": 2}),
                )],
                1_030,
            )
            .unwrap();
        writer.flush_blocking().unwrap();
        assert_eq!(last_event_time(&journal, &id), None);
        assert_eq!(watch.last_event_time(&journal, &id), None);
        assert!(!lock(&watch.read_to).contains_key(&id));
    }
}
