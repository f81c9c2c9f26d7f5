//! Harness time per tool call (issue "Agent runtime"; results in BENCHMARKS.md).
//!
//! One turn of the scripted provider making `CALLS` calls to a no-op tool, then answering.
//! Everything the harness does per call is measured: the `tool/call` append and flush, the
//! dispatch, the `tool/result`, `step/end`, the next step's claim, `step/start`,
//! `request/header`, the request build (history clone), the step flush, the scripted model
//! call and the `assistant/message`. Run on tmpfs, the two fdatasyncs per call cost almost
//! nothing ("excluding fsync"); the disk variant shows the same path with real fsyncs.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use troupe_journal::Journal;
use troupe_llm::{ModelSpec, ProviderKind, ScriptedProvider};
use troupe_protocol::{MessageSource, SessionId, UserMessage};
use troupe_runtime::{ChunkPolicy, Runtime, RuntimeOptions};
use troupe_session::events::Profile;
use troupe_tools::{Tool, ToolContext, ToolFuture, ToolLimits};

const CALLS: usize = 50;

struct Noop;

impl Tool for Noop {
    fn name(&self) -> &str {
        "noop"
    }
    fn description(&self) -> &str {
        "does nothing"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    }
    fn call<'a>(&'a self, _ctx: &'a ToolContext, _args: Value) -> ToolFuture<'a> {
        Box::pin(async { Ok(json!({})) })
    }
}

fn script() -> String {
    let mut steps: Vec<Value> = (0..CALLS)
        .map(|_| json!({"tool_calls": [{"name": "noop", "arguments": {}}]}))
        .collect();
    steps.push(json!({"text": "done"}));
    json!({"agents": {"lead": steps}}).to_string()
}

/// Runs one turn of `CALLS` no-op tool calls in a fresh session under `dir`; returns the time
/// from the follow-up to the turn's end.
async fn one_turn(dir: &Path, workspace: &Path, script: &str) -> Duration {
    let models = ScriptedProvider::from_json_str(script, "bench").unwrap();
    let rt = Runtime::new(
        Journal::open_home(dir),
        RuntimeOptions {
            workspace: workspace.to_path_buf(),
            models: Arc::new(troupe_llm::ProviderFactory::Scripted(models)),
            model_spec: ModelSpec {
                provider: ProviderKind::Script,
                model: "bench".to_owned(),
                base_url: None,
                api_key_env: None,
                tool_choice: Default::default(),
            },
            chunks: ChunkPolicy::default(),
            tool_limits: ToolLimits::default(),
            max_depth: 0,
            team_limits: troupe_team::TeamLimits::default(),
            stall_after: troupe_team::StallAfter::default(),
            extra_tools: vec![Arc::new(Noop)],
            secret_env: Vec::new(),
            secrets: Vec::new(),
            teammate_models: Default::default(),
            project_instructions: None,
            sandbox: troupe_tools::SandboxPolicy::default(),
            mcp_servers: None,
            approval: troupe_session::approval::ApprovalPolicy::default(),
            ledger: Default::default(),
            worktree_root: None,
            placement: Default::default(),
        },
    );
    let lead = rt
        .create_root(SessionId::random(), "lead", Profile::Default)
        .await
        .unwrap();
    let start = Instant::now();
    lead.followup(UserMessage::text("go", MessageSource::kind("user")))
        .await
        .unwrap();
    lead.wait_idle().await;
    let elapsed = start.elapsed();
    assert_eq!(lead.with_transcript(|t| t.stats().tool_calls), CALLS as u64);
    rt.shutdown().await.unwrap();
    elapsed
}

fn bench(c: &mut Criterion) {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let script = script();
    let mut group = c.benchmark_group("tool_call");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(CALLS as u64));
    let disk = {
        std::fs::create_dir_all(env!("CARGO_TARGET_TMPDIR")).unwrap();
        tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
    };
    let mut places = vec![("disk", disk)];
    if Path::new("/dev/shm").is_dir() {
        places.insert(0, ("tmpfs", tempfile::tempdir_in("/dev/shm").unwrap()));
    }
    for (name, dir) in &places {
        group.bench_with_input(
            BenchmarkId::new("turn_of_50_noop_calls", name),
            dir,
            |b, dir| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += tokio.block_on(one_turn(dir.path(), workspace.path(), &script));
                    }
                    total
                });
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
