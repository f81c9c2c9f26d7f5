//! The NATS JetStream store (DESIGN §7, decisions 8–9): Troupe's session logs on a replicated
//! stream, behind the journal's backend seam ([`troupe_journal::LogBackend`]).
//!
//! **Layout.** One stream (default `TROUPE`, file storage, [`NatsOptions::replicas`] replicas)
//! holding the subjects `troupe.session.>`; session `<id>` is the subject
//! `troupe.session.<id>`. Its first message is the header line, then one message per event
//! whose payload is exactly the JSONL line the file store writes (no newline). Reads join the
//! payloads with `'\n'` and hand them to the journal's own scans ([`troupe_journal::scan_each`],
//! [`troupe_journal::scan_selected_each`], [`troupe_journal::scan_events`]), so replay, batch
//! atomicity (`batchLast`), torn-tail and corruption rules and their errors are the file
//! store's; a line's "byte offset" is its offset in that joined image, which is byte for byte
//! the session file the JSONL store would hold.
//!
//! **Appends** ([`troupe_journal::SessionSink::append`], one group-commit round of the writer
//! actor) are a *fenced chain*, pipelined: every message carries
//! `Nats-Msg-Id: <id>/<seq>/<owner>` (a retried publish is de-duplicated; `owner` is the
//! writer's lease token, so another writer's message is never mistaken for a retry of this
//! one's); the first message of a send carries `Nats-Expected-Last-Subject-Sequence` (the
//! stream sequence of the subject's last message as this writer knows it: a mismatch is
//! `JOURNAL_SEQ_CONFLICT`, the fence against a writer that lost its lease) and each later one
//! `Nats-Expected-Last-Msg-Id` = the message before it. All acknowledgements are awaited
//! together (group commit). The checks make what the stream stores of one send a *prefix* of
//! it — a lost or refused message makes every later one fail, so there is never a gap — and
//! keep every message of a stale writer from landing behind another writer's. When another
//! session's message lands inside a chain, the rest fails its check and is sent again from
//! where it stopped. (JetStream's atomic batches would give all-or-nothing rounds too, but on
//! a file stream each costs 10–30 ms on this project's machine: see BENCHMARKS.md.)
//!
//! **Rounds in flight together** ([`troupe_journal::SessionPipeline`],
//! [`NatsOptions::pipeline_depth`], default 4): a flush requested while the writer's rounds
//! await their acknowledgements is sent at once instead of after them. Its chain goes on from
//! the last message sent (`Nats-Expected-Last-Msg-Id`, or the subject's sequence when nothing
//! is in flight), so everything sent is still *one* fenced chain and what the stream holds of
//! it is a prefix: a round is never stored after one sent before it that is not. Each
//! round's flushes are answered once it and every round before it are acknowledged. A failed
//! acknowledgement (or send) of any round is resolved for all rounds in flight at once: the
//! answers of every later message are awaited together (all due by one request timeout from
//! their send), then the rest is resolved and sent again as one chain, as below; nothing of
//! it is reported stored until it is. A new session's first append, a round that would put
//! more than [`NatsOptions::max_batch`] messages in flight and a clustered stream are not
//! pipelined.
//!
//! **On a clustered stream** (JetStream in cluster mode, any number of replicas) the chain is
//! not pipelined: each message carries `Nats-Expected-Last-Subject-Sequence` = the stream
//! sequence of the message before it and is sent once that one is acknowledged. There the
//! server checks `Nats-Expected-Last-Msg-Id` a second time when the Raft entry is applied,
//! and another session's message proposed in between makes that check fail there, which the
//! server reports as a critical write error that stops the whole stream ("JetStream system
//! temporarily unavailable" for every later write). The per-subject check is not affected by
//! other subjects, so one message at a time keeps the same prefix and fence guarantees, at one
//! acknowledgement per message (concurrent flushes still share one round).
//!
//! **What survives a crash** (of the writer, its connection, or servers below quorum), at each
//! point of an append (with rounds in flight together, of everything sent as one chain):
//! before the first acknowledgement, nothing of the round; part-way, an
//! acknowledged prefix of it: its whole journal batches are valid events (not yet reported to
//! the caller), and a journal batch cut there is an incomplete final batch, which no reader
//! ever uses (the journal's `batchLast` rule) and which the next
//! [`troupe_journal::LogBackend::open`] deletes, last message first, before appending; after
//! the last acknowledgement, the whole round (an acknowledgement means stored on a quorum of
//! the stream's replicas; written to disk at once only with the server's
//! `sync_interval: always`). A publish that fails transiently (timeout, lost connection,
//! leader election) is resolved by reading the subject's last message — one of ours (that
//! far it is stored), unchanged, or another writer's (`JOURNAL_SEQ_CONFLICT`) — and sent again
//! until [`NatsOptions::append_timeout`]; a flush never reports success for a round not wholly
//! acknowledged.
//!
//! **The first append of a new session** (header + first batch, or a fork seed without
//! framing) is visible whole or not at all: the header message carries the NATS header
//! `Troupe-First-Events: N` (the number of events published with it) and readers treat a
//! subject holding fewer than `N` events after its header as a session not created yet
//! (`SESSION_NOT_FOUND`; left out of listings). The header is fenced on an empty subject
//! and the rest of the first append is chained to it (`SESSION_ALREADY_EXISTS` when the id is
//! taken); the leftovers of a creator that died half-way are purged by the next creator of the
//! same id, which holds the lease.
//!
//! **Leases** (KV bucket `TROUPE_LEASES`, key = session id, value
//! `{"owner","host","pid","since"}`, TTL [`NatsOptions::lease_ttl`], the bucket's `max_age`):
//! one writer per session. Opening a session takes the lease with `create` (a held one is
//! `JOURNAL_LOCKED` naming its host and pid); a new session takes it at its first append. The
//! writer renews it with `update(revision)` every TTL/3; when the key was taken over, or no
//! renewal succeeded within the TTL, the writer is poisoned with `JOURNAL_LEASE_LOST` and makes
//! no further publish (and any publish it still had in flight is refused by the fence once
//! another writer appended). Closing the writer deletes the key; a crashed holder's key
//! expires after the TTL, and then another process may take the session over.
//!
//! **Reads on a clustered stream** go on until the consumer delivered the subject's last
//! message as the stream leader has it (asked first): a consumer may be served by a replica
//! that has not applied every committed message yet, and stopping where it runs dry would miss
//! acknowledged events (and make an open take a whole batch for an unfinished one).
//!
//! **Following** ([`troupe_journal::LogBackend::follow`]): a live follow is an ordered push
//! consumer on the session's subject that never ends: the server pushes every message as it
//! is stored, the follower is woken and scans what arrived with the journal's rules (a batch
//! only once whole). Nothing polls; the ordered consumer recreates itself from the last
//! sequence it saw after a gap, a missed heartbeat or a reconnect.
//!
//! **Copying** ([`troupe_journal::LogBackend::read_image`], [`troupe_journal::LogBackend::import`]):
//! a session's image is its payloads joined with newlines — byte for byte the file the JSONL
//! store holds — and an import publishes the lines as given, as a first append (so a copy
//! cut part-way is no session).
//!
//! **Bridging.** The seam is synchronous (the writer actor is an OS thread; reads come from
//! sync code and from inside tokio tasks). The backend owns a small tokio runtime. Outside
//! any tokio context (the writer thread) an append runs its future on the calling thread with
//! `Handle::block_on`; otherwise a call spawns its future on the backend's runtime and waits on
//! a std channel, so a caller inside another runtime only blocks its own thread and never nests
//! a runtime.

