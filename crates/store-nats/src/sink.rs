//! The writer's side: [`NatsSink`], one session opened for writing (see the crate docs for the
//! publish rules and what survives a crash at each point).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, context::PublishErrorKind, message::PublishMessage};
use async_nats::{HeaderMap, StatusCode, Subscriber};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::Deserialize;
use troupe_journal::{JournalError, Replay, Result, SessionSink};
use troupe_protocol::{Event, Seq, SessionHeader, SessionId};

use crate::FIRST_EVENTS_HEADER;
use crate::conn::Inner;
use crate::lease::{AcquireError, Holder, Lease};
use crate::read::{self, SubjectState};

/// The JetStream error code of a failed `Nats-Expected-Last-Subject-Sequence` check.
const WRONG_LAST_SEQUENCE: u64 = 10071;

/// JetStream errors that refuse an atomic batch for good: batches disabled on the stream,
/// an unsupported header, an invalid batch id, more messages than the server allows.
const BATCH_REFUSALS: [u64; 4] = [10174, 10177, 10179, 10199];

/// One message of a round.
#[derive(Clone)]
struct Outgoing {
    payload: Bytes,
    /// `<id>/<seq>/<owner>` (`<id>/header/<owner>` for the header).
    msg_id: String,
    /// On the header message: the number of events published with it.
    first_events: Option<u64>,
}

/// A session opened for writing on NATS.
pub(crate) struct NatsSink {
    inner: Arc<Inner>,
    header: SessionHeader,
    next_seq: Seq,
    /// The async side, moved into each call and back; `None` after a call was lost.
    writer: Option<Writer>,
}

/// The state the publishing futures need.
struct Writer {
    js: jetstream::Context,
    client: async_nats::Client,
    stream: String,
    url: String,
    id: SessionId,
    subject: String,
    holder: Holder,
    leases: jetstream::kv::Store,
    lease_ttl: Duration,
    /// `None` for a new session until its first append.
    lease: Option<Lease>,
    /// Stream sequence of the subject's last message (0: the subject is empty).
    last: u64,
    /// Whether the first append (the header) is still to be published.
    new: bool,
    atomic: bool,
    max_batch: usize,
    request_timeout: Duration,
    append_timeout: Duration,
    /// Replies to atomic batches: `<inbox>.<batch>.<first|commit>`.
    replies: Option<(String, Subscriber)>,
}

impl NatsSink {
    pub(crate) fn create(inner: Arc<Inner>, header: SessionHeader) -> Result<Self> {
        let subject = inner.subject(&header.id)?;
        let state = {
            let js = inner.js.clone();
            let stream = inner.options.stream.clone();
            let subject = subject.clone();
            inner.call(async move { read::subject_state(&js, &stream, &subject).await })?
        };
        match state.map_err(|e| inner.io("look up the session", e))? {
            SubjectState::Session => {
                return Err(JournalError::AlreadyExists {
                    id: header.id.clone(),
                    path: inner.location(&header.id),
                });
            }
            // An unfinished creation is purged by the first append, under the lease.
            SubjectState::Empty | SubjectState::Unfinished => {}
        }
        let writer = Writer::new(&inner, header.id.clone(), subject, None, 0, true);
        Ok(Self {
            inner,
            header,
            next_seq: Seq::ZERO,
            writer: Some(writer),
        })
    }

