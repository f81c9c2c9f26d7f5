//! The Team service over NATS (issue 14 item 1) on a real `nats-server`: a teammate hosted by
//! another process (here: another store connection, with its own leases) calls the Team's
//! tools through the serializer of the process holding the Lead's lease.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use troupe_journal::Journal;
use troupe_llm::{
    AssistantMessage, BoxFuture, ChatRequest, FinishReason, LlmError, ModelProvider, ModelResponse,
    ModelSpec, ProviderKind, StreamObserver, Usage,
};
use troupe_protocol::{Event, SessionId, SystemClock, event_types as ty};
use troupe_runtime::team::{
    CallerLease, DeliverRequest, RemoteTeam, TEAM_CALL_VERSION, TeamCallAnswer, TeamCallRequest,
};
use troupe_runtime::{Agent, ChunkPolicy, ModelSource, Runtime, RuntimeOptions};
use troupe_session::events::Profile;
use troupe_store_nats::{
    DeliveryServer, LinkOptions, NatsBackend, NatsMemberHosts, NatsOptions, NatsTeamLink,
    StatusListener, StatusPublisher, TeamOpServer,
};
use troupe_team::{LiveAgent, LiveStatus, MemberContext};
use troupe_test_support::NatsServer;
use troupe_tools::{FileObservations, Tool, ToolContext, ToolLimits};

/// A model that answers `done` at once, or (`hang`) only when cancelled.
#[derive(Debug)]
struct Model {
    hang: bool,
}

impl ModelProvider for Model {
    fn complete<'a>(
        &'a self,
        _request: &'a ChatRequest,
        _observer: &'a mut dyn StreamObserver,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, LlmError>> {
        Box::pin(async move {
            if self.hang {
                cancel.cancelled().await;
                return Err(LlmError::Cancelled);
            }
            Ok(ModelResponse {
                message: AssistantMessage::text("done".to_owned()),
                usage: Some(Usage {
                    prompt_tokens: 100,
                    completion_tokens: 10,
                    total_tokens: 110,
                    cached_tokens: 0,
                }),
                finish_reason: Some(FinishReason::Stop),
                model: None,
                attempts: Vec::new(),
                truncated_calls: Vec::new(),
            })
        })
    }

    fn label(&self) -> String {
        "test".to_owned()
    }
}

/// Every agent answers `done`, except the one named `hangs`, whose turns never end.
struct Models {
    hangs: Option<&'static str>,
}

impl ModelSource for Models {
    fn for_agent(&self, name: &str) -> Result<Arc<dyn ModelProvider>, LlmError> {
        Ok(Arc::new(Model {
            hang: self.hangs == Some(name),
        }))
    }
}

fn options() -> NatsOptions {
    NatsOptions {
        lease_ttl: Duration::from_secs(3),
        request_timeout: Duration::from_secs(5),
        append_timeout: Duration::from_secs(20),
        ..NatsOptions::default()
    }
}

/// Polls `check` every 20 ms until it holds, for at most 30 s.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One "process": a store connection (its own lease owner tokens), a journal and a runtime.
struct Process {
    nats: NatsBackend,
    journal: Journal,
    runtime: Runtime,
}

impl Process {
    fn new(url: &str, workspace: &Path, hangs: Option<&'static str>) -> Self {
        Self::with(url, workspace, hangs, options())
    }

    fn with(
        url: &str,
        workspace: &Path,
        hangs: Option<&'static str>,
        options: NatsOptions,
    ) -> Self {
        let nats = NatsBackend::connect(url, options).unwrap();
        let journal = Journal::with_backend(Arc::new(nats.clone()), Arc::new(SystemClock));
        let runtime = Runtime::new(
            journal.clone(),
            RuntimeOptions {
                workspace: workspace.to_path_buf(),
                models: Arc::new(Models { hangs }),
                model_spec: ModelSpec {
                    provider: ProviderKind::Script,
                    model: "test".to_owned(),
                    base_url: None,
                    api_key_env: None,
                    tool_choice: Default::default(),
                },
                chunks: ChunkPolicy::default(),
                tool_limits: ToolLimits::default(),
                max_depth: 1,
                team_limits: troupe_team::TeamLimits::default(),
                extra_tools: Vec::new(),
                secret_env: Vec::new(),
                secrets: Vec::new(),
                teammate_models: Default::default(),
                project_instructions: None,
                sandbox: troupe_tools::SandboxPolicy::default(),
                mcp_servers: None,
                approval: troupe_session::approval::ApprovalPolicy::default(),
                ledger: Default::default(),
                stall_after: troupe_team::StallAfter::default(),
                worktree_root: None,
                placement: Default::default(),
            },
        );
        Self {
            nats,
            journal,
            runtime,
        }
    }

    fn events(&self, id: &SessionId) -> Vec<Event> {
        self.journal.read(id).unwrap().events
    }
}

/// A Team led from `a` with one teammate `worker`: idle once its first turn is answered, or
/// still in it when its model hangs.
async fn team(a: &Process, hangs: bool) -> (Agent, SessionId) {
    let lead = a
        .runtime
        .create_root(SessionId::random(), "lead", Profile::Team)
        .await
        .unwrap();
    let member = a
        .runtime
        .teams()
        .spawn(
            &lead,
            "worker",
            "builds",
            "build it",
            MemberContext::Fresh,
            None,
        )
        .await
        .unwrap();
    let worker = a.runtime.agent(&member.id).unwrap();
    if hangs {
        until("the worker runs", || {
            worker.status() == troupe_runtime::AgentStatus::Running
        })
        .await;
    } else {
        worker.wait_idle().await;
    }
    (lead, member.id)
}

