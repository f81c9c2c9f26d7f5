//! What `troupe run` / `troupe resume` print while the agents work.
//!
//! Three modes, chosen once:
//! - **JSON** (`--json`): stdout carries JSON lines only: a `session` line, one line per
//!   progress event, and a final `done` line with the answer (the bare answer is not printed).
//! - **TTY** (stderr is a terminal): plain lines per tool call and turn end, plus a live status
//!   line at the bottom (current activity, elapsed time, tool calls, tokens) rewritten in place.
//! - **Plain** (stderr is not a terminal): the same plain lines, no live line.
//!
//! In every mode stderr's first line is `session <id>` and the closing summary goes to stderr;
//! in the non-JSON modes stdout carries only the Lead's final answer.
//!
//! Every agent of the run reports here (a Team's teammates, a Lead's subagents): each line and
//! event names its agent (`agentName`), and once more than one agent has spoken the live line
//! shows one `name: activity` entry per agent.
//!
//! A Team run also reports its [`Board`] (roster, tasks, mail counts) whenever it changes: a
//! `board: …` line when a task changes, a `team` JSON event, and on a terminal a live area of
//! one line per member (status, current tool), the board and the message counts.

use std::io::Write;
use std::time::Instant;

use serde_json::{Value, json};
use troupe_protocol::SessionId;
use troupe_runtime::{AgentProgress, AgentStatus, Progress};
use troupe_session::TranscriptStats;
use troupe_session::approval::Decision;
use troupe_session::events::TurnEndReason;

use crate::output::escape_controls;
use troupe_team::TeamState;

use crate::output::fit;

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutputMode {
    /// JSON lines on stdout.
    Json,
    /// Plain lines and a live status line on stderr (a terminal).
    Tty,
    /// Plain lines on stderr.
    Plain,
}

/// The terminal size assumed when neither the terminal nor `$COLUMNS`/`$LINES` tell it.
const DEFAULT_SIZE: TermSize = TermSize {
    columns: 80,
    rows: 24,
};

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TermSize {
    pub(crate) columns: usize,
    pub(crate) rows: usize,
}

impl TermSize {
    /// The size of the terminal stderr is on, as the kernel reports it (`TIOCGWINSZ`, read
    /// fresh on every call, so a resize is seen at the next redraw); where it reports nothing
    /// (not a terminal, or 0), `$COLUMNS` and `$LINES`; else 80×24.
    pub(crate) fn of_stderr() -> Self {
        let from_tty = rustix::termios::tcgetwinsize(std::io::stderr()).ok();
        let env = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .filter(|n| *n > 0)
        };
        let columns = from_tty
            .map(|w| usize::from(w.ws_col))
            .filter(|c| *c > 0)
            .or_else(|| env("COLUMNS"))
            .unwrap_or(DEFAULT_SIZE.columns);
        let rows = from_tty
            .map(|w| usize::from(w.ws_row))
            .filter(|r| *r > 0)
            .or_else(|| env("LINES"))
            .unwrap_or(DEFAULT_SIZE.rows);
        Self { columns, rows }
    }
}

/// Where the printer learns the terminal's size: the real terminal, or a fixed size (tests).
#[derive(Debug, Clone, Copy)]
enum SizeSource {
    Terminal,
    #[cfg(test)]
    Fixed(TermSize),
}

/// What one agent of the run is doing, for the live line and its turn-end lines.
struct AgentActivity {
    id: SessionId,
    name: String,
    /// `idle`, `thinking`, a tool name, …
    doing: String,
    /// Whether a turn is running.
    running: bool,
    /// The tool call running now, if any.
    tool: Option<String>,
    /// The error code of its last turn, when that turn failed (until the next turn starts).
    failed: Option<String>,
    tool_calls: u64,
    tokens_in: u64,
    tokens_out: u64,
    /// Answers of a model server so far (to tell "no usage reported" from "no answer yet");
    /// not counted for a scripted model (see [`Printer::expect_usage`]).
    answers: u64,
    /// The turns this agent's session inherited from a fork seed: its own turns are numbered
    /// after them in its log, and are shown counted from 1 (as its summary counts them).
    inherited_turns: u64,
}

/// How many turns the session of an agent inherited (a fork seed's), given its id.
pub(crate) type InheritedTurns = Box<dyn Fn(&SessionId) -> u64 + Send>;

/// Prints progress and outcomes in one [`OutputMode`].
pub(crate) struct Printer {
    mode: OutputMode,
    started: Instant,
    /// What the agents are doing now (the live line's text).
    activity: String,
    /// Every agent seen so far, in order of first appearance.
    agents: Vec<AgentActivity>,
    tool_calls: u64,
    tokens_in: u64,
    tokens_out: u64,
    /// Answers of a model server so far, over all agents.
    answers: u64,
    /// Whether answers should carry usage: the model is a server, not a script.
    usage_expected: bool,
    /// The display width of each line of the live area on screen, top first (empty: none).
    /// Cleared before other output; how many rows the lines take is worked out at the width
    /// the terminal has *then*, so a resize since the last redraw is accounted for.
    live: Vec<usize>,
    size: SizeSource,
    /// Every byte the printer wrote to stderr, when recording (tests).
    #[cfg(test)]
    recorded: Option<Vec<u8>>,
    /// The Team's board as last reported (Team runs only).
    board: Option<Board>,
    /// Looks up an agent's inherited turns when it is first seen (none: 0).
    inherited_turns: Option<InheritedTurns>,
    /// The question shown on the last line while the terminal answers an approval request.
    prompt: Option<String>,
    /// The run's root session (and `--home`/`--store` as given), named by the `troupe
    /// approve` hints.
    root: Option<(SessionId, String)>,
    /// Whether approvals are answered at this terminal.
    answers_here: bool,
}

