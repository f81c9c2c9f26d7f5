//! The connection: the backend's runtime, the client, the stream and the lease bucket.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};
use async_nats::{ConnectOptions, ServerAddr};
use troupe_journal::{JournalError, Result, ScanPosition};
use troupe_protocol::SessionId;
use troupe_protocol::sync::lock;

use crate::{NatsOptions, SESSION_SUBJECT_PREFIX, SESSION_SUBJECTS};

/// What every sink and read of one backend shares.
pub(crate) struct Inner {
    /// The URL as shown to the user: credentials redacted ([`redact_url`]).
    pub(crate) url: String,
    /// The URL as given, credentials included: for connecting only, never shown.
    pub(crate) connect_url: String,
    pub(crate) options: NatsOptions,
    /// `None` once dropped. Shut down in the background, so dropping the backend inside an
    /// async context does not panic.
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) js: jetstream::Context,
    pub(crate) leases: kv::Store,
    /// The leases this backend holds (weak), for [`crate::NatsBackend::held_lease`].
    pub(crate) held: crate::lease::HeldLeases,
    /// The lease bucket's `max_age`.
    pub(crate) lease_ttl: Duration,
    /// Whether the stream is clustered (JetStream in cluster mode: its writes go through a
    /// Raft group), where appends are published one message at a time (see the crate docs).
    pub(crate) clustered: bool,
    /// For followers: the stream sequence of the last valid message behind each position a
    /// read returned, so `read_each_from` starts its consumer right after it.
    positions: Mutex<Positions>,
}

/// Positions remembered per session: the newest ones (a follower reads from the position its
/// last read returned; several followers of one session each keep theirs).
const POSITIONS_PER_SESSION: usize = 16;
/// Sessions whose positions are remembered at most (then the cache starts over).
const MAX_SESSIONS: usize = 1024;

/// The remembered positions (see [`Inner::remember`]): per session, the last
/// [`POSITIONS_PER_SESSION`] handed out, oldest first. A follower of a session that keeps
/// growing is not sent back to a whole read by other sessions' reads, however many there are,
/// and each session's entries stay bounded; a forgotten position only costs its reader a
/// whole read (`read_each_from` reads the session and skips what it had).
#[derive(Debug, Default)]
struct Positions {
    sessions: HashMap<SessionId, std::collections::VecDeque<(ScanPosition, u64)>>,
}

impl Positions {
    fn remember(&mut self, id: &SessionId, position: ScanPosition, stream_seq: u64) {
        if !self.sessions.contains_key(id) && self.sessions.len() >= MAX_SESSIONS {
            self.sessions.clear();
        }
        let kept = self.sessions.entry(id.clone()).or_default();
        kept.retain(|(p, _)| *p != position);
        if kept.len() >= POSITIONS_PER_SESSION {
            kept.pop_front();
        }
        kept.push_back((position, stream_seq));
    }

    fn recall(&self, id: &SessionId, position: ScanPosition) -> Option<u64> {
        self.sessions
            .get(id)?
            .iter()
            .find(|(p, _)| *p == position)
            .map(|(_, seq)| *seq)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let runtime = lock(&self.runtime).take();
        if let Some(runtime) = runtime {
            runtime.shutdown_background();
        }
    }
}

