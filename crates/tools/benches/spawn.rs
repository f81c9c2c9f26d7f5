//! What starting one confined `bash` process costs (issue 16, defect 1; results in
//! BENCHMARKS.md): `spawn_confined` of `/bin/true` under the default policy (workspace-write,
//! network on), waited for, with and without the NATS store's port guard
//! (`guard_tcp_ports`: a second Landlock layer of 65 535 `connect` rules).
//!
//! The guard is process-wide once installed, so the two sides run in separate processes:
//! `TROUPE_BENCH_GUARD_PORTS=4222` installs it (the side "guarded"), unset is "plain". Run
//! them alternated (A B A B), e.g.
//! `for s in plain guarded plain guarded; do …; done` as BENCHMARKS.md shows. The first
//! guarded spawn builds the ruleset; its time is printed once, then the steady state is
//! measured.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use troupe_tools::{SandboxPolicy, guard_tcp_ports};

fn spawn_true(rt: &tokio::runtime::Runtime, workspace: &std::path::Path) {
    rt.block_on(async {
        let command = tokio::process::Command::new("/bin/true");
        let mut child = troupe_tools::sandbox::spawn_confined(
            command,
            SandboxPolicy::default(),
            workspace.to_path_buf(),
            None,
        )
        .await
        .unwrap()
        .unwrap();
        assert!(child.wait().await.unwrap().success());
    });
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let side = match std::env::var("TROUPE_BENCH_GUARD_PORTS") {
        Ok(ports) => {
            guard_tcp_ports(ports.split(',').map(|p| p.trim().parse::<u16>().unwrap()));
            let first = Instant::now();
            spawn_true(&rt, workspace.path());
            eprintln!(
                "first guarded spawn (builds the port ruleset): {:?}",
                first.elapsed()
            );
            "guarded"
        }
        Err(_) => "plain",
    };
    c.bench_function(&format!("spawn_confined true ({side})"), |b| {
        b.iter(|| spawn_true(&rt, workspace.path()));
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
