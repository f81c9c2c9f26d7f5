//! The fast line path of the readers that want a few members of a few event types (the
//! receipts, the ledger's usage, the write radar's changes): a selected line is checked as the
//! journal checks an [`Event`] — exactly what `serde_json` accepts as one — in one pass that
//! keeps only the payload members the reader names ([`pick_event`]), instead of building the
//! whole payload as a `serde_json::Value`. The result is an [`Event`] whose `data` holds just
//! those members, so the readers' own fold code (`Receipts::apply_lead`, `SessionUsage::apply`,
//! `ChangeFold::apply`) runs on it unchanged.
//!
//! Every other member of the payload is checked as a `serde_json::Value` would check it
//! (through `deserialize_any`: the same escapes, surrogate, number-range and recursion rules)
//! and kept nowhere. A line this reader does not take plainly — a payload that is not an
//! object, or a named member given twice (a `Value` keeps the last one) — gives `None`, and the
//! caller asks the journal for the parsed event as before.

use std::borrow::Cow;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde_json::{Map, Value};
use troupe_protocol::{Event, Seq, event_types};

/// How [`pick_event`] keeps a payload member it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    /// The member's value, whole.
    Value,
    /// Only that it is there: a string becomes `""`, any other value is kept whole (for a
    /// member the reader's record must find, with its type, but never reads — a tool result's
    /// `content`).
    Text,
    /// Only that it is there: any value becomes `null` (for a member of type
    /// `serde_json::Value` in the reader's record that it never reads — a tool call's
    /// `arguments`).
    Present,
}

/// The payload members one reader takes from lines of one event type.
pub(crate) trait Pick {
    /// The members (as written in the payload, after escapes are decoded) and how each is kept.
    const MEMBERS: &'static [(&'static str, Keep)];
}

/// The envelope `time` (epoch ms) of a line the selective scan handed out unparsed: the scan
/// has read `seq`, `time` and `type` as its leading members (no escapes; a number `seq`, a
/// known `type`), so the first `"time"` of the text is that member's key. `None` for a text
/// not in that form (the caller then asks for the parsed event).
pub(crate) fn envelope_time(text: &str) -> Option<u64> {
    // The key is among the first few bytes: a plain search, no searcher to set up.
    const KEY: &[u8] = b"\"time\"";
    let at = text.as_bytes().windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let rest = text[at..].trim_start().strip_prefix(':')?.trim_start();
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    rest[..digits].parse().ok()
}

/// Whether `line` is a valid [`troupe_protocol::Event`] — exactly what `serde_json` accepts as
/// one (same members, same duplicate and type rules, every value checked as a
/// `serde_json::Value` would be, the same recursion limit) — without building its payload.
/// The selective scan's contract for `LineUse::Used`: accept nothing `Event` refuses.
pub(crate) fn is_valid_event(line: &str) -> bool {
    serde_json::from_str::<EventShape<'_, AnyValue>>(line).is_ok()
}

/// The event of `line` with only `P`'s members in its payload (see the module docs): `None`
/// when `line` is not a valid [`Event`], when its payload is not an object (or absent), or
/// when a member `P` names appears twice in it.
pub(crate) fn pick_event<P: Pick>(line: &str) -> Option<Event> {
    let shape = serde_json::from_str::<EventShape<'_, Picked<P>>>(line).ok()?;
    let Picked(data, _) = shape.data?;
    Some(Event {
        seq: shape.seq,
        time: shape.time,
        kind: shape.kind.into_owned(),
        batch_last: shape.batch_last,
        data: Value::Object(data),
        ignorable: shape.ignorable,
    })
}

/// `Event`'s members with `Event`'s types, the payload read as `D`.
#[derive(serde::Deserialize)]
struct EventShape<'a, D> {
    seq: Seq,
    time: u64,
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(rename = "batchLast", default)]
    batch_last: Option<Seq>,
    #[serde(default = "Option::default")]
    data: Option<D>,
    #[serde(default)]
    ignorable: bool,
}

/// Any JSON value, checked through `deserialize_any` as `serde_json::Value` is, and kept
/// nowhere.
struct AnyValue;

