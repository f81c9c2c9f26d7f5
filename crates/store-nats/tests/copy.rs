//! `Journal::copy_to` between the two stores (DESIGN §7, `troupe store copy`): line for line
//! both ways, the copy of a copy byte-identical to the original file, a copy run again leaves
//! what is there, other lines under the same id are refused, and a copy cut part-way is no
//! session on the target and is replaced whole by the next copy.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

mod support;

use serde_json::json;
use support::{Fixture, Kind};
use troupe_journal::{CopyError, CopyOutcome, Journal};
use troupe_protocol::{ErrorCode, EventDraft, Seq, SessionHeader, SessionId};

fn id(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}

/// A log with batches, a fork, an unknown ignorable event and lines written by another writer
/// (other member order, spaces, a number form serde would not write back the same way).
fn write_sessions(files: &Fixture) -> Vec<SessionId> {
    let journal = &files.journal;
    let w = journal
        .create(SessionHeader::new(id("lead"), 1_764_000_000_000).with_cwd("/w"))
        .unwrap();
    w.append_batch(vec![
        EventDraft::new("turn/start", json!({"turn": 1})),
        EventDraft::new("user/message", json!({"text": "héllo \u{1F600}"})),
    ])
    .unwrap();
    w.append(EventDraft::new("turn/end", json!({"turn": 1})))
        .unwrap();
    w.flush_blocking().unwrap();
    drop(w);
    files.append_raw(
        "lead",
        &[
            br#"{"type":"plugin/future","seq":3,"time":5,"ignorable":true,"data":{"x":1.50}}"#
                .to_vec(),
            br#"{ "seq" : 4 , "time" : 6 , "type" : "assistant/chunk" , "data" : {"z":1,"a":2} }"#
                .to_vec(),
        ],
    );
    let fork = journal.fork(&id("lead"), None, id("fork")).unwrap();
    fork.append(EventDraft::new("turn/start", json!({"turn": 2})))
        .unwrap();
    fork.flush_blocking().unwrap();
    drop(fork);
    vec![id("lead"), id("fork")]
}

fn copy_all(from: &Journal, to: &Journal, ids: &[SessionId]) -> Vec<CopyOutcome> {
    ids.iter().map(|i| from.copy_to(i, to).unwrap()).collect()
}

#[test]
fn files_to_nats_to_files_is_byte_identical_and_nats_to_files_to_nats_too() {
    let files = Fixture::files();
    let Some(nats) = Fixture::nats() else {
        return;
    };
    let ids = write_sessions(&files);
    let dir = files.dir().unwrap();
    let originals: Vec<Vec<u8>> = ids
        .iter()
        .map(|i| std::fs::read(dir.join(format!("{i}.jsonl"))).unwrap())
        .collect();

    let outcomes = copy_all(&files.journal, &nats.journal, &ids);
    for (outcome, original) in outcomes.iter().zip(&originals) {
        assert!(
            matches!(outcome, CopyOutcome::Copied { bytes, torn_tail: None, .. } if *bytes == original.len() as u64),
            "{outcome:?}"
        );
    }
    // On NATS: one message per line, each payload exactly the file's line.
    for (i, original) in ids.iter().zip(&originals) {
        let lines: Vec<Vec<u8>> = original
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        assert_eq!(nats.raw_lines(i.as_str()), lines);
        assert_eq!(
            nats.journal.read(i).unwrap().events,
            files.journal.read(i).unwrap().events
        );
    }

    let back = Fixture::files();
    copy_all(&nats.journal, &back.journal, &ids);
    let back_dir = back.dir().unwrap();
    for (i, original) in ids.iter().zip(&originals) {
        assert_eq!(
            &std::fs::read(back_dir.join(format!("{i}.jsonl"))).unwrap(),
            original,
            "{i}"
        );
    }

    // And the other way round, from a session written on NATS by the writer.
    let Some(second) = Fixture::nats() else {
        return;
    };
    let w = nats
        .journal
        .create(SessionHeader::new(id("live"), 7))
        .unwrap();
    for n in 0..5u64 {
        let drafts = (0..=n % 3)
            .map(|k| EventDraft::new("assistant/chunk", json!({"n": n, "k": k})))
            .collect();
        w.append_batch(drafts).unwrap();
        w.flush_blocking().unwrap();
    }
    drop(w);
    let on_files = Fixture::files();
    nats.journal
        .copy_to(&id("live"), &on_files.journal)
        .unwrap();
    on_files
        .journal
        .copy_to(&id("live"), &second.journal)
        .unwrap();
    assert_eq!(second.raw_lines("live"), nats.raw_lines("live"));
    assert_eq!(
        second.journal.read_image(&id("live")).unwrap().bytes(),
        std::fs::read(on_files.dir().unwrap().join("live.jsonl")).unwrap()
    );
}

