//! The fast path (`TeamState::apply_line`, `StreamFold` over a selective journal scan) against
//! the `Value` path (`TeamState::apply` of the parsed `Event`): the fast path may only apply a
//! line when it is a valid event that `apply` accepts, and must then give the very same state;
//! otherwise it must leave the state unchanged and ask for the event. Checked on hand-written
//! logs, on line texts a `Value` cannot tell apart (key order, repeated keys, escapes, array
//! forms, whitespace), on random mutations of whole lines, and on committed generator logs —
//! where it must also really take the fast path for every Team line.

use std::path::Path;

use proptest::prelude::*;
use serde_json::{Value, json};
use troupe_journal::{LineCheck, LineUse, Selected, scan_each, scan_selected_each};
use troupe_protocol::{Event, EventDraft, Seq, SessionHeader, SessionId};
use troupe_team::{LineApplied, StreamFold, TaskSnapshot, TeamId, TeamState};

use super::support::*;

/// A stored event's line, as the journal writes it.
fn line_of(event: &Event) -> String {
    serde_json::to_string(event).unwrap()
}

/// Applies `line` (of type `kind`) to a copy of `base` both ways and asserts they agree.
/// Returns what the fast path did and the `Value` path's result (`None` when the line is not
/// a valid event at all).
fn apply_both(
    base: &TeamState,
    kind: &str,
    line: &str,
) -> (LineApplied, Option<Result<TeamState, String>>) {
    let mut fast = base.clone();
    let applied = fast.apply_line(kind, line);
    let reference = serde_json::from_str::<Event>(line).ok().map(|event| {
        let mut state = base.clone();
        state
            .apply(&event)
            .map(|()| state)
            .map_err(|e| e.to_string())
    });
    match applied {
        LineApplied::Applied => {
            let event: Event = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("applied a line that is not an event ({e}): {line}"));
            assert_eq!(event.kind, kind, "applied a line of another type: {line}");
            match &reference {
                Some(Ok(state)) => assert_eq!(&fast, state, "{line}"),
                other => panic!("applied a line `apply` refuses ({other:?}): {line}"),
            }
            fast.verify_indexes().unwrap();
        }
        LineApplied::NeedEvent => assert_eq!(&fast, base, "changed the state: {line}"),
    }
    (applied, reference)
}

/// Folds `events` through their lines (the fast path, falling back to the events) and by
/// `TeamState::fold`, asserts they agree, and returns how many lines took the fast path.
fn fold_both(root: &TeamId, events: &[Event]) -> (Result<TeamState, String>, usize) {
    let expected = TeamState::fold(root.clone(), events).map_err(|e| e.to_string());
    let mut fold = StreamFold::new(root.clone());
    let mut fast = 0;
    for event in events {
        if fold.line(&event.kind, &line_of(event)) {
            fast += 1;
        } else {
            fold.event(event);
        }
    }
    let folded = fold.finish().map_err(|e| e.to_string());
    assert_eq!(folded, expected);
    if let Ok(state) = &folded {
        state.verify_indexes().unwrap();
    }
    (folded, fast)
}

fn valid_log() -> Vec<(&'static str, Value)> {
    let mut owner = task("task-1", 2, "in_progress", &[]);
    owner.1["task"]["ownerId"] = json!("w1");
    let mut failed = member("w2", "worker-b", "failed");
    failed.1["member"]["error"] = json!("spawn failed");
    let mut scoped = task("task-3", 1, "pending", &["task-1"]);
    scoped.1["task"]["writeScopes"] = json!(["src", "docs/x"]);
    let mut rescoped = task("task-3", 2, "pending", &["task-1"]);
    rescoped.1["task"]["writeScopes"] = json!(["src"]);
    rescoped.1["task"]["description"] = json!("line one\nline \"two\" \u{e9}\u{1F600}");
    let mut unblocked = task("task-3", 3, "pending", &[]);
    unblocked.1["task"]["writeScopes"] = json!(["src"]);
    unblocked.1["task"]["description"] = rescoped.1["task"]["description"].clone();
    vec![
        member_in(ANCESTOR, "a1", "worker-a", "provisioning"),
        ("turn/start", json!({"turn": 1})),
        member("w1", "worker-a", "provisioning"),
        member("w1", "worker-a", "active"),
        member("w2", "worker-b", "provisioning"),
        failed,
        task("task-1", 1, "pending", &[]),
        task("task-2", 1, "pending", &["task-1"]),
        owner,
        task_in(ANCESTOR, "task-9", 4, "pending", &["nowhere"]),
        queued("m1", "w1"),
        queued_with(
            "m2",
            "w1",
            json!([{"type": "text", "text": "hi"}, {"type": "plugin/x", "payload": {"v": [1.5, -0.0, 1e300]}}]),
        ),
        delivered("m1", "w1"),
        task("task-2", 2, "deleted", &["task-1"]),
        task("external", 1, "completed", &[]),
        scoped,
        rescoped,
        unblocked,
        delivered("m2", "w1"),
    ]
}

