use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Seq;

/// One stored event of a session log (DESIGN §3, REFERENCE a.2).
///
/// Wire shape, one compact JSON object per line:
/// `{"seq":N,"time":MS,"type":"…","batchLast"?:M,"data":{…},"ignorable"?:true}`.
/// - `seq`: 0-based and contiguous within the log.
/// - `time`: epoch milliseconds at append.
/// - `type`: the event type, e.g. `turn/end` (see [`crate::event_types`]).
/// - `batchLast`: set on the first event of a batch of two or more events appended together
///   (DESIGN decision 9): the seq of the batch's last event. A reader uses the events
///   `seq..=batchLast` all together or not at all; an event without it is a batch of one.
///   Writers put it right after `type` (readers that read only the envelope prefix look for it
///   there).
/// - `data`: the type-specific payload (any JSON value; `{}` when there is none).
/// - `ignorable`: a reader that does not know `type` may skip the event; absent means the
///   type is *required* and an unknown required type refuses the load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the log.
    pub seq: Seq,
    /// Append time, epoch milliseconds.
    pub time: u64,
    /// The event type.
    #[serde(rename = "type")]
    pub kind: String,
    /// On the first event of a batch of two or more: the seq of the batch's last event (see
    /// the type's docs). `None` for a batch of one and for every later event of a batch.
    #[serde(rename = "batchLast", default, skip_serializing_if = "Option::is_none")]
    pub batch_last: Option<Seq>,
    /// The payload.
    #[serde(default)]
    pub data: Value,
    /// Whether a reader may skip this event when it does not know its type.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignorable: bool,
}

impl Event {
    /// Whether this build knows the event's type (see [`crate::event_types::is_known`]).
    pub fn is_known(&self) -> bool {
        crate::event_types::is_known(&self.kind)
    }

    /// Whether `line` is a valid [`Event`] — exactly what `serde_json` accepts as one (same
    /// members, same duplicate and type rules, every value checked as a `serde_json::Value`
    /// would be, the same recursion limit) — without building its payload: what a reader that
    /// decodes a log line in its own way checks so as to accept nothing `Event` refuses (the
    /// journal's selective scan's contract for a line its reader uses; `troupe team verify`,
    /// `Transcript::apply_line` in `troupe-session`).
    pub fn is_valid_line(line: &str) -> bool {
        /// Any JSON value, checked through `deserialize_any` as `serde_json::Value` is, and kept
        /// nowhere.
        #[derive(Default)]
        struct AnyValue;

        impl<'de> serde::Deserialize<'de> for AnyValue {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any(AnyVisitor)
            }
        }

        struct AnyVisitor;

        impl<'de> serde::de::Visitor<'de> for AnyVisitor {
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
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<AnyValue, A::Error> {
                while seq.next_element::<AnyValue>()?.is_some() {}
                Ok(AnyValue)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<AnyValue, A::Error> {
                while map.next_entry::<AnyValue, AnyValue>()?.is_some() {}
                Ok(AnyValue)
            }
        }

        /// `Event`'s members with `Event`'s types, the payload checked but not kept.
        #[derive(serde::Deserialize)]
        #[allow(dead_code)] // Only its acceptance matters.
        struct EventShape<'a> {
            seq: Seq,
            time: u64,
            #[serde(rename = "type", borrow)]
            kind: std::borrow::Cow<'a, str>,
            #[serde(rename = "batchLast", default)]
            batch_last: Option<Seq>,
            #[serde(default)]
            data: AnyValue,
            #[serde(default)]
            ignorable: bool,
        }

        serde_json::from_str::<EventShape<'_>>(line).is_ok()
    }
}

/// An event not yet appended: the writer assigns `seq` and `time`.
#[derive(Debug, Clone, PartialEq)]
pub struct EventDraft {
    /// The event type.
    pub kind: String,
    /// The payload.
    pub data: Value,
    /// See [`Event::ignorable`].
    pub ignorable: bool,
}

impl EventDraft {
    /// A required event of type `kind` with payload `data`.
    pub fn new(kind: impl Into<String>, data: Value) -> Self {
        Self {
            kind: kind.into(),
            data,
            ignorable: false,
        }
    }

    /// An ignorable event (readers that do not know `kind` skip it).
    pub fn ignorable(kind: impl Into<String>, data: Value) -> Self {
        Self {
            kind: kind.into(),
            data,
            ignorable: true,
        }
    }

