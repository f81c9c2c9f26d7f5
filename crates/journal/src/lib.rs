//! Troupe's append-only session log (DESIGN §3, REFERENCE a.1–a.9).
//!
//! Every piece of Troupe state is a fold of a session log, so this crate is built to
//! storage-engine standards:
//! - **Writer actor** ([`SessionWriter`]): `append` is in memory; `flush` returns only when
//!   every earlier event is durable (write + `fdatasync`; the first flush of a new file also
//!   fsyncs the directory); concurrent flushes share one fsync (group commit).
//! - **Poisoning**: a failed write or fsync rolls the file back to its last durable length and
//!   every later append/flush fails with `JOURNAL_POISONED`.
//! - **Single writer**: an OS advisory lock per session file (`JOURNAL_LOCKED` for a second
//!   writer); readers take no lock and can read a file another process is writing.
//! - **Replay** ([`scan`]; streaming: [`scan_each`], and the selective [`scan_selected_each`]
//!   that parses only the lines of the types its reader wants): batches are used whole or not
//!   at all (DESIGN decision 9: the first event of a batch names its last, `batchLast`); an
//!   unfinished final write — a last line without newline, or a last batch the file ends inside
//!   — is a torn tail, ignored (and truncated only when opening for writing); any other damage
//!   is `JOURNAL_CORRUPT` with file, line and byte offset, never repaired; unknown format
//!   versions and unknown required event types are `JOURNAL_UNSUPPORTED`.
//! - **Fork** ([`Journal::fork`]): a new session seeded with a completed prefix of another.
//! - **Backend seam** ([`LogBackend`], [`SessionSink`]): append takes the expected next seq;
//!   stores that push appends give live follows ([`Journal::follow`], [`SessionFollow`]).
//! - **Copy** ([`Journal::copy_to`], [`SessionImage`]): a session moved between stores line
//!   for line, as the target's first append (whole or not at all).
//! - **Past points** ([`Journal::find_cut`], [`Journal::read_until`]): a log read up to a seq
//!   or a time, always at a batch boundary (time travel, `troupe team show --at`).
//!
//! Invariant: this crate is the only writer of session files, and it knows nothing of Team
//! semantics (only of turns, for corruption detection and fork boundaries).

mod backend;
mod cut;
mod error;
mod image;
mod jsonl;
mod locks;
mod replay;
mod validate;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use backend::{
    LogBackend, SessionFollow, SessionListing, SessionPipeline, SessionSink, Settled, Wake,
    check_append,
};
pub use cut::{At, Cut, CutSearch};
pub use error::{JournalError, Result};
pub use image::{CopyError, CopyOutcome, SessionImage};
pub use jsonl::{
    FaultHook, JsonlBackend, read_path, read_path_each, read_path_each_from,
    read_path_selected_each,
};
pub use locks::LockTable;
pub use replay::{
    EventLine, LineCheck, LineUse, MAX_BATCH_EVENTS, MAX_HEADER_LEN, Replay, ScanPosition,
    ScanSummary, ScanTail, Selected, TornTail, read_header, scan, scan_each, scan_events,
    scan_selected_each,
};
pub use validate::{MAX_DATA_DEPTH, MAX_TYPE_LEN};
pub use writer::{SessionWriter, WriterStats};

use troupe_protocol::{
    Clock, Event, EventDraft, Seq, SessionHeader, SessionId, SystemClock, event_types,
};

/// At most this many candidates are named by a [`JournalError::Ambiguous`] message.
pub const MAX_LISTED_CANDIDATES: usize = 10;

/// Why [`Journal::resolve`] could not name a session.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// `INVALID_SESSION_ID`: the text cannot be (the start of) a session id.
    #[error(transparent)]
    InvalidId(#[from] troupe_protocol::IdError),
    /// `SESSION_ID_AMBIGUOUS` or `JOURNAL_IO` (see [`Journal::resolve`]).
    #[error(transparent)]
    Journal(#[from] JournalError),
}

impl troupe_protocol::ErrorCode for ResolveError {
    fn code(&self) -> &'static str {
        match self {
            ResolveError::InvalidId(e) => e.code(),
            ResolveError::Journal(e) => e.code(),
        }
    }
}

