//! The writer's side: [`NatsSink`], one session opened for writing (see the crate docs for the
//! publish rules and what survives a crash at each point).

use std::collections::VecDeque;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::{self, message::PublishMessage, publish::PublishAck};
use bytes::Bytes;
use futures_util::future::join_all;
use serde::Deserialize;
use tokio::sync::Notify;
use troupe_journal::{
    JournalError, Replay, Result, SessionImage, SessionPipeline, SessionSink, Settled,
};
use troupe_protocol::{Event, Seq, SessionHeader, SessionId};

use crate::FIRST_EVENTS_HEADER;
use crate::conn::Inner;
use crate::lease::{AcquireError, Holder, Lease, Retake};
use crate::read::{self, SubjectState};

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
    stream: String,
    url: String,
    id: SessionId,
    subject: String,
    holder: Holder,
    leases: jetstream::kv::Store,
    /// The backend's held leases (this writer's is registered there).
    held: crate::lease::HeldLeases,
    lease_ttl: Duration,
    /// `None` for a new session until its first append.
    lease: Option<Lease>,
    /// Stream sequence of the subject's last message (0: the subject is empty).
    last: u64,
    /// Whether the first append (the header) is still to be published.
    new: bool,
    /// The most messages one send keeps in flight.
    max_batch: usize,
    /// A clustered stream: one message in flight at a time (see [`Writer::send_chain`]).
    serial: bool,
    append_timeout: Duration,
    /// How long an acknowledgement may take ([`crate::NatsOptions::request_timeout`]).
    request_timeout: Duration,
    /// Rounds sent and not yet settled, oldest first ([`SessionPipeline`]).
    inflight: VecDeque<Round>,
}

/// A message's acknowledgement, awaited in place (it may be polled again after a wake); only
/// ever reached through `&mut`, so the writer stays `Sync` across its awaits.
type Ack = sync_wrapper::SyncWrapper<
    Pin<Box<dyn Future<Output = std::result::Result<PublishAck, PublishError>> + Send>>,
>;

