//! Replay: scanning a session file's bytes into a header and a validated event prefix
//! (REFERENCE a.9).

use std::borrow::Cow;
use std::io::{BufRead, Read};
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

/// What a streaming scan found, besides the events it handed out.
#[derive(Debug, Clone)]
pub struct ScanSummary {
    /// Line 1.
    pub header: SessionHeader,
    /// The seq after the last valid event (= number of valid events).
    pub next_seq: Seq,
    /// Seqs of unknown ignorable events (see [`Replay::skipped`]).
    pub skipped: Vec<Seq>,
    /// See [`Replay::torn_tail`].
    pub torn_tail: Option<TornTail>,
    /// See [`Replay::valid_len`].
    pub valid_len: u64,
}

/// The longest header line accepted, in bytes.
pub const MAX_HEADER_LEN: usize = 64 * 1024;

/// Parses a whole session file image. See [`scan_each`] for the rules and errors.
///
/// # Errors
/// As [`scan_each`].
pub fn scan(path: &Path, bytes: &[u8]) -> Result<Replay> {
    let mut events = Vec::new();
    let summary = scan_each(path, bytes, &mut |e| events.push(e))?;
    Ok(Replay {
        path: path.to_path_buf(),
        header: summary.header,
        events,
        skipped: summary.skipped,
        torn_tail: summary.torn_tail,
        valid_len: summary.valid_len,
    })
}

/// Reads one line (up to and including `\n`) into `buf`; returns its length (0 at EOF).
fn next_line(reader: &mut impl BufRead, buf: &mut Vec<u8>, path: &Path) -> Result<usize> {
    buf.clear();
    reader
        .read_until(b'\n', buf)
        .map_err(|e| JournalError::io("read", path, e))
}

/// Scans a session file from `reader`, handing each valid event to `on_event` in seq order
/// without keeping them (memory stays bounded by the longest line). `path` only names the file.
///
/// Rules (REFERENCE a.9): a final line without newline is a torn tail; a bad or
/// out-of-sequence line is a torn tail unless a later line is a `turn/end` (or it is itself a
/// `turn/end` with the wrong seq), which is committed corruption.
///
/// # Errors
/// - `JOURNAL_CORRUPT`: no complete header line (or one over [`MAX_HEADER_LEN`] bytes), a
///   header that is not a JSON `session` object, or committed corruption as above.
/// - `JOURNAL_UNSUPPORTED`: header `format` ≠ [`FORMAT_VERSION`], or a valid event of an
///   unknown type not marked `ignorable`.
/// - `JOURNAL_IO`: the reader failed.
pub fn scan_each(
    path: &Path,
    mut reader: impl BufRead,
    on_event: &mut dyn FnMut(Event),
) -> Result<ScanSummary> {
    let mut buf = Vec::new();
    let header_len = {
        let mut limited = (&mut reader).take(MAX_HEADER_LEN as u64 + 1);
        next_line(&mut limited, &mut buf, path)?
    };
    if header_len == 0 || buf.last() != Some(&b'\n') {
        let reason = if header_len > MAX_HEADER_LEN {
            format!("header line longer than {MAX_HEADER_LEN} bytes")
        } else {
            "missing header line".to_owned()
        };
        return Err(corrupt(path, 1, 0, reason));
    }
    let header = parse_header(path, &buf[..header_len - 1])?;

    let start = ScanPosition {
        offset: header_len as u64,
        next_seq: Seq::ZERO,
    };
    let tail = scan_events(path, reader, start, on_event)?;
    Ok(ScanSummary {
        header,
        next_seq: tail.next.next_seq,
        skipped: tail.skipped,
        torn_tail: tail.torn_tail,
        valid_len: tail.next.offset,
    })
}

/// Where an incremental read of a session file resumes: just after the last valid event read
/// so far. Every valid event is exactly one line, so the line number is `next_seq + 2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScanPosition {
    /// Byte offset of the first unread line (the valid length read so far).
    pub offset: u64,
    /// The seq the first unread event must have.
    pub next_seq: Seq,
}

impl ScanSummary {
    /// Where an incremental read ([`scan_events`], [`crate::Journal::read_each_from`]) continues
    /// after this scan: `{offset: valid_len, next_seq}`.
    pub fn position(&self) -> ScanPosition {
        ScanPosition {
            offset: self.valid_len,
            next_seq: self.next_seq,
        }
    }
}

/// What an incremental read ([`scan_events`]) found past its start position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanTail {
    /// Where the next incremental read continues (unchanged when nothing new was valid).
    pub next: ScanPosition,
    /// Seqs of unknown ignorable events read this time (see [`Replay::skipped`]).
    pub skipped: Vec<Seq>,
    /// Bytes after [`ScanTail::next`] that are not (yet) a valid event: an unfinished write of a
    /// live writer, or a crash artefact (see [`TornTail`]). A later read retries them.
    pub torn_tail: Option<TornTail>,
}

