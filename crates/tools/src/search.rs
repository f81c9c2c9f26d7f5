//! The `glob` and `grep` tools, on ripgrep's `ignore`, `globset` and `grep` crates.

use std::io;
use std::path::Path;

use globset::GlobBuilder;
use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use ignore::WalkBuilder;
use ignore::overrides::OverrideBuilder;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::files::floor_char_boundary;
use crate::fsops::{blocking, metadata_if_exists};
use crate::path::{Resolved, display_relative, resolve};
use crate::tool::{Tool, ToolFuture, ToolOutcome, parse_arguments};

/// Matched lines longer than this many bytes are cut in `grep` output.
pub const GREP_MAX_LINE_BYTES: usize = 500;

/// `glob {pattern, path?}`: lists files whose path matches a glob.
///
/// The pattern is matched against each file's path relative to `path` (default: the
/// workspace root), with `*` and `?` not crossing `/` and `**` matching any number of
/// directories (`**/*.rs`, `src/*.toml`, `{a,b}/*`). Ignore rules are respected: `.gitignore`
/// (even outside a git repository), `.ignore` and `.git/info/exclude`; the `.git` directory is
/// skipped; other hidden files are listed. Only files (and symlinks to files) are listed.
///
/// Result: `{"files": [<workspace-relative path>, …]}`, sorted by path, at most
/// [`ToolLimits::max_results`](crate::ToolLimits::max_results) entries; when more matched,
/// `"truncated": true` and `"total": <count>` are added.
///
/// Errors: `INVALID_ARGUMENTS` (bad glob), `FS_NOT_FOUND`, `FS_NOT_A_DIRECTORY`,
/// `FS_PATH_OUTSIDE_WORKSPACE`, `TOOL_CANCELED`, `FS_IO`.
#[derive(Debug, Default, Clone, Copy)]
pub struct GlobTool;

/// `grep {pattern, path?, glob?}`: searches file contents with a regular expression
/// (Rust `regex` syntax; `(?i)` for case-insensitive).
///
/// Searches `path` (a file or directory, default the workspace root) with the same ignore
/// rules as [`GlobTool`]; binary files are skipped. `glob` restricts the files searched, with
/// ripgrep's `-g` semantics (`*.rs` matches at any depth; `!` negates).
///
/// Result: `{"matches": ["<path>:<line>:<text>", …]}` in path order (workspace-relative
/// paths, 1-based line numbers, lines cut at [`GREP_MAX_LINE_BYTES`]), at most
/// [`ToolLimits::max_results`](crate::ToolLimits::max_results) entries; `"truncated": true`
/// when more matched.
///
/// Errors: `INVALID_ARGUMENTS` (bad regex or glob), `FS_NOT_FOUND`,
/// `FS_PATH_OUTSIDE_WORKSPACE`, `TOOL_CANCELED`, `FS_IO`.
#[derive(Debug, Default, Clone, Copy)]
pub struct GrepTool;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GlobArgs {
    pattern: String,
    path: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrepArgs {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
}

impl Tool for GlobTool {
    fn name(&self) -> &str {
        "glob"
    }

    fn description(&self) -> &str {
        "Find files by glob pattern (e.g. \"**/*.rs\", \"src/*.toml\"), relative to path \
         (default: the workspace root). Respects .gitignore. Returns sorted workspace-relative \
         paths."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Glob pattern; * does not cross '/', ** matches any directories."},
                "path": {"type": "string", "description": "Directory to search, relative to the workspace root (default: the root)."}
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    }

    fn output_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {
                "files": {"type": "array", "items": {"type": "string"}},
                "truncated": {"type": "boolean"},
                "total": {"type": "integer"}
            },
            "required": ["files"],
            "additionalProperties": false
        }))
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: GlobArgs = parse_arguments(args)?;
            let ctx = ctx.clone();
            blocking(move || glob_files(&ctx, &args)).await
        })
    }
}

impl Tool for GrepTool {
    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> &str {
        "Search file contents with a regular expression (Rust regex syntax). Respects \
         .gitignore and skips binary files. Returns \"path:line:text\" matches."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regular expression; use (?i) for case-insensitive."},
                "path": {"type": "string", "description": "File or directory to search, relative to the workspace root (default: the root)."},
                "glob": {"type": "string", "description": "Only search files matching this glob (ripgrep -g syntax, e.g. \"*.rs\")."}
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    }

    fn output_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {
                "matches": {"type": "array", "items": {"type": "string"}},
                "truncated": {"type": "boolean"}
            },
            "required": ["matches"],
            "additionalProperties": false
        }))
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: GrepArgs = parse_arguments(args)?;
            let ctx = ctx.clone();
            blocking(move || grep_files(&ctx, &args)).await
        })
    }
}

/// A walker over `base` with Troupe's ignore rules and a stable order.
fn walker(base: &Path) -> WalkBuilder {
    let mut builder = WalkBuilder::new(base);
    builder
        .hidden(false)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(|entry| entry.file_name() != ".git");
    builder
}

