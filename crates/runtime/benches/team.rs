//! Team service benchmarks (issue "Agent Teams"; results in BENCHMARKS.md). A plain harness
//! (`cargo bench -p troupe-runtime --bench team`) because percentiles are needed:
//!
//! - `claim`: a `team_task_update` claim (or release) end to end — serializer, decision,
//!   append, fdatasync, apply, wake — against one bare `write` + `fdatasync` on the same disk
//!   (target ≤ 1.2×), the two alternated sample by sample (ABAB…) in the same run; and the
//!   same claim on tmpfs, where the flush waits for no disk (the commit path's own cost).
//! - `list_tasks`: `team_list_tasks` (50 tasks) on a Lead log of ~100 Team events and on one
//!   of ~100,000 (target: within 2×; the state is folded incrementally, so log length must
//!   not matter).
//! - `wake`: from the moment a commit's flush returned to a pending `wait_agent` waking
//!   (target p99 ≤ 1 ms).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe_journal::Journal;
use troupe_llm::{ModelSpec, ProviderKind, ScriptedProvider};
use troupe_protocol::SessionId;
use troupe_runtime::{Agent, ChunkPolicy, Runtime, RuntimeOptions};
use troupe_session::events::Profile;
use troupe_team::{CreateTask, TaskAction, TaskListQuery, TeamLimits, UpdateTask};
use troupe_tools::ToolLimits;

