//! Workers (DESIGN §7 "Workers and placement"): a `troupe worker` process registers in the KV
//! bucket `TROUPE_WORKERS` ([`WorkerRegistration`]: key = its name, value = a
//! [`WorkerRecord`] with its free slots and [`WorkspaceIdentity`]), renews the entry as its
//! heartbeat, and hosts the teammates it is asked to host on `troupe.worker.<name>.host`
//! ([`NatsBackend::worker_subject`]; request [`HostRequest`], answer [`HostAnswer`]).
//!
//! **Liveness.** The bucket's `max_age` is the store's lease TTL: the entry is renewed
//! (`update(revision)`) every TTL/3, so a worker that dies disappears one TTL after its last
//! renewal and its name is free again. A name is taken with `create`: a second live worker
//! with the same name is refused. Nothing here is durable state of a Team: the registry only
//! says who can host now; the hosted teammates' leases and logs are the authority.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use troupe_protocol::SessionId;
use troupe_protocol::sync::lock;

use crate::NatsBackend;

/// The KV bucket of the live workers.
pub const WORKERS_BUCKET: &str = "TROUPE_WORKERS";
/// The prefix of a worker's subjects: `troupe.worker.<name>.host`. No stream may take them.
pub const WORKER_SUBJECT_PREFIX: &str = "troupe.worker.";
/// The version of the worker shapes.
pub const WORKER_VERSION: u32 = 1;

/// Where a process works: its workspace's canonical path and, when the workspace is in a git
/// repository, the repository's top level and its `HEAD` commit. Wire (camelCase):
/// `{"path","gitTop"?,"head"?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceIdentity {
    /// The canonical path.
    pub path: String,
    /// The git top level (canonical), when a repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_top: Option<String>,
    /// The `HEAD` commit, when a repository with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
}

impl WorkspaceIdentity {
    /// The identity of `dir` (runs `git rev-parse` there; no git, or not a repository: no git
    /// fields).
    ///
    /// # Errors
    /// `dir` cannot be canonicalized (it does not exist).
    pub fn of(dir: &Path) -> std::io::Result<Self> {
        let path = std::fs::canonicalize(dir)?;
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .arg("-C")
                .arg(&path)
                .args(args)
                .stdin(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .output()
                .ok()
                .filter(|out| out.status.success())
                .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
                .filter(|s| !s.is_empty())
        };
        Ok(Self {
            git_top: git(&["rev-parse", "--show-toplevel"]),
            head: git(&["rev-parse", "--verify", "-q", "HEAD"]),
            path: path.display().to_string(),
        })
    }

    /// Why a worker whose workspace is `self` may not host members of a Team whose Lead
    /// works in `lead`, `None` when it may: the same canonical path (one filesystem, or one
    /// synchronised path), or the same repository commit (both repositories at one `HEAD`).
    pub fn mismatch(&self, lead: &WorkspaceIdentity) -> Option<String> {
        if self.path == lead.path {
            return None;
        }
        match (&self.head, &lead.head) {
            (Some(mine), Some(theirs)) if mine == theirs => None,
            (Some(mine), Some(theirs)) => Some(format!(
                "its workspace {} is at commit {mine}, the Lead's {} at {theirs}",
                self.path, lead.path
            )),
            _ => Some(format!(
                "its workspace {} is not the Lead's {} (and not the same repository commit)",
                self.path, lead.path
            )),
        }
    }
}

/// A live worker's entry. Wire (camelCase): `{"version":1,"name","host","pid","pidNamespace"?,
/// "slots","free","workspace":{…},"since"}` (`since`: epoch milliseconds of its registration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerRecord {
    /// [`WORKER_VERSION`].
    pub version: u32,
    /// Its name (the key).
    pub name: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its pid namespace ([`pid_namespace`]), when known: a pid is looked up only by a
    /// process of the same host and namespace (two containers may share a host name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_namespace: Option<String>,
    /// How many teammates it hosts at most at once.
    pub slots: u32,
    /// How many more it can host now.
    pub free: u32,
    /// Its workspace.
    pub workspace: WorkspaceIdentity,
    /// When it registered, epoch milliseconds.
    pub since: u64,
}

