//! Project instructions (`AGENTS.md`) through the real binary, against the loopback fake
//! server (whose requests show every member's system prompt): the personal file and the
//! repository's from its top level down reach the Lead's and a teammate's first requests, under
//! their heading and before the Team policy; a kill -9 and a resume after the files changed keep
//! the recorded copy (with a note saying they changed); `--no-project-instructions` and
//! `project_instructions = false`; the 32 KiB cap's note; a file that is not UTF-8 skipped with
//! a warning naming it.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe_test_support::fake_openai::{StreamEnd, chunks};
use troupe_test_support::{FakeOpenAi, FakeResponse, RecordedRequest};

use super::run::{Setup, finish, session_id, signal, stderr, stdout};

const HEADING: &str = "## Project instructions (AGENTS.md)";
const POLICY: &str = "## Working as a Team";

/// The system prompt of a request.
fn system(request: &RecordedRequest) -> String {
    let first = &request.messages()[0];
    assert_eq!(first["role"], "system");
    first["content"].as_str().unwrap().to_owned()
}

/// The requests that named `model`, in order.
fn of_model(server: &FakeOpenAi, model: &str) -> Vec<RecordedRequest> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.body["model"] == model)
        .collect()
}

fn tool_call(id: &str, name: &str, arguments: Value) -> FakeResponse {
    FakeResponse::json(chunks::tool_call_completion(&[(id, name, arguments)]))
}

fn text(answer: &str) -> FakeResponse {
    FakeResponse::json(chunks::text_completion(answer))
}

/// A repository whose top level and a subdirectory hold AGENTS.md, the workspace being that
/// subdirectory, and a personal AGENTS.md in the home. Returns the three paths in prompt order.
fn repository_with_instructions(s: &Setup) -> [std::path::PathBuf; 3] {
    // The workspace is `ws`; make its parent the repository's top level.
    let top = s.workspace.parent().unwrap().to_path_buf();
    std::fs::create_dir_all(top.join(".git")).unwrap();
    std::fs::create_dir_all(&s.home).unwrap();
    let personal = s.home.join("AGENTS.md");
    let repo = top.join("AGENTS.md");
    let local = s.workspace.join("AGENTS.md");
    std::fs::write(&personal, "Personal rule: answer in English.\n").unwrap();
    std::fs::write(&repo, "Repository rule: run `make check`.\n").unwrap();
    std::fs::write(&local, "Workspace rule v1: keep notes.txt short.\n").unwrap();
    [personal, repo, local]
}

fn assert_instructions_in(prompt: &str, texts: &[&str]) {
    let heading = prompt
        .find(HEADING)
        .unwrap_or_else(|| panic!("no heading in {prompt}"));
    let mut at = heading;
    for text in texts {
        let found = prompt[at..]
            .find(text)
            .unwrap_or_else(|| panic!("{text:?} missing or out of order in {prompt}"));
        at += found;
    }
    if let Some(policy) = prompt.find(POLICY) {
        assert!(
            at < policy,
            "the instructions come before the Team policy: {prompt}"
        );
    }
}

