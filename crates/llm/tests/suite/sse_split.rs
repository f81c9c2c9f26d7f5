//! Recorded SSE streams parse to the same result, and emit the same events, however their bytes
//! are split into chunks.

use proptest::prelude::*;
use serde_json::json;
use troupe_llm::stream::{ChatStreamParser, StreamOutcome};
use troupe_llm::{EventLog, FinishReason, LlmError, StreamEvent, ToolCall};

const OPENAI_TEXT: &str = include_str!("../fixtures/openai_text.sse");
const OPENAI_TOOL_CALLS: &str = include_str!("../fixtures/openai_tool_calls.sse");
const DEEPSEEK_REASONER: &str = include_str!("../fixtures/deepseek_reasoner.sse");
const ODD_SERVER: &str = include_str!("../fixtures/odd_server.sse");
/// llama-cpp-python's shape: `\n` line ends, sse-starlette's `: ping - …` comments between
/// events, `logprobs: null`, a role-only first delta, no usage (it ignores `stream_options`).
const LLAMA_CPP_PYTHON: &str = include_str!("../fixtures/llama_cpp_python.sse");
/// Explicit `null`s wherever a delta may have a field: role, content, reasoning, tool_calls
/// (and a `null` element of it), function, id, type, name, arguments, delta, usage.
const EXPLICIT_NULLS: &str = include_str!("../fixtures/explicit_nulls.sse");
/// A text answer cut by the output limit: `finish_reason: length` and no usage.
const LENGTH_WITHOUT_USAGE: &str = include_str!("../fixtures/length_without_usage.sse");

const FIXTURES: [(&str, &str); 7] = [
    ("openai_text", OPENAI_TEXT),
    ("openai_tool_calls", OPENAI_TOOL_CALLS),
    ("deepseek_reasoner", DEEPSEEK_REASONER),
    ("odd_server", ODD_SERVER),
    ("llama_cpp_python", LLAMA_CPP_PYTHON),
    ("explicit_nulls", EXPLICIT_NULLS),
    ("length_without_usage", LENGTH_WITHOUT_USAGE),
];

type Parsed = (Result<StreamOutcome, LlmError>, Vec<StreamEvent>);

fn parse_pieces(pieces: &[&[u8]]) -> Parsed {
    let mut parser = ChatStreamParser::new();
    let mut events = EventLog::new();
    for piece in pieces {
        if let Err(error) = parser.feed(piece, &mut events) {
            return (Err(error), events.events);
        }
    }
    let result = parser.finish(&mut events);
    (result, events.events)
}

fn parse_split(bytes: &[u8], cuts: &[usize]) -> Parsed {
    let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut pieces = Vec::new();
    let mut start = 0;
    for cut in cuts.into_iter().chain([bytes.len()]) {
        pieces.push(&bytes[start..cut]);
        start = cut;
    }
    parse_pieces(&pieces)
}

