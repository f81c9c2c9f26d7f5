//! Issue 10 (defects 3, 7, 8) and issue 11 (item 2) through the real binary: a teammate's log
//! failing mid-run (an immutable file) is `JOURNAL_FAILED` naming it, and `troupe resume`
//! finishes once it is writable again; quiet mail starts no Lead turn on resume; a Lead turn
//! whose answer is logged but whose `turn/end` is not is closed as completed by every resume;
//! one exit-code rule for damaged, unreadable and read-only homes; a resumed demo checks its
//! project's tests; a demo workspace a crash left is started over; script files are capped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::run::{Setup, session_id, stderr, stdout};
use super::troupe;

/// Every event of the session file at `path` (complete lines only).
fn read_events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// The session file of the member named `name` (by its own `agent/config`).
fn member_file(home: &Path, name: &str) -> Option<PathBuf> {
    let dir = std::fs::read_dir(home.join("sessions")).ok()?;
    dir.flatten().map(|e| e.path()).find(|path| {
        path.extension().is_some_and(|e| e == "jsonl")
            && read_events(path)
                .iter()
                .any(|e| e["type"] == "agent/config" && e["data"]["name"] == name)
    })
}

/// `python3 -m unittest` in `dir` passes.
fn tests_pass(dir: &Path) -> bool {
    Command::new("python3")
        .args(["-m", "unittest"])
        .current_dir(dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap()
        .status
        .success()
}

/// `chattr ±i path` (an immutable file: even root's writes to an open descriptor fail with
/// EPERM). Panics with a clear message when the file system does not support it.
fn immutable(path: &Path, on: bool) {
    let out = Command::new("chattr")
        .arg(if on { "+i" } else { "-i" })
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("this test needs chattr (e2fsprogs): {e}"));
    assert!(
        out.status.success(),
        "this test needs a file system with immutable files (ext4, xfs): chattr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes a file immutable for as long as it lives (undone even when the test fails).
struct Immutable(PathBuf);

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).output();
    }
}

/// Defect 3 (DESIGN decision 11): beta's session file becomes immutable while beta works (a
/// real OS refusal: `EPERM` on every later write). The demo exits 1 with `JOURNAL_FAILED`
/// naming beta and the OS error as its last line, after the summary and the resume hint;
/// once the file is writable again, `troupe resume` finishes the work.
#[test]
fn a_teammates_log_failing_mid_run_is_journal_failed_and_resume_finishes() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let workspace = root.path().join("demo");
    let mut child = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .arg("--home")
        .arg(&home)
        .env_remove("TROUPE_HOME")
        .args(["demo", "--pace", "300", "--workspace"])
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
    // beta has started its first turn (and waits out the pace of its model reply).
    let deadline = Instant::now() + Duration::from_secs(120);
    let beta = loop {
        if let Some(path) = member_file(&home, "beta")
            && read_events(&path).iter().any(|e| e["type"] == "turn/start")
        {
            break path;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("troupe demo exited ({status}) before beta started");
        }
        assert!(Instant::now() < deadline, "beta never started");
        std::thread::sleep(Duration::from_millis(5));
    };
    immutable(&beta, true);
    let guard = Immutable(beta.clone());
    let status = child.wait().unwrap();
    let err = reader.join().unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("troupe: JOURNAL_FAILED: "), "{err}");
    assert!(last.contains("beta (teammate, session "), "{last}");
    assert!(last.contains("Operation not permitted"), "{last}");
    let lines: Vec<&str> = err.lines().collect();
    let hint = lines
        .iter()
        .position(|l| l.contains("continue with: troupe resume"))
        .unwrap_or_else(|| panic!("no resume hint in {err}"));
    let summary = lines
        .iter()
        .position(|l| l.starts_with("lead: "))
        .unwrap_or_else(|| panic!("no summary in {err}"));
    assert!(summary < hint && hint < lines.len() - 1, "{err}");
    let id = err
        .lines()
        .find(|l| l.starts_with("session "))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .to_owned();

    immutable(&beta, false);
    drop(guard);
    let out = troupe(&home).args(["resume", &id]).assert();
    let text = stderr(&out);
    assert_eq!(out.get_output().status.code(), Some(0), "{text}");
    assert!(tests_pass(&workspace), "{text}");
    let show: Value = serde_json::from_str(&stdout(
        &troupe(&home)
            .args(["team", "show", &id, "--json"])
            .assert()
            .success(),
    ))
    .unwrap();
    assert!(
        show["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["status"] == "completed"),
        "{show}"
    );
    troupe(&home)
        .args(["team", "verify", &id])
        .assert()
        .success();
}

