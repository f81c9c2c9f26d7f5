//! `troupe send` through the real binary (README "Talking to a running team"): to a running
//! Team through its control socket, to a stopped one through its Lead log (delivered at the
//! next resume), a socket a dead process left, `kill -9` of the Team between accepting a send
//! and answering it, and the bad input.
//!
//! Determinism: the running Team's teammate `alpha` waits in a `bash` loop for a file the test
//! creates (`go` in the workspace), so it is certainly running while the test sends, and it
//! reads a quiet message at the step after the loop; every script has more answer steps than
//! any interleaving can use.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::run::{Setup, stderr, stdout};
use super::troupe;

#[path = "../sweep/watch.rs"]
#[allow(dead_code)]
mod watch;

/// How long a condition may take on a loaded two-core machine.
const DEADLINE: Duration = Duration::from_secs(120);

fn call(name: &str, arguments: Value) -> Value {
    json!({"tool_calls": [{"name": name, "arguments": arguments}]})
}

fn text(answer: &str) -> Value {
    json!({"text": answer})
}

/// A Lead that spawns `alpha` and answers; `alpha` first waits for `<workspace>/go` (when
/// `wait` is set), then answers as often as asked.
fn team_script(s: &Setup, wait: bool) -> PathBuf {
    let mut alpha = Vec::new();
    if wait {
        alpha.push(call(
            "bash",
            json!({"command": "while [ ! -f go ]; do sleep 0.05; done; echo went", "timeout_ms": 600000}),
        ));
    }
    for n in 1..=6 {
        alpha.push(text(&format!("alpha answer {n}")));
    }
    s.script_agents(
        "team.json",
        json!({
            "lead": [
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                text("spawned alpha"),
                text("lead answer 2"),
                text("lead answer 3"),
            ],
            "alpha": alpha,
        }),
    )
}

fn spawn_run(s: &Setup, script: &Path) -> Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .arg("--home")
        .arg(&s.home)
        .env_remove("TROUPE_HOME")
        .args(["run", "--team", "--workspace"])
        .arg(&s.workspace)
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("fix it")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The Lead's id, once the running Team serves its control socket (`<home>/run/<id>.sock`).
fn served_lead(s: &Setup) -> String {
    wait_for("the control socket", || {
        std::fs::read_dir(s.home.join("run"))
            .ok()?
            .filter_map(Result::ok)
            .find_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_suffix(".sock")
                    .map(str::to_owned)
            })
    })
}

/// The session files' raw events (no lock, while a run writes them).
fn events(s: &Setup, id: &str) -> Vec<Value> {
    let path = s.home.join("sessions").join(format!("{id}.jsonl"));
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .skip(1)
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `alpha`'s session id (the Lead's only teammate), once it exists.
fn alpha_id(s: &Setup, lead: &str) -> String {
    wait_for("alpha's session", || {
        events(s, lead).iter().find_map(|e| {
            (e["type"] == "team/member" && e["data"]["member"]["name"] == "alpha")
                .then(|| e["data"]["member"]["id"].as_str().unwrap().to_owned())
        })
    })
}

/// The `user/message` events of `id` that carry `needle`, with their framing header.
fn user_messages(s: &Setup, id: &str, needle: &str) -> Vec<Value> {
    events(s, id)
        .into_iter()
        .filter(|e| {
            e["type"] == "user/message" && e["data"]["content"].to_string().contains(needle)
        })
        .map(|e| e["data"]["content"].clone())
        .collect()
}

/// The Lead log's `team/message/queued` and `team/message/delivered` records of message `id`.
fn mailbox_records(s: &Setup, lead: &str, id: &str) -> (Vec<Value>, usize) {
    let events = events(s, lead);
    let queued = events
        .iter()
        .filter(|e| e["type"] == "team/message/queued" && e["data"]["message"]["id"] == id)
        .map(|e| e["data"]["message"].clone())
        .collect();
    let delivered = events
        .iter()
        .filter(|e| e["type"] == "team/message/delivered" && e["data"]["messageId"] == id)
        .count();
    (queued, delivered)
}

