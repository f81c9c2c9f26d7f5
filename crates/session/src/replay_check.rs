//! What a resume's replay refuses, decided without building the transcript: [`ReplayCheck`],
//! for `troupe team verify`, which only needs the first event of the Lead's log that
//! [`Transcript::apply`] would refuse — and its fast path, one session-log line checked in one
//! pass over its bytes without building a `serde_json::Value` ([`ReplayCheck::apply_line`]).
//!
//! [`Transcript::apply`] refuses an event for two reasons only: its payload does not decode
//! into its record (for the types of [`Transcript::can_refuse`]; an own `agent/inbox/spliced`,
//! `agent/config` and approval record, and the first own `subagent/descriptor` only), or an own
//! inbox splice is out of range of its list. So what decides is the payload's shape and the
//! lengths of the two inbox lists; [`ReplayCheck`] keeps just those lengths (and whether an own
//! descriptor was read).
//!
//! The fast path is a small strict reader of the runtime records as Troupe writes them. It
//! *takes* a line only when the line is a valid [`Event`] (what `serde_json` accepts as one)
//! whose payload decodes into its record and replays; it never refuses a line itself. For
//! anything it does not read plainly it answers "not mine" and changes nothing, and the caller
//! parses the line into an [`Event`] and calls [`ReplayCheck::apply`], which decodes it as
//! [`Transcript::apply`] does and decides (with the same error). Not read plainly, among
//! others: a key with an escape, an envelope member other than `seq`, `time`, `type`,
//! `batchLast`, `data` and `ignorable` (or one repeated, or a `batchLast` later than where the
//! journal's envelope prefix reads it), a known member of a record repeated (the `Value` path
//! keeps the last one), a number that is not a plain integer where an integer is wanted, any
//! number with an exponent or of more than [`MAX_NUMBER_BYTES`] bytes, `\u` escapes of a lone
//! surrogate, a control character in a string, nesting deeper than [`MAX_DEPTH`], a payload
//! that is not an object, an id with an escape, a splice out of range, a record with
//! `truncatedCalls`, and the rare records it does not read at all (`agent/config`,
//! `subagent/descriptor`, approvals). Unknown members of a record are checked as JSON values
//! and skipped, as the record's decoding skips them (except in [`crate::effect::FileEffect`]
//! and [`crate::effect::FileSeen`], which refuse them: there they are "not mine").
//!
//! [`Transcript::apply`]: crate::Transcript::apply
//! [`Transcript::can_refuse`]: crate::Transcript::can_refuse

use troupe_protocol::json_scan::{Cursor, find_special, read_u64, skip_ws};
use troupe_protocol::{
    Event, UserMessage,
    event_types::{self as ty},
};

use crate::InvalidEvent;
use crate::approval::{ApprovalDecided, ApprovalRequested};
use crate::events::{
    AgentConfigRecord, AssistantRecord, Descriptor, InboxSplice, InboxTarget, StepMark,
    ToolCallRecord, ToolProcessRecord, ToolResultRecord, TurnEnd, TurnStart,
};
use crate::transcript::{check_splice_range, decode};

/// The deepest nesting of arrays and objects (the line's own object counted) the fast path
/// reads; deeper values are "not mine" (`serde_json` refuses beyond 128).
pub const MAX_DEPTH: usize = 100;

/// The longest number (in bytes) the fast path reads; longer ones, and any with an exponent,
/// are "not mine" (so a number it takes is always a finite `f64` or an integer for
/// `serde_json`).
pub const MAX_NUMBER_BYTES: usize = 300;

/// The state of a resume's replay that decides its refusals (see the module docs): the
/// lengths of the two inbox lists, and whether an own `subagent/descriptor` was read.
///
/// Events must come in seq order, each either through [`ReplayCheck::apply_line`] (taken) or
/// [`ReplayCheck::apply`]. After the first refusal the check is not meant to go on (as a
/// replay stops there).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayCheck {
    seed_len: u64,
    next_turn: usize,
    next_step: usize,
    descriptor: bool,
    /// Scratch buffer for unescaping tool-call arguments (kept to avoid an allocation per
    /// line).
    scratch: Vec<u8>,
}

/// What an own inbox splice of a taken line does (applied once the whole line is read).
#[derive(Debug, Clone, Copy)]
struct Splice {
    target: InboxTarget,
    start: usize,
    removed: usize,
    inserted: usize,
}

impl ReplayCheck {
    /// The check of a log whose first `seed_len` events are inherited (as
    /// [`crate::Transcript::new`]).
    pub fn new(seed_len: u64) -> Self {
        Self {
            seed_len,
            ..Self::default()
        }
    }

    /// The lengths of the pending inbox lists (follow-ups, steered items), as
    /// [`crate::Transcript::next_turn`] and [`crate::Transcript::next_step`] would hold them.
    pub fn inbox_lens(&self) -> (usize, usize) {
        (self.next_turn, self.next_step)
    }

    /// Replays one parsed event as [`crate::Transcript::apply`] does for its refusals: the
    /// payload decoded into the same record by the same decoding, the same range check of an
    /// own splice.
    ///
    /// # Errors
    /// Exactly those of [`crate::Transcript::apply`] for the same events in the same order
    /// (`RUNTIME_INVALID_EVENT`, same seq, type and reason).
    pub fn apply(&mut self, event: &Event) -> Result<(), InvalidEvent> {
        let own = event.seq.0 >= self.seed_len;
        match event.kind.as_str() {
            ty::USER_MESSAGE => {
                let _: UserMessage = decode(event)?;
            }
            ty::ASSISTANT_MESSAGE => {
                let _: AssistantRecord = decode(event)?;
            }
            ty::TOOL_CALL => {
                let _: ToolCallRecord = decode(event)?;
            }
            ty::TOOL_PROCESS => {
                let _: ToolProcessRecord = decode(event)?;
            }
            ty::TOOL_RESULT => {
                let _: ToolResultRecord = decode(event)?;
            }
            ty::TURN_START => {
                let _: TurnStart = decode(event)?;
            }
            ty::STEP_START => {
                let _: StepMark = decode(event)?;
            }
            ty::TURN_END => {
                let _: TurnEnd = decode(event)?;
            }
            ty::AGENT_INBOX_SPLICED if own => {
                let splice: InboxSplice = decode(event)?;
                let len = self.list(splice.target);
                check_splice_range(event, splice.start, splice.removed_count, *len)?;
                *len = *len - splice.removed_count + splice.inserted.len();
            }
            ty::AGENT_CONFIG if own => {
                let _: AgentConfigRecord = decode(event)?;
            }
            ty::SUBAGENT_DESCRIPTOR if own && !self.descriptor => {
                let _: Descriptor = decode(event)?;
                self.descriptor = true;
            }
            ty::APPROVAL_REQUESTED if own => {
                let _: ApprovalRequested = decode(event)?;
            }
            ty::APPROVAL_DECIDED if own => {
                let _: ApprovalDecided = decode(event)?;
            }
            _ => {}
        }
        Ok(())
    }

