//! `troupe demo`: a scripted Team fixes a small real Python project, offline, in seconds.
//!
//! The command writes the `wordstats` package (two source files, seven `unittest` tests of
//! which five fail: an off-by-one in `top_words` and a missing `longest_word`) into a new or
//! empty directory, records the built-in script under the home (`<home>/demo/script-<hash>.json`,
//! so `troupe resume` finds it later), and runs it exactly as
//! `troupe run --team --workspace DIR --model script:FILE PROMPT` would: the real runtime, the
//! real Team service, the real tools. Nothing here is simulated: the tests pass afterwards
//! because the teammates' `edit` calls changed the files.
//!
//! ## The script (`demo/script.json`) and why it is deterministic
//!
//! A script is static and every member runs concurrently, so the order of the effects that
//! matter is fixed by wakeups (`followup_task`): each wakeup gives its target exactly one turn,
//! and each turn's steps end with a text answer.
//!
//! | member | turn | trigger | steps |
//! |---|---|---|---|
//! | lead | 1 | the prompt | run the tests (they fail), create task-1, task-2 (blocked by task-1) and task-3 (blocked by both), spawn beta, wait, answer |
//! | beta | 1 | its prompt | read `counting.py`, `followup_task` lead "ready", answer |
//! | lead | 2 | beta's wakeup | spawn alpha, wait, answer |
//! | alpha | 1 | its prompt | get + claim task-1, read + edit `counting.py`, run the tests, complete, `send_message` beta, `followup_task` beta, answer |
//! | beta | 2 | alpha's wakeup | get + claim task-2, **edit `counting.py` → `FS_STALE_VERSION`** (alpha changed it after beta's read), re-read, edit again, read + edit `__init__.py`, run the tests (pass), complete, `send_message` + `followup_task` lead, answer |
//! | lead | 3 | beta's wakeup | wait, list the board, get + claim task-3, run the tests, complete, answer |
//!
//! - beta reads `counting.py` strictly before alpha edits it (alpha is spawned only in the
//!   turn beta's wakeup starts), so beta's first edit is always refused as stale;
//! - nobody touches a task between its owner's `team_task_get` and its claim and completion,
//!   so the revisions the script names (1, then 2) are always right; task-2 is ready when beta
//!   claims it (alpha completed task-1 before its wakeup), task-3 when the lead claims it;
//! - quiet mail (`send_message`) never adds a turn or a step that matters: a text step or a
//!   next step claims it, whenever it arrives;
//! - the `wait_agent` calls return at whatever Team change comes first (or at once when nobody
//!   else runs); their results never change what happens next;
//! - every `edit` that needs a fresh read is in the same step as that `read` (one model reply
//!   with both calls, run in order). File observations live in memory only, so a member resumed
//!   after a Ctrl-C or a crash has read nothing (`FS_NOT_OBSERVED`); a real model reads again,
//!   a script cannot. A stop between steps therefore never separates an edit from its read:
//!   the step is either taken whole after the resume or was taken whole before. (beta's
//!   deliberately stale first edit relies on its read of turn 1; after a resume in between it
//!   is refused as `FS_NOT_OBSERVED` instead, and the read + edit step that follows repairs
//!   it the same way.)

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use troupe_runtime::TeamReport;
use troupe_team::TaskStatus;

use crate::exit::Failure;
use crate::framing::{Checked, Ending, Framing};
use crate::hints::shell_quote;
use crate::home::{CreatedDirs, Home, create_dirs};
use crate::output::escape_controls;
use crate::script::{built_in_at, fnv1a, record_script};
use crate::work;

/// The demo project: (path relative to the workspace, content).
const PROJECT: [(&str, &str); 6] = [
    ("README.md", include_str!("demo/project/README.md")),
    (
        "wordstats/__init__.py",
        include_str!("demo/project/wordstats/__init__.py"),
    ),
    (
        "wordstats/counting.py",
        include_str!("demo/project/wordstats/counting.py"),
    ),
    (
        "tests/__init__.py",
        include_str!("demo/project/tests/__init__.py"),
    ),
    (
        "tests/test_counting.py",
        include_str!("demo/project/tests/test_counting.py"),
    ),
    (
        "tests/test_longest_word.py",
        include_str!("demo/project/tests/test_longest_word.py"),
    ),
];

