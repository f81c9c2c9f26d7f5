//! How the runtime turns a payload into the `data` of an event it records.

/// The JSON value of a payload (`troupe_session::events`) to record. A payload of the session
/// model always serializes (plain structs of strings, numbers and JSON values), so a failure
/// cannot happen; it would record `null`, which every reader refuses as an invalid event.
pub(crate) fn to_value<T: serde::Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}
