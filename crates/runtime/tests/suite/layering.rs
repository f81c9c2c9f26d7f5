//! The files of `troupe-runtime` import one another without a circle (issue 12): see
//! [`troupe_test_support::layering`] for what counts as an arrow (`lib.rs`, the crate root,
//! is not a source of arrows).

use std::path::PathBuf;

use troupe_test_support::layering::{circle, file_arrows};

#[test]
fn no_circle_between_the_files_of_the_runtime() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let arrows = file_arrows(&src, "lib.rs");
    // The arrows this test must see, so it cannot pass by reading nothing.
    for (from, to) in [
        ("runtime.rs", "team/mod.rs"),
        ("runtime.rs", "control.rs"),
        ("team/roster.rs", "control.rs"),
        ("team/roster.rs", "team/journal.rs"),
        ("team/tools.rs", "team/service.rs"),
        ("subagent.rs", "control.rs"),
        ("recovery.rs", "team/schema.rs"),
        ("team/mod.rs", "team/service.rs"),
    ] {
        assert!(
            arrows.get(from).is_some_and(|t| t.contains(to)),
            "{from} -> {to} not seen: {arrows:#?}"
        );
    }
    if let Some(found) = circle(&arrows) {
        panic!("a circle between files: {found}");
    }
}
