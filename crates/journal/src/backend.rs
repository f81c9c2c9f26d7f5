//! The log backend seam (DESIGN decision 8): what a storage engine for session logs must do.
//!
//! [`crate::SessionWriter`] (group commit, poisoning) runs on top of a [`SessionSink`]. Two
//! backends implement these traits: the JSONL files of [`crate::JsonlBackend`] (the default),
//! and the NATS JetStream store of the `troupe-store-nats` crate, whose `append` is a publish
//! fenced by the subject's expected last sequence and whose single-writer rule is a lease
//! (`JOURNAL_LOCKED` naming the holder; `JOURNAL_LEASE_LOST` when it is lost, which poisons the
//! writer with that code).

use std::sync::Arc;

use troupe_protocol::{Event, Seq, SessionHeader, SessionId};

use crate::error::{JournalError, Result};
use crate::image::SessionImage;
use crate::replay::{Replay, ScanPosition};

/// What a live follow ([`LogBackend::follow`]) calls whenever the store pushed something new
/// for the session followed. It runs on the backend's own threads, so it must return at once
/// (set a flag, notify a waiter); the follower then calls [`SessionFollow::poll`].
pub type Wake = Arc<dyn Fn() + Send + Sync>;

/// A session followed live, with the store pushing what is appended (no polling): made by
/// [`LogBackend::follow`]. Dropping it stops the follow.
pub trait SessionFollow: Send {
    /// Hands every valid event that arrived since the last call to `on_event`, in seq order,
    /// and returns where the follow now stands (the valid prefix read so far). The first
    /// successful call starts at the header, so it hands out the whole log. Only the first call
    /// waits: until the store delivered what the session held when the follow started (as a
    /// read would; bounded by the store's request timeout), so that `SESSION_NOT_FOUND` means
    /// not there at the start; later calls never wait.
    /// The rules are [`crate::scan_each`]'s: a batch is handed out only once it is whole; an
    /// unfinished write is simply not there yet.
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND` while the session does not exist yet or its first append is not
    /// wholly stored (a later call may find it); `JOURNAL_CORRUPT`, `JOURNAL_UNSUPPORTED`
    /// (the events before the damage are handed out first); `STORE_IO` when the store's
    /// consumer failed or the first catch-up timed out. After any error but
    /// `SESSION_NOT_FOUND` the follow is over: later calls hand out nothing and return the
    /// last position.
    fn poll(&mut self, on_event: &mut dyn FnMut(Event)) -> Result<ScanPosition>;

    /// The session's header, once a poll has read it.
    fn header(&self) -> Option<&SessionHeader>;
}

/// One session log opened for writing by exactly one writer.
pub trait SessionSink: Send {
    /// The session's header.
    fn header(&self) -> &SessionHeader;

    /// The seq the next durable append must start at.
    fn next_seq(&self) -> Seq;

    /// Durably appends a contiguous run of events (one group-commit round: one or more whole
    /// batches, see [`crate::SessionWriter::append_batch`]): returns only once every event of
    /// `events` survives a power loss. `expected` must equal [`SessionSink::next_seq`] and
    /// `events[i].seq` must be `expected + i`. Each event is stored as given, `batchLast`
    /// included, so that replay can tell a batch a crash cut short (DESIGN decision 9).
    ///
    /// The **first** append of a new session (header included) must become visible whole or
    /// not at all: a fork's seed is written there without batch framing.
    ///
    /// On failure nothing of the batch is considered written: the backend rolls back to its last
    /// durable state where it can (what it cannot roll back is an unfinished final write, which
    /// replay treats as the torn tail), and the caller must stop using this sink.
    ///
    /// # Errors
    /// `JOURNAL_SEQ_CONFLICT` when `expected` is not the stored next seq;
    /// `JOURNAL_INVALID_BATCH` when the seqs are not contiguous; `SESSION_ALREADY_EXISTS` when a
    /// new session's first append finds the id taken; `JOURNAL_IO` when a write or sync fails.
    fn append(&mut self, expected: Seq, events: &[Event]) -> Result<()>;

    /// This sink as a [`SessionPipeline`], when it can keep several appends in flight at once
    /// (a network log, where a round's wait is a round trip rather than the disk's). `None`
    /// (the default): the writer waits for each [`SessionSink::append`] before the next.
    fn pipeline(&mut self) -> Option<&mut dyn SessionPipeline> {
        None
    }
}

/// What [`SessionPipeline::settle`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Every event before seq `next` is stored, and so are the `rounds` appends sent that
    /// this settled (the oldest one in flight, or more after a failure was resolved).
    Stored {
        /// The seq after the last stored event.
        next: Seq,
        /// Appends ([`SessionPipeline::send`] calls) settled by this call (≥ 1).
        rounds: u64,
    },
    /// The wake fired before the oldest append in flight was stored: nothing settled.
    Woken,
}

/// A sink whose appends can be in flight together (see [`SessionSink::pipeline`]). The writer
/// sends a round while earlier ones still await their acknowledgement and answers a round's
/// flushes once it is stored, so one round's wait overlaps the next round's sending.
///
/// The contract: what the store holds of the appends sent is always a **prefix** of them in
/// the order sent (an append is never stored after one sent before it that is not), so a
/// crash at any point leaves the log of [`SessionSink::append`]'s rules — whole rounds, then at
/// most one round cut, whose cut batch is the torn tail replay drops. Nothing is reported
/// stored before it is ([`Settled::Stored`]). A failure of any append in flight poisons the
/// writer; the sink itself resolves and retries what it can (as its `append` would) before
/// reporting one.
pub trait SessionPipeline {
    /// The most appends this pipeline keeps in flight (≥ 2; 1 would be plain appends).
    fn depth(&self) -> usize;

    /// Appends sent and not yet settled.
    fn in_flight(&self) -> usize;

    /// Sends `events` (a group-commit round, as for [`SessionSink::append`]) after every append
    /// sent before, without waiting for it to be stored: `expected` is the seq after the last
    /// event sent. It may wait for earlier appends first where the store needs it (a new
    /// session's first append is sent alone).
    ///
    /// # Errors
    /// As [`SessionSink::append`]; the caller must stop using this sink.
    fn send(&mut self, expected: Seq, events: &[Event]) -> Result<()>;

    /// Waits until the oldest append in flight is stored ([`Settled::Stored`]) or `wake` is
    /// notified first ([`Settled::Woken`], also when a permit was already stored). Called with
    /// nothing in flight, returns `Woken`.
    ///
    /// # Errors
    /// As [`SessionSink::append`], for any append in flight (none of them is then reported
    /// stored); the caller must stop using this sink.
    fn settle(&mut self, wake: &Arc<tokio::sync::Notify>) -> Result<Settled>;
}

/// The preconditions of [`SessionSink::append`] every backend checks before it writes: `expected`
/// equals the sink's `next` seq and `events[i].seq` is `expected + i`.
///
/// # Errors
/// `JOURNAL_SEQ_CONFLICT` when `expected != next`; `JOURNAL_INVALID_BATCH` naming the first
/// event whose seq is out of line.
pub fn check_append(id: &SessionId, next: Seq, expected: Seq, events: &[Event]) -> Result<()> {
    if expected != next {
        return Err(crate::JournalError::SeqConflict {
            id: id.clone(),
            expected,
            actual: Some(next),
        });
    }
    for (i, event) in events.iter().enumerate() {
        let want = expected.0 + i as u64;
        if event.seq.0 != want {
            return Err(crate::JournalError::InvalidBatch {
                id: id.clone(),
                reason: format!("event {i} has seq {} where {want} was expected", event.seq),
            });
        }
    }
    Ok(())
}

/// A listing row: a session's header and where it lives.
#[derive(Debug, Clone)]
pub struct SessionListing {
    /// Line 1 of the session.
    pub header: SessionHeader,
    /// Where the session is stored (a file path for JSONL).
    pub location: std::path::PathBuf,
}

/// A store of session logs.
pub trait LogBackend: Send + Sync {
    /// Prepares a new session. Nothing is stored until the first append (a never-appended
    /// session leaves nothing behind).
    ///
    /// # Errors
    /// `SESSION_ALREADY_EXISTS` when the id is already stored.
    fn create(&self, header: SessionHeader) -> Result<Box<dyn SessionSink>>;

    /// Opens an existing session for writing: takes the single-writer lock, replays, and
    /// repairs a torn tail (truncates to [`Replay::valid_len`]).
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND`, `JOURNAL_NOT_A_FILE`, `JOURNAL_LOCKED`, `JOURNAL_CORRUPT`,
    /// `JOURNAL_UNSUPPORTED`, `JOURNAL_IO`.
    fn open(&self, id: &SessionId) -> Result<(Box<dyn SessionSink>, Replay)>;