fn verify(s: &Setup, lead: &str) {
    s.troupe().args(["team", "verify", lead]).assert().success();
}

fn finish(mut child: Child) -> (i32, String, String) {
    wait_for("the run to end", || child.try_wait().unwrap().map(|_| ()));
    let output = child.wait_with_output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A quiet message to a running teammate goes through the control socket, is delivered at
/// once (`delivered to alpha`), reaches alpha's model exactly once framed `Message from the
/// user:` (its next step, right after the loop it waits in), and the run's output says so;
/// the socket is gone when the run ends.
#[test]
fn send_to_a_running_team_reaches_the_named_teammate_once() {
    let s = Setup::new();
    let script = team_script(&s, true);
    let run = spawn_run(&s, &script);
    let lead = served_lead(&s);
    let alpha = alpha_id(&s, &lead);
    // alpha is inside its bash loop: its process group is recorded.
    wait_for("alpha's bash", || {
        events(&s, &alpha)
            .iter()
            .any(|e| e["type"] == "tool/process")
            .then_some(())
    });
    let out = s
        .troupe()
        .args([
            "send",
            &lead[..8],
            "--to",
            "alpha",
            "--id",
            "note-1",
            "please also update the notes",
        ])
        .assert()
        .success();
    let line = stdout(&out);
    assert!(
        line.starts_with("delivered to alpha (seq ") && line.contains("team-message-note-1"),
        "{line}"
    );
    assert_eq!(line.lines().count(), 1, "{line}");
    // The same id again (a retry): the same message, not sent again, noted once by the run.
    let again = s
        .troupe()
        .args([
            "send",
            &lead[..8],
            "--to",
            "alpha",
            "--id",
            "note-1",
            "please also update the notes",
        ])
        .assert()
        .success();
    assert!(
        stdout(&again).contains("not sent again"),
        "{}",
        stdout(&again)
    );
    std::fs::write(s.workspace.join("go"), "").unwrap();
    let (code, _, err) = finish(run);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        err.matches("message from the user delivered to alpha (troupe send; seq ")
            .count(),
        1,
        "{err}"
    );
    let got = user_messages(&s, &alpha, "please also update the notes");
    assert_eq!(
        got,
        vec![json!([
            {"type": "text", "text": "Message from the user:"},
            {"type": "text", "text": "please also update the notes"}
        ])],
        "alpha's model saw the message once, framed as the user's"
    );
    // It entered the step after the loop: alpha's second model call.
    let alpha_events = events(&s, &alpha);
    let entered = alpha_events
        .iter()
        .position(|e| e["type"] == "user/message" && e["data"]["id"] == "team-message-note-1")
        .unwrap();
    assert!(
        alpha_events[..entered]
            .iter()
            .any(|e| e["type"] == "tool/result"),
        "claimed after the bash call's result"
    );
    let (queued, delivered) = mailbox_records(&s, &lead, "team-message-note-1");
    assert_eq!(queued.len(), 1);
    assert_eq!(
        (
            &queued[0]["senderName"],
            &queued[0]["senderId"],
            &queued[0]["delivery"]
        ),
        (&json!("user"), &json!(lead), &json!("quiet"))
    );
    assert_eq!(delivered, 1);
    verify(&s, &lead);
    assert!(
        !s.home.join("run").join(format!("{lead}.sock")).exists(),
        "the run unlinks its control socket"
    );
}