/// A Team like [`team`] whose teammate is then hosted by `b`: `a` releases it, `b` takes its
/// session's lease (returned: dropping it releases the lease).
async fn team_hosted_by(
    a: &Process,
    b: &Process,
    hangs: bool,
) -> (Agent, SessionId, troupe_journal::SessionWriter) {
    let (lead, worker) = team(a, hangs).await;
    a.runtime
        .drain_children(&lead, std::slice::from_ref(&worker))
        .await
        .unwrap();
    until("the Lead's process released the worker", || {
        a.nats.held_lease(&worker).is_none()
    })
    .await;
    let (writer, _) = b.journal.open(&worker).unwrap();
    (lead, worker, writer)
}

fn remote_tools(b: &Process, lead: &SessionId, options: LinkOptions) -> Vec<Arc<dyn Tool>> {
    let link = NatsTeamLink::new(b.nats.clone(), lead.clone(), options);
    // The host reports its member in a turn (its model is calling the tool), running the
    // model the Lead's process gave it.
    let live = Arc::new(|_: &SessionId| {
        Some(LiveAgent {
            status: LiveStatus::Running,
            model: Some("test".to_owned()),
        })
    });
    RemoteTeam::new(Arc::new(link), live).tools()
}

fn tool<'a>(tools: &'a [Arc<dyn Tool>], name: &str) -> &'a Arc<dyn Tool> {
    tools.iter().find(|t| t.name() == name).unwrap()
}

fn context(workspace: &Path, owner: &SessionId, call_id: &str) -> ToolContext {
    ToolContext::new(
        workspace,
        owner.clone(),
        Arc::new(FileObservations::default()),
    )
    .unwrap()
    .with_call_id(call_id)
}

/// A tool outcome as the model sees it: the text, or `code: message`.
fn outcome(result: Result<String, troupe_tools::ToolError>) -> String {
    use troupe_protocol::ErrorCode;
    match result {
        Ok(text) => text,
        Err(e) => format!("{}: {e}", e.code()),
    }
}

/// `text` with the Team's ids replaced by names and every message id
/// (`team-message-<uuid>`) by `<message>`.
fn normalized(text: &str, ids: &[(&SessionId, &str)]) -> String {
    let mut out = text.to_owned();
    for (id, name) in ids {
        out = out.replace(id.as_str(), name);
    }
    const PREFIX: &str = "team-message-";
    let mut rest = out.as_str();
    let mut done = String::new();
    while let Some(at) = rest.find(PREFIX) {
        done.push_str(&rest[..at]);
        done.push_str("<message>");
        let tail = &rest[at + PREFIX.len()..];
        let len = tail
            .find(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
            .unwrap_or(tail.len());
        rest = &tail[len..];
    }
    done.push_str(rest);
    done
}

/// The teammate's calls: every one of the ten tools, successes and refusals alike.
fn script() -> Vec<(&'static str, Value)> {
    vec![
        ("list_agents", json!({})),
        (
            "team_task_create",
            json!({"subject": "build", "description": "the thing", "write_scopes": ["src/**"]}),
        ),
        (
            "team_task_create",
            json!({"subject": "test", "description": "it", "blocked_by": ["task-1"]}),
        ),
        ("team_task_list", json!({})),
        ("team_task_get", json!({"task_id": "task-2"})),
        (
            "team_task_update",
            json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"}),
        ),
        (
            "team_task_update",
            json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"}),
        ),
        (
            "team_task_update",
            json!({"task_id": "task-1", "expected_revision": 2, "action": "complete"}),
        ),
        ("team_task_list", json!({"ready": true})),
        (
            "send_message",
            json!({"target": "lead", "message": "task-1 is done"}),
        ),
        (
            "followup_task",
            json!({"target": "worker", "message": "to myself"}),
        ),
        (
            "followup_task",
            json!({"target": "nobody", "message": "to nobody"}),
        ),
        ("wait_agent", json!({"timeout_ms": 10000})),
        ("wait_agent", json!({"timeout_ms": 5})),
        (
            "spawn_teammate",
            json!({"name": "helper", "description": "d", "prompt": "p"}),
        ),
        ("interrupt_agent", json!({"target": "worker"})),
        (
            "team_task_update",
            json!({"task_id": "task-2", "expected_revision": 1, "action": "claim", "bogus": 1}),
        ),
        ("team_task_get", json!({"task_id": "task-9"})),
        ("list_agents", json!({})),
    ]
}

/// The Team records of a Lead log after its teammate's creation, as (type, payload with the
/// Team's ids replaced).
fn team_records(events: &[Event], ids: &[(&SessionId, &str)]) -> Vec<(String, String)> {
    let start = events
        .iter()
        .rposition(|e| e.kind == ty::TEAM_MEMBER)
        .unwrap();
    events[start + 1..]
        .iter()
        .filter(|e| e.kind.starts_with("team/") || e.kind == ty::TOOL_EFFECT)
        .map(|e| (e.kind.clone(), normalized(&e.data.to_string(), ids)))
        .collect()
}

/// A teammate hosted elsewhere gets, call for call, the bytes a local teammate gets — results
/// and errors of all ten tools — and the serializer appends the same Team records (each
/// write's `tool/effect` link naming the caller's call) to the Lead log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_teammate_gets_the_bytes_of_a_local_call() {
    let Some(server) = NatsServer::single() else {
        return;
    };
    let workspace = tempfile::tempdir().unwrap();
    let ws = workspace.path();
    let a = Process::new(&server.url(), ws, Some("worker"));
    let b = Process::new(&server.url(), ws, None);
    // The local worker is in a turn (its model is the one calling); the remote one was in one
    // too when the Lead's process released it.
    let (lead1, t1) = team(&a, true).await;
    let (lead2, t2, _hosted) = team_hosted_by(&a, &b, true).await;
    let served = TeamOpServer::start(&a.nats, a.runtime.clone(), lead2.id().clone())
        .await
        .unwrap();
    let local = a.runtime.agent(&t1).unwrap().setup().tools.clone();
    let remote = remote_tools(&b, lead2.id(), LinkOptions::default());
    let ids1 = [(lead1.id(), "<lead>"), (&t1, "<worker>")];
    let ids2 = [(lead2.id(), "<lead>"), (&t2, "<worker>")];
    for (i, (name, args)) in script().into_iter().enumerate() {
        let call_id = format!("call-{i}");
        let here = outcome(
            local
                .get(name)
                .unwrap()
                .call_text(&context(ws, &t1, &call_id), args.clone())
                .await,
        );
        let there = outcome(
            tool(&remote, name)
                .call_text(&context(ws, &t2, &call_id), args.clone())
                .await,
        );
        // Where each live member runs is the one difference: the local worker is `local`; the
        // remote one, whose host publishes no status here, has no `host` in its row (the
        // worker's row is the last one: its `host` is dropped from the local text).
        let here = if name == "list_agents" {
            let here_rows: Value = serde_json::from_str(&here).unwrap();
            let there_rows: Value = serde_json::from_str(&there).unwrap();
            assert_eq!(here_rows[1]["host"], "local", "{here}");
            assert_eq!(there_rows[0]["host"], "local", "{there}");
            assert_eq!(there_rows[1].get("host"), None, "{there}");
            let host = r#""host":"local","#;
            let at = here.rfind(host).unwrap();
            format!("{}{}", &here[..at], &here[at + host.len()..])
        } else {
            here
        };
        assert_eq!(
            normalized(&here, &ids1),
            normalized(&there, &ids2),
            "call {i}: {name} {args}"
        );
    }
    assert_eq!(
        team_records(&a.events(lead1.id()), &ids1),
        team_records(&a.events(lead2.id()), &ids2)
    );
    served.stop().await;
    a.runtime.shutdown().await.unwrap();
}

