//! The files a member actually changed, folded from its own session log: the write radar's
//! input (`troupe_team::WriteRadar`).
//!
//! A change is a completed call: a `write`/`edit` whose `tool/result` is not an error
//! changed the path of the [`FileEffect`](crate::effect::FileEffect) its `tool/call`
//! recorded (exact); a `bash` call's `tool/result` names the files the comparison of the
//! workspace before and after found ([`ChangedFiles`](crate::effect::ChangedFiles), bounded:
//! `complete: false` means others may be missing). A call without a result (a crash cut it)
//! changed nothing that the log can vouch for. Events of a seeded prefix (a forked
//! teammate's copy of the Lead's history) are the Lead's, not this member's: skipped.

use std::collections::HashMap;

use troupe_protocol::{Event, event_types as ty};

use crate::events::{ToolCallRecord, ToolResultRecord};

/// One member's file changes, folded one event at a time (see the module docs). Pure.
#[derive(Debug, Clone, Default)]
pub struct ChangeFold {
    /// Events with a seq below this are a seeded prefix (not the member's own).
    seed_len: u64,
    /// Each started `write`/`edit` call (its path) and `bash` call (no path), by call id,
    /// with its `tool/call`'s time, until its result.
    started: HashMap<String, (Option<String>, u64)>,
}

/// One file a member changed ([`ChangeFold::apply`]), at the time of the event that showed
/// it (its `tool/result`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// The file, workspace-relative.
    pub path: String,
    /// `None` for an exact change (a `write`/`edit`); for a change a `bash` command's
    /// before/after comparison found, when the command started (its `tool/call`'s time,
    /// epoch ms): the change happened somewhere in between.
    pub since: Option<u64>,
}

impl ChangeFold {
    /// The fold of a log whose first `seed_len` events are a seeded prefix (0 for a log
    /// without one: `SessionHeader::seed_len`).
    pub fn new(seed_len: u64) -> Self {
        Self {
            seed_len,
            started: HashMap::new(),
        }
    }

    /// The files `event` shows changed (empty for almost every event): the change happened
    /// at `event.time`. An event that does not decode changes nothing.
    pub fn apply(&mut self, event: &Event) -> Vec<FileChange> {
        if event.seq.0 < self.seed_len {
            return Vec::new();
        }
        match event.kind.as_str() {
            ty::TOOL_CALL => {
                if let Ok(call) = serde_json::from_value::<ToolCallRecord>(event.data.clone()) {
                    match call.effect {
                        Some(effect) => {
                            self.started
                                .insert(call.call_id, (Some(effect.path), event.time));
                        }
                        None if call.name == "bash" => {
                            self.started.insert(call.call_id, (None, event.time));
                        }
                        None => {}
                    }
                }
                Vec::new()
            }
            ty::TOOL_RESULT => {
                let Ok(result) = serde_json::from_value::<ToolResultRecord>(event.data.clone())
                else {
                    return Vec::new();
                };
                let started = self.started.remove(&result.call_id);
                match (started, result.changed) {
                    // A failed write/edit left its file as it was.
                    (Some((Some(_), _)), _) if result.is_error => Vec::new(),
                    (Some((Some(path), _)), _) => vec![FileChange { path, since: None }],
                    // What a command changed is a fact even when it failed or was killed.
                    (Some((None, since)), Some(changed)) => changed
                        .paths
                        .into_iter()
                        .map(|path| FileChange {
                            path,
                            since: Some(since),
                        })
                        .collect(),
                    _ => Vec::new(),
                }
            }
            _ => Vec::new(),
        }
    }

    /// Whether [`ChangeFold::apply`] reads events of `kind` (a reader may skip the others).
    pub fn reads(kind: &str) -> bool {
        kind == ty::TOOL_CALL || kind == ty::TOOL_RESULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(seq: u64, kind: &str, data: serde_json::Value) -> Event {
        serde_json::from_value(json!({"seq": seq, "time": 1, "type": kind, "data": data}))
            .expect("event")
    }

    fn call(seq: u64, id: &str, name: &str, path: Option<&str>) -> Event {
        let mut data = json!({"turn": 1, "step": 1, "callId": id, "name": name, "arguments": {}});
        if let Some(path) = path {
            data["effect"] = json!({"path": path, "preImage": null,
                "postImage": format!("sha256:{}", "0".repeat(64)), "result": {}});
        }
        event(seq, ty::TOOL_CALL, data)
    }

    fn result(seq: u64, id: &str, name: &str, error: bool, changed: Option<&[&str]>) -> Event {
        let mut data = json!({"turn": 1, "step": 1, "callId": id, "name": name,
            "isError": error, "content": "{}"});
        if let Some(paths) = changed {
            data["changed"] = json!({"paths": paths, "complete": true});
        }
        event(seq, ty::TOOL_RESULT, data)
    }

    #[test]
    fn a_completed_write_changes_its_path_and_a_failed_one_nothing() {
        let mut fold = ChangeFold::new(0);
        assert!(
            fold.apply(&call(0, "a", "write", Some("src/a.rs")))
                .is_empty()
        );
        assert_eq!(
            fold.apply(&result(1, "a", "write", false, None)),
            [FileChange {
                path: "src/a.rs".into(),
                since: None
            }]
        );
        fold.apply(&call(2, "b", "edit", Some("src/b.rs")));
        assert!(fold.apply(&result(3, "b", "edit", true, None)).is_empty());
        // A result without its call (already answered) changes nothing more.
        assert!(fold.apply(&result(4, "a", "write", false, None)).is_empty());
    }

    #[test]
    fn a_bash_result_names_what_it_changed_even_failed_and_a_seeded_prefix_is_not_the_members() {
        let mut fold = ChangeFold::new(2);
        fold.apply(&call(0, "x", "write", Some("lead.rs")));
        assert!(fold.apply(&result(1, "x", "write", false, None)).is_empty());
        fold.apply(&call(2, "y", "bash", None));
        let paths: Vec<_> = fold
            .apply(&result(3, "y", "bash", true, Some(&["a", "b/c"])))
            .into_iter()
            .map(|c| (c.path, c.since))
            .collect();
        assert_eq!(paths, [("a".into(), Some(1)), ("b/c".into(), Some(1))]);
    }
}
