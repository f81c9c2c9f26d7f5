//! The `bash` sandbox through the real binary (this kernel has Landlock ABI 7): scripted `bash`
//! calls that write inside and outside the workspace, escape attempts, `--sandbox read-only`,
//! `--network off` against a loopback listener the test runs, the note in the tool result, the
//! refusal on a kernel without Landlock, and what `resume` and a teammate may do with the
//! recorded policy.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use troupe_journal::Journal;
use troupe_protocol::{EventDraft, SessionHeader, SessionId};

use super::listing;
use super::run::{Setup, session_id, stderr, stdout};

fn bash(command: &str) -> Value {
    json!({"tool_calls": [{"name": "bash", "arguments": {"command": command}}]})
}

fn text(answer: &str) -> Value {
    json!({"text": answer})
}

/// The `bash` results of session `id`, in order, parsed from the tool results' JSON text.
fn bash_results(s: &Setup, id: &str) -> Vec<Value> {
    s.log(id)
        .iter()
        .filter(|e| e["type"] == "tool/result" && e["data"]["name"] == "bash")
        .map(|e| serde_json::from_str(e["data"]["content"].as_str().unwrap()).unwrap())
        .collect()
}

/// The last `agent/config` of session `id`.
fn config(s: &Setup, id: &str) -> Value {
    s.log(id)
        .iter()
        .rfind(|e| e["type"] == "agent/config")
        .map(|e| e["data"].clone())
        .unwrap()
}

/// A directory next to the workspace (inside the test's temporary root, outside the
/// workspace), holding `victim.txt` = `original`.
fn outside(s: &Setup) -> PathBuf {
    let dir = s.workspace.parent().unwrap().join("outside");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("victim.txt"), "original").unwrap();
    dir
}

/// Runs `troupe run --model script:FILE ARGS… PROMPT` with `lead` as the Lead's steps; returns
/// the session id after a successful run.
fn run_lead(s: &Setup, name: &str, lead: Value, args: &[&str]) -> String {
    let script = s.script_agents(name, json!({ "lead": lead }));
    let model = format!("script:{}", script.display());
    let mut all = vec!["--model", &model];
    all.extend_from_slice(args);
    all.push("do it");
    let out = s.run(&all).assert().success();
    session_id(&stderr(&out))
}

fn note(result: &Value) -> &str {
    result["sandbox_note"].as_str().unwrap_or("")
}

#[test]
fn by_default_bash_writes_in_the_workspace_and_nowhere_else_even_through_escapes() {
    let s = Setup::new();
    let out = outside(&s);
    std::os::unix::fs::symlink(&out, s.workspace.join("door")).unwrap();
    let up = "../".repeat(s.workspace.canonicalize().unwrap().components().count() - 1);
    let out_rel = out.strip_prefix("/").unwrap().display().to_string();
    let escapes = [
        format!("echo pwned > {}/direct.txt", out.display()),
        "echo pwned > door/symlinked.txt".to_owned(),
        format!(
            "echo pwned > /proc/self/root{}/proc-root.txt",
            out.display()
        ),
        "cd .. && echo pwned > outside/parent.txt".to_owned(),
        format!("cd {up}{out_rel} && echo pwned >> victim.txt"),
    ];
    let mut steps = vec![bash("echo inside > inside.txt && cat inside.txt")];
    steps.extend(escapes.iter().map(|c| bash(c)));
    steps.push(text("Tried."));
    let id = run_lead(&s, "escapes.json", Value::Array(steps), &[]);

    assert_eq!(
        std::fs::read_to_string(s.workspace.join("inside.txt")).unwrap(),
        "inside\n"
    );
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["victim.txt"],
        "a file appeared outside the workspace"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("victim.txt")).unwrap(),
        "original"
    );

    let results = bash_results(&s, &id);
    assert_eq!(results.len(), 1 + escapes.len());
    assert_eq!(results[0]["exit_code"], 0, "{}", results[0]);
    assert_eq!(results[0]["stdout"], "inside\n");
    assert!(results[0].get("sandbox_note").is_none(), "{}", results[0]);
    for (command, result) in escapes.iter().zip(&results[1..]) {
        assert_eq!(result["exit_code"], 1, "{command}: {result}");
        assert!(
            result["stderr"]
                .as_str()
                .unwrap()
                .contains("Permission denied"),
            "{command}: {result}"
        );
        let note = note(result);
        assert!(
            note.contains("--sandbox workspace-write allows writes only in the workspace"),
            "{command}: {note}"
        );
        assert!(note.contains("--sandbox off"), "{command}: {note}");
    }
    // The policy and the session's temp dir are recorded in the session.
    let config = config(&s, &id);
    assert_eq!(
        config["sandbox"],
        json!({"filesystem": "workspace-write", "network": "on"})
    );
    let tmp = config["tmpDir"].as_str().unwrap();
    assert!(tmp.ends_with(&format!("troupe-{id}")), "{config}");
}

