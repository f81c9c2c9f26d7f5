//! `troupe run` and `troupe resume` validated into a [`WorkConfig`] *before anything is
//! written*, in the order a user fixes things: the command line itself (the prompt, limit
//! flags; for a resume, the session and its recorded configuration), the workspace (exists, is
//! a directory, is writable), the model (provider, API key, script file, `--pace`), the home.
//! The first problem is bad input (exit 2, one line).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::anyhow;
use troupe_llm::{ModelSpec, ModelSpecExt, ProviderKind};
use troupe_mcp::McpServers;
use troupe_protocol::SessionId;
use troupe_runtime::instructions::{changes, discover};
use troupe_runtime::{ResumePlan, StoredSession, takes_instruction};
use troupe_session::approval::ApprovalPolicy;
use troupe_session::events::TeammateModels;
use troupe_session::instructions::ProjectInstructions;
use troupe_session::ledger::{Budget, Prices, price_key};
use troupe_team::{StallAfter, TeamLimits};
use troupe_tools::SandboxPolicy;

use super::flags::{PaceArgs, ResumeFlags, RunFlags, settings_flags};
use super::model::{LEAD, ModelSet, ModelSetup, absolute_script, model_set};
use crate::args::resolve_session;
use crate::exit::Failure;
use crate::framing::Framing;
use crate::hints::not_a_root;
use crate::home::Home;
use crate::progress::OutputMode;
use crate::settings::Settings;

/// Gives the framing of a resumed session: from the home, its scripted model's file (if it
/// runs a script) and its workspace.
pub(crate) type ResumedFraming = fn(&Path, Option<&Path>, &Path) -> Framing;

/// A validated `run` or `resume`: everything the work needs.
pub(super) struct WorkConfig {
    /// ` --home DIR --store URL` as given, repeated in the hints printed at the end.
    pub(super) home_args: String,
    /// The store of the sessions.
    pub(super) store: crate::store::Store,
    /// The Troupe home (its `run/` directory holds the control socket of a running Team).
    pub(super) home_dir: PathBuf,
    /// Canonical, existing, writable directory.
    pub(super) workspace: PathBuf,
    /// The model in effect (recorded in new agents' configs; never holds a key).
    pub(super) spec: ModelSpec,
    /// A provider for the Lead's model and every teammate model of the session.
    pub(super) models: Arc<ModelSet>,
    /// The teammate models of a new Team root (recorded in its configuration).
    pub(super) teammate_models: TeammateModels,
    /// A resume's `--teammate-model`: the recorded teammate models with a new default, to
    /// be recorded as the session's (`None`: the recorded ones stay).
    pub(super) teammate_override: Option<TeammateModels>,
    /// The `AGENTS.md` instructions of a new session (recorded in its configuration).
    pub(super) project_instructions: Option<ProjectInstructions>,
    pub(super) mode: OutputMode,
    /// Whether the Lead runs with the Team profile (`--team`, or as recorded for a resume).
    pub(super) team: bool,
    /// The Team limits in force (Team sessions only).
    pub(super) team_limits: TeamLimits,
    /// The Team's budget (`--budget-tokens`, `--budget-usd`, `[team] budget_*`; Team only).
    pub(super) budget: Budget,
    /// The prices the ledger uses (built in, with `[prices]` over them).
    pub(super) prices: Prices,
    /// `--worktree`: a new Team root's worktree root (recorded in its configuration).
    pub(super) worktree_root: Option<PathBuf>,
    /// The stall threshold of the board's reads (`--stall-after`, `stall_after`).
    pub(super) stall_after: StallAfter,
    /// `--placement`.
    pub(super) placement: super::flags::Placement,
    /// Environment variables that hold API keys: removed from every `bash` tool process.
    pub(super) secret_env: Vec<String>,
    /// The sandbox of every `bash` and MCP server (checked against this kernel).
    pub(super) sandbox: SandboxPolicy,
    /// The MCP servers to start (`--mcp-config`, or as recorded for a resume).
    pub(super) mcp: Option<McpServers>,
    /// The approvals (`--approval`, `--approval-timeout`, or as recorded for a resume).
    pub(super) approval: ApprovalPolicy,
    /// API key values: redacted (`***`) from everything recorded or shown.
    pub(super) secrets: Vec<String>,
    pub(super) start: Start,
    /// What the command adds around the run's own output (`troupe demo`).
    pub(super) framing: Framing,
}