/// What the Lead is asked.
const PROMPT: &str = "The unittest suite of the wordstats package in this directory fails. \
    Fix it with two teammates: one fixes the off-by-one in top_words, the other adds the \
    missing longest_word. Plan it on the task board, run the tests before and after, and tell \
    me what changed.";

/// The default workspace's name in the current directory (`-2`, `-3`, … when taken).
const DEFAULT_DIR: &str = "troupe-demo";

/// `troupe demo` as typed.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DemoFlags {
    /// Where to create the demo project: a new or empty directory. Default: ./troupe-demo in
    /// the current directory (./troupe-demo-2, -3, … when that exists). A non-empty directory
    /// is refused: nothing is ever overwritten.
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Print progress as JSON lines on stdout, ending with a `done` line holding the answer.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pace: work::PaceArgs,
    #[command(flatten)]
    sandbox: work::SandboxArgs,
    #[command(flatten)]
    budget: work::BudgetArgs,
    #[command(flatten)]
    worktree: work::WorktreeArgs,
    #[command(flatten)]
    stall: work::StallArgs,
    #[command(flatten)]
    placement: work::PlacementArgs,
}

/// `troupe demo`.
pub(crate) fn run(flags: DemoFlags, home: Home<'_>) -> Result<(), Failure> {
    // Everything is checked before anything is written.
    let sandbox = flags.sandbox.for_new()?;
    let mcp = crate::mcp::for_new(flags.sandbox.mcp_config.as_deref())?;
    // The demo's project is new: only the user's file can set `stall_after`.
    let stall_after = crate::settings::stall_after_in(&home.dir, flags.stall.stall_after)?;
    let placement = work::placement_of(&flags.placement, &home)?;
    check_python()?;
    let given = flags.workspace.is_some();
    let mut target = match flags.workspace {
        Some(dir) => Target::check(dir, &home)?,
        None => Target::default_dir()?,
    };
    // The directory first (a place where nothing can be created is refused before anything is
    // written), then the script in the home (an unusable home removes the directory again, so
    // it leaves no project behind), then the project.
    let mut created = target.make_dir()?;
    // The directory is this demo's alone while it runs (`_claim`, dropped at the end: a demo
    // started there meanwhile is refused; one killed releases it). Claimed, it is looked at
    // again: another demo may have started in it since the check (its project half written,
    // which the check would take for a stopped demo's leftovers) and ended or been stopped.
    // A directory another demo holds is left as it is (not undone: it is that demo's now).
    let _claim = loop {
        match claim(&target.dir) {
            Ok(claim) => break claim,
            // The default directory another demo took meanwhile: the next one.
            Err(Claim::Busy(_)) if !given => {
                target = Target::default_dir()?;
                created = target.make_dir()?;
            }
            Err(Claim::Busy(e)) => return Err(e),
            Err(Claim::Unusable(e)) => {
                created.undo();
                return Err(e);
            }
        }
    };
    let target = Target::check(target.dir, &home).inspect_err(|_| created.undo())?;
    home.prepare().inspect_err(|_| created.undo())?;
    let worktree = flags.worktree.worktree;
    let script = record_script(&home.dir, worktree).inspect_err(|_| created.undo())?;
    let workspace = target.write_project()?;
    if worktree {
        // The project becomes a repository the teammates' branches start from.
        troupe_runtime::worktree::init_repository(&workspace, "wordstats: the demo project")
            .map_err(Failure::work)?;
    }
    let shown = shell_quote(&workspace.display().to_string());
    let script_shown = shell_quote(&script.display().to_string());
    let framing = Framing {
        prologue: vec![
            format!(
                "demo: wrote the wordstats project to {shown}: 7 unittest tests, 5 of them failing"
            ),
            format!(
                "demo: a scripted Lead and two teammates (alpha, beta) fix it offline, through the \
                 real runtime and tools (script: {script_shown})"
            ),
        ],
        epilogue: Some(Box::new(move |ending: &Ending<'_>| {
            if worktree {
                worktree_epilogue(ending, &shown)
            } else {
                epilogue(ending, &shown)
            }
        })),
        // Say what the project's tests really do now, whatever the script claimed, and
        // whether the board was left with work: a run that leaves either exits 1. (With
        // worktrees the Lead's checkout is unchanged until `troupe team merge`: only the
        // board is checked.)
        check: Some({
            let project_dir = (!worktree).then(|| workspace.clone());
            Box::new(move |team: Option<&TeamReport>| demo_outcome(project_dir.as_deref(), team))
        }),
        run_hints: false,
    };
    work::run_scripted_team(
        &script,
        &workspace,
        PROMPT.to_owned(),
        work::ScriptedRun {
            json: flags.json,
            pace: flags.pace,
            sandbox,
            mcp,
            budget: flags.budget,
            worktree,
            stall_after,
            placement,
        },
        home,
        framing,
    )
}

