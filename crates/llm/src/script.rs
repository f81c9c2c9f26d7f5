//! The offline scripted provider (`--model script:FILE`, DESIGN §5).
//!
//! File format: `{"agents": {"<member name>": [<step>, …]}}`. A step is
//! `{"text": "…"}` (a final answer) or `{"tool_calls": [{"name": "…", "arguments": {…}}]}`;
//! a step may also carry both (`text` then accompanies the tool calls) and an optional
//! `"reasoning": "…"`, and an optional `"usage": {"prompt_tokens": N, "completion_tokens": N,
//! "cached_tokens": N}` (each count optional, 0 when absent; `cached_tokens` is the part of
//! `prompt_tokens` served from the provider's prompt cache) that the answer reports as the
//! server's usage, so demos and tests have real numbers for the ledger and the budgets. A step
//! without `usage` reports none. Unknown keys are refused, so a typo does not silently change
//! a demo.
//!
//! Every model call of a member takes that member's next step. The cursor is shared by every
//! [`ScriptedAgent`] of the same member (all turns advance one script) and can be moved for a
//! resumed session ([`ModelProvider::set_calls_made`]). Tool-call ids are deterministic:
//! `call_<member>_<n>`, `n` counting the member's tool calls from 1 in script order, so a resumed
//! script produces the same ids.
//!
//! A *pace* ([`ScriptedProvider::with_pace`], `--pace MS`) makes every model call wait that
//! long before it takes its step, so a scripted demo can be watched live (`troupe web`). The
//! wait is cancellable (a cancelled call takes no step) and is not part of any step: it is
//! recorded nowhere, and a paced run writes the same events as an unpaced one.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::error::LlmError;
use crate::provider::{BoxFuture, ModelProvider, StreamObserver};
use crate::types::{
    AssistantMessage, Attempt, ChatRequest, FinishReason, ModelResponse, StreamEvent, ToolCall,
    Usage,
};

/// The largest script file [`ScriptedProvider::load`] reads (16 MiB): far above any real
/// script (the demo's is under 10 KiB), small enough that a wrong path such as `/dev/zero` or
/// a huge file is refused at once instead of filling memory.
pub const MAX_SCRIPT_BYTES: u64 = 16 << 20;

/// A loaded script, shared by the providers of every member it scripts. Cheap to clone (the
/// cursors are shared).
#[derive(Clone, Debug)]
pub struct ScriptedProvider {
    inner: Arc<ScriptInner>,
    /// Waited before each model call takes its step (zero: no wait).
    pace: Duration,
}

#[derive(Debug)]
struct ScriptInner {
    origin: String,
    agents: BTreeMap<String, AgentScript>,
}

#[derive(Debug)]
struct AgentScript {
    steps: Vec<ScriptStep>,
    cursor: Mutex<usize>,
}

/// One scripted answer and the usage it reports.
#[derive(Debug, Clone)]
struct ScriptStep {
    message: AssistantMessage,
    usage: Option<Usage>,
}

impl AgentScript {
    fn cursor(&self) -> MutexGuard<'_, usize> {
        // The cursor is a plain counter: a panic elsewhere cannot leave it inconsistent.
        troupe_protocol::sync::lock(&self.cursor)
    }
}

