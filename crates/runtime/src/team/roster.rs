//! The Team's roster: membership views, provisioning (REFERENCE c.8), interruption (c.13),
//! the reconciliation of a resumed Team's roster (c.9) and the continuation of its
//! teammates, and the one rule for "is this child session a valid teammate?".
//!
//! Decision recorded here (REFERENCE g.10.c): teammates do not send settlement notices to the
//! Lead; the Lead follows them through `wait_agent`/`list_agents`, which see every status edge.

use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use troupe_journal::JournalError;
use troupe_protocol::{ErrorCode, Event, MessageId, SessionId, event_types as ty};
use troupe_team::{
    Delivery, LiveAgent, LiveStatus, MemberContext, MemberPhase, MemberSnapshot, MemberView,
    MemberWorktree, ProvisionTeammate, ProvisioningOutcome, SettleDecision, TeamError, TeamRecord,
    js_trim,
};

use super::hosts::{
    INTERRUPT_VERSION, InterruptCause, InterruptHandoff, InterruptRequest, MemberHosts,
    append_unhosted,
};
use super::journal::{Effect, Member, TeamJournal, stored_transcript};
use super::lifecycle::Lifecycle;
use super::mailbox::{Dispatcher, deliver_pending_quiet};
use super::op::{CallOrigin, LogError, TeamOpError};
use crate::agent::{Agent, AgentStatus};
use crate::control::{ChildControl, ChildSpec};
use crate::error::RuntimeError;
use crate::recovery::{
    SpawnRequest, TeammateRecovery, continuation_note, spawn_requests, teammate_recovery,
};
use crate::teammate::teammate_problem;
use crate::worktree;
use troupe_session::events::{ChildProvider, Profile};
use troupe_session::{ContinuationRule, OpenTurn, Transcript};

/// A member's live status and model, for its [`MemberView`]: the resident agent's, else the
/// one its host in another process last reported (REFERENCE c.7 "live"; DESIGN §7).
pub(super) fn live_agent(
    journal: &TeamJournal,
    control: &dyn ChildControl,
    id: &SessionId,
) -> Option<LiveAgent> {
    control
        .agent(id)
        .map(|agent| live_of(&agent))
        .or_else(|| journal.live_elsewhere(id))
}

/// The host of the live member `id` in `list_agents` (see `ListedMember`): `local` for the
/// Lead and for a teammate resident in this process, else the host its report names while the
/// report holds; `None` when neither.
pub(super) fn host_of(
    journal: &TeamJournal,
    control: &dyn ChildControl,
    id: &SessionId,
) -> Option<String> {
    if id == journal.lead().id() || control.agent(id).is_some() {
        return Some(LOCAL_HOST.to_owned());
    }
    journal.host_elsewhere(id)
}

/// The host of the members of the Lead's process in `list_agents` (the word `team show` and
/// the panel use too).
pub(super) const LOCAL_HOST: &str = "local";

/// `agent`'s live status and model.
pub(super) fn live_of(agent: &Agent) -> LiveAgent {
    LiveAgent {
        status: match agent.status() {
            AgentStatus::Running => LiveStatus::Running,
            AgentStatus::Idle => LiveStatus::Idle,
        },
        model: Some(agent.setup().model.model.clone()),
    }
}

/// The model of the teammate `name` the Lead creates: the one its recorded config's
/// [`TeammateModels`](troupe_session::events::TeammateModels) names, `None` for the session's.
fn teammate_model(lead: &Agent, name: &str) -> Option<troupe_llm::ModelSpec> {
    lead.with_transcript(|t| {
        t.config()
            .and_then(|c| c.teammate_models.as_ref())
            .and_then(|models| models.for_member(name).cloned())
    })
}

/// The roster as `list_agents` shows it (REFERENCE c.7): the Lead row, then every member
/// (failed included), with live statuses.
pub(super) fn members(
    journal: &TeamJournal,
    state: &troupe_team::TeamState,
    control: &dyn ChildControl,
) -> Vec<MemberView> {
    state.list_members_with_models(
        &live_of(journal.lead()),
        &|id| live_agent(journal, control, id),
        &|id| control.model_seen(id),
    )
}

/// [`members`] as `caller` sees them: a caller hosted by another process is shown with the
/// live status and model its host reported (this process has no agent of it).
pub(super) fn members_for(
    journal: &TeamJournal,
    state: &troupe_team::TeamState,
    control: &dyn ChildControl,
    caller: Member<'_>,
) -> Vec<MemberView> {
    match caller {
        Member::Remote(remote) if remote.live.is_some() => state.list_members_with_models(
            &live_of(journal.lead()),
            &|id| {
                if *id == remote.id {
                    remote.live.clone()
                } else {
                    live_agent(journal, control, id)
                }
            },
            &|id| control.model_seen(id),
        ),
        _ => members(journal, state, control),
    }
}

/// `list_agents` (REFERENCE c.7) for `agent`.
///
/// # Errors
/// `TEAM_NOT_MEMBER`.
pub(super) async fn list(
    journal: &TeamJournal,
    control: &dyn ChildControl,
    agent: Member<'_>,
) -> Result<Vec<MemberView>, TeamOpError> {
    let state = journal.enter().await;
    journal.caller(&state, agent)?;
    Ok(members_for(journal, &state, control, agent))
}

