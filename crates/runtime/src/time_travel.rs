//! Time travel (issue 17 item 4): a Team as it was at a past point of its Lead log
//! ([`Cut::resolve`], [`crate::LeadLog::read_at`]), and the Team timeline ([`read_timeline`]).
//!
//! **Where a point is** (the journal's [`troupe_journal::At`], found by
//! [`Journal::find_cut`]): a point is always a batch boundary (DESIGN decision 9: events
//! appended together are durable together). `At::Seq(N)` is the state once the Lead log's
//! event N was committed: after the last event of N's batch (N itself for a batch of one, the
//! common case of a Team record). `At::Time(T)` is the state after the longest prefix of whole
//! batches of the Lead log whose events all have a time at or before T (epoch ms; `troupe team
//! show --at` takes RFC 3339). Either way the point has a time: that last event's, or T. The
//! teammates' logs are read up to that same time ([`Journal::read_until`]: each its longest
//! prefix of whole batches by then), so a receipt's `received` and `consumed` and a teammate's
//! model are what they were then. Times are the writers' wall clocks in milliseconds: events
//! of two logs in one millisecond count as simultaneous.
//!
//! A point outside the log is refused ([`TimeTravelError::OutsideLog`],
//! `TEAM_AT_OUTSIDE_LOG`, naming the log's last seq and its time): a seq after the last one, a
//! time after the last event's, or a time before the session was created.
//!
//! Pure reads: nothing here writes.

use troupe_journal::{At, Journal, LineCheck, LineUse, ScanSummary, Selected};
use troupe_protocol::{ErrorCode, Seq, SessionId};
use troupe_team::{StreamFold, TeamId, Timeline, TimelineEntry};

use crate::lead_log::{Cut, FoldFailure, LeadLogError};

impl Cut {
    /// Finds `at` in the Lead log of `id` (one streamed read of the whole log, no lock).
    ///
    /// # Errors
    /// [`TimeTravelError::OutsideLog`] (`TEAM_AT_OUTSIDE_LOG`) for a point outside the log
    /// (see the module docs); [`TimeTravelError::Log`] when the log cannot be read (the
    /// journal's code, e.g. `SESSION_NOT_FOUND`, `JOURNAL_CORRUPT`).
    pub fn resolve(journal: &Journal, id: &SessionId, at: At) -> Result<Self, TimeTravelError> {
        let search = journal
            .find_cut(id, at)
            .map_err(|e| TimeTravelError::Log(LeadLogError::of(id, e)))?;
        match search.cut {
            Some(cut) => Ok(Self {
                last_seq: cut.last_seq,
                time: cut.time,
                log_last: search.last,
            }),
            None => Err(TimeTravelError::OutsideLog {
                id: id.clone(),
                at,
                last: search.last,
                created_at: search.created_at,
            }),
        }
    }
}

/// Why a past point of a Team cannot be shown.
#[derive(Debug, thiserror::Error)]
pub enum TimeTravelError {
    /// The point is not in the log (see the module docs). Code `TEAM_AT_OUTSIDE_LOG`.
    #[error("{}", outside_message(id, at, last, *created_at))]
    OutsideLog {
        /// The Lead's session.
        id: SessionId,
        /// The point asked for.
        at: At,
        /// The log's last event (seq, time), if it has one.
        last: Option<(Seq, u64)>,
        /// When the session was created (epoch ms).
        created_at: u64,
    },
    /// The log cannot be read or folded (the wrapped error's code).
    #[error(transparent)]
    Log(LeadLogError),
}

fn outside_message(id: &SessionId, at: &At, last: &Option<(Seq, u64)>, created_at: u64) -> String {
    let end = match last {
        Some((seq, time)) => format!("its last event is seq {seq} (time {time} ms)"),
        None => "it has no events".to_owned(),
    };
    match at {
        At::Time(t) if *t < created_at => {
            format!("time {t} ms is before session {id} was created (time {created_at} ms); {end}")
        }
        At::Time(t) => format!("time {t} ms is beyond the log of session {id}: {end}"),
        At::Seq(seq) => format!("seq {seq} is beyond the log of session {id}: {end}"),
    }
}

impl ErrorCode for TimeTravelError {
    fn code(&self) -> &'static str {
        match self {
            TimeTravelError::OutsideLog { .. } => "TEAM_AT_OUTSIDE_LOG",
            TimeTravelError::Log(e) => e.code(),
        }
    }
}

/// The Team timeline of the Lead log of `id`: one [`TimelineEntry`] per Team event of its
/// Team, in log order ([`Timeline`]). One selective read (only the `team/…` lines are
/// parsed; of every other line the envelope prefix is checked), no lock.
///
/// # Errors
/// As [`crate::LeadLog::read`]: the journal's errors, [`LeadLogError::Damaged`] for a corrupt
/// line, [`LeadLogError::Invalid`] when the fold refuses an event (the timeline of a log that
/// does not fold is not shown).
pub fn read_timeline(
    journal: &Journal,
    id: &SessionId,
) -> Result<(Vec<TimelineEntry>, ScanSummary), LeadLogError> {
    let mut timeline = Timeline::new(TeamId::new(id.clone()));
    let summary = journal
        .read_selected_each(id, LineCheck::Prefix, &StreamFold::reads, &mut |selected| {
            match selected {
                Selected::Line(_) => LineUse::NeedEvent,
                Selected::Event(event) => {
                    timeline.event(&event);
                    LineUse::Used
                }
            }
        })
        .map_err(|e| LeadLogError::of(id, e))?;
    let entries = timeline.finish().map_err(|e| LeadLogError::Invalid {
        id: id.clone(),
        failure: Box::new(FoldFailure(e)),
    })?;
    Ok((entries, summary))
}
