//! Teammates' own git worktrees (issue 17 item 6, `--worktree`): the repository checks a Team
//! run with worktrees needs, the creation (and re-creation after a crash) of a teammate's
//! worktree, `troupe team merge` and `troupe team clean`. Without `--worktree` nothing here
//! runs: every member shares the Lead's checkout (REFERENCE g.1: no worktree is ever created
//! silently).
//!
//! Every operation runs the `git` program (it must be on `PATH`) in the Lead's repository or
//! in a worktree, with `GIT_DIR`, `GIT_WORK_TREE`, `GIT_INDEX_FILE` and `GIT_COMMON_DIR`
//! removed from its environment (a run inside a git hook must not aim at another repository)
//! and `GIT_TERMINAL_PROMPT=0`. They block: async callers run them in `spawn_blocking`.
//!
//! Where a worktree lives: `<home>/worktrees/<team-id>/<name>` — outside the repository's
//! tree (the Lead's `git status`, `glob` and test discovery never see a teammate's copy, and
//! the Lead's sandbox cannot write into it), and beneath nothing another member may write.
//! The branch is `troupe/<first 8 characters of the team id>/<name>`, created from the
//! commit the Lead's `HEAD` named when the teammate was created.
//!
//! What survives a crash, at each point of a teammate's creation (`roster::spawn`):
//! 1. before the `provisioning` record is durable: nothing (no record, no branch, no
//!    directory; the name is free);
//! 2. after the record, before or while `git worktree add` runs: the record names the path,
//!    the branch and the base commit; the branch and a half-made directory may or may not
//!    exist. The resume's roster reconciliation calls [`ensure`], which prunes stale
//!    registrations, removes a directory git had not finished (a registration still locked
//!    `initializing`, or a directory git does not know), and adds the worktree again — on
//!    the existing branch when `git worktree add -b` had created it, so there is never a
//!    second branch; then the child is created under its reserved id as for any cut spawn;
//! 3. after `git worktree add`, before the child's prompt is durable: [`ensure`] finds the
//!    registered worktree on its branch and reuses it;
//! 4. after the child's prompt: the worktree is complete; the member is settled `active`.
//!
//! A worktree removed later (`troupe team clean`, or by hand) is added again from its branch
//! when the teammate is next started ([`restore`]): the branch holds everything it committed,
//! and `team clean` never removes a worktree with uncommitted changes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use troupe_protocol::ErrorCode;
use troupe_team::{MemberWorktree, TeamId};

/// The environment variables removed from every `git` this module runs.
const GIT_ENV_REMOVED: [&str; 4] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
];

/// The identity of the commits Troupe makes when the repository names none (`user.name` /
/// `user.email` unset): `Troupe <troupe@localhost>`.
const FALLBACK_NAME: &str = "Troupe";
/// See [`FALLBACK_NAME`].
const FALLBACK_EMAIL: &str = "troupe@localhost";

