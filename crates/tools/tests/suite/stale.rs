//! The stale-version guard (REFERENCE a.12, CASES 170): per-owner observations, external
//! changes, deletions, and the model-facing remedies.

use std::sync::Arc;

use serde_json::json;
use troupe_protocol::ErrorCode;
use troupe_tools::{NOT_OBSERVED_REMEDY, STALE_VERSION_REMEDY, ToolError};

use super::support::{Workspace, code, err, ok};

const STALE_MESSAGE_END: &str = " — re-read the file, then retry";

#[track_caller]
fn assert_stale(error: &ToolError) {
    assert_eq!(error.code(), "FS_STALE_VERSION", "{}", error.to_json());
    let json = error.to_json();
    assert_eq!(json["code"], "FS_STALE_VERSION");
    let message = json["message"].as_str().expect("message");
    assert!(message.ends_with(STALE_MESSAGE_END), "{message}");
}

/// Two team members (sessions A and B) share one observation store and one workspace.
#[tokio::test]
async fn second_member_is_stale_until_it_re_reads() {
    let ws = Workspace::new();
    ws.put("shared.rs", "fn main() {\n    println!(\"v1\");\n}\n");
    let a = ws.ctx("session-a");
    let b = ws.ctx("session-b");

    ok(ws.call(&a, "read", json!({"path": "shared.rs"})).await);
    ok(ws.call(&b, "read", json!({"path": "shared.rs"})).await);
    ok(ws
        .call(
            &a,
            "edit",
            json!({"path": "shared.rs", "old_string": "v1", "new_string": "v2"}),
        )
        .await);

    // B's view is stale for edit (even with an old_string that still matches) and for write.
    let edit = json!({"path": "shared.rs", "old_string": "fn main", "new_string": "fn start"});
    assert_stale(&err(ws.call(&b, "edit", edit.clone()).await));
    let write = json!({"path": "shared.rs", "content": "overwritten by B"});
    assert_stale(&err(ws.call(&b, "write", write.clone()).await));
    // Failing again does not help: still stale, and A's change is intact.
    assert_stale(&err(ws.call(&b, "edit", edit.clone()).await));
    assert!(ws.get("shared.rs").contains("v2"));

    // After re-reading, B's edit and write succeed, and now A is the stale one.
    let reread = ok(ws.call(&b, "read", json!({"path": "shared.rs"})).await);
    assert!(reread["content"].as_str().expect("content").contains("v2"));
    ok(ws.call(&b, "edit", edit).await);
    assert!(ws.get("shared.rs").starts_with("fn start"));
    ok(ws.call(&b, "write", write).await);
    assert_eq!(ws.get("shared.rs"), "overwritten by B");
    assert_stale(&err(ws
        .call(
            &a,
            "write",
            json!({"path": "shared.rs", "content": "A again"}),
        )
        .await));
}

/// A stale edit reports FS_STALE_VERSION, never FS_EDIT_NOT_FOUND or FS_AMBIGUOUS_EDIT: the
/// version check comes before literal matching.
#[tokio::test]
async fn version_check_comes_before_literal_matching() {
    let ws = Workspace::new();
    ws.put("a.txt", "one one");
    let ctx = ws.ctx("alpha");
    ok(ws.call(&ctx, "read", json!({"path": "a.txt"})).await);
    ws.put("a.txt", "two two two");
    for (old, new) in [("absent", "x"), ("two", "x")] {
        assert_stale(&err(ws
            .call(
                &ctx,
                "edit",
                json!({"path": "a.txt", "old_string": old, "new_string": new}),
            )
            .await));
    }
}

/// CASES 170: replace-if-version write after an external change → FS_STALE_VERSION.
#[tokio::test]
async fn external_change_makes_write_and_edit_stale() {
    let ws = Workspace::new();
    ws.put("a.txt", "original\n");
    let ctx = ws.ctx("alpha");
    ok(ws.call(&ctx, "read", json!({"path": "a.txt"})).await);
    // An external writer (think bash or an editor) rewrites the file in place.
    std::fs::write(ws.path("a.txt"), "changed outside\n").expect("external write");
    assert_stale(&err(ws
        .call(&ctx, "write", json!({"path": "a.txt", "content": "mine"}))
        .await));
    assert_stale(&err(ws
        .call(
            &ctx,
            "edit",
            json!({"path": "a.txt", "old_string": "changed", "new_string": "x"}),
        )
        .await));
    assert_eq!(ws.get("a.txt"), "changed outside\n");
}

