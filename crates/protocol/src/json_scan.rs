//! Byte-level readers for the hand-written JSON fast paths (the journal's envelope prefix, the
//! Team crate's one-pass line decoder, the session crate's replay check). Each reads one token
//! at a byte index of a line and returns `None` for anything it does not read plainly, so the
//! caller falls back to a full `serde_json` parse; none of them allocates. [`Cursor`] is the
//! structural part the line readers share (objects, arrays, keys, integers, booleans);
//! [`find_special`] finds where the plain part of a string ends.

/// The index of the first byte at or after `at` that is not JSON whitespace (space, tab, CR,
/// LF); `line.len()` when there is none.
#[inline]
pub fn skip_ws(line: &[u8], mut at: usize) -> usize {
    while matches!(line.get(at), Some(b' ' | b'\t' | b'\r' | b'\n')) {
        at += 1;
    }
    at
}

/// A plain non-negative JSON integer at `at` that fits `u64` (no sign, fraction, exponent or
/// leading zero), and the index after its last digit. `None` for anything else (including
/// `1.0`, `1e3` and values over `u64::MAX`).
#[inline]
pub fn read_u64(line: &[u8], at: usize) -> Option<(u64, usize)> {
    let rest = line.get(at..)?;
    let digits = digit_run(rest);
    // Up to 19 digits cannot overflow; 20 may; more always do.
    if digits == 0 || digits > 20 || (digits > 1 && rest[0] == b'0') {
        return None;
    }
    if matches!(rest.get(digits), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    let value = if digits < 20 {
        rest[..digits]
            .iter()
            .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'))
    } else {
        rest[..digits].iter().try_fold(0u64, |n, &d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })?
    };
    Some((value, at + digits))
}

/// How many bytes of a string [`find_special`] scans eight at a time before it switches to
/// memchr.
const SWAR_BYTES: usize = 64;