/// To a stopped Team: appended to the Lead log (`queued for alpha`, pending in `team show`,
/// not in alpha's log), a repeat with the same id adds nothing, and the next resume delivers
/// it — a wakeup, so alpha runs a turn with it — exactly once; a second resume does not again.
#[test]
fn send_to_a_stopped_team_is_delivered_at_the_next_resume() {
    let s = Setup::new();
    let script = team_script(&s, false);
    let out = s
        .run(&[
            "--team",
            "--model",
            &format!("script:{}", script.display()),
            "fix it",
        ])
        .assert()
        .success();
    let lead = super::run::session_id(&stderr(&out));
    let alpha = alpha_id(&s, &lead);
    let send = |extra: &[&str]| {
        let mut args = vec!["send", lead.as_str(), "--to", "alpha", "--wakeup"];
        args.extend_from_slice(extra);
        args.push("run the linter too");
        s.troupe().args(&args).assert().success()
    };
    let first = stdout(&send(&["--id", "lint"]));
    assert!(
        first.starts_with("queued for alpha (seq ")
            && first.contains(&format!("the Team is not running; troupe resume {lead}")),
        "{first}"
    );
    let again = stdout(&send(&["--id", "lint"]));
    assert!(
        again.contains("already queued by an earlier send with this id: not sent again"),
        "{again}"
    );
    let (queued, delivered) = mailbox_records(&s, &lead, "team-message-lint");
    assert_eq!((queued.len(), delivered), (1, 0));
    let show: Value = serde_json::from_str(&stdout(
        &s.troupe()
            .args(["team", "show", &lead, "--json"])
            .assert()
            .success(),
    ))
    .unwrap();
    assert_eq!(
        show["pendingMessages"],
        json!([{"id": "team-message-lint", "senderName": "user", "targetName": "alpha", "delivery": "wakeup"}])
    );
    assert!(user_messages(&s, &alpha, "run the linter too").is_empty());
    s.troupe().args(["resume", &lead]).assert().success();
    let got = user_messages(&s, &alpha, "run the linter too");
    assert_eq!(got.len(), 1, "delivered once at the resume: {got:?}");
    assert_eq!(got[0][0]["text"], "Message from the user:");
    // The wakeup ran a turn of alpha's that answered after it.
    let alpha_events = events(&s, &alpha);
    let entered = alpha_events
        .iter()
        .position(|e| e["type"] == "user/message" && e["data"]["id"] == "team-message-lint")
        .unwrap();
    assert!(
        alpha_events[entered..]
            .iter()
            .any(|e| e["type"] == "assistant/message"),
        "alpha answered the message"
    );
    s.troupe().args(["resume", &lead]).assert().success();
    assert_eq!(user_messages(&s, &alpha, "run the linter too").len(), 1);
    assert_eq!(mailbox_records(&s, &lead, "team-message-lint"), (queued, 1));
    verify(&s, &lead);
}

/// A control socket left by a process that died (a file nobody listens on) is detected: the
/// message is appended to the stopped Team instead, and the socket is removed with a note.
#[test]
fn a_socket_left_by_a_dead_process_is_removed_and_the_message_appended() {
    let s = Setup::new();
    let script = team_script(&s, false);
    let out = s
        .run(&[
            "--team",
            "--model",
            &format!("script:{}", script.display()),
            "fix it",
        ])
        .assert()
        .success();
    let lead = super::run::session_id(&stderr(&out));
    let socket = s.home.join("run").join(format!("{lead}.sock"));
    // A socket file whose listener is gone, as a SIGKILLed run leaves it.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    let out = s
        .troupe()
        .args(["send", &lead, "status?"])
        .assert()
        .success();
    assert!(
        stdout(&out).starts_with("queued for lead (seq "),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("the Lead reads it in its next turn"),
        "{}",
        stdout(&out)
    );
    let err = stderr(&out);
    assert!(
        err.contains("removed the control socket") && err.contains("no longer running"),
        "{err}"
    );
    assert!(!socket.exists(), "the dead process's socket was removed");
    let queued = events(&s, &lead)
        .into_iter()
        .filter(|e| {
            e["type"] == "team/message/queued" && e["data"]["message"]["senderName"] == "user"
        })
        .count();
    assert_eq!(queued, 1);
    verify(&s, &lead);
}

