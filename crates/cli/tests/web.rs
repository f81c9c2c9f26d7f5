//! `troupe web` end to end: the command's flags and output, and a real headless Chromium that
//! watches a scripted Team run in another process.
//!
//! The browser test needs Node with `crates/web/e2e/node_modules` (it runs `npm ci` there when
//! they are missing) and a
//! Chromium (`/usr/bin/chromium`, or `$TROUPE_CHROMIUM`); `.ci/run` installs both. Without them
//! it **fails**, naming what is missing and how to install it — a browser test that cannot
//! run is not a pass. `TROUPE_SKIP_BROWSER=1` is the explicit opt-out: the test then passes
//! without a browser and says `SKIPPED` on stderr.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

fn troupe() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_troupe"));
    cmd.env_remove("TROUPE_HOME");
    cmd
}

/// A child process killed when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `troupe web --port 0` on `home` and returns it with the URL it printed.
fn start_web(home: &Path) -> (Running, String) {
    let mut child = troupe()
        .args(["web", "--port", "0", "--home"])
        .arg(home)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().to_owned();
    // The panel's token rides in the URL: on loopback it is needed to answer approvals only.
    let token = url.split_once("/?token=").map_or("", |(_, t)| t);
    assert!(
        url.starts_with("http://127.0.0.1:") && token.len() == 32,
        "{url:?}"
    );
    (Running(child), url)
}

/// `HOST:PORT` of a panel URL.
fn addr_of(url: &str) -> String {
    let rest = url.trim_start_matches("http://");
    rest.split('/').next().unwrap().to_owned()
}

/// A plain HTTP/1.1 GET over loopback: (status, body).
fn http_get(url: &str, path: &str) -> (u16, String) {
    http(url, "GET", path, &[], "")
}

