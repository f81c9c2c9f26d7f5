//! Live follows ([`troupe_journal::LogBackend::follow`]): one ordered push consumer per
//! followed session that never ends. The server pushes each message as it is stored (flow
//! controlled, with idle heartbeats; the ordered consumer recreates itself from the last
//! sequence it saw after a gap, a missed heartbeat or a reconnect), the consumer task appends
//! the payload and a newline to a buffer and calls the follower's wake; the follower's
//! [`SessionFollow::poll`] scans what arrived with the journal's own scans, so batch
//! atomicity, corruption and unsupported types are decided exactly as for a read. Nothing
//! polls the server.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use async_nats::jetstream::consumer::{self, push::OrderedErrorKind};
use futures_util::StreamExt;
use troupe_journal::{
    JournalError, Result, ScanPosition, SessionFollow, Wake, scan_each, scan_events,
};
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
    end: Option<End>,
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A session followed live on NATS.
pub(crate) struct NatsFollow {
    /// Keeps the runtime (and the connection) alive while the follow lives.
    inner: Arc<Inner>,
    shared: Arc<Mutex<Shared>>,
    task: tokio::task::JoinHandle<()>,
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
        let shared = Arc::new(Mutex::new(Shared::default()));
        let task = {
            let js = inner.js.clone();
            let stream = inner.options.stream.clone();
            let shared = Arc::clone(&shared);
            inner.handle.spawn(async move {
                let failure = consume(&js, &stream, subject, &shared, &wake).await;
                if let Err(reason) = failure {
                    lock(&shared).end = Some(End::Failed(reason));
                    wake();
                }
            })
        };
        Ok(Self {
            path: inner.location(id),
            inner,
            shared,
            task,
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
            id: format!("{} ({why})", self.id),
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
            let mut shared = lock(&self.shared);
            if !shared.created {
                if shared.messages == 0 || shared.messages < 1 + shared.declared {
                    let why = if shared.messages == 0 {
                        "no such session on this store yet".to_owned()
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
    shared: &Mutex<Shared>,
    wake: &Wake,
) -> std::result::Result<(), String> {
    let stream = js
        .get_stream_no_info(stream)
        .await
        .map_err(|e| e.to_string())?;
    let consumer = stream
        .create_consumer(consumer::push::OrderedConfig {
            deliver_subject: js.client().new_inbox(),
            filter_subject: subject,
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("cannot create a consumer: {e}"))?;
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
        let stream_seq = message.info().map_err(|e| e.to_string())?.stream_sequence;
        let declared = message
            .headers
            .as_ref()
            .and_then(|h| h.get(FIRST_EVENTS_HEADER))
            .and_then(|v| v.as_str().parse::<u64>().ok());
        {
            let mut state = lock(shared);
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
            if message.payload.contains(&b'\n') {
                state.end = Some(End::BadMessage {
                    stream_seq,
                    line: state.messages + 1,
                    offset: state.received,
                });
                drop(state);
                wake();
                return Ok(());
            }
            state.bytes.extend_from_slice(&message.payload);
            state.bytes.push(b'\n');
            state.messages += 1;
            state.received += message.payload.len() as u64 + 1;
        }
        wake();
    }
    Err("the consumer ended".to_owned())
}