/// The framing of `troupe resume` for a session: a demo session (its model is the demo's
/// script recorded under `home`, `<home>/demo/script-….json`) has its project's tests checked
/// after the run, exactly as `troupe demo` does, so a resumed demo whose tests still fail
/// exits 1 (`DEMO_TESTS_FAILED`), and ends with the demo's verdict (`demo done: …` and `the
/// project's tests now: OK`). Any other session gets the plain run's framing.
pub(crate) fn resumed_framing(home: &Path, script: Option<&Path>, workspace: &Path) -> Framing {
    // Scripts are recorded by absolute path (`troupe resume` works from anywhere).
    let demo_dir = std::path::absolute(home)
        .unwrap_or_else(|_| home.to_path_buf())
        .join("demo");
    let is_demo = script.is_some_and(|path| {
        // (A worktree demo, `worktree-script-….json`, is not matched: its Lead's checkout
        // has no work to check until `troupe team merge`.)
        let named = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("script-") && n.ends_with(".json"));
        named && (path.parent() == Some(demo_dir.as_path()) || recorded_elsewhere(path))
    });
    if !is_demo {
        return Framing::default();
    }
    let project = workspace.to_path_buf();
    let shown = shell_quote(&workspace.display().to_string());
    Framing {
        check: Some(Box::new(move |team: Option<&TeamReport>| {
            demo_outcome(Some(&project), team)
        })),
        // The same verdict as `troupe demo` ends with (the run's own hints follow it).
        epilogue: Some(Box::new(move |ending: &Ending<'_>| verdict(ending, &shown))),
        ..Framing::default()
    }
}

/// Whether `path` is a demo script another home recorded (a demo resumed with another
/// `--home`, e.g. on a shared store, or by an adopter): in a directory named `demo`, named
/// `script-<16 hex digits>.json`, and its text hashes to that name, as [`record_script`]
/// writes it — not a user's own script that happens to be called so.
fn recorded_elsewhere(path: &Path) -> bool {
    if built_in_at(path) == Some(false) {
        return true;
    }
    let in_demo = path
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|d| d == "demo");
    let Some(hash) = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("script-"))
        .and_then(|n| n.strip_suffix(".json"))
        .filter(|h| h.len() == 16 && h.chars().all(|c| c.is_ascii_hexdigit()))
    else {
        return false;
    };
    in_demo && std::fs::read(path).is_ok_and(|bytes| format!("{:016x}", fnv1a(&bytes)) == hash)
}

