//! `troupe demo` through the real binary: the team fixes the project (its tests fail before and
//! pass after), the Team it leaves verifies, bad workspaces are refused; and the same scripted
//! Team SIGKILLed at four distinct points of a `troupe run --team`, then resumed.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::assert_bad_input;
use super::run::{stderr, stdout, summary};
use super::snapshot_settings;

/// The demo's sources, read from the crate (the binary embeds the same files).
fn demo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/demo")
}

/// The demo project's files as shipped: (relative path, bytes).
fn project_files() -> Vec<(PathBuf, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).unwrap().to_path_buf();
                out.push((rel, std::fs::read(&path).unwrap()));
            }
        }
    }
    let root = demo_dir().join("project");
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out.sort();
    out
}

/// Writes the demo project as shipped into `dir`.
fn write_project(dir: &Path) {
    for (rel, bytes) in project_files() {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
}

/// `python3 -m unittest` in `dir`: (passed, combined output).
fn unittest(dir: &Path) -> (bool, String) {
    let out = std::process::Command::new("python3")
        .args(["-m", "unittest"])
        .current_dir(dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// A temporary root with a home inside it.
struct Root {
    dir: tempfile::TempDir,
}

impl Root {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn troupe(&self) -> assert_cmd::Command {
        super::troupe(&self.home())
    }

    /// Every event of a session, as `troupe log ID --json` prints them.
    fn log(&self, id: &str) -> Vec<Value> {
        let out = self.troupe().args(["log", id, "--json"]).assert().success();
        stdout(&out)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    fn show(&self, id: &str) -> Value {
        let out = self
            .troupe()
            .args(["team", "show", id, "--json"])
            .assert()
            .success();
        serde_json::from_str(&stdout(&out)).unwrap()
    }

    fn verify(&self, id: &str) -> String {
        let out = self
            .troupe()
            .args(["team", "verify", id])
            .assert()
            .success();
        stdout(&out)
    }

    /// Every session id of the home.
    fn sessions(&self) -> Vec<String> {
        let out = self
            .troupe()
            .args(["sessions", "--json"])
            .assert()
            .success();
        let rows: Value = serde_json::from_str(&stdout(&out)).unwrap();
        rows.as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// The session id from the `session <id> (…)` line of stderr.
fn session_of(stderr: &str) -> String {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("session "))
        .unwrap_or_else(|| panic!("no session line in {stderr}"));
    line.split_whitespace().nth(1).unwrap().to_owned()
}

/// Every tool result of a session: (tool name, isError, code, content).
fn tool_results(events: &[Value]) -> Vec<(String, bool, Option<String>, String)> {
    events
        .iter()
        .filter(|e| e["type"] == "tool/result")
        .map(|e| {
            let d = &e["data"];
            (
                d["name"].as_str().unwrap().to_owned(),
                d["isError"].as_bool().unwrap(),
                d["code"].as_str().map(str::to_owned),
                d["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The ids of the Team messages each session holds as a `user/message`, all sessions together.
fn delivered_ids(root: &Root) -> Vec<String> {
    let mut ids = Vec::new();
    for id in root.sessions() {
        for event in root.log(&id) {
            if event["type"] == "user/message" && event["data"]["source"]["kind"] == "team-message"
            {
                ids.push(event["data"]["id"].as_str().unwrap().to_owned());
            }
        }
    }
    ids.sort();
    ids
}

/// Asserts that every message queued in the Lead log reached its target exactly once.
fn assert_each_message_delivered_once(root: &Root, lead: &str) {
    let mut queued: Vec<String> = root
        .log(lead)
        .iter()
        .filter(|e| e["type"] == "team/message/queued")
        .map(|e| e["data"]["message"]["id"].as_str().unwrap().to_owned())
        .collect();
    queued.sort();
    assert!(!queued.is_empty());
    assert_eq!(
        delivered_ids(root),
        queued,
        "each queued message must be in its target's log exactly once"
    );
}

#[test]
fn the_demo_fixes_a_real_project_and_leaves_a_team_that_verifies() {
    let root = Root::new();
    let home = root.home();
    let project = root.path("demo");
    let h = home.display().to_string();
    let out = root
        .troupe()
        .args(["demo", "--workspace"])
        .arg(&project)
        .assert()
        .success();
    let err = stderr(&out);
    let answer = stdout(&out);
    assert!(
        answer.starts_with("All 7 tests of wordstats pass now"),
        "{answer}"
    );
    let id = session_of(&err);

    // The tests fail on the project as shipped, and pass on what the team left.
    let fresh = root.path("fresh");
    write_project(&fresh);
    let (passed, output) = unittest(&fresh);
    assert!(!passed, "{output}");
    assert!(output.contains("FAILED (failures=2, errors=3)"), "{output}");
    let (passed, output) = unittest(&project);
    assert!(passed, "{output}");
    assert!(output.contains("Ran 7 tests"), "{output}");
    // The Lead's own first test run (through the real bash tool) saw them fail.
    let lead_log = root.log(&id);
    let results = tool_results(&lead_log);
    let (name, is_error, _, content) = &results[0];
    assert_eq!((name.as_str(), *is_error), ("bash", false));
    let first: Value = serde_json::from_str(content).unwrap();
    assert_eq!(first["exit_code"], 1, "{first}");
    assert!(
        first["stderr"]
            .as_str()
            .unwrap()
            .contains("FAILED (failures=2, errors=3)"),
        "{first}"
    );
    let (name, _, _, content) = &results[results.len() - 2];
    assert_eq!(name, "bash");
    let last: Value = serde_json::from_str(content).unwrap();
    assert_eq!(last["exit_code"], 0, "{last}");

    // The Team: everyone created and active, every task completed by its owner, no mail left.
    let view = root.show(&id);
    let members: Vec<(&str, &str, &str)> = view["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap(),
                m["role"].as_str().unwrap(),
                m["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        members,
        [
            ("lead", "lead", "inactive"),
            ("beta", "teammate", "inactive"),
            ("alpha", "teammate", "inactive"),
        ]
    );
    for member in view["members"].as_array().unwrap() {
        assert_eq!(member["diagnostics"], json!([]), "{member}");
    }
    let tasks: Vec<(&str, &str, &str, u64)> = view["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap(),
                t["status"].as_str().unwrap(),
                t["ownerName"].as_str().unwrap(),
                t["revision"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        tasks,
        [
            ("task-1", "completed", "alpha", 3),
            ("task-2", "completed", "beta", 3),
            ("task-3", "completed", "lead", 3),
        ]
    );
    assert_eq!(view["tasks"][1]["blockedBy"], json!(["task-1"]));
    assert_eq!(view["tasks"][2]["blockedBy"], json!(["task-1", "task-2"]));
    assert_eq!(
        view["tasks"][1]["writeScopes"],
        json!(["wordstats/counting.py", "wordstats/__init__.py"])
    );
    assert_eq!(view["pendingMessages"], json!([]));
    // Offline every member is `inactive`; the roster phase (what verify counts) is `active`.
    let verified = root.verify(&id);
    assert!(
        verified.contains(
            "OK: 2 teammates (phase: 2 active), 3 tasks (3 completed, 0 deleted), 5 messages \
             (5 delivered, 0 pending)"
        ),
        "{verified}"
    );
    assert_each_message_delivered_once(&root, &id);

    // beta's first edit of counting.py was refused as stale; it re-read the file and the same
    // edit then succeeded. Every other tool call of every member succeeded.
    let ids: Vec<(String, String)> = view["members"].as_array().unwrap()[1..]
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_owned(),
                m["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let beta = &ids.iter().find(|(n, _)| n == "beta").unwrap().1;
    let alpha = &ids.iter().find(|(n, _)| n == "alpha").unwrap().1;
    let beta_results = tool_results(&root.log(beta));
    let stale = beta_results
        .iter()
        .position(|(_, _, code, _)| code.as_deref() == Some("FS_STALE_VERSION"))
        .expect("beta's FS_STALE_VERSION");
    assert_eq!(beta_results[stale].0, "edit");
    assert_eq!(
        (
            beta_results[stale + 1].0.as_str(),
            beta_results[stale + 1].1
        ),
        ("read", false)
    );
    assert_eq!(
        (
            beta_results[stale + 2].0.as_str(),
            beta_results[stale + 2].1
        ),
        ("edit", false)
    );
    let alpha_results = tool_results(&root.log(alpha));
    let errors: Vec<_> = beta_results
        .iter()
        .chain(&alpha_results)
        .chain(&results)
        .filter(|r| r.1)
        .collect();
    assert_eq!(errors.len(), 1, "only the stale edit fails: {errors:?}");
    // Both kinds of message went both ways: quiet notes and wakeups.
    let kinds: Vec<(String, String)> = lead_log
        .iter()
        .filter(|e| e["type"] == "team/message/queued")
        .map(|e| {
            let m = &e["data"]["message"];
            let target = &m["targetId"];
            let target = if *target == json!(id) {
                "lead"
            } else if target == beta.as_str() {
                "beta"
            } else {
                "alpha"
            };
            (
                format!("{}->{target}", m["senderName"].as_str().unwrap()),
                m["delivery"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let kinds: Vec<(&str, &str)> = kinds
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("beta->lead", "wakeup"),
            ("alpha->beta", "quiet"),
            ("alpha->beta", "wakeup"),
            ("beta->lead", "quiet"),
            ("beta->lead", "wakeup"),
        ]
    );

    // Progress, then the summary and the demo's own hints (a snapshot: each member's work,
    // the board, the mail, `demo done`, `python3 -m unittest`, and `troupe team show`, `team
    // verify`, `log` of the Lead and of beta, `resume` and `web` with this session and home).
    for needle in [
        "demo: wrote the wordstats project to",
        "beta: edit returned an error (FS_STALE_VERSION)",
        "board: task-1 in_progress (alpha), task-2 pending, task-3 pending",
    ] {
        assert!(err.contains(needle), "{needle:?} missing from\n{err}");
    }
    let project_dir = project.display().to_string();
    let names = [
        (id.as_str(), "[LEAD]"),
        (alpha.as_str(), "[ALPHA]"),
        (beta.as_str(), "[BETA]"),
        (h.as_str(), "[HOME]"),
        (project_dir.as_str(), "[PROJECT]"),
    ];
    snapshot_settings(&names).bind(|| insta::assert_snapshot!("demo_summary", summary(&err)));
    assert!(!err.contains("Coming soon"), "{err}");
    // The demo lists its own commands, so the run's `inspect:` line would repeat them.
    assert!(!err.contains("inspect:"), "{err}");
    assert_eq!(
        err.matches(&format!("troupe resume {id}")).count(),
        1,
        "the resume command once: {err}"
    );
    // The script is recorded under the home, so the session resumes from anywhere.
    let scripts: Vec<_> = std::fs::read_dir(home.join("demo")).unwrap().collect();
    assert_eq!(scripts.len(), 1);
    // Its steps carry usage, and the Team's ledger is their sum, member by member.
    let script: Value = serde_json::from_str(
        &std::fs::read_to_string(scripts[0].as_ref().unwrap().path()).unwrap(),
    )
    .unwrap();
    let out = root
        .troupe()
        .args(["team", "show", &id, "--json"])
        .assert()
        .success();
    let ledger = serde_json::from_str::<Value>(&stdout(&out)).unwrap()["ledger"].clone();
    let mut team_tokens = 0;
    for (name, steps) in script["agents"].as_object().unwrap() {
        let sum = |key: &str| -> u64 {
            steps
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["usage"][key].as_u64().unwrap())
                .sum()
        };
        let member = ledger["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} missing from {ledger}"));
        assert_eq!(
            member["promptTokens"].as_u64(),
            Some(sum("prompt_tokens")),
            "{member}"
        );
        assert_eq!(
            member["cachedTokens"].as_u64(),
            Some(sum("cached_tokens")),
            "{member}"
        );
        assert_eq!(
            member["completionTokens"].as_u64(),
            Some(sum("completion_tokens")),
            "{member}"
        );
        team_tokens += sum("prompt_tokens") + sum("completion_tokens");
    }
    assert!(team_tokens > 0);
    assert_eq!(ledger["tokens"].as_u64(), Some(team_tokens), "{ledger}");
    let out = root.troupe().args(["resume", &id]).assert().success();
    assert_eq!(stdout(&out), answer);
    assert!(
        stderr(&out).contains("nothing to resume"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_demo_with_json_prints_the_board_as_it_changes() {
    let root = Root::new();
    let out = root
        .troupe()
        .args(["demo", "--json", "--workspace"])
        .arg(root.path("demo"))
        .assert()
        .success();
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    assert_eq!(lines[0]["event"], "session");
    let boards: Vec<&Value> = lines.iter().filter(|l| l["event"] == "team").collect();
    assert!(boards.len() >= 5, "{boards:?}");
    let last_board = boards.last().unwrap();
    assert_eq!(
        last_board["tasks"],
        json!([
            {"id": "task-1", "status": "completed", "ownerName": "alpha"},
            {"id": "task-2", "status": "completed", "ownerName": "beta"},
            {"id": "task-3", "status": "completed", "ownerName": "lead"},
        ])
    );
    assert_eq!(
        last_board["messages"],
        json!({"sent": 5, "delivered": 5, "pending": 0})
    );
    let done = lines.last().unwrap();
    assert_eq!(done["event"], "done");
    assert_eq!(done["status"], "completed");
    assert_eq!(done["team"]["messages"]["sent"], 5);
    assert!(unittest(&root.path("demo")).0);
}

#[test]
fn the_demo_refuses_a_workspace_it_would_overwrite() {
    let root = Root::new();
    let home = root.home();
    // A non-empty directory: nothing in it changes, nothing is written anywhere.
    let full = root.path("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("README.md"), b"mine\n").unwrap();
    let shown = full.display().to_string();
    assert_bad_input(
        &home,
        &["demo", "--workspace", &shown],
        &format!(
            "demo workspace {shown} is not empty: pass a new or empty directory (nothing was changed)"
        ),
    );
    assert_eq!(std::fs::read(full.join("README.md")).unwrap(), b"mine\n");
    assert_eq!(std::fs::read_dir(&full).unwrap().count(), 1);
    assert!(!home.exists(), "the home was created");
    // A file.
    let file = root.path("file");
    std::fs::write(&file, b"not a directory\n").unwrap();
    let shown = file.display().to_string();
    assert_bad_input(
        &home,
        &["demo", "--workspace", &shown],
        &format!("demo workspace {shown} is not a directory: pass a new or empty directory"),
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"not a directory\n");
    assert!(!home.exists(), "the home was created");
    // Under a file.
    let under = file.join("sub");
    let shown = under.display().to_string();
    assert_bad_input(
        &home,
        &["demo", "--workspace", &shown],
        &format!(
            "demo workspace {shown} cannot be created: a part of its path is a file, not a directory"
        ),
    );
    // Where no directory can be created (procfs refuses mkdir, even for root): one line that
    // names the place, and nothing written — not even the script in the home.
    assert_bad_input(
        &home,
        &["demo", "--workspace", "/proc/troupe-demo-x/ws"],
        "cannot create the demo workspace /proc/troupe-demo-x/ws: creating a directory in /proc \
         failed (",
    );
    assert!(!home.exists(), "the home was created");
    // An empty directory is fine, and so is the default, which never reuses a directory.
    let empty = root.path("empty");
    std::fs::create_dir(&empty).unwrap();
    root.troupe()
        .args(["demo", "--workspace"])
        .arg(&empty)
        .assert()
        .success();
    assert!(unittest(&empty).0);
    let cwd = root.path("cwd");
    std::fs::create_dir_all(cwd.join("troupe-demo")).unwrap();
    let out = root
        .troupe()
        .arg("demo")
        .current_dir(&cwd)
        .assert()
        .success();
    assert!(
        stderr(&out).contains(&format!("{}", cwd.join("troupe-demo-2").display())),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_dir(cwd.join("troupe-demo")).unwrap().count(),
        0
    );
    assert!(unittest(&cwd.join("troupe-demo-2")).0);
}

/// A demo running in a workspace holds it: another demo started there — from another home,
/// which cannot see the first one's session and took its half-written or running project for
/// a stopped demo's leftovers, overwrote it and ran a second Team in the same checkout (a
/// new-user trial, two demos started at once) — is refused in one line and changes nothing;
/// once the first one is gone (killed: its claim dies with it) the directory is free again.
#[test]
fn a_demo_running_in_a_workspace_keeps_other_demos_out_of_it() {
    let root = Root::new();
    let workspace = root.path("demo");
    let first_home = root.path("home-1");
    let mut first: Child = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .arg("--home")
        .arg(&first_home)
        .env_remove("TROUPE_HOME")
        .args(["demo", "--pace", "60000", "--workspace"])
        .arg(&workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while lead_file(&first_home).is_none_or(|path| {
        !read_events(&path)
            .iter()
            .any(|e| e["type"] == "request/header")
    }) {
        assert!(first.try_wait().unwrap().is_none(), "the first demo ended");
        assert!(
            Instant::now() < deadline,
            "the first demo never asked its model"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let project = project_files_in(&workspace);
    let shown = workspace.display().to_string();
    assert_bad_input(
        &root.path("home-2"),
        &["demo", "--workspace", &shown],
        &format!(
            "demo workspace {shown} is in use by another troupe demo running there: pass a new \
             or empty directory (nothing was changed)"
        ),
    );
    assert_eq!(
        project_files_in(&workspace),
        project,
        "the project was not touched"
    );
    first.kill().unwrap();
    first.wait().unwrap();
    super::troupe(&root.path("home-3"))
        .args(["demo", "--workspace", &shown])
        .assert()
        .success();
    assert!(unittest(&workspace).0);
}

/// Every file under `dir` with its bytes, sorted by path.
fn project_files_in(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                files.push((path, bytes));
            }
        }
    }
    files.sort();
    files
}

/// `--pace MS` makes every model reply wait: with a pace of a minute the Lead's first model
/// call is still waiting when Ctrl-C comes, which stops the run before any step was taken. The
/// interrupted demo names `troupe resume ID` exactly once (its last line), and that resume
/// (without a pace) finishes the work.
#[test]
fn a_paced_demo_stopped_by_ctrl_c_names_the_resume_command_once() {
    let root = Root::new();
    let home = root.home();
    let workspace = root.path("demo");
    let mut child: Child = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .arg("--home")
        .arg(&home)
        .env_remove("TROUPE_HOME")
        .args(["demo", "--pace", "60000", "--workspace"])
        .arg(&workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut pipe, &mut text).unwrap();
        text
    });
    // The Lead's first model call has started: it waits out the pace.
    let deadline = Instant::now() + Duration::from_secs(60);
    let lead = loop {
        if let Some(path) = lead_file(&home)
            && read_events(&path)
                .iter()
                .any(|e| e["type"] == "request/header")
        {
            break path;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("troupe demo exited ({status}) before its first model call");
        }
        assert!(Instant::now() < deadline, "no model call started");
        std::thread::sleep(Duration::from_millis(5));
    };
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let status = child.wait().unwrap();
    let err = reader.join().unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    let id = lead.file_stem().unwrap().to_str().unwrap().to_owned();
    assert_eq!(
        err.matches("troupe resume").count(),
        1,
        "the resume command once: {err}"
    );
    assert!(
        err.lines().last().unwrap().starts_with(&format!(
            "interrupted — continue with: troupe resume {id} --home "
        )),
        "{err}"
    );
    assert!(err.contains("demo stopped: the project is in"), "{err}");
    // The pace was waited for before the step, so no step was taken: no assistant message.
    let events = read_events(&lead);
    assert!(
        !events.iter().any(|e| e["type"] == "assistant/message"),
        "{events:?}"
    );
    // The resume ends with the demo's verdict, as the demo would have.
    let out = root.troupe().args(["resume", &id]).assert().success();
    assert!(unittest(&workspace).0);
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "\ndemo done: the project is in {}\n",
            workspace.display()
        )),
        "{err}"
    );
    assert!(err.contains("\n  the project's tests now: OK\n"), "{err}");
}

/// The session file of the member named `name` in `home` (by its own `agent/config`).
fn member_file(home: &Path, name: &str) -> Option<PathBuf> {
    let dir = std::fs::read_dir(home.join("sessions")).ok()?;
    dir.flatten().map(|e| e.path()).find(|path| {
        path.extension().is_some_and(|e| e == "jsonl")
            && read_events(path)
                .iter()
                .any(|e| e["type"] == "agent/config" && e["data"]["name"] == name)
    })
}

/// File observations live in memory (a resumed member has read nothing yet: `FS_NOT_OBSERVED`
/// until it reads again), and a script cannot re-read on its own, so every scripted `edit` is
/// in the same step as the `read` it relies on. A Ctrl-C while alpha waits for its next model
/// reply after reading `counting.py` therefore leaves nothing half done: the resume (without a
/// pace) finishes the work and the project's tests pass. (With the read and the edit in two
/// steps, the resumed alpha's edit was refused and the tests still failed after the resume.)
#[test]
fn a_demo_stopped_by_ctrl_c_after_a_teammates_read_is_finished_by_resume() {
    let root = Root::new();
    let home = root.home();
    let workspace = root.path("demo");
    let mut child: Child = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .arg("--home")
        .arg(&home)
        .env_remove("TROUPE_HOME")
        .args(["demo", "--pace", "400", "--workspace"])
        .arg(&workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut pipe, &mut text).unwrap();
        text
    });
    // alpha has read counting.py and waits out the pace of its next model reply.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let waiting = member_file(&home, "alpha").is_some_and(|path| {
            let events = read_events(&path);
            let read = events
                .iter()
                .position(|e| e["type"] == "tool/result" && e["data"]["name"] == "read");
            read.is_some_and(|at| events[at..].iter().any(|e| e["type"] == "request/header"))
        });
        if waiting {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("troupe demo exited ({status}) before alpha read counting.py");
        }
        assert!(Instant::now() < deadline, "alpha never read counting.py");
        std::thread::sleep(Duration::from_millis(5));
    }
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let status = child.wait().unwrap();
    let err = reader.join().unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    let id = session_of(&err);
    assert!(!unittest(&workspace).0, "stopped before the work was done");
    let out = root.troupe().args(["resume", &id]).assert().success();
    let (passed, output) = unittest(&workspace);
    assert!(passed, "{output}\n{}", stderr(&out));
    let alpha = member_id(&root, &id, "alpha");
    let codes: Vec<String> = tool_results(&root.log(&alpha))
        .into_iter()
        .filter_map(|(_, _, code, _)| code)
        .collect();
    assert!(
        !codes.iter().any(|c| c == "FS_NOT_OBSERVED"),
        "alpha's edit relied on a read from before the resume: {codes:?}"
    );
    assert!(root.verify(&id).contains(": OK: "));
}

#[test]
fn a_bad_pace_is_refused_before_anything_is_written() {
    let root = Root::new();
    let home = root.home();
    let workspace = root.path("demo");
    let shown = workspace.display().to_string();
    for (pace, message) in [
        ("abc", "invalid value 'abc' for '--pace <MS>'"),
        ("-1", "invalid value '-1' for '--pace <MS>'"),
        ("60001", "60001 is not in 0..=60000"),
        ("", "invalid value '' for '--pace <MS>'"),
    ] {
        assert_bad_input(
            &home,
            &["demo", "--workspace", &shown, "--pace", pace],
            message,
        );
        assert!(!workspace.exists(), "the workspace was created");
        assert!(!home.exists(), "the home was created");
    }
}

/// Relative `--workspace` and `--home` are printed as absolute paths in every hint, so the
/// commands can be copied and run from any directory.
#[test]
fn relative_paths_are_printed_absolute() {
    let root = Root::new();
    let out = assert_cmd::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .current_dir(root.dir.path())
        .env_remove("TROUPE_HOME")
        .args(["demo", "--home", "relhome", "--workspace", "rel/ws"])
        .assert()
        .success();
    let err = stderr(&out);
    let base = root.dir.path().canonicalize().unwrap();
    let home = base.join("relhome").display().to_string();
    let ws = base.join("rel/ws").display().to_string();
    let id = session_of(&err);
    for needle in [
        format!("demo: wrote the wordstats project to {ws}:"),
        format!("cd {ws} && python3 -m unittest"),
        format!("troupe team show {id} --home {home}"),
        format!("troupe log {id} --home {home}"),
        format!("troupe resume {id} --home {home}"),
    ] {
        assert!(err.contains(&needle), "{needle:?} missing from\n{err}");
    }
    assert!(!err.contains("--home relhome"), "{err}");
    assert!(unittest(&base.join("rel/ws")).0);
}

/// The demo's exit status tells the truth: when the project's tests still fail after the run
/// (here a `python3` on `PATH` that always fails, for the team's runs and the final check
/// alike; the script goes on regardless), the demo says so and exits 1.
#[test]
fn the_demo_exits_1_when_the_projects_tests_still_fail() {
    use std::os::unix::fs::PermissionsExt;
    let root = Root::new();
    let bin = root.path("bin");
    std::fs::create_dir(&bin).unwrap();
    let python = bin.join("python3");
    std::fs::write(
        &python,
        "#!/bin/sh\necho 'Ran 7 tests' >&2\necho 'FAILED (failures=7)' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = root
        .troupe()
        .env("PATH", &path)
        .args(["demo", "--workspace"])
        .arg(root.path("demo"))
        .assert()
        .code(1);
    let err = stderr(&out);
    // `demo finished, but the project's tests still fail: the project is in …`, `the
    // project's tests now: FAILED (failures=7)`, `troupe: the demo project's tests fail after
    // the run: FAILED (failures=7)`; no `demo done`.
    let id = session_of(&err);
    let home_dir = root.home().display().to_string();
    let project_dir = root.path("demo").display().to_string();
    let names = [
        (id.as_str(), "[LEAD]"),
        (home_dir.as_str(), "[HOME]"),
        (project_dir.as_str(), "[PROJECT]"),
    ];
    snapshot_settings(&names)
        .bind(|| insta::assert_snapshot!("demo_tests_still_fail_summary", summary(&err)));
    // With --json the done line is `failed` with DEMO_TESTS_FAILED.
    let out = root
        .troupe()
        .env("PATH", &path)
        .args(["demo", "--json", "--workspace"])
        .arg(root.path("demo-json"))
        .assert()
        .code(1);
    let done: Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "DEMO_TESTS_FAILED", "{done}");
    // With the real python3 the same demo passes and exits 0 (the first test).
}

/// The re-trial's finding: a resumed demo whose board still has open tasks (a teammate's
/// Team call failed and the scripted model went on) is not called done. Here a session whose
/// script is recorded where the demo records its own (`<home>/demo/script-….json`) leaves a
/// task pending; the project's tests pass; its resume ends `demo finished with tasks still
/// open on the demo's board: task-1 pending`, exit 1, `DEMO_TASKS_OPEN` in the `--json` done
/// line.
#[test]
fn a_resumed_demo_with_tasks_still_open_is_not_done() {
    let root = Root::new();
    // A project whose tests pass: only the board is left to fail the check.
    let workspace = root.path("project");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(
        workspace.join("test_ok.py"),
        "import unittest\n\nclass Ok(unittest.TestCase):\n    def test_ok(self):\n        pass\n",
    )
    .unwrap();
    let scripts = root.home().join("demo");
    std::fs::create_dir_all(&scripts).unwrap();
    let script = scripts.join("script-open.json");
    std::fs::write(
        &script,
        json!({"agents": {"lead": [
            call("team_task_create", json!({"subject": "left open", "description": "d"})),
            {"text": "lead done"},
        ]}})
        .to_string(),
    )
    .unwrap();
    let out = root
        .troupe()
        .args(["run", "--team", "--workspace"])
        .arg(&workspace)
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("go")
        .assert()
        .success();
    let id = session_of(&stderr(&out));
    let out = root.troupe().args(["resume", &id]).assert().code(1);
    let err = stderr(&out);
    assert!(
        err.contains("demo finished with tasks still open on the demo's board: task-1 pending;"),
        "{err}"
    );
    assert!(err.contains("the project's tests now: OK"), "{err}");
    assert!(!err.contains("demo done"), "{err}");
    let out = root
        .troupe()
        .args(["resume", &id, "--json"])
        .assert()
        .code(1);
    let done: Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "DEMO_TASKS_OPEN", "{done}");
}

// ---- Crash and resume from the outside ----

fn call(name: &str, arguments: Value) -> Value {
    json!({"tool_calls": [{"name": name, "arguments": arguments}]})
}

fn sleep(seconds: u32) -> Value {
    call("bash", json!({"command": format!("sleep {seconds}")}))
}

/// A sleep with an effect: when it completes, `name` is appended to `marks.txt` in the
/// workspace (so a step that was cut and never asked again leaves its mark missing).
fn sleep_then_mark(seconds: u32, name: &str) -> Value {
    call(
        "bash",
        json!({"command": format!("sleep {seconds} && echo {name} >> marks.txt")}),
    )
}

/// The demo's script with four insertions that make the kill windows wide and keep every
/// kill away from the moments a kill could spoil (each insertion is a tool call inside a turn,
/// so every member keeps its turns):
/// - the Lead spawns `scout` first (a teammate nothing depends on: a kill right after its
///   provisioning record may leave it `active` or `failed`, depending on whether its prompt was
///   durable), then sleeps 3 s (margin for a loaded machine), so the kill lands before beta's provisioning;
/// - the Lead's second turn starts with a 1 s sleep, so a kill right after beta's first queued
///   message lands before alpha's provisioning;
/// - alpha starts with a 2 s sleep, during which the Lead waits (`wait_agent`);
/// - beta's second turn starts with a 2 s sleep, while nobody else does anything.
///
/// alpha's and beta's sleeps each append the member's name to `marks.txt` when they end: the
/// Ctrl-C tests check that a cut sleep is asked again and leaves its mark exactly once.
///
/// Why a resume always finishes the work: a cut turn gets one continuation turn (the Lead's
/// from `troupe resume`, after any waiting wakeup, which keeps its own turn; a teammate's from
/// the Team recovery — at none of these kill points does a cut teammate also hold a parked
/// wakeup), so every member takes its script's steps in the same turns as without the kill.
/// The call running at the kill is resolved from the logs: a spawn or a send whose record is
/// durable is done (a queued message is delivered by the recovery), a sleep's outcome is
/// unknown (never replayed: its `assistant/message` is in the log), and a wait is not run, so
/// that step is asked again — it only waits, and the member's turns stay the same. The only tool result that differs is
/// beta's first edit when the kill came after beta read `counting.py`: the new process has no
/// record of that read, so the edit gets `FS_NOT_OBSERVED` instead of `FS_STALE_VERSION`;
/// either way beta's next steps re-read the file and edit it again.
fn crash_script(dir: &Path) -> PathBuf {
    let mut script: Value =
        serde_json::from_str(&std::fs::read_to_string(demo_dir().join("script.json")).unwrap())
            .unwrap();
    let agents = script["agents"].as_object_mut().unwrap();
    let insert = |steps: &mut Value, at: usize, new: Vec<Value>| {
        let steps = steps.as_array_mut().unwrap();
        for (i, step) in new.into_iter().enumerate() {
            steps.insert(at + i, step);
        }
    };
    let lead = agents.get_mut("lead").unwrap();
    let spawn_alpha = lead
        .as_array()
        .unwrap()
        .iter()
        .position(|s| s["tool_calls"][0]["arguments"]["name"] == "alpha")
        .unwrap();
    insert(lead, spawn_alpha, vec![sleep(1)]);
    let spawn_beta = lead
        .as_array()
        .unwrap()
        .iter()
        .position(|s| s["tool_calls"][0]["arguments"]["name"] == "beta")
        .unwrap();
    insert(
        lead,
        spawn_beta,
        vec![
            call(
                "spawn_teammate",
                json!({"name": "scout", "description": "Says hello", "prompt": "Say hello."}),
            ),
            sleep(3),
        ],
    );
    insert(
        agents.get_mut("alpha").unwrap(),
        0,
        vec![sleep_then_mark(2, "alpha")],
    );
    let beta = agents.get_mut("beta").unwrap();
    let second_turn = beta
        .as_array()
        .unwrap()
        .iter()
        .position(|s| s.get("text").is_some())
        .unwrap()
        + 1;
    insert(beta, second_turn, vec![sleep_then_mark(2, "beta")]);
    agents.insert(
        "scout".to_owned(),
        json!([{"text": "hello"}, {"text": "hello again"}]),
    );
    let path = dir.join("crash.json");
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

/// The complete lines of a session file that parse (a torn last line is skipped).
fn read_events(path: &Path) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .skip(1)
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

/// The root session of `home` (the one without a parent), once its file exists.
fn lead_file(home: &Path) -> Option<PathBuf> {
    let dir = std::fs::read_dir(home.join("sessions")).ok()?;
    for entry in dir.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "jsonl")
            && let Ok(text) = std::fs::read_to_string(&path)
            && let Some(first) = text.lines().next()
            && let Ok(header) = serde_json::from_str::<Value>(first)
            && header.get("parentSession").is_none()
        {
            return Some(path);
        }
    }
    None
}

/// The session id of `name` in the Team of `lead` (`lead` itself for the Lead).
fn member_id(root: &Root, lead: &str, name: &str) -> String {
    if name == "lead" {
        return lead.to_owned();
    }
    let view = root.show(lead);
    view["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {view}"))["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Where to SIGKILL the run.
#[derive(Debug, Clone, Copy)]
enum KillPoint {
    /// Right after the first teammate's `team/member` provisioning record.
    Provisioning,
    /// Right after the first `team/message/queued`.
    QueuedMessage,
    /// During beta's `bash sleep` tool call.
    TeammateToolCall,
    /// During the Lead's second `wait_agent` (while alpha sleeps).
    LeadWait,
}

impl KillPoint {
    /// Whether the run reached this point, from the Lead log and the teammates' logs.
    fn reached(self, home: &Path, lead: &[Value]) -> bool {
        match self {
            KillPoint::Provisioning => lead.iter().any(|e| {
                e["type"] == "team/member" && e["data"]["member"]["phase"] == "provisioning"
            }),
            KillPoint::QueuedMessage => lead.iter().any(|e| e["type"] == "team/message/queued"),
            KillPoint::LeadWait => {
                // The second wait is still open, and alpha is in its sleep (which the wait
                // outlasts: it returns at alpha's first Team change after the sleep).
                let waits: Vec<&Value> = lead
                    .iter()
                    .filter(|e| e["type"] == "tool/call" && e["data"]["name"] == "wait_agent")
                    .collect();
                let Some(wait) = waits.get(1) else {
                    return false;
                };
                let open = !lead.iter().any(|e| {
                    e["type"] == "tool/result" && e["data"]["callId"] == wait["data"]["callId"]
                });
                open && member_sleeps(home, lead, "alpha")
            }
            KillPoint::TeammateToolCall => member_sleeps(home, lead, "beta"),
        }
    }
}

/// Whether teammate `name` (from the Lead log's roster records) has started a `bash sleep`.
fn member_sleeps(home: &Path, lead: &[Value], name: &str) -> bool {
    let Some(member) = lead.iter().find_map(|e| {
        (e["type"] == "team/member" && e["data"]["member"]["name"] == name)
            .then(|| e["data"]["member"]["id"].as_str().unwrap().to_owned())
    }) else {
        return false;
    };
    read_events(&home.join(format!("sessions/{member}.jsonl")))
        .iter()
        .any(|e| {
            e["type"] == "tool/call"
                && e["data"]["arguments"]["command"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("sleep"))
        })
}

/// How the run is stopped at the kill point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// SIGKILL: the process dies where it stands.
    Kill,
    /// SIGINT (Ctrl-C): the running turns are cancelled and the process exits 1.
    Interrupt,
}

/// Starts `troupe run --team` with the crash script on a fresh copy of the demo project and
/// stops it at `point` with `stop`. Returns (root, workspace, Lead id, the run's stderr).
fn run_and_stop(point: KillPoint, stop: Stop) -> (Root, PathBuf, String, String) {
    let root = Root::new();
    let home = root.home();
    let workspace = root.path("ws");
    write_project(&workspace);
    let script = crash_script(root.dir.path());
    let mut child: Child = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .arg("--home")
        .arg(&home)
        .env_remove("TROUPE_HOME")
        .args(["run", "--team", "--workspace"])
        .arg(&workspace)
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("fix the tests with two teammates")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read stderr on a thread, so a full pipe never blocks the run.
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut pipe, &mut text).unwrap();
        text
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let lead = loop {
        if let Some(path) = lead_file(&home)
            && point.reached(&home, &read_events(&path))
        {
            match stop {
                Stop::Kill => child.kill().unwrap(),
                Stop::Interrupt => {
                    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
                    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
                }
            }
            break path;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{point:?}: troupe exited ({status}) before the kill point");
        }
        assert!(Instant::now() < deadline, "{point:?}: never reached");
        std::thread::sleep(Duration::from_millis(1));
    };
    let status = child.wait().unwrap();
    let err = reader.join().unwrap();
    match stop {
        Stop::Kill => assert_eq!(status.code(), None, "{point:?}: killed by a signal"),
        Stop::Interrupt => {
            assert_eq!(status.code(), Some(1), "{point:?}: {err}");
            assert!(
                err.contains("interrupted — continue with: troupe resume"),
                "{err}"
            );
            assert_eq!(
                err.matches("troupe resume").count(),
                1,
                "the resume command once: {err}"
            );
        }
    }
    let id = lead.file_stem().unwrap().to_str().unwrap().to_owned();
    assert!(
        !unittest(&workspace).0,
        "{point:?}: the work was not done yet"
    );
    (root, workspace, id, err)
}

/// Checks that the work of the crash script completed exactly once: the project's tests pass,
/// all three tasks completed, nobody left provisioning, no pending mail, the Team verifies,
/// each queued message delivered once, and the Lead gave the script's final answer.
fn assert_work_done_once(root: &Root, workspace: &Path, id: &str, what: &str) {
    let (passed, output) = unittest(workspace);
    assert!(passed, "{what}: {output}");
    let view = root.show(id);
    for task in view["tasks"].as_array().unwrap() {
        assert_eq!(task["status"], "completed", "{what}: {view}");
    }
    assert_eq!(view["tasks"].as_array().unwrap().len(), 3);
    for member in view["members"].as_array().unwrap() {
        assert_ne!(member["status"], "provisioning", "{what}: {view}");
        if member["name"] != "scout" {
            assert_eq!(member["status"], "inactive", "{what}: {view}");
        }
    }
    assert_eq!(view["pendingMessages"], json!([]), "{what}");
    root.verify(id);
    assert_each_message_delivered_once(root, id);
    // The Lead answered once more, with the script's final answer.
    let lead_log = root.log(id);
    let last_end = lead_log.iter().rfind(|e| e["type"] == "turn/end").unwrap();
    assert_eq!(last_end["data"]["reason"]["kind"], "completed", "{what}");
    let answer = lead_log
        .iter()
        .rfind(|e| e["type"] == "assistant/message")
        .unwrap();
    assert!(
        answer["data"]["message"]["content"]
            .as_str()
            .is_some_and(|t| t.starts_with("All 7 tests of wordstats pass now")),
        "{what}: {answer}"
    );
}

/// Runs the crash script, SIGKILLs `troupe run --team` at `point`, resumes until the resume
/// exits 0, and checks that the work completed exactly once.
fn crash_and_resume(point: KillPoint) {
    let (root, workspace, id, _) = run_and_stop(point, Stop::Kill);
    let mut outputs = Vec::new();
    for attempt in 1..=3 {
        let out = root.troupe().args(["resume", &id]).output().unwrap();
        outputs.push(String::from_utf8_lossy(&out.stderr).into_owned());
        if out.status.success() {
            break;
        }
        assert!(
            attempt < 3,
            "{point:?}: resume never succeeded: {outputs:#?}"
        );
    }
    // The kill cut what it aimed at: the running call got its result from the recovery,
    // decided from the logs (DESIGN decision 10) — a `bash` command's outcome is unknown, a
    // wait is not run (it only waits: asked again), a spawn whose provisioning record is
    // durable is done (its result rebuilt) — and the member got a continuation (a `resume`
    // message: the Lead's from `troupe resume`, a teammate's from the Team recovery).
    let first = &outputs[0];
    let cut = |member: &str, tools: &[&str]| {
        let log = root.log(&member_id(&root, &id, member));
        let closed = log.iter().any(|e| {
            let d = &e["data"];
            let name = d["name"].as_str().unwrap_or_default();
            let expected = match name {
                "bash" => Some("TOOL_OUTCOME_UNKNOWN"),
                "wait_agent" => Some("TOOL_NOT_STARTED"),
                _ => None,
            };
            e["type"] == "tool/result"
                && tools.contains(&name)
                && d["messageId"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("interrupted-tool-result-"))
                && d["code"].as_str() == expected
        });
        assert!(
            closed,
            "{point:?}: {member}'s {tools:?} was not cut: {first}"
        );
        let continued = log
            .iter()
            .any(|e| e["type"] == "user/message" && e["data"]["source"]["kind"] == "resume");
        assert!(continued, "{point:?}: {member} was not continued: {first}");
    };
    match point {
        KillPoint::TeammateToolCall => cut("beta", &["bash"]),
        KillPoint::LeadWait => {
            cut("lead", &["wait_agent"]);
            cut("alpha", &["bash"]);
        }
        // The spawn, or (when the kill came a little late) the sleep after it.
        KillPoint::Provisioning => cut("lead", &["spawn_teammate", "bash"]),
        KillPoint::QueuedMessage => {}
    }
    assert_work_done_once(&root, &workspace, &id, &format!("{point:?}: {outputs:#?}"));
}

/// Runs the crash script, Ctrl-Cs `troupe run --team` at `point`, resumes once (exit 0), and
/// checks that the work completed exactly once — including the cut calls' effects: each
/// member whose call was cancelled is asked the same step again (same call id), which then
/// runs, so `marks.txt` holds alpha's and beta's marks exactly once each.
fn interrupt_and_resume(point: KillPoint) {
    let (root, workspace, id, _) = run_and_stop(point, Stop::Interrupt);
    let out = root.troupe().args(["resume", &id]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{point:?}: {err}");
    // The cut call ended with one of `codes`, and the same call (the same step) was asked again
    // and ran.
    let redone = |member: &str, tool: &str, codes: &[&str]| {
        let log = root.log(&member_id(&root, &id, member));
        let results: Vec<(String, Option<String>)> = log
            .iter()
            .filter(|e| e["type"] == "tool/result" && e["data"]["name"] == tool)
            .map(|e| {
                (
                    e["data"]["callId"].as_str().unwrap().to_owned(),
                    e["data"]["code"].as_str().map(str::to_owned),
                )
            })
            .collect();
        let cut = results
            .iter()
            .position(|(_, c)| c.as_deref().is_some_and(|c| codes.contains(&c)))
            .unwrap_or_else(|| panic!("{point:?}: {member}'s {tool} was not cut: {results:?}"));
        let again = &results[cut + 1];
        assert_eq!(again.0, results[cut].0, "{point:?}: {member}: {results:?}");
        assert_eq!(again.1, None, "{point:?}: {member}: {results:?}");
    };
    match point {
        KillPoint::TeammateToolCall => redone("beta", "bash", &["TOOL_CANCELED"]),
        KillPoint::LeadWait => {
            // The wait is aborted while it waits, or (when the signal lands between its
            // durable `tool/call` and its start) cancelled before it runs.
            redone(
                "lead",
                "wait_agent",
                &["TEAM_WAIT_ABORTED", "TOOL_CANCELED"],
            );
            redone("alpha", "bash", &["TOOL_CANCELED"]);
        }
        KillPoint::Provisioning | KillPoint::QueuedMessage => unreachable!(),
    }
    let mut marks: Vec<String> = std::fs::read_to_string(workspace.join("marks.txt"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    marks.sort();
    assert_eq!(marks, ["alpha", "beta"], "{point:?}: {err}");
    assert_work_done_once(&root, &workspace, &id, &format!("{point:?}: {err}"));
}

#[test]
fn kill_9_right_after_a_teammates_provisioning_record_then_resume() {
    crash_and_resume(KillPoint::Provisioning);
}

#[test]
fn kill_9_right_after_a_queued_message_then_resume() {
    crash_and_resume(KillPoint::QueuedMessage);
}

#[test]
fn kill_9_during_a_teammates_tool_call_then_resume() {
    crash_and_resume(KillPoint::TeammateToolCall);
}

#[test]
fn kill_9_during_the_leads_wait_then_resume() {
    crash_and_resume(KillPoint::LeadWait);
}

#[test]
fn ctrl_c_during_a_teammates_tool_call_then_resume() {
    interrupt_and_resume(KillPoint::TeammateToolCall);
}

#[test]
fn ctrl_c_during_the_leads_wait_then_resume() {
    interrupt_and_resume(KillPoint::LeadWait);
}

/// An unusable home is refused before the project is written (nothing is left behind).
#[test]
fn an_unusable_home_leaves_no_project_behind() {
    let root = Root::new();
    let ws = root.path("ws");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .args(["demo", "--home", "/proc/troupe-no-such-home", "--workspace"])
        .arg(&ws)
        .env_remove("TROUPE_HOME")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !ws.exists(),
        "the project was written although the home is unusable"
    );
}

/// The demo's scripted usage is what a budget counts: `--budget-tokens` stops it (exit 1,
/// `TEAM_BUDGET_EXCEEDED`, the project's tests still failing), a resume with a budget still too
/// small stops again, and one with enough finishes — with the same 38 model calls in all as a
/// demo run at once, every rule verified and the project's tests passing.
#[test]
fn a_token_budget_stops_the_demo_and_resumes_with_more_finish_it() {
    let root = Root::new();
    let project = root.path("demo");
    let out = root
        .troupe()
        .args(["demo", "--budget-tokens", "40000", "--workspace"])
        .arg(&project)
        .assert()
        .code(1);
    let err = stderr(&out);
    let id = session_of(&err);
    assert!(err.contains("TEAM_BUDGET_EXCEEDED"), "{err}");
    assert!(!unittest(&project).0, "stopped before the fix");
    let out = root
        .troupe()
        .args(["resume", &id, "--budget-tokens", "80000"])
        .assert()
        .code(1);
    assert!(
        stderr(&out).contains("TEAM_BUDGET_EXCEEDED"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("\n  the project's tests now: FAILED ("),
        "{}",
        stderr(&out)
    );
    root.troupe()
        .args(["resume", &id, "--budget-tokens", "500000"])
        .assert()
        .success();
    let out = root
        .troupe()
        .args(["team", "show", &id, "--json"])
        .assert()
        .success();
    let show: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(show["ledger"]["modelCalls"], 38, "{}", show["ledger"]);
    assert_eq!(show["ledger"]["tokens"], 172_660, "{}", show["ledger"]);
    root.troupe()
        .args(["team", "verify", &id])
        .assert()
        .success();
    let (passed, output) = unittest(&project);
    assert!(passed, "{output}");
}
