//! `troupe run` and `troupe resume`: run the Lead until the work is quiescent.
//!
//! Two stages, as in ripgrep: the raw flags ([`RunFlags`], [`ResumeFlags`]) are validated into
//! a [`WorkConfig`] *before anything is written*, in the order a user fixes things: the command
//! line itself (the prompt, limit flags; for a resume, the session and its recorded
//! configuration), the workspace (exists, is a directory, is writable), the model (provider,
//! API key, script file, `--pace`), the home. The first problem is bad input (exit 2, one line).
//! Only then is a tokio runtime built, the session created or reopened, and the Lead run.
//!
//! Whatever happens once the agent runtime exists, it is shut down before the process exits,
//! so inboxes are parked and every log is flushed (DESIGN decision 2).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use serde_json::{Value, json};
use tokio::signal::unix::{Signal, SignalKind};
use tokio::sync::broadcast;
use troupe_journal::{Journal, JournalError};
use troupe_llm::{ClientOptions, ModelFlags, ModelSpec, ProviderFactory, ProviderKind, ToolChoice};
use troupe_protocol::{Event, MessageSource, SessionId, UserMessage, event_types};
use troupe_runtime::events::{Profile, TurnEndReason};
use troupe_runtime::{
    Agent, AgentProgress, AgentStatus, CONTINUATION_SOURCE, ChunkPolicy, ContinuationRule,
    LogFailure, OpenTurn, Progress, Runtime, RuntimeError, RuntimeOptions, Transcript,
    TranscriptStats,
};
use troupe_team::{TeamError, TeamLimits};
use troupe_tools::{NetworkAccess, SandboxMode, SandboxPolicy, ToolLimits};

use crate::exit::{Failure, WORK_FAILED};
use crate::progress::{Board, DoneStatus, OutputMode, Printer};
use crate::team::TeamSummary;

/// The Lead's name: the scripted provider's agent key (`{"agents": {"lead": […]}}`).
const LEAD: &str = "lead";

/// How long the first Ctrl-C waits for the cancelled turn to close before shutting down anyway.
const INTERRUPT_GRACE: Duration = Duration::from_secs(15);

/// How long the final shutdown (parking inboxes, flushing logs) may take.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(30);

/// The text sent to the Lead when `troupe resume` continues an interrupted or failed turn.
const CONTINUATION: &str = "The previous turn did not finish: {why}. Any tool call that was \
    running then has a result saying whether it ran. Check the current state first (re-read the \
    files you were changing, inspect the workspace), then continue the task from where it \
    stopped and answer when it is done.";

/// Why a turn a crash or kill cut did not finish (the `{why}` of [`CONTINUATION`]).
const STOPPED: &str = "the process running it stopped";

/// The largest `--pace`, in milliseconds.
pub(crate) const MAX_PACE_MS: u64 = 60_000;

/// `--pace MS` as typed (`run`, `resume`, `demo`).
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct PaceArgs {
    /// Scripted model only: wait MS milliseconds before each model reply (0 to 60000, default
    /// 0), slow enough to watch the run live in `troupe web`. Not recorded in the session.
    #[arg(
        long,
        value_name = "MS",
        // `--pace -5` is a bad value (named as such), not an unknown flag.
        allow_negative_numbers = true,
        value_parser = pace_ms
    )]
    pace: Option<u64>,
}

/// `--pace MS`: a whole number from 0 to [`MAX_PACE_MS`].
fn pace_ms(raw: &str) -> Result<u64, String> {
    let ms = crate::whole_number(raw)?;
    if ms > MAX_PACE_MS {
        return Err(format!("{ms} is not in 0..={MAX_PACE_MS}"));
    }
    Ok(ms)
}

impl PaceArgs {
    /// The wait before each model reply for a run of `spec`: `--pace` applies to a scripted
    /// model only (bad input otherwise: a real model is as fast as it is).
    fn for_model(&self, spec: &ModelSpec) -> Result<Duration, Failure> {
        match self.pace {
            None => Ok(Duration::ZERO),
            Some(_) if spec.provider != ProviderKind::Script => Err(Failure::bad_input(anyhow!(
                "--pace applies to a scripted model only (--model script:FILE), not to {spec}"
            ))),
            Some(ms) => Ok(Duration::from_millis(ms)),
        }
    }
}

/// `--sandbox MODE`, `--network on|off` as typed (`run`, `resume`, `demo`).
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct SandboxArgs {
    /// How every bash command is confined (Landlock): workspace-write (default for a new
    /// session: read everywhere, write only in the workspace, the session's temp dir and
    /// /dev/null-like devices), read-only (no writes but the temp dir), or off. Recorded in the
    /// session; `resume` keeps the recorded mode and accepts only a stricter one.
    #[arg(long, value_name = "MODE", value_parser = sandbox_mode)]
    sandbox: Option<SandboxMode>,
    /// Whether bash commands may open TCP connections or listen: on (default for a new
    /// session) or off (Landlock network rules). Recorded like --sandbox; `resume` accepts off
    /// for a session recorded with on, never the reverse.
    #[arg(long, value_name = "on|off", value_parser = network_access)]
    network: Option<NetworkAccess>,
}

fn sandbox_mode(raw: &str) -> Result<SandboxMode, String> {
    SandboxMode::parse(raw).map_err(|e| e.to_string())
}

fn network_access(raw: &str) -> Result<NetworkAccess, String> {
    NetworkAccess::parse(raw).map_err(|e| e.to_string())
}

impl SandboxArgs {
    /// The policy of a new session: the defaults with the given flags, checked against this
    /// kernel (see [`check_sandbox`]).
    pub(crate) fn for_new(&self) -> Result<SandboxPolicy, Failure> {
        let default = SandboxPolicy::default();
        let policy = SandboxPolicy {
            filesystem: self.sandbox.unwrap_or(default.filesystem),
            network: self.network.unwrap_or(default.network),
        };
        check_sandbox(&policy)?;
        Ok(policy)
    }

    /// The policy of a resume of a session that recorded `recorded`: the recorded one with
    /// the given flags, which may only make it stricter (a looser one is bad input, and
    /// nothing is written), checked against this kernel.
    fn for_resume(&self, recorded: SandboxPolicy) -> Result<SandboxPolicy, Failure> {
        let requested = SandboxPolicy {
            filesystem: self.sandbox.unwrap_or(recorded.filesystem),
            network: self.network.unwrap_or(recorded.network),
        };
        if !requested.is_within(&recorded) {
            return Err(Failure::bad_input(troupe_tools::SandboxError::Looser {
                recorded,
                requested,
            }));
        }
        check_sandbox(&requested)?;
        Ok(requested)
    }
}

/// A policy this kernel cannot enforce refuses the run (exit 2) in one line naming the flags
/// that lift the missing rules (`--sandbox off`, `--network on`): never a silent downgrade.
fn check_sandbox(policy: &SandboxPolicy) -> Result<(), Failure> {
    troupe_tools::probe_sandbox(policy).map_err(Failure::bad_input)
}

/// `--model`, `--base-url`, `--api-key-env` as typed.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ModelArgs {
    /// The model: NAME (deepseek-…, gpt-…), PROVIDER:NAME (deepseek, openai, compatible) or
    /// script:FILE (offline scripted model). `run` defaults to deepseek:deepseek-chat; `resume`
    /// defaults to the model recorded in the session (an override is recorded too).
    #[arg(long, value_name = "M")]
    model: Option<String>,
    /// Base URL of an OpenAI-compatible server (Ollama, vLLM, llama.cpp, LM Studio), e.g.
    /// http://127.0.0.1:11434/v1.
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// The environment variable holding the API key (default: DEEPSEEK_API_KEY / OPENAI_API_KEY
    /// for those providers, none for --base-url).
    #[arg(long, value_name = "VAR")]
    api_key_env: Option<String>,
    /// The tool_choice sent with requests that offer tools: auto, required, none, or omit
    /// (send none: the default). llama-cpp-python needs auto to offer the tools at all.
    /// Recorded with the model: resume keeps it.
    #[arg(long, value_name = "C", value_parser = tool_choice)]
    tool_choice: Option<ToolChoice>,
    #[command(flatten)]
    pace: PaceArgs,
}