/// The environment variable naming the Troupe home.
pub const HOME_ENV: &str = "TROUPE_HOME";

/// Resolves the Troupe home: `flag` if given, else `$TROUPE_HOME`, else `~/.troupe`.
///
/// Returns `None` only when neither is set and the user's home directory is unknown.
pub fn resolve_home(flag: Option<&Path>) -> Option<PathBuf> {
    if let Some(path) = flag {
        return Some(path.to_path_buf());
    }
    if let Some(home) = std::env::var_os(HOME_ENV).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(home));
    }
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(|h| PathBuf::from(h).join(".troupe"))
}

/// The session store: a [`LogBackend`] plus the clock that stamps events.
#[derive(Clone)]
pub struct Journal {
    backend: Arc<dyn LogBackend>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Journal {
    /// The JSONL store of a Troupe home: session files in `<home>/sessions/`, system clock.
    pub fn open_home(home: &Path) -> Self {
        Self::with_backend(
            Arc::new(JsonlBackend::new(home.join("sessions"))),
            Arc::new(SystemClock),
        )
    }

    /// A store over any backend and clock.
    pub fn with_backend(backend: Arc<dyn LogBackend>, clock: Arc<dyn Clock>) -> Self {
        Self { backend, clock }
    }

    /// This store with `clock` stamping its events (and telling its readers the time).
    #[must_use]
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        Self {
            backend: self.backend,
            clock,
        }
    }

    /// The clock stamping events.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Creates a new, empty session. Nothing is stored until the first flush with events.
    ///
    /// # Errors
    /// `SESSION_ALREADY_EXISTS`; `JOURNAL_IO` if the actor cannot start.
    pub fn create(&self, header: SessionHeader) -> Result<SessionWriter> {
        let sink = self.backend.create(header)?;
        SessionWriter::start(sink, Vec::new(), Arc::clone(&self.clock))
    }

    /// Creates a session seeded with `seed` (a contiguous prefix of another log starting at
    /// seq 0) followed by a `session/end-seed` marker unless the seed already ends with one
    /// (REFERENCE a.5). Sets `header.seed_length` to the seed's length. The events are
    /// appended, not yet flushed.
    ///
    /// # Errors
    /// `JOURNAL_INVALID_BATCH` when the seed's seqs are not `0..n`; `SESSION_ALREADY_EXISTS`.
    pub fn create_seeded(
        &self,
        mut header: SessionHeader,
        mut seed: Vec<Event>,
    ) -> Result<SessionWriter> {
        if let Some((i, e)) = seed.iter().enumerate().find(|(i, e)| e.seq.0 != *i as u64) {
            return Err(JournalError::InvalidBatch {
                id: header.id.clone(),
                reason: format!("seed event {i} has seq {}", e.seq),
            });
        }
        header.seed_length = (!seed.is_empty()).then_some(seed.len() as u64);
        // The seed is the new session's first write, which every backend publishes whole (the
        // JSONL file appears only once header and seed are durable), so it needs no batch
        // framing; the source's framing is dropped, since a batch of the source may reach past
        // the seed's end.
        for event in &mut seed {
            event.batch_last = None;
        }
        if seed
            .last()
            .is_some_and(|e| e.kind != event_types::SESSION_END_SEED)
        {
            let marker = EventDraft::new(event_types::SESSION_END_SEED, serde_json::json!({}))
                .into_event(Seq(seed.len() as u64), self.clock.now_ms());
            seed.push(marker);
        }
        let sink = self.backend.create(header)?;
        SessionWriter::start(sink, seed, Arc::clone(&self.clock))
    }