    pub(crate) fn open(inner: Arc<Inner>, id: &SessionId) -> Result<(Self, Replay)> {
        let subject = inner.subject(id)?;
        let holder = Holder::this_process();
        let lease = {
            let kv = inner.leases.clone();
            let key = id.to_string();
            let holder = holder.clone();
            let ttl = inner.lease_ttl;
            inner.call(async move { Lease::acquire(&kv, &key, &holder, ttl).await })?
        };
        let lease = lease.map_err(|e| match e {
            AcquireError::Held(holder) => JournalError::Leased {
                id: id.clone(),
                holder,
                store: inner.url.clone(),
            },
            AcquireError::Io(why) => inner.io("take the session's lease", why),
        })?;
        let release = |inner: &Inner, lease: Lease| {
            let _ = inner.call(lease.release());
        };
        let mut events = Vec::new();
        let (summary, ends) = match read::read_each(&inner, id, &mut |e| events.push(e)) {
            Ok(read) => read,
            Err(e) => {
                release(&inner, lease);
                return Err(e);
            }
        };
        if let Some(torn) = &summary.torn_tail {
            tracing::warn!(
                session = %id,
                messages = ends.tail.len(),
                reason = %torn.reason,
                "deleting the unfinished final batch of a session on NATS"
            );
            // Last message first: a crash half-way leaves a shorter unfinished batch, which
            // the next open deletes in turn.
            let js = inner.js.clone();
            let stream = inner.options.stream.clone();
            let tail = ends.tail.clone();
            let deleted = inner.call(async move {
                let stream = js.get_stream_no_info(&stream).await.map_err(|e| e.to_string())?;
                for seq in tail.iter().rev() {
                    stream
                        .delete_message(*seq)
                        .await
                        .map_err(|e| format!("message {seq}: {e}"))?;
                }
                Ok::<_, String>(())
            });
            if let Err(e) = deleted
                .map_err(|e| e.to_string())
                .and_then(|r| r)
            {
                release(&inner, lease);
                return Err(inner.io("delete an unfinished batch", e));
            }
        }
        let replay = Replay {
            path: inner.location(id),
            header: summary.header.clone(),
            events,
            skipped: summary.skipped,
            torn_tail: summary.torn_tail,
            valid_len: summary.valid_len,
        };
        let mut writer = Writer::new(&inner, id.clone(), subject, Some(lease), ends.last_valid, false);
        writer.holder = holder;
        Ok((
            Self {
                inner,
                header: summary.header,
                next_seq: summary.next_seq,
                writer: Some(writer),
            },
            replay,
        ))
    }

    fn messages(&self, events: &[Event], owner: &str) -> Result<Vec<Outgoing>> {
        let id = &self.header.id;
        let encode = |value: &dyn erased::Encode| {
            value
                .encode()
                .map(Bytes::from)
                .map_err(|e| self.inner.io("encode an event", e))
        };
        let mut out = Vec::with_capacity(events.len() + 1);
        if self.next_seq == Seq::ZERO
            && self.writer.as_ref().is_some_and(|w| w.new)
        {
            out.push(Outgoing {
                payload: encode(&self.header)?,
                msg_id: format!("{id}/header/{owner}"),
                first_events: Some(events.len() as u64),
            });
        }
        for event in events {
            out.push(Outgoing {
                payload: encode(event)?,
                msg_id: format!("{id}/{}/{owner}", event.seq),
                first_events: None,
            });
        }
        Ok(out)
    }
}

/// Serialising the header and events through one closure.
mod erased {
    pub(super) trait Encode {
        fn encode(&self) -> serde_json::Result<Vec<u8>>;
    }
    impl<T: serde::Serialize> Encode for T {
        fn encode(&self) -> serde_json::Result<Vec<u8>> {
            serde_json::to_vec(self)
        }
    }
}

/// The groups a round is published in: the whole first append as one, else each journal
/// batch (`seq..=batchLast`) or single event; then packed into chunks of at most `max`
/// messages (a larger group is cut), each chunk one atomic batch (or, on a stream without
/// atomic batches, one message per chunk).
fn chunks(events: &[Event], header: bool, atomic: bool, max: usize) -> Vec<std::ops::Range<usize>> {
    let total = events.len() + usize::from(header);
    if !atomic {
        return (0..total).map(|i| i..i + 1).collect();
    }
    let mut groups = Vec::new();
    if header {
        groups.push(0..total);
    } else {
        let mut i = 0;
        while i < events.len() {
            let len = match events[i].batch_last {
                Some(last) if last.0 > events[i].seq.0 => {
                    usize::try_from(last.0 - events[i].seq.0 + 1).unwrap_or(usize::MAX)
                }
                _ => 1,
            };
            let end = (i + len).min(events.len());
            groups.push(i..end);
            i = end;
        }
    }
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for group in groups {
        let mut start = group.start;
        while start < group.end {
            let end = (start + max).min(group.end);
            match out.last_mut() {
                // Groups share a chunk while they fit: a chunk boundary is always a group
                // boundary unless a group alone exceeds `max`.
                Some(last) if end - last.start <= max => last.end = end,
                _ => out.push(start..end),
            }
            start = end;
        }
    }
    out
}