/// `spawn_teammate`'s request, as the roster takes it.
pub(super) struct SpawnCall<'a> {
    /// The caller (must be the Lead).
    pub(super) agent: Member<'a>,
    /// The member name.
    pub(super) name: &'a str,
    /// The delegated job.
    pub(super) description: &'a str,
    /// The initial assignment.
    pub(super) prompt: &'a str,
    /// Fresh or fork.
    pub(super) context: MemberContext,
    /// The caller's signal.
    pub(super) cancel: Option<CancellationToken>,
    /// The tool call the `provisioning` record is linked to.
    pub(super) origin: Option<&'a CallOrigin>,
}

/// The child provider of a member context.
fn provider_of(context: MemberContext) -> ChildProvider {
    match context {
        MemberContext::Fresh => ChildProvider::Spawn,
        MemberContext::Fork => ChildProvider::Fork,
    }
}

/// `spawn_teammate` (REFERENCE c.8): records `provisioning`, starts the child with the
/// reserved id (its initial prompt is durable in the child log before this returns), then
/// records `active` — or `failed` with the error, draining the child. Tracked until it
/// settles, so a shutdown waits for it (c.8 step 1, c.14).
///
/// Checks, in order: the Lead role, the name, the description, the name's availability and
/// the member limit (c.8), then the prompt, which must not be empty or whitespace (a Troupe
/// rule, like empty messages: a teammate needs an assignment); nothing is appended before
/// every check passed.
///
/// # Errors
/// `TEAM_LEAD_REQUIRED`, `TEAM_INVALID_MEMBER_NAME`, `TEAM_INVALID_ARGUMENT` (description,
/// prompt), `TEAM_MEMBER_NAME_TAKEN`, `TEAM_MEMBER_LIMIT`, `TEAM_PROVISIONING_CONFLICT`,
/// `TEAM_DISPOSED`, `CANCELLED`, the child start's own error (the member is then `failed`).
pub(super) async fn spawn(
    journal: &TeamJournal,
    lifecycle: &Lifecycle,
    control: &dyn ChildControl,
    hosts: Option<&dyn MemberHosts>,
    call: SpawnCall<'_>,
) -> Result<MemberView, TeamOpError> {
    let _in_flight = lifecycle.creation();
    lifecycle.admit()?;
    if call
        .cancel
        .as_ref()
        .is_some_and(CancellationToken::is_cancelled)
    {
        return Err(RuntimeError::Cancelled("teammate creation was cancelled".into()).into());
    }
    let result = spawn_admitted(journal, lifecycle, control, hosts, call).await;
    if let Err(e) = &result
        && lifecycle.is_closed()
        && e.code() != "TEAM_DISPOSED"
    {
        // A creation that failed on its own while the Team was closing: the shutdown
        // reports it (REFERENCE c.14 step 6).
        lifecycle.note_close_failure(format!("{}: {e}", e.code()));
    }
    result
}

/// [`spawn`] once admitted and tracked: reserve, start, settle.
async fn spawn_admitted(
    journal: &TeamJournal,
    lifecycle: &Lifecycle,
    control: &dyn ChildControl,
    hosts: Option<&dyn MemberHosts>,
    call: SpawnCall<'_>,
) -> Result<MemberView, TeamOpError> {
    // The caller's signal or the Team's closing stops the creation (REFERENCE c.8 step 3:
    // `any(request signal, runtime signal)`).
    let stop = stop_signal(lifecycle.closing(), call.cancel.clone());
    let _stop_watch = stop.clone().drop_guard();
    let provider = provider_of(call.context);
    let child_id = SessionId::random();
    let worktree = plan_worktree(journal, call.name).await?;
    let member = reserve(journal, &call, provider, &child_id, worktree).await?;
    // The record names the worktree before git makes it (`crate::worktree`'s crash table).
    let prepared = match &member.worktree {
        Some(worktree) => ensure_worktree(journal, worktree).await,
        None => Ok(()),
    };
    let started: Result<_, TeamOpError> = match prepared {
        Err(e) => Err(e),
        Ok(()) => {
            let spec = ChildSpec {
                provider,
                label: member.name.to_string(),
                child_id: Some(child_id.clone()),
                prompt: call.prompt.to_owned(),
                continuable: true,
                notify_parent: false,
                profile: Profile::Team,
                model: teammate_model(journal.lead(), member.name.as_str()),
                cancel: Some(stop.clone()),
                workspace: member.worktree.as_ref().map(|w| PathBuf::from(&w.path)),
            };
            // `--placement workers` (DESIGN §7): a fresh teammate's log is created whole with
            // its prompt waiting (as a creation a crash cut is carried out), then it is placed
            // on a worker, else woken here. A fork starts here (its seed is the Lead's).
            let placing = hosts.filter(|h| h.append_unhosted() && provider == ChildProvider::Spawn);
            let started = match placing {
                Some(hosts) => start_placed(journal, control, hosts, &child_id, spec).await,
                None => control.start(journal.lead(), spec).await.map(|_| ()),
            };
            match started {
                // Stopped by the Team's closing (not by the caller): the creation was
                // disposed.
                Err(RuntimeError::Cancelled(_)) if lifecycle.is_closed() => {
                    Err(TeamError::Disposed {
                        message: "teammate creation aborted: the Team runtime is shut down"
                            .to_owned(),
                    }
                    .into())
                }
                other => other.map_err(TeamOpError::from),
            }
        }
    };
    let outcome = match &started {
        Ok(_) => ProvisioningOutcome::Active,
        Err(e) => ProvisioningOutcome::Failed {
            error: e.to_string(),
        },
    };
    let settled = settle(journal, &child_id, &outcome).await?;
    let drain = || control.drain(journal.lead(), std::slice::from_ref(&child_id));
    match (started, settled) {
        (Err(e), _) => {
            let _ = drain().await;
            Err(e)
        }
        (Ok(_), Some(MemberPhase::Failed)) => {
            let _ = drain().await;
            Err(TeamError::ProvisioningConflict {
                message: format!(
                    "teammate {} was marked failed by recovery while it was being created",
                    member.name
                ),
            }
            .into())
        }
        (Ok(_), _) => {
            let state = journal.enter().await;
            let snapshot = state.member(&child_id).cloned().unwrap_or(member);
            Ok(MemberView::spawned(
                &snapshot,
                live_agent(journal, control, &child_id).as_ref(),
            ))
        }
    }
}

