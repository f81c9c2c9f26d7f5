//! Every command on the NATS JetStream store, through the real `troupe` binary and real
//! `nats-server`s started on free loopback ports (DESIGN §7, issue 13): the demo on NATS and
//! the same output as on files, `troupe store copy` both ways byte for byte and cut by a
//! kill -9, kill -9 of a Team run then `troupe resume`, a live session's lease, a three-server
//! cluster losing one server and then two, `troupe log --follow`, `troupe web --store`,
//! `troupe send` to a running and to a stopped Team, an approval request answered with
//! `troupe approve --store`, the bad input of the issue, and (issue 14,
//! `killpoints/`) a `kill -9` right after each new durable write of workers and delivery, and
//! (`crossproc/`) the Lead's `interrupt_agent` of a teammate a worker hosts.
//!
//! Every command runs with a short `TROUPE_LEASE_TTL` (6 s on one server, 10 s on a cluster),
//! so a killed holder's lease frees itself soon (the first command on a fresh server creates
//! the lease bucket with it). Without
//! `nats-server` on PATH these tests fail, naming how to install it, unless
//! `TROUPE_SKIP_NATS=1` (then they print SKIPPED and pass).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe_journal::Journal;
use troupe_protocol::{EventDraft, SessionHeader, SessionId, SystemClock};
use troupe_store_nats::{NatsBackend, NatsOptions};
use troupe_test_support::NatsServer;

mod budget;
mod chaos;
mod crossproc;
mod failover;
mod killpoints;

/// The lease TTL of commands run without a [`Setup`] (a bucket they create gets it).
const LEASE_TTL: &str = "6s";
/// How long anything may take on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(180);

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_troupe"));
    cmd.env_remove("TROUPE_HOME")
        .env_remove("TROUPE_STORE")
        .env("TROUPE_LEASE_TTL", LEASE_TTL)
        .stdin(Stdio::null());
    cmd
}

/// A child process killed when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A temporary root (homes, workspaces) and a NATS server or cluster.
struct Setup {
    root: tempfile::TempDir,
    server: NatsServer,
    /// The test's own view of the store (its own connection).
    store: Option<Journal>,
    /// `TROUPE_LEASE_TTL` of every command: short enough that a killed holder's lease frees
    /// itself soon, long enough that a loaded machine's renewals (every TTL/3) keep up; on a
    /// cluster also long enough to outlast the election of the lease bucket's new leader.
    lease_ttl: Duration,
}

impl Setup {
    fn single() -> Option<Self> {
        Some(Self::on(NatsServer::single()?, Duration::from_secs(6)))
    }

    fn cluster() -> Option<Self> {
        Some(Self::on(NatsServer::cluster()?, Duration::from_secs(10)))
    }

    fn on(server: NatsServer, lease_ttl: Duration) -> Self {
        Self {
            root: tempfile::tempdir().unwrap(),
            server,
            store: None,
            lease_ttl,
        }
    }

    fn url(&self) -> String {
        self.server.url()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    fn home(&self) -> PathBuf {
        self.path("home")
    }

    /// `troupe --home HOME --store URL …`.
    fn troupe(&self, args: &[&str]) -> Command {
        let mut cmd = bin();
        cmd.env("TROUPE_LEASE_TTL", format!("{}s", self.lease_ttl.as_secs()))
            .arg("--home")
            .arg(self.home())
            .arg("--store")
            .arg(self.url())
            .args(args);
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.troupe(args).output().unwrap()
    }

    /// Runs and requires exit 0; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "troupe {args:?}: {}\n{}",
            out.status,
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// The test's journal on the store (connected on first use; after the store's creation by
    /// a command, so it uses the bucket as that command created it).
    fn journal(&mut self) -> Journal {
        if self.store.is_none() {
            // The settings every command of the test uses, in case this connection is the
            // first and creates the stream and the bucket.
            let options = NatsOptions {
                replicas: self.server.len(),
                lease_ttl: self.lease_ttl,
                ..NatsOptions::default()
            };
            let backend = NatsBackend::connect(&self.url(), options).unwrap();
            self.store = Some(Journal::with_backend(
                Arc::new(backend),
                Arc::new(SystemClock),
            ));
        }
        self.store.clone().unwrap()
    }

    /// A raw JetStream client of the store, on a runtime of its own.
    fn raw(&self) -> (tokio::runtime::Runtime, async_nats::jetstream::Context) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let url = self.url();
        let js = rt.block_on(async {
            let addrs = troupe_store_nats::parse_url(&url).unwrap();
            async_nats::jetstream::new(async_nats::connect(addrs).await.unwrap())
        });
        (rt, js)
    }

    /// The number of messages in the store's stream.
    fn messages(&self) -> u64 {
        let (rt, js) = self.raw();
        rt.block_on(async {
            let mut stream = js.get_stream("TROUPE").await.unwrap();
            stream.info().await.unwrap().state.messages
        })
    }

    /// The root session on the store, once its first append is there.
    fn lead(&mut self) -> Option<SessionId> {
        let listed = self.journal().list(&mut |_| {}).ok()?;
        listed
            .into_iter()
            .find(|l| l.header.parent_session.is_none())
            .map(|l| l.header.id)
    }

    /// `troupe sessions --json`: every session id.
    fn sessions(&self) -> Vec<String> {
        let rows: Value = serde_json::from_str(&self.ok(&["sessions", "--json"])).unwrap();
        rows.as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect()
    }