    /// Stamps the draft into a stored [`Event`].
    pub fn into_event(self, seq: Seq, time_ms: u64) -> Event {
        Event {
            seq,
            time: time_ms,
            kind: self.kind,
            batch_last: None,
            data: self.data,
            ignorable: self.ignorable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wire_shape_is_compact_and_omits_default_ignorable() {
        let e = EventDraft::new("turn/start", json!({"turn": 1})).into_event(Seq(3), 42);
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"seq":3,"time":42,"type":"turn/start","data":{"turn":1}}"#
        );
        let e = EventDraft::ignorable("x/y", json!({})).into_event(Seq(0), 1);
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"seq":0,"time":1,"type":"x/y","data":{},"ignorable":true}"#
        );
    }

    #[test]
    fn batch_last_follows_the_type_and_round_trips() {
        let mut e = EventDraft::new("turn/start", json!({"turn": 1})).into_event(Seq(3), 42);
        e.batch_last = Some(Seq(5));
        let line = serde_json::to_string(&e).unwrap();
        assert_eq!(
            line,
            r#"{"seq":3,"time":42,"type":"turn/start","batchLast":5,"data":{"turn":1}}"#
        );
        assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), e);
    }

    /// `Event::is_valid_line` agrees with `serde_json::from_str::<Event>`: on hand-picked edge
    /// cases, and on every line made by replacing, inserting or deleting one byte of real
    /// lines (with each of a set of JSON-significant bytes).
    #[test]
    fn is_valid_line_accepts_exactly_what_event_accepts() {
        let same = |line: &str| {
            let event = serde_json::from_str::<Event>(line).is_ok();
            assert_eq!(Event::is_valid_line(line), event, "{line:?}");
        };
        let deep = format!(
            r#"{{"seq":1,"time":2,"type":"x","data":{}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        for line in [
            r#"{"seq":1,"time":2,"type":"turn/start","data":{"turn":1}}"#,
            r#"{"seq":1,"time":2,"type":"turn/start"}"#,
            r#"{"seq":1,"time":2,"type":"turn/start","data":null,"ignorable":true}"#,
            r#"{"seq":1,"time":2,"type":"t","data":"\ud800"}"#,
            r#"{"seq":1,"time":2,"type":"t","data":"\ud83d\ude00"}"#,
            r#"{"seq":1,"time":2,"type":"t","data":"\udc00\ud800"}"#,
            r#"{"seq":1,"time":2,"type":"t","extra":"\ud800"}"#,
            r#"{"seq":1,"time":2,"type":"t","data":1e400}"#,
            r#"{"seq":1,"time":2,"type":"t","data":-1e-400}"#,
            r#"{"seq":1,"time":2,"type":"t","data":123456789012345678901234567890}"#,
            r#"{"seq":1,"time":2,"type":"t","data":{"a":1,"a":2}}"#,
            r#"{"seq":1,"seq":1,"time":2,"type":"t"}"#,
            r#"{"seq":1,"time":2,"type":"t","data":{},"data":{}}"#,
            r#"{"seq":1,"time":2,"type":"t","data":"\x"}"#,
            "{\"seq\":1,\"time\":2,\"type\":\"t\",\"data\":\"a\tb\"}",
            r#"{"seq":-1,"time":2,"type":"t"}"#,
            r#"{"seq":1.0,"time":2,"type":"t"}"#,
            r#"{"seq":1,"time":2,"type":"t\u0000"}"#,
            r#"{"seq":1,"time":2,"type":7}"#,
            r#"{"seq":1,"time":2,"type":"t","ignorable":"yes"}"#,
            r#"{"seq":1,"time":2,"type":"t","data":[1,2,]}"#,
            r#"{"seq":1,"time":2,"type":"t"} x"#,
            r#"[1,2,"t",{}]"#,
            &deep,
        ] {
            same(line);
        }
        let real = [
            r#"{"seq":9,"time":1796118561321,"type":"assistant/message","data":{"finishReason":"tool_calls","message":{"content":null,"tool_calls":[{"function":{"arguments":"{\"path\":\"wordstats/counting.py\"}","name":"read"},"id":"call_beta_1","type":"function"}]},"step":1,"turn":1}}"#,
            r#"{"seq":3,"time":1,"type":"request/header","data":{"n":-0.5e3,"ok":true,"none":null,"s":"caf\u00e9 \ud83d\ude00"},"ignorable":false}"#,
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
                        same(text);
                    }
                }
            }
        }
    }
}
