//! One read of each teammate's log for everything `troupe team show` takes from it
//! ([`TeammateScans::read`]): the receipts' target side (`agent/inbox/spliced`, `user/message`
//! claims, `turn/start`, `turn/end`), its own model (`agent/config`), its file changes for the
//! write radar (`tool/call`, `tool/result`), its usage for the ledger (`assistant/message`,
//! `agent/config`, `agent/inbox/spliced`) and the time of its last event (the stall check).
//!
//! Each consumer is handed exactly what its own read of the log used to give it
//! ([`TeammateScan`]: the events of the types it reads, in log order, and how the read ended),
//! so the consumers' code (in `lead_log.rs` and `radar.rs`) is the same whichever way the log
//! was read. The one scan selects the union of their types; lines are read with only the
//! payload members their consumer takes (`crate::line_pick`), others parsed. Whenever the one
//! scan could have given a consumer something other than its own read would — the scan failed
//! (a damaged line stops every consumer at once, where each own read stops only at a line of
//! its types), or the last event's time is not certain — that consumer's own read is made
//! instead ([`TeammateScan::read_alone`], also the reference the tests compare with). Pure
//! reads, no lock: nothing here writes.

use std::collections::BTreeMap;

use troupe_journal::{Journal, LineCheck, LineUse, Selected};
use troupe_protocol::{Event, SessionId, event_types};
use troupe_session::changes::ChangeFold;
use troupe_session::ledger::SessionUsage;
use troupe_team::Receipts;

use crate::line_pick::{envelope_time, is_valid_event, runtime_pick};

/// The consumers of one teammate's log (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Wants {
    /// The receipts' target side ([`Receipts::reads`]).
    pub(crate) receipts: bool,
    /// Its own model (`agent/config`).
    pub(crate) models: bool,
    /// Its file changes ([`ChangeFold::reads`]).
    pub(crate) changes: bool,
    /// Its usage ([`SessionUsage::reads`]); of the whole log only.
    pub(crate) usage: bool,
    /// The time of its last event; of the whole log only.
    pub(crate) last_event: bool,
}

impl Wants {
    fn or(self, other: Self) -> Self {
        Self {
            receipts: self.receipts || other.receipts,
            models: self.models || other.models,
            changes: self.changes || other.changes,
            usage: self.usage || other.usage,
            last_event: self.last_event || other.last_event,
        }
    }
}

/// What one consumer's read of a log gave it: the events of its types in log order (up to
/// where the read stopped) and how the read ended (`Ok`: the header's seed length; `Err`: the
/// journal's error as text).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ConsumerRead {
    pub(crate) events: Vec<Event>,
    pub(crate) result: Option<Result<u64, String>>,
}

impl ConsumerRead {
    /// Whether the read reached the log's end (or the cut) without an error.
    pub(crate) fn is_ok(&self) -> bool {
        matches!(self.result, Some(Ok(_)))
    }
}

/// One teammate's log as its consumers read it (see the module docs); an unwanted consumer's
/// part is empty.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TeammateScan {
    /// The seed length of its header (`journal.header`), `None` when that cannot be read.
    pub(crate) seed: Option<u64>,
    pub(crate) receipts: ConsumerRead,
    pub(crate) models: ConsumerRead,
    pub(crate) changes: ConsumerRead,
    pub(crate) usage: ConsumerRead,
    /// The time of the last event (epoch ms); `None` when the log cannot be read or has none.
    pub(crate) last_event_ms: Option<u64>,
}

/// The types each consumer reads.
fn reads_receipts(kind: &str) -> bool {
    Receipts::reads(kind)
}
fn reads_models(kind: &str) -> bool {
    kind == event_types::AGENT_CONFIG
}

impl TeammateScan {
    /// Reads the log of `id` once for the consumers `wants` (up to `until`, epoch ms, with
    /// [`Journal::read_until`]: its last whole batch by then; `usage` and `last_event` are of
    /// the whole log and read on their own when asked with `until`).
    pub(crate) fn read(
        journal: &Journal,
        id: &SessionId,
        wants: Wants,
        until: Option<u64>,
    ) -> Self {
        let mut scan = Self {
            seed: journal.header(id).ok().map(|h| h.seed_len()),
            ..Self::default()
        };
        match until {
            Some(time) => {
                let result = journal.read_until(id, time, &mut |event| {
                    scan.take(wants, event);
                });
                let result = Some(
                    result
                        .map(|s| s.header.seed_len())
                        .map_err(|e| error_chain(&e)),
                );
                for (wanted, read) in [
                    (wants.receipts, &mut scan.receipts),
                    (wants.models, &mut scan.models),
                    (wants.changes, &mut scan.changes),
                ] {
                    if wanted {
                        read.result = result.clone();
                    }
                }
                let whole = Wants {
                    usage: wants.usage,
                    last_event: wants.last_event,
                    ..Wants::default()
                };
                if whole != Wants::default() {
                    let alone = Self::read_alone(journal, id, whole, None);
                    scan.usage = alone.usage;
                    scan.last_event_ms = alone.last_event_ms;
                }
            }
            None => scan.read_whole(journal, id, wants),
        }
        scan
    }