/// Starts the fresh teammate `child_id` of `spec` through placement: its log is created with
/// the prompt waiting in its inbox (nothing runs yet), then a host elsewhere is asked to run
/// it; when none can, it is woken in this process (its waiting prompt runs). What survives a
/// crash: the log whole with its prompt, or nothing (decision 9); a crash before a host runs
/// it leaves a teammate whose prompt waits, which the Team's recovery continues.
///
/// # Errors
/// The log's creation or the local wake's error.
async fn start_placed(
    journal: &TeamJournal,
    control: &dyn ChildControl,
    hosts: &dyn MemberHosts,
    child_id: &SessionId,
    spec: ChildSpec,
) -> Result<(), RuntimeError> {
    let name = spec.label.clone();
    control
        .recreate(journal.lead(), child_id, spec, Vec::new(), false)
        .await?;
    let asked = std::time::Instant::now();
    match hosts.place(child_id, &name).await {
        Ok(Some(host)) => {
            tracing::info!(teammate = %child_id, host = %host, "teammate placed");
            journal.placed(child_id, &host, asked);
            Ok(())
        }
        Ok(None) => control.wake(journal.lead(), child_id).await.map(|_| ()),
        Err(e) => {
            tracing::warn!(teammate = %child_id, error = %e, "placement failed; running it here");
            control.wake(journal.lead(), child_id).await.map(|_| ())
        }
    }
}

/// A signal cancelled by the Team's closing or by the caller's signal, whichever comes first
/// (the watcher ends when the returned token is cancelled or dropped through its guard).
fn stop_signal(
    closing: &CancellationToken,
    caller: Option<CancellationToken>,
) -> CancellationToken {
    let stop = CancellationToken::new();
    let watched = stop.clone();
    let closing = closing.clone();
    tokio::spawn(async move {
        let caller_cancelled = async {
            match caller {
                Some(c) => c.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = closing.cancelled() => watched.cancel(),
            () = caller_cancelled => watched.cancel(),
            () = watched.cancelled() => {}
        }
    });
    stop
}

/// The worktree teammate `name` gets when the Lead's recorded config has a `worktreeRoot`
/// (`--worktree`): under it, on its own branch from the Lead's current `HEAD`. `None` without
/// worktrees, and for a name the roster will refuse anyway (nothing is asked of git).
///
/// # Errors
/// `WORKTREE_NOT_A_REPOSITORY` (the Lead's workspace is no longer a repository with a commit).
async fn plan_worktree(
    journal: &TeamJournal,
    name: &str,
) -> Result<Option<MemberWorktree>, TeamOpError> {
    let Some((root, workspace)) = worktree_settings(journal.lead()) else {
        return Ok(None);
    };
    if troupe_team::MemberName::new(name).is_err() {
        return Ok(None);
    }
    let repository = blocking(move || worktree::head_of(&workspace)).await?;
    Ok(Some(worktree::member_worktree(
        &root,
        journal.id(),
        name,
        &repository.head,
    )))
}

/// The Lead's recorded worktree root and workspace, when its Team runs with worktrees.
fn worktree_settings(lead: &Agent) -> Option<(PathBuf, PathBuf)> {
    lead.with_transcript(|t| {
        t.config().and_then(|c| {
            c.worktree_root
                .as_ref()
                .map(|root| (PathBuf::from(root), PathBuf::from(&c.workspace)))
        })
    })
}

/// Runs a blocking git operation off the runtime's threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, worktree::WorktreeError> + Send + 'static,
) -> Result<T, TeamOpError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(|e| TeamOpError::from(RuntimeError::from(e))),
        Err(e) => Err(RuntimeError::Cancelled(format!("the git operation stopped: {e}")).into()),
    }
}

/// Makes member worktree `worktree` exist in the Lead's repository ([`worktree::ensure`]).
async fn ensure_worktree(
    journal: &TeamJournal,
    worktree: &MemberWorktree,
) -> Result<(), TeamOpError> {
    let workspace = journal
        .lead()
        .with_transcript(|t| t.config().map(|c| PathBuf::from(&c.workspace)))
        .unwrap_or_default();
    let worktree = worktree.clone();
    blocking(move || {
        let top = worktree::top_level(&workspace)?;
        worktree::ensure(&top, &worktree).map(|_| ())
    })
    .await
}

