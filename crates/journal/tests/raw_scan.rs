//! The raw scan (`scan_raw_each`, payloads left unparsed) against the full scan (`scan_each`):
//! same valid prefix, same events (seq, time, type, flag, payload), same summary and the very
//! same errors, on every committed fixture, on hand-made lines aimed at the cheap payload check,
//! and on generated logs. Also exercises lines straddling the reader's buffer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use troupe_journal::{
    Journal, JournalError, JsonlBackend, ScanSummary, read_path, read_path_each,
    read_path_raw_each, scan, scan_each, scan_raw_each,
};
use troupe_protocol::{ErrorCode, Event, FixedClock, SessionId};

/// One event as the raw scan handed it out, with its payload text.
#[derive(Debug, Clone)]
struct Seen {
    event: Event,
    data_text: String,
}

/// Either outcome of a scan, comparable: the summary, or the error's code and message.
fn outcome(result: Result<ScanSummary, JournalError>) -> Result<String, (String, String)> {
    result
        .map(|s| format!("{s:?}"))
        .map_err(|e| (e.code().to_owned(), e.to_string()))
}

/// Scans `bytes` both ways (the raw scan through a `capacity`-byte buffer) and asserts they
/// agree; returns the full scan's events and the raw scan's outcome.
fn both(bytes: &[u8], capacity: usize) -> (Result<String, (String, String)>, Vec<Seen>) {
    let path = Path::new("/logs/session.jsonl");
    let mut full = Vec::new();
    let full_outcome = outcome(scan_each(path, bytes, &mut |e| full.push(e)));
    let mut raw = Vec::new();
    let raw_outcome = outcome(scan_raw_each(
        path,
        BufReader::with_capacity(capacity, bytes),
        &mut |e| {
            raw.push(Seen {
                event: e.to_event().unwrap(),
                data_text: e.data.get().to_owned(),
            });
            assert_eq!(e.is_known(), e.to_event().unwrap().is_known());
        },
    ));
    assert_eq!(raw_outcome, full_outcome, "outcome (capacity {capacity})");
    assert_eq!(raw.len(), full.len(), "event count (capacity {capacity})");
    for (seen, event) in raw.iter().zip(&full) {
        assert_eq!(&seen.event, event, "event (capacity {capacity})");
    }
    check_data_texts(bytes, &raw);
    (raw_outcome, raw)
}

/// The payload text of the raw scan is the line's own text (or `null` when absent).
fn check_data_texts(bytes: &[u8], seen: &[Seen]) {
    #[derive(Deserialize)]
    struct DataOnly<'a> {
        #[serde(borrow, default)]
        data: Option<&'a RawValue>,
    }
    let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').skip(1).collect();
    for (i, seen) in seen.iter().enumerate() {
        let expected = match serde_json::from_slice::<DataOnly<'_>>(lines[i]) {
            Ok(line) => line.data.map_or("null", RawValue::get).to_owned(),
            // An array-form line (or another shape the helper does not read): compare values.
            Err(_) => serde_json::to_string(&seen.event.data).unwrap(),
        };
        if expected != seen.data_text {
            let a: Value = serde_json::from_str(&expected).unwrap();
            let b: Value = serde_json::from_str(&seen.data_text).unwrap();
            assert_eq!(a, b, "payload of line {}", i + 2);
            assert!(
                serde_json::from_slice::<DataOnly<'_>>(lines[i]).is_err(),
                "payload text of line {} is not the line's own: {}",
                i + 2,
                seen.data_text
            );
        }
    }
}

fn all_capacities(bytes: &[u8]) -> Result<String, (String, String)> {
    let (first, _) = both(bytes, 256 * 1024);
    for capacity in [1, 2, 3, 7, 64, 300] {
        assert_eq!(both(bytes, capacity).0, first);
    }
    first
}

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 13, "fixtures missing: {paths:?}");
    paths
}