/// How the Lead starts: a new session with its prompt, or a resume of a stored one.
pub(super) enum Start {
    /// `troupe run`, `troupe demo`.
    New {
        /// The new Lead's id (minted here, so its temp dir is known before it starts).
        id: SessionId,
        /// The first prompt (recorded with the session's configuration).
        prompt: String,
    },
    /// `troupe resume`.
    Resume {
        /// The session.
        id: SessionId,
        /// A new instruction, if given.
        prompt: Option<String>,
        /// What the resume will do, read before anything was locked or written.
        plan: Box<ResumePlan>,
    },
}

impl Start {
    /// The Lead's temporary directory (what its config records): the MCP servers' too.
    pub(super) fn lead_temp_dir(&self) -> PathBuf {
        let (Start::New { id, .. } | Start::Resume { id, .. }) = self;
        troupe_tools::session_temp_dir(id)
    }
}

/// `troupe run`'s flags checked into a [`WorkConfig`] (see the module docs for the order).
pub(super) fn validate_run(flags: RunFlags, home: Home<'_>) -> Result<WorkConfig, Failure> {
    // The command line itself first, then what the user points at, in the order they would
    // fix it: the workspace, then the configuration files, then the model (provider, API key,
    // script, pace), then the home.
    let prompt = run_prompt(&flags.prompt)?;
    if !flags.team {
        let team_flag = flags
            .limits
            .first_given()
            .or(flags.budget.first_given())
            .or(flags.worktree.worktree.then_some("--worktree"))
            .or(flags
                .model
                .teammate_model
                .as_ref()
                .map(|_| "--teammate-model"))
            .or(flags.stall.stall_after.map(|_| "--stall-after"))
            .or(flags.placement.placement.map(|_| "--placement"));
        if let Some(flag) = team_flag {
            return Err(Failure::bad_input(anyhow!(
                "{flag} applies to Team runs only: add --team"
            )));
        }
    }
    flags.limits.limits()?;
    let flag_sandbox = flags.sandbox.for_new()?;
    let mut flag_values = settings_flags(
        &flags.model,
        &flags.sandbox,
        &flags.limits,
        &flags.instructions,
        &flags.approval,
        &flags.budget,
        &flags.worktree,
    )?;
    flag_values.stall_after = flags.stall.stall_after;
    let workspace = match &flags.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir()
            .map_err(|e| Failure::bad_input(anyhow!("cannot read the current directory: {e}")))?,
    };
    let workspace = check_workspace(&workspace)?;
    // The user's and the project's configuration files, under the flags.
    let settings = Settings::load(&home.dir, &workspace, flag_values)?;
    let team_limits = settings.team_limits()?;
    let sandbox = settings.sandbox_policy();
    if sandbox != flag_sandbox {
        // A file's sandbox, checked against this kernel as a flag's is.
        troupe_tools::probe_sandbox(&sandbox).map_err(|e| {
            let at = [&settings.sandbox.source, &settings.network.source]
                .into_iter()
                .find_map(|source| match source {
                    crate::settings::Source::File { at, .. } => Some(at.to_string()),
                    _ => None,
                })
                .unwrap_or_default();
            Failure::bad_input(anyhow!("{at}: {e}"))
        })?;
    }
    let spec = absolute_script(settings.model_spec()?)?;
    let teammate_models = if flags.team {
        absolute_scripts(settings.teammate_models(&spec)?)?
    } else {
        TeammateModels::default()
    };
    let mcp = settings.mcp();
    let mut framing = Framing::default();
    let project_instructions = if settings.project_instructions.value {
        let found = discover(&home.dir, &workspace);
        framing.prologue.extend(instruction_notes(&found));
        found.instructions
    } else {
        None
    };
    let mut shape = RunShape::new(
        flags.json,
        flags.team,
        team_limits,
        sandbox,
        mcp,
        Start::New {
            id: SessionId::random(),
            prompt,
        },
        framing,
    );
    if flags.team {
        shape.budget = settings.budget();
        let mut models = vec![price_key(&spec)];
        models.extend(teammate_models.specs().map(price_key));
        shape
            .framing
            .prologue
            .extend(settings.price_warnings(&models));
    }
    if flags.team && settings.worktree.value {
        shape.worktree_root = Some(worktree_root(&home.dir, &workspace)?);
    }
    shape.prices = settings.prices();
    shape.teammates = teammate_models;
    shape.project_instructions = project_instructions;
    shape.approval = settings.approval_policy();
    shape.stall_after = settings.stall_after();
    shape.placement = placement_of(&flags.placement, &home)?;
    work_config(home, true, workspace, spec, &flags.pace, shape)
}

