//! `write` and `edit`: happy paths and their non-stale error codes.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use super::support::{Workspace, code, dir_names, err, ok};

#[tokio::test]
async fn write_creates_a_new_file_and_its_parents() {
    let ws = Workspace::new();
    let ctx = ws.ctx("alpha");
    let result = ok(ws
        .call(
            &ctx,
            "write",
            json!({"path": "src/deep/new.rs", "content": "fn x() {}\n"}),
        )
        .await);
    assert_eq!(
        result,
        json!({"path": "src/deep/new.rs", "bytes": 10, "created": true})
    );
    assert_eq!(ws.get("src/deep/new.rs"), "fn x() {}\n");
    // No temporary file is left behind.
    assert_eq!(dir_names(&ws.path("src/deep")), vec!["new.rs"]);
}

#[tokio::test]
async fn write_after_read_replaces_and_keeps_permissions() {
    let ws = Workspace::new();
    ws.put("run.sh", "#!/bin/sh\necho old\n");
    std::fs::set_permissions(ws.path("run.sh"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    let ctx = ws.ctx("alpha");
    ok(ws.call(&ctx, "read", json!({"path": "run.sh"})).await);
    let result = ok(ws
        .call(
            &ctx,
            "write",
            json!({"path": "run.sh", "content": "#!/bin/sh\necho new\n"}),
        )
        .await);
    assert_eq!(
        result,
        json!({"path": "run.sh", "bytes": 19, "created": false})
    );
    assert_eq!(ws.get("run.sh"), "#!/bin/sh\necho new\n");
    let mode = std::fs::metadata(ws.path("run.sh"))
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    // The writer's own view is current: a second write needs no re-read.
    ok(ws
        .call(&ctx, "write", json!({"path": "run.sh", "content": "again"}))
        .await);
    assert_eq!(ws.get("run.sh"), "again");
    assert_eq!(dir_names(&ws.root()), vec!["run.sh"]);
}

#[tokio::test]
async fn write_of_an_existing_unread_file_is_not_observed() {
    let ws = Workspace::new();
    ws.put("a.txt", "precious");
    let ctx = ws.ctx("alpha");
    let error = err(ws
        .call(&ctx, "write", json!({"path": "a.txt", "content": "x"}))
        .await);
    assert_eq!(troupe_protocol::ErrorCode::code(&error), "FS_NOT_OBSERVED");
    assert!(
        error
            .model_message()
            .ends_with(" — read the file, then retry"),
        "{}",
        error.model_message()
    );
    assert_eq!(ws.get("a.txt"), "precious");
}

#[tokio::test]
async fn write_after_an_absent_read_creates_but_not_over_a_newcomer() {
    let ws = Workspace::new();
    let ctx = ws.ctx("alpha");
    assert_eq!(
        code(ws.call(&ctx, "read", json!({"path": "a.txt"})).await),
        "FS_NOT_FOUND"
    );
    // Someone else creates the file meanwhile: create-if-absent refuses to clobber it.
    ws.put("a.txt", "theirs");
    assert_eq!(
        code(
            ws.call(&ctx, "write", json!({"path": "a.txt", "content": "mine"}))
                .await
        ),
        "FS_NOT_OBSERVED"
    );
    assert_eq!(ws.get("a.txt"), "theirs");
    // After it is gone again, the absent observation allows creation.
    std::fs::remove_file(ws.path("a.txt")).expect("rm");
    ok(ws
        .call(&ctx, "write", json!({"path": "a.txt", "content": "mine"}))
        .await);
    assert_eq!(ws.get("a.txt"), "mine");
}

#[tokio::test]
async fn write_onto_a_directory_is_refused() {
    let ws = Workspace::new();
    std::fs::create_dir(ws.path("sub")).expect("mkdir");
    let ctx = ws.ctx("alpha");
    assert_eq!(
        code(
            ws.call(&ctx, "write", json!({"path": "sub", "content": "x"}))
                .await
        ),
        "FS_IS_DIRECTORY"
    );
}

#[tokio::test]
async fn edit_replaces_one_exact_occurrence() {
    let ws = Workspace::new();
    ws.put("a.rs", "let x = 1;\nlet y = 2;\n");
    let ctx = ws.ctx("alpha");
    ok(ws.call(&ctx, "read", json!({"path": "a.rs"})).await);
    let result = ok(ws
        .call(
            &ctx,
            "edit",
            json!({"path": "a.rs", "old_string": "let y = 2;", "new_string": "let y = 3;"}),
        )
        .await);
    assert_eq!(result, json!({"path": "a.rs", "replacements": 1}));
    assert_eq!(ws.get("a.rs"), "let x = 1;\nlet y = 3;\n");
    // Consecutive edits by the same owner need no re-read.
    ok(ws
        .call(
            &ctx,
            "edit",
            json!({"path": "a.rs", "old_string": "x = 1", "new_string": "x = 10"}),
        )
        .await);
    assert_eq!(ws.get("a.rs"), "let x = 10;\nlet y = 3;\n");
    assert_eq!(dir_names(&ws.root()), vec!["a.rs"]);
}

#[tokio::test]
async fn edit_replace_all_counts_replacements() {
    let ws = Workspace::new();
    ws.put("a.txt", "foo bar foo baz foo");
    let ctx = ws.ctx("alpha");
    ok(ws.call(&ctx, "read", json!({"path": "a.txt"})).await);
    let result = ok(ws
        .call(
            &ctx,
            "edit",
            json!({"path": "a.txt", "old_string": "foo", "new_string": "qux", "replace_all": true}),
        )
        .await);
    assert_eq!(result["replacements"], 3);
    assert_eq!(ws.get("a.txt"), "qux bar qux baz qux");
}

#[tokio::test]
async fn edit_without_a_match_or_with_several_fails_and_leaves_the_file() {
    let ws = Workspace::new();
    ws.put("a.txt", "foo foo");
    let ctx = ws.ctx("alpha");
    ok(ws.call(&ctx, "read", json!({"path": "a.txt"})).await);
    let missing = err(ws
        .call(
            &ctx,
            "edit",
            json!({"path": "a.txt", "old_string": "bar", "new_string": "x"}),
        )
        .await);
    assert_eq!(
        troupe_protocol::ErrorCode::code(&missing),
        "FS_EDIT_NOT_FOUND"
    );
    // Other codes carry no remedy.
    assert_eq!(missing.model_message(), missing.to_string());
    let ambiguous = err(ws
        .call(
            &ctx,
            "edit",
            json!({"path": "a.txt", "old_string": "foo", "new_string": "x"}),
        )
        .await);
    assert_eq!(
        troupe_protocol::ErrorCode::code(&ambiguous),
        "FS_AMBIGUOUS_EDIT"
    );
    assert!(ambiguous.to_string().contains("2 times"), "{ambiguous}");
    assert_eq!(ws.get("a.txt"), "foo foo");
}

#[tokio::test]
async fn edit_argument_rules() {
    let ws = Workspace::new();
    ws.put("a.txt", "foo");
    let ctx = ws.ctx("alpha");
    ok(ws.call(&ctx, "read", json!({"path": "a.txt"})).await);
    for args in [
        json!({"path": "a.txt", "old_string": "", "new_string": "x"}),
        json!({"path": "a.txt", "old_string": "foo", "new_string": "foo"}),
        json!({"path": "a.txt", "old_string": "foo"}),
        json!({"path": "a.txt", "old_string": "foo", "new_string": "x", "replace_all": "yes"}),
    ] {
        assert_eq!(
            code(ws.call(&ctx, "edit", args.clone()).await),
            "INVALID_ARGUMENTS",
            "{args}"
        );
    }
}

#[tokio::test]
async fn edit_of_a_missing_file_is_not_found() {
    let ws = Workspace::new();
    let ctx = ws.ctx("alpha");
    // Seen absent by a read.
    assert_eq!(
        code(ws.call(&ctx, "read", json!({"path": "gone.txt"})).await),
        "FS_NOT_FOUND"
    );
    assert_eq!(
        code(
            ws.call(
                &ctx,
                "edit",
                json!({"path": "gone.txt", "old_string": "a", "new_string": "b"})
            )
            .await
        ),
        "FS_NOT_FOUND"
    );
    // Never seen at all.
    assert_eq!(
        code(
            ws.call(
                &ctx,
                "edit",
                json!({"path": "other.txt", "old_string": "a", "new_string": "b"})
            )
            .await
        ),
        "FS_NOT_FOUND"
    );
}

#[tokio::test]
async fn edit_of_a_directory_or_binary_file_is_refused() {
    let ws = Workspace::new();
    std::fs::create_dir(ws.path("sub")).expect("mkdir");
    let ctx = ws.ctx("alpha");
    assert_eq!(
        code(
            ws.call(
                &ctx,
                "edit",
                json!({"path": "sub", "old_string": "a", "new_string": "b"})
            )
            .await
        ),
        "FS_IS_DIRECTORY"
    );
    // A file this owner wrote (so its version is known) that holds a NUL byte.
    ok(ws
        .call(&ctx, "write", json!({"path": "blob", "content": "a\u{0}b"}))
        .await);
    assert_eq!(
        code(
            ws.call(
                &ctx,
                "edit",
                json!({"path": "blob", "old_string": "a", "new_string": "c"})
            )
            .await
        ),
        "FS_NOT_TEXT"
    );
}

#[tokio::test]
async fn write_under_a_file_is_not_a_directory() {
    let ws = Workspace::new();
    ws.put("a.txt", "x");
    let ctx = ws.ctx("alpha");
    let error = err(ws
        .call(
            &ctx,
            "write",
            json!({"path": "a.txt/b.txt", "content": "y"}),
        )
        .await);
    assert_eq!(
        troupe_protocol::ErrorCode::code(&error),
        "FS_NOT_A_DIRECTORY"
    );
    assert!(error.to_string().contains("a.txt"), "{error}");
}
