//! Classification of server error answers into [`LlmError`] variants.

use serde_json::Value;

use crate::error::LlmError;
use crate::stream::excerpt;

/// What the client knows about its credentials, to word an authentication error.
#[derive(Clone, Debug, Default)]
pub(crate) struct AuthHint {
    /// The environment variable the key came from (or would come from).
    pub key_env: Option<String>,
    /// Whether a key was sent.
    pub has_key: bool,
}

/// The parts of an error body servers agree on: OpenAI's `{"error":{"message","type","code"}}`,
/// plus `{"error":"text"}`, `{"message":…}` and `{"detail":…}` variants.
struct ErrorParts {
    message: String,
    code: String,
}

fn error_parts(body: &Value) -> ErrorParts {
    let error = body.get("error").unwrap_or(body);
    let text_of = |value: Option<&Value>| -> Option<String> {
        match value? {
            Value::String(text) if !text.is_empty() => Some(text.clone()),
            Value::Number(number) => Some(number.to_string()),
            _ => None,
        }
    };
    let message = match error {
        Value::String(text) => Some(text.clone()),
        _ => text_of(error.get("message"))
            .or_else(|| text_of(body.get("message")))
            .or_else(|| text_of(body.get("detail"))),
    }
    .unwrap_or_else(|| excerpt(&body.to_string()));
    let code = [error.get("code"), error.get("type")]
        .into_iter()
        .filter_map(text_of)
        .collect::<Vec<_>>()
        .join(" ");
    ErrorParts {
        message: excerpt(&message),
        code,
    }
}

fn is_context_length(parts: &ErrorParts) -> bool {
    let code = parts.code.to_ascii_lowercase();
    let message = parts.message.to_ascii_lowercase();
    code.contains("context_length_exceeded")
        || code.contains("context_length")
        || [
            "maximum context length",
            "context length",
            "context_length",
            "context window",
            "prompt is too long",
            "too many tokens",
            "input is too long",
            "reduce the length of the messages",
        ]
        .iter()
        .any(|needle| message.contains(needle))
}

fn is_quota(parts: &ErrorParts) -> bool {
    let code = parts.code.to_ascii_lowercase();
    code.contains("insufficient_quota") || code.contains("insufficient_balance")
}

/// Classifies an error object: one sent inside a 200 stream (`status == 200`) or the parsed body
/// of an HTTP error answer.
pub(crate) fn classify_error_object(
    status: u16,
    body: &Value,
    retry_after_ms: Option<u64>,
) -> LlmError {
    let parts = error_parts(body);
    if is_context_length(&parts) {
        return LlmError::ContextLength {
            message: format!(
                "the conversation is longer than the model's context window: {}",
                parts.message
            ),
        };
    }
    if is_quota(&parts) || status == 402 {
        return LlmError::Quota {
            status,
            message: format!(
                "the model account has no quota or balance left (HTTP {status}): {}",
                parts.message
            ),
        };
    }
    if status == 429 || parts.code.to_ascii_lowercase().contains("rate_limit") {
        return LlmError::RateLimited {
            message: format!(
                "the model server is rate limiting (HTTP {status}): {}",
                parts.message
            ),
            retry_after_ms,
        };
    }
    let message = if status == 200 {
        format!(
            "the model server reported an error mid-stream: {}",
            parts.message
        )
    } else {
        format!("the model server failed (HTTP {status}): {}", parts.message)
    };
    LlmError::Server {
        status,
        message,
        retry_after_ms,
    }
}

/// What an error body that is not JSON says, on one line: `(empty body)`; for an HTML page
/// (a proxy's or a web server's error page), `an HTML page titled "…"` or, without a title,
/// the page's text; otherwise the text itself.
fn describe_text_body(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".to_owned();
    }
    let lower = text.to_ascii_lowercase();
    let is_html = lower.starts_with("<!doctype html") || lower.contains("<html");
    if !is_html {
        return text.to_owned();
    }
    // ASCII lowercasing keeps byte offsets, so positions in `lower` are positions in `text`.
    if let Some(start) = lower.find("<title>").map(|at| at + "<title>".len())
        && let Some(length) = lower[start..].find("</title>")
    {
        let title = text[start..start + length].trim();
        if !title.is_empty() {
            return format!("an HTML page titled \"{title}\"");
        }
    }
    let mut words = String::new();
    let mut in_tag = false;
    for character in text.chars() {
        match character {
            '<' => {
                in_tag = true;
                words.push(' ');
            }
            '>' => in_tag = false,
            _ if !in_tag => words.push(character),
            _ => {}
        }
    }
    let words = words.split_whitespace().collect::<Vec<_>>().join(" ");
    if words.is_empty() {
        "an HTML page without text".to_owned()
    } else {
        format!("an HTML page: {words}")
    }
}

