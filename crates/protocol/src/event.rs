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
}