    fn list(&mut self, target: InboxTarget) -> &mut usize {
        match target {
            InboxTarget::NextTurn => &mut self.next_turn,
            InboxTarget::NextStep => &mut self.next_step,
        }
    }

    /// The fast path: takes the whole line `line` of the known type `kind` (the type the
    /// journal read from its envelope prefix) when it is a valid [`Event`] of that type whose
    /// replay [`ReplayCheck::apply`] accepts, and applies it — `true`. `false` ("not mine",
    /// see the module docs): nothing changed; parse the line and call
    /// [`ReplayCheck::apply`]. Never allocates except to unescape tool-call arguments (into a
    /// kept buffer).
    pub fn apply_line(&mut self, kind: &str, line: &str) -> bool {
        let seq = match read_line_seq(line) {
            Some(seq) => seq,
            None => return false,
        };
        let own = seq >= self.seed_len;
        let payload = match kind {
            ty::USER_MESSAGE => Payload::UserMessage,
            ty::ASSISTANT_MESSAGE => Payload::Assistant,
            ty::TOOL_CALL => Payload::ToolCall,
            ty::TOOL_PROCESS => Payload::ToolProcess,
            ty::TOOL_RESULT => Payload::ToolResult,
            ty::TURN_START => Payload::TurnStart,
            ty::STEP_START => Payload::StepMark,
            ty::TURN_END => Payload::TurnEnd,
            ty::AGENT_INBOX_SPLICED if own => Payload::Splice,
            ty::AGENT_CONFIG if own => return false,
            ty::SUBAGENT_DESCRIPTOR if own && !self.descriptor => return false,
            ty::APPROVAL_REQUESTED | ty::APPROVAL_DECIDED if own => return false,
            _ => Payload::Any,
        };
        let mut reader = Reader::new(line);
        let Some(splice) = reader.event(kind, payload, &mut self.scratch) else {
            return false;
        };
        if let Some(splice) = splice {
            let len = self.list(splice.target);
            match splice.start.checked_add(splice.removed) {
                Some(end) if end <= *len => *len = *len - splice.removed + splice.inserted,
                // Out of range: `apply` refuses it, with its message.
                _ => return false,
            }
        }
        true
    }
}

/// Whether `line` is a valid [`Event`] of the known type `kind` read plainly by the fast path
/// (any JSON payload; see the module docs). `false` means "not read plainly" (the caller
/// parses it), not "invalid".
pub fn is_event_line(kind: &str, line: &str) -> bool {
    Reader::new(line)
        .event(kind, Payload::Any, &mut Vec::new())
        .is_some()
}

/// The line's `seq` when it is its first member, written plainly (else `None`: the fast path
/// does not read the line).
fn read_line_seq(line: &str) -> Option<u64> {
    let bytes = line.as_bytes();
    let at = skip_ws(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    let at = skip_ws(bytes, at + 1);
    let rest = bytes.get(at..)?;
    if !rest.starts_with(b"\"seq\"") {
        return None;
    }
    let at = skip_ws(bytes, at + 5);
    if bytes.get(at) != Some(&b':') {
        return None;
    }
    read_u64(bytes, skip_ws(bytes, at + 1)).map(|(seq, _)| seq)
}

/// Which record a line's `data` must decode into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Payload {
    /// Any JSON value (a type whose replay decodes nothing).
    Any,
    UserMessage,
    Assistant,
    ToolCall,
    ToolProcess,
    ToolResult,
    TurnStart,
    StepMark,
    TurnEnd,
    Splice,
}

/// A strict one-pass reader of one line (see the module docs). Every method answers `None`
/// for anything it does not read plainly.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// Nesting used for generic values inside a record: an over-estimate of their real depth (the
/// records nest at most five levels), so a deep value is left to `serde_json`.
const RECORD_DEPTH: usize = 8;

impl<'a> Cursor<'a> for Reader<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    fn at(&self) -> usize {
        self.at
    }

    fn set_at(&mut self, at: usize) {
        self.at = at;
    }
}

impl<'a> Reader<'a> {
    fn new(line: &'a str) -> Self {
        Self {
            bytes: line.as_bytes(),
            at: 0,
        }
    }

    /// The whole line: the envelope object with `data` read as `payload`, then only
    /// whitespace. `Some(splice)`: the line is taken (with its splice, for an own
    /// `agent/inbox/spliced`).
    fn event(
        &mut self,
        kind: &str,
        payload: Payload,
        scratch: &mut Vec<u8>,
    ) -> Option<Option<Splice>> {
        let (mut seq, mut time, mut ty, mut ignorable, mut batch_last) =
            (false, false, false, false, false);
        let mut data: Option<Option<Splice>> = None;
        // The journal's envelope prefix reads `batchLast` only among the members up to the
        // one that completes `seq`, `time` and `type`, or right after it.
        let mut members = 0usize;
        let mut complete_at: Option<usize> = None;
        self.object(|reader, key| {
            members += 1;
            match key {
                b"seq" if !seq => {
                    seq = true;
                    reader.u64()?;
                }
                b"time" if !time => {
                    time = true;
                    reader.u64()?;
                }
                b"type" if !ty => {
                    ty = true;
                    (reader.plain_str()? == kind.as_bytes()).then_some(())?;
                }
                b"batchLast" if !batch_last && complete_at.is_none_or(|c| members == c + 1) => {
                    batch_last = true;
                    reader.u64()?;
                }
                b"ignorable" if !ignorable => {
                    ignorable = true;
                    reader.bool()?;
                }
                b"data" if data.is_none() => data = Some(reader.payload(payload, scratch)?),
                _ => return None,
            }
            if complete_at.is_none() && seq && time && ty {
                complete_at = Some(members);
            }
            Some(())
        })?;
        self.ws();
        if !(seq && time && ty) || self.at != self.bytes.len() {
            return None;
        }
        data
    }

