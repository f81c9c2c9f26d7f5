//! Replay: scanning a session file's bytes into a header and a validated event prefix
//! (REFERENCE a.9).

use std::borrow::Cow;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use troupe_protocol::json_scan::{read_u64, skip_ws};
use troupe_protocol::{Event, FORMAT_VERSION, HEADER_TYPE, Seq, SessionHeader, event_types};

use crate::error::{JournalError, Result};

/// Where the valid part of a session file ends and why the rest was not used.
///
/// A torn tail is the artefact of a write a crash cut short (DESIGN decision 9): a final line
/// without its newline, or a final batch the file ends inside (see [`scan_each`]). Nothing
/// else is ever a torn tail: damage anywhere else is `JOURNAL_CORRUPT`.
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

/// How much a selective scan ([`scan_selected_each`]) checks of a line whose type the reader
/// did not select.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineCheck {
    /// Only the line's *envelope prefix*: its leading top-level members `seq`, `time`, `type`
    /// and `ignorable`, read up to the point where `seq`, `time` and `type` are known (see
    /// [`scan_selected_each`]). The rest of the line — `data`, later members, the closing
    /// brace — is not read, so damage there is not detected. For readers of logs this
    /// journal wrote (where damage can only be a torn tail, which is still found exactly).
    Prefix,
    /// Everything [`scan_each`] checks: the whole line is parsed as an [`Event`] (and dropped).
    Full,
}

/// A line of a selected type, handed to the reader of a selective scan unparsed: the scan has
/// read its `seq` (the expected one), `time` and `type` (a known one) from the envelope prefix,
/// nothing else. It borrows the scanner's buffer, so it lives only for the callback.
#[derive(Debug, Clone, Copy)]
pub struct EventLine<'a> {
    /// Position in the log.
    pub seq: Seq,
    /// The event type.
    pub kind: &'a str,
    /// The whole line (valid UTF-8, without its newline).
    pub text: &'a str,
}

/// What a selective scan hands to its reader for a line of a selected type.
#[derive(Debug)]
pub enum Selected<'a> {
    /// The line unparsed. The reader either decodes it itself and answers [`LineUse::Used`] —
    /// only allowed when its decoder accepts nothing that [`Event`] refuses, since the scan
    /// then counts the line as a valid event — or answers [`LineUse::NeedEvent`], changing
    /// nothing: the scan then parses the line into an [`Event`] and, if it is a valid event,
    /// hands it out as [`Selected::Event`]; if it is not, the line is a defect like in
    /// [`scan_each`].
    Line(EventLine<'a>),
    /// The line parsed in full: after [`LineUse::NeedEvent`], or when its envelope prefix was
    /// not one the scan reads (other member order, escapes, an unknown type, a wrong seq). The
    /// reader's answer is ignored.
    Event(Event),
}

/// The reader's answer to [`Selected::Line`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineUse {
    /// The reader decoded the line (a valid event: the scan moves on).
    Used,
    /// The reader wants the line parsed into an [`Event`] first.
    NeedEvent,
}

/// What the scanner does with each line.
enum Sink<'f> {
    /// [`scan_each`]: every event parsed and handed out.
    All(&'f mut dyn FnMut(Event)),
    /// [`scan_selected_each`].
    Selected {
        check: LineCheck,
        select: &'f dyn Fn(&str) -> bool,
        on_selected: &'f mut dyn FnMut(Selected<'_>) -> LineUse,
    },
}

/// The one definition of a valid event line: what `serde_json` accepts as an [`Event`].
fn decode_event(line: &[u8]) -> std::result::Result<Event, String> {
    serde_json::from_slice::<Event>(line).map_err(|e| format!("unparseable event line: {e}"))
}

/// What the envelope prefix of a line says (see [`read_prefix`]).
#[derive(Debug, Clone, Copy)]
struct Prefix {
    seq: u64,
    /// A known type ([`event_types::KNOWN`]).
    kind: &'static str,
    /// The line's `batchLast`, when the prefix holds one.
    batch_last: Option<u64>,
}

