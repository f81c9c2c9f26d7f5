//! `troupe run` and `troupe resume`: run the Lead until the work is quiescent.
//!
//! Two stages, as in ripgrep: the raw flags ([`RunFlags`], [`ResumeFlags`]) are validated into
//! a [`WorkConfig`] *before anything is written* — the prompt, the model (provider, API key,
//! script file), the workspace (exists, is a directory, is writable) and, for a resume, the
//! session and its recorded configuration. Any problem there is bad input (exit 2, one line).
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
use serde_json::json;
use tokio::signal::unix::{Signal, SignalKind};
use tokio::sync::broadcast;
use troupe_journal::{Journal, JournalError};
use troupe_llm::{ClientOptions, ModelFlags, ModelSpec, ProviderFactory, ProviderKind};
use troupe_protocol::{MessageSource, SessionId, UserMessage};
use troupe_runtime::events::{Profile, TurnEndReason};
use troupe_runtime::{
    Agent, AgentProgress, ChunkPolicy, Runtime, RuntimeError, RuntimeOptions, Transcript,
};
use troupe_tools::ToolLimits;

use crate::exit::{Failure, WORK_FAILED};
use crate::progress::{DoneStatus, OutputMode, Printer};

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

/// `--model`, `--base-url`, `--api-key-env` as typed.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ModelArgs {
    /// The model: NAME (deepseek-…, gpt-…), PROVIDER:NAME (deepseek, openai, compatible) or
    /// script:FILE (offline scripted model). Default: deepseek:deepseek-chat.
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
}

impl ModelArgs {
    fn flags(&self) -> ModelFlags {
        ModelFlags {
            model: self.model.clone(),
            base_url: self.base_url.clone(),
            api_key_env: self.api_key_env.clone(),
        }
    }
}

/// `troupe run` as typed.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RunFlags {
    /// The directory the agents work in (default: the current directory).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    #[command(flatten)]
    model: ModelArgs,
    /// Print progress as JSON lines on stdout, ending with a `done` line holding the answer.
    #[arg(long)]
    json: bool,
    /// What the Lead should do (several words are joined by spaces).
    #[arg(value_name = "PROMPT", required = true, num_args = 1..)]
    prompt: Vec<String>,
}

/// `troupe resume` as typed.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ResumeFlags {
    /// The session to resume (see `troupe sessions`).
    session: String,
    #[command(flatten)]
    model: ModelArgs,
    /// Print progress as JSON lines on stdout, ending with a `done` line holding the answer.
    #[arg(long)]
    json: bool,
    /// A new instruction for the Lead. Without it, an interrupted turn is continued and waiting
    /// messages are run; if there is nothing to do, the last answer is printed.
    #[arg(value_name = "PROMPT", num_args = 0..)]
    prompt: Vec<String>,
}

/// Where the command's sessions live, as resolved and as the user typed it (for hints).
pub(crate) struct Home<'a> {
    pub(crate) dir: PathBuf,
    pub(crate) flag: Option<&'a Path>,
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
    start: Start,
}

enum Start {
    New {
        prompt: String,
    },
    Resume {
        id: SessionId,
        prompt: Option<String>,
    },
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
    let prompt = words.join(" ");
    if prompt.trim().is_empty() {
        return Err(Failure::bad_input(anyhow!(
            "the prompt is empty: say what the agent should do"
        )));
    }
    Ok(prompt)
}

fn validate_run(flags: RunFlags, home: Home<'_>) -> Result<WorkConfig, Failure> {
    let prompt = validate_prompt(&flags.prompt)?;
    let spec = absolute_script(ModelSpec::from_flags(&flags.model.flags())?)?;
    let models = provider_factory(&spec)?;
    let workspace = match flags.workspace {
        Some(dir) => dir,
        None => std::env::current_dir()
            .map_err(|e| Failure::bad_input(anyhow!("cannot read the current directory: {e}")))?,
    };
    let workspace = check_workspace(&workspace)?;
    Ok(WorkConfig {
        home: home.dir,
        home_flag: home.flag.map(Path::to_path_buf),
        workspace,
        spec,
        models,
        mode: output_mode(flags.json),
        start: Start::New { prompt },
    })
}

