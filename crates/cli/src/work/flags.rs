//! The flags of `troupe run` and `troupe resume` as typed (clap), each group with what it
//! turns into: `--pace` into the wait before each scripted reply, `--model`/`--base-url`/
//! `--api-key-env`/`--tool-choice` into [`ModelFlags`] (and `--teammate-model`),
//! `--sandbox`/`--network` into a [`SandboxPolicy`], the Team limit flags into [`TeamLimits`],
//! `--no-project-instructions`; for a new session they are merged over the configuration files
//! by [`crate::settings`] ([`settings_flags`]). Checking them against each other and the world
//! is [`super::config`]'s.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::anyhow;
use serde_json::json;
use troupe_llm::{ModelFlags, ModelSpec, ProviderKind, ToolChoice};
use troupe_session::approval::{ApprovalMode, ApprovalPolicy};
use troupe_team::{TeamError, TeamLimits};
use troupe_tools::{NetworkAccess, SandboxMode, SandboxPolicy};

use crate::exit::Failure;
use crate::settings::FlagValues;

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
    pub(super) pace: Option<u64>,
}

/// `--pace MS`: a whole number from 0 to [`MAX_PACE_MS`].
fn pace_ms(raw: &str) -> Result<u64, String> {
    crate::args::whole_number_at_most(raw, MAX_PACE_MS, &format!("is not in 0..={MAX_PACE_MS}"))
}

impl PaceArgs {
    /// `--pace` as given, in milliseconds (`troupe worker` applies it to its scripted
    /// teammates only).
    pub(crate) fn millis(&self) -> Option<u64> {
        self.pace
    }