/// Reads the envelope prefix of an event line: its first top-level members, each `seq`,
/// `time`, `type`, `batchLast` or `ignorable`, up to the point where `seq`, `time` and `type`
/// have all been read and a `,` follows — and one member further when that member is
/// `batchLast`, which Troupe writes right after `type`. Any member order is fine (Troupe writes
/// `{"seq":…,"time":…,"type":…,"batchLast"?:…,"data":…}`; other writers put `type` first).
///
/// `None` ("the full parse decides") for anything unusual: not an object, a key with an
/// escape, another member before `seq`, `time` and `type` are read, a repeated member, a `seq`,
/// `time` or `batchLast` that is not a plain non-negative integer fitting `u64` (no sign,
/// fraction, exponent or leading zero), a `type` that is not one of [`event_types::KNOWN`]
/// written plainly (no escapes), an `ignorable` that is not `true`/`false`, or the object
/// ending within the prefix. When it answers, the values are the ones [`Event`] would read for
/// those members. (A `batchLast` written after `data` is not seen here; Troupe never writes it
/// there, and the full parse of [`scan_each`] reads it wherever it is.)
fn read_prefix(line: &[u8]) -> Option<Prefix> {
    let mut at = skip_ws(line, 0);
    if line.get(at) != Some(&b'{') {
        return None;
    }
    at += 1;
    let (mut seq, mut kind, mut time, mut ignorable, mut batch_last) =
        (None, None, false, false, None);
    loop {
        at = skip_ws(line, at);
        let (key, after) = read_plain_string(line, at)?;
        at = skip_ws(line, after);
        if line.get(at) != Some(&b':') {
            return None;
        }
        at = skip_ws(line, at + 1);
        at = match key {
            b"seq" if seq.is_none() => {
                let (value, after) = read_u64(line, at)?;
                seq = Some(value);
                after
            }
            b"time" if !time => {
                time = true;
                read_u64(line, at)?.1
            }
            b"type" if kind.is_none() => {
                let (value, after) = read_plain_string(line, at)?;
                kind = Some(
                    *event_types::KNOWN
                        .iter()
                        .find(|known| known.as_bytes() == value)?,
                );
                after
            }
            b"batchLast" if batch_last.is_none() => {
                let (value, after) = read_u64(line, at)?;
                batch_last = Some(value);
                after
            }
            b"ignorable" if !ignorable => {
                ignorable = true;
                let rest = &line[at..];
                if rest.starts_with(b"true") {
                    at + 4
                } else if rest.starts_with(b"false") {
                    at + 5
                } else {
                    return None;
                }
            }
            _ => return None,
        };
        at = skip_ws(line, at);
        if line.get(at) != Some(&b',') {
            return None;
        }
        at += 1;
        if let (Some(seq), Some(kind), true) = (seq, kind, time) {
            let next = skip_ws(line, at);
            if batch_last.is_none() && line[next..].starts_with(b"\"batchLast\"") {
                continue;
            }
            return Some(Prefix {
                seq,
                kind,
                batch_last,
            });
        }
    }
}

/// A line read as far as the scan needed: its envelope prefix (the selective scan's fast
/// path) or the whole event (or why it is not one).
enum Parsed {
    Prefix(Prefix),
    Full(std::result::Result<Event, String>),
}

impl Parsed {
    /// Reads `line`: the prefix only when `fast` and the prefix is a usual one.
    fn of(line: &[u8], fast: bool) -> Self {
        if fast && let Some(prefix) = read_prefix(line) {
            return Self::Prefix(prefix);
        }
        Self::Full(decode_event(line))
    }

    /// The line's seq and `batchLast` (its batch framing), or why it has none.
    fn frame(&self) -> std::result::Result<(u64, Option<u64>), &str> {
        match self {
            Self::Prefix(p) => Ok((p.seq, p.batch_last)),
            Self::Full(Ok(e)) => Ok((e.seq.0, e.batch_last.map(|s| s.0))),
            Self::Full(Err(reason)) => Err(reason),
        }
    }
}

/// The bytes of a JSON string at `at` that has no escapes (its first backslash or quote is
/// its closing quote), and the index after its closing quote. The caller compares the bytes
/// with plain ASCII names only, so control characters and UTF-8 need no check here.
fn read_plain_string(line: &[u8], at: usize) -> Option<(&[u8], usize)> {
    if line.get(at) != Some(&b'"') {
        return None;
    }
    let start = at + 1;
    let len = memchr::memchr2(b'"', b'\\', line.get(start..)?)?;
    if line[start + len] != b'"' {
        return None;
    }
    Some((&line[start..start + len], start + len + 1))
}