/// Why a worktree operation failed. Codes (stable): `WORKTREE_NOT_A_REPOSITORY`,
/// `WORKTREE_DIRTY_INDEX`, `WORKTREE_DIRTY_CHECKOUT`, `WORKTREE_UNKNOWN_BRANCH`,
/// `WORKTREE_MEMBER_RUNNING` and `TEAM_NO_WORKTREE` are bad input (the `troupe` binary exits 2); `TEAM_MERGE_CONFLICT` and
/// `WORKTREE_GIT_FAILED` are failures of the work (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    /// `--worktree` for a workspace that is not inside a git repository with a commit (or
    /// `git` is not installed): `reason` says which.
    #[error("--worktree needs a git repository with a commit to branch from: {path}: {reason}")]
    NotARepository {
        /// The workspace.
        path: String,
        /// What git said (its first line), or that there is no commit.
        reason: String,
    },
    /// `--worktree` while the repository's index holds staged or unmerged changes: a
    /// teammate's branch starts from `HEAD`, which would silently leave them out.
    #[error(
        "--worktree cannot branch from {top}: its index has staged or unmerged changes ({paths}); \
         commit or unstage them first"
    )]
    DirtyIndex {
        /// The repository's top level.
        top: String,
        /// The paths, comma-separated (at most ten, then `…`).
        paths: String,
    },
    /// `team merge` while the Lead's checkout has uncommitted changes to tracked files: an
    /// aborted merge could not restore them.
    #[error(
        "the Lead's checkout {top} has uncommitted changes ({paths}): commit or stash them \
         before troupe team merge"
    )]
    DirtyCheckout {
        /// The repository's top level.
        top: String,
        /// The paths, comma-separated (at most ten, then `…`).
        paths: String,
    },
    /// `team merge --into BRANCH` for a branch that does not exist (or a detached `HEAD` and
    /// no `--into`).
    #[error("{0}")]
    UnknownBranch(String),
    /// `team merge` of a member that has no worktree (a Team run without `--worktree`).
    #[error("teammate {name} has no worktree: the Team was not run with --worktree")]
    NoWorktree {
        /// The member.
        name: String,
    },
    /// `team merge` of a teammate that is running (its log's writer is resident: the file
    /// lock, or the lease on NATS): its worktree may change under the merge.
    #[error(
        "teammate {name} is running ({holder}): troupe team merge takes its work once it has \
         stopped (the Team's run ended, or the teammate settled and was let go)"
    )]
    MemberRunning {
        /// The member.
        name: String,
        /// Who runs it, as the store tells it (`held by pid 42 on host h`), or `its log is
        /// locked`.
        holder: String,
    },
    /// The merge conflicts: it was aborted, the Lead's branch, index and tree are as before.
    #[error(
        "merging {branch} into {into} conflicts in {}: the merge was aborted, nothing was \
         committed to {into}{}",
        paths.join(", "),
        work_commit.as_ref().map_or_else(String::new, |c| format!(
            " (the teammate's uncommitted work was committed on {branch} first: {}, to merge \
             by hand)",
            c.get(..12).unwrap_or(c)
        ))
    )]
    MergeConflict {
        /// The teammate's branch.
        branch: String,
        /// The branch merged into.
        into: String,
        /// The conflicting paths, sorted.
        paths: Vec<String>,
        /// The commit this merge made on the teammate's branch of its uncommitted work, if any
        /// (it stays there).
        work_commit: Option<String>,
    },
    /// A `git` command failed (or could not be started).
    #[error("git {args} (in {dir}) failed: {message}")]
    Git {
        /// Its arguments, space-separated.
        args: String,
        /// The directory it ran in.
        dir: String,
        /// Its standard error (trimmed), or why it could not start.
        message: String,
    },
}

impl ErrorCode for WorktreeError {
    fn code(&self) -> &'static str {
        match self {
            WorktreeError::NotARepository { .. } => "WORKTREE_NOT_A_REPOSITORY",
            WorktreeError::DirtyIndex { .. } => "WORKTREE_DIRTY_INDEX",
            WorktreeError::DirtyCheckout { .. } => "WORKTREE_DIRTY_CHECKOUT",
            WorktreeError::UnknownBranch(_) => "WORKTREE_UNKNOWN_BRANCH",
            WorktreeError::NoWorktree { .. } => "TEAM_NO_WORKTREE",
            WorktreeError::MemberRunning { .. } => "WORKTREE_MEMBER_RUNNING",
            WorktreeError::MergeConflict { .. } => "TEAM_MERGE_CONFLICT",
            WorktreeError::Git { .. } => "WORKTREE_GIT_FAILED",
        }
    }
}

/// The repository a `--worktree` Team branches from: its top level and the commit of `HEAD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repository {
    /// The top level of the Lead's checkout (absolute).
    pub top: PathBuf,
    /// `HEAD`'s commit (40 hexadecimal digits).
    pub head: String,
}

/// A `git` command in `dir`.
fn git(dir: &Path) -> Command {
    let mut command = Command::new("git");
    command.arg("-C").arg(dir);
    for var in GIT_ENV_REMOVED {
        command.env_remove(var);
    }
    command.env("GIT_TERMINAL_PROMPT", "0");
    command
}