mod conn;
mod deliver;
mod follow;
mod lease;
mod leaseview;
mod read;
mod served;
mod sink;
mod status;
mod teamsvc;
mod usage;
mod workers;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use troupe_journal::{
    JournalError, LineCheck, LineUse, LogBackend, Replay, Result, ScanPosition, ScanSummary,
    ScanTail, Selected, SessionFollow, SessionImage, SessionListing, SessionSink, Wake,
};
use troupe_protocol::{Event, SessionHeader, SessionId};

pub use conn::{parse_url, redact_url};
pub use deliver::{DeliveryServer, NatsMemberHosts, Warnings};
pub use lease::HeldLease;
pub use status::{StatusListener, StatusPublisher};
pub use teamsvc::{LinkOptions, NatsTeamLink, TeamOpServer};
pub use usage::UsageRelay;
pub use workers::{
    HostAnswer, HostRequest, HostedBudget, RegisterError, WORKER_SUBJECT_PREFIX, WORKER_VERSION,
    WORKERS_BUCKET, WorkerRecord, WorkerRegistration, WorkspaceIdentity, live_workers,
    pid_namespace,
};

/// The default stream name.
pub const DEFAULT_STREAM: &str = "TROUPE";
/// The default lease bucket.
pub const DEFAULT_LEASE_BUCKET: &str = "TROUPE_LEASES";
/// The subjects of the session logs: `troupe.session.<id>`.
pub const SESSION_SUBJECTS: &str = "troupe.session.>";
/// The prefix of a session's subject.
pub const SESSION_SUBJECT_PREFIX: &str = "troupe.session.";
/// The prefix of a running Team's control subject: `troupe.control.<lead-id>` (see
/// [`NatsBackend::control_subject`]). No stream may take these subjects (the default stream
/// takes `troupe.session.>` only): a stream would acknowledge every request itself.
pub const CONTROL_SUBJECT_PREFIX: &str = "troupe.control.";
/// The prefix of a Team's service subject: `troupe.team.<team-id>.op` (see
/// [`NatsBackend::team_subject`]). Like the control subjects, no stream may take them.
pub const TEAM_SUBJECT_PREFIX: &str = "troupe.team.";
/// The prefix of a session's delivery subject: `troupe.deliver.<id>` (see
/// [`NatsBackend::deliver_subject`]). Like the control subjects, no stream may take them.
pub const DELIVER_SUBJECT_PREFIX: &str = "troupe.deliver.";
/// The prefix of a session's interrupt subject: `troupe.interrupt.<id>` (see
/// [`NatsBackend::interrupt_subject`]). Like the delivery subjects, no stream may take them.
pub const INTERRUPT_SUBJECT_PREFIX: &str = "troupe.interrupt.";
/// The prefix of a Team's status subject: `troupe.status.<team-id>` (see
/// [`NatsBackend::status_subject`]). No stream may take them.
pub const STATUS_SUBJECT_PREFIX: &str = "troupe.status.";
/// The prefix of a Team's usage subject: `troupe.usage.<team-id>` (see
/// [`NatsBackend::usage_subject`]). No stream may take them.
pub const USAGE_SUBJECT_PREFIX: &str = "troupe.usage.";
/// The NATS header of a session's header message naming how many events its first append
/// published with it.
pub const FIRST_EVENTS_HEADER: &str = "Troupe-First-Events";