/// The instructions reach every member's first request — the Lead's and a teammate's, each
/// running its own model — in prompt order, before the Team policy; they are recorded in both
/// members' `agent/config`. The process is killed (-9) while the teammate's first request is
/// open, a file is changed, and `troupe resume` continues both: their requests still carry the
/// text the session started with, and a note says the files changed.
#[test]
fn instructions_reach_every_member_and_survive_a_kill_and_a_changed_file() {
    let s = Setup::new();
    let server = FakeOpenAi::start().unwrap();
    let [personal, repo, local] = repository_with_instructions(&s);
    server.push_for(
        "lead-model",
        tool_call(
            "call_spawn",
            "spawn_teammate",
            json!({"name": "alpha", "description": "helper", "prompt": "look at notes.txt"}),
        ),
    );
    server.push_for(
        "lead-model",
        tool_call("call_wait", "wait_agent", json!({"timeout_ms": 60000})),
    );
    // The teammate's first answer never comes: the process is killed while it is open.
    server.push_for(
        "mate-model",
        FakeResponse::sse_without_done([chunks::delta(json!({"role": "assistant"}))])
            .ending(StreamEnd::Stall),
    );
    let mut child = s.spawn_run(&[
        "--team",
        "--model",
        "lead-model",
        "--teammate-model",
        "mate-model",
        "--base-url",
        &server.base_url(),
        "get alpha to look at the notes",
    ]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while of_model(&server, "mate-model").is_empty() {
        assert!(Instant::now() < deadline, "alpha never asked its model");
        if let Some(status) = child.try_wait().unwrap() {
            panic!("troupe exited early ({status})");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(child.id() as i32, rustix::process::Signal::KILL);
    let (_, _, err) = finish(child);
    let id = session_id(&err);
    let texts = [
        "Personal rule: answer in English.",
        "Repository rule: run `make check`.",
        "Workspace rule v1: keep notes.txt short.",
    ];
    for member in ["lead-model", "mate-model"] {
        let first = &of_model(&server, member)[0];
        assert_instructions_in(&system(first), &texts);
    }
    let lead_prompt = system(&of_model(&server, "lead-model")[0]);
    for path in [&personal, &repo, &local] {
        assert!(
            lead_prompt.contains(&format!("### {}\n", path.display())),
            "{lead_prompt}"
        );
    }
    // The start named the files it used.
    assert!(
        err.contains(&format!(
            "project instructions: {}, {}, {}",
            personal.display(),
            repo.display(),
            local.display()
        )),
        "{err}"
    );
    // Recorded in both members' configurations.
    let recorded = |session: &str| -> Value {
        s.log(session)
            .iter()
            .rfind(|e| e["type"] == "agent/config")
            .unwrap()["data"]["projectInstructions"]
            .clone()
    };
    let lead_record = recorded(&id);
    assert_eq!(lead_record["files"].as_array().unwrap().len(), 3);
    assert_eq!(
        lead_record["files"][2]["text"],
        "Workspace rule v1: keep notes.txt short.\n"
    );
    let alpha = teammate_id(&s, &id, "alpha");
    assert_eq!(
        recorded(&alpha),
        lead_record,
        "the teammate records the Lead's copy"
    );

    // The file changes; the resume keeps the recorded copy for both members and says so.
    std::fs::write(&local, "Workspace rule v2: rewrite everything.\n").unwrap();
    server.push_for("lead-model", text("alpha is on it; done."));
    server.push_for("mate-model", text("notes.txt is short."));
    let out = s.troupe().args(["resume", &id]).assert().success();
    assert_eq!(stdout(&out), "alpha is on it; done.\n");
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "project instructions: the AGENTS.md files changed since session {id} started ({} \
             changed); it keeps the copy it started with (start a new session to use them)",
            local.display()
        )),
        "{err}"
    );
    for member in ["lead-model", "mate-model"] {
        let requests = of_model(&server, member);
        let last = system(requests.last().unwrap());
        assert_instructions_in(&last, &texts);
        assert!(
            !last.contains("Workspace rule v2"),
            "the recorded copy wins: {last}"
        );
    }
    assert_eq!(
        of_model(&server, "mate-model").len(),
        2,
        "alpha was continued"
    );
}

