//! Failover time (DESIGN §7 "Failover", issue 14 item 6); results in BENCHMARKS.md.
//!
//! One Team Lead (`troupe run --team`, a scripted model) is mid-turn in a `bash` step when its
//! process is killed with `kill -9`; the time measured runs from just before the kill to the
//! moment the new Lead's first append reaches the Lead's subject (`troupe.session.<id>`, seen
//! by a plain NATS subscription of this process) — the new holder has taken the expired lease,
//! checked the Team free and started its recovery. Two ways to take over:
//! - `resume`: `troupe resume ID` started at once and again every 100 ms while it is refused
//!   (`JOURNAL_LOCKED`, exit 2: the dead process's lease has not expired yet), as a supervisor
//!   script would;
//! - `adopt`: a `troupe worker --adopt` on the Lead's workspace, running before the kill.
//!
//! Every process runs with `TROUPE_LEASE_TTL=2s` (the lease bucket is created with it), on one
//! `nats-server` on loopback. Goal: each ≤ lease TTL + 2 s. The two sides alternate A B A B in
//! one run (criterion, flat sampling, one failover per iteration). `nats-server` on PATH;
//! without it the bench prints why and measures nothing.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use futures_util::StreamExt as _;
use serde_json::json;
use troupe_test_support::NatsServer;

/// The lease TTL of every process.
const TTL: &str = "2s";
/// How long one step may take before the bench gives up.
const DEADLINE: Duration = Duration::from_secs(120);

/// How the killed Lead is taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    Resume,
    Adopt,
}

struct Bench {
    server: NatsServer,
    root: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
    client: async_nats::Client,
    script: PathBuf,
    /// The adopter, on the `adopt` workspace.
    adopter: Option<(Child, PathBuf)>,
    runs: usize,
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Some((child, _)) = self.adopter.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Bench {
    fn new() -> Option<Self> {
        let server = NatsServer::single()?;
        let root = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let url = server.url();
        let client = rt.block_on(async {
            async_nats::connect(troupe_store_nats::parse_url(&url).unwrap())
                .await
                .unwrap()
        });
        let script = root.path().join("lead.json");
        std::fs::write(
            &script,
            json!({"agents": {"lead": [
                {"tool_calls": [{"name": "bash", "arguments": {
                    "command": "touch started; while [ ! -f go ]; do sleep 0.02; done",
                    "timeout_ms": 600000}}]},
                {"text": "done"},
            ]}})
            .to_string(),
        )
        .unwrap();
        for side in ["resume", "adopt"] {
            std::fs::create_dir_all(root.path().join(side)).unwrap();
        }
        let mut bench = Self {
            server,
            root,
            rt,
            client,
            script,
            adopter: None,
            runs: 0,
        };
        let log = bench.root.path().join("adopter.stderr");
        let adopter = bench
            .troupe("home-adopter")
            .args(["worker", "--adopt", "--name", "adopter", "--workspace"])
            .arg(bench.workspace(How::Adopt))
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap();
        bench.adopter = Some((adopter, log.clone()));
        wait(|| std::fs::read_to_string(&log).unwrap().contains("serving"));
        Some(bench)
    }

    fn workspace(&self, how: How) -> PathBuf {
        self.root.path().join(match how {
            How::Resume => "resume",
            How::Adopt => "adopt",
        })
    }

    /// `troupe --home ROOT/HOME --store URL …`, quiet on stdout.
    fn troupe(&self, home: &str) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_troupe"));
        cmd.env_remove("TROUPE_HOME")
            .env_remove("TROUPE_STORE")
            .env("TROUPE_LEASE_TTL", TTL)
            .arg("--home")
            .arg(self.root.path().join(home))
            .arg("--store")
            .arg(self.server.url())
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        cmd
    }

    /// One failover: the time from just before the `kill -9` of the Lead's process to the
    /// new Lead's first append. The Team is finished (and its orphaned `bash` loop ended)
    /// before it returns.
    fn failover(&mut self, how: How) -> Duration {
        self.runs += 1;
        let workspace = self.workspace(how);
        let _ = std::fs::remove_file(workspace.join("started"));
        let _ = std::fs::remove_file(workspace.join("go"));
        let run_err = self.root.path().join(format!("run{}.stderr", self.runs));
        let mut run = self
            .troupe("home")
            .args(["run", "--team", "--workspace"])
            .arg(&workspace)
            .arg("--model")
            .arg(format!("script:{}", self.script.display()))
            .arg("work")
            .stderr(Stdio::from(std::fs::File::create(&run_err).unwrap()))
            .spawn()
            .unwrap();
        wait(|| workspace.join("started").exists());
        let err = std::fs::read_to_string(&run_err).unwrap();
        let lead = err
            .lines()
            .find(|l| l.starts_with("session "))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap()
            .to_owned();
        let mut appends = self.rt.block_on(async {
            let subscription = self
                .client
                .subscribe(format!("troupe.session.{lead}"))
                .await
                .unwrap();
            self.client.flush().await.unwrap();
            subscription
        });
        let killed = Instant::now();
        run.kill().unwrap();
        let _ = run.wait();
        let mut resume: Option<Child> = None;
        let first = loop {
            if how == How::Resume {
                let refused = match resume.as_mut().map(|c| c.try_wait().unwrap()) {
                    None => true,
                    Some(Some(status)) => !status.success(),
                    Some(None) => false,
                };
                if refused {
                    resume = Some(
                        self.troupe("home-resume")
                            .args(["resume", &lead])
                            .stderr(Stdio::null())
                            .spawn()
                            .unwrap(),
                    );
                }
            }
            let next = self.rt.block_on(async {
                tokio::time::timeout(Duration::from_millis(100), appends.next()).await
            });
            if let Ok(Some(_)) = next {
                break Instant::now();
            }
            assert!(killed.elapsed() < DEADLINE, "no new Lead took over {lead}");
        };
        std::fs::write(workspace.join("go"), "").unwrap();
        match how {
            How::Resume => {
                let mut resume = resume.unwrap();
                let status = resume.wait().unwrap();
                assert!(status.success(), "the resume of {lead} failed");
            }
            How::Adopt => {
                let log = self.adopter.as_ref().unwrap().1.clone();
                let ended = format!("the adopted Lead {lead} ended (exit 0)");
                wait(|| std::fs::read_to_string(&log).unwrap().contains(&ended));
            }
        }
        first - killed
    }
}

fn wait(mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < DEADLINE, "timed out");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn failover(c: &mut Criterion) {
    let Some(mut bench) = Bench::new() else {
        eprintln!("failover: nats-server is not on PATH; nothing measured");
        return;
    };
    let mut group = c.benchmark_group("failover");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(1));
    for round in ["A", "B"] {
        for (name, how) in [("resume", How::Resume), ("adopt", How::Adopt)] {
            group.bench_function(format!("{name} {round}"), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| bench.failover(how)).sum());
            });
        }
    }
    group.finish();
}

criterion_group!(benches, failover);
criterion_main!(benches);