/// A request that does not carry the lease the caller's session is held under — from a
/// process that does not host the member, with a made-up owner token, or naming the Lead —
/// gets `TEAM_NOT_AUTHORIZED` and appends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_caller_is_not_authorized_and_nothing_is_appended() {
    let Some(server) = NatsServer::single() else {
        return;
    };
    let workspace = tempfile::tempdir().unwrap();
    let ws = workspace.path();
    let a = Process::new(&server.url(), ws, None);
    let b = Process::new(&server.url(), ws, None);
    let c = Process::new(&server.url(), ws, None);
    let (lead, worker, _hosted) = team_hosted_by(&a, &b, false).await;
    let served = TeamOpServer::start(&a.nats, a.runtime.clone(), lead.id().clone())
        .await
        .unwrap();
    let before = a.events(lead.id()).len();
    let create = json!({"subject": "forged", "description": "d"});

    // `c` hosts nobody: it has no lease of the worker's session to show.
    let tools = remote_tools(&c, lead.id(), LinkOptions::default());
    let err = tool(&tools, "team_task_create")
        .call_text(&context(ws, &worker, "c-1"), create.clone())
        .await
        .unwrap_err();
    assert_eq!(
        troupe_protocol::ErrorCode::code(&err),
        "TEAM_NOT_AUTHORIZED"
    );
    assert!(err.to_string().starts_with("Error: "), "{err}");

    // A made-up owner token, and the real token at a revision from the future.
    let held = b.nats.held_lease(&worker).unwrap();
    for lease in [
        CallerLease {
            owner: "0123456789abcdef".to_owned(),
            revision: held.revision,
        },
        CallerLease {
            owner: held.owner.clone(),
            revision: held.revision + 1_000,
        },
    ] {
        let answer = raw_call(
            &c,
            lead.id(),
            &worker,
            Some(lease),
            "team_task_create",
            &create,
        )
        .await;
        assert_eq!(answer.code(), Some("TEAM_NOT_AUTHORIZED"), "{answer:?}");
    }
    // The Lead itself, with the Lead's own lease: it calls in its own process.
    let lead_lease = a.nats.held_lease(lead.id()).unwrap();
    let answer = raw_call(
        &c,
        lead.id(),
        lead.id(),
        Some(CallerLease {
            owner: lead_lease.owner,
            revision: lead_lease.revision,
        }),
        "team_task_create",
        &create,
    )
    .await;
    assert_eq!(answer.code(), Some("TEAM_NOT_AUTHORIZED"), "{answer:?}");

    assert_eq!(a.events(lead.id()).len(), before, "nothing appended");
    // The real host is served.
    let tools = remote_tools(&b, lead.id(), LinkOptions::default());
    let text = tool(&tools, "team_task_create")
        .call_text(&context(ws, &worker, "b-1"), create)
        .await
        .unwrap();
    assert!(text.contains("\"id\":\"task-1\""), "{text}");
    served.stop().await;
    a.runtime.shutdown().await.unwrap();
}

