//! `WorkspaceScan`: what a `bash` command changed, by comparing the workspace before and after
//! (a git work tree through `git status`, else a bounded walk).

use std::path::Path;
use std::process::Command;

use troupe_tools::{SCAN_MAX_FILES, WorkspaceScan};

fn put(root: &Path, path: &str, content: &str) {
    let path = root.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn git(root: &Path, args: &[&str]) {
    let status = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(status.status.success(), "git {args:?}: {status:?}");
}

#[tokio::test]
async fn a_walk_names_files_created_changed_and_deleted_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    put(root, "a.txt", "a");
    put(root, "sub/b.txt", "b");
    put(root, "same.txt", "same");
    put(
        root,
        ".git/objects/x",
        "no HEAD: not a repository, and skipped by the walk",
    );
    let scan = WorkspaceScan::before(root).await;
    std::fs::remove_file(root.join("a.txt")).unwrap();
    put(root, "sub/b.txt", "bigger");
    put(root, "c.txt", "new");
    put(root, ".git/objects/x", "changed inside .git");
    let changed = scan.changes().await;
    assert_eq!(changed.paths, ["a.txt", "c.txt", "sub/b.txt"]);
    assert!(changed.complete);
}

#[tokio::test]
async fn in_a_git_work_tree_the_status_decides_and_ignored_files_are_not_watched() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    git(repo, &["init", "-q"]);
    put(repo, ".gitignore", "target/\n");
    put(repo, "ws/tracked.txt", "one");
    put(repo, "ws/clean.txt", "clean");
    put(repo, "outside.txt", "outside the workspace");
    git(repo, &["add", "."]);
    git(repo, &["commit", "-q", "-m", "init"]);
    // The workspace is a directory of the work tree: paths are relative to it.
    let ws = repo.join("ws");
    put(&ws, "dirty.txt", "untracked before");
    let scan = WorkspaceScan::before(&ws).await;
    put(&ws, "tracked.txt", "two!");
    put(&ws, "dirty.txt", "untracked and changed");
    put(&ws, "target/out.o", "ignored");
    put(repo, "outside.txt", "changed outside");
    let changed = scan.changes().await;
    assert_eq!(changed.paths, ["dirty.txt", "tracked.txt"]);
    assert!(changed.complete);
}

#[tokio::test]
async fn past_the_bound_the_comparison_is_incomplete() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for i in 0..=SCAN_MAX_FILES {
        std::fs::write(root.join(format!("f{i}")), "").unwrap();
    }
    let scan = WorkspaceScan::before(root).await;
    let changed = scan.changes().await;
    assert!(!changed.complete, "more than {SCAN_MAX_FILES} files");
}