/// The closing lines of `demo --worktree`: where each teammate's work is, how to merge it,
/// then how to run the tests and look at the Team.
fn worktree_epilogue(ending: &Ending<'_>, project: &str) -> Vec<String> {
    let (id, home) = (ending.id, ending.home);
    let mut lines = vec![
        String::new(),
        if let Some((_, message)) = ending
            .check
            .and_then(|c| c.failure.as_ref())
            .filter(|_| ending.completed)
        {
            format!("demo finished with {message}; the Lead's checkout is {project}")
        } else if ending.completed {
            format!(
                "demo done: each teammate's work is on its own branch; the Lead's checkout \
                 {project} is unchanged until you merge them"
            )
        } else {
            format!("demo stopped: the project is in {project}")
        },
    ];
    let mut rows: Vec<(String, String)> = ending
        .teammates
        .iter()
        .map(|(name, _)| {
            (
                format!("bring {name}'s branch in"),
                format!("troupe team merge {id} {name}{home}"),
            )
        })
        .collect();
    rows.extend([
        (
            "then run the project's tests".to_owned(),
            format!("cd {project} && python3 -m unittest"),
        ),
        (
            "the roster, worktrees and branches".to_owned(),
            format!("troupe team show {id}{home}"),
        ),
        (
            "remove the finished worktrees".to_owned(),
            format!("troupe team clean {id}{home}"),
        ),
    ]);
    let width = rows.iter().map(|(label, _)| label.len()).max().unwrap_or(0);
    lines.extend(
        rows.into_iter()
            .map(|(label, command)| format!("  {label:<width$}  {command}")),
    );
    lines
}

/// The closing lines: where the project is, how to run its tests, how to look at the Team.
fn epilogue(ending: &Ending<'_>, project: &str) -> Vec<String> {
    let (id, home) = (ending.id, ending.home);
    let mut rows = vec![
        (
            "run the project's tests".to_owned(),
            format!("cd {project} && python3 -m unittest"),
        ),
        (
            "the roster and the board".to_owned(),
            format!("troupe team show {id}{home}"),
        ),
        (
            "check every Team rule".to_owned(),
            format!("troupe team verify {id}{home}"),
        ),
        (
            "the Lead's log".to_owned(),
            format!("troupe log {id}{home}"),
        ),
    ];
    for (name, member) in &ending.teammates {
        rows.push((
            format!("{name}'s log"),
            format!("troupe log {member}{home}"),
        ));
    }
    rows.push((
        "watch it in a browser".to_owned(),
        // `troupe web` prints the URL it serves (another `--port` serves another one), so
        // this names the default port as such rather than claiming to know it.
        format!(
            "troupe web{home}  (then open its URL + #{id}; at the default port: \
             http://127.0.0.1:{}/#{id})",
            crate::web::DEFAULT_PORT
        ),
    ));
    // A run that did not finish ends with the run's own line naming `troupe resume` (the
    // interruption notice, or the Lead's failure), so the command is not repeated here.
    if ending.completed {
        rows.push((
            "reopen the session".to_owned(),
            format!("troupe resume {id}{home}"),
        ));
    }
    let width = rows.iter().map(|(label, _)| label.len()).max().unwrap_or(0);
    let mut lines = verdict(ending, project);
    lines.extend(
        rows.into_iter()
            .map(|(label, command)| format!("  {label:<width$}  {command}")),
    );
    if ending.completed {
        lines.push(
            "beta's log shows the FS_STALE_VERSION edit, the re-read and the retry; `troupe \
             resume` continues a run stopped by a crash or Ctrl-C (a finished one just prints \
             its answer)."
                .to_owned(),
        );
    }
    lines
}

/// The demo's verdict, after a blank line: whether it is done (or finished with the tests
/// still failing, or stopped) and where the project is, then the project's tests now (when
/// they were checked). The end of `troupe demo` and of a resumed demo.
fn verdict(ending: &Ending<'_>, project: &str) -> Vec<String> {
    let failed = ending.check.and_then(|c| c.failure.as_ref());
    let mut lines = vec![
        String::new(),
        if ending.completed && failed.is_none() {
            format!("demo done: the project is in {project}")
        } else if let Some((DEMO_TASKS_OPEN, message)) = failed.filter(|_| ending.completed) {
            format!("demo finished with {message}; the project is in {project}")
        } else if ending.completed {
            format!(
                "demo finished, but the project's tests still fail: the project is in {project}"
            )
        } else {
            format!("demo stopped: the project is in {project}")
        },
    ];
    if let Some(check) = ending.check {
        lines.push(format!("  the project's tests now: {}", check.summary));
    }
    lines
}

