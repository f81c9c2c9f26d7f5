//! The `read`, `write` and `edit` tools, with the stale-version guard of REFERENCE a.12.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};

use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::context::ToolContext;
use crate::effect::{FileEffect, FilePlan, current_image, image_of, image_text};
use crate::error::ToolError;
use crate::fsops::{blocking, create_if_absent, io_error, metadata_if_exists, replace_atomically};
use crate::observe::{FileSeen, FileVersion, Observation, target_lock};
use crate::path::{display_relative, resolve};
use crate::tool::{PlanFuture, Tool, ToolFuture, ToolOutcome, parse_arguments};

/// Lines longer than this many bytes are cut in `read` output.
pub const READ_MAX_LINE_BYTES: usize = 2_000;

/// The marker that ends a line `read` cut at [`READ_MAX_LINE_BYTES`].
pub const LINE_TRUNCATED_MARKER: &str = "… [line truncated]";

/// `read {path, offset?, limit?}`: reads a UTF-8 text file by lines.
///
/// - `offset`: the 1-based number of the first line to return (default 1; 0 is read as 1).
///   An offset past the last line is `INVALID_ARGUMENTS`.
/// - `limit`: the most lines to return (default [`ToolLimits::read_default_lines`](crate::ToolLimits::read_default_lines), at least 1).
///
/// Result: `{"path", "content", "start_line", "end_line", "total_lines"}` plus
/// `"next_offset"` when lines remain after `end_line` and `"truncated": true` when the output
/// was cut by [`ToolLimits::output_cap_bytes`](crate::ToolLimits::output_cap_bytes) or a line
/// was cut at [`READ_MAX_LINE_BYTES`] (marked with [`LINE_TRUNCATED_MARKER`]). `content` is the
/// text of lines `start_line..=end_line` exactly as in the file (newlines included);
/// `end_line < start_line` when no line is returned (an empty file). `path` is
/// workspace-relative.
///
/// Records the file's version for the calling session (or `absent` when the file is missing),
/// which later `write`/`edit` calls check, and reports what it saw to the context's
/// [`SeenObserver`](crate::SeenObserver) (the image of the whole file, or none), so a runtime
/// can rebuild the observation after a restart ([`crate::restore_observations`]).
///
/// Errors: `FS_NOT_FOUND`, `FS_IS_DIRECTORY`, `FS_NOT_A_FILE`, `FS_NOT_TEXT`,
/// `FS_PATH_OUTSIDE_WORKSPACE`, `INVALID_ARGUMENTS`, `FS_IO`.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadTool;

/// `write {path, content}`: creates or replaces a file with `content` (UTF-8 text).
///
/// Guard (REFERENCE a.12): when the calling session has not read the file or last saw it
/// absent, the write only creates it (a file already there is `FS_NOT_OBSERVED`); when it last
/// saw version `v`, the write replaces the file only if it is still at `v` (changed or deleted
/// → `FS_STALE_VERSION`; a deleted file is never recreated). Missing parent directories are
/// created. The new content is published atomically (a temp file renamed or linked into
/// place), keeping the permissions of a replaced file.
///
/// Result: `{"path", "bytes", "created"}` (`bytes` written, `created` true for a new file).
///
/// Errors: `FS_NOT_OBSERVED`, `FS_STALE_VERSION`, `FS_IS_DIRECTORY`, `FS_NOT_A_DIRECTORY`
/// (a parent is a file), `FS_PATH_OUTSIDE_WORKSPACE`, `INVALID_ARGUMENTS`, `FS_IO`.
#[derive(Debug, Default, Clone, Copy)]
pub struct WriteTool;

/// `edit {path, old_string, new_string, replace_all?}`: exact string replacement in a UTF-8
/// text file the calling session has read.
///
/// Order of checks: the stale-version guard first (unseen → `FS_NOT_OBSERVED`; missing file →
/// `FS_NOT_FOUND`, or `FS_STALE_VERSION` when the session had seen it present; changed since
/// last seen, or created since the session saw it absent → `FS_STALE_VERSION`), then literal
/// matching (no match → `FS_EDIT_NOT_FOUND`; several matches without `replace_all` →
/// `FS_AMBIGUOUS_EDIT`). `old_string` must be non-empty and differ from `new_string`.
///
/// Result: `{"path", "replacements"}`.
///
/// Errors: the codes above plus `FS_IS_DIRECTORY`, `FS_NOT_A_FILE`, `FS_NOT_TEXT`,
/// `FS_PATH_OUTSIDE_WORKSPACE`, `INVALID_ARGUMENTS`, `FS_IO`.
#[derive(Debug, Default, Clone, Copy)]
pub struct EditTool;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    path: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: Option<bool>,
}

