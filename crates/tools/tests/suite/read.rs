//! `read`: lines, windows, truncation, and its error codes.

use serde_json::json;
use troupe_tools::{LINE_TRUNCATED_MARKER, Observation, ToolLimits};

use super::support::{Workspace, code, ok};

#[tokio::test]
async fn reads_a_whole_file_with_line_counts() {
    let ws = Workspace::new();
    ws.put("src/lib.rs", "fn a() {}\nfn b() {}\n");
    let ctx = ws.ctx("alpha");
    let result = ok(ws.call(&ctx, "read", json!({"path": "src/lib.rs"})).await);
    assert_eq!(
        result,
        json!({"path": "src/lib.rs", "content": "fn a() {}\nfn b() {}\n", "start_line": 1, "end_line": 2, "total_lines": 2})
    );
}

#[tokio::test]
async fn records_the_version_it_read_for_its_owner_only() {
    let ws = Workspace::new();
    ws.put("a.txt", "x");
    let ctx = ws.ctx("alpha");
    ok(ws.call(&ctx, "read", json!({"path": "a.txt"})).await);
    let canonical = ws.path("a.txt");
    assert!(matches!(
        ws.observations.get(ctx.owner(), &canonical),
        Observation::Present(_)
    ));
    let other = ws.ctx("beta");
    assert_eq!(
        ws.observations.get(other.owner(), &canonical),
        Observation::Unseen
    );
}

#[tokio::test]
async fn offset_and_limit_select_a_window() {
    let ws = Workspace::new();
    let text: String = (1..=10).map(|n| format!("line {n}\n")).collect();
    ws.put("ten.txt", text);
    let ctx = ws.ctx("alpha");
    let result = ok(ws
        .call(
            &ctx,
            "read",
            json!({"path": "ten.txt", "offset": 3, "limit": 2}),
        )
        .await);
    assert_eq!(
        result,
        json!({"path": "ten.txt", "content": "line 3\nline 4\n", "start_line": 3, "end_line": 4, "total_lines": 10, "next_offset": 5})
    );
    // The last line without a newline, reached through offset alone; 0 means the first line.
    ws.put("two.txt", "one\ntwo");
    let tail = ok(ws
        .call(&ctx, "read", json!({"path": "two.txt", "offset": 2}))
        .await);
    assert_eq!(tail["content"], "two");
    assert_eq!(tail["total_lines"], 2);
    let zero = ok(ws
        .call(&ctx, "read", json!({"path": "two.txt", "offset": 0}))
        .await);
    assert_eq!(zero["start_line"], 1);
    assert_eq!(zero["content"], "one\ntwo");
}

#[tokio::test]
async fn offset_past_the_end_and_zero_limit_are_invalid() {
    let ws = Workspace::new();
    ws.put("a.txt", "1\n2\n");
    let ctx = ws.ctx("alpha");
    let error = super::support::err(
        ws.call(&ctx, "read", json!({"path": "a.txt", "offset": 3}))
            .await,
    );
    assert_eq!(
        troupe_protocol::ErrorCode::code(&error),
        "INVALID_ARGUMENTS"
    );
    assert!(error.to_string().contains("past the end"), "{error}");
    assert_eq!(
        code(
            ws.call(&ctx, "read", json!({"path": "a.txt", "limit": 0}))
                .await
        ),
        "INVALID_ARGUMENTS"
    );
}

#[tokio::test]
async fn empty_file_reads_as_zero_lines() {
    let ws = Workspace::new();
    ws.put("empty.txt", "");
    let ctx = ws.ctx("alpha");
    let result = ok(ws.call(&ctx, "read", json!({"path": "empty.txt"})).await);
    assert_eq!(
        result,
        json!({"path": "empty.txt", "content": "", "start_line": 1, "end_line": 0, "total_lines": 0})
    );
}