/// `--worktree` (or `[team] worktree = true`) for a Team working in `workspace`: the checks
/// of [`troupe_runtime::worktree::check_repository`] (a repository with a commit, an index
/// without staged or unmerged changes; bad input otherwise, before anything is written), and
/// the directory the teammates' worktrees go under: `<home>/worktrees` (absolute).
pub(super) fn worktree_root(home: &Path, workspace: &Path) -> Result<PathBuf, Failure> {
    troupe_runtime::worktree::check_repository(workspace).map_err(|e| {
        Failure::bad_input(anyhow!("{}: {e}", troupe_protocol::ErrorCode::code(&e)))
    })?;
    let home = std::path::absolute(home)
        .map_err(|e| Failure::bad_input(anyhow!("{}: {e}", home.display())))?;
    Ok(home.join("worktrees"))
}

/// The teammate models with every script path made absolute.
fn absolute_scripts(mut models: TeammateModels) -> Result<TeammateModels, Failure> {
    if let Some(spec) = models.default.take() {
        models.default = Some(absolute_script(spec)?);
    }
    for spec in models.by_name.values_mut() {
        *spec = absolute_script(spec.clone())?;
    }
    Ok(models)
}

/// The lines a new session's start prints about its `AGENTS.md` files: each one used (an
/// empty one marked `(empty)`), a warning for each one skipped, and one when the cap cut them.
fn instruction_notes(found: &troupe_runtime::Discovery) -> Vec<String> {
    let mut notes = Vec::new();
    for skipped in &found.skipped {
        notes.push(format!(
            "troupe: warning: {} skipped: {}",
            skipped.path.display(),
            skipped.reason
        ));
    }
    if let Some(instructions) = &found.instructions {
        // A file with no text (0 bytes, or only white space) is used — a resume sees it
        // change — but gives the prompt nothing: it says so.
        let files: Vec<String> = instructions
            .files
            .iter()
            .map(|f| {
                if !f.is_cut() && f.text.trim().is_empty() {
                    format!("{} (empty)", f.path)
                } else {
                    f.path.clone()
                }
            })
            .collect();
        notes.push(format!("project instructions: {}", files.join(", ")));
        if let Some(left_out) = instructions.left_out() {
            notes.push(format!(
                "troupe: warning: project instructions truncated to 32 KiB ({} bytes in all): left out \
                 {left_out}",
                instructions.total_bytes()
            ));
        }
    }
    notes
}

