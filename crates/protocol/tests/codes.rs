//! `STABLE_CODES` is the one list of every stable code: checked against every crate's sources
//! and against the README's list.
//!
//! The sources are read as text (every `crates/*/src/**/*.rs` of the workspace, without its
//! `#[cfg(test)] mod …` and its comments): every string literal an `impl ErrorCode for …`
//! returns, and every other `SCREAMING_SNAKE` literal (a tool result's code, an outcome's),
//! must be listed — unless it is one of the few names that are no codes (environment
//! variables); and every listed code must be defined by the crate it names.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use troupe_protocol::STABLE_CODES;

/// `SCREAMING_SNAKE` literals in the sources that are not codes.
const NOT_CODES: &[&str] = &[
    "CARGO_MANIFEST_DIR",
    "CARGO_PKG_VERSION",
    "DEEPSEEK_API_KEY",
    "GIT_COMMON_DIR",
    "GIT_DIR",
    "GIT_INDEX_FILE",
    "GIT_PAGER",
    "GIT_TERMINAL_PROMPT",
    "GIT_WORK_TREE",
    "MERGE_HEAD",
    "OPENAI_API_KEY",
    "TROUPE_CLOCK",
    "TROUPE_HOME",
    "TROUPE_LEASES",
    "TROUPE_WORKERS",
    "TROUPE_LEASE_TTL",
    "TROUPE_NATS_SERVER",
    "TROUPE_SKIP_NATS",
    "TROUPE_STORE",
    "TROUPE_TEST_LANDLOCK_ABI",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// (crate directory name, file, source without its test module and comments) of every source
/// file of the workspace's crates.
fn sources() -> Vec<(String, PathBuf, String)> {
    let mut out = Vec::new();
    let crates = workspace().join("crates");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&crates)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    dirs.sort();
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files);
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            out.push((name.clone(), file, without_tests_and_comments(&text)));
        }
    }
    assert!(out.len() > 50, "the workspace's sources were not found");
    out
}

/// `text` up to its `#[cfg(test)] mod …` (test modules come last), without `//` comment lines.
fn without_tests_and_comments(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut end = lines.len();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() == "#[cfg(test)]" {
            let next = lines[i + 1..]
                .iter()
                .map(|l| l.trim())
                .find(|l| !l.starts_with("#["));
            if next.is_some_and(|l| l.starts_with("mod ") || l.starts_with("pub mod ")) {
                end = i;
                break;
            }
        }
    }
    lines[..end]
        .iter()
        .filter(|l| !l.trim_start().starts_with("//"))
        .copied()
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every string literal of `text` made of `[A-Z0-9_]` only and starting with a letter; with
/// `snake_only`, only those holding an underscore.
fn upper_literals(text: &str, snake_only: bool) -> Vec<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'"' {
            let start = i + 1;
            let mut j = start;
            while j < bytes.len()
                && (bytes[j].is_ascii_uppercase() || bytes[j].is_ascii_digit() || bytes[j] == b'_')
            {
                j += 1;
            }
            if j < bytes.len()
                && bytes[j] == b'"'
                && j > start
                && bytes[start].is_ascii_uppercase()
                && (bytes[j - 1] != b'\\')
            {
                let literal = &text[start..j];
                if !snake_only || literal.contains('_') {
                    out.push(literal.to_owned());
                }
                i = j + 1;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// The bodies of every `impl … ErrorCode for …` block of `text` (to its closing `}` at the
/// start of a line).
fn error_code_impls(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in text.lines() {
        if let Some(body) = current.as_mut() {
            body.push(line);
            if line == "}" {
                out.push(current.take().unwrap().join("\n"));
            }
        } else if line.starts_with("impl") && line.contains("ErrorCode for ") {
            current = Some(vec![line]);
        }
    }
    out
}

#[test]
fn every_code_of_every_crate_is_listed() {
    let listed: BTreeSet<&str> = STABLE_CODES.iter().map(|c| c.code).collect();
    let mut missing: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut impls = 0;
    let all = sources();
    for (_, file, text) in &all {
        let shown = file
            .strip_prefix(workspace())
            .unwrap_or(file)
            .display()
            .to_string();
        for body in error_code_impls(text) {
            impls += 1;
            for code in upper_literals(&body, false) {
                if !listed.contains(code.as_str()) {
                    missing.entry(code).or_default().insert(shown.clone());
                }
            }
        }
        for code in upper_literals(text, true) {
            if !listed.contains(code.as_str()) && !NOT_CODES.contains(&code.as_str()) {
                missing.entry(code).or_default().insert(shown.clone());
            }
        }
    }
    for name in NOT_CODES {
        let literal = format!("\"{name}\"");
        assert!(
            all.iter().any(|(_, _, text)| text.contains(&literal)),
            "{name} is in NOT_CODES but no source names it: remove it"
        );
    }
    // protocol, journal (two), llm, tools (two), team (four), runtime (two), web at least.
    assert!(
        impls >= 13,
        "only {impls} `impl ErrorCode` blocks were found"
    );
    assert!(
        missing.is_empty(),
        "codes missing from STABLE_CODES (crates/protocol/src/codes.rs) — add each (or, for a \
         name that is no code, add it to NOT_CODES here): {missing:#?}"
    );
}

#[test]
fn every_listed_code_is_defined_by_its_crate_and_listed_once() {
    let sources = sources();
    let mut seen = BTreeSet::new();
    for code in STABLE_CODES {
        assert!(seen.insert(code.code), "{} is listed twice", code.code);
        assert!(
            code.code
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
                && code.code.as_bytes()[0].is_ascii_uppercase(),
            "{} is not SCREAMING_SNAKE",
            code.code
        );
        assert!(
            !code.meaning.is_empty() && code.meaning.ends_with('.') && !code.meaning.contains('|'),
            "{}: the meaning must be one sentence ending with a period, without `|`",
            code.code
        );
        let literal = format!("\"{}\"", code.code);
        let defined = sources
            .iter()
            .any(|(name, _, text)| *name == code.origin && text.contains(&literal));
        assert!(
            defined,
            "{} is listed as coming from crates/{} but its sources do not define it",
            code.code, code.origin
        );
    }
}

/// The README's "Error codes" table, as it must read.
fn readme_table() -> String {
    let mut out = String::from("| code | from | meaning |\n|---|---|---|\n");
    for code in STABLE_CODES {
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            code.code, code.origin, code.meaning
        ));
    }
    out
}

#[test]
fn the_readme_lists_exactly_the_stable_codes() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let section = readme
        .split("\n### Error codes\n")
        .nth(1)
        .expect("README.md has a `### Error codes` section");
    let table: String = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .map(|l| format!("{l}\n"))
        .collect();
    let expected = readme_table();
    assert!(
        table == expected,
        "README.md's `### Error codes` table differs from STABLE_CODES; it must read:\n{expected}"
    );
}
