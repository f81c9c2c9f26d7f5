//! Reading session subjects: an ordered consumer on the backend's runtime feeds the payloads,
//! joined with `'\n'`, to the journal's scans on the caller's thread (bounded memory: a few
//! chunks in flight).

use std::collections::VecDeque;
use std::io::{BufRead, Read};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};

use async_nats::jetstream::{self, consumer};
use futures_util::StreamExt;
use troupe_journal::{
    JournalError, LineCheck, LineUse, MAX_BATCH_EVENTS, Result, ScanPosition, ScanSummary,
    ScanTail, Selected, SessionImage, SessionListing, scan_each, scan_events, scan_selected_each,
};
use troupe_protocol::{Event, SessionHeader, SessionId};

use crate::conn::Inner;
use crate::{FIRST_EVENTS_HEADER, SESSION_SUBJECT_PREFIX, SESSION_SUBJECTS};

/// A chunk is sent once it holds this many bytes (it holds whole lines only).
const CHUNK_BYTES: usize = 256 * 1024;
/// Chunks the producer may have in flight before the reader consumed them.
const CHUNKS_IN_FLIGHT: usize = 8;

/// How long a clustered stream's read that failed before handing over a line is made again
/// (a leader election of a three-node cluster settles within a few seconds, more on a loaded
/// machine; a cluster that lost its quorum fails a read this much later).
const RETRY_READ_FOR: std::time::Duration = std::time::Duration::from_secs(20);

/// Stream sequences remembered for the end of a read: enough for the last valid message and
/// an unfinished batch after it (at most `MAX_BATCH_EVENTS - 1` messages).
const SEQS_KEPT: usize = MAX_BATCH_EVENTS as usize + 2;

/// What the producer sends to the reader.
enum Piece {
    /// Whole lines (each payload followed by `'\n'`) and each line's stream sequence.
    Lines { bytes: Vec<u8>, seqs: Vec<u64> },
    /// The next message's payload holds a newline, so it is no single line.
    BadMessage { stream_seq: u64 },
    /// The subject holds no session: empty, or its first append is unfinished.
    Missing(String),
    /// The read failed.
    Failed(JournalError),
    /// Everything the subject held when the read reached it.
    End,
}

/// Where a read starts.
#[derive(Clone, Copy)]
enum Start {
    /// At the header: checks that the session exists and its first append is whole.
    Header,
    /// After the message with this stream sequence.
    After(u64),
}

/// Why the reader stopped early.
enum Stop {
    Bad {
        line: u64,
        offset: u64,
        stream_seq: u64,
    },
    Missing(String),
    Failed(JournalError),
}

/// A [`BufRead`] over the producer's chunks.
pub(crate) struct MessageReader {
    rx: Receiver<Piece>,
    permits: Arc<tokio::sync::Semaphore>,
    chunk: Vec<u8>,
    at: usize,
    done: bool,
    stop: Option<Stop>,
    /// Lines handed out so far, and their bytes.
    lines: u64,
    bytes: u64,
    /// Stream sequences of the last [`SEQS_KEPT`] lines.
    seqs: VecDeque<u64>,
}

impl MessageReader {
    fn next_piece(&mut self) {
        match self.rx.recv() {
            Ok(Piece::Lines { bytes, seqs }) => {
                self.permits.add_permits(1);
                self.lines += seqs.len() as u64;
                self.bytes += bytes.len() as u64;
                for seq in seqs {
                    if self.seqs.len() == SEQS_KEPT {
                        self.seqs.pop_front();
                    }
                    self.seqs.push_back(seq);
                }
                self.chunk = bytes;
                self.at = 0;
            }
            Ok(Piece::BadMessage { stream_seq }) => {
                self.stop = Some(Stop::Bad {
                    line: self.lines,
                    offset: self.bytes,
                    stream_seq,
                });
                self.done = true;
            }
            Ok(Piece::Missing(why)) => {
                self.stop = Some(Stop::Missing(why));
                self.done = true;
            }
            Ok(Piece::Failed(e)) => {
                self.stop = Some(Stop::Failed(e));
                self.done = true;
            }
            Ok(Piece::End) => self.done = true,
            Err(_) => {
                self.stop = Some(Stop::Failed(JournalError::StoreIo {
                    op: "read",
                    url: String::new(),
                    reason: "the reading task stopped".to_owned(),
                }));
                self.done = true;
            }
        }
    }