fn validate_resume(flags: ResumeFlags, home: Home<'_>) -> Result<WorkConfig, Failure> {
    let id = SessionId::new(flags.session.as_str()).map_err(Failure::bad_input)?;
    let prompt = if flags.prompt.is_empty() {
        None
    } else {
        Some(validate_prompt(&flags.prompt)?)
    };
    // Read-only: nothing is locked or written until the flags are known to be usable.
    let replay = Journal::open_home(&home.dir).read(&id)?;
    if replay.header.origin.as_deref() == Some("subagent") {
        let parent = replay
            .header
            .parent_session
            .as_ref()
            .map_or_else(|| "its parent".to_owned(), SessionId::to_string);
        return Err(Failure::bad_input(anyhow!(
            "session {id} is a subagent child of {parent}: resume the root session instead"
        )));
    }
    let transcript = Transcript::fold(replay.header.seed_len(), &replay.events)?;
    let recorded = transcript.config().cloned().ok_or_else(|| {
        Failure::bad_input(anyhow!(
            "session {id} cannot be resumed: it has no agent configuration (not created by troupe run)"
        ))
    })?;
    let spec = absolute_script(recorded.model.with_overrides(&flags.model.flags())?)?;
    let models = provider_factory(&spec)?;
    let workspace = check_workspace(Path::new(&recorded.workspace))?;
    Ok(WorkConfig {
        home: home.dir,
        home_flag: home.flag.map(Path::to_path_buf),
        workspace,
        spec,
        models,
        mode: output_mode(flags.json),
        start: Start::Resume { id, prompt },
    })
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

/// Reads the API key and builds the client, or loads and checks the script.
fn provider_factory(spec: &ModelSpec) -> Result<Arc<ProviderFactory>, Failure> {
    let config = spec.resolve(&|var| std::env::var(var).ok())?;
    let factory = ProviderFactory::new(config, ClientOptions::default())?;
    // A script without steps for the Lead is refused now rather than after creating a session.
    factory.for_agent(LEAD)?;
    Ok(Arc::new(factory))
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
    let mut sigint = tokio::signal::unix::signal(SignalKind::interrupt())
        .context("installing the Ctrl-C handler")
        .map_err(Failure::work)?;
    let runtime = Runtime::new(
        Journal::open_home(&config.home),
        RuntimeOptions {
            workspace: config.workspace.clone(),
            models: Arc::clone(&config.models) as _,
            model_spec: config.spec.clone(),
            chunks: ChunkPolicy::default(),
            tool_limits: ToolLimits::default(),
            max_depth: 1,
            extra_tools: Vec::new(),
        },
    );
    let mut printer = Printer::new(config.mode);
    let mut events = runtime.subscribe_progress();
    let driven = drive(&runtime, &config, &mut printer, &mut events, &mut sigint).await;
    // Always: park inboxes, end running turns, flush every log.
    let shutdown = tokio::time::timeout(SHUTDOWN_LIMIT, runtime.shutdown()).await;
    while let Ok(event) = events.try_recv() {
        printer.progress(&event);
    }
    printer.clear_live();
    let driven = driven?;
    match shutdown {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            return Err(Failure::work(
                anyhow::Error::new(e).context("shutting the agents down"),
            ));
        }
        Err(_) => {
            return Err(Failure::work(anyhow!(
                "shutting the agents down took longer than {}s; the session log is still \
                 consistent: continue with troupe resume {}",
                SHUTDOWN_LIMIT.as_secs(),
                driven.id
            )));
        }
    }
    report(&driven, &config, &mut printer)
}

