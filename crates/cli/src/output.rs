//! The binary's two output streams, and what may be printed on them.
//!
//! - [`Stdout`]: command output. A reader that went away (`troupe sessions | head -1`) is not
//!   a failure: the first broken-pipe error closes the writer, every later write is a no-op,
//!   and the command ends with success. Any other write error is returned (exit 1).
//! - [`eprint_line!`]: one line on stderr. Write errors are ignored (`2>/dev/full` must not
//!   panic, and there is nowhere left to report them).
//! - [`escape_controls`]: stored data (event types, working directories) is untrusted; control
//!   characters are shown as visible escapes so they cannot drive the terminal or break the
//!   one-line formats.
//! - The words and numbers every command prints alike: [`count`] (`1 turn`, `2 turns`),
//!   [`stats_text`], [`tokens_text`], [`format_time`], [`align_columns`], [`fit`].

use std::borrow::Cow;
use std::io::{self, Write};

use troupe_session::TranscriptStats;

/// Writes one line on stderr, ignoring write errors (unlike `eprintln!`, which panics).
macro_rules! eprint_line {
    ($($arg:tt)*) => {
        $crate::output::stderr_line(format_args!($($arg)*))
    };
}
pub(crate) use eprint_line;

/// The function behind [`eprint_line!`].
pub(crate) fn stderr_line(args: std::fmt::Arguments<'_>) {
    let mut err = io::stderr().lock();
    let _ = err.write_fmt(args);
    let _ = err.write_all(b"\n");
    let _ = err.flush();
}

/// Locked stdout for command output, treating a closed pipe as the end of the output.
pub(crate) struct Stdout {
    inner: io::StdoutLock<'static>,
    closed: bool,
}

impl Stdout {
    pub(crate) fn lock() -> Self {
        Self {
            inner: io::stdout().lock(),
            closed: false,
        }
    }

    /// Whether the reader has gone away (nothing more will be written).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    /// Maps a broken pipe to success and remembers it.
    fn absorb<T>(&mut self, result: io::Result<T>, done: T) -> io::Result<T> {
        match result {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(done)
            }
            other => other,
        }
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        let result = self.inner.write(buf);
        self.absorb(result, buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let result = self.inner.flush();
        self.absorb(result, ())
    }
}

/// Whether `c` is shown escaped: C0/C1 controls and DEL, the line and paragraph separators,
/// and the bidirectional overrides (which can reorder what a terminal shows).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with control characters shown as Rust escapes (`\n`, `\u{1b}`); other text,
/// backslashes included, is unchanged.
pub(crate) fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if needs_escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` with control characters escaped, cut to at most `max` display columns (ending with
/// `…` when cut), and its display width.
pub(crate) fn fit(text: &str, max: usize) -> (String, usize) {
    use unicode_width::UnicodeWidthChar;
    let text = escape_controls(text);
    let width_of = |c: char| c.width().unwrap_or(0);
    let full: usize = text.chars().map(width_of).sum();
    if full <= max {
        return (text.into_owned(), full);
    }
    if max == 0 {
        return (String::new(), 0);
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = width_of(c);
        if used + w > max - 1 {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    (out, used + 1)
}

/// Lays out `rows` (cells already escaped) as columns two spaces apart, each as wide as its
/// widest cell (in characters); the last column is not padded.
pub(crate) fn align_columns(rows: &[Vec<String>]) -> Vec<String> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; columns];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    let pad = widths[i].saturating_sub(cell.chars().count()) + 2;
                    line.push_str(cell);
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            line
        })
        .collect()
}

/// `2 turns, 5 tool calls, tokens 120 in / 30 out` for a session whose log holds
/// `server_answers` answers of a model server (see [`tokens_text`]).
pub(crate) fn stats_text(stats: &TranscriptStats, server_answers: usize) -> String {
    format!(
        "{}, {}, {}",
        count(stats.turns, "turn"),
        count(stats.tool_calls, "tool call"),
        tokens_text(stats.tokens_in, stats.tokens_out, server_answers as u64)
    )
}

/// `tokens 120 in / 30 out`; `usage not reported by the server` when `server_answers` answers
/// of a model server arrived and not one token was counted (a server that omits `usage`:
/// llama-cpp-python ignores `stream_options`). A prompt is never empty, so a server that
/// reports usage never reports 0 in: zero after an answer means nothing was reported. A server
/// that reports usage for some answers only is counted for those. A scripted model's answers
/// are not server answers: it spends no tokens, and says `tokens 0 in / 0 out`.
pub(crate) fn tokens_text(tokens_in: u64, tokens_out: u64, server_answers: u64) -> String {
    if server_answers > 0 && tokens_in == 0 && tokens_out == 0 {
        "usage not reported by the server".to_owned()
    } else {
        format!("tokens {tokens_in} in / {tokens_out} out")
    }
}

/// `1 turn`, `2 turns`.
pub(crate) fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// RFC 3339 UTC with milliseconds; a time humantime cannot show (year 10000 or later) as the
/// raw number, `t=<ms>ms`.
pub(crate) fn format_time(ms: u64) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    let shown = std::time::UNIX_EPOCH
        .checked_add(std::time::Duration::from_millis(ms))
        .is_some_and(|t| write!(text, "{}", humantime::format_rfc3339_millis(t)).is_ok());
    if shown { text } else { format!("t={ms}ms") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_by_characters() {
        let rows = vec![
            vec!["ID".to_owned(), "NAME".to_owned(), "X".to_owned()],
            vec!["é1".to_owned(), "n".to_owned(), "last".to_owned()],
        ];
        assert_eq!(align_columns(&rows), ["ID  NAME  X", "é1  n     last"]);
    }

    #[test]
    fn controls_are_escaped_and_the_rest_is_kept() {
        assert_eq!(escape_controls("plain/type é"), "plain/type é");
        assert!(matches!(escape_controls("plain"), Cow::Borrowed(_)));
        assert_eq!(escape_controls("a\nb"), r"a\nb");
        assert_eq!(escape_controls("\u{1b}[31mred"), r"\u{1b}[31mred");
        assert_eq!(escape_controls("tab\there\r"), r"tab\there\r");
        assert_eq!(
            escape_controls("\u{9b}\u{7f}\u{202e}"),
            r"\u{9b}\u{7f}\u{202e}"
        );
        assert_eq!(escape_controls(r"C:\dir"), r"C:\dir");
    }
}
