//! `Transcript::apply_line` (a stored line's payload decoded straight into its record) against
//! `Transcript::apply` (the line parsed into an `Event` with a `serde_json::Value` payload):
//! the same result, the same error and the same transcript after, on every event of a real
//! demo log, on crafted bad payloads, on every one-byte change of a real line of each type,
//! and on generated payloads.
//!
//! The fixtures are the three session logs of one `troupe demo` run (the Lead, alpha, beta).

#![allow(missing_docs)]

use proptest::prelude::*;
use troupe_protocol::{Event, SessionHeader};
use troupe_session::Transcript;

const DEMO_LOGS: [&str; 3] = [
    include_str!("fixtures/demo-lead.jsonl"),
    include_str!("fixtures/demo-alpha.jsonl"),
    include_str!("fixtures/demo-beta.jsonl"),
];

/// The header's seed length and the event lines of a log.
fn log_lines(log: &str) -> (u64, Vec<&str>) {
    let mut lines = log.lines();
    let header: SessionHeader = serde_json::from_str(lines.next().unwrap()).unwrap();
    (header.seed_len(), lines.collect())
}

/// Applies `line` (given as of `seq` and `kind`) to copies of `before` both ways and asserts
/// the same answer and the same transcript after; returns the transcript after.
fn same(before: &Transcript, seq: u64, kind: &str, line: &str) -> Transcript {
    let mut by_event = before.clone();
    let expected = serde_json::from_str::<Event>(line)
        .ok()
        .map(|event| by_event.apply(&event));
    let mut by_line = before.clone();
    let got = by_line.apply_line(seq, kind, line);
    assert_eq!(got, expected, "{line}");
    assert!(by_line == by_event, "the transcripts differ after {line}");
    by_line
}

/// The `seq` and `type` of a valid event line.
fn envelope(line: &str) -> (u64, String) {
    let event: Event = serde_json::from_str(line).unwrap();
    (event.seq.0, event.kind)
}

#[test]
fn every_event_of_a_real_demo_log_replays_the_same_from_its_line() {
    for log in DEMO_LOGS {
        let (seed_len, lines) = log_lines(log);
        let mut by_event = Transcript::new(seed_len);
        let mut by_line = Transcript::new(seed_len);
        for line in &lines {
            let (seq, kind) = envelope(line);
            by_event
                .apply(&serde_json::from_str(line).unwrap())
                .unwrap();
            assert_eq!(by_line.apply_line(seq, &kind, line), Some(Ok(())), "{line}");
            assert!(by_line == by_event, "the transcripts differ after {line}");
        }
        assert!(by_line.history().len() > 3);
    }
    // Also as the first event of a log whose first events are a seeded prefix (so own-only
    // records are skipped), and in a seeded log's own suffix.
    for log in DEMO_LOGS {
        let (_, lines) = log_lines(log);
        for seed_len in [0, 1, 3, u64::MAX] {
            let mut t = Transcript::new(seed_len);
            for line in &lines {
                let (seq, kind) = envelope(line);
                t = same(&t, seq, &kind, line);
            }
        }
    }
}

/// The transcript of the beta log up to (not including) its first line of type `kind`, and
/// that line.
fn state_before(kind: &str) -> (Transcript, u64, String) {
    let (seed_len, lines) = log_lines(DEMO_LOGS[2]);
    let mut t = Transcript::new(seed_len);
    for line in lines {
        let (seq, k) = envelope(line);
        if k == kind {
            return (t, seq, line.to_owned());
        }
        t.apply(&serde_json::from_str(line).unwrap()).unwrap();
    }
    panic!("no {kind} line");
}

/// Every type `Transcript::can_refuse` names (the beta log has a line of each).
const REFUSABLE: [&str; 11] = [
    "user/message",
    "assistant/message",
    "tool/call",
    "tool/process",
    "tool/result",
    "turn/start",
    "step/start",
    "turn/end",
    "agent/inbox/spliced",
    "agent/config",
    "subagent/descriptor",
];