/// How the backend uses a NATS server. [`Default`] gives the documented defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsOptions {
    /// The stream holding the session logs (default [`DEFAULT_STREAM`]). Created on first use
    /// when missing; an existing stream is used with its own settings.
    pub stream: String,
    /// Replicas of the stream and the lease bucket when this backend creates them (default 1;
    /// 3 for production on a cluster of three or more servers).
    pub replicas: usize,
    /// The KV bucket of the leases (default [`DEFAULT_LEASE_BUCKET`]). Created on first use
    /// with `max_age = lease_ttl` when missing; an existing bucket's `max_age` is the TTL.
    pub lease_bucket: String,
    /// The lease TTL used when this backend creates the lease bucket (default 10 s).
    pub lease_ttl: Duration,
    /// How long one request to the server may take before it counts as failed (default 5 s).
    pub request_timeout: Duration,
    /// How long an append keeps retrying transient failures (lost connection, leader
    /// election) before it fails and poisons the writer (default 30 s). Connecting waits as
    /// long for a stream or lease bucket that is being created (by another process too) or
    /// whose cluster is electing a leader.
    pub append_timeout: Duration,
    /// The most messages one pipelined send keeps in flight (default 1000); a longer round is
    /// sent in several.
    pub max_batch: usize,
    /// The most group-commit rounds of one writer in flight at once on a standalone server
    /// (default 4; 1 waits for each round before sending the next). A clustered stream sends
    /// one message at a time whatever this says (see the crate docs).
    pub pipeline_depth: usize,
}