/// Scans a session file from `reader`, handing each valid event to `on_event` in seq order
/// without keeping them (memory stays bounded by the longest line). `path` only names the file.
///
/// Rules (REFERENCE a.9 as DESIGN decision 9 tightens it): events are used a whole batch at a
/// time (a batch is the events `seq..=batchLast` of a line that has a `batchLast`, else that
/// line alone), so the valid prefix always ends on a batch boundary. Only an unfinished final
/// write is a torn tail: a final line without its newline, or a final batch the file ends
/// inside (its complete lines included). Any complete line that is not a valid event with the
/// next seq — unparseable, out of sequence, a `batchLast` before its own seq, past
/// [`MAX_BATCH_EVENTS`], or inside another batch — is committed corruption, wherever it is.
///
/// # Errors
/// - `JOURNAL_CORRUPT`: no complete header line (or one over [`MAX_HEADER_LEN`] bytes), a
///   header that is not a JSON `session` object, or committed corruption as above (with the
///   file, the 1-based line number and the byte offset of the line).
/// - `JOURNAL_UNSUPPORTED`: header `format` ≠ [`FORMAT_VERSION`], or a valid event of an
///   unknown type not marked `ignorable`.
/// - `JOURNAL_IO`: the reader failed.
pub fn scan_each(
    path: &Path,
    reader: impl BufRead,
    on_event: &mut dyn FnMut(Event),
) -> Result<ScanSummary> {
    scan_lines(path, reader, Sink::All(on_event))
}

/// A selective scan: [`scan_each`] for readers that want only a few event types (`select`
/// says which), such as the Team fold. Lines of other types are not parsed.
///
/// Every line's envelope prefix is read without a JSON parser (see [`LineCheck::Prefix`];
/// memchr finds the line ends). Then:
/// - a line of a selected type is handed out as [`Selected::Line`] (its text; the reader
///   decodes it in one pass) or, when the reader asks or the prefix was unusual, parsed and
///   handed out as [`Selected::Event`];
/// - a line of another type is accepted on its prefix with [`LineCheck::Prefix`], or parsed in
///   full and dropped with [`LineCheck::Full`];
/// - a line whose prefix is unusual, whose seq is not the expected one or whose type is not
///   known is parsed in full, exactly as in [`scan_each`] (so defects, torn tails, corruption,
///   unknown required types and skipped ignorable types are found the same way).
///
/// The reader's side of the contract is on [`Selected::Line`]. Selected lines come in seq
/// order, and each valid one is used exactly once: as a line the reader answered
/// [`LineUse::Used`] to, or as its parsed event.
///
/// With [`LineCheck::Full`] the valid prefix, the summary and every error are those of
/// [`scan_each`] for the same bytes, and the selected events are the same ones. With
/// [`LineCheck::Prefix`] they are too unless a line of an unselected type is damaged after its
/// envelope prefix (which [`scan_each`] reports as a torn tail or corruption, and this scan
/// reads past); a torn final line (no newline) is never handed out either way.
///
/// # Errors
/// As [`scan_each`].
pub fn scan_selected_each(
    path: &Path,
    reader: impl BufRead,
    check: LineCheck,
    select: &dyn Fn(&str) -> bool,
    on_selected: &mut dyn FnMut(Selected<'_>) -> LineUse,
) -> Result<ScanSummary> {
    scan_lines(
        path,
        reader,
        Sink::Selected {
            check,
            select,
            on_selected,
        },
    )
}

/// What one event line did to the scan.
enum Step {
    /// A valid event, handed out.
    Event,
    /// A bad or out-of-sequence line. On a complete line this is committed corruption
    /// (DESIGN decision 9): only an unfinished final write may be cut.
    Defect(String),
    /// The load is refused.
    Refused(JournalError),
}

/// The scan position: everything the rules need besides the current line.
struct Cursor<'p> {
    path: &'p Path,
    /// Byte offset of the current line (= length of the valid prefix so far).
    pos: u64,
    /// 1-based number of the current line.
    line_no: u64,
    next_seq: u64,
    skipped: Vec<Seq>,
}

