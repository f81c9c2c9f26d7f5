//! Time travel (issue 17 item 4): a Team as it was at a past point of its Lead log
//! ([`Cut`], [`crate::LeadLog::read_at`]), and the Team timeline ([`read_timeline`]).
//!
//! **Where a point is.** A batch is atomic (DESIGN decision 9): events appended together are
//! durable together, so a point is always a batch boundary. [`At::Seq`]`(N)` is the state
//! once the Lead log's event N was committed: after the last event of N's batch (N itself for
//! a batch of one, the common case of a Team record). [`At::Time`]`(T)` is the state after the
//! longest prefix of whole batches of the Lead log whose events all have a time at or before
//! T (epoch ms; `troupe team show --at` takes RFC 3339). Either way the point has a time: that
//! last event's, or T. The teammates' logs are read up to that same time
//! (each its longest prefix of whole batches whose events all have a time at or before it), so
//! a receipt's `received` and `consumed` and a teammate's model are what they were then. Times
//! are the writers' wall clocks in milliseconds: events of two logs in one millisecond count as
//! simultaneous.
//!
//! A point outside the log is refused ([`TimeTravelError::OutsideLog`],
//! `TEAM_AT_OUTSIDE_LOG`, naming the log's last seq and its time): a seq after the last one, a
//! time after the last event's, or a time before the session was created.
//!
//! Pure reads: nothing here writes.

use serde::Serialize;
use troupe_journal::{Journal, LineCheck, LineUse, ScanSummary, Selected};
use troupe_protocol::{ErrorCode, Seq, SessionId};
use troupe_team::{MessageReceipt, StreamFold, TeamId, TeamShow, TimelineEntry};

use crate::lead_log::{FoldFailure, LeadLogError};

/// A point of a Lead log to fold up to (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// Once the event with this seq was committed (after its batch).
    Seq(Seq),
    /// After every event up to this time (epoch ms), the longest such prefix.
    Time(u64),
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            At::Seq(seq) => write!(f, "seq {seq}"),
            At::Time(ms) => write!(f, "time {ms} ms"),
        }
    }
}

/// A resolved point of a Lead log ([`Cut::resolve`]): the prefix to fold and the time the
/// other logs are cut at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// The last event of the prefix; `None` for the empty prefix (a time after the session's
    /// creation and before its first event).
    pub last_seq: Option<Seq>,
    /// The point's time (epoch ms): the event's for [`At::Seq`], the one asked for with
    /// [`At::Time`]. The teammates' logs are read up to it.
    pub time: u64,
    /// The log's last event (seq, time) when the point was resolved.
    pub log_last: Option<(Seq, u64)>,
}

/// Where a read at a past point stopped, as outputs show it.
///
/// Wire shape: `{"seq"?,"time","lastSeq"?}`: `seq` the last Lead event folded (absent for the
/// empty prefix), `time` the point's time (epoch ms), `lastSeq` the log's last seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AtPoint {
    /// The last Lead event folded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<Seq>,
    /// The point's time, epoch ms.
    pub time: u64,
    /// The Lead log's last seq.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_seq: Option<Seq>,
}

impl Cut {
    /// Finds `at` in the Lead log of `id` (one streamed read of the whole log, no lock).
    ///
    /// # Errors
    /// [`TimeTravelError::OutsideLog`] (`TEAM_AT_OUTSIDE_LOG`) for a point outside the log
    /// (see the module docs); [`TimeTravelError::Log`] when the log cannot be read (the
    /// journal's code, e.g. `SESSION_NOT_FOUND`, `JOURNAL_CORRUPT`).
    pub fn resolve(journal: &Journal, id: &SessionId, at: At) -> Result<Self, TimeTravelError> {
        let mut last: Option<(Seq, u64)> = None;
        // The last event of the batch being read (a batch is `seq..=batchLast`).
        let mut batch_end = Seq(0);
        // For `At::Seq`: the end of the asked event's batch, once seen.
        let mut wanted_end: Option<Seq> = None;
        let mut found: Option<(Option<Seq>, u64)> = None;
        let mut stopped = false;
        let summary = journal
            .read_each(id, &mut |event| {
                batch_end = match event.batch_last {
                    Some(end) => end,
                    None if event.seq <= batch_end && last.is_some() => batch_end,
                    None => event.seq,
                };
                let closes_batch = event.seq == batch_end;
                match at {
                    At::Seq(seq) => {
                        if event.seq == seq {
                            wanted_end = Some(batch_end);
                        }
                        if wanted_end == Some(event.seq) {
                            found = Some((Some(event.seq), event.time));
                        }
                    }
                    At::Time(t) if !stopped => {
                        if event.time > t {
                            stopped = true;
                        } else if closes_batch {
                            found = Some((Some(event.seq), t));
                        }
                    }
                    At::Time(_) => {}
                }
                last = Some((event.seq, event.time));
            })
            .map_err(|e| TimeTravelError::Log(LeadLogError::of(id, e)))?;
        let outside = || TimeTravelError::OutsideLog {
            id: id.clone(),
            at,
            last,
            created_at: summary.header.created_at,
        };
        let (last_seq, time) = match (at, found) {
            (At::Seq(_), None) => return Err(outside()),
            (At::Seq(_), Some(point)) => point,
            (At::Time(t), _) if t < summary.header.created_at => return Err(outside()),
            (At::Time(t), _) if last.is_some_and(|(_, time)| t > time) => return Err(outside()),
            (At::Time(_), None) if last.is_none() => return Err(outside()),
            (At::Time(t), None) => (None, t),
            (At::Time(_), Some(point)) => point,
        };
        Ok(Self {
            last_seq,
            time,
            log_last: last,
        })
    }

