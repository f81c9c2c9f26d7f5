//! `troupe worker`: a process that hosts teammates of Teams whose Lead runs in another
//! process, on a NATS store (DESIGN §7 "Workers and placement", issue 14 item 2).
//!
//! It registers in `TROUPE_WORKERS` (name, free slots, workspace identity; renewed as its
//! heartbeat) and answers `troupe.worker.<name>.host {session}`: it takes the teammate's
//! lease, cold-resumes it from the store as `troupe resume` would (its recorded
//! configuration and model, crash recovery of an open turn first), gives it the Team tools of
//! its Lead's process (`RemoteTeam` over `troupe.team.<lead>.op`), wakes its parked inbox and
//! runs it until it settles; then the teammate is released (inbox parked, lease released)
//! and the slot is free again. Meanwhile it accepts the teammate's mail
//! (`troupe.deliver.<id>`) and publishes its status edges (`troupe.status.<lead>`).
//! A request that carries the Team's budget gives the teammate the worker's ledger of that
//! Team (seeded from every member's log, kept current by `troupe.usage.<lead>`), so it is held
//! to the Team's whole spending like a member of the Lead's process.
//! Ctrl-C / SIGTERM / SIGHUP: no new teammate is taken, the running turns are cancelled with their
//! inboxes kept and every member is parked — as `troupe run` does — then it deregisters and
//! exits 0.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, anyhow};
use futures_util::StreamExt;
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};
use troupe_llm::{
    ClientOptions, LlmError, ModelProvider, ModelSpec, ModelSpecExt, ProviderFactory, ProviderKind,
};
use troupe_protocol::{ErrorCode, SessionId, sync::lock};
use troupe_runtime::ledger::LiveLedger;
use troupe_runtime::{Agent, ChunkPolicy, LeadLog, LeadRead, ModelSource, Runtime, RuntimeOptions};
use troupe_store_nats::{
    DeliveryServer, HostAnswer, HostRequest, HostedBudget, LinkOptions, NatsBackend, NatsTeamLink,
    RegisterError, StatusPublisher, UsageRelay, WORKER_VERSION, WorkerRecord, WorkerRegistration,
    WorkspaceIdentity,
};
use troupe_tools::ToolLimits;

use crate::exit::Failure;
use crate::home::Home;
use crate::output::eprint_line;

/// `troupe worker` flags.
#[derive(Debug, clap::Args)]
pub(crate) struct WorkerFlags {
    /// The workspace the hosted teammates work in: the Lead's checkout (shared or
    /// synchronised) or the same repository at the same commit (default: the current
    /// directory).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// How many teammates it hosts at once (1 to 1024).
    #[arg(long, value_name = "N", default_value_t = 1, allow_negative_numbers = true,
          value_parser = slots)]
    slots: u32,
    /// Its name in the registry and its subjects (1 to 64 letters, digits, `-`, `_`;
    /// default: HOST-PID).
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// An environment variable holding an API key a hosted teammate's model reads (as its
    /// `api_key_env`), kept out of its tools' environment and redacted from their output like
    /// DEEPSEEK_API_KEY and OPENAI_API_KEY (always kept). Repeatable. A teammate whose model
    /// reads another variable is refused (placement tries the next worker).
    #[arg(long = "secret-env", value_name = "VAR")]
    secret_env: Vec<String>,
    /// Also adopt Leads whose process died: a Team Lead on the store whose lease expired
    /// with work a crash left (its last turn cut by the stop, or — its own turn finished —
    /// teammates still running or owed work, as the logs show; not a Team that finished or
    /// was stopped on purpose) and whose workspace matches this worker's is resumed here —
    /// `troupe resume SID --placement workers`, one Lead per free slot, dying with the worker
    /// — as on another host after a crash. Of several adopters only one takes a Lead (its lease); the others back off.
    #[arg(long)]
    adopt: bool,
    #[command(flatten)]
    pace: crate::work::PaceArgs,
}

