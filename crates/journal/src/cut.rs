//! Reading a log up to a past point (`troupe team show --at`, the panel's timeline): a point is
//! always a batch boundary, since a batch is atomic (DESIGN decision 9: events appended
//! together are durable together, so a point inside a batch never existed durably).
//!
//! - [`Journal::find_cut`]: where a point ([`At::Seq`] or [`At::Time`]) is in a log — the end
//!   of the seq's batch, or the longest prefix of whole batches whose events all have a time at
//!   or before the time — or that it is outside the log.
//! - [`Journal::read_until`]: a log's longest prefix of whole batches up to a time, event by
//!   event (how the other logs of a Team are read "at the same time").
//!
//! Pure reads (no lock, no repair), one streamed read of the log each.

use troupe_protocol::{Event, Seq, SessionId};

use crate::{Journal, Result, ScanSummary};

/// A point of a log to read up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// Once the event with this seq was committed: after the last event of its batch.
    Seq(Seq),
    /// After the longest prefix of whole batches whose events all have a time at or before
    /// this one (epoch ms).
    Time(u64),
}

/// A point found in a log ([`Journal::find_cut`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// The last event up to the point (a batch's last); `None` for the empty prefix (a time
    /// after the session's creation and before its first whole batch).
    pub last_seq: Option<Seq>,
    /// The point's time (epoch ms): that last event's for [`At::Seq`], the time asked for with
    /// [`At::Time`].
    pub time: u64,
}

/// What [`Journal::find_cut`] found: the point, or `None` when it is outside the log (a seq
/// after the last event, a time after the last event's or before the session's creation, any
/// point of a log without events), with what the log holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutSearch {
    /// The point, when it is in the log.
    pub cut: Option<Cut>,
    /// The log's last event (seq, time), if it has one.
    pub last: Option<(Seq, u64)>,
    /// When the session was created (epoch ms, its header's).
    pub created_at: u64,
}

/// Tracks the batch an event belongs to (`seq..=batchLast` from a batch's first event).
#[derive(Debug, Default)]
struct Batches {
    end: Option<Seq>,
}

impl Batches {
    /// The seq of the last event of `event`'s batch.
    fn end_of(&mut self, event: &Event) -> Seq {
        let end = match (event.batch_last, self.end) {
            (Some(end), _) => end,
            (None, Some(end)) if event.seq <= end => end,
            (None, _) => event.seq,
        };
        self.end = Some(end);
        end
    }
}

impl Journal {
    /// Finds `at` in the log of `id` (see [`CutSearch`] and the module docs).
    ///
    /// # Errors
    /// The journal's, as [`Journal::read_each`] (`SESSION_NOT_FOUND`, `JOURNAL_CORRUPT`, …).
    pub fn find_cut(&self, id: &SessionId, at: At) -> Result<CutSearch> {
        let mut batches = Batches::default();
        let mut last: Option<(Seq, u64)> = None;
        let mut wanted_end: Option<Seq> = None;
        let mut found: Option<Cut> = None;
        let mut stopped = false;
        let summary = self.read_each(id, &mut |event| {
            let end = batches.end_of(&event);
            match at {
                At::Seq(seq) => {
                    if event.seq == seq {
                        wanted_end = Some(end);
                    }
                    if wanted_end == Some(event.seq) {
                        found = Some(Cut {
                            last_seq: Some(event.seq),
                            time: event.time,
                        });
                    }
                }
                At::Time(t) if !stopped => {
                    if event.time > t {
                        stopped = true;
                    } else if event.seq == end {
                        found = Some(Cut {
                            last_seq: Some(event.seq),
                            time: t,
                        });
                    }
                }
                At::Time(_) => {}
            }
            last = Some((event.seq, event.time));
        })?;
        let created_at = summary.header.created_at;
        let cut = match at {
            At::Seq(_) => found,
            At::Time(t) => match last {
                None => None,
                Some((_, last_time)) if t > last_time || t < created_at => None,
                Some(_) => Some(found.unwrap_or(Cut {
                    last_seq: None,
                    time: t,
                })),
            },
        };
        Ok(CutSearch {
            cut,
            last,
            created_at,
        })
    }

    /// Reads the log of `id` up to `time` (epoch ms): its longest prefix of whole batches whose
    /// events all have a time at or before it, each event handed to `on_event` once its batch
    /// is known to be whole.
    ///
    /// # Errors
    /// The journal's, as [`Journal::read_each`].
    pub fn read_until(
        &self,
        id: &SessionId,
        time: u64,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<ScanSummary> {
        let mut batches = Batches::default();
        let mut batch: Vec<Event> = Vec::new();
        let mut stopped = false;
        self.read_each(id, &mut |event| {
            if stopped || event.time > time {
                stopped = true;
                return;
            }
            let closes = batches.end_of(&event) == event.seq;
            batch.push(event);
            if closes {
                for event in batch.drain(..) {
                    on_event(&event);
                }
            }
        })
    }
}