    /// The point as outputs show it.
    pub fn point(&self) -> AtPoint {
        AtPoint {
            seq: self.last_seq,
            time: self.time,
            last_seq: self.log_last.map(|(seq, _)| seq),
        }
    }
}

/// Reads the session `id` up to `time` (epoch ms): its longest prefix of whole batches whose
/// events all have a time at or before it (see the module docs), each event handed to
/// `on_event` once its batch is known to be in. One streamed read of the whole log, no lock.
///
/// # Errors
/// The journal's, as [`Journal::read_each`].
pub(crate) fn read_until(
    journal: &Journal,
    id: &SessionId,
    time: u64,
    on_event: &mut dyn FnMut(&troupe_protocol::Event),
) -> Result<ScanSummary, troupe_journal::JournalError> {
    let mut batch: Vec<troupe_protocol::Event> = Vec::new();
    let mut batch_end: Option<Seq> = None;
    let mut stopped = false;
    journal.read_each(id, &mut |event| {
        if stopped {
            return;
        }
        if event.time > time {
            stopped = true;
            return;
        }
        let end = match (event.batch_last, batch_end) {
            (Some(end), _) => end,
            (None, Some(end)) if event.seq <= end => end,
            (None, _) => event.seq,
        };
        batch_end = Some(end);
        let closes = event.seq == end;
        batch.push(event);
        if closes {
            for event in batch.drain(..) {
                on_event(&event);
            }
        }
    })
}

/// `troupe team show --json`'s object: DESIGN §6's view, every message's receipt, and for a
/// view at a past point, where it stopped.
///
/// Wire shape: `{"teamId","members","tasks","pendingMessages","messages":[MessageReceipt…],
/// "at"?:AtPoint}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TeamShowFull {
    /// The view (roster, board, pending mail).
    #[serde(flatten)]
    pub show: TeamShow,
    /// Every message queued (up to the point), in queue order, with its life.
    pub messages: Vec<MessageReceipt>,
    /// Where the read stopped, for a view at a past point.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<AtPoint>,
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
        At::Time(t) if *t < created_at => format!(
            "{at} is before session {id} was created (time {created_at} ms); {end}"
        ),
        _ => format!("{at} is beyond the log of session {id}: {end}"),
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
/// Team, in log order ([`troupe_team::TeamState::describe`] before each event is folded). One selective
/// read (only the `team/…` lines are parsed; of every other line the envelope prefix is
/// checked), no lock.
///
/// # Errors
/// As [`crate::LeadLog::read`]: the journal's errors, [`LeadLogError::Damaged`] for a corrupt
/// line, [`LeadLogError::Invalid`] when the fold refuses an event (the entries before it are
/// lost with it: the timeline of a log that does not fold is not shown).
pub fn read_timeline(
    journal: &Journal,
    id: &SessionId,
) -> Result<(Vec<TimelineEntry>, ScanSummary), LeadLogError> {
    let mut fold = StreamFold::new(TeamId::new(id.clone()));
    let mut entries = Vec::new();
    let summary = journal
        .read_selected_each(id, LineCheck::Prefix, &StreamFold::reads, &mut |selected| {
            match selected {
                Selected::Line(_) => LineUse::NeedEvent,
                Selected::Event(event) => {
                    if !fold.is_refused()
                        && let Some(entry) = fold.state().describe(&event)
                    {
                        entries.push(entry);
                    }
                    fold.event(&event);
                    LineUse::Used
                }
            }
        })
        .map_err(|e| LeadLogError::of(id, e))?;
    fold.finish().map_err(|e| LeadLogError::Invalid {
        id: id.clone(),
        failure: Box::new(FoldFailure(e)),
    })?;
    Ok((entries, summary))
}