/// One group-commit round sent and not yet settled ([`NatsSink`]'s [`SessionPipeline`]).
struct Round {
    messages: Vec<Outgoing>,
    /// One per message sent, in order (fewer than `messages` when a send failed).
    acks: Vec<Ack>,
    /// How many of its first messages are acknowledged.
    acked: usize,
    /// Why the message after the last one sent could not be sent.
    unsent: Option<Failed>,
    /// Whether its first message is fenced by the subject's last sequence (nothing was in
    /// flight when it was sent) rather than by the message id of the one before it.
    anchored: bool,
    /// The seq after its last event.
    end: Seq,
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
            let patience = inner.options.append_timeout;
            let held = inner.held.clone();
            let retake = inner.retake(subject.clone());
            inner.call(async move {
                Lease::acquire(&kv, &held, &key, &holder, ttl, patience, Some(retake)).await
            })?
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
                let stream = js
                    .get_stream_no_info(&stream)
                    .await
                    .map_err(|e| e.to_string())?;
                for seq in tail.iter().rev() {
                    stream
                        .delete_message(*seq)
                        .await
                        .map_err(|e| format!("message {seq}: {e}"))?;
                }
                Ok::<_, String>(())
            });
            if let Err(e) = deleted.map_err(|e| e.to_string()).and_then(|r| r) {
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
        let mut writer = Writer::new(
            &inner,
            id.clone(),
            subject,
            Some(lease),
            ends.last_valid,
            false,
        );
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

    /// Stores `image` as a new session, line for line: one fenced chain holding the header
    /// line (declaring every event of the image in `Troupe-First-Events`) and each event line,
    /// under the session's lease, exactly like a first append. What survives a crash part-way
    /// is therefore a first append's: a subject holding fewer events than its header declares
    /// is no session (readers say `SESSION_NOT_FOUND`, listings leave it out), and the next
    /// creator of the id — a copy run again — purges it before publishing. The killed copy's
    /// lease makes that next copy `JOURNAL_LOCKED` (naming it) until the lease's TTL passed.
    pub(crate) fn import(inner: Arc<Inner>, image: &SessionImage) -> Result<()> {
        let mut sink = Self::create(Arc::clone(&inner), image.header().clone())?;
        let mut writer = sink
            .writer
            .take()
            .ok_or_else(|| inner.io("import", "no writer"))?;
        // The lease first, so that a held one (a copy killed part-way, until its TTL passes;
        // or a creator at work) is named as such rather than as an existing session.
        let lease = {
            let kv = inner.leases.clone();
            let key = image.id().to_string();
            let holder = writer.holder.clone();
            let ttl = inner.lease_ttl;
            let patience = inner.options.append_timeout;
            let held = inner.held.clone();
            let retake = inner.retake(writer.subject.clone());
            inner.call(async move {
                Lease::acquire(&kv, &held, &key, &holder, ttl, patience, Some(retake)).await
            })?
        };
        writer.lease = Some(lease.map_err(|e| match e {
            AcquireError::Held(holder) => JournalError::Leased {
                id: image.id().clone(),
                holder,
                store: inner.url.clone(),
            },
            AcquireError::Io(why) => inner.io("take the session's lease", why),
        })?);
        let id = image.id();
        let owner = writer.holder.owner.clone();
        let mut messages = Vec::with_capacity(usize::try_from(image.events()).unwrap_or(0) + 1);
        for (i, line) in image.lines().enumerate() {
            messages.push(match i {
                0 => Outgoing {
                    payload: Bytes::copy_from_slice(line),
                    msg_id: format!("{id}/header/{owner}"),
                    first_events: Some(image.events()),
                },
                n => Outgoing {
                    payload: Bytes::copy_from_slice(line),
                    msg_id: format!("{id}/{}/{owner}", n - 1),
                    first_events: None,
                },
            });
        }
        let (writer, result) = inner.run(async move {
            let result = writer.publish(messages, true).await;
            (writer, result)
        })?;
        // Dropping the sink releases the lease the creation took.
        sink.writer = Some(writer);
        result
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
        if self.next_seq == Seq::ZERO && self.writer.as_ref().is_some_and(|w| w.new) {
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

impl SessionSink for NatsSink {
    fn header(&self) -> &SessionHeader {
        &self.header
    }

    fn next_seq(&self) -> Seq {
        self.next_seq
    }

    fn append(&mut self, expected: Seq, events: &[Event]) -> Result<()> {
        troupe_journal::check_append(&self.header.id, self.next_seq, expected, events)?;
        if events.is_empty() {
            return Ok(());
        }
        let Some(writer) = self.writer.as_ref() else {
            return Err(self.inner.io("append", "an earlier call was lost"));
        };
        let messages = self.messages(events, &writer.holder.owner.clone())?;
        let header = writer.new;
        let mut writer = self
            .writer
            .take()
            .ok_or_else(|| self.inner.io("append", "no writer"))?;
        let (writer, result) = self.inner.run(async move {
            let result = match writer.settle_all().await {
                Ok(()) => writer.publish(messages, header).await,
                Err(e) => Err(e),
            };
            (writer, result)
        })?;
        self.writer = Some(writer);
        result?;
        self.next_seq = Seq(expected.0 + events.len() as u64);
        Ok(())
    }

    fn pipeline(&mut self) -> Option<&mut dyn SessionPipeline> {
        if self.inner.clustered || self.inner.options.pipeline_depth < 2 {
            None
        } else {
            Some(self)
        }
    }
}

/// Rounds in flight together on a standalone server: a round's chain goes on from the last
/// message of the round sent before it (`Nats-Expected-Last-Msg-Id`), so what the stream
/// stores of all rounds sent is one prefix of them, exactly as of one round (crate docs).
impl SessionPipeline for NatsSink {
    fn depth(&self) -> usize {
        self.inner.options.pipeline_depth
    }

    fn in_flight(&self) -> usize {
        self.writer.as_ref().map_or(0, |w| w.inflight.len())
    }

    fn send(&mut self, expected: Seq, events: &[Event]) -> Result<()> {
        troupe_journal::check_append(&self.header.id, self.next_seq, expected, events)?;
        if events.is_empty() {
            return Ok(());
        }
        let Some(writer) = self.writer.as_ref() else {
            return Err(self.inner.io("append", "an earlier call was lost"));
        };
        let messages = self.messages(events, &writer.holder.owner.clone())?;
        let header = writer.new;
        let end = Seq(expected.0 + events.len() as u64);
        let mut writer = self
            .writer
            .take()
            .ok_or_else(|| self.inner.io("append", "no writer"))?;
        let (writer, result) = self.inner.run(async move {
            let result = writer.send_round(messages, header, end).await;
            (writer, result)
        })?;
        self.writer = Some(writer);
        result?;
        self.next_seq = end;
        Ok(())
    }

    fn settle(&mut self, wake: &Arc<Notify>) -> Result<Settled> {
        let mut writer = self
            .writer
            .take()
            .ok_or_else(|| self.inner.io("append", "an earlier call was lost"))?;
        let wake = Arc::clone(wake);
        let (writer, result) = self.inner.run(async move {
            let result = writer.settle(&wake).await;
            (writer, result)
        })?;
        self.writer = Some(writer);
        result
    }
}

impl Drop for NatsSink {
    fn drop(&mut self) {
        if let Some(lease) = self.writer.as_mut().and_then(|w| w.lease.take()) {
            let _ = self.inner.call(lease.release());
        }
    }
}

/// Why a message of a chain was not acknowledged.
enum Failed {
    /// A check refused it: the subject's (or the stream's) last message is not the one this
    /// writer expected.
    Fenced,
    /// It may or may not have been stored (timeout, lost connection, leader election).
    Unknown(String),
    /// It was certainly not stored, and trying again will not help.
    Refused(String),
}

/// What the subject's last message says about messages whose outcome is unknown.
enum Outcome {
    /// The first `count` messages are stored; the last of them has stream sequence `last`.
    Stored { count: usize, last: u64 },
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
            stream: inner.options.stream.clone(),
            url: inner.url.clone(),
            id,
            subject,
            holder: Holder::this_process(),
            leases: inner.leases.clone(),
            held: inner.held.clone(),
            lease_ttl: inner.lease_ttl,
            lease,
            last,
            new,
            max_batch: inner.options.max_batch,
            serial: inner.clustered,
            append_timeout: inner.options.append_timeout,
            request_timeout: inner.options.request_timeout,
            inflight: VecDeque::new(),
        }
    }

    fn io(&self, op: &'static str, reason: impl std::fmt::Display) -> JournalError {
        JournalError::StoreIo {
            op,
            url: self.url.clone(),
            reason: reason.to_string(),
        }
    }

    /// `Ok` while the lease is valid; waits while its renewal tries to keep or take it again
    /// past its TTL ([`crate::lease::Retake`]); `JOURNAL_LEASE_LOST` when it is lost.
    async fn check_lease(&self) -> Result<()> {
        match &self.lease {
            Some(lease) => lease
                .ready()
                .await
                .map_err(|reason| JournalError::LeaseLost {
                    id: self.id.clone(),
                    reason,
                }),
            None => Ok(()),
        }
    }

    /// Publishes one round, creating the session first when `header` (see the crate docs).
    async fn publish(&mut self, messages: Vec<Outgoing>, header: bool) -> Result<()> {
        if header {
            self.take_lease_for_creation().await?;
        }
        match self.publish_chain(&messages).await {
            // The header's fence failed: a session, or a dead creator's leftovers.
            Err(JournalError::SeqConflict { .. }) if header => {
                let state = read::subject_state(&self.js, &self.stream, &self.subject)
                    .await
                    .map_err(|e| self.io("look up the session", e))?;
                match state {
                    SubjectState::Unfinished | SubjectState::Empty => {
                        self.purge().await?;
                        self.publish_chain(&messages).await?;
                    }
                    SubjectState::Session => {
                        return Err(JournalError::AlreadyExists {
                            id: self.id.clone(),
                            path: format!("{}/{}/{}", self.url, self.stream, self.subject).into(),
                        });
                    }
                }
            }
            other => other?,
        }
        self.new = false;
        Ok(())
    }

    async fn take_lease_for_creation(&mut self) -> Result<()> {
        if self.lease.is_some() {
            return Ok(());
        }
        let patience = self.append_timeout;
        let retake = Retake {
            js: self.js.clone(),
            stream: self.stream.clone(),
            subject: self.subject.clone(),
        };
        match Lease::acquire(
            &self.leases,
            &self.held,
            self.id.as_str(),
            &self.holder,
            self.lease_ttl,
            patience,
            Some(retake),
        )
        .await
        {
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

    /// Publishes `messages` as a fenced chain, pipelined: the first carries
    /// `Nats-Expected-Last-Subject-Sequence` (the subject's last message is the one this writer
    /// knows), each later one `Nats-Expected-Last-Msg-Id` = the message before it. So what the
    /// stream stores of one send is always a prefix of it (a lost or refused message makes
    /// every later one fail its check: no gap), and nothing of it lands behind another writer's
    /// message. All acknowledgements are awaited together. A chain cut short by another
    /// session's message landing in between is sent on from where it stopped; a failure whose
    /// outcome is unknown is resolved from the subject's last message and retried until
    /// `append_timeout`.
    async fn publish_chain(&mut self, messages: &[Outgoing]) -> Result<()> {
        self.continue_chain(messages, None).await
    }

    /// [`Writer::publish_chain`], where `known` may give the failure of a send of `messages`
    /// already made (none of them known stored) and whether it *cut* the chain — the failed
    /// message's predecessor is a stored message of this writer's, so a fence failure there
    /// means another session's message landed in between.
    async fn continue_chain(
        &mut self,
        messages: &[Outgoing],
        mut known: Option<(bool, Failed)>,
    ) -> Result<()> {
        let deadline = Instant::now() + self.append_timeout;
        let mut pause = Duration::from_millis(50);
        let mut done = 0;
        while done < messages.len() {
            let (cut, failure) = match known.take() {
                Some((cut, failure)) => (cut, Some(failure)),
                None => {
                    self.check_lease().await?;
                    let (stored, failure) = self.send_chain(&messages[done..]).await;
                    done += stored;
                    (stored > 0, failure)
                }
            };
            let why = match failure {
                None => continue,
                Some(Failed::Refused(why)) => return Err(self.io("publish", why)),
                // Our chain was cut by a message of another session: go on from there.
                Some(Failed::Fenced) if cut => continue,
                Some(Failed::Fenced) => {
                    "the expected last subject sequence did not match".to_owned()
                }
                Some(Failed::Unknown(why)) => why,
            };
            // Find out how much of `rest` was stored before sending again.
            loop {
                match self.outcome(&messages[done..]).await {
                    Ok(Outcome::Stored { count, last }) => {
                        done += count;
                        self.last = last;
                        break;
                    }
                    Ok(Outcome::Absent) => break,
                    Ok(Outcome::Other(next)) => {
                        return Err(JournalError::SeqConflict {
                            id: self.id.clone(),
                            expected: first_seq(&messages[done..]),
                            actual: next.map(Seq),
                        });
                    }
                    Err(e) if Instant::now() < deadline => {
                        // Without the lease this writer must not go on, whatever the outcome.
                        self.check_lease().await?;
                        tracing::debug!(session = %self.id, error = %e, "publish outcome unknown yet");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(1));
                    }
                    Err(e) => {
                        return Err(self.io(
                            "publish",
                            format!(
                                "gave up after {} ms: {why}; {e}",
                                self.append_timeout.as_millis()
                            ),
                        ));
                    }
                }
            }
            if done < messages.len() && Instant::now() >= deadline {
                return Err(self.io(
                    "publish",
                    format!(
                        "gave up after {} ms: {why}",
                        self.append_timeout.as_millis()
                    ),
                ));
            }
            if done < messages.len() {
                tracing::debug!(session = %self.id, reason = %why, "publishing again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
        Ok(())
    }

    /// Sends one round without waiting for it ([`SessionPipeline::send`]): chained to the
    /// last message in flight, or fenced by the subject's last sequence when nothing is. A new
    /// session's first append, a round that would put more than `max_batch` messages in flight,
    /// or one after a round whose send failed waits for everything in flight first and is
    /// published whole before it is queued (already stored).
    async fn send_round(&mut self, messages: Vec<Outgoing>, header: bool, end: Seq) -> Result<()> {
        let queued: usize = self.inflight.iter().map(|r| r.messages.len()).sum();
        if header
            || queued + messages.len() > self.max_batch
            || self.inflight.iter().any(|r| r.unsent.is_some())
        {
            self.settle_all().await?;
            self.publish(messages, header).await?;
            self.inflight.push_back(Round {
                messages: Vec::new(),
                acks: Vec::new(),
                acked: 0,
                unsent: None,
                anchored: true,
                end,
            });
            return Ok(());
        }
        self.check_lease().await?;
        let mut prev = self
            .inflight
            .back()
            .and_then(|r| r.messages.last())
            .map(|m| m.msg_id.clone());
        // Every acknowledgement of the round is due by one deadline from now (the library's
        // own timeout of each starts only when it is first awaited: after the ones before it).
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        let mut round = Round {
            acks: Vec::with_capacity(messages.len()),
            messages,
            acked: 0,
            unsent: None,
            anchored: prev.is_none(),
            end,
        };
        for message in &round.messages {
            let publish = PublishMessage::build()
                .payload(message.payload.clone())
                .headers(self.headers(message));
            let publish = match &prev {
                None => publish.expected_last_subject_sequence(self.last),
                Some(id) => publish.expected_last_message_id(id),
            };
            match self.js.send_publish(self.subject.clone(), publish).await {
                Ok(ack) => round.acks.push(self.ack_by(deadline, ack)),
                Err(e) => {
                    round.unsent = Some(classify(e.kind(), crate::conn::error_text(&e)));
                    break;
                }
            }
            prev = Some(message.msg_id.clone());
        }
        self.inflight.push_back(round);
        Ok(())
    }

    /// `ack`, failing as timed out once `deadline` passed.
    fn ack_by(
        &self,
        deadline: tokio::time::Instant,
        ack: jetstream::context::PublishAckFuture,
    ) -> Ack {
        let ack = ack.into_future();
        sync_wrapper::SyncWrapper::new(Box::pin(async move {
            match tokio::time::timeout_at(deadline, ack).await {
                Ok(answer) => answer,
                Err(_) => Err(PublishError::new(PublishErrorKind::TimedOut)),
            }
        }))
    }

    /// Waits for the oldest round in flight ([`SessionPipeline::settle`]); a failure is
    /// resolved for every round in flight at once ([`Writer::recover`]).
    async fn settle(&mut self, wake: &Notify) -> Result<Settled> {
        let Some(round) = self.inflight.front_mut() else {
            return Ok(Settled::Woken);
        };
        let mut failure = None;
        while round.acked < round.acks.len() {
            let ack = round.acks[round.acked].get_mut();
            let answer = tokio::select! {
                biased;
                answer = ack => answer,
                () = wake.notified() => return Ok(Settled::Woken),
            };
            match answer {
                // (A duplicate of this writer's own message id: an earlier send stored it.)
                Ok(ack) => {
                    self.last = ack.sequence;
                    round.acked += 1;
                }
                Err(e) => {
                    failure = Some(classify(e.kind(), crate::conn::error_text(&e)));
                    break;
                }
            }
        }
        let failure = match (failure, round.unsent.take()) {
            (None, None) => {
                let end = round.end;
                self.inflight.pop_front();
                return Ok(Settled::Stored {
                    next: end,
                    rounds: 1,
                });
            }
            (Some(failure), _) => (failure, true),
            (None, Some(unsent)) => (unsent, false),
        };
        self.recover(failure).await
    }

    /// A message of the oldest round in flight failed (`failed.1`: its acknowledgement said
    /// so; otherwise it could not be sent): waits for the answers of every message sent after
    /// it, then resolves and sends again, as one chain, everything not known stored
    /// ([`Writer::continue_chain`]) — so every round in flight is stored, or the writer fails.
    async fn recover(&mut self, failed: (Failed, bool)) -> Result<Settled> {
        let (failure, answered) = failed;
        let mut rounds = std::mem::take(&mut self.inflight);
        let count = rounds.len() as u64;
        let end = rounds.back().map_or(Seq::ZERO, |r| r.end);
        let first_acked = rounds.front().map_or(0, |r| r.acked);
        // The failed message follows a stored message of ours unless it opened the chain.
        let cut = rounds
            .front()
            .is_some_and(|r| !(r.anchored && r.acked == 0));
        // The answers of every later message, awaited together (each may take the request
        // timeout; one after another they would add up). The one already had is skipped: a
        // finished future must not be polled again.
        let skip = first_acked + usize::from(answered);
        let later = rounds.iter_mut().enumerate().flat_map(|(i, round)| {
            round
                .acks
                .iter_mut()
                .skip(if i == 0 { skip } else { 0 })
                .map(sync_wrapper::SyncWrapper::get_mut)
        });
        let later_stored = join_all(later).await.iter().any(std::result::Result::is_ok);
        let mut rest = Vec::new();
        for (i, round) in rounds.iter_mut().enumerate() {
            rest.extend(round.messages.drain(if i == 0 { first_acked } else { 0 }..));
        }
        let known = if later_stored {
            Failed::Unknown("a message was stored after one that was not acknowledged".into())
        } else {
            failure
        };
        self.continue_chain(&rest, Some((cut && !later_stored, known)))
            .await?;
        Ok(Settled::Stored {
            next: end,
            rounds: count,
        })
    }

    /// Waits until nothing is in flight (every round stored, or the error).
    async fn settle_all(&mut self) -> Result<()> {
        let never = Notify::new();
        while !self.inflight.is_empty() {
            self.settle(&never).await?;
        }
        Ok(())
    }

    /// One send of `chain`: how many of its first messages were acknowledged, and why the next
    /// one was not. On a standalone server the chain is pipelined (at most `max_batch`
    /// messages in flight, chained by `Nats-Expected-Last-Msg-Id`). On a clustered stream each
    /// message is fenced by `Nats-Expected-Last-Subject-Sequence` and sent once the one before
    /// it is acknowledged: there the last-message-id check is made again when a replica
    /// applies the entry, and another session's message proposed in between fails it there —
    /// which the server treats as a critical write error that stops the whole stream.
    async fn send_chain(&mut self, chain: &[Outgoing]) -> (usize, Option<Failed>) {
        if self.serial {
            return self.send_serial(chain).await;
        }
        let chain = &chain[..chain.len().min(self.max_batch)];
        let mut acks = Vec::with_capacity(chain.len());
        let mut failure = None;
        for (i, message) in chain.iter().enumerate() {
            let publish = PublishMessage::build()
                .payload(message.payload.clone())
                .headers(self.headers(message));
            let publish = match i {
                0 => publish.expected_last_subject_sequence(self.last),
                _ => publish.expected_last_message_id(&chain[i - 1].msg_id),
            };
            match self.js.send_publish(self.subject.clone(), publish).await {
                Ok(ack) => acks.push(ack),
                Err(e) => {
                    failure = Some(classify(e.kind(), crate::conn::error_text(&e)));
                    break;
                }
            }
        }
        let mut stored = 0;
        let mut acks = acks.into_iter();
        while let Some(ack) = acks.next() {
            match ack.await {
                // (A duplicate of this writer's own message id: an earlier send stored it.)
                Ok(ack) => {
                    self.last = ack.sequence;
                    stored += 1;
                }
                Err(e) => {
                    failure.get_or_insert(classify(e.kind(), crate::conn::error_text(&e)));
                    // The answers of the rest, awaited together: each may take the request
                    // timeout, and one after another they would add up.
                    let rest = join_all(acks.by_ref().map(IntoFuture::into_future)).await;
                    // Stored after a message that was not: impossible with the chain's
                    // checks; leave it to the outcome check.
                    if rest.iter().any(std::result::Result::is_ok) {
                        failure = Some(Failed::Unknown("acknowledgements out of order".into()));
                    }
                    break;
                }
            }
        }
        (stored, failure)
    }

    /// [`Writer::send_chain`] on a clustered stream: each message fenced by the stream
    /// sequence of the one before it, sent once that one is acknowledged.
    async fn send_serial(&mut self, chain: &[Outgoing]) -> (usize, Option<Failed>) {
        let mut stored = 0;
        for message in chain {
            let publish = PublishMessage::build()
                .payload(message.payload.clone())
                .headers(self.headers(message))
                .expected_last_subject_sequence(self.last);
            let acked = match self.js.send_publish(self.subject.clone(), publish).await {
                Ok(ack) => ack.await,
                Err(e) => {
                    return (
                        stored,
                        Some(classify(e.kind(), crate::conn::error_text(&e))),
                    );
                }
            };
            match acked {
                Ok(ack) => {
                    self.last = ack.sequence;
                    stored += 1;
                }
                Err(e) => {
                    return (
                        stored,
                        Some(classify(e.kind(), crate::conn::error_text(&e))),
                    );
                }
            }
        }
        (stored, None)
    }

    /// The subject's last message, compared with the messages not yet known to be stored.
    async fn outcome(&self, rest: &[Outgoing]) -> std::result::Result<Outcome, String> {
        let stream = self
            .js
            .get_stream_no_info(&self.stream)
            .await
            .map_err(|e| e.to_string())?;
        let last = match stream.get_last_raw_message_by_subject(&self.subject).await {
            Ok(message) => message,
            Err(e) if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound => {
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
        let id = last
            .headers
            .get(async_nats::header::NATS_MESSAGE_ID)
            .map(|v| v.as_str());
        if let Some(i) = rest.iter().position(|m| Some(m.msg_id.as_str()) == id) {
            return Ok(Outcome::Stored {
                count: i + 1,
                last: last.sequence,
            });
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

fn classify(kind: PublishErrorKind, text: String) -> Failed {
    match kind {
        PublishErrorKind::WrongLastSequence | PublishErrorKind::WrongLastMessageId => {
            Failed::Fenced
        }
        PublishErrorKind::MaxPayloadExceeded => Failed::Refused(text),
        _ => Failed::Unknown(text),
    }
}