/// One request sent as is, its answer read back.
async fn raw_call(
    from: &Process,
    lead: &SessionId,
    caller: &SessionId,
    lease: Option<CallerLease>,
    tool: &str,
    arguments: &Value,
) -> TeamCallAnswer {
    let request = TeamCallRequest {
        version: TEAM_CALL_VERSION,
        request_id: SessionId::random().to_string(),
        caller: caller.clone(),
        lease,
        tool: tool.to_owned(),
        arguments: arguments.clone(),
        live: None,
        retry: false,
    };
    raw_send(from, lead, &request).await
}

async fn raw_send(from: &Process, lead: &SessionId, request: &TeamCallRequest) -> TeamCallAnswer {
    let reply = from
        .nats
        .client()
        .request(
            NatsBackend::team_subject(lead),
            serde_json::to_vec(request).unwrap().into(),
        )
        .await
        .unwrap();
    serde_json::from_slice(&reply.payload).unwrap()
}

/// How many times the Lead log records the effect of `call_id`.
fn links_of(events: &[Event], call_id: &str) -> usize {
    events
        .iter()
        .filter(|e| e.kind == ty::TOOL_EFFECT && e.data["callId"] == call_id)
        .count()
}

/// The Lead moved: the process that released the Lead's lease answers `TEAM_LEAD_MOVED` (and
/// stops serving); with nobody serving, a call ends `TEAM_LEAD_MOVED` after its bounded retry;
/// a call made while the Lead is away succeeds once another process resumed the Lead and
/// serves it — applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_follows_the_lead_to_its_new_process() {
    let Some(server) = NatsServer::single() else {
        return;
    };
    let workspace = tempfile::tempdir().unwrap();
    let ws = workspace.path().to_path_buf();
    let a = Process::new(&server.url(), &ws, None);
    let b = Process::new(&server.url(), &ws, None);
    let (lead, worker, _hosted) = team_hosted_by(&a, &b, false).await;
    let lead_id = lead.id().clone();
    let stale = TeamOpServer::start(&a.nats, a.runtime.clone(), lead_id.clone())
        .await
        .unwrap();
    drop(lead);
    // `a` stops running the Team and releases the Lead's lease; its server still listens.
    a.runtime.shutdown().await.unwrap();
    let create = json!({"subject": "moved", "description": "d"});
    let held = b.nats.held_lease(&worker).unwrap();
    let answer = raw_call(
        &b,
        &lead_id,
        &worker,
        Some(CallerLease {
            owner: held.owner,
            revision: held.revision,
        }),
        "team_task_create",
        &create,
    )
    .await;
    assert_eq!(answer.code(), Some("TEAM_LEAD_MOVED"), "{answer:?}");

    // Nobody serves now: a bounded retry, then TEAM_LEAD_MOVED.
    let impatient = LinkOptions {
        max_attempts: 3,
        patience: Duration::from_millis(500),
        request_timeout: Duration::from_secs(2),
    };
    let tools = remote_tools(&b, &lead_id, impatient);
    let err = tool(&tools, "team_task_create")
        .call_text(&context(&ws, &worker, "moved-0"), create.clone())
        .await
        .unwrap_err();
    assert_eq!(
        troupe_protocol::ErrorCode::code(&err),
        "TEAM_LEAD_MOVED",
        "{err}"
    );

    // A call made now succeeds once `d` resumed the Lead and serves its Team.
    let tools = remote_tools(&b, &lead_id, LinkOptions::default());
    let call = {
        let ws = ws.clone();
        let worker = worker.clone();
        tokio::spawn(async move {
            tool(&tools, "team_task_create")
                .call_text(&context(&ws, &worker, "moved-1"), create)
                .await
        })
    };
    let d = Process::new(&server.url(), &ws, None);
    let (_lead, _) = d.runtime.resume_root(&lead_id).await.unwrap();
    let served = TeamOpServer::start(&d.nats, d.runtime.clone(), lead_id.clone())
        .await
        .unwrap();
    let text = call.await.unwrap().unwrap();
    assert!(text.contains("\"subject\":\"moved\""), "{text}");
    let events = d.events(&lead_id);
    assert_eq!(links_of(&events, "moved-0"), 0);
    assert_eq!(links_of(&events, "moved-1"), 1);
    drop(stale);
    served.stop().await;
    d.runtime.shutdown().await.unwrap();
}