#[test]
fn crafted_bad_and_unusual_payloads_get_the_same_answer() {
    let payloads = [
        // Wrong shapes and types.
        r#"null"#,
        r#"[]"#,
        r#""text""#,
        r#"7"#,
        r#"{}"#,
        r#"{"turn":"1"}"#,
        r#"{"turn":-1}"#,
        r#"{"turn":1.5}"#,
        r#"{"turn":1e2}"#,
        r#"{"turn":18446744073709551616}"#,
        r#"{"turn":1,"step":true}"#,
        r#"{"turn":1,"step":1,"callId":7,"name":"bash","isError":false,"content":"x"}"#,
        r#"{"turn":1,"step":1,"callId":"c","name":"bash","isError":"no","content":"x"}"#,
        r#"{"turn":1,"step":1,"callId":"c","pgid":4294967296,"startTime":1}"#,
        r#"{"turn":1,"step":1,"callId":"c","pgid":-2,"startTime":1}"#,
        r#"{"turn":1,"reason":{"kind":"sideways"}}"#,
        r#"{"turn":1,"reason":{"kind":"failed","code":"X"}}"#,
        r#"{"turn":1,"reason":"completed"}"#,
        r#"{"id":"","role":"user","content":[],"source":{"kind":"user"}}"#,
        r#"{"role":"user","content":[],"source":{"kind":"user"}}"#,
        r#"{"id":"m","role":"user","content":{},"source":{"kind":"user"}}"#,
        r#"{"target":"next-turn","start":1,"inserted":[]}"#,
        r#"{"target":"next-step","start":0,"removedCount":1}"#,
        r#"{"target":"sideways","start":0}"#,
        r#"{"target":"next-turn","start":-1}"#,
        r#"{"turn":1,"step":1,"message":{"content":null,"tool_calls":[{"id":"c","function":{"name":"read","arguments":"{not json"}}]}}"#,
        r#"{"turn":1,"step":1,"message":{"content":null,"tool_calls":[{"id":"c","function":{"name":"read","arguments":""}}]}}"#,
        r#"{"turn":1,"step":1,"message":{"content":7}}"#,
        r#"{"turn":1,"step":1,"message":{},"usage":{"prompt_tokens":"12","completion_tokens":1.5}}"#,
        r#"{"turn":1,"step":1,"message":{},"finishReason":""}"#,
        r#"{"version":2,"mode":"continuable","provider":"spawn","label":"x","extra":1}"#,
        r#"{"version":2,"mode":"sideways","provider":"spawn","label":"x"}"#,
        r#"{"turn":1,"step":1,"callId":"c","name":"write","arguments":{},"effect":{"path":"a"}}"#,
        // Members repeated (a `Value` keeps the last; a typed decode refuses them), at every
        // level.
        r#"{"turn":1,"turn":2}"#,
        r#"{"turn":1,"step":1,"step":2}"#,
        r#"{"turn":1,"reason":{"kind":"completed","kind":"interrupted"}}"#,
        r#"{"turn":1,"reason":{"kind":"failed","code":"A","code":"B","message":"m"}}"#,
        r#"{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"user","kind":"parent"}}}"#,
        r#"{"id":"m","id":"n","role":"user","content":[],"source":{"kind":"user"}}"#,
        r#"{"id":"m","role":"user","content":[],"source":{"kind":"user","kind":"resume"}}"#,
        r#"{"id":"m","role":"user","content":[],"source":{"kind":"user","x":1,"x":2}}"#,
        r#"{"id":"m","role":"user","content":[{"type":"text","text":"a","text":"b"}],"source":{"kind":"user"}}"#,
        r#"{"turn":1,"step":1,"message":{"content":"a","content":"b"}}"#,
        r#"{"turn":1,"step":1,"message":{"tool_calls":[{"id":"c","id":"d","function":{"name":"read","arguments":"{}"}}]}}"#,
        r#"{"turn":1,"step":1,"message":{"tool_calls":[{"id":"c","function":{"name":"read","arguments":"{\"a\":1,\"a\":2}"}}]}}"#,
        r#"{"target":"next-turn","start":0,"start":0,"inserted":[]}"#,
        // Escaped and unknown member names, unusual values.
        r#"{"tur\u006e":1}"#,
        r#"{"turn":1,"reason":{"\u006bind":"completed"}}"#,
        r#"{"turn":1,"unknown":{"deep":[1,2,{"x":null}]}}"#,
        r#"{"turn":1,"x":"\ud800"}"#,
        r#"{"turn":1,"x":1e400}"#,
        r#"{"turn":1,"x":"\ud83d\ude00"}"#,
        r#"{"id":"caf\u00e9","role":"user","content":[{"type":"text","text":"\ud83d\ude00\n"}],"source":{"kind":"us\u0065r"}}"#,
    ];
    for kind in REFUSABLE {
        let (before, seq, real) = state_before(kind);
        for seeded in [false, true] {
            // Seeded: every event so far is the log's inherited prefix (own-only records
            // are not decoded).
            let before = if seeded {
                let mut t = Transcript::new(u64::MAX);
                let (_, lines) = log_lines(DEMO_LOGS[2]);
                for line in lines.iter().take(seq as usize) {
                    t.apply(&serde_json::from_str(line).unwrap()).unwrap();
                }
                t
            } else {
                before.clone()
            };
            for payload in payloads {
                let line = format!(r#"{{"seq":{seq},"time":5,"type":"{kind}","data":{payload}}}"#);
                same(&before, seq, kind, &line);
            }
            // The real line, and envelopes of other shapes around its payload.
            let event: Event = serde_json::from_str(&real).unwrap();
            let data = event.data.to_string();
            for line in [
                real.clone(),
                format!(r#"{{"seq":{seq},"time":5,"type":"{kind}"}}"#),
                format!(
                    r#"{{"seq":{seq},"time":5,"type":"{kind}","data":{data},"ignorable":true}}"#
                ),
                format!(
                    r#"{{"seq":{seq},"time":5,"type":"{kind}","batchLast":{seq},"data":{data}}}"#
                ),
                format!(r#"{{"seq":{seq},"time":5,"type":"{kind}","data":{data},"other":1}}"#),
                format!(r#"{{"data":{data},"type":"{kind}","time":5,"seq":{seq}}}"#),
                format!(r#"{{"seq":{seq},"time":5,"type":"{kind}","data":{data},"data":{data}}}"#),
                format!(r#"{{"seq":{seq},"time":5,"t\u0079pe":"{kind}","data":{data}}}"#),
                format!(r#"{{"seq":{seq},"time":-5,"type":"{kind}","data":{data}}}"#),
                format!(r#"{{"seq":{seq},"time":5,"type":"{kind}","data":{data}}} x"#),
                format!(r#"{{"seq":{seq},"time":5,"type":"{kind}","data":{data}"#),
                // Another seq or type than the scan read: applied as the line says.
                format!(
                    r#"{{"seq":{},"time":5,"type":"{kind}","data":{data}}}"#,
                    seq + 1
                ),
                format!(r#"{{"seq":{seq},"time":5,"type":"step/end","data":{data}}}"#),
            ] {
                same(&before, seq, kind, &line);
            }
        }
    }
    // A splice out of range, and a second descriptor (not decoded).
    let (before, seq, _) = state_before("agent/inbox/spliced");
    let line = format!(
        r#"{{"seq":{seq},"time":5,"type":"agent/inbox/spliced","data":{{"target":"next-turn","start":3,"removedCount":1}}}}"#
    );
    let mut t = before.clone();
    assert!(matches!(
        t.apply_line(seq, "agent/inbox/spliced", &line),
        Some(Err(e)) if e.reason.contains("out of range")
    ));
    same(&before, seq, "agent/inbox/spliced", &line);
    let (before, seq, real) = state_before("agent/config");
    let twice = real.replace(
        r#""type":"agent/config""#,
        r#""type":"subagent/descriptor""#,
    );
    same(&before, seq, "subagent/descriptor", &twice);
}

/// Every line made by replacing, inserting or deleting one byte (with each of a set of
/// JSON-significant bytes) of a real line of each type.
#[test]
fn every_one_byte_change_of_a_real_line_gets_the_same_answer() {
    let bytes_to_try = *br#""\{}[],:1e-u "#;
    for kind in REFUSABLE {
        let (before, seq, real) = state_before(kind);
        // The first 400 bytes are every envelope member and the start of every payload.
        let bytes = real.as_bytes();
        for at in 0..bytes.len().min(400) {
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
                    same(&before, seq, kind, text);
                }
            }
        }
    }
}

/// A JSON value of the shapes the records hold, with repeated and escaped member names.
fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("0".to_owned()),
        Just("1".to_owned()),
        Just("-1".to_owned()),
        Just("1.5".to_owned()),
        Just("1e400".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just(r#""""#.to_owned()),
        Just(r#""x""#.to_owned()),
        Just(r#""{}""#.to_owned()),
        Just(r#""\ud800""#.to_owned()),
        Just(r#""user""#.to_owned()),
        Just(r#""next-turn""#.to_owned()),
        Just(r#""completed""#.to_owned()),
        Just(r#""continuable""#.to_owned()),
        Just(r#""spawn""#.to_owned()),
    ];
    let name = prop_oneof![
        Just("turn"),
        Just("step"),
        Just("tur\\u006e"),
        Just("kind"),
        Just("reason"),
        Just("code"),
        Just("message"),
        Just("content"),
        Just("tool_calls"),
        Just("id"),
        Just("function"),
        Just("name"),
        Just("arguments"),
        Just("callId"),
        Just("isError"),
        Just("role"),
        Just("source"),
        Just("type"),
        Just("text"),
        Just("target"),
        Just("start"),
        Just("removedCount"),
        Just("inserted"),
        Just("pgid"),
        Just("startTime"),
        Just("version"),
        Just("mode"),
        Just("provider"),
        Just("label"),
        Just("usage"),
        Just("other"),
    ];
    leaf.prop_recursive(4, 24, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((name.clone(), inner), 0..6).prop_map(|members| {
                let members: Vec<String> = members
                    .iter()
                    .map(|(k, v)| format!(r#""{k}":{v}"#))
                    .collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

proptest! {
    /// Generated payloads of every refusable type, as the next line of the beta log.
    #[test]
    fn generated_payloads_get_the_same_answer(
        kind in prop::sample::select(REFUSABLE.to_vec()),
        data in json_text(),
    ) {
        let (before, seq, _) = state_before(kind);
        let line = format!(r#"{{"seq":{seq},"time":5,"type":"{kind}","data":{data}}}"#);
        same(&before, seq, kind, &line);
    }
}