    /// A string without escapes: its bytes (between the quotes).
    fn plain_str(&mut self) -> Option<&'a [u8]> {
        self.ws();
        let (start, end) = self.plain_span()?;
        Some(&self.bytes[start..end])
    }

    /// A JSON string as `serde_json` accepts one (the line is valid UTF-8 already): no control
    /// characters, valid escapes, no lone surrogate. Its raw span between the quotes, and
    /// whether it has escapes.
    fn string(&mut self) -> Option<(usize, usize, bool)> {
        self.ws();
        if self.peek() != Some(b'"') {
            return None;
        }
        let start = self.at + 1;
        let mut at = start;
        let mut escaped = false;
        loop {
            at = find_special(self.bytes, at)?;
            match self.bytes[at] {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    at = escape_end(self.bytes, at)?;
                }
                _ => return None,
            }
        }
        self.at = at + 1;
        Some((start, at, escaped))
    }

    /// A string value, any content.
    fn any_string(&mut self) -> Option<()> {
        self.string().map(drop)
    }

    /// `null` or a string (an `Option<String>`).
    fn opt_string(&mut self) -> Option<()> {
        if self.null() {
            return Some(());
        }
        self.any_string()
    }

    /// The literal `null` (consumed when present).
    fn null(&mut self) -> bool {
        self.ws();
        if self.bytes[self.at..].starts_with(b"null") {
            self.at += 4;
            true
        } else {
            false
        }
    }

    fn usize(&mut self) -> Option<usize> {
        usize::try_from(self.u64()?).ok()
    }

    /// Any JSON value as `serde_json::Value` accepts it, nested at `depth` (the enclosing
    /// arrays and objects).
    fn value(&mut self, depth: usize) -> Option<()> {
        self.ws();
        match self.peek()? {
            b'"' => self.any_string(),
            b'{' => {
                if depth + 1 > MAX_DEPTH {
                    return None;
                }
                self.object(|reader, _| reader.value(depth + 1))
            }
            b'[' => {
                if depth + 1 > MAX_DEPTH {
                    return None;
                }
                self.array(|reader| reader.value(depth + 1)).map(drop)
            }
            b't' | b'f' => self.bool().map(drop),
            b'n' => self.null().then_some(()),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// A number: `-`? (`0` | [1-9][0-9]*) (`.` [0-9]+)?, no exponent, at most
    /// [`MAX_NUMBER_BYTES`] bytes.
    fn number(&mut self) -> Option<()> {
        let start = self.at;
        let mut at = start;
        if self.bytes.get(at) == Some(&b'-') {
            at += 1;
        }
        let digits = |at: usize| {
            self.bytes[at.min(self.bytes.len())..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count()
        };
        let int = digits(at);
        if int == 0 || (int > 1 && self.bytes[at] == b'0') {
            return None;
        }
        at += int;
        if self.bytes.get(at) == Some(&b'.') {
            let frac = digits(at + 1);
            if frac == 0 {
                return None;
            }
            at += 1 + frac;
        }
        if matches!(self.bytes.get(at), Some(b'e' | b'E')) || at - start > MAX_NUMBER_BYTES {
            return None;
        }
        self.at = at;
        Some(())
    }

    /// `data` read as `payload`: `Some(splice)` when it decodes into its record.
    fn payload(&mut self, payload: Payload, scratch: &mut Vec<u8>) -> Option<Option<Splice>> {
        self.ws();
        match payload {
            Payload::Any => self.value(1).map(|()| None),
            Payload::UserMessage => self.user_message().map(|()| None),
            Payload::Assistant => self.assistant(scratch).map(|()| None),
            Payload::ToolCall => self.tool_call().map(|()| None),
            Payload::ToolProcess => self.tool_process().map(|()| None),
            Payload::ToolResult => self.tool_result().map(|()| None),
            Payload::TurnStart => self.turn_start().map(|()| None),
            Payload::StepMark => self.step_mark().map(|()| None),
            Payload::TurnEnd => self.turn_end().map(|()| None),
            Payload::Splice => self.splice().map(Some),
        }
    }

    /// An unknown member of a record that ignores unknown members: any JSON value.
    fn unknown(&mut self) -> Option<()> {
        self.value(RECORD_DEPTH)
    }

    /// [`TurnStart`]: `{turn}`.
    fn turn_start(&mut self) -> Option<()> {
        let mut turn = false;
        self.object(|r, key| match key {
            b"turn" if !turn => {
                turn = true;
                r.u64().map(drop)
            }
            b"turn" => None,
            _ => r.unknown(),
        })?;
        turn.then_some(())
    }

    /// [`StepMark`]: `{turn, step}`.
    fn step_mark(&mut self) -> Option<()> {
        let (mut turn, mut step) = (false, false);
        self.object(|r, key| match key {
            b"turn" => once(&mut turn, || r.u64().map(drop)),
            b"step" => once(&mut step, || r.u64().map(drop)),
            _ => r.unknown(),
        })?;
        (turn && step).then_some(())
    }

    /// [`TurnEnd`]: `{turn, reason}`, the reason exactly one of `{"kind":"completed"}`,
    /// `{"kind":"interrupted"}`, `{"kind":"aborted","reason":…}`,
    /// `{"kind":"failed","code":"…","message":"…"}` (members in any order).
    fn turn_end(&mut self) -> Option<()> {
        let (mut turn, mut reason) = (false, false);
        self.object(|r, key| match key {
            b"turn" => once(&mut turn, || r.u64().map(drop)),
            b"reason" => once(&mut reason, || r.end_reason()),
            _ => r.unknown(),
        })?;
        (turn && reason).then_some(())
    }

    fn end_reason(&mut self) -> Option<()> {
        let mut kind: Option<&[u8]> = None;
        let (mut cause, mut code, mut message) = (false, false, false);
        self.object(|r, key| match key {
            b"kind" if kind.is_none() => {
                kind = Some(r.plain_str()?);
                Some(())
            }
            b"reason" => once(&mut cause, || r.value(RECORD_DEPTH)),
            b"code" => once(&mut code, || r.any_string()),
            b"message" => once(&mut message, || r.any_string()),
            _ => None,
        })?;
        match (kind?, cause, code, message) {
            (b"completed" | b"interrupted", false, false, false)
            | (b"aborted", true, false, false)
            | (b"failed", false, true, true) => Some(()),
            _ => None,
        }
    }

    /// [`UserMessage`]: `{id, role, content: [any…], source: {kind, …any}}`, `id` a plain
    /// string of 1 to 256 bytes (a valid `MessageId`).
    fn user_message(&mut self) -> Option<()> {
        let (mut id, mut role, mut content, mut source) = (false, false, false, false);
        self.object(|r, key| match key {
            b"id" => once(&mut id, || {
                let id = r.plain_str()?;
                (!id.is_empty() && id.len() <= 256).then_some(())
            }),
            b"role" => once(&mut role, || r.any_string()),
            b"content" => once(&mut content, || {
                r.array(|r| r.value(RECORD_DEPTH)).map(drop)
            }),
            b"source" => once(&mut source, || r.source()),
            _ => r.unknown(),
        })?;
        (id && role && content && source).then_some(())
    }

    /// A message source: `{kind: "…", …any}`.
    fn source(&mut self) -> Option<()> {
        let mut kind = false;
        self.object(|r, key| match key {
            b"kind" => once(&mut kind, || r.any_string()),
            _ => r.unknown(),
        })?;
        kind.then_some(())
    }

    /// [`AssistantRecord`]: `{turn, step, message, usage?, finishReason?}` (no
    /// `truncatedCalls`).
    fn assistant(&mut self, scratch: &mut Vec<u8>) -> Option<()> {
        let (mut turn, mut step, mut message, mut usage, mut finish) =
            (false, false, false, false, false);
        self.object(|r, key| match key {
            b"turn" => once(&mut turn, || r.u64().map(drop)),
            b"step" => once(&mut step, || r.u64().map(drop)),
            b"message" => once(&mut message, || r.assistant_message(scratch)),
            // `Usage` reads every member leniently: any object (or `null`).
            b"usage" => once(&mut usage, || {
                if r.null() {
                    return Some(());
                }
                r.ws();
                (r.peek() == Some(b'{')).then_some(())?;
                r.value(RECORD_DEPTH)
            }),
            b"finishReason" => once(&mut finish, || r.opt_string()),
            b"truncatedCalls" => None,
            _ => r.unknown(),
        })?;
        (turn && step && message).then_some(())
    }

    /// An `AssistantMessage`: `{content?: string|null, reasoning_content?: string|null,
    /// tool_calls?: [call…]}`.
    fn assistant_message(&mut self, scratch: &mut Vec<u8>) -> Option<()> {
        let (mut content, mut reasoning, mut calls) = (false, false, false);
        self.object(|r, key| match key {
            b"content" => once(&mut content, || r.opt_string()),
            b"reasoning_content" => once(&mut reasoning, || r.opt_string()),
            b"tool_calls" => once(&mut calls, || {
                r.array(|r| r.wire_tool_call(scratch)).map(drop)
            }),
            _ => r.unknown(),
        })
    }

    /// A tool call as the wire has it: `{id, type?, function: {name, arguments?}}`, its
    /// `arguments` a string holding valid JSON (or only whitespace), or `null`, or any other
    /// value (what `ToolCall`'s decoding accepts).
    fn wire_tool_call(&mut self, scratch: &mut Vec<u8>) -> Option<()> {
        let (mut id, mut kind, mut function) = (false, false, false);
        self.object(|r, key| match key {
            b"id" => once(&mut id, || r.any_string()),
            b"type" => once(&mut kind, || r.any_string()),
            b"function" => once(&mut function, || {
                let (mut name, mut arguments) = (false, false);
                r.object(|r, key| match key {
                    b"name" => once(&mut name, || r.any_string()),
                    b"arguments" => once(&mut arguments, || r.arguments(scratch)),
                    _ => r.unknown(),
                })?;
                name.then_some(())
            }),
            _ => r.unknown(),
        })?;
        (id && function).then_some(())
    }

    fn arguments(&mut self, scratch: &mut Vec<u8>) -> Option<()> {
        self.ws();
        if self.peek() != Some(b'"') {
            return self.value(RECORD_DEPTH);
        }
        let (start, end, escaped) = self.string()?;
        let raw = &self.bytes[start..end];
        let text: &[u8] = if escaped {
            unescape(raw, scratch)?;
            scratch
        } else {
            raw
        };
        let text = std::str::from_utf8(text).ok()?;
        if text.trim().is_empty() {
            return Some(());
        }
        let mut inner = Reader {
            bytes: text.as_bytes(),
            at: 0,
        };
        inner.value(0)?;
        inner.ws();
        (inner.at == inner.bytes.len()).then_some(())
    }

    /// [`ToolCallRecord`]: `{turn, step, callId, name, arguments, effect?}`.
    fn tool_call(&mut self) -> Option<()> {
        let (mut turn, mut step, mut call, mut name, mut arguments, mut effect) =
            (false, false, false, false, false, false);
        self.object(|r, key| match key {
            b"turn" => once(&mut turn, || r.u64().map(drop)),
            b"step" => once(&mut step, || r.u64().map(drop)),
            b"callId" => once(&mut call, || r.any_string()),
            b"name" => once(&mut name, || r.any_string()),
            b"arguments" => once(&mut arguments, || r.value(RECORD_DEPTH)),
            b"effect" => once(&mut effect, || {
                if r.null() {
                    return Some(());
                }
                r.file_effect()
            }),
            _ => r.unknown(),
        })?;
        (turn && step && call && name && arguments).then_some(())
    }

    /// `FileEffect` (no unknown members): `{path, preImage?: string|null, postImage, result}`.
    fn file_effect(&mut self) -> Option<()> {
        let (mut path, mut pre, mut post, mut result) = (false, false, false, false);
        self.object(|r, key| match key {
            b"path" => once(&mut path, || r.any_string()),
            b"preImage" => once(&mut pre, || r.opt_string()),
            b"postImage" => once(&mut post, || r.any_string()),
            b"result" => once(&mut result, || r.value(RECORD_DEPTH)),
            _ => None,
        })?;
        (path && post && result).then_some(())
    }

    /// [`ToolProcessRecord`]: `{turn, step, callId, pgid, startTime}` (`pgid` a plain
    /// non-negative `i32`).
    fn tool_process(&mut self) -> Option<()> {
        let (mut turn, mut step, mut call, mut pgid, mut start) =
            (false, false, false, false, false);
        self.object(|r, key| match key {
            b"turn" => once(&mut turn, || r.u64().map(drop)),
            b"step" => once(&mut step, || r.u64().map(drop)),
            b"callId" => once(&mut call, || r.any_string()),
            b"pgid" => once(&mut pgid, || i32::try_from(r.u64()?).ok().map(drop)),
            b"startTime" => once(&mut start, || r.u64().map(drop)),
            _ => r.unknown(),
        })?;
        (turn && step && call && pgid && start).then_some(())
    }

    /// [`ToolResultRecord`]: `{turn, step, callId, name, isError, code?, content, messageId?,
    /// sourceEventSeqs?: [u64…], seen?}`.
    fn tool_result(&mut self) -> Option<()> {
        let mut seen_keys = [false; 10];
        self.object(|r, key| {
            let slot = match key {
                b"turn" => 0,
                b"step" => 1,
                b"callId" => 2,
                b"name" => 3,
                b"isError" => 4,
                b"content" => 5,
                b"code" => 6,
                b"messageId" => 7,
                b"sourceEventSeqs" => 8,
                b"seen" => 9,
                _ => return r.unknown(),
            };
            if std::mem::replace(&mut seen_keys[slot], true) {
                return None;
            }
            match slot {
                0 | 1 => r.u64().map(drop),
                2 | 3 | 5 => r.any_string(),
                4 => r.bool().map(drop),
                6 | 7 => r.opt_string(),
                8 => r.array(|r| r.u64().map(drop)).map(drop),
                _ => {
                    if r.null() {
                        return Some(());
                    }
                    r.file_seen()
                }
            }
        })?;
        seen_keys[..6].iter().all(|&s| s).then_some(())
    }

    /// `FileSeen` (no unknown members): `{path, image?: string|null}`.
    fn file_seen(&mut self) -> Option<()> {
        let (mut path, mut image) = (false, false);
        self.object(|r, key| match key {
            b"path" => once(&mut path, || r.any_string()),
            b"image" => once(&mut image, || r.opt_string()),
            _ => None,
        })?;
        path.then_some(())
    }

    /// [`InboxSplice`]: `{target, start, removedCount?, inserted?: [UserMessage…],
    /// outcome?: string|null}`.
    fn splice(&mut self) -> Option<Splice> {
        let mut target = None;
        let mut start = None;
        let mut removed = None;
        let mut inserted = None;
        let mut outcome = false;
        self.object(|r, key| match key {
            b"target" if target.is_none() => {
                target = Some(match r.plain_str()? {
                    b"next-turn" => InboxTarget::NextTurn,
                    b"next-step" => InboxTarget::NextStep,
                    _ => return None,
                });
                Some(())
            }
            b"start" if start.is_none() => {
                start = Some(r.usize()?);
                Some(())
            }
            b"removedCount" if removed.is_none() => {
                removed = Some(r.usize()?);
                Some(())
            }
            b"inserted" if inserted.is_none() => {
                inserted = Some(r.array(Reader::user_message)?);
                Some(())
            }
            b"outcome" => once(&mut outcome, || r.opt_string()),
            b"target" | b"start" | b"removedCount" | b"inserted" => None,
            _ => r.unknown(),
        })?;
        Some(Splice {
            target: target?,
            start: start?,
            removed: removed.unwrap_or(0),
            inserted: inserted.unwrap_or(0),
        })
    }
}

/// Reads a member once: a second one is "not mine" (the `Value` path keeps the last).
fn once(seen: &mut bool, read: impl FnOnce() -> Option<()>) -> Option<()> {
    if std::mem::replace(seen, true) {
        return None;
    }
    read()
}

/// The index of the last byte of the escape whose backslash is at `at`, plus one: a valid
/// escape (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, or `\uXXXX` — a surrogate only as a
/// high one followed by a `\u` low one). `None` for anything else.
fn escape_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at + 1)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(at + 2),
        b'u' => {
            let unit = hex4(bytes, at + 2)?;
            match unit {
                0xD800..=0xDBFF => {
                    if bytes.get(at + 6..at + 8)? != b"\\u" {
                        return None;
                    }
                    let low = hex4(bytes, at + 8)?;
                    (0xDC00..=0xDFFF).contains(&low).then_some(at + 12)
                }
                0xDC00..=0xDFFF => None,
                _ => Some(at + 6),
            }
        }
        _ => None,
    }
}

