//! Issue 10: every member's log failure is seen (DESIGN decision 11), and recovery decides
//! from the logs (decision 10): tool calls a crash cut are resolved exactly where the logs
//! describe their effect, spawns and first prompts a crash cut are carried out, and quiet mail
//! starts no turn.

use serde_json::json;

use super::support::*;
use super::team::{quiet, spawn};

/// Defect 3: a teammate whose writer fails mid-run is named, with the OS error, among the
/// runtime's log failures (which `run`/`resume`/`demo` turn into `JOURNAL_FAILED`, exit 1);
/// the Lead's log is untouched and the teammate's log keeps everything durable before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teammate_whose_writer_fails_mid_run_is_a_log_failure() {
    let (h, _log, faults) = Harness::faulty();
    let lead = h.team_lead().await;
    let lead_id = lead.id().clone();
    // The teammate's first tool call is the append that fails (disk full, say).
    faults.fail_when(
        append_elsewhere(&lead_id, "tool/call"),
        "No space left on device (os error 28)",
    );
    let w = spawn(
        &h,
        &lead,
        "writer",
        vec![
            call("write", json!({"path": "a.txt", "content": "a\n"})),
            text("wrote"),
        ],
    )
    .await;
    quiet(&h, &lead).await;
    assert!(
        !h.path("a.txt").exists(),
        "the call never became durable, so it never ran"
    );
    // The teardown reports the poisoned writer too; the failure list is what callers read.
    let _ = h.runtime.shutdown().await;
    let failures = h.runtime.log_failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].session, w);
    assert_eq!(failures[0].name, "writer");
    assert!(
        failures[0].error.contains("No space left on device"),
        "{failures:?}"
    );
    // Nothing of the failed batch reached the file; what was durable before it is intact.
    let kinds = h.kinds(&w);
    assert!(!kinds.iter().any(|k| k == "tool/call"), "{kinds:?}");
    assert!(kinds.iter().any(|k| k == "turn/start"), "{kinds:?}");
}