#[test]
fn every_fixture_scans_the_same_raw_and_parsed() {
    for path in fixtures() {
        let bytes = std::fs::read(&path).unwrap();
        let _ = all_capacities(&bytes);

        // And through the file readers, by path.
        let mut full = Vec::new();
        let full_outcome = outcome(read_path_each(&path, &mut |e| full.push(e)));
        let mut raw = Vec::new();
        let raw_outcome = outcome(read_path_raw_each(&path, &mut |e| {
            raw.push((
                e.seq,
                e.time,
                e.kind.to_owned(),
                e.data.get().to_owned(),
                e.ignorable,
            ));
        }));
        assert_eq!(raw_outcome, full_outcome, "{}", path.display());
        let replay = read_path(&path);
        assert_eq!(replay.is_ok(), raw_outcome.is_ok(), "{}", path.display());
        assert_eq!(raw.len(), full.len());
        for ((seq, time, kind, data, ignorable), event) in raw.iter().zip(&full) {
            assert_eq!(
                (*seq, *time, kind, *ignorable),
                (event.seq, event.time, &event.kind, event.ignorable)
            );
            assert_eq!(
                serde_json::from_str::<Value>(data).unwrap(),
                event.data,
                "{}",
                path.display()
            );
        }
    }
}

#[test]
fn fixture_outcomes_are_the_documented_ones() {
    let fixture = |name: &str| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        let mut seqs = Vec::new();
        let result = read_path_raw_each(&path, &mut |e| seqs.push((e.seq.0, e.kind.to_owned())));
        (result, seqs)
    };
    let (summary, seqs) = fixture("good.jsonl");
    let summary = summary.unwrap();
    assert_eq!(seqs.len(), 8);
    assert!(seqs.iter().enumerate().all(|(i, (s, _))| *s == i as u64));
    assert!(summary.torn_tail.is_none());

    let (summary, _) = fixture("torn_tail.jsonl");
    let torn = summary.unwrap().torn_tail.unwrap();
    assert_eq!((torn.offset, torn.line), (498, 6));

    let (summary, seqs) = fixture("unknown_ignorable_type.jsonl");
    assert_eq!(
        summary
            .unwrap()
            .skipped
            .iter()
            .map(|s| s.0)
            .collect::<Vec<_>>(),
        vec![4]
    );
    assert_eq!(seqs[4].1, "plugin/future");

    let err = fixture("corrupt_before_completed_turn.jsonl")
        .0
        .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.code(), "JOURNAL_CORRUPT");
    assert!(
        msg.contains("line 7") && msg.contains("byte offset 567"),
        "{msg}"
    );
    assert!(msg.contains("completed turn follows at line 9"), "{msg}");

    let err = fixture("unknown_required_type.jsonl").0.unwrap_err();
    assert_eq!(err.code(), "JOURNAL_UNSUPPORTED");
    assert!(err.to_string().contains("plugin/future"));
}

#[test]
fn journal_read_raw_each_matches_read_each() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/good.jsonl"),
        dir.path().join("fixture.jsonl"),
    )
    .unwrap();
    let journal = Journal::with_backend(
        Arc::new(JsonlBackend::new(dir.path())),
        Arc::new(FixedClock::new(0)),
    );
    let id = SessionId::new("fixture").unwrap();
    let mut full = Vec::new();
    let a = journal.read_each(&id, &mut |e| full.push(e)).unwrap();
    let mut raw = Vec::new();
    let b = journal
        .read_raw_each(&id, &mut |e| raw.push(e.to_event().unwrap()))
        .unwrap();
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    assert_eq!(raw, full);

    // A file under another session's name is refused the same way.
    std::fs::copy(
        dir.path().join("fixture.jsonl"),
        dir.path().join("other.jsonl"),
    )
    .unwrap();
    let other = SessionId::new("other").unwrap();
    let e1 = journal.read_each(&other, &mut |_| {}).unwrap_err();
    let e2 = journal.read_raw_each(&other, &mut |_| {}).unwrap_err();
    assert_eq!(e1.to_string(), e2.to_string());
    let missing = SessionId::new("missing").unwrap();
    let e = journal.read_raw_each(&missing, &mut |_| {}).unwrap_err();
    assert_eq!(e.code(), "SESSION_NOT_FOUND");
}

const HEADER: &str =
    r#"{"type":"session","format":1,"id":"s","createdAt":1764000000000,"cwd":"/work"}"#;

fn log(lines: &[String]) -> Vec<u8> {
    let mut text = String::from(HEADER);
    text.push('\n');
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    text.into_bytes()
}

