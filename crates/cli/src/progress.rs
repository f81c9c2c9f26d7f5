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

use std::io::Write;
use std::time::Instant;

use serde_json::{Value, json};
use troupe_protocol::SessionId;
use troupe_runtime::events::TurnEndReason;
use troupe_runtime::{AgentProgress, AgentStatus, Progress, TranscriptStats};

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
    tool_calls: u64,
    tokens_in: u64,
    tokens_out: u64,
}

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
    /// Whether the live line is on screen (and must be cleared before other output).
    live_shown: bool,
    width: usize,
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
            live_shown: false,
            width,
        }
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

    /// Redraws the live line (TTY mode only).
    pub(crate) fn redraw(&mut self) {
        if self.mode != OutputMode::Tty {
            return;
        }
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
        let text = format!(
            "[{elapsed}s] {activity} | {} | tokens {} in / {} out",
            crate::work::count(self.tool_calls, "tool call"),
            self.tokens_in,
            self.tokens_out
        );
        let text = truncate(&text, self.width.saturating_sub(1));
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K{text}");
        let _ = err.flush();
        self.live_shown = true;
    }

    /// Removes the live line (before other output and at the end).
    pub(crate) fn clear_live(&mut self) {
        if self.live_shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.live_shown = false;
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
                self.agents.push(AgentActivity {
                    id: event.agent.clone(),
                    name: event.agent_name.clone(),
                    doing: "starting".to_owned(),
                    tool_calls: 0,
                    tokens_in: 0,
                    tokens_out: 0,
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
                entry.doing = match status {
                    AgentStatus::Idle => "idle".to_owned(),
                    AgentStatus::Running => "running".to_owned(),
                };
            }
            Progress::TurnStarted { .. } | Progress::ModelCall { .. } => {
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
            }
            Progress::ToolFinished { .. } => entry.doing = "thinking".to_owned(),
            Progress::TurnEnded { .. } => entry.doing = "idle".to_owned(),
        }
        let who = &event.agent_name;
        match &event.progress {
            Progress::Status { .. } => {}
            Progress::TurnStarted { turn } => self.activity = format!("{who}: turn {turn}"),
            Progress::ModelCall { turn, step } => {
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
            Progress::ToolFinished { name, .. } => {
                self.activity = format!("{who}: {name} done");
            }
            Progress::TurnEnded { turn, .. } => self.activity = format!("{who}: turn {turn} ended"),
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
            let how = match reason {
                TurnEndReason::Completed => "completed".to_owned(),
                TurnEndReason::Aborted { .. } => "stopped".to_owned(),
                TurnEndReason::Interrupted => "interrupted".to_owned(),
                TurnEndReason::Failed { code, .. } => format!("failed ({code})"),
            };
            // This agent's own counts: with a Team, each member's line says what it did.
            let (calls, tokens_in, tokens_out) = printer
                .agents
                .iter()
                .find(|a| a.id == event.agent)
                .map_or((0, 0, 0), |a| (a.tool_calls, a.tokens_in, a.tokens_out));
            Some(format!(
                "{who}: turn {turn} {how} ({}, tokens {tokens_in} in / {tokens_out} out so far)",
                crate::work::count(calls, "tool call"),
            ))
        }
        _ => None,
    }
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
    fn truncate_counts_characters() {
        assert_eq!(truncate("héllo", 10), "héllo");
        assert_eq!(truncate("héllo wörld", 6), "héllo…");
    }
}