/// Reserves the member (REFERENCE c.8 steps 2–5): every check, then the `provisioning` record
/// (linked to the call, naming the member's worktree when there is one). Returns the
/// reserved snapshot.
async fn reserve(
    journal: &TeamJournal,
    call: &SpawnCall<'_>,
    provider: ChildProvider,
    child_id: &SessionId,
    worktree: Option<MemberWorktree>,
) -> Result<MemberSnapshot, TeamOpError> {
    let mut state = journal.enter().await;
    let caller = journal.caller(&state, call.agent)?;
    let request = ProvisionTeammate {
        name: call.name.to_owned(),
        description: call.description.to_owned(),
        provider: provider.as_str().to_owned(),
        context: call.context,
        worktree,
    };
    let event = state.decide_provision(&caller, &request, child_id.clone(), journal.limits())?;
    if js_trim(call.prompt).is_empty() {
        return Err(TeamError::InvalidArgument {
            message: "prompt must not be empty: give the teammate its assignment".to_owned(),
        }
        .into());
    }
    let effect = call.origin.map(|origin| Effect {
        origin,
        result: None,
    });
    journal.commit(&mut state, &event, effect).await?;
    match event.record {
        TeamRecord::Member(m) => Ok(m),
        _ => Err(LogError::Decision {
            expected: ty::TEAM_MEMBER,
        }
        .into()),
    }
}

/// Settles member `child_id`'s provisioning with `outcome` (c.8 steps 7–8): appends the
/// terminal edge, or returns the phase someone else (recovery) already settled it in.
async fn settle(
    journal: &TeamJournal,
    child_id: &SessionId,
    outcome: &ProvisioningOutcome,
) -> Result<Option<MemberPhase>, TeamOpError> {
    let mut state = journal.enter().await;
    match state.decide_settle_provisioning(child_id, outcome)? {
        SettleDecision::Append(event) => {
            journal.commit(&mut state, &event, None).await?;
            Ok(None)
        }
        SettleDecision::AlreadySettled(phase) => Ok(Some(phase)),
    }
}

/// `interrupt_agent` (REFERENCE c.13): Lead only; stops a live teammate's turn keeping its
/// inbox; returns its status before the interrupt (`inactive` when not live), once the
/// interrupted turn has closed — so the roster read right after shows the settled status,
/// not `running` — or the disposal bound passed (a tool that ignores cancellation keeps the
/// turn open, and the Lead must not hang on it).
///
/// A target not resident here is asked of `hosts` (DESIGN §7; `super::interrupt`): the
/// process holding its lease interrupts it the same way and answers; nobody holding it is
/// `inactive`.
///
/// # Errors
/// `TEAM_LEAD_REQUIRED`, `TEAM_INVALID_TARGET`, `TEAM_MEMBER_NOT_FOUND`, `TEAM_NOT_MEMBER`;
/// for a target hosted elsewhere `TEAM_HOST_LOST` (its host died with its turn open),
/// `STORE_IO` / `STORE_UNREACHABLE` (the holder refused or could not be reached).
pub(super) async fn interrupt(
    journal: &TeamJournal,
    control: &dyn ChildControl,
    hosts: Option<&dyn MemberHosts>,
    agent: Member<'_>,
    target: &str,
) -> Result<&'static str, TeamOpError> {
    let target_id = {
        let state = journal.enter().await;
        let caller = journal.caller(&state, agent)?;
        state.resolve_interrupt_target(&caller, target)?.id.clone()
    };
    match (control.agent(&target_id), hosts) {
        (Some(live), _) => interrupt_resident(journal, control, &target_id, &live).await,
        (None, Some(hosts)) => interrupt_elsewhere(journal, control, hosts, &target_id).await,
        (None, None) => Ok("inactive"),
    }
}

/// [`interrupt`] of `target`, resident here as `live`: the seam's interrupt (REFERENCE b.7),
/// then the wait for its turn to close, bounded by `disposalTimeoutMs`.
async fn interrupt_resident(
    journal: &TeamJournal,
    control: &dyn ChildControl,
    target: &SessionId,
    live: &Agent,
) -> Result<&'static str, TeamOpError> {
    let previous = match live.status() {
        AgentStatus::Running => "running",
        AgentStatus::Idle => "idle",
    };
    control.interrupt(journal.lead(), target).await?;
    let bound = Duration::from_millis(journal.limits().disposal_timeout_ms);
    if tokio::time::timeout(bound, live.wait_idle()).await.is_err() {
        tracing::warn!(teammate = %target, "the interrupted turn did not close in time");
    }
    Ok(previous)
}

/// [`interrupt`] of `target`, not resident here, through the holder of its lease: its answer,
/// `inactive` when nobody holds the lease. A holder that never answered and whose lease
/// expired is decided from what is known then ([`holder_gone`]). A settled answer is
/// recorded as the member's status at once (its host's own report may come later), so the
/// roster read right after shows it idle, as after a local interrupt.
async fn interrupt_elsewhere(
    journal: &TeamJournal,
    control: &dyn ChildControl,
    hosts: &dyn MemberHosts,
    target: &SessionId,
) -> Result<&'static str, TeamOpError> {
    // The turn running when the interrupt is asked for, as the stored log tells it: what a
    // holder that dies before answering is judged against.
    let asked_during = stored_transcript(journal.store(), target).and_then(|t| t.open_turn());
    let request = InterruptRequest {
        version: INTERRUPT_VERSION,
        team: journal.lead().id().clone(),
        target: target.clone(),
        by: journal.lead().id().clone(),
        holder: String::new(),
        wait_ms: journal.limits().disposal_timeout_ms,
        cause: InterruptCause::Parent,
    };
    let reason = match hosts.interrupt(request).await.map_err(RuntimeError::from)? {
        InterruptHandoff::Interrupted { previous, settled } => {
            if settled {
                journal.settled_elsewhere(target);
            }
            return Ok(previous);
        }
        InterruptHandoff::Unhosted => return Ok("inactive"),
        InterruptHandoff::HolderGone { reason } => reason,
    };
    if let Some(live) = control.agent(target) {
        return interrupt_resident(journal, control, target, &live).await;
    }
    holder_gone(journal, target, asked_during, &reason)
}

