//! The raw fold (`fold_raw`, `apply_raw`, `apply_raw_data`: payloads as JSON text) against the
//! `Value` fold: the same state and the very same errors, for hand-written logs, for payload
//! texts a `Value` cannot tell apart (key order, repeated keys, escapes, array forms), for
//! random mutations of valid payloads, and for the benchmark generator's logs.

use proptest::prelude::*;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use troupe_protocol::{Event, Seq, SessionId};
use troupe_team::{FoldError, TeamId, TeamState};

use super::support::*;

fn raw(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned()).unwrap()
}

/// Folds `events` both ways and asserts they agree; returns the outcome.
fn fold_both(root: &TeamId, events: &[Event]) -> Result<TeamState, String> {
    let parsed = TeamState::fold(root.clone(), events);
    let texts: Vec<(Seq, &str, Box<RawValue>)> = events
        .iter()
        .map(|e| (e.seq, e.kind.as_str(), raw(&e.data.to_string())))
        .collect();
    let raw_folded =
        TeamState::fold_raw(root.clone(), texts.iter().map(|(s, k, d)| (*s, *k, &**d)));
    match (parsed, raw_folded) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a, b);
            b.verify_indexes().unwrap();
            Ok(b)
        }
        (Err(a), Err(b)) => {
            assert_eq!(a, b);
            Err(b.to_string())
        }
        (a, b) => panic!("the folds disagree: {a:?} vs {b:?}"),
    }
}

/// Applies `text` as a `kind` payload to a copy of `base` both ways and asserts they agree.
fn apply_both(base: &TeamState, kind: &str, text: &str) -> Result<TeamState, FoldError> {
    let value: Value = serde_json::from_str(text).unwrap();
    let mut parsed = base.clone();
    let a = parsed.apply_data(kind, &value);
    let mut from_text = base.clone();
    let b = from_text.apply_raw_data(kind, &raw(text));
    assert_eq!(a, b, "{kind} {text}");
    assert_eq!(parsed, from_text, "{kind} {text}");
    from_text.verify_indexes().unwrap();
    // A refused event leaves the state unchanged.
    if b.is_err() {
        assert_eq!(&from_text, base);
    }
    b.map(|()| from_text)
}

fn logs() -> Vec<Vec<(&'static str, Value)>> {
    let mut owner = task("task-1", 2, "in_progress", &[]);
    owner.1["task"]["ownerId"] = json!("w1");
    let mut failed = member("w2", "worker-b", "failed");
    failed.1["member"]["error"] = json!("spawn failed");
    let valid = vec![
        member_in(ANCESTOR, "a1", "worker-a", "provisioning"),
        ("turn/start", json!({"turn": 1})),
        ("turn/start", json!([1, 2, {"any": "shape"}])),
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
    ];
    let mut other_version = task("task-3", 1, "pending", &[]);
    other_version.1["version"] = json!(2);
    let mut ancestor_v2 = task_in(ANCESTOR, "task-3", 1, "pending", &[]);
    ancestor_v2.1["version"] = json!(7);
    ancestor_v2.1["task"] = json!("only the selector is read");
    let mut bad_subject = task_in(ANCESTOR, "task-3", 1, "pending", &[]);
    bad_subject.1["task"]["subject"] = json!(42);
    let mut extra = member("w3", "worker-c", "provisioning");
    extra.1["extra"] = json!(true);
    let mut bad_content = queued("m3", "w1");
    bad_content.1["message"]["content"] = json!([{"type": "image"}]);
    let mut huge_version = task("task-3", 1, "pending", &[]);
    huge_version.1["version"] = json!(9_007_199_254_740_992_u64);
    let mut float_version = task("task-3", 1, "pending", &[]);
    float_version.1["version"] = json!(1.0);
    let mut bad_task_id = task("task-3", 1, "pending", &[]);
    bad_task_id.1["task"]["id"] = json!("task-99999999999999999999");
    let mut null_owner = task("task-3", 1, "pending", &[]);
    null_owner.1["task"]["ownerId"] = Value::Null;
    let mut bad_name = member("w3", "Lead", "provisioning");
    bad_name.1["member"]["name"] = json!("lead");
    let mut logs = vec![valid.clone()];
    for bad in [
        other_version,
        ancestor_v2,
        bad_subject,
        extra,
        bad_content,
        huge_version,
        float_version,
        bad_task_id,
        null_owner,
        bad_name,
        ("team/task", json!([1])),
        ("team/task", json!(null)),
        ("team/member", json!({"version": 1, "teamId": ""})),
        ("team/member", json!({"version": 1, "teamId": 5})),
        (
            "team/message/delivered",
            json!({"version": 1, "teamId": ROOT}),
        ),
        member("w1", "worker-a", "provisioning"),
        member("w9", "worker-a", "provisioning"),
        task("task-1", 5, "pending", &[]),
        task("task-4", 2, "pending", &[]),
        task("task-4", 1, "pending", &["task-4"]),
        task("task-4", 1, "pending", &["task-2"]),
        task("task-1", 3, "pending", &["task-1"]),
        queued("m1", "w1"),
        delivered("m1", "w1"),
        delivered("m2", "w2"),
        delivered("m9", "w1"),
    ] {
        let mut log = valid.clone();
        log.push(bad);
        log.push(task("task-5", 1, "pending", &[]));
        logs.push(log);
    }
    logs
}