/// Resolves an optional base path (default: the workspace root) that must exist.
fn resolve_base(ctx: &ToolContext, path: Option<&str>) -> Result<(Resolved, bool), ToolError> {
    let resolved = resolve(ctx.workspace_root(), path.unwrap_or("."))?;
    match metadata_if_exists(&resolved.absolute, &resolved.display)? {
        Some(metadata) => {
            let is_dir = metadata.is_dir();
            Ok((resolved, is_dir))
        }
        None => Err(ToolError::NotFound {
            path: resolved.display,
        }),
    }
}

/// The workspace-relative display of a walked path.
fn relative_display(ctx: &ToolContext, path: &Path) -> String {
    match path.strip_prefix(ctx.workspace_root()) {
        Ok(relative) => display_relative(relative),
        Err(_) => path.display().to_string(),
    }
}

fn glob_files(ctx: &ToolContext, args: &GlobArgs) -> ToolOutcome {
    let pattern = args.pattern.strip_prefix("./").unwrap_or(&args.pattern);
    if pattern.starts_with('/') {
        return Err(ToolError::invalid_arguments(
            "field `pattern`: must be relative to `path` (use the path argument for the directory)",
        ));
    }
    let matcher = GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(|error| ToolError::invalid_arguments(format!("field `pattern`: {error}")))?
        .compile_matcher();
    let (base, is_dir) = resolve_base(ctx, args.path.as_deref())?;
    if !is_dir {
        return Err(ToolError::NotADirectory { path: base.display });
    }

    let mut files = Vec::new();
    for entry in walker(&base.absolute).build() {
        if ctx.cancellation().is_cancelled() {
            return Err(ToolError::Canceled);
        }
        // Unreadable entries are skipped, as ripgrep does.
        let Ok(entry) = entry else { continue };
        let is_file = match entry.file_type() {
            Some(kind) if kind.is_file() => true,
            Some(kind) if kind.is_symlink() => entry.path().is_file(),
            _ => false,
        };
        if !is_file {
            continue;
        }
        let Ok(relative) = entry.path().strip_prefix(&base.absolute) else {
            continue;
        };
        if matcher.is_match(relative) {
            files.push(relative_display(ctx, entry.path()));
        }
    }
    files.sort();
    let total = files.len();
    let max = ctx.limits().max_results;
    let mut result = Map::new();
    if total > max {
        files.truncate(max);
        result.insert("files".into(), json!(files));
        result.insert("truncated".into(), json!(true));
        result.insert("total".into(), json!(total));
    } else {
        result.insert("files".into(), json!(files));
    }
    Ok(Value::Object(result))
}

fn grep_files(ctx: &ToolContext, args: &GrepArgs) -> ToolOutcome {
    let matcher = RegexMatcherBuilder::new()
        .line_terminator(Some(b'\n'))
        .build(&args.pattern)
        .map_err(|error| ToolError::invalid_arguments(format!("field `pattern`: {error}")))?;
    let (base, _) = resolve_base(ctx, args.path.as_deref())?;
    let mut builder = walker(&base.absolute);
    if let Some(glob) = &args.glob {
        let overrides = OverrideBuilder::new(&base.absolute)
            .add(glob)
            .and_then(|builder| builder.build())
            .map_err(|error| ToolError::invalid_arguments(format!("field `glob`: {error}")))?;
        builder.overrides(overrides);
    }
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .binary_detection(BinaryDetection::quit(0))
        .build();

    let max = ctx.limits().max_results;
    let mut matches: Vec<String> = Vec::new();
    let mut truncated = false;
    'walk: for entry in builder.build() {
        if ctx.cancellation().is_cancelled() {
            return Err(ToolError::Canceled);
        }
        let Ok(entry) = entry else { continue };
        // Symlinks are not followed: one could point outside the workspace.
        if !entry.file_type().is_some_and(|kind| kind.is_file()) {
            continue;
        }
        let shown = relative_display(ctx, entry.path());
        let search = searcher.search_path(
            &matcher,
            entry.path(),
            Lossy(|line_number, line: &str| {
                if matches.len() >= max {
                    truncated = true;
                    return Ok(false);
                }
                let line = line.trim_end_matches(['\n', '\r']);
                let cut = floor_char_boundary(line, GREP_MAX_LINE_BYTES);
                let text = if cut < line.len() {
                    format!("{}…", &line[..cut])
                } else {
                    line.to_owned()
                };
                matches.push(format!("{shown}:{line_number}:{text}"));
                Ok::<bool, io::Error>(true)
            }),
        );
        // A file that vanished or cannot be read is skipped, as ripgrep does.
        drop(search);
        if truncated {
            break 'walk;
        }
    }
    let mut result = Map::new();
    result.insert("matches".into(), json!(matches));
    if truncated {
        result.insert("truncated".into(), json!(true));
    }
    Ok(Value::Object(result))
}