impl Tool for ReadTool {
    fn name(&self) -> &str {
        "read"
    }

    fn description(&self) -> &str {
        "Read a UTF-8 text file in the workspace by lines. Returns the text of the requested \
         lines (exactly as in the file) with start_line, end_line and total_lines; next_offset \
         is present when more lines follow. Read a file before you write or edit it."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace root (or absolute inside it)."},
                "offset": {"type": "integer", "minimum": 0, "description": "1-based number of the first line to return (default 1)."},
                "limit": {"type": "integer", "minimum": 1, "description": "Maximum number of lines to return (default 2000)."}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn output_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"},
                "start_line": {"type": "integer"},
                "end_line": {"type": "integer"},
                "total_lines": {"type": "integer"},
                "next_offset": {"type": "integer"},
                "truncated": {"type": "boolean"}
            },
            "required": ["path", "content", "start_line", "end_line", "total_lines"],
            "additionalProperties": false
        }))
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: ReadArgs = parse_arguments(args)?;
            let ctx = ctx.clone();
            blocking(move || read_file(&ctx, &args)).await
        })
    }
}

impl Tool for WriteTool {
    fn name(&self) -> &str {
        "write"
    }

    fn description(&self) -> &str {
        "Create a file, or replace the whole content of a file you have read. Fails with \
         FS_NOT_OBSERVED for an existing file you have not read, and \
         with FS_STALE_VERSION when the file changed since you read it. Prefer edit for \
         changes to existing files."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace root (or absolute inside it)."},
                "content": {"type": "string", "description": "The complete new content of the file."}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        })
    }

    fn output_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "bytes": {"type": "integer"},
                "created": {"type": "boolean"}
            },
            "required": ["path", "bytes", "created"],
            "additionalProperties": false
        }))
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let ctx = ctx.clone();
            if let Some(plan) = ctx.file_plan().cloned() {
                return blocking(move || commit(&ctx, &plan)).await;
            }
            let args: WriteArgs = parse_arguments(args)?;
            blocking(move || commit(&ctx, &plan_write(&ctx, &args)?)).await
        })
    }

    fn plan<'a>(&'a self, ctx: &'a ToolContext, args: Value) -> Option<PlanFuture<'a>> {
        Some(Box::pin(async move {
            let args: WriteArgs = parse_arguments(args)?;
            let ctx = ctx.clone();
            blocking(move || plan_write(&ctx, &args)).await
        }))
    }
}

impl Tool for EditTool {
    fn name(&self) -> &str {
        "edit"
    }

    fn description(&self) -> &str {
        "Replace an exact string in a file you have read. old_string must match the file \
         exactly (whitespace included) and be unique unless replace_all is true. Fails with \
         FS_STALE_VERSION when the file changed since you read it."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace root (or absolute inside it)."},
                "old_string": {"type": "string", "description": "The exact text to replace (non-empty)."},
                "new_string": {"type": "string", "description": "The replacement text (must differ from old_string)."},
                "replace_all": {"type": "boolean", "description": "Replace every occurrence instead of exactly one (default false)."}
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": false
        })
    }

    fn output_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "replacements": {"type": "integer"}
            },
            "required": ["path", "replacements"],
            "additionalProperties": false
        }))
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let ctx = ctx.clone();
            if let Some(plan) = ctx.file_plan().cloned() {
                return blocking(move || commit(&ctx, &plan)).await;
            }
            let args: EditArgs = parse_arguments(args)?;
            blocking(move || commit(&ctx, &plan_edit(&ctx, &args)?)).await
        })
    }

    fn plan<'a>(&'a self, ctx: &'a ToolContext, args: Value) -> Option<PlanFuture<'a>> {
        Some(Box::pin(async move {
            let args: EditArgs = parse_arguments(args)?;
            let ctx = ctx.clone();
            blocking(move || plan_edit(&ctx, &args)).await
        }))
    }
}