/// The demo's check of what a run left: the project's tests ([`test_outcome`], unless
/// `project` is `None`: a worktree demo, whose Lead's checkout waits for `troupe team merge`),
/// then its board — every task of the demo is meant to end `completed`, so a board left with
/// open tasks (a teammate's Team call that failed while the scripted model went on) fails the
/// check with `DEMO_TASKS_OPEN`, naming them, rather than the run being called done.
fn demo_outcome(project: Option<&Path>, team: Option<&TeamReport>) -> Checked {
    let mut checked = project.map_or_else(
        || Checked {
            summary: String::new(),
            failure: None,
        },
        test_outcome,
    );
    if checked.failure.is_none()
        && let Some(open) = team.and_then(open_tasks)
    {
        checked.failure = Some((
            DEMO_TASKS_OPEN,
            format!("tasks still open on the demo's board: {open}"),
        ));
    }
    checked
}

/// The tasks of `team`'s board not `completed` (deleted ones are not listed), as `task-2
/// in_progress (beta), task-3 pending`; `None` when there are none.
fn open_tasks(team: &TeamReport) -> Option<String> {
    let open: Vec<String> = team
        .tasks
        .iter()
        .filter(|t| t.status != TaskStatus::Completed && t.status != TaskStatus::Deleted)
        .map(|t| match t.owner_name.as_deref() {
            Some(owner) => format!("{} {} ({})", t.id, t.status, escape_controls(owner)),
            None => format!("{} {}", t.id, t.status),
        })
        .collect();
    (!open.is_empty()).then(|| open.join(", "))
}

/// The code of a demo that ended with open tasks on its board ([`demo_outcome`]).
pub(crate) const DEMO_TASKS_OPEN: &str = "DEMO_TASKS_OPEN";

/// Runs the project's `unittest` suite: its verdict line (`OK`, `FAILED (…)`, or why it could
/// not run) and, unless it passed (exit status 0), the failure `DEMO_TESTS_FAILED`.
fn test_outcome(project: &Path) -> Checked {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let (summary, passed) = match std::process::Command::new("python3")
        .args(["-m", "unittest"])
        .current_dir(project)
        .stdin(std::process::Stdio::null())
        // Its own process group: a Ctrl-C typed as the run ends (the terminal signals its
        // whole foreground group) must not kill the check and turn it into a false verdict.
        .process_group(0)
        .output()
    {
        Ok(out) => (
            match out.status.signal() {
                Some(signal) => format!("python3 -m unittest was stopped by signal {signal}"),
                None => String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map_or_else(|| "no output".to_owned(), |l| l.trim().to_owned()),
            },
            out.status.success(),
        ),
        Err(e) => (format!("could not run python3: {e}"), false),
    };
    let failure = (!passed).then(|| {
        (
            "DEMO_TESTS_FAILED",
            format!("the demo project's tests fail after the run: {summary}"),
        )
    });
    Checked { summary, failure }
}

/// The project's tests need `python3` on `PATH`; without it the demo cannot show anything.
/// (Looked up rather than run: starting Python costs more than the rest of the check.)
fn check_python() -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join("python3"))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    });
    if found {
        Ok(())
    } else {
        Err(Failure::bad_input(anyhow!(
            "troupe demo needs python3 on PATH: the demo project is a Python package tested \
             with python3 -m unittest"
        )))
    }
}

/// Where the project goes, checked but not created yet.
struct Target {
    /// Absolute (so every hint printed later works from any directory).
    dir: PathBuf,
    /// Whether the directory must be created (else it exists and is empty, or holds what an
    /// earlier `troupe demo` stopped before its session existed left of the project).
    create: bool,
    /// The directory holds only the project's own files, unchanged or cut short (see
    /// [`leftover_project`]): they are written again, whole.
    start_over: bool,
}

