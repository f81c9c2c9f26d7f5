//! Replay: scanning a session file's bytes into a header and a validated event prefix
//! (REFERENCE a.9).

use std::borrow::Cow;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::value::RawValue;
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

/// One valid event of a session file with its payload still JSON text, handed out by
/// [`scan_raw_each`]. It borrows the scanner's line buffer, so it lives only for the callback.
///
/// The event is exactly the one [`scan_each`] hands out for the same line: same `seq`, `time`,
/// `type` and `ignorable`, and `data` is the line's own payload text (`null` when the line has
/// none), which parses into the [`Event::data`] `scan_each` gives.
#[derive(Debug, Clone, Copy)]
pub struct RawEvent<'a> {
    /// Position in the log.
    pub seq: Seq,
    /// Append time, epoch milliseconds.
    pub time: u64,
    /// The event type.
    pub kind: &'a str,
    /// The payload, unparsed (valid JSON; parsing it into a `serde_json::Value` succeeds).
    pub data: &'a RawValue,
    /// See [`Event::ignorable`].
    pub ignorable: bool,
}

impl RawEvent<'_> {
    /// Whether this build knows the event's type (see [`Event::is_known`]).
    pub fn is_known(&self) -> bool {
        event_types::is_known(self.kind)
    }

    /// The owned [`Event`], with `data` parsed into a `serde_json::Value`.
    ///
    /// # Errors
    /// Only for a `data` the scanner did not produce (for example deeper than serde_json's
    /// recursion limit); events from [`scan_raw_each`] always convert.
    pub fn to_event(&self) -> serde_json::Result<Event> {
        Ok(Event {
            seq: self.seq,
            time: self.time,
            kind: self.kind.to_owned(),
            data: serde_json::from_str(self.data.get())?,
            ignorable: self.ignorable,
        })
    }
}

/// The envelope of an event line with `data` left unparsed. Same fields, types, order and
/// defaults as [`Event`], so it accepts exactly the lines `Event` accepts, except that `data`
/// is only checked for JSON syntax (see [`value_parse_certain`]).
#[derive(Deserialize)]
struct RawEnvelope<'a> {
    seq: Seq,
    time: u64,
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    /// `None` for an absent or `null` payload (`Event::data` is then `null`).
    #[serde(default, borrow)]
    data: Option<&'a RawValue>,
    #[serde(default)]
    ignorable: bool,
}

/// An event line decoded without parsing its payload (see [`RawEvent`]).
struct RawLine<'a> {
    seq: Seq,
    time: u64,
    kind: Cow<'a, str>,
    data: RawData<'a>,
    ignorable: bool,
}

enum RawData<'a> {
    /// The payload's own text in the line (always, for a line `Event` accepts).
    Borrowed(&'a RawValue),
    /// Re-encoded from a parsed `Event`: only if [`RawEnvelope`] refused a line that `Event`
    /// accepts, which the two types' identical shapes rule out.
    Owned(Box<RawValue>),
}

impl RawLine<'_> {
    fn event(&self) -> RawEvent<'_> {
        RawEvent {
            seq: self.seq,
            time: self.time,
            kind: &self.kind,
            data: match &self.data {
                RawData::Borrowed(data) => data,
                RawData::Owned(data) => data,
            },
            ignorable: self.ignorable,
        }
    }
}

/// How the scanner decodes one event line: the rules of [`scan_lines`] only need the seq, the
/// type and the `ignorable` flag of a decoded line.
trait LineDecoder {
    /// A decoded line, possibly borrowing it.
    type Line<'a>;