impl<'de> serde::Deserialize<'de> for AnyValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(AnyVisitor)
    }
}

struct AnyVisitor;

impl<'de> Visitor<'de> for AnyVisitor {
    type Value = AnyValue;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any valid JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<AnyValue, E> {
        Ok(AnyValue)
    }
    fn visit_i64<E>(self, _: i64) -> Result<AnyValue, E> {
        Ok(AnyValue)
    }
    fn visit_u64<E>(self, _: u64) -> Result<AnyValue, E> {
        Ok(AnyValue)
    }
    fn visit_f64<E>(self, _: f64) -> Result<AnyValue, E> {
        Ok(AnyValue)
    }
    fn visit_str<E>(self, _: &str) -> Result<AnyValue, E> {
        Ok(AnyValue)
    }
    fn visit_unit<E>(self) -> Result<AnyValue, E> {
        Ok(AnyValue)
    }
    fn visit_none<E>(self) -> Result<AnyValue, E> {
        Ok(AnyValue)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<AnyValue, D::Error> {
        serde::Deserialize::deserialize(d)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<AnyValue, A::Error> {
        while seq.next_element::<AnyValue>()?.is_some() {}
        Ok(AnyValue)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnyValue, A::Error> {
        while map.next_entry::<AnyValue, AnyValue>()?.is_some() {}
        Ok(AnyValue)
    }
}

/// A payload object with only `P`'s members kept.
struct Picked<P>(Map<String, Value>, PhantomData<P>);

impl<'de, P: Pick> serde::Deserialize<'de> for Picked<P> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // `deserialize_any`, as `Value` reads it: the same recursion count; a non-object is
        // refused by the visitor (the caller then parses the line).
        d.deserialize_any(PickedVisitor::<P>(PhantomData))
    }
}

struct PickedVisitor<P>(PhantomData<P>);

impl<'de, P: Pick> Visitor<'de> for PickedVisitor<P> {
    type Value = Picked<P>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a payload object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Picked<P>, A::Error> {
        let mut kept = Map::new();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let Some((_, keep)) = P::MEMBERS.iter().find(|(name, _)| *name == key.0) else {
                map.next_value::<AnyValue>()?;
                continue;
            };
            if kept.contains_key(key.0.as_ref()) {
                return Err(de::Error::custom("a picked member given twice"));
            }
            let value = match keep {
                Keep::Value => map.next_value::<Value>()?,
                Keep::Text => map.next_value_seed(TextSeed)?,
                Keep::Present => {
                    map.next_value::<AnyValue>()?;
                    Value::Null
                }
            };
            kept.insert(key.0.into_owned(), value);
        }
        Ok(Picked(kept, PhantomData))
    }
}

/// A member name, borrowed from the line when it has no escape.
struct Key<'de>(Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// [`Keep::Text`]: a string (checked, not copied) becomes `""`; any other value is kept.
struct TextSeed;

impl<'de> DeserializeSeed<'de> for TextSeed {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Value;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any valid JSON value")
            }
            fn visit_str<E>(self, _: &str) -> Result<Value, E> {
                Ok(Value::String(String::new()))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
                Ok(Value::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
                Ok(Value::from(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
                Ok(Value::from(v))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
                serde_json::Number::from_f64(v)
                    .map(Value::Number)
                    .ok_or_else(|| E::custom("not a JSON number"))
            }
            fn visit_unit<E>(self) -> Result<Value, E> {
                Ok(Value::Null)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
                // Not a string: kept whole, as `Value` reads it.
                serde::Deserialize::deserialize(de::value::SeqAccessDeserializer::new(seq))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
                serde::Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_any(TextVisitor)
    }
}

/// The payload members `Receipts::apply_lead` reads of a `team/message/delivered`.
pub(crate) struct DeliveredPick;
impl Pick for DeliveredPick {
    const MEMBERS: &'static [(&'static str, Keep)] =
        &[("teamId", Keep::Value), ("messageId", Keep::Value)];
}