impl Default for NatsOptions {
    fn default() -> Self {
        Self {
            stream: DEFAULT_STREAM.to_owned(),
            replicas: 1,
            lease_bucket: DEFAULT_LEASE_BUCKET.to_owned(),
            lease_ttl: Duration::from_secs(10),
            request_timeout: Duration::from_secs(5),
            append_timeout: Duration::from_secs(30),
            max_batch: 1000,
            pipeline_depth: 4,
        }
    }
}

/// Session logs on NATS JetStream (see the crate docs for layout, appends, leases and what
/// survives a crash). Cheap to clone: clones share the connection and its runtime.
#[derive(Clone)]
pub struct NatsBackend {
    inner: Arc<conn::Inner>,
}

impl std::fmt::Debug for NatsBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsBackend")
            .field("url", &self.inner.url)
            .field("stream", &self.inner.options.stream)
            .finish_non_exhaustive()
    }
}

impl NatsBackend {
    /// Connects to the server(s) at `url` (`nats://HOST:PORT[,HOST:PORT…]`; a bare
    /// `HOST:PORT` works too), checks JetStream, and makes sure the stream and the lease
    /// bucket exist (creating them with `options` when missing).
    ///
    /// # Errors
    /// `STORE_INVALID_URL` for a URL that does not parse; `STORE_UNREACHABLE` when no server
    /// answers; `STORE_UNSUPPORTED` when JetStream is not enabled; `STORE_MISCONFIGURED` when
    /// the existing stream does not take `troupe.session.>` (or another stream holds those
    /// subjects) or the lease bucket has no `max_age`; `STORE_IO` when a request fails.
    /// Every message names the URL.
    pub fn connect(url: &str, options: NatsOptions) -> Result<Self> {
        Ok(Self {
            inner: Arc::new(conn::Inner::connect(url, options)?),
        })
    }

    /// The store URL as shown to the user: the URL given to [`NatsBackend::connect`] with
    /// its credentials redacted ([`redact_url`]: `nats://user:***@host:port`). Every message
    /// and location of this backend names it.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The store URL exactly as given to [`NatsBackend::connect`], credentials included: for
    /// another process to connect with (never to be shown).
    pub fn connect_url(&self) -> &str {
        &self.inner.connect_url
    }

    /// The options in force.
    pub fn options(&self) -> &NatsOptions {
        &self.inner.options
    }

    /// The lease TTL in force: the lease bucket's `max_age`.
    pub fn lease_ttl(&self) -> Duration {
        self.inner.lease_ttl
    }

    /// The subject of session `id`: `troupe.session.<id>`.
    pub fn subject(id: &SessionId) -> String {
        format!("{SESSION_SUBJECT_PREFIX}{id}")
    }

    /// The control subject of the Team led by `lead`: `troupe.control.<lead>`. The process
    /// that runs the Team serves its control requests there (NATS request-reply, while it
    /// holds the Lead log's lease), so `troupe send` and `troupe chat` reach it from any host
    /// of the store; the protocol is the control socket's (crates/cli `control.rs`).
    pub fn control_subject(lead: &SessionId) -> String {
        format!("{CONTROL_SUBJECT_PREFIX}{lead}")
    }

    /// The Team service subject of the Team led by `lead`: `troupe.team.<lead>.op`. The
    /// process holding the Lead log's lease answers the Team tool calls of teammates hosted
    /// elsewhere there ([`TeamOpServer`]; [`NatsTeamLink`] is the calling side).
    pub fn team_subject(lead: &SessionId) -> String {
        format!("{TEAM_SUBJECT_PREFIX}{lead}.op")
    }