impl SessionSink for NatsSink {
    fn header(&self) -> &SessionHeader {
        &self.header
    }

    fn next_seq(&self) -> Seq {
        self.next_seq
    }

    fn append(&mut self, expected: Seq, events: &[Event]) -> Result<()> {
        if expected != self.next_seq {
            return Err(JournalError::SeqConflict {
                id: self.header.id.clone(),
                expected,
                actual: self.next_seq,
            });
        }
        if events.is_empty() {
            return Ok(());
        }
        for (i, event) in events.iter().enumerate() {
            if event.seq.0 != expected.0 + i as u64 {
                return Err(JournalError::InvalidBatch {
                    id: self.header.id.clone(),
                    reason: format!(
                        "event {i} has seq {} where {} was expected",
                        event.seq,
                        expected.0 + i as u64
                    ),
                });
            }
        }
        let Some(writer) = self.writer.as_ref() else {
            return Err(self.inner.io("append", "an earlier call was lost"));
        };
        let messages = self.messages(events, &writer.holder.owner.clone())?;
        let header = writer.new;
        let plan = chunks(events, header, writer.atomic, writer.max_batch);
        let mut writer = self.writer.take().ok_or_else(|| self.inner.io("append", "no writer"))?;
        let (writer, result) = self.inner.call(async move {
            let result = writer.publish(messages, plan, header).await;
            (writer, result)
        })?;
        self.writer = Some(writer);
        result?;
        self.next_seq = Seq(expected.0 + events.len() as u64);
        Ok(())
    }
}

impl Drop for NatsSink {
    fn drop(&mut self) {
        if let Some(lease) = self.writer.as_mut().and_then(|w| w.lease.take()) {
            let _ = self.inner.call(lease.release());
        }
    }
}

/// A JetStream API reply: a publish acknowledgement or an error.
#[derive(Debug, Default, Deserialize)]
struct Reply {
    #[serde(default)]
    error: Option<ApiError>,
    #[serde(default)]
    seq: u64,
    #[serde(default)]
    duplicate: bool,
}

#[derive(Debug, Default, Deserialize)]
struct ApiError {
    #[serde(default)]
    err_code: u64,
    #[serde(default)]
    description: String,
}

/// How one attempt to publish a chunk ended, when it did not succeed.
enum Failed {
    /// The fence refused it: the subject's last message is not the one this writer knows.
    Fenced,
    /// It may or may not have been stored (timeout, lost connection, leader election).
    Unknown(String),
    /// It was certainly not stored, and trying again will not help.
    Refused(String),
}

/// What the subject's last message says about a chunk whose outcome is unknown.
enum Outcome {
    /// The chunk is stored; its last message has this stream sequence.
    Stored(u64),
    /// Nothing new on the subject: the chunk is not stored.
    Absent,
    /// Another writer's message is last: the log's next seq (from its line), if readable.
    Other(Option<u64>),
}

impl Writer {
    fn new(
        inner: &Inner,
        id: SessionId,
        subject: String,
        lease: Option<Lease>,
        last: u64,
        new: bool,
    ) -> Self {
        Self {
            js: inner.js.clone(),
            client: inner.client.clone(),
            stream: inner.options.stream.clone(),
            url: inner.url.clone(),
            id,
            subject,
            holder: Holder::this_process(),
            leases: inner.leases.clone(),
            lease_ttl: inner.lease_ttl,
            lease,
            last,
            new,
            atomic: inner.atomic,
            max_batch: inner.options.max_batch,
            request_timeout: inner.options.request_timeout,
            append_timeout: inner.options.append_timeout,
            replies: None,
        }
    }