/// Runs `git -C dir ARGS`, returning its output whatever its status.
fn run(dir: &Path, args: &[&str]) -> Result<Output, WorktreeError> {
    git(dir)
        .args(args)
        .output()
        .map_err(|e| WorktreeError::Git {
            args: args.join(" "),
            dir: dir.display().to_string(),
            message: format!("could not run git: {e}"),
        })
}

/// Runs `git -C dir ARGS`, which must succeed; returns its standard output, trimmed.
fn run_ok(dir: &Path, args: &[&str]) -> Result<String, WorktreeError> {
    let output = run(dir, args)?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        Err(failed(dir, args, &output))
    }
}

/// The error of a `git` that ran and failed.
fn failed(dir: &Path, args: &[&str], output: &Output) -> WorktreeError {
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    WorktreeError::Git {
        args: args.join(" "),
        dir: dir.display().to_string(),
        message: if stderr.is_empty() {
            format!("exit status {}", output.status)
        } else {
            stderr
        },
    }
}

/// Paths, comma-separated, at most ten (then `…`).
fn listed(paths: &[String]) -> String {
    let mut shown: Vec<&str> = paths.iter().take(10).map(String::as_str).collect();
    if paths.len() > 10 {
        shown.push("…");
    }
    shown.join(", ")
}

/// Lines of a command's output that are not empty.
fn lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// The checks of `--worktree` for a Team working in `workspace` (before anything is
/// written): `workspace` is inside a git repository, `HEAD` names a commit, and the index
/// holds no staged or unmerged change.
///
/// # Errors
/// `WORKTREE_NOT_A_REPOSITORY` (not a repository, no commit, no `git`),
/// `WORKTREE_DIRTY_INDEX`.
pub fn check_repository(workspace: &Path) -> Result<Repository, WorktreeError> {
    let not_a_repo = |reason: String| WorktreeError::NotARepository {
        path: workspace.display().to_string(),
        reason,
    };
    let output =
        run(workspace, &["rev-parse", "--show-toplevel"]).map_err(|e| not_a_repo(e.to_string()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first = stderr.lines().next().unwrap_or("not a git repository");
        return Err(not_a_repo(first.trim().to_owned()));
    }
    let top = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    let head = run(&top, &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])?;
    if !head.status.success() {
        return Err(not_a_repo(
            "HEAD names no commit yet (commit something first)".to_owned(),
        ));
    }
    let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    let mut dirty: BTreeSet<String> = lines(&run_ok(&top, &["diff", "--cached", "--name-only"])?)
        .into_iter()
        .collect();
    dirty.extend(lines(&run_ok(
        &top,
        &["diff", "--name-only", "--diff-filter=U"],
    )?));
    if !dirty.is_empty() {
        let paths: Vec<String> = dirty.into_iter().collect();
        return Err(WorktreeError::DirtyIndex {
            top: top.display().to_string(),
            paths: listed(&paths),
        });
    }
    Ok(Repository { top, head })
}

/// The branch of teammate `name` of Team `team`: `troupe/<first 8 characters of the team
/// id>/<name>`.
pub fn branch_of(team: &TeamId, name: &str) -> String {
    let id = team.as_str();
    let prefix: String = id.chars().take(8).collect();
    format!("troupe/{prefix}/{name}")
}

/// The worktree of teammate `name` of Team `team` under `root` (the Lead's recorded
/// `worktreeRoot`), branching from `base`: `<root>/<team-id>/<name>` on [`branch_of`].
pub fn member_worktree(root: &Path, team: &TeamId, name: &str, base: &str) -> MemberWorktree {
    MemberWorktree {
        path: root.join(team.as_str()).join(name).display().to_string(),
        branch: branch_of(team, name),
        base: base.to_owned(),
    }
}

/// One entry of `git worktree list --porcelain`.
#[derive(Debug, Default)]
struct Registered {
    path: PathBuf,
    branch: Option<String>,
    locked: bool,
}