/// `troupe resume`'s flags checked into a [`WorkConfig`], the session read (not locked) into
/// its [`ResumePlan`]; `framing_of` gives the framing of a session from the home, its scripted
/// model's file (if it has one) and its workspace (a resumed demo checks its project's tests).
pub(super) fn validate_resume(
    flags: ResumeFlags,
    home: Home<'_>,
    framing_of: ResumedFraming,
) -> Result<WorkConfig, Failure> {
    let journal = home.store.journal.clone();
    let id = resolve_session(&journal, &flags.session)?;
    let prompt = if flags.prompt.is_empty() {
        None
    } else {
        Some(validate_prompt(&flags.prompt)?)
    };
    // Read-only: nothing is locked or written until the flags are known to be usable.
    let plan = match ResumePlan::read(&journal, &id)? {
        StoredSession::Root(plan) => plan,
        StoredSession::Child {
            role,
            parent: Some(parent),
        } => {
            let command = format!("troupe resume {parent}{}", home.args());
            return Err(not_a_root(&id, role, &parent, &command));
        }
        StoredSession::Child { parent: None, .. } => {
            return Err(Failure::bad_input(anyhow!(
                "session {id} is a subagent child without a parent session: it cannot be resumed"
            )));
        }
    };
    // Every session of the Team free first (on NATS a dead holder's leases expire one by one).
    crate::store::check_team_free(&home.store, &id)?;
    let recorded = plan.config();
    let team = plan.is_team();
    let placement_recorded = recorded.placement;
    if !team && let Some(flag) = flags.limits.first_given() {
        return Err(Failure::bad_input(anyhow!(
            "{flag} applies to Team sessions only, and session {id} is not one"
        )));
    }
    if !team && let Some(flag) = flags.budget.first_given() {
        return Err(Failure::bad_input(anyhow!(
            "{flag} applies to Team sessions only, and session {id} is not one"
        )));
    }
    for (given, flag) in [
        (flags.model.teammate_model.is_some(), "--teammate-model"),
        (flags.stall.stall_after.is_some(), "--stall-after"),
    ] {
        if !team && given {
            return Err(Failure::bad_input(anyhow!(
                "{flag} applies to Team sessions only, and session {id} is not one"
            )));
        }
    }
    let team_limits = flags.limits.limits()?;
    let sandbox = flags.sandbox.for_resume(recorded.sandbox_policy())?;
    let approval = flags.approval.over(recorded.approval_policy());
    let mcp = crate::mcp::for_resume(
        flags.sandbox.mcp_config.as_deref(),
        recorded.mcp_servers.as_ref(),
    )?;
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
    // `--teammate-model` replaces the recorded default for the teammates created from now on
    // (those by name, and existing teammates, keep theirs).
    let teammate_override = match &flags.model.teammate_model {
        Some(model) => {
            let mut models = recorded.teammate_models.clone().unwrap_or_default();
            let sibling = spec
                .sibling(model)
                .map_err(|e| Failure::bad_input(anyhow!("--teammate-model {model}: {e}")))?;
            models.default = Some(absolute_script(sibling)?);
            Some(models)
        }
        None => None,
    };
    // The instructions the session started with stay; a note says when the files differ.
    let found = discover(&home.dir, &workspace);
    let differences = changes(recorded.project_instructions.as_ref(), &found);
    if !differences.is_empty() {
        framing.prologue.push(match &recorded.project_instructions {
            Some(_) => format!(
                "project instructions: the AGENTS.md files changed since session {id} started \
                 ({}); it keeps the copy it started with (start a new session to use them)",
                differences.join(", ")
            ),
            None => format!(
                "project instructions: session {id} started without AGENTS.md instructions, \
                 and keeps running without them ({})",
                differences.join(", ")
            ),
        });
    }
    // A resumed demo checks its project's tests and ends with its verdict as `troupe demo`
    // does; the sandbox note above is kept (only the check and the epilogue are taken from
    // the resumed framing).
    let script = (spec.provider == ProviderKind::Script).then(|| Path::new(&spec.model));
    let resumed = framing_of(&home.dir, script, &workspace);
    framing.check = resumed.check;
    framing.epilogue = resumed.epilogue;
    let mut teammate_specs: Vec<ModelSpec> = plan.teammate_specs().to_vec();
    teammate_specs.extend(teammate_override.iter().flat_map(|m| m.specs().cloned()));
    // A Team's prices, and its budget when no flag gives one, from the configuration files
    // (they are not recorded in the session). A file that cannot be read does not stop a
    // resume (it uses nothing else of them): the built-in prices and the flags' budget apply.
    let flag_budget = Budget {
        tokens: flags.budget.budget_tokens,
        usd: flags.budget.budget_usd,
    };
    let (budget, prices) = if team {
        let loaded = Settings::load(
            &home.dir,
            &workspace,
            crate::settings::FlagValues {
                budget_tokens: flags.budget.budget_tokens,
                budget_usd: flags.budget.budget_usd,
                ..crate::settings::FlagValues::default()
            },
        );
        match loaded {
            Ok(settings) => {
                let mut models = vec![price_key(&spec)];
                models.extend(teammate_specs.iter().map(price_key));
                framing.prologue.extend(settings.price_warnings(&models));
                (settings.budget(), settings.prices())
            }
            Err(failure) => {
                let why = failure
                    .error
                    .map_or_else(String::new, |e| format!(" ({e:#})"));
                framing.prologue.push(format!(
                    "note: the configuration files cannot be read{why}: the ledger uses the \
                     built-in prices, and only a budget flag gives a budget"
                ));
                (flag_budget, Prices::builtin())
            }
        }
    } else {
        (Budget::default(), Prices::builtin())
    };
    let mut shape = RunShape::new(
        flags.json,
        team,
        team_limits,
        sandbox,
        mcp,
        Start::Resume { id, prompt, plan },
        framing,
    );
    shape.teammate_override = teammate_override;
    shape.teammate_specs = teammate_specs;
    shape.approval = approval;
    shape.budget = budget;
    shape.prices = prices;
    // Not recorded: the flag, else the user's file, else 10m (the project's file configures
    // new runs only).
    shape.stall_after = crate::settings::stall_after_in(&home.dir, flags.stall.stall_after)?;
    shape.placement = resume_placement(
        &flags.placement,
        placement_recorded,
        &home,
        &mut shape.framing.prologue,
    )?;
    work_config(home, true, workspace, spec, &flags.pace, shape)
}

