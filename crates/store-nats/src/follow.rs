//! Live follows ([`troupe_journal::LogBackend::follow`]): one ordered push consumer per
//! followed session that never ends. The server pushes each message as it is stored (flow
//! controlled, with idle heartbeats; the ordered consumer recreates itself from the last
//! sequence it saw after a gap, a missed heartbeat or a reconnect), the consumer task appends
//! the payload and a newline to a buffer and calls the follower's wake; the follower's
//! [`SessionFollow::poll`] scans what arrived with the journal's own scans, so batch
//! atomicity, corruption and unsupported types are decided exactly as for a read. Nothing
//! polls the server. The first poll waits (like a read, at most the request timeout) until the
//! consumer delivered every message the subject held when the follow started (on a clustered
//! stream: up to the leader's last message, since the consumer may run on a replica that is
//! behind), so "not found" means not found then; later polls never wait.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{self, push::OrderedErrorKind};
use futures_util::StreamExt;
use troupe_journal::{
    JournalError, Result, ScanPosition, SessionFollow, Wake, scan_each, scan_events,
};
use troupe_protocol::sync::{lock, wait_timeout};
use troupe_protocol::{Event, SessionHeader, SessionId};

use crate::FIRST_EVENTS_HEADER;
use crate::conn::Inner;

/// How the consumer task stopped.
enum End {
    /// A message whose payload holds a newline: not one line. `line` and `offset` place it in
    /// the session's joined image.
    BadMessage {
        stream_seq: u64,
        line: u64,
        offset: u64,
    },
    /// The consumer failed for good.
    Failed(String),
}

/// What the consumer task hands to the follower.
#[derive(Default)]
struct Shared {
    /// Bytes received and not yet taken by a poll.
    bytes: Vec<u8>,
    /// Messages received since the (latest) header, the header included.
    messages: u64,
    /// Bytes received since the header.
    received: u64,
    /// The header message's `Troupe-First-Events`.
    declared: u64,
    /// Set by the first poll that found the first append whole: from then on a second header
    /// message is a line like any other (and corrupt), not a new creation.
    created: bool,
    /// Messages the subject held when the consumer was created (`None` until then).
    backlog: Option<u64>,
    /// On a clustered stream: the stream sequence of the leader's last message of the subject
    /// when the follow started (the consumer may run on a replica that is behind).
    target: Option<u64>,
    /// Messages delivered in all, and the stream sequence of the last one.
    delivered: u64,
    last_seq: u64,
    end: Option<End>,
}

impl Shared {
    /// Whether everything the subject held at the start was delivered (or the follow ended).
    fn caught_up(&self) -> bool {
        self.end.is_some()
            || match self.target {
                Some(last) => self.last_seq >= last,
                None => self.backlog.is_some_and(|n| self.delivered >= n),
            }
    }
}

/// The consumer task's side and the follower's, with a condition for the first catch-up.
#[derive(Default)]
struct Channel {
    shared: Mutex<Shared>,
    caught_up: Condvar,
}

impl Channel {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        lock(&self.shared)
    }
}

/// A session followed live on NATS.
pub(crate) struct NatsFollow {
    /// Keeps the runtime (and the connection) alive while the follow lives.
    inner: Arc<Inner>,
    channel: Arc<Channel>,
    task: tokio::task::JoinHandle<()>,
    /// Whether the first catch-up was seen.
    caught_up: bool,
    id: SessionId,
    path: PathBuf,
    /// Received bytes past the valid prefix read so far (an unfinished batch), starting at
    /// offset `base` of the session's image.
    pending: Vec<u8>,
    base: u64,
    position: Option<ScanPosition>,
    header: Option<SessionHeader>,
    /// Set after an error: nothing more is handed out.
    over: bool,
}

impl Drop for NatsFollow {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl NatsFollow {
    pub(crate) fn start(inner: Arc<Inner>, id: &SessionId, wake: Wake) -> Result<Self> {
        let subject = inner.subject(id)?;
        let channel = Arc::new(Channel::default());
        let task = {
            let js = inner.js.clone();
            let stream = inner.options.stream.clone();
            let channel = Arc::clone(&channel);
            let clustered = inner.clustered;
            inner.handle.spawn(async move {
                let failure = consume(&js, &stream, subject, clustered, &channel, &wake).await;
                if let Err(reason) = failure {
                    channel.lock().end = Some(End::Failed(reason));
                    channel.caught_up.notify_all();
                    wake();
                }
            })
        };
        Ok(Self {
            path: inner.location(id),
            inner,
            channel,
            task,
            caught_up: false,
            id: id.clone(),
            pending: Vec::new(),
            base: 0,
            position: None,
            header: None,
            over: false,
        })
    }

    fn not_found(&self, why: String) -> JournalError {
        JournalError::NotFound {
            id: crate::read::missing_id(&self.id, &why),
            path: self.path.clone(),
        }
    }

    fn end_error(&self, end: End) -> JournalError {
        match end {
            End::BadMessage {
                stream_seq,
                line,
                offset,
            } => JournalError::Corrupt {
                path: self.path.clone(),
                line,
                offset,
                reason: format!(
                    "message {stream_seq} of the stream holds a newline, so it is not one line"
                ),
            },
            End::Failed(reason) => self.inner.io("follow", reason),
        }
    }

