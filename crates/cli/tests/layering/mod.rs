//! The files of the `troupe` binary import one another without a circle (issue 12), as the
//! runtime's do: see [`troupe_test_support::layering`] (`main.rs`, the crate root, is not a
//! source of arrows).

use std::path::PathBuf;

use troupe_test_support::layering::{circle, file_arrows};

#[test]
fn no_circle_between_the_files_of_the_cli() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let arrows = file_arrows(&src, "main.rs");
    // Arrows this test must see, so that it cannot pass by reading nothing.
    for (from, to) in [
        ("work/drive.rs", "control.rs"),
        ("send.rs", "control.rs"),
        ("chat.rs", "send.rs"),
        ("work/mod.rs", "work/drive.rs"),
        ("settings/show.rs", "settings/mod.rs"),
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