/// `--slots N`: 1 to 1024 (a negative or huge number is named as such).
fn slots(raw: &str) -> Result<u32, String> {
    const OUT: &str = "is not in 1..=1024";
    if raw.starts_with('-') && raw.len() > 1 && raw[1..].bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{raw} {OUT}"));
    }
    match crate::args::whole_number_at_most(raw, 1024, OUT)? {
        0 => Err(format!("{raw} {OUT}")),
        n => u32::try_from(n).map_err(|_| format!("{raw} {OUT}")),
    }
}

/// Runs the worker until Ctrl-C / SIGTERM.
pub(crate) fn run(flags: WorkerFlags, home: &Home<'_>) -> Result<(), Failure> {
    let Some(nats) = home.store.nats_backend().cloned() else {
        return Err(Failure::bad_input(anyhow!(
            "troupe worker needs a NATS store (--store nats://HOST:PORT or $TROUPE_STORE): it \
             hosts teammates of Teams whose Lead runs in another process"
        )));
    };
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let name = flags
        .name
        .unwrap_or_else(|| default_name(&host, std::process::id()));
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(Failure::bad_input(anyhow!(
            "worker name {name:?}: use 1 to 64 letters, digits, '-' and '_'"
        )));
    }
    let dir = flags.workspace.unwrap_or_else(|| PathBuf::from("."));
    let workspace = crate::work::check_workspace(&dir)?;
    let identity = WorkspaceIdentity::of(&workspace)
        .map_err(|e| Failure::bad_input(anyhow!("workspace {}: {e}", dir.display())))?;
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("troupe-worker")
        .enable_all()
        .build()
        .context("starting the async runtime")
        .map_err(Failure::work)?;
    let record = WorkerRecord {
        version: WORKER_VERSION,
        name,
        host,
        pid: std::process::id(),
        pid_namespace: troupe_store_nats::pid_namespace(),
        slots: flags.slots,
        free: flags.slots,
        workspace: identity,
        since: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    };
    for var in &flags.secret_env {
        let name = !var.is_empty()
            && !var.starts_with(|c: char| c.is_ascii_digit())
            && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name {
            return Err(Failure::bad_input(anyhow!(
                "--secret-env {var:?}: an environment variable name (letters, digits, '_'; not \
                 starting with a digit)"
            )));
        }
    }
    let models = WorkerModels::new(
        &flags.secret_env,
        flags.pace.millis(),
        std::path::absolute(&home.dir).unwrap_or_else(|_| home.dir.clone()),
    );
    let adopter = if flags.adopt {
        let exe = std::env::current_exe()
            .context("finding the troupe binary (to resume the Leads it adopts)")
            .map_err(Failure::work)?;
        Some(crate::adopt::Adopter::new(
            home.store.journal.clone(),
            nats.clone(),
            record.workspace.clone(),
            record.name.clone(),
            crate::adopt::AdoptCommand {
                exe,
                home: std::path::absolute(&home.dir).unwrap_or_else(|_| home.dir.clone()),
                url: nats.connect_url().to_owned(),
                pace: flags.pace.millis(),
            },
        ))
    } else {
        None
    };
    let result = tokio.block_on(serve(
        nats,
        home.store.journal.clone(),
        workspace,
        record,
        models,
        adopter,
    ));
    tokio.shutdown_timeout(Duration::from_secs(2));
    result
}

/// The models of the hosted teammates: a provider factory per model spec, built when a
/// teammate first runs it (API keys from this process's environment, scripts loaded and
/// paced by `--pace`). A model whose API key variable is not among [`WorkerModels::secret_env`]
/// is refused: its key would reach the tools' environment and output unredacted (the
/// runtime's secrets are fixed when it starts).
struct WorkerModels {
    factories: Mutex<Vec<(ModelSpec, Arc<ProviderFactory>)>>,
    /// The variables kept secret: the providers' defaults and every `--secret-env`.
    secret_env: Vec<String>,
    /// The wait before each scripted reply.
    pace: Duration,
    /// The worker's home (a demo script recorded under another home is found again here).
    home: PathBuf,
}

