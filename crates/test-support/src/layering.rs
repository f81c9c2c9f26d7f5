//! Layering checks for tests (issue 12): the arrows between the source files of a crate, and
//! whether they form a circle.
//!
//! Every `crate::…` and `super::…` path of a source file is an arrow to the file that defines
//! the module it names; a `mod.rs` is also a source of arrows for the submodules it re-exports
//! (`pub use roster::…`). The crate root (`lib.rs` or `main.rs`, which declares and re-exports
//! everything) is not a source of arrows, nor a target. Comments are skipped (they may name
//! paths that are links, not imports). This is a reader of source text for tests, not a Rust
//! parser: it sees `use` paths and qualified paths, which is how this workspace imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The arrows between the `.rs` files under `src` (paths relative to `src`, `/`-separated):
/// file → the files it imports from. `root` is the crate root's file name (`"lib.rs"` or
/// `"main.rs"`).
///
/// # Panics
/// When `src` cannot be read (a test helper).
#[allow(clippy::unwrap_used)]
pub fn file_arrows(src: &Path, root: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, src, &mut files);
    let modules: BTreeMap<Vec<String>, String> =
        files.iter().map(|f| (module_of(f), f.clone())).collect();
    let mut arrows: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        if file == root {
            continue;
        }
        let text = code(&std::fs::read_to_string(src.join(file)).unwrap());
        let module = module_of(file);
        // `super` of `team/roster.rs` is `team`; of `team/mod.rs`, the crate root.
        let parent: Vec<String> = if file.ends_with("mod.rs") {
            module[..module.len().saturating_sub(1)].to_vec()
        } else {
            module[..module.len() - 1].to_vec()
        };
        let mut to = BTreeSet::new();
        for path in paths(&text, "crate::") {
            to.extend(target(&modules, &path));
        }
        for path in paths(&text, "super::") {
            let full: Vec<String> = parent.iter().cloned().chain(path).collect();
            to.extend(target(&modules, &full));
        }
        // A `mod.rs` names its own submodules without a prefix (`pub use roster::…`).
        if file.ends_with("mod.rs") {
            for path in paths(&text, "use ") {
                let full: Vec<String> = module.iter().cloned().chain(path).collect();
                if full.len() > module.len() + 1 {
                    to.extend(target(&modules, &full).filter(|t| t != file));
                }
            }
        }
        to.remove(file);
        to.remove(root);
        arrows.insert(file.clone(), to);
    }
    arrows
}

/// The first circle found in `arrows`, as `a.rs -> b.rs -> a.rs`; `None` when there is none.
pub fn circle(arrows: &BTreeMap<String, BTreeSet<String>>) -> Option<String> {
    fn visit(
        file: &str,
        arrows: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        stack: &mut Vec<String>,
    ) -> Option<String> {
        if done.contains(file) {
            return None;
        }
        if let Some(at) = stack.iter().position(|f| f == file) {
            return Some(stack[at..].join(" -> ") + " -> " + file);
        }
        stack.push(file.to_owned());
        for next in arrows.get(file).into_iter().flatten() {
            if let Some(found) = visit(next, arrows, done, stack) {
                return Some(found);
            }
        }
        stack.pop();
        done.insert(file.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    arrows
        .keys()
        .find_map(|file| visit(file, arrows, &mut done, &mut Vec::new()))
}

/// Every `.rs` file under `dir`, as paths relative to `src` with `/` separators.
#[allow(clippy::unwrap_used)]
fn sources(src: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(src, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(src).unwrap().to_string_lossy();
            out.push(rel.replace('\\', "/"));
        }
    }
}

/// The module path of a source file: `team/roster.rs` → `["team", "roster"]`, `team/mod.rs` →
/// `["team"]`, `lib.rs`/`main.rs` → `[]`.
fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if parts
        .last()
        .is_some_and(|p| p == "mod" || p == "lib" || p == "main")
    {
        parts.pop();
    }
    parts
}

/// The code of `text` without comments (line and doc comments, which may name paths that are
/// links, not imports).
fn code(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path that starts with `crate::` or `super::` in `code`, as its segments after that
/// prefix (a `{…}` group gives one path per member, each with its first segment).
fn paths(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().last();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        out.extend(segments(rest));
    }
    out
}

fn ident(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The paths at the start of `text` (after a `crate::`): `a::b::C` or `a::{b, c::D}`.
fn segments(text: &str) -> Vec<Vec<String>> {
    if let Some(group) = text.strip_prefix('{') {
        let mut depth = 0;
        let mut out = Vec::new();
        let mut start = 0;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    out.extend(segments(group[start..i].trim()));
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.extend(segments(group[start..i].trim()));
                    start = i + 1;
                }
                _ => {}
            }
        }
        return out;
    }
    let first = ident(text);
    if first.is_empty() {
        return Vec::new();
    }
    let rest = &text[first.len()..];
    match rest.strip_prefix("::") {
        Some(more) => {
            let tails = segments(more);
            if tails.is_empty() {
                vec![vec![first.to_owned()]]
            } else {
                tails
                    .into_iter()
                    .map(|mut tail| {
                        tail.insert(0, first.to_owned());
                        tail
                    })
                    .collect()
            }
        }
        None => vec![vec![first.to_owned()]],
    }
}

/// The file among `files` (by module path) that defines the deepest module `path` names.
fn target(modules: &BTreeMap<Vec<String>, String>, path: &[String]) -> Option<String> {
    (1..=path.len())
        .rev()
        .find_map(|n| modules.get(&path[..n]).cloned())
}