    /// The one selective scan of the whole log (see the module docs), with the fallbacks.
    fn read_whole(&mut self, journal: &Journal, id: &SessionId, wants: Wants) {
        let select = |kind: &str| {
            wants.last_event
                || (wants.receipts && reads_receipts(kind))
                || (wants.models && reads_models(kind))
                || (wants.changes && ChangeFold::reads(kind))
                || (wants.usage && SessionUsage::reads(kind))
        };
        // The last event seen (seq, time), and whether every line was checked as a whole
        // event (the stall's own read parses every line: a line it would refuse ends it).
        let mut last = None;
        let mut exact = true;
        let summary = journal.read_selected_each(id, LineCheck::Prefix, &select, &mut |selected| {
            match selected {
                Selected::Line(line) => {
                    let consumed = (wants.receipts && reads_receipts(line.kind))
                        || (wants.models && reads_models(line.kind))
                        || (wants.changes && ChangeFold::reads(line.kind))
                        || (wants.usage && SessionUsage::reads(line.kind));
                    if !consumed {
                        // Selected only for its time: a valid event's.
                        match envelope_time(line.text) {
                            Some(time) if is_valid_event(line.text) => {
                                last = Some((line.seq, time));
                            }
                            _ => exact = false,
                        }
                        return LineUse::Used;
                    }
                    match runtime_pick(line.kind, line.text) {
                        Some(event) => {
                            last = Some((event.seq, event.time));
                            self.take(wants, &event);
                            LineUse::Used
                        }
                        None => LineUse::NeedEvent,
                    }
                }
                Selected::Event(event) => {
                    last = Some((event.seq, event.time));
                    self.take(wants, &event);
                    LineUse::Used
                }
            }
        });
        match summary {
            Ok(summary) => {
                let seed = summary.header.seed_len();
                for (wanted, read) in [
                    (wants.receipts, &mut self.receipts),
                    (wants.models, &mut self.models),
                    (wants.changes, &mut self.changes),
                    (wants.usage, &mut self.usage),
                ] {
                    if wanted {
                        read.result = Some(Ok(seed));
                    }
                }
                if wants.last_event {
                    let whole = match (summary.next_seq.0, last) {
                        (0, None) => true,
                        (next, Some((seq, _))) => seq.0 + 1 == next,
                        _ => false,
                    };
                    if exact && whole {
                        self.last_event_ms = last.map(|(_, time)| time);
                    } else {
                        self.last_event_ms = last_event_time(journal, id);
                    }
                }
            }
            // A failed scan may have stopped a consumer early that its own read would not
            // have: every wanted consumer reads on its own (as it did before the one scan).
            Err(_) => {
                let seed = self.seed;
                *self = Self::read_alone(journal, id, wants, None);
                self.seed = seed;
            }
        }
    }

    /// Hands `event` to every wanted consumer that reads its type.
    fn take(&mut self, wants: Wants, event: &Event) {
        for (wanted, reads, read) in [
            (
                wants.receipts,
                reads_receipts as fn(&str) -> bool,
                &mut self.receipts,
            ),
            (wants.models, reads_models, &mut self.models),
            (wants.changes, ChangeFold::reads, &mut self.changes),
            (wants.usage, SessionUsage::reads, &mut self.usage),
        ] {
            if wanted && reads(&event.kind) {
                read.events.push(event.clone());
            }
        }
    }

    /// Each wanted consumer's own read of the log of `id`, one read per consumer (what each
    /// read before the one scan; the fallback of [`TeammateScan::read`] and its reference).
    pub(crate) fn read_alone(
        journal: &Journal,
        id: &SessionId,
        wants: Wants,
        until: Option<u64>,
    ) -> Self {
        let own = |reads: fn(&str) -> bool| {
            let mut read = ConsumerRead::default();
            let result = match until {
                Some(time) => journal.read_until(id, time, &mut |event| {
                    if reads(&event.kind) {
                        read.events.push(event.clone());
                    }
                }),
                None => {
                    journal.read_selected_each(id, LineCheck::Prefix, &reads, &mut |s| match s {
                        Selected::Line(_) => LineUse::NeedEvent,
                        Selected::Event(event) => {
                            read.events.push(event);
                            LineUse::Used
                        }
                    })
                }
            };
            read.result = Some(
                result
                    .map(|s| s.header.seed_len())
                    .map_err(|e| error_chain(&e)),
            );
            read
        };
        let mut scan = Self {
            seed: journal.header(id).ok().map(|h| h.seed_len()),
            ..Self::default()
        };
        if wants.receipts {
            scan.receipts = own(reads_receipts);
        }
        if wants.models {
            scan.models = own(reads_models);
        }
        if wants.changes {
            scan.changes = own(ChangeFold::reads);
        }
        if wants.usage {
            scan.usage = own(SessionUsage::reads);
        }
        if wants.last_event {
            scan.last_event_ms = last_event_time(journal, id);
        }
        scan
    }

