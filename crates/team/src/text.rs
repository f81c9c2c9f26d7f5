//! Text and write-scope rules (REFERENCE c.11.6, c.11.7, c.11.1).

use crate::error::TeamError;

/// Maximum length of a description, provider or task subject, in UTF-16 code units.
pub const SHORT_TEXT_MAX: usize = 200;
/// Maximum length of a task description, in UTF-16 code units.
pub const TASK_DESCRIPTION_MAX: usize = 16_384;

/// Whether `c` is whitespace for JavaScript's `String.prototype.trim` (WhiteSpace and
/// LineTerminator of ECMA-262). It differs from Rust's [`char::is_whitespace`] in two places:
/// U+FEFF counts, U+0085 does not.
fn is_js_whitespace(c: char) -> bool {
    match c {
        '\u{FEFF}' => true,
        '\u{0085}' => false,
        c => c.is_whitespace(),
    }
}

/// Trims leading and trailing whitespace exactly as JavaScript's `trim()` does.
pub fn js_trim(value: &str) -> &str {
    value.trim_matches(is_js_whitespace)
}

/// The length of `value` in UTF-16 code units (JavaScript's `length`).
pub fn utf16_len(value: &str) -> usize {
    value.chars().map(char::len_utf16).sum()
}

/// `requiredText(value, field, max)` of REFERENCE c.11.6: trims (JavaScript whitespace),
/// refuses an empty result or one longer than `max` UTF-16 code units, and returns the trimmed
/// text (which is what gets stored).
///
/// # Errors
/// [`TeamError::InvalidArgument`] (`TEAM_INVALID_ARGUMENT`) naming `field`.
pub fn required_text(value: &str, field: &str, max: usize) -> Result<String, TeamError> {
    let trimmed = js_trim(value);
    if trimmed.is_empty() {
        return Err(TeamError::invalid_argument(format!(
            "{field} must not be empty"
        )));
    }
    let len = utf16_len(trimmed);
    if len > max {
        return Err(TeamError::invalid_argument(format!(
            "{field} must be at most {max} characters (UTF-16 units), got {len}"
        )));
    }
    Ok(trimmed.to_owned())
}

/// Normalizes one write scope (REFERENCE c.11.7): `\` → `/`, one leading `./` removed, every
/// trailing `/` removed; then refused if empty, absolute (`/…`), drive-prefixed (`C:…`) or if
/// any `/`-segment is empty, `.` or `..`.
///
/// # Errors
/// [`TeamError::InvalidWriteScope`] (`TEAM_INVALID_WRITE_SCOPE`) naming the scope and rule.
pub fn normalize_write_scope(scope: &str) -> Result<String, TeamError> {
    let invalid = |reason: &str| TeamError::InvalidWriteScope {
        scope: scope.to_owned(),
        reason: reason.to_owned(),
    };
    let slashed = scope.replace('\\', "/");
    let without_dot = slashed.strip_prefix("./").unwrap_or(&slashed);
    let normalized = without_dot.trim_end_matches('/');
    if normalized.is_empty() {
        return Err(invalid("it is empty"));
    }
    if normalized.starts_with('/') {
        return Err(invalid("it must be relative to the workspace"));
    }
    let bytes = normalized.as_bytes();
    if bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' {
        return Err(invalid("it must not start with a drive prefix"));
    }
    if normalized
        .split('/')
        .any(|segment| segment.is_empty() || segment == "." || segment == "..")
    {
        return Err(invalid("it must not contain empty, '.' or '..' segments"));
    }
    Ok(normalized.to_owned())
}

/// Normalizes every scope and removes duplicates, keeping first occurrences
/// (`['src','./src/','src']` → `['src']`).
///
/// # Errors
/// The first scope's [`TeamError::InvalidWriteScope`].
pub fn normalize_write_scopes<S: AsRef<str>>(scopes: &[S]) -> Result<Vec<String>, TeamError> {
    let mut out: Vec<String> = Vec::with_capacity(scopes.len());
    for scope in scopes {
        let normalized = normalize_write_scope(scope.as_ref())?;
        if !out.contains(&normalized) {
            out.push(normalized);
        }
    }
    Ok(out)
}

/// Whether two normalized scopes overlap (REFERENCE c.11.1): equal, or one is the other plus
/// `/…` (a path-component prefix; `src` and `src2` do not overlap).
pub fn scopes_overlap(a: &str, b: &str) -> bool {
    fn under(child: &str, parent: &str) -> bool {
        child
            .strip_prefix(parent)
            .is_some_and(|rest| rest.starts_with('/'))
    }
    a == b || under(a, b) || under(b, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trim_matches_javascript() {
        assert_eq!(js_trim("\u{FEFF} a \u{00A0}\n"), "a");
        assert_eq!(js_trim("\u{0085}a"), "\u{0085}a");
    }

    #[test]
    fn utf16_units() {
        assert_eq!(utf16_len("ab"), 2);
        assert_eq!(utf16_len("é"), 1);
        assert_eq!(utf16_len("😀"), 2);
    }

    #[test]
    fn overlap() {
        assert!(scopes_overlap("src", "src"));
        assert!(scopes_overlap("src", "src/nested"));
        assert!(scopes_overlap("src/nested", "src"));
        assert!(!scopes_overlap("src", "src2"));
        assert!(!scopes_overlap("src", "docs"));
    }
}
