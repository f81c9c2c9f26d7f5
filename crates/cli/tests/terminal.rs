//! The live area on a real terminal: `troupe demo --pace` in tmux (a real PTY and a terminal
//! that re-wraps its lines on a resize, like most), at the default 80×24 and at 40 columns,
//! and through a resize. Each run must leave **zero** stale live lines in the scrollback (a
//! live line that wrapped used to leave a copy per redraw: 216 junk lines for one paced demo
//! at 80 columns), and no live line may be as wide as the terminal while it runs.
//!
//! Needs `tmux` on `PATH` (`apt-get install tmux`; `.ci/run` installs it). Without it the
//! tests fail, unless `TROUPE_SKIP_TMUX=1` is set, which skips them with a note.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A private tmux server (its own socket), killed when the test ends.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// A tmux server for this test, or `None` when tmux is missing and the skip is asked for.
    fn start(name: &str) -> Option<Self> {
        let available = Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        if !available {
            if std::env::var("TROUPE_SKIP_TMUX").as_deref() == Ok("1") {
                eprintln!("SKIPPED (TROUPE_SKIP_TMUX=1): no tmux on PATH");
                return None;
            }
            panic!(
                "the terminal tests need tmux on PATH (apt-get install tmux; .ci/run installs \
                 it); set TROUPE_SKIP_TMUX=1 to skip them"
            );
        }
        Some(Self {
            socket: format!("troupe-test-{}-{name}", std::process::id()),
        })
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            // A test run from inside tmux must not talk to (or nest in) the user's server.
            .env_remove("TMUX")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Starts `command` (run by the pane's shell) in a `columns`×`rows` window
    /// that stays after the command exits and keeps a long history.
    fn start_pane(&self, columns: u16, rows: u16, command: &str) {
        let (columns, rows) = (columns.to_string(), rows.to_string());
        self.run(&[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            &columns,
            "-y",
            &rows,
            "sleep 600",
        ]);
        self.run(&["set-option", "-g", "history-limit", "50000"]);
        self.run(&["set-option", "-g", "remain-on-exit", "on"]);
        self.run(&["respawn-pane", "-k", "-t", "t", command]);
    }

    fn display(&self, format: &str) -> String {
        self.run(&["display-message", "-p", "-t", "t", format])
            .trim()
            .to_owned()
    }

    /// The visible screen, one string per row.
    fn screen(&self) -> Vec<String> {
        self.run(&["capture-pane", "-p", "-t", "t"])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Everything the pane ever showed (scrollback and screen), wrapped rows joined.
    fn history(&self) -> Vec<String> {
        self.run(&["capture-pane", "-p", "-J", "-t", "t", "-S", "-", "-E", "-"])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The exit status of troupe once it ended, as the pane's shell wrote it to `status`
    /// (see [`demo_command`]): tmux's own `pane_dead_status` is not waited for, since tmux
    /// may keep a dead pane's process unreaped for minutes.
    fn exit_status(&self, status: &Path) -> Option<i32> {
        // Dead: tmux read the pty to its end, so everything troupe wrote is on the screen.
        if self.display("#{pane_dead}") != "1" {
            return None;
        }
        let text = std::fs::read_to_string(status).ok()?;
        // The shell writes the number and a newline; a half-written file is read again.
        text.strip_suffix('\n')?.parse().ok()
    }

    /// The pid of troupe: the only child of the pane's shell.
    fn troupe_pid(&self) -> i32 {
        let shell: i32 = self.display("#{pane_pid}").parse().unwrap();
        let children =
            std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap();
        let pids: Vec<i32> = children
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        assert_eq!(
            pids.len(),
            1,
            "the pane's shell runs troupe alone: {pids:?}"
        );
        pids[0]
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .env_remove("TMUX")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

/// A line of the live area: its status line (`[3s] …`), a member row, the board or the
/// message counts (indented by two spaces, unlike the permanent `board: …` lines).
fn is_live_line(line: &str) -> bool {
    let status = line.strip_prefix('[').is_some_and(|rest| {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        digits > 0 && rest[digits..].starts_with("s] ")
    });
    let member = ["lead", "alpha", "beta"].iter().any(|name| {
        line.strip_prefix("  ")
            .and_then(|l| l.strip_prefix(name))
            .is_some_and(|rest| {
                let rest = rest.trim_start();
                ["running", "idle", "inactive", "failed", "provisioning"]
                    .iter()
                    .any(|s| rest.starts_with(s))
            })
    });
    status || member || line.starts_with("  board: ") || line.starts_with("  messages: ")
}

fn width(line: &str) -> usize {
    line.chars().count()
}

/// A demo in a fresh home and workspace, as the command the pane runs: a shell runs troupe
/// and writes its exit status to `root/status`. Troupe is the shell's child, not the pane's
/// process, because tmux sends SIGCONT at once to a pane process that stops (so the resize
/// test could not hold troupe still), and because tmux may leave a dead pane's process
/// unreaped (so its `pane_dead_status` never comes).
fn demo_command(root: &Path, pace: u32) -> String {
    let troupe = PathBuf::from(env!("CARGO_BIN_EXE_troupe"));
    format!(
        "env -u TROUPE_HOME -u COLUMNS -u LINES {} --home {} demo --workspace {} --pace {pace}; \
         echo $? > {}",
        troupe.display(),
        root.join("home").display(),
        root.join("demo").display(),
        status_file(root).display()
    )
}

/// Where the pane's shell writes troupe's exit status.
fn status_file(root: &Path) -> PathBuf {
    root.join("status")
}

/// What a run looked like: the live rows seen while it ran (each screen's rows from its status
/// line down), and the scrollback afterwards.
struct Watched {
    live_rows: Vec<String>,
    screens_with_live_area: usize,
    history: Vec<String>,
}

/// The rows of the live area on `screen` (from its status line down), if it is drawn.
fn live_area(screen: &[String]) -> Option<&[String]> {
    let top = screen
        .iter()
        .rposition(|l| l.starts_with('[') && is_live_line(l))?;
    let end = screen
        .iter()
        .rposition(|r| !r.is_empty())
        .map_or(top, |e| e + 1);
    Some(&screen[top..end.max(top + 1)])
}

/// Watches the pane until its command ends (generous deadline), checking every screen: at
/// most one status line, and every live row narrower than the terminal is now.
fn watch(tmux: &Tmux, root: &Path, mut on_screen: impl FnMut(&Tmux, &[String])) -> Watched {
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut watched = Watched {
        live_rows: Vec::new(),
        screens_with_live_area: 0,
        history: Vec::new(),
    };
    let status = loop {
        if let Some(status) = tmux.exit_status(&status_file(root)) {
            break status;
        }
        assert!(Instant::now() < deadline, "the demo did not finish");
        let columns: usize = tmux.display("#{window_width}").parse().unwrap();
        let screen = tmux.screen();
        let statuses = screen.iter().filter(|l| l.starts_with('[')).count();
        assert!(
            statuses <= 1,
            "two status lines on one screen:\n{}",
            screen.join("\n")
        );
        if let Some(area) = live_area(&screen) {
            watched.screens_with_live_area += 1;
            for row in area {
                assert!(
                    width(row) < columns,
                    "a live row is {} wide on a {columns}-column terminal: {row:?}\n{}",
                    width(row),
                    screen.join("\n")
                );
                watched.live_rows.push(row.clone());
            }
        }
        on_screen(tmux, &screen);
        std::thread::sleep(Duration::from_millis(50));
    };
    watched.history = tmux.history();
    assert_eq!(
        status,
        0,
        "the demo failed:\n{}",
        watched.history.join("\n")
    );
    watched
}

fn assert_no_stale_lines(history: &[String], columns: usize) {
    let stale: Vec<&String> = history.iter().filter(|l| is_live_line(l)).collect();
    assert!(
        stale.is_empty(),
        "{} stale live lines at {columns} columns:\n{}\n--- the whole scrollback:\n{}",
        stale.len(),
        stale
            .iter()
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        history.join("\n")
    );
    assert!(
        history
            .iter()
            .any(|l| l.starts_with("demo done: the project is in")),
        "{}",
        history.join("\n")
    );
    assert!(
        history
            .iter()
            .any(|l| l.starts_with("board: task-1 completed (alpha)")),
        "the permanent board lines are there:\n{}",
        history.join("\n")
    );
}

/// `troupe demo --pace 100` on an 80×24 and on a 40×24 terminal: the live area is drawn (a
/// status line, three member rows, the board, the message counts), never as wide as the
/// terminal, and leaves nothing behind.
#[test]
fn the_demos_live_area_fits_80_and_40_columns_and_leaves_no_stale_line() {
    for columns in [80u16, 40] {
        let Some(tmux) = Tmux::start(&format!("fit{columns}")) else {
            return;
        };
        let root = tempfile::tempdir().unwrap();
        tmux.start_pane(columns, 24, &demo_command(root.path(), 100));
        let watched = watch(&tmux, root.path(), |_, _| {});
        assert!(
            watched.screens_with_live_area > 0,
            "the live area was never seen at {columns} columns"
        );
        for needle in [
            "  lead ",
            "  beta ",
            "  alpha ",
            "  board: ",
            "  messages: ",
        ] {
            assert!(
                watched.live_rows.iter().any(|r| r.starts_with(needle)),
                "{needle:?} never shown at {columns} columns: {:#?}",
                watched.live_rows
            );
        }
        assert_no_stale_lines(&watched.history, usize::from(columns));
    }
}

/// The terminal is narrowed from 100 to 40 columns while the demo runs (troupe stopped for
/// the resize itself, so that tmux has drawn everything troupe wrote before it re-wraps the
/// screen): the next redraw follows the new width (SIGWINCH), erases the re-wrapped area, and
/// the run leaves no stale line.
#[test]
fn a_narrowed_terminal_is_followed_and_leaves_no_stale_line() {
    let Some(tmux) = Tmux::start("resize") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    tmux.start_pane(100, 24, &demo_command(root.path(), 150));
    let mut resized = false;
    let status = status_file(root.path());
    let watched = watch(&tmux, root.path(), |tmux, screen| {
        // Once the screen is full (so the whole area can still be reached after tmux
        // re-wraps it) and the live area is drawn, narrow the window once.
        let full = tmux.display("#{history_size}").parse::<u64>().unwrap_or(0) > 0;
        if resized || !full || live_area(screen).is_none() {
            return;
        }
        let pid = tmux.troupe_pid();
        let pid = rustix::process::Pid::from_raw(pid).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        tmux.run(&["resize-window", "-t", "t", "-x", "40"]);
        std::thread::sleep(Duration::from_millis(300));
        rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
        resized = true;
        // The SIGWINCH redraw: soon, every live row fits the 40 columns (tmux re-wrapped the
        // old rows to exactly 40).
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let screen = tmux.screen();
            if tmux.exit_status(&status).is_some()
                || live_area(&screen).is_some_and(|area| area.iter().all(|r| width(r) < 40))
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the live area was not redrawn for 40 columns:\n{}",
                screen.join("\n")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    assert!(
        resized,
        "the demo ended before the window could be narrowed"
    );
    assert_eq!(tmux.display("#{window_width}"), "40");
    assert_no_stale_lines(&watched.history, 40);
}

/// The request on screen waiting for an answer: the id in the prompt on the last written row
/// (`approve lead's request ID? [y]es / [n]o / [a]lways this command: `), when it is there.
fn open_prompt(screen: &[String]) -> Option<String> {
    let last = screen.iter().rev().find(|r| !r.trim().is_empty())?;
    let rest = last.strip_prefix("approve lead's request ")?;
    let (id, tail) = rest.split_once('?')?;
    (tail.trim() == "[y]es / [n]o / [a]lways this command:").then(|| id.to_owned())
}

/// Approvals answered at the terminal of `troupe run` (a real PTY in tmux): the prompt names
/// the member, the command and why; `n` denies, `y` approves once, `a` approves that exact
/// command for the rest of the session (the next identical request is approved without a
/// question), each recorded as decided by the terminal (or by the `always`).
#[test]
fn approvals_are_answered_at_the_terminal_with_y_n_and_a() {
    let Some(tmux) = Tmux::start("approve") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let (home, workspace, outside) = (
        root.path().join("home"),
        root.path().join("ws"),
        root.path().join("outside"),
    );
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let write = |name: &str| format!("echo {name} >> {}", outside.join(name).display());
    let escalate = |command: &str, why: &str| {
        serde_json::json!({"tool_calls": [{"name": "bash", "arguments": {
            "command": command, "escalate": true, "justification": why}}]})
    };
    let script = root.path().join("script.json");
    let steps = serde_json::json!({"agents": {"lead": [
        escalate(&write("no"), "first: deny me"),
        escalate(&write("yes"), "second: approve me once"),
        escalate(&write("always"), "third: approve me always"),
        escalate(&write("always"), "fourth: already allowed"),
        {"text": "asked four times"}
    ]}});
    std::fs::write(&script, steps.to_string()).unwrap();
    let troupe = PathBuf::from(env!("CARGO_BIN_EXE_troupe"));
    let command = format!(
        "env -u TROUPE_HOME {} --home {} run --workspace {} --model script:{} --approval \
         on-request 'ask away'; echo $? > {}",
        troupe.display(),
        home.display(),
        workspace.display(),
        script.display(),
        status_file(root.path()).display()
    );
    tmux.start_pane(120, 40, &command);
    let mut answered: Vec<String> = Vec::new();
    let answers = ["n", "y", "a"];
    let deadline = Instant::now() + Duration::from_secs(240);
    let status = loop {
        if let Some(status) = tmux.exit_status(&status_file(root.path())) {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the run did not finish:\n{}",
            tmux.screen().join("\n")
        );
        let screen = tmux.screen();
        if let Some(id) = open_prompt(&screen)
            && !answered.contains(&id)
        {
            let answer = answers
                .get(answered.len())
                .unwrap_or_else(|| panic!("a fourth question:\n{}", screen.join("\n")));
            tmux.run(&["send-keys", "-t", "t", answer, "Enter"]);
            answered.push(id);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let history = tmux.history().join("\n");
    assert_eq!(status, 0, "{history}");
    assert_eq!(answered.len(), 3, "three questions: {history}");
    // What the question showed, and the answers on the prompt lines.
    for shown in [
        "approval: lead asks to run a command outside the sandbox",
        "  because: first: deny me",
        &format!("  $ {}", write("no")),
        "answer here, or answer with: troupe approve ",
    ] {
        assert!(history.contains(shown), "{shown:?} not shown:\n{history}");
    }
    for (id, answer) in answered.iter().zip(answers) {
        let line =
            format!("approve lead's request {id}? [y]es / [n]o / [a]lways this command: {answer}");
        assert!(history.contains(&line), "{line:?} missing:\n{history}");
    }
    assert!(!outside.join("no").exists(), "denied");
    let read = |name: &str| std::fs::read_to_string(outside.join(name)).unwrap();
    assert_eq!(read("yes"), "yes\n");
    assert_eq!(
        read("always"),
        "always\nalways\n",
        "the fourth ran without a question"
    );

    let sessions = std::fs::read_dir(home.join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| !n.starts_with("approval-"))
        .unwrap();
    let log = std::fs::read_to_string(home.join("sessions").join(sessions)).unwrap();
    let decided: Vec<(String, String)> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["type"] == "approval/decided")
        .map(|e| {
            (
                e["data"]["decision"].as_str().unwrap().to_owned(),
                e["data"]["by"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want = [
        ("deny", "terminal"),
        ("approve", "terminal"),
        ("always", "terminal"),
        ("approve", "always"),
    ];
    assert_eq!(
        decided,
        want.map(|(d, b)| (d.to_owned(), b.to_owned())),
        "{log}"
    );
}

/// Waits (generous deadline) until the pane's scrollback and screen hold a line containing
/// `needle`; returns everything shown.
fn wait_shown(tmux: &Tmux, needle: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let history = tmux.history();
        if history.iter().any(|l| l.contains(needle)) {
            return history;
        }
        assert!(
            Instant::now() < deadline,
            "{needle:?} was never shown:\n{}",
            history.join("\n")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Types `line` into the pane and, once it is shown after the prompt (or after 2 s), presses
/// Enter — as a person does. (Keys that reach the line editor in one read while it waits for
/// output to print above the prompt are shown only at the next key: rustyline's external
/// printer selects on the terminal without looking at what it has buffered. The Enter, a
/// separate key, brings them.)
fn type_line(tmux: &Tmux, line: &str) {
    tmux.run(&["send-keys", "-t", "t", "-l", line]);
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline
        && !tmux
            .screen()
            .iter()
            .any(|l| l.strip_prefix("> ") == Some(line))
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    tmux.run(&["send-keys", "-t", "t", "Enter"]);
}

/// The events of a session file, read without a lock while a run writes it.
fn session_events(home: &Path, id: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(home.join("sessions").join(format!("{id}.jsonl")))
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `troupe chat` on a real terminal (tmux), talking to a Team another process runs: opened
/// without a session (the Team started last), one exchange with the Lead (a typed line, the
/// Lead's answer shown above the prompt), one `@alpha` message (alpha, busy in a turn, takes it
/// as its next turn and its answer is shown), `/board` and `/agents`, then `/quit` (exit 0).
/// Each member's model saw the line once, framed `Message from the user:`.
#[test]
fn chat_talks_to_the_lead_and_to_a_teammate() {
    use serde_json::json;
    let Some(tmux) = Tmux::start("chat") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let (home, workspace) = (root.path().join("home"), root.path().join("ws"));
    std::fs::create_dir(&workspace).unwrap();
    let script = root.path().join("team.json");
    let call = |name: &str, arguments: serde_json::Value| json!({"tool_calls": [{"name": name, "arguments": arguments}]});
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                {"text": "spawned alpha"},
                {"text": "hello from the lead"},
                {"text": "lead spare answer"},
            ],
            "alpha": [
                call("bash", json!({"command": "while [ ! -f go ]; do sleep 0.05; done", "timeout_ms": 600000})),
                {"text": "alpha finished the first task"},
                {"text": "alpha heard you"},
                {"text": "alpha spare answer"},
            ],
        }})
        .to_string(),
    )
    .unwrap();
    let troupe = PathBuf::from(env!("CARGO_BIN_EXE_troupe"));
    let mut run = Command::new(&troupe)
        .arg("--home")
        .arg(&home)
        .env_remove("TROUPE_HOME")
        .args(["run", "--team", "--workspace"])
        .arg(&workspace)
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("fix it")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The Team runs and alpha waits in its loop (its process group is recorded).
    let deadline = Instant::now() + Duration::from_secs(120);
    let (lead, alpha) = loop {
        assert!(Instant::now() < deadline, "the Team never got going");
        std::thread::sleep(Duration::from_millis(20));
        let Some(lead) = std::fs::read_dir(home.join("run")).ok().and_then(|mut d| {
            d.find_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".sock").map(str::to_owned)
            })
        }) else {
            continue;
        };
        let Some(alpha) = session_events(&home, &lead).iter().find_map(|e| {
            (e["type"] == "team/member")
                .then(|| e["data"]["member"]["id"].as_str().unwrap().to_owned())
        }) else {
            continue;
        };
        let lead_answered = session_events(&home, &lead)
            .iter()
            .any(|e| e["type"] == "turn/end");
        if lead_answered
            && session_events(&home, &alpha)
                .iter()
                .any(|e| e["type"] == "tool/process")
        {
            break (lead, alpha);
        }
    };
    let status = status_file(root.path());
    tmux.start_pane(
        100,
        30,
        &format!(
            "env -u TROUPE_HOME {} --home {} chat; echo $? > {}",
            troupe.display(),
            home.display(),
            status.display()
        ),
    );
    wait_shown(&tmux, &format!("chat with the Team of {lead} (running)"));
    type_line(&tmux, "hello lead, how is it going?");
    wait_shown(&tmux, "→ delivered to lead (seq ");
    wait_shown(&tmux, "lead: hello from the lead");
    type_line(&tmux, "@alpha please also check the docs");
    wait_shown(&tmux, "→ delivered to alpha (seq ");
    std::fs::write(workspace.join("go"), "").unwrap();
    wait_shown(&tmux, "alpha: alpha finished the first task");
    wait_shown(&tmux, "alpha: alpha heard you");
    type_line(&tmux, "/board");
    wait_shown(&tmux, "board: no tasks");
    type_line(&tmux, "/agents");
    let shown = wait_shown(&tmux, "agent: alpha ");
    assert!(
        shown.iter().any(|l| l.starts_with("agent: lead ")),
        "{}",
        shown.join("\n")
    );
    type_line(&tmux, "/quit");
    let deadline = Instant::now() + Duration::from_secs(60);
    let code = loop {
        if let Some(code) = tmux.exit_status(&status) {
            break code;
        }
        assert!(Instant::now() < deadline, "chat did not leave on /quit");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, 0, "{}", tmux.history().join("\n"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while run.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the Team run did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(run.wait().unwrap().success());
    for (id, text) in [
        (&lead, "hello lead, how is it going?"),
        (&alpha, "please also check the docs"),
    ] {
        let seen: Vec<_> = session_events(&home, id)
            .into_iter()
            .filter(|e| {
                e["type"] == "user/message" && e["data"]["content"].to_string().contains(text)
            })
            .map(|e| e["data"]["content"].clone())
            .collect();
        assert_eq!(
            seen,
            vec![json!([
                {"type": "text", "text": "Message from the user:"},
                {"type": "text", "text": text}
            ])]
        );
    }
}

/// `troupe chat` deciding an approval and stopping a live Team (a real terminal, tmux): a
/// Team run with `--approval on-request` asks to run a command outside the sandbox; `/approve`
/// without an argument approves the one pending request (it runs once, decided by `chat`).
/// Ctrl-C then interrupts the Lead's running `bash` through the control socket: the run ends,
/// the chat stays, and `/agents` says the Team is not running. A resume runs it again, and
/// Ctrl-D leaves the chat (exit 0) and parks that resumed run as well. A last `troupe resume`
/// finishes the work: nothing was lost.
#[test]
fn chat_approves_interrupts_with_ctrl_c_and_parks_with_ctrl_d() {
    use serde_json::json;
    let Some(tmux) = Tmux::start("chatstop") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let (home, workspace, outside) = (
        root.path().join("home"),
        root.path().join("ws"),
        root.path().join("outside"),
    );
    std::fs::create_dir(&workspace).unwrap();
    std::fs::create_dir(&outside).unwrap();
    let target = outside.join("chat.txt");
    let script = root.path().join("lead.json");
    let bash = |arguments: serde_json::Value| json!({"tool_calls": [{"name": "bash", "arguments": arguments}]});
    std::fs::write(
        &script,
        json!({"agents": {"lead": [
            bash(json!({"command": format!("echo x >> {}", target.display()),
                "escalate": true, "justification": "publish it"})),
            bash(json!({"command": "while [ ! -f go ]; do sleep 0.05; done", "timeout_ms": 600000})),
            {"text": "lead done"},
        ]}})
        .to_string(),
    )
    .unwrap();
    let troupe = PathBuf::from(env!("CARGO_BIN_EXE_troupe"));
    let spawn = |args: &[&str]| {
        Command::new(&troupe)
            .arg("--home")
            .arg(&home)
            .env_remove("TROUPE_HOME")
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let model = format!("script:{}", script.display());
    let ws = workspace.display().to_string();
    let mut run = spawn(&[
        "run",
        "--team",
        "--approval",
        "on-request",
        "--workspace",
        &ws,
        "--model",
        &model,
        "ship it",
    ]);
    let socket = |lead: &str| home.join("run").join(format!("{lead}.sock"));
    let processes = |lead: &str| {
        session_events(&home, lead)
            .iter()
            .filter(|e| e["type"] == "tool/process")
            .count()
    };
    let wait_until = |what: &str, done: &mut dyn FnMut() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let mut lead = String::new();
    wait_until("the Lead never asked", &mut || {
        let Some(id) = std::fs::read_dir(home.join("run")).ok().and_then(|mut d| {
            d.find_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".sock").map(str::to_owned)
            })
        }) else {
            return false;
        };
        lead = id;
        session_events(&home, &lead)
            .iter()
            .any(|e| e["type"] == "approval/requested")
    });
    let status = status_file(root.path());
    tmux.start_pane(
        120,
        30,
        &format!(
            "env -u TROUPE_HOME {} --home {} chat {lead}; echo $? > {}",
            troupe.display(),
            home.display(),
            status.display()
        ),
    );
    wait_shown(&tmux, &format!("chat with the Team of {lead} (running)"));
    type_line(&tmux, "/approve --sometimes");
    wait_shown(&tmux, "usage: /approve [REQUEST] [--deny|--always]");
    type_line(&tmux, "/approve");
    wait_shown(&tmux, "approval: approved request ");
    wait_shown(&tmux, "lead: request ");
    // The approved command ran (once), then the Lead's loop runs in the sandbox.
    wait_until("the loop never started", &mut || processes(&lead) >= 2);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "x\n");
    let decided: Vec<_> = session_events(&home, &lead)
        .into_iter()
        .filter(|e| e["type"] == "approval/decided")
        .map(|e| (e["data"]["decision"].clone(), e["data"]["by"].clone()))
        .collect();
    assert_eq!(decided, [(json!("approve"), json!("chat"))]);

    // Ctrl-C: the running turn stops, the run ends; the chat stays.
    tmux.run(&["send-keys", "-t", "t", "C-c"]);
    wait_shown(
        &tmux,
        "interrupting: the running turns stop, every inbox is kept",
    );
    wait_until("the run did not end on the chat's Ctrl-C", &mut || {
        run.try_wait().unwrap().is_some()
    });
    assert!(!socket(&lead).exists(), "the run stopped serving");
    let cut = |lead: &str| {
        session_events(&home, lead)
            .iter()
            .filter(|e| e["type"] == "turn/end" && e["data"]["reason"] != "completed")
            .count()
    };
    assert_eq!(cut(&lead), 1, "the turn was cut");
    type_line(&tmux, "/agents");
    wait_shown(&tmux, "(the Team is not running)");
    assert!(tmux.exit_status(&status).is_none(), "the chat stays");

    // A resume runs the loop again; Ctrl-D leaves and parks it.
    let before = processes(&lead);
    let mut resumed = spawn(&["resume", &lead]);
    wait_until("the resume never ran the loop", &mut || {
        socket(&lead).exists() && processes(&lead) > before
    });
    tmux.run(&["send-keys", "-t", "t", "C-d"]);
    wait_shown(&tmux, "leaving: the Team is parked");
    let deadline = Instant::now() + Duration::from_secs(60);
    let code = loop {
        if let Some(code) = tmux.exit_status(&status) {
            break code;
        }
        assert!(Instant::now() < deadline, "chat did not leave on Ctrl-D");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, 0, "{}", tmux.history().join("\n"));
    wait_until("the resumed run was not parked", &mut || {
        resumed.try_wait().unwrap().is_some()
    });
    assert_eq!(cut(&lead), 2, "the resumed turn was cut too");

    // Nothing was lost: the next resume finishes the work.
    std::fs::write(workspace.join("go"), "").unwrap();
    let out = Command::new(&troupe)
        .arg("--home")
        .arg(&home)
        .env_remove("TROUPE_HOME")
        .args(["resume", &lead])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "lead done\n");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "x\n",
        "never again"
    );
}

/// `troupe demo --placement workers` with two `troupe worker`s on a real `nats-server`: the
/// Lead's live area shows each teammate a worker hosts as `running` (or `idle`) `on <worker>`,
/// never as `inactive` while its task is in progress there, and the placement's warnings do
/// not break it (each screen has one live area; none is left in the scrollback).
#[test]
fn the_live_area_shows_teammates_running_on_workers() {
    let Some(server) = troupe_test_support::NatsServer::single() else {
        return;
    };
    let Some(tmux) = Tmux::start("workers") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let workspace = root.path().join("demo");
    std::fs::create_dir_all(&workspace).unwrap();
    let troupe = PathBuf::from(env!("CARGO_BIN_EXE_troupe"));
    let mut workers = Vec::new();
    for name in ["w1", "w2"] {
        let log = root.path().join(format!("{name}.stderr"));
        let child = Command::new(&troupe)
            .env("TROUPE_LEASE_TTL", "6s")
            .arg("--home")
            .arg(root.path().join(format!("home-{name}")))
            .args([
                "--store",
                &server.url(),
                "worker",
                "--name",
                name,
                "--workspace",
            ])
            .arg(&workspace)
            .args(["--pace", "150"])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        workers.push(Killed(child));
        let start = Instant::now();
        while !std::fs::read_to_string(&log).unwrap().contains("serving") {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "worker {name} never started"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let command = format!(
        "env -u TROUPE_HOME -u COLUMNS -u LINES TROUPE_LEASE_TTL=6s {} --home {} --store {} \
         demo --workspace {} --placement workers --pace 150; echo $? > {}",
        troupe.display(),
        root.path().join("home").display(),
        server.url(),
        workspace.display(),
        status_file(root.path()).display()
    );
    tmux.start_pane(100, 30, &command);
    let watched = watch(&tmux, root.path(), |_, _| {});
    let on_worker = |name: &str| {
        watched.live_rows.iter().any(|r| {
            let cells: Vec<&str> = r.split_whitespace().collect();
            cells.len() >= 4
                && cells[0] == name
                && (cells[1] == "running" || cells[1] == "idle")
                && cells[2] == "on"
                && (cells[3] == "w1" || cells[3] == "w2")
        })
    };
    for name in ["alpha", "beta"] {
        assert!(
            on_worker(name),
            "{name} never shown on its worker: {:#?}",
            watched.live_rows
        );
    }
    // The placement's warnings (a full worker skipped) are printed above the live area,
    // not into it: nothing stale is left.
    assert_no_stale_lines(&watched.history, 100);
    drop(workers);
}

/// A child process killed when the test ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