/// `--tool-choice C`: one of auto, required, none, omit.
fn tool_choice(raw: &str) -> Result<ToolChoice, String> {
    raw.parse()
        .map_err(|_| "it is not one of auto, required, none, omit".to_owned())
}

impl ModelArgs {
    fn flags(&self) -> ModelFlags {
        ModelFlags {
            model: self.model.clone(),
            base_url: self.base_url.clone(),
            api_key_env: self.api_key_env.clone(),
            tool_choice: self.tool_choice,
        }
    }
}

/// The Team limit flags (REFERENCE c.15) as typed. Each is a positive integer up to 2^53-1;
/// an absent flag keeps the default. They apply to Team sessions only, and they are not
/// recorded in the session: give them again to `troupe resume`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct TeamLimitArgs {
    /// Team only: most teammates the Lead may ever create, failed ones included (default 8).
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = crate::whole_number)]
    max_members: Option<u64>,
    /// Team only: most tasks on the board that are not deleted (default 256).
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = crate::whole_number)]
    max_tasks: Option<u64>,
    /// Team only: most undelivered messages waiting for one member (default 64).
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = crate::whole_number)]
    max_pending_messages: Option<u64>,
    /// Team only: largest message, in UTF-8 bytes of its JSON content (default 65536).
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = crate::whole_number)]
    max_message_bytes: Option<u64>,
    /// Team only: how long each step of shutting a teammate down may take, in ms (default 5000).
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = crate::whole_number)]
    disposal_timeout_ms: Option<u64>,
}

impl TeamLimitArgs {
    /// (flag, configuration key, value) of every limit flag.
    fn entries(&self) -> [(&'static str, &'static str, Option<u64>); 5] {
        [
            ("--max-members", "maxMembers", self.max_members),
            ("--max-tasks", "maxTasks", self.max_tasks),
            (
                "--max-pending-messages",
                "maxPendingMessagesPerMember",
                self.max_pending_messages,
            ),
            (
                "--max-message-bytes",
                "maxMessageBytes",
                self.max_message_bytes,
            ),
            (
                "--disposal-timeout-ms",
                "disposalTimeoutMs",
                self.disposal_timeout_ms,
            ),
        ]
    }

    /// The first limit flag given, if any.
    fn first_given(&self) -> Option<&'static str> {
        self.entries()
            .into_iter()
            .find_map(|(flag, _, value)| value.map(|_| flag))
    }

    /// The limits in force: the defaults with every given flag applied, each checked by
    /// [`TeamLimits`] (`0` or more than 2^53-1 is refused as bad input naming the flag).
    fn limits(&self) -> Result<TeamLimits, Failure> {
        let mut limits = TeamLimits::default();
        for (flag, key, value) in self.entries() {
            let Some(value) = value else { continue };
            limits
                .set_json(key, &json!(value))
                .map_err(|e| limit_error(flag, e))?;
        }
        limits
            .validate()
            .map_err(|e| Failure::bad_input(anyhow!("invalid Team limits: {e}")))?;
        Ok(limits)
    }
}

fn limit_error(flag: &str, error: TeamError) -> Failure {
    match error {
        TeamError::InvalidConfig { value, reason, .. } => {
            Failure::bad_input(anyhow!("{flag} {value}: {reason}"))
        }
        other => Failure::bad_input(other),
    }
}

/// `troupe run` as typed.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RunFlags {
    /// Run the Lead with the Team profile: it can create teammates, message them and share a
    /// task board (the ten Team tools and the Team policy replace subagent/subagent_fork).
    #[arg(long)]
    team: bool,
    #[command(flatten)]
    limits: TeamLimitArgs,
    /// The directory the agents work in (default: the current directory).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sandbox: SandboxArgs,
    /// Print progress as JSON lines on stdout, ending with a `done` line holding the answer.
    #[arg(long)]
    json: bool,
    /// What the Lead should do (several words are joined by spaces). `-`, or no PROMPT while
    /// stdin is not a terminal, reads it from stdin (to its end).
    #[arg(value_name = "PROMPT", num_args = 0..)]
    prompt: Vec<String>,
}

/// `troupe resume` as typed.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ResumeFlags {
    /// The session to resume: its id, or a unique prefix of it (see `troupe sessions`).
    session: String,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    limits: TeamLimitArgs,
    #[command(flatten)]
    sandbox: SandboxArgs,
    /// Print progress as JSON lines on stdout, ending with a `done` line holding the answer.
    #[arg(long)]
    json: bool,
    /// A new instruction for the Lead (`-` reads it from stdin). Without it, an interrupted
    /// turn is continued and waiting messages are run; if there is nothing to do, the last
    /// answer is printed (stdin is not read).
    #[arg(value_name = "PROMPT", num_args = 0..)]
    prompt: Vec<String>,
}

/// Where the command's sessions live, as resolved and as the user typed it (for hints).
pub(crate) struct Home<'a> {
    pub(crate) dir: PathBuf,
    pub(crate) flag: Option<&'a Path>,
    /// How messages name it: `--home DIR`, `TROUPE_HOME DIR` or `the Troupe home DIR`.
    pub(crate) named: String,
}

impl Home<'_> {
    /// Makes sure a run can write its sessions, before anything else is written: creates
    /// `<home>/sessions` and any missing parent (durably: the parent of each new directory is
    /// fsynced, as the journal does) and checks that it is writable (`access(2)`, which also
    /// sees read-only mounts). A home where that fails (`/proc/x`, a read-only file system) is
    /// bad input (exit 2) in one line, and whatever this created is removed again. Returns the
    /// directories it created.
    pub(crate) fn prepare(&self) -> Result<CreatedDirs, Failure> {
        let sessions = self.dir.join("sessions");
        let created = create_dirs(&sessions).map_err(|(dir, e)| {
            Failure::bad_input(anyhow!(
                "{} cannot hold sessions: creating {} failed ({e})",
                self.named,
                dir.display()
            ))
        })?;
        if let Err(e) = rustix::fs::access(&sessions, rustix::fs::Access::WRITE_OK) {
            created.undo();
            return Err(Failure::bad_input(anyhow!(
                "{} cannot hold sessions: {} is not writable ({e})",
                self.named,
                sessions.display()
            )));
        }
        Ok(created)
    }
}

/// Directories a command created (outermost first), so it can remove them again when a later
/// check refuses the input.
#[derive(Default)]
pub(crate) struct CreatedDirs(Vec<PathBuf>);