fn hex4(bytes: &[u8], at: usize) -> Option<u32> {
    let digits = bytes.get(at..at + 4)?;
    digits.iter().try_fold(0u32, |n, &d| {
        let v = char::from(d).to_digit(16)?;
        Some(n * 16 + v)
    })
}

/// Unescapes the raw content of a string the reader checked (valid escapes only) into
/// `out` (cleared first).
fn unescape(raw: &[u8], out: &mut Vec<u8>) -> Option<()> {
    out.clear();
    let mut at = 0;
    while at < raw.len() {
        let Some(offset) = raw[at..].iter().position(|&b| b == b'\\') else {
            out.extend_from_slice(&raw[at..]);
            break;
        };
        out.extend_from_slice(&raw[at..at + offset]);
        at += offset;
        let byte = match raw.get(at + 1)? {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let unit = hex4(raw, at + 2)?;
                let (code, len) = if (0xD800..=0xDBFF).contains(&unit) {
                    let low = hex4(raw, at + 8)?;
                    (0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00), 12)
                } else {
                    (unit, 6)
                };
                let c = char::from_u32(code)?;
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                at += len;
                continue;
            }
            _ => return None,
        };
        out.push(byte);
        at += 2;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Transcript;
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    use serde_json::{Value, json};

    /// What replaying `lines` (each with the type the journal read from its prefix) gives.
    #[derive(Debug, PartialEq)]
    enum Outcome {
        /// Every line replayed: the inbox lengths.
        Replayed(usize, usize),
        /// Line `n` is not a valid event (the journal's `JOURNAL_CORRUPT` there).
        Corrupt(usize),
        /// The replay refused an event.
        Refused(InvalidEvent),
    }

    /// Today's path: every line parsed into an `Event`, folded by `Transcript::apply`.
    fn today(lines: &[(&str, String)]) -> Outcome {
        let mut transcript = Transcript::new(0);
        for (n, (_, line)) in lines.iter().enumerate() {
            let Ok(event) = serde_json::from_str::<Event>(line) else {
                return Outcome::Corrupt(n);
            };
            if let Err(e) = transcript.apply(&event) {
                return Outcome::Refused(e);
            }
        }
        Outcome::Replayed(transcript.next_turn().len(), transcript.next_step().len())
    }

    /// The fast path, with the lines it does not take parsed and given to `apply`.
    fn fast(lines: &[(&str, String)]) -> (Outcome, usize) {
        let mut check = ReplayCheck::new(0);
        let mut taken = 0;
        for (n, (kind, line)) in lines.iter().enumerate() {
            if check.apply_line(kind, line) {
                taken += 1;
                // A taken line is a valid event of its type that replays.
                let event: Event = serde_json::from_str(line).expect("taken line is an Event");
                assert_eq!(event.kind, *kind);
                assert!(is_event_line(kind, line));
                continue;
            }
            let Ok(event) = serde_json::from_str::<Event>(line) else {
                return (Outcome::Corrupt(n), taken);
            };
            if let Err(e) = check.apply(&event) {
                return (Outcome::Refused(e), taken);
            }
        }
        let (turn, step) = check.inbox_lens();
        (Outcome::Replayed(turn, step), taken)
    }

    /// The line as the journal writes it (`seq`, `time`, `type`, `data`).
    fn line(seq: usize, kind: &str, data: Value) -> String {
        let event = troupe_protocol::EventDraft::new(kind, data).into_event(
            troupe_protocol::Seq(seq as u64),
            1_700_000_000_000 + seq as u64,
        );
        serde_json::to_string(&event).unwrap()
    }

    fn message(id: &str, text: &str, kind: &str) -> Value {
        json!({"content": [{"text": text, "type": "text"}], "id": id, "role": "user",
            "source": {"kind": kind}})
    }

    /// Records as Troupe writes them (from the demo's logs), with strings from `text`.
    fn records(text: &str) -> Vec<(&'static str, Value)> {
        let args = json!({"command": text, "n": 3}).to_string();
        vec![
            (
                ty::AGENT_INBOX_SPLICED,
                json!({"inserted": [message("m-1", text, "user")],
                "start": 0, "target": "next-turn"}),
            ),
            (ty::TURN_START, json!({"turn": 1})),
            (
                ty::AGENT_INBOX_SPLICED,
                json!({"inserted": [], "removedCount": 1, "start": 0,
                "target": "next-turn"}),
            ),
            (ty::USER_MESSAGE, message("m-1", text, "user")),
            (
                ty::USER_MESSAGE,
                json!({"content": [{"text": text, "type": "text"}],
                "id": "team-message-1", "role": "user", "source": {"kind": "team-message",
                "messageId": "team-message-1", "senderName": text}}),
            ),
            (ty::STEP_START, json!({"step": 1, "turn": 1})),
            (
                ty::REQUEST_HEADER,
                json!({"messages": 2, "model": "script:x", "step": 1,
                "tools": ["read", text], "turn": 1}),
            ),
            (
                ty::ASSISTANT_CHUNK,
                json!({"block": "toolCall", "delta": args, "index": 0,
                "step": 1, "turn": 1}),
            ),
            (
                ty::ASSISTANT_MESSAGE,
                json!({"finishReason": "tool_calls", "message":
                {"content": null, "tool_calls": [{"function": {"arguments": args,
                "name": "bash"}, "id": "call_1", "type": "function"}]}, "step": 1, "turn": 1,
                "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}),
            ),
            (
                ty::TOOL_CALL,
                json!({"arguments": {"command": text}, "callId": "call_1",
                "name": "bash", "step": 1, "turn": 1}),
            ),
            (
                ty::TOOL_CALL,
                json!({"arguments": {"path": "a.py", "content": text},
                "callId": "call_2", "effect": {"path": "a.py", "postImage": "sha256:ab",
                "preImage": null, "result": {"bytes": 3, "created": true}}, "name": "write",
                "step": 1, "turn": 1}),
            ),
            (
                ty::TOOL_PROCESS,
                json!({"callId": "call_1", "pgid": 7975, "startTime": 5_679_963,
                "step": 1, "turn": 1}),
            ),
            (
                ty::TOOL_RESULT,
                json!({"callId": "call_1", "content": json!({"stdout": text})
                .to_string(), "isError": false, "name": "bash", "step": 1, "turn": 1}),
            ),
            (
                ty::TOOL_RESULT,
                json!({"callId": "call_3", "code": "TOOL_NOT_STARTED",
                "content": text, "isError": true, "messageId": "r-1", "name": "read",
                "seen": {"image": "sha256:cd", "path": "a.py"}, "sourceEventSeqs": [9],
                "step": 1, "turn": 1}),
            ),
            (
                ty::TOOL_EFFECT,
                json!({"callId": "call_1", "sessionId": "s", "tool": "x"}),
            ),
            (ty::STEP_END, json!({"step": 1, "turn": 1})),
            (
                ty::ASSISTANT_MESSAGE,
                json!({"finishReason": "stop", "message":
                {"content": text, "reasoning_content": text}, "step": 2, "turn": 1}),
            ),
            (
                ty::AGENT_INBOX_SPLICED,
                json!({"inserted": [message("m-2", text, "resume"),
                message("m-3", "b", "user")], "start": 0, "target": "next-step"}),
            ),
            (
                ty::AGENT_INBOX_SPLICED,
                json!({"outcome": "canceled", "removedCount": 2,
                "start": 0, "target": "next-step"}),
            ),
            (
                ty::TURN_END,
                json!({"reason": {"kind": "completed"}, "turn": 1}),
            ),
            (
                ty::TURN_END,
                json!({"reason": {"kind": "aborted", "reason": {"kind": "user"}},
                "turn": 2}),
            ),
            (
                ty::TURN_END,
                json!({"reason": {"code": "LLM_AUTH", "kind": "failed",
                "message": text}, "turn": 3}),
            ),
            (
                ty::TURN_END,
                json!({"reason": {"kind": "interrupted"}, "turn": 4}),
            ),
        ]
    }

    fn log(text: &str) -> Vec<(&'static str, String)> {
        records(text)
            .into_iter()
            .enumerate()
            .map(|(n, (kind, data))| (kind, line(n, kind, data)))
            .collect()
    }

    #[test]
    fn troupe_records_are_taken_and_replay_as_today() {
        for text in ["plain", "esc \" \\ \n \t / é ☃ 😀", "\u{1}\u{1f}", ""] {
            let lines = log(text);
            let (outcome, taken) = fast(&lines);
            assert_eq!(outcome, today(&lines), "{text:?}");
            assert_eq!(outcome, Outcome::Replayed(0, 0));
            assert_eq!(
                taken,
                lines.len(),
                "every Troupe record is read plainly: {text:?}"
            );
        }
    }

    #[test]
    fn unusual_shapes_are_not_taken() {
        let not_mine = [
            // Envelope: a repeated or unknown member, an escaped key, `batchLast` after `data`.
            (
                ty::TURN_START,
                r#"{"seq":0,"time":1,"type":"turn/start","data":{"turn":1},"seq":0}"#,
            ),
            (
                ty::TURN_START,
                r#"{"seq":0,"time":1,"type":"turn/start","data":{"turn":1},"x":1}"#,
            ),
            (
                ty::TURN_START,
                r#"{"seq":0,"time":1,"typ\u0065":"turn/start","data":{"turn":1}}"#,
            ),
            (
                ty::TURN_START,
                r#"{"seq":0,"time":1,"type":"turn/start","data":{"turn":1},"batchLast":3}"#,
            ),
            (
                ty::TURN_START,
                r#"{"seq":0,"time":1,"type":"turn\/start","data":{"turn":1}}"#,
            ),
            (ty::TURN_START, r#"{"seq":0,"time":1,"type":"turn/start"}"#),
            // Payload: a repeated member, a number not a plain integer, `null` not optional.
            (
                ty::TURN_START,
                r#"{"seq":0,"time":1,"type":"turn/start","data":{"turn":1,"turn":2}}"#,
            ),
            (
                ty::TURN_START,
                r#"{"seq":0,"time":1,"type":"turn/start","data":{"turn":1.0}}"#,
            ),
            (
                ty::TURN_START,
                r#"{"seq":0,"time":1,"type":"turn/start","data":{"turn":18446744073709551616}}"#,
            ),
            (
                ty::TURN_START,
                r#"{"seq":0,"time":1,"type":"turn/start","data":[1]}"#,
            ),
            (
                ty::STEP_END,
                r#"{"seq":0,"time":1,"type":"step/end","data":{"x":1e3}}"#,
            ),
            (
                ty::STEP_END,
                r#"{"seq":0,"time":1,"type":"step/end","data":{"x":"\ud800"}}"#,
            ),
            (
                ty::TURN_END,
                r#"{"seq":0,"time":1,"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed","x":1}}}"#,
            ),
            (
                ty::TURN_END,
                r#"{"seq":0,"time":1,"type":"turn/end","data":{"turn":1,"reason":{"kind":0}}}"#,
            ),
            (
                ty::USER_MESSAGE,
                r#"{"seq":0,"time":1,"type":"user/message","data":{"id":"\u0061","role":"user","content":[],"source":{"kind":"user"}}}"#,
            ),
            (
                ty::TOOL_RESULT,
                r#"{"seq":0,"time":1,"type":"tool/result","data":{"turn":1,"step":1,"callId":"c","name":"n","isError":false,"content":"x","seen":{"path":"p","x":1}}}"#,
            ),
            (
                ty::ASSISTANT_MESSAGE,
                r#"{"seq":0,"time":1,"type":"assistant/message","data":{"turn":1,"step":1,"message":{"tool_calls":[{"id":"c","function":{"name":"n","arguments":"{\"a\":1e999}"}}]}}}"#,
            ),
            // Out of range: the replay refuses it.
            (
                ty::AGENT_INBOX_SPLICED,
                r#"{"seq":0,"time":1,"type":"agent/inbox/spliced","data":{"removedCount":1,"start":0,"target":"next-turn"}}"#,
            ),
        ];
        for (kind, text) in not_mine {
            assert!(!ReplayCheck::new(0).apply_line(kind, text), "{text}");
            // And today's path decides: the same outcome through the fallback.
            let lines = [(kind, text.to_owned())];
            assert_eq!(fast(&lines).0, today(&lines), "{text}");
        }
    }

    #[test]
    fn odd_but_valid_shapes_are_taken() {
        let taken = [
            (
                ty::TURN_START,
                "  { \"seq\" : 0 , \"time\":1,\"type\":\"turn/start\",\"data\":{\"turn\":1, \"x\":[true,false,null,-0.5,{\"y\":\"\\u00e9\\ud83d\\ude00\"}]}} ",
            ),
            (
                ty::TURN_START,
                r#"{"seq":0,"time":1,"type":"turn/start","batchLast":2,"ignorable":false,"data":{"turn":18446744073709551615}}"#,
            ),
            (
                ty::ASSISTANT_MESSAGE,
                r#"{"seq":0,"time":1,"type":"assistant/message","data":{"turn":1,"step":1,"message":{"tool_calls":[{"id":"c","function":{"name":"n","arguments":" \u00a0 "}},{"id":"d","function":{"name":"n"}},{"id":"e","function":{"name":"n","arguments":{"a":1}}}]},"usage":{"prompt_tokens":"7","x":[1]},"finishReason":null}}"#,
            ),
            (
                ty::TOOL_CALL,
                r#"{"seq":0,"time":1,"type":"tool/call","data":{"turn":1,"step":1,"callId":"c","name":"write","arguments":null,"effect":{"path":"p","postImage":"i","result":null}}}"#,
            ),
        ];
        for (kind, text) in taken {
            let lines = [(kind, text.to_owned())];
            let (outcome, n) = fast(&lines);
            assert_eq!(n, 1, "{text}");
            assert_eq!(outcome, today(&lines), "{text}");
        }
    }

    /// For every known type, own or inherited, with a payload no record decodes from and
    /// with an empty object: `apply` refuses exactly when `Transcript::apply` does, with the
    /// same error (a new refusable type must be added to both), and the fast path never takes
    /// a line `Transcript::apply` refuses.
    #[test]
    fn apply_refuses_exactly_what_the_transcript_refuses() {
        for kind in ty::KNOWN {
            for seed_len in [0, 1] {
                for data in [json!(["not", "a", "payload"]), json!({}), json!(null)] {
                    let event = troupe_protocol::EventDraft::new(*kind, data.clone())
                        .into_event(troupe_protocol::Seq(0), 1);
                    let today = Transcript::new(seed_len).apply(&event);
                    assert_eq!(ReplayCheck::new(seed_len).apply(&event), today, "{kind}");
                    let text = serde_json::to_string(&event).unwrap();
                    if today.is_err() {
                        assert!(
                            !ReplayCheck::new(seed_len).apply_line(kind, &text),
                            "{text}"
                        );
                    }
                }
            }
        }
    }

    /// A descriptor is decoded only the first time (as the transcript keeps the first).
    #[test]
    fn only_the_first_own_descriptor_is_decoded() {
        let good = json!({"version": 2, "mode": "continuable", "provider": "spawn",
            "label": "beta"});
        let lines = [
            (
                ty::SUBAGENT_DESCRIPTOR,
                line(0, ty::SUBAGENT_DESCRIPTOR, good),
            ),
            (
                ty::SUBAGENT_DESCRIPTOR,
                line(1, ty::SUBAGENT_DESCRIPTOR, json!({"x": 1})),
            ),
        ];
        let (outcome, taken) = fast(&lines);
        assert_eq!(outcome, today(&lines));
        assert_eq!((outcome, taken), (Outcome::Replayed(0, 0), 1));
    }

    /// Byte-level damage: cut, one byte replaced, a snippet inserted.
    #[derive(Debug, Clone)]
    enum Mutation {
        Truncate(usize),
        Replace(usize, u8),
        Insert(usize, &'static str),
    }

    const SNIPPETS: &[&str] = &[
        ",\"x\":1",
        ",\"turn\":2",
        ",\"seq\":1",
        "\\u0000",
        "\\ud800",
        "\\\"",
        "\"",
        " ",
        "1e5",
        "-1",
        "1.5",
        "null",
        "[",
        "]",
        "{",
        "}",
        ",",
        ":",
        "\u{7f}",
        "\u{1}",
        "é",
        "0",
        "18446744073709551616",
        ",\"batchLast\":9",
        "\\",
        "\\x",
        "true",
    ];

    fn mutation() -> impl Strategy<Value = Mutation> {
        prop_oneof![
            any::<usize>().prop_map(Mutation::Truncate),
            (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Mutation::Replace(at, b)),
            (any::<usize>(), prop::sample::select(SNIPPETS))
                .prop_map(|(at, s)| Mutation::Insert(at, s)),
        ]
    }

    fn mutate(line: &str, mutation: &Mutation) -> String {
        let at = |n: usize| {
            let mut at = n % (line.len() + 1);
            while !line.is_char_boundary(at) {
                at -= 1;
            }
            at
        };
        match mutation {
            Mutation::Truncate(n) => line[..at(*n)].to_owned(),
            Mutation::Replace(_, _) if line.is_empty() => String::new(),
            Mutation::Replace(n, byte) => {
                let mut bytes = line.as_bytes().to_vec();
                let i = n % bytes.len();
                bytes[i] = *byte;
                String::from_utf8(bytes).unwrap_or_else(|_| line.to_owned())
            }
            Mutation::Insert(n, snippet) => {
                let at = at(*n);
                format!("{}{snippet}{}", &line[..at], &line[at..])
            }
        }
    }

    /// The damaged lines of the property tests reach every outcome, and the fast path takes
    /// lines in each (so the agreement is not vacuous).
    #[test]
    fn damaged_lines_reach_every_outcome() {
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = ("[a-z\"\\\\é\u{1}]{0,12}", 0usize..23, mutation());
        let (mut corrupt, mut refused, mut replayed, mut taken) = (0, 0, 0, 0);
        for _ in 0..3000 {
            let (text, record, mutation) = strategy.new_tree(&mut runner).unwrap().current();
            let (kind, data) = records(&text)[record].clone();
            let lines = [(kind, mutate(&line(0, kind, data), &mutation))];
            let (outcome, n) = fast(&lines);
            assert_eq!(outcome, today(&lines), "{lines:?}");
            taken += n;
            match outcome {
                Outcome::Corrupt(_) => corrupt += 1,
                Outcome::Refused(_) => refused += 1,
                Outcome::Replayed(..) => replayed += 1,
            }
        }
        assert!(
            corrupt > 100 && refused > 100 && replayed > 100 && taken > 100,
            "{corrupt} corrupt, {refused} refused, {replayed} replayed, {taken} taken"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Generated Troupe records (strings with escapes, unicode and control characters),
        /// some damaged: the fast path and today's path give the same outcome — the same
        /// inbox, the same first invalid line, or the same refusal (seq, type, reason).
        #[test]
        fn fast_path_agrees_with_the_event_parse_and_transcript(
            text in any::<String>(),
            mutations in prop::collection::vec((any::<usize>(), mutation()), 0..4),
            extra in prop::option::of((any::<usize>(), "[a-zA-Z]{1,8}", any::<i64>())),
        ) {
            let mut lines = log(&text);
            if let Some((n, key, value)) = extra {
                // An unknown member in one record's payload.
                let i = n % lines.len();
                let (kind, data) = records(&text).swap_remove(i);
                let mut data = data;
                data.as_object_mut().unwrap().insert(key, json!(value));
                lines[i] = (kind, line(i, kind, data));
            }
            for (n, m) in &mutations {
                let i = n % lines.len();
                lines[i].1 = mutate(&lines[i].1, m);
            }
            prop_assert_eq!(fast(&lines).0, today(&lines));
        }

        /// Any one line of any known runtime type, damaged or not: taken only when today's
        /// path accepts it, with the same inbox.
        #[test]
        fn one_damaged_line_agrees(
            text in "[a-z\"\\\\é\u{1}]{0,12}",
            record in 0usize..23,
            mutation in mutation(),
        ) {
            let records = records(&text);
            let (kind, data) = records[record % records.len()].clone();
            let lines = [(kind, mutate(&line(0, kind, data), &mutation))];
            prop_assert_eq!(fast(&lines).0, today(&lines));
        }
    }
}
