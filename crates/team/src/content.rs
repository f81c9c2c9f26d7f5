//! Content-block validation for Team messages (REFERENCE c.3, "ContentBlock validation on
//! replay").

use std::fmt;

use serde_json::{Map, Value};

use crate::ids::MAX_SAFE_INTEGER;

/// Where a block or field sits (`content[0].attachment`), rendered only for an error message
/// so that validating valid content allocates nothing.
#[derive(Clone, Copy)]
enum At<'p> {
    /// `content[i]`.
    Block(usize),
    /// `<parent>.content[i]` (a block inside a `tool-result`).
    Inner(&'p At<'p>, usize),
    /// `<parent>.attachment`.
    Attachment(&'p At<'p>),
}

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            At::Block(index) => write!(f, "content[{index}]"),
            At::Inner(parent, index) => write!(f, "{parent}.content[{index}]"),
            At::Attachment(parent) => write!(f, "{parent}.attachment"),
        }
    }
}

/// The image media types a core `image` block may carry.
pub const IMAGE_MEDIA_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/webp", "image/gif"];

/// Validates a content array (REFERENCE c.3): each element an object whose `type` is a
/// non-empty string. The core types are strict:
/// - `text` / `reasoning`: `{type, text: string}`;
/// - `image`: `{type, attachment: {attachmentId ≠ "", mediaType ∈ png/jpeg/webp/gif,
///   bytes int ≥ 0, width int ≥ 1, height int ≥ 1, name?: string}}`;
/// - `tool-call`: `{type, id ≠ "", name: string, arguments: string}`;
/// - `tool-result`: `{type, toolCallId ≠ "", content: ContentBlock[], isError?: bool}`.
///
/// Any other type (a plugin extension such as `plugin/custom`) is accepted as it is, so the
/// block is kept verbatim.
///
/// # Errors
/// A one-line description of the first invalid block, e.g. `content[0].text must be a string`.
pub fn validate_content(blocks: &[Value]) -> Result<(), String> {
    for (index, block) in blocks.iter().enumerate() {
        validate_block(block, At::Block(index))?;
    }
    Ok(())
}

fn validate_block(block: &Value, at: At<'_>) -> Result<(), String> {
    let Some(object) = block.as_object() else {
        return Err(format!("{at} must be an object"));
    };
    let kind = match object.get("type") {
        Some(Value::String(kind)) if !kind.is_empty() => kind.as_str(),
        _ => return Err(format!("{at}.type must be a non-empty string")),
    };
    match kind {
        "text" | "reasoning" => {
            only_keys(object, &["type", "text"], at)?;
            string(object, "text", at, false)
        }
        "image" => {
            only_keys(object, &["type", "attachment"], at)?;
            let at = At::Attachment(&at);
            let Some(attachment) = object.get("attachment").and_then(Value::as_object) else {
                return Err(format!("{at} must be an object"));
            };
            only_keys(
                attachment,
                &[
                    "attachmentId",
                    "mediaType",
                    "bytes",
                    "width",
                    "height",
                    "name",
                ],
                at,
            )?;
            string(attachment, "attachmentId", at, true)?;
            match attachment.get("mediaType").and_then(Value::as_str) {
                Some(media) if IMAGE_MEDIA_TYPES.contains(&media) => {}
                _ => {
                    return Err(format!(
                        "{at}.mediaType must be one of {}",
                        IMAGE_MEDIA_TYPES.join(", ")
                    ));
                }
            }
            integer(attachment, "bytes", 0, at)?;
            integer(attachment, "width", 1, at)?;
            integer(attachment, "height", 1, at)?;
            if attachment.contains_key("name") {
                string(attachment, "name", at, false)?;
            }
            Ok(())
        }
        "tool-call" => {
            only_keys(object, &["type", "id", "name", "arguments"], at)?;
            string(object, "id", at, true)?;
            string(object, "name", at, false)?;
            string(object, "arguments", at, false)
        }
        "tool-result" => {
            only_keys(object, &["type", "toolCallId", "content", "isError"], at)?;
            string(object, "toolCallId", at, true)?;
            let Some(inner) = object.get("content").and_then(Value::as_array) else {
                return Err(format!("{at}.content must be an array"));
            };
            for (index, block) in inner.iter().enumerate() {
                validate_block(block, At::Inner(&at, index))?;
            }
            match object.get("isError") {
                None | Some(Value::Bool(_)) => Ok(()),
                Some(_) => Err(format!("{at}.isError must be a boolean")),
            }
        }
        // A plugin extension block: kept as it is.
        _ => Ok(()),
    }
}

fn only_keys(object: &Map<String, Value>, allowed: &[&str], at: At<'_>) -> Result<(), String> {
    match object.keys().find(|key| !allowed.contains(&key.as_str())) {
        Some(key) => Err(format!("{at} has unknown key {key:?}")),
        None => Ok(()),
    }
}

fn string(
    object: &Map<String, Value>,
    key: &str,
    at: At<'_>,
    non_empty: bool,
) -> Result<(), String> {
    match object.get(key) {
        Some(Value::String(value)) if !(non_empty && value.is_empty()) => Ok(()),
        _ if non_empty => Err(format!("{at}.{key} must be a non-empty string")),
        _ => Err(format!("{at}.{key} must be a string")),
    }
}

fn integer(object: &Map<String, Value>, key: &str, min: u64, at: At<'_>) -> Result<(), String> {
    match object.get(key).and_then(Value::as_u64) {
        Some(value) if value >= min && value <= MAX_SAFE_INTEGER => Ok(()),
        _ => Err(format!("{at}.{key} must be an integer >= {min}")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(blocks: Value, ok: bool) {
        let blocks = blocks.as_array().cloned().unwrap_or_default();
        assert_eq!(validate_content(&blocks).is_ok(), ok, "{blocks:?}");
    }

    #[test]
    fn core_blocks_are_strict_and_plugins_pass() {
        check(json!([{"type": "text", "text": "hi"}]), true);
        check(json!([{"type": "reasoning", "text": "hm"}]), true);
        check(json!([{"type": "text", "text": 1}]), false);
        check(json!([{"type": "text", "text": "a", "x": 1}]), false);
        check(json!([{"type": ""}]), false);
        check(json!([{"text": "no type"}]), false);
        check(json!(["text"]), false);
        check(
            json!([{"type": "plugin/custom", "payload": {"value": 1}}]),
            true,
        );
        check(
            json!([{"type": "image", "attachment": {"attachmentId": "a", "mediaType": "image/png", "bytes": 0, "width": 1, "height": 1}}]),
            true,
        );
        check(
            json!([{"type": "image", "attachment": {"attachmentId": "a", "mediaType": "image/bmp", "bytes": 0, "width": 1, "height": 1}}]),
            false,
        );
        check(
            json!([{"type": "image", "attachment": {"attachmentId": "a", "mediaType": "image/png", "bytes": 0, "width": 0, "height": 1}}]),
            false,
        );
        check(
            json!([{"type": "tool-call", "id": "c", "name": "n", "arguments": "{}"}]),
            true,
        );
        check(
            json!([{"type": "tool-call", "id": "", "name": "n", "arguments": "{}"}]),
            false,
        );
        check(
            json!([{"type": "tool-result", "toolCallId": "c", "content": [{"type": "text", "text": "r"}], "isError": false}]),
            true,
        );
        check(
            json!([{"type": "tool-result", "toolCallId": "c", "content": [{"type": "text"}]}]),
            false,
        );
    }
}