impl Cursor<'_> {
    /// Applies the rules to one complete line (`line` without its newline, read as `parsed`).
    fn step(&mut self, line: &[u8], parsed: Parsed, sink: &mut Sink<'_>) -> Step {
        let parsed = match parsed {
            Parsed::Prefix(prefix) => {
                if let Sink::Selected {
                    check,
                    select,
                    on_selected,
                } = sink
                    && prefix.seq == self.next_seq
                {
                    if select(prefix.kind) {
                        if let Ok(text) = simdutf8::basic::from_utf8(line) {
                            let line = EventLine {
                                seq: Seq(prefix.seq),
                                kind: prefix.kind,
                                text,
                            };
                            if on_selected(Selected::Line(line)) == LineUse::Used {
                                self.next_seq += 1;
                                return Step::Event;
                            }
                        }
                    } else if *check == LineCheck::Prefix {
                        self.next_seq += 1;
                        return Step::Event;
                    }
                }
                decode_event(line)
            }
            Parsed::Full(parsed) => parsed,
        };
        let event = match parsed {
            Ok(event) => event,
            Err(reason) => return Step::Defect(reason),
        };
        if event.seq.0 != self.next_seq {
            return Step::Defect(format!(
                "seq {} where {} was expected",
                event.seq, self.next_seq
            ));
        }
        if !event.is_known() {
            if event.ignorable {
                self.skipped.push(event.seq);
            } else {
                return Step::Refused(JournalError::Unsupported {
                    path: self.path.to_path_buf(),
                    reason: format!(
                        "line {} (byte offset {}): unknown required event type {:?}",
                        self.line_no, self.pos, event.kind
                    ),
                });
            }
        }
        self.next_seq += 1;
        match sink {
            Sink::All(on_event) => on_event(event),
            Sink::Selected {
                select,
                on_selected,
                ..
            } => {
                if select(&event.kind) {
                    on_selected(Selected::Event(event));
                }
            }
        }
        Step::Event
    }

    /// Applies [`Cursor::step`] and moves past the line (`len` bytes with its newline), or
    /// turns its defect into committed corruption.
    fn accept(&mut self, line: &[u8], len: u64, parsed: Parsed, sink: &mut Sink<'_>) -> Result<()> {
        match self.step(line, parsed, sink) {
            Step::Event => {
                self.pos += len;
                Ok(())
            }
            Step::Defect(reason) => Err(corrupt(self.path, self.line_no, self.pos, reason)),
            Step::Refused(e) => Err(e),
        }
    }
}

/// The most events one batch may hold (DESIGN decision 9). A larger `batchLast` is a defect,
/// so a damaged one cannot make the rest of a log look like one unfinished batch.
pub const MAX_BATCH_EVENTS: u64 = 65_536;

/// A batch whose lines are being collected: its events are used only once all are there.
struct OpenBatch {
    /// Seq of its last event (the first line's `batchLast`).
    last: u64,
    /// The seq the next line of the batch must have.
    next: u64,
    /// Line number (1-based, in the whole file) of its first line.
    first_line: u64,
    /// Its lines so far, each with its newline.
    bytes: Vec<u8>,
    /// End offsets (in `bytes`) of each line, and how it was read.
    lines: Vec<(usize, Parsed)>,
}

impl OpenBatch {
    /// Why the batch collected so far is a torn tail (the file ends inside it).
    fn incomplete(&self) -> String {
        let first = self.next - self.lines.len() as u64;
        format!(
            "unfinished batch: events {first}..={} were appended together and only {} are in \
             the file",
            self.last,
            self.lines.len()
        )
    }
}

/// The scanner behind [`scan_each`] and [`scan_selected_each`]: reads the header line, then
/// hands the event lines to [`scan_body`].
fn scan_lines(path: &Path, mut reader: impl BufRead, sink: Sink<'_>) -> Result<ScanSummary> {
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
    let tail = scan_body(path, reader, start, sink)?;
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
    reader: impl BufRead,
    start: ScanPosition,
    on_event: &mut dyn FnMut(Event),
) -> Result<ScanTail> {
    scan_body(path, reader, start, Sink::All(on_event))
}