#[test]
fn read_only_blocks_workspace_writes_but_not_the_session_temp_dir() {
    let s = Setup::new();
    let id = run_lead(
        &s,
        "read-only.json",
        json!([
            bash("echo changed > notes.txt"),
            bash("echo new > new.txt"),
            bash("f=$(mktemp) && echo scratch > \"$f\" && cat \"$f\" && cat notes.txt"),
            text("Looked only."),
        ]),
        &["--sandbox", "read-only"],
    );
    assert_eq!(
        std::fs::read_to_string(s.workspace.join("notes.txt")).unwrap(),
        "hello world\n"
    );
    assert!(!s.workspace.join("new.txt").exists());
    let results = bash_results(&s, &id);
    for result in &results[..2] {
        assert_eq!(result["exit_code"], 1, "{result}");
        assert!(
            note(result).contains("--sandbox read-only allows no writes"),
            "{result}"
        );
    }
    assert_eq!(results[2]["exit_code"], 0, "{}", results[2]);
    assert_eq!(results[2]["stdout"], "scratch\nhello world\n");
    assert_eq!(config(&s, &id)["sandbox"]["filesystem"], "read-only");
}

/// A loopback TCP listener; [`Listener::received`] accepts what connected so far.
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

/// The side doors around Landlock's TCP rules are closed: a Multipath TCP socket and a TCP Fast
/// Open send (which connects without `connect`) reach nothing under `--network off` — a fresh
/// user's trial reached a loopback server with both.
#[test]
fn network_off_also_blocks_multipath_tcp_and_fast_open() {
    let s = Setup::new();
    let listener = Listener::new();
    let script = r#"import socket as s, sys
p = int(sys.argv[1])
try:
    a = s.socket(s.AF_INET, s.SOCK_STREAM, 262)
    a.connect(("127.0.0.1", p)); a.sendall(b"mptcp"); a.close(); print("mptcp connected")
except OSError as e:
    print("mptcp refused", e.errno)
try:
    b = s.socket(s.AF_INET, s.SOCK_STREAM)
    b.sendto(b"tfo", 0x20000000, ("127.0.0.1", p)); b.close(); print("tfo connected")
except OSError as e:
    print("tfo refused", e.errno)
"#;
    let command = format!("python3 -c '{script}' {}", listener.port);
    let steps = json!([bash(&command), text("Tried the side doors.")]);
    let id = run_lead(&s, "doors.json", steps, &["--network", "off"]);
    let result = &bash_results(&s, &id)[0];
    let out = result["stdout"].as_str().unwrap();
    assert!(out.contains("mptcp refused"), "{result}");
    assert!(out.contains("tfo refused"), "{result}");
    assert!(listener.received().is_empty(), "a denied connect arrived");
}

/// A command may signal its own processes, never the troupe process running it (`kill $PPID`
/// would otherwise stop the whole Team) — under either sandbox mode.
#[test]
fn a_command_cannot_signal_the_troupe_process() {
    let s = Setup::new();
    let steps = json!([
        bash("sleep 30 & kill $! && echo own-child-killed; kill -TERM $PPID || echo refused"),
        text("Tried signals."),
    ]);
    for (name, mode) in [
        ("write.json", "workspace-write"),
        ("read.json", "read-only"),
    ] {
        let id = run_lead(&s, name, steps.clone(), &["--sandbox", mode]);
        let result = &bash_results(&s, &id)[0];
        let out = result["stdout"].as_str().unwrap();
        assert!(out.contains("own-child-killed"), "{result}");
        assert!(out.contains("refused"), "{result}");
        assert!(
            result["stderr"]
                .as_str()
                .unwrap()
                .contains("Operation not permitted"),
            "{result}"
        );
    }
}

#[test]
fn network_off_blocks_a_loopback_connect_and_on_allows_it() {
    let s = Setup::new();
    let listener = Listener::new();
    let connect = format!("echo hello > /dev/tcp/127.0.0.1/{}", listener.port);
    let steps = json!([bash(&connect), text("Tried the network.")]);

    let offline = run_lead(&s, "offline.json", steps.clone(), &["--network", "off"]);
    let result = &bash_results(&s, &offline)[0];
    assert_eq!(result["exit_code"], 1, "{result}");
    assert!(
        result["stderr"]
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{result}"
    );
    assert!(
        note(result).contains("--network off denies every TCP connect and bind"),
        "{result}"
    );
    assert!(listener.received().is_empty(), "a denied connect arrived");
    assert_eq!(
        config(&s, &offline)["sandbox"],
        json!({"filesystem": "workspace-write", "network": "off"})
    );

    let online = run_lead(&s, "online.json", steps, &["--network", "on"]);
    let result = &bash_results(&s, &online)[0];
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(listener.received(), ["hello\n"]);
}

