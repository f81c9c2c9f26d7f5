//! The fold's fast path: a whole `team/…` Lead-log line decoded in one pass, without building
//! a `serde_json::Value` (REFERENCE c.4 is unchanged; only the decoding is faster).
//!
//! A small strict reader walks the line's envelope and the record's structure itself; strings
//! are borrowed from the line (escaped ones are decoded by `serde_json`); a member, and message
//! content other than plain text blocks, are handed to `serde_json` in place. The
//! reader answers `None` for anything it does not read plainly — an escaped key, a repeated
//! or unknown member, a number that is not a plain integer, `null` where a value is optional,
//! another version, trailing bytes — and the caller then takes the `Value` path
//! ([`crate::record::decode`]), which decides. So the fast path never refuses by itself, and
//! what it accepts is what the `Value` path accepts, with the same values:
//! - its envelope is [`troupe_protocol::Event`]'s (`seq`, `time`, `type`, `data`, optional
//!   `batchLast` and `ignorable`, each once, no other member), so the line is a valid event;
//! - its payload is an object with exactly the strict shape's keys of REFERENCE c.3, `version`
//!   the integer 1 and `teamId` a non-empty string (the loose selector passes);
//! - strings accept what a JSON string accepts (no control characters; escapes decoded by
//!   `serde_json`), integers only the plain form of a `u64`;
//! - members are decoded by the same `Deserialize` impl as in the `Value` path; messages
//!   member by member with the same checks (ids through the same constructors), their content
//!   into the same `Value`s (text blocks built directly, other blocks by `serde_json`).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;
use troupe_protocol::json_scan::{Cursor, find_special};
use troupe_protocol::{MessageId, SessionId, event_types};

use crate::content::validate_content;
use crate::ids::{Revision, TaskId};
use crate::record::{Delivery, MemberSnapshot, MessageSnapshot, TEAM_EVENT_VERSION, TaskStatus};

/// The most `{`/`[` bytes a value handed to `serde_json` in place may hold (see
/// `Reader::serde`): far below its recursion limit (128) minus the at most three levels above
/// the value in the line.
const MAX_PLAIN_BRACKETS: usize = 100;

/// A string of a line: borrowed, or owned when it had escapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Text<'a>(pub(crate) Cow<'a, str>);

impl AsRef<str> for Text<'_> {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl<'a> Text<'a> {
    /// The owned string.
    pub(crate) fn into_owned(self) -> String {
        self.0.into_owned()
    }
}

/// A JSON array of strings, kept as its text (no allocation); [`StrList::iter`] reads the
/// strings again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StrList<'a> {
    /// From `[` to `]`.
    text: &'a str,
    len: usize,
}

impl<'a> StrList<'a> {
    /// The number of strings.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The strings, in order (read again from the text the reader already checked).
    pub(crate) fn iter(&self) -> impl Iterator<Item = Text<'a>> + 'a {
        let mut reader = Reader {
            text: self.text,
            at: 1,
        };
        let mut left = self.len;
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            reader.ws();
            if reader.peek() == Some(b',') {
                reader.at += 1;
            }
            reader.string()
        })
    }
}

/// A `team/task` snapshot as its line holds it: [`crate::TaskSnapshot`]'s members, with the
/// strings borrowed and the id rules not yet checked (the fold checks them).
#[derive(Debug)]
pub(crate) struct TaskText<'a> {
    pub(crate) id: Text<'a>,
    pub(crate) revision: u64,
    pub(crate) subject: Text<'a>,
    pub(crate) description: Text<'a>,
    pub(crate) status: TaskStatus,
    pub(crate) owner_id: Option<Text<'a>>,
    pub(crate) blocked_by: StrList<'a>,
    pub(crate) write_scopes: StrList<'a>,
}

/// The record of a `team/…` line decoded by [`decode_line`].
pub(crate) enum LineRecord<'a> {
    Member(MemberSnapshot),
    Task(TaskText<'a>),
    MessageQueued(MessageSnapshot),
    MessageDelivered {
        message_id: Text<'a>,
        target_id: Text<'a>,
    },
}