    /// The stream sequence of the `index`-th line handed out (0-based), if still remembered.
    fn seq_of(&self, index: u64) -> Option<u64> {
        let first = self.lines - self.seqs.len() as u64;
        index
            .checked_sub(first)
            .and_then(|i| self.seqs.get(usize::try_from(i).ok()?).copied())
    }

    /// The stream sequences of the lines from `index` on (0-based).
    fn seqs_from(&self, index: u64) -> Vec<u64> {
        (index..self.lines).filter_map(|i| self.seq_of(i)).collect()
    }

    /// The `id` of the header line, when the first line is a JSON object with one.
    fn header_id(&mut self) -> Option<String> {
        #[derive(serde::Deserialize)]
        struct IdOnly {
            id: String,
        }
        let available = self.fill_buf().ok()?;
        let end = memchr_newline(available)?;
        serde_json::from_slice::<IdOnly>(&available[..end])
            .ok()
            .map(|h| h.id)
    }

    /// Combines the scan's result with how the feed ended: a failed or missing feed wins (the
    /// scan saw only part of the subject), then the scan's own error, then a message with a
    /// newline (a complete bad line: corruption).
    fn finish<T>(
        &mut self,
        inner: &Inner,
        id: &SessionId,
        path: &Path,
        scanned: Result<T>,
    ) -> Result<T> {
        match self.stop.take() {
            Some(Stop::Failed(JournalError::StoreIo { op, reason, .. })) => {
                Err(JournalError::StoreIo {
                    op,
                    url: inner.url.clone(),
                    reason,
                })
            }
            Some(Stop::Failed(e)) => Err(e),
            Some(Stop::Missing(why)) => Err(JournalError::NotFound {
                id: missing_id(id, &why),
                path: path.to_path_buf(),
            }),
            Some(Stop::Bad {
                line,
                offset,
                stream_seq,
            }) => {
                scanned?;
                Err(JournalError::Corrupt {
                    path: path.to_path_buf(),
                    line: line + 1,
                    offset,
                    reason: format!(
                        "message {stream_seq} of the stream holds a newline, so it is not one line"
                    ),
                })
            }
            None => scanned,
        }
    }
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|b| *b == b'\n')
}

impl Read for MessageReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for MessageReader {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.at == self.chunk.len() && !self.done {
            self.next_piece();
        }
        Ok(&self.chunk[self.at..])
    }

    fn consume(&mut self, amount: usize) {
        self.at = (self.at + amount).min(self.chunk.len());
    }
}

impl Drop for MessageReader {
    fn drop(&mut self) {
        // Unblock a producer waiting for room, so it sees the closed channel and stops.
        self.permits.add_permits(CHUNKS_IN_FLIGHT);
    }
}