/// Scans the event lines of a session file from `reader`, which is positioned at
/// `start.offset`, handing each valid event to `on_event` in seq order (memory bounded by the
/// longest line). This is the body of [`scan_each`] after the header, and what follows a file
/// another process is still writing: call it again from [`ScanTail::next`] to read only what
/// was appended since.
///
/// Rules and errors as [`scan_each`] (torn tail vs. committed corruption, unknown required
/// types); byte offsets and line numbers in errors are those of the whole file.
///
/// # Errors
/// `JOURNAL_CORRUPT` for committed corruption, `JOURNAL_UNSUPPORTED` for an unknown required
/// event type, `JOURNAL_IO` when the reader fails.
pub fn scan_events(
    path: &Path,
    mut reader: impl BufRead,
    start: ScanPosition,
    on_event: &mut dyn FnMut(Event),
) -> Result<ScanTail> {
    let mut buf = Vec::new();
    let mut skipped = Vec::new();
    let mut pos = start.offset;
    let mut line_no: u64 = start.next_seq.0 + 1;
    let mut next_seq: u64 = start.next_seq.0;
    let mut torn_tail = None;
    loop {
        let len = next_line(&mut reader, &mut buf, path)?;
        if len == 0 {
            break;
        }
        line_no += 1;
        if buf.last() != Some(&b'\n') {
            torn_tail = Some(TornTail {
                offset: pos,
                line: line_no,
                bytes: len as u64,
                reason: "final line has no terminating newline".to_owned(),
            });
            break;
        }
        let line = &buf[..len - 1];
        let defect = match serde_json::from_slice::<Event>(line) {
            Ok(event) if event.seq.0 == next_seq => {
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
                next_seq += 1;
                on_event(event);
                pos += len as u64;
                continue;
            }
            Ok(event) => {
                let reason = format!("seq {} where {next_seq} was expected", event.seq);
                if event.kind == event_types::TURN_END {
                    return Err(corrupt(path, line_no, pos, reason));
                }
                reason
            }
            Err(e) => format!("unparseable event line: {e}"),
        };
        // A defect: corruption if a completed turn follows, otherwise a torn tail.
        let defect_line = line_no;
        let mut rest = len as u64;
        let mut later = line_no;
        loop {
            let n = next_line(&mut reader, &mut buf, path)?;
            if n == 0 {
                break;
            }
            later += 1;
            rest += n as u64;
            if buf.last() == Some(&b'\n')
                && let Ok(t) = serde_json::from_slice::<TypeOnly<'_>>(&buf[..n - 1])
                && t.kind == event_types::TURN_END
            {
                return Err(corrupt(
                    path,
                    defect_line,
                    pos,
                    format!("{defect}; a completed turn follows at line {later}"),
                ));
            }
        }
        torn_tail = Some(TornTail {
            offset: pos,
            line: defect_line,
            bytes: rest,
            reason: defect,
        });
        break;
    }
    Ok(ScanTail {
        next: ScanPosition {
            offset: pos,
            next_seq: Seq(next_seq),
        },
        skipped,
        torn_tail,
    })
}

fn parse_header(path: &Path, line: &[u8]) -> Result<SessionHeader> {
    let value: serde_json::Value = serde_json::from_slice(line)
        .map_err(|e| corrupt(path, 1, 0, format!("header is not JSON: {e}")))?;
    if !value.is_object() {
        return Err(corrupt(path, 1, 0, "header is not a JSON object"));
    }
    let raw: RawHeader<'_> = serde_json::from_slice(line)
        .map_err(|e| corrupt(path, 1, 0, format!("invalid header: {e}")))?;
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
    serde_json::from_value(value).map_err(|e| corrupt(path, 1, 0, format!("invalid header: {e}")))
}

/// Opens a regular file for reading, refusing directories, FIFOs and devices.
pub(crate) fn open_regular(path: &Path) -> Result<std::fs::File> {
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => {
            return Err(JournalError::NotAFile {
                path: path.to_path_buf(),
            });
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(JournalError::NotFound {
                id: path.display().to_string(),
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(JournalError::io("stat", path, e)),
    }
    std::fs::File::open(path).map_err(|e| JournalError::io("open", path, e))
}

/// Reads only the header line of a session file (for listings), at most
/// [`MAX_HEADER_LEN`] bytes of it.
///
/// # Errors
/// `JOURNAL_NOT_A_FILE` for a directory, FIFO or device; `SESSION_NOT_FOUND`;
/// `JOURNAL_CORRUPT` for a missing, over-long or malformed header; `JOURNAL_UNSUPPORTED` for
/// another format version; `JOURNAL_IO` when the file cannot be read.
pub fn read_header(path: &Path) -> Result<SessionHeader> {
    let file = open_regular(path)?;
    let mut reader = std::io::BufReader::new(file).take(MAX_HEADER_LEN as u64 + 1);
    let mut line = Vec::new();
    let len = next_line(&mut reader, &mut line, path)?;
    if len == 0 || line.last() != Some(&b'\n') {
        let reason = if len > MAX_HEADER_LEN {
            format!("header line longer than {MAX_HEADER_LEN} bytes")
        } else {
            "missing header line".to_owned()
        };
        return Err(corrupt(path, 1, 0, reason));
    }
    parse_header(path, &line[..len - 1])
}