impl WorkerModels {
    fn new(extra_secret_env: &[String], pace_ms: Option<u64>, home: PathBuf) -> Self {
        let mut secret_env: Vec<String> = crate::work::PROVIDER_KEY_VARS
            .into_iter()
            .map(str::to_owned)
            .chain(extra_secret_env.iter().cloned())
            .collect();
        secret_env.sort();
        secret_env.dedup();
        Self {
            factories: Mutex::new(Vec::new()),
            secret_env,
            pace: Duration::from_millis(pace_ms.unwrap_or(0)),
            home,
        }
    }

    /// The variables kept secret and the non-empty values they hold here.
    fn secrets(&self) -> (Vec<String>, Vec<String>) {
        let values = self
            .secret_env
            .iter()
            .filter_map(|var| std::env::var(var).ok())
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect();
        (self.secret_env.clone(), values)
    }
}

impl ModelSource for WorkerModels {
    fn for_agent(&self, name: &str) -> Result<Arc<dyn ModelProvider>, LlmError> {
        Err(LlmError::Config {
            message: format!("{name} names no model (a worker runs each teammate's recorded one)"),
        })
    }

    fn for_member(&self, name: &str, spec: &ModelSpec) -> Result<Arc<dyn ModelProvider>, LlmError> {
        let mut factories = lock(&self.factories);
        if let Some((_, factory)) = factories.iter().find(|(s, _)| s == spec) {
            return factory.for_agent(name);
        }
        if let Some(var) = &spec.api_key_env
            && !self.secret_env.contains(var)
        {
            return Err(LlmError::Config {
                message: format!(
                    "the model {spec} of {name} reads its API key from {var}, which this worker \
                     does not keep secret: start the worker with --secret-env {var}"
                ),
            });
        }
        let config =
            crate::script::config_here(spec.resolve(&|var| std::env::var(var).ok())?, &self.home);
        let pace = if spec.provider == ProviderKind::Script {
            self.pace
        } else {
            Duration::ZERO
        };
        let factory = Arc::new(
            ProviderFactory::new(config, ClientOptions::default())?.with_script_pace(pace),
        );
        factories.push((spec.clone(), Arc::clone(&factory)));
        drop(factories);
        factory.for_agent(name)
    }
}