fn read_file(ctx: &ToolContext, args: &ReadArgs) -> ToolOutcome {
    let limit = match args.limit {
        Some(0) => {
            return Err(ToolError::invalid_arguments(
                "field `limit`: must be at least 1",
            ));
        }
        Some(limit) => usize::try_from(limit).unwrap_or(usize::MAX),
        None => ctx.limits().read_default_lines.max(1),
    };
    let start = usize::try_from(args.offset.unwrap_or(1))
        .unwrap_or(usize::MAX)
        .max(1);
    let resolved = resolve(ctx.workspace_root(), &args.path)?;
    let display = resolved.display.as_str();
    refuse_special_file(&resolved.absolute, display)?;
    let file = match File::open(&resolved.absolute) {
        Ok(file) => file,
        Err(error) => {
            let error = io_error(display, error);
            if matches!(error, ToolError::NotFound { .. }) {
                ctx.observations()
                    .record(ctx.owner(), &resolved.absolute, Observation::Absent);
                ctx.report_seen(FileSeen {
                    path: display.to_owned(),
                    image: None,
                });
            }
            return Err(error);
        }
    };
    // The version comes from the open handle, before reading: if the file changes while we
    // read, the recorded version is the older one and a later write fails safe (stale).
    let metadata = file
        .metadata()
        .map_err(|source| io_error(display, source))?;
    if metadata.is_dir() {
        return Err(ToolError::IsDirectory {
            path: display.to_owned(),
        });
    }
    let version = FileVersion::of(&metadata);

    let cap = ctx.limits().output_cap_bytes;
    let last_wanted = start.saturating_add(limit - 1);
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    let mut line_number = 0usize;
    let mut content = String::new();
    // The whole content's image, for the runtime's record of what was seen (`FileSeen`).
    let mut hasher = Sha256::new();
    let mut end_line = start - 1;
    let mut truncated = false;
    let mut budget_exhausted = false;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|source| io_error(display, source))?;
        if read == 0 {
            break;
        }
        hasher.update(&line);
        line_number += 1;
        let text = as_text(&line, display)?;
        if line_number < start || line_number > last_wanted || budget_exhausted {
            continue;
        }
        let (piece, cut) = cap_line(text);
        if content.len() + piece.len() > cap {
            budget_exhausted = true;
            truncated = true;
            if end_line < start {
                // Not even the first line fits: show as much of it as the cap allows.
                let room = floor_char_boundary(&piece, cap);
                content.push_str(&piece[..room]);
                end_line = line_number;
            }
            continue;
        }
        truncated |= cut;
        content.push_str(&piece);
        end_line = line_number;
    }
    let total_lines = line_number;
    if start > 1 && start > total_lines {
        return Err(ToolError::invalid_arguments(format!(
            "field `offset`: line {start} is past the end of {display} ({total_lines} lines)"
        )));
    }
    ctx.observations().record(
        ctx.owner(),
        &resolved.absolute,
        Observation::Present(version),
    );
    ctx.report_seen(FileSeen {
        path: display.to_owned(),
        image: Some(image_text(&hasher.finalize())),
    });

    let mut result = Map::new();
    result.insert("path".into(), json!(display));
    result.insert("content".into(), json!(content));
    result.insert("start_line".into(), json!(start));
    result.insert("end_line".into(), json!(end_line));
    result.insert("total_lines".into(), json!(total_lines));
    if end_line < total_lines {
        result.insert("next_offset".into(), json!(end_line + 1));
    }
    if truncated {
        result.insert("truncated".into(), json!(true));
    }
    Ok(Value::Object(result))
}

