//! Replay: scanning a session file's bytes into a header and a validated event prefix
//! (REFERENCE a.9).

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use troupe_protocol::{Event, FORMAT_VERSION, HEADER_TYPE, Seq, SessionHeader, event_types};

use crate::error::{JournalError, Result};

/// Where the valid part of a session file ends and why the rest was not used.
///
/// A torn tail is a crash artefact: a final line without its newline, or a bad or
/// out-of-sequence line that no later completed turn follows (REFERENCE a.9 rules 2–3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Byte offset where the valid prefix ends (the safe truncation length).
    pub offset: u64,
    /// 1-based line number of the first line not used (the header is line 1).
    pub line: u64,
    /// Number of bytes after `offset`.
    pub bytes: u64,
    /// Why the tail was not used, e.g. "no terminating newline".
    pub reason: String,
}

/// A session file read into memory.
#[derive(Debug, Clone)]
pub struct Replay {
    /// The file that was read.
    pub path: PathBuf,
    /// Line 1.
    pub header: SessionHeader,
    /// Every valid event in order; `events[i].seq == i`. Events of unknown *ignorable* types are
    /// kept verbatim (so seqs stay contiguous and forks stay lossless) and listed in
    /// [`Replay::skipped`]; consumers skip them with [`Replay::known_events`].
    pub events: Vec<Event>,
    /// Seqs of events whose type this build does not know but which were marked `ignorable`.
    pub skipped: Vec<Seq>,
    /// Set when the file has bytes past the valid prefix (see [`TornTail`]). Reading never
    /// changes the file; opening for writing truncates to [`TornTail::offset`].
    pub torn_tail: Option<TornTail>,
    /// Length in bytes of the valid prefix (header + every valid event line).
    pub valid_len: u64,
}

impl Replay {
    /// The seq the next appended event gets: the number of valid events.
    pub fn next_seq(&self) -> Seq {
        Seq(self.events.len() as u64)
    }

    /// The events this build understands (all but [`Replay::skipped`]).
    pub fn known_events(&self) -> impl Iterator<Item = &Event> {
        self.events.iter().filter(|e| e.is_known())
    }

    /// The own suffix: events not inherited from a parent (`events[seedLength..]`,
    /// REFERENCE a.1).
    pub fn own_suffix(&self) -> &[Event] {
        let start = usize::try_from(self.header.seed_len())
            .unwrap_or(usize::MAX)
            .min(self.events.len());
        &self.events[start..]
    }
}

/// Only the `type` of a line, for the lenient "is there a completed turn later" scan.
#[derive(Deserialize)]
struct TypeOnly<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
}

/// Reads the header's raw shape first, so a version mismatch is reported before any
/// structural check (REFERENCE a.9 rule 1).
#[derive(Deserialize)]
struct RawHeader<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    format: Option<serde_json::Value>,
}

fn corrupt(path: &Path, line: u64, offset: u64, reason: impl Into<String>) -> JournalError {
    JournalError::Corrupt {
        path: path.to_path_buf(),
        line,
        offset,
        reason: reason.into(),
    }
}

