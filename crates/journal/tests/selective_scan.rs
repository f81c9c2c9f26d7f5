//! The selective scan (`scan_selected_each`: envelope prefixes read by hand, only selected
//! lines decoded) against the full scan (`scan_each`).
//!
//! With `LineCheck::Full` it must agree with `scan_each` on everything: valid prefix, summary,
//! errors, and the selected events. With `LineCheck::Prefix` it must agree too, except that a
//! line of an unselected type that is damaged *after* its envelope prefix is read past (the
//! documented limit); a torn final line is never handed out either way. Checked on every
//! committed fixture, through tiny buffers (lines straddling refills), on hand-made envelope
//! prefixes, on random logs with random damage, and through `Journal::read_selected_each`
//! (with the backend default and the JSONL override).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::json;
use troupe_journal::{
    Journal, JournalError, JsonlBackend, LineCheck, LineUse, LogBackend, Replay, ScanSummary,
    Selected, SessionListing, SessionSink, read_path_each, read_path_selected_each, scan_each,
    scan_selected_each,
};
use troupe_protocol::{ErrorCode, Event, EventDraft, FixedClock, SessionHeader, SessionId};

/// Either outcome of a scan, comparable: the summary, or the error's code and message.
fn outcome(result: Result<ScanSummary, JournalError>) -> Result<String, (String, String)> {
    result
        .map(|s| format!("{s:?}"))
        .map_err(|e| (e.code().to_owned(), e.to_string()))
}

/// What a selection picks: every type, the Team types, or nothing.
#[derive(Debug, Clone, Copy)]
enum Pick {
    All,
    Team,
    Nothing,
}

impl Pick {
    fn select(self) -> impl Fn(&str) -> bool {
        move |kind: &str| match self {
            Pick::All => true,
            Pick::Team => kind.starts_with("team/"),
            Pick::Nothing => false,
        }
    }
}

/// A selective scan of `bytes` whose reader decodes every handed-out line as an `Event` (and
/// asks for the parsed event when it cannot), through a `capacity`-byte buffer. Every second
/// line it asks for the parsed event anyway, so both ways of handing out are exercised.
fn selective(
    bytes: &[u8],
    capacity: usize,
    check: LineCheck,
    pick: Pick,
) -> (Result<String, (String, String)>, Vec<Event>) {
    let mut seen = Vec::new();
    let mut lines = 0u64;
    let select = pick.select();
    let result = scan_selected_each(
        Path::new("/logs/session.jsonl"),
        BufReader::with_capacity(capacity, bytes),
        check,
        &select,
        &mut |selected| match selected {
            Selected::Line(line) => {
                lines += 1;
                assert!(select(line.kind));
                match serde_json::from_str::<Event>(line.text) {
                    Ok(event) if lines.is_multiple_of(2) => {
                        assert_eq!((event.seq, event.kind.as_str()), (line.seq, line.kind));
                        seen.push(event);
                        LineUse::Used
                    }
                    _ => LineUse::NeedEvent,
                }
            }
            Selected::Event(event) => {
                assert!(select(&event.kind));
                seen.push(event);
                LineUse::Used
            }
        },
    );
    (outcome(result), seen)
}

/// `scan_each` of `bytes`, with the events `pick` selects.
fn full(bytes: &[u8], pick: Pick) -> (Result<String, (String, String)>, Vec<Event>) {
    let mut events = Vec::new();
    let select = pick.select();
    let result = scan_each(Path::new("/logs/session.jsonl"), bytes, &mut |e| {
        if select(&e.kind) {
            events.push(e);
        }
    });
    (outcome(result), events)
}