    /// The delivery subject of session `id`: `troupe.deliver.<id>`. The process holding the
    /// session's lease accepts Team mail for it there ([`DeliveryServer`];
    /// [`NatsMemberHosts`] is the serializer's side).
    pub fn deliver_subject(id: &SessionId) -> String {
        format!("{DELIVER_SUBJECT_PREFIX}{id}")
    }

    /// The interrupt subject of session `id`: `troupe.interrupt.<id>`. The process holding
    /// the session's lease takes the Lead's `interrupt_agent` of it there (served with the
    /// deliveries by [`DeliveryServer`]; [`NatsMemberHosts`] is the serializer's side).
    pub fn interrupt_subject(id: &SessionId) -> String {
        format!("{INTERRUPT_SUBJECT_PREFIX}{id}")
    }

    /// The subject on which worker `name` takes requests to host a teammate:
    /// `troupe.worker.<name>.host` (see [`WorkerRegistration`]).
    pub fn worker_subject(name: &str) -> String {
        format!("{WORKER_SUBJECT_PREFIX}{name}.host")
    }

    /// The status subject of the Team led by `lead`: `troupe.status.<lead>`. The processes
    /// hosting its members publish their status edges there ([`StatusPublisher`]); the
    /// process running its serializer listens ([`StatusListener`]).
    pub fn status_subject(lead: &SessionId) -> String {
        format!("{STATUS_SUBJECT_PREFIX}{lead}")
    }

    /// The usage subject of the Team led by `lead`: `troupe.usage.<lead>`. Every process
    /// running members of the Team publishes the usage of each answer it records there and
    /// counts the others' ([`UsageRelay`]: the Team's budget across processes).
    pub fn usage_subject(lead: &SessionId) -> String {
        format!("{USAGE_SUBJECT_PREFIX}{lead}")
    }

    /// The lease this backend holds on session `id` (its writer's), while it holds it and it
    /// is certainly valid (renewed within its TTL, not lost, not released); `None` otherwise.
    /// No request: the backend's own record.
    pub fn held_lease(&self, id: &SessionId) -> Option<HeldLease> {
        self.inner.held.get(id.as_str())
    }

    /// Whether this backend's lease on session `id` is past its TTL while its renewal is still
    /// trying to keep it or take it again (the lease bucket could not be reached for longer
    /// than the TTL left: DESIGN §7 leases, `crate::lease::Retake`): [`NatsBackend::held_lease`]
    /// is `None` meanwhile, but the lease is not lost ([`NatsBackend::lease_lost`] says when it
    /// is). At most twice the TTL; no request.
    pub fn lease_retaking(&self, id: &SessionId) -> bool {
        self.inner.held.retaking(id.as_str())
    }

    /// [`NatsBackend::held_lease`], once the lease is not being kept or taken again past its
    /// TTL any more (its bucket could not be reached for longer than the TTL left, and the
    /// renewal is still trying: DESIGN §7 leases, `crate::lease::Retake`). Waits at most the
    /// re-take window (twice the TTL); no request.
    pub async fn settled_lease(&self, id: &SessionId) -> Option<HeldLease> {
        self.inner.held.settled(id.as_str()).await
    }

    /// Why the lease this backend holds on session `id` is lost (DESIGN §7: its renewal
    /// failed for longer than the TTL, or its key changed under it), while its writer still
    /// holds it; `None` when it is not lost, or this backend holds no lease on `id`. No
    /// request: the backend's own record. A process that lost its Lead's lease can no longer
    /// serve the Team (`TEAM_LEAD_MOVED`) and must stop, as `JOURNAL_LEASE_LOST`.
    pub fn lease_lost(&self, id: &SessionId) -> Option<String> {
        self.inner.held.lost(id.as_str())
    }

    /// Whether this backend holds a lease on session `id` it has neither released nor
    /// dropped — also one late to renew or lost. No request. A writer whose log failed drops
    /// its lease: a Lead's process that held it and no longer does cannot serve its Team.
    pub fn lease_kept(&self, id: &SessionId) -> bool {
        self.inner.held.owner(id.as_str()).is_some()
    }