/// Parses a whole session file image.
///
/// `path` only names the file in errors and in the result.
///
/// # Errors
/// - `JOURNAL_CORRUPT`: no complete header line, a header that is not a `session` record, or a
///   bad / out-of-sequence event line followed later by a line whose `type` is `turn/end`
///   (or the bad line itself is a `turn/end` with the wrong seq).
/// - `JOURNAL_UNSUPPORTED`: header `format` ≠ [`FORMAT_VERSION`], or a valid event of an
///   unknown type not marked `ignorable`.
pub fn scan(path: &Path, bytes: &[u8]) -> Result<Replay> {
    let Some(header_end) = memchr_newline(bytes, 0) else {
        return Err(corrupt(path, 1, 0, "missing header line"));
    };
    let header_line = &bytes[..header_end];
    let raw: RawHeader<'_> = serde_json::from_slice(header_line)
        .map_err(|e| corrupt(path, 1, 0, format!("header is not JSON: {e}")))?;
    if raw.kind.as_deref() != Some(HEADER_TYPE) {
        return Err(corrupt(path, 1, 0, "header is not a \"session\" record"));
    }
    if raw.format.as_ref().and_then(serde_json::Value::as_u64) != Some(u64::from(FORMAT_VERSION)) {
        let shown = raw
            .format
            .as_ref()
            .map_or_else(|| "missing".to_owned(), ToString::to_string);
        return Err(JournalError::Unsupported {
            path: path.to_path_buf(),
            reason: format!(
                "header format version {shown} (this build reads version {FORMAT_VERSION})"
            ),
        });
    }
    let header: SessionHeader = serde_json::from_slice(header_line)
        .map_err(|e| corrupt(path, 1, 0, format!("invalid header: {e}")))?;

    let mut events: Vec<Event> = Vec::new();
    let mut skipped = Vec::new();
    let mut pos = header_end + 1;
    let mut line_no: u64 = 1;
    let mut torn_tail = None;
    while pos < bytes.len() {
        line_no += 1;
        let Some(end) = memchr_newline(bytes, pos) else {
            torn_tail = Some(TornTail {
                offset: pos as u64,
                line: line_no,
                bytes: (bytes.len() - pos) as u64,
                reason: "final line has no terminating newline".to_owned(),
            });
            break;
        };
        let line = &bytes[pos..end];
        let expected = events.len() as u64;
        let defect = match serde_json::from_slice::<Event>(line) {
            Ok(event) if event.seq.0 == expected => {
                if !event.is_known() {
                    if event.ignorable {
                        skipped.push(event.seq);
                    } else {
                        return Err(JournalError::Unsupported {
                            path: path.to_path_buf(),
                            reason: format!(
                                "line {line_no} (byte offset {pos}): unknown required event type {:?}",
                                event.kind
                            ),
                        });
                    }
                }
                events.push(event);
                pos = end + 1;
                continue;
            }
            Ok(event) => {
                let reason = format!("seq {} where {expected} was expected", event.seq);
                if event.kind == event_types::TURN_END {
                    return Err(corrupt(path, line_no, pos as u64, reason));
                }
                reason
            }
            Err(e) => format!("unparseable event line: {e}"),
        };
        // A defect: corruption if a completed turn follows, otherwise a torn tail.
        if let Some(turn_end_line) = later_turn_end(bytes, end + 1, line_no) {
            return Err(corrupt(
                path,
                line_no,
                pos as u64,
                format!("{defect}; a completed turn follows at line {turn_end_line}"),
            ));
        }
        torn_tail = Some(TornTail {
            offset: pos as u64,
            line: line_no,
            bytes: (bytes.len() - pos) as u64,
            reason: defect,
        });
        break;
    }
    let valid_len = torn_tail
        .as_ref()
        .map_or(bytes.len() as u64, |t: &TornTail| t.offset);
    Ok(Replay {
        path: path.to_path_buf(),
        header,
        events,
        skipped,
        torn_tail,
        valid_len,
    })
}

/// The line number of the first complete line at or after `pos` whose `type` is `turn/end`.
fn later_turn_end(bytes: &[u8], mut pos: usize, mut line_no: u64) -> Option<u64> {
    while pos < bytes.len() {
        line_no += 1;
        let end = memchr_newline(bytes, pos)?;
        if let Ok(t) = serde_json::from_slice::<TypeOnly<'_>>(&bytes[pos..end])
            && t.kind == event_types::TURN_END
        {
            return Some(line_no);
        }
        pos = end + 1;
    }
    None
}

fn memchr_newline(bytes: &[u8], from: usize) -> Option<usize> {
    bytes[from..]
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| from + i)
}

/// Reads only the header line of a session file (for listings).
///
/// # Errors
/// `JOURNAL_CORRUPT` for a missing or malformed header, `JOURNAL_UNSUPPORTED` for another
/// format version, `JOURNAL_IO` when the file cannot be read.
pub fn read_header(path: &Path) -> Result<SessionHeader> {
    use std::io::BufRead;
    let file = std::fs::File::open(path).map_err(|e| JournalError::io("open", path, e))?;
    let mut reader = std::io::BufReader::new(file);
    let mut line = Vec::new();
    reader
        .read_until(b'\n', &mut line)
        .map_err(|e| JournalError::io("read", path, e))?;
    if line.last() != Some(&b'\n') {
        return Err(corrupt(path, 1, 0, "missing header line"));
    }
    Ok(scan(path, &line)?.header)
}
