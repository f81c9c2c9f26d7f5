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
use troupe_runtime::events::TurnEndReason;
use troupe_runtime::{AgentProgress, AgentStatus, Progress, TranscriptStats};
use troupe_team::TeamState;

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

/// Longest live status line when `COLUMNS` is unknown.
const DEFAULT_WIDTH: usize = 100;

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
    /// How many lines of the live area are on screen (cleared before other output).
    live_lines: usize,
    width: usize,
    /// The Team's board as last reported (Team runs only).
    board: Option<Board>,
    /// Looks up an agent's inherited turns when it is first seen (none: 0).
    inherited_turns: Option<InheritedTurns>,
}

/// What a Team looks like now, folded from its Lead log by the Team service: the roster, the
/// tasks and the mail counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Board {
    /// Every teammate (name, phase: `provisioning`, `active`, `failed`), in creation order.
    members: Vec<(String, &'static str)>,
    /// Every task that is not deleted.
    tasks: Vec<BoardTask>,
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
    pub(crate) fn of(state: &TeamState) -> Self {
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
        Self {
            members,
            tasks,
            sent,
            delivered: sent - pending,
            pending,
        }
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
        let width = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse::<usize>().ok())
            .filter(|w| *w >= 20)
            .unwrap_or(DEFAULT_WIDTH);
        Self {
            mode,
            started: Instant::now(),
            activity: "starting".to_owned(),
            agents: Vec::new(),
            tool_calls: 0,
            tokens_in: 0,
            tokens_out: 0,
            live_lines: 0,
            width,
            board: None,
            inherited_turns: None,
        }
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

    /// One stderr line (clearing the live line first).
    pub(crate) fn note(&mut self, line: &str) {
        self.clear_live();
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
                self.redraw();
            }
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
        match self.mode {
            OutputMode::Json => self.json_line(&board.to_json()),
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
    pub(crate) fn redraw(&mut self) {
        if self.mode != OutputMode::Tty {
            return;
        }
        let lines = match &self.board {
            Some(board) => self.team_area(board),
            None => vec![self.status_line()],
        };
        let max = self.width.saturating_sub(1);
        let text = lines
            .iter()
            .map(|line| truncate(line, max))
            .collect::<Vec<_>>()
            .join("\n");
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "{}{text}", clear_sequence(self.live_lines));
        let _ = err.flush();
        self.live_lines = lines.len();
    }

    /// The live area of a Team run.
    fn team_area(&self, board: &Board) -> Vec<String> {
        let elapsed = self.started.elapsed().as_secs();
        let mut lines = vec![format!(
            "[{elapsed}s] {} | tokens {} in / {} out | messages: {}",
            crate::work::count(self.tool_calls, "tool call"),
            self.tokens_in,
            self.tokens_out,
            board.messages_text()
        )];
        // The Lead and every agent seen so far, then roster members that never ran here.
        let mut rows: Vec<[String; 3]> = self
            .agents
            .iter()
            .map(|a| match (&a.failed, a.running) {
                (Some(code), false) => [a.name.clone(), "failed".to_owned(), code.clone()],
                _ => {
                    let status = if a.running { "running" } else { "idle" };
                    let tool = a.tool.clone().unwrap_or_default();
                    [a.name.clone(), status.to_owned(), tool]
                }
            })
            .collect();
        for (name, phase) in &board.members {
            if !self.agents.iter().any(|a| &a.name == name) {
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
            "[{elapsed}s] {activity} | {} | tokens {} in / {} out",
            crate::work::count(self.tool_calls, "tool call"),
            self.tokens_in,
            self.tokens_out
        )
    }

    /// Removes the live area (before other output and at the end).
    pub(crate) fn clear_live(&mut self) {
        if self.live_lines > 0 {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "{}", clear_sequence(self.live_lines));
            let _ = err.flush();
            self.live_lines = 0;
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
                    inherited_turns,
                });
                self.agents.len() - 1
            }
        };
        &mut self.agents[index]
    }

    fn track(&mut self, event: &AgentProgress) {
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
            }
            Progress::AttemptFailed { .. } => entry.doing = "retrying".to_owned(),
            Progress::ToolStarted { name, .. } => {
                entry.tool_calls += 1;
                entry.doing.clone_from(name);
                entry.tool = Some(name.clone());
            }
            Progress::ToolFinished { .. } => {
                entry.doing = "thinking".to_owned();
                entry.tool = None;
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
        }
    }
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
        Progress::TurnEnded { turn, reason } => {
            let how = turn_end_text(reason);
            // This agent's own counts: with a Team, each member's line says what it did.
            let (calls, tokens_in, tokens_out) = printer
                .agents
                .iter()
                .find(|a| a.id == event.agent)
                .map_or((0, 0, 0), |a| (a.tool_calls, a.tokens_in, a.tokens_out));
            let turn = printer.shown_turn(event, *turn);
            Some(format!(
                "{who}: turn {turn} {how} ({}, tokens {tokens_in} in / {tokens_out} out so far)",
                crate::work::count(calls, "tool call"),
            ))
        }
        _ => None,
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

/// Clears a live area of `lines` lines and leaves the cursor at the start of its first line.
fn clear_sequence(lines: usize) -> String {
    if lines == 0 {
        return String::new();
    }
    let mut text = "\r\x1b[2K".to_owned();
    for _ in 1..lines {
        text.push_str("\x1b[1A\x1b[2K");
    }
    text
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        text.chars().take(max.saturating_sub(1)).collect::<String>() + "…"
    }
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
    fn the_live_area_is_cleared_line_by_line() {
        assert_eq!(clear_sequence(0), "");
        assert_eq!(clear_sequence(1), "\r\x1b[2K");
        assert_eq!(clear_sequence(3), "\r\x1b[2K\x1b[1A\x1b[2K\x1b[1A\x1b[2K");
    }

    #[test]
    fn the_board_names_owners_and_counts_mail() {
        let board = Board {
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

    #[test]
    fn truncate_counts_characters() {
        assert_eq!(truncate("héllo", 10), "héllo");
        assert_eq!(truncate("héllo wörld", 6), "héllo…");
    }
}