/// A write whose answer was lost (sent with a reply subject nobody reads) is applied; its
/// retry — same request id, `retry` set — gets the recorded result from the Lead log and
/// appends nothing; a retry of a request that never ran runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_request_is_applied_once() {
    let Some(server) = NatsServer::single() else {
        return;
    };
    let workspace = tempfile::tempdir().unwrap();
    let ws = workspace.path();
    let a = Process::new(&server.url(), ws, None);
    let b = Process::new(&server.url(), ws, None);
    let (lead, worker, _hosted) = team_hosted_by(&a, &b, false).await;
    let served = TeamOpServer::start(&a.nats, a.runtime.clone(), lead.id().clone())
        .await
        .unwrap();
    let tools = remote_tools(&b, lead.id(), LinkOptions::default());
    tool(&tools, "team_task_create")
        .call_text(
            &context(ws, &worker, "create"),
            json!({"subject": "s", "description": "d"}),
        )
        .await
        .unwrap();
    let held = b.nats.held_lease(&worker).unwrap();
    let mut request = TeamCallRequest {
        version: TEAM_CALL_VERSION,
        request_id: "claim-1".to_owned(),
        caller: worker.clone(),
        lease: Some(CallerLease {
            owner: held.owner,
            revision: held.revision,
        }),
        tool: "team_task_update".to_owned(),
        arguments: json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"}),
        live: None,
        retry: false,
    };
    // The first attempt's answer goes to an inbox nobody reads: lost.
    let client = b.nats.client();
    client
        .publish_with_reply(
            NatsBackend::team_subject(lead.id()),
            "lost.answers".to_owned(),
            serde_json::to_vec(&request).unwrap().into(),
        )
        .await
        .unwrap();
    client.flush().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while links_of(&a.events(lead.id()), "claim-1") == 0 {
        assert!(Instant::now() < deadline, "the first attempt never applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    request.retry = true;
    let answer = raw_send(&b, lead.id(), &request).await;
    let text = answer
        .result
        .clone()
        .unwrap_or_else(|| panic!("{answer:?}"));
    assert!(text.contains("\"revision\":2"), "{text}");
    assert!(text.contains("\"status\":\"in_progress\""), "{text}");
    let events = a.events(lead.id());
    assert_eq!(links_of(&events, "claim-1"), 1, "applied once");
    // The local view agrees: revision 2, owned by the worker.
    let task = a.runtime.teams().team(lead.id()).unwrap().snapshot().await;
    assert_eq!(
        task.tasks()[0].revision,
        troupe_team::Revision::new(2).unwrap()
    );

    // A retry of a request that never reached a serializer runs it.
    request.request_id = "complete-1".to_owned();
    request.arguments = json!({"task_id": "task-1", "expected_revision": 2, "action": "complete"});
    let answer = raw_send(&b, lead.id(), &request).await;
    assert!(answer.ok, "{answer:?}");
    assert_eq!(links_of(&a.events(lead.id()), "complete-1"), 1);
    served.stop().await;
    a.runtime.shutdown().await.unwrap();
}

/// The store's server goes away during a call: the caller gets `STORE_UNREACHABLE` (not a
/// hang, not an untyped error). A wait blocked in the Lead's process is cut deterministically; a
/// write cut at an arbitrary point leaves the Lead log with its whole batch (link + record) or
/// nothing of it, never half, once the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_going_away_mid_call_is_store_unreachable() {
    let Some(mut server) = NatsServer::single() else {
        return;
    };
    let workspace = tempfile::tempdir().unwrap();
    let ws = workspace.path();
    // Leases outlive the outage: the processes keep their sessions across the restart.
    let long = NatsOptions {
        lease_ttl: Duration::from_secs(60),
        ..options()
    };
    let a = Process::with(&server.url(), ws, Some("lead"), long.clone());
    let b = Process::with(&server.url(), ws, None, long);
    let (lead, worker, _hosted) = team_hosted_by(&a, &b, false).await;
    let lead_id = lead.id().clone();
    let served = TeamOpServer::start(&a.nats, a.runtime.clone(), lead_id.clone())
        .await
        .unwrap();
    let quick = LinkOptions {
        max_attempts: 3,
        patience: Duration::from_secs(5),
        request_timeout: Duration::from_secs(1),
    };
    let tools = remote_tools(&b, &lead_id, quick);
    tool(&tools, "team_task_create")
        .call_text(
            &context(ws, &worker, "create"),
            json!({"subject": "s", "description": "d"}),
        )
        .await
        .unwrap();
    // The Lead runs a turn that never ends: the worker's wait blocks in the Lead's process.
    lead.followup(troupe_protocol::UserMessage::text(
        "work",
        troupe_protocol::MessageSource::kind("user"),
    ))
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while lead.status() != troupe_runtime::AgentStatus::Running {
        assert!(Instant::now() < deadline, "the Lead never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let wait = {
        let tools = remote_tools(&b, &lead_id, quick);
        let worker = worker.clone();
        let ws = ws.to_path_buf();
        tokio::spawn(async move {
            tool(&tools, "wait_agent")
                .call_text(&context(&ws, &worker, "wait"), json!({"timeout_ms": 10000}))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill(0);
    let err = wait.await.unwrap().unwrap_err();
    assert_eq!(
        troupe_protocol::ErrorCode::code(&err),
        "STORE_UNREACHABLE",
        "{err}"
    );
    server.restart(0);
    until("both processes reconnected", || {
        a.nats.client().connection_state() == async_nats::connection::State::Connected
            && b.nats.client().connection_state() == async_nats::connection::State::Connected
    })
    .await;

    // A write, and the server killed while it is under way.
    let claim = {
        let worker = worker.clone();
        let ws = ws.to_path_buf();
        let tools = remote_tools(&b, &lead_id, quick);
        tokio::spawn(async move {
            tool(&tools, "team_task_update")
                .call_text(
                    &context(&ws, &worker, "claim"),
                    json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"}),
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(2)).await;
    server.kill(0);
    let claimed = claim.await.unwrap();
    if let Err(e) = &claimed {
        assert_eq!(
            troupe_protocol::ErrorCode::code(e),
            "STORE_UNREACHABLE",
            "{e}"
        );
    }
    server.restart(0);
    let reader = NatsBackend::connect(&server.url(), options()).unwrap();
    let events = Journal::with_backend(Arc::new(reader), Arc::new(SystemClock))
        .read(&lead_id)
        .unwrap()
        .events;
    let links: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == ty::TOOL_EFFECT && e.data["callId"] == "claim")
        .map(|(i, _)| i)
        .collect();
    assert!(links.len() <= 1, "applied at most once");
    for at in &links {
        assert_eq!(
            events[at + 1].kind,
            ty::TEAM_TASK,
            "the link's record is there"
        );
    }
    let claims = events
        .iter()
        .filter(|e| e.kind == ty::TEAM_TASK && e.data["task"]["revision"] == 2)
        .count();
    assert_eq!(claims, links.len(), "no record without its link");
    if claimed.is_ok() {
        assert_eq!(links.len(), 1, "an answered claim is durable");
    }
    drop(served);
}

/// The inbox items of `id`'s log carrying message `message` (each `agent/inbox/spliced`
/// inserting it counts once).
fn copies(p: &Process, id: &SessionId, message: &troupe_protocol::MessageId) -> usize {
    p.events(id)
        .iter()
        .filter(|e| e.kind == ty::AGENT_INBOX_SPLICED)
        .filter_map(|e| e.data["inserted"].as_array().cloned())
        .flatten()
        .filter(|item| item["id"] == message.as_str())
        .count()
}

/// The `team/message/delivered` records of `message` in the Lead log.
fn delivered(p: &Process, lead: &SessionId, message: &troupe_protocol::MessageId) -> usize {
    p.events(lead)
        .iter()
        .filter(|e| e.kind == ty::TEAM_MESSAGE_DELIVERED && e.data["messageId"] == message.as_str())
        .count()
}

/// A Team led from `a` whose teammate is resident in `b` (cold-resumed there, holding its
/// lease), with `a`'s serializer handing mail over through NATS.
async fn team_resident_in(
    a: &Process,
    b: &Process,
    append_unhosted: bool,
) -> (Agent, SessionId, Agent) {
    assert!(
        a.runtime
            .teams()
            .set_member_hosts(Arc::new(NatsMemberHosts::new(
                a.nats.clone(),
                append_unhosted
            )))
    );
    let (lead, worker) = team(a, false).await;
    a.runtime
        .drain_children(&lead, std::slice::from_ref(&worker))
        .await
        .unwrap();
    until("the Lead's process released the worker", || {
        a.nats.held_lease(&worker).is_none()
    })
    .await;
    let (hosted, _) = b.runtime.resume_root(&worker).await.unwrap();
    (lead, worker, hosted)
}

/// Issue 14 item 4: mail from the Lead to a teammate hosted by another process goes through
/// the holder of its lease — quiet mail injected, wakeup mail queued as its next turn —, once
/// each, and `team/message/delivered` follows the holder's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_to_a_teammate_hosted_elsewhere_is_appended_by_its_holder_once() {
    let Some(server) = NatsServer::single() else {
        return;
    };
    let workspace = tempfile::tempdir().unwrap();
    let a = Process::new(&server.url(), workspace.path(), None);
    let b = Process::new(&server.url(), workspace.path(), None);
    let (lead, worker, hosted) = team_resident_in(&a, &b, false).await;
    let served = DeliveryServer::start(&b.nats, b.runtime.clone())
        .await
        .unwrap();
    // a's own delivery server answers nothing for a session it does not hold.
    let bystander = DeliveryServer::start(&a.nats, a.runtime.clone())
        .await
        .unwrap();
    let teams = a.runtime.teams();
    let (quiet, accepted) = teams
        .send(&lead, "worker", "quiet news", troupe_team::Delivery::Quiet)
        .await
        .unwrap();
    assert!(accepted, "the holder took the quiet message");
    let (wakeup, accepted) = teams
        .send(&lead, "worker", "more work", troupe_team::Delivery::Wakeup)
        .await
        .unwrap();
    assert!(accepted, "the holder took the wakeup message");
    assert!(
        a.runtime.agent(&worker).is_none(),
        "the Lead's process did not cold-resume the teammate"
    );
    // The wakeup runs a turn in the hosting process.
    until("the hosted teammate ran the wakeup", || {
        hosted.with_transcript(|t| t.stats().turns) >= 2
    })
    .await;
    hosted.wait_idle().await;
    for message in [&quiet, &wakeup] {
        assert_eq!(copies(&b, &worker, message), 1, "{message}");
        assert_eq!(delivered(&a, lead.id(), message), 1, "{message}");
    }
    // The Lead log: queued before delivered, for each.
    let kinds: Vec<String> = a
        .events(lead.id())
        .iter()
        .filter(|e| e.kind.starts_with("team/message/"))
        .map(|e| {
            let id = e.data["messageId"]
                .as_str()
                .or(e.data["message"]["id"].as_str())
                .unwrap_or("");
            format!("{} {id}", e.kind)
        })
        .collect();
    let at = |kind: &str, m: &troupe_protocol::MessageId| {
        kinds
            .iter()
            .position(|k| *k == format!("{kind} {m}"))
            .unwrap()
    };
    for m in [&quiet, &wakeup] {
        assert!(
            at("team/message/queued", m) < at("team/message/delivered", m),
            "{kinds:?}"
        );
    }
    served.stop().await;
    bystander.stop().await;
    b.runtime.shutdown().await.unwrap();
    a.runtime.shutdown().await.unwrap();
}

/// Issue 14 item 4, crash points: the holder appends a message and its answer is lost — its
/// process goes on (the retry reaches it again) or dies (its lease is freed; the serializer
/// takes the lease and looks) —: either way the retry finds the message in the teammate's
/// log by its id, appends no second copy, and the Lead log records it delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_whose_answer_is_lost_is_delivered_once_by_the_retry() {
    let Some(server) = NatsServer::single() else {
        return;
    };
    let workspace = tempfile::tempdir().unwrap();
    let a = Process::new(&server.url(), workspace.path(), None);
    let b = Process::new(&server.url(), workspace.path(), None);
    let (lead, worker, _hosted) = team_resident_in(&a, &b, true).await;
    // The holder's real acceptance, with its answer never sent: a process that appended and
    // then lost its connection (or died) before answering.
    let swallow = |p: &Process| {
        let client = p.nats.client();
        let runtime = p.runtime.clone();
        let subject = NatsBackend::deliver_subject(&worker);
        tokio::spawn(async move {
            let mut requests = client.subscribe(subject).await.unwrap();
            client.flush().await.unwrap();
            let request = requests.next().await.unwrap();
            let request: DeliverRequest = serde_json::from_slice(&request.payload).unwrap();
            let answer = runtime.teams().accept_delivery(&request).await;
            assert!(answer.ok, "{answer:?}");
            // The answer is dropped; so is the subscription.
        })
    };
    // 1. The holder lives on: the retry reaches it and is answered from its log.
    let appended = swallow(&b);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sender = {
        let (teams, lead) = (a.runtime.clone(), lead.clone());
        tokio::spawn(async move {
            teams
                .teams()
                .send(&lead, "worker", "first", troupe_team::Delivery::Quiet)
                .await
                .unwrap()
        })
    };
    appended.await.unwrap();
    let served = DeliveryServer::start(&b.nats, b.runtime.clone())
        .await
        .unwrap();
    let (first, accepted) = sender.await.unwrap();
    assert!(accepted);
    assert_eq!(copies(&b, &worker, &first), 1, "no second copy");
    assert_eq!(delivered(&a, lead.id(), &first), 1);
    served.stop().await;
    // 2. The holder dies after its append: its lease is freed, and the serializer's
    // unhosted append finds the message already there.
    let appended = swallow(&b);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sender = {
        let (teams, lead) = (a.runtime.clone(), lead.clone());
        tokio::spawn(async move {
            teams
                .teams()
                .send(&lead, "worker", "second", troupe_team::Delivery::Quiet)
                .await
                .unwrap()
        })
    };
    appended.await.unwrap();
    b.runtime.shutdown().await.unwrap();
    let (second, accepted) = sender.await.unwrap();
    assert!(accepted, "delivered once the dead holder's lease was free");
    assert_eq!(copies(&a, &worker, &second), 1, "no second copy");
    assert_eq!(delivered(&a, lead.id(), &second), 1);
    // 3. Nobody hosts it now: quiet mail is appended under the serializer's own lease, once,
    // and the lease is released again.
    let (third, accepted) = a
        .runtime
        .teams()
        .send(&lead, "worker", "third", troupe_team::Delivery::Quiet)
        .await
        .unwrap();
    assert!(accepted);
    assert_eq!(copies(&a, &worker, &third), 1);
    assert_eq!(delivered(&a, lead.id(), &third), 1);
    assert!(
        a.nats.held_lease(&worker).is_none(),
        "the lease was released"
    );
    assert!(a.nats.current_lease(&worker).await.unwrap().is_none());
    a.runtime.shutdown().await.unwrap();
}

/// `interrupt_agent` across processes (issue 14 item 1) at the transport: the Lead's
/// interrupt of its teammate resident in another process is answered by that process
/// (`idle`: the teammate sampled between turns); a request of another version, or naming
/// another Team, is refused with its code; once nobody holds the teammate's lease the Lead
/// gets `inactive`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_of_a_teammate_hosted_elsewhere_is_answered_by_its_holder() {
    use troupe_runtime::team::{
        INTERRUPT_VERSION, InterruptAnswer, InterruptCause, InterruptRequest,
    };
    let Some(server) = NatsServer::single() else {
        return;
    };
    let workspace = tempfile::tempdir().unwrap();
    let a = Process::new(&server.url(), workspace.path(), None);
    let b = Process::new(&server.url(), workspace.path(), None);
    let (lead, worker, _hosted) = team_resident_in(&a, &b, false).await;
    let served = DeliveryServer::start(&b.nats, b.runtime.clone())
        .await
        .unwrap();
    let holder = b.nats.held_lease(&worker).unwrap().owner;
    let ask = |request: InterruptRequest| {
        let client = a.nats.client();
        async move {
            let payload = serde_json::to_vec(&request).unwrap();
            let reply = client
                .request(
                    NatsBackend::interrupt_subject(&request.target),
                    payload.into(),
                )
                .await
                .unwrap();
            serde_json::from_slice::<InterruptAnswer>(&reply.payload).unwrap()
        }
    };
    let request = InterruptRequest {
        version: INTERRUPT_VERSION,
        team: lead.id().clone(),
        target: worker.clone(),
        by: lead.id().clone(),
        holder,
        wait_ms: 5000,
        cause: InterruptCause::Parent,
    };
    let refused = ask(InterruptRequest {
        version: INTERRUPT_VERSION + 1,
        ..request.clone()
    })
    .await;
    assert_eq!(
        refused.code.as_deref(),
        Some("INVALID_ARGUMENTS"),
        "{refused:?}"
    );
    let refused = ask(InterruptRequest {
        team: worker.clone(),
        by: worker.clone(),
        ..request.clone()
    })
    .await;
    assert_eq!(refused.code.as_deref(), Some("UNAUTHORIZED"), "{refused:?}");
    let previous = a.runtime.teams().interrupt(&lead, "worker").await.unwrap();
    assert_eq!(previous, "idle");
    served.stop().await;
    b.runtime.shutdown().await.unwrap();
    let previous = a.runtime.teams().interrupt(&lead, "worker").await.unwrap();
    assert_eq!(previous, "inactive", "nobody holds its lease");
    a.runtime.shutdown().await.unwrap();
}

/// `worker`'s status in `list_agents` as the Lead's process sees it.
async fn status_seen(a: &Process, lead: &Agent) -> troupe_team::MemberStatus {
    use troupe_runtime::team::{OpContext, TeamOp, TeamReply};
    let reply = a
        .runtime
        .teams()
        .call(lead, TeamOp::ListAgents, OpContext::default())
        .await
        .unwrap();
    let TeamReply::Roster(rows) = reply else {
        panic!("not a roster: {reply:?}")
    };
    rows.into_iter()
        .find(|r| r.member.name == "worker")
        .unwrap()
        .member
        .status
}

/// Issue 14 item 5: a teammate hosted by another process is `running` in the Lead's
/// `list_agents` while its host runs it, its settling there wakes the Lead's `wait_agent`
/// (an edge, REFERENCE c.12: not a timeout), and once its host released it it is `inactive`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teammate_settling_in_another_process_wakes_the_leads_wait_agent() {
    use troupe_runtime::team::{OpContext, TeamOp, WaitOutcome};
    use troupe_team::MemberStatus;
    let Some(server) = NatsServer::single() else {
        return;
    };
    let workspace = tempfile::tempdir().unwrap();
    let a = Process::new(&server.url(), workspace.path(), None);
    // The hosting process's model for the worker answers only when cancelled.
    let b = Process::new(&server.url(), workspace.path(), Some("worker"));
    let (lead, _worker, hosted) = team_resident_in(&a, &b, false).await;
    let _listener = StatusListener::start(&a.nats, a.runtime.clone(), lead.id())
        .await
        .unwrap();
    let publisher = StatusPublisher::start(&b.nats, b.runtime.clone(), "host-b".to_owned());
    let served = DeliveryServer::start(&b.nats, b.runtime.clone())
        .await
        .unwrap();
    let wait = |ms: u64| {
        a.runtime.teams().call(
            &lead,
            TeamOp::WaitAgent {
                timeout_ms: json!(ms),
            },
            OpContext::default(),
        )
    };
    // Nobody else runs yet: nothing to wait for.
    assert!(matches!(
        wait(10_000).await.unwrap(),
        troupe_runtime::team::TeamReply::Waited(WaitOutcome::NoProgress)
    ));
    let (_, accepted) = a
        .runtime
        .teams()
        .send(&lead, "worker", "go", troupe_team::Delivery::Wakeup)
        .await
        .unwrap();
    assert!(accepted);
    let deadline = Instant::now() + Duration::from_secs(60);
    while status_seen(&a, &lead).await != MemberStatus::Running {
        assert!(
            Instant::now() < deadline,
            "the Lead never saw the worker run"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        a.runtime
            .teams()
            .hosts_elsewhere(lead.id())
            .into_iter()
            .map(|(_, host)| host)
            .collect::<Vec<_>>(),
        ["host-b"]
    );
    // The wait registers at its first poll; the worker's turn is then ended in its host.
    let (waited, ()) = tokio::join!(wait(600_000), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        hosted.cancel(json!({"kind": "test"}), true).await.unwrap();
    });
    assert!(
        matches!(
            waited.unwrap(),
            troupe_runtime::team::TeamReply::Waited(WaitOutcome::Waited { timed_out: false })
        ),
        "woken by the edge, not by the timeout"
    );
    hosted.wait_idle().await;
    assert_eq!(status_seen(&a, &lead).await, MemberStatus::Idle);
    served.stop().await;
    b.runtime.shutdown().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while status_seen(&a, &lead).await != MemberStatus::Inactive {
        assert!(Instant::now() < deadline, "the release was never seen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    publisher.stop().await;
    a.runtime.shutdown().await.unwrap();
}