    /// The wait before each model reply for a run of `spec`: `--pace` applies to a scripted
    /// model only (bad input otherwise: a real model is as fast as it is).
    pub(super) fn for_model(&self, spec: &ModelSpec) -> Result<Duration, Failure> {
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
    pub(super) sandbox: Option<SandboxMode>,
    /// Whether bash commands may open TCP connections or listen: on (default for a new
    /// session) or off (Landlock network rules). Recorded like --sandbox; `resume` accepts off
    /// for a session recorded with on, never the reverse.
    #[arg(long, value_name = "on|off", value_parser = network_access)]
    pub(super) network: Option<NetworkAccess>,
    /// MCP servers whose tools every member gets (as mcp__<server>__<tool>): a TOML file of
    /// [mcp_servers.<name>] tables (command, args, env — or url —, enabled_tools). Programs run
    /// under the sandbox. Replaces the configuration files' servers. Recorded in the session;
    /// `resume` starts the recorded ones unless given.
    #[arg(long, value_name = "FILE")]
    pub(crate) mcp_config: Option<PathBuf>,
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
    pub(super) fn for_resume(&self, recorded: SandboxPolicy) -> Result<SandboxPolicy, Failure> {
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

/// `--approval MODE`, `--approval-timeout DURATION` as typed (`run`, `resume`, `config`). For a
/// new session they win over the configuration files' `approval` and `approval_timeout`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ApprovalArgs {
    /// Whether a member may ask you to run one bash command outside the sandbox: never
    /// (default for a new session: escalate is refused) or on-request (bash takes escalate:
    /// true with a justification; you are asked at this terminal when it is one, with troupe
    /// approve, troupe chat's /approve or in troupe web, and the member waits for the answer).
    /// Config key: approval. Recorded in the session; resume keeps it unless given.
    #[arg(long, value_name = "MODE", value_parser = approval_mode)]
    pub(super) approval: Option<ApprovalMode>,
    /// How long a request waits for an answer before it is denied, e.g. 10m (the default),
    /// 90s, 1h (at most 24h). Config key: approval_timeout. Recorded like --approval.
    #[arg(long, value_name = "DURATION", value_parser = crate::settings::approval_timeout)]
    pub(super) approval_timeout: Option<Duration>,
}

fn approval_mode(raw: &str) -> Result<ApprovalMode, String> {
    ApprovalMode::parse(raw).map_err(|e| e.to_string())
}

impl ApprovalArgs {
    /// The approvals of a session that recorded `recorded` (a new one: the defaults) with the
    /// given flags.
    pub(super) fn over(&self, recorded: ApprovalPolicy) -> ApprovalPolicy {
        ApprovalPolicy {
            mode: self.approval.unwrap_or(recorded.mode),
            timeout_ms: self
                .approval_timeout
                .map_or(recorded.timeout_ms, |t| t.as_millis() as u64),
        }
    }
}

/// `--model`, `--base-url`, `--api-key-env`, `--tool-choice` as typed.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ModelArgs {
    /// The model: NAME (deepseek-…, gpt-…), PROVIDER:NAME (deepseek, openai, compatible) or
    /// script:FILE (offline scripted model). `run` defaults to deepseek:deepseek-chat; `resume`
    /// defaults to the model recorded in the session (an override is recorded too).
    #[arg(long, value_name = "M")]
    pub(super) model: Option<String>,
    /// Base URL of an OpenAI-compatible server (Ollama, vLLM, llama.cpp, LM Studio), e.g.
    /// http://127.0.0.1:11434/v1.
    #[arg(long, value_name = "URL")]
    pub(super) base_url: Option<String>,
    /// The environment variable holding the API key (default: DEEPSEEK_API_KEY / OPENAI_API_KEY
    /// for those providers, none for --base-url).
    #[arg(long, value_name = "VAR")]
    pub(super) api_key_env: Option<String>,
    /// The tool_choice sent with requests that offer tools: auto, required, none, or omit
    /// (send none: the default). llama-cpp-python needs auto to offer the tools at all.
    /// Recorded with the model: resume keeps it.
    #[arg(long, value_name = "C", value_parser = tool_choice)]
    pub(super) tool_choice: Option<ToolChoice>,
    /// Team only: the model of the teammates the Lead creates (default: the Lead's), written
    /// as for --model. On the Lead's provider it uses the Lead's --base-url and --api-key-env;
    /// deepseek: and openai: models use their own. Recorded in each teammate's configuration
    /// and kept across resumes; on `resume`, it applies to teammates created from then on.
    #[arg(long, value_name = "M")]
    pub(super) teammate_model: Option<String>,
}

/// `--tool-choice C`: one of auto, required, none, omit.
fn tool_choice(raw: &str) -> Result<ToolChoice, String> {
    raw.parse()
        .map_err(|_| "it is not one of auto, required, none, omit".to_owned())
}

impl ModelArgs {
    pub(super) fn flags(&self) -> ModelFlags {
        ModelFlags {
            model: self.model.clone(),
            base_url: self.base_url.clone(),
            api_key_env: self.api_key_env.clone(),
            tool_choice: self.tool_choice,
        }
    }
}

/// `--budget-tokens N`, `--budget-usd X` as typed (`run --team`, `resume`, `demo`): the Team's
/// budget (see `troupe_session::ledger`). Not recorded in the session: a resume takes the
/// flags again (or the configuration's `[team] budget_tokens` / `budget_usd`).
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct BudgetArgs {
    /// Team only: the most tokens (prompt + completion, every member's model calls together)
    /// the Team may spend. At 80 % the Lead gets one notice; at 100 % new model calls are
    /// refused (TEAM_BUDGET_EXCEEDED) and the run stops, resumable with a higher budget.
    /// Config key: [team] budget_tokens.
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = crate::settings::budget_tokens)]
    pub(crate) budget_tokens: Option<u64>,
    /// Team only: the most US dollars the Team may spend, at the models' prices (built in for
    /// the DeepSeek and OpenAI models the README names, or [prices] in the configuration);
    /// usage of a model without a price counts nothing. As --budget-tokens otherwise.
    /// Config key: [team] budget_usd.
    #[arg(long, value_name = "X", allow_negative_numbers = true,
          value_parser = crate::settings::budget_usd)]
    pub(crate) budget_usd: Option<f64>,
}

impl BudgetArgs {
    /// The first budget flag given, if any.
    pub(crate) fn first_given(&self) -> Option<&'static str> {
        if self.budget_tokens.is_some() {
            Some("--budget-tokens")
        } else if self.budget_usd.is_some() {
            Some("--budget-usd")
        } else {
            None
        }
    }
}

/// `--worktree` as typed (`run --team`, `demo`).
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct WorktreeArgs {
    /// Team only: each teammate works in its own git worktree, on its own branch
    /// troupe/<team-id-prefix>/<name> from the Lead's HEAD (under <home>/worktrees/); the Lead
    /// keeps the checkout. Bring the work in with `troupe team merge`. The workspace must be
    /// in a git repository with a commit and no staged changes (`demo --worktree` makes its
    /// project one). Recorded in the session. Config key: [team] worktree.
    #[arg(long)]
    pub(crate) worktree: bool,
}