impl CreatedDirs {
    /// Removes the created directories again (only while they are empty).
    pub(crate) fn undo(&self) {
        for dir in self.0.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Creates `dir` and every missing ancestor, outermost first, fsyncing the parent of each new
/// directory so the creation survives a power loss. On failure, removes what it created and
/// returns the directory that could not be created with the error.
pub(crate) fn create_dirs(dir: &Path) -> Result<CreatedDirs, (PathBuf, std::io::Error)> {
    let mut missing = Vec::new();
    let mut cursor = Some(dir);
    while let Some(d) = cursor.filter(|d| !d.as_os_str().is_empty()) {
        match std::fs::symlink_metadata(d) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing.push(d.to_path_buf()),
            _ => break,
        }
        cursor = d.parent();
    }
    let mut created = CreatedDirs(Vec::new());
    for d in missing.into_iter().rev() {
        let made = std::fs::create_dir(&d).and_then(|()| {
            let parent = d.parent().filter(|p| !p.as_os_str().is_empty());
            std::fs::File::open(parent.unwrap_or(Path::new(".")))?.sync_all()
        });
        match made {
            Ok(()) => created.0.push(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                created.undo();
                return Err((d, e));
            }
        }
    }
    Ok(created)
}

/// A validated `run` or `resume`: everything the work needs.
struct WorkConfig {
    home: PathBuf,
    /// `--home DIR` as given, repeated in the hints printed at the end.
    home_flag: Option<PathBuf>,
    /// Canonical, existing, writable directory.
    workspace: PathBuf,
    /// The model in effect (recorded in new agents' configs; never holds a key).
    spec: ModelSpec,
    models: Arc<ProviderFactory>,
    mode: OutputMode,
    /// Whether the Lead runs with the Team profile (`--team`, or as recorded for a resume).
    team: bool,
    /// The Team limits in force (Team sessions only).
    team_limits: TeamLimits,
    /// Environment variables that hold API keys: removed from every `bash` tool process.
    secret_env: Vec<String>,
    /// The sandbox of every `bash` (checked against this kernel).
    sandbox: SandboxPolicy,
    /// API key values: redacted (`***`) from everything recorded or shown.
    secrets: Vec<String>,
    start: Start,
    /// What the command adds around the run's own output (`troupe demo`).
    framing: Framing,
}

enum Start {
    New {
        prompt: String,
    },
    Resume {
        id: SessionId,
        prompt: Option<String>,
        stored: Box<Stored>,
    },
}

/// Lines a command adds around a run: after the `session` line, and after the summary.
pub(crate) struct Framing {
    pub(crate) prologue: Vec<String>,
    pub(crate) epilogue: Option<Epilogue>,
    /// The command's own check of the result, run once after the agents stopped (`troupe
    /// demo`: the project's tests). A failed check makes a run that completed exit 1.
    pub(crate) check: Option<Check>,
    /// Whether the run prints its own hints: the `inspect:` line after the summary and, when
    /// it completed, `continue: troupe resume ID "…"` (`troupe demo` lists its own commands).
    pub(crate) run_hints: bool,
}

impl Default for Framing {
    fn default() -> Self {
        Self {
            prologue: Vec::new(),
            epilogue: None,
            check: None,
            run_hints: true,
        }
    }
}

/// Builds the closing lines from what the run left (called once, after the summary).
pub(crate) type Epilogue = Box<dyn Fn(&Ending<'_>) -> Vec<String>>;

/// Checks what the run left (called once, before the outcome is printed).
pub(crate) type Check = Box<dyn Fn() -> Checked>;

/// The outcome of a [`Check`].
pub(crate) struct Checked {
    /// One line saying what was found, e.g. `OK` or `FAILED (failures=2)`.
    pub(crate) summary: String,
    /// `None` when the check passed; else the stable code and message of the failure (the
    /// `error` of the final `--json` line).
    pub(crate) failure: Option<(&'static str, String)>,
}

/// What an [`Epilogue`] is told about the run that ended.
pub(crate) struct Ending<'a> {
    pub(crate) id: &'a SessionId,
    /// ` --home DIR` when the command was given one (to repeat in commands), else empty.
    pub(crate) home: &'a str,
    /// Every teammate (name, session id), in creation order.
    pub(crate) teammates: Vec<(String, SessionId)>,
    /// Whether the Lead answered. When it did not, the run's own last line names `troupe
    /// resume` (the interruption notice, or the failure), so an epilogue does not repeat it.
    pub(crate) completed: bool,
    /// What the command's own check found, when it has one.
    pub(crate) check: Option<&'a Checked>,
}

/// Where a resumed session's Lead stopped, read from its log before this process touched it
/// (without locking it), so that the recovery of the resume — which closes the open turn and
/// redelivers mail, which may start turns at once — cannot hide it. A Team's teammates are
/// continued by the Team recovery itself (`troupe_runtime`).
#[derive(Debug, Default)]
struct Stored {
    /// The Lead's last turn number.
    last_turn: u64,
    /// Why the Lead's last turn did not finish, when it did not.
    unfinished: Option<String>,
    /// How many continuation turns the Lead is owed ([`Transcript::owed_continuations`] under
    /// [`ContinuationRule::Root`], its open turn cut): one per turn that did not finish and
    /// that no continuation an earlier resume queued answers yet.
    owed_continuations: usize,
    /// The Lead's model calls that count as taken ([`Transcript::spent_model_calls`]): where
    /// a scripted Lead's script continues.
    spent_model_calls: usize,
}

/// Why the last turn of the log `events` (folded into `t`) did not finish, if it did not.
fn unfinished(t: &Transcript, events: &[Event]) -> Option<String> {
    if t.open_turn().is_some() {
        // An open turn whose final answer is already in the log lacks only its `turn/end`
        // (another flush of the same log, e.g. a Team commit, made the answer durable just
        // before the stop): its work is done, so it gets no continuation.
        return (!answered(events)).then(|| STOPPED.to_owned());
    }
    match t.last_turn_end() {
        Some(TurnEndReason::Interrupted) => Some(STOPPED.to_owned()),
        Some(TurnEndReason::Aborted { .. }) => Some("it was interrupted".to_owned()),
        Some(TurnEndReason::Failed { code, message }) => {
            Some(format!("it failed ({code}: {message})"))
        }
        _ => None,
    }
}

/// Whether the last turn in `events` holds a final answer: an `assistant/message` without
/// tool calls after its `turn/start`.
fn answered(events: &[Event]) -> bool {
    for event in events.iter().rev() {
        match event.kind.as_str() {
            event_types::TURN_START | event_types::TURN_END => return false,
            event_types::ASSISTANT_MESSAGE => {
                return event.data["message"]["tool_calls"]
                    .as_array()
                    .is_none_or(Vec::is_empty);
            }
            _ => {}
        }
    }
    false
}

/// Reads where the Lead stopped (see [`Stored`]) from its log `events`, folded into `lead`.
fn read_stored(lead: &Transcript, events: &[Event]) -> Stored {
    Stored {
        last_turn: lead.last_turn(),
        unfinished: unfinished(lead, events),
        owed_continuations: lead.owed_continuations(ContinuationRule::Root, OpenTurn::Cut),
        spent_model_calls: lead.spent_model_calls(),
    }
}

/// `troupe run`.
pub(crate) fn run(flags: RunFlags, home: Home<'_>) -> Result<(), Failure> {
    let config = validate_run(flags, home)?;
    execute(config)
}

/// `troupe resume`.
pub(crate) fn resume(flags: ResumeFlags, home: Home<'_>) -> Result<(), Failure> {
    let config = validate_resume(flags, home)?;
    execute(config)
}

fn output_mode(json: bool) -> OutputMode {
    use std::io::IsTerminal;
    if json {
        OutputMode::Json
    } else if std::io::stderr().is_terminal() {
        OutputMode::Tty
    } else {
        OutputMode::Plain
    }
}

fn validate_prompt(words: &[String]) -> Result<String, Failure> {
    if let [only] = words
        && only == "-"
    {
        return prompt_from_stdin();
    }
    let prompt = words.join(" ");
    if prompt.trim().is_empty() {
        return Err(Failure::bad_input(anyhow!(
            "the prompt is empty: say what the agent should do"
        )));
    }
    Ok(prompt)
}

/// The prompt of `troupe run`: the words given, else — when stdin is not a terminal (a pipe,
/// a file, `< /dev/null`) — stdin. On a terminal, no PROMPT is bad input (nothing would ever
/// end the read).
fn run_prompt(words: &[String]) -> Result<String, Failure> {
    use std::io::IsTerminal;
    if words.is_empty() {
        if std::io::stdin().is_terminal() {
            return Err(Failure::bad_input(anyhow!(
                "a prompt is required: troupe run \"what the Lead should do\" (or - to read it \
                 from stdin)"
            )));
        }
        return prompt_from_stdin();
    }
    validate_prompt(words)
}

/// Reads the prompt from stdin to its end, without the trailing newlines. Empty (only
/// whitespace) or not UTF-8 is bad input.
fn prompt_from_stdin() -> Result<String, Failure> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut bytes)
        .map_err(|e| Failure::bad_input(anyhow!("cannot read the prompt from stdin: {e}")))?;
    let text = String::from_utf8(bytes)
        .map_err(|e| Failure::bad_input(anyhow!("the prompt on stdin is not UTF-8 text: {e}")))?;
    let prompt = text.trim_end_matches(['\n', '\r']);
    if prompt.trim().is_empty() {
        return Err(Failure::bad_input(anyhow!(
            "the prompt read from stdin is empty: say what the agent should do"
        )));
    }
    Ok(prompt.to_owned())
}

