//! Following one session file while another process writes it.

use troupe_journal::{Journal, JournalError, ScanPosition};
use troupe_protocol::{Event, SessionHeader, SessionId};

/// Reads a session file incrementally: the first [`Follower::poll`] reads it whole, every later
/// one only what was appended since (through [`Journal::read_each_from`]). An unfinished last
/// line is left for the next poll. Holds no lock and never writes.
#[derive(Debug)]
pub(crate) struct Follower {
    id: SessionId,
    header: Option<SessionHeader>,
    at: Option<ScanPosition>,
    /// Set after a read error other than "not found yet": the file is not read again (events
    /// before the error were handed out once; reading again would repeat them).
    broken: bool,
}

impl Follower {
    /// A follower of session `id` that has read nothing yet.
    pub(crate) fn new(id: SessionId) -> Self {
        Self {
            id,
            header: None,
            at: None,
            broken: false,
        }
    }

    /// The session followed.
    pub(crate) fn id(&self) -> &SessionId {
        &self.id
    }

    /// The header, once the file has been read.
    pub(crate) fn header(&self) -> Option<&SessionHeader> {
        self.header.as_ref()
    }

    /// Hands every event appended since the last poll to `on_event`, in seq order.
    ///
    /// # Errors
    /// The journal's read errors: `SESSION_NOT_FOUND` while the file does not exist (a later
    /// poll may find it), `JOURNAL_CORRUPT`, `JOURNAL_UNSUPPORTED`, `JOURNAL_IO`. Events before
    /// a corruption are handed out first. After any other error than a missing file the
    /// follower is broken: later polls read nothing.
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
            && !(self.at.is_none() && matches!(e, JournalError::NotFound { .. }))
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
        match self.at {
            None => {
                let summary = journal.read_each(&self.id, on_event)?;
                self.at = Some(summary.position());
                self.header = Some(summary.header);
            }
            Some(at) => {
                let tail = journal.read_each_from(&self.id, at, on_event)?;
                self.at = Some(tail.next);
            }
        }
        Ok(())
    }
}