/// How a validated run goes: what [`work_config`] takes besides the home, the workspace and
/// the model.
/// `--placement` of a new run (default `local`): `workers` needs a NATS store (bad input
/// otherwise).
pub(crate) fn placement_of(
    args: &super::flags::PlacementArgs,
    home: &Home<'_>,
) -> Result<super::flags::Placement, Failure> {
    let placement = args.placement.unwrap_or_default();
    if placement == super::flags::Placement::Workers && home.store.nats_backend().is_none() {
        return Err(Failure::bad_input(anyhow!(
            "--placement workers needs a NATS store (--store nats://HOST:PORT): workers are \
             found in its registry"
        )));
    }
    Ok(placement)
}

/// A resume's placement: `--placement` when given (as [`placement_of`]; for this resume only,
/// the recorded choice stays), else the one the run recorded in the Lead's config
/// ([`troupe_session::events::AgentConfigRecord::placement`]; absent: `local`). A recorded
/// `workers` on a store that is not NATS (e.g. after `troupe store copy` to files) places
/// locally, with a note in `notes`.
fn resume_placement(
    args: &super::flags::PlacementArgs,
    recorded: Option<troupe_session::events::Placement>,
    home: &Home<'_>,
    notes: &mut Vec<String>,
) -> Result<super::flags::Placement, Failure> {
    if args.placement.is_some() {
        return placement_of(args, home);
    }
    let recorded = super::flags::Placement::from(recorded.unwrap_or_default());
    if recorded == super::flags::Placement::Workers && home.store.nats_backend().is_none() {
        notes.push(
            "placement: the session was run with --placement workers, but this store is not \
             NATS (workers are found in a NATS store's registry): its teammates run here"
                .to_owned(),
        );
        return Ok(super::flags::Placement::Local);
    }
    Ok(recorded)
}

pub(super) struct RunShape {
    /// `--placement` (default: local).
    pub(super) placement: super::flags::Placement,
    pub(super) json: bool,
    pub(super) team: bool,
    pub(super) team_limits: TeamLimits,
    /// The stall threshold (default for [`RunShape::new`]: 10 minutes).
    pub(super) stall_after: StallAfter,
    pub(super) sandbox: SandboxPolicy,
    pub(super) mcp: Option<McpServers>,
    /// The approvals (default for [`RunShape::new`]: never).
    pub(super) approval: ApprovalPolicy,
    pub(super) start: Start,
    pub(super) framing: Framing,
    /// A new Team root's teammate models (set up, and recorded in its configuration).
    pub(super) teammates: TeammateModels,
    /// A resume's `--teammate-model` (see [`WorkConfig::teammate_override`]).
    pub(super) teammate_override: Option<TeammateModels>,
    /// More models to set up: those a resumed session's teammates may run.
    pub(super) teammate_specs: Vec<ModelSpec>,
    /// A new session's `AGENTS.md` instructions.
    pub(super) project_instructions: Option<ProjectInstructions>,
    /// The Team's budget (default: none).
    pub(super) budget: Budget,
    /// The ledger's prices (default: the built-in ones).
    pub(super) prices: Prices,
    /// `--worktree`: where a new Team root's teammates get their worktrees (default: none).
    pub(super) worktree_root: Option<PathBuf>,
}