/// Starts the producer for `subject` and returns the reader of its lines.
fn feed(inner: &Inner, subject: String, start: Start) -> MessageReader {
    let (tx, rx) = std::sync::mpsc::channel();
    let permits = Arc::new(tokio::sync::Semaphore::new(CHUNKS_IN_FLIGHT));
    let js = inner.js.clone();
    let stream = inner.options.stream.clone();
    let timeout = inner.options.request_timeout;
    let url = inner.url.clone();
    let task_permits = Arc::clone(&permits);
    let clustered = inner.clustered;
    inner.handle.spawn(async move {
        let read = ReadRequest {
            subject,
            start,
            timeout,
            clustered,
        };
        // A clustered stream's read that fails before it handed over any line (a leader
        // election: the stream or consumer request times out, the new leader's consumer
        // stalls, the client moves to another node) is made again, with a pause, for up to
        // [`RETRY_READ_FOR`]: a read changes nothing, so making it again is always safe.
        let started = std::time::Instant::now();
        let mut pause = std::time::Duration::from_millis(100);
        loop {
            let mut handed = false;
            let Err(e) = produce(&js, &stream, read.clone(), &tx, &task_permits, &mut handed).await
            else {
                return;
            };
            if clustered && !handed && started.elapsed() + pause < RETRY_READ_FOR {
                tracing::debug!(error = %e, "a read failed before it delivered; reading again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(1));
                continue;
            }
            let _ = tx.send(Piece::Failed(JournalError::StoreIo {
                op: "read",
                url,
                reason: e,
            }));
            return;
        }
    });
    MessageReader {
        rx,
        permits,
        chunk: Vec::new(),
        at: 0,
        done: false,
        stop: None,
        lines: 0,
        bytes: 0,
        seqs: VecDeque::with_capacity(1024),
    }
}

/// What one read asks of [`produce`].
#[derive(Clone)]
struct ReadRequest {
    subject: String,
    start: Start,
    /// How long to wait for the next message.
    timeout: std::time::Duration,
    /// Whether the stream is clustered: then the read goes on until the stream leader's last
    /// message of the subject (see [`leader_view`]).
    clustered: bool,
}

/// The stream leader's view of `subject`: the stream sequence of its last message (0 when it
/// has none) and how many messages it holds. On a clustered stream a consumer may be served by
/// a replica that has not applied every committed message yet (right after a restart or a
/// leader change): a read that stopped where such a consumer runs dry would miss acknowledged
/// messages, and an open would take an acknowledged batch for an unfinished one. So a read
/// there goes on until it has seen the leader's last message.
pub(crate) async fn leader_view(
    stream: &jetstream::stream::Stream<()>,
    subject: &str,
) -> std::result::Result<(u64, u64), String> {
    let last = match stream.get_last_raw_message_by_subject(subject).await {
        Ok(message) => message.sequence,
        Err(e) if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound => 0,
        Err(e) => return Err(format!("cannot read the subject's last message: {e}")),
    };
    let count = if last == 0 {
        0
    } else {
        subject_count(stream, subject).await?
    };
    Ok((last, count))
}

async fn produce(
    js: &jetstream::Context,
    stream: &str,
    read: ReadRequest,
    tx: &Sender<Piece>,
    permits: &tokio::sync::Semaphore,
    handed: &mut bool,
) -> std::result::Result<(), String> {
    let ReadRequest {
        subject,
        start,
        timeout,
        clustered,
    } = read;
    let stream = js
        .get_stream_no_info(stream)
        .await
        .map_err(|e| e.to_string())?;
    // The leader's last message of the subject and its message count (clustered only).
    let leader = if clustered {
        Some(leader_view(&stream, &subject).await?)
    } else {
        None
    };
    let target = leader.map(|(last, _)| last);
    let deliver_policy = match start {
        Start::Header => consumer::DeliverPolicy::All,
        Start::After(seq) => consumer::DeliverPolicy::ByStartSequence {
            start_sequence: seq + 1,
        },
    };
    // A push consumer: the server sends without waiting for pull requests (flow controlled);
    // ordered: gaps and lost heartbeats recreate it from the last sequence seen.
    let consumer = stream
        .create_consumer(consumer::push::OrderedConfig {
            deliver_subject: js.client().new_inbox(),
            filter_subject: subject,
            deliver_policy,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("cannot create a consumer: {e}"))?;
    let name = consumer.cached_info().name.clone();
    let to = Handover {
        tx,
        permits,
        handed,
    };
    let result = deliver(consumer, start, target, leader, timeout, to).await;
    // The read is over (its reader has every piece already): its consumer goes now, not at
    // the server's inactivity threshold (30 s for an ordered consumer). A stream takes at most
    // 1,000 consumers (nats-server 2.15's default for a stream that sets none, and it reads a
    // limit ≤ 0 as that default), and a busy Team reads its members' logs far more often than
    // 1,000 times in 30 s: the leftover consumers made every later read fail
    // ("maximum consumers limit reached"). Best effort: one that cannot be deleted (the
    // connection is gone) still expires. Deleting is safe at any point: nothing of a session
    // lives in a consumer.
    if let Err(e) = stream.delete_consumer(&name).await {
        tracing::debug!(consumer = %name, error = %e, "a read's consumer was not deleted");
    }
    result
}

/// Where a read's pieces go: the reader's channel, the chunks it may hold, and whether any
/// line was handed over yet (a read that failed after that is not made again).
struct Handover<'a> {
    tx: &'a Sender<Piece>,
    permits: &'a tokio::sync::Semaphore,
    handed: &'a mut bool,
}

/// Hands what `consumer` delivers to the reader over `tx` (see [`produce`]).
async fn deliver(
    consumer: consumer::Consumer<consumer::push::OrderedConfig>,
    start: Start,
    target: Option<u64>,
    leader: Option<(u64, u64)>,
    timeout: std::time::Duration,
    to: Handover<'_>,
) -> std::result::Result<(), String> {
    let Handover {
        tx,
        permits,
        handed,
    } = to;
    let nothing_after = match (target, start) {
        (Some(last), Start::Header) => last == 0,
        (Some(last), Start::After(seq)) => last <= seq,
        (None, _) => consumer.cached_info().num_pending == 0,
    };
    if nothing_after {
        let _ = tx.send(match start {
            Start::Header => Piece::Missing(String::new()),
            Start::After(_) => Piece::End,
        });
        return Ok(());
    }
    let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
    let mut bytes = Vec::with_capacity(CHUNK_BYTES + 4096);
    let mut seqs = Vec::new();
    let mut first = matches!(start, Start::Header);
    loop {
        let message = match tokio::time::timeout(timeout, messages.next()).await {
            Ok(Some(Ok(message))) => message,
            Ok(Some(Err(e))) => return Err(e.to_string()),
            Ok(None) => return Err("the consumer ended".to_owned()),
            Err(_) => return Err(format!("no message within {} ms", timeout.as_millis())),
        };
        let (stream_seq, pending) = position(&message)?;
        // The end of the read: the consumer has nothing more — on a clustered stream, once it
        // delivered the leader's last message of the subject.
        let end = match target {
            Some(last) => stream_seq >= last,
            None => pending == 0,
        };
        if first {
            first = false;
            let declared = message
                .headers
                .as_ref()
                .and_then(|h| h.get(FIRST_EVENTS_HEADER))
                .and_then(|v| v.as_str().parse::<u64>().ok())
                .unwrap_or(0);
            let stored = leader.map_or(pending, |(_, count)| count.saturating_sub(1));
            if declared > stored {
                let _ = tx.send(Piece::Missing(format!(
                    "its creation is unfinished: {stored} of its first {declared} events are stored"
                )));
                return Ok(());
            }
        }
        let payload = &message.payload;
        let bad = memchr::memchr(b'\n', payload).is_some();
        if !bad {
            bytes.extend_from_slice(payload);
            bytes.push(b'\n');
            seqs.push(stream_seq);
        }
        if bad || end || bytes.len() >= CHUNK_BYTES {
            if !seqs.is_empty() {
                permits.acquire().await.map_err(|e| e.to_string())?.forget();
                let full = std::mem::replace(&mut bytes, Vec::with_capacity(CHUNK_BYTES + 4096));
                if tx
                    .send(Piece::Lines {
                        bytes: full,
                        seqs: std::mem::take(&mut seqs),
                    })
                    .is_err()
                {
                    return Ok(()); // The reader is gone.
                }
                *handed = true;
            }
            if bad {
                let _ = tx.send(Piece::BadMessage { stream_seq });
                return Ok(());
            }
            if end {
                let _ = tx.send(Piece::End);
                return Ok(());
            }
        }
    }
}

/// A delivered message's stream sequence and the consumer's pending count, from its reply
/// subject (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.
/// <pending>`, or with a domain and an account hash first and a token after, ADR-15) — the
/// two numbers a read needs, without the library's parse of every field (the publication
/// time among them) for each of a log's messages.
pub(crate) fn position(message: &jetstream::Message) -> std::result::Result<(u64, u64), String> {
    let reply = message.reply.as_deref().unwrap_or_default();
    position_of(reply)
        .ok_or_else(|| format!("a delivered message without its stream position ({reply:?})"))
}

/// [`position`] of a reply subject.
fn position_of(reply: &str) -> Option<(u64, u64)> {
    let rest = reply.strip_prefix("$JS.ACK.")?;
    let mut tokens = [""; 10];
    let mut count = 0;
    for token in rest.split('.').take(tokens.len()) {
        tokens[count] = token;
        count += 1;
    }
    let (seq, pending) = match count {
        7 => (tokens[3], tokens[6]),
        n if n >= 9 => (tokens[5], tokens[8]),
        _ => return None,
    };
    Some((seq.parse().ok()?, pending.parse().ok()?))
}

/// What a read from the header found besides its summary: the stream sequences of the last
/// valid message and of every message after it (the unfinished tail).
pub(crate) struct Ends {
    /// Stream sequence of the last valid message (the header when there are no events).
    pub(crate) last_valid: u64,
    /// Stream sequences of the messages after it.
    pub(crate) tail: Vec<u64>,
}

/// Reads session `id` from its header with `scan` and remembers where it ended.
fn read_from_header(
    inner: &Inner,
    id: &SessionId,
    scan: &mut dyn FnMut(&Path, &mut MessageReader) -> Result<ScanSummary>,
) -> Result<(ScanSummary, Ends)> {
    let subject = inner.subject(id)?;
    let path = inner.location(id);
    let mut reader = feed(inner, subject, Start::Header);
    if let Some(header_id) = reader.header_id()
        && header_id != id.as_str()
    {
        return Err(JournalError::Corrupt {
            path,
            line: 1,
            offset: 0,
            reason: format!("header names session {header_id} but the subject is {id}'s"),
        });
    }
    let scanned = scan(&path, &mut reader);
    let summary = reader.finish(inner, id, &path, scanned)?;
    let mut seqs = reader.seqs_from(summary.next_seq.0).into_iter();
    let last_valid = seqs
        .next()
        .ok_or_else(|| inner.io("read", "the end of the valid prefix was not remembered"))?;
    inner.remember(id, summary.position(), last_valid);
    Ok((
        summary,
        Ends {
            last_valid,
            tail: seqs.collect(),
        },
    ))
}

pub(crate) fn read_each(
    inner: &Inner,
    id: &SessionId,
    on_event: &mut dyn FnMut(Event),
) -> Result<(ScanSummary, Ends)> {
    read_from_header(inner, id, &mut |path, reader| {
        scan_each(path, reader, &mut *on_event)
    })
}

pub(crate) fn read_selected_each(
    inner: &Inner,
    id: &SessionId,
    check: LineCheck,
    select: &dyn Fn(&str) -> bool,
    on_selected: &mut dyn FnMut(Selected<'_>) -> LineUse,
) -> Result<ScanSummary> {
    read_from_header(inner, id, &mut |path, reader| {
        scan_selected_each(path, reader, check, select, &mut *on_selected)
    })
    .map(|(summary, _)| summary)
}

pub(crate) fn read_each_from(
    inner: &Inner,
    id: &SessionId,
    from: ScanPosition,
    on_event: &mut dyn FnMut(Event),
) -> Result<ScanTail> {
    let Some(after) = inner.recall(id, from) else {
        // A position this backend did not hand out (or forgot): read the whole session and
        // skip what was read before.
        let mut skipped = Vec::new();
        let (summary, _) = read_each(inner, id, &mut |e| {
            if e.seq >= from.next_seq {
                if !e.is_known() {
                    skipped.push(e.seq);
                }
                on_event(e);
            }
        })?;
        if summary.next_seq < from.next_seq || summary.valid_len < from.offset {
            return Err(JournalError::Corrupt {
                path: inner.location(id),
                line: summary.next_seq.0 + 2,
                offset: summary.valid_len,
                reason: format!(
                    "the session now holds {} events ({} bytes), fewer than the {} already read \
                     (was it replaced?)",
                    summary.next_seq, summary.valid_len, from.next_seq
                ),
            });
        }
        return Ok(ScanTail {
            next: summary.position(),
            skipped,
            torn_tail: summary.torn_tail,
        });
    };
    let subject = inner.subject(id)?;
    let path = inner.location(id);
    let mut reader = feed(inner, subject, Start::After(after));
    let scanned = scan_events(&path, &mut reader, from, on_event);
    let tail = reader.finish(inner, id, &path, scanned)?;
    let new = tail.next.next_seq.0 - from.next_seq.0;
    let last_valid = match new {
        0 => after,
        n => reader
            .seq_of(n - 1)
            .ok_or_else(|| inner.io("read", "the end of the valid prefix was not remembered"))?,
    };
    inner.remember(id, tail.next, last_valid);
    Ok(tail)
}

/// One subject's state, for creation.
pub(crate) enum SubjectState {
    /// No message.
    Empty,
    /// A header whose first append is not wholly stored (a creator died half-way).
    Unfinished,
    /// A session.
    Session,
}

/// The messages stored on `subject` and the first one's declared first-append size.
async fn subject_count(
    stream: &jetstream::stream::Stream<()>,
    subject: &str,
) -> std::result::Result<u64, String> {
    let mut info = stream
        .info_with_subjects(subject)
        .await
        .map_err(|e| e.to_string())?;
    let mut count = 0;
    while let Some(entry) = info.next().await {
        let (s, n) = entry.map_err(|e| e.to_string())?;
        if s == subject {
            count = n as u64;
        }
    }
    Ok(count)
}

fn declared_first_events(message: &jetstream::message::StreamMessage) -> u64 {
    message
        .headers
        .get(FIRST_EVENTS_HEADER)
        .and_then(|v| v.as_str().parse().ok())
        .unwrap_or(0)
}

pub(crate) async fn subject_state(
    js: &jetstream::Context,
    stream: &str,
    subject: &str,
) -> std::result::Result<SubjectState, String> {
    let stream = js
        .get_stream_no_info(stream)
        .await
        .map_err(|e| e.to_string())?;
    let count = subject_count(&stream, subject).await?;
    if count == 0 {
        return Ok(SubjectState::Empty);
    }
    let first = stream
        .get_first_raw_message_by_subject(subject, 0)
        .await
        .map_err(|e| e.to_string())?;
    Ok(if count - 1 < declared_first_events(&first) {
        SubjectState::Unfinished
    } else {
        SubjectState::Session
    })
}

/// Parses a session's first message as its header line and checks that it names `id`.
fn parse_header(path: &Path, id: &SessionId, payload: &[u8]) -> Result<SessionHeader> {
    let mut line = payload.to_vec();
    line.push(b'\n');
    let summary = scan_each(path, &line[..], &mut |_| {})?;
    if &summary.header.id == id {
        Ok(summary.header)
    } else {
        Err(JournalError::Corrupt {
            path: path.to_path_buf(),
            line: 1,
            offset: 0,
            reason: format!(
                "header names session {} but the subject is {id}'s",
                summary.header.id
            ),
        })
    }
}

/// The header of session `id` from its first message alone.
pub(crate) fn header(inner: &Inner, id: &SessionId) -> Result<SessionHeader> {
    let subject = inner.subject(id)?;
    let path = inner.location(id);
    let js = inner.js.clone();
    let stream = inner.options.stream.clone();
    let first = inner.call(async move {
        let stream = js
            .get_stream_no_info(&stream)
            .await
            .map_err(|e| e.to_string())?;
        let count = subject_count(&stream, &subject).await?;
        if count == 0 {
            return Ok(None);
        }
        let first = stream
            .get_first_raw_message_by_subject(&subject, 0)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(Some((count, first)))
    })?;
    let missing = |why: &str| JournalError::NotFound {
        id: missing_id(id, why),
        path: path.clone(),
    };
    match first.map_err(|e| inner.io("read a session header", e))? {
        None => Err(missing("")),
        Some((count, first)) if count - 1 < declared_first_events(&first) => {
            Err(missing("its creation is unfinished"))
        }
        Some((_, first)) => parse_header(&path, id, &first.payload),
    }
}

/// The session's valid prefix as its joined payloads (see [`troupe_journal::SessionImage`]).
pub(crate) fn read_image(inner: &Inner, id: &SessionId) -> Result<SessionImage> {
    let subject = inner.subject(id)?;
    let path = inner.location(id);
    let mut reader = feed(inner, subject, Start::Header);
    let mut bytes = Vec::new();
    let scanned = reader
        .read_to_end(&mut bytes)
        .map_err(|e| inner.io("read", e))
        .and_then(|_| SessionImage::from_bytes(&path, bytes));
    let image = reader.finish(inner, id, &path, scanned)?;
    if image.id() != id {
        return Err(JournalError::Corrupt {
            path,
            line: 1,
            offset: 0,
            reason: format!(
                "header names session {} but the subject is {id}'s",
                image.id()
            ),
        });
    }
    Ok(image)
}

pub(crate) fn list(
    inner: &Inner,
    on_error: &mut dyn FnMut(JournalError),
) -> Result<Vec<SessionListing>> {
    let js = inner.js.clone();
    let stream = inner.options.stream.clone();
    let firsts = inner.call(async move {
        let stream = js
            .get_stream_no_info(&stream)
            .await
            .map_err(|e| e.to_string())?;
        let mut info = stream
            .info_with_subjects(SESSION_SUBJECTS)
            .await
            .map_err(|e| e.to_string())?;
        let mut subjects = Vec::new();
        while let Some(entry) = info.next().await {
            subjects.push(entry.map_err(|e| e.to_string())?);
        }
        let stream = &stream;
        let firsts: Vec<_> = futures_util::stream::iter(subjects)
            .map(|(subject, count)| async move {
                let first = stream.get_first_raw_message_by_subject(&subject, 0).await;
                (subject, count as u64, first.map_err(|e| e.to_string()))
            })
            .buffer_unordered(16)
            .collect()
            .await;
        Ok::<_, String>(firsts)
    })?;
    let firsts = firsts.map_err(|e| inner.io("list the sessions", e))?;
    let mut out = Vec::new();
    for (subject, count, first) in firsts {
        let name = subject
            .strip_prefix(SESSION_SUBJECT_PREFIX)
            .unwrap_or(&subject);
        let id = match SessionId::new(name) {
            Ok(id) => id,
            Err(e) => {
                on_error(JournalError::Corrupt {
                    path: format!("{}/{}/{subject}", inner.url, inner.options.stream).into(),
                    line: 1,
                    offset: 0,
                    reason: e.to_string(),
                });
                continue;
            }
        };
        let path = inner.location(&id);
        let first = match first {
            Ok(first) => first,
            Err(e) => {
                on_error(inner.io("read a session header", e));
                continue;
            }
        };
        if count - 1 < declared_first_events(&first) {
            continue; // Being created, or its creator died half-way: not a session yet.
        }
        let header = parse_header(&path, &id, &first.payload);
        match header {
            Ok(header) => out.push(SessionListing {
                header,
                location: path,
            }),
            Err(e) => on_error(e),
        }
    }
    out.sort_by(|a, b| {
        (a.header.created_at, a.header.id.as_str())
            .cmp(&(b.header.created_at, b.header.id.as_str()))
    });
    Ok(out)
}

/// The session named in a `SESSION_NOT_FOUND` error: the id, with why it is not a session when
/// there is more to say than that nothing is stored under it (`why` empty), e.g. `s (its
/// creation is unfinished)`.
pub(crate) fn missing_id(id: &impl std::fmt::Display, why: &str) -> String {
    if why.is_empty() {
        id.to_string()
    } else {
        format!("{id} ({why})")
    }
}

#[cfg(test)]
mod tests {
    use super::position_of;

    #[test]
    fn a_reply_subject_gives_the_stream_sequence_and_the_pending_count() {
        // The 9-token form, and the form with a domain and account hash (and a token).
        assert_eq!(
            position_of("$JS.ACK.TROUPE.c1.1.4242.17.1764000000000000000.9"),
            Some((4242, 9))
        );
        assert_eq!(
            position_of("$JS.ACK._.ACCHASH.TROUPE.c1.1.4242.17.1764000000000000000.0.rnd"),
            Some((4242, 0))
        );
        assert_eq!(
            position_of("$JS.ACK.hub.ACCHASH.TROUPE.c1.2.7.3.1764000000000000000.5"),
            Some((7, 5))
        );
        for bad in [
            "",
            "_INBOX.x",
            "$JS.ACK.TROUPE.c1.1.x.17.1764000000000000000.9",
            "$JS.ACK.TROUPE.c1.1.4242.17.1764000000000000000",
        ] {
            assert_eq!(position_of(bad), None, "{bad}");
        }
    }
}
