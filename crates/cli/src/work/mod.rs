//! `troupe run` and `troupe resume`: run the Lead until the work is quiescent.
//!
//! Two stages, as in ripgrep: the raw flags ([`RunFlags`], [`ResumeFlags`]: `flags.rs`) are
//! validated into a `WorkConfig` *before anything is written* (`config.rs`, with the model set
//! up in `model.rs`); only then is a tokio runtime built, the session created or reopened, and
//! the Lead driven until every agent is idle or inactive (`drive.rs`); the runtime's
//! [`RunOutcome`](troupe_runtime::RunOutcome) is then printed and mapped to the exit code
//! (`report.rs`). What a resume runs is the runtime's [`ResumePlan`](troupe_runtime::ResumePlan):
//! this module decides nothing.

mod config;
mod drive;
mod flags;
mod model;
mod report;

use std::path::Path;

use troupe_llm::{ModelFlags, ModelSpec, ModelSpecExt};
use troupe_protocol::SessionId;
use troupe_team::TeamLimits;
use troupe_tools::SandboxPolicy;

pub(crate) use config::ResumedFraming;
pub(crate) use config::check_workspace;
pub(crate) use config::placement_of;
pub(crate) use flags::{
    ApprovalArgs, BudgetArgs, InstructionArgs, ModelArgs, PaceArgs, PlacementArgs, ResumeFlags,
    RunFlags, SandboxArgs, StallArgs, TeamLimitArgs, WorktreeArgs, settings_flags,
};
pub(crate) use model::PROVIDER_KEY_VARS;

use crate::exit::Failure;
use crate::framing::Framing;
use crate::home::Home;
use config::{RunShape, Start, validate_resume, validate_run, work_config};
use drive::execute;
use model::absolute_script;

/// `troupe run`.
pub(crate) fn run(flags: RunFlags, home: Home<'_>) -> Result<(), Failure> {
    let config = validate_run(flags, home)?;
    execute(config)
}

/// `troupe resume`; `framing_of` gives a resumed session's framing (see [`ResumedFraming`]).
pub(crate) fn resume(
    flags: ResumeFlags,
    home: Home<'_>,
    framing_of: ResumedFraming,
) -> Result<(), Failure> {
    if let Some(worker) = flags.adopted_by {
        crate::adopt::die_with(worker)?;
        let id = crate::args::resolve_session(&home.store.journal, &flags.session)?;
        if let Some(why) = crate::adopt::no_longer_adoptable(&home.store.journal, &id)? {
            crate::output::eprint_line!(
                "troupe: note: session {id} needs no adopting any more ({why}): nothing done"
            );
            return Ok(());
        }
    }
    let config = validate_resume(flags, home, framing_of)?;
    execute(config)
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
    // The budget (flags over the configuration's) and the prices, as `run` reads them.
    let settings = crate::settings::Settings::load(
        &home.dir,
        &workspace,
        crate::settings::FlagValues {
            budget_tokens: run.budget.budget_tokens,
            budget_usd: run.budget.budget_usd,
            ..crate::settings::FlagValues::default()
        },
    )?;
    let spec = absolute_script(ModelSpec::from_flags(&ModelFlags {
        model: Some(format!("script:{}", script.display())),
        base_url: None,
        api_key_env: None,
        tool_choice: None,
    })?)?;
    let mut shape = RunShape::new(
        run.json,
        true,
        TeamLimits::default(),
        run.sandbox,
        run.mcp,
        Start::New {
            id: SessionId::random(),
            prompt,
        },
        framing,
    );
    shape.budget = settings.budget();
    shape.prices = settings.prices();
    if run.worktree {
        shape.worktree_root = Some(config::worktree_root(&home.dir, &workspace)?);
    }
    shape.stall_after = run.stall_after;
    shape.placement = run.placement;
    shape
        .framing
        .prologue
        .extend(settings.price_warnings(&[troupe_session::ledger::price_key(&spec)]));
    // The demo has prepared the home before writing its project.
    let config = work_config(home, false, workspace, spec, &run.pace, shape)?;
    execute(config)
}

/// How `troupe demo` runs its script: `--json`, `--pace`, the sandbox (already checked).
pub(crate) struct ScriptedRun {
    pub(crate) json: bool,
    pub(crate) pace: PaceArgs,
    pub(crate) sandbox: SandboxPolicy,
    pub(crate) mcp: Option<troupe_mcp::McpServers>,
    pub(crate) budget: BudgetArgs,
    /// `--worktree`: each teammate in its own git worktree (the project is a repository).
    pub(crate) worktree: bool,
    /// The stall threshold of the board's reads.
    pub(crate) stall_after: troupe_team::StallAfter,
    /// `--placement`.
    pub(crate) placement: flags::Placement,
}
