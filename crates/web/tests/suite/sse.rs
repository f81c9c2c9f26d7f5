//! Live updates over SSE: replay after `Last-Event-ID`, the replay/live boundary, and no frame
//! for a change the view does not show.

use serde_json::json;
use troupe_protocol::EventDraft;

use super::*;

/// The hub's view once it shows `statuses`: on files a GET reads the files now; on NATS the
/// follower pushes the appends, so the view catches up a moment later (bounded wait).
async fn fold_until(router: &Router, statuses: &[&str]) -> (u64, u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, body) = get(router, "/api/sessions/lead-1/team").await;
        if task_statuses(&body) == statuses {
            return (
                body["position"].as_u64().unwrap(),
                body["id"].as_u64().unwrap(),
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the hub never showed {statuses:?}: {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The hub's `position` (events folded) after it read the files now.
async fn fold_now(router: &Router) -> (u64, u64) {
    let (_, body) = get(router, "/api/sessions/lead-1/team").await;
    (
        body["position"].as_u64().unwrap(),
        body["id"].as_u64().unwrap(),
    )
}

fn frame_id(id: &Option<String>) -> u64 {
    id.as_deref().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_gets_exactly_what_it_missed_then_live_frames() {
    reconnect_gets_what_it_missed(Home::new()).await;
}

/// The same on NATS, where the panel follows the logs live (its poll interval is an hour).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_nats_a_reconnect_gets_exactly_what_it_missed_then_frames_pushed_live() {
    if let Some(home) = Home::nats() {
        reconnect_gets_what_it_missed(home).await;
    }
}

async fn reconnect_gets_what_it_missed(home: Home) {
    let lead = home.lead(LEAD);
    let router = home.router();
    let path = "/api/sessions/lead-1/team/events";

    let mut first = SseReader::open(&router, path, None).await;
    let (event, id, view) = first.next_frame().await;
    assert_eq!(event, "team");
    assert_eq!(task_statuses(&view), Vec::<String>::new());
    let id0 = frame_id(&id);
    assert_eq!(
        view["id"].as_u64(),
        Some(id0),
        "the frame's id is in its data too"
    );

    append(&lead, vec![task("task-1", 1, "pending", None, &[], &[])]);
    let (_, id, view) = first.next_frame().await;
    let id1 = frame_id(&id);
    assert!(id1 > id0);
    assert_eq!(task_statuses(&view), ["task-1:pending"]);
    drop(first);

    // While the browser is away, the task moves twice.
    append(
        &lead,
        vec![task("task-1", 2, "in_progress", Some(LEAD), &[], &[])],
    );
    fold_until(&router, &["task-1:in_progress"]).await;
    append(
        &lead,
        vec![task("task-1", 3, "completed", Some(LEAD), &[], &[])],
    );
    let (position, current) = fold_until(&router, &["task-1:completed"]).await;
    assert_eq!(current, position);

    // It comes back with the last id it saw: the current view (a whole view is exactly what it
    // missed), once.
    let mut back = SseReader::open(&router, path, Some(&id1.to_string())).await;
    let (_, id, view) = back.next_frame().await;
    assert_eq!(frame_id(&id), current);
    assert_eq!(task_statuses(&view), ["task-1:completed"]);
    // Then live frames.
    append(&lead, vec![task("task-2", 1, "pending", None, &[], &[])]);
    let (_, id, view) = back.next_frame().await;
    assert!(frame_id(&id) > current);
    assert_eq!(task_statuses(&view), ["task-1:completed", "task-2:pending"]);
    let latest = frame_id(&id);
    drop(back);

    // A browser that already has the latest frame gets nothing but heartbeats.
    let mut current_reader = SseReader::open(&router, path, Some(&latest.to_string())).await;
    assert_eq!(current_reader.next().await, Block::Comment);
    assert_eq!(current_reader.next().await, Block::Comment);
    // An id from another server's life (ahead of this one) gets the view again.
    let mut stranger = SseReader::open(&router, path, Some("999999")).await;
    let (_, id, _) = stranger.next_frame().await;
    assert_eq!(frame_id(&id), latest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_duplicate_and_no_missing_change_at_the_replay_live_boundary() {
    // Changes land while browsers connect: each connection sees strictly increasing ids, never
    // the same view twice in a row, and always ends on the final view.
    for round in 0..12u64 {
        let home = Home::new();
        let lead = home.lead(LEAD);
        let router = home.router();
        let (_, start) = fold_now(&router).await;
        let writer = std::thread::spawn(move || {
            for n in 1..=6u64 {
                append(
                    &lead,
                    vec![task(&format!("task-{n}"), 1, "pending", None, &[], &[])],
                );
                std::thread::sleep(std::time::Duration::from_millis((n * round) % 7));
            }
            lead
        });
        let last = (round % 2 == 0).then(|| start.to_string());
        let mut reader =
            SseReader::open(&router, "/api/sessions/lead-1/team/events", last.as_deref()).await;
        let mut ids = Vec::new();
        let mut views: Vec<Vec<String>> = Vec::new();
        loop {
            let (_, id, view) = reader.next_frame().await;
            let statuses = task_statuses(&view);
            ids.push(frame_id(&id));
            assert_ne!(
                views.last(),
                Some(&statuses),
                "round {round}: a duplicate frame"
            );
            let done = statuses.len() == 6;
            views.push(statuses);
            if done {
                break;
            }
        }
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "round {round}: ids {ids:?}"
        );
        for pair in views.windows(2) {
            assert!(pair[0].len() < pair[1].len(), "round {round}: {views:?}");
        }
        // The writer stays open (its lock is part of the Lead's status).
        let lead = writer.join().unwrap();
        // Nothing more: the next block is a heartbeat, not a repeat of the last view.
        fold_now(&router).await;
        assert_eq!(reader.next().await, Block::Comment, "round {round}");
        drop(lead);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mailbox_only_and_unshown_events_send_no_frame() {
    let home = Home::new();
    let lead = home.lead(LEAD);
    let mate = home.child(ALPHA, LEAD, "alpha");
    drop(mate);
    append(
        &lead,
        vec![
            member(ALPHA, "alpha", "provisioning", None),
            member(ALPHA, "alpha", "active", None),
        ],
    );
    let router = home.router();
    let mut reader = SseReader::open(&router, "/api/sessions/lead-1/team/events", None).await;
    let (_, id, view) = reader.next_frame().await;
    let id0 = frame_id(&id);
    assert_eq!(view["mail"], json!({"pending": 0, "byMember": {}}));

    // A queued message, its acknowledgement, and Lead events the view does not show.
    let (before, _) = fold_now(&router).await;
    append(&lead, vec![queued("team-message-1", LEAD, "lead", ALPHA)]);
    append(&lead, vec![delivered("team-message-1", ALPHA)]);
    append(
        &lead,
        vec![
            queued("team-message-2", LEAD, "lead", ALPHA),
            EventDraft::new(
                "assistant/chunk",
                json!({"turn": 1, "step": 1, "block": "text", "delta": "x"}),
            ),
        ],
    );
    let (after, id_now) = fold_now(&router).await;
    assert_eq!(after, before + 4, "the hub folded the four events");
    assert_eq!(id_now, id0, "no new frame was published");
    assert_eq!(reader.next().await, Block::Comment, "a heartbeat, no frame");

    // The next change of the roster or board is sent, with the mail counts as of then.
    append(&lead, vec![task("task-1", 1, "pending", None, &[], &[])]);
    let (_, id, view) = reader.next_frame().await;
    assert!(frame_id(&id) > id0);
    assert_eq!(task_statuses(&view), ["task-1:pending"]);
    assert_eq!(view["mail"], json!({"pending": 1, "byMember": {ALPHA: 1}}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teammate_status_follows_its_turns_and_its_process() {
    let home = Home::new();
    let lead = home.lead(LEAD);
    append(
        &lead,
        vec![
            member(ALPHA, "alpha", "provisioning", None),
            member(ALPHA, "alpha", "active", None),
        ],
    );
    let router = home.router();
    let mut reader = SseReader::open(&router, "/api/sessions/lead-1/team/events", None).await;
    let alpha_status = |view: &Value| view["members"][1]["status"].as_str().unwrap().to_owned();
    let (_, _, view) = reader.next_frame().await;
    assert_eq!(alpha_status(&view), "inactive", "no session file yet");

    let mate = home.child(ALPHA, LEAD, "alpha");
    let (_, _, view) = reader.next_frame().await;
    assert_eq!(alpha_status(&view), "idle", "a process holds its file");
    append(&mate, vec![turn_start(1)]);
    let (_, _, view) = reader.next_frame().await;
    assert_eq!(alpha_status(&view), "running");
    append(&mate, vec![turn_end(1)]);
    let (_, _, view) = reader.next_frame().await;
    assert_eq!(alpha_status(&view), "idle");
    drop(mate);
    let (_, _, view) = reader.next_frame().await;
    assert_eq!(
        alpha_status(&view),
        "inactive",
        "the process let go of the file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_stream_resumes_after_the_last_item_it_sent() {
    conversation_resumes_after_its_last_item(Home::new()).await;
}

/// The same on NATS, where the stream follows the log live (the poll interval is an hour).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_nats_a_conversation_stream_is_pushed_live_and_resumes_after_its_last_item() {
    if let Some(home) = Home::nats() {
        conversation_resumes_after_its_last_item(home).await;
    }
}

async fn conversation_resumes_after_its_last_item(home: Home) {
    let mate = home.child(ALPHA, LEAD, "alpha");
    append(&mate, vec![turn_start(1)]);
    let router = home.router();
    let path = "/api/sessions/mate-alpha/conversation/events";
    let mut reader = SseReader::open(&router, path, None).await;
    let (event, id, item) = reader.next_frame().await;
    assert_eq!(event, "item");
    assert_eq!(item["kind"], "turnStart");
    assert_eq!(id.as_deref(), Some("1"), "the id is the event's seq");

    let call = |id: &str| {
        EventDraft::new(
            "tool/call",
            json!({"turn": 1, "step": 1, "callId": id, "name": "bash",
            "arguments": {"command": "true"}}),
        )
    };
    append(&mate, vec![call("c1")]);
    let (_, id, item) = reader.next_frame().await;
    assert_eq!(
        (id.as_deref(), item["callId"].as_str()),
        (Some("2"), Some("c1"))
    );
    drop(reader);

    append(&mate, vec![call("c2"), call("c3")]);
    let mut back = SseReader::open(&router, path, Some("2")).await;
    let (_, id, item) = back.next_frame().await;
    assert_eq!(
        (id.as_deref(), item["callId"].as_str()),
        (Some("3"), Some("c2"))
    );
    let (_, id, item) = back.next_frame().await;
    assert_eq!(
        (id.as_deref(), item["callId"].as_str()),
        (Some("4"), Some("c3"))
    );
    append(&mate, vec![turn_end(1)]);
    let (_, id, item) = back.next_frame().await;
    assert_eq!(
        (id.as_deref(), item["kind"].as_str()),
        (Some("5"), Some("turnEnd"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_conversation_shows_its_items_then_the_failure() {
    let home = Home::new();
    let mate = home.child(ALPHA, LEAD, "alpha");
    append(
        &mate,
        vec![
            turn_start(1),
            EventDraft::new(
                "tool/call",
                json!({"turn": 1, "step": 1, "callId": "c1", "name": "bash",
                "arguments": {"command": "true"}}),
            ),
        ],
    );
    drop(mate);
    // Line 5 (after the header, agent/config, turn/start and tool/call) is damaged, and a
    // completed turn follows it, so it is corruption, not a torn last write.
    let path = home.path().join("sessions/mate-alpha.jsonl");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{not json\n");
    text.push_str(
        r#"{"seq":4,"time":1,"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}"#,
    );
    text.push('\n');
    std::fs::write(&path, text).unwrap();
    let router = home.router();

    let (status, body) = get(&router, "/api/sessions/mate-alpha/conversation").await;
    assert_eq!(status, StatusCode::OK);
    let kinds: Vec<&str> = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["turnStart", "toolCall"]);
    let failure = body["failure"].as_str().expect("the JSON names the damage");
    assert!(failure.contains("line 5"), "{failure}");

    let path = "/api/sessions/mate-alpha/conversation/events";
    let mut reader = SseReader::open(&router, path, None).await;
    let (_, id, _) = reader.next_frame().await;
    assert_eq!(id.as_deref(), Some("1"));
    let (_, id, _) = reader.next_frame().await;
    assert_eq!(id.as_deref(), Some("2"));
    let (event, _, data) = reader.next_frame().await;
    assert_eq!(event, "failure", "the stream says why it stops: {data}");
    assert!(
        data["message"].as_str().unwrap().contains("line 5"),
        "{data}"
    );
    // A reconnect after the last item gets the failure again, not silence.
    let mut back = SseReader::open(&router, path, Some("2")).await;
    let (event, _, _) = back.next_frame().await;
    assert_eq!(event, "failure");
}

/// On NATS a member's log is followed live too: a turn it opens and closes is pushed to the
/// panel (its poll interval is an hour). Residency comes from the session's lease: a member
/// whose writer holds it is `running` with an open turn and `idle` without; its `host` is
/// `local` while the Lead's holder holds it, the holder its lease names when another process
/// does (DESIGN §7), and absent once it is not live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_nats_a_members_turns_are_pushed_to_the_team_view() {
    let Some(home) = Home::nats() else {
        return;
    };
    let lead = home.lead(LEAD);
    let alpha = home.child(ALPHA, LEAD, "alpha");
    append(
        &lead,
        vec![
            member(ALPHA, "alpha", "provisioning", None),
            member(ALPHA, "alpha", "active", None),
        ],
    );
    let router = home.router();
    let path = "/api/sessions/lead-1/team/events";
    let mut reader = SseReader::open(&router, path, None).await;
    let row = |view: &serde_json::Value, name: &str, field: &str| {
        view["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .and_then(|m| m[field].as_str().map(str::to_owned))
    };
    let status = |view: &serde_json::Value| row(view, "alpha", "status");
    let host = |view: &serde_json::Value| row(view, "alpha", "host");
    let (_, _, view) = reader.next_frame().await;
    assert_eq!(status(&view).as_deref(), Some("idle"), "{view}");
    assert_eq!(host(&view).as_deref(), Some("local"), "{view}");
    assert_eq!(
        row(&view, "lead", "host").as_deref(),
        Some("local"),
        "{view}"
    );
    append(&alpha, vec![turn_start(1)]);
    let (_, _, view) = reader.next_frame().await;
    assert_eq!(status(&view).as_deref(), Some("running"), "{view}");
    append(&alpha, vec![turn_end(1)]);
    let (_, _, view) = reader.next_frame().await;
    assert_eq!(status(&view).as_deref(), Some("idle"), "{view}");
    // The writer closes (its lease is released): inactive at the next change of the Team.
    drop(alpha);
    append(&lead, vec![task("task-1", 1, "pending", None, &[], &[])]);
    let (_, _, view) = reader.next_frame().await;
    assert_eq!(status(&view).as_deref(), Some("inactive"), "{view}");
    assert_eq!(host(&view), None, "{view}");
    // Another process takes alpha's lease (its entry written straight into the bucket): idle,
    // hosted there, at the next change of the Team.
    let (_, server) = home.store.as_ref().unwrap();
    let client = async_nats::connect(server.url()).await.unwrap();
    let leases = async_nats::jetstream::new(client)
        .get_key_value("TROUPE_LEASES")
        .await
        .unwrap();
    let elsewhere = serde_json::json!({"owner": "0f", "host": "gpu-box", "pid": 4242, "since": T0});
    leases
        .put(ALPHA, elsewhere.to_string().into())
        .await
        .unwrap();
    append(&lead, vec![task("task-2", 1, "pending", None, &[], &[])]);
    let (_, _, view) = reader.next_frame().await;
    assert_eq!(status(&view).as_deref(), Some("idle"), "{view}");
    assert_eq!(
        host(&view).as_deref(),
        Some("host gpu-box pid 4242"),
        "{view}"
    );
}
