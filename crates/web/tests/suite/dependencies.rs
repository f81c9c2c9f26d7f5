//! The panel reads logs through the session model, never through the runtime (issue 12): its
//! normal dependencies reach no HTTP client (`reqwest`), no model client, no tools (and so no
//! search crates or Landlock) and no runtime.
//!
//! The closure is read from the workspace's `Cargo.lock` and the members' manifests, without
//! running cargo: a workspace member's normal dependencies are the keys of its manifest's
//! `[dependencies]` tables (its lock entry also lists its dev-dependencies); every other
//! package's are its lock entry's (which holds no dev-dependencies). Features are unified over
//! the whole workspace in the lock, so this closure can only be larger than what `cargo tree -p
//! troupe-web -e normal` prints: a package it does not reach is not in that tree either.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// What the panel must never link.
const FORBIDDEN: &[&str] = &[
    "reqwest",
    "troupe-runtime",
    "troupe-llm",
    "troupe-tools",
    "troupe-mcp",
    "grep-searcher",
    "grep-regex",
    "ignore",
    "landlock",
];

/// One `[[package]]` of the lock.
struct Locked {
    name: String,
    version: String,
    /// `None` for a workspace member.
    source: Option<String>,
    /// As written: `name`, `name version` or `name version (source)`.
    dependencies: Vec<String>,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The value of a `key = "value"` line.
fn quoted(line: &str, key: &str) -> Option<String> {
    let rest = line
        .strip_prefix(key)?
        .trim_start()
        .strip_prefix('=')?
        .trim();
    Some(rest.trim_matches('"').to_owned())
}

fn parse_lock(text: &str) -> Vec<Locked> {
    let mut out = Vec::new();
    for block in text.split("[[package]]").skip(1) {
        let mut package = Locked {
            name: String::new(),
            version: String::new(),
            source: None,
            dependencies: Vec::new(),
        };
        let mut in_dependencies = false;
        for line in block.lines() {
            let line = line.trim();
            if in_dependencies {
                if line == "]" {
                    in_dependencies = false;
                } else {
                    package
                        .dependencies
                        .push(line.trim_end_matches(',').trim_matches('"').to_owned());
                }
            } else if let Some(name) = quoted(line, "name") {
                package.name = name;
            } else if let Some(version) = quoted(line, "version") {
                package.version = version;
            } else if let Some(source) = quoted(line, "source") {
                package.source = Some(source);
            } else if line == "dependencies = [" {
                in_dependencies = true;
            }
        }
        out.push(package);
    }
    out
}

/// The package names of the `[dependencies]` (and `[target.….dependencies]`) tables of a
/// manifest: the keys, or `package = "…"` where a key renames one.
fn normal_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_table = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_table = line == "[dependencies]"
                || (line.starts_with("[target.") && line.ends_with(".dependencies]"));
            continue;
        }
        if !in_table || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key: String = line
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        let renamed = line.split("package").nth(1).and_then(|rest| {
            rest.trim_start()
                .strip_prefix('=')
                .and_then(|v| v.trim().strip_prefix('"'))
                .and_then(|v| v.split('"').next())
                .map(str::to_owned)
        });
        out.insert(renamed.unwrap_or(key));
    }
    out
}

/// Every workspace member's package name → its manifest's normal dependencies.
fn members() -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(workspace().join("crates")).unwrap() {
        let manifest = entry.unwrap().path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let name = text.lines().find_map(|l| quoted(l.trim(), "name")).unwrap();
        out.insert(name, normal_dependencies(&text));
    }
    out
}

/// The normal dependency closure of `root`: each reached package with the one it was reached
/// from (to name the path to a forbidden one).
fn closure(root: &str) -> BTreeMap<String, String> {
    let lock = parse_lock(&std::fs::read_to_string(workspace().join("Cargo.lock")).unwrap());
    let members = members();
    assert!(
        members.len() >= 10 && members.contains_key(root),
        "the workspace's members were not read: {members:?}"
    );
    // The lock entry a dependency string names.
    let find = |dependency: &str| -> Vec<&Locked> {
        let mut parts = dependency.split(' ');
        let name = parts.next().unwrap_or_default();
        let version = parts.next();
        lock.iter()
            .filter(|p| p.name == name && version.is_none_or(|v| p.version == v))
            .collect()
    };
    let mut reached: BTreeMap<String, String> = BTreeMap::new();
    let mut queue: VecDeque<&Locked> = VecDeque::new();
    let start = lock
        .iter()
        .find(|p| p.name == root && p.source.is_none())
        .unwrap();
    reached.insert(format!("{} {}", start.name, start.version), String::new());
    queue.push_back(start);
    while let Some(package) = queue.pop_front() {
        let from = format!("{} {}", package.name, package.version);
        let member_deps = members
            .get(&package.name)
            .filter(|_| package.source.is_none());
        for dependency in &package.dependencies {
            let name = dependency.split(' ').next().unwrap_or_default();
            if member_deps.is_some_and(|deps| !deps.contains(name)) {
                continue; // A member's dev-dependency.
            }
            for next in find(dependency) {
                let key = format!("{} {}", next.name, next.version);
                if let std::collections::btree_map::Entry::Vacant(slot) = reached.entry(key) {
                    slot.insert(from.clone());
                    queue.push_back(next);
                }
            }
        }
    }
    reached
}

/// The chain `root -> … -> key` by which `key` was reached.
fn path_to(reached: &BTreeMap<String, String>, key: &str) -> String {
    let mut chain = vec![key.to_owned()];
    let mut at = key;
    while let Some(from) = reached.get(at).filter(|f| !f.is_empty()) {
        chain.push(from.clone());
        at = from;
    }
    chain.reverse();
    chain.join(" -> ")
}

#[test]
fn the_panel_depends_on_no_http_client_and_no_runtime() {
    let reached = closure("troupe-web");
    let names: BTreeSet<&str> = reached.keys().filter_map(|k| k.split(' ').next()).collect();
    // What the closure must hold, so the test cannot pass by reading nothing: the panel's
    // server, its log readers, and what they depend on in turn.
    for needed in [
        "axum",
        "hyper",
        "tokio",
        "troupe-session",
        "troupe-journal",
        "troupe-team",
        "troupe-protocol",
        "serde_json",
    ] {
        assert!(names.contains(needed), "{needed} not reached: {names:?}");
    }
    // A member's dev-dependency is not followed (the web tests use the NATS store and the
    // test support's model server).
    assert!(!names.contains("troupe-test-support"), "{names:?}");
    let bad: Vec<String> = reached
        .keys()
        .filter(|k| FORBIDDEN.contains(&k.split(' ').next().unwrap_or_default()))
        .map(|k| path_to(&reached, k))
        .collect();
    assert!(
        bad.is_empty(),
        "troupe-web must read logs through troupe-session, not link these:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_manifest_reader_sees_normal_dependencies_only() {
    let manifest = "[package]\nname = \"x\"\n\n[dependencies]\na.workspace = true\nb = { \
                    workspace = true, features = [\"f\"] }\n# c = 1\nd2 = { package = \"real-d\", \
                    version = \"1\" }\n\n[target.'cfg(unix)'.dependencies]\ne = \"1\"\n\n\
                    [dev-dependencies]\nf.workspace = true\n";
    let deps: Vec<String> = normal_dependencies(manifest).into_iter().collect();
    assert_eq!(deps, ["a", "b", "e", "real-d"]);
}