/// The answer to an interrupt of `target` whose holder never answered and whose lease
/// expired (`super::interrupt`), decided from its stored log and `asked_during`, the turn
/// that was open when the interrupt was asked for:
/// - that turn ended aborted by `{"kind":"parent"}`: the holder's cancel took effect before
///   it died — `running`, the answer it would have given;
/// - that turn still open, or ended otherwise (cut by the host's death and closed by the
///   Team's recovery, or finished on its own before the cancel): the interrupt is not
///   confirmed — `TEAM_HOST_LOST`, naming what the log shows;
/// - no turn open when asked: `inactive` when none is open now (nothing runs: there is
///   nothing to stop), else `TEAM_HOST_LOST` (a turn started since and was cut).
fn holder_gone(
    journal: &TeamJournal,
    target: &SessionId,
    asked_during: Option<u64>,
    reason: &str,
) -> Result<&'static str, TeamOpError> {
    let replay = journal.store().read(target).map_err(RuntimeError::from)?;
    let lost = |seen: String| -> TeamOpError {
        RuntimeError::HostLost {
            id: target.to_string(),
            reason: format!("{reason}; {seen}"),
        }
        .into()
    };
    let Some(turn) = asked_during else {
        let transcript = Transcript::fold(replay.header.seed_len(), &replay.events)
            .map_err(RuntimeError::from)?;
        return match transcript.open_turn() {
            None => Ok("inactive"),
            Some(open) => Err(lost(format!(
                "its log shows turn {open} open (cut, not interrupted): the Team continues it \
                 as after a crash"
            ))),
        };
    };
    let end = replay.events.iter().find_map(|e| {
        (e.kind == ty::TURN_END
            && e.data.get("turn").and_then(serde_json::Value::as_u64) == Some(turn))
        .then(|| e.data.get("reason").cloned().unwrap_or_default())
    });
    match end {
        Some(reason)
            if reason.get("kind").and_then(serde_json::Value::as_str) == Some("aborted")
                && reason.get("reason") == Some(&serde_json::json!({"kind": "parent"})) =>
        {
            Ok("running")
        }
        Some(other)
            if other.get("kind").and_then(serde_json::Value::as_str) == Some("interrupted") =>
        {
            Err(lost(format!(
                "its log shows turn {turn} cut and closed by the crash recovery, not by the \
                 interrupt: the Team continues it as after a crash"
            )))
        }
        Some(other) => Err(lost(format!(
            "its log shows turn {turn} ended {other}, not by the interrupt"
        ))),
        None => Err(lost(format!(
            "its log shows turn {turn} open (cut, not interrupted): the Team continues it as \
             after a crash"
        ))),
    }
}

/// Roster reconciliation of a Team root being resumed (REFERENCE c.9, issue 10 defect 6):
/// members left `provisioning` by a crash become `active` or `failed` from their child logs
/// ([`teammate_problem`], the rule `troupe team verify` checks too). A child with no log, or a valid one without its prompt and
/// without a turn, has done nothing: when the Lead's `spawn_teammate` call that reserved the
/// name is in the Lead log `lead_events`, the child is created again under its reserved id
/// with that prompt waiting (the continuation of the Team recovery runs it) and the member
/// becomes `active`; otherwise it is `failed` as REFERENCE c.9 says. Failures are warnings,
/// silent once the Team is closed.
pub(super) async fn reconcile(
    journal: &TeamJournal,
    lifecycle: &Lifecycle,
    control: &dyn ChildControl,
    lead_events: &[Event],
) {
    if let Err(e) = reconcile_provisioning(journal, lifecycle, control, lead_events).await {
        // A pass the shutdown cut short is not a failure worth reporting (REFERENCE c.9:
        // warnings are suppressed after disposal).
        if !lifecycle.is_closed() {
            tracing::warn!(team = %journal.id(), error = %e, "roster reconciliation failed");
        }
    }
}