/// Decides what `write` does, with every check of the stale-version guard, and changes
/// nothing: the file must be absent when the session has not seen it or last saw it absent
/// (`FS_NOT_OBSERVED` otherwise), or still at the version the session last saw.
fn plan_write(ctx: &ToolContext, args: &WriteArgs) -> Result<FilePlan, ToolError> {
    let resolved = resolve(ctx.workspace_root(), &args.path)?;
    let display = resolved.display.as_str();
    let target = resolved.absolute.as_path();
    if metadata_if_exists(target, display)?.is_some_and(|metadata| metadata.is_dir()) {
        return Err(ToolError::IsDirectory {
            path: display.to_owned(),
        });
    }

    let lock = target_lock(target);
    let _guard = troupe_protocol::sync::lock(&lock);
    let observation = ctx.observations().get(ctx.owner(), target);
    let content = args.content.as_bytes().to_vec();
    let post_image = image_of(&content);
    let (pre_image, replaces) = match observation {
        Observation::Unseen | Observation::Absent => {
            if std::fs::symlink_metadata(target).is_ok() {
                return Err(ToolError::NotObserved {
                    path: display.to_owned(),
                });
            }
            (None, None)
        }
        Observation::Present(expected) => {
            let Some(current) = metadata_if_exists(target, display)? else {
                return Err(ToolError::StaleVersion {
                    path: display.to_owned(),
                    reason: "was deleted",
                });
            };
            if current.is_dir() {
                return Err(ToolError::IsDirectory {
                    path: display.to_owned(),
                });
            }
            if FileVersion::of(&current) != expected {
                return Err(ToolError::StaleVersion {
                    path: display.to_owned(),
                    reason: "changed",
                });
            }
            (current_image(target, display)?, Some(expected))
        }
    };
    let created = replaces.is_none();
    Ok(FilePlan {
        effect: FileEffect {
            path: display.to_owned(),
            pre_image,
            post_image,
            result: json!({"path": display, "bytes": content.len(), "created": created}),
        },
        absolute: resolved.absolute.clone(),
        content,
        replaces,
    })
}

/// Carries out a planned `write`/`edit` under the target's lock: creates the file when the plan
/// says it was absent (missing parent directories included; something there now is
/// `FS_NOT_OBSERVED`), else replaces it only while it is still at the planned version and
/// pre-image (`FS_STALE_VERSION` otherwise, nothing written). Records the new version for the
/// calling session and returns the planned result.
fn commit(ctx: &ToolContext, plan: &FilePlan) -> ToolOutcome {
    let display = plan.effect.path.as_str();
    let target = plan.absolute.as_path();
    let lock = target_lock(target);
    let _guard = troupe_protocol::sync::lock(&lock);
    let version = match &plan.replaces {
        None => {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(|source| {
                    if parent.is_dir() {
                        io_error(display, source)
                    } else {
                        // Some component of the parent exists but is not a directory.
                        ToolError::NotADirectory {
                            path: parent
                                .strip_prefix(ctx.workspace_root())
                                .map(display_relative)
                                .unwrap_or_else(|_| parent.display().to_string()),
                        }
                    }
                })?;
            }
            create_if_absent(target, &plan.content, display)?.ok_or_else(|| {
                ToolError::NotObserved {
                    path: display.to_owned(),
                }
            })?
        }
        Some(expected) => {
            let stale = |reason| ToolError::StaleVersion {
                path: display.to_owned(),
                reason,
            };
            let Some(current) = metadata_if_exists(target, display)? else {
                return Err(stale("was deleted"));
            };
            if current.is_dir() {
                return Err(ToolError::IsDirectory {
                    path: display.to_owned(),
                });
            }
            if FileVersion::of(&current) != *expected
                || current_image(target, display)? != plan.effect.pre_image
            {
                return Err(stale("changed"));
            }
            replace_atomically(target, &plan.content, &current, display)?
        }
    };
    ctx.observations()
        .record(ctx.owner(), target, Observation::Present(version));
    Ok(plan.effect.result.clone())
}