impl ScriptedProvider {
    /// Reads and validates a script file. Fails with [`LlmError::Script`] naming the path and
    /// what is wrong (unreadable file, not a regular file — a device such as `/dev/zero`, a
    /// FIFO or a directory —, larger than [`MAX_SCRIPT_BYTES`], not UTF-8, invalid JSON with
    /// line and column, an agent with an empty step list, a malformed step). At most
    /// `MAX_SCRIPT_BYTES + 1` bytes are ever read, so the refusal is immediate whatever the
    /// file holds.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, LlmError> {
        use std::io::Read;
        let path = path.as_ref();
        let cannot = |error: &dyn std::fmt::Display| {
            LlmError::script(format!("cannot read script {}: {error}", path.display()))
        };
        let file = std::fs::File::open(path).map_err(|e| cannot(&e))?;
        let metadata = file.metadata().map_err(|e| cannot(&e))?;
        if !metadata.is_file() {
            return Err(LlmError::script(format!(
                "script {} is not a regular file: give the path of a JSON file",
                path.display()
            )));
        }
        let mut bytes = Vec::new();
        file.take(MAX_SCRIPT_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| cannot(&e))?;
        if bytes.len() as u64 > MAX_SCRIPT_BYTES {
            return Err(LlmError::script(format!(
                "script {} is larger than {} MiB: a script is a small JSON file",
                path.display(),
                MAX_SCRIPT_BYTES >> 20
            )));
        }
        let text =
            String::from_utf8(bytes).map_err(|_| cannot(&"stream did not contain valid UTF-8"))?;
        Self::from_json_str(&text, &path.display().to_string())
    }

    /// Parses a script from text; `origin` names it in error messages (usually the path).
    pub fn from_json_str(text: &str, origin: &str) -> Result<Self, LlmError> {
        let fail = |what: String| LlmError::script(format!("script {origin}: {what}"));
        let value: Value =
            serde_json::from_str(text).map_err(|error| fail(format!("not valid JSON: {error}")))?;
        let Some(top) = value.as_object() else {
            return Err(fail(
                "expected an object {\"agents\": {\"<member name>\": [<step>, …]}}".to_owned(),
            ));
        };
        if let Some(key) = top.keys().find(|key| key.as_str() != "agents") {
            return Err(fail(format!(
                "unknown key `{key}` (only \"agents\" is allowed)"
            )));
        }
        let Some(agents_value) = top.get("agents") else {
            return Err(fail("missing \"agents\"".to_owned()));
        };
        let Some(agents_map) = agents_value.as_object() else {
            return Err(fail(
                "\"agents\" must be an object mapping member names to step lists".to_owned(),
            ));
        };
        let mut agents = BTreeMap::new();
        for (agent, steps_value) in agents_map {
            if agent.trim().is_empty() {
                return Err(fail("an agent name is empty".to_owned()));
            }
            let Some(steps_array) = steps_value.as_array() else {
                return Err(fail(format!("agents.{agent} must be a list of steps")));
            };
            if steps_array.is_empty() {
                return Err(fail(format!(
                    "agents.{agent} has no steps (give it at least one, or leave the agent out)"
                )));
            }
            let mut call_number = 0usize;
            let mut steps = Vec::with_capacity(steps_array.len());
            for (position, step) in steps_array.iter().enumerate() {
                let step = parse_step(agent, step, &mut call_number)
                    .map_err(|what| fail(format!("agents.{agent}[{position}]: {what}")))?;
                steps.push(step);
            }
            agents.insert(
                agent.clone(),
                AgentScript {
                    steps,
                    cursor: Mutex::new(0),
                },
            );
        }
        Ok(Self {
            inner: Arc::new(ScriptInner {
                origin: origin.to_owned(),
                agents,
            }),
            pace: Duration::ZERO,
        })
    }

    /// The same script (sharing its cursors) whose providers wait `pace` before each model
    /// call takes its step: a timer wait (tokio), ended early by the call's cancellation, which
    /// then takes no step. [`Duration::ZERO`] (the default) does not wait.
    #[must_use]
    pub fn with_pace(mut self, pace: Duration) -> Self {
        self.pace = pace;
        self
    }

    /// The wait before each model call (see [`ScriptedProvider::with_pace`]).
    pub fn pace(&self) -> Duration {
        self.pace
    }

    /// The scripted member names, sorted.
    pub fn agent_names(&self) -> Vec<&str> {
        self.inner.agents.keys().map(String::as_str).collect()
    }

    /// The provider of member `agent`. Fails with [`LlmError::Script`] when the script has no
    /// such member.
    pub fn for_agent(&self, agent: &str) -> Result<ScriptedAgent, LlmError> {
        self.script_of(agent)?;
        Ok(ScriptedAgent {
            inner: Arc::clone(&self.inner),
            agent: agent.to_owned(),
            pace: self.pace,
        })
    }

    /// How many steps the script gives `agent` in all. Fails with [`LlmError::Script`] when
    /// the script has no such member.
    pub fn steps(&self, agent: &str) -> Result<usize, LlmError> {
        Ok(self.script_of(agent)?.steps.len())
    }

    /// How many steps `agent` has taken so far.
    pub fn calls_made(&self, agent: &str) -> Result<usize, LlmError> {
        Ok(*self.script_of(agent)?.cursor())
    }

    /// Moves `agent`'s cursor: its next call takes step `calls_made` (0-based). Fails with
    /// [`LlmError::Script`] when that is past the end of its script (equal to the length is
    /// allowed: the next call then reports the exhausted script).
    pub fn set_calls_made(&self, agent: &str, calls_made: usize) -> Result<(), LlmError> {
        let script = self.script_of(agent)?;
        if calls_made > script.steps.len() {
            return Err(LlmError::script(format!(
                "script {}: cannot resume agent `{agent}` after {calls_made} model calls: its script has only {} steps",
                self.inner.origin,
                script.steps.len()
            )));
        }
        *script.cursor() = calls_made;
        Ok(())
    }

    fn script_of(&self, agent: &str) -> Result<&AgentScript, LlmError> {
        self.inner.agents.get(agent).ok_or_else(|| {
            let scripted = if self.inner.agents.is_empty() {
                "it scripts no agent".to_owned()
            } else {
                format!("it scripts: {}", self.agent_names().join(", "))
            };
            LlmError::script(format!(
                "script {} has no steps for agent `{agent}` ({scripted})",
                self.inner.origin
            ))
        })
    }
}