    fn log(&self, id: &str) -> Vec<Value> {
        self.ok(&["log", id, "--json"])
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// `troupe store copy ARGS` (its stores are `--from` and `--to`); requires exit 0, returns
/// stdout.
fn copy_ok(args: &[&str]) -> String {
    let out = bin().args(["store", "copy"]).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "troupe store copy {args:?}: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// `troupe --home HOME ARGS` on the home's files.
fn on_files(home: &Path, args: &[&str]) -> Output {
    bin().arg("--home").arg(home).args(args).output().unwrap()
}

fn files_ok(home: &Path, args: &[&str]) -> String {
    let out = on_files(home, args);
    assert!(
        out.status.success(),
        "troupe {args:?}: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn unittest(dir: &Path) -> (bool, String) {
    let out = Command::new("python3")
        .args(["-m", "unittest"])
        .current_dir(dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    (out.status.success(), text(&out.stdout) + &text(&out.stderr))
}

/// The session id of the `session <id> (…)` line of stderr.
fn session_of(stderr: &str) -> String {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("session "))
        .unwrap_or_else(|| panic!("no session line in {stderr}"));
    line.split_whitespace().nth(1).unwrap().to_owned()
}

/// Every file of a sessions directory, by name.
fn session_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl"))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// Checks that the demo's work is done exactly once on the store: the project's tests pass,
/// the three tasks are completed, nobody is provisioning, no mail is pending, the Team
/// verifies, and every queued message is in its target's log exactly once.
fn assert_demo_done_once(s: &Setup, workspace: &Path, lead: &str) {
    let (passed, output) = unittest(workspace);
    assert!(passed, "{output}");
    let view: Value = serde_json::from_str(&s.ok(&["team", "show", lead, "--json"])).unwrap();
    let tasks = view["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 3, "{view}");
    for task in tasks {
        assert_eq!(task["status"], "completed", "{view}");
    }
    for member in view["members"].as_array().unwrap() {
        assert_ne!(member["status"], "provisioning", "{view}");
    }
    assert_eq!(view["pendingMessages"], json!([]), "{view}");
    s.ok(&["team", "verify", lead]);
    let mut queued: Vec<String> = s
        .log(lead)
        .iter()
        .filter(|e| e["type"] == "team/message/queued")
        .map(|e| e["data"]["message"]["id"].as_str().unwrap().to_owned())
        .collect();
    queued.sort();
    assert!(!queued.is_empty());
    let mut delivered = Vec::new();
    for id in s.sessions() {
        for event in s.log(&id) {
            if event["type"] == "user/message" && event["data"]["source"]["kind"] == "team-message"
            {
                delivered.push(event["data"]["id"].as_str().unwrap().to_owned());
            }
        }
    }
    delivered.sort();
    assert_eq!(delivered, queued, "each message delivered exactly once");
}

/// Starts `troupe demo` on the store with `--pace MS`, stderr collected on a thread.
fn start_demo(
    s: &Setup,
    workspace: &Path,
    pace: &str,
    extra: &[&str],
) -> (Running, Receiver<String>) {
    let mut cmd = s.troupe(&["demo", "--pace", pace]);
    cmd.args(extra)
        .arg("--workspace")
        .arg(workspace)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut pipe = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        let _ = tx.send(text);
    });
    (Running(child), rx)
}

/// Waits until the Lead's log on the store holds a `team/message/queued`: the Team is at work
/// (teammates spawned, a message in flight). Returns the Lead's id.
fn wait_for_mail(s: &mut Setup, demo: &mut Running, stderr: &Receiver<String>) -> SessionId {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(lead) = s.lead()
            && let Ok(replay) = s.journal().read(&lead)
            && replay
                .events
                .iter()
                .any(|e| e.kind == "team/message/queued")
        {
            return lead;
        }
        if let Some(status) = demo.0.try_wait().unwrap() {
            let err = stderr.recv_timeout(DEADLINE).unwrap_or_default();
            panic!("the demo exited ({status}) before its Team was at work: {err}");
        }
        assert!(Instant::now() < end, "the Team never got to work");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `troupe resume ID` until it exits 0. Attempts refused as locked (the killed holder's lease,
/// until its TTL passes) change nothing and are retried; of the attempts that ran, at most
/// three may be needed, as for the crash-and-resume tests on files (`tests/demo`). Returns the
/// attempts' stderr.
fn resume_until_done(s: &Setup, id: &str) -> Vec<String> {
    let end = Instant::now() + DEADLINE;
    let mut attempts = Vec::new();
    let mut ran = 0;
    loop {
        let out = s.run(&["resume", id]);
        let err = text(&out.stderr);
        attempts.push(err.clone());
        if out.status.success() {
            return attempts;
        }
        if out.status.code() == Some(2) && err.contains("is locked by host") {
            assert_eq!(err.lines().count(), 1, "{err}");
        } else {
            ran += 1;
            assert!(
                ran < 3,
                "resume ran {ran} times without finishing: {attempts:#?}"
            );
        }
        assert!(
            Instant::now() < end,
            "resume never succeeded: {attempts:#?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A demo resumes "on any host, any home" (README, failover): the demo is killed (-9) mid-run
/// on NATS and the home that recorded its script is removed (as on another host, where that
/// path does not exist); `troupe resume` from another home records this build's demo script
/// there instead of failing with `LLM_SCRIPT` ("cannot read script"), names that script in
/// its session line, and finishes the demo: its verdict, exit 0, the project's tests pass,
/// everything done once.
#[test]
fn a_killed_demo_resumes_after_the_home_that_recorded_its_script_is_gone() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    let (mut demo, stderr) = start_demo(&s, &workspace, "100", &[]);
    let lead = wait_for_mail(&mut s, &mut demo, &stderr);
    demo.0.kill().unwrap();
    let _ = demo.0.wait();
    std::fs::remove_dir_all(s.home()).unwrap();
    // Resumed from another home (another host's): the script is recorded there.
    let other = s.path("other-home");
    let end = Instant::now() + DEADLINE;
    let out = loop {
        let out = bin()
            .env("TROUPE_LEASE_TTL", format!("{}s", s.lease_ttl.as_secs()))
            .arg("--home")
            .arg(&other)
            .arg("--store")
            .arg(s.url())
            .args(["resume", lead.as_str()])
            .output()
            .unwrap();
        let locked =
            out.status.code() == Some(2) && text(&out.stderr).contains("is locked by host");
        if locked && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(500));
            continue;
        }
        break out;
    };
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("demo done"), "{said}");
    assert!(
        other.join("demo").is_dir(),
        "the script is recorded under the resuming home"
    );
    // The session line names the script it runs, not the path of the home that is gone.
    let first = text(&out.stderr)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    assert!(
        first.contains(&format!("model script:{}", other.join("demo").display())),
        "{first}"
    );
    assert_demo_done_once(&s, &workspace, lead.as_str());
}

#[test]
fn the_demo_runs_on_nats_and_every_command_shows_it_as_on_files() {
    let Some(s) = Setup::single() else { return };
    let workspace = s.path("ws");
    let out = s.run(&["demo", "--workspace", workspace.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let lead = session_of(&err);
    // Nothing went to the home's files: the sessions are on the store.
    assert!(
        !s.home().join("sessions").exists() || session_files(&s.home().join("sessions")).is_empty()
    );
    assert!(s.sessions().contains(&lead));
    s.ok(&["team", "verify", &lead]);
    let (passed, output) = unittest(&workspace);
    assert!(passed, "{output}");
    // The printed commands name the store, so they work as printed.
    assert!(err.contains(&format!("--store {}", s.url())), "{err}");
    // A resume from another home on this store (a user elsewhere, an adopter) checks the
    // project's tests as `troupe demo` does: with alpha's fix undone, DEMO_TESTS_FAILED.
    std::fs::write(
        workspace.join("wordstats/counting.py"),
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("src/demo/project/wordstats/counting.py"),
        )
        .unwrap(),
    )
    .unwrap();
    let out = bin()
        .env("TROUPE_LEASE_TTL", format!("{}s", s.lease_ttl.as_secs()))
        .arg("--home")
        .arg(s.path("other-home"))
        .arg("--store")
        .arg(s.url())
        .args(["resume", &lead, "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let done: Value = serde_json::from_str(text(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(done["error"]["code"], "DEMO_TESTS_FAILED", "{done}");
}

#[test]
fn store_copy_files_to_nats_to_files_is_byte_identical_and_the_output_is_the_same() {
    let Some(s) = Setup::single() else { return };
    let home_a = s.path("a");
    let workspace = s.path("ws");
    let out = bin()
        .arg("--home")
        .arg(&home_a)
        .args(["demo", "--workspace"])
        .arg(&workspace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lead = session_of(&text(&out.stderr));
    let originals = session_files(&home_a.join("sessions"));
    assert!(originals.len() >= 3, "{originals:?}");

    let url = s.url();
    let a = home_a.to_str().unwrap();
    let copied = copy_ok(&["--from", a, "--to", &url]);
    assert_eq!(
        copied.lines().filter(|l| l.starts_with("copied ")).count(),
        originals.len(),
        "{copied}"
    );
    let home_b = s.path("b");
    let b = format!("file:{}", home_b.display());
    let back = copy_ok(&["--from", &url, "--to", &b]);
    assert_eq!(back.lines().count(), originals.len(), "{back}");
    // The copy of the copy is the original, byte for byte.
    assert_eq!(session_files(&home_b.join("sessions")), originals);
    // The Lead named alone comes with its Team's members: the copy verifies.
    let home_c = s.path("c");
    let c = format!("file:{}", home_c.display());
    let out = bin()
        .args(["store", "copy", "--from", &url, "--to", &c, &lead])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), originals.len());
    assert!(
        text(&out.stderr).contains(&format!(
            "troupe: note: with the {} sessions under it",
            originals.len() - 1
        )),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(session_files(&home_c.join("sessions")), originals);
    files_ok(&home_c, &["team", "verify", &lead]);
    // Run again: everything is already there, nothing is written.
    let messages = s.messages();
    let again = copy_ok(&["--from", a, "--to", &url]);
    assert!(
        again.lines().all(|l| l.starts_with("already there: ")),
        "{again}"
    );
    assert_eq!(s.messages(), messages);

    // The same output on either store.
    for args in [
        vec!["team", "show", lead.as_str(), "--json"],
        vec!["team", "show", lead.as_str(), "--json", "--all"],
        vec!["team", "show", lead.as_str()],
        vec!["team", "verify", lead.as_str()],
        vec!["log", lead.as_str(), "--json"],
        vec!["log", lead.as_str()],
    ] {
        assert_eq!(s.ok(&args), files_ok(&home_a, &args), "{args:?}");
    }
    let rows = |json: &str| -> Vec<(String, String)> {
        let rows: Value = serde_json::from_str(json).unwrap();
        rows.as_array()
            .unwrap()
            .iter()
            .map(|r| (r["id"].to_string(), r["role"].to_string()))
            .collect()
    };
    assert_eq!(
        rows(&s.ok(&["sessions", "--json"])),
        rows(&files_ok(&home_a, &["sessions", "--json"]))
    );
    // A file store is a home: `--store DIR` reads the same sessions as `--home DIR`.
    let by_store = bin()
        .args(["--store", a, "team", "show", &lead, "--json"])
        .output()
        .unwrap();
    assert_eq!(
        text(&by_store.stdout),
        files_ok(&home_a, &["team", "show", &lead, "--json"])
    );
}

#[test]
fn kill_9_of_a_team_run_on_nats_then_resume_finishes_it_and_a_live_session_is_locked() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    let (mut demo, stderr) = start_demo(&s, &workspace, "150", &[]);
    let lead = wait_for_mail(&mut s, &mut demo, &stderr);
    // A second resume of the live session: JOURNAL_LOCKED naming the holder, nothing written.
    let before = s.journal().read_image(&lead).unwrap();
    let out = s.run(&["resume", lead.as_str()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("is locked by host"), "{err}");
    assert!(err.contains(&format!("pid {}", demo.0.id())), "{err}");
    assert!(err.contains(&s.url()), "{err}");
    // When the lease was taken, as a time (RFC 3339 UTC), not epoch milliseconds.
    let taken = err
        .split("(lease taken at ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no lease time: {err}"));
    let taken = humantime::parse_rfc3339(taken).unwrap_or_else(|e| panic!("{e}: {err}"));
    let age = std::time::SystemTime::now().duration_since(taken).unwrap();
    assert!(age < DEADLINE, "{err}");
    let after = s.journal().read_image(&lead).unwrap();
    assert!(after.bytes().starts_with(before.bytes()));
    // kill -9 of the run, then resume: refused while the dead holder's lease lives, then done.
    demo.0.kill().unwrap();
    demo.0.wait().unwrap();
    assert!(!unittest(&workspace).0, "the work was not done yet");
    let attempts = resume_until_done(&s, lead.as_str());
    assert_demo_done_once(&s, &workspace, lead.as_str());
    eprintln!("resumed after {} attempt(s)", attempts.len());
    // A teammate still held (as a dead process's lease is for a while): the Lead's resume is
    // refused, naming it, and writes nothing.
    let view: Value =
        serde_json::from_str(&s.ok(&["team", "show", lead.as_str(), "--json"])).unwrap();
    let mate = SessionId::new(view["members"][1]["id"].as_str().unwrap()).unwrap();
    let (held, _) = s.journal().open(&mate).unwrap();
    let messages = s.messages();
    let out = s.run(&["resume", lead.as_str()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "session {mate} (of the Team of {lead}) is locked by host"
        )),
        "{err}"
    );
    assert_eq!(s.messages(), messages, "nothing was written");
    drop(held);
    s.ok(&["resume", lead.as_str()]);
}

#[test]
fn on_a_three_server_cluster_a_team_run_goes_on_when_one_server_is_killed() {
    let Some(mut s) = Setup::cluster() else {
        return;
    };
    let workspace = s.path("ws");
    // The store first: a stream and a lease bucket of three replicas.
    s.ok(&["sessions", "--replicas", "3"]);
    let (mut demo, stderr) = start_demo(&s, &workspace, "150", &["--replicas", "3"]);
    let lead = wait_for_mail(&mut s, &mut demo, &stderr);
    let leader = stream_leader(&s);
    s.server.kill(leader);
    let status = wait_exit(&mut demo);
    let err = stderr.recv_timeout(DEADLINE).unwrap();
    assert!(status.success(), "{err}\nservers:\n{}", s.server.logs());
    assert_demo_done_once(&s, &workspace, lead.as_str());
}

#[test]
fn on_a_cluster_with_two_servers_killed_appends_fail_clearly_and_resume_finishes_after() {
    let Some(mut s) = Setup::cluster() else {
        return;
    };
    let workspace = s.path("ws");
    // The store first: a stream and a lease bucket of three replicas.
    s.ok(&["sessions", "--replicas", "3"]);
    let (mut demo, stderr) = start_demo(&s, &workspace, "150", &["--replicas", "3"]);
    let lead = wait_for_mail(&mut s, &mut demo, &stderr);
    // What the store holds now is acknowledged: none of it may be lost.
    let ids: Vec<SessionId> = s
        .journal()
        .list(&mut |_| {})
        .unwrap()
        .into_iter()
        .map(|l| l.header.id)
        .collect();
    let held: Vec<(SessionId, Vec<u8>)> = ids
        .iter()
        .map(|id| {
            (
                id.clone(),
                s.journal().read_image(id).unwrap().bytes().to_vec(),
            )
        })
        .collect();
    s.store = None;
    let leader = stream_leader(&s);
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    s.server.kill(leader);
    s.server.kill(others[0]);
    let status = wait_exit(&mut demo);
    let err = stderr.recv_timeout(DEADLINE).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("troupe: "), "{err}");
    assert!(
        last.contains("JOURNAL_FAILED") && (last.contains(&s.url()) || last.contains("lease")),
        "a clear error naming the store or the lease: {err}"
    );
    assert!(err.contains(&format!("troupe resume {lead}")), "{err}");
    // The advice is the NATS store's: the server's disk and reachability (or, when the
    // failure was the Lead's lease lost, the store reachable again), not the home's.
    assert!(
        err.contains(
            "once the cause is fixed (the NATS server reachable; one whose disk filled needs \
             free space and a restart), continue with: "
        ) || err.contains(
            "once the cause is fixed (the store reachable and this process not stalled past the \
             lease TTL — a NATS server whose disk filled also refuses the lease: free space \
             there and restart it; a Team another process took over meanwhile has nothing left \
             to resume), continue with: "
        ),
        "{err}"
    );
    assert!(!err.contains("a writable home"), "{err}");
    s.server.restart(leader);
    s.server.restart(others[0]);
    // Nothing acknowledged was lost.
    let end = Instant::now() + DEADLINE;
    for (id, bytes) in &held {
        let now = loop {
            match s.journal().read_image(id) {
                Ok(image) => break image,
                Err(e) if Instant::now() < end => {
                    eprintln!("the store is not back yet: {e}");
                    s.store = None;
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => panic!("{e}"),
            }
        };
        let (was, is) = (lines_of_image(bytes), lines_of_image(now.bytes()));
        assert!(
            now.bytes().starts_with(bytes),
            "session {id} lost acknowledged events: {} lines held before, {} now, first \
             difference at line {}\nservers:\n{}",
            was.len(),
            is.len(),
            was.iter().zip(&is).take_while(|(a, b)| a == b).count() + 1,
            s.server.logs()
        );
    }
    resume_until_done_or_store_back(&s, lead.as_str());
    assert_demo_done_once(&s, &workspace, lead.as_str());
}

fn lines_of_image(bytes: &[u8]) -> Vec<&[u8]> {
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect()
}

/// As [`resume_until_done`], also while the cluster is still electing its leaders again
/// (a `STORE_IO` refusal, exit 1, with nothing written).
fn resume_until_done_or_store_back(s: &Setup, id: &str) {
    let end = Instant::now() + DEADLINE;
    let mut attempts = Vec::new();
    loop {
        let out = s.run(&["resume", id]);
        let err = text(&out.stderr);
        attempts.push(err.clone());
        if out.status.success() {
            return;
        }
        assert!(
            err.contains("is locked by host")
                || err.contains("STORE_IO")
                || err.contains(" on nats://"),
            "{attempts:#?}"
        );
        assert!(
            Instant::now() < end,
            "resume never succeeded: {attempts:#?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn wait_exit(child: &mut Running) -> std::process::ExitStatus {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < end, "the run did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The index (0-based) of the server leading the stream's replicas.
fn stream_leader(s: &Setup) -> usize {
    let (rt, js) = s.raw();
    rt.block_on(async {
        let mut stream = js.get_stream("TROUPE").await.unwrap();
        let info = stream.info().await.unwrap();
        let leader = info
            .cluster
            .as_ref()
            .and_then(|c| c.leader.clone())
            .unwrap();
        leader.trim_start_matches('n').parse::<usize>().unwrap() - 1
    })
}

/// Writes a session with `events` events on `journal` (batches of up to 3).
fn write_session(journal: &Journal, id: &str, created: u64, events: u64) {
    let w = journal
        .create(SessionHeader::new(SessionId::new(id).unwrap(), created).with_cwd("/w"))
        .unwrap();
    let mut n = 0;
    while n < events {
        let size = (1 + n % 3).min(events - n);
        let drafts = (0..size)
            .map(|i| {
                EventDraft::new(
                    "assistant/chunk",
                    json!({"n": n + i, "pad": "x".repeat(64)}),
                )
            })
            .collect();
        w.append_batch(drafts).unwrap();
        n += size;
    }
    w.flush_blocking().unwrap();
}

#[test]
fn a_store_copy_killed_part_way_leaves_no_half_session_and_a_rerun_finishes_it() {
    let Some(s) = Setup::single() else { return };
    let home_a = s.path("a");
    let files = Journal::open_home(&home_a);
    write_session(&files, "small", 1, 10);
    const BIG: u64 = 20_000;
    write_session(&files, "big", 2, BIG);
    let url = s.url();
    // Create the store first (with the test's lease TTL), then watch the big session's subject.
    s.ok(&["sessions"]);
    let (rt, js) = s.raw();
    let mut watch =
        rt.block_on(async { js.client().subscribe("troupe.session.big").await.unwrap() });
    let mut copy = Running(
        bin()
            .args(["store", "copy", "--from"])
            .arg(&home_a)
            .args(["--to", &url])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Kill -9 after the first 200 messages of the big session were published.
    rt.block_on(async {
        use futures_util::StreamExt;
        for _ in 0..200 {
            tokio::time::timeout(DEADLINE, watch.next())
                .await
                .unwrap()
                .unwrap();
        }
    });
    copy.0.kill().unwrap();
    copy.0.wait().unwrap();
    let stored = rt.block_on(async {
        let mut stream = js.get_stream("TROUPE").await.unwrap();
        let mut info = stream
            .info_with_subjects("troupe.session.big")
            .await
            .unwrap();
        use futures_util::StreamExt;
        let mut count = 0;
        while let Some(entry) = info.next().await {
            count += entry.unwrap().1;
        }
        let _ = stream.info().await;
        count as u64
    });
    assert!(
        stored > 0 && stored < BIG + 1,
        "the kill landed mid-copy ({stored} messages)"
    );
    // The cut session is no session on the target; the one copied before it is whole.
    assert_eq!(s.sessions(), ["small"]);
    let out = s.run(&["log", "big"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("unfinished"),
        "{}",
        text(&out.stderr)
    );
    // Run again: locked while the killed copy's lease lives, then the big one is copied whole.
    let end = Instant::now() + DEADLINE;
    let output = loop {
        let out = bin()
            .args(["store", "copy", "--from"])
            .arg(&home_a)
            .args(["--to", &url])
            .output()
            .unwrap();
        if out.status.success() {
            break text(&out.stdout);
        }
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("is locked by host"), "{err}");
        assert!(Instant::now() < end, "{err}");
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(output.contains("already there: small"), "{output}");
    assert!(
        output.contains(&format!("copied big: {BIG} events")),
        "{output}"
    );
    let home_c = s.path("c");
    bin()
        .args(["store", "copy", "--from", &url, "--to"])
        .arg(&home_c)
        .output()
        .unwrap();
    assert_eq!(
        session_files(&home_c.join("sessions")),
        session_files(&home_a.join("sessions"))
    );
}

/// Reads the lines a child prints on stdout, on a thread.
fn lines_of(child: &mut Child) -> Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn next_seqs(lines: &Receiver<String>, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| {
            let line = lines
                .recv_timeout(Duration::from_secs(60))
                .expect("a followed line");
            serde_json::from_str::<Value>(&line).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

/// `troupe log --follow` on a store: the existing events from `--from`, then each batch once
/// it is whole.
fn follow_prints_appends(journal: &Journal, mut cmd: Command) {
    write_session(journal, "f1", 1, 3);
    let (writer, _) = journal.open(&SessionId::new("f1").unwrap()).unwrap();
    let mut child = Running(
        cmd.args(["log", "f1", "--follow", "--json", "--from", "1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let lines = lines_of(&mut child.0);
    assert_eq!(next_seqs(&lines, 2), [1, 2]);
    for round in 0..3u64 {
        writer
            .append_batch(vec![
                EventDraft::new("step/start", json!({"turn": 1, "step": round})),
                EventDraft::new("step/end", json!({"turn": 1, "step": round})),
            ])
            .unwrap();
        writer.flush_blocking().unwrap();
        assert_eq!(next_seqs(&lines, 2), [3 + 2 * round, 4 + 2 * round]);
    }
    assert!(child.0.try_wait().unwrap().is_none(), "still following");
}

#[test]
fn log_follow_prints_what_is_appended_on_nats_and_on_files() {
    let Some(mut s) = Setup::single() else { return };
    s.ok(&["sessions"]);
    let journal = s.journal();
    follow_prints_appends(&journal, s.troupe(&[]));
    let home = s.path("files");
    let mut on_home = bin();
    on_home.arg("--home").arg(&home);
    follow_prints_appends(&Journal::open_home(&home), on_home);
    // An unknown session is refused, not waited for.
    let out = s.run(&["log", "nope", "--follow"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("not found"),
        "{}",
        text(&out.stderr)
    );
}

/// Reads SSE frames (`id`, `event`, `data`) from a raw HTTP response, on a thread.
fn sse_frames(
    url: &str,
    path: &str,
    last_event_id: Option<&str>,
) -> Receiver<(Option<String>, String)> {
    // `HOST:PORT` of `http://HOST:PORT/?token=…`.
    let addr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    let last = last_event_id.map_or_else(String::new, |id| format!("Last-Event-ID: {id}\r\n"));
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{last}\r\n").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let reader = BufReader::new(stream);
        let (mut id, mut event) = (None, String::new());
        for line in reader.lines() {
            let Ok(line) = line else { return };
            if let Some(v) = line.strip_prefix("id: ") {
                id = Some(v.to_owned());
            } else if let Some(v) = line.strip_prefix("event: ") {
                event = v.to_owned();
            } else if line.is_empty()
                && !event.is_empty()
                && tx.send((id.take(), std::mem::take(&mut event))).is_err()
            {
                return;
            }
        }
    });
    rx
}

#[test]
fn troupe_web_on_nats_serves_the_store_and_streams_a_conversation_live() {
    let Some(mut s) = Setup::single() else { return };
    s.ok(&["sessions"]);
    let journal = s.journal();
    let w = journal
        .create(SessionHeader::new(SessionId::new("talk").unwrap(), 5).with_cwd("/w"))
        .unwrap();
    w.append(EventDraft::new("turn/start", json!({"turn": 1})))
        .unwrap();
    w.flush_blocking().unwrap();
    let mut web = Running(
        s.troupe(&["web", "--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(web.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().to_owned();
    let frames = sse_frames(&url, "/api/sessions/talk/conversation/events", None);
    let next = |frames: &Receiver<(Option<String>, String)>| {
        frames.recv_timeout(Duration::from_secs(60)).unwrap()
    };
    assert_eq!(next(&frames), (Some("0".to_owned()), "item".to_owned()));
    w.append(EventDraft::new(
        "turn/end",
        json!({"turn": 1, "reason": {"kind": "completed"}}),
    ))
    .unwrap();
    w.flush_blocking().unwrap();
    assert_eq!(next(&frames), (Some("1".to_owned()), "item".to_owned()));
    // A reconnect after the last item it got hears only what came later.
    let back = sse_frames(&url, "/api/sessions/talk/conversation/events", Some("1"));
    w.append(EventDraft::new("turn/start", json!({"turn": 2})))
        .unwrap();
    w.flush_blocking().unwrap();
    assert_eq!(next(&back), (Some("2".to_owned()), "item".to_owned()));
    let mut stderr = String::new();
    let _ = web.0.kill();
    web.0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        stderr.contains(&s.url()),
        "the panel names the store it serves: {stderr}"
    );
}

/// The fresh-user trial: credentials in a store URL are never echoed. An unreachable
/// `nats://user:s3cret@…` (or a token `nats://s3cret@…`) is `STORE_UNREACHABLE` naming
/// `user:***@` (`***@`); a run on a reachable one (the server takes any credentials) prints
/// its hints with the URL redacted, and `troupe sessions` and `troupe config` show no password.
#[test]
fn a_store_urls_password_or_token_is_never_shown() {
    let Some(s) = Setup::single() else { return };
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for (url, shown) in [
        (
            format!("nats://user:s3cret@127.0.0.1:{free}"),
            format!("nats://user:***@127.0.0.1:{free}"),
        ),
        (
            format!("nats://s3cret@127.0.0.1:{free}"),
            format!("nats://***@127.0.0.1:{free}"),
        ),
    ] {
        let out = bin().args(["sessions", "--store", &url]).output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("STORE_UNREACHABLE"), "{err}");
        assert!(err.contains(&shown), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
    }
    // Another scheme is refused as bad input, its password hidden too.
    for url in [
        "http://user:s3cret@127.0.0.1:1",
        "NATS://user:s3cret@127.0.0.1:1",
    ] {
        let out = bin().args(["sessions", "--store", url]).output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("user:***@127.0.0.1:1"), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
    }
    let port = s.url().rsplit(':').next().unwrap().to_owned();
    let url = format!("nats://user:s3cret@127.0.0.1:{port}");
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let home = s.home();
    let with = |args: &[&str]| {
        bin()
            .arg("--home")
            .arg(&home)
            .args(["--store", &url])
            .args(args)
            .output()
            .unwrap()
    };
    let script = s.path("script.json");
    std::fs::write(
        &script,
        json!({"agents": {"lead": [{"text": "hi"}]}}).to_string(),
    )
    .unwrap();
    let model = format!("script:{}", script.display());
    let out = with(&[
        "run",
        "--workspace",
        workspace.to_str().unwrap(),
        "--model",
        &model,
        "hello",
    ]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("--store 'nats://user:***@127.0.0.1:{port}'")),
        "{err}"
    );
    for args in [&["sessions"][..], &["config"][..]] {
        let out = with(args);
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{args:?}: {all}");
        assert!(!all.contains("s3cret"), "{args:?}: {all}");
    }
    assert!(!err.contains("s3cret"), "{err}");
}

#[test]
fn bad_stores_and_sessions_are_one_line_errors_that_change_nothing() {
    let Some(s) = Setup::single() else { return };
    let one_line = |out: &Output, code: i32, needle: &str| {
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("troupe: "), "{err}");
        assert!(err.contains(needle), "{needle:?} in {err}");
    };
    // An unreachable URL.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nowhere = format!("nats://127.0.0.1:{free}");
    one_line(
        &bin()
            .args(["sessions", "--store", &nowhere])
            .output()
            .unwrap(),
        2,
        &nowhere,
    );
    // Not a store at all.
    one_line(
        &bin()
            .args(["sessions", "--store", "http://x:1"])
            .output()
            .unwrap(),
        2,
        "http",
    );
    one_line(
        &bin()
            .args(["sessions", "--store", &s.url(), "--replicas", "0"])
            .output()
            .unwrap(),
        2,
        "replicas",
    );
    one_line(
        &bin()
            .args(["sessions", "--store", &s.url()])
            .env("TROUPE_LEASE_TTL", "soon")
            .output()
            .unwrap(),
        2,
        "TROUPE_LEASE_TTL",
    );
    // A server without JetStream.
    if let Some(plain) = NatsServer::without_jetstream() {
        one_line(
            &bin()
                .args(["sessions", "--store", &plain.url()])
                .output()
                .unwrap(),
            2,
            "JetStream",
        );
    }
    // A stream that does not take the session subjects: refused, and left as it was.
    if let Some(other) = NatsServer::single() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let url = other.url();
        let js = rt.block_on(async {
            async_nats::jetstream::new(
                async_nats::connect(troupe_store_nats::parse_url(&url).unwrap())
                    .await
                    .unwrap(),
            )
        });
        rt.block_on(async {
            js.create_stream(async_nats::jetstream::stream::Config {
                name: "TROUPE".into(),
                subjects: vec!["other.>".into()],
                ..Default::default()
            })
            .await
            .unwrap();
        });
        one_line(
            &bin().args(["sessions", "--store", &url]).output().unwrap(),
            2,
            "other.>",
        );
        let subjects = rt.block_on(async {
            let mut stream = js.get_stream("TROUPE").await.unwrap();
            stream.info().await.unwrap().config.subjects.clone()
        });
        assert_eq!(subjects, ["other.>"]);
    }
    // Sessions that do not exist on the store.
    s.ok(&["sessions"]);
    let messages = s.messages();
    for args in [
        &["log", "nope"][..],
        &["log", "nope", "--follow"],
        &["resume", "nope"],
        &["team", "show", "nope"],
        &["team", "verify", "nope"],
    ] {
        one_line(&s.run(args), 2, "not found");
    }
    let elsewhere = s.path("elsewhere");
    let copy = bin()
        .args(["store", "copy", "--from", &s.url(), "--to"])
        .arg(&elsewhere)
        .arg("nope")
        .output()
        .unwrap();
    one_line(&copy, 2, "not found");
    assert!(!elsewhere.exists(), "nothing was written to the target");
    assert_eq!(s.messages(), messages, "nothing was appended");
    // A message on a session's subject that is not a valid line.
    let mut s = s;
    write_session(&s.journal(), "hurt", 1, 4);
    let (rt, js) = s.raw();
    rt.block_on(async {
        js.publish("troupe.session.hurt", "not a line".into())
            .await
            .unwrap()
            .await
            .unwrap();
    });
    let messages = s.messages();
    one_line(&s.run(&["log", "hurt"]), 1, "line 6");
    one_line(&s.run(&["team", "verify", "hurt"]), 1, "line 6");
    let out = s.run(&["resume", "hurt"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("line 6"),
        "{}",
        text(&out.stderr)
    );
    let copy = bin()
        .args(["store", "copy", "--from", &s.url(), "--to"])
        .arg(s.path("copy"))
        .arg("hurt")
        .output()
        .unwrap();
    assert_eq!(copy.status.code(), Some(1), "{}", text(&copy.stderr));
    assert!(!s.path("copy/sessions/hurt.jsonl").exists());
    assert_eq!(s.messages(), messages, "nothing was appended");
    // A files target where no sessions directory can be created is bad input.
    write_session(&s.journal(), "fine", 1, 2);
    let copy = bin()
        .args([
            "store",
            "copy",
            "--from",
            &s.url(),
            "--to",
            "/proc/troupe-nope",
            "fine",
        ])
        .output()
        .unwrap();
    one_line(
        &copy,
        2,
        "--to /proc/troupe-nope: its sessions directory /proc/troupe-nope/sessions cannot be \
         created (",
    );
    // `store copy` names its stores with --from and --to only.
    one_line(
        &bin()
            .args([
                "store",
                "copy",
                "--store",
                &s.url(),
                "--from",
                &s.url(),
                "--to",
                "/tmp/x",
            ])
            .output()
            .unwrap(),
        2,
        "--from and --to",
    );
    // `--store file:A` with another `--home`.
    let out = bin()
        .args(["--home", "/tmp/one", "--store", "file:/tmp/two", "sessions"])
        .output()
        .unwrap();
    one_line(&out, 2, "two different homes");
}

/// The user's `store` key puts every command on the NATS store without `--store`: a run's
/// sessions go there (none to the home's files), `sessions` and `log` read them there, the
/// printed commands need no `--store` (the next command finds it again), `troupe config`
/// shows where it came from, and `--store DIR` still wins.
#[test]
fn the_users_store_key_is_every_commands_store_and_the_flag_wins() {
    let Some(s) = Setup::single() else { return };
    let home = s.home();
    std::fs::create_dir_all(&home).unwrap();
    let config = home.join("config.toml");
    std::fs::write(&config, format!("# mine\nstore = \"{}\"\n", s.url())).unwrap();
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let script = s.path("script.json");
    std::fs::write(
        &script,
        json!({"agents": {"lead": [{"text": "on the store"}]}}).to_string(),
    )
    .unwrap();
    let model = format!("script:{}", script.display());
    let out = on_files(
        &home,
        &[
            "run",
            "--workspace",
            workspace.to_str().unwrap(),
            "--model",
            &model,
            "hi",
        ],
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(text(&out.stdout), "on the store\n");
    let id = session_of(&err);
    assert!(
        !err.contains("--store"),
        "found again by the next command: {err}"
    );
    let sessions = home.join("sessions");
    assert!(!sessions.exists() || session_files(&sessions).is_empty());
    // On the store, as another connection sees it, and through the commands without --store.
    assert!(s.sessions().contains(&id));
    let listed: Value = serde_json::from_str(&files_ok(&home, &["sessions", "--json"])).unwrap();
    assert_eq!(listed[0]["id"], id.as_str(), "{listed}");
    assert!(files_ok(&home, &["log", &id]).contains("on the store"));
    let shown: Value = serde_json::from_str(&files_ok(
        &home,
        &[
            "config",
            "--workspace",
            workspace.to_str().unwrap(),
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(
        shown["settings"]["store"],
        json!({"value": s.url(), "source": {"kind": "user", "path": config.display().to_string(), "line": 2, "column": 9}})
    );
    // A flag wins: `--store DIR` is the home's files, which hold no session.
    let listed = files_ok(
        &home,
        &["--store", home.to_str().unwrap(), "sessions", "--json"],
    );
    assert_eq!(serde_json::from_str::<Value>(&listed).unwrap(), json!([]));
    let shown: Value = serde_json::from_str(&files_ok(
        &home,
        &[
            "--store",
            home.to_str().unwrap(),
            "config",
            "--workspace",
            workspace.to_str().unwrap(),
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(
        shown["settings"]["store"]["source"],
        json!({"kind": "flag", "flag": "--store"})
    );
}

/// `troupe send` on the NATS store: to a Team a process on this host runs (through its
/// control socket, delivered at once), then — the run over — to the stopped Team (appended
/// under the Lead's lease, delivered by the next resume), each reaching alpha once, framed
/// `Message from the user:`.
#[test]
fn send_on_nats_reaches_a_running_and_a_stopped_team() {
    let Some(s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let call = |name: &str, arguments: Value| json!({"tool_calls": [{"name": name, "arguments": arguments}]});
    let script = s.path("team.json");
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                {"text": "spawned alpha"},
            ],
            "alpha": [
                call("bash", json!({"command": "while [ ! -f go ]; do sleep 0.05; done", "timeout_ms": 600000})),
                {"text": "alpha answer 1"},
                {"text": "alpha answer 2"},
                {"text": "alpha answer 3"},
            ],
        }})
        .to_string(),
    )
    .unwrap();
    let mut run = Running(
        s.troupe(&["run", "--team", "--workspace"])
            .arg(&workspace)
            .arg("--model")
            .arg(format!("script:{}", script.display()))
            .arg("fix it")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    let lead = loop {
        assert!(
            start.elapsed() < DEADLINE,
            "the Team never served its socket"
        );
        std::thread::sleep(Duration::from_millis(50));
        let served = std::fs::read_dir(s.home().join("run"))
            .ok()
            .and_then(|mut d| {
                d.find_map(|e| {
                    let name = e.ok()?.file_name().into_string().ok()?;
                    name.strip_suffix(".sock").map(str::to_owned)
                })
            });
        if let Some(lead) = served {
            break lead;
        }
    };
    let alpha = loop {
        assert!(start.elapsed() < DEADLINE, "alpha never started its loop");
        std::thread::sleep(Duration::from_millis(50));
        let Some(alpha) = s.log(&lead).iter().find_map(|e| {
            (e["type"] == "team/member")
                .then(|| e["data"]["member"]["id"].as_str().unwrap().to_owned())
        }) else {
            continue;
        };
        if s.log(&alpha).iter().any(|e| e["type"] == "tool/process") {
            break alpha;
        }
    };
    let out = s.ok(&["send", &lead, "--to", "alpha", "while you run"]);
    assert!(out.starts_with("delivered to alpha (seq "), "{out}");
    std::fs::write(workspace.join("go"), "").unwrap();
    assert!(wait_exit(&mut run).success());
    let out = s.ok(&["send", &lead, "--to", "alpha", "--wakeup", "once stopped"]);
    assert!(out.starts_with("queued for alpha (seq "), "{out}");
    s.ok(&["resume", &lead]);
    for needle in ["while you run", "once stopped"] {
        let seen: Vec<Value> = s
            .log(&alpha)
            .into_iter()
            .filter(|e| {
                e["type"] == "user/message" && e["data"]["content"].to_string().contains(needle)
            })
            .map(|e| e["data"]["content"].clone())
            .collect();
        assert_eq!(
            seen,
            vec![
                json!([{"type": "text", "text": "Message from the user:"}, {"type": "text", "text": needle}])
            ],
            "{needle}"
        );
    }
    s.ok(&["team", "verify", &lead]);
}

/// `troupe send` on the NATS store from another Troupe home (so no shared control socket: as
/// from another host) reaches a running Team over NATS request-reply on its control subject
/// `troupe.control.<lead>`: delivered at once to the running alpha, and a repeat with the
/// same `--id` (a retry whose answer was lost) is the same message, not a second one — alpha's
/// log holds it exactly once, the Lead log one `team/message/queued`, and `team verify` passes.
#[test]
fn send_on_nats_from_another_home_reaches_a_running_team_over_nats() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let call = |name: &str, arguments: Value| json!({"tool_calls": [{"name": name, "arguments": arguments}]});
    let script = s.path("team.json");
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                {"text": "spawned alpha"},
                {"text": "lead answer 2"},
            ],
            "alpha": [
                call("bash", json!({"command": "while [ ! -f go ]; do sleep 0.05; done", "timeout_ms": 600000})),
                {"text": "alpha answer 1"},
                {"text": "alpha answer 2"},
                {"text": "alpha answer 3"},
            ],
        }})
        .to_string(),
    )
    .unwrap();
    let mut run = Running(
        s.troupe(&["run", "--team", "--workspace"])
            .arg(&workspace)
            .arg("--model")
            .arg(format!("script:{}", script.display()))
            .arg("fix it")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    let lead = loop {
        assert!(start.elapsed() < DEADLINE, "the Team never started");
        if let Some(lead) = s.lead() {
            break lead.to_string();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let alpha = loop {
        assert!(start.elapsed() < DEADLINE, "alpha never started its loop");
        std::thread::sleep(Duration::from_millis(50));
        let Some(alpha) = s.log(&lead).iter().find_map(|e| {
            (e["type"] == "team/member")
                .then(|| e["data"]["member"]["id"].as_str().unwrap().to_owned())
        }) else {
            continue;
        };
        if s.log(&alpha).iter().any(|e| e["type"] == "tool/process") {
            break alpha;
        }
    };
    // Another home: its `run` directory holds no socket of this Team.
    let home_b = s.path("home-b");
    let send_b = |message: &str| {
        let out = bin()
            .env("TROUPE_LEASE_TTL", format!("{}s", s.lease_ttl.as_secs()))
            .arg("--home")
            .arg(&home_b)
            .arg("--store")
            .arg(s.url())
            .args(["send", &lead, "--to", "alpha", "--id", "far-1", message])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "troupe send: {}\n{}",
            out.status,
            text(&out.stderr)
        );
        text(&out.stdout)
    };
    let out = send_b("from another home");
    assert!(
        out.starts_with("delivered to alpha (seq ") && out.contains("team-message-far-1"),
        "{out}"
    );
    let again = send_b("from another home");
    assert!(
        again.contains("already queued by an earlier send with this id: not sent again"),
        "{again}"
    );
    assert!(
        !home_b.join("run").join(format!("{lead}.sock")).exists(),
        "no socket of the Team in the sender's home"
    );
    std::fs::write(workspace.join("go"), "").unwrap();
    assert!(wait_exit(&mut run).success());
    let seen: Vec<Value> = s
        .log(&alpha)
        .into_iter()
        .filter(|e| {
            e["type"] == "user/message"
                && e["data"]["content"]
                    .to_string()
                    .contains("from another home")
        })
        .map(|e| e["data"]["content"].clone())
        .collect();
    assert_eq!(
        seen,
        vec![json!([
            {"type": "text", "text": "Message from the user:"},
            {"type": "text", "text": "from another home"}
        ])]
    );
    let queued = s
        .log(&lead)
        .iter()
        .filter(|e| {
            e["type"] == "team/message/queued" && e["data"]["message"]["id"] == "team-message-far-1"
        })
        .count();
    assert_eq!(queued, 1);
    s.ok(&["team", "verify", &lead]);
}

/// Approvals on NATS: a run's request (in its log on the store) is listed and approved with
/// `troupe approve --store URL` from another process — the decision log is created on the
/// store and the running member, following it, runs the command exactly once outside the
/// sandbox; deciding it again, or a request nobody made, is exit 2 and adds nothing to the
/// stream.
#[test]
fn an_approval_on_nats_is_answered_with_troupe_approve_store() {
    let Some(s) = Setup::single() else { return };
    let workspace = s.path("ws");
    let outside = s.path("outside");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let target = outside.join("nats.txt");
    let script = s.path("approve.json");
    std::fs::write(
        &script,
        json!({"agents": {"lead": [
            {"tool_calls": [{"name": "bash", "arguments": {
                "command": format!("echo x >> {}", target.display()),
                "escalate": true, "justification": "publish it"}}]},
            {"text": "approved on nats"},
        ]}})
        .to_string(),
    )
    .unwrap();
    let mut run = Running(
        s.troupe(&["run", "--approval", "on-request", "--workspace"])
            .arg(&workspace)
            .arg("--model")
            .arg(format!("script:{}", script.display()))
            .arg("do it")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    let (lead, asked) = loop {
        assert!(start.elapsed() < DEADLINE, "no request became pending");
        std::thread::sleep(Duration::from_millis(100));
        let Some(lead) = s.sessions().into_iter().next() else {
            continue;
        };
        let listed: Value = serde_json::from_str(&s.ok(&["approve", &lead, "--json"])).unwrap();
        if let Some(first) = listed.as_array().unwrap().first() {
            break (lead, first.clone());
        }
    };
    assert_eq!(asked["member"], "lead");
    assert_eq!(asked["justification"], "publish it");
    let request = asked["id"].as_str().unwrap().to_owned();
    assert!(!target.exists(), "nothing ran before the answer");
    let out = s.ok(&["approve", &lead, &request]);
    assert!(
        out.starts_with(&format!("approved request {request}")),
        "{out}"
    );
    assert!(wait_exit(&mut run).success());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "x\n", "ran once");
    let decided: Vec<Value> = s
        .log(&lead)
        .into_iter()
        .filter(|e| e["type"] == "approval/decided")
        .map(|e| e["data"].clone())
        .collect();
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(decided[0]["decision"], "approve");
    assert_eq!(decided[0]["by"], "cli");
    // Bad input: exit 2, one line, nothing added to the stream.
    let messages = s.messages();
    for (request, says) in [
        (request.as_str(), "APPROVAL_ALREADY_DECIDED"),
        ("00000000", "APPROVAL_NOT_FOUND"),
    ] {
        let out = s.run(&["approve", &lead, request]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.contains(says), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    assert_eq!(s.messages(), messages);
    assert_eq!(s.sessions(), [lead]);
}

/// On the NATS store a member's sandboxed command cannot reach the store (issue 16, defect
/// 1): the Lead asks to run a command outside the sandbox; its teammate alpha's `bash` then
/// runs `troupe approve LEAD REQUEST --always --store URL`, and a raw TCP connect to the
/// server's port — both fail (`Permission denied`, with the note naming the rule), the request
/// stays pending, and only the test (the human) decides it. A TCP connect to another loopback
/// port still works: the network stays on.
#[test]
fn a_sandboxed_command_cannot_reach_the_nats_store_to_approve_its_leads_request() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let port = s
        .url()
        .rsplit_once(':')
        .map(|(_, port)| port.to_owned())
        .unwrap();
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other_port = other.local_addr().unwrap().port();
    let accepting = std::thread::spawn(move || drop(other.accept()));
    let troupe_bin = env!("CARGO_BIN_EXE_troupe");
    let connect = |port: &str| {
        format!(
            "/usr/bin/python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", \
             {port}), 5); print(\"connected to {port}\")'"
        )
    };
    let mptcp = format!(
        "/usr/bin/python3 -c 'import socket; a = socket.socket(socket.AF_INET, \
             socket.SOCK_STREAM, 262); a.settimeout(5); a.connect((\"127.0.0.1\", {port})); \
             print(\"mptcp connected to {port}\")'"
    );
    let attack = format!(
        "while [ ! -f request ]; do sleep 0.05; done; \
         {troupe_bin} --home {home} --store {url} approve $(cat request) --always; \
         echo \"approve exit $?\"; {nats}; {mptcp}; {other}",
        home = s.home().display(),
        url = s.url(),
        nats = connect(&port),
        other = connect(&other_port.to_string()),
    );
    let call = |name: &str, arguments: Value| json!({"tool_calls": [{"name": name, "arguments": arguments}]});
    let script = s.path("team.json");
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                call("bash", json!({"command": "echo escalated-ran", "escalate": true,
                                    "justification": "needs it"})),
                {"text": "lead done"},
                {"text": "lead answer 2"},
                {"text": "lead answer 3"},
            ],
            "alpha": [
                call("bash", json!({"command": attack, "timeout_ms": 600000})),
                {"text": "alpha answer 1"},
                {"text": "alpha answer 2"},
            ],
        }})
        .to_string(),
    )
    .unwrap();
    let mut run = Running(
        s.troupe(&["run", "--team", "--approval", "on-request", "--workspace"])
            .arg(&workspace)
            .arg("--model")
            .arg(format!("script:{}", script.display()))
            .arg("fix it")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    let (lead, request) = loop {
        assert!(start.elapsed() < DEADLINE, "the Lead never asked");
        std::thread::sleep(Duration::from_millis(100));
        let Some(lead) = s.lead() else { continue };
        let listed: Value =
            serde_json::from_str(&s.ok(&["approve", lead.as_str(), "--json"])).unwrap();
        if let Some(id) = listed[0]["id"].as_str() {
            break (lead.to_string(), id.to_owned());
        }
    };
    std::fs::write(workspace.join("request"), format!("{lead} {request}")).unwrap();
    let alpha_result = loop {
        assert!(start.elapsed() < DEADLINE, "alpha's command never ended");
        std::thread::sleep(Duration::from_millis(100));
        let log = s.log(&lead);
        let Some(alpha) = log.iter().find_map(|e| {
            (e["type"] == "team/member")
                .then(|| e["data"]["member"]["id"].as_str().unwrap().to_owned())
        }) else {
            continue;
        };
        if let Some(result) = s
            .log(&alpha)
            .into_iter()
            .find(|e| e["type"] == "tool/result")
        {
            break result["data"].to_string();
        }
    };
    assert!(
        alpha_result.contains("approve exit ") && !alpha_result.contains("approve exit 0"),
        "{alpha_result}"
    );
    assert!(alpha_result.contains("Permission denied"), "{alpha_result}");
    assert!(
        !alpha_result.contains(&format!("connected to {port}")),
        "neither over TCP nor Multipath TCP: {alpha_result}"
    );
    assert!(
        alpha_result.contains(&format!("connected to {other_port}")),
        "the network is still on: {alpha_result}"
    );
    assert!(
        alpha_result.contains(&format!(
            "TCP connects to the session store's ports ({port}) are denied"
        )),
        "the note names the rule: {alpha_result}"
    );
    let listed: Value = serde_json::from_str(&s.ok(&["approve", &lead, "--json"])).unwrap();
    assert_eq!(listed[0]["id"], json!(request), "still pending: {listed}");
    // The human decides it.
    s.ok(&["approve", &lead, &request, "--deny"]);
    assert!(wait_exit(&mut run).success());
    accepting.join().unwrap();
    let decided: Vec<Value> = s
        .log(&lead)
        .into_iter()
        .filter(|e| e["type"] == "approval/decided")
        .map(|e| e["data"].clone())
        .collect();
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(
        (&decided[0]["decision"], &decided[0]["by"]),
        (&json!("deny"), &json!("cli"))
    );
    assert!(
        !s.log(&lead)
            .iter()
            .any(|e| e["type"] == "tool/result" && e["data"].to_string().contains("escalated-ran")),
        "the escalated command never ran"
    );
}

/// The Team service through a real `troupe run` (issue 14 item 1): while the run holds its
/// Lead's lease it answers `troupe.team.<lead>.op`. The test process hosts the teammate
/// (it takes the teammate's lease once the run released it) and calls the Team's tools
/// through `RemoteTeam` over NATS: a task created and claimed there is the run's (the Lead log
/// holds it, `team show` and `team verify` agree); a call from a process that does not host
/// the teammate is `TEAM_NOT_AUTHORIZED` and appends nothing.
#[test]
fn a_running_team_on_nats_serves_the_team_tools_of_a_teammate_hosted_elsewhere() {
    use troupe_runtime::team::RemoteTeam;
    use troupe_store_nats::{LinkOptions, NatsTeamLink};
    use troupe_tools::{FileObservations, Tool, ToolContext};

    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let call = |name: &str, arguments: Value| json!({"tool_calls": [{"name": name, "arguments": arguments}]});
    let script = s.path("team.json");
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                call("bash", json!({"command": "while [ ! -f go ]; do sleep 0.05; done", "timeout_ms": 600000})),
                {"text": "lead done"},
                {"text": "lead answer 2"},
                {"text": "lead answer 3"},
            ],
            "alpha": [{"text": "alpha answer 1"}, {"text": "alpha answer 2"}],
        }})
        .to_string(),
    )
    .unwrap();
    let mut run = Running(
        s.troupe(&["run", "--team", "--workspace"])
            .arg(&workspace)
            .arg("--model")
            .arg(format!("script:{}", script.display()))
            .arg("fix it")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    let lead = loop {
        assert!(start.elapsed() < DEADLINE, "the Team never started");
        if let Some(lead) = s.lead() {
            break lead;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The Lead waits in its `bash` call; alpha answered its first turn and was released.
    let alpha = loop {
        assert!(
            start.elapsed() < DEADLINE,
            "the Lead never reached its bash call"
        );
        std::thread::sleep(Duration::from_millis(50));
        let log = s.log(lead.as_str());
        let Some(alpha) = log.iter().find_map(|e| {
            (e["type"] == "team/member" && e["data"]["member"]["phase"] == "active")
                .then(|| e["data"]["member"]["id"].as_str().unwrap().to_owned())
        }) else {
            continue;
        };
        if log.iter().any(|e| e["type"] == "tool/process") {
            break SessionId::new(&alpha).unwrap();
        }
    };
    let options = NatsOptions {
        lease_ttl: s.lease_ttl,
        ..NatsOptions::default()
    };
    let host = NatsBackend::connect(&s.url(), options.clone()).unwrap();
    let hosted = Journal::with_backend(Arc::new(host.clone()), Arc::new(SystemClock));
    let writer = loop {
        assert!(start.elapsed() < DEADLINE, "alpha's lease was never free");
        match hosted.open(&alpha) {
            Ok((writer, _)) => break writer,
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let tools_of = |nats: &NatsBackend| {
        let link = NatsTeamLink::new(nats.clone(), lead.clone(), LinkOptions::default());
        RemoteTeam::new(Arc::new(link), Arc::new(|_: &SessionId| None)).tools()
    };
    let ask = |tools: &[Arc<dyn Tool>], name: &str, call_id: &str, args: Value| {
        let tool = tools.iter().find(|t| t.name() == name).unwrap();
        let context = ToolContext::new(
            &workspace,
            alpha.clone(),
            Arc::new(FileObservations::default()),
        )
        .unwrap()
        .with_call_id(call_id);
        rt.block_on(tool.call_text(&context, args))
    };
    let tools = tools_of(&host);
    let created = ask(
        &tools,
        "team_task_create",
        "remote-1",
        json!({"subject": "from afar", "description": "made by a teammate hosted elsewhere"}),
    )
    .unwrap();
    assert!(
        created.starts_with("{\"id\":\"task-1\",\"revision\":1,"),
        "{created}"
    );
    let claimed = ask(
        &tools,
        "team_task_update",
        "remote-2",
        json!({"task_id": "task-1", "expected_revision": 1, "action": "claim"}),
    )
    .unwrap();
    assert!(claimed.contains("\"ownerName\":\"alpha\""), "{claimed}");
    // Another process, which does not host alpha.
    let before = s.log(lead.as_str()).len();
    let stranger = NatsBackend::connect(&s.url(), options).unwrap();
    let refused = ask(
        &tools_of(&stranger),
        "team_task_create",
        "forged-1",
        json!({"subject": "forged", "description": "d"}),
    )
    .unwrap_err();
    assert_eq!(
        troupe_protocol::ErrorCode::code(&refused),
        "TEAM_NOT_AUTHORIZED",
        "{refused}"
    );
    assert_eq!(s.log(lead.as_str()).len(), before, "nothing appended");
    drop(writer);
    std::fs::write(workspace.join("go"), "").unwrap();
    assert!(wait_exit(&mut run).success());
    let shown: Value =
        serde_json::from_str(&s.ok(&["team", "show", lead.as_str(), "--json"])).unwrap();
    let tasks = shown["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{shown}");
    assert_eq!(tasks[0]["subject"], "from afar");
    assert_eq!(tasks[0]["status"], "in_progress");
    let links: Vec<String> = s
        .log(lead.as_str())
        .iter()
        .filter(|e| e["type"] == "tool/effect")
        .map(|e| e["data"]["callId"].as_str().unwrap().to_owned())
        .filter(|id| id.starts_with("remote-") || id.starts_with("forged-"))
        .collect();
    assert_eq!(links, ["remote-1", "remote-2"]);
    s.ok(&["team", "verify", lead.as_str()]);
}

/// `troupe worker` stopped (SIGTERM) while its NATS server is gone exits within seconds, as
/// the README says SIGTERM does (a new user's trial: it hung until the server came back, in
/// the unsubscribe and the deregistration that waited for it).
#[test]
fn a_worker_stopped_while_its_server_is_gone_exits() {
    let Some(mut s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (mut worker, log) = start_worker(&s, "w1", &workspace);
    s.store = None;
    s.server.kill(0);
    std::thread::sleep(Duration::from_millis(500));
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&worker.0),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let end = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = worker.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < end,
            "the worker did not exit: {}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(status.code().is_some(), "{said}");
    assert!(said.contains("stopping: parking its members"), "{said}");
}

/// `troupe worker --name NAME --workspace DIR` on the setup's store, its stderr in a file of
/// the setup (returned: read it with [`std::fs::read_to_string`]).
fn start_worker(s: &Setup, name: &str, workspace: &Path) -> (Running, PathBuf) {
    start_worker_with(s, name, workspace, &[])
}

/// [`start_worker`] with `extra` flags (`--adopt`, `--slots N`…): its stderr in
/// `<name>.stderr`, returned once it says it is serving.
fn start_worker_with(
    s: &Setup,
    name: &str,
    workspace: &Path,
    extra: &[&str],
) -> (Running, PathBuf) {
    let log = s.path(&format!("{name}.stderr"));
    let file = std::fs::File::create(&log).unwrap();
    let mut cmd = bin();
    cmd.env("TROUPE_LEASE_TTL", format!("{}s", s.lease_ttl.as_secs()))
        .arg("--home")
        .arg(s.path(&format!("home-{name}")))
        .arg("--store")
        .arg(s.url())
        .args(["worker", "--name", name, "--workspace"])
        .arg(workspace)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::from(file));
    let worker = Running(cmd.spawn().unwrap());
    let start = Instant::now();
    while !std::fs::read_to_string(&log).unwrap().contains("serving") {
        assert!(start.elapsed() < DEADLINE, "worker {name} never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    (worker, log)
}

/// `troupe run --team --placement workers` in `workspace` of a Lead that spawns alpha (who
/// answers at once) and answers: the run ends once alpha settled, wherever it ran.
fn run_one_teammate_placed(s: &Setup, workspace: &Path) -> Output {
    let script = s.path("team.json");
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                {"tool_calls": [{"name": "spawn_teammate", "arguments": {"name": "alpha", "description": "helps", "prompt": "start"}}]},
                {"text": "lead done"},
            ],
            "alpha": [{"text": "alpha done"}],
        }})
        .to_string(),
    )
    .unwrap();
    s.troupe(&["run", "--team", "--placement", "workers", "--workspace"])
        .arg(workspace)
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("go")
        .output()
        .unwrap()
}

/// `--placement workers` with no worker registered: the teammate runs in the Lead's process,
/// and the warning says why (there is no worker at all), not only that.
#[test]
fn placement_without_any_worker_says_none_is_registered() {
    let Some(s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let out = run_one_teammate_placed(&s, &workspace);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "troupe: warning: no worker can host teammate alpha: it runs in the Lead's process \
             (no worker is registered on this store: start one with troupe worker)"
        ),
        "{stderr}"
    );
}

/// A worker whose last heartbeat said it is full (a slot freed since: the heartbeat lags
/// the release of a teammate that settled) is still asked, last, and hosts the teammate; it
/// was skipped ("no free slot") and the teammate ran in the Lead's process (a new-user trial).
#[test]
fn a_worker_whose_heartbeat_says_full_is_still_asked_and_hosts_the_teammate() {
    // A long TTL: the entry written below stays as written for the whole run (the worker's
    // heartbeat, refused at its old revision, cannot replace it before it expires).
    let Some(server) = NatsServer::single() else {
        return;
    };
    let s = Setup::on(server, Duration::from_secs(60));
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let (_w1, w1_log) = start_worker(&s, "w1", &workspace);
    let (rt, js) = s.raw();
    rt.block_on(async {
        let kv = js.get_key_value("TROUPE_WORKERS").await.unwrap();
        let entry = kv.entry("w1").await.unwrap().unwrap();
        let mut record: Value = serde_json::from_slice(&entry.value).unwrap();
        record["free"] = json!(0);
        kv.put("w1", serde_json::to_vec(&record).unwrap().into())
            .await
            .unwrap();
    });
    let out = run_one_teammate_placed(&s, &workspace);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("runs in the Lead's process"), "{stderr}");
    assert!(!stderr.contains("skipped"), "{stderr}");
    let hosted = std::fs::read_to_string(&w1_log).unwrap();
    assert!(
        hosted.contains("troupe worker w1: hosting alpha ("),
        "{hosted}"
    );
}

/// Issue 14 items 2–3: `troupe run --placement workers` places its teammate on the live
/// `troupe worker` whose workspace is the Lead's (the other worker, in another directory, is
/// skipped with the reason on stderr); the teammate runs there — `team show` naming its host
/// `w1` and the Lead's `local` meanwhile —, its Team call reaches the Lead's serializer, the
/// run ends once it settled (not before), and `team verify` passes. SIGTERM then parks the
/// worker (exit 0) and frees its name.
#[test]
fn a_team_run_places_its_teammate_on_a_worker_with_its_workspace() {
    let Some(s) = Setup::single() else { return };
    let workspace = s.path("ws");
    let elsewhere = s.path("other");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let call = |name: &str, arguments: Value| json!({"tool_calls": [{"name": name, "arguments": arguments}]});
    let script = s.path("team.json");
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                call("wait_agent", json!({"timeout_ms": 120000})),
                {"text": "lead done"},
            ],
            "alpha": [
                call("bash", json!({"command": "while [ ! -f go ]; do sleep 0.05; done", "timeout_ms": 600000})),
                call("team_task_create", json!({"subject": "from the worker", "description": "d"})),
                {"text": "alpha done"},
            ],
        }})
        .to_string(),
    )
    .unwrap();
    let (mut w1, w1_log) = start_worker(&s, "w1", &workspace);
    let (_w2, w2_log) = start_worker(&s, "w2", &elsewhere);
    let (_w3, _) = start_worker(&s, "w3", &elsewhere);
    let run_err = s.path("run.stderr");
    let mut run = Running(
        s.troupe(&["run", "--team", "--placement", "workers", "--workspace"])
            .arg(&workspace)
            .arg("--model")
            .arg(format!("script:{}", script.display()))
            .arg("fix it")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&run_err).unwrap()))
            .spawn()
            .unwrap(),
    );
    // While alpha runs on w1, `team show` names each live member's host.
    let start = Instant::now();
    let (lead, shown) = loop {
        assert!(start.elapsed() < DEADLINE, "alpha was never shown on w1");
        std::thread::sleep(Duration::from_millis(100));
        let Ok(err) = std::fs::read_to_string(&run_err) else {
            continue;
        };
        let Some(line) = err.lines().find(|l| l.starts_with("session ")) else {
            continue;
        };
        let lead = line.split_whitespace().nth(1).unwrap().to_owned();
        let out = s.run(&["team", "show", &lead, "--json"]);
        if !out.status.success() {
            continue;
        }
        let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
        let on_w1 = shown["members"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "alpha" && m["host"] == "w1");
        if on_w1 {
            break (lead, shown);
        }
    };
    let lead_row = &shown["members"][0];
    assert_eq!(lead_row["host"], "local", "{shown}");
    let table = s.ok(&["team", "show", &lead]);
    assert!(table.contains("HOST"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.trim_start().starts_with("alpha") && l.contains(" w1 ")),
        "{table}"
    );
    std::fs::write(workspace.join("go"), "").unwrap();
    assert!(wait_exit(&mut run).success());
    let stderr = std::fs::read_to_string(&run_err).unwrap();
    // One line for the placement, naming both workers skipped and why.
    let skipped: Vec<&str> = stderr.lines().filter(|l| l.contains("skipped")).collect();
    assert_eq!(skipped.len(), 1, "{stderr}");
    assert!(
        skipped[0].starts_with("troupe: warning: workers skipped for teammate alpha: ")
            && skipped[0].contains(": w2: its workspace ")
            && skipped[0].contains("; w3: its workspace ")
            && skipped[0].matches("is not the Lead's").count() == 2,
        "{stderr}"
    );
    let shown: Value = serde_json::from_str(&s.ok(&["team", "show", &lead, "--json"])).unwrap();
    let alpha = shown["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "alpha")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let hosted = std::fs::read_to_string(&w1_log).unwrap();
    assert!(
        hosted.contains(&format!("troupe worker w1: hosting alpha ({alpha})")),
        "{hosted}"
    );
    assert!(
        !std::fs::read_to_string(&w2_log)
            .unwrap()
            .contains("hosting"),
        "w2 hosted nothing"
    );
    let tasks = shown["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{shown}");
    assert_eq!(tasks[0]["subject"], "from the worker");
    // alpha's log: its answer, written by the worker.
    assert!(
        s.log(&alpha)
            .iter()
            .any(|e| e.to_string().contains("alpha done")),
        "alpha answered"
    );
    s.ok(&["team", "verify", &lead]);
    // SIGTERM: the worker parks and exits 0; its name is free again at once.
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&w1.0),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert!(wait_exit(&mut w1).success());
    assert!(
        std::fs::read_to_string(&w1_log)
            .unwrap()
            .contains("stopping: parking its members")
    );
    let (_again, _) = start_worker(&s, "w1", &workspace);
}