fn validate_run(flags: RunFlags, home: Home<'_>) -> Result<WorkConfig, Failure> {
    // The command line itself first, then what the user points at, in the order they would
    // fix it: the workspace, then the model (provider, API key, script, pace), then the home.
    let prompt = run_prompt(&flags.prompt)?;
    if !flags.team
        && let Some(flag) = flags.limits.first_given()
    {
        return Err(Failure::bad_input(anyhow!(
            "{flag} applies to Team runs only: add --team"
        )));
    }
    let team_limits = flags.limits.limits()?;
    let sandbox = flags.sandbox.for_new()?;
    let workspace = match flags.workspace {
        Some(dir) => dir,
        None => std::env::current_dir()
            .map_err(|e| Failure::bad_input(anyhow!("cannot read the current directory: {e}")))?,
    };
    let workspace = check_workspace(&workspace)?;
    let spec = absolute_script(ModelSpec::from_flags(&flags.model.flags())?)?;
    work_config(
        home,
        true,
        workspace,
        spec,
        &flags.model.pace,
        RunShape {
            json: flags.json,
            team: flags.team,
            team_limits,
            sandbox,
            start: Start::New { prompt },
            framing: Framing::default(),
        },
    )
}

fn validate_resume(flags: ResumeFlags, home: Home<'_>) -> Result<WorkConfig, Failure> {
    let journal = Journal::open_home(&home.dir);
    let id = crate::resolve_session(&journal, &flags.session)?;
    let prompt = if flags.prompt.is_empty() {
        None
    } else {
        Some(validate_prompt(&flags.prompt)?)
    };
    // Read-only: nothing is locked or written until the flags are known to be usable.
    let replay = journal.read(&id)?;
    if replay.header.origin.as_deref() == Some("subagent") {
        let mut probe = troupe_runtime::RoleProbe::new(&replay.header);
        for event in &replay.events {
            probe.observe(event);
        }
        if let Some(parent) = &replay.header.parent_session {
            let command = format!("troupe resume {parent}{}", home_arg(home.flag));
            return Err(not_a_root(&id, probe.role(), parent, &command));
        }
        return Err(Failure::bad_input(anyhow!(
            "session {id} is a subagent child without a parent session: it cannot be resumed"
        )));
    }
    let transcript = Transcript::fold(replay.header.seed_len(), &replay.events)?;
    let recorded = transcript.config().cloned().ok_or_else(|| {
        Failure::bad_input(anyhow!(
            "session {id} cannot be resumed: it has no agent configuration (not created by troupe run)"
        ))
    })?;
    let team = recorded.profile == Profile::Team;
    if !team && let Some(flag) = flags.limits.first_given() {
        return Err(Failure::bad_input(anyhow!(
            "{flag} applies to Team sessions only, and session {id} is not one"
        )));
    }
    let team_limits = flags.limits.limits()?;
    let sandbox = flags.sandbox.for_resume(recorded.sandbox_policy())?;
    let mut framing = Framing::default();
    if recorded.sandbox.is_none() && flags.sandbox.sandbox.is_none() {
        framing.prologue.push(format!(
            "sandbox: session {id} was recorded before the sandbox existed, so its commands run \
             unconfined as before (--sandbox off); resume it with --sandbox workspace-write to \
             confine them"
        ));
    } else if sandbox != recorded.sandbox_policy() {
        framing.prologue.push(format!(
            "sandbox: {sandbox} from now on (recorded: {})",
            recorded.sandbox_policy()
        ));
    }
    // The same order as `run`: the workspace, then the model, then the home.
    let workspace = check_workspace(Path::new(&recorded.workspace))?;
    let spec = absolute_script(recorded.model.with_overrides(&flags.model.flags())?)?;
    let stored = read_stored(&transcript, &replay.events);
    // A resumed demo checks its project's tests as `troupe demo` does.
    let script = (spec.provider == ProviderKind::Script).then(|| Path::new(&spec.model));
    framing.check = crate::demo::resumed_framing(&home.dir, script, &workspace).check;
    work_config(
        home,
        true,
        workspace,
        spec,
        &flags.model.pace,
        RunShape {
            json: flags.json,
            team,
            team_limits,
            sandbox,
            start: Start::Resume {
                id,
                prompt,
                stored: Box::new(stored),
            },
            framing,
        },
    )
}

/// `troupe demo`: a Team run of the script file `script` on `workspace`, exactly as
/// `troupe run --team --workspace DIR --model script:FILE PROMPT` runs it, with the demo's
/// own lines around the run's output.
/// `run` says how: `--json`, and `--pace` (waited before each model reply).
pub(crate) fn run_scripted_team(
    script: &Path,
    workspace: &Path,
    prompt: String,
    run: ScriptedRun,
    home: Home<'_>,
    framing: Framing,
) -> Result<(), Failure> {
    let workspace = check_workspace(workspace)?;
    let spec = absolute_script(ModelSpec::from_flags(&ModelFlags {
        model: Some(format!("script:{}", script.display())),
        base_url: None,
        api_key_env: None,
        tool_choice: None,
    })?)?;
    // The demo has prepared the home before writing its project.
    let config = work_config(
        home,
        false,
        workspace,
        spec,
        &run.pace,
        RunShape {
            json: run.json,
            team: true,
            team_limits: TeamLimits::default(),
            sandbox: run.sandbox,
            start: Start::New { prompt },
            framing,
        },
    )?;
    execute(config)
}

/// How a validated run goes: what [`work_config`] takes besides the home, the workspace and
/// the model.
struct RunShape {
    json: bool,
    team: bool,
    team_limits: TeamLimits,
    sandbox: SandboxPolicy,
    start: Start,
    framing: Framing,
}

/// The end of every validation (`run`, `resume`, the demo), in the documented order: the pace
/// checked against the model, the model built (API key read, or script loaded and checked),
/// then — when `prepare` — the home's directories created.
fn work_config(
    home: Home<'_>,
    prepare: bool,
    workspace: PathBuf,
    spec: ModelSpec,
    pace: &PaceArgs,
    shape: RunShape,
) -> Result<WorkConfig, Failure> {
    let pace = pace.for_model(&spec)?;
    let ModelSetup {
        factory: models,
        secret_env,
        secrets,
    } = provider_factory(&spec, pace)?;
    if let Start::Resume {
        id,
        prompt: Some(_),
        stored,
    } = &shape.start
        && !takes_instruction(&models, stored.spent_model_calls)
    {
        return Err(Failure::bad_input(anyhow!(
            "session {id} runs the scripted model {spec}, and its script has no step left for \
             the Lead, so it cannot take a new instruction (nothing was written): resume it \
             without a PROMPT, or add --model to answer with another model"
        )));
    }
    if prepare {
        home.prepare()?;
    }
    Ok(WorkConfig {
        home: home.dir,
        home_flag: home.flag.map(Path::to_path_buf),
        workspace,
        spec,
        models,
        secret_env,
        secrets,
        sandbox: shape.sandbox,
        mode: output_mode(shape.json),
        team: shape.team,
        team_limits: shape.team_limits,
        start: shape.start,
        framing: shape.framing,
    })
}

/// Whether the Lead of a session can answer a new instruction, after `spent` model calls of
/// its own: always with a real model; with a script, while the script has a Lead step left.
fn takes_instruction(models: &ProviderFactory, spent: usize) -> bool {
    match models {
        ProviderFactory::Http(_) => true,
        ProviderFactory::Scripted(script) => script.steps(LEAD).is_ok_and(|steps| spent < steps),
    }
}

/// How `troupe demo` runs its script: `--json`, `--pace`, the sandbox (already checked).
pub(crate) struct ScriptedRun {
    pub(crate) json: bool,
    pub(crate) pace: PaceArgs,
    pub(crate) sandbox: SandboxPolicy,
}

/// Records a script path as an absolute path, so `troupe resume` finds it from anywhere.
fn absolute_script(mut spec: ModelSpec) -> Result<ModelSpec, Failure> {
    if spec.provider == ProviderKind::Script {
        let path = std::path::absolute(&spec.model)
            .map_err(|e| Failure::bad_input(anyhow!("script path {}: {e}", spec.model)))?;
        spec.model = path.display().to_string();
    }
    Ok(spec)
}