/// The index of the first byte at or after `at` that ends the plain part of a JSON string: a
/// `"`, a `\\` or a control character (below 0x20). `None` when the line has no `"` or `\\`
/// after `at` (the string is not closed; a control character before the end may then go
/// unreported, which changes nothing for a caller: the string is not read either way). Eight
/// bytes at a time for the first [`SWAR_BYTES`] (most strings are short), then memchr for a
/// quote or backslash and one pass for control characters over what it skipped.
#[inline]
pub fn find_special(bytes: &[u8], mut at: usize) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = ONES << 7;
    let limit = at + SWAR_BYTES;
    while let Some(chunk) = bytes.get(at..at + 8)
        && at < limit
    {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        let quote = word ^ (ONES * u64::from(b'"'));
        let backslash = word ^ (ONES * u64::from(b'\\'));
        // Per byte: zero (or below 0x20) sets its high bit; a borrow can only set bits above
        // the first such byte, so the lowest set bit is exact.
        let found = (quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (word.wrapping_sub(ONES * 0x20) & !word);
        let found = found & HIGH;
        if found != 0 {
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    if at < limit {
        // Fewer than eight bytes left.
        return (at..bytes.len()).find(|&i| matches!(bytes[i], b'"' | b'\\' | 0..0x20));
    }
    let end = at + memchr::memchr2(b'"', b'\\', bytes.get(at..)?)?;
    let skipped = &bytes[at..end];
    // A minimum is a vectorized pass; the position is only looked for when it is needed.
    if skipped.iter().copied().min().is_some_and(|b| b < 0x20) {
        return skipped.iter().position(|&b| b < 0x20).map(|i| at + i);
    }
    Some(end)
}

/// A strict cursor over one line's bytes: the structural readers the hand-written fast paths
/// share (the Team crate's line decoder, the session crate's replay check). A reader type
/// holds the line and its position (`bytes`, `at`, `set_at`) and gets these; its own methods
/// read its records. Every reader answers `None` for anything it does not read plainly, and
/// then the position is unspecified (the caller gives up on the line).
pub trait Cursor<'a>: Sized {
    /// The line.
    fn bytes(&self) -> &'a [u8];
    /// The index of the next unread byte.
    fn at(&self) -> usize;
    /// Moves to byte index `at`.
    fn set_at(&mut self, at: usize);

    /// Skips JSON whitespace.
    #[inline]
    fn ws(&mut self) {
        let at = skip_ws(self.bytes(), self.at());
        self.set_at(at);
    }

    /// The next byte, if any.
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.at()).copied()
    }

    /// Skips whitespace and the byte `byte` (`None` when the next byte is another).
    #[inline]
    fn eat(&mut self, byte: u8) -> Option<()> {
        self.ws();
        (self.peek() == Some(byte)).then(|| self.set_at(self.at() + 1))
    }

    /// An object: calls `member` with each key (its bytes; a key with an escape or a control
    /// character is not read plainly), positioned before its value.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.ws();
        if self.peek() == Some(b'}') {
            self.set_at(self.at() + 1);
            return Some(());
        }
        loop {
            self.ws();
            let key = self.key()?;
            self.eat(b':')?;
            self.ws();
            member(self, key)?;
            self.ws();
            match self.peek()? {
                b',' => self.set_at(self.at() + 1),
                b'}' => {
                    self.set_at(self.at() + 1);
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array: calls `item` before each element; the number of elements.
    fn array(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<usize> {
        self.eat(b'[')?;
        self.ws();
        if self.peek() == Some(b']') {
            self.set_at(self.at() + 1);
            return Some(0);
        }
        let mut n = 0;
        loop {
            self.ws();
            item(self)?;
            n += 1;
            self.ws();
            match self.peek()? {
                b',' => self.set_at(self.at() + 1),
                b']' => {
                    self.set_at(self.at() + 1);
                    return Some(n);
                }
                _ => return None,
            }
        }
    }

    /// A string without escapes or control characters at the position (no whitespace
    /// skipped): the byte range between its quotes.
    #[inline]
    fn plain_span(&mut self) -> Option<(usize, usize)> {
        let bytes = self.bytes();
        if bytes.get(self.at()) != Some(&b'"') {
            return None;
        }
        let start = self.at() + 1;
        let end = find_special(bytes, start)?;
        if bytes[end] != b'"' {
            return None;
        }
        self.set_at(end + 1);
        Some((start, end))
    }

    /// A key: a string without escapes or control characters, as bytes. (Callers compare it
    /// with ASCII names, so its UTF-8 needs no check.)
    #[inline]
    fn key(&mut self) -> Option<&'a [u8]> {
        let (start, end) = self.plain_span()?;
        Some(&self.bytes()[start..end])
    }

    /// A plain non-negative integer fitting `u64` ([`read_u64`]), after whitespace.
    #[inline]
    fn u64(&mut self) -> Option<u64> {
        self.ws();
        let (value, after) = read_u64(self.bytes(), self.at())?;
        self.set_at(after);
        Some(value)
    }

    /// `true` or `false`, after whitespace (a literal must end there: `trueish` is not JSON).
    #[inline]
    fn bool(&mut self) -> Option<bool> {
        self.ws();
        let rest = self.bytes().get(self.at()..)?;
        let (value, len) = if rest.starts_with(b"true") {
            (true, 4)
        } else if rest.starts_with(b"false") {
            (false, 5)
        } else {
            return None;
        };
        if rest.get(len).is_some_and(u8::is_ascii_alphanumeric) {
            return None;
        }
        self.set_at(self.at() + len);
        Some(value)
    }
}

/// The number of ASCII digits `bytes` starts with, eight at a time.
#[inline]
fn digit_run(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    let mut n = 0;
    while let Some(chunk) = bytes.get(n..n + 8) {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        // Per byte: below `0` borrows, above `9` carries into the high bit; a borrow or carry
        // can only reach bytes above the first non-digit, so the lowest flagged byte is exact.
        let flagged = (word.wrapping_sub(ONES * u64::from(b'0')) | word.wrapping_add(ONES * 0x46))
            & (ONES << 7);
        if flagged != 0 {
            return n + (flagged.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    while bytes.get(n).is_some_and(u8::is_ascii_digit) {
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_read_plainly_or_refused() {
        assert_eq!(read_u64(b"0,", 0), Some((0, 1)));
        assert_eq!(read_u64(b"x 123456789012}", 2), Some((123_456_789_012, 14)));
        assert_eq!(read_u64(b"18446744073709551615", 0), Some((u64::MAX, 20)));
        for bad in [
            &b"18446744073709551616"[..],
            b"01",
            b"1.0",
            b"1e3",
            b"-1",
            b"",
            b"x",
        ] {
            assert_eq!(read_u64(bad, 0), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(skip_ws(b" \t\r\n1", 0), 4);
        assert_eq!(skip_ws(b"  ", 0), 2);
    }

    /// `find_special` finds the first `"`, `\\` or control character at or after `at`, as a
    /// byte-by-byte search does, at every start and length around its eight-byte and memchr
    /// steps (a string with neither quote nor backslash after `at` may give `None`).
    #[test]
    fn find_special_finds_the_first_special_byte() {
        let plain =
            b"abcdefghijklmnopqrstuvwxyz0123456789 ABCDEFGHIJKLMNOPQRSTUVWXYZ \xc3\xa9!#$%&'()*+";
        for special in [b'"', b'\\', 0x00, 0x0a, 0x1f] {
            for len in [0usize, 1, 7, 8, 9, 63, 64, 65, 70, 130, 200] {
                for at in [0usize, 1, 5, 8] {
                    let mut line: Vec<u8> = plain.iter().cycle().take(len).copied().collect();
                    line.push(special);
                    line.extend_from_slice(b"tail\"");
                    let naive =
                        (at..line.len()).find(|&i| matches!(line[i], b'"' | b'\\' | 0..0x20));
                    assert_eq!(find_special(&line, at), naive, "{special} {len} {at}");
                }
            }
        }
        assert_eq!(find_special(b"abc", 0), None);
        assert_eq!(find_special(&[b'a'; 100], 0), None);
    }
}
