//! The writer actor: one thread per open session owns its [`SessionSink`].
//!
//! Callers [`SessionWriter::append`] in memory (seq and time assigned at once, nothing
//! written) and [`SessionWriter::flush`] to make everything appended so far durable. The
//! actor takes every pending event and every waiting flush in one round and makes them durable
//! with one sink append (one fsync): concurrent flushes share one fsync (group commit). A flush
//! resolves only when every event appended before the call is durable.
//!
//! A failed sink append poisons the writer: pending events are dropped (they were never
//! acknowledged), the sink has rolled the file back to its last durable length, and every later
//! append or flush fails with `JOURNAL_POISONED` (`JOURNAL_LEASE_LOST` when the sink reported
//! the loss of its lease on a shared store).
//!
//! On a sink that keeps appends in flight ([`SessionSink::pipeline`], the NATS store) the
//! actor does not wait for a round before sending the next: a flush requested while rounds
//! are in flight sends the events pending then at once (up to the pipeline's depth), and each
//! round's flushes are answered once it — and so every round before it — is stored. The
//! sink stores a prefix of what it was sent, so the log a crash leaves is the same as with
//! one round at a time: whole rounds, then at most one cut round whose cut batch is a torn
//! tail; a flush never returns before its events are stored.

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use tokio::sync::{Notify, oneshot, watch};
use troupe_protocol::sync::{lock, wait};
use troupe_protocol::{Clock, Event, EventDraft, Seq, SessionHeader, SessionId};

use crate::backend::{SessionSink, Settled};
use crate::error::{JournalError, Result};

/// A handle to one session's writer actor. Cheap to clone; all clones share the actor.
/// Dropping the last clone writes whatever is pending, stops the actor and releases the lock.
#[derive(Clone, Debug)]
pub struct SessionWriter {
    handle: Arc<Handle>,
}

#[derive(Debug)]
struct Handle {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug)]
struct Shared {
    header: SessionHeader,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    wake: Condvar,
    /// Also notified on every wake: a pipelined actor waiting for a round's acknowledgement
    /// listens here, to send the next round meanwhile ([`SessionSink::pipeline`]).
    kick: Arc<Notify>,
    durable_tx: watch::Sender<Seq>,
}

impl Shared {
    /// Wakes the actor wherever it waits: for work (the condvar) or for a round in flight.
    fn nudge(&self) {
        self.wake.notify_one();
        self.kick.notify_one();
    }
}

#[derive(Debug)]
struct State {
    /// The seq the next appended event gets.
    next_seq: u64,
    /// Appended, not yet handed to the sink.
    pending: Vec<Event>,
    /// Number of durable events (the next seq not yet durable).
    durable: u64,
    waiters: Vec<Waiter>,
    flush_requested: bool,
    /// The failure that poisoned the writer.
    failure: Option<Failure>,
    closing: bool,
    /// Set by [`SessionWriter::abandon`]: stop without writing pending events.
    abandoned: bool,
    /// Successful sink appends (one fsync each for JSONL).
    rounds: u64,
    /// Rounds sent while an earlier one was still in flight (pipelined sinks only).
    pipelined: u64,
    /// A pipelined actor is waiting for a round's acknowledgement with room to send another:
    /// a flush request wakes it through `kick`, not the condvar.
    settling: bool,
}

/// Counters of one writer, for tests and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriterStats {
    /// Successful durable sink appends so far (each is one write + one fsync for JSONL, so
    /// flushes per round > 1 means group commit is working).
    pub rounds: u64,
    /// Flush calls currently waiting for durability.
    pub waiting_flushes: usize,
    /// Events appended but not yet handed to the sink.
    pub pending_events: usize,
    /// Rounds sent while an earlier round was still awaiting its acknowledgement (only on a
    /// pipelined sink, [`crate::SessionSink::pipeline`]; 0 on the JSONL store).
    pub pipelined_rounds: u64,
}

/// What poisoned a writer: the sink's error as text, and whether it was the loss of the
/// session's lease (reported as `JOURNAL_LEASE_LOST` instead of `JOURNAL_POISONED`).
#[derive(Debug, Clone)]
struct Failure {
    cause: String,
    lease_lost: bool,
}