/// `turn/start`: the receipts' turn number (`turn/end` is read for its type alone).
pub(crate) struct TurnPick;
impl Pick for TurnPick {
    const MEMBERS: &'static [(&'static str, Keep)] = &[("turn", Keep::Value)];
}

/// `turn/end`: nothing of the payload.
pub(crate) struct NothingPick;
impl Pick for NothingPick {
    const MEMBERS: &'static [(&'static str, Keep)] = &[];
}

/// `user/message`: a claim's Team message (its `source`, else its `id`).
pub(crate) struct ClaimPick;
impl Pick for ClaimPick {
    const MEMBERS: &'static [(&'static str, Keep)] =
        &[("source", Keep::Value), ("id", Keep::Value)];
}

/// `assistant/message`: the ledger's `usage`.
pub(crate) struct UsagePick;
impl Pick for UsagePick {
    const MEMBERS: &'static [(&'static str, Keep)] = &[("usage", Keep::Value)];
}

/// `tool/call`: every member of a `ToolCallRecord` (the write radar decodes one), its
/// `arguments` (a `Value`, never read) only as present.
pub(crate) struct ToolCallPick;
impl Pick for ToolCallPick {
    const MEMBERS: &'static [(&'static str, Keep)] = &[
        ("turn", Keep::Value),
        ("step", Keep::Value),
        ("callId", Keep::Value),
        ("name", Keep::Value),
        ("arguments", Keep::Present),
        ("effect", Keep::Value),
    ];
}

/// `tool/result`: every member of a `ToolResultRecord` (the write radar decodes one), its
/// `content` (a string, never read) only as present.
pub(crate) struct ToolResultPick;
impl Pick for ToolResultPick {
    const MEMBERS: &'static [(&'static str, Keep)] = &[
        ("turn", Keep::Value),
        ("step", Keep::Value),
        ("callId", Keep::Value),
        ("name", Keep::Value),
        ("isError", Keep::Value),
        ("code", Keep::Value),
        ("content", Keep::Text),
        ("messageId", Keep::Value),
        ("sourceEventSeqs", Keep::Value),
        ("seen", Keep::Value),
        ("changed", Keep::Value),
    ];
}

