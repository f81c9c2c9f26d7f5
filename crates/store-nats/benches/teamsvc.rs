//! The Team service over NATS (issue 14 item 1); results in BENCHMARKS.md.
//!
//! `remote_claim`: one `team_task_update` claim by a teammate hosted by another process (a
//! second store connection holding its session's lease), through the Team service
//! (`troupe.team.<id>.op`: request, lease check, serializer, reply; measured once the serving
//! process's lease view has seen the caller's lease renewed, as in any Team running longer
//! than a third of the lease TTL), against the same claim by
//! a teammate resident in the Lead's process through its local tool, on the same NATS store
//! (one server on loopback at its default `sync_interval`). Both go through the `Tool` seam's
//! `call_text`; each claimed task is released between two claims (not timed). The two sides
//! alternate A B A B in one run. Goal: remote ≤ 2× local. Alternated with them, the floor of
//! what a remote call adds: `request_reply`, one bare NATS request from the caller's connection
//! to a responder on the serving connection that answers at once (a payload the size of a
//! claim's request; no JSON, no Team service). And the floor of a local claim:
//! `publish_ack`, one bare JetStream publish of a payload the size of a claim's Lead-log records,
//! awaited until acknowledged, on the serving connection — so one run gives both issue 13's
//! claim ÷ publish-ack and issue 14's remote ÷ local, and the two floors they rest on.
//! `nats-server` on PATH; without it the bench prints why and measures nothing.
//!
//! `delivery`: the latency of one quiet `send_message` from the Lead until the message's
//! append to its target's log reaches the server (a third connection subscribed to the
//! target's subject `troupe.session.<id>` sees it; the store's publish is acknowledged right
//! after), to a teammate resident in the Lead's process (A: the serializer appends to its log
//! itself, before `send` returns) and to one hosted by another process (B: a second runtime
//! on its own connection holding its lease, reached through `troupe.deliver.<id>` after
//! `send` returned `queued`), alternated A B A B in one run. Goal: report the ratio.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe_journal::Journal;
use troupe_llm::{
    BoxFuture, ChatRequest, LlmError, ModelProvider, ModelResponse, ModelSpec, ProviderKind,
    StreamObserver,
};
use troupe_protocol::{SessionId, SystemClock};
use troupe_runtime::team::RemoteTeam;
use troupe_runtime::{AgentStatus, ChunkPolicy, ModelSource, Runtime, RuntimeOptions};
use troupe_session::events::Profile;
use troupe_store_nats::{
    DeliveryServer, LinkOptions, NatsBackend, NatsMemberHosts, NatsOptions, NatsTeamLink,
    StatusListener, StatusPublisher, TeamOpServer,
};
use troupe_team::{LiveAgent, LiveStatus, MemberContext};
use troupe_test_support::NatsServer;
use troupe_tools::{FileObservations, Tool, ToolContext, ToolLimits};

/// A model whose turns never end (the teammates stay in their first turn, resident).
#[derive(Debug)]
struct Hang;

impl ModelProvider for Hang {
    fn complete<'a>(
        &'a self,
        _request: &'a ChatRequest,
        _observer: &'a mut dyn StreamObserver,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, LlmError>> {
        Box::pin(async move {
            cancel.cancelled().await;
            Err(LlmError::Cancelled)
        })
    }

    fn label(&self) -> String {
        "hang".to_owned()
    }
}

struct Models;

impl ModelSource for Models {
    fn for_agent(&self, _name: &str) -> Result<Arc<dyn ModelProvider>, LlmError> {
        Ok(Arc::new(Hang))
    }
}

fn runtime(journal: Journal, workspace: &Path) -> Runtime {
    Runtime::new(
        journal,
        RuntimeOptions {
            workspace: workspace.to_path_buf(),
            models: Arc::new(Models),
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
    )
}

/// One side: a tool set, the caller, and the task's current revision.
struct Side {
    tool: Arc<dyn Tool>,
    context: ToolContext,
    revision: u64,
    calls: u64,
}

impl Side {
    async fn update(&mut self, action: &str) -> Duration {
        self.calls += 1;
        let tool = &self.tool;
        let args =
            json!({"task_id": "task-1", "expected_revision": self.revision, "action": action});
        let context = self
            .context
            .clone()
            .with_call_id(format!("c{}", self.calls));
        let started = Instant::now();
        let text = tool.call_text(&context, args).await.unwrap();
        let took = started.elapsed();
        assert!(text.contains("\"id\":\"task-1\""), "{text}");
        self.revision += 1;
        took
    }

    /// `iters` claims, each released afterwards (untimed).
    async fn claims(&mut self, iters: u64) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            total += self.update("claim").await;
            self.update("release").await;
        }
        total
    }
}

