//! The `bash` sandbox on this kernel (Landlock ABI 7): what a confined command can and cannot
//! write, escape attempts, the network rules, the note on a denial, and that the calling
//! process itself is never confined.

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::symlink;
use std::path::Path;

use serde_json::{Value, json};
use tempfile::TempDir;
use troupe_tools::{NetworkAccess, SandboxMode, SandboxPolicy, ToolContext};

use super::support::{Workspace, ok};

fn policy(filesystem: SandboxMode, network: NetworkAccess) -> SandboxPolicy {
    SandboxPolicy {
        filesystem,
        network,
    }
}

/// A context under `policy` whose temporary directory is `temp`.
fn confined(ws: &Workspace, policy: SandboxPolicy, temp: &TempDir) -> ToolContext {
    ws.ctx("alpha")
        .with_sandbox(policy)
        .with_temp_dir(Some(temp.path().join("session-tmp")))
}

async fn bash(ws: &Workspace, ctx: &ToolContext, command: &str) -> Value {
    ok(ws.call(ctx, "bash", json!({ "command": command })).await)
}

fn note(result: &Value) -> &str {
    result["sandbox_note"].as_str().unwrap_or("")
}

/// A directory outside the workspace, holding `victim.txt` = `original`.
fn outside() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("victim.txt"), "original").unwrap();
    dir
}

#[tokio::test]
async fn workspace_write_allows_the_workspace_and_refuses_anywhere_else_with_a_note() {
    let ws = Workspace::new();
    let temp = tempfile::tempdir().unwrap();
    let out = outside();
    let ctx = confined(&ws, SandboxPolicy::default(), &temp);
    let target = out.path().join("new.txt");
    let result = bash(
        &ws,
        &ctx,
        &format!("echo hi > inside.txt && echo pwned > {}", target.display()),
    )
    .await;
    assert_eq!(result["exit_code"], 1, "{result}");
    assert!(
        result["stderr"]
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{result}"
    );
    assert_eq!(ws.get("inside.txt"), "hi\n");
    assert!(!target.exists(), "a file outside the workspace was created");
    let text = note(&result);
    assert!(text.contains("--sandbox workspace-write"), "{text}");
    assert!(text.contains(&ws.root().display().to_string()), "{text}");
    assert!(text.contains("--sandbox off"), "{text}");

    // Changing, truncating, removing or renaming what is outside fails the same way.
    let victim = out.path().join("victim.txt");
    for command in [
        format!("echo x >> {}", victim.display()),
        format!(": > {}", victim.display()),
        format!("truncate -s 0 {}", victim.display()),
        format!("rm -f {}", victim.display()),
        format!("mv {} moved.txt", victim.display()),
        format!("mkdir {}/d", out.path().display()),
    ] {
        let result = bash(&ws, &ctx, &command).await;
        assert_ne!(result["exit_code"], 0, "{command}: {result}");
        assert!(!note(&result).is_empty(), "{command}: {result}");
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original");
    assert!(!ws.path("moved.txt").exists());
}

#[tokio::test]
async fn escapes_through_symlinks_proc_root_parent_dirs_and_hard_links_fail() {
    let ws = Workspace::new();
    let temp = tempfile::tempdir().unwrap();
    let out = outside();
    let victim = out.path().join("victim.txt");
    symlink(out.path(), ws.path("door")).unwrap();
    symlink(&victim, ws.path("victim-link")).unwrap();
    let ctx = confined(&ws, SandboxPolicy::default(), &temp);
    // How many `..` lead from the workspace to `/`.
    let up = "../".repeat(ws.root().components().count() - 1);
    let out_rel = out.path().strip_prefix("/").unwrap().display().to_string();
    for command in [
        "echo pwned > door/escaped.txt".to_owned(),
        "echo pwned > victim-link".to_owned(),
        format!(
            "echo pwned > /proc/self/root{}/escaped.txt",
            out.path().display()
        ),
        format!("cd {up}{out_rel} && echo pwned > escaped.txt"),
        format!("cd .. && echo pwned > {}/escaped.txt", out.path().display()),
        format!(
            "ln {} hard-link && echo pwned > hard-link",
            victim.display()
        ),
        format!(
            "cp door/victim.txt copy.txt && cp copy.txt {}",
            victim.display()
        ),
    ] {
        let result = bash(&ws, &ctx, &command).await;
        assert_ne!(result["exit_code"], 0, "{command} succeeded: {result}");
        assert!(
            note(&result).contains("workspace-write"),
            "{command}: {result}"
        );
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original");
    assert!(!out.path().join("escaped.txt").exists());
    // Reading through the same doors works: reading is allowed everywhere.
    let result = bash(&ws, &ctx, "cat door/victim.txt victim-link").await;
    assert_eq!(result["stdout"], "originaloriginal", "{result}");
}

#[tokio::test]
async fn read_only_refuses_the_workspace_but_keeps_temp_dir_and_devices() {
    let ws = Workspace::new();
    ws.put("keep.txt", "kept");
    let temp = tempfile::tempdir().unwrap();
    let ctx = confined(&ws, policy(SandboxMode::ReadOnly, NetworkAccess::On), &temp);
    let result = bash(&ws, &ctx, "echo x > new.txt").await;
    assert_eq!(result["exit_code"], 1, "{result}");
    assert!(note(&result).contains("--sandbox read-only"), "{result}");
    assert!(!ws.path("new.txt").exists());
    let result = bash(&ws, &ctx, "rm keep.txt; echo x >> keep.txt").await;
    assert_ne!(result["exit_code"], 0, "{result}");
    assert_eq!(ws.get("keep.txt"), "kept");

    // The session's temp dir (as $TMPDIR), /dev/null-like devices and the output pipes work;
    // a heredoc needs the temp dir.
    let session_tmp = temp.path().join("session-tmp");
    let result = bash(
        &ws,
        &ctx,
        "f=$(mktemp) && echo scratch > \"$f\" && cat \"$f\" && echo \"$TMPDIR\" && \
         echo gone > /dev/null && head -c 4 /dev/zero | wc -c && echo out > /dev/stdout && \
         echo err > /dev/stderr && cat <<EOF\nheredoc\nEOF",
    )
    .await;
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(
        result["stdout"],
        format!("scratch\n{}\n4\nout\nheredoc\n", session_tmp.display())
    );
    assert_eq!(result["stderr"], "err\n");
    assert!(result.get("sandbox_note").is_none(), "{result}");
    let mode = std::fs::metadata(&session_tmp).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o700
    );
}

/// A loopback TCP listener that counts the connections it accepted.
struct Listener {
    listener: TcpListener,
    port: u16,
}

impl Listener {
    fn new() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        Self { listener, port }
    }

    /// Accepts whatever connected so far and returns what the peers sent.
    fn received(&self) -> Vec<String> {
        let mut got = Vec::new();
        while let Ok((mut stream, _)) = self.listener.accept() {
            stream.set_nonblocking(false).unwrap();
            let mut text = String::new();
            let _ = stream.read_to_string(&mut text);
            got.push(text);
        }
        got
    }
}