fn parse_step(agent: &str, step: &Value, call_number: &mut usize) -> Result<ScriptStep, String> {
    let Some(object) = step.as_object() else {
        return Err("a step must be an object {\"text\": …} or {\"tool_calls\": […]}".to_owned());
    };
    if let Some(key) = object
        .keys()
        .find(|key| !matches!(key.as_str(), "text" | "tool_calls" | "reasoning" | "usage"))
    {
        return Err(format!(
            "unknown key `{key}` (a step has \"text\", \"tool_calls\" and optionally \"reasoning\" and \"usage\")"
        ));
    }
    let usage = match object.get("usage") {
        None => None,
        Some(value) => Some(parse_usage(value)?),
    };
    let text = match object.get("text") {
        None => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(_) => return Err("\"text\" must be a string".to_owned()),
    };
    let reasoning = match object.get("reasoning") {
        None => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(_) => return Err("\"reasoning\" must be a string".to_owned()),
    };
    let mut tool_calls = Vec::new();
    match object.get("tool_calls") {
        None => {}
        Some(Value::Array(calls)) if !calls.is_empty() => {
            for (position, call) in calls.iter().enumerate() {
                let Some(call) = call.as_object() else {
                    return Err(format!(
                        "tool_calls[{position}] must be an object {{\"name\", \"arguments\"}}"
                    ));
                };
                if let Some(key) = call
                    .keys()
                    .find(|key| !matches!(key.as_str(), "name" | "arguments"))
                {
                    return Err(format!(
                        "tool_calls[{position}]: unknown key `{key}` (a call has \"name\" and \"arguments\")"
                    ));
                }
                let name = match call.get("name") {
                    Some(Value::String(name)) if !name.trim().is_empty() => name.clone(),
                    _ => return Err(format!("tool_calls[{position}] needs a non-empty \"name\"")),
                };
                let arguments = call
                    .get("arguments")
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Map::new()));
                *call_number += 1;
                tool_calls.push(ToolCall {
                    id: format!("call_{agent}_{call_number}"),
                    name,
                    arguments,
                });
            }
        }
        Some(_) => return Err("\"tool_calls\" must be a non-empty list".to_owned()),
    }
    if text.is_none() && tool_calls.is_empty() {
        return Err("a step needs \"text\" or \"tool_calls\"".to_owned());
    }
    Ok(ScriptStep {
        message: AssistantMessage {
            content: text,
            reasoning_content: reasoning,
            tool_calls,
        },
        usage,
    })
}

