//! The fold's fast path: a whole `team/…` Lead-log line decoded in one pass, without building
//! a `serde_json::Value` (REFERENCE c.4 is unchanged; only the decoding is faster).
//!
//! The line is decoded by `serde_json` straight into `#[derive(Deserialize)]` structs of the
//! envelope and the payload, strings borrowed from the line (`Cow<str>`: owned only when they
//! had escapes). The decoder answers `None` whenever the line is not read exactly as written
//! below, and the caller then takes the `Value` path ([`crate::record::decode`]), which decides.
//! So the fast path never refuses by itself, and what it accepts is what the `Value` path
//! accepts, with the same values:
//! - its envelope is [`troupe_protocol::Event`]'s (`seq`, `time`, `type`, `data`, optional
//!   `batchLast` and `ignorable`, same types, same `default`s; no other member), so the line is
//!   a valid event; nothing but whitespace may follow it;
//! - its payload is an object with exactly the strict shape's keys of REFERENCE c.3, `version`
//!   the integer 1 and `teamId` a non-empty string (the loose selector passes);
//! - members and messages are decoded by the same `Deserialize` impls as in the `Value` path
//!   (message content validated by the same [`validate_content`]); task and delivery ids are
//!   kept as borrowed strings and checked by the caller with the same constructors;
//! - strings, integers, `null` and enum spellings are `serde_json`'s, as in the `Value` path.
//!
//! Where serde derive reads more than the `Value` path, or reads it differently, the line is
//! handed over instead:
//! - a repeated key (a `Value` keeps the last one; derive refuses `duplicate field`);
//! - an array where a struct is expected (derive would read it as the struct's members in
//!   order; the `Value` path refuses a payload that is not an object): every struct of the
//!   strict shape must be a JSON object ([`object`]);
//! - an unknown member anywhere, the envelope included (`Event` ignores unknown envelope
//!   members: `deny_unknown_fields` hands such a line over rather than skipping its value).
//!
//! Two more shapes are handed over although derive reads them exactly as the `Value` path
//! does, keeping the former hand reader's rule (the line tests pin it): a line with an escape
//! in a key ([`has_escaped_key`]), and a `team/message/queued` line with more than
//! [`MAX_PLAIN_BRACKETS`] `{`/`[` bytes. (Nesting needs no rule of its own: both paths parse
//! from the start of the line, so `serde_json`'s recursion limit of 128 refuses the same lines.)

use std::borrow::Cow;

use serde::de::Visitor;
use serde::{Deserialize, Deserializer};
use troupe_protocol::json_scan::skip_ws;
use troupe_protocol::{MessageId, SessionId, event_types};

use crate::content::validate_content;
use crate::ids::{Revision, TaskId};
use crate::record::{MemberSnapshot, MessageSnapshot, TEAM_EVENT_VERSION, TaskStatus, present};

/// The most `{`/`[` bytes (counting any in strings too) a `team/message/queued` line may hold
/// on the fast path.
const MAX_PLAIN_BRACKETS: usize = 100;

/// A string of a line: borrowed, or owned when it had escapes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub(crate) struct Text<'a>(#[serde(borrow)] pub(crate) Cow<'a, str>);

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

/// A `team/task` snapshot as its line holds it: [`crate::TaskSnapshot`]'s members (same names,
/// order, `ownerId` optional but not `null`), with the strings borrowed and the id, revision
/// and owner rules not yet checked (the fold checks them).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TaskText<'a> {
    #[serde(borrow)]
    pub(crate) id: Text<'a>,
    pub(crate) revision: u64,
    #[serde(borrow)]
    pub(crate) subject: Text<'a>,
    #[serde(borrow)]
    pub(crate) description: Text<'a>,
    pub(crate) status: TaskStatus,
    #[serde(borrow, default, deserialize_with = "present")]
    pub(crate) owner_id: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) blocked_by: Vec<Text<'a>>,
    #[serde(borrow)]
    pub(crate) write_scopes: Vec<Text<'a>>,
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

/// An event line: [`troupe_protocol::Event`]'s members, with the payload `P` decoded in the
/// same pass.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    bound(deserialize = "P: Deserialize<'de>, 'de: 'a")
)]
struct EventLine<'a, P> {
    #[serde(rename = "seq")]
    _seq: u64,
    #[serde(rename = "time")]
    _time: u64,
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    // Batch framing (DESIGN decision 9) is the journal's: the scan has checked it. As in
    // `Event`, `null` is its absence.
    #[serde(rename = "batchLast", default)]
    _batch_last: Option<u64>,
    #[serde(deserialize_with = "object")]
    data: P,
    #[serde(rename = "ignorable", default)]
    _ignorable: bool,
}

/// `team/member {version, teamId, member}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MemberData<'a> {
    version: u64,
    #[serde(borrow)]
    team_id: Text<'a>,
    #[serde(deserialize_with = "object")]
    member: MemberSnapshot,
}

/// `team/task {version, teamId, task}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TaskData<'a> {
    version: u64,
    #[serde(borrow)]
    team_id: Text<'a>,
    #[serde(borrow, deserialize_with = "object")]
    task: TaskText<'a>,
}

/// `team/message/queued {version, teamId, message}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct QueuedData<'a> {
    version: u64,
    #[serde(borrow)]
    team_id: Text<'a>,
    #[serde(deserialize_with = "object")]
    message: MessageSnapshot,
}

/// `team/message/delivered {version, teamId, messageId, targetId}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DeliveredData<'a> {
    version: u64,
    #[serde(borrow)]
    team_id: Text<'a>,
    #[serde(borrow)]
    message_id: Text<'a>,
    #[serde(borrow)]
    target_id: Text<'a>,
}