#[test]
fn a_valid_log_takes_the_fast_path_and_folds_the_same() {
    let events = events(valid_log());
    let (folded, fast) = fold_both(&team(), &events);
    let state = folded.unwrap();
    assert_eq!(state.tasks().len(), 4);
    // Every line is applied without its parsed event.
    assert_eq!(fast, events.len());
    let task3 = state.task("task-3").unwrap();
    assert_eq!(task3.write_scopes, vec!["src".to_owned()]);
    assert!(task3.description.contains("\"two\""));
}

#[test]
fn refusals_are_left_to_the_value_path_with_the_same_error() {
    let mut bad_subject = task_in(ANCESTOR, "task-3", 1, "pending", &[]);
    bad_subject.1["task"]["subject"] = json!(42);
    let mut extra = member("w3", "worker-c", "provisioning");
    extra.1["extra"] = json!(true);
    let mut bad_content = queued("m3", "w1");
    bad_content.1["message"]["content"] = json!([{"type": "image"}]);
    let mut other_version = task("task-3", 1, "pending", &[]);
    other_version.1["version"] = json!(2);
    let mut huge_version = task("task-3", 1, "pending", &[]);
    huge_version.1["version"] = json!(9_007_199_254_740_992_u64);
    let mut bad_task_id = task("task-3", 1, "pending", &[]);
    bad_task_id.1["task"]["id"] = json!("task-99999999999999999999");
    let mut null_owner = task("task-3", 1, "pending", &[]);
    null_owner.1["task"]["ownerId"] = Value::Null;
    let mut bad_owner = task("task-3", 1, "pending", &[]);
    bad_owner.1["task"]["ownerId"] = json!("not a session id");
    let mut bad_blocker = task("task-3", 1, "pending", &[]);
    bad_blocker.1["task"]["blockedBy"] = json!([""]);
    let mut bad_target = queued("m3", "w1");
    bad_target.1["message"]["targetId"] = json!("-x");
    let mut refusals = 0;
    for bad in [
        bad_subject,
        extra,
        bad_content,
        other_version,
        huge_version,
        bad_task_id,
        null_owner,
        bad_owner,
        bad_blocker,
        bad_target,
        ("team/task", json!([1])),
        ("team/task", json!(null)),
        ("team/member", json!({"version": 1, "teamId": ""})),
        ("team/member", json!({"version": 1, "teamId": 5})),
        member("w1", "worker-a", "provisioning"),
        member("w9", "worker-a", "provisioning"),
        task("task-1", 5, "pending", &[]),
        task("task-4", 2, "pending", &[]),
        task("task-4", 1, "pending", &["task-4"]),
        task("task-4", 1, "pending", &["task-2"]),
        task("task-4", 1, "pending", &["task-1", "task-1"]),
        task("task-1", 3, "deleted", &[]),
        queued("m1", "w1"),
        delivered("m1", "w1"),
        delivered("m1", "w2"),
        delivered("m9", "w1"),
    ] {
        let mut log = valid_log();
        log.push(bad);
        log.push(task("task-5", 1, "pending", &[]));
        let events = events(log);
        let (folded, fast) = fold_both(&team(), &events);
        if folded.is_err() {
            refusals += 1;
            // The refused line and the rest were not applied by the fast path.
            assert!(fast < events.len());
        }
    }
    assert!(refusals >= 20, "{refusals} refused");
}

#[test]
fn stream_fold_locates_a_refusal_like_fold() {
    let log = events(vec![
        member("w1", "worker-a", "provisioning"),
        member("w1", "worker-a", "provisioning"),
        task("task-1", 1, "pending", &[]),
    ]);
    let expected = TeamState::fold(team(), &log).unwrap_err();
    let mut fold = StreamFold::new(team());
    assert!(fold.line(&log[0].kind, &line_of(&log[0])));
    assert!(!fold.line(&log[1].kind, &line_of(&log[1])));
    assert!(!fold.event(&log[1]));
    assert!(fold.is_refused());
    // Everything after the refusal is ignored.
    assert!(fold.line(&log[2].kind, &line_of(&log[2])));
    assert_eq!(fold.state().members().len(), 1);
    assert!(fold.state().tasks().is_empty());
    let err = fold.finish().unwrap_err();
    assert_eq!(err, expected);
    assert_eq!(err.seq, Seq(1));
}

fn base_state() -> TeamState {
    let mut state = TeamState::new(team());
    for (kind, data) in [
        member("w1", "worker-a", "provisioning"),
        member("w1", "worker-a", "active"),
        member("w2", "worker-b", "provisioning"),
        task("task-1", 1, "pending", &[]),
        task("task-2", 1, "pending", &["task-1"]),
        queued("m1", "w1"),
    ] {
        state.apply_data(kind, &data).unwrap();
    }
    state
}