async fn serve(
    nats: NatsBackend,
    journal: troupe_journal::Journal,
    workspace: PathBuf,
    record: WorkerRecord,
    models: WorkerModels,
    mut adopter: Option<crate::adopt::Adopter>,
) -> Result<(), Failure> {
    let mut sigint = signal(SignalKind::interrupt())
        .context("installing the Ctrl-C handler")
        .map_err(Failure::work)?;
    let mut sigterm = signal(SignalKind::terminate())
        .context("installing the SIGTERM handler")
        .map_err(Failure::work)?;
    // A hang-up (its terminal closed, its session's leader gone) stops it as SIGTERM does:
    // members parked, not left to their leases' expiry.
    let mut sighup = signal(SignalKind::hangup())
        .context("installing the SIGHUP handler")
        .map_err(Failure::work)?;
    let name = record.name.clone();
    let slots = record.slots;
    let shown = record.workspace.path.clone();
    let registration = WorkerRegistration::register(&nats, record)
        .await
        .map_err(|e| match e {
            // Led by the stable code, as every failure's line is (README "Error codes").
            RegisterError::NameTaken { .. } => Failure::bad_input(anyhow!("{}: {e}", e.code())),
            RegisterError::Io { .. } => Failure::work(anyhow!("{}: {e}", e.code())),
        })?;
    let (secret_env, secrets) = models.secrets();
    let runtime = Runtime::new(
        journal,
        RuntimeOptions {
            workspace,
            models: Arc::new(models),
            // Never run: a hosted teammate runs the model its log records (its own, else
            // its Lead's).
            model_spec: ModelSpec {
                provider: ProviderKind::Script,
                model: String::new(),
                base_url: None,
                api_key_env: None,
                tool_choice: Default::default(),
            },
            teammate_models: Default::default(),
            project_instructions: None,
            chunks: ChunkPolicy::default(),
            tool_limits: ToolLimits::default(),
            max_depth: 1,
            team_limits: troupe_team::TeamLimits::default(),
            stall_after: troupe_team::StallAfter::default(),
            extra_tools: Vec::new(),
            secret_env,
            secrets,
            sandbox: troupe_tools::SandboxPolicy::default(),
            mcp_servers: None,
            approval: troupe_session::approval::ApprovalPolicy::default(),
            ledger: Default::default(),
            worktree_root: None,
            placement: Default::default(),
        },
    );
    let links = nats.clone();
    runtime.set_team_links(Arc::new(move |lead: &SessionId| {
        Arc::new(NatsTeamLink::new(
            links.clone(),
            lead.clone(),
            LinkOptions::default(),
        )) as Arc<dyn troupe_runtime::team::TeamLink>
    }));
    // The ledgers of the Teams with a budget whose teammates this worker hosts, by Lead.
    let ledgers: TeamLedgerMap = Arc::default();
    let of_team = Arc::clone(&ledgers);
    runtime.set_team_ledgers(Arc::new(move |lead: &SessionId| {
        lock(&of_team)
            .get(lead)
            .map(|(ledger, _)| Arc::clone(ledger))
    }));
    let failed = |what: &str, e: async_nats::Error| Failure::work(anyhow!("{what}: {e}"));
    let delivery = DeliveryServer::start(&nats, runtime.clone())
        .await
        .map_err(|e| failed("serving deliveries", e))?;
    let publisher = StatusPublisher::start(&nats, runtime.clone(), name.clone());
    let client = nats.client();
    let mut requests = client
        .subscribe(NatsBackend::worker_subject(&name))
        .await
        .map_err(|e| Failure::work(anyhow!("subscribing to the worker subject: {e}")))?;
    client
        .flush()
        .await
        .map_err(|e| Failure::work(anyhow!("subscribing to the worker subject: {e}")))?;
    eprint_line!(
        "troupe worker {name}: serving {} with {slots} slot{} (workspace {shown}){}; Ctrl-C stops",
        nats.url(),
        if slots == 1 { "" } else { "s" },
        if adopter.is_some() {
            ", adopting Leads whose process died"
        } else {
            ""
        }
    );
    // The hosted teammates' tool calls and turn ends, one plain line each (as `troupe run`
    // prints its own agents'; their counts start when this worker first hosts them).
    let mut events = runtime.subscribe_progress();
    let mut progress_open = true;
    let mut printer = crate::progress::Printer::new(crate::progress::OutputMode::Plain);
    let mut hosted: Vec<(Agent, bool)> = Vec::new();
    // The Lead of each teammate hosted here (kept while the worker runs: a few ids).
    let mut leads: HashMap<SessionId, SessionId> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
            _ = sighup.recv() => break,
            event = events.recv(), if progress_open => match event {
                Ok(event) => printer.progress(&event),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(skipped)) => {
                    printer.lagged(skipped);
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => progress_open = false,
            },
            _ = tick.tick() => {
                let before = hosted.len();
                release_settled(&runtime, &nats, &name, &mut hosted).await;
                let mut changed = hosted.len() != before;
                if let Some(adopter) = adopter.as_mut() {
                    let free = (slots as usize).saturating_sub(hosted.len() + adopter.adopted());
                    let hosting: HashSet<SessionId> = hosted
                        .iter()
                        .filter_map(|(agent, _)| leads.get(agent.id()).cloned())
                        .collect();
                    changed |= adopter.tick(free, &hosting).await;
                }
                if changed {
                    let free = free_slots(slots, hosted.len(), adopter.as_ref());
                    registration.set_free(free);
                    eprint_line!("troupe worker {name}: {free} of {slots} slots free");
                }
            }
            request = requests.next() => {
                let Some(request) = request else { break };
                let Some(reply) = request.reply.clone() else { continue };
                release_settled(&runtime, &nats, &name, &mut hosted).await;
                let answer = match serde_json::from_slice::<HostRequest>(&request.payload) {
                    Err(e) => HostAnswer::failed("INVALID_ARGUMENTS", format!("not a host request: {e}")),
                    Ok(r) if r.version != WORKER_VERSION => HostAnswer::failed(
                        "INVALID_ARGUMENTS",
                        format!("host request version {} (this worker speaks {WORKER_VERSION})", r.version),
                    ),
                    Ok(_) if free_slots(slots, hosted.len(), adopter.as_ref()) == 0 => HostAnswer::failed(
                        "WORKER_BUSY",
                        format!("worker {name} has no free slot ({slots} in use)"),
                    ),
                    Ok(r) => match host(&nats, &runtime, &ledgers, &r).await {
                        Ok(agent) => {
                            eprint_line!(
                                "troupe worker {name}: hosting {} ({})",
                                agent.setup().name,
                                r.session
                            );
                            // Its Lead, for the adopter (read once, from its log's header).
                            if adopter.is_some()
                                && let Ok(header) = runtime.journal().header(&r.session)
                                && let Some(lead) = header.parent_session
                            {
                                leads.insert(r.session.clone(), lead);
                            }
                            hosted.push((agent, false));
                            HostAnswer::hosted()
                        }
                        Err(answer) => answer,
                    },
                };
                registration.set_free(free_slots(slots, hosted.len(), adopter.as_ref()));
                let payload = serde_json::to_vec(&answer).unwrap_or_default();
                let _ = client.publish(reply, payload.into()).await;
                let _ = client.flush().await;
            }
        }
    }
    // No new teammate from here on; the hosted ones are parked (turns cancelled, inboxes
    // kept), their logs flushed and their leases released.
    // The stops that only talk to the server are bounded: with the server gone, an
    // unsubscribe or a deregistration would wait for it to come back (a worker stopped during
    // an outage hung until then); the registration then expires after its TTL by itself.
    let _ = tokio::time::timeout(STOP_LIMIT, requests.unsubscribe()).await;
    if let Some(adopter) = adopter {
        adopter.stop().await;
    }
    eprint_line!("troupe worker {name}: stopping: parking its members");
    let shutdown = runtime.shutdown().await;
    let _ = tokio::time::timeout(STOP_LIMIT, publisher.stop()).await;
    let _ = tokio::time::timeout(STOP_LIMIT, delivery.stop()).await;
    let _ = tokio::time::timeout(STOP_LIMIT, registration.deregister()).await;
    shutdown.map_err(|e| Failure::work(anyhow!("parking the hosted teammates: {e}")))
}