    /// The usage its log recorded ([`SessionUsage`] of the usage read), or the read's error.
    pub(crate) fn usage(&self) -> Result<SessionUsage, String> {
        match &self.usage.result {
            Some(Ok(seed)) => {
                let mut usage = SessionUsage::new(*seed);
                for event in &self.usage.events {
                    usage.apply(event);
                }
                Ok(usage)
            }
            Some(Err(error)) => Err(error.clone()),
            None => Err("not read".to_owned()),
        }
    }

    /// The usage of the events the usage read took before it stopped (all of them when it
    /// reached the end): what a log damaged in its middle recorded up to the damage.
    pub(crate) fn usage_so_far(&self) -> SessionUsage {
        let mut usage = SessionUsage::new(self.seed.unwrap_or(0));
        for event in &self.usage.events {
            usage.apply(event);
        }
        usage
    }
}

/// Every log `troupe team show` reads besides the Lead's — each teammate's, and any other
/// target of a message — read once for all its consumers (the receipts, the models, the write
/// radar, the ledger, the stall check): made by
/// [`LeadLog::read_teammates`](crate::LeadLog::read_teammates), read by
/// [`LeadLog::show_full_in`](crate::LeadLog::show_full_in),
/// [`LeadLog::stall_check_in`](crate::LeadLog::stall_check_in) and
/// [`LeadLog::ledger_in`](crate::LeadLog::ledger_in). Memory: the events of the types those
/// consumers read, with only the payload members they read where the line was plain.
#[derive(Debug, Clone, Default)]
pub struct TeammateScans {
    scans: BTreeMap<SessionId, TeammateScan>,
}

impl TeammateScans {
    /// Reads each session of `wanted` once (its consumers merged), up to `until` when given.
    pub(crate) fn read(
        journal: &Journal,
        wanted: impl IntoIterator<Item = (SessionId, Wants)>,
        until: Option<u64>,
    ) -> Self {
        let scans = merge(wanted)
            .into_iter()
            .map(|(id, wants)| {
                let scan = TeammateScan::read(journal, &id, wants, until);
                (id, scan)
            })
            .collect();
        Self { scans }
    }

    /// [`TeammateScans::read`] with each consumer reading each log on its own
    /// ([`TeammateScan::read_alone`]).
    pub(crate) fn read_alone(
        journal: &Journal,
        wanted: impl IntoIterator<Item = (SessionId, Wants)>,
        until: Option<u64>,
    ) -> Self {
        let scans = merge(wanted)
            .into_iter()
            .map(|(id, wants)| {
                let scan = TeammateScan::read_alone(journal, &id, wants, until);
                (id, scan)
            })
            .collect();
        Self { scans }
    }

    /// The teammates whose log could not be read to its end (or the cut), each with the first
    /// error a consumer's read stopped at (the journal's text: file, line, offset, reason):
    /// what their receipts, usage, changes and model show stops there.
    pub fn damaged(&self) -> Vec<(&SessionId, &str)> {
        self.scans
            .iter()
            .filter_map(|(id, scan)| {
                [&scan.receipts, &scan.models, &scan.changes, &scan.usage]
                    .into_iter()
                    .find_map(|read| match &read.result {
                        Some(Err(error)) => Some(error.as_str()),
                        _ => None,
                    })
                    .map(|error| (id, error))
            })
            .collect()
    }

    /// The scan of `id` (an empty one when it was not asked for).
    pub(crate) fn get(&self, id: &SessionId) -> std::borrow::Cow<'_, TeammateScan> {
        match self.scans.get(id) {
            Some(scan) => std::borrow::Cow::Borrowed(scan),
            None => std::borrow::Cow::Owned(TeammateScan::default()),
        }
    }
}

/// Each session of `wanted` once, with its consumers together.
fn merge(wanted: impl IntoIterator<Item = (SessionId, Wants)>) -> BTreeMap<SessionId, Wants> {
    let mut merged: BTreeMap<SessionId, Wants> = BTreeMap::new();
    for (id, wants) in wanted {
        let entry = merged.entry(id).or_default();
        *entry = entry.or(wants);
    }
    merged
}

/// `error` and its sources, `: `-joined (as `anyhow` shows a chain with `{:#}`).
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The time of the last event of the stored log of `id` (read without a lock), if it reads
/// (epoch milliseconds; `None` for a log that is missing, empty or does not read).
pub(crate) fn last_event_time(store: &Journal, id: &SessionId) -> Option<u64> {
    let mut last = None;
    store
        .read_each(id, &mut |event| last = Some(event.time))
        .ok()?;
    last
}