/// Whole lines that differ only where a `Value` cannot see it, or where the fast path must
/// hand over to the `Value` path.
#[test]
fn line_texts_a_value_cannot_tell_apart() {
    let base = base_state();
    let task3 = r#""id":"task-3","revision":1,"subject":"s","description":"d","status":"pending","blockedBy":["task-1"],"writeScopes":[]"#;
    let data = format!(r#"{{"version":1,"teamId":"{ROOT}","task":{{{task3}}}}}"#);
    let envelope = |data: &str| format!(r#"{{"seq":7,"time":9,"type":"team/task","data":{data}}}"#);
    // (line, whether the fast path must apply it)
    let cases: Vec<(String, bool)> = vec![
        (envelope(&data), true),
        // Other member orders and whitespace, in the envelope and the payload.
        (
            format!(r#"{{"type":"team/task","seq":7,"time":9,"data":{data}}}"#),
            true,
        ),
        (
            format!(r#"{{"data":{data},"ignorable":false,"time":9,"type":"team/task","seq":7}}"#),
            true,
        ),
        // The journal's batch framing (DESIGN decision 9), where Troupe writes it and after `data`.
        (
            format!(r#"{{"seq":7,"time":9,"type":"team/task","batchLast":9,"data":{data}}}"#),
            true,
        ),
        (
            format!(r#"{{"seq":7,"time":9,"type":"team/task","data":{data},"batchLast":8}}"#),
            true,
        ),
        (
            format!(
                " {{ \"seq\" : 7 ,\t\"time\":9,\r\"type\" : \"team/task\" , \"data\" : {data} }}  "
            ),
            true,
        ),
        (
            envelope(&format!(
                r#"{{"task":{{{task3}}},"teamId":"{ROOT}","version":1}}"#
            )),
            true,
        ),
        (
            envelope(&format!(
                " {{ \"version\" : 1 ,\n \"teamId\" : \"{ROOT}\" , \"task\" : {{ {task3} }} }} "
            )),
            true,
        ),
        // Escapes in values (decoded), in keys (handed over).
        (
            envelope(&format!(
                r#"{{"version":1,"teamId":"team-r\u006fot","task":{{{task3}}}}}"#
            )),
            true,
        ),
        (
            envelope(&data.replace(r#""s""#, r#""a \"quoted\" \\ subject\n\u00e9\ud83d\ude00""#)),
            true,
        ),
        (
            envelope(&format!(
                r#"{{"\u0076ersion":1,"teamId":"{ROOT}","task":{{{task3}}}}}"#
            )),
            false,
        ),
        (
            envelope(&data).replace(r#""type""#, r#""typ\u0065""#),
            false,
        ),
        // Invalid strings: a raw control character, a lone surrogate, a bad escape.
        (envelope(&data.replace(r#""d""#, "\"a\u{1}b\"")), false),
        (envelope(&data.replace(r#""d""#, r#""\ud800""#)), false),
        (envelope(&data.replace(r#""d""#, r#""\x""#)), false),
        // Repeated keys: a `Value` keeps the last one; the fast path hands over.
        (
            envelope(&format!(
                r#"{{"version":1,"version":1,"teamId":"{ROOT}","task":{{{task3}}}}}"#
            )),
            false,
        ),
        (
            envelope(&format!(
                r#"{{"version":1,"teamId":"{ROOT}","task":{{"id":"task-1",{task3}}}}}"#
            )),
            false,
        ),
        (
            format!(r#"{{"seq":7,"seq":7,"time":9,"type":"team/task","data":{data}}}"#),
            false,
        ),
        // Unknown members: ignored by `Event` (handed over), refused in the payload.
        (
            format!(r#"{{"seq":7,"time":9,"type":"team/task","data":{data},"x":[1,{{}}]}}"#),
            false,
        ),
        (
            envelope(&format!(
                r#"{{"version":1,"teamId":"{ROOT}","task":{{{task3}}},"x":1}}"#
            )),
            false,
        ),
        // Array (sequence) forms of structs.
        (
            envelope(&format!(
                r#"{{"version":1,"teamId":"{ROOT}","task":["task-3",1,"s","d","pending",["task-1"],[]]}}"#
            )),
            false,
        ),
        (envelope(&format!(r#"[1,"{ROOT}",{{{task3}}}]"#)), false),
        (format!(r#"[7,9,"team/task",{data}]"#), false),
        // Numbers the fast path does not read plainly.
        (
            envelope(&format!(
                r#"{{"version":1.0,"teamId":"{ROOT}","task":{{{task3}}}}}"#
            )),
            false,
        ),
        (
            envelope(&format!(
                r#"{{"version":1e0,"teamId":"{ROOT}","task":{{{task3}}}}}"#
            )),
            false,
        ),
        (
            envelope(&format!(
                r#"{{"version":-0,"teamId":"{ROOT}","task":{{{task3}}}}}"#
            )),
            false,
        ),
        (
            envelope(&format!(
                r#"{{"version":01,"teamId":"{ROOT}","task":{{{task3}}}}}"#
            )),
            false,
        ),
        (
            format!(r#"{{"seq":7,"time":18446744073709551616,"type":"team/task","data":{data}}}"#),
            false,
        ),
        // Other versions and selectors.
        (
            envelope(&format!(r#"{{"version":3,"teamId":"{ROOT}"}}"#)),
            false,
        ),
        (
            envelope(&format!(
                r#"{{"version":3,"teamId":"{ANCESTOR}","junk":[]}}"#
            )),
            false,
        ),
        (
            envelope(&format!(
                r#"{{"version":1,"teamId":"","task":{{{task3}}}}}"#
            )),
            false,
        ),
        // Another Team's valid record: skipped on the fast path.
        (
            envelope(&format!(
                r#"{{"version":1,"teamId":"{ANCESTOR}","task":{{{task3}}}}}"#
            )),
            true,
        ),
        // Not one event: trailing bytes, a missing member, another type, `ignorable` junk.
        (format!("{} x", envelope(&data)), false),
        (format!("{}}}", envelope(&data)), false),
        (
            format!(r#"{{"seq":7,"type":"team/task","data":{data}}}"#),
            false,
        ),
        (
            format!(r#"{{"seq":7,"time":9,"type":"team/member","data":{data}}}"#),
            false,
        ),
        (
            format!(r#"{{"seq":7,"time":9,"type":"team/task","data":{data},"ignorable":1}}"#),
            false,
        ),
        (
            format!(r#"{{"seq":7,"time":9,"type":"team/task","data":{data},"ignorable":true}}"#),
            true,
        ),
        (envelope(&data)[..40].to_owned(), false),
    ];
    for (line, fast) in &cases {
        let (applied, _) = apply_both(&base, "team/task", line);
        assert_eq!(
            applied == LineApplied::Applied,
            *fast,
            "fast path expected {fast}: {line}"
        );
    }
    // Delivered and queued lines.
    let delivered_line = |data: &str| {
        format!(r#"{{"seq":7,"time":9,"type":"team/message/delivered","data":{data}}}"#)
    };
    let queued_line = |content: &str| {
        format!(
            r#"{{"seq":7,"time":9,"type":"team/message/queued","data":{{"version":1,"teamId":"{ROOT}","message":{{"id":"m2","senderId":"{ROOT}","senderName":"lead","targetId":"w1","delivery":"wakeup","content":{content}}}}}}}"#
        )
    };
    let deep = format!("{}1{}", "[".repeat(120), "]".repeat(120));
    for (kind, line, fast) in [
        (
            "team/message/delivered",
            delivered_line(&format!(
                r#"{{"version":1,"teamId":"{ROOT}","messageId":"m1","targetId":"w1"}}"#
            )),
            true,
        ),
        (
            "team/message/delivered",
            delivered_line(&format!(
                r#"{{"targetId":"w1","messageId":"m1","teamId":"{ROOT}","version":1}}"#
            )),
            true,
        ),
        (
            "team/message/delivered",
            delivered_line(&format!(
                r#"{{"version":1,"teamId":"{ROOT}","messageId":"m1","targetId":"w1","targetId":"w2"}}"#
            )),
            false,
        ),
        (
            "team/message/delivered",
            delivered_line(&format!(
                r#"{{"version":1,"teamId":"{ROOT}","messageId":"m1","targetId":"w2"}}"#
            )),
            false,
        ),
        (
            "team/message/queued",
            queued_line(
                r#"[{"type":"text","text":"a"},{"type":"plugin/x","v":[1,2.5,{"k":null}]}]"#,
            ),
            true,
        ),
        (
            "team/message/queued",
            queued_line(r#"[{"type":"text","text":"a","text":"b"}]"#),
            true,
        ),
        (
            "team/message/queued",
            queued_line(r#"[{"type":"text"}]"#),
            false,
        ),
        (
            "team/message/queued",
            queued_line(r#"[{"type":"x","v":1e400}]"#),
            false,
        ),
        // Nesting close to serde_json's limit is left to the `Value` path.
        (
            "team/message/queued",
            queued_line(&format!(r#"[{{"type":"x","v":{deep}}}]"#)),
            false,
        ),
        (
            "team/message/queued",
            queued_line(r#"[{"type":"text","text":"a"}]"#).replace("wakeup", "later"),
            false,
        ),
    ] {
        let (applied, _) = apply_both(&base, kind, &line);
        assert_eq!(
            applied == LineApplied::Applied,
            fast,
            "fast path expected {fast}: {line}"
        );
    }
}

/// The shapes a one-pass serde derive decode of the line would read differently from the
/// `Value` path (`Event`, then the payload's `Value`), or read where the `Value` path does
/// not: repeated keys, escaped keys, `null` for optional members, other number forms, deep
/// nesting, trailing bytes, arrays for structs, an enum's map form — in each part of the line
/// (envelope, payload, snapshot, content) and for each Team type. The fast path (the hand
/// reader; see BENCHMARKS.md for why it is not serde derive) applies such a line only as the
/// `Value` path does (`apply_both`), and hands over what it does not read plainly; members and
/// non-text content are read by serde in place, so they follow serde's reading.
#[test]
fn shapes_serde_derive_and_a_value_read_differently() {
    let base = base_state();
    let event =
        |kind: &str, data: &str| format!(r#"{{"seq":7,"time":9,"type":"{kind}","data":{data}}}"#);
    let task = |body: &str| {
        event(
            "team/task",
            &format!(r#"{{"version":1,"teamId":"{ROOT}","task":{{{body}}}}}"#),
        )
    };
    let task3 = r#""id":"task-3","revision":1,"subject":"s","description":"d","status":"pending","blockedBy":["task-1"],"writeScopes":[]"#;
    let member = |body: &str| {
        event(
            "team/member",
            &format!(r#"{{"version":1,"teamId":"{ROOT}","member":{{{body}}}}}"#),
        )
    };
    let w3 = r#""id":"w3","name":"worker-c","description":"d","provider":"spawn","context":"fresh","phase":"provisioning""#;
    let message = |body: &str| {
        event(
            "team/message/queued",
            &format!(r#"{{"version":1,"teamId":"{ROOT}","message":{body}}}"#),
        )
    };
    let m2 = |content: &str| {
        format!(
            r#"{{"id":"m2","senderId":"{ROOT}","senderName":"lead","targetId":"w1","delivery":"quiet","content":{content}}}"#
        )
    };
    let queued = |content: &str| message(&m2(content));
    let text = r#"[{"type":"text","text":"hi"}]"#;
    let delivered = event(
        "team/message/delivered",
        &format!(r#"{{"version":1,"teamId":"{ROOT}","messageId":"m1","targetId":"w1"}}"#),
    );
    let nested = |depth: usize| {
        queued(&format!(
            r#"[{{"type":"plugin/x","v":{}1{}}}]"#,
            "[".repeat(depth),
            "]".repeat(depth)
        ))
    };
    let blocks = |n: usize| {
        queued(&format!(
            "[{}]",
            vec![r#"{"type":"text","text":"t"}"#; n].join(",")
        ))
    };
    // (type, line, whether the fast path applies it, whether the `Value` path accepts it)
    let cases: Vec<(&str, String, bool, bool)> = vec![
        // The plain lines.
        ("team/task", task(task3), true, true),
        ("team/member", member(w3), true, true),
        ("team/message/queued", queued(text), true, true),
        ("team/message/delivered", delivered.clone(), true, true),
        // Repeated keys: handed over (serde derive refuses them), a `Value` keeps the last one …
        (
            "team/task",
            task(&format!(r#"{task3},"status":"pending""#)),
            false,
            true,
        ),
        (
            "team/member",
            member(&format!(r#"{w3},"phase":"provisioning""#)),
            false,
            true,
        ),
        (
            "team/message/queued",
            queued(text).replace(
                r#""delivery":"quiet""#,
                r#""delivery":"wakeup","delivery":"quiet""#,
            ),
            false,
            true,
        ),
        // … `Event` refuses them too …
        (
            "team/task",
            task(task3).replace(r#""data":"#, r#""data":{},"data":"#),
            false,
            false,
        ),
        // … and inside content, both paths build the same `Value`.
        (
            "team/message/queued",
            queued(r#"[{"type":"plugin/x","v":1,"v":2}]"#),
            true,
            true,
        ),
        // Escaped keys: the hand reader hands them over; a member and non-text content are
        // read by serde in place, which decodes them as the `Value` path does.
        (
            "team/task",
            task(&task3.replace(r#""subject""#, r#""\u0073ubject""#)),
            false,
            true,
        ),
        (
            "team/member",
            member(&w3.replace(r#""name""#, r#""n\u0061me""#)),
            true,
            true,
        ),
        (
            "team/message/queued",
            queued(r#"[{"\u0074ype":"text","text":"hi"}]"#),
            true,
            true,
        ),
        (
            "team/task",
            task(task3).replace(r#""data""#, r#""d\u0061ta""#),
            false,
            true,
        ),
        // Escaped values are decoded, enums and the envelope's type included.
        (
            "team/task",
            task(&task3.replace(r#""pending""#, r#""pend\u0069ng""#)),
            true,
            true,
        ),
        (
            "team/member",
            member(&w3.replace(r#""fresh""#, r#""\u0066resh""#)),
            true,
            true,
        ),
        (
            "team/task",
            task(task3).replace(r#""team/task""#, r#""team\/task""#),
            true,
            true,
        ),
        // An enum's map form: both `serde_json` paths read it; the hand reader hands it over.
        (
            "team/task",
            task(&task3.replace(r#""pending""#, r#"{"pending":null}"#)),
            false,
            true,
        ),
        // `null` for optional members: `ownerId` and `error` refuse it in both paths; `Event`
        // reads a `null` `batchLast` as its absence (the hand reader hands it over), but not a
        // `null` `ignorable` or `data`.
        (
            "team/task",
            task(&format!(r#"{task3},"ownerId":null"#)),
            false,
            false,
        ),
        (
            "team/member",
            member(&format!(r#"{w3},"error":null"#)),
            false,
            false,
        ),
        (
            "team/task",
            task(task3).replace(r#""data""#, r#""batchLast":null,"data""#),
            false,
            true,
        ),
        (
            "team/task",
            task(task3).replace(r#""data""#, r#""ignorable":null,"data""#),
            false,
            false,
        ),
        ("team/task", event("team/task", "null"), false, false),
        (
            "team/task",
            task(&task3.replace(r#""s""#, "null")),
            false,
            false,
        ),
        (
            "team/message/queued",
            queued(r#"[{"type":"text","text":null}]"#),
            false,
            false,
        ),
        // Numbers: only integers where the wire has integers, in both paths; content keeps
        // every form as the `Value` path parses it.
        (
            "team/task",
            task(&task3.replace(r#""revision":1"#, r#""revision":1.0"#)),
            false,
            false,
        ),
        (
            "team/task",
            task(&task3.replace(r#""revision":1"#, r#""revision":1e0"#)),
            false,
            false,
        ),
        (
            "team/task",
            task(&task3.replace(r#""revision":1"#, r#""revision":-0"#)),
            false,
            false,
        ),
        (
            "team/task",
            task(task3).replace(r#""seq":7"#, r#""seq":7.0"#),
            false,
            false,
        ),
        (
            "team/task",
            task(task3).replace(r#""time":9"#, r#""time":9E0"#),
            false,
            false,
        ),
        (
            "team/task",
            task(task3).replace(r#""data""#, r#""batchLast":9.0,"data""#),
            false,
            false,
        ),
        (
            "team/task",
            task(task3).replace(r#"{"version":1,"#, r#"{"version":1E0,"#),
            false,
            false,
        ),
        (
            "team/message/queued",
            queued(r#"[{"type":"plugin/x","v":[1.0,1e0,-0,10E-1,-5,18446744073709551616]}]"#),
            true,
            true,
        ),
        // Deep nesting: serde_json's recursion limit counts from where it starts parsing; the
        // `Value` path starts at the line (the 127th level is the last it reads), the hand
        // reader gives content to serde_json a few levels deeper and hands over content with
        // more than 100 brackets. Plain text blocks it reads itself, any number of them.
        ("team/message/queued", nested(122), false, true),
        ("team/message/queued", nested(123), false, false),
        ("team/message/queued", blocks(90), true, true),
        ("team/message/queued", blocks(120), true, true),
        (
            "team/task",
            task(&task3.replace(r#""writeScopes":[]"#, r#""writeScopes":[[["src"]]]"#)),
            false,
            false,
        ),
        // Trailing bytes: only whitespace may follow the event.
        ("team/task", format!("{} \t\r\n", task(task3)), true, true),
        (
            "team/task",
            format!("{}{}", task(task3), task(task3)),
            false,
            false,
        ),
        ("team/task", format!("{},", task(task3)), false, false),
        ("team/task", format!("{}\u{0}", task(task3)), false, false),
        (
            "team/message/delivered",
            format!("{delivered}]"),
            false,
            false,
        ),
        // Arrays for structs: serde derive reads them as the members in order, and so does the
        // `Value` path for the envelope and the snapshots (not for the payload). The hand
        // reader hands them over, except a member's: serde reads it in place, as the `Value`
        // path does.
        (
            "team/task",
            format!(
                r#"[7,9,"team/task",null,{{"version":1,"teamId":"{ROOT}","task":{{{task3}}}}},false]"#
            ),
            false,
            true,
        ),
        (
            "team/member",
            event(
                "team/member",
                &format!(
                    r#"{{"version":1,"teamId":"{ROOT}","member":["w3","worker-c","d","spawn","fresh","provisioning"]}}"#
                ),
            ),
            true,
            true,
        ),
        (
            "team/message/queued",
            message(&format!(
                r#"["m2","{ROOT}","lead","w1","quiet",[{{"type":"text","text":"hi"}}]]"#
            )),
            false,
            true,
        ),
        (
            "team/task",
            task(task3)
                .replace(r#""task":{"#, r#""task":["#)
                .replace(r#"[]}}"#, r#"[]]}"#),
            false,
            false,
        ),
        (
            "team/message/delivered",
            event(
                "team/message/delivered",
                &format!(r#"[1,"{ROOT}","m1","w1"]"#),
            ),
            false,
            false,
        ),
    ];
    for (kind, line, fast, accepted) in &cases {
        let (applied, reference) = apply_both(&base, kind, line);
        assert_eq!(
            applied == LineApplied::Applied,
            *fast,
            "fast path expected {fast}: {line}"
        );
        assert_eq!(
            matches!(reference, Some(Ok(_))),
            *accepted,
            "`Value` path expected to accept: {accepted} ({:?}): {line}",
            reference.map(|r| r.map(drop))
        );
    }
}

#[test]
fn non_team_lines_are_not_read() {
    let mut state = TeamState::new(team());
    for (kind, line) in [
        ("turn/start", "not even JSON"),
        ("plugin/unknown", r#"{"version":1,"teamId":"team-root"}"#),
    ] {
        assert_eq!(state.apply_line(kind, line), LineApplied::Applied);
    }
    assert_eq!(state, TeamState::new(team()));
}

/// A JSON tree that keeps key order and repeated keys (a `Value` keeps neither).
#[derive(Debug, Clone)]
enum Json {
    Object(Vec<(String, Json)>),
    Array(Vec<Json>),
    Text(String),
}

impl Json {
    fn of(value: &Value) -> Self {
        match value {
            Value::Object(map) => {
                Json::Object(map.iter().map(|(k, v)| (k.clone(), Json::of(v))).collect())
            }
            Value::Array(items) => Json::Array(items.iter().map(Json::of).collect()),
            other => Json::Text(other.to_string()),
        }
    }

    fn render(&self) -> String {
        match self {
            Json::Object(entries) => {
                let body: Vec<String> = entries
                    .iter()
                    .map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), v.render()))
                    .collect();
                format!("{{{}}}", body.join(","))
            }
            Json::Array(items) => {
                let body: Vec<String> = items.iter().map(Json::render).collect();
                format!("[{}]", body.join(","))
            }
            Json::Text(text) => text.clone(),
        }
    }

    /// Every node, depth first (the root first).
    fn count(&self) -> usize {
        1 + match self {
            Json::Object(entries) => entries.iter().map(|(_, v)| v.count()).sum(),
            Json::Array(items) => items.iter().map(Json::count).sum(),
            Json::Text(_) => 0,
        }
    }

    /// The `index`-th node in depth-first order.
    fn node(&mut self, index: usize) -> &mut Json {
        if index == 0 {
            return self;
        }
        let mut rest = index - 1;
        let children: Vec<&mut Json> = match self {
            Json::Object(entries) => entries.iter_mut().map(|(_, v)| v).collect(),
            Json::Array(items) => items.iter_mut().collect(),
            Json::Text(_) => Vec::new(),
        };
        for child in children {
            let size = child.count();
            if rest < size {
                return child.node(rest);
            }
            rest -= size;
        }
        unreachable!("node index out of range")
    }
}

const REPLACEMENTS: &[&str] = &[
    "1",
    "2",
    "0",
    "-1",
    "1.0",
    "1e0",
    "01",
    "9007199254740992",
    "18446744073709551616",
    "\"\"",
    "\"x\"",
    "\"a\\nb\"",
    "\"\\u0074ask-1\"",
    "\"team-root\"",
    "\"team/task\"",
    "\"task-1\"",
    "\"w1\"",
    "\"m1\"",
    "\"pending\"",
    "\"deleted\"",
    "\"active\"",
    "null",
    "true",
    "false",
    "[]",
    "{}",
    "[\"task-1\"]",
    "[{\"type\":\"text\",\"text\":\"t\"}]",
];

/// Applies mutation `op` (with random `pick`s) to `tree`.
fn mutate(tree: &mut Json, op: u8, pick: u64, pick2: u64) {
    let index = (pick % tree.count() as u64) as usize;
    let node = tree.node(index);
    let replacement = REPLACEMENTS[(pick2 % REPLACEMENTS.len() as u64) as usize];
    match (op % 8, node) {
        // Replace a value.
        (0, node) => *node = Json::Text(replacement.to_owned()),
        // Repeat a key, with its own or another value.
        (1, Json::Object(entries)) if !entries.is_empty() => {
            let (key, value) = entries[(pick2 % entries.len() as u64) as usize].clone();
            let value = if pick2.is_multiple_of(2) {
                value
            } else {
                Json::Text(replacement.to_owned())
            };
            entries.insert((pick2 % (entries.len() as u64 + 1)) as usize, (key, value));
        }
        // Drop a key.
        (2, Json::Object(entries)) if !entries.is_empty() => {
            entries.remove((pick2 % entries.len() as u64) as usize);
        }
        // Add an unknown key.
        (3, Json::Object(entries)) => {
            entries.push(("extra".to_owned(), Json::Text("1".to_owned())))
        }
        // Reorder keys.
        (4, Json::Object(entries)) => {
            let by = (pick2 % (entries.len() as u64).max(1)) as usize;
            entries.rotate_left(by);
        }
        // An object as the array of its values (serde's sequence form of a struct).
        (5, node @ Json::Object(_)) => {
            if let Json::Object(entries) = node.clone() {
                *node = Json::Array(entries.into_iter().map(|(_, v)| v).collect());
            }
        }
        // Drop an array item.
        (6, Json::Array(items)) if !items.is_empty() => {
            items.remove((pick2 % items.len() as u64) as usize);
        }
        // Escape a key (`"id"` → `"\u0069d"`).
        (7, Json::Object(entries)) if !entries.is_empty() => {
            let at = (pick2 % entries.len() as u64) as usize;
            let key = &mut entries[at].0;
            if let Some(first) = key.chars().next() {
                *key = format!("\\u{:04x}{}", first as u32, &key[first.len_utf8()..]);
            }
        }
        _ => {}
    }
}

/// Candidate lines (as events) for the mutation test, against [`base_state`].
fn candidates() -> Vec<Event> {
    let mut owned = task("task-1", 2, "in_progress", &[]);
    owned.1["task"]["ownerId"] = json!("w1");
    let mut failed = member("w2", "worker-b", "failed");
    failed.1["member"]["error"] = json!("no");
    let list = vec![
        member("w3", "worker-c", "provisioning"),
        member("w2", "worker-b", "active"),
        failed,
        task("task-3", 1, "pending", &["task-1", "task-2"]),
        owned,
        task("task-2", 2, "deleted", &["task-1"]),
        queued("m2", "w2"),
        delivered("m1", "w1"),
        task_in(ANCESTOR, "task-1", 1, "pending", &[]),
        member_in(ANCESTOR, "w1", "worker-a", "active"),
    ];
    events(list)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn mutated_lines_apply_the_same_fast_and_parsed(
        which in 0..10usize,
        ops in prop::collection::vec((any::<u8>(), any::<u64>(), any::<u64>()), 0..4),
    ) {
        let base = base_state();
        let event = candidates().swap_remove(which);
        let mut tree = Json::of(&serde_json::to_value(&event).unwrap());
        for (op, pick, pick2) in ops {
            mutate(&mut tree, op, pick, pick2);
        }
        let _ = apply_both(&base, &event.kind, &tree.render());
    }
}

/// The committed generator logs (see `tests/fixtures/README.md`), as session files.
fn fixture(profile: &str) -> (TeamId, Value, Vec<u8>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let meta: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("lead-{profile}-500.meta.json"))).unwrap(),
    )
    .unwrap();
    let root = TeamId::new(SessionId::new(meta["rootId"].as_str().unwrap()).unwrap());
    let mut file = serde_json::to_vec(&SessionHeader::new(root.lead_id().clone(), 1)).unwrap();
    file.push(b'\n');
    file.extend(std::fs::read(dir.join(format!("lead-{profile}-500.jsonl"))).unwrap());
    (root, meta, file)
}

#[test]
fn generator_logs_fold_the_same_through_the_selective_scan() {
    for profile in ["capped", "growing"] {
        let (root, meta, file) = fixture(profile);
        let path = Path::new("lead.jsonl");
        let mut events = Vec::new();
        let full = scan_each(path, &file[..], &mut |e| events.push(e)).unwrap();
        let expected = TeamState::fold(root.clone(), &events).unwrap();
        let counts = &meta["expectedFold"];
        assert_eq!(
            expected.tasks().len() as u64,
            counts["tasks"].as_u64().unwrap()
        );
        assert_eq!(
            expected.messages().len() as u64,
            counts["messages"].as_u64().unwrap()
        );
        for check in [LineCheck::Prefix, LineCheck::Full] {
            // Through a small buffer too, so lines straddle refills.
            for capacity in [256 * 1024, 700] {
                let mut fold = StreamFold::new(root.clone());
                let (mut fast, mut parsed) = (0, 0);
                let summary = scan_selected_each(
                    path,
                    std::io::BufReader::with_capacity(capacity, &file[..]),
                    check,
                    &StreamFold::reads,
                    &mut |selected| match selected {
                        Selected::Line(line) => {
                            if fold.line(line.kind, line.text) {
                                fast += 1;
                                LineUse::Used
                            } else {
                                LineUse::NeedEvent
                            }
                        }
                        Selected::Event(event) => {
                            parsed += 1;
                            fold.event(&event);
                            LineUse::Used
                        }
                    },
                )
                .unwrap();
                assert_eq!(format!("{summary:?}"), format!("{full:?}"));
                let state = fold.finish().unwrap();
                assert_eq!(state, expected, "{profile} {check:?}");
                state.verify_indexes().unwrap();
                assert_eq!(fast, meta["teamEvents"].as_u64().unwrap(), "{profile}");
                assert_eq!(parsed, 0, "{profile}");
            }
        }
    }
}

/// `TeamState::last_task` names the task the last record committed, as committed, on both
/// paths (the line and the parsed event): `Some` only after a
/// `team/task` record of this Team that was applied; every other record, another Team's task,
/// a refused record and a line left to the event path reset it.
#[test]
fn last_task_names_the_task_the_last_applied_record_committed() {
    let events = events(valid_log());
    let mut by_line = TeamState::new(team());
    let mut by_event = TeamState::new(team());
    for event in &events {
        let line = line_of(event);
        assert_eq!(by_line.apply_line(&event.kind, &line), LineApplied::Applied);
        by_event.apply(event).unwrap();
        let expected = (event.kind == "team/task" && event.data["teamId"] == ROOT)
            .then(|| serde_json::from_value::<TaskSnapshot>(event.data["task"].clone()).unwrap());
        assert_eq!(by_line.last_task(), expected.as_ref(), "{line}");
        assert_eq!(by_event.last_task(), expected.as_ref(), "{line}");
    }
    // The log ends with a delivery: no task. A next task record names task-3; then a refused
    // record (revision 4 again is not contiguous) resets it, on both paths, and so does a
    // line the fast path leaves to the event.
    let (kind, data) = task("task-3", 4, "completed", &[]);
    let next = EventDraft::new(kind, data).into_event(Seq(98), 5);
    assert_eq!(
        by_line.apply_line(kind, &line_of(&next)),
        LineApplied::Applied
    );
    by_event.apply(&next).unwrap();
    for state in [&by_line, &by_event] {
        let task3 = state.last_task().unwrap();
        assert_eq!((task3.id.as_str(), task3.revision.get()), ("task-3", 4));
    }
    let stale = EventDraft::new(kind, next.data.clone()).into_event(Seq(99), 6);
    assert!(by_event.apply(&stale).is_err());
    assert_eq!(by_event.last_task(), None);
    assert!(by_line.last_task().is_some());
    assert_eq!(
        by_line.apply_line(kind, &line_of(&stale)),
        LineApplied::NeedEvent
    );
    assert_eq!(by_line.last_task(), None);
}