/// The most each of the worker's stops that only talk to the server (unsubscribing, the
/// status and delivery servers' stops, deregistering) may wait.
const STOP_LIMIT: Duration = Duration::from_secs(3);

/// Hosts `request`'s teammate ([`Runtime::host_teammate`]), held to its Team's budget when
/// the request carries one ([`hold_to_budget`] first).
///
/// # Errors
/// The answer to send back: [`hold_to_budget`]'s, or the hosting's error code and message.
async fn host(
    nats: &NatsBackend,
    runtime: &Runtime,
    ledgers: &TeamLedgerMap,
    request: &HostRequest,
) -> Result<troupe_runtime::Agent, HostAnswer> {
    hold_to_budget(nats, runtime, ledgers, request).await?;
    runtime
        .host_teammate(&request.session)
        .await
        .map_err(|e| HostAnswer::failed(e.code(), e.to_string()))
}

/// A worker's ledgers by Lead: the ledger of each Team with a budget it hosted a teammate of,
/// and the relay keeping it current.
type TeamLedgerMap = Arc<Mutex<HashMap<SessionId, (Arc<LiveLedger>, UsageRelay)>>>;

/// Before hosting `request`'s teammate: when the request carries the Team's budget, makes sure
/// this worker holds a ledger of that Team with that budget — subscribed to the Team's usage
/// reports first, then seeded from every member's log (see `troupe_store_nats::UsageRelay`
/// on what a report in between costs). A ledger with another budget or other prices (a
/// resume changed them) is replaced by a new one. Without a budget, nothing.
///
/// # Errors
/// The answer to send back: the teammate's or its Lead's log cannot be read
/// (`JOURNAL_*`), or the usage subject cannot be subscribed to (`STORE_IO`).
async fn hold_to_budget(
    nats: &NatsBackend,
    runtime: &Runtime,
    ledgers: &TeamLedgerMap,
    request: &HostRequest,
) -> Result<(), HostAnswer> {
    let Some(HostedBudget { budget, prices }) = &request.budget else {
        return Ok(());
    };
    let journal = runtime.journal();
    let header = journal
        .header(&request.session)
        .map_err(|e| HostAnswer::failed(e.code(), e.to_string()))?;
    let Some(lead) = header.parent_session else {
        return Ok(());
    };
    if let Some((ledger, _)) = lock(ledgers).get(&lead)
        && ledger.budget() == *budget
        && ledger.prices() == prices
    {
        return Ok(());
    }
    let ledger = Arc::new(LiveLedger::new(*budget, prices.clone()).without_notice());
    let relay = UsageRelay::start(nats, &lead, Arc::clone(&ledger))
        .await
        .map_err(|e| {
            HostAnswer::failed(
                "STORE_IO",
                format!("the Team's usage subject could not be read: {e}"),
            )
        })?;
    let team = LeadLog::read(journal, &lead, LeadRead::Team)
        .map_err(|e| HostAnswer::failed(e.code(), e.to_string()))?;
    for (_, member, usage) in team.member_usage(journal) {
        if let Ok(usage) = usage {
            ledger.seed(&member, &usage);
        }
    }
    lock(ledgers).insert(lead, (ledger, relay));
    Ok(())
}