#[test]
fn fixtures_parse_to_the_expected_answers() {
    let (text, _) = parse_pieces(&[OPENAI_TEXT.as_bytes()]);
    let text = text.unwrap();
    assert_eq!(
        text.message.content.as_deref(),
        Some("Bonjour ! Voilà le plan 🎭: lire `src/main.rs`, puis éditer.\nFin.")
    );
    assert_eq!(text.finish_reason, Some(FinishReason::Stop));
    assert_eq!(text.usage.unwrap().total_tokens, 29);
    assert_eq!(text.model.as_deref(), Some("gpt-4.1-2025-04-14"));

    let (tools, _) = parse_pieces(&[OPENAI_TOOL_CALLS.as_bytes()]);
    let tools = tools.unwrap();
    assert_eq!(
        tools.message.tool_calls,
        vec![
            ToolCall::new(
                "call_DdmO9pD3xa9XTPNJ32zg2hcA",
                "read",
                json!({"path": "src/main.rs", "offset": 1, "limit": 40})
            ),
            ToolCall::new(
                "call_ABSg8ZUiDcf3KyOgAiIJSbnk",
                "bash",
                json!({"command": "cargo test -- --nocapture \"naïve\"", "timeout_ms": 60000})
            ),
        ]
    );
    assert_eq!(tools.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(tools.usage.unwrap().prompt_tokens, 120);

    let (reasoner, _) = parse_pieces(&[DEEPSEEK_REASONER.as_bytes()]);
    let reasoner = reasoner.unwrap();
    assert_eq!(
        reasoner.message.reasoning_content.as_deref(),
        Some("Okay, the user wants the tests fixed — let me look at the file first.")
    );
    assert_eq!(
        reasoner.message.content.as_deref(),
        Some("I'll read the file.")
    );
    assert_eq!(
        reasoner.message.tool_calls,
        vec![ToolCall::new(
            "call_0_8a2c6b1e-1f2d-4c3b-9e8f-0a1b2c3d4e5f",
            "read",
            json!({"path": "crates/llm/src/lib.rs"})
        )]
    );
    assert_eq!(reasoner.usage.unwrap().completion_tokens, 211);

    let (odd, _) = parse_pieces(&[ODD_SERVER.as_bytes()]);
    let odd = odd.unwrap();
    assert_eq!(odd.message.content.as_deref(), Some("Let me check ça."));
    assert_eq!(
        odd.message.tool_calls,
        vec![
            ToolCall::new("call_a", "glob", json!({"pattern": "**/*.rs"})),
            ToolCall::new("call_b", "grep", json!({"pattern": "fn main"})),
        ]
    );
    assert_eq!(odd.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(odd.usage.unwrap().total(), 0);
}

#[test]
fn local_server_fixtures_parse_to_the_expected_answers() {
    let (llama, events) = parse_pieces(&[LLAMA_CPP_PYTHON.as_bytes()]);
    let llama = llama.unwrap();
    assert_eq!(
        llama.message.content.as_deref(),
        Some("Héllo from llama-cpp-python.")
    );
    assert_eq!(llama.finish_reason, Some(FinishReason::Stop));
    assert_eq!(llama.usage, None, "no usage reported, none made up");
    assert_eq!(
        llama.model.as_deref(),
        Some("/models/qwen2.5-7b-instruct-q4_k_m.gguf")
    );
    assert_eq!(
        events.len(),
        5,
        "one text delta per content chunk: {events:?}"
    );

    let (nulls, _) = parse_pieces(&[EXPLICIT_NULLS.as_bytes()]);
    let nulls = nulls.unwrap();
    assert_eq!(nulls.message.content.as_deref(), Some("Reading it."));
    assert_eq!(nulls.message.reasoning_content, None);
    assert_eq!(
        nulls.message.tool_calls,
        vec![
            ToolCall::new("call_n1", "read", json!({"path": "a.txt"})),
            ToolCall::new("call_n2", "list_tasks", json!({})),
        ]
    );
    assert_eq!(nulls.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(nulls.usage, None);

    let (cut, _) = parse_pieces(&[LENGTH_WITHOUT_USAGE.as_bytes()]);
    let cut = cut.unwrap();
    assert_eq!(
        cut.message.content.as_deref(),
        Some("The answer is long and it gets cut")
    );
    assert_eq!(cut.finish_reason, Some(FinishReason::Length));
    assert_eq!(cut.usage, None);
    assert!(cut.truncated_calls.is_empty());
}

#[test]
fn every_single_split_point_gives_the_same_result() {
    for (name, fixture) in FIXTURES {
        let bytes = fixture.as_bytes();
        let whole = parse_pieces(&[bytes]);
        assert!(whole.0.is_ok(), "{name}: {:?}", whole.0);
        for cut in 0..=bytes.len() {
            let split = parse_pieces(&[&bytes[..cut], &bytes[cut..]]);
            assert_eq!(split, whole, "{name} split at byte {cut}");
        }
    }
}

#[test]
fn byte_by_byte_gives_the_same_result() {
    for (name, fixture) in FIXTURES {
        let bytes = fixture.as_bytes();
        let pieces: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(parse_pieces(&pieces), parse_pieces(&[bytes]), "{name}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_multi_splits_give_the_same_result(
        fixture in 0..FIXTURES.len(),
        cuts in proptest::collection::vec(any::<usize>(), 0..40),
    ) {
        let (name, text) = FIXTURES[fixture];
        let bytes = text.as_bytes();
        prop_assert_eq!(parse_split(bytes, &cuts), parse_pieces(&[bytes]), "{}", name);
    }

    #[test]
    fn truncated_streams_fail_the_same_way_however_split(
        fixture in 0..FIXTURES.len(),
        keep_permille in 0usize..1000,
        cuts in proptest::collection::vec(any::<usize>(), 0..10),
    ) {
        // A stream cut anywhere fails, or succeeds with the whole answer (only the usage
        // chunk may be lost), identically for every split.
        let (name, text) = FIXTURES[fixture];
        let bytes = text.as_bytes();
        let truncated = &bytes[..bytes.len() * keep_permille / 1000];
        let whole = parse_pieces(&[truncated]);
        prop_assert_eq!(parse_split(truncated, &cuts), whole.clone(), "{}", name);
        if let (Ok(cut), Ok(full)) = (whole.0, parse_pieces(&[bytes]).0) {
            prop_assert_eq!(cut.message, full.message, "{}", name);
            prop_assert_eq!(cut.finish_reason, full.finish_reason, "{}", name);
        }
    }
}
