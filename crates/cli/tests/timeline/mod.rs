//! Time travel and receipts through the real binary (issue 17 items 3–4): `troupe team show
//! --at SEQ|TIME` against independent folds of the demo's logs cut at that point, `troupe team
//! log`, the receipts of `troupe team show --json`, and bad `--at` input.
//!
//! The demo runs once for the whole file (its logs are only read) under the test target's
//! temporary directory.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use proptest::prelude::*;
use serde_json::{Value, json};
use troupe_protocol::{Event, SessionId};
use troupe_team::{ShowOptions, TeamId, TeamState};

use super::assert_bad_input;
use super::run::{stderr, stdout};

/// One finished demo: its home, the Lead's session id, and every session file's lines.
struct Demo {
    home: PathBuf,
    lead: String,
}

fn demo() -> &'static Demo {
    static DEMO: OnceLock<Demo> = OnceLock::new();
    DEMO.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("timeline-demo");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let home = root.join("home");
        let out = super::troupe(&home)
            .args(["demo", "--workspace"])
            .arg(root.join("project"))
            .assert()
            .success();
        let err = stderr(&out);
        let lead = err
            .lines()
            .find_map(|l| l.strip_prefix("session "))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no session line in {err}"))
            .to_owned();
        Demo { home, lead }
    })
}

/// The lines of a session file: (header line, [(event line, parsed event)]).
fn lines(home: &Path, id: &str) -> (String, Vec<(String, Event)>) {
    let text = std::fs::read_to_string(home.join("sessions").join(format!("{id}.jsonl"))).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap().to_owned();
    let events = lines
        .map(|l| (l.to_owned(), serde_json::from_str::<Event>(l).unwrap()))
        .collect();
    (header, events)
}

/// Every session id of the demo's home.
fn session_ids(home: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(home.join("sessions"))
        .unwrap()
        .map(|e| {
            e.unwrap()
                .file_name()
                .into_string()
                .unwrap()
                .trim_end_matches(".jsonl")
                .to_owned()
        })
        .collect();
    ids.sort();
    ids
}

/// The seq of the last event of the batch holding event `seq` (a batch is `seq..=batchLast`).
fn batch_end(events: &[(String, Event)], seq: u64) -> u64 {
    let mut end = 0;
    for (_, event) in events {
        end = match event.batch_last {
            Some(last) => last.0,
            None if event.seq.0 <= end && event.seq.0 > 0 => end,
            None => event.seq.0,
        };
        if event.seq.0 == seq {
            return end;
        }
    }
    panic!("no seq {seq}");
}

/// How many leading events of a log are its longest prefix of whole batches all at or before
/// `time`.
fn whole_batches_until(events: &[(String, Event)], time: u64) -> usize {
    let mut kept = 0;
    let mut end = 0;
    for (index, (_, event)) in events.iter().enumerate() {
        if event.time > time {
            break;
        }
        end = match event.batch_last {
            Some(last) => last.0,
            None if event.seq.0 <= end && index > 0 => end,
            None => event.seq.0,
        };
        if event.seq.0 == end {
            kept = index + 1;
        }
    }
    kept
}

/// A copy of the demo's home cut by hand: the Lead's log up to `lead_events` events, every
/// other log up to its longest prefix of whole batches at or before `time`.
fn cut_copy(demo: &Demo, lead_events: usize, time: u64, into: &Path) {
    let dir = into.join("sessions");
    std::fs::create_dir_all(&dir).unwrap();
    for id in session_ids(&demo.home) {
        let (header, events) = lines(&demo.home, &id);
        let keep = if id == demo.lead {
            lead_events
        } else {
            whole_batches_until(&events, time)
        };
        let mut text = header + "\n";
        for (line, _) in &events[..keep] {
            text.push_str(line);
            text.push('\n');
        }
        std::fs::write(dir.join(format!("{id}.jsonl")), text).unwrap();
    }
}