    /// Forks `source`: a new session `new_id` seeded with `source`'s events `0..=boundary`
    /// (default: all), with the source's `cwd`, `parentSession = source` and `seedLength`
    /// (REFERENCE a.5). Reads the source from storage (flush a live source first). The new
    /// session's events are appended, not yet flushed.
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND` (source), `INVALID_BOUNDARY` (boundary past the end),
    /// `OPEN_TURN` (the prefix ends inside a turn), `SESSION_ALREADY_EXISTS` (new id), and the
    /// read errors of [`Journal::read`].
    pub fn fork(
        &self,
        source: &SessionId,
        boundary: Option<Seq>,
        new_id: SessionId,
    ) -> Result<SessionWriter> {
        let replay = self.read(source)?;
        let len = replay.events.len() as u64;
        let end = match boundary {
            Some(b) if b.0 >= len => {
                return Err(JournalError::InvalidBoundary {
                    id: source.clone(),
                    boundary: b,
                    len,
                });
            }
            Some(b) => b.0 + 1,
            None => len,
        };
        let seed: Vec<Event> = replay.events.into_iter().take(end as usize).collect();
        if ends_inside_turn(&seed) {
            return Err(JournalError::OpenTurn {
                id: source.clone(),
                boundary: Seq(end.saturating_sub(1)),
            });
        }
        let mut header =
            SessionHeader::new(new_id, self.clock.now_ms()).with_parent(source.clone());
        header.cwd = replay.header.cwd;
        self.create_seeded(header, seed)
    }

    /// Opens an existing session for writing: lock, replay, torn-tail repair.
    ///
    /// # Errors
    /// See [`LogBackend::open`].
    pub fn open(&self, id: &SessionId) -> Result<(SessionWriter, Replay)> {
        let (sink, replay) = self.backend.open(id)?;
        let writer = SessionWriter::start(sink, Vec::new(), Arc::clone(&self.clock))?;
        Ok((writer, replay))
    }

    /// Reads a session without locking or repairing it.
    ///
    /// # Errors
    /// See [`LogBackend::read`].
    pub fn read(&self, id: &SessionId) -> Result<Replay> {
        self.backend.read(id)
    }

    /// Streams a session's events to `on_event` with bounded memory (no lock, no repair).
    ///
    /// # Errors
    /// See [`LogBackend::read`].
    pub fn read_each(
        &self,
        id: &SessionId,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<ScanSummary> {
        self.backend.read_each(id, on_event)
    }

    /// Streams the events appended to a session after `from` (a position an earlier read
    /// returned, e.g. [`ScanSummary::position`]) with no lock and no repair: how a reader
    /// follows a session that another process is writing.
    ///
    /// # Errors
    /// See [`LogBackend::read_each_from`].
    pub fn read_each_from(
        &self,
        id: &SessionId,
        from: ScanPosition,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<ScanTail> {
        self.backend.read_each_from(id, from, on_event)
    }

    /// A selective read of a session with bounded memory (no lock, no repair; see
    /// [`scan_selected_each`]): lines of the types `select` picks go to `on_selected`, the others
    /// are checked as `check` says and not parsed with [`LineCheck::Prefix`]. For readers that
    /// want few event types (the Team fold reads `team/…` lines only).
    ///
    /// # Errors
    /// See [`LogBackend::read`].
    pub fn read_selected_each(
        &self,
        id: &SessionId,
        check: LineCheck,
        select: &dyn Fn(&str) -> bool,
        on_selected: &mut dyn FnMut(Selected<'_>) -> LineUse,
    ) -> Result<ScanSummary> {
        self.backend
            .read_selected_each(id, check, select, on_selected)
    }

    /// The stored session that `raw` names: the session whose id is `raw`, else the only one
    /// whose id starts with `raw` (a prefix, as git takes a commit's; `troupe web` shows 8
    /// characters). When nothing matches, the id `raw` itself is returned, so the read that
    /// follows reports `SESSION_NOT_FOUND` with the path it looked for. Nothing is opened.
    ///
    /// # Errors
    /// `INVALID_SESSION_ID` when `raw` cannot be (the start of) an id; `SESSION_ID_AMBIGUOUS`
    /// ([`JournalError::Ambiguous`], listing the candidates) when several ids start with
    /// `raw` and none equals it; `JOURNAL_IO` when the sessions cannot be listed.
    pub fn resolve(&self, raw: &str) -> Result<SessionId, ResolveError> {
        let id = SessionId::new(raw)?;
        let mut candidates: Vec<SessionId> = self
            .backend
            .ids()?
            .into_iter()
            .filter(|c| c.as_str().starts_with(raw))
            .collect();
        if candidates.contains(&id) {
            return Ok(id);
        }
        candidates.sort();
        match candidates.len() {
            0 => Ok(id),
            1 => Ok(candidates.remove(0)),
            _ => Err(JournalError::Ambiguous {
                prefix: raw.to_owned(),
                candidates,
            }
            .into()),
        }
    }

    /// A session's header alone (line 1), without reading its events where the backend can.
    ///
    /// # Errors
    /// See [`LogBackend::header`].
    pub fn header(&self, id: &SessionId) -> Result<SessionHeader> {
        self.backend.header(id)
    }

    /// Follows a session live where the store pushes appends (NATS); `Ok(None)` where it
    /// cannot (the JSONL files: follow with [`Journal::read_each_from`]).
    ///
    /// # Errors
    /// See [`LogBackend::follow`].
    pub fn follow(&self, id: &SessionId, wake: Wake) -> Result<Option<Box<dyn SessionFollow>>> {
        self.backend.follow(id, wake)
    }

    /// Who holds the session's single-writer lock, where the store can tell (see
    /// [`LogBackend::holder`]).
    ///
    /// # Errors
    /// See [`LogBackend::holder`].
    pub fn holder(&self, id: &SessionId) -> Result<Option<String>> {
        self.backend.holder(id)
    }

    /// The session's stored lines, byte for byte (see [`LogBackend::read_image`]).
    ///
    /// # Errors
    /// See [`LogBackend::read_image`].
    pub fn read_image(&self, id: &SessionId) -> Result<SessionImage> {
        self.backend.read_image(id)
    }

    /// Copies session `id` from this store to `target` line for line (DESIGN §7, `troupe store
    /// copy`): the target's lines are byte for byte the source's valid prefix (an unfinished
    /// final write of the source is not copied and is reported in the outcome). Reads the
    /// source without locking it: a session another process is writing is copied as far as it
    /// is durable at that moment.
    ///
    /// **What survives a crash** (kill -9, power loss) part-way: the copy is the target's
    /// *first append* of the session, which every backend makes visible whole or not at all
    /// (the JSONL files: a staging file published with `link(2)` once fsynced; NATS: the header
    /// message declares how many events come with it, and a subject holding fewer is no
    /// session). So a session cut part-way does not exist on the target — never half of it —
    /// and copying it again stores it whole (the leftovers are removed: a dead process's
    /// staging file by the next writer of that home, an unfinished NATS creation by the next
    /// creator of the id). Sessions copied before the crash are whole. A target that already
    /// holds exactly these lines is left alone ([`CopyOutcome::AlreadyThere`]), so a copy can
    /// simply be run again.
    ///
    /// # Errors
    /// [`CopyError::Source`] (`SESSION_NOT_FOUND`, `JOURNAL_CORRUPT`, …: nothing is written),
    /// [`CopyError::Differs`] (`SESSION_ALREADY_EXISTS`: the target holds other lines under the
    /// id), [`CopyError::Target`] (the target's errors).
    pub fn copy_to(
        &self,
        id: &SessionId,
        target: &Journal,
    ) -> std::result::Result<CopyOutcome, CopyError> {
        image::copy(self.backend.as_ref(), target.backend.as_ref(), id)
    }

    /// Lists stored sessions, oldest first; unreadable ones go to `on_error`.
    ///
    /// # Errors
    /// See [`LogBackend::list`].
    pub fn list(&self, on_error: &mut dyn FnMut(JournalError)) -> Result<Vec<SessionListing>> {
        self.backend.list(on_error)
    }
}

/// Whether `events` ends inside an open turn: a `turn/start` after the last `turn/end`.
pub fn ends_inside_turn(events: &[Event]) -> bool {
    for e in events.iter().rev() {
        match e.kind.as_str() {
            event_types::TURN_END => return false,
            event_types::TURN_START => return true,
            _ => {}
        }
    }
    false
}