/// Whether `dir` holds nothing but what `troupe demo` writes before its session exists: some of
/// the project's files, each exactly as shipped or cut short (a stop while it was written), in
/// the project's own directories. Such a directory is where a demo stopped (a crash, a kill)
/// before anything ran in it, so starting over there loses nothing.
fn leftover_project(dir: &Path) -> bool {
    fn walk(root: &Path, dir: &Path) -> std::io::Result<bool> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            let Ok(rel) = path.strip_prefix(root) else {
                return Ok(false);
            };
            let rel = rel.to_string_lossy();
            let kind = entry.file_type()?;
            if kind.is_dir() {
                let prefix = format!("{rel}/");
                if !PROJECT.iter().any(|(p, _)| p.starts_with(&prefix)) || !walk(root, &path)? {
                    return Ok(false);
                }
            } else if kind.is_file() {
                let Some((_, content)) = PROJECT.iter().find(|(p, _)| *p == rel) else {
                    return Ok(false);
                };
                if !content.as_bytes().starts_with(&std::fs::read(&path)?) {
                    return Ok(false);
                }
            } else {
                return Ok(false);
            }
        }
        Ok(true)
    }
    walk(dir, dir).unwrap_or(false)
}

/// The root sessions of `journal` whose workspace is `dir` (ids, oldest first).
fn sessions_in(journal: &troupe_journal::Journal, dir: &Path) -> Vec<String> {
    let Ok(listing) = journal.list(&mut |_| {}) else {
        return Vec::new();
    };
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    listing
        .into_iter()
        .filter(|s| s.header.parent_session.is_none())
        .filter(|s| {
            s.header
                .cwd
                .as_deref()
                .is_some_and(|cwd| Path::new(cwd) == dir)
        })
        .map(|s| s.header.id.to_string())
        .collect()
}

/// An exclusive claim on the demo's workspace directory (`flock` on the directory itself, so
/// nothing is written into it), held while the demo runs; released when dropped or when the
/// process dies.
///
/// # Errors
/// [`Claim::Busy`] when another process holds it (a `troupe demo` starting or running
/// there), [`Claim::Unusable`] when the directory cannot be opened: bad input either way.
fn claim(dir: &Path) -> Result<std::fs::File, Claim> {
    let shown = dir.display();
    let file = std::fs::File::open(dir)
        .map_err(|e| Claim::Unusable(Failure::bad_input(anyhow!("demo workspace {shown}: {e}"))))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
        |_| {
            Claim::Busy(Failure::bad_input(anyhow!(
                "demo workspace {shown} is in use by another troupe demo running there: pass a \
                 new or empty directory (nothing was changed)"
            )))
        },
    )?;
    Ok(file)
}

/// Why [`claim`] failed.
enum Claim {
    /// Another process holds the directory.
    Busy(Failure),
    /// The directory cannot be opened.
    Unusable(Failure),
}

impl Target {
    /// `--workspace DIR`: a directory that does not exist yet, or an empty one — or the
    /// workspace of a demo stopped before its session existed (only the project's own files,
    /// unchanged or cut short, and no session of `home` working in it), where the demo starts
    /// over. A non-empty directory some session of `home`'s store works in is refused with
    /// the command that continues that session; an emptied one is used afresh.
    fn check(dir: PathBuf, home: &Home<'_>) -> Result<Self, Failure> {
        let dir = std::path::absolute(&dir)
            .map_err(|e| Failure::bad_input(anyhow!("demo workspace {}: {e}", dir.display())))?;
        let shown = dir.display().to_string();
        match std::fs::symlink_metadata(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self {
                dir,
                create: true,
                start_over: false,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
                Err(Failure::bad_input(anyhow!(
                    "demo workspace {shown} cannot be created: a part of its path is a file, not \
                     a directory"
                )))
            }
            Err(e) => Err(Failure::bad_input(anyhow!("demo workspace {shown}: {e}"))),
            Ok(_) if !std::fs::metadata(&dir).is_ok_and(|m| m.is_dir()) => Err(Failure::bad_input(
                anyhow!("demo workspace {shown} is not a directory: pass a new or empty directory"),
            )),
            Ok(_) => {
                let mut entries = std::fs::read_dir(&dir)
                    .map_err(|e| Failure::bad_input(anyhow!("demo workspace {shown}: {e}")))?;
                let empty = entries.next().is_none();
                // An emptied directory holds nothing of an earlier session's to protect (on a
                // shared store, any home's): the demo starts there afresh.
                if !empty && let Some(session) = sessions_in(&home.store.journal, &dir).last() {
                    let home_flag = std::path::absolute(&home.dir)
                        .map(|h| format!(" --home {}", shell_quote(&h.display().to_string())))
                        .unwrap_or_default()
                        + &home.store.arg;
                    return Err(Failure::bad_input(anyhow!(
                        "demo workspace {shown} is the workspace of session {session}: continue \
                         it with troupe resume {session}{home_flag}, or pass a new or empty \
                         directory (nothing was changed)"
                    )));
                }
                let start_over = !empty && leftover_project(&dir);
                if !empty && !start_over {
                    return Err(Failure::bad_input(anyhow!(
                        "demo workspace {shown} is not empty: pass a new or empty directory \
                         (nothing was changed)"
                    )));
                }
                rustix::fs::access(&dir, rustix::fs::Access::WRITE_OK).map_err(|e| {
                    Failure::bad_input(anyhow!("demo workspace {shown} is not writable: {e}"))
                })?;
                Ok(Self {
                    dir,
                    create: false,
                    start_over,
                })
            }
        }
    }