/// Decides what `edit` does — the guard first, then literal matching — and changes nothing.
fn plan_edit(ctx: &ToolContext, args: &EditArgs) -> Result<FilePlan, ToolError> {
    if args.old_string.is_empty() {
        return Err(ToolError::invalid_arguments(
            "field `old_string`: must not be empty",
        ));
    }
    if args.old_string == args.new_string {
        return Err(ToolError::invalid_arguments(
            "field `new_string`: identical to old_string, so there is nothing to change",
        ));
    }
    let resolved = resolve(ctx.workspace_root(), &args.path)?;
    let display = resolved.display.as_str();
    let target = resolved.absolute.as_path();

    let lock = target_lock(target);
    let _guard = troupe_protocol::sync::lock(&lock);
    let observation = ctx.observations().get(ctx.owner(), target);
    refuse_special_file(target, display)?;
    let mut file = match File::open(target) {
        Ok(file) => file,
        Err(error) => {
            return Err(match (io_error(display, error), &observation) {
                (ToolError::NotFound { path }, Observation::Present(_)) => {
                    ToolError::StaleVersion {
                        path,
                        reason: "was deleted",
                    }
                }
                (error, _) => error,
            });
        }
    };
    let metadata = file
        .metadata()
        .map_err(|source| io_error(display, source))?;
    if metadata.is_dir() {
        return Err(ToolError::IsDirectory {
            path: display.to_owned(),
        });
    }
    // The guard comes before literal matching: a stale edit never reports
    // FS_EDIT_NOT_FOUND or FS_AMBIGUOUS_EDIT.
    match observation {
        Observation::Unseen => {
            return Err(ToolError::NotObserved {
                path: display.to_owned(),
            });
        }
        Observation::Absent => {
            return Err(ToolError::StaleVersion {
                path: display.to_owned(),
                reason: "was created",
            });
        }
        Observation::Present(expected) => {
            if FileVersion::of(&metadata) != expected {
                return Err(ToolError::StaleVersion {
                    path: display.to_owned(),
                    reason: "changed",
                });
            }
        }
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|source| io_error(display, source))?;
    let text = as_text(&bytes, display)?;
    let count = text.matches(args.old_string.as_str()).count();
    let replace_all = args.replace_all.unwrap_or(false);
    if count == 0 {
        return Err(ToolError::EditNotFound {
            path: display.to_owned(),
        });
    }
    if count > 1 && !replace_all {
        return Err(ToolError::AmbiguousEdit {
            path: display.to_owned(),
            count,
        });
    }
    let updated = if replace_all {
        text.replace(args.old_string.as_str(), &args.new_string)
    } else {
        text.replacen(args.old_string.as_str(), &args.new_string, 1)
    };
    Ok(FilePlan {
        effect: FileEffect {
            path: display.to_owned(),
            pre_image: Some(image_of(&bytes)),
            post_image: image_of(updated.as_bytes()),
            result: json!({"path": display, "replacements": count}),
        },
        absolute: resolved.absolute.clone(),
        content: updated.into_bytes(),
        replaces: Some(FileVersion::of(&metadata)),
    })
}

/// Refuses FIFOs, sockets and devices before anything opens them (opening a FIFO blocks).
fn refuse_special_file(path: &std::path::Path, display: &str) -> Result<(), ToolError> {
    match metadata_if_exists(path, display)? {
        Some(metadata) if !metadata.is_file() && !metadata.is_dir() => Err(ToolError::NotAFile {
            path: display.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// `bytes` as text, or `FS_NOT_TEXT` for NUL bytes or invalid UTF-8.
fn as_text<'b>(bytes: &'b [u8], display: &str) -> Result<&'b str, ToolError> {
    if bytes.contains(&0) {
        return Err(ToolError::NotText {
            path: display.to_owned(),
        });
    }
    std::str::from_utf8(bytes).map_err(|_| ToolError::NotText {
        path: display.to_owned(),
    })
}

/// Cuts a line longer than [`READ_MAX_LINE_BYTES`], keeping its line ending.
fn cap_line(line: &str) -> (std::borrow::Cow<'_, str>, bool) {
    if line.len() <= READ_MAX_LINE_BYTES {
        return (std::borrow::Cow::Borrowed(line), false);
    }
    let keep = floor_char_boundary(line, READ_MAX_LINE_BYTES);
    let ending = if line.ends_with("\r\n") {
        "\r\n"
    } else if line.ends_with('\n') {
        "\n"
    } else {
        ""
    };
    (
        std::borrow::Cow::Owned(format!("{}{LINE_TRUNCATED_MARKER}{ending}", &line[..keep])),
        true,
    )
}

/// The largest char boundary of `text` not above `index`.
pub(crate) fn floor_char_boundary(text: &str, index: usize) -> usize {
    if index >= text.len() {
        return text.len();
    }
    let mut boundary = index;
    while !text.is_char_boundary(boundary) {
        boundary -= 1;
    }
    boundary
}
