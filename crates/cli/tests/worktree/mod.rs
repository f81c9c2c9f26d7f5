//! Worktrees, explicit (issue 17 item 6) through the real binary: `troupe demo --worktree`
//! (each teammate's files in its own worktree, the Lead's checkout untouched), `troupe team
//! merge` of both teammates (the project's tests then pass in the Lead's checkout), a merge
//! that conflicts (exit 1, aborted, nothing committed), `troupe team clean`, the bad input,
//! `[team] worktree = true`, and kill -9 right after a teammate's `provisioning` record (the
//! resume makes or reuses its worktree on the one recorded branch).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::assert_bad_input;
use super::run::{Setup, session_id, stderr, stdout};
use super::send::watch;

/// `git -C dir ARGS` (must succeed): its stdout, trimmed.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Makes `dir` a repository with everything in it committed (identity given here: a test
/// machine may have none).
fn commit_all(dir: &Path) {
    git(dir, &["init", "--quiet", "--initial-branch=main"]);
    git(dir, &["add", "--all"]);
    git(
        dir,
        &[
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@localhost",
            "commit",
            "--quiet",
            "-m",
            "start",
        ],
    );
}

fn team_show(s: &Setup, id: &str) -> Value {
    let out = s
        .troupe()
        .args(["team", "show", id, "--json"])
        .assert()
        .success();
    serde_json::from_str(&stdout(&out)).unwrap()
}

/// The worktree (`{"path","branch","base"}`) of member `name` in `team show --json`.
fn worktree_of(show: &Value, name: &str) -> Value {
    show["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no member {name} in {show}"))["worktree"]
        .clone()
}

/// `troupe demo --worktree --workspace WS` in `s`; returns the session id.
fn worktree_demo(s: &Setup, workspace: &Path) -> String {
    let out = s
        .troupe()
        .args(["demo", "--worktree", "--workspace"])
        .arg(workspace)
        .assert()
        .success();
    session_id(&stderr(&out))
}