/// `--no-project-instructions` as typed (`run`, `config`).
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct InstructionArgs {
    /// Do not read AGENTS.md files: no project instructions in the members' prompts (by
    /// default, $TROUPE_HOME/AGENTS.md and each AGENTS.md from the repository's top level down
    /// to the workspace are recorded when the session starts and put in every member's system
    /// prompt, 32 KiB at most).
    #[arg(long)]
    pub(super) no_project_instructions: bool,
}

/// The settings flags of a command, as [`crate::settings`] merges them over the
/// configuration files. `--mcp-config FILE` is read and checked here: an unreadable or
/// invalid file is bad input (exit 2, one line naming file:line:column).
pub(crate) fn settings_flags(
    model: &ModelArgs,
    sandbox: &SandboxArgs,
    limits: &TeamLimitArgs,
    instructions: &InstructionArgs,
    approval: &ApprovalArgs,
    budget: &BudgetArgs,
    worktree: &WorktreeArgs,
) -> Result<FlagValues, Failure> {
    let mcp_config = match &sandbox.mcp_config {
        Some(path) => crate::mcp::for_new(Some(path))?.map(|servers| (path.clone(), servers)),
        None => None,
    };
    Ok(FlagValues {
        model: model.flags(),
        teammate_model: model.teammate_model.clone(),
        sandbox: sandbox.sandbox,
        network: sandbox.network,
        limits: limits
            .entries()
            .into_iter()
            .zip(crate::settings::LIMIT_KEYS)
            .filter_map(|((_, _, value), (key, _, _))| value.map(|v| (key, v)))
            .collect(),
        no_project_instructions: instructions.no_project_instructions,
        mcp_config,
        approval: approval.approval,
        approval_timeout: approval.approval_timeout,
        budget_tokens: budget.budget_tokens,
        budget_usd: budget.budget_usd,
        worktree: worktree.worktree,
        stall_after: None,
    })
}

/// `--stall-after DURATION` as typed (`run`, `resume`, `demo`, `team show`, `web`): a view
/// policy, never recorded, so it wins over the files' `stall_after` for every command.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct StallArgs {
    /// Team only: show a task in progress as stalled when its owner has logged nothing (no
    /// model call, no tool) for DURATION: 10m (default), 90s, 1h (1s to 30days). An owner that
    /// is inactive (or failed) with no followup_task waiting for it is stalled at once.
    /// Nothing is released automatically. Config key: stall_after.
    #[arg(long, value_name = "DURATION", value_parser = crate::settings::stall_after)]
    pub(crate) stall_after: Option<Duration>,
}

/// The Team limit flags (REFERENCE c.15) as typed. Each is a positive integer up to 2^53-1;
/// an absent flag keeps the default. They apply to Team sessions only, and they are not
/// recorded in the session: give them again to `troupe resume`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct TeamLimitArgs {
    /// Team only: most teammates the Lead may ever create, failed ones included (default 8).
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = crate::args::whole_number)]
    pub(super) max_members: Option<u64>,
    /// Team only: most tasks on the board that are not deleted (default 256).
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = crate::args::whole_number)]
    pub(super) max_tasks: Option<u64>,
    /// Team only: most undelivered messages waiting for one member (default 64).
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = crate::args::whole_number)]
    pub(super) max_pending_messages: Option<u64>,
    /// Team only: largest message, in UTF-8 bytes of its JSON content (default 65536).
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = crate::args::whole_number)]
    pub(super) max_message_bytes: Option<u64>,
    /// Team only: how long each step of shutting a teammate down may take, in ms (default 5000).
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = crate::args::whole_number)]
    pub(super) disposal_timeout_ms: Option<u64>,
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
    pub(super) fn first_given(&self) -> Option<&'static str> {
        self.entries()
            .into_iter()
            .find_map(|(flag, _, value)| value.map(|_| flag))
    }

    /// The limits in force: the defaults with every given flag applied, each checked by
    /// [`TeamLimits`] (`0` or more than 2^53-1 is refused as bad input naming the flag).
    pub(super) fn limits(&self) -> Result<TeamLimits, Failure> {
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

/// Where a Team's teammates run (`--placement`, DESIGN §7 "Workers and placement").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Placement {
    /// In this process (the default).
    #[default]
    Local,
    /// On live `troupe worker`s of the store.
    Workers,
}

