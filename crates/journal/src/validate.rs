//! Append-time checks: the writer refuses anything its own reader would refuse or could not
//! read back, so an acknowledged event is always replayable.

use serde_json::Value;
use troupe_protocol::EventDraft;

/// The deepest nesting of arrays/objects accepted in an event's `data` (the top-level value
/// counts as depth 1). serde_json reads at most 128 levels per line; the envelope uses one,
/// and this limit leaves a wide margin.
pub const MAX_DATA_DEPTH: usize = 64;

/// The longest accepted event type, in bytes.
pub const MAX_TYPE_LEN: usize = 128;

/// Why `draft` cannot be appended, or `None` when it can.
pub(crate) fn refusal(draft: &EventDraft) -> Option<String> {
    let kind = &draft.kind;
    if kind.is_empty() || kind.len() > MAX_TYPE_LEN {
        return Some(format!(
            "event type must be 1-{MAX_TYPE_LEN} bytes, got {}",
            kind.len()
        ));
    }
    if !kind
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'.' | b'-'))
    {
        return Some(format!("event type {kind:?} may only use [A-Za-z0-9/_.-]"));
    }
    if !draft.ignorable && !troupe_protocol::event_types::is_known(kind) {
        return Some(format!(
            "unknown required event type {kind:?}: readers would refuse the log (mark it ignorable or register the type)"
        ));
    }
    let depth = depth(&draft.data);
    if depth > MAX_DATA_DEPTH {
        return Some(format!(
            "payload of {kind:?} is nested {depth} levels deep (at most {MAX_DATA_DEPTH})"
        ));
    }
    None
}

/// Nesting depth of a JSON value (scalars are depth 1), computed without recursion.
fn depth(value: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(value, 1usize)];
    while let Some((v, d)) = stack.pop() {
        max = max.max(d);
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => stack.extend(map.values().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        let mut v = json!(1);
        for _ in 1..levels {
            v = json!([v]);
        }
        v
    }

    #[test]
    fn depth_counts_levels() {
        assert_eq!(depth(&json!(1)), 1);
        assert_eq!(depth(&json!({"a": [1]})), 3);
        assert_eq!(depth(&nested(64)), 64);
    }

    #[test]
    fn refusals() {
        let ok = EventDraft::new("turn/start", json!({}));
        assert_eq!(refusal(&ok), None);
        assert!(refusal(&EventDraft::ignorable("plugin/x", json!({}))).is_none());
        for bad in [
            EventDraft::new("plugin/unknown", json!({})),
            EventDraft::ignorable("", json!({})),
            EventDraft::ignorable("a\nb", json!({})),
            EventDraft::ignorable("x".repeat(129), json!({})),
            EventDraft::new("turn/start", nested(65)),
        ] {
            assert!(refusal(&bad).is_some(), "{bad:?}");
        }
        assert!(refusal(&EventDraft::new("turn/start", nested(64))).is_none());
    }
}
