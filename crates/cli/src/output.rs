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

use std::borrow::Cow;
use std::io::{self, Write};

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