impl LineRecord<'_> {
    /// Whether the record keeps the rules its owned decoding checks beyond its shape: the
    /// task id, revision, owner and blocker rules of [`crate::TaskSnapshot`], the id rules of a
    /// delivery. (Members and messages are decoded into their owned types, which checks them.)
    pub(crate) fn is_valid(&self) -> bool {
        match self {
            LineRecord::Member(_) | LineRecord::MessageQueued(_) => true,
            LineRecord::Task(task) => {
                Revision::new(task.revision).is_some()
                    && TaskId::check(task.id.as_ref()).is_ok()
                    && task
                        .owner_id
                        .as_ref()
                        .is_none_or(|owner| SessionId::is_valid(owner.as_ref()))
                    && task
                        .blocked_by
                        .iter()
                        .all(|blocker| TaskId::check(blocker.as_ref()).is_ok())
            }
            LineRecord::MessageDelivered {
                message_id,
                target_id,
            } => {
                MessageId::is_valid(message_id.as_ref()) && SessionId::is_valid(target_id.as_ref())
            }
        }
    }
}

/// Decodes a whole Lead-log line of the Team type `kind`: `Some((teamId, record))` when the
/// line is a valid event of type `kind` whose payload is a valid `version: 1` record read
/// plainly (see the module docs; task and message ids are checked by the caller), `None`
/// whenever the `Value` path must decide.
pub(crate) fn decode_line<'a>(kind: &str, line: &'a str) -> Option<(Text<'a>, LineRecord<'a>)> {
    let mut reader = Reader { text: line, at: 0 };
    let mut payload = None;
    let (mut seq, mut time, mut ty, mut ignorable, mut batch_last) =
        (false, false, false, false, false);
    reader.object(|reader, key| {
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
                (reader.string()?.as_ref() == kind).then_some(())?;
            }
            b"ignorable" if !ignorable => {
                ignorable = true;
                reader.bool()?;
            }
            // Batch framing (DESIGN decision 9) is the journal's: the scan has checked it.
            b"batchLast" if !batch_last => {
                batch_last = true;
                reader.u64()?;
            }
            b"data" if payload.is_none() => payload = Some(decode_payload(reader, kind)?),
            _ => return None,
        }
        Some(())
    })?;
    reader.ws();
    if !(seq && time && ty) || reader.at != line.len() {
        return None;
    }
    payload
}

/// The payload of a `kind` line: `{version: 1, teamId, <body>}` with exactly its keys.
fn decode_payload<'a>(reader: &mut Reader<'a>, kind: &str) -> Option<(Text<'a>, LineRecord<'a>)> {
    let mut version = None;
    let mut team_id = None;
    let mut record = None;
    let (mut message_id, mut target_id) = (None, None);
    reader.object(|reader, key| {
        match (kind, key) {
            (_, b"version") if version.is_none() => version = Some(reader.u64()?),
            (_, b"teamId") if team_id.is_none() => team_id = Some(reader.string()?),
            (event_types::TEAM_TASK, b"task") if record.is_none() => {
                record = Some(LineRecord::Task(decode_task(reader)?));
            }
            (event_types::TEAM_MEMBER, b"member") if record.is_none() => {
                record = Some(LineRecord::Member(reader.serde()?));
            }
            (event_types::TEAM_MESSAGE_QUEUED, b"message") if record.is_none() => {
                record = Some(LineRecord::MessageQueued(decode_message(reader)?));
            }
            (event_types::TEAM_MESSAGE_DELIVERED, b"messageId") if message_id.is_none() => {
                message_id = Some(reader.string()?);
            }
            (event_types::TEAM_MESSAGE_DELIVERED, b"targetId") if target_id.is_none() => {
                target_id = Some(reader.string()?);
            }
            _ => return None,
        }
        Some(())
    })?;
    if kind == event_types::TEAM_MESSAGE_DELIVERED {
        record = Some(LineRecord::MessageDelivered {
            message_id: message_id?,
            target_id: target_id?,
        });
    }
    let team_id = team_id.filter(|id| !id.0.is_empty())?;
    (version? == TEAM_EVENT_VERSION).then_some((team_id, record?))
}