/// A request to host a teammate. Wire: `{"version":1,"session","budget"?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostRequest {
    /// [`WORKER_VERSION`].
    pub version: u32,
    /// The teammate's session.
    pub session: SessionId,
    /// The Team's budget, when it has one: the worker holds the teammate to it with a
    /// ledger of the Team's whole spending (seeded from the logs, kept current by the
    /// [`crate::UsageRelay`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<HostedBudget>,
}

/// The Team's budget and prices in a [`HostRequest`]. Wire: `{"budget":{"tokens"?,"usd"?},
/// "prices":{"<model>":{"input","output","cached"}}}` (USD per million tokens).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostedBudget {
    /// The limits (at least one set).
    pub budget: troupe_session::ledger::Budget,
    /// The prices the Lead's process uses.
    pub prices: troupe_session::ledger::Prices,
}

/// The answer to a [`HostRequest`]: `{"ok":true}` once the teammate is resident in the worker
/// (its lease taken, its parked inbox woken), else `{"ok":false,"code","message"}` —
/// `WORKER_BUSY` (no free slot), `JOURNAL_LOCKED` (another process holds the teammate),
/// `NOT_RESUMABLE`, `INVALID_ARGUMENTS`, a journal or model setup error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostAnswer {
    /// Whether the worker hosts it now.
    pub ok: bool,
    /// The stable code (failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The message (failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl HostAnswer {
    /// Hosted.
    pub fn hosted() -> Self {
        Self {
            ok: true,
            code: None,
            message: None,
        }
    }

    /// A failure with `code` and `message`.
    pub fn failed(code: &str, message: impl Into<String>) -> Self {
        Self {
            ok: false,
            code: Some(code.to_owned()),
            message: Some(message.into()),
        }
    }
}

/// Why a worker could not register.
#[derive(Debug)]
pub enum RegisterError {
    /// A live worker has the name (`WORKER_NAME_TAKEN`).
    NameTaken {
        /// The name.
        name: String,
        /// Who holds it (host, pid).
        holder: String,
    },
    /// The bucket could not be reached or created (`STORE_IO`).
    Io {
        /// The store URL.
        url: String,
        /// The client's error.
        reason: String,
    },
}

impl std::fmt::Display for RegisterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegisterError::NameTaken { name, holder } => {
                write!(f, "a live worker is already registered as {name}: {holder}")
            }
            RegisterError::Io { url, reason } => {
                write!(f, "the worker registry {WORKERS_BUCKET} at {url}: {reason}")
            }
        }
    }
}

impl std::error::Error for RegisterError {}

impl troupe_protocol::ErrorCode for RegisterError {
    fn code(&self) -> &'static str {
        match self {
            RegisterError::NameTaken { .. } => "WORKER_NAME_TAKEN",
            RegisterError::Io { .. } => "STORE_IO",
        }
    }
}

/// The workers bucket, created with `max_age` = the store's lease TTL when missing, with as
/// many replicas as the session stream has (or this process's `--replicas`, if more): the
/// registry must outlive the loss of a server as the logs do, whichever process creates it
/// first (a worker started without `--replicas` on a cluster made a one-replica bucket, and
/// placement failed for as long as its one server was down).
///
/// A bucket that cannot be read, or was just created by another process whose replicas are
/// not answering yet, is asked again for up to the store's `append_timeout`.
async fn bucket(nats: &NatsBackend) -> Result<kv::Store, String> {
    let js = jetstream::new(nats.client());
    if let Ok(store) = js.get_key_value(WORKERS_BUCKET).await {
        return Ok(store);
    }
    let replicas = match js.get_stream(&nats.options().stream).await {
        Ok(mut stream) => stream
            .info()
            .await
            .map_or(0, |info| info.config.num_replicas),
        Err(_) => 0,
    };
    let config = kv::Config {
        bucket: WORKERS_BUCKET.to_owned(),
        history: 1,
        max_age: nats.lease_ttl(),
        storage: stream::StorageType::File,
        num_replicas: nats.options().replicas.max(replicas),
        ..Default::default()
    };
    let create = match js.create_key_value(config).await {
        Ok(store) => return Ok(store),
        Err(create) => create.to_string(),
    };
    // Created by another process meanwhile, or not readable now (an election).
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(50);
    loop {
        match js.get_key_value(WORKERS_BUCKET).await {
            Ok(store) => return Ok(store),
            Err(_) if started.elapsed() + pause < nats.options().append_timeout => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(get) => return Err(format!("{create}; reading it failed: {get}")),
        }
    }
}

