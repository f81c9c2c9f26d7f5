//! Approvals through the real binary (`--approval on-request`, scripted `bash` calls with
//! `escalate: true` that write outside the workspace, which the sandbox denies otherwise):
//! refused with `--approval never`; denied by the timeout; answered with `troupe approve` from
//! another process while the run waits (approve, `--deny`, and the bad input: a request that
//! does not exist or was already decided); and across `kill -9` — a pending request stays
//! pending, the resume asks again and runs it exactly once; a request approved while nothing
//! runs is taken by the resume; an approved command the crash cut is never run again. The
//! terminal's own `y`/`n`/`a` are in `tests/terminal.rs` (tmux), the panel's button in
//! `tests/web.rs` (Chromium).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::run::{Setup, session_id, stderr, stdout};

/// A `bash` call that asks to run `command` outside the sandbox.
fn escalate(command: &str, why: &str) -> Value {
    json!({"tool_calls": [{"name": "bash", "arguments": {
        "command": command, "escalate": true, "justification": why}}]})
}

fn text(answer: &str) -> Value {
    json!({"text": answer})
}

/// A directory next to the workspace (outside it: the sandbox refuses writes there).
fn outside(s: &Setup) -> PathBuf {
    let dir = s.workspace.parent().unwrap().join("outside");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The lines of `file`, none when it does not exist.
fn lines(file: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .map(|t| t.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The events of `kind` in session `id`.
fn of_type(s: &Setup, id: &str, kind: &str) -> Vec<Value> {
    s.log(id)
        .into_iter()
        .filter(|e| e["type"] == kind)
        .collect()
}

/// The `bash` results of session `id`, in order (the record, with `content` parsed).
fn bash_results(s: &Setup, id: &str) -> Vec<Value> {
    of_type(s, id, "tool/result")
        .into_iter()
        .filter(|e| e["data"]["name"] == "bash")
        .map(|mut e| {
            let content: Value =
                serde_json::from_str(e["data"]["content"].as_str().unwrap()).unwrap();
            e["data"]["content"] = content;
            e["data"].clone()
        })
        .collect()
}

/// A `troupe` child process whose stderr is collected as it comes (so a test can wait for a
/// line), killed when dropped.
struct Running {
    child: Child,
    err: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    fn spawn(s: &Setup, args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_troupe"))
            .arg("--home")
            .arg(&s.home)
            .env_remove("TROUPE_HOME")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let err = Arc::new(Mutex::new(String::new()));
        let pipe = child.stderr.take().unwrap();
        let sink = Arc::clone(&err);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let mut text = sink.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        });
        Self {
            child,
            err,
            reader: Some(reader),
        }
    }

    fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    /// Waits (generously) until stderr holds `needle`; panics if the process ends first.
    fn wait_for(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let err = self.stderr();
            if err.contains(needle) {
                return err;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("troupe ended ({status}) before printing {needle:?}:\n{err}");
            }
            assert!(Instant::now() < deadline, "{needle:?} never came:\n{err}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for the process to end: (exit code, stdout, stderr).
    fn finish(mut self) -> (i32, String, String) {
        let status = self.child.wait().unwrap();
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        let mut out = String::new();
        if let Some(mut pipe) = self.child.stdout.take() {
            use std::io::Read;
            pipe.read_to_string(&mut out).unwrap();
        }
        (status.code().unwrap_or(-1), out, self.stderr())
    }

    fn kill_9(mut self) -> String {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
        let status = self.child.wait().unwrap();
        assert_eq!(status.code(), None, "killed by a signal");
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        self.stderr()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pending requests of `session`, as `troupe approve SESSION --json` lists them.
fn pending(s: &Setup, session: &str) -> Vec<Value> {
    let out = s
        .troupe()
        .args(["approve", session, "--json"])
        .assert()
        .success();
    let listed: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    listed.as_array().unwrap().clone()
}

/// Waits (generously) until `session` has a pending request; returns it.
fn wait_pending(s: &Setup, session: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(first) = pending(s, session).into_iter().next() {
            return first;
        }
        assert!(Instant::now() < deadline, "no request became pending");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts `troupe run --approval on-request` with `lead` as the Lead's steps (and `extra`
/// flags); returns the process and the session id (from its first stderr line).
fn start_run(s: &Setup, name: &str, lead: Value, extra: &[&str]) -> (Running, String) {
    let script = s.script_agents(name, json!({ "lead": lead }));
    let model = format!("script:{}", script.display());
    let workspace = s.workspace.display().to_string();
    let mut args = vec![
        "run",
        "--workspace",
        &workspace,
        "--model",
        &model,
        "--approval",
        "on-request",
    ];
    args.extend_from_slice(extra);
    args.push("do it");
    let mut run = Running::spawn(s, &args);
    let err = run.wait_for("\n");
    (run, session_id(&err))
}

#[test]
fn with_approval_never_an_escalation_is_refused_and_bad_modes_are_bad_input() {
    let s = Setup::new();
    let out_dir = outside(&s);
    let target = out_dir.join("never.txt");
    let script = s.script_agents(
        "never.json",
        json!({"lead": [escalate(&format!("echo x >> {}", target.display()), "needs it"), text("ok")]}),
    );
    let model = format!("script:{}", script.display());
    let out = s.run(&["--model", &model, "do it"]).assert().success();
    let id = session_id(&stderr(&out));
    let results = bash_results(&s, &id);
    assert_eq!(results[0]["code"], "APPROVAL_DISABLED", "{results:?}");
    let message = results[0]["content"]["message"].as_str().unwrap();
    assert!(message.contains("--approval never"), "{message}");
    assert!(!target.exists(), "nothing ran");
    assert!(of_type(&s, &id, "approval/requested").is_empty());
    // The bash tool does not offer escalate in this mode; the mode is recorded.
    let request = &of_type(&s, &id, "agent/config")[0]["data"];
    assert_eq!(request["approval"]["mode"], "never", "{request}");

    // Bad input: one line, exit 2, nothing written.
    let sessions = s.home.join("sessions");
    let before = std::fs::read_dir(&sessions).unwrap().count();
    for (args, says) in [
        (
            vec!["--approval", "sometimes"],
            "unknown approval mode \"sometimes\"",
        ),
        (
            vec!["--approval-timeout", "0s"],
            "it must be from 1s to 24h",
        ),
        (vec!["--approval-timeout", "soon"], "--approval-timeout"),
    ] {
        let mut all = vec!["--model", model.as_str()];
        all.extend(args);
        all.push("do it");
        let out = s.run(&all).assert().code(2);
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says), "{err}");
    }
    assert_eq!(std::fs::read_dir(&sessions).unwrap().count(), before);
    // `troupe approve` of an unknown session, or of a request nobody made.
    let out = s.troupe().args(["approve", "nosuch"]).assert().code(2);
    assert!(stderr(&out).contains("not found"), "{}", stderr(&out));
    let out = s
        .troupe()
        .args(["approve", &id, "abcd1234"])
        .assert()
        .code(2);
    let err = stderr(&out);
    assert!(err.contains("APPROVAL_NOT_FOUND"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(std::fs::read_dir(&sessions).unwrap().count(), before);
}

#[test]
fn a_request_nobody_answers_is_denied_by_the_timeout() {
    let s = Setup::new();
    let target = outside(&s).join("late.txt");
    let script = s.script_agents(
        "late.json",
        json!({"lead": [escalate(&format!("echo x >> {}", target.display()), "needs it"), text("gave up")]}),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&[
            "--model",
            &model,
            "--approval",
            "on-request",
            "--approval-timeout",
            "1s",
            "do it",
        ])
        .assert()
        .success();
    let err = stderr(&out);
    let id = session_id(&err);
    assert!(
        err.contains("denied in 1s without an answer"),
        "the request says how long it waits: {err}"
    );
    assert!(err.contains("because nobody answered in time"), "{err}");
    assert!(
        err.contains(&format!("answer with: troupe approve {id} "))
            && err.contains(" [--deny|--always] (or in troupe web)"),
        "the hint names every way troupe approve answers: {err}"
    );
    assert!(!target.exists(), "nothing ran");
    let decided = of_type(&s, &id, "approval/decided");
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["data"]["decision"], "deny");
    assert_eq!(decided[0]["data"]["by"], "timeout");
    let results = bash_results(&s, &id);
    assert_eq!(results[0]["code"], "APPROVAL_TIMED_OUT", "{results:?}");
    // Decided: nothing is pending any more.
    assert!(pending(&s, &id).is_empty());
    // The policy is recorded.
    let config = &of_type(&s, &id, "agent/config")[0]["data"];
    assert_eq!(
        config["approval"],
        json!({"mode": "on-request", "timeoutMs": 1000})
    );
}

#[test]
fn troupe_approve_from_another_terminal_answers_a_waiting_run() {
    let s = Setup::new();
    let out_dir = outside(&s);
    let first = out_dir.join("first.txt");
    let second = out_dir.join("second.txt");
    let lead = json!([
        escalate(
            &format!("echo one >> {}", first.display()),
            "publish the first"
        ),
        escalate(
            &format!("echo two >> {}", second.display()),
            "publish the second"
        ),
        text("both asked"),
    ]);
    let (mut run, id) = start_run(&s, "cli.json", lead, &[]);
    let asked = wait_pending(&s, &id);
    assert_eq!(asked["member"], "lead");
    assert_eq!(asked["session"], id.as_str());
    assert!(asked["command"].as_str().unwrap().starts_with("echo one"));
    assert_eq!(asked["justification"], "publish the first");
    let request = asked["id"].as_str().unwrap().to_owned();
    // The table a person reads names the request, the member, the command and why.
    let out = s.troupe().args(["approve", &id]).assert().success();
    let table = stdout(&out);
    assert!(table.contains(&request), "{table}");
    assert!(table.contains("publish the first"), "{table}");
    // Its hint repeats the home the listing was given, so it can be pasted as it is.
    let hint = stderr(&out);
    let home = s.home.display().to_string();
    assert!(
        hint.contains(&format!("troupe approve {id} REQUEST --home {home}")),
        "{hint}"
    );

    // Approve it by a unique prefix of the session id.
    let out = s
        .troupe()
        .args(["approve", &id[..8], &request])
        .assert()
        .success();
    assert!(stdout(&out).starts_with(&format!("approved request {request}")));
    run.wait_for(&format!(
        "request {request} of lead approved by the user with troupe approve"
    ));

    // The second one is denied.
    let asked = loop {
        let next = wait_pending(&s, &id);
        if next["id"] != request.as_str() {
            break next;
        }
    };
    let second_request = asked["id"].as_str().unwrap().to_owned();
    s.troupe()
        .args(["approve", &id, &second_request, "--deny"])
        .assert()
        .success();
    let (code, out, err) = run.finish();
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "both asked\n");
    assert_eq!(
        lines(&first),
        ["one"],
        "approved: ran once, outside the sandbox"
    );
    assert!(!second.exists(), "denied: never ran");
    let results = bash_results(&s, &id);
    assert_eq!(results[0]["content"]["exit_code"], 0, "{results:?}");
    assert_eq!(results[1]["code"], "APPROVAL_DENIED", "{results:?}");
    let decided: Vec<(Value, Value)> = of_type(&s, &id, "approval/decided")
        .iter()
        .map(|e| (e["data"]["decision"].clone(), e["data"]["by"].clone()))
        .collect();
    assert_eq!(
        decided,
        [
            (json!("approve"), json!("cli")),
            (json!("deny"), json!("cli"))
        ]
    );
    // Each request sits in the batch of its call.
    let log = s.log(&id);
    for requested in log.iter().filter(|e| e["type"] == "approval/requested") {
        let seq = requested["seq"].as_u64().unwrap();
        let call = &log[seq as usize - 1];
        assert_eq!(call["type"], "tool/call");
        assert_eq!(call["batchLast"], seq, "{call}");
    }

    // Deciding again, or a request nobody made: exit 2, one line, nothing changed (the
    // member's log, and no decision log added).
    let events = log.len();
    let files = std::fs::read_dir(s.home.join("sessions")).unwrap().count();
    for (request, says) in [
        (request.as_str(), "APPROVAL_ALREADY_DECIDED"),
        (
            second_request.as_str(),
            "already decided: deny by the user with troupe approve",
        ),
        ("00000000", "APPROVAL_NOT_FOUND"),
    ] {
        let out = s.troupe().args(["approve", &id, request]).assert().code(2);
        let err = stderr(&out);
        assert!(err.contains(says), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    assert_eq!(s.log(&id).len(), events);
    assert_eq!(
        std::fs::read_dir(s.home.join("sessions")).unwrap().count(),
        files
    );
    assert_eq!(lines(&first), ["one"]);
    // Decision logs are no sessions to list.
    let out = s.troupe().args(["sessions"]).assert().success();
    assert_eq!(stdout(&out).lines().count(), 2, "{}", stdout(&out));
}

/// requested → kill -9 → still pending → resume asks again → approved → runs exactly once.
#[test]
fn a_request_pending_at_kill_9_is_asked_again_by_the_resume_and_runs_once() {
    let s = Setup::new();
    let target = outside(&s).join("once.txt");
    let lead = json!([
        escalate(
            &format!("echo ran >> {}", target.display()),
            "write the report"
        ),
        text("after the restart"),
    ]);
    let (run, id) = start_run(&s, "crash.json", lead, &[]);
    let asked = wait_pending(&s, &id);
    let request = asked["id"].as_str().unwrap().to_owned();
    run.kill_9();
    // Still pending: nothing decided it.
    let listed = pending(&s, &id);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], request.as_str());
    assert!(!target.exists());

    let mut resume = Running::spawn(&s, &["resume", &id]);
    let err = resume.wait_for("it was pending when the last run stopped");
    assert!(err.starts_with(&format!("session {id} (resumed")), "{err}");
    assert!(
        err.contains(&format!("(request {request};")),
        "the same request: {err}"
    );
    // While the resume waits, it is pending still.
    assert_eq!(pending(&s, &id)[0]["id"], request.as_str());
    s.troupe()
        .args(["approve", &id, &request])
        .assert()
        .success();
    let (code, out, err) = resume.finish();
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "after the restart\n");
    assert_eq!(lines(&target), ["ran"], "ran exactly once");
    let results = bash_results(&s, &id);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["content"]["exit_code"], 0, "{results:?}");
    let decided = of_type(&s, &id, "approval/decided");
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["data"]["by"], "cli");

    // Another resume has nothing to run and runs nothing again.
    s.troupe().args(["resume", &id]).assert().success();
    assert_eq!(lines(&target), ["ran"]);
}

/// A decision made while nothing runs (here a denial) is taken by the next resume without
/// asking again.
#[test]
fn a_request_decided_while_stopped_is_taken_by_the_resume() {
    let s = Setup::new();
    let target = outside(&s).join("denied.txt");
    let lead = json!([
        escalate(
            &format!("echo ran >> {}", target.display()),
            "write the report"
        ),
        text("noted the denial"),
    ]);
    let (run, id) = start_run(&s, "stopped.json", lead, &[]);
    let request = wait_pending(&s, &id)["id"].as_str().unwrap().to_owned();
    run.kill_9();
    let out = s
        .troupe()
        .args(["approve", &id, &request, "--deny"])
        .assert()
        .success();
    assert!(stdout(&out).starts_with(&format!("denied request {request}")));
    assert!(pending(&s, &id).is_empty());
    let out = s.troupe().args(["resume", &id]).assert().success();
    let err = stderr(&out);
    assert!(!err.contains("asks to run"), "not asked again: {err}");
    assert!(
        err.contains(&format!(
            "request {request} of lead denied by the user with troupe approve"
        )),
        "{err}"
    );
    assert_eq!(stdout(&out), "noted the denial\n");
    assert!(!target.exists());
    let results = bash_results(&s, &id);
    assert_eq!(results[0]["code"], "APPROVAL_DENIED", "{results:?}");
}

/// An approved command that was running when the process was killed may have had its effect:
/// the resume reports its outcome unknown and never runs it again.
#[test]
fn an_approved_command_cut_by_kill_9_is_never_run_again() {
    let s = Setup::new();
    let target = outside(&s).join("cut.txt");
    let lead = json!([
        escalate(
            &format!("echo ran >> {}; sleep 30", target.display()),
            "long job"
        ),
        text("checked the state"),
    ]);
    let (mut run, id) = start_run(&s, "cut.json", lead, &[]);
    let request = wait_pending(&s, &id)["id"].as_str().unwrap().to_owned();
    s.troupe()
        .args(["approve", &id, &request])
        .assert()
        .success();
    run.wait_for("approved by the user with troupe approve");
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines(&target).is_empty() {
        assert!(Instant::now() < deadline, "the command never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    run.kill_9();
    // The resume stops the leftover `sleep` (its group is recorded) and runs nothing again.
    let out = s.troupe().args(["resume", &id]).assert().success();
    assert_eq!(stdout(&out), "checked the state\n");
    assert_eq!(lines(&target), ["ran"], "never run a second time");
    let results = bash_results(&s, &id);
    assert_eq!(results[0]["code"], "TOOL_OUTCOME_UNKNOWN", "{results:?}");
    assert_eq!(of_type(&s, &id, "approval/decided").len(), 1);
}

/// The resume's own write path: it records the decision it waited for, then runs the command;
/// a kill -9 of the resume while that command runs leaves it approved without a result, and
/// the next resume never runs it again.
#[test]
fn a_resume_killed_while_it_runs_the_approved_command_never_runs_it_again() {
    let s = Setup::new();
    let target = outside(&s).join("resumed.txt");
    let lead = json!([
        escalate(
            &format!("echo ran >> {}; sleep 30", target.display()),
            "long job"
        ),
        text("checked the state"),
    ]);
    let (run, id) = start_run(&s, "resumed.json", lead, &[]);
    let request = wait_pending(&s, &id)["id"].as_str().unwrap().to_owned();
    run.kill_9();
    let mut resume = Running::spawn(&s, &["resume", &id]);
    resume.wait_for("it was pending when the last run stopped");
    s.troupe()
        .args(["approve", &id, &request])
        .assert()
        .success();
    // Killed once the command runs and its process group is durable (recorded as it starts,
    // flushed at once but not in the same write).
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines(&target).is_empty() || of_type(&s, &id, "tool/process").is_empty() {
        assert!(Instant::now() < deadline, "the command never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    resume.kill_9();
    let out = s.troupe().args(["resume", &id]).assert().success();
    assert_eq!(stdout(&out), "checked the state\n");
    assert!(!stderr(&out).contains("asks to run"), "{}", stderr(&out));
    assert_eq!(lines(&target), ["ran"], "never run a second time");
    let results = bash_results(&s, &id);
    assert_eq!(results[0]["code"], "TOOL_OUTCOME_UNKNOWN", "{results:?}");
    assert_eq!(of_type(&s, &id, "approval/decided").len(), 1);
    // The recovery recorded the command's process group, and stopped it.
    assert!(!of_type(&s, &id, "tool/process").is_empty());
}

/// Ctrl-C while a request waits withdraws it: recorded as denied by `interrupt` (so a late
/// `troupe approve` is refused), the call is `TOOL_CANCELED`, and nothing ran.
#[test]
fn ctrl_c_while_a_request_waits_withdraws_it() {
    let s = Setup::new();
    let target = outside(&s).join("withdrawn.txt");
    let lead = json!([
        escalate(
            &format!("echo ran >> {}", target.display()),
            "write the report"
        ),
        text("never"),
    ]);
    let (mut run, id) = start_run(&s, "interrupt.json", lead, &[]);
    let request = wait_pending(&s, &id)["id"].as_str().unwrap().to_owned();
    let pid = rustix::process::Pid::from_raw(run.child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    run.wait_for("interrupted");
    let (code, _, err) = run.finish();
    assert_eq!(code, 1, "{err}");
    assert!(!target.exists());
    let decided = of_type(&s, &id, "approval/decided");
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["data"]["by"], "interrupt");
    assert_eq!(bash_results(&s, &id)[0]["code"], "TOOL_CANCELED");
    let out = s.troupe().args(["approve", &id, &request]).assert().code(2);
    assert!(
        stderr(&out).contains("because the turn was interrupted"),
        "{}",
        stderr(&out)
    );
}

/// `troupe approve --always`: the command runs, and the same exact command asked again later
/// in the member's session — after the run ended, in a `troupe resume` — runs without a
/// question (decided `approve` by `always`, naming the rule), because the `always` decision is
/// in the member's log; another command is still asked (and denied here by the timeout).
#[test]
fn always_from_troupe_approve_is_recorded_and_the_resume_honours_it() {
    let s = Setup::new();
    let out_dir = outside(&s);
    let (target, other) = (out_dir.join("always.txt"), out_dir.join("other.txt"));
    let command = format!("echo x >> {}", target.display());
    let lead = json!([
        escalate(&command, "first"),
        text("first done"),
        escalate(&command, "again, after a resume"),
        escalate(&format!("echo y >> {}", other.display()), "another command"),
        text("second done"),
    ]);
    let (run, id) = start_run(&s, "always.json", lead, &[]);
    let asked = wait_pending(&s, &id);
    let request = asked["id"].as_str().unwrap().to_owned();
    // --always needs a request, and goes with neither --deny nor --json.
    for args in [
        vec!["approve", id.as_str(), "--always"],
        vec![
            "approve",
            id.as_str(),
            request.as_str(),
            "--always",
            "--deny",
        ],
    ] {
        s.troupe().args(&args).assert().code(2);
    }
    let out = s
        .troupe()
        .args(["approve", &id, &request, "--always"])
        .assert()
        .success();
    assert!(
        stdout(&out).starts_with(&format!(
            "approved always request {request} of session {id}"
        )),
        "{}",
        stdout(&out)
    );
    let (code, out, err) = run.finish();
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "first done\n");
    assert_eq!(lines(&target), ["x"]);

    let out = s
        .troupe()
        .args(["resume", &id, "--approval-timeout", "1s", "again"])
        .assert()
        .success();
    assert_eq!(stdout(&out), "second done\n", "{}", stderr(&out));
    assert_eq!(lines(&target), ["x", "x"], "run again without a question");
    assert!(!other.exists(), "another command is asked, and was denied");
    let decided: Vec<(Value, Value, Value)> = of_type(&s, &id, "approval/decided")
        .iter()
        .map(|e| {
            let d = &e["data"];
            (d["decision"].clone(), d["by"].clone(), d["rule"].clone())
        })
        .collect();
    assert_eq!(
        decided,
        [
            (json!("always"), json!("cli"), Value::Null),
            (json!("approve"), json!("always"), json!(request)),
            (json!("deny"), json!("timeout"), Value::Null),
        ]
    );
    assert!(pending(&s, &id).is_empty());
}

/// `troupe chat` opened while a request already waits shows it at once (it was asked before
/// chat followed the logs); a line of bytes that are not UTF-8 piped into chat is skipped with
/// a clear error line and chat goes on — the next line is sent (exit 0), the Team's logs get
/// nothing from the bad one.
#[test]
fn chat_shows_a_request_pending_before_it_opened_and_skips_a_line_that_is_not_utf8() {
    let s = Setup::new();
    let target = outside(&s).join("chat.txt");
    let (run, id) = start_run(
        &s,
        "chat.json",
        json!([
            escalate(&format!("echo x >> {}", target.display()), "needs it"),
            text("lead done"),
            text("lead answer 2"),
            text("lead answer 3"),
        ]),
        &["--team"],
    );
    let request = wait_pending(&s, &id)["id"].as_str().unwrap().to_owned();
    let mut chat = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .arg("--home")
        .arg(&s.home)
        .env_remove("TROUPE_HOME")
        .args(["chat", &id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let stdout = chat.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = lines_tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let mut wait_line = |needle: &str| {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !seen.iter().any(|l: &String| l.contains(needle)) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "{needle:?} never shown: {seen:?}");
            if let Ok(line) = lines.recv_timeout(left) {
                seen.push(line);
            }
        }
        seen.clone()
    };
    wait_line(&format!(
        "lead: asks to run a command outside the sandbox (waiting since before chat opened): \
         $ echo x >> {} (because: needs it) — /approve {request} [--deny|--always]",
        target.display()
    ));
    let mut stdin = chat.stdin.take().unwrap();
    use std::io::Write;
    stdin.write_all(b"\xff\xfe not text\nhello lead\n").unwrap();
    stdin.flush().unwrap();
    wait_line("not valid UTF-8 was skipped (nothing was sent)");
    let shown = wait_line(" to lead (seq ");
    drop(stdin);
    let status = chat.wait().unwrap();
    reader.join().unwrap();
    assert!(
        status.success(),
        "chat goes on after the bad line: {shown:?}"
    );
    assert_eq!(
        shown
            .iter()
            .filter(|l| l.contains("waiting since before chat opened"))
            .count(),
        1,
        "shown once: {shown:?}"
    );
    let sent: Vec<Value> = of_type(&s, &id, "team/message/queued")
        .into_iter()
        .filter(|e| e["data"]["message"]["senderName"] == "user")
        .collect();
    assert_eq!(sent.len(), 1, "only the good line was sent: {sent:?}");
    assert!(sent[0].to_string().contains("hello lead"), "{sent:?}");
    s.troupe()
        .args(["approve", &id, &request, "--deny"])
        .assert()
        .success();
    let (code, _, err) = run.finish();
    assert_eq!(code, 0, "{err}");
    assert!(!target.exists());
}