/// A step's `usage`: an object of non-negative integer counts, each optional.
fn parse_usage(value: &Value) -> Result<Usage, String> {
    let Some(object) = value.as_object() else {
        return Err(
            "\"usage\" must be an object {\"prompt_tokens\", \"completion_tokens\", \"cached_tokens\"}"
                .to_owned(),
        );
    };
    let mut usage = Usage::default();
    for (key, count) in object {
        let Some(count) = count.as_u64() else {
            return Err(format!(
                "usage.{key} must be a non-negative integer (a count of tokens)"
            ));
        };
        match key.as_str() {
            "prompt_tokens" => usage.prompt_tokens = count,
            "completion_tokens" => usage.completion_tokens = count,
            "cached_tokens" => usage.cached_tokens = count,
            _ => {
                return Err(format!(
                    "usage: unknown key `{key}` (a usage has \"prompt_tokens\", \"completion_tokens\" and \"cached_tokens\")"
                ));
            }
        }
    }
    if usage.cached_tokens > usage.prompt_tokens {
        return Err(format!(
            "usage.cached_tokens ({}) cannot exceed usage.prompt_tokens ({}): cached tokens are part of the prompt",
            usage.cached_tokens, usage.prompt_tokens
        ));
    }
    usage.total_tokens = usage.prompt_tokens.saturating_add(usage.completion_tokens);
    Ok(usage)
}

/// One member's view of a script; implements [`ModelProvider`]. Its cursor is shared with every
/// other `ScriptedAgent` of the same member.
#[derive(Clone, Debug)]
pub struct ScriptedAgent {
    inner: Arc<ScriptInner>,
    agent: String,
    pace: Duration,
}

impl ScriptedAgent {
    /// The member this provider answers for.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    fn script(&self) -> Result<&AgentScript, LlmError> {
        self.inner.agents.get(&self.agent).ok_or_else(|| {
            LlmError::script(format!(
                "script {} has no steps for agent `{}`",
                self.inner.origin, self.agent
            ))
        })
    }

    fn next_step(&self) -> Result<ScriptStep, LlmError> {
        let script = self.script()?;
        let mut cursor = script.cursor();
        let Some(step) = script.steps.get(*cursor) else {
            return Err(LlmError::script(format!(
                "script {}: agent `{}` has no step left ({} used up; this is model call {})",
                self.inner.origin,
                self.agent,
                match script.steps.len() {
                    1 => "its only step is".to_owned(),
                    n => format!("its {n} steps are"),
                },
                *cursor + 1
            )));
        };
        *cursor += 1;
        Ok(step.clone())
    }
}

impl ModelProvider for ScriptedAgent {
    fn complete<'a>(
        &'a self,
        _request: &'a ChatRequest,
        observer: &'a mut dyn StreamObserver,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, LlmError>> {
        Box::pin(async move {
            if cancel.is_cancelled() {
                return Err(LlmError::Cancelled);
            }
            if !self.pace.is_zero() {
                // Before the step is taken, so a call cancelled while it waits takes none.
                tokio::select! {
                    () = tokio::time::sleep(self.pace) => {}
                    () = cancel.cancelled() => return Err(LlmError::Cancelled),
                }
            }
            let ScriptStep { message, usage } = self.next_step()?;
            observer.on_event(StreamEvent::AttemptStarted { attempt: 1 });
            if let Some(reasoning) = &message.reasoning_content {
                observer.on_event(StreamEvent::ReasoningDelta {
                    text: reasoning.clone(),
                });
            }
            if let Some(text) = &message.content {
                observer.on_event(StreamEvent::TextDelta { text: text.clone() });
            }
            for (index, call) in message.tool_calls.iter().enumerate() {
                observer.on_event(StreamEvent::ToolCallDelta {
                    index,
                    id: Some(call.id.clone()),
                    name: Some(call.name.clone()),
                    arguments: call.arguments.to_string(),
                });
            }
            let finish_reason = if message.tool_calls.is_empty() {
                FinishReason::Stop
            } else {
                FinishReason::ToolCalls
            };
            Ok(ModelResponse {
                message,
                usage,
                finish_reason: Some(finish_reason),
                model: Some("script".to_owned()),
                attempts: vec![Attempt {
                    number: 1,
                    status: None,
                    error: None,
                    retry_delay_ms: None,
                }],
                truncated_calls: Vec::new(),
            })
        })
    }

    fn label(&self) -> String {
        format!("script:{}#{}", self.inner.origin, self.agent)
    }

    fn set_calls_made(&self, calls_made: usize) -> Result<(), LlmError> {
        ScriptedProvider {
            inner: Arc::clone(&self.inner),
            pace: self.pace,
        }
        .set_calls_made(&self.agent, calls_made)
    }
}