impl Failure {
    fn of(error: &JournalError) -> Self {
        match error {
            JournalError::LeaseLost { reason, .. } => Failure {
                cause: reason.clone(),
                lease_lost: true,
            },
            other => Failure {
                cause: other.to_string(),
                lease_lost: false,
            },
        }
    }

    fn error(&self, id: &SessionId) -> JournalError {
        if self.lease_lost {
            JournalError::LeaseLost {
                id: id.clone(),
                reason: self.cause.clone(),
            }
        } else {
            JournalError::Poisoned {
                id: id.clone(),
                cause: self.cause.clone(),
            }
        }
    }
}

#[derive(Debug)]
struct Waiter {
    target: u64,
    tx: oneshot::Sender<Result<Seq>>,
}

enum FlushTicket {
    Done(Seq),
    Wait(oneshot::Receiver<Result<Seq>>),
}

impl SessionWriter {
    /// Starts the actor for `sink`, whose log currently holds `sink.next_seq()` durable events,
    /// with `pending` events already appended (in memory) after them — for example a fork seed.
    /// `pending[i].seq` must be `sink.next_seq() + i`.
    ///
    /// # Errors
    /// `JOURNAL_INVALID_BATCH` when `pending` is not contiguous from the sink's next seq;
    /// `JOURNAL_IO` when the actor thread cannot be started.
    pub fn start(
        sink: Box<dyn SessionSink>,
        pending: Vec<Event>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        let header = sink.header().clone();
        let durable = sink.next_seq().0;
        for (i, e) in pending.iter().enumerate() {
            if e.seq.0 != durable + i as u64 {
                return Err(JournalError::InvalidBatch {
                    id: header.id.clone(),
                    reason: format!("pending event {i} has seq {}", e.seq),
                });
            }
        }
        let (durable_tx, _) = watch::channel(Seq(durable));
        let shared = Arc::new(Shared {
            header,
            clock,
            state: Mutex::new(State {
                next_seq: durable + pending.len() as u64,
                pending,
                durable,
                waiters: Vec::new(),
                flush_requested: false,
                failure: None,
                closing: false,
                abandoned: false,
                rounds: 0,
                pipelined: 0,
                settling: false,
            }),
            wake: Condvar::new(),
            kick: Arc::new(Notify::new()),
            durable_tx,
        });
        let actor = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("journal-{}", shared.header.id))
            .spawn(move || run(&actor, sink))
            .map_err(|e| JournalError::io("spawn writer for", shared.header.id.as_str(), e))?;
        Ok(Self {
            handle: Arc::new(Handle {
                shared,
                thread: Mutex::new(Some(thread)),
            }),
        })
    }

    /// The session's id.
    pub fn id(&self) -> &SessionId {
        &self.handle.shared.header.id
    }

    /// The session's header.
    pub fn header(&self) -> &SessionHeader {
        &self.handle.shared.header
    }

    /// The seq the next appended event will get (= number of events appended so far,
    /// durable or not).
    pub fn next_seq(&self) -> Seq {
        Seq(lock(&self.handle.shared.state).next_seq)
    }

    /// The number of durable events: every event with a smaller seq survives a crash.
    pub fn durable_seq(&self) -> Seq {
        Seq(lock(&self.handle.shared.state).durable)
    }

    /// Current counters (see [`WriterStats`]).
    pub fn stats(&self) -> WriterStats {
        let st = lock(&self.handle.shared.state);
        WriterStats {
            rounds: st.rounds,
            waiting_flushes: st.waiters.len(),
            pending_events: st.pending.len(),
            pipelined_rounds: st.pipelined,
        }
    }

    /// A watch of [`SessionWriter::durable_seq`], updated after each successful flush round.
    /// Waiters woken through it only ever see durable events (DESIGN decision 5).
    pub fn subscribe_durable(&self) -> watch::Receiver<Seq> {
        self.handle.shared.durable_tx.subscribe()
    }

    /// Appends one event in memory and returns it as stored (seq and time assigned). Nothing
    /// is written until a flush.
    ///
    /// # Errors
    /// `JOURNAL_INVALID_EVENT` for an unknown required type, a malformed type or a payload
    /// nested deeper than [`crate::MAX_DATA_DEPTH`] (nothing is appended);
    /// `JOURNAL_POISONED` after a failed flush (`JOURNAL_LEASE_LOST` when it failed because the
    /// lease was lost); `JOURNAL_CLOSED` after
    /// [`SessionWriter::close`] or [`SessionWriter::abandon`].
    pub fn append(&self, draft: EventDraft) -> Result<Event> {
        let mut events = self.append_batch(vec![draft])?;
        events.pop().ok_or_else(|| JournalError::Closed {
            id: self.id().clone(),
        })
    }

    /// Appends several events with consecutive seqs as one **batch** (DESIGN decision 9): no
    /// other append comes between them, and replay uses them all or none — a crash or power
    /// loss in the middle of writing them leaves no part of the batch in the log (the first
    /// event of a batch of two or more carries `batchLast`, see [`Event`]). Anything that must
    /// be atomic on replay (a turn's start with its claim, a claim's removal and its message)
    /// must be appended with one call.
    ///
    /// # Errors
    /// As [`SessionWriter::append`]; `JOURNAL_INVALID_BATCH` for more than
    /// [`crate::MAX_BATCH_EVENTS`] drafts (nothing is appended).
    pub fn append_batch(&self, drafts: Vec<EventDraft>) -> Result<Vec<Event>> {
        self.append_batch_inner(drafts, None)
    }

    /// Like [`SessionWriter::append_batch`] but stamps every event with `time_ms` instead of
    /// the clock — for deterministic records such as crash-recovery closers, which carry the
    /// time of the last real event (REFERENCE a.9).
    ///
    /// # Errors
    /// As [`SessionWriter::append`].
    pub fn append_batch_at(&self, drafts: Vec<EventDraft>, time_ms: u64) -> Result<Vec<Event>> {
        self.append_batch_inner(drafts, Some(time_ms))
    }

    fn append_batch_inner(&self, drafts: Vec<EventDraft>, at: Option<u64>) -> Result<Vec<Event>> {
        // Refuse before anything changes: a refused batch appends nothing.
        if let Some(reason) = drafts.iter().find_map(crate::validate::refusal) {
            return Err(JournalError::InvalidEvent {
                id: self.id().clone(),
                reason,
            });
        }
        if drafts.len() as u64 > crate::MAX_BATCH_EVENTS {
            return Err(JournalError::InvalidBatch {
                id: self.id().clone(),
                reason: format!(
                    "{} events in one batch (at most {} are allowed)",
                    drafts.len(),
                    crate::MAX_BATCH_EVENTS
                ),
            });
        }
        let shared = &self.handle.shared;
        let mut st = lock(&shared.state);
        self.check_open(&st)?;
        let time = at.unwrap_or_else(|| shared.clock.now_ms());
        let mut out = Vec::with_capacity(drafts.len());
        // DESIGN decision 9: the first event of a batch of several names the seq of its last,
        // so replay uses the batch whole or not at all.
        let batch_last = (drafts.len() > 1).then(|| Seq(st.next_seq + drafts.len() as u64 - 1));
        for (i, draft) in drafts.into_iter().enumerate() {
            let mut event = draft.into_event(Seq(st.next_seq), time);
            if i == 0 {
                event.batch_last = batch_last;
            }
            st.next_seq += 1;
            st.pending.push(event.clone());
            out.push(event);
        }
        Ok(out)
    }

    fn check_open(&self, st: &State) -> Result<()> {
        if let Some(failure) = &st.failure {
            return Err(failure.error(self.id()));
        }
        if st.closing {
            return Err(JournalError::Closed {
                id: self.id().clone(),
            });
        }
        Ok(())
    }

    fn request_flush(&self) -> Result<FlushTicket> {
        let shared = &self.handle.shared;
        let mut st = lock(&shared.state);
        self.check_open(&st)?;
        let target = st.next_seq;
        if st.durable >= target {
            return Ok(FlushTicket::Done(Seq(st.durable)));
        }
        let (tx, rx) = oneshot::channel();
        st.waiters.push(Waiter { target, tx });
        st.flush_requested = true;
        let settling = st.settling;
        drop(st);
        if settling {
            shared.kick.notify_one();
        } else {
            shared.wake.notify_one();
        }
        Ok(FlushTicket::Wait(rx))
    }

    /// Makes every event appended before this call durable (write + fdatasync; see the module
    /// docs for group commit). Returns the durable seq reached.
    ///
    /// # Errors
    /// `JOURNAL_POISONED` (or `JOURNAL_LEASE_LOST`, see [`SessionWriter::append`]) when this or
    /// an earlier flush failed (the failure's cause is in the
    /// message); `JOURNAL_CLOSED` when the writer stopped first.
    pub async fn flush(&self) -> Result<Seq> {
        match self.request_flush()? {
            FlushTicket::Done(seq) => Ok(seq),
            FlushTicket::Wait(rx) => rx.await.map_err(|_| JournalError::Closed {
                id: self.id().clone(),
            })?,
        }
    }

    /// [`SessionWriter::flush`] for synchronous callers. Must not be called from inside an
    /// async task (it blocks the thread).
    ///
    /// # Errors
    /// As [`SessionWriter::flush`].
    pub fn flush_blocking(&self) -> Result<Seq> {
        match self.request_flush()? {
            FlushTicket::Done(seq) => Ok(seq),
            FlushTicket::Wait(rx) => rx.blocking_recv().map_err(|_| JournalError::Closed {
                id: self.id().clone(),
            })?,
        }
    }

    /// Flushes everything appended so far, then stops the actor and releases the session
    /// file (and its lock) even while other clones of this handle exist; their later appends
    /// and flushes fail with `JOURNAL_CLOSED`. Closing a closed writer is a no-op.
    ///
    /// # Errors
    /// As [`SessionWriter::flush`] (the writer is stopped either way).
    pub async fn close(&self) -> Result<Seq> {
        let flushed = match self.flush().await {
            Err(JournalError::Closed { .. }) => Ok(self.durable_seq()),
            other => other,
        };
        lock(&self.handle.shared.state).closing = true;
        self.handle.shared.nudge();
        // Nothing is pending any more, so the actor exits at once; the join is immediate.
        self.handle.join();
        flushed
    }

    /// Stops the actor *without* writing pending events, as a crash would, and waits for it to
    /// release the file. For crash tests: events appended but not flushed are lost.
    pub fn abandon(self) {
        {
            let mut st = lock(&self.handle.shared.state);
            st.abandoned = true;
            st.closing = true;
            st.pending.clear();
        }
        self.handle.shared.nudge();
        self.handle.join();
    }
}