/// The store URL `url` as shown to the user (messages, hints, listings): each server's
/// credentials redacted — `user:secret@host` becomes `user:***@host`, a token `secret@host`
/// becomes `***@host` — and everything else as given (servers without credentials, the
/// scheme, ports, the order). Connecting uses the URL as given.
pub fn redact_url(url: &str) -> String {
    url.split(',')
        .map(|part| {
            let (scheme, rest) = match part.find("://") {
                Some(at) => part.split_at(at + 3),
                None => ("", part),
            };
            // The userinfo ends at the last `@` before the path (a password may hold `@`).
            let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at(authority_end);
            match authority.rsplit_once('@') {
                Some((userinfo, host)) => {
                    let shown = match userinfo.split_once(':') {
                        Some((user, _)) => format!("{user}:***"),
                        None => "***".to_owned(),
                    };
                    format!("{scheme}{shown}@{host}{tail}")
                }
                None => part.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses a store URL `nats://HOST:PORT[,HOST:PORT…]` (the scheme may be left out, and may be
/// repeated per server) into the server addresses to connect to.
///
/// # Errors
/// `STORE_INVALID_URL` for an empty list or an address that does not parse.
pub fn parse_url(url: &str) -> Result<Vec<ServerAddr>> {
    let invalid = |reason: String| JournalError::StoreInvalidUrl {
        url: redact_url(url),
        reason: reason.replace(url, &redact_url(url)),
    };
    let rest = url.strip_prefix("nats://").unwrap_or(url);
    let mut out = Vec::new();
    for part in rest.split(',') {
        let part = part.trim();
        if part.is_empty() {
            return Err(invalid("an empty server address".to_owned()));
        }
        let full = if part.contains("://") {
            part.to_owned()
        } else {
            format!("nats://{part}")
        };
        let addr: ServerAddr = full
            .parse()
            .map_err(|e| invalid(format!("{:?}: {e}", redact_url(part))))?;
        if addr.host().is_empty() {
            return Err(invalid(format!("{:?} has no host", redact_url(part))));
        }
        out.push(addr);
    }
    Ok(out)
}

/// Whether the stream subject filter `filter` matches every subject `troupe.session.<id>`.
/// The text of a client error without the repeats its nesting adds: async-nats shows an
/// error as `kind: source`, and a kind named as its source's text comes out twice (`wrong
/// last sequence: wrong last sequence: 144` becomes `wrong last sequence: 144`).
pub(crate) fn error_text(error: &impl std::fmt::Display) -> String {
    let text = error.to_string();
    let mut parts: Vec<&str> = Vec::new();
    for part in text.split(": ") {
        if parts.last() != Some(&part) {
            parts.push(part);
        }
    }
    parts.join(": ")
}

fn covers_sessions(filter: &str) -> bool {
    let want = ["troupe", "session", ">"];
    for (i, token) in filter.split('.').enumerate() {
        if token == ">" {
            return true;
        }
        match want.get(i) {
            Some(&">") | None => return false,
            Some(w) if token == "*" || token == *w => {}
            Some(_) => return false,
        }
    }
    false
}

impl Inner {
    pub(crate) fn connect(connect_url: &str, options: NatsOptions) -> Result<Self> {
        let addrs = parse_url(connect_url)?;
        // Every message names the URL as shown, never its credentials.
        let url = &redact_url(connect_url);
        if options.replicas == 0 || options.max_batch == 0 {
            return Err(JournalError::StoreInvalidUrl {
                url: url.to_owned(),
                reason: "replicas and max_batch must be at least 1".to_owned(),
            });
        }
        // Two workers: the connection's reader and a read's consumer run side by side.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("troupe-nats")
            .enable_all()
            .build()
            .map_err(|e| JournalError::StoreIo {
                op: "start the NATS client runtime",
                url: url.to_owned(),
                reason: e.to_string(),
            })?;
        let handle = runtime.handle().clone();
        let setup = {
            let url = url.to_owned();
            let options = options.clone();
            async move { setup(&url, addrs, &options).await }
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        handle.spawn(async move {
            let _ = tx.send(setup.await);
        });
        let setup = rx.recv().map_err(|_| JournalError::StoreIo {
            op: "connect",
            url: url.to_owned(),
            reason: "the NATS client runtime stopped".to_owned(),
        })??;
        Ok(Self {
            url: url.to_owned(),
            connect_url: connect_url.to_owned(),
            options,
            runtime: Mutex::new(Some(runtime)),
            handle,
            js: setup.js,
            leases: setup.leases,
            held: crate::lease::HeldLeases::default(),
            lease_ttl: setup.lease_ttl,
            clustered: setup.clustered,
            positions: Mutex::new(Positions::default()),
        })
    }

    /// Runs `future` on the backend's runtime and waits for it on this thread (a std channel:
    /// fine inside another runtime's task, which it only blocks).
    ///
    /// # Errors
    /// `STORE_IO` when the runtime is gone.
    pub(crate) fn call<T: Send + 'static>(
        &self,
        future: impl Future<Output = T> + Send + 'static,
    ) -> Result<T> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let _ = tx.send(future.await);
        });
        rx.recv()
            .map_err(|_| self.io("wait for the NATS client", "its runtime stopped"))
    }

    /// Like [`Inner::call`], but outside any tokio context (the journal's writer thread) the
    /// future runs on the calling thread itself (`Handle::block_on`; the runtime's worker
    /// drives the connection), which saves two thread hand-offs per append. Inside a tokio
    /// context it is [`Inner::call`].
    ///
    /// # Errors
    /// As [`Inner::call`].
    pub(crate) fn run<T: Send + 'static>(
        &self,
        future: impl Future<Output = T> + Send + 'static,
    ) -> Result<T> {
        if tokio::runtime::Handle::try_current().is_err() {
            Ok(self.handle.block_on(future))
        } else {
            self.call(future)
        }
    }

    pub(crate) fn io(&self, op: &'static str, reason: impl std::fmt::Display) -> JournalError {
        JournalError::StoreIo {
            op,
            url: self.url.clone(),
            reason: reason.to_string(),
        }
    }

    pub(crate) fn location(&self, id: &SessionId) -> PathBuf {
        PathBuf::from(format!(
            "{}/{}/{SESSION_SUBJECT_PREFIX}{id}",
            self.url, self.options.stream
        ))
    }

    /// The subject of `id`, refusing ids that are not a valid subject (an empty token: `..`
    /// or a trailing `.`).
    /// What a writer's lease on `subject` needs to be taken again after it expired while the
    /// bucket could not be reached ([`crate::lease::Retake`]).
    pub(crate) fn retake(&self, subject: String) -> crate::lease::Retake {
        crate::lease::Retake {
            js: self.js.clone(),
            stream: self.options.stream.clone(),
            subject,
        }
    }

    pub(crate) fn subject(&self, id: &SessionId) -> Result<String> {
        if id.as_str().split('.').any(str::is_empty) {
            return Err(JournalError::StoreMisconfigured {
                url: self.url.clone(),
                reason: format!(
                    "session id {id:?} cannot be a NATS subject (an empty token between dots)"
                ),
            });
        }
        Ok(format!("{SESSION_SUBJECT_PREFIX}{id}"))
    }

    /// Remembers that `position` of `id` ends at the message with `stream_seq` (see
    /// [`Positions`]).
    pub(crate) fn remember(&self, id: &SessionId, position: ScanPosition, stream_seq: u64) {
        lock(&self.positions).remember(id, position, stream_seq);
    }

    /// The stream sequence behind `position` of `id`, if it is still remembered.
    pub(crate) fn recall(&self, id: &SessionId, position: ScanPosition) -> Option<u64> {
        lock(&self.positions).recall(id, position)
    }
}

struct Setup {
    js: jetstream::Context,
    leases: kv::Store,
    lease_ttl: Duration,
    clustered: bool,
}

async fn setup(url: &str, addrs: Vec<ServerAddr>, options: &NatsOptions) -> Result<Setup> {
    let misconfigured = |reason: String| JournalError::StoreMisconfigured {
        url: url.to_owned(),
        reason,
    };
    let io = |op: &'static str, e: &dyn std::fmt::Display| JournalError::StoreIo {
        op,
        url: url.to_owned(),
        reason: e.to_string(),
    };
    let client = ConnectOptions::new()
        .connection_timeout(options.request_timeout)
        .request_timeout(Some(options.request_timeout))
        // Back soon after a server returns (the client's default backoff grows to seconds,
        // which a lease being taken back after an outage cannot spare): 100 ms more per
        // attempt, at most 1 s.
        .reconnect_delay_callback(|attempts| {
            Duration::from_millis(100 * u64::try_from(attempts).unwrap_or(10).min(10))
        })
        .connect(addrs)
        .await
        .map_err(|e| JournalError::StoreUnreachable {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
    let js = jetstream::ContextBuilder::new()
        .timeout(options.request_timeout)
        .build(client.clone());
    js.query_account()
        .await
        .map_err(|e| JournalError::StoreUnsupported {
            url: url.to_owned(),
            reason: format!("JetStream is not available ({e}); start the server with -js"),
        })?;

    // The stream: used as it is when it exists, created when missing. Requests that time out
    // (a cluster electing leaders, a loaded server) and a stream another process created a
    // moment ago that is not found yet are tried again, until `append_timeout`.
    let deadline = tokio::time::Instant::now() + options.append_timeout;
    let pause = || tokio::time::sleep(std::time::Duration::from_millis(100));
    let mut created = false;
    let info = loop {
        let transient = match js.get_stream(&options.stream).await {
            Ok(mut stream) => match stream.info().await {
                Ok(info) => break info.clone(),
                Err(e) => io("read the stream info", &e),
            },
            Err(e) => match e.kind() {
                jetstream::context::GetStreamErrorKind::JetStream(ref j)
                    if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND && !created =>
                {
                    let config = stream::Config {
                        name: options.stream.clone(),
                        subjects: vec![SESSION_SUBJECTS.to_owned()],
                        storage: stream::StorageType::File,
                        num_replicas: options.replicas,
                        allow_direct: true,
                        ..Default::default()
                    };
                    match js.create_stream(config).await {
                        Ok(_) => {
                            created = true;
                            continue;
                        }
                        Err(e) => match e.kind() {
                            // Another process created it meanwhile: read it.
                            jetstream::context::CreateStreamErrorKind::JetStream(j)
                                if j.error_code() == jetstream::ErrorCode::STREAM_NAME_EXIST =>
                            {
                                created = true;
                                continue;
                            }
                            jetstream::context::CreateStreamErrorKind::JetStream(j) => {
                                return Err(misconfigured(format!(
                                    "cannot create stream {}: {j}",
                                    options.stream
                                )));
                            }
                            _ => io("create the stream", &e),
                        },
                    }
                }
                // Created a moment ago (by this process or another), not found yet.
                jetstream::context::GetStreamErrorKind::JetStream(ref j)
                    if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
                {
                    io("look up the stream", &e)
                }
                jetstream::context::GetStreamErrorKind::JetStream(_) => {
                    return Err(io("look up the stream", &e));
                }
                _ => io("look up the stream", &e),
            },
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(transient);
        }
        pause().await;
    };
    // A standalone server reports a leader only; a cluster names itself and the Raft group.
    let clustered = info
        .cluster
        .as_ref()
        .is_some_and(|c| c.name.is_some() || c.raft_group.is_some());
    if !info.config.subjects.iter().any(|s| covers_sessions(s)) {
        return Err(misconfigured(format!(
            "stream {} takes subjects {:?}, not {SESSION_SUBJECTS}",
            options.stream, info.config.subjects
        )));
    }

    // The lease bucket, likewise. Another process may be creating it at the same moment (on
    // a cluster, a bucket just created can take a moment to be found): then it is looked up
    // again until `append_timeout`.
    let leases = match js.get_key_value(&options.lease_bucket).await {
        Ok(store) => store,
        Err(_) => {
            let config = kv::Config {
                bucket: options.lease_bucket.clone(),
                history: 1,
                max_age: options.lease_ttl,
                storage: stream::StorageType::File,
                num_replicas: options.replicas,
                ..Default::default()
            };
            match js.create_key_value(config).await {
                Ok(store) => store,
                Err(create_error) => loop {
                    match js.get_key_value(&options.lease_bucket).await {
                        Ok(store) => break store,
                        Err(_) if tokio::time::Instant::now() < deadline => {
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        }
                        Err(_) => return Err(io("create the lease bucket", &create_error)),
                    }
                },
            }
        }
    };
    let lease_ttl = leases
        .status()
        .await
        .map_err(|e| io("read the lease bucket", &e))?
        .info
        .config
        .max_age;
    if lease_ttl.is_zero() {
        return Err(misconfigured(format!(
            "lease bucket {} has no max_age, so a dead writer's lease would never expire",
            options.lease_bucket
        )));
    }
    Ok(Setup {
        js,
        leases,
        lease_ttl,
        clustered,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kind repeating its source's text is shown once; other texts are kept as they are.
    #[test]
    fn an_error_text_drops_the_repeats_of_nesting() {
        let nested = async_nats::jetstream::context::PublishError::with_source(
            async_nats::jetstream::context::PublishErrorKind::WrongLastSequence,
            "wrong last sequence: 144",
        );
        assert_eq!(
            nested.to_string(),
            "wrong last sequence: wrong last sequence: 144"
        );
        assert_eq!(error_text(&nested), "wrong last sequence: 144");
        assert_eq!(error_text(&"timed out: a: b"), "timed out: a: b");
    }

    /// A session's newest positions stay remembered however many other sessions and older
    /// positions are remembered after them; the oldest of a session go first; past
    /// [`MAX_SESSIONS`] sessions the cache starts over.
    #[test]
    fn positions_keep_each_sessions_newest() {
        let at = |n: u64| ScanPosition {
            offset: n * 10,
            next_seq: troupe_protocol::Seq(n),
        };
        let id = |n: usize| SessionId::new(format!("s-{n}")).unwrap_or_else(|e| panic!("{e}"));
        let mut positions = Positions::default();
        positions.remember(&id(0), at(1), 101);
        for n in 1..MAX_SESSIONS {
            for p in 0..3 * POSITIONS_PER_SESSION as u64 {
                positions.remember(&id(n), at(p), p);
            }
        }
        assert_eq!(positions.recall(&id(0), at(1)), Some(101));
        for n in 1..MAX_SESSIONS {
            assert_eq!(positions.recall(&id(n), at(0)), None, "the oldest went");
            let newest = 3 * POSITIONS_PER_SESSION as u64 - 1;
            assert_eq!(positions.recall(&id(n), at(newest)), Some(newest));
            assert_eq!(
                positions.sessions[&id(n)].len(),
                POSITIONS_PER_SESSION,
                "bounded"
            );
        }
        // Remembered again: moved to the newest end, not kept twice.
        positions.remember(&id(0), at(1), 102);
        assert_eq!(positions.recall(&id(0), at(1)), Some(102));
        assert_eq!(positions.sessions[&id(0)].len(), 1);
        positions.remember(&id(MAX_SESSIONS), at(1), 7);
        assert_eq!(positions.recall(&id(0), at(1)), None, "started over");
        assert_eq!(positions.recall(&id(MAX_SESSIONS), at(1)), Some(7));
    }

    #[test]
    fn session_subjects_are_covered_only_by_filters_matching_every_id() {
        for filter in [">", "troupe.>", "troupe.session.>", "*.session.>", "*.*.>"] {
            assert!(covers_sessions(filter), "{filter}");
        }
        for filter in [
            "troupe.session.*",
            "troupe.session",
            "troupe",
            "other.>",
            "troupe.x.>",
        ] {
            assert!(!covers_sessions(filter), "{filter}");
        }
    }

    #[test]
    fn credentials_in_a_url_are_redacted_and_the_rest_kept() {
        assert_eq!(
            redact_url("nats://user:s3cret@127.0.0.1:4222"),
            "nats://user:***@127.0.0.1:4222"
        );
        assert_eq!(redact_url("nats://tok3n@host:1"), "nats://***@host:1");
        // A password holding `@`, several servers, bare ones, and ones without credentials.
        assert_eq!(
            redact_url("nats://u:p@ss@a:1,b:2,v:w@c:3,nats://d:4"),
            "nats://u:***@a:1,b:2,v:***@c:3,nats://d:4"
        );
        assert_eq!(redact_url("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(redact_url("/tmp/a@b/home"), "/tmp/a@b/home");
        // What is redacted still parses to the same servers (only the credentials differ).
        let shown = parse_url(&redact_url("nats://user:s3cret@127.0.0.1:4222")).unwrap();
        assert_eq!(shown[0].host(), "127.0.0.1");
        assert_eq!(shown[0].port(), 4222);
        // A URL that does not parse is refused without its password in the message.
        let err = parse_url("nats://user:s3cret@").unwrap_err().to_string();
        assert!(!err.contains("s3cret"), "{err}");
    }

    #[test]
    fn urls_list_servers_and_bad_ones_are_refused() {
        assert_eq!(
            parse_url("nats://127.0.0.1:4222").map(|a| a.len()).ok(),
            Some(1)
        );
        assert_eq!(
            parse_url("nats://127.0.0.1:1,127.0.0.1:2,nats://127.0.0.1:3")
                .map(|a| a.len())
                .ok(),
            Some(3)
        );
        assert_eq!(parse_url("127.0.0.1:4222").map(|a| a.len()).ok(), Some(1));
        for bad in ["", "nats://", "nats://a:1,", "nats://:notaport"] {
            let err = parse_url(bad)
                .err()
                .map(|e| troupe_protocol::ErrorCode::code(&e));
            assert_eq!(err, Some("STORE_INVALID_URL"), "{bad:?}");
        }
    }
}