async fn reconcile_provisioning(
    journal: &TeamJournal,
    lifecycle: &Lifecycle,
    control: &dyn ChildControl,
    lead_events: &[Event],
) -> Result<(), TeamOpError> {
    let requests = spawn_requests(lead_events);
    let provisioning: Vec<MemberSnapshot> = {
        let state = journal.enter().await;
        state.provisioning_members().cloned().collect()
    };
    for member in provisioning {
        if lifecycle.is_closed() {
            return Ok(());
        }
        // A live child's creator owns its terminal edge (REFERENCE c.9 step 1).
        if control.agent(&member.id).is_some() {
            continue;
        }
        // A worktree the crash cut before or while git made it is made (or found) first.
        if let Some(worktree) = &member.worktree
            && let Err(e) = ensure_worktree(journal, worktree).await
        {
            let mut state = journal.enter().await;
            let outcome = ProvisioningOutcome::Failed {
                error: e.to_string(),
            };
            if let SettleDecision::Append(event) =
                state.decide_settle_provisioning(&member.id, &outcome)?
            {
                journal.commit(&mut state, &event, None).await?;
            }
            continue;
        }
        let request = requests.get(member.name.as_str());
        let recreate = |log_exists| {
            recreate_member(journal, control, &member, request, lead_events, log_exists)
        };
        let outcome = match journal.store().read(&member.id) {
            Err(JournalError::NotFound { .. }) if request.is_some() => recreate(false).await,
            Err(e) => inspect_failed(&e),
            Ok(replay) => match Transcript::fold(replay.header.seed_len(), &replay.events) {
                Err(e) => inspect_failed(&e),
                Ok(t) => {
                    // The one teammate rule `troupe team verify` checks too.
                    let matches =
                        teammate_problem(&replay.header, &t, journal.lead().id(), &member.provider)
                            .is_none();
                    if matches && t.accepted_user_message() {
                        ProvisioningOutcome::Active
                    } else if matches && request.is_some() && t.stats().turns == 0 {
                        recreate(true).await
                    } else {
                        mismatch()
                    }
                }
            },
        };
        let mut state = journal.enter().await;
        if lifecycle.is_closed() {
            return Ok(());
        }
        if let SettleDecision::Append(event) =
            state.decide_settle_provisioning(&member.id, &outcome)?
        {
            journal.commit(&mut state, &event, None).await?;
        }
    }
    Ok(())
}

/// `failed`: inspecting the child failed (REFERENCE c.9 step 3).
fn inspect_failed(e: &dyn fmt::Display) -> ProvisioningOutcome {
    ProvisioningOutcome::Failed {
        error: format!("{}{e}", troupe_team::RECOVERY_INSPECT_FAILED_PREFIX),
    }
}

/// `failed`: the child does not match the provisioned continuation (REFERENCE c.9 step 3).
fn mismatch() -> ProvisioningOutcome {
    ProvisioningOutcome::Failed {
        error: troupe_team::RECOVERY_CHILD_MISMATCH.to_owned(),
    }
}

/// Creates again the child of a member whose spawn a crash cut before its prompt was durable
/// (see [`reconcile`]): `active` once its log holds the prompt, `failed` naming the error
/// otherwise.
async fn recreate_member(
    journal: &TeamJournal,
    control: &dyn ChildControl,
    member: &MemberSnapshot,
    request: Option<&SpawnRequest>,
    lead_events: &[Event],
    log_exists: bool,
) -> ProvisioningOutcome {
    let Some(request) = request else {
        return mismatch();
    };
    let spec = ChildSpec {
        provider: provider_of(member.context),
        label: member.name.to_string(),
        child_id: Some(member.id.clone()),
        prompt: request.prompt.clone(),
        continuable: true,
        notify_parent: false,
        profile: Profile::Team,
        // The choice the Lead's recorded config makes, as at the spawn the crash cut.
        model: teammate_model(journal.lead(), member.name.as_str()),
        cancel: None,
        workspace: member.worktree.as_ref().map(|w| PathBuf::from(&w.path)),
    };
    let seed = lead_events[..request.seed_end.min(lead_events.len())].to_vec();
    match control
        .recreate(journal.lead(), &member.id, spec, seed, log_exists)
        .await
    {
        Ok(()) => ProvisioningOutcome::Active,
        Err(e) => inspect_failed(&e),
    }
}

/// Where [`take_over`] continues a teammate whose host died.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum TakenOver {
    /// Its log shows nothing owed (no open turn, nothing waking): nothing was done.
    Nothing,
    /// A live worker runs it now (its name).
    Placed(String),
    /// This process continues it ([`continue_teammates`] for it).
    Here,
}