#[tokio::test]
async fn network_off_denies_tcp_connect_and_bind_and_on_allows_them() {
    let ws = Workspace::new();
    let temp = tempfile::tempdir().unwrap();
    let listener = Listener::new();
    let connect = format!("echo hello > /dev/tcp/127.0.0.1/{}", listener.port);
    let bind = "python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); \
                s.listen(); print(\"bound\")'";

    let offline = confined(
        &ws,
        policy(SandboxMode::WorkspaceWrite, NetworkAccess::Off),
        &temp,
    );
    let result = bash(&ws, &offline, &connect).await;
    assert_eq!(result["exit_code"], 1, "{result}");
    assert!(
        result["stderr"]
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{result}"
    );
    assert!(note(&result).contains("--network off"), "{result}");
    let result = bash(&ws, &offline, bind).await;
    assert_ne!(result["exit_code"], 0, "{result}");
    assert!(note(&result).contains("--network off"), "{result}");
    assert!(listener.received().is_empty(), "a denied connect arrived");

    // The network rules alone (files unconfined) work too.
    let files_off = confined(&ws, policy(SandboxMode::Off, NetworkAccess::Off), &temp);
    let result = bash(&ws, &files_off, &connect).await;
    assert_eq!(result["exit_code"], 1, "{result}");
    assert!(!note(&result).contains("workspace-write"), "{result}");

    let online = confined(&ws, SandboxPolicy::default(), &temp);
    let result = bash(&ws, &online, &connect).await;
    assert_eq!(result["exit_code"], 0, "{result}");
    let result = bash(&ws, &online, bind).await;
    assert_eq!(result["stdout"], "bound\n", "{result}");
    assert_eq!(listener.received(), ["hello\n"]);
}

#[tokio::test]
async fn off_confines_nothing_and_never_adds_a_note() {
    let ws = Workspace::new();
    let temp = tempfile::tempdir().unwrap();
    let out = outside();
    let ctx = confined(&ws, SandboxPolicy::OFF, &temp);
    let target = out.path().join("written.txt");
    let result = bash(
        &ws,
        &ctx,
        &format!(
            "echo free > {} && echo 'x: Permission denied' >&2",
            target.display()
        ),
    )
    .await;
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "free\n");
    assert!(result.get("sandbox_note").is_none(), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_calling_process_is_never_confined() {
    let ws = Workspace::new();
    let temp = tempfile::tempdir().unwrap();
    let out = outside();
    let ctx = confined(
        &ws,
        policy(SandboxMode::ReadOnly, NetworkAccess::Off),
        &temp,
    );
    // Several confined calls at once, on whatever worker threads run them.
    let results = tokio::join!(
        bash(&ws, &ctx, "echo 0 > denied-0.txt"),
        bash(&ws, &ctx, "echo 1 > denied-1.txt"),
        bash(&ws, &ctx, "echo 2 > denied-2.txt"),
        bash(&ws, &ctx, "echo 3 > denied-3.txt"),
    );
    for result in [results.0, results.1, results.2, results.3] {
        assert_eq!(result["exit_code"], 1, "{result}");
    }
    // This process (every thread of it) still writes outside and listens.
    let check = |path: &Path| {
        std::fs::write(path, "parent").unwrap();
        assert_eq!(std::fs::read_to_string(path).unwrap(), "parent");
    };
    check(&out.path().join("parent.txt"));
    check(&ws.path("parent.txt"));
    let handles: Vec<_> = (0..2)
        .map(|i| {
            let dir = out.path().to_path_buf();
            tokio::spawn(async move {
                std::fs::write(dir.join(format!("worker-{i}.txt")), "w").is_ok()
                    && TcpListener::bind("127.0.0.1:0").is_ok()
            })
        })
        .collect();
    for handle in handles {
        assert!(handle.await.unwrap());
    }
}