/// One server and two connections to it (two "processes"), each with its journal, and the
/// tokio runtime they run on; `None` (said on stderr) without `nats-server` on PATH.
struct Store {
    server: NatsServer,
    workspace: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
    a: NatsBackend,
    b: NatsBackend,
    journal_a: Journal,
    journal_b: Journal,
}

fn store(what: &str) -> Option<Store> {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("nats-server").is_file()))
        .unwrap_or(false);
    if !found {
        eprintln!("skipping the {what} benchmark: nats-server is not on PATH");
        return None;
    }
    let server = NatsServer::single_relaxed().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let options = NatsOptions::default();
    let a = NatsBackend::connect(&server.url(), options.clone()).unwrap();
    let b = NatsBackend::connect(&server.url(), options).unwrap();
    let journal_a = Journal::with_backend(Arc::new(a.clone()), Arc::new(SystemClock));
    let journal_b = Journal::with_backend(Arc::new(b.clone()), Arc::new(SystemClock));
    Some(Store {
        server,
        workspace: tempfile::tempdir().unwrap(),
        rt,
        a,
        b,
        journal_a,
        journal_b,
    })
}

fn remote_claim(c: &mut Criterion) {
    let Some(Store {
        server: _server,
        workspace,
        rt,
        a,
        b,
        journal_a,
        journal_b,
    }) = store("Team service")
    else {
        return;
    };
    let ws = workspace.path();
    let lead_runtime = runtime(journal_a, ws);
    let (mut local, mut remote, _hosted, _served, local_lead) = rt.block_on(async {
        let mut sides = Vec::new();
        for _ in 0..2 {
            let lead = lead_runtime
                .create_root(SessionId::random(), "lead", Profile::Team)
                .await
                .unwrap();
            let teams = lead_runtime.teams();
            let member = teams
                .spawn(&lead, "worker", "w", "work", MemberContext::Fresh, None)
                .await
                .unwrap();
            let worker = lead_runtime.agent(&member.id).unwrap();
            while worker.status() != AgentStatus::Running {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            teams
                .create_task(
                    &lead,
                    &troupe_team::CreateTask {
                        subject: "s".into(),
                        description: "d".into(),
                        blocked_by: vec![],
                        write_scopes: vec![],
                    },
                )
                .await
                .unwrap();
            sides.push((lead, worker));
        }
        let (local_lead, worker) = &sides[0];
        let local_lead = local_lead.id().clone();
        let local = Side {
            tool: Arc::clone(worker.setup().tools.get("team_task_update").unwrap()),
            context: worker.setup().tool_context.clone(),
            revision: 1,
            calls: 0,
        };
        let (lead, worker) = &sides[1];
        let id = worker.id().clone();
        lead_runtime
            .drain_children(lead, std::slice::from_ref(&id))
            .await
            .unwrap();
        while a.held_lease(&id).is_some() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (hosted, _) = journal_b.open(&id).unwrap();
        let served = TeamOpServer::start(&a, lead_runtime.clone(), lead.id().clone())
            .await
            .unwrap();
        let link = NatsTeamLink::new(b.clone(), lead.id().clone(), LinkOptions::default());
        // The steady state of a live Team: the serving process's lease view has seen the
        // caller's lease renewed (every TTL/3), so the lease check needs no KV read.
        tokio::time::sleep(b.lease_ttl() / 3 + Duration::from_secs(1)).await;
        let live = Arc::new(|_: &SessionId| {
            Some(LiveAgent {
                status: LiveStatus::Running,
                model: Some("test".to_owned()),
            })
        });
        let remote = Side {
            tool: RemoteTeam::new(Arc::new(link), live)
                .tools()
                .into_iter()
                .find(|t| t.name() == "team_task_update")
                .unwrap(),
            context: ToolContext::new(ws, id, Arc::new(FileObservations::default())).unwrap(),
            revision: 1,
            calls: 0,
        };
        (local, remote, hosted, served, local_lead)
    });
    let floor = rt.block_on(Floor::start(&a, &b));
    // The size of one claim's record in the Lead log, as the store publishes it.
    let claim_bytes = rt.block_on(async {
        let before = lead_runtime
            .journal()
            .read(&local_lead)
            .unwrap()
            .events
            .len();
        local.update("claim").await;
        let events = lead_runtime.journal().read(&local_lead).unwrap().events;
        // A claim appends one batch (its tool effect and the task's record): two messages,
        // pipelined. The bare side publishes their bytes as one message.
        let claimed = &events[before..];
        eprintln!(
            "teamsvc: a claim appends {} events ({})",
            claimed.len(),
            claimed
                .iter()
                .map(|e| e.kind.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let size = claimed
            .iter()
            .map(|e| serde_json::to_vec(e).unwrap().len())
            .sum();
        local.update("release").await;
        size
    });
    let publish = rt.block_on(async {
        let publish = PublishAck::new(&a, claim_bytes);
        // Its subject gets a message before the timing, as a session's subject has.
        publish.acks(1).await;
        publish
    });
    eprintln!("teamsvc: a claim's Lead-log records are {claim_bytes} bytes");
    let mut group = c.benchmark_group("teamsvc");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    for round in ["A", "B"] {
        group.bench_function(format!("local_claim/{round}"), |bench| {
            bench.iter_custom(|iters| rt.block_on(local.claims(iters)));
        });
        group.bench_function(format!("remote_claim/{round}"), |bench| {
            bench.iter_custom(|iters| rt.block_on(remote.claims(iters)));
        });
        group.bench_function(format!("request_reply/{round}"), |bench| {
            bench.iter_custom(|iters| rt.block_on(floor.requests(iters)));
        });
        group.bench_function(format!("publish_ack/{round}"), |bench| {
            bench.iter_custom(|iters| rt.block_on(publish.acks(iters)));
        });
    }
    group.finish();
}

/// The floor of a remote call: a responder on the serving connection answering each request
/// at once with its payload, and the caller's connection asking it.
struct Floor {
    caller: async_nats::Client,
    subject: String,
    payload: bytes::Bytes,
    _responder: tokio::task::JoinHandle<()>,
}

impl Floor {
    async fn start(serving: &NatsBackend, calling: &NatsBackend) -> Self {
        let server = serving.client();
        let subject = format!("bench.floor.{}", SessionId::random());
        let mut requests = server.subscribe(subject.clone()).await.unwrap();
        server.flush().await.unwrap();
        let responder = tokio::spawn(async move {
            while let Some(request) = futures_util::StreamExt::next(&mut requests).await {
                if let Some(reply) = request.reply {
                    let _ = server.publish(reply, request.payload).await;
                }
            }
        });
        // A claim's `TeamCallRequest` is 300 bytes (its answer about 230).
        let payload = bytes::Bytes::from(vec![b'x'; 300]);
        Self {
            caller: calling.client(),
            subject,
            payload,
            _responder: responder,
        }
    }

    async fn requests(&self, iters: u64) -> Duration {
        let started = Instant::now();
        for _ in 0..iters {
            let answer = self
                .caller
                .request(self.subject.clone(), self.payload.clone())
                .await
                .unwrap();
            assert_eq!(answer.payload.len(), self.payload.len());
        }
        started.elapsed()
    }
}

/// What a local claim's one store round trip costs bare: a JetStream publish of a payload
/// the size of a claim's Lead-log records, awaited until acknowledged, on the serving
/// connection (to a subject of the store's stream no session uses).
struct PublishAck {
    js: async_nats::jetstream::Context,
    subject: String,
    payload: bytes::Bytes,
}

impl PublishAck {
    fn new(serving: &NatsBackend, bytes: usize) -> Self {
        Self {
            js: async_nats::jetstream::new(serving.client()),
            subject: format!("troupe.session.bench-{}", SessionId::random()),
            payload: bytes::Bytes::from(vec![b'x'; bytes]),
        }
    }

    async fn acks(&self, iters: u64) -> Duration {
        let started = Instant::now();
        for _ in 0..iters {
            self.js
                .publish(self.subject.clone(), self.payload.clone())
                .await
                .unwrap()
                .await
                .unwrap();
        }
        started.elapsed()
    }
}

/// `delivery` (see the module docs).
fn delivery(c: &mut Criterion) {
    let Some(Store {
        server,
        workspace,
        rt,
        a,
        b,
        journal_a,
        journal_b,
    }) = store("delivery")
    else {
        return;
    };
    let ws = workspace.path();
    let lead_runtime = runtime(journal_a, ws);
    let host_runtime = runtime(journal_b, ws);
    let (leads, _served, _delivery, _watcher, appends) = rt.block_on(async {
        let teams = lead_runtime.teams();
        teams.set_member_hosts(Arc::new(NatsMemberHosts::new(a.clone(), false)));
        let mut leads = Vec::new();
        let mut members = Vec::new();
        for _ in 0..2 {
            let lead = lead_runtime
                .create_root(SessionId::random(), "lead", Profile::Team)
                .await
                .unwrap();
            let member = teams
                .spawn(&lead, "target", "t", "work", MemberContext::Fresh, None)
                .await
                .unwrap();
            let agent = lead_runtime.agent(&member.id).unwrap();
            while agent.status() != AgentStatus::Running {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            leads.push(lead);
            members.push(member.id);
        }
        // The second target moves to the other process: released here, hosted there.
        let remote = members[1].clone();
        lead_runtime
            .drain_children(&leads[1], std::slice::from_ref(&remote))
            .await
            .unwrap();
        while a.held_lease(&remote).is_some() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let served = TeamOpServer::start(&a, lead_runtime.clone(), leads[1].id().clone())
            .await
            .unwrap();
        let links = b.clone();
        host_runtime.set_team_links(Arc::new(move |lead: &SessionId| {
            Arc::new(NatsTeamLink::new(
                links.clone(),
                lead.clone(),
                LinkOptions::default(),
            )) as Arc<dyn troupe_runtime::team::TeamLink>
        }));
        // The Lead's process learns that the target is live there (quiet mail waits for a
        // target live nowhere) from the host's status reports.
        let listener = StatusListener::start(&a, lead_runtime.clone(), leads[1].id())
            .await
            .unwrap();
        let publisher = StatusPublisher::start(&b, host_runtime.clone(), "host".to_owned());
        // It runs there (a follow-up wakes it into a turn that never ends), so its host reports
        // it running. Hosted with nothing to do it settles and is released at once: host it
        // again until the follow-up lands.
        for attempt in 0.. {
            assert!(attempt < 50, "the target never stayed hosted");
            let Ok(hosted) = host_runtime.host_teammate(&remote).await else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            let woken = hosted
                .followup(troupe_protocol::UserMessage::text(
                    "go on",
                    troupe_protocol::MessageSource::kind("user"),
                ))
                .await;
            if woken.is_ok() {
                break;
            }
        }
        let delivery = DeliveryServer::start(&b, host_runtime.clone())
            .await
            .unwrap();
        let delivery = (delivery, listener, publisher);
        // Its first status report reaches the Lead's process (quiet mail waits for a target
        // not live anywhere).
        tokio::time::sleep(Duration::from_secs(2)).await;
        let watcher = async_nats::connect(server.url()).await.unwrap();
        let mut appends = Vec::new();
        for member in &members {
            appends.push(
                watcher
                    .subscribe(NatsBackend::subject(member))
                    .await
                    .unwrap(),
            );
        }
        watcher.flush().await.unwrap();
        (leads, served, delivery, watcher, appends)
    });
    let appends: Vec<_> = appends.into_iter().map(tokio::sync::Mutex::new).collect();
    let teams = lead_runtime.teams();
    let send = |side: usize, iters: u64| {
        rt.block_on(async {
            let mut appended = appends[side].lock().await;
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let started = Instant::now();
                teams
                    .send(
                        &leads[side],
                        "target",
                        "hello",
                        troupe_team::Delivery::Quiet,
                    )
                    .await
                    .unwrap();
                futures_util::StreamExt::next(&mut *appended).await.unwrap();
                total += started.elapsed();
            }
            total
        })
    };
    let mut group = c.benchmark_group("delivery");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    for round in ["A", "B"] {
        group.bench_function(format!("local/{round}"), |bench| {
            bench.iter_custom(|iters| send(0, iters));
        });
        group.bench_function(format!("across_processes/{round}"), |bench| {
            bench.iter_custom(|iters| send(1, iters));
        });
    }
    group.finish();
}

criterion_group!(benches, remote_claim, delivery);
criterion_main!(benches);