    /// The first of ./troupe-demo, ./troupe-demo-2, … that does not exist.
    fn default_dir() -> Result<Self, Failure> {
        let cwd = std::env::current_dir().map_err(|e| {
            Failure::bad_input(anyhow!(
                "cannot read the current directory ({e}): pass --workspace DIR"
            ))
        })?;
        for n in 1..=1000u32 {
            let name = if n == 1 {
                DEFAULT_DIR.to_owned()
            } else {
                format!("{DEFAULT_DIR}-{n}")
            };
            let dir = cwd.join(name);
            if std::fs::symlink_metadata(&dir)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
            {
                return Ok(Self {
                    dir,
                    create: true,
                    start_over: false,
                });
            }
        }
        Err(Failure::bad_input(anyhow!(
            "{}/{DEFAULT_DIR}-1000 and all before it exist: pass --workspace DIR",
            cwd.display()
        )))
    }

    /// Creates the directory and any missing parents (when needed). A place where that is
    /// impossible (`/proc/x`, a read-only file system) is bad input in one line naming where the
    /// creation failed.
    fn make_dir(&self) -> Result<CreatedDirs, Failure> {
        if !self.create {
            return Ok(CreatedDirs::default());
        }
        create_dirs(&self.dir).map_err(|(dir, e)| {
            let within = dir
                .parent()
                .map_or_else(String::new, |p| format!(" in {}", p.display()));
            Failure::bad_input(anyhow!(
                "cannot create the demo workspace {}: creating a directory{within} failed \
                 ({e}); pass --workspace with a new or empty directory where you can write",
                self.dir.display()
            ))
        })
    }

    /// Writes the project into the directory [`Target::make_dir`] made ready, never replacing
    /// a file — except, when starting over, the project's own files left by the stopped demo
    /// (each unchanged or a cut-short copy of the same file), which are written whole.
    fn write_project(self) -> Result<PathBuf, Failure> {
        let shown = self.dir.display().to_string();
        let bad = |e: std::io::Error| Failure::bad_input(anyhow!("demo workspace {shown}: {e}"));
        for (path, content) in PROJECT {
            let file = self.dir.join(path);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent).map_err(bad)?;
            }
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(!self.start_over)
                .create(self.start_over)
                .truncate(self.start_over)
                .open(&file)
                .map_err(bad)?;
            out.write_all(content.as_bytes()).map_err(bad)?;
        }
        Ok(self.dir)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::script::SCRIPT;

    #[test]
    fn the_script_loads_and_scripts_the_three_members() {
        let script = troupe_llm::ScriptedProvider::from_json_str(SCRIPT, "demo").unwrap();
        assert_eq!(script.agent_names(), ["alpha", "beta", "lead"]);
    }

    #[test]
    fn the_script_name_is_stable() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