/// What a Team looks like now, folded from its Lead log by the Team service: the roster, the
/// tasks and the mail counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Board {
    /// Every teammate (name, phase: `provisioning`, `active`, `failed`), in creation order.
    members: Vec<(String, &'static str)>,
    /// Every task that is not deleted.
    tasks: Vec<BoardTask>,
    /// The teammates another process hosts, as their hosts last reported (name, `running`
    /// or `idle`, host).
    elsewhere: Vec<(String, &'static str, String)>,
    sent: usize,
    delivered: usize,
    pending: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct BoardTask {
    id: String,
    status: &'static str,
    owner: Option<String>,
}

impl Board {
    /// The board of `state`, with the teammates `elsewhere` (id, host, live status: what
    /// `Team::hosted_elsewhere` reports) shown on their hosts.
    pub(crate) fn of(
        state: &TeamState,
        elsewhere: &[(troupe_protocol::SessionId, String, troupe_team::LiveStatus)],
    ) -> Self {
        let members = state
            .members()
            .iter()
            .map(|m| (m.name.to_string(), m.phase.as_str()))
            .collect();
        let tasks = state
            .tasks()
            .iter()
            .filter(|t| t.status != troupe_team::TaskStatus::Deleted)
            .map(|t| BoardTask {
                id: t.id.to_string(),
                status: t.status.as_str(),
                owner: t
                    .owner_id
                    .as_ref()
                    .and_then(|o| state.name_of(o))
                    .map(str::to_owned),
            })
            .collect();
        let sent = state.messages().len();
        let pending = state.pending_messages().count();
        let elsewhere = elsewhere
            .iter()
            .filter_map(|(id, host, status)| {
                let status = match status {
                    troupe_team::LiveStatus::Running => "running",
                    troupe_team::LiveStatus::Idle => "idle",
                };
                Some((state.name_of(id)?.to_owned(), status, host.clone()))
            })
            .collect::<Vec<_>>();
        let mut elsewhere = elsewhere;
        elsewhere.sort();
        Self {
            members,
            tasks,
            elsewhere,
            sent,
            delivered: sent - pending,
            pending,
        }
    }

    /// Whether `other` shows the same roster, tasks and mail counts (the hosts aside): what
    /// its JSON line holds.
    fn same_view(&self, other: &Board) -> bool {
        self.members == other.members
            && self.tasks == other.tasks
            && (self.sent, self.delivered, self.pending)
                == (other.sent, other.delivered, other.pending)
    }

    /// `task-1 completed (alpha), task-2 in_progress (beta), task-3 pending`.
    fn tasks_text(&self, separator: &str) -> String {
        if self.tasks.is_empty() {
            return "no tasks".to_owned();
        }
        self.tasks
            .iter()
            .map(|t| match &t.owner {
                Some(owner) => format!("{} {} ({owner})", t.id, t.status),
                None => format!("{} {}", t.id, t.status),
            })
            .collect::<Vec<_>>()
            .join(separator)
    }

    /// `5 sent, 4 delivered, 1 pending`.
    fn messages_text(&self) -> String {
        format!(
            "{} sent, {} delivered, {} pending",
            self.sent, self.delivered, self.pending
        )
    }

    fn to_json(&self) -> Value {
        json!({
            "event": "team",
            "members": self.members.iter().map(|(name, phase)| json!({"name": name, "phase": phase})).collect::<Vec<_>>(),
            "tasks": self.tasks.iter().map(|t| json!({"id": t.id, "status": t.status, "ownerName": t.owner})).collect::<Vec<_>>(),
            "messages": {"sent": self.sent, "delivered": self.delivered, "pending": self.pending},
        })
    }
}

/// How a run ended, for the final JSON line.
pub(crate) enum DoneStatus<'a> {
    /// The last turn completed.
    Completed,
    /// The last turn failed with this code and message.
    Failed { code: &'a str, message: &'a str },
    /// Ctrl-C, a crash or a shutdown stopped the turn.
    Interrupted,
}

impl Printer {
    pub(crate) fn new(mode: OutputMode) -> Self {
        Self {
            mode,
            started: Instant::now(),
            activity: "starting".to_owned(),
            agents: Vec::new(),
            tool_calls: 0,
            tokens_in: 0,
            tokens_out: 0,
            answers: 0,
            usage_expected: false,
            live: Vec::new(),
            size: SizeSource::Terminal,
            #[cfg(test)]
            recorded: None,
            board: None,
            inherited_turns: None,
            prompt: None,
            root: None,
            answers_here: false,
        }
    }

    /// A printer for a terminal of a fixed size that records what it writes (tests).
    #[cfg(test)]
    fn recording(mode: OutputMode, size: TermSize) -> Self {
        Self {
            size: SizeSource::Fixed(size),
            recorded: Some(Vec::new()),
            ..Self::new(mode)
        }
    }

    fn term_size(&self) -> TermSize {
        match self.size {
            SizeSource::Terminal => TermSize::of_stderr(),
            #[cfg(test)]
            SizeSource::Fixed(size) => size,
        }
    }

    /// Writes `text` to stderr as is (the live area's own bytes).
    fn write_raw(&mut self, text: &str) {
        #[cfg(test)]
        if let Some(recorded) = self.recorded.as_mut() {
            recorded.extend_from_slice(text.as_bytes());
            return;
        }
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(text.as_bytes());
        let _ = err.flush();
    }

    /// Says whether the model is a server whose answers should carry usage (true) or a
    /// script, which spends no tokens (false, the default): only a server's answers without
    /// any token make the token counts read `usage not reported by the server`.
    pub(crate) fn expect_usage(&mut self, expected: bool) {
        self.usage_expected = expected;
    }

    /// Sets how the printer learns each agent's inherited turns, so that the turn numbers it
    /// shows for a fork child count its own turns only (its log numbers them after the
    /// seed's), matching the summary's turn count. JSON progress keeps the log's numbers.
    pub(crate) fn set_inherited_turns(&mut self, lookup: InheritedTurns) {
        self.inherited_turns = Some(lookup);
    }

    /// The turn number shown for `turn` of the agent of `event`.
    fn shown_turn(&self, event: &AgentProgress, turn: u64) -> u64 {
        let inherited = self
            .agents
            .iter()
            .find(|a| a.id == event.agent)
            .map_or(0, |a| a.inherited_turns);
        turn.saturating_sub(inherited)
    }

    pub(crate) fn mode(&self) -> OutputMode {
        self.mode
    }

    /// The first output of a run: `session <id>` on stderr (and a `session` JSON line).
    pub(crate) fn session_started(&mut self, id: &SessionId, resumed: bool, model: &str) {
        let verb = if resumed { "resumed" } else { "started" };
        self.note(&format!("session {id} ({verb}, model {model})"));
        if self.mode == OutputMode::Json {
            self.json_line(&json!({
                "event": "session",
                "session": id,
                "resumed": resumed,
                "model": model,
            }));
        }
    }

    /// One stderr line (clearing the live line first; above an open prompt).
    pub(crate) fn note(&mut self, line: &str) {
        self.clear_live();
        if let Some(prompt) = self.prompt.clone() {
            self.write_raw("\r\x1b[2K");
            crate::output::eprint_line!("{line}");
            self.write_raw(&prompt);
            return;
        }
        #[cfg(test)]
        if self.recorded.is_some() {
            self.write_raw(&format!("{line}\n"));
            return;
        }
        crate::output::eprint_line!("{line}");
    }

    /// Shows one progress event.
    pub(crate) fn progress(&mut self, event: &AgentProgress) {
        self.track(event);
        match self.mode {
            OutputMode::Json => self.json_line(&progress_json(event)),
            OutputMode::Tty | OutputMode::Plain => {
                if let Some(line) = plain_line(event, self) {
                    self.note(&line);
                }
            }
        }
        // A request is shown in every mode (on stderr): someone has to see it.
        if let Progress::ApprovalRequested {
            request,
            command,
            justification,
            timeout_ms,
            again,
            ..
        } = &event.progress
        {
            let who = &event.agent_name;
            let again = if *again {
                " again (it was pending when the last run stopped)"
            } else {
                ""
            };
            self.note(&format!(
                "approval: {who} asks to run a command outside the sandbox{again} (request \
                 {request}; denied in {} without an answer):",
                humanize_ms(*timeout_ms)
            ));
            self.note(&format!("  $ {}", escape_controls(command)));
            self.note(&format!("  because: {}", escape_controls(justification)));
            if let Some((root, home)) = &self.root {
                let here = if self.answers_here {
                    "answer here, or "
                } else {
                    ""
                };
                self.note(&format!(
                    "  {here}answer with: troupe approve {root} {request}{home} [--deny|--always] (or in \
                     troupe web)"
                ));
            }
        }
        self.redraw();
    }

    /// Says which session `troupe approve` names in the hints (the run's root) and whether
    /// approvals are answered at this terminal too.
    pub(crate) fn set_approval_hints(
        &mut self,
        root: SessionId,
        home_args: &str,
        answers_here: bool,
    ) {
        self.root = Some((root, home_args.to_owned()));
        self.answers_here = answers_here;
    }

    /// Shows `text` as the question the terminal answers, on the last line (the cursor
    /// after it, so what is typed follows it): the live area is put away while it is shown,
    /// and permanent lines are printed above it. `None` takes it away (`answered`: the user's
    /// Enter already moved to a new line, so the question and the answer stay on screen).
    pub(crate) fn set_prompt(&mut self, text: Option<String>, answered: bool) {
        match (text, self.mode) {
            (Some(text), OutputMode::Tty) => {
                self.clear_live();
                if self.prompt.is_some() {
                    self.write_raw("\r\x1b[2K");
                }
                self.write_raw(&text);
                self.prompt = Some(text);
            }
            (Some(text), _) => {
                self.note(&text);
            }
            (None, OutputMode::Tty) => {
                if self.prompt.take().is_some() && !answered {
                    self.write_raw("\r\x1b[2K");
                }
                self.redraw();
            }
            (None, _) => {}
        }
    }

    /// Progress events were dropped because the printer fell behind.
    pub(crate) fn lagged(&mut self, skipped: u64) {
        match self.mode {
            OutputMode::Json => self.json_line(&json!({"event": "lagged", "skipped": skipped})),
            _ => self.note(&format!("({skipped} progress events not shown)")),
        }
    }

    /// Reports the Team's board; does nothing when it did not change. A change of the tasks
    /// gets a `board: …` line; every change a `team` JSON event.
    pub(crate) fn team(&mut self, board: Board) {
        if self.board.as_ref() == Some(&board) {
            return;
        }
        let tasks_changed = self.board.as_ref().is_none_or(|b| b.tasks != board.tasks);
        // The JSON line holds the roster, the tasks and the mail, not the hosts: a change of
        // hosts alone is only redrawn.
        let shown_changed = self.board.as_ref().is_none_or(|b| !b.same_view(&board));
        match self.mode {
            OutputMode::Json if shown_changed => self.json_line(&board.to_json()),
            OutputMode::Json => {}
            OutputMode::Tty | OutputMode::Plain => {
                if tasks_changed && !board.tasks.is_empty() {
                    self.note(&format!(
                        "board: {} | messages: {}",
                        board.tasks_text(", "),
                        board.messages_text()
                    ));
                }
            }
        }
        self.board = Some(board);
        self.redraw();
    }

    /// Redraws the live area (TTY mode only): one status line, or for a Team one line per
    /// member, the board and the message counts.
    ///
    /// No line is wider than the terminal less one column (display width: wide characters
    /// count two), so none wraps and the cursor never waits at a line's last cell; a longer
    /// one is cut and ends with `…`. The area is at most the terminal's height less one row
    /// (member rows beyond that are summed up in one line), so all of it can be erased again.
    pub(crate) fn redraw(&mut self) {
        if self.mode != OutputMode::Tty || self.prompt.is_some() {
            return;
        }
        let size = self.term_size();
        let mut lines = match &self.board {
            Some(board) => self.team_area(board),
            None => vec![self.status_line()],
        };
        let max_lines = size.rows.saturating_sub(1).max(1);
        if lines.len() > max_lines {
            // Only a Team's area grows: [header, member rows…, board, messages]. Keep the
            // header, the board and the messages, and sum up the member rows that do not fit.
            if max_lines >= 4 && lines.len() >= 3 {
                let tail = lines.split_off(lines.len() - 2);
                let keep = max_lines - 4;
                let hidden = lines.len() - 1 - keep;
                lines.truncate(1 + keep);
                let noun = if hidden == 1 { "member" } else { "members" };
                lines.push(format!("  … {hidden} more {noun}"));
                lines.extend(tail);
            }
            lines.truncate(max_lines);
        }
        let max = size.columns.saturating_sub(1);
        let fitted: Vec<(String, usize)> = lines.iter().map(|line| fit(line, max)).collect();
        let mut text = clear_sequence(&self.live, size.columns);
        for (i, (line, _)) in fitted.iter().enumerate() {
            if i > 0 {
                text.push('\n');
            }
            text.push_str(line);
        }
        self.write_raw(&text);
        self.live = fitted.into_iter().map(|(_, width)| width).collect();
    }

    /// The live area of a Team run.
    fn team_area(&self, board: &Board) -> Vec<String> {
        let elapsed = self.started.elapsed().as_secs();
        let mut lines = vec![format!(
            "[{elapsed}s] {} | {}",
            crate::output::count(self.tool_calls, "tool call"),
            crate::output::tokens_text(self.tokens_in, self.tokens_out, self.answers),
        )];
        // The Lead and every agent seen so far, then roster members that never ran here; a
        // teammate another process hosts is shown with its host's status and name (its tool
        // calls are on that host's terminal).
        let elsewhere = |name: &str| {
            board
                .elsewhere
                .iter()
                .find(|(n, _, _)| n == name)
                .map(|(_, status, host)| {
                    [name.to_owned(), (*status).to_owned(), format!("on {host}")]
                })
        };
        let mut rows: Vec<[String; 3]> = self
            .agents
            .iter()
            .map(|a| match (&a.failed, a.running) {
                (Some(code), false) => [a.name.clone(), "failed".to_owned(), code.clone()],
                (None, false) if elsewhere(&a.name).is_some() => {
                    elsewhere(&a.name).unwrap_or_default()
                }
                _ => {
                    let status = if a.running { "running" } else { "idle" };
                    let tool = a.tool.clone().unwrap_or_default();
                    [a.name.clone(), status.to_owned(), tool]
                }
            })
            .collect();
        for (name, phase) in &board.members {
            if !self.agents.iter().any(|a| &a.name == name) {
                if *phase == "active"
                    && let Some(row) = elsewhere(name)
                {
                    rows.push(row);
                    continue;
                }
                let status = if *phase == "active" {
                    "inactive"
                } else {
                    phase
                };
                rows.push([name.clone(), status.to_owned(), String::new()]);
            }
        }
        let width = rows.iter().map(|r| r[0].chars().count()).max().unwrap_or(0);
        for [name, status, tool] in rows {
            lines.push(
                format!("  {name:<width$}  {status:<8} {tool}")
                    .trim_end()
                    .to_owned(),
            );
        }
        lines.push(format!("  board: {}", board.tasks_text(" · ")));
        lines.push(format!("  messages: {}", board.messages_text()));
        lines
    }

    /// The single live line of a run without a Team.
    fn status_line(&self) -> String {
        let elapsed = self.started.elapsed().as_secs();
        let activity = if self.agents.len() > 1 {
            // One entry per agent: `lead: wait_agent · alpha: team_task_update · beta: idle`.
            self.agents
                .iter()
                .map(|a| format!("{}: {}", a.name, a.doing))
                .collect::<Vec<_>>()
                .join(" · ")
        } else {
            self.activity.clone()
        };
        format!(
            "[{elapsed}s] {activity} | {} | {}",
            crate::output::count(self.tool_calls, "tool call"),
            crate::output::tokens_text(self.tokens_in, self.tokens_out, self.answers),
        )
    }

    /// Removes the live area (before other output and at the end).
    pub(crate) fn clear_live(&mut self) {
        if !self.live.is_empty() {
            let text = clear_sequence(&self.live, self.term_size().columns);
            self.write_raw(&text);
            self.live.clear();
        }
    }

    /// The final JSON line (JSON mode only).
    pub(crate) fn done_json(
        &mut self,
        id: &SessionId,
        status: &DoneStatus<'_>,
        answer: Option<&str>,
        stats: TranscriptStats,
        team: Option<&Value>,
    ) {
        if self.mode != OutputMode::Json {
            return;
        }
        let mut line = json!({
            "event": "done",
            "session": id,
            "status": match status {
                DoneStatus::Completed => "completed",
                DoneStatus::Failed { .. } => "failed",
                DoneStatus::Interrupted => "interrupted",
            },
            "answer": answer,
            "stats": stats_json(stats),
        });
        if let DoneStatus::Failed { code, message } = status {
            line["error"] = json!({"code": code, "message": message});
        }
        if let Some(team) = team {
            line["team"] = team.clone();
        }
        self.json_line(&line);
    }

    fn json_line(&mut self, value: &Value) {
        let mut out = std::io::stdout().lock();
        // A closed stdout (`| head`) must not stop the agents: ignore write errors.
        let _ = writeln!(out, "{value}");
        let _ = out.flush();
    }

    /// The entry of the event's agent, added on first sight.
    fn agent_entry(&mut self, event: &AgentProgress) -> &mut AgentActivity {
        let index = match self.agents.iter().position(|a| a.id == event.agent) {
            Some(index) => index,
            None => {
                let inherited_turns = self.inherited_turns.as_ref().map_or(0, |f| f(&event.agent));
                self.agents.push(AgentActivity {
                    id: event.agent.clone(),
                    name: event.agent_name.clone(),
                    doing: "starting".to_owned(),
                    running: false,
                    tool: None,
                    failed: None,
                    tool_calls: 0,
                    tokens_in: 0,
                    tokens_out: 0,
                    answers: 0,
                    inherited_turns,
                });
                self.agents.len() - 1
            }
        };
        &mut self.agents[index]
    }

    fn track(&mut self, event: &AgentProgress) {
        let usage_expected = self.usage_expected;
        let entry = self.agent_entry(event);
        match &event.progress {
            Progress::Status { status } => {
                entry.running = *status == AgentStatus::Running;
                entry.doing = match status {
                    AgentStatus::Idle => "idle".to_owned(),
                    AgentStatus::Running => "running".to_owned(),
                };
            }
            Progress::TurnStarted { .. } | Progress::ModelCall { .. } => {
                entry.running = true;
                entry.failed = None;
                entry.doing = "thinking".to_owned();
            }
            Progress::ModelAnswered {
                tokens_in,
                tokens_out,
                ..
            } => {
                entry.tokens_in += tokens_in;
                entry.tokens_out += tokens_out;
                entry.answers += u64::from(usage_expected);
            }
            Progress::AttemptFailed { .. } => entry.doing = "retrying".to_owned(),
            Progress::ToolStarted { name, .. } => {
                entry.tool_calls += 1;
                entry.doing.clone_from(name);
                entry.tool = Some(name.clone());
            }
            Progress::ToolFinished { code, .. } => {
                entry.doing = "thinking".to_owned();
                entry.tool = None;
                // A call cut by the output limit was never run: like the summary (which counts
                // `tool/call` records), the turn's line does not count it.
                if is_cut_call(code.as_deref()) {
                    entry.tool_calls = entry.tool_calls.saturating_sub(1);
                }
            }
            Progress::TurnEnded { reason, .. } => {
                entry.running = false;
                entry.tool = None;
                if let TurnEndReason::Failed { code, .. } = reason {
                    entry.doing = format!("failed ({code})");
                    entry.failed = Some(code.clone());
                } else {
                    entry.doing = "idle".to_owned();
                }
            }
            Progress::ApprovalRequested { .. } => {
                entry.doing = "waiting for your approval".to_owned();
            }
            Progress::ApprovalDecided { .. } => {
                entry.doing = entry.tool.clone().unwrap_or_else(|| "thinking".to_owned());
            }
        }
        let who = &event.agent_name;
        match &event.progress {
            Progress::Status { .. } => {}
            Progress::TurnStarted { turn } => {
                let turn = self.shown_turn(event, *turn);
                self.activity = format!("{who}: turn {turn}");
            }
            Progress::ModelCall { turn, step } => {
                let turn = self.shown_turn(event, *turn);
                self.activity = format!("{who}: calling the model (turn {turn}, step {step})");
            }
            Progress::ModelAnswered {
                tokens_in,
                tokens_out,
                ..
            } => {
                self.tokens_in += tokens_in;
                self.tokens_out += tokens_out;
                self.answers += u64::from(self.usage_expected);
                self.activity = format!("{who}: model answered");
            }
            Progress::AttemptFailed { code, .. } => {
                self.activity = format!("{who}: model attempt failed ({code}), retrying");
            }
            Progress::ToolStarted { name, summary, .. } => {
                self.tool_calls += 1;
                self.activity = format!("{who}: {name} {summary}");
            }
            Progress::ToolFinished {
                name,
                is_error,
                code,
                ..
            } => {
                if is_cut_call(code.as_deref()) {
                    self.tool_calls = self.tool_calls.saturating_sub(1);
                }
                self.activity = if *is_error {
                    let code = code.as_deref().unwrap_or("no code");
                    format!("{who}: {name} returned an error ({code})")
                } else {
                    format!("{who}: {name} done")
                };
            }
            Progress::TurnEnded { turn, reason } => {
                let turn = self.shown_turn(event, *turn);
                self.activity = format!("{who}: turn {turn} {}", turn_end_text(reason));
            }
            Progress::ApprovalRequested { request, .. } => {
                self.activity = format!("{who}: waiting for your approval (request {request})");
            }
            Progress::ApprovalDecided { request, .. } => {
                self.activity = format!("{who}: request {request} decided");
            }
        }
    }
}

/// Whether a tool result's code says the call was cut by the output limit and never ran.
fn is_cut_call(code: Option<&str>) -> bool {
    code == Some(troupe_runtime::TOOL_ARGUMENTS_TRUNCATED)
}

/// A progress event as one JSON object: the event's own fields (tagged by `event`,
/// camelCase) plus `agent` (session id) and `agentName`.
fn progress_json(event: &AgentProgress) -> Value {
    serde_json::to_value(event).unwrap_or(Value::Null)
}

pub(crate) fn stats_json(stats: TranscriptStats) -> Value {
    json!({
        "turns": stats.turns,
        "toolCalls": stats.tool_calls,
        "tokensIn": stats.tokens_in,
        "tokensOut": stats.tokens_out,
    })
}

/// The permanent stderr line of an event, if it gets one.
fn plain_line(event: &AgentProgress, printer: &Printer) -> Option<String> {
    let who = &event.agent_name;
    match &event.progress {
        Progress::ToolStarted { name, summary, .. } => Some(format!("{who}: {name} {summary}")),
        Progress::ToolFinished {
            name,
            is_error: true,
            code,
            ..
        } => Some(format!(
            "{who}: {name} returned an error ({})",
            code.as_deref().unwrap_or("no code")
        )),
        Progress::AttemptFailed {
            code,
            message,
            retry_delay_ms,
        } => Some(match retry_delay_ms {
            Some(ms) => format!(
                "{who}: model attempt failed ({code}: {message}); retrying in {:.1}s",
                *ms as f64 / 1000.0
            ),
            None => format!("{who}: model attempt failed ({code}: {message})"),
        }),
        Progress::ApprovalDecided {
            request,
            decision,
            by,
        } => Some(format!(
            "approval: request {request} of {who} {} {}",
            match decision {
                Decision::Approve => "approved",
                Decision::Always => "approved (always, for this exact command)",
                Decision::Deny => "denied",
            },
            by.described()
        )),
        Progress::TurnEnded { turn, reason } => {
            let how = turn_end_text(reason);
            // This agent's own counts: with a Team, each member's line says what it did.
            let (calls, tokens) = printer.agents.iter().find(|a| a.id == event.agent).map_or(
                (0, crate::output::tokens_text(0, 0, 0)),
                |a| {
                    let tokens = crate::output::tokens_text(a.tokens_in, a.tokens_out, a.answers);
                    (a.tool_calls, tokens)
                },
            );
            let turn = printer.shown_turn(event, *turn);
            Some(format!(
                "{who}: turn {turn} {how} ({}, {tokens} so far)",
                crate::output::count(calls, "tool call"),
            ))
        }
        _ => None,
    }
}

/// `10m`, `90s`, `1500ms`: a duration as a person reads it.
pub(crate) fn humanize_ms(ms: u64) -> String {
    if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// `completed`, `stopped`, `interrupted`, `failed (CODE)`.
fn turn_end_text(reason: &TurnEndReason) -> String {
    match reason {
        TurnEndReason::Completed => "completed".to_owned(),
        TurnEndReason::Aborted { .. } => "stopped".to_owned(),
        TurnEndReason::Interrupted => "interrupted".to_owned(),
        TurnEndReason::Failed { code, .. } => format!("failed ({code})"),
    }
}

/// Erases a live area whose lines have these display widths, with the cursor at the end of
/// its last line, and leaves the cursor at the start of its first line: back to the first
/// column, up as many rows as the lines take now less one, then erase to the end of the
/// screen. The lines were drawn narrower than the terminal, but a terminal made narrower since
/// re-wraps them (tmux, VTE, kitty, iTerm2 and most others reflow), so each takes
/// `ceil(width / columns)` rows at the current width.
fn clear_sequence(widths: &[usize], columns: usize) -> String {
    if widths.is_empty() {
        return String::new();
    }
    let columns = columns.max(1);
    let rows: usize = widths.iter().map(|w| w.div_ceil(columns).max(1)).sum();
    let mut text = "\r".to_owned();
    if rows > 1 {
        text.push_str(&format!("\x1b[{}A", rows - 1));
    }
    text.push_str("\x1b[J");
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn progress_json_keeps_the_tool_name_and_the_agent_name_apart() {
        let event = AgentProgress {
            agent: SessionId::new("s-1").unwrap(),
            agent_name: "lead".to_owned(),
            progress: Progress::ToolStarted {
                call_id: "c1".to_owned(),
                name: "bash".to_owned(),
                summary: "{}".to_owned(),
            },
        };
        let value = progress_json(&event);
        assert_eq!(
            value,
            json!({"event": "toolStarted", "callId": "c1", "name": "bash", "summary": "{}", "agent": "s-1", "agentName": "lead"})
        );
    }

    #[test]
    fn the_live_area_is_erased_by_the_rows_it_takes_at_the_current_width() {
        assert_eq!(clear_sequence(&[], 80), "");
        assert_eq!(clear_sequence(&[30], 80), "\r\x1b[J");
        assert_eq!(clear_sequence(&[30, 0, 79], 80), "\r\x1b[2A\x1b[J");
        // Drawn at 80 columns, the terminal now 40 wide: the 79-wide line takes two rows.
        assert_eq!(clear_sequence(&[30, 79], 40), "\r\x1b[2A\x1b[J");
    }

    #[test]
    fn the_board_names_owners_and_counts_mail() {
        let board = Board {
            elsewhere: Vec::new(),
            members: vec![("alpha".to_owned(), "active")],
            tasks: vec![
                BoardTask {
                    id: "task-1".to_owned(),
                    status: "completed",
                    owner: Some("alpha".to_owned()),
                },
                BoardTask {
                    id: "task-2".to_owned(),
                    status: "pending",
                    owner: None,
                },
            ],
            sent: 3,
            delivered: 2,
            pending: 1,
        };
        assert_eq!(
            board.tasks_text(", "),
            "task-1 completed (alpha), task-2 pending"
        );
        assert_eq!(board.messages_text(), "3 sent, 2 delivered, 1 pending");
        assert_eq!(
            board.to_json(),
            json!({"event": "team", "members": [{"name": "alpha", "phase": "active"}],
                "tasks": [{"id": "task-1", "status": "completed", "ownerName": "alpha"},
                          {"id": "task-2", "status": "pending", "ownerName": null}],
                "messages": {"sent": 3, "delivered": 2, "pending": 1}})
        );
    }

    fn event(name: &str, progress: Progress) -> AgentProgress {
        AgentProgress {
            agent: SessionId::new(format!("s-{name}")).unwrap(),
            agent_name: name.to_owned(),
            progress,
        }
    }

    #[test]
    fn the_live_line_shows_a_tool_error_and_a_failed_turn() {
        let mut printer = Printer::new(OutputMode::Tty);
        printer.track(&event(
            "beta",
            Progress::ToolFinished {
                call_id: "c1".to_owned(),
                name: "edit".to_owned(),
                is_error: true,
                code: Some("FS_STALE_VERSION".to_owned()),
            },
        ));
        let line = printer.status_line();
        assert!(
            line.contains("beta: edit returned an error (FS_STALE_VERSION)"),
            "{line}"
        );
        assert!(!line.contains("done"), "{line}");
        printer.track(&event(
            "beta",
            Progress::ToolFinished {
                call_id: "c2".to_owned(),
                name: "edit".to_owned(),
                is_error: false,
                code: None,
            },
        ));
        assert!(printer.status_line().contains("beta: edit done"));
        // A failed turn: the live line says so, and the Team area marks the member failed.
        printer.track(&event(
            "beta",
            Progress::TurnEnded {
                turn: 2,
                reason: TurnEndReason::Failed {
                    code: "LLM_AUTH".to_owned(),
                    message: "check your API key".to_owned(),
                },
            },
        ));
        assert!(
            printer
                .status_line()
                .contains("beta: turn 2 failed (LLM_AUTH)"),
            "{}",
            printer.status_line()
        );
        let board = Board {
            elsewhere: Vec::new(),
            members: vec![("beta".to_owned(), "active")],
            tasks: Vec::new(),
            sent: 0,
            delivered: 0,
            pending: 0,
        };
        let area = printer.team_area(&board);
        assert!(
            area.iter().any(|l| l.trim() == "beta  failed   LLM_AUTH"),
            "{area:?}"
        );
        // A new turn clears it.
        printer.track(&event("beta", Progress::TurnStarted { turn: 3 }));
        let area = printer.team_area(&board);
        assert!(area.iter().any(|l| l.trim() == "beta  running"), "{area:?}");
    }

    /// Teammates another process hosts show their host's status and name in the Team area
    /// (not `inactive`), also one that ran here before; a change of hosts alone is redrawn
    /// but makes no new JSON line.
    #[test]
    fn teammates_on_workers_show_their_host_and_status() {
        let mut printer = Printer::new(OutputMode::Tty);
        printer.track(&event("beta", Progress::TurnStarted { turn: 1 }));
        printer.track(&event(
            "beta",
            Progress::TurnEnded {
                turn: 1,
                reason: TurnEndReason::Completed,
            },
        ));
        let board = |elsewhere: Vec<(String, &'static str, String)>| Board {
            elsewhere,
            members: vec![
                ("alpha".to_owned(), "active"),
                ("beta".to_owned(), "active"),
                ("gamma".to_owned(), "active"),
            ],
            tasks: Vec::new(),
            sent: 0,
            delivered: 0,
            pending: 0,
        };
        let area = printer.team_area(&board(vec![
            ("alpha".to_owned(), "running", "w1".to_owned()),
            ("beta".to_owned(), "idle", "w2".to_owned()),
        ]));
        let trimmed: Vec<&str> = area.iter().map(|l| l.trim()).collect();
        assert!(trimmed.contains(&"alpha  running  on w1"), "{area:?}");
        assert!(trimmed.contains(&"beta   idle     on w2"), "{area:?}");
        assert!(trimmed.contains(&"gamma  inactive"), "{area:?}");

        let hosted = board(vec![("alpha".to_owned(), "running", "w1".to_owned())]);
        assert!(
            board(Vec::new()).same_view(&hosted),
            "hosts alone are no new JSON line"
        );
        assert_ne!(board(Vec::new()), hosted, "but they are redrawn");
    }

    /// A server whose answers carry no usage: the live line and the turn's line say so rather
    /// than "tokens 0 in / 0 out"; a script's zeros stay counts; counts show once reported.
    #[test]
    fn answers_without_usage_say_so() {
        let answered = |tokens_in, tokens_out| {
            event(
                "lead",
                Progress::ModelAnswered {
                    tokens_in,
                    tokens_out,
                    tool_calls: 0,
                },
            )
        };
        let ended = event(
            "lead",
            Progress::TurnEnded {
                turn: 1,
                reason: TurnEndReason::Completed,
            },
        );
        let mut printer = Printer::new(OutputMode::Tty);
        printer.expect_usage(true);
        assert!(
            printer.status_line().ends_with("| tokens 0 in / 0 out"),
            "no answer yet"
        );
        printer.track(&answered(0, 0));
        let line = printer.status_line();
        assert!(
            line.ends_with("| usage not reported by the server"),
            "{line}"
        );
        assert_eq!(
            plain_line(&ended, &printer).as_deref(),
            Some("lead: turn 1 completed (0 tool calls, usage not reported by the server so far)")
        );
        printer.track(&answered(12, 3));
        assert!(printer.status_line().ends_with("| tokens 12 in / 3 out"));

        let mut scripted = Printer::new(OutputMode::Tty);
        scripted.track(&answered(0, 0));
        assert!(scripted.status_line().ends_with("| tokens 0 in / 0 out"));
        assert_eq!(
            plain_line(&ended, &scripted).as_deref(),
            Some("lead: turn 1 completed (0 tool calls, tokens 0 in / 0 out so far)")
        );
    }

    #[test]
    fn fit_counts_display_columns() {
        assert_eq!(fit("héllo", 10), ("héllo".to_owned(), 5));
        assert_eq!(fit("héllo wörld", 6), ("héllo…".to_owned(), 6));
        // Wide characters take two columns; a cut never splits one.
        assert_eq!(fit("日本語のテキスト", 7), ("日本語…".to_owned(), 7));
        assert_eq!(fit("日本語", 6), ("日本語".to_owned(), 6));
        // Control characters are escaped first (they cannot move the cursor).
        assert_eq!(fit("a\nb", 10), ("a\\nb".to_owned(), 4));
        assert_eq!(fit("abc", 0), (String::new(), 0));
    }

    /// What a terminal of `size` shows after `bytes` (the live area's escapes interpreted: CR,
    /// LF, cursor up, erase to the end of the screen), as the rows that were ever written,
    /// scrollback included. Lines wider than the terminal wrap, as a terminal does.
    fn screen(bytes: &[u8], size: TermSize) -> Vec<String> {
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        let mut rows: Vec<Vec<char>> = vec![Vec::new()];
        let (mut row, mut col) = (0usize, 0usize);
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\r' => col = 0,
                '\n' => {
                    row += 1;
                    col = 0;
                    if row == rows.len() {
                        rows.push(Vec::new());
                    }
                }
                '\x1b' => {
                    assert_eq!(chars.next(), Some('['));
                    let mut n = String::new();
                    let command = loop {
                        let c = chars.next().unwrap();
                        if c.is_ascii_digit() {
                            n.push(c);
                        } else {
                            break c;
                        }
                    };
                    match command {
                        'A' => row = row.saturating_sub(n.parse().unwrap_or(1)),
                        'J' => {
                            rows[row].truncate(col);
                            rows.truncate(row + 1);
                        }
                        other => panic!("unexpected escape {other}"),
                    }
                }
                c => {
                    if col == size.columns {
                        row += 1;
                        col = 0;
                        if row == rows.len() {
                            rows.push(Vec::new());
                        }
                    }
                    let line = &mut rows[row];
                    line.truncate(col);
                    line.push(c);
                    col += 1;
                }
            }
        }
        rows.into_iter()
            .map(|r| r.into_iter().collect::<String>())
            .collect()
    }

    /// A Team at work on a small terminal: every live line fits, and once the run reports
    /// its last line no line of the live area is left anywhere (it used to wrap at 80
    /// columns and leave a copy per redraw).
    #[test]
    fn the_live_area_fits_narrow_terminals_and_leaves_nothing_behind() {
        for columns in [80, 40, 12] {
            let size = TermSize { columns, rows: 24 };
            let mut printer = Printer::recording(OutputMode::Tty, size);
            let board = Board {
                elsewhere: Vec::new(),
                members: vec![
                    ("alpha".to_owned(), "active"),
                    ("beta-with-a-long-name".to_owned(), "active"),
                ],
                tasks: (1..=3)
                    .map(|n| BoardTask {
                        id: format!("task-{n}"),
                        status: "in_progress",
                        owner: Some("beta-with-a-long-name".to_owned()),
                    })
                    .collect(),
                sent: 12,
                delivered: 11,
                pending: 1,
            };
            printer.team(board);
            for step in 0..5 {
                printer.progress(&event(
                    "alpha",
                    Progress::ToolStarted {
                        call_id: format!("c{step}"),
                        name: "edit".to_owned(),
                        summary: "{\"path\":\"wordstats/counting.py\",\"old_text\":\"日本語\"}"
                            .to_owned(),
                    },
                ));
                printer.redraw();
                let shown = screen(printer.recorded.as_ref().unwrap(), size);
                let live: Vec<&String> = shown.iter().skip_while(|l| !l.starts_with('[')).collect();
                // The header, two member rows, the board and the message counts.
                assert_eq!(live.len(), 5, "{columns}: {shown:#?}");
                for line in &live {
                    let width: usize = line
                        .chars()
                        .map(|c| unicode_width::UnicodeWidthChar::width(c).unwrap_or(0))
                        .sum();
                    assert!(width < columns, "{columns}: {line:?} is {width} wide");
                }
                if step == 4 {
                    // What the area looks like (the elapsed seconds vary).
                    let area: Vec<String> = live
                        .iter()
                        .map(|l| match l.find("s] ") {
                            Some(at) if l.starts_with('[') => format!("[T{}", &l[at..]),
                            _ => (*l).clone(),
                        })
                        .collect();
                    insta::assert_snapshot!(format!("live_area_{columns}"), area.join("\n"));
                }
            }
            printer.note("the end");
            let shown = screen(printer.recorded.as_ref().unwrap(), size);
            assert!(
                !shown
                    .iter()
                    .any(|l| l.starts_with('[') || l.starts_with("  ")),
                "{columns}: stale live lines in {shown:#?}"
            );
            assert_eq!(shown.last().map(String::as_str), Some(""), "{shown:#?}");
        }
    }

    /// A resize between two redraws: the area drawn at 80 columns is erased at 40, where its
    /// lines take two rows each.
    #[test]
    fn a_narrower_terminal_is_followed() {
        let wide = TermSize {
            columns: 80,
            rows: 24,
        };
        let narrow = TermSize {
            columns: 40,
            rows: 24,
        };
        let mut printer = Printer::recording(OutputMode::Tty, wide);
        printer.progress(&event(
            "lead",
            Progress::ToolStarted {
                call_id: "c1".to_owned(),
                name: "bash".to_owned(),
                summary: format!("{{\"command\":\"{}\"}}", "x".repeat(100)),
            },
        ));
        printer.size = SizeSource::Fixed(narrow);
        printer.redraw();
        printer.note("done");
        // The terminal re-wrapped what was drawn at 80 columns: replay it at 40.
        let shown = screen(printer.recorded.as_ref().unwrap(), narrow);
        assert!(
            !shown.iter().any(|l| l.starts_with('[')),
            "stale live lines in {shown:#?}"
        );
    }

    /// A terminal too short for every member row: the area keeps its header, board and
    /// message lines and sums up the rest, so it never scrolls out of reach.
    #[test]
    fn the_live_area_is_never_taller_than_the_terminal() {
        let size = TermSize {
            columns: 80,
            rows: 6,
        };
        let mut printer = Printer::recording(OutputMode::Tty, size);
        printer.team(Board {
            elsewhere: Vec::new(),
            members: (0..8).map(|n| (format!("m{n}"), "active")).collect(),
            tasks: Vec::new(),
            sent: 0,
            delivered: 0,
            pending: 0,
        });
        let shown = screen(printer.recorded.as_ref().unwrap(), size);
        assert_eq!(shown.len(), 5, "{shown:#?}");
        assert!(shown[0].starts_with("[0s]"), "{shown:#?}");
        assert!(shown[2].contains("more members"), "{shown:#?}");
        assert_eq!(shown[3], "  board: no tasks");
        assert!(shown[4].starts_with("  messages:"), "{shown:#?}");
    }
}