    /// Decodes `line` (without its newline), or says why it is not a valid event line (the
    /// same reason for both decoders).
    fn decode(line: &[u8]) -> std::result::Result<Self::Line<'_>, String>;
    fn seq(line: &Self::Line<'_>) -> Seq;
    fn kind<'a>(line: &'a Self::Line<'_>) -> &'a str;
    fn ignorable(line: &Self::Line<'_>) -> bool;
}

/// Full events: `data` parsed into a `serde_json::Value`.
struct FullLines;

/// The one definition of a valid event line: what `serde_json` accepts as an [`Event`].
fn decode_event(line: &[u8]) -> std::result::Result<Event, String> {
    serde_json::from_slice::<Event>(line).map_err(|e| format!("unparseable event line: {e}"))
}

impl LineDecoder for FullLines {
    type Line<'a> = Event;

    fn decode(line: &[u8]) -> std::result::Result<Event, String> {
        decode_event(line)
    }
    fn seq(line: &Event) -> Seq {
        line.seq
    }
    fn kind(line: &Event) -> &str {
        &line.kind
    }
    fn ignorable(line: &Event) -> bool {
        line.ignorable
    }
}

/// Raw events: the envelope is parsed, `data` only located and checked.
struct RawLines;

impl LineDecoder for RawLines {
    type Line<'a> = RawLine<'a>;

    fn decode(line: &[u8]) -> std::result::Result<RawLine<'_>, String> {
        // One UTF-8 check of the whole line is cheaper than serde_json's checks of each string
        // and of the payload; a line with other bytes (only valid if they sit in an ignored
        // field) is read as bytes.
        let envelope = match std::str::from_utf8(line) {
            Ok(text) => serde_json::from_str::<RawEnvelope<'_>>(text),
            Err(_) => serde_json::from_slice::<RawEnvelope<'_>>(line),
        };
        if let Ok(envelope) = envelope {
            let data = envelope.data.unwrap_or(RawValue::NULL);
            // The envelope accepted the line and only `data` can still make `Event` refuse it:
            // when the cheap check cannot vouch for `data`, the full parse decides.
            if !value_parse_certain(data.get().as_bytes()) {
                decode_event(line)?;
            }
            return Ok(RawLine {
                seq: envelope.seq,
                time: envelope.time,
                kind: envelope.kind,
                data: RawData::Borrowed(data),
                ignorable: envelope.ignorable,
            });
        }
        // Refused: the full parse gives the exact reason `scan_each` reports.
        let event = decode_event(line)?;
        let data = serde_json::value::to_raw_value(&event.data)
            .map_err(|e| format!("unparseable event line: {e}"))?;
        Ok(RawLine {
            seq: event.seq,
            time: event.time,
            kind: Cow::Owned(event.kind),
            data: RawData::Owned(data),
            ignorable: event.ignorable,
        })
    }
    fn seq(line: &RawLine<'_>) -> Seq {
        line.seq
    }
    fn kind<'a>(line: &'a RawLine<'_>) -> &'a str {
        &line.kind
    }
    fn ignorable(line: &RawLine<'_>) -> bool {
        line.ignorable
    }
}

/// The deepest `data` nesting [`value_parse_certain`] vouches for. serde_json refuses more
/// than 127 nested levels per line and the event object is one of them; this leaves a margin
/// (the writer refuses more than [`crate::MAX_DATA_DEPTH`] anyway).
const CERTAIN_DEPTH: u32 = 100;

/// The most digits of one number [`value_parse_certain`] vouches for (any such number without
/// an exponent is below 10^300, so it parses into a finite `f64`).
const CERTAIN_DIGITS: u32 = 300;

/// Whether parsing `json` into a `serde_json::Value` (as the `data` of an event line) surely
/// succeeds, given that serde_json's syntax-only skip (what a `&RawValue` gets) accepted it:
/// valid UTF-8, valid JSON syntax, no control characters in strings, valid escapes.
///
/// Beyond that, a `Value` parse refuses only three things: a nesting deeper than its recursion
/// limit, a `\u` escape of an unpaired UTF-16 surrogate, and a number outside the `f64` range.
/// So this answers `false` ("not sure") for any nesting over [`CERTAIN_DEPTH`], any `\u`
/// escape in `D800..=DFFF` (paired or not), any number with an exponent and any number of more
/// than [`CERTAIN_DIGITS`] digits; the caller then does the full parse. Troupe's own writer
/// (serde_json) produces none of these in practice.
fn value_parse_certain(json: &[u8]) -> bool {
    let mut depth: u32 = 0;
    // Digits of the number being read (0 outside numbers).
    let mut digits: u32 = 0;
    let mut i = 0;
    while let Some(&byte) = json.get(i) {
        i += 1;
        match byte {
            b'"' => {
                // Inside a string only escapes matter; the closing quote is the first
                // unescaped one.
                loop {
                    let Some(at) = memchr::memchr2(b'"', b'\\', &json[i..]) else {
                        return false;
                    };
                    i += at + 1;
                    if json[i - 1] == b'"' {
                        break;
                    }
                    // `\u` + a first hex digit `d`: a surrogate (D800..=DFFF) or close to one.
                    if json.get(i) == Some(&b'u') && matches!(json.get(i + 1), Some(b'd' | b'D')) {
                        return false;
                    }
                    // Skip the escaped character (a `\u`'s hex digits are plain characters).
                    i += 1;
                }
                digits = 0;
            }
            b'0'..=b'9' => {
                digits += 1;
                if digits > CERTAIN_DIGITS {
                    return false;
                }
            }
            // A decimal point continues the number.
            b'.' => {}
            // An exponent (a letter right after a digit; `true`/`false` have none there).
            b'e' | b'E' if digits > 0 => return false,
            b'[' | b'{' => {
                depth += 1;
                if depth > CERTAIN_DEPTH {
                    return false;
                }
                digits = 0;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                digits = 0;
            }
            _ => digits = 0,
        }
    }
    true
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
    reader: impl BufRead,
    on_event: &mut dyn FnMut(Event),
) -> Result<ScanSummary> {
    scan_lines::<FullLines>(path, reader, on_event)
}

/// [`scan_each`] without parsing payloads: each valid event is handed out as a [`RawEvent`]
/// whose `data` is the line's payload text. The rules, the valid prefix, the summary and every
/// error are exactly those of [`scan_each`] for the same bytes (a payload is still checked to
/// be one `scan_each` accepts, cheaply, and fully parsed only when that check is unsure).
///
/// # Errors
/// As [`scan_each`].
pub fn scan_raw_each(
    path: &Path,
    reader: impl BufRead,
    on_event: &mut dyn FnMut(RawEvent<'_>),
) -> Result<ScanSummary> {
    scan_lines::<RawLines>(path, reader, &mut |line: RawLine<'_>| {
        on_event(line.event())
    })
}

/// What one event line did to the scan.
enum Step {
    /// A valid event, handed out.
    Event,
    /// A bad or out-of-sequence line: a torn tail, or corruption if a completed turn follows.
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
    /// Applies the rules to one complete line (`line` without its newline).
    fn step<D: LineDecoder + 'static>(
        &mut self,
        line: &[u8],
        on_line: &mut dyn FnMut(D::Line<'_>),
    ) -> Step {
        let decoded = match D::decode(line) {
            Ok(decoded) => decoded,
            Err(reason) => return Step::Defect(reason),
        };
        let seq = D::seq(&decoded);
        if seq.0 != self.next_seq {
            let reason = format!("seq {seq} where {} was expected", self.next_seq);
            if D::kind(&decoded) == event_types::TURN_END {
                return Step::Refused(corrupt(self.path, self.line_no, self.pos, reason));
            }
            return Step::Defect(reason);
        }
        let kind = D::kind(&decoded);
        if !event_types::is_known(kind) {
            if D::ignorable(&decoded) {
                self.skipped.push(seq);
            } else {
                return Step::Refused(JournalError::Unsupported {
                    path: self.path.to_path_buf(),
                    reason: format!(
                        "line {} (byte offset {}): unknown required event type {kind:?}",
                        self.line_no, self.pos
                    ),
                });
            }
        }
        self.next_seq += 1;
        on_line(decoded);
        Step::Event
    }
}

/// The scanner behind [`scan_each`] and [`scan_raw_each`]: the REFERENCE a.9 rules, with
/// `D` decoding the event lines. Lines are read straight from the reader's buffer when they
/// lie whole in it, and copied only when they straddle a refill.
fn scan_lines<D: LineDecoder + 'static>(
    path: &Path,
    mut reader: impl BufRead,
    on_line: &mut dyn FnMut(D::Line<'_>),
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

    let mut cursor = Cursor {
        path,
        pos: header_len as u64,
        line_no: 1,
        next_seq: 0,
        skipped: Vec::new(),
    };
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
        cursor.line_no += 1;
        let (step, len) = match memchr::memchr(b'\n', available) {
            Some(end) => {
                let step = cursor.step::<D>(&available[..end], on_line);
                reader.consume(end + 1);
                (step, end + 1)
            }
            None => {
                // The line straddles the buffer's end (or is the unterminated last line).
                let len = next_line(&mut reader, &mut buf, path)?;
                if buf.last() != Some(&b'\n') {
                    torn_tail = Some(TornTail {
                        offset: cursor.pos,
                        line: cursor.line_no,
                        bytes: len as u64,
                        reason: "final line has no terminating newline".to_owned(),
                    });
                    break;
                }
                (cursor.step::<D>(&buf[..len - 1], on_line), len)
            }
        };
        let defect = match step {
            Step::Event => {
                cursor.pos += len as u64;
                continue;
            }
            Step::Refused(e) => return Err(e),
            Step::Defect(reason) => reason,
        };
        // A defect: corruption if a completed turn follows, otherwise a torn tail.
        let defect_line = cursor.line_no;
        let mut rest = len as u64;
        let mut later = cursor.line_no;
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
                    cursor.pos,
                    format!("{defect}; a completed turn follows at line {later}"),
                ));
            }
        }
        torn_tail = Some(TornTail {
            offset: cursor.pos,
            line: defect_line,
            bytes: rest,
            reason: defect,
        });
        break;
    }
    Ok(ScanSummary {
        header,
        next_seq: Seq(cursor.next_seq),
        skipped: cursor.skipped,
        torn_tail,
        valid_len: cursor.pos,
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