/// CASES 170: replace-if-version onto a deleted file → FS_STALE_VERSION and the file is not
/// recreated; a guarded edit of a missing target → FS_STALE_VERSION.
#[tokio::test]
async fn deleted_file_is_stale_and_never_recreated() {
    let ws = Workspace::new();
    ws.put("a.txt", "content");
    let ctx = ws.ctx("alpha");
    ok(ws.call(&ctx, "read", json!({"path": "a.txt"})).await);
    std::fs::remove_file(ws.path("a.txt")).expect("rm");
    let write = err(ws
        .call(&ctx, "write", json!({"path": "a.txt", "content": "zombie"}))
        .await);
    assert_stale(&write);
    assert!(write.to_string().contains("deleted"), "{write}");
    assert!(
        !ws.path("a.txt").exists(),
        "a stale write must not recreate the file"
    );
    assert_stale(&err(ws
        .call(
            &ctx,
            "edit",
            json!({"path": "a.txt", "old_string": "content", "new_string": "x"}),
        )
        .await));
    assert!(!ws.path("a.txt").exists());
    // Reading records it absent; then the write creates it.
    assert_eq!(
        code(ws.call(&ctx, "read", json!({"path": "a.txt"})).await),
        "FS_NOT_FOUND"
    );
    ok(ws
        .call(&ctx, "write", json!({"path": "a.txt", "content": "new"}))
        .await);
    assert_eq!(ws.get("a.txt"), "new");
}

/// A file created after the owner saw it absent is stale for edit.
#[tokio::test]
async fn file_created_after_an_absent_read_is_stale_for_edit() {
    let ws = Workspace::new();
    let ctx = ws.ctx("alpha");
    assert_eq!(
        code(ws.call(&ctx, "read", json!({"path": "a.txt"})).await),
        "FS_NOT_FOUND"
    );
    ws.put("a.txt", "surprise");
    assert_stale(&err(ws
        .call(
            &ctx,
            "edit",
            json!({"path": "a.txt", "old_string": "surprise", "new_string": "x"}),
        )
        .await));
}

#[tokio::test]
async fn edit_of_an_unseen_file_is_not_observed() {
    let ws = Workspace::new();
    ws.put("a.txt", "hello");
    let ctx = ws.ctx("alpha");
    let error = err(ws
        .call(
            &ctx,
            "edit",
            json!({"path": "a.txt", "old_string": "hello", "new_string": "bye"}),
        )
        .await);
    assert_eq!(error.code(), "FS_NOT_OBSERVED");
    let json = error.to_json();
    assert_eq!(json["code"], "FS_NOT_OBSERVED");
    assert!(
        json["message"]
            .as_str()
            .expect("message")
            .ends_with(" — read the file, then retry"),
        "{json}"
    );
    assert_eq!(ws.get("a.txt"), "hello");
    // Another member's read does not count for this one.
    let other = ws.ctx("beta");
    ok(ws.call(&other, "read", json!({"path": "a.txt"})).await);
    assert_eq!(
        code(
            ws.call(
                &ctx,
                "edit",
                json!({"path": "a.txt", "old_string": "hello", "new_string": "bye"})
            )
            .await
        ),
        "FS_NOT_OBSERVED"
    );
}

/// Observations are keyed by the canonical path: reading through a symlink counts for the
/// file it points to.
#[tokio::test]
async fn observations_are_keyed_by_canonical_path() {
    let ws = Workspace::new();
    ws.put("real.txt", "abc");
    std::os::unix::fs::symlink(ws.path("real.txt"), ws.path("alias.txt")).expect("symlink");
    let ctx = ws.ctx("alpha");
    ok(ws.call(&ctx, "read", json!({"path": "alias.txt"})).await);
    ok(ws
        .call(
            &ctx,
            "edit",
            json!({"path": "./real.txt", "old_string": "b", "new_string": "B"}),
        )
        .await);
    assert_eq!(ws.get("real.txt"), "aBc");
    assert!(
        std::fs::symlink_metadata(ws.path("alias.txt"))
            .expect("lstat")
            .file_type()
            .is_symlink(),
        "the symlink survives"
    );
}