fn unittest(dir: &Path) -> (bool, String) {
    let out = Command::new("python3")
        .args(["-m", "unittest"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn read(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path.as_ref())
        .unwrap_or_else(|e| panic!("{}: {e}", path.as_ref().display()))
}

#[test]
fn a_worktree_demo_keeps_each_teammates_work_on_its_branch_and_team_merge_brings_both_in() {
    let s = Setup::new();
    let ws = s.workspace.join("demo");
    let id = worktree_demo(&s, &ws);
    let show = team_show(&s, &id);
    let prefix: String = id.chars().take(8).collect();
    let head = git(&ws, &["rev-parse", "HEAD"]);
    let home = std::path::absolute(&s.home).unwrap();
    for name in ["alpha", "beta"] {
        let worktree = worktree_of(&show, name);
        assert_eq!(worktree["branch"], format!("troupe/{prefix}/{name}"));
        assert_eq!(worktree["base"], head, "branched from the Lead's HEAD");
        assert_eq!(
            PathBuf::from(worktree["path"].as_str().unwrap()),
            home.join("worktrees").join(&id).join(name)
        );
    }
    assert!(
        worktree_of(&show, "lead").is_null(),
        "the Lead keeps the checkout"
    );
    // Each teammate's files are in its own worktree; the Lead's checkout is unchanged.
    let path = |name: &str| PathBuf::from(worktree_of(&show, name)["path"].as_str().unwrap());
    let alpha = read(path("alpha").join("wordstats/counting.py"));
    let beta = read(path("beta").join("wordstats/counting.py"));
    let lead = read(ws.join("wordstats/counting.py"));
    assert!(
        alpha.contains("ranked[:n]") && !alpha.contains("longest_word"),
        "{alpha}"
    );
    assert!(
        beta.contains("def longest_word") && beta.contains("ranked[: n - 1]"),
        "{beta}"
    );
    assert!(read(path("beta").join("wordstats/__init__.py")).contains("longest_word"));
    assert!(
        lead.contains("ranked[: n - 1]") && !lead.contains("longest_word"),
        "{lead}"
    );
    assert_eq!(git(&ws, &["status", "--porcelain"]), "");
    // Each teammate's tools ran in its worktree: its log's config and header name it.
    for m in show["members"].as_array().unwrap().iter().skip(1) {
        let events = s.log(m["id"].as_str().unwrap());
        let config = events.iter().find(|e| e["type"] == "agent/config").unwrap();
        assert_eq!(config["data"]["workspace"], m["worktree"]["path"]);
    }
    let (passed, before) = unittest(&ws);
    assert!(!passed, "nothing merged yet: {before}");

    for name in ["alpha", "beta"] {
        let out = s
            .troupe()
            .args(["team", "merge", &id, name])
            .assert()
            .success();
        let text = stdout(&out);
        assert!(
            text.contains(&format!("committed {name}'s uncommitted work")),
            "{text}"
        );
        assert!(
            text.contains(&format!("merged troupe/{prefix}/{name} into main")),
            "{text}"
        );
    }
    let (passed, after) = unittest(&ws);
    assert!(passed, "both branches merged: {after}");
    assert!(after.contains("Ran 7 tests"), "{after}");
    assert_eq!(git(&ws, &["status", "--porcelain"]), "");
    let merges = git(&ws, &["log", "--merges", "--format=%s"]);
    assert_eq!(merges.lines().count(), 2, "{merges}");
    // Merging again: already in.
    let out = s
        .troupe()
        .args(["team", "merge", &id, "alpha"])
        .assert()
        .success();
    assert!(
        stdout(&out).contains("nothing to merge"),
        "{}",
        stdout(&out)
    );
    s.troupe().args(["team", "verify", &id]).assert().success();

    // `team clean`: both finished teammates' worktrees go, their branches stay.
    let out = s.troupe().args(["team", "clean", &id]).assert().success();
    let text = stdout(&out);
    for name in ["alpha", "beta"] {
        assert!(text.contains(&format!("{name}: removed ")), "{text}");
        assert!(!path(name).exists());
    }
    let branches = git(
        &ws,
        &["branch", "--list", "troupe/*", "--format=%(refname:short)"],
    );
    assert_eq!(
        branches.lines().collect::<Vec<_>>(),
        [
            format!("troupe/{prefix}/alpha"),
            format!("troupe/{prefix}/beta")
        ]
    );
    assert_eq!(
        git(&ws, &["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count(),
        1
    );
    let out = s.troupe().args(["team", "clean", &id]).assert().success();
    assert!(stdout(&out).contains("alpha: ") && stdout(&out).contains("already gone"));
}

/// A Team whose two teammates write different lines into the same file, each in its
/// worktree.
fn conflicting_team(s: &Setup) -> String {
    commit_all(&s.workspace);
    let write = |text: &str| {
        json!({"tool_calls": [
            {"name": "read", "arguments": {"path": "notes.txt"}},
            {"name": "write", "arguments": {"path": "notes.txt", "content": text}},
        ]})
    };
    let script = s.script_agents(
        "conflict.json",
        json!({
            "lead": [
                {"tool_calls": [{"name": "spawn_teammate", "arguments": {"name": "alpha", "description": "Writes notes", "prompt": "Write the notes."}}]},
                {"tool_calls": [{"name": "spawn_teammate", "arguments": {"name": "beta", "description": "Writes notes too", "prompt": "Write the notes."}}]},
                {"text": "both at work"},
            ],
            "alpha": [write("alpha's notes\n"), {"text": "written"}],
            "beta": [write("beta's notes\n"), {"text": "written"}],
        }),
    );
    let model = format!("script:{}", script.display());
    let out = s
        .run(&["--team", "--worktree", "--model", &model, "go"])
        .assert()
        .success();
    session_id(&stderr(&out))
}

#[test]
fn a_merge_that_conflicts_is_aborted_lists_the_paths_and_commits_nothing() {
    let s = Setup::new();
    let id = conflicting_team(&s);
    s.troupe()
        .args(["team", "merge", &id, "alpha"])
        .assert()
        .success();
    assert_eq!(read(s.workspace.join("notes.txt")), "alpha's notes\n");
    let head = git(&s.workspace, &["rev-parse", "HEAD"]);
    let out = s
        .troupe()
        .args(["team", "merge", &id, "beta"])
        .assert()
        .code(1);
    let err = stderr(&out);
    assert!(err.contains("TEAM_MERGE_CONFLICT"), "{err}");
    assert!(err.contains("conflicts in notes.txt"), "{err}");
    assert!(err.contains("nothing was committed to main"), "{err}");
    // The merge was aborted: branch, index and tree as before.
    assert_eq!(git(&s.workspace, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(&s.workspace, &["status", "--porcelain"]), "");
    assert!(!s.workspace.join(".git/MERGE_HEAD").exists());
    assert_eq!(read(s.workspace.join("notes.txt")), "alpha's notes\n");
    // beta's work is committed on its own branch, ready for a merge by hand.
    let show = team_show(&s, &id);
    let branch = worktree_of(&show, "beta")["branch"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        git(&s.workspace, &["show", &format!("{branch}:notes.txt")]),
        "beta's notes"
    );
    // And the refusal says so, naming that commit.
    let work = git(&s.workspace, &["rev-parse", &branch]);
    assert!(
        err.contains(&format!(
            "the teammate's uncommitted work was committed on {branch} first: {}",
            &work[..12]
        )),
        "{err}"
    );
    // `--into` a branch that does not exist, and a dirty Lead checkout, are bad input.
    let out = s
        .troupe()
        .args(["team", "merge", &id, "beta", "--into", "nope"])
        .assert()
        .code(2);
    assert!(
        stderr(&out).contains("WORKTREE_UNKNOWN_BRANCH"),
        "{}",
        stderr(&out)
    );
    std::fs::write(s.workspace.join("notes.txt"), "the Lead's own edit\n").unwrap();
    let out = s
        .troupe()
        .args(["team", "merge", &id, "beta"])
        .assert()
        .code(2);
    assert!(
        stderr(&out).contains("WORKTREE_DIRTY_CHECKOUT"),
        "{}",
        stderr(&out)
    );
    // The path whole (the first one lost its first character to a trimmed status line).
    assert!(
        stderr(&out).contains("uncommitted changes (notes.txt)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(git(&s.workspace, &["rev-parse", "HEAD"]), head);
}

#[test]
fn worktree_bad_input_is_refused_before_anything_is_written() {
    let s = Setup::new();
    let script = s.script_agents("one.json", json!({"lead": [{"text": "hi"}]}));
    let model = format!("script:{}", script.display());
    let ws = s.workspace.display().to_string();
    let run = |extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = ["run", "--workspace", &ws, "--model", &model]
            .iter()
            .map(|a| (*a).to_owned())
            .collect();
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        args
    };
    let refused = |extra: &[&str], message: &str| {
        let args = run(extra);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_bad_input(&s.home, &refs, message);
    };
    // Outside a git repository.
    refused(
        &["--team", "--worktree", "go"],
        "WORKTREE_NOT_A_REPOSITORY: --worktree needs a git repository with a commit",
    );
    // Without --team.
    refused(
        &["--worktree", "go"],
        "--worktree applies to Team runs only",
    );
    // A repository without a commit.
    git(&s.workspace, &["init", "--quiet"]);
    refused(&["--team", "--worktree", "go"], "HEAD names no commit");
    // A staged change.
    commit_all_again(&s.workspace);
    std::fs::write(s.workspace.join("notes.txt"), "staged\n").unwrap();
    git(&s.workspace, &["add", "notes.txt"]);
    refused(
        &["--team", "--worktree", "go"],
        "WORKTREE_DIRTY_INDEX: --worktree cannot branch from",
    );
    assert!(!s.home.join("worktrees").exists(), "no worktree made");

    // merge/clean of what has no worktree: an unknown member, a Team run without worktrees.
    git(&s.workspace, &["reset", "--quiet", "--hard"]);
    let team = s.script_agents(
        "plain.json",
        json!({
            "lead": [
                {"tool_calls": [{"name": "spawn_teammate", "arguments": {"name": "alpha", "description": "Says hi", "prompt": "Say hi."}}]},
                {"text": "done"},
            ],
            "alpha": [{"text": "hi"}],
        }),
    );
    let out = s
        .run(&[
            "--team",
            "--model",
            &format!("script:{}", team.display()),
            "go",
        ])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    assert!(
        worktree_of(&team_show(&s, &id), "alpha").is_null(),
        "no worktree without --worktree"
    );
    assert!(!s.home.join("worktrees").exists());
    assert_bad_input(
        &s.home,
        &["team", "merge", &id, "alpha"],
        "TEAM_NO_WORKTREE: teammate alpha has no worktree",
    );
    assert_bad_input(
        &s.home,
        &["team", "merge", &id, "gamma"],
        "TEAM_MEMBER_NOT_FOUND",
    );
    assert_bad_input(&s.home, &["team", "clean", &id], "TEAM_NO_WORKTREE");
}

/// Commits everything in an initialised repository.
fn commit_all_again(dir: &Path) {
    git(dir, &["add", "--all"]);
    git(
        dir,
        &[
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@localhost",
            "commit",
            "--quiet",
            "-m",
            "start",
        ],
    );
}

#[test]
fn the_configuration_key_turns_worktrees_on() {
    let s = Setup::new();
    commit_all(&s.workspace);
    // The project's own file: .troupe/ is not committed, and stays out of the index.
    std::fs::create_dir_all(s.workspace.join(".troupe")).unwrap();
    std::fs::write(
        s.workspace.join(".troupe/config.toml"),
        "[team]\nworktree = true\n",
    )
    .unwrap();
    let script = s.script_agents(
        "cfg.json",
        json!({
            "lead": [
                {"tool_calls": [{"name": "spawn_teammate", "arguments": {"name": "alpha", "description": "Writes", "prompt": "Write."}}]},
                {"text": "done"},
            ],
            "alpha": [
                {"tool_calls": [{"name": "write", "arguments": {"path": "alpha.txt", "content": "mine\n"}}]},
                {"text": "written"},
                {"tool_calls": [{"name": "write", "arguments": {"path": "again.txt", "content": "more\n"}}]},
                {"text": "written again"},
            ],
        }),
    );
    let out = s
        .run(&[
            "--team",
            "--model",
            &format!("script:{}", script.display()),
            "go",
        ])
        .assert()
        .success();
    let id = session_id(&stderr(&out));
    let worktree = worktree_of(&team_show(&s, &id), "alpha");
    let path = PathBuf::from(worktree["path"].as_str().unwrap());
    assert_eq!(read(path.join("alpha.txt")), "mine\n");
    assert!(
        !s.workspace.join("alpha.txt").exists(),
        "written in alpha's worktree only"
    );
    // Merged, then cleaned: the worktree goes, the branch holds alpha's work.
    s.troupe()
        .args(["team", "merge", &id, "alpha"])
        .assert()
        .success();
    s.troupe().args(["team", "clean", &id]).assert().success();
    assert!(!path.exists());
    // Woken again (a message from the user, delivered by the resume, which keeps the
    // recorded worktree setting): alpha gets its worktree back from its branch first.
    s.troupe()
        .args(["send", &id, "--to", "alpha", "--wakeup", "write again"])
        .assert()
        .success();
    let out = s.troupe().args(["resume", &id]).assert().success();
    assert_eq!(read(path.join("alpha.txt")), "mine\n", "{}", stderr(&out));
    assert_eq!(read(path.join("again.txt")), "more\n");
    assert!(!s.workspace.join("again.txt").exists());
}

/// kill -9 of a worktree demo right after alpha's `provisioning` record (which names its
/// worktree) is durable — before, while or after `git worktree add` runs — then `troupe
/// resume`. The kill lands before git made the worktree (the test prints where it landed);
/// [`Cut`] then puts the worktree in the state a kill at a later point leaves. Either way the
/// resume makes (or reuses) the worktree on the one recorded branch, alpha becomes active
/// and does its work, and both merges bring the tests to pass.
fn kill_at_the_spawn(cut: Cut) {
    let s = Setup::new();
    let ws = s.workspace.join("demo");
    let sessions = s.home.join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let mut watcher = watch::Watcher::new(&sessions);
    let child = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .arg("--home")
        .arg(&s.home)
        .env_remove("TROUPE_HOME")
        .args(["demo", "--worktree", "--workspace"])
        .arg(&ws)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut guard = watch::KillOnDrop(child);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let lead = 'watch: loop {
        for append in watcher.poll(Duration::from_millis(50)) {
            if append.member == "lead"
                && append
                    .types
                    .iter()
                    .any(|t| t == "team/member alpha provisioning")
            {
                guard.0.kill().unwrap();
                break 'watch append.session;
            }
        }
        assert!(
            guard.0.try_wait().unwrap().is_none(),
            "the demo ended before alpha's provisioning record was seen"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "alpha was never provisioned"
        );
    };
    let _ = guard.0.wait();
    // The record names the worktree, whatever git had done by the kill.
    let show = team_show(&s, &lead);
    let worktree = worktree_of(&show, "alpha");
    let path = PathBuf::from(worktree["path"].as_str().unwrap());
    let branch = worktree["branch"].as_str().unwrap().to_owned();
    let alpha_row = show["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "alpha")
        .unwrap()
        .clone();
    // Where the kill landed (for the test's output): git had made the worktree or not.
    eprintln!(
        "killed after alpha's provisioning record; its worktree {} complete",
        if path.join(".git").exists() {
            "was"
        } else {
            "was not yet"
        }
    );
    if cut == Cut::DuringAdd {
        if path.exists() {
            std::fs::remove_dir_all(&path).unwrap();
        }
        git(&ws, &["worktree", "prune"]);
        let branch_exists = !git(&ws, &["branch", "--list", &branch]).is_empty();
        if !branch_exists {
            git(
                &ws,
                &["branch", &branch, worktree["base"].as_str().unwrap()],
            );
        }
        std::fs::create_dir_all(path.join("wordstats")).unwrap();
        std::fs::write(path.join("wordstats/half.py"), "# cut\n").unwrap();
    }
    if cut == Cut::AfterAdd && !path.join(".git").exists() {
        git(
            &ws,
            &[
                "worktree",
                "add",
                "--quiet",
                "-b",
                &branch,
                path.to_str().unwrap(),
                worktree["base"].as_str().unwrap(),
            ],
        );
        // Untracked: still there after the resume only if the worktree was reused.
        std::fs::write(path.join("kept.txt"), "reused\n").unwrap();
    }
    let out = s.troupe().args(["resume", &lead]).assert().success();
    let err = stderr(&out);
    let show = team_show(&s, &lead);
    let alpha = show["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "alpha")
        .unwrap();
    assert_eq!(alpha["phase"], "active", "{err}");
    assert_eq!(
        alpha["id"], alpha_row["id"],
        "the reserved id, not a second member"
    );
    assert_eq!(alpha["worktree"], worktree, "the recorded worktree");
    assert_eq!(
        show["members"].as_array().unwrap().len(),
        3,
        "lead, beta, alpha"
    );
    // One branch per teammate, never a second one for alpha; the worktree is registered.
    let branches = git(
        &ws,
        &["branch", "--list", "troupe/*", "--format=%(refname:short)"],
    );
    let prefix: String = lead.chars().take(8).collect();
    assert_eq!(
        branches.lines().collect::<Vec<_>>(),
        [
            format!("troupe/{prefix}/alpha"),
            format!("troupe/{prefix}/beta")
        ]
    );
    let list = git(&ws, &["worktree", "list", "--porcelain"]);
    assert!(
        list.contains(&format!("branch refs/heads/{branch}")),
        "{list}"
    );
    assert!(
        !path.join("wordstats/half.py").exists(),
        "the unfinished directory was replaced"
    );
    assert!(read(path.join("wordstats/counting.py")).contains("ranked[:n]"));
    s.troupe()
        .args(["team", "verify", &lead])
        .assert()
        .success();
    for name in ["alpha", "beta"] {
        s.troupe()
            .args(["team", "merge", &lead, name])
            .assert()
            .success();
    }
    let (passed, text) = unittest(&ws);
    assert!(passed, "{text}");
}

/// The state the worktree is put in after the kill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// As the kill left it.
    AsLanded,
    /// As a kill during `git worktree add` leaves it: the branch made, a directory git does
    /// not know.
    DuringAdd,
    /// As a kill after `git worktree add`, before the child's prompt, leaves it: complete.
    AfterAdd,
}

#[test]
fn kill_after_the_provisioning_record_then_resume_makes_the_worktree() {
    kill_at_the_spawn(Cut::AsLanded);
}

#[test]
fn kill_during_git_worktree_add_then_resume_replaces_the_unfinished_worktree() {
    kill_at_the_spawn(Cut::DuringAdd);
}

#[test]
fn kill_after_git_worktree_add_then_resume_reuses_the_worktree() {
    kill_at_the_spawn(Cut::AfterAdd);
}

/// A running teammate's worktree is left alone: `team merge` refuses it (exit 2,
/// `WORKTREE_MEMBER_RUNNING`, its branch and the Lead's checkout unchanged) and `team clean`
/// keeps it, on the JSONL files too (whose lock table names no holder); once the run ended,
/// both work.
#[test]
fn a_running_teammates_worktree_is_neither_merged_nor_cleaned() {
    let s = Setup::new();
    let ws = s.workspace.join("demo");
    let sessions = s.home.join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let mut watcher = watch::Watcher::new(&sessions);
    let child = Command::new(env!("CARGO_BIN_EXE_troupe"))
        .arg("--home")
        .arg(&s.home)
        .env_remove("TROUPE_HOME")
        .args(["demo", "--worktree", "--pace", "2000", "--workspace"])
        .arg(&ws)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut guard = watch::KillOnDrop(child);
    // alpha's own log has its first turn: from then until it settles, its writer holds it.
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let mut lead = None;
    'watch: loop {
        for append in watcher.poll(Duration::from_millis(50)) {
            if append.member == "lead" && lead.is_none() {
                lead = Some(append.session.clone());
            }
            if append.member == "alpha" && append.types.iter().any(|t| t.starts_with("turn/start"))
            {
                break 'watch;
            }
        }
        assert!(
            guard.0.try_wait().unwrap().is_none(),
            "the demo ended before alpha started a turn"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "alpha never started a turn"
        );
    }
    let lead = lead.expect("the Lead's log was seen");
    // Its status is what it does now (its session is held), not `inactive` — once the Lead's
    // log has its `active` record (its turn may start before the Lead records it).
    let alpha_row = |show: &Value| {
        show["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "alpha")
            .unwrap()
            .clone()
    };
    let mut show = team_show(&s, &lead);
    while alpha_row(&show)["phase"] != "active" {
        assert!(
            std::time::Instant::now() < deadline,
            "alpha never became active"
        );
        std::thread::sleep(Duration::from_millis(50));
        show = team_show(&s, &lead);
    }
    let alpha = alpha_row(&show);
    assert!(
        alpha["status"] == "running" || alpha["status"] == "idle",
        "{alpha}"
    );
    let worktree = worktree_of(&show, "alpha");
    let path = PathBuf::from(worktree["path"].as_str().unwrap());
    let branch = worktree["branch"].as_str().unwrap().to_owned();
    let branch_before = git(&ws, &["rev-parse", &branch]);
    let lead_before = git(&ws, &["rev-parse", "HEAD"]);

    let out = s
        .troupe()
        .args(["team", "merge", &lead, "alpha"])
        .assert()
        .code(2);
    let said = stderr(&out);
    assert!(said.contains("WORKTREE_MEMBER_RUNNING"), "{said}");
    assert!(said.contains("alpha"), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "one line: {said}");
    assert_eq!(git(&ws, &["rev-parse", &branch]), branch_before);
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]), lead_before);

    let out = s.troupe().args(["team", "clean", &lead]).assert().success();
    let said = stdout(&out);
    assert!(
        said.contains(&format!(
            "alpha: kept {}: the teammate is running",
            path.display()
        )),
        "{said}"
    );
    assert!(path.join(".git").exists(), "alpha's worktree was removed");

    // Once the run has ended, both are taken.
    let status = guard.0.wait().unwrap();
    assert!(status.success(), "the demo failed: {status}");
    s.troupe()
        .args(["team", "merge", &lead, "alpha"])
        .assert()
        .success();
    let out = s.troupe().args(["team", "clean", &lead]).assert().success();
    assert!(
        stdout(&out).contains(&format!("alpha: removed {}", path.display())),
        "{}",
        stdout(&out)
    );
}

/// The system prompt of a request to the fake server.
fn system_prompt(request: &troupe_test_support::RecordedRequest) -> String {
    let first = &request.messages()[0];
    assert_eq!(first["role"], "system");
    first["content"].as_str().unwrap().to_owned()
}

/// Every member is told where it works (the Team policy's point 2, through the fake server,
/// whose requests show each member's system prompt): with `--worktree` the Lead that its
/// teammates work in their own worktrees, a teammate its own worktree's path and branch and
/// that the merge commits its work; without it, the shared checkout for both.
#[test]
fn each_member_is_told_whether_it_works_in_its_own_worktree() {
    use troupe_test_support::fake_openai::chunks;
    use troupe_test_support::{FakeOpenAi, FakeResponse};
    const SHARED: &str = "share one working directory";
    for worktree in [true, false] {
        let s = Setup::new();
        commit_all(&s.workspace);
        let server = FakeOpenAi::start().unwrap();
        server.push_for(
            "lead-model",
            FakeResponse::json(chunks::tool_call_completion(&[(
                "call_spawn",
                "spawn_teammate",
                json!({"name": "alpha", "description": "helper", "prompt": "look around"}),
            )])),
        );
        server.push_for(
            "lead-model",
            FakeResponse::json(chunks::tool_call_completion(&[(
                "call_wait",
                "wait_agent",
                json!({"timeout_ms": 60000}),
            )])),
        );
        server.push_for(
            "lead-model",
            FakeResponse::json(chunks::text_completion("done")),
        );
        server.push_for(
            "mate-model",
            FakeResponse::json(chunks::text_completion("looked")),
        );
        let mut args = vec![
            "--team",
            "--model",
            "lead-model",
            "--teammate-model",
            "mate-model",
            "--base-url",
        ];
        let url = server.base_url();
        args.push(&url);
        if worktree {
            args.push("--worktree");
        }
        args.push("get alpha to look");
        let out = s.run(&args).assert().success();
        let id = session_id(&stderr(&out));
        let first = |model: &str| {
            let request = server
                .requests()
                .into_iter()
                .find(|r| r.body["model"] == model)
                .unwrap_or_else(|| panic!("{model} was never asked"));
            system_prompt(&request)
        };
        let (lead, mate) = (first("lead-model"), first("mate-model"));
        if worktree {
            let own = worktree_of(&team_show(&s, &id), "alpha");
            assert!(
                lead.contains("Each teammate works in its own git worktree"),
                "{lead}"
            );
            assert!(
                mate.contains(&format!(
                    "You work in your own git worktree, {}, on branch {}",
                    own["path"].as_str().unwrap(),
                    own["branch"].as_str().unwrap()
                )),
                "{mate}"
            );
            assert!(mate.contains("troupe team merge"), "{mate}");
            for prompt in [&lead, &mate] {
                assert!(!prompt.contains(SHARED), "{prompt}");
            }
        } else {
            for prompt in [&lead, &mate] {
                assert!(prompt.contains(SHARED), "{prompt}");
                assert!(!prompt.contains("worktree"), "{prompt}");
            }
        }
    }
}