/// Decodes a whole Lead-log line of the Team type `kind`: `Some((teamId, record))` when the
/// line is a valid event of type `kind` whose payload is a valid `version: 1` record read
/// as the module docs say (task and delivery ids are checked by the caller), `None` whenever
/// the `Value` path must decide.
pub(crate) fn decode_line<'a>(kind: &str, line: &'a str) -> Option<(Text<'a>, LineRecord<'a>)> {
    if has_escaped_key(line.as_bytes()) {
        return None;
    }
    let (version, team_id, record) = match kind {
        event_types::TEAM_TASK => {
            let data: TaskData = event_data(kind, line)?;
            (data.version, data.team_id, LineRecord::Task(data.task))
        }
        event_types::TEAM_MEMBER => {
            let data: MemberData = event_data(kind, line)?;
            (data.version, data.team_id, LineRecord::Member(data.member))
        }
        event_types::TEAM_MESSAGE_QUEUED => {
            if more_brackets(line, MAX_PLAIN_BRACKETS) {
                return None;
            }
            let data: QueuedData = event_data(kind, line)?;
            validate_content(&data.message.content).ok()?;
            let record = LineRecord::MessageQueued(data.message);
            (data.version, data.team_id, record)
        }
        event_types::TEAM_MESSAGE_DELIVERED => {
            let data: DeliveredData = event_data(kind, line)?;
            let record = LineRecord::MessageDelivered {
                message_id: data.message_id,
                target_id: data.target_id,
            };
            (data.version, data.team_id, record)
        }
        _ => return None,
    };
    (version == TEAM_EVENT_VERSION && !team_id.0.is_empty()).then_some((team_id, record))
}

/// The payload of `line` when it is a whole event of type `kind` with a payload `P`.
fn event_data<'a, P: Deserialize<'a>>(kind: &str, line: &'a str) -> Option<P> {
    let mut deserializer = serde_json::Deserializer::from_str(line);
    let event = object::<_, EventLine<'a, P>>(&mut deserializer).ok()?;
    // Only whitespace may follow.
    deserializer.end().ok()?;
    (event.kind == kind).then_some(event.data)
}

/// A struct `T` read only from a JSON object: serde derive would also read an array as the
/// struct's members in order, which the `Value` path does not accept everywhere.
fn object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(deserializer: D) -> Result<T, D::Error> {
    T::deserialize(ObjectOnly(deserializer))
}

/// A deserializer that reads a struct as a map (`serde_json` then refuses anything but an
/// object); everything else goes to the inner deserializer as it is.
struct ObjectOnly<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for ObjectOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// Whether the JSON text `line` has a key with an escape (`"\u0074ype":…`). Linear: from
/// each string's first backslash to its closing quote, then on after it. (A backslash outside
/// a string is not JSON; the decode refuses it.)
fn has_escaped_key(line: &[u8]) -> bool {
    let mut at = 0;
    while let Some(found) = line.get(at..).and_then(|rest| memchr::memchr(b'\\', rest)) {
        let mut end = at + found;
        // At a backslash: skip the escape's two bytes (a `\u`'s hex digits are plain), up to
        // the next quote or backslash.
        loop {
            end += 2;
            let Some(next) = line
                .get(end..)
                .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
            else {
                return false;
            };
            end += next;
            if line[end] == b'"' {
                break;
            }
        }
        if line.get(skip_ws(line, end + 1)) == Some(&b':') {
            return true;
        }
        at = end + 1;
    }
    false
}

/// Whether `line` holds more than `max` `{` and `[` bytes.
fn more_brackets(line: &str, max: usize) -> bool {
    memchr::memchr2_iter(b'{', b'[', line.as_bytes())
        .nth(max)
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_keys_are_found_and_escaped_values_are_not() {
        for (line, escaped) in [
            (r#"{"a":"b"}"#, false),
            (r#"{"a":"\"b\\"}"#, false),
            (r#"{"a":"x\\","b":"\n"}"#, false),
            (r#"{"a":["\"", "\\"] , "c" : "\u0041"}"#, false),
            (r#"{"\u0061":"b"}"#, true),
            (r#"{"a":"\\", "b\"" : 1}"#, true),
            (r#"{"a":"\\","b":{"c\\d"  :1}}"#, true),
            (r#"{"a":"\\":}"#, true),
            // Not JSON (the decode refuses it): no answer is wrong, none may panic.
            (r#"{"a":"\"#, false),
            (r#"{"a":"\\"#, false),
            ("\\", false),
        ] {
            assert_eq!(has_escaped_key(line.as_bytes()), escaped, "{line}");
        }
    }

    #[test]
    fn structs_are_read_from_objects_only() {
        let task = r#"{"id":"task-1","revision":1,"subject":"s","description":"d","status":"pending","blockedBy":[],"writeScopes":[]}"#;
        let mut deserializer = serde_json::Deserializer::from_str(task);
        let read: TaskText = object(&mut deserializer).unwrap();
        assert_eq!(read.id.as_ref(), "task-1");
        assert!(matches!(read.id.0, Cow::Borrowed(_)));
        let array = r#"["task-1",1,"s","d","pending","w1",["task-2"],[]]"#;
        // serde derive alone reads the array form …
        assert!(serde_json::from_str::<TaskText>(array).is_ok());
        // … `object` does not.
        let mut deserializer = serde_json::Deserializer::from_str(array);
        assert!(object::<_, TaskText>(&mut deserializer).is_err());
    }
}