/// The fresh-user trial: `troupe resume` remembers `--placement workers`. The run records it
/// in the Lead's first `agent/config`; a resume without the flag wakes alpha on the worker
/// again (its stderr names each time it hosts alpha), and an explicit `--placement local`
/// wakes it in the resuming process instead, for that resume only (the record stays).
#[test]
fn a_resume_without_placement_places_as_the_run_did_and_the_flag_wins() {
    let Some(s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let call = |name: &str, arguments: Value| json!({"tool_calls": [{"name": name, "arguments": arguments}]});
    let wake = || {
        json!({"tool_calls": [
            {"name": "followup_task", "arguments": {"target": "alpha", "message": "again"}},
            {"name": "wait_agent", "arguments": {"timeout_ms": 120000}},
        ]})
    };
    let script = s.path("team.json");
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                call("wait_agent", json!({"timeout_ms": 120000})),
                {"text": "lead one"},
                wake(),
                {"text": "lead two"},
                wake(),
                {"text": "lead three"},
            ],
            "alpha": [{"text": "alpha one"}, {"text": "alpha two"}, {"text": "alpha three"}],
        }})
        .to_string(),
    )
    .unwrap();
    // Two slots: the worker frees alpha's slot in its registry record a moment after alpha
    // settled, and the next command may place alpha before that.
    let (_w1, w1_log) = start_worker_with(&s, "w1", &workspace, &["--slots", "2"]);
    let out = s
        .troupe(&["run", "--team", "--placement", "workers", "--workspace"])
        .arg(&workspace)
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("go")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let lead = session_of(&err);
    let config = s
        .log(&lead)
        .into_iter()
        .find(|e| e["type"] == "agent/config")
        .unwrap();
    assert_eq!(config["data"]["placement"], "workers", "{config}");
    let alpha = killpoints::member_id(&s, &lead, "alpha");
    let hosted = || {
        std::fs::read_to_string(&w1_log)
            .unwrap()
            .matches(&format!("hosting alpha ({alpha})"))
            .count()
    };
    assert_eq!(hosted(), 1);
    let answered = |n: &str| {
        s.log(&alpha)
            .iter()
            .any(|e| e["type"] == "assistant/message" && e.to_string().contains(n))
    };
    // No flag: the recorded `workers`.
    let out = s.run(&["resume", &lead, "next"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(answered("alpha two"));
    assert_eq!(hosted(), 2, "alpha was woken on the worker again");
    // `--placement local`: this process runs alpha.
    let out = s.run(&["resume", &lead, "--placement", "local", "last"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(answered("alpha three"));
    assert_eq!(hosted(), 2, "alpha ran in the resuming process");
}

/// Two workers started at the same moment on a fresh three-server cluster both register: the
/// worker registry's bucket, just created, answers `no responders` for a moment, and a
/// registration asks again instead of failing (one of the two exited `STORE_IO` four times
/// in five in a new-user trial).
#[test]
fn two_workers_started_at_once_on_a_fresh_cluster_both_register() {
    let Some(s) = Setup::cluster() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    // The session stream with three replicas: the registry is made with as many, and a new
    // three-replica bucket elects its leader before it answers.
    let out = s.run(&["--replicas", "3", "sessions"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let start = |name: &str| {
        let log = s.path(&format!("{name}.stderr"));
        let worker = Running(
            bin()
                .env("TROUPE_LEASE_TTL", format!("{}s", s.lease_ttl.as_secs()))
                .arg("--home")
                .arg(s.path(&format!("home-{name}")))
                .arg("--store")
                .arg(s.url())
                .args(["worker", "--name", name, "--workspace"])
                .arg(&workspace)
                .stdout(Stdio::null())
                .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
                .spawn()
                .unwrap(),
        );
        (worker, log)
    };
    let mut workers = [start("c1"), start("c2")];
    let begun = Instant::now();
    for (worker, log) in &mut workers {
        loop {
            let said = std::fs::read_to_string(&*log).unwrap();
            if said.contains("serving") {
                break;
            }
            if let Some(status) = worker.0.try_wait().unwrap() {
                panic!("a worker exited ({status}): {said}");
            }
            assert!(
                begun.elapsed() < DEADLINE,
                "a worker never registered: {said}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `troupe worker`'s bad input (issue 14): no NATS store, `--slots 0`, a `--secret-env` that
/// is no variable name, a `--pace` out of range, a name a live worker has — each a one-line
/// error, exit 2; the name of a worker killed on this host is free at once.
#[test]
fn a_worker_without_a_nats_store_or_slots_or_with_a_taken_name_is_refused_but_a_dead_ones_is_free()
{
    let Some(s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let refused = |out: Output, says: &str| {
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
    };
    refused(
        bin()
            .arg("--home")
            .arg(s.home())
            .args(["worker", "--workspace"])
            .arg(&workspace)
            .output()
            .unwrap(),
        "troupe worker needs a NATS store",
    );
    refused(
        s.troupe(&["worker", "--slots", "0", "--workspace"])
            .arg(&workspace)
            .output()
            .unwrap(),
        "--slots",
    );
    // Negative and huge values name the real range (not an unknown flag, not u64::MAX).
    for (flag, value, said) in [
        ("--slots", "-1", "-1 is not in 1..=1024"),
        (
            "--slots",
            "99999999999999999999",
            "99999999999999999999 is not in 1..=1024",
        ),
        (
            "--pace",
            "99999999999999999999",
            "99999999999999999999 is not in 0..=60000",
        ),
    ] {
        refused(
            s.troupe(&["worker", flag, value, "--workspace"])
                .arg(&workspace)
                .output()
                .unwrap(),
            said,
        );
    }
    refused(
        s.troupe(&["worker", "--slots", "2000", "--workspace"])
            .arg(&workspace)
            .output()
            .unwrap(),
        "2000 is not in 1..=1024",
    );
    let long = "w".repeat(65);
    refused(
        s.troupe(&["worker", "--name", &long, "--workspace"])
            .arg(&workspace)
            .output()
            .unwrap(),
        "use 1 to 64 letters, digits, '-' and '_'",
    );
    refused(
        s.troupe(&["worker", "--name", "", "--workspace"])
            .arg(&workspace)
            .output()
            .unwrap(),
        "use 1 to 64 letters, digits, '-' and '_'",
    );
    refused(
        s.troupe(&["worker", "--secret-env", "MY KEY", "--workspace"])
            .arg(&workspace)
            .output()
            .unwrap(),
        "--secret-env \"MY KEY\": an environment variable name",
    );
    refused(
        s.troupe(&["worker", "--secret-env", "1BAD", "--workspace"])
            .arg(&workspace)
            .output()
            .unwrap(),
        "--secret-env \"1BAD\": an environment variable name",
    );
    refused(
        s.troupe(&["worker", "--pace", "70000", "--workspace"])
            .arg(&workspace)
            .output()
            .unwrap(),
        "70000 is not in 0..=60000",
    );
    let (mut w1, _) = start_worker(&s, "w1", &workspace);
    refused(
        s.troupe(&["worker", "--name", "w1", "--workspace"])
            .arg(&workspace)
            .output()
            .unwrap(),
        "troupe: WORKER_NAME_TAKEN: a live worker is already registered as w1",
    );
    // Killed without deregistering: its entry outlives it by a TTL, but its name is free at
    // once on its own host (its pid names no process).
    w1.0.kill().unwrap();
    let _ = w1.0.wait();
    let (_w1, log) = start_worker(&s, "w1", &workspace);
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("troupe worker w1: serving")
    );
    let script = s.path("lead.json");
    std::fs::write(
        &script,
        json!({"agents": {"lead": [{"text": "done"}]}}).to_string(),
    )
    .unwrap();
    refused(
        bin()
            .arg("--home")
            .arg(s.home())
            .args(["run", "--team", "--placement", "workers", "--workspace"])
            .arg(&workspace)
            .arg("--model")
            .arg(format!("script:{}", script.display()))
            .arg("x")
            .output()
            .unwrap(),
        "--placement workers needs a NATS store",
    );
    refused(
        s.troupe(&["run", "--placement", "workers", "--workspace"])
            .arg(&workspace)
            .arg("--model")
            .arg(format!("script:{}", script.display()))
            .arg("x")
            .output()
            .unwrap(),
        "--placement applies to Team runs only: add --team",
    );
    // A budget with workers holds on the workers too: no warning.
    let out = s
        .troupe(&[
            "run",
            "--team",
            "--placement",
            "workers",
            "--budget-tokens",
            "100000",
        ])
        .arg("--workspace")
        .arg(&workspace)
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("x")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
}

/// `team show --json` with what differs between two runs of one script left out: session
/// and message ids (numbered in order of appearance), times, log positions (`seq`: the
/// members' logs interleave differently) and model paths (the script is under each home).
fn show_shape(view: &Value) -> String {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(map) => Value::Object(
                map.iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "time" | "seq" | "model"))
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    let text = serde_json::to_string_pretty(&strip(view)).unwrap();
    let mut ids: Vec<String> = Vec::new();
    let mut out = String::new();
    let mut rest = text.as_str();
    // A UUID: 36 characters, hex digits and dashes at 8-4-4-4-12.
    let is_uuid = |s: &str| {
        s.len() >= 36
            && s[..36].char_indices().all(|(i, c)| {
                if [8, 13, 18, 23].contains(&i) {
                    c == '-'
                } else {
                    c.is_ascii_hexdigit()
                }
            })
    };
    while !rest.is_empty() {
        if is_uuid(rest) {
            let id = rest[..36].to_owned();
            let n = ids.iter().position(|i| *i == id).unwrap_or_else(|| {
                ids.push(id);
                ids.len() - 1
            });
            out.push_str(&format!("<id{n}>"));
            rest = &rest[36..];
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// Issue 14 item 5, the end-to-end test: two `troupe worker`s and `troupe demo --placement
/// workers` — every teammate hosted by a worker (their stderr names each one they host and
/// shows its tool calls and turn ends), the
/// same end state as the local demo (`team show --json` equal up to ids,
/// times and log positions), `team verify` passes, the project's tests pass, every message
/// delivered exactly once.
#[test]
fn the_demo_with_two_workers_ends_as_the_local_demo_with_every_teammate_on_a_worker() {
    let Some(s) = Setup::single() else { return };
    // The local demo on the files of another home (the NATS store shows what the files show).
    let files = s.path("files");
    let local = s.path("local");
    let out = on_files(&files, &["demo", "--workspace", local.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let local_lead = session_of(&text(&out.stderr));
    let workspace = s.path("placed");
    std::fs::create_dir_all(&workspace).unwrap();
    let (_wa, wa_log) = start_worker(&s, "wa", &workspace);
    let (_wb, wb_log) = start_worker(&s, "wb", &workspace);
    let out = s.run(&[
        "demo",
        "--placement",
        "workers",
        "--workspace",
        workspace.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lead = session_of(&stderr);
    assert_demo_done_once(&s, &workspace, &lead);
    let view: Value = serde_json::from_str(&s.ok(&["team", "show", &lead, "--json"])).unwrap();
    let local_view: Value =
        serde_json::from_str(&files_ok(&files, &["team", "show", &local_lead, "--json"])).unwrap();
    assert_eq!(show_shape(&view), show_shape(&local_view));
    let hosted = format!(
        "{}{}",
        std::fs::read_to_string(&wa_log).unwrap(),
        std::fs::read_to_string(&wb_log).unwrap()
    );
    for member in view["members"].as_array().unwrap() {
        if member["role"] == "teammate" {
            let line = format!(
                "hosting {} ({})",
                member["name"].as_str().unwrap(),
                member["id"].as_str().unwrap()
            );
            assert!(hosted.contains(&line), "{line} not in {hosted}");
            // Its tool calls and turn ends are on its worker's stderr (README).
            let name = member["name"].as_str().unwrap();
            for line in [
                format!("{name}: team_task_update "),
                format!("{name}: turn "),
            ] {
                assert!(hosted.contains(&line), "{line} not in {hosted}");
            }
        }
    }
}

/// Issue 14, chaos: `kill -9` of the worker hosting a running teammate — its host stops
/// reporting and its lease expires; the Lead's process then continues the teammate itself
/// (its cut turn closed from the logs, as after a crash) and the Team finishes: the teammate's
/// later work is done once, `team verify` passes.
#[test]
fn kill_9_of_the_worker_hosting_a_running_teammate_and_the_team_still_finishes() {
    let Some(s) = Setup::single() else { return };
    let workspace = s.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let call = |name: &str, arguments: Value| json!({"tool_calls": [{"name": name, "arguments": arguments}]});
    let script = s.path("team.json");
    std::fs::write(
        &script,
        json!({"agents": {
            "lead": [
                call("spawn_teammate", json!({"name": "alpha", "description": "helps", "prompt": "start"})),
                call("wait_agent", json!({"timeout_ms": 120000})),
                {"text": "lead done"},
            ],
            "alpha": [
                call("bash", json!({"command": "touch started; while [ ! -f go ]; do sleep 0.05; done", "timeout_ms": 600000})),
                call("team_task_create", json!({"subject": "after the crash", "description": "d"})),
                {"text": "alpha done"},
            ],
        }})
        .to_string(),
    )
    .unwrap();
    let (mut w1, w1_log) = start_worker(&s, "w1", &workspace);
    let run_err = s.path("run.stderr");
    let mut run = Running(
        s.troupe(&["run", "--team", "--placement", "workers", "--workspace"])
            .arg(&workspace)
            .arg("--model")
            .arg(format!("script:{}", script.display()))
            .arg("fix it")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&run_err).unwrap()))
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while !workspace.join("started").exists() {
        assert!(start.elapsed() < DEADLINE, "alpha never ran on w1");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        std::fs::read_to_string(&w1_log)
            .unwrap()
            .contains("hosting alpha")
    );
    w1.0.kill().unwrap();
    let _ = w1.0.wait();
    // The orphaned loop of the dead worker is stopped by the recovery that continues alpha
    // (its process group is recorded); `go` lets the next step pass whatever happens.
    let status = wait_exit(&mut run);
    let stderr = std::fs::read_to_string(&run_err).unwrap();
    assert!(status.success(), "{stderr}");
    let lead = session_of(&stderr);
    let shown: Value = serde_json::from_str(&s.ok(&["team", "show", &lead, "--json"])).unwrap();
    let tasks = shown["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{shown}");
    assert_eq!(tasks[0]["subject"], "after the crash");
    s.ok(&["team", "verify", &lead]);
    std::fs::write(workspace.join("go"), "").unwrap();
}