/// The worktrees registered in the repository of `top`.
fn registered(top: &Path) -> Result<Vec<Registered>, WorktreeError> {
    let text = run_ok(top, &["worktree", "list", "--porcelain"])?;
    let mut out = Vec::new();
    let mut current: Option<Registered> = None;
    for line in text.lines() {
        if let Some(path) = line.strip_prefix("worktree ") {
            out.extend(current.take());
            current = Some(Registered {
                path: PathBuf::from(path),
                ..Registered::default()
            });
        } else if let Some(entry) = current.as_mut() {
            if let Some(branch) = line.strip_prefix("branch ") {
                entry.branch = Some(branch.trim_start_matches("refs/heads/").to_owned());
            } else if line == "locked" || line.starts_with("locked ") {
                entry.locked = true;
            }
        }
    }
    out.extend(current);
    Ok(out)
}

/// `path` with symbolic links resolved when it exists, else as given.
fn real(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Whether branch `branch` exists in the repository of `top`.
fn branch_exists(top: &Path, branch: &str) -> Result<bool, WorktreeError> {
    let reference = format!("refs/heads/{branch}");
    Ok(run(top, &["rev-parse", "--verify", "--quiet", &reference])?
        .status
        .success())
}

/// What [`ensure`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    /// The worktree was added (its branch created from `base`, or the existing one reused).
    Added,
    /// A complete worktree on its branch was already there.
    Reused,
}

/// Makes teammate worktree `worktree` of the repository of `top` exist: reused when
/// registered on its branch and complete; otherwise stale registrations are pruned, a
/// directory git had not finished (a registration still locked, or a directory git does not
/// know — the path is Troupe's own, under its home) is removed, and the worktree is added:
/// on its branch when it exists (`git worktree add` was cut after creating it: never a
/// second branch), else with the branch created from `base`. Idempotent: see the module's
/// crash table.
///
/// # Errors
/// `WORKTREE_GIT_FAILED` (e.g. the path is registered on another branch, or the base commit
/// is gone).
pub fn ensure(top: &Path, worktree: &MemberWorktree) -> Result<Ensured, WorktreeError> {
    let path = PathBuf::from(&worktree.path);
    run_ok(top, &["worktree", "prune"])?;
    let here = registered(top)?
        .into_iter()
        .find(|r| real(&r.path) == real(&path));
    if let Some(entry) = here {
        let complete = !entry.locked && path.join(".git").exists();
        if complete && entry.branch.as_deref() == Some(worktree.branch.as_str()) {
            return Ok(Ensured::Reused);
        }
        if entry
            .branch
            .as_deref()
            .is_some_and(|b| b != worktree.branch)
        {
            return Err(WorktreeError::Git {
                args: "worktree add".to_owned(),
                dir: top.display().to_string(),
                message: format!(
                    "{} is a worktree of branch {}, not {}",
                    path.display(),
                    entry.branch.as_deref().unwrap_or("?"),
                    worktree.branch
                ),
            });
        }
        // Cut while git was making it: start again.
        let shown = path.display().to_string();
        let _ = run(top, &["worktree", "unlock", &shown]);
        run_ok(top, &["worktree", "remove", "--force", "--force", &shown])?;
    }
    if path.exists() {
        std::fs::remove_dir_all(&path).map_err(|e| WorktreeError::Git {
            args: "worktree add".to_owned(),
            dir: top.display().to_string(),
            message: format!("cannot remove the unfinished {}: {e}", path.display()),
        })?;
    }
    let shown = path.display().to_string();
    if branch_exists(top, &worktree.branch)? {
        run_ok(
            top,
            &["worktree", "add", "--quiet", &shown, &worktree.branch],
        )?;
    } else {
        run_ok(
            top,
            &[
                "worktree",
                "add",
                "--quiet",
                "-b",
                &worktree.branch,
                &shown,
                &worktree.base,
            ],
        )?;
    }
    Ok(Ensured::Added)
}

