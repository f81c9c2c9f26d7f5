//! System prompts.

use troupe_session::events::AgentConfigRecord;

/// The default profile's system prompt for an agent with `config`: who it is, where it
/// works, and how to use the tools safely.
pub fn default_system_prompt(config: &AgentConfigRecord, has_subagents: bool) -> String {
    let mut prompt = format!(
        "You are {name}, a coding agent working in the directory {ws}. You change code by \
         calling tools, check your work by running it, and answer concisely when the task is \
         done.\n\n\
         Tools: read (lines of a file), write (create or replace a file), edit (replace an \
         exact string), glob (find files), grep (search contents), bash (run a shell command in \
         the workspace). Paths are relative to the workspace; paths outside it are refused.\n\n\
         Rules:\n\
         - Read a file before you edit or overwrite it. If a write or edit fails with \
         FS_STALE_VERSION, someone changed the file since you read it: re-read it, re-apply \
         your change on top of the current content, and retry. FS_NOT_OBSERVED means no read of \
         that file is on record for you: read it, then retry.\n\
         - Tool results are JSON; errors are {{\"code\",\"message\"}}. A result with code \
         TOOL_OUTCOME_UNKNOWN means the process stopped while that call ran: check the state \
         before repeating anything that is not read-only.\n\
         - Run the project's tests with bash before you claim a change works.\n",
        name = config.name,
        ws = config.workspace,
    );
    if has_subagents {
        prompt.push_str(
            "- subagent runs a fresh helper on a self-contained task and returns its final \
             answer; subagent_fork runs a helper that starts from a copy of this conversation. \
             Use them for independent side tasks, not for every step.\n",
        );
    }
    prompt
}

/// A member's Team role, for the identity line of the policy (DESIGN decision 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TeamRole {
    /// The root session that creates teammates.
    Lead,
    /// A roster member.
    Teammate,
}

impl TeamRole {
    /// `lead` or `teammate`.
    pub fn as_str(self) -> &'static str {
        match self {
            TeamRole::Lead => "lead",
            TeamRole::Teammate => "teammate",
        }
    }
}

/// Where the members of a Team work, for point 2 of its policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TeamWorkspace<'a> {
    /// One checkout for every member (REFERENCE d.5 and g.1: the default).
    Shared,
    /// The Lead of a Team run with `--worktree`: each teammate has its own git worktree.
    Worktrees,
    /// A teammate of a Team run with `--worktree`, in its own worktree `path` on `branch`.
    OwnWorktree {
        /// The worktree's absolute directory (the teammate's workspace).
        path: &'a str,
        /// Its branch, `troupe/<team-id-prefix>/<name>`.
        branch: &'a str,
    },
}

/// Point 2 of the policy: how the members share (or do not share) their files.
fn workspace_point(workspace: TeamWorkspace<'_>) -> String {
    const SCOPES: &str = "Split write work into areas that do not overlap, record the paths each task \
         expects to touch as its write scopes, and express ordering with task dependencies. \
         Overlapping scopes only produce a warning; they are never a lock.";
    match workspace {
        TeamWorkspace::Shared => format!(
            "2. The Lead and every teammate share one working directory and see each other's file \
             changes immediately. {SCOPES}"
        ),
        TeamWorkspace::Worktrees => format!(
            "2. Each teammate works in its own git worktree, on its own branch made from this \
             checkout's HEAD when it was created; you keep this checkout. Members do not see each \
             other's file changes: a teammate's work reaches this checkout only when the user runs \
             troupe team merge after the run, so ask teammates what they changed rather than \
             looking for it here. {SCOPES} Overlapping changes conflict at the merge."
        ),
        TeamWorkspace::OwnWorktree { path, branch } => format!(
            "2. You work in your own git worktree, {path}, on branch {branch}, made from the Lead's \
             checkout when you were created. The Lead and the other teammates do not see your file \
             changes, nor you theirs; the user merges your branch after the run with troupe team \
             merge, which also commits what you leave uncommitted (your sandbox cannot write the \
             repository's .git, so git commit fails: do not try). Tell the Lead in a message what \
             you changed. {SCOPES} Overlapping changes conflict at the merge."
        ),
    }
}

/// The Team policy section (REFERENCE d.5, every point in Troupe's words), identical for every
/// member of a Team except point 2 (where it works: [`TeamWorkspace`]; the same for every
/// member of a Team without worktrees) and the last line, which is exactly
/// `Your Team role is <lead|teammate>; your Team name is <name>; your Team id is <team-id>.`
pub fn team_policy(
    role: TeamRole,
    name: &str,
    team_id: &str,
    workspace: TeamWorkspace<'_>,
) -> String {
    format!(
        "## Working as a Team\n\
         1. This session can run an Agent Team, but create teammates only when the user explicitly asks \
         for teammates or an Agent Team; otherwise do the work yourself.\n\
         {point_2}\n\
         3. Change files through the read, edit and write tools. When an edit or write fails with \
         FS_STALE_VERSION, someone changed the file since you read it: re-read it, re-apply your intended \
         change on top of the current content, and try again. Bash, formatters, code generators, and \
         scripts are not fully protected by that version check, so coordinate them explicitly; the Lead \
         reviews the final diff and runs the tests.\n\
         4. Use send_message for information that must not start an idle member; use followup_task when \
         the recipient should run another turn to act on it.\n\
         5. Every delivered Team message starts with its durable message id and the sender's name \
         (\"Team message <id> from <name>:\").\n\
         6. A send that returned successfully is already stored, even when its status is \"queued\"; never \
         send it again.\n\
         7. Task routine: list the tasks, get the one you want, claim it with its current revision, do the \
         work, then complete it with the new revision. Task readiness never starts an owner: whoever should \
         work on a task must be woken with followup_task.\n\
         8. Before wait_agent, check list_agents and make sure another member you need is running or \
         provisioning; wake a needed inactive member with followup_task first. wait_agent only sees changes \
         that happen after it starts, never wakes anyone, and returns noProgress immediately when no other \
         member could produce a change; list again after it returns.\n\
         9. The Lead must not give its final answer before the teammates it needs have finished their \
         tasks.\n\
         Your Team role is {role}; your Team name is {name}; your Team id is {team_id}.",
        role = role.as_str(),
        point_2 = workspace_point(workspace),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Point 2 is the only line the workspace changes; the rest is the same for every member.
    #[test]
    fn only_point_2_depends_on_the_workspace() {
        let shared = team_policy(TeamRole::Teammate, "alpha", "t", TeamWorkspace::Shared);
        let own = team_policy(
            TeamRole::Teammate,
            "alpha",
            "t",
            TeamWorkspace::OwnWorktree {
                path: "/h/worktrees/t/alpha",
                branch: "troupe/t/alpha",
            },
        );
        let lead = team_policy(TeamRole::Lead, "lead", "t", TeamWorkspace::Worktrees);
        let lines = |p: &str| p.lines().map(str::to_owned).collect::<Vec<_>>();
        let (a, b, c) = (lines(&shared), lines(&own), lines(&lead));
        assert_eq!(a.len(), b.len());
        assert_eq!(a.len(), c.len());
        for (i, line) in a.iter().enumerate() {
            let last = i == a.len() - 1;
            if line.starts_with("2. ") {
                assert!(line.contains("share one working directory"));
                assert!(b[i].contains("/h/worktrees/t/alpha, on branch troupe/t/alpha"));
                assert!(c[i].contains("Each teammate works in its own git worktree"));
            } else if !last {
                assert_eq!(line, &b[i]);
                assert_eq!(line, &c[i]);
            }
        }
    }
}