/// `team show --json` (with `--at`), without its `ledger` and its tasks' `stalled`: the
/// ledger is of the whole logs and a stall is judged at "now" against who holds a session
/// now, so both are shown without `--at` only (neither is folded up to a past point).
fn show_json(home: &Path, lead: &str, at: Option<&str>) -> Value {
    let mut cmd = super::troupe(home);
    cmd.args(["team", "show", lead, "--json"]);
    if let Some(at) = at {
        cmd.args(["--at", at]);
    }
    let out = cmd.assert().success();
    let mut shown: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let ledger = shown.as_object_mut().unwrap().remove("ledger");
    assert_eq!(
        ledger.is_some(),
        at.is_none(),
        "the ledger without --at only"
    );
    for task in shown["tasks"].as_array_mut().unwrap() {
        let stalled = task.as_object_mut().unwrap().remove("stalled");
        assert!(
            stalled.is_none() || at.is_none(),
            "a stall without --at only: {stalled:?}"
        );
    }
    shown
}

/// `team show --at` minus its `at`, against `team show` of the hand-cut copy, and the roster,
/// board and pending mail against the Team crate's own fold of the Lead's prefix.
fn check_point(demo: &Demo, at: &str, lead_events: usize, time: u64) {
    let mut shown = show_json(&demo.home, &demo.lead, Some(at));
    let point = shown.as_object_mut().unwrap().remove("at").unwrap();
    let last = lead_events.checked_sub(1).map(|n| n as u64);
    assert_eq!(point["seq"].as_u64(), last, "--at {at}: {point}");
    let copy = tempfile::tempdir().unwrap();
    cut_copy(demo, lead_events, time, copy.path());
    let expected = show_json(copy.path(), &demo.lead, None);
    assert_eq!(shown, expected, "--at {at} differs from the cut copy");

    let (_, events) = lines(&demo.home, &demo.lead);
    let team = TeamId::new(SessionId::new(&demo.lead).unwrap());
    let state = TeamState::fold(team, events[..lead_events].iter().map(|(_, e)| e)).unwrap();
    let folded = serde_json::to_value(state.show(&ShowOptions::default())).unwrap();
    let names = |v: &Value| -> Vec<(String, String)> {
        v["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["name"].as_str().unwrap().to_owned(),
                    m["phase"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    assert_eq!(names(&shown), names(&folded), "--at {at}: roster");
    assert_eq!(shown["tasks"], folded["tasks"], "--at {at}: board");
    assert_eq!(
        shown["pendingMessages"], folded["pendingMessages"],
        "--at {at}: pending mail"
    );
}

/// Every seq of the demo's Lead log: `--at SEQ` is the fold of the log up to the end of that
/// seq's batch (and of the teammates' logs up to its time).
#[test]
fn team_show_at_every_seq_equals_the_fold_of_that_prefix() {
    let demo = demo();
    let (_, events) = lines(&demo.home, &demo.lead);
    assert!(events.len() > 100, "{}", events.len());
    for (_, event) in &events {
        let end = batch_end(&events, event.seq.0);
        let time = events[end as usize].1.time;
        check_point(demo, &event.seq.0.to_string(), end as usize + 1, time);
    }
}

fn time_of(ms: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any time between the first point whose prefix is a Team session (its first whole
    /// batch holding an `agent/config` or a `team/…` record: before it, a copy of the prefix is
    /// "not a Team session") and the last event: `--at TIME` is the fold of every log's
    /// longest prefix of whole batches up to then.
    #[test]
    fn team_show_at_a_time_equals_the_fold_of_the_logs_up_to_then(fraction in 0.0f64..=1.0) {
        let demo = demo();
        let (_, events) = lines(&demo.home, &demo.lead);
        let marks_team = |e: &Event| e.kind == "agent/config" || e.kind.starts_with("team/");
        let first = events
            .iter()
            .map(|(_, e)| e.time)
            .find(|&t| events[..whole_batches_until(&events, t)].iter().any(|(_, e)| marks_team(e)))
            .unwrap();
        let last = events.last().unwrap().1.time;
        let time = first + ((last - first) as f64 * fraction) as u64;
        let kept = whole_batches_until(&events, time);
        let at = time_of(time);
        let mut shown = show_json(&demo.home, &demo.lead, Some(&at));
        let point = shown.as_object_mut().unwrap().remove("at").unwrap();
        prop_assert_eq!(point["time"].as_u64(), Some(time));
        let copy = tempfile::tempdir().unwrap();
        cut_copy(demo, kept, time, copy.path());
        prop_assert_eq!(shown, show_json(copy.path(), &demo.lead, None));
    }
}

#[test]
fn an_offset_time_is_the_same_point_as_its_utc_form() {
    let demo = demo();
    let (_, events) = lines(&demo.home, &demo.lead);
    let time = events[events.len() / 2].1.time;
    let utc = time_of(time);
    // 2026-…T20:01:00.123Z is 2026-…T21:31:00.123+01:30.
    let shifted = humantime::format_rfc3339_millis(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(time + 90 * 60 * 1000),
    )
    .to_string();
    let offset = format!("{}+01:30", shifted.trim_end_matches('Z'));
    assert_eq!(
        show_json(&demo.home, &demo.lead, Some(&utc)),
        show_json(&demo.home, &demo.lead, Some(&offset)),
        "{utc} vs {offset}"
    );
}

/// The demo's five messages, each queued, received, delivered and consumed, in that order of
/// their logs, and the table says the same.
#[test]
fn team_show_has_each_messages_receipts() {
    let demo = demo();
    let shown = show_json(&demo.home, &demo.lead, None);
    let messages = shown["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 5, "{shown}");
    let (_, lead_events) = lines(&demo.home, &demo.lead);
    let members: Vec<(String, String)> = shown["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_owned(),
                m["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let id_of = |name: &str| members.iter().find(|(n, _)| n == name).unwrap().1.clone();
    for message in messages {
        let id = message["id"].as_str().unwrap();
        let lead_event = |seq: &Value| -> &Event { &lead_events[seq.as_u64().unwrap() as usize].1 };
        // Queued and delivered: the Lead log's records of this message.
        let queued = lead_event(&message["queued"]["seq"]);
        assert_eq!(queued.kind, "team/message/queued");
        assert_eq!(queued.data["message"]["id"], id);
        assert_eq!(message["queued"]["time"], queued.time);
        let delivered = lead_event(&message["delivered"]["seq"]);
        assert_eq!(delivered.kind, "team/message/delivered");
        assert_eq!(delivered.data["messageId"], id);
        // Received and consumed: the target's log.
        let target = id_of(message["targetName"].as_str().unwrap());
        let (_, target_events) = lines(&demo.home, &target);
        let target_event =
            |seq: &Value| -> &Event { &target_events[seq.as_u64().unwrap() as usize].1 };
        let received = target_event(&message["received"]["seq"]);
        assert_eq!(received.kind, "agent/inbox/spliced");
        assert!(
            received.data["inserted"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["id"] == id),
            "{message}"
        );
        let consumed = target_event(&message["consumed"]["seq"]);
        assert_eq!(consumed.kind, "user/message");
        assert_eq!(consumed.data["id"], id);
        let turn = target_events[..consumed.seq.0 as usize]
            .iter()
            .rev()
            .find(|(_, e)| e.kind == "turn/start")
            .unwrap();
        assert_eq!(
            message["consumed"]["turn"], turn.1.data["turn"],
            "{message}"
        );
        assert!(received.seq < consumed.seq, "{message}");
        assert!(queued.seq < delivered.seq, "{message}");
    }
    // The first message: beta's wakeup to the Lead, claimed by the Lead's second turn.
    assert_eq!(
        (
            &messages[0]["senderName"],
            &messages[0]["targetName"],
            &messages[0]["delivery"],
            &messages[0]["consumed"]["turn"]
        ),
        (&json!("beta"), &json!("lead"), &json!("wakeup"), &json!(2))
    );
    // The table: one row per message, with the same seqs.
    let out = super::troupe(&demo.home)
        .args(["team", "show", &demo.lead])
        .assert()
        .success();
    let text = stdout(&out);
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("messages ("))
        // The ledger section follows, after an empty line.
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(table[1].split_whitespace().eq([
        "QUEUED",
        "FROM",
        "TO",
        "DELIVERY",
        "RECEIVED",
        "DELIVERED",
        "CONSUMED"
    ]));
    let first = format!(
        "seq {}   beta   lead  wakeup    seq {}",
        messages[0]["queued"]["seq"], messages[0]["received"]["seq"]
    );
    assert!(table[2].contains(&first), "{text}");
    assert!(
        table[2].ends_with(&format!("turn 2 (seq {})", messages[0]["consumed"]["seq"])),
        "{text}"
    );
    assert_eq!(table.len(), 2 + messages.len(), "{text}");
}

/// Before its claim, a message is received but not consumed; before its acknowledgement, not
/// delivered.
#[test]
fn team_show_at_shows_a_message_before_its_claim() {
    let demo = demo();
    let whole = show_json(&demo.home, &demo.lead, None);
    let first = &whole["messages"][0];
    let delivered = first["delivered"]["seq"].as_u64().unwrap();
    let consumed = first["consumed"]["seq"].as_u64().unwrap();
    // The latest point before its claim: a point inside a batch is the batch's end, so walk
    // back from the claim until the cut ends before it.
    let (cut, at) = (1..consumed)
        .rev()
        .map(|p| {
            let at = show_json(&demo.home, &demo.lead, Some(&p.to_string()));
            (at["at"]["seq"].as_u64().unwrap(), at)
        })
        .find(|(cut, _)| *cut < consumed)
        .unwrap();
    assert_eq!(at["messages"][0]["consumed"], Value::Null, "{at}");
    let received = first["received"]["seq"].as_u64().unwrap();
    if received <= cut {
        assert_eq!(at["messages"][0]["received"], first["received"], "{at}");
    }
    // Its `delivered` record may come before or after the claim: a message to the Lead lands
    // in the Lead's own inbox, which its turn can read before the serializer records it.
    let expected = if delivered <= cut {
        first["delivered"].clone()
    } else {
        Value::Null
    };
    assert_eq!(at["messages"][0]["delivered"], expected, "{at}");
    let queued = first["queued"]["seq"].as_u64().unwrap();
    let at = show_json(&demo.home, &demo.lead, Some(&queued.to_string()));
    assert_eq!(at["messages"][0]["delivered"], Value::Null, "{at}");
    assert_eq!(at["pendingMessages"].as_array().unwrap().len(), 1, "{at}");
    // The table of a past point says where it is.
    let out = super::troupe(&demo.home)
        .args(["team", "show", &demo.lead, "--at", &queued.to_string()])
        .assert()
        .success();
    let text = stdout(&out);
    assert!(
        text.lines()
            .next()
            .unwrap()
            .contains(&format!(" at seq {queued} (")),
        "{text}"
    );
}

/// `team log`: one line per Team event, in seq order, each naming what happened; `--json`
/// one object per line with the same seqs, each a seq `--at` accepts.
#[test]
fn team_log_prints_one_line_per_team_event() {
    let demo = demo();
    let (_, events) = lines(&demo.home, &demo.lead);
    let team_seqs: Vec<u64> = events
        .iter()
        .filter(|(_, e)| e.kind.starts_with("team/"))
        .map(|(_, e)| e.seq.0)
        .collect();
    let out = super::troupe(&demo.home)
        .args(["team", "log", &demo.lead, "--json"])
        .assert()
        .success();
    let entries: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seqs: Vec<u64> = entries.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, team_seqs);
    for entry in &entries {
        let event = &events[entry["seq"].as_u64().unwrap() as usize].1;
        assert_eq!(entry["type"], event.kind.as_str());
        assert_eq!(entry["time"], event.time);
        assert!(!entry["text"].as_str().unwrap().contains('\n'), "{entry}");
    }
    let texts: Vec<&str> = entries
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts[0],
        "task-1 created: \"Fix the off-by-one in top_words\""
    );
    assert!(texts.contains(&"teammate beta is active"), "{texts:?}");
    assert!(
        texts.contains(&"task-1 rev 2: pending → in_progress, owner alpha"),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("beta sent lead a wakeup message (team-message-")),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("lead received the message from beta (")),
        "{texts:?}"
    );
    let out = super::troupe(&demo.home)
        .args(["team", "log", &demo.lead])
        .assert()
        .success();
    let human = stdout(&out);
    let lines: Vec<&str> = human.lines().collect();
    assert_eq!(lines.len(), entries.len(), "{human}");
    for (line, entry) in lines.iter().zip(&entries) {
        let mut parts = line.split_whitespace();
        assert_eq!(
            parts.next(),
            Some(entry["seq"].to_string().as_str()),
            "{line}"
        );
        assert_eq!(
            parts.next(),
            Some(time_of(entry["time"].as_u64().unwrap()).as_str())
        );
        assert!(line.ends_with(entry["text"].as_str().unwrap()), "{line}");
    }
}

#[test]
fn a_point_outside_the_log_or_a_malformed_one_is_bad_input() {
    let demo = demo();
    let (header, events) = lines(&demo.home, &demo.lead);
    let last = events.last().unwrap().1.seq.0;
    let lead = demo.lead.as_str();
    let beyond = (last + 1).to_string();
    assert_bad_input(
        &demo.home,
        &["team", "show", lead, "--at", &beyond],
        &format!(
            "--at {beyond} is beyond the log of session {lead}: its last event is seq {last} ("
        ),
    );
    let later = time_of(events.last().unwrap().1.time + 1);
    assert_bad_input(
        &demo.home,
        &["team", "show", lead, "--at", &later],
        &format!("its last event is seq {last} ("),
    );
    let created: u64 = serde_json::from_str::<Value>(&header).unwrap()["createdAt"]
        .as_u64()
        .unwrap();
    assert_bad_input(
        &demo.home,
        &["team", "show", lead, "--at", &time_of(created - 1)],
        &format!("is before session {lead} was created ("),
    );
    // One line naming the accepted forms, without the time parser's own words.
    for malformed in [
        "yesterday",
        "garbage",
        "2026-12-01",
        "2026-12-01 20:00:00",
        "12x",
        "",
    ] {
        let err = assert_bad_input(
            &demo.home,
            &["team", "show", lead, "--json", "--at", malformed],
            &format!(
                "invalid value '{malformed}' for '--at <SEQ|TIME>': neither a seq nor a time: \
                 pass a seq (like 17) or an RFC 3339 date and time with its offset (like \
                 2026-12-01T19:47:25Z, 2026-12-01T19:47:25.250Z or 2026-12-01T20:47:25+01:00)"
            ),
        );
        assert!(!err.contains("component"), "{err}");
        assert!(!err.contains("could not be parsed"), "{err}");
    }
    // A negative seq is a bad value (named), not an unknown flag.
    assert_bad_input(
        &demo.home,
        &["team", "show", lead, "--at", "-1"],
        "-1 is negative: a seq counts from 0",
    );
    // The last seq itself is in the log.
    let at = show_json(&demo.home, lead, Some(&last.to_string()));
    assert_eq!(at["at"]["seq"], last);
    let mut whole = show_json(&demo.home, lead, None);
    let mut at = at;
    at.as_object_mut().unwrap().remove("at");
    whole.as_object_mut().unwrap().remove("at");
    assert_eq!(at, whole);
}

/// What `troupe team show` takes from the teammates' logs — the models, the write radar, the
/// receipts, the stall check and the ledger — is the same through the one scan of each log
/// (`LeadLog::read_teammates`) as through each consumer's own reads of it
/// (`LeadLog::read_teammates_alone`, the reads before the one scan), on the demo's logs: whole
/// and at every seq of the Lead log (`--at`: the teammates' logs cut at its time).
#[test]
fn the_one_scan_of_each_teammate_log_equals_the_consumers_own_reads() {
    use troupe_journal::{At, Journal};
    use troupe_runtime::{Cut, LeadLog, LeadRead};
    let demo = demo();
    let journal = Journal::open_home(&demo.home);
    let id = SessionId::new(demo.lead.clone()).unwrap();
    let parts = |lead: &LeadLog, one: bool| {
        let now = lead.cut().is_none();
        let logs = if one {
            lead.read_teammates(&journal, now)
        } else {
            lead.read_teammates_alone(&journal, now)
        };
        let after = troupe_team::StallAfter::from_ms(1).unwrap();
        let check = now.then(|| lead.stall_check_in(&logs, u64::MAX / 2, after, &|_| Some(false)));
        let view = lead.show_full_in(&journal, &logs, true, check.clone());
        let ledger = now.then(|| lead.ledger_in(&logs, &troupe_session::ledger::Prices::builtin()));
        format!(
            "{}\n{check:?}\n{}",
            serde_json::to_string(&view).unwrap(),
            serde_json::to_string(&ledger).unwrap()
        )
    };
    let whole = LeadLog::read(&journal, &id, LeadRead::TeamAndMail).unwrap();
    let shown = parts(&whole, true);
    assert_eq!(shown, parts(&whole, false));
    // The demo's teammates have receipts, models and usage to compare.
    assert!(shown.contains("\"consumed\":{"), "{shown}");
    let (_, events) = lines(&demo.home, &demo.lead);
    for (_, event) in &events {
        let cut = Cut::resolve(&journal, &id, At::Seq(event.seq)).unwrap();
        let at = LeadLog::read_at(&journal, &id, LeadRead::TeamAndMail, Some(cut)).unwrap();
        assert_eq!(parts(&at, true), parts(&at, false), "at seq {}", event.seq);
    }
}

/// A teammate log damaged in its middle is not shown as if whole: `team show` (exit 0, a
/// view) names the member and the damage once on stderr and in its row's diagnostics (text and
/// `--json`), and leaves the file as it was; `team verify` fails on it.
#[test]
fn a_damaged_teammate_log_is_named_by_team_show() {
    let demo = demo();
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("timeline-damaged");
    let _ = std::fs::remove_dir_all(&root);
    let home = root.join("home");
    std::fs::create_dir_all(home.join("sessions")).unwrap();
    for id in session_ids(&demo.home) {
        let name = format!("{id}.jsonl");
        std::fs::copy(
            demo.home.join("sessions").join(&name),
            home.join("sessions").join(&name),
        )
        .unwrap();
    }
    let show = show_json(&home, &demo.lead, None);
    let beta = show["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "beta")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = home.join("sessions").join(format!("{beta}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    // Damage one of beta's answers past its first few: its ledger row counts the answers
    // before it (the usage read stops there), not zero.
    let at = (20..lines.len())
        .find(|&i| lines[i].contains("\"type\":\"assistant/message\""))
        .unwrap();
    let answers_before = lines[1..at]
        .iter()
        .filter(|l| l.contains("\"type\":\"assistant/message\""))
        .count();
    assert!(answers_before > 0);
    let cut = lines[at][..lines[at].len() / 2].to_owned();
    lines[at] = &cut;
    let damaged = format!("{}\n", lines.join("\n"));
    std::fs::write(&path, &damaged).unwrap();

    for json in [false, true] {
        let mut cmd = super::troupe(&home);
        cmd.args(["team", "show", &demo.lead]);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.assert().success();
        let err = stderr(&out);
        let notes: Vec<&str> = err.lines().filter(|l| l.contains("beta:")).collect();
        assert_eq!(notes.len(), 1, "{err}");
        assert!(
            notes[0].starts_with("troupe: note: beta: its log cannot be read in full (")
                && notes[0].contains("corrupt session file")
                && notes[0].contains(&format!("line {}", at + 1)),
            "{err}"
        );
        let shown = stdout(&out);
        if json {
            let view: Value = serde_json::from_str(&shown).unwrap();
            let row = view["members"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["name"] == "beta")
                .unwrap()
                .clone();
            let ledger = view["ledger"]["members"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["name"] == "beta")
                .unwrap()
                .clone();
            assert_eq!(ledger["modelCalls"], answers_before, "{ledger}");
            assert!(
                row["diagnostics"][0]
                    .as_str()
                    .unwrap()
                    .contains("its log cannot be read in full"),
                "{row}"
            );
        } else {
            assert!(
                shown.contains("! its log cannot be read in full"),
                "{shown}"
            );
        }
    }
    assert_eq!(std::fs::read_to_string(&path).unwrap(), damaged);
    super::troupe(&home)
        .args(["team", "verify", &demo.lead])
        .assert()
        .code(1);
}