impl Handle {
    fn join(&self) {
        let thread = lock(&self.thread).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        lock(&self.shared.state).closing = true;
        self.shared.nudge();
        self.join();
    }
}

/// The actor loop: wait for a flush request (or close), make everything pending durable in one
/// sink append, then answer every waiter that append satisfied.
fn run(shared: &Shared, mut sink: Box<dyn SessionSink>) {
    if sink.pipeline().is_some_and(|p| p.depth() > 1) {
        return run_pipelined(shared, sink);
    }
    loop {
        let (batch, first, end, closing) = {
            let mut st = lock(&shared.state);
            while !st.flush_requested && !st.closing {
                st = wait(&shared.wake, st);
            }
            if st.abandoned || st.failure.is_some() {
                fail_waiters(&mut st, &shared.header.id);
                return;
            }
            st.flush_requested = false;
            let batch = std::mem::take(&mut st.pending);
            (batch, st.durable, st.next_seq, st.closing)
        };
        let result = if batch.is_empty() {
            Ok(())
        } else {
            sink.append(Seq(first), &batch)
        };
        let mut st = lock(&shared.state);
        match result {
            Ok(()) => {
                if !batch.is_empty() {
                    st.rounds += 1;
                }
                settle_waiters(shared, &mut st, end);
            }
            Err(e) => {
                poison(shared, &mut st, &e);
                return;
            }
        }
        if closing && st.pending.is_empty() {
            fail_waiters(&mut st, &shared.header.id);
            return;
        }
    }
}