/// A script: the Lead spawns `scout` and answers; scout waits until the Lead's turn has
/// completed (its `turn/end` is in the Lead's log: only the Lead completes a turn before
/// scout does), then sends the Lead a quiet message and finishes. So the mail always arrives
/// after the Lead's last step (before, a quick scout could reach the Lead's last step).
fn quiet_mail_script(s: &Setup) -> PathBuf {
    let lead_done = format!(
        "for i in $(seq 600); do grep -qs '\"kind\":\"completed\"' {}/sessions/*.jsonl && exit 0; \
         sleep 0.05; done; exit 1",
        s.home.display()
    );
    s.script_agents(
        "quiet.json",
        json!({
            "lead": [
                {"tool_calls": [{"name": "spawn_teammate", "arguments": {
                    "name": "scout", "description": "reports", "prompt": "report to the lead"}}]},
                {"text": "scout reports when it is done"}
            ],
            "scout": [
                {"tool_calls": [{"name": "bash", "arguments": {"command": lead_done}}]},
                {"tool_calls": [{"name": "send_message", "arguments": {
                    "target": "lead", "message": "fyi: nothing to do"}}]},
                {"text": "reported"}
            ]
        }),
    )
}

/// Defect 7 (REFERENCE c.10): quiet mail waiting for the Lead is not work to run now. A
/// resume without a prompt leaves it for the Lead's next turn and starts none (the script has
/// no step left: a turn would fail with `LLM_SCRIPT`), saying that a quiet message waits.
#[test]
fn quiet_mail_for_the_lead_starts_no_turn_on_resume() {
    let s = Setup::new();
    let script = quiet_mail_script(&s);
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--team", "--model", &model, "coordinate"])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let events = s.log(&id);
    let quiet_waiting = events
        .iter()
        .any(|e| e["type"] == "agent/inbox/spliced" && e["data"]["target"] == "next-step");
    assert!(quiet_waiting, "the quiet mail waits in the Lead's inbox");
    let turns = |events: &[Value]| events.iter().filter(|e| e["type"] == "turn/start").count();
    let before = turns(&events);
    let out = s.troupe().args(["resume", &id]).assert().success();
    let text = stderr(&out);
    assert!(
        text.contains("1 quiet message waits for the Lead's next turn"),
        "{text}"
    );
    assert_eq!(turns(&s.log(&id)), before, "no Lead turn was started");
}

/// Issue 11 (item 2): the log holds the Lead's final answer but not its `turn/end` (a crash
/// between the two appends). Both the first and the second resume print that answer and exit
/// 0 without a model call (the script has no step left).
#[test]
fn a_turn_whose_answer_is_logged_is_completed_by_every_resume() {
    let s = Setup::new();
    let script = s.script_agents(
        "answer.json",
        json!({"lead": [
            {"tool_calls": [{"name": "read", "arguments": {"path": "notes.txt"}}]},
            {"text": "notes.txt says hello world."}
        ]}),
    );
    let model = format!("script:{}", script.display());
    let out = s.run(&["--model", &model, "read it"]).assert().success();
    let id = session_id(&stderr(&out));
    let file = s.home.join("sessions").join(format!("{id}.jsonl"));
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let n = lines.len();
    assert!(lines[n - 1].contains("\"turn/end\"") && lines[n - 2].contains("\"step/end\""));
    std::fs::write(&file, lines[..n - 2].join("\n") + "\n").unwrap();
    for round in ["first", "second"] {
        let out = s.troupe().args(["resume", &id]).assert();
        let err = stderr(&out);
        assert_eq!(out.get_output().status.code(), Some(0), "{round}: {err}");
        assert_eq!(
            stdout(&out),
            "notes.txt says hello world.\n",
            "{round}: {err}"
        );
        assert!(err.contains("nothing to resume"), "{round}: {err}");
    }
    let ends: Vec<Value> = s
        .log(&id)
        .into_iter()
        .filter(|e| e["type"] == "turn/end")
        .map(|e| e["data"]["reason"]["kind"].clone())
        .collect();
    assert_eq!(ends, [json!("completed")]);
}