#[test]
fn hand_written_logs_fold_the_same_raw_and_parsed() {
    let (mut ok, mut refused) = (0, 0);
    for log in logs() {
        match fold_both(&team(), &events(log)) {
            Ok(_) => ok += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(ok >= 2 && refused >= 20, "{ok} folded, {refused} refused");
}

#[test]
fn apply_raw_locates_the_refusal_like_fold() {
    let log = events(vec![
        member("w1", "worker-a", "provisioning"),
        member("w1", "worker-a", "provisioning"),
    ]);
    let expected = TeamState::fold(team(), &log).unwrap_err();
    let mut state = TeamState::new(team());
    let data: Vec<Box<RawValue>> = log.iter().map(|e| raw(&e.data.to_string())).collect();
    state.apply_raw(log[0].seq, &log[0].kind, &data[0]).unwrap();
    let err = state
        .apply_raw(log[1].seq, &log[1].kind, &data[1])
        .unwrap_err();
    assert_eq!(err, expected);
    assert_eq!(err.seq, Seq(1));
    assert_eq!(state.members().len(), 1);
}

/// Payload texts that differ only where a `Value` cannot see it, or where the strict decoder's
/// fast path must hand over to the `Value` path.
#[test]
fn payload_texts_a_value_cannot_tell_apart() {
    let mut base = TeamState::new(team());
    for (kind, data) in [
        member("w1", "worker-a", "provisioning"),
        task("task-1", 1, "pending", &[]),
        queued("m1", "w1"),
    ] {
        base.apply_data(kind, &data).unwrap();
    }
    let task2 = r#""id":"task-2","revision":1,"subject":"s","description":"d","status":"pending","blockedBy":["task-1"],"writeScopes":[]"#;
    let cases: Vec<(&str, String)> = vec![
        // Valid, in another key order, with whitespace and escapes.
        (
            "team/task",
            format!(r#"{{"task":{{{task2}}},"teamId":"{ROOT}","version":1}}"#),
        ),
        (
            "team/task",
            format!(" {{ \"version\" : 1 ,\n \"teamId\" : \"{ROOT}\" , \"task\" : {{{task2}}} }} "),
        ),
        (
            "team/task",
            format!(r#"{{"\u0076ersion":1,"teamId":"team-r\u006fot","task":{{{task2}}}}}"#),
        ),
        // Repeated keys: a `Value` keeps the last one; the fast path refuses and hands over.
        (
            "team/task",
            format!(r#"{{"version":1,"version":1,"teamId":"{ROOT}","task":{{{task2}}}}}"#),
        ),
        (
            "team/task",
            format!(r#"{{"version":2,"version":1,"teamId":"{ROOT}","task":{{{task2}}}}}"#),
        ),
        (
            "team/task",
            format!(
                r#"{{"version":1,"teamId":"{ROOT}","task":{{{task2}}},"task":{{"id":"task-1"}}}}"#
            ),
        ),
        (
            "team/task",
            format!(r#"{{"version":1,"teamId":"{ROOT}","task":{{"id":"task-1",{task2}}}}}"#),
        ),
        (
            "team/task",
            format!(
                r#"{{"version":1,"teamId":"{ANCESTOR}","teamId":"{ROOT}","task":{{{task2}}}}}"#
            ),
        ),
        // Nested records in array (sequence) form.
        (
            "team/task",
            format!(
                r#"{{"version":1,"teamId":"{ROOT}","task":["task-2",1,"s","d","pending","w1",["task-1"],[]]}}"#
            ),
        ),
        (
            "team/task",
            format!(r#"{{"version":1,"teamId":"{ROOT}","task":["task-2",1,"s","d","pending"]}}"#),
        ),
        (
            "team/member",
            format!(
                r#"{{"version":1,"teamId":"{ROOT}","member":["w2","worker-b","d","spawn","fresh","provisioning"]}}"#
            ),
        ),
        (
            "team/member",
            format!(r#"[1,"{ROOT}",["w2","worker-b","d","spawn","fresh","provisioning"]]"#),
        ),
        // Numbers and types at the selector.
        (
            "team/task",
            format!(r#"{{"version":1.0,"teamId":"{ROOT}","task":{{{task2}}}}}"#),
        ),
        (
            "team/task",
            format!(r#"{{"version":1e0,"teamId":"{ROOT}","task":{{{task2}}}}}"#),
        ),
        (
            "team/task",
            format!(r#"{{"version":"1","teamId":"{ROOT}","task":{{{task2}}}}}"#),
        ),
        (
            "team/task",
            format!(r#"{{"version":-0,"teamId":"{ROOT}","task":{{{task2}}}}}"#),
        ),
        ("team/task", format!(r#"{{"version":3,"teamId":"{ROOT}"}}"#)),
        (
            "team/task",
            format!(r#"{{"version":3,"teamId":"{ANCESTOR}","junk":[]}}"#),
        ),
        (
            "team/task",
            format!(r#"{{"teamId":"{ROOT}","task":{{{task2}}}}}"#),
        ),
        (
            "team/task",
            format!(r#"{{"version":1,"teamId":"","task":{{{task2}}}}}"#),
        ),
        (
            "team/task",
            format!(r#"{{"version":1,"teamId":"","teamId":"{ROOT}","task":{{{task2}}}}}"#),
        ),
        // Other types and shapes.
        (
            "team/message/delivered",
            format!(r#"{{"version":1,"teamId":"{ROOT}","messageId":"m1","targetId":"w1"}}"#),
        ),
        (
            "team/message/delivered",
            format!(
                r#"{{"version":1,"teamId":"{ROOT}","messageId":"m1","targetId":"w1","targetId":"w2"}}"#
            ),
        ),
        (
            "team/message/queued",
            format!(
                r#"{{"version":1,"teamId":"{ROOT}","message":{{"id":"m2","senderId":"{ROOT}","senderName":"lead","targetId":"w1","delivery":"wakeup","content":[{{"type":"text","text":"a","text":"b"}}]}}}}"#
            ),
        ),
        (
            "team/message/queued",
            format!(
                r#"{{"version":1,"teamId":"{ROOT}","message":{{"id":"m2","senderId":"{ROOT}","senderName":"lead","targetId":"w1","delivery":"wakeup","content":[{{"type":"text"}}]}}}}"#
            ),
        ),
        ("team/member", "12".to_owned()),
        ("team/member", "\"text\"".to_owned()),
        ("turn/start", "[1,2,3]".to_owned()),
        (
            "plugin/unknown",
            r#"{"version":1,"teamId":"team-root"}"#.to_owned(),
        ),
    ];
    let mut outcomes = Vec::new();
    for (kind, text) in &cases {
        outcomes.push(apply_both(&base, kind, text).is_ok());
    }
    assert!(
        outcomes.iter().filter(|ok| **ok).count() >= 8,
        "{outcomes:?}"
    );
    assert!(
        outcomes.iter().filter(|ok| !**ok).count() >= 8,
        "{outcomes:?}"
    );
}

#[test]
fn non_team_payloads_are_not_read() {
    let mut state = TeamState::new(team());
    // Deeper than a `Value` can hold: never parsed for a non-Team type...
    let deep = raw(&format!("{}1{}", "[".repeat(300), "]".repeat(300)));
    state.apply_raw_data("turn/start", &deep).unwrap();
    state.apply_raw_data("plugin/unknown", &deep).unwrap();
    assert_eq!(state, TeamState::new(team()));
    // ... and an invalid payload for a Team type.
    let err = state.apply_raw_data("team/task", &deep).unwrap_err();
    assert!(
        err.to_string()
            .contains("persisted Agent Teams team/task payload is invalid"),
        "{err}"
    );
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
    "9007199254740992",
    "\"\"",
    "\"x\"",
    "\"team-root\"",
    "\"task-1\"",
    "\"w1\"",
    "\"pending\"",
    "\"deleted\"",
    "\"active\"",
    "null",
    "true",
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
        _ => {}
    }
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

fn candidates() -> Vec<(&'static str, Value)> {
    let mut owned = task("task-1", 2, "in_progress", &[]);
    owned.1["task"]["ownerId"] = json!("w1");
    let mut failed = member("w2", "worker-b", "failed");
    failed.1["member"]["error"] = json!("no");
    vec![
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
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn mutated_payloads_apply_the_same_raw_and_parsed(
        which in 0..10usize,
        ops in prop::collection::vec((any::<u8>(), any::<u64>(), any::<u64>()), 0..4),
    ) {
        let base = base_state();
        let (kind, data) = candidates().swap_remove(which);
        let mut tree = Json::of(&data);
        for (op, pick, pick2) in ops {
            mutate(&mut tree, op, pick, pick2);
        }
        let _ = apply_both(&base, kind, &tree.render());
    }
}

#[test]
fn generated_lead_logs_fold_the_same_raw_and_parsed() {
    let script = std::env::var_os("TROUPE_GEN_LEAD_LOG")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../../shared/bench/gen-lead-log.mjs")
        });
    let node_ok = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !node_ok || !script.is_file() {
        eprintln!("skipping: node or gen-lead-log.mjs not available");
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("team-raw-test");
    std::fs::create_dir_all(&dir).unwrap();
    for profile in ["capped", "growing"] {
        let out = dir.join(format!("lead-{profile}-3000.jsonl"));
        let status = std::process::Command::new("node")
            .arg(&script)
            .args(["--team-events", "3000", "--profile", profile, "--seed", "2"])
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            status.status.success(),
            "{}",
            String::from_utf8_lossy(&status.stderr)
        );
        let meta: Value = serde_json::from_str(
            &std::fs::read_to_string(format!("{}.meta.json", out.display())).unwrap(),
        )
        .unwrap();
        let root = TeamId::new(SessionId::new(meta["rootId"].as_str().unwrap()).unwrap());
        let text = std::fs::read_to_string(&out).unwrap();
        let events: Vec<Event> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let whole = fold_both(&root, &events).unwrap();

        // Through the journal's raw scan of the file's own lines (behind a session header).
        let mut header = serde_json::to_vec(&troupe_protocol::SessionHeader::new(
            root.lead_id().clone(),
            1,
        ))
        .unwrap();
        header.push(b'\n');
        let mut state = TeamState::new(root.clone());
        let summary = troupe_journal::scan_raw_each(
            std::path::Path::new("lead.jsonl"),
            std::io::Read::chain(&header[..], text.as_bytes()),
            &mut |e| state.apply_raw(e.seq, e.kind, e.data).unwrap(),
        )
        .unwrap();
        assert_eq!(summary.next_seq.0, events.len() as u64);
        assert_eq!(state, whole, "{profile}");
        state.verify_indexes().unwrap();
    }
}