/// A task snapshot object with exactly [`crate::TaskSnapshot`]'s keys (`ownerId` optional).
fn decode_task<'a>(reader: &mut Reader<'a>) -> Option<TaskText<'a>> {
    let mut id = None;
    let mut revision = None;
    let mut subject = None;
    let mut description = None;
    let mut status = None;
    let mut owner_id = None;
    let mut blocked_by = None;
    let mut write_scopes = None;
    reader.object(|reader, key| {
        match key {
            b"id" if id.is_none() => id = Some(reader.string()?),
            b"revision" if revision.is_none() => revision = Some(reader.u64()?),
            b"subject" if subject.is_none() => subject = Some(reader.string()?),
            b"description" if description.is_none() => description = Some(reader.string()?),
            b"status" if status.is_none() => {
                status = Some(match reader.string()?.as_ref() {
                    "pending" => TaskStatus::Pending,
                    "in_progress" => TaskStatus::InProgress,
                    "completed" => TaskStatus::Completed,
                    "deleted" => TaskStatus::Deleted,
                    _ => return None,
                });
            }
            b"ownerId" if owner_id.is_none() => owner_id = Some(reader.string()?),
            b"blockedBy" if blocked_by.is_none() => blocked_by = Some(reader.strings()?),
            b"writeScopes" if write_scopes.is_none() => write_scopes = Some(reader.strings()?),
            _ => return None,
        }
        Some(())
    })?;
    Some(TaskText {
        id: id?,
        revision: revision?,
        subject: subject?,
        description: description?,
        status: status?,
        owner_id,
        blocked_by: blocked_by?,
        write_scopes: write_scopes?,
    })
}

/// A queued message object with exactly [`MessageSnapshot`]'s keys, checked as its decoding
/// checks them, and with valid content blocks.
fn decode_message(reader: &mut Reader<'_>) -> Option<MessageSnapshot> {
    let mut id = None;
    let mut sender_id = None;
    let mut sender_name = None;
    let mut target_id = None;
    let mut delivery = None;
    let mut content = None;
    let session = |text: Text<'_>| SessionId::new(text.into_owned()).ok();
    reader.object(|reader, key| {
        match key {
            b"id" if id.is_none() => id = Some(MessageId::new(reader.string()?.into_owned()).ok()?),
            b"senderId" if sender_id.is_none() => sender_id = Some(session(reader.string()?)?),
            b"senderName" if sender_name.is_none() => {
                sender_name = Some(reader.string()?.into_owned());
            }
            b"targetId" if target_id.is_none() => target_id = Some(session(reader.string()?)?),
            b"delivery" if delivery.is_none() => {
                delivery = Some(match reader.string()?.as_ref() {
                    "quiet" => Delivery::Quiet,
                    "wakeup" => Delivery::Wakeup,
                    _ => return None,
                });
            }
            b"content" if content.is_none() => {
                let mut plain = reader.clone();
                content = Some(match plain.text_blocks() {
                    Some(blocks) => {
                        *reader = plain;
                        blocks
                    }
                    None => {
                        let blocks: Vec<Value> = reader.serde()?;
                        validate_content(&blocks).ok()?;
                        blocks
                    }
                });
            }
            _ => return None,
        }
        Some(())
    })?;
    Some(MessageSnapshot {
        id: id?,
        sender_id: sender_id?,
        sender_name: sender_name?,
        target_id: target_id?,
        delivery: delivery?,
        content: content?,
    })
}

/// A strict reader of one line's JSON. Every method skips leading whitespace and answers
/// `None` for anything it does not read plainly.
#[derive(Clone)]
struct Reader<'a> {
    text: &'a str,
    /// The byte offset of the next unread byte (always at an ASCII byte or the end, so a
    /// char boundary).
    at: usize,
}

impl<'a> Cursor<'a> for Reader<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn at(&self) -> usize {
        self.at
    }

    fn set_at(&mut self, at: usize) {
        self.at = at;
    }
}