fn line(seq: u64, kind: &str, data: &str) -> String {
    format!(
        r#"{{"seq":{seq},"time":{},"type":"{kind}","data":{data}}}"#,
        1000 + seq
    )
}

fn nested(levels: usize) -> String {
    format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
}

/// Payloads near every edge of the cheap check: valid ones it cannot vouch for (the full parse
/// then decides) and invalid ones only a full parse refuses.
fn tricky_payloads() -> Vec<String> {
    let mut payloads: Vec<String> = [
        r#"{}"#,
        r#"null"#,
        r#"{"a":1e5}"#,
        r#"{"a":1E+5}"#,
        r#"{"a":-2.5e-7}"#,
        r#"{"a":1e400}"#,
        r#"{"a":-1e400}"#,
        r#"{"a":1e-400}"#,
        r#"{"a":0.1e309}"#,
        r#"{"a":18446744073709551616}"#,
        r#"{"a":-9223372036854775809}"#,
        r#"{"a":"\ud83d\ude00"}"#,
        r#"{"a":"\ud800"}"#,
        r#"{"a":"\uDC00x"}"#,
        r#"{"a":"\ud800\u0041"}"#,
        r#"{"\ud800":1}"#,
        r#"{"a":"\\ud800"}"#,
        r#"{"a":"\u00e9\n\t\"\\\/"}"#,
        r#"{"a":"é ü ✓ 😀"}"#,
        r#"{"a":"\u0000"}"#,
        r#"{"a":"1e5","b":"4e5f","c":"true"}"#,
        r#"[true,false,null,-0,0.0,-0.0]"#,
        r#""just a string""#,
        r#"12"#,
        r#"{"a":{"b":[{"c":{}}]}}"#,
        r#"{"a":1,"a":2}"#,
        r#"{ "spaced" : [ 1 , 2 ] }"#,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    payloads.push(format!(r#"{{"a":{}}}"#, "9".repeat(300)));
    payloads.push(format!(r#"{{"a":{}}}"#, "9".repeat(310)));
    payloads.push(format!(r#"{{"a":{}}}"#, "9".repeat(400)));
    payloads.push(format!(r#"{{"a":0.{}}}"#, "1".repeat(400)));
    for levels in [99, 100, 101, 125, 126, 127, 128, 300] {
        payloads.push(nested(levels));
    }
    payloads
}

/// Whole lines near the envelope's edges.
fn tricky_lines(seq: u64) -> Vec<String> {
    let time = 1000 + seq;
    vec![
        format!(r#"{{"seq":{seq},"time":{time},"type":"turn/start"}}"#),
        format!(r#"{{"seq":{seq},"time":{time},"type":"turn/start","data":null}}"#),
        format!(r#"{{"type":"turn/start","data":{{"x":1}},"time":{time},"seq":{seq}}}"#),
        format!(r#"{{"seq":{seq},"time":{time},"type":"turn\/start","data":{{}}}}"#),
        format!(r#"{{"seq":{seq},"time":{time},"type":"turn\u002fstart","data":{{}}}}"#),
        format!(
            r#"{{"seq":{seq},"time":{time},"type":"turn/start","data":{{}},"extra":"\ud800"}}"#
        ),
        format!(r#"{{"seq":{seq},"time":{time},"type":"turn/start","data":{{}},"extra":1e999}}"#),
        format!(
            r#"{{"seq":{seq},"time":{time},"type":"turn/start","data":{{}},"extra":{}}}"#,
            nested(200)
        ),
        format!(r#"{{"seq":{seq},"time":{time},"type":"turn/start","data":{{}},"data":{{}}}}"#),
        format!(
            r#"{{"seq":{seq},"time":{time},"type":"turn/start","data":{{}},"ignorable":null}}"#
        ),
        format!(r#"{{"seq":{seq},"time":{time},"type":"plugin/x","data":{{}},"ignorable":true}}"#),
        format!(r#"{{"seq":{seq},"time":{time},"type":"plugin/x","data":{{}},"ignorable":false}}"#),
        format!(r#"{{"seq":{seq},"time":{time},"type":"plugin/x","data":1e999,"ignorable":true}}"#),
        format!(r#"{{"seq":{seq},"time":{time},"type":"turn/start","data":{{}}}} "#),
        format!(r#" {{"seq":{seq},"time":{time},"type":"turn/start","data":{{}}}}"#),
        format!(r#"{{"seq":{seq},"time":{time},"type":"turn/start","data":{{}}}}x"#),
        format!(r#"{{"seq":{seq},"time":{time},"type":"turn/start","data":{{}}"#),
        format!(r#"[{seq},{time},"turn/start",{{"turn":1}}]"#),
        format!(r#"[{seq},{time},"turn/start"]"#),
        format!(r#"[{seq},{time},"turn/start",1e999]"#),
        format!(r#"{{"seq":"{seq}","time":{time},"type":"turn/start","data":{{}}}}"#),
        format!(r#"{{"seq":{seq}.0,"time":{time},"type":"turn/start","data":{{}}}}"#),
        format!(r#"{{"time":{time},"type":"turn/start","data":{{}}}}"#),
        format!(r#"{{"seq":{seq},"time":{time},"type":7,"data":{{}}}}"#),
        format!(
            r#"{{"seq":{seq},"time":{time},"type":"turn/start","data":{{"a":1e400}},"seq":{seq}}}"#
        ),
        format!(
            r#"{{"seq":{},"time":{time},"type":"turn/end","data":{{}}}}"#,
            seq + 5
        ),
        format!(
            r#"{{"seq":{},"time":{time},"type":"turn/end","data":1e400}}"#,
            seq + 5
        ),
        String::new(),
        "{}".to_owned(),
        "not json".to_owned(),
    ]
}

/// Each tricky line in three positions: last (a torn tail if bad), followed by a completed
/// turn (corruption if bad), and followed by more valid lines only.
fn tricky_logs() -> Vec<Vec<u8>> {
    let prefix = vec![line(0, "turn/start", r#"{"turn":1}"#)];
    let mut candidates: Vec<String> = tricky_payloads()
        .iter()
        .map(|data| line(1, "assistant/message", data))
        .collect();
    candidates.extend(tricky_lines(1));
    let mut logs = Vec::new();
    for candidate in candidates {
        let mut last = prefix.clone();
        last.push(candidate.clone());
        logs.push(log(&last));
        let mut committed = last.clone();
        committed.push(line(2, "turn/end", r#"{"turn":1}"#));
        logs.push(log(&committed));
        let mut open = last;
        open.push(line(2, "step/start", r#"{"turn":1}"#));
        logs.push(log(&open));
    }
    // Bytes that are not UTF-8: in a payload string, in an ignored field, in the type.
    let bad_lines: [&[u8]; 4] = [
        b"{\"seq\":1,\"time\":1,\"type\":\"step/start\",\"data\":{\"a\":\"\xff\"}}",
        b"{\"seq\":1,\"time\":1,\"type\":\"step/start\",\"data\":{\"a\":\"\xc3\"}}",
        b"{\"seq\":1,\"time\":1,\"type\":\"step/start\",\"data\":{},\"x\":\"\xff\"}",
        b"{\"seq\":1,\"time\":1,\"type\":\"step/\xffstart\",\"data\":{}}",
    ];
    for bad in bad_lines {
        let mut bytes = log(&prefix);
        bytes.extend_from_slice(bad);
        bytes.push(b'\n');
        logs.push(bytes.clone());
        bytes.extend_from_slice(line(2, "turn/end", "{}").as_bytes());
        bytes.push(b'\n');
        logs.push(bytes);
    }
    logs
}

#[test]
fn tricky_lines_scan_the_same_raw_and_parsed() {
    let mut loaded = 0;
    let mut refused = 0;
    for bytes in tricky_logs() {
        match all_capacities(&bytes) {
            Ok(_) => loaded += 1,
            Err(_) => refused += 1,
        }
    }
    // Both kinds of outcome are exercised.
    assert!(
        loaded > 50 && refused > 20,
        "{loaded} loaded, {refused} refused"
    );
}

#[test]
fn payloads_the_cheap_check_cannot_vouch_for_still_come_out_verbatim() {
    for data in [r#"{"a":1e5}"#, r#"{"a":"\ud83d\ude00"}"#, &nested(120)] {
        let bytes = log(&[line(0, "turn/start", data)]);
        let (outcome, seen) = both(&bytes, 4096);
        outcome.unwrap();
        assert_eq!(seen[0].data_text, data);
    }
    // Invalid for a `Value` and so for both scans: a torn tail when last...
    let bytes = log(&[
        line(0, "turn/start", "{}"),
        line(1, "step/start", r#"{"a":1e400}"#),
    ]);
    let (outcome, seen) = both(&bytes, 4096);
    assert!(outcome.unwrap().contains("number out of range"));
    assert_eq!(seen.len(), 1);
    // ... and corruption, with the same message, when a completed turn follows.
    let bytes = log(&[
        line(0, "turn/start", "{}"),
        line(1, "step/start", r#"{"a":"\udc00"}"#),
        line(2, "turn/end", "{}"),
    ]);
    let (outcome, _) = both(&bytes, 4096);
    let (code, message) = outcome.unwrap_err();
    assert_eq!(code, "JOURNAL_CORRUPT");
    assert!(
        message.contains("unparseable event line") && message.contains("line 3"),
        "{message}"
    );
}

#[test]
fn scan_of_a_whole_image_agrees() {
    for bytes in tricky_logs().into_iter().take(40) {
        let whole = scan(Path::new("/logs/session.jsonl"), &bytes);
        let (outcome, seen) = both(&bytes, 8192);
        match whole {
            Ok(replay) => {
                assert!(outcome.is_ok());
                let events: Vec<Event> = seen.into_iter().map(|s| s.event).collect();
                assert_eq!(replay.events, events);
            }
            Err(e) => assert_eq!(outcome.unwrap_err().1, e.to_string()),
        }
    }
}

/// JSON text for payloads, weighted towards the cheap check's edges.
fn json_text() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| serde_json::to_string(&f).unwrap()),
        (1..9u32, -400..400i32).prop_map(|(m, e)| format!("{m}e{e}")),
        (1..9u32, 0..400i32).prop_map(|(m, e)| format!("{m}.5E+{e}")),
        (250..420usize).prop_map(|n| "7".repeat(n)),
        Just("-0".to_owned()),
    ];
    let string = prop_oneof![
        "[a-z0-9 ]{0,12}".prop_map(|s| format!("\"{s}\"")),
        Just(r#""\ud800""#.to_owned()),
        Just(r#""\udbff\udfff""#.to_owned()),
        Just(r#""\udfff\ud800""#.to_owned()),
        Just(r#""\ud800\n""#.to_owned()),
        Just(r#""\\ud800\"""#.to_owned()),
        Just(r#""\u0041\u00e9""#.to_owned()),
        Just(r#""é😀""#.to_owned()),
        Just(r#""3e5a""#.to_owned()),
    ];
    let leaf = prop_oneof![
        4 => number,
        4 => string,
        1 => Just("true".to_owned()),
        1 => Just("null".to_owned()),
    ];
    leaf.prop_recursive(8, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6)
                .prop_map(|items| format!("[{}]", items.join(","))),
            prop::collection::vec(("[a-c]{1,2}", inner), 0..6).prop_map(|entries| {
                let body: Vec<String> = entries
                    .into_iter()
                    .map(|(k, v)| format!("\"{k}\":{v}"))
                    .collect();
                format!("{{{}}}", body.join(","))
            }),
            (1..140usize).prop_map(nested),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn generated_logs_scan_the_same_raw_and_parsed(
        payloads in prop::collection::vec(json_text(), 1..6),
        extra in prop::option::of(json_text()),
        end in any::<bool>(),
        capacity in 1..200usize,
    ) {
        let mut lines: Vec<String> = payloads
            .iter()
            .enumerate()
            .map(|(i, data)| line(i as u64, "step/start", data))
            .collect();
        if let Some(extra) = extra {
            let last = lines.len() - 1;
            lines[last] = format!("{},\"extra\":{extra}}}", &lines[last][..lines[last].len() - 1]);
        }
        if end {
            lines.push(line(lines.len() as u64, "turn/end", "{}"));
        }
        let bytes = log(&lines);
        let (first, _) = both(&bytes, 64 * 1024);
        prop_assert_eq!(both(&bytes, capacity).0, first);
    }
}