/// Defect 8: `--model script:/dev/zero` (a device that never ends) is refused at once as bad
/// input naming it; so is a script larger than 16 MiB.
#[test]
fn a_script_that_is_not_a_small_regular_file_is_refused_at_once() {
    let s = Setup::new();
    let out = s
        .run(&["--model", "script:/dev/zero", "go"])
        .assert()
        .code(2);
    let err = stderr(&out);
    assert!(err.contains("/dev/zero is not a regular file"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let big = s.scripts.join("big.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(troupe_llm::MAX_SCRIPT_BYTES + 1)
        .unwrap();
    let out = s
        .run(&["--model", &format!("script:{}", big.display()), "go"])
        .assert()
        .code(2);
    assert!(
        stderr(&out).contains("is larger than 16 MiB"),
        "{}",
        stderr(&out)
    );
    assert!(
        !s.home.join("sessions").exists()
            || std::fs::read_dir(s.home.join("sessions"))
                .unwrap()
                .next()
                .is_none()
    );
}

/// A completed one-turn session of `s` (returns its id).
fn completed_session(s: &Setup) -> String {
    let script = s.script_agents("one.json", json!({"lead": [{"text": "done"}]}));
    let model = format!("script:{}", script.display());
    let out = s.run(&["--model", &model, "hi"]).assert().success();
    session_id(&stderr(&out))
}

/// Defect 8, one exit-code rule: damaged content is a failure of the work (1) for `log`,
/// `team show`, `team verify` and `resume` alike, naming the file; a path the OS refuses (a
/// symbolic-link loop) is bad input (2) for all of them.
#[test]
fn damaged_logs_exit_1_and_refused_paths_exit_2_for_every_command() {
    let s = Setup::new();
    let id = completed_session(&s);
    let file = s.home.join("sessions").join(format!("{id}.jsonl"));
    let good = std::fs::read_to_string(&file).unwrap();
    // A complete bad line in the middle of the log.
    let mut lines: Vec<String> = good.lines().map(str::to_owned).collect();
    lines[2] = "{not json".to_owned();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let damaged = std::fs::read(&file).unwrap();
    for args in [
        vec!["log", id.as_str()],
        vec!["resume", id.as_str()],
        vec!["team", "verify", id.as_str()],
        vec!["team", "show", id.as_str()],
    ] {
        let out = s.troupe().args(&args).assert();
        let err = stderr(&out);
        assert_eq!(out.get_output().status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!("{id}.jsonl")),
            "{args:?} names the file: {err}"
        );
    }
    assert_eq!(std::fs::read(&file).unwrap(), damaged, "nothing rewritten");
    // A symbolic-link loop where the session file should be.
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(&file, &file).unwrap();
    for args in [
        vec!["log", id.as_str()],
        vec!["resume", id.as_str()],
        vec!["team", "verify", id.as_str()],
        vec!["team", "show", id.as_str()],
    ] {
        let out = s.troupe().args(&args).assert();
        let err = stderr(&out);
        assert_eq!(out.get_output().status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
}

/// Mounts `dir` read-only onto itself for as long as it lives (a bind mount).
struct ReadOnly(PathBuf);

impl ReadOnly {
    fn mount(dir: &Path) -> Self {
        let run = |args: &[&str]| {
            let out = Command::new("mount").args(args).arg(dir).arg(dir).output();
            let out = out.unwrap_or_else(|e| panic!("this test needs mount(8): {e}"));
            assert!(
                out.status.success(),
                "this test needs to bind-mount (root with CAP_SYS_ADMIN): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(&["--bind"]);
        let guard = Self(dir.to_path_buf());
        let out = Command::new("mount")
            .args(["-o", "remount,bind,ro"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        guard
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).output();
    }
}

/// Defect 8: on a read-only home, `resume` is bad input (2, one line, as the README says) and
/// the reading commands work (0).
#[test]
fn a_read_only_home_refuses_resume_as_bad_input_and_can_still_be_read() {
    let s = Setup::new();
    let id = completed_session(&s);
    let _ro = ReadOnly::mount(&s.home);
    let out = s.troupe().args(["resume", &id]).assert();
    let err = stderr(&out);
    assert_eq!(out.get_output().status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("not writable") || err.contains("Read-only"),
        "{err}"
    );
    s.troupe().args(["log", &id]).assert().success();
    s.troupe().arg("sessions").assert().success();
}

/// Defect 8: a Lead log that breaks a Team rule is a damaged log for `resume` (exit 1), and
/// the message names the session and its file (it used to read "session  cannot be
/// resumed").
#[test]
fn resume_of_a_log_that_breaks_a_team_rule_names_the_session_and_file() {
    let s = Setup::new();
    let script = s.script_agents("team.json", json!({"lead": [{"text": "done"}]}));
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--team", "--model", &model, "hi"])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let file = s.home.join("sessions").join(format!("{id}.jsonl"));
    let events = read_events(&file);
    let seq = events.len();
    let bad = json!({"seq": seq, "time": 1, "type": "team/task", "data": {"version": 1,
        "teamId": id, "task": {"id": "task-1", "revision": 2, "subject": "s",
        "description": "d", "status": "pending", "blockedBy": [], "writeScopes": []}}});
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str(&format!("{bad}\n"));
    std::fs::write(&file, &text).unwrap();
    let out = s.troupe().args(["resume", &id]).assert();
    let err = stderr(&out);
    assert_eq!(out.get_output().status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("session {id} cannot be resumed")),
        "{err}"
    );
    assert!(err.contains(&file.display().to_string()), "{err}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        text,
        "nothing written"
    );
}

/// Defect 8: a session whose log holds a configuration but no prompt (written by an older
/// build killed before its first prompt was durable) is not "completed": resume says that no
/// turn ever ran and that a prompt is needed.
#[test]
fn a_session_without_any_prompt_says_no_turn_ever_ran() {
    let s = Setup::new();
    let id = completed_session(&s);
    let file = s.home.join("sessions").join(format!("{id}.jsonl"));
    let text = std::fs::read_to_string(&file).unwrap();
    // Header and `agent/config` only, as an older build wrote it (a batch of its own: no
    // `batchLast` naming the prompt that now shares its batch).
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let mut config: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(config["type"], "agent/config");
    config.as_object_mut().unwrap().remove("batchLast");
    std::fs::write(&file, format!("{header}\n{config}\n")).unwrap();
    let out = s.troupe().args(["resume", &id]).assert().success();
    let err = stderr(&out);
    assert!(
        err.contains("no turn ever ran and no prompt was recorded"),
        "{err}"
    );
    assert!(!err.contains("the last turn completed"), "{err}");
}

/// Defect 8: `troupe run` records its prompt in the batch that creates the session file, so
/// the very first durable state of a session already holds the prompt.
#[test]
fn the_first_durable_state_of_a_run_holds_its_prompt() {
    let s = Setup::new();
    let script = s.script_agents("one.json", json!({"lead": [{"text": "done"}]}));
    let model = format!("script:{}", script.display());
    let out = s.run(&["--model", &model, "hi"]).assert().success();
    let id = session_id(&stderr(&out));
    let events = s.log(&id);
    assert_eq!(events[0]["type"], "agent/config");
    assert_eq!(events[1]["type"], "agent/inbox/spliced");
    assert_eq!(events[1]["data"]["inserted"][0]["source"]["kind"], "user");
    assert_eq!(events[0]["time"], events[1]["time"], "one batch");
}

/// The demo project's source of `rel`, as shipped.
fn shipped(rel: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/demo/project")
            .join(rel),
    )
    .unwrap()
}

/// Defect 8: a resumed demo checks its project's tests as `troupe demo` does: with them
/// failing again, a plain resume (nothing left to run) exits 1 with `DEMO_TESTS_FAILED`; and a
/// second `troupe demo` in the same workspace is refused, naming the session to resume.
#[test]
fn a_resumed_demo_whose_tests_fail_exits_1() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let workspace = root.path().join("demo");
    let out = troupe(&home)
        .args(["demo", "--workspace"])
        .arg(&workspace)
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    // Undo alpha's fix: the project's tests fail again.
    std::fs::write(
        workspace.join("wordstats/counting.py"),
        shipped("wordstats/counting.py"),
    )
    .unwrap();
    let out = troupe(&home)
        .args(["resume", &id, "--json"])
        .assert()
        .code(1);
    let done: Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "DEMO_TESTS_FAILED", "{done}");
    // The workspace belongs to that session now.
    let out = troupe(&home)
        .args(["demo", "--workspace"])
        .arg(&workspace)
        .assert()
        .code(2);
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "is the workspace of session {id}: continue it with troupe resume {id}"
        )),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // Emptied, it holds nothing of that session's: a new demo runs there.
    std::fs::remove_dir_all(&workspace).unwrap();
    std::fs::create_dir(&workspace).unwrap();
    let out = troupe(&home)
        .args(["demo", "--workspace"])
        .arg(&workspace)
        .assert()
        .success();
    assert_ne!(session_id(&stderr(&out)), id, "a new session");
}

/// Defect 8: a demo killed before its session existed leaves only the project's files (here
/// one whole and one cut short): `troupe demo --workspace DIR` starts over there and finishes.
/// A directory with any other content is still refused, unchanged.
#[test]
fn a_demo_workspace_left_before_its_session_existed_is_started_over() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let workspace = root.path().join("demo");
    std::fs::create_dir_all(workspace.join("wordstats")).unwrap();
    std::fs::write(workspace.join("README.md"), shipped("README.md")).unwrap();
    let init = shipped("wordstats/__init__.py");
    std::fs::write(
        workspace.join("wordstats/__init__.py"),
        &init[..init.len() / 2],
    )
    .unwrap();
    troupe(&home)
        .args(["demo", "--workspace"])
        .arg(&workspace)
        .assert()
        .success();
    assert!(tests_pass(&workspace));
    let other = root.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("README.md"), "mine\n").unwrap();
    let out = troupe(&home)
        .args(["demo", "--workspace"])
        .arg(&other)
        .assert()
        .code(2);
    assert!(stderr(&out).contains("is not empty"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(other.join("README.md")).unwrap(),
        "mine\n"
    );
}