/// The event lines of a session file from `start` on (the reader is positioned at
/// `start.offset`): the REFERENCE a.9 rules behind [`scan_each`], [`scan_selected_each`] and
/// [`scan_events`]. Lines are read straight from the reader's buffer when they lie whole in
/// it, and copied only when they straddle a refill.
fn scan_body(
    path: &Path,
    mut reader: impl BufRead,
    start: ScanPosition,
    mut sink: Sink<'_>,
) -> Result<ScanTail> {
    let fast = matches!(sink, Sink::Selected { .. });
    let mut buf = Vec::new();
    let mut cursor = Cursor {
        path,
        pos: start.offset,
        line_no: start.next_seq.0 + 1,
        next_seq: start.next_seq.0,
        skipped: Vec::new(),
    };
    // The batch whose lines are being collected; `cursor` stays at its first line meanwhile.
    let mut open: Option<OpenBatch> = None;
    let mut torn_tail = None;
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(JournalError::io("read", path, e)),
        };
        if available.is_empty() {
            break;
        }
        let line_no = open
            .as_ref()
            .map_or(cursor.line_no + 1, |b| b.first_line + b.lines.len() as u64);
        // The line, from the reader's buffer when it lies whole in it.
        let (line, len, whole) = match memchr::memchr(b'\n', available) {
            Some(end) => (&available[..end], end + 1, true),
            None => {
                // The line straddles the buffer's end (or is the unterminated last line).
                let len = next_line(&mut reader, &mut buf, path)?;
                if buf.last() != Some(&b'\n') {
                    let (offset, line, reason, bytes) = match &open {
                        Some(batch) => (
                            cursor.pos,
                            batch.first_line,
                            batch.incomplete(),
                            (batch.bytes.len() + len) as u64,
                        ),
                        None => (
                            cursor.pos,
                            line_no,
                            "final line has no terminating newline".to_owned(),
                            len as u64,
                        ),
                    };
                    torn_tail = Some(TornTail {
                        offset,
                        line,
                        bytes,
                        reason,
                    });
                    open = None;
                    break;
                }
                (&buf[..len - 1], len, false)
            }
        };
        let parsed = Parsed::of(line, fast);
        match open.as_mut() {
            None => {
                cursor.line_no = line_no;
                match parsed.frame() {
                    Ok((seq, Some(last))) if seq == cursor.next_seq && last > seq => {
                        if last - seq >= MAX_BATCH_EVENTS {
                            return Err(corrupt(
                                path,
                                line_no,
                                cursor.pos,
                                format!(
                                    "batchLast {last} opens a batch of more than \
                                     {MAX_BATCH_EVENTS} events"
                                ),
                            ));
                        }
                        let mut batch = OpenBatch {
                            last,
                            next: seq + 1,
                            first_line: line_no,
                            bytes: Vec::new(),
                            lines: Vec::new(),
                        };
                        batch.bytes.extend_from_slice(line);
                        batch.bytes.push(b'\n');
                        batch.lines.push((batch.bytes.len(), parsed));
                        open = Some(batch);
                    }
                    Ok((seq, Some(last))) if seq == cursor.next_seq && last < seq => {
                        return Err(corrupt(
                            path,
                            line_no,
                            cursor.pos,
                            format!("batchLast {last} is before the event's own seq {seq}"),
                        ));
                    }
                    _ => cursor.accept(line, len as u64, parsed, &mut sink)?,
                }
            }
            Some(batch) => {
                let at = cursor.pos + batch.bytes.len() as u64;
                match parsed.frame() {
                    Ok((seq, None)) if seq == batch.next => {}
                    Ok((seq, Some(_))) if seq == batch.next => {
                        return Err(corrupt(
                            path,
                            line_no,
                            at,
                            format!(
                                "event {seq} opens a batch inside the batch that ends at seq {}",
                                batch.last
                            ),
                        ));
                    }
                    Ok((seq, _)) => {
                        return Err(corrupt(
                            path,
                            line_no,
                            at,
                            format!("seq {seq} where {} was expected", batch.next),
                        ));
                    }
                    Err(reason) => return Err(corrupt(path, line_no, at, reason.to_owned())),
                }
                batch.bytes.extend_from_slice(line);
                batch.bytes.push(b'\n');
                batch.lines.push((batch.bytes.len(), parsed));
                batch.next += 1;
                if let Some(batch) = open.take_if(|b| b.next > b.last) {
                    // Whole: its events are used now, in order.
                    let mut from = 0;
                    for (i, (end, parsed)) in batch.lines.into_iter().enumerate() {
                        cursor.line_no = batch.first_line + i as u64;
                        let line = &batch.bytes[from..end - 1];
                        cursor.accept(line, (end - from) as u64, parsed, &mut sink)?;
                        from = end;
                    }
                }
            }
        }
        if whole {
            reader.consume(len);
        }
    }
    if let Some(batch) = open {
        torn_tail = Some(TornTail {
            offset: cursor.pos,
            line: batch.first_line,
            bytes: batch.bytes.len() as u64,
            reason: batch.incomplete(),
        });
    }
    Ok(ScanTail {
        next: ScanPosition {
            offset: cursor.pos,
            next_seq: Seq(cursor.next_seq),
        },
        skipped: cursor.skipped,
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