    fn io(&self, op: &'static str, reason: impl std::fmt::Display) -> JournalError {
        JournalError::StoreIo {
            op,
            url: self.url.clone(),
            reason: reason.to_string(),
        }
    }

    fn check_lease(&self) -> Result<()> {
        match &self.lease {
            Some(lease) => lease.check().map_err(|reason| JournalError::LeaseLost {
                id: self.id.clone(),
                reason,
            }),
            None => Ok(()),
        }
    }

    /// Publishes one round (`plan` cuts `messages` into chunks).
    async fn publish(
        &mut self,
        messages: Vec<Outgoing>,
        plan: Vec<std::ops::Range<usize>>,
        header: bool,
    ) -> Result<()> {
        if header {
            self.take_lease_for_creation().await?;
        }
        let mut purged = false;
        for (n, range) in plan.into_iter().enumerate() {
            let chunk = &messages[range];
            match self.publish_chunk(chunk).await {
                Err(JournalError::SeqConflict { .. }) if header && n == 0 => {
                    // The subject is not empty: a session, or a dead creator's leftovers.
                    let state = read::subject_state(&self.js, &self.stream, &self.subject)
                        .await
                        .map_err(|e| self.io("look up the session", e))?;
                    match state {
                        SubjectState::Unfinished | SubjectState::Empty if !purged => {
                            purged = true;
                            self.purge().await?;
                            self.publish_chunk(chunk).await?;
                        }
                        _ => {
                            return Err(JournalError::AlreadyExists {
                                id: self.id.clone(),
                                path: format!("{}/{}/{}", self.url, self.stream, self.subject)
                                    .into(),
                            });
                        }
                    }
                }
                other => other?,
            }
        }
        self.new = false;
        Ok(())
    }

    async fn take_lease_for_creation(&mut self) -> Result<()> {
        if self.lease.is_some() {
            return Ok(());
        }
        match Lease::acquire(&self.leases, self.id.as_str(), &self.holder, self.lease_ttl).await {
            Ok(lease) => {
                self.lease = Some(lease);
                Ok(())
            }
            Err(AcquireError::Held(_)) => Err(JournalError::AlreadyExists {
                id: self.id.clone(),
                path: format!("{}/{}/{}", self.url, self.stream, self.subject).into(),
            }),
            Err(AcquireError::Io(why)) => Err(self.io("take the session's lease", why)),
        }
    }

    async fn purge(&mut self) -> Result<()> {
        let stream = self
            .js
            .get_stream_no_info(&self.stream)
            .await
            .map_err(|e| self.io("purge an unfinished creation", e))?;
        stream
            .purge()
            .filter(&self.subject)
            .await
            .map_err(|e| self.io("purge an unfinished creation", e))?;
        tracing::warn!(session = %self.id, "purged the leftovers of an unfinished creation");
        self.last = 0;
        Ok(())
    }