/// Takes over the active teammate `id`, whose host in another process stopped reporting
/// while it ran and whose lease is now free (DESIGN §7 "Failover": running ones are
/// continued elsewhere as after a crash). What it is owed is decided from its log as the
/// Team recovery decides it ([`teammate_recovery`]); with `--placement workers`
/// ([`MemberHosts::append_unhosted`]) it is continued on a live eligible worker when one
/// takes it, else here, as before:
///
/// 1. its cut turn is closed from the logs ([`ChildControl::close_cut_turn`], the crash
///    recovery of a cold resume), then its pending quiet mail is appended to its log
///    (mailbox `append_all_quiet_unhosted`), then one continuation note
///    ([`continuation_note`]) per turn the stop cut, into its inbox's next-turn list — each
///    under a lease of this process taken and released per write — so its log reads as a
///    local continuation writes it;
/// 2. a host is asked to run it ([`MemberHosts::place`]): the worker takes its lease,
///    cold-resumes it (nothing left open to close) and wakes its inbox, so the note runs as
///    the next turn: the model sees what a local continuation shows it (the cut turn
///    closed, its mail, then the note). It is recorded as running there
///    ([`TeamJournal::placed`]);
/// 3. no eligible worker (or the appends or the placement failed): continued here
///    ([`continue_teammates`] for it, which finds the notes already waiting and wakes it
///    rather than queueing them again).
///
/// What survives a crash: of this process (the Lead's) mid re-placement — before the first
/// write, the teammate's log is as its host's death left it, and the next resume continues
/// it as after a crash; after the cut turn's closing, the next resume owes it one
/// continuation for the `interrupted` turn, as after a crash recovery; after some appends, the mail appended is acknowledged or held (the
/// mailbox recovery acknowledges it without a second copy) and a note already waiting
/// answers its cut turn ([`Transcript::owed_continuations`]), so the resume's recovery wakes
/// it without a second note; once a worker took it, the worker holds its lease and the
/// resume leaves it there. Of the new worker mid cold resume: its lease expires, its reports
/// stop, and the member is lost again: this same take-over runs again (a note waiting, or
/// the note's own turn cut, decide what it is owed). Each take-over is told on the Lead's
/// stderr ([`MemberHosts::notice`]).
pub(super) async fn take_over(
    journal: &TeamJournal,
    lifecycle: &Lifecycle,
    control: &dyn ChildControl,
    hosts: &dyn MemberHosts,
    id: &SessionId,
) -> TakenOver {
    // Not at the same time as a wakeup's placement or cold resume of it: both decide from its
    // log what it is owed.
    let _continuing = journal.continuing(id).await;
    let Some(t) = stored_transcript(journal.store(), id) else {
        // Not readable: the local continuation skips it too, with nothing to say.
        return TakenOver::Nothing;
    };
    let (name, wakeups) = {
        let state = journal.enter().await;
        (
            state
                .member(id)
                .map_or_else(|| id.to_string(), |m| m.name.to_string()),
            state
                .messages()
                .iter()
                .filter(|m| m.delivery == Delivery::Wakeup)
                .map(|m| m.id.clone())
                .collect::<HashSet<MessageId>>(),
        )
    };
    let plan = teammate_recovery(&t, &wakeups);
    if plan.notes == 0 && !plan.wake {
        return TakenOver::Nothing;
    }
    // A closing or halted Team continues nobody: the next resume does.
    if lifecycle.is_stopping() {
        return TakenOver::Nothing;
    }
    if hosts.append_unhosted() {
        let asked = std::time::Instant::now();
        match place_continued(journal, control, hosts, id, &name, plan.notes).await {
            Ok(Some(host)) => {
                journal.placed(id, &host, asked);
                hosts.notice(&format!(
                    "teammate {name}'s host stopped reporting and its lease expired: it \
                     continues on worker {host} (its cut turn closed as after a crash, then its \
                     continuation note)"
                ));
                return TakenOver::Placed(host);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(teammate = %id, error = %e, "re-placing it failed; continuing it here");
            }
        }
    }
    tracing::warn!(teammate = %id, "its host stopped reporting and its lease is free: continuing it here");
    hosts.notice(&format!(
        "teammate {name}'s host stopped reporting and its lease expired: it continues in the \
         Lead's process (its cut turn closed as after a crash, then its continuation note)"
    ));
    continue_teammates(journal, lifecycle, control, None, Some(id)).await;
    TakenOver::Here
}

/// Steps 1–2 of [`take_over`]: the mail and `notes` continuation notes appended to the
/// unhosted teammate `id`'s log, then a host asked to run it; `Ok(None)` when none is
/// eligible.
///
/// # Errors
/// The failed append or the placement's error, as one line.
async fn place_continued(
    journal: &TeamJournal,
    control: &dyn ChildControl,
    hosts: &dyn MemberHosts,
    id: &SessionId,
    name: &str,
    notes: usize,
) -> Result<Option<String>, String> {
    control
        .close_cut_turn(journal.lead(), id)
        .await
        .map_err(|e| format!("its cut turn could not be closed: {e}"))?;
    super::mailbox::append_all_quiet_unhosted(journal, id).await?;
    for _ in 0..notes {
        append_unhosted(
            journal.store(),
            id,
            continuation_note(),
            troupe_session::events::InboxTarget::NextTurn,
        )
        .await
        .map_err(|e| format!("the continuation note could not be appended: {e}"))?;
    }
    hosts.place(id, name).await.map_err(|e| e.to_string())
}

/// Where [`continue_placed`] left a teammate.
enum Placement {
    /// A live worker runs it now (recorded as placed there).
    Placed,
    /// It continues in this process: its log as it is now (`None`: no longer readable).
    Here(Option<Box<Transcript>>),
}

/// The placement of a teammate a stop left with work, under `--placement workers`
/// ([`continue_teammates`]): [`place_continued`] with its `notes` continuation notes; placed
/// on a worker, it is recorded there and told on the Lead's stderr. When no worker takes it
/// (the placement named each one skipped and why) or a step failed (told, with the
/// failure), its log is read again for the local continuation, which finds what was
/// appended already (the notes waiting wake it rather than being queued again).
///
/// What survives a crash at each step is [`take_over`]'s: its cut turn closed, mail and
/// notes appended are each whole or absent and decided again from the logs by the next
/// recovery, and a worker that took it holds its lease.
async fn continue_placed(
    journal: &TeamJournal,
    control: &dyn ChildControl,
    hosts: &dyn MemberHosts,
    id: &SessionId,
    notes: usize,
) -> Placement {
    let name = {
        let state = journal.enter().await;
        state
            .member(id)
            .map_or_else(|| id.to_string(), |m| m.name.to_string())
    };
    let asked = std::time::Instant::now();
    match place_continued(journal, control, hosts, id, &name, notes).await {
        Ok(Some(host)) => {
            journal.placed(id, &host, asked);
            hosts.notice(&format!(
                "teammate {name} continues on worker {host} (the work the stop left it: {})",
                if notes == 0 {
                    "its waiting mail".to_owned()
                } else {
                    format!(
                        "{notes} continuation note{}",
                        if notes == 1 { "" } else { "s" }
                    )
                }
            ));
            return Placement::Placed;
        }
        Ok(None) => {}
        Err(e) => hosts.notice(&format!(
            "teammate {name} could not be placed on a worker ({e}): it continues in the Lead's \
             process"
        )),
    }
    Placement::Here(stored_transcript(journal.store(), id).map(Box::new))
}