/// Classifies a non-success HTTP answer.
pub(crate) fn classify_http_error(
    status: u16,
    retry_after_ms: Option<u64>,
    body: &[u8],
    url: &str,
    auth: &AuthHint,
) -> LlmError {
    let value = serde_json::from_slice::<Value>(body)
        .unwrap_or_else(|_| Value::String(describe_text_body(body)));
    let parts = error_parts(&value);
    // llama.cpp's `llama-server` started without `--jinja` answers any request with tools
    // `HTTP 500 "tools param requires --jinja flag"`: a setup problem that asking again will not
    // fix, so it is not retried, and the message says what to do.
    if matches!(status, 400 | 500..=599) && parts.message.contains("--jinja") {
        return LlmError::BadRequest {
            status,
            message: format!(
                "the model server cannot take tools (HTTP {status}): restart llama-server with --jinja (it needs the chat template to offer tools); server said: {}",
                parts.message
            ),
        };
    }
    match status {
        401 | 403 => {
            let advice = match (&auth.key_env, auth.has_key) {
                (Some(var), true) => format!("check your API key (the environment variable {var})"),
                (Some(var), false) => format!("check your API key: set {var}"),
                (None, _) => {
                    "check your API key: pass --api-key-env VAR naming the environment variable that holds it"
                        .to_owned()
                }
            };
            LlmError::Auth {
                status,
                message: format!(
                    "the model server refused the credentials (HTTP {status}): {advice}; server said: {}",
                    parts.message
                ),
            }
        }
        413 => LlmError::ContextLength {
            message: format!(
                "the request is too large for the model server (HTTP 413): {}",
                parts.message
            ),
        },
        408 | 409 | 429 | 500..=599 => classify_error_object(status, &value, retry_after_ms),
        402 => classify_error_object(status, &value, None),
        404 => LlmError::BadRequest {
            status,
            message: format!(
                "the model server answered HTTP 404 for {url}: check --base-url and the model name; server said: {}",
                parts.message
            ),
        },
        _ => {
            if is_context_length(&parts) {
                classify_error_object(status, &value, None)
            } else {
                LlmError::BadRequest {
                    status,
                    message: format!(
                        "the model server refused the request (HTTP {status}): {}",
                        parts.message
                    ),
                }
            }
        }
    }
}

/// Reads `retry-after-ms` (ms, OpenAI) or `Retry-After` (seconds; HTTP dates are ignored).
pub(crate) fn retry_after_ms(headers: &reqwest::header::HeaderMap) -> Option<u64> {
    let number = |name: &str| -> Option<f64> {
        let text = headers.get(name)?.to_str().ok()?.trim();
        text.parse::<f64>()
            .ok()
            .filter(|value| value.is_finite() && *value >= 0.0)
    };
    number("retry-after-ms")
        .map(|ms| ms.ceil() as u64)
        .or_else(|| number("retry-after").map(|seconds| (seconds * 1000.0).ceil() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::ErrorCode;

    fn classify(status: u16, body: &str) -> LlmError {
        classify_http_error(
            status,
            None,
            body.as_bytes(),
            "http://x/chat/completions",
            &AuthHint {
                key_env: Some("DEEPSEEK_API_KEY".to_owned()),
                has_key: true,
            },
        )
    }

    #[test]
    fn classifies_statuses_and_bodies() {
        let cases = [
            (401, r#"{"error":{"message":"bad key"}}"#, "LLM_AUTH"),
            (403, "forbidden", "LLM_AUTH"),
            (
                429,
                r#"{"error":{"message":"slow down"}}"#,
                "LLM_RATE_LIMITED",
            ),
            (
                429,
                r#"{"error":{"message":"pay","code":"insufficient_quota"}}"#,
                "LLM_QUOTA",
            ),
            (
                402,
                r#"{"error":{"message":"Insufficient Balance"}}"#,
                "LLM_QUOTA",
            ),
            (500, "boom", "LLM_SERVER"),
            (503, "", "LLM_SERVER"),
            (408, "", "LLM_SERVER"),
            (404, "not found", "LLM_BAD_REQUEST"),
            (
                400,
                r#"{"error":{"message":"bad","code":"invalid_request"}}"#,
                "LLM_BAD_REQUEST",
            ),
            (
                400,
                r#"{"error":{"message":"too long","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
                "LLM_CONTEXT_LENGTH",
            ),
            (
                400,
                r#"{"error":{"message":"This model's maximum context length is 65536 tokens. However, you requested 70000 tokens","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#,
                "LLM_CONTEXT_LENGTH",
            ),
            (413, "", "LLM_CONTEXT_LENGTH"),
            (
                500,
                r#"{"error":{"code":500,"message":"tools param requires --jinja flag","type":"server_error"}}"#,
                "LLM_BAD_REQUEST",
            ),
            (500, "<html><title>oops</title></html>", "LLM_SERVER"),
        ];
        for (status, body, code) in cases {
            assert_eq!(classify(status, body).code(), code, "{status} {body}");
        }
    }

    #[test]
    fn auth_message_names_the_variable() {
        let message = classify(401, r#"{"error":{"message":"Authentication Fails"}}"#).to_string();
        assert!(message.contains("check your API key"), "{message}");
        assert!(message.contains("DEEPSEEK_API_KEY"), "{message}");
        assert!(message.contains("Authentication Fails"), "{message}");
    }
}