/// Adds again, from its branch, the worktree `path` on `branch` of the repository holding
/// `lead_workspace` when the directory is missing (removed by `troupe team clean` or by
/// hand); does nothing when it exists. Returns whether it added it.
///
/// # Errors
/// `WORKTREE_NOT_A_REPOSITORY` (the Lead's workspace is no longer a repository),
/// `WORKTREE_GIT_FAILED`.
pub fn restore(lead_workspace: &Path, path: &Path, branch: &str) -> Result<bool, WorktreeError> {
    if path.exists() {
        return Ok(false);
    }
    let top = top_level(lead_workspace)?;
    run_ok(&top, &["worktree", "prune"])?;
    let shown = path.display().to_string();
    run_ok(&top, &["worktree", "add", "--quiet", &shown, branch])?;
    Ok(true)
}

/// The repository of the Lead's checkout `workspace` and its `HEAD` commit, at a teammate's
/// creation (the index is not checked again: the run's start did).
///
/// # Errors
/// `WORKTREE_NOT_A_REPOSITORY` (no repository, or `HEAD` names no commit).
pub fn head_of(workspace: &Path) -> Result<Repository, WorktreeError> {
    let top = top_level(workspace)?;
    let head = run(&top, &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])?;
    if !head.status.success() {
        return Err(WorktreeError::NotARepository {
            path: workspace.display().to_string(),
            reason: "HEAD names no commit".to_owned(),
        });
    }
    let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    Ok(Repository { top, head })
}