impl<'a> Reader<'a> {
    /// A JSON string. Without escapes it is borrowed (after the control-character check a
    /// JSON string needs); with escapes the token is decoded by `serde_json`.
    fn string(&mut self) -> Option<Text<'a>> {
        self.ws();
        let bytes = self.bytes();
        if bytes.get(self.at) != Some(&b'"') {
            return None;
        }
        let open = self.at;
        let start = open + 1;
        let end = find_special(bytes, start)?;
        match bytes[end] {
            b'"' => {
                self.at = end + 1;
                Some(Text(Cow::Borrowed(self.text.get(start..end)?)))
            }
            b'\\' => self.escaped_string(open, end),
            // A control character.
            _ => None,
        }
    }

    /// The rest of a string opened at `open` whose first escape is at `backslash`: the token
    /// decoded by `serde_json` (which checks escapes and control characters).
    fn escaped_string(&mut self, open: usize, backslash: usize) -> Option<Text<'a>> {
        let bytes = self.bytes();
        // Skip each escape's backslash and escaped byte (a `\u`'s hex digits are plain).
        let mut at = backslash + 2;
        loop {
            at += memchr::memchr2(b'"', b'\\', bytes.get(at..)?)?;
            if bytes[at] == b'"' {
                break;
            }
            at += 2;
        }
        self.at = at + 1;
        let token = self.text.get(open..=at)?;
        serde_json::from_str::<String>(token)
            .ok()
            .map(|s| Text(Cow::Owned(s)))
    }

    /// An array of strings.
    fn strings(&mut self) -> Option<StrList<'a>> {
        self.ws();
        let open = self.at;
        self.eat(b'[')?;
        self.ws();
        let mut len = 0;
        if self.peek() != Some(b']') {
            loop {
                self.string()?;
                len += 1;
                self.ws();
                match self.peek()? {
                    b',' => self.at += 1,
                    b']' => break,
                    _ => return None,
                }
            }
        }
        self.at += 1;
        Some(StrList {
            text: self.text.get(open..self.at)?,
            len,
        })
    }

    /// Content made of plain text blocks only — `[{"type":"text"|"reasoning","text":"…"}, …]`,
    /// each with exactly those two keys — as the `Value`s `serde_json` builds for them (keys
    /// inserted in text order). Such blocks are valid content (REFERENCE c.3), so they need no
    /// further check. `None` for anything else: the caller lets `serde_json` read it.
    fn text_blocks(&mut self) -> Option<Vec<Value>> {
        self.eat(b'[')?;
        let mut blocks = Vec::new();
        self.ws();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Some(blocks);
        }
        loop {
            let mut block = serde_json::Map::new();
            self.object(|reader, key| {
                let key = match key {
                    b"type" => "type",
                    b"text" => "text",
                    _ => return None,
                };
                if block.contains_key(key) {
                    return None;
                }
                let value = reader.string()?;
                if key == "type" && !matches!(value.as_ref(), "text" | "reasoning") {
                    return None;
                }
                block.insert(key.to_owned(), Value::String(value.into_owned()));
                Some(())
            })?;
            if block.len() != 2 {
                return None;
            }
            blocks.push(Value::Object(block));
            self.ws();
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(blocks);
                }
                _ => return None,
            }
        }
    }

    /// One object or array, decoded in place by `serde_json` as a `T`.
    ///
    /// `serde_json` refuses values nested deeper than its recursion limit (128) counted from
    /// the start of what it parses; the `Value` path starts at the line, this one a few levels
    /// deeper. So a value with more than [`MAX_PLAIN_BRACKETS`] brackets (counting any in
    /// strings too, an over-estimate of its depth) is left to the `Value` path.
    fn serde<T: Deserialize<'a>>(&mut self) -> Option<T> {
        self.ws();
        if !matches!(self.peek(), Some(b'{' | b'[')) {
            return None;
        }
        let rest = self.text.get(self.at..)?;
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<T>();
        let value = stream.next()?.ok()?;
        let len = stream.byte_offset();
        let brackets = rest.as_bytes()[..len]
            .iter()
            .fold(0usize, |n, &b| n + usize::from(b == b'{' || b == b'['));
        if brackets > MAX_PLAIN_BRACKETS {
            return None;
        }
        self.at += len;
        Some(value)
    }
}
