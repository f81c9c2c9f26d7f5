//! `glob` and `grep`: matching, ignore rules, stable order, caps, errors.

use serde_json::json;
use troupe_tools::ToolLimits;

use super::support::{Workspace, code, ok};

/// A small project with ignored files, a `.git` directory and a hidden file.
fn project() -> Workspace {
    let ws = Workspace::new();
    ws.put(".gitignore", "target/\n*.log\n");
    ws.put("Cargo.toml", "[package]\nname = \"demo\"\n");
    ws.put("src/main.rs", "fn main() {\n    helper();\n}\n");
    ws.put("src/util/helper.rs", "pub fn helper() {}\n// TODO: more\n");
    ws.put("src/util/b.rs", "// TODO: b\n");
    ws.put("target/debug/build.rs", "fn helper() {}\n");
    ws.put("debug.log", "helper called\n");
    ws.put(".git/HEAD", "ref: refs/heads/main\n");
    ws.put(".github/ci.yml", "helper: true\n");
    ws.put("image.png", b"\x89PNG\0\0helper\0");
    ws
}

#[tokio::test]
async fn glob_matches_recursively_sorted_and_respects_gitignore() {
    let ws = project();
    let ctx = ws.ctx("alpha");
    let result = ok(ws.call(&ctx, "glob", json!({"pattern": "**/*.rs"})).await);
    assert_eq!(
        result,
        json!({"files": ["src/main.rs", "src/util/b.rs", "src/util/helper.rs"]})
    );
    // `*` does not cross directories.
    let top = ok(ws.call(&ctx, "glob", json!({"pattern": "*"})).await);
    assert_eq!(
        top,
        json!({"files": [".gitignore", "Cargo.toml", "image.png"]})
    );
    // Hidden files are listed, .git is not, ignored files are not.
    let all = ok(ws.call(&ctx, "glob", json!({"pattern": "**"})).await);
    let files: Vec<&str> = all["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f.as_str().expect("str"))
        .collect();
    assert!(files.contains(&".github/ci.yml"));
    assert!(!files.iter().any(|f| f.starts_with(".git/")), "{files:?}");
    assert!(
        !files
            .iter()
            .any(|f| f.starts_with("target/") || f.ends_with(".log")),
        "{files:?}"
    );
}

#[tokio::test]
async fn glob_under_a_path_reports_workspace_relative_paths() {
    let ws = project();
    let ctx = ws.ctx("alpha");
    let result = ok(ws
        .call(&ctx, "glob", json!({"pattern": "*.rs", "path": "src/util"}))
        .await);
    assert_eq!(
        result,
        json!({"files": ["src/util/b.rs", "src/util/helper.rs"]})
    );
    let dotted = ok(ws
        .call(&ctx, "glob", json!({"pattern": "./*.rs", "path": "./src"}))
        .await);
    assert_eq!(dotted, json!({"files": ["src/main.rs"]}));
}

#[tokio::test]
async fn glob_caps_its_results() {
    let ws = Workspace::new();
    for n in 0..7 {
        ws.put(&format!("f{n}.txt"), "");
    }
    let limits = ToolLimits {
        max_results: 3,
        ..ToolLimits::default()
    };
    let ctx = ws.ctx_with_limits("alpha", limits);
    let result = ok(ws.call(&ctx, "glob", json!({"pattern": "*.txt"})).await);
    assert_eq!(
        result,
        json!({"files": ["f0.txt", "f1.txt", "f2.txt"], "truncated": true, "total": 7})
    );
}

#[tokio::test]
async fn glob_errors() {
    let ws = project();
    let ctx = ws.ctx("alpha");
    assert_eq!(
        code(ws.call(&ctx, "glob", json!({"pattern": "src/[a"})).await),
        "INVALID_ARGUMENTS"
    );
    assert_eq!(
        code(ws.call(&ctx, "glob", json!({"pattern": "/etc/*"})).await),
        "INVALID_ARGUMENTS"
    );
    assert_eq!(
        code(
            ws.call(&ctx, "glob", json!({"pattern": "*", "path": "nope"}))
                .await
        ),
        "FS_NOT_FOUND"
    );
    assert_eq!(
        code(
            ws.call(&ctx, "glob", json!({"pattern": "*", "path": "Cargo.toml"}))
                .await
        ),
        "FS_NOT_A_DIRECTORY"
    );
    assert_eq!(
        code(
            ws.call(&ctx, "glob", json!({"pattern": "*", "path": ".."}))
                .await
        ),
        "FS_PATH_OUTSIDE_WORKSPACE"
    );
}

#[tokio::test]
async fn grep_returns_path_line_text_and_respects_gitignore() {
    let ws = project();
    let ctx = ws.ctx("alpha");
    let result = ok(ws.call(&ctx, "grep", json!({"pattern": "helper"})).await);
    // Not from target/ (ignored), debug.log (ignored), .git, or the binary image.
    assert_eq!(
        result,
        json!({"matches": [
            ".github/ci.yml:1:helper: true",
            "src/main.rs:2:    helper();",
            "src/util/helper.rs:1:pub fn helper() {}",
        ]})
    );
}

#[tokio::test]
async fn grep_filters_by_glob_and_path() {
    let ws = project();
    let ctx = ws.ctx("alpha");
    let by_glob = ok(ws
        .call(&ctx, "grep", json!({"pattern": "TODO", "glob": "*.rs"}))
        .await);
    assert_eq!(
        by_glob,
        json!({"matches": ["src/util/b.rs:1:// TODO: b", "src/util/helper.rs:2:// TODO: more"]})
    );
    let negated = ok(ws
        .call(&ctx, "grep", json!({"pattern": "TODO", "glob": "!b.rs"}))
        .await);
    assert_eq!(
        negated,
        json!({"matches": ["src/util/helper.rs:2:// TODO: more"]})
    );
    let one_file = ok(ws
        .call(
            &ctx,
            "grep",
            json!({"pattern": "(?i)todo", "path": "src/util/b.rs"}),
        )
        .await);
    assert_eq!(one_file, json!({"matches": ["src/util/b.rs:1:// TODO: b"]}));
    let nothing = ok(ws
        .call(&ctx, "grep", json!({"pattern": "no such text"}))
        .await);
    assert_eq!(nothing, json!({"matches": []}));
}

#[tokio::test]
async fn grep_caps_matches_and_long_lines() {
    let ws = Workspace::new();
    let text: String = (0..10).map(|n| format!("hit {n}\n")).collect();
    ws.put("many.txt", text);
    ws.put("long.txt", format!("hit {}\n", "x".repeat(2_000)));
    let limits = ToolLimits {
        max_results: 4,
        ..ToolLimits::default()
    };
    let ctx = ws.ctx_with_limits("alpha", limits);
    let result = ok(ws
        .call(&ctx, "grep", json!({"pattern": "hit", "path": "many.txt"}))
        .await);
    assert_eq!(
        result,
        json!({"matches": ["many.txt:1:hit 0", "many.txt:2:hit 1", "many.txt:3:hit 2", "many.txt:4:hit 3"], "truncated": true})
    );
    let long = ok(ws
        .call(&ctx, "grep", json!({"pattern": "hit", "path": "long.txt"}))
        .await);
    let line = long["matches"][0].as_str().expect("match");
    assert!(line.len() < 600 && line.ends_with('…'), "{line}");
}

#[tokio::test]
async fn grep_errors() {
    let ws = project();
    let ctx = ws.ctx("alpha");
    assert_eq!(
        code(ws.call(&ctx, "grep", json!({"pattern": "(unclosed"})).await),
        "INVALID_ARGUMENTS"
    );
    assert_eq!(
        code(
            ws.call(&ctx, "grep", json!({"pattern": "x", "glob": "{a"}))
                .await
        ),
        "INVALID_ARGUMENTS"
    );
    assert_eq!(
        code(
            ws.call(&ctx, "grep", json!({"pattern": "x", "path": "missing"}))
                .await
        ),
        "FS_NOT_FOUND"
    );
    assert_eq!(
        code(
            ws.call(&ctx, "grep", json!({"pattern": "x", "path": "/"}))
                .await
        ),
        "FS_PATH_OUTSIDE_WORKSPACE"
    );
}