/// The fast read of a runtime line of `kind` for its one reader in `troupe team show` (the
/// receipts' turns and claims, the ledger's answers, the write radar's tool calls and results;
/// the Lead's in `LeadLog::read_at`'s `TeamAndMail` pass, each teammate's in its
/// `TeammateScan`): the event with only the payload members that reader takes
/// ([`pick_event`]); `None` for another type, or for a line to parse (see the module docs).
pub(crate) fn runtime_pick(kind: &str, text: &str) -> Option<Event> {
    match kind {
        event_types::TURN_START => pick_event::<TurnPick>(text),
        event_types::TURN_END => pick_event::<NothingPick>(text),
        event_types::USER_MESSAGE => pick_event::<ClaimPick>(text),
        event_types::ASSISTANT_MESSAGE => pick_event::<UsagePick>(text),
        event_types::TOOL_CALL => pick_event::<ToolCallPick>(text),
        event_types::TOOL_RESULT => pick_event::<ToolResultPick>(text),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TurnStart;
    impl Pick for TurnStart {
        const MEMBERS: &'static [(&'static str, Keep)] = &[("turn", Keep::Value)];
    }

    struct ToolResult;
    impl Pick for ToolResult {
        const MEMBERS: &'static [(&'static str, Keep)] = &[
            ("callId", Keep::Value),
            ("content", Keep::Text),
            ("arguments", Keep::Present),
        ];
    }

    /// What the full parse gives for `P`'s members: the envelope, and each named member
    /// (`Keep::Text` strings as `""`, `Keep::Present` as `null`) — what `pick_event` must equal.
    fn expected<P: Pick>(event: &Event) -> Option<Event> {
        let object = event.data.as_object()?;
        let mut data = Map::new();
        for (name, keep) in P::MEMBERS {
            if let Some(value) = object.get(*name) {
                let value = match (keep, value) {
                    (Keep::Text, Value::String(_)) => Value::String(String::new()),
                    (Keep::Present, _) => Value::Null,
                    _ => value.clone(),
                };
                data.insert((*name).to_owned(), value);
            }
        }
        Some(Event {
            data: Value::Object(data),
            kind: event.kind.clone(),
            ..*event
        })
    }

    /// `pick_event` takes a line only when `Event` takes it, and then gives exactly the full
    /// parse's envelope and named members: on hand-picked edge cases and on every line made by
    /// replacing, inserting or deleting one byte of real lines; where it declines a valid line,
    /// that is a repeated member or a non-object payload (the caller's parse then reads it).
    #[test]
    fn pick_event_agrees_with_the_full_parse() {
        fn same<P: Pick>(line: &str) {
            let full = serde_json::from_str::<Event>(line).ok();
            let picked = pick_event::<P>(line);
            match (&full, &picked) {
                (None, Some(_)) => panic!("picked a line Event refuses: {line:?}"),
                (Some(full), Some(picked)) => {
                    assert_eq!(Some(picked), expected::<P>(full).as_ref(), "{line:?}");
                }
                (Some(full), None) => assert!(
                    !full.data.is_object()
                        || line.matches("\"turn\"").count() > 1
                        || line.matches("\"callId\"").count() > 1
                        || line.matches("\"content\"").count() > 1
                        || line.matches("\"arguments\"").count() > 1
                        || line.contains("\\u"),
                    "declined a plain valid line: {line:?}"
                ),
                (None, None) => {}
            }
            assert_eq!(is_valid_event(line), full.is_some(), "{line:?}");
        }
        for line in [
            r#"{"seq":1,"time":2,"type":"turn/start","data":{"turn":1}}"#,
            r#"{"seq":1,"time":2,"type":"turn/start"}"#,
            r#"{"seq":1,"time":2,"type":"turn/start","data":null,"ignorable":true}"#,
            r#"{"seq":1,"time":2,"type":"t","data":{"turn":1,"turn":2}}"#,
            r#"{"seq":1,"time":2,"type":"t","data":{"\u0074urn":1}}"#,
            r#"{"seq":1,"time":2,"type":"t","data":{"x":"\ud800","turn":1}}"#,
            r#"{"seq":1,"time":2,"type":"t","data":{"x":1e400,"turn":1}}"#,
            r#"{"seq":1,"time":2,"type":"t","data":{"content":"\ud800"}}"#,
            r#"{"seq":1,"time":2,"type":"t","data":{"content":[1,{"a":"b"}],"callId":"c"}}"#,
            r#"{"seq":1,"time":2,"type":"t","data":{"arguments":{"a":[1e400]}}}"#,
            r#"{"seq":1,"time":2,"type":"t","data":{"turn":1},"data":{}}"#,
            r#"{"seq":1,"time":2,"type":"t","batchLast":4,"data":{"turn":-1.5e3}}"#,
        ] {
            same::<TurnStart>(line);
            same::<ToolResult>(line);
        }
        let real = [
            r#"{"seq":18,"time":1767225603831,"type":"turn/start","data":{"turn":2}}"#,
            r#"{"seq":24,"time":1767225604653,"type":"tool/result","data":{"callId":"call_00","content":"caf\u00e9 a\nb","isError":false,"name":"bash","arguments":{"p":[1,2.5]},"step":1,"turn":2}}"#,
        ];
        let bytes_to_try = *br#""\{}[],:1e-un "#;
        for line in real {
            let bytes = line.as_bytes();
            for at in 0..bytes.len() {
                let mut candidates = Vec::new();
                for b in bytes_to_try {
                    let mut replaced = bytes.to_vec();
                    replaced[at] = b;
                    candidates.push(replaced);
                    let mut inserted = bytes.to_vec();
                    inserted.insert(at, b);
                    candidates.push(inserted);
                }
                let mut deleted = bytes.to_vec();
                deleted.remove(at);
                candidates.push(deleted);
                for candidate in candidates {
                    if let Ok(text) = std::str::from_utf8(&candidate) {
                        same::<TurnStart>(text);
                        same::<ToolResult>(text);
                    }
                }
            }
        }
    }
}