    /// Publishes one chunk, retrying an unknown outcome until it is known or
    /// `append_timeout` passes.
    async fn publish_chunk(&mut self, chunk: &[Outgoing]) -> Result<()> {
        let deadline = Instant::now() + self.append_timeout;
        let mut pause = Duration::from_millis(50);
        loop {
            self.check_lease()?;
            let attempt = if chunk.len() == 1 {
                self.publish_one(&chunk[0]).await
            } else {
                self.publish_batch(chunk).await
            };
            let why = match attempt {
                Ok(seq) => {
                    self.last = seq;
                    return Ok(());
                }
                Err(Failed::Refused(why)) => return Err(self.io("publish", why)),
                Err(Failed::Fenced) => "the expected last subject sequence did not match".to_owned(),
                Err(Failed::Unknown(why)) => why,
            };
            // Find out whether it was stored before trying again.
            loop {
                match self.outcome(chunk).await {
                    Ok(Outcome::Stored(seq)) => {
                        self.last = seq;
                        return Ok(());
                    }
                    Ok(Outcome::Absent) => break,
                    Ok(Outcome::Other(next)) => {
                        return Err(JournalError::SeqConflict {
                            id: self.id.clone(),
                            expected: first_seq(chunk),
                            actual: Seq(next.unwrap_or(u64::MAX)),
                        });
                    }
                    Err(e) if Instant::now() < deadline => {
                        // Without the lease this writer must not go on, whatever the outcome.
                        self.check_lease()?;
                        tracing::debug!(session = %self.id, error = %e, "publish outcome unknown yet");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(1));
                    }
                    Err(e) => {
                        return Err(self.io(
                            "publish",
                            format!("gave up after {} ms: {why}; {e}", self.append_timeout.as_millis()),
                        ));
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(self.io(
                    "publish",
                    format!("gave up after {} ms: {why}", self.append_timeout.as_millis()),
                ));
            }
            tracing::debug!(session = %self.id, reason = %why, "retrying a publish");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// The subject's last message, compared with the chunk.
    async fn outcome(&self, chunk: &[Outgoing]) -> std::result::Result<Outcome, String> {
        let stream = self
            .js
            .get_stream_no_info(&self.stream)
            .await
            .map_err(|e| e.to_string())?;
        let last = match stream.get_last_raw_message_by_subject(&self.subject).await {
            Ok(message) => message,
            Err(e)
                if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound =>
            {
                return Ok(if self.last == 0 {
                    Outcome::Absent
                } else {
                    Outcome::Other(None)
                });
            }
            Err(e) => return Err(e.to_string()),
        };
        if last.sequence == self.last {
            return Ok(Outcome::Absent);
        }
        let ours = last
            .headers
            .get(async_nats::header::NATS_MESSAGE_ID)
            .map(|v| v.as_str());
        if chunk.last().is_some_and(|m| Some(m.msg_id.as_str()) == ours) {
            return Ok(Outcome::Stored(last.sequence));
        }
        #[derive(Deserialize)]
        struct SeqOnly {
            seq: u64,
        }
        let next = serde_json::from_slice::<SeqOnly>(&last.payload)
            .ok()
            .map(|s| s.seq + 1);
        Ok(Outcome::Other(next))
    }

    fn headers(&self, message: &Outgoing) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, message.msg_id.as_str());
        if let Some(n) = message.first_events {
            headers.insert(FIRST_EVENTS_HEADER, n.to_string().as_str());
        }
        headers
    }

    async fn publish_one(&self, message: &Outgoing) -> std::result::Result<u64, Failed> {
        let publish = PublishMessage::build()
            .payload(message.payload.clone())
            .headers(self.headers(message))
            .expected_last_subject_sequence(self.last);
        let ack = self
            .js
            .send_publish(self.subject.clone(), publish)
            .await
            .map_err(|e| classify(e.kind(), e.to_string()))?;
        match ack.await {
            // A duplicate of this writer's own message id: an earlier attempt was stored.
            Ok(ack) => Ok(ack.sequence),
            Err(e) => Err(classify(e.kind(), e.to_string())),
        }
    }

    async fn reply_inbox(&mut self) -> std::result::Result<(), Failed> {
        if self.replies.is_none() {
            let inbox = self.client.new_inbox();
            let subscriber = self
                .client
                .subscribe(format!("{inbox}.>"))
                .await
                .map_err(|e| Failed::Unknown(e.to_string()))?;
            self.replies = Some((inbox, subscriber));
        }
        Ok(())
    }

    /// One atomic batch: pipelined, the first message fenced, the last one committing; the
    /// server stores all or nothing and acknowledges the commit.
    async fn publish_batch(&mut self, chunk: &[Outgoing]) -> std::result::Result<u64, Failed> {
        self.reply_inbox().await?;
        let inbox = self.replies.as_ref().map(|(i, _)| i.clone()).unwrap_or_default();
        let batch = uuid::Uuid::new_v4().simple().to_string();
        let last_index = chunk.len() - 1;
        for (i, message) in chunk.iter().enumerate() {
            let mut headers = self.headers(message);
            headers.insert("Nats-Batch-Id", batch.as_str());
            headers.insert("Nats-Batch-Sequence", (i + 1).to_string().as_str());
            if i == 0 {
                headers.insert(
                    "Nats-Expected-Last-Subject-Sequence",
                    self.last.to_string().as_str(),
                );
            }
            if i == last_index {
                headers.insert("Nats-Batch-Commit", "1");
            }
            let reply = match i {
                0 => Some(format!("{inbox}.{batch}.first")),
                _ if i == last_index => Some(format!("{inbox}.{batch}.commit")),
                _ => None,
            };
            let sent = match reply {
                Some(reply) => {
                    self.client
                        .publish_with_reply_and_headers(
                            self.subject.clone(),
                            reply,
                            headers,
                            message.payload.clone(),
                        )
                        .await
                }
                None => {
                    self.client
                        .publish_with_headers(self.subject.clone(), headers, message.payload.clone())
                        .await
                }
            };
            sent.map_err(|e| match e.kind() {
                async_nats::client::PublishErrorKind::MaxPayloadExceeded => {
                    Failed::Refused(e.to_string())
                }
                _ => Failed::Unknown(e.to_string()),
            })?;
        }
        let first_subject = format!("{inbox}.{batch}.first");
        let commit_subject = format!("{inbox}.{batch}.commit");
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        let mut first_error = None;
        let Some((_, replies)) = self.replies.as_mut() else {
            return Err(Failed::Unknown("no reply subscription".to_owned()));
        };
        loop {
            let reply = match tokio::time::timeout_at(deadline, replies.next()).await {
                Ok(Some(reply)) => reply,
                Ok(None) => {
                    self.replies = None;
                    return Err(Failed::Unknown("the reply subscription ended".to_owned()));
                }
                Err(_) => {
                    return Err(first_error.unwrap_or_else(|| {
                        Failed::Unknown(format!(
                            "no acknowledgement within {} ms",
                            self.request_timeout.as_millis()
                        ))
                    }));
                }
            };
            let subject = reply.subject.as_str();
            if subject != first_subject && subject != commit_subject {
                continue; // A late reply to an earlier attempt.
            }
            if reply.status == Some(StatusCode::NO_RESPONDERS) {
                return Err(Failed::Unknown("no responders (no stream leader)".to_owned()));
            }
            if subject == first_subject {
                if !reply.payload.is_empty()
                    && let Ok(Reply { error: Some(e), .. }) = serde_json::from_slice(&reply.payload)
                {
                    first_error = Some(api_failure(&e));
                }
                continue;
            }
            let parsed: Reply = serde_json::from_slice(&reply.payload)
                .map_err(|e| Failed::Unknown(format!("unreadable acknowledgement: {e}")))?;
            return match parsed.error {
                Some(e) => Err(api_failure(&e)),
                None if parsed.seq == 0 => Err(Failed::Unknown("acknowledgement without a sequence".to_owned())),
                None => {
                    let _ = parsed.duplicate;
                    Ok(parsed.seq)
                }
            };
        }
    }
}

fn first_seq(chunk: &[Outgoing]) -> Seq {
    // `<id>/<seq>/<owner>`: the seq is the second field from the end.
    chunk
        .iter()
        .find_map(|m| {
            let mut parts = m.msg_id.rsplitn(3, '/');
            parts.next();
            parts.next().and_then(|s| s.parse().ok())
        })
        .map_or(Seq::ZERO, Seq)
}

fn api_failure(e: &ApiError) -> Failed {
    if e.err_code == WRONG_LAST_SEQUENCE {
        Failed::Fenced
    } else if BATCH_REFUSALS.contains(&e.err_code) {
        Failed::Refused(format!(
            "{} (error {}; a server limiting batches below max_batch needs a smaller one)",
            e.description, e.err_code
        ))
    } else {
        // Batch errors, "no suitable peers", "temporarily unavailable": the batch was not
        // committed; a retry after the outcome check may succeed.
        Failed::Unknown(format!("{} (error {})", e.description, e.err_code))
    }
}

fn classify(kind: PublishErrorKind, text: String) -> Failed {
    match kind {
        PublishErrorKind::WrongLastSequence => Failed::Fenced,
        PublishErrorKind::MaxPayloadExceeded => Failed::Refused(text),
        _ => Failed::Unknown(text),
    }
}