/// Records a `--model`/`--base-url`/`--api-key-env`/`--tool-choice` override, or a stricter
/// `--sandbox` / `--network`, of a resumed session as a new `agent/config` (the latest one
/// wins), so a later plain `troupe resume` keeps using it.
///
/// Crash: the record is one append, flushed before the Lead is given any work. A crash before
/// the flush loses only the record: that run's agents already ran under the stricter policy
/// (it is the runtime's option), and a later plain `resume` runs with the previous record —
/// pass the flag again. After the flush the stricter policy is the recorded one.
async fn record_model_override(
    agent: &Agent,
    spec: &ModelSpec,
    sandbox: SandboxPolicy,
) -> anyhow::Result<()> {
    let Some(mut config) = agent.with_transcript(|t| t.config().cloned()) else {
        return Ok(());
    };
    if config.model == *spec && config.sandbox_policy() == sandbox {
        return Ok(());
    }
    config.model = spec.clone();
    if config.sandbox_policy() != sandbox {
        config.sandbox = Some(sandbox);
    }
    let data = serde_json::to_value(&config)?;
    agent.append_records(vec![troupe_protocol::EventDraft::new(
        troupe_protocol::event_types::AGENT_CONFIG,
        data,
    )])?;
    agent.writer().flush().await?;
    Ok(())
}

/// The model factory, plus the secrets a run must keep out of tools and logs: the variables
/// that may hold API keys (the providers' defaults and `--api-key-env`), and the key in use.
struct ModelSetup {
    factory: Arc<ProviderFactory>,
    secret_env: Vec<String>,
    secrets: Vec<String>,
}

/// Reads the API key and builds the client, or loads and checks the script.
fn provider_factory(spec: &ModelSpec, pace: Duration) -> Result<ModelSetup, Failure> {
    let config = spec.resolve(&|var| std::env::var(var).ok())?;
    let mut secret_env: Vec<String> = ["DEEPSEEK_API_KEY", "OPENAI_API_KEY"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    secret_env.extend(spec.api_key_env.iter().cloned());
    secret_env.sort();
    secret_env.dedup();
    let secrets = match &config {
        troupe_llm::ProviderConfig::Http(http) => http
            .api_key
            .iter()
            .map(|k| k.expose_secret().to_owned())
            .filter(|k| !k.is_empty())
            .collect(),
        troupe_llm::ProviderConfig::Script { .. } => Vec::new(),
    };
    let factory = ProviderFactory::new(config, ClientOptions::default())?.with_script_pace(pace);
    // A script without steps for the Lead is refused now rather than after creating a session.
    factory.for_agent(LEAD)?;
    Ok(ModelSetup {
        factory: Arc::new(factory),
        secret_env,
        secrets,
    })
}

/// The workspace must exist, be a directory and be writable; returns its canonical path.
fn check_workspace(dir: &Path) -> Result<PathBuf, Failure> {
    let shown = dir.display();
    let metadata = std::fs::metadata(dir).map_err(|e| {
        Failure::bad_input(if e.kind() == std::io::ErrorKind::NotFound {
            anyhow!("workspace {shown} does not exist")
        } else {
            anyhow!("workspace {shown}: {e}")
        })
    })?;
    if !metadata.is_dir() {
        return Err(Failure::bad_input(anyhow!(
            "workspace {shown} is not a directory"
        )));
    }
    // access(2) rather than permission bits: it also sees read-only mounts and ACLs.
    rustix::fs::access(dir, rustix::fs::Access::WRITE_OK)
        .map_err(|e| Failure::bad_input(anyhow!("workspace {shown} is not writable: {e}")))?;
    std::fs::canonicalize(dir).map_err(|e| Failure::bad_input(anyhow!("workspace {shown}: {e}")))
}

/// Builds the tokio runtime and runs the work on it.
fn execute(config: WorkConfig) -> Result<(), Failure> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("troupe-worker")
        .enable_all()
        .build()
        .context("starting the async runtime")
        .map_err(Failure::work)?;
    let result = tokio.block_on(work(config));
    // Every agent was disposed by `work`; do not wait long for stray blocking tasks.
    tokio.shutdown_timeout(Duration::from_secs(2));
    result
}

