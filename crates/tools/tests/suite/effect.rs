//! `write`/`edit` plans (DESIGN decision 10): the effect is decided and recorded before the file
//! is touched, the call writes only while the file is at the pre-image, and the file tells
//! afterwards whether the call took effect.

use serde_json::{Value, json};
use troupe_tools::{FileEffectState, ToolRegistry, file_effect_state};

use super::support::{Workspace, code, ok};

async fn plan(ctx: &troupe_tools::ToolContext, name: &str, args: Value) -> troupe_tools::FilePlan {
    ToolRegistry::with_core_tools()
        .plan(ctx, name, &args)
        .await
        .expect("write and edit plan their effect")
        .expect("a valid call")
}

#[tokio::test]
async fn an_edit_plan_names_both_images_and_the_file_tells_where_it_stands() {
    let ws = Workspace::new();
    ws.put("a.txt", "one\ntwo\n");
    let ctx = ws.ctx("alpha");
    ok(ws.call(&ctx, "read", json!({"path": "a.txt"})).await);
    let args = json!({"path": "a.txt", "old_string": "two", "new_string": "2"});
    let planned = plan(&ctx, "edit", args.clone()).await;
    let effect = planned.effect().clone();
    // Planning changed nothing, and the images are the file's before and after.
    assert_eq!(ws.get("a.txt"), "one\ntwo\n");
    assert_eq!(effect.path, "a.txt");
    assert_eq!(effect.result, json!({"path": "a.txt", "replacements": 1}));
    assert_ne!(effect.pre_image, Some(effect.post_image.clone()));
    assert_eq!(
        file_effect_state(&ws.root(), &effect).unwrap(),
        FileEffectState::NotRun
    );
    // Run with the plan: exactly the planned result and content.
    let run = ToolRegistry::with_core_tools()
        .dispatch(&ctx.clone().with_file_plan(planned), "edit", args)
        .await;
    assert_eq!(ok(run), effect.result);
    assert_eq!(ws.get("a.txt"), "one\n2\n");
    assert_eq!(
        file_effect_state(&ws.root(), &effect).unwrap(),
        FileEffectState::Done
    );
    // Someone else's change: neither image.
    ws.put("a.txt", "rewritten\n");
    assert_eq!(
        file_effect_state(&ws.root(), &effect).unwrap(),
        FileEffectState::Changed
    );
}

#[tokio::test]
async fn a_planned_call_writes_only_while_the_file_is_at_its_pre_image() {
    let ws = Workspace::new();
    ws.put("a.txt", "one\n");
    let ctx = ws.ctx("alpha");
    ok(ws.call(&ctx, "read", json!({"path": "a.txt"})).await);
    let args = json!({"path": "a.txt", "content": "mine\n"});
    let planned = plan(&ctx, "write", args.clone()).await;
    // Between the plan and the run, another writer changes the file.
    ws.put("a.txt", "theirs\n");
    let run = ToolRegistry::with_core_tools()
        .dispatch(&ctx.clone().with_file_plan(planned), "write", args)
        .await;
    assert_eq!(code(run), "FS_STALE_VERSION");
    assert_eq!(ws.get("a.txt"), "theirs\n", "nothing written");
}

#[tokio::test]
async fn a_creation_plan_has_no_pre_image_and_refusals_are_the_calls_own() {
    let ws = Workspace::new();
    let ctx = ws.ctx("alpha");
    let planned = plan(
        &ctx,
        "write",
        json!({"path": "new/b.txt", "content": "b\n"}),
    )
    .await;
    let effect = planned.effect().clone();
    assert_eq!(effect.pre_image, None);
    assert_eq!(
        effect.result,
        json!({"path": "new/b.txt", "bytes": 2, "created": true})
    );
    assert!(!ws.path("new").exists(), "planning creates nothing");
    assert_eq!(
        file_effect_state(&ws.root(), &effect).unwrap(),
        FileEffectState::NotRun
    );
    // The errors a call would return come from the plan, and nothing is touched.
    ws.put("seen.txt", "x\n");
    let registry = ToolRegistry::with_core_tools();
    let unseen = registry
        .plan(&ctx, "write", &json!({"path": "seen.txt", "content": "y"}))
        .await
        .unwrap();
    assert_eq!(
        troupe_protocol::ErrorCode::code(&unseen.unwrap_err()),
        "FS_NOT_OBSERVED"
    );
    let not_object = registry.plan(&ctx, "edit", &json!(["x"])).await.unwrap();
    assert_eq!(
        troupe_protocol::ErrorCode::code(&not_object.unwrap_err()),
        "INVALID_ARGUMENTS"
    );
    // Other tools plan nothing.
    assert!(
        registry
            .plan(&ctx, "read", &json!({"path": "seen.txt"}))
            .await
            .is_none()
    );
    assert!(
        registry
            .plan(&ctx, "bash", &json!({"command": "true"}))
            .await
            .is_none()
    );
    assert_eq!(ws.get("seen.txt"), "x\n");
}