    /// Scans `pending` from the position reached so far.
    fn scan(&mut self, on_event: &mut dyn FnMut(Event)) -> Result<ScanPosition> {
        let at = match self.position {
            None => {
                let summary = scan_each(&self.path, &self.pending[..], on_event)?;
                if summary.header.id != self.id {
                    return Err(JournalError::Corrupt {
                        path: self.path.clone(),
                        line: 1,
                        offset: 0,
                        reason: format!(
                            "header names session {} but the subject is {}'s",
                            summary.header.id, self.id
                        ),
                    });
                }
                self.header = Some(summary.header.clone());
                summary.position()
            }
            Some(at) => scan_events(&self.path, &self.pending[..], at, on_event)?.next,
        };
        let used = usize::try_from(at.offset - self.base).unwrap_or(usize::MAX);
        self.pending.drain(..used.min(self.pending.len()));
        self.base = at.offset;
        self.position = Some(at);
        Ok(at)
    }
}

impl SessionFollow for NatsFollow {
    fn poll(&mut self, on_event: &mut dyn FnMut(Event)) -> Result<ScanPosition> {
        let here = self.position.unwrap_or(ScanPosition {
            offset: 0,
            next_seq: troupe_protocol::Seq::ZERO,
        });
        if self.over {
            return Ok(here);
        }
        let (bytes, end) = {
            let mut shared = self.channel.lock();
            if !self.caught_up {
                // The first poll: wait until what the subject held at the start is here.
                let timeout = self.inner.options.request_timeout;
                let deadline = Instant::now() + timeout;
                while !shared.caught_up() {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left == Duration::ZERO {
                        drop(shared);
                        return Err(self.inner.io(
                            "follow",
                            format!(
                                "the session's messages did not arrive within {} ms",
                                timeout.as_millis()
                            ),
                        ));
                    }
                    shared = wait_timeout(&self.channel.caught_up, shared, left).0;
                }
                self.caught_up = true;
            }
            if !shared.created {
                if shared.messages == 0 || shared.messages < 1 + shared.declared {
                    let why = if shared.messages == 0 {
                        String::new()
                    } else {
                        format!(
                            "its creation is unfinished: {} of its first {} events are stored",
                            shared.messages - 1,
                            shared.declared
                        )
                    };
                    return match shared.end.take() {
                        Some(end) => {
                            drop(shared);
                            self.over = true;
                            Err(self.end_error(end))
                        }
                        None => Err(self.not_found(why)),
                    };
                }
                shared.created = true;
            }
            (std::mem::take(&mut shared.bytes), shared.end.take())
        };
        self.pending.extend_from_slice(&bytes);
        let scanned = self.scan(on_event);
        match (scanned, end) {
            (Err(e), _) => {
                self.over = true;
                Err(e)
            }
            (Ok(_), Some(end)) => {
                self.over = true;
                Err(self.end_error(end))
            }
            (Ok(at), None) => Ok(at),
        }
    }

    fn header(&self) -> Option<&SessionHeader> {
        self.header.as_ref()
    }
}

/// The consumer task: every message of `subject` from the first, as the server pushes them,
/// into `shared`, then `wake`. Returns only when the follow cannot go on.
async fn consume(
    js: &async_nats::jetstream::Context,
    stream: &str,
    subject: String,
    clustered: bool,
    channel: &Channel,
    wake: &Wake,
) -> std::result::Result<(), String> {
    let stream = js
        .get_stream_no_info(stream)
        .await
        .map_err(|e| e.to_string())?;
    // Before the consumer: what it delivers must reach the leader's last message.
    let target = if clustered {
        Some(crate::read::leader_view(&stream, &subject).await?.0)
    } else {
        None
    };
    let consumer = stream
        .create_consumer(consumer::push::OrderedConfig {
            deliver_subject: js.client().new_inbox(),
            filter_subject: subject,
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("cannot create a consumer: {e}"))?;
    {
        let mut state = channel.lock();
        state.backlog = Some(consumer.cached_info().num_pending);
        state.target = target;
    }
    channel.caught_up.notify_all();
    let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
    while let Some(message) = messages.next().await {
        let message = match message {
            Ok(message) => message,
            // The ordered consumer recreates itself and goes on.
            Err(e) if e.kind() == OrderedErrorKind::MissingHeartbeat => {
                tracing::debug!(error = %e, "a live follow missed a heartbeat");
                continue;
            }
            Err(e) => return Err(e.to_string()),
        };
        let stream_seq = crate::read::position(&message)?.0;
        let declared = message
            .headers
            .as_ref()
            .and_then(|h| h.get(FIRST_EVENTS_HEADER))
            .and_then(|v| v.as_str().parse::<u64>().ok());
        {
            let mut state = channel.lock();
            state.delivered += 1;
            state.last_seq = stream_seq;
            if !state.created
                && let Some(declared) = declared
            {
                // A header: a creation starts here (a dead creator's leftovers before it were
                // purged by this creator).
                state.bytes.clear();
                state.messages = 0;
                state.received = 0;
                state.declared = declared;
            }
            if memchr::memchr(b'\n', &message.payload).is_some() {
                state.end = Some(End::BadMessage {
                    stream_seq,
                    line: state.messages + 1,
                    offset: state.received,
                });
                drop(state);
                channel.caught_up.notify_all();
                wake();
                return Ok(());
            }
            state.bytes.extend_from_slice(&message.payload);
            state.bytes.push(b'\n');
            state.messages += 1;
            state.received += message.payload.len() as u64 + 1;
        }
        channel.caught_up.notify_all();
        wake();
    }
    Err("the consumer ended".to_owned())
}
