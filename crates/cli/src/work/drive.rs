//! Driving the runtime for `troupe run` / `troupe resume`: the tokio runtime built, the Lead
//! started (or reopened and given what its [`ResumePlan`](troupe_runtime::ResumePlan) decides),
//! progress shown until every agent is idle or inactive, Ctrl-C / SIGTERM / SIGHUP turned into
//! keep-inbox cancels, and — whatever happened once the agent runtime exists — the runtime shut
//! down before the process exits, so inboxes are parked and every log is flushed (DESIGN
//! decision 2). Then [`super::report`] prints the outcome.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use serde_json::json;
use tokio::signal::unix::{Signal, SignalKind};
use tokio::sync::{broadcast, mpsc};
use troupe_journal::JournalError;
use troupe_llm::ProviderKind;
use troupe_mcp::McpServers;
use troupe_protocol::{MessageSource, SessionId, UserMessage};
use troupe_runtime::ledger::LiveLedger;
use troupe_runtime::team::crash_left_work;
use troupe_runtime::{
    Agent, AgentProgress, ChunkPolicy, JOURNAL_FAILED, LeadLog, LeadRead, Progress, ResumeStarted,
    ResumeStep, Runtime, RuntimeError, RuntimeOptions, deliver_budget_notice,
    give_due_budget_notice, record_model_override,
};
use troupe_session::Transcript;
use troupe_session::events::Profile;
use troupe_tools::ToolLimits;

use super::config::{Start, WorkConfig};
use super::model::LEAD;
use super::report::{Driven, report};
use crate::approve::Prompts;
use crate::control::{ControlNote, ControlServer, NatsControl};
use crate::exit::Failure;
use crate::progress::{Board, OutputMode, Printer};
use troupe_store_nats::{NatsMemberHosts, StatusListener, TeamOpServer, UsageRelay};

/// How long the first Ctrl-C waits for the cancelled turn to close before shutting down anyway.
const INTERRUPT_GRACE: Duration = Duration::from_secs(15);

/// How long the final shutdown (parking inboxes, flushing logs) may take.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(30);