    /// Why the lease this backend took on session `id` is another process's now, asked of
    /// the lease bucket (one KV request): the entry names another owner, or is gone while
    /// this backend's own record no longer vouches for its lease. `None` while the entry is
    /// this backend's, when this backend took no lease on `id`, or when the bucket cannot be
    /// read (a transient failure: the renewal decides then). The check a process stalled
    /// past the TTL needs when it wakes, whatever its renewal's state.
    pub async fn lease_taken_over(&self, id: &SessionId) -> Option<String> {
        let owner = self.inner.held.owner(id.as_str())?;
        match self.current_lease(id).await {
            Ok(Some(now)) if now.owner != owner => Some(
                "another process holds it now (this one stalled or was cut off past the lease \
                 TTL)"
                    .to_owned(),
            ),
            // (A lease whose renewal is taking it back after the bucket was unreachable past
            // the TTL is decided by that renewal: `lease_lost` says so if it fails.)
            Ok(None) if self.held_lease(id).is_none() && !self.lease_retaking(id) => {
                Some("its key expired (it was not renewed within the lease TTL)".to_owned())
            }
            _ => None,
        }
    }

    /// The lease entry of session `id` as the lease bucket holds it now (one KV request, on
    /// whichever tokio runtime awaits it): its holder's owner token and the entry's revision;
    /// `None` when nobody holds it.
    ///
    /// # Errors
    /// `STORE_IO` when the request fails.
    pub async fn current_lease(&self, id: &SessionId) -> Result<Option<HeldLease>> {
        lease::current(&self.inner.leases, id)
            .await
            .map_err(|e| self.inner.io("read a session's lease", e))
    }

    /// A watched view of the lease bucket, started on the calling tokio runtime, that vouches
    /// for leases it saw written recently (see `leaseview`).
    pub(crate) fn lease_view(&self) -> leaseview::LeaseView {
        leaseview::LeaseView::start(self.inner.leases.clone(), self.inner.lease_ttl)
    }

    /// The TCP ports on which this store's server(s) take client connections, as far as this
    /// client can tell: the port of every address in the store URL, the port the connected
    /// server reports in its `INFO`, and the port of every URL it announces to clients
    /// (`connect_urls`: the other servers of its cluster). The `bash` sandbox denies
    /// connecting to these ports (see `troupe_tools::sandbox::guard_tcp_ports`), so a member's
    /// command cannot write the logs, decide approvals or pose as the user on the control
    /// subject. Ports a server listens on for other protocols (websocket, MQTT, leafnodes,
    /// cluster routes, monitoring) are not announced to clients and not in this set.
    pub fn client_ports(&self) -> std::collections::BTreeSet<u16> {
        let mut ports: std::collections::BTreeSet<u16> = conn::parse_url(&self.inner.connect_url)
            .map(|addrs| addrs.iter().map(async_nats::ServerAddr::port).collect())
            .unwrap_or_default();
        let info = self.client().server_info();
        if info.port != 0 {
            ports.insert(info.port);
        }
        for url in &info.connect_urls {
            if let Some(port) = url
                .rsplit_once(':')
                .and_then(|(_, port)| port.trim_end_matches('/').parse().ok())
            {
                ports.insert(port);
            }
        }
        ports
    }

    /// The backend's NATS client (a clone; clones share the one connection), for Troupe's
    /// traffic beside the session logs: serving a running Team's control subject
    /// ([`NatsBackend::control_subject`]) with `subscribe` and `publish` to each request's
    /// reply subject. Usable from any tokio runtime (its connection runs on the backend's
    /// own). Never publish to `troupe.session.>` with it: a session's messages are written
    /// only by the backend's fenced appends under the session's lease (see the crate docs).
    pub fn client(&self) -> async_nats::Client {
        self.inner.js.client()
    }