/// The actor loop on a pipelined sink (see the module docs): send what a flush asks for as
/// soon as the pipeline has room, otherwise wait for the oldest round in flight (or for a new
/// flush request, which may be sent meanwhile).
fn run_pipelined(shared: &Shared, mut sink: Box<dyn SessionSink>) {
    enum Step {
        Send(Vec<Event>, Seq),
        Settle,
    }
    // The seq after the last event sent to the sink.
    let mut sent = lock(&shared.state).durable;
    let never = Arc::new(Notify::new());
    loop {
        let Some(pipe) = sink.pipeline() else {
            return;
        };
        let (depth, in_flight) = (pipe.depth(), pipe.in_flight());
        let step = {
            let mut st = lock(&shared.state);
            loop {
                if st.abandoned || st.failure.is_some() {
                    // Rounds still in flight are left to their fate, as in a crash.
                    fail_waiters(&mut st, &shared.header.id);
                    return;
                }
                let wanted = st.flush_requested || st.closing;
                if wanted && !st.pending.is_empty() && in_flight < depth {
                    st.flush_requested = false;
                    if in_flight > 0 {
                        st.pipelined += 1;
                    }
                    break Step::Send(std::mem::take(&mut st.pending), Seq(sent));
                }
                if in_flight > 0 {
                    st.settling = in_flight < depth;
                    break Step::Settle;
                }
                // Nothing in flight and nothing to send: every waiter was answered.
                st.flush_requested = false;
                if st.closing {
                    fail_waiters(&mut st, &shared.header.id);
                    return;
                }
                st = wait(&shared.wake, st);
            }
        };
        match step {
            Step::Send(batch, first) => {
                // The wake of the flush being served now is stale: drop it, or the next
                // settle would return at once for nothing.
                drain(&shared.kick);
                let end = first.0 + batch.len() as u64;
                if let Err(e) = pipe.send(first, &batch) {
                    poison(shared, &mut lock(&shared.state), &e);
                    return;
                }
                sent = end;
            }
            // A full pipeline has nothing to send until a round is stored: no wake then.
            Step::Settle => match pipe.settle(if in_flight < depth {
                &shared.kick
            } else {
                &never
            }) {
                Ok(Settled::Stored { next, rounds }) => {
                    let mut st = lock(&shared.state);
                    st.settling = false;
                    st.rounds += rounds;
                    settle_waiters(shared, &mut st, next.0);
                }
                Ok(Settled::Woken) => lock(&shared.state).settling = false,
                Err(e) => {
                    poison(shared, &mut lock(&shared.state), &e);
                    return;
                }
            },
        }
    }
}

