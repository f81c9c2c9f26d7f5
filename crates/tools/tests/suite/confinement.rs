//! Path confinement: every file tool refuses paths that resolve outside the workspace.

use std::os::unix::fs::symlink;

use serde_json::{Value, json};
use troupe_protocol::ErrorCode;

use super::support::{Workspace, code, err, ok};

const OUTSIDE: &str = "FS_PATH_OUTSIDE_WORKSPACE";

/// A directory outside the workspace holding `secret.txt`.
fn outside_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("outside dir");
    std::fs::write(dir.path().join("secret.txt"), "secret\n").expect("secret");
    dir
}

/// Calls for each file tool on `path`.
fn calls_on(path: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("read", json!({"path": path})),
        ("write", json!({"path": path, "content": "pwned"})),
        (
            "edit",
            json!({"path": path, "old_string": "secret", "new_string": "pwned"}),
        ),
    ]
}

async fn assert_all_refused(ws: &Workspace, path: &str) {
    let ctx = ws.ctx("alpha");
    for (tool, args) in calls_on(path) {
        let error = err(ws.call(&ctx, tool, args).await);
        assert_eq!(error.code(), OUTSIDE, "{tool} {path}: {}", error.to_json());
        let message = error.to_string();
        assert!(message.contains("outside the workspace"), "{message}");
        assert!(message.contains(path), "{message}");
    }
}

#[tokio::test]
async fn dot_dot_escapes_are_refused() {
    let ws = Workspace::new();
    std::fs::create_dir(ws.path("sub")).expect("mkdir");
    for path in ["../escape.txt", "sub/../../escape.txt", "./sub/../.."] {
        assert_all_refused(&ws, path).await;
    }
    let parent = ws.root().parent().expect("parent").to_path_buf();
    assert!(!parent.join("escape.txt").exists());
}

#[tokio::test]
async fn dot_dot_that_stays_inside_is_fine() {
    let ws = Workspace::new();
    ws.put("a.txt", "hi");
    std::fs::create_dir(ws.path("sub")).expect("mkdir");
    let ctx = ws.ctx("alpha");
    let result = ok(ws.call(&ctx, "read", json!({"path": "sub/../a.txt"})).await);
    assert_eq!(result["path"], "a.txt");
}

#[tokio::test]
async fn absolute_paths_outside_are_refused_and_inside_accepted() {
    let ws = Workspace::new();
    let outside = outside_dir();
    let secret = outside.path().join("secret.txt");
    assert_all_refused(&ws, secret.to_str().expect("utf-8")).await;
    assert_all_refused(&ws, "/etc/passwd").await;
    assert_eq!(
        std::fs::read_to_string(&secret).expect("secret"),
        "secret\n"
    );

    ws.put("in.txt", "inside");
    let ctx = ws.ctx("alpha");
    let absolute = ws.path("in.txt");
    let result = ok(ws
        .call(
            &ctx,
            "read",
            json!({"path": absolute.to_str().expect("utf-8")}),
        )
        .await);
    assert_eq!(result["path"], "in.txt");
    // The workspace as given (a non-canonical spelling) works too.
    let spelled = ws.dir.path().join("in.txt");
    ok(ws
        .call(
            &ctx,
            "read",
            json!({"path": spelled.to_str().expect("utf-8")}),
        )
        .await);
}

#[tokio::test]
async fn symlinked_file_pointing_outside_is_refused() {
    let ws = Workspace::new();
    let outside = outside_dir();
    symlink(outside.path().join("secret.txt"), ws.path("link.txt")).expect("symlink");
    assert_all_refused(&ws, "link.txt").await;
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).expect("secret"),
        "secret\n"
    );
}

#[tokio::test]
async fn symlinked_directory_pointing_outside_is_refused() {
    let ws = Workspace::new();
    let outside = outside_dir();
    symlink(outside.path(), ws.path("linkdir")).expect("symlink");
    assert_all_refused(&ws, "linkdir/secret.txt").await;
    // A new file (and a new directory) under the symlinked directory.
    assert_all_refused(&ws, "linkdir/new.txt").await;
    assert_all_refused(&ws, "linkdir/newdir/new.txt").await;
    assert!(!outside.path().join("new.txt").exists());
    assert!(!outside.path().join("newdir").exists());
    // glob and grep refuse it as a base path too.
    let ctx = ws.ctx("alpha");
    assert_eq!(
        code(
            ws.call(&ctx, "glob", json!({"pattern": "*", "path": "linkdir"}))
                .await
        ),
        OUTSIDE
    );
    assert_eq!(
        code(
            ws.call(
                &ctx,
                "grep",
                json!({"pattern": "secret", "path": "linkdir"})
            )
            .await
        ),
        OUTSIDE
    );
}

#[tokio::test]
async fn dangling_symlink_to_outside_is_refused_for_creation() {
    let ws = Workspace::new();
    let outside = outside_dir();
    let target = outside.path().join("created-through-link.txt");
    symlink(&target, ws.path("dangling.txt")).expect("symlink");
    let ctx = ws.ctx("alpha");
    assert_eq!(
        code(
            ws.call(
                &ctx,
                "write",
                json!({"path": "dangling.txt", "content": "x"})
            )
            .await
        ),
        OUTSIDE
    );
    assert!(!target.exists());
}

#[tokio::test]
async fn symlinks_that_stay_inside_are_followed() {
    let ws = Workspace::new();
    std::fs::create_dir(ws.path("real")).expect("mkdir");
    symlink(ws.path("real"), ws.path("alias")).expect("symlink");
    // A dangling link to a not-yet-existing file inside the workspace.
    symlink(ws.path("real/later.txt"), ws.path("later-link.txt")).expect("symlink");
    let ctx = ws.ctx("alpha");
    let result = ok(ws
        .call(
            &ctx,
            "write",
            json!({"path": "alias/new.txt", "content": "x"}),
        )
        .await);
    assert_eq!(result["path"], "real/new.txt");
    let result = ok(ws
        .call(
            &ctx,
            "write",
            json!({"path": "later-link.txt", "content": "y"}),
        )
        .await);
    assert_eq!(result["path"], "real/later.txt");
    assert_eq!(ws.get("real/later.txt"), "y");
}

#[tokio::test]
async fn grep_and_glob_do_not_walk_into_outside_symlinks() {
    let ws = Workspace::new();
    let outside = outside_dir();
    symlink(outside.path(), ws.path("linkdir")).expect("symlink");
    symlink(outside.path().join("secret.txt"), ws.path("link.txt")).expect("symlink");
    ws.put("mine.txt", "not a secret\n");
    let ctx = ws.ctx("alpha");
    let found = ok(ws.call(&ctx, "grep", json!({"pattern": "secret"})).await);
    assert_eq!(found, json!({"matches": ["mine.txt:1:not a secret"]}));
    let files = ok(ws
        .call(&ctx, "glob", json!({"pattern": "**/secret.txt"}))
        .await);
    assert_eq!(files, json!({"files": []}));
}