impl From<Placement> for troupe_session::events::Placement {
    fn from(placement: Placement) -> Self {
        match placement {
            Placement::Local => Self::Local,
            Placement::Workers => Self::Workers,
        }
    }
}

impl From<troupe_session::events::Placement> for Placement {
    fn from(placement: troupe_session::events::Placement) -> Self {
        match placement {
            troupe_session::events::Placement::Local => Self::Local,
            troupe_session::events::Placement::Workers => Self::Workers,
        }
    }
}

/// `--placement`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct PlacementArgs {
    /// Where woken teammates run: `local` (this process) or `workers` (a live troupe worker
    /// of the NATS store whose workspace matches and that has a free slot; a worker that is
    /// not eligible is skipped with the reason, and with none the teammate runs here, with a
    /// warning). `workers` needs --store nats://… Default: local for a new run; on resume,
    /// what the run chose (recorded in the session).
    #[arg(long, value_enum, value_name = "WHERE")]
    pub(crate) placement: Option<Placement>,
}

/// `troupe run` as typed.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RunFlags {
    /// Run the Lead with the Team profile: it can create teammates, message them and share a
    /// task board (the ten Team tools and the Team policy replace subagent/subagent_fork).
    #[arg(long)]
    pub(super) team: bool,
    #[command(flatten)]
    pub(super) limits: TeamLimitArgs,
    #[command(flatten)]
    pub(super) budget: BudgetArgs,
    #[command(flatten)]
    pub(super) worktree: WorktreeArgs,
    #[command(flatten)]
    pub(super) stall: StallArgs,
    #[command(flatten)]
    pub(super) placement: PlacementArgs,
    /// The directory the agents work in (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub(super) workspace: Option<PathBuf>,
    #[command(flatten)]
    pub(super) model: ModelArgs,
    #[command(flatten)]
    pub(super) pace: PaceArgs,
    #[command(flatten)]
    pub(super) sandbox: SandboxArgs,
    #[command(flatten)]
    pub(super) approval: ApprovalArgs,
    #[command(flatten)]
    pub(super) instructions: InstructionArgs,
    /// Print progress as JSON lines on stdout, ending with a `done` line holding the answer.
    #[arg(long)]
    pub(super) json: bool,
    /// What the Lead should do (several words are joined by spaces). `-`, or no PROMPT while
    /// stdin is not a terminal, reads it from stdin (to its end).
    #[arg(value_name = "PROMPT", num_args = 0..)]
    pub(super) prompt: Vec<String>,
}

/// `troupe resume` as typed.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ResumeFlags {
    /// The session to resume: its id, or a unique prefix of it (see `troupe sessions`).
    pub(super) session: String,
    #[command(flatten)]
    pub(super) model: ModelArgs,
    #[command(flatten)]
    pub(super) pace: PaceArgs,
    #[command(flatten)]
    pub(super) limits: TeamLimitArgs,
    #[command(flatten)]
    pub(super) budget: BudgetArgs,
    #[command(flatten)]
    pub(super) stall: StallArgs,
    #[command(flatten)]
    pub(super) placement: PlacementArgs,
    #[command(flatten)]
    pub(super) sandbox: SandboxArgs,
    #[command(flatten)]
    pub(super) approval: ApprovalArgs,
    /// Print progress as JSON lines on stdout, ending with a `done` line holding the answer.
    #[arg(long)]
    pub(super) json: bool,
    /// Set by `troupe worker --adopt` on the resume it runs (hidden): the worker's pid. This
    /// process dies with the worker (Linux: `PR_SET_PDEATHSIG`), and ends at once (exit 0,
    /// a note) when the Lead no longer needs adopting — its last turn was not cut by a stop,
    /// because another process took it over and finished it.
    #[arg(long, value_name = "PID", hide = true)]
    pub(super) adopted_by: Option<u32>,
    /// A new instruction for the Lead (`-` reads it from stdin). Without it, an interrupted
    /// turn is continued and waiting messages are run; if there is nothing to do, the last
    /// answer is printed (stdin is not read).
    #[arg(value_name = "PROMPT", num_args = 0..)]
    pub(super) prompt: Vec<String>,
}