/// Builds the tokio runtime and runs the work on it.
pub(super) fn execute(config: WorkConfig) -> Result<(), Failure> {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// Whether, and how, a signal stopped the run.
enum Interrupt {
    /// No signal.
    None,
    /// Ctrl-C once: the turn was cancelled (inbox kept) and closed.
    Graceful,
    /// Ctrl-C twice: stop waiting for the cancelled turn to close.
    Forced,
    /// No signal: this process lost the Lead's lease on a NATS store (DESIGN §7), so it
    /// stopped waiting; the run fails with `JOURNAL_LEASE_LOST`.
    LeaseLost,
}

async fn work(mut config: WorkConfig) -> Result<(), Failure> {
    // Installed first, so a Ctrl-C from here on interrupts the turn instead of killing us.
    let mut sigint = Interrupts::install().map_err(Failure::work)?;
    // Started once for the process, before any member runs; their tools are every member's.
    let (mcp, notes) = crate::mcp::start(
        config.mcp.as_ref(),
        config.workspace.clone(),
        config.sandbox,
        config.start.lead_temp_dir(),
        config.secret_env.clone(),
    )
    .await;
    config.framing.prologue.extend(notes);
    let ledger = Arc::new(LiveLedger::new(config.budget, config.prices.clone()));
    // A resumed Team's ledger starts from what every member's log holds (and whether the Lead
    // was given its budget notice), before any member runs again.
    if config.team
        && let Start::Resume { id, .. } = &config.start
        && let Ok(lead) = LeadLog::read(&config.store.journal, id, LeadRead::Team)
    {
        for (_, member, usage) in lead.member_usage(&config.store.journal) {
            if let Ok(usage) = usage {
                ledger.seed(&member, &usage);
            }
        }
    }
    let runtime = Runtime::new(
        config.store.journal.clone(),
        RuntimeOptions {
            workspace: config.workspace.clone(),
            models: Arc::clone(&config.models) as _,
            model_spec: config.spec.clone(),
            teammate_models: config.teammate_models.clone(),
            project_instructions: config.project_instructions.clone(),
            chunks: ChunkPolicy::default(),
            tool_limits: ToolLimits::default(),
            max_depth: 1,
            team_limits: config.team_limits,
            stall_after: config.stall_after,
            extra_tools: mcp.tools(),
            secret_env: config.secret_env.clone(),
            secrets: config.secrets.clone(),
            sandbox: config.sandbox,
            mcp_servers: config.mcp.as_ref().map(McpServers::to_record),
            approval: config.approval,
            ledger: Arc::clone(&ledger),
            worktree_root: config.worktree_root.clone(),
            placement: config.placement.into(),
        },
    );
    // On a NATS store, mail to a teammate hosted by another process goes through the holder
    // of its lease (`troupe.deliver.<id>`, DESIGN §7 "Delivery across processes").
    // With `--placement workers`, a woken teammate nobody hosts is placed on a live worker.
    // Lines for the user from the Team's machinery (placement warnings, takeover notices,
    // the control servers' notes): printed by the printer, which erases its live area first,
    // so no line lands inside it.
    let (notes_tx, mut notes) = mpsc::unbounded_channel();
    if let Some(nats) = config.store.nats_backend() {
        // A teammate whose worker died is taken over (re-placed, or continued here): a
        // notice on stderr says where.
        let tx = notes_tx.clone();
        let notices: troupe_store_nats::Warnings = Arc::new(move |line: &str| {
            let _ = tx.send(ControlNote::Line(format!("troupe: {line}")));
        });
        let tx = notes_tx.clone();
        let warnings: troupe_store_nats::Warnings = Arc::new(move |line: &str| {
            let _ = tx.send(ControlNote::Line(format!("troupe: warning: {line}")));
        });
        let hosts = match config.placement {
            super::flags::Placement::Local => {
                NatsMemberHosts::new(nats.clone(), false).with_notices(Arc::clone(&notices))
            }
            super::flags::Placement::Workers => {
                let lead = troupe_store_nats::WorkspaceIdentity::of(&config.workspace)
                    .with_context(|| format!("workspace {}", config.workspace.display()))
                    .map_err(Failure::work)?;
                // A worker holds the teammates it hosts to the Team's budget (its own ledger of
                // the Team, kept current over `troupe.usage.<lead>`: the relay below).
                NatsMemberHosts::placing(nats.clone(), lead)
                    .with_budget(config.budget, config.prices.clone())
                    .with_warnings(warnings)
                    .with_notices(notices)
            }
        };
        runtime.teams().set_member_hosts(Arc::new(hosts));
    }
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
    let mut prompts = Prompts::new();
    let driven = drive(
        &runtime,
        &config,
        &mut printer,
        &mut events,
        &mut sigint,
        &mut prompts,
        (notes_tx, &mut notes),
    )
    .await;
    // Always: park inboxes, end running turns, flush every log.
    let shutdown = tokio::time::timeout(SHUTDOWN_LIMIT, runtime.shutdown()).await;
    let _ = tokio::time::timeout(crate::mcp::STOP_LIMIT, mcp.shutdown()).await;
    while let Ok(event) = events.try_recv() {
        printer.progress(&event);
    }
    // Lines that came after the last wait (a placement in the shutdown): shown, not lost.
    while let Ok(note) = notes.try_recv() {
        if let ControlNote::Line(line) = note {
            printer.note(&line);
        }
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
    // So does a lost Lead lease (the store gone past the TTL): the teardown then times out
    // on the unreachable store, and the lease's failure line, with the resume hint, says why.
    if let Some(teardown) = teardown
        && log_failures.is_empty()
        && driven.lease_lost.is_none()
    {
        return Err(Failure::work(teardown));
    }
    report(&driven, &config, &mut printer, &log_failures)
}

/// Starts (or reopens) the Lead, gives it its work, and shows progress until quiescence.
async fn drive(
    runtime: &Runtime,
    config: &WorkConfig,
    printer: &mut Printer,
    events: &mut broadcast::Receiver<AgentProgress>,
    sigint: &mut Interrupts,
    prompts: &mut Prompts,
    (notes_tx, notes): (
        mpsc::UnboundedSender<ControlNote>,
        &mut mpsc::UnboundedReceiver<ControlNote>,
    ),
) -> Result<Driven, Failure> {
    // The model as it runs: a recorded demo script whose home is gone is read from this
    // home's copy (`script::script_here`), and named so.
    let model = match config.spec.provider {
        troupe_llm::ProviderKind::Script => {
            let recorded = std::path::Path::new(&config.spec.model);
            crate::script::script_here(recorded, &config.home_dir).map_or_else(
                || config.spec.to_string(),
                |here| format!("script:{}", here.display()),
            )
        }
        _ => config.spec.to_string(),
    };
    let (Start::New { id: root, .. } | Start::Resume { id: root, .. }) = &config.start;
    printer.set_approval_hints(root.clone(), &config.home_args, prompts.answers_here());
    // A resume whose Lead has nothing to run but whose Team has work (see below): why.
    let mut team_work = None;
    let (agent, id, turn_before, started) = match &config.start {
        Start::New { id, prompt } => {
            let id = id.clone();
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
                .await
                .map_err(|e| create_error(&id, config.store.is_nats(), e))?;
            printer.session_started(&id, false, &model);
            for line in &config.framing.prologue {
                printer.note(line);
            }
            // The prompt is the Lead's work; no other agent exists yet.
            let started = ResumeStarted {
                lead_runs: true,
                others_run: false,
            };
            (agent, id, 0, started)
        }
        Start::Resume { id, prompt, plan } => {
            // What a crash left the Team to do after its Lead's last turn completed
            // (`crash_left_work`, the rule `troupe worker --adopt` uses), read before the
            // recovery carries it on: such a resume is not "nothing to resume".
            let left = if plan.is_team() && prompt.is_none() {
                crash_left_work(&config.store.journal, id).ok().flatten()
            } else {
                None
            };
            let mut announced = false;
            let resumed = resume_answering(
                runtime,
                id,
                Answering {
                    printer: &mut *printer,
                    events: &mut *events,
                    sigint: &mut *sigint,
                    prompts: &mut *prompts,
                },
                &mut announced,
                &model,
            )
            .await;
            let (agent, recovered, held) = match resumed {
                Ok(resumed) => resumed,
                Err(ResumeStop::Failed(e)) => {
                    return Err(resume_error(id, &config.store, &config.home_args, e));
                }
                Err(ResumeStop::Interrupted) => {
                    return Err(Failure::work(anyhow!(
                        "interrupted while the resume waited for an approval (the request stays \
                         pending) — continue with: troupe resume {id}{}",
                        config.home_args
                    )));
                }
            };
            if !announced {
                printer.session_started(id, true, &model);
            }
            for line in &config.framing.prologue {
                printer.note(line);
            }
            // What the agents reported while the recovery ran, after the prologue (as before).
            for event in held {
                printer.progress(&event);
                prompts.on_progress(&event, printer);
            }
            let mcp = config.mcp.as_ref().map(McpServers::to_record);
            record_model_override(
                &agent,
                &config.spec,
                config.sandbox,
                mcp,
                config.teammate_override.as_ref(),
                config.approval,
            )
            .await?;
            if recovered {
                printer.note(
                    "recovered: the previous run stopped in the middle of a turn; it was closed \
                     as interrupted (see troupe log)",
                );
            }
            let step = plan.next_step(&agent, prompt.clone());
            match &step {
                ResumeStep::Continue {
                    why,
                    turns,
                    waiting_first,
                } => {
                    if *waiting_first {
                        printer.note("running the messages that were waiting in the inbox first");
                    }
                    if *turns == 1 {
                        printer.note(&format!("continuing: the last turn did not finish ({why})"));
                    } else {
                        printer.note(&format!(
                            "continuing: {turns} turns did not finish (the last: {why}), each \
                             gets a continuation turn"
                        ));
                    }
                }
                ResumeStep::RunWaiting => {
                    printer.note("running the messages that were waiting in the inbox");
                }
                ResumeStep::RecoveryStarted => {
                    printer.note("running the messages the recovery delivered");
                }
                ResumeStep::Prompt(_) | ResumeStep::Nothing => {}
            }
            let lead_idle = matches!(step, ResumeStep::Nothing);
            let started = step
                .take(runtime, &agent)
                .await
                .map_err(|e| resume_error(id, &config.store, &config.home_args, e))?;
            if lead_idle && let Some(why) = &left {
                printer.note(&format!(
                    "continuing the Team: the Lead's last turn completed, but a crash left its \
                     Team's work unfinished ({why})"
                ));
            }
            team_work = lead_idle.then_some(left).flatten().or_else(|| {
                (!started.lead_runs && started.others_run)
                    .then(|| "teammates had work left".to_owned())
            });
            // Turns that the recovery's redelivered mail already started count as this run's.
            (agent, id.clone(), plan.last_turn(), started)
        }
    };
    // The Lead's one budget notice, when the Team's spending reaches 80 % of its budget.
    if config.budget.is_set() {
        tokio::spawn(deliver_budget_notice(
            Arc::clone(&runtime.options().ledger),
            agent.clone(),
        ));
    }
    if !started.lead_runs && started.others_run {
        printer.note("teammates have work left: running until they are done");
    }
    // A Team takes messages from the user (`troupe send`, `troupe chat`) while it runs: on
    // its control socket, and on a NATS store on its control subject too.
    // On a NATS store the Lead's lease may be lost while the run waits for its Team (no Lead
    // turn appends to notice it): watched here, it stops the wait and fails the run.
    let lost_reason = Arc::new(std::sync::Mutex::new(None));
    let lease_watch = config.store.nats_backend().map(|nats| {
        tokio::spawn(watch_lease(
            nats.clone(),
            id.clone(),
            notes_tx.clone(),
            Arc::clone(&lost_reason),
        ))
    });
    let (server, nats_server) = if runtime.teams().team(&id).is_some() {
        let server = match ControlServer::start(
            &config.home_dir,
            runtime.clone(),
            id.clone(),
            notes_tx.clone(),
        ) {
            Ok(server) => Some(server),
            Err(e) => {
                printer.note(&format!(
                    "troupe: note: the control socket {} could not be served ({e}): troupe \
                         send cannot reach this run through it{}",
                    crate::control::socket_path(&config.home_dir, &id).display(),
                    if config.store.is_nats() {
                        " (it still can over NATS)"
                    } else {
                        ", and appends to the Team once it has stopped"
                    }
                ));
                None
            }
        };
        let nats_server = match config.store.nats_backend() {
            Some(nats) => {
                match NatsControl::start(nats, runtime.clone(), id.clone(), notes_tx).await {
                    Ok(server) => Some(server),
                    Err(e) => {
                        printer.note(&format!(
                        "troupe: note: the control subject {} could not be served ({e}): troupe \
                         send from another home or host cannot reach this run, and appends to \
                         the Team once it has stopped",
                        troupe_store_nats::NatsBackend::control_subject(&id)
                    ));
                        None
                    }
                }
            }
            None => None,
        };
        (server, nats_server)
    } else {
        (None, None)
    };
    // On a NATS store the Team's serializer also answers the Team tool calls of teammates
    // hosted by other processes (`troupe.team.<lead-id>.op`, DESIGN §7), for as long as this
    // process runs the Team (it holds the Lead's lease meanwhile).
    let team_service = match config.store.nats_backend() {
        Some(nats) if runtime.teams().team(&id).is_some() => {
            match TeamOpServer::start(nats, runtime.clone(), id.clone()).await {
                Ok(served) => Some(served),
                Err(e) => {
                    printer.note(&format!(
                        "troupe: note: the Team service subject {} could not be served ({e}): \
                         teammates hosted by other processes cannot reach this Team",
                        troupe_store_nats::NatsBackend::team_subject(&id)
                    ));
                    None
                }
            }
        }
        _ => None,
    };
    // ... and records the status edges of teammates hosted by other processes
    // (`troupe.status.<lead-id>`), for `list_agents` and `wait_agent`.
    let status_listener = match config.store.nats_backend() {
        Some(nats) if runtime.teams().team(&id).is_some() => {
            match StatusListener::start(nats, runtime.clone(), &id).await {
                Ok(listener) => Some(listener),
                Err(e) => {
                    printer.note(&format!(
                        "troupe: note: the status subject {} could not be read ({e}): \
                         wait_agent does not see teammates hosted by other processes",
                        troupe_store_nats::NatsBackend::status_subject(&id)
                    ));
                    None
                }
            }
        }
        _ => None,
    };
    // ... and, with a budget, counts the usage of members other processes run
    // (`troupe.usage.<lead-id>`) and publishes its own, so every process refuses once the
    // Team's whole spending reaches the budget.
    let _usage_relay = match config.store.nats_backend() {
        Some(nats) if config.budget.is_set() && runtime.teams().team(&id).is_some() => {
            match UsageRelay::start(nats, &id, Arc::clone(&runtime.options().ledger)).await {
                Ok(relay) => Some(relay),
                Err(e) => {
                    printer.note(&format!(
                        "troupe: note: the usage subject {} could not be read ({e}): the \
                         budget counts this process's members only",
                        troupe_store_nats::NatsBackend::usage_subject(&id)
                    ));
                    None
                }
            }
        }
        _ => None,
    };
    let mut interrupt = if started.any() {
        wait(runtime, &agent, printer, events, sigint, prompts, notes).await
    } else {
        Interrupt::None
    };
    let serving = server.is_some() || nats_server.is_some();
    if serving {
        // No new message once the work is done; the ones being answered still are, and a
        // wakeup among them may have started a turn: the run waits for it too.
        if let Some(nats_server) = nats_server {
            // Bounded: with the store gone its unsubscribe would wait for it to come back.
            let _ = tokio::time::timeout(STOP_SERVING_LIMIT, nats_server.stop()).await;
        }
        if let Some(server) = server {
            server.stop().await;
        }
        while let Ok(note) = notes.try_recv() {
            match note {
                ControlNote::Line(line) => printer.note(&line),
                ControlNote::LeaseLost(_) if interrupt == Interrupt::None => {
                    interrupt = Interrupt::LeaseLost;
                }
                _ => {}
            }
        }
        if interrupt == Interrupt::None {
            interrupt = wait(runtime, &agent, printer, events, sigint, prompts, notes).await;
        }
    }
    if let Some(watch) = lease_watch {
        watch.abort();
    }
    let lease_lost = if interrupt == Interrupt::LeaseLost {
        config
            .store
            .nats_backend()
            .and_then(|nats| nats.lease_lost(&id))
            .or_else(|| troupe_protocol::sync::lock(&lost_reason).clone())
    } else {
        None
    };
    // The Team's work is done: callers from other processes find no responder from here on
    // and retry at the Lead's next holder.
    if let Some(team_service) = team_service {
        // Bounded, as the control subject's stop above.
        let _ = tokio::time::timeout(STOP_SERVING_LIMIT, team_service.stop()).await;
    }
    drop(status_listener);
    // A notice that became due is in the Lead's log before the run ends.
    give_due_budget_notice(&runtime.options().ledger, &agent).await;
    Ok(Driven {
        agent,
        ledger: Arc::clone(&runtime.options().ledger),
        id,
        turn_before,
        nothing_to_do: !started.lead_runs,
        interrupted: !matches!(interrupt, Interrupt::None | Interrupt::LeaseLost),
        lease_lost,
        team_work,
    })
}

/// How long the stop of a NATS subscription that served the run (the control subject, the
/// Team service) may take: its unsubscribe waits for the server, which may be gone.
const STOP_SERVING_LIMIT: Duration = Duration::from_secs(3);

/// Sends [`ControlNote::LeaseLost`] on `notes` (its reason also in `lost`) once this
/// process's lease on the Lead `id` is lost ([`troupe_store_nats::NatsBackend::lease_lost`],
/// looked at every 250 ms), its writer let go of it (its log failed), or another process
/// took it
/// ([`troupe_store_nats::NatsBackend::lease_taken_over`], asked of the bucket every second:
/// a process stalled past the TTL learns it there when it wakes), then ends.
async fn watch_lease(
    nats: troupe_store_nats::NatsBackend,
    id: SessionId,
    notes: mpsc::UnboundedSender<ControlNote>,
    lost: Arc<std::sync::Mutex<Option<String>>>,
) {
    let mut ticker = tokio::time::interval(Duration::from_millis(250));
    let mut ticks: u32 = 0;
    let mut kept = false;
    loop {
        ticker.tick().await;
        ticks = ticks.wrapping_add(1);
        // A writer whose log failed (e.g. woken after a stall past the TTL) drops its lease:
        // held before and not now is lost too.
        let was_kept = std::mem::replace(&mut kept, nats.lease_kept(&id));
        let reason = match nats.lease_lost(&id) {
            Some(reason) => Some(reason),
            None if was_kept && !kept => Some(
                "this process's writer of the Lead's log let go of its lease (its log failed)"
                    .to_owned(),
            ),
            // Bounded: with the server gone the request would wait for it to come back,
            // and the watch must go on looking at the renewal's own verdict meanwhile.
            None if ticks.is_multiple_of(4) => {
                tokio::time::timeout(Duration::from_millis(500), nats.lease_taken_over(&id))
                    .await
                    .ok()
                    .flatten()
            }
            None => None,
        };
        if let Some(reason) = reason {
            *troupe_protocol::sync::lock(&lost) = Some(reason.clone());
            let _ = notes.send(ControlNote::LeaseLost(reason));
            return;
        }
    }
}

/// What the resume's answering loop holds while the recovery runs.
struct Answering<'a> {
    printer: &'a mut Printer,
    events: &'a mut broadcast::Receiver<AgentProgress>,
    sigint: &'a mut Interrupts,
    prompts: &'a mut Prompts,
}

/// Why a resume did not get its Lead.
enum ResumeStop {
    Failed(RuntimeError),
    Interrupted,
}

/// Runs [`Runtime::resume_root`] while answering what its recovery asks: a request a crash
/// left pending is asked again there (and the recovery waits for it), so approval events are
/// shown — after `session <id>` — and answered at this terminal at once; every other event is
/// held and returned, to be shown after the resume's prologue as before. A signal stops the
/// resume where it is (its log is as a crash at that point would leave it: the request stays
/// pending).
async fn resume_answering(
    runtime: &Runtime,
    id: &SessionId,
    on: Answering<'_>,
    announced: &mut bool,
    model: &str,
) -> Result<(Agent, bool, Vec<AgentProgress>), ResumeStop> {
    let Answering {
        printer,
        events,
        sigint,
        prompts,
    } = on;
    let mut held = Vec::new();
    let resuming = runtime.resume_root(id);
    tokio::pin!(resuming);
    let mut events_open = true;
    loop {
        tokio::select! {
            biased;
            resumed = &mut resuming => {
                return resumed
                    .map(|(agent, recovered)| (agent, recovered, held))
                    .map_err(ResumeStop::Failed);
            }
            received = events.recv(), if events_open => match received {
                Ok(event) => {
                    let asks = matches!(
                        event.progress,
                        Progress::ApprovalRequested { .. } | Progress::ApprovalDecided { .. }
                    );
                    if asks {
                        if !*announced {
                            printer.session_started(id, true, model);
                            *announced = true;
                        }
                        printer.progress(&event);
                        prompts.on_progress(&event, printer);
                    } else {
                        held.push(event);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(skipped)) => printer.lagged(skipped),
                Err(broadcast::error::RecvError::Closed) => events_open = false,
            },
            Some(line) = prompts.next_line() => {
                prompts.answer(&line, runtime, printer).await;
            }
            _ = sigint.recv() => return Err(ResumeStop::Interrupted),
        }
    }
}

/// A session whose creating write failed (a full disk, an I/O error) was never published: the
/// batch that creates the file is written to a staging file, linked into place only once it is
/// durable, and the staging file is removed. So nothing was recorded, and the command can be
/// run again once the cause is fixed: `JOURNAL_FAILED` (exit 1) with the write's own OS error —
/// not the writer's "poisoned by an earlier failure", which names a failure the user never saw.
///
/// The advice names what to fix where the log is: on files `free space (or fix the home)`, on
/// a NATS store `free space on the server (or make it reachable)`.
fn create_error(id: &SessionId, nats: bool, error: RuntimeError) -> Failure {
    let cause = match &error {
        RuntimeError::Journal(JournalError::Poisoned { cause, .. }) => cause.clone(),
        RuntimeError::Journal(io @ JournalError::Io { .. }) => io.to_string(),
        _ => return error.into(),
    };
    let fix = if nats {
        "free space on the server (or make it reachable)"
    } else {
        "free space (or fix the home)"
    };
    Failure::work(anyhow!(
        "{JOURNAL_FAILED}: session {id} could not be created: {cause}; nothing was recorded: \
         {fix} and run the command again"
    ))
}

/// A lock held by another process is bad input with its own words; a Lead log that breaks a
/// Team rule is a damaged log (exit 1) and names its file.
fn resume_error(
    id: &SessionId,
    store: &crate::store::Store,
    home_args: &str,
    error: RuntimeError,
) -> Failure {
    match error {
        // The Lead's own log failed while the resume reopened it (a disk still full, a lost
        // lease): the run's log failure, with what to fix, as when it fails later.
        RuntimeError::Journal(
            ref e @ (JournalError::Poisoned { .. }
            | JournalError::Io { .. }
            | JournalError::LeaseLost { .. }),
        ) => {
            let text = e.to_string();
            let fix = super::report::log_failure_fix(
                std::iter::once(text.as_str()),
                matches!(e, JournalError::LeaseLost { .. }),
                store.is_nats(),
            );
            Failure::work(anyhow!(
                "JOURNAL_FAILED: the Lead's log (session {id}) failed: {text}; once the cause is \
                 fixed ({fix}), continue with: troupe resume {id}{home_args}"
            ))
        }
        RuntimeError::Journal(JournalError::Locked { .. }) => Failure::bad_input(anyhow!(
            "session is locked by another process: a troupe run or troupe resume of {id} is \
             still running"
        )),
        RuntimeError::Journal(JournalError::Leased { holder, store, .. }) => {
            Failure::bad_input(anyhow!(
                "session {id} is locked by {holder} (its lease on {store}): a troupe run or \
                 troupe resume of it is still running there; a holder that died frees it once \
                 its lease expires (JOURNAL_LOCKED)"
            ))
        }
        team @ RuntimeError::TeamLog { .. } => {
            let file = store.location(id);
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
    prompts: &mut Prompts,
    notes: &mut mpsc::UnboundedReceiver<ControlNote>,
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
                    prompts.on_progress(&event, printer);
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
            Some(note) = notes.recv() => match note {
                ControlNote::Line(line) => printer.note(&line),
                // troupe chat's Ctrl-C / Ctrl-D: as a first Ctrl-C here (a second one is not
                // needed to stop waiting: the grace period bounds it).
                ControlNote::Interrupt if interrupt == Interrupt::None => {
                    interrupt = Interrupt::Graceful;
                    printer.note("interrupting: troupe chat asked to stop the running turns");
                    interrupt_all(runtime, agent, printer).await;
                    grace = Some(Box::pin(tokio::time::sleep(INTERRUPT_GRACE)));
                }
                ControlNote::Interrupt => {}
                ControlNote::LeaseLost(_) => {
                    interrupt = Interrupt::LeaseLost;
                    break;
                }
            },
            () = &mut quiescent => {
                show_board(runtime, agent, printer).await;
                break;
            }
            Some(line) = prompts.next_line() => {
                prompts.answer(&line, runtime, printer).await;
            }
            _ = sigint.recv() => {
                if interrupt != Interrupt::None {
                    printer.note("interrupted again: not waiting for the turn to close");
                    interrupt = Interrupt::Forced;
                    break;
                }
                interrupt = Interrupt::Graceful;
                printer.note("interrupting: stopping the current turn (Ctrl-C again to stop waiting)");
                interrupt_all(runtime, agent, printer).await;
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

/// Halts the Teams (a Team call finishing meanwhile has its mail queued, not delivered: it
/// wakes nobody), cancels the Lead's turn and every other live agent's, keeping their
/// inboxes — and asks the workers hosting the Team's running teammates to cancel theirs
/// likewise (bounded by the grace period): anything queued stays parked for `troupe resume`.
async fn interrupt_all(runtime: &Runtime, agent: &Agent, printer: &mut Printer) {
    // First, so a member finishing a tool call meanwhile (here or on a worker) delivers to
    // nobody and places nobody: its mail stays queued for the resume.
    runtime.teams().halt_all();
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
    // Teammates on workers stop too (their holders cancel them as above), so none of them
    // goes on and wakes the Lead into a new turn after the user stopped the run.
    let cause = troupe_runtime::team::InterruptCause::User;
    for warning in runtime.teams().stop_elsewhere(cause, INTERRUPT_GRACE).await {
        printer.note(&format!("troupe: {warning}"));
    }
}

/// Reports the board of `lead`'s Team, if it leads one.
async fn show_board(runtime: &Runtime, lead: &Agent, printer: &mut Printer) {
    if let Some(team) = runtime.teams().team(lead.id()) {
        let state = team.snapshot().await;
        printer.team(Board::of(&state, &team.hosted_elsewhere()));
    }
}