/// Defect 3 for the Lead's own log (it used to end with a teardown message only): the log
/// becomes immutable while the Lead works; `troupe run` exits 1 with `JOURNAL_FAILED` naming
/// the Lead and the OS error as its last line, and once the file is writable again `troupe
/// resume` finishes the turn.
#[test]
fn the_leads_log_failing_mid_run_is_journal_failed_and_resume_finishes() {
    let s = Setup::new();
    let script = s.script_agents(
        "slow.json",
        json!({"lead": [
            {"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]},
            {"tool_calls": [{"name": "read", "arguments": {"path": "notes.txt"}}]},
            {"text": "all done"}
        ]}),
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .arg("--home")
        .arg(&s.home)
        .env_remove("TROUPE_HOME")
        .args(["run", "--pace", "400", "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("--workspace")
        .arg(&s.workspace)
        .arg("work slowly")
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
    let deadline = Instant::now() + Duration::from_secs(60);
    let lead = loop {
        if let Some(path) = member_file(&s.home, "lead")
            && read_events(&path).iter().any(|e| e["type"] == "tool/call")
        {
            break path;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("troupe run exited ({status}) before its first tool call");
        }
        assert!(Instant::now() < deadline, "the Lead never called a tool");
        std::thread::sleep(Duration::from_millis(5));
    };
    immutable(&lead, true);
    let guard = Immutable(lead.clone());
    let status = child.wait().unwrap();
    let err = reader.join().unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("troupe: JOURNAL_FAILED: "), "{err}");
    assert!(last.contains("lead (the Lead, session "), "{last}");
    assert!(last.contains("Operation not permitted"), "{last}");
    assert!(!err.contains("shutting the agents down"), "{err}");
    // The advice is the file store's: the home's disk and permissions.
    assert!(
        err.contains("once the cause is fixed (free space, a writable home), continue with: "),
        "{err}"
    );
    let id = session_id(&err);
    immutable(&lead, false);
    drop(guard);
    let out = s.troupe().args(["resume", &id]).assert();
    assert_eq!(out.get_output().status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "all done\n");
}

/// Cuts the session file at `path` after the whole batch holding the `n`-th (from 1) event
/// that `matches` (a kill right after that durable append leaves exactly this).
fn cut_after_batch(path: &Path, n: usize, matches: impl Fn(&Value) -> bool) {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let events: Vec<Value> = lines[1..]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let at = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches(e))
        .nth(n - 1)
        .map(|(i, _)| i)
        .unwrap_or_else(|| panic!("no event {n} to cut after in {}", path.display()));
    let seq = events[at]["seq"].as_u64().unwrap();
    // The batch's last seq: named by its first event (a batch of one names none).
    let end = events[..=at]
        .iter()
        .rev()
        .find_map(|e| e["batchLast"].as_u64().filter(|last| *last >= seq))
        .unwrap_or(seq);
    let keep = events.iter().position(|e| e["seq"] == end).unwrap() + 2;
    std::fs::write(path, lines[..keep].join("\n") + "\n").unwrap();
}

/// The Lead's turn 1 is cut while a teammate's wakeup waits to be delivered; the resume's
/// mailbox recovery starts turn 2 with that wakeup before it queues turn 1's continuation,
/// and a second stop cuts turn 2 right after its start. The next resume owes the Lead two
/// continuation turns (one per cut turn, decided from the log): it runs both, so the Lead's
/// scripted work is finished (before, one continuation was queued and the Lead stopped one
/// turn short: its report was never written, yet the resume exited 0).
#[test]
fn every_cut_lead_turn_gets_its_own_continuation_turn() {
    let s = Setup::new();
    let script = s.script_agents(
        "two-cuts.json",
        json!({
            "lead": [
                {"tool_calls": [{"name": "spawn_teammate", "arguments": {
                    "name": "scout", "description": "reports", "prompt": "tell the lead"}}]},
                {"tool_calls": [{"name": "wait_agent", "arguments": {"timeout_ms": 30000}}]},
                {"text": "waiting for scout"},
                {"tool_calls": [{"name": "write", "arguments": {
                    "path": "report.txt", "content": "scout is ready\n"}}]},
                {"text": "report written"}
            ],
            "scout": [
                {"tool_calls": [{"name": "followup_task", "arguments": {
                    "target": "lead", "message": "ready"}}]},
                {"text": "told the lead"}
            ]
        }),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--team", "--model", &model, "coordinate"])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let file = s.home.join("sessions").join(format!("{id}.jsonl"));
    let report = s.workspace.join("report.txt");
    std::fs::remove_file(&report).unwrap();

    // The first stop: right after scout's wakeup for the Lead is queued (turn 1 is open).
    cut_after_batch(&file, 1, |e| e["type"] == "team/message/queued");
    s.troupe().args(["resume", &id]).assert().success();
    std::fs::remove_file(&report).unwrap();
    // The second stop: right after the resume started the Lead's turn 2 (the wakeup's).
    cut_after_batch(&file, 2, |e| e["type"] == "turn/start");
    let events = read_events(&file);
    let ends: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "turn/end")
        .map(|e| &e["data"]["reason"]["kind"])
        .collect();
    assert_eq!(ends, [&json!("interrupted")], "turn 1 closed, turn 2 open");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "user/message" && e["data"]["source"]["kind"] == "team-message"),
        "turn 2 runs the wakeup"
    );

    let out = s.troupe().args(["resume", &id]).assert();
    let err = stderr(&out);
    assert_eq!(out.get_output().status.code(), Some(0), "{err}");
    assert_eq!(stdout(&out), "report written\n", "{err}");
    assert_eq!(
        std::fs::read_to_string(&report).unwrap(),
        "scout is ready\n",
        "{err}"
    );
    troupe(&s.home)
        .args(["team", "verify", &id])
        .assert()
        .success();
}