    /// Reads a session without locking or repairing it; works while another process writes it.
    ///
    /// # Errors
    /// As [`LogBackend::open`] except `JOURNAL_LOCKED`.
    fn read(&self, id: &SessionId) -> Result<Replay>;

    /// Streams a session's valid events to `on_event` without keeping them, with the same
    /// rules and errors as [`LogBackend::read`]. The default collects through `read`; backends
    /// override it to keep memory bounded.
    ///
    /// # Errors
    /// As [`LogBackend::read`].
    fn read_each(
        &self,
        id: &SessionId,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<crate::ScanSummary> {
        let replay = self.read(id)?;
        let summary = crate::ScanSummary {
            header: replay.header,
            next_seq: Seq(replay.events.len() as u64),
            skipped: replay.skipped,
            torn_tail: replay.torn_tail,
            valid_len: replay.valid_len,
        };
        for e in replay.events {
            on_event(e);
        }
        Ok(summary)
    }

    /// Streams the valid events appended after `from` (a position an earlier read of the same
    /// session returned) to `on_event`, for readers that follow a session another process
    /// writes. The default re-reads the whole session and skips events before
    /// `from.next_seq`; backends override it to read only the new part.
    ///
    /// # Errors
    /// As [`LogBackend::read`]; see [`crate::read_path_each_from`] for the JSONL specifics.
    fn read_each_from(
        &self,
        id: &SessionId,
        from: crate::ScanPosition,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<crate::ScanTail> {
        let mut skipped = Vec::new();
        let summary = self.read_each(id, &mut |e| {
            if e.seq >= from.next_seq {
                if !e.is_known() {
                    skipped.push(e.seq);
                }
                on_event(e);
            }
        })?;
        Ok(crate::ScanTail {
            next: summary.position(),
            skipped,
            torn_tail: summary.torn_tail,
        })
    }

    /// The ids of every stored session, in no particular order (for resolving an id prefix,
    /// [`crate::Journal::resolve`]). The default lists the sessions with
    /// [`LogBackend::list`] (sessions whose header cannot be read are left out); backends
    /// override it to list ids without reading any session.
    ///
    /// # Errors
    /// As [`LogBackend::list`].
    fn ids(&self) -> Result<Vec<SessionId>> {
        Ok(self
            .list(&mut |_| {})?
            .into_iter()
            .map(|listing| listing.header.id)
            .collect())
    }

    /// A selective read of a session (see [`crate::scan_selected_each`]): the lines of the
    /// types `select` picks go to `on_selected`, other lines are checked as `check` says.
    /// Same rules and errors as [`LogBackend::read_each`]. The default reads every event
    /// through `read_each` and hands the selected ones out as [`crate::Selected::Event`];
    /// backends override it to skip parsing the others.
    ///
    /// # Errors
    /// As [`LogBackend::read`].
    fn read_selected_each(
        &self,
        id: &SessionId,
        check: crate::LineCheck,
        select: &dyn Fn(&str) -> bool,
        on_selected: &mut dyn FnMut(crate::Selected<'_>) -> crate::LineUse,
    ) -> Result<crate::ScanSummary> {
        let _ = check;
        self.read_each(id, &mut |event| {
            if select(&event.kind) {
                on_selected(crate::Selected::Event(event));
            }
        })
    }

    /// Every stored session's header, oldest first (ties by id). Unreadable entries are
    /// reported through `on_error` and left out.
    ///
    /// # Errors
    /// `JOURNAL_IO` when the store itself cannot be listed.
    fn list(&self, on_error: &mut dyn FnMut(crate::JournalError)) -> Result<Vec<SessionListing>>;

    /// A session's header alone. The default reads the whole session through
    /// [`LogBackend::read_each`]; backends override it to read line 1 only.
    ///
    /// # Errors
    /// As [`LogBackend::read`] (an override reports only damage to the header itself).
    fn header(&self, id: &SessionId) -> Result<SessionHeader> {
        self.read_each(id, &mut |_| {})
            .map(|summary| summary.header)
    }

    /// Who holds session `id`'s single-writer lock, where the store can tell without taking it:
    /// `Some(holder)` (e.g. `host build-1 pid 4242 …`, as [`crate::JournalError::Leased`]
    /// names it) while a writer — live, or dead and its lease not yet expired — holds it,
    /// `None` when it is free. The default (and the JSONL files, whose lock dies with its
    /// process, and which `troupe web` reads from the kernel's lock table) says `None`.
    ///
    /// # Errors
    /// `STORE_IO` when the store cannot be asked.
    fn holder(&self, id: &SessionId) -> Result<Option<String>> {
        let _ = id;
        Ok(None)
    }

    /// Follows session `id` live: the store pushes what is appended and calls `wake`, and the
    /// follower reads it with [`SessionFollow::poll`]. `Ok(None)` when the store cannot push
    /// (the default, and the JSONL files): the follower then reads again on its own schedule
    /// with [`LogBackend::read_each_from`]. Following needs no lock and never writes; a
    /// session that does not exist yet may be followed (polls say `SESSION_NOT_FOUND` until
    /// its first append is wholly stored).
    ///
    /// # Errors
    /// `STORE_IO` when the store refuses to start the follow; `STORE_MISCONFIGURED` for an id
    /// the store cannot name.
    fn follow(&self, id: &SessionId, wake: Wake) -> Result<Option<Box<dyn SessionFollow>>> {
        let _ = (id, wake);
        Ok(None)
    }

    /// The session's stored lines, byte for byte: its header line and every valid event line,
    /// each with its newline (the valid prefix; an unfinished final write is left out and
    /// reported in [`SessionImage::torn_tail`]). Read without locking, like
    /// [`LogBackend::read`]. For [`crate::Journal::copy_to`].
    ///
    /// The default refuses: a backend must hold the lines as they were written to give them.
    ///
    /// # Errors
    /// As [`LogBackend::read`]; `STORE_UNSUPPORTED` from the default.
    fn read_image(&self, id: &SessionId) -> Result<SessionImage> {
        Err(JournalError::StoreUnsupported {
            url: format!("the store of session {id}"),
            reason: "it cannot give a session's lines byte for byte".to_owned(),
        })
    }

    /// Stores `image` as a new session, line for line, as that session's first append: it
    /// becomes visible whole or not at all (what survives a crash part-way is the backend's
    /// first-append rule: nothing readable). Never overwrites.
    ///
    /// The default refuses: a backend must be able to store lines as given.
    ///
    /// # Errors
    /// `SESSION_ALREADY_EXISTS` when the id is taken; `JOURNAL_LOCKED` when another writer is
    /// creating it; the backend's write errors (`JOURNAL_IO`, `STORE_IO`);
    /// `STORE_UNSUPPORTED` from the default.
    fn import(&self, image: &SessionImage) -> Result<()> {
        Err(JournalError::StoreUnsupported {
            url: format!("the store for session {}", image.header().id),
            reason: "it cannot store a session's lines as given".to_owned(),
        })
    }
}