/// `kill -9` of the running Team right after its control socket accepted a send, before it
/// answered (the process is killed as soon as the Lead log shows the message queued, while the
/// journal still syncs it): `troupe send` finds the message queued when it tries again and
/// reports it — never lost after it said so — and the next resume delivers it exactly once.
#[test]
fn kill_9_between_accepting_a_send_and_answering_it_delivers_once() {
    // The kill aims between the append and the answer; one that came late (the answer was
    // out) is checked the same way, and the scenario tried again, as the crash sweep does.
    for _ in 0..3 {
        if kill_while_answering() {
            return;
        }
    }
    panic!("the kill never landed before the answer in 3 tries");
}

/// One run of the scenario; whether the kill landed before the answer.
fn kill_while_answering() -> bool {
    let s = Setup::new();
    let script = team_script(&s, true);
    let mut run = spawn_run(&s, &script);
    let lead = served_lead(&s);
    let alpha = alpha_id(&s, &lead);
    wait_for("alpha's bash", || {
        events(&s, &alpha)
            .iter()
            .any(|e| e["type"] == "tool/process")
            .then_some(())
    });
    std::fs::create_dir_all(s.home.join("sessions")).unwrap();
    let mut watcher = watch::Watcher::new(&s.home.join("sessions"));
    let sender = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"))
        .arg("--home")
        .arg(&s.home)
        .env_remove("TROUPE_HOME")
        .args([
            "send",
            &lead,
            "--to",
            "alpha",
            "--wakeup",
            "--id",
            "k9",
            "check the tests",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    'watch: loop {
        for append in watcher.poll(Duration::from_millis(200)) {
            if append.session == lead
                && append
                    .types
                    .iter()
                    .any(|t| t.starts_with("team/message/queued"))
            {
                break 'watch;
            }
        }
        assert!(start.elapsed() < DEADLINE, "the send was never queued");
    }
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(run.id() as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let _ = run.wait();
    // alpha's loop (its own process group) outlived the kill: let it end.
    std::fs::write(s.workspace.join("go"), "").unwrap();
    let (code, out, err) = finish(sender);
    assert_eq!(
        code, 0,
        "the send reports what became of the message: {err}"
    );
    assert!(
        out.starts_with("queued for alpha (seq ") || out.starts_with("delivered to alpha (seq "),
        "{out}"
    );
    // Which side of the answer the kill landed on (it aims before it): before, the send
    // tried again and found the message queued by its first attempt.
    let before = err.contains("ended before it answered");
    if before {
        assert!(
            out.contains("already queued by an earlier send with this id"),
            "{out}"
        );
    }
    let (queued, _) = mailbox_records(&s, &lead, "team-message-k9");
    assert_eq!(queued.len(), 1, "queued once, whatever the kill cut");
    let resumed = s.troupe().args(["resume", &lead]).assert();
    let resumed_code = resumed.get_output().status.code();
    assert_eq!(resumed_code, Some(0), "{}", stderr(&resumed));
    let got = user_messages(&s, &alpha, "check the tests");
    assert_eq!(got.len(), 1, "delivered exactly once: {got:?}");
    assert_eq!(mailbox_records(&s, &lead, "team-message-k9").1, 1);
    verify(&s, &lead);
    before
}

/// Bad input changes nothing and exits 2 with one line: an unknown member
/// (`TEAM_MEMBER_NOT_FOUND`), an empty message (also from stdin), a bad `--id`, a session
/// without a Team (`NOT_A_TEAM`), a teammate's session (naming the Lead to send to), an
/// unknown session.
#[test]
fn send_bad_input_appends_nothing() {
    let s = Setup::new();
    let script = team_script(&s, false);
    let out = s
        .run(&[
            "--team",
            "--model",
            &format!("script:{}", script.display()),
            "fix it",
        ])
        .assert()
        .success();
    let lead = super::run::session_id(&stderr(&out));
    let alpha = alpha_id(&s, &lead);
    let plain = s.script_agents("plain.json", json!({"lead": [text("hello")]}));
    let out = s
        .run(&["--model", &format!("script:{}", plain.display()), "hi"])
        .assert()
        .success();
    let solo = super::run::session_id(&stderr(&out));
    let lead_file = s.home.join("sessions").join(format!("{lead}.jsonl"));
    let before = std::fs::read(&lead_file).unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["send", &lead, "--to", "zed", "hi"],
            "TEAM_MEMBER_NOT_FOUND: no active Team member named \"zed\"",
        ),
        (
            vec!["send", &lead, "--to", "alpha", ""],
            "the message is empty",
        ),
        (vec!["send", &lead, "  \n\t"], "the message is empty"),
        (
            vec!["send", &lead, "--id", "a b", "hi"],
            "--id \"a b\": give 1-64 characters",
        ),
        (vec!["send", &solo, "hi"], "NOT_A_TEAM: session"),
        (vec!["send", &alpha, "hi"], "is a teammate of"),
        (vec!["send", "nope", "hi"], "session nope not found"),
    ];
    for (args, message) in cases {
        let out = troupe(&s.home).args(&args).assert().code(2).stdout("");
        let err = stderr(&out);
        assert!(err.contains(message), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
    }
    let out = s
        .troupe()
        .args(["send", &lead, "-"])
        .write_stdin("   \n")
        .assert()
        .code(2);
    assert!(stderr(&out).contains("the message is empty"));
    assert_eq!(
        std::fs::read(&lead_file).unwrap(),
        before,
        "nothing appended"
    );
    assert!(!s.home.join("run").join(format!("{lead}.sock")).exists());
}

/// A home whose path is longer than a Unix socket address holds (more than 110 bytes; its
/// socket's path `<home>/run/<lead>.sock` is longer still): the run serves its control socket
/// all the same (bound through a short `/proc/self/fd/<fd>/<name>` address of its `run`
/// directory, which stays private, 0700), and `troupe send` reaches the running alpha through
/// it at once, exactly once.
#[test]
fn send_reaches_a_running_team_whose_home_path_is_too_long_for_a_socket_address() {
    use std::os::unix::fs::PermissionsExt;
    let mut s = Setup::new();
    s.home = s
        .home
        .join("a-troupe-home-whose-path-is-too-long-to-fit-in-a-unix-socket-address")
        .join("as-deep-project-trees-and-long-user-names-make-it");
    assert!(s.home.as_os_str().len() > 110, "{}", s.home.display());
    let script = team_script(&s, true);
    let run = spawn_run(&s, &script);
    let lead = served_lead(&s);
    let socket = s.home.join("run").join(format!("{lead}.sock"));
    assert!(socket.as_os_str().len() > 107, "{}", socket.display());
    let mode = std::fs::metadata(s.home.join("run"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "the run directory stays private");
    let alpha = alpha_id(&s, &lead);
    wait_for("alpha's bash", || {
        events(&s, &alpha)
            .iter()
            .any(|e| e["type"] == "tool/process")
            .then_some(())
    });
    let out = s
        .troupe()
        .args([
            "send",
            &lead,
            "--to",
            "alpha",
            "--id",
            "long-1",
            "from a long home",
        ])
        .assert()
        .success();
    let line = stdout(&out);
    assert!(
        line.starts_with("delivered to alpha (seq ") && line.contains("team-message-long-1"),
        "{line}"
    );
    std::fs::write(s.workspace.join("go"), "").unwrap();
    let (code, _, err) = finish(run);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("could not be served"), "{err}");
    assert_eq!(
        user_messages(&s, &alpha, "from a long home"),
        vec![json!([
            {"type": "text", "text": "Message from the user:"},
            {"type": "text", "text": "from a long home"}
        ])]
    );
    let (queued, delivered) = mailbox_records(&s, &lead, "team-message-long-1");
    assert_eq!((queued.len(), delivered), (1, 1));
    verify(&s, &lead);
    assert!(!socket.exists(), "the run unlinks its control socket");
}

/// A member's command cannot pose as the user on the control socket (the sandbox does not
/// confine Unix sockets): alpha's `bash` runs `troupe send` to the Lead and writes a raw
/// `{"op":"interrupt"}` to the socket, also from a daemonised (`setsid`) grandchild whose
/// parent exited — every one is answered `CONTROL_PEER_REFUSED`, nothing is appended to the
/// Lead log, the run is not interrupted; `troupe send` from the test (not a descendant of the
/// run) still reaches the Lead, and a non-UTF-8 line on the socket gets an answer.
#[test]
fn a_members_command_cannot_pose_as_the_user_on_the_control_socket() {
    let s = Setup::new();
    let troupe_bin = env!("CARGO_BIN_EXE_troupe");
    let home = s.home.display().to_string();
    let interrupt = r#"import socket, sys
c = socket.socket(socket.AF_UNIX)
c.connect(sys.argv[1])
c.sendall(b'{"op":"interrupt"}\n')
print("interrupt answer:", c.makefile().readline().strip())"#;
    std::fs::write(s.workspace.join("interrupt.py"), interrupt).unwrap();
    let pose = format!(
        "sock=$(ls {home}/run/*.sock); lead=$(basename \"$sock\" .sock); \
         {troupe_bin} --home {home} send \"$lead\" --id pose-1 'posing as the user'; \
         echo \"send exit $?\"; /usr/bin/python3 interrupt.py \"$sock\"; \
         setsid sh -c '( sleep 0.2; {troupe_bin} --home {home} send '\"$lead\"' --id pose-2 \
         \"posing again\" > daemon.out 2>&1; echo \"exit $?\" >> daemon.out ) &' ; \
         while ! grep -q exit daemon.out 2>/dev/null; do sleep 0.05; done; cat daemon.out; \
         while [ ! -f go ]; do sleep 0.05; done; echo went"
    );
    let script = s.script_agents(
        "pose.json",
        json!({
            "lead": [
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                text("spawned alpha"),
                text("lead answer 2"),
                text("lead answer 3"),
            ],
            "alpha": [
                call("bash", json!({"command": pose, "timeout_ms": 600000})),
                text("alpha answer 1"),
                text("alpha answer 2"),
                text("alpha answer 3"),
            ],
        }),
    );
    let run = spawn_run(&s, &script);
    let lead = served_lead(&s);
    let alpha = alpha_id(&s, &lead);
    let socket = s.home.join("run").join(format!("{lead}.sock"));
    // alpha's command has tried all three and waits for `go`.
    wait_for("alpha's attempts", || {
        let out = std::fs::read_to_string(s.workspace.join("daemon.out")).ok()?;
        out.contains("exit").then_some(())
    });
    // Non-UTF-8 bytes on the socket, from the test: an answer, not a silent close.
    {
        use std::io::{BufRead, Write};
        let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        stream.write_all(b"\xff\xfe{\"op\":\"agents\"}\n").unwrap();
        let mut answer = String::new();
        std::io::BufReader::new(&stream)
            .read_line(&mut answer)
            .unwrap();
        assert!(answer.contains("CONTROL_BAD_REQUEST"), "{answer}");
    }
    let out = s
        .troupe()
        .args(["send", &lead, "--id", "real-1", "the real user"])
        .assert()
        .success();
    assert!(stdout(&out).contains("to lead"), "{}", stdout(&out));
    std::fs::write(s.workspace.join("go"), "").unwrap();
    let (code, _, err) = finish(run);
    assert_eq!(code, 0, "not interrupted: {err}");
    let result = events(&s, &alpha)
        .into_iter()
        .find(|e| e["type"] == "tool/result")
        .map(|e| e["data"].to_string())
        .unwrap();
    assert_eq!(
        result.matches("CONTROL_PEER_REFUSED").count(),
        3,
        "send, interrupt and the daemonised send are refused: {result}"
    );
    assert!(result.contains("send exit 1"), "{result}");
    assert!(result.contains("went"), "{result}");
    assert!(user_messages(&s, &lead, "posing").is_empty());
    for id in ["team-message-pose-1", "team-message-pose-2"] {
        assert_eq!(mailbox_records(&s, &lead, id), (Vec::new(), 0), "{id}");
    }
    assert_eq!(
        mailbox_records(&s, &lead, "team-message-real-1").0.len(),
        1,
        "the user's own send reached the Lead"
    );
    verify(&s, &lead);
}