    /// One NATS request-reply from synchronous code (`troupe send`): publishes `payload` to
    /// `subject` with a fresh reply inbox and waits up to `timeout` for the first reply, on
    /// the backend's runtime (the calling thread blocks; safe inside another runtime's task).
    /// Returns the reply's payload.
    ///
    /// # Errors
    /// `async_nats::RequestError` of kind `NoResponders` when nobody is subscribed to
    /// `subject` (the server says so at once), `TimedOut` when nobody replied within
    /// `timeout`, `InvalidSubject`, and `Other` when the connection fails or the backend's
    /// runtime is gone.
    pub fn request_blocking(
        &self,
        subject: String,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> std::result::Result<bytes::Bytes, async_nats::RequestError> {
        let client = self.client();
        let asked = self.inner.call(async move {
            let request = async_nats::Request::new()
                .payload(payload.into())
                .timeout(Some(timeout));
            client.send_request(subject, request).await
        });
        match asked {
            Ok(Ok(message)) => Ok(message.payload),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(async_nats::RequestError::with_source(
                async_nats::RequestErrorKind::Other,
                e,
            )),
        }
    }

    /// Where session `id` lives, as shown in errors and listings:
    /// `<url>/<stream>/troupe.session.<id>`.
    pub fn location(&self, id: &SessionId) -> PathBuf {
        self.inner.location(id)
    }
}

impl LogBackend for NatsBackend {
    fn create(&self, header: SessionHeader) -> Result<Box<dyn SessionSink>> {
        Ok(Box::new(sink::NatsSink::create(
            Arc::clone(&self.inner),
            header,
        )?))
    }

    fn open(&self, id: &SessionId) -> Result<(Box<dyn SessionSink>, Replay)> {
        let (sink, replay) = sink::NatsSink::open(Arc::clone(&self.inner), id)?;
        Ok((Box::new(sink), replay))
    }

    fn read(&self, id: &SessionId) -> Result<Replay> {
        let mut events = Vec::new();
        let summary = self.read_each(id, &mut |e| events.push(e))?;
        Ok(Replay {
            path: self.inner.location(id),
            header: summary.header,
            events,
            skipped: summary.skipped,
            torn_tail: summary.torn_tail,
            valid_len: summary.valid_len,
        })
    }

    fn read_each(&self, id: &SessionId, on_event: &mut dyn FnMut(Event)) -> Result<ScanSummary> {
        read::read_each(&self.inner, id, on_event).map(|(summary, _)| summary)
    }

    fn read_each_from(
        &self,
        id: &SessionId,
        from: ScanPosition,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<ScanTail> {
        read::read_each_from(&self.inner, id, from, on_event)
    }

    fn read_selected_each(
        &self,
        id: &SessionId,
        check: LineCheck,
        select: &dyn Fn(&str) -> bool,
        on_selected: &mut dyn FnMut(Selected<'_>) -> LineUse,
    ) -> Result<ScanSummary> {
        read::read_selected_each(&self.inner, id, check, select, on_selected)
    }

    fn list(&self, on_error: &mut dyn FnMut(JournalError)) -> Result<Vec<SessionListing>> {
        read::list(&self.inner, on_error)
    }

    /// The holder named by the session's lease key, while it has one.
    fn holder(&self, id: &SessionId) -> Result<Option<String>> {
        lease::holder(&self.inner, id)
    }

    /// The subject's first message alone.
    fn header(&self, id: &SessionId) -> Result<SessionHeader> {
        read::header(&self.inner, id)
    }

    /// An ordered push consumer on the session's subject from its first message, for as long
    /// as the follow lives (see the crate docs, "Following").
    fn follow(&self, id: &SessionId, wake: Wake) -> Result<Option<Box<dyn SessionFollow>>> {
        Ok(Some(Box::new(follow::NatsFollow::start(
            Arc::clone(&self.inner),
            id,
            wake,
        )?)))
    }

    /// The subject's payloads joined with newlines, up to the end of the valid prefix.
    fn read_image(&self, id: &SessionId) -> Result<SessionImage> {
        read::read_image(&self.inner, id)
    }

    /// One fenced chain under the session's lease, as a first append (see the crate docs for
    /// what survives a crash part-way).
    fn import(&self, image: &SessionImage) -> Result<()> {
        sink::NatsSink::import(Arc::clone(&self.inner), image)
    }
}