/// A plain HTTP/1.1 request over loopback with extra headers and a body: (status, body).
fn http(url: &str, method: &str, path: &str, headers: &[&str], body: &str) -> (u16, String) {
    let addr = addr_of(url);
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut extra = String::new();
    for header in headers {
        extra.push_str(header);
        extra.push_str("\r\n");
    }
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}Content-Length: \
         {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn a_non_loopback_address_is_refused_without_the_explicit_flag() {
    let home = tempfile::tempdir().unwrap();
    let out = troupe()
        .args(["web", "--host", "0.0.0.0", "--port", "0", "--home"])
        .arg(home.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a loopback address"), "{err}");
    assert!(err.contains("--allow-remote"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn troupe_web_prints_its_url_and_serves_the_home_read_only() {
    let home = tempfile::tempdir().unwrap();
    let (_web, url) = start_web(home.path());
    let (status, body) = http_get(&url, "/api/sessions");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"sessions": []})
    );
    let (status, body) = http_get(&url, "/api/sessions/nobody/team");
    assert_eq!(status, 404);
    assert!(body.contains("SESSION_NOT_FOUND"), "{body}");
    let (status, body) = http_get(&url, "/");
    assert_eq!(status, 200);
    assert!(body.contains("app.js"), "{body}");
    // Serving created nothing in the home.
    assert_eq!(std::fs::read_dir(home.path()).unwrap().count(), 0);
}

#[test]
fn a_port_in_use_is_one_line_that_names_the_way_out() {
    let home = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = troupe()
        .args(["web", "--port", &port, "--home"])
        .arg(home.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{err}"
    );
    assert!(err.contains("--port 0 for any free port"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn localhost_is_a_host_and_a_home_that_does_not_exist_yet_is_noted() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("not-yet");
    let mut child = troupe()
        .args(["web", "--host", "localhost", "--port", "0", "--home"])
        .arg(&home)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut url = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut url)
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut lines = [String::new(), String::new()];
    for line in &mut lines {
        stderr.read_line(line).unwrap();
    }
    let _web = Running(child);
    assert!(url.starts_with("http://127.0.0.1:"), "{url:?}");
    assert!(lines[1].contains("does not exist yet"), "{lines:?}");
    let (status, body) = http_get(url.trim(), "/api/sessions");
    assert_eq!((status, body.as_str()), (200, r#"{"sessions":[]}"#));
    assert!(!home.exists(), "serving created the home");

    let out = troupe()
        .args(["web", "--host", "my-laptop", "--port", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not an IP address (or `localhost`)"), "{err}");
}

/// The Team the browser watches: the Lead waits a moment (so the page is open), creates
/// task-1 and spawns `worker`, which pauses, claims it, pauses, completes it.
const SLOW_TEAM: &str = r#"{"agents": {
 "lead": [
  {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 4"}}]},
  {"tool_calls": [{"name": "team_task_create", "arguments": {"subject": "Slow work", "description": "Pause, claim, pause, complete."}}]},
  {"tool_calls": [{"name": "spawn_teammate", "arguments": {"name": "worker", "description": "Does the slow work", "prompt": "Do task-1."}}]},
  {"text": "worker is on task-1."}
 ],
 "worker": [
  {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 2"}}]},
  {"tool_calls": [{"name": "team_task_update", "arguments": {"task_id": "task-1", "expected_revision": 1, "action": "claim"}}]},
  {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 2"}}]},
  {"tool_calls": [{"name": "team_task_update", "arguments": {"task_id": "task-1", "expected_revision": 2, "action": "complete"}}]},
  {"text": "task-1 done."}
 ]}}"#;

/// Runs `npm ci` in `e2e` when its `node_modules` is missing (a fresh clone: the README's one
/// test command needs no setup step of its own), once per test process; tests that start at
/// the same time wait for the first one's install.
fn install_node_modules(e2e: &Path) -> Result<(), String> {
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = INSTALL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if e2e.join("node_modules/playwright-core").is_dir() {
        return Ok(());
    }
    eprintln!("npm ci in {} (no node_modules yet)", e2e.display());
    let out = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(e2e)
        .output()
        .map_err(|e| {
            format!(
                "no node_modules in {} and npm could not run: {e}",
                e2e.display()
            )
        })?;
    if !out.status.success() || !e2e.join("node_modules/playwright-core").is_dir() {
        return Err(format!(
            "no node_modules in {}: npm ci failed: {}",
            e2e.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// What the browser test needs, or why it cannot run.
fn browser_setup() -> Result<(PathBuf, PathBuf), String> {
    let e2e = Path::new(env!("CARGO_MANIFEST_DIR")).join("../web/e2e");
    let chromium = std::env::var_os("TROUPE_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    if !chromium.is_file() {
        return Err(format!("no Chromium at {}", chromium.display()));
    }
    install_node_modules(&e2e)?;
    match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => Ok((e2e, chromium)),
        _ => Err("no node on PATH".to_owned()),
    }
}

/// What the browser tests need; a panic naming what is missing, unless the explicit opt-out
/// `TROUPE_SKIP_BROWSER=1` is set (then `None`, with a note on stderr).
fn browser_or_skip() -> Option<(PathBuf, PathBuf)> {
    match browser_setup() {
        Ok(setup) => Some(setup),
        Err(why) if std::env::var("TROUPE_SKIP_BROWSER").as_deref() == Ok("1") => {
            eprintln!("SKIPPED the browser test (TROUPE_SKIP_BROWSER=1): {why}");
            None
        }
        Err(why) => panic!(
            "the browser test cannot run: {why}. It needs Chromium (apt-get install chromium, \
             or TROUPE_CHROMIUM=PATH), Node and `npm ci` in crates/web/e2e; .ci/run installs \
             them. Set TROUPE_SKIP_BROWSER=1 to skip it on purpose."
        ),
    }
}

#[test]
fn a_headless_browser_follows_a_team_live_without_reloading() {
    let Some((e2e, chromium)) = browser_or_skip() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let workspace = root.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let script = root.path().join("team.json");
    std::fs::write(&script, SLOW_TEAM).unwrap();
    std::fs::create_dir_all(&home).unwrap();

    let (_web, url) = start_web(&home);
    // An earlier session, finished: the panel, opened as a user would (the bare URL, before
    // the Team starts), shows it first and must move on to the Team by itself.
    let earlier = root.path().join("earlier.json");
    std::fs::write(&earlier, r#"{"agents": {"lead": [{"text": "hello"}]}}"#).unwrap();
    let out = troupe()
        .args(["run", "--home"])
        .arg(&home)
        .arg("--workspace")
        .arg(&workspace)
        .arg("--model")
        .arg(format!("script:{}", earlier.display()))
        .arg("Say hello.")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let screenshot = shots.join("web-panel.png");
    let _ = std::fs::remove_file(&screenshot);
    let mut browser = Command::new("node")
        .arg("panel.mjs")
        .current_dir(&e2e)
        .env("PANEL_URL", &url)
        .env("FOLLOW", "1")
        .env("TASK_ID", "task-1")
        .env("TEAMMATE", "worker")
        .env("SCREENSHOT", &screenshot)
        .env("CHROMIUM", &chromium)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut browser_out = BufReader::new(browser.stdout.take().unwrap());
    let mut browser_err_pipe = browser.stderr.take().unwrap();
    let browser_err = std::thread::spawn(move || {
        let mut text = String::new();
        browser_err_pipe.read_to_string(&mut text).unwrap();
        text
    });
    let browser = Running(browser);
    let mut ready = String::new();
    browser_out.read_line(&mut ready).unwrap();
    assert!(
        ready.contains("\"ready\""),
        "the panel did not show the earlier session: {ready:?}\n{}",
        browser_err.join().unwrap()
    );

    let mut run = troupe()
        .args(["run", "--team", "--home"])
        .arg(&home)
        .arg("--workspace")
        .arg(&workspace)
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("Do the slow work with a teammate.")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(run.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    let session = first
        .strip_prefix("session ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no session line: {first:?}"))
        .to_owned();
    let rest_of_stderr = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).unwrap();
        text
    });
    let run = Running(run);

    let mut report = String::new();
    browser_out.read_to_string(&mut report).unwrap();
    let mut browser = browser;
    let browser_status = browser.0.wait().unwrap();
    let browser_err = browser_err.join().unwrap();
    let mut run = run;
    let status = run.0.wait().unwrap();
    let run_err = rest_of_stderr.join().unwrap();
    assert!(
        browser_status.success(),
        "the browser saw a problem: {report}\n{browser_err}\nrun:\n{run_err}"
    );
    let seen: Value = serde_json::from_str(report.trim()).unwrap();
    assert_eq!(
        seen["seen"]["followed"], session,
        "the panel moved on to the new Team by itself"
    );
    assert_eq!(
        seen["seen"]["task"].as_array().unwrap().last().unwrap(),
        "completed"
    );
    assert!(
        seen["seen"]["teammate"].as_array().unwrap().len() >= 2,
        "{seen}"
    );
    // While it was live, the roster named its host: this process's (a run on the files).
    assert_eq!(seen["seen"]["host"], json!(["local"]), "{seen}");
    assert!(status.success(), "troupe run failed:\n{run_err}");
    assert!(
        screenshot.is_file(),
        "no screenshot at {}",
        screenshot.display()
    );
    eprintln!("browser saw {seen}; screenshot {}", screenshot.display());
}

/// What a person sees on the board (a real Chromium): a blocked task and a write-scope
/// overlap have different marks (they shared one ⚠), the overlap is on both tasks it concerns
/// (the task in progress and the pending one), a Team without teammates is not "no team" in
/// the picker, a long model path gets line-break chances between its parts, and the Ledger
/// section shows what each member spent (a screenshot is saved: `web-panel-ledger.png`).
#[test]
fn the_board_marks_blocked_and_overlap_apart_and_the_picker_names_teams() {
    let Some((e2e, chromium)) = browser_or_skip() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let workspace = root.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let run = |script: &str, team: bool, prompt: &str| -> String {
        let path = root
            .path()
            .join(format!("{}.json", prompt.replace(' ', "-")));
        std::fs::write(&path, script).unwrap();
        let mut cmd = troupe();
        cmd.args(["run", "--home"])
            .arg(&home)
            .arg("--workspace")
            .arg(&workspace);
        if team {
            cmd.arg("--team");
        }
        let out = cmd
            .arg("--model")
            .arg(format!("script:{}", path.display()))
            .arg(prompt)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        err.lines()
            .next()
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_owned()
    };
    run(
        r#"{"agents": {"lead": [{"text": "hello"}]}}"#,
        false,
        "no team here",
    );
    let lead = run(
        r#"{"agents": {"lead": [
          {"tool_calls": [{"name": "team_task_create", "arguments": {"subject": "Fix counting", "description": "d", "write_scopes": ["wordstats/counting.py"]}}], "usage": {"prompt_tokens": 100, "completion_tokens": 10, "cached_tokens": 30}},
          {"tool_calls": [{"name": "team_task_create", "arguments": {"subject": "Extend", "description": "d", "blocked_by": ["task-1"], "write_scopes": ["wordstats"]}}]},
          {"tool_calls": [{"name": "team_task_create", "arguments": {"subject": "Docs", "description": "d", "write_scopes": ["docs"]}}]},
          {"tool_calls": [{"name": "team_task_update", "arguments": {"task_id": "task-1", "expected_revision": 1, "action": "claim"}}]},
          {"text": "task-1 is in progress", "usage": {"prompt_tokens": 50, "completion_tokens": 5}}
        ]}}"#,
        true,
        "plan alone",
    );
    let (_web, url) = start_web(&home);
    let screenshot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-panel-ledger.png");
    let _ = std::fs::remove_file(&screenshot);
    let out = Command::new("node")
        .arg("marks.mjs")
        .current_dir(&e2e)
        .env("PANEL_URL", &url)
        .env("SESSION_ID", &lead)
        .env("CHROMIUM", &chromium)
        .env("SCREENSHOT", &screenshot)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_str(report.trim()).unwrap();
    let options: Vec<&str> = seen["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap())
        .collect();
    assert!(
        options
            .iter()
            .any(|o| o.starts_with(&lead[..8]) && o.contains(" · lead, no teammates yet · ")),
        "{options:?}"
    );
    assert!(
        options.iter().any(|o| o.contains(" · no team · ")),
        "{options:?}"
    );
    let task = |id: &str| {
        seen["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .unwrap_or_else(|| panic!("{id} missing: {seen}"))
            .clone()
    };
    let (t1, t2, t3) = (task("task-1"), task("task-2"), task("task-3"));
    assert_eq!(
        (t2["state"].as_str(), t2["icon"].as_str()),
        (Some("blocked"), Some("⊘"))
    );
    assert_eq!(t3["icon"], "○");
    assert_eq!(
        t1["warns"],
        json!(["⚠ write scopes overlap with task-2 (pending)"])
    );
    assert_eq!(
        t2["warns"],
        json!(["⚠ write scopes overlap with task-1 (in progress)"])
    );
    assert_eq!(t3["warns"], json!([]));
    assert_ne!(t2["icon"], "⚠", "blocked has its own mark");
    let model = &seen["model"];
    assert!(
        model["text"].as_str().unwrap().starts_with("script:/"),
        "{model}"
    );
    assert!(model["breaks"].as_u64().unwrap() >= 3, "{model}");
    // The Ledger section: the Lead's five answers with the usage their steps recorded (a
    // scripted model has no built-in price).
    let ledger = &seen["ledger"];
    assert_eq!(
        ledger[0],
        json!(["member", "calls", "in", "cached", "out", "tokens", "cost"])
    );
    assert_eq!(
        ledger[1],
        json!(["lead", "5", "150", "30", "15", "165", "-"])
    );
    assert_eq!(
        ledger[2],
        json!(["team", "5", "150", "30", "15", "165", "-"])
    );
    assert!(
        seen["ledgerNote"]
            .as_str()
            .unwrap()
            .contains("No price for: script"),
        "{seen}"
    );
    assert!(
        screenshot.is_file(),
        "no screenshot at {}",
        screenshot.display()
    );
}

/// The timeline slider (a real Chromium, the keyboard on the slider): at the demo's first Team
/// event the roster is the Lead alone and the board one pending task; live, the roster has both
/// teammates and every task is completed; in the middle, the view is the one `troupe team show
/// --at` gives for that event; every message's receipts are listed. Saves a screenshot of the
/// middle stop.
#[test]
fn the_timeline_slider_shows_the_roster_and_board_at_past_events() {
    let Some((e2e, chromium)) = browser_or_skip() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let out = troupe()
        .args(["demo", "--home"])
        .arg(&home)
        .arg("--workspace")
        .arg(root.path().join("project"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let lead = err
        .lines()
        .find_map(|l| l.strip_prefix("session "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_owned();
    let timeline = troupe()
        .args(["team", "log", &lead, "--json", "--home"])
        .arg(&home)
        .output()
        .unwrap();
    assert!(timeline.status.success());
    let entries: Vec<Value> = String::from_utf8_lossy(&timeline.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();

    let (_web, url) = start_web(&home);
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let screenshot = shots.join("web-timeline.png");
    let _ = std::fs::remove_file(&screenshot);
    let out = Command::new("node")
        .arg("timeline.mjs")
        .current_dir(&e2e)
        .env("PANEL_URL", &url)
        .env("SESSION_ID", &lead)
        .env("SCREENSHOT", &screenshot)
        .env("CHROMIUM", &chromium)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_str(report.trim()).unwrap();
    assert_eq!(seen["stops"], entries.len(), "{seen}");
    let names = |stop: &str| seen[stop]["members"].clone();
    let tasks = |stop: &str| seen[stop]["tasks"].clone();
    assert_eq!(names("first"), json!(["lead"]), "{seen}");
    assert_eq!(tasks("first"), json!([["task-1", "pending"]]), "{seen}");
    assert_eq!(seen["first"]["atSeq"], entries[0]["seq"].to_string());
    assert_eq!(names("live"), json!(["lead", "beta", "alpha"]), "{seen}");
    assert_eq!(
        tasks("live"),
        json!([
            ["task-1", "completed"],
            ["task-2", "completed"],
            ["task-3", "completed"]
        ]),
        "{seen}"
    );
    assert_ne!(names("first"), names("live"));
    assert_ne!(tasks("first"), tasks("live"));
    let live_receipts = seen["live"]["receipts"].as_array().unwrap();
    assert_eq!(live_receipts.len(), 5, "{seen}");
    assert!(live_receipts.iter().all(|r| r[1] == "consumed"), "{seen}");
    // The middle stop shows what `troupe team show --at` says of that event.
    let middle = entries.len() / 2;
    let seq = entries[middle]["seq"].to_string();
    assert_eq!(seen["middle"]["atSeq"], seq, "{seen}");
    let show = troupe()
        .args(["team", "show", &lead, "--json", "--at", &seq, "--home"])
        .arg(&home)
        .output()
        .unwrap();
    let show: Value = serde_json::from_slice(&show.stdout).unwrap();
    let expected_names: Vec<&str> = show["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names("middle"), json!(expected_names), "{seen}");
    let mut expected_tasks: Vec<(String, String)> = show["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap().to_owned(),
                t["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut middle_tasks: Vec<(String, String)> = seen["middle"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t[0].as_str().unwrap().to_owned(),
                t[1].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    expected_tasks.sort();
    middle_tasks.sort();
    assert_eq!(middle_tasks, expected_tasks, "{seen}");
    assert_eq!(
        seen["middle"]["receipts"].as_array().unwrap().len(),
        show["messages"].as_array().unwrap().len(),
        "{seen}"
    );
    assert!(
        screenshot.is_file(),
        "no screenshot at {}",
        screenshot.display()
    );
    eprintln!("browser saw {seen}; screenshot {}", screenshot.display());
}

/// A stalled task on the board (a real Chromium): a teammate that claimed a task and ended
/// its turn (inactive, no followup_task waiting) leaves it marked — its own ◷ line saying why,
/// a red edge — while a task the Lead holds is not; a screenshot is saved.
#[test]
fn the_board_marks_a_stalled_task() {
    let Some((e2e, chromium)) = browser_or_skip() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let workspace = root.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let script = root.path().join("stall.json");
    std::fs::write(
        &script,
        r#"{"agents": {
          "lead": [
            {"tool_calls": [{"name": "team_task_create", "arguments": {"subject": "Write the notes", "description": "d"}}]},
            {"tool_calls": [{"name": "team_task_create", "arguments": {"subject": "Review", "description": "d"}}]},
            {"tool_calls": [{"name": "team_task_update", "arguments": {"task_id": "task-2", "expected_revision": 1, "action": "claim"}}]},
            {"tool_calls": [{"name": "spawn_teammate", "arguments": {"name": "alpha", "description": "Writes", "prompt": "Take task-1."}}]},
            {"text": "alpha is on it"}
          ],
          "alpha": [
            {"tool_calls": [{"name": "team_task_update", "arguments": {"task_id": "task-1", "expected_revision": 1, "action": "claim"}}]},
            {"text": "claimed"}
          ]}}"#,
    )
    .unwrap();
    let out = troupe()
        .args(["run", "--team", "--home"])
        .arg(&home)
        .arg("--workspace")
        .arg(&workspace)
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("write the notes")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let lead = err
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_owned();
    // A second session, so the picker has the two options marks.mjs waits for.
    let plain = root.path().join("plain.json");
    std::fs::write(&plain, r#"{"agents": {"lead": [{"text": "hello"}]}}"#).unwrap();
    let out = troupe()
        .args(["run", "--home"])
        .arg(&home)
        .arg("--workspace")
        .arg(&workspace)
        .arg("--model")
        .arg(format!("script:{}", plain.display()))
        .arg("no team here")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_web, url) = start_web(&home);
    let screenshot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-stalled.png");
    let _ = std::fs::remove_file(&screenshot);
    let out = Command::new("node")
        .arg("marks.mjs")
        .current_dir(&e2e)
        .env("PANEL_URL", &url)
        .env("SESSION_ID", &lead)
        .env("CHROMIUM", &chromium)
        .env("SCREENSHOT", &screenshot)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_str(report.trim()).unwrap();
    let task = |id: &str| {
        seen["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .unwrap_or_else(|| panic!("{id} missing: {seen}"))
            .clone()
    };
    let (stalled, held) = (task("task-1"), task("task-2"));
    assert_eq!(stalled["stalled"], "inactive", "{stalled}");
    let warns = stalled["warns"].as_array().unwrap();
    assert_eq!(warns.len(), 1, "{stalled}");
    let line = warns[0].as_str().unwrap();
    assert!(
        line.starts_with(
            "◷ stalled: alpha is inactive and no followup_task waits for it · last active "
        ) && line.ends_with(" — reassign it or wake alpha"),
        "{line}"
    );
    // The panel's --fail red (#cf222e) edges the stalled task only.
    assert_eq!(stalled["border"], "rgb(207, 34, 46)", "{stalled}");
    assert_eq!(
        held["stalled"],
        Value::Null,
        "the Lead's own task is never stalled"
    );
    assert_eq!(held["warns"], json!([]));
    assert_ne!(held["border"], stalled["border"]);
    assert!(
        screenshot.is_file(),
        "no screenshot at {}",
        screenshot.display()
    );
    eprintln!("screenshot {}", screenshot.display());
}

/// The write radar in the panel (a real Chromium): the Lead claims task-1 and writes `x.txt`,
/// then spawns alpha, which reads and rewrites it — both inside task-1's window (the Lead's
/// claim is never completed; alpha's steps come after the Lead's write) — so the board shows
/// the conflict in its banner and on task-1, which is marked; a screenshot is saved.
#[test]
fn the_panel_shows_a_write_conflict_over_the_board_and_on_its_task() {
    let Some((e2e, chromium)) = browser_or_skip() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let workspace = root.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let run = |script: &str, team: bool, name: &str| -> String {
        let path = root.path().join(format!("{name}.json"));
        std::fs::write(&path, script).unwrap();
        let mut cmd = troupe();
        cmd.args(["run", "--home"])
            .arg(&home)
            .arg("--workspace")
            .arg(&workspace);
        if team {
            cmd.arg("--team");
        }
        let out = cmd
            .arg("--model")
            .arg(format!("script:{}", path.display()))
            .arg(name)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        err.lines()
            .next()
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_owned()
    };
    // A second session, for the picker the driver waits for.
    run(
        r#"{"agents": {"lead": [{"text": "hello"}]}}"#,
        false,
        "alone",
    );
    let lead = run(
        r#"{"agents": {
         "lead": [
          {"tool_calls": [{"name": "team_task_create", "arguments": {"subject": "Write x", "description": "d"}}]},
          {"tool_calls": [{"name": "team_task_update", "arguments": {"task_id": "task-1", "expected_revision": 1, "action": "claim"}}]},
          {"tool_calls": [{"name": "write", "arguments": {"path": "x.txt", "content": "lead\n"}}]},
          {"tool_calls": [{"name": "spawn_teammate", "arguments": {"name": "alpha", "description": "Rewrites x", "prompt": "Rewrite x.txt."}}]},
          {"text": "alpha is on it."}
         ],
         "alpha": [
          {"tool_calls": [{"name": "read", "arguments": {"path": "x.txt"}}]},
          {"tool_calls": [{"name": "write", "arguments": {"path": "x.txt", "content": "alpha\n"}}]},
          {"text": "rewritten."}
         ]}}"#,
        true,
        "conflict",
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("x.txt")).unwrap(),
        "alpha\n"
    );
    let (_web, url) = start_web(&home);
    let screenshot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-write-conflict.png");
    let _ = std::fs::remove_file(&screenshot);
    let out = Command::new("node")
        .arg("marks.mjs")
        .current_dir(&e2e)
        .env("PANEL_URL", &url)
        .env("SESSION_ID", &lead)
        .env("CHROMIUM", &chromium)
        .env("SCREENSHOT", &screenshot)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_str(report.trim()).unwrap();
    assert_eq!(
        seen["conflicts"],
        json!(["x.txt changed by lead, alpha (during task-1)"]),
        "{seen}"
    );
    let task = &seen["tasks"][0];
    assert_eq!(task["id"], "task-1", "{seen}");
    assert_eq!(task["conflicted"], "true", "{seen}");
    assert_eq!(
        task["warns"],
        json!(["⚠ x.txt changed by lead, alpha"]),
        "{seen}"
    );
    assert!(
        screenshot.is_file(),
        "no screenshot at {}",
        screenshot.display()
    );
}

/// The Team of the approval test: the Lead spawns `builder`, whose first step asks to write
/// outside the workspace (`OUTSIDE` is replaced by a directory next to it).
const APPROVING_TEAM: &str = r#"{"agents": {
 "lead": [
  {"tool_calls": [{"name": "spawn_teammate", "arguments": {"name": "builder", "description": "Builds the release", "prompt": "Build the release."}}]},
  {"text": "builder is on it."}
 ],
 "builder": [
  {"tool_calls": [{"name": "bash", "arguments": {"command": "echo built >> OUTSIDE/release.txt", "escalate": true, "justification": "the release directory is outside the workspace"}}]},
  {"text": "built."}
 ]}}"#;

/// A teammate's request reaches the human in the web panel, which answers it with one click
/// (a real Chromium): listed by `troupe approve LEAD` too, refused without the panel's token
/// (403, nothing changed — also from the page itself, which says why), approved with it; the
/// command then runs outside the sandbox exactly once and the teammate's log says `by: web`.
#[test]
fn the_panel_answers_a_teammates_request_with_one_click() {
    let Some((e2e, chromium)) = browser_or_skip() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let workspace = root.path().join("workspace");
    let outside = root.path().join("outside");
    for dir in [&home, &workspace, &outside] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let script = root.path().join("team.json");
    std::fs::write(
        &script,
        APPROVING_TEAM.replace("OUTSIDE", &outside.display().to_string()),
    )
    .unwrap();
    let (_web, url) = start_web(&home);
    let token = url.split_once("?token=").unwrap().1.to_owned();

    let run = troupe()
        .args(["run", "--team", "--approval", "on-request", "--home"])
        .arg(&home)
        .arg("--workspace")
        .arg(&workspace)
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("Release it.")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut run = Running(run);
    let mut stderr = BufReader::new(run.0.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    let lead = first
        .strip_prefix("session ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no session line: {first:?}"))
        .to_owned();
    let rest_of_stderr = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).unwrap();
        text
    });

    // The teammate's request, as `troupe approve LEAD` lists it.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let pending = loop {
        let out = troupe()
            .args(["approve", &lead, "--json", "--home"])
            .arg(&home)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        if let Some(first) = listed.as_array().unwrap().first() {
            break first.clone();
        }
        assert!(std::time::Instant::now() < deadline, "no request appeared");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(pending["member"], "builder", "{pending}");
    assert_ne!(
        pending["session"],
        lead.as_str(),
        "the teammate's own session"
    );
    let request = pending["id"].as_str().unwrap().to_owned();
    let member = pending["session"].as_str().unwrap().to_owned();

    // Without the token (or with another one, or from another origin): 403, nothing changed.
    let path = format!("/api/sessions/{lead}/approvals/{request}");
    let body = r#"{"decision":"approve"}"#;
    let json = "Content-Type: application/json";
    let bearer = format!("Authorization: Bearer {token}");
    for headers in [
        vec![json],
        vec![
            json,
            "Authorization: Bearer 0123456789abcdef0123456789abcdef",
        ],
        vec![json, bearer.as_str(), "Origin: http://evil.example"],
    ] {
        let (status, answer) = http(&url, "POST", &path, &headers, body);
        assert_eq!(status, 403, "{headers:?}: {answer}");
        assert!(answer.contains("WEB_TOKEN_REQUIRED"), "{answer}");
    }
    let (status, answer) = http_get(&url, &format!("/api/sessions/{lead}/approvals"));
    assert_eq!(status, 200);
    let listed: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(listed["approvals"][0]["id"], request.as_str(), "{listed}");
    assert!(
        !home
            .join("sessions")
            .join(format!("approval-{member}-{request}.jsonl"))
            .exists(),
        "a refused write decided nothing"
    );

    let screenshot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-approval.png");
    let _ = std::fs::remove_file(&screenshot);
    let out = Command::new("node")
        .arg("approve.mjs")
        .current_dir(&e2e)
        .env("PANEL_URL", &url)
        .env("SESSION_ID", &lead)
        .env("REQUEST_ID", &request)
        .env("SCREENSHOT", &screenshot)
        .env("CHROMIUM", &chromium)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_str(report.trim()).unwrap();
    let card = seen["seen"]["card"].as_str().unwrap();
    for shown in [
        "builder",
        "echo built >>",
        "the release directory is outside the workspace",
    ] {
        assert!(card.contains(shown), "{card}");
    }
    assert!(
        seen["seen"]["withoutToken"]
            .as_str()
            .unwrap()
            .contains("without its token"),
        "{seen}"
    );

    let status = run.0.wait().unwrap();
    let run_err = rest_of_stderr.join().unwrap();
    assert!(status.success(), "troupe run failed:\n{run_err}");
    assert!(
        run_err.contains(&format!(
            "approval: request {request} of builder approved by the user in the web panel"
        )),
        "{run_err}"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("release.txt")).unwrap(),
        "built\n",
        "ran once, outside the sandbox"
    );
    let log = troupe()
        .args(["log", &member, "--json", "--home"])
        .arg(&home)
        .output()
        .unwrap();
    let decided: Vec<Value> = String::from_utf8(log.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "approval/decided")
        .collect();
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(decided[0]["data"]["decision"], "approve");
    assert_eq!(decided[0]["data"]["by"], "web");
}