/// What happened between starting (or reopening) the Lead and quiescence.
struct Driven {
    agent: Agent,
    id: SessionId,
    /// The Lead's last turn number before this process gave it work.
    turn_before: u64,
    /// A resume that found nothing to run.
    nothing_to_do: bool,
    interrupt: Interrupt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Interrupt {
    None,
    /// Ctrl-C once: the turn was cancelled (inbox kept) and closed.
    Graceful,
    /// Ctrl-C twice: stop waiting for the cancelled turn to close.
    Forced,
}

async fn work(config: WorkConfig) -> Result<(), Failure> {
    // Installed first, so a Ctrl-C from here on interrupts the turn instead of killing us.
    let mut sigint = Interrupts::install().map_err(Failure::work)?;
    let runtime = Runtime::new(
        Journal::open_home(&config.home),
        RuntimeOptions {
            workspace: config.workspace.clone(),
            models: Arc::clone(&config.models) as _,
            model_spec: config.spec.clone(),
            chunks: ChunkPolicy::default(),
            tool_limits: ToolLimits::default(),
            max_depth: 1,
            team_limits: config.team_limits,
            extra_tools: Vec::new(),
            secret_env: config.secret_env.clone(),
            secrets: config.secrets.clone(),
            sandbox: config.sandbox,
        },
    );
    let mut printer = Printer::new(config.mode);
    printer.expect_usage(config.spec.provider != ProviderKind::Script);
    // A fork child's log numbers its turns after the ones its seed inherited; progress counts
    // its own turns, as the summary does. (Its transcript's last turn minus its own turns.)
    let lookup = runtime.clone();
    printer.set_inherited_turns(Box::new(move |id| {
        let inherited = |t: &Transcript| t.last_turn().saturating_sub(t.stats().turns);
        match lookup.agent(id) {
            Some(agent) => agent.with_transcript(inherited),
            // Already settled when the printer got to it: its stored log says the same.
            None => lookup
                .journal()
                .read(id)
                .ok()
                .and_then(|r| Transcript::fold(r.header.seed_len(), &r.events).ok())
                .map_or(0, |t| inherited(&t)),
        }
    }));
    let mut events = runtime.subscribe_progress();
    let driven = drive(&runtime, &config, &mut printer, &mut events, &mut sigint).await;
    // Always: park inboxes, end running turns, flush every log.
    let shutdown = tokio::time::timeout(SHUTDOWN_LIMIT, runtime.shutdown()).await;
    while let Ok(event) = events.try_recv() {
        printer.progress(&event);
    }
    printer.clear_live();
    // Complete once the shutdown released every agent (DESIGN decision 11).
    let log_failures = runtime.log_failures();
    let driven = driven?;
    let teardown = match shutdown {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(anyhow::Error::new(e).context("shutting the agents down")),
        Err(_) => Some(anyhow!(
            "shutting the agents down took longer than {}s; the session log is still \
             consistent: continue with troupe resume {}",
            SHUTDOWN_LIMIT.as_secs(),
            driven.id
        )),
    };
    // A failed log is the run's failure, reported after the summary; the teardown error it
    // caused (the poisoned writer refusing its final flush) says the same thing less clearly.
    if let Some(teardown) = teardown
        && log_failures.is_empty()
    {
        return Err(Failure::work(teardown));
    }
    report(&driven, &config, &mut printer, &log_failures)
}

async fn drive(
    runtime: &Runtime,
    config: &WorkConfig,
    printer: &mut Printer,
    events: &mut broadcast::Receiver<AgentProgress>,
    sigint: &mut Interrupts,
) -> Result<Driven, Failure> {
    let model = config.spec.to_string();
    let (agent, id, turn_before, nothing_to_do) = match &config.start {
        Start::New { prompt } => {
            let id = SessionId::random();
            let profile = if config.team {
                Profile::Team
            } else {
                Profile::Default
            };
            // The prompt is recorded with the session's configuration, in the batch that
            // creates the file: a crash leaves no session or one whose prompt is waiting.
            let first = UserMessage::text(prompt.clone(), MessageSource::kind("user"));
            let agent = runtime
                .create_root_with(id.clone(), LEAD, profile, Some(first))
                .await?;
            printer.session_started(&id, false, &model);
            for line in &config.framing.prologue {
                printer.note(line);
            }
            (agent, id, 0, false)
        }
        Start::Resume { id, prompt, stored } => {
            let (agent, recovered) = runtime
                .resume_root(id)
                .await
                .map_err(|e| resume_error(id, &config.home, e))?;
            printer.session_started(id, true, &model);
            for line in &config.framing.prologue {
                printer.note(line);
            }
            record_model_override(&agent, &config.spec, config.sandbox).await?;
            if recovered {
                printer.note(
                    "recovered: the previous run stopped in the middle of a turn; it was closed \
                     as interrupted (see troupe log)",
                );
            }
            // Only waking items (follow-ups, wakeup mail) are work to run now. Quiet mail
            // waits in the next-step list for the Lead's next turn, whatever starts it
            // (REFERENCE c.10: `send_message` never wakes its target).
            let pending = agent.with_transcript(|t| !t.next_turn().is_empty());
            let owed = stored.owed_continuations;
            let nothing_to_do = if let Some(prompt) = prompt {
                let msg = UserMessage::text(prompt.clone(), MessageSource::kind("user"));
                agent.followup(msg).await?;
                false
            } else if owed > 0 {
                // Every cut turn gets its own continuation turn (one an earlier resume already
                // queued counts). Waiting items (e.g. a wakeup that arrived during the cut
                // turn) run first, each in its own turn, exactly as they would have without
                // the stop.
                let why = stored
                    .unfinished
                    .clone()
                    .unwrap_or_else(|| STOPPED.to_owned());
                if pending {
                    printer.note("running the messages that were waiting in the inbox first");
                }
                if owed == 1 {
                    printer.note(&format!("continuing: the last turn did not finish ({why})"));
                } else {
                    printer.note(&format!(
                        "continuing: {owed} turns did not finish (the last: {why}), each gets a \
                         continuation turn"
                    ));
                }
                for _ in 0..owed {
                    agent.followup(continuation(&why)).await?;
                }
                false
            } else if pending {
                // Waiting items (e.g. a prompt the interrupted run never claimed) run first and
                // in order; they carry the work on, so no continuation message is added.
                printer.note("running the messages that were waiting in the inbox");
                !agent.wake_parked()
            } else if agent.status() == AgentStatus::Running {
                // The recovery's redelivered mail already started a Lead turn (it claimed the
                // mail, so nothing waits any more): that turn is this run's work, and the run
                // waits for it like for any other (it must not be shut down under it).
                printer.note("running the messages the recovery delivered");
                false
            } else {
                true
            };
            // Turns that the recovery's redelivered mail already started count as this run's.
            (agent, id.clone(), stored.last_turn, nothing_to_do)
        }
    };
    // A Team's recovery may have woken teammates with waiting messages even when the Lead has
    // nothing to do: wait for them too.
    let teammates_woken = runtime.live_ids().len() > 1;
    if nothing_to_do && teammates_woken {
        printer.note("teammates have work left: running until they are done");
    }
    let interrupt = if nothing_to_do && !teammates_woken {
        Interrupt::None
    } else {
        wait(runtime, &agent, printer, events, sigint).await
    };
    Ok(Driven {
        agent,
        id,
        turn_before,
        nothing_to_do,
        interrupt,
    })
}

/// The message that continues a turn that did not finish because `why`.
fn continuation(why: &str) -> UserMessage {
    UserMessage::text(
        CONTINUATION.replace("{why}", why),
        MessageSource::kind(CONTINUATION_SOURCE).with("reason", why.to_owned()),
    )
}

/// A lock held by another process is bad input with its own words; a Lead log that breaks a
/// Team rule is a damaged log (exit 1) and names its file.
fn resume_error(id: &SessionId, home: &Path, error: RuntimeError) -> Failure {
    match error {
        RuntimeError::Journal(JournalError::Locked { .. }) => Failure::bad_input(anyhow!(
            "session is locked by another process: a troupe run or troupe resume of {id} is \
             still running"
        )),
        team @ RuntimeError::TeamLog { .. } => {
            let file = home.join("sessions").join(format!("{id}.jsonl"));
            Failure::work(anyhow!(
                "TEAM_LOG_INVALID: {team} (file {}; nothing was written to it)",
                file.display()
            ))
        }
        other => other.into(),
    }
}

/// Ctrl-C, SIGTERM (`timeout`, `kill`, service managers) and SIGHUP (a closed terminal): each
/// stops the running turns cleanly, keeping inboxes, so the session stays resumable.
struct Interrupts {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Interrupts {
    fn install() -> anyhow::Result<Self> {
        let install = |kind, what| {
            tokio::signal::unix::signal(kind)
                .with_context(|| format!("installing the {what} handler"))
        };
        Ok(Self {
            int: install(SignalKind::interrupt(), "Ctrl-C")?,
            term: install(SignalKind::terminate(), "SIGTERM")?,
            hup: install(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    /// Resolves at the next interrupting signal.
    async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
            _ = self.hup.recv() => {}
        }
    }
}

/// Shows progress until the Lead has answered and every teammate or subagent is idle or
/// inactive (the Lead idle, no child resident); handles Ctrl-C.
async fn wait(
    runtime: &Runtime,
    agent: &Agent,
    printer: &mut Printer,
    events: &mut broadcast::Receiver<AgentProgress>,
    sigint: &mut Interrupts,
) -> Interrupt {
    let quiescent = runtime.wait_quiescent(agent);
    tokio::pin!(quiescent);
    // The board as the run starts (a resume's recovery may have changed it already).
    show_board(runtime, agent, printer).await;
    let mut ticker = tokio::time::interval(Duration::from_millis(250));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let live_line = printer.mode() == OutputMode::Tty;
    // A resized terminal (SIGWINCH) gets the live area redrawn at once, at its new size.
    let mut resized = if live_line {
        tokio::signal::unix::signal(SignalKind::window_change()).ok()
    } else {
        None
    };
    let mut interrupt = Interrupt::None;
    let mut grace: Option<Pin<Box<tokio::time::Sleep>>> = None;
    let mut events_open = true;
    loop {
        tokio::select! {
            biased;
            received = events.recv(), if events_open => match received {
                Ok(event) => {
                    printer.progress(&event);
                    // The board changes through the Team tools: look at it after each one.
                    if let Progress::ToolFinished { name, .. } = &event.progress
                        && troupe_runtime::team::TEAM_TOOL_NAMES.contains(&name.as_str())
                    {
                        show_board(runtime, agent, printer).await;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(skipped)) => printer.lagged(skipped),
                Err(broadcast::error::RecvError::Closed) => events_open = false,
            },
            () = &mut quiescent => {
                show_board(runtime, agent, printer).await;
                break;
            }
            _ = sigint.recv() => {
                if interrupt != Interrupt::None {
                    printer.note("interrupted again: not waiting for the turn to close");
                    interrupt = Interrupt::Forced;
                    break;
                }
                interrupt = Interrupt::Graceful;
                printer.note("interrupting: stopping the current turn (Ctrl-C again to stop waiting)");
                // Keep the inbox: anything queued stays parked for `troupe resume`. Teammates
                // (and any other live agent of this run) are stopped the same way.
                if let Err(e) = agent.cancel(json!({"kind": "user"}), true).await {
                    printer.note(&format!("troupe: cancelling the turn failed: {e}"));
                }
                for id in runtime.live_ids() {
                    if id != *agent.id()
                        && let Some(other) = runtime.agent(&id)
                        && let Err(e) = other.cancel(json!({"kind": "user"}), true).await
                    {
                        let name = other.name();
                        printer.note(&format!("troupe: cancelling {name}'s turn failed: {e}"));
                    }
                }
                grace = Some(Box::pin(tokio::time::sleep(INTERRUPT_GRACE)));
            }
            () = async {
                match grace.as_mut() {
                    Some(sleep) => sleep.await,
                    None => std::future::pending().await,
                }
            } => {
                printer.note("the cancelled turn did not close in time: shutting down");
                break;
            }
            _ = ticker.tick(), if live_line => {
                show_board(runtime, agent, printer).await;
                printer.redraw();
            }
            Some(()) = async {
                match resized.as_mut() {
                    Some(signal) => signal.recv().await,
                    None => std::future::pending().await,
                }
            } => printer.redraw(),
        }
    }
    interrupt
}

/// Reports the board of `lead`'s Team, if it leads one.
async fn show_board(runtime: &Runtime, lead: &Agent, printer: &mut Printer) {
    if let Some(team) = runtime.team(lead.id()) {
        let state = team.snapshot().await;
        printer.team(Board::of(&state));
    }
}

/// The `JOURNAL_FAILED` message for the members whose session log failed (DESIGN decision
/// 11): each member by name, role and session id with its first failure (the operation, the
/// file and the OS error).
fn log_failure_message(lead: &SessionId, failures: &[LogFailure]) -> String {
    let each: Vec<String> = failures
        .iter()
        .map(|f| {
            let role = if f.session == *lead {
                "the Lead"
            } else {
                "teammate"
            };
            format!("{} ({role}, session {}): {}", f.name, f.session, f.error)
        })
        .collect();
    let whose = if failures.len() == 1 {
        "a session log failed"
    } else {
        "session logs failed"
    };
    crate::output::escape_controls(&format!("{whose}: {}", each.join("; "))).into_owned()
}

/// Prints the outcome (answer on stdout, summary on stderr) and picks the exit code.
///
/// A run in which any member's session log failed (`log_failures`, DESIGN decision 11) exits
/// 1 with `JOURNAL_FAILED` naming each of them and its OS error — on the last line, after the
/// summary and the resume hint — whatever the Lead answered: work that could not be recorded
/// was not done durably.
fn report(
    driven: &Driven,
    config: &WorkConfig,
    printer: &mut Printer,
    log_failures: &[LogFailure],
) -> Result<(), Failure> {
    let (last_turn, last_end, answer, stats, model_calls) = driven.agent.with_transcript(|t| {
        (
            t.last_turn(),
            t.last_turn_end().cloned(),
            t.last_answer().map(str::to_owned),
            t.stats(),
            t.model_calls(),
        )
    });
    // A scripted model spends no tokens: its zeros are counts, not missing usage.
    let server = config.spec.provider != ProviderKind::Script;
    let server_answers = if server { model_calls } else { 0 };
    let id = &driven.id;
    let hints = Hints::new(id, config.home_flag.as_deref(), config.team);
    // `continue: troupe resume ID "…"` only when a new instruction can be answered (a script
    // whose Lead steps are used up cannot: that resume would be refused).
    let spent = driven.agent.with_transcript(Transcript::spent_model_calls);
    let can_continue = takes_instruction(&config.models, spent);
    // A Team run also reports every teammate's work, the board and the mail, folded from the
    // logs the runtime has just flushed.
    let team = config.team.then(|| {
        TeamSummary::read(
            &Journal::open_home(&config.home),
            id,
            (stats, server_answers),
            server,
        )
    });
    let team_json = team.as_ref().map(TeamSummary::to_json);
    let checked = config.framing.check.as_ref().map(|check| check());
    let mut summary = vec![format!("{LEAD}: {}", stats_text(&stats, server_answers))];
    if let Some(team) = &team {
        summary.extend(team.lines());
    }
    let print_summary = |printer: &mut Printer, completed: bool| {
        for line in &summary {
            printer.note(line);
        }
        if config.framing.run_hints {
            printer.note(&hints.inspect());
        }
        if let Some(epilogue) = &config.framing.epilogue {
            let ending = Ending {
                id,
                home: &hints.home,
                teammates: teammates_of(team_json.as_ref()),
                completed,
                check: checked.as_ref(),
            };
            for line in epilogue(&ending) {
                printer.note(&line);
            }
        }
    };

    let mut log_failures = log_failures.to_vec();
    if let Some(failure) = driven.agent.failure()
        && log_failures.iter().all(|f| f.session != *id)
    {
        log_failures.insert(
            0,
            LogFailure {
                session: id.clone(),
                name: LEAD.to_owned(),
                error: failure,
            },
        );
    }
    if !log_failures.is_empty() {
        let message = log_failure_message(id, &log_failures);
        printer.done_json(
            id,
            &DoneStatus::Failed {
                code: "JOURNAL_FAILED",
                message: &message,
            },
            None,
            stats,
            team_json.as_ref(),
        );
        print_summary(printer, false);
        // Every log holds everything up to its last flush, so the session stays resumable.
        printer.note(&format!(
            "once the cause is fixed (free space, a writable home), continue with: {}",
            hints.resume()
        ));
        return Err(Failure::work(anyhow!("JOURNAL_FAILED: {message}")));
    }

    let ran = last_turn > driven.turn_before;
    // Any signal means the run was stopped — even when the Lead had already answered and only
    // teammates were still working — so it is reported as interrupted and resumable.
    let completed =
        ran && last_end == Some(TurnEndReason::Completed) && driven.interrupt == Interrupt::None;
    if completed || (driven.nothing_to_do && driven.interrupt == Interrupt::None) {
        // The Lead answered; the run still failed when a teammate's last turn failed (the Lead
        // did not recover it) or the command's own check failed.
        let problem = unrecovered(team.as_ref()).or_else(|| {
            let (code, message) = checked.as_ref()?.failure.as_ref()?;
            Some((*code, message.clone()))
        });
        let status = match &problem {
            Some((code, message)) => DoneStatus::Failed { code, message },
            None => DoneStatus::Completed,
        };
        printer.done_json(id, &status, answer.as_deref(), stats, team_json.as_ref());
        if printer.mode() != OutputMode::Json
            && let Some(answer) = &answer
        {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{answer}");
            let _ = out.flush();
        }
        if driven.nothing_to_do && !ran {
            let quiet = driven.agent.with_transcript(|t| t.next_step().len());
            let waiting = match quiet {
                0 => String::new(),
                1 => "; 1 quiet message waits for the Lead's next turn".to_owned(),
                n => format!("; {n} quiet messages wait for the Lead's next turn"),
            };
            let next = if can_continue {
                "pass a PROMPT to continue the conversation"
            } else {
                "the session's scripted model has no step left for a new instruction"
            };
            if last_turn == 0 {
                printer.note(&format!(
                    "nothing to resume: no turn ever ran and no prompt was recorded (the run \
                     stopped before its prompt was durable){waiting}; pass a PROMPT to start it"
                ));
            } else {
                printer.note(&format!(
                    "nothing to resume: the last turn completed and no messages are waiting to \
                     run{waiting} ({next})"
                ));
            }
        } else if answer.is_none() {
            printer.note("(the Lead finished without a text answer)");
        }
        print_summary(printer, true);
        if let Some((_, message)) = problem {
            printer.note(&format!("troupe: {message}"));
            if config.framing.run_hints && can_continue {
                printer.note(&hints.continue_with());
            }
            return Err(Failure::reported(WORK_FAILED));
        }
        if config.framing.run_hints && can_continue {
            printer.note(&hints.continue_with());
        }
        return Ok(());
    }

    if ran
        && driven.interrupt == Interrupt::None
        && let Some(TurnEndReason::Failed { code, message }) = &last_end
    {
        printer.done_json(
            id,
            &DoneStatus::Failed { code, message },
            None,
            stats,
            team_json.as_ref(),
        );
        print_summary(printer, false);
        printer.note(&format!(
            "troupe: the Lead's turn failed: {message} ({code}); fix it, then continue with: {}",
            hints.resume()
        ));
        return Err(Failure::reported(WORK_FAILED));
    }

    // Ctrl-C, a shutdown, or a turn that never ran: the session is resumable.
    printer.done_json(
        id,
        &DoneStatus::Interrupted,
        None,
        stats,
        team_json.as_ref(),
    );
    print_summary(printer, false);
    printer.note(&format!("interrupted — continue with: {}", hints.resume()));
    Err(Failure::reported(WORK_FAILED))
}

/// The failure of a Team run whose Lead answered: every teammate whose last turn failed (the
/// Lead did not recover it), as `TEAMMATE_FAILED` and one message naming each.
fn unrecovered(team: Option<&TeamSummary>) -> Option<(&'static str, String)> {
    let failed = team?.failed_turns();
    if failed.is_empty() {
        return None;
    }
    let each: Vec<String> = failed
        .iter()
        .map(|(name, code, message)| format!("{name} ({code}: {message})"))
        .collect();
    let whose = if failed.len() == 1 {
        "a teammate's last turn failed and the Lead did not recover it"
    } else {
        "teammates' last turns failed and the Lead did not recover them"
    };
    Some((
        "TEAMMATE_FAILED",
        crate::output::escape_controls(&format!("{whose}: {}", each.join(", "))).into_owned(),
    ))
}

/// (name, session id) of every teammate in a Team summary's JSON, in creation order.
fn teammates_of(team: Option<&Value>) -> Vec<(String, SessionId)> {
    let members = team.and_then(|t| t["members"].as_array());
    members
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "teammate")
        .filter_map(|m| {
            let id = SessionId::new(m["id"].as_str()?).ok()?;
            Some((m["name"].as_str()?.to_owned(), id))
        })
        .collect()
}

/// The exact commands that inspect and continue a session.
struct Hints {
    id: String,
    home: String,
    team: bool,
}

impl Hints {
    fn new(id: &SessionId, home_flag: Option<&Path>, team: bool) -> Self {
        Self {
            id: id.to_string(),
            home: home_arg(home_flag),
            team,
        }
    }

    fn resume(&self) -> String {
        format!("troupe resume {}{}", self.id, self.home)
    }

    fn inspect(&self) -> String {
        let log = format!("inspect:  troupe log {}{}", self.id, self.home);
        if self.team {
            format!(
                "{log}  |  troupe team show {}{}  |  watch: troupe web{}",
                self.id, self.home, self.home
            )
        } else {
            log
        }
    }

    fn continue_with(&self) -> String {
        format!("continue: {} \"<next instruction>\"", self.resume())
    }
}

/// ` --home DIR` (absolute and quoted, so a printed command works from any directory) when the
/// command was given `--home`, else empty.
pub(crate) fn home_arg(home_flag: Option<&Path>) -> String {
    home_flag.map_or_else(String::new, |dir| {
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        format!(" --home {}", shell_quote(&dir.display().to_string()))
    })
}

/// The refusal of a child session where a root is needed (`troupe resume`, `troupe team
/// show/verify`), worded the same everywhere and naming the exact command to run instead:
/// `session X is a teammate of L, not a Team Lead: run troupe resume L`.
pub(crate) fn not_a_root(
    id: &SessionId,
    role: troupe_runtime::SessionRole,
    parent: &SessionId,
    command: &str,
) -> Failure {
    let what = if role == troupe_runtime::SessionRole::Teammate {
        "a teammate of"
    } else {
        "a child session of"
    };
    let not = if role == troupe_runtime::SessionRole::Teammate {
        "a Team Lead"
    } else {
        "a root session"
    };
    Failure::bad_input(anyhow!(
        "session {id} is {what} {parent}, not {not}: run {command}"
    ))
}

/// `2 turns, 5 tool calls, tokens 120 in / 30 out` for a session whose log holds
/// `server_answers` answers of a model server (see [`tokens_text`]).
pub(crate) fn stats_text(stats: &TranscriptStats, server_answers: usize) -> String {
    format!(
        "{}, {}, {}",
        count(stats.turns, "turn"),
        count(stats.tool_calls, "tool call"),
        tokens_text(stats.tokens_in, stats.tokens_out, server_answers as u64)
    )
}

/// `tokens 120 in / 30 out`; `usage not reported by the server` when `server_answers` answers
/// of a model server arrived and not one token was counted (a server that omits `usage`:
/// llama-cpp-python ignores `stream_options`). A prompt is never empty, so a server that
/// reports usage never reports 0 in: zero after an answer means nothing was reported. A server
/// that reports usage for some answers only is counted for those. A scripted model's answers
/// are not server answers: it spends no tokens, and says `tokens 0 in / 0 out`.
pub(crate) fn tokens_text(tokens_in: u64, tokens_out: u64, server_answers: u64) -> String {
    if server_answers > 0 && tokens_in == 0 && tokens_out == 0 {
        "usage not reported by the server".to_owned()
    } else {
        format!("tokens {tokens_in} in / {tokens_out} out")
    }
}

/// `1 turn`, `2 turns`.
pub(crate) fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Quotes `text` for a POSIX shell when it is not made of safe characters only.
pub(crate) fn shell_quote(text: &str) -> String {
    let safe = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:=@%".contains(c));
    if safe {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quote_leaves_plain_paths_alone() {
        assert_eq!(shell_quote("/tmp/home-1"), "/tmp/home-1");
        assert_eq!(shell_quote("/tmp/my home"), "'/tmp/my home'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    fn events(kinds: &[(&str, Value)]) -> Vec<Event> {
        kinds
            .iter()
            .enumerate()
            .map(|(seq, (kind, data))| {
                serde_json::from_value(json!({"seq": seq, "time": 1, "type": kind, "data": data}))
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn an_open_turn_with_its_final_answer_needs_no_continuation() {
        let call = json!({"message": {"content": null, "tool_calls": [{"id": "c1"}]}});
        let text = json!({"message": {"content": "done"}});
        let open_after_call = events(&[
            ("turn/start", json!({"turn": 1})),
            ("assistant/message", call.clone()),
        ]);
        assert!(!answered(&open_after_call));
        let open_after_answer = events(&[
            ("turn/start", json!({"turn": 1})),
            ("assistant/message", call),
            ("tool/result", json!({})),
            ("assistant/message", text.clone()),
        ]);
        assert!(answered(&open_after_answer));
        // An answer of an earlier turn does not count for a new one.
        let new_turn = events(&[
            ("turn/start", json!({"turn": 1})),
            ("assistant/message", text),
            ("turn/end", json!({"turn": 1})),
            ("turn/start", json!({"turn": 2})),
        ]);
        assert!(!answered(&new_turn));
    }

    /// `run RAW…` parsed and validated, in a temporary home; its script is written first.
    fn validated(raw: &[&str], dir: &Path) -> Result<WorkConfig, Failure> {
        #[derive(clap::Parser)]
        struct Args {
            #[command(flatten)]
            run: RunFlags,
        }
        let script = dir.join("s.json");
        std::fs::write(&script, r#"{"agents": {"lead": [{"text": "hi"}]}}"#).unwrap();
        let model = format!("script:{}", script.display());
        let workspace = dir.display().to_string();
        let mut argv = vec!["run", "--workspace", &workspace, "--model", &model];
        argv.extend(raw);
        let flags = <Args as clap::Parser>::try_parse_from(argv).unwrap().run;
        validate_run(
            flags,
            Home {
                dir: dir.join("home"),
                flag: None,
                named: "the test home".to_owned(),
            },
        )
    }

    #[test]
    fn the_pace_reaches_the_scripted_models() {
        let dir = tempfile::tempdir().unwrap();
        let pace_of = |config: &WorkConfig| match config.models.as_ref() {
            ProviderFactory::Scripted(script) => script.pace(),
            ProviderFactory::Http(_) => panic!("a script gives scripted models"),
        };
        let paced = validated(&["--pace", "400", "go"], dir.path())
            .ok()
            .unwrap();
        assert_eq!(pace_of(&paced), Duration::from_millis(400));
        let plain = validated(&["go"], dir.path()).ok().unwrap();
        assert_eq!(pace_of(&plain), Duration::ZERO);
    }

    #[test]
    fn the_continuation_names_why() {
        let text = continuation("it was interrupted").content[0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(text.starts_with("The previous turn did not finish: it was interrupted."));
    }
}