/// Continues the work of active teammates a stop left unfinished (REFERENCE c.9 extended;
/// "nothing accepted is lost"): a teammate that holds parked *wakeup* mail is woken (its
/// parked items run in order); every turn of a teammate that a crash cut or the user
/// cancelled (Ctrl-C/SIGTERM) gets exactly one continuation note asking it to check the
/// state and continue: a note an earlier resume queued counts even before it ran, and a
/// teammate the mailbox recovery already woke (its wakeup runs a turn of its own) is still
/// continued. A turn the Lead
/// interrupted on purpose (`{"kind":"parent"}`) is left alone. What each is owed is decided
/// from its log ([`crate::recovery::teammate_recovery`],
/// [`Transcript::owed_continuations`]). A teammate owed work whose lease another process
/// holds (a live worker hosting it: the Lead's process died and this one took the Team
/// over) is left to that holder and recorded as running there (`TeamJournal::placed`):
/// nothing is written for it here. With `hosts` placing (`--placement workers`,
/// [`MemberHosts::append_unhosted`]), a teammate owed work and held by nobody is continued
/// on a live eligible worker when one takes it ([`continue_placed`]), else here; `hosts`
/// `None` (or placing locally) continues every one here.
pub(super) async fn continue_teammates(
    journal: &TeamJournal,
    lifecycle: &Lifecycle,
    control: &dyn ChildControl,
    hosts: Option<&dyn MemberHosts>,
    only: Option<&SessionId>,
) {
    let (members, wakeups): (Vec<SessionId>, HashSet<MessageId>) = {
        let state = journal.enter().await;
        (
            state
                .members()
                .iter()
                .filter(|m| m.phase == MemberPhase::Active && only.is_none_or(|id| m.id == *id))
                .map(|m| m.id.clone())
                .collect(),
            state
                .messages()
                .iter()
                .filter(|m| m.delivery == Delivery::Wakeup)
                .map(|m| m.id.clone())
                .collect(),
        )
    };
    for id in members {
        if lifecycle.is_stopping() {
            return;
        }
        let resident = control.agent(&id).is_some();
        let plan = match control.agent(&id) {
            // Resident already (the mailbox recovery delivered wakeup mail to it, or the
            // Lead's new work reached it): it is running or has run, and its cold resume
            // closed the turn the stop cut. What it is owed is read from its live
            // transcript, which is the fold of its log; its open turn, if any, is running.
            Some(agent) => TeammateRecovery {
                wake: false,
                notes: agent.with_transcript(|t| {
                    t.owed_continuations(ContinuationRule::Teammate, OpenTurn::Running)
                }),
            },
            None => {
                let Some(t) = stored_transcript(journal.store(), &id) else {
                    continue;
                };
                // What `list_agents` shows for it while it is not live.
                if let Some(config) = t.config() {
                    control.remember_model(&id, config);
                }
                let plan = teammate_recovery(&t, &wakeups);
                // Held by another live process (a worker hosting it while its Lead's process
                // died and this one took the Team over, DESIGN §7 "Failover"): it keeps
                // running there, calling this Team's service; it is left to its holder and
                // recorded as running there, so the run waits for it. A holder that died
                // stops reporting, and once its lease is free the Team continues the member
                // here (`TeamService::watch_elsewhere`).
                if (plan.notes > 0 || plan.wake)
                    && let Ok(Some(holder)) = journal.store().holder(&id)
                {
                    tracing::info!(teammate = %id, %holder, "held by a live process: left to it");
                    journal.placed(&id, &holder, std::time::Instant::now());
                    continue;
                }
                // Placed as the run places (`--placement workers`): continued on a live
                // eligible worker, as a dead host's teammate is ([`take_over`] steps 1–2).
                if (plan.notes > 0 || plan.wake)
                    && let Some(hosts) = hosts.filter(|h| h.append_unhosted())
                {
                    match continue_placed(journal, control, hosts, &id, plan.notes).await {
                        Placement::Placed => continue,
                        Placement::Here(Some(t)) => teammate_recovery(&t, &wakeups),
                        Placement::Here(None) => continue,
                    }
                } else {
                    plan
                }
            }
        };
        // A teammate this recovery starts again gets its pending quiet mail first (the
        // mailbox pass left it queued while the teammate was inactive): a teammate's own
        // start delivers all its pending mail (REFERENCE c.9 mailbox recovery, c.10 porting
        // note), so the message is in its history before the continuation note.
        if !resident && (plan.notes > 0 || plan.wake) {
            let parts = Dispatcher {
                journal,
                lifecycle,
                control,
                hosts: None,
            };
            deliver_pending_quiet(parts, &id).await;
        }
        let mut result = Ok(());
        for _ in 0..plan.notes {
            let note = continuation_note();
            result = control
                .follow_up(journal.lead(), &id, note)
                .await
                .map(|_| ());
            if result.is_err() {
                break;
            }
        }
        if plan.notes == 0 && plan.wake {
            result = control.wake(journal.lead(), &id).await.map(|_| ());
        }
        if let Err(e) = result
            && !lifecycle.is_closed()
        {
            super::mailbox::continuation_failed(journal, control, &id, &e).await;
        }
    }
}