impl RunShape {
    /// A run without teammate models or project instructions.
    pub(super) fn new(
        json: bool,
        team: bool,
        team_limits: TeamLimits,
        sandbox: SandboxPolicy,
        mcp: Option<McpServers>,
        start: Start,
        framing: Framing,
    ) -> Self {
        Self {
            json,
            team,
            team_limits,
            stall_after: StallAfter::default(),
            placement: super::flags::Placement::Local,
            sandbox,
            mcp,
            start,
            framing,
            teammates: TeammateModels::default(),
            teammate_override: None,
            teammate_specs: Vec::new(),
            project_instructions: None,
            approval: ApprovalPolicy::default(),
            budget: Budget::default(),
            prices: Prices::builtin(),
            worktree_root: None,
        }
    }
}

/// The end of every validation (`run`, `resume`, the demo), in the documented order: the pace
/// checked against the model, the model built (API key read, or script loaded and checked),
/// then — when `prepare` — the home's directories created.
pub(super) fn work_config(
    home: Home<'_>,
    prepare: bool,
    workspace: PathBuf,
    spec: ModelSpec,
    pace: &PaceArgs,
    shape: RunShape,
) -> Result<WorkConfig, Failure> {
    let pace = pace.for_model(&spec)?;
    let others: Vec<(String, ModelSpec)> = shape
        .teammates
        .default
        .iter()
        .map(|spec| ("teammate model".to_owned(), spec.clone()))
        .chain(
            shape
                .teammates
                .by_name
                .iter()
                .map(|(name, spec)| (format!("the model of teammate {name}"), spec.clone())),
        )
        .chain(
            shape
                .teammate_specs
                .iter()
                .map(|spec| ("teammate model".to_owned(), spec.clone())),
        )
        .collect();
    let ModelSetup {
        models,
        secret_env,
        secrets,
    } = model_set(&spec, &others, pace, &home.dir)?;
    if let Start::Resume {
        id,
        prompt: Some(_),
        plan,
    } = &shape.start
        && !takes_instruction(models.lead(), LEAD, plan.spent_model_calls())
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
        home_args: home.args(),
        home_dir: home.dir,
        store: home.store,
        workspace,
        spec,
        models,
        teammate_models: shape.teammates,
        teammate_override: shape.teammate_override,
        project_instructions: shape.project_instructions,
        secret_env,
        secrets,
        sandbox: shape.sandbox,
        mcp: shape.mcp,
        approval: shape.approval,
        mode: output_mode(shape.json),
        team: shape.team,
        team_limits: shape.team_limits,
        budget: shape.budget,
        prices: shape.prices,
        worktree_root: shape.worktree_root,
        stall_after: shape.stall_after,
        placement: shape.placement,
        start: shape.start,
        framing: shape.framing,
    })
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

/// The workspace must exist, be a directory and be writable; returns its canonical path.
pub(crate) fn check_workspace(dir: &Path) -> Result<PathBuf, Failure> {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

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
                store: crate::store::Store::files(&dir.join("home")),
            },
        )
    }

    #[test]
    fn the_pace_reaches_the_scripted_models() {
        let dir = tempfile::tempdir().unwrap();
        let pace_of = |config: &WorkConfig| match config.models.lead() {
            troupe_llm::ProviderFactory::Scripted(script) => script.pace(),
            troupe_llm::ProviderFactory::Http(_) => panic!("a script gives scripted models"),
        };
        let paced = validated(&["--pace", "400", "go"], dir.path())
            .ok()
            .unwrap();
        assert_eq!(pace_of(&paced), Duration::from_millis(400));
        let plain = validated(&["go"], dir.path()).ok().unwrap();
        assert_eq!(pace_of(&plain), Duration::ZERO);
    }
}