#[tokio::test]
async fn long_output_is_cut_at_the_cap_on_a_line_boundary() {
    let ws = Workspace::new();
    let text: String = (0..100).map(|n| format!("{n:09}\n")).collect(); // 10 bytes a line
    ws.put("big.txt", text);
    let limits = ToolLimits {
        output_cap_bytes: 55,
        ..ToolLimits::default()
    };
    let ctx = ws.ctx_with_limits("alpha", limits);
    let result = ok(ws.call(&ctx, "read", json!({"path": "big.txt"})).await);
    assert_eq!(result["end_line"], 5);
    assert_eq!(result["next_offset"], 6);
    assert_eq!(result["total_lines"], 100);
    assert_eq!(result["truncated"], true);
    assert_eq!(result["content"].as_str().map(str::len), Some(50));
}

#[tokio::test]
async fn very_long_lines_are_cut_with_a_marker() {
    let ws = Workspace::new();
    ws.put("min.js", format!("{}\nshort\n", "é".repeat(3_000)));
    let ctx = ws.ctx("alpha");
    let result = ok(ws.call(&ctx, "read", json!({"path": "min.js"})).await);
    let content = result["content"].as_str().expect("content");
    let first = content.lines().next().expect("first line");
    assert!(first.ends_with(LINE_TRUNCATED_MARKER), "{first}");
    assert!(first.len() <= 2_000 + LINE_TRUNCATED_MARKER.len());
    assert!(content.ends_with("\nshort\n"));
    assert_eq!(result["truncated"], true);
    assert_eq!(result["total_lines"], 2);
}

#[tokio::test]
async fn missing_file_is_not_found_and_recorded_absent() {
    let ws = Workspace::new();
    let ctx = ws.ctx("alpha");
    assert_eq!(
        code(ws.call(&ctx, "read", json!({"path": "nope.txt"})).await),
        "FS_NOT_FOUND"
    );
    assert_eq!(
        ws.observations.get(ctx.owner(), &ws.path("nope.txt")),
        Observation::Absent
    );
    // A missing parent directory is "not found" too.
    assert_eq!(
        code(
            ws.call(&ctx, "read", json!({"path": "no/such/dir.txt"}))
                .await
        ),
        "FS_NOT_FOUND"
    );
}

#[tokio::test]
async fn directory_is_refused() {
    let ws = Workspace::new();
    std::fs::create_dir(ws.path("sub")).expect("mkdir");
    let ctx = ws.ctx("alpha");
    assert_eq!(
        code(ws.call(&ctx, "read", json!({"path": "sub"})).await),
        "FS_IS_DIRECTORY"
    );
    assert_eq!(
        code(ws.call(&ctx, "read", json!({"path": "."})).await),
        "FS_IS_DIRECTORY"
    );
}

#[tokio::test]
async fn binary_and_non_utf8_files_are_not_text() {
    let ws = Workspace::new();
    ws.put("nul.bin", b"abc\0def");
    ws.put("latin1.txt", b"caf\xe9\n");
    let ctx = ws.ctx("alpha");
    for path in ["nul.bin", "latin1.txt"] {
        assert_eq!(
            code(ws.call(&ctx, "read", json!({"path": path})).await),
            "FS_NOT_TEXT",
            "{path}"
        );
        assert_eq!(
            ws.observations.get(ctx.owner(), &ws.path(path)),
            Observation::Unseen
        );
    }
}

#[tokio::test]
async fn fifos_are_refused_without_blocking() {
    let ws = Workspace::new();
    let made = std::process::Command::new("mkfifo")
        .arg(ws.path("pipe"))
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let ctx = ws.ctx("alpha");
    assert_eq!(
        code(ws.call(&ctx, "read", json!({"path": "pipe"})).await),
        "FS_NOT_A_FILE"
    );
    assert_eq!(
        code(
            ws.call(
                &ctx,
                "edit",
                json!({"path": "pipe", "old_string": "a", "new_string": "b"})
            )
            .await
        ),
        "FS_NOT_A_FILE"
    );
}