/// Asserts the selective scan agrees with `scan_each` in every selection and buffer size:
/// with `LineCheck::Full` always, with `LineCheck::Prefix` unless a line of a type in
/// `damaged` is damaged after its envelope prefix and not selected.
fn assert_agrees(bytes: &[u8], damaged: &[&str]) {
    for pick in [Pick::All, Pick::Team, Pick::Nothing] {
        let expected = full(bytes, pick);
        let prefix_agrees = damaged.iter().all(|kind| pick.select()(kind));
        for capacity in [256 * 1024, 1, 7, 64, 300] {
            let checks: &[LineCheck] = if prefix_agrees {
                &[LineCheck::Full, LineCheck::Prefix]
            } else {
                &[LineCheck::Full]
            };
            for &check in checks {
                let got = selective(bytes, capacity, check, pick);
                assert_eq!(
                    got,
                    expected,
                    "{check:?} {pick:?} capacity {capacity}: {}",
                    String::from_utf8_lossy(bytes)
                );
            }
        }
    }
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
fn every_fixture_scans_the_same_selectively() {
    for path in fixtures() {
        let bytes = std::fs::read(&path).unwrap();
        assert_agrees(&bytes, &[]);

        // And through the file readers, by path.
        let mut events = Vec::new();
        let expected = outcome(read_path_each(&path, &mut |e| events.push(e)));
        for check in [LineCheck::Prefix, LineCheck::Full] {
            let mut seen = Vec::new();
            let got = outcome(read_path_selected_each(
                &path,
                check,
                &|_| true,
                &mut |selected| match selected {
                    Selected::Line(_) => LineUse::NeedEvent,
                    Selected::Event(event) => {
                        seen.push(event);
                        LineUse::Used
                    }
                },
            ));
            assert_eq!(got, expected, "{}", path.display());
            assert_eq!(seen, events, "{}", path.display());
        }
    }
}

fn session(lines: &[&str]) -> Vec<u8> {
    let mut bytes = br#"{"type":"session","format":1,"id":"s","createdAt":1}"#.to_vec();
    bytes.push(b'\n');
    for line in lines {
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
    }
    bytes
}

/// Envelope prefixes the hand reader reads, and many it leaves to the full parse: either way
/// the outcome is `scan_each`'s.
#[test]
fn envelope_prefixes_read_by_hand_or_left_to_the_full_parse() {
    let variants = [
        // Troupe's order, the generator's order, data first, whitespace, `ignorable` first.
        r#"{"seq":1,"time":2,"type":"turn/start","data":{"turn":1}}"#,
        r#"{"type":"turn/start","seq":1,"time":2,"data":{"turn":1},"surfaceOp":"append"}"#,
        r#"{"data":{"turn":1},"seq":1,"time":2,"type":"turn/start"}"#,
        " {\t\"seq\" : 1 ,\r\"type\":\"turn/start\" , \"time\":2,\"data\":{\"turn\":1}} ",
        r#"{"ignorable":false,"seq":1,"time":2,"type":"turn/start","data":{}}"#,
        r#"{"ignorable":true,"type":"turn/start","seq":1,"time":2}"#,
        // Unusual: escapes, repeated members, other number forms, unknown members first.
        r#"{"s\u0065q":1,"time":2,"type":"turn/start","data":{}}"#,
        r#"{"seq":1,"time":2,"type":"turn\/start","data":{}}"#,
        r#"{"seq":1,"seq":1,"time":2,"type":"turn/start","data":{}}"#,
        r#"{"seq":1,"type":"turn/start","type":"turn/start","time":2}"#,
        r#"{"seq":01,"time":2,"type":"turn/start","data":{}}"#,
        r#"{"seq":1.0,"time":2,"type":"turn/start","data":{}}"#,
        r#"{"seq":1e0,"time":2,"type":"turn/start","data":{}}"#,
        r#"{"seq":-1,"time":2,"type":"turn/start","data":{}}"#,
        r#"{"seq":18446744073709551616,"time":2,"type":"turn/start","data":{}}"#,
        r#"{"seq":1,"time":-2,"type":"turn/start","data":{}}"#,
        r#"{"seq":1,"time":2.5,"type":"turn/start","data":{}}"#,
        r#"{"x":1,"seq":1,"time":2,"type":"turn/start","data":{}}"#,
        r#"{"seq":1,"time":2,"type":"turn/start"}"#,
        r#"{"seq":1,"type":"turn/start"}"#,
        r#"{"seq":1,"type":"turn/start","data":{}}"#,
        r#"{"seq":1,"time":2,"ignorable":yes,"type":"turn/start","data":{}}"#,
        r#"[1,2,"turn/start",{"turn":1}]"#,
        r#"{"seq":1,"time":2,"type":"plugin/future","data":{}}"#,
        r#"{"seq":1,"time":2,"type":"plugin/future","data":{},"ignorable":true}"#,
        r#"{"seq":2,"time":2,"type":"turn/start","data":{}}"#,
        r#"{"seq":1,"time":2,"type":"turn/end","data":{}}"#,
        r#"{"seq":3,"time":2,"type":"turn/end","data":{}}"#,
        "{\"seq\":1,\"time\":2,\"type\":\"turn/start\",\"data\":{\"t\":\"\u{e9}\"}}",
        "not json",
        "",
    ];
    // Damage after a complete envelope prefix: `LineCheck::Prefix` reads past it when the
    // type is not selected (see the next test); everything else agrees.
    let after_prefix = [
        r#"{"seq":1,"time":2,"type":"turn/start","ignorable":"yes","data":{}}"#,
        r#"{"seq":1,"time":2,"type":"turn/start","type":"turn/end","data":{}}"#,
        r#"{"seq":1,"time":2,"type":"turn/start","data":{"x":}}"#,
        r#"{"seq":1,"time":2,"type":"turn/start","data":{}} trailing"#,
        r#"{"seq":1,"time":2,"type":"turn/start","data":{}"#,
    ];
    let zero = r#"{"seq":0,"time":1,"type":"turn/start","data":{}}"#;
    let end = r#"{"seq":2,"time":3,"type":"turn/end","data":{}}"#;
    for (variant, prefix_agrees) in variants
        .iter()
        .map(|v| (v, true))
        .chain(after_prefix.iter().map(|v| (v, false)))
    {
        for team in [false, true] {
            let line = if team {
                variant.replace("turn/start", "team/task")
            } else {
                (*variant).to_owned()
            };
            // A selected line is decoded whatever the check.
            let kind = if team { "team/task" } else { "turn/start" };
            let damaged: &[&str] = if prefix_agrees { &[] } else { &[kind] };
            assert_agrees(&session(&[zero, &line]), damaged);
            assert_agrees(&session(&[zero, &line, end]), damaged);
        }
    }
}

/// The documented limit of `LineCheck::Prefix`: damage after the envelope prefix of a line of
/// an unselected type is not read. `LineCheck::Full` finds it like `scan_each`.
#[test]
fn prefix_check_reads_past_damage_after_the_envelope_prefix_and_full_check_does_not() {
    let bytes = session(&[
        r#"{"seq":0,"time":1,"type":"turn/start","data":{"turn":1}}"#,
        r#"{"seq":1,"time":2,"type":"assistant/message","data":{"content":[GARBAGE"#,
        r#"{"seq":2,"time":3,"type":"team/task","data":{"v":1}}"#,
        r#"{"seq":3,"time":4,"type":"turn/end","data":{"turn":1}}"#,
    ]);
    let (expected, _) = full(&bytes, Pick::Team);
    let (code, message) = expected.clone().unwrap_err();
    assert_eq!(code, "JOURNAL_CORRUPT");
    assert!(message.contains("line 3"), "{message}");
    assert_eq!(
        selective(&bytes, 4096, LineCheck::Full, Pick::Team).0,
        expected
    );
    let (prefix, events) = selective(&bytes, 4096, LineCheck::Prefix, Pick::Team);
    assert!(prefix.is_ok(), "{prefix:?}");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, "team/task");
    // A selected line is always decoded: the same damage there is found in either mode.
    let bytes = session(&[
        r#"{"seq":0,"time":1,"type":"turn/start","data":{"turn":1}}"#,
        r#"{"seq":1,"time":2,"type":"team/task","data":{"v":GARBAGE"#,
        r#"{"seq":2,"time":3,"type":"turn/end","data":{"turn":1}}"#,
    ]);
    let expected = full(&bytes, Pick::Team);
    assert_eq!(
        selective(&bytes, 4096, LineCheck::Prefix, Pick::Team),
        expected
    );
}