/// The top level of the repository holding `dir`.
///
/// # Errors
/// `WORKTREE_NOT_A_REPOSITORY`.
pub fn top_level(dir: &Path) -> Result<PathBuf, WorktreeError> {
    let output = run(dir, &["rev-parse", "--show-toplevel"])?;
    if output.status.success() {
        Ok(PathBuf::from(
            String::from_utf8_lossy(&output.stdout).trim(),
        ))
    } else {
        Err(WorktreeError::NotARepository {
            path: dir.display().to_string(),
            reason: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// `-c user.name=… -c user.email=…` for a commit in `dir` when the repository has no
/// identity configured (then [`FALLBACK_NAME`]), else nothing.
fn identity(dir: &Path) -> Result<Vec<String>, WorktreeError> {
    let mut args = Vec::new();
    for (key, fallback) in [("user.name", FALLBACK_NAME), ("user.email", FALLBACK_EMAIL)] {
        let set = run(dir, &["config", "--get", key])?;
        if !set.status.success() || set.stdout.iter().all(u8::is_ascii_whitespace) {
            args.push("-c".to_owned());
            args.push(format!("{key}={fallback}"));
        }
    }
    Ok(args)
}

/// Runs `git -C dir [identity] ARGS` for a commit, which must succeed.
fn commit_in(dir: &Path, args: &[&str]) -> Result<String, WorktreeError> {
    let mut all: Vec<String> = identity(dir)?;
    all.extend(args.iter().map(|a| (*a).to_owned()));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    run_ok(dir, &refs)
}

/// The changed paths `git status --porcelain` lists in `dir` (with `untracked`: untracked
/// files too; ignored files never).
fn status(dir: &Path, untracked: bool) -> Result<Vec<String>, WorktreeError> {
    let mode = if untracked {
        "--untracked-files=all"
    } else {
        "--untracked-files=no"
    };
    let args = ["status", "--porcelain", "-z", mode];
    let output = run(dir, &args)?;
    if !output.status.success() {
        return Err(failed(dir, &args, &output));
    }
    Ok(porcelain_paths(&String::from_utf8_lossy(&output.stdout)))
}

/// The paths of `git status --porcelain -z`'s entries (`XY PATH\0`, a rename or copy
/// followed by its source `ORIG\0`, which is left out), untrimmed: the status letters' leading
/// space is part of the format, and a path may hold any character but NUL.
fn porcelain_paths(text: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut entries = text.split('\0').filter(|e| !e.is_empty());
    while let Some(entry) = entries.next() {
        let Some(path) = entry.get(3..) else { continue };
        if matches!(entry.as_bytes().first(), Some(b'R' | b'C')) {
            entries.next();
        }
        paths.push(path.to_owned());
    }
    paths
}

/// Makes `dir` a git repository holding its files in one commit on branch `main` (`troupe
/// demo --worktree`, for a directory it has just written), with `__pycache__/` excluded in
/// the repository's own `info/exclude` (not a project file). Returns the commit.
///
/// # Errors
/// `WORKTREE_GIT_FAILED`.
pub fn init_repository(dir: &Path, message: &str) -> Result<String, WorktreeError> {
    run_ok(dir, &["init", "--quiet", "--initial-branch=main"])?;
    let exclude = dir.join(".git").join("info").join("exclude");
    let mut text = std::fs::read_to_string(&exclude).unwrap_or_default();
    text.push_str("__pycache__/\n");
    std::fs::create_dir_all(dir.join(".git").join("info"))
        .and_then(|()| std::fs::write(&exclude, text))
        .map_err(|e| WorktreeError::Git {
            args: "init".to_owned(),
            dir: dir.display().to_string(),
            message: format!("cannot write {}: {e}", exclude.display()),
        })?;
    run_ok(dir, &["add", "--all"])?;
    commit_in(dir, &["commit", "--quiet", "--no-verify", "-m", message])?;
    run_ok(dir, &["rev-parse", "HEAD"])
}

/// What `troupe team merge` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// The branch merged into.
    pub into: String,
    /// The commit made in the teammate's worktree of its uncommitted changes, if any.
    pub work_commit: Option<String>,
    /// The merge commit; `None` when `into` already contained the branch.
    pub merge_commit: Option<String>,
}

/// `troupe team merge`: merges teammate `name`'s branch into `into` (default: the branch the
/// Lead's checkout `top` has checked out; another branch is checked out first) with a merge
/// commit (`--no-ff`). First, the teammate's uncommitted changes in its worktree — tracked
/// and untracked files, not ignored ones — are committed on its branch (a model often does
/// not commit; its sandbox cannot write the repository's `.git`), as `NAME's uncommitted work
/// (troupe team merge)`. A conflict aborts the merge (`git merge --abort`): the Lead's branch,
/// index and tree are as before (the work commit stays on the teammate's branch).
///
/// What survives a crash: a kill during the work commit or the merge leaves what a kill of
/// `git commit`/`git merge` leaves (git's own lock files and `MERGE_HEAD`); nothing of the
/// Team's logs is written.
///
/// # Errors
/// `WORKTREE_DIRTY_CHECKOUT` (the Lead's checkout has uncommitted changes to tracked files),
/// `WORKTREE_UNKNOWN_BRANCH`, `TEAM_MERGE_CONFLICT` (with the paths), `WORKTREE_GIT_FAILED`.
pub fn merge(
    top: &Path,
    name: &str,
    worktree: &MemberWorktree,
    into: Option<&str>,
) -> Result<Merged, WorktreeError> {
    let dirty = status(top, false)?;
    if !dirty.is_empty() {
        return Err(WorktreeError::DirtyCheckout {
            top: top.display().to_string(),
            paths: listed(&dirty),
        });
    }
    let current = run(top, &["symbolic-ref", "--short", "--quiet", "HEAD"])?;
    let current = current
        .status
        .success()
        .then(|| String::from_utf8_lossy(&current.stdout).trim().to_owned());
    let into = match (into, current.as_deref()) {
        (Some(b), _) => b.to_owned(),
        (None, Some(c)) => c.to_owned(),
        (None, None) => {
            return Err(WorktreeError::UnknownBranch(format!(
                "the Lead's checkout {} has no branch checked out (a detached HEAD): name one \
                 with --into BRANCH",
                top.display()
            )));
        }
    };
    if !branch_exists(top, &into)? {
        return Err(WorktreeError::UnknownBranch(format!(
            "--into {into}: no such branch in {}",
            top.display()
        )));
    }
    if !branch_exists(top, &worktree.branch)? {
        return Err(WorktreeError::UnknownBranch(format!(
            "teammate {name}'s branch {} does not exist in {} (was it deleted?)",
            worktree.branch,
            top.display()
        )));
    }
    let path = Path::new(&worktree.path);
    let mut work_commit = None;
    if path.join(".git").exists() && !status(path, true)?.is_empty() {
        run_ok(path, &["add", "--all"])?;
        let message = format!("{name}'s uncommitted work (troupe team merge)");
        commit_in(path, &["commit", "--quiet", "--no-verify", "-m", &message])?;
        work_commit = Some(run_ok(path, &["rev-parse", "HEAD"])?);
    }
    if current.as_deref() != Some(into.as_str()) {
        run_ok(top, &["switch", "--quiet", &into])?;
    }
    let before = run_ok(top, &["rev-parse", "HEAD"])?;
    let message = format!("Merge {name}'s work ({}) into {into}", worktree.branch);
    let mut args = identity(top)?;
    args.extend(
        [
            "merge",
            "--no-ff",
            "--no-edit",
            "--quiet",
            "-m",
            &message,
            &worktree.branch,
        ]
        .iter()
        .map(|a| (*a).to_owned()),
    );
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = run(top, &refs)?;
    if !output.status.success() {
        let conflicts = lines(&run_ok(top, &["diff", "--name-only", "--diff-filter=U"])?);
        let in_merge = run(top, &["rev-parse", "--verify", "--quiet", "MERGE_HEAD"])?
            .status
            .success();
        if in_merge {
            run_ok(top, &["merge", "--abort"])?;
        }
        if conflicts.is_empty() {
            return Err(failed(top, &refs, &output));
        }
        let mut paths = conflicts;
        paths.sort();
        return Err(WorktreeError::MergeConflict {
            branch: worktree.branch.clone(),
            into,
            paths,
            work_commit,
        });
    }
    let after = run_ok(top, &["rev-parse", "HEAD"])?;
    Ok(Merged {
        into,
        work_commit,
        merge_commit: (after != before).then_some(after),
    })
}

/// What `troupe team clean` did with one worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleaned {
    /// Removed (`git worktree remove`); the branch is kept.
    Removed,
    /// The directory was already gone (its registration pruned).
    AlreadyGone,
    /// Kept: it has uncommitted changes (the paths), which `troupe team merge` commits.
    KeptDirty(Vec<String>),
}

/// Removes teammate worktree `worktree` of the repository of `top` with `git worktree
/// remove` (never forced: a worktree with uncommitted changes is kept); its branch stays.
///
/// # Errors
/// `WORKTREE_GIT_FAILED`.
pub fn remove(top: &Path, worktree: &MemberWorktree) -> Result<Cleaned, WorktreeError> {
    let path = Path::new(&worktree.path);
    if !path.exists() {
        run_ok(top, &["worktree", "prune"])?;
        return Ok(Cleaned::AlreadyGone);
    }
    let dirty = status(path, true)?;
    if !dirty.is_empty() {
        return Ok(Cleaned::KeptDirty(dirty));
    }
    run_ok(top, &["worktree", "remove", &worktree.path])?;
    Ok(Cleaned::Removed)
}

#[cfg(test)]
mod tests {
    use super::porcelain_paths;

    /// The status letters' leading space is kept (a trimmed first line lost the path's first
    /// character: ` M README.md` read as `EADME.md`), a rename's source is skipped, and a
    /// path with spaces is whole.
    #[test]
    fn porcelain_entries_give_whole_paths() {
        let text = " M README.md\0?? notes and more.txt\0R  new.py\0old.py\0MM tests/__init__.py\0";
        assert_eq!(
            porcelain_paths(text),
            [
                "README.md",
                "notes and more.txt",
                "new.py",
                "tests/__init__.py"
            ]
        );
        assert!(porcelain_paths("").is_empty());
    }
}
