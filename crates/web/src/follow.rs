//! Following one session while another process writes it: by reading again what was appended
//! (the JSONL files, on the panel's poll interval), or live where the store pushes appends
//! (NATS: an ordered consumer wakes the follower; nothing polls).

use troupe_journal::{Journal, JournalError, ScanPosition, SessionFollow, Wake};
use troupe_protocol::{Event, SessionHeader, SessionId};

/// How the follower gets what was appended.
enum Source {
    /// Read again from the last position ([`Journal::read_each_from`]) on every poll.
    Reads {
        header: Option<SessionHeader>,
        at: Option<ScanPosition>,
    },
    /// A live follow ([`Journal::follow`]): the store pushed what a poll hands out.
    Live(Box<dyn SessionFollow>),
}

/// Reads a session incrementally: the first [`Follower::poll`] reads it whole, every later
/// one only what was appended since. An unfinished batch is left for a later poll. Holds no
/// lock and never writes.
pub(crate) struct Follower {
    id: SessionId,
    source: Source,
    /// Set after a read error other than "not found yet": the log is not read again (events
    /// before the error were handed out once; reading again would repeat them).
    broken: bool,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower")
            .field("id", &self.id)
            .field("live", &matches!(self.source, Source::Live(_)))
            .finish_non_exhaustive()
    }
}

impl Follower {
    /// A follower of session `id` that reads again on every poll and has read nothing yet.
    pub(crate) fn new(id: SessionId) -> Self {
        Self {
            id,
            source: Source::Reads {
                header: None,
                at: None,
            },
            broken: false,
        }
    }

    /// A follower of session `id` that is live where `journal`'s store pushes appends
    /// (`wake` is called on each; poll then), and reads again on every poll otherwise.
    /// A store that fails to start the follow gives a reading follower (logged).
    pub(crate) fn live(id: SessionId, journal: &Journal, wake: Wake) -> Self {
        match journal.follow(&id, wake) {
            Ok(Some(live)) => Self {
                id,
                source: Source::Live(live),
                broken: false,
            },
            Ok(None) => Self::new(id),
            Err(e) => {
                tracing::warn!(session = %id, error = %e, "cannot follow live; reading instead");
                Self::new(id)
            }
        }
    }

    /// Whether the store pushes what is appended (a live follow).
    pub(crate) fn is_live(&self) -> bool {
        matches!(self.source, Source::Live(_))
    }

    /// The session followed.
    pub(crate) fn id(&self) -> &SessionId {
        &self.id
    }

    /// The header, once the log has been read.
    pub(crate) fn header(&self) -> Option<&SessionHeader> {
        match &self.source {
            Source::Reads { header, .. } => header.as_ref(),
            Source::Live(live) => live.header(),
        }
    }

    /// Hands every event appended since the last poll to `on_event`, in seq order.
    ///
    /// # Errors
    /// The journal's read errors: `SESSION_NOT_FOUND` while the session does not exist (a
    /// later poll may find it), `JOURNAL_CORRUPT`, `JOURNAL_UNSUPPORTED`, `JOURNAL_IO`,
    /// `STORE_IO`. Events before a corruption are handed out first. After any other error
    /// than a missing session the follower is broken: later polls read nothing.
    pub(crate) fn poll(
        &mut self,
        journal: &Journal,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<(), JournalError> {
        if self.broken {
            return Ok(());
        }
        let result = self.read(journal, on_event);
        if let Err(e) = &result
            && !(self.header().is_none() && matches!(e, JournalError::NotFound { .. }))
        {
            self.broken = true;
        }
        result
    }

    fn read(
        &mut self,
        journal: &Journal,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<(), JournalError> {
        match &mut self.source {
            Source::Live(live) => live.poll(on_event).map(|_| ()),
            Source::Reads { header, at } => {
                match at {
                    None => {
                        let summary = journal.read_each(&self.id, on_event)?;
                        *at = Some(summary.position());
                        *header = Some(summary.header);
                    }
                    Some(position) => {
                        let tail = journal.read_each_from(&self.id, *position, on_event)?;
                        *position = tail.next;
                    }
                }
                Ok(())
            }
        }
    }
}