/// The teammate named `name` of the Lead `lead`.
fn teammate_id(s: &Setup, lead: &str, name: &str) -> String {
    let out = s
        .troupe()
        .args(["team", "show", lead, "--json"])
        .assert()
        .success();
    let view: Value = serde_json::from_str(&stdout(&out)).unwrap();
    view["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// `--no-project-instructions`, and `project_instructions = false` in a configuration file,
/// keep the files out: no heading in the prompt, nothing recorded; a resume of such a session
/// notes that it keeps running without them.
#[test]
fn project_instructions_can_be_turned_off() {
    let s = Setup::new();
    let server = FakeOpenAi::start().unwrap();
    repository_with_instructions(&s);
    let base = server.base_url();
    let run = |extra: &[&str]| {
        server.push(text("ok"));
        let mut args = vec!["--model", "m", "--base-url", &base];
        args.extend(extra);
        args.push("hi");
        let out = s.run(&args).assert().success();
        (
            session_id(&stderr(&out)),
            system(&server.requests().pop().unwrap()),
        )
    };
    let (with, prompt) = run(&[]);
    assert!(prompt.contains(HEADING));
    let (without, prompt) = run(&["--no-project-instructions"]);
    assert!(!prompt.contains(HEADING), "{prompt}");
    let config = s
        .log(&without)
        .into_iter()
        .find(|e| e["type"] == "agent/config")
        .unwrap();
    assert!(
        config["data"].get("projectInstructions").is_none(),
        "{config}"
    );
    s.user_config("project_instructions = false\n");
    let (_, prompt) = run(&[]);
    assert!(!prompt.contains(HEADING), "{prompt}");
    // A resume does not add them, and says so; a session that has them keeps them quietly.
    server.push(text("again"));
    let out = s
        .troupe()
        .args(["resume", &without, "more"])
        .assert()
        .success();
    assert!(
        stderr(&out).contains(&format!(
            "project instructions: session {without} started without AGENTS.md instructions, \
             and keeps running without them"
        )),
        "{}",
        stderr(&out)
    );
    assert!(!system(&server.requests().pop().unwrap()).contains(HEADING));
    server.push(text("again"));
    let out = s
        .troupe()
        .args(["resume", &with, "more"])
        .assert()
        .success();
    assert!(
        !stderr(&out).contains("project instructions"),
        "{}",
        stderr(&out)
    );
    assert!(system(&server.requests().pop().unwrap()).contains(HEADING));
}

/// More than 32 KiB: the prompt holds the first 32 KiB and a visible note naming what was left
/// out, and the start warns; an AGENTS.md that is not UTF-8 is skipped with a warning naming
/// it, and the others are still used.
#[test]
fn the_cap_is_noted_and_a_file_that_is_not_utf8_is_skipped() {
    let s = Setup::new();
    let server = FakeOpenAi::start().unwrap();
    let top = s.workspace.parent().unwrap().to_path_buf();
    std::fs::create_dir_all(top.join(".git")).unwrap();
    std::fs::create_dir_all(&s.home).unwrap();
    let personal = s.home.join("AGENTS.md");
    std::fs::write(&personal, "x".repeat(40 * 1024)).unwrap();
    let broken = top.join("AGENTS.md");
    std::fs::write(&broken, b"caf\xe9 rules\n").unwrap();
    let local = s.workspace.join("AGENTS.md");
    std::fs::write(&local, "Local rule.\n").unwrap();
    server.push(text("ok"));
    let out = s
        .run(&["--model", "m", "--base-url", &server.base_url(), "hi"])
        .assert()
        .success();
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "troupe: warning: {} skipped: it is not UTF-8 text (invalid byte at offset 3)",
            broken.display()
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "troupe: warning: project instructions truncated to 32 KiB (40972 bytes in all): left out \
             the end of {}, all of {}",
            personal.display(),
            local.display()
        )),
        "{err}"
    );
    let prompt = system(&server.requests()[0]);
    assert!(prompt.contains(&"x".repeat(32 * 1024)));
    assert!(!prompt.contains(&"x".repeat(32 * 1024 + 1)));
    assert!(!prompt.contains("Local rule."));
    assert!(prompt.contains(&format!(
        "[Project instructions truncated: these AGENTS.md files hold 40972 bytes, more than the \
         32768 bytes (32 KiB) included; left out: the end of {}, all of {}.]",
        personal.display(),
        local.display()
    )));
    assert!(
        !prompt.contains("caf"),
        "the file that is not UTF-8 is not used"
    );
}

/// An `AGENTS.md` with no text (0 bytes) gives the prompt nothing: the start line marks it
/// `(empty)` beside the files that do give text, and `troupe config` says so too.
#[test]
fn an_empty_agents_md_is_marked_empty() {
    let s = Setup::new();
    let server = FakeOpenAi::start().unwrap();
    let top = s.workspace.parent().unwrap().to_path_buf();
    std::fs::create_dir_all(top.join(".git")).unwrap();
    let empty = top.join("AGENTS.md");
    std::fs::write(&empty, "").unwrap();
    let local = s.workspace.join("AGENTS.md");
    std::fs::write(&local, "Local rule.\n").unwrap();
    server.push(text("ok"));
    let out = s
        .run(&["--model", "m", "--base-url", &server.base_url(), "hi"])
        .assert()
        .success();
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "project instructions: {} (empty), {}\n",
            empty.display(),
            local.display()
        )),
        "{err}"
    );
    let prompt = system(&server.requests()[0]);
    assert!(prompt.contains("Local rule."), "{prompt}");
    assert!(
        !prompt.contains(&format!("### {}", empty.display())),
        "{prompt}"
    );
    let out = s
        .troupe()
        .args(["config", "--workspace"])
        .arg(&s.workspace)
        .assert()
        .success();
    let shown = stdout(&out);
    assert!(
        shown.contains(&format!("  {} (0 bytes, empty)\n", empty.display())),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("  {} (12 bytes)\n", local.display())),
        "{shown}"
    );
}