/// This process's pid namespace as Linux names it (`pid:[4026531836]`, the target of
/// `/proc/self/ns/pid`); `None` where it cannot be read.
pub fn pid_namespace() -> Option<String> {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .map(|link| link.to_string_lossy().into_owned())
}

/// Whether a process with `pid` exists on this host (signal 0; one of another user counts).
fn process_exists(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

/// The live workers, in name order (an entry that does not parse is skipped).
///
/// # Errors
/// `STORE_IO` as text when the bucket cannot be read.
pub async fn live_workers(nats: &NatsBackend) -> Result<Vec<WorkerRecord>, String> {
    let store = bucket(nats).await?;
    let mut keys = store.keys().await.map_err(|e| e.to_string())?;
    let mut names = Vec::new();
    while let Some(key) = keys.next().await {
        names.push(key.map_err(|e| e.to_string())?);
    }
    names.sort();
    let mut workers = Vec::new();
    for name in names {
        if let Ok(Some(entry)) = store.entry(&name).await
            && entry.operation == kv::Operation::Put
            && let Ok(record) = serde_json::from_slice::<WorkerRecord>(&entry.value)
        {
            workers.push(record);
        }
    }
    Ok(workers)
}

/// The live workers, in name order, without creating the bucket (no bucket: none).
async fn live_workers_if_any(nats: &NatsBackend) -> Result<Vec<WorkerRecord>, String> {
    let js = jetstream::new(nats.client());
    if js.get_key_value(WORKERS_BUCKET).await.is_err() {
        return Ok(Vec::new());
    }
    live_workers(nats).await
}

impl NatsBackend {
    /// The live worker whose process holds session `id`'s lease now — the lease's holder
    /// (host and pid) is a worker registered in [`WORKERS_BUCKET`] — or `None`: nobody holds
    /// the lease, or its holder is another process (a `troupe run`/`resume`, or a worker
    /// whose registration expired: it is dead or cut off). Two requests (the lease entry, the
    /// registry); writes nothing (a store without the registry has no workers). Blocks the
    /// calling thread on the backend's runtime (safe inside another runtime's task).
    ///
    /// DESIGN §7 "Failover": a teammate a live worker hosts keeps running there while its
    /// Lead is resumed elsewhere, so its held lease is no reason to refuse the resume.
    ///
    /// # Errors
    /// `STORE_IO` when a request fails or the lease entry does not parse.
    pub fn hosting_worker(&self, id: &SessionId) -> troupe_journal::Result<Option<WorkerRecord>> {
        let nats = self.clone();
        let id = id.clone();
        let found = self.inner.call(async move {
            let Some(holder) = crate::lease::current_holder(&nats.inner.leases, &id).await? else {
                return Ok(None);
            };
            Ok(live_workers_if_any(&nats)
                .await?
                .into_iter()
                .find(|w| w.host == holder.host && w.pid == holder.pid))
        })?;
        found.map_err(|e: String| {
            self.inner
                .io("find the worker holding a session's lease", e)
        })
    }
}

/// A worker's registration, renewed in the background every TTL/3 (and at once when its free
/// slots change) with its current record
/// until [`WorkerRegistration::deregister`] (or drop: then the entry expires after the TTL).
#[derive(Debug)]
pub struct WorkerRegistration {
    store: kv::Store,
    name: String,
    state: Arc<Mutex<(WorkerRecord, u64)>>,
    /// Wakes the renewer at once (the free slots changed).
    now: Arc<tokio::sync::Notify>,
    renewer: tokio::task::JoinHandle<()>,
}

impl WorkerRegistration {
    /// Registers `record` under its name with `create`, on the calling tokio runtime. A name
    /// still registered by a worker of this host and pid namespace (`record.host`,
    /// `record.pid_namespace`, both known) whose process is gone (its pid names no process:
    /// it was killed without deregistering, its entry not yet expired)
    /// is taken over at once, with an update at the entry's revision (of two taking it over,
    /// one wins; the other gets `WORKER_NAME_TAKEN`); one of another host waits for its
    /// entry's expiry (one lease TTL after its last heartbeat).
    ///
    /// # Errors
    /// [`RegisterError::NameTaken`] when a live worker has the name (or another host's, not
    /// yet expired); [`RegisterError::Io`].
    pub async fn register(nats: &NatsBackend, record: WorkerRecord) -> Result<Self, RegisterError> {
        let io = |reason: String| RegisterError::Io {
            url: nats.url().to_owned(),
            reason,
        };
        let store = bucket(nats).await.map_err(io)?;
        let value = Bytes::from(serde_json::to_vec(&record).map_err(|e| io(e.to_string()))?);
        // A bucket just created on a cluster (or one electing its leader) answers `no
        // responders` for a moment: asked again for up to the store's append timeout.
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(50);
        let created = loop {
            match store.create(&record.name, value.clone()).await {
                Err(e)
                    if e.kind() != kv::CreateErrorKind::AlreadyExists
                        && started.elapsed() + pause < nats.options().append_timeout =>
                {
                    tracing::debug!(error = %e, "the worker registry did not answer; asking again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                other => break other,
            }
        };
        let revision = match created {
            Ok(revision) => revision,
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                let entry = store.entry(&record.name).await.ok().flatten();
                let holder = entry
                    .as_ref()
                    .and_then(|entry| serde_json::from_slice::<WorkerRecord>(&entry.value).ok());
                let taken = |holder: &Option<WorkerRecord>| RegisterError::NameTaken {
                    name: record.name.clone(),
                    holder: holder.as_ref().map_or_else(
                        || "an unknown worker".to_owned(),
                        |w| format!("host {} pid {}", w.host, w.pid),
                    ),
                };
                match (&entry, &holder) {
                    (Some(entry), Some(dead))
                        if dead.host == record.host
                            && dead.pid_namespace.is_some()
                            && dead.pid_namespace == record.pid_namespace
                            && !process_exists(dead.pid) =>
                    {
                        store
                            .update(&record.name, value, entry.revision)
                            .await
                            .map_err(|_| taken(&holder))?
                    }
                    _ => return Err(taken(&holder)),
                }
            }
            Err(e) => {
                return Err(io(format!(
                    "{} (for {} ms; is the NATS server's JetStream reachable and, on a cluster, \
                     a majority of its servers up?)",
                    crate::conn::error_text(&e),
                    started.elapsed().as_millis()
                )));
            }
        };
        let name = record.name.clone();
        let state = Arc::new(Mutex::new((record, revision)));
        let now = Arc::new(tokio::sync::Notify::new());
        let renewer = tokio::spawn(renew(
            store.clone(),
            name.clone(),
            Arc::clone(&state),
            Arc::clone(&now),
            nats.lease_ttl(),
        ));
        Ok(Self {
            store,
            name,
            state,
            now,
            renewer,
        })
    }

    /// Sets the free slots and renews the entry with them at once (in the background).
    pub fn set_free(&self, free: u32) {
        let changed = {
            let mut state = lock(&self.state);
            let changed = state.0.free != free;
            state.0.free = free;
            changed
        };
        if changed {
            self.now.notify_one();
        }
    }

    /// Stops renewing and deletes the entry (best effort: else it expires after the TTL).
    pub async fn deregister(self) {
        self.renewer.abort();
        let revision = lock(&self.state).1;
        let _ = self
            .store
            .delete_expect_revision(&self.name, Some(revision))
            .await;
    }
}

impl Drop for WorkerRegistration {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

/// The heartbeat: `update(revision)` every TTL/3 with the current record; a refused update
/// (the entry expired and was taken, or deleted) is logged and the entry written again when
/// free.
async fn renew(
    store: kv::Store,
    name: String,
    state: Arc<Mutex<(WorkerRecord, u64)>>,
    now: Arc<tokio::sync::Notify>,
    ttl: Duration,
) {
    let period = (ttl / 3).max(Duration::from_millis(100));
    loop {
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            () = now.notified() => {}
        }
        let (record, revision) = lock(&state).clone();
        let Ok(value) = serde_json::to_vec(&record) else {
            continue;
        };
        match store.update(&name, value.clone().into(), revision).await {
            Ok(revision) => lock(&state).1 = revision,
            Err(e) => {
                tracing::warn!(worker = %name, error = %e, "the worker's heartbeat failed");
                if let Ok(revision) = store.create(&name, value.into()).await {
                    lock(&state).1 = revision;
                }
            }
        }
    }
}