/// A read in one `troupe` process counts for an edit in the next: `troupe resume ID PROMPT`
/// rebuilds what the Lead had seen from its log, so its edit of the file it read before works
/// (before, every restart forgot reads: `FS_NOT_OBSERVED`, read it again).
#[test]
fn a_read_before_a_resume_counts_for_an_edit_after_it() {
    let s = Setup::new();
    let script = s.script_agents(
        "read-then-edit.json",
        json!({"lead": [
            {"tool_calls": [{"name": "read", "arguments": {"path": "notes.txt"}}]},
            {"text": "notes.txt says hello world."},
            {"tool_calls": [{"name": "edit", "arguments": {
                "path": "notes.txt", "old_string": "hello", "new_string": "goodbye"}}]},
            {"text": "edited"}
        ]}),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--model", &model, "read notes.txt"])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let out = s
        .troupe()
        .args(["resume", &id, "now change hello to goodbye"])
        .assert()
        .success();
    assert_eq!(stdout(&out), "edited\n", "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(s.workspace.join("notes.txt")).unwrap(),
        "goodbye world\n"
    );
    let edit = s
        .log(&id)
        .into_iter()
        .find(|e| e["type"] == "tool/result" && e["data"]["name"] == "edit")
        .unwrap();
    assert_eq!(edit["data"]["isError"], false, "{edit}");
}

/// The resume's recovery delivers a wakeup for the Lead that a stop left queued (the Lead's
/// last turn had completed), and the Lead starts that turn at once, claiming the mail before
/// `troupe resume` looks at its inbox: the run still waits for that turn (before, it found
/// nothing waiting, "nothing to do", and shut the turn down under it: the crash sweep's
/// `task-3 in_progress`). The scripted model is paced so the turn is still running then.
#[test]
fn a_lead_turn_started_by_redelivered_mail_is_waited_for() {
    let s = Setup::new();
    let lead_done = format!(
        "for i in $(seq 600); do grep -qs '\"kind\":\"completed\"' {}/sessions/*.jsonl && exit 0; \
         sleep 0.05; done; exit 1",
        s.home.display()
    );
    let script = s.script_agents(
        "redelivered.json",
        json!({
            "lead": [
                {"tool_calls": [{"name": "spawn_teammate", "arguments": {
                    "name": "scout", "description": "reports", "prompt": "tell the lead"}}]},
                {"text": "scout reports when it is done"},
                {"tool_calls": [{"name": "write", "arguments": {
                    "path": "report.txt", "content": "scout is done\n"}}]},
                {"text": "report written"}
            ],
            "scout": [
                {"tool_calls": [{"name": "bash", "arguments": {"command": lead_done}}]},
                {"tool_calls": [{"name": "followup_task", "arguments": {
                    "target": "lead", "message": "done"}}]},
                {"text": "told the lead"}
            ]
        }),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--team", "--model", &model, "coordinate"])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let file = s.home.join("sessions").join(format!("{id}.jsonl"));
    let report = s.workspace.join("report.txt");
    std::fs::remove_file(&report).unwrap();
    // The stop: right after scout's wakeup for the Lead is queued, its turn 1 completed.
    cut_after_batch(&file, 1, |e| e["type"] == "team/message/queued");
    let ends: Vec<Value> = read_events(&file)
        .into_iter()
        .filter(|e| e["type"] == "turn/end")
        .map(|e| e["data"]["reason"]["kind"].clone())
        .collect();
    assert_eq!(ends, [json!("completed")]);

    let out = s.troupe().args(["resume", &id, "--pace", "300"]).assert();
    let err = stderr(&out);
    assert_eq!(out.get_output().status.code(), Some(0), "{err}");
    assert_eq!(stdout(&out), "report written\n", "{err}");
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "scout is done\n");
    let ends: Vec<Value> = read_events(&file)
        .into_iter()
        .filter(|e| e["type"] == "turn/end")
        .map(|e| e["data"]["reason"]["kind"].clone())
        .collect();
    assert_eq!(ends, [json!("completed"), json!("completed")], "{err}");
}

/// Quiet mail queued for a running teammate right before a crash (the Lead's
/// `team/message/queued` is durable, the teammate's inbox never got it) reaches the teammate
/// when the recovery starts it again for its continuation turn: a teammate's own start delivers
/// all its pending mail (REFERENCE c.9 mailbox recovery). Before, the Lead's mailbox pass left
/// it queued (the teammate was inactive then) and nothing delivered it afterwards: the resume
/// exited 0 with the message pending for a teammate that had run a whole turn since.
#[test]
fn quiet_mail_for_a_teammate_the_recovery_continues_is_delivered() {
    let s = Setup::new();
    let script = s.script_agents(
        "quiet-before-kill.json",
        json!({
            "lead": [
                {"tool_calls": [{"name": "spawn_teammate", "arguments": {
                    "name": "w", "description": "works", "prompt": "work"}}]},
                {"tool_calls": [{"name": "send_message", "arguments": {
                    "target": "w", "message": "note for w"}}]},
                {"tool_calls": [{"name": "wait_agent", "arguments": {"timeout_ms": 30000}}]},
                {"text": "lead done"},
                {"text": "lead done again"}
            ],
            "w": [
                {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 1"}}]},
                {"text": "w done"},
                {"text": "w done again"}
            ]
        }),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--team", "--model", &model, "go"])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let lead_file = s.home.join("sessions").join(format!("{id}.jsonl"));
    let w_file = member_file(&s.home, "w").unwrap();
    // The kill: right after the Lead's quiet message to w is durable, while w's `bash` runs
    // (w's log ends with that call: the message never reached it).
    cut_after_batch(&lead_file, 1, |e| e["type"] == "team/message/queued");
    cut_after_batch(&w_file, 1, |e| {
        e["type"] == "tool/call" && e["data"]["name"] == "bash"
    });
    let note = |events: &[Value]| {
        events
            .iter()
            .filter(|e| {
                e["type"] == "user/message"
                    && e["data"]["source"]["kind"] == "team-message"
                    && e["data"].to_string().contains("note for w")
            })
            .count()
    };
    assert_eq!(note(&read_events(&w_file)), 0, "w never got the note");

    let out = s.troupe().args(["resume", &id]).assert();
    let err = stderr(&out);
    assert_eq!(out.get_output().status.code(), Some(0), "{err}");
    let out = s
        .troupe()
        .args(["team", "show", &id, "--json"])
        .assert()
        .success();
    let view: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(view["pendingMessages"], json!([]), "{err}");
    assert_eq!(
        note(&read_events(&w_file)),
        1,
        "the note is in w's log once"
    );
    s.troupe().args(["team", "verify", &id]).assert().success();
    // A second resume has nothing left to deliver and adds no second copy.
    s.troupe().args(["resume", &id]).assert().success();
    assert_eq!(note(&read_events(&w_file)), 1);
}

/// A teammate whose session log is damaged (a bad line in the middle) or missing cannot go on
/// from it: `troupe resume` of its Team exits 1 with the journal's code and the file, line and
/// byte offset — as `troupe team verify` does — and rewrites nothing. Before, the resume
/// exited 0, the summary said only `w: no readable session`, and the teammate's work was
/// silently left where it was.
#[test]
fn a_damaged_or_missing_teammate_log_fails_the_resume_naming_it() {
    let s = Setup::new();
    let script = s.script_agents(
        "teammate.json",
        json!({
            "lead": [
                {"tool_calls": [{"name": "spawn_teammate", "arguments": {
                    "name": "w", "description": "works", "prompt": "work"}}]},
                {"tool_calls": [{"name": "wait_agent", "arguments": {"timeout_ms": 30000}}]},
                {"text": "lead done"}
            ],
            "w": [
                {"tool_calls": [{"name": "read", "arguments": {"path": "notes.txt"}}]},
                {"text": "w done"}
            ]
        }),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--team", "--model", &model, "go"])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let w_file = member_file(&s.home, "w").unwrap();
    let w_id = w_file.file_stem().unwrap().to_str().unwrap().to_owned();
    let good = std::fs::read_to_string(&w_file).unwrap();
    let mut lines: Vec<String> = good.lines().map(str::to_owned).collect();
    lines[3] = "{not json".to_owned();
    std::fs::write(&w_file, lines.join("\n") + "\n").unwrap();
    let damaged = std::fs::read(&w_file).unwrap();

    let out = s.troupe().args(["resume", &id]).assert();
    let err = stderr(&out);
    assert_eq!(out.get_output().status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with(&format!(
            "troupe: the session log of teammate w (session {w_id}) cannot be read"
        )) && last.contains("JOURNAL_CORRUPT")
            && last.contains(&format!("{w_id}.jsonl: line 4, byte offset")),
        "{err}"
    );
    assert!(
        !err.contains("continue: "),
        "no hint to give an instruction: {err}"
    );
    assert_eq!(
        std::fs::read(&w_file).unwrap(),
        damaged,
        "nothing rewritten"
    );
    let out = s.troupe().args(["resume", &id, "--json"]).assert();
    let done: Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    assert_eq!(done["status"], "failed");
    assert_eq!(done["error"]["code"], "JOURNAL_CORRUPT");

    std::fs::remove_file(&w_file).unwrap();
    let out = s.troupe().args(["resume", &id]).assert();
    let err = stderr(&out);
    assert_eq!(out.get_output().status.code(), Some(1), "{err}");
    assert!(
        err.lines().last().unwrap().contains("SESSION_NOT_FOUND"),
        "{err}"
    );
}