#[test]
fn a_copy_run_again_leaves_the_target_and_other_lines_are_refused() {
    let files = Fixture::files();
    let Some(nats) = Fixture::nats() else {
        return;
    };
    let ids = write_sessions(&files);
    copy_all(&files.journal, &nats.journal, &ids);
    let before = nats.raw_lines("lead");
    for outcome in copy_all(&files.journal, &nats.journal, &ids) {
        assert!(
            matches!(outcome, CopyOutcome::AlreadyThere { .. }),
            "{outcome:?}"
        );
    }
    // The source grew: the target holds other lines now, and is left alone.
    files.append_raw(
        "lead",
        &[br#"{"seq":5,"time":9,"type":"assistant/chunk","data":{}}"#.to_vec()],
    );
    let err = files
        .journal
        .copy_to(&id("lead"), &nats.journal)
        .unwrap_err();
    assert!(matches!(err, CopyError::Differs { .. }), "{err}");
    assert_eq!(err.code(), "SESSION_ALREADY_EXISTS");
    assert!(err.to_string().contains("nothing was written"), "{err}");
    assert_eq!(nats.raw_lines("lead"), before);
    // A session missing on the source: nothing is written.
    let err = files
        .journal
        .copy_to(&id("none"), &nats.journal)
        .unwrap_err();
    assert!(matches!(err, CopyError::Source(_)), "{err}");
    assert_eq!(err.code(), "SESSION_NOT_FOUND");
    assert!(nats.raw_lines("none").is_empty());
}

#[test]
fn an_unfinished_write_of_the_source_is_not_copied_and_is_reported() {
    let files = Fixture::files();
    let Some(nats) = Fixture::nats() else {
        return;
    };
    write_sessions(&files);
    let path = files.dir().unwrap().join("lead.jsonl");
    let whole = std::fs::read(&path).unwrap();
    let mut torn = whole.clone();
    torn.extend_from_slice(br#"{"seq":5,"time":9,"type":"assis"#);
    std::fs::write(&path, &torn).unwrap();
    let outcome = files.journal.copy_to(&id("lead"), &nats.journal).unwrap();
    let CopyOutcome::Copied {
        torn_tail: Some(tail),
        bytes,
        ..
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(bytes, whole.len() as u64);
    assert_eq!(tail.offset, whole.len() as u64);
    assert_eq!(
        nats.journal.read_image(&id("lead")).unwrap().bytes(),
        &whole[..]
    );
}

#[test]
fn a_copy_cut_part_way_is_no_session_and_the_next_copy_stores_it_whole() {
    let files = Fixture::files();
    let Some(nats) = Fixture::nats() else {
        return;
    };
    write_sessions(&files);
    let lines = {
        let bytes = std::fs::read(files.dir().unwrap().join("lead.jsonl")).unwrap();
        bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect::<Vec<_>>()
    };
    // What an import killed after its third message leaves: the header declaring every event,
    // and two of them.
    let Kind::Nats { rt, js, .. } = &nats.kind else {
        unreachable!()
    };
    rt.block_on(async {
        let mut headers = async_nats::HeaderMap::new();
        let declared = (lines.len() - 1).to_string();
        headers.insert("Troupe-First-Events", declared.as_str());
        js.publish_with_headers("troupe.session.lead", headers, lines[0].clone().into())
            .await
            .unwrap()
            .await
            .unwrap();
        for line in &lines[1..3] {
            js.publish("troupe.session.lead", line.clone().into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    });
    // The killed copy's lease, until its TTL passes: the next copy names it.
    rt.block_on(async {
        let kv = js.get_key_value("TROUPE_LEASES").await.unwrap();
        let dead = json!({"owner": "dead-copy", "host": "gone", "pid": 4242, "since": 0});
        kv.create("lead", serde_json::to_vec(&dead).unwrap().into())
            .await
            .unwrap();
    });
    let err = files
        .journal
        .copy_to(&id("lead"), &nats.journal)
        .unwrap_err();
    assert_eq!(err.code(), "JOURNAL_LOCKED", "{err}");
    assert!(err.to_string().contains("pid 4242"), "{err}");
    rt.block_on(async {
        let kv = js.get_key_value("TROUPE_LEASES").await.unwrap();
        kv.purge("lead").await.unwrap();
    });
    for err in [
        nats.journal.read(&id("lead")).unwrap_err(),
        nats.journal.read_image(&id("lead")).unwrap_err(),
        nats.journal.header(&id("lead")).unwrap_err(),
    ] {
        assert_eq!(err.code(), "SESSION_NOT_FOUND", "{err}");
        assert!(err.to_string().contains("unfinished"), "{err}");
    }
    assert!(
        nats.journal
            .list(&mut |e| panic!("{e}"))
            .unwrap()
            .is_empty()
    );
    let outcome = files.journal.copy_to(&id("lead"), &nats.journal).unwrap();
    assert!(matches!(outcome, CopyOutcome::Copied { .. }), "{outcome:?}");
    assert_eq!(nats.raw_lines("lead"), lines);
    assert_eq!(nats.journal.read(&id("lead")).unwrap().next_seq(), Seq(5));
}

#[test]
fn a_file_copy_cut_before_its_link_leaves_only_a_staging_file_that_is_swept() {
    // The JSONL side of a cut copy: what a kill before `link(2)` leaves is a staging file of a
    // dead process, which is no session and is removed by the next write to that home.
    let Some(nats) = Fixture::nats() else {
        return;
    };
    let files = Fixture::files();
    let source = Fixture::files();
    write_sessions(&source);
    source.journal.copy_to(&id("lead"), &nats.journal).unwrap();
    let dir = files.dir().unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let staging = dir.join(format!(".lead.{dead}.1a2b.tmp"));
    std::fs::write(&staging, b"{\"half").unwrap();
    assert!(
        files
            .journal
            .list(&mut |e| panic!("{e}"))
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        files.journal.read(&id("lead")).unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
    nats.journal.copy_to(&id("lead"), &files.journal).unwrap();
    assert!(!staging.exists());
    assert_eq!(
        std::fs::read(dir.join("lead.jsonl")).unwrap(),
        std::fs::read(source.dir().unwrap().join("lead.jsonl")).unwrap()
    );
}