fn runtime(home: &Path, workspace: &Path) -> Runtime {
    // `w` stays running (a long bash call) so wait_agent has an active peer.
    let script = json!({"agents": {
        "lead": [{"text": "x"}],
        "w": [{"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 3600", "timeout_ms": 600000}}]}]
    }})
    .to_string();
    Runtime::new(
        Journal::open_home(home),
        RuntimeOptions {
            workspace: workspace.to_path_buf(),
            models: Arc::new(troupe_llm::ProviderFactory::Scripted(
                ScriptedProvider::from_json_str(&script, "bench").unwrap(),
            )),
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
            team_limits: TeamLimits::default(),
            stall_after: troupe_team::StallAfter::default(),
            extra_tools: Vec::new(),
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
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn report(name: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let median = percentile(&samples, 0.5);
    println!(
        "{name}: n={} median={:?} p90={:?} p99={:?} max={:?}",
        samples.len(),
        median,
        percentile(&samples, 0.9),
        percentile(&samples, 0.99),
        samples[samples.len() - 1]
    );
    median
}

async fn task(rt: &Runtime, lead: &Agent, n: usize) {
    rt.teams()
        .create_task(
            lead,
            &CreateTask {
                subject: format!("task {n}"),
                description: "bench".into(),
                blocked_by: vec![],
                write_scopes: vec![format!("src/m{n}")],
            },
        )
        .await
        .unwrap();
}

/// Flips task-1 between claimed and released `n` times; returns per-update durations.
async fn flip(rt: &Runtime, lead: &Agent, n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let rev = rt.teams().get_task(lead, "task-1").await.unwrap().revision;
        let action = if rev % 2 == 1 {
            TaskAction::Claim
        } else {
            TaskAction::Release
        };
        let start = Instant::now();
        rt.teams()
            .update_task(lead, &UpdateTask::new("task-1", rev, action))
            .await
            .unwrap();
        out.push(start.elapsed());
    }
    out
}

fn main() {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let target_tmp = env!("CARGO_TARGET_TMPDIR");
    std::fs::create_dir_all(target_tmp).unwrap();
    let disk = tempfile::tempdir_in(target_tmp).unwrap();
    let shm = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir_in(target_tmp).unwrap()
    };
    let workspace = tempfile::tempdir().unwrap();
    tokio.block_on(async {
        // (1) claim/release end to end vs bare fdatasync, on disk, interleaved (ABAB…): each
        // round times one bare `write` + `fdatasync` of a 400-byte line on a file in the same
        // directory, then one claim (or release), so a busy disk slows both sides alike.
        let bare_path = disk.path().join("bare.jsonl");
        let mut bare = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&bare_path)
            .unwrap();
        let line = vec![b'x'; 400];
        let rt = runtime(&disk.path().join("home"), workspace.path());
        let lead = rt
            .create_root(SessionId::random(), "lead", Profile::Team)
            .await
            .unwrap();
        task(&rt, &lead, 1).await;
        let mut bare_samples = Vec::new();
        let mut claim_samples = Vec::new();
        for _ in 0..2000 {
            let start = Instant::now();
            bare.write_all(&line).unwrap();
            bare.sync_data().unwrap();
            bare_samples.push(start.elapsed());
            claim_samples.extend(flip(&rt, &lead, 1).await);
        }
        let mut paired: Vec<f64> = bare_samples
            .iter()
            .zip(&claim_samples)
            .map(|(b, c)| c.as_secs_f64() / b.as_secs_f64())
            .collect();
        paired.sort_by(f64::total_cmp);
        let bare_median = report("bare write+fdatasync (disk, interleaved)", bare_samples);
        let claim_median = report(
            "team_task_update claim/release incl. flush (disk, interleaved)",
            claim_samples,
        );
        println!(
            "claim / bare fdatasync = {:.2}x (ratio of the medians); median of the 2000 \
             per-round ratios {:.2}x",
            claim_median.as_secs_f64() / bare_median.as_secs_f64(),
            paired[paired.len() / 2]
        );
        rt.shutdown().await.unwrap();

        // (1b) the same claim/release on tmpfs, where a flush waits for no disk: the
        // commit path's own cost (serializer, decision, check, append, apply, wake).
        let rt = runtime(&shm.path().join("claim"), workspace.path());
        let lead = rt
            .create_root(SessionId::random(), "lead", Profile::Team)
            .await
            .unwrap();
        task(&rt, &lead, 1).await;
        flip(&rt, &lead, 200).await;
        report(
            "team_task_update claim/release incl. flush (tmpfs)",
            flip(&rt, &lead, 5000).await,
        );
        rt.shutdown().await.unwrap();

        // (2) list_tasks on a short and a long Lead log (same 50 tasks), built on tmpfs.
        let mut medians = Vec::new();
        for (label, flips) in [("~100-event log", 50usize), ("~100k-event log", 100_000)] {
            let rt = runtime(
                &shm.path().join(label.replace(['~', ' '], "")),
                workspace.path(),
            );
            let lead = rt
                .create_root(SessionId::random(), "lead", Profile::Team)
                .await
                .unwrap();
            for n in 1..=50 {
                task(&rt, &lead, n).await;
            }
            flip(&rt, &lead, flips).await;
            let events = lead.writer().next_seq().0;
            let query = TaskListQuery {
                limit: 100,
                ..TaskListQuery::default()
            };
            let mut samples = Vec::new();
            for _ in 0..3000 {
                let start = Instant::now();
                let page = rt.teams().list_tasks(&lead, &query).await.unwrap();
                samples.push(start.elapsed());
                assert_eq!(page.tasks.len(), 50);
            }
            medians.push(report(
                &format!("team_list_tasks, 50 tasks, {label} ({events} events)"),
                samples,
            ));
            rt.shutdown().await.unwrap();
        }
        println!(
            "list_tasks long / short = {:.2}x",
            medians[1].as_secs_f64() / medians[0].as_secs_f64()
        );

        // (3) wake latency: commit returns (its flush done, edge sent) → waiter running.
        let rt = runtime(&disk.path().join("wake"), workspace.path());
        let lead = rt
            .create_root(SessionId::random(), "lead", Profile::Team)
            .await
            .unwrap();
        let mut samples = Vec::new();
        // The teammate's script step is a long bash sleep: it stays running.
        rt.teams()
            .spawn(
                &lead,
                "w",
                "keeps running",
                "run",
                troupe_team::MemberContext::Fresh,
                None,
            )
            .await
            .unwrap();
        task(&rt, &lead, 1).await;
        for _ in 0..1000 {
            let waiter_rt = rt.clone();
            let waiter_lead = lead.clone();
            let waiter = tokio::spawn(async move {
                let outcome = waiter_rt
                    .teams()
                    .wait(&waiter_lead, &json!(60_000), &CancellationToken::new())
                    .await;
                (outcome, Instant::now())
            });
            // Let the waiter register.
            tokio::time::sleep(Duration::from_millis(1)).await;
            let rev = rt.teams().get_task(&lead, "task-1").await.unwrap().revision;
            let action = if rev % 2 == 1 {
                TaskAction::Claim
            } else {
                TaskAction::Release
            };
            rt.teams()
                .update_task(&lead, &UpdateTask::new("task-1", rev, action))
                .await
                .unwrap();
            let committed = Instant::now();
            let (outcome, woke) = waiter.await.unwrap();
            if matches!(
                outcome,
                Ok(troupe_runtime::team::WaitOutcome::Waited { timed_out: false })
            ) {
                samples.push(woke.saturating_duration_since(committed));
            }
        }
        if samples.is_empty() {
            println!("wake: no samples (the teammate was not running)");
        } else {
            report(
                "wake latency: commit flushed -> wait_agent running",
                samples,
            );
        }
        rt.shutdown().await.unwrap();
    });
}