#[test]
fn a_kernel_without_landlock_refuses_to_start_and_names_sandbox_off() {
    let s = Setup::new();
    let script = s.script_agents(
        "plain.json",
        json!({"lead": [bash("echo hi > hi.txt"), text("ok")]}),
    );
    let model = format!("script:{}", script.display());
    // TROUPE_TEST_LANDLOCK_ABI makes troupe see the kernel as one with that Landlock ABI
    // (a documented test-only override: it can only refuse more).
    for (abi, args, remedy) in [
        ("0", &[][..], "--sandbox off"),
        ("0", &["--sandbox", "read-only"][..], "--sandbox off"),
        ("3", &["--network", "off"][..], "--network on"),
        ("0", &["--network", "off"][..], "--sandbox off --network on"),
    ] {
        let out = s
            .run(&[&["--model", &model][..], args, &["do it"]].concat())
            .env("TROUPE_TEST_LANDLOCK_ABI", abi)
            .assert()
            .code(2)
            .stdout("");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{abi} {args:?}: {err}");
        assert!(err.contains("cannot enforce the sandbox"), "{err}");
        assert!(
            err.contains(&format!("pass {remedy}")),
            "{abi} {args:?}: {err}"
        );
        assert!(listing(&s.home).is_empty(), "a refused run wrote a session");
    }
    // ABI 3 enforces the file rules: the default policy runs.
    s.run(&["--model", &model, "do it"])
        .env("TROUPE_TEST_LANDLOCK_ABI", "3")
        .assert()
        .success();
    // With --sandbox off nothing needs Landlock: the run goes ahead, unconfined.
    let out = s
        .run(&["--sandbox", "off", "--model", &model, "do it"])
        .env("TROUPE_TEST_LANDLOCK_ABI", "0")
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    assert_eq!(config(&s, &id)["sandbox"]["filesystem"], "off");
    // The demo refuses the same way, before it writes its project.
    let demo_dir = s.workspace.parent().unwrap().join("demo");
    let out = s
        .troupe()
        .args(["demo", "--workspace"])
        .arg(&demo_dir)
        .env("TROUPE_TEST_LANDLOCK_ABI", "0")
        .assert()
        .code(2);
    assert!(stderr(&out).contains("--sandbox off"), "{}", stderr(&out));
    assert!(!demo_dir.exists(), "the refused demo wrote its project");
}

#[test]
fn unknown_sandbox_settings_are_bad_input() {
    let s = Setup::new();
    for (flag, value, expected) in [
        ("--sandbox", "strict", "read-only, workspace-write, off"),
        ("--network", "maybe", "on, off"),
    ] {
        let out = s
            .run(&[flag, value, "--model", "script:/nonexistent", "do it"])
            .assert()
            .code(2)
            .stdout("");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(value) && err.contains(expected), "{err}");
    }
    assert!(listing(&s.home).is_empty());
}

#[test]
fn resume_keeps_the_recorded_sandbox_and_only_tightens_it() {
    let s = Setup::new();
    let script = s.script_agents(
        "resume.json",
        json!({"lead": [
            bash("echo one > one.txt"), text("First."),
            bash("echo two > two.txt"), text("Second."),
            bash(&format!("echo hi > /dev/tcp/127.0.0.1/{}", 9)), text("Third."),
        ]}),
    );
    let model = format!("script:{}", script.display());
    let out = s.run(&["--model", &model, "first"]).assert().success();
    let id = session_id(&stderr(&out));
    let events = s.log(&id).len();

    // Looser than recorded: refused before anything is written.
    for args in [
        &["--sandbox", "off"][..],
        &["--sandbox", "off", "--network", "off"][..],
    ] {
        let out = s
            .troupe()
            .args([&["resume", &id][..], args, &["again"]].concat())
            .assert()
            .code(2)
            .stdout("");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("looser than the recorded one"), "{err}");
        assert_eq!(
            s.log(&id).len(),
            events,
            "a refused resume wrote to the log"
        );
    }

    // No flag: the recorded policy (workspace-write) confines the resumed run.
    s.troupe()
        .args(["resume", &id, "second"])
        .assert()
        .success();
    assert!(s.workspace.join("two.txt").exists());

    // Stricter: accepted, said, recorded; a later plain resume keeps it, and a looser flag is
    // now refused against the new record.
    let out = s
        .troupe()
        .args([
            "resume",
            &id,
            "--sandbox",
            "read-only",
            "--network",
            "off",
            "third",
        ])
        .assert()
        .success();
    assert!(
        stderr(&out).contains("sandbox: read-only, network off from now on"),
        "{}",
        stderr(&out)
    );
    let results = bash_results(&s, &id);
    let last = results.last().unwrap();
    assert_eq!(last["exit_code"], 1, "{last}");
    assert!(note(last).contains("--network off"), "{last}");
    assert_eq!(
        config(&s, &id)["sandbox"],
        json!({"filesystem": "read-only", "network": "off"})
    );
    let out = s
        .troupe()
        .args(["resume", &id, "--sandbox", "workspace-write"])
        .assert()
        .code(2);
    assert!(stderr(&out).contains("looser"), "{}", stderr(&out));
}