/// Many members that read the same version race to write: the per-target lock lets exactly
/// one win; every other gets FS_STALE_VERSION.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_guarded_writes_have_one_winner() {
    let ws = Arc::new(Workspace::new());
    ws.put("race.txt", "start");
    let members: Vec<_> = (0..8).map(|n| ws.ctx(&format!("member-{n}"))).collect();
    for ctx in &members {
        ok(ws.call(ctx, "read", json!({"path": "race.txt"})).await);
    }
    let mut handles = Vec::new();
    for (n, ctx) in members.into_iter().enumerate() {
        let ws = Arc::clone(&ws);
        handles.push(tokio::spawn(async move {
            ws.call(
                &ctx,
                "write",
                json!({"path": "race.txt", "content": format!("writer {n}")}),
            )
            .await
        }));
    }
    let mut winners = Vec::new();
    for (n, handle) in handles.into_iter().enumerate() {
        match handle.await.expect("join") {
            Ok(_) => winners.push(n),
            Err(error) => assert_eq!(error.code(), "FS_STALE_VERSION"),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(ws.get("race.txt"), format!("writer {}", winners[0]));
}

/// The model-facing wrapper appends the remedies, keeps the code, keeps the original error
/// (its plain message stays available), and leaves other codes untouched.
#[test]
fn remedies_are_appended_only_to_the_two_guard_codes() {
    let stale = ToolError::StaleVersion {
        path: "a.txt".into(),
        reason: "changed",
    };
    assert_eq!(stale.remedy(), Some(STALE_VERSION_REMEDY));
    assert_eq!(
        stale.to_json(),
        json!({"code": "FS_STALE_VERSION", "message": "a.txt changed since this session last read it — re-read the file, then retry"})
    );
    assert!(!stale.to_string().contains("re-read"));

    let unseen = ToolError::NotObserved {
        path: "a.txt".into(),
    };
    assert_eq!(unseen.remedy(), Some(NOT_OBSERVED_REMEDY));
    assert_eq!(unseen.to_json()["code"], "FS_NOT_OBSERVED");
    assert_eq!(
        unseen.to_json()["message"],
        "a.txt exists but no read of this file is on record for this agent — read the file, then retry"
    );

    for other in [
        ToolError::EditNotFound {
            path: "a.txt".into(),
        },
        ToolError::NotFound {
            path: "a.txt".into(),
        },
        ToolError::other("TEAM_TASK_STALE_REVISION", "stale team task"),
    ] {
        assert_eq!(other.remedy(), None);
        assert_eq!(
            other.to_json(),
            json!({"code": other.code(), "message": other.to_string()})
        );
    }
}

/// What a `read` saw (`FileSeen`, reported to the context's observer) rebuilds the owner's
/// observations in a fresh store — a restart — with `restore_observations`: a file still as
/// it was read can be edited at once; one changed since is stale (as without the restart); one
/// read as absent stays absent; a file that was never seen stays unseen; an observation the
/// fresh store already holds is kept.
#[tokio::test]
async fn observations_restored_from_what_reads_saw_act_as_before_the_restart() {
    let ws = Workspace::new();
    ws.put("same.txt", "one\n");
    ws.put("changed.txt", "one\n");
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let observer = {
        let seen = Arc::clone(&seen);
        troupe_tools::SeenObserver::new(move |s| seen.lock().unwrap().push(s))
    };
    let before = ws.ctx("session-a").with_seen_observer(observer);
    for path in ["same.txt", "changed.txt"] {
        ok(ws.call(&before, "read", json!({"path": path})).await);
    }
    assert_eq!(
        code(ws.call(&before, "read", json!({"path": "later.txt"})).await),
        "FS_NOT_FOUND"
    );
    let seen: Vec<troupe_tools::FileSeen> = seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter().map(|s| s.path.as_str()).collect::<Vec<_>>(),
        ["same.txt", "changed.txt", "later.txt"]
    );
    assert_eq!(seen[2].image, None);
    assert_eq!(
        serde_json::to_value(&seen[0]).unwrap()["image"],
        "sha256:2c8b08da5ce60398e1f19af0e5dccc744df274b826abe585eaba68c525434806"
    );

    // The restart: a new store; meanwhile changed.txt changes and later.txt appears.
    ws.put("changed.txt", "two\n");
    ws.put("later.txt", "new\n");
    let after = troupe_tools::ToolContext::new(
        ws.dir.path(),
        troupe_protocol::SessionId::new("session-a").unwrap(),
        Arc::new(troupe_tools::FileObservations::new()),
    )
    .unwrap();
    ok(ws
        .call(&after, "read", json!({"path": "changed.txt"}))
        .await);
    ws.put("changed.txt", "three\n");
    troupe_tools::restore_observations(
        &after,
        seen.iter().map(|s| (s.path.as_str(), s.image.as_deref())),
    );
    let edit = |path: &str| json!({"path": path, "old_string": "o", "new_string": "0"});
    ok(ws.call(&after, "edit", edit("same.txt")).await);
    assert_eq!(ws.get("same.txt"), "0ne\n");
    // Read again after the restart, before the restore: that newer observation is kept, and
    // the change after it makes the edit stale.
    assert_stale(&err(ws.call(&after, "edit", edit("changed.txt")).await));
    assert_eq!(
        code(
            ws.call(
                &after,
                "write",
                json!({"path": "later.txt", "content": "x"})
            )
            .await
        ),
        "FS_NOT_OBSERVED"
    );
    assert_eq!(
        code(ws.call(&after, "edit", edit("never.txt")).await),
        "FS_NOT_FOUND"
    );
    // A file whose content changed since it was seen (no newer read) is stale too.
    let fresh = troupe_tools::ToolContext::new(
        ws.dir.path(),
        troupe_protocol::SessionId::new("session-b").unwrap(),
        Arc::new(troupe_tools::FileObservations::new()),
    )
    .unwrap();
    troupe_tools::restore_observations(&fresh, [("changed.txt", seen[1].image.as_deref())]);
    assert_stale(&err(ws.call(&fresh, "edit", edit("changed.txt")).await));
}