async fn drive(
    runtime: &Runtime,
    config: &WorkConfig,
    printer: &mut Printer,
    events: &mut broadcast::Receiver<AgentProgress>,
    sigint: &mut Signal,
) -> Result<Driven, Failure> {
    let model = config.spec.to_string();
    let (agent, id, turn_before, nothing_to_do) = match &config.start {
        Start::New { prompt } => {
            let id = SessionId::random();
            let agent = runtime
                .create_root(id.clone(), LEAD, Profile::Default)
                .await?;
            printer.session_started(&id, false, &model);
            let turn_before = agent.with_transcript(Transcript::last_turn);
            agent
                .followup(UserMessage::text(
                    prompt.clone(),
                    MessageSource::kind("user"),
                ))
                .await?;
            (agent, id, turn_before, false)
        }
        Start::Resume { id, prompt } => {
            let (agent, recovered) = runtime
                .resume_root(id)
                .await
                .map_err(|e| resume_error(id, e))?;
            printer.session_started(id, true, &model);
            if recovered {
                printer.note(
                    "recovered: the previous run stopped in the middle of a turn; it was closed \
                     as interrupted (see troupe log)",
                );
            }
            let (turn_before, last_end, pending) = agent.with_transcript(|t| {
                (
                    t.last_turn(),
                    t.last_turn_end().cloned(),
                    !t.next_turn().is_empty() || !t.next_step().is_empty(),
                )
            });
            let unfinished = match (&last_end, recovered) {
                (_, true) | (Some(TurnEndReason::Interrupted), _) => {
                    Some("the process running it stopped".to_owned())
                }
                (Some(TurnEndReason::Aborted { .. }), _) => Some("it was interrupted".to_owned()),
                (Some(TurnEndReason::Failed { code, message }), _) => {
                    Some(format!("it failed ({code}: {message})"))
                }
                _ => None,
            };
            let nothing_to_do = if let Some(prompt) = prompt {
                let msg = UserMessage::text(prompt.clone(), MessageSource::kind("user"));
                agent.followup(msg).await?;
                false
            } else if let Some(why) = unfinished {
                let text = CONTINUATION.replace("{why}", &why);
                let msg = UserMessage::text(
                    text,
                    MessageSource::kind("resume").with("reason", why.clone()),
                );
                printer.note(&format!("continuing: the last turn did not finish ({why})"));
                agent.followup(msg).await?;
                false
            } else if pending {
                printer.note("running the messages that were waiting in the inbox");
                !agent.wake_parked()
            } else {
                true
            };
            (agent, id.clone(), turn_before, nothing_to_do)
        }
    };
    let interrupt = if nothing_to_do {
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

/// A lock held by another process is bad input with its own words.
fn resume_error(id: &SessionId, error: RuntimeError) -> Failure {
    match error {
        RuntimeError::Journal(JournalError::Locked { .. }) => Failure::bad_input(anyhow!(
            "session is locked by another process: a troupe run or troupe resume of {id} is \
             still running"
        )),
        other => other.into(),
    }
}

/// Shows progress until the Lead is idle and every child settled; handles Ctrl-C.
async fn wait(
    runtime: &Runtime,
    agent: &Agent,
    printer: &mut Printer,
    events: &mut broadcast::Receiver<AgentProgress>,
    sigint: &mut Signal,
) -> Interrupt {
    let quiescent = runtime.wait_quiescent(agent);
    tokio::pin!(quiescent);
    let mut ticker = tokio::time::interval(Duration::from_millis(250));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let live_line = printer.mode() == OutputMode::Tty;
    let mut interrupt = Interrupt::None;
    let mut grace: Option<Pin<Box<tokio::time::Sleep>>> = None;
    let mut events_open = true;
    loop {
        tokio::select! {
            biased;
            received = events.recv(), if events_open => match received {
                Ok(event) => printer.progress(&event),
                Err(broadcast::error::RecvError::Lagged(skipped)) => printer.lagged(skipped),
                Err(broadcast::error::RecvError::Closed) => events_open = false,
            },
            () = &mut quiescent => break,
            _ = sigint.recv() => {
                if interrupt != Interrupt::None {
                    printer.note("interrupted again: not waiting for the turn to close");
                    interrupt = Interrupt::Forced;
                    break;
                }
                interrupt = Interrupt::Graceful;
                printer.note("interrupting: stopping the current turn (Ctrl-C again to stop waiting)");
                // Keep the inbox: anything queued stays parked for `troupe resume`.
                if let Err(e) = agent.cancel(json!({"kind": "user"}), true).await {
                    printer.note(&format!("troupe: cancelling the turn failed: {e}"));
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
            _ = ticker.tick(), if live_line => printer.redraw(),
        }
    }
    interrupt
}

/// Prints the outcome (answer on stdout, summary on stderr) and picks the exit code.
fn report(driven: &Driven, config: &WorkConfig, printer: &mut Printer) -> Result<(), Failure> {
    let (last_turn, last_end, answer, stats, pending) = driven.agent.with_transcript(|t| {
        (
            t.last_turn(),
            t.last_turn_end().cloned(),
            t.last_answer().map(str::to_owned),
            t.stats(),
            !t.next_turn().is_empty() || !t.next_step().is_empty(),
        )
    });
    let id = &driven.id;
    let hints = Hints::new(id, config.home_flag.as_deref());
    let summary = format!(
        "{LEAD}: {}, {}, tokens {} in / {} out",
        count(stats.turns, "turn"),
        count(stats.tool_calls, "tool call"),
        stats.tokens_in,
        stats.tokens_out
    );

    if let Some(failure) = driven.agent.failure() {
        let message = format!("the session log failed: {failure}");
        printer.done_json(
            id,
            &DoneStatus::Failed {
                code: "JOURNAL_FAILED",
                message: &message,
            },
            None,
            stats,
        );
        printer.note(&summary);
        printer.note(&hints.inspect());
        return Err(Failure::work(anyhow!(message)));
    }

    let ran = last_turn > driven.turn_before;
    let completed = ran
        && last_end == Some(TurnEndReason::Completed)
        && !(driven.interrupt != Interrupt::None && pending);
    if completed || driven.nothing_to_do {
        printer.done_json(id, &DoneStatus::Completed, answer.as_deref(), stats);
        if printer.mode() != OutputMode::Json
            && let Some(answer) = &answer
        {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{answer}");
            let _ = out.flush();
        }
        if driven.nothing_to_do {
            printer.note(
                "nothing to resume: the last turn completed and no messages are waiting \
                 (pass a PROMPT to continue the conversation)",
            );
        } else if answer.is_none() {
            printer.note("(the Lead finished without a text answer)");
        }
        printer.note(&summary);
        printer.note(&hints.inspect());
        printer.note(&hints.continue_with());
        return Ok(());
    }

    if ran
        && driven.interrupt == Interrupt::None
        && let Some(TurnEndReason::Failed { code, message }) = &last_end
    {
        printer.done_json(id, &DoneStatus::Failed { code, message }, None, stats);
        printer.note(&summary);
        printer.note(&hints.inspect());
        printer.note(&format!(
            "troupe: the Lead's turn failed: {message} ({code}); fix it, then continue with: {}",
            hints.resume()
        ));
        return Err(Failure::reported(WORK_FAILED));
    }

    // Ctrl-C, a shutdown, or a turn that never ran: the session is resumable.
    printer.done_json(id, &DoneStatus::Interrupted, None, stats);
    printer.note(&summary);
    printer.note(&hints.inspect());
    printer.note(&format!("interrupted — continue with: {}", hints.resume()));
    Err(Failure::reported(WORK_FAILED))
}

/// The exact commands that inspect and continue a session.
struct Hints {
    id: String,
    home: String,
}

impl Hints {
    fn new(id: &SessionId, home_flag: Option<&Path>) -> Self {
        Self {
            id: id.to_string(),
            home: home_flag.map_or_else(String::new, |dir| {
                format!(" --home {}", shell_quote(&dir.display().to_string()))
            }),
        }
    }

    fn resume(&self) -> String {
        format!("troupe resume {}{}", self.id, self.home)
    }

    fn inspect(&self) -> String {
        format!("inspect:  troupe log {}{}", self.id, self.home)
    }

    fn continue_with(&self) -> String {
        format!("continue: {} \"<next instruction>\"", self.resume())
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
fn shell_quote(text: &str) -> String {
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

    #[test]
    fn the_continuation_names_why() {
        let text = CONTINUATION.replace("{why}", "it was interrupted");
        assert!(text.starts_with("The previous turn did not finish: it was interrupted."));
    }
}