/// A final line without its newline is a torn tail and never handed out, even when it is a
/// complete event.
#[test]
fn a_torn_final_line_is_never_handed_out() {
    let mut bytes = session(&[r#"{"seq":0,"time":1,"type":"team/task","data":{}}"#]);
    bytes.extend_from_slice(br#"{"seq":1,"time":2,"type":"team/task","data":{}}"#);
    for check in [LineCheck::Prefix, LineCheck::Full] {
        let mut handed = Vec::new();
        let summary = scan_selected_each(
            Path::new("s.jsonl"),
            &bytes[..],
            check,
            &|_| true,
            &mut |selected| {
                handed.push(match selected {
                    Selected::Line(line) => line.seq,
                    Selected::Event(event) => event.seq,
                });
                LineUse::Used
            },
        )
        .unwrap();
        assert_eq!(handed.len(), 1);
        let torn = summary.torn_tail.unwrap();
        assert_eq!(torn.reason, "final line has no terminating newline");
        assert_eq!(summary.next_seq.0, 1);
    }
    assert_agrees(&bytes, &[]);
}

/// One line of a random log: an event in one of several member orders, maybe damaged.
#[derive(Debug, Clone)]
struct RandomLine {
    kind: u8,
    order: u8,
    payload: u8,
    damage: Option<(u8, u16)>,
}

const KINDS: &[&str] = &[
    "turn/start",
    "turn/end",
    "assistant/message",
    "team/task",
    "team/message/queued",
    "plugin/future",
];

fn render(seq: u64, line: &RandomLine) -> String {
    let kind = KINDS[usize::from(line.kind) % KINDS.len()];
    let data = match line.payload % 4 {
        0 => json!({"turn": seq}),
        1 => json!({"text": "é \"quoted\" \\ \n", "n": [1, 2.5, null, true]}),
        2 => json!([]),
        _ => json!("plain"),
    };
    let ignorable = kind == "plugin/future" && line.payload.is_multiple_of(2);
    let mut text = match line.order % 4 {
        0 => serde_json::to_string(
            &EventDraft::ignorable(kind, data.clone())
                .into_event(troupe_protocol::Seq(seq), seq * 10),
        )
        .unwrap()
        .replace(
            ",\"ignorable\":true",
            if ignorable { ",\"ignorable\":true" } else { "" },
        ),
        1 => format!(
            r#"{{"type":"{kind}","seq":{seq},"time":{},"data":{data}}}"#,
            seq * 10
        ),
        2 => format!(r#"{{ "data" : {data} , "type" : "{kind}" , "seq" : {seq}, "time":1 }}"#),
        _ => format!(
            r#"{{"seq":{seq},"ignorable":{ignorable},"type":"{kind}","time":0,"data":{data}}}"#
        ),
    };
    if let Some((how, at)) = line.damage {
        let at = usize::from(at) % (text.len() + 1);
        let at = (0..=at)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        match how % 3 {
            0 => text.truncate(at),
            1 => text.insert_str(at, "x\""),
            _ => text = text.replace(&format!("\"seq\":{seq}"), &format!("\"seq\":{}", seq + 1)),
        }
    }
    text
}

fn random_line() -> impl Strategy<Value = RandomLine> {
    (
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        prop::option::weighted(0.08, (any::<u8>(), any::<u16>())),
    )
        .prop_map(|(kind, order, payload, damage)| RandomLine {
            kind,
            order,
            payload,
            damage,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// `LineCheck::Full` always agrees with `scan_each`; `LineCheck::Prefix` too when no line
    /// is damaged (a torn final line included).
    #[test]
    fn random_logs_scan_the_same_selectively(
        lines in prop::collection::vec(random_line(), 0..12),
        torn in any::<bool>(),
    ) {
        let rendered: Vec<String> = lines
            .iter()
            .enumerate()
            .map(|(seq, line)| render(seq as u64, line))
            .collect();
        let refs: Vec<&str> = rendered.iter().map(String::as_str).collect();
        let mut bytes = session(&refs);
        if torn {
            bytes.extend_from_slice(br#"{"seq":99,"time":1,"type":"team/task","data":{}}"#);
        }
        let damaged: Vec<&str> = lines
            .iter()
            .filter(|line| line.damage.is_some())
            .map(|line| KINDS[usize::from(line.kind) % KINDS.len()])
            .collect();
        assert_agrees(&bytes, &damaged);
    }
}

/// A backend that implements only what `LogBackend` requires, so `read_selected_each` is the
/// trait's default.
struct Minimal(JsonlBackend);

impl LogBackend for Minimal {
    fn create(&self, header: SessionHeader) -> troupe_journal::Result<Box<dyn SessionSink>> {
        self.0.create(header)
    }
    fn open(&self, id: &SessionId) -> troupe_journal::Result<(Box<dyn SessionSink>, Replay)> {
        self.0.open(id)
    }
    fn read(&self, id: &SessionId) -> troupe_journal::Result<Replay> {
        self.0.read(id)
    }
    fn list(
        &self,
        on_error: &mut dyn FnMut(JournalError),
    ) -> troupe_journal::Result<Vec<SessionListing>> {
        self.0.list(on_error)
    }
}

#[tokio::test]
async fn journal_read_selected_each_matches_read_each_with_either_backend() {
    let dir = tempfile::tempdir().unwrap();
    let jsonl = JsonlBackend::new(dir.path());
    let id = SessionId::new("lead").unwrap();
    {
        let journal = Journal::with_backend(
            Arc::new(JsonlBackend::new(dir.path())),
            Arc::new(FixedClock::new(5)),
        );
        let writer = journal.create(SessionHeader::new(id.clone(), 0)).unwrap();
        writer
            .append_batch(vec![
                EventDraft::new("turn/start", json!({"turn": 1})),
                EventDraft::new("team/task", json!({"version": 1, "teamId": "lead"})),
                EventDraft::ignorable("plugin/future", json!({})),
                EventDraft::new("turn/end", json!({"turn": 1})),
            ])
            .unwrap();
        writer.flush().await.unwrap();
    }
    // A torn tail the readers must not hand out.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("lead.jsonl"))
        .unwrap();
    file.write_all(br#"{"seq":4,"time":1,"type":"team/task","data":{}}"#)
        .unwrap();
    drop(file);
    for backend in [
        Arc::new(Minimal(JsonlBackend::new(dir.path()))) as Arc<dyn LogBackend>,
        Arc::new(jsonl) as Arc<dyn LogBackend>,
    ] {
        let journal = Journal::with_backend(backend, Arc::new(FixedClock::new(5)));
        let mut events = Vec::new();
        let expected = outcome(journal.read_each(&id, &mut |e| {
            if e.kind.starts_with("team/") {
                events.push(e);
            }
        }));
        for check in [LineCheck::Prefix, LineCheck::Full] {
            let mut seen = Vec::new();
            let got = outcome(journal.read_selected_each(
                &id,
                check,
                &|kind| kind.starts_with("team/"),
                &mut |selected| match selected {
                    Selected::Line(line) => {
                        seen.push(serde_json::from_str::<Event>(line.text).unwrap());
                        LineUse::Used
                    }
                    Selected::Event(event) => {
                        seen.push(event);
                        LineUse::Used
                    }
                },
            ));
            assert_eq!(got, expected);
            assert_eq!(seen, events);
            assert_eq!(seen.len(), 1);
        }
    }
}