/// A Lead session as troupe wrote it before the sandbox existed: its `agent/config` has no
/// `sandbox` and no `tmpDir`.
fn old_session(s: &Setup, script: &Path) -> String {
    let id = "old-lead";
    let workspace = s.workspace.canonicalize().unwrap().display().to_string();
    let journal = Journal::open_home(&s.home);
    let writer = journal
        .create(
            SessionHeader::new(SessionId::new(id).unwrap(), 1_764_000_000_000)
                .with_cwd(workspace.clone()),
        )
        .unwrap();
    writer
        .append(EventDraft::new(
            "agent/config",
            json!({"name": "lead", "model": {"provider": "script", "model": script.display().to_string()},
                   "profile": "default", "workspace": workspace, "depth": 0}),
        ))
        .unwrap();
    writer.flush_blocking().unwrap();
    id.to_owned()
}

#[test]
fn a_session_recorded_before_the_sandbox_resumes_unconfined_with_a_note() {
    let s = Setup::new();
    let out_dir = outside(&s);
    let target = out_dir.join("legacy.txt");
    let script = s.script_agents(
        "legacy.json",
        json!({"lead": [
            bash(&format!("echo legacy > {}", target.display())), text("Wrote it."),
            bash(&format!("echo again > {}", out_dir.join("confined.txt").display())), text("Tried."),
        ]}),
    );
    let id = old_session(&s, &script);
    let out = s.troupe().args(["resume", &id, "write"]).assert().success();
    assert!(
        stderr(&out).contains("recorded before the sandbox existed"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "legacy\n");
    // A flag confines it from then on (stricter than off is always allowed).
    s.troupe()
        .args(["resume", &id, "--sandbox", "workspace-write", "write again"])
        .assert()
        .success();
    assert!(!out_dir.join("confined.txt").exists());
    assert_eq!(config(&s, &id)["sandbox"]["filesystem"], "workspace-write");
}

#[test]
fn a_teammate_runs_under_the_leads_sandbox() {
    let s = Setup::new();
    // The Lead's steps are sequential; alpha's one bash call and answer are its whole turn.
    let script = s.script_agents(
        "team.json",
        json!({
            "lead": [
                {"tool_calls": [{"name": "spawn_teammate", "arguments": {"name": "alpha", "description": "writes", "prompt": "write a file"}}]},
                {"tool_calls": [{"name": "wait_agent", "arguments": {}}]},
                text("Done."),
            ],
            "alpha": [bash("echo alpha > alpha.txt"), text("tried")],
        }),
    );
    let out = s
        .run(&[
            "--team",
            "--sandbox",
            "read-only",
            "--model",
            &format!("script:{}", script.display()),
            "go",
        ])
        .assert()
        .success();
    let lead = session_id(&stderr(&out));
    assert_eq!(stdout(&out), "Done.\n");
    let rows: Value = serde_json::from_str(&stdout(
        &s.troupe().args(["sessions", "--json"]).assert().success(),
    ))
    .unwrap();
    let alpha = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["parent"] == lead.as_str())
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .unwrap();
    assert_eq!(
        config(&s, &alpha)["sandbox"],
        json!({"filesystem": "read-only", "network": "on"})
    );
    assert!(!s.workspace.join("alpha.txt").exists());
    let result = &bash_results(&s, &alpha)[0];
    assert_eq!(result["exit_code"], 1, "{result}");
    assert!(note(result).contains("--sandbox read-only"), "{result}");
}

#[test]
fn the_demo_passes_under_the_default_sandbox() {
    let s = Setup::new();
    let dir = s.workspace.parent().unwrap().join("demo");
    let out = s
        .troupe()
        .args(["demo", "--workspace"])
        .arg(&dir)
        .assert()
        .success();
    let err = stderr(&out);
    assert!(err.contains("the project's tests now: OK"), "{err}");
    let lead = session_id(&err);
    assert_eq!(
        config(&s, &lead)["sandbox"],
        json!({"filesystem": "workspace-write", "network": "on"})
    );
}