/// Consumes a wake stored in `kick`, if any.
fn drain(kick: &Notify) {
    let mut notified = std::pin::pin!(kick.notified());
    let _ = notified
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
}

/// Every event before `end` is durable: publish it and answer the waiters it satisfies.
fn settle_waiters(shared: &Shared, st: &mut State, end: u64) {
    st.durable = end;
    shared.durable_tx.send_replace(Seq(end));
    let mut still_waiting = Vec::new();
    for waiter in std::mem::take(&mut st.waiters) {
        if waiter.target <= end {
            let _ = waiter.tx.send(Ok(Seq(end)));
        } else {
            still_waiting.push(waiter);
        }
    }
    st.waiters = still_waiting;
}

/// A sink append failed: the writer is poisoned, pending events are dropped (never
/// acknowledged) and every waiter fails.
fn poison(shared: &Shared, st: &mut State, e: &JournalError) {
    tracing::error!(session = %shared.header.id, error = %e, "journal writer poisoned");
    st.failure = Some(Failure::of(e));
    st.pending.clear();
    fail_waiters(st, &shared.header.id);
}

fn fail_waiters(st: &mut State, id: &SessionId) {
    for waiter in std::mem::take(&mut st.waiters) {
        let err = match &st.failure {
            Some(failure) => failure.error(id),
            None => JournalError::Closed { id: id.clone() },
        };
        let _ = waiter.tx.send(Err(err));
    }
}