/// The name a worker gets without `--name`: `HOST-PID`, the host's first label (up to its
/// first `.`) with anything but letters, digits, `-` and `_` made `-`, cut to 40 characters
/// (so a fully qualified or odd host name still makes a valid name of at most 51).
fn default_name(host: &str, pid: u32) -> String {
    let label: String = host
        .split('.')
        .next()
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    if label.is_empty() {
        format!("worker-{pid}")
    } else {
        format!("{label}-{pid}")
    }
}

/// The slots not taken by a hosted teammate or an adopted Lead.
fn free_slots(slots: u32, hosted: usize, adopter: Option<&crate::adopt::Adopter>) -> u32 {
    let taken = hosted + adopter.map_or(0, crate::adopt::Adopter::adopted);
    slots.saturating_sub(u32::try_from(taken).unwrap_or(u32::MAX))
}

/// Drops from `hosted` the teammates this runtime no longer runs (settled and released, or
/// stopped). One that stopped because its log failed is named on stderr with the failure's
/// code — `JOURNAL_LEASE_LOST` when its lease was lost (the worker stalled or was cut off past
/// the lease TTL: another process may be continuing it, and nothing more of this process's is
/// stored: its writer is fenced) — so a stopped teammate is never silent.
///
/// One whose lease this process no longer holds (lost: the worker stalled or was cut off past
/// the lease TTL) is stopped first, as DESIGN §7 has it: its turn is cancelled (its tools'
/// processes stopped, its inbox kept), and the turn's end, which can no longer be written,
/// poisons its writer with `JOURNAL_LEASE_LOST` — so it does not sit in a long tool call the
/// Team has meanwhile continued elsewhere.
async fn release_settled(
    runtime: &Runtime,
    nats: &NatsBackend,
    name: &str,
    hosted: &mut Vec<(Agent, bool)>,
) {
    for (agent, stopping) in hosted.iter_mut() {
        if !*stopping
            && runtime.agent(agent.id()).is_some_and(|a| a.same(agent))
            && nats.held_lease(agent.id()).is_none()
            // (Past the TTL while its renewal takes it back after an outage: not lost yet.)
            && !nats.lease_retaking(agent.id())
        {
            *stopping = true;
            eprint_line!(
                "troupe worker {name}: {} ({}): its lease is lost (this worker stalled or was cut \
                 off past the lease TTL); stopping it",
                agent.setup().name,
                agent.id()
            );
            // A cancel that cannot be written fails like the turn's other writes: the
            // failure is named once the agent stops (below).
            let _ = agent.cancel(json!({"kind": "shutdown"}), true).await;
        }
    }
    hosted.retain(|(agent, _)| {
        if runtime.agent(agent.id()).is_some_and(|a| a.same(agent)) {
            return true;
        }
        if let Some(failure) = agent.failure() {
            eprint_line!(
                "troupe worker {name}: {} ({}) stopped: {}: {failure}",
                agent.setup().name,
                agent.id(),
                agent.failure_code().unwrap_or("JOURNAL_FAILED"),
            );
        }
        false
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn keyed(var: &str) -> ModelSpec {
        ModelSpec {
            provider: ProviderKind::Compatible,
            model: "m".into(),
            base_url: Some("http://127.0.0.1:9/v1".into()),
            api_key_env: Some(var.into()),
            tool_choice: Default::default(),
        }
    }

    fn refusal(models: &WorkerModels, spec: &ModelSpec) -> String {
        match models.for_member("alpha", spec) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{spec} was built"),
        }
    }

    /// A teammate's model whose API key variable the worker does not keep secret is refused
    /// with the flag that would allow it; with `--secret-env` it gets past that check (to the
    /// missing key, here).
    #[test]
    fn a_model_reading_a_key_the_worker_does_not_keep_secret_is_refused() {
        let var = "TROUPE_TEST_WORKER_KEY_NEVER_SET";
        let plain = WorkerModels::new(&[], None, PathBuf::from("/nonexistent"));
        let refused = refusal(&plain, &keyed(var));
        assert!(
            refused.contains(&format!("start the worker with --secret-env {var}")),
            "{refused}"
        );
        let kept = WorkerModels::new(&[var.to_owned()], None, PathBuf::from("/nonexistent"));
        let missing = refusal(&kept, &keyed(var));
        assert!(missing.contains("is not set"), "{missing}");
        assert!(kept.secrets().0.contains(&var.to_owned()));
        assert!(kept.secrets().0.contains(&"OPENAI_API_KEY".to_owned()));
        // The providers' own variables are always kept secret.
        if std::env::var_os("DEEPSEEK_API_KEY").is_none() {
            let default = refusal(&plain, &keyed("DEEPSEEK_API_KEY"));
            assert!(!default.contains("--secret-env"), "{default}");
        }
    }

    /// A fully qualified, odd or very long host name still makes a valid default name.
    #[test]
    fn the_default_name_is_a_valid_name_for_any_host() {
        assert_eq!(default_name("build-1", 42), "build-1-42");
        assert_eq!(default_name("build-1.example.com", 42), "build-1-42");
        assert_eq!(default_name("my host!", 7), "my-host--7");
        assert_eq!(default_name("", 7), "worker-7");
        assert_eq!(default_name(".local", 7), "worker-7");
        let long = default_name(&"h".repeat(200), u32::MAX);
        assert!(long.len() <= 64, "{long}");
        assert!(long.starts_with(&"h".repeat(40)), "{long}");
    }
}
